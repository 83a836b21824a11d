//! The `cgroup_partition` item: a cgroup v2 cpuset partition of type `isolated` holding the
//! isolated CPUs, so they leave the scheduler's load balancing at run time, without a reboot.
//!
//! Once the partition is valid its CPUs are no longer in any other cgroup's cpuset, and the
//! kernel moves every task outside it off them. So the workloads (root's or a libvirt
//! machine's processes whose affinity lies inside the isolated CPUs, [`is_workload`]) are
//! moved into the partition first, each thread's affinity kept as it was (a 6.1 kernel resets
//! it to the cgroup's CPUs on the move). Another user's process there has no say.
//!
//! apply, in this order: `+cpuset` in the parent's `cgroup.subtree_control` if missing, the
//! directory, `cpuset.cpus` (and `cpuset.cpus.exclusive` where the kernel has it), the
//! workloads, `isolated` in `cpuset.cpus.partition`. The kernel may accept the write and
//! still read back `isolated invalid (<reason>)` (6.12 refuses CPUs of an isolcpus domain):
//! then every step is undone, so no half-made cgroup stays behind, and the reason is
//! reported. restore undoes the same steps from the recorded original.

use serde::{Deserialize, Serialize};

use super::Status;
use crate::cpuset::CpuSet;
use crate::error::{Error, Result};
use crate::sysroot::SysRoot;
use crate::tasks::{self, Thread};

pub use super::paths::{valid_partition_dir as valid_dir, CGROUP_MOUNT};

/// A workload process moved into the partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moved {
    /// Process id.
    pub pid: i32,
    /// Start time of the process: it is moved back only if it is still the same process.
    pub starttime: u64,
    /// Name, for messages.
    pub comm: String,
    /// Its cgroup before (as in `/proc/PID/cgroup`, `/` for the root).
    pub cgroup: String,
    /// Each thread's affinity when the plan read it: `(tid, start time, Cpus_allowed_list)`,
    /// kept in the state file for the record. The moves do not write it back: each thread
    /// keeps the affinity it has right before a move, which may be a pin made since.
    pub threads: Vec<(i32, u64, String)>,
}

/// A thread outside the partition whose affinity, when the plan read it, reached neither all
/// of the partition's CPUs nor none but them: the kernel's own narrowing (`isolcpus=` keeps
/// init and every task it forks on the housekeeping CPUs at boot), a cgroup's, or an owner's.
/// Removing the partition makes the kernel reset the tasks of the cgroups around it to their
/// cgroup's CPUs (for the root cgroup: every CPU but other partitions'), which widens such a
/// thread unless its owner's own `sched_setaffinity` mask holds it; restore narrows it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Narrow {
    /// Process id.
    pub pid: i32,
    /// Thread id.
    pub tid: i32,
    /// Start time: only the same thread is written.
    pub starttime: u64,
    /// `Cpus_allowed_list` as the plan read it.
    pub cpus: String,
}

/// The partition's original state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionOriginal {
    /// The cgroup directory (absolute, below [`CGROUP_MOUNT`]).
    pub dir: String,
    /// Whether apply creates it (restore then removes it).
    pub created: bool,
    /// Whether the parent's `cgroup.subtree_control` lacked `cpuset` (restore takes it out).
    pub enabled_cpuset: bool,
    /// `cpuset.cpus`, `cpuset.cpus.exclusive` and `cpuset.cpus.partition` as they were, when
    /// the directory existed (`None` for a file the kernel lacks).
    pub cpus: Option<String>,
    /// See `cpus`.
    pub exclusive: Option<String>,
    /// See `cpus`.
    pub partition: Option<String>,
    /// The workloads moved in.
    pub moved: Vec<Moved>,
    /// The threads whose narrow affinity restore keeps when the partition goes (state files
    /// before 0.3 have none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub narrow: Vec<Narrow>,
}

/// The `cgroup_partition` target as planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionPlan {
    /// The cgroup directory.
    pub dir: String,
    /// The CPUs it gets.
    pub cpus: CpuSet,
    /// The workload processes outside it, with their threads.
    pub workloads: Vec<(Thread, String, Vec<Thread>)>,
    /// The threads a removal of the partition may widen ([`Narrow`]).
    pub narrow: Vec<Narrow>,
    /// Processes with threads inside the CPUs that are no workload: not root's and not in
    /// libvirt's machine.slice ([`is_workload`]). They are not moved in and have no say
    /// (the kernel gives them CPUs outside the partition): each as `PID (comm, uid N)`.
    pub others: Vec<String>,
    /// Their process ids.
    pub other_pids: std::collections::BTreeSet<i32>,
}

/// libvirt's cgroup of its machines: its QEMU processes run as libvirt-qemu, not root, and
/// only root's libvirtd puts a process there.
pub const MACHINE_SLICE: &str = "/machine.slice";

/// Whether a process with threads inside the isolated CPUs is a workload, one the partition
/// is made for: started by root (its real uid is 0: by the administrator, chisol, a claim's
/// runtime, a unit) or a libvirt machine's. Any other user's process gets no say in the
/// policy: pinned inside the isolated CPUs, it is neither moved in nor a reason to refuse.
pub fn is_workload(uid: u32, cgroup: &str) -> bool {
    uid == 0 || inside(cgroup, MACHINE_SLICE)
}

/// The cgroup path of `dir` as `/proc/PID/cgroup` shows it.
pub fn cgroup_path(dir: &str) -> &str {
    match dir.strip_prefix(CGROUP_MOUNT) {
        Some("") | None => "/",
        Some(rest) => rest,
    }
}

/// The systemd unit a cgroup path belongs to (`/system.slice/rtapp.service` ->
/// `rtapp.service`): its innermost component that names a unit.
pub fn systemd_unit(cgroup: &str) -> Option<&str> {
    cgroup.rsplit('/').find(|c| {
        [".service", ".scope", ".slice", ".socket", ".mount", ".swap"]
            .iter()
            .any(|s| c.len() > s.len() && c.ends_with(s))
    })
}

