//! ACPI tables: how a modern guest (Linux built without `CONFIG_X86_MPPARSE`, like Debian's cloud
//! kernel) learns its CPUs and IOAPIC.
//!
//! A hardware-reduced ACPI 6 set: RSDP → XSDT → FADT (→ DSDT) and MADT, built with rust-vmm's
//! `acpi_tables` crate as one byte blob by a pure function ([`build`]) and written at
//! [`ACPI_START`], inside the reserved BIOS area where Linux also finds the RSDP by scanning;
//! PVH and the zero page point at it too.
//!
//! The DSDT holds two devices (acpi_tables' AML encoder). The PCI host bridge `\_SB.PCI0`: Linux
//! booted with ACPI finds PCI root buses only in the ACPI namespace. Its `_CRS` gives bus 0, the
//! configuration mechanism #1 ports, the rest of the I/O space and the 32-bit MMIO window where
//! the virtio-pci BARs live. The devices interrupt through MSI-X only (interrupt pin 0), so there
//! is no `_PRT`. The keyboard controller `\_SB.PS2_` (`PNP0303`, ports 0x60 and 0x64, GSI 1),
//! as Firecracker describes it: with hardware-reduced ACPI Linux has no legacy PIC and maps ISA
//! IRQ 1 to the IOAPIC only for a device that names it; its i8042 driver finds the controller
//! there (the FADT's 8042 flag says the same for drivers that look there).

use acpi_tables::fadt::{FADTBuilder, Flags};
use acpi_tables::madt::{EnabledStatus, IoApic, ProcessorLocalApic};
use acpi_tables::rsdp::Rsdp;
use acpi_tables::sdt::Sdt;
use acpi_tables::xsdt::XSDT;
use acpi_tables::{aml, Aml};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::layout::{
    APIC_DEFAULT_PHYS_BASE, IOAPIC_DEFAULT_PHYS_BASE, PCI_MMIO_END, PCI_MMIO_START,
};

/// Where the legacy devices the DSDT names sit. The device models own these numbers; the VMM,
/// which places the devices, passes them in, so the port map is declared once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LegacyPorts {
    /// Configuration mechanism #1: its first port (`0xcf8` on a PC).
    pub pci_config_base: u16,
    /// How many ports configuration mechanism #1 takes (8).
    pub pci_config_len: u8,
    /// The i8042's data port (`0x60`).
    pub i8042_data: u16,
    /// The i8042's status/command port (`0x64`).
    pub i8042_command: u16,
    /// The keyboard's ISA IRQ (1).
    pub keyboard_irq: u32,
}

/// Where the RSDP (and the tables after it) live.
pub const ACPI_START: u64 = 0x000e_0000;
/// The end of the area the tables may use (the BIOS area ends at 1 MiB).
pub const ACPI_END: u64 = 0x0010_0000;

const HEADER_LEN: usize = 36;
const OEM_ID: [u8; 6] = *b"OSPREY";
const OEM_TABLE_ID: [u8; 8] = *b"OSPREYVM";
const OEM_REVISION: u32 = 1;
#[cfg(test)]
const FADT_LEN: usize = 276;
#[cfg(test)]
const FADT_FLAGS_HW_REDUCED_ACPI: u32 = 1 << 20;
/// The machine has an i8042 on ports 0x60/0x64: without it Linux's i8042 driver, finding no
/// PS/2 device in the namespace either, does not probe the ports.
const IAPC_BOOT_ARCH_8042: u16 = 1 << 1;
const IAPC_BOOT_ARCH_VGA_NOT_PRESENT: u16 = 1 << 2;
const IAPC_BOOT_ARCH_CMOS_RTC_NOT_PRESENT: u16 = 1 << 5;
const MADT_REVISION: u8 = 6;
const MADT_PCAT_COMPAT: u32 = 1;
#[cfg(test)]
const MADT_LOCAL_APIC: u8 = 0;
#[cfg(test)]
const MADT_IOAPIC: u8 = 1;
const MADT_LOCAL_APIC_NMI: u8 = 4;
#[cfg(test)]
const LAPIC_ENABLED: u32 = 1;
const DSDT_REVISION: u8 = 2;
/// The MMIO window fits a DWordMemory descriptor.
const _: () = assert!(PCI_MMIO_START < PCI_MMIO_END && PCI_MMIO_END <= 1 << 32);

