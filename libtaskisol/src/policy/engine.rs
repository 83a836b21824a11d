//! apply, verify and restore.
//!
//! apply: plan, read every target, persist the originals of those about to change (one
//! atomic write of the state file) *before* the first write, write, read back. verify: plan
//! and compare, read-only. restore: write back every original of the state file, newest
//! first; a thread only if it is still the same thread (tid and start time).
//!
//! On a fake root (a captured tree, `SysRoot::new`) thread changes edit the tree's
//! `status`/`stat` files instead of calling the kernel, so the whole engine can run on
//! fixtures.

use std::fs;
use std::path::{Path, PathBuf};

use super::partition;
use super::plan::{plan, Op, Target};
use super::state::{self, Entry, Original, State};
use super::{shown, Outcome, Policy, Report, Status};
use crate::cpuset::CpuSet;
use crate::error::{Error, Result};
use crate::sched::SchedPolicy;
use crate::sysroot::SysRoot;
use crate::{irq, sched, tasks};

/// The state file of `root` (`<root>/run/isold/state.json`).
pub fn default_state_path(root: &SysRoot) -> PathBuf {
    root.path(state::DEFAULT_STATE)
}

/// What reading a target found.
enum Eval {
    /// Nothing to write.
    Done(Status),
    /// It must change: the original, and the value shown before.
    Change { original: Original, from: String },
}

fn failed(e: impl std::fmt::Display) -> Status {
    Status::Failed {
        error: e.to_string(),
    }
}

fn gone(e: &Error) -> bool {
    matches!(e.errno(), Some(libc::ENOENT) | Some(libc::ESRCH))
}

fn evaluate(root: &SysRoot, policy: &Policy, t: &Target) -> Eval {
    match &t.op {
        Op::Known(s) => Eval::Done(s.clone()),
        Op::Partition(p) => match partition::evaluate(root, p) {
            Err(e) => Eval::Done(failed(e)),
            Ok(partition::Found::Done(s)) => Eval::Done(s),
            Ok(partition::Found::Change { original, from }) => Eval::Change {
                from,
                original: Original::Partition(original),
            },
        },
        Op::Attr { path, want } => match root.read_to_string(path) {
            Err(e) if e.errno() == Some(libc::ENOENT) => Eval::Done(Status::NotPresent {
                reason: format!("this kernel has no {path}"),
            }),
            Err(e) => Eval::Done(failed(e)),
            Ok(raw) if want.matches(&raw) => Eval::Done(Status::AlreadyRight),
            Ok(raw) => Eval::Change {
                from: shown(&raw),
                original: Original::Attr {
                    path: path.clone(),
                    restore: want.restore_text(&raw),
                    content: raw,
                },
            },
        },
        Op::Irq { irq: n, want } => {
            let path = irq::irq_file(*n, "smp_affinity_list");
            match root.read_to_string(&path) {
                Err(e) if gone(&e) => Eval::Done(Status::Gone),
                Err(e) => Eval::Done(failed(e)),
                Ok(raw) => match CpuSet::parse_list(raw.trim()) {
                    Err(e) => Eval::Done(failed(format!("{path}: {e}"))),
                    Ok(cur) if &cur == want => Eval::Done(irq_settled(root, policy, *n)),
                    Ok(_) => Eval::Change {
                        from: shown(&raw),
                        original: Original::Attr {
                            path,
                            restore: shown(&raw),
                            content: raw,
                        },
                    },
                },
            }
        }
        Op::File { path, content } => match super::plan::read_file_opt(root, path) {
            Err(e) => Eval::Done(failed(e)),
            Ok(Some(cur)) if &cur == content => Eval::Done(Status::AlreadyRight),
            Ok(cur) => Eval::Change {
                from: if cur.is_some() {
                    "other content".into()
                } else {
                    "absent".into()
                },
                original: Original::File {
                    created_dir: if cur.is_none() {
                        first_missing_dir(root, path)
                    } else {
                        None
                    },
                    path: path.clone(),
                    content: cur,
                },
            },
        },
        Op::Affinity { thread, want } => {
            if &thread.affinity == want {
                Eval::Done(Status::AlreadyRight)
            } else {
                Eval::Change {
                    from: thread.affinity.to_string(),
                    original: Original::Affinity {
                        pid: thread.pid,
                        tid: thread.tid,
                        starttime: thread.starttime,
                        comm: thread.comm.clone(),
                        cpus: thread.affinity.to_string(),
                    },
                }
            }
        }
        Op::Sched { thread, want } => {
            if thread.policy as i32 == want.policy_number() && thread.rt_priority == want.priority()
            {
                Eval::Done(Status::AlreadyRight)
            } else {
                Eval::Change {
                    from: sched_shown(thread.policy, thread.rt_priority),
                    original: Original::Sched {
                        pid: thread.pid,
                        tid: thread.tid,
                        starttime: thread.starttime,
                        comm: thread.comm.clone(),
                        policy: thread.policy,
                        rt_priority: thread.rt_priority,
                    },
                }
            }
        }
    }
}

