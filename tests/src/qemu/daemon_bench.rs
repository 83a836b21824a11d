//! scripts/bench-daemon: `isold run` measured as the service it ships as, in the Debian
//! guest (6.12-rt under TCG, no isolation arguments, `isolated_cpus = "2-3"`): the reaction to
//! 1000 exec'd wide tasks and to 20 IRQ moves and sysctl resets (`isol-drift`), its CPU time idle for 60 s and across a fork
//! storm of 10,000 processes, its memory, and the interrupts on CPUs 2-3 with it running and
//! with it stopped in place. The guest side is tests/guest/bench-daemon.sh.

use std::time::Duration;

use super::{run, Expect, HarnessError, Outcome, Scenario, ISOL23};

const BENCH_SH: &str = include_str!("../../guest/bench-daemon.sh");
const UNIT: &[u8] = include_bytes!("../../../dist/isold.service");

fn script(call: &str) -> String {
    format!("taskset -pc 0-1 $$ >/dev/null\n{BENCH_SH}\n{call}\n")
}

/// The whole benchmark without isolation arguments; with them (`isolcpus=managed_irq,domain`,
/// `nohz_full`, `rcu_nocbs`, `irqaffinity` for 2-3), only the interrupts on CPUs 2-3.
fn scenario(with_bootargs: bool) -> Scenario {
    let mut s = if with_bootargs {
        Scenario::debian("bench-daemon-bootargs", ISOL23)
    } else {
        Scenario::debian("bench-daemon", "")
    };
    s.timeout = Duration::from_secs(1800);
    s.binaries
        .extend(["isol-reaction", "isol-forkstorm", "isol-drift"].map(String::from));
    s.file("/etc/systemd/system/isold.service", 0o644, UNIT);
    let steps: [(&str, &str, u64); 7] = [
        ("setup", "bench_setup", 120),
        (
            "reaction",
            "isol-reaction 1000 0-3 2-3 1000 10 | grep -v '^task '\nsleep 0.5\nisold status | grep 'wide tasks narrowed'",
            900,
        ),
        (
            "irq",
            "isol-drift 20 5000 /proc/irq/4/smp_affinity_list=3 | grep -v '^trial '",
            120,
        ),
        (
            "sysctl",
            "isol-drift 20 5000 /proc/sys/vm/stat_interval=1 | grep -v '^trial '",
            120,
        ),
        ("idle", "bench_idle 60", 120),
        ("interrupts", "bench_interrupts 10", 180),
        ("storm", "bench_storm 10000", 600),
    ];
    for (name, call, secs) in steps {
        if with_bootargs && !matches!(name, "setup" | "interrupts") {
            continue;
        }
        s.step_with_timeout(
            name,
            &script(call),
            Duration::from_secs(secs),
            vec![Expect::exit(0)],
        );
    }
    s
}

fn field(o: &Outcome, step: &str, key: &str) -> String {
    o.outputs
        .get(step)
        .and_then(|out| out.field(key))
        .unwrap_or("?")
        .to_string()
}

/// Runs the boot; prints every step and the table; `Ok(false)` when a step failed.
pub fn run_bench(with_bootargs: bool) -> Result<bool, HarnessError> {
    let s = scenario(with_bootargs);
    let o = run(&s)?;
    println!("{}", o.summary());
    for step in &s.steps {
        println!("\n== {}", step.name);
        if let Some(out) = o.outputs.get(&step.name) {
            print!("{}{}", out.stdout, out.stderr);
        }
    }
    println!(
        "\n| what | figure |\n|---|---|\n\
         | exec'd wide task narrowed, from its execve ({} tasks) | median {} ms, p99 {} ms, {} within 20 ms |\n\
         | the same from the kernel's exec event, as isold measures it (`isold status`) | {} |\n\
         | IRQ 4 moved onto CPU 3, put back ({} moves at random phases, --interval 1) | median {} ms, max {} ms |\n\
         | vm.stat_interval reset, put back ({} resets) | median {} ms, max {} ms |\n\
         | isold's CPU time idle | {} ms in {} s |\n\
         | isold's CPU time across a fork storm of 10,000 processes ({} s) | {} ms |\n\
         | isold's resident memory: after start / after idle / after the storm (peak) | {} / {} / {} kB ({} kB) |\n\
         | interrupts per second on CPUs 2-3, isold running / stopped in place (twice) | {} / {}, {} / {} |",
        field(&o, "reaction", "count"),
        field(&o, "reaction", "median_ms"),
        field(&o, "reaction", "p99_ms"),
        field(&o, "reaction", "within_20ms"),
        o.outputs
            .get("reaction")
            .and_then(|out| out.stdout.lines().find(|l| l.contains("wide tasks narrowed")))
            .map_or("?", str::trim),
        field(&o, "irq", "put_back"),
        field(&o, "irq", "median_ms"),
        field(&o, "irq", "max_ms"),
        field(&o, "sysctl", "put_back"),
        field(&o, "sysctl", "median_ms"),
        field(&o, "sysctl", "max_ms"),
        field(&o, "idle", "idle_cpu_ms"),
        field(&o, "idle", "idle_s"),
        field(&o, "storm", "storm_s"),
        field(&o, "storm", "storm_cpu_ms"),
        field(&o, "setup", "rss_kb"),
        field(&o, "idle", "rss_kb"),
        field(&o, "storm", "rss_kb"),
        field(&o, "storm", "hwm_kb"),
        field(&o, "interrupts", "irqs_per_s_running"),
        field(&o, "interrupts", "irqs_per_s_stopped"),
        field(&o, "interrupts", "irqs_per_s_running2"),
        field(&o, "interrupts", "irqs_per_s_stopped2"),
    );
    for f in &o.failures {
        println!("FAILED: {f}");
    }
    Ok(o.failures.is_empty())
}
