//! What runs, and what waits to run, on the isolated CPUs, read from a housekeeping CPU
//! without disturbing them: the kernel's per-CPU busy and idle time (`/proc/stat`) and, for
//! the threads that are runnable there, their state, CPU, policy and run counts
//! (`/proc/<pid>/task/<tid>/stat` and `schedstat`). Remote reads of these files take no lock
//! of the CPU read about and send it no IPI (measured on 6.1, 6.12-rt and 7.2-rt: the CAL
//! and RES counts of a CPU running a busy loop did not move over 1500 reads).
//!
//! The stall guard ([`crate::stalls`]) is built on it.

use std::collections::BTreeMap;

use crate::cpuset::CpuSet;
use crate::error::Result;
use crate::procfs::{TaskStat, PF_KTHREAD, PF_NO_SETAFFINITY};
use crate::sched::SCHED_DEADLINE;
use crate::sysroot::SysRoot;

/// What kind of thread: the label of the guard's metrics and messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A kernel thread bound to its CPU (`kworker/3:1`, `ksoftirqd/3`, `rcuc/3`): the kernel
    /// pins it (PF_NO_SETAFFINITY) and the work of that CPU waits for it.
    PerCpuKthread,
    /// Another kernel thread.
    Kthread,
    /// A user thread.
    Task,
}

impl Kind {
    /// `percpu_kthread`, `kthread`, `task`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::PerCpuKthread => "percpu_kthread",
            Kind::Kthread => "kthread",
            Kind::Task => "task",
        }
    }
}

/// One look at one thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Process id.
    pub pid: i32,
    /// Thread id.
    pub tid: i32,
    /// Start time in ticks after boot (with the tid, which thread this is).
    pub starttime: u64,
    /// Name.
    pub comm: String,
    /// `PF_*` flags.
    pub flags: u64,
    /// State letter: `R` is runnable (running, or waiting for the CPU).
    pub state: char,
    /// The CPU it is on (where it waits, when runnable).
    pub cpu: u32,
    /// Policy number.
    pub policy: u32,
    /// Real-time priority.
    pub rt_priority: u32,
    /// CPU time in ns (schedstat's first field; stat's ticks where there is no schedstat).
    pub exec_ns: u64,
    /// How many times it was put on a CPU (schedstat's third field).
    pub runs: u64,
    /// CPU time in clock ticks (stat's utime + stime): on a nohz_full CPU the kernel adds
    /// the running slice when it is read, so it moves while the thread runs even when the
    /// tick is stopped and schedstat's figure waits for the next (remote) tick.
    pub cpu_ticks: u64,
}

impl Seen {
    /// What kind of thread.
    pub fn kind(&self) -> Kind {
        match (
            self.flags & PF_KTHREAD != 0,
            self.flags & PF_NO_SETAFFINITY != 0,
        ) {
            (true, true) => Kind::PerCpuKthread,
            (true, false) => Kind::Kthread,
            _ => Kind::Task,
        }
    }

    /// Whether it ran between `earlier` and this look: its CPU time or its run count moved.
    /// (schedstat's run_delay is added only once a wait ends, so it says nothing during one.)
    pub fn ran_since(&self, earlier: &Seen) -> bool {
        self.exec_ns != earlier.exec_ns
            || self.runs != earlier.runs
            || self.cpu_ticks != earlier.cpu_ticks
    }

    /// The same thread as `other` (a tid is reused by a later thread).
    pub fn same_thread(&self, other: &Seen) -> bool {
        self.tid == other.tid && self.starttime == other.starttime
    }

    /// Where the scheduler puts it: deadline above real-time above the fair classes, then the
    /// real-time priority.
    pub fn rank(&self) -> (u8, u32) {
        match self.policy {
            SCHED_DEADLINE => (3, 0),
            1 | 2 => (2, self.rt_priority),
            5 => (0, 0),
            _ => (1, 0),
        }
    }

    /// Whether it has a real-time policy (FIFO, RR) or a deadline.
    pub fn is_realtime(&self) -> bool {
        self.rank().0 >= 2
    }

