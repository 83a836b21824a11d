//! The real chisol binary on an emulated patched kernel (isol-emu): the original tool's uses
//! (`-q vmstat_sync -I conf` with an oslat-like worker, `-a -I active` with an unmodified
//! program, `-i`), `-p` on a running process, and every error path, including errors the
//! kernel returns (injected with `isol-emu --fail`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const ACTIVE: &str =
    "Configured state: quiesce \nActive state: quiesce \nQuiescing: vmstat_sync \n";
const CONFIGURED: &str =
    "Configured state: quiesce \nActive state: none \nQuiescing: vmstat_sync \n";
const NONE: &str = "Configured state: none \nActive state: none \nQuiescing: none \n";

/// A binary of the workspace, next to isol-emu in the target directory.
fn bin(name: &str) -> PathBuf {
    let emu = Path::new(env!("CARGO_BIN_EXE_isol-emu"));
    let p = emu.with_file_name(name);
    assert!(
        p.exists(),
        "{} is missing: build the workspace first (cargo build --workspace --bins)",
        p.display()
    );
    p
}

struct Run {
    out: Output,
    log: Vec<Value>,
}

impl Run {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    fn code(&self) -> Option<i32> {
        self.out.status.code()
    }
    /// The task-isolation prctls chisol issued before its exec, as (option, arg2).
    fn isol_calls_before_exec(&self, pid: i64) -> Vec<(i64, i64)> {
        let mut v = Vec::new();
        let mut chisol_started = false;
        for e in &self.log {
            if e["ev"] == "exec" && e["tid"] == pid {
                if chisol_started {
                    break;
                }
                chisol_started = e["exe"].as_str().unwrap_or("").ends_with("/chisol");
                continue;
            }
            if chisol_started
                && e["ev"] == "prctl"
                && e["tid"] == pid
                && (63..=67).contains(&e["option"].as_i64().unwrap())
            {
                v.push((
                    e["option"].as_i64().unwrap(),
                    e["args"][0].as_i64().unwrap(),
                ));
            }
        }
        v
    }
    fn events(&self, ev: &str) -> Vec<&Value> {
        self.log.iter().filter(|e| e["ev"] == ev).collect()
    }
}

/// Run `chisol ARGS...` under the emulator with extra emulator options.
fn emu(emu_opts: &[&str], args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.jsonl");
    let out = Command::new(bin("isol-emu"))
        .args(["--log", log.to_str().unwrap()])
        .args(emu_opts)
        .arg("--")
        .arg(bin("chisol"))
        .args(args)
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let log = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    Run { out, log }
}

fn chisol_pid(r: &Run) -> i64 {
    r.events("start")[0]["tid"].as_i64().unwrap()
}

#[test]
fn conf_inheritance_lets_oslat_like_threads_activate_themselves() {
    let worker = bin("isol-worker");
    let r = emu(
        &[],
        &[
            "-q",
            "vmstat_sync",
            "-I",
            "conf",
            worker.to_str().unwrap(),
            "3",
            "5",
        ],
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr());
    // The original tool's order: configure quiesce, then inheritance (no -a), then exec.
    let pid = chisol_pid(&r);
    assert_eq!(
        r.isol_calls_before_exec(pid),
        vec![(63, 0), (63, 1), (65, 1), (65, 2)],
        "FEAT_GET x2 (support check), CFG_SET quiesce, CFG_SET inherit"
    );
    let lines: Vec<Value> = r
        .stdout()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4, "{}", r.stdout());
    assert_eq!(
        lines[0]["state"], CONFIGURED,
        "the workload is configured, not active"
    );
    for t in &lines[1..] {
        assert_eq!(t["configured"], 1, "{t}");
        assert_eq!(t["before"], CONFIGURED, "{t}");
        assert_eq!(t["activate_error"], Value::Null, "{t}");
        assert_eq!(
            t["during"], ACTIVE,
            "a measuring thread activates itself: {t}"
        );
        assert_eq!(
            t["after"], CONFIGURED,
            "and deactivates after its loop: {t}"
        );
    }
}

