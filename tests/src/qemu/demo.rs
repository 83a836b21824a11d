//! scripts/demo: boot the 6.12-rt guest with isolation, show what disturbs the isolated CPUs,
//! then run a busy SCHED_FIFO workload there with chisol and show where it ran.

use std::time::Duration;

use super::{hotplug_virtio_blk, run, Expect, HarnessError, KernelRole, Scenario, ISOL23};

const DEMO_SH: &str = include_str!("../../guest/demo.sh");

fn script(call: &str) -> String {
    format!("ISOLATED=2-3\n{DEMO_SH}\n{call}\n")
}

/// Runs the demo, printing for a human; `Ok(false)` when a step failed.
pub fn run_demo() -> Result<bool, HarnessError> {
    let mut s = Scenario::new("demo", KernelRole::Rt612, ISOL23);
    s.binaries = vec!["chisol".into()];
    s.modules(&["virtio_pci", "virtio_blk"]);
    s.on_request("hotplug-blk", hotplug_virtio_blk("demoblk"));
    s.step("kernel", &script("demo_kernel"), vec![Expect::exit(0)]);
    s.step(
        "hot-plug",
        "echo 'hot-plugging a virtio-blk disk through QMP (one managed IRQ per vCPU queue)'\n\
         host_request hotplug-blk\n\
         wait_for 60 grep -q 'virtio.*req' /proc/interrupts && echo 'its IRQs appeared in /proc/interrupts'",
        vec![Expect::exit(0)],
    );
    s.step("irqs", &script("demo_irqs"), vec![Expect::exit(0)]);
    s.step(
        "interrupts-idle",
        &script("interrupt_deltas 2"),
        vec![Expect::exit(0)],
    );
    s.step("tasks", &script("demo_tasks"), vec![Expect::exit(0)]);
    s.step_with_timeout(
        "workload",
        &script("demo_workload"),
        Duration::from_secs(90),
        vec![
            Expect::exit(0),
            Expect::field("Cpus_allowed_list", "2-3"),
            Expect::field("policy", "1 (SCHED_FIFO)"),
            Expect::field("rt_priority", "1"),
        ],
    );

    let outcome = run(&s)?;
    println!(
        "== guest: {} {} under QEMU TCG, 4 vCPUs; booted in {}",
        outcome.kernel.package,
        outcome.kernel.version,
        outcome
            .boot_time
            .map(|d| format!("{:.1} s", d.as_secs_f64()))
            .unwrap_or_else(|| "?".into())
    );
    for step in &s.steps {
        println!("\n== {}", step.name);
        match outcome.outputs.get(&step.name) {
            Some(out) => {
                print!("{}", out.stdout);
                if !out.stderr.trim().is_empty() {
                    print!("{}", out.stderr);
                }
            }
            None => println!("(no result)"),
        }
    }
    println!(
        "\n== guest files (console log, results, initramfs): {}",
        outcome.workdir.display()
    );
    for f in &outcome.failures {
        println!("FAILED: {f}");
    }
    Ok(outcome.failures.is_empty())
}
