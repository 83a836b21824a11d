//! Recording in a tracefs instance of the ledger's own, and reading it without blocking.

use std::collections::BTreeMap;
use std::os::unix::fs::OpenOptionsExt;

use super::{
    thread_source, Cpu, Decoder, Interruption, Runner, Sums, Threads, EVENTS, NMI_EVENT, TLB_EVENT,
    VECTORS,
};
use crate::cpuset::CpuSet;
use crate::error::{Error, Result};
use crate::sysroot::SysRoot;

/// The tracefs directory with instances and the ledger's tracepoints, or why there is none.
pub fn find(root: &SysRoot) -> std::result::Result<String, crate::tracefs::Unavailable> {
    crate::tracefs::find(root, |dir| {
        EVENTS
            .iter()
            .find(|e| !root.exists(format!("{dir}/events/{e}")))
            .map(|e| format!("the kernel has no {e} tracepoint ({dir}/events/{e})"))
    })
}

/// The prefix of the ledger's tracefs instances: the daemon's is `isold-noise-<pidns>` (see
/// [`daemon_instance`]), a one-time measure's `isold-noise-<pidns>-<pid>` (see
/// [`instance_of`]), so that neither takes the other's, nor another pid namespace's.
pub const INSTANCE: &str = "isold-noise";

/// The instance of the daemon of this pid namespace.
pub fn daemon_instance() -> String {
    format!("{INSTANCE}-{}", crate::tracefs::own_pid_ns())
}

/// The instance of a one-time measure by process `pid` of this pid namespace.
pub fn instance_of(pid: u32) -> String {
    crate::tracefs::owned_name(&format!("{INSTANCE}-"), crate::tracefs::own_pid_ns(), pid)
}

/// Unix time less CLOCK_MONOTONIC now, seconds: what turns a time of the recording's
/// clock (`mono`) into Unix time.
pub fn unix_offset() -> f64 {
    let get = |c| {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: t is a valid timespec for the call to fill.
        unsafe { libc::clock_gettime(c, &mut t) };
        t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
    };
    get(libc::CLOCK_REALTIME) - get(libc::CLOCK_MONOTONIC)
}

/// A recording of the isolated CPUs' interruptions in a tracefs instance of its own
/// ([`INSTANCE`] for the daemon), read without a blocking reader: each CPU's `trace_pipe_raw` opened
/// O_NONBLOCK and read on the caller's timer from a housekeeping CPU, so the CPUs recorded
/// never wake a reader (the ring buffer's wake-up is an irq_work on the writing CPU).
/// Everything that interrupts every CPU (making the instance, enabling its events: static
/// keys patched on each) happens in [`Recorder::start`], before the workload should start.
#[derive(Debug)]
pub struct Recorder {
    dir: String,
    layout: crate::rawtrace::PageLayout,
    decoder: Decoder,
    cpus: Vec<(usize, std::fs::File, Cpu)>,
    /// Events the recorder did not know how to read (a page that did not parse).
    pub bad_pages: u64,
    /// Pages whose writer had overrun the reader (events lost before them).
    pub lost_pages: u64,
    /// The clock of the events' times: `mono` (CLOCK_MONOTONIC, which [`unix_offset`] turns
    /// into Unix time) where the kernel has it, else the kernel's default (`local`).
    pub clock: String,
    /// The instance existed and was taken over as it was (see [`Recorder::start`]).
    pub adopted: bool,
}

