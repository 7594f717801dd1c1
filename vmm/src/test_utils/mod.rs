//! Test scaffolding shared between this crate's tests and other crates, so none of it is copied:
//! the fake API controller ([`fake_control`]), the bodies of every fuzz target ([`fuzz`]) and
//! the check that a message speaks JSON, not Rust ([`messages`]).
//!
//! Compiled for this crate's own tests and, with the `test-utils` feature, for the workspace's
//! integration tests (`tests/fuzz_regressions.rs`) and the fuzz targets (`fuzz/`). Not in a `cargo
//! build` of the `osprey` binary.

pub use api::test_utils::fake_control;
pub mod fuzz;
pub use vmm_config::test_utils::messages;