/// Errors writing the ACPI tables.
#[derive(Debug, thiserror::Error)]
pub enum AcpiError {
    /// The tables do not fit below 1 MiB.
    #[error("ACPI tables of {0} bytes do not fit in the BIOS area")]
    TooBig(usize),
    /// Writing to guest memory failed.
    #[error("Writing the ACPI tables failed: {0}")]
    Write(vm_memory::GuestMemoryError),
}

/// What an `acpi_tables` object encodes to.
fn bytes(t: &dyn Aml) -> Vec<u8> {
    let mut out = Vec::new();
    t.to_aml_bytes(&mut out);
    out
}

/// An empty table of `signature` with Osprey's OEM fields.
fn table(signature: &[u8; 4], revision: u8) -> Sdt {
    Sdt::new(
        *signature,
        HEADER_LEN as u32,
        revision,
        OEM_ID,
        OEM_TABLE_ID,
        OEM_REVISION,
    )
}

fn madt(num_cpus: u8) -> Vec<u8> {
    let mut t = table(b"APIC", MADT_REVISION);
    t.append(APIC_DEFAULT_PHYS_BASE);
    t.append(MADT_PCAT_COMPAT);
    for cpu in 0..num_cpus {
        t.append_slice(&bytes(&ProcessorLocalApic::new(
            cpu,
            cpu,
            EnabledStatus::Enabled,
        )));
    }
    // The IOAPIC's id follows the CPUs', as in the MP table; its pins start at GSI 0.
    t.append_slice(&bytes(&IoApic::new(num_cpus, IOAPIC_DEFAULT_PHYS_BASE, 0)));
    // LINT1 of every processor (uid 0xff) is NMI (acpi_tables has no structure for it).
    t.append_slice(&[MADT_LOCAL_APIC_NMI, 6, 0xff, 0, 0, 1]);
    t.as_slice().to_vec()
}

fn fadt(dsdt_addr: u64) -> Vec<u8> {
    let mut f = FADTBuilder::new(OEM_ID, OEM_TABLE_ID, OEM_REVISION);
    // Both DSDT fields, as firmware does (the builder's helpers set one and clear the other).
    f.dsdt = (dsdt_addr as u32).into();
    f.x_dsdt = dsdt_addr.into();
    f.iapc_boot_arch = (IAPC_BOOT_ARCH_8042
        | IAPC_BOOT_ARCH_VGA_NOT_PRESENT
        | IAPC_BOOT_ARCH_CMOS_RTC_NOT_PRESENT)
        .into();
    f.flags = (Flags::HwReducedAcpi as u32).into();
    f.hypervisor_vendor_identity = u64::from_le_bytes(OEM_TABLE_ID).into();
    bytes(&f.finalize())
}

