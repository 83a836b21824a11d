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
    if let Some(shell) = cli.completions {
        use clap::CommandFactory;
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "chisol", &mut script);
        return match std::io::Write::write_all(&mut std::io::stdout().lock(), &script) {
            Ok(()) => 0,
            Err(e) => fail(format!(
                "write error: {}",
                libtaskisol::error::io_strerror(&e)
            )),
        };
    }
    let root = SysRoot::host();
    if cli.json && !cli.info && cli.pid.is_none() {
        return fail("--json goes with -i or -p\nTry 'chisol --help' for more information.");
    }
    if cli.info {
        return info(cli.json);
    }
    if let Some(pid) = cli.pid {
        return show_pid(&root, pid, cli.json);
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
fn info(json: bool) -> i32 {
    let ti = match TaskIsolation::detect() {
        Ok(t) => t,
        Err(why) if json => {
            // The answer a script wants on a stock kernel: no interface, and why.
            let v = serde_json::json!({ "interface": false, "why": why.to_string() });
            print_out(&format!("{v:#}\n"));
            return fail(why);
        }
        Err(why) => return fail(why),
    };
    let out = ti.features().and_then(|features| {
        if json {
            info_json(features, || ti.supported_quiesce())
        } else {
            info_text(features, || ti.supported_quiesce())
        }
    });
    match out {
        Ok(t) => print_out(&t),
        Err(e) => fail(e),
    }
}

/// `-i --json`: the feature mask, and the quiesce bits by name when it has ISOL_F_QUIESCE.
fn info_json(
    features: u64,
    supported_quiesce: impl FnOnce() -> Result<u64, Error>,
) -> Result<String, Error> {
    let quiesce = if features & abi::ISOL_F_QUIESCE != 0 {
        let bits = supported_quiesce()?;
        let names: Vec<&str> = abi::QUIESCE_NAMES
            .iter()
            .filter(|(bit, _)| bits & bit != 0)
            .map(|(_, name)| *name)
            .collect();
        Some(names)
    } else {
        None
    };
    let v = serde_json::json!({
        "interface": true,
        "features": features,
        "quiesce": quiesce,
    });
    Ok(format!("{v:#}\n"))
}

/// The `-i` text for a kernel's feature mask; the supported quiesce bits are asked for only
/// when it has ISOL_F_QUIESCE (FEAT_GET(ISOL_F_QUIESCE) is invalid otherwise).
fn info_text(
    features: u64,
    supported_quiesce: impl FnOnce() -> Result<u64, Error>,
) -> Result<String, Error> {
    let mut text = String::new();
    if features & abi::ISOL_F_QUIESCE != 0 {
        let bits = supported_quiesce()?;
        text.push_str("quiesce: ");
        for (bit, name) in abi::QUIESCE_NAMES {
            if bits & bit != 0 {
                text.push_str(name);
                text.push(' ');
            }
        }
        text.push('\n');
    }
    Ok(text)
}

/// `-p PID`: one line per thread. Works on stock kernels too: the isolation columns then
/// say `n/a` and a note tells why. A thread that exits meanwhile is left out; any other
/// error (a mode 0400 file of another user, an unparsable file) keeps the thread's row, with
/// `?` or `n/a` where the value is unknown, and is printed.
fn show_pid(root: &SysRoot, pid: i32, json: bool) -> i32 {
    match pid_rows(root, pid) {
        Ok((rows, notes)) if json => {
            let v = serde_json::json!({
                "pid": pid,
                "interface": root.exists(format!("/proc/{pid}/task_isolation")),
                "threads": rows,
                "notes": notes,
            });
            print_out(&format!("{v:#}\n"))
        }
        Ok((rows, notes)) => {
            for n in notes {
                eprintln!("chisol: pid {pid}: {n}");
            }
            print_out(&pid_table(&rows))
        }
        Err(e) => fail(e),
    }
}

/// One thread of the `-p` view; `None` where a value could not be read (the notes say why),
/// the isolation fields also without the interface.
#[derive(Debug, serde::Serialize)]
struct ThreadRow {
    tid: i32,
    comm: Option<String>,
    configured: Option<String>,
    active: Option<String>,
    quiescing: Option<String>,
    cpus: Option<String>,
    policy: Option<String>,
}

/// The `-p` table: `?` for what could not be read, `n/a` without the interface.
fn pid_table(rows: &[ThreadRow]) -> String {
    let mut text = format!(
        "{:<8} {:<16} {:<11} {:<8} {:<12} {:<10} POLICY\n",
        "TID", "COMM", "CONFIGURED", "ACTIVE", "QUIESCING", "CPUS"
    );
    for r in rows {
        let na = |v: &Option<String>| v.clone().unwrap_or_else(|| "n/a".into());
        let q = |v: &Option<String>| v.clone().unwrap_or_else(|| "?".into());
        text.push_str(&format!(
            "{:<8} {:<16} {:<11} {:<8} {:<12} {:<10} {}\n",
            r.tid,
            q(&r.comm),
            na(&r.configured),
            na(&r.active),
            na(&r.quiescing),
            q(&r.cpus),
            q(&r.policy)
        ));
    }
    text
}

/// The `-p` table as text, and the notes for stderr.
#[cfg(test)]
fn pid_view(root: &SysRoot, pid: i32) -> Result<(String, Vec<String>), String> {
    pid_rows(root, pid).map(|(rows, notes)| (pid_table(&rows), notes))
}

/// The `-p` rows, and the notes for stderr.
fn pid_rows(root: &SysRoot, pid: i32) -> Result<(Vec<ThreadRow>, Vec<String>), String> {
    let tids = match procfs::thread_ids(root, pid) {
        Ok(t) => t,
        Err(e) if e.errno() == Some(libc::ENOENT) => {
            return Err(format!("pid {pid}: no such process"))
        }
        Err(e) => return Err(e.to_string()),
    };
    let mut notes = Vec::new();
    let interface = root.exists(format!("/proc/{pid}/task_isolation"));
    if !interface {
        notes.push(format!(
            "task isolation interface not available: the kernel has no /proc/{pid}/task_isolation"
        ));
    }
    let mut rows = Vec::new();
    'threads: for tid in tids {
        let mut errors = Vec::new();
        let Ok(stat) = keep(
            TaskStat::read_path(root, &format!("/proc/{pid}/task/{tid}/stat")),
            &mut errors,
        ) else {
            continue 'threads;
        };
        let Ok(cpus) = keep(
            procfs::read_status_field_at(
                root,
                &format!("/proc/{pid}/task/{tid}/status"),
                "Cpus_allowed_list",
            ),
            &mut errors,
        ) else {
            continue 'threads;
        };
        let state = if interface {
            match keep(TaskIsolationState::read(root, tid), &mut errors) {
                Ok(s) => s,
                Err(ThreadExited) => continue 'threads,
            }
        } else {
            None
        };
        let (comm, policy) = match &stat {
            Some(st) => (
                Some(st.comm.clone()),
                Some(
                    SchedPolicy::from_stat(st.policy, st.rt_priority)
                        .map_or_else(|| format!("policy {}", st.policy), |p| p.to_string()),
                ),
            ),
            None => (None, None),
        };
        let (configured, active, quiescing) = match state {
            Some(s) => (
                Some(s.configured_names()),
                Some(s.active_names()),
                Some(s.quiescing_names()),
            ),
            None => (None, None, None),
        };
        rows.push(ThreadRow {
            tid,
            comm,
            configured,
            active,
            quiescing,
            cpus,
            policy,
        });
        notes.extend(errors.into_iter().map(|e| format!("thread {tid}: {e}")));
    }
    Ok((rows, notes))
}