fn sched_shown(policy: u32, prio: u32) -> String {
    SchedPolicy::from_stat(policy, prio)
        .map_or_else(|| format!("policy {policy}"), |p| p.to_string())
}

/// An IRQ whose affinity is right: is it delivered to a housekeeping CPU yet?
fn irq_settled(root: &SysRoot, policy: &Policy, n: u32) -> Status {
    match irq::effective_affinity(root, n) {
        Ok(Some(eff)) if !eff.is_disjoint(&policy.isolated) => Status::MovePending {
            effective: eff.to_string(),
        },
        _ => Status::AlreadyRight,
    }
}

fn want_shown(t: &Target) -> String {
    match &t.op {
        Op::Attr { want, .. } => want.shown(),
        Op::Irq { want, .. } | Op::Affinity { want, .. } => want.to_string(),
        Op::File { .. } => "isold's content".into(),
        Op::Sched { want, .. } => want.to_string(),
        Op::Known(s) => s.to_string(),
        Op::Partition(p) => format!("isolated partition of CPUs {}, workloads in it", p.cpus),
    }
}

/// Write a whole file atomically (temporary file and rename), creating its directory.
fn write_file(root: &SysRoot, abs: &str, content: &str) -> Result<()> {
    let path = root.path(abs);
    let err = |source| Error::Write {
        path: path.clone(),
        data: content.lines().next().unwrap_or("").to_string(),
        source,
    };
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(err)?;
    }
    let tmp = path.with_extension("isold-tmp");
    fs::write(&tmp, content)
        .and_then(|()| fs::File::open(&tmp)?.sync_all())
        .and_then(|()| fs::rename(&tmp, &path))
        .map_err(err)
}

fn remove_file(root: &SysRoot, abs: &str) -> Result<()> {
    let path = root.path(abs);
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Error::Write {
            path,
            data: "(remove)".into(),
            source,
        }),
    }
}

/// The outermost ancestor of `abs` that does not exist (what `create_dir_all` would make).
fn first_missing_dir(root: &SysRoot, abs: &str) -> Option<String> {
    let mut missing = None;
    let mut dir = Path::new(abs).parent();
    while let Some(d) = dir {
        // The root directory always exists.
        if d.as_os_str().is_empty() || root.exists(d) {
            break;
        }
        missing = Some(d.to_string_lossy().into_owned());
        dir = d.parent();
    }
    missing
}

/// Remove the directories between `abs` and `created` (inclusive) that are empty: the ones
/// apply made for the file. A directory something else has filled since stays (removing it
/// fails, and so does removing any directory above it).
fn remove_created_dirs(root: &SysRoot, abs: &str, created: Option<&str>) {
    let Some(created) = created else {
        return;
    };
    for d in Path::new(abs)
        .ancestors()
        .skip(1)
        .take_while(|d| d.starts_with(created))
    {
        let _ = fs::remove_dir(root.path(d));
    }
}

