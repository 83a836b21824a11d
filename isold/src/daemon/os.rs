//! The daemon's own process: logging to stderr or journald, sd_notify, clocks, its threads'
//! niceness and its heap.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use libtaskisol::policy::state::StateFiles;
use libtaskisol::SysRoot;

/// Log to stderr; under systemd (JOURNAL_STREAM set) with the syslog level prefix journald
/// reads (`<4>` warning, `<6>` info, `<7>` debug).
#[derive(Debug, Clone, Copy)]
pub struct Log {
    pub verbose: u8,
    pub journal: bool,
}

impl Log {
    /// From `-v` and the environment.
    pub fn new(verbose: u8) -> Log {
        Log {
            verbose,
            journal: std::env::var_os("JOURNAL_STREAM").is_some(),
        }
    }
    fn line(&self, level: u8, msg: &str) {
        let mut err = std::io::stderr().lock();
        let _ = if self.journal {
            writeln!(err, "<{level}>{msg}")
        } else {
            writeln!(err, "isold: {msg}")
        };
    }
    pub fn warn(&self, msg: &str) {
        self.line(4, msg);
    }
    pub fn info(&self, msg: &str) {
        self.line(6, msg);
    }
    pub fn debug(&self, msg: &str) {
        if self.verbose >= 1 {
            self.line(7, msg);
        }
    }
    pub fn trace(&self, msg: &str) {
        if self.verbose >= 2 {
            self.line(7, msg);
        }
    }
}

/// sd_notify(3): one datagram to $NOTIFY_SOCKET (a path, or '@' for the abstract namespace).
pub fn notify(msg: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let path = path.to_string_lossy().into_owned();
    if let Some(name) = path.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        if let Ok(addr) = std::os::unix::net::SocketAddr::from_abstract_name(name) {
            let _ = sock.send_to_addr(msg.as_bytes(), &addr);
        }
    } else {
        let _ = sock.send_to(msg.as_bytes(), &path);
    }
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of the connector's timestamps.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The CPU time this thread has used, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// The clock `clock` in nanoseconds.
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: t is a valid timespec to write to.
    unsafe { libc::clock_gettime(clock, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Unix time, seconds.
pub fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The error of `result` when it is the first of a run of failures (`failing` remembers
/// the run; a success ends it), so that a repeated failure is logged once.
pub fn first_failure<E>(result: Result<(), E>, failing: &mut bool) -> Option<E> {
    let was_failing = std::mem::replace(failing, result.is_err());
    result.err().filter(|_| !was_failing)
}

/// Nice 19 for the calling thread: background work (the scan, the metrics, slow clients)
/// never delays the main thread's answer to a process event.
pub fn nice_this_thread() {
    // SAFETY: setpriority on this thread's own id; lowering priority needs no privilege.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19);
    }
}

/// One malloc arena for the whole daemon. glibc gives each thread that allocates its own
/// (the scan thread, the metrics, the workers of a pass over every thread), and each keeps
/// freed memory of its own: on the 448-CPU tree the daemon rested at 23 MiB with them and
/// 12.6 MiB with one. The threads allocate little between their system calls, so they
/// hardly wait for each other.
pub fn one_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets a parameter of the allocator; called before this process
    // starts any thread of its own.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Give the heap freed after a pass over every thread back to the system, the cached copy of
/// the state file first. glibc keeps freed heap otherwise, and on a machine with tens of
/// thousands of threads the daemon's resident memory would stay near the peak of its first
/// apply.
pub fn give_back_memory() {
    libtaskisol::policy::state::drop_cache();
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free memory of the allocator's heap to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Where the daemon works, the same for all its parts.
#[derive(Debug)]
pub struct Env {
    pub root: SysRoot,
    pub files: StateFiles,
    pub log: Log,
}

/// Seconds as a duration (negative: none).
pub fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

/// A configuration or state file that cannot be used stays so: exit 6, which isold.service
/// does not restart on (RestartPreventExitStatus=6), with the reason in the log and in
/// `systemctl status`.
pub fn not_configured(log: &Log, msg: &str) -> i32 {
    log.warn(msg);
    notify(&format!(
        "STATUS=not started: {}",
        msg.lines().next().unwrap_or_default()
    ));
    crate::exit::EXIT_NOT_CONFIGURED
}
