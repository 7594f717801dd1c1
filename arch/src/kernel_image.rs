//! What a kernel file is and how much guest memory it and its initrd need, read from its headers
//! without loading it: the checks that let a bad `boot-source` be refused (exit 2, naming the
//! field) before any KVM resource exists, instead of failing in the loader after start-up.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use crate::layout::{HIMEM_START, MMIO_GAP_START};

/// A kernel file's format, as its first bytes tell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelFormat {
    /// ELF with a PVH note.
    ElfPvh,
    /// ELF without a PVH note (a Linux vmlinux entered in 64-bit mode).
    Elf,
    /// A bzImage.
    BzImage,
}

/// The ELF magic number at the start of an ELF file.
const ELF_MAGIC: [u8; 4] = *b"\x7fELF";
/// A bzImage's setup header magic, and its offset in the file.
pub(crate) const BZIMAGE_HDRS: [u8; 4] = *b"HdrS";
const BZIMAGE_HDRS_OFFSET: usize = 0x202;
/// Where the initrd may end when the kernel does not say (an ELF, or a bzImage's 0).
pub(crate) const DEFAULT_INITRD_ADDR_MAX: u64 = 0x37ff_ffff;

/// Most ELF program headers read; a real kernel has a handful.
const MAX_PROGRAM_HEADERS: usize = 256;
const ELF_HEADER_LEN: usize = 64;
const ELF_PHDR_LEN: usize = 56;
const ELFCLASS64: u8 = 2;
const ELFDATA2LSB: u8 = 1;
const EM_X86_64: u16 = 62;
const PT_LOAD: u32 = 1;
/// The bzImage setup header's offset and the bytes of it read (up to `init_size`).
const SETUP_HEADER_START: usize = 0x1f1;
const SETUP_HEADER_END: usize = 0x264;
const PAGE_SIZE: u64 = 4096;

/// What validation learns from a kernel file's headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelImage {
    /// ELF (with or without a PVH note; the note is found when loading) or bzImage.
    pub format: KernelFormat,
    /// The first guest-physical byte above the kernel once loaded (for a bzImage, above what
    /// its decompressed kernel occupies, from the header's `pref_address` and `init_size`).
    pub end: u64,
    /// The highest address the initrd may end at.
    pub initrd_addr_max: u64,
}

/// Why a kernel or initrd cannot boot in the configured memory; each names what to change.
#[derive(Debug, thiserror::Error)]
pub enum KernelImageError {
    /// Reading the file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Neither an ELF nor a bzImage.
    #[error(
        "{0}: not a kernel: neither an ELF (vmlinux, or an ELF with a PVH note) nor a bzImage"
    )]
    UnknownFormat(String),
    /// An ELF, but not a 64-bit little-endian x86 one.
    #[error("{0}: an ELF file, but not a 64-bit x86 kernel")]
    WrongElf(String),
    /// The ELF's headers are cut short or inconsistent.
    #[error("{0}: a damaged ELF file ({1})")]
    DamagedElf(String, &'static str),
    /// The kernel alone needs more memory than the guest has.
    #[error(
        "{path}: the kernel needs guest memory up to {need_mib} MiB, but the guest has {have_mib} MiB \
         (machine-config.mem_size_mib)"
    )]
    KernelTooBig {
        /// The file.
        path: String,
        /// Memory it needs, rounded up.
        need_mib: u64,
        /// Memory the guest has below the PCI hole.
        have_mib: u64,
    },
    /// The initrd does not fit between the kernel and the top of low memory.
    #[error(
        "{path}: the initrd is {size_mib} MiB, but only {room_mib} MiB of guest memory is free above \
         the kernel; raise machine-config.mem_size_mib"
    )]
    InitrdTooBig {
        /// The file.
        path: String,
        /// Its size, rounded up.
        size_mib: u64,
        /// The room there is, rounded down.
        room_mib: u64,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> KernelImageError + '_ {
    move |source| KernelImageError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Reads the kernel's headers: its format and where it ends in guest memory.
pub fn inspect(path: &Path) -> Result<KernelImage, KernelImageError> {
    let mut file = File::open(path).map_err(io(path))?;
    let len = file.metadata().map_err(io(path))?.len();
    let head = read_head(&mut file).map_err(io(path))?;
    let name = || path.display().to_string();
    match format_of(&head) {
        Some(KernelFormat::BzImage) => Ok(inspect_bzimage(&head, len)),
        Some(_) => inspect_elf(&mut file, &head, &name()),
        None => Err(KernelImageError::UnknownFormat(name())),
    }
}

/// The first bytes of a kernel file from its start: enough for [`format_of`] and a bzImage's
/// setup header (fewer when the file is shorter).
pub fn read_head(file: &mut File) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(SETUP_HEADER_END);
    file.seek(SeekFrom::Start(0))?;
    file.take(SETUP_HEADER_END as u64).read_to_end(&mut head)?;
    Ok(head)
}

