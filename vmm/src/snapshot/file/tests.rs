//! The state file's checks: a good file round-trips; truncated, flipped, other-format and
//! other-version files are each refused with their own error.

use super::*;
use crate::snapshot::state::DriveState;

/// A state such as a 2-vCPU VM with one drive gives (register values made up).
pub(crate) fn sample() -> SnapshotState {
    let mut state = SnapshotState {
        osprey_version: OSPREY_VERSION.into(),
        config_json: r#"{"boot-source":{"kernel_image_path":"k"}}"#.into(),
        mem_size_bytes: 256 << 20,
        drives: vec![DriveState {
            drive_id: "data".into(),
            path: "/tmp/data.img".into(),
            size_bytes: 64 << 20,
        }],
        ..Default::default()
    };
    for id in 0..2 {
        let mut vcpu = crate::snapshot::kvm_state::VcpuState {
            id,
            msrs: vec![(0x10, 12345), (0x2ff, 0xc06)],
            tsc_khz: 2_000_000,
            xsave: Some(Default::default()),
            ..Default::default()
        };
        vcpu.regs.rip = 0x10_0000 + u64::from(id);
        vcpu.sregs.cr0 = 0x8000_0031;
        state.vcpus.push(vcpu);
    }
    state.vm.clock.clock = 987_654_321;
    state.nics.push(crate::snapshot::state::NicState {
        iface_id: "eth0".into(),
        enabled_pairs: 2,
    });
    state.vsock = Some(crate::snapshot::state::VsockState {
        guest_cid: 3,
        transport: devices::virtio::pci::state::VirtioPciState {
            config_space: vec![0x1053_1af4; 64],
            msix_table: vec![[0xfee0_0000, 0, 0x41, 0]; 4],
            msix_pending: vec![2],
            driver_features: 1 << 32,
            status: 0xf,
            config_generation: 0,
            config_vector: 0xffff,
            queues: vec![
                devices::virtio::pci::state::QueueState {
                    size: 256,
                    enabled: true,
                    desc: 0x10_0000,
                    driver: 0x10_1000,
                    device: 0x10_2000,
                    vector: 0xffff,
                    used_idx: 7,
                };
                3
            ],
            selects: Default::default(),
        },
    });
    state
}

#[test]
fn a_good_file_round_trips() {
    let bytes = encode(&sample()).expect("encode");
    let back = decode(&bytes).expect("decode");
    assert_eq!(back.vcpus.len(), 2);
    assert_eq!(back.vcpus[1].regs.rip, 0x10_0001);
    assert_eq!(back.vcpus[0].msrs, vec![(0x10, 12345), (0x2ff, 0xc06)]);
    assert_eq!(back.vm.clock.clock, 987_654_321);
    assert_eq!(back.drives, sample().drives);
    assert_eq!(back.vsock, sample().vsock);
    assert_eq!(encode(&back).expect("again"), bytes);
}

#[test]
fn every_truncation_is_refused() {
    let bytes = encode(&sample()).expect("encode");
    for len in 0..bytes.len() {
        let e = decode(&bytes[..len]).expect_err("truncated");
        assert!(
            matches!(
                e,
                StateFileError::ShortHeader { .. } | StateFileError::BodyLength { .. }
            ),
            "at {len}: {e}"
        );
    }
    let e = decode(&bytes[..100]).expect_err("truncated").to_string();
    assert!(e.starts_with("snapshot truncated"), "{e}");
}

#[test]
fn every_flipped_byte_is_refused() {
    let bytes = encode(&sample()).expect("encode");
    for at in 0..bytes.len() {
        let mut bad = bytes.clone();
        bad[at] ^= 0x01;
        let e = decode(&bad).expect_err("flipped");
        let expected = match at {
            0..8 => matches!(e, StateFileError::BadMagic),
            8..12 => matches!(e, StateFileError::FormatVersion { .. }),
            12..20 => matches!(e, StateFileError::BodyLength { .. }),
            _ => matches!(e, StateFileError::Checksum { .. }),
        };
        assert!(expected, "byte {at}: {e}");
    }
}

