//! `isold run` and `isold status` on a tree captured from the 6.12-rt guest before any change
//! (tests/fixtures/debian-6.12-rt-isold): with --root there are no kernel events, so what is
//! exercised is the start, the scan thread, the /proc scan of tasks, the signals, the status
//! file and the restore. The event paths are proven in QEMU (tests/tests/qemu_debian/service.rs).

mod common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::copy_dir;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/debian-6.12-rt-isold")
}

struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    config: PathBuf,
}

fn tree(config: &str) -> Tree {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    copy_dir(&fixture(), &root);
    let config_path = dir.path().join("isold.toml");
    std::fs::write(&config_path, config).unwrap();
    Tree {
        _dir: dir,
        root,
        config: config_path,
    }
}

/// The daemon, killed if a test fails before stopping it (a panicking test must not leave
/// it running).
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Running {
    fn id(&self) -> u32 {
        self.0.as_ref().expect("running").id()
    }
}

fn start(t: &Tree, extra: &[&str]) -> Running {
    Running(Some(start_child(t, extra)))
}

fn start_child(t: &Tree, extra: &[&str]) -> Child {
    let mut args = vec!["--interval", "0.1", "--task-interval", "0.2"];
    args.extend(extra);
    start_with(t, &args)
}

/// `isold run` with exactly these options.
fn start_with(t: &Tree, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_isold"))
        .arg("--root")
        .arg(&t.root)
        .arg("--config")
        .arg(&t.config)
        .arg("run")
        .args(args)
        // Outside systemd, as a test runs it: a signal is a plain stop (a CI job's service
        // would lend it its own unit's $INVOCATION_ID).
        .env_remove("INVOCATION_ID")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn read(t: &Tree, p: &str) -> String {
    std::fs::read_to_string(t.root.join(p.trim_start_matches('/'))).unwrap()
}

fn write(t: &Tree, p: &str, v: &str) {
    std::fs::write(t.root.join(p.trim_start_matches('/')), v).unwrap();
}

/// Wait until `cond` holds (20 s at most: what a daemon does within a check or two here may
/// wait seconds on a loaded machine's disk, with every state write's fsync).
fn eventually(what: &str, cond: impl Fn() -> bool) {
    eventually_within(what, Duration::from_secs(20), cond)
}

fn eventually_within(what: &str, within: Duration, cond: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < within, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn status_json(t: &Tree) -> serde_json::Value {
    let (_, out, _) = common::isold_at(Some(&t.root), &["status", "--json"]);
    serde_json::from_str(&out).unwrap()
}

fn signal(c: &Running, sig: i32) {
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(c.id() as i32, sig) }, 0);
}