    /// How people name it: `kworker/3:1 (kernel thread 45)`, `sh (pid 812, thread 812)`.
    pub fn label(&self) -> String {
        if self.flags & PF_KTHREAD != 0 {
            format!("{} (kernel thread {})", self.comm, self.tid)
        } else if self.pid == self.tid {
            format!("{} (pid {})", self.comm, self.pid)
        } else {
            format!("{} (pid {}, thread {})", self.comm, self.pid, self.tid)
        }
    }
}

/// USER_HZ, the unit of the times in `/proc/stat` and `/proc/<pid>/stat` (100 on every
/// Linux architecture in use).
pub fn clock_ticks_per_s() -> u64 {
    // SAFETY: sysconf has no preconditions.
    match unsafe { libc::sysconf(libc::_SC_CLK_TCK) } {
        n if n > 0 => n as u64,
        _ => 100,
    }
}

/// Each CPU's idle time so far (`/proc/stat`: idle plus iowait, in ticks). A CPU whose idle
/// time grew between two reads had nothing runnable at some point in between, so nothing
/// starved there.
pub fn idle_ticks(root: &SysRoot) -> Result<BTreeMap<usize, u64>> {
    let text = root.read_to_string("/proc/stat")?;
    Ok(parse_idle(&text))
}

/// The per-CPU lines of `/proc/stat`.
pub fn parse_idle(text: &str) -> BTreeMap<usize, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("cpu") else {
            // The CPU lines come first; the rest (intr, ctxt, ...) is long on big machines.
            if !out.is_empty() {
                break;
            }
            continue;
        };
        // "cpu " is the sum of every CPU; "cpuN " one CPU.
        if !rest.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let mut f = rest.split_whitespace();
        let Some(Ok(cpu)) = f.next().map(str::parse::<usize>) else {
            continue;
        };
        let v: Vec<u64> = f.map(|x| x.parse().unwrap_or(0)).collect();
        // user nice system idle iowait ...
        if v.len() >= 5 {
            out.insert(cpu, v[3] + v[4]);
        }
    }
    out
}

