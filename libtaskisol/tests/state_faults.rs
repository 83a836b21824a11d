//! Every write of the state path (the state files, the journal, the set-aside lines) made to
//! fail in each way a disk or a machine fails: a write cut short by a crash, a write cut short
//! by a full directory (ENOSPC), fsync failing with EIO, a crash before a rename
//! (`policy::durable::faults`). After each, on the captured 6.12-rt tree: no value changed
//! without its original recorded, and a restore by a new process (a fresh load, as after a
//! reboot of isold) puts every value back exactly as it was before the first apply.

mod common;
use common::{copy_dir, put};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use libtaskisol::policy::config::Config;
use libtaskisol::policy::durable::faults::{self, Fault, Run};
use libtaskisol::policy::engine;
use libtaskisol::policy::fastpath::TaskFixer;
use libtaskisol::policy::state::{Original, State, StateFiles};
use libtaskisol::policy::Policy;
use libtaskisol::SysRoot;

const IRQBALANCE: &str = include_str!("../../isold/tests/data/irqbalance-1.9.2-1-debian12");
const CONFIG: &str = "isolated_cpus = \"2-3\"\n\n[kvm]\n\"kvm.nx_huge_pages\" = \"never\"\n";

/// A fake root with kernel values, a file isold edits (irqbalance's defaults) and one it
/// creates (the KVM options): originals in both state files.
struct Tree {
    _dir: tempfile::TempDir,
    path: PathBuf,
    root: SysRoot,
    policy: Policy,
    files: StateFiles,
}

fn tree() -> Tree {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("root");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/debian-6.12-rt-isold"),
        &path,
    );
    put(&path, "etc/default/irqbalance", IRQBALANCE);
    put(&path, "sys/module/kvm/parameters/nx_huge_pages", "N\n");
    let root = SysRoot::new(&path);
    let cfg = Config::parse(CONFIG, Path::new("isold.toml")).unwrap();
    let policy = Policy::resolve(cfg, &root).unwrap();
    let files = StateFiles::default_for(&root);
    Tree {
        _dir: dir,
        path,
        root,
        policy,
        files,
    }
}

/// Every file of the tree but isold's own state directories, byte for byte.
fn snapshot(t: &Tree) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(dir: &Path, top: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(top).unwrap().to_path_buf();
            if rel == Path::new("run/isold") || rel == Path::new("var/lib/isold") {
                continue;
            }
            if p.is_dir() {
                walk(&p, top, out);
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(&t.path, &t.path, &mut out);
    out
}

/// The paths whose bytes differ between two snapshots (or that exist in one only).
fn changed(a: &BTreeMap<PathBuf, Vec<u8>>, b: &BTreeMap<PathBuf, Vec<u8>>) -> Vec<PathBuf> {
    let mut paths: Vec<&PathBuf> = a.keys().chain(b.keys()).collect();
    paths.sort();
    paths.dedup();
    paths
        .into_iter()
        .filter(|p| a.get(*p) != b.get(*p))
        .cloned()
        .collect()
}

/// Thread 193 (sh) of the fixture made a new task (another start time) with the affinity
/// `cpus`: an original no apply has recorded yet.
fn new_wide_task(t: &Tree, cpus: &str) {
    let stat = t.path.join("proc/193/task/193/stat");
    let text = std::fs::read_to_string(&stat).unwrap();
    let start = text.split(' ').nth(21).unwrap().to_string();
    std::fs::write(&stat, text.replacen(&format!(" {start} "), " 999999 ", 1)).unwrap();
    let status = t.path.join("proc/193/task/193/status");
    let text = std::fs::read_to_string(&status).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("Cpus_allowed_list:"))
        .unwrap()
        .to_string();
    std::fs::write(
        &status,
        text.replace(&line, &format!("Cpus_allowed_list:\t{cpus}")),
    )
    .unwrap();
}

