//! The seed's own case, on real kernels: the situation that motivated the task-isolation
//! patches. RT throttling off (`sched_rt_runtime_us=-1`), a SCHED_FIFO busy loop on isolated
//! CPU 3 started as a user would (`chisol -f 1 -c 3`), then `echo 1 > /proc/sys/vm/stat_refresh`,
//! which queues vmstat work on every CPU and waits for all of it. On Debian's stock 6.1 the
//! write stays blocked until the loop is killed (61 s when the guest waited 60 s): the kworker
//! of CPU 3 never gets the CPU. On 6.12-rt it returns in about a second with the loop still
//! running. `chisol --fallback=native` is asked about the same workload first and must decide
//! the way the kernel then behaves: refuse on 6.1, run on 6.12-rt.
//!
//! The guest side is `seed_stat_refresh` in tests/guest/lib.sh; the QEMU suite (tests/qemu.rs)
//! and the demo (scripts/demo) both add it with [`add`].

use std::time::Duration;

use super::{Expect, HarnessError, Kernel, KernelRole, Outcome, Scenario, StepOutput};

/// The step that runs the case.
pub const STEP: &str = "seed_stat_refresh_under_fifo_loop";
/// The step after it: kills a loop left behind by a killed step and restores RT throttling,
/// so that a hang cannot wedge the steps that follow on CPU 3.
pub const CLEANUP_STEP: &str = "seed_cleanup";
/// 6.12-rt must return within this. Measured 1.0 s under TCG; the bound leaves room for a
/// loaded host and stays well below any hang window.
pub const PROMPT_S: f64 = 5.0;
/// After the loop is killed, the blocked write must return within this (measured 0.26 s).
pub const AFTER_KILL_S: f64 = 10.0;

/// What the guest measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// The write returned while the loop was still running on CPU 3.
    pub returned_with_loop_running: bool,
    /// Start of the write to its return, when it returned with the loop running.
    pub write_s: Option<f64>,
    /// How long the write was seen blocked before the loop was killed.
    pub blocked_s: Option<f64>,
    /// Kill of the loop to the return of the write, when it was blocked.
    pub after_kill_s: Option<f64>,
}

/// A `key=seconds` line of the step's output, if there is one.
pub(super) fn secs(out: &StepOutput, key: &str) -> Result<Option<f64>, String> {
    match out.field(key) {
        None => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| format!("{key} = {v:?} is not a number of seconds")),
    }
}

impl Measured {
    pub fn from_output(out: &StepOutput) -> Result<Self, String> {
        let returned_with_loop_running = match out.field("returned_with_loop_running") {
            Some("yes") => true,
            Some("no") => false,
            other => return Err(format!("returned_with_loop_running = {other:?}")),
        };
        Ok(Self {
            returned_with_loop_running,
            write_s: secs(out, "write_seconds")?,
            blocked_s: secs(out, "still_blocked_after")?,
            after_kill_s: secs(out, "returned_after_kill")?,
        })
    }

    /// One line for a human: what a user at the shell would have seen.
    pub fn summary(&self) -> String {
        match (self.returned_with_loop_running, self.write_s) {
            (true, Some(w)) => format!("stat_refresh returned in {w:.2} s with the loop running"),
            _ => format!(
                "stat_refresh still blocked after {} s with the loop running; returned {} after the loop was killed",
                self.blocked_s
                    .map_or_else(|| "?".into(), |b| format!("{b:.2}")),
                self.after_kill_s
                    .map_or_else(|| "never".into(), |k| format!("{k:.2} s"))
            ),
        }
    }
}