/// The format the magic numbers in `head` name: ELF (whether it has a PVH note is found when
/// loading), bzImage, or none.
pub fn format_of(head: &[u8]) -> Option<KernelFormat> {
    if head.starts_with(&ELF_MAGIC) {
        Some(KernelFormat::Elf)
    } else if head.get(BZIMAGE_HDRS_OFFSET..BZIMAGE_HDRS_OFFSET + 4) == Some(&BZIMAGE_HDRS[..]) {
        Some(KernelFormat::BzImage)
    } else {
        None
    }
}

fn le16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn le32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn le64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn inspect_elf(file: &mut File, head: &[u8], name: &str) -> Result<KernelImage, KernelImageError> {
    let damaged = |why| KernelImageError::DamagedElf(name.to_string(), why);
    if head.len() < ELF_HEADER_LEN {
        return Err(damaged("the header is cut short"));
    }
    if head[4] != ELFCLASS64 || head[5] != ELFDATA2LSB || le16(head, 18) != Some(EM_X86_64) {
        return Err(KernelImageError::WrongElf(name.to_string()));
    }
    let phoff = le64(head, 32).ok_or_else(|| damaged("no program header offset"))?;
    let phentsize = usize::from(le16(head, 54).unwrap_or(0));
    let phnum = usize::from(le16(head, 56).unwrap_or(0));
    if phentsize < ELF_PHDR_LEN || phnum == 0 || phnum > MAX_PROGRAM_HEADERS {
        return Err(damaged("no usable program headers"));
    }
    let mut table = vec![0u8; phentsize * phnum];
    file.seek(SeekFrom::Start(phoff))
        .and_then(|_| file.read_exact(&mut table))
        .map_err(|_| damaged("the program headers are cut short"))?;
    let mut end = HIMEM_START;
    for ph in table.chunks_exact(phentsize) {
        if le32(ph, 0) != Some(PT_LOAD) {
            continue;
        }
        let paddr = le64(ph, 24).unwrap_or(0);
        let memsz = le64(ph, 40).unwrap_or(0);
        let seg_end = paddr
            .checked_add(memsz)
            .ok_or_else(|| damaged("a segment ends past the address space"))?;
        end = end.max(seg_end);
    }
    Ok(KernelImage {
        format: KernelFormat::Elf,
        end,
        initrd_addr_max: DEFAULT_INITRD_ADDR_MAX,
    })
}

fn inspect_bzimage(head: &[u8], len: u64) -> KernelImage {
    let setup_sects = u64::from(head.get(SETUP_HEADER_START).copied().unwrap_or(0)).max(4);
    let payload = len.saturating_sub((setup_sects + 1) * 512);
    let version = le16(head, 0x206).unwrap_or(0);
    // Protocol 2.10 added pref_address and init_size: the decompressed kernel's place and span.
    let unpacked_end = if version >= 0x20a {
        let pref = le64(head, 0x258).unwrap_or(0);
        let init = u64::from(le32(head, 0x260).unwrap_or(0));
        pref.saturating_add(init)
    } else {
        0
    };
    let addr_max = u64::from(le32(head, 0x22c).unwrap_or(0));
    KernelImage {
        format: KernelFormat::BzImage,
        end: (HIMEM_START + payload).max(unpacked_end),
        initrd_addr_max: if addr_max == 0 {
            DEFAULT_INITRD_ADDR_MAX
        } else {
            addr_max
        },
    }
}

/// The top of the memory the kernel and initrd can use: RAM below the PCI hole.
fn low_ram_top(mem_bytes: u64) -> u64 {
    mem_bytes.min(MMIO_GAP_START)
}

fn mib_up(bytes: u64) -> u64 {
    bytes.div_ceil(1 << 20)
}

