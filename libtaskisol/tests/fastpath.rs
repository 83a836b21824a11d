//! The daemon's fast path for one task (policy::fastpath::TaskFixer) on a tree captured from
//! the 6.12-rt guest: the same decisions as the plan, the original in the journal before the
//! write, and a hand-over to the general path when the state file is not the one it knows.

mod common;
use common::copy_dir;

use std::path::{Path, PathBuf};

use libtaskisol::policy::config::Config;
use libtaskisol::policy::engine;
use libtaskisol::policy::fastpath::{Fix, TaskFixer};
use libtaskisol::policy::state::{journal_path, Original, State, StateFiles};
use libtaskisol::policy::{Policy, Status};
use libtaskisol::SysRoot;

struct Setup {
    _dir: tempfile::TempDir,
    root: SysRoot,
    tree: PathBuf,
    policy: Policy,
    state: PathBuf,
    files: StateFiles,
}

fn setup(config: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("root");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/debian-6.12-rt-isold"),
        &tree,
    );
    let root = SysRoot::new(&tree);
    let cfg = Config::parse(config, Path::new("isold.toml")).unwrap();
    let policy = Policy::resolve(cfg, &root).unwrap();
    let files = StateFiles::default_for(&root);
    let state = files.runtime.clone();
    engine::apply(&root, &policy, &files).unwrap();
    Setup {
        _dir: dir,
        root,
        tree,
        policy,
        state,
        files,
    }
}

/// Thread 193 (sh) of the fixture, given the affinity `cpus` (as a task widening itself).
fn set_affinity(s: &Setup, cpus: &str) {
    let p = s.tree.join("proc/193/task/193/status");
    let text = std::fs::read_to_string(&p).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("Cpus_allowed_list:"))
        .unwrap()
        .to_string();
    std::fs::write(
        &p,
        text.replace(&line, &format!("Cpus_allowed_list:\t{cpus}")),
    )
    .unwrap();
}

fn affinity(s: &Setup) -> String {
    libtaskisol::tasks::read_thread(&s.root, 193, 193)
        .unwrap()
        .unwrap()
        .affinity
        .to_string()
}

#[test]
fn a_widened_task_is_narrowed_with_its_original_journaled_first_and_restored() {
    let s = setup("isolated_cpus = \"2-3\"\n");
    assert_eq!(affinity(&s), "0-1", "apply narrowed it");
    // Restore's view of the original before the fixer: 0-3 from apply.
    let mut f = TaskFixer::new(&s.state);
    f.resync().unwrap();
    assert_eq!(f.fix(&s.root, &s.policy, 193, 193).unwrap(), Fix::Fine);

    // A new task (another start time) on the same tid, wide: journaled, then narrowed.
    let stat = s.tree.join("proc/193/task/193/stat");
    let text = std::fs::read_to_string(&stat).unwrap();
    let fields: Vec<&str> = text.split(' ').collect();
    let old_start = fields[21].to_string();
    std::fs::write(
        &stat,
        text.replacen(&format!(" {old_start} "), " 999999 ", 1),
    )
    .unwrap();
    set_affinity(&s, "0-3");
    assert_eq!(
        f.fix(&s.root, &s.policy, 193, 193).unwrap(),
        Fix::Changed {
            label: "task 193 (sh)".into(),
            from: "0-3".into(),
            to: "0-1".into()
        }
    );
    assert_eq!(affinity(&s), "0-1");
    let journal = std::fs::read_to_string(journal_path(&s.state)).unwrap();
    assert!(journal.contains("\"id\":\"task:193:999999\""), "{journal}");
    let st = State::load(&s.state).unwrap().unwrap();
    let e = st
        .entries()
        .iter()
        .find(|e| e.id == "task:193:999999")
        .unwrap();
    assert!(matches!(&e.original, Original::Affinity { cpus, .. } if cpus == "0-3"));

    // Widened again: narrowed again, the first original kept (one journal line).
    set_affinity(&s, "1-3");
    assert!(matches!(
        f.fix(&s.root, &s.policy, 193, 193).unwrap(),
        Fix::Changed { .. }
    ));
    let journal = std::fs::read_to_string(journal_path(&s.state)).unwrap();
    assert_eq!(journal.matches("task:193:999999").count(), 1);

    // restore puts the recorded original back.
    engine::restore(&s.root, &s.files).unwrap();
    assert_eq!(affinity(&s), "0-3");
}

#[test]
fn workloads_allow_listed_names_and_a_replaced_state_file_are_not_its_to_change() {
    let s = setup("isolated_cpus = \"2-3\"\n[tasks]\nallow_comm = [\"s?\"]\n");
    let mut f = TaskFixer::new(&s.state);
    f.resync().unwrap();
    set_affinity(&s, "3");
    assert_eq!(f.fix(&s.root, &s.policy, 193, 193).unwrap(), Fix::Fine);
    set_affinity(&s, "0-3");
    assert_eq!(
        f.fix(&s.root, &s.policy, 193, 193).unwrap(),
        Fix::Settled("allow-listed thread name (s?)".into())
    );
    assert_eq!(affinity(&s), "0-3");

    let s = setup("isolated_cpus = \"2-3\"\n");
    let mut f = TaskFixer::new(&s.state);
    f.resync().unwrap();
    // Another isold command rewrote the state file: the fixer's memory is not trusted.
    let st = State::load(&s.state).unwrap().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(10));
    st.save(&s.state).unwrap();
    set_affinity(&s, "0-3");
    assert_eq!(f.fix(&s.root, &s.policy, 193, 193).unwrap(), Fix::UseEngine);
    assert_eq!(affinity(&s), "0-3", "nothing written");
    f.resync().unwrap();
    assert!(matches!(
        f.fix(&s.root, &s.policy, 193, 193).unwrap(),
        Fix::Changed { .. }
    ));
    // No state file at all (a restore ran): the general path.
    engine::restore(&s.root, &s.files).unwrap();
    set_affinity(&s, "0-3");
    assert_eq!(f.fix(&s.root, &s.policy, 193, 193).unwrap(), Fix::UseEngine);
    // A task that is gone.
    assert_eq!(f.fix(&s.root, &s.policy, 4242, 4242).unwrap(), Fix::Gone);
}

/// The daemon's periodic check (policy::watch): one read per value, and a new IRQ noticed.
#[test]
fn a_watch_sees_a_drifted_value_and_a_new_irq_and_nothing_else() {
    use libtaskisol::policy::watch::Watch;
    let s = setup("isolated_cpus = \"2-3\"\n");
    let scan = s.policy.without(&["tasks", "kthread_priority"]);
    let w = Watch::of(&s.root, &scan, &s.files).unwrap();
    assert!(w.len() > 20, "{}", w.len());
    assert_eq!(w.drifted(&s.root), None, "right after apply");
    let si = s.tree.join("proc/sys/vm/stat_interval");
    std::fs::write(&si, "1\n").unwrap();
    assert_eq!(
        w.drifted(&s.root).as_deref(),
        Some("/proc/sys/vm/stat_interval")
    );
    std::fs::write(&si, "10\n").unwrap();
    let irq4 = s.tree.join("proc/irq/4/smp_affinity_list");
    std::fs::write(&irq4, "3\n").unwrap();
    assert_eq!(
        w.drifted(&s.root).as_deref(),
        Some("/proc/irq/4/smp_affinity_list")
    );
    std::fs::write(&irq4, "0-1\n").unwrap();
    assert_eq!(w.drifted(&s.root), None);
    // Moved among the housekeeping CPUs (irqbalance does): still off the isolated CPUs.
    std::fs::write(&irq4, "1\n").unwrap();
    assert_eq!(w.drifted(&s.root), None, "irqbalance's move is no drift");
    std::fs::write(&irq4, "1-2\n").unwrap();
    assert_eq!(
        w.drifted(&s.root).as_deref(),
        Some("/proc/irq/4/smp_affinity_list")
    );
    let rep = engine::verify(&s.root, &s.policy, &s.files).unwrap();
    let irq = rep.outcomes.iter().find(|o| o.id == "irq:4").unwrap();
    assert_eq!(irq.status.word(), "deviates");
    std::fs::write(&irq4, "1\n").unwrap();
    let rep = engine::verify(&s.root, &s.policy, &s.files).unwrap();
    let irq = rep.outcomes.iter().find(|o| o.id == "irq:4").unwrap();
    assert_eq!(
        irq.status.word(),
        "already right",
        "verify agrees with the watch"
    );
    // A text longer than the first read's 512 bytes is read whole, then as it changes.
    let long = |cpus: &str| format!("{cpus}{}\n", " ".repeat(600));
    std::fs::write(&irq4, long("0-1")).unwrap();
    assert_eq!(w.drifted(&s.root), None, "a long text that holds");
    std::fs::write(&irq4, long("1-2")).unwrap();
    assert_eq!(
        w.drifted(&s.root).as_deref(),
        Some("/proc/irq/4/smp_affinity_list")
    );
    std::fs::write(&irq4, "0-1\n").unwrap();
    assert_eq!(w.drifted(&s.root), None, "short again");
    std::fs::create_dir_all(s.tree.join("proc/irq/99")).unwrap();
    assert_eq!(w.drifted(&s.root).as_deref(), Some("/proc/irq"));
    std::fs::remove_dir(s.tree.join("proc/irq/99")).unwrap();
    assert_eq!(w.drifted(&s.root), None);
}