impl Recorder {
    /// Record on `cpus` in the instance `name` below `tracefs`: made when it does not exist,
    /// adopted as it is when it does (the daemon's, kept over a stop, a restart or a kill -9;
    /// [`Recorder::adopted`] says so). Only what differs from what the ledger needs is
    /// written: the CPUs recorded, the clock (set while the buffer is empty: setting it
    /// empties it), an event that is not enabled. Enabling or disabling an event patches
    /// kernel text, which interrupts every CPU: an instance adopted with its events enabled
    /// interrupts none. Each CPU's raw pipe is opened. The instance keeps the buffers the
    /// kernel made (a resize queues work on every CPU). One made here and not finished is
    /// removed again.
    pub fn start(root: &SysRoot, tracefs: &str, cpus: &CpuSet, name: &str) -> Result<Recorder> {
        let dir = format!("{tracefs}/instances/{name}");
        let adopted = root.exists(&dir);
        if !adopted {
            crate::tracefs::make_instance(root, tracefs, &dir, &[])?;
        }
        let made = (|| -> Result<Recorder> {
            let mask_file = format!("{dir}/tracing_cpumask");
            let recorded = root
                .read_to_string(&mask_file)
                .ok()
                .and_then(|t| CpuSet::parse_mask(t.trim()).ok());
            if recorded.as_ref() != Some(cpus) {
                root.write(&mask_file, cpus.to_mask_string())?;
            }
            // Times that can be told as Unix time ("when was the longest").
            let clocks = root
                .read_to_string(format!("{dir}/trace_clock"))
                .unwrap_or_default();
            let clock = if clocks
                .split_whitespace()
                .any(|c| c.trim_matches(['[', ']']) == "mono")
            {
                if !clocks.split_whitespace().any(|c| c == "[mono]") {
                    root.write(format!("{dir}/trace_clock"), "mono")?;
                }
                "mono".to_string()
            } else {
                "local".to_string()
            };
            let layout = match root.read_to_string(format!("{dir}/events/header_page")) {
                Ok(t) => crate::rawtrace::PageLayout::parse(&t).map_err(|reason| Error::Parse {
                    path: root.path(format!("{dir}/events/header_page")),
                    input: t.lines().next().unwrap_or_default().into(),
                    reason,
                })?,
                Err(_) => crate::rawtrace::PageLayout::default(),
            };
            let mut names: Vec<String> = EVENTS.iter().map(|e| e.to_string()).collect();
            names.push(NMI_EVENT.to_string());
            names.push(TLB_EVENT.to_string());
            for v in VECTORS {
                names.push(format!("irq_vectors/{v}_entry"));
                names.push(format!("irq_vectors/{v}_exit"));
            }
            let mut decoder = Decoder::default();
            for e in &names {
                if !root.exists(format!("{dir}/events/{e}")) {
                    if EVENTS.contains(&e.as_str()) {
                        return Err(Error::Parse {
                            path: root.path(format!("{dir}/events/{e}")),
                            input: String::new(),
                            reason: "the kernel has no such tracepoint".into(),
                        });
                    }
                    continue;
                }
                let format = crate::rawtrace::Format::read(root, &dir, e)?;
                decoder.learn(e, &format).map_err(|reason| Error::Parse {
                    path: root.path(format!("{dir}/events/{e}/format")),
                    input: format.name.clone(),
                    reason,
                })?;
                let enable = format!("{dir}/events/{e}/enable");
                // "1", or "1*"-like forms a kernel may add: enabled is what starts with 1.
                let on = root
                    .read_to_string(&enable)
                    .is_ok_and(|t| t.trim_start().starts_with('1'));
                if !on {
                    root.write(&enable, "1")?;
                }
            }
            let mut open = Vec::new();
            for cpu in cpus.iter() {
                let path = root.path(format!("{dir}/per_cpu/cpu{cpu}/trace_pipe_raw"));
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(&path)
                    .map_err(|source| Error::Read {
                        path: path.clone(),
                        source,
                    })?;
                open.push((cpu, f, Cpu::default()));
            }
            Ok(Recorder {
                dir: dir.clone(),
                layout,
                decoder,
                cpus: open,
                bad_pages: 0,
                lost_pages: 0,
                clock,
                adopted,
            })
        })();
        if made.is_err() && !adopted {
            let _ = root.write(format!("{dir}/events/enable"), "0");
            let _ = crate::tracefs::remove_instance(root, &dir);
        }
        made
    }

    /// The instance's directory.
    pub fn dir(&self) -> &str {
        &self.dir
    }