/// Thread changes: system calls on the running system, file edits in a captured tree.
pub(super) fn set_thread_affinity(root: &SysRoot, pid: i32, tid: i32, cpus: &CpuSet) -> Result<()> {
    if root.is_host() {
        return sched::set_affinity(tid, cpus);
    }
    edit_tree_file(root, &format!("/proc/{pid}/task/{tid}/status"), |text| {
        text.lines()
            .map(|l| {
                if l.starts_with("Cpus_allowed_list:") {
                    format!("Cpus_allowed_list:\t{cpus}\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect()
    })
}

fn set_thread_sched(root: &SysRoot, pid: i32, tid: i32, policy: SchedPolicy) -> Result<()> {
    if root.is_host() {
        return sched::set_scheduler(tid, policy);
    }
    edit_tree_file(root, &format!("/proc/{pid}/task/{tid}/stat"), |text| {
        // Fields after the comm's closing parenthesis start at field 3; rt_priority and
        // policy are fields 40 and 41.
        let close = text.rfind(')').unwrap_or(0);
        let (head, tail) = text.split_at(close + 1);
        let mut f: Vec<String> = tail.split_whitespace().map(str::to_string).collect();
        if f.len() >= 39 {
            f[37] = policy.priority().to_string();
            f[38] = policy.policy_number().to_string();
        }
        format!("{head} {}\n", f.join(" "))
    })
}

fn edit_tree_file(root: &SysRoot, abs: &str, edit: impl FnOnce(&str) -> String) -> Result<()> {
    let text = root.read_to_string(abs).map_err(|e| {
        if e.errno() == Some(libc::ENOENT) {
            Error::syscall(format!("thread of {abs}"), nix::errno::Errno::ESRCH)
        } else {
            e
        }
    })?;
    root.write(abs, edit(&text))
}

/// Make the change `t` asks for, and read it back.
fn change(
    root: &SysRoot,
    policy: &Policy,
    t: &Target,
    original: &Original,
    from: String,
) -> Status {
    match &t.op {
        Op::Known(s) => s.clone(),
        Op::Partition(p) => match original {
            Original::Partition(o) => partition::change(root, o, &p.cpus, from),
            _ => failed(format!("{}: no partition original", t.id)),
        },
        Op::Attr { path, want } => {
            let raw = match root.read_to_string(path) {
                Ok(r) => r,
                Err(e) => return failed(e),
            };
            let text = want.write_text(&raw);
            if let Err(e) = root.write_attr(path, &text) {
                return failed(e);
            }
            match root.read_to_string(path) {
                Ok(back) if want.matches(&back) => Status::Changed {
                    from,
                    to: shown(&back),
                },
                Ok(back) => failed(format!(
                    "wrote '{text}' to {}, but it reads back '{}'",
                    root.path(path).display(),
                    shown(&back)
                )),
                Err(e) => failed(e),
            }
        }
        Op::Irq { irq: n, want } => irq_written(
            *n,
            want,
            from,
            irq::set_affinity(root, *n, want),
            || irq::affinity(root, *n),
            || irq_settled(root, policy, *n),
        ),
        Op::File { path, content } => match write_file(root, path, content) {
            Ok(()) => Status::Changed {
                from,
                to: "isold's content".into(),
            },
            Err(e) => failed(e),
        },
        Op::Affinity { thread, want } => {
            match set_thread_affinity(root, thread.pid, thread.tid, want) {
                Err(e) if e.errno() == Some(libc::ESRCH) => Status::Gone,
                Err(e) if e.errno() == Some(libc::EINVAL) => Status::NotChangeable {
                    reason: format!("the kernel refuses: {e}"),
                },
                Err(e) => failed(e),
                Ok(()) => match tasks::read_thread(root, thread.pid, thread.tid) {
                    Ok(None) => Status::Gone,
                    Ok(Some(now)) if &now.affinity == want => Status::Changed {
                        from,
                        to: now.affinity.to_string(),
                    },
                    Ok(Some(now)) => failed(format!(
                        "sched_setaffinity({}, {want}) left CPUs {} (its cpuset narrows it)",
                        thread.tid, now.affinity
                    )),
                    Err(e) => failed(e),
                },
            }
        }
        Op::Sched { thread, want } => match set_thread_sched(root, thread.pid, thread.tid, *want) {
            Err(e) if e.errno() == Some(libc::ESRCH) => Status::Gone,
            Err(e) => failed(e),
            Ok(()) => match tasks::read_thread(root, thread.pid, thread.tid) {
                Ok(None) => Status::Gone,
                Ok(Some(now)) => Status::Changed {
                    from,
                    to: sched_shown(now.policy, now.rt_priority),
                },
                Err(e) => failed(e),
            },
        },
    }
}

/// The outcome of writing IRQ `n`'s affinity: the write's result, then (if it took) the
/// affinity read back and whether delivery has moved. Apart from the kernel, so that answers
/// the test kernels never give (a value that does not stick) are tested too.
fn irq_written(
    n: u32,
    want: &CpuSet,
    from: String,
    written: Result<()>,
    read_back: impl FnOnce() -> Result<CpuSet>,
    settled: impl FnOnce() -> Status,
) -> Status {
    match written {
        Err(e) if irq::is_unmovable_errno(e.errno()) => Status::NotChangeable {
            reason: format!(
                "the kernel refuses affinity changes of this IRQ ({})",
                nix::errno::Errno::from_raw(e.errno().unwrap_or(0))
            ),
        },
        Err(e) if gone(&e) => Status::Gone,
        Err(e) => failed(e),
        Ok(()) => match read_back() {
            Ok(cur) if &cur == want => match settled() {
                Status::AlreadyRight => Status::Changed {
                    from,
                    to: cur.to_string(),
                },
                pending => pending,
            },
            Ok(cur) => failed(format!("IRQ {n}: wrote {want}, reads back {cur}")),
            Err(e) => failed(e),
        },
    }
}

/// An exclusive lock next to the state file, so two isold commands never interleave.
pub struct StateLock {
    _lock: nix::fcntl::Flock<fs::File>,
}

impl std::fmt::Debug for StateLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateLock")
    }
}

/// The lock file of the state file `state_path`.
pub fn lock_path(state_path: &Path) -> PathBuf {
    state_path
        .parent()
        .unwrap_or(Path::new("."))
        .join(".isold.lock")
}

/// Take the lock of the state file `state_path` (waiting for another isold command).
pub fn lock(state_path: &Path) -> Result<StateLock> {
    let dir = state_path.parent().unwrap_or(Path::new("."));
    let lock_path = lock_path(state_path);
    let werr = |p: &Path, source| Error::Write {
        path: p.into(),
        data: "(lock)".into(),
        source,
    };
    fs::create_dir_all(dir).map_err(|e| werr(dir, e))?;
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| werr(&lock_path, e))?;
    let lock = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, errno)| Error::syscall(format!("flock({})", lock_path.display()), errno))?;
    Ok(StateLock { _lock: lock })
}

