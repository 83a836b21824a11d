//! Real kernels in QEMU: Debian's stock 6.1 and PREEMPT_RT 6.12 kernels, booted once per
//! command line, run chisol and isol-emu inside the guest (see docs/TESTING.md, "Real kernels
//! in QEMU"). Needs `scripts/setup-qemu` and `cargo build --release --workspace` first; built
//! only with `--features qemu`.
//!
//! One test = one boot. Run one alone with `cargo test -p taskisol-tests --features qemu
//! --test qemu -- stock61_isol23`; keep the guest's files with TASKISOL_KEEP=dir.

use taskisol_tests::abi_cases;
use taskisol_tests::qemu::{
    hotplug_virtio_blk, hotplug_virtio_net, noise, quiesce, run, seed, stalls, Expect, Kernel,
    KernelRole, Scenario, StepOutput, ISOL23,
};

/// chisol's refusal on every kernel without the task-isolation interface, whole.
const NO_INTERFACE: &str = "chisol: task isolation interface not available: the kernel has no /proc/self/task_isolation (it needs the out-of-tree task-isolation patches)";

/// chisol's refusal of -q, -a and -I without the interface and without --fallback, whole.
const QUIESCE_REFUSAL: &str = "chisol: task isolation interface not available: the kernel has no /proc/self/task_isolation (it needs the out-of-tree task-isolation patches); --quiesce, --activate and --inherit need it (see --fallback=native)";

/// How long stock 6.1 must keep `echo 1 > /proc/sys/vm/stat_refresh` blocked in the seed case
/// to count as a hang (it stayed blocked 61 s when the guest waited 60 s; 6.12-rt returns in
/// about 1 s). TASKISOL_SEED_WINDOW=seconds overrides it, to measure a longer hang.
const SEED_HANG_WINDOW_S: u32 = 15;

/// The version chisol names in its messages ("6.1.0"), of the kernel `role` boots.
fn kernel_version(role: KernelRole) -> String {
    let k = Kernel::locate(role).unwrap_or_else(|e| panic!("{e}"));
    seed::kernel_version(&k.release).to_string()
}

/// The checks that the tracer saw chisol at all, so that "no prctl 63..67" in an
/// `isol-emu --trace-only` log cannot pass on an empty, truncated or foreign log: it starts
/// with chisol, records chisol's exec, counts at least one traced syscall of chisol at its
/// exit (its own execve), and ends with chisol's exit status `rc`. The step must print `rc=`
/// and then the log.
fn tracer_saw_chisol(rc: i64) -> Expect {
    Expect::that(
        &format!(
            "the isol-emu log shows chisol's exec, a syscall count above 0 and its status {rc}"
        ),
        move |out: &StepOutput| {
            let log: Vec<serde_json::Value> = out
                .stdout
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            let start = log
                .iter()
                .find(|v| v["ev"] == "start")
                .ok_or("no start event in the log")?;
            let pid = &start["tid"];
            if !log.iter().any(|v| {
                v["ev"] == "exec"
                    && &v["tid"] == pid
                    && v["exe"].as_str().is_some_and(|x| x.ends_with("/chisol"))
            }) {
                return Err(format!("no exec of chisol (pid {pid}) in the log"));
            }
            let exit = log
                .iter()
                .find(|v| v["ev"] == "exit" && &v["tid"] == pid)
                .ok_or_else(|| format!("no exit of chisol (pid {pid}) in the log"))?;
            match exit["syscalls"].as_u64() {
                Some(n) if n > 0 => {}
                _ => return Err(format!("no traced syscall of chisol counted: {exit}")),
            }
            let end = log.iter().find(|v| v["ev"] == "end");
            match end.and_then(|e| e["status"].as_i64()) {
                Some(s) if s == rc => Ok(()),
                other => Err(format!("the log ends with status {other:?}")),
            }
        },
    )
}

/// No prctl with option 59..81 in the isol-emu log printed by the step: the task-isolation
/// numbers 63..67 and every number around them that mainline has given out up to 7.2.
fn no_isolation_prctl() -> Expect {
    Expect::that(
        "no prctl with option 59..81 in the isol-emu log",
        |out: &StepOutput| {
            let bad: Vec<&str> = out
                .stdout
                .lines()
                .filter(|l| {
                    serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| {
                        v["ev"] == "prctl"
                            && v["option"].as_u64().is_some_and(|o| (59..=81).contains(&o))
                    })
                })
                .collect();
            if bad.is_empty() {
                Ok(())
            } else {
                Err(format!("isolation prctls issued: {bad:?}"))
            }
        },
    )
}

/// The stock-kernel path of chisol: no task-isolation interface, so nothing is configured,
/// nothing is started, and the re-used prctl numbers 63..67 are never issued.
fn stock_kernel_path(s: &mut Scenario) {
    s.step(
        "chisol_info_reports_no_interface",
        "chisol -i",
        vec![
            Expect::exit(1),
            Expect::stdout(""),
            Expect::stderr(NO_INTERFACE),
        ],
    );
    s.step(
        "chisol_quiesce_refuses_and_does_not_start",
        "chisol -q vmstat_sync touch /tmp/started\necho rc=$?\n[ -e /tmp/started ] && echo started=yes || echo started=no",
        vec![
            Expect::field("rc", "1"),
            Expect::field("started", "no"),
            Expect::stderr(QUIESCE_REFUSAL),
        ],
    );
    s.step(
        "emu_trace_shows_no_isolation_prctl",
        "isol-emu --trace-only --log /tmp/emu.jsonl -- chisol -q vmstat_sync -a -I active true\n\
         echo rc=$?\n[ -f /tmp/emu.jsonl ] && echo log=present || echo log=missing\ncat /tmp/emu.jsonl",
        vec![
            Expect::field("rc", "1"),
            Expect::field("log", "present"),
            Expect::stderr(QUIESCE_REFUSAL),
            no_isolation_prctl(),
            tracer_saw_chisol(1),
        ],
    );
}

