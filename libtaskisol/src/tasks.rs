//! Every task (thread) of the system as isolation tools see it: comm, `PF_*` flags, start
//! time, CPU affinity, scheduling policy and cgroup, read from `/proc/<pid>/task/<tid>/`.
//!
//! Tasks come and go while they are read: a task that exits meanwhile is left out, never an
//! error. A task is identified by its tid *and* start time, because pids are reused.

use crate::cpuset::CpuSet;
use crate::error::{Error, Result};
use crate::procfs::{self, TaskStat, PF_KTHREAD, PF_NO_SETAFFINITY};
use crate::sched::SchedPolicy;
use crate::sysroot::SysRoot;

/// One thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thread {
    /// The process (thread group) id.
    pub pid: i32,
    /// The thread id.
    pub tid: i32,
    /// The thread's name (`comm`, at most 15 bytes; kthreads: `ksoftirqd/3`).
    pub comm: String,
    /// `PF_*` flags.
    pub flags: u64,
    /// Start time after boot in clock ticks.
    pub starttime: u64,
    /// `Cpus_allowed_list`.
    pub affinity: CpuSet,
    /// Scheduling policy number (`/proc/<pid>/stat` field 41).
    pub policy: u32,
    /// Real-time priority (field 40).
    pub rt_priority: u32,
    /// The CPU it last ran on (field 39).
    pub processor: u32,
    /// CPU time used so far in clock ticks (utime + stime).
    pub cpu_ticks: u64,
    /// Context switches so far, voluntary and not (`/proc/<pid>/task/<tid>/status`): a
    /// change between two reads means the thread ran in between.
    pub switches: u64,
}

impl Thread {
    /// A kernel thread.
    pub fn is_kthread(&self) -> bool {
        self.flags & PF_KTHREAD != 0
    }

    /// The kernel refuses affinity changes (per-CPU kthreads: `ksoftirqd/N`, `migration/N`,
    /// bound kworkers, `cpuhp/N`): `sched_setaffinity` fails with EINVAL.
    pub fn is_pinned_by_kernel(&self) -> bool {
        self.flags & PF_NO_SETAFFINITY != 0
    }

    /// The scheduling policy with its priority, where it is one the library knows.
    pub fn sched(&self) -> Option<SchedPolicy> {
        SchedPolicy::from_stat(self.policy, self.rt_priority)
    }
}

fn gone(e: &Error) -> bool {
    matches!(e.errno(), Some(libc::ENOENT) | Some(libc::ESRCH))
}

/// The numeric entries of `/proc`: every process (thread group), ascending.
pub fn pids(root: &SysRoot) -> Result<Vec<i32>> {
    root.read_dir_numbers("/proc")
}

/// Read thread `tid` of process `pid`. `Ok(None)` when it exited meanwhile.
pub fn read_thread(root: &SysRoot, pid: i32, tid: i32) -> Result<Option<Thread>> {
    let dir = format!("/proc/{pid}/task/{tid}");
    let stat = match TaskStat::read_path(root, &format!("{dir}/stat")) {
        Ok(s) => s,
        Err(e) if gone(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let status_path = format!("{dir}/status");
    let status = match root.read_to_string(&status_path) {
        Ok(s) => s,
        Err(e) if gone(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let list = procfs::status_field(&status, "Cpus_allowed_list").ok_or_else(|| Error::Parse {
        path: root.path(&status_path),
        input: "Cpus_allowed_list".into(),
        reason: "field not present".into(),
    })?;
    let affinity = CpuSet::parse_list(list)?;
    let switches = ["voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"]
        .iter()
        .filter_map(|k| procfs::status_field(&status, k)?.trim().parse::<u64>().ok())
        .sum();
    Ok(Some(Thread {
        pid,
        tid,
        comm: stat.comm,
        flags: stat.flags,
        starttime: stat.starttime,
        affinity,
        policy: stat.policy,
        rt_priority: stat.rt_priority,
        processor: stat.processor,
        cpu_ticks: stat.cpu_ticks,
        switches,
    }))
}

/// Every thread of process `pid`; empty when the process exited meanwhile.
pub fn threads_of(root: &SysRoot, pid: i32) -> Result<Vec<Thread>> {
    let tids = match procfs::thread_ids(root, pid) {
        Ok(t) => t,
        Err(e) if gone(&e) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::with_capacity(tids.len());
    for tid in tids {
        if let Some(t) = read_thread(root, pid, tid)? {
            out.push(t);
        }
    }
    Ok(out)
}

/// Every thread of every process.
pub fn all_threads(root: &SysRoot) -> Result<Vec<Thread>> {
    let mut out = Vec::new();
    for pid in pids(root)? {
        out.extend(threads_of(root, pid)?);
    }
    Ok(out)
}

/// The cgroup v2 path of process `pid` (`/machine.slice/vm.scope`), from the `0::` line of
/// `/proc/<pid>/cgroup`. `None` without a v2 line or when the process exited.
pub fn cgroup_of(root: &SysRoot, pid: i32) -> Result<Option<String>> {
    match root.read_to_string(format!("/proc/{pid}/cgroup")) {
        Ok(text) => Ok(text
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .map(str::to_string)),
        Err(e) if gone(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether the thread `tid` is still the one that started at `starttime`.
pub fn is_same_thread(root: &SysRoot, pid: i32, tid: i32, starttime: u64) -> Result<bool> {
    match TaskStat::read_path(root, &format!("/proc/{pid}/task/{tid}/stat")) {
        Ok(s) => Ok(s.starttime == starttime),
        Err(e) if gone(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_and_its_threads() {
        let root = SysRoot::host();
        let me = std::process::id() as i32;
        let handle =
            std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(300)));
        let threads = threads_of(&root, me).unwrap();
        assert!(threads.len() >= 2, "{threads:?}");
        let main = threads.iter().find(|t| t.tid == me).unwrap();
        assert_eq!(main.pid, me);
        assert!(!main.is_kthread());
        assert!(!main.affinity.is_empty());
        assert!(is_same_thread(&root, me, me, main.starttime).unwrap());
        assert!(!is_same_thread(&root, me, me, main.starttime + 1).unwrap());
        assert!(pids(&root).unwrap().contains(&me));
        handle.join().unwrap();
    }

    #[test]
    fn a_missing_process_is_no_thread() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        let root = SysRoot::new(dir.path());
        assert!(threads_of(&root, 77).unwrap().is_empty());
        assert_eq!(read_thread(&root, 77, 77).unwrap(), None);
        assert_eq!(cgroup_of(&root, 77).unwrap(), None);
        assert!(!is_same_thread(&root, 77, 77, 1).unwrap());
    }
}