/// Why the partition `dir` must not be made for this plan: a cgroup systemd manages, a
/// workload in a unit's cgroup (moving it takes it out of its unit), or a process with threads
/// on both sides of the isolated CPUs (QEMU's emulator on the housekeeping CPUs and its vCPUs
/// on isolated ones: the partition would take its vCPUs' CPUs or strand its other threads).
/// Checked before any write, so a refusal changes nothing.
pub fn refusal(plan: &PartitionPlan, threads: &[Thread]) -> Option<String> {
    let cpus = &plan.cpus;
    if let Some(unit) = systemd_unit(cgroup_path(&plan.dir)) {
        return Some(format!(
            "{} belongs to systemd ({unit}): isold does not make a partition of a cgroup systemd manages; give the unit AllowedCPUs={cpus} and, on systemd 261 and later, CPUSetPartition=isolated",
            plan.dir
        ));
    }
    let in_units: Vec<String> = plan
        .workloads
        .iter()
        .filter_map(|(t, cg, _)| systemd_unit(cg).map(|u| format!("{} ({}) in {u}", t.pid, t.comm)))
        .collect();
    if !in_units.is_empty() {
        return Some(format!(
            "workload(s) {} run in a systemd unit's cgroup: isold does not move a task out of its unit; give the unit AllowedCPUs={cpus} (systemctl set-property UNIT AllowedCPUs={cpus}) and, on systemd 261 and later, CPUSetPartition=isolated, or start the workload outside any unit",
            in_units.join(", ")
        ));
    }
    let me = std::process::id() as i32;
    let mut split = Vec::new();
    let mut pids: Vec<i32> = threads
        .iter()
        .filter(|t| !t.is_kthread() && t.pid != me && !plan.other_pids.contains(&t.pid))
        .map(|t| t.pid)
        .collect();
    pids.dedup();
    for pid in pids {
        let group: Vec<&Thread> = threads.iter().filter(|t| t.pid == pid).collect();
        let inside: Vec<&&Thread> = group
            .iter()
            .filter(|t| t.affinity.is_subset(cpus))
            .collect();
        let outside: Vec<&&Thread> = group
            .iter()
            .filter(|t| !t.affinity.is_subset(cpus))
            .collect();
        if let (Some(i), Some(o)) = (inside.first(), outside.first()) {
            let leader = group.iter().find(|t| t.tid == pid).unwrap_or(i);
            split.push(format!(
                "{} ({}: {} threads inside, e.g. {} on {}; {} outside, e.g. {} on {})",
                pid,
                leader.comm,
                inside.len(),
                i.comm,
                i.affinity,
                outside.len(),
                o.comm,
                o.affinity
            ));
        }
    }
    if !split.is_empty() {
        return Some(format!(
            "process(es) {} have threads both inside and outside CPUs {cpus}: the partition would take those CPUs from the threads inside or strand the others; put such a process in a partition yourself (its own cgroup), or leave cgroup_partition off",
            split.join("; ")
        ));
    }
    None
}

/// What a directory that exists holds that isold did not put there: its tasks and its child
/// cgroups (a partition of it would take them all).
pub fn foreign(root: &SysRoot, dir: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    if let Some(procs) = read_opt(root, &file(dir, "cgroup.procs"))? {
        for pid in procs.split_whitespace() {
            let comm = root
                .read_value_opt(format!("/proc/{pid}/comm"))?
                .unwrap_or_default();
            out.push(format!("task {pid} ({comm})"));
        }
    }
    if root.exists(dir) {
        let mut names = root.read_dir_names(dir)?;
        names.sort();
        for n in names {
            if root.path(format!("{dir}/{n}")).is_dir() {
                out.push(format!("cgroup {n}/"));
            }
        }
    }
    Ok(out)
}

fn inside(cgroup: &str, dir_cg: &str) -> bool {
    cgroup == dir_cg || cgroup.starts_with(&format!("{}/", dir_cg.trim_end_matches('/')))
}

/// Plan the partition `dir` of `cpus`: find the workloads (user processes whose threads all
/// run inside `cpus`) that are not in it yet.
pub fn plan(root: &SysRoot, dir: &str, cpus: &CpuSet, threads: &[Thread]) -> Result<PartitionPlan> {
    let dir_cg = cgroup_path(dir);
    let mut workloads = Vec::new();
    let mut others = Vec::new();
    let mut other_pids = std::collections::BTreeSet::new();
    let me = std::process::id() as i32;
    let mut pids: Vec<i32> = threads
        .iter()
        .filter(|t| !t.is_kthread() && t.pid != me)
        .map(|t| t.pid)
        .collect();
    pids.dedup();
    for pid in pids {
        let group: Vec<Thread> = threads.iter().filter(|t| t.pid == pid).cloned().collect();
        // Only a process with a thread inside the CPUs has anything to do with them.
        if !group.iter().any(|t| t.affinity.is_subset(cpus)) {
            continue;
        }
        let Some(cg) = tasks::cgroup_of(root, pid)? else {
            continue; // exited
        };
        let Some(uid) = tasks::owner_of(root, pid)? else {
            continue; // exited
        };
        if !is_workload(uid, &cg) {
            if !inside(&cg, dir_cg) {
                let comm = group
                    .iter()
                    .find(|t| t.tid == pid)
                    .map_or("?", |t| t.comm.as_str());
                others.push(format!("{pid} ({comm}, uid {uid})"));
            }
            other_pids.insert(pid);
            continue;
        }
        if !group.iter().all(|t| t.affinity.is_subset(cpus)) {
            continue;
        }
        let Some(leader) = group.iter().find(|t| t.tid == pid).cloned() else {
            continue;
        };
        if inside(&cg, dir_cg) {
            continue;
        }
        workloads.push((leader, cg, group));
    }
    Ok(PartitionPlan {
        dir: dir.to_string(),
        cpus: cpus.clone(),
        workloads,
        narrow: narrow(threads, cpus),
        others,
        other_pids,
    })
}

/// The threads of `threads` a removal of a partition of `cpus` may widen: those with some
/// CPU outside it and not all of it. Per-CPU kthreads (the kernel refuses their affinity) and
/// threads inside it (workloads) are not. A thread with every CPU of the partition comes out
/// of the removal with them again.
fn narrow(threads: &[Thread], cpus: &CpuSet) -> Vec<Narrow> {
    threads
        .iter()
        .filter(|t| {
            !t.is_pinned_by_kernel() && !t.affinity.is_subset(cpus) && !cpus.is_subset(&t.affinity)
        })
        .map(|t| Narrow {
            pid: t.pid,
            tid: t.tid,
            starttime: t.starttime,
            cpus: t.affinity.to_string(),
        })
        .collect()
}

fn file(dir: &str, name: &str) -> String {
    format!("{dir}/{name}")
}

fn parent(dir: &str) -> &str {
    match dir.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &dir[..i],
    }
}

