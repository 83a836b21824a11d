//! The ptrace side of the emulator: starts the command, follows every task, and turns syscall
//! stops into emulated prctls and procfs opens. x86_64 only (registers, syscall numbers, red
//! zone).

use std::collections::{HashMap, HashSet};
use std::ffi::{CString, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, IoSlice, IoSliceMut, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{fchown, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::ptrace::{self, Options};
use nix::sys::uio::{process_vm_readv, process_vm_writev, RemoteIoVec};
use nix::unistd::Pid;
use serde_json::{json, Value};

use crate::model::{self, TaskIsol, UserMemory};
use crate::procfs::{self, ProcDir};
use crate::seccomp;

/// What `isol-emu` was asked to do.
#[derive(Debug)]
pub struct Config {
    /// JSON-lines event log.
    pub log: Option<PathBuf>,
    /// Record prctls only; emulate nothing.
    pub trace_only: bool,
    /// Stop only at filtered syscalls (SECCOMP_RET_TRACE) instead of at every syscall.
    pub seccomp: bool,
    /// How long tasks may outlive the command before they are killed.
    pub grace: Duration,
    /// Injected failures (`--fail`): matching PR_ISOL_* calls fail with the errno and change
    /// no state, as a kernel built with CONFIG_TASK_ISOLATION=n (EOPNOTSUPP) or out of
    /// memory (ENOMEM) would answer. Lets tests reach every error path of a caller.
    pub fail: Vec<FailRule>,
    /// The command.
    pub argv: Vec<OsString>,
}

/// `--fail OPTION[:ARG2]=ERRNO`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailRule {
    /// prctl option (63..67).
    pub option: i32,
    /// When set, only calls whose arg2 equals this (e.g. 2 = I_CFG_INHERIT).
    pub arg2: Option<u64>,
    /// The errno returned.
    pub errno: i32,
}

impl FailRule {
    /// Parse `65=EOPNOTSUPP` or `65:2=EINVAL`.
    pub fn parse(s: &str) -> Option<FailRule> {
        let (lhs, errno) = s.split_once('=')?;
        let (opt, arg2) = match lhs.split_once(':') {
            Some((o, a)) => (o, Some(a.parse().ok()?)),
            None => (lhs, None),
        };
        let option: i32 = opt.parse().ok()?;
        if !(63..=67).contains(&option) {
            return None;
        }
        let errno = match errno {
            "EINVAL" => libc::EINVAL,
            "EOPNOTSUPP" => libc::EOPNOTSUPP,
            "ENOMEM" => libc::ENOMEM,
            "EFAULT" => libc::EFAULT,
            "EPERM" => libc::EPERM,
            n => n.parse().ok()?,
        };
        Some(FailRule {
            option,
            arg2,
            errno,
        })
    }

    fn matches(&self, option: i32, args: &[u64; 4]) -> bool {
        self.option == option && self.arg2.map_or(true, |a| a == args[0])
    }
}

/// Exit status for the emulator's own failures (as env(1) and timeout(1) use it).
pub const EXIT_EMU_FAILURE: i32 = 125;

/// Not in libc's glibc module.
const PTRACE_EVENT_STOP: i32 = 128;
/// The x86_64 ABI lets leaf functions use 128 bytes below %rsp; the path we plant goes below.
const RED_ZONE: u64 = 128;
const PATH_MAX: usize = 4096;
/// How often the tasks left after the grace period are killed again: one sweep can miss a
/// child whose fork was under way, and orphans of killed tasks become our children later.
const SWEEP_INTERVAL: Duration = Duration::from_millis(100);
/// How long a new task may wait for its parent's fork event before it is adopted without it
/// (see [`Supervisor::adopt_overdue_early`]). The event normally follows within microseconds.
const EARLY_TIMEOUT: Duration = Duration::from_millis(500);

/// Syscalls whose path argument may name the emulated procfs file: (nr, argument index, name).
const PATH_SYSCALLS: &[(libc::c_long, usize, &str)] = &[
    (libc::SYS_open, 0, "open"),
    (libc::SYS_openat, 1, "openat"),
    (libc::SYS_openat2, 1, "openat2"),
    (libc::SYS_stat, 0, "stat"),
    (libc::SYS_lstat, 0, "lstat"),
    (libc::SYS_newfstatat, 1, "newfstatat"),
    (libc::SYS_statx, 1, "statx"),
    (libc::SYS_access, 0, "access"),
    (libc::SYS_faccessat, 1, "faccessat"),
    (libc::SYS_faccessat2, 1, "faccessat2"),
    // ls -l asks for ACLs; without these it reports the file as missing after stat found it.
    (libc::SYS_getxattr, 0, "getxattr"),
    (libc::SYS_lgetxattr, 0, "lgetxattr"),
    (libc::SYS_listxattr, 0, "listxattr"),
    (libc::SYS_llistxattr, 0, "llistxattr"),
];

/// Syscalls the seccomp filter sends to the tracer in each mode.
fn traced_syscalls(trace_only: bool) -> Vec<libc::c_long> {
    let mut nrs = vec![libc::SYS_prctl, libc::SYS_execve, libc::SYS_execveat];
    if !trace_only {
        nrs.extend(PATH_SYSCALLS.iter().map(|&(nr, _, _)| nr));
    }
    nrs
}

/// Work left for the syscall-exit stop of a task.
#[derive(Debug)]
enum Pending {
    /// An emulated prctl: the kernel skipped it; put the result in %rax.
    Emulated { ret: i64 },
    /// A prctl the real kernel runs: log it with its result.
    Real { option: i32, args: [u64; 4] },
    /// A path argument redirected to a file holding the emulated procfs text: restore the
    /// register (the syscall ABI promises argument registers survive) and delete the file.
    Procfs {
        reg: usize,
        orig: u64,
        tmp: PathBuf,
        path: String,
        content: String,
        syscall: &'static str,
    },
    /// An open of the emulated file for writing, skipped by the kernel: put `ret` (-EACCES) in
    /// %rax and log it.
    ProcfsDenied {
        ret: i64,
        path: String,
        syscall: &'static str,
    },
}

#[derive(Debug)]
struct Task {
    tgid: i32,
    isol: TaskIsol,
    pending: Option<Pending>,
    /// Filename argument of this task's last execve, logged when the exec succeeds.
    exec_path: Option<String>,
    /// Syscall-entry stops of this task the tracer handled (with seccomp only the filtered
    /// syscalls: prctl and execve(at), plus the path syscalls when emulating). Logged at
    /// exit, so that a log proves the tracer saw the task at all: an empty or truncated log
    /// has no exit event with a count above zero.
    syscalls: u64,
}

impl Task {
    fn new(tgid: i32, isol: TaskIsol) -> Self {
        Task {
            tgid,
            isol,
            pending: None,
            exec_path: None,
            syscalls: 0,
        }
    }

    fn drop_pending(&mut self) {
        if let Some(Pending::Procfs { tmp, .. }) = self.pending.take() {
            let _ = fs::remove_file(tmp);
        }
    }
}

/// The event log: one JSON object per line, written unbuffered so that a crash loses nothing.
#[derive(Debug)]
struct Log(Option<File>);

impl Log {
    fn emit(&mut self, v: Value) {
        if let Some(f) = self.0.as_mut() {
            let mut line = v.to_string();
            line.push('\n');
            if let Err(e) = f.write_all(line.as_bytes()) {
                eprintln!("isol-emu: failed to write the log: {e}");
                self.0 = None;
            }
        }
    }
}

/// `copy_{to,from}_user` of the emulated kernel. process_vm_{readv,writev} honour page
/// protections (unlike PTRACE_POKEDATA, which forces writes into read-only pages), so a
/// read-only or unmapped buffer faults exactly where the kernel's copy would: EFAULT.
struct Remote(Pid);

impl UserMemory for Remote {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
        let len = buf.len();
        let remote = [RemoteIoVec {
            base: addr as usize,
            len,
        }];
        match process_vm_readv(self.0, &mut [IoSliceMut::new(buf)], &remote) {
            Ok(n) if n == len => Ok(()),
            _ => Err(Errno::EFAULT),
        }
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), Errno> {
        let remote = [RemoteIoVec {
            base: addr as usize,
            len: data.len(),
        }];
        match process_vm_writev(self.0, &[IoSlice::new(data)], &remote) {
            Ok(n) if n == data.len() => Ok(()),
            _ => Err(Errno::EFAULT),
        }
    }
}

