//! How the backend ends, and the one fault it survives. A `SIGBUS` in a frontend's memory (the
//! frontend shrank its file under running rings) is covered by a zero page
//! ([`devices::vhost_user::fault`]) and the backend goes on. Any other fatal signal (`SIGBUS`
//! elsewhere, `SIGSEGV`, `SIGILL`, `SIGFPE`, `SIGABRT`) is reported by its name, thread and
//! address, instead of by the seccomp trap the default handlers' `rt_sigaction` would hit next
//! ("forbidden syscall 13"); `SIGTERM`, `SIGINT` and `SIGHUP` ask for a clean stop. Either way
//! the main thread, woken through a pipe, removes the sockets (its seccomp list allows `unlink`,
//! the serving threads' do not) and ends the process: `128 + signal` after a fatal signal, 0
//! after a stop request. A serving thread that panics wakes it the same way.
//!
//! The handlers only use async-signal-safe calls that every thread's seccomp list allows
//! (`write`, `mmap`, `nanosleep`, `exit_group`) and never allocate.

use std::cell::Cell;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Signals that end the process with a report.
const FATAL: [libc::c_int; 5] = [
    libc::SIGBUS,
    libc::SIGSEGV,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
];
/// Signals that ask for a clean stop.
const STOP: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];
/// What a panicking serving thread writes to the pipe (no signal has this number).
const PANIC: u8 = 0;
/// How long a faulting thread waits for the main thread to clean up before ending the process
/// itself (nanosleep rounds, 100 ms each).
const WAIT_ROUNDS: u32 = 50;

/// The pipe's write end (-1 until [`install`]).
static WAKE: AtomicI32 = AtomicI32::new(-1);
/// `pthread_self` of the main thread, which cleans up.
static MAIN: AtomicUsize = AtomicUsize::new(0);
/// `SIGBUS` faults covered by a zero page so far, and how many of them are reported.
static COVERED: AtomicUsize = AtomicUsize::new(0);
const COVERED_REPORTS: usize = 8;
/// Set by the first fatal signal: a second one (in the cleanup) ends the process at once.
static DYING: AtomicBool = AtomicBool::new(false);
/// The socket files to remove, as C strings (set once, before any handler may need them).
static SOCKETS: OnceLock<Vec<CString>> = OnceLock::new();

const NAME_LEN: usize = 16;

thread_local! {
    /// The thread's name, for the report (a handler must not allocate).
    static THREAD_NAME: Cell<[u8; NAME_LEN]> = const { Cell::new([0; NAME_LEN]) };
}

/// What the main thread waits on.
#[derive(Debug)]
pub struct Watch {
    read: std::fs::File,
}

/// Why the main thread woke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// A fatal signal (its number), reported already by the thread that took it.
    Fatal(i32),
    /// A stop request (the signal's number).
    Stop(i32),
    /// A serving thread panicked.
    Panic,
}

impl Ending {
    /// The process's exit status for this ending.
    pub fn exit_status(self) -> i32 {
        match self {
            Ending::Fatal(sig) => 128 + sig,
            Ending::Stop(_) => 0,
            Ending::Panic => super::EXIT_BACKEND,
        }
    }
}

impl Watch {
    /// Blocks until a signal or a panic ends the backend.
    pub fn wait(&mut self) -> Ending {
        use std::io::Read;
        let mut byte = [0u8; 1];
        loop {
            match self.read.read(&mut byte) {
                Ok(1) => break,
                Ok(_) => return Ending::Panic,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Ending::Panic,
            }
        }
        let sig = i32::from(byte[0]);
        match byte[0] {
            PANIC => Ending::Panic,
            _ if STOP.contains(&sig) => Ending::Stop(sig),
            _ => Ending::Fatal(sig),
        }
    }
}

/// Registers the handlers and the pipe, on the main thread, before any other thread starts.
pub fn install() -> io::Result<Watch> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 just created both descriptors; the File owns the read end, the write end
    // stays open for the process's life (in WAKE).
    let read = unsafe { <std::fs::File as std::os::unix::io::FromRawFd>::from_raw_fd(fds[0]) };
    WAKE.store(fds[1], Ordering::Release);
    // SAFETY: pthread_self has no preconditions.
    MAIN.store(unsafe { libc::pthread_self() } as usize, Ordering::Release);
    name_this_thread();
    for &sig in FATAL.iter().chain(&STOP) {
        let on_stack = if FATAL.contains(&sig) {
            // The Rust runtime gives every thread an alternate stack (for its stack-overflow
            // report): a fault from a full stack still runs the handler.
            libc::SA_ONSTACK
        } else {
            libc::SA_RESTART
        };
        // SAFETY: a zeroed sigaction is a valid value of the C struct; the handler is an
        // `extern "C"` function of the SA_SIGINFO signature that only makes async-signal-safe
        // calls; the mask is initialised by sigemptyset before use.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO | on_stack;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(sig, &action, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(Watch { read })
}

/// The sockets the main thread removes when the backend ends (set once; later calls add
/// nothing).
pub fn remove_at_exit(paths: &[PathBuf]) {
    let list = paths
        .iter()
        .filter_map(|p| CString::new(p.as_os_str().as_bytes()).ok())
        .collect();
    let _ = SOCKETS.set(list);
}