/// The PCI host bridge (segment 0, bus 0, reached through configuration mechanism #1, its
/// children decoding all other I/O ports and the 32-bit MMIO window) and the i8042.
fn dsdt(ports: &LegacyPorts) -> Vec<u8> {
    let pci_config_port = ports.pci_config_base;
    let pci_config_ports = ports.pci_config_len;
    let bus = aml::AddressSpace::new_bus_number(0u16, 0u16);
    let config_ports = aml::IO::new(pci_config_port, pci_config_port, 1, pci_config_ports);
    let io_below = aml::AddressSpace::new_io(0u16, pci_config_port.saturating_sub(1), None);
    let io_above = aml::AddressSpace::new_io(
        pci_config_port.saturating_add(u16::from(pci_config_ports)),
        u16::MAX,
        None,
    );
    let mmio = aml::AddressSpace::new_memory(
        aml::AddressSpaceCacheable::NotCacheable,
        true,
        PCI_MMIO_START as u32,
        (PCI_MMIO_END - 1) as u32,
        None,
    );
    let crs = aml::ResourceTemplate::new(vec![&bus, &config_ports, &io_below, &io_above, &mmio]);
    let hid = aml::EISAName::new("PNP0A08");
    let cid = aml::EISAName::new("PNP0A03");
    let names = [
        aml::Name::new("_HID".into(), &hid),
        aml::Name::new("_CID".into(), &cid),
        aml::Name::new("_UID".into(), &aml::ZERO),
        aml::Name::new("_SEG".into(), &aml::ZERO),
        aml::Name::new("_BBN".into(), &aml::ZERO),
        aml::Name::new("_CRS".into(), &crs),
    ];
    let children: Vec<&dyn Aml> = names.iter().map(|n| n as &dyn Aml).collect();
    let pci0 = aml::Device::new("PCI0".into(), children);
    let ps2_hid = aml::EISAName::new("PNP0303");
    let data_port = aml::IO::new(ports.i8042_data, ports.i8042_data, 1, 1);
    let command_port = aml::IO::new(ports.i8042_command, ports.i8042_command, 1, 1);
    // Consumer, edge-triggered, active high, exclusive: an ISA IRQ.
    let irq = aml::Interrupt::new(true, true, false, false, ports.keyboard_irq);
    let ps2_crs = aml::ResourceTemplate::new(vec![&data_port, &command_port, &irq]);
    let ps2_names = [
        aml::Name::new("_HID".into(), &ps2_hid),
        aml::Name::new("_CRS".into(), &ps2_crs),
    ];
    let ps2_children: Vec<&dyn Aml> = ps2_names.iter().map(|n| n as &dyn Aml).collect();
    let ps2 = aml::Device::new("PS2_".into(), ps2_children);
    let sb = aml::Scope::new("\\_SB_".into(), vec![&pci0, &ps2]);
    let mut t = table(b"DSDT", DSDT_REVISION);
    sb.to_aml_bytes(&mut t);
    t.as_slice().to_vec()
}

fn align16(n: usize) -> usize {
    (n + 15) & !15
}

/// Builds RSDP, XSDT, FADT, DSDT and MADT for `num_cpus` and the devices at `ports`, laid out
/// from `base`.
pub fn build(num_cpus: u8, ports: &LegacyPorts, base: u64) -> Vec<u8> {
    let rsdp_len = Rsdp::len();
    let xsdt_off = align16(rsdp_len);
    let xsdt_len = HEADER_LEN + 2 * 8;
    let dsdt_off = align16(xsdt_off + xsdt_len);
    let dsdt = dsdt(ports);
    let fadt_off = align16(dsdt_off + dsdt.len());
    let fadt = fadt(base + dsdt_off as u64);
    let madt_off = align16(fadt_off + fadt.len());
    let madt = madt(num_cpus);

    let mut xsdt = XSDT::new(OEM_ID, OEM_TABLE_ID, OEM_REVISION);
    xsdt.add_entry(base + fadt_off as u64);
    xsdt.add_entry(base + madt_off as u64);
    let xsdt = bytes(&xsdt);
    debug_assert_eq!(xsdt.len(), xsdt_len);
    let rsdp = bytes(&Rsdp::new(OEM_ID, base + xsdt_off as u64));

    let mut blob = vec![0u8; madt_off + madt.len()];
    for (off, table) in [
        (0, &rsdp),
        (xsdt_off, &xsdt),
        (dsdt_off, &dsdt),
        (fadt_off, &fadt),
        (madt_off, &madt),
    ] {
        blob[off..off + table.len()].copy_from_slice(table);
    }
    blob
}

