//! isol-rawcall's implementation (x86_64 only: raw syscall numbers, struct layouts).

use std::collections::VecDeque;
use std::ffi::CString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use libtaskisol::abi::{
    ISOL_F_QUIESCE, I_CFG_FEAT, I_CFG_INHERIT, PR_ISOL_ACTIVATE_GET, PR_ISOL_ACTIVATE_SET,
    PR_ISOL_CFG_GET, PR_ISOL_CFG_SET, PR_ISOL_FEAT_GET, QUIESCE_CONTROL,
};
use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;
use serde_json::{json, Value};

const FILL: u64 = 0xa5a5_a5a5_a5a5_a5a5;
const USAGE: &str = "\
Usage: isol-rawcall CALL... (each CALL one argument; run only under isol-emu)
  feat-get W | cfg-get-feat [ARG3] | cfg-get-quiesce [ARG4]
  cfg-set-quiesce FLAGS MASK ONESHOT [ARG4] | cfg-get-inherit | cfg-set-inherit MASK [FLAGS]
  activate-get | activate-set MASK | prctl OPT A2 A3 A4 A5 (A: number|buf|bad|ro)
  badptr CALL.. | roptr CALL..  (the call's pointer is unmapped / read-only)
  cat-ti WHO | probe WHO  (WHO: self|thread-self|pid|tid|task|parent|N|/path)
  open-ti WHO FLAGS  (open, openat and openat2 with these O_* flags, as a number)
  fork-then | thread-then | exec-then | thread-exec-then | spawn-then  (rest runs there)
  untraced-then  (rest runs in a clone(CLONE_UNTRACED) child; the parent goes on at once)
  busy-threads N MS getppid|open  (N threads loop on the syscall for MS ms)
  fork-storm N MS  (N threads fork children that sleep MS ms, for MS ms)
  ids | exit CODE | raise SIG | sleep-ms N";

/// Where the call's user pointer points.
#[derive(Debug, Clone, Copy, PartialEq)]
enum PtrMode {
    Buf,
    Bad,
    ReadOnly,
}

#[derive(Debug, Clone)]
enum Call {
    Prctl {
        name: &'static str,
        option: i32,
        /// Arguments; `None` marks the pointer argument.
        args: [Option<u64>; 4],
        /// Bytes placed in the buffer before the call (for SET calls).
        input: Vec<u64>,
        ptr: PtrMode,
    },
    /// Fully raw: each argument is a number or a pointer token.
    Raw {
        option: u64,
        args: [RawArg; 4],
    },
    Cat(String),
    Probe(String),
    OpenTi(String, u64),
    ForkThen,
    ThreadThen,
    ExecThen,
    ThreadExecThen,
    SpawnThen,
    UntracedThen,
    BusyThreads {
        threads: u64,
        ms: u64,
        /// open("/dev/null") instead of getppid: a syscall the seccomp filter sends to the
        /// tracer.
        open: bool,
    },
    ForkStorm {
        threads: u64,
        ms: u64,
    },
    Ids,
    Exit(i32),
    Raise(i32),
    SleepMs(u64),
}

#[derive(Debug, Clone, Copy)]
enum RawArg {
    Num(u64),
    Ptr(PtrMode),
}

fn num(s: &str) -> Result<u64, String> {
    let r = if let Some(h) = s.strip_prefix("0x") {
        u64::from_str_radix(h, 16)
    } else if let Some(neg) = s.strip_prefix('-') {
        neg.parse::<u64>().map(|v| v.wrapping_neg())
    } else {
        s.parse()
    };
    r.map_err(|_| format!("not a number: {s}"))
}

fn parse_call(group: &str) -> Result<Call, String> {
    let words: Vec<&str> = group.split_whitespace().collect();
    let (ptr, words) = match words.first() {
        Some(&"badptr") => (PtrMode::Bad, &words[1..]),
        Some(&"roptr") => (PtrMode::ReadOnly, &words[1..]),
        _ => (PtrMode::Buf, &words[..]),
    };
    let Some((&name, rest)) = words.split_first() else {
        return Err("empty call".into());
    };
    let n = |i: usize, default: Option<u64>| -> Result<u64, String> {
        match rest.get(i) {
            Some(s) => num(s),
            None => default.ok_or_else(|| format!("{name}: missing argument {}", i + 1)),
        }
    };
    let prctl = |name: &'static str, option: i32, args: [Option<u64>; 4], input: Vec<u64>| {
        Ok(Call::Prctl {
            name,
            option,
            args,
            input,
            ptr,
        })
    };
    match name {
        "feat-get" => prctl(
            "feat-get",
            PR_ISOL_FEAT_GET,
            [Some(n(0, None)?), None, Some(0), Some(0)],
            vec![],
        ),
        "cfg-get-feat" => prctl(
            "cfg-get-feat",
            PR_ISOL_CFG_GET,
            [Some(I_CFG_FEAT), Some(n(0, Some(0))?), None, Some(0)],
            vec![],
        ),
        "cfg-get-quiesce" => prctl(
            "cfg-get-quiesce",
            PR_ISOL_CFG_GET,
            [
                Some(I_CFG_FEAT),
                Some(ISOL_F_QUIESCE),
                Some(n(0, Some(QUIESCE_CONTROL))?),
                None,
            ],
            vec![],
        ),
        "cfg-set-quiesce" => prctl(
            "cfg-set-quiesce",
            PR_ISOL_CFG_SET,
            [
                Some(I_CFG_FEAT),
                Some(ISOL_F_QUIESCE),
                Some(n(3, Some(QUIESCE_CONTROL))?),
                None,
            ],
            vec![n(0, None)?, n(1, None)?, n(2, None)?, 0, 0, 0, 0, 0],
        ),
        "cfg-get-inherit" => prctl(
            "cfg-get-inherit",
            PR_ISOL_CFG_GET,
            [Some(I_CFG_INHERIT), None, Some(0), Some(0)],
            vec![],
        ),
        "cfg-set-inherit" => {
            // struct task_isol_inherit_control: u8 inherit_mask, u8 flags, u8 pad[6].
            let word = (n(0, None)? & 0xff) | ((n(1, Some(0))? & 0xff) << 8);
            prctl(
                "cfg-set-inherit",
                PR_ISOL_CFG_SET,
                [Some(I_CFG_INHERIT), None, Some(0), Some(0)],
                vec![word],
            )
        }
        "activate-get" => prctl(
            "activate-get",
            PR_ISOL_ACTIVATE_GET,
            [None, Some(0), Some(0), Some(0)],
            vec![],
        ),
        "activate-set" => prctl(
            "activate-set",
            PR_ISOL_ACTIVATE_SET,
            [None, Some(0), Some(0), Some(0)],
            vec![n(0, None)?],
        ),
        "prctl" => {
            let raw = |i: usize| -> Result<RawArg, String> {
                match rest.get(i).copied() {
                    Some("buf") => Ok(RawArg::Ptr(PtrMode::Buf)),
                    Some("bad") => Ok(RawArg::Ptr(PtrMode::Bad)),
                    Some("ro") => Ok(RawArg::Ptr(PtrMode::ReadOnly)),
                    Some(s) => num(s).map(RawArg::Num),
                    None => Ok(RawArg::Num(0)),
                }
            };
            Ok(Call::Raw {
                option: n(0, None)?,
                args: [raw(1)?, raw(2)?, raw(3)?, raw(4)?],
            })
        }
        "cat-ti" => Ok(Call::Cat(rest.first().unwrap_or(&"self").to_string())),
        "probe" => Ok(Call::Probe(rest.first().unwrap_or(&"self").to_string())),
        "open-ti" => Ok(Call::OpenTi(
            rest.first().unwrap_or(&"self").to_string(),
            n(1, None)?,
        )),
        "fork-then" => Ok(Call::ForkThen),
        "thread-then" => Ok(Call::ThreadThen),
        "exec-then" => Ok(Call::ExecThen),
        "thread-exec-then" => Ok(Call::ThreadExecThen),
        "spawn-then" => Ok(Call::SpawnThen),
        "untraced-then" => Ok(Call::UntracedThen),
        "busy-threads" => Ok(Call::BusyThreads {
            threads: n(0, None)?,
            ms: n(1, None)?,
            open: match rest.get(2).copied() {
                Some("getppid") => false,
                Some("open") => true,
                _ => return Err("busy-threads: the syscall is getppid or open".into()),
            },
        }),
        "fork-storm" => Ok(Call::ForkStorm {
            threads: n(0, None)?,
            ms: n(1, None)?,
        }),
        "ids" => Ok(Call::Ids),
        "exit" => Ok(Call::Exit(n(0, None)? as i32)),
        "raise" => Ok(Call::Raise(n(0, None)? as i32)),
        "sleep-ms" => Ok(Call::SleepMs(n(0, None)?)),
        _ => Err(format!("unknown call: {name}")),
    }
}

