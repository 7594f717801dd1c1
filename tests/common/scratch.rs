//! Scratch folders for the integration tests: created empty, removed on drop (also when an
//! assertion fails).

use std::path::{Path, PathBuf};

/// A folder `osprey-<name>-<pid>`, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// In the system's temp folder.
    pub fn new(name: &str) -> Scratch {
        Scratch::under(&std::env::temp_dir(), name)
    }

    /// Under `base` (created if missing); for files that must not land on a tmpfs.
    pub fn under(base: &Path, name: &str) -> Scratch {
        let dir = base.join(format!("osprey-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        Scratch(dir)
    }

    /// A file holding `text`.
    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
        p
    }

    /// A sparse file of `bytes` bytes (a disk image).
    pub fn sparse(&self, name: &str, bytes: u64) -> PathBuf {
        let p = self.0.join(name);
        std::fs::File::create(&p)
            .and_then(|f| f.set_len(bytes))
            .unwrap_or_else(|e| panic!("create {}: {e}", p.display()));
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
