//! Loading what the guest boots: the kernel (ELF with a PVH note, ELF vmlinux, or bzImage), the
//! initrd and the command line, and writing the boot information the entry protocol needs
//! (`hvm_start_info` for PVH, `boot_params` for Linux's 64-bit protocol).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use linux_loader::configurator::linux::LinuxBootConfigurator;
use linux_loader::configurator::pvh::PvhBootConfigurator;
use linux_loader::configurator::{BootConfigurator, BootParams};
use linux_loader::loader::bootparam::{boot_e820_entry, boot_params};
use linux_loader::loader::elf::start_info::{
    hvm_memmap_table_entry, hvm_modlist_entry, hvm_start_info,
};
use linux_loader::loader::{BzImage, Elf, KernelLoader, PvhBootCapability};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::layout::{
    memory_map, MemoryMapEntry, CMDLINE_MAX_SIZE, CMDLINE_START, E820_RAM, HIMEM_START,
    MMIO_GAP_START, PVH_INFO_START, PVH_MEMMAP_START, PVH_MODLIST_START, ZERO_PAGE_START,
};
use crate::regs::EntryMode;

const XEN_HVM_START_MAGIC: u32 = 0x336e_c578;
const BOOT_FLAG: u16 = 0xaa55;
const KERNEL_LOADER_OTHER: u8 = 0xff;
const KERNEL_MIN_ALIGNMENT: u32 = 0x0100_0000;
const LOADFLAGS_CAN_USE_HEAP: u8 = 0x80;
const PAGE_SIZE: u64 = 4096;
/// The 64-bit entry point sits 0x200 bytes into a bzImage's protected-mode code.
const BZIMAGE_64BIT_ENTRY_OFFSET: u64 = 0x200;

pub use crate::kernel_image::KernelFormat;
use crate::kernel_image::{BZIMAGE_HDRS, DEFAULT_INITRD_ADDR_MAX};

/// Where and how to start the boot vCPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BootEntry {
    /// The image's format.
    pub format: KernelFormat,
    /// The entry protocol.
    pub mode: EntryMode,
    /// Guest-physical entry address.
    pub entry: u64,
    /// A bzImage Osprey unpacked itself: the payload's format and the time it took.
    pub unpacked: Option<(crate::unpack::Compression, std::time::Duration)>,
}

/// Errors loading the guest's boot images.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// Opening or reading a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is neither an ELF nor a bzImage.
    #[error("{0}: not an ELF kernel nor a bzImage")]
    UnknownFormat(PathBuf),
    /// linux-loader refused the image.
    #[error("{path}: cannot load kernel: {source}")]
    Load {
        /// The file.
        path: PathBuf,
        /// Why.
        source: linux_loader::loader::Error,
    },
    /// The initrd does not fit in guest memory.
    #[error("{path}: initrd of {size} bytes does not fit in guest memory above the kernel")]
    InitrdTooBig {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// The command line is too long.
    #[error("Command line is {0} bytes; the limit is {max}", max = CMDLINE_MAX_SIZE - 1)]
    CmdlineTooLong(usize),
    /// The command line has characters Linux does not take (linux-loader's check).
    #[error("Command line: {0}")]
    Cmdline(linux_loader::cmdline::Error),
    /// Writing boot information failed.
    #[error("Writing the {what} to guest memory failed: {source}")]
    Write {
        /// Which structure.
        what: &'static str,
        /// Why.
        source: vm_memory::GuestMemoryError,
    },
    /// linux-loader's boot configurator could not write the boot parameters.
    #[error("Writing the {what} failed: {source}")]
    Configure {
        /// Which structure.
        what: &'static str,
        /// linux-loader's error.
        source: linux_loader::configurator::Error,
    },
    /// linux-loader could not write the command line.
    #[error("Writing the command line failed: {0}")]
    CmdlineWrite(linux_loader::loader::Error),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> BootError + '_ {
    move |source| BootError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Identifies the kernel format from the file's magic numbers (as preflight's
/// [`crate::kernel_image::inspect`] does).
pub fn sniff_format(file: &mut File, path: &Path) -> Result<KernelFormat, BootError> {
    let head = crate::kernel_image::read_head(file).map_err(io_err(path))?;
    crate::kernel_image::format_of(&head).ok_or_else(|| BootError::UnknownFormat(path.to_owned()))
}

/// What the boot needs from the config.
#[derive(Debug, Clone)]
pub struct BootSpec<'a> {
    /// Kernel image.
    pub kernel: &'a Path,
    /// Optional initrd.
    pub initrd: Option<&'a Path>,
    /// Command line.
    pub cmdline: &'a str,
    /// Guest memory size in bytes.
    pub mem_bytes: u64,
    /// Address of the ACPI RSDP, handed to the guest by PVH or the zero page.
    pub rsdp: u64,
    /// Unpack a bzImage on the host (`boot-source.unpack`, on by default).
    pub unpack: bool,
}

