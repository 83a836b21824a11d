//! The audit's tests.

use super::deltas::*;
use super::exposure::*;
use super::threads::*;
use super::*;

fn table(text: &str) -> Interrupts {
    Interrupts::parse(text).unwrap()
}

const BEFORE: &str = "           CPU0       CPU1       CPU2       CPU3\n\
  4:          0         49          0          0   IO-APIC   4-edge      ttyS0\n\
 12:          0          0          3          0   IO-APIC  12-edge      i8042\n\
LOC:        980       1001        790        812   Local timer interrupts\n\
RES:        327        240        292        373   Rescheduling interrupts\n\
ERR:          0\n";

const AFTER: &str = "           CPU0       CPU1       CPU2       CPU3\n\
  4:          0         49          0        120   IO-APIC   4-edge      ttyS0\n\
 12:          0          0          3          0   IO-APIC  12-edge      i8042\n\
LOC:       1480       1501        793       1312   Local timer interrupts\n\
RES:        327        240        292        376   Rescheduling interrupts\n\
ERR:          0\n";

fn exposure(irq: u32, fix: &str) -> SeenIrq {
    SeenIrq {
        affinity: "0-3".parse().unwrap(),
        effective: None,
        exposure: IrqExposure {
            irq,
            name: "ttyS0".into(),
            affinity: "0-3".into(),
            effective: None,
            managed: None,
            movable: None,
            fix: fix.into(),
        },
        workload: false,
    }
}

fn did(cpu: usize, nohz_full: bool) -> Vec<Disturbance> {
    let cpus: CpuSet = "2-3".parse().unwrap();
    let at = At {
        cpu,
        nohz_full,
        cpus: &cpus,
        window_s: 2.0,
    };
    let mut out = Vec::new();
    let mut workload = Vec::new();
    let (b, a) = (table(BEFORE), table(AFTER));
    did_interrupts(
        &Deltas::new(&b, &a),
        &at,
        &[exposure(4, "move it")],
        (&mut out, &mut workload),
    );
    assert!(workload.is_empty());
    out
}

/// Each row's growth on the CPU's own column, the IRQ's fix from its exposure, the tick
/// with the boot argument that stops it.
#[test]
fn interrupt_deltas_are_counted_per_cpu_column() {
    let d = did(3, false);
    let got: Vec<(&str, &str, u64, f64)> = d
        .iter()
        .map(|d| (d.kind.as_str(), d.source.as_str(), d.count, d.per_s))
        .collect();
    assert_eq!(
        got,
        [
            ("irq", "IRQ 4 ttyS0", 120, 60.0),
            ("tick", "LOC local timer interrupts", 500, 250.0),
            ("ipi", "RES rescheduling interrupts", 3, 1.5),
        ]
    );
    assert_eq!(d[0].fix, "move it");
    assert_eq!(d[1].fix, "boot argument nohz_full=2-3");
    let on_nohz = did(3, true);
    assert!(
        on_nohz[1].fix.contains("more than one task"),
        "{}",
        on_nohz[1].fix
    );
}

/// A residual tick (nohz_full's 1 Hz) is no disturbance; a CPU whose counts did not move
/// has none.
#[test]
fn a_stopped_tick_and_still_counters_are_quiet() {
    assert_eq!(did(2, true), []);
    let (b, a) = (table(BEFORE), table(AFTER));
    let d = &Deltas::new(&b, &a);
    let tick = tick_of(d, 2, 2.0, true).unwrap();
    assert_eq!(
        tick,
        Tick {
            per_s: 1.5,
            stopped: true,
            nohz_full: true,
            reasons: None,
        }
    );
    let tick = tick_of(d, 3, 2.0, false).unwrap();
    assert!(!tick.stopped);
    assert_eq!(tick_of(d, 3, 0.0, false), None, "no window");
    assert_eq!(tick_of(d, 7, 2.0, false), None, "no column");
}