fn report(command: &str, policy: Option<&Policy>) -> Report {
    Report {
        command: command.into(),
        isolated: policy.map(|p| p.isolated.to_string()).unwrap_or_default(),
        housekeeping: policy
            .map(|p| p.housekeeping.to_string())
            .unwrap_or_default(),
        ..Report::default()
    }
}

fn outcome(t: &Target, status: Status) -> Outcome {
    Outcome {
        item: t.item.into(),
        id: t.id.clone(),
        label: t.label.clone(),
        status,
    }
}

/// Apply `policy`: see the module documentation.
pub fn apply(root: &SysRoot, policy: &Policy, state_path: &Path) -> Result<Report> {
    let _lock = lock(state_path)?;
    let targets = plan(policy, root)?;
    apply_targets(root, policy, state_path, targets)
}

/// Apply the thread items of `policy` (affinity, kthread priority) to these threads only, as
/// [`apply`] would: a daemon's answer to a task that was just created, exec'd or renamed.
/// Originals recorded by an earlier apply are kept.
pub fn apply_threads(
    root: &SysRoot,
    policy: &Policy,
    state_path: &Path,
    threads: &[crate::tasks::Thread],
) -> Result<Report> {
    let _lock = lock(state_path)?;
    let targets = super::plan::plan_for_threads(policy, root, threads);
    apply_targets(root, policy, state_path, targets)
}