/// `--fallback=native` on a kernel without the task-isolation interface: accepted on 6.5+
/// where the kernel's own vmstat protection covers the isolated CPUs (and still no prctl
/// 63..67 is issued), refused on older kernels without starting anything.
fn native_fallback_checks(s: &mut Scenario, kernel_protects: bool) {
    let version = kernel_version(s.role);
    if kernel_protects {
        s.step(
            "chisol_native_fallback_runs_with_kernel_protection",
            "chisol -q vmstat_sync --fallback=native --isolated -- sh -c 'grep Cpus_allowed_list /proc/$$/status'",
            vec![
                Expect::exit(0),
                Expect::field("Cpus_allowed_list", "2-3"),
                Expect::stderr(&format!(
                    "chisol: CPUs 2-3 are isolcpus domain CPUs: the scheduler does not balance tasks between them, so pin each thread of a multi-threaded workload to its own CPU\n\
                     chisol: task isolation interface not available; native protection in effect: Linux {version} skips deferred vmstat work on isolated CPUs (vmstat_shepherd, 6.5+); CPUs 2-3 are isolated (2: isolcpus domain + nohz_full; 3: isolcpus domain + nohz_full)"
                )),
            ],
        );
        s.step(
            "chisol_native_fallback_issues_no_isolation_prctl",
            // --no-thp makes chisol issue one ordinary prctl (PR_SET_THP_DISABLE), so the
            // tracer has something to see besides the absence of 63..67.
            "isol-emu --trace-only --log /tmp/native.jsonl -- chisol -q vmstat_sync -a -I active --fallback=native --isolated --no-thp true\n\
             echo rc=$?\n\
             echo prctls_seen=$(grep -c '\"ev\":\"prctl\"' /tmp/native.jsonl)\n\
             cat /tmp/native.jsonl",
            vec![
                Expect::field("rc", "0"),
                no_isolation_prctl(),
                tracer_saw_chisol(0),
                // The tracer did see chisol's other prctls, so the absence above means something.
                Expect::that("the tracer saw prctls", |out: &StepOutput| {
                    match out.field("prctls_seen").and_then(|v| v.parse::<u32>().ok()) {
                        Some(n) if n > 0 => Ok(()),
                        other => Err(format!("prctls_seen = {other:?}")),
                    }
                }),
            ],
        );
    } else {
        s.step(
            "chisol_native_fallback_refused_before_6_5",
            "chisol -q vmstat_sync --fallback=native --isolated -- touch /tmp/started
echo rc=$?
             [ -e /tmp/started ] && echo started=yes || echo started=no",
            vec![
                Expect::field("rc", "1"),
                Expect::field("started", "no"),
                Expect::stderr(&format!(
                    "{NO_INTERFACE}; --fallback=native: no native vmstat protection: Linux {version} predates 6.5, whose vmstat_shepherd skips isolated CPUs"
                )),
            ],
        );
    }
}

/// `chisol -p` on a stock kernel, on a workload chisol started: its one row shows its CPU and
/// policy, and the isolation columns say n/a, with a note that says why.
fn pid_view_check(s: &mut Scenario) {
    s.step(
        "chisol_pid_view_on_stock_kernel",
        "chisol -c 2 -f 10 -- sleep 30 2>/dev/null &\n\
         pid=$!\n\
         wait_for 10 grep -qx sleep /proc/$pid/comm\n\
         echo pid=$pid\n\
         chisol -p $pid; echo rc=$?\n\
         kill $pid",
        vec![
            Expect::field("rc", "0"),
            Expect::that(
                "the header, then one row: PID sleep n/a n/a n/a 2 SCHED_FIFO priority 10",
                |out: &StepOutput| {
                    let pid = out.field("pid").ok_or("no pid line")?;
                    let table: Vec<Vec<&str>> = out
                        .stdout
                        .lines()
                        .filter(|l| !l.starts_with("pid=") && !l.starts_with("rc="))
                        .map(|l| l.split_whitespace().collect())
                        .collect();
                    let want = vec![
                        vec!["TID", "COMM", "CONFIGURED", "ACTIVE", "QUIESCING", "CPUS", "POLICY"],
                        vec![pid, "sleep", "n/a", "n/a", "n/a", "2", "SCHED_FIFO", "priority", "10"],
                    ];
                    if table == want {
                        Ok(())
                    } else {
                        Err(format!("table {table:?}"))
                    }
                },
            ),
            Expect::that("the note names the pid and its missing file", |out: &StepOutput| {
                let pid = out.field("pid").ok_or("no pid line")?;
                let want = format!("chisol: pid {pid}: task isolation interface not available: the kernel has no /proc/{pid}/task_isolation");
                if out.stderr.trim() == want {
                    Ok(())
                } else {
                    Err(format!("stderr {:?}", out.stderr))
                }
            }),
        ],
    );
}

/// What the kernel says it isolated.
fn kernel_view(s: &mut Scenario, isolated: &str, nohz_full: &str) {
    let release = Kernel::locate(s.role)
        .unwrap_or_else(|e| panic!("{e}"))
        .release;
    s.step(
        "kernel_view",
        "echo isolated=$(cat /sys/devices/system/cpu/isolated)\n\
         echo nohz_full=$(cat /sys/devices/system/cpu/nohz_full)\n\
         echo online=$(cat /sys/devices/system/cpu/online)\n\
         echo release=$(uname -r)\ncat /proc/cmdline",
        vec![
            Expect::field("isolated", isolated),
            Expect::field("nohz_full", nohz_full),
            Expect::field("online", "0-3"),
            // The kernel the harness picked from the cache is the one that booted.
            Expect::field("release", &release),
        ],
    );
}

/// `chisol --isolated` pins to the union of the kernel's isolated CPUs.
fn isolated_pin_check(s: &mut Scenario, cpus: &str) {
    s.step(
        "chisol_isolated_pins_to_isolated_cpus",
        "chisol --isolated -- cat /proc/self/status",
        vec![Expect::exit(0), Expect::field("Cpus_allowed_list", cpus)],
    );
}