/// A policy that leaves IRQs alone does not watch the set of IRQs (a new one changes nothing
/// it watches), and a watch of nothing is empty; one that moves IRQs watches their set even
/// with no file.
#[test]
fn a_watch_without_irq_affinity_ignores_new_irqs() {
    use libtaskisol::policy::watch::Watch;
    let s = setup("isolated_cpus = \"2-3\"\n");
    let sysctls = s.policy.only(&["sysctl"]);
    let w = Watch::of(&s.root, &sysctls, &s.files).unwrap();
    assert!(!w.is_empty());
    std::fs::create_dir_all(s.tree.join("proc/irq/99")).unwrap();
    assert_eq!(w.drifted(&s.root), None, "a new IRQ, IRQs left alone");
    std::fs::remove_dir(s.tree.join("proc/irq/99")).unwrap();
    assert!(Watch::of(&s.root, &s.policy.only(&[]), &s.files)
        .unwrap()
        .is_empty());
    let irqs = Watch::of(&s.root, &s.policy.only(&["irq_affinity"]), &s.files).unwrap();
    assert!(!irqs.is_empty());
    std::fs::create_dir_all(s.tree.join("proc/irq/99")).unwrap();
    assert_eq!(irqs.drifted(&s.root).as_deref(), Some("/proc/irq"));
}

/// What the daemon's check does on drift: the drifted targets named (all of them, in one
/// pass), applied alone, the originals of the first apply kept for the restore.
#[test]
fn a_drift_names_its_targets_and_applying_them_alone_keeps_the_originals() {
    use libtaskisol::policy::watch::{Drift, Watch};
    let s = setup("isolated_cpus = \"2-3\"\n");
    let scan = s.policy.without(&["tasks", "kthread_priority"]);
    let w = Watch::of(&s.root, &scan, &s.files).unwrap();
    assert_eq!(w.drift(&s.root), Drift::None);
    let si = s.tree.join("proc/sys/vm/stat_interval");
    let irq4 = s.tree.join("proc/irq/4/smp_affinity_list");
    std::fs::write(&si, "1\n").unwrap();
    std::fs::write(&irq4, "3\n").unwrap();
    let Drift::Targets(targets) = w.drift(&s.root) else {
        panic!("{:?}", w.drift(&s.root));
    };
    let ids: Vec<&str> = targets.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["sysctl:vm.stat_interval", "irq:4"]);
    let rep = engine::apply_only(&s.root, &scan, &s.files, targets).unwrap();
    assert_eq!(rep.outcomes.len(), 2, "{rep:?}");
    assert_eq!(rep.written.len(), 2, "{rep:?}");
    assert_eq!(std::fs::read_to_string(&si).unwrap(), "10\n");
    assert_eq!(std::fs::read_to_string(&irq4).unwrap(), "0-1\n");
    assert_eq!(w.drift(&s.root), Drift::None);
    std::fs::create_dir_all(s.tree.join("proc/irq/99")).unwrap();
    assert_eq!(w.drift(&s.root), Drift::IrqSet);
    std::fs::remove_dir(s.tree.join("proc/irq/99")).unwrap();
    // The originals are those of the first apply, not the drifted values.
    engine::restore(&s.root, &s.files).unwrap();
    assert_eq!(std::fs::read_to_string(&si).unwrap(), "1\n");
    assert_ne!(std::fs::read_to_string(&irq4).unwrap(), "3\n");
}

/// A kthread priority rule concerns kernel threads only: a user task of a matching name is
/// narrowed here. A task whose stat vanished between the two reads is gone, not an error.
#[test]
fn priority_rules_are_for_kthreads_and_a_vanished_stat_is_gone() {
    let s = setup("isolated_cpus = \"2-3\"\n[kthread_priority]\n\"s?\" = \"fifo:2\"\n");
    let mut f = TaskFixer::new(&s.state);
    f.resync().unwrap();
    set_affinity(&s, "0-3");
    assert!(matches!(
        f.fix(&s.root, &s.policy, 193, 193).unwrap(),
        Fix::Changed { .. }
    ));
    set_affinity(&s, "0-3");
    std::fs::remove_file(s.tree.join("proc/193/task/193/stat")).unwrap();
    assert_eq!(f.fix(&s.root, &s.policy, 193, 193).unwrap(), Fix::Gone);
}

/// Give thread 193 another start time: a new task on the same tid, with no original recorded.
fn renew(s: &Setup, start: u64) {
    let stat = s.tree.join("proc/193/task/193/stat");
    let text = std::fs::read_to_string(&stat).unwrap();
    let close = text.rfind(") ").unwrap() + 2;
    let mut f: Vec<String> = text[close..].split(' ').map(str::to_string).collect();
    f[19] = start.to_string();
    std::fs::write(&stat, format!("{}{}", &text[..close], f.join(" "))).unwrap();
}

/// Reading a task's stat fails otherwise than by its exit: an error, not "gone".
#[test]
fn an_unreadable_stat_is_an_error() {
    let s = setup("isolated_cpus = \"2-3\"\n");
    let mut f = TaskFixer::new(&s.state);
    f.resync().unwrap();
    set_affinity(&s, "0-3");
    let stat = s.tree.join("proc/193/task/193/stat");
    std::fs::remove_file(&stat).unwrap();
    std::fs::create_dir(&stat).unwrap();
    assert!(f.fix(&s.root, &s.policy, 193, 193).is_err());
}

/// The allow-listed cgroup of a task keeps it where it is.
#[test]
fn an_allow_listed_cgroup_settles_the_task() {
    let s = setup("isolated_cpus = \"2-3\"\n[tasks]\nallow_cgroup = [\"/\"]\n");
    let mut f = TaskFixer::new(&s.state);
    f.resync().unwrap();
    set_affinity(&s, "0-3");
    assert_eq!(
        f.fix(&s.root, &s.policy, 193, 193).unwrap(),
        Fix::Settled("allow-listed cgroup /".into())
    );
}

/// The journal is folded in by the general path once it passes 1 MiB: up to exactly the
/// limit the fast path appends; one line more and it hands over.
#[test]
fn a_full_journal_hands_over_to_the_general_path() {
    let s = setup("isolated_cpus = \"2-3\"\n");
    std::fs::write(
        journal_path(&s.state),
        vec![b'\n'; libtaskisol::policy::state::JOURNAL_MAX as usize],
    )
    .unwrap();
    let mut f = TaskFixer::new(&s.state);
    f.resync().unwrap();
    renew(&s, 800_001);
    set_affinity(&s, "0-3");
    assert!(matches!(
        f.fix(&s.root, &s.policy, 193, 193).unwrap(),
        Fix::Changed { .. }
    ));
    renew(&s, 800_002);
    set_affinity(&s, "0-3");
    assert_eq!(f.fix(&s.root, &s.policy, 193, 193).unwrap(), Fix::UseEngine);
}

