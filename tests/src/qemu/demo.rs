//! scripts/demo: the story a user wants to see, every number measured in the guests.
//!
//! 1. Debian's 6.12-rt booted without isolation arguments, made noisy (every IRQ on CPUs 2-3,
//!    busy and sleeping tasks allowed everywhere): `isold audit` of CPUs 2-3.
//! 2. `isold apply`, audit again: the IRQs and tasks are gone, the tick is still there.
//! 3. `isold bootargs`; the guest booted again with exactly those arguments, `isold apply`,
//!    audit again (idle); oslat (rt-tests) on CPU 3 with `isold noise` beside it: oslat's
//!    worst gap next to the ledger's longest interruption and what it was.
//! 4. A SCHED_FIFO workload on CPU 3 started with chisol, audited while it runs: the tick has
//!    stopped under it. Then `isold restore`.
//! 5. Why the tool exists: the seed's stat_refresh case (see [`super::seed`]) on that boot and
//!    on a stock 6.1 guest booted alongside, with chisol --fallback=native's decision on each.
//!
//! 6. Steps 1-4 again on Debian's 7.x-rt, with a policy that also makes an isolated cpuset
//!    partition of CPUs 2-3 (runtime isolation alone, no reboot), and the workload in it.
//!
//! It ends with one table per kernel, before and after, per isolated CPU.

use std::time::Duration;

use serde_json::Value;

use super::{
    quiesce, run, seed, stalls, Expect, HarnessError, KernelRole, Outcome, Scenario, ISOL23,
};

const DEMO_SH: &str = include_str!("../../guest/demo.sh");

fn script(call: &str) -> String {
    format!("taskset -pc 0-1 $$ >/dev/null\n{DEMO_SH}\n{call}\n")
}

/// How long the demo lets stock 6.1 show its blocked stat_refresh (the test suite waits 15 s).
const SEED_WINDOW_S: u32 = 10;

/// Seconds each audit watches.
const WINDOW_S: u32 = 3;

/// The stages of the table: (step, label).
const STAGES: [(&str, &str); 4] = [
    ("audit-before", "no isolation"),
    ("audit-after-apply", "isold apply"),
    ("audit-with-bootargs", "+ boot arguments"),
    ("audit-with-workload", "+ FIFO workload on 3"),
];

fn audit_step(s: &mut Scenario, step: &str) {
    let call = format!("demo_audit {step} {WINDOW_S}");
    s.step_with_timeout(
        step,
        &script(&call),
        Duration::from_secs(120),
        vec![Expect::exit(0), Expect::stdout_has("--- end\n")],
    );
}

/// The JSON an audit step printed between `--- json` and `--- end`.
fn audit_json(out: &str) -> Option<Value> {
    let start = out.find("--- json ")?;
    let body = &out[start..];
    let body = &body[body.find('\n')? + 1..];
    serde_json::from_str(&body[..body.find("--- end")?]).ok()
}

/// A step's output for a human: an audit's JSON in isold's human form (the same window the
/// table reports), other JSON left out.
fn shown(out: &str) -> String {
    match (out.find("--- json "), out.find("--- end\n")) {
        (Some(a), Some(b)) => {
            let json = audit_json(out).filter(|j| j.get("per_cpu").is_some());
            let audit = json
                .clone()
                .and_then(|j| serde_json::from_value::<libtaskisol::audit::Audit>(j).ok())
                .map(|audit| {
                    format!(
                        "$ isold audit --duration {WINDOW_S}\n{}",
                        isold::audit::human(&audit, false)
                    )
                });
            let noise = || {
                json.clone()
                    .and_then(|j| serde_json::from_value::<isold::noise::NoiseReport>(j).ok())
                    .map(|r| oslat_and_ledger(out, &r))
            };
            let middle = audit.or_else(noise).unwrap_or_default();
            format!("{}{middle}{}", &out[..a], &out[b + 8..])
        }
        _ => out.to_string(),
    }
}