/// Placement by chisol on a kernel that isolates 2-3 at boot. Must run before a partition
/// takes CPU 3 away from the root cgroup.
fn placement_checks(s: &mut Scenario, thp_compiled_in: bool) {
    isolated_pin_check(s, "2-3");
    s.step(
        "chisol_fifo_10_on_isolated_cpus",
        "echo rt_runtime=$(cat /proc/sys/kernel/sched_rt_runtime_us)\n\
         echo rt_period=$(cat /proc/sys/kernel/sched_rt_period_us)\n\
         chisol -f 10 --isolated -- sh -c '. /guest/lib.sh; sched_of $$; grep Cpus_allowed_list /proc/$$/status'",
        vec![
            Expect::exit(0),
            Expect::field("policy", "1"),
            Expect::field("rt_priority", "10"),
            Expect::field("Cpus_allowed_list", "2-3"),
            // chisol warns when RT tasks get less than the whole period: Debian's 6.x default
            // is 950 ms of every second; 7.x-rt boots with the whole second.
            Expect::that(
                "chisol warns of RT throttling exactly when the kernel throttles",
                |o: &StepOutput| {
                    let num = |k: &str| o.field(k).and_then(|v| v.parse::<i64>().ok());
                    let (rt, period) = (num("rt_runtime"), num("rt_period"));
                    let (Some(rt), Some(period)) = (rt, period) else {
                        return Err(format!("rt_runtime {rt:?}, rt_period {period:?}"));
                    };
                    let said = o.stderr.contains(&format!(
                        "RT throttling is on (kernel.sched_rt_runtime_us={rt}, sched_rt_period_us={period})"
                    ));
                    let warned = o.stderr.contains("RT throttling");
                    match (rt >= 0 && rt < period, said, warned) {
                        (true, true, _) | (false, false, false) => Ok(()),
                        _ => Err(format!("runtime {rt} of {period}: stderr {:?}", o.stderr)),
                    }
                },
            ),
        ],
    );
    // PREEMPT_RT kernels are built without THP: THP_enabled reads 0 there already, so only the
    // stock kernel shows the switch.
    let before = if thp_compiled_in { "1" } else { "0" };
    s.step(
        "chisol_no_thp_disables_thp",
        "echo before=$(grep THP_enabled /proc/self/status | cut -f2)\nchisol --no-thp -- cat /proc/self/status",
        vec![
            Expect::exit(0),
            Expect::field("before", before),
            Expect::field("THP_enabled", "0"),
        ],
    );
}

/// Hot-plugs devices through QMP and checks that their IRQs show up in the guest.
fn hotplug_checks(s: &mut Scenario) {
    s.modules(&["virtio_pci", "virtio_net", "virtio_blk"]);
    s.on_request("hotplug-net", hotplug_virtio_net("hotnet"));
    s.on_request("hotplug-blk", hotplug_virtio_blk("hotblk"));
    let judge_more = |out: &StepOutput| {
        let n = |k| out.field(k).and_then(|v| v.parse::<u32>().ok());
        match (n("irqs_before"), n("irqs_after")) {
            (Some(b), Some(a)) if a > b => Ok(()),
            (b, a) => Err(format!("IRQ lines before {b:?}, after {a:?}")),
        }
    };
    s.step(
        "hotplug_virtio_net_adds_irqs",
        "echo irqs_before=$(irq_lines)\nhost_request hotplug-net\n\
         wait_for 60 grep -q 'virtio.*input' /proc/interrupts || echo timeout=yes\n\
         echo irqs_after=$(irq_lines)\ngrep virtio /proc/interrupts",
        vec![
            Expect::that("more IRQ lines after the hot-plug", judge_more),
            Expect::stdout_has("input.0"),
        ],
    );
    s.step(
        "hotplug_virtio_blk_adds_managed_irqs",
        "echo irqs_before=$(irq_lines)\nhost_request hotplug-blk\n\
         wait_for 60 grep -q 'virtio.*req' /proc/interrupts || echo timeout=yes\n\
         echo irqs_after=$(irq_lines)\n\
         for i in $(grep 'virtio.*req' /proc/interrupts | cut -d: -f1); do\n\
           echo \"irq$i $(grep \"^ *$i:\" /proc/interrupts | awk '{print $NF}') affinity=$(cat /proc/irq/$i/smp_affinity_list) effective=$(cat /proc/irq/$i/effective_affinity_list)\"\n\
         done",
        vec![
            Expect::that("more IRQ lines after the hot-plug", judge_more),
            Expect::that(
                "one managed IRQ per vCPU queue, each on one CPU (affinity = effective), every CPU one queue's, the isolated ones too (6.x maps req.N to CPU N, 7.2 another order)",
                |out: &StepOutput| {
                    let mut queues: Vec<String> = out
                        .stdout
                        .lines()
                        .filter(|l| {
                            l.strip_prefix("irq")
                                .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
                        })
                        .map(|l| {
                            let f: Vec<&str> = l.split_whitespace().collect();
                            let q = f.get(1).and_then(|n| n.rsplit_once("-req.")).map(|(_, q)| q);
                            format!("req.{} {} {}", q.unwrap_or("?"), f.get(2).unwrap_or(&"?"), f.get(3).unwrap_or(&"?"))
                        })
                        .collect();
                    queues.sort();
                    let mut cpus: Vec<String> = queues
                        .iter()
                        .filter_map(|q| {
                            let f: Vec<&str> = q.split_whitespace().collect();
                            let a = f.get(1)?.strip_prefix("affinity=")?;
                            let e = f.get(2)?.strip_prefix("effective=")?;
                            (a == e).then(|| a.to_string())
                        })
                        .collect();
                    cpus.sort();
                    let names: Vec<&str> =
                        queues.iter().filter_map(|q| q.split(' ').next()).collect();
                    if names == ["req.0", "req.1", "req.2", "req.3"] && cpus == ["0", "1", "2", "3"] {
                        Ok(())
                    } else {
                        Err(format!("queues {queues:?}"))
                    }
                },
            ),
        ],
    );
}

/// What the guest must show after making /sys/fs/cgroup/rt an isolated partition of CPU 3.
struct PartitionView {
    /// cpuset.cpus.partition as read back.
    state: &'static str,
    /// The root's cpuset.cpus.isolated (6.8+), None where the file does not exist.
    root_isolated: Option<&'static str>,
    root_effective: &'static str,
}