/// Reads a NUL-terminated string, page by page so that a string near the end of a mapping
/// is still readable. `None` if unreadable or longer than PATH_MAX (the kernel fails those).
fn read_cstring(tid: i32, addr: u64) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < PATH_MAX {
        let chunk = (4096 - (at % 4096)) as usize;
        let mut buf = vec![0u8; chunk];
        Remote(Pid::from_raw(tid)).read(at, &mut buf).ok()?;
        if let Some(nul) = buf.iter().position(|&b| b == 0) {
            out.extend_from_slice(&buf[..nul]);
            return Some(out);
        }
        out.extend_from_slice(&buf);
        at += chunk as u64;
    }
    None
}

fn arg(regs: &libc::user_regs_struct, i: usize) -> u64 {
    match i {
        0 => regs.rdi,
        1 => regs.rsi,
        2 => regs.rdx,
        3 => regs.r10,
        4 => regs.r8,
        _ => regs.r9,
    }
}

fn set_arg(regs: &mut libc::user_regs_struct, i: usize, v: u64) {
    match i {
        0 => regs.rdi = v,
        1 => regs.rsi = v,
        2 => regs.rdx = v,
        3 => regs.r10 = v,
        4 => regs.r8 = v,
        _ => regs.r9 = v,
    }
}

/// PTRACE_CONT / PTRACE_SYSCALL / PTRACE_LISTEN with a raw signal number: nix's `Signal`
/// cannot carry real-time signals, which must be re-injected like any other.
fn ptrace_restart(req: libc::c_uint, tid: i32, sig: i32) -> Result<(), Errno> {
    // SAFETY: these requests take no pointer: `addr` is ignored and `data` is the signal
    // number to deliver.
    let r = unsafe {
        libc::ptrace(
            req,
            tid as libc::pid_t,
            std::ptr::null_mut::<libc::c_void>(),
            sig as libc::c_long,
        )
    };
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

/// PTRACE_GET_SYSCALL_INFO's `op`: tells a syscall-entry stop from a syscall-exit stop without
/// keeping a toggle that events (fork, exec, new children) would desynchronise.
fn syscall_op(tid: i32) -> Option<u8> {
    let mut buf = [0u64; 12];
    // SAFETY: the kernel writes at most `size` (the second argument) bytes into `buf`.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_GET_SYSCALL_INFO,
            tid as libc::pid_t,
            std::mem::size_of_val(&buf),
            buf.as_mut_ptr(),
        )
    };
    (r > 0).then(|| buf[0].to_le_bytes()[0])
}

/// waitpid(-1, __WALL) with the raw status: nix's decoder fails on real-time signals, which
/// would lose the stop and leave the tracee stopped forever.
fn wait_any() -> Result<(i32, i32), Errno> {
    let mut status = 0;
    // SAFETY: `status` is a valid out-pointer for the duration of the call.
    let pid = unsafe { libc::waitpid(-1, &mut status, libc::__WALL) };
    if pid < 0 {
        Err(Errno::last())
    } else {
        Ok((pid, status))
    }
}

fn status_field(tid: i32, key: &str) -> Option<Vec<i64>> {
    let text = fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix(key))?;
    Some(
        line.split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect(),
    )
}

fn read_tgid(tid: i32) -> Option<i32> {
    status_field(tid, "Tgid:")?.first().map(|&v| v as i32)
}

/// Where a task whose parent's fork event never came most likely comes from, read from its
/// /proc status: `(tgid, creator)`. A thread (Tgid != tid) was made by a thread of its own
/// group, taken as its thread group; a process by its parent (PPid, the creating thread's
/// thread group). `None` creator once the parent has died: the task was re-parented (to us,
/// the subreaper, or to init), and PPid names its new parent, which is no task we trace or one
/// that did not create it; it then starts without a context, as under an untraced parent.
fn early_origin(tid: i32, status: &str) -> Option<(i32, Option<i32>)> {
    let field = |key: &str| -> Option<i32> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))?
            .trim()
            .parse()
            .ok()
    };
    let tgid = field("Tgid:")?;
    if tgid != tid {
        return Some((tgid, Some(tgid)));
    }
    let ppid = field("PPid:")?;
    let ours = i32::try_from(std::process::id()).ok();
    Some((tid, (ppid != 0 && Some(ppid) != ours).then_some(ppid)))
}

