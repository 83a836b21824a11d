use super::super::common::THREADS_PER_WORKER;
use super::super::restore::restore_one;
use super::*;
use crate::policy::config::{Config, CpuSpec};
use crate::policy::plan::Want;
use crate::policy::preset::Preset;

fn policy() -> Policy {
    let iso: CpuSet = "2-3".parse().unwrap();
    Policy {
        config: Config::defaults(Preset::RealtimeVirtualHost, CpuSpec::List(iso.clone())),
        online: "0-3".parse().unwrap(),
        isolated: iso,
        housekeeping: "0-1".parse().unwrap(),
        claimed: CpuSet::new(),
        claimed_power: Default::default(),
    }
}

fn target(op: Op) -> Target {
    Target {
        item: "test",
        id: "test".into(),
        label: "test".into(),
        op,
    }
}

fn status(root: &SysRoot, op: Op) -> Status {
    match evaluate(root, &policy().isolated, &target(op)) {
        Eval::Done(s) => s,
        Eval::Change { from, .. } => Status::Deviates {
            current: from,
            want: String::new(),
        },
    }
}

/// An IRQ that went away between planning and reading is gone, not a failure; a file
/// that cannot be read for another reason is a failure naming it.
#[test]
fn vanished_targets_are_gone_and_unreadable_ones_fail() {
    let dir = tempfile::tempdir().unwrap();
    let root = SysRoot::new(dir.path());
    let irq = |n| Op::Irq {
        irq: n,
        want: "0-1".parse().unwrap(),
    };
    assert_eq!(status(&root, irq(99)), Status::Gone);
    std::fs::create_dir_all(dir.path().join("proc/irq/98/smp_affinity_list")).unwrap();
    assert!(
        matches!(status(&root, irq(98)), Status::Failed { ref error } if error.contains("proc/irq/98/smp_affinity_list")),
        "{:?}",
        status(&root, irq(98))
    );

    let attr = |p: &str| Op::Attr {
        path: p.into(),
        want: Want::Text("0".into()),
    };
    assert!(matches!(
        status(&root, attr("/proc/sys/kernel/absent")),
        Status::NotPresent { .. }
    ));
    std::fs::create_dir_all(dir.path().join("proc/sys/kernel/a_directory")).unwrap();
    assert!(
        matches!(
            status(&root, attr("/proc/sys/kernel/a_directory")),
            Status::Failed { .. }
        ),
        "a read error other than ENOENT is not 'not present'"
    );
}

fn thread(policy: u32, rt_priority: u32) -> tasks::Thread {
    tasks::Thread {
        pid: 21,
        tid: 21,
        comm: "rcu_preempt".into(),
        flags: 0x0020_8040,
        starttime: 5,
        affinity: "0-3".parse().unwrap(),
        policy,
        rt_priority,
        processor: 0,
        cpu_ticks: 0,
        switches: 0,
        state: 'S',
    }
}

/// A kthread with the right policy but another priority must change, and the report
/// shows the policy it had.
#[test]
fn a_priority_alone_is_a_change() {
    let dir = tempfile::tempdir().unwrap();
    let root = SysRoot::new(dir.path());
    let sched = |policy, prio| Op::Sched {
        thread: thread(policy, prio),
        want: SchedPolicy::Fifo(2),
    };
    assert_eq!(
        status(&root, sched(1, 1)),
        Status::Deviates {
            current: "SCHED_FIFO priority 1".into(),
            want: String::new()
        }
    );
    assert_eq!(
        status(&root, sched(0, 0)),
        Status::Deviates {
            current: "SCHED_OTHER".into(),
            want: String::new()
        }
    );
    assert_eq!(status(&root, sched(1, 2)), Status::AlreadyRight);
}

