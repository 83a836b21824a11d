//! What interrupts and softirqs did on each audited CPU between two samples, each row with
//! the fix for it.

use std::collections::HashMap;

use super::exposure::SeenIrq;
use super::*;

/// Two samples of a `/proc/interrupts` or `/proc/softirqs` table, matched once: each row
/// of the later one with the earlier row of its label, and each CPU with its column. The
/// audit takes every row's growth on every audited CPU (a search of the rows for each took
/// 30 s on 448 CPUs with 4,000 IRQs).
pub(super) struct Deltas<'a> {
    before: &'a Interrupts,
    after: &'a Interrupts,
    /// For each row of `after`, the first row of `before` with its label.
    earlier: Vec<Option<usize>>,
    /// The first row of `after` of each label.
    rows: HashMap<&'a str, usize>,
    cols_before: HashMap<usize, usize>,
    cols_after: HashMap<usize, usize>,
}

impl<'a> Deltas<'a> {
    pub(super) fn new(before: &'a Interrupts, after: &'a Interrupts) -> Self {
        let first = |t: &'a Interrupts| {
            let mut m: HashMap<&'a str, usize> = HashMap::with_capacity(t.rows.len());
            for (i, r) in t.rows.iter().enumerate() {
                m.entry(r.label.as_str()).or_insert(i);
            }
            m
        };
        let (rb, rows) = (first(before), first(after));
        let cols = |t: &Interrupts| t.cpus.iter().enumerate().map(|(i, &c)| (c, i)).collect();
        Deltas {
            before,
            after,
            earlier: after
                .rows
                .iter()
                .map(|r| rb.get(r.label.as_str()).copied())
                .collect(),
            rows,
            cols_before: cols(before),
            cols_after: cols(after),
        }
    }

    pub(super) fn has_cpu(&self, cpu: usize) -> bool {
        self.cols_after.contains_key(&cpu)
    }

    /// `after - before` of row `i` of `after` on `cpu` (0 when the column is missing or the
    /// counter went backwards; the whole count for a row or column new in `after`).
    pub(super) fn row(&self, i: usize, cpu: usize) -> u64 {
        let Some(a) = self
            .cols_after
            .get(&cpu)
            .and_then(|&c| self.after.rows[i].counts.get(c))
        else {
            return 0;
        };
        let b = self.earlier[i].and_then(|j| {
            let c = *self.cols_before.get(&cpu)?;
            self.before.rows[j].counts.get(c)
        });
        match b {
            Some(b) => a.saturating_sub(*b),
            None => *a,
        }
    }

    /// The same for the row `label`.
    pub(super) fn of(&self, label: &str, cpu: usize) -> u64 {
        self.rows.get(label).map_or(0, |&i| self.row(i, cpu))
    }
}

pub(super) fn tick_of(d: &Deltas, cpu: usize, window_s: f64, nohz_full: bool) -> Option<Tick> {
    if window_s <= 0.0 || !d.has_cpu(cpu) {
        return None;
    }
    d.rows.get("LOC")?;
    let rate = per_s(d.of("LOC", cpu), window_s);
    Some(Tick {
        per_s: rate,
        stopped: rate <= TICK_STOPPED_PER_S,
        nohz_full,
        reasons: None,
    })
}

/// The kind and fix of a per-CPU (non-numbered) row of /proc/interrupts.
pub(super) fn ipi_fix(label: &str, nohz_full: bool, cpus: &CpuSet) -> (&'static str, String) {
    match label {
        "LOC" => (
            "tick",
            if nohz_full {
                "the tick runs while more than one task is runnable here: leave the workload alone on the CPU (isold item tasks)".into()
            } else {
                format!("boot argument nohz_full={cpus}")
            },
        ),
        "RES" => (
            "ipi",
            "tasks woken or moved here: isold item tasks; a workload's own threads wake each other".into(),
        ),
        "CAL" | "TLB" => (
            "ipi",
            "sent by other CPUs (memory map changes, flushes): the workload's threads elsewhere, KSM, THP; no run-time lever".into(),
        ),
        "IWI" => ("ipi", "irq_work (perf, printk, RCU): nohz_full, rcu_nocbs, printk".into()),
        "NMI" | "PMI" => ("ipi", "perf events and the NMI watchdog: sysctl kernel.nmi_watchdog = 0".into()),
        "MCP" => ("ipi", "machine-check polling: isold item machinecheck".into()),
        _ => ("ipi", "a per-CPU interrupt source of the platform".into()),
    }
}

