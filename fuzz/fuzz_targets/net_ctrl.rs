//! A multi-queue NIC's control queue handler (`CtrlHandler`) over an arbitrary control ring and
//! commands: a hostile guest. The input format is in `devices::test_utils::fuzz::net_ctrl`, the
//! body shared with `tests/fuzz_regressions.rs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| devices::test_utils::fuzz::net_ctrl::run(data));