/// Apply these targets of `policy` only (from its plan, such as a
/// [`Watch`](super::watch::Watch) found drifted), as [`apply`] would: a daemon's repair of
/// values that drifted, without planning the rest. Originals recorded by an earlier apply are
/// kept.
pub fn apply_only(
    root: &SysRoot,
    policy: &Policy,
    state_path: &Path,
    targets: Vec<Target>,
) -> Result<Report> {
    let _lock = lock(state_path)?;
    apply_targets(root, policy, state_path, targets)
}

fn apply_targets(
    root: &SysRoot,
    policy: &Policy,
    state_path: &Path,
    targets: Vec<Target>,
) -> Result<Report> {
    let mut rep = report("apply", Some(policy));
    // Whether the state file on disk is this boot's: then originals recorded now can be
    // appended to its journal instead of rewriting it whole.
    let mut on_disk = false;
    let mut state = match State::load(state_path)? {
        Some(s) if s.boot_id == state::boot_id(root)? => {
            on_disk = true;
            s
        }
        Some(s) => {
            // /run normally dies with the boot; a state file kept elsewhere holds runtime
            // originals that mean nothing now, but files on disk still need them.
            rep.notes.push(format!(
                "{}: recorded in an earlier boot; kept only its on-disk files' originals",
                state_path.display()
            ));
            let mut fresh = State::new(
                state::boot_id(root)?,
                policy.isolated.to_string(),
                policy.config.file.display().to_string(),
            );
            fresh.entries = s
                .entries
                .into_iter()
                .filter(|e| !e.original.is_runtime())
                .collect();
            fresh
        }
        None => State::new(
            state::boot_id(root)?,
            policy.isolated.to_string(),
            policy.config.file.display().to_string(),
        ),
    };
    let mut pending = Vec::new();
    let mut statuses: Vec<Option<Status>> = Vec::with_capacity(targets.len());
    let mut new_ids = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        match evaluate(root, policy, t) {
            Eval::Done(s) => statuses.push(Some(s)),
            Eval::Change { original, from } => {
                if state.record(Entry {
                    id: t.id.clone(),
                    item: t.item.into(),
                    label: t.label.clone(),
                    original: original.clone(),
                }) {
                    new_ids.push(t.id.clone());
                } else if let Original::Partition(p) = &original {
                    // Workloads started since the first apply: their cgroups are originals
                    // too, added to the recorded ones (which are never replaced).
                    state.add_moved(&t.id, &p.moved);
                    on_disk = false;
                }
                // The change works from what the state file holds: after an interrupted
                // apply, a directory that apply created is still "created".
                let recorded = state
                    .entries
                    .iter()
                    .find(|e| e.id == t.id)
                    .map_or(original, |e| e.original.clone());
                pending.push((i, recorded, from));
                statuses.push(None);
            }
        }
    }
    if !new_ids.is_empty() || (!pending.is_empty() && !on_disk) {
        // The originals are on disk before the first write.
        if on_disk {
            let added: Vec<Entry> = state
                .entries
                .iter()
                .filter(|e| new_ids.contains(&e.id))
                .cloned()
                .collect();
            state.append(state_path, &added)?;
        } else {
            state.save(state_path)?;
        }
    }
    for (i, original, from) in pending {
        statuses[i] = Some(change(root, policy, &targets[i], &original, from));
        rep.written.push(targets[i].id.clone());
    }
    let mut dirty = false;
    for (t, s) in targets.iter().zip(&statuses) {
        let s = s.as_ref().expect("every target has a status");
        match s {
            Status::NotChangeable { reason } => {
                dirty |= state
                    .unchangeable
                    .insert(t.id.clone(), reason.clone())
                    .as_deref()
                    != Some(reason);
            }
            _ => dirty |= state.unchangeable.remove(&t.id).is_some(),
        }
        // Recorded in this run, but nothing was changed: no original to keep.
        if matches!(
            s,
            Status::Failed { .. } | Status::NotChangeable { .. } | Status::Gone
        ) && new_ids.contains(&t.id)
        {
            state.entries.retain(|e| e.id != t.id);
            dirty = true;
        }
    }
    if dirty {
        state.save(state_path)?;
    }
    if state.entries.is_empty() && state.unchangeable.is_empty() {
        State::remove(state_path)?;
    }
    for (t, s) in targets.iter().zip(statuses) {
        rep.outcomes.push(outcome(t, s.expect("status")));
    }
    notes_after_apply(&mut rep);
    Ok(rep)
}

