//! The kernel's own reason a nohz_full CPU's tick did not stop: the `timer:tick_stop`
//! tracepoint (CONFIG_NO_HZ_FULL). Each time a nohz_full CPU tries to stop its tick, the
//! kernel records `success=1 dependency=NONE`, or `success=0` and the first dependency that
//! keeps the tick (kernel/time/tick-sched.c, `check_tick_dependency`): POSIX_TIMER,
//! PERF_EVENTS, SCHED, CLOCK_UNSTABLE, RCU or RCU_EXP. The format is the same on 6.1, 6.12
//! and 7.2 (libtaskisol/tests/fixtures/tick_stop holds a trace of each).
//!
//! [`Recording::start`] records it in a tracefs instance of its own
//! (`instances/isold-audit-<pidns>-<pid>`), never in the global buffer: whatever else traces on the
//! machine is not touched, and [`Recording::finish`] removes the instance.

use std::collections::{BTreeMap, BTreeSet};

use crate::cpuset::CpuSet;
use crate::error::Result;
use crate::sysroot::SysRoot;
use crate::tracefs::{make_instance, remove_instance};

/// The tracepoint's directory below a tracefs instance.
pub const EVENT: &str = "events/timer/tick_stop";

/// Instances this module makes are named with this and the process id.
pub const INSTANCE_PREFIX: &str = "isold-audit-";

/// The files of a new instance that a recording uses. A captured tree has no kernel to make
/// them on mkdir: it gets a copy of its top-level instance's (the tree's `trace` stands for
/// what the kernel recorded during the window).
const INSTANCE_FILES: [&str; 4] = [
    "buffer_size_kb",
    "tracing_cpumask",
    "events/timer/tick_stop/enable",
    "trace",
];

/// What one failed stop dependency did on one CPU.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Failed {
    /// How many times the tick could not stop for it.
    pub count: u64,
    /// The tasks that were running when it did not (`<idle>` is 0).
    pub pids: BTreeSet<i32>,
}

/// What the tracepoint recorded on one CPU.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuStops {
    /// Times the tick stopped (`success=1`).
    pub stopped: u64,
    /// Times it did not, by dependency (`POSIX_TIMER`, ...; an unknown bit as the kernel
    /// prints it, `0x40`).
    pub failed: BTreeMap<String, Failed>,
}

/// A whole recording.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    /// By CPU.
    pub per_cpu: BTreeMap<usize, CpuStops>,
    /// Events the buffer lost (overwritten when it was full): the counts are of the rest.
    pub lost: u64,
}

/// Parse the `trace` file of an instance where only tick_stop is enabled.
///
/// An event: `<comm>-<pid> [<cpu>] <flags> <timestamp>: tick_stop: success=<0|1>
/// dependency=<NAME>`; the comm may hold spaces and is `<...>` when the kernel no longer
/// knows it. `CPU:<n> [LOST <k> EVENTS]` lines and the header's
/// `entries-in-buffer/entries-written` say what was lost.
pub fn parse_trace(text: &str) -> std::result::Result<Trace, String> {
    let mut out = Trace::default();
    for line in text.lines() {
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        if let Some(c) = t.strip_prefix('#') {
            if let Some(v) = c.trim().strip_prefix("entries-in-buffer/entries-written:") {
                let counts = v.split_whitespace().next().unwrap_or("");
                let bad = || format!("not a count of entries: {line:?}");
                let (kept, written) = counts.split_once('/').ok_or_else(bad)?;
                let kept: u64 = kept.parse().map_err(|_| bad())?;
                let written: u64 = written.parse().map_err(|_| bad())?;
                out.lost += written.saturating_sub(kept);
            }
            continue;
        }
        if t.starts_with("CPU:") && t.contains("[LOST ") {
            // Already counted in the header's entries-written.
            continue;
        }
        let bad = || format!("not a tick_stop event: {line:?}");
        let (head, fields) = t.split_once(": tick_stop: ").ok_or_else(bad)?;
        let mut success = None;
        let mut dependency = None;
        for f in fields.split_whitespace() {
            match f.split_once('=') {
                Some(("success", v)) => success = Some(v),
                Some(("dependency", v)) => dependency = Some(v),
                _ => return Err(bad()),
            }
        }
        let (Some(success), Some(dependency)) = (success, dependency) else {
            return Err(bad());
        };
        // From the right: the timestamp, the flags (absent with the irq-info option off),
        // then [cpu]; what precedes that is <comm>-<pid>.
        let words: Vec<&str> = head.split_whitespace().collect();
        let at = words
            .iter()
            .rev()
            .take(3)
            .position(|w| w.starts_with('[') && w.ends_with(']'))
            .map(|i| words.len() - 1 - i)
            .ok_or_else(bad)?;
        let cpu: usize = words[at][1..words[at].len() - 1]
            .parse()
            .map_err(|_| bad())?;
        let task = words[..at].join(" ");
        let pid: i32 = task
            .rsplit_once('-')
            .and_then(|(_, p)| p.parse().ok())
            .ok_or_else(bad)?;
        let c = out.per_cpu.entry(cpu).or_default();
        match success {
            "1" => c.stopped += 1,
            "0" => {
                let f = c.failed.entry(dependency.to_string()).or_default();
                f.count += 1;
                f.pids.insert(pid);
            }
            _ => return Err(bad()),
        }
    }
    Ok(out)
}