/// The policy's own files are watched too (here irqbalance's defaults file).
#[test]
fn a_watch_sees_a_changed_policy_file() {
    use libtaskisol::policy::watch::Watch;
    let s = setup("isolated_cpus = \"2-3\"\n[items]\nirqbalance = true\n");
    let file = s.tree.join("etc/default/irqbalance");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "#IRQBALANCE_ONESHOT=\n").unwrap();
    engine::apply(&s.root, &s.policy, &s.files).unwrap();
    let scan = s.policy.without(&["tasks", "kthread_priority"]);
    let w = Watch::of(&s.root, &scan, &s.files).unwrap();
    assert!(!w.is_empty());
    assert!(Watch::default().is_empty());
    assert_eq!(w.drifted(&s.root), None);
    // An editor writes a new file and renames it over the old one: still seen.
    let new = file.with_extension("new");
    std::fs::write(&new, "IRQBALANCE_BANNED_CPULIST=\n").unwrap();
    std::fs::rename(&new, &file).unwrap();
    // Changed a moment ago, it may be half written: left to settle for a second.
    assert_eq!(w.drifted(&s.root), None);
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(2))
        .unwrap();
    assert_eq!(
        w.drifted(&s.root).as_deref(),
        Some("/etc/default/irqbalance")
    );
    // The administrator's own line is no drift.
    std::fs::write(
        &file,
        "#IRQBALANCE_ONESHOT=\nIRQBALANCE_BANNED_CPULIST=2-3\nIRQBALANCE_ARGS=--journal\n",
    )
    .unwrap();
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(2))
        .unwrap();
    assert_eq!(w.drifted(&s.root), None);
}

fn text(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

/// A daemon's reload (engine::restore_where): only the picked originals are put back and
/// leave the state file; the others stay for the final restore.
#[test]
fn restore_where_puts_back_the_picked_originals_and_keeps_the_rest() {
    let s = setup("isolated_cpus = \"2-3\"\n");
    let si = s.tree.join("proc/sys/vm/stat_interval");
    let tm = s.tree.join("proc/sys/kernel/timer_migration");
    assert_eq!((text(&si).as_str(), text(&tm).as_str()), ("10\n", "0\n"));
    let ids = |s: &Setup| -> Vec<String> {
        State::load(&s.state)
            .unwrap()
            .map(|st| st.entries().iter().map(|e| e.id.clone()).collect())
            .unwrap_or_default()
    };
    let before = ids(&s);
    // Nothing picked: nothing restored, nothing forgotten.
    let rep = engine::restore_where(&s.root, &s.files, |_| false).unwrap();
    assert!(rep.outcomes.is_empty(), "{rep:?}");
    assert_eq!(ids(&s), before);
    let rep =
        engine::restore_where(&s.root, &s.files, |id| id == "sysctl:vm.stat_interval").unwrap();
    assert_eq!(rep.outcomes.len(), 1, "{rep:?}");
    assert!(matches!(
        rep.outcomes[0].status,
        libtaskisol::policy::Status::Restored { .. }
    ));
    assert_eq!((text(&si).as_str(), text(&tm).as_str()), ("1\n", "0\n"));
    let after = ids(&s);
    assert!(!after.contains(&"sysctl:vm.stat_interval".to_string()));
    assert_eq!(after.len(), before.len() - 1);
    let rep = engine::restore(&s.root, &s.files).unwrap();
    assert!(!rep
        .outcomes
        .iter()
        .any(|o| o.id == "sysctl:vm.stat_interval"));
    assert_eq!(rep.outcomes.len(), after.len());
    assert_eq!(text(&tm), "1\n");
    assert!(!s.state.exists());
}

/// The general path for single threads (engine::apply_threads): a thread widened again is
/// narrowed to the housekeeping CPUs it asked for, its original from the first apply kept; a thread already right is not written.
#[test]
fn apply_threads_narrows_the_given_threads_and_keeps_their_first_original() {
    let s = setup("isolated_cpus = \"2-3\"\n");
    assert_eq!(affinity(&s), "0-1");
    set_affinity(&s, "1-3");
    let t = libtaskisol::tasks::read_thread(&s.root, 193, 193)
        .unwrap()
        .unwrap();
    let rep = engine::apply_threads(&s.root, &s.policy, &s.files, &[t]).unwrap();
    assert_eq!(rep.written.len(), 1, "{rep:?}");
    // Its housekeeping part: what it asked for, without the isolated CPUs.
    assert_eq!(affinity(&s), "1");
    let t = libtaskisol::tasks::read_thread(&s.root, 193, 193)
        .unwrap()
        .unwrap();
    let rep = engine::apply_threads(&s.root, &s.policy, &s.files, &[t]).unwrap();
    assert!(rep.written.is_empty(), "{rep:?}");
    engine::restore(&s.root, &s.files).unwrap();
    // The fixture's 0-3, not the 1-3 it had when apply_threads narrowed it.
    assert_eq!(affinity(&s), "0-3");
}

/// `engine::give_back` (a container's claim released, a reload isolating fewer) on the same
/// tree: each recorded CPU set gets back the freed CPUs its original had and nothing else;
/// one that is its original again leaves the state file, so restore has nothing left for it.
#[test]
fn give_back_returns_the_freed_cpus_each_original_had() {
    let s = setup("isolated_cpus = \"2-3\"\n");
    let iso: libtaskisol::CpuSet = "2-3".parse().unwrap();
    let read = |p: &str| {
        std::fs::read_to_string(s.tree.join(p.trim_start_matches('/')))
            .unwrap()
            .trim()
            .to_string()
    };
    let irq4 = "/proc/irq/4/smp_affinity_list";
    let default = "/proc/irq/default_smp_affinity";
    let wq = "/sys/devices/virtual/workqueue/cpumask";
    assert_eq!(
        (read(irq4), read(default), read(wq)),
        ("0-1".into(), "3".into(), "3".into())
    );
    assert_eq!(affinity(&s), "0-1");
    // Nothing freed: nothing written.
    let rep = engine::give_back(&s.root, &s.files, &"".parse().unwrap(), &iso).unwrap();
    assert!(rep.outcomes.is_empty());
    let rep = engine::give_back(&s.root, &s.files, &"3".parse().unwrap(), &iso).unwrap();
    assert_eq!(
        (read(irq4), read(default), read(wq)),
        ("0-1,3".into(), "b".into(), "b".into())
    );
    assert_eq!(affinity(&s), "0-1,3");
    assert!(rep.problems().count() == 0, "{:?}", rep.outcomes);
    let changed = rep.outcomes.len();
    // Again: every value has CPU 3 already, nothing to write.
    let rep = engine::give_back(&s.root, &s.files, &"3".parse().unwrap(), &iso).unwrap();
    assert!(rep.outcomes.is_empty(), "{:?}", rep.outcomes);
    // An IRQ some other owner moved to CPU 0 alone gets CPU 2 back, not CPU 1.
    std::fs::write(s.tree.join("proc/irq/4/smp_affinity_list"), "0\n").unwrap();
    // A thread that exited since is skipped.
    std::fs::remove_dir_all(s.tree.join("proc/193")).unwrap();
    let state = State::load(&s.state).unwrap().unwrap();
    let before = state.entries().len();
    let rep = engine::give_back(&s.root, &s.files, &"2".parse().unwrap(), &iso).unwrap();
    assert_eq!(read(irq4), "0,2");
    // The masks and the other IRQs are their originals again (f, 0-3): they left the state
    // file; IRQ 4 (0,2 is not its original 0-3) stays.
    assert_eq!((read(default), read(wq)), ("f".into(), "f".into()));
    let state = State::load(&s.state).unwrap().unwrap();
    assert!(state.has("irq:4"));
    assert!(!state.has("irq:default") && !state.has("irq:1"));
    assert!(state.entries().len() < before);
    assert!(
        rep.outcomes.len() >= changed - 1,
        "{} < {changed}",
        rep.outcomes.len()
    );
    assert!(rep
        .outcomes
        .iter()
        .all(|o| o.id != "task:193:0" && !o.id.starts_with("task:193:")));
    // Restore puts back what is left: IRQ 4 to its original.
    engine::restore(&s.root, &s.files).unwrap();
    assert_eq!(read(irq4), "0-3");
}

/// What give_back cannot read: an IRQ gone since is skipped, one whose file cannot be read is
/// a failure naming it; a state file of an earlier boot (values reset by the reboot) is left.
#[test]
fn give_back_skips_what_is_gone_and_says_what_it_cannot_read() {
    let s = setup("isolated_cpus = \"2-3\"\n");
    let iso: libtaskisol::CpuSet = "2-3".parse().unwrap();
    std::fs::remove_dir_all(s.tree.join("proc/irq/4")).unwrap();
    let irq1 = s.tree.join("proc/irq/1/smp_affinity_list");
    std::fs::remove_file(&irq1).unwrap();
    std::fs::create_dir(&irq1).unwrap();
    let rep = engine::give_back(&s.root, &s.files, &"3".parse().unwrap(), &iso).unwrap();
    let problems: Vec<_> = rep.problems().map(|o| o.id.clone()).collect();
    assert_eq!(problems, ["irq:1"], "{:?}", rep.outcomes);
    assert!(!rep.outcomes.iter().any(|o| o.id == "irq:4"));

    let s = setup("isolated_cpus = \"2-3\"\n");
    std::fs::write(
        s.tree.join("proc/sys/kernel/random/boot_id"),
        "00000000-0000-0000-0000-000000000000\n",
    )
    .unwrap();
    let rep = engine::give_back(&s.root, &s.files, &"3".parse().unwrap(), &iso).unwrap();
    assert!(rep.outcomes.is_empty(), "{:?}", rep.outcomes);
    assert_eq!(affinity(&s), "0-1");
}

/// A thread its owner pinned since isold narrowed it (to a housekeeping CPU: libvirt's
/// emulator thread, `taskset -p`) keeps its pin when CPUs are given back; one as isold left
/// it gets them.
#[test]
fn give_back_leaves_a_thread_its_owner_pinned() {
    let s = setup("isolated_cpus = \"2-3\"\n");
    let iso: libtaskisol::CpuSet = "2-3".parse().unwrap();
    assert_eq!(affinity(&s), "0-1");
    set_affinity(&s, "1");
    let rep = engine::give_back(&s.root, &s.files, &"3".parse().unwrap(), &iso).unwrap();
    assert_eq!(affinity(&s), "1", "{:?}", rep.outcomes);
    assert!(!rep.outcomes.iter().any(|o| o.id.starts_with("task:193:")));
    set_affinity(&s, "0-1");
    engine::give_back(&s.root, &s.files, &"3".parse().unwrap(), &iso).unwrap();
    assert_eq!(affinity(&s), "0-1,3");
}

/// A journal whose last line a full disk cut short: the fast path's next entry goes on a
/// line of its own, so it loads, and so does everything before; the torn line is set aside.
#[test]
fn the_fast_path_ends_a_torn_journal_line_before_its_own() {
    let s = setup("isolated_cpus = \"2-3\"\n");
    let jpath = journal_path(&s.state);
    let mut j = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&jpath)
        .unwrap();
    std::io::Write::write_all(&mut j, b"{\"id\":\"task:7:1\",\"ite").unwrap();
    drop(j);
    let mut f = TaskFixer::new(&s.state);
    f.resync().unwrap();
    renew(&s, 999999);
    set_affinity(&s, "0-3");
    assert!(matches!(
        f.fix(&s.root, &s.policy, 193, 193).unwrap(),
        Fix::Changed { .. }
    ));
    let st = State::load(&s.state).unwrap().unwrap();
    assert!(st.has("task:193:999999"));
    assert_eq!(st.set_aside, ["{\"id\":\"task:7:1\",\"ite"]);
    // restore is exact: the thread gets its original back.
    let rep = engine::restore(&s.root, &s.files).unwrap();
    assert!(
        rep.notes
            .iter()
            .any(|n| n.contains("1 line(s) are not whole isold entries")),
        "{:?}",
        rep.notes
    );
    assert_eq!(rep.set_aside, 1);
    assert_eq!(affinity(&s), "0-3");
    // The restore removed the state files; the torn line is kept for the administrator.
    assert!(!s.state.exists() && !jpath.exists());
    assert_eq!(
        std::fs::read_to_string(libtaskisol::policy::state::set_aside_path(&s.state)).unwrap(),
        "{\"id\":\"task:7:1\",\"ite\n"
    );
}