/// The fix of an interruption source as the noise ledger names it (`IRQ 4 ttyS0`, `softirq
/// TIMER`, `IPI reschedule`, `local timer`, `kernel thread kworker/3:1`, `sh (pid 812)`):
/// the same advice the audit gives for the matching row.
pub fn noise_fix(kind: &str, source: &str, nohz_full: bool, cpus: &CpuSet) -> String {
    let row = |label: &str| ipi_fix(label, nohz_full, cpus).1;
    match kind {
        "irq" => "isold item irq_affinity (or [irqs] allow: the workload's own)".into(),
        "softirq" => softirq_fix(source.strip_prefix("softirq ").unwrap_or(source)).into(),
        "timer" => row("LOC"),
        "ipi" if source.contains("reschedule") => row("RES"),
        "ipi" if source.contains("TLB shootdown") => "the workload's memory map changed on another CPU (a sibling thread's munmap, mprotect, madvise; KSM, THP): map and mlock its memory before it runs; isold items ksm and thp".into(),
        "ipi" if source.contains("function call") => row("CAL"),
        "ipi" if source.contains("irq work") => row("IWI"),
        "nmi" => row("NMI"),
        "thread" => match source.strip_prefix("kernel thread ") {
            Some(comm) => kthread_fix(comm).into(),
            None => "a task that is not the workload: isold item tasks moves the ones allowed elsewhere; one pinned here (a second program) must be moved by its owner".into(),
        },
        _ => row(""),
    }
}

/// Where a disturbance happens: the CPU, whether it is nohz_full, the audited CPUs.
pub(super) struct At<'a> {
    pub(super) cpu: usize,
    pub(super) nohz_full: bool,
    pub(super) cpus: &'a CpuSet,
    pub(super) window_s: f64,
}

/// The interrupts counted on the CPU during the window: disturbers to `did`, the workload's
/// own IRQs to `workload`.
pub(super) fn did_interrupts(
    d: &Deltas,
    at: &At,
    irqs: &[SeenIrq],
    (did, workload): (&mut Vec<Disturbance>, &mut Vec<Disturbance>),
) {
    let (cpu, window_s) = (at.cpu, at.window_s);
    for (i, row) in d.after.rows.iter().enumerate() {
        let n = d.row(i, cpu);
        if n == 0 {
            continue;
        }
        if let Some(num) = row.irq() {
            let seen = irqs.iter().find(|i| i.exposure.irq == num);
            let fix = seen
                .map(|i| i.exposure.fix.clone())
                .unwrap_or_else(|| "isold item irq_affinity".into());
            let name = row.action();
            let out = if seen.is_some_and(|i| i.workload) {
                &mut *workload
            } else {
                &mut *did
            };
            out.push(Disturbance {
                kind: "irq".into(),
                source: if name.is_empty() {
                    format!("IRQ {num}")
                } else {
                    format!("IRQ {num} {name}")
                },
                count: n,
                per_s: per_s(n, window_s),
                cpu_ms: None,
                fix,
            });
        } else {
            if row.label == "LOC" && per_s(n, window_s) <= TICK_STOPPED_PER_S {
                continue; // the residual tick of nohz_full: reported as the tick
            }
            let (kind, fix) = ipi_fix(&row.label, at.nohz_full, at.cpus);
            did.push(Disturbance {
                kind: kind.into(),
                source: format!("{} {}", row.label, row.description.to_lowercase()),
                count: n,
                per_s: per_s(n, window_s),
                cpu_ms: None,
                fix,
            });
        }
    }
}

pub(super) fn softirq_fix(label: &str) -> &'static str {
    match label {
        "TIMER" | "HRTIMER" => {
            "timers armed on this CPU: sysctl kernel.timer_migration = 0, nohz_full"
        }
        "RCU" => "RCU callbacks: boot argument rcu_nocbs",
        "SCHED" => "load balancing: boot argument isolcpus=domain or an isolated cpuset partition",
        "NET_RX" | "NET_TX" => "a NIC's IRQ or RPS on this CPU: isold item irq_affinity",
        "BLOCK" | "IRQ_POLL" => {
            "a disk's completions on this CPU: isold item irq_affinity, isolcpus=managed_irq"
        }
        _ => "a driver's IRQ on this CPU: isold item irq_affinity",
    }
}

pub(super) fn did_softirqs(d: &Deltas, cpu: usize, window_s: f64, out: &mut Vec<Disturbance>) {
    for (i, row) in d.after.rows.iter().enumerate() {
        let n = d.row(i, cpu);
        if n > 0 {
            out.push(Disturbance {
                kind: "softirq".into(),
                source: format!("softirq {}", row.label),
                count: n,
                per_s: per_s(n, window_s),
                cpu_ms: None,
                fix: softirq_fix(&row.label).into(),
            });
        }
    }
}