#[test]
fn active_inheritance_isolates_an_unmodified_program_and_its_children() {
    let r = emu(
        &[],
        &[
            "-q",
            "vmstat_sync",
            "-a",
            "-I",
            "active",
            "sh",
            "-c",
            "cat /proc/$$/task_isolation; cat /proc/self/task_isolation",
        ],
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr());
    assert_eq!(
        r.stdout(),
        format!("{ACTIVE}{ACTIVE}"),
        "shell and its child cat"
    );
    let pid = chisol_pid(&r);
    let calls = r.isol_calls_before_exec(pid);
    let opts: Vec<i64> = calls.iter().map(|c| c.0).collect();
    assert_eq!(
        opts,
        vec![63, 63, 65, 67, 65],
        "quiesce, activate, inherit, then exec"
    );
    assert_eq!(
        (calls[2].1, calls[4].1),
        (1, 2),
        "I_CFG_FEAT then I_CFG_INHERIT"
    );
    // No prctl reached the real kernel: every 63..67 was emulated.
    assert!(r
        .events("prctl")
        .iter()
        .filter(|e| (63..=67).contains(&e["option"].as_i64().unwrap()))
        .all(|e| e["emulated"] == true));
}

#[test]
fn conf_only_without_activation_leaves_children_inactive() {
    let r = emu(
        &[],
        &[
            "-q",
            "vmstat_sync",
            "-I",
            "conf",
            "sh",
            "-c",
            "cat /proc/self/task_isolation",
        ],
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr());
    assert_eq!(r.stdout(), CONFIGURED);
    let r = emu(
        &[],
        &[
            "-q",
            "vmstat_sync",
            "-a",
            "sh",
            "-c",
            "cat /proc/$$/task_isolation; cat /proc/self/task_isolation",
        ],
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr());
    assert_eq!(
        r.stdout(),
        format!("{ACTIVE}{NONE}"),
        "without -I nothing is inherited"
    );
}

#[test]
fn info_prints_the_original_format() {
    let r = emu(&[], &["-i"]);
    assert_eq!(r.code(), Some(0), "{}", r.stderr());
    assert_eq!(r.stdout(), "quiesce: vmstat_sync \n");
}

#[test]
fn pid_view_shows_every_thread() {
    let worker = bin("isol-worker");
    let chisol = bin("chisol");
    // A process whose 2 measuring threads stay active for 5 s; chisol -p looks once all
    // three threads exist and have activated (polling, not a fixed sleep, so a loaded
    // machine cannot make it flaky).
    let script = format!(
        "{c} -q vmstat_sync -I conf {w} 2 5000 >/dev/null & p=$!; \
         for i in $(seq 200); do \
           a=0; for t in $(ls /proc/$p/task); do \
             grep -q 'Active state: quiesce' /proc/$t/task_isolation 2>/dev/null && a=$((a+1)); done; \
           [ $a -ge 2 ] && break; sleep 0.05; done; \
         {c} -p $p; kill $p; wait",
        c = chisol.display(),
        w = worker.display()
    );
    let r = emu(&[], &["sh", "-c", &script]);
    let out = r.stdout();
    let rows: Vec<Vec<&str>> = out
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows.len(),
        3,
        "main thread and two measuring threads:\n{out}"
    );
    assert_eq!(
        &rows[0][1..5],
        &["isol-worker", "quiesce", "none", "vmstat_sync"],
        "{out}"
    );
    for t in &rows[1..] {
        assert_eq!(&t[2..5], &["quiesce", "quiesce", "vmstat_sync"], "{out}");
    }
}

