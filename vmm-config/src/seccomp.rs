//! Seccomp: one allow-list per thread type (vCPU, iothread, API, control, stdin), compiled once
//! at start with seccompiler and installed by each thread on itself once its set-up is done (by
//! the sandbox, `crate::sandbox`). A syscall outside the list raises `SIGSYS`; the handler prints
//! `osprey: seccomp: thread <name> made forbidden syscall <nr>` on stderr and ends the process
//! with [`EXIT_SECCOMP`]. `--seccomp off` turns the filters off for debugging. The lists, their
//! sizes and the reasons: `docs/seccomp.md`.

pub mod preboot;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use kvm_bindings::{
    kvm_clock_data, kvm_cpuid2, kvm_debugregs, kvm_fpu, kvm_ioeventfd, kvm_irq_routing,
    kvm_irqchip, kvm_irqfd, kvm_lapic_state, kvm_mp_state, kvm_msi, kvm_msrs, kvm_pit_state2,
    kvm_regs, kvm_sregs, kvm_translation, kvm_vcpu_events, kvm_xcrs, kvm_xsave,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Exit status of a process killed for a forbidden syscall (128 + `SIGSYS`, as a shell reports
/// a death by `SIGSYS`).
pub const EXIT_SECCOMP: i32 = 128 + libc::SIGSYS;

/// Errors building or installing a filter.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    /// seccompiler refused a rule or could not compile the filter.
    #[error("Seccomp filter for the {kind} thread: {source}")]
    Build {
        /// The thread type.
        kind: ThreadKind,
        /// The error.
        source: seccompiler::BackendError,
    },
    /// Installing the filter failed.
    #[error("Installing the seccomp filter on thread {thread}: {source}")]
    Install {
        /// The thread's name.
        thread: String,
        /// The error.
        source: seccompiler::Error,
    },
    /// Installing the `SIGSYS` handler failed.
    #[error("Installing the SIGSYS handler: {0}")]
    Handler(std::io::Error),
}

/// `--seccomp on|off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SeccompMode {
    /// Filter every thread (the default).
    #[default]
    On,
    /// No filters (for debugging).
    Off,
}

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Sets the process-wide mode (the command line does, before the VM starts).
pub fn set_mode(mode: SeccompMode) {
    ENABLED.store(mode == SeccompMode::On, Ordering::Relaxed);
}

/// The process-wide mode.
pub fn mode() -> SeccompMode {
    if ENABLED.load(Ordering::Relaxed) {
        SeccompMode::On
    } else {
        SeccompMode::Off
    }
}

/// The thread types that get a filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadKind {
    /// A vCPU thread (`KVM_RUN` and exit dispatch, including device activation).
    Vcpu,
    /// An iothread (the dataplane loop and its I/O engines).
    IoThread,
    /// The API thread (tokio + hyper on the Unix socket).
    Api,
    /// The main thread once the VM runs: the control loop (API commands, metrics, stop).
    Control,
    /// The thread that copies stdin to the serial port.
    Stdin,
}

impl ThreadKind {
    /// Every thread type.
    pub const ALL: [ThreadKind; 5] = [
        ThreadKind::Vcpu,
        ThreadKind::IoThread,
        ThreadKind::Api,
        ThreadKind::Control,
        ThreadKind::Stdin,
    ];

