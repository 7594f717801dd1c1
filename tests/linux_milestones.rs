//! Boots the Debian cloud kernel (fetched by `guest-images/linux/fetch-kernel.sh`) as a bzImage
//! unpacked by Osprey (the default), as the same bzImage decompressing itself in the guest
//! (`--no-unpack`), as an ELF entered through PVH, and as the same ELF entered through the 64-bit
//! boot protocol (its PVH note hidden), with 2 vCPUs, and checks the milestones every host allows: the
//! kernel prints its version, exactly our command line, a memory map matching the configured size,
//! the Linux kit's initramfs where Osprey put it (the size of the file), Osprey's DSDT (with the
//! PCI host bridge), and (from the ACPI MADT) the number of CPUs.
//!
//! On kvm_pvm hosts the guest kernel's ring 0 is emulated (~600 ns per instruction), so these
//! milestones take tens of seconds and the kernel later dies in the emulator; the test stops the VM
//! as soon as the milestones are seen. Times to each milestone are printed (`--nocapture`) and
//! written to `target/linux-milestones.txt`.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use common::{repo_root, Vmm};

const CPUS: u8 = 2;
const MEM_MIB: u64 = 512;
/// Arguments that get a stock kernel this far on kvm_pvm (see docs/kvm-pvm.md).
const PVM_ARGS: &str = "clearcpuid=cx16,popcnt,xsaveopt,xsavec,xsaves,avx,avx2,fma,f16c,movbe,rdrand,\
rdseed,aes,pclmulqdq,sse4_1,sse4_2,ssse3,fsgsbase,smap,invpcid,clflushopt,clwb,sha_ni,bmi1,bmi2,adx,pku,\
ospke,vaes,vpclmulqdq,gfni,avx512f noxsave mitigations=off";
/// Generous: the bzImage decompresses itself in the emulator before printing anything.
const MILESTONE_TIMEOUT: Duration = Duration::from_secs(420);

/// The kernel (bzImage, vmlinux) and the Linux kit's initramfs, fetched and built on first use.
fn kernel_kit() -> (PathBuf, PathBuf, PathBuf) {
    let dir = common::linux::build_kit();
    (
        dir.join("bzImage"),
        dir.join("vmlinux"),
        dir.join("initramfs.cpio"),
    )
}

/// `[mem 0xSTART-0xEND] usable` lines of the kernel's e820 printout as (start, end inclusive).
fn usable_ranges(console: &str) -> Vec<(u64, u64)> {
    console
        .lines()
        .filter(|l| l.contains("BIOS-e820: [mem ") && l.trim_end().ends_with("usable"))
        .filter_map(|l| {
            let inner = l.split("[mem ").nth(1)?.split(']').next()?;
            let (a, b) = inner.split_once('-')?;
            let parse = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
            Some((parse(a)?, parse(b)?))
        })
        .collect()
}

fn record(kind: &str, lines: &[String]) {
    let path = repo_root().join("target/linux-milestones.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        for l in lines {
            let _ = writeln!(f, "{kind}: {l}");
        }
    }
}