fn cpu_with_tick(cpu: usize, per_s: f64) -> CpuAudit {
    let stopped = per_s <= TICK_STOPPED_PER_S;
    CpuAudit {
        cpu,
        isolated_by: vec!["nohz_full".into()],
        verdict: "disturbed".into(),
        tick: Some(Tick {
            per_s,
            stopped,
            nohz_full: true,
            reasons: None,
        }),
        disturbed_by: if stopped {
            Vec::new()
        } else {
            vec![Disturbance {
                kind: "tick".into(),
                source: "LOC local timer interrupts".into(),
                count: (per_s * 2.0) as u64,
                per_s,
                cpu_ms: None,
                fix: ipi_fix("LOC", true, &"2-3".parse().unwrap()).1,
            }]
        },
        workloads_ran: Vec::new(),
        workload_irqs_fired: Vec::new(),
        starving: Vec::new(),
        without_quiesce: Vec::new(),
        can_disturb: Exposure::default(),
        osnoise: None,
    }
}

/// The kernel's reasons replace the audit's own reading of a tick that ran, most first,
/// each with its fix and the tasks that ran; a stopped tick keeps its fix (it has none)
/// but still shows what the kernel said; a CPU with no record gets an empty list.
#[test]
fn the_kernel_s_tick_reasons_replace_the_fixed_sentence() {
    let trace = tickstop::parse_trace(
        "\x20 sh-150 [003] d.... 1.0: tick_stop: success=0 dependency=SCHED\n\
             \x20 sh-141 [003] d.... 1.1: tick_stop: success=0 dependency=POSIX_TIMER\n\
             \x20 sh-141 [003] d.... 1.2: tick_stop: success=0 dependency=POSIX_TIMER\n\
             \x20 sh-9 [002] d.... 1.2: tick_stop: success=0 dependency=RCU\n",
    )
    .unwrap();
    let mut a = Audit {
        kernel: "7.2".into(),
        cpus: "1-3".into(),
        source: "--cpus".into(),
        housekeeping: "0".into(),
        kernel_housekeeping: None,
        window_s: 2.0,
        settings: Vec::new(),
        boot_args: Vec::new(),
        per_cpu: vec![
            cpu_with_tick(1, 250.0),
            cpu_with_tick(2, 1.0),
            cpu_with_tick(3, 250.0),
        ],
        notes: Vec::new(),
    };
    assert!(a.any_tick_ran());
    a.add_tick_stops(&trace);
    let c3 = &a.per_cpu[2];
    let reasons = c3.tick.as_ref().unwrap().reasons.as_ref().unwrap();
    let got: Vec<(&str, u64, &[i32])> = reasons
        .iter()
        .map(|r| (r.dependency.as_str(), r.count, r.pids.as_slice()))
        .collect();
    assert_eq!(
        got,
        [("POSIX_TIMER", 2, &[141][..]), ("SCHED", 1, &[150][..])]
    );
    assert_eq!(reasons[0].fix, tickstop::fix("POSIX_TIMER", "1-3"));
    let fix = &c3.disturbed_by[0].fix;
    assert!(
            fix.starts_with("the kernel kept the tick for POSIX_TIMER (2 times, task 141): a task here runs under a CPU-time limit"),
            "{fix}"
        );
    assert!(
        fix.contains("; SCHED (1 time, task 150): more than one task"),
        "{fix}"
    );
    // CPU 2's tick stopped: nothing to fix, the kernel's record kept.
    let c2 = &a.per_cpu[1];
    assert!(c2.disturbed_by.is_empty());
    assert_eq!(
        c2.tick.as_ref().unwrap().reasons.as_ref().unwrap()[0].dependency,
        "RCU"
    );
    assert!(c2.tick.as_ref().unwrap().reasons.as_ref().unwrap()[0]
        .fix
        .contains("rcu_nocbs=1-3"));
    // CPU 1: recorded, nothing failed: the audit's own wording stays.
    let c1 = &a.per_cpu[0];
    assert_eq!(c1.tick.as_ref().unwrap().reasons, Some(Vec::new()));
    assert!(c1.disturbed_by[0].fix.contains("more than one task"));
    // Many tasks are cut at four.
    let r = TickReason {
        dependency: "SCHED".into(),
        count: 9,
        pids: vec![1, 2, 3, 4, 5],
        fix: "f".into(),
    };
    assert_eq!(
        tick_reasons_fix(&[r]),
        "the kernel kept the tick for SCHED (9 times, tasks 1 2 3 4 ...): f"
    );
}