    /// The name used in messages (and by the tests' sandbox probe).
    pub fn name(self) -> &'static str {
        match self {
            ThreadKind::Vcpu => "vcpu",
            ThreadKind::IoThread => "iothread",
            ThreadKind::Api => "api",
            ThreadKind::Control => "control",
            ThreadKind::Stdin => "stdin",
        }
    }

    /// The syscalls this thread type may make, with the argument rules of those allowed only
    /// in part (an empty list allows every call).
    pub fn rules(self) -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::BackendError> {
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        let specific: &[libc::c_long] = match self {
            ThreadKind::Vcpu => VCPU,
            ThreadKind::IoThread => IOTHREAD,
            ThreadKind::Api => API,
            ThreadKind::Control => CONTROL,
            ThreadKind::Stdin => &[],
        };
        for &nr in COMMON.iter().chain(specific) {
            rules.insert(nr, Vec::new());
        }
        let ioctls: &[u64] = match self {
            ThreadKind::Vcpu => &VCPU_IOCTLS,
            ThreadKind::IoThread => &IOTHREAD_IOCTLS,
            ThreadKind::Stdin => &[],
            ThreadKind::Api => &[libc::FIONBIO],
            ThreadKind::Control => &CONTROL_IOCTLS,
        };
        if self == ThreadKind::Stdin {
            // The last reference to an fd the stdin thread shares (its sandbox hook's) may drop
            // on it, after its filter: Rust's debug builds check an fd with fcntl(F_GETFD)
            // before closing it. The other thread types may call fcntl anyway.
            rules.insert(
                libc::SYS_fcntl,
                vec![SeccompRule::new(vec![SeccompCondition::new(
                    1,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::Eq,
                    libc::F_GETFD as u64,
                )?])?],
            );
        }
        if self == ThreadKind::IoThread {
            rules.insert(libc::SYS_setpriority, vec![iothread_setpriority()?]);
            rules.insert(libc::SYS_sched_setaffinity, vec![on_this_thread_only()?]);
            rules.insert(libc::SYS_socket, vec![unix_socket_only()?]);
            rules.insert(libc::SYS_poll, vec![poll_peek_only()?]);
        }
        if !ioctls.is_empty() {
            let mut allowed = Vec::with_capacity(ioctls.len());
            for &request in ioctls {
                allowed.push(SeccompRule::new(vec![SeccompCondition::new(
                    1,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::Eq,
                    request,
                )?])?);
            }
            rules.insert(libc::SYS_ioctl, allowed);
        }
        Ok(rules)
    }
}

impl std::fmt::Display for ThreadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Every thread: memory allocation and release (the allocator), locks and channels (futex),
/// time, logging to stderr, a kick or stop signal's return, and the thread's own exit.
const COMMON: &[libc::c_long] = &[
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_writev,
    libc::SYS_close,
    libc::SYS_futex,
    libc::SYS_clock_gettime,
    libc::SYS_clock_nanosleep,
    libc::SYS_nanosleep,
    libc::SYS_sched_yield,
    libc::SYS_getrandom,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mprotect,
    libc::SYS_mremap,
    libc::SYS_madvise,
    libc::SYS_brk,
    libc::SYS_rt_sigreturn,
    // The kernel's way back into a sleep (`clock_nanosleep`, `futex`) a signal interrupted,
    // e.g. a stop and continue (SIGSTOP/SIGCONT, a debugger, a benchmark's pause).
    libc::SYS_restart_syscall,
    libc::SYS_rt_sigprocmask,
    libc::SYS_sigaltstack,
    libc::SYS_exit,
    libc::SYS_exit_group,
    // Passes this list only to fail in the second filter (except on the control thread), see
    // `REFUSED`.
    libc::SYS_openat,
];

/// Syscalls that fail with `EACCES` instead of ending the process (a second filter, stacked on
/// the allow-list: the kernel applies the stricter verdict), on every thread but the control
/// thread. glibc's malloc opens `/proc/sys/vm/overcommit_memory` the first time it shrinks a
/// thread's arena, which can happen on any thread at any time, and copes with a failure; no
/// filtered thread opens files otherwise (error paths that read `/proc` for a better message
/// just lose the detail). The control thread opens `/proc/self/task/*` when the VM stops
/// (Landlock limits what it can open).
const REFUSED: &[libc::c_long] = &[libc::SYS_openat];

/// The control thread once the VM runs: its event loop (event-manager's `epoll_wait` on eventfds
/// and the metrics timer, all created before), API commands (which reach devices through
/// channels and eventfds), the metrics file (opened before), pausing and stopping vCPUs
/// (`tgkill`), the CPU time of each thread from `/proc/self/task` at the end, removing the API
/// socket, tearing down devices (ioeventfds and irqfds deassigned, see [`CONTROL_IOCTLS`]), and
/// a snapshot's files (`openat` with `O_CREAT`, `write`, then the state file's `fsync` and
/// `rename` from its temporary name; Landlock limits where: `crate::snapshot_folder`).
const CONTROL: &[libc::c_long] = &[
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_getdents64,
    libc::SYS_statx,
    libc::SYS_newfstatat,
    libc::SYS_fstat,
    libc::SYS_lseek,
    libc::SYS_fcntl,
    libc::SYS_getpid,
    libc::SYS_gettid,
    libc::SYS_tgkill,
    libc::SYS_unlink,
    libc::SYS_unlinkat,
    libc::SYS_fsync,
    libc::SYS_rename,
];

