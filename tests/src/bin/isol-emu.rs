//! isol-emu: a test-only emulation of a kernel carrying the task-isolation patches
//! ("extensible prctl task isolation interface and vmstat sync", v11/v12, never merged), built
//! on ptrace so the taskisol tools can be tested end to end on a stock kernel. x86_64 only.
//!
//! ```text
//! isol-emu [--log FILE] [--trace-only] [--no-seccomp] [--grace-ms N] [--] cmd args...
//! ```
//!
//! Default ("patched kernel") mode: prctl 63..67 of every traced task are answered here and
//! never reach the kernel (the stop at syscall entry sets orig_rax = -1, the result goes into
//! %rax), and `/proc/self/task_isolation` and `/proc/<n>/task_isolation` exist for path
//! syscalls. `--trace-only` emulates nothing and only records prctls, to prove that a program
//! issues no prctl 63..67 on a stock kernel.
//!
//! The log proves that the tracer saw the command at all, so that an absent prctl means
//! something: every successful exec is an "exec" event (path and /proc/<pid>/exe), every task's
//! "exit" event counts the syscall-entry stops the tracer handled for it (`syscalls`; with
//! seccomp only the filtered syscalls, the command's own execve included), and the final "end"
//! event has the command's status and the total count. An empty, truncated or foreign log
//! lacks these.
//!
//! Where each rule comes from (R = /work/shared/reference/task-isolation-abi.md,
//! P = the v12 LKML postings of 2022-03-15, found through the code search: "[patch v12 03/13]
//! add basic task isolation prctl interface" (kernel/task_isolation.c, kernel/fork.c),
//! "[patch v12 05/13] task isolation: sync vmstats on return to userspace",
//! "[patch v12 06/13] procfs: add per-pid task isolation state", "[patch v12 13/13] task
//! isolation: only TIF_TASK_ISOL if task isolation is enabled"). No kernel code was copied.
//! - Numbers, structs, names: R (identical in P's uapi prctl.h).
//! - FEAT_GET: arg2 0 writes one u64 (ISOL_F_QUIESCE) at arg3; arg2 ISOL_F_QUIESCE writes the
//!   64-byte extensions (flags 0, supported VMSTATS, zero pad); both return 0; other arg2 EINVAL
//!   (R, P). arg4 and arg5 are ignored, in every call: P checks no unused argument.
//! - CFG_GET I_CFG_FEAT, arg3 0: writes conf_mask at arg4, 0 without a context — no EINVAL
//!   (P; R is silent). arg3 ISOL_F_QUIESCE: EINVAL unless arg4 == QUIESCE_CONTROL, then writes
//!   the 64-byte control with only quiesce_mask filled (0 without a context, again not EINVAL:
//!   P) to arg5. Other arg3 EINVAL (P). I_CFG_INHERIT: EINVAL without a context, before the
//!   pointer is used; writes {inherit_mask, 0...} at arg3 (R, P). Other arg2 EINVAL.
//! - CFG_SET quiesce: arg4 checked first (EINVAL), then the 64-byte read (EFAULT), then flags,
//!   mask in {0, VMSTATS}, oneshot within mask (EINVAL); allocates the context; stores both
//!   masks; conf_mask |= QUIESCE even for mask 0 (R, order from P). Pad words are not checked
//!   (P). Other arg3 EINVAL (P).
//! - CFG_SET inherit: 8-byte read (EFAULT), bits other than CONF|ACTIVE or ACTIVE without CONF
//!   EINVAL (R); the `flags` byte is NOT checked — P ignores it, although R says it "must be 0";
//!   allocates the context (P).
//! - ACTIVATE_GET: EINVAL without a context *before* touching the pointer, then EFAULT (P).
//! - ACTIVATE_SET: read first (EFAULT even without a context), then value not in
//!   {0, ISOL_F_QUIESCE} EINVAL, then no context EINVAL (P). Activation does not require the
//!   feature to be configured, only a context (P).
//! - The prctl option is a C int: the upper half of %rdi is ignored (kernel/sys.c).
//! - fork/vfork/clone (threads too): a child gets a context only if the parent's inherit_mask
//!   has CONF or ACTIVE; it always gets the inherit_mask; CONF copies conf/quiesce/oneshot,
//!   ACTIVE also copies active_mask (R, P).
//! - exec keeps the state (it lives on the task_struct); when a non-leader thread execs, its
//!   state moves to the thread-group id and the old leader's is dropped (de_thread keeps the
//!   exec-ing task). Freed at exit: logged as the "exit" event (R).
//! - Quiesce point (P 05/13 + 13/13): on return to user mode, if active_mask == ISOL_F_QUIESCE
//!   exactly and VMSTATS is in quiesce_mask, sync (counted as `quiesce_syncs`), and a oneshot
//!   VMSTATS bit is then cleared from quiesce_mask. v12 raises TIF_TASK_ISOL on ACTIVATE_SET,
//!   on CFG_SET while active, on every copied context, and whenever vmstat gets dirty, so the
//!   return from the activating prctl itself already syncs. Emulated at every syscall-exit stop
//!   the emulator sees (with seccomp: the intercepted syscalls; without: all of them) and at a
//!   new child's first return from fork. So after `CFG_SET(VMSTATS, oneshot VMSTATS)` +
//!   `ACTIVATE_SET(QUIESCE)` the quiesce mask is already 0 when ACTIVATE_SET returns.
//! - /proc/<pid>/task_isolation (P 06/13): three lines "Configured state: ", "Active state: "
//!   (feature names), "Quiescing: " (quiesce_mask names, whether active or not), each name
//!   followed by a space, "none " for 0. Only in the tgid directory (tgid_base_stuff), mode
//!   0400; `self` = the caller's thread group; a tid works at the top level (R, P). It has no
//!   write handler: an open for writing fails with EACCES without CAP_DAC_OVERRIDE, while
//!   root's open succeeds and its writes fail with EINVAL (procfs, checked on
//!   /proc/self/environ). The emulator answers EACCES to every open for writing or with
//!   O_TRUNC, root's included: it cannot fail the writes to one fd.
//!
//! How: PTRACE_SEIZE with TRACEFORK|VFORK|CLONE|EXEC|SECCOMP|EXITKILL. By default a seccomp
//! filter (installed in the child before exec) stops tracees only at prctl, execve(at) and the
//! path syscalls; `--no-seccomp` stops at every syscall instead (slower, for comparison). A
//! procfs path is redirected to a fresh 0400 file in a private temp dir holding the current
//! text, owned by the task's euid when running as root; the argument register is restored at
//! the syscall-exit stop. Relative paths, paths relative to a directory fd and paths with a
//! `..` component are not emulated. The command starts with SIGPIPE at its default action and
//! no signal blocked, whatever the emulator's own state. Exit status: the command's, or
//! 128+signal; 125 for the emulator's own failures. SIGTERM and SIGHUP to the emulator are
//! passed on to the command. When the command exits, remaining tasks get `--grace-ms` (default
//! 2000) to finish, then SIGKILL, every 100 ms until none is left: the traced tasks and the
//! emulator's own children (it is the subreaper of the command's orphans).
//!
//! Not emulated: children made with clone(CLONE_UNTRACED). The flag turns off the fork event
//! and so the tracing of the child; their prctls reach the real kernel and they have no
//! /proc/<pid>/task_isolation state (the log shows their exit with tgid null). Stripping the
//! flag would mean stopping at every clone3 (its flags live in memory, out of the seccomp
//! filter's reach) and rewriting the caller's `struct clone_args`, for a flag user programs
//! rarely pass. They are killed after the grace period like any other leftover.

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[path = "../emu/model.rs"]
mod model;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[path = "../emu/procfs.rs"]
mod procfs;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[path = "../emu/seccomp.rs"]
mod seccomp;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[path = "../emu/tracer.rs"]
mod tracer;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
use std::{ffi::OsString, path::PathBuf, time::Duration};

