//! virtio-blk request parsing and completion over arbitrary guest memory and descriptor tables.
//!
//! Input: byte 0 = queue size exponent (bits 0-2: size 2..=256), EVENT_IDX (bit 3), read-only
//! drive (bit 4); bytes 1..9 = disk capacity in sectors; the rest is copied to guest address 0
//! (descriptor table at 0x0, avail ring at 0x1000, used ring at 0x2000, buffers anywhere in the
//! 1 MiB of guest memory). Every chain the queue yields is parsed with
//! `devices::block::request::parse` and completed as `BlockQueueHandler` does: parsed I/O runs
//! on the Null engine (which zero-fills read buffers through the parser's host pointers), the
//! status byte is written and the head goes on the used ring.
//!
//! The body is `devices::test_utils::fuzz::blk_request::run` (the `test-utils` feature),
//! shared with the workspace test that replays every kept input (`tests/fuzz_regressions.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| devices::test_utils::fuzz::blk_request::run(data));