/// What one boot showed, for a human (scripts/demo): the write's fate and chisol's decision.
pub fn report(outcome: &Outcome) -> String {
    let Some(out) = outcome.outputs.get(STEP) else {
        return "  (the seed case did not run)\n".into();
    };
    let fate =
        Measured::from_output(out).map_or_else(|e| format!("no measurement: {e}"), |m| m.summary());
    let decision = match out.field("native_fallback_rc") {
        Some("0") => "ran the workload",
        Some(_) => "refused (nothing started)",
        None => "did not run",
    };
    let mut text =
        format!("  {fate}\n  chisol -q vmstat_sync --fallback=native -f 1 -c 3 {decision}:\n");
    for said in out
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("native_fallback_says="))
    {
        text.push_str(&format!("    {said}\n"));
    }
    text
}

/// "6.1.0" from "6.1.0-57-amd64", "6.12.117" from "6.12.117+deb12-rt-amd64": the version
/// chisol reads from osrelease and names in its messages.
pub fn kernel_version(release: &str) -> &str {
    release
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .next()
        .unwrap_or(release)
}

/// What `chisol -q vmstat_sync --fallback=native -f 1 -c 3` must print on this kernel, whole.
fn fallback_message(role: KernelRole, version: &str) -> String {
    match role {
        KernelRole::Stock61 => format!(
            "chisol: task isolation interface not available: the kernel has no /proc/self/task_isolation (it needs the out-of-tree task-isolation patches); --fallback=native: no native vmstat protection: Linux {version} predates 6.5, whose vmstat_shepherd skips isolated CPUs"
        ),
        KernelRole::Isol61 | KernelRole::Isol61Deb => {
            unreachable!("the patched kernel's seed case is quiesce::add")
        }
        KernelRole::Rt612 | KernelRole::Gen7 | KernelRole::Rt7 => format!(
            "chisol: task isolation interface not available; native protection in effect: Linux {version} skips deferred vmstat work on isolated CPUs (vmstat_shepherd, 6.5+); CPUs 3 are isolated (3: isolcpus domain + nohz_full)"
        ),
    }
}

