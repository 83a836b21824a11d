//! The kernel's osnoise tracer (CONFIG_OSNOISE_TRACER; Debian's -rt kernels have it): a
//! measuring thread on each chosen CPU reads the time in a loop for `runtime_us` of every
//! `period_us` and reports, per period, the noise it saw, the longest single noise, and how
//! many NMIs, IRQs, softirqs and threads interfered (see the kernel's
//! Documentation/trace/osnoise-tracer.rst).
//!
//! [`Run::start`] saves what it changes in tracefs (the current tracer and `osnoise/cpus`),
//! starts the tracer on the CPUs, and [`Run::finish`] reads the trace and puts both back, also
//! when reading fails. The measuring thread runs at SCHED_OTHER: on a CPU whose workload is a
//! SCHED_FIFO busy loop it never runs and reports nothing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::error::{Error, Result};
use crate::sysroot::SysRoot;

pub use crate::tracefs::TRACEFS;

/// What the tracer measured on one CPU during the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuNoise {
    /// Periods reported.
    pub periods: u64,
    /// Time the measuring thread ran, microseconds.
    pub runtime_us: u64,
    /// Noise seen in that time, microseconds.
    pub noise_us: u64,
    /// The longest single noise, microseconds.
    pub max_single_us: u64,
    /// Noise with no interference the kernel saw: hardware (SMIs and the like; a hypervisor
    /// in a virtual machine).
    pub hw: u64,
    /// NMIs.
    pub nmi: u64,
    /// IRQs.
    pub irq: u64,
    /// Softirqs.
    pub softirq: u64,
    /// Threads.
    pub thread: u64,
}

/// Sum the per-period lines of the osnoise tracer's `trace` by CPU.
///
/// A line: `<task>-<pid> [<cpu>] <flags> <timestamp>: <runtime> <noise> <% available>
/// <max single> <hw> <nmi> <irq> <sirq> <thread>`; comment lines start with `#`.
pub fn parse_trace(text: &str) -> std::result::Result<BTreeMap<usize, CpuNoise>, String> {
    let mut out: BTreeMap<usize, CpuNoise> = BTreeMap::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let bad = || format!("not an osnoise sample: {line:?}");
        let open = t.find('[').ok_or_else(bad)?;
        let close = open + t[open..].find(']').ok_or_else(bad)?;
        let cpu: usize = t[open + 1..close].trim().parse().map_err(|_| bad())?;
        let mut words = t[close + 1..].split_whitespace();
        // Flags, then the timestamp ending in ':'.
        words.by_ref().find(|w| w.ends_with(':')).ok_or_else(bad)?;
        let nums: Vec<&str> = words.collect();
        if nums.len() != 9 {
            return Err(bad());
        }
        let n = |i: usize| nums[i].parse::<u64>().map_err(|_| bad());
        nums[2].parse::<f64>().map_err(|_| bad())?;
        let e = out.entry(cpu).or_default();
        e.periods += 1;
        e.runtime_us += n(0)?;
        e.noise_us += n(1)?;
        e.max_single_us = e.max_single_us.max(n(3)?);
        e.hw += n(4)?;
        e.nmi += n(5)?;
        e.irq += n(6)?;
        e.softirq += n(7)?;
        e.thread += n(8)?;
    }
    Ok(out)
}

/// The tracefs directory with the osnoise tracer, or why there is none.
pub fn find(root: &SysRoot) -> std::result::Result<String, crate::tracefs::Unavailable> {
    use crate::tracefs::Unavailable;
    let Some(dir) = TRACEFS
        .iter()
        .find(|d| root.exists(format!("{d}/available_tracers")))
    else {
        return Err(Unavailable::NotMounted);
    };
    let tracers = root.read_to_string(format!("{dir}/available_tracers"))?;
    if tracers.split_whitespace().any(|t| t == "osnoise") {
        Ok(dir.to_string())
    } else {
        Err(Unavailable::Lacks {
            what: "the kernel has no osnoise tracer (CONFIG_OSNOISE_TRACER)".into(),
        })
    }
}

