//! `VmConfig::from_json` on arbitrary text, then the checks `osprey` runs when it parses: the
//! values, then start-up's preflight (`vmm::preflight::check`).
//!
//! The preflight opens the files the config names. To keep the fuzzer from opening (or, for
//! drives, opening read-write) arbitrary host paths, and from blocking on a FIFO, every non-empty
//! path is rewritten before validation: the kernel and initrd to `/proc/self/exe` (readable, so
//! validation goes on to the later checks) or, when the name ends in `!`, to a nonexistent file;
//! drive images to a nonexistent file. Metrics/API paths are only checked for an existing parent
//! folder (`is_dir`) and are kept. Nothing is created.

use std::path::{Path, PathBuf};

use crate::config::VmConfig;

const MISSING: &str = "/nonexistent-osprey-fuzz/file";

fn rewrite(path: &mut PathBuf) {
    if path.as_os_str().is_empty() {
        return;
    }
    let missing = path.to_string_lossy().ends_with('!');
    *path = PathBuf::from(if missing { MISSING } else { "/proc/self/exe" });
}

/// One input.
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(mut config) = VmConfig::from_json(text, "fuzz") else {
        return;
    };
    rewrite(&mut config.boot.kernel_image_path);
    if let Some(initrd) = &mut config.boot.initrd_path {
        rewrite(initrd);
    }
    for d in &mut config.drives {
        if !d.path_on_host.as_os_str().is_empty() {
            d.path_on_host = Path::new(MISSING).to_path_buf();
        }
    }
    let _ = crate::preflight::check(&config, 4096);
    // A parsed config serializes back (the API's GET /vm/config shows it).
    let _ = serde_json::to_string(&config);
}
