//! The bodies of the device fuzz targets, one module each with `run(data)`: called by the
//! libFuzzer binaries (`fuzz/fuzz_targets/`) and by the workspace test that replays every input
//! kept in `fuzz/regressions/` and `fuzz/corpus/` (`tests/fuzz_regressions.rs`, through
//! `vmm::test_utils::fuzz::ALL`). Each module's doc comment describes its input format.

pub mod blk_queue;
pub mod blk_request;
pub mod common;
pub mod net_ctrl;
pub mod net_queue;
pub mod virtio_pci;
pub mod vsock_queue;