/// A running osnoise measurement, with what it changed.
#[derive(Debug)]
pub struct Run {
    dir: String,
    tracer: String,
    cpus: String,
}

impl Run {
    /// Start the tracer on `cpus` in the tracefs `dir` (from [`find`]), after saving the
    /// current tracer and `osnoise/cpus`.
    pub fn start(root: &SysRoot, dir: &str, cpus: &CpuSet) -> Result<Run> {
        let run = Run {
            dir: dir.to_string(),
            tracer: read_whole(root, &format!("{dir}/current_tracer"))?,
            cpus: read_whole(root, &format!("{dir}/osnoise/cpus"))?,
        };
        if run.tracer != "nop" {
            return Err(Error::Invalid(format!(
                "{dir}/current_tracer is {:?}: another tracer is in use; not taking it over",
                run.tracer
            )));
        }
        root.write(format!("{dir}/osnoise/cpus"), cpus.to_string())?;
        if let Err(e) = root.write(format!("{dir}/current_tracer"), "osnoise") {
            let _ = run.put_back(root);
            return Err(e);
        }
        Ok(run)
    }

    /// Read what the tracer measured, then put the tracer and its CPUs back.
    pub fn finish(self, root: &SysRoot) -> Result<BTreeMap<usize, CpuNoise>> {
        let trace = root.read_parsed(format!("{}/trace", self.dir), parse_trace);
        let back = self.put_back(root);
        let trace = trace?;
        back?;
        Ok(trace)
    }

    fn put_back(&self, root: &SysRoot) -> Result<()> {
        let tracer = root.write(format!("{}/current_tracer", self.dir), &self.tracer);
        let cpus = root.write(format!("{}/osnoise/cpus", self.dir), &self.cpus);
        tracer.and(cpus)
    }
}

