//! The seed's case on a kernel with the task-isolation interface (the project's own 6.1,
//! `KernelRole::Isol61`), and its counterpart on Debian's stock 6.1: with RT throttling off and
//! a SCHED_FIFO measuring thread on isolated CPU 3, `echo 1 > /proc/sys/vm/stat_refresh` is
//! timed, CPU 3's workqueue work is traced, and the threads' `/proc/<tid>/task_isolation` read.
//!
//! - `chisol -q vmstat_sync -I conf isol-meter -f 1 -c 3`: the seed's line with our meter,
//!   whose measuring thread activates the quiesce itself and whose main thread does not; the
//!   write returns within a second, and no `vmstat_update` runs on CPU 3 while it measures.
//! - `chisol -q vmstat_sync -a -I active oslat -f 1 -c 3`: Debian's unmodified oslat, every
//!   thread active from the start.
//! - `isol-meter -f 1 -c 3` without chisol: the same workload that did not ask; what the write
//!   does then is reported, whichever it is.
//! - With a SCHED_OTHER meter that allocates a page every 100 ms (`-m 100`), with and without
//!   the quiesce: whether `vmstat_update` runs on CPU 3, how long each run took, and the meter's
//!   maximum: the seed's question of what vmstat work costs on an isolated CPU.
//!
//! The guest side is `quiesce_case` in tests/guest/lib.sh.

use std::time::Duration;

use super::seed::secs;
use super::{Expect, Scenario, StepOutput};

/// How long the write may stay blocked before it is judged (the stock kernel's hang window).
pub const WINDOW_S: u32 = 15;
/// "Returns within a second" (the seed's patched kernel), measured from the shell.
pub const PROMPT_S: f64 = 1.0;

/// `/proc/<tid>/task_isolation` of a thread that configured and activated the quiesce, with
/// "|" for its newlines (as `quiesce_case` prints it).
pub const ACTIVE: &str =
    "Configured state: quiesce |Active state: quiesce |Quiescing: vmstat_sync |";
/// Configured, not active.
pub const CONFIGURED: &str =
    "Configured state: quiesce |Active state: none |Quiescing: vmstat_sync |";
/// No isolation state.
pub const NONE: &str = "Configured state: none |Active state: none |Quiescing: none |";

/// The step names.
pub const METER_CONF: &str = "quiesce_meter_conf_measuring_thread_activates";
pub const OSLAT_ACTIVE: &str = "quiesce_oslat_active_unmodified";
pub const NOT_ASKED: &str = "quiesce_not_asked";
pub const OTHER_WITHOUT: &str = "vmstat_work_sched_other_without_quiesce";
pub const OTHER_WITH: &str = "vmstat_work_sched_other_with_quiesce";
pub const STOCK_OSLAT: &str = "seed_oslat_stock_kernel";

/// What one `quiesce_case` run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    pub returned_with_loop_running: bool,
    pub write_s: Option<f64>,
    pub blocked_s: Option<f64>,
    /// `vmstat_update` runs on CPU 3 from the measuring thread's start to the write's end.
    pub vmstat_updates: u64,
    /// How long each `vmstat_update` on CPU 3 ran, in microseconds (the whole run).
    pub vmstat_update_us: Vec<f64>,
    /// The workload's longest gap (isol-meter's `max_us`, oslat's `Maximum`), in microseconds.
    pub max_us: Option<f64>,
}