/// restore of a file apply created: removed, also when it is gone already; a path that
/// cannot be removed is a failure.
#[test]
fn restoring_a_created_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = SysRoot::new(dir.path());
    std::fs::create_dir_all(dir.path().join("etc")).unwrap();
    assert_eq!(
        first_missing_dir(&root, "/etc/a/b/f.conf").as_deref(),
        Some("/etc/a")
    );
    assert_eq!(first_missing_dir(&root, "/etc/f.conf"), None);
    assert_eq!(first_missing_dir(&root, "/x/f.conf").as_deref(), Some("/x"));
    assert_eq!(first_missing_dir(&root, "f.conf"), None);

    let created = |path: &str| Original::File {
        path: path.into(),
        content: None,
        created_dir: first_missing_dir(&root, path),
        written: Some("x".into()),
    };
    let o = created("/etc/a/b/f.conf");
    write_file(&root, "/etc/a/b/f.conf", "x").unwrap();
    assert_eq!(
        restore_one(&root, &o),
        Status::Restored {
            to: "removed".into()
        }
    );
    assert!(!dir.path().join("etc/a").exists());
    assert!(dir.path().join("etc").exists());
    // Already gone: nothing to do, not a failure.
    assert_eq!(
        restore_one(&root, &o),
        Status::Restored {
            to: "removed".into()
        }
    );
    // The inner directory is gone already, the outer one is empty: it goes too.
    std::fs::create_dir_all(dir.path().join("etc/a")).unwrap();
    assert!(matches!(restore_one(&root, &o), Status::Restored { .. }));
    assert!(!dir.path().join("etc/a").exists());
    // Something else put a file next to it: the directory stays.
    write_file(&root, "/etc/a/b/f.conf", "x").unwrap();
    std::fs::write(dir.path().join("etc/a/other"), "").unwrap();
    assert!(matches!(restore_one(&root, &o), Status::Restored { .. }));
    assert!(dir.path().join("etc/a/other").exists());
    assert!(!dir.path().join("etc/a/b").exists());
    // A directory where the file was cannot be removed as a file.
    std::fs::create_dir_all(dir.path().join("etc/d.conf/x")).unwrap();
    assert!(matches!(
        restore_one(&root, &created("/etc/d.conf")),
        Status::Failed { .. }
    ));
}

fn changed(root: &SysRoot, op: Op) -> Status {
    changed_wrote(root, op).0
}

fn changed_wrote(root: &SysRoot, op: Op) -> (Status, bool) {
    change(
        root,
        &policy().isolated,
        &target(op),
        &Original::File {
            path: String::new(),
            content: None,
            created_dir: None,
            written: None,
        },
        "before".into(),
    )
}

/// What a write can meet: the target vanished (gone), a refusal (failed, naming the
/// file), a value that does not read back (failed).
#[test]
fn a_change_that_does_not_happen_is_never_reported_changed() {
    let dir = tempfile::tempdir().unwrap();
    let root = SysRoot::new(dir.path());
    let irq = |n| Op::Irq {
        irq: n,
        want: "0-1".parse().unwrap(),
    };
    assert_eq!(changed(&root, irq(99)), Status::Gone);
    std::fs::create_dir_all(dir.path().join("proc/irq/98/smp_affinity_list")).unwrap();
    assert!(
        matches!(changed(&root, irq(98)), Status::Failed { ref error } if error.contains("proc/irq/98/smp_affinity_list")),
        "{:?}",
        changed(&root, irq(98))
    );
    // A thread whose files are gone from the tree exited.
    assert_eq!(
        changed(
            &root,
            Op::Affinity {
                thread: thread(0, 0),
                want: "0-1".parse().unwrap()
            }
        ),
        Status::Gone
    );
    // The kernel takes the write but keeps its value: /dev/null reads back nothing. The
    // write happened: its original is kept (the flag), whatever the read-back said.
    std::fs::create_dir_all(dir.path().join("proc/sys/kernel")).unwrap();
    std::os::unix::fs::symlink("/dev/null", dir.path().join("proc/sys/kernel/stubborn")).unwrap();
    let attr = |p: &str| Op::Attr {
        path: p.into(),
        want: Want::Text("0".into()),
    };
    assert!(matches!(
        changed_wrote(&root, attr("/proc/sys/kernel/stubborn")),
        (Status::Failed { ref error }, true) if error.contains("but it reads back ''")
    ),);
    // A write the kernel refuses (a file of the running kernel that takes no writes)
    // changed nothing: no original to keep.
    std::os::unix::fs::symlink("/proc/version", dir.path().join("proc/sys/kernel/ro")).unwrap();
    let ro = changed_wrote(&root, attr("/proc/sys/kernel/ro"));
    assert!(
        matches!(ro, (Status::Failed { ref error }, false) if error.contains("failed to write '0'")),
        "{ro:?}"
    );
    assert_eq!(changed_wrote(&root, irq(99)), (Status::Gone, false));
    // Restore of an original the kernel refuses to take back: already back when the value
    // never changed (an apply killed before it learnt of the refusal), else a failure.
    let version = std::fs::read_to_string("/proc/version").unwrap();
    let original = |content: &str| Original::Attr {
        path: "/proc/sys/kernel/ro".into(),
        content: content.into(),
        restore: content.trim_end().into(),
    };
    assert!(matches!(
        restore_one(&root, &original(&version)),
        Status::Restored { .. }
    ));
    assert!(matches!(
        restore_one(&root, &original("0-3\n")),
        Status::Failed { ref error } if error.contains("failed to write '0-3'")
    ));
}

