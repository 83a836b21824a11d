//! apply, verify and restore.
//!
//! apply: plan, read every target, persist the originals of those about to change (one
//! atomic write of the state file) *before* the first write, write, read back. verify: plan
//! and compare, read-only. restore: write back every original of the state file, newest
//! first; a thread only if it is still the same thread (tid and start time) and its owner has
//! not pinned it since onto a CPU isold took it off. [`restore`], [`restore_where`] and
//! [`give_back`] live in `policy/restore.rs` and are re-exported here.
//!
//! On a fake root (a captured tree, `SysRoot::new`) thread changes edit the tree's
//! `status`/`stat` files instead of calling the kernel, so the whole engine can run on
//! fixtures.

use std::path::{Path, PathBuf};

use super::common::{failed, in_runs, report, set_aside_note, write_file};
pub use super::common::{lock, lock_path, StateLock};
use super::partition;
use super::plan::{plan, Op, Target};
pub use super::restore::{
    forget_gone_devices, forget_gone_threads, forget_where, give_back, restore, restore_where,
};
use super::state::{self, Entry, Ledger, Original, StateFiles};
use super::threads::{refusal, set_thread_affinity_if, set_thread_sched, Refusal};
use super::{shown, Outcome, Policy, Report, Status};
use crate::cpuset::CpuSet;
use crate::error::{Error, Result};
use crate::sched::SchedPolicy;
use crate::sysroot::SysRoot;
use crate::{irq, tasks};

mod verify;

pub use verify::{verify, waiting};

/// Record `entry` in the state files (under their lock) before the change it undoes, unless
/// its id is recorded already (the first original stays). `isolated` and `config` head a
/// runtime state file that does not exist yet. Returns whether it was new. An error says which
/// state directory could not take it: the change must then not be made.
pub fn record_original(
    root: &SysRoot,
    files: &StateFiles,
    isolated: &str,
    config: &str,
    entry: Entry,
) -> Result<bool> {
    record_with(root, files, isolated, config, entry, false)
}

/// Record `entry` as [`record_original`] does, or, when its id recorded another original
/// (a thread whose owner changed its policy since it was recorded), replace that one: the
/// state files are written only when the entry is new or changed. Returns whether they were.
pub fn record_current(
    root: &SysRoot,
    files: &StateFiles,
    isolated: &str,
    config: &str,
    entry: Entry,
) -> Result<bool> {
    record_with(root, files, isolated, config, entry, true)
}

/// One entry recorded under the state files' lock; an entry of the same id is kept, or
/// replaced when `replace` and its original differs. Persisted only when something changed.
fn record_with(
    root: &SysRoot,
    files: &StateFiles,
    isolated: &str,
    config: &str,
    entry: Entry,
    replace: bool,
) -> Result<bool> {
    let _lock = lock(&files.runtime)?;
    let mut ledger = Ledger::load(files, root, isolated.to_string(), config.to_string())?;
    match ledger.state.get_mut(&entry.id) {
        Some(e) if !replace || e.original == entry.original => return Ok(false),
        Some(e) => *e = entry,
        None => {
            ledger.state.record(entry);
        }
    }
    ledger.persist().map_err(|e| ledger.not_recorded(e))?;
    Ok(true)
}

/// The runtime state file of `root` (`<root>/run/isold/state.json`).
pub fn default_state_path(root: &SysRoot) -> PathBuf {
    root.path(state::DEFAULT_STATE)
}

/// The state files of `root` (`<root>/run/isold/state.json`, `<root>/var/lib/isold/state.json`).
pub fn default_state_files(root: &SysRoot) -> StateFiles {
    StateFiles::default_for(root)
}

/// What reading a target found.
enum Eval {
    /// Nothing to write.
    Done(Status),
    /// It must change: the original, and the value shown before.
    Change { original: Original, from: String },
}

fn gone(e: &Error) -> bool {
    matches!(e.errno(), Some(libc::ENOENT) | Some(libc::ESRCH))
}