/// Whether the call issues one of the task-isolation prctl numbers (compared as the kernel
/// does: the option is a C int).
fn issues_isolation_prctl(call: &Call) -> bool {
    match call {
        Call::Prctl { .. } => true,
        Call::Raw { option, .. } => (63..=67).contains(&(*option as u32 as i32)),
        _ => false,
    }
}

/// The pages behind the `bad` and `ro` pointer tokens.
struct Pages {
    bad: u64,
    ro: u64,
}

fn map_page(prot: libc::c_int) -> u64 {
    // SAFETY: an anonymous private mapping chosen by the kernel overlaps nothing we own.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap failed");
    p as u64
}

fn pages() -> Pages {
    Pages {
        bad: map_page(libc::PROT_NONE),
        ro: map_page(libc::PROT_READ),
    }
}

/// # Safety
/// Every pointer argument must be valid for what the syscall does with it, or point to a
/// page that faults (PROT_NONE / read-only for writes), which the kernel reports as EFAULT.
unsafe fn raw_syscall(nr: libc::c_long, a: [u64; 5]) -> (i64, Option<Errno>) {
    Errno::clear();
    // SAFETY: forwarded to the caller.
    let r = unsafe { libc::syscall(nr, a[0], a[1], a[2], a[3], a[4]) };
    if r == -1 {
        (-1, Some(Errno::last()))
    } else {
        (r, None)
    }
}