/// A stat line of the kernel's format for thread `tid`, started at `start`.
fn stat_line(tid: i32, start: u64) -> String {
    format!(
        "{tid} (t) S 1 {tid} {tid} 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
    )
}

/// Thread 21 in a tree: its stat, and its status unless `status` is None (a directory
/// stands in for a file the kernel refuses to give).
fn thread_tree(status: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("proc/21/task/21");
    std::fs::create_dir_all(&t).unwrap();
    std::fs::write(t.join("stat"), stat_line(21, 5)).unwrap();
    match status {
        Some("dir") => std::fs::create_dir(t.join("status")).unwrap(),
        Some(text) => std::fs::write(t.join("status"), text).unwrap(),
        None => {}
    }
    dir
}

/// A thread pinned by something else between the plan's read and the write (libvirt's
/// <vcpupin>, DPDK, taskset -p) keeps its pin: read again just before the write, left as
/// set, nothing written and no original kept; one moved off the isolated CPUs meanwhile
/// is right.
#[test]
fn a_pin_made_after_the_plan_read_stands() {
    let op = Op::Affinity {
        thread: thread(0, 0),
        want: "0-1".parse().unwrap(),
    };
    for (now, word) in [
        ("3", "owner's pin"),
        ("1", "already right"),
        ("1-2", "owner's pin"),
    ] {
        let t = thread_tree(Some(&format!("Name:\tt\nCpus_allowed_list:\t{now}\n")));
        let root = SysRoot::new(t.path());
        let (status, wrote) = changed_wrote(&root, op.clone());
        assert_eq!((status.word(), wrote), (word, false), "{now}: {status:?}");
        if let Status::OwnerSet { now: shown, reason } = &status {
            assert_eq!(shown, now);
            assert_eq!(reason, "set after isold read it as 0-3, before its write");
        }
        assert!(
            std::fs::read_to_string(t.path().join("proc/21/task/21/status"))
                .unwrap()
                .contains(&format!("Cpus_allowed_list:\t{now}\n")),
            "{now}: untouched"
        );
    }
    // Still as planned: narrowed.
    let t = thread_tree(Some("Name:\tt\nCpus_allowed_list:\t0-3\n"));
    let root = SysRoot::new(t.path());
    assert!(matches!(
        changed_wrote(&root, op),
        (Status::Changed { .. }, true)
    ));
}

/// The read back after a thread's write: isold's value is a change, fewer CPUs a failure
/// naming the cpuset, anything else (a pin right after the write) its owner's.
#[test]
fn a_thread_read_back_tells_isolds_value_from_the_kernels_and_the_owners() {
    let l = |s: &str| -> CpuSet { s.parse().unwrap() };
    let want = l("0-1");
    let back = |now| read_back(7, &want, "0-3".into(), now);
    assert_eq!(
        back(Ok(Some(l("0-1")))),
        Status::Changed {
            from: "0-3".into(),
            to: "0-1".into()
        }
    );
    assert_eq!(
        back(Ok(Some(l("1")))),
        failed("sched_setaffinity(7, 0-1) left CPUs 1 (its cpuset narrows it)")
    );
    for owners in ["3", "0-3", "1-2"] {
        assert_eq!(
            back(Ok(Some(l(owners)))),
            Status::OwnerSet {
                now: owners.into(),
                reason: "set right after isold wrote 0-1".into()
            }
        );
    }
    assert_eq!(back(Ok(None)), Status::Gone);
    assert!(matches!(
        back(Err(Error::Invalid("x".into()))),
        Status::Failed { .. }
    ));
}