/// Long because it is one arm per kind of target (`Op`).
fn evaluate(root: &SysRoot, isolated: &CpuSet, t: &Target) -> Eval {
    match &t.op {
        Op::Known(s) => Eval::Done(s.clone()),
        Op::Channels { dev, ifindex, want } => {
            match super::channels::evaluate(root, dev, *ifindex, want) {
                super::channels::Found::Done(s) => Eval::Done(s),
                super::channels::Found::Change { from, original } => {
                    Eval::Change { from, original }
                }
            }
        }
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
                from: want.shown_current(&raw),
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
                    Ok(cur) if &cur == want || super::plan::irq_off(&cur, isolated) => {
                        Eval::Done(irq_settled(root, isolated, *n))
                    }
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
        // isold's lines, put into the file as it is now: what its administrator added is
        // kept, and is no difference.
        Op::File { path, edit } => match super::plan::read_file_opt(root, path) {
            Err(e) => Eval::Done(failed(e)),
            Ok(cur) if edit.holds(cur.as_deref()) => Eval::Done(Status::AlreadyRight),
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
                    written: Some(edit.apply(cur.as_deref())),
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
                        taken_off: Some(thread.affinity.difference(want).to_string()),
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
fn irq_settled(root: &SysRoot, isolated: &CpuSet, n: u32) -> Status {
    match irq::effective_affinity(root, n) {
        Ok(Some(eff)) if !eff.is_disjoint(isolated) => Status::MovePending {
            effective: eff.to_string(),
        },
        _ => Status::AlreadyRight,
    }
}

fn want_shown(t: &Target) -> String {
    match &t.op {
        Op::Attr { want, .. } => want.shown(),
        Op::Irq { want, .. } | Op::Affinity { want, .. } => want.to_string(),
        Op::File { .. } => "isold's lines".into(),
        Op::Sched { want, .. } => want.to_string(),
        Op::Known(s) => s.to_string(),
        Op::Channels { want, .. } => crate::net::counts_shown(want),
        Op::Partition(p) => format!("isolated partition of CPUs {}, workloads in it", p.cpus),
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

/// Make the change `t` asks for, and read it back. The flag says whether a write took effect
/// (or may have: a file half written, a partition whose undo failed), whatever the read-back
/// said: then its original must be kept for restore. A write the kernel refused changed
/// nothing.
///
/// Long because it is one arm per kind of target (`Op`).
fn change(
    root: &SysRoot,
    isolated: &CpuSet,
    t: &Target,
    original: &Original,
    from: String,
) -> (Status, bool) {
    match &t.op {
        Op::Known(s) => (s.clone(), false),
        Op::Channels { dev, want, .. } => super::channels::change(root, dev, want, from),
        Op::Partition(p) => match original {
            Original::Partition(o) => partition::change(root, o, &p.cpus, from),
            _ => (failed(format!("{}: no partition original", t.id)), false),
        },
        Op::Attr { path, want } => {
            let raw = match root.read_to_string(path) {
                Ok(r) => r,
                Err(e) => return (failed(e), false),
            };
            let text = want.write_text(&raw);
            if let Err(e) = root.write_attr(path, &text) {
                return (failed(e), false);
            }
            let status = match root.read_to_string(path) {
                Ok(back) if want.matches(&back) => Status::Changed {
                    from,
                    to: want.shown_current(&back),
                },
                Ok(back) => failed(format!(
                    "wrote '{text}' to {}, but it reads back '{}'",
                    root.path(path).display(),
                    shown(&back)
                )),
                Err(e) => failed(e),
            };
            (status, true)
        }
        Op::Irq { irq: n, want } => {
            let written = irq::set_affinity(root, *n, want);
            let wrote = written.is_ok();
            let status = irq_written(
                *n,
                want,
                from,
                written,
                || irq::affinity(root, *n),
                || irq_settled(root, isolated, *n),
            );
            (status, wrote)
        }
        // What the record says isold writes: the file as it was read, with isold's lines.
        Op::File { path, edit } => match write_file(
            root,
            path,
            &match original {
                Original::File {
                    written: Some(w), ..
                } => w.clone(),
                _ => edit.own(),
            },
        ) {
            Ok(()) => (
                Status::Changed {
                    from,
                    to: "isold's lines".into(),
                },
                true,
            ),
            // A rewrite in place may have stopped half way.
            Err(e) => (failed(e), true),
        },
        Op::Affinity { thread, want } => {
            // Something may have pinned it since the plan read it (libvirt's <vcpupin>,
            // DPDK, taskset -p): it is read again right before the write, with nothing
            // between the two, and a change made since is its owner's, left as set (one
            // off the isolated CPUs leaves nothing to do).
            match set_thread_affinity_if(root, thread.pid, thread.tid, &thread.affinity, want) {
                Err(e) => match refusal(&e) {
                    Refusal::Gone => (Status::Gone, false),
                    Refusal::NotChangeable => (
                        Status::NotChangeable {
                            reason: format!("the kernel refuses: {e}"),
                        },
                        false,
                    ),
                    Refusal::Failed => (failed(e), false),
                },
                Ok(Some(now)) if now.is_disjoint(isolated) => (Status::AlreadyRight, false),
                Ok(Some(now)) => (
                    Status::OwnerSet {
                        now: now.to_string(),
                        reason: format!(
                            "set after isold read it as {}, before its write",
                            thread.affinity
                        ),
                    },
                    false,
                ),
                Ok(None) => {
                    // Read back by the same call as the check (sched_getaffinity): the stat
                    // and status files of a full read would cost two more opens a thread.
                    // Fewer CPUs than written: the kernel (its cpuset) narrowed the write;
                    // others: its owner's, set right after (which stands). An owner's write
                    // between the check and isold's write is overwritten unseen (see
                    // docs/ARCHITECTURE.md, "Pins").
                    let now = super::threads::affinity_now(root, thread.pid, thread.tid);
                    (read_back(thread.tid, want, from, now), true)
                }
            }
        }
        Op::Sched { thread, want } => match set_thread_sched(root, thread.pid, thread.tid, *want) {
            Err(e) if e.errno() == Some(libc::ESRCH) => (Status::Gone, false),
            Err(e) => (failed(e), false),
            Ok(()) => {
                let status = match tasks::read_thread(root, thread.pid, thread.tid) {
                    Ok(None) => Status::Gone,
                    Ok(Some(now)) => Status::Changed {
                        from,
                        to: sched_shown(now.policy, now.rt_priority),
                    },
                    Err(e) => failed(e),
                };
                (status, true)
            }
        },
    }
}

/// What thread `tid`'s affinity read back after isold wrote `want` (it was `from`) says:
/// `want`, changed; fewer CPUs, the kernel (its cpuset) narrowed the write, a failure; any
/// other, its owner's, set right after isold's write (which stands).
fn read_back(tid: i32, want: &CpuSet, from: String, now: Result<Option<CpuSet>>) -> Status {
    match now {
        Ok(None) => Status::Gone,
        Ok(Some(now)) if &now == want => Status::Changed {
            from,
            to: now.to_string(),
        },
        Ok(Some(now)) if now.is_subset(want) => failed(format!(
            "sched_setaffinity({tid}, {want}) left CPUs {now} (its cpuset narrows it)"
        )),
        Ok(Some(now)) => Status::OwnerSet {
            now: now.to_string(),
            reason: format!("set right after isold wrote {want}"),
        },
        Err(e) => failed(e),
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

fn outcome(t: &Target, status: Status) -> Outcome {
    Outcome {
        item: t.item.into(),
        id: t.id.clone(),
        label: t.label.clone(),
        status,
    }
}

/// Apply `policy`: see the module documentation.
pub fn apply(root: &SysRoot, policy: &Policy, files: &StateFiles) -> Result<Report> {
    let _lock = lock(&files.runtime)?;
    let targets = plan(policy, root)?;
    let mut rep = apply_targets(root, policy, files, targets)?;
    // A driver spreads the IRQs of the queues it keeps over every CPU when their number
    // changes (virtio-net, mlx5): the IRQs planned before are planned and applied again.
    let channels = rep
        .outcomes
        .iter()
        .any(|o| o.item == "net_queues" && matches!(o.status, Status::Changed { .. }));
    if channels && policy.on("irq_affinity") {
        let again = super::plan::plan_item(policy, root, "irq_affinity")?;
        let second = apply_targets(root, policy, files, again)?;
        merge_second_pass(&mut rep, second);
    }
    Ok(rep)
}

/// The outcomes of a second pass over some targets folded into the first report: a target
/// the second pass changed (or failed, or found pending) takes its outcome; one it found
/// right keeps the first pass's; a target new in the second pass is added.
fn merge_second_pass(rep: &mut Report, second: Report) {
    for o in second.outcomes {
        match rep.outcomes.iter_mut().find(|f| f.id == o.id) {
            Some(_) if matches!(o.status, Status::AlreadyRight) => {}
            Some(first) => *first = o,
            None => rep.outcomes.push(o),
        }
    }
    for w in second.written {
        if !rep.written.contains(&w) {
            rep.written.push(w);
        }
    }
    for n in second.notes {
        if !rep.notes.contains(&n) {
            rep.notes.push(n);
        }
    }
}

/// Apply the thread items of `policy` (affinity, kthread priority) to these threads only, as
/// [`apply`] would: a daemon's answer to a task that was just created, exec'd or renamed.
/// Originals recorded by an earlier apply are kept.
pub fn apply_threads(
    root: &SysRoot,
    policy: &Policy,
    files: &StateFiles,
    threads: &[crate::tasks::Thread],
) -> Result<Report> {
    let _lock = lock(&files.runtime)?;
    let targets = super::plan::plan_for_threads(policy, root, threads);
    apply_targets(root, policy, files, targets)
}

/// Apply these targets of `policy` only (from its plan, such as a
/// [`Watch`](super::watch::Watch) found drifted), as [`apply`] would: a daemon's repair of
/// values that drifted, without planning the rest. Originals recorded by an earlier apply are
/// kept.
pub fn apply_only(
    root: &SysRoot,
    policy: &Policy,
    files: &StateFiles,
    targets: Vec<Target>,
) -> Result<Report> {
    let _lock = lock(&files.runtime)?;
    apply_targets(root, policy, files, targets)
}

/// Write a file isold owns outside any policy item (the GRUB drop-in of `isold bootargs
/// --write-grub`) as apply writes the policy's files: its original recorded in the
/// persistent state file first, so that `isold restore`, after any number of reboots, puts
/// back what was there (removes the file isold created). `item` and `path` must be one of
/// [`super::plan::owned_files`].
pub fn write_owned_file(
    root: &SysRoot,
    files: &StateFiles,
    item: &'static str,
    path: &str,
    content: &str,
) -> Result<Report> {
    write_owned_files(
        root,
        files,
        item,
        &[(path.to_string(), content.to_string())],
    )
}

/// [`write_owned_file`] of several files at once, in order, under one lock: each path must
/// be a file isold may write for `item` ([`super::items::owned_item`]), such as GRUB's
/// `/etc/default/grub` with an argument replaced besides the drop-in. Each original is
/// recorded before its file is written; a file edited records what isold wrote too, so
/// that restore puts the original back byte for byte while the file still holds isold's
/// text, and takes only isold's lines out after a later edit.
pub fn write_owned_files(
    root: &SysRoot,
    files: &StateFiles,
    item: &'static str,
    writes: &[(String, String)],
) -> Result<Report> {
    for (path, _) in writes {
        if super::items::owned_item(path) != Some(item) {
            return Err(Error::Invalid(format!(
                "{path} is not a file isold writes for {item}"
            )));
        }
    }
    let _lock = lock(&files.runtime)?;
    let targets: Vec<Target> = writes
        .iter()
        .map(|(path, content)| Target {
            item,
            id: format!("file:{path}"),
            label: path.clone(),
            op: Op::File {
                path: path.clone(),
                edit: super::lines::FileEdit::Whole(content.clone()),
            },
        })
        .collect();
    let mut ledger = Ledger::load(files, root, String::new(), String::new())?;
    let mut rep = report("apply", None);
    let statuses = apply_loaded(root, &CpuSet::new(), &mut ledger, &targets, &mut rep)?;
    rep.outcomes = targets
        .iter()
        .zip(statuses)
        .map(|(t, s)| outcome(t, s))
        .collect();
    Ok(rep)
}

fn apply_targets(
    root: &SysRoot,
    policy: &Policy,
    files: &StateFiles,
    targets: Vec<Target>,
) -> Result<Report> {
    let mut rep = report("apply", Some(policy));
    let mut ledger = crate::cost::stage("state", "file read", || {
        Ledger::load(
            files,
            root,
            policy.isolated.to_string(),
            policy.config.file.display().to_string(),
        )
    })?;
    if ledger.earlier_boot {
        // /run normally dies with the boot; a state file kept elsewhere holds runtime
        // originals that mean nothing now, but files on disk still need theirs.
        rep.notes.push(format!(
            "{}: recorded in an earlier boot; kept only its on-disk files' originals",
            files.runtime.display()
        ));
    }
    let statuses = apply_loaded(root, &policy.isolated, &mut ledger, &targets, &mut rep)?;
    for (t, s) in targets.iter().zip(statuses) {
        rep.outcomes.push(outcome(t, s));
    }
    notes_after_apply(&mut rep);
    Ok(rep)
}

/// A partition directory that existed before isold (and is not in the state file yet) and
/// holds tasks or cgroups isold did not put there: what it holds, said as a refusal (a
/// partition of it would take them all).
fn foreign_dir(root: &SysRoot, original: &Original) -> Option<String> {
    let Original::Partition(p) = original else {
        return None;
    };
    if p.created {
        return None;
    }
    match partition::foreign(root, &p.dir) {
        Ok(f) if f.is_empty() => None,
        Ok(f) => Some(format!(
            "{} holds what isold did not put there ({}): name an empty or new directory",
            p.dir,
            f.join(", ")
        )),
        Err(e) => Some(format!("{}: {e}", p.dir)),
    }
}

/// The notes that say which recorded entries were refused (see [`state::Entry::check`]),
/// and the journal lines that were no entries.
fn rejected_notes(ledger: &Ledger, rep: &mut Report) {
    for (e, why) in &ledger.rejected {
        rep.notes.push(format!(
            "ignored the recorded original of {} ({}): {why}; it is dropped from the state file",
            e.id, e.label
        ));
    }
    set_aside_note(ledger, rep);
}

/// Evaluate, record, persist, change, read back: apply's steps on a loaded ledger. Returns
/// each target's status.
///
/// Long because apply's order (evaluate, record, persist, then change) is the contract: one body
/// keeps it checkable.
fn apply_loaded(
    root: &SysRoot,
    isolated: &CpuSet,
    ledger: &mut Ledger,
    targets: &[Target],
    rep: &mut Report,
) -> Result<Vec<Status>> {
    rejected_notes(ledger, rep);
    let state = &mut ledger.state;
    let mut pending = Vec::new();
    let mut statuses: Vec<Option<Status>> = Vec::with_capacity(targets.len());
    let mut new_ids = std::collections::HashSet::new();
    for (i, t) in targets.iter().enumerate() {
        match crate::cost::stage("check", t.item, || evaluate(root, isolated, t)) {
            Eval::Done(s) => statuses.push(Some(s)),
            Eval::Change { original, from } => {
                // A directory that is not isold's yet, and not empty: refused, untouched.
                if let Some(why) = (!state.has(&t.id))
                    .then(|| foreign_dir(root, &original))
                    .flatten()
                {
                    statuses.push(Some(failed(format!("not made: {why}"))));
                    continue;
                }
                if state.record(Entry {
                    id: t.id.clone(),
                    item: t.item.into(),
                    label: t.label.clone(),
                    original: original.clone(),
                }) {
                    new_ids.insert(t.id.clone());
                } else {
                    match (&original, state.get_mut(&t.id)) {
                        // Workloads started since the first apply: their cgroups are
                        // originals too, added to the recorded ones (never replaced).
                        (Original::Partition(p), _) => state.add_moved(&t.id, &p.moved),
                        // A file written again: isold's earlier change is taken out of
                        // the file as it is now, and that (the administrator's file, their
                        // edits since kept) is what restore puts back; then what isold
                        // writes now, for restore to find its lines.
                        (
                            Original::File {
                                content: before,
                                written: now,
                                ..
                            },
                            Some(Entry {
                                original:
                                    Original::File {
                                        content: recorded,
                                        written,
                                        ..
                                    },
                                ..
                            }),
                        ) => {
                            if let (Some(before), Some(w), Op::File { edit, .. }) =
                                (before, written.as_deref(), &t.op)
                            {
                                // isold's own line changed by hand is isold's still.
                                let before = edit.as_written(w, before);
                                *recorded =
                                    super::files::undo_edit_kept(recorded.as_deref(), w, &before);
                            }
                            written.clone_from(now);
                        }
                        // A thread narrowed again (more CPUs isolated since): the CPUs it
                        // was taken off add up.
                        (
                            Original::Affinity {
                                taken_off: Some(now),
                                ..
                            },
                            Some(Entry {
                                original:
                                    Original::Affinity {
                                        taken_off: Some(before),
                                        ..
                                    },
                                ..
                            }),
                        ) => {
                            if let (Ok(a), Ok(b)) =
                                (CpuSet::parse_list(before), CpuSet::parse_list(now))
                            {
                                *before = a.union(&b).to_string();
                            }
                        }
                        _ => {}
                    }
                }
                // The change works from what the state file holds: after an interrupted
                // apply, a directory that apply created is still "created".
                let recorded = state.get(&t.id).map_or(original, |e| e.original.clone());
                pending.push((i, recorded, from));
                statuses.push(None);
            }
        }
    }
    // The originals are on disk before the first write; a state directory that cannot take
    // them (full) stops the apply here, with nothing changed.
    crate::cost::stage("state", "file written", || ledger.persist())
        .map_err(|e| ledger.not_recorded(e))?;
    let mut unchanged = std::collections::HashSet::new();
    let results = change_all(root, isolated, targets, &pending);
    for ((i, _, _), (status, wrote)) in pending.into_iter().zip(results) {
        if !wrote {
            unchanged.insert(targets[i].id.clone());
        }
        statuses[i] = Some(status);
        rep.written.push(targets[i].id.clone());
    }
    let state = &mut ledger.state;
    let mut dropped = std::collections::HashSet::new();
    for (t, s) in targets.iter().zip(&statuses) {
        let s = s.as_ref().expect("every target has a status");
        match s {
            Status::NotChangeable { reason } => {
                state.unchangeable.insert(t.id.clone(), reason.clone());
            }
            _ => {
                state.unchangeable.remove(&t.id);
            }
        }
        // Recorded in this run, but no write took effect (the kernel refused it, the target
        // is gone, a refused partition was undone): no original to keep. A write that
        // happened keeps its original whatever the read-back said: restore must be able to
        // undo it.
        if unchanged.contains(&t.id) && new_ids.contains(&t.id) {
            dropped.insert(t.id.as_str());
        }
    }
    if !dropped.is_empty() {
        // One pass, however many (a retain per target made apply quadratic).
        state
            .entries_mut()
            .retain(|e| !dropped.contains(e.id.as_str()));
    }
    crate::cost::stage("state", "file written", || ledger.persist())?;
    Ok(statuses.into_iter().map(|s| s.expect("status")).collect())
}

/// Whether `op` changes one thread and nothing else: such changes are independent of each
/// other, and a run of them is spread over this process's CPUs.
fn per_thread(op: &Op) -> bool {
    matches!(op, Op::Affinity { .. } | Op::Sched { .. })
}

/// [`change`] of each pending target (index in `targets`, recorded original, value before),
/// in order: runs of thread changes on this process's CPUs ([`crate::par`]), every other
/// change alone, in plan order.
fn change_all(
    root: &SysRoot,
    isolated: &CpuSet,
    targets: &[Target],
    pending: &[(usize, Original, String)],
) -> Vec<(Status, bool)> {
    let one = |(i, original, from): &(usize, Original, String)| {
        let t = &targets[*i];
        crate::cost::stage("change", t.item, || {
            change(root, isolated, t, original, from.clone())
        })
    };
    in_runs(
        pending,
        |(i, _, _)| per_thread(&targets[*i].op),
        "thread changes (wall)",
        one,
    )
}

fn notes_after_apply(rep: &mut Report) {
    for item in super::items::ALL {
        let changed = rep
            .outcomes
            .iter()
            .any(|o| o.item == item.name && matches!(o.status, Status::Changed { .. }));
        if let Some(note) = item.applied_note.filter(|_| changed) {
            rep.notes.push(note.to_string());
        }
    }
}

#[cfg(test)]
mod tests;
