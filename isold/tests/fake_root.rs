//! isold on trees captured from a real kernel: tests/fixtures/debian-6.12-rt-isold (Debian's
//! 6.12-rt booted without isolation arguments in the rt612-isold QEMU scenario, captured
//! before any change: sysctls, THP/KSM, machinecheck, workqueues, PM QoS, IRQs and every task's
//! stat/status/cgroup) plus the scenario's own tasks (a sleeper, a pinned workload, a DPDK-like
//! pmd thread) in the kernel's formats. apply, verify, restore, an interrupted apply then
//! restore, originals byte-identical.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

mod common;
use common::copy_dir;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/debian-6.12-rt-isold"
);

/// A kernel booted with isolcpus/nohz_full on 2-3, for `auto`.
const FIXTURE_ISOL23: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/debian-6.12-rt-isol23"
);

/// ksoftirqd/2 in the captured tree.
const KSOFTIRQD2: u32 = 43;

fn put(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

/// A single-threaded user task in the kernel's formats, started at 1000 + tid ticks.
fn add_task(r: &Path, tid: u32, comm: &str, affinity: &str, cgroup: &str) {
    put(r, &format!("proc/{tid}/task/{tid}/stat"), &format!(
        "{tid} ({comm}) S 1 {tid} {tid} 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 {} 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n",
        1000 + tid
    ));
    put(
        r,
        &format!("proc/{tid}/task/{tid}/status"),
        &format!("Name:\t{comm}\nUid:\t0\t0\t0\t0\nCpus_allowed_list:\t{affinity}\n"),
    );
    put(r, &format!("proc/{tid}/cgroup"), &format!("0::{cgroup}\n"));
}

/// The captured tree plus the scenario's tasks.
fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    copy_dir(Path::new(FIXTURE), r);
    for (tid, comm, aff) in [
        (300, "sleep", "0-3"),
        (301, "workload", "3"),
        (302, "pmd-c03/id:7", "0-3"),
    ] {
        add_task(r, tid, comm, aff, "/");
    }
    put(r, "etc/isold/isold.toml", "isolated_cpus = \"2-3\"\n");
    dir
}

/// The captured tree with `config` as /etc/isold/isold.toml.
fn tree_with(config: &str) -> tempfile::TempDir {
    let t = tree();
    put(t.path(), "etc/isold/isold.toml", config);
    t
}

/// The files whose content differs between two snapshots (or that only one has).
fn changed_paths(
    before: &BTreeMap<PathBuf, Vec<u8>>,
    after: &BTreeMap<PathBuf, Vec<u8>>,
) -> Vec<PathBuf> {
    let keys: std::collections::BTreeSet<&PathBuf> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .cloned()
        .collect()
}

/// Fields 40 and 41 of a stat line (rt_priority, policy).
fn sched_fields(stat: &str) -> (String, String) {
    let f: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .collect();
    (f[37].to_string(), f[38].to_string())
}

