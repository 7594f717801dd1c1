//! The snapshot state file's parser (`vmm::snapshot::file::decode`): the whole file, or a body
//! behind a correct header. The input format and checks are those of the body,
//! `vmm::test_utils::fuzz::snapshot_file::run` (the `test-utils` feature), shared with the
//! workspace test that replays every kept input (`tests/fuzz_regressions.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vmm::test_utils::fuzz::snapshot_file::run(data));