/// Thread 193's status file given the affinity `cpus`, as its owner's sched_setaffinity would.
fn pin_in_tree(tree: &Path, cpus: &str) {
    let p = tree.join("proc/193/task/193/status");
    let text = std::fs::read_to_string(&p).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("Cpus_allowed_list:"))
        .unwrap()
        .to_string();
    std::fs::write(
        &p,
        text.replace(&line, &format!("Cpus_allowed_list:\t{cpus}")),
    )
    .unwrap();
}

/// An owner's pin that lands while the fixer writes the journal (after its first read): the
/// read just before the write sees it; the pin stands and is reported as the owner's.
#[test]
fn an_owners_pin_during_the_journal_write_stands_and_is_no_correction() {
    use libtaskisol::policy::fastpath::Step;
    let s = setup("isolated_cpus = \"2-3\"\n");
    let mut f = TaskFixer::new(&s.state);
    f.resync().unwrap();
    renew(&s, 700_001);
    set_affinity(&s, "0-3");
    let tree = s.tree.clone();
    f.between_steps(move |step, _| {
        if step == Step::Recorded {
            pin_in_tree(&tree, "3");
        }
    });
    assert_eq!(
        f.fix(&s.root, &s.policy, 193, 193).unwrap(),
        Fix::Contested {
            label: "task 193 (sh)".into(),
            now: "3".into(),
            why: "set while isold looked at it".into()
        }
    );
    assert_eq!(affinity(&s), "3", "the pin is kept");
    // The original was journaled before the check: restore gives back 0-3, as it was first.
    let st = State::load(&s.state).unwrap().unwrap();
    assert!(st.has("task:193:700001"));
}

/// An owner's pin right after isold's write (onto an isolated CPU, or onto a housekeeping one
/// that isold's narrowing also allows): the read-back sees it; it stands and is the owner's,
/// not counted as isold's correction.
#[test]
fn an_owners_pin_right_after_the_write_is_the_owners_not_a_correction() {
    use libtaskisol::policy::fastpath::Step;
    for pin in ["3", "1", "0-3"] {
        let s = setup("isolated_cpus = \"2-3\"\n");
        let mut f = TaskFixer::new(&s.state);
        f.resync().unwrap();
        renew(&s, 700_002);
        set_affinity(&s, "0-3");
        let tree = s.tree.clone();
        f.between_steps(move |step, _| {
            if step == Step::Written {
                pin_in_tree(&tree, pin);
            }
        });
        assert_eq!(
            f.fix(&s.root, &s.policy, 193, 193).unwrap(),
            Fix::Contested {
                label: "task 193 (sh)".into(),
                now: pin.into(),
                why: "set right after isold wrote 0-1".into()
            },
            "pinned on {pin}"
        );
        assert_eq!(affinity(&s), pin);
    }
}

/// The same on the running system, with a thread of this test: the pin made during the
/// journal write is seen by the system call right before the write and kept.
#[test]
fn a_pin_during_the_journal_write_stands_on_the_running_system() {
    use libtaskisol::policy::fastpath::Step;
    use std::sync::mpsc;
    let me = libtaskisol::sched::get_affinity(0).unwrap();
    if !racer::cpus("0-1").is_subset(&me) {
        eprintln!("skipped: needs CPUs 0 and 1, this test has {me}");
        return;
    }
    let (_dir, policy, state) = racer::host_setup();
    let (tx, rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        libtaskisol::sched::set_affinity(0, &racer::cpus("0-1")).unwrap();
        // SAFETY: gettid has no preconditions.
        tx.send(unsafe { libc::gettid() }).unwrap();
        let _ = done_rx.recv();
    });
    let tid = rx.recv().unwrap();
    let mut f = TaskFixer::new(&state);
    f.resync().unwrap();
    f.between_steps(move |step, t| {
        if step == Step::Recorded && t == tid {
            libtaskisol::sched::set_affinity(tid, &racer::cpus("1")).unwrap();
        }
    });
    let host = SysRoot::host();
    let r = f
        .fix(&host, &policy, std::process::id() as i32, tid)
        .unwrap();
    assert!(
        matches!(&r, Fix::Contested { now, .. } if now == "1"),
        "{r:?}"
    );
    assert_eq!(
        libtaskisol::sched::get_affinity(tid).unwrap(),
        racer::cpus("1")
    );
    done_tx.send(()).unwrap();
    t.join().unwrap();
}

