//! A vsock socket bound before its device exists. Firecracker binds `uds_path` when it answers
//! `PUT /vsock`, before `InstanceStart`, and its clients may rely on that (a runtime waits for
//! the path, or changes its mode, between the two). The pre-boot API binds it here ([`hold`]);
//! the device built at `InstanceStart` takes the listener over ([`take`]) instead of binding
//! again. One socket at most is held: a second `PUT /vsock` replaces the first (its file
//! removed), as Firecracker's does.

use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

static HELD: Mutex<Option<(PathBuf, UnixListener)>> = Mutex::new(None);

/// Removes `path` when it is a socket (a stale one, or one this process bound and let go).
pub(crate) fn remove_socket_file(path: &Path) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path);
    }
}

/// Binds `path` now and holds it for the device; a socket held before is closed and its file
/// removed first (also when it is the same path: it is bound again).
pub fn hold(path: &Path) -> std::io::Result<()> {
    let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((old, listener)) = held.take() {
        drop(listener);
        remove_socket_file(&old);
    }
    remove_socket_file(path);
    let listener = crate::uds::bind_listening(path, None)?;
    *held = Some((path.to_path_buf(), listener));
    Ok(())
}

/// The listener [`hold`] bound on `path`, if it is that path's.
pub(crate) fn take(path: &Path) -> Option<UnixListener> {
    let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
    match held.take() {
        Some((p, listener)) if p == path => Some(listener),
        other => {
            *held = other;
            None
        }
    }
}

/// Whether a socket is held on `path`.
pub fn holds(path: &Path) -> bool {
    HELD.lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .is_some_and(|(p, _)| p == path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    /// One test for the process-wide slot (tests run in parallel threads).
    #[test]
    fn a_held_socket_accepts_is_replaced_and_is_taken_once() {
        let dir = std::env::temp_dir().join(format!("osprey-prebound-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let (a, b) = (dir.join("a.sock"), dir.join("b.sock"));
        hold(&a).expect("hold a");
        assert!(
            UnixStream::connect(&a).is_ok(),
            "bound and listening at once"
        );
        hold(&b).expect("hold b");
        assert!(!a.exists(), "the first socket's file is removed");
        assert!(holds(&b) && !holds(&a));
        hold(&b).expect("the same path again");
        assert!(UnixStream::connect(&b).is_ok());
        assert!(take(&a).is_none(), "another path's");
        let l = take(&b).expect("b's listener");
        assert!(take(&b).is_none(), "taken once");
        drop(l);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