fn make_partition(s: &mut Scenario, view: PartitionView) {
    let mut expects = vec![
        Expect::field("partition", view.state),
        Expect::field("root_effective", view.root_effective),
    ];
    if let Some(iso) = view.root_isolated {
        expects.push(Expect::field("root_isolated", iso));
    }
    s.step(
        "cgroup_isolated_partition",
        "cd /sys/fs/cgroup && echo +cpuset > cgroup.subtree_control && mkdir -p rt\n\
         echo 3 > rt/cpuset.cpus\n\
         [ -e rt/cpuset.cpus.exclusive ] && echo 3 > rt/cpuset.cpus.exclusive\n\
         echo isolated > rt/cpuset.cpus.partition\n\
         echo partition=$(cat rt/cpuset.cpus.partition)\n\
         echo root_isolated=$(cat cpuset.cpus.isolated 2>/dev/null || echo absent)\n\
         echo root_effective=$(cat cpuset.cpus.effective)\n\
         echo workqueue_cpumask=$(cat /sys/devices/virtual/workqueue/cpumask)",
        expects,
    );
}

/// The workload lands in the partition, and its affinity follows the partition's CPUs.
fn cgroup_checks(s: &mut Scenario) {
    s.step(
        "chisol_cgroup_lands_in_partition",
        "chisol --cgroup /sys/fs/cgroup/rt -- sh -c 'cat /proc/$$/cgroup; grep Cpus_allowed_list /proc/$$/status'",
        vec![
            Expect::exit(0),
            Expect::stdout_line("0::/rt"),
            Expect::field("Cpus_allowed_list", "3"),
        ],
    );
    s.step(
        "chisol_cgroup_isolated_fifo",
        "chisol --cgroup /sys/fs/cgroup/rt --isolated -f 5 -- sh -c '. /guest/lib.sh; sched_of $$; cat /proc/$$/cgroup; grep Cpus_allowed_list /proc/$$/status'",
        vec![
            Expect::exit(0),
            Expect::stdout_line("0::/rt"),
            Expect::field("Cpus_allowed_list", "3"),
            Expect::field("policy", "1"),
            Expect::field("rt_priority", "5"),
        ],
    );
}

/// Boot isolation of CPU 2 only: 6.12 refuses isolated partitions that contain boot-isolated
/// (isolcpus=domain) CPUs, so the partition scenario isolates 2 at boot and 3 by cgroup.
const ISOL2: &str = "isolcpus=managed_irq,domain,2 nohz_full=2-3 rcu_nocbs=2-3 irqaffinity=0-1";

fn ok(s: &Scenario) {
    let out = run(s).unwrap_or_else(|e| panic!("{e}"));
    if let Some(step) = out.outputs.get(seed::STEP) {
        let m = seed::Measured::from_output(step).map_or_else(|e| e, |m| m.summary());
        eprintln!("seed case on {}: {m}", out.kernel.release);
    }
    if out.outputs.contains_key(stalls::STEP) {
        eprint!(
            "stall guard on {}:\n{}",
            out.kernel.release,
            stalls::report(&out)
        );
    }
    out.assert_ok();
}

/// The seed's own case (see taskisol_tests::qemu::seed), before a partition takes CPU 3.
fn seed_case(s: &mut Scenario) {
    let window = match std::env::var("TASKISOL_SEED_WINDOW") {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("TASKISOL_SEED_WINDOW={v:?} is not a number of seconds")),
        Err(_) => SEED_HANG_WINDOW_S,
    };
    // The stall guard first: on 6.12-rt the fair server's runtime could no longer be set to 0
    // after the seed's case had turned RT throttling off and on again.
    stalls::add(s);
    noise::add(s);
    noise::add_restart(s);
    seed::add(s, window).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn stock61_isol23() {
    let mut s = Scenario::new("stock61-isol23", KernelRole::Stock61, ISOL23);
    kernel_view(&mut s, "2-3", "2-3");
    stock_kernel_path(&mut s);
    native_fallback_checks(&mut s, false);
    pid_view_check(&mut s);
    placement_checks(&mut s, true);
    hotplug_checks(&mut s);
    s.capture_fixture("debian-6.1-isol23", &[]);
    seed_case(&mut s);
    // The seed's own line on the stock kernel: oslat -f 1 beside the write, which hangs.
    quiesce::add_stock(&mut s);
    // 6.1 accepts an isolated partition on boot-isolated CPUs (6.12 does not, see below); it
    // has no cpuset.cpus.exclusive and no root cpuset.cpus.isolated yet.
    make_partition(
        &mut s,
        PartitionView {
            state: "isolated",
            root_isolated: None,
            root_effective: "0-2",
        },
    );
    cgroup_checks(&mut s);
    s.capture_fixture("debian-6.1-isol23-partition3", &["/sys/fs/cgroup/rt"]);
    ok(&s);
}

#[test]
fn stock61_noisol() {
    let mut s = Scenario::new("stock61-noisol", KernelRole::Stock61, "");
    kernel_view(&mut s, "", "(null)");
    stock_kernel_path(&mut s);
    s.step(
        "chisol_isolated_refuses_without_isolated_cpus",
        "chisol --isolated -- touch /tmp/started\necho rc=$?\n[ -e /tmp/started ] && echo started=yes || echo started=no",
        vec![
            Expect::field("rc", "1"),
            Expect::field("started", "no"),
            // the refusal must be about the missing isolation, not about reading sysfs
            Expect::stderr("chisol: --isolated: this machine has no isolated CPUs (no isolcpus=domain, nohz_full= or isolated cpuset partition)"),
        ],
    );
    s.capture_fixture("debian-6.1-noisol", &[]);
    ok(&s);
}