/// Loads kernel, initrd and command line and writes the boot information.
pub fn load(mem: &GuestMemoryMmap, spec: &BootSpec<'_>) -> Result<BootEntry, BootError> {
    let mut file = File::open(spec.kernel).map_err(io_err(spec.kernel))?;
    let format = sniff_format(&mut file, spec.kernel)?;
    let load_err = |source| BootError::Load {
        path: spec.kernel.to_owned(),
        source,
    };
    let highmem = Some(GuestAddress(HIMEM_START));
    let unpacked = match format {
        KernelFormat::BzImage if spec.unpack => unpack_bzimage(&mut file, spec.kernel)?,
        _ => None,
    };
    let (entry, setup_header, kernel_end) = match (format, unpacked) {
        (_, Some((vmlinux, header, compression, took))) => {
            // The vmlinux inside the bzImage, loaded as an ELF and entered in 64-bit mode
            // with the bzImage's setup header in the zero page.
            let mut cursor = std::io::Cursor::new(vmlinux);
            let r = Elf::load(mem, None, &mut cursor, highmem).map_err(load_err)?;
            (
                BootEntry {
                    format,
                    mode: EntryMode::Linux64,
                    entry: r.kernel_load.0,
                    unpacked: Some((compression, took)),
                },
                Some(header),
                r.kernel_end,
            )
        }
        (KernelFormat::Elf | KernelFormat::ElfPvh, None) => {
            let r = Elf::load(mem, None, &mut file, highmem).map_err(load_err)?;
            match r.pvh_boot_cap {
                PvhBootCapability::PvhEntryPresent(addr) => (
                    BootEntry {
                        format: KernelFormat::ElfPvh,
                        mode: EntryMode::Pvh,
                        entry: addr.0,
                        unpacked: None,
                    },
                    None,
                    r.kernel_end,
                ),
                _ => (
                    BootEntry {
                        format,
                        mode: EntryMode::Linux64,
                        entry: r.kernel_load.0,
                        unpacked: None,
                    },
                    None,
                    r.kernel_end,
                ),
            }
        }
        (KernelFormat::BzImage, None) => {
            let r = BzImage::load(mem, None, &mut file, highmem).map_err(load_err)?;
            (
                BootEntry {
                    format,
                    mode: EntryMode::Linux64,
                    entry: r.kernel_load.0 + BZIMAGE_64BIT_ENTRY_OFFSET,
                    unpacked: None,
                },
                r.setup_header,
                r.kernel_end,
            )
        }
    };

    write_cmdline(mem, spec.cmdline)?;
    let initrd_max = setup_header
        .map(|h| u64::from(h.initrd_addr_max))
        .filter(|&m| m != 0)
        .unwrap_or(DEFAULT_INITRD_ADDR_MAX);
    let initrd = match spec.initrd {
        Some(path) => Some(load_initrd(
            mem,
            path,
            spec.mem_bytes,
            kernel_end,
            initrd_max,
        )?),
        None => None,
    };
    let map = memory_map(spec.mem_bytes);
    match entry.mode {
        EntryMode::Pvh => write_pvh_start_info(mem, &map, initrd, spec.rsdp)?,
        EntryMode::Linux64 => write_zero_page(
            mem,
            &map,
            setup_header,
            spec.cmdline.len(),
            initrd,
            spec.rsdp,
        )?,
    }
    Ok(entry)
}

