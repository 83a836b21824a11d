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
    /// Its state letter when read (`R` runnable or running, `S`, `D`, `I`, ...).
    pub state: char,
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

pub(crate) fn gone(e: &Error) -> bool {
    matches!(e.errno(), Some(libc::ENOENT) | Some(libc::ESRCH))
}

/// The numeric entries of `/proc`: every process (thread group), ascending.
pub fn pids(root: &SysRoot) -> Result<Vec<i32>> {
    root.read_dir_numbers("/proc")
}

/// What to read of each thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// Everything: `stat` and `status` (for the context switches) a thread.
    Full,
    /// Everything but the context switches ([`Thread::switches`] is 0): what applying and
    /// checking a policy needs. On the running system, when every possible CPU is online, a
    /// thread is its `stat` and one `sched_getaffinity` (the kernel's `cpus_mask`, as
    /// `status` prints it, when no CPU is offline): `status` is the dearest file of a task
    /// (the kernel takes its memory map's lock to print it), and under emulation it was
    /// most of the time of an apply. Elsewhere, as [`Detail::Full`].
    NoSwitches,
}

/// How a thread's affinity is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Affinity {
    /// `Cpus_allowed_list` of `status`, with the context switches.
    Status,
    /// `sched_getaffinity`, and no `status` at all.
    Syscall,
}

impl Detail {
    fn affinity(self, root: &SysRoot) -> Affinity {
        if self == Detail::NoSwitches && root.is_host() && every_possible_cpu_online(root) {
            Affinity::Syscall
        } else {
            Affinity::Status
        }
    }
}

/// Whether every possible CPU is online: then `sched_getaffinity` (`cpus_mask` and the
/// active CPUs) is `cpus_mask`, what `status` shows and what restore must put back.
fn every_possible_cpu_online(root: &SysRoot) -> bool {
    let read = |p| {
        root.read_value(p)
            .ok()
            .and_then(|v| CpuSet::parse_list(&v).ok())
    };
    match (
        read("/sys/devices/system/cpu/possible"),
        read("/sys/devices/system/cpu/online"),
    ) {
        (Some(possible), Some(online)) => possible == online,
        _ => false,
    }
}

/// Read thread `tid` of process `pid`. `Ok(None)` when it exited meanwhile.
pub fn read_thread(root: &SysRoot, pid: i32, tid: i32) -> Result<Option<Thread>> {
    read_thread_as(root, pid, tid, Affinity::Status)
}

fn read_thread_as(root: &SysRoot, pid: i32, tid: i32, how: Affinity) -> Result<Option<Thread>> {
    Ok(read_counted(root, pid, tid, how)?.map(|(t, _)| t))
}

/// [`read_thread_as`] with the number of threads of the process (stat's field 20).
fn read_counted(
    root: &SysRoot,
    pid: i32,
    tid: i32,
    how: Affinity,
) -> Result<Option<(Thread, i64)>> {
    let dir = format!("/proc/{pid}/task/{tid}");
    let Some(stat) = gone_is_none(TaskStat::read_path(root, &format!("{dir}/stat")))? else {
        return Ok(None);
    };
    let (affinity, switches) = if how == Affinity::Syscall {
        match gone_is_none(crate::sched::get_affinity(tid))? {
            Some(a) => (a, 0),
            None => return Ok(None),
        }
    } else {
        match read_status(root, &dir)? {
            Some(v) => v,
            None => return Ok(None),
        }
    };
    let n = stat.num_threads;
    Ok(Some((thread_of(pid, tid, stat, affinity, switches), n)))
}

/// The affinity and the context switches of a thread's status file (in `dir`); `None`
/// when the thread is gone.
fn read_status(root: &SysRoot, dir: &str) -> Result<Option<(CpuSet, u64)>> {
    let status_path = format!("{dir}/status");
    let Some(status) = gone_is_none(root.read_to_string(&status_path))? else {
        return Ok(None);
    };
    let [list, voluntary, involuntary] = procfs::status_fields(
        &status,
        [
            "Cpus_allowed_list",
            "voluntary_ctxt_switches",
            "nonvoluntary_ctxt_switches",
        ],
    );
    let list = list.ok_or_else(|| Error::Parse {
        path: root.path(&status_path),
        input: "Cpus_allowed_list".into(),
        reason: "field not present".into(),
    })?;
    let affinity = CpuSet::parse_list(list)?;
    let switches = [voluntary, involuntary]
        .iter()
        .filter_map(|v| v.and_then(|v| v.parse::<u64>().ok()))
        .sum();
    Ok(Some((affinity, switches)))
}

