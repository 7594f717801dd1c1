//! A busy host for a point (`--hog N`): N CPU-bound processes (plain shell busy loops) run beside
//! the VM while the point is measured, each bounded by `timeout` and killed when the point ends.

use std::process::{Child, Command, Stdio};

/// The longest a hog may live, whatever happens to the runner.
const HOG_LIFETIME_S: u32 = 3600;

/// Running hogs; dropping it stops them.
#[derive(Debug)]
pub struct Hogs(Vec<Child>);

impl Hogs {
    /// Starts `n` busy loops (none for 0).
    pub fn start(n: u32) -> std::io::Result<Hogs> {
        let mut hogs = Hogs(Vec::new());
        for _ in 0..n {
            let child = Command::new("timeout")
                .arg(format!("{HOG_LIFETIME_S}s"))
                .args(["sh", "-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?;
            hogs.0.push(child);
        }
        Ok(hogs)
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            // `timeout` passes the signal on to the loop it runs.
            // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        }
        for c in &mut self.0 {
            let _ = c.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu_ticks(pid: u32) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // utime is field 14; the command name (field 2) has no spaces here.
        stat.split_whitespace()
            .nth(13)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    #[test]
    fn hogs_burn_cpu_and_stop_when_dropped() {
        let hogs = Hogs::start(1).expect("start");
        let pid = hogs.0[0].id();
        std::thread::sleep(std::time::Duration::from_millis(300));
        // The busy loop is the `sh` that `timeout` runs: a child of it.
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).expect("children");
        let sh: u32 = children
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .expect("the loop");
        assert!(cpu_ticks(sh) > 5, "the loop burns CPU");
        drop(hogs);
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(
            !std::path::Path::new(&format!("/proc/{sh}")).exists()
                || std::fs::read_to_string(format!("/proc/{sh}/stat"))
                    .unwrap_or_default()
                    .contains(") Z "),
            "the loop is gone"
        );
    }
}