/// The file of the tree each recorded original stands for, with the value it records there:
/// the whole content (kernel values, files), the affinity line of a thread's status or the
/// priority and policy of its stat (fields 40 and 41).
fn recorded(t: &Tree) -> BTreeMap<PathBuf, Option<String>> {
    let mut out = BTreeMap::new();
    for f in [&t.files.runtime, &t.files.persistent] {
        let Some(st) = State::load(f).unwrap() else {
            continue;
        };
        for e in st.entries() {
            let (path, value) = match &e.original {
                Original::Attr { path, content, .. } => (path.clone(), Some(content.clone())),
                Original::File { path, content, .. } => (path.clone(), content.clone()),
                Original::Affinity { pid, tid, cpus, .. } => (
                    format!("/proc/{pid}/task/{tid}/status"),
                    Some(format!("Cpus_allowed_list:\t{cpus}")),
                ),
                Original::Sched {
                    pid,
                    tid,
                    policy,
                    rt_priority,
                    ..
                } => (
                    format!("/proc/{pid}/task/{tid}/stat"),
                    Some(format!("{rt_priority} {policy}")),
                ),
                other => panic!("an original this test does not expect: {other:?}"),
            };
            out.entry(PathBuf::from(path.trim_start_matches('/')))
                .or_insert(value);
        }
    }
    out
}

/// What the original of `rel` was before the first apply, as a recorded value says it.
fn pristine_value(pristine: &BTreeMap<PathBuf, Vec<u8>>, rel: &Path) -> Option<String> {
    let text = pristine
        .get(rel)
        .map(|b| String::from_utf8(b.clone()).unwrap());
    if rel.ends_with("status") {
        text.and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("Cpus_allowed_list:"))
                .map(str::to_string)
        })
    } else if rel.ends_with("stat") {
        text.map(|t| {
            let f: Vec<&str> = t[t.rfind(')').unwrap() + 1..].split_whitespace().collect();
            format!("{} {}", f[37], f[38])
        })
    } else {
        text
    }
}

/// One operation of the state path: `setup` brings a fresh tree to where the operation
/// starts (an apply done, a task widened), `op` runs it.
struct Case {
    name: &'static str,
    /// Whether `setup` starts a new task ([`new_wide_task`]): a change of the world, which
    /// restore leaves.
    new_task: bool,
    setup: fn(&Tree) -> Option<TaskFixer>,
    op: fn(&Tree, Option<&mut TaskFixer>) -> Result<(), String>,
}

fn first_apply(t: &Tree) -> Result<(), String> {
    engine::apply(&t.root, &t.policy, &t.files)
        .map(drop)
        .map_err(|e| e.to_string())
}

const CASES: [Case; 4] = [
    Case {
        name: "the first apply (both state files written whole)",
        new_task: false,
        setup: |_| None,
        op: |t, _| first_apply(t),
    },
    Case {
        name: "an apply that adds a task's original (an append to the journal)",
        new_task: true,
        setup: |t| {
            first_apply(t).unwrap();
            new_wide_task(t, "0-3");
            None
        },
        op: |t, _| first_apply(t),
    },
    Case {
        name: "the daemon's fast path (an append through its open journal)",
        new_task: true,
        setup: |t| {
            first_apply(t).unwrap();
            let mut f = TaskFixer::new(&t.files.runtime);
            f.resync().unwrap();
            new_wide_task(t, "0-3");
            Some(f)
        },
        op: |t, f| {
            f.unwrap()
                .fix(&t.root, &t.policy, 193, 193)
                .map(drop)
                .map_err(|e| e.to_string())
        },
    },
    Case {
        name: "a daemon's reload: the sysctls restored, the rest kept (a whole write)",
        new_task: true,
        setup: |t| {
            first_apply(t).unwrap();
            new_wide_task(t, "0-3");
            first_apply(t).unwrap();
            None
        },
        op: |t, _| {
            engine::restore_where(&t.root, &t.files, |id| id.starts_with("sysctl:"))
                .map(drop)
                .map_err(|e| e.to_string())
        },
    },
];

/// After the fault: every value changed since `before` (to anything but its value in
/// `pristine`, before the first apply) has that original recorded; then a new process's restore gives `pristine`
/// back, byte for byte.
fn check_after_fault(
    t: &Tree,
    what: &str,
    pristine: &BTreeMap<PathBuf, Vec<u8>>,
    before: &BTreeMap<PathBuf, Vec<u8>>,
) {
    libtaskisol::policy::state::new_process();
    let now = snapshot(t);
    let rec = recorded(t);
    for p in changed(before, &now) {
        if now.get(&p) == pristine.get(&p) {
            continue; // put back (a restore)
        }
        match rec.get(&p) {
            None => panic!("{what}: {} changed with no original recorded", p.display()),
            Some(v) => assert_eq!(
                *v,
                pristine_value(pristine, &p),
                "{what}: {} recorded another original",
                p.display()
            ),
        }
    }
    let rep = engine::restore(&t.root, &t.files).unwrap_or_else(|e| panic!("{what}: {e}"));
    let problems: Vec<String> = rep
        .problems()
        .map(|o| format!("{}: {}", o.label, o.status))
        .collect();
    assert_eq!(problems, Vec::<String>::new(), "{what}");
    let after = snapshot(t);
    let differ = changed(pristine, &after);
    assert!(differ.is_empty(), "{what}: not restored: {differ:?}");
}