#[test]
fn a_row_that_appears_counts_whole_and_a_counter_never_goes_negative() {
    let before = table("CPU0 CPU1\nLOC: 5 9 Local timer interrupts\n");
    let after =
        table("CPU0 CPU1\nLOC: 7 3 Local timer interrupts\n 30: 0 4 PCI-MSI x virtio1-input.0\n");
    let d = Deltas::new(&before, &after);
    assert_eq!(d.of("LOC", 0), 2);
    assert_eq!(d.of("LOC", 1), 0);
    assert_eq!(d.of("30", 1), 4);
    assert_eq!(d.of("30", 5), 0);
}

#[test]
fn softirq_rows_name_their_lever() {
    let before = table("CPU0 CPU1\nTIMER: 10 10\nRCU: 1 1\nNET_RX: 0 0\n");
    let after = table("CPU0 CPU1\nTIMER: 10 30\nRCU: 1 2\nNET_RX: 0 0\n");
    let mut out = Vec::new();
    did_softirqs(&Deltas::new(&before, &after), 1, 4.0, &mut out);
    let got: Vec<(&str, u64, f64)> = out
        .iter()
        .map(|d| (d.source.as_str(), d.count, d.per_s))
        .collect();
    assert_eq!(got, [("softirq TIMER", 20, 5.0), ("softirq RCU", 1, 0.3)]);
    assert!(out[1].fix.contains("rcu_nocbs"));
    assert!(out.iter().all(|d| d.kind == "softirq"));
    assert!(softirq_fix("NET_RX").contains("irq_affinity"));
}

fn thread(pid: i32, comm: &str, affinity: &str, processor: u32, switches: u64) -> Thread {
    Thread {
        pid,
        tid: pid,
        comm: comm.into(),
        flags: 0x0040_0100,
        starttime: pid as u64 * 10,
        affinity: affinity.parse().unwrap(),
        policy: 0,
        rt_priority: 0,
        processor,
        cpu_ticks: 0,
        switches,
        state: 'S',
    }
}

/// A thread runnable on the CPU in both samples that neither switched nor used CPU time
/// starves, named with what held the CPU; one that ran, slept, waits elsewhere, or was
/// not there at the start does not; a window too short names nobody.
#[test]
fn threads_runnable_the_whole_window_without_running_are_starving() {
    let mut kworker = thread(40, "kworker/3:1", "3", 3, 7);
    kworker.flags |= crate::procfs::PF_KTHREAD | crate::procfs::PF_NO_SETAFFINITY;
    kworker.state = 'R';
    let mut rt = thread(200, "rtloop", "3", 3, 5);
    rt.state = 'R';
    rt.policy = 1;
    rt.rt_priority = 1;
    let mut ran = thread(300, "ran", "3", 3, 8);
    ran.state = 'R';
    let mut other_cpu = thread(400, "waits-on-2", "2", 2, 1);
    other_cpu.state = 'R';
    let slept = thread(500, "slept", "3", 3, 1);
    let before = Sample {
        threads: vec![kworker, rt, ran, other_cpu, slept],
        ..Sample::default()
    };
    let mut after = before.clone();
    after.threads[1].cpu_ticks = 200;
    after.threads[2].cpu_ticks = 1;
    after.threads[4].state = 'R';
    let mut newcomer = thread(600, "newcomer", "3", 3, 0);
    newcomer.state = 'R';
    after.threads.push(newcomer);
    let earlier = by_identity(&before);
    let got = starving_threads(&earlier, &after, 3, 2.0);
    let names: Vec<(&str, Option<&str>)> = got
        .iter()
        .map(|s| {
            (
                s.thread.comm.as_str(),
                s.behind.as_ref().map(|b| b.comm.as_str()),
            )
        })
        .collect();
    assert_eq!(names, [("kworker/3:1", Some("rtloop"))]);
    assert_eq!(got[0].waited_s, 2.0);
    assert!(got[0].fix.contains("stall guard"), "{}", got[0].fix);
    assert!(starving_threads(&earlier, &after, 2, 2.0)
        .iter()
        .all(|s| s.thread.comm == "waits-on-2"));
    assert!(starving_threads(&earlier, &after, 3, 0.2).is_empty());
}