/// The noise ledger's report in isold's human form, and the answer to the question it is for:
/// oslat's worst gap next to the longest interruption the ledger timed, and what it was.
fn oslat_and_ledger(out: &str, r: &isold::noise::NoiseReport) -> String {
    let oslat = out
        .lines()
        .find_map(|l| l.strip_prefix("oslat_max_us="))
        .unwrap_or("?");
    let mut s = isold::noise::human(r, false);
    let Some(c) = r.per_cpu.iter().find(|c| c.cpu == OSLAT_CPU) else {
        return s;
    };
    let longest_us = c.longest_seconds * 1e6;
    s.push_str(&format!(
        "=> oslat's worst gap on CPU {OSLAT_CPU}: {oslat} us; the ledger's longest interruption of it: {}\n",
        if c.longest_source.is_empty() {
            "none".to_string()
        } else {
            format!("{longest_us:.1} us, {} ({})", c.longest_source, c.longest_kind)
        }
    ));
    // What the kernel did not do happened below it.
    if oslat
        .parse::<f64>()
        .is_ok_and(|m| m > 2.0 * longest_us + 10.0)
    {
        s.push_str(
            "   no interruption the guest's kernel saw in the ledger's window was that long: the gap came from\n   \
             below the kernel (here the emulator: QEMU's vCPU threads share 2 host cores; on hardware,\n   \
             firmware SMIs or a hypervisor), or from oslat's first or last seconds, outside the window\n",
        );
    }
    s
}

/// The isolated CPU oslat runs on in the demo (before the FIFO workload takes it).
const OSLAT_CPU: usize = 3;

/// One row of the table per audited CPU of a stage.
fn table_rows(label: &str, audit: &Value) -> Vec<String> {
    let mut rows = Vec::new();
    for c in audit["per_cpu"].as_array().into_iter().flatten() {
        let sum = |kinds: &[&str]| -> u64 {
            c["disturbed_by"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|d| kinds.iter().any(|k| d["kind"] == *k))
                .map(|d| d["count"].as_u64().unwrap_or(0))
                .sum()
        };
        let tasks = c["disturbed_by"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["kind"] == "task" || d["kind"] == "kthread")
            .count();
        let can = &c["can_disturb"];
        let len = |k: &str| can[k].as_array().map_or(0, Vec::len);
        rows.push(format!(
            "{label:<21} {:>3} {:>5} {:>5}   {:>5} {:>5} {:>8} {:>5} {:>6.1}  {}",
            c["cpu"],
            len("irqs"),
            len("tasks"),
            sum(&["irq"]),
            sum(&["ipi"]),
            sum(&["softirq"]),
            tasks,
            c["tick"]["per_s"].as_f64().unwrap_or(f64::NAN),
            c["verdict"].as_str().unwrap_or("?"),
        ));
    }
    rows
}

fn print_outputs(s: &Scenario, o: &Outcome) {
    for step in &s.steps {
        if [
            seed::STEP,
            seed::CLEANUP_STEP,
            stalls::QUIET_STEP,
            stalls::STEP,
            stalls::CLEANUP_STEP,
        ]
        .contains(&step.name.as_str())
        {
            continue;
        }
        println!("\n== {}", step.name);
        match o.outputs.get(&step.name) {
            Some(out) => {
                print!("{}", shown(&out.stdout));
                if !out.stderr.trim().is_empty() {
                    print!("{}", out.stderr);
                }
            }
            None => println!("(no result)"),
        }
    }
}

/// One kernel's two boots: without isolation arguments (noise, apply, audits, bootargs),
/// then with the arguments bootargs listed (apply, a chisol workload, audits).
struct Pass {
    role: KernelRole,
    /// Its name in the demo's words.
    label: &'static str,
    /// The policy also makes an isolated cpuset partition of CPUs 2-3 (7.x makes one over
    /// boot-isolated CPUs; 6.12 refuses it), and the workload is started inside it.
    partition: bool,
}

const PASSES: [Pass; 2] = [
    Pass {
        role: KernelRole::Rt612,
        label: "6.12-rt",
        partition: false,
    },
    Pass {
        role: KernelRole::Rt7,
        label: "7.x-rt, apply with the partition",
        partition: true,
    },
];

impl Pass {
    fn name(&self, stage: &str) -> String {
        match self.role {
            KernelRole::Rt612 => stage.to_string(),
            r => format!("{stage}-{}", r.as_str()),
        }
    }