#[test]
fn rt612_isol23() {
    let mut s = Scenario::new("rt612-isol23", KernelRole::Rt612, ISOL23);
    kernel_view(&mut s, "2-3", "2-3");
    stock_kernel_path(&mut s);
    native_fallback_checks(&mut s, true);
    pid_view_check(&mut s);
    placement_checks(&mut s, false);
    hotplug_checks(&mut s);
    s.capture_fixture("debian-6.12-rt-isol23", &[]);
    seed_case(&mut s);
    // isold's cgroup_partition item meets the same refusal: it names the kernel's reason,
    // exits 1 and leaves no cgroup behind, the pinned workload where it was.
    s.binaries.push("isold".into());
    s.step(
        "isold_cgroup_partition_refused_leaves_nothing",
        "setsid taskset -c 3 sleep 100000 </dev/null >/dev/null 2>&1 & w=$!\n\
         printf 'isolated_cpus = \"2-3\"\n[items]\n' >/tmp/part.toml\n\
         for i in sysctl thp workqueue machinecheck ksm irq_affinity tasks kthread_priority pm_qos cpufreq kvm irqbalance printk systemd_cpuaffinity; do echo \"$i = false\" >>/tmp/part.toml; done\n\
         echo 'cgroup_partition = true' >>/tmp/part.toml\n\
         sleep 0.2\n\
         echo subtree_before=$(cat /sys/fs/cgroup/cgroup.subtree_control)\n\
         isold --config /tmp/part.toml apply; echo apply_rc=$?\n\
         [ -e /sys/fs/cgroup/isolated ] && echo dir=present || echo dir=absent\n\
         echo subtree_after=$(cat /sys/fs/cgroup/cgroup.subtree_control)\n\
         echo workload_cgroup=$(cat /proc/$w/cgroup)\n\
         echo workload=$(grep Cpus_allowed_list /proc/$w/status | cut -f2)\n\
         [ -e /run/isold/state.json ] && echo state=present || echo state=absent\n\
         kill $w",
        vec![
            Expect::field("apply_rc", "1"),
            Expect::output_has("failed            isolated partition /sys/fs/cgroup/isolated: failed: the kernel made /sys/fs/cgroup/isolated/cpuset.cpus.partition 'isolated invalid (partition config conflicts with housekeeping setup)'; undone, nothing left behind"),
            Expect::field("dir", "absent"),
            Expect::field("subtree_before", ""),
            Expect::field("subtree_after", ""),
            Expect::field("workload_cgroup", "0::/"),
            Expect::field("workload", "3"),
            Expect::field("state", "absent"),
        ],
    );
    // A partition on a boot-isolated CPU is refused by 6.12 with this reason; isold must show
    // it. The fixture keeps an invalid partition for the fake-root tests.
    make_partition(
        &mut s,
        PartitionView {
            state: "isolated invalid (partition config conflicts with housekeeping setup)",
            root_isolated: Some("2-3"),
            root_effective: "0-3",
        },
    );
    s.capture_fixture(
        "debian-6.12-rt-isol23-invalid-partition",
        &["/sys/fs/cgroup/rt"],
    );
    ok(&s);
}

/// Debian sid's 7.x PREEMPT_RT kernel with the isolation arguments: the same paths as 6.12-rt,
/// and what 7.x does differently: it accepts an isolated partition over CPUs `isolcpus=`
/// already took (6.12 refuses it), and shows its housekeeping CPUs in
/// /sys/devices/system/cpu/housekeeping.
#[test]
fn rt7_isol23() {
    let mut s = Scenario::new("rt7-isol23", KernelRole::Rt7, ISOL23);
    kernel_view(&mut s, "2-3", "2-3");
    s.step(
        "housekeeping_file",
        "echo housekeeping=$(cat /sys/devices/system/cpu/housekeeping)",
        vec![Expect::field("housekeeping", "0-1")],
    );
    stock_kernel_path(&mut s);
    native_fallback_checks(&mut s, true);
    pid_view_check(&mut s);
    placement_checks(&mut s, false);
    hotplug_checks(&mut s);
    s.capture_fixture("debian-7.2-rt-isol23", &[]);
    seed_case(&mut s);
    // isold's cgroup_partition item over the boot-isolated CPUs: 7.x makes it, reads back
    // `isolated`, and restore removes it with the workload back in the root cgroup.
    s.binaries.push("isold".into());
    s.step(
        "isold_cgroup_partition_over_isolcpus_made_and_restored",
        "setsid taskset -c 3 sleep 100000 </dev/null >/dev/null 2>&1 & w=$!\n\
         printf 'isolated_cpus = \"2-3\"\n[items]\n' >/tmp/part.toml\n\
         for i in sysctl thp workqueue machinecheck ksm irq_affinity tasks kthread_priority pm_qos cpufreq kvm irqbalance printk systemd_cpuaffinity; do echo \"$i = false\" >>/tmp/part.toml; done\n\
         echo 'cgroup_partition = true' >>/tmp/part.toml\n\
         sleep 0.2\n\
         echo subtree_before=$(cat /sys/fs/cgroup/cgroup.subtree_control)\n\
         isold --config /tmp/part.toml apply; echo apply_rc=$?\n\
         echo partition=$(cat /sys/fs/cgroup/isolated/cpuset.cpus.partition)\n\
         echo workload_cgroup=$(cat /proc/$w/cgroup)\n\
         isold --config /tmp/part.toml verify >/dev/null; echo verify_rc=$?\n\
         isold --config /tmp/part.toml restore >/dev/null; echo restore_rc=$?\n\
         [ -e /sys/fs/cgroup/isolated ] && echo dir=present || echo dir=absent\n\
         echo subtree_after=$(cat /sys/fs/cgroup/cgroup.subtree_control)\n\
         echo workload_cgroup_after=$(cat /proc/$w/cgroup)\n\
         echo workload=$(grep Cpus_allowed_list /proc/$w/status | cut -f2)\n\
         kill $w",
        vec![
            Expect::field("apply_rc", "0"),
            Expect::field("partition", "isolated"),
            Expect::field("workload_cgroup", "0::/isolated"),
            Expect::field("verify_rc", "0"),
            Expect::field("restore_rc", "0"),
            Expect::field("dir", "absent"),
            Expect::field("subtree_before", ""),
            Expect::field("subtree_after", ""),
            Expect::field("workload_cgroup_after", "0::/"),
            Expect::field("workload", "3"),
        ],
    );
    make_partition(
        &mut s,
        PartitionView {
            state: "isolated",
            root_isolated: Some("2-3"),
            root_effective: "0-2",
        },
    );
    cgroup_checks(&mut s);
    s.capture_fixture("debian-7.2-rt-isol23-partition3", &["/sys/fs/cgroup/rt"]);
    ok(&s);
}