fn ids() -> Value {
    json!({
        "pid": std::process::id(),
        "tid": nix::unistd::gettid().as_raw(),
        "ppid": nix::unistd::getppid().as_raw(),
    })
}

fn emit(mut v: Value) {
    if let (Value::Object(m), Value::Object(ids)) = (&mut v, ids()) {
        for (k, x) in ids {
            m.entry(k).or_insert(x);
        }
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn errno_json(e: Option<Errno>) -> Value {
    e.map_or(Value::Null, |e| json!(format!("{e:?}")))
}

fn who_path(who: &str) -> String {
    let pid = std::process::id();
    let tid = nix::unistd::gettid().as_raw();
    match who {
        "self" => "/proc/self/task_isolation".into(),
        "thread-self" => "/proc/thread-self/task_isolation".into(),
        "tid" => format!("/proc/{tid}/task_isolation"),
        "pid" => format!("/proc/{pid}/task_isolation"),
        "task" => format!("/proc/{pid}/task/{tid}/task_isolation"),
        "parent" => format!("/proc/{}/task_isolation", nix::unistd::getppid()),
        p if p.starts_with('/') => p.into(),
        n => format!("/proc/{n}/task_isolation"),
    }
}

fn do_prctl(call: &Call, pages: &Pages, group: &str) {
    let mut buf = [FILL; 8];
    let (name, option, args, ptr) = match call {
        Call::Prctl {
            name,
            option,
            args,
            input,
            ptr,
        } => {
            buf[..input.len()].copy_from_slice(input);
            (
                *name,
                *option as u64,
                args.map(|a| a.map(RawArg::Num).unwrap_or(RawArg::Ptr(*ptr))),
                Some(*ptr),
            )
        }
        Call::Raw { option, args } => ("prctl", *option, *args, None),
        _ => unreachable!(),
    };
    let buf_ptr = buf.as_mut_ptr() as u64;
    let resolve = |a: RawArg| match a {
        RawArg::Num(v) => v,
        RawArg::Ptr(PtrMode::Buf) => buf_ptr,
        RawArg::Ptr(PtrMode::Bad) => pages.bad,
        RawArg::Ptr(PtrMode::ReadOnly) => pages.ro,
    };
    let a = args.map(resolve);
    // SAFETY: pointer arguments are `buf` (64 writable bytes, the largest structure of the
    // ABI), a PROT_NONE page or a read-only page; numbers are passed as the caller asked.
    let (ret, err) = unsafe { raw_syscall(libc::SYS_prctl, [option, a[0], a[1], a[2], a[3]]) };
    let out = match ptr {
        Some(PtrMode::Bad | PtrMode::ReadOnly) => Value::Null,
        _ => json!(buf),
    };
    emit(json!({
        "call": name,
        "argv": group,
        "option": option,
        "args": a,
        "ret": ret,
        "errno": errno_json(err),
        "out": out,
    }));
}

fn do_cat(who: &str) {
    let path = who_path(who);
    match std::fs::read_to_string(&path) {
        Ok(content) => emit(
            json!({"call": "cat-ti", "path": path, "ret": 0, "errno": null, "content": content}),
        ),
        Err(e) => {
            let errno = e.raw_os_error().map(Errno::from_raw);
            emit(
                json!({"call": "cat-ti", "path": path, "ret": -1, "errno": errno_json(errno), "content": null}),
            )
        }
    }
}

fn do_probe(who: &str) {
    let path = who_path(who);
    let Ok(c) = CString::new(path.clone()) else {
        return;
    };
    let p = c.as_ptr() as u64;
    let cwd = libc::AT_FDCWD as i64 as u64;
    let rdonly = (libc::O_RDONLY | libc::O_CLOEXEC) as u64;
    let mut st = [0u8; 512];
    let stp = st.as_mut_ptr() as u64;
    // struct open_how { u64 flags, mode, resolve }.
    let how: [u64; 3] = [rdonly, 0, 0];
    let howp = how.as_ptr() as u64;
    let r_ok = libc::R_OK as u64;
    let calls: [(&str, libc::c_long, [u64; 5]); 10] = [
        ("open", libc::SYS_open, [p, rdonly, 0, 0, 0]),
        ("openat", libc::SYS_openat, [cwd, p, rdonly, 0, 0]),
        ("openat2", libc::SYS_openat2, [cwd, p, howp, 24, 0]),
        ("stat", libc::SYS_stat, [p, stp, 0, 0, 0]),
        ("lstat", libc::SYS_lstat, [p, stp, 0, 0, 0]),
        ("newfstatat", libc::SYS_newfstatat, [cwd, p, stp, 0, 0]),
        (
            "statx",
            libc::SYS_statx,
            [cwd, p, 0, libc::STATX_BASIC_STATS as u64, stp],
        ),
        ("access", libc::SYS_access, [p, r_ok, 0, 0, 0]),
        ("faccessat", libc::SYS_faccessat, [cwd, p, r_ok, 0, 0]),
        ("faccessat2", libc::SYS_faccessat2, [cwd, p, r_ok, 0, 0]),
    ];
    let mut results = serde_json::Map::new();
    let mut content = Value::Null;
    let mut mode = Value::Null;
    for (name, nr, args) in calls {
        // SAFETY: `p` is a NUL-terminated path, `stp` 512 writable bytes (struct stat is 144,
        // struct statx 256), `howp` a 24-byte open_how; the opens return fds we close below.
        let (ret, err) = unsafe { raw_syscall(nr, args) };
        if name.starts_with("open") && err.is_none() {
            let mut data = vec![0u8; 4096];
            // SAFETY: `ret` is an fd we own; `data` is 4096 writable bytes.
            let n = unsafe { libc::read(ret as i32, data.as_mut_ptr().cast(), data.len()) };
            if content.is_null() && n >= 0 {
                content = json!(String::from_utf8_lossy(&data[..n as usize]));
            }
            // SAFETY: closing the fd the open above returned.
            unsafe { libc::close(ret as i32) };
        }
        if name == "stat" && err.is_none() {
            // st_mode of the x86_64 struct stat (after st_dev, st_ino, st_nlink).
            mode = json!(u32::from_le_bytes([st[24], st[25], st[26], st[27]]));
        }
        results.insert(
            name.into(),
            err.map_or(json!("ok"), |e| json!(format!("{e:?}"))),
        );
    }
    emit(
        json!({"call": "probe", "path": path, "results": results, "content": content, "mode": mode}),
    );
}

/// Opens with the caller's flags through each open syscall, O_CREAT never being among them
/// in the tests (no mode is passed).
fn do_open(who: &str, flags: u64) {
    let path = who_path(who);
    let Ok(c) = CString::new(path.clone()) else {
        return;
    };
    let p = c.as_ptr() as u64;
    let cwd = libc::AT_FDCWD as i64 as u64;
    let flags = flags | libc::O_CLOEXEC as u64;
    // struct open_how { u64 flags, mode, resolve }.
    let how: [u64; 3] = [flags, 0, 0];
    let howp = how.as_ptr() as u64;
    let calls: [(&str, libc::c_long, [u64; 5]); 3] = [
        ("open", libc::SYS_open, [p, flags, 0, 0, 0]),
        ("openat", libc::SYS_openat, [cwd, p, flags, 0, 0]),
        ("openat2", libc::SYS_openat2, [cwd, p, howp, 24, 0]),
    ];
    let mut results = serde_json::Map::new();
    for (name, nr, args) in calls {
        // SAFETY: `p` is a NUL-terminated path and `howp` a 24-byte open_how; an fd the open
        // returns is ours and closed at once.
        let (ret, err) = unsafe { raw_syscall(nr, args) };
        if err.is_none() {
            // SAFETY: closing the fd the open above returned.
            unsafe { libc::close(ret as i32) };
        }
        results.insert(
            name.into(),
            err.map_or(json!("ok"), |e| json!(format!("{e:?}"))),
        );
    }
    emit(json!({"call": "open-ti", "path": path, "flags": flags, "results": results}));
}

fn self_exe() -> Command {
    Command::new("/proc/self/exe")
}

fn run(groups: &[String], calls: &[Call], pages: &Pages) {
    for (i, call) in calls.iter().enumerate() {
        let rest = &groups[i + 1..];
        let rest_calls = &calls[i + 1..];
        match call {
            Call::Prctl { .. } | Call::Raw { .. } => do_prctl(call, pages, &groups[i]),
            Call::Cat(who) => do_cat(who),
            Call::Probe(who) => do_probe(who),
            Call::OpenTi(who, flags) => do_open(who, *flags),
            Call::Ids => emit(json!({"call": "ids"})),
            Call::Exit(code) => std::process::exit(*code),
            Call::Raise(sig) => {
                // SAFETY: raise() has no memory-safety preconditions.
                unsafe { libc::raise(*sig) };
            }
            Call::SleepMs(ms) => std::thread::sleep(Duration::from_millis(*ms)),
            Call::ForkThen => {
                // SAFETY: the child only runs the remaining calls and exits; no other thread
                // of ours is running (threads of earlier calls were joined).
                match unsafe { nix::unistd::fork() } {
                    Ok(nix::unistd::ForkResult::Child) => {
                        run(rest, rest_calls, pages);
                        std::process::exit(0);
                    }
                    Ok(nix::unistd::ForkResult::Parent { child }) => {
                        let status = nix::sys::wait::waitpid(child, None);
                        emit(
                            json!({"call": "fork-then", "child": child.as_raw(), "status": format!("{status:?}")}),
                        );
                    }
                    Err(e) => emit(json!({"call": "fork-then", "errno": format!("{e:?}")})),
                }
                return;
            }
            Call::ThreadThen => {
                let (rest, rest_calls) = (rest.to_vec(), rest_calls.to_vec());
                let tid = std::thread::spawn(move || {
                    run(&rest, &rest_calls, &pages_again());
                    nix::unistd::gettid().as_raw()
                })
                .join();
                emit(json!({"call": "thread-then", "thread": tid.ok()}));
                return;
            }
            Call::ExecThen => {
                let e = self_exe().args(rest).exec();
                emit(json!({"call": "exec-then", "error": e.to_string()}));
                return;
            }
            Call::ThreadExecThen => {
                let rest = rest.to_vec();
                let h = std::thread::spawn(move || self_exe().args(&rest).exec());
                // Only returns if the exec failed; on success de_thread() ends this thread.
                let e = h.join();
                emit(json!({"call": "thread-exec-then", "error": format!("{e:?}")}));
                return;
            }
            Call::SpawnThen => {
                // std spawns with posix_spawn (clone(CLONE_VM|CLONE_VFORK)): the vfork path.
                let status = self_exe().args(rest).status();
                emit(json!({"call": "spawn-then", "status": format!("{status:?}")}));
                return;
            }
            Call::UntracedThen => {
                // SAFETY: clone without CLONE_VM is fork without glibc's bookkeeping: the
                // child gets its own copy of the address space, stack included (a NULL stack
                // pointer keeps using it). No other thread of ours runs (threads of earlier
                // calls were joined), so the copy holds no lock. glibc's cached tid stays the
                // parent's in the child, so the child must not use it (raise, threads): the
                // usage says which calls are meant to follow.
                let r = unsafe {
                    libc::syscall(
                        libc::SYS_clone,
                        (libc::CLONE_UNTRACED | libc::SIGCHLD) as libc::c_ulong,
                        0usize,
                        0usize,
                        0usize,
                        0usize,
                    )
                };
                match r {
                    0 => {
                        run(rest, rest_calls, pages);
                        std::process::exit(0);
                    }
                    -1 => emit(
                        json!({"call": "untraced-then", "errno": errno_json(Some(Errno::last()))}),
                    ),
                    child => emit(json!({"call": "untraced-then", "child": child})),
                }
                return;
            }
            Call::BusyThreads { threads, ms, open } => busy_threads(*threads, *ms, *open),
            Call::ForkStorm { threads, ms } => fork_storm(*threads, *ms),
        }
    }
}

/// Threads that never block, so that the tracer always has a stop to handle: what a
/// supervisor must still interrupt for signals and deadlines.
fn busy_threads(threads: u64, ms: u64, open: bool) {
    let until = Instant::now() + Duration::from_millis(ms);
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                let mut calls = 0u64;
                while Instant::now() < until {
                    if open {
                        let _ = std::fs::File::open("/dev/null");
                    } else {
                        let _ = nix::unistd::getppid();
                    }
                    calls += 1;
                }
                calls
            })
        })
        .collect();
    let calls: u64 = workers.into_iter().filter_map(|h| h.join().ok()).sum();
    emit(json!({"call": "busy-threads", "calls": calls}));
}