    /// The guest's policy file, after demo_noise wrote isolated_cpus.
    fn policy(&self) -> &'static str {
        if self.partition {
            "demo_partition\n"
        } else {
            ""
        }
    }

    fn first(&self) -> Scenario {
        let mut a = Scenario::new(&self.name("demo"), self.role, "");
        a.binaries = vec!["chisol".into(), "isold".into()];
        a.step("kernel", &script("demo_kernel"), vec![Expect::exit(0)]);
        a.step(
            "noise",
            &script(&format!("demo_noise\n{}", self.policy())),
            vec![Expect::exit(0)],
        );
        audit_step(&mut a, "audit-before");
        a.step_with_timeout(
            "apply",
            &script("demo_apply"),
            Duration::from_secs(120),
            vec![Expect::exit(0)],
        );
        audit_step(&mut a, "audit-after-apply");
        a.step(
            "bootargs",
            &script(
                "echo '$ isold bootargs'; isold --config /tmp/isold.toml bootargs | tail -n 3\n\
                 isold --config /tmp/isold.toml bootargs --json >/tmp/b.json\n\
                 echo '--- json bootargs'; cat /tmp/b.json; echo '--- end'",
            ),
            vec![Expect::exit(0), Expect::stdout_has("--- end\n")],
        );
        a
    }

    fn second(&self, args: &[String]) -> Result<Scenario, HarnessError> {
        let mut b = Scenario::new(&self.name("demo-bootargs"), self.role, &args.join(" "));
        b.binaries = vec!["chisol".into(), "isold".into(), "/usr/bin/oslat".into()];
        b.step(
            "kernel-with-bootargs",
            &script(&format!(
                "demo_kernel\nprintf 'isolated_cpus = \"2-3\"\\n' >/tmp/isold.toml\n{}demo_apply",
                self.policy()
            )),
            vec![Expect::exit(0)],
        );
        audit_step(&mut b, "audit-with-bootargs");
        let cgroup = if self.partition {
            " /sys/fs/cgroup/isolated"
        } else {
            ""
        };
        // Before the FIFO workload: tracing's first use grows the kernel's buffers with work
        // on every CPU, which would wait behind it.
        b.step_with_timeout(
            "oslat-beside-the-ledger",
            &script(&format!("demo_oslat{cgroup}")),
            Duration::from_secs(180),
            vec![Expect::exit(0), Expect::stdout_has("--- end\n")],
        );
        b.step(
            "workload",
            &script(&format!("demo_workload_start{cgroup}")),
            vec![Expect::exit(0)],
        );
        audit_step(&mut b, "audit-with-workload");
        b.step(
            "stop-and-restore",
            &script("demo_workload_stop"),
            vec![Expect::exit(0)],
        );
        if !self.partition {
            seed::add(&mut b, SEED_WINDOW_S)?;
        }
        Ok(b)
    }
}

/// What `isold bootargs --json` of a first boot said is missing.
fn missing_args(first: &Outcome) -> Vec<String> {
    first
        .outputs
        .get("bootargs")
        .and_then(|o| audit_json(&o.stdout))
        .and_then(|b| {
            b["missing"].as_array().map(|v| {
                v.iter()
                    .filter_map(|a| a.as_str().map(String::from))
                    .collect()
            })
        })
        .unwrap_or_default()
}

fn print_table(pass: &Pass, first: &Outcome, second: &Outcome) {
    println!(
        "\n== before and after, per isolated CPU, {} {} ({WINDOW_S} s windows)\n\
         {:<21} {:>3} {:>11}   {:>29} {:>6}\n\
         {:<21} {:>3} {:>5} {:>5}   {:>5} {:>5} {:>8} {:>5} {:>6}  verdict",
        pass.label,
        first.kernel.version,
        "",
        "",
        "can disturb",
        "did disturb (counts)",
        "tick",
        "stage",
        "CPU",
        "IRQs",
        "tasks",
        "IRQs",
        "IPIs",
        "softirqs",
        "tasks",
        "/s",
    );
    for (step, label) in STAGES {
        let out = first.outputs.get(step).or_else(|| second.outputs.get(step));
        match out.and_then(|o| audit_json(&o.stdout)) {
            Some(j) => table_rows(label, &j).iter().for_each(|r| println!("{r}")),
            None => println!("{label:<22} (no audit)"),
        }
    }
}

