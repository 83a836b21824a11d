//! The threads that ran on each audited CPU between two samples, and those starving there.

use std::collections::HashMap;

use super::*;

pub(super) use crate::cpuwatch::clock_ticks_per_s;

/// The threads of a sample by identity (tid and start time), built once per audit.
pub(super) fn by_identity(s: &Sample) -> HashMap<(i32, u64), &Thread> {
    s.threads
        .iter()
        .map(|t| ((t.tid, t.starttime), t))
        .collect()
}

pub(super) fn did_threads(
    earlier: &HashMap<(i32, u64), &Thread>,
    after: &Sample,
    cpu: usize,
    window_s: f64,
    workloads: &Workloads,
    out: &mut Vec<Disturbance>,
    workloads_ran: &mut Vec<TaskRef>,
) {
    let ms_per_tick = 1000 / clock_ticks_per_s();
    for t in &after.threads {
        let (count, ticks, here) = match earlier.get(&(t.tid, t.starttime)) {
            Some(b) => (
                t.switches.saturating_sub(b.switches),
                t.cpu_ticks.saturating_sub(b.cpu_ticks),
                t.processor as usize == cpu || b.processor as usize == cpu,
            ),
            // Started during the window.
            None => (t.switches, t.cpu_ticks, t.processor as usize == cpu),
        };
        if !here || (count == 0 && ticks == 0) {
            continue;
        }
        let r = TaskRef::of(t);
        if workloads.is(t) {
            workloads_ran.push(r);
            continue;
        }
        let (kind, fix) = if t.is_pinned_by_kernel() {
            ("kthread", kthread_fix(&t.comm).to_string())
        } else if t.is_kthread() {
            (
                "kthread",
                "isold item tasks (moves kthreads that may move)".into(),
            )
        } else {
            ("task", "isold item tasks".into())
        };
        out.push(Disturbance {
            kind: kind.into(),
            source: r.name(),
            count,
            per_s: per_s(count, window_s),
            cpu_ms: Some(ticks * ms_per_tick),
            fix,
        });
    }
}

/// The threads runnable on `cpu` in both samples, with no context switch and no CPU time
/// between them: they waited the whole window (a runnable thread cannot sleep without
/// running first). Named with what used the CPU meanwhile.
pub(super) fn starving_threads(
    earlier: &HashMap<(i32, u64), &Thread>,
    after: &Sample,
    cpu: usize,
    window_s: f64,
) -> Vec<Starving> {
    if window_s < STARVING_WINDOW_S {
        return Vec::new();
    }
    let on = |t: &Thread| t.state == 'R' && t.processor as usize == cpu;
    let behind = after
        .threads
        .iter()
        .filter(|t| t.processor as usize == cpu)
        .filter_map(|t| {
            let b = earlier.get(&(t.tid, t.starttime))?;
            let used = t.cpu_ticks.saturating_sub(b.cpu_ticks);
            (used > 0).then_some((used, t))
        })
        .max_by_key(|(used, t)| (*used, std::cmp::Reverse(t.tid)))
        .map(|(_, t)| TaskRef::of(t));
    after
        .threads
        .iter()
        .filter(|t| on(t))
        .filter(|t| {
            earlier.get(&(t.tid, t.starttime)).is_some_and(|b| {
                on(b) && b.switches == t.switches && b.cpu_ticks == t.cpu_ticks
            })
        })
        .map(|t| Starving {
            thread: TaskRef::of(t),
            waited_s: window_s,
            behind: behind.clone(),
            fix: "isold run: its stall guard lends a starving thread a slice ([stalls] in isold.toml); or a real-time workload that leaves its CPU now and then".into(),
        })
        .collect()
}