fn notes_after_apply(rep: &mut Report) {
    let changed = |item: &str| {
        rep.outcomes
            .iter()
            .any(|o| o.item == item && matches!(o.status, Status::Changed { .. }))
    };
    let mut notes = Vec::new();
    if changed("kvm") {
        notes.push(
            "kvm: the module options take effect when the kvm modules are next loaded".to_string(),
        );
    }
    if changed("irqbalance") {
        notes.push(
            "irqbalance: restart it (systemctl try-restart irqbalance) to use the banned CPUs"
                .to_string(),
        );
    }
    if changed("systemd_cpuaffinity") {
        notes.push("systemd CPUAffinity: takes effect after `systemctl daemon-reexec`".to_string());
    }
    rep.notes.extend(notes);
}

/// Compare the live system with `policy`, read-only. Targets the last apply found
/// unchangeable (recorded in the state file at `state_path`) are reported as such.
pub fn verify(root: &SysRoot, policy: &Policy, state_path: &Path) -> Result<Report> {
    let unchangeable = State::unchangeable_of(state_path)?;
    let mut rep = report("verify", Some(policy));
    for t in plan(policy, root)? {
        let status = match evaluate(root, policy, &t) {
            Eval::Done(s) => s,
            Eval::Change { from, .. } => match unchangeable.get(&t.id) {
                Some(reason) => Status::NotChangeable {
                    reason: reason.clone(),
                },
                None => Status::Deviates {
                    current: from,
                    want: want_shown(&t),
                },
            },
        };
        rep.outcomes.push(outcome(&t, status));
    }
    Ok(rep)
}

fn restore_one(root: &SysRoot, o: &Original) -> Status {
    match o {
        Original::Partition(p) => partition::restore(root, p),
        Original::Attr {
            path,
            content,
            restore,
        } => {
            if let Err(e) = root.write_attr(path, restore) {
                return failed(e);
            }
            match root.read_to_string(path) {
                Ok(back) if &back == content => Status::Restored { to: shown(&back) },
                Ok(back) => failed(format!(
                    "wrote '{restore}' to {}, but it reads back '{}' instead of '{}'",
                    root.path(path).display(),
                    shown(&back),
                    shown(content)
                )),
                Err(e) => failed(e),
            }
        }
        Original::File {
            path,
            content,
            created_dir,
        } => match content {
            Some(c) => write_file(root, path, c).map(|()| Status::Restored {
                to: "original content".into(),
            }),
            None => remove_file(root, path).map(|()| {
                remove_created_dirs(root, path, created_dir.as_deref());
                Status::Restored {
                    to: "removed".into(),
                }
            }),
        }
        .unwrap_or_else(failed),
        Original::Affinity {
            pid,
            tid,
            starttime,
            cpus,
            ..
        } => {
            match tasks::is_same_thread(root, *pid, *tid, *starttime) {
                Ok(false) => return Status::Gone,
                Err(e) => return failed(e),
                Ok(true) => {}
            }
            let set = match CpuSet::parse_list(cpus) {
                Ok(s) => s,
                Err(e) => return failed(e),
            };
            match set_thread_affinity(root, *pid, *tid, &set) {
                Ok(()) => Status::Restored { to: cpus.clone() },
                Err(e) if e.errno() == Some(libc::ESRCH) => Status::Gone,
                Err(e) => failed(e),
            }
        }
        Original::Sched {
            pid,
            tid,
            starttime,
            policy,
            rt_priority,
            ..
        } => {
            match tasks::is_same_thread(root, *pid, *tid, *starttime) {
                Ok(false) => return Status::Gone,
                Err(e) => return failed(e),
                Ok(true) => {}
            }
            let Some(p) = SchedPolicy::from_stat(*policy, *rt_priority) else {
                return failed(format!("unknown scheduling policy {policy}"));
            };
            match set_thread_sched(root, *pid, *tid, p) {
                Ok(()) => Status::Restored { to: p.to_string() },
                Err(e) if e.errno() == Some(libc::ESRCH) => Status::Gone,
                Err(e) => failed(e),
            }
        }
    }
}

