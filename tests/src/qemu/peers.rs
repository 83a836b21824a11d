//! scripts/bench-peers: tuned, tuna and isold put through the same scenario, each in its own
//! boot of the Debian guest (6.12-rt, systemd, tuned and tuna from the Debian archive; see
//! scripts/setup-debroot), and judged by `isold audit --json` and a snapshot of every value
//! isold covers. The scenario is tests/guest/peers.sh.
//!
//! A benchmark, not a test: it fails only when the guest cannot run the scenario, never because
//! a peer does worse. The boots run one after the other so that timings are comparable.

use std::collections::BTreeSet;
use std::time::Duration;

use libtaskisol::audit::Audit;

use super::{run, Expect, HarnessError, Outcome, Scenario, StepOutput};

const PEERS_SH: &str = include_str!("../../guest/peers.sh");

/// The tools, in the table's order: `isold` is the one-shot `isold apply` and `isold
/// restore`, `isold-run` the service (dist/isold.service) started and stopped with systemctl.
pub const TOOLS: [&str; 4] = ["tuned", "tuna", "isold", "isold-run"];

const UNIT: &[u8] = include_bytes!("../../../dist/isold.service");

fn script(call: &str) -> String {
    format!("taskset -pc 0-1 $$ >/dev/null\n{PEERS_SH}\n{call}\n")
}

/// The boot that puts `tool` through the scenario.
pub fn scenario(tool: &str) -> Scenario {
    let mut s = Scenario::debian(&format!("peers-{tool}"), "");
    s.file("/etc/systemd/system/isold.service", 0o644, UNIT);
    s.step_with_timeout(
        "setup",
        &script("peers_setup"),
        Duration::from_secs(180),
        vec![Expect::exit(0)],
    );
    s.step_with_timeout(
        "apply",
        &script(&format!("tool_apply {tool}")),
        Duration::from_secs(300),
        vec![Expect::exit(0), Expect::stdout_has("apply_ms=")],
    );
    s.step_with_timeout(
        "audit",
        &script("peers_audit after-apply"),
        Duration::from_secs(120),
        vec![Expect::exit(0), Expect::stdout_has("--- end\n")],
    );
    s.step_with_timeout(
        "drift",
        &script("peers_drift"),
        Duration::from_secs(60),
        vec![Expect::exit(0), Expect::stdout_has("drift_irq=")],
    );
    s.step_with_timeout(
        "stop",
        &script(&format!("tool_stop {tool}")),
        Duration::from_secs(300),
        vec![
            Expect::exit(0),
            Expect::stdout_has("settings_not_restored="),
        ],
    );
    s
}

/// The audit JSON a step printed between `--- json` and `--- end`.
fn audit_of(out: &StepOutput) -> Option<Audit> {
    let s = &out.stdout;
    let body = &s[s.find("--- json ")?..];
    let body = &body[body.find('\n')? + 1..];
    serde_json::from_str(&body[..body.find("--- end")?]).ok()
}

/// One tool's figures.
#[derive(Debug, Default)]
pub struct Row {
    pub tool: String,
    pub apply_s: Option<f64>,
    pub apply_rc: Option<i32>,
    /// IRQs with a handler whose affinity still reaches CPU 2 or 3 (audit), and of those the
    /// ones the kernel lets a tool move.
    pub irqs_left: Option<usize>,
    pub movable_irqs_left: Option<usize>,
    /// IRQs whose affinity was moved off 2-3 but whose effective CPU is still there: x86 moves
    /// an IO-APIC IRQ when it next fires. Not the tool's to fix.
    pub irqs_pending: Option<usize>,
    /// /proc/irq entries whose affinity is still 2, 3 or 2-3 (handler or not).
    pub irq_entries_left: Option<usize>,
    /// User tasks allowed on CPU 2 or 3, workloads apart (audit).
    pub tasks_left: Option<usize>,
    /// Movable kthreads allowed there (IRQ threads follow their IRQ's effective CPU).
    pub kthreads_left: Option<usize>,
    pub workload_affinity: Option<String>,
    pub drift_task: Option<String>,
    pub drift_sysctl: Option<String>,
    pub drift_irq: Option<String>,
    pub stop_s: Option<f64>,
    pub settings_not_restored: Option<usize>,
    pub tasks_not_restored: Option<usize>,
    pub rss_kb: Option<u64>,
    pub rss_of: Option<String>,
    pub tasks: Option<usize>,
}

fn field<T: std::str::FromStr>(o: &Outcome, step: &str, key: &str) -> Option<T> {
    o.outputs.get(step)?.field(key)?.parse().ok()
}