/// A bzImage's vmlinux, setup header, payload format and unpack time; `None` (logged) when the
/// payload cannot be unpacked here, so the kernel decompresses itself in the guest as before.
type UnpackedKernel = (
    Vec<u8>,
    linux_loader::loader::bootparam::setup_header,
    crate::unpack::Compression,
    std::time::Duration,
);

fn unpack_bzimage(file: &mut File, path: &Path) -> Result<Option<UnpackedKernel>, BootError> {
    use vm_memory::ByteValued;
    let mut image = Vec::new();
    file.seek(SeekFrom::Start(0)).map_err(io_err(path))?;
    file.read_to_end(&mut image).map_err(io_err(path))?;
    let u = match crate::unpack::unpack(&image) {
        Ok(u) => u,
        Err(e) => {
            log::warn!(
                "{}: not unpacked ({e}); the kernel decompresses itself in the guest",
                path.display()
            );
            return Ok(None);
        }
    };
    let mut header = linux_loader::loader::bootparam::setup_header::default();
    let size = std::mem::size_of_val(&header);
    let Some(bytes) = image.get(0x1f1..0x1f1 + size) else {
        return Ok(None);
    };
    header.as_mut_slice().copy_from_slice(bytes);
    log::info!(
        "{}: unpacked the {} payload on the host in {:.1} ms ({} MiB vmlinux)",
        path.display(),
        u.compression,
        u.took.as_secs_f64() * 1e3,
        u.vmlinux.len() >> 20
    );
    Ok(Some((u.vmlinux, header, u.compression, u.took)))
}

/// `text` as linux-loader's `Cmdline` (printable ASCII, at most `CMDLINE_MAX_SIZE` bytes with
/// its terminating NUL; leading and trailing spaces dropped).
pub fn kernel_cmdline(text: &str) -> Result<linux_loader::cmdline::Cmdline, BootError> {
    let mut line =
        linux_loader::cmdline::Cmdline::new(CMDLINE_MAX_SIZE).map_err(BootError::Cmdline)?;
    if !text.trim().is_empty() {
        line.insert_str(text).map_err(|e| match e {
            linux_loader::cmdline::Error::TooLarge => BootError::CmdlineTooLong(text.len()),
            other => BootError::Cmdline(other),
        })?;
    }
    Ok(line)
}

fn write_cmdline(mem: &GuestMemoryMmap, cmdline: &str) -> Result<(), BootError> {
    let line = kernel_cmdline(cmdline)?;
    linux_loader::loader::load_cmdline(mem, GuestAddress(CMDLINE_START), &line)
        .map_err(BootError::CmdlineWrite)
}

/// Places the initrd at the highest page-aligned address that fits below `addr_max`, the end of
/// low RAM and above the kernel. Returns `(address, size)`.
fn load_initrd(
    mem: &GuestMemoryMmap,
    path: &Path,
    mem_bytes: u64,
    kernel_end: u64,
    addr_max: u64,
) -> Result<(u64, u64), BootError> {
    let mut file = File::open(path).map_err(io_err(path))?;
    let size = file.metadata().map_err(io_err(path))?.len();
    let top = mem_bytes
        .min(MMIO_GAP_START)
        .min(addr_max.saturating_add(1));
    let too_big = || BootError::InitrdTooBig {
        path: path.to_owned(),
        size,
    };
    let addr = top.checked_sub(size).ok_or_else(too_big)? & !(PAGE_SIZE - 1);
    if addr < kernel_end.max(HIMEM_START) {
        return Err(too_big());
    }
    let mut buf = vec![0u8; size as usize];
    file.read_exact(&mut buf).map_err(io_err(path))?;
    mem.write_slice(&buf, GuestAddress(addr))
        .map_err(|source| BootError::Write {
            what: "initrd",
            source,
        })?;
    Ok((addr, size))
}