/// Read a tracefs value in reads of 64 KiB, without the trailing newline. `osnoise/cpus`
/// answers EINVAL to any read whose count is not larger than its whole text, also at the end
/// of the file, which the small reads of `read_to_string` can be.
fn read_whole(root: &SysRoot, abs: &str) -> Result<String> {
    use std::io::Read;
    let path = root.path(abs);
    let err = |source| Error::Read {
        path: path.clone(),
        source,
    };
    let mut f = std::fs::File::open(&path).map_err(err)?;
    let mut buf = vec![0u8; 65536];
    let mut text = Vec::new();
    loop {
        let n = f.read(&mut buf).map_err(err)?;
        if n == 0 {
            break;
        }
        text.extend_from_slice(&buf[..n]);
    }
    let mut s = String::from_utf8_lossy(&text).into_owned();
    while s.ends_with('\n') {
        s.pop();
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's format (6.12), header included.
    const TRACE: &str = "\
# tracer: osnoise
#
#                                _-------=> irqs-off
#                               / _------=> need-resched
#                              | / _-----=> need-resched-lazy
#                              || / _----=> hardirq/softirq
#                              ||| / _---=> preempt-depth
#                              |||| / _--=> migrate-disable
#                              ||||| /     delay
#                              ||||||               MAX
#                              |||||| /             SINGLE      Interference counters:
#                              |||||||              RUNTIME      NOISE  %% OF CPU  NOISE    +-----------------------------+
#           TASK-PID      CPU# |||||||   TIMESTAMP    IN US       IN US  AVAILABLE  IN US     HW    NMI    IRQ   SIRQ THREAD
#              | |         |   |||||||      |           |             |    |            |      |      |      |      |      |
      osnoise/2-301     [002] .......   120.001005: 1000000        190  99.98100       9      0      0   1007      0      5
      osnoise/3-302     [003] .......   120.001102: 1000000         40  99.99600      12      1      0    251      2      0
      osnoise/2-301     [002] .......   121.001005: 1000000         10  99.99900      31      0      0    250      0      1
";

    #[test]
    fn samples_are_summed_by_cpu() {
        let t = parse_trace(TRACE).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(
            t[&2],
            CpuNoise {
                periods: 2,
                runtime_us: 2_000_000,
                noise_us: 200,
                max_single_us: 31,
                hw: 0,
                nmi: 0,
                irq: 1257,
                softirq: 0,
                thread: 6,
            }
        );
        assert_eq!(
            (t[&3].periods, t[&3].max_single_us, t[&3].hw, t[&3].softirq),
            (1, 12, 1, 2)
        );
        assert_eq!(parse_trace("# only a header\n").unwrap().len(), 0);
        for bad in [
            "osnoise/2-301 [x] ....... 1.0: 1 2 3 4 5 6 7 8 9",
            "osnoise/2-301 [002] ....... 1.0: 1 2 3",
            "osnoise/2-301 [002] ....... 1.0 1 2 3 4 5 6 7 8 9",
            "osnoise/2-301 [002] ....... 1.0: 1 2 x 4 5 6 7 8 9",
            "osnoise/2-301 [002] ....... 1.0: 1 2 3 4 5 6 7 8 -9",
            "osnoise/2-301 002 ....... 1.0: 1 2 3 4 5 6 7 8 9",
        ] {
            assert!(parse_trace(bad).is_err(), "{bad}");
        }
    }

    fn tracefs(tracers: &str) -> (tempfile::TempDir, SysRoot) {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("sys/kernel/tracing");
        std::fs::create_dir_all(t.join("osnoise")).unwrap();
        std::fs::write(t.join("available_tracers"), tracers).unwrap();
        std::fs::write(t.join("current_tracer"), "nop\n").unwrap();
        std::fs::write(t.join("osnoise/cpus"), "0-3\n").unwrap();
        std::fs::write(t.join("trace"), TRACE).unwrap();
        let root = SysRoot::new(dir.path());
        (dir, root)
    }

    /// The tracer is started on the CPUs asked for, and current_tracer and osnoise/cpus are
    /// put back after the trace is read.
    #[test]
    fn a_run_puts_tracefs_back() {
        let (dir, root) = tracefs("timerlat osnoise hwlat function nop\n");
        let d = find(&root).unwrap();
        assert_eq!(d, "/sys/kernel/tracing");
        let run = Run::start(&root, &d, &"2-3".parse().unwrap()).unwrap();
        let t = dir.path().join("sys/kernel/tracing");
        let state = || {
            (
                std::fs::read_to_string(t.join("current_tracer")).unwrap(),
                std::fs::read_to_string(t.join("osnoise/cpus")).unwrap(),
            )
        };
        assert_eq!(state(), ("osnoise".into(), "2-3".into()));
        let noise = run.finish(&root).unwrap();
        assert_eq!(noise[&2].periods, 2);
        assert_eq!(state(), ("nop".into(), "0-3".into()));
        // Put back also when the trace does not parse.
        std::fs::write(t.join("trace"), "garbage\n").unwrap();
        let run = Run::start(&root, &d, &"3".parse().unwrap()).unwrap();
        let e = run.finish(&root).unwrap_err();
        assert!(e.to_string().contains("trace"), "{e}");
        assert_eq!(state(), ("nop".into(), "0-3".into()));
    }

    #[test]
    fn no_tracer_or_a_busy_one_is_said_not_taken() {
        let (dir, root) = tracefs("function nop\n");
        assert_eq!(
            find(&root).unwrap_err().to_string(),
            "the kernel has no osnoise tracer (CONFIG_OSNOISE_TRACER)"
        );
        let t = dir.path().join("sys/kernel/tracing");
        std::fs::write(t.join("current_tracer"), "function\n").unwrap();
        let e = Run::start(&root, "/sys/kernel/tracing", &"3".parse().unwrap()).unwrap_err();
        assert!(e.to_string().contains("another tracer is in use"), "{e}");
        assert_eq!(
            std::fs::read_to_string(t.join("osnoise/cpus")).unwrap(),
            "0-3\n"
        );
        let empty = tempfile::tempdir().unwrap();
        let e = find(&SysRoot::new(empty.path())).unwrap_err();
        assert!(
            matches!(e, crate::tracefs::Unavailable::NotMounted),
            "{e:?}"
        );
        assert!(e.to_string().starts_with("tracefs is not mounted"));
    }
}