/// vCPU threads: besides `KVM_RUN` (an `ioctl`, see [`VCPU_IOCTLS`]), device activation at
/// `DRIVER_OK` runs here: it creates and duplicates eventfds and hands queues to an iothread.
const VCPU: &[libc::c_long] = &[libc::SYS_eventfd2, libc::SYS_fcntl, libc::SYS_dup];

/// Iothreads: the epoll loop, the engines' I/O (sync, Linux AIO, io_uring) and their creation
/// at attach time (engines are built on the iothread each time a queue is attached, including
/// after a device reset, so creation stays allowed rather than filtering after the first attach).
const IOTHREAD: &[libc::c_long] = &[
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_ctl,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_preadv,
    libc::SYS_pwritev,
    libc::SYS_preadv2,
    libc::SYS_pwritev2,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_fallocate,
    libc::SYS_lseek,
    libc::SYS_fstat,
    libc::SYS_statx,
    libc::SYS_fstatfs,
    libc::SYS_eventfd2,
    libc::SYS_fcntl,
    libc::SYS_dup,
    libc::SYS_io_setup,
    libc::SYS_io_destroy,
    libc::SYS_io_submit,
    libc::SYS_io_getevents,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    // virtio-vsock's host side (devices::vsock::muxer): accepting on its socket, reading and
    // writing the streams (std's `recv`, and `send` with MSG_NOSIGNAL; the batched flush's
    // `writev` is in the common list), connecting out to `<uds_path>_<port>` (`socket` only
    // AF_UNIX, below), and closing a direction.
    libc::SYS_accept4,
    libc::SYS_recvfrom,
    libc::SYS_sendto,
    libc::SYS_connect,
    libc::SYS_shutdown,
];

/// The iothread's `setpriority` (dynamic thread weights: light while it polls): on itself only
/// (`PRIO_PROCESS`, who = 0) and to nice 0-19, so a thread that keeps `CAP_SYS_NICE` cannot
/// raise its priority above the default nor touch another process.
fn iothread_setpriority() -> Result<SeccompRule, seccompiler::BackendError> {
    SeccompRule::new(vec![
        SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            libc::PRIO_PROCESS as u64,
        )?,
        SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, 0)?,
        SeccompCondition::new(2, SeccompCmpArgLen::Dword, SeccompCmpOp::Le, 19)?,
    ])
}

/// A call on the calling thread alone (pid argument 0): the iothread's `sched_setaffinity`,
/// which keeps it off the vCPUs' CPUs (`machine.thread_placement`).
fn on_this_thread_only() -> Result<SeccompRule, seccompiler::BackendError> {
    SeccompRule::new(vec![SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Eq,
        0,
    )?])
}

/// `socket(AF_UNIX, …)` only: the vsock device's connections to `<uds_path>_<port>`.
fn unix_socket_only() -> Result<SeccompRule, seccompiler::BackendError> {
    SeccompRule::new(vec![SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Eq,
        libc::AF_UNIX as u64,
    )?])
}

/// `poll` of one fd without waiting: the poll loop's peek at its own epoll set while it polls
/// a tap or host sockets (`dataplane`'s `FD_PEEK_INTERVAL`).
fn poll_peek_only() -> Result<SeccompRule, seccompiler::BackendError> {
    SeccompRule::new(vec![
        SeccompCondition::new(1, SeccompCmpArgLen::Qword, SeccompCmpOp::Eq, 1)?,
        SeccompCondition::new(2, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, 0)?,
    ])
}

/// The API thread: tokio's epoll reactor and timer, accepting on the Unix socket and serving
/// each connection. The vhost-user backend's socket threads take this list too: they also
/// create, size and seal the inflight memfd (`GET_INFLIGHT_FD`) and check the size of the one
/// the frontend sends back (`SET_INFLIGHT_FD`).
const API: &[libc::c_long] = &[
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_ctl,
    libc::SYS_accept4,
    libc::SYS_recvfrom,
    libc::SYS_recvmsg,
    libc::SYS_sendto,
    libc::SYS_sendmsg,
    libc::SYS_shutdown,
    libc::SYS_getsockopt,
    libc::SYS_fcntl,
    libc::SYS_memfd_create,
    libc::SYS_ftruncate,
    libc::SYS_fstat,
    libc::SYS_newfstatat,
];

const KVMIO: u64 = 0xAE;

