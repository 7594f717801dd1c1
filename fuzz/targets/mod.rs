//! The fuzz targets' bodies, one module each (`run(data)`), compiled into the libFuzzer
//! binaries (`fuzz/fuzz_targets/`) and into the workspace test that replays every input kept in
//! `fuzz/regressions/` and `fuzz/corpus/` (`tests/fuzz_regressions.rs`, part of `make test`).
#![allow(dead_code)]

pub mod api_router;
pub mod blk_queue;
pub mod blk_request;
pub mod bzimage_header;
pub mod common;
pub mod virtio_pci;
pub mod vm_config;

/// A target's body: one input.
pub type Body = fn(&[u8]);

/// Every target: its name (the folder of its inputs) and its body.
pub const ALL: [(&str, Body); 6] = [
    ("api_router", api_router::run),
    ("blk_queue", blk_queue::run),
    ("blk_request", blk_request::run),
    ("bzimage_header", bzimage_header::run),
    ("virtio_pci", virtio_pci::run),
    ("vm_config", vm_config::run),
];