fn stop(mut c: Running) -> (i32, String) {
    signal(&c, libc::SIGTERM);
    let out = c.0.take().expect("running").wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// kill -9 of the daemon: what it logged.
fn kill9(mut c: Running) -> String {
    let mut child = c.0.take().expect("running");
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every file of the tree equals the fixture's (the state directory apart).
fn assert_restored(t: &Tree) {
    fn walk(a: &Path, b: &Path, rel: &Path, diffs: &mut Vec<String>) {
        for e in std::fs::read_dir(a.join(rel)).unwrap() {
            let e = e.unwrap();
            let r = rel.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                walk(a, b, &r, diffs);
            } else if std::fs::read(a.join(&r)).ok() != std::fs::read(b.join(&r)).ok() {
                diffs.push(r.display().to_string());
            }
        }
    }
    let mut diffs = Vec::new();
    walk(&fixture(), &t.root, Path::new(""), &mut diffs);
    assert!(diffs.is_empty(), "not restored: {diffs:?}");
}

const STAT_INTERVAL: &str = "/proc/sys/vm/stat_interval";
const IRQ4: &str = "/proc/irq/4/smp_affinity_list";

fn running(t: &Tree) -> bool {
    status_json(t)["running"] == true
}

const RESTORE: &str = "isolated_cpus = \"2-3\"\non_stop = \"restore\"\n";

#[test]
fn run_applies_corrects_drift_reports_and_restores_on_sigterm() {
    let t = tree(RESTORE);
    assert_eq!(read(&t, STAT_INTERVAL).trim(), "1");
    let c = start(&t, &[]);
    eventually("applied", || read(&t, STAT_INTERVAL).trim() == "10");
    eventually("status written", || running(&t));
    let st = status_json(&t)["status"].clone();
    assert_eq!(st["isolated"], "2-3");
    assert_eq!(st["housekeeping"], "0-1");
    assert_eq!(st["state"], "running");
    assert!(st["task_events"]
        .as_str()
        .unwrap()
        .starts_with("periodic scans"));
    assert_eq!(st["corrections"], serde_json::json!({}));

    // Drift by hand: a sysctl and an IRQ, put back by the scan thread.
    write(&t, STAT_INTERVAL, "1\n");
    write(&t, IRQ4, "3\n");
    eventually("sysctl put back", || read(&t, STAT_INTERVAL).trim() == "10");
    eventually("IRQ put back", || read(&t, IRQ4).trim() == "0-1");
    eventually("corrections counted", || {
        let c = &status_json(&t)["status"]["corrections"];
        c["sysctl"] == 1 && c["irq_affinity"] == 1
    });
    let last = status_json(&t)["status"]["last_correction"].clone();
    assert!(
        last["label"].as_str().unwrap().contains("vm.stat_interval")
            || last["label"].as_str().unwrap().contains("IRQ 4")
    );

    // What each service costs: its threads' CPU time, by name.
    eventually("services' CPU time", || {
        let st = status_json(&t)["status"].clone();
        let services = st["services"].as_array().cloned().unwrap_or_default();
        let named = |n: &str| {
            services
                .iter()
                .any(|s| s["name"] == n && s["threads"].as_u64() >= Some(1))
        };
        named("events and tasks")
            && named("drift watch")
            && st["cpu_s"].as_f64() > Some(0.0)
            && st["cpu_window_s"].as_f64() > Some(0.0)
    });

    // The human form.
    let (code, text, _) = common::isold_at(Some(&t.root), &["status"]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("corrections: 2 (irq_affinity 1, sysctl 1)"),
        "{text}"
    );
    let cpu = text
        .lines()
        .find(|l| l.starts_with("  CPU time: "))
        .unwrap_or_else(|| panic!("no CPU time line: {text}"));
    assert!(
        cpu.contains(" ms/s over the last ")
            && cpu.contains(" s since the start): ")
            && cpu.contains("drift watch "),
        "{cpu}"
    );

    let (code, log) = stop(c);
    assert_eq!(code, 0, "{log}");
    // The tree's files are written as std::fs::write does, truncated and then written: a
    // scan that reads between the two sees the empty file (a kernel's value changes whole).
    // Either way the drift is named and put back.
    let corrected = |what: &str, from: &str, to: &str| {
        log.contains(&format!("corrected {what}: changed: {from} -> {to}"))
            || log.contains(&format!("corrected {what}: changed:  -> {to}"))
    };
    assert!(corrected("sysctl vm.stat_interval", "1", "10"), "{log}");
    assert!(corrected("IRQ 4 (ttyS0)", "3", "0-1"), "{log}");
    assert!(
        log.contains("SIGTERM: a stop, and on_stop = \"restore\": restoring the original values"),
        "{log}"
    );
    assert_restored(&t);
    // Not running any more: status says so, exit 3.
    let (code, text, _) = common::isold_at(Some(&t.root), &["status"]);
    assert_eq!(code, 3);
    assert!(text.starts_with("isold run is not running"), "{text}");
}

const IRQBALANCE_DEBIAN: &str = include_str!("data/irqbalance-1.9.2-1-debian12");

/// The files isold edits are its administrator's too. While the daemon runs, their own lines
/// in irqbalance's defaults, systemd's drop-in and the KVM options file are no drift and are
/// never written over; isold's own line changed by hand is put back, in the file as the
/// administrator left it; the stop's restore takes out isold's lines alone.
#[test]
fn the_administrators_lines_survive_the_running_daemon() {
    let t = tree(&format!("{RESTORE}[items]\nsystemd_cpuaffinity = true\n"));
    std::fs::create_dir_all(t.root.join("etc/default")).unwrap();
    std::fs::create_dir_all(t.root.join("etc/systemd/system.conf.d")).unwrap();
    std::fs::create_dir_all(t.root.join("sys/module/kvm/parameters")).unwrap();
    write(&t, "/etc/default/irqbalance", IRQBALANCE_DEBIAN);
    write(&t, "/sys/module/kvm/parameters/nx_huge_pages", "auto\n");
    const IRQB: &str = "/etc/default/irqbalance";
    const DROP_IN: &str = "/etc/systemd/system.conf.d/isold-cpuaffinity.conf";
    const KVM: &str = "/etc/modprobe.d/isold-kvm.conf";
    let c = start(&t, &[]);
    eventually("applied", || {
        read(&t, IRQB).contains("IRQBALANCE_BANNED_CPULIST=2-3\n")
            && t.root.join(&DROP_IN[1..]).exists()
            && t.root.join(&KVM[1..]).exists()
    });
    eventually("status written", || running(&t));
    // The scan thread's watch is made after the first apply.
    std::thread::sleep(Duration::from_millis(500));
    let lines = [
        (IRQB, "IRQBALANCE_ARGS=\"--journal\"\n"),
        (DROP_IN, "DefaultTimeoutStopSec=20s\n"),
        (KVM, "options kvm ignore_msrs=1\n"),
    ];
    for (f, l) in lines {
        let now = read(&t, f);
        write(&t, f, &format!("{now}{l}"));
    }
    // Ten checks and more, past the time a changed file is left to settle.
    std::thread::sleep(Duration::from_millis(2500));
    for (f, l) in lines {
        assert!(read(&t, f).ends_with(l), "{f}: {}", read(&t, f));
    }
    // isold's own line changed: put back, the administrator's line kept.
    let changed = read(&t, DROP_IN).replace("CPUAffinity=0-1", "CPUAffinity=0-3");
    write(&t, DROP_IN, &changed);
    let put_back = changed.replace("CPUAffinity=0-3", "CPUAffinity=0-1");
    let t0 = Instant::now();
    while read(&t, DROP_IN) != put_back {
        if t0.elapsed() > Duration::from_secs(20) {
            let (_, log) = stop(c);
            panic!("drop-in not put back: {:?}\n{log}", read(&t, DROP_IN));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, log) = stop(c);
    assert_eq!(code, 0, "{log}");
    assert_eq!(read(&t, IRQB), format!("{IRQBALANCE_DEBIAN}{}", lines[0].1));
    assert_eq!(read(&t, DROP_IN), lines[1].1);
    assert_eq!(read(&t, KVM), lines[2].1);
}

#[test]
fn a_task_widened_later_is_narrowed_by_the_task_scan_and_restored_wide() {
    let t = tree("isolated_cpus = \"2-3\"\n");
    // A thread of the fixture whose affinity apply narrows: pid 1.
    let status = "/proc/1/task/1/status";
    let widen = |t: &Tree| {
        let s = read(t, status).replace("Cpus_allowed_list:\t0-1", "Cpus_allowed_list:\t0-3");
        write(t, status, &s);
    };
    let c = start(&t, &[]);
    eventually("narrowed at start", || {
        read(&t, status).contains("Cpus_allowed_list:\t0-1\n")
    });
    widen(&t);
    assert!(read(&t, status).contains("Cpus_allowed_list:\t0-3\n"));
    eventually("narrowed again by the task scan", || {
        read(&t, status).contains("Cpus_allowed_list:\t0-1\n")
    });
    eventually("counted", || {
        status_json(&t)["status"]["corrections"]["tasks"] == 1
    });
    let (code, log) = stop(c);
    assert_eq!(code, 0, "{log}");
    // on_stop = "keep": narrowed it stays, until isold restore.
    assert!(read(&t, status).contains("Cpus_allowed_list:\t0-1\n"));
    let (code, out, err) = common::isold_at(Some(&t.root), &["restore"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_restored(&t);
}

/// In a container (a pod, podman: no systemd to ask), SIGTERM is a rollout, a drain or a
/// node's shutdown as much as a stop: even with on_stop = "restore" every value stays.
#[test]
fn a_containers_sigterm_never_restores() {
    let t = tree(RESTORE);
    let child = Command::new(env!("CARGO_BIN_EXE_isold"))
        .arg("--root")
        .arg(&t.root)
        .arg("--config")
        .arg(&t.config)
        .args(["run", "--interval", "0.1", "--task-interval", "0.2"])
        .env_remove("INVOCATION_ID")
        .env("KUBERNETES_SERVICE_HOST", "10.96.0.1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually("applied", || read(&t, STAT_INTERVAL).trim() == "10");
    eventually("status written", || running(&t));
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert_eq!(read(&t, STAT_INTERVAL).trim(), "10", "restored: {log}");
    assert!(
        log.contains("on_stop = \"restore\", but this is the stop of a Kubernetes pod"),
        "{log}"
    );
}

/// The default, on_stop = "keep": SIGTERM stops the watching and leaves every value as
/// applied (a restart or a crash never gives the workload's CPUs back to the noise);
/// `isold restore` is the undo, refused while the daemon runs, since it would be undone at
/// once.
#[test]
fn stopping_keeps_the_policy_and_restore_waits_for_the_stop() {
    let t = tree("isolated_cpus = \"2-3\"\n");
    let c = start(&t, &[]);
    eventually("applied", || read(&t, STAT_INTERVAL).trim() == "10");
    eventually("status written", || running(&t));
    assert_eq!(status_json(&t)["status"]["on_stop"], "keep");
    let (code, text, _) = common::isold_at(Some(&t.root), &["status"]);
    assert_eq!(code, 0);
    assert!(
        text.contains("  on stop: keep every value (isold restore undoes them)\n"),
        "{text}"
    );
    let pid = c.id();
    let (code, out, err) = common::isold_at(Some(&t.root), &["restore"]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        err,
        format!("isold: isold run (pid {pid}) is keeping the policy and would put it right again: stop it first (systemctl stop isold), then run isold restore\n")
    );
    assert_eq!(read(&t, STAT_INTERVAL).trim(), "10", "nothing restored");
    let (code, log) = stop(c);
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains("SIGTERM: the policy stays in force (on_stop = \"keep\"); `isold restore` puts the original values back"),
        "{log}"
    );
    assert_eq!(read(&t, STAT_INTERVAL).trim(), "10");
    assert_eq!(read(&t, IRQ4).trim(), "0-1");
    let config = t.config.to_str().unwrap();
    let (code, out, err) = common::isold_at(Some(&t.root), &["--config", config, "verify"]);
    assert_eq!(code, 0, "the policy holds after the stop: {out}{err}");
    assert!(!running(&t));
    let (code, out, err) = common::isold_at(Some(&t.root), &["restore"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_restored(&t);
    assert!(!t.root.join("run/isold/state.json").exists());
}

/// A second `isold run` on the same state file is refused: two daemons would fight.
/// A state directory someone else made 0755 (a kubelet's hostPath) is 0700 once the daemon
/// has started, and the log says so.
#[test]
fn the_state_directories_are_made_private_at_every_start() {
    use std::os::unix::fs::PermissionsExt;
    let t = tree("isolated_cpus = \"2-3\"\n");
    let dirs = ["run/isold", "var/lib/isold"].map(|d| t.root.join(d));
    for d in &dirs {
        std::fs::create_dir_all(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let c = start(&t, &[]);
    eventually("started", || t.root.join("run/isold/status.json").exists());
    for d in &dirs {
        let mode = std::fs::metadata(d).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700, "{}", d.display());
    }
    let log = kill9(c);
    assert!(
        log.contains("run/isold had mode 0755: made 0700 (it holds the original values)"),
        "{log}"
    );
}

#[test]
fn a_second_run_is_refused() {
    let t = tree("isolated_cpus = \"2-3\"\n");
    let _c = start(&t, &[]);
    eventually("status written", || running(&t));
    let out = start_child(&t, &[]).wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("another isold run is running with the state file"),
        "{err}"
    );
    assert!(running(&t), "the first one runs on");
}

#[test]
fn sighup_applies_the_changed_file_and_restores_what_it_dropped() {
    let t = tree(RESTORE);
    let tm = "/proc/sys/kernel/timer_migration";
    assert_eq!(read(&t, tm).trim(), "1");
    let c = start(&t, &[]);
    eventually("applied", || read(&t, tm).trim() == "0");
    std::fs::write(
        &t.config,
        "isolated_cpus = \"2-3\"\non_stop = \"restore\"\n[sysctl]\n\"vm.stat_interval\" = 20\n\"kernel.timer_migration\" = false\n",
    )
    .unwrap();
    signal(&c, libc::SIGHUP);
    eventually("new value", || read(&t, STAT_INTERVAL).trim() == "20");
    eventually("dropped value restored", || read(&t, tm).trim() == "1");
    eventually("reload counted", || {
        status_json(&t)["status"]["reloads"] == 1
    });
    // The scan thread now keeps the new policy, not the old one.
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(read(&t, STAT_INTERVAL).trim(), "20");
    assert_eq!(read(&t, tm).trim(), "1");
    // An invalid file keeps the policy in force.
    std::fs::write(&t.config, "isolated_cpus = \"2-9\"\n").unwrap();
    signal(&c, libc::SIGHUP);
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(read(&t, STAT_INTERVAL).trim(), "20");
    let (code, log) = stop(c);
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains("reload: ") && log.contains("keeping the policy in force"),
        "{log}"
    );
    // The one dropped value; the narrowed threads, still covered, were not widened on the
    // way (they would sit on the isolated CPUs until the apply after it).
    assert!(
        log.contains("reload: 1 value(s) the new policy no longer covers restored"),
        "{log}"
    );
    assert_restored(&t);
}

#[test]
fn after_kill_9_the_next_start_takes_the_state_over_and_stop_restores_the_first_originals() {
    let t = tree("isolated_cpus = \"2-3\"\n");
    let mut c = start(&t, &[]);
    eventually("applied", || read(&t, STAT_INTERVAL).trim() == "10");
    eventually("status", || running(&t));
    let mut child = c.0.take().expect("running");
    child.kill().unwrap();
    child.wait().unwrap();
    // The state file remains; the values stay applied.
    assert!(t.root.join("run/isold/state.json").is_file());
    assert!(!running(&t));
    let c = start(&t, &[]);
    eventually("running again", || running(&t));
    let (code, log) = stop(c);
    assert_eq!(code, 0, "{log}");
    assert_eq!(read(&t, STAT_INTERVAL).trim(), "10");
    let (code, out, err) = common::isold_at(Some(&t.root), &["restore"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!t.root.join("run/isold/state.json").exists());
    assert!(!t.root.join("run/isold/state.journal").exists());
    assert_restored(&t);
}

/// A state journal line that is no whole entry (cut short by a full disk, changed): the
/// daemon starts, says so once in its log, keeps the line in state.journal.bad and shows it
/// in `isold status`, also after a restart; every original around it is restored.
#[test]
fn a_bad_journal_line_is_set_aside_logged_once_and_shown_by_status() {
    let t = tree("isolated_cpus = \"2-3\"\n");
    let c = start(&t, &[]);
    eventually("applied", || read(&t, STAT_INTERVAL).trim() == "10");
    eventually("status", || running(&t));
    kill9(c);
    // A line whose CRC-32 does not match, and one cut short by the full disk.
    let bad = "{\"len\":48,\"crc32\":\"00000000\",\"id\":\"sysctl:vm.x\",\"item\":\"sysctl\"}";
    let cut = "{\"len\":120,\"crc32\":\"1c291ca3\",\"id\":\"task:";
    let journal = t.root.join("run/isold/state.journal");
    std::fs::write(&journal, format!("{bad}\n{cut}\n")).unwrap();
    let c = start(&t, &[]);
    eventually("running with the bad lines", || running(&t));
    eventually("status shows them", || {
        status_json(&t)["status"]["set_aside"]["lines"] == 2
    });
    let kept = t.root.join("run/isold/state.journal.bad");
    assert_eq!(
        status_json(&t)["status"]["set_aside"]["file"],
        kept.display().to_string()
    );
    assert_eq!(
        std::fs::read_to_string(&kept).unwrap(),
        format!("{bad}\n{cut}\n")
    );
    assert!(!journal.exists(), "folded into state.json");
    let (code, text, _) = common::isold_at(Some(&t.root), &["status"]);
    assert_eq!(code, 0);
    assert!(
        text.contains(&format!(
            "state journal: 2 line(s) set aside, not whole entries (a write cut short or changed), kept in {}",
            kept.display()
        )),
        "{text}"
    );
    std::thread::sleep(Duration::from_millis(500));
    let (code, log) = stop(c);
    assert_eq!(code, 0, "{log}");
    assert_eq!(
        log.matches("line(s) are not whole isold entries").count(),
        1,
        "{log}"
    );
    // The next start says it again, once, until the administrator removes the file.
    let c = start(&t, &[]);
    eventually("running again", || running(&t));
    assert_eq!(status_json(&t)["status"]["set_aside"]["lines"], 2);
    let (code, log) = stop(c);
    assert_eq!(code, 0, "{log}");
    assert_eq!(
        log.matches("line(s) of the state journal were set aside")
            .count(),
        1,
        "{log}"
    );
    assert!(!log.contains("not whole isold entries"), "{log}");
    let (code, out, err) = common::isold_at(Some(&t.root), &["restore"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_restored(&t);
    assert!(kept.exists(), "kept for the administrator");
}

/// The partition's repair is the partition alone (no other value, no task scan), also when
/// its directory is gone: a sysctl drifted at the same moment waits for the scan thread
/// (every half `--interval`, here 15 s).
#[test]
fn the_partition_repair_is_the_partition_alone() {
    let t =
        tree("isolated_cpus = \"2-3\"\non_stop = \"restore\"\n[items]\ncgroup_partition = true\n");
    let part = "/sys/fs/cgroup/isolated/cpuset.cpus.partition";
    let c = Running(Some(start_with(
        &t,
        &["--interval", "30", "--task-interval", "30"],
    )));
    eventually("status written", || running(&t));
    assert_eq!(read(&t, STAT_INTERVAL), "10\n");
    write(&t, STAT_INTERVAL, "1\n");
    write(&t, part, "member\n");
    eventually("made isolated again", || read(&t, part) == "isolated\n");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(read(&t, STAT_INTERVAL), "1\n", "left for the scan");
    // The directory removed (by hand, or a cgroup manager): made again by the partition item
    // alone, as apply makes it, still without the sysctl.
    // At once, as the kernel's rmdir: moved aside, then its files removed (their watches'
    // events wake the daemon).
    let aside = t.root.join("sys/fs/cgroup/.removed");
    std::fs::rename(t.root.join("sys/fs/cgroup/isolated"), &aside).unwrap();
    std::fs::remove_dir_all(&aside).unwrap();
    eventually("made again", || {
        std::fs::read_to_string(t.root.join(part.trim_start_matches('/')))
            .is_ok_and(|p| p == "isolated\n")
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(read(&t, STAT_INTERVAL), "1\n", "left for the scan");
    let (code, log) = stop(c);
    assert_eq!(code, 0, "{log}");
    // The fake root's subtree_control keeps the text restore wrote (see below).
    let subtree = "/sys/fs/cgroup/cgroup.subtree_control";
    assert_eq!(read(&t, subtree), "-cpuset\n");
    write(&t, subtree, "");
    assert_restored(&t);
}

/// The cgroup partition is watched by inotify on its files: a write that turns it into a
/// member, or gives it other CPUs, is undone at once and counted; stop removes it.
#[test]
fn a_changed_partition_is_made_again_and_stop_removes_it() {
    let t =
        tree("isolated_cpus = \"2-3\"\non_stop = \"restore\"\n[items]\ncgroup_partition = true\n");
    let part = "/sys/fs/cgroup/isolated/cpuset.cpus.partition";
    let cpus = "/sys/fs/cgroup/isolated/cpuset.cpus";
    let c = start(&t, &[]);
    eventually("status written", || running(&t));
    assert_eq!(read(&t, part), "isolated\n");
    assert_eq!(read(&t, cpus), "2-3\n");
    assert_eq!(
        status_json(&t)["status"]["corrections"],
        serde_json::json!({})
    );
    write(&t, part, "member\n");
    eventually("made isolated again", || read(&t, part) == "isolated\n");
    write(&t, cpus, "2\n");
    eventually("its CPUs put back", || read(&t, cpus) == "2-3\n");
    // Settled (each write by hand is two events, truncation and text): only this file's
    // own event can set it right now.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(read(&t, cpus), "2-3\n");
    let exclusive = "/sys/fs/cgroup/isolated/cpuset.cpus.exclusive";
    write(&t, exclusive, "3\n");
    eventually("its exclusive CPUs put back", || {
        read(&t, exclusive) == "2-3\n"
    });
    eventually("counted", || {
        status_json(&t)["status"]["corrections"]["cgroup_partition"]
            .as_u64()
            .is_some_and(|n| n >= 3)
    });
    let (code, log) = stop(c);
    assert_eq!(code, 0, "{log}");
    // Each write is a truncation and then the text, two events: which one the daemon saw
    // first decides the "from" it logs.
    assert!(
        log.contains("corrected isolated partition /sys/fs/cgroup/isolated: changed: ")
            && log.contains(" -> isolated partition of CPUs 2-3, 0 workload(s) moved in"),
        "{log}"
    );
    assert!(!t.root.join("sys/fs/cgroup/isolated").exists());
    // The fake root's subtree_control keeps the text restore wrote ("-cpuset"); the kernel's
    // reads back the controllers left, as before.
    let subtree = "/sys/fs/cgroup/cgroup.subtree_control";
    assert_eq!(read(&t, subtree), "-cpuset\n");
    write(&t, subtree, "");
    assert_restored(&t);
}

/// The daemon's scans leave the workload's IRQ (`[irqs] allow`) wherever it is put, while
/// another IRQ moved onto an isolated CPU is put back.
#[test]
fn the_scans_leave_an_allowed_irq_alone() {
    let t = tree("isolated_cpus = \"2-3\"\n[irqs]\nallow = [\"ttyS0\"]\n");
    let irq1 = "/proc/irq/1/smp_affinity_list";
    let c = start(&t, &[]);
    eventually("applied", || read(&t, irq1).trim() == "0-1");
    write(&t, IRQ4, "3\n");
    write(&t, irq1, "3\n");
    eventually("IRQ 1 put back", || read(&t, irq1).trim() == "0-1");
    // Several scans (every 50 ms) later, IRQ 4 is where it was put.
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(read(&t, IRQ4).trim(), "3");
    let (code, log) = stop(c);
    assert_eq!(code, 0, "{log}");
    assert!(!log.contains("IRQ 4"), "{log}");
}

/// Something else that keeps writing a value back (a second tuner, a script): isold repairs
/// it twenty times, then says once that it is contested, leaves it for a back-off instead of
/// writing it every check, and names it in `isold status`.
#[test]
fn a_value_changed_back_again_and_again_is_contested_not_fought() {
    let t = tree("isolated_cpus = \"2-3\"\n");
    let c = start(&t, &[]);
    eventually("applied", || read(&t, STAT_INTERVAL).trim() == "10");
    eventually("status written", || running(&t));
    // The other program: writes 1 every 20 ms (the daemon checks every 50 ms) until the
    // daemon names the value contested (30 s at most).
    let path = t.root.join(STAT_INTERVAL.trim_start_matches('/'));
    let t0 = Instant::now();
    let contested =
        |t: &Tree| status_json(t)["status"]["contested"][0]["id"] == "sysctl:vm.stat_interval";
    let mut n = 0;
    while !(n % 5 == 0 && contested(&t)) {
        assert!(t0.elapsed() < Duration::from_secs(30), "never contested");
        std::fs::write(&path, "1\n").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        n += 1;
    }
    // Three more seconds of fighting: left alone, no more repairs.
    let fought = Instant::now();
    while fought.elapsed() < Duration::from_secs(3) {
        std::fs::write(&path, "1\n").unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = status_json(&t)["status"].clone();
    // Twenty writes, then none: some read back the other program's value already (a failed
    // correction, not counted as one).
    assert_eq!(st["contested"][0]["repairs"], 20, "{st}");
    let corrections = st["corrections"]["sysctl"].as_u64().unwrap();
    assert!((1..=20).contains(&corrections), "{st}");
    assert_eq!(st["contested"][0]["backoff_s"], 10);
    // Left as the other program set it, for the back-off.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(read(&t, STAT_INTERVAL).trim(), "1");
    let (code, text, _) = common::isold_at(Some(&t.root), &["status"]);
    assert_eq!(code, 0);
    assert!(
        text.contains(
            "  contested: changed back by something else (1):\n    sysctl vm.stat_interval: "
        ),
        "{text}"
    );
    // isold audit names it among what is not right machine-wide.
    let (code, text, err) = common::isold_at(
        Some(&t.root),
        &["audit", "--cpus", "2-3", "--duration", "0"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains(
            "  sysctl vm.stat_interval is contested (20 repairs by isold run, now every 10"
        ) && text.contains("find what writes it"),
        "{text}"
    );
    let (code, log) = stop(c);
    assert_eq!(code, 0, "{log}");
    assert_eq!(
        log.matches("sysctl vm.stat_interval: something else keeps changing it back (20 repairs within 60 s)").count(),
        1,
        "{log}"
    );
}

/// The samples of a text-format exposition: (name, labels, value).
fn samples(text: &str) -> Vec<(String, std::collections::BTreeMap<String, String>, f64)> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').expect("a value");
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let labels = labels
            .split("\",")
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (k, v) = l.split_once("=\"").expect("label=\"value\"");
                (k.to_string(), v.trim_end_matches('"').to_string())
            })
            .collect();
        out.push((name.to_string(), labels, value.parse().expect("a number")));
    }
    out
}

/// The value of the series `name` with (at least) these labels.
fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples(text).into_iter().find_map(|(n, l, v)| {
        (n == name
            && labels
                .iter()
                .all(|(k, want)| l.get(*k).map(String::as_str) == Some(want)))
        .then_some(v)
    })
}

fn http(port: u16, request: &str) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    out
}

/// Clients that connect and send nothing, or drip a byte at a time.
struct Pests {
    tcp: Vec<std::net::TcpStream>,
    unix: Vec<std::os::unix::net::UnixStream>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    drips: Vec<std::thread::JoinHandle<()>>,
}

impl Pests {
    /// `tcp` idle connections to the metrics port, `unix` to the claims socket, and one
    /// slow-drip client on each (a byte every 200 ms, never a whole request).
    fn start(port: u16, sock: &Path, tcp: usize, unix: usize) -> Pests {
        use std::io::Write;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tcp_c = (0..tcp)
            .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
            .collect();
        let unix_c = (0..unix)
            .map(|_| std::os::unix::net::UnixStream::connect(sock).unwrap())
            .collect();
        let mut drips = Vec::new();
        let mut w1 = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut w2 = std::os::unix::net::UnixStream::connect(sock).unwrap();
        let st = stop.clone();
        drips.push(std::thread::spawn(move || {
            while !st.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = w1.write_all(b"G");
                let _ = w2.write_all(b"{");
                std::thread::sleep(Duration::from_millis(200));
            }
        }));
        Pests {
            tcp: tcp_c,
            unix: unix_c,
            stop,
            drips,
        }
    }
}

impl Drop for Pests {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for d in self.drips.drain(..) {
            let _ = d.join();
        }
    }
}

/// No local client can stall the daemon: with 20 idle and a slow-drip connection on the
/// metrics listener and 5 idle and a slow-drip one on the claims socket, a scrape and
/// `isold claims` are answered at once, drift is put back, the idle clients are closed at
/// their deadline, and SIGTERM ends the daemon at once. (One at a time, 20 idle scrapers
/// held a scrape for 30 s and an idle hook client the main loop for seconds.)
#[test]
fn no_idle_or_slow_client_stalls_the_daemon() {
    use std::io::Read;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t = tree(&format!(
        "isolated_cpus = \"2-3\"\n[metrics]\nlisten = \"127.0.0.1:{port}\"\ninterval = 1\n"
    ));
    let c = start(&t, &[]);
    eventually("applied", || read(&t, STAT_INTERVAL).trim() == "10");
    eventually("status written", || running(&t));
    let sock = t.root.join("run/isold/isold.sock");
    let mut pests = Pests::start(port, &sock, 20, 5);
    std::thread::sleep(Duration::from_millis(300));

    let t0 = Instant::now();
    let out = http(port, "GET /metrics HTTP/1.0\r\n\r\n");
    let scrape = t0.elapsed();
    assert!(
        out.starts_with("HTTP/1.1 200 OK") && out.contains("isold_info"),
        "{out}"
    );
    assert!(scrape < Duration::from_secs(2), "a scrape took {scrape:?}");
    let t0 = Instant::now();
    let (code, out, err) = common::isold_at(Some(&t.root), &["claims"]);
    let claims = t0.elapsed();
    assert_eq!((code, out.trim()), (0, "no container claims CPUs"), "{err}");
    assert!(
        claims < Duration::from_secs(2),
        "isold claims took {claims:?}"
    );
    write(&t, STAT_INTERVAL, "1\n");
    write(&t, IRQ4, "3\n");
    eventually("drift put back", || {
        read(&t, STAT_INTERVAL).trim() == "10" && read(&t, IRQ4).trim() == "0-1"
    });

    // Each idle client is closed at its deadline (2 s for a scraper, 5 s on the socket),
    // not served forever.
    for s in &mut pests.tcp {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert_eq!(
            s.read(&mut [0u8; 64]).unwrap(),
            0,
            "an idle scraper kept open"
        );
    }
    for s in &mut pests.unix {
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        assert_eq!(
            s.read(&mut [0u8; 64]).unwrap(),
            0,
            "an idle hook client kept open"
        );
    }

    // SIGTERM with idle clients connected ends the daemon at once, not at their 5 s
    // deadline.
    let _again = Pests::start(port, &sock, 20, 5);
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    let (code, log) = stop(c);
    assert_eq!(code, 0, "{log}");
    assert!(
        t0.elapsed() < Duration::from_secs(4),
        "the stop took {:?}",
        t0.elapsed()
    );
}

/// `[metrics]`: the textfile and the loopback listener publish the same metrics; the
/// isolated CPUs' interrupt and softirq counters equal the kernel's and follow them, the
/// housekeeping CPUs have none; a drift repair is counted by item and value.
#[test]
fn metrics_follow_the_kernels_counters_and_count_repairs() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let prom = dir.path().join("isold.prom");
    let t = tree(&format!(
        "isolated_cpus = \"2-3\"\n[metrics]\nlisten = \"127.0.0.1:{port}\"\ntextfile = \"{}\"\ninterval = 1\n",
        prom.display()
    ));
    write(
        &t,
        "/proc/softirqs",
        "                    CPU0       CPU1       CPU2       CPU3\n          HI:          0          0          0          0\n       TIMER:         10         11         12         13\n",
    );
    let c = start(&t, &[]);
    let text = || std::fs::read_to_string(&prom).unwrap_or_default();
    eventually("the textfile", || {
        text().contains("isold_cpu_interrupts_total")
    });
    let s = text();
    assert_eq!(
        value(
            &s,
            "isold_cpu_interrupts_total",
            &[("cpu", "2"), ("source", "LOC")]
        ),
        Some(790.0),
        "{s}"
    );
    assert_eq!(
        value(
            &s,
            "isold_cpu_interrupts_total",
            &[("cpu", "3"), ("source", "i8042")]
        ),
        Some(9.0),
        "{s}"
    );
    assert_eq!(
        value(
            &s,
            "isold_cpu_softirqs_total",
            &[("cpu", "2"), ("kind", "TIMER")]
        ),
        Some(12.0),
        "{s}"
    );
    assert_eq!(
        value(&s, "isold_cpu_softirqs_total", &[("kind", "HI")]),
        None,
        "no series for a zero count: {s}"
    );
    assert!(
        samples(&s).iter().all(
            |(n, l, _)| !n.starts_with("isold_cpu_") || ["2", "3"].contains(&l["cpu"].as_str())
        ),
        "isolated CPUs only: {s}"
    );
    assert_eq!(
        value(
            &s,
            "isold_info",
            &[("isolated", "2-3"), ("preset", "realtime-virtual-host")]
        ),
        Some(1.0),
        "{s}"
    );
    assert_eq!(value(&s, "isold_policy_holds", &[]), Some(1.0), "{s}");

    // The kernel counts 100 more local timer interrupts on CPU 2.
    let irqs = read(&t, "/proc/interrupts").replace(
        "LOC:        980       1001        790",
        "LOC:        980       1001        890",
    );
    write(&t, "/proc/interrupts", &irqs);
    eventually("the counter follows", || {
        value(
            &text(),
            "isold_cpu_interrupts_total",
            &[("cpu", "2"), ("source", "LOC")],
        ) == Some(890.0)
    });
    assert!(value(&text(), "isold_cpu_tick_rate_hertz", &[("cpu", "2")]).is_some_and(|r| r > 0.0));

    // ksoftirqd/2 (a kernel thread, never the workload) switched 40 more times on CPU 2.
    let st = read(&t, "/proc/43/task/43/status").replace(
        "voluntary_ctxt_switches:\t2461",
        "voluntary_ctxt_switches:\t2501",
    );
    write(&t, "/proc/43/task/43/status", &st);
    // Counted at the next walk of the threads: one sample in ten at 1 s.
    eventually_within("foreign switches counted", Duration::from_secs(15), || {
        value(
            &text(),
            "isold_cpu_foreign_context_switches_total",
            &[("cpu", "2")],
        ) == Some(40.0)
    });

    write(&t, STAT_INTERVAL, "1\n");
    eventually("the repair counted", || {
        let s = text();
        value(&s, "isold_corrections_total", &[("kind", "sysctl")]) == Some(1.0)
            && value(
                &s,
                "isold_drift_repairs_total",
                &[("item", "sysctl"), ("value", "sysctl:vm.stat_interval")],
            ) == Some(1.0)
    });

    let got = http(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
    assert!(
        got.contains("Content-Type: text/plain; version=0.0.4"),
        "{got}"
    );
    let body = got.split_once("\r\n\r\n").unwrap().1;
    assert_eq!(
        value(body, "isold_corrections_total", &[("kind", "sysctl")]),
        Some(1.0),
        "{body}"
    );
    assert!(http(port, "GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    assert!(
        http(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
            .starts_with("HTTP/1.1 405")
    );
    // A textfile that cannot be written is said once, not every interval, and written again
    // once it can be.
    std::fs::remove_dir_all(dir.path()).unwrap();
    std::fs::write(dir.path(), "a file where the directory was").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(3500));
    std::fs::remove_file(dir.path()).unwrap();
    std::fs::create_dir(dir.path()).unwrap();
    eventually("the textfile written again", || {
        text().contains("isold_cpu_interrupts_total")
    });
    let (code, log) = stop(c);
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains(&format!("metrics on http://127.0.0.1:{port}/metrics")),
        "{log}"
    );
    let failed: Vec<&str> = log.lines().filter(|l| l.contains("cannot write")).collect();
    assert_eq!(failed.len(), 1, "{log}");
    assert!(failed[0].contains("isold.prom"), "{log}");
}

// ---- Containers' claims (`isold hook` and the daemon's socket) ----

const CONTAINER_PID: &str = "4242";
const PM_QOS3: &str = "/sys/devices/system/cpu/cpu3/power/pm_qos_resume_latency_us";
const WQ_MASK: &str = "/sys/devices/virtual/workqueue/cpumask";
const DEFAULT_AFFINITY: &str = "/proc/irq/default_smp_affinity";
const INIT_STATUS: &str = "/proc/1/task/1/status";

/// A container's process in the tree: a copy of init's files as pid 4242, on CPU 3.
fn add_container_process(t: &Tree) {
    let dir = t.root.join("proc/4242/task/4242");
    std::fs::create_dir_all(&dir).unwrap();
    let stat = read(t, "/proc/1/task/1/stat").replacen("1 (init)", "4242 (sleep)", 1);
    std::fs::write(dir.join("stat"), stat).unwrap();
    let status = read(t, INIT_STATUS)
        .replace("Name:\tinit", "Name:\tsleep")
        .replace("Tgid:\t1\n", "Tgid:\t4242\n")
        .replace("Pid:\t1\n", "Pid:\t4242\n")
        .replace("Cpus_allowed:\tf\n", "Cpus_allowed:\t8\n")
        .replace("Cpus_allowed_list:\t0-3\n", "Cpus_allowed_list:\t3\n");
    std::fs::write(dir.join("status"), status).unwrap();
}

/// A bundle whose config.json has `annotations` and the cpuset `cpus`.
fn bundle(t: &Tree, name: &str, annotations: &str, cpus: Option<&str>) -> PathBuf {
    let dir = t._dir.path().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let linux = match cpus {
        Some(c) => format!(r#","linux":{{"resources":{{"cpu":{{"cpus":"{c}"}}}}}}"#),
        None => String::new(),
    };
    std::fs::write(
        dir.join("config.json"),
        format!(r#"{{"ociVersion":"1.0.2","annotations":{{{annotations}}}{linux}}}"#),
    )
    .unwrap();
    dir
}

/// `isold --root T hook ARGS` with `stdin`: (exit code, stderr).
fn hook(t: &Tree, args: &[&str], stdin: &str) -> (i32, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_isold"))
        .arg("--root")
        .arg(&t.root)
        .arg("hook")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    c.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = c.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn state(id: &str, status: &str, pid: &str, bundle: &Path) -> String {
    format!(
        r#"{{"ociVersion":"1.0.2","id":"{id}","status":"{status}","pid":{pid},"bundle":"{}"}}"#,
        bundle.display()
    )
}

/// The values a claim on CPU 3 changes, as they read now.
fn claimed_values(t: &Tree) -> Vec<String> {
    [IRQ4, DEFAULT_AFFINITY, WQ_MASK, PM_QOS3, INIT_STATUS]
        .iter()
        .map(|p| read(t, p))
        .collect()
}

fn affinity_line(status: &str) -> &str {
    status
        .lines()
        .find(|l| l.starts_with("Cpus_allowed_list:"))
        .unwrap()
}

/// A container that asks by annotation gets its CPU isolated while it runs, on top of the
/// configuration's (IRQs, wide tasks, workqueues off it; its PM QoS as asked; its own
/// process left where it is), and everything back as it was when its poststop hook runs.
/// After kill -9 of the daemon and of the container, the next start gives the CPU back. A
/// container without the annotation, a bad annotation, a missing cpuset and a daemon that is
/// not running change nothing; the hook says why.
#[test]
fn a_containers_claim_isolates_its_cpus_while_it_runs_and_gives_them_back() {
    let t = tree("isolated_cpus = \"2\"\n[containers]\ncpus = \"1,3\"\n");
    add_container_process(&t);
    let untouched = t._dir.path().join("untouched");
    copy_dir(&t.root, &untouched);
    let id = "4f2c9a0e1b7d";
    let asks = bundle(
        &t,
        "asks",
        r#""isold.io/isolate":"true","cpu-c-states.crio.io":"disable""#,
        Some("3"),
    );
    let created = state(id, "created", CONTAINER_PID, &asks);
    let stopped = state(id, "stopped", "0", &asks);

    // No daemon: the container starts without isolation, or not at all, as configured.
    let (code, err) = hook(&t, &[], &created);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("isold run is not running") && err.contains("starts without them"),
        "{err}"
    );
    let (code, err) = hook(&t, &["--if-down", "fail"], &created);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not started (--if-down fail)"), "{err}");
    // The container is named by its short id, as podman and crictl show it.
    let long_id = format!("{id}{}", "0123456789abcdef".repeat(3) + "0123");
    assert_eq!(long_id.len(), 64);
    let (code, err) = hook(&t, &[], &state(&long_id, "created", CONTAINER_PID, &asks));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!("container {id} asked for isolated CPUs 3")),
        "{err}"
    );
    assert!(!err.contains(&long_id), "{err}");
    // Standard input is read up to MAX_INPUT bytes; one more is refused as too big.
    let max = libtaskisol::claims::MAX_INPUT;
    let padded = |n: usize| format!("{}{created}", " ".repeat(n - created.len()));
    let (code, err) = hook(&t, &[], &padded(max));
    assert_eq!(code, 0, "a state of exactly MAX_INPUT bytes: {err}");
    assert!(err.contains("isold run is not running"), "{err}");
    let (code, err) = hook(&t, &[], &padded(max + 1));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("is {} bytes, over {max}", max + 1)),
        "{err}"
    );

    let c = start(&t, &[]);
    eventually("applied", || {
        affinity_line(&read(&t, INIT_STATUS)).ends_with("0-1,3")
    });
    let before = claimed_values(&t);
    assert_eq!(read(&t, IRQ4).trim(), "0-1,3");

    // Refusals change nothing.
    let plain = bundle(&t, "plain", r#""io.other":"x""#, Some("3"));
    let (code, err) = hook(&t, &[], &state("plain1", "created", CONTAINER_PID, &plain));
    assert_eq!(
        (code, err.as_str()),
        (0, ""),
        "no annotation: nothing to do, nothing said"
    );
    let bad = bundle(
        &t,
        "bad",
        r#""cpu-c-states.crio.io":"max_latency:x""#,
        Some("3"),
    );
    let (code, err) = hook(&t, &[], &state("bad1", "created", CONTAINER_PID, &bad));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("annotation cpu-c-states.crio.io: 'max_latency:x' is not max_latency:N"),
        "{err}"
    );
    let pool = t._dir.path().join("burstable");
    std::fs::create_dir_all(&pool).unwrap();
    std::fs::write(
        pool.join("config.json"),
        r#"{"annotations":{"isold.io/isolate":"true"},"linux":{"cgroupsPath":"kubepods-burstable-pod1.slice:crio:b1","resources":{"cpu":{"cpus":"1-3"}}}}"#,
    )
    .unwrap();
    let (code, err) = hook(&t, &[], &state("b1", "created", CONTAINER_PID, &pool));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("its pod is Burstable (not Guaranteed)"),
        "{err}"
    );
    // A Guaranteed pod's container with a fractional CPU request (shares 1536): the kubelet
    // gives it the shared pool, so the hook claims nothing, as NRI does.
    std::fs::write(
        pool.join("config.json"),
        r#"{"annotations":{"isold.io/isolate":"true"},"linux":{"cgroupsPath":"kubepods-pod1.slice:crio:g1","resources":{"cpu":{"cpus":"0-3","shares":1536}}}}"#,
    )
    .unwrap();
    let (code, err) = hook(&t, &[], &state("g1", "created", CONTAINER_PID, &pool));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("its CPU request is not a whole number of CPUs (cpu shares 1536"),
        "{err}"
    );
    // Whole CPUs, but the kubelet's state cannot be read: isold cannot tell whether the
    // kubelet gave it those CPUs, so the start fails with the reason.
    std::fs::write(
        pool.join("config.json"),
        r#"{"annotations":{"isold.io/isolate":"true"},"linux":{"cgroupsPath":"kubepods-pod1.slice:crio:g2","resources":{"cpu":{"cpus":"3","shares":1024}}}}"#,
    )
    .unwrap();
    std::fs::create_dir_all(t.root.join("var/lib/kubelet")).unwrap();
    std::fs::write(t.root.join("var/lib/kubelet/cpu_manager_state"), "{").unwrap();
    let (code, err) = hook(&t, &[], &state("g2", "created", CONTAINER_PID, &pool));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("claim refused: the kubelet's CPU manager state cannot be read"),
        "{err}"
    );
    std::fs::remove_file(t.root.join("var/lib/kubelet/cpu_manager_state")).unwrap();
    let nocpus = bundle(&t, "nocpus", r#""isold.io/isolate":"true""#, None);
    let (code, err) = hook(
        &t,
        &[],
        &state("nocpus1", "created", CONTAINER_PID, &nocpus),
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("has no cpuset"), "{err}");
    // The administrator's rule: CPU 0 is a housekeeping CPU, given to no container. Refused
    // whole (the claimed values are checked unchanged below), the reason on the hook's
    // stderr, the start failed; or started unisolated with --if-refused start.
    for cpus in ["0-3", "0", "1-2,0"] {
        let all = bundle(&t, "all", r#""isold.io/isolate":"true""#, Some(cpus));
        let (code, err) = hook(&t, &[], &state("all1", "created", CONTAINER_PID, &all));
        assert_eq!(code, 1, "{err}");
        assert!(
            err.contains("claim refused: container all1: CPUs 0 are not for containers"),
            "{err}"
        );
    }
    let (code, err) = hook(
        &t,
        &["--if-refused", "start"],
        &state(
            "all2",
            "created",
            CONTAINER_PID,
            &bundle(&t, "all", r#""isold.io/isolate":"true""#, Some("0")),
        ),
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("are not for containers")
            && err.contains("container all2 starts without isolated CPUs (--if-refused start)"),
        "{err}"
    );
    // Counted by reason in the status (and the metrics, which read the same count).
    eventually("the refusals counted", || {
        let (_, out, _) = common::isold_at(Some(&t.root), &["status", "--json"]);
        serde_json::from_str::<serde_json::Value>(&out)
            .is_ok_and(|st| st["status"]["claims_refused"]["not_allowed"] == 4)
    });
    let (_, out, _) = common::isold_at(Some(&t.root), &["status"]);
    assert!(
        out.contains("containers' claims refused: 4 (not_allowed 4)"),
        "{out}"
    );
    let (code, err) = hook(&t, &[], &state("dead1", "created", "4243", &asks));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("its process 4243 cannot be read"), "{err}");
    let (code, err) = hook(&t, &[], "{\"id\":\"x\"}");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("has no bundle"), "{err}");
    // The socket itself: what is not a request, or not a good one, is answered and refused.
    for (line, why) in [
        ("garbage\n", "not a request"),
        ("{\"restore\":{}}\n", "not a request"),
        (
            "{\"claim\":{\"container\":\"s1\",\"pid\":4242,\"cpus\":\"3,9\",\"request\":{\"isolate\":\"all\"}}}\n",
            "CPUs 9 are not online",
        ),
        (
            "{\"claim\":{\"container\":\"s2\",\"pid\":4242,\"cpus\":\"3\",\"request\":{\"isolate\":\"no\",\"pm_qos\":\"lots\"}}}\n",
            "PM QoS 'lots' is not n/a or a number",
        ),
        (
            "{\"claim\":{\"container\":\"s3\",\"pid\":4242,\"cpus\":\"3\",\"request\":{\"isolate\":\"no\",\"governor\":\"../x\"}}}\n",
            "governor '../x' is not a cpufreq governor name",
        ),
        (
            "{\"claim\":{\"container\":\"s4\",\"pid\":0,\"cpus\":\"3\",\"request\":{\"isolate\":\"all\"}}}\n",
            "pid 0 is not a process",
        ),
    ] {
        use std::io::{BufRead, Write};
        let mut s = std::os::unix::net::UnixStream::connect(t.root.join("run/isold/isold.sock")).unwrap();
        s.write_all(line.as_bytes()).unwrap();
        let mut answer = String::new();
        std::io::BufReader::new(&s).read_line(&mut answer).unwrap();
        let r: serde_json::Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(r["ok"], false, "{line}: {answer}");
        assert!(r["message"].as_str().unwrap().contains(why), "{line}: {answer}");
    }
    // A request of exactly MAX_INPUT bytes is read; one byte more is refused as too big.
    let max = libtaskisol::claims::MAX_INPUT;
    let ask = |bytes: &[u8]| -> serde_json::Value {
        use std::io::{BufRead, Write};
        let mut s =
            std::os::unix::net::UnixStream::connect(t.root.join("run/isold/isold.sock")).unwrap();
        s.write_all(bytes).unwrap();
        let mut answer = String::new();
        std::io::BufReader::new(&s).read_line(&mut answer).unwrap();
        serde_json::from_str(&answer).unwrap()
    };
    let mut exact = vec![b' '; max - 12];
    exact.extend_from_slice(b"{\"list\":{}}\n");
    assert_eq!(exact.len(), max);
    assert_eq!(ask(&exact)["ok"], true);
    let mut over = vec![b' '; max];
    over.extend_from_slice(b"\n");
    let r = ask(&over);
    assert!(r["message"].as_str().unwrap().contains("over"), "{r}");
    // Only root is answered, even when the socket's modes would let another user in.
    use std::os::unix::fs::PermissionsExt;
    let open_up = |p: &Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    for p in [
        t._dir.path(),
        &t.root,
        &t.root.join("run"),
        &t.root.join("run/isold"),
    ] {
        open_up(p, 0o755);
    }
    open_up(&t.root.join("run/isold/isold.sock"), 0o666);
    // `isold claims` as nobody: its exit code and stderr.
    let claims_as_nobody = || {
        let out = Command::new(env!("CARGO_BIN_EXE_isold"))
            .arg("--root")
            .arg(&t.root)
            .arg("claims")
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = claims_as_nobody();
    assert_eq!(code, Some(4), "{err}");
    assert!(
        err.contains("refused: only root may talk to isold (peer uid 65534)"),
        "{err}"
    );
    open_up(&t.root.join("run/isold"), 0o700);
    open_up(&t.root.join("run/isold/isold.sock"), 0o600);
    // With the modes back, another user cannot even connect: that is said as it is, not
    // taken for a daemon that is not running.
    let (code, err) = claims_as_nobody();
    assert_eq!(code, Some(4), "{err}");
    assert!(
        err.contains("cannot connect to") && err.contains("Permission denied"),
        "{err}"
    );
    let mode = |p: &str| {
        std::fs::metadata(t.root.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(
        (mode("run/isold"), mode("run/isold/isold.sock")),
        (0o700, 0o600)
    );
    assert_eq!(
        claimed_values(&t),
        before,
        "a refused claim changed something"
    );

    // The claim.
    let (code, err) = hook(&t, &[], &created);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("CPUs 3 isolated, PM QoS n/a on CPUs 3"),
        "{err}"
    );
    assert_eq!(read(&t, IRQ4).trim(), "0-1");
    assert_eq!(read(&t, DEFAULT_AFFINITY).trim(), "3");
    assert_eq!(read(&t, WQ_MASK).trim(), "3");
    assert_eq!(read(&t, PM_QOS3).trim(), "n/a");
    assert!(affinity_line(&read(&t, INIT_STATUS)).ends_with("\t0-1"));
    let own = read(&t, "/proc/4242/task/4242/status");
    assert!(
        affinity_line(&own).ends_with("\t3"),
        "the container's own process moved"
    );
    let (code, out, _) = common::isold_at(Some(&t.root), &["claims", "--json"]);
    assert_eq!(code, 0);
    let claims: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(claims[0]["container"], id);
    assert_eq!(claims[0]["isolated"], "3");
    let (code, out, _) = common::isold_at(Some(&t.root), &["claims"]);
    assert_eq!(
        (code, out.trim()),
        (
            0,
            "container 4f2c9a0e1b7d: CPUs 3, pid 4242: isolated 3, PM QoS n/a"
        )
    );
    // The scan thread keeps the new policy: a drifted IRQ is put off CPU 3 again.
    write(&t, IRQ4, "0-3");
    eventually("IRQ 4 off CPU 3 again", || read(&t, IRQ4).trim() == "0-1");
    // A second container claims CPU 1 beside it: both hold; its release leaves the first's.
    let second = bundle(&t, "second", r#""isold.io/isolate":"true""#, Some("1"));
    let (code, err) = hook(&t, &[], &state("b2", "created", CONTAINER_PID, &second));
    assert_eq!(code, 0, "{err}");
    assert_eq!(read(&t, IRQ4).trim(), "0");
    let (_, out, _) = common::isold_at(Some(&t.root), &["claims", "--json"]);
    let both: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(both.as_array().map(Vec::len), Some(2), "{out}");
    let (code, err) = hook(&t, &[], &state("b2", "stopped", "0", &second));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("container b2: CPUs 1 released"), "{err}");
    assert_eq!(read(&t, IRQ4).trim(), "0-1");
    let (_, out, _) = common::isold_at(Some(&t.root), &["claims", "--json"]);
    let one: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(one[0]["container"], id, "{out}");
    assert_eq!(one.as_array().map(Vec::len), Some(1), "{out}");

    // poststop gives everything back as it was before the claim.
    let (code, err) = hook(&t, &[], &stopped);
    assert_eq!(code, 0, "{err}");
    assert_eq!(claimed_values(&t), before);
    let (_, out, _) = common::isold_at(Some(&t.root), &["claims"]);
    assert_eq!(out.trim(), "no container claims CPUs");
    // A second poststop (or one of a container that claimed nothing) is harmless.
    let (code, err) = hook(&t, &[], &stopped);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!("container {id} holds no claim")),
        "{err}"
    );

    // Claimed again; then the daemon and the container are killed: the next start finds the
    // claim, its container gone, and gives the CPU back.
    let (code, err) = hook(&t, &[], &created);
    assert_eq!(code, 0, "{err}");
    assert_eq!(read(&t, PM_QOS3).trim(), "n/a");
    let mut c = c;
    let mut child = c.0.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(t.root.join("run/isold/claims.json").exists());
    std::fs::remove_dir_all(t.root.join("proc/4242")).unwrap();
    let c = start(&t, &[]);
    eventually("given back after the restart", || {
        claimed_values(&t) == before
    });
    eventually("the claim forgotten", || {
        !t.root.join("run/isold/claims.json").exists()
    });

    // A container killed while the daemon runs is found gone.
    add_container_process(&t);
    let (code, err) = hook(&t, &[], &created);
    assert_eq!(code, 0, "{err}");
    assert_eq!(read(&t, IRQ4).trim(), "0-1");
    std::fs::remove_dir_all(t.root.join("proc/4242")).unwrap();
    eventually("given back when the container is gone", || {
        claimed_values(&t) == before
    });
    let (code, log) = stop(c);
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains("its process 4242 is gone: releasing CPUs 3"),
        "{log}"
    );
    // The restart found the claim; a claim restores nothing (only its items are applied), a
    // release only the power value it set; nothing is said of zero values.
    assert!(
        log.contains("1 container claim(s) from before the start"),
        "{log}"
    );
    assert!(log.contains("release: CPUs 3 given back to "), "{log}");
    assert!(
        !log.contains(" 0 value(s)") && !log.contains("given back to 0"),
        "{log}"
    );
    for l in log
        .lines()
        .filter(|l| l.contains("no longer covers restored"))
    {
        assert!(l.contains("release: 1 value(s)"), "{l}");
    }
    assert!(
        !t.root.join("run/isold/isold.sock").exists(),
        "the socket is removed at the stop"
    );
    let (code, out, err) = common::isold_at(Some(&t.root), &["restore"]);
    assert_eq!(code, 0, "{out}{err}");
    add_container_process(&t);
    let _ = std::fs::remove_dir_all(t.root.join("run"));
    let _ = std::fs::remove_dir_all(untouched.join("run"));
    let mut diffs = Vec::new();
    for p in [IRQ4, DEFAULT_AFFINITY, WQ_MASK, PM_QOS3, INIT_STATUS] {
        let rel = p.trim_start_matches('/');
        if std::fs::read(t.root.join(rel)).unwrap() != std::fs::read(untouched.join(rel)).unwrap() {
            diffs.push(p);
        }
    }
    assert!(diffs.is_empty(), "not restored: {diffs:?}");
}

