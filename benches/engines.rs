//! Submit → commit → reap per I/O engine (Sync, Auto, IoUring, LinuxAio, Null), in requests/s: each
//! iteration submits a batch of 1, 8, 32 or 128 reads of 4 KiB into 4 KiB-aligned buffers, commits
//! once and reaps until the whole batch is back, spinning on the engine's cheap check
//! (`has_completions`, no syscall) in between, as a polling iothread does. The engines come from
//! `dataplane::engine::open` with the options a queue of depth 128 gets.
//!
//! The file is a 64 MiB file in /dev/shm (tmpfs: page cache only, no device), opened buffered;
//! reads walk it with a prime stride. So the numbers are each engine's own per-request overhead
//! (syscalls, slot bookkeeping, copying 4 KiB out of the page cache), not storage latency.
//!
//! - LinuxAio is synchronous without O_DIRECT (and tmpfs has no O_DIRECT): `io_submit` does the
//!   reads before it returns, so its number is only meaningful relative to the others, as the
//!   cost of the AIO path itself.
//! - IoUring completes buffered tmpfs reads asynchronously (an io-wq worker) on Linux 6.18, so
//!   a round costs at least one hand-off to a kernel worker. Sleeping on the completion eventfd
//!   instead of spinning adds the host's wake-up latency on top (60–80 µs per round on the
//!   2-vCPU kvm_pvm dev machine, which this bench deliberately leaves out).
//!
//! - Auto on tmpfs is the Sync engine (every request is a memory copy). With `OSPREY_BENCH_DIR`
//!   naming a directory on a disk file system (e.g. `target`), the file is there, in the page
//!   cache, and Auto takes its inline path (`preadv2` with RWF_NOWAIT, batches of 4 or more to
//!   io_uring): Auto/1 against Sync/1 is then the cost of its bookkeeping per request (41 ns on
//!   ext4 on the dev machine: 1.085 against 1.044 µs).
//!
//! An engine this host cannot provide is skipped with a note on stderr.

use std::fs::File;
use std::hint::black_box;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dataplane::engine::{
    self, Completion, EngineKind, EngineOptions, IoEngine, IoOp, IoRequest, IoUringFlags, IoVec,
    ThreadTurn,
};

/// Requests per submit/commit/reap round.
const BATCHES: [usize; 4] = [1, 8, 32, 128];
/// The engines, in the order the results are printed.
const KINDS: [EngineKind; 5] = [
    EngineKind::Sync,
    EngineKind::Auto,
    EngineKind::IoUring,
    EngineKind::LinuxAio,
    EngineKind::Null,
];
/// One read.
const BLOCK: usize = 4096;
/// Blocks in the file (64 MiB).
const FILE_BLOCKS: u64 = 16 * 1024;
/// Blocks skipped between consecutive reads (prime, so every block is visited).
const STRIDE: u64 = 7919;
/// A round that has not completed after this long fails the bench.
const ROUND_TIMEOUT: Duration = Duration::from_secs(5);

/// A 4 KiB-aligned read buffer.
#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Block([u8; BLOCK]);

/// The test file in /dev/shm (or `OSPREY_BENCH_DIR`), removed on drop.
struct ShmFile(PathBuf);

impl ShmFile {
    fn create() -> Self {
        let dir = std::env::var("OSPREY_BENCH_DIR").unwrap_or_else(|_| "/dev/shm".into());
        let path = PathBuf::from(format!("{dir}/osprey-bench-engines-{}", std::process::id()));
        let mut f =
            File::create(&path).expect("create the bench file (OSPREY_BENCH_DIR or /dev/shm)");
        let chunk: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
        for _ in 0..FILE_BLOCKS * BLOCK as u64 / (1 << 20) {
            f.write_all(&chunk).expect("fill the file");
        }
        Self(path)
    }

    fn open(&self) -> File {
        File::open(&self.0).expect("open the file")
    }
}

impl Drop for ShmFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// One round: submit `bufs.len()` reads, commit once, reap them all.
fn round(
    kind: EngineKind,
    engine: &mut dyn IoEngine,
    bufs: &[*mut u8],
    next: &mut u64,
    out: &mut Vec<Completion>,
) {
    for (i, &base) in bufs.iter().enumerate() {
        *next = (*next + STRIDE) % FILE_BLOCKS;
        let request = IoRequest {
            op: IoOp::Read {
                offset: *next * BLOCK as u64,
                iovecs: dataplane::engine::iovecs![IoVec { base, len: BLOCK }],
            },
            token: i as u64,
        };
        engine
            .submit(request)
            .expect("the engine has room for a whole batch");
    }
    engine.commit(&ThreadTurn::default());
    out.clear();
    let mut spins = 0u32;
    let mut deadline = None;
    while out.len() < bufs.len() {
        if engine.reap(out, &ThreadTurn::default()) > 0 {
            continue;
        }
        // Wait as a polling iothread does: spin on the engine's cheap check (no syscall).
        while !engine.has_completions() {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) {
                let until = *deadline.get_or_insert_with(|| Instant::now() + ROUND_TIMEOUT);
                assert!(
                    Instant::now() < until,
                    "engines/{kind}: {} of {} reads completed after {ROUND_TIMEOUT:?}",
                    out.len(),
                    bufs.len()
                );
            }
        }
    }
    if let Some(bad) = out.iter().find(|c| c.result != BLOCK as i64) {
        panic!("engines/{kind}: a read completed with {bad:?}");
    }
}

fn engines(c: &mut Criterion) {
    let file = ShmFile::create();
    let max_batch = BATCHES[BATCHES.len() - 1];
    // Declared before any engine, so every engine (which may hold pointers into these buffers
    // until its requests are reaped) is dropped first.
    let mut blocks = vec![Block([0; BLOCK]); max_batch];
    let bufs: Vec<*mut u8> = blocks.iter_mut().map(|b| b.0.as_mut_ptr()).collect();
    let mut out = Vec::with_capacity(max_batch);
    let mut group = c.benchmark_group("engines");
    for kind in KINDS {
        if let Err(e) = engine::probe(kind) {
            eprintln!("engines: skipping {kind}: {e}");
            continue;
        }
        let opts = EngineOptions {
            kind,
            depth: max_batch as u32,
            io_uring: IoUringFlags::default(),
            direct: false,
            fault: None,
        };
        let mut engine = match engine::open(file.open(), &opts, &engine::AioContextPool::new()) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("engines: skipping {kind}: {e}");
                continue;
            }
        };
        eprintln!("engines: {kind} is {}", engine.info());
        let mut next = 0;
        for batch in BATCHES {
            group.throughput(Throughput::Elements(batch as u64));
            group.bench_function(BenchmarkId::new(kind.to_string(), batch), |b| {
                b.iter(|| {
                    round(kind, engine.as_mut(), &bufs[..batch], &mut next, &mut out);
                    black_box(out.len())
                })
            });
        }
        assert_eq!(engine.in_flight(), 0, "engines/{kind}: every read reaped");
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = osprey_benches::criterion();
    targets = engines
}
criterion_main!(benches);