/// The emulator's own children, from /proc/self/task/<tid>/children (CONFIG_PROC_CHILDREN,
/// which every distribution kernel enables), else from the PPid of every process.
fn own_children() -> Vec<i32> {
    let parse = |text: &str| -> Vec<i32> {
        text.split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect()
    };
    let me = std::process::id();
    if let Ok(text) = fs::read_to_string(format!("/proc/self/task/{me}/children")) {
        // The emulator runs a single thread, so the main thread's list is all of them.
        return parse(&text);
    }
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            status_field(pid, "PPid:").is_some_and(|v| v.first() == Some(&i64::from(me)))
        })
        .collect()
}

/// The owner of /proc/<pid>/ files: the task's effective uid and gid.
fn task_owner(tid: i32) -> Option<(u32, u32)> {
    let uid = *status_field(tid, "Uid:")?.get(1)?;
    let gid = *status_field(tid, "Gid:")?.get(1)?;
    Some((uid as u32, gid as u32))
}

/// Whether an open(at)(2) asks for write access, or for O_TRUNC, which needs it. An
/// unreadable `struct open_how` counts as no: the real openat2 then fails with EFAULT.
fn open_for_writing(tid: i32, regs: &libc::user_regs_struct, syscall: &str) -> bool {
    let flags = match syscall {
        "open" => regs.rsi,
        "openat" => regs.rdx,
        "openat2" => {
            let mut how = [0u8; 8];
            if Remote(Pid::from_raw(tid)).read(regs.rdx, &mut how).is_err() {
                return false;
            }
            u64::from_le_bytes(how)
        }
        _ => return false,
    };
    let flags = flags as libc::c_int;
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0
}

fn errno_name(ret: i64) -> Option<String> {
    (-4095..0)
        .contains(&ret)
        .then(|| format!("{:?}", Errno::from_raw(-ret as i32)))
}

fn wait_status_json(status: i32) -> Value {
    if libc::WIFEXITED(status) {
        json!({ "exited": libc::WEXITSTATUS(status) })
    } else {
        json!({ "signaled": libc::WTERMSIG(status) })
    }
}

/// Signals received by the emulator itself, as a bit mask, set by [`on_signal`].
static SIGNALS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNALS.fetch_or(1 << sig, Ordering::SeqCst);
}