    /// Read what each CPU recorded since the last call, to the end of what is there (never
    /// waiting), and pass each interruption with its CPU to `out`.
    pub fn read(
        &mut self,
        threads: &dyn Threads,
        out: &mut impl FnMut(usize, Interruption),
    ) -> Result<usize> {
        use std::io::Read;
        let mut page = vec![0u8; 4096];
        let mut n = 0;
        for (cpu, file, state) in &mut self.cpus {
            loop {
                let got = match file.read(&mut page) {
                    Ok(0) => break,
                    Ok(got) => got,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(source) => {
                        return Err(Error::Read {
                            path: format!("{}/per_cpu/cpu{cpu}/trace_pipe_raw", self.dir).into(),
                            source,
                        })
                    }
                };
                let decoder = &self.decoder;
                let parsed = crate::rawtrace::parse_page(&page[..got], &self.layout, |ts, rec| {
                    if let Some(ev) = decoder.decode(rec) {
                        state.event(ts, &ev, threads, &mut |i| out(*cpu, i));
                        n += 1;
                    }
                });
                match parsed {
                    Ok(info) if info.missed => self.lost_pages += 1,
                    Ok(_) => {}
                    Err(_) => self.bad_pages += 1,
                }
            }
        }
        Ok(n)
    }

    /// The CPUs whose last task switch read went to the idle task: idle since, as long as
    /// nothing more is written there.
    pub fn idle_cpus(&self) -> CpuSet {
        self.cpus
            .iter()
            .filter(|(_, _, state)| state.idle())
            .map(|(cpu, ..)| *cpu)
            .collect()
    }

    /// Stop recording and remove the instance.
    pub fn stop(self, root: &SysRoot) -> Result<()> {
        drop(self.cpus);
        remove_recording(root, &self.dir)
    }

    /// Stop reading and leave the instance recording, its events enabled, for the next
    /// [`Recorder::start`] to adopt (a daemon's stop or restart: see
    /// [`crate::policy::state::Original::TraceInstance`]).
    pub fn close(self) {}
}

/// Disable the events of the instance `dir` and remove it (the kernel refuses while one of
/// its files is open: EBUSY).
pub fn remove_recording(root: &SysRoot, dir: &str) -> Result<()> {
    let _ = root.write(format!("{dir}/events/enable"), "0");
    crate::tracefs::remove_instance(root, dir)
}

/// The threads of the running system (or a tree) as the ledger tells them apart: the idle
/// task, the workload (as the audit has it: user threads inside the CPUs, or allow-listed),
/// and the rest by name, each read once (`/proc/<tid>`).
pub struct ProcThreads<'a> {
    root: &'a SysRoot,
    workloads: crate::audit::Workloads<'a>,
    seen: std::cell::RefCell<std::collections::HashMap<i32, Runner>>,
    /// The rank of each workload thread seen ([`Threads::rank`]).
    ranks: std::cell::RefCell<std::collections::HashMap<i32, u8>>,
    /// Threads left out (the observer's own): neither noise nor workload.
    pub ignore: std::collections::HashSet<i32>,
}

impl std::fmt::Debug for ProcThreads<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcThreads")
            .field("seen", &self.seen.borrow().len())
            .finish()
    }
}

impl<'a> ProcThreads<'a> {
    /// The threads under `root`, the workloads of `scope`.
    pub fn new(root: &'a SysRoot, scope: &'a crate::audit::Scope) -> Self {
        ProcThreads {
            root,
            workloads: crate::audit::Workloads::new(root, scope),
            seen: Default::default(),
            ranks: Default::default(),
            ignore: Default::default(),
        }
    }
}

impl Threads for ProcThreads<'_> {
    fn runner(&self, pid: i32, comm: &str) -> Runner {
        if pid == 0 || self.ignore.contains(&pid) {
            return Runner::Idle;
        }
        if let Some(r) = self.seen.borrow().get(&pid) {
            return r.clone();
        }
        // The event's pid is a thread id: /proc/<tid>/task/<tid> is that thread.
        let r = match crate::tasks::read_thread(self.root, pid, pid) {
            Ok(Some(t)) if self.workloads.is(&t) => {
                self.ranks.borrow_mut().insert(pid, workload_rank(&t));
                Runner::Workload
            }
            Ok(Some(t)) => {
                // Asked about a thread leaving the CPU, the event has no name for it.
                let comm = if comm.is_empty() {
                    t.comm.as_str()
                } else {
                    comm
                };
                Runner::Other(thread_source(t.pid, comm, t.is_kthread()))
            }
            // Gone already: by its name.
            _ => Runner::Other(thread_source(pid, comm, false)),
        };
        self.seen.borrow_mut().insert(pid, r.clone());
        r
    }

    fn rank(&self, pid: i32) -> u8 {
        self.ranks.borrow().get(&pid).copied().unwrap_or(0)
    }
}

