//! The main thread's filter before `InstanceStart` (`osprey --api-sock S` with no config): that
//! thread later builds the VM (KVM, files, threads, the sandbox itself), so it cannot take an
//! allow-list yet; it takes a deny-list of what no VMM start needs and an attacker wants first:
//! running programs, tracing or reading other processes, mounts and namespaces, kernel modules,
//! kexec, reboot, BPF and perf, keyrings, sockets of its own but Unix ones (the API socket is
//! bound before; the vsock device binds its own when the VM is built),
//! device nodes and links. Each traps like a run-time filter (the thread and the syscall named,
//! exit status [`super::EXIT_SECCOMP`]). The threads it starts inherit it under their own
//! allow-lists. The API thread's own list is the run-time one ([`super::ThreadKind::Api`]).

use std::collections::BTreeMap;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, SeccompRule, TargetArch};

use super::{install_sigsys_handler, SeccompError, THREAD_NAME, THREAD_NAME_LEN};

/// What the main thread may never do, before the start or after.
pub const DENIED: &[libc::c_long] = &[
    libc::SYS_execve,
    libc::SYS_execveat,
    libc::SYS_fork,
    libc::SYS_vfork,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsmount,
    libc::SYS_fsconfig,
    libc::SYS_setns,
    libc::SYS_unshare,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_socket,
    libc::SYS_connect,
    libc::SYS_mknod,
    libc::SYS_mknodat,
    libc::SYS_link,
    libc::SYS_linkat,
    libc::SYS_symlink,
    libc::SYS_symlinkat,
    libc::SYS_personality,
];

/// `socket(family, …)` with a family other than AF_UNIX.
fn not_unix_socket() -> Result<SeccompRule, seccompiler::BackendError> {
    use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition};
    SeccompRule::new(vec![SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Ne,
        libc::AF_UNIX as u64,
    )?])
}

/// Errors building the pre-boot filter.
#[derive(Debug, thiserror::Error)]
#[error("Pre-boot seccomp filter of the main thread: {0}")]
pub struct PrebootFilterError(#[from] seccompiler::BackendError);

/// The compiled deny-list.
#[derive(Debug, Clone)]
pub struct MainFilter {
    program: BpfProgram,
}

impl MainFilter {
    /// Compiles the deny-list: [`DENIED`] traps, everything else passes.
    pub fn build() -> Result<MainFilter, PrebootFilterError> {
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
            DENIED.iter().map(|&nr| (nr, Vec::new())).collect();
        // The vsock device binds its Unix socket when the VM is built on this thread: sockets
        // of any other family stay denied.
        rules.insert(libc::SYS_socket, vec![not_unix_socket()?]);
        let arch = TargetArch::try_from(std::env::consts::ARCH)?;
        let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Trap, arch)?;
        Ok(MainFilter {
            program: BpfProgram::try_from(filter)?,
        })
    }

    /// Installs it on the calling thread, for good.
    pub fn install(&self) -> Result<(), SeccompError> {
        install_sigsys_handler()?;
        let name = std::thread::current().name().unwrap_or("main").to_owned();
        let mut raw = [0u8; THREAD_NAME_LEN];
        let n = name.len().min(THREAD_NAME_LEN);
        raw[..n].copy_from_slice(&name.as_bytes()[..n]);
        THREAD_NAME.with(|t| t.set(raw));
        seccompiler::apply_filter(&self.program).map_err(|source| SeccompError::Install {
            thread: name,
            source,
        })?;
        log::debug!(
            "seccomp: thread main: pre-boot deny-list of {} syscalls",
            DENIED.len()
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deny_list_compiles_and_leaves_the_start_its_calls() {
        MainFilter::build().expect("compiles");
        for needed in [
            libc::SYS_openat,
            libc::SYS_ioctl,
            libc::SYS_clone3,
            libc::SYS_io_uring_setup,
            libc::SYS_landlock_restrict_self,
            libc::SYS_capset,
            libc::SYS_setresuid,
            libc::SYS_seccomp,
            libc::SYS_prctl,
            libc::SYS_rename,
            libc::SYS_fchownat,
        ] {
            assert!(!DENIED.contains(&needed), "{needed} is needed to start");
        }
    }

    #[test]
    fn a_filtered_thread_keeps_its_work() {
        let f = MainFilter::build().expect("filter");
        let t = std::thread::Builder::new()
            .name("preboot-test".into())
            .spawn(move || {
                f.install().expect("install");
                // Allowed: files, threads.
                let opened = std::fs::File::open("/proc/self/status").is_ok();
                let joined = std::thread::spawn(|| 7).join().unwrap_or(0);
                (opened, joined)
            })
            .expect("spawn");
        assert_eq!(t.join().expect("join"), (true, 7));
    }
}