/// Adds the case (and its cleanup step) to a scenario booted with [`super::ISOL23`]. CPU 3
/// must still be in the root cgroup's cpuset: add it before an isolated partition takes it.
/// `hang_window_s`: how long the stock kernel's write must stay blocked to count as a hang.
pub fn add(s: &mut Scenario, hang_window_s: u32) -> Result<(), HarnessError> {
    let kernel = Kernel::locate(s.role)?;
    let version = kernel_version(&kernel.release).to_string();
    let role = s.role;
    let says = fallback_message(role, &version);
    let mut expects = vec![
        Expect::field("sched_rt_runtime_us", "-1"),
        Expect::that(
            &format!("chisol --fallback=native says exactly {says:?}"),
            move |out: &StepOutput| {
                let said: Vec<&str> = out
                    .stdout
                    .lines()
                    .filter_map(|l| l.strip_prefix("native_fallback_says="))
                    .collect();
                if said == [says.as_str()] {
                    Ok(())
                } else {
                    Err(format!("it said {said:?}"))
                }
            },
        ),
        Expect::field("loop_started", "yes"),
        Expect::field("loop_cpus", "3"),
        Expect::field("loop_policy", "1"),
        Expect::field("loop_rt_priority", "1"),
        // Where the loop was when the write was judged: running, on CPU 3.
        Expect::field("loop_state", "R"),
        Expect::field("loop_cpu", "3"),
        Expect::field("write_rc", "0"),
        // The kernel's own default back (950000 on 6.x; 7.x-rt boots with 1000000).
        Expect::that(
            "sched_rt_runtime_us restored to the value saved before",
            |out: &StepOutput| match (
                out.field("sched_rt_runtime_us_saved"),
                out.field("sched_rt_runtime_us_restored"),
            ) {
                (Some(a), Some(b)) if a == b && a != "-1" => Ok(()),
                other => Err(format!("saved, restored: {other:?}")),
            },
        ),
        Expect::exit(0),
    ];
    match role {
        KernelRole::Stock61 => {
            let window = f64::from(hang_window_s);
            expects.extend([
                Expect::field("native_fallback_rc", "1"),
                Expect::output_lacks("native_fallback_started"),
                Expect::that(
                    &format!(
                        "stat_refresh blocked for {hang_window_s} s while the loop runs, returning within {AFTER_KILL_S} s once it is killed"
                    ),
                    move |out: &StepOutput| {
                        let m = Measured::from_output(out)?;
                        match (m.returned_with_loop_running, m.blocked_s, m.after_kill_s) {
                            (false, Some(b), Some(k)) if b >= window && k < AFTER_KILL_S => Ok(()),
                            _ => Err(m.summary()),
                        }
                    },
                ),
            ]);
        }
        KernelRole::Isol61 | KernelRole::Isol61Deb => {
            unreachable!("the patched kernel's seed case is quiesce::add")
        }
        KernelRole::Rt612 | KernelRole::Gen7 | KernelRole::Rt7 => {
            expects.extend([
                Expect::field("native_fallback_rc", "0"),
                Expect::field("native_fallback_started", "yes"),
                Expect::that(
                    &format!("stat_refresh returns within {PROMPT_S} s with the loop running"),
                    |out: &StepOutput| {
                        let m = Measured::from_output(out)?;
                        match (m.returned_with_loop_running, m.write_s) {
                            (true, Some(w)) if w < PROMPT_S => Ok(()),
                            _ => Err(m.summary()),
                        }
                    },
                ),
            ]);
        }
    }
    // The window, the wait for the return after the kill (30 s at most) and chisol's start.
    let timeout = Duration::from_secs(u64::from(hang_window_s) + 60);
    s.step_with_timeout(
        STEP,
        &format!("seed_stat_refresh {hang_window_s}"),
        timeout,
        expects,
    );
    s.step(
        CLEANUP_STEP,
        "seed_cleanup\n\
         wait_for 30 test -e /tmp/seed.t1 && echo write=returned || echo write=blocked\n\
         _st=$(cat /proc/$(cat /tmp/seed.loop)/stat 2>/dev/null)\n\
         _st=${_st##*) }\n\
         echo loop_state=${_st%% *}\n\
         echo sched_rt_runtime_us=$(cat /proc/sys/kernel/sched_rt_runtime_us)\n\
         echo saved=$(cat /tmp/seed.rt_saved)",
        vec![
            Expect::field("write", "returned"),
            // Gone ("") or a zombie not yet reaped: not running on CPU 3 any more.
            Expect::that("the loop is gone", |out: &StepOutput| {
                match out.field("loop_state") {
                    Some("" | "Z") => Ok(()),
                    other => Err(format!("loop_state = {other:?}")),
                }
            }),
            Expect::that(
                "RT throttling as the kernel had it",
                |out: &StepOutput| match (out.field("saved"), out.field("sched_rt_runtime_us")) {
                    (Some(a), Some(b)) if a == b && a != "-1" => Ok(()),
                    other => Err(format!("saved, now: {other:?}")),
                },
            ),
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_as_chisol_prints_them() {
        assert_eq!(kernel_version("6.1.0-57-amd64"), "6.1.0");
        assert_eq!(kernel_version("6.12.117+deb12-rt-amd64"), "6.12.117");
    }

    #[test]
    fn measurements_are_read_from_the_step_output() {
        let out = StepOutput {
            rc: 0,
            stdout: "returned_with_loop_running=no\nstill_blocked_after=15.10\nreturned_after_kill=0.26\n"
                .into(),
            stderr: String::new(),
        };
        let m = Measured::from_output(&out).unwrap();
        assert_eq!(m.blocked_s, Some(15.1));
        assert_eq!(m.after_kill_s, Some(0.26));
        assert_eq!(m.write_s, None);
        assert_eq!(
            m.summary(),
            "stat_refresh still blocked after 15.10 s with the loop running; returned 0.26 s after the loop was killed"
        );
        let out = StepOutput {
            stdout: "returned_with_loop_running=maybe\n".into(),
            ..out
        };
        assert!(Measured::from_output(&out).is_err());
    }
}
