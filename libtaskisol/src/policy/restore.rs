//! restore and give-back: every original of the state files written back, newest first (a
//! thread only if it is still the same thread and its owner has not pinned it since onto a
//! CPU isold took it off; a file isold edited byte for byte while it holds isold's text, else
//! only isold's lines out); and, when CPUs stop being isolated, the freed CPUs given back to
//! the values the policy narrowed. The apply side is in [`super::engine`], which re-exports
//! [`restore`], [`restore_where`] and [`give_back`]; what both use is in [`super::common`].

use super::common::{
    failed, in_runs, lock, per_thread_original, remove_created_dirs, remove_file, report,
    set_aside_note, write_file,
};
use super::partition;
use super::state::{Entry, Ledger, Original, StateFiles};
use super::threads::{set_thread_affinity, set_thread_attr, set_thread_sched};
use super::{shown, Outcome, Report, Status};
use crate::cpuset::CpuSet;
use crate::error::Result;
use crate::sched::SchedPolicy;
use crate::sysroot::SysRoot;
use crate::{irq, tasks};

/// Long because it is one arm per kind of original (`Original`).
pub(super) fn restore_one(root: &SysRoot, o: &Original) -> Status {
    match o {
        Original::Partition(p) => partition::restore(root, p),
        Original::TraceInstance { dir } => {
            if !root.exists(dir) {
                return Status::Gone;
            }
            crate::noise::remove_recording(root, dir).map_or_else(
                |e| Status::Failed {
                    error: e.to_string(),
                },
                |()| Status::Restored {
                    to: "removed (its events disabled)".into(),
                },
            )
        }
        Original::Channels {
            dev,
            ifindex,
            count,
            masks,
            irqs,
        } => super::channels::restore(root, dev, *ifindex, count, masks, irqs),
        Original::Attr {
            path,
            content,
            restore,
        } => {
            if let Err(e) = root.write_attr(path, restore) {
                // A value whose file is gone with its device (a veth's queue): nothing to
                // put back.
                if e.errno() == Some(libc::ENOENT) && !root.exists(path) {
                    return Status::Gone;
                }
                // A write the kernel refuses (an IRQ whose affinity it owns: EPERM) after
                // an apply killed between recording the original and learning the refusal:
                // the value never changed, so it is already back.
                return match root.read_to_string(path) {
                    Ok(now) if &now == content => Status::Restored {
                        to: attr_shown(path, &now),
                    },
                    _ => failed(e),
                };
            }
            match root.read_to_string(path) {
                Ok(back) if &back == content => Status::Restored {
                    to: attr_shown(path, &back),
                },
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
            written,
        } => restore_file(
            root,
            path,
            content.as_deref(),
            created_dir.as_deref(),
            written.as_deref(),
        )
        .unwrap_or_else(failed),
        Original::Affinity {
            pid,
            tid,
            starttime,
            cpus,
            taken_off,
            ..
        } => {
            if let Some(other) = not_the_thread(root, *pid, *tid, *starttime) {
                return other;
            }
            if let Some(owners) = owners_pin(root, *pid, *tid, taken_off.as_deref()) {
                return owners;
            }
            let set = match CpuSet::parse_list(cpus) {
                Ok(s) => s,
                Err(e) => return failed(e),
            };
            set_status(set_thread_affinity(root, *pid, *tid, &set), cpus.clone())
        }
        Original::Loan {
            pid,
            tid,
            starttime,
            policy,
            rt_priority,
            nice,
            reset_on_fork,
            ..
        } => {
            if let Some(other) = not_the_thread(root, *pid, *tid, *starttime) {
                return other;
            }
            let attr = crate::sched::SchedAttr::plain(*policy, *rt_priority, *nice, *reset_on_fork);
            set_status(set_thread_attr(root, *pid, *tid, &attr), attr.to_string())
        }
        Original::Sched {
            pid,
            tid,
            starttime,
            policy,
            rt_priority,
            ..
        } => {
            if let Some(other) = not_the_thread(root, *pid, *tid, *starttime) {
                return other;
            }
            let Some(p) = SchedPolicy::from_stat(*policy, *rt_priority) else {
                return failed(format!("unknown scheduling policy {policy}"));
            };
            set_status(set_thread_sched(root, *pid, *tid, p), p.to_string())
        }
    }
}

/// Why a thread's original is not put back: it is gone, or another thread has its id now
/// (the start time differs), or it could not be told; `None`: it is the thread recorded.
fn not_the_thread(root: &SysRoot, pid: i32, tid: i32, starttime: u64) -> Option<Status> {
    match tasks::is_same_thread(root, pid, tid, starttime) {
        Ok(true) => None,
        Ok(false) => Some(Status::Gone),
        Err(e) => Some(failed(e)),
    }
}

/// A kernel attribute's value for people: a CPU mask file's (by its name: `cpumask`,
/// `smp_affinity`, `rps_cpus`, `rps_default_mask`) with its CPUs as a list beside it.
fn attr_shown(path: &str, raw: &str) -> String {
    let name = path.rsplit('/').next().unwrap_or(path);
    if matches!(
        name,
        "cpumask" | "smp_affinity" | "default_smp_affinity" | "rps_cpus" | "rps_default_mask"
    ) {
        super::target::mask_shown(raw)
    } else {
        shown(raw)
    }
}

/// What setting a thread's original back did: restored to `to`, the thread gone meanwhile
/// (ESRCH), or the error.
fn set_status(set: crate::Result<()>, to: String) -> Status {
    match set {
        Ok(()) => Status::Restored { to },
        Err(e) if e.errno() == Some(libc::ESRCH) => Status::Gone,
        Err(e) => failed(e),
    }
}

/// A thread that its owner pinned, since isold narrowed it, onto a CPU isold took it off
/// (libvirt's `<vcpupin>`, DPDK's main lcore, `taskset -p` onto an isolated CPU): isold never
/// puts a thread back there, so that pin is its owner's and restore leaves it (as a file
/// the administrator edited since keeps the administrator's lines). `None`: restore it.
/// Without `taken_off` (an older state file) every thread is restored.
fn owners_pin(root: &SysRoot, pid: i32, tid: i32, taken_off: Option<&str>) -> Option<Status> {
    let taken = CpuSet::parse_list(taken_off?).ok()?;
    let now = super::threads::affinity_now(root, pid, tid).ok()??;
    let on = now.intersection(&taken);
    (!on.is_empty()).then(|| Status::OwnerSet {
        now: now.to_string(),
        reason: format!("pinned onto CPUs {on} since isold took it off them; not restored"),
    })
}

/// Put a file isold edited back: the original whole when the file still holds exactly what
/// isold wrote (byte for byte, owner and mode kept), else only isold's own lines undone (see
/// [`super::files::undo_edit`]); a file that lost one of isold's lines is left as it is and
/// reported.
fn restore_file(
    root: &SysRoot,
    path: &str,
    original: Option<&str>,
    created_dir: Option<&str>,
    written: Option<&str>,
) -> Result<Status> {
    let current = super::plan::read_file_opt(root, path)?;
    let put_back = match (current.as_deref(), written) {
        (Some(cur), _) if Some(cur) == original => {
            return Ok(Status::Restored {
                to: "original content".into(),
            })
        }
        (None, _) if original.is_some() => {
            return Ok(Status::Restored {
                to: "absent (removed since isold wrote it)".into(),
            })
        }
        (None, _) => None,
        // A state file written before `written` existed (isold before 3533f0d): what isold
        // wrote is found again in the file from the lines its item writes
        // (`written_before_0_2`), and only those are undone, as with `written`: putting the
        // original back whole would delete every line the administrator added since. When
        // isold's lines cannot be told apart, the file is left as it is, reported.
        (Some(cur), None) => match written_before_0_2(path, original, cur)
            .map(|w| super::files::undo_edit(original, &w, cur))
        {
            Some(Ok(text)) => text,
            Some(Err(line)) => {
                return Ok(failed(format!(
                    "{} changed since isold wrote it (its line {line:?} is gone): left as it is; edit it by hand",
                    root.path(path).display()
                )))
            }
            None => {
                return Ok(failed(format!(
                    "{}: recorded by an older isold without what it wrote, and isold's lines are not found in it: left as it is; edit it by hand",
                    root.path(path).display()
                )))
            }
        },
        (Some(cur), Some(w)) if cur == w => original.map(str::to_string),
        (Some(cur), Some(w)) => match super::files::undo_edit(original, w, cur) {
            Ok(text) => text,
            Err(line) => {
                return Ok(failed(format!(
                    "{} changed since isold wrote it (its line {line:?} is gone): left as it is; edit it by hand",
                    root.path(path).display()
                )))
            }
        },
    };
    match put_back {
        Some(text) => {
            write_file(root, path, &text)?;
            Ok(Status::Restored {
                to: if Some(text.as_str()) == original {
                    "original content".into()
                } else {
                    "isold's lines taken out, later edits kept".into()
                },
            })
        }
        None => {
            remove_file(root, path)?;
            remove_created_dirs(root, path, created_dir);
            Ok(Status::Restored {
                to: "removed".into(),
            })
        }
    }
}

/// What an isold whose state file has no `written` (before 3533f0d) wrote to `path`, found
/// again in `current` by the lines its item writes; `None` when they are not there.
///
/// - irqbalance's defaults: isold set the first uncommented `IRQBALANCE_BANNED_CPULIST=`
///   (or appended one: `plan::with_banned_cpus`); that edit of the original, with the
///   line as the file has it now, is what isold wrote.
/// - a file isold created (original `None`: the KVM options, systemd's drop-in, the GRUB
///   drop-in): its `# Written by isold` header and the lines right after it of the forms
///   its item writes (`options ...`; `[Manager]`, `CPUAffinity=`; the drop-in's comments
///   and `GRUB_CMDLINE_LINUX_DEFAULT=`), up to the first other line. Lines after that are
///   the administrator's and stay; a line of isold's form added right after isold's block
///   is taken for isold's.
fn written_before_0_2(path: &str, original: Option<&str>, current: &str) -> Option<String> {
    if super::items::irqbalance::IRQBALANCE_FILES.contains(&path) {
        let value = current
            .lines()
            .find_map(|l| l.trim_start().strip_prefix("IRQBALANCE_BANNED_CPULIST="))?;
        let cpus = CpuSet::parse_list(value.trim()).ok()?;
        return Some(super::items::irqbalance::with_banned_cpus(
            original.unwrap_or(""),
            &cpus,
        ));
    }
    if original.is_some() {
        return None;
    }
    let ours = |l: &str| match super::items::owned_item(path) {
        Some("bootargs") => l.starts_with('#') || l.starts_with("GRUB_CMDLINE_LINUX_DEFAULT="),
        Some(item) => super::items::by_name(item).is_some_and(|i| (i.line_before_0_2)(l)),
        None => false,
    };
    let mut lines = current.lines();
    let head = lines.next().filter(|l| l.starts_with("# Written by"))?;
    let mut w = vec![head];
    w.extend(lines.take_while(|l| ours(l)));
    Some(w.iter().map(|l| format!("{l}\n")).collect())
}

/// Put back every original recorded in the state files, newest first. Restored (and
/// vanished) entries leave the state files; a file left empty is removed, so a second restore
/// finds nothing to do.
pub fn restore(root: &SysRoot, files: &StateFiles) -> Result<Report> {
    restore_where(root, files, |_| true)
}

/// [`restore_one`] of each entry, in order: runs of thread values on this process's CPUs
/// ([`crate::par`]), every other value alone, in order.
fn restore_all(root: &SysRoot, entries: &[&Entry]) -> Vec<Status> {
    let one =
        |e: &&Entry| crate::cost::stage("restore", &e.item, || restore_one(root, &e.original));
    in_runs(
        entries,
        |e| per_thread_original(&e.original),
        "thread restores (wall)",
        one,
    )
}

/// Like [`restore`], for the recorded originals whose id `pick` accepts; the others stay in the
/// state files. A daemon given a new policy puts back what the new one no longer covers.
pub fn restore_where(
    root: &SysRoot,
    files: &StateFiles,
    pick: impl Fn(&str) -> bool,
) -> Result<Report> {
    let _lock = lock(&files.runtime)?;
    let mut rep = report("restore", None);
    let mut ledger = crate::cost::stage("state", "file read", || {
        Ledger::load(files, root, String::new(), String::new())
    })?;
    if ledger.is_empty_on_disk() {
        rep.notes.push(format!(
            "no state file ({}): nothing to restore",
            files.shown()
        ));
        return Ok(rep);
    }
    rep.isolated = ledger.state.isolated.clone();
    set_aside_note(&ledger, &mut rep);
    for (e, why) in &ledger.rejected {
        rep.outcomes.push(Outcome {
            item: e.item.clone(),
            id: e.id.clone(),
            label: e.label.clone(),
            status: failed(format!(
                "not restored: the state file's entry is not one isold records ({why}); dropped from the state file"
            )),
        });
    }
    let mut keep = Vec::new();
    let mut kept_back = 0usize;
    // Newest first: a value changed twice goes back to the first original last.
    let picked: Vec<&Entry> = ledger
        .state
        .entries()
        .iter()
        .rev()
        .filter(|e| pick(&e.id))
        .collect();
    let mut statuses = restore_all(root, &picked).into_iter();
    for e in ledger.state.entries().iter().rev() {
        if !pick(&e.id) {
            keep.push(e.clone());
            kept_back += 1;
            continue;
        }
        let status = statuses.next().expect("a status per picked entry");
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
    if ledger.earlier_boot {
        rep.notes.push("the runtime state file is from an earlier boot: runtime values were reset by the reboot; only files were restored".into());
    }
    keep.reverse();
    let state = &mut ledger.state;
    *state.entries_mut() = keep;
    state.unchangeable.retain(|id, _| !pick(id));
    let failed = state.entries().len() - kept_back;
    crate::cost::stage("state", "file written", || ledger.persist())?;
    if failed > 0 {
        rep.notes.push(format!(
            "{failed} original(s) could not be restored and stay in {}",
            files.shown()
        ));
    }
    Ok(rep)
}

/// The originals of threads that are gone (exited, or their id now another thread's) dropped
/// from the state files, with the targets the kernel refused for them: restore has nothing to
/// put back on them, and a daemon on a host with churn would otherwise keep every thread it
/// ever narrowed (its general path loads them all). A thread that cannot be told gone (its
/// stat unreadable for another reason) keeps its entry. Returns how many entries were
/// dropped; the state files are written only when there were any, and not at all when the
/// runtime file is from an earlier boot (the next apply starts it anew) or holds what an
/// apply or a restore must report first (entries refused at the load, journal lines set
/// aside). Only the threads whose tid `candidate` accepts are looked at (a daemon passes the
/// tids it saw exit: a stat read per exit, not per original; `|_| true` looks at all).
pub fn forget_gone_threads(
    root: &SysRoot,
    files: &StateFiles,
    candidate: impl Fn(i32) -> bool,
) -> Result<usize> {
    let _lock = lock(&files.runtime)?;
    let mut ledger = Ledger::load(files, root, String::new(), String::new())?;
    // Entries refused at the load and journal lines set aside are said by the report of an
    // apply or a restore, which drops them: not here, silently. (A runtime file of an earlier
    // boot loads without threads: nothing to drop, nothing written.)
    if !ledger.rejected.is_empty() || !ledger.state.set_aside.is_empty() {
        return Ok(0);
    }
    let gone = |pid: i32, tid: i32, starttime: u64| {
        candidate(tid) && matches!(tasks::is_same_thread(root, pid, tid, starttime), Ok(false))
    };
    let state = &mut ledger.state;
    let before = state.entries().len();
    state.entries_mut().retain(|e| match &e.original {
        Original::Affinity {
            pid,
            tid,
            starttime,
            ..
        }
        | Original::Sched {
            pid,
            tid,
            starttime,
            ..
        } => !gone(*pid, *tid, *starttime),
        _ => true,
    });
    let dropped = before - state.entries().len();
    // A refusal's id names the thread (`task:TID:STARTTIME`, `sched:TID:STARTTIME`); the
    // process is the thread's own for this check (the kernel lists every thread there too).
    let refusals = state.unchangeable.len();
    state.unchangeable.retain(|id, _| {
        let mut parts = id.splitn(3, ':');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("task" | "sched"), Some(tid), Some(start)) => {
                match (tid.parse::<i32>(), start.parse::<u64>()) {
                    (Ok(tid), Ok(start)) => !gone(tid, tid, start),
                    _ => true,
                }
            }
            _ => true,
        }
    });
    let dropped = dropped + (refusals - state.unchangeable.len());
    if dropped > 0 {
        ledger.persist()?;
    }
    Ok(dropped)
}

