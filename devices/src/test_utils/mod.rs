//! Test scaffolding other crates share, so none of it is copied between crates: the virtio-blk
//! queue rig ([`queue`]) and the bodies of the device fuzz targets ([`fuzz`]).
//!
//! Compiled for this crate's own tests and, with the `test-utils` feature, for the crates that
//! take `devices` with that feature: the workspace's integration tests, the benches
//! (`osprey-benches`) and the fuzz targets (`fuzz/`). Not in a `cargo build` of the `osprey`
//! binary.

pub mod fuzz;
pub mod queue;
