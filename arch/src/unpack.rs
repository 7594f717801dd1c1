//! Unpacking a bzImage on the host: the setup header's payload (the compressed ELF vmlinux)
//! is decompressed here, so the kernel boots through the same path as an ELF vmlinux instead of
//! running its own decompressor in the guest (emulated, and so ~100 s, on a kvm_pvm host; tens of
//! milliseconds of every boot elsewhere).
//!
//! Owns: the setup-header fields this needs (boot protocol 2.08 or later for `payload_offset` /
//! `payload_length`), every format the x86 boot protocol allows for the payload (gzip, bzip2,
//! LZMA, XZ with its x86 BCJ filter, LZ4 in the kernel's legacy frame, zstd; LZO has no
//! maintained crate and is refused, so such a kernel decompresses itself), and the checks that
//! what came out is an x86-64 ELF of bounded size. The input is a file the user named: every
//! offset and length is checked, nothing panics on a corrupt image.

use std::io::Read;
use std::time::{Duration, Instant};

/// Where the setup header starts in the image.
const SETUP_HEADER_OFFSET: usize = 0x1f1;
/// The boot protocol's "HdrS" magic, at 0x202.
const HDRS: &[u8; 4] = b"HdrS";
/// `payload_offset`/`payload_length` exist from boot protocol 2.08.
const MIN_PROTOCOL: u16 = 0x0208;
/// Largest vmlinux accepted (a decompression bomb stops here).
pub const MAX_VMLINUX: usize = 512 << 20;
/// The LZ4 legacy frame's magic (little-endian 0x184C2102) and its largest block.
const LZ4_LEGACY_MAGIC: [u8; 4] = [0x02, 0x21, 0x4c, 0x18];
const LZ4_LEGACY_BLOCK: usize = 8 << 20;

/// Why a bzImage could not be unpacked (the boot then falls back to the in-guest decompressor).
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// The image ends before a field it must have.
    #[error("the image is truncated: {what} needs {need} bytes, the file has {have}")]
    Truncated {
        /// The field.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// No "HdrS" magic.
    #[error("no bzImage setup header (HdrS magic)")]
    NotBzImage,
    /// Boot protocol older than 2.08 (no payload fields).
    #[error("boot protocol {0:#06x} predates payload_offset (2.08)")]
    OldProtocol(u16),
    /// A compression the unpacker has no decoder for.
    #[error("{0} payloads are not unpacked (no maintained decoder crate)")]
    Unsupported(Compression),
    /// Unknown payload magic.
    #[error("unknown payload compression (magic {0:02x?})")]
    UnknownCompression([u8; 4]),
    /// The decoder failed.
    #[error("{format} payload: {source}")]
    Decompress {
        /// The format.
        format: Compression,
        /// What the decoder said.
        source: std::io::Error,
    },
    /// The payload decompressed to more than the limit.
    #[error("{format} payload unpacks to more than {limit} bytes")]
    TooLarge {
        /// The format.
        format: Compression,
        /// The limit.
        limit: usize,
    },
    /// What came out is not an x86-64 ELF executable.
    #[error("{0} payload is not an x86-64 ELF vmlinux")]
    NotElf(Compression),
}

/// The payload compressions of the x86 boot protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// gzip (deflate).
    Gzip,
    /// bzip2.
    Bzip2,
    /// LZMA ("lzma_alone").
    Lzma,
    /// XZ (LZMA2 with the x86 BCJ filter).
    Xz,
    /// LZO (lzop).
    Lzo,
    /// LZ4, legacy frame.
    Lz4,
    /// zstd.
    Zstd,
}

impl std::fmt::Display for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Compression::Gzip => "gzip",
            Compression::Bzip2 => "bzip2",
            Compression::Lzma => "lzma",
            Compression::Xz => "xz",
            Compression::Lzo => "lzo",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        })
    }
}

/// The setup-header fields unpacking needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetupInfo {
    /// Boot protocol version.
    pub version: u16,
    /// Where the protected-mode code starts in the file ((setup_sects + 1) × 512).
    pub pm_start: usize,
    /// The payload's offset from the protected-mode code.
    pub payload_offset: u32,
    /// The payload's length.
    pub payload_length: u32,
    /// Memory the kernel needs from its load address (protocol 2.10+; 0 before).
    pub init_size: u32,
}