impl Measured {
    pub fn from_output(out: &StepOutput) -> Result<Self, String> {
        let returned_with_loop_running = match out.field("returned_with_loop_running") {
            Some("yes") => true,
            Some("no") => false,
            other => return Err(format!("returned_with_loop_running = {other:?}")),
        };
        let vmstat_updates = out
            .field("cpu3_vmstat_update_total")
            .and_then(|v| v.parse().ok())
            .ok_or("no cpu3_vmstat_update_total")?;
        let vmstat_update_us = out
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix("vmstat_update_us="))
            .filter_map(|v| v.parse().ok())
            .collect();
        Ok(Self {
            returned_with_loop_running,
            write_s: secs(out, "write_seconds")?,
            blocked_s: secs(out, "still_blocked_after")?,
            vmstat_updates,
            vmstat_update_us,
            max_us: workload_max_us(out),
        })
    }

    /// One line for a human.
    pub fn summary(&self) -> String {
        let write = match (
            self.returned_with_loop_running,
            self.write_s,
            self.blocked_s,
        ) {
            (true, Some(w), _) => format!("stat_refresh returned in {w:.2} s"),
            (_, _, b) => format!(
                "stat_refresh still blocked after {} s",
                b.map_or_else(|| "?".into(), |b| format!("{b:.2}"))
            ),
        };
        let runs = if self.vmstat_update_us.is_empty() {
            String::new()
        } else {
            let max = self.vmstat_update_us.iter().copied().fold(0.0, f64::max);
            format!(" (longest {max:.1} us)")
        };
        format!(
            "{write}; vmstat_update ran {} time(s) on CPU 3{runs}; the workload's maximum {}",
            self.vmstat_updates,
            self.max_us
                .map_or_else(|| "?".into(), |m| format!("{m:.1} us"))
        )
    }
}

/// isol-meter's JSON line (`out: {"cpu":3,...,"max_us":..}`) or oslat's `Maximum:` line.
fn workload_max_us(out: &StepOutput) -> Option<f64> {
    for line in out.stdout.lines() {
        let Some(rest) = line.strip_prefix("out: ") else {
            continue;
        };
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(rest) {
            if v["cpu"] == 3 {
                return v["max_us"].as_f64();
            }
        }
        if let Some(m) = rest.trim_start().strip_prefix("Maximum:") {
            return m.split_whitespace().next()?.parse().ok();
        }
    }
    None
}

/// isol-meter's JSON line for CPU 3.
fn meter_line(out: &StepOutput) -> Result<serde_json::Value, String> {
    out.stdout
        .lines()
        .filter_map(|l| l.strip_prefix("out: "))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["cpu"] == 3)
        .ok_or_else(|| "no isol-meter result for CPU 3".to_string())
}

fn returns_promptly() -> Expect {
    Expect::that(
        &format!("stat_refresh returns within {PROMPT_S} s with the workload running on CPU 3"),
        |out: &StepOutput| {
            let m = Measured::from_output(out)?;
            match (m.returned_with_loop_running, m.write_s) {
                (true, Some(w)) if w <= PROMPT_S => Ok(()),
                _ => Err(m.summary()),
            }
        },
    )
}

fn no_vmstat_update() -> Expect {
    Expect::that(
        "no vmstat_update runs on CPU 3 while the quiesce is active",
        |out: &StepOutput| {
            let m = Measured::from_output(out)?;
            match (out.field("cpu3_vmstat_update_quiet"), m.vmstat_updates) {
                (Some("0"), 0) => Ok(()),
                (quiet, total) => Err(format!(
                    "{quiet:?} in the quiet 3 s, {total} until the write ended"
                )),
            }
        },
    )
}

fn fifo_on_cpu3() -> Vec<Expect> {
    vec![
        Expect::field("measuring_cpus", "3"),
        Expect::field("measuring_policy", "1"),
        Expect::field("measuring_rt_priority", "1"),
        Expect::field("measuring_state_then", "R"),
        Expect::field("measuring_cpu_then", "3"),
    ]
}

/// The write's end after the workload stopped, and the workload's clean exit.
fn ends_cleanly() -> Vec<Expect> {
    vec![Expect::field("write_rc", "0"), Expect::exit(0)]
}

/// How long the SCHED_OTHER cases count CPU 3's work before the write: about one
/// `vmstat_update` a second (vm.stat_interval) without the quiesce.
pub const OTHER_QUIET_S: u32 = 10;

fn step(s: &mut Scenario, name: &str, policy: u8, workload: &str, expects: Vec<Expect>) {
    // SCHED_OTHER: long enough to see vmstat_update run a few times (or not).
    let quiet = if policy == 0 { OTHER_QUIET_S } else { 3 };
    // The window, the counting, the workload's start and stop, the wait for the write.
    let timeout = Duration::from_secs(u64::from(WINDOW_S + quiet) + 90);
    s.step_with_timeout(
        name,
        &format!("QUIET_S={quiet}\nquiesce_case {WINDOW_S} {policy} {workload}"),
        timeout,
        expects,
    );
    s.step(
        &format!("{name}_cleanup"),
        "quiesce_cleanup\n[ -d /sys/kernel/tracing/instances/quiesce ] && echo instance=left || echo instance=gone\necho sched_rt_runtime_us=$(cat /proc/sys/kernel/sched_rt_runtime_us)",
        vec![
            Expect::field("instance", "gone"),
            Expect::that("RT throttling back on", |out: &StepOutput| {
                match out.field("sched_rt_runtime_us") {
                    Some("-1") | None => Err(format!("{:?}", out.field("sched_rt_runtime_us"))),
                    Some(_) => Ok(()),
                }
            }),
        ],
    );
}

