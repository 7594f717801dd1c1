//! Test scaffolding other crates share: the fake API controller ([`fake_control`]), for this
//! crate's socket tests, the VMM's `api_router` fuzz target and its tests.
//!
//! Compiled for this crate's tests and, with the `test-utils` feature, for the crates that take
//! it; never into a `cargo build` of the `osprey` binary.

pub mod fake_control;
