//! Test scaffolding other crates share: the check that a message speaks JSON, not Rust
//! ([`messages`]); the metrics report with every field set ([`crate::metrics::tests_support`]).
//!
//! Compiled for this crate's tests and, with the `test-utils` feature, for the crates that take
//! it; never into a `cargo build` of the `osprey` binary.

pub mod messages;