/// The meter's result line says it measured on CPU 3 and activated `what`.
fn meter_activated(what: &'static str) -> Expect {
    Expect::that(
        &format!("isol-meter measured on CPU 3 and its measuring thread activated {what}"),
        move |out: &StepOutput| {
            let v = meter_line(out)?;
            match (v["activated"].as_str(), v["loops"].as_u64()) {
                (Some(a), Some(l)) if a == what && l > 0 => Ok(()),
                _ => Err(format!("{v}")),
            }
        },
    )
}

/// Adds the patched kernel's cases to a scenario booted with [`super::ISOL23`] on
/// [`super::KernelRole::Isol61`], before anything takes CPU 3 from the root cgroup.
pub fn add(s: &mut Scenario) {
    s.need_binaries(&["isol-meter", "/usr/bin/oslat"]);
    let mut conf = vec![
        Expect::field("measuring_state", ACTIVE),
        Expect::field("main_state", CONFIGURED),
        returns_promptly(),
        no_vmstat_update(),
        meter_activated("quiesce"),
    ];
    conf.extend(fifo_on_cpu3());
    conf.extend(ends_cleanly());
    step(
        s,
        METER_CONF,
        1,
        "chisol -q vmstat_sync -I conf isol-meter -f 1 -c 3 -D 120 -j",
        conf,
    );

    let mut oslat = vec![
        Expect::field("measuring_state", ACTIVE),
        // -I active: every thread, the main one too, inherits the activation.
        Expect::field("main_state", ACTIVE),
        returns_promptly(),
        no_vmstat_update(),
        Expect::that("oslat printed its maximum", |out: &StepOutput| {
            workload_max_us(out)
                .map(|_| ())
                .ok_or_else(|| "no Maximum line".into())
        }),
    ];
    oslat.extend(fifo_on_cpu3());
    oslat.extend(ends_cleanly());
    step(
        s,
        OSLAT_ACTIVE,
        1,
        "chisol -q vmstat_sync -a -I active oslat -f 1 -c 3 -D 120",
        oslat,
    );

    // The same meter, not asked to quiesce: nothing configured, nothing activated. Whether the
    // write hangs depends on CPU 3's counters when its tick stopped; the step reports which.
    let mut bare = vec![
        Expect::field("measuring_state", NONE),
        Expect::field("main_state", NONE),
        meter_activated("none"),
    ];
    bare.extend(fifo_on_cpu3());
    bare.extend(ends_cleanly());
    step(s, NOT_ASKED, 1, "isol-meter -f 1 -c 3 -D 120 -j", bare);

    // SCHED_OTHER, allocating every 100 ms: the vmstat work its system calls leave behind runs
    // on CPU 3 (and interrupts the meter) without the quiesce, and not with it.
    step(
        s,
        OTHER_WITHOUT,
        0,
        "isol-meter -c 3 -m 100 -D 120 -j",
        vec![
            Expect::field("measuring_state", NONE),
            Expect::that(
                "vmstat_update ran on CPU 3 behind the meter's allocations, every few seconds",
                |out: &StepOutput| {
                    let m = Measured::from_output(out)?;
                    if m.vmstat_updates >= 3 && !m.vmstat_update_us.is_empty() {
                        Ok(())
                    } else {
                        Err(m.summary())
                    }
                },
            ),
            meter_allocated(),
            Expect::field("write_rc", "0"),
            Expect::exit(0),
        ],
    );
    step(
        s,
        OTHER_WITH,
        0,
        "chisol -q vmstat_sync -I conf isol-meter -c 3 -m 100 -D 120 -j",
        vec![
            Expect::field("measuring_state", ACTIVE),
            Expect::field("main_state", CONFIGURED),
            no_vmstat_update(),
            meter_allocated(),
            meter_activated("quiesce"),
            Expect::field("write_rc", "0"),
            Expect::exit(0),
        ],
    );
}