/// A milestone's name and the console line that marks it.
type Milestone = (&'static str, fn(&str) -> bool);

fn boot_to_milestones(kind: &str, kernel: PathBuf, initrd: PathBuf) {
    let cmdline =
        format!("console=ttyS0 earlyprintk=serial,ttyS0,115200 reboot=k panic=-1 {PVM_ARGS}");
    let unpack = if kind == "bzImage/in-guest" {
        "--no-unpack"
    } else {
        "--log-level=info"
    };
    let mut vmm = Vmm::spawn([
        unpack.as_ref(),
        "--kernel".as_ref(),
        kernel.as_os_str(),
        "--cpus".as_ref(),
        CPUS.to_string().as_ref(),
        "--memory".as_ref(),
        MEM_MIB.to_string().as_ref(),
        "--cmdline".as_ref(),
        cmdline.as_ref(),
        "--initrd".as_ref(),
        initrd.as_os_str(),
    ]);
    let mut times = Vec::new();
    let milestones: [Milestone; 6] = [
        ("version", |l| l.contains("Linux version ")),
        ("command line", |l| l.contains("] Command line: ")),
        ("memory map", |l| {
            l.contains("] BIOS-e820: ") && l.contains("usable")
        }),
        ("initramfs", |l| l.contains("] RAMDISK: [mem ")),
        ("ACPI DSDT", |l| l.contains("] ACPI: DSDT ")),
        ("CPU count", |l| l.contains("smpboot: Allowing ")),
    ];
    for (name, pred) in milestones.iter() {
        let line = vmm.wait_console(MILESTONE_TIMEOUT, *pred).unwrap_or_else(|| {
            panic!(
                "{kind}: milestone `{name}` not reached in {MILESTONE_TIMEOUT:?}\nconsole:\n{}\nlog:\n{}",
                vmm.console_text(),
                vmm.log_text()
            )
        });
        let t = format!("{name} after {:.1} s: {}", line.at.as_secs_f64(), line.text);
        eprintln!("{kind}: {t}");
        times.push(t);
    }
    record(kind, &times);
    let console = vmm.console_text();
    let log = vmm.log_text();
    assert!(log.contains("KVM: kvm_"), "{log}");
    let want_entry = if kind == "ELF/PVH" {
        "(ElfPvh, Pvh entry"
    } else {
        "Linux64 entry"
    };
    assert!(
        log.contains(want_entry),
        "{kind}: expected {want_entry} in the log:\n{log}"
    );
    match kind {
        "bzImage" => assert!(
            log.contains("payload on the host in"),
            "{kind}: Osprey must unpack the kernel:\n{log}"
        ),
        _ => assert!(
            !log.contains("payload on the host in"),
            "{kind}: nothing to unpack:\n{log}"
        ),
    }

    let cmd_line = console
        .lines()
        .find(|l| l.contains("] Command line: "))
        .expect("seen above");
    let printed = cmd_line
        .split("] Command line: ")
        .nth(1)
        .expect("split")
        .trim_end();
    assert_eq!(
        printed, cmdline,
        "{kind}: the kernel must see exactly our command line"
    );

    let usable = usable_ranges(&console);
    let total: u64 = usable.iter().map(|(a, b)| b - a + 1).sum();
    let top = usable
        .iter()
        .map(|(_, b)| b + 1)
        .max()
        .expect("usable ranges");
    assert_eq!(
        top,
        MEM_MIB << 20,
        "{kind}: RAM must end at the configured size: {usable:x?}"
    );
    assert_eq!(
        total,
        (MEM_MIB << 20) - (0x10_0000 - 0x9_fc00),
        "{kind}: usable RAM: {usable:x?}"
    );

    // The kit's initramfs where the kernel says it is: its size rounded up to a page, below the
    // top of RAM.
    let ramdisk = console
        .lines()
        .find_map(|l| l.split("] RAMDISK: [mem ").nth(1))
        .and_then(|r| r.split(']').next())
        .and_then(|r| r.split_once('-'))
        .and_then(|(a, b)| {
            let parse = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
            Some((parse(a)?, parse(b)?))
        })
        .expect("RAMDISK range");
    let initrd_len = std::fs::metadata(&initrd).expect("initramfs").len();
    assert_eq!(
        ramdisk.1 + 1 - ramdisk.0,
        initrd_len.div_ceil(4096) * 4096,
        "{kind}: the kernel's RAMDISK must be our initramfs: {ramdisk:x?}"
    );
    assert!(ramdisk.1 < MEM_MIB << 20, "{kind}: {ramdisk:x?}");
    // Our DSDT, with the PCI host bridge (an empty DSDT is only its 36-byte header).
    let dsdt = console
        .lines()
        .find(|l| l.contains("] ACPI: DSDT "))
        .expect("seen above");
    let dsdt_len = dsdt
        .split_whitespace()
        .skip_while(|w| *w != "DSDT")
        .nth(2)
        .and_then(|w| u64::from_str_radix(w, 16).ok())
        .unwrap_or_else(|| panic!("{kind}: no DSDT length in `{dsdt}`"));
    assert!(
        dsdt.contains("OSPREY") && dsdt_len > 36,
        "{kind}: the kernel must see Osprey's DSDT with content: {dsdt}"
    );

    let cpus_line = console
        .lines()
        .find(|l| l.contains("smpboot: Allowing "))
        .expect("seen above");
    assert!(
        cpus_line.contains(&format!("Allowing {CPUS} CPUs")),
        "{kind}: the kernel must find {CPUS} CPUs in the MADT: {cpus_line}"
    );
}

/// A copy of `vmlinux` whose Xen PVH entry note is renumbered, so Osprey enters it through the
/// 64-bit Linux boot protocol instead of PVH (the same kernel, the other ELF path).
fn without_pvh_note(vmlinux: &std::path::Path) -> PathBuf {
    const PT_NOTE: u32 = 4;
    const XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;
    let mut elf = std::fs::read(vmlinux).expect("read vmlinux");
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4"));
    let u64_at =
        |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8")) as usize;
    let (phoff, phentsize, phnum) = (u64_at(&elf, 0x20), u16_at(&elf, 0x36), u16_at(&elf, 0x38));
    let mut patched = 0;
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        if u32_at(&elf, ph) != PT_NOTE {
            continue;
        }
        let (mut off, end) = (
            u64_at(&elf, ph + 8),
            u64_at(&elf, ph + 8) + u64_at(&elf, ph + 32),
        );
        while off + 12 <= end {
            let (namesz, descsz, kind) = (
                u32_at(&elf, off) as usize,
                u32_at(&elf, off + 4) as usize,
                u32_at(&elf, off + 8),
            );
            let name = &elf[off + 12..off + 12 + namesz];
            if name == b"Xen\0" && kind == XEN_ELFNOTE_PHYS32_ENTRY {
                elf[off + 8..off + 12].copy_from_slice(&0x7fff_0000u32.to_le_bytes());
                patched += 1;
            }
            off += 12 + namesz.div_ceil(4) * 4 + descsz.div_ceil(4) * 4;
        }
    }
    assert_eq!(
        patched,
        1,
        "expected exactly one PVH entry note in {}",
        vmlinux.display()
    );
    let out = repo_root().join("target/vmlinux-no-pvh");
    std::fs::write(&out, elf).expect("write vmlinux-no-pvh");
    out
}

#[test]
fn debian_kernel_bzimage_reaches_milestones() {
    let (bz, _, initrd) = kernel_kit();
    boot_to_milestones("bzImage", bz, initrd);
}

/// The bzImage's own decompressor, emulated on kvm_pvm: the slowest of these boots (~100 s).
#[test]
fn debian_kernel_bzimage_decompressing_itself_reaches_milestones() {
    let (bz, _, initrd) = kernel_kit();
    boot_to_milestones("bzImage/in-guest", bz, initrd);
}

#[test]
fn debian_kernel_elf_pvh_reaches_milestones() {
    let (_, vmlinux, initrd) = kernel_kit();
    boot_to_milestones("ELF/PVH", vmlinux, initrd);
}

#[test]
fn debian_kernel_elf_64bit_entry_reaches_milestones() {
    let (_, vmlinux, initrd) = kernel_kit();
    boot_to_milestones("ELF/64-bit", without_pvh_note(&vmlinux), initrd);
}