/// Handlers without SA_RESTART, so that a blocked waitpid returns EINTR and the loop can act.
/// The loop reads the flags after every return of waitpid, not only on EINTR: busy tracees
/// keep waitpid from ever blocking. A signal that lands just before waitpid blocks is seen at
/// the next return, which the 100 ms interval timer bounds when no tracee reports anything;
/// the timer also drives the grace period and the early-stop fallback in a quiet run.
fn install_signal_handlers() -> io::Result<()> {
    for sig in [
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGALRM,
    ] {
        // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value; the handler
        // only performs an atomic fetch_or, which is async-signal-safe.
        let rc = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    let tick = libc::timeval {
        tv_sec: 0,
        tv_usec: 100_000,
    };
    let timer = libc::itimerval {
        it_interval: tick,
        it_value: tick,
    };
    // SAFETY: `timer` is a valid itimerval; the old value is not requested.
    if unsafe { libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The supervisor state.
#[derive(Debug)]
struct Supervisor {
    cfg: Config,
    log: Log,
    tasks: HashMap<i32, Task>,
    /// New tasks that stopped before their parent's fork/clone event told us who they are.
    early: HashMap<i32, Early>,
    /// Unknown tasks that died before their parent's event arrived.
    dead_early: HashSet<i32>,
    tmpdir: PathBuf,
    seq: u64,
    main: i32,
    main_status: Option<i32>,
    /// Syscall-entry stops of every task, logged in the "end" event.
    syscalls: u64,
    /// When the next kill sweep is due: the end of the grace period once the command has
    /// exited, then every [`SWEEP_INTERVAL`].
    sweep_at: Option<Instant>,
    am_root: bool,
}

/// A task in [`Supervisor::early`].
#[derive(Debug, Clone, Copy)]
struct Early {
    /// The signal to deliver when it is resumed.
    sig: i32,
    /// Its first stop.
    since: Instant,
}

/// Runs the command under the emulator and returns the exit status for `isol-emu`.
pub fn run(cfg: Config) -> i32 {
    match start(cfg) {
        Ok(mut sup) => {
            sup.main_loop();
            let code = sup.main_status.unwrap_or(EXIT_EMU_FAILURE);
            sup.log
                .emit(json!({ "ev": "end", "status": code, "syscalls": sup.syscalls }));
            let _ = fs::remove_dir_all(&sup.tmpdir);
            code
        }
        Err(e) => {
            eprintln!("isol-emu: {e}");
            EXIT_EMU_FAILURE
        }
    }
}

fn cstring(s: &std::ffi::OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

fn start(cfg: Config) -> io::Result<Supervisor> {
    let log = match &cfg.log {
        Some(p) => Some(File::create(p).map_err(|e| {
            io::Error::new(e.kind(), format!("failed to create {}: {e}", p.display()))
        })?),
        None => None,
    };
    // Orphaned descendants are re-parented to us, so that we reap them and no zombie outlives
    // the run (the container's init may not reap).
    // SAFETY: PR_SET_CHILD_SUBREAPER takes an integer argument only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let template = std::env::temp_dir().join("isol-emu.XXXXXX");
    let tmpdir = nix::unistd::mkdtemp(&template)?;
    // Traversable by tracees that changed uid; the files themselves are 0400 like procfs's.
    fs::set_permissions(&tmpdir, fs::Permissions::from_mode(0o711))?;

    // Everything the child needs is built before fork.
    let argv: Vec<CString> = cfg
        .argv
        .iter()
        .map(|a| cstring(a))
        .collect::<Result<_, _>>()?;
    let marker = if cfg.trace_only { "trace-only" } else { "1" };
    let mut envp: Vec<CString> = std::env::vars_os()
        .filter(|(k, _)| k != "ISOL_RAWCALL_I_AM_UNDER_EMU")
        .map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv)
        })
        .collect::<Result<_, _>>()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    envp.push(CString::new(format!(
        "ISOL_RAWCALL_I_AM_UNDER_EMU={marker}"
    ))?);
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|a| a.as_ptr()).collect();
    envp_ptrs.push(std::ptr::null());
    let filter = cfg
        .seccomp
        .then(|| seccomp::trace_filter(&traced_syscalls(cfg.trace_only)));
    let shown = cfg.argv[0].to_string_lossy().into_owned();

    // SAFETY: the emulator is single-threaded here, so the child may run any code; it only
    // stops itself, installs the filter and execs.
    let child = match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => {
            // The command starts with the signal state a shell would give it, as
            // std::process::Command does: Rust's start-up code set SIGPIPE to SIG_IGN, which
            // exec keeps (`yes | head -1` would print "Broken pipe"), and a blocked mask would
            // be inherited too. The emulator's own handlers are installed after this fork.
            // SAFETY: `mask` is a valid sigset_t that sigemptyset initialises; signal() and
            // sigprocmask() are async-signal-safe and take no other pointer.
            unsafe {
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
                let mut mask: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut mask);
                libc::sigprocmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut());
            }
            // SAFETY: raise() has no memory-safety preconditions.
            unsafe { libc::raise(libc::SIGSTOP) };
            // The tracer has seized us and sent SIGCONT: traced syscalls now reach it.
            if let Some(f) = &filter {
                if let Err(e) = seccomp::install(f) {
                    eprintln!("isol-emu: failed to install the seccomp filter: {e}");
                    // SAFETY: _exit() has no preconditions.
                    unsafe { libc::_exit(EXIT_EMU_FAILURE) };
                }
            }
            // SAFETY: both arrays are NULL-terminated and point to CStrings alive until exec.
            unsafe { libc::execvpe(argv_ptrs[0], argv_ptrs.as_ptr(), envp_ptrs.as_ptr()) };
            let err = io::Error::last_os_error();
            eprintln!("isol-emu: failed to execute {shown}: {err}");
            let code = if err.raw_os_error() == Some(libc::ENOENT) {
                127
            } else {
                126
            };
            // SAFETY: _exit() has no preconditions.
            unsafe { libc::_exit(code) };
        }
        nix::unistd::ForkResult::Parent { child } => child,
    };

    let mut status = 0;
    // SAFETY: `status` is a valid out-pointer.
    if unsafe { libc::waitpid(child.as_raw(), &mut status, libc::WUNTRACED) } < 0
        || !libc::WIFSTOPPED(status)
    {
        return Err(io::Error::other("the child did not stop before exec"));
    }
    let opts = Options::PTRACE_O_TRACESYSGOOD
        | Options::PTRACE_O_TRACEFORK
        | Options::PTRACE_O_TRACEVFORK
        | Options::PTRACE_O_TRACECLONE
        | Options::PTRACE_O_TRACEEXEC
        | Options::PTRACE_O_TRACESECCOMP
        | Options::PTRACE_O_EXITKILL;
    if let Err(e) = ptrace::seize(child, opts) {
        let _ = nix::sys::signal::kill(child, nix::sys::signal::Signal::SIGKILL);
        return Err(io::Error::other(format!("PTRACE_SEIZE failed: {e}")));
    }
    nix::sys::signal::kill(child, nix::sys::signal::Signal::SIGCONT)?;
    install_signal_handlers()?;

    let mut sup = Supervisor {
        log: Log(log),
        tasks: HashMap::new(),
        early: HashMap::new(),
        dead_early: HashSet::new(),
        tmpdir,
        seq: 0,
        main: child.as_raw(),
        main_status: None,
        syscalls: 0,
        sweep_at: None,
        // SAFETY: geteuid() cannot fail and has no preconditions.
        am_root: unsafe { libc::geteuid() } == 0,
        cfg,
    };
    sup.tasks
        .insert(child.as_raw(), Task::new(child.as_raw(), None));
    let argv_json: Vec<String> = sup
        .cfg
        .argv
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    sup.log.emit(json!({
        "ev": "start",
        "tid": child.as_raw(),
        "argv": argv_json,
        "mode": if sup.cfg.trace_only { "trace-only" } else { "patched" },
        "seccomp": sup.cfg.seccomp,
    }));
    Ok(sup)
}

impl Supervisor {
    fn main_loop(&mut self) {
        loop {
            match wait_any() {
                Ok((tid, status)) => self.on_wait(tid, status),
                Err(Errno::EINTR) => {}
                Err(Errno::ECHILD) => break,
                Err(e) => {
                    eprintln!("isol-emu: waitpid failed: {e}");
                    break;
                }
            }
            self.after_wait();
        }
    }

    /// Work that is due by time or by a signal to the emulator. Runs after every return of
    /// waitpid, because with busy tracees it always has an event and never returns EINTR. The
    /// common case costs one atomic load and, while a deadline is armed, one clock read.
    fn after_wait(&mut self) {
        if SIGNALS.load(Ordering::Relaxed) != 0 {
            self.forward_signals();
        }
        if self.sweep_at.is_none() && self.early.is_empty() {
            return;
        }
        let now = Instant::now();
        if self.sweep_at.is_some_and(|t| now >= t) {
            self.sweep();
            self.sweep_at = Some(now + SWEEP_INTERVAL);
        }
        if self
            .early
            .values()
            .any(|e| now.duration_since(e.since) >= EARLY_TIMEOUT)
        {
            self.adopt_overdue_early(now);
        }
    }

    fn forward_signals(&mut self) {
        let got = SIGNALS.swap(0, Ordering::SeqCst);
        // SIGINT and SIGQUIT from a terminal already reach the command (same process group);
        // SIGTERM and SIGHUP are sent to us alone, so they are passed on. SIGALRM only wakes
        // the loop.
        for sig in [libc::SIGTERM, libc::SIGHUP] {
            if got & (1 << sig) != 0 && self.main_status.is_none() {
                // The command is our child and not yet reaped, so its pid is still its own.
                // SAFETY: kill() has no memory-safety preconditions.
                unsafe { libc::kill(self.main, sig) };
            }
        }
    }