/// Debian sid's generic 7.x kernel, no isolation: the stock path (no task-isolation prctl
/// issued, the refusals whole), and `--isolated` refused.
#[test]
fn gen7_noisol() {
    let mut s = Scenario::new("gen7-noisol", KernelRole::Gen7, "");
    kernel_view(&mut s, "", "");
    stock_kernel_path(&mut s);
    s.step(
        "chisol_isolated_refuses_without_isolated_cpus",
        "chisol --isolated -- touch /tmp/started\necho rc=$?\n[ -e /tmp/started ] && echo started=yes || echo started=no",
        vec![
            Expect::field("rc", "1"),
            Expect::field("started", "no"),
            Expect::stderr("chisol: --isolated: this machine has no isolated CPUs (no isolcpus=domain, nohz_full= or isolated cpuset partition)"),
        ],
    );
    s.capture_fixture("debian-7.2-noisol", &[]);
    ok(&s);
}

/// Boot isolation (domain 2, nohz_full 2-3) plus a cgroup v2 isolated partition of CPU 3.
#[test]
fn rt612_isol2_partition3() {
    let mut s = Scenario::new("rt612-isol2-partition3", KernelRole::Rt612, ISOL2);
    kernel_view(&mut s, "2", "2-3");
    // isolcpus domain {2} and nohz_full {2,3}: --isolated takes the union
    isolated_pin_check(&mut s, "2-3");
    make_partition(
        &mut s,
        PartitionView {
            state: "isolated",
            root_isolated: Some("2-3"),
            root_effective: "0-2",
        },
    );
    cgroup_checks(&mut s);
    // From the root cgroup, CPU 3 now belongs to the partition: --isolated keeps CPU 2 and
    // says where CPU 3 went.
    s.step(
        "chisol_isolated_names_the_partition_it_cannot_reach",
        "chisol --isolated -- sh -c 'grep Cpus_allowed_list /proc/$$/status'",
        vec![
            Expect::exit(0),
            Expect::field("Cpus_allowed_list", "2"),
            Expect::stderr("chisol: isolated CPUs 3 are not available in this task's cpuset, running on 2; they belong to the isolated partition /sys/fs/cgroup/rt (CPUs 3): use --cgroup to run there"),
        ],
    );
    s.capture_fixture("debian-6.12-rt-isol2-partition3", &["/sys/fs/cgroup/rt"]);
    ok(&s);
}

/// No boot-time isolation: a cgroup partition is the only isolation, and --isolated finds it.
#[test]
fn rt612_noisol_partition3() {
    let mut s = Scenario::new("rt612-noisol-partition3", KernelRole::Rt612, "");
    kernel_view(&mut s, "", "(null)");
    stock_kernel_path(&mut s);
    make_partition(
        &mut s,
        PartitionView {
            state: "isolated",
            root_isolated: Some("3"),
            root_effective: "0-2",
        },
    );
    cgroup_checks(&mut s);
    s.capture_fixture("debian-6.12-rt-partition3", &["/sys/fs/cgroup/rt"]);
    ok(&s);
}

/// The harness itself: a hung step and a hung boot are reported as failures naming the step,
/// and do not stop the checks after them.
#[test]
fn rt612_harness_timeouts_are_failures() {
    let mut s = Scenario::new("rt612-harness-timeouts", KernelRole::Rt612, "");
    s.step_with_timeout(
        "hangs",
        "sleep 600",
        std::time::Duration::from_secs(2),
        vec![Expect::exit(0)],
    );
    s.step(
        "runs_after_the_hang",
        "echo alive",
        vec![Expect::stdout("alive")],
    );
    // Large results, written by init to the serial port while orphans exit and signal init
    // (SIGCHLD), as busybox timeout's watchdog does after every step: a write cut by that
    // signal once lost a whole result. Every byte of each must arrive.
    for i in 0..3 {
        s.step(
            &format!("large_output_{i}"),
            "i=0; while [ $i -lt 4000 ]; do echo \"line $i of a large result, padded to sixty bytes...\"; i=$((i+1)); done\n\
             i=1; while [ $i -le 60 ]; do setsid usleep $((i * 50000)) </dev/null >/dev/null 2>&1 & i=$((i+1)); done",
            vec![Expect::that("all 4000 lines, in order", |o: &StepOutput| {
                let lines: Vec<&str> = o.stdout.lines().collect();
                let bad = lines
                    .iter()
                    .enumerate()
                    .find(|(n, l)| !l.starts_with(&format!("line {n} of a large result")));
                match (lines.len(), bad) {
                    (4000, None) => Ok(()),
                    (n, b) => Err(format!("{n} lines, first wrong: {b:?}")),
                }
            })],
        );
    }
    let out = run(&s).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.failures.len(), 1, "{:?}", out.failures);
    assert_eq!(out.failures[0].check, "hangs");
    assert!(
        out.failures[0]
            .actual
            .contains("killed after its 2 s timeout"),
        "{}",
        out.failures[0]
    );

    let mut s = Scenario::new("rt612-harness-boot-timeout", KernelRole::Rt612, "");
    s.timeout = std::time::Duration::from_secs(1);
    s.step("never_reached", "true", vec![Expect::exit(0)]);
    let started = std::time::Instant::now();
    let out = run(&s).unwrap_or_else(|e| panic!("{e}"));
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    assert!(
        out.failures
            .iter()
            .any(|f| f.check == "boot" && f.actual.contains("QEMU killed")),
        "{:?}",
        out.failures
    );
    assert!(out.failures.iter().any(|f| f.check == "never_reached"));
}

/// `/proc/<pid>/task_isolation` texts, whole.
const TI_ACTIVE: &str =
    "Configured state: quiesce \nActive state: quiesce \nQuiescing: vmstat_sync \n";
const TI_CONFIGURED: &str =
    "Configured state: quiesce \nActive state: none \nQuiescing: vmstat_sync \n";
const TI_NONE: &str = "Configured state: none \nActive state: none \nQuiescing: none \n";