/// Threads that fork without pause, each keeping at most 16 sleeping children (the oldest is
/// killed to make room), so that fork events are always in flight: a supervisor that kills
/// this process meets children it has not heard of yet. Children sleep `ms` and the storm
/// lasts `ms`, so nothing outlives the call by more than that.
fn fork_storm(threads: u64, ms: u64) {
    let until = Instant::now() + Duration::from_millis(ms);
    let nap = libc::timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
    };
    let reap = |pid: Pid| {
        let _ = kill(pid, Signal::SIGKILL);
        let _ = waitpid(pid, None);
    };
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                let mut live = VecDeque::new();
                let mut forks = 0u64;
                while Instant::now() < until {
                    if live.len() >= 16 {
                        if let Some(oldest) = live.pop_front() {
                            reap(oldest);
                        }
                    }
                    // SAFETY: other threads run, so the child calls only async-signal-safe
                    // functions (nanosleep, _exit) and touches no lock or allocation.
                    match unsafe { libc::fork() } {
                        0 => {
                            // SAFETY: `nap` is a valid timespec and the remainder is not asked
                            // for; _exit() has no preconditions.
                            unsafe {
                                libc::nanosleep(&nap, std::ptr::null_mut());
                                libc::_exit(0)
                            }
                        }
                        -1 => break,
                        pid => {
                            live.push_back(Pid::from_raw(pid));
                            forks += 1;
                        }
                    }
                }
                live.into_iter().for_each(reap);
                forks
            })
        })
        .collect();
    let forks: u64 = workers.into_iter().filter_map(|h| h.join().ok()).sum();
    emit(json!({"call": "fork-storm", "forks": forks}));
}