/// The racer: `n` threads of this test, each started on CPUs 0-1 (wide: it reaches into the
/// isolated CPU 1), each pinning itself onto CPU 1 (a workload's pin) while the fixer, on the
/// running system, narrows them. The fixer reads /proc and writes affinities of these threads
/// only; its state file lives in a copied fixture tree.
mod racer {
    use super::*;
    use libtaskisol::policy::fastpath::Step;
    use libtaskisol::CpuSet;
    use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, Ordering::SeqCst};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// When the owners pin.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum When {
        /// At random, 0 to `max_us` µs after their batch of 64 is handed to the fixer.
        Random { max_us: u64 },
        /// Right after the fixer's journal write ([`Step::Recorded`]), one thread at a time,
        /// the owner spinning on the other CPU for the signal.
        AfterJournal,
    }

    /// Threads alive at once: vm.max_map_count (65530) allows about 14,700 of a Rust process
    /// (stack, guard page, signal stack and its guard: four mappings each); more are raced in
    /// rounds.
    pub const ROUND: usize = 10_000;

    #[derive(Debug, Default)]
    pub struct Tally {
        pub threads: usize,
        /// Threads not on their pin (CPU 1) once all have pinned.
        pub lost: usize,
        /// ... of which the fixer reported as its own correction.
        pub lost_as_changed: usize,
        pub changed: usize,
        /// Reported as the owner's (left as set).
        pub owners: usize,
        pub fine: usize,
        pub folds: usize,
        pub elapsed: Duration,
    }

    impl Tally {
        pub fn add(&mut self, o: Tally) {
            self.threads += o.threads;
            self.lost += o.lost;
            self.lost_as_changed += o.lost_as_changed;
            self.changed += o.changed;
            self.owners += o.owners;
            self.fine += o.fine;
            self.folds += o.folds;
            self.elapsed += o.elapsed;
        }
    }

    /// `n` threads raced, [`ROUND`] at a time.
    pub fn rounds(n: usize, when: When) -> Option<Tally> {
        let mut t = Tally::default();
        let mut left = n;
        while left > 0 {
            let k = left.min(ROUND);
            t.add(run(k, when)?);
            left -= k;
        }
        Some(t)
    }

    const IDLE: u8 = 0;
    const ARMED: u8 = 1;
    const SPINNING: u8 = 2;
    const PINNED: u8 = 3;

    struct Slot {
        tid: AtomicI32,
        state: AtomicU8,
        /// AfterJournal: the fixer's signal to pin now.
        now: AtomicBool,
        delay_us: std::sync::atomic::AtomicU64,
        random: AtomicBool,
    }

    /// A state file in a copied fixture tree (in /dev/shm where there is one: the journal's
    /// fdatasync costs nothing there), and a policy that isolates CPU 1 of its four.
    pub fn host_setup() -> (tempfile::TempDir, Policy, PathBuf) {
        let dir = if Path::new("/dev/shm").is_dir() {
            tempfile::tempdir_in("/dev/shm").unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        let tree = dir.path().join("root");
        copy_dir(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/debian-6.12-rt-isold"),
            &tree,
        );
        let fake = SysRoot::new(&tree);
        let cfg = Config::parse("isolated_cpus = \"1\"\n", Path::new("isold.toml")).unwrap();
        let policy = Policy::resolve(cfg, &fake).unwrap();
        let files = StateFiles::default_for(&fake);
        engine::apply(&fake, &policy, &files).unwrap();
        (dir, policy, files.runtime.clone())
    }

    pub fn cpus(list: &str) -> CpuSet {
        CpuSet::parse_list(list).unwrap()
    }

    /// `None` when this machine cannot run the race (fewer than two CPUs this test may use).
    pub fn run(n: usize, when: When) -> Option<Tally> {
        let me = libtaskisol::sched::get_affinity(0).unwrap();
        if !cpus("0-1").is_subset(&me) {
            eprintln!("racer: needs CPUs 0 and 1, this test has {me}");
            return None;
        }
        let (_dir, policy, state) = host_setup();

        let slots: Arc<Vec<Slot>> = Arc::new(
            (0..n)
                .map(|_| Slot {
                    tid: AtomicI32::new(0),
                    state: AtomicU8::new(IDLE),
                    now: AtomicBool::new(false),
                    delay_us: Default::default(),
                    random: AtomicBool::new(matches!(when, When::Random { .. })),
                })
                .collect(),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let mut handles = Vec::with_capacity(n);
        for i in 0..n {
            let (slots, stop) = (slots.clone(), stop.clone());
            let h = std::thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || owner(&slots[i], &stop))
                .expect("spawn (ulimit -u, threads-max?)");
            handles.push(h);
        }
        while slots.iter().any(|s| s.tid.load(SeqCst) == 0) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let index: std::collections::HashMap<i32, usize> = slots
            .iter()
            .enumerate()
            .map(|(i, s)| (s.tid.load(SeqCst), i))
            .collect();

        let mut f = TaskFixer::new(&state);
        f.resync().unwrap();
        if when == When::AfterJournal {
            let (slots, index) = (slots.clone(), index.clone());
            f.between_steps(move |step, tid| {
                if step == Step::Recorded {
                    if let Some(&i) = index.get(&tid) {
                        slots[i].now.store(true, SeqCst);
                    }
                }
            });
        }
        let host = SysRoot::host();
        let pid = std::process::id() as i32;
        let mut t = Tally {
            threads: n,
            ..Tally::default()
        };
        let mut reports = vec![None; n];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let start = Instant::now();
        for batch in (0..n).collect::<Vec<_>>().chunks(64) {
            for &i in batch {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                if let When::Random { max_us } = when {
                    slots[i]
                        .delay_us
                        .store((seed >> 33) % max_us.max(1), SeqCst);
                }
            }
            for &i in batch {
                slots[i].state.store(ARMED, SeqCst);
                handles[i].thread().unpark();
                if when == When::AfterJournal {
                    while slots[i].state.load(SeqCst) != SPINNING {
                        std::thread::yield_now();
                    }
                    reports[i] = Some(fix(
                        &mut f,
                        &host,
                        &policy,
                        pid,
                        slots[i].tid.load(SeqCst),
                        &state,
                        &mut t,
                    ));
                    // Whatever happened, the owner pins once.
                    slots[i].now.store(true, SeqCst);
                    while slots[i].state.load(SeqCst) != PINNED {
                        std::thread::yield_now();
                    }
                }
            }
            if let When::Random { .. } = when {
                for &i in batch {
                    reports[i] = Some(fix(
                        &mut f,
                        &host,
                        &policy,
                        pid,
                        slots[i].tid.load(SeqCst),
                        &state,
                        &mut t,
                    ));
                }
            }
        }
        while slots.iter().any(|s| s.state.load(SeqCst) != PINNED) {
            std::thread::sleep(Duration::from_millis(1));
        }
        t.elapsed = start.elapsed();
        let pin = cpus("1");
        for (i, s) in slots.iter().enumerate() {
            let now = libtaskisol::sched::get_affinity(s.tid.load(SeqCst)).unwrap();
            if now != pin {
                t.lost += 1;
                if matches!(reports[i], Some(Fix::Changed { .. })) {
                    t.lost_as_changed += 1;
                }
            }
        }
        stop.store(true, SeqCst);
        for h in &handles {
            h.thread().unpark();
        }
        for h in handles {
            h.join().unwrap();
        }
        Some(t)
    }

    #[allow(clippy::too_many_arguments)]
    fn fix(
        f: &mut TaskFixer,
        host: &SysRoot,
        policy: &Policy,
        pid: i32,
        tid: i32,
        state: &Path,
        t: &mut Tally,
    ) -> Fix {
        let mut r = f.fix(host, policy, pid, tid).unwrap();
        if r == Fix::UseEngine {
            // The journal is full: fold it in as the general path would, then again.
            State::load(state).unwrap().unwrap().save(state).unwrap();
            f.resync().unwrap();
            t.folds += 1;
            r = f.fix(host, policy, pid, tid).unwrap();
        }
        match &r {
            Fix::Changed { .. } => t.changed += 1,
            Fix::Fine => t.fine += 1,
            Fix::UseEngine => panic!("the general path twice for {tid}"),
            _ => t.owners += 1,
        }
        r
    }

    /// A thread of the race: wide on 0-1, it waits to be armed, then pins itself onto CPU 1
    /// (after its delay, or on the fixer's signal), and sleeps until the end.
    fn owner(s: &Slot, stop: &AtomicBool) {
        libtaskisol::sched::set_affinity(0, &cpus("0-1")).unwrap();
        // SAFETY: gettid has no preconditions.
        s.tid.store(unsafe { libc::gettid() }, SeqCst);
        while s.state.load(SeqCst) != ARMED {
            std::thread::park();
        }
        if s.random.load(SeqCst) {
            std::thread::sleep(Duration::from_micros(s.delay_us.load(SeqCst)));
        } else {
            s.state.store(SPINNING, SeqCst);
            while !s.now.load(SeqCst) {
                std::hint::spin_loop();
            }
        }
        libtaskisol::sched::set_affinity(0, &cpus("1")).unwrap();
        s.state.store(PINNED, SeqCst);
        while !stop.load(SeqCst) {
            std::thread::park();
        }
    }
}