#[cfg_attr(
    not(all(target_os = "linux", target_arch = "x86_64")),
    allow(dead_code)
)]
const USAGE: &str = "\
Usage: isol-emu [--log FILE] [--trace-only] [--no-seccomp] [--grace-ms N]
                [--fail OPTION[:ARG2]=ERRNO]... [--] cmd [args...]

Runs cmd as if the kernel carried the task-isolation patches (prctl 63..67 and
/proc/<pid>/task_isolation), for tests. Test-only; x86_64 only.

  --log FILE      write one JSON object per event (start, prctl, exec, procfs, fork,
                  exit with the task's count of traced syscalls, end)
  --trace-only    emulate nothing; only record every prctl
  --no-seccomp    stop at every syscall instead of filtering with seccomp (slower)
  --grace-ms N    after cmd exits, wait N ms for its other tasks, then kill them (2000)
  --fail R        make matching PR_ISOL_* calls fail, e.g. 65=EOPNOTSUPP (every CFG_SET),
                  65:2=EINVAL (CFG_SET of I_CFG_INHERIT only); repeatable
";

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn usage_error(msg: &str) -> ! {
    eprintln!("isol-emu: {msg}\n{USAGE}");
    std::process::exit(tracer::EXIT_EMU_FAILURE);
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn parse(mut args: std::vec::IntoIter<OsString>) -> tracer::Config {
    let mut cfg = tracer::Config {
        log: None,
        trace_only: false,
        seccomp: true,
        grace: Duration::from_millis(2000),
        fail: Vec::new(),
        argv: Vec::new(),
    };
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("--") => break,
            Some("--log") => {
                let f = args
                    .next()
                    .unwrap_or_else(|| usage_error("--log needs a file"));
                cfg.log = Some(PathBuf::from(f));
            }
            Some("--trace-only") => cfg.trace_only = true,
            Some("--no-seccomp") => cfg.seccomp = false,
            Some("--grace-ms") => {
                let ms = args
                    .next()
                    .and_then(|v| v.to_str().and_then(|s| s.parse().ok()))
                    .unwrap_or_else(|| usage_error("--grace-ms needs a number"));
                cfg.grace = Duration::from_millis(ms);
            }
            Some("--fail") => {
                let rule = args
                    .next()
                    .and_then(|v| v.to_str().and_then(tracer::FailRule::parse))
                    .unwrap_or_else(|| usage_error("--fail needs OPTION[:ARG2]=ERRNO, 63..67"));
                cfg.fail.push(rule);
            }
            Some("-h" | "--help") => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            Some(s) if s.starts_with("--log=") => cfg.log = Some(PathBuf::from(&s[6..])),
            Some(s) if s.starts_with('-') => usage_error(&format!("unknown option {s}")),
            _ => {
                cfg.argv.push(a);
                break;
            }
        }
    }
    cfg.argv.extend(args);
    if cfg.argv.is_empty() {
        usage_error("no command given");
    }
    cfg
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
fn main() {
    eprintln!("isol-emu: only x86_64 Linux is supported");
    std::process::exit(125);
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let cfg = parse(args.into_iter());
    std::process::exit(tracer::run(cfg));
}