fn field<const N: usize>(
    image: &[u8],
    at: usize,
    what: &'static str,
) -> Result<[u8; N], UnpackError> {
    image
        .get(at..at + N)
        .and_then(|b| b.try_into().ok())
        .ok_or(UnpackError::Truncated {
            what,
            need: at + N,
            have: image.len(),
        })
}

/// Reads the setup header of a bzImage.
pub fn parse_setup(image: &[u8]) -> Result<SetupInfo, UnpackError> {
    if field::<4>(image, 0x202, "the HdrS magic")? != *HDRS {
        return Err(UnpackError::NotBzImage);
    }
    let version = u16::from_le_bytes(field(image, 0x206, "the protocol version")?);
    if version < MIN_PROTOCOL {
        return Err(UnpackError::OldProtocol(version));
    }
    let setup_sects = match field::<1>(image, SETUP_HEADER_OFFSET, "setup_sects")?[0] {
        0 => 4,
        n => usize::from(n),
    };
    let init_size = if version >= 0x020a {
        u32::from_le_bytes(field(image, 0x260, "init_size")?)
    } else {
        0
    };
    Ok(SetupInfo {
        version,
        pm_start: (setup_sects + 1) * 512,
        payload_offset: u32::from_le_bytes(field(image, 0x248, "payload_offset")?),
        payload_length: u32::from_le_bytes(field(image, 0x24c, "payload_length")?),
        init_size,
    })
}

/// The payload bytes, bounds-checked.
pub fn payload<'a>(image: &'a [u8], s: &SetupInfo) -> Result<&'a [u8], UnpackError> {
    let start = s.pm_start.saturating_add(s.payload_offset as usize);
    let end = start.saturating_add(s.payload_length as usize);
    image.get(start..end).ok_or(UnpackError::Truncated {
        what: "the payload",
        need: end,
        have: image.len(),
    })
}

/// The payload's compression, from its magic.
pub fn detect(payload: &[u8]) -> Result<Compression, UnpackError> {
    let mut m = [0u8; 6];
    let n = payload.len().min(6);
    m[..n].copy_from_slice(&payload[..n]);
    Ok(match m {
        [0x1f, 0x8b, ..] => Compression::Gzip,
        [b'B', b'Z', b'h', ..] => Compression::Bzip2,
        [0x5d, 0x00, 0x00, ..] => Compression::Lzma,
        [0xfd, b'7', b'z', b'X', b'Z', 0x00] => Compression::Xz,
        [0x89, b'L', b'Z', b'O', ..] => Compression::Lzo,
        [0x02, 0x21, 0x4c, 0x18, ..] => Compression::Lz4,
        [0x28, 0xb5, 0x2f, 0xfd, ..] => Compression::Zstd,
        _ => return Err(UnpackError::UnknownCompression([m[0], m[1], m[2], m[3]])),
    })
}

/// Reads `r` to its end, refusing more than `limit` bytes.
fn read_bounded(
    mut r: impl Read,
    format: Compression,
    limit: usize,
) -> Result<Vec<u8>, UnpackError> {
    let mut out = Vec::new();
    (&mut r)
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|source| UnpackError::Decompress { format, source })?;
    if out.len() > limit {
        return Err(UnpackError::TooLarge { format, limit });
    }
    Ok(out)
}

/// The kernel's LZ4 legacy frame: the magic, then blocks of (u32 compressed size, data), each
/// unpacking to at most 8 MiB; the kernel build appends the unpacked size (4 bytes) after it.
fn unlz4_legacy(payload: &[u8], limit: usize) -> Result<Vec<u8>, UnpackError> {
    let bad = |why: &str| UnpackError::Decompress {
        format: Compression::Lz4,
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string()),
    };
    let mut rest = payload
        .strip_prefix(&LZ4_LEGACY_MAGIC)
        .ok_or_else(|| bad("no magic"))?;
    let mut out = Vec::new();
    let mut block = vec![0u8; LZ4_LEGACY_BLOCK];
    while rest.len() >= 4 {
        let (size, tail) = rest.split_at(4);
        let size = u32::from_le_bytes([size[0], size[1], size[2], size[3]]) as usize;
        if tail.is_empty() {
            break; // the appended unpacked size
        }
        if size == u32::from_le_bytes(LZ4_LEGACY_MAGIC) as usize {
            rest = tail; // concatenated frames
            continue;
        }
        let data = tail
            .get(..size)
            .ok_or_else(|| bad("block runs past the payload"))?;
        let n =
            lz4_flex::block::decompress_into(data, &mut block).map_err(|e| bad(&e.to_string()))?;
        if out.len() + n > limit {
            return Err(UnpackError::TooLarge {
                format: Compression::Lz4,
                limit,
            });
        }
        out.extend_from_slice(&block[..n]);
        rest = &tail[size..];
    }
    Ok(out)
}

