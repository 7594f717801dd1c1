//! Replays every input kept for the fuzz targets through the targets' own bodies (shared with
//! the libFuzzer binaries, `vmm::test_utils::fuzz`): the crash inputs saved in
//! `fuzz/regressions/<target>/` and the seeds in `fuzz/corpus/<target>/`. A finding (a panic, a
//! failed check) fails the test with the file's name; no fuzzing toolchain is needed, so
//! `make test` runs it.

use std::path::{Path, PathBuf};

use vmm::test_utils::fuzz as targets;

/// The files in `dir` (none when it does not exist), sorted.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

#[test]
fn every_kept_fuzz_input_replays_without_a_finding() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut replayed = 0;
    let mut regressions = 0;
    for (name, run) in targets::ALL {
        let kept = inputs(&root.join("regressions").join(name));
        regressions += kept.len();
        for file in kept.iter().chain(&inputs(&root.join("corpus").join(name))) {
            let data = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let outcome = std::panic::catch_unwind(|| run(&data));
            assert!(
                outcome.is_ok(),
                "fuzz target {name} fails on {} (replay: fuzz/target/x86_64-unknown-linux-gnu/release/{name} {})",
                file.display(),
                file.display()
            );
            replayed += 1;
        }
    }
    eprintln!("replayed {replayed} inputs, {regressions} of them saved regressions");
    assert!(
        regressions >= 2,
        "the saved virtio_pci regressions are found"
    );
    assert!(replayed >= 30, "the corpora are found: {replayed}");
}