/// One thread, now: `Ok(None)` when it is gone.
pub fn read_seen(root: &SysRoot, pid: i32, tid: i32) -> Result<Option<Seen>> {
    let dir = format!("/proc/{pid}/task/{tid}");
    let st = match TaskStat::read_path(root, &format!("{dir}/stat")) {
        Ok(s) => s,
        Err(e) if crate::tasks::gone(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(Some(with_schedstat(root, &dir, pid, st)))
}

/// One thread, now, when it is runnable on one of `cpus` (its schedstat read only then):
/// `Some(None)` when it is not, `None` when it is gone.
pub fn read_if_runnable(root: &SysRoot, pid: i32, tid: i32, cpus: &CpuSet) -> Option<Option<Seen>> {
    let dir = format!("/proc/{pid}/task/{tid}");
    let raw = root.read(format!("{dir}/stat")).ok()?;
    if !quick_fields(&raw).is_some_and(|q| q.state == b'R' && cpus.contains(q.cpu)) {
        return Some(None);
    }
    let st = TaskStat::parse(&String::from_utf8_lossy(&raw)).ok()?;
    Some(Some(with_schedstat(root, &dir, pid, st)))
}

fn with_schedstat(root: &SysRoot, dir: &str, pid: i32, st: TaskStat) -> Seen {
    // Without CONFIG_SCHED_INFO there is no schedstat: the stat's ticks stand in.
    let (exec_ns, runs) = root
        .read_to_string(format!("{dir}/schedstat"))
        .ok()
        .and_then(|t| {
            let mut f = t.split_whitespace().map(|x| x.parse::<u64>().ok());
            let exec = f.next()??;
            let _delay = f.next()??;
            Some((exec, f.next()??))
        })
        .unwrap_or((st.cpu_ticks, 0));
    Seen {
        pid,
        tid: st.pid,
        starttime: st.starttime,
        comm: st.comm,
        flags: st.flags,
        state: st.state,
        cpu: st.processor,
        policy: st.policy,
        rt_priority: st.rt_priority,
        exec_ns,
        runs,
        cpu_ticks: st.cpu_ticks,
    }
}

/// What a tracefs instance that records `sched:sched_switch` on some CPUs wrote on each of
/// them so far (the noise ledger's instance), from the per-CPU `stats` files: their entries,
/// overrun, commit overrun, dropped and read events summed, which grows by one with every
/// event written, read by the ledger or not, kept or lost. A CPU whose count did not move
/// switched no task in between: what ran there before still runs. The files stay open; a
/// read is one pread(2) each, plus the instance's `tracing_on` and its `sched_switch` event's
/// `enable`. The kernel answers them from
/// its counters, under the buffer's reader lock, which the recorded CPU's writer never
/// takes: no IPI, nothing run on that CPU.
#[derive(Debug)]
pub struct EventCounts {
    dir: String,
    tracing_on: std::fs::File,
    /// `events/sched/sched_switch/enable`: a count stands for "no task switched in" only
    /// while the instance records the switches.
    switches: std::fs::File,
    cpus: Vec<(usize, std::fs::File)>,
}

impl EventCounts {
    /// The counts of the instance `dir` (its path below the root) for `cpus`, the CPUs it
    /// records; `None` when its `tracing_on` or its `sched_switch` event's `enable` cannot be
    /// opened. A CPU whose `stats` cannot be opened is left out (its count is never known).
    pub fn open(root: &SysRoot, dir: &str, cpus: &CpuSet) -> Option<EventCounts> {
        let tracing_on = std::fs::File::open(root.path(format!("{dir}/tracing_on"))).ok()?;
        let switches =
            std::fs::File::open(root.path(format!("{dir}/events/sched/sched_switch/enable")))
                .ok()?;
        let cpus = cpus
            .iter()
            .filter_map(|cpu| {
                let f = std::fs::File::open(root.path(format!("{dir}/per_cpu/cpu{cpu}/stats")));
                Some((cpu, f.ok()?))
            })
            .collect();
        Some(EventCounts {
            dir: dir.to_string(),
            tracing_on,
            switches,
            cpus,
        })
    }

    /// The instance's directory.
    pub fn dir(&self) -> &str {
        &self.dir
    }

    /// Each CPU's count now; none while the instance does not record task switches
    /// (`tracing_on` or the `sched_switch` event's `enable` is not 1), and none for a CPU
    /// whose `stats` cannot be read or parsed.
    pub fn read(&self) -> BTreeMap<usize, u64> {
        use std::os::unix::fs::FileExt;
        let mut out = BTreeMap::new();
        let mut buf = [0u8; 512];
        // "1", or "1*" for an event in soft mode: written either way.
        let on = |f: &std::fs::File, buf: &mut [u8]| matches!(f.read_at(buf, 0), Ok(n) if n > 0 && buf[0] == b'1');
        if !on(&self.tracing_on, &mut buf) || !on(&self.switches, &mut buf) {
            return out;
        }
        for (cpu, f) in &self.cpus {
            let Ok(n) = f.read_at(&mut buf, 0) else {
                continue;
            };
            if let Some(c) = std::str::from_utf8(&buf[..n]).ok().and_then(event_count) {
                out.insert(*cpu, c);
            }
        }
        out
    }
}

/// The events a per-CPU `stats` file of tracefs counts as written: entries (unread), overrun
/// (overwritten unread), commit overrun, dropped events and read events, summed. `None`
/// when one of them is missing or not a number.
pub fn event_count(stats: &str) -> Option<u64> {
    const KEYS: [&str; 5] = [
        "entries",
        "overrun",
        "commit overrun",
        "dropped events",
        "read events",
    ];
    let mut found = [None; 5];
    for line in stats.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        if let Some(i) = KEYS.iter().position(|k| *k == key.trim()) {
            found[i] = value.trim().parse::<u64>().ok();
        }
    }
    found
        .iter()
        .try_fold(0u64, |sum, v| Some(sum.wrapping_add((*v)?)))
}

/// What a walk over every thread found.
#[derive(Debug, Default)]
pub struct Walked {
    /// The threads runnable on one of the CPUs asked about.
    pub runnable: Vec<Seen>,
    /// The threads that live on the CPUs watched: their per-CPU kernel threads, and the
    /// threads whose affinity is inside them (pid, tid, the CPUs they may run on).
    pub residents: Vec<(i32, i32, CpuSet)>,
}

/// The CPUs a thread may run on: `sched_getaffinity` on the running system, the status
/// file's list on a tree. `None` when it is gone.
pub fn affinity(root: &SysRoot, pid: i32, tid: i32) -> Option<CpuSet> {
    if root.is_host() {
        crate::sched::get_affinity(tid).ok()
    } else {
        crate::tasks::read_thread(root, pid, tid)
            .ok()
            .flatten()
            .map(|t| t.affinity)
    }
}

/// Every thread that is runnable on one of `busy` now, and the per-CPU kernel threads of
/// `watched`: one stat read per thread of the system, and schedstat for the few runnable.
/// The guard does this rarely (its cost sets how rarely); between two walks it reads only
/// the threads it knows.
pub fn walk(root: &SysRoot, watched: &CpuSet, busy: &CpuSet) -> Result<Walked> {
    let mut out = Walked::default();
    for pid in crate::tasks::pids(root)? {
        let tids = match crate::procfs::thread_ids(root, pid) {
            Ok(t) => t,
            Err(_) => continue,
        };
        for tid in tids {
            let dir = format!("/proc/{pid}/task/{tid}");
            let Ok(raw) = root.read(format!("{dir}/stat")) else {
                continue;
            };
            // Most threads sleep and are no kernel thread of a watched CPU: the state, the
            // CPU and the flags are looked at before the whole line is parsed.
            let quick = quick_fields(&raw);
            if let Some(q) = quick.as_ref() {
                if q.flags & PF_KTHREAD == 0 {
                    // A user thread lives here when its affinity is inside the watched CPUs
                    // (a workload's threads, a task an operator pinned).
                    if let Some(a) =
                        affinity(root, pid, tid).filter(|a| !a.is_empty() && a.is_subset(watched))
                    {
                        out.residents.push((pid, tid, a));
                    }
                } else if let Some(cpu) = (q.flags & PF_NO_SETAFFINITY != 0)
                    .then(|| percpu_kthread_cpu(q.comm))
                    .flatten()
                    .filter(|c| watched.contains(*c))
                {
                    out.residents.push((pid, tid, CpuSet::from_iter([cpu])));
                }
            }
            if !quick.is_some_and(|q| q.state == b'R' && busy.contains(q.cpu)) {
                continue;
            }
            let Ok(st) = TaskStat::parse(&String::from_utf8_lossy(&raw)) else {
                continue;
            };
            out.runnable.push(with_schedstat(root, &dir, pid, st));
        }
    }
    Ok(out)
}

/// The fields a walk looks at first.
struct Quick<'a> {
    comm: &'a [u8],
    state: u8,
    flags: u64,
    cpu: usize,
}

