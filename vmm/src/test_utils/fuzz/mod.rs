//! The bodies of every fuzz target, one `run(data)` each: this crate's own (`api_router`,
//! `bzimage_header`, `snapshot_file`, `vm_config`) and the device targets from `devices::test_utils::fuzz`. The
//! libFuzzer binaries (`fuzz/fuzz_targets/`) call them, and so does the workspace test that
//! replays every input kept in `fuzz/regressions/` and `fuzz/corpus/` (`tests/fuzz_regressions.rs`,
//! through [`ALL`]). Each module's doc comment describes its input format.

use devices::test_utils::fuzz::{
    blk_queue, blk_request, net_ctrl, net_queue, virtio_pci, vsock_queue,
};

pub mod api_router;
pub mod bzimage_header;
pub mod snapshot_file;
pub mod vm_config;

/// A target's body: one input.
pub type Body = fn(&[u8]);

/// Every target: its name (the folder of its inputs) and its body.
pub const ALL: [(&str, Body); 10] = [
    ("api_router", api_router::run),
    ("blk_queue", blk_queue::run),
    ("blk_request", blk_request::run),
    ("net_ctrl", net_ctrl::run),
    ("net_queue", net_queue::run),
    ("bzimage_header", bzimage_header::run),
    ("snapshot_file", snapshot_file::run),
    ("virtio_pci", virtio_pci::run),
    ("vm_config", vm_config::run),
    ("vsock_queue", vsock_queue::run),
];