fn thread_of(pid: i32, tid: i32, stat: TaskStat, affinity: CpuSet, switches: u64) -> Thread {
    Thread {
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
        state: stat.state,
    }
}

/// Thread `tid` of process `pid` with its context switches when its affinity meets `cpus`;
/// `None` when it does not, or it is gone. Looked at no further than its affinity otherwise:
/// on the running system one `sched_getaffinity`, elsewhere its status file.
fn read_if_on(root: &SysRoot, pid: i32, tid: i32, cpus: &CpuSet) -> Result<Option<Thread>> {
    let dir = format!("/proc/{pid}/task/{tid}");
    if root.is_host() {
        return match gone_is_none(crate::sched::get_affinity(tid))? {
            Some(a) if !a.is_disjoint(cpus) => read_thread(root, pid, tid),
            _ => Ok(None),
        };
    }
    let Some((affinity, switches)) = read_status(root, &dir)? else {
        return Ok(None);
    };
    if affinity.is_disjoint(cpus) {
        return Ok(None);
    }
    Ok(
        gone_is_none(TaskStat::read_path(root, &format!("{dir}/stat")))?
            .map(|stat| thread_of(pid, tid, stat, affinity, switches)),
    )
}

/// Every thread that may run on one of `cpus` (its affinity meets them), with its context
/// switches, in the order of the process ids: what an audit of `cpus` samples. The others
/// are read no further than their affinity: after isolation, on a host with tens of
/// thousands of threads, nearly all of them.
pub fn threads_on(root: &SysRoot, cpus: &CpuSet) -> Result<Vec<Thread>> {
    let pids = pids(root)?;
    read_all(
        &pids,
        |pid| {
            Ok(match listed_tids(root, pid)? {
                Some(tids) => Listed::ToRead { leader: None, tids },
                None => Listed::Read(Vec::new()),
            })
        },
        |pid, tid| read_if_on(root, pid, tid, cpus),
    )
}

/// The thread ids of process `pid`, ascending; `None` when it exited meanwhile.
fn listed_tids(root: &SysRoot, pid: i32) -> Result<Option<Vec<i32>>> {
    gone_is_none(procfs::thread_ids(root, pid))
}