/// What removes a dependency that keeps the tick, in the kernel's words; `cpus` are the
/// audited CPUs (for boot arguments).
pub fn fix(dependency: &str, cpus: &str) -> String {
    match dependency {
        "POSIX_TIMER" => "a task here runs under a CPU-time limit or timer: RLIMIT_CPU (ulimit -t, prlimit --cpu, systemd LimitCPU=), setitimer ITIMER_PROF or ITIMER_VIRTUAL, or a POSIX timer on a CPU-time clock; run the workload without it (ulimit -t unlimited)".into(),
        "PERF_EVENTS" => "perf events count on this CPU (the NMI watchdog, perf stat or record, a profiler): sysctl kernel.nmi_watchdog = 0 (isold preset), and no profiler on the CPU".into(),
        "SCHED" => "more than one task was runnable here (or a SCHED_RR task shared it, or a SCHED_DEADLINE task ran): leave the workload alone on the CPU (isold item tasks)".into(),
        "CLOCK_UNSTABLE" => "the kernel marked the TSC unstable and keeps the tick for the clock: boot argument tsc=reliable where the TSC is known good (virtual machines), or a stable clocksource".into(),
        "RCU" => format!("RCU needs the CPU for a grace period or its callbacks: boot argument rcu_nocbs={cpus}, and no system calls in the workload's loop"),
        "RCU_EXP" => format!("an expedited RCU grace period waits for the CPU: boot argument rcu_nocbs={cpus}; rcupdate.rcu_normal=1 turns expedited grace periods into normal ones"),
        other => format!("a dependency isold does not know ({other}): see the kernel's include/linux/tick.h"),
    }
}

/// The tracefs directory with the tick_stop tracepoint and instances, or why there is none.
pub fn find(root: &SysRoot) -> std::result::Result<String, crate::tracefs::Unavailable> {
    crate::tracefs::find(root, |dir| {
        (!root.exists(format!("{dir}/{EVENT}"))).then(|| {
            format!("the kernel has no tick_stop tracepoint ({dir}/{EVENT}: CONFIG_NO_HZ_FULL)")
        })
    })
}

/// A tick_stop recording in progress, in its own tracefs instance.
#[derive(Debug)]
pub struct Recording {
    /// The instance's directory.
    dir: String,
}