    /// SIGKILLs what is left after the grace period; repeated every [`SWEEP_INTERVAL`] until
    /// nothing is left, since a task can appear after a sweep: the child of a fork under way
    /// when its parent was killed, or an orphan re-parented to us when its parent died.
    fn sweep(&mut self) {
        // Tasks we trace cannot be reaped by anyone before we have seen their exit (a zombie
        // tracee is visible to its tracer only), so their ids have not been reused.
        let traced = self.tasks.keys().chain(self.early.keys()).copied();
        // Untraced tasks (clone(CLONE_UNTRACED) children, see isol-emu's documentation) are
        // found as our children: the command's orphans are re-parented to us, the subreaper.
        // Only our own children are killed, never a grandchild found through them: no one
        // else can reap our children, so their pids cannot have been reused meanwhile, while a
        // grandchild's parent may reap it at any moment. A grandchild becomes our child when
        // its parent dies, and the next sweep gets it.
        let tids: Vec<i32> = traced.chain(own_children()).collect();
        for tid in tids {
            // SAFETY: kill() has no memory-safety preconditions.
            unsafe { libc::kill(tid, libc::SIGKILL) };
        }
    }

    /// A new task normally stops twice in quick succession: its own first stop, and its
    /// parent's fork event, which says what it inherits. If the parent is SIGKILLed in between,
    /// the event never comes and the task would stay stopped forever. After [`EARLY_TIMEOUT`]
    /// it is adopted from what /proc/<tid>/status says (see [`early_origin`]).
    fn adopt_overdue_early(&mut self, now: Instant) {
        let overdue: Vec<i32> = self
            .early
            .iter()
            .filter(|(_, e)| now.duration_since(e.since) >= EARLY_TIMEOUT)
            .map(|(&tid, _)| tid)
            .collect();
        for tid in overdue {
            let Some(early) = self.early.remove(&tid) else {
                continue;
            };
            let origin = fs::read_to_string(format!("/proc/{tid}/status"))
                .ok()
                .and_then(|text| early_origin(tid, &text));
            let (tgid, creator) = origin.unwrap_or((tid, None));
            let kind = if tgid == tid { "fork" } else { "clone" };
            // The creator's state now stands for the state it forked with, which differs only
            // if it issued a task-isolation prctl since: the closest the emulator can know.
            let isol = self.child_state(
                creator,
                tid,
                tgid,
                kind,
                Some("no fork event from the parent; adopted from /proc/<tid>/status"),
            );
            self.tasks.insert(tid, Task::new(tgid, isol));
            self.resume(tid, early.sig);
        }
    }