#[test]
fn another_format_or_osprey_version_is_refused_naming_it() {
    let mut bytes = encode(&sample()).expect("encode");
    bytes[8..12].copy_from_slice(&7u32.to_le_bytes());
    let e = decode(&bytes).expect_err("format 7").to_string();
    assert_eq!(
        e,
        format!("snapshot format version 7; this Osprey ({OSPREY_VERSION}) reads version {FORMAT_VERSION}")
    );
    let mut older = sample();
    older.osprey_version = "0.0.9".into();
    let e = decode(&encode(&older).expect("encode"))
        .expect_err("another version")
        .to_string();
    assert!(e.starts_with("snapshot written by Osprey 0.0.9; "), "{e}");
    let e = decode(b"#!/bin/sh\necho not a snapshot at all\n").expect_err("magic");
    assert!(matches!(e, StateFileError::BadMagic), "{e}");
}

#[test]
fn write_then_read_through_a_file() {
    let path = std::env::temp_dir().join(format!("osprey-state-{}.snap", std::process::id()));
    std::fs::write(&path, encode(&sample()).expect("encode")).expect("write");
    let back = read(&path).expect("read");
    assert_eq!(back.mem_size_bytes, 256 << 20);
    std::fs::remove_file(&path).expect("remove");
    let e = read(&path).expect_err("missing").to_string();
    assert!(e.contains("No such file"), "{e}");
}

/// `OSPREY_BLESS=1` writes the fuzz target's seeds (a good file, whole and as a body; the
/// target's first byte is its mode) into its corpus.
#[test]
fn fuzz_seeds_hold_a_good_file() {
    let corpus =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/snapshot_file");
    let bytes = encode(&sample()).expect("encode");
    if std::env::var_os("OSPREY_BLESS").is_some() {
        std::fs::create_dir_all(&corpus).expect("corpus folder");
        let whole = [&[0u8][..], &bytes].concat();
        let body = [&[1u8][..], &bytes[HEADER_LEN..]].concat();
        std::fs::write(corpus.join("whole-good-2vcpu"), whole).expect("write a seed");
        std::fs::write(corpus.join("body-good-2vcpu"), body).expect("write a seed");
        std::fs::write(
            corpus.join("truncated"),
            [&[0u8][..], &bytes[..200]].concat(),
        )
        .expect("write a seed");
    }
    let kept = std::fs::read(corpus.join("whole-good-2vcpu")).expect("the seed");
    // The seed decodes with this version and this format (regenerate the seeds with
    // OSPREY_BLESS=1 when either changes).
    decode(&kept[1..]).expect("the seed decodes");
}

/// A deterministic sweep of the fuzz target's body mode: bodies with a few bytes changed (or
/// cut), behind a correct header so postcard decodes them, never panic.
#[test]
fn mutated_bodies_behind_a_good_header_do_not_panic() {
    let bytes = encode(&sample()).expect("encode");
    let body = &bytes[HEADER_LEN..];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..3000 {
        let mut input = vec![1u8];
        input.extend_from_slice(body);
        for _ in 0..(next() % 4 + 1) {
            let at = 1 + (next() as usize) % body.len();
            input[at] = next() as u8;
        }
        if next() % 4 == 0 {
            let keep = 1 + (next() as usize) % body.len();
            input.truncate(keep);
        }
        crate::test_utils::fuzz::snapshot_file::run(&input);
    }
}

#[test]
fn describe_names_the_format_and_the_writer() {
    let dir = std::env::temp_dir().join(format!("osprey-describe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let good = dir.join("state.snap");
    std::fs::write(&good, encode(&sample()).expect("encode")).expect("write");
    let d = describe(&good).expect("describe");
    assert_eq!(d.format_version, FORMAT_VERSION);
    assert_eq!(d.osprey_version.as_deref(), Some(OSPREY_VERSION));
    assert_eq!(
        d.to_string(),
        format!("v{FORMAT_VERSION} (written by Osprey {OSPREY_VERSION})")
    );
    let mut other = encode(&sample()).expect("encode");
    other[8..12].copy_from_slice(&7u32.to_le_bytes());
    std::fs::write(&good, &other).expect("write");
    assert!(describe(&good)
        .expect("describe")
        .to_string()
        .starts_with("v7 "));
    std::fs::write(&good, b"not a snapshot, but long enough for a header").expect("write");
    assert!(matches!(describe(&good), Err(StateFileError::BadMagic)));
    std::fs::remove_dir_all(dir).ok();
}