fn meter_allocated() -> Expect {
    Expect::that(
        "the meter allocated every 100 ms while it measured",
        |out: &StepOutput| {
            let v = meter_line(out)?;
            match v["allocations"].as_u64() {
                Some(n) if n >= 20 => Ok(()),
                _ => Err(format!("{v}")),
            }
        },
    )
}

/// The stock kernel's side of the seed's line: `oslat -f 1 -c 3` on isolated CPU 3 and the
/// write blocked for the whole window.
pub fn add_stock(s: &mut Scenario) {
    s.need_binaries(&["/usr/bin/oslat"]);
    let window = f64::from(WINDOW_S);
    let mut expects = vec![
        Expect::field("measuring_state", "absent"),
        Expect::that(
            &format!("stat_refresh blocked for {WINDOW_S} s beside oslat, returning once it stops"),
            move |out: &StepOutput| {
                let m = Measured::from_output(out)?;
                match (m.returned_with_loop_running, m.blocked_s) {
                    (false, Some(b)) if b >= window => Ok(()),
                    _ => Err(m.summary()),
                }
            },
        ),
    ];
    expects.extend(fifo_on_cpu3());
    expects.extend(ends_cleanly());
    step(s, STOCK_OSLAT, 1, "oslat -f 1 -c 3 -D 120", expects);
}

/// Each case's step and what it runs, for a human.
const CASES: [(&str, &str); 6] = [
    (STOCK_OSLAT, "stock 6.1: oslat -f 1 -c 3"),
    (
        METER_CONF,
        "chisol -q vmstat_sync -I conf isol-meter -f 1 -c 3",
    ),
    (
        OSLAT_ACTIVE,
        "chisol -q vmstat_sync -a -I active oslat -f 1 -c 3",
    ),
    (NOT_ASKED, "isol-meter -f 1 -c 3 (not asked)"),
    (
        OTHER_WITHOUT,
        "isol-meter -c 3 -m 100 (SCHED_OTHER, allocating)",
    ),
    (
        OTHER_WITH,
        "chisol -q vmstat_sync -I conf isol-meter -c 3 -m 100",
    ),
];

/// What each case measured, for a human (the test's log, scripts/demo, BENCHMARKS.md).
pub fn report(outcome: &super::Outcome) -> String {
    let mut text = String::new();
    for (name, label) in CASES {
        if let Some(out) = outcome.outputs.get(name) {
            let m = Measured::from_output(out)
                .map_or_else(|e| format!("no measurement: {e}"), |m| m.summary());
            text.push_str(&format!("  {label}\n    {m}\n"));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measurements_from_a_meter_run() {
        let out = StepOutput {
            rc: 0,
            stdout: "returned_with_loop_running=yes\nwrite_seconds=0.12\ncpu3_vmstat_update_total=2\nvmstat_update_us=11.5\nvmstat_update_us=9.0\nout: {\"cpu\":3,\"tid\":9,\"activated\":\"none\",\"loops\":5,\"allocations\":0,\"min_us\":0.01,\"avg_us\":0.02,\"max_us\":31.25,\"hist_us\":[5]}\n".into(),
            stderr: String::new(),
        };
        let m = Measured::from_output(&out).unwrap();
        assert_eq!(m.write_s, Some(0.12));
        assert_eq!(m.vmstat_updates, 2);
        assert_eq!(m.vmstat_update_us, vec![11.5, 9.0]);
        assert_eq!(m.max_us, Some(31.25));
        assert_eq!(
            m.summary(),
            "stat_refresh returned in 0.12 s; vmstat_update ran 2 time(s) on CPU 3 (longest 11.5 us); the workload's maximum 31.2 us"
        );
    }

    #[test]
    fn oslat_maximum_is_read() {
        let out = StepOutput {
            rc: 0,
            stdout: "returned_with_loop_running=no\nstill_blocked_after=15.03\ncpu3_vmstat_update_total=0\nout:     Maximum:\t 148 (us)\n".into(),
            stderr: String::new(),
        };
        let m = Measured::from_output(&out).unwrap();
        assert_eq!(m.max_us, Some(148.0));
        assert!(!m.returned_with_loop_running);
    }
}
