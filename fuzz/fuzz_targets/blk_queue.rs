//! The virtio-blk queue handler (`BlockQueueHandler`, Null engine) processing arbitrary avail
//! rings, descriptor tables and buffers over several rounds of `run(32)`.
//!
//! Input: byte 0 = queue size exponent (bits 0-2: 2..=256), EVENT_IDX (bit 3), read-only drive
//! (bit 4), hostile mode (bit 5); byte 1 = engine depth (1..=64); bytes 2..10 = capacity in
//! sectors; byte 10 = rounds (1..=8); then each round (see below); the rest is the memory image
//! copied to guest address 0 (descriptor table 0x0, avail ring 0x1000, used ring 0x2000).
//!
//! * Model mode (bit 5 clear): the target plays a well-behaved driver for the rings only. It
//!   zeroes the avail/used rings, moves every descriptor buffer out of the ring area (and drops
//!   INDIRECT) so the device cannot scribble on the rings, and each round publishes up to `size`
//!   outstanding heads from the input. After each round the used ring must hold only published
//!   heads, each completed at most once per publication, and (unless the device asked for a
//!   reset) every published chain must be complete.
//! * Hostile mode (bit 5 set): each round patches arbitrary guest memory (rings included), then
//!   runs. Only "no panic, no hang" is checked.
//!
//! In both modes each round's `run` loop must end (return false) within a bounded number of turns.
//!
//! The body is `devices::test_utils::fuzz::blk_queue::run` (the `test-utils` feature),
//! shared with the workspace test that replays every kept input (`tests/fuzz_regressions.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| devices::test_utils::fuzz::blk_queue::run(data));