/// The entries whose id `pick` accepts dropped from the state files, nothing on the system
/// touched: what they recorded is what the system has again (the stall guard gave a thread
/// its own policy back itself). Returns how many were dropped; written as
/// [`forget_gone_threads`] writes (only when there were any, never over a state whose
/// refused entries or set-aside lines a report must say first: those entries stay, and a
/// restore finds their values already in place).
pub fn forget_where(
    root: &SysRoot,
    files: &StateFiles,
    pick: impl Fn(&str) -> bool,
) -> Result<usize> {
    let _lock = lock(&files.runtime)?;
    let mut ledger = Ledger::load(files, root, String::new(), String::new())?;
    if !ledger.rejected.is_empty() || !ledger.state.set_aside.is_empty() {
        return Ok(0);
    }
    let state = &mut ledger.state;
    let before = state.entries().len();
    if !state.entries().iter().any(|e| pick(&e.id)) {
        return Ok(0);
    }
    state.entries_mut().retain(|e| !pick(&e.id));
    let dropped = before - state.entries().len();
    ledger.persist()?;
    Ok(dropped)
}

/// The network device an id of the state names: `rps:DEV:rx-N` (a queue's RPS mask;
/// `rps:default` names none) and `net_queues:DEV` (its channels and queue masks). These are
/// the ids of the items that take network devices ([`super::items::Item::per_device`]); no
/// other id names one.
fn device_of(id: &str) -> Option<&str> {
    let (kind, key) = id.split_once(':')?;
    let dev = match kind {
        "rps" => key.split_once(':')?.0,
        "net_queues" => key,
        _ => return None,
    };
    crate::net::valid_name(dev).then_some(dev)
}

