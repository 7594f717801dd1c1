//! `sandbox.namespaces`: Osprey leaves the host's mount, IPC, UTS and network namespaces for new,
//! private ones before it sets anything up. A VMM with virtio-blk only needs no network of its
//! own (its API is a Unix socket found by path, which works across network namespaces), no
//! System V IPC and no host name; a private mount namespace keeps any mount made later from the
//! host. Needs `CAP_SYS_ADMIN` and a single-threaded process (the kernel refuses a new mount
//! namespace to a thread that shares its file-system state).

use std::io;

/// The namespaces left, and their names for the log.
const NAMESPACES: [(libc::c_int, &str); 4] = [
    (libc::CLONE_NEWNS, "mount"),
    (libc::CLONE_NEWIPC, "ipc"),
    (libc::CLONE_NEWUTS, "uts"),
    (libc::CLONE_NEWNET, "net"),
];

/// Errors entering the namespaces.
#[derive(Debug, thiserror::Error)]
pub enum NamespaceError {
    /// `unshare` failed.
    #[error(
        "sandbox.namespaces: unshare(mount, ipc, uts, net) failed: {0} (it needs root or \
         CAP_SYS_ADMIN, and Osprey must not have started threads yet)"
    )]
    Unshare(io::Error),
    /// Making the new mount namespace private failed.
    #[error("sandbox.namespaces: making the mount namespace private failed: {0}")]
    MakePrivate(io::Error),
}

/// Names of the namespaces [`enter`] creates: `mount+ipc+uts+net`.
pub fn describe() -> String {
    NAMESPACES
        .iter()
        .map(|(_, n)| *n)
        .collect::<Vec<_>>()
        .join("+")
}

/// Moves the calling (single-threaded) process into new mount, IPC, UTS and network namespaces,
/// with every mount private (nothing propagates back to the host).
pub fn enter() -> Result<(), NamespaceError> {
    let flags = NAMESPACES.iter().fold(0, |f, (flag, _)| f | flag);
    // SAFETY: unshare takes flags only.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(NamespaceError::Unshare(io::Error::last_os_error()));
    }
    // SAFETY: the path is a NUL-terminated literal; the other pointers may be null for a
    // propagation change (MS_REC | MS_PRIVATE on "/").
    let ret = unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    if ret != 0 {
        return Err(NamespaceError::MakePrivate(io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_every_namespace() {
        assert_eq!(describe(), "mount+ipc+uts+net");
    }
}
