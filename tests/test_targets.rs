//! Every file in the top-level `tests/` folder is a test target of some workspace crate: a test
//! written there but never declared as a `[[test]]` (Cargo does not discover `../tests/`) would
//! otherwise never build nor run, and nothing would say so. And every test target lives there.
//!
//! The targets come from `cargo metadata` (the `cargo` running this test, `$CARGO`), so the
//! check reads the manifests as Cargo does.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace's root (this crate is one level below it).
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("workspace root")
}

/// The source file of every `test` target in the workspace, canonical.
fn declared_tests(root: &Path) -> BTreeSet<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let packages = meta["packages"].as_array().expect("packages");
    packages
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter(|t| {
            t["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "test"))
        })
        .filter_map(|t| t["src_path"].as_str())
        .filter_map(|p| Path::new(p).canonicalize().ok())
        .collect()
}

#[test]
fn every_file_in_tests_is_a_declared_test_target() {
    let root = workspace_root();
    let declared = declared_tests(&root);
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root.join("tests")).expect("read tests/") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            let path = path.canonicalize().expect("canonical");
            if !declared.contains(&path) {
                missing.push(path);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not a [[test]] of any crate (declare each in the Cargo.toml of the crate it tests, \
         path = \"../tests/<name>.rs\"): {missing:?}"
    );
}

#[test]
fn every_declared_test_target_lives_in_the_top_level_tests_folder() {
    // One place for integration tests (docs/ARCHITECTURE.md, "Tests"): a crate's own `tests/`
    // folder would be found by Cargo alone and escape the check above's readers.
    let root = workspace_root();
    let tests = root.join("tests");
    let elsewhere: Vec<_> = declared_tests(&root)
        .into_iter()
        .filter(|p| !p.starts_with(&tests))
        .collect();
    assert!(
        elsewhere.is_empty(),
        "test targets outside the top-level tests/ (move each there, declared with \
         path = \"../tests/<name>.rs\"): {elsewhere:?}"
    );
}