/// Whether the device an entry recorded is gone, as restore would find it: a channels
/// original by its ifindex too (restore follows a renamed device by it), a queue's mask
/// and a refusal by name only, since they record no ifindex and restore writes them by
/// name. A name no device has now can only come back as another device (a new veth given
/// the same name, or this one renamed back), which must never get this device's original:
/// its own is recorded when isold first writes it.
fn device_gone(root: &SysRoot, dev: &str, ifindex: Option<u32>) -> bool {
    match crate::net::device(root, dev) {
        Ok(None) => match ifindex {
            Some(i) => crate::net::name_of(root, i).is_none(),
            None => true,
        },
        Ok(Some(d)) => {
            ifindex.is_some_and(|i| d.ifindex != i && crate::net::name_of(root, i).is_none())
        }
        // Unreadable for another reason: not known to be gone.
        Err(_) => false,
    }
}

/// The originals and refusals of network devices that are gone (a pod's veth deleted,
/// renamed or moved to another namespace, a NIC unplugged) dropped from the state files:
/// restore would only find them gone, and a node with pod churn would otherwise keep every
/// veth's queue masks (`rps:DEV:rx-N`) it ever steered until the next restore. Only devices
/// whose name `candidate` accepts are looked at (a daemon passes those the kernel said were
/// removed; `|_| true` looks at all), one look per device. Returns how many entries were
/// dropped; written as [`forget_gone_threads`] writes (only when there were any, never over
/// a state whose refused entries or set-aside lines a report must say first). Nothing is
/// dropped when the devices cannot be listed at all (`/sys/class/net` missing).
pub fn forget_gone_devices(
    root: &SysRoot,
    files: &StateFiles,
    candidate: impl Fn(&str) -> bool,
) -> Result<usize> {
    let _lock = lock(&files.runtime)?;
    let mut ledger = Ledger::load(files, root, String::new(), String::new())?;
    if !ledger.rejected.is_empty()
        || !ledger.state.set_aside.is_empty()
        || !root.exists(crate::net::CLASS_NET)
    {
        return Ok(0);
    }
    let mut seen: std::collections::HashMap<(String, Option<u32>), bool> = Default::default();
    let mut gone = |dev: &str, ifindex: Option<u32>| {
        candidate(dev)
            && *seen
                .entry((dev.to_string(), ifindex))
                .or_insert_with(|| device_gone(root, dev, ifindex))
    };
    let state = &mut ledger.state;
    let before = state.entries().len() + state.unchangeable.len();
    state
        .entries_mut()
        .retain(|e| match (&e.original, device_of(&e.id)) {
            (Original::Channels { dev, ifindex, .. }, _) => !gone(dev, Some(*ifindex)),
            (_, Some(dev)) => !gone(dev, None),
            _ => true,
        });
    state
        .unchangeable
        .retain(|id, _| !device_of(id).is_some_and(|dev| gone(dev, None)));
    let dropped = before - (state.entries().len() + state.unchangeable.len());
    if dropped > 0 {
        ledger.persist()?;
    }
    Ok(dropped)
}