fn quick_fields(stat: &[u8]) -> Option<Quick<'_>> {
    let open = stat.iter().position(|&b| b == b'(')?;
    let close = stat.iter().rposition(|&b| b == b')')?;
    let mut fields = stat
        .get(close + 1..)?
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty());
    let num = |f: Option<&[u8]>| -> Option<u64> { std::str::from_utf8(f?).ok()?.parse().ok() };
    let state = *fields.next()?.first()?;
    // Fields 4..8, then the flags (field 9).
    let flags = num(fields.nth(5))?;
    // The processor is field 39.
    let cpu = num(fields.nth(29))? as usize;
    Some(Quick {
        comm: stat.get(open + 1..close)?,
        state,
        flags,
        cpu,
    })
}

/// The CPU in a per-CPU kernel thread's name: `ksoftirqd/3`, `rcuc/3`, `kworker/3:1H`,
/// `kworker/3:0-mm_percpu_wq`; `None` for an unbound one (`kworker/u8:2`, `kworker/R-mm`).
pub fn percpu_kthread_cpu(comm: &[u8]) -> Option<usize> {
    let slash = comm.iter().position(|&b| b == b'/')?;
    let digits: &[u8] = {
        let rest = &comm[slash + 1..];
        let end = rest
            .iter()
            .position(|b| !b.is_ascii_digit())
            .unwrap_or(rest.len());
        if end < rest.len() && rest[end] != b':' {
            return None;
        }
        &rest[..end]
    };
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kinds' names are the `kind` label of isold's rescue metrics: fixed.
    #[test]
    fn each_kind_has_its_metrics_name() {
        assert_eq!(Kind::PerCpuKthread.as_str(), "percpu_kthread");
        assert_eq!(Kind::Kthread.as_str(), "kthread");
        assert_eq!(Kind::Task.as_str(), "task");
    }

    #[test]
    fn a_cpus_event_count_is_every_event_written_read_or_lost() {
        // As 6.1's tracing_stats_read prints it.
        let stats = "entries: 12\noverrun: 3\ncommit overrun: 0\nbytes: 860\noldest event ts:  8127.000110\nnow ts:  8140.335211\ndropped events: 1\nread events: 4021\n";
        assert_eq!(event_count(stats), Some(4037));
        // The ledger read five: entries became read events, the count stays.
        let read = stats
            .replace("entries: 12", "entries: 7")
            .replace("read events: 4021", "read events: 4026");
        assert_eq!(event_count(&read), Some(4037));
        assert_eq!(
            event_count(&stats.replace("read events: 4021\n", "")),
            None,
            "a kernel without the read count: unknown"
        );
        assert_eq!(
            event_count(&stats.replace("entries: 12", "entries: x")),
            None
        );
        assert_eq!(event_count(""), None);

        let t = tempfile::tempdir().unwrap();
        let root = SysRoot::new(t.path());
        let dir = "/sys/kernel/tracing/instances/isold";
        let put = |rel: &str, text: &str| {
            let p = root.path(format!("{dir}/{rel}"));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        put("tracing_on", "1\n");
        put("events/sched/sched_switch/enable", "1\n");
        put("per_cpu/cpu2/stats", stats);
        put(
            "per_cpu/cpu3/stats",
            &read.replace("overrun: 3", "overrun: 4"),
        );
        let c = EventCounts::open(&root, dir, &CpuSet::parse_list("2-4").unwrap()).unwrap();
        assert_eq!(c.dir(), dir);
        assert_eq!(
            c.read().into_iter().collect::<Vec<_>>(),
            [(2, 4037), (3, 4038)],
            "CPU 4 has no stats file: unknown"
        );
        put("events/sched/sched_switch/enable", "1*\n");
        assert_eq!(c.read().len(), 2, "soft mode records");
        put("events/sched/sched_switch/enable", "0\n");
        assert!(
            c.read().is_empty(),
            "task switches not recorded: nothing known"
        );
        put("events/sched/sched_switch/enable", "1\n");
        put("tracing_on", "0\n");
        assert!(c.read().is_empty(), "not recording: nothing known");
        std::fs::remove_file(root.path(format!("{dir}/tracing_on"))).unwrap();
        assert!(EventCounts::open(&root, dir, &CpuSet::parse_list("2").unwrap()).is_none());
        put("tracing_on", "1\n");
        std::fs::remove_file(root.path(format!("{dir}/events/sched/sched_switch/enable"))).unwrap();
        assert!(EventCounts::open(&root, dir, &CpuSet::parse_list("2").unwrap()).is_none());
    }

    #[test]
    fn a_walk_looks_at_state_flags_and_cpu_first() {
        let line = |state: &str, flags: u64, cpu: u32| {
            let mut f: Vec<String> = (3..=52).map(|n| n.to_string()).collect();
            f[0] = state.into();
            f[6] = flags.to_string();
            f[36] = cpu.to_string();
            format!("812 (a) b (c) {}\n", f.join(" ")).into_bytes()
        };
        let raw = line("R", 0x4208060, 3);
        let q = quick_fields(&raw).unwrap();
        assert_eq!(
            (q.state, q.flags, q.cpu, q.comm),
            (b'R', 0x4208060, 3, &b"a) b (c"[..])
        );
        let st = TaskStat::parse(&String::from_utf8(raw.clone()).unwrap()).unwrap();
        assert_eq!((st.flags, st.processor), (0x4208060, 3));
        assert!(quick_fields(b"812 (a").is_none());
        for (name, cpu) in [
            ("ksoftirqd/3", Some(3)),
            ("rcuc/12", Some(12)),
            ("kworker/3:1H", Some(3)),
            ("kworker/3:0-mm_percpu_wq", Some(3)),
            ("kworker/u8:2", None),
            ("kworker/R-mm_pe", None),
            ("kthreadd", None),
            ("idle_inject/3", Some(3)),
            ("cpuhp/3x", None),
        ] {
            assert_eq!(percpu_kthread_cpu(name.as_bytes()), cpu, "{name}");
        }
    }

    #[test]
    fn idle_time_per_cpu_from_proc_stat() {
        let text = "cpu  10 0 20 300 4 0 0 0 0 0\n\
                    cpu0 5 0 10 150 2 0 0 0 0 0\n\
                    cpu3 5 0 10 150 3 0 1 0 0 0\n\
                    intr 1 2 3\nctxt 99\n";
        let idle = parse_idle(text);
        assert_eq!(idle.len(), 2);
        assert_eq!(idle[&0], 152);
        assert_eq!(idle[&3], 153);
        // The CPU lines come first: the reading stops at the first line after them.
        let idle = parse_idle(&format!("{text}cpu7 1 0 1 70 0 0 0 0 0 0\n"));
        assert_eq!(idle.keys().copied().collect::<Vec<_>>(), [0, 3]);
    }

    /// A thread read whole: gone (no such directory) is `None`, another failure an error;
    /// read when runnable: on one of the CPUs asked and runnable, else `Some(None)`.
    #[test]
    fn a_thread_read_is_gone_failed_or_runnable_on_the_cpus_asked() {
        let t = tempfile::tempdir().unwrap();
        let root = SysRoot::new(t.path());
        let stat = |state: &str, cpu: u32| {
            let mut f: Vec<String> = (3..=52).map(|_| "0".to_string()).collect();
            f[0] = state.into();
            f[36] = cpu.to_string();
            format!("40 (kworker/3:1) {}\n", f.join(" "))
        };
        let dir = t.path().join("proc/40/task/40");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("stat"), stat("R", 3)).unwrap();
        std::fs::write(dir.join("schedstat"), "500 20 7\n").unwrap();
        let s = read_seen(&root, 40, 40).unwrap().unwrap();
        assert_eq!((s.state, s.cpu, s.exec_ns, s.runs), ('R', 3, 500, 7));
        assert_eq!(read_seen(&root, 41, 41).unwrap(), None, "gone");
        std::fs::create_dir_all(t.path().join("proc/42/task/42/stat")).unwrap();
        assert!(
            read_seen(&root, 42, 42).is_err(),
            "a stat that cannot be read"
        );
        let three = CpuSet::parse_list("3").unwrap();
        assert!(matches!(
            read_if_runnable(&root, 40, 40, &three),
            Some(Some(_))
        ));
        let two = CpuSet::parse_list("2").unwrap();
        assert_eq!(
            read_if_runnable(&root, 40, 40, &two),
            Some(None),
            "on another CPU"
        );
        std::fs::write(dir.join("stat"), stat("S", 3)).unwrap();
        assert_eq!(
            read_if_runnable(&root, 40, 40, &three),
            Some(None),
            "asleep"
        );
        assert_eq!(read_if_runnable(&root, 41, 41, &three), None, "gone");
    }

    fn seen(policy: u32, prio: u32, flags: u64) -> Seen {
        Seen {
            pid: 5,
            tid: 6,
            starttime: 1,
            comm: "w".into(),
            flags,
            state: 'R',
            cpu: 3,
            policy,
            rt_priority: prio,
            exec_ns: 10,
            runs: 2,
            cpu_ticks: 1,
        }
    }

    #[test]
    fn ranks_kinds_and_labels() {
        assert!(seen(1, 1, 0).rank() > seen(0, 0, 0).rank());
        assert!(seen(1, 2, 0).rank() > seen(2, 1, 0).rank());
        assert!(seen(6, 0, 0).rank() > seen(1, 99, 0).rank());
        assert!(seen(0, 0, 0).rank() > seen(5, 0, 0).rank());
        assert!(seen(1, 1, 0).is_realtime() && !seen(3, 0, 0).is_realtime());
        assert_eq!(seen(0, 0, 0x4208060).kind(), Kind::PerCpuKthread);
        assert_eq!(seen(0, 0, 0x208040).kind(), Kind::Kthread);
        assert_eq!(seen(0, 0, 0x400100).kind(), Kind::Task);
        assert_eq!(seen(0, 0, 0x208040).label(), "w (kernel thread 6)");
        assert_eq!(seen(0, 0, 0).label(), "w (pid 5, thread 6)");
        let a = seen(0, 0, 0);
        let mut b = a.clone();
        assert!(!b.ran_since(&a));
        b.runs += 1;
        assert!(b.ran_since(&a));
        let mut c = a.clone();
        c.exec_ns += 1;
        assert!(c.ran_since(&a));
        let mut d = a.clone();
        d.cpu_ticks += 1;
        assert!(d.ran_since(&a));
    }
}
