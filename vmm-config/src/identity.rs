//! How Osprey names itself to tools written for Firecracker. Run under its own name, Osprey says
//! it is Osprey: `osprey --version` prints `osprey 0.1.0 …`, vCPU threads are `vcpu0`, `vcpu1`.
//! Run under the name `firecracker` (a symlink: what the go-sdk runs by default, and what Kata's
//! `path` can name), it answers as those tools parse: `--version`'s first line has the Firecracker
//! API version as its second word (Kata's Go runtime takes it, less a leading `v`, as a semantic
//! version of at least 0.21.1) and still names Osprey, and vCPU threads are `fc_vcpu 0`,
//! `fc_vcpu 1` (Kata finds them by that prefix to put them in cgroups). docs/orchestration.md.

use std::sync::atomic::{AtomicBool, Ordering};

/// The Firecracker API version Osprey follows (its routes, shapes and codes).
pub const FIRECRACKER_API_VERSION: &str = "1.16.1";

/// The program name that switches Firecracker's names on.
pub const FIRECRACKER_NAME: &str = "firecracker";

static AS_FIRECRACKER: AtomicBool = AtomicBool::new(false);

/// Whom Osprey answers as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// Its own names.
    Osprey,
    /// Firecracker's names, for Firecracker's tools (run as `firecracker`).
    Firecracker,
}

impl Identity {
    /// The identity for a program run as `argv0`: Firecracker's when its file name is
    /// `firecracker`.
    pub fn of_program(argv0: &std::ffi::OsStr) -> Self {
        let name = std::path::Path::new(argv0).file_name();
        if name.is_some_and(|n| n == FIRECRACKER_NAME) {
            Self::Firecracker
        } else {
            Self::Osprey
        }
    }

    /// `--version`'s answer (with its trailing newline). `osprey_version` is Osprey's own.
    pub fn version_text(self, osprey_version: &str) -> String {
        match self {
            Self::Osprey => {
                format!("osprey {osprey_version} (Firecracker API v{FIRECRACKER_API_VERSION})\n")
            }
            Self::Firecracker => format!(
                "Firecracker-API v{FIRECRACKER_API_VERSION} (Osprey {osprey_version}, run as \
                 {FIRECRACKER_NAME})\n"
            ),
        }
    }

    /// The name of vCPU `id`'s thread.
    pub fn vcpu_thread_name(self, id: u8) -> String {
        match self {
            Self::Osprey => format!("vcpu{id}"),
            Self::Firecracker => format!("fc_vcpu {id}"),
        }
    }
}

/// Sets the process's identity (once, from `argv[0]`, in `main`).
pub fn set(identity: Identity) {
    AS_FIRECRACKER.store(identity == Identity::Firecracker, Ordering::Relaxed);
}

/// The process's identity.
pub fn get() -> Identity {
    if AS_FIRECRACKER.load(Ordering::Relaxed) {
        Identity::Firecracker
    } else {
        Identity::Osprey
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kata's Go runtime (`src/runtime/virtcontainers/fc.go`, `parseVersion`): the first line,
    /// split on spaces, its second field trimmed of a leading `v`.
    fn kata_parse_version(output: &str) -> Option<String> {
        let first = output.split('\n').next()?;
        let fields: Vec<&str> = first.split(' ').collect();
        let second = fields.get(1)?;
        Some(second.trim().trim_start_matches('v').to_string())
    }

    /// Kata's `checkVersion` (blang/semver's `Make`, then `LT(0.21.1)`): MAJOR.MINOR.PATCH of
    /// numbers without leading zeros, an optional `-pre-release` (ranked below its release)
    /// and `+build`; at least 0.21.1.
    fn kata_accepts(version: &str) -> bool {
        let core = version.split('+').next().unwrap_or("");
        let (core, pre) = match core.split_once('-') {
            Some((c, p)) => (c, Some(p)),
            None => (core, None),
        };
        let numbers: Vec<Option<u64>> = core
            .split('.')
            .map(|n| {
                let plain = !n.is_empty() && (n == "0" || !n.starts_with('0'));
                n.parse().ok().filter(|_| plain)
            })
            .collect();
        let [Some(major), Some(minor), Some(patch)] = numbers[..] else {
            return false;
        };
        if pre.is_some_and(|p| p.is_empty()) {
            return false;
        }
        let v = (major, minor, patch);
        v > (0, 21, 1) || (v == (0, 21, 1) && pre.is_none())
    }

    #[test]
    fn as_firecracker_the_version_passes_katas_check_and_names_osprey() {
        let text = Identity::Firecracker.version_text("0.1.0");
        let version = kata_parse_version(&text).expect("a second field");
        assert!(kata_accepts(&version), "{version}");
        assert!(!kata_accepts("0.1.0") && !kata_accepts("1.16") && kata_accepts("0.21.1"));
        assert!(text.contains("Osprey 0.1.0"), "{text}");
        let own = Identity::Osprey.version_text("0.1.0");
        assert!(own.starts_with("osprey 0.1.0 "), "{own}");
    }

    /// Kata's `GetThreadIDs`: threads whose name starts with `fc_vcpu`, the rest trimmed and
    /// parsed as the vCPU index; a thread's name (`comm`) is at most 15 bytes.
    #[test]
    fn as_firecracker_vcpu_threads_are_found_by_katas_match() {
        for id in [0u8, 7, 63] {
            let comm = Identity::Firecracker.vcpu_thread_name(id);
            assert!(comm.len() <= 15, "{comm}");
            let rest = comm.strip_prefix("fc_vcpu").expect("the prefix");
            assert_eq!(rest.trim().parse::<u8>().ok(), Some(id), "{comm}");
        }
        assert_eq!(Identity::Osprey.vcpu_thread_name(3), "vcpu3");
    }

    #[test]
    fn the_program_name_decides() {
        for (argv0, identity) in [
            ("/usr/local/bin/firecracker", Identity::Firecracker),
            ("firecracker", Identity::Firecracker),
            ("/usr/bin/osprey", Identity::Osprey),
            ("/usr/bin/firecracker-v1", Identity::Osprey),
        ] {
            assert_eq!(Identity::of_program(argv0.as_ref()), identity, "{argv0}");
        }
    }
}