/// A recorded CPU set the policy narrows: where it is, and its original.
enum Narrowed {
    Irq(u32),
    Mask(String),
    Thread { pid: i32, tid: i32, starttime: u64 },
}

/// The CPU set `e` records, if it is one the policy narrows (an IRQ's affinity,
/// `default_smp_affinity`, a workqueue mask, a thread's affinity), with its original.
fn narrowed_original(e: &Entry) -> Option<(Narrowed, CpuSet)> {
    match &e.original {
        Original::Affinity {
            pid,
            tid,
            starttime,
            cpus,
            ..
        } => Some((
            Narrowed::Thread {
                pid: *pid,
                tid: *tid,
                starttime: *starttime,
            },
            CpuSet::parse_list(cpus).ok()?,
        )),
        Original::Attr { path, content, .. } if e.item == "workqueue" || e.id == "irq:default" => {
            Some((
                Narrowed::Mask(path.clone()),
                CpuSet::parse_mask(content.trim()).ok()?,
            ))
        }
        // An IRQ's affinity: `irq:N` (the ids the state file's check lets through).
        Original::Attr { content, .. } => {
            let n = e.id.strip_prefix("irq:")?.parse().ok()?;
            Some((Narrowed::Irq(n), CpuSet::parse_list(content.trim()).ok()?))
        }
        _ => None,
    }
}