fn race_size() -> usize {
    std::env::var("ISOL_RACE_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

fn report(what: &str, t: &racer::Tally) {
    println!(
        "racer {what}: threads={} (at most {} at once) lost={} (reported as corrections: {}) changed={} owners'={} \
         fine={} journal folds={} in {:.2} s",
        t.threads,
        racer::ROUND,
        t.lost,
        t.lost_as_changed,
        t.changed,
        t.owners,
        t.fine,
        t.folds,
        t.elapsed.as_secs_f64()
    );
}

/// The racer with owners pinning at random moments (ISOL_RACE_THREADS, default 20,000):
/// `cargo test -p libtaskisol --test fastpath race_ -- --ignored --nocapture --test-threads=1`.
#[test]
#[ignore = "a measurement: 20,000 threads of this test, run by hand"]
fn race_owners_pin_at_random() {
    if let Some(t) = racer::rounds(race_size(), racer::When::Random { max_us: 3000 }) {
        report("random", &t);
    }
}

/// The racer with each owner pinning right after the fixer's journal write.
#[test]
#[ignore = "a measurement: 20,000 threads of this test, run by hand"]
fn race_owners_pin_after_the_journal_write() {
    if let Some(t) = racer::rounds(race_size(), racer::When::AfterJournal) {
        report("after the journal write", &t);
    }
}

/// The entry of thread 193 in the state file.
fn entry_193(s: &Setup) -> Original {
    State::load(&s.state)
        .unwrap()
        .unwrap()
        .entries()
        .iter()
        .find(|e| e.id.starts_with("task:193:"))
        .unwrap()
        .original
        .clone()
}

fn taken_off(o: &Original) -> Option<String> {
    match o {
        Original::Affinity { taken_off, .. } => taken_off.clone(),
        _ => None,
    }
}

/// Restore leaves a thread its owner pinned, since isold narrowed it, onto a CPU isold took
/// it off (libvirt's `<vcpupin>`, DPDK's main lcore, `taskset -p`): that pin stands, the
/// entry is no longer owed. A thread still on isold's CPUs (or pinned on housekeeping ones,
/// which cannot be told from isold's) gets its original back; so does one whose entry comes
/// from a state file without `taken_off`.
#[test]
fn restore_keeps_a_pin_its_owner_made_on_a_cpu_isold_took_the_thread_off() {
    let restore_193 = |s: &Setup| {
        let rep = engine::restore(&s.root, &s.files).unwrap();
        // Said in the summary line too.
        let owners = rep
            .outcomes
            .iter()
            .filter(|o| matches!(o.status, Status::OwnerSet { .. }))
            .count();
        assert_eq!(
            rep.summary().contains("1 owner's pin"),
            owners == 1,
            "{}",
            rep.summary()
        );
        rep.outcomes
            .into_iter()
            .find(|o| o.id.starts_with("task:193:"))
            .unwrap()
            .status
    };
    for (pin, kept) in [
        ("3", true),
        ("2-3", true),
        ("1-2", true),
        ("0-1", false),
        ("0", false),
    ] {
        let s = setup("isolated_cpus = \"2-3\"\n");
        assert_eq!(taken_off(&entry_193(&s)).as_deref(), Some("2-3"));
        set_affinity(&s, pin);
        let status = restore_193(&s);
        if kept {
            assert_eq!(
                status,
                Status::OwnerSet {
                    now: pin.into(),
                    reason: format!(
                        "pinned onto CPUs {} since isold took it off them; not restored",
                        libtaskisol::CpuSet::parse_list(pin)
                            .unwrap()
                            .intersection(&"2-3".parse().unwrap())
                    )
                },
                "{pin}"
            );
            assert_eq!(affinity(&s), pin);
        } else {
            assert_eq!(status, Status::Restored { to: "0-3".into() }, "{pin}");
            assert_eq!(affinity(&s), "0-3");
        }
        // Owed no longer either way: a second restore has nothing of it.
        let rep = engine::restore(&s.root, &s.files).unwrap();
        assert!(!rep.outcomes.iter().any(|o| o.id.starts_with("task:193:")));
    }

    // An entry without taken_off (written before it existed): restored whatever it has.
    let s = setup("isolated_cpus = \"2-3\"\n");
    let journal = journal_path(&s.state);
    let mut st = State::load(&s.state).unwrap().unwrap();
    for e in st.entries_mut() {
        if let Original::Affinity { taken_off, .. } = &mut e.original {
            *taken_off = None;
        }
    }
    st.save(&s.state).unwrap();
    let _ = std::fs::remove_file(journal);
    assert_eq!(taken_off(&entry_193(&s)), None);
    set_affinity(&s, "3");
    assert_eq!(restore_193(&s), Status::Restored { to: "0-3".into() });
}

/// The CPUs a thread was taken off follow isold's later changes: a reload isolating more adds
/// to them (a pin onto the newly isolated CPU is the owner's), a give-back takes the freed
/// ones out (CPU 3 given back by isold is not the owner's pin).
#[test]
fn the_cpus_a_thread_was_taken_off_follow_reloads_and_give_backs() {
    let s = setup("isolated_cpus = \"3\"\n");
    assert_eq!(affinity(&s), "0-2");
    assert_eq!(taken_off(&entry_193(&s)).as_deref(), Some("3"));
    let cfg = Config::parse("isolated_cpus = \"2-3\"\n", Path::new("isold.toml")).unwrap();
    let more = Policy::resolve(cfg, &s.root).unwrap();
    engine::apply(&s.root, &more, &s.files).unwrap();
    assert_eq!(affinity(&s), "0-1");
    assert_eq!(taken_off(&entry_193(&s)).as_deref(), Some("2-3"));
    set_affinity(&s, "2");
    engine::restore(&s.root, &s.files).unwrap();
    assert_eq!(affinity(&s), "2", "the owner's pin onto CPU 2 stands");

    let s = setup("isolated_cpus = \"2-3\"\n");
    let iso: libtaskisol::CpuSet = "2-3".parse().unwrap();
    engine::give_back(&s.root, &s.files, &"3".parse().unwrap(), &iso).unwrap();
    assert_eq!(affinity(&s), "0-1,3");
    assert_eq!(taken_off(&entry_193(&s)).as_deref(), Some("2"));
    engine::restore(&s.root, &s.files).unwrap();
    assert_eq!(
        affinity(&s),
        "0-3",
        "isold's own give-back is undone by restore"
    );
}

/// The ids of the state's entries for threads (`task:`/`sched:`), and of all others.
fn thread_ids_and_rest(s: &Setup) -> (Vec<String>, Vec<String>) {
    let st = State::load(&s.state).unwrap().unwrap();
    st.entries()
        .iter()
        .map(|e| e.id.clone())
        .partition(|id| id.starts_with("task:") || id.starts_with("sched:"))
}

/// Originals of threads that are gone (exited, or their tid now another thread's) are
/// dropped from the state; every other original stays, and restore is then as exact as
/// before. Nothing gone: nothing written.
#[test]
fn the_originals_of_gone_threads_are_forgotten_and_nothing_else() {
    let s = setup("isolated_cpus = \"2-3\"\n");
    let (threads, rest) = thread_ids_and_rest(&s);
    assert!(threads.len() >= 3, "{threads:?}");
    assert!(threads.iter().any(|id| id.starts_with("task:193:")));
    assert!(!rest.is_empty());
    // Nothing gone yet.
    let inode = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).unwrap().ino()
    };
    let before = inode(&s.state);
    assert_eq!(
        engine::forget_gone_threads(&s.root, &s.files, |_| true).unwrap(),
        0
    );
    assert_eq!(inode(&s.state), before, "nothing to drop: not written");
    // 193 runs another program under the same tid (a new start time); another thread exits.
    renew(&s, 999_999);
    let other = threads
        .iter()
        .find(|id| !id.starts_with("task:193:"))
        .unwrap()
        .clone();
    let tid: i32 = other.split(':').nth(1).unwrap().parse().unwrap();
    let task_dir = std::fs::read_dir(s.tree.join("proc"))
        .unwrap()
        .filter_map(|d| {
            let p = d.unwrap().path().join(format!("task/{tid}"));
            p.is_dir().then_some(p)
        })
        .next()
        .unwrap();
    std::fs::remove_dir_all(&task_dir).unwrap();
    let gone: Vec<&String> = threads
        .iter()
        .filter(|id| id.starts_with("task:193:") || id.split(':').nth(1) == Some(&tid.to_string()))
        .collect();
    // Only the tids named are looked at.
    assert_eq!(
        engine::forget_gone_threads(&s.root, &s.files, |t| t != 193 && t != tid).unwrap(),
        0
    );
    let dropped = engine::forget_gone_threads(&s.root, &s.files, |_| true).unwrap();
    assert_eq!(dropped, gone.len(), "{gone:?}");
    let (threads_after, rest_after) = thread_ids_and_rest(&s);
    assert_eq!(rest_after, rest, "only threads' originals dropped");
    let kept: Vec<String> = threads
        .iter()
        .filter(|id| !gone.contains(id))
        .cloned()
        .collect();
    assert_eq!(threads_after, kept);
    assert_eq!(
        engine::forget_gone_threads(&s.root, &s.files, |_| true).unwrap(),
        0
    );
    // Restore puts back everything kept, with nothing gone to report.
    let rep = engine::restore(&s.root, &s.files).unwrap();
    assert!(rep.problems().next().is_none(), "{:?}", rep.outcomes);
    assert!(!rep
        .outcomes
        .iter()
        .any(|o| matches!(o.status, Status::Gone)));
    assert_eq!(rep.outcomes.len(), rest.len() + kept.len());
}

