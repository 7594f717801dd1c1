//! The tests' sandbox probe, compiled into debug builds (what `cargo test` runs) and with the
//! `test-hooks` feature, never into a plain release build: when `OSPREY_TEST_SANDBOX_PROBE` names a thread type, a thread of
//! that type, right after entering its sandbox, tries what an attacker who took it over would
//! try first: open `/etc/hostname`, then `execve` `/bin/true`. It logs what each attempt got;
//! a seccomp kill ends the process with its own message instead.

use crate::seccomp::ThreadKind;

/// Names the thread type to probe: `vcpu`, `iothread`, `api`, `control` or `stdin`.
pub const PROBE_ENV: &str = "OSPREY_TEST_SANDBOX_PROBE";

fn outcome(ret: libc::c_int) -> String {
    if ret < 0 {
        std::io::Error::last_os_error().to_string()
    } else {
        "allowed".into()
    }
}

/// [`PROBE_ENV`]'s value for the main thread before `InstanceStart` (`--api-sock` alone).
pub const PREBOOT_MAIN: &str = "preboot-main";

/// Runs the probe on the pre-boot main thread if [`PROBE_ENV`] is [`PREBOOT_MAIN`].
pub fn run_preboot_main() {
    if std::env::var(PROBE_ENV).ok().as_deref() == Some(PREBOOT_MAIN) {
        attack("main");
    }
}

/// [`PROBE_ENV`]'s value for the iothread's nice probe: its own nice within 0-19 is allowed
/// (dynamic thread weights), a negative one is a seccomp kill.
pub const NICE_PROBE: &str = "iothread-nice";

/// Runs the probe on the calling thread if [`PROBE_ENV`] names `kind`.
pub fn run(kind: ThreadKind) {
    let target = std::env::var(PROBE_ENV).ok();
    let nice = kind == ThreadKind::IoThread && target.as_deref() == Some(NICE_PROBE);
    if !nice && target.as_deref() != Some(kind.name()) {
        return;
    }
    let name = std::thread::current()
        .name()
        .unwrap_or(kind.name())
        .to_owned();
    if nice {
        nice_probe(&name);
        return;
    }
    attack(&name);
}

/// Opens `/etc/hostname`, then executes `/bin/true`, logging what each got.
fn attack(name: &str) {
    // SAFETY: a NUL-terminated literal path; the fd, if any, is closed right away.
    let fd = unsafe { libc::open(c"/etc/hostname".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    let open = outcome(fd);
    if fd >= 0 {
        // SAFETY: `fd` was just opened here and is not used elsewhere.
        unsafe { libc::close(fd) };
    }
    // Written with one call: the log's own writer may not be usable after the exec attempt.
    eprintln!("osprey: sandbox probe: thread {name}: open /etc/hostname: {open}");
    let argv = [c"/bin/true".as_ptr(), std::ptr::null()];
    let envp = [std::ptr::null::<libc::c_char>()];
    // SAFETY: NUL-terminated path and argument arrays, alive for the call; on success the
    // process is replaced (the test sees /bin/true's exit), otherwise it returns -1.
    let ret = unsafe { libc::execve(c"/bin/true".as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    eprintln!(
        "osprey: sandbox probe: thread {name}: execve /bin/true: {}",
        outcome(ret)
    );
}

/// The iothread sets its own nice to 19 (allowed: seccomp admits nice 0-19, and lowering one's
/// own priority needs no privilege, whatever nice Osprey was started with), then to -5 (above
/// the default: killed).
fn nice_probe(name: &str) {
    // SAFETY: integer arguments only; who = 0 is the calling thread.
    let light = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
    eprintln!(
        "osprey: sandbox probe: thread {name}: nice 19: {}",
        outcome(light)
    );
    // SAFETY: as above.
    let heavy = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -5) };
    eprintln!(
        "osprey: sandbox probe: thread {name}: nice -5: {}",
        outcome(heavy)
    );
}