fn snapshot(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(base: &Path, d: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let ty = e.file_type().unwrap();
            if ty.is_dir() {
                if p != base.join("run") {
                    walk(base, &p, out);
                }
            } else if ty.is_symlink() {
                // A link (/sys/class/net/DEV) is its target.
                let to = std::fs::read_link(&p).unwrap();
                out.insert(
                    p.strip_prefix(base).unwrap().into(),
                    to.into_os_string().into_encoded_bytes(),
                );
            } else {
                out.insert(
                    p.strip_prefix(base).unwrap().into(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn isold(root: &Path, args: &[&str]) -> (i32, String, String) {
    common::isold_at(Some(root), args)
}

fn read(root: &Path, rel: &str) -> String {
    std::fs::read_to_string(root.join(rel)).unwrap()
}

#[test]
fn apply_verify_restore_on_a_captured_tree() {
    let t = tree();
    let r = t.path();
    let before = snapshot(r);
    // plan: what apply will change, changing nothing.
    let (rc, plan, err) = isold(r, &["plan"]);
    assert_eq!(rc, 0, "{plan}{err}");
    assert!(
        plan.contains("would change      sysctl kernel.timer_migration: is 1, policy wants 0\n"),
        "{plan}"
    );
    assert!(
        plan.contains("thread affinities would be moved (-v lists them)"),
        "{plan}"
    );
    assert!(
        plan.lines().last().unwrap().starts_with("plan: ")
            && plan.lines().last().unwrap().contains(" would change"),
        "{plan}"
    );
    // What changes comes first, in words: what moves off the isolated CPUs, then settings.
    assert!(
        plan.starts_with("isold plan: isolated CPUs 2-3, housekeeping CPUs 0-1\nwould move off CPUs 2-3: 16 IRQs and the default IRQ affinity, 21 threads, 3 workqueue masks\nwould set: 10 sysctls, 13 kthread priorities, 4 machine-check settings, 2 PM QoS limits, KSM\n  would change "),
        "{plan}"
    );
    // One vocabulary: a mask file's value with its CPUs as a list beside it, units named.
    assert!(
        plan.contains(
            "would change      default_smp_affinity: is f (CPUs 0-3), policy wants 3 (CPUs 0-1)\n"
        ),
        "{plan}"
    );
    assert!(
        plan.contains("CPU 3 PM QoS resume latency limit (us; 0: none): is 0, policy wants 3\n"),
        "{plan}"
    );
    // The kernel-managed kthreads in one line, each thread's CPUs counted; no label twice.
    assert!(
        plan.contains("  not changeable    49 kernel threads whose affinity the kernel manages (PF_NO_SETAFFINITY): 25 on CPUs 0-3, 12 on CPU 2, 12 on CPU 3 (-v lists them)\n"),
        "{plan}"
    );
    assert!(!plan.contains("not changeable    kthread"), "{plan}");
    let labels: Vec<&str> = plan
        .lines()
        .filter_map(|l| l.strip_prefix("  would change      "))
        .filter_map(|l| l.split(": ").next())
        .collect();
    let unique: std::collections::BTreeSet<&&str> = labels.iter().collect();
    assert_eq!(unique.len(), labels.len(), "a label twice: {plan}");
    let (rc, plan_v, _) = isold(r, &["plan", "-v"]);
    assert_eq!(rc, 0);
    let changes = |t: &str| t.lines().filter(|l| l.contains("would change ")).count();
    assert!(
        changes(&plan_v) > changes(&plan),
        "the threads are summed up, -v lists them: {plan}\n{plan_v}"
    );
    assert_eq!(
        plan_v
            .lines()
            .filter(|l| l.contains("(PF_NO_SETAFFINITY), CPUs "))
            .count(),
        49,
        "-v lists each: {plan_v}"
    );
    assert_eq!(snapshot(r), before, "plan changes nothing");
    let ids = |json: &str, statuses: &[&str]| -> std::collections::BTreeSet<String> {
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        v["outcomes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| statuses.contains(&o["status"].as_str().unwrap()))
            .map(|o| o["id"].as_str().unwrap().to_string())
            .collect()
    };
    let (rc, plan_json, _) = isold(r, &["plan", "--json"]);
    assert_eq!(rc, 0);
    let planned = ids(&plan_json, &["deviates"]);
    assert!(planned.len() > 10, "{plan_json}");
    assert_eq!(snapshot(r), before, "plan --json changes nothing");
    let (rc, apply_json, err) = isold(r, &["apply", "--json"]);
    assert_eq!(rc, 0, "{apply_json}{err}");
    assert_eq!(
        planned,
        ids(&apply_json, &["changed", "move_pending", "waiting"]),
        "plan lists what apply changes"
    );
    let (rc, plan, _) = isold(r, &["plan"]);
    assert_eq!(rc, 0);
    assert!(
        !plan.contains("would change"),
        "nothing left to change: {plan}"
    );
    let (rc, out, _) = isold(r, &["restore"]);
    assert_eq!(rc, 0, "{out}");
    assert_eq!(snapshot(r), before);

    let (rc, out, err) = isold(r, &["apply"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(
        out.starts_with("isold apply: isolated CPUs 2-3, housekeeping CPUs 0-1\n"),
        "{out}"
    );
    assert!(
        out.contains("changed           sysctl kernel.timer_migration: changed: 1 -> 0"),
        "{out}"
    );
    assert!(out.contains("IRQ 4 (ttyS0): changed: 0-3 -> 0-1"), "{out}");
    // Delivered to CPU 3 when captured: the IO-APIC moves it when it next fires.
    assert!(
        out.contains("IRQ 1 (i8042): set, move pending (effective CPUs still 3: the kernel moves it when it next fires)"),
        "{out}"
    );
    assert_eq!(read(r, "proc/sys/kernel/printk"), "4\t4\t1\t7\n");
    assert_eq!(
        read(r, "sys/devices/virtual/workqueue/writeback/cpumask"),
        "3\n"
    );
    assert!(read(r, "proc/300/task/300/status").contains("Cpus_allowed_list:\t0-1\n"));
    assert!(read(r, "proc/1/task/1/status").contains("Cpus_allowed_list:\t0-1\n"));
    // The workload, the allow-listed pmd thread and the per-CPU kthread stay.
    assert!(read(r, "proc/301/task/301/status").contains("Cpus_allowed_list:\t3\n"));
    assert!(read(r, "proc/302/task/302/status").contains("Cpus_allowed_list:\t0-3\n"));
    let k = format!("proc/{KSOFTIRQD2}/task/{KSOFTIRQD2}");
    assert!(read(r, &format!("{k}/status")).contains("Cpus_allowed_list:\t2\n"));
    // ksoftirqd/2 gets SCHED_FIFO 2 (fields 40/41 of stat).
    assert_eq!(
        sched_fields(&read(r, &format!("{k}/stat"))),
        ("2".into(), "1".into())
    );

    // What the kernel refused is recorded, so verify reports it as such and not as a
    // deviation.
    let state: serde_json::Value = serde_json::from_str(&read(r, "run/isold/state.json")).unwrap();
    assert_eq!(
        state["unchangeable"][format!("task:{KSOFTIRQD2}:76")],
        "the kernel manages its affinity (PF_NO_SETAFFINITY), CPUs 2",
        "{state}"
    );

    let (rc, out, _) = isold(r, &["verify"]);
    assert_eq!(rc, 0, "{out}");
    assert!(out.contains("(clean)"), "{out}");
    let (rc, out, _) = isold(r, &["apply"]);
    assert_eq!(rc, 0);
    assert!(
        !out.lines().last().unwrap().contains("changed"),
        "second apply: {out}"
    );

    std::fs::write(r.join("proc/sys/vm/stat_interval"), "1\n").unwrap();
    let (rc, out, _) = isold(r, &["verify", "--json"]);
    assert_eq!(rc, 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let dev: Vec<&serde_json::Value> = v["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["status"] == "deviates")
        .collect();
    assert_eq!(dev.len(), 1, "{dev:?}");
    assert_eq!(dev[0]["id"], "sysctl:vm.stat_interval");
    assert_eq!(dev[0]["current"], "1");
    assert_eq!(dev[0]["want"], "10");

    let (rc, out, err) = isold(r, &["restore"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(
        out.starts_with("isold restore: isolated CPUs 2-3\n"),
        "restore names the CPUs of the state file: {out}"
    );
    assert_eq!(snapshot(r), before, "restore puts back every byte");
    assert!(!r.join("run/isold/state.json").exists());
    let (rc, out, _) = isold(r, &["restore"]);
    assert_eq!(rc, 0);
    assert!(
        out.starts_with("note: no state file (") && out.contains("nothing to restore"),
        "no header without a state file: {out}"
    );
}

#[test]
fn an_interrupted_apply_never_records_a_changed_value_as_original() {
    let t = tree();
    let r = t.path();
    let before = snapshot(r);
    assert_eq!(isold(r, &["apply"]).0, 0);
    let state1 = read(r, "run/isold/state.json");
    // As if apply had been killed after persisting the originals and writing only some:
    // half the values are back to their originals, the others are changed.
    std::fs::write(r.join("proc/sys/kernel/timer_migration"), "1\n").unwrap();
    std::fs::write(r.join("proc/irq/4/smp_affinity_list"), "0-3\n").unwrap();
    let (rc, out, _) = isold(r, &["apply"]);
    assert_eq!(rc, 0, "{out}");
    assert_eq!(
        read(r, "run/isold/state.json"),
        state1,
        "the originals are kept as first recorded"
    );
    assert_eq!(isold(r, &["restore"]).0, 0);
    assert_eq!(snapshot(r), before);
}

#[test]
fn an_invalid_configuration_changes_nothing() {
    let t = tree();
    let r = t.path();
    let before = snapshot(r);
    for (text, want) in [
        (
            "isolated_cpus = \"2-7\"\n",
            "isold.toml:1: isolated_cpus: CPUs 4-7 are not online (online: 0-3)",
        ),
        (
            "isolated_cpus = \"0-3\"\n",
            "isold.toml:1: isolated_cpus: no housekeeping CPU left: 0-3 covers every online CPU",
        ),
        (
            "isolated_cpus = \"2-3\"\nprest = \"realtime\"\n",
            "isold.toml:2: unknown key 'prest' (did you mean 'preset'?)",
        ),
    ] {
        std::fs::write(r.join("etc/isold/isold.toml"), text).unwrap();
        let (rc, out, err) = isold(r, &["apply"]);
        assert_eq!(rc, 6, "{text}: {out}");
        assert!(
            err.starts_with("isold: ") && err.contains(want),
            "{text}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
    std::fs::write(r.join("etc/isold/isold.toml"), "isolated_cpus = \"2-3\"\n").unwrap();
    assert_eq!(snapshot(r), before);
    assert!(!r.join("run/isold/state.json").exists());
}

#[test]
fn auto_takes_the_kernels_isolated_cpus() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    copy_dir(Path::new(FIXTURE_ISOL23), r);
    put(r, "etc/isold/isold.toml", "");
    std::fs::write(r.join("etc/isold/isold.toml"), "isolated_cpus = \"auto\"\n").unwrap();
    let (rc, out, err) = isold(r, &["check"]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        out.contains("isolated CPUs 2-3, housekeeping CPUs 0-1"),
        "{out}"
    );
}

/// `[containers] cpus` that would leave no housekeeping CPU with `isolated_cpus` is refused
/// by check (and so by apply and run), naming the line; one that leaves some is accepted.
#[test]
fn check_refuses_containers_cpus_that_leave_no_housekeeping_cpu() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    copy_dir(Path::new(FIXTURE_ISOL23), r);
    put(r, "etc/isold/isold.toml", "");
    let conf = r.join("etc/isold/isold.toml");
    std::fs::write(
        &conf,
        "isolated_cpus = \"2-3\"\n\n[containers]\ncpus = \"0-1\"\n",
    )
    .unwrap();
    let (rc, _, err) = isold(r, &["check"]);
    assert_eq!(rc, 6, "{err}");
    assert!(
        err.contains(":4: containers.cpus: no housekeeping CPU left: 0-1 and isolated_cpus 2-3 cover every online CPU (0-3)"),
        "{err}"
    );
    std::fs::write(
        &conf,
        "isolated_cpus = \"2\"\n[containers]\ncpus = \"1,3\"\n",
    )
    .unwrap();
    let (rc, out, err) = isold(r, &["check"]);
    assert_eq!(rc, 0, "{out}{err}");
}

/// cgroup_partition: the directory is made an isolated partition of the isolated CPUs, the
/// workload pinned inside them moves in (and keeps its CPU), and restore removes the
/// directory, moves the workload back and takes `cpuset` out of the subtree again.
#[test]
fn cgroup_partition_moves_the_workload_in_and_restore_takes_it_all_back() {
    let t = tree_with("isolated_cpus = \"2-3\"\n[items]\ncgroup_partition = true\n");
    let r = t.path();
    let before = snapshot(r);
    let (rc, out, err) = isold(r, &["apply"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(
        out.contains(
            "changed           isolated partition /sys/fs/cgroup/isolated: changed: absent, 1 workload(s) outside: 301 (workload) -> isolated partition of CPUs 2-3, 1 workload(s) moved in"
        ),
        "{out}"
    );
    assert_eq!(read(r, "sys/fs/cgroup/cgroup.subtree_control"), "+cpuset\n");
    assert_eq!(read(r, "sys/fs/cgroup/isolated/cpuset.cpus"), "2-3\n");
    assert_eq!(
        read(r, "sys/fs/cgroup/isolated/cpuset.cpus.partition"),
        "isolated\n"
    );
    assert_eq!(read(r, "proc/301/cgroup"), "0::/isolated\n");
    assert!(read(r, "proc/301/task/301/status").contains("Cpus_allowed_list:\t3\n"));
    // The other tasks stay where they were (moved off 2-3 by the tasks item, not into it).
    assert_eq!(read(r, "proc/300/cgroup"), "0::/\n");

    let (rc, out, _) = isold(r, &["verify", "-v"]);
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.contains("already right     isolated partition /sys/fs/cgroup/isolated"),
        "{out}"
    );

    // A workload taken out by hand is a deviation verify names.
    put(r, "proc/301/cgroup", "0::/\n");
    let (rc, out, _) = isold(r, &["verify"]);
    assert_eq!(rc, 1, "{out}");
    assert!(
        out.contains("1 workload(s) outside: 301 (workload)"),
        "{out}"
    );
    put(r, "proc/301/cgroup", "0::/isolated\n");

    let (rc, out, err) = isold(r, &["restore"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(
        out.contains(
            "restored          isolated partition /sys/fs/cgroup/isolated: restored: removed"
        ),
        "{out}"
    );
    assert!(!r.join("sys/fs/cgroup/isolated").exists());
    // The fake root's subtree_control keeps the text restore wrote; the kernel's reads back
    // the controllers left.
    assert_eq!(
        changed_paths(&before, &snapshot(r)),
        vec![PathBuf::from("sys/fs/cgroup/cgroup.subtree_control")],
        "{out}"
    );
    assert_eq!(read(r, "sys/fs/cgroup/cgroup.subtree_control"), "-cpuset\n");
}

/// A workload the allow-list keeps in its cgroup would lose its CPUs to the partition: the
/// item is refused before any cgroup write, naming the workload.
#[test]
fn cgroup_partition_refuses_to_strand_an_allow_listed_workload() {
    let t = tree_with("isolated_cpus = \"2-3\"\n[items]\ncgroup_partition = true\n[tasks]\nallow_cgroup = [\"/machine.slice\"]\n");
    let r = t.path();
    put(r, "proc/301/cgroup", "0::/machine.slice/vm1.scope\n");
    let (rc, out, err) = isold(r, &["apply"]);
    assert_eq!(rc, 1, "{out}{err}");
    assert!(
        out.contains("failed            isolated partition /sys/fs/cgroup/isolated: failed: not made: the partition would take the CPUs of allow-listed workload(s) that must stay in their cgroup: 301 (workload) in /machine.slice/vm1.scope (allow_cgroup /machine.slice)"),
        "{out}"
    );
    assert!(!r.join("sys/fs/cgroup/isolated").exists());
    assert_eq!(read(r, "sys/fs/cgroup/cgroup.subtree_control"), "");
    assert_eq!(read(r, "proc/301/cgroup"), "0::/machine.slice/vm1.scope\n");
}

/// A second apply moves in a workload started since the first and records where it came
/// from; after an interrupted apply the recorded "created" stands, so a failed second apply
/// still removes the directory the first one made.
#[test]
fn cgroup_partition_second_apply_adds_workloads_and_keeps_the_first_original() {
    let t = tree_with("isolated_cpus = \"2-3\"\n[items]\ncgroup_partition = true\n");
    let r = t.path();
    let before = snapshot(r);
    assert_eq!(isold(r, &["apply"]).0, 0);
    put(r, "proc/303/task/303/stat", "303 (late) S 1 303 303 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 1303 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 2 0 0 0 0 0\n");
    put(
        r,
        "proc/303/task/303/status",
        "Name:\tlate\nUid:\t0\t0\t0\t0\nCpus_allowed_list:\t2\n",
    );
    // In a cgroup of the administrator's own (one of a systemd unit is refused).
    put(r, "proc/303/cgroup", "0::/rt\n");
    let (rc, out, err) = isold(r, &["apply"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(out.contains("1 workload(s) moved in"), "{out}");
    assert_eq!(read(r, "proc/303/cgroup"), "0::/isolated\n");
    assert_eq!(isold(r, &["restore"]).0, 0);
    assert_eq!(read(r, "proc/303/cgroup"), "0::/rt\n");
    assert!(!r.join("sys/fs/cgroup/isolated").exists());
    std::fs::remove_dir_all(r.join("proc/303")).unwrap();

    // Killed after the directory was made, before the partition was: it exists, and this
    // time the partition does not read back "isolated" (a file that reads empty stands in
    // for the kernel's "isolated invalid (...)"). The undo must remove the directory, which
    // the first apply created.
    assert_eq!(isold(r, &["apply"]).0, 0);
    let part = r.join("sys/fs/cgroup/isolated/cpuset.cpus.partition");
    std::fs::remove_file(&part).unwrap();
    std::os::unix::fs::symlink("/dev/null", &part).unwrap();
    let (rc, out, _) = isold(r, &["apply"]);
    assert_eq!(rc, 1, "{out}");
    assert!(
        out.contains("cpuset.cpus.partition ''; undone, nothing left behind"),
        "{out}"
    );
    assert!(!r.join("sys/fs/cgroup/isolated").exists(), "{out}");
    assert_eq!(isold(r, &["restore"]).0, 0);
    assert_eq!(
        changed_paths(&before, &snapshot(r)),
        vec![PathBuf::from("sys/fs/cgroup/cgroup.subtree_control")]
    );
}

/// Another user's process pinned inside the isolated CPUs (uid 1000, `taskset -c 3 sleep`
/// in their login session's scope) has no say: the partition is made, with root's workload
/// moved in, and the other one is neither moved nor a reason to refuse; apply says so. The
/// same user's process split across the CPUs vetoes nothing either.
#[test]
fn another_users_pinned_process_does_not_veto_the_partition() {
    let t = tree_with("isolated_cpus = \"2-3\"\n[items]\ncgroup_partition = true\n");
    let r = t.path();
    add_task(
        r,
        4242,
        "sleep",
        "3",
        "/user.slice/user-1000.slice/session-7.scope",
    );
    let status = read(r, "proc/4242/task/4242/status")
        .replace("Uid:\t0\t0\t0\t0", "Uid:\t1000\t1000\t1000\t1000");
    put(r, "proc/4242/task/4242/status", &status);
    // A second thread of another of their processes outside the CPUs: a split process.
    add_task(
        r,
        4243,
        "split",
        "3",
        "/user.slice/user-1000.slice/session-7.scope",
    );
    put(
        r,
        "proc/4243/task/4243/status",
        &read(r, "proc/4243/task/4243/status")
            .replace("Uid:\t0\t0\t0\t0", "Uid:\t1000\t1000\t1000\t1000"),
    );
    put(
        r,
        "proc/4243/task/4244/stat",
        &read(r, "proc/4243/task/4243/stat").replacen("4243 (split)", "4244 (split)", 1),
    );
    put(
        r,
        "proc/4243/task/4244/status",
        &read(r, "proc/4243/task/4243/status")
            .replace("Cpus_allowed_list:\t3", "Cpus_allowed_list:\t0-1"),
    );
    let (rc, out, err) = isold(r, &["apply"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(!out.contains("not made"), "{out}");
    assert!(out.contains("1 workload(s) moved in"), "{out}");
    assert!(
        out.contains("not moved in, no workload (not root's, not a libvirt machine's): 4242 (sleep, uid 1000), 4243 (split, uid 1000); the kernel gives them CPUs outside the partition"),
        "{out}"
    );
    assert_eq!(
        read(r, "sys/fs/cgroup/isolated/cpuset.cpus.partition").trim(),
        "isolated"
    );
    assert_eq!(read(r, "proc/301/cgroup"), "0::/isolated\n");
    assert_eq!(
        read(r, "proc/4242/cgroup"),
        "0::/user.slice/user-1000.slice/session-7.scope\n"
    );
    assert_eq!(isold(r, &["restore"]).0, 0);
    assert_eq!(read(r, "proc/301/cgroup"), "0::/\n");
}

const IRQBALANCE_DEBIAN: &str = include_str!("data/irqbalance-1.9.2-1-debian12");

/// The configuration-file items: the KVM modprobe.d file (only parameters the module has),
/// irqbalance's banned CPUs in Debian's own defaults file (from the irqbalance 1.9.2-1
/// package), and, for cpu-partitioning, systemd's CPUAffinity drop-in. restore removes the
/// files isold created and puts back the defaults file byte for byte.
#[test]
fn config_file_items_are_written_and_restored_byte_for_byte() {
    let t = tree();
    let r = t.path();
    put(r, "etc/default/irqbalance", IRQBALANCE_DEBIAN);
    // kvm is loaded (kvm_intel is not: its ple_gap option must not be written).
    put(r, "sys/module/kvm/parameters/nx_huge_pages", "auto\n");
    put(r, "sys/module/kvm/parameters/kvmclock_periodic_sync", "Y\n");
    let before = snapshot(r);
    let (rc, out, err) = isold(r, &["apply"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert_eq!(
        read(r, "etc/modprobe.d/isold-kvm.conf"),
        "# Written by isold (realtime KVM options); removed by `isold restore`.\noptions kvm kvmclock_periodic_sync=0 nx_huge_pages=0\n"
    );
    let irqb = read(r, "etc/default/irqbalance");
    assert_eq!(
        irqb,
        format!("{IRQBALANCE_DEBIAN}IRQBALANCE_BANNED_CPULIST=2-3\n"),
        "the commented example stays, the setting is appended"
    );
    assert!(
        out.contains("kvm: the module options take effect when the kvm modules are next loaded"),
        "{out}"
    );
    assert!(
        out.contains("irqbalance: restart it (systemctl try-restart irqbalance)"),
        "{out}"
    );
    assert!(!r.join("etc/systemd/system.conf.d").exists());
    let (rc, out, _) = isold(r, &["verify"]);
    assert_eq!(rc, 0, "{out}");

    // Edited by hand after apply: a deviation.
    put(r, "etc/default/irqbalance", IRQBALANCE_DEBIAN);
    let (rc, out, _) = isold(r, &["verify"]);
    assert_eq!(rc, 1, "{out}");
    assert!(
        out.contains("deviates          /etc/default/irqbalance: is other content"),
        "{out}"
    );
    put(r, "etc/default/irqbalance", &irqb);

    let (rc, out, err) = isold(r, &["restore"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert_eq!(snapshot(r), before, "{out}");
    assert!(!r.join("etc/modprobe.d").exists());

    // cpu-partitioning: systemd and its services on the housekeeping CPUs.
    put(
        r,
        "etc/isold/isold.toml",
        "isolated_cpus = \"2-3\"\npreset = \"cpu-partitioning\"\n",
    );
    let before = snapshot(r);
    let (rc, out, err) = isold(r, &["apply"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert_eq!(
        read(r, "etc/systemd/system.conf.d/isold-cpuaffinity.conf"),
        "# Written by isold: systemd and its services on the housekeeping CPUs.\n[Manager]\nCPUAffinity=0-1\n"
    );
    assert!(
        out.contains("systemd CPUAffinity: takes effect after `systemctl daemon-reexec`"),
        "{out}"
    );
    assert_eq!(isold(r, &["restore"]).0, 0);
    assert!(
        !r.join("etc/systemd").exists(),
        "the directories apply made are gone too"
    );
    assert_eq!(snapshot(r), before);
}

/// An apply with other CPUs after the administrator edited the files isold writes (a
/// reload, a restart with a changed configuration): restore takes out isold's lines alone.
/// The administrator's line in irqbalance's defaults stays, and so do their lines in the
/// drop-ins isold created (which are then theirs: kept, isold's lines gone).
#[test]
fn a_second_apply_keeps_the_administrators_lines_at_restore() {
    let t = tree_with("isolated_cpus = \"3\"\npreset = \"cpu-partitioning\"\n");
    let r = t.path();
    put(r, "etc/default/irqbalance", IRQBALANCE_DEBIAN);
    put(r, "sys/module/kvm/parameters/nx_huge_pages", "auto\n");
    put(r, "sys/module/kvm/parameters/kvmclock_periodic_sync", "Y\n");
    let (rc, out, err) = isold(r, &["apply"]);
    assert_eq!(rc, 0, "{out}{err}");
    const DROP_IN: &str = "etc/systemd/system.conf.d/isold-cpuaffinity.conf";
    let admin = "IRQBALANCE_ARGS=\"--journal\"\n";
    let drop_in_admin = "DefaultTimeoutStopSec=20s\n";
    put(
        r,
        "etc/default/irqbalance",
        &format!("{}{admin}", read(r, "etc/default/irqbalance")),
    );
    put(r, DROP_IN, &format!("{}{drop_in_admin}", read(r, DROP_IN)));
    put(
        r,
        "etc/isold/isold.toml",
        "isolated_cpus = \"2-3\"\npreset = \"cpu-partitioning\"\n",
    );
    let (rc, out, err) = isold(r, &["apply"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert_eq!(
        read(r, "etc/default/irqbalance"),
        format!("{IRQBALANCE_DEBIAN}IRQBALANCE_BANNED_CPULIST=2-3\n{admin}")
    );
    assert!(read(r, DROP_IN).contains("CPUAffinity=0-1\n"));
    let (rc, out, err) = isold(r, &["restore"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert_eq!(
        read(r, "etc/default/irqbalance"),
        format!("{IRQBALANCE_DEBIAN}{admin}")
    );
    assert_eq!(read(r, DROP_IN), drop_in_admin);

    // The KVM options file: the administrator's own options line for the module stays.
    put(r, "etc/isold/isold.toml", "isolated_cpus = \"3\"\n");
    assert_eq!(isold(r, &["apply"]).0, 0);
    const KVM: &str = "etc/modprobe.d/isold-kvm.conf";
    assert!(read(r, KVM).contains("options kvm kvmclock_periodic_sync=0 nx_huge_pages=0\n"));
    let kvm_admin = "options kvm ignore_msrs=1\n";
    put(r, KVM, &format!("{}{kvm_admin}", read(r, KVM)));
    put(r, "etc/isold/isold.toml", "isolated_cpus = \"2-3\"\n");
    assert_eq!(isold(r, &["apply"]).0, 0);
    assert_eq!(isold(r, &["restore"]).0, 0);
    assert_eq!(read(r, KVM), kvm_admin);
}

/// Only the sysctl items, so nothing is "not changeable": one sysctl the kernel takes but
/// does not keep (it reads back empty) fails, yet keeps its original (the write happened:
/// restore must be able to undo whatever it did), and the others are still applied and
/// restored.
#[test]
fn a_failed_target_keeps_its_original_and_the_rest_are_restored() {
    let t = tree();
    let r = t.path();
    let mut cfg = String::from("isolated_cpus = \"2-3\"\n[items]\n");
    for i in [
        "thp",
        "workqueue",
        "machinecheck",
        "ksm",
        "irq_affinity",
        "tasks",
        "kthread_priority",
        "pm_qos",
        "cpufreq",
        "kvm",
        "irqbalance",
        "printk",
    ] {
        cfg.push_str(&format!("{i} = false\n"));
    }
    put(r, "etc/isold/isold.toml", &cfg);
    let stubborn = r.join("proc/sys/kernel/timer_migration");
    std::fs::remove_file(&stubborn).unwrap();
    std::os::unix::fs::symlink("/dev/null", &stubborn).unwrap();
    // A file of the running kernel that takes no write: the write is refused, nothing
    // changed, no original is kept for it, and the others' originals stay.
    let refusing = r.join("proc/sys/kernel/hung_task_timeout_secs");
    std::fs::remove_file(&refusing).unwrap();
    std::os::unix::fs::symlink("/proc/version", &refusing).unwrap();
    let before = snapshot(r);
    let (rc, out, _) = isold(r, &["apply"]);
    assert_eq!(rc, 1, "{out}");
    assert!(
        out.contains("failed            sysctl kernel.hung_task_timeout_secs: failed: failed to write '600' to "),
        "{out}"
    );
    assert!(
        out.contains("failed            sysctl kernel.timer_migration: failed: wrote '0' to "),
        "{out}"
    );
    assert!(
        out.contains("changed           sysctl vm.stat_interval: changed: 1 -> 10"),
        "{out}"
    );
    assert!(
        !out.contains("note:"),
        "no item that needs a note changed: {out}"
    );
    let state = read(r, "run/isold/state.json");
    assert!(state.contains("vm.stat_interval"), "{state}");
    assert!(state.contains("sysctl:kernel.timer_migration"), "{state}");
    assert!(!state.contains("hung_task"), "{state}");
    let (rc, out, err) = isold(r, &["restore"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(
        out.contains("restored          sysctl kernel.timer_migration: restored: "),
        "{out}"
    );
    assert_eq!(snapshot(r), before, "{out}");
}

/// A state file from an earlier boot: its kernel values mean nothing now (the reboot reset
/// them), only the files on disk are restored, and a new apply records fresh originals.
#[test]
fn a_state_file_from_an_earlier_boot_keeps_only_the_files() {
    let t = tree();
    let r = t.path();
    put(r, "etc/default/irqbalance", IRQBALANCE_DEBIAN);
    let before = read(r, "etc/default/irqbalance");
    assert_eq!(isold(r, &["apply"]).0, 0);
    put(
        r,
        "proc/sys/kernel/random/boot_id",
        "00000000-0000-4000-8000-000000000002\n",
    );
    // "After the reboot" the kernel is back at its defaults.
    put(r, "proc/sys/vm/stat_interval", "1\n");
    let (rc, out, _) = isold(r, &["apply"]);
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.contains("recorded in an earlier boot; kept only its on-disk files' originals"),
        "{out}"
    );
    let state = read(r, "run/isold/state.json");
    assert!(
        state.contains("00000000-0000-4000-8000-000000000002"),
        "{state}"
    );
    // stat_interval's original is the value of this boot, recorded afresh.
    assert!(state.contains("\"content\":\"1\\n\""), "{state}");
    put(
        r,
        "proc/sys/kernel/random/boot_id",
        "00000000-0000-4000-8000-000000000003\n",
    );
    let (rc, out, _) = isold(r, &["restore"]);
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.contains("the runtime state file is from an earlier boot: runtime values were reset by the reboot; only files were restored"),
        "{out}"
    );
    assert_eq!(read(r, "etc/default/irqbalance"), before);
    assert_eq!(
        read(r, "proc/sys/vm/stat_interval"),
        "10\n",
        "a runtime value of another boot is not written"
    );
}

/// A value that cannot be put back is reported, exits 1 and stays in the state file, so a
/// second restore (once the cause is fixed) still has it; the others are done and leave.
#[test]
fn a_restore_that_fails_keeps_its_original_for_the_next_restore() {
    let t = tree();
    let r = t.path();
    let before = snapshot(r);
    assert_eq!(isold(r, &["apply"]).0, 0);
    let f = r.join("proc/sys/vm/stat_interval");
    std::fs::remove_file(&f).unwrap();
    std::os::unix::fs::symlink("/dev/null", &f).unwrap();
    let (rc, out, _) = isold(r, &["restore"]);
    assert_eq!(rc, 1, "{out}");
    assert!(
        out.contains("failed            sysctl vm.stat_interval: failed: wrote '1' to "),
        "{out}"
    );
    assert!(
        out.contains("note: 1 original(s) could not be restored and stay in "),
        "{out}"
    );
    let state = read(r, "run/isold/state.json");
    assert!(state.contains("vm.stat_interval"), "{state}");
    assert!(
        !state.contains("timer_migration"),
        "restored ones leave: {state}"
    );
    std::fs::remove_file(&f).unwrap();
    put(r, "proc/sys/vm/stat_interval", "10\n");
    let (rc, out, _) = isold(r, &["restore"]);
    assert_eq!(rc, 0, "{out}");
    assert_eq!(snapshot(r), before);
    assert!(!r.join("run/isold/state.json").exists());
}

/// cpufreq on a machine that has it (the captured VM has none): the isolated CPUs get the
/// governor, a CPU that does not offer it is reported and left alone, and restore puts
/// every governor back byte for byte.
#[test]
fn cpufreq_governors_are_set_where_offered_and_restored() {
    let t = tree_with("isolated_cpus = \"1-3\"\n[items]\ncpufreq = \"performance\"\n");
    let r = t.path();
    for cpu in 0..4 {
        let dir = format!("sys/devices/system/cpu/cpu{cpu}/cpufreq");
        // The kernel's formats: one name and a newline; the list ends with a space.
        put(r, &format!("{dir}/scaling_governor"), "schedutil\n");
        let offered = if cpu == 1 {
            "schedutil powersave \n"
        } else {
            "performance schedutil powersave \n"
        };
        put(r, &format!("{dir}/scaling_available_governors"), offered);
    }
    let before = snapshot(r);
    let (rc, out, err) = isold(r, &["apply"]);
    assert_eq!(rc, 0, "{out}{err}");
    for cpu in [2, 3] {
        assert!(
            out.contains(&format!(
                "CPU {cpu} cpufreq governor: changed: schedutil -> performance"
            )),
            "{out}"
        );
        assert_eq!(
            read(
                r,
                &format!("sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor")
            )
            .trim_end(),
            "performance"
        );
    }
    assert!(
        out.contains("CPU 1 cpufreq governor: not changeable: governor performance not offered (available: schedutil powersave)"),
        "{out}"
    );
    assert_eq!(
        read(r, "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor"),
        "schedutil\n"
    );
    assert_eq!(
        read(r, "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        "schedutil\n"
    );
    let (rc, out, _) = isold(r, &["verify"]);
    assert_eq!(rc, 0, "{out}");
    let (rc, out, err) = isold(r, &["restore"]);
    assert_eq!(rc, 0, "{out}{err}");
    let after = snapshot(r);
    let changed: Vec<PathBuf> = changed_paths(&before, &after)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("cpufreq"))
        .collect();
    assert_eq!(changed, Vec::<PathBuf>::new());
}

/// The items that read every thread are independent: kernel-thread priorities without the
/// tasks item, and the partition's workloads with neither.
#[test]
fn thread_items_work_one_without_the_other() {
    let t = tree_with("isolated_cpus = \"2-3\"\n[items]\ntasks = false\n");
    let r = t.path();
    let (rc, out, err) = isold(r, &["apply"]);
    assert_eq!(rc, 0, "{out}{err}");
    let k = format!("proc/{KSOFTIRQD2}/task/{KSOFTIRQD2}");
    assert_eq!(
        sched_fields(&read(r, &format!("{k}/stat"))),
        ("2".into(), "1".into())
    );
    assert!(
        read(r, "proc/300/task/300/status").contains("Cpus_allowed_list:\t0-3\n"),
        "tasks item off: not moved"
    );

    let t = tree_with("isolated_cpus = \"2-3\"\n[items]\ntasks = false\nkthread_priority = false\ncgroup_partition = true\n");
    let r = t.path();
    let (rc, out, err) = isold(r, &["apply"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert_eq!(read(r, "proc/301/cgroup"), "0::/isolated\n");
    assert_eq!(
        sched_fields(&read(
            r,
            &format!("proc/{KSOFTIRQD2}/task/{KSOFTIRQD2}/stat")
        ))
        .1,
        "0",
        "priorities off: untouched"
    );
}

/// A task in an allow-listed cgroup (a VM under libvirt's machine.slice) keeps its CPUs; a
/// task in another cgroup, also one whose name merely starts the same, is moved.
#[test]
fn allow_listed_cgroups_keep_their_tasks() {
    let t = tree_with("isolated_cpus = \"2-3\"\n[tasks]\nallow_cgroup = [\"/machine.slice\"]\n");
    let r = t.path();
    add_task(r, 303, "qemu-vm", "0-3", "/machine.slice/vm1.scope");
    add_task(r, 304, "other", "0-3", "/machine.slicex");
    let (rc, out, err) = isold(r, &["apply", "-v"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(
        out.contains("task 303 (qemu-vm): left alone: allow-listed cgroup /machine.slice"),
        "{out}"
    );
    assert!(read(r, "proc/303/task/303/status").contains("Cpus_allowed_list:\t0-3\n"));
    assert!(read(r, "proc/304/task/304/status").contains("Cpus_allowed_list:\t0-1\n"));
    assert!(read(r, "proc/300/task/300/status").contains("Cpus_allowed_list:\t0-1\n"));
    // Tasks already off the isolated CPUs are no targets at all.
    assert!(!out.contains("task 1 (init): already right"), "{out}");
}

/// A state file edited to send an original elsewhere (`/proc/sys/../../somewhere`): that
/// entry is reported, nothing is written where it points, and every other original is
/// restored.
#[test]
fn a_tampered_entry_is_reported_and_skipped_and_the_rest_restored() {
    let t = tree();
    let r = t.path();
    put(r, "somewhere", "precious\n");
    let before = snapshot(r);
    assert_eq!(isold(r, &["apply"]).0, 0);
    let state = read(r, "run/isold/state.json");
    let tampered = state.replace(
        "\"path\":\"/proc/sys/vm/stat_interval\"",
        "\"path\":\"/proc/sys/../../somewhere\"",
    );
    assert_ne!(tampered, state);
    put(r, "run/isold/state.json", &tampered);
    let (rc, out, _) = isold(r, &["restore"]);
    assert_eq!(rc, 1, "{out}");
    assert!(
        out.contains("failed            sysctl vm.stat_interval: failed: not restored: the state file's entry is not one isold records (/proc/sys/../../somewhere is not the file of sysctl:vm.stat_interval (/proc/sys/vm/stat_interval)); dropped from the state file\n"),
        "{out}"
    );
    assert_eq!(read(r, "somewhere"), "precious\n");
    assert_eq!(
        changed_paths(&before, &snapshot(r)),
        [PathBuf::from("proc/sys/vm/stat_interval")],
        "everything else is restored: {out}"
    );
    assert_eq!(read(r, "proc/sys/vm/stat_interval"), "10\n");
    assert!(!r.join("run/isold/state.json").exists());
}

/// The temporary files isold writes (its state files, an edited configuration file) are
/// created exclusively: a symlink left under their names is removed, never written through.
#[test]
fn temporary_files_are_never_written_through_a_symlink() {
    let t = tree();
    let r = t.path();
    put(r, "etc/default/irqbalance", IRQBALANCE_DEBIAN);
    put(r, "victim", "precious\n");
    for link in [
        "run/isold/.state.json.tmp",
        "var/lib/isold/.state.json.tmp",
        "etc/default/.irqbalance.isold-tmp",
    ] {
        let l = r.join(link);
        std::fs::create_dir_all(l.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(r.join("victim"), &l).unwrap();
    }
    let (rc, out, err) = isold(r, &["apply"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert_eq!(read(r, "victim"), "precious\n");
    assert!(read(r, "etc/default/irqbalance").ends_with("IRQBALANCE_BANNED_CPULIST=2-3\n"));
    for f in ["run/isold/state.json", "var/lib/isold/state.json"] {
        assert!(
            std::fs::symlink_metadata(r.join(f)).unwrap().is_file(),
            "{f}"
        );
    }
    let (rc, out, err) = isold(r, &["restore"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert_eq!(read(r, "victim"), "precious\n");
    assert_eq!(read(r, "etc/default/irqbalance"), IRQBALANCE_DEBIAN);
}

fn mode_of(p: &Path) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).unwrap();
    (m.mode() & 0o7777, m.uid())
}

/// restore takes out isold's own line of irqbalance's defaults: a line the admin added since
/// stays, the file keeps its owner and mode (apply keeps them too); a line of isold's that
/// the admin changed is not guessed at: the file is left as it is and reported. The state
/// directories are 0700.
#[test]
fn restore_undoes_isolds_own_lines_and_keeps_owner_and_mode() {
    let t = tree();
    let r = t.path();
    let f = r.join("etc/default/irqbalance");
    put(r, "etc/default/irqbalance", IRQBALANCE_DEBIAN);
    std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    // Owned by another user where the test may give it one.
    let owner = if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::chown(&f, Some(1000), Some(1000)).unwrap();
        1000
    } else {
        nix::unistd::geteuid().as_raw()
    };
    let (rc, out, err) = isold(r, &["apply"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert_eq!(mode_of(&f), (0o600, owner), "apply keeps owner and mode");
    for d in ["run/isold", "var/lib/isold"] {
        assert_eq!(mode_of(&r.join(d)).0, 0o700, "{d}");
    }
    let admin = "IRQBALANCE_ARGS=\"--journal\"\n";
    let applied = read(r, "etc/default/irqbalance");
    put(r, "etc/default/irqbalance", &format!("{applied}{admin}"));
    let (rc, out, err) = isold(r, &["restore"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(
        out.contains("restored          /etc/default/irqbalance: restored: isold's lines taken out, later edits kept"),
        "{out}"
    );
    assert_eq!(
        read(r, "etc/default/irqbalance"),
        format!("{IRQBALANCE_DEBIAN}{admin}")
    );
    assert_eq!(mode_of(&f), (0o600, owner), "restore keeps owner and mode");

    // The admin changes isold's own line: restore cannot tell whose it is.
    assert_eq!(isold(r, &["apply"]).0, 0);
    let edited = read(r, "etc/default/irqbalance").replace(
        "IRQBALANCE_BANNED_CPULIST=2-3",
        "IRQBALANCE_BANNED_CPULIST=1-3",
    );
    put(r, "etc/default/irqbalance", &edited);
    let (rc, out, _) = isold(r, &["restore"]);
    assert_eq!(rc, 1, "{out}");
    assert!(
        out.contains("changed since isold wrote it (its line \"IRQBALANCE_BANNED_CPULIST=2-3\" is gone): left as it is; edit it by hand"),
        "{out}"
    );
    assert_eq!(read(r, "etc/default/irqbalance"), edited);
    assert!(read(r, "var/lib/isold/state.json").contains("/etc/default/irqbalance"));
}

/// A state file cut short (a full disk, a bad copy): every command that needs it says what is
/// wrong and what the admin can do, and changes nothing; `isold run` exits 6, on which
/// isold.service does not restart.
#[test]
fn a_corrupt_state_file_says_what_to_do_and_changes_nothing() {
    let t = tree();
    let r = t.path();
    assert_eq!(isold(r, &["apply"]).0, 0);
    let state = read(r, "run/isold/state.json");
    put(r, "run/isold/state.json", &state[..state.len() / 2]);
    put(r, "proc/sys/vm/stat_interval", "1\n");
    let before = snapshot(r);
    for cmd in ["apply", "restore"] {
        let (rc, out, err) = isold(r, &[cmd]);
        assert_eq!(rc, 6, "{cmd}: {out}");
        assert!(
            err.contains("run/isold/state.json: not a usable isold state file: it ends early ("),
            "{cmd}: {err}"
        );
        assert!(
            err.contains("Nothing was changed") && err.contains("state.json.broken"),
            "{cmd}: {err}"
        );
    }
    assert_eq!(snapshot(r), before);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_isold"))
        .arg("--root")
        .arg(r)
        .arg("run")
        .env_remove("INVOCATION_ID")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if t0.elapsed() > std::time::Duration::from_secs(20) {
            child.kill().unwrap();
            panic!("isold run did not exit on a corrupt state file");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(code, Some(6), "{err}");
    assert!(err.contains("not a usable isold state file"), "{err}");
    assert_eq!(snapshot(r), before);
}

/// verify names the files that hold what the policy wants but are not in effect yet, and what
/// each waits for: the kvm options until the module is loaded again (a parameter the loaded
/// module has with another value), systemd's drop-in until the next boot (written after it),
/// irqbalance's banned CPUs until irqbalance restarts (it started before the change), the
/// GRUB drop-in until update-grub and a reboot (the running kernel lacks its arguments). Each
/// stops waiting when that happened; none is a deviation (exit 0).
#[test]
fn verify_says_which_written_files_wait_and_for_what() {
    let t = tree_with("isolated_cpus = \"2-3\"\n[items]\nsystemd_cpuaffinity = true\n");
    let r = t.path();
    put(r, "etc/default/irqbalance", IRQBALANCE_DEBIAN);
    put(r, "sys/module/kvm/parameters/kvmclock_periodic_sync", "Y\n");
    put(r, "sys/module/kvm/parameters/nx_huge_pages", "N\n");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // Booted 1000 s ago; irqbalance (pid 400) started 14 s after the boot.
    put(
        r,
        "proc/stat",
        &format!("cpu  1 2 3 4\nbtime {}\n", now - 1000),
    );
    add_task(r, 400, "irqbalance", "0-1", "/");
    put(r, "proc/400/comm", "irqbalance\n");
    put(r, "proc/400/stat", &read(r, "proc/400/task/400/stat"));
    assert_eq!(isold(r, &["apply"]).0, 0);
    let (rc, out, _) = isold(r, &["verify"]);
    assert_eq!(rc, 0, "waiting is no deviation: {out}");
    for want in [
        "  set, waiting      /etc/modprobe.d/isold-kvm.conf: set, takes effect after the kvm modules are loaded again (or a reboot): kvm.kvmclock_periodic_sync is Y, the file says 0\n",
        "  set, waiting      /etc/systemd/system.conf.d/isold-cpuaffinity.conf: set, takes effect after the next boot (or `systemctl daemon-reexec`): written after systemd (PID 1) started\n",
        "  set, waiting      /etc/default/irqbalance: set, takes effect after a restart of irqbalance (systemctl try-restart irqbalance): pid 400 read /etc/default/irqbalance before it was changed\n",
    ] {
        assert!(out.contains(want), "{want}\n{out}");
    }
    assert!(out.contains(" 3 set, waiting"), "{out}");
    // A parameter that already has the file's value does not wait.
    assert!(!out.contains("nx_huge_pages"), "{out}");

    // The module loaded again, a boot after the drop-in, irqbalance restarted.
    put(r, "sys/module/kvm/parameters/kvmclock_periodic_sync", "N\n");
    put(
        r,
        "proc/stat",
        &format!("cpu  1 2 3 4\nbtime {}\n", now + 10),
    );
    let (rc, out, _) = isold(r, &["verify"]);
    assert_eq!(rc, 0, "{out}");
    assert!(!out.contains("waiting"), "{out}");
    put(
        r,
        "proc/stat",
        &format!("cpu  1 2 3 4\nbtime {}\n", now - 1000),
    );
    let stat = read(r, "proc/400/task/400/stat");
    // Started 2000 s after that boot: after the change.
    put(
        r,
        "proc/400/stat",
        &stat.replace(" 1400 0 0 ", " 200000 0 0 "),
    );
    let (_, out, _) = isold(r, &["verify"]);
    assert!(!out.contains("restart of irqbalance"), "{out}");
    assert!(out.contains("next boot"), "{out}");

    // The GRUB drop-in waits for update-grub and a reboot, until the kernel has its
    // arguments.
    let (rc, _, err) = isold(r, &["bootargs", "--write-grub"]);
    assert_eq!(rc, 0, "{err}");
    let (rc, out, _) = isold(r, &["verify"]);
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.contains("  set, waiting      /etc/default/grub.d/isold.cfg: set, takes effect after update-grub and a reboot: the running kernel lacks isolcpus=managed_irq,domain,2-3 nohz_full=2-3 "),
        "{out}"
    );
    let args =
        libtaskisol::policy::bootargs::drop_in_args(&read(r, "etc/default/grub.d/isold.cfg"))
            .join(" ");
    put(r, "proc/cmdline", &format!("console=ttyS0 {args}\n"));
    let (_, out, _) = isold(r, &["verify"]);
    assert!(
        !out.contains("grub"),
        "in effect, and right: not listed\n{out}"
    );
}

/// An IRQ the administrator pinned to an isolated CPU for the workload (the NIC queue that
/// feeds its thread), named in `[irqs] allow` by its action name or its number: apply leaves
/// it exactly where it is while every other movable IRQ moves, verify finds nothing to say,
/// and restore, having recorded nothing for it, leaves it too.
#[test]
fn an_allowed_irq_stays_on_its_isolated_cpu() {
    for allow in ["\"ttyS*\"", "4", "\"4\""] {
        let t = tree_with(&format!(
            "isolated_cpus = \"2-3\"\n[irqs]\nallow = [{allow}]\n"
        ));
        let r = t.path();
        put(r, "proc/irq/4/smp_affinity_list", "3\n");
        put(r, "proc/irq/4/smp_affinity", "8\n");
        let (rc, out, err) = isold(r, &["apply", "-v"]);
        assert_eq!(rc, 0, "{out}{err}");
        assert!(
            out.contains(
                "left alone        IRQ 4 (ttyS0): left alone: the workload's IRQ ([irqs] allow "
            ),
            "{allow}: {out}"
        );
        assert_eq!(read(r, "proc/irq/4/smp_affinity_list"), "3\n");
        assert_eq!(
            read(r, "proc/irq/1/smp_affinity_list"),
            "0-1\n",
            "the others move: {out}"
        );
        let (rc, out, _) = isold(r, &["verify"]);
        assert_eq!(rc, 0, "{out}");
        assert!(!read(r, "run/isold/state.json").contains("\"irq:4\""));
        let (rc, out, _) = isold(r, &["restore"]);
        assert_eq!(rc, 0, "{out}");
        assert_eq!(read(r, "proc/irq/4/smp_affinity_list"), "3\n");
        assert_eq!(read(r, "proc/irq/1/smp_affinity_list"), "0-3\n");
    }
    // Without the allow-list it moves, as before.
    let t = tree();
    let r = t.path();
    put(r, "proc/irq/4/smp_affinity_list", "3\n");
    assert_eq!(isold(r, &["apply"]).0, 0);
    assert_eq!(read(r, "proc/irq/4/smp_affinity_list"), "0-1\n");
}

/// A sysctl the file names that the kernel lacks is a mistake said before anything changes,
/// with the closest name this kernel has (judged by the tree's own /proc/sys); a preset's
/// sysctl the kernel lacks is only "not present".
#[test]
fn a_misspelled_sysctl_is_an_error_with_the_closest_name() {
    for (key, want) in [
        ("kernel.prinkt", "sysctl kernel.prinkt: this kernel has no /proc/sys/kernel/prinkt (did you mean 'kernel.printk'?)"),
        ("krnel.printk", "sysctl krnel.printk: this kernel has no /proc/sys/krnel/printk (did you mean 'kernel.printk'?)"),
        ("vm/stat_intervall", "sysctl vm/stat_intervall: this kernel has no /proc/sys/vm/stat_intervall (did you mean 'vm/stat_interval'?)"),
    ] {
        let t = tree_with(&format!(
            "isolated_cpus = \"2-3\"\n[items]\nprintk = false\n[sysctl]\n\"{key}\" = 4\n"
        ));
        let r = t.path();
        let before = snapshot(r);
        for cmd in ["check", "apply"] {
            let (rc, out, err) = isold(r, &[cmd]);
            assert_eq!(rc, 6, "{cmd}: {out}");
            assert_eq!(
                err,
                format!("isold: {}:5: {want}\n", r.join("etc/isold/isold.toml").display())
            );
        }
        assert_eq!(snapshot(r), before, "nothing changed");
    }
    // kernel.numa_balancing (the preset's) is absent from the captured VM: not an error.
    let t = tree();
    let (rc, out, _) = isold(t.path(), &["apply", "-v"]);
    assert_eq!(rc, 0, "{out}");
    assert!(
        out.contains("not present       sysctl kernel.numa_balancing"),
        "{out}"
    );
}

/// The partition never takes what is not its own, and each refusal changes nothing of it: a
/// cgroup systemd manages, a workload in a unit's cgroup (named, with the systemd way), a
/// process with threads on both sides (QEMU's emulator and its vCPUs), a directory that holds
/// tasks or cgroups isold did not put there.
#[test]
fn the_partition_refuses_what_is_not_its_own() {
    let partition_parts = |r: &Path| {
        let mut s = snapshot(r);
        s.retain(|p, _| p.starts_with("sys/fs/cgroup") || p.ends_with("cgroup"));
        s
    };
    let refused = |config: &str, setup: &dyn Fn(&Path), want: &str| {
        let t = tree_with(config);
        let r = t.path();
        setup(r);
        let before = partition_parts(r);
        let (rc, out, _) = isold(r, &["apply"]);
        assert_eq!(rc, 1, "{out}");
        assert!(
            out.contains(&format!(
                "failed            isolated partition {}",
                config
                    .split('"')
                    .nth(3)
                    .unwrap_or("/sys/fs/cgroup/isolated")
            )) && out.contains(want),
            "{want}\n{out}"
        );
        assert_eq!(partition_parts(r), before, "nothing of it changed: {out}");
        let state = std::fs::read_to_string(r.join("run/isold/state.json")).unwrap_or_default();
        assert!(!state.contains("cgroup_partition"), "no original: {state}");
    };
    let on = "isolated_cpus = \"2-3\"\n[items]\ncgroup_partition = true\n";
    refused(
        "isolated_cpus = \"2-3\"\n[items]\ncgroup_partition = \"/sys/fs/cgroup/system.slice\"\n",
        &|r| put(r, "sys/fs/cgroup/system.slice/cgroup.procs", "1\n"),
        "not made: /sys/fs/cgroup/system.slice belongs to systemd (system.slice): isold does not make a partition of a cgroup systemd manages; give the unit AllowedCPUs=2-3 and, on systemd 261 and later, CPUSetPartition=isolated",
    );
    refused(
        on,
        &|r| add_task(r, 310, "rtapp", "3", "/system.slice/rtapp.service"),
        "not made: workload(s) 310 (rtapp) in rtapp.service run in a systemd unit's cgroup: isold does not move a task out of its unit; give the unit AllowedCPUs=2-3 (systemctl set-property UNIT AllowedCPUs=2-3) and, on systemd 261 and later, CPUSetPartition=isolated",
    );
    refused(
        on,
        &|r| {
            add_task(r, 320, "qemu-system-x86", "0-1", "/machine/qemu-1");
            for (tid, comm, cpus) in [(321, "CPU 0/TCG", "2"), (322, "CPU 1/TCG", "3")] {
                put(r, &format!("proc/320/task/{tid}/stat"), &read(r, "proc/320/task/320/stat").replacen("320 (qemu-system-x86)", &format!("{tid} ({comm})"), 1));
                put(r, &format!("proc/320/task/{tid}/status"), &format!("Name:\t{comm}\nCpus_allowed_list:\t{cpus}\n"));
            }
        },
        "not made: process(es) 320 (qemu-system-x86: 2 threads inside, e.g. CPU 0/TCG on 2; 1 outside, e.g. qemu-system-x86 on 0-1) have threads both inside and outside CPUs 2-3",
    );
    refused(
        on,
        &|r| {
            put(r, "sys/fs/cgroup/isolated/cgroup.procs", "300\n");
            put(r, "proc/300/comm", "sleep\n");
            put(r, "sys/fs/cgroup/isolated/child/cgroup.procs", "");
        },
        "not made: /sys/fs/cgroup/isolated holds what isold did not put there (task 300 (sleep), cgroup child/): name an empty or new directory",
    );
    // A directory the admin made and left empty is the partition's to take.
    let t = tree_with(on);
    let r = t.path();
    for (f, v) in [
        ("cgroup.procs", ""),
        ("cgroup.subtree_control", ""),
        ("cpuset.cpus", "\n"),
        ("cpuset.cpus.partition", "member\n"),
    ] {
        put(r, &format!("sys/fs/cgroup/isolated/{f}"), v);
    }
    let (rc, out, _) = isold(r, &["apply"]);
    assert_eq!(rc, 0, "{out}");
    assert!(!out.contains("not made"), "{out}");
    assert_eq!(
        read(r, "sys/fs/cgroup/isolated/cpuset.cpus.partition"),
        "isolated\n"
    );
    let (rc, out, _) = isold(r, &["restore"]);
    assert_eq!(rc, 0, "{out}");
    assert!(
        r.join("sys/fs/cgroup/isolated").is_dir(),
        "the admin's directory stays"
    );
}

/// The tree of 6.12-rt with 64 CPUs booted with the arguments for 4-31,36-63 (captured by
/// qemu_isold's `rt612_64_cpus_isold_and_chisol`), its IRQs and user tasks made wide again:
/// apply writes masks of two 32-bit groups, lists with their hole; verify is clean; restore
/// gives every byte back.
#[test]
fn sixty_four_cpus_get_masks_with_commas_and_every_byte_back() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    copy_dir(
        Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/debian-6.12-rt-64cpu"
        )),
        r,
    );
    assert_eq!(read(r, "sys/devices/system/cpu/online"), "0-63\n");
    put(r, "proc/irq/default_smp_affinity", "ffffffff,ffffffff\n");
    let mut irqs = Vec::new();
    for e in std::fs::read_dir(r.join("proc/irq")).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if name.parse::<u32>().is_ok() {
            put(
                r,
                &format!("proc/irq/{name}/smp_affinity"),
                "ffffffff,ffffffff\n",
            );
            put(r, &format!("proc/irq/{name}/smp_affinity_list"), "0-63\n");
            irqs.push(name);
        }
    }
    add_task(r, 5000, "sleep", "0-63", "/");
    add_task(r, 5001, "workload", "40", "/");
    put(
        r,
        "etc/isold/isold.toml",
        "isolated_cpus = \"4-31,36-63\"\n",
    );
    let before = snapshot(r);

    let (rc, out, err) = isold(r, &["apply"]);
    assert_eq!(rc, 0, "{out}{err}");
    // Masks of 64 bits in two groups (the kernel prints them back zero-padded, as restore
    // writes the originals).
    let hk = libtaskisol::cpuset::CpuSet::parse_list("0-3,32-35").unwrap();
    for f in [
        "proc/irq/default_smp_affinity",
        "sys/devices/virtual/workqueue/cpumask",
    ] {
        let m = read(r, f);
        assert!(m.trim().contains(','), "{f}: {m}");
        assert_eq!(
            libtaskisol::cpuset::CpuSet::parse_mask(m.trim()).unwrap(),
            hk,
            "{f}: {m}"
        );
    }
    let moved = irqs
        .iter()
        .filter(|n| read(r, &format!("proc/irq/{n}/smp_affinity_list")) == "0-3,32-35\n")
        .count();
    assert!(
        moved + 2 >= irqs.len(),
        "{moved} of {} IRQs moved\n{out}",
        irqs.len()
    );
    assert!(read(r, "proc/5000/task/5000/status").contains("Cpus_allowed_list:\t0-3,32-35\n"));
    assert!(read(r, "proc/5001/task/5001/status").contains("Cpus_allowed_list:\t40\n"));
    let (rc, out, _) = isold(r, &["verify"]);
    assert_eq!(rc, 0, "{out}");

    let (rc, out, _) = isold(r, &["restore"]);
    assert_eq!(rc, 0, "{out}");
    let after = snapshot(r);
    assert_eq!(changed_paths(&before, &after), Vec::<PathBuf>::new());
}

/// `--timings`: the stages each command went through, by item, with counts that are the
/// command's own (the threads it changed, the files it opened), on standard error only.
#[test]
fn timings_say_where_each_command_went() {
    let t = tree();
    let r = t.path();
    let (code, out, err) = isold(r, &["apply", "--timings", "--json"]);
    assert_eq!(code, 0, "{err}");
    let rep: serde_json::Value = serde_json::from_str(&out).expect("stdout stays the report");
    let changed_tasks = rep["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["item"] == "tasks" && o["status"] == "changed")
        .count();
    assert!(changed_tasks > 0, "{out}");
    let line = |err: &str, name: &str| -> Option<(f64, u64)> {
        err.lines().find_map(|l| {
            let rest = l.trim_start().strip_prefix(name)?.trim_start();
            let mut w = rest.split_whitespace();
            let secs = w.next()?.parse().ok()?;
            assert_eq!(w.next(), Some("s"), "{l}");
            Some((secs, w.next()?.parse().ok()?))
        })
    };
    assert!(err.starts_with("timings: "), "{err}");
    assert_eq!(
        line(&err, "plan read every thread").map(|l| l.1),
        Some(1),
        "{err}"
    );
    assert_eq!(
        line(&err, "change tasks").map(|l| l.1),
        Some(changed_tasks as u64),
        "{err}"
    );
    // A tree has no thread to call sched_setaffinity on: files only, four opens a changed
    // thread (read before the write, read and write of the status file, read back).
    let (_, opens) = line(&err, "open").expect("opens counted");
    assert!(opens >= 4 * changed_tasks as u64, "{err}");
    assert!(line(&err, "sched_setaffinity").is_none(), "{err}");
    let (code, _, err) = isold(r, &["verify", "--timings"]);
    assert_eq!(code, 0, "{err}");
    assert!(line(&err, "check tasks").is_some(), "{err}");
    assert!(!err.contains("change "), "verify changes nothing: {err}");
    let (code, _, err) = isold(r, &["restore", "--timings"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        line(&err, "restore tasks").map(|l| l.1),
        Some(changed_tasks as u64),
        "{err}"
    );
    let (code, _, err) = isold(r, &["verify"]);
    assert_eq!(code, 1);
    assert!(!err.contains("timings"), "only when asked: {err}");
}

/// A network device in the kernel's sysfs layout: its directory below `devpath`, the
/// `/sys/class/net` link, its queues with these masks, and (a driver with channels) the
/// tree's stand-in for the channels ioctl.
fn add_netdev(
    r: &Path,
    devpath: &str,
    name: &str,
    ifindex: u32,
    rps: &[&str],
    xps: &[&str],
    channels: Option<&str>,
) {
    let d = format!("{devpath}/{name}");
    put(r, &format!("{d}/ifindex"), &format!("{ifindex}\n"));
    for (i, m) in rps.iter().enumerate() {
        put(r, &format!("{d}/queues/rx-{i}/rps_cpus"), &format!("{m}\n"));
    }
    for (i, m) in xps.iter().enumerate() {
        put(r, &format!("{d}/queues/tx-{i}/xps_cpus"), &format!("{m}\n"));
    }
    if let Some(c) = channels {
        put(r, &format!("{d}/ethtool_channels"), &format!("{c}\n"));
    }
    std::fs::create_dir_all(r.join("sys/class/net")).unwrap();
    let up = "../../".to_string() + devpath.strip_prefix("sys/").unwrap();
    std::os::unix::fs::symlink(
        format!("{up}/{name}"),
        r.join(format!("sys/class/net/{name}")),
    )
    .unwrap();
}

/// The devices of the 6.12-rt guest: virtio-net with 4 queue pairs (its XPS spread over
/// the CPUs at probe), a veth with 4 rx and 4 tx queues, lo; rps_default_mask 0.
fn add_network(r: &Path) {
    add_netdev(
        r,
        "sys/devices/pci0000:00/0000:00:03.0/virtio0/net",
        "eth0",
        2,
        &["0", "0", "0", "0"],
        &["1", "2", "4", "8"],
        Some("0 0 0 4 0 0 0 4"),
    );
    add_netdev(
        r,
        "sys/devices/virtual/net",
        "veth0",
        4,
        &["0", "0", "0", "0"],
        &["0", "0", "0", "0"],
        Some("4 4 0 0 4 4 0 0"),
    );
    add_netdev(r, "sys/devices/virtual/net", "lo", 1, &["0"], &[], None);
    put(r, "proc/sys/net/core/rps_default_mask", "0\n");
}

#[test]
fn network_queues_are_shrunk_and_steered_then_restored_byte_for_byte() {
    let t = tree_with("isolated_cpus = \"2-3\"\n[items]\nrps = true\n");
    let r = t.path();
    add_network(r);
    let before = snapshot(r);
    let (rc, out, err) = isold(r, &["apply"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(
        out.contains("eth0 channels: changed: combined 4 -> combined 2"),
        "{out}"
    );
    let dev = "sys/devices/pci0000:00/0000:00:03.0/virtio0/net/eth0";
    assert_eq!(
        read(r, &format!("{dev}/ethtool_channels")),
        "0 0 0 4 0 0 0 2\n"
    );
    assert!(!r.join(format!("{dev}/queues/rx-2")).exists());
    // A veth keeps its channels (virtual), every rx queue of it and of lo is steered to the
    // housekeeping CPUs, and so is every device made from now on.
    let veth = "sys/devices/virtual/net/veth0";
    assert_eq!(
        read(r, &format!("{veth}/ethtool_channels")),
        "4 4 0 0 4 4 0 0\n"
    );
    for q in 0..4 {
        assert_eq!(read(r, &format!("{veth}/queues/rx-{q}/rps_cpus")), "3\n");
        assert_eq!(read(r, &format!("{veth}/queues/tx-{q}/xps_cpus")), "0\n");
    }
    assert_eq!(
        read(r, "sys/devices/virtual/net/lo/queues/rx-0/rps_cpus"),
        "3\n"
    );
    assert_eq!(read(r, "proc/sys/net/core/rps_default_mask"), "3\n");
    // A physical NIC's RPS is left alone unless [net] rps_physical names it.
    assert_eq!(read(r, &format!("{dev}/queues/rx-0/rps_cpus")), "0\n");
    let (rc, out, _) = isold(r, &["verify"]);
    assert_eq!(rc, 0, "{out}");
    // A mask put back by hand is a deviation; so are channels raised again.
    std::fs::write(r.join(format!("{veth}/queues/rx-1/rps_cpus")), "0\n").unwrap();
    let (rc, out, _) = isold(r, &["verify"]);
    assert_eq!(rc, 1, "{out}");
    assert!(out.contains("veth0 rx-1 rps_cpus"), "{out}");
    std::fs::write(r.join(format!("{veth}/queues/rx-1/rps_cpus")), "3\n").unwrap();
    // Channels raised by hand (ethtool -L eth0 combined 3: a third queue pair).
    std::fs::write(
        r.join(format!("{dev}/ethtool_channels")),
        "0 0 0 4 0 0 0 3\n",
    )
    .unwrap();
    put(r, &format!("{dev}/queues/rx-2/rps_cpus"), "0\n");
    put(r, &format!("{dev}/queues/tx-2/xps_cpus"), "0\n");
    let (rc, out, _) = isold(r, &["verify"]);
    assert_eq!(rc, 1, "{out}");
    assert!(
        out.contains("eth0 channels: is combined 3, policy wants combined 2"),
        "{out}"
    );
    std::fs::write(
        r.join(format!("{dev}/ethtool_channels")),
        "0 0 0 4 0 0 0 2\n",
    )
    .unwrap();
    std::fs::remove_dir_all(r.join(format!("{dev}/queues/rx-2"))).unwrap();
    std::fs::remove_dir_all(r.join(format!("{dev}/queues/tx-2"))).unwrap();
    // Restore: the channels back first, then every queue's mask (the regrown queues' too),
    // then the default mask.
    let (rc, out, err) = isold(r, &["restore"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert_eq!(
        changed_paths(&before, &snapshot(r)),
        Vec::<PathBuf>::new(),
        "restore puts back every byte"
    );
}

#[test]
fn a_device_gone_before_restore_leaves_without_an_error_and_devices_refuse_alone() {
    let t = tree_with("isolated_cpus = \"2-3\"\n[items]\nrps = true\n");
    let r = t.path();
    add_network(r);
    // A NIC with 4 channels that its RSS table keeps from going below 3.
    add_netdev(
        r,
        "sys/devices/pci0000:00/0000:00:04.0/net",
        "enp0s4",
        3,
        &["0", "0", "0", "0"],
        &["0", "0", "0", "0"],
        Some("0 0 0 4 0 0 0 4 3"),
    );
    let (rc, out, err) = isold(r, &["apply"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(
        out.contains("enp0s4 channels: not changeable: the kernel refuses: ioctl(SIOCETHTOOL, ETHTOOL_SCHANNELS combined 2) of enp0s4 failed with EINVAL: Invalid argument"),
        "{out}"
    );
    assert!(out.contains("eth0 channels: changed"), "{out}");
    std::fs::remove_file(r.join("sys/class/net/veth0")).unwrap();
    std::fs::remove_dir_all(r.join("sys/devices/virtual/net/veth0")).unwrap();
    let (rc, out, err) = isold(r, &["restore"]);
    assert_eq!(rc, 0, "{out}{err}");
    assert!(out.contains("veth0 rx-0 rps_cpus: gone"), "{out}");
    assert_eq!(read(r, "proc/sys/net/core/rps_default_mask"), "0\n");
}

#[test]
fn without_the_network_items_nothing_of_the_network_changes() {
    let t = tree_with("isolated_cpus = \"2-3\"\n[items]\nnet_queues = false\n");
    let r = t.path();
    add_network(r);
    let before = snapshot(r);
    let (rc, out, err) = isold(r, &["apply"]);
    assert_eq!(rc, 0, "{out}{err}");
    let after = snapshot(r);
    let net: Vec<PathBuf> = changed_paths(&before, &after)
        .into_iter()
        .filter(|p| {
            p.starts_with("sys/devices/virtual/net")
                || p.starts_with("sys/devices/pci0000:00")
                || p.starts_with("proc/sys/net/core/rps_default_mask")
        })
        .collect();
    assert_eq!(net, Vec::<PathBuf>::new());
}

/// One vocabulary: wherever plan, apply, verify, restore and audit show a CPU mask file's
/// value (workqueue cpumasks, default_smp_affinity, RPS masks), its CPUs are beside it as a
/// list; never a bare hex mask.
#[test]
fn no_mask_is_shown_without_its_cpus() {
    let t = tree();
    let r = t.path();
    put(r, "proc/sys/net/core/rps_default_mask", "0\n");
    put(
        r,
        "etc/isold/isold.toml",
        "isolated_cpus = \"2-3\"\n[items]\nrps = true\n",
    );
    let masks = ["cpumask", "smp_affinity", "rps_default_mask"];
    let mut seen = 0;
    for args in [
        &["plan"][..],
        &["audit", "--duration", "0"],
        &["apply"],
        &["verify", "-v"],
        &["restore"],
    ] {
        let (_, out, err) = isold(r, args);
        for l in out.lines().filter(|l| masks.iter().any(|m| l.contains(m))) {
            if l.ends_with(": already right") {
                continue;
            }
            seen += 1;
            let values = l.matches("(CPUs ").count() + l.matches("(no CPU)").count();
            let wanted = if l.contains(" -> ") || l.contains("policy wants") {
                2
            } else {
                1
            };
            assert_eq!(values, wanted, "{args:?}: {l}\n{out}{err}");
        }
    }
    // Each of plan, apply and restore shows the 4 masks and rps_default_mask; audit the last.
    assert!(seen >= 16, "{seen} lines");
}
