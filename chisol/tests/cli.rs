//! chisol end to end on the host kernel (a stock kernel: the emulated patched kernel is
//! exercised in tests/tests/chisol_emu.rs, real 6.1 and 6.12-rt kernels in tests/tests/qemu.rs).
//! Only the started child's own settings change; nothing machine-wide is touched.

use std::path::Path;
use std::process::{Command, Output};

fn chisol(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_chisol"))
        .args(args)
        .output()
        .expect("run chisol")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn host_is_stock() {
    assert!(
        !Path::new("/proc/self/task_isolation").exists(),
        "these tests expect a stock host kernel without the task-isolation interface"
    );
}

/// Runs chisol with `args` followed by a command that would create a marker file, and
/// asserts it failed with exit 1, said `want` and did not start the command.
fn refuses(args: &[&str], want: &str) {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started");
    let mut all: Vec<&str> = args.to_vec();
    let m = marker.to_str().unwrap();
    all.extend_from_slice(&["touch", m]);
    let o = chisol(&all);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
    assert!(stderr(&o).starts_with("chisol: "), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(want),
        "{args:?}: want {want:?} in {:?}",
        stderr(&o)
    );
    assert!(!marker.exists(), "{args:?}: the command was started");
}

#[test]
fn exit_codes_follow_util_linux() {
    let o = chisol(&["no-such-command-taskisol"]);
    assert_eq!(o.status.code(), Some(127));
    assert_eq!(
        stderr(&o),
        "chisol: failed to execute no-such-command-taskisol: No such file or directory\n"
    );
    // A file without execute permission: EACCES, even for root.
    let dir = tempfile::tempdir().unwrap();
    let noexec = dir.path().join("data");
    std::fs::write(&noexec, "not a program\n").unwrap();
    let o = chisol(&[noexec.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(126), "{}", stderr(&o));
    assert!(stderr(&o).contains("Permission denied"), "{}", stderr(&o));
    let o = chisol(&["sh", "-c", "exit 7"]);
    assert_eq!(o.status.code(), Some(7), "the command's status is chisol's");
    let o = chisol(&[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no command specified"));
    let o = chisol(&["--no-such-option", "true"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "chisol: unexpected argument '--no-such-option' found\nTry 'chisol --help' for more information.\n"
    );
    let o = chisol(&["-c", "0", "--isolated", "true"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
    let o = chisol(&["-V"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        stdout(&o),
        format!("chisol {}\n", env!("CARGO_PKG_VERSION"))
    );
    let o = chisol(&["--completions", "bash"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("complete -F _chisol"), "{}", stdout(&o));
    // chisol(1)'s EXIT STATUS lists exactly the codes met above, besides the command's own.
    let man =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../man/chisol.1")).unwrap();
    let section = man.split("\n.SH EXIT STATUS\n").nth(1).unwrap();
    let section = section.split("\n.SH ").next().unwrap();
    let lines: Vec<&str> = section.lines().collect();
    let documented: std::collections::BTreeSet<i32> = lines
        .windows(2)
        .filter(|w| w[0] == ".TP")
        .map(|w| w[1].strip_prefix(".B ").unwrap().parse().unwrap())
        .collect();
    assert_eq!(documented, [0, 1, 126, 127].into());
}

#[test]
fn options_after_the_command_belong_to_it() {
    let o = chisol(&[
        "-c",
        "0",
        "sh",
        "-c",
        "echo \"$@\"",
        "x",
        "-f",
        "1",
        "-q",
        "y",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "-f 1 -q y\n");
}

#[test]
fn pins_and_disables_thp_for_the_command() {
    let o = chisol(&[
        "-c",
        "0",
        "--no-thp",
        "grep",
        "-E",
        "^(Cpus_allowed_list|THP_enabled)",
        "/proc/self/status",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // THP_enabled comes before Cpus_allowed_list in /proc/<pid>/status.
    assert_eq!(stdout(&o), "THP_enabled:\t0\nCpus_allowed_list:\t0\n");
}

#[test]
fn bad_requests_start_nothing() {
    refuses(&["-c", "4095"], "CPUs 4095 are not available");
    refuses(&["-c", "0-"], "invalid CPU list \"0-\"");
    refuses(
        &["-f", "0"],
        "invalid value '0' for '--fifo <PRIO>': 0 is not in 1..=99",
    );
    refuses(&["-r", "100"], "100 is not in 1..=99");
    refuses(&["-f", "4294967295"], "is not in 1..=99");
    refuses(&["-c", "0", "-i"], "cannot be used with");
    refuses(&["-p", "1", "-q", "vmstat_sync"], "cannot be used with");
    refuses(&["-a"], "--activate needs --quiesce");
    refuses(&["-q", "tlb_sync"], "unknown quiesce feature \"tlb_sync\"");
    refuses(&["-I", "everything"], "unknown inheritance \"everything\"");
    refuses(
        &["--cgroup", "/nonexistent/cg"],
        "/nonexistent/cg is not a cgroup v2 directory",
    );
}

#[test]
fn stock_kernel_refuses_task_isolation_and_starts_nothing() {
    host_is_stock();
    for args in [
        vec!["-q", "vmstat_sync"],
        vec!["-q", "vmstat_sync", "-a", "-I", "active"],
        vec!["-I", "conf"],
    ] {
        refuses(
            &args,
            "task isolation interface not available: the kernel has no /proc/self/task_isolation",
        );
    }
    let o = chisol(&["-i"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no /proc/self/task_isolation"),
        "{}",
        stderr(&o)
    );
    assert_eq!(stdout(&o), "");
}

#[test]
fn native_fallback_needs_protected_cpus() {
    host_is_stock();
    // The host isolates no CPU, so the kernel's own protection cannot apply.
    refuses(
        &["-q", "vmstat_sync", "--fallback=native", "-c", "0"],
        "--fallback=native: no native vmstat protection: CPUs 0 are not isolcpus domain or nohz_full CPUs",
    );
}

#[test]
fn pid_view_works_on_a_stock_kernel() {
    host_is_stock();
    let mut child = Command::new("sleep").arg("5").spawn().unwrap();
    let pid = child.id().to_string();
    let o = chisol(&["-p", &pid]);
    child.kill().ok();
    child.wait().ok();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let mut lines = out.lines();
    assert!(lines.next().unwrap().starts_with("TID      COMM"), "{out}");
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        &row[..5],
        &[pid.as_str(), "sleep", "n/a", "n/a", "n/a"],
        "{out}"
    );
    assert_eq!(row[6], "SCHED_OTHER");
    assert!(stderr(&o).contains("task isolation interface not available"));
    let o = chisol(&["-p", "999999999"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o), "chisol: pid 999999999: no such process\n");
}

/// `-p` only shows: combined with an option that changes a setting it would exit 0 and
/// leave the user believing the setting was applied. Without a trailing command, so that only
/// the option itself can conflict.
#[test]
fn pid_view_refuses_every_setting_option() {
    let me = std::process::id().to_string();
    for opt in [
        &["-q", "vmstat_sync"][..],
        &["-a"],
        &["-I", "conf"],
        &["-c", "0"],
        &["--isolated"],
        &["-f", "1"],
        &["-r", "1"],
        &["--no-thp"],
        &["--cgroup", "/sys/fs/cgroup"],
        &["--fallback", "none"],
        &["--fallback=native"],
    ] {
        let mut args = vec!["-p", me.as_str()];
        args.extend_from_slice(opt);
        let o = chisol(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("cannot be used with"),
            "{args:?}: {}",
            stderr(&o)
        );
        assert_eq!(stdout(&o), "", "{args:?}: nothing is shown");
    }
    // -v changes nothing: allowed.
    let o = chisol(&["-p", &me, "-v"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn a_relative_cgroup_path_is_relative_to_the_current_directory() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_chisol"))
        .args(["--cgroup", "sub", "true"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let want = format!(
        "{} is not a cgroup v2 directory",
        dir.path().join("sub").display()
    );
    assert!(stderr(&o).contains(&want), "{}", stderr(&o));
}

#[test]
fn arguments_are_bytes_not_text() {
    use std::os::unix::ffi::OsStrExt;
    let arg = std::ffi::OsStr::from_bytes(b"\xff\xfe-not-utf8");
    let o = Command::new(env!("CARGO_BIN_EXE_chisol"))
        .args(["-c", "0", "printf", "%s"])
        .arg(arg)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(o.stdout, b"\xff\xfe-not-utf8");
}

#[test]
fn a_write_error_on_stdout_is_a_failure() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_chisol"))
        .args(["-p", &std::process::id().to_string()])
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("chisol: write error: No space left on device"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn pins_to_several_cpus() {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let o = chisol(&[
        "-c",
        online.trim(),
        "grep",
        "Cpus_allowed_list",
        "/proc/self/status",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!("Cpus_allowed_list:\t{}\n", online.trim())
    );
    let o = chisol(&[
        "-c",
        "0-1:2",
        "grep",
        "Cpus_allowed_list",
        "/proc/self/status",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "Cpus_allowed_list:\t0\n",
        "taskset's stride syntax"
    );
}

/// `(rt_priority, policy)`: fields 40 and 41 of a `/proc/<pid>/stat` line.
fn rt_priority_and_policy(stat: &str) -> (String, String) {
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    // fields[0] is field 3 (state).
    (fields[37].to_string(), fields[38].to_string())
}

/// The policy and priority of `-f`/`-r` reach the command, on this host (only the child's
/// scheduling changes; `cat` runs for a moment).
#[test]
fn fifo_and_rr_reach_the_command_with_their_priority() {
    for (args, want) in [
        (&["-f", "7"][..], ("7", "1")),
        (&["-r", "3"], ("3", "2")),
        (&["--fifo", "99"], ("99", "1")),
        (&["--rr", "1"], ("1", "2")),
    ] {
        let mut all = args.to_vec();
        all.extend_from_slice(&["cat", "/proc/self/stat"]);
        let o = chisol(&all);
        if !nix::unistd::geteuid().is_root() {
            assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
            assert!(stderr(&o).contains("needs CAP_SYS_NICE"), "{}", stderr(&o));
            continue;
        }
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let (prio, policy) = rt_priority_and_policy(&stdout(&o));
        assert_eq!((prio.as_str(), policy.as_str()), want, "{args:?}");
    }
    let o = chisol(&["cat", "/proc/self/stat"]);
    assert_eq!(
        rt_priority_and_policy(&stdout(&o)),
        ("0".to_string(), "0".to_string()),
        "without -f/-r the command keeps SCHED_OTHER"
    );
}

/// Without CAP_SYS_NICE and with RLIMIT_RTPRIO 0, chisol refuses a real-time policy before
/// starting anything. As root, the child is started with CAP_SYS_NICE out of its bounding set
/// (setpriv, util-linux). (A limit above 0 cannot be set where CAP_SYS_RESOURCE is missing,
/// as in CI's container: the RLIMIT_RTPRIO comparison is tested in libtaskisol's sched.rs.)
#[test]
fn without_cap_sys_nice_rt_policies_are_refused() {
    let mut cmd = Command::new("prlimit");
    cmd.arg("--rtprio=0");
    if nix::unistd::geteuid().is_root() {
        cmd.args(["setpriv", "--bounding-set", "-sys_nice", "--"]);
    }
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started");
    for (opt, policy) in [("-f", "SCHED_FIFO"), ("-r", "SCHED_RR")] {
        let o = Command::new(cmd.get_program())
            .args(cmd.get_args())
            .arg(env!("CARGO_BIN_EXE_chisol"))
            .args([opt, "1", "touch", marker.to_str().unwrap()])
            .output()
            .expect("run prlimit (util-linux)");
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert_eq!(
            stderr(&o),
            format!("chisol: setting {policy} priority 1 needs CAP_SYS_NICE (or RLIMIT_RTPRIO >= 1); run as root or grant the capability\n")
        );
        assert!(!marker.exists());
    }
}