/// A thread gets its own pointer pages so that `Pages` need not be shared.
fn pages_again() -> Pages {
    pages()
}

/// The TracerPid of this process and that tracer's command name.
fn tracer_comm() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let tracer: i32 = status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))?
        .trim()
        .parse()
        .ok()?;
    if tracer == 0 {
        return None;
    }
    Some(
        std::fs::read_to_string(format!("/proc/{tracer}/comm"))
            .ok()?
            .trim()
            .to_string(),
    )
}

fn refuse(msg: &str) -> ! {
    eprintln!("isol-rawcall: refusing to run: {msg}");
    std::process::exit(2);
}

/// The program; see the binary's documentation.
pub fn main() {
    let groups: Vec<String> = std::env::args().skip(1).collect();
    if groups.is_empty() || groups[0] == "-h" || groups[0] == "--help" {
        println!("{USAGE}");
        return;
    }
    let calls: Vec<Call> = groups
        .iter()
        .map(|g| parse_call(g))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| {
            eprintln!("isol-rawcall: {e}\n{USAGE}");
            std::process::exit(2);
        });
    // On a stock kernel prctl 63..67 change the process (67 enables KSM as root): only run
    // under the emulator, checked twice (the marker it sets, and that it is our tracer), or
    // untraced on a kernel that has the interface itself (the project's own 6.1 in QEMU, where
    // the same calls run natively and under the emulator and must answer alike), detected as
    // libtaskisol detects it.
    let marker = std::env::var("ISOL_RAWCALL_I_AM_UNDER_EMU").unwrap_or_default();
    if marker.is_empty() && tracer_comm().is_none() && libtaskisol::TaskIsolation::detect().is_ok()
    {
        run(&groups, &calls, &pages());
        return;
    }
    if marker != "1" && marker != "trace-only" {
        refuse("ISOL_RAWCALL_I_AM_UNDER_EMU=1 is not set (run it under isol-emu, or on a kernel with the task-isolation interface)");
    }
    match tracer_comm() {
        Some(c) if c == "isol-emu" => {}
        other => refuse(&format!("not traced by isol-emu (tracer: {other:?})")),
    }
    // A clone(CLONE_UNTRACED) child is not traced, so nothing emulates its prctls.
    if calls
        .iter()
        .skip_while(|c| !matches!(c, Call::UntracedThen))
        .any(issues_isolation_prctl)
    {
        refuse("calls after untraced-then are not traced: prctl 63..67 would reach the kernel");
    }
    if marker == "trace-only" && calls.iter().any(issues_isolation_prctl) {
        refuse("isol-emu --trace-only passes prctl 63..67 to the real kernel");
    }
    run(&groups, &calls, &pages());
}
