//! The health sample: the isolated CPUs' interrupt and softirq counts by source, their tick
//! rate, and the context switches of threads that are not the workload's, as differences
//! from the last sample.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use libtaskisol::audit::{Sample, Scope, Workloads};
use libtaskisol::cpuset::CpuSet;
use libtaskisol::irq::Interrupts;
use libtaskisol::policy::Policy;
use libtaskisol::SysRoot;
use prometheus::IntCounterVec;

use super::Metrics;

/// A walk of every thread (for the foreign context switches) is the health sample's main
/// cost: it is made at most once every [`WALK_EVERY_SAMPLES`] samples, and no more than
/// once per [`WALK_DUTY`] times its own time; the samples between read the interrupt tables
/// alone. Threads that live through two walks (the CPUs' kernel threads, a workload's
/// neighbours) have every switch counted; one that starts and exits between two walks is
/// not seen. The CPUs the noise ledger records are not walked: it counts every thread that
/// comes on them ([`Metrics::foreign_switch`]), and a sample whose CPUs are all its own
/// walks nothing.
pub const WALK_EVERY_SAMPLES: u32 = 10;
/// See [`WALK_EVERY_SAMPLES`].
pub const WALK_DUTY: u32 = 50;

#[derive(Debug, Clone)]
pub(super) struct Walked {
    at: Instant,
    cost: Duration,
    samples_since: u32,
    /// The CPUs whose threads it counted (those the noise ledger did not).
    pub(super) cpus: CpuSet,
}

impl Walked {
    /// Whether the next sample walks the threads.
    fn due(walked: Option<&Walked>, now: Instant) -> bool {
        walked.map_or(true, |w| {
            w.samples_since + 1 >= WALK_EVERY_SAMPLES
                && now.saturating_duration_since(w.at) >= w.cost * WALK_DUTY
        })
    }
}

/// What the next health sample is compared with.
pub(super) struct Last {
    at: Instant,
    /// (cpu, source) -> the kernel's count, summed over rows of one source.
    interrupts: HashMap<(usize, String), u64>,
    softirqs: HashMap<(usize, String), u64>,
    /// (tid, start time) -> context switches.
    switches: HashMap<(i32, u64), u64>,
}