fn write_pvh_start_info(
    mem: &GuestMemoryMmap,
    map: &[MemoryMapEntry],
    initrd: Option<(u64, u64)>,
    rsdp: u64,
) -> Result<(), BootError> {
    let mut info = hvm_start_info {
        magic: XEN_HVM_START_MAGIC,
        version: 1,
        cmdline_paddr: CMDLINE_START,
        memmap_paddr: PVH_MEMMAP_START,
        memmap_entries: map.len() as u32,
        rsdp_paddr: rsdp,
        ..Default::default()
    };
    let modules: Vec<hvm_modlist_entry> = initrd
        .map(|(paddr, size)| hvm_modlist_entry {
            paddr,
            size,
            ..Default::default()
        })
        .into_iter()
        .collect();
    if !modules.is_empty() {
        info.nr_modules = modules.len() as u32;
        info.modlist_paddr = PVH_MODLIST_START;
    }
    let memmap: Vec<hvm_memmap_table_entry> = map
        .iter()
        .map(|e| hvm_memmap_table_entry {
            addr: e.addr,
            size: e.size,
            type_: e.kind,
            reserved: 0,
        })
        .collect();
    // linux-loader's PVH configurator writes the start info, the memory map and the modules.
    let mut params = BootParams::new(&info, GuestAddress(PVH_INFO_START));
    params.set_sections(&memmap, GuestAddress(PVH_MEMMAP_START));
    if !modules.is_empty() {
        params.set_modules(&modules, GuestAddress(PVH_MODLIST_START));
    }
    PvhBootConfigurator::write_bootparams::<GuestMemoryMmap>(&params, mem).map_err(|source| {
        BootError::Configure {
            what: "PVH start info",
            source,
        }
    })
}

fn write_zero_page(
    mem: &GuestMemoryMmap,
    map: &[MemoryMapEntry],
    setup_header: Option<linux_loader::loader::bootparam::setup_header>,
    cmdline_len: usize,
    initrd: Option<(u64, u64)>,
    rsdp: u64,
) -> Result<(), BootError> {
    let mut params = boot_params {
        acpi_rsdp_addr: rsdp,
        ..Default::default()
    };
    if let Some(h) = setup_header {
        params.hdr = h;
    }
    params.hdr.type_of_loader = KERNEL_LOADER_OTHER;
    params.hdr.boot_flag = BOOT_FLAG;
    params.hdr.header = u32::from_le_bytes(BZIMAGE_HDRS);
    params.hdr.cmd_line_ptr = CMDLINE_START as u32;
    params.hdr.cmdline_size = cmdline_len as u32 + 1;
    params.hdr.kernel_alignment = params.hdr.kernel_alignment.max(KERNEL_MIN_ALIGNMENT);
    params.hdr.loadflags |= LOADFLAGS_CAN_USE_HEAP;
    params.hdr.heap_end_ptr = 0xfe00 - 0x200;
    if let Some((addr, size)) = initrd {
        params.hdr.ramdisk_image = addr as u32;
        params.hdr.ramdisk_size = size as u32;
    }
    for (slot, e) in params.e820_table.iter_mut().zip(map) {
        *slot = boot_e820_entry {
            addr: e.addr,
            size: e.size,
            r#type: e.kind,
        };
    }
    params.e820_entries = map.len().min(params.e820_table.len()) as u8;
    // linux-loader's configurator for the 64-bit boot protocol writes the zero page.
    let bp = BootParams::new(&params, GuestAddress(ZERO_PAGE_START));
    LinuxBootConfigurator::write_bootparams::<GuestMemoryMmap>(&bp, mem).map_err(|source| {
        BootError::Configure {
            what: "boot_params",
            source,
        }
    })
}

