//! chisol: configure the calling task (task isolation, CPUs, scheduling, THP, cgroup), then
//! exec the workload. All kernel knowledge lives in libtaskisol; this crate parses options,
//! prints, and maps failures to util-linux exit codes.

pub mod cli;

use std::ffi::CString;
use std::io::Write;

use clap::Parser;
use libtaskisol::isolation::parse_quiesce_list;
use libtaskisol::launch::{CpuTarget, Fallback, LaunchSpec};
use libtaskisol::procfs::{self, TaskStat};
use libtaskisol::sched::SchedPolicy;
use libtaskisol::{
    abi, CpuSet, Error, Inherit, QuiesceConfig, SysRoot, TaskIsolation, TaskIsolationState,
};

use cli::{Cli, FallbackArg};

/// Exit code for a failure (util-linux EXIT_FAILURE).
pub const EXIT_FAILURE: i32 = 1;
/// Exit code when the command was found but could not be executed.
pub const EXIT_CANNOT_EXEC: i32 = 126;
/// Exit code when the command was not found.
pub const EXIT_NOT_FOUND: i32 = 127;

fn fail(msg: impl std::fmt::Display) -> i32 {
    eprintln!("chisol: {msg}");
    EXIT_FAILURE
}

/// Parse `args` (including `argv[0]`) and run. Returns the exit code; on success with a
/// command this does not return (the process becomes the command).
pub fn main_with_args(args: Vec<std::ffi::OsString>) -> i32 {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            let code = match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => 0,
                _ => EXIT_FAILURE,
            };
            if code == 0 {
                let _ = e.print();
                return 0;
            }
            // util-linux style: "chisol: <problem>" and a pointer to --help, not clap's
            // multi-line report with its usage block.
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("chisol: {first}\nTry 'chisol --help' for more information.");
            return code;
        }
    };
    let root = SysRoot::host();
    if cli.info {
        return info();
    }
    if let Some(pid) = cli.pid {
        return show_pid(&root, pid);
    }
    if cli.command.is_empty() {
        return fail("no command specified\nTry 'chisol --help' for more information.");
    }
    let spec = match spec_from_cli(&cli) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let plan = match spec.plan(&root) {
        Ok(p) => p,
        Err(Error::Unsupported(why)) => {
            return fail(format!(
                "{why}; --quiesce, --activate and --inherit need it (see --fallback=native)"
            ))
        }
        Err(e) => return fail(e),
    };
    for note in &plan.notes {
        eprintln!("chisol: {note}");
    }
    if cli.verbose {
        for s in &plan.steps {
            eprintln!("chisol: will {}", s.describe());
        }
    }
    if let Err(e) = plan.apply_to_self(&root) {
        return fail(e);
    }
    exec(&cli.command)
}

fn spec_from_cli(cli: &Cli) -> Result<LaunchSpec, Error> {
    let quiesce = cli
        .quiesce
        .as_deref()
        .map(parse_quiesce_list)
        .transpose()?
        .map(QuiesceConfig::every_time);
    let inherit = cli.inherit.as_deref().map(Inherit::parse).transpose()?;
    let cpus = match (&cli.cpu_list, cli.isolated) {
        (Some(list), _) => Some(CpuTarget::List(CpuSet::parse_list(list)?)),
        (None, true) => Some(CpuTarget::Isolated),
        (None, false) => None,
    };
    let sched = match (cli.fifo, cli.rr) {
        (Some(p), _) => Some(SchedPolicy::Fifo(p)),
        (None, Some(p)) => Some(SchedPolicy::RoundRobin(p)),
        _ => None,
    };
    Ok(LaunchSpec {
        quiesce,
        activate: cli.activate,
        inherit,
        cpus,
        sched,
        no_thp: cli.no_thp,
        // The library takes kernel (absolute) paths; a relative one means the current
        // directory, as for any other command.
        cgroup: match &cli.cgroup {
            Some(p) => Some(std::path::absolute(p).map_err(|e| {
                Error::Invalid(format!(
                    "cgroup path {}: {}",
                    p.display(),
                    libtaskisol::error::io_strerror(&e)
                ))
            })?),
            None => None,
        },
        fallback: match cli.fallback {
            FallbackArg::None => Fallback::None,
            FallbackArg::Native => Fallback::Native,
        },
    })
}

