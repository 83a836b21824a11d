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

/// The rounds of scripts/bench-oneshot: tuned's switch and stop and isold's apply and restore,
/// alternating in one boot.
pub const PAIR_ROUNDS: usize = 5;

/// The boot of scripts/bench-oneshot: the scenario's setup, then [`PAIR_ROUNDS`] rounds of
/// tuned's profile switch, its stop, `isold apply` and `isold restore`, each timed alone (the
/// same guest, the same tasks and IRQs for both), then one apply and restore with `--timings`.
/// `base`: another build of isold, timed in each round after this one (a change's before and
/// after in one boot, where figures under TCG move by tens of percent between boots).
pub fn pairs_scenario(base: Option<&[u8]>) -> Scenario {
    let mut s = Scenario::debian("oneshot-pairs", "");
    if let Some(bin) = base {
        s.file("/usr/local/bin/isold-base", 0o755, bin);
    }
    s.step_with_timeout(
        "setup",
        &script("pairs_setup"),
        Duration::from_secs(180),
        vec![Expect::exit(0)],
    );
    for n in 1..=PAIR_ROUNDS {
        s.step_with_timeout(
            &format!("round{n}"),
            &script(&format!("pairs_round {n}")),
            Duration::from_secs(300),
            vec![
                Expect::exit(0),
                Expect::stdout_has(&format!("isold_restore_ms.{n}=")),
            ],
        );
    }
    s.step_with_timeout(
        "profile",
        &script("pairs_profile"),
        Duration::from_secs(120),
        vec![Expect::exit(0), Expect::stdout_has("--- restore --timings")],
    );
    s
}

/// One round's times, in seconds: tuned's switch, tuned's stop, isold's apply, restore, and
/// the base build's apply and restore when there is one.
pub type Round = Vec<f64>;

const ROUND_KEYS: [&str; 6] = [
    "tuned_apply_ms",
    "tuned_stop_ms",
    "isold_apply_ms",
    "isold_restore_ms",
    "base_apply_ms",
    "base_restore_ms",
];

/// The rounds an outcome holds (a round whose four figures are not all there is left out;
/// the base's two only when the round has them).
pub fn rounds(o: &Outcome) -> Vec<Round> {
    (1..=PAIR_ROUNDS)
        .filter_map(|n| {
            let get = |key: &str| {
                field::<u64>(o, &format!("round{n}"), &format!("{key}.{n}"))
                    .map(|ms| ms as f64 / 1000.0)
            };
            let mut r: Round = ROUND_KEYS[..4]
                .iter()
                .map(|k| get(k))
                .collect::<Option<_>>()?;
            if let (Some(a), Some(b)) = (get(ROUND_KEYS[4]), get(ROUND_KEYS[5])) {
                r.extend([a, b]);
            }
            Some(r)
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The table for BENCHMARKS.md: each round, then the medians and how many times faster isold
/// is (tuned's median over isold's, apply against the switch and restore against the stop);
/// with a base build, its two columns too.
pub fn pairs_table(rounds: &[Round]) -> String {
    let cols = if rounds.iter().all(|r| r.len() == 6) && !rounds.is_empty() {
        6
    } else {
        4
    };
    let mut s = String::from("| round | tuned switch | tuned stop | isold apply | isold restore |");
    if cols == 6 {
        s.push_str(" base apply | base restore |");
    }
    s.push_str("\n|---|---:|---:|---:|---:|");
    if cols == 6 {
        s.push_str("---:|---:|");
    }
    s.push('\n');
    for (n, r) in rounds.iter().enumerate() {
        s.push_str(&format!("| {} |", n + 1));
        for v in &r[..cols] {
            s.push_str(&format!(" {v:.2} s |"));
        }
        s.push('\n');
    }
    let m: Vec<f64> = (0..cols)
        .map(|i| median(rounds.iter().map(|r| r[i]).collect()))
        .collect();
    s.push_str(&format!("| median | {:.2} s | {:.2} s |", m[0], m[1]));
    for i in (2..cols).step_by(2) {
        s.push_str(&format!(
            " {:.2} s ({:.1}x) | {:.2} s ({:.1}x) |",
            m[i],
            m[0] / m[i],
            m[i + 1],
            m[1] / m[i + 1]
        ));
    }
    s.push('\n');
    s
}

/// Runs scripts/bench-oneshot's boot, printing each step's output and then the table;
/// `Ok(false)` when the boot could not run its scenario.
pub fn run_pairs(base: Option<&[u8]>) -> Result<bool, HarnessError> {
    let s = pairs_scenario(base);
    eprintln!("bench-oneshot: booting the Debian guest");
    let o = run(&s)?;
    println!("\n## {}", o.summary());
    for step in &s.steps {
        println!("\n== {}", step.name);
        match o.outputs.get(&step.name) {
            Some(out) => {
                print!("{}", out.stdout);
                if !out.stderr.trim().is_empty() {
                    print!("{}", out.stderr);
                }
            }
            None => println!("(no result)"),
        }
    }
    let mut ok = o.failures.is_empty();
    for f in &o.failures {
        println!("FAILED: {f}");
    }
    let r = rounds(&o);
    if r.len() < PAIR_ROUNDS {
        ok = false;
    }
    println!("\n{}", pairs_table(&r));
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

    #[test]
    fn the_pairs_table_gives_each_round_the_medians_and_the_ratios() {
        let mut rounds = vec![
            vec![6.9, 1.6, 0.35, 0.16],
            vec![8.1, 2.1, 0.40, 0.21],
            vec![7.2, 1.9, 0.36, 0.19],
        ];
        let t = pairs_table(&rounds);
        assert!(
            t.contains("| 2 | 8.10 s | 2.10 s | 0.40 s | 0.21 s |\n"),
            "{t}"
        );
        assert!(
            t.contains("| median | 7.20 s | 1.90 s | 0.36 s (20.0x) | 0.19 s (10.0x) |\n"),
            "{t}"
        );
        assert!(!t.contains("base"), "{t}");
        assert_eq!(median(vec![4.0, 1.0]), 2.5);
        // A base build: its columns and its ratios beside this build's.
        for (r, b) in rounds
            .iter_mut()
            .zip([[0.72, 0.38], [0.80, 0.42], [0.90, 0.50]])
        {
            r.extend(b);
        }
        let t = pairs_table(&rounds);
        assert!(t.contains("| base apply | base restore |\n|---|"), "{t}");
        assert!(
            t.contains("| median | 7.20 s | 1.90 s | 0.36 s (20.0x) | 0.19 s (10.0x) | 0.80 s (9.0x) | 0.42 s (4.5x) |"),
            "{t}"
        );
    }
}