/// A thread that switched in the window and was last seen on the CPU ran there; a
/// workload is reported apart; a thread that did not switch, or ran elsewhere, did not.
#[test]
fn threads_that_ran_on_the_cpu_are_named() {
    let scope = Scope::new("2-3".parse().unwrap(), "--cpus");
    assert!(
        scope.allow_comm.iter().any(|p| p == "pmd*"),
        "the preset's allow-list"
    );
    let root = SysRoot::new("/nonexistent");
    let w = Workloads::new(&root, &scope);
    let mut kworker = thread(40, "kworker/3:1", "3", 3, 7);
    kworker.flags |= crate::procfs::PF_KTHREAD | crate::procfs::PF_NO_SETAFFINITY;
    let before = Sample {
        threads: vec![
            thread(100, "busy", "0-3", 1, 10),
            thread(200, "rtapp", "3", 3, 5),
            thread(300, "idle", "0-3", 3, 8),
            thread(400, "elsewhere", "0-3", 0, 1),
            thread(500, "pmd-1", "0-3", 3, 1),
            kworker.clone(),
        ],
        ..Sample::default()
    };
    let mut before = before;
    let mut after = before.clone();
    after.threads[0].processor = 3;
    after.threads[0].switches = 40;
    after.threads[1].switches = 6;
    after.threads[3].switches = 9;
    after.threads[4].switches = 2;
    after.threads[5].switches = 9;
    after.threads.push(thread(600, "newcomer", "0-3", 3, 2));
    // A busy loop nothing preempted: no switch, but CPU time.
    let mut spinner = thread(700, "spinner", "0-3", 3, 4);
    before.threads.push(spinner.clone());
    spinner.cpu_ticks = 150;
    after.threads.push(spinner);
    let (mut out, mut ran) = (Vec::new(), Vec::new());
    did_threads(
        &by_identity(&before),
        &after,
        3,
        2.0,
        &w,
        &mut out,
        &mut ran,
    );
    let got: Vec<(&str, &str, u64)> = out
        .iter()
        .map(|d| (d.kind.as_str(), d.source.as_str(), d.count))
        .collect();
    assert_eq!(
        got,
        [
            ("task", "task 100 busy", 30),
            ("kthread", "kthread 40 kworker/3:1", 2),
            ("task", "task 600 newcomer", 2),
            ("task", "task 700 spinner", 0)
        ]
    );
    assert_eq!(out[3].cpu_ms, Some(150 * 1000 / clock_ticks_per_s()));
    assert_eq!(out[0].cpu_ms, Some(0));
    assert!(out[1].fix.contains("workqueue"), "{}", out[1].fix);
    let names: Vec<&str> = ran.iter().map(|r| r.comm.as_str()).collect();
    assert_eq!(names, ["rtapp", "pmd-1"]);
    assert_eq!(
        TaskRef {
            pid: 7,
            tid: 9,
            comm: "x".into(),
            affinity: "3".into(),
            kthread: false
        }
        .name(),
        "task 7/9 x"
    );
}

#[test]
fn kthreads_name_their_subsystem() {
    assert!(kthread_fix("ksoftirqd/3").contains("softirq"));
    assert!(kthread_fix("rcuc/3").contains("rcu_nocbs"));
    assert!(kthread_fix("migration/3").contains("tasks"));
    assert!(kthread_fix("ktimers/3").contains("timer"));
    assert!(kthread_fix("watchdog/3").contains("per-CPU"));
    assert_eq!(per_s(3, 0.0), 0.0);
}