/// Decompresses `payload`; at most `limit` bytes come out.
pub fn decompress(
    format: Compression,
    payload: &[u8],
    limit: usize,
) -> Result<Vec<u8>, UnpackError> {
    // Every format but gzip (which carries its own size) has the unpacked size appended.
    let body = match format {
        Compression::Gzip => payload,
        _ => &payload[..payload.len().saturating_sub(4)],
    };
    match format {
        Compression::Gzip => read_bounded(flate2::read::GzDecoder::new(body), format, limit),
        Compression::Bzip2 => read_bounded(bzip2::read::BzDecoder::new(body), format, limit),
        Compression::Xz => read_bounded(lzma_rust2::XzReader::new(body, false), format, limit),
        Compression::Lzma => {
            let r = lzma_rust2::LzmaReader::new_mem_limit(body, u32::MAX, None)
                .map_err(|source| UnpackError::Decompress { format, source })?;
            read_bounded(r, format, limit)
        }
        Compression::Zstd => {
            let r = ruzstd::decoding::StreamingDecoder::new(body).map_err(|e| {
                UnpackError::Decompress {
                    format,
                    source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
                }
            })?;
            read_bounded(r, format, limit)
        }
        Compression::Lz4 => unlz4_legacy(payload, limit),
        Compression::Lzo => Err(UnpackError::Unsupported(format)),
    }
}

/// Whether `image` is an x86-64 ELF executable.
fn is_x86_64_elf(image: &[u8]) -> bool {
    image.len() >= 64
        && image[..4] == [0x7f, b'E', b'L', b'F']
        && image[4] == 2 // ELFCLASS64
        && image[5] == 1 // little-endian
        && u16::from_le_bytes([image[18], image[19]]) == 62 // EM_X86_64
}

/// A vmlinux unpacked from a bzImage.
#[derive(Debug)]
pub struct Unpacked {
    /// The ELF image.
    pub vmlinux: Vec<u8>,
    /// The payload's format.
    pub compression: Compression,
    /// Time spent decompressing.
    pub took: Duration,
    /// The setup header.
    pub setup: SetupInfo,
}

