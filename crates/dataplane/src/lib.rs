//! Osprey's dataplane: the iothread event loop, the adaptive polling policy and the I/O engines.
//!
//! This crate knows nothing of KVM, PCI or virtio; devices hand it pollable handlers and it
//! drives them. It is filled in by the virtio-blk, engines and polling work.