/// A claim whose record is lost while the daemon is down (a cut write, a corrupt or foreign
/// file) is given back at the next start although its container still runs: the state file
/// says what was narrowed, [containers] cpus what a claim could have taken. The bad file is
/// set aside for the administrator, and the daemon starts.
#[test]
fn a_claim_whose_record_is_lost_is_given_back_at_the_start() {
    for bad in ["{", "{\"version\":9,\"boot_id\":\"x\",\"claims\":[]}", ""] {
        let t = tree("isolated_cpus = \"2\"\n[containers]\ncpus = \"3\"\n");
        add_container_process(&t);
        let asks = bundle(&t, "asks", r#""isold.io/isolate":"true""#, Some("3"));
        let c = start(&t, &[]);
        eventually("started", || running(&t));
        // The configuration's values, without a claim.
        let before = claimed_values(&t);
        let (code, err) = hook(&t, &[], &state("lost1", "created", CONTAINER_PID, &asks));
        assert_eq!(code, 0, "{err}");
        assert_ne!(claimed_values(&t), before, "the claim changed nothing");
        kill9(c);
        let file = t.root.join("run/isold/claims.json");
        std::fs::write(&file, bad).unwrap();
        let c = start(&t, &[]);
        let ok = (0..50).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(100));
            claimed_values(&t) == before
        });
        if !ok {
            let now = claimed_values(&t);
            panic!(
                "{bad:?}: not given back: {now:?} vs {before:?}\n{}",
                kill9(c)
            );
        }
        let aside = t.root.join("run/isold/claims.json.bad");
        assert_eq!(std::fs::read_to_string(&aside).unwrap(), bad);
        // Its status is written after the give-back: wait for it, not for the values alone.
        eventually(&format!("the daemon started with {bad:?}"), || running(&t));
        let (_, out, _) = common::isold_at(Some(&t.root), &["claims"]);
        assert_eq!(out.trim(), "no container claims CPUs");
        let log = kill9(c);
        assert!(
            log.contains("claims.json.bad; starting without the containers' claims")
                && log.contains("reconcile: CPUs 3 given back to"),
            "{log}"
        );
    }
}

