//! `arch::unpack` on arbitrary bytes: the setup-header parser, the payload bounds, the magic
//! sniffing and every decoder, with a 16 MiB output limit so a tiny input cannot make the fuzzer
//! allocate the production limit. Any outcome but a panic (or a hang) is fine.
//!
//! The body is `vmm::test_utils::fuzz::bzimage_header::run` (the `test-utils` feature),
//! shared with the workspace test that replays every kept input (`tests/fuzz_regressions.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vmm::test_utils::fuzz::bzimage_header::run(data));