/// `_IOC(dir, KVMIO, nr, size)` as `<asm-generic/ioctl.h>` builds it.
const fn kvm_ioc(dir: u64, nr: u64, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | (KVMIO << 8) | nr
}
const IOC_WRITE: u64 = 1;
const IOC_READ: u64 = 2;

const IOC_READ_WRITE: u64 = IOC_READ | IOC_WRITE;

/// `size_of::<T>()`, shorter for the tables below.
const fn size<T>() -> usize {
    std::mem::size_of::<T>()
}

/// The vCPU thread's ioctls: `KVM_RUN` (a snapshot's too, with `immediate_exit` set, to complete
/// the last exit); `KVM_GET_REGS` / `KVM_GET_SREGS` for the guest RIP in a failure message and
/// for a snapshot; the VM ioctls of device activation and MSI-X programming (irqfds,
/// ioeventfds, GSI routes, MSIs); and the reads of a snapshot's vCPU state, which each parked
/// vCPU makes on its own fd (`snapshot::kvm_state::VcpuState::save`; nothing is written back);
/// `KVM_TRANSLATE` for the bytes before a pausing vCPU's RIP (`vmm::soft_exception`); and a
/// virtio-net activation's `TUNSETOFFLOAD` on its tap and, for a multi-queue NIC,
/// `TUNSETQUEUE` (detaching the tap queues of the pairs the guest has not enabled).
const VCPU_IOCTLS: [u64; 20] = [
    kvm_ioc(0, 0x80, 0),                                 // KVM_RUN
    kvm_ioc(IOC_READ, 0x81, size::<kvm_regs>()),         // KVM_GET_REGS
    kvm_ioc(IOC_READ, 0x83, size::<kvm_sregs>()),        // KVM_GET_SREGS
    kvm_ioc(IOC_WRITE, 0x76, size::<kvm_irqfd>()),       // KVM_IRQFD
    kvm_ioc(IOC_WRITE, 0x79, size::<kvm_ioeventfd>()),   // KVM_IOEVENTFD
    kvm_ioc(IOC_WRITE, 0x6a, size::<kvm_irq_routing>()), // KVM_SET_GSI_ROUTING
    kvm_ioc(IOC_WRITE, 0xa5, size::<kvm_msi>()),         // KVM_SIGNAL_MSI
    kvm_ioc(IOC_READ, 0x98, size::<kvm_mp_state>()),     // KVM_GET_MP_STATE
    kvm_ioc(IOC_READ, 0x8c, size::<kvm_fpu>()),          // KVM_GET_FPU
    kvm_ioc(IOC_READ, 0xa4, size::<kvm_xsave>()),        // KVM_GET_XSAVE
    kvm_ioc(IOC_READ, 0xa6, size::<kvm_xcrs>()),         // KVM_GET_XCRS
    kvm_ioc(IOC_READ, 0xa1, size::<kvm_debugregs>()),    // KVM_GET_DEBUGREGS
    kvm_ioc(IOC_READ, 0x8e, size::<kvm_lapic_state>()),  // KVM_GET_LAPIC
    kvm_ioc(0, 0xa3, 0),                                 // KVM_GET_TSC_KHZ
    kvm_ioc(IOC_READ_WRITE, 0x91, size::<kvm_cpuid2>()), // KVM_GET_CPUID2
    kvm_ioc(IOC_READ_WRITE, 0x88, size::<kvm_msrs>()),   // KVM_GET_MSRS
    kvm_ioc(IOC_READ, 0x9f, size::<kvm_vcpu_events>()),  // KVM_GET_VCPU_EVENTS
    kvm_ioc(IOC_READ_WRITE, 0x85, TRANSLATION_SIZE),     // KVM_TRANSLATE
    TUNSETOFFLOAD,
    TUNSETQUEUE,
];

/// `TUNSETOFFLOAD` (`_IOW('T', 208, unsigned int)`): a virtio-net device's activation sets its
/// tap's offloads to the features the guest accepted, on the vCPU that wrote `DRIVER_OK`.
const TUNSETOFFLOAD: u64 = 0x4004_54d0;

/// `TUNSETQUEUE` (`_IOW('T', 217, int)`): a multi-queue NIC attaches the tap queue of each
/// pair the guest enables and detaches the others, at activation (vCPU) and when its control
/// queue (iothread) serves the guest's `VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET`.
const TUNSETQUEUE: u64 = 0x4004_54d9;