#[test]
fn kernel_errors_stop_before_exec_and_name_the_call() {
    for (fail, args, want) in [
        (
            "65=EOPNOTSUPP",
            vec!["-q", "vmstat_sync"],
            "failed to configure task isolation quiesce vmstat_sync: prctl PR_ISOL_CFG_SET(I_CFG_FEAT, ISOL_F_QUIESCE, QUIESCE_CONTROL, quiesce_mask=vmstat_sync, oneshot=none) failed with EOPNOTSUPP: Operation not supported",
        ),
        (
            "67=ENOMEM",
            vec!["-q", "vmstat_sync", "-a"],
            "failed to activate task isolation: prctl PR_ISOL_ACTIVATE_SET(0x1) failed with ENOMEM: Cannot allocate memory",
        ),
        (
            "65:2=EINVAL",
            vec!["-q", "vmstat_sync", "-I", "active"],
            "failed to set task isolation inheritance to active: prctl PR_ISOL_CFG_SET(I_CFG_INHERIT, active) failed with EINVAL: Invalid argument",
        ),
        (
            "63=EOPNOTSUPP",
            vec!["-q", "vmstat_sync"],
            "prctl PR_ISOL_FEAT_GET(0) failed with EOPNOTSUPP: Operation not supported",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("started");
        let mut a = args.clone();
        a.extend(["touch", marker.to_str().unwrap()]);
        let r = emu(&["--fail", fail], &a);
        assert_eq!(r.code(), Some(1), "{fail}: {}", r.stderr());
        assert_eq!(r.stderr(), format!("chisol: {want}\n"), "{fail}");
        assert!(!marker.exists(), "{fail}: the command was started");
        assert_eq!(r.events("exec").len(), 1, "{fail}: only chisol itself was executed");
    }
    let r = emu(&["--fail", "63=EOPNOTSUPP"], &["-i"]);
    assert_eq!(r.code(), Some(1));
    assert!(
        r.stderr().contains("PR_ISOL_FEAT_GET(0) failed"),
        "{}",
        r.stderr()
    );
}

#[test]
fn usage_errors_issue_no_prctl() {
    for (args, want) in [
        (vec!["-q", "tlb", "true"], "unknown quiesce feature \"tlb\""),
        (vec!["-a", "true"], "--activate needs --quiesce"),
        (vec!["-I", "all", "true"], "unknown inheritance \"all\""),
        (
            vec!["-q", "vmstat_sync", "no-such-cmd-taskisol"],
            "failed to execute no-such-cmd-taskisol",
        ),
    ] {
        let r = emu(&[], &args);
        assert_ne!(r.code(), Some(0), "{args:?}");
        assert!(r.stderr().contains(want), "{args:?}: {}", r.stderr());
        if args[0] != "-q" || args[1] != "vmstat_sync" {
            assert!(
                r.events("prctl")
                    .iter()
                    .all(|e| !(63..=67).contains(&e["option"].as_i64().unwrap())),
                "{args:?}: a rejected request issued a task-isolation prctl"
            );
        }
    }
    let r = emu(&[], &["-q", "vmstat_sync", "no-such-cmd-taskisol"]);
    assert_eq!(r.code(), Some(127));
}

#[test]
fn a_patched_kernel_is_used_even_with_native_fallback() {
    let r = emu(
        &[],
        &[
            "-q",
            "vmstat_sync",
            "-a",
            "--fallback=native",
            "cat",
            "/proc/self/task_isolation",
        ],
    );
    assert_eq!(r.code(), Some(0), "{}", r.stderr());
    assert_eq!(r.stdout(), ACTIVE);
    assert_eq!(r.stderr(), "", "no fallback note when the interface exists");
}

/// On a stock kernel (this host) chisol must never issue prctl 63..67, whatever it is asked:
/// mainline gives those numbers to PR_SME_*, PR_SET_MDWE/PR_GET_MDWE and PR_SET_MEMORY_MERGE.
/// The tracer records every prctl of every task; PR_SET_THP_DISABLE (41) from --no-thp shows
/// that it does see chisol's prctls.
/// The absence of prctl 63..67 in a --trace-only log means something only if the tracer saw
/// chisol at all: the log starts with chisol, chisol's exec is recorded, its exit counts at
/// least one traced syscall (its own execve), and the log ends with chisol's exit status.
fn assert_tracer_saw_chisol(r: &Run, args: &[&str]) {
    let start = r.events("start");
    assert_eq!(start.len(), 1, "{args:?}: no start event in {:?}", r.log);
    let pid = &start[0]["tid"];
    assert!(
        r.events("exec")
            .iter()
            .any(|e| &e["tid"] == pid && e["exe"].as_str().is_some_and(|x| x.ends_with("/chisol"))),
        "{args:?}: no exec of chisol in {:?}",
        r.log
    );
    let exit = r.events("exit");
    let exit = exit
        .iter()
        .find(|e| &e["tid"] == pid)
        .unwrap_or_else(|| panic!("{args:?}: no exit of chisol in {:?}", r.log));
    assert!(
        exit["syscalls"].as_u64().is_some_and(|n| n > 0),
        "{args:?}: the tracer counted no syscall of chisol: {exit}"
    );
    let end = r.events("end");
    assert_eq!(
        end.first().and_then(|e| e["status"].as_i64()),
        r.code().map(i64::from),
        "{args:?}: the log does not end with chisol's status: {:?}",
        r.log
    );
}

#[test]
fn stock_kernel_sees_no_task_isolation_prctl() {
    assert!(
        !Path::new("/proc/self/task_isolation").exists(),
        "this test needs a stock host kernel"
    );
    let cases: Vec<Vec<&str>> = vec![
        vec!["-q", "vmstat_sync", "--no-thp", "true"],
        vec![
            "-q",
            "vmstat_sync",
            "-a",
            "-I",
            "active",
            "--no-thp",
            "true",
        ],
        vec!["-I", "conf", "--no-thp", "true"],
        vec![
            "-q",
            "vmstat_sync",
            "--fallback=native",
            "-c",
            "0",
            "--no-thp",
            "true",
        ],
        vec!["-i"],
        vec!["-p", "1"],
        vec!["--no-thp", "-c", "0", "true"],
    ];
    for args in cases {
        let r = emu(&["--trace-only"], &args);
        assert_tracer_saw_chisol(&r, &args);
        let options: Vec<i64> = r
            .events("prctl")
            .iter()
            .map(|e| e["option"].as_i64().unwrap())
            .collect();
        assert!(
            options.iter().all(|o| !(63..=67).contains(o)),
            "{args:?} issued {options:?}"
        );
        if args.contains(&"--no-thp") && args.len() == 4 && args[0] == "--no-thp" {
            assert!(
                options.contains(&41),
                "{args:?}: the tracer saw {options:?}"
            );
            assert_eq!(r.code(), Some(0), "{}", r.stderr());
        }
        match args[0] {
            "-i" => assert_eq!(r.code(), Some(1), "-i on a stock kernel: {}", r.stderr()),
            "-p" => assert_eq!(r.code(), Some(0), "-p on a stock kernel: {}", r.stderr()),
            _ => {}
        }
        if args[0] == "-q" || args[0] == "-I" {
            assert_eq!(
                r.code(),
                Some(1),
                "{args:?} must be refused: {}",
                r.stderr()
            );
            assert!(
                !options.contains(&41),
                "{args:?}: refused before any change"
            );
        }
    }
}

/// A /proc that is not procfs (a tmpfs or a bind mount, as some containers have) says nothing
/// about the running kernel: a well-formed `self/task_isolation` on it must not unlock prctl
/// 63..67, which on this stock kernel mean PR_SME_*, PR_SET_MDWE and PR_SET_MEMORY_MERGE.
/// chisol runs in a mount namespace of its own (unshare(1), util-linux; the host's /proc is
/// untouched) with a tmpfs on /proc, under `isol-emu --trace-only`, which records every prctl
/// of every task on the real kernel.
#[test]
fn a_fake_proc_does_not_unlock_the_prctls() {
    assert!(
        !Path::new("/proc/self/task_isolation").exists(),
        "this test needs a stock host kernel"
    );
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test mounts a tmpfs in a mount namespace of its own: run it as root (CI does)"
    );
    let setup = "mount -t tmpfs taskisol-fake-proc /proc && mkdir /proc/self && \
                 printf 'Configured state: none \\nActive state: none \\nQuiescing: none \\n' \
                 > /proc/self/task_isolation && exec \"$@\"";
    let chisol = bin("chisol");
    for args in [
        &["-i"][..],
        &["-q", "vmstat_sync", "-a", "-I", "active", "true"],
        &["-I", "conf", "true"],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log.jsonl");
        let out = Command::new(bin("isol-emu"))
            .args(["--trace-only", "--log", log.to_str().unwrap(), "--"])
            .args(["unshare", "-m", "--propagation", "private"])
            .args(["sh", "-c", setup, "sh"])
            .arg(&chisol)
            .args(args)
            .output()
            .unwrap();
        let text = std::fs::read_to_string(&log).unwrap();
        let r = Run {
            out,
            log: text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect(),
        };
        // The tracer saw chisol start (its execve stop), so the absence of prctls below is
        // not the absence of a trace.
        assert!(
            r.events("exec")
                .iter()
                .any(|e| e["exe"].as_str().is_some_and(|x| x.ends_with("/chisol"))),
            "{args:?}: the tracer never saw chisol: {text}"
        );
        let options: Vec<i64> = r
            .events("prctl")
            .iter()
            .map(|e| e["option"].as_i64().unwrap())
            .collect();
        assert!(
            options.iter().all(|o| !(63..=67).contains(o)),
            "{args:?} issued {options:?}: {}",
            r.stderr()
        );
        assert_eq!(r.code(), Some(1), "{args:?}: {}", r.stderr());
        assert!(
            r.stderr()
                .contains("/proc is not a procfs mount (file system magic 0x1021994)"),
            "{args:?}: {}",
            r.stderr()
        );
    }
}