/// Each case, each fault, at each operation of its kind the case makes.
#[test]
fn every_fault_at_every_write_of_the_state_path_leaves_restore_exact() {
    let mut runs = 0;
    for case in &CASES {
        let t = tree();
        let mut fixer = (case.setup)(&t);
        let (result, counts) = faults::count(|| (case.op)(&t, fixer.as_mut()));
        result.unwrap_or_else(|e| panic!("{}: without a fault: {e}", case.name));
        eprintln!("{}: {counts:?}", case.name);
        assert!(
            counts.writes > 0 && counts.syncs > 0,
            "{}: {counts:?}",
            case.name
        );
        for fault in Fault::ALL {
            for nth in 0..counts.of(fault.point()) {
                let what = format!("{}: {fault:?} at {:?} {nth}", case.name, fault.point());
                // The tree as it was before any apply, with the world's own change.
                let t = tree();
                if case.new_task {
                    new_wide_task(&t, "0-3");
                }
                let pristine = snapshot(&t);
                let t = tree();
                let mut fixer = (case.setup)(&t);
                let before = snapshot(&t);
                match faults::inject(fault, nth, || (case.op)(&t, fixer.as_mut())) {
                    Run::Crashed => {}
                    Run::Returned { value, hit } => {
                        assert!(hit, "{what}: the fault was not met");
                        assert!(value.is_err(), "{what}: the fault went unsaid");
                    }
                }
                drop(fixer);
                check_after_fault(&t, &what, &pristine, &before);
                runs += 1;
            }
        }
    }
    assert!(runs >= 20, "{runs}");
}

/// A full state directory fails the first apply before any change, with an error naming the
/// directory, the file and the errno; once there is room, the apply and a restore work.
#[test]
fn a_full_state_directory_fails_the_apply_with_nothing_changed() {
    let t = tree();
    let pristine = snapshot(&t);
    let (_, counts) = faults::count(|| first_apply(&t));
    let t = tree();
    let mut before_any_change = 0;
    for nth in 0..counts.writes {
        let Run::Returned { value, hit } = faults::inject(Fault::NoSpace, nth, || {
            engine::apply(&t.root, &t.policy, &t.files)
        }) else {
            panic!("no crash was asked for")
        };
        assert!(hit);
        let Err(e) = value else {
            panic!("write {nth}: the apply went on")
        };
        let first = changed(&pristine, &snapshot(&t)).is_empty();
        if !first {
            // The originals were recorded, the values changed: a failed write after them.
            break;
        }
        before_any_change += 1;
        let msg = e.to_string();
        let dirs = [
            t.files.runtime.parent().unwrap(),
            t.files.persistent.parent().unwrap(),
        ];
        assert!(
            dirs.iter().any(|d| msg.starts_with(&format!(
                "cannot record the original values in {}: writing {}",
                d.display(),
                d.display()
            ))),
            "write {nth}: {msg}"
        );
        assert!(
            msg.ends_with(": No space left on device; nothing was changed"),
            "write {nth}: {msg}"
        );
        assert_eq!(e.errno(), Some(libc::ENOSPC), "write {nth}");
        libtaskisol::policy::state::new_process();
        engine::restore(&t.root, &t.files).unwrap();
        assert!(changed(&pristine, &snapshot(&t)).is_empty(), "write {nth}");
    }
    // The persistent file, the runtime file.
    assert_eq!(before_any_change, 2);
    // Room again.
    first_apply(&t).unwrap();
    assert!(!changed(&pristine, &snapshot(&t)).is_empty());
    engine::restore(&t.root, &t.files).unwrap();
    assert!(changed(&pristine, &snapshot(&t)).is_empty());
}