/// Writes the tables for `num_cpus` and the devices at `ports` at [`ACPI_START`]; returns the
/// RSDP's address.
pub fn write(mem: &GuestMemoryMmap, num_cpus: u8, ports: &LegacyPorts) -> Result<u64, AcpiError> {
    let blob = build(num_cpus, ports, ACPI_START);
    if ACPI_START + blob.len() as u64 > ACPI_END {
        return Err(AcpiError::TooBig(blob.len()));
    }
    mem.write_slice(&blob, GuestAddress(ACPI_START))
        .map_err(AcpiError::Write)?;
    Ok(ACPI_START)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PC's: the values the VMM passes.
    const PORTS: LegacyPorts = LegacyPorts {
        pci_config_base: 0xcf8,
        pci_config_len: 8,
        i8042_data: 0x60,
        i8042_command: 0x64,
        keyboard_irq: 1,
    };

    fn sum(b: &[u8]) -> u8 {
        b.iter().fold(0u8, |a, x| a.wrapping_add(*x))
    }

    fn u32_at(b: &[u8], off: usize) -> u32 {
        u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
    }

    fn u64_at(b: &[u8], off: usize) -> u64 {
        u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
    }

    /// Follows RSDP → XSDT → tables in `blob` (placed at `base`) and returns them by signature.
    fn tables(blob: &[u8], base: u64) -> Vec<([u8; 4], Vec<u8>)> {
        assert_eq!(&blob[0..8], b"RSD PTR ");
        assert_eq!(sum(&blob[..20]), 0, "RSDP checksum");
        assert_eq!(sum(&blob[..36]), 0, "RSDP extended checksum");
        let xsdt_at = (u64_at(blob, 24) - base) as usize;
        let xsdt_len = u32_at(blob, xsdt_at + 4) as usize;
        let xsdt = &blob[xsdt_at..xsdt_at + xsdt_len];
        assert_eq!(&xsdt[0..4], b"XSDT");
        assert_eq!(sum(xsdt), 0, "XSDT checksum");
        (HEADER_LEN..xsdt_len)
            .step_by(8)
            .map(|off| {
                let at = (u64_at(xsdt, off) - base) as usize;
                let len = u32_at(blob, at + 4) as usize;
                let t = blob[at..at + len].to_vec();
                assert_eq!(
                    sum(&t),
                    0,
                    "checksum of {:?}",
                    String::from_utf8_lossy(&t[0..4])
                );
                (t[0..4].try_into().expect("sig"), t)
            })
            .collect()
    }

    #[test]
    fn tables_chain_and_checksum() {
        let blob = build(4, &PORTS, ACPI_START);
        let t = tables(&blob, ACPI_START);
        let sigs: Vec<&[u8; 4]> = t.iter().map(|(s, _)| s).collect();
        assert_eq!(sigs, vec![b"FACP", b"APIC"]);
        let fadt = &t[0].1;
        assert_eq!(fadt.len(), FADT_LEN);
        assert_ne!(u32_at(fadt, 112) & FADT_FLAGS_HW_REDUCED_ACPI, 0);
        let boot_arch = u16::from_le_bytes([fadt[109], fadt[110]]);
        assert_ne!(boot_arch & IAPC_BOOT_ARCH_8042, 0, "the i8042 is announced");
        let dsdt_at = (u64_at(fadt, 140) - ACPI_START) as usize;
        assert_eq!(u32_at(fadt, 40) as u64, u64_at(fadt, 140));
        assert_eq!(&blob[dsdt_at..dsdt_at + 4], b"DSDT");
        let dsdt_len = u32_at(&blob, dsdt_at + 4) as usize;
        assert!(dsdt_len > HEADER_LEN, "the DSDT has a body");
        assert_eq!(sum(&blob[dsdt_at..dsdt_at + dsdt_len]), 0, "DSDT checksum");
    }

    #[test]
    fn madt_lists_every_cpu_and_the_ioapic() {
        for cpus in [1u8, 2, 4, 64] {
            let blob = build(cpus, &PORTS, ACPI_START);
            let madt = tables(&blob, ACPI_START).remove(1).1;
            assert_eq!(u32_at(&madt, 36), APIC_DEFAULT_PHYS_BASE);
            let mut off = 44;
            let (mut lapics, mut ioapics) = (Vec::new(), 0);
            while off < madt.len() {
                let (kind, len) = (madt[off], madt[off + 1] as usize);
                assert!(len >= 2 && off + len <= madt.len(), "entry bounds");
                match kind {
                    MADT_LOCAL_APIC => {
                        assert_eq!(u32_at(&madt, off + 4), LAPIC_ENABLED);
                        lapics.push(madt[off + 3]);
                    }
                    MADT_IOAPIC => {
                        ioapics += 1;
                        assert_eq!(madt[off + 2], cpus, "IOAPIC id follows the CPUs");
                        assert_eq!(u32_at(&madt, off + 4), IOAPIC_DEFAULT_PHYS_BASE);
                    }
                    _ => {}
                }
                off += len;
            }
            assert_eq!(lapics, (0..cpus).collect::<Vec<_>>());
            assert_eq!(ioapics, 1);
        }
    }

    #[test]
    fn largest_table_set_fits_the_bios_area() {
        let blob = build(crate::layout::MAX_VCPUS, &PORTS, ACPI_START);
        assert!(ACPI_START + blob.len() as u64 <= ACPI_END);
        // Still a well-formed chain, DSDT included, and `write` accepts it.
        let t = tables(&blob, ACPI_START);
        assert_eq!(t.len(), 2);
        let dsdt_at = (u64_at(&t[0].1, 140) - ACPI_START) as usize;
        assert_eq!(blob[dsdt_at..dsdt_at + dsdt(&PORTS).len()], dsdt(&PORTS));
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), ACPI_END as usize)])
            .expect("guest memory");
        assert_eq!(
            write(&mem, crate::layout::MAX_VCPUS, &PORTS).expect("write"),
            ACPI_START
        );
        let mut back = vec![0u8; blob.len()];
        mem.read_slice(&mut back, GuestAddress(ACPI_START))
            .expect("read back");
        assert_eq!(back, blob);
    }

    /// The value and width of the `PkgLength` at the start of `b`.
    fn pkg_length_at(b: &[u8]) -> (usize, usize) {
        let follow = usize::from(b[0] >> 6);
        if follow == 0 {
            return (usize::from(b[0] & 0x3f), 1);
        }
        let value = (0..follow).fold(usize::from(b[0] & 0xf), |v, i| {
            v | usize::from(b[1 + i]) << (4 + 8 * i)
        });
        (value, 1 + follow)
    }

    #[test]
    fn dsdt_header_and_nesting() {
        let blob = build(2, &PORTS, ACPI_START);
        let fadt = tables(&blob, ACPI_START).remove(0).1;
        let at = (u64_at(&fadt, 140) - ACPI_START) as usize;
        let len = u32_at(&blob, at + 4) as usize;
        let dsdt = &blob[at..at + len];
        assert_eq!(dsdt, &super::dsdt(&PORTS)[..]);
        assert_eq!(&dsdt[0..4], b"DSDT");
        assert_eq!(dsdt[8], DSDT_REVISION);
        assert_eq!(sum(dsdt), 0, "DSDT checksum");
        // It lies between the XSDT and the FADT, overlapping neither.
        let xsdt_at = (u64_at(&blob, 24) - ACPI_START) as usize;
        let xsdt_end = xsdt_at + u32_at(&blob, xsdt_at + 4) as usize;
        let fadt_at = (u64_at(&blob, xsdt_at + HEADER_LEN) - ACPI_START) as usize;
        assert!(xsdt_end <= at && at + len <= fadt_at);

        // Scope (\_SB) spans the rest of the table; Device (PCI0) and Device (PS2_) the rest of
        // the scope.
        let aml = &dsdt[HEADER_LEN..];
        assert_eq!(aml[0], 0x10);
        let (scope_len, w) = pkg_length_at(&aml[1..]);
        assert_eq!(1 + scope_len, aml.len());
        let name_end = 1 + w + 5;
        assert_eq!(&aml[1 + w..name_end], b"\\_SB_");
        let dev = &aml[name_end..];
        assert_eq!(dev[..2], [0x5b, 0x82]);
        let (dev_len, w) = pkg_length_at(&dev[2..]);
        assert_eq!(&dev[2 + w..2 + w + 4], b"PCI0");
        let ps2 = &dev[2 + dev_len..];
        assert_eq!(ps2[..2], [0x5b, 0x82]);
        let (ps2_len, ps2_w) = pkg_length_at(&ps2[2..]);
        assert_eq!(2 + ps2_len, ps2.len(), "PS2_ ends the scope");
        assert_eq!(&ps2[2 + ps2_w..2 + ps2_w + 4], b"PS2_");
        let terms = &dev[2 + w + 4..];
        // The first terms: _HID and _CID as EisaId DWords.
        #[rustfmt::skip]
        let ids = [
            0x08, b'_', b'H', b'I', b'D', 0x0c, 0x41, 0xd0, 0x0a, 0x08,
            0x08, b'_', b'C', b'I', b'D', 0x0c, 0x41, 0xd0, 0x0a, 0x03,
        ];
        assert_eq!(terms[..ids.len()], ids);
    }

    /// Removes the directory when dropped, test failure or not.
    struct TempDir(std::path::PathBuf);

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn run_iasl(dir: &std::path::Path, args: &[&str]) -> String {
        let out = std::process::Command::new("iasl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("run iasl");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "iasl {args:?} failed:\n{text}");
        text
    }

    /// The DSDT as ACPICA's disassembler reads it, and back: what iasl makes of the disassembly
    /// is byte for byte our AML. Skipped when `iasl` (Debian: acpica-tools) is not installed.
    #[test]
    fn iasl_disassembles_and_recompiles_the_dsdt() {
        if std::process::Command::new("iasl")
            .arg("-v")
            .output()
            .is_err()
        {
            eprintln!("skipped: iasl not found (install acpica-tools to run this test)");
            return;
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let dir = TempDir(
            std::env::temp_dir().join(format!("osprey-acpi-{}-{nanos}", std::process::id())),
        );
        std::fs::create_dir_all(&dir.0).expect("temp dir");
        let table = dsdt(&PORTS);
        std::fs::write(dir.0.join("dsdt.dat"), &table).expect("write dsdt.dat");

        let log = run_iasl(&dir.0, &["-d", "dsdt.dat"]);
        let dsl = std::fs::read_to_string(dir.0.join("dsdt.dsl")).expect("dsdt.dsl");
        let expected = [
            "Scope (\\_SB)".to_string(),
            "Device (PCI0)".to_string(),
            "EisaId (\"PNP0A08\")".to_string(),
            "EisaId (\"PNP0A03\")".to_string(),
            "Name (_UID, Zero)".to_string(),
            "Name (_SEG, Zero)".to_string(),
            "Name (_BBN, Zero)".to_string(),
            "ResourceTemplate ()".to_string(),
            "WordBusNumber (ResourceProducer, MinFixed, MaxFixed, PosDecode,".to_string(),
            "IO (Decode16,".to_string(),
            format!("0x{:04X},", PORTS.pci_config_base),
            format!("0x{:02X},", PORTS.pci_config_len),
            "WordIO (ResourceProducer, MinFixed, MaxFixed, PosDecode, EntireRange,".to_string(),
            format!("0x{:04X},", PORTS.pci_config_base - 1),
            format!("0x{:04X},", PORTS.pci_config_base + u16::from(PORTS.pci_config_len)),
            "DWordMemory (ResourceProducer, PosDecode, MinFixed, MaxFixed, NonCacheable, ReadWrite,"
                .to_string(),
            format!("0x{PCI_MMIO_START:08X},"),
            format!("0x{:08X},", PCI_MMIO_END - 1),
            format!("0x{:08X},", PCI_MMIO_END - PCI_MMIO_START),
            "Device (PS2)".to_string(),
            "EisaId (\"PNP0303\")".to_string(),
            "0x0060,".to_string(),
            "0x0064,".to_string(),
            "Interrupt (ResourceConsumer, Edge, ActiveHigh, Exclusive, ,, )".to_string(),
            "0x00000001,".to_string(),
        ];
        for needle in &expected {
            assert!(
                dsl.contains(needle.as_str()),
                "{needle:?} missing from:\n{dsl}"
            );
        }
        for bad in ["Error", "error", "could not", "Unknown", "Warning"] {
            assert!(!dsl.contains(bad), "{bad:?} in the disassembly:\n{dsl}");
            assert!(!log.contains(bad), "{bad:?} from iasl -d:\n{log}");
        }

        // Recompile the disassembly without optimizations (iasl would shorten `\_SB` to `_SB_`
        // at the top level): the AML after the header, whose creator fields iasl sets to its
        // own, must be exactly ours, and iasl must not warn.
        let log = run_iasl(&dir.0, &["-oa", "-p", "recompiled", "dsdt.dsl"]);
        let aml = std::fs::read(dir.0.join("recompiled.aml")).expect("recompiled.aml");
        assert_eq!(aml[..4], table[..4]);
        assert_eq!(aml[4..8], table[4..8], "length; iasl said:\n{log}");
        assert_eq!(aml[HEADER_LEN..], table[HEADER_LEN..], "iasl said:\n{log}");
        assert!(log.contains(" 0 Warnings,"), "iasl warned:\n{log}");
        assert!(!dsl.contains("_ADR"), "a device has _HID or _ADR, not both");
    }
}