/// An entry that is not one isold records (a thread id that is not of the pid), appended as
/// the fast path appends: the load refuses it, and a report must say so first.
fn append_refused_entry(s: &Setup) {
    let bad = libtaskisol::policy::state::Entry {
        id: "task:5:1".into(),
        item: "tasks".into(),
        label: "task 5 (x)".into(),
        original: Original::Affinity {
            pid: 5,
            tid: 6,
            starttime: 1,
            comm: "x".into(),
            cpus: "0-3".into(),
            taken_off: None,
        },
    };
    let st = State::load(&s.state).unwrap().unwrap();
    st.append(&s.state, &[bad]).unwrap();
}

/// A state holding what a report must say first (an entry refused at the load) is left for
/// the apply or restore that says it.
#[test]
fn forgetting_leaves_a_state_with_refused_entries_to_the_report() {
    let s = setup("isolated_cpus = \"2-3\"\n");
    let journal = journal_path(&s.state);
    renew(&s, 999_999);
    append_refused_entry(&s);
    // Read from the disk, not from this process's memory of the last state written.
    libtaskisol::policy::state::drop_cache();
    let journal_before = std::fs::read(&journal).unwrap();
    assert_eq!(
        engine::forget_gone_threads(&s.root, &s.files, |_| true).unwrap(),
        0
    );
    assert_eq!(std::fs::read(&journal).unwrap(), journal_before);
    let rep = engine::restore(&s.root, &s.files).unwrap();
    assert!(rep.outcomes.iter().any(|o| o.id == "task:5:1"));
}

/// A runtime state of an earlier boot holds no thread of this one: nothing is dropped and
/// nothing written (the next apply starts it anew).
#[test]
fn forgetting_leaves_a_state_of_an_earlier_boot_alone() {
    let s = setup("isolated_cpus = \"2-3\"\n");
    renew(&s, 999_999);
    std::fs::write(
        s.tree.join("proc/sys/kernel/random/boot_id"),
        "00000000-0000-0000-0000-000000000000\n",
    )
    .unwrap();
    let before = std::fs::read(&s.state).unwrap();
    assert_eq!(
        engine::forget_gone_threads(&s.root, &s.files, |_| true).unwrap(),
        0
    );
    assert_eq!(std::fs::read(&s.state).unwrap(), before);
}

/// The kernel's refusals recorded for gone threads go with their originals; those of live
/// threads and of other targets stay.
#[test]
fn the_refusals_of_gone_threads_are_forgotten_too() {
    let s = setup("isolated_cpus = \"2-3\"\n");
    let start = libtaskisol::tasks::read_thread(&s.root, 193, 193)
        .unwrap()
        .unwrap()
        .starttime;
    let mut st = State::load(&s.state).unwrap().unwrap();
    let refused = |id: &str| (id.to_string(), "EINVAL".to_string());
    st.unchangeable.extend([
        refused(&format!("task:193:{start}")),
        refused("task:4242:1"),
        refused("sched:4243:1"),
        refused("task:x:y"),
        refused("irq:1"),
    ]);
    st.save(&s.state).unwrap();
    libtaskisol::policy::state::drop_cache();
    assert_eq!(
        engine::forget_gone_threads(&s.root, &s.files, |_| true).unwrap(),
        2
    );
    let keys: Vec<String> = State::load(&s.state)
        .unwrap()
        .unwrap()
        .unchangeable
        .into_keys()
        .filter(|k| {
            ["task:193:", "task:424", "sched:", "task:x", "irq:1"]
                .iter()
                .any(|p| k.starts_with(p))
        })
        .collect();
    assert_eq!(
        keys,
        [
            "irq:1".to_string(),
            format!("task:193:{start}"),
            "task:x:y".into()
        ]
    );
}

/// A network device in the kernel's sysfs layout below the fake root: its directory below
/// `devpath`, the `/sys/class/net` link, `rx` rx queues with RPS off, and (a driver with
/// channels) the tree's stand-in for the channels ioctl.
fn add_netdev(tree: &Path, devpath: &str, name: &str, ifindex: u32, rx: u32, ch: Option<&str>) {
    let d = tree.join(devpath).join(name);
    common::put(&d, "ifindex", &format!("{ifindex}\n"));
    for q in 0..rx {
        common::put(&d, &format!("queues/rx-{q}/rps_cpus"), "0\n");
    }
    if let Some(c) = ch {
        common::put(&d, "ethtool_channels", &format!("{c}\n"));
        for q in rx..4 {
            common::put(&d, &format!("queues/rx-{q}/rps_cpus"), "0\n");
        }
    }
    std::fs::create_dir_all(tree.join("sys/class/net")).unwrap();
    let up = "../../".to_string() + devpath.strip_prefix("sys/").unwrap();
    std::os::unix::fs::symlink(
        format!("{up}/{name}"),
        tree.join(format!("sys/class/net/{name}")),
    )
    .unwrap();
}

/// The device `name` gone from the fake root (deleted, or moved to a pod's namespace).
fn remove_netdev(tree: &Path, devpath: &str, name: &str) {
    std::fs::remove_file(tree.join(format!("sys/class/net/{name}"))).unwrap();
    std::fs::remove_dir_all(tree.join(devpath).join(name)).unwrap();
}

/// What the state takes on disk: the runtime file and its journal, in bytes.
fn state_bytes(s: &Setup) -> u64 {
    [s.state.clone(), journal_path(&s.state)]
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum()
}

const VIRTUAL: &str = "sys/devices/virtual/net";
const PCI: &str = "sys/devices/pci0000:00/0000:00:09.0/net";