/// chisol on a kernel that has the interface: the original tool's uses, read back from the
/// kernel's own `/proc/<pid>/task_isolation`.
fn interface_checks(s: &mut Scenario) {
    s.step(
        "kernel_has_the_interface",
        "ls -l /proc/self/task_isolation | cut -c1-10\ncat /proc/self/task_isolation\nls /proc/self/task/$$/ | grep -c task_isolation",
        vec![
            Expect::stdout_line("-r--------"),
            Expect::stdout_has(TI_NONE),
            // Only in the thread group's directory, not below task/.
            Expect::stdout_line("0"),
        ],
    );
    s.step(
        "chisol_info",
        "chisol -i",
        vec![Expect::exit(0), Expect::stdout("quiesce: vmstat_sync ")],
    );
    s.step(
        "chisol_conf_read_back",
        "chisol -q vmstat_sync -I conf sh -c 'cat /proc/self/task_isolation'",
        vec![
            Expect::exit(0),
            Expect::stdout(TI_CONFIGURED),
            Expect::stderr(""),
        ],
    );
    s.step(
        "chisol_active_inherited_by_sh_and_its_child",
        "chisol -q vmstat_sync -a -I active sh -c 'cat /proc/$$/task_isolation; cat /proc/self/task_isolation'",
        vec![
            Expect::exit(0),
            Expect::stdout(&format!("{TI_ACTIVE}{TI_ACTIVE}")),
        ],
    );
    s.step(
        "chisol_active_without_inherit_stays_with_chisol",
        // `; true`: busybox sh execs the last command of -c instead of forking it.
        "chisol -q vmstat_sync -a sh -c 'cat /proc/$$/task_isolation; cat /proc/self/task_isolation; true'",
        vec![Expect::exit(0), Expect::stdout(&format!("{TI_ACTIVE}{TI_NONE}"))],
    );
    s.step(
        "chisol_uses_the_interface_even_with_native_fallback",
        "chisol -q vmstat_sync -a --fallback=native cat /proc/self/task_isolation",
        vec![
            Expect::exit(0),
            Expect::stdout(TI_ACTIVE),
            Expect::stderr(""),
        ],
    );
    // Threads inherit the configuration and activate themselves (the patched oslat's way).
    s.step(
        "chisol_conf_threads_activate_themselves",
        "chisol -q vmstat_sync -I conf isol-worker 3 5",
        vec![
            Expect::exit(0),
            Expect::that(
                "main configured; each of 3 threads configured, active while it measures, configured after",
                |out: &StepOutput| {
                    let lines: Vec<serde_json::Value> = out
                        .stdout
                        .lines()
                        .map(|l| serde_json::from_str(l).map_err(|e| format!("{l}: {e}")))
                        .collect::<Result<_, _>>()?;
                    if lines.len() != 4 || lines[0]["state"] != TI_CONFIGURED {
                        return Err(format!("{} lines, first {}", lines.len(), lines[0]));
                    }
                    for t in &lines[1..] {
                        if t["before"] != TI_CONFIGURED
                            || t["during"] != TI_ACTIVE
                            || t["after"] != TI_CONFIGURED
                            || !t["activate_error"].is_null()
                        {
                            return Err(format!("thread {t}"));
                        }
                    }
                    Ok(())
                },
            ),
        ],
    );
    // chisol -p on a multi-threaded process, thread by thread.
    s.step(
        "chisol_pid_view_thread_by_thread",
        "chisol -q vmstat_sync -I conf isol-worker 2 8000 >/dev/null & p=$!\n\
         for i in $(seq 100); do a=0; for t in $(ls /proc/$p/task); do grep -q 'Active state: quiesce' /proc/$t/task_isolation 2>/dev/null && a=$((a+1)); done; [ $a -ge 2 ] && break; usleep 100000; done\n\
         chisol -p $p; echo rc=$?\nkill $p; wait",
        vec![
            Expect::field("rc", "0"),
            Expect::that(
                "the main thread configured, two measuring threads active",
                |out: &StepOutput| {
                    let rows: Vec<Vec<&str>> = out
                        .stdout
                        .lines()
                        .skip(1)
                        .filter(|l| !l.starts_with("rc="))
                        .map(|l| l.split_whitespace().collect())
                        .collect();
                    let ok = rows.len() == 3
                        && rows[0].get(1..5) == Some(&["isol-worker", "quiesce", "none", "vmstat_sync"][..])
                        && rows[1..].iter().all(|r| r.get(2..5) == Some(&["quiesce", "quiesce", "vmstat_sync"][..]));
                    if ok {
                        Ok(())
                    } else {
                        Err(format!("rows {rows:?}"))
                    }
                },
            ),
        ],
    );
    // chisol's own refusals issue nothing; the kernel's errno for a bad request, with
    // libtaskisol's message, comes through the library (isol-api's bad.* steps).
    s.step(
        "chisol_usage_errors",
        "chisol -q tlb true; echo rc=$?; chisol -a true; echo rc=$?; chisol -q vmstat_sync no-such-cmd; echo rc=$?",
        vec![
            Expect::output_has("unknown quiesce feature \"tlb\""),
            Expect::output_has("--activate needs --quiesce"),
            Expect::output_has("failed to execute no-such-cmd"),
            Expect::stdout_line("rc=127"),
        ],
    );
    s.step(
        "library_refusals_carry_the_kernels_errno",
        "isol-api",
        vec![
            Expect::exit(0),
            Expect::that(
                "each bad request fails with EINVAL from the kernel, named",
                |out: &StepOutput| {
                    for (step, op) in [
                        (
                            "bad.oneshot_outside_mask",
                            "prctl PR_ISOL_CFG_SET(I_CFG_FEAT, ISOL_F_QUIESCE",
                        ),
                        (
                            "bad.inherit_active_without_conf",
                            "prctl PR_ISOL_CFG_SET(I_CFG_INHERIT, 0x2)",
                        ),
                        (
                            "bad.activate_unknown_feature",
                            "prctl PR_ISOL_ACTIVATE_SET(0x20)",
                        ),
                        ("fresh.inherit", "prctl PR_ISOL_CFG_GET(I_CFG_INHERIT)"),
                        ("fresh.active", "prctl PR_ISOL_ACTIVATE_GET"),
                    ] {
                        let v = out
                            .stdout
                            .lines()
                            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                            .find(|v| v["step"] == step)
                            .ok_or(format!("no step {step}"))?;
                        let msg = v["error"].as_str().unwrap_or("");
                        if v["errno"] != libc_einval()
                            || !msg.starts_with(op)
                            || !msg.ends_with("failed with EINVAL: Invalid argument")
                        {
                            return Err(format!("{step}: {v}"));
                        }
                    }
                    Ok(())
                },
            ),
        ],
    );
}