fn read_opt(root: &SysRoot, path: &str) -> Result<Option<String>> {
    match root.read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.errno() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

fn has_word(text: &str, word: &str) -> bool {
    text.split_whitespace().any(|w| w == word)
}

/// Whether `dir` is an isolated partition of exactly `cpus`, in three reads and no task scan:
/// a daemon's check between applies (workloads outside it are the apply's business). Its
/// `cpuset.cpus.exclusive`, where the kernel has one, must be empty or the same CPUs: a
/// narrower one leaves the partition valid with fewer CPUs.
pub fn holds(root: &SysRoot, dir: &str, cpus: &CpuSet) -> bool {
    let read = |name: &str| root.read_to_string(file(dir, name));
    let same = |t: &str| CpuSet::parse_list(t.trim()).is_ok_and(|s| &s == cpus);
    let exclusive = match read("cpuset.cpus.exclusive") {
        Ok(t) => t.trim().is_empty() || same(&t),
        Err(e) => e.errno() == Some(libc::ENOENT),
    };
    match (read("cpuset.cpus.partition"), read("cpuset.cpus")) {
        (Ok(part), Ok(list)) => part.trim() == "isolated" && same(&list) && exclusive,
        _ => false,
    }
}

/// The files of the partition `dir` a write to which can undo it: `cpuset.cpus`,
/// `cpuset.cpus.exclusive` and `cpuset.cpus.partition` (which the kernel also marks modified
/// when it makes the partition invalid).
pub fn watched_files(dir: &str) -> [String; 3] {
    [
        file(dir, "cpuset.cpus"),
        file(dir, "cpuset.cpus.exclusive"),
        file(dir, "cpuset.cpus.partition"),
    ]
}

/// What reading the partition found: right, or its original and how it looks now.
#[derive(Debug)]
pub enum Found {
    /// Nothing to do (or nothing possible).
    Done(Status),
    /// To change.
    Change {
        /// The original.
        original: PartitionOriginal,
        /// How it looks now.
        from: String,
    },
}

/// Read the partition's current state.
pub fn evaluate(root: &SysRoot, p: &PartitionPlan) -> Result<Found> {
    let controllers = match read_opt(root, &file(CGROUP_MOUNT, "cgroup.controllers"))? {
        None => {
            return Ok(Found::Done(Status::NotPresent {
                reason: format!("no cgroup v2 hierarchy at {CGROUP_MOUNT}"),
            }))
        }
        Some(c) => c,
    };
    if !has_word(&controllers, "cpuset") {
        return Ok(Found::Done(Status::NotPresent {
            reason: format!("the cgroup v2 hierarchy at {CGROUP_MOUNT} has no cpuset controller"),
        }));
    }
    let subtree = read_opt(root, &file(parent(&p.dir), "cgroup.subtree_control"))?;
    let enabled_cpuset = !subtree.as_deref().is_some_and(|s| has_word(s, "cpuset"));
    let exists = root.exists(&p.dir);
    let (cpus, exclusive, partition) = if exists {
        (
            read_opt(root, &file(&p.dir, "cpuset.cpus"))?,
            read_opt(root, &file(&p.dir, "cpuset.cpus.exclusive"))?,
            read_opt(root, &file(&p.dir, "cpuset.cpus.partition"))?,
        )
    } else {
        (None, None, None)
    };
    let same = |c: &str| CpuSet::parse_list(c.trim()).is_ok_and(|s| s == p.cpus);
    let cpus_right = cpus.as_deref().is_some_and(same);
    // Where the kernel has it: empty (the CPUs of cpuset.cpus) or the same CPUs.
    let exclusive_right = exclusive
        .as_deref()
        .map_or(true, |e| e.trim().is_empty() || same(e));
    let part = partition.as_deref().map(str::trim).unwrap_or("");
    if cpus_right && exclusive_right && part == "isolated" && p.workloads.is_empty() {
        return Ok(Found::Done(Status::AlreadyRight));
    }
    let mut from = if exists {
        format!(
            "{} of CPUs {}",
            if part.is_empty() {
                "no partition"
            } else {
                part
            },
            cpus.as_deref().map(str::trim).unwrap_or("?")
        )
    } else {
        "absent".to_string()
    };
    if !exclusive_right {
        from.push_str(&format!(
            " (exclusive CPUs {})",
            exclusive.as_deref().map(str::trim).unwrap_or("?")
        ));
    }
    if !p.workloads.is_empty() {
        from.push_str(&format!(
            ", {} workload(s) outside: {}",
            p.workloads.len(),
            workload_names(&p.workloads)
        ));
    }
    if !p.others.is_empty() {
        from.push_str(&format!(
            "; not moved in, no workload (not root's, not a libvirt machine's): {}; the kernel gives them CPUs outside the partition",
            p.others.join(", ")
        ));
    }
    Ok(Found::Change {
        from,
        original: PartitionOriginal {
            dir: p.dir.clone(),
            created: !exists,
            enabled_cpuset,
            cpus,
            exclusive,
            partition,
            narrow: p.narrow.clone(),
            moved: p
                .workloads
                .iter()
                .map(|(leader, cg, group)| Moved {
                    pid: leader.pid,
                    starttime: leader.starttime,
                    comm: leader.comm.clone(),
                    cgroup: cg.clone(),
                    threads: group
                        .iter()
                        .map(|t| (t.tid, t.starttime, t.affinity.to_string()))
                        .collect(),
                })
                .collect(),
        },
    })
}

fn workload_names(w: &[(Thread, String, Vec<Thread>)]) -> String {
    w.iter()
        .map(|(t, _, _)| format!("{} ({})", t.pid, t.comm))
        .collect::<Vec<_>>()
        .join(", ")
}

fn write_err(root: &SysRoot, path: &str, data: &str, source: std::io::Error) -> Error {
    Error::Write {
        path: root.path(path),
        data: data.into(),
        source,
    }
}

/// The files the kernel (6.12) gives a new cgroup with the cpuset controller, as it reads
/// them: a captured tree gets them on mkdir.
const NEW_CGROUP_FILES: &[(&str, &str)] = &[
    ("cgroup.procs", ""),
    ("cgroup.type", "domain\n"),
    ("cpuset.cpus", "\n"),
    ("cpuset.cpus.effective", "\n"),
    ("cpuset.cpus.exclusive", "\n"),
    ("cpuset.cpus.exclusive.effective", "\n"),
    ("cpuset.cpus.partition", "member\n"),
];

fn mkdir(root: &SysRoot, dir: &str) -> Result<()> {
    std::fs::create_dir(root.path(dir)).map_err(|e| write_err(root, dir, "(mkdir)", e))?;
    if !root.is_host() {
        for (name, content) in NEW_CGROUP_FILES {
            let f = file(dir, name);
            std::fs::write(root.path(&f), content).map_err(|e| write_err(root, &f, content, e))?;
        }
    }
    Ok(())
}

/// Remove a cgroup directory (the caller checks it exists). The kernel removes an empty
/// cgroup's files with it: in a captured tree they are removed first.
fn rmdir(root: &SysRoot, dir: &str) -> Result<()> {
    let path = root.path(dir);
    if !root.is_host() {
        for (name, _) in NEW_CGROUP_FILES {
            let _ = std::fs::remove_file(path.join(name));
        }
    }
    std::fs::remove_dir(&path).map_err(|e| write_err(root, dir, "(rmdir)", e))
}

/// Move process `pid` into the cgroup `cg` (a `/proc/PID/cgroup` path). In a captured tree
/// its threads also get the cgroup's CPUs, as 6.1 does on a move (6.2 and later keep an
/// affinity the task asked for when it fits).
fn move_process(root: &SysRoot, pid: i32, cg: &str) -> Result<()> {
    let dir = format!("{CGROUP_MOUNT}{}", cg.trim_end_matches('/'));
    if root.is_host() {
        return root.write_attr(file(&dir, "cgroup.procs"), &pid.to_string());
    }
    root.write(format!("/proc/{pid}/cgroup"), format!("0::{cg}\n"))?;
    let cpus = match read_opt(root, &file(&dir, "cpuset.cpus.effective"))? {
        Some(c) if !c.trim().is_empty() => c,
        _ => match read_opt(root, &file(&dir, "cpuset.cpus"))? {
            Some(c) if !c.trim().is_empty() => c,
            _ => return Ok(()),
        },
    };
    let cpus = CpuSet::parse_list(cpus.trim())?;
    for t in tasks::threads_of(root, pid)? {
        super::threads::set_thread_affinity(root, pid, t.tid, &cpus)?;
    }
    Ok(())
}

/// Move process `pid` into `cg`, each thread keeping the CPUs it has right before the move:
/// the kernel gives a moved task the cgroup's CPUs (6.1), and the workload may have pinned a
/// thread since the plan read it (libvirt, DPDK): a pin read any earlier would be written
/// over the workload's own. A thread that exits meanwhile is skipped.
fn move_keeping_pins(root: &SysRoot, pid: i32, cg: &str) -> Result<()> {
    let pins: Vec<(i32, CpuSet)> = tasks::threads_of(root, pid)?
        .into_iter()
        .map(|t| (t.tid, t.affinity))
        .collect();
    move_process(root, pid, cg)?;
    put_back_pins(root, pid, &pins)
}

/// Give each thread of `pid` its affinity of `pins` again; one that exited is skipped.
fn put_back_pins(root: &SysRoot, pid: i32, pins: &[(i32, CpuSet)]) -> Result<()> {
    for (tid, cpus) in pins {
        if let Err(e) = super::threads::set_thread_affinity(root, pid, *tid, cpus) {
            if super::threads::refusal(&e) != super::threads::Refusal::Gone {
                return Err(e);
            }
        }
    }
    Ok(())
}

fn same_process(root: &SysRoot, m: &Moved) -> Result<bool> {
    tasks::is_same_thread(root, m.pid, m.pid, m.starttime)
}

/// Make the partition; on any failure undo what was done and report why. The flag says
/// whether anything is left changed (made, or an undo that failed): its original must then be
/// kept for restore.
pub fn change(
    root: &SysRoot,
    o: &PartitionOriginal,
    cpus: &CpuSet,
    from: String,
) -> (Status, bool) {
    match build(root, o, cpus) {
        Ok(to) => (Status::Changed { from, to }, true),
        Err(why) => {
            let (undo, left) = match undo(root, o) {
                Ok(_) => ("undone, nothing left behind".to_string(), false),
                Err(e) => (format!("and undoing it failed too: {e}"), true),
            };
            (
                Status::Failed {
                    error: format!("{why}; {undo}"),
                },
                left,
            )
        }
    }
}

fn build(
    root: &SysRoot,
    o: &PartitionOriginal,
    cpus: &CpuSet,
) -> std::result::Result<String, String> {
    let dir = &o.dir;
    if o.enabled_cpuset {
        root.write_attr(file(parent(dir), "cgroup.subtree_control"), "+cpuset")
            .map_err(|e| e.to_string())?;
    }
    if !root.exists(dir) {
        mkdir(root, dir).map_err(|e| e.to_string())?;
    }
    let list = cpus.to_string();
    root.write_attr(file(dir, "cpuset.cpus"), &list)
        .map_err(|e| e.to_string())?;
    if root.exists(file(dir, "cpuset.cpus.exclusive")) {
        root.write_attr(file(dir, "cpuset.cpus.exclusive"), &list)
            .map_err(|e| e.to_string())?;
    }
    let cg = cgroup_path(dir);
    let mut moved = 0;
    for m in &o.moved {
        if !same_process(root, m).map_err(|e| e.to_string())? {
            continue;
        }
        let now = tasks::cgroup_of(root, m.pid).map_err(|e| e.to_string())?;
        if now.is_some_and(|now| inside(&now, cg)) {
            continue; // moved in by an earlier apply
        }
        match move_keeping_pins(root, m.pid, cg) {
            Err(e) if e.errno() == Some(libc::ESRCH) => continue,
            r => r.map_err(|e| format!("moving workload {} ({}): {e}", m.pid, m.comm))?,
        }
        moved += 1;
    }
    let part = file(dir, "cpuset.cpus.partition");
    root.write_attr(&part, "isolated")
        .map_err(|e| e.to_string())?;
    let back = root.read_to_string(&part).map_err(|e| e.to_string())?;
    let back = back.trim();
    if back != "isolated" {
        return Err(format!(
            "the kernel made {} '{back}'",
            root.path(&part).display()
        ));
    }
    Ok(format!(
        "isolated partition of CPUs {list}, {moved} workload(s) moved in"
    ))
}

/// Undo apply's steps; returns how many threads the removal widened and got their
/// affinity back ([`Narrow`]).
fn undo(root: &SysRoot, o: &PartitionOriginal) -> Result<usize> {
    let dir = &o.dir;
    let part = file(dir, "cpuset.cpus.partition");
    let before = narrow_now(root, &o.narrow);
    if root.exists(&part) {
        let was = o
            .partition
            .as_deref()
            .and_then(|p| p.split_whitespace().next())
            .unwrap_or("member");
        root.write_attr(&part, was)?;
    }
    for m in o.moved.iter().rev() {
        if !same_process(root, m)? {
            continue;
        }
        if tasks::cgroup_of(root, m.pid)?.is_some_and(|cg| inside(&cg, cgroup_path(dir))) {
            match move_keeping_pins(root, m.pid, &m.cgroup) {
                Err(e) if e.errno() == Some(libc::ESRCH) => continue,
                r => r?,
            }
        }
    }
    if o.created {
        if root.exists(dir) {
            rmdir(root, dir)?;
        }
    } else {
        if let Some(c) = &o.cpus {
            root.write_attr(file(dir, "cpuset.cpus"), c.trim_end_matches('\n'))?;
        }
        if let Some(c) = &o.exclusive {
            root.write_attr(file(dir, "cpuset.cpus.exclusive"), c.trim_end_matches('\n'))?;
        }
    }
    if o.enabled_cpuset {
        root.write_attr(file(parent(dir), "cgroup.subtree_control"), "-cpuset")?;
    }
    narrow_back(root, &before)
}

/// Each recorded thread that is still the same, with its affinity right now (before the
/// partition goes) and as recorded. One that is gone or unreadable is left out.
fn narrow_now<'a>(root: &SysRoot, narrow: &'a [Narrow]) -> Vec<(&'a Narrow, CpuSet, CpuSet)> {
    narrow
        .iter()
        .filter_map(|n| {
            let was = CpuSet::parse_list(&n.cpus).ok()?;
            if !tasks::is_same_thread(root, n.pid, n.tid, n.starttime).ok()? {
                return None;
            }
            let now = super::threads::affinity(root, n.pid, n.tid)?;
            Some((n, now, was))
        })
        .collect()
}