/// Put back every original recorded in the state file at `state_path`, newest first.
/// Restored (and vanished) entries leave the state file; it is removed once empty, so a
/// second restore finds nothing to do.
pub fn restore(root: &SysRoot, state_path: &Path) -> Result<Report> {
    restore_where(root, state_path, |_| true)
}

/// Like [`restore`], for the recorded originals whose id `pick` accepts; the others stay in the
/// state file. A daemon given a new policy puts back what the new one no longer covers.
pub fn restore_where(
    root: &SysRoot,
    state_path: &Path,
    pick: impl Fn(&str) -> bool,
) -> Result<Report> {
    let _lock = lock(state_path)?;
    let mut rep = report("restore", None);
    let Some(mut state) = State::load(state_path)? else {
        rep.notes.push(format!(
            "no state file at {}: nothing to restore",
            state_path.display()
        ));
        return Ok(rep);
    };
    rep.isolated = state.isolated.clone();
    let same_boot = state.boot_id == state::boot_id(root)?;
    let mut keep = Vec::new();
    let mut kept_back = 0usize;
    for e in state.entries.iter().rev() {
        if !pick(&e.id) {
            keep.push(e.clone());
            kept_back += 1;
            continue;
        }
        let status = if !same_boot && e.original.is_runtime() {
            Status::Gone
        } else {
            restore_one(root, &e.original)
        };
        if matches!(status, Status::Failed { .. }) {
            keep.push(e.clone());
        }
        rep.outcomes.push(Outcome {
            item: e.item.clone(),
            id: e.id.clone(),
            label: e.label.clone(),
            status,
        });
    }
    if !same_boot {
        rep.notes.push("the state file is from an earlier boot: runtime values were reset by the reboot; only files were restored".into());
    }
    keep.reverse();
    state.entries = keep;
    state.unchangeable.retain(|id, _| !pick(id));
    if state.entries.is_empty() && state.unchangeable.is_empty() {
        State::remove(state_path)?;
    } else {
        state.save(state_path)?;
        let failed = state.entries.len() - kept_back;
        if failed > 0 {
            rep.notes.push(format!(
                "{failed} original(s) could not be restored and stay in {}",
                state_path.display()
            ));
        }
    }
    Ok(rep)
}

#[cfg(test)]
mod tests {
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
        match evaluate(root, &policy(), &target(op)) {
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
        change(
            root,
            &policy(),
            &target(op),
            &Original::File {
                path: String::new(),
                content: None,
                created_dir: None,
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
        // The kernel takes the write but keeps its value: /dev/null reads back nothing.
        std::fs::create_dir_all(dir.path().join("proc/sys/kernel")).unwrap();
        std::os::unix::fs::symlink("/dev/null", dir.path().join("proc/sys/kernel/stubborn"))
            .unwrap();
        assert!(matches!(
            changed(
                &root,
                Op::Attr {
                    path: "/proc/sys/kernel/stubborn".into(),
                    want: Want::Text("0".into())
                }
            ),
            Status::Failed { ref error } if error.contains("but it reads back ''")
        ),);
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
        std::os::unix::fs::symlink("/dev/null", dir.path().join("proc/sys/kernel/stubborn"))
            .unwrap();
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
}