/// Total RAM in a memory map, for reports.
pub fn ram_bytes(map: &[MemoryMapEntry]) -> u64 {
    map.iter()
        .filter(|e| e.kind == E820_RAM)
        .map(|e| e.size)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn mem(size: usize) -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), size)]).expect("mem")
    }

    fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
        let p = std::env::temp_dir().join(format!("osprey-boot-{}-{name}", std::process::id()));
        let mut f = File::create(&p).expect("create");
        f.write_all(bytes).expect("write");
        p
    }

    #[test]
    fn unknown_format_is_named() {
        let p = temp_file("junk", &[0u8; 1024]);
        let mut f = File::open(&p).expect("open");
        let e = sniff_format(&mut f, &p).expect_err("junk");
        assert!(
            e.to_string().ends_with("not an ELF kernel nor a bzImage"),
            "{e}"
        );
        std::fs::remove_file(p).ok();
    }

    #[test]
    fn pvh_start_info_and_memmap_are_written() {
        let m = mem(64 << 20);
        let map = memory_map(64 << 20);
        write_pvh_start_info(&m, &map, Some((0x200_0000, 0x1000)), 0xe_0000).expect("write");
        let info: hvm_start_info = m.read_obj(GuestAddress(PVH_INFO_START)).expect("read");
        assert_eq!(info.magic, XEN_HVM_START_MAGIC);
        assert_eq!(info.memmap_entries as usize, map.len());
        assert_eq!(info.cmdline_paddr, CMDLINE_START);
        assert_eq!(info.nr_modules, 1);
        assert_eq!(info.rsdp_paddr, 0xe_0000);
        let module: hvm_modlist_entry = m.read_obj(GuestAddress(PVH_MODLIST_START)).expect("mod");
        assert_eq!((module.paddr, module.size), (0x200_0000, 0x1000));
        let last: hvm_memmap_table_entry = m
            .read_obj(GuestAddress(PVH_MEMMAP_START + 24 * (map.len() as u64 - 1)))
            .expect("e");
        assert_eq!(last.addr + last.size, 64 << 20);
        assert_eq!(last.type_, E820_RAM);
    }

    #[test]
    fn zero_page_carries_cmdline_e820_and_initrd() {
        let m = mem(64 << 20);
        let map = memory_map(64 << 20);
        write_cmdline(&m, "console=ttyS0").expect("cmdline");
        write_zero_page(&m, &map, None, 13, Some((0x300_0000, 77)), 0xe_0000).expect("zero page");
        let p: boot_params = m.read_obj(GuestAddress(ZERO_PAGE_START)).expect("read");
        assert_eq!(p.hdr.cmd_line_ptr as u64, CMDLINE_START);
        assert_eq!({ p.hdr.cmdline_size }, 14);
        assert_eq!((p.hdr.ramdisk_image, p.hdr.ramdisk_size), (0x300_0000, 77));
        assert_eq!(p.e820_entries as usize, map.len());
        assert_eq!({ p.acpi_rsdp_addr }, 0xe_0000);
        assert_eq!({ p.hdr.boot_flag }, BOOT_FLAG);
        let mut buf = [0u8; 14];
        m.read_slice(&mut buf, GuestAddress(CMDLINE_START))
            .expect("read cmdline");
        assert_eq!(&buf, b"console=ttyS0\0");
    }

    #[test]
    fn initrd_goes_high_and_page_aligned() {
        let m = mem(32 << 20);
        let p = temp_file("initrd", &[0xabu8; 5000]);
        let (addr, size) =
            load_initrd(&m, &p, 32 << 20, 0x20_0000, DEFAULT_INITRD_ADDR_MAX).expect("load");
        assert_eq!(size, 5000);
        assert_eq!(addr % PAGE_SIZE, 0);
        assert!(addr + size <= 32 << 20 && addr + size + PAGE_SIZE > 32 << 20);
        let mut b = [0u8; 1];
        m.read_slice(&mut b, GuestAddress(addr + 4999))
            .expect("read");
        assert_eq!(b[0], 0xab);
        let e = load_initrd(&m, &p, 32 << 20, (32 << 20) - 4096, DEFAULT_INITRD_ADDR_MAX)
            .expect_err("overlap");
        assert!(matches!(e, BootError::InitrdTooBig { .. }));
        std::fs::remove_file(p).ok();
    }

    #[test]
    fn the_command_line_goes_through_linux_loader() {
        let m = mem(1 << 20);
        write_cmdline(&m, "console=ttyS0 mode=blk").expect("written");
        let mut got = [0u8; 23];
        m.read_slice(&mut got, GuestAddress(CMDLINE_START))
            .expect("read");
        assert_eq!(&got, b"console=ttyS0 mode=blk\0");
        assert!(matches!(
            kernel_cmdline("tab\there"),
            Err(BootError::Cmdline(_))
        ));
        assert!(kernel_cmdline("").is_ok(), "an empty command line is fine");
    }

    #[test]
    fn overlong_cmdline_is_refused() {
        let m = mem(1 << 20);
        let long = "x".repeat(CMDLINE_MAX_SIZE);
        assert!(matches!(
            write_cmdline(&m, &long),
            Err(BootError::CmdlineTooLong(_))
        ));
    }
}