/// `r`, with an error that says the thread or process is gone (ENOENT, ESRCH) as `None`:
/// tasks come and go while they are read, and one that went is no error.
fn gone_is_none<T>(r: Result<T>) -> Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if gone(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A process as the first pass of [`read_all`] finds it.
enum Listed {
    /// Its threads, read already (none when it exited; its leader alone when the leader's
    /// count said one).
    Read(Vec<Thread>),
    /// Its thread ids, to read in the second pass, but the leader's when read already.
    ToRead {
        leader: Option<Thread>,
        tids: Vec<i32>,
    },
}

/// The threads of `pids` in two passes spread over this process's CPUs ([`crate::par`]):
/// each process `list`ed, then every thread still to read `read`: a pass over the threads,
/// not the processes, so that one process of thousands of threads (a JVM, a QEMU with its
/// vCPUs, a DPDK application) is read by every worker. In the order of the process ids, then
/// of the thread ids; the first error in that order.
fn read_all(
    pids: &[i32],
    list: impl Fn(i32) -> Result<Listed> + Sync,
    read: impl Fn(i32, i32) -> Result<Option<Thread>> + Sync,
) -> Result<Vec<Thread>> {
    let listed = crate::par::map(pids, 500, |&pid| list(pid))
        .into_iter()
        .collect::<Result<Vec<Listed>>>()?;
    let todo: Vec<(i32, i32)> = pids
        .iter()
        .zip(&listed)
        .flat_map(|(&pid, l)| match l {
            Listed::Read(_) => Vec::new(),
            Listed::ToRead { leader, tids } => tids
                .iter()
                .filter(|&&tid| !(tid == pid && leader.is_some()))
                .map(|&tid| (pid, tid))
                .collect(),
        })
        .collect();
    let mut read = crate::par::map(&todo, 500, |&(pid, tid)| read(pid, tid))
        .into_iter()
        .collect::<Result<Vec<Option<Thread>>>>()?
        .into_iter();
    let mut out = Vec::new();
    for (&pid, l) in pids.iter().zip(listed) {
        match l {
            Listed::Read(v) => out.extend(v),
            Listed::ToRead { mut leader, tids } => {
                for tid in tids {
                    let t = match leader.take_if(|_| tid == pid) {
                        Some(t) => Some(t),
                        None => read.next().expect("a result for each thread to read"),
                    };
                    out.extend(t);
                }
            }
        }
    }
    Ok(out)
}

/// Every thread of process `pid`; empty when the process exited meanwhile.
pub fn threads_of(root: &SysRoot, pid: i32) -> Result<Vec<Thread>> {
    threads_of_as(root, pid, Affinity::Status)
}

fn threads_of_as(root: &SysRoot, pid: i32, how: Affinity) -> Result<Vec<Thread>> {
    read_all(
        &[pid],
        |pid| list_process(root, pid, how),
        |pid, tid| read_thread_as(root, pid, tid, how),
    )
}

/// Process `pid` as the first pass of [`read_all`] finds it. On the running system the
/// leader's stat says how many threads the process has: most have one, and listing its task
/// directory costs as much as reading a file (in a TCG guest a quarter of an apply). The
/// leader's directory lives as long as the process, a zombie's too. A tree's stat files need
/// not count right: always listed there.
fn list_process(root: &SysRoot, pid: i32, how: Affinity) -> Result<Listed> {
    let mut leader = None;
    if root.is_host() {
        match read_counted(root, pid, pid, how)? {
            None => return Ok(Listed::Read(Vec::new())),
            Some((t, 1)) => return Ok(Listed::Read(vec![t])),
            Some((t, _)) => leader = Some(t),
        }
    }
    Ok(match listed_tids(root, pid)? {
        Some(tids) => Listed::ToRead { leader, tids },
        None => Listed::Read(Vec::new()),
    })
}

/// Every thread of every process, in the order of the process ids. On a host with thousands
/// of processes the reads are spread over this process's CPUs ([`crate::par`]).
pub fn all_threads(root: &SysRoot) -> Result<Vec<Thread>> {
    all_threads_with(root, Detail::Full)
}

/// Every thread of every process, read in `detail`, in the order of the process ids.
pub fn all_threads_with(root: &SysRoot, detail: Detail) -> Result<Vec<Thread>> {
    let how = detail.affinity(root);
    let pids = pids(root)?;
    crate::cost::stage("workers", "thread reads (wall)", || {
        read_all(
            &pids,
            |pid| list_process(root, pid, how),
            |pid, tid| read_thread_as(root, pid, tid, how),
        )
    })
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

/// The real user id of process `pid` (the first field of the `Uid:` line of its leader's
/// `/proc/<pid>/task/<pid>/status`). `None` when the process exited or the line is missing.
pub fn owner_of(root: &SysRoot, pid: i32) -> Result<Option<u32>> {
    match root.read_to_string(format!("/proc/{pid}/task/{pid}/status")) {
        Ok(text) => Ok(text
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|u| u.split_whitespace().next())
            .and_then(|u| u.parse().ok())),
        Err(e) if gone(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The processes whose name (`/proc/PID/comm`) is `comm`, ascending.
pub fn pids_named(root: &SysRoot, comm: &str) -> Result<Vec<i32>> {
    let mut out = Vec::new();
    for pid in pids(root)? {
        match root.read_to_string(format!("/proc/{pid}/comm")) {
            Ok(c) if c.trim_end_matches('\n') == comm => out.push(pid),
            Ok(_) => {}
            Err(e) if gone(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// When the system booted, in seconds since the Unix epoch (`btime` of `/proc/stat`).
pub fn boot_time_unix(root: &SysRoot) -> Result<u64> {
    let stat = root.read_to_string("/proc/stat")?;
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .ok_or_else(|| Error::Parse {
            path: root.path("/proc/stat"),
            input: "btime".into(),
            reason: "field not present".into(),
        })
}

/// When process `pid` started, in seconds since the Unix epoch: its start time (clock ticks
/// after boot) plus the boot time of `/proc/stat`. `None` when it exited.
pub fn process_start_unix(root: &SysRoot, pid: i32) -> Result<Option<u64>> {
    let st = match TaskStat::read(root, pid) {
        Ok(s) => s,
        Err(e) if gone(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let btime = boot_time_unix(root)?;
    // SAFETY: sysconf has no preconditions.
    let hz = match unsafe { libc::sysconf(libc::_SC_CLK_TCK) } {
        n if n > 0 => n as u64,
        _ => 100,
    };
    Ok(Some(btime + st.starttime / hz))
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
        // Other tests' threads come and go meanwhile: each thread read is listed before or after.
        let mut listed = procfs::thread_ids(&root, me).unwrap();
        let threads = threads_of(&root, me).unwrap();
        listed.extend(procfs::thread_ids(&root, me).unwrap());
        assert!(threads.len() >= 2, "{threads:?}");
        let main = threads.iter().find(|t| t.tid == me).unwrap();
        assert_eq!(main.pid, me);
        assert!(!main.is_kthread());
        assert!(!main.affinity.is_empty());
        assert!(is_same_thread(&root, me, me, main.starttime).unwrap());
        assert!(!is_same_thread(&root, me, me, main.starttime + 1).unwrap());
        assert!(pids(&root).unwrap().contains(&me));
        // Every thread the task directory lists (the leader's count said more than one).
        assert!(threads.iter().all(|t| listed.contains(&t.tid)));
        handle.join().unwrap();
        // A process of one thread: the leader alone (its count said so; nothing listed).
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let one = threads_of(&root, pid).unwrap();
        assert_eq!(one.iter().map(|t| t.tid).collect::<Vec<_>>(), [pid]);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(threads_of(&root, pid).unwrap().is_empty(), "reaped: gone");
    }

    /// Without the context switches, the running system's threads come from stat and
    /// sched_getaffinity: the same threads, the same affinities as status gives (every CPU
    /// of this machine is online), switches 0. A tree has no system call: status, as Full.
    #[test]
    fn no_switches_reads_the_same_threads_with_one_file_less() {
        let root = SysRoot::host();
        let me = std::process::id() as i32;
        assert!(
            every_possible_cpu_online(&root),
            "a test machine with an offline CPU"
        );
        assert_eq!(Detail::NoSwitches.affinity(&root), Affinity::Syscall);
        assert_eq!(Detail::Full.affinity(&root), Affinity::Status);
        // This test's own thread: the other tests' threads come and go meanwhile.
        let tid = nix::unistd::gettid().as_raw();
        std::thread::sleep(std::time::Duration::from_millis(2)); // a context switch
        let f = read_thread_as(&root, me, tid, Affinity::Status)
            .unwrap()
            .unwrap();
        let b = read_thread_as(&root, me, tid, Affinity::Syscall)
            .unwrap()
            .unwrap();
        assert_eq!(b.switches, 0);
        assert!(f.switches > 0, "{f:?}");
        let same = Thread {
            switches: 0,
            cpu_ticks: b.cpu_ticks,
            processor: b.processor,
            ..f.clone()
        };
        assert_eq!(same, b);
        let mine = |v: Vec<Thread>| v.into_iter().filter(|t| t.pid == me).count();
        assert!(mine(all_threads_with(&root, Detail::NoSwitches).unwrap()) >= 1);

        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let tree = SysRoot::new(d);
        put(d, "proc/7/task/7/stat", STAT);
        put(
            d,
            "proc/7/task/7/status",
            "Cpus_allowed_list:\t0-3\nvoluntary_ctxt_switches:\t5\n",
        );
        put(d, "sys/devices/system/cpu/possible", "0-3\n");
        put(d, "sys/devices/system/cpu/online", "0-3\n");
        assert_eq!(Detail::NoSwitches.affinity(&tree), Affinity::Status);
        let t = all_threads_with(&tree, Detail::NoSwitches).unwrap();
        assert_eq!(
            (t[0].affinity.to_string(), t[0].switches),
            ("0-3".into(), 5)
        );
    }

    /// An audit's threads: those whose affinity meets its CPUs, with their switches; the
    /// others read no further than their affinity, on a tree and on the running system.
    #[test]
    fn threads_on_some_cpus_are_those_that_may_run_there() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let tree = SysRoot::new(d);
        put(d, "proc/7/task/7/stat", STAT);
        put(
            d,
            "proc/7/task/7/status",
            "Cpus_allowed_list:\t2\nvoluntary_ctxt_switches:\t5\n",
        );
        put(
            d,
            "proc/8/task/8/stat",
            &STAT.replacen("7 (sh)", "8 (sh)", 1),
        );
        put(d, "proc/8/task/8/status", "Cpus_allowed_list:\t0-1\n");
        // Gone before its stat was read: no thread.
        put(d, "proc/9/task/9/status", "Cpus_allowed_list:\t0-3\n");
        let on = |cpus: &str| {
            threads_on(&tree, &CpuSet::parse_list(cpus).unwrap())
                .unwrap()
                .iter()
                .map(|t| (t.tid, t.switches))
                .collect::<Vec<_>>()
        };
        assert_eq!(on("2-3"), [(7, 5)]);
        assert_eq!(on("1"), [(8, 0)]);
        assert_eq!(on("0-3"), [(7, 5), (8, 0)]);
        // A stat that cannot be read (a directory: EISDIR) is an error, not a thread gone.
        std::fs::remove_file(d.join("proc/7/task/7/stat")).unwrap();
        std::fs::create_dir(d.join("proc/7/task/7/stat")).unwrap();
        let e = threads_on(&tree, &CpuSet::parse_list("2").unwrap()).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EISDIR), "{e}");
        std::fs::remove_dir(d.join("proc/7/task/7/stat")).unwrap();
        put(d, "proc/7/task/7/stat", STAT);
        put(d, "proc/8/task/8/status", "no affinity\n");
        assert!(threads_on(&tree, &CpuSet::parse_list("2").unwrap()).is_err());

        // The running system: a child pinned to CPU 0 is on 0 and not on 1.
        let root = SysRoot::host();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        crate::sched::set_affinity(pid, &CpuSet::parse_list("0").unwrap()).unwrap();
        let has = |cpus: &str| {
            threads_on(&root, &CpuSet::parse_list(cpus).unwrap())
                .unwrap()
                .iter()
                .any(|t| t.tid == pid)
        };
        assert!(has("0"));
        if crate::topology::online_cpus(&root).unwrap().contains(1) {
            assert!(!has("1"));
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_task_that_went_is_none_any_other_error_an_error() {
        let e = |n| Error::syscall("sched_getaffinity(pid 7)", nix::errno::Errno::from_raw(n));
        assert_eq!(gone_is_none(Ok(3)).unwrap(), Some(3));
        assert_eq!(gone_is_none::<u8>(Err(e(libc::ESRCH))).unwrap(), None);
        assert_eq!(gone_is_none::<u8>(Err(e(libc::ENOENT))).unwrap(), None);
        let err = gone_is_none::<u8>(Err(e(libc::EPERM))).unwrap_err();
        assert_eq!(err.errno(), Some(libc::EPERM));
        // The running system's answer for a thread that does not exist.
        assert_eq!(
            gone_is_none(crate::sched::get_affinity(i32::MAX)).unwrap(),
            None
        );
    }

    /// The pass over threads gives each thread of a process of several once, the leader
    /// (read first, for its count) in its place among them.
    #[test]
    fn every_thread_of_a_process_of_several_once_and_in_order() {
        let me = std::process::id() as i32;
        let ready = std::sync::Arc::new(std::sync::Barrier::new(4));
        let done = std::sync::Arc::new(std::sync::Barrier::new(4));
        let tids = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let (ready, done, tids) = (ready.clone(), done.clone(), tids.clone());
                std::thread::spawn(move || {
                    tids.lock().unwrap().push(nix::unistd::gettid().as_raw());
                    ready.wait();
                    done.wait();
                })
            })
            .collect();
        ready.wait();
        let root = SysRoot::host();
        let mine: Vec<i32> = tids.lock().unwrap().clone();
        for threads in [
            all_threads_with(&root, Detail::NoSwitches).unwrap(),
            all_threads(&root).unwrap(),
            threads_of(&root, me).unwrap(),
        ] {
            let of_me: Vec<i32> = threads
                .iter()
                .filter(|t| t.pid == me)
                .map(|t| t.tid)
                .collect();
            assert!(
                of_me.windows(2).all(|w| w[0] < w[1]),
                "once each, ascending: {of_me:?}"
            );
            assert!(of_me.contains(&me), "{of_me:?}");
            for t in &mine {
                assert!(of_me.contains(t), "{t} in {of_me:?}");
            }
            let leader = threads.iter().find(|t| t.tid == me).unwrap();
            assert_eq!(leader.pid, me);
        }
        done.wait();
        for h in handles {
            h.join().unwrap();
        }
    }

    /// With a CPU offline, sched_getaffinity leaves it out of the mask; the original must
    /// keep it (restore puts back what status shows): status then.
    #[test]
    fn an_offline_cpu_means_status() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let tree = SysRoot::new(d);
        put(d, "sys/devices/system/cpu/possible", "0-3\n");
        put(d, "sys/devices/system/cpu/online", "0-2\n");
        assert!(!every_possible_cpu_online(&tree));
        put(d, "sys/devices/system/cpu/online", "0-3\n");
        assert!(every_possible_cpu_online(&tree));
        std::fs::remove_file(d.join("sys/devices/system/cpu/possible")).unwrap();
        assert!(!every_possible_cpu_online(&tree), "unknown is not online");
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

    fn put(dir: &std::path::Path, rel: &str, content: &str) {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    const STAT: &str = "7 (sh) S 1 7 7 0 -1 4194560 0 0 0 0 12 30 0 0 20 0 1 0 99 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 2 0 0 0 0 0\n";

    /// Context switches and CPU time come from status and stat; a thread whose files went
    /// away is no thread, but any other failure (a file that does not parse, a directory
    /// where a file should be) is an error naming the file.
    #[test]
    fn a_thread_that_cannot_be_read_is_an_error_unless_it_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let root = SysRoot::new(d);
        put(d, "proc/7/task/7/stat", STAT);
        put(d, "proc/7/task/7/status", "Name:\tsh\nCpus_allowed_list:\t0-3\nvoluntary_ctxt_switches:\t5\nnonvoluntary_ctxt_switches:\t2\n");
        put(d, "proc/7/cgroup", "0::/user.slice\n");
        let t = read_thread(&root, 7, 7).unwrap().unwrap();
        assert_eq!((t.switches, t.cpu_ticks, t.processor), (7, 42, 2));
        assert_eq!(t.sched(), Some(SchedPolicy::Other));
        assert_eq!(threads_of(&root, 7).unwrap(), vec![t.clone()]);
        assert_eq!(cgroup_of(&root, 7).unwrap().as_deref(), Some("/user.slice"));
        assert!(is_same_thread(&root, 7, 7, 99).unwrap());

        // Gone between reading stat and status: no thread.
        std::fs::remove_file(d.join("proc/7/task/7/status")).unwrap();
        assert_eq!(read_thread(&root, 7, 7).unwrap(), None);
        // A directory where status should be: EISDIR, an error.
        std::fs::create_dir(d.join("proc/7/task/7/status")).unwrap();
        let e = read_thread(&root, 7, 7).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EISDIR), "{e}");
        assert!(threads_of(&root, 7).is_err());
        std::fs::remove_dir(d.join("proc/7/task/7/status")).unwrap();
        // A stat that does not parse: an error naming the file, not a vanished thread.
        put(d, "proc/7/task/7/stat", "garbage\n");
        let e = read_thread(&root, 7, 7).unwrap_err();
        assert!(e.to_string().contains("proc/7/task/7/stat"), "{e}");
        assert!(is_same_thread(&root, 7, 7, 99).is_err());
        // A cgroup file that cannot be read.
        std::fs::remove_file(d.join("proc/7/cgroup")).unwrap();
        std::fs::create_dir(d.join("proc/7/cgroup")).unwrap();
        assert!(cgroup_of(&root, 7).is_err());
        // A task directory that cannot be listed.
        std::fs::remove_dir_all(d.join("proc/7/task")).unwrap();
        put(d, "proc/7/task", "not a directory");
        assert!(threads_of(&root, 7).is_err());
    }
}
