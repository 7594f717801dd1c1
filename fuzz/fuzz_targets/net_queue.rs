//! The virtio-net queue pair (`NetQueuePair`) over arbitrary rx and tx rings, with frames of any
//! size from the host: a hostile guest. The input format is in
//! `devices::test_utils::fuzz::net_queue`, the body shared with `tests/fuzz_regressions.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| devices::test_utils::fuzz::net_queue::run(data));
