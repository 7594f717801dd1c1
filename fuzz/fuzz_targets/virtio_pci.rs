//! virtio-pci: PCI config-space and BAR0 (common config, ISR, device config, notify, MSI-X
//! table/PBA) accesses in any order, through the `PciConfigIo` (ports 0xcf8-0xcff) and
//! `PciMmioWindow` bus adapters of a `PciRoot` holding one `VirtioPciDevice` (mock device model,
//! two queues, three MSI-X vectors).
//!
//! Input: byte 0 = mock flags (bit 0: activation fails); then 8-byte operations:
//!   b0 bit 0: space (0 = PCI config through 0xcf8/0xcfc, 1 = MMIO window / BAR0)
//!   b0 bit 1: write (else read)
//!   b0 bits 2-3: width 1, 2, 4 or 8 (8 only on MMIO; config uses 4 instead)
//!   b0 bits 4-5: config target: 0/1 = device 1 (the virtio device), 2 = device 0 (host bridge),
//!                3 = raw access to CONFIG_ADDRESS/CONFIG_DATA ports at 0xcf8 + (offset & 7)
//!   b1-b2: offset (config: register 0-255; MMIO: byte offset into the window)
//!   b3: unused
//!   b4-b7: value (little endian; an 8-byte write repeats it)
//! Checks: no panic; never more live ioeventfd registrations than queues, never two on one
//! address; after the whole machine is dropped no ioeventfd registration is left.
//!
//! The body is `devices::test_utils::fuzz::virtio_pci::run` (the `test-utils` feature),
//! shared with the workspace test that replays every kept input (`tests/fuzz_regressions.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| devices::test_utils::fuzz::virtio_pci::run(data));
