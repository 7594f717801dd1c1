//! `VmConfig::from_json` on arbitrary text, then `validate` when it parses.
//!
//! `validate` opens the files the config names. To keep the fuzzer from opening (or, for
//! drives, opening read-write) arbitrary host paths, and from blocking on a FIFO, every non-empty
//! path is rewritten before validation: the kernel and initrd to `/proc/self/exe` (readable, so
//! validation goes on to the later checks) or, when the name ends in `!`, to a nonexistent file;
//! drive images to a nonexistent file. Metrics/API paths are only checked for an existing parent
//! folder (`is_dir`) and are kept. Nothing is created.
//!
//! The body is `vmm::test_utils::fuzz::vm_config::run` (the `test-utils` feature),
//! shared with the workspace test that replays every kept input (`tests/fuzz_regressions.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vmm::test_utils::fuzz::vm_config::run(data));
