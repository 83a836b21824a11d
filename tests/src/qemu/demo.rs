//! scripts/demo: boot the 6.12-rt guest with isolation, show what disturbs the isolated CPUs,
//! then run a busy SCHED_FIFO workload there with chisol and show where it ran; finally the
//! seed's stat_refresh case (see [`super::seed`]) on 6.12-rt and on a stock 6.1 guest booted
//! alongside, with chisol --fallback=native's decision on each.

use std::time::Duration;

use super::{hotplug_virtio_blk, run, seed, Expect, HarnessError, KernelRole, Scenario, ISOL23};

const DEMO_SH: &str = include_str!("../../guest/demo.sh");

fn script(call: &str) -> String {
    format!("ISOLATED=2-3\n{DEMO_SH}\n{call}\n")
}

/// How long the demo lets stock 6.1 show its blocked stat_refresh (the test suite waits 15 s).
const SEED_WINDOW_S: u32 = 10;

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
    seed::add(&mut s, SEED_WINDOW_S)?;

    // The same case on the stock kernel, booted at the same time: only the seed case runs.
    let mut stock = Scenario::new("demo-stock61", KernelRole::Stock61, ISOL23);
    stock.binaries = vec!["chisol".into()];
    seed::add(&mut stock, SEED_WINDOW_S)?;

    println!(
        "== booting 6.12-rt and stock 6.1 guests at once (software emulation: expect 20-60 s)"
    );
    let (outcome, stock_outcome) = std::thread::scope(|scope| {
        let other = scope.spawn(|| run(&stock));
        let rt = run(&s);
        (
            rt,
            other.join().expect("the stock 6.1 guest's thread panicked"),
        )
    });
    let (outcome, stock_outcome) = (outcome?, stock_outcome?);
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
        if step.name == seed::STEP || step.name == seed::CLEANUP_STEP {
            continue;
        }
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
        "\n== why this tool exists: the case that motivated task isolation\n\
         CPUs 2-3 isolated (isolcpus, nohz_full, rcu_nocbs), RT throttling off (sched_rt_runtime_us=-1),\n\
         a SCHED_FIFO busy loop on CPU 3 started with `chisol -f 1 -c 3`, then\n\
         `echo 1 > /proc/sys/vm/stat_refresh`, which queues vmstat work on every CPU and waits for it."
    );
    for o in [&stock_outcome, &outcome] {
        println!("\n{} {}:", o.kernel.package, o.kernel.version);
        print!("{}", seed::report(o));
    }
    println!(
        "\n== guest files (console log, results, initramfs): {} and {}",
        outcome.workdir.display(),
        stock_outcome.workdir.display()
    );
    for f in outcome.failures.iter().chain(&stock_outcome.failures) {
        println!("FAILED: {f}");
    }
    Ok(outcome.failures.is_empty() && stock_outcome.failures.is_empty())
}
