//! The noise ledger on real kernels: `isold run`'s ledger and a one-time `isold noise
//! --duration`, with oslat as the workload on isolated CPU 3 and known culprits let onto the
//! CPUs, against what the kernel counted and what oslat measured. The guest side is
//! `noise_case` in tests/guest/lib.sh.

use std::time::Duration;

use serde_json::Value;

use super::{Expect, Scenario, StepOutput};

/// The step.
pub const STEP: &str = "isold_noise_names_each_culprit_beside_oslat";

/// The time the step may take (TCG: the one-time measure's start, up to 120 s under load,
/// its 30 s, isold's start and stop, the reads).
pub const STEP_TIMEOUT: Duration = Duration::from_secs(300);

/// The JSON printed by the step between "--- NAME" and "--- end".
pub fn json(out: &StepOutput, name: &str) -> Option<Value> {
    let (_, rest) = out.stdout.split_once(&format!("--- {name}\n"))?;
    let (j, _) = rest.split_once("--- end\n")?;
    serde_json::from_str(j).ok()
}

fn cpu(j: &Value, n: u64) -> Option<Value> {
    j["per_cpu"]
        .as_array()?
        .iter()
        .find(|c| c["cpu"] == n)
        .cloned()
}

/// A CPU's sources whose name satisfies `pick`: (events, seconds) summed.
fn sum(j: &Value, n: u64, pick: &dyn Fn(&str) -> bool) -> (f64, f64) {
    let Some(c) = cpu(j, n) else {
        return (0.0, 0.0);
    };
    c["sources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["source"].as_str().is_some_and(pick))
        .fold((0.0, 0.0), |(e, t), s| {
            (
                e + s["events"].as_f64().unwrap_or(0.0),
                t + s["seconds"].as_f64().unwrap_or(0.0),
            )
        })
}

/// What the daemon's ledger counted between the step's two reads: (events, seconds).
fn daemon_delta(o: &StepOutput, n: u64, pick: &dyn Fn(&str) -> bool) -> Result<(f64, f64), String> {
    let before = json(o, "nz.before").ok_or("no daemon ledger before")?;
    let after = json(o, "nz.after").ok_or("no daemon ledger after")?;
    let (b, a) = (sum(&before, n, pick), sum(&after, n, pick));
    Ok((a.0 - b.0, a.1 - b.1))
}

/// What the one-time `isold noise` wrote on its standard error.
fn noise_err(o: &StepOutput) -> Vec<&str> {
    o.stdout
        .lines()
        .filter_map(|l| l.strip_prefix("noise_err: "))
        .collect()
}

fn num(o: &StepOutput, k: &str) -> Result<f64, String> {
    o.field(k)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("no {k}"))
}

/// A thread of a program pinned to CPU 3 that is not oslat (the shell, its usleep).
fn pinned_shell(name: &str) -> bool {
    name.starts_with("sh (pid ") || name.starts_with("usleep (pid ")
}

fn within_10_percent(
    what: &str,
    kernel: f64,
    ledger: (f64, f64),
    at_least: f64,
) -> Result<(), String> {
    let (events, secs) = ledger;
    if kernel >= at_least && (events - kernel).abs() <= 0.1 * kernel && secs > 0.0 {
        Ok(())
    } else {
        Err(format!(
            "{what}: kernel {kernel}, ledger {events} events, {secs} s"
        ))
    }
}

/// A metric's value from the step's `metric: ` lines.
fn metric(o: &StepOutput, name_and_labels: &str) -> Option<f64> {
    o.stdout.lines().find_map(|l| {
        let rest = l.strip_prefix("metric: ")?.strip_prefix(name_and_labels)?;
        rest.trim().parse().ok()
    })
}