/// A thread of the `-p` view exited while it was read.
struct ThreadExited;

/// A value of the `-p` view: `Ok(None)` when it cannot be read (the error goes to `errors`),
/// `Err` when the thread is gone.
fn keep<T>(r: Result<T, Error>, errors: &mut Vec<String>) -> Result<Option<T>, ThreadExited> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if procfs::task_exited(&e) => Err(ThreadExited),
        Err(e) => {
            errors.push(e.to_string());
            Ok(None)
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(tid: i32, comm: &str, policy: u32, prio: u32) -> String {
        format!(
            "{tid} ({comm}) S 1 {tid} {tid} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0 \
             18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 3 {prio} {policy} 0 0 0\n"
        )
    }

    fn tree(files: &[(String, String)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (p, c) in files {
            let full = d.path().join(p.trim_start_matches('/'));
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, c).unwrap();
        }
        d
    }

    /// Only a thread that exited (its files gone) leaves the view; a thread whose files
    /// cannot be read or parsed keeps its row, and the error is shown.
    #[test]
    fn pid_view_keeps_threads_it_cannot_read_and_says_why() {
        let state = "Configured state: quiesce \nActive state: none \nQuiescing: vmstat_sync \n";
        let files: Vec<(String, String)> = vec![
            ("/proc/42/task_isolation".into(), state.into()),
            ("/proc/42/task/42/stat".into(), stat(42, "main", 1, 10)),
            (
                "/proc/42/task/42/status".into(),
                "Name:\tmain\nCpus_allowed_list:\t2-3\n".into(),
            ),
            // 43: unparsable stat, no Cpus_allowed_list, bad state file.
            ("/proc/43/task_isolation".into(), "garbage\n".into()),
            ("/proc/42/task/43/stat".into(), "43 (x) S 1 2\n".into()),
            ("/proc/42/task/43/status".into(), "Name:\tx\n".into()),
            // 44: exited meanwhile (only its directory is left).
            ("/proc/42/task/44/.keep".into(), String::new()),
            // 45: RR, state readable.
            ("/proc/45/task_isolation".into(), state.into()),
            ("/proc/42/task/45/stat".into(), stat(45, "rr thread", 2, 3)),
            (
                "/proc/42/task/45/status".into(),
                "Cpus_allowed_list:\t3\n".into(),
            ),
        ];
        let d = tree(&files);
        let root = SysRoot::new(d.path());
        let (text, notes) = pid_view(&root, 42).unwrap();
        let rows: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(rows.len(), 4, "header and threads 42, 43, 45:\n{text}");
        assert_eq!(
            rows[1],
            [
                "42",
                "main",
                "quiesce",
                "none",
                "vmstat_sync",
                "2-3",
                "SCHED_FIFO",
                "priority",
                "10"
            ]
        );
        assert_eq!(rows[2], ["43", "?", "n/a", "n/a", "n/a", "?", "?"]);
        assert_eq!(
            rows[3],
            [
                "45",
                "rr",
                "thread",
                "quiesce",
                "none",
                "vmstat_sync",
                "3",
                "SCHED_RR",
                "priority",
                "3"
            ]
        );
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(
            notes[0].starts_with("thread 43: unexpected content in ")
                && notes[0].contains("/proc/42/task/43/stat"),
            "{notes:?}"
        );
        assert!(
            notes[1].contains("/proc/42/task/43/status") && notes[1].contains("Cpus_allowed_list"),
            "{notes:?}"
        );
        assert!(
            notes[2].contains("/proc/43/task_isolation") && notes[2].contains("garbage"),
            "{notes:?}"
        );
    }

    /// `-p --json`: the same rows, null where the table says `?` or `n/a`.
    #[test]
    fn pid_rows_as_json_say_null_for_what_could_not_be_read() {
        let state = "Configured state: quiesce \nActive state: quiesce \nQuiescing: vmstat_sync \n";
        let files: Vec<(String, String)> = vec![
            ("/proc/42/task_isolation".into(), state.into()),
            ("/proc/42/task/42/stat".into(), stat(42, "main", 1, 10)),
            (
                "/proc/42/task/42/status".into(),
                "Cpus_allowed_list:\t2-3\n".into(),
            ),
            ("/proc/43/task_isolation".into(), "garbage\n".into()),
            ("/proc/42/task/43/stat".into(), "43 (x) S 1 2\n".into()),
            ("/proc/42/task/43/status".into(), "Name:\tx\n".into()),
        ];
        let d = tree(&files);
        let (rows, _) = pid_rows(&SysRoot::new(d.path()), 42).unwrap();
        assert_eq!(
            serde_json::to_value(&rows).unwrap(),
            serde_json::json!([
                {"tid": 42, "comm": "main", "configured": "quiesce", "active": "quiesce",
                 "quiescing": "vmstat_sync", "cpus": "2-3", "policy": "SCHED_FIFO priority 10"},
                {"tid": 43, "comm": null, "configured": null, "active": null,
                 "quiescing": null, "cpus": null, "policy": null},
            ])
        );
    }

    #[test]
    fn info_as_json_names_the_quiesce_bits() {
        let v = |t: String| serde_json::from_str::<serde_json::Value>(&t).unwrap();
        let vmstat = abi::ISOL_F_QUIESCE_VMSTATS;
        assert_eq!(
            v(info_json(abi::ISOL_F_QUIESCE, || Ok(vmstat)).unwrap()),
            serde_json::json!({"interface": true, "features": abi::ISOL_F_QUIESCE, "quiesce": ["vmstat_sync"]})
        );
        assert_eq!(
            v(info_json(2, || -> Result<u64, Error> { unreachable!() }).unwrap()),
            serde_json::json!({"interface": true, "features": 2, "quiesce": null})
        );
    }

    #[test]
    fn info_lists_what_the_kernel_reports() {
        let vmstat = abi::ISOL_F_QUIESCE_VMSTATS;
        assert_eq!(
            info_text(abi::ISOL_F_QUIESCE, || Ok(vmstat)).unwrap(),
            "quiesce: vmstat_sync \n"
        );
        // The quiesce feature without any quiesce bit this tool knows.
        assert_eq!(
            info_text(abi::ISOL_F_QUIESCE, || Ok(2)).unwrap(),
            "quiesce: \n"
        );
        // No quiesce feature: nothing to list, and FEAT_GET(ISOL_F_QUIESCE) is not issued.
        let text = info_text(2, || -> Result<u64, Error> {
            panic!("FEAT_GET(ISOL_F_QUIESCE) without the feature")
        });
        assert_eq!(text.unwrap(), "");
        let e = info_text(abi::ISOL_F_QUIESCE, || {
            Err(Error::Prctl {
                op: "PR_ISOL_FEAT_GET(ISOL_F_QUIESCE)".into(),
                errno: nix::errno::Errno::EOPNOTSUPP,
            })
        })
        .unwrap_err();
        assert_eq!(e.errno(), Some(libc::EOPNOTSUPP));
    }

    #[test]
    fn pid_view_without_the_interface_says_so() {
        let files: Vec<(String, String)> = vec![
            ("/proc/7/task/7/stat".into(), stat(7, "sleep", 0, 0)),
            (
                "/proc/7/task/7/status".into(),
                "Cpus_allowed_list:\t0-1\n".into(),
            ),
        ];
        let d = tree(&files);
        let (text, notes) = pid_view(&SysRoot::new(d.path()), 7).unwrap();
        let row: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(
            row,
            ["7", "sleep", "n/a", "n/a", "n/a", "0-1", "SCHED_OTHER"]
        );
        assert_eq!(
            notes,
            ["task isolation interface not available: the kernel has no /proc/7/task_isolation"]
        );
        assert_eq!(
            pid_view(&SysRoot::new(d.path()), 8).unwrap_err(),
            "pid 8: no such process"
        );
        // Only ENOENT means "no such process"; other errors say what they are.
        std::fs::create_dir_all(d.path().join("proc/9/task/x")).unwrap();
        let e = pid_view(&SysRoot::new(d.path()), 9).unwrap_err();
        assert!(
            e.contains("/proc/9/task") && e.contains("entry is not a thread id"),
            "{e}"
        );
    }
}