/// Removes the sockets registered with [`remove_at_exit`] (a missing one is fine).
pub fn remove_sockets() {
    for path in SOCKETS.get().into_iter().flatten() {
        let p = Path::new(std::ffi::OsStr::from_bytes(path.as_bytes()));
        match std::fs::remove_file(p) {
            Ok(()) => log::info!("vhost-user-blk: removed {}", p.display()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => log::warn!("vhost-user-blk: removing {}: {e}", p.display()),
        }
    }
}

/// Records the calling thread's name for the report (each thread, once, as it starts).
pub fn name_this_thread() {
    let mut name = [0u8; NAME_LEN];
    if let Some(n) = std::thread::current().name() {
        let n = n.as_bytes();
        let len = n.len().min(NAME_LEN - 1);
        name[..len].copy_from_slice(&n[..len]);
    }
    THREAD_NAME.with(|t| t.set(name));
}

/// A serving thread's panic: wake the main thread to clean up and end the process.
pub fn report_panic() {
    wake(PANIC);
}

fn wake(code: u8) -> bool {
    let fd = WAKE.load(Ordering::Acquire);
    // SAFETY: `fd` is the pipe's write end, open for the process's life; one byte from the stack.
    fd >= 0 && unsafe { libc::write(fd, (&code as *const u8).cast(), 1) } == 1
}

fn signal_name(sig: libc::c_int) -> &'static [u8] {
    match sig {
        libc::SIGBUS => b"SIGBUS (memory past the end of a file)",
        libc::SIGSEGV => b"SIGSEGV (invalid memory access)",
        libc::SIGILL => b"SIGILL",
        libc::SIGFPE => b"SIGFPE",
        libc::SIGABRT => b"SIGABRT (aborted)",
        libc::SIGTERM => b"SIGTERM",
        libc::SIGINT => b"SIGINT",
        libc::SIGHUP => b"SIGHUP",
        _ => b"a signal",
    }
}

/// A fixed buffer the handler formats its line in.
struct Line {
    buf: [u8; 256],
    len: usize,
}

impl Line {
    fn push(&mut self, bytes: &[u8]) {
        let n = bytes.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&bytes[..n]);
        self.len += n;
    }

    fn push_hex(&mut self, mut v: usize) {
        let mut digits = [0u8; 16];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b"0123456789abcdef"[v & 0xf];
            v >>= 4;
            if v == 0 {
                break;
            }
        }
        self.push(b"0x");
        self.push(&digits[i..]);
    }

    fn write(&self) {
        // SAFETY: `buf[..len]` is initialised stack memory; write is async-signal-safe.
        unsafe { libc::write(libc::STDERR_FILENO, self.buf.as_ptr().cast(), self.len) };
    }
}

fn exit_now(status: i32) -> ! {
    // SAFETY: _exit is async-signal-safe and ends the process without running anything else.
    unsafe { libc::_exit(status) }
}

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    let code = u8::try_from(sig).unwrap_or(u8::MAX);
    if STOP.contains(&sig) {
        // The main thread cleans up; without the pipe (not installed yet) just end.
        if !wake(code) {
            exit_now(0);
        }
        return;
    }
    // SAFETY: the kernel passes a valid siginfo_t (or null).
    let (kernel_sent, addr) = match unsafe { info.as_ref() } {
        // SAFETY: for the fault signals the kernel fills the address.
        Some(i) => (i.si_code > 0, unsafe { i.si_addr() } as usize),
        None => (false, 0),
    };
    // A frontend's memory shrunk under its running rings: that page reads as zeros from now
    // on, the backend goes on (devices::vhost_user::fault).
    if sig == libc::SIGBUS && kernel_sent && devices::vhost_user::fault::cover(addr) {
        if COVERED.fetch_add(1, Ordering::Relaxed) < COVERED_REPORTS {
            let mut line = Line {
                buf: [0; 256],
                len: 0,
            };
            line.push(b"osprey vhost-user-blk: SIGBUS at ");
            line.push_hex(addr);
            line.push(
                b": a frontend shrank its memory under running rings; that page now reads \
                as zeros, the backend goes on\n",
            );
            line.write();
        }
        return;
    }
    if DYING.swap(true, Ordering::AcqRel) {
        // A second fault while the first is handled (the cleanup itself faulted).
        exit_now(128 + sig);
    }
    let mut line = Line {
        buf: [0; 256],
        len: 0,
    };
    line.push(b"osprey vhost-user-blk: fatal signal ");
    line.push(signal_name(sig));
    if kernel_sent {
        line.push(b" at address ");
        line.push_hex(addr);
    } else {
        line.push(b" sent by a process");
    }
    line.push(b" in thread ");
    let name = THREAD_NAME.with(|t| t.get());
    let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    line.push(if len == 0 { b"?" } else { &name[..len] });
    line.push(b"; removing the sockets and stopping\n");
    line.write();
    // SAFETY: pthread_self has no preconditions.
    let on_main = unsafe { libc::pthread_self() } as usize == MAIN.load(Ordering::Acquire);
    if on_main || !wake(code) {
        if on_main {
            // The main thread's list allows unlink; the paths were set before any thread ran.
            for path in SOCKETS.get().into_iter().flatten() {
                // SAFETY: a NUL-terminated path; unlink is async-signal-safe.
                unsafe { libc::unlink(path.as_ptr()) };
            }
        }
        exit_now(128 + sig);
    }
    // The main thread removes the sockets and ends the process; this thread must not return
    // to the faulting instruction. If the main thread does not, end the process anyway.
    for _ in 0..WAIT_ROUNDS {
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 100_000_000,
        };
        // SAFETY: a valid timespec on the stack; nanosleep is async-signal-safe.
        unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
    }
    exit_now(128 + sig);
}
