//! The noise ledger on real kernels (`isold noise`): what it records and names on an isolated
//! CPU against what the kernel counted. The guest side is `noise_case` in tests/guest/lib.sh.

use serde_json::Value;

use super::{Expect, Scenario, StepOutput};

/// The step.
pub const STEP: &str = "isold_noise_names_a_serial_irq_on_cpu3";

/// The ledger's JSON printed by the step.
pub fn json(out: &StepOutput) -> Option<Value> {
    let (_, rest) = out.stdout.split_once("--- noise json\n")?;
    let (j, _) = rest.split_once("--- end\n")?;
    serde_json::from_str(j).ok()
}

fn cpu3(out: &StepOutput) -> Option<Value> {
    json(out)?["per_cpu"]
        .as_array()?
        .iter()
        .find(|c| c["cpu"] == 3)
        .cloned()
}

fn cpu3_source(out: &StepOutput, name: &str) -> Option<Value> {
    cpu3(out)?["sources"]
        .as_array()?
        .iter()
        .find(|s| s["source"].as_str() == Some(name))
        .cloned()
}

/// Adds the case to a scenario booted with [`super::ISOL23`].
pub fn add(s: &mut Scenario) {
    if !s.binaries.iter().any(|b| b == "isold") {
        s.binaries.push("isold".into());
    }
    s.step(
        STEP,
        "taskset -pc 0-1 $$ >/dev/null\nnoise_case",
        vec![
            Expect::field("noise_rc", "0"),
            Expect::that("the ledger's JSON has CPUs 2 and 3", |o: &StepOutput| {
                match json(o) {
                    Some(j) if j["per_cpu"][0]["cpu"] == 2 && j["per_cpu"][1]["cpu"] == 3 => {
                        Ok(())
                    }
                    other => Err(format!("json = {other:?}")),
                }
            }),
            // Watching does not disturb: the reader polls from CPUs 0-1.
            Expect::that(
                "idle CPU 2 takes no more interrupts while the ledger records",
                |o: &StepOutput| {
                    let n = |k: &str| o.field(k).and_then(|v| v.parse::<i64>().ok());
                    match (n("cpu2_irqs_ledger_on"), n("cpu2_irqs_ledger_off")) {
                        (Some(on), Some(off)) if on <= off + 2 => Ok(()),
                        other => Err(format!("on, off = {other:?}")),
                    }
                },
            ),
            Expect::that(
                "the ledger counts IRQ 4 ttyS0 on CPU 3 as the kernel does, within 10 %, with a duration",
                |o: &StepOutput| {
                    let kernel: f64 = o
                        .field("irq4_cpu3")
                        .and_then(|v| v.parse().ok())
                        .ok_or("no irq4_cpu3")?;
                    let src = cpu3_source(o, "IRQ 4 ttyS0").ok_or("no IRQ 4 ttyS0 source")?;
                    let events = src["events"].as_f64().unwrap_or(-1.0);
                    let secs = src["seconds"].as_f64().unwrap_or(0.0);
                    // QEMU's UART interrupts a few times for 8 KB (measured 3-4).
                    if kernel >= 2.0 && (events - kernel).abs() <= 0.1 * kernel && secs > 0.0 {
                        Ok(())
                    } else {
                        Err(format!("kernel {kernel}, ledger {events} events, {secs} s"))
                    }
                },
            ),
            Expect::that(
                "the busy loop (the workload) is no noise",
                |o: &StepOutput| {
                    let c = cpu3(o).ok_or("no CPU 3")?;
                    let loud = c["sources"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|s| s["source"].as_str().is_some_and(|n| n.starts_with("sh (pid")));
                    if loud {
                        Err("the loop is listed".into())
                    } else {
                        Ok(())
                    }
                },
            ),
            Expect::that(
                "CPU 3's kworker is named, with its time",
                |o: &StepOutput| {
                    let c = cpu3(o).ok_or("no CPU 3")?;
                    let kw = c["sources"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .find(|s| {
                            s["source"]
                                .as_str()
                                .is_some_and(|n| n.starts_with("kernel thread kworker/3:"))
                        })
                        .ok_or("no kworker/3 source")?;
                    match (kw["events"].as_u64(), kw["seconds"].as_f64(), kw["kind"].as_str()) {
                        (Some(n), Some(t), Some("thread")) if n >= 5 && t > 0.0 => Ok(()),
                        other => Err(format!("kworker/3: {other:?}")),
                    }
                },
            ),
            Expect::that(
                "the longest interruption is one of the sources, and no longer than their time",
                |o: &StepOutput| {
                    let c = cpu3(o).ok_or("no CPU 3")?;
                    let longest = c["longest_seconds"].as_f64().unwrap_or(-1.0);
                    let src = c["longest_source"].as_str().unwrap_or_default();
                    let s = cpu3_source(o, src).ok_or("longest_source is no source")?;
                    if longest > 0.0 && s["longest_seconds"].as_f64() == Some(longest) {
                        Ok(())
                    } else {
                        Err(format!("longest {longest} from {src:?}"))
                    }
                },
            ),
            Expect::output_has("human: CPU 3: "),
            Expect::output_lacks("isold-noise"),
        ],
    );
}
