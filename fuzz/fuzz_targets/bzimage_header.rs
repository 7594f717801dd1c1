//! `vmm::unpack` on arbitrary bytes: the setup-header parser, the payload bounds, the magic
//! sniffing and every decoder, with a 16 MiB output limit so a tiny input cannot make the fuzzer
//! allocate the production limit. Any outcome but a panic (or a hang) is fine.
//!
//! The body lives in `fuzz/targets/bzimage_header.rs`, shared with the workspace test that replays every
//! kept input (`tests/fuzz_regressions.rs`).
#![no_main]

#[path = "../targets/mod.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::bzimage_header::run(data));