/// One claim isold cannot use in its file (a governor it never writes) is dropped alone at
/// the start, with a log line: the other tenant's claim loads and stays in force.
#[test]
fn a_bad_claim_in_the_file_is_dropped_alone() {
    let t = tree("isolated_cpus = \"2\"\n[containers]\ncpus = \"3\"\n");
    add_container_process(&t);
    let asks = bundle(&t, "asks", r#""isold.io/isolate":"true""#, Some("3"));
    let c = start(&t, &[]);
    eventually("started", || running(&t));
    let (code, err) = hook(&t, &[], &state("keep1", "created", CONTAINER_PID, &asks));
    assert_eq!(code, 0, "{err}");
    let claimed = claimed_values(&t);
    kill9(c);
    let file = t.root.join("run/isold/claims.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let mut bad = v["claims"][0].clone();
    bad["container"] = "bad1".into();
    bad["governor"] = "X".into();
    v["claims"].as_array_mut().unwrap().push(bad);
    std::fs::write(&file, serde_json::to_vec(&v).unwrap()).unwrap();
    let c = start(&t, &[]);
    eventually("started again", || running(&t));
    let (_, out, _) = common::isold_at(Some(&t.root), &["claims"]);
    assert!(out.contains("container keep1"), "{out}");
    assert!(!out.contains("bad1"), "{out}");
    assert_eq!(claimed_values(&t), claimed, "keep1's claim stays in force");
    let log = kill9(c);
    assert!(
        log.contains("claim 2 (\"bad1\"): its governor \"X\" is not one isold writes: dropped"),
        "{log}"
    );
}

/// A rootless runtime runs the hook as its user: a container that asks for isolated CPUs is
/// refused plainly (or starts unisolated with --if-refused start), one that asks nothing
/// starts, and its poststop is quiet.
#[test]
fn a_rootless_containers_claim_is_refused_plainly() {
    use std::os::unix::fs::PermissionsExt;
    let t = tree("isolated_cpus = \"2\"\n[containers]\ncpus = \"3\"\n");
    let _c = start(&t, &[]);
    eventually("started", || running(&t));
    // The rootless user's bundle, readable by it.
    let dir = tempfile::Builder::new()
        .prefix("isold-rootless")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let write_bundle = |name: &str, ann: &str| {
        let b = dir.path().join(name);
        std::fs::create_dir(&b).unwrap();
        std::fs::set_permissions(&b, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(
            b.join("config.json"),
            format!(
                r#"{{"annotations":{{{ann}}},"linux":{{"resources":{{"cpu":{{"cpus":"3"}}}}}}}}"#
            ),
        )
        .unwrap();
        b
    };
    let asks = write_bundle("asks", r#""isold.io/isolate":"true""#);
    let plain = write_bundle("plain", "");
    let as_nobody = |args: &[&str], stdin: &str| {
        use std::io::Write;
        let mut c = Command::new(env!("CARGO_BIN_EXE_isold"))
            .arg("--root")
            .arg(&t.root)
            .arg("hook")
            .args(args)
            .uid(65534)
            .gid(65534)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        let out = c.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = as_nobody(&[], &state("rl1", "created", "4242", &asks));
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        err.trim(),
        "isold: container rl1 asks for isolated CPUs, but it runs rootless (uid 65534): only root's containers (rootful podman, CRI-O, containerd) may claim CPUs"
    );
    let (code, err) = as_nobody(
        &["--if-refused", "start"],
        &state("rl1", "created", "4242", &asks),
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("container rl1 starts without isolated CPUs (--if-refused start)"),
        "{err}"
    );
    let (code, err) = as_nobody(&[], &state("rl2", "created", "4242", &plain));
    assert_eq!((code, err.as_str()), (Some(0), ""));
    let (code, err) = as_nobody(&[], &state("rl1", "stopped", "0", &asks));
    assert_eq!((code, err.as_str()), (Some(0), ""));
}

/// A container's name is the tenant's: with a newline and control characters in it, no
/// log line, hook message or `isold claims` line can pass for isold's own.
#[test]
fn a_containers_name_is_escaped_wherever_it_is_shown() {
    let t = tree("isolated_cpus = \"2\"\n[containers]\ncpus = \"3\"\n");
    add_container_process(&t);
    let c = start(&t, &[]);
    eventually("started", || running(&t));
    let name = "rt\nisold: corrected forged\r\u{1b}[2K";
    let ann = format!(
        r#""isold.io/isolate":"true","io.kubernetes.container.name":{}"#,
        serde_json::to_string(name).unwrap()
    );
    let b = bundle(&t, "named", &ann, Some("3"));
    let (code, err) = hook(&t, &[], &state("esc1", "created", CONTAINER_PID, &b));
    assert_eq!(code, 0, "{err}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(
        err.contains("container rt\\nisold: corrected forged\\r\\u{1b}[2K (esc1)"),
        "{err:?}"
    );
    let (_, out, _) = common::isold_at(Some(&t.root), &["claims"]);
    assert_eq!(out.lines().count(), 1, "{out:?}");
    assert!(!out.contains('\r') && !out.contains('\u{1b}'), "{out:?}");
    let (_, out, _) = common::isold_at(Some(&t.root), &["claims", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v[0]["name"], name,
        "the JSON keeps the name, escaped by JSON"
    );
    let (_, log) = stop(c);
    for line in log.lines() {
        assert!(
            line.starts_with("isold: ") && !line.contains('\r') && !line.contains('\u{1b}'),
            "{line:?}"
        );
    }
    assert!(!log.contains("\nisold: corrected forged"), "{log}");
}

/// containerd's side of NRI, as the test plays it: it accepts the plugin, answers its
/// registration and calls it as the runtime does.
struct Runtime {
    stream: std::os::unix::net::UnixStream,
    demux: libtaskisol::nri::mux::Demux,
    /// Replies of the plugin (conn 1), calls of the plugin (conn 2).
    replies: libtaskisol::nri::ttrpc::Reader,
    calls: libtaskisol::nri::ttrpc::Reader,
    next_stream: u32,
}

impl Runtime {
    /// Accept the plugin's connection on `listener` (within 10 s) and answer its
    /// RegisterPlugin: the name and index it registered with.
    fn accept(listener: &std::os::unix::net::UnixListener) -> (Runtime, String) {
        use libtaskisol::nri::{api, mux, ttrpc};
        listener.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let stream = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) => panic!("the plugin did not connect: {e}"),
            }
        };
        stream.set_nonblocking(false).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut rt = Runtime {
            stream,
            demux: Default::default(),
            replies: Default::default(),
            calls: Default::default(),
            next_stream: 1,
        };
        let m = rt.read(false);
        let req = ttrpc::Request::decode(&m.data).unwrap();
        assert_eq!(
            (req.service.as_str(), req.method.as_str()),
            (api::RUNTIME_SERVICE, "RegisterPlugin")
        );
        let f = libtaskisol::nri::wire::fields("test", &req.payload).unwrap();
        let text =
            |v: &libtaskisol::nri::wire::Value| libtaskisol::nri::wire::string("test", v).unwrap();
        let who = format!("{} {}", text(&f[0].1), text(&f[1].1));
        let reply = ttrpc::Message {
            stream: m.stream,
            kind: ttrpc::RESPONSE,
            flags: 0,
            data: Vec::new(),
        };
        use std::io::Write;
        rt.stream
            .write_all(&mux::frames(mux::RUNTIME_CONN, &reply.encode()))
            .unwrap();
        (rt, who)
    }

    /// The next message of the plugin: a reply on conn 1 (`reply`), or a call on conn 2.
    fn read(&mut self, reply: bool) -> libtaskisol::nri::ttrpc::Message {
        use std::io::Read;
        loop {
            let r = if reply {
                &mut self.replies
            } else {
                &mut self.calls
            };
            if let Some(m) = r.next_message().unwrap() {
                return m;
            }
            while let Some((conn, p)) = self.demux.next_frame().unwrap() {
                assert!(p.len() <= 4096, "a frame of {} bytes", p.len());
                match conn {
                    1 => self.replies.push(&p),
                    2 => self.calls.push(&p),
                    c => panic!("a frame for connection {c}"),
                }
            }
            let r = if reply {
                &mut self.replies
            } else {
                &mut self.calls
            };
            if let Some(m) = r.next_message().unwrap() {
                return m;
            }
            let mut buf = [0u8; 65536];
            let n = self.stream.read(&mut buf).expect("the plugin's answer");
            assert!(n > 0, "the plugin closed the connection");
            self.demux.push(&buf[..n]);
        }
    }

    /// Call the plugin's `method` with `payload`: its reply.
    fn call(&mut self, method: &str, payload: Vec<u8>) -> libtaskisol::nri::ttrpc::Response {
        use libtaskisol::nri::{api, mux, ttrpc};
        use std::io::Write;
        let req = ttrpc::Request {
            service: api::PLUGIN_SERVICE.into(),
            method: method.into(),
            payload,
            timeout_nano: 2_000_000_000,
        };
        let m = ttrpc::Message {
            stream: self.next_stream,
            kind: ttrpc::REQUEST,
            flags: 0,
            data: req.encode(),
        };
        self.next_stream += 2;
        self.stream
            .write_all(&mux::frames(mux::PLUGIN_CONN, &m.encode()))
            .unwrap();
        let r = self.read(true);
        assert_eq!((r.stream, r.kind), (m.stream, ttrpc::RESPONSE));
        ttrpc::Response::decode(&r.data).unwrap()
    }
}

/// isold as an NRI plugin of a runtime that speaks containerd's protocol: it registers as
/// `isold 90`, subscribes to the container lifecycle, fails the creation of a container
/// whose claim the rule refuses (with the reason), claims a started container's CPUs,
/// dials again at once when the runtime goes away, and at the new Synchronize (big pods
/// beside) releases the claim of a container that no longer exists.
#[test]
fn isold_is_an_nri_plugin_that_claims_and_reconciles() {
    use libtaskisol::nri::api::{self, Container, ContainerState, PodSandbox};
    use libtaskisol::nri::ttrpc::code;
    let sock_dir = tempfile::tempdir().unwrap();
    let sock = sock_dir.path().join("nri.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t = tree(&format!(
        "isolated_cpus = \"2\"\n[containers]\ncpus = \"3\"\nnri = true\nnri_socket = \"{}\"\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n",
        sock.display()
    ));
    add_container_process(&t);
    let c = start(&t, &[]);
    eventually("started", || running(&t));
    let before = claimed_values(&t);
    let (mut rt, who) = Runtime::accept(&listener);
    assert_eq!(who, "isold 90");
    let mut conf = libtaskisol::nri::wire::Encoder::default();
    conf.string(2, "containerd")
        .string(3, "2.1.9+unknown")
        .varint(4, 5000)
        .varint(5, 2000);
    let r = rt.call("Configure", conf.0);
    assert_eq!(r.code, code::OK, "{r:?}");
    assert_eq!(
        r.payload,
        api::configure_response(0x8 | 0x20 | 0x80 | 0x100 | 0x200 | 0x400)
    );
    let r = rt.call("Synchronize", Vec::new());
    assert_eq!((r.code, r.payload.len()), (code::OK, 0));
    let pod = PodSandbox {
        id: "pod1".into(),
        name: "rt".into(),
        annotations: [("isold.io/isolate".to_string(), "true".to_string())].into(),
        ..Default::default()
    };
    let container = |id: &str, cpus: &str, pid: u32| Container {
        id: id.into(),
        pod_sandbox_id: "pod1".into(),
        name: "rt".into(),
        state: ContainerState::Created,
        cpus: cpus.into(),
        pid,
        ..Default::default()
    };
    let request = |c: &Container| {
        let mut e = libtaskisol::nri::wire::Encoder::default();
        e.message(1, &pod.encode()).message(2, &c.encode());
        e.0
    };
    // A Burstable pod's container that asks: its cpuset is the shared pool, it is created
    // and nothing is claimed (the same CPUs as a Guaranteed one's would be refused below).
    let burstable = Container {
        cgroups_path: "kubepods-burstable-pod1_2.slice:cri-containerd:bu1".into(),
        ..container("bu1", "0-1", 0)
    };
    let r = rt.call("CreateContainer", request(&burstable));
    assert_eq!((r.code, r.payload.len()), (code::OK, 0), "{r:?}");
    assert_eq!(claimed_values(&t), before);
    // A Guaranteed pod's with a fractional CPU request, and one the kubelet's CPU manager
    // gave no exclusive CPUs (its state names another pod): the same, each said in the log.
    let fractional = Container {
        cgroups_path: "/kubepods/podf1/fr1".into(),
        shares: Some(1536),
        ..container("fr1", "0-1", 0)
    };
    let r = rt.call("CreateContainer", request(&fractional));
    assert_eq!((r.code, r.payload.len()), (code::OK, 0), "{r:?}");
    // The housekeeping CPUs (no kubelet state yet, so the kubelet has no word on a container
    // outside its pod cgroups): its creation fails, with the reason, and nothing changes.
    let r = rt.call("CreateContainer", request(&container("hk1", "0-1", 0)));
    assert_eq!(r.code, code::FAILED_PRECONDITION, "{r:?}");
    assert!(
        r.message
            .contains("claim refused: container rt (hk1): CPUs 0-1 are not for containers"),
        "{}",
        r.message
    );
    assert_eq!(claimed_values(&t), before);
    std::fs::create_dir_all(t.root.join("var/lib/kubelet")).unwrap();
    std::fs::write(
        t.root.join("var/lib/kubelet/cpu_manager_state"),
        r#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"u1":{"rt":"3"}},"checksum":0}"#,
    )
    .unwrap();
    // With the kubelet's state, a container outside its pod cgroups that it did not record
    // is refused, the reason naming its cgroups path (issue 48).
    let r = rt.call("CreateContainer", request(&container("hk2", "0-1", 0)));
    assert_eq!(r.code, code::FAILED_PRECONDITION, "{r:?}");
    assert!(
        r.message
            .contains("claim refused: it has no cgroups path, none of the kubelet's pod cgroups"),
        "{}",
        r.message
    );
    assert_eq!(claimed_values(&t), before);
    let unrecorded = Container {
        cgroups_path: "/kubepods/podu2/un1".into(),
        shares: Some(1024),
        ..container("un1", "0-1", 4242)
    };
    let r = rt.call("CreateContainer", request(&unrecorded));
    assert_eq!((r.code, r.payload.len()), (code::OK, 0), "{r:?}");
    let mut ev = libtaskisol::nri::wire::Encoder::default();
    ev.varint(1, 6)
        .message(2, &pod.encode())
        .message(3, &unrecorded.encode());
    assert_eq!(rt.call("StateChange", ev.0).code, code::OK);
    assert_eq!(claimed_values(&t), before);
    // CPU 3: created, then claimed at its start. The round trips are printed (BENCHMARKS.md:
    // what NRI adds to a container's creation and start), not asserted.
    let t0 = Instant::now();
    let r = rt.call("CreateContainer", request(&container("rt1", "3", 0)));
    let create = t0.elapsed();
    assert_eq!((r.code, r.payload.len()), (code::OK, 0), "{r:?}");
    let mut ev = libtaskisol::nri::wire::Encoder::default();
    ev.varint(1, 6)
        .message(2, &pod.encode())
        .message(3, &container("rt1", "3", 4242).encode());
    let t0 = Instant::now();
    let r = rt.call("StateChange", ev.0);
    let started = t0.elapsed();
    assert_eq!(r.code, code::OK, "{r:?}");
    eventually("claimed", || read(&t, IRQ4).trim() == "0-1");
    eprintln!(
        "NRI round trips: CreateContainer (admission) {:.2} ms, StartContainer (claim applied) {:.2} ms",
        create.as_secs_f64() * 1e3,
        started.as_secs_f64() * 1e3
    );
    let (_, out, _) = common::isold_at(Some(&t.root), &["claims", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v[0]["container"].as_str(), v[0]["source"].as_str()),
        (Some("rt1"), Some("nri"))
    );
    // An update to a cpuset the claim may not have (a housekeeping CPU) is refused with the
    // reason: the container keeps CPU 3, and its claim with it.
    let update = |cpus: &str| {
        let mut e = libtaskisol::nri::wire::Encoder::default();
        e.message(1, &pod.encode())
            .message(2, &container("rt1", "3", 4242).encode())
            .message(
                3,
                &api::Resources {
                    cpus: cpus.into(),
                    shares: Some(0),
                }
                .encode(),
            );
        e.0
    };
    let r = rt.call("UpdateContainer", update("1,3"));
    assert_eq!(r.code, code::FAILED_PRECONDITION, "{r:?}");
    assert!(
        r.message.contains("update to cpuset 1,3 refused") && r.message.contains("CPUs 1"),
        "{}",
        r.message
    );
    // The same cpuset again (the kubelet's reconcile): nothing to judge.
    assert_eq!(rt.call("UpdateContainer", update("3")).code, code::OK);
    // To 2-3, which the kubelet now records for it (rt1 has no pod cgroup, so only the
    // kubelet's record says its CPUs are its own): admitted, and after it the claim follows
    // the new cpuset.
    let kubelet_records = |cpus: &str| {
        std::fs::write(
            t.root.join("var/lib/kubelet/cpu_manager_state"),
            format!(r#"{{"policyName":"static","defaultCpuSet":"0-1","entries":{{"u1":{{"rt":"{cpus}"}}}},"checksum":0}}"#),
        )
        .unwrap()
    };
    kubelet_records("2-3");
    assert_eq!(rt.call("UpdateContainer", update("2-3")).code, code::OK);
    let post = |cpus: &str| {
        let mut e = libtaskisol::nri::wire::Encoder::default();
        e.varint(1, 9)
            .message(2, &pod.encode())
            .message(3, &container("rt1", cpus, 4242).encode());
        e.0
    };
    assert_eq!(rt.call("StateChange", post("2-3")).code, code::OK);
    let claim_cpus = || {
        let (_, out, _) = common::isold_at(Some(&t.root), &["claims", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        v[0]["cpus"].as_str().unwrap_or("none").to_string()
    };
    eventually("the claim follows the update", || claim_cpus() == "2-3");
    // An update the runtime applied anyway (another plugin, a runtime without isold): the
    // claim does not keep CPUs its container no longer has.
    assert_eq!(rt.call("StateChange", post("0-1")).code, code::OK);
    eventually("released after an update it cannot follow", || {
        claim_cpus() == "none"
    });
    eventually("given back", || claimed_values(&t) == before);
    kubelet_records("3");
    let mut ev = libtaskisol::nri::wire::Encoder::default();
    ev.varint(1, 6)
        .message(2, &pod.encode())
        .message(3, &container("rt1", "3", 4242).encode());
    assert_eq!(rt.call("StateChange", ev.0).code, code::OK);
    eventually("claimed again", || read(&t, IRQ4).trim() == "0-1");
    // isold and the kubelet: the claim of rt1 on CPU 3 is what the kubelet recorded for
    // container rt; once its state no longer has it, status and audit say so.
    let kubelet_said = || {
        let config = t.config.to_str().unwrap().to_string();
        let (_, out, _) =
            common::isold_at(Some(&t.root), &["--config", &config, "status", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["kubelet"].as_array().cloned().unwrap_or_default()
    };
    assert_eq!(kubelet_said(), Vec::<serde_json::Value>::new());
    std::fs::write(
        t.root.join("var/lib/kubelet/cpu_manager_state"),
        r#"{"policyName":"static","defaultCpuSet":"0-3","entries":{"u1":{"rt":"2"}},"checksum":0}"#,
    )
    .unwrap();
    let said: Vec<String> = kubelet_said()
        .iter()
        .map(|d| d["what"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        said.iter()
            .any(|w| w.contains("rt (rt1) claims CPUs 3, which the kubelet gave no container"))
            && said
                .iter()
                .any(|w| w.contains("shared pool 0-3 includes isolated CPUs 2")),
        "{said:#?}"
    );
    let config = t.config.to_str().unwrap().to_string();
    let (_, audit, _) = common::isold_at(
        Some(&t.root),
        &["--config", &config, "audit", "--duration", "0", "--json"],
    );
    assert!(
        audit.contains("\"name\": \"kubelet\"")
            && audit.contains("which the kubelet gave no container"),
        "{audit}"
    );
    // The runtime restarts: the plugin dials again at once (before the first second the
    // back-off used to wait); the new Synchronize, with five pods of 128 KiB of annotations
    // beside, does not list rt1.
    drop(rt);
    let dropped = Instant::now();
    let (mut rt, _) = Runtime::accept(&listener);
    let redial = dropped.elapsed();
    assert!(
        redial < Duration::from_millis(800),
        "dialled again after {redial:?}"
    );
    let r = rt.call("Configure", Vec::new());
    assert_eq!(r.code, code::OK);
    let mut sync = libtaskisol::nri::wire::Encoder::default();
    sync.message(1, &pod.encode());
    for i in 0..5 {
        let big = PodSandbox {
            id: format!("big{i}"),
            annotations: [(
                "kubectl.kubernetes.io/last-applied-configuration".to_string(),
                "x".repeat(128 << 10),
            )]
            .into(),
            ..Default::default()
        };
        sync.message(1, &big.encode());
    }
    let r = rt.call("Synchronize", sync.0);
    assert_eq!((r.code, r.payload.len()), (code::OK, 0));
    eventually("released at the synchronization", || {
        claimed_values(&t) == before
    });
    eventually("connected, in the metrics", || {
        http(port, "GET /metrics HTTP/1.0\r\n\r\n").contains("\nisold_nri_connected 1\n")
    });
    eventually("the reconnection in the status", || {
        status_json(&t)["status"]["nri"]
            .as_str()
            .is_some_and(|s| s.contains("registered with") && s.contains("connections: 2"))
    });
    // Every answer is timed: how many, the median and the worst, in the status.
    eventually("the answers' times in the status", || {
        status_json(&t)["status"]["nri"]
            .as_str()
            .is_some_and(|s| s.contains("; answers: ") && s.contains(" ms (of the last "))
    });
    // A method isold does not have (a newer runtime's) is UNIMPLEMENTED, so that the
    // runtime falls back to StateChange.
    let r = rt.call("PostStartContainer", Vec::new());
    assert_eq!(r.code, code::UNIMPLEMENTED);
    let (code, log) = stop(c);
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains("NRI: configured by containerd 2.1.9+unknown"),
        "{log}"
    );
    for said in [
        "container rt (fr1) asks for isolated CPUs, but its CPU request is not a whole number of CPUs (cpu shares 1536",
        "container rt (un1) asks for isolated CPUs, but the kubelet gave container rt of pod u2 no exclusive CPUs",
    ] {
        assert!(log.contains(said), "{said}: {log}");
    }
}

/// Whoever can put a socket at the NRI path is not trusted for it: a server that is not root
/// (nor isold's own user) is refused, said in the status and the log, and never registered
/// with.
#[test]
fn an_nri_server_that_is_not_root_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let sock_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(sock_dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let sock = sock_dir.path().join("nri.sock");
    /// Killed however the test ends.
    struct Server(std::process::Child);
    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    // A listener of nobody's at the path, holding what connects.
    let _server = Server(std::process::Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import socket, time\ns = socket.socket(socket.AF_UNIX)\ns.bind({:?})\ns.listen(8)\nkept = []\nwhile True:\n    kept.append(s.accept()[0])\n",
            sock.display().to_string()
        ))
        .uid(65534)
        .spawn()
        .expect("python3 runs as nobody"));
    eventually("nobody's server listens", || sock.exists());
    let t = tree(&format!(
        "isolated_cpus = \"2\"\n[containers]\ncpus = \"3\"\nnri = true\nnri_socket = \"{}\"\n",
        sock.display()
    ));
    add_container_process(&t);
    let c = start(&t, &[]);
    eventually("started", || running(&t));
    eventually("the server refused in the status", || {
        let (_, out, _) = common::isold_at(Some(&t.root), &["status"]);
        out.contains("not root")
    });
    let (_, out, _) = common::isold_at(Some(&t.root), &["status"]);
    assert!(
        out.contains("refused: the server runs as uid 65534, not root"),
        "{out}"
    );
    assert!(!out.contains("registered with"), "{out}");
    let (code, log) = stop(c);
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("uid 65534, not root"), "{log}");
}

/// A claim through the hook's socket is the hook's, whatever it says: a client that names
/// NRI as its source cannot make NRI's next synchronization release another's claim as its
/// own.
#[test]
fn a_hook_client_cannot_pass_for_nri() {
    use std::io::{BufRead, Write};
    let t = tree("isolated_cpus = \"2\"\n[containers]\ncpus = \"3\"\n");
    add_container_process(&t);
    let c = start(&t, &[]);
    eventually("started", || running(&t));
    let mut s =
        std::os::unix::net::UnixStream::connect(t.root.join("run/isold/isold.sock")).unwrap();
    s.write_all(b"{\"claim\":{\"container\":\"fake1\",\"source\":\"nri\",\"pid\":4242,\"cpus\":\"3\",\"request\":{\"isolate\":\"all\"}}}\n")
        .unwrap();
    let mut answer = String::new();
    std::io::BufReader::new(&s).read_line(&mut answer).unwrap();
    assert!(answer.contains("\"ok\":true"), "{answer}");
    let (_, out, _) = common::isold_at(Some(&t.root), &["claims", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["container"], "fake1", "{out}");
    assert!(v[0].get("source").is_none(), "{out}");
    let (code, log) = stop(c);
    assert_eq!(code, 0, "{log}");
}

/// On a CPU the configuration isolates, a container adds only its power settings, and its
/// release puts the configuration's back (not the kernel's original).
#[test]
fn a_claim_on_configured_cpus_adds_its_power_settings_and_gives_the_configurations_back() {
    let t = tree("isolated_cpus = \"2\"\n[items]\npm_qos = 3\n[containers]\ncpus = \"3\"\n");
    add_container_process(&t);
    let pm2 = "/sys/devices/system/cpu/cpu2/power/pm_qos_resume_latency_us";
    let b = bundle(
        &t,
        "b",
        r#""cpu-c-states.crio.io":"max_latency:7""#,
        Some("2-3"),
    );
    let c = start(&t, &[]);
    eventually("applied", || read(&t, pm2).trim() == "3");
    let (code, err) = hook(&t, &[], &state("pw1", "created", CONTAINER_PID, &b));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(": PM QoS 7 on CPUs 2-3"), "{err}");
    assert_eq!((read(&t, pm2).trim(), read(&t, PM_QOS3).trim()), ("7", "7"));
    // No isolation asked: CPU 3 keeps its IRQs, and `isold claims` lists the power only.
    assert_eq!(read(&t, IRQ4).trim(), "0-1,3");
    let (code, out, _) = common::isold_at(Some(&t.root), &["claims"]);
    assert_eq!(
        (code, out.trim()),
        (0, "container pw1: CPUs 2-3, pid 4242: PM QoS 7")
    );
    let (code, err) = hook(&t, &[], &state("pw1", "stopped", "0", &b));
    assert_eq!(code, 0, "{err}");
    assert_eq!((read(&t, pm2).trim(), read(&t, PM_QOS3).trim()), ("3", "0"));
    let (code, log) = stop(c);
    assert_eq!(code, 0, "{log}");
}
