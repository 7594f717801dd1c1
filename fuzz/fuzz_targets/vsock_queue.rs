//! The vsock handler (`VsockHandler` and its muxer) over arbitrary rx, tx and event rings and
//! packets, a host client connected or not: a hostile guest. The input format is in
//! `devices::test_utils::fuzz::vsock_queue`, the body shared with `tests/fuzz_regressions.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| devices::test_utils::fuzz::vsock_queue::run(data));