impl KernelImage {
    /// Checks that the kernel fits in `mem_bytes` of guest memory, and the initrd of
    /// `initrd_size` bytes (named `initrd`) above it, placed as the loader places it.
    pub fn check_fit(
        &self,
        kernel: &Path,
        mem_bytes: u64,
        initrd: Option<(&Path, u64)>,
    ) -> Result<(), KernelImageError> {
        let top = low_ram_top(mem_bytes);
        if self.end > top {
            return Err(KernelImageError::KernelTooBig {
                path: kernel.display().to_string(),
                need_mib: mib_up(self.end),
                have_mib: top >> 20,
            });
        }
        if let Some((path, size)) = initrd {
            let initrd_top = top.min(self.initrd_addr_max.saturating_add(1));
            let floor = self.end.max(HIMEM_START);
            let fits = initrd_top
                .checked_sub(size)
                .map(|addr| addr & !(PAGE_SIZE - 1))
                .is_some_and(|addr| addr >= floor);
            if !fits {
                return Err(KernelImageError::InitrdTooBig {
                    path: path.display().to_string(),
                    size_mib: mib_up(size),
                    room_mib: initrd_top.saturating_sub(floor) >> 20,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("osprey-kimg-{}-{name}", std::process::id()));
        std::fs::write(&p, bytes).expect("write");
        p
    }

    /// A minimal x86-64 ELF with one PT_LOAD segment at `paddr` of `memsz` bytes.
    fn elf(machine: u16, paddr: u64, memsz: u64) -> Vec<u8> {
        let mut b = vec![0u8; ELF_HEADER_LEN + ELF_PHDR_LEN];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = ELFCLASS64;
        b[5] = ELFDATA2LSB;
        b[18..20].copy_from_slice(&machine.to_le_bytes());
        b[32..40].copy_from_slice(&(ELF_HEADER_LEN as u64).to_le_bytes());
        b[54..56].copy_from_slice(&(ELF_PHDR_LEN as u16).to_le_bytes());
        b[56..58].copy_from_slice(&1u16.to_le_bytes());
        let ph = &mut b[ELF_HEADER_LEN..];
        ph[0..4].copy_from_slice(&PT_LOAD.to_le_bytes());
        ph[24..32].copy_from_slice(&paddr.to_le_bytes());
        ph[40..48].copy_from_slice(&memsz.to_le_bytes());
        b
    }

    #[test]
    fn garbage_and_disk_images_are_not_kernels() {
        for (name, bytes) in [
            ("zeros", vec![0u8; 1 << 16]),
            ("text", b"hello, world\n".to_vec()),
            ("empty", Vec::new()),
        ] {
            let p = file(name, &bytes);
            let e = inspect(&p).expect_err(name).to_string();
            assert!(e.ends_with("not a kernel: neither an ELF (vmlinux, or an ELF with a PVH note) nor a bzImage"), "{e}");
            std::fs::remove_file(p).ok();
        }
        let arm = file("arm", &elf(183, 0x10_0000, 4096));
        assert!(inspect(&arm)
            .expect_err("aarch64")
            .to_string()
            .ends_with("an ELF file, but not a 64-bit x86 kernel"));
        std::fs::remove_file(arm).ok();
    }

    #[test]
    fn an_elf_kernel_ends_where_its_last_segment_ends() {
        let p = file("elf", &elf(EM_X86_64, 0x100_0000, 0x80_0000));
        let k = inspect(&p).expect("elf");
        assert_eq!((k.format, k.end), (KernelFormat::Elf, 0x180_0000));
        assert!(k.check_fit(&p, 64 << 20, None).is_ok());
        let e = k
            .check_fit(&p, 16 << 20, None)
            .expect_err("24 MiB kernel, 16 MiB guest");
        assert!(
            e.to_string()
                .contains("needs guest memory up to 24 MiB, but the guest has 16 MiB"),
            "{e}"
        );
        std::fs::remove_file(p).ok();
    }

    #[test]
    fn an_initrd_must_fit_above_the_kernel() {
        let p = file("elf2", &elf(EM_X86_64, 0x100_0000, 0x100_0000));
        let k = inspect(&p).expect("elf");
        let initrd = Path::new("/initrd.img");
        assert!(k.check_fit(&p, 64 << 20, Some((initrd, 16 << 20))).is_ok());
        let e = k
            .check_fit(&p, 64 << 20, Some((initrd, 40 << 20)))
            .expect_err("40 MiB initrd, 32 MiB free");
        assert_eq!(
            e.to_string(),
            "/initrd.img: the initrd is 40 MiB, but only 32 MiB of guest memory is free above the \
             kernel; raise machine-config.mem_size_mib"
        );
        std::fs::remove_file(p).ok();
    }

    #[test]
    fn a_bzimage_is_sized_from_its_setup_header() {
        let mut b = vec![0u8; 64 << 10];
        b[SETUP_HEADER_START] = 27;
        b[0x202..0x206].copy_from_slice(b"HdrS");
        b[0x206..0x208].copy_from_slice(&0x20fu16.to_le_bytes());
        b[0x22c..0x230].copy_from_slice(&0x37ff_ffffu32.to_le_bytes());
        b[0x258..0x260].copy_from_slice(&0x100_0000u64.to_le_bytes());
        b[0x260..0x264].copy_from_slice(&0x200_0000u32.to_le_bytes());
        let p = file("bz", &b);
        let k = inspect(&p).expect("bzImage");
        assert_eq!(k.format, KernelFormat::BzImage);
        assert_eq!(k.end, 0x300_0000, "pref_address + init_size");
        assert!(k.check_fit(&p, 32 << 20, None).is_err());
        assert!(k.check_fit(&p, 64 << 20, None).is_ok());
        std::fs::remove_file(p).ok();
    }
}