/// Runs the demo, printing for a human; `Ok(false)` when a step failed.
pub fn run_demo() -> Result<bool, HarnessError> {
    let [rt612, rt7] = &PASSES;
    let a = rt612.first();
    // The case that motivated task isolation on the stock kernel, booted meanwhile.
    let mut stock = Scenario::new("demo-stock61", KernelRole::Stock61, ISOL23);
    stock.binaries = vec!["chisol".into()];
    seed::add(&mut stock, SEED_WINDOW_S)?;
    // The same case with isold run in charge: its stall guard off, then on.
    stalls::add(&mut stock);

    println!(
        "== booting 6.12-rt without isolation arguments, and stock 6.1 for the last part, at once\n   (software emulation: expect 1-3 minutes)"
    );
    let (first, stock_outcome) = std::thread::scope(|scope| {
        let other = scope.spawn(|| run(&stock));
        let rt = run(&a);
        (
            rt,
            other.join().expect("the stock 6.1 guest's thread panicked"),
        )
    });
    let (first, stock_outcome) = (first?, stock_outcome?);
    println!(
        "== guest: {} {} under QEMU TCG, 4 vCPUs; booted in {}",
        first.kernel.package,
        first.kernel.version,
        first
            .boot_time
            .map(|d| format!("{:.1} s", d.as_secs_f64()))
            .unwrap_or_else(|| "?".into())
    );
    print_outputs(&a, &first);
    let args = missing_args(&first);
    if args.is_empty() {
        println!("FAILED: isold bootargs listed no missing argument");
        return Ok(false);
    }

    // Second boot: with exactly what bootargs listed; 7.x's first boot meanwhile.
    let b = rt612.second(&args)?;
    let a7 = rt7.first();
    println!(
        "\n== booting 6.12-rt again with the arguments isold bootargs listed:\n   {}\n   and {} without isolation arguments, at once",
        args.join(" "),
        rt7.label
    );
    let (second, first7) = std::thread::scope(|scope| {
        let other = scope.spawn(|| run(&a7));
        let second = run(&b);
        (
            second,
            other.join().expect("the 7.x guest's thread panicked"),
        )
    });
    let (second, first7) = (second?, first7?);
    print_outputs(&b, &second);
    println!(
        "\n== {}: {} {}, booted without isolation arguments",
        rt7.label, first7.kernel.package, first7.kernel.version
    );
    print_outputs(&a7, &first7);
    let args7 = missing_args(&first7);
    if args7.is_empty() {
        println!("FAILED: isold bootargs listed no missing argument on 7.x");
        return Ok(false);
    }
    let b7 = rt7.second(&args7)?;
    println!(
        "\n== booting {} again with the arguments isold bootargs listed:\n   {}",
        rt7.label,
        args7.join(" ")
    );
    // The project's kernel with the task-isolation interface: the seed's line, booted meanwhile.
    let mut isol = Scenario::new("demo-isol61", KernelRole::Isol61, ISOL23);
    isol.binaries = vec!["chisol".into()];
    quiesce::add(&mut isol);
    let (second7, isol_outcome) = std::thread::scope(|scope| {
        let other = scope.spawn(|| run(&isol));
        let second7 = run(&b7);
        (
            second7,
            other.join().expect("the isol61 guest's thread panicked"),
        )
    });
    let (second7, isol_outcome) = (second7?, isol_outcome?);
    print_outputs(&b7, &second7);

    print_table(rt612, &first, &second);
    print_table(rt7, &first7, &second7);
    println!(
        "can disturb: IRQs and tasks (or movable kthreads) allowed on the CPU; did disturb: what the kernel\n\
         counted on it in the window (IPIs: rescheduling, function call, TLB, irq work, ...; tasks: threads\n\
         other than the workload that ran there); tick: local timer interrupts per second (stopped: 10 or fewer)"
    );

    println!(
        "\n== why this tool exists: the case that motivated task isolation\n\
         CPUs 2-3 isolated (isolcpus, nohz_full, rcu_nocbs), RT throttling off (sched_rt_runtime_us=-1),\n\
         a SCHED_FIFO busy loop on CPU 3 started with `chisol -f 1 -c 3`, then\n\
         `echo 1 > /proc/sys/vm/stat_refresh`, which queues vmstat work on every CPU and waits for it."
    );
    for o in [&stock_outcome, &second] {
        println!("\n{} {}:", o.kernel.package, o.kernel.version);
        print!("{}", seed::report(o));
        if o.outputs.contains_key(stalls::STEP) {
            print!("{}", stalls::report(o));
        }
    }
    println!(
        "\n== and on a kernel with the task-isolation interface: the project's own 6.1 ({} {}),\n\
         the seed's line as its author ran it, the workload's measuring thread at SCHED_FIFO 1 on CPU 3:",
        isol_outcome.kernel.release, isol_outcome.kernel.version
    );
    print!("{}", quiesce::report(&isol_outcome));
    println!(
        "\n== guest files (console log, results, initramfs): {}, {}, {}, {}, {} and {}",
        first.workdir.display(),
        second.workdir.display(),
        first7.workdir.display(),
        second7.workdir.display(),
        stock_outcome.workdir.display(),
        isol_outcome.workdir.display()
    );
    let failures: Vec<_> = first
        .failures
        .iter()
        .chain(&second.failures)
        .chain(&first7.failures)
        .chain(&second7.failures)
        .chain(&stock_outcome.failures)
        .chain(&isol_outcome.failures)
        .collect();
    for f in &failures {
        println!("FAILED: {f}");
    }
    Ok(failures.is_empty())
}