/// What the user said of a workload thread: pinned to one CPU alone (taskset -c 3, chisol
/// -c 3, a vCPU pin) counts 2, a real-time policy (chrt, chisol -f) 1.
fn workload_rank(t: &crate::tasks::Thread) -> u8 {
    let pinned = u8::from(t.affinity.len() == 1) * 2;
    let rt = u8::from(matches!(t.policy, 1 | 2 | 6));
    pinned + rt
}

/// Record the interruptions of `cpus` for `window` (reading every `every`), with the
/// workloads of `scope`; this process and its threads are left out; `ready` is called once
/// the recording runs (the window starts then). The sums by CPU and what the recorder lost.
pub fn measure(
    root: &SysRoot,
    tracefs: &str,
    scope: &crate::audit::Scope,
    window: std::time::Duration,
    every: std::time::Duration,
    ready: impl FnOnce(),
) -> Result<(BTreeMap<usize, Sums>, Recorder)> {
    // Those of one-time measures of this pid namespace that were killed.
    crate::tracefs::remove_stale(root, tracefs, &format!("{INSTANCE}-"));
    let mut rec = Recorder::start(root, tracefs, &scope.cpus, &instance_of(std::process::id()))?;
    let mut threads = ProcThreads::new(root, scope);
    if root.is_host() {
        if let Ok(tids) = crate::procfs::thread_ids(root, std::process::id() as i32) {
            threads.ignore.extend(tids);
        }
    }
    let mut sums: BTreeMap<usize, Sums> = scope.cpus.iter().map(|c| (c, Sums::default())).collect();
    // What was recorded before the window (the events' enabling) is dropped.
    rec.read(&threads, &mut |_, _| {})?;
    ready();
    let end = std::time::Instant::now() + window;
    loop {
        let now = std::time::Instant::now();
        if now >= end {
            break;
        }
        std::thread::sleep(every.min(end - now));
        rec.read(&threads, &mut |cpu, i| {
            sums.entry(cpu).or_default().add(&i);
        })?;
    }
    Ok((sums, rec))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a tree: user threads inside CPUs 2-3 are the workload, ranked by what they were
    /// told (pinned to CPU 3 alone and SCHED_FIFO: 3; on 2-3, SCHED_OTHER: 0); a thread that
    /// may run elsewhere is noise, by its name.
    #[test]
    fn the_threads_of_a_tree_are_told_apart_and_ranked() {
        let dir = tempfile::tempdir().unwrap();
        for (tid, comm, cpus, rt) in [
            (100, "oslat", "3", "10 1"),
            (101, "sh", "2-3", "0 0"),
            (102, "cron", "0-3", "0 0"),
        ] {
            let t = dir.path().join(format!("proc/{tid}/task/{tid}"));
            std::fs::create_dir_all(&t).unwrap();
            std::fs::write(
                t.join("stat"),
                format!("{tid} ({comm}) R 1 {tid} {tid} 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 3 {rt} 0 0 0\n"),
            )
            .unwrap();
            std::fs::write(
                t.join("status"),
                format!("Name:\t{comm}\nCpus_allowed_list:\t{cpus}\n"),
            )
            .unwrap();
        }
        let root = SysRoot::new(dir.path());
        let scope = crate::audit::Scope::new("2-3".parse().unwrap(), "--cpus");
        let threads = ProcThreads::new(&root, &scope);
        assert_eq!(threads.runner(100, "oslat"), Runner::Workload);
        assert_eq!(threads.runner(101, "sh"), Runner::Workload);
        assert!(matches!(threads.runner(102, "cron"), Runner::Other(_)));
        assert_eq!(
            (threads.rank(100), threads.rank(101), threads.rank(102)),
            (3, 0, 0)
        );
        assert_eq!(threads.runner(0, "swapper/3"), Runner::Idle);
    }

    #[test]
    fn a_thread_pinned_alone_and_real_time_ranks_first() {
        let t = |affinity: &str, policy: u32| crate::tasks::Thread {
            pid: 100,
            tid: 100,
            comm: "oslat".into(),
            flags: 0,
            starttime: 0,
            affinity: affinity.parse().unwrap(),
            policy,
            rt_priority: 0,
            processor: 3,
            cpu_ticks: 0,
            switches: 0,
            state: 'R',
        };
        assert_eq!(workload_rank(&t("3", 1)), 3);
        assert_eq!(workload_rank(&t("3", 0)), 2);
        assert_eq!(workload_rank(&t("2-3", 2)), 1);
        assert_eq!(workload_rank(&t("2-3", 6)), 1);
        assert_eq!(workload_rank(&t("2-3", 0)), 0);
    }

    /// Pid 100 is the workload, 0 idle, kthreads are below 50.
    struct T;
    impl Threads for T {
        fn runner(&self, pid: i32, comm: &str) -> Runner {
            match pid {
                0 => Runner::Idle,
                100 => Runner::Workload,
                p => Runner::Other(thread_source(p, comm, p < 50)),
            }
        }
    }

    /// A CPU's raw pipe read to its end: the pages' records decoded and made interruptions,
    /// a page the writer overran counted.
    #[test]
    fn a_recorder_reads_each_cpus_pages_to_the_end() {
        let fmt = |name: &str, id: u16, fields: &str| {
            crate::rawtrace::Format::parse(&format!(
                "name: {name}\nID: {id}\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n{fields}"
            ))
            .unwrap()
        };
        let mut decoder = Decoder::default();
        decoder
            .learn(
                "irq/irq_handler_entry",
                &fmt(
                    "irq_handler_entry",
                    10,
                    "\tfield:int irq;\toffset:8;\tsize:4;\tsigned:1;\n\tfield:__data_loc char[] name;\toffset:12;\tsize:4;\tsigned:1;\n",
                ),
            )
            .unwrap();
        decoder
            .learn(
                "irq/irq_handler_exit",
                &fmt(
                    "irq_handler_exit",
                    11,
                    "\tfield:int irq;\toffset:8;\tsize:4;\tsigned:1;\n",
                ),
            )
            .unwrap();
        let rec = |id: u16, irq: i32| {
            let mut r = vec![0u8; 24];
            r[0..2].copy_from_slice(&id.to_le_bytes());
            r[8..12].copy_from_slice(&irq.to_le_bytes());
            r[12..16].copy_from_slice(&(16u32 | (6 << 16)).to_le_bytes());
            r[16..22].copy_from_slice(b"ttyS0\0");
            r
        };
        let page = |ts: u64, flags: u64, recs: &[(u32, Vec<u8>)]| {
            let mut data = Vec::new();
            for (delta, r) in recs {
                data.extend_from_slice(&((r.len() as u32 / 4) | (delta << 5)).to_le_bytes());
                data.extend_from_slice(r);
            }
            let mut p = ts.to_le_bytes().to_vec();
            p.extend_from_slice(&(data.len() as u64 | flags).to_le_bytes());
            p.extend_from_slice(&data);
            p.resize(4096, 0);
            p
        };
        let dir = tempfile::tempdir().unwrap();
        let pipe = dir.path().join("trace_pipe_raw");
        let mut bytes = page(1_000, 0, &[(0, rec(10, 4)), (7_000, rec(11, 4))]);
        bytes.extend(page(
            50_000,
            1 << 31,
            &[(0, rec(10, 4)), (25_000, rec(11, 4))],
        ));
        std::fs::write(&pipe, bytes).unwrap();
        let mut r = Recorder {
            dir: "/sys/kernel/tracing/instances/isold-noise".into(),
            layout: crate::rawtrace::PageLayout::default(),
            decoder,
            cpus: vec![(3, std::fs::File::open(&pipe).unwrap(), Cpu::default())],
            bad_pages: 0,
            lost_pages: 0,
            clock: "mono".into(),
            adopted: false,
        };
        let mut got = Vec::new();
        let n = r
            .read(&T, &mut |cpu, i| {
                got.push((cpu, i.source.name, i.start_ns, i.net_ns))
            })
            .unwrap();
        assert_eq!(n, 4);
        assert_eq!(
            got,
            [
                (3, "IRQ 4 ttyS0".to_string(), 1_000, 7_000),
                (3, "IRQ 4 ttyS0".to_string(), 50_000, 25_000)
            ]
        );
        assert_eq!((r.lost_pages, r.bad_pages), (1, 0));
        assert_eq!(r.read(&T, &mut |_, _| {}).unwrap(), 0, "read to the end");
    }
}
