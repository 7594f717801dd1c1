//! The Linux kit for the Linux guest tests: fetches the Debian kernel and builds the kit (both
//! cached in `guest-images/cache/linux/`) by running their scripts.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use super::repo_root;

/// Runs `fetch-kernel.sh` (cheap when cached): the Debian kernel `examples/linux.json` boots.
pub fn fetch_kernel() -> PathBuf {
    run_scripts(&["fetch-kernel.sh"]);
    repo_root().join("guest-images/cache/linux")
}

/// Runs `fetch-kernel.sh` and `build-kit.sh` (cheap when cached) and returns the kit folder.
pub fn build_kit() -> PathBuf {
    run_scripts(&["fetch-kernel.sh", "build-kit.sh"]);
    repo_root().join("guest-images/cache/linux")
}

fn run_scripts(scripts: &[&str]) {
    let root = repo_root();
    for script in scripts {
        let t0 = Instant::now();
        let out = Command::new("bash")
            .arg(root.join("guest-images/linux").join(script))
            .output()
            .unwrap_or_else(|e| panic!("run {script}: {e}"));
        assert!(
            out.status.success(),
            "{script} failed (it needs Debian's apt archive):\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("    {script}: {:.1} s", t0.elapsed().as_secs_f64());
    }
}