/// Unpacks the vmlinux inside a bzImage.
pub fn unpack(image: &[u8]) -> Result<Unpacked, UnpackError> {
    let setup = parse_setup(image)?;
    let payload = payload(image, &setup)?;
    let compression = detect(payload)?;
    let t0 = Instant::now();
    let vmlinux = decompress(compression, payload, MAX_VMLINUX)?;
    if !is_x86_64_elf(&vmlinux) {
        return Err(UnpackError::NotElf(compression));
    }
    Ok(Unpacked {
        vmlinux,
        compression,
        took: t0.elapsed(),
        setup,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Every format with a decoder.
    const DECODED: [Compression; 6] = [
        Compression::Gzip,
        Compression::Bzip2,
        Compression::Xz,
        Compression::Lzma,
        Compression::Zstd,
        Compression::Lz4,
    ];

    /// A tiny x86-64 ELF header padded with a pattern: what the decoders must give back.
    fn elf() -> Vec<u8> {
        let mut v = vec![0u8; 200_000];
        v[..4].copy_from_slice(&[0x7f, b'E', b'L', b'F']);
        v[4] = 2;
        v[5] = 1;
        v[18] = 62;
        for (i, b) in v.iter_mut().enumerate().skip(64) {
            *b = (i % 251) as u8 ^ (i / 4096) as u8;
        }
        v
    }

    fn with_size(mut c: Vec<u8>, n: usize) -> Vec<u8> {
        c.extend_from_slice(&(n as u32).to_le_bytes());
        c
    }

    fn compress(format: Compression, data: &[u8]) -> Vec<u8> {
        match format {
            Compression::Gzip => {
                let mut e =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(data).expect("gzip");
                e.finish().expect("gzip")
            }
            Compression::Bzip2 => {
                let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::default());
                e.write_all(data).expect("bzip2");
                with_size(e.finish().expect("bzip2"), data.len())
            }
            Compression::Xz => {
                let mut opts = lzma_rust2::XzOptions::with_preset(1);
                opts.filters = vec![lzma_rust2::FilterConfig::new_bcj_x86(0)];
                let mut w = lzma_rust2::XzWriter::new(Vec::new(), opts).expect("xz");
                w.write_all(data).expect("xz");
                with_size(w.finish().expect("xz"), data.len())
            }
            Compression::Lzma => {
                let opts = lzma_rust2::LzmaOptions::with_preset(1);
                let mut w = lzma_rust2::LzmaWriter::new_use_header(
                    Vec::new(),
                    &opts,
                    Some(data.len() as u64),
                )
                .expect("lzma");
                w.write_all(data).expect("lzma");
                with_size(w.finish().expect("lzma"), data.len())
            }
            Compression::Zstd => with_size(
                ruzstd::encoding::compress_to_vec(
                    data,
                    ruzstd::encoding::CompressionLevel::Fastest,
                ),
                data.len(),
            ),
            Compression::Lz4 => {
                // The kernel's legacy frame, with blocks of 64 KiB here to cover several.
                let mut out = LZ4_LEGACY_MAGIC.to_vec();
                for chunk in data.chunks(64 << 10) {
                    let c = lz4_flex::block::compress(chunk);
                    out.extend_from_slice(&(c.len() as u32).to_le_bytes());
                    out.extend_from_slice(&c);
                }
                with_size(out, data.len())
            }
            Compression::Lzo => b"\x89LZO\0\r\n\x1a\n".to_vec(),
        }
    }

    /// A bzImage around `payload`: protocol 2.15, 2 setup sectors, the payload 0x100 bytes into
    /// the protected-mode code.
    fn bzimage(payload: &[u8]) -> Vec<u8> {
        let pm = 3 * 512;
        let mut v = vec![0u8; pm + 0x100 + payload.len()];
        v[SETUP_HEADER_OFFSET] = 2;
        v[0x202..0x206].copy_from_slice(HDRS);
        v[0x206..0x208].copy_from_slice(&0x020fu16.to_le_bytes());
        v[0x248..0x24c].copy_from_slice(&0x100u32.to_le_bytes());
        v[0x24c..0x250].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        v[0x260..0x264].copy_from_slice(&(1u32 << 20).to_le_bytes());
        v[pm + 0x100..].copy_from_slice(payload);
        v
    }

    #[test]
    fn every_supported_format_unpacks_to_the_same_vmlinux() {
        let data = elf();
        for format in DECODED {
            let image = bzimage(&compress(format, &data));
            let u = unpack(&image).unwrap_or_else(|e| panic!("{format}: {e}"));
            assert_eq!(u.compression, format);
            assert!(u.vmlinux == data, "{format}: the bytes differ");
            assert_eq!(u.setup.init_size, 1 << 20);
        }
    }

    /// The fuzz seeds were made by other implementations (Python's gzip and liblzma, xz with the
    /// x86 BCJ filter as the kernel build uses it): they must unpack here too.
    #[test]
    fn images_compressed_by_other_tools_unpack() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/bzimage_header");
        for (name, format) in [("gzip-elf", Compression::Gzip), ("xz-elf", Compression::Xz)] {
            let image = std::fs::read(dir.join(name)).expect("seed");
            let u = unpack(&image).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(u.compression, format);
            assert_eq!(u.vmlinux.len(), 4096, "{name}");
            assert!(is_x86_64_elf(&u.vmlinux));
        }
    }

    #[test]
    fn lzo_and_unknown_payloads_are_refused_by_name() {
        let e = unpack(&bzimage(&compress(Compression::Lzo, &elf()))).expect_err("lzo");
        assert!(
            matches!(e, UnpackError::Unsupported(Compression::Lzo)),
            "{e}"
        );
        let e = unpack(&bzimage(b"\x00\x01\x02\x03 not compressed")).expect_err("unknown");
        assert!(e.to_string().contains("unknown payload compression"), "{e}");
    }

    #[test]
    fn corrupt_payloads_are_errors_not_panics() {
        let data = elf();
        for format in DECODED {
            let mut c = compress(format, &data);
            // Keep the magic, damage the middle, and also cut it short.
            let mid = c.len() / 2;
            let end = mid + 16.min(c.len() - mid);
            for b in &mut c[mid..end] {
                *b ^= 0x5a;
            }
            let damaged = unpack(&bzimage(&c));
            let cut = unpack(&bzimage(&c[..c.len() / 3]));
            assert!(
                damaged.is_err() || damaged.is_ok_and(|u| u.vmlinux != data),
                "{format}"
            );
            assert!(
                cut.is_err(),
                "{format}: a third of the payload cannot be the kernel"
            );
        }
        // Decompresses fine but is not an ELF.
        let e = unpack(&bzimage(&compress(Compression::Gzip, &[0u8; 4096]))).expect_err("not elf");
        assert!(matches!(e, UnpackError::NotElf(Compression::Gzip)), "{e}");
    }

    #[test]
    fn truncated_or_foreign_headers_are_named() {
        assert!(matches!(
            parse_setup(&[0u8; 100]),
            Err(UnpackError::Truncated { .. })
        ));
        assert!(matches!(
            parse_setup(&[0u8; 4096]),
            Err(UnpackError::NotBzImage)
        ));
        let mut old = bzimage(b"x");
        old[0x206..0x208].copy_from_slice(&0x0206u16.to_le_bytes());
        assert!(matches!(
            parse_setup(&old),
            Err(UnpackError::OldProtocol(0x0206))
        ));
        // A payload that runs past the end of the file.
        let mut image = bzimage(&compress(Compression::Gzip, &elf()));
        image[0x24c..0x250].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = unpack(&image).expect_err("past the end");
        assert!(e.to_string().contains("truncated"), "{e}");
    }

    /// Unpack time per format for the Debian kernel of the Linux kit (its vmlinux compressed here
    /// with each format): `cargo test --release -p arch --lib unpack_times -- --ignored --nocapture`.
    #[test]
    #[ignore = "needs the Debian kernel (make kernel) and a release build to mean anything"]
    fn unpack_times_of_the_debian_kernel() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let vmlinux = std::fs::read(root.join("guest-images/cache/linux/vmlinux"))
            .expect("guest-images/cache/linux/vmlinux (make kernel)");
        let shipped =
            std::fs::read(root.join("guest-images/cache/linux/bzImage")).expect("bzImage");
        let t = std::time::Instant::now();
        let u = unpack(&shipped).expect("the shipped bzImage");
        eprintln!(
            "shipped bzImage: {} payload, {} -> {} bytes, unpacked in {:.1} ms (read+parse+decode {:.1} ms)",
            u.compression,
            payload(&shipped, &u.setup).map(<[u8]>::len).unwrap_or(0),
            u.vmlinux.len(),
            u.took.as_secs_f64() * 1e3,
            t.elapsed().as_secs_f64() * 1e3
        );
        for format in [
            Compression::Lz4,
            Compression::Zstd,
            Compression::Gzip,
            Compression::Xz,
            Compression::Lzma,
            Compression::Bzip2,
        ] {
            let c = compress(format, &vmlinux);
            let image = bzimage(&c);
            let mut best = f64::MAX;
            for _ in 0..3 {
                let u = unpack(&image).unwrap_or_else(|e| panic!("{format}: {e}"));
                assert!(u.vmlinux == vmlinux, "{format}: round trip");
                best = best.min(u.took.as_secs_f64() * 1e3);
            }
            eprintln!(
                "{format}: {} -> {} bytes, unpacked in {best:.1} ms (best of 3)",
                c.len(),
                vmlinux.len()
            );
        }
    }

    #[test]
    fn a_decompression_bomb_stops_at_the_limit() {
        let zeros = vec![0u8; 4 << 20];
        for format in [Compression::Gzip, Compression::Lz4, Compression::Zstd] {
            let c = compress(format, &zeros);
            let e = decompress(format, &c, 1 << 20).expect_err("bomb");
            assert!(matches!(e, UnpackError::TooLarge { .. }), "{format}: {e}");
        }
    }
}