/// Thread changes and restores on a tree: a vanished file means the thread exited
/// (gone); any other error is a failure, never "gone" or "not changeable".
#[test]
fn thread_changes_tell_gone_from_failed() {
    let aff = Op::Affinity {
        thread: thread(0, 0),
        want: "0-1".parse().unwrap(),
    };
    let sched = Op::Sched {
        thread: thread(0, 0),
        want: SchedPolicy::Fifo(2),
    };
    let orig_aff = Original::Affinity {
        pid: 21,
        tid: 21,
        starttime: 5,
        comm: "t".into(),
        cpus: "0-3".into(),
        taken_off: None,
    };
    let orig_sched = Original::Sched {
        pid: 21,
        tid: 21,
        starttime: 5,
        comm: "t".into(),
        policy: 0,
        rt_priority: 0,
    };
    let t = thread_tree(Some("dir"));
    let root = SysRoot::new(t.path());
    assert!(matches!(changed(&root, aff.clone()), Status::Failed { .. }));
    assert!(matches!(
        restore_one(&root, &orig_aff),
        Status::Failed { .. }
    ));
    let t = thread_tree(None);
    let root = SysRoot::new(t.path());
    assert_eq!(restore_one(&root, &orig_aff), Status::Gone);
    std::fs::remove_file(t.path().join("proc/21/task/21/stat")).unwrap();
    assert_eq!(changed(&root, sched.clone()), Status::Gone);
    std::fs::create_dir(t.path().join("proc/21/task/21/stat")).unwrap();
    assert!(matches!(
        changed(&root, sched.clone()),
        Status::Failed { .. }
    ));

    // restore of a priority: the stat file is the thread's identity and its policy; one
    // that vanishes between the two reads is gone, one that cannot be edited failed.
    let t = thread_tree(Some("Name:\tt\nCpus_allowed_list:\t0-1\n"));
    let root = SysRoot::new(t.path());
    assert_eq!(
        restore_one(&root, &orig_sched),
        Status::Restored {
            to: "SCHED_OTHER".into()
        }
    );
    assert_eq!(
        restore_one(&root, &orig_aff),
        Status::Restored { to: "0-3".into() }
    );
    assert!(
        std::fs::read_to_string(t.path().join("proc/21/task/21/status"))
            .unwrap()
            .contains("Cpus_allowed_list:\t0-3\n")
    );
}

/// On the running system, with a child of this test as the thread: an affinity the
/// kernel rejects (no CPU of it exists) is "not changeable"; one it narrows (an extra CPU
/// that does not exist) is a failure naming what it left, never "changed".
#[test]
fn the_kernels_answers_on_a_child_of_this_test() {
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let root = SysRoot::host();
    let me = tasks::read_thread(&root, pid, pid).unwrap().unwrap();
    let first = me.affinity.iter().next().unwrap();
    let op = |want: &str| Op::Affinity {
        thread: me.clone(),
        want: want.parse().unwrap(),
    };
    let rejected = changed(&root, op("4095"));
    let narrowed = changed(&root, op(&format!("{first},4095")));
    let after = tasks::read_thread(&root, pid, pid).unwrap().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        matches!(rejected, Status::NotChangeable { ref reason } if reason.contains("EINVAL")),
        "{rejected:?}"
    );
    assert_eq!(
        narrowed,
        Status::Failed {
            error: format!(
                "sched_setaffinity({pid}, {first},4095) left CPUs {first} (its cpuset narrows it)"
            )
        }
    );
    assert_eq!(after.affinity.to_string(), first.to_string());
}