/// After the partition went: a thread whose affinity the removal changed (it reads other
/// than right before) and that is not its recorded affinity gets that back, written only if
/// it still reads what the removal made (compare and write). A thread its owner pinned
/// meanwhile keeps the pin: the kernel keeps an owner's `sched_setaffinity` mask through the
/// removal, and a pin that came between the two reads is not overwritten.
fn narrow_back(root: &SysRoot, before: &[(&Narrow, CpuSet, CpuSet)]) -> Result<usize> {
    let mut back = 0;
    for (n, then, was) in before {
        let Some(now) = super::threads::affinity(root, n.pid, n.tid) else {
            continue;
        };
        if now == *then || now == *was {
            continue;
        }
        match super::threads::set_thread_affinity_if(root, n.pid, n.tid, &now, was) {
            Ok(None) => back += 1,
            Ok(Some(_)) => {}
            // Exited, or the kernel will not change it: left so.
            Err(e) if super::threads::refusal(&e) != super::threads::Refusal::Failed => {}
            Err(e) => return Err(e),
        }
    }
    Ok(back)
}

/// Restore the partition's original state: the steps of apply undone, newest first, and checked.
pub fn restore(root: &SysRoot, o: &PartitionOriginal) -> Status {
    let back = match undo(root, o) {
        Ok(n) => n,
        Err(e) => {
            return Status::Failed {
                error: e.to_string(),
            }
        }
    };
    let to = if o.created {
        if root.exists(&o.dir) {
            return Status::Failed {
                error: format!("{} is still there", root.path(&o.dir).display()),
            };
        }
        "removed".to_string()
    } else {
        o.partition
            .as_deref()
            .map_or("as it was", |p| p.trim())
            .to_string()
    };
    Status::Restored {
        to: if back == 0 {
            to
        } else {
            format!("{to}; {back} thread(s) the removal widened narrowed back")
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread that exited after its pin was read is skipped; the others get theirs back,
    /// and a thread that cannot be written is an error.
    #[test]
    fn pins_are_put_back_but_for_threads_gone() {
        let t = tempfile::tempdir().unwrap();
        let root = SysRoot::new(t.path());
        for tid in [70, 71] {
            put(
                t.path(),
                &format!("proc/70/task/{tid}/status"),
                "Name:\tw\nCpus_allowed_list:\t2-3\n",
            );
        }
        let l = |s: &str| CpuSet::parse_list(s).unwrap();
        put_back_pins(&root, 70, &[(70, l("0-1")), (72, l("3")), (71, l("3"))]).unwrap();
        let status = |tid| {
            std::fs::read_to_string(t.path().join(format!("proc/70/task/{tid}/status"))).unwrap()
        };
        assert!(status(70).contains("Cpus_allowed_list:\t0-1\n"));
        assert!(status(71).contains("Cpus_allowed_list:\t3\n"));
        // A status file that is a directory: not "gone", a real error.
        std::fs::create_dir_all(t.path().join("proc/70/task/73/status")).unwrap();
        assert!(put_back_pins(&root, 70, &[(73, l("3"))]).is_err());
    }

    /// A process with threads on both sides of the CPUs makes the partition refuse, naming
    /// it; isold's own process and kthreads never do.
    #[test]
    fn split_processes_are_refused_but_never_isold_itself() {
        let l = |s: &str| CpuSet::parse_list(s).unwrap();
        let th = |pid: i32, tid: i32, comm: &str, cpus: &str, flags: u64| Thread {
            pid,
            tid,
            comm: comm.into(),
            flags,
            starttime: 1,
            affinity: l(cpus),
            policy: 0,
            rt_priority: 0,
            processor: 0,
            cpu_ticks: 0,
            switches: 0,
            state: 'S',
        };
        let plan = PartitionPlan {
            dir: "/sys/fs/cgroup/isolated".into(),
            cpus: l("2-3"),
            workloads: Vec::new(),
            narrow: Vec::new(),
            others: Vec::new(),
            other_pids: Default::default(),
        };
        let me = std::process::id() as i32;
        let mine = [
            th(me, me, "isold", "0-1", 0),
            th(me, me + 1, "isold", "3", 0),
        ];
        assert_eq!(refusal(&plan, &mine), None);
        let split = [
            th(40, 40, "qemu", "0-1", 0),
            th(40, 41, "CPU 0/TCG", "2", 0),
        ];
        let why = refusal(&plan, &split).unwrap();
        assert!(
            why.contains(
                "40 (qemu: 1 threads inside, e.g. CPU 0/TCG on 2; 1 outside, e.g. qemu on 0-1)"
            ),
            "{why}"
        );
        // A workload wholly inside is what the partition is for.
        let inside = [th(50, 50, "rt", "3", 0), th(50, 51, "rt", "2", 0)];
        assert_eq!(refusal(&plan, &inside), None);
    }

    #[test]
    fn a_systemd_unit_is_the_innermost_component_with_a_name_and_a_unit_suffix() {
        assert_eq!(
            systemd_unit("/system.slice/rtapp.service"),
            Some("rtapp.service")
        );
        assert_eq!(
            systemd_unit("/machine.slice/machine-qemu\\x2d1.scope/vcpu0"),
            Some("machine-qemu\\x2d1.scope")
        );
        assert_eq!(systemd_unit("/user.slice"), Some("user.slice"));
        assert_eq!(systemd_unit("/isolated"), None);
        assert_eq!(systemd_unit("/"), None);
        // A bare suffix names no unit.
        assert_eq!(systemd_unit("/.service"), None);
        assert_eq!(systemd_unit("/rt/.scope"), None);
    }

    fn put(root: &std::path::Path, rel: &str, content: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    /// A tree with a cgroup v2 root, and process `pid` (one thread per entry of `threads`:
    /// tid, affinity, kthread) in cgroup `cg`.
    fn task(root: &std::path::Path, pid: i32, cg: &str, threads: &[(i32, &str, bool)]) {
        task_of(root, pid, 0, cg, threads);
    }

    fn task_of(
        root: &std::path::Path,
        pid: i32,
        uid: u32,
        cg: &str,
        threads: &[(i32, &str, bool)],
    ) {
        put(root, &format!("proc/{pid}/cgroup"), &format!("0::{cg}\n"));
        for (tid, aff, kthread) in threads {
            let flags = if *kthread { 0x0020_8040 } else { 0x0040_0000 };
            put(
                root,
                &format!("proc/{pid}/task/{tid}/stat"),
                &format!("{tid} (w{tid}) S 1 {pid} {pid} 0 -1 {flags} 0 0 0 0 0 0 0 0 20 0 1 0 {} 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n", 100 + tid),
            );
            put(
                root,
                &format!("proc/{pid}/task/{tid}/status"),
                &format!(
                    "Name:\tw{tid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nCpus_allowed_list:\t{aff}\n"
                ),
            );
        }
    }

    fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        put(
            r,
            "sys/fs/cgroup/cgroup.controllers",
            "cpuset cpu io memory pids\n",
        );
        put(r, "sys/fs/cgroup/cgroup.subtree_control", "\n");
        put(r, "sys/fs/cgroup/cpuset.cpus.effective", "0-3\n");
        std::fs::create_dir_all(r.join("proc")).unwrap();
        d
    }

    fn planned(root: &SysRoot) -> PartitionPlan {
        let threads = tasks::all_threads(root).unwrap();
        plan(
            root,
            "/sys/fs/cgroup/iso",
            &"2-3".parse().unwrap(),
            &threads,
        )
        .unwrap()
    }

    /// The threads a partition's removal may widen are recorded at plan; after the removal,
    /// those the kernel widened get their recorded affinity back, and none other: not a
    /// thread its owner pinned meanwhile, not one gone or replaced, not the wide ones.
    #[test]
    fn threads_the_removal_widened_are_narrowed_back() {
        let t = tree();
        let r = t.path();
        let root = SysRoot::new(r);
        task(r, 1, "/init.scope", &[(1, "0-1", false)]); // isolcpus= at boot
        task(r, 20, "/", &[(20, "0-3", false)]);
        task(r, 30, "/", &[(30, "0-1", false), (31, "0-1", false)]);
        task(r, 40, "/", &[(40, "3", false)]); // a workload: moved in, not recorded
        task(r, 50, "/", &[(50, "0-1", false)]);
        task(r, 60, "/", &[(60, "1-2", false)]);
        task(r, 70, "/", &[(70, "0-1", false)]);
        let p = planned(&root);
        let rec: Vec<(i32, &str)> = p.narrow.iter().map(|n| (n.tid, n.cpus.as_str())).collect();
        assert_eq!(
            rec,
            [
                (1, "0-1"),
                (30, "0-1"),
                (31, "0-1"),
                (50, "0-1"),
                (60, "1-2"),
                (70, "0-1")
            ]
        );
        let aff = |tid: i32, pid: i32| {
            crate::policy::threads::affinity(&root, pid, tid)
                .unwrap()
                .to_string()
        };
        let set = |pid: i32, tid: i32, cpus: &str| {
            crate::policy::threads::set_thread_affinity(
                &root,
                pid,
                tid,
                &CpuSet::parse_list(cpus).unwrap(),
            )
            .unwrap()
        };
        // While the partition is there: the kernel narrowed 60 off it; the owner of 31 pinned
        // it; 50 exited; 70's pid went to another thread.
        set(60, 60, "1");
        set(30, 31, "1");
        std::fs::remove_dir_all(r.join("proc/50")).unwrap();
        task(r, 70, "/", &[(70, "0-1", false)]);
        let stat = r.join("proc/70/task/70/stat");
        let text = std::fs::read_to_string(&stat)
            .unwrap()
            .replace(" 170 ", " 999 ");
        std::fs::write(&stat, text).unwrap();
        let before = narrow_now(&root, &p.narrow);
        assert_eq!(before.len(), 4, "50 gone, 70 another thread");
        // The removal: the kernel resets every task of the root cgroup but the owner's pin.
        for (pid, tid) in [(1, 1), (20, 20), (30, 30), (60, 60), (70, 70)] {
            set(pid, tid, "0-3");
        }
        assert_eq!(narrow_back(&root, &before).unwrap(), 3);
        assert_eq!(aff(1, 1), "0-1");
        assert_eq!(aff(30, 30), "0-1");
        assert_eq!(aff(31, 30), "1");
        assert_eq!(aff(60, 60), "1-2");
        assert_eq!(aff(20, 20), "0-3");
        assert_eq!(aff(70, 70), "0-3");
    }

    #[test]
    fn paths() {
        assert_eq!(cgroup_path("/sys/fs/cgroup/iso"), "/iso");
        assert_eq!(cgroup_path("/sys/fs/cgroup"), "/");
        assert_eq!(parent("/sys/fs/cgroup/iso"), "/sys/fs/cgroup");
        assert_eq!(parent("/iso"), "/");
        assert!(inside("/iso", "/iso") && inside("/iso/a", "/iso") && inside("/iso/a", "/iso/"));
        assert!(!inside("/isolated", "/iso") && !inside("/", "/iso"));
        assert!(has_word("cpuset cpu", "cpu") && !has_word("cpuset", "cpu"));
    }

    /// A daemon's two-read check: an isolated partition of exactly the CPUs, nothing else.
    #[test]
    fn holds_only_an_isolated_partition_of_the_cpus() {
        let t = tree();
        let r = t.path();
        let root = SysRoot::new(r);
        let cpus: CpuSet = "2-3".parse().unwrap();
        let dir = "/sys/fs/cgroup/iso";
        assert!(!holds(&root, dir, &cpus), "no directory");
        put(r, "sys/fs/cgroup/iso/cpuset.cpus", "2-3\n");
        assert!(!holds(&root, dir, &cpus), "no partition file");
        for (part, list, right) in [
            ("isolated\n", "2-3\n", true),
            ("member\n", "2-3\n", false),
            (
                "isolated invalid (Cpu list in cpuset.cpus not exclusive)\n",
                "2-3\n",
                false,
            ),
            ("root\n", "2-3\n", false),
            ("isolated\n", "2\n", false),
            ("isolated\n", "1-3\n", false),
            ("isolated\n", "garbage\n", false),
        ] {
            put(r, "sys/fs/cgroup/iso/cpuset.cpus.partition", part);
            put(r, "sys/fs/cgroup/iso/cpuset.cpus", list);
            assert_eq!(holds(&root, dir, &cpus), right, "{part:?} {list:?}");
        }
        // cpuset.cpus.exclusive (6.7 and later): empty or the same CPUs.
        put(r, "sys/fs/cgroup/iso/cpuset.cpus.partition", "isolated\n");
        put(r, "sys/fs/cgroup/iso/cpuset.cpus", "2-3\n");
        for (exclusive, right) in [("2-3\n", true), ("\n", true), ("2\n", false)] {
            put(r, "sys/fs/cgroup/iso/cpuset.cpus.exclusive", exclusive);
            assert_eq!(holds(&root, dir, &cpus), right, "exclusive {exclusive:?}");
        }
        std::fs::create_dir(r.join("sys/fs/cgroup/iso/cpuset.cpus.exclusive.d")).unwrap();
        std::fs::remove_file(r.join("sys/fs/cgroup/iso/cpuset.cpus.exclusive")).unwrap();
        assert!(holds(&root, dir, &cpus), "no exclusive file");
        // Unreadable (here a directory in its place): not known to hold.
        std::fs::create_dir(r.join("sys/fs/cgroup/iso/cpuset.cpus.exclusive")).unwrap();
        assert!(!holds(&root, dir, &cpus), "unreadable exclusive file");
        // The apply's own check agrees, and says what is off.
        std::fs::remove_dir(r.join("sys/fs/cgroup/iso/cpuset.cpus.exclusive")).unwrap();
        let p = PartitionPlan {
            dir: dir.into(),
            cpus: cpus.clone(),
            workloads: Vec::new(),
            narrow: Vec::new(),
            others: Vec::new(),
            other_pids: Default::default(),
        };
        put(r, "sys/fs/cgroup/iso/cpuset.cpus.exclusive", "2\n");
        match evaluate(&root, &p).unwrap() {
            Found::Change { from, .. } => {
                assert_eq!(from, "isolated of CPUs 2-3 (exclusive CPUs 2)")
            }
            other => panic!("{other:?}"),
        }
        put(r, "sys/fs/cgroup/iso/cpuset.cpus.exclusive", "2-3\n");
        assert!(matches!(
            evaluate(&root, &p).unwrap(),
            Found::Done(Status::AlreadyRight)
        ));
        assert_eq!(
            watched_files(dir),
            [
                "/sys/fs/cgroup/iso/cpuset.cpus",
                "/sys/fs/cgroup/iso/cpuset.cpus.exclusive",
                "/sys/fs/cgroup/iso/cpuset.cpus.partition"
            ]
        );
    }

    /// Workloads are user processes with every thread inside the CPUs, outside the
    /// partition; kthreads, a process with one thread outside and one already in are not.
    #[test]
    fn the_workloads_to_move() {
        let t = tree();
        let r = t.path();
        task(r, 10, "/", &[(10, "3", false), (11, "2", false)]);
        task(r, 20, "/", &[(20, "3", false), (21, "0-3", false)]);
        task(r, 30, "/", &[(30, "2", true)]);
        task(r, 40, "/iso/sub", &[(40, "3", false)]);
        task(r, 50, "/system.slice/x.service", &[(50, "2-3", false)]);
        // libvirt's QEMU runs as libvirt-qemu: a workload; another user's process is not.
        let vm = "/machine.slice/machine-qemu\\x2d1\\x2dvm.scope/libvirt/emulator";
        task_of(r, 60, 64055, vm, &[(60, "2", false)]);
        task_of(r, 70, 1000, "/user.slice", &[(70, "3", false)]);
        task_of(
            r,
            80,
            1000,
            "/machine.slicex",
            &[(80, "3", false), (81, "0", false)],
        );
        let root = SysRoot::new(r);
        let p = planned(&root);
        let got: Vec<(i32, &str, usize)> = p
            .workloads
            .iter()
            .map(|(t, cg, g)| (t.pid, cg.as_str(), g.len()))
            .collect();
        assert_eq!(
            got,
            vec![
                (10, "/", 2),
                (50, "/system.slice/x.service", 1),
                (60, vm, 1)
            ]
        );
        assert_eq!(p.others, ["70 (w70, uid 1000)", "80 (w80, uid 1000)"]);
        assert_eq!(p.other_pids.iter().copied().collect::<Vec<_>>(), [70, 80]);
    }

    #[test]
    fn what_is_right_and_what_is_not_there() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("proc")).unwrap();
        let root = SysRoot::new(t.path());
        let p = planned(&root);
        assert!(matches!(
            evaluate(&root, &p),
            Ok(Found::Done(Status::NotPresent { reason })) if reason == "no cgroup v2 hierarchy at /sys/fs/cgroup"
        ));
        put(
            t.path(),
            "sys/fs/cgroup/cgroup.controllers",
            "cpu io memory pids\n",
        );
        assert!(matches!(
            evaluate(&root, &p),
            Ok(Found::Done(Status::NotPresent { reason })) if reason.contains("has no cpuset controller")
        ));
        std::fs::remove_file(t.path().join("sys/fs/cgroup/cgroup.controllers")).unwrap();
        std::fs::create_dir(t.path().join("sys/fs/cgroup/cgroup.controllers")).unwrap();
        assert!(
            evaluate(&root, &p).is_err(),
            "a read error is not 'not present'"
        );

        let t = tree();
        let r = t.path();
        let root = SysRoot::new(r);
        let from = |root: &SysRoot| match evaluate(root, &planned(root)).unwrap() {
            Found::Done(s) => format!("{s:?}"),
            Found::Change { from, original } => {
                assert_eq!(
                    original.enabled_cpuset,
                    !has_word(
                        &std::fs::read_to_string(r.join("sys/fs/cgroup/cgroup.subtree_control"))
                            .unwrap(),
                        "cpuset"
                    )
                );
                from
            }
        };
        assert_eq!(from(&root), "absent");
        put(r, "sys/fs/cgroup/cgroup.subtree_control", "cpuset cpu\n");
        put(r, "sys/fs/cgroup/iso/cpuset.cpus", "2-3\n");
        put(r, "sys/fs/cgroup/iso/cpuset.cpus.partition", "member\n");
        assert_eq!(from(&root), "member of CPUs 2-3");
        put(r, "sys/fs/cgroup/iso/cpuset.cpus.partition", "isolated\n");
        assert_eq!(from(&root), "AlreadyRight");
        put(r, "sys/fs/cgroup/iso/cpuset.cpus", "3\n");
        assert_eq!(from(&root), "isolated of CPUs 3");
        put(r, "sys/fs/cgroup/iso/cpuset.cpus", "2-3\n");
        task(r, 10, "/", &[(10, "3", false)]);
        assert_eq!(
            from(&root),
            "isolated of CPUs 2-3, 1 workload(s) outside: 10 (w10)"
        );
        std::fs::remove_file(r.join("sys/fs/cgroup/iso/cpuset.cpus.partition")).unwrap();
        assert_eq!(
            from(&root),
            "no partition of CPUs 2-3, 1 workload(s) outside: 10 (w10)"
        );
    }

    /// A directory that existed keeps existing: restore writes back its CPUs and type, and
    /// leaves the parent's controllers alone when cpuset was already on.
    #[test]
    fn a_directory_that_existed_is_put_back_not_removed() {
        let t = tree();
        let r = t.path();
        put(r, "sys/fs/cgroup/cgroup.subtree_control", "cpuset\n");
        put(r, "sys/fs/cgroup/iso/cpuset.cpus", "1-3\n");
        put(r, "sys/fs/cgroup/iso/cpuset.cpus.exclusive", "\n");
        put(r, "sys/fs/cgroup/iso/cpuset.cpus.partition", "member\n");
        let root = SysRoot::new(r);
        let Found::Change { original, from } = evaluate(&root, &planned(&root)).unwrap() else {
            panic!("a member partition must change")
        };
        assert!(!original.created && !original.enabled_cpuset);
        let (st, left) = change(&root, &original, &"2-3".parse().unwrap(), from);
        assert!(matches!(st, Status::Changed { .. }) && left, "{st:?}");
        assert_eq!(
            std::fs::read_to_string(r.join("sys/fs/cgroup/iso/cpuset.cpus.exclusive")).unwrap(),
            "2-3\n"
        );
        assert_eq!(
            restore(&root, &original),
            Status::Restored {
                to: "member".into()
            }
        );
        for (f, want) in [
            ("iso/cpuset.cpus", "1-3\n"),
            ("iso/cpuset.cpus.exclusive", "\n"),
            ("iso/cpuset.cpus.partition", "member\n"),
            ("cgroup.subtree_control", "cpuset\n"),
        ] {
            assert_eq!(
                std::fs::read_to_string(r.join("sys/fs/cgroup").join(f)).unwrap(),
                want,
                "{f}"
            );
        }
    }

    /// restore of a directory apply made: gone already is fine; one that holds something
    /// else by now cannot be removed, and that is a failure naming it.
    #[test]
    fn removing_the_directory_apply_made() {
        let t = tree();
        let r = t.path();
        let root = SysRoot::new(r);
        let Found::Change { original, from } = evaluate(&root, &planned(&root)).unwrap() else {
            panic!("absent must change")
        };
        assert!(original.created && original.enabled_cpuset);
        assert!(matches!(
            change(&root, &original, &"2-3".parse().unwrap(), from),
            (Status::Changed { .. }, true)
        ));
        std::fs::create_dir(r.join("sys/fs/cgroup/iso/child")).unwrap();
        let st = restore(&root, &original);
        assert!(
            matches!(st, Status::Failed { ref error } if error.contains("sys/fs/cgroup/iso")),
            "{st:?}"
        );
        std::fs::remove_dir(r.join("sys/fs/cgroup/iso/child")).unwrap();
        assert_eq!(
            restore(&root, &original),
            Status::Restored {
                to: "removed".into()
            }
        );
        assert_eq!(
            restore(&root, &original),
            Status::Restored {
                to: "removed".into()
            }
        );
        assert!(!r.join("sys/fs/cgroup/iso").exists());
    }

    /// A workload that pins a thread after the plan read it (libvirt's vCPU, a DPDK lcore)
    /// keeps that pin through the move into the partition (the kernel gives a moved thread
    /// the cgroup's CPUs) and through the move back.
    #[test]
    fn a_pin_made_after_the_plan_survives_the_moves() {
        let t = tree();
        let r = t.path();
        task(r, 10, "/", &[(10, "2-3", false), (11, "2-3", false)]);
        let root = SysRoot::new(r);
        let Found::Change { original, from } = evaluate(&root, &planned(&root)).unwrap() else {
            panic!("absent must change")
        };
        let aff = |tid: i32| {
            let st = std::fs::read_to_string(r.join(format!("proc/10/task/{tid}/status"))).unwrap();
            st.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:\t").map(str::to_string))
                .unwrap()
        };
        let pin = |tid: i32, cpus: &str| {
            put(
                r,
                &format!("proc/10/task/{tid}/status"),
                &format!("Name:\tw{tid}\nCpus_allowed_list:\t{cpus}\n"),
            );
        };
        pin(11, "3");
        assert!(matches!(
            change(&root, &original, &"2-3".parse().unwrap(), from),
            (Status::Changed { .. }, true)
        ));
        assert_eq!((aff(10), aff(11)), ("2-3".into(), "3".into()));
        pin(10, "2");
        assert_eq!(
            restore(&root, &original),
            Status::Restored {
                to: "removed".into()
            }
        );
        assert_eq!(
            std::fs::read_to_string(r.join("proc/10/cgroup")).unwrap(),
            "0::/\n"
        );
        assert_eq!((aff(10), aff(11)), ("2".into(), "3".into()));
    }

    /// Restore moves back only the processes it moved: a pid reused by a new process (another
    /// start time) is not touched.
    #[test]
    fn a_reused_pid_is_not_moved_back() {
        let t = tree();
        let r = t.path();
        task(r, 10, "/", &[(10, "3", false)]);
        let root = SysRoot::new(r);
        let Found::Change { original, from } = evaluate(&root, &planned(&root)).unwrap() else {
            panic!("absent must change")
        };
        assert!(matches!(
            change(&root, &original, &"2-3".parse().unwrap(), from),
            (Status::Changed { .. }, true)
        ));
        assert_eq!(
            std::fs::read_to_string(r.join("proc/10/cgroup")).unwrap(),
            "0::/iso\n"
        );
        // Process 10 exits; a new one gets pid 10 and is started in /iso.
        let stat = std::fs::read_to_string(r.join("proc/10/task/10/stat")).unwrap();
        put(
            r,
            "proc/10/task/10/stat",
            &stat.replace(" 110 0 0 ", " 999 0 0 "),
        );
        assert_eq!(
            restore(&root, &original),
            Status::Restored {
                to: "removed".into()
            }
        );
        assert_eq!(
            std::fs::read_to_string(r.join("proc/10/cgroup")).unwrap(),
            "0::/iso\n"
        );
    }
}