impl Metrics {
    /// Take a health sample under `root` for the CPUs of `scope` and add what changed since
    /// the last one.
    pub fn sample(&self, root: &SysRoot, scope: &Scope) -> libtaskisol::Result<()> {
        let t = Instant::now();
        // The CPUs the noise ledger counts need no walk: it sees every thread come on them.
        let walk_cpus = scope.cpus.difference(
            &self
                .switches_by_ledger
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        let mut walked = self.walked.lock().unwrap_or_else(|e| e.into_inner());
        let walk = !walk_cpus.is_empty() && Walked::due(walked.as_ref(), t);
        // CPUs the last walk did not count (the ledger did, or no walk came before: the
        // ledger recorded from the start): this walk is where their threads' counts start.
        let from_scratch = walk && walked.as_ref().map_or(true, |w| w.cpus != walk_cpus);
        let s = if walk {
            let s = Sample::read_for(root, &walk_cpus)?;
            *walked = Some(Walked {
                at: t,
                cost: t.elapsed(),
                samples_since: 0,
                cpus: walk_cpus,
            });
            s
        } else {
            if let Some(w) = walked.as_mut() {
                w.samples_since += 1;
            }
            Sample::read_counters(root)?
        };
        drop(walked);
        self.take(root, scope, &s, t, walk, from_scratch);
        self.samples.inc();
        self.sample_seconds.set(t.elapsed().as_secs_f64());
        Ok(())
    }

    /// Add sample `s` (taken at `at`) to the counters: the differences from the last sample
    /// (the kernel's whole count the first time for the interrupt counters, which then equal
    /// the kernel's); the context switches when it `walked` the threads, from the last walk
    /// (none `from_scratch`: a walk of CPUs the last did not cover, whose counts start there).
    fn take(
        &self,
        root: &SysRoot,
        scope: &Scope,
        s: &Sample,
        at: Instant,
        walked: bool,
        from_scratch: bool,
    ) {
        let cpus = &scope.cpus;
        let interrupts = by_source(&s.interrupts, cpus, true);
        let softirqs = s
            .softirqs
            .as_ref()
            .map(|t| by_source(t, cpus, false))
            .unwrap_or_default();
        let workloads = Workloads::new(root, scope);
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let switches: HashMap<(i32, u64), u64> = if walked {
            s.threads
                .iter()
                .map(|t| ((t.tid, t.starttime), t.switches))
                .collect()
        } else {
            last.as_mut()
                .map(|l| std::mem::take(&mut l.switches))
                .unwrap_or_default()
        };
        let add = |vec: &IntCounterVec,
                   now: &HashMap<(usize, String), u64>,
                   before: Option<&HashMap<(usize, String), u64>>| {
            for ((cpu, source), n) in now {
                let was = before.and_then(|b| b.get(&(*cpu, source.clone())).copied());
                // A count that went down is a new one (an IRQ number given to another
                // device): all of it is new.
                let d = match was {
                    Some(w) if w <= *n => n - w,
                    _ => *n,
                };
                if d > 0 {
                    vec.with_label_values(&[&cpu.to_string(), source]).inc_by(d);
                }
            }
        };
        add(
            &self.cpu_interrupts,
            &interrupts,
            last.as_ref().map(|l| &l.interrupts),
        );
        add(
            &self.cpu_softirqs,
            &softirqs,
            last.as_ref().map(|l| &l.softirqs),
        );
        if let Some(l) = last.as_ref() {
            let me = std::process::id() as i32;
            // Between two walks `s` has no thread; a walk whose CPUs the last did not cover
            // starts their counts.
            for t in s.threads.iter().filter(|_| !from_scratch) {
                if !cpus.contains(t.processor as usize) || t.pid == me || workloads.is(t) {
                    continue;
                }
                // A thread started since the last sample: every switch it made is new.
                let d = t
                    .switches
                    .saturating_sub(l.switches.get(&(t.tid, t.starttime)).copied().unwrap_or(0));
                if d > 0 {
                    self.cpu_foreign_switches
                        .with_label_values(&[&t.processor.to_string()])
                        .inc_by(d);
                }
            }
            let secs = at.duration_since(l.at).as_secs_f64();
            if secs > 0.0 {
                for cpu in cpus.iter() {
                    let k = (cpu, "LOC".to_string());
                    let now = interrupts.get(&k).copied().unwrap_or(0);
                    let was = l.interrupts.get(&k).copied().unwrap_or(0);
                    self.cpu_tick_rate
                        .with_label_values(&[&cpu.to_string()])
                        .set(now.saturating_sub(was) as f64 / secs);
                }
            }
        }
        *last = Some(Last {
            at,
            interrupts,
            softirqs,
            switches,
        });
    }
}

/// The counts of a `/proc/interrupts` or `/proc/softirqs` table on `cpus`, by source: a
/// numbered IRQ by its handlers' names (`irqN` without one), any other row by its label
/// (LOC, RES, TIMER, NET_RX, ...). Zero counts are left out.
fn by_source(t: &Interrupts, cpus: &CpuSet, irqs: bool) -> HashMap<(usize, String), u64> {
    let mut out: HashMap<(usize, String), u64> = HashMap::new();
    for row in &t.rows {
        let source = match row.irq() {
            Some(n) if irqs => {
                let a = row.action();
                if a.is_empty() {
                    format!("irq{n}")
                } else {
                    a
                }
            }
            _ => row.label.clone(),
        };
        for (col, n) in row.counts.iter().enumerate() {
            let Some(&cpu) = t.cpus.get(col) else {
                continue;
            };
            if *n > 0 && cpus.contains(cpu) {
                *out.entry((cpu, source.clone())).or_default() += n;
            }
        }
    }
    out
}

/// The workload scope of `policy` for the health samples: its isolated CPUs and allow-lists.
pub fn scope_of(policy: &Policy) -> Scope {
    let c = &policy.config;
    Scope {
        cpus: policy.isolated.clone(),
        source: "isold run".into(),
        preset: c.preset,
        preset_at: c.preset_at(),
        allow_comm: c.allow_comm.clone(),
        allow_cgroup: c.allow_cgroup.clone(),
        allow_irqs: c.irq_allow.clone(),
        irq_movable: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One walk of the threads in ten samples, and none sooner than fifty times the last
    /// walk's cost after it.
    #[test]
    fn the_threads_are_walked_one_sample_in_ten_and_at_most_a_fiftieth_of_the_time() {
        let t0 = Instant::now();
        assert!(Walked::due(None, t0), "the first sample walks");
        let cheap = |samples_since| Walked {
            at: t0,
            cost: Duration::from_millis(10),
            samples_since,
            cpus: CpuSet::new(),
        };
        let at = t0 + Duration::from_secs(9);
        assert!(!Walked::due(Some(&cheap(0)), at));
        assert!(
            !Walked::due(Some(&cheap(8)), at),
            "the ninth sample after reads tables"
        );
        assert!(Walked::due(Some(&cheap(9)), at), "the tenth walks");
        let dear = Walked {
            cost: Duration::from_secs(1),
            ..cheap(9)
        };
        assert!(!Walked::due(Some(&dear), at), "a 1 s walk waits 50 s");
        assert!(Walked::due(Some(&dear), t0 + Duration::from_secs(50)));
    }

    #[test]
    fn sources_are_handler_names_or_labels_on_the_isolated_cpus_only() {
        let t = Interrupts::parse(
            "  CPU0 CPU1 CPU2 CPU3\n  4:  1 0 5 0  IO-APIC 4-edge ttyS0\n 30:  0 0 2 3  PCI-MSI 1-edge\nLOC:  9 9 7 1  Local timer interrupts\nRES:  0 0 0 0  Rescheduling interrupts\n",
        )
        .unwrap();
        let m = by_source(&t, &CpuSet::parse_list("2-3").unwrap(), true);
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort();
        assert_eq!(
            v,
            [
                ((2, "LOC".into()), 7),
                ((2, "irq30".into()), 2),
                ((2, "ttyS0".into()), 5),
                ((3, "LOC".into()), 1),
                ((3, "irq30".into()), 3),
            ]
        );
    }
}