/// The iothread's ioctls: only a multi-queue NIC's `TUNSETQUEUE`.
const IOTHREAD_IOCTLS: [u64; 1] = [TUNSETQUEUE];

/// `struct kvm_translation`'s size (`KVM_TRANSLATE` reads and writes it).
const TRANSLATION_SIZE: usize = size::<kvm_translation>();

/// The control thread's ioctls: device teardown when the VM stops deassigns ioeventfds and
/// irqfds; a snapshot reads the VM's state (`snapshot::kvm_state::VmState::save`) and asks
/// whether vCPUs have XSAVE state (`KVM_CHECK_EXTENSION` on the VM fd).
const CONTROL_IOCTLS: [u64; 6] = [
    kvm_ioc(IOC_WRITE, 0x79, size::<kvm_ioeventfd>()), // KVM_IOEVENTFD
    kvm_ioc(IOC_WRITE, 0x76, size::<kvm_irqfd>()),     // KVM_IRQFD
    kvm_ioc(0, 0x03, 0),                               // KVM_CHECK_EXTENSION
    kvm_ioc(IOC_READ_WRITE, 0x62, size::<kvm_irqchip>()), // KVM_GET_IRQCHIP
    kvm_ioc(IOC_READ, 0x9f, size::<kvm_pit_state2>()), // KVM_GET_PIT2
    kvm_ioc(IOC_READ, 0x7c, size::<kvm_clock_data>()), // KVM_GET_CLOCK
];

/// A compiled filter.
#[derive(Debug, Clone)]
pub struct ThreadFilter {
    /// The thread type.
    pub kind: ThreadKind,
    /// Syscalls allowed (in full or in part).
    pub syscalls: usize,
    /// The BPF program: the allow-list.
    pub program: BpfProgram,
    /// The BPF program stacked on it: [`REFUSED`] syscalls fail with `EACCES` (none on the
    /// control thread).
    pub refuse: Option<BpfProgram>,
}

impl ThreadFilter {
    /// Compiles the filter of `kind`: allowed syscalls pass, every other one traps.
    pub fn build(kind: ThreadKind) -> Result<ThreadFilter, SeccompError> {
        let err = |source| SeccompError::Build { kind, source };
        let rules = kind.rules().map_err(err)?;
        let syscalls = rules.len();
        let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(err)?;
        let filter = SeccompFilter::new(rules, SeccompAction::Trap, SeccompAction::Allow, arch)
            .map_err(err)?;
        let program = BpfProgram::try_from(filter).map_err(err)?;
        let refuse = if kind == ThreadKind::Control {
            None
        } else {
            let refused = REFUSED.iter().map(|&nr| (nr, Vec::new())).collect();
            let refuse = SeccompFilter::new(
                refused,
                SeccompAction::Allow,
                SeccompAction::Errno(libc::EACCES as u32),
                arch,
            )
            .map_err(err)?;
            Some(BpfProgram::try_from(refuse).map_err(err)?)
        };
        Ok(ThreadFilter {
            kind,
            syscalls,
            program,
            refuse,
        })
    }

    /// Installs the filter on the calling thread (for good: a thread cannot drop its filter).
    pub fn install(&self) -> Result<(), SeccompError> {
        install_sigsys_handler()?;
        let name = std::thread::current()
            .name()
            .unwrap_or(self.kind.name())
            .to_owned();
        let mut raw = [0u8; THREAD_NAME_LEN];
        let n = name.len().min(THREAD_NAME_LEN);
        raw[..n].copy_from_slice(&name.as_bytes()[..n]);
        THREAD_NAME.with(|t| t.set(raw));
        for program in self.refuse.iter().chain([&self.program]) {
            seccompiler::apply_filter(program).map_err(|source| SeccompError::Install {
                thread: name.clone(),
                source,
            })?;
        }
        log::debug!(
            "seccomp: thread {name} filtered ({} syscalls)",
            self.syscalls
        );
        Ok(())
    }
}

/// Every thread type's filter, compiled once at start.
#[derive(Debug, Clone)]
pub struct Filters {
    /// vCPU threads.
    pub vcpu: ThreadFilter,
    /// Iothreads.
    pub iothread: ThreadFilter,
    /// The API thread.
    pub api: ThreadFilter,
    /// The control (main) thread.
    pub control: ThreadFilter,
    /// The stdin reader.
    pub stdin: ThreadFilter,
}