/// `-i`: the original prints one line per feature: `quiesce: vmstat_sync `.
fn info() -> i32 {
    let ti = match TaskIsolation::detect() {
        Ok(t) => t,
        Err(why) => return fail(why),
    };
    let features = match ti.features() {
        Ok(f) => f,
        Err(e) => return fail(e),
    };
    let mut text = String::new();
    if features & abi::ISOL_F_QUIESCE != 0 {
        let bits = match ti.supported_quiesce() {
            Ok(b) => b,
            Err(e) => return fail(e),
        };
        text.push_str("quiesce: ");
        for (bit, name) in abi::QUIESCE_NAMES {
            if bits & bit != 0 {
                text.push_str(name);
                text.push(' ');
            }
        }
        text.push('\n');
    }
    print_out(&text)
}

/// `-p PID`: one line per thread. Works on stock kernels too: the isolation columns then
/// say `n/a` and a note tells why; so does a thread whose state cannot be read (mode 0400
/// files of another user, a thread exiting meanwhile).
fn show_pid(root: &SysRoot, pid: i32) -> i32 {
    let tids = match procfs::thread_ids(root, pid) {
        Ok(t) => t,
        Err(e) if e.errno() == Some(libc::ENOENT) => {
            return fail(format!("pid {pid}: no such process"))
        }
        Err(e) => return fail(e),
    };
    let interface = root.exists(format!("/proc/{pid}/task_isolation"));
    if !interface {
        eprintln!(
            "chisol: pid {pid}: task isolation interface not available: the kernel has no /proc/{pid}/task_isolation"
        );
    }
    let mut text = format!(
        "{:<8} {:<16} {:<11} {:<8} {:<12} {:<10} POLICY\n",
        "TID", "COMM", "CONFIGURED", "ACTIVE", "QUIESCING", "CPUS"
    );
    let mut unreadable: Option<String> = None;
    for tid in tids {
        let Ok(stat) = TaskStat::read_path(root, &format!("/proc/{pid}/task/{tid}/stat")) else {
            continue; // the thread exited meanwhile
        };
        let cpus = root
            .read_to_string(format!("/proc/{pid}/task/{tid}/status"))
            .ok()
            .and_then(|s| procfs::status_field(&s, "Cpus_allowed_list").map(str::to_string))
            .unwrap_or_else(|| "?".into());
        let policy = SchedPolicy::from_stat(stat.policy, stat.rt_priority)
            .map_or_else(|| format!("policy {}", stat.policy), |p| p.to_string());
        let state = if interface {
            match TaskIsolationState::read(root, tid) {
                Ok(s) => Some(s),
                Err(e) => {
                    unreadable.get_or_insert_with(|| e.to_string());
                    None
                }
            }
        } else {
            None
        };
        let (c, a, q) = match state {
            Some(s) => (s.configured_names(), s.active_names(), s.quiescing_names()),
            None => ("n/a".into(), "n/a".into(), "n/a".into()),
        };
        text.push_str(&format!(
            "{:<8} {:<16} {:<11} {:<8} {:<12} {:<10} {}\n",
            tid, stat.comm, c, a, q, cpus, policy
        ));
    }
    if let Some(e) = unreadable {
        eprintln!("chisol: pid {pid}: {e}");
    }
    print_out(&text)
}

/// Write to stdout; a write error (a full disk, a closed pipe) is a failure, as in util-linux.
fn print_out(text: &str) -> i32 {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => 0,
        Err(e) => fail(format!(
            "write error: {}",
            libtaskisol::error::io_strerror(&e)
        )),
    }
}

fn exec(command: &[std::ffi::OsString]) -> i32 {
    use std::os::unix::ffi::OsStrExt;
    let name = command[0].to_string_lossy();
    // Arguments are bytes, not text: pass them through as util-linux does.
    let cargs: Result<Vec<CString>, _> =
        command.iter().map(|a| CString::new(a.as_bytes())).collect();
    let cargs = match cargs {
        Ok(c) => c,
        Err(_) => {
            return fail(format!(
                "failed to execute {name}: argument contains a NUL byte"
            ))
        }
    };
    let errno = match nix::unistd::execvp(&cargs[0], &cargs) {
        Ok(never) => match never {},
        Err(e) => e,
    };
    eprintln!(
        "chisol: failed to execute {name}: {}",
        libtaskisol::error::strerror(errno)
    );
    if errno == nix::errno::Errno::ENOENT {
        EXIT_NOT_FOUND
    } else {
        EXIT_CANNOT_EXEC
    }
}