#[test]
fn a_restore_that_does_not_read_back_fails() {
    let dir = tempfile::tempdir().unwrap();
    let root = SysRoot::new(dir.path());
    std::fs::create_dir_all(dir.path().join("proc/sys/kernel")).unwrap();
    std::os::unix::fs::symlink("/dev/null", dir.path().join("proc/sys/kernel/stubborn")).unwrap();
    let st = restore_one(
        &root,
        &Original::Attr {
            path: "/proc/sys/kernel/stubborn".into(),
            content: "1\n".into(),
            restore: "1".into(),
        },
    );
    assert!(
        matches!(st, Status::Failed { ref error } if error.contains("reads back '' instead of '1'")),
        "{st:?}"
    );
}

#[test]
fn the_lock_shows_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let l = lock(&dir.path().join("state.json")).unwrap();
    assert_eq!(format!("{l:?}"), "StateLock");
    assert!(dir.path().join(".isold.lock").exists());
}

/// Runs of independent items on the workers, every other item alone on the caller's
/// thread and in order; results in the items' order either way.
#[test]
fn runs_of_thread_items_go_to_the_workers_the_rest_stays_in_order() {
    // 3,000 thread items, one other item, 3,000 more.
    let items: Vec<(usize, bool)> = (0..6001).map(|i| (i, i != 3000)).collect();
    let me = std::thread::current().id();
    let seen = std::sync::Mutex::new(Vec::new());
    let out = in_runs(
        &items,
        |(_, independent)| *independent,
        "test",
        |(i, _)| {
            seen.lock().unwrap().push((*i, std::thread::current().id()));
            if i % 100 == 0 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            i * 2
        },
    );
    assert_eq!(out, (0..6001).map(|i| i * 2).collect::<Vec<_>>());
    let seen = seen.into_inner().unwrap();
    let at = |i: usize| seen.iter().position(|(j, _)| *j == i).unwrap();
    let t = at(3000);
    assert_eq!(seen[t].1, me, "the other item on the caller's thread");
    assert!(
        (0..3000).all(|i| at(i) < t) && (3001..6001).all(|i| at(i) > t),
        "in order"
    );
    if crate::par::workers(3000, THREADS_PER_WORKER) > 1 {
        let threads: std::collections::HashSet<_> = seen
            .iter()
            .filter(|(i, _)| *i < 3000)
            .map(|(_, t)| *t)
            .collect();
        assert!(
            threads.len() > 1,
            "a run of thread items on several workers"
        );
    }
}

#[test]
fn what_an_irq_write_can_meet() {
    let want: CpuSet = "0-1".parse().unwrap();
    let werr = |errno| {
        Err(Error::Write {
            path: "/proc/irq/0/smp_affinity_list".into(),
            data: "0-1".into(),
            source: std::io::Error::from_raw_os_error(errno),
        })
    };
    let out = |written, back: &str, settled: Status| {
        irq_written(
            7,
            &want,
            "0-3".into(),
            written,
            || Ok(back.parse().unwrap()),
            || settled,
        )
    };
    assert_eq!(
        out(werr(libc::EIO), "0-3", Status::AlreadyRight),
        Status::NotChangeable {
            reason: "the kernel refuses affinity changes of this IRQ (EIO: I/O error)".into()
        }
    );
    assert!(matches!(
        out(werr(libc::EPERM), "0-3", Status::AlreadyRight),
        Status::NotChangeable { .. }
    ));
    assert_eq!(
        out(werr(libc::ENOENT), "0-3", Status::AlreadyRight),
        Status::Gone
    );
    assert!(matches!(
        out(werr(libc::EINVAL), "0-3", Status::AlreadyRight),
        Status::Failed { .. }
    ));
    assert_eq!(
        out(Ok(()), "0-3", Status::AlreadyRight),
        Status::Failed {
            error: "IRQ 7: wrote 0-1, reads back 0-3".into()
        }
    );
    assert_eq!(
        out(Ok(()), "0-1", Status::AlreadyRight),
        Status::Changed {
            from: "0-3".into(),
            to: "0-1".into()
        }
    );
    let pending = Status::MovePending {
        effective: "3".into(),
    };
    assert_eq!(out(Ok(()), "0-1", pending.clone()), pending);
}