fn libc_einval() -> serde_json::Value {
    serde_json::json!(22)
}

/// The emulator's scenarios on the real kernel: every ABI row (isol-rawcall), the library's
/// calls (isol-api), chisol with the oslat-like worker, each natively and under isol-emu in
/// this boot, the answers equal but for ids.
fn emulator_matches_the_kernel(s: &mut Scenario) {
    for b in ["isol-rawcall", "isol-api", "isol-worker"] {
        s.binaries.push(b.into());
    }
    for (name, calls) in abi_cases::CASES {
        s.step(
            &format!("abi_{name}_kernel_equals_emulator"),
            &abi_cases::guest_script(calls),
            vec![Expect::that(
                "the kernel's answers equal the emulator's (ids aside)",
                |out: &StepOutput| abi_cases::judge(&out.stdout),
            )],
        );
    }
    for (name, cmd) in [
        ("library_calls", "isol-api"),
        ("chisol_conf_worker", "chisol -q vmstat_sync -I conf isol-worker 2 5"),
        (
            "chisol_active_sh",
            "chisol -q vmstat_sync -a -I active sh -c 'cat /proc/$$/task_isolation; cat /proc/self/task_isolation'",
        ),
        ("chisol_info", "chisol -i"),
    ] {
        s.step(
            &format!("{name}_kernel_equals_emulator"),
            &abi_cases::differential_script(cmd),
            vec![Expect::that(
                "the kernel's answers equal the emulator's (ids and timings aside)",
                |out: &StepOutput| abi_cases::judge(&out.stdout),
            )],
        );
    }
}

/// `isold audit` and `isold noise` on a kernel with the interface: a workload on isolated
/// CPU 3 that runs without the vmstat quiesce is named (audit's JSON and text, noise's note),
/// one started with it is not.
fn audit_names_workloads_without_quiesce(s: &mut Scenario) {
    s.need_binaries(&["isold", "isol-meter"]);
    s.step_with_timeout(
        "audit_names_a_workload_without_quiesce",
        "isol-meter -c 3 -D 0 -j >/dev/null 2>&1 & p=$!
wait_for 20 grep -q '^Cpus_allowed_list:[[:space:]]*3$' /proc/$p/task/*/status
isold audit --cpus 3 --duration 0 --json >/tmp/a1.json; echo rc1=$?
isold audit --cpus 3 --duration 0 | grep -c 'WITHOUT QUIESCE' | sed 's/^/text1=/'
isold noise --cpus 3 --duration 1 >/tmp/n1.txt 2>&1; echo noise_rc1=$?
# The note wraps at 80 columns: its start names the thread and the CPUs.
grep -c 'note: the kernel has task isolation, and task [0-9/]* isol-meter runs on CPUs 3' /tmp/n1.txt | sed 's/^/noise1=/'
sed 's/^/n1: /' /tmp/n1.txt | tail -5
kill -INT $p; wait $p
chisol -q vmstat_sync -I conf isol-meter -c 3 -D 0 -j >/dev/null 2>&1 & p=$!
wait_for 20 any_thread_active $p
isold audit --cpus 3 --duration 0 --json >/tmp/a2.json; echo rc2=$?
isold audit --cpus 3 --duration 0 | grep -c 'WITHOUT QUIESCE' | sed 's/^/text2=/'
isold noise --cpus 3 --duration 1 >/tmp/n2.txt 2>&1; echo noise_rc2=$?
grep -c 'note: the kernel has task isolation' /tmp/n2.txt | sed 's/^/noise2=/'
kill -INT $p; wait $p
echo \"a1=$(tr -d '\\n' </tmp/a1.json)\"
echo \"a2=$(tr -d '\\n' </tmp/a2.json)\"",
        // Two audits and a one-time noise recording each, under TCG.
        std::time::Duration::from_secs(300),
        vec![
            Expect::field("rc1", "0"),
            Expect::field("rc2", "0"),
            Expect::field("text1", "1"),
            Expect::field("text2", "0"),
            Expect::field("noise_rc1", "0"),
            Expect::field("noise_rc2", "0"),
            Expect::field("noise1", "1"),
            Expect::field("noise2", "0"),
            Expect::that(
                "the meter's thread on CPU 3 is named without the quiesce, and not once it runs with it",
                |out: &StepOutput| {
                    let names = |key: &str| -> Result<Vec<String>, String> {
                        let v: serde_json::Value = serde_json::from_str(out.field(key).ok_or(format!("no {key}"))?)
                            .map_err(|e| format!("{key}: {e}"))?;
                        Ok(v["per_cpu"][0]["without_quiesce"]
                            .as_array()
                            .map(|a| a.iter().filter_map(|t| t["comm"].as_str().map(String::from)).collect())
                            .unwrap_or_default())
                    };
                    match (names("a1")?, names("a2")?) {
                        (a, b) if a == ["isol-meter"] && b.is_empty() => Ok(()),
                        other => Err(format!("without, with: {other:?}")),
                    }
                },
            ),
        ],
    );
}

/// The project's own 6.1 with the task-isolation series, booted with the suite's isolation:
/// the interface chisol and libtaskisol drive, real; the emulator checked against it; the
/// seed's case with our meter and with Debian's oslat.
#[test]
fn isol61_isol23() {
    let mut s = Scenario::new("isol61-isol23", KernelRole::Isol61, ISOL23);
    kernel_view(&mut s, "2-3", "2-3");
    interface_checks(&mut s);
    emulator_matches_the_kernel(&mut s);
    audit_names_workloads_without_quiesce(&mut s);
    quiesce::add(&mut s);
    let out = run(&s).unwrap_or_else(|e| panic!("{e}"));
    eprint!(
        "quiesce on {}:\n{}",
        out.kernel.release,
        quiesce::report(&out)
    );
    out.assert_ok();
}