    fn on_wait(&mut self, tid: i32, status: i32) {
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            self.on_exit(tid, status);
            return;
        }
        if !libc::WIFSTOPPED(status) {
            return;
        }
        let sig = libc::WSTOPSIG(status);
        let event = status >> 16;
        if sig == libc::SIGTRAP | 0x80 {
            match syscall_op(tid) {
                Some(libc::PTRACE_SYSCALL_INFO_ENTRY) => self.on_entry(tid),
                Some(libc::PTRACE_SYSCALL_INFO_EXIT) => self.on_exit_stop(tid),
                _ => self.resume(tid, 0),
            }
            return;
        }
        match event {
            0 => {
                // Signal-delivery-stop: deliver the signal as if nobody were watching.
                if self.tasks.contains_key(&tid) {
                    self.resume(tid, sig);
                } else {
                    self.note_early(tid).sig = sig;
                }
            }
            libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK | libc::PTRACE_EVENT_CLONE => {
                self.on_fork(tid, event)
            }
            libc::PTRACE_EVENT_EXEC => self.on_exec(tid),
            libc::PTRACE_EVENT_SECCOMP => self.on_entry(tid),
            PTRACE_EVENT_STOP => {
                if !self.tasks.contains_key(&tid) {
                    // A new child's first stop, ahead of its parent's fork event.
                    self.note_early(tid);
                } else if matches!(
                    sig,
                    libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
                ) {
                    // Group-stop: stay stopped, but let SIGCONT wake the task (PTRACE_LISTEN),
                    // so job control works as without the tracer.
                    let _ = ptrace_restart(libc::PTRACE_LISTEN, tid, 0);
                } else {
                    self.resume(tid, 0);
                }
            }
            _ => self.resume(tid, 0),
        }
    }

    fn note_early(&mut self, tid: i32) -> &mut Early {
        self.early.entry(tid).or_insert(Early {
            sig: 0,
            since: Instant::now(),
        })
    }

    /// Restarts a task; through the syscall-exit stop when work is pending there (or always,
    /// without seccomp, since every entry must be seen).
    fn resume(&self, tid: i32, sig: i32) {
        let want_exit =
            !self.cfg.seccomp || self.tasks.get(&tid).is_some_and(|t| t.pending.is_some());
        let req = if want_exit {
            libc::PTRACE_SYSCALL
        } else {
            libc::PTRACE_CONT
        };
        // ESRCH: the task was killed meanwhile; its exit is reported later.
        let _ = ptrace_restart(req, tid, sig);
    }

    fn on_exit(&mut self, tid: i32, status: i32) {
        let state = match self.tasks.remove(&tid) {
            Some(mut t) => {
                t.drop_pending();
                Some((t.tgid, model::state_json(&t.isol), t.syscalls))
            }
            None => {
                if self.early.remove(&tid).is_some() {
                    self.dead_early.insert(tid);
                }
                None
            }
        };
        let (tgid, state, syscalls) = state
            .map_or((Value::Null, Value::Null, Value::Null), |(g, s, n)| {
                (json!(g), s, json!(n))
            });
        self.log.emit(json!({
            "ev": "exit",
            "tid": tid,
            "tgid": tgid,
            "status": wait_status_json(status),
            "state": if self.cfg.trace_only { Value::Null } else { state },
            "syscalls": syscalls,
        }));
        if tid == self.main {
            self.main_status = Some(if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                128 + libc::WTERMSIG(status)
            });
            self.sweep_at = Some(Instant::now() + self.cfg.grace);
        }
    }

    fn on_fork(&mut self, parent: i32, event: i32) {
        let Ok(child) = ptrace::getevent(Pid::from_raw(parent)).map(|c| c as i32) else {
            self.resume(parent, 0);
            return;
        };
        let kind = match event {
            libc::PTRACE_EVENT_FORK => "fork",
            libc::PTRACE_EVENT_VFORK => "vfork",
            _ => "clone",
        };
        // Only clone() can make a thread; its /proc/<tid>/status names the thread group.
        let tgid = if event == libc::PTRACE_EVENT_CLONE {
            read_tgid(child).unwrap_or(child)
        } else {
            child
        };
        if self.tasks.contains_key(&child) {
            // Adopted without this event, which came very late (see adopt_overdue_early):
            // the state the child has used since stays.
            self.resume(parent, 0);
            return;
        }
        let isol = self.child_state(Some(parent), child, tgid, kind, None);
        if !self.dead_early.remove(&child) {
            self.tasks.insert(child, Task::new(tgid, isol));
            if let Some(early) = self.early.remove(&child) {
                self.resume(child, early.sig);
            }
        }
        self.resume(parent, 0);
    }

    /// The state the kernel gives a new task at fork, from `parent`: a task, or else a thread
    /// group (a thread of it stands in); an unknown or untraced parent gives no context. Logs
    /// the fork.
    fn child_state(
        &mut self,
        parent: Option<i32>,
        child: i32,
        tgid: i32,
        kind: &str,
        reason: Option<&str>,
    ) -> TaskIsol {
        let parent_task = parent.and_then(|p| {
            self.tasks
                .get(&p)
                .or_else(|| self.tasks.values().find(|t| t.tgid == p))
        });
        let parent_tgid = parent_task.map(|t| t.tgid).or(parent);
        let mut isol = match parent_task {
            Some(t) if !self.cfg.trace_only => model::copy_on_fork(&t.isol),
            _ => None,
        };
        // v12 sets TIF_TASK_ISOL on every copied context, so the child's first return to
        // user mode (from fork) is a quiesce point.
        model::exit_to_user_mode(&mut isol);
        let state = if self.cfg.trace_only {
            Value::Null
        } else {
            model::state_json(&isol)
        };
        let mut ev = json!({
            "ev": "fork",
            "kind": kind,
            "tid": parent,
            "tgid": parent_tgid,
            "child": child,
            "child_tgid": tgid,
            "state": state,
        });
        if let Some(reason) = reason {
            ev["reason"] = json!(reason);
        }
        self.log.emit(ev);
        isol
    }

    fn on_exec(&mut self, tid: i32) {
        // When a non-leader thread execs it takes over the leader's id; the event message is
        // its former id. Its task_struct (and so its isolation state) is the one that lives on.
        let former = ptrace::getevent(Pid::from_raw(tid)).map_or(tid, |v| v as i32);
        if former != tid {
            if let Some(mut old_leader) = self.tasks.remove(&tid) {
                old_leader.drop_pending();
                self.log.emit(json!({
                    "ev": "exit",
                    "tid": tid,
                    "tgid": tid,
                    "status": Value::Null,
                    "reason": format!("thread group leader replaced by exec in thread {former}"),
                    "state": if self.cfg.trace_only { Value::Null } else { model::state_json(&old_leader.isol) },
                }));
            }
            if let Some(t) = self.tasks.remove(&former) {
                self.tasks.insert(tid, t);
            }
        }
        let task = self
            .tasks
            .entry(tid)
            .or_insert_with(|| Task::new(tid, None));
        task.tgid = tid;
        task.drop_pending();
        let path = task.exec_path.take();
        let state = if self.cfg.trace_only {
            Value::Null
        } else {
            model::state_json(&task.isol)
        };
        let exe = fs::read_link(format!("/proc/{tid}/exe"))
            .ok()
            .map(|p| p.to_string_lossy().into_owned());
        self.log.emit(json!({
            "ev": "exec",
            "tid": tid,
            "former_tid": former,
            "path": path,
            "exe": exe,
            "state": state,
        }));
        self.resume(tid, 0);
    }

    fn on_entry(&mut self, tid: i32) {
        let pid = Pid::from_raw(tid);
        let Ok(regs) = ptrace::getregs(pid) else {
            return;
        };
        // Not expected (every task is registered by its parent's event); be robust.
        self.tasks
            .entry(tid)
            .or_insert_with(|| Task::new(read_tgid(tid).unwrap_or(tid), None))
            .syscalls += 1;
        self.syscalls += 1;
        let nr = regs.orig_rax as libc::c_long;
        if nr == libc::SYS_prctl {
            self.entry_prctl(tid, regs);
        } else if nr == libc::SYS_execve || nr == libc::SYS_execveat {
            let idx = usize::from(nr == libc::SYS_execveat);
            let path = read_cstring(tid, arg(&regs, idx))
                .map(|p| String::from_utf8_lossy(&p).into_owned());
            if let Some(t) = self.tasks.get_mut(&tid) {
                t.exec_path = path;
            }
            self.resume(tid, 0);
        } else if let Some(&(_, idx, name)) = PATH_SYSCALLS
            .iter()
            .find(|&&(n, _, _)| n == nr && !self.cfg.trace_only)
        {
            self.entry_path(tid, regs, idx, name);
        } else {
            self.resume(tid, 0);
        }
    }

    fn entry_prctl(&mut self, tid: i32, mut regs: libc::user_regs_struct) {
        // prctl's option is a C int: the kernel ignores the upper half of %rdi.
        let option = regs.rdi as u32 as i32;
        let args = [regs.rsi, regs.rdx, regs.r10, regs.r8];
        let pid = Pid::from_raw(tid);
        let Some(task) = self.tasks.get_mut(&tid) else {
            return;
        };
        let injected = self.cfg.fail.iter().find(|r| r.matches(option, &args));
        let emulated = if self.cfg.trace_only {
            None
        } else if let Some(rule) = injected {
            Some(Err(nix::errno::Errno::from_raw(rule.errno)))
        } else {
            model::isol_prctl(&mut task.isol, option, args, &mut Remote(pid))
        };
        let Some(result) = emulated else {
            task.pending = Some(Pending::Real { option, args });
            self.resume(tid, 0);
            return;
        };
        let ret = result.unwrap_or_else(|e| -(e as i64));
        // orig_rax = -1 makes the kernel skip the syscall: the real prctl 63..67 (SME, MDWE,
        // KSM on stock kernels) never runs. %rax is set now and again at the exit stop.
        regs.orig_rax = u64::MAX;
        regs.rax = ret as u64;
        if ptrace::setregs(pid, regs).is_err() {
            return;
        }
        task.pending = Some(Pending::Emulated { ret });
        let tgid = task.tgid;
        self.log_prctl(tid, tgid, option, args, ret, true);
        self.resume(tid, 0);
    }

    fn log_procfs(
        &mut self,
        tid: i32,
        tgid: i32,
        syscall: &str,
        path: &str,
        content: Value,
        ret: i64,
    ) {
        self.log.emit(json!({
            "ev": "procfs",
            "tid": tid,
            "tgid": tgid,
            "syscall": syscall,
            "path": path,
            "content": content,
            "ret": ret,
            "errno": errno_name(ret),
        }));
    }

    fn log_prctl(
        &mut self,
        tid: i32,
        tgid: i32,
        option: i32,
        args: [u64; 4],
        ret: i64,
        emulated: bool,
    ) {
        self.log.emit(json!({
            "ev": "prctl",
            "tid": tid,
            "tgid": tgid,
            "option": option,
            "args": args,
            "ret": ret,
            "errno": errno_name(ret),
            "emulated": emulated,
        }));
    }

    fn entry_path(
        &mut self,
        tid: i32,
        regs: libc::user_regs_struct,
        idx: usize,
        name: &'static str,
    ) {
        match self.plant_procfs_file(tid, regs, idx, name) {
            Ok(Some(pending)) => {
                if let Some(t) = self.tasks.get_mut(&tid) {
                    t.pending = Some(pending);
                }
            }
            Ok(None) => {}
            Err(e) => eprintln!("isol-emu: failed to emulate the procfs file for {tid}: {e}"),
        }
        self.resume(tid, 0);
    }

    /// If the path argument names the emulated file, writes the current text to a fresh file
    /// and points the argument at that file's name, planted in the tracee's stack below the red
    /// zone (nothing lives there between now and the syscall reading it).
    fn plant_procfs_file(
        &mut self,
        tid: i32,
        mut regs: libc::user_regs_struct,
        idx: usize,
        name: &'static str,
    ) -> io::Result<Option<Pending>> {
        let orig = arg(&regs, idx);
        let Some(raw) = read_cstring(tid, orig) else {
            return Ok(None);
        };
        let Some(dir) = procfs::match_task_isolation(&raw) else {
            return Ok(None);
        };
        let subject = match dir {
            ProcDir::SelfDir => self.tasks.get(&tid).map_or(tid, |t| t.tgid),
            ProcDir::Task(n) => n,
        };
        let isol = match self.tasks.get(&subject) {
            Some(t) => t.isol,
            // Untraced but existing task: it has no context. Missing task: ENOENT from the
            // real kernel, as /proc/<n> does not exist.
            None if Path::new(&format!("/proc/{subject}")).exists() => None,
            None => return Ok(None),
        };
        let content = model::render_procfs(&isol);
        if open_for_writing(tid, &regs, name) {
            // The kernel's file is 0400 with no write handler: without CAP_DAC_OVERRIDE the
            // open fails with EACCES; with it the open succeeds and every write(2) fails with
            // EINVAL. The emulator cannot fail the writes to one fd (the seccomp filter cannot
            // name an fd chosen later) and a redirected root open would write to the private
            // copy and succeed, hiding a bug the real kernel reports; so every write-open gets
            // the non-root answer: an error one step early for root, never a silent success.
            let ret = -i64::from(libc::EACCES);
            regs.orig_rax = u64::MAX;
            regs.rax = ret as u64;
            ptrace::setregs(Pid::from_raw(tid), regs)?;
            return Ok(Some(Pending::ProcfsDenied {
                ret,
                path: String::from_utf8_lossy(&raw).into_owned(),
                syscall: name,
            }));
        }
        self.seq += 1;
        let tmp = self.tmpdir.join(format!("ti-{}", self.seq));
        {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o400)
                .open(&tmp)?;
            f.write_all(content.as_bytes())?;
            if self.am_root {
                if let Some((uid, gid)) = task_owner(subject) {
                    fchown(&f, Some(uid), Some(gid))?;
                }
            }
        }
        let mut bytes = tmp.as_os_str().as_bytes().to_vec();
        bytes.push(0);
        let at = regs.rsp.wrapping_sub(RED_ZONE + bytes.len() as u64 + 64) & !0xf;
        let planted = Remote(Pid::from_raw(tid))
            .write(at, &bytes)
            .map_err(io::Error::from)
            .and_then(|()| {
                set_arg(&mut regs, idx, at);
                ptrace::setregs(Pid::from_raw(tid), regs).map_err(io::Error::from)
            });
        if let Err(e) = planted {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        Ok(Some(Pending::Procfs {
            reg: idx,
            orig,
            tmp,
            path: String::from_utf8_lossy(&raw).into_owned(),
            content,
            syscall: name,
        }))
    }

    fn on_exit_stop(&mut self, tid: i32) {
        let pid = Pid::from_raw(tid);
        let Some(task) = self.tasks.get_mut(&tid) else {
            self.resume(tid, 0);
            return;
        };
        let tgid = task.tgid;
        match task.pending.take() {
            None => {}
            Some(Pending::Emulated { ret }) => {
                if let Ok(mut regs) = ptrace::getregs(pid) {
                    regs.rax = ret as u64;
                    let _ = ptrace::setregs(pid, regs);
                }
            }
            Some(Pending::Real { option, args }) => {
                if let Ok(regs) = ptrace::getregs(pid) {
                    self.log_prctl(tid, tgid, option, args, regs.rax as i64, false);
                }
            }
            Some(Pending::ProcfsDenied { ret, path, syscall }) => {
                if let Ok(mut regs) = ptrace::getregs(pid) {
                    regs.rax = ret as u64;
                    let _ = ptrace::setregs(pid, regs);
                }
                self.log_procfs(tid, tgid, syscall, &path, Value::Null, ret);
            }
            Some(Pending::Procfs {
                reg,
                orig,
                tmp,
                path,
                content,
                syscall,
            }) => {
                let _ = fs::remove_file(&tmp);
                if let Ok(mut regs) = ptrace::getregs(pid) {
                    let ret = regs.rax as i64;
                    set_arg(&mut regs, reg, orig);
                    let _ = ptrace::setregs(pid, regs);
                    self.log_procfs(tid, tgid, syscall, &path, json!(content), ret);
                }
            }
        }
        if !self.cfg.trace_only {
            if let Some(task) = self.tasks.get_mut(&tid) {
                model::exit_to_user_mode(&mut task.isol);
            }
        }
        self.resume(tid, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    fn supervisor(log: File) -> Supervisor {
        Supervisor {
            cfg: Config {
                log: None,
                trace_only: false,
                seccomp: true,
                grace: Duration::from_secs(2),
                fail: Vec::new(),
                argv: Vec::new(),
            },
            log: Log(Some(log)),
            tasks: HashMap::new(),
            early: HashMap::new(),
            dead_early: HashSet::new(),
            tmpdir: PathBuf::new(),
            seq: 0,
            main: 0,
            main_status: None,
            syscalls: 0,
            sweep_at: None,
            am_root: false,
        }
    }

    #[test]
    fn early_origin_names_the_parent_or_the_thread_group() {
        let status = |tgid: i32, ppid: i64| {
            format!("Name:\tx\nUmask:\t0022\nTgid:\t{tgid}\nNgid:\t0\nPid:\t500\nPPid:\t{ppid}\n")
        };
        let me = i64::from(std::process::id());
        assert_eq!(early_origin(500, &status(500, 42)), Some((500, Some(42))));
        assert_eq!(
            early_origin(501, &status(500, 42)),
            Some((500, Some(500))),
            "a thread comes from its own thread group"
        );
        assert_eq!(
            early_origin(500, &status(500, me)),
            Some((500, None)),
            "re-parented to the emulator: the creator is gone"
        );
        assert_eq!(early_origin(500, &status(500, 0)), Some((500, None)));
        assert_eq!(early_origin(500, "Name:\tx\n"), None);
    }

    /// Real tasks stand in for tracees whose parents' fork events never came: a grandchild
    /// (its parent is a task the supervisor knows), a child (re-parented to the supervisor,
    /// as an orphan would be) and a thread. They are not traced, so resuming them fails with
    /// ESRCH, which the supervisor ignores as for a task killed meanwhile.
    #[test]
    fn a_task_whose_fork_event_never_came_is_adopted_after_the_timeout() {
        // Above any pid_max: no such task.
        const GONE: i32 = i32::MAX - 1;
        let me = std::process::id() as i32;
        let mut sh = Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(sh.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let sleeper: i32 = line.trim().parse().unwrap();
        let shell = sh.id() as i32;
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
            let _ = end_rx.recv();
        });
        let thread_tid = tid_rx.recv().unwrap();

        let dir = tempfile::tempdir().unwrap();
        let log_path = dir.path().join("log.jsonl");
        let mut sup = supervisor(File::create(&log_path).unwrap());
        let conf = Some(model::IsolInfo {
            conf_mask: 1,
            quiesce_mask: 1,
            inherit_mask: 1, // ISOL_INHERIT_CONF
            ..Default::default()
        });
        sup.tasks.insert(shell, Task::new(shell, conf));
        sup.tasks.insert(me, Task::new(me, conf));
        let overdue = Instant::now()
            .checked_sub(EARLY_TIMEOUT + Duration::from_millis(1))
            .unwrap();
        for tid in [sleeper, GONE] {
            sup.early.insert(
                tid,
                Early {
                    sig: 0,
                    since: overdue,
                },
            );
        }
        sup.early.insert(
            thread_tid,
            Early {
                sig: 0,
                since: Instant::now(),
            },
        );
        sup.after_wait();

        assert_eq!(
            sup.early.keys().collect::<Vec<_>>(),
            [&thread_tid],
            "only the thread is not overdue yet"
        );
        let adopted = &sup.tasks[&sleeper];
        assert_eq!(adopted.tgid, sleeper);
        assert_eq!(
            adopted.isol,
            model::copy_on_fork(&conf),
            "inherited from sh"
        );
        assert!(conf.is_some() && adopted.isol.is_some());
        // A task that vanished is adopted as itself, without a context; its exit comes later.
        assert_eq!(sup.tasks[&(GONE)].isol, None);

        sup.early.get_mut(&thread_tid).unwrap().since = overdue;
        sup.after_wait();
        assert!(sup.early.is_empty());
        assert_eq!(sup.tasks[&thread_tid].tgid, me);
        assert_eq!(sup.tasks[&thread_tid].isol, model::copy_on_fork(&conf));

        // The sh is the supervisor's own child: as a new task it has no known creator.
        sup.tasks.remove(&shell);
        sup.early.insert(
            shell,
            Early {
                sig: 0,
                since: overdue,
            },
        );
        sup.after_wait();
        assert_eq!(sup.tasks[&shell].isol, None);

        let log = fs::read_to_string(&log_path).unwrap();
        let forks: Vec<Value> = log
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(forks.len(), 4, "{log}");
        assert!(forks
            .iter()
            .all(|f| f["ev"] == "fork" && f["reason"].is_string()));
        let of = |tid: i32| forks.iter().find(|f| f["child"] == tid).unwrap();
        assert_eq!(of(sleeper)["tid"], shell);
        assert_eq!(of(sleeper)["kind"], "fork");
        assert_eq!(of(thread_tid)["kind"], "clone");
        assert_eq!(of(thread_tid)["child_tgid"], me);
        assert_eq!(of(shell)["tid"], Value::Null);

        end_tx.send(()).unwrap();
        thread.join().unwrap();
        // `sleeper` is sh's child, which sh reaps only after this kill (it waits for it).
        let _ = nix::sys::signal::kill(Pid::from_raw(sleeper), nix::sys::signal::Signal::SIGKILL);
        sh.wait().unwrap();
    }
}