impl Filters {
    /// Compiles every filter.
    pub fn build() -> Result<Filters, SeccompError> {
        Ok(Filters {
            vcpu: ThreadFilter::build(ThreadKind::Vcpu)?,
            iothread: ThreadFilter::build(ThreadKind::IoThread)?,
            api: ThreadFilter::build(ThreadKind::Api)?,
            control: ThreadFilter::build(ThreadKind::Control)?,
            stdin: ThreadFilter::build(ThreadKind::Stdin)?,
        })
    }

    /// The filter of `kind`.
    pub fn of(&self, kind: ThreadKind) -> &ThreadFilter {
        match kind {
            ThreadKind::Vcpu => &self.vcpu,
            ThreadKind::IoThread => &self.iothread,
            ThreadKind::Api => &self.api,
            ThreadKind::Control => &self.control,
            ThreadKind::Stdin => &self.stdin,
        }
    }

    /// One line for the start-up log: syscalls and BPF instructions per thread type.
    pub fn describe(&self) -> String {
        ThreadKind::ALL
            .iter()
            .map(|&k| {
                let f = self.of(k);
                format!(
                    "{} {} syscalls/{}+{} BPF instructions",
                    f.kind,
                    f.syscalls,
                    f.program.len(),
                    f.refuse.as_ref().map_or(0, Vec::len)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

const THREAD_NAME_LEN: usize = 16;

thread_local! {
    /// The filtered thread's name, for the SIGSYS handler (which must not allocate).
    static THREAD_NAME: Cell<[u8; THREAD_NAME_LEN]> = const { Cell::new([0; THREAD_NAME_LEN]) };
}

/// The outcome of registering the handler, once per process (the errno on failure).
static SIGSYS_HANDLER: OnceLock<Result<(), i32>> = OnceLock::new();

fn install_sigsys_handler() -> Result<(), SeccompError> {
    let outcome = SIGSYS_HANDLER.get_or_init(|| {
        vmm_sys_util::signal::register_signal_handler(libc::SIGSYS, on_sigsys)
            .map_err(|e| e.errno())
    });
    outcome.map_err(|errno| SeccompError::Handler(std::io::Error::from_raw_os_error(errno)))
}

/// The `_sigsys` member of `siginfo_t` (`<asm-generic/siginfo.h>`), which the kernel fills for a
/// seccomp trap.
#[repr(C)]
struct SigsysInfo {
    signo: libc::c_int,
    errno: libc::c_int,
    code: libc::c_int,
    _pad: libc::c_int,
    call_addr: *mut libc::c_void,
    syscall: libc::c_int,
    arch: libc::c_uint,
}

/// Prints which thread made which forbidden syscall and ends the process. Only `write` and
/// `exit_group`, both in every filter, and no allocation.
extern "C" fn on_sigsys(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    let nr = if info.is_null() {
        -1
    } else {
        // SAFETY: the kernel passes a valid `siginfo_t` (128 bytes, larger than `SigsysInfo`)
        // and, for a seccomp trap, fills its `_sigsys` member, whose layout `SigsysInfo` copies.
        unsafe { (*(info as *const SigsysInfo)).syscall }
    };
    let name = THREAD_NAME.with(|t| t.get());
    let name_len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    let mut msg = [0u8; 128];
    let mut len = 0;
    let mut push = |bytes: &[u8]| {
        let n = bytes.len().min(msg.len() - len);
        msg[len..len + n].copy_from_slice(&bytes[..n]);
        len += n;
    };
    push(b"osprey: seccomp: thread ");
    push(&name[..name_len]);
    push(b" made forbidden syscall ");
    let mut digits = [0u8; 12];
    let mut i = digits.len();
    let mut v = i64::from(nr).unsigned_abs();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if nr < 0 {
        i -= 1;
        digits[i] = b'-';
    }
    push(&digits[i..]);
    push(b"; stopping (rerun with --seccomp off to debug)\n");
    // SAFETY: `msg[..len]` is initialised stack memory; write and _exit are async-signal-safe
    // and allowed by every filter.
    unsafe {
        libc::write(libc::STDERR_FILENO, msg.as_ptr().cast(), len);
        libc::_exit(EXIT_SECCOMP);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_filter_compiles_and_stays_small() {
        let f = Filters::build().expect("filters");
        for t in ThreadKind::ALL.map(|k| f.of(k)) {
            assert!(t.syscalls > 10, "{}", f.describe());
            assert!(t.program.len() < 400, "{}", f.describe());
        }
        assert!(f.describe().contains("iothread"));
    }

    #[test]
    fn kvm_run_is_the_known_number() {
        assert_eq!(VCPU_IOCTLS[0], 0xae80);
        assert_eq!(VCPU_IOCTLS[3], 0x4020_ae76);
        // `<linux/if_tun.h>`'s TUNSETOFFLOAD, as strace prints it.
        assert_eq!(VCPU_IOCTLS[18], 0x4004_54d0);
        // TUNSETQUEUE, on the vCPU (activation) and the iothread (the control queue).
        assert_eq!(VCPU_IOCTLS[19], 0x4004_54d9);
        assert_eq!(IOTHREAD_IOCTLS, [0x4004_54d9]);
    }

    #[test]
    fn the_snapshot_reads_are_linux_numbers() {
        // `<linux/kvm.h>`'s values on x86-64 (as strace and Firecracker's filters print them).
        assert_eq!(
            VCPU_IOCTLS[7..18],
            [
                0x8004_ae98, // KVM_GET_MP_STATE
                0x81a0_ae8c, // KVM_GET_FPU
                0x9000_aea4, // KVM_GET_XSAVE
                0x8188_aea6, // KVM_GET_XCRS
                0x8080_aea1, // KVM_GET_DEBUGREGS
                0x8400_ae8e, // KVM_GET_LAPIC
                0xaea3,      // KVM_GET_TSC_KHZ
                0xc008_ae91, // KVM_GET_CPUID2
                0xc008_ae88, // KVM_GET_MSRS
                0x8040_ae9f, // KVM_GET_VCPU_EVENTS
                0xc018_ae85, // KVM_TRANSLATE
            ]
        );
        assert_eq!(
            CONTROL_IOCTLS[2..],
            [
                0xae03,      // KVM_CHECK_EXTENSION
                0xc208_ae62, // KVM_GET_IRQCHIP
                0x8070_ae9f, // KVM_GET_PIT2
                0x8030_ae7c, // KVM_GET_CLOCK
            ]
        );
    }

    #[test]
    fn a_filtered_thread_may_use_its_list_and_dies_on_others() {
        // Only the allowed part: a forbidden syscall would end the test process.
        let f = ThreadFilter::build(ThreadKind::IoThread).expect("filter");
        let t = std::thread::Builder::new()
            .name("seccomp-test".into())
            .spawn(move || {
                f.install().expect("install");
                let v = vec![1u8; 1 << 20];
                let refused = std::fs::File::open("/proc/self/status")
                    .map_err(|e| e.raw_os_error())
                    .err();
                // Its own nice, within 0-19: allowed (the thread-weight switch).
                // SAFETY: integer arguments only; who = 0 is this thread alone.
                let lighter = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 3) };
                // The poll loop's peek: one fd, no wait (a negative fd is skipped: 0 ready).
                let mut one = libc::pollfd {
                    fd: -1,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid, writable `pollfd`, count 1, no wait.
                let peeked = unsafe { libc::poll(&mut one, 1, 0) };
                (v.len(), refused, lighter, peeked)
            })
            .expect("spawn");
        assert_eq!(
            t.join().expect("join"),
            (1 << 20, Some(Some(libc::EACCES)), 0, 0),
            "allowed calls work, openat fails with EACCES"
        );
    }

    #[test]
    fn the_iothread_may_set_only_its_own_nice() {
        let rules = ThreadKind::IoThread.rules().expect("rules");
        let setpriority = rules.get(&libc::SYS_setpriority).expect("listed");
        assert_eq!(setpriority.len(), 1, "one rule, with argument conditions");
        assert_eq!(setpriority, &vec![iothread_setpriority().expect("rule")]);
        let vcpu = ThreadKind::Vcpu.rules().expect("rules");
        assert!(!vcpu.contains_key(&libc::SYS_setpriority));
    }

    #[test]
    fn the_iothread_may_poll_only_one_fd_without_waiting() {
        let rules = ThreadKind::IoThread.rules().expect("rules");
        assert_eq!(
            rules.get(&libc::SYS_poll),
            Some(&vec![poll_peek_only().expect("rule")]),
            "one rule, with argument conditions"
        );
        let api = ThreadKind::Api.rules().expect("rules");
        assert!(!api.contains_key(&libc::SYS_poll));
    }
}