impl Recording {
    /// Make the instance `<tracefs>/instances/isold-audit-<pidns>-<pid>` (first removing
    /// those that earlier audits of this pid namespace, killed mid-window, left behind),
    /// record on `cpus` only, and enable tick_stop there. Its buffers stay as the kernel made
    /// them (see the body).
    pub fn start(root: &SysRoot, tracefs: &str, cpus: &CpuSet) -> Result<Self> {
        crate::tracefs::remove_stale(root, tracefs, INSTANCE_PREFIX);
        let dir = format!(
            "{tracefs}/instances/{}",
            crate::tracefs::owned_name(
                INSTANCE_PREFIX,
                crate::tracefs::own_pid_ns(),
                std::process::id()
            )
        );
        make_instance(root, tracefs, &dir, &INSTANCE_FILES)?;
        let rec = Recording { dir };
        // The instance keeps the buffers the kernel made it with: resizing them queues work
        // on every CPU (ring_buffer_resize), and on an isolated CPU whose SCHED_FIFO
        // workload never yields that kworker waits runnable, and keeps the very tick the
        // audit looks at (seen on 7.2-rt: 233/s, dependency SCHED, the workload alone
        // otherwise). The default (1408 KB a CPU, 20 bytes an event) holds a 1000 Hz
        // tick's failed stops for more than a minute.
        let setup = || -> Result<()> {
            root.write(
                format!("{}/tracing_cpumask", rec.dir),
                cpus.to_mask_string(),
            )?;
            root.write(format!("{}/{EVENT}/enable", rec.dir), "1")
        };
        match setup() {
            Ok(()) => Ok(rec),
            Err(e) => {
                let _ = remove_instance(root, &rec.dir);
                Err(e)
            }
        }
    }

    /// The instance's directory.
    pub fn dir(&self) -> &str {
        &self.dir
    }