/// Adds the case to a scenario booted with [`super::ISOL23`].
pub fn add(s: &mut Scenario) {
    s.need_binaries(&["isold", "isol-tlb", "/usr/bin/oslat"]);
    s.timeout += STEP_TIMEOUT;
    s.step_with_timeout(
        STEP,
        "taskset -pc 0-1 $$ >/dev/null\nnoise_case",
        STEP_TIMEOUT,
        vec![
            Expect::field("ledger_recording", "yes"),
            Expect::field("noise_rc", "0"),
            // Its culprits come once it records: a start that took longer missed them.
            Expect::that(
                "the one-time isold noise records within 120 s of its start",
                |o: &StepOutput| match o.field("noise_started_after") {
                    Some(v) if v.parse::<f64>().is_ok() => Ok(()),
                    other => Err(format!(
                        "started after {other:?}; its standard error: {:?}",
                        noise_err(o)
                    )),
                },
            ),
            Expect::field("daemon_noise_rc", "0"),
            Expect::field("since_rc", "0"),
            Expect::field("since_window", "yes"),
            Expect::field("stopped_rc", "3"),
            Expect::field("restore_rc", "0"),
            // Watching does not disturb: the reader polls from CPUs 0-1.
            Expect::that(
                "idle CPU 2 takes no more interrupts while isold's ledger records",
                |o: &StepOutput| match (num(o, "cpu2_irqs_ledger_on"), num(o, "cpu2_irqs_ledger_off")) {
                    (Ok(on), Ok(off)) if on <= off + 2.0 => Ok(()),
                    other => Err(format!("on, off = {other:?}")),
                },
            ),
            Expect::that(
                "the daemon's ledger counts IRQ 4 ttyS0 on CPU 3 as the kernel does, within 10 %, with a duration",
                |o: &StepOutput| {
                    let d = daemon_delta(o, 3, &|n| n == "IRQ 4 ttyS0")?;
                    within_10_percent("IRQ 4 on CPU 3", num(o, "irq4_cpu3")?, d, 8.0)
                },
            ),
            Expect::that(
                "the daemon's ledger names the sibling thread's TLB shootdowns on CPU 2 as the kernel counts them, within 10 %",
                |o: &StepOutput| {
                    let d = daemon_delta(o, 2, &|n| n == "IPI TLB shootdown")?;
                    // 800 unmaps asked; a loaded host makes fewer in the 4 s.
                    within_10_percent("TLB on CPU 2", num(o, "tlb_cpu2")?, d, 50.0)
                },
            ),
            Expect::that(
                "the daemon's ledger names the shell pinned to CPU 3 and CPU 3's kworker, with their time",
                |o: &StepOutput| {
                    let sh = daemon_delta(o, 3, &pinned_shell)?;
                    let kw = daemon_delta(o, 3, &|n| n.starts_with("kernel thread kworker/3:"))?;
                    if sh.0 >= 10.0 && sh.1 > 0.0 && kw.0 >= 5.0 && kw.1 > 0.0 {
                        Ok(())
                    } else {
                        Err(format!("pinned shell {sh:?}, kworker/3 {kw:?}"))
                    }
                },
            ),
            // Between the ledger's two reads, both past oslat's start-up: while oslat sets up,
            // its main thread runs on CPU 3 before it moves to CPU 0, and the ledger, which
            // takes the thread that ran most there for the workload, once counted the worker
            // that took over from it (57 us, on a loaded host, 2026-12-05).
            Expect::that("oslat's measuring thread, the workload, is no noise while it measures", |o: &StepOutput| {
                let worker = format!("oslat (pid {})", o.field("oslat_worker").ok_or("no oslat_worker")?);
                let oslat = daemon_delta(o, 3, &|n| n == worker)?;
                let spinner = daemon_delta(o, 2, &|n| n.starts_with("isol-tlb"))?;
                if oslat.0 == 0.0 && spinner.0 == 0.0 {
                    Ok(())
                } else {
                    Err(format!("oslat {oslat:?}, isol-tlb {spinner:?}"))
                }
            }),
            Expect::that(
                "the one-time isold noise names the same culprits, and its longest interruption of CPU 3 is no longer than oslat's maximum",
                |o: &StepOutput| {
                    let j = json(o, "noise.json").ok_or("no one-time ledger")?;
                    let c = cpu(&j, 3).ok_or("no CPU 3")?;
                    let longest_us = c["longest_seconds"].as_f64().unwrap_or(-1.0) * 1e6;
                    let max_us = num(o, "oslat_max_us")?;
                    let irq = sum(&j, 3, &|n| n == "IRQ 4 ttyS0").0;
                    let tlb = sum(&j, 2, &|n| n == "IPI TLB shootdown").0;
                    let sh = sum(&j, 3, &pinned_shell).0;
                    let src = c["longest_source"].as_str().unwrap_or_default();
                    // oslat prints whole microseconds; under TCG with the host loaded (the
                    // suite boots two guests at once) oslat's TSC-timed gaps and the trace clock
                    // were seen 44 % apart (12.9 ms timed, 9.0 ms reported): half again is
                    // allowed. On hardware the two agree to the microsecond.
                    if longest_us > 0.0 && longest_us <= 1.5 * max_us + 1.0 && irq > 0.0 && tlb > 0.0 && sh > 0.0 {
                        Ok(())
                    } else {
                        Err(format!(
                            "longest {longest_us:.1} us ({src}), oslat {max_us} us; IRQ 4 {irq}, TLB {tlb}, shell {sh}; recording after {:?} s; its standard error: {:?}",
                            o.field("noise_started_after"),
                            noise_err(o)
                        ))
                    }
                },
            ),
            Expect::that(
                "the metrics time and name the culprits",
                |o: &StepOutput| {
                    let irq = metric(o, r#"isold_cpu_noise_seconds_total{cpu="3",kind="irq",source="IRQ 4 ttyS0"}"#);
                    let tlb = metric(o, r#"isold_cpu_noise_events_total{cpu="2",kind="ipi",source="IPI TLB shootdown"}"#);
                    // The pinned shell's threads, by pid or folded into "other".
                    let threads: f64 = o
                        .stdout
                        .lines()
                        .filter_map(|l| {
                            let rest = l.strip_prefix(r#"metric: isold_cpu_noise_seconds_total{cpu="3",kind="thread",source=""#)?;
                            let (name, v) = rest.split_once("\"} ")?;
                            (pinned_shell(name) || name == "other").then(|| v.trim().parse::<f64>().ok()).flatten()
                        })
                        .sum();
                    let kernel_tlb = num(o, "tlb_cpu2")?;
                    match (irq, tlb) {
                        (Some(i), Some(t)) if i > 0.0 && t >= 0.9 * kernel_tlb && kernel_tlb >= 50.0 && threads > 0.0 => Ok(()),
                        other => Err(format!("IRQ 4 seconds, TLB events = {other:?}, the shell's seconds {threads}")),
                    }
                },
            ),
            Expect::that(
                "the ledger counts the threads that came on CPU 3 as foreign context switches (the pinned shell's ten wake-ups at least)",
                |o: &StepOutput| match metric(o, r#"isold_cpu_foreign_context_switches_total{cpu="3"}"#) {
                    Some(n) if n >= 10.0 => Ok(()),
                    other => Err(format!("isold_cpu_foreign_context_switches_total{{cpu=\"3\"}} = {other:?}")),
                },
            ),
            Expect::output_has("human: CPU 3: "),
            Expect::output_has("IPI TLB shootdown"),
            Expect::output_has("status: "),
            Expect::output_has("is not running"),
            Expect::that("no tracefs instance is left", |o: &StepOutput| {
                match o.field("instances_after") {
                    Some(v) if !v.contains("isold-noise") => Ok(()),
                    other => Err(format!("instances_after = {other:?}")),
                }
            }),
        ],
    );
}

/// The rates of TLB shootdowns the benchmark asks of CPU 3 (per second).
pub const BENCH_RATES: [u32; 2] = [1_000, 10_000];

/// scripts/bench-noise: the ledger's cost in `isold run` on one kernel (ISOL23), CPU 3 idle
/// and then interrupted at each of [`BENCH_RATES`] (`noise_bench` in tests/guest/lib.sh).
pub fn bench_scenario(role: super::KernelRole) -> Scenario {
    let mut s = Scenario::new(
        &format!("{}-noise-bench", role.as_str()),
        role,
        super::ISOL23,
    );
    s.binaries.extend(["isold", "isol-tlb"].map(String::from));
    s.timeout += Duration::from_secs(600);
    // TASKISOL_BENCH_NOISE_RATES="" measures the idle window alone (a profile of the daemon).
    let rates: Vec<String> = match std::env::var("TASKISOL_BENCH_NOISE_RATES") {
        Ok(r) => r.split_whitespace().map(str::to_string).collect(),
        Err(_) => BENCH_RATES.iter().map(u32::to_string).collect(),
    };
    // TASKISOL_BENCH_NOISE_STALLS=on: the stall guard on as well (the whole daemon idle).
    let stalls = std::env::var("TASKISOL_BENCH_NOISE_STALLS").unwrap_or_else(|_| "off".into());
    s.step_with_timeout(
        "noise_bench",
        &format!(
            "taskset -pc 0-1 $$ >/dev/null\nNB_STALLS={} noise_bench {}",
            if stalls == "on" { "on" } else { "off" },
            rates.join(" ")
        ),
        Duration::from_secs(400),
        vec![Expect::exit(0)],
    );
    s
}

/// The benchmark's table (BENCHMARKS.md's form).
pub fn bench_report(outcome: &super::Outcome) -> String {
    let get = |key: &str| {
        outcome
            .outputs
            .get("noise_bench")
            .and_then(|o| o.field(key).map(str::to_string))
            .unwrap_or_else(|| "?".into())
    };
    let mut t = String::from(
        "| CPU 3 | its interrupts / s (TLB shootdowns among them) | the ledger's interruptions of CPU 3 / s | ledger thread, ms of CPU / s | isold in all, ms / s |\n|---|---|---|---|---|\n",
    );
    let mut row = |name: &str, what: &str| {
        t.push_str(&format!(
            "| {what} | {} ({}) | {} | {} | {} |\n",
            get(&format!("{name}_cpu3_irqs_per_s")),
            get(&format!("{name}_cpu3_tlb_per_s")),
            get(&format!("{name}_ledger_events_per_s")),
            get(&format!("{name}_ledger_ms_per_s")),
            get(&format!("{name}_isold_ms_per_s")),
        ));
    };
    row("idle", "idle");
    for r in BENCH_RATES {
        row(
            &format!("rate{r}"),
            &format!("{r} unmaps / s by a sibling thread"),
        );
    }
    t
}

/// The step that restarts the daemon under a busy isolated CPU.
pub const RESTART_STEP: &str = "isold_restart_and_kill9_send_no_text_patching_ipis";

/// The time the restart step may take (TCG: three windows and three starts of isold).
pub const RESTART_TIMEOUT: Duration = Duration::from_secs(180);

/// Each window's length, seconds (the restart's own time is included in its window).
const RESTART_WINDOW_S: u32 = 6;

/// The functions that sent an IPI to CPU 2 or 3 in a window: (function, count).
fn ipi_sites(o: &StepOutput, window: &str) -> Vec<(String, u64)> {
    let prefix = format!("{window}_site: ");
    o.stdout
        .lines()
        .filter_map(|l| {
            let (n, site) = l.strip_prefix(&prefix)?.trim().split_once(' ')?;
            let func = site.split('+').next().unwrap_or(site).to_string();
            Some((func, n.parse().ok()?))
        })
        .collect()
}

/// A restart or a kill -9 of the daemon against the control window: every function that sent
/// an IPI to the isolated CPUs also sent one in the control window, except the PM QoS
/// request's lapse (`wake_up_if_idle`: the harness has no systemd, whose fd store keeps the
/// request across a restart); and no CPU took more than three times the control's rate plus 10.
fn no_more_ipis_than_control(o: &StepOutput, window: &str) -> Result<(), String> {
    if o.field("ipi_sites") == Some("yes") {
        let control: Vec<String> = ipi_sites(o, "control").into_iter().map(|s| s.0).collect();
        let new: Vec<(String, u64)> = ipi_sites(o, window)
            .into_iter()
            .filter(|(f, _)| !control.contains(f) && f != "wake_up_if_idle")
            .collect();
        if !new.is_empty() {
            return Err(format!(
                "{window}: IPIs from {new:?}, none of them in the control window"
            ));
        }
    }
    let secs = |w: &str| num(o, &format!("{w}_seconds"));
    for cpu in [2, 3] {
        let control = num(o, &format!("control_cpu{cpu}"))?;
        let got = num(o, &format!("{window}_cpu{cpu}"))?;
        let allowed = 3.0 * control * secs(window)? / secs("control")? + 10.0;
        if got > allowed {
            return Err(format!(
                "{window}: CPU {cpu} took {got} IPIs (control {control} in {} s, allowed {allowed:.0})",
                secs("control")?
            ));
        }
    }
    Ok(())
}

/// The daemon stopped (SIGTERM) and started, then killed (-9) and started, while a SCHED_FIFO
/// loop holds isolated CPU 3: the noise ledger's tracefs instance outlives the daemon and the
/// next start adopts it, so neither sends the isolated CPUs the text-patching IPIs of turning
/// trace events off and on (588 of them per restart on 6.12-rt before, 2026-12-06); `isold
/// restore` removes the instance. The guest side is `restart_case` in tests/guest/lib.sh.
pub fn add_restart(s: &mut Scenario) {
    s.need_binaries(&["isold", "chisol"]);
    s.timeout += RESTART_TIMEOUT;
    s.step_with_timeout(
        RESTART_STEP,
        &format!("taskset -pc 0-1 $$ >/dev/null\nrestart_case {RESTART_WINDOW_S}"),
        RESTART_TIMEOUT,
        vec![
            Expect::field("first_recording", "yes"),
            Expect::field("adopted_after_restart", "yes"),
            Expect::field("adopted_after_kill9", "yes"),
            Expect::field("restore_rc", "0"),
            Expect::that(
                "a restart sends the isolated CPUs no IPI the control window has not",
                |o: &StepOutput| no_more_ipis_than_control(o, "restart"),
            ),
            Expect::that(
                "a kill -9 and a start send the isolated CPUs no IPI the control window has not",
                |o: &StepOutput| no_more_ipis_than_control(o, "kill9"),
            ),
            Expect::that(
                "the instance outlives a stop and `isold restore` removes it",
                |o: &StepOutput| match (
                    o.field("instances_after_stop"),
                    o.field("instances_after_restore"),
                ) {
                    (Some(stop), Some(restore))
                        if stop.contains("isold-noise-") && !restore.contains("isold-noise") =>
                    {
                        Ok(())
                    }
                    other => Err(format!("after stop, after restore = {other:?}")),
                },
            ),
        ],
    );
}