impl Row {
    pub fn from_outcome(tool: &str, o: &Outcome) -> Row {
        let audit = o.outputs.get("audit").and_then(audit_of);
        let counts = audit.as_ref().map(|a| {
            let iso = [2u32, 3];
            let reaches = |list: &str| {
                super::parse_cpu_list(list).is_some_and(|l| l.iter().any(|c| iso.contains(c)))
            };
            let (mut irqs, mut movable, mut pending) =
                (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
            let (mut tasks, mut kthreads) = (BTreeSet::new(), BTreeSet::new());
            for c in &a.per_cpu {
                for i in &c.can_disturb.irqs {
                    if reaches(&i.affinity) {
                        irqs.insert(i.irq);
                        if i.movable != Some(false) {
                            movable.insert(i.irq);
                        }
                    } else {
                        pending.insert(i.irq);
                    }
                }
                for t in &c.can_disturb.tasks {
                    if t.kthread {
                        kthreads.insert(t.tid);
                    } else {
                        tasks.insert(t.tid);
                    }
                }
            }
            [
                irqs.len(),
                movable.len(),
                pending.len(),
                tasks.len(),
                kthreads.len(),
            ]
        });
        let count = |i: usize| counts.map(|c| c[i]);
        let ms = |step: &str, key: &str| field::<u64>(o, step, key).map(|v| v as f64 / 1000.0);
        Row {
            tool: tool.into(),
            apply_s: ms("apply", "apply_ms"),
            apply_rc: field(o, "apply", "apply_rc"),
            irqs_left: count(0),
            movable_irqs_left: count(1),
            irqs_pending: count(2),
            irq_entries_left: field(o, "audit", "irqs_on_2_3"),
            tasks_left: count(3),
            kthreads_left: count(4),
            workload_affinity: field(o, "audit", "workload_affinity"),
            drift_task: field(o, "drift", "drift_task"),
            drift_sysctl: field(o, "drift", "drift_sysctl"),
            drift_irq: field(o, "drift", "drift_irq"),
            stop_s: ms("stop", "stop_ms"),
            settings_not_restored: field(o, "stop", "settings_not_restored"),
            tasks_not_restored: field(o, "stop", "tasks_not_restored"),
            rss_kb: field(o, "apply", "rss_kb"),
            rss_of: field(o, "apply", "rss_of"),
            tasks: field(o, "setup", "tasks"),
        }
    }
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "?".into(), |v| v.to_string())
}

/// Whether a drifted value was put back: the task narrowed to 0-1, stat_interval back to the
/// tool's value (10 for tuned's profile and isold's preset), IRQ 4 off CPU 3.
fn repaired(row: &Row) -> String {
    let task = row.drift_task.as_deref().map(|a| a == "0-1");
    let sysctl = row.drift_sysctl.as_deref().map(|v| v != "1");
    let irq = row.drift_irq.as_deref().map(|v| v != "3");
    let mark = |b: Option<bool>| match b {
        Some(true) => "yes",
        Some(false) => "no",
        None => "?",
    };
    format!(
        "task {}, sysctl {}, IRQ {}",
        mark(task),
        mark(sysctl),
        mark(irq)
    )
}

/// The table for BENCHMARKS.md, a row per tool.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| tool | apply | IRQs reaching 2-3 (movable) | IRQ moves pending | /proc/irq entries on 2-3 | wide tasks / kthreads on 2-3 | pinned workload | drift repaired after 3 s | stop | settings / thread affinities not restored | resident memory |\n\
         |---|---:|---:|---:|---:|---:|---|---|---:|---:|---|\n",
    );
    for r in rows {
        let kept = match r.workload_affinity.as_deref() {
            Some("3") => "kept on 3".to_string(),
            Some(a) => format!("moved to {a}"),
            None => "?".into(),
        };
        let drift = if r.tool == "isold" {
            format!(
                "{} (one-shot apply: `isold run` is the one that repairs)",
                repaired(r)
            )
        } else {
            repaired(r)
        };
        let rc = match r.apply_rc {
            Some(0) | None => String::new(),
            Some(rc) => format!(" (exit {rc})"),
        };
        s.push_str(&format!(
            "| {} | {} s{rc} | {} ({}) | {} | {} | {} / {} | {kept} | {drift} | {} s | {} / {} | {:.1} MB ({}) |\n",
            r.tool,
            r.apply_s.map_or("?".into(), |v| format!("{v:.1}")),
            opt(&r.irqs_left),
            opt(&r.movable_irqs_left),
            opt(&r.irqs_pending),
            opt(&r.irq_entries_left),
            opt(&r.tasks_left),
            opt(&r.kthreads_left),
            r.stop_s.map_or("?".into(), |v| format!("{v:.1}")),
            opt(&r.settings_not_restored),
            opt(&r.tasks_not_restored),
            r.rss_kb.map_or(f64::NAN, |kb| kb as f64 / 1024.0),
            r.rss_of.as_deref().unwrap_or("?"),
        ));
    }
    s
}

/// Runs the three boots one after the other, printing each step's output and then the table;
/// `Ok(false)` when a boot could not run its scenario.
pub fn run_peers(tools: &[&str]) -> Result<bool, HarnessError> {
    let mut rows = Vec::new();
    let mut ok = true;
    for tool in tools {
        let s = scenario(tool);
        eprintln!("bench-peers: booting the Debian guest for {tool}");
        let o = run(&s)?;
        println!("\n## {tool}: {}", o.summary());
        for step in &s.steps {
            println!("\n== {tool} {}", step.name);
            match o.outputs.get(&step.name) {
                Some(out) => {
                    let text = &out.stdout;
                    let shown = match (text.find("--- json "), text.find("--- end\n")) {
                        (Some(a), Some(b)) => {
                            format!("{}(audit JSON){}", &text[..a], &text[b + 8..])
                        }
                        _ => text.clone(),
                    };
                    print!("{shown}");
                    if !out.stderr.trim().is_empty() {
                        print!("{}", out.stderr);
                    }
                }
                None => println!("(no result)"),
            }
        }
        for f in &o.failures {
            println!("FAILED: {f}");
            ok = false;
        }
        rows.push(Row::from_outcome(tool, &o));
    }
    println!("\n{}", table(&rows));
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_repair_reads_each_value_against_what_was_set_by_hand() {
        let mut r = Row {
            drift_task: Some("0-1".into()),
            drift_sysctl: Some("10".into()),
            drift_irq: Some("0-1".into()),
            ..Row::default()
        };
        assert_eq!(repaired(&r), "task yes, sysctl yes, IRQ yes");
        r.drift_task = Some("0-3".into());
        r.drift_sysctl = Some("1".into());
        r.drift_irq = Some("3".into());
        assert_eq!(repaired(&r), "task no, sysctl no, IRQ no");
        r.drift_irq = None;
        assert!(repaired(&r).ends_with("IRQ ?"));
    }
}