/// Each machine-wide setting against the value that keeps isolated CPUs quiet.
#[test]
fn machine_settings_name_what_is_wrong_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let put = |rel: &str, text: &str| {
        let p = d.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    put("proc/sys/kernel/timer_migration", "0\n");
    put("proc/sys/vm/stat_interval", "1\n");
    put("proc/sys/kernel/sched_rt_runtime_us", "-1\n");
    put("proc/sys/kernel/nmi_watchdog", "1\n");
    put(
        "sys/kernel/mm/transparent_hugepage/enabled",
        "[always] madvise never\n",
    );
    put("sys/kernel/mm/ksm/run", "1\n");
    put("proc/sys/kernel/printk", "7\t4\t1\t7\n");
    put(
        "proc/consoles",
        "ttyS0                -W- (EC p a)    4:64\ntty0                 -WU (E  p  )    4:7\n",
    );
    let root = SysRoot::new(d);
    let cpus: CpuSet = "2-3".parse().unwrap();
    let mut pr = thread(61, "pr/ttyS0", "0-1", 0, 0);
    pr.flags |= crate::procfs::PF_KTHREAD;
    let got = machine_settings(&root, &[pr.clone()], &cpus).unwrap();
    let v: Vec<(&str, &str, bool)> = got
        .iter()
        .map(|s| (s.name.as_str(), s.value.as_str(), s.ok))
        .collect();
    assert_eq!(
        v,
        [
            ("kernel.timer_migration", "0", true),
            ("vm.stat_interval", "1", false),
            ("kernel.sched_rt_runtime_us", "-1", true),
            ("kernel.nmi_watchdog", "1", false),
            ("printk", "console loglevel 7, serial console ttyS0", false),
            ("transparent_hugepage", "always", false),
            ("ksm", "1", false),
            ("console printing threads", "pr/ttyS0 on CPUs 0-1", true),
        ]
    );
    assert!(got.iter().all(|s| s.ok == s.fix.is_empty()), "{got:?}");
    assert_eq!(got[4].fix, "isold item printk (4)");
    // Without a serial console the log level does not matter; a file the kernel lacks
    // is no setting.
    put(
        "proc/consoles",
        "tty0                 -WU (E  p  )    4:7\n",
    );
    std::fs::remove_file(d.join("sys/kernel/mm/ksm/run")).unwrap();
    let got = machine_settings(&root, &[], &cpus).unwrap();
    assert!(got.iter().any(|s| s.name == "printk" && s.ok), "{got:?}");
    assert!(!got
        .iter()
        .any(|s| s.name == "ksm" || s.name == "console printing threads"));
}

#[test]
fn workloads_without_the_vmstat_quiesce_are_named_where_the_kernel_has_the_interface() {
    let dir = tempfile::tempdir().unwrap();
    let root = SysRoot::new(dir.path());
    let write = |tid: i32, text: &str| {
        let p = dir.path().join(format!("proc/{tid}"));
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("task_isolation"), text).unwrap();
    };
    let active = "Configured state: quiesce \nActive state: quiesce \nQuiescing: vmstat_sync \n";
    let configured = "Configured state: quiesce \nActive state: none \nQuiescing: vmstat_sync \n";
    let none = "Configured state: none \nActive state: none \nQuiescing: none \n";
    let nothing = "Configured state: quiesce \nActive state: quiesce \nQuiescing: none \n";
    write(10, active);
    write(11, configured);
    write(12, none);
    write(13, nothing);
    let task = |tid: i32, kthread: bool| TaskRef {
        pid: 10,
        tid,
        comm: "meter".into(),
        affinity: "3".into(),
        kthread,
    };
    // 14 has no file: gone meanwhile. A kthread is never a workload to quiesce.
    let workloads = [
        task(10, false),
        task(11, false),
        task(12, false),
        task(13, false),
        task(14, false),
        task(12, true),
    ];
    let tids: Vec<i32> = without_quiesce(&root, &workloads)
        .iter()
        .map(|t| t.tid)
        .collect();
    assert_eq!(tids, [11, 12, 13]);
}