/// Pod churn with `rps` on (a kernel before 6.3, no rps_default_mask): 1,000 veths made,
/// steered by the daemon's per-device path (their masks' originals recorded) and deleted,
/// and a NIC hot-plugged (its channels shrunk) and unplugged. Once the gone devices are
/// forgotten the state file is the size it was before the churn, byte for byte: a veth
/// that stays keeps its masks, a NIC renamed meanwhile keeps its channels (restore finds
/// it by its ifindex), and restore then finds nothing gone.
#[test]
fn a_thousand_veths_made_and_deleted_leave_the_state_the_size_it_was() {
    let s = setup("isolated_cpus = \"2-3\"\n[items]\nrps = true\n");
    add_netdev(&s.tree, VIRTUAL, "veth-stay", 3, 2, None);
    add_netdev(&s.tree, PCI, "eth1", 4, 4, Some("0 0 0 4 0 0 0 4"));
    engine::apply(&s.root, &s.policy, &s.files).unwrap();
    let ids = |s: &Setup| -> Vec<String> {
        let st = State::load(&s.state).unwrap().unwrap();
        let mut v: Vec<String> = st.entries().iter().map(|e| e.id.clone()).collect();
        v.extend(st.unchangeable.into_keys());
        v
    };
    let ids_before = ids(&s);
    for id in ["rps:veth-stay:rx-1", "net_queues:eth1"] {
        assert!(ids_before.iter().any(|i| i == id), "{id}: {ids_before:?}");
    }
    assert_eq!(
        engine::forget_gone_devices(&s.root, &s.files, |_| true).unwrap(),
        0,
        "nothing gone yet"
    );
    // Measured as one whole file (the journal folded in), as a forgetting writes it.
    State::load(&s.state)
        .unwrap()
        .unwrap()
        .save(&s.state)
        .unwrap();
    libtaskisol::policy::state::drop_cache();
    assert!(!journal_path(&s.state).exists());
    let before = state_bytes(&s);

    // The daemon's answer to new devices: planned and applied for those devices only, a
    // burst of them at a time.
    let devices = |names: &[String]| {
        let names = names.iter().cloned().collect();
        let targets = libtaskisol::policy::plan::plan_devices(&s.policy, &s.root, names).unwrap();
        let rep = engine::apply_only(&s.root, &s.policy, &s.files, targets).unwrap();
        assert!(rep.problems().next().is_none(), "{:?}", rep.outcomes);
    };
    add_netdev(&s.tree, PCI, "enp0s9", 5, 4, Some("0 0 0 4 0 0 0 4"));
    devices(&["enp0s9".to_string()]);
    remove_netdev(&s.tree, PCI, "enp0s9");
    for round in 0..20u32 {
        let names: Vec<String> = (0..50u32)
            .map(|i| format!("veth{:08x}", (round * 50 + i).wrapping_mul(0x9e37_79b9)))
            .collect();
        for (i, n) in names.iter().enumerate() {
            add_netdev(&s.tree, VIRTUAL, n, 100 + round * 50 + i as u32, 2, None);
        }
        devices(&names);
        let steered = std::fs::read_to_string(
            s.tree
                .join(VIRTUAL)
                .join(&names[0])
                .join("queues/rx-1/rps_cpus"),
        )
        .unwrap();
        assert_eq!(steered, "3\n", "steered onto the housekeeping CPUs");
        for n in &names {
            remove_netdev(&s.tree, VIRTUAL, n);
        }
    }
    // eth1 renamed: the same device.
    std::fs::rename(
        s.tree.join("sys/class/net/eth1"),
        s.tree.join("sys/class/net/eth1r"),
    )
    .unwrap();
    let grown = state_bytes(&s);
    assert!(grown > before + 1000 * 100, "{before} -> {grown}");

    // Only the devices named are looked at.
    assert_eq!(
        engine::forget_gone_devices(&s.root, &s.files, |d| d == "enp0s9").unwrap(),
        1
    );
    assert_eq!(
        engine::forget_gone_devices(&s.root, &s.files, |_| true).unwrap(),
        2000,
        "two rx queues of each veth"
    );
    libtaskisol::policy::state::drop_cache();
    assert_eq!(ids(&s), ids_before);
    assert_eq!(state_bytes(&s), before, "{before} -> {grown} -> now");
    assert_eq!(
        engine::forget_gone_devices(&s.root, &s.files, |_| true).unwrap(),
        0
    );
    let rep = engine::restore(&s.root, &s.files).unwrap();
    assert!(rep.problems().next().is_none(), "{:?}", rep.outcomes);
    assert!(!rep
        .outcomes
        .iter()
        .any(|o| matches!(o.status, Status::Gone)));
    let mask = |name: &str| {
        std::fs::read_to_string(s.tree.join(VIRTUAL).join(name).join("queues/rx-1/rps_cpus"))
            .unwrap()
    };
    assert_eq!(mask("veth-stay"), "0\n", "restored byte for byte");
}

/// What a forgetting of gone devices must not drop, and what it must: a NIC renamed while a
/// new device took its name keeps its channels' original (restore follows it by its
/// ifindex) until the renamed device goes too; a refusal of a gone device's channels goes;
/// nothing goes when the devices cannot be listed, or when the state holds an entry refused
/// at the load that a report must say first; and a forgetting that drops nothing writes
/// nothing.
#[test]
fn forgetting_gone_devices_follows_ifindexes_and_leaves_what_a_report_needs() {
    let s = setup("isolated_cpus = \"2-3\"\n[items]\nrps = true\n");
    add_netdev(&s.tree, PCI, "eth1", 4, 4, Some("0 0 0 4 0 0 0 4"));
    engine::apply(&s.root, &s.policy, &s.files).unwrap();
    let has = |id: &str| {
        libtaskisol::policy::state::drop_cache();
        let st = State::load(&s.state).unwrap().unwrap();
        st.has(id) || st.unchangeable.contains_key(id)
    };
    assert!(has("net_queues:eth1"));
    let mut st = State::load(&s.state).unwrap().unwrap();
    st.unchangeable
        .insert("net_queues:gone0".into(), "EOPNOTSUPP".into());
    st.save(&s.state).unwrap();
    libtaskisol::policy::state::drop_cache();

    // No /sys/class/net: nothing can be known gone.
    let class = s.tree.join("sys/class/net");
    std::fs::rename(&class, s.tree.join("sys/class/net.away")).unwrap();
    assert_eq!(
        engine::forget_gone_devices(&s.root, &s.files, |_| true).unwrap(),
        0
    );
    assert!(has("net_queues:gone0"));
    std::fs::rename(s.tree.join("sys/class/net.away"), &class).unwrap();

    // Nothing gone but the refusal's device: a run that drops nothing leaves the file as it
    // was (not even rewritten).
    assert_eq!(
        engine::forget_gone_devices(&s.root, &s.files, |d| d != "gone0").unwrap(),
        0
    );
    let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let (ino, bytes) = (inode(&s.state), std::fs::read(&s.state).unwrap());
    assert_eq!(
        engine::forget_gone_devices(&s.root, &s.files, |d| d != "gone0").unwrap(),
        0
    );
    assert_eq!(inode(&s.state), ino, "the state file was rewritten");
    assert_eq!(std::fs::read(&s.state).unwrap(), bytes);
    assert!(!journal_path(&s.state).exists());

    // eth1 renamed, and a new device takes the name: the original is still eth1r's.
    std::fs::rename(class.join("eth1"), class.join("eth1r")).unwrap();
    add_netdev(&s.tree, VIRTUAL, "eth1", 9, 1, None);
    assert_eq!(
        engine::forget_gone_devices(&s.root, &s.files, |d| d != "gone0").unwrap(),
        0
    );
    assert!(has("net_queues:eth1"));

    // A state with an entry refused at the load: left to the report.
    append_refused_entry(&s);
    libtaskisol::policy::state::drop_cache();
    assert_eq!(
        engine::forget_gone_devices(&s.root, &s.files, |_| true).unwrap(),
        0
    );
    assert!(has("net_queues:gone0"));
    // Without it: the refusal of the gone device goes; then, eth1r gone too, eth1's channels.
    let mut st = State::load(&s.state).unwrap().unwrap();
    st.entries_mut().retain(|e| e.id != "task:5:1");
    st.save(&s.state).unwrap();
    libtaskisol::policy::state::drop_cache();
    assert_eq!(
        engine::forget_gone_devices(&s.root, &s.files, |_| true).unwrap(),
        1
    );
    assert!(!has("net_queues:gone0"));
    assert!(has("net_queues:eth1"));
    std::fs::remove_file(class.join("eth1r")).unwrap();
    std::fs::remove_dir_all(s.tree.join(PCI).join("eth1")).unwrap();
    assert_eq!(
        engine::forget_gone_devices(&s.root, &s.files, |_| true).unwrap(),
        1
    );
    assert!(!has("net_queues:eth1"));
}