/// After CPUs stopped being isolated (a container's claim released, a reload isolating
/// fewer), give each recorded CPU set the policy narrowed (IRQ affinities, thread affinities,
/// `default_smp_affinity`, workqueue masks) back the freed CPUs its original had: it becomes
/// `current ∪ (original ∩ freed)`. Nothing else moves: a value is never taken off a CPU, and a
/// CPU it never had is never added. One that is its original again is put back byte for byte
/// and leaves the state file; the others keep their original there for `isold restore`.
///
/// `isolated_before`: the CPUs that were isolated when the values were narrowed. A thread
/// missing a CPU of its original outside them was pinned by its owner (libvirt, DPDK,
/// `taskset -p`) since: its pin stands, it gets nothing back.
///
/// Long because it is one pass over the state's narrowed originals, one arm per kind (IRQ, mask,
/// thread), each compare-and-write with its owner rule.
pub fn give_back(
    root: &SysRoot,
    files: &StateFiles,
    freed: &CpuSet,
    isolated_before: &CpuSet,
) -> Result<Report> {
    let _lock = lock(&files.runtime)?;
    let mut rep = report("give back", None);
    if freed.is_empty() {
        return Ok(rep);
    }
    let mut ledger = Ledger::load(files, root, String::new(), String::new())?;
    // A runtime file of an earlier boot holds no entry here (the reboot reset those values).
    if ledger.is_empty_on_disk() {
        return Ok(rep);
    }
    let mut done = std::collections::HashSet::new();
    // Threads given some CPUs back: no longer CPUs isold took them off.
    let mut given = std::collections::HashSet::new();
    for e in ledger.state.entries() {
        let Some((what, orig)) = narrowed_original(e) else {
            continue;
        };
        if orig.is_disjoint(freed) {
            continue;
        }
        let current = match &what {
            Narrowed::Irq(n) => irq::affinity(root, *n).map(Some),
            Narrowed::Mask(path) => crate::topology::read_cpu_mask(root, path).map(Some),
            Narrowed::Thread {
                pid,
                tid,
                starttime,
            } => match tasks::is_same_thread(root, *pid, *tid, *starttime) {
                Ok(true) => tasks::read_thread(root, *pid, *tid).map(|t| t.map(|t| t.affinity)),
                Ok(false) => Ok(None),
                Err(e) => Err(e),
            },
        };
        let current = match current {
            Ok(Some(c)) => c,
            Ok(None) => continue,
            Err(err) if err.errno() == Some(libc::ENOENT) => continue,
            Err(err) => {
                rep.outcomes.push(Outcome {
                    item: e.item.clone(),
                    id: e.id.clone(),
                    label: e.label.clone(),
                    status: failed(err),
                });
                continue;
            }
        };
        if matches!(what, Narrowed::Thread { .. })
            && !orig.difference(&current).is_subset(isolated_before)
        {
            continue;
        }
        let want = current.union(&orig.intersection(freed));
        if want == current {
            continue;
        }
        let status = if want == orig {
            // The original again: written as recorded, and no longer owed.
            let s = restore_one(root, &e.original);
            if matches!(s, Status::Restored { .. } | Status::Gone) {
                done.insert(e.id.clone());
            }
            s
        } else {
            let written = match &what {
                Narrowed::Irq(n) => irq::set_affinity(root, *n, &want),
                Narrowed::Mask(path) => root.write_attr(path, &want.to_mask_string()),
                Narrowed::Thread { pid, tid, .. } => set_thread_affinity(root, *pid, *tid, &want),
            };
            match written {
                Ok(()) => {
                    if matches!(what, Narrowed::Thread { .. }) {
                        given.insert(e.id.clone());
                    }
                    Status::Changed {
                        from: current.to_string(),
                        to: want.to_string(),
                    }
                }
                Err(err) if err.errno() == Some(libc::ESRCH) => Status::Gone,
                Err(err) => failed(err),
            }
        };
        rep.outcomes.push(Outcome {
            item: e.item.clone(),
            id: e.id.clone(),
            label: e.label.clone(),
            status,
        });
    }
    if !given.is_empty() {
        for e in ledger.state.entries_mut() {
            if let Original::Affinity {
                taken_off: Some(t), ..
            } = &mut e.original
            {
                if given.contains(&e.id) {
                    if let Ok(set) = CpuSet::parse_list(t) {
                        *t = set.difference(freed).to_string();
                    }
                }
            }
        }
    }
    if !done.is_empty() || !given.is_empty() {
        ledger.state.entries_mut().retain(|e| !done.contains(&e.id));
        ledger.persist()?;
    }
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mask_file_is_shown_with_its_cpus_and_other_files_as_they_are() {
        for path in [
            "/sys/devices/virtual/workqueue/cpumask",
            "/sys/devices/virtual/workqueue/writeback/cpumask",
            "/proc/irq/default_smp_affinity",
            "/proc/irq/4/smp_affinity",
            "/sys/class/net/eth0/queues/rx-0/rps_cpus",
            "/proc/sys/net/core/rps_default_mask",
        ] {
            assert_eq!(attr_shown(path, "f\n"), "f (CPUs 0-3)", "{path}");
        }
        assert_eq!(attr_shown("/proc/sys/vm/stat_interval", "1\n"), "1");
        assert_eq!(attr_shown("/proc/irq/4/smp_affinity_list", "0-3\n"), "0-3");
    }

    /// The noise ledger's instance: removed by restore (in a captured tree with its files),
    /// `Gone` when it no longer exists (a reboot, someone removed it).
    #[test]
    fn the_noise_ledgers_instance_is_removed_at_restore() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::new(dir.path());
        let inst = "/sys/kernel/tracing/instances/isold-noise-7";
        std::fs::create_dir_all(root.path(format!("{inst}/events/irq"))).unwrap();
        std::fs::write(root.path(format!("{inst}/events/enable")), "1\n").unwrap();
        let o = Original::TraceInstance { dir: inst.into() };
        assert!(
            matches!(restore_one(&root, &o), Status::Restored { .. }),
            "restored"
        );
        assert!(!root.exists(inst));
        assert_eq!(restore_one(&root, &o), Status::Gone);
    }

    /// A thread's original goes back to the thread recorded only: another thread that has
    /// its id now (another start time) or none is `Gone`, and is left as it is.
    #[test]
    fn a_threads_original_goes_back_to_that_thread_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::new(dir.path());
        let mut f: Vec<String> = (3..=52).map(|_| "0".to_string()).collect();
        f[0] = "R".into();
        f[19] = "7".into(); // start time
        f[38] = "6".into(); // SCHED_DEADLINE: lent
        let stat = dir.path().join("proc/21/task/21/stat");
        std::fs::create_dir_all(stat.parent().unwrap()).unwrap();
        std::fs::write(&stat, format!("21 (kworker/3:1) {}\n", f.join(" "))).unwrap();
        let loan = |starttime| Original::Loan {
            pid: 21,
            tid: 21,
            starttime,
            comm: "kworker/3:1".into(),
            policy: 0,
            rt_priority: 0,
            nice: 0,
            reset_on_fork: false,
        };
        let policy_now = || {
            let s = std::fs::read_to_string(&stat).unwrap();
            s.rsplit(") ")
                .next()
                .unwrap()
                .split(' ')
                .nth(38)
                .unwrap()
                .to_string()
        };
        assert_eq!(restore_one(&root, &loan(5)), Status::Gone);
        assert_eq!(policy_now(), "6");
        assert_eq!(
            restore_one(&root, &loan(7)),
            Status::Restored {
                to: "SCHED_OTHER".into()
            }
        );
        assert_eq!(policy_now(), "0");
        std::fs::remove_dir_all(dir.path().join("proc/21")).unwrap();
        assert_eq!(restore_one(&root, &loan(7)), Status::Gone);
    }
}