    /// Stop recording, read what was recorded and remove the instance (also when reading
    /// fails).
    pub fn finish(self, root: &SysRoot) -> Result<Trace> {
        let _ = root.write(format!("{}/{EVENT}/enable", self.dir), "0");
        let trace = root.read_parsed(format!("{}/trace", self.dir), parse_trace);
        let gone = remove_instance(root, &self.dir);
        let trace = trace?;
        gone?;
        Ok(trace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/tick_stop")
            .join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn counts(c: &CpuStops) -> Vec<(&str, u64)> {
        c.failed
            .iter()
            .map(|(d, f)| (d.as_str(), f.count))
            .collect()
    }

    /// A trace of each kernel: a busy loop under `ulimit -t` on nohz_full CPU 3 for a second
    /// (POSIX_TIMER, its pid only), two busy loops there for a second (SCHED), one alone
    /// (stopped); CPU 1's idle stops are there too.
    #[test]
    fn real_traces_of_each_kernel_count_by_cpu_and_dependency() {
        for (name, posix_pid, posix, sched, stopped3, stopped1) in [
            ("debian-6.1.trace", 125, 253, 256, 1, 13),
            ("debian-6.12-rt.trace", 203, 256, 256, 4, 24),
            ("debian-7.2.trace", 141, 239, 675, 2, 64),
            ("debian-7.2-rt.trace", 170, 173, 246, 5, 0),
        ] {
            let t = parse_trace(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            let c3 = &t.per_cpu[&3];
            assert_eq!(
                counts(c3),
                [("POSIX_TIMER", posix), ("SCHED", sched)],
                "{name}"
            );
            assert_eq!(
                c3.failed["POSIX_TIMER"].pids,
                BTreeSet::from([posix_pid]),
                "{name}"
            );
            assert!(c3.failed["SCHED"].pids.len() >= 2, "{name}");
            assert_eq!(c3.stopped, stopped3, "{name}");
            assert_eq!(
                t.per_cpu.get(&1).map_or(0, |c| c.stopped),
                stopped1,
                "{name}"
            );
            assert!(
                t.per_cpu.get(&1).is_none_or(|c| c.failed.is_empty()),
                "{name}: an idle CPU without nohz_full never fails to stop"
            );
            assert_eq!(t.lost, 0, "{name}");
        }
        // 7.2's SCHED on CPU 3 also came from the idle task and a short-lived exe.
        let t = parse_trace(&fixture("debian-7.2.trace")).unwrap();
        assert!(t.per_cpu[&3].failed["SCHED"].pids.contains(&0));
    }

    /// A comm the kernel no longer knows (`<...>`, seen on 7.2), one with spaces or dashes,
    /// no flags column, an unknown dependency bit, and what a full buffer lost.
    #[test]
    fn odd_lines_and_losses() {
        let t = parse_trace(
            "# entries-in-buffer/entries-written: 3/10   #P:4\n\
             \x20          <...>-150     [003] d..1.     9.490996: tick_stop: success=0 dependency=POSIX_TIMER\n\
             \x20 Web Content-a-77     [002] 9.5: tick_stop: success=0 dependency=0x40\n\
             CPU:2 [LOST 7 EVENTS]\n\
             \x20     <idle>-0       [002] d..2.    9.6: tick_stop: success=1 dependency=NONE\n",
        )
        .unwrap();
        assert_eq!(t.lost, 7);
        assert_eq!(counts(&t.per_cpu[&3]), [("POSIX_TIMER", 1)]);
        assert_eq!(
            t.per_cpu[&3].failed["POSIX_TIMER"].pids,
            BTreeSet::from([150])
        );
        assert_eq!(counts(&t.per_cpu[&2]), [("0x40", 1)]);
        assert_eq!(t.per_cpu[&2].failed["0x40"].pids, BTreeSet::from([77]));
        assert_eq!(t.per_cpu[&2].stopped, 1);
        for bad in [
            "sh-1 [003] d.... 1.0: tick_stop: success=2 dependency=SCHED",
            "sh-1 [003] d.... 1.0: tick_stop: success=0",
            "sh-1 [003] d.... 1.0: tick_stop: success=0 dependency=SCHED extra",
            "sh-1 [x] d.... 1.0: tick_stop: success=0 dependency=SCHED",
            "sh [003] d.... 1.0: tick_stop: success=0 dependency=SCHED",
            "sh-1 003 d.... 1.0: tick_stop: success=0 dependency=SCHED",
            "sh-1 [003] d.... 1.0: hrtimer_start: hrtimer=0x0",
            "# entries-in-buffer/entries-written: x/3",
        ] {
            assert!(parse_trace(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_dependency_has_its_own_fix() {
        let deps = [
            "POSIX_TIMER",
            "PERF_EVENTS",
            "SCHED",
            "CLOCK_UNSTABLE",
            "RCU",
            "RCU_EXP",
        ];
        let fixes: BTreeSet<String> = deps.iter().map(|d| fix(d, "2-3")).collect();
        assert_eq!(fixes.len(), deps.len());
        assert!(fix("POSIX_TIMER", "2-3").contains("ulimit -t"));
        assert!(fix("PERF_EVENTS", "2-3").contains("kernel.nmi_watchdog = 0"));
        assert!(fix("SCHED", "2-3").contains("isold item tasks"));
        assert!(fix("CLOCK_UNSTABLE", "2-3").contains("tsc=reliable"));
        assert!(fix("RCU", "2-3").contains("rcu_nocbs=2-3"));
        assert!(fix("RCU_EXP", "2-3").contains("rcu_nocbs=2-3"));
        assert!(fix("0x40", "2-3").contains("(0x40)"));
    }

    /// A tracefs tree: the top level's files stand for what the kernel gives a new instance.
    fn tracefs(trace: &str) -> (tempfile::TempDir, SysRoot) {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("sys/kernel/tracing");
        std::fs::create_dir_all(t.join(EVENT)).unwrap();
        std::fs::create_dir_all(t.join("instances")).unwrap();
        std::fs::write(t.join("available_events"), "timer:tick_stop\n").unwrap();
        std::fs::write(t.join(EVENT).join("enable"), "0\n").unwrap();
        std::fs::write(t.join("buffer_size_kb"), "1410\n").unwrap();
        std::fs::write(t.join("tracing_cpumask"), "f\n").unwrap();
        std::fs::write(t.join("trace"), trace).unwrap();
        let root = SysRoot::new(dir.path());
        (dir, root)
    }

    /// The recording is made in its own instance, on the audited CPUs, with a buffer for
    /// the window; the global tracefs files are never written; the instance is gone after,
    /// also when its trace does not parse; instances of dead audits are removed first.
    #[test]
    fn a_recording_lives_in_its_own_instance() {
        let (dir, root) = tracefs(&fixture("debian-6.12-rt.trace"));
        let t = dir.path().join("sys/kernel/tracing");
        let d = find(&root).unwrap();
        assert_eq!(d, "/sys/kernel/tracing");
        // A dead audit's instance (no /proc/<pid>), and another program's.
        let ns = crate::tracefs::own_pid_ns();
        let dead = crate::tracefs::owned_name(INSTANCE_PREFIX, ns, 999_999);
        std::fs::create_dir_all(t.join("instances").join(&dead).join("events")).unwrap();
        std::fs::create_dir_all(t.join("instances/mine")).unwrap();
        let rec = Recording::start(&root, &d, &"3".parse().unwrap()).unwrap();
        let inst = root.path(rec.dir());
        assert_eq!(
            rec.dir(),
            format!(
                "/sys/kernel/tracing/instances/isold-audit-{ns}-{}",
                std::process::id()
            )
        );
        let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap();
        assert_eq!(read(&inst.join(EVENT).join("enable")), "1");
        assert_eq!(read(&inst.join("tracing_cpumask")), "8");
        // Never resized: a resize queues work on every CPU, the isolated ones too.
        assert_eq!(read(&inst.join("buffer_size_kb")), "1410\n");
        assert!(!t.join("instances").join(&dead).exists());
        assert!(t.join("instances/mine").exists());
        let got = rec.finish(&root).unwrap();
        assert_eq!(
            counts(&got.per_cpu[&3]),
            [("POSIX_TIMER", 256), ("SCHED", 256)]
        );
        assert!(!inst.exists());
        for (f, v) in [
            ("buffer_size_kb", "1410\n"),
            ("tracing_cpumask", "f\n"),
            ("events/timer/tick_stop/enable", "0\n"),
        ] {
            assert_eq!(read(&t.join(f)), v, "{f}");
        }
        std::fs::write(t.join("trace"), "garbage\n").unwrap();
        let rec = Recording::start(&root, &d, &"3".parse().unwrap()).unwrap();
        let inst = root.path(rec.dir());
        let e = rec.finish(&root).unwrap_err();
        assert!(e.to_string().contains("not a tick_stop event"), "{e}");
        assert!(!inst.exists());
    }

    #[test]
    fn what_is_missing_is_said() {
        let (dir, root) = tracefs("");
        let t = dir.path().join("sys/kernel/tracing");
        std::fs::remove_dir_all(t.join("instances")).unwrap();
        assert_eq!(
            find(&root).unwrap_err().to_string(),
            "tracefs at /sys/kernel/tracing has no instances directory"
        );
        std::fs::remove_dir_all(t.join("events")).unwrap();
        assert_eq!(
            find(&root).unwrap_err().to_string(),
            "the kernel has no tick_stop tracepoint (/sys/kernel/tracing/events/timer/tick_stop: CONFIG_NO_HZ_FULL)"
        );
        let empty = tempfile::tempdir().unwrap();
        let e = find(&SysRoot::new(empty.path())).unwrap_err();
        assert!(
            matches!(e, crate::tracefs::Unavailable::NotMounted),
            "{e:?}"
        );
        assert!(e.to_string().starts_with("tracefs is not mounted"));
        // An instance that cannot be made is an error, and nothing is left.
        let (dir, root) = tracefs("");
        let t = dir.path().join("sys/kernel/tracing");
        std::fs::remove_file(t.join("tracing_cpumask")).unwrap();
        let e = Recording::start(&root, "/sys/kernel/tracing", &"3".parse().unwrap()).unwrap_err();
        assert!(e.to_string().contains("tracing_cpumask"), "{e}");
        assert_eq!(std::fs::read_dir(t.join("instances")).unwrap().count(), 0);
    }
}
