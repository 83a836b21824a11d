//! Who can and who did disturb each isolated CPU: the evidence behind `isold audit`.
//! Read-only: nothing here writes a file.
//!
//! - **Can disturb** (a snapshot): IRQs whose affinity or effective affinity includes the CPU,
//!   tasks and threads allowed on it (workloads told apart), per-CPU kthreads, and the
//!   settings that put kernel work there (tick, RCU callbacks, unbound workqueues, timer
//!   migration, vmstat, RT throttling, THP, KSM, the NMI watchdog, consoles), plus the boot
//!   arguments the policy needs that `/proc/cmdline` lacks.
//! - **Did disturb** (two [`Sample`]s a window apart): the per-CPU deltas of every row of
//!   `/proc/interrupts` and `/proc/softirqs`, and the threads that ran there (context
//!   switches, last CPU).
//! - A verdict per CPU: quiet, or the disturbers ranked by what they did, each with the fix.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::error::Result;
use crate::irq::{self, Interrupts};
use crate::policy::bootargs::{self, BootArg};
use crate::policy::config::glob_match;
use crate::policy::preset::Preset;
use crate::sysroot::SysRoot;
use crate::tasks::{self, Thread};
use crate::tickstop;
use crate::topology::{self, IsolatedCpus};
use crate::workqueue;

/// A tick at this rate or below counts as stopped: with nohz_full a busy CPU keeps a
/// residual 1 Hz tick (1.9/s measured on 6.12-rt under QEMU), a periodic one runs at
/// CONFIG_HZ (100 to 1000; Debian: 250).
pub const TICK_STOPPED_PER_S: f64 = 10.0;

/// What to audit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// The isolated CPUs to audit.
    pub cpus: CpuSet,
    /// Where they come from, for the report ("--cpus", "the kernel: nohz_full").
    pub source: String,
    /// The preset whose boot arguments are checked.
    pub preset: Preset,
    /// Thread names that are workloads (the configuration's `allow_comm` and its defaults).
    pub allow_comm: Vec<String>,
    /// Cgroups whose tasks are workloads (`allow_cgroup`).
    pub allow_cgroup: Vec<String>,
    /// IRQs that are the workload's (`[irqs] allow`): meant to reach the CPU.
    #[doc(alias = "irqs.allow")]
    pub allow_irqs: Vec<crate::policy::config::IrqAllow>,
    /// What `isold apply` learnt about IRQs (its state file): true for an IRQ it moved,
    /// false for one the kernel refused to move. Used where the kernel's IRQ flags are not
    /// readable (no CONFIG_GENERIC_IRQ_DEBUGFS, as on Debian's kernels).
    pub irq_movable: std::collections::BTreeMap<u32, bool>,
}

impl Scope {
    /// `cpus` with the default preset's allow-lists (`pmd*`, `lcore-worker-*`, ...) and
    /// nothing known about IRQ mobility.
    pub fn new(cpus: CpuSet, source: impl Into<String>) -> Scope {
        let c = crate::policy::config::Config::defaults(
            Preset::default(),
            crate::policy::config::CpuSpec::Auto,
        );
        Scope {
            cpus,
            source: source.into(),
            preset: c.preset,
            allow_comm: c.allow_comm,
            allow_cgroup: c.allow_cgroup,
            allow_irqs: c.irq_allow,
            irq_movable: Default::default(),
        }
    }
}

/// Counters at one instant: the "did disturb" part compares two of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sample {
    /// `/proc/interrupts`.
    pub interrupts: Interrupts,
    /// `/proc/softirqs` (same layout), where the kernel has it.
    pub softirqs: Option<Interrupts>,
    /// Every thread with its context switches and last CPU.
    pub threads: Vec<Thread>,
}

impl Sample {
    /// Read the counters under `root`, with every thread.
    pub fn read(root: &SysRoot) -> Result<Sample> {
        Self::read_with(root, tasks::all_threads)
    }

    /// The counters under `root`, with only the threads that may run on `cpus` (an audit
    /// of `cpus` looks at no other): see [`tasks::threads_on`].
    pub fn read_for(root: &SysRoot, cpus: &CpuSet) -> Result<Sample> {
        Self::read_with(root, |r| tasks::threads_on(r, cpus))
    }

    fn read_with(
        root: &SysRoot,
        threads: impl FnOnce(&SysRoot) -> Result<Vec<Thread>>,
    ) -> Result<Sample> {
        let softirqs = match root.read_parsed("/proc/softirqs", Interrupts::parse) {
            Ok(s) => Some(s),
            Err(e) if e.errno() == Some(libc::ENOENT) => None,
            Err(e) => return Err(e),
        };
        Ok(Sample {
            interrupts: Interrupts::read(root)?,
            softirqs,
            threads: threads(root)?,
        })
    }
}

/// A thread as the audit names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRef {
    /// Process id.
    pub pid: i32,
    /// Thread id.
    pub tid: i32,
    /// Thread name.
    pub comm: String,
    /// Its CPU affinity.
    pub affinity: String,
    /// A kernel thread.
    pub kthread: bool,
}

impl TaskRef {
    fn of(t: &Thread) -> TaskRef {
        TaskRef {
            pid: t.pid,
            tid: t.tid,
            comm: t.comm.clone(),
            affinity: t.affinity.to_string(),
            kthread: t.is_kthread(),
        }
    }

    /// "kthread 40 kworker/3:1", "task 812/813 worker".
    pub fn name(&self) -> String {
        let kind = if self.kthread { "kthread" } else { "task" };
        if self.pid == self.tid {
            format!("{kind} {} {}", self.pid, self.comm)
        } else {
            format!("{kind} {}/{} {}", self.pid, self.tid, self.comm)
        }
    }
}

/// An IRQ that may be delivered to the CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IrqExposure {
    /// The IRQ number.
    pub irq: u32,
    /// Its device (action) name; empty without a handler.
    pub name: String,
    /// `smp_affinity_list`.
    pub affinity: String,
    /// `effective_affinity_list`, where the kernel has it.
    pub effective: Option<String>,
    /// Whether the kernel manages its affinity (a multi-queue device's queue IRQ); `None`
    /// when the kernel's IRQ flags are not readable (debugfs not mounted).
    pub managed: Option<bool>,
    /// Whether root may move it; `None` when unknown (see `managed`).
    pub movable: Option<bool>,
    /// What keeps it off the CPU.
    pub fix: String,
}

pub use crate::policy::items::Setting;

/// Who can disturb one CPU.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exposure {
    /// IRQs whose affinity or effective affinity includes the CPU.
    pub irqs: Vec<IrqExposure>,
    /// User tasks and movable kthreads allowed on it that are not workloads.
    pub tasks: Vec<TaskRef>,
    /// Kthreads the kernel keeps on this CPU (`PF_NO_SETAFFINITY`: ksoftirqd, kworker, ...).
    pub percpu_kthreads: Vec<TaskRef>,
    /// Workloads allowed on it: meant to be there.
    pub workloads: Vec<TaskRef>,
    /// The workload's IRQs (`[irqs] allow`) that reach it: meant to be there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workload_irqs: Vec<IrqExposure>,
    /// Per-CPU settings (tick, RCU callbacks, unbound workqueues).
    pub settings: Vec<Setting>,
}

/// Something that ran on the CPU during the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Disturbance {
    /// `irq`, `ipi`, `tick`, `softirq`, `task` or `kthread`.
    pub kind: String,
    /// What it is (`IRQ 4 ttyS0`, `RES rescheduling IPIs`, `softirq TIMER`, `task 812 busy`).
    pub source: String,
    /// Interrupts, softirqs or context switches counted on the CPU in the window.
    pub count: u64,
    /// The same per second.
    pub per_s: f64,
    /// Tasks: the CPU time it used in the window, milliseconds (a busy loop that nothing
    /// preempts switches rarely but uses the whole CPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ms: Option<u64>,
    /// What removes it.
    pub fix: String,
}

/// The tick on one CPU during the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tick {
    /// Local timer interrupts per second.
    pub per_s: f64,
    /// At most [`TICK_STOPPED_PER_S`].
    pub stopped: bool,
    /// The CPU is a nohz_full CPU.
    pub nohz_full: bool,
    /// Why the kernel did not stop it, from its tick_stop tracepoint during the window, most
    /// first; `None` when the tracepoint was not recorded (no tracefs, or no window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasons: Option<Vec<TickReason>>,
}

/// A dependency the kernel named when it could not stop the tick (`tick_stop:
/// success=0 dependency=...`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TickReason {
    /// The kernel's name: POSIX_TIMER, PERF_EVENTS, SCHED, CLOCK_UNSTABLE, RCU, RCU_EXP.
    pub dependency: String,
    /// Times the tick could not stop for it in the window.
    pub count: u64,
    /// The tasks that were running then (0 is the idle task).
    pub pids: Vec<i32>,
    /// What removes it.
    pub fix: String,
}

/// A thread that was runnable on the CPU through the whole window and never ran: it starves
/// behind what holds the CPU (a real-time busy loop with RT throttling off).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Starving {
    /// The thread.
    pub thread: TaskRef,
    /// It waited at least this long: the window, seconds.
    pub waited_s: f64,
    /// What ran on the CPU meanwhile: the thread that used the most CPU time there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behind: Option<TaskRef>,
    /// What ends it.
    pub fix: String,
}

/// The shortest window that tells a starving thread from one that waits its turn.
pub const STARVING_WINDOW_S: f64 = 0.5;

/// Everything about one CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuAudit {
    /// The CPU.
    pub cpu: usize,
    /// The kernel's mechanisms that isolate it (`isolcpus domain`, `nohz_full`, ...).
    pub isolated_by: Vec<String>,
    /// `quiet`, `disturbed`, or `unobserved` (no window).
    pub verdict: String,
    /// The tick.
    pub tick: Option<Tick>,
    /// Who disturbed it, most first.
    pub disturbed_by: Vec<Disturbance>,
    /// Workloads that ran on it (meant to be there; not disturbers).
    pub workloads_ran: Vec<TaskRef>,
    /// The workload's IRQs that fired on it (meant to be there; not disturbers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workload_irqs_fired: Vec<Disturbance>,
    /// Threads starving on it now: runnable there through the whole window without running.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub starving: Vec<Starving>,
    /// Who can disturb it.
    pub can_disturb: Exposure,
    /// What the kernel's osnoise tracer measured during the window (`--osnoise`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub osnoise: Option<crate::osnoise::CpuNoise>,
}

/// The whole audit (`isold audit --json`; the format is documented in isold(8)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Audit {
    /// The running kernel's release.
    pub kernel: String,
    /// The audited CPUs.
    pub cpus: String,
    /// Where they come from.
    pub source: String,
    /// Online CPUs outside them.
    pub housekeeping: String,
    /// The kernel's own housekeeping CPUs (`/sys/devices/system/cpu/housekeeping`, 7.x).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_housekeeping: Option<String>,
    /// The window between the two samples, seconds.
    pub window_s: f64,
    /// Machine-wide settings that reach the audited CPUs.
    pub settings: Vec<Setting>,
    /// The boot arguments the preset needs, each checked against `/proc/cmdline`.
    pub boot_args: Vec<BootArg>,
    /// One entry per audited CPU, ascending.
    pub per_cpu: Vec<CpuAudit>,
    /// Remarks (what could not be measured, and why).
    #[serde(default)]
    pub notes: Vec<String>,
}

impl Audit {
    /// The CPUs with a `disturbed` verdict.
    pub fn disturbed(&self) -> impl Iterator<Item = &CpuAudit> {
        self.per_cpu.iter().filter(|c| c.verdict == "disturbed")
    }

    /// The boot arguments the running kernel lacks.
    pub fn missing_boot_args(&self) -> impl Iterator<Item = &BootArg> {
        self.boot_args.iter().filter(|a| !a.satisfied)
    }

    /// Whether the tick ran on an audited CPU during the window.
    pub fn any_tick_ran(&self) -> bool {
        self.per_cpu
            .iter()
            .any(|c| c.tick.as_ref().is_some_and(|t| !t.stopped))
    }

    /// Join what the kernel's tick_stop tracepoint recorded during the window: each CPU's
    /// tick gets the dependencies it did not stop for, and a tick that ran is reported with
    /// them and their fixes instead of the audit's own reading.
    pub fn add_tick_stops(&mut self, trace: &tickstop::Trace) {
        for c in &mut self.per_cpu {
            let Some(tick) = &mut c.tick else { continue };
            let mut reasons: Vec<TickReason> = trace
                .per_cpu
                .get(&c.cpu)
                .map(|s| {
                    s.failed
                        .iter()
                        .map(|(dep, f)| TickReason {
                            dependency: dep.clone(),
                            count: f.count,
                            pids: f.pids.iter().copied().collect(),
                            fix: tickstop::fix(dep, &self.cpus),
                        })
                        .collect()
                })
                .unwrap_or_default();
            reasons.sort_by(|a, b| {
                b.count
                    .cmp(&a.count)
                    .then_with(|| a.dependency.cmp(&b.dependency))
            });
            if !tick.stopped && !reasons.is_empty() {
                if let Some(d) = c.disturbed_by.iter_mut().find(|d| d.kind == "tick") {
                    d.fix = tick_reasons_fix(&reasons);
                }
            }
            tick.reasons = Some(reasons);
        }
    }
}

/// The fix of a tick that ran, from the kernel's reasons: each with how often and the tasks
/// that were running (up to four).
fn tick_reasons_fix(reasons: &[TickReason]) -> String {
    let parts: Vec<String> = reasons
        .iter()
        .map(|r| {
            let mut pids: Vec<String> = r.pids.iter().take(4).map(|p| p.to_string()).collect();
            if r.pids.len() > 4 {
                pids.push("...".into());
            }
            let who = match pids.len() {
                0 => String::new(),
                1 => format!(", task {}", pids[0]),
                _ => format!(", tasks {}", pids.join(" ")),
            };
            let times = if r.count == 1 { "time" } else { "times" };
            format!("{} ({} {times}{who}): {}", r.dependency, r.count, r.fix)
        })
        .collect();
    format!("the kernel kept the tick for {}", parts.join("; "))
}

/// Build the audit of `scope` from the files under `root` (the "can" part, read now) and two
/// samples taken `window_s` seconds apart (the "did" part).
pub fn audit(
    root: &SysRoot,
    scope: &Scope,
    before: &Sample,
    after: &Sample,
    window_s: f64,
) -> Result<Audit> {
    let online = topology::online_cpus(root)?;
    let housekeeping = online.difference(&scope.cpus);
    let kernel = root
        .read_value_opt("/proc/sys/kernel/osrelease")?
        .unwrap_or_default();
    let iso = IsolatedCpus::discover(root)?;
    let cmdline = root.read_value_opt("/proc/cmdline")?.unwrap_or_default();
    let vendor = bootargs::cpu_vendor(root);
    let boot_args = bootargs::needed(
        scope.preset,
        &scope.cpus,
        &housekeeping,
        vendor.as_deref(),
        &cmdline,
    );
    let settings = machine_settings(root, &after.threads, &scope.cpus)?;
    let irqs = irq_exposures(root, &scope.irq_movable, &scope.allow_irqs)?;
    let unbound = workqueue::unbound_cpumask(root)?;
    let rcu_nocbs = bootargs::last_value(&cmdline, "rcu_nocbs")
        .and_then(|v| CpuSet::parse_list(&v).ok())
        .unwrap_or_default();
    let workload_of = Workloads::new(root, scope);
    let earlier = by_identity(before);
    let mut per_cpu = Vec::new();
    // Each table indexed once, for every CPU's lookups.
    let irq_deltas = Deltas::new(&before.interrupts, &after.interrupts);
    let softirq_deltas = match (&before.softirqs, &after.softirqs) {
        (Some(b), Some(a)) => Some(Deltas::new(b, a)),
        _ => None,
    };
    for cpu in scope.cpus.iter() {
        let mut can = Exposure::default();
        for i in irqs.iter().filter(|i| {
            i.affinity.contains(cpu) || i.effective.as_ref().is_some_and(|e| e.contains(cpu))
        }) {
            if i.workload {
                can.workload_irqs.push(i.exposure.clone());
            } else {
                can.irqs.push(i.exposure.clone());
            }
        }
        for t in after.threads.iter().filter(|t| t.affinity.contains(cpu)) {
            let r = TaskRef::of(t);
            if t.is_pinned_by_kernel() {
                can.percpu_kthreads.push(r);
            } else if workload_of.is(t) {
                can.workloads.push(r);
            } else {
                can.tasks.push(r);
            }
        }
        let nohz_full = iso.nohz_full.contains(cpu);
        can.settings.push(Setting {
            name: "tick".into(),
            value: if nohz_full { "nohz_full" } else { "periodic" }.into(),
            ok: nohz_full,
            why: "the scheduler tick interrupts the CPU 100-1000 times a second".into(),
            fix: if nohz_full {
                String::new()
            } else {
                format!("boot argument nohz_full={}", scope.cpus)
            },
        });
        let offloaded = nohz_full || rcu_nocbs.contains(cpu);
        can.settings.push(Setting {
            name: "rcu callbacks".into(),
            value: if offloaded {
                "offloaded"
            } else {
                "on this CPU"
            }
            .into(),
            ok: offloaded,
            why: "RCU callbacks run in softirq context on the CPU that queued them".into(),
            fix: if offloaded {
                String::new()
            } else {
                format!("boot argument rcu_nocbs={}", scope.cpus)
            },
        });
        if let Some(mask) = &unbound {
            let ok = !mask.contains(cpu);
            can.settings.push(Setting {
                name: "unbound workqueues".into(),
                value: mask.to_string(),
                ok,
                why: "kworkers of unbound workqueues may run here".into(),
                fix: if ok {
                    String::new()
                } else {
                    "isold item workqueue".into()
                },
            });
        }
        let tick = tick_of(&irq_deltas, cpu, window_s, nohz_full);
        let mut did = Vec::new();
        let mut workload_irqs_fired = Vec::new();
        let at = At {
            cpu,
            nohz_full,
            cpus: &scope.cpus,
            window_s,
        };
        did_interrupts(
            &irq_deltas,
            &at,
            &irqs,
            (&mut did, &mut workload_irqs_fired),
        );
        if let Some(d) = &softirq_deltas {
            did_softirqs(d, cpu, window_s, &mut did);
        }
        let mut workloads_ran = Vec::new();
        did_threads(
            &earlier,
            after,
            cpu,
            window_s,
            &workload_of,
            &mut did,
            &mut workloads_ran,
        );
        did.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.source.cmp(&b.source)));
        let starving = starving_threads(&earlier, after, cpu, window_s);
        per_cpu.push(CpuAudit {
            cpu,
            isolated_by: iso.mechanisms(cpu).into_iter().map(String::from).collect(),
            verdict: if window_s <= 0.0 {
                "unobserved"
            } else if did.is_empty() {
                "quiet"
            } else {
                "disturbed"
            }
            .into(),
            tick,
            disturbed_by: did,
            workloads_ran,
            workload_irqs_fired,
            starving,
            can_disturb: can,
            osnoise: None,
        });
    }
    Ok(Audit {
        kernel,
        cpus: scope.cpus.to_string(),
        source: scope.source.clone(),
        housekeeping: housekeeping.to_string(),
        kernel_housekeeping: root.read_value_opt("/sys/devices/system/cpu/housekeeping")?,
        window_s,
        settings,
        boot_args,
        per_cpu,
        notes: Vec::new(),
    })
}

/// Which threads are workloads (meant to run on the audited CPUs): user threads inside
/// them, or allow-listed by name or cgroup; kernel threads never are. `isold run`'s metrics
/// tell the context switches of the rest apart with it.
#[derive(Debug)]
pub struct Workloads<'a> {
    scope: &'a Scope,
    cgroups: std::cell::RefCell<HashMap<i32, Option<String>>>,
    root: &'a SysRoot,
}

impl<'a> Workloads<'a> {
    /// The workloads of `scope`, cgroups read under `root` when asked.
    pub fn new(root: &'a SysRoot, scope: &'a Scope) -> Self {
        Workloads {
            scope,
            cgroups: Default::default(),
            root,
        }
    }

    /// Whether `t` is a workload.
    pub fn is(&self, t: &Thread) -> bool {
        if t.is_kthread() {
            return false;
        }
        if t.affinity.is_subset(&self.scope.cpus)
            || self.scope.allow_comm.iter().any(|p| glob_match(p, &t.comm))
        {
            return true;
        }
        if self.scope.allow_cgroup.is_empty() {
            return false;
        }
        let mut cache = self.cgroups.borrow_mut();
        let cg = cache
            .entry(t.pid)
            .or_insert_with(|| tasks::cgroup_of(self.root, t.pid).ok().flatten());
        cg.as_deref().is_some_and(|cg| {
            crate::policy::items::tasks::allowed_cgroup(&self.scope.allow_cgroup, cg).is_some()
        })
    }
}

/// Every IRQ with its affinity, effective affinity and exposure record.
/// An IRQ as the audit sees it: where it may and does go, what it is, whose it is.
struct SeenIrq {
    affinity: CpuSet,
    effective: Option<CpuSet>,
    exposure: IrqExposure,
    /// The workload's (`[irqs] allow`).
    workload: bool,
}

fn irq_exposures(
    root: &SysRoot,
    known: &std::collections::BTreeMap<u32, bool>,
    allow: &[crate::policy::config::IrqAllow],
) -> Result<Vec<SeenIrq>> {
    let mut out = Vec::new();
    // An IRQ without a handler is never delivered: no device requested it.
    for i in irq::list(root)?
        .into_iter()
        .filter(|i| !i.action.is_empty())
    {
        let flags = root
            .read_to_string(format!("/sys/kernel/debug/irq/irqs/{}", i.irq))
            .ok();
        let managed = flags
            .as_deref()
            .map(|f| f.contains("IRQD_AFFINITY_MANAGED"));
        let movable = flags
            .as_deref()
            .map(|f| {
                !["IRQD_AFFINITY_MANAGED", "IRQD_PER_CPU", "IRQD_NO_BALANCING"]
                    .iter()
                    .any(|b| f.contains(b))
            })
            .or_else(|| known.get(&i.irq).copied());
        let allowed = crate::policy::config::allowed_irq(allow, i.irq, &i.actions);
        let fix = match (allowed, managed, movable) {
            (Some(a), _, _) => format!("none: the workload's IRQ ([irqs] allow {a})"),
            (_, Some(true), _) => {
                "boot argument isolcpus=managed_irq,... (the kernel places managed IRQs)".into()
            }
            (_, _, Some(false)) => "none at run time: the kernel does not let this IRQ move".into(),
            _ => "isold item irq_affinity".into(),
        };
        out.push(SeenIrq {
            affinity: i.affinity.clone(),
            effective: i.effective.clone(),
            exposure: IrqExposure {
                irq: i.irq,
                name: i.action.clone(),
                affinity: i.affinity.to_string(),
                effective: i.effective.as_ref().map(|e| e.to_string()),
                managed,
                movable,
                fix,
            },
            workload: allowed.is_some(),
        });
    }
    Ok(out)
}

/// Machine-wide settings, each with whether it keeps isolated CPUs quiet.
fn machine_settings(root: &SysRoot, threads: &[Thread], cpus: &CpuSet) -> Result<Vec<Setting>> {
    let m = crate::policy::items::Machine {
        root,
        threads,
        cpus,
    };
    let mut out = Vec::new();
    for item in crate::policy::items::ALL {
        (item.audit)(&m, &mut out)?;
    }
    Ok(out)
}

/// Two samples of a `/proc/interrupts` or `/proc/softirqs` table, matched once: each row
/// of the later one with the earlier row of its label, and each CPU with its column. The
/// audit takes every row's growth on every audited CPU (a search of the rows for each took
/// 30 s on 448 CPUs with 4,000 IRQs).
struct Deltas<'a> {
    before: &'a Interrupts,
    after: &'a Interrupts,
    /// For each row of `after`, the first row of `before` with its label.
    earlier: Vec<Option<usize>>,
    /// The first row of `after` of each label.
    rows: HashMap<&'a str, usize>,
    cols_before: HashMap<usize, usize>,
    cols_after: HashMap<usize, usize>,
}

impl<'a> Deltas<'a> {
    fn new(before: &'a Interrupts, after: &'a Interrupts) -> Self {
        let first = |t: &'a Interrupts| {
            let mut m: HashMap<&'a str, usize> = HashMap::with_capacity(t.rows.len());
            for (i, r) in t.rows.iter().enumerate() {
                m.entry(r.label.as_str()).or_insert(i);
            }
            m
        };
        let (rb, rows) = (first(before), first(after));
        let cols = |t: &Interrupts| t.cpus.iter().enumerate().map(|(i, &c)| (c, i)).collect();
        Deltas {
            before,
            after,
            earlier: after
                .rows
                .iter()
                .map(|r| rb.get(r.label.as_str()).copied())
                .collect(),
            rows,
            cols_before: cols(before),
            cols_after: cols(after),
        }
    }

    fn has_cpu(&self, cpu: usize) -> bool {
        self.cols_after.contains_key(&cpu)
    }

    /// `after - before` of row `i` of `after` on `cpu` (0 when the column is missing or the
    /// counter went backwards; the whole count for a row or column new in `after`).
    fn row(&self, i: usize, cpu: usize) -> u64 {
        let Some(a) = self
            .cols_after
            .get(&cpu)
            .and_then(|&c| self.after.rows[i].counts.get(c))
        else {
            return 0;
        };
        let b = self.earlier[i].and_then(|j| {
            let c = *self.cols_before.get(&cpu)?;
            self.before.rows[j].counts.get(c)
        });
        match b {
            Some(b) => a.saturating_sub(*b),
            None => *a,
        }
    }

    /// The same for the row `label`.
    fn of(&self, label: &str, cpu: usize) -> u64 {
        self.rows.get(label).map_or(0, |&i| self.row(i, cpu))
    }
}

fn per_s(count: u64, window_s: f64) -> f64 {
    if window_s > 0.0 {
        (count as f64 / window_s * 10.0).round() / 10.0
    } else {
        0.0
    }
}

fn tick_of(d: &Deltas, cpu: usize, window_s: f64, nohz_full: bool) -> Option<Tick> {
    if window_s <= 0.0 || !d.has_cpu(cpu) {
        return None;
    }
    d.rows.get("LOC")?;
    let rate = per_s(d.of("LOC", cpu), window_s);
    Some(Tick {
        per_s: rate,
        stopped: rate <= TICK_STOPPED_PER_S,
        nohz_full,
        reasons: None,
    })
}

/// The kind and fix of a per-CPU (non-numbered) row of /proc/interrupts.
fn ipi_fix(label: &str, nohz_full: bool, cpus: &CpuSet) -> (&'static str, String) {
    match label {
        "LOC" => (
            "tick",
            if nohz_full {
                "the tick runs while more than one task is runnable here: leave the workload alone on the CPU (isold item tasks)".into()
            } else {
                format!("boot argument nohz_full={cpus}")
            },
        ),
        "RES" => (
            "ipi",
            "tasks woken or moved here: isold item tasks; a workload's own threads wake each other".into(),
        ),
        "CAL" | "TLB" => (
            "ipi",
            "sent by other CPUs (memory map changes, flushes): the workload's threads elsewhere, KSM, THP; no run-time lever".into(),
        ),
        "IWI" => ("ipi", "irq_work (perf, printk, RCU): nohz_full, rcu_nocbs, printk".into()),
        "NMI" | "PMI" => ("ipi", "perf events and the NMI watchdog: sysctl kernel.nmi_watchdog = 0".into()),
        "MCP" => ("ipi", "machine-check polling: isold item machinecheck".into()),
        _ => ("ipi", "a per-CPU interrupt source of the platform".into()),
    }
}

/// The fix of an interruption source as the noise ledger names it (`IRQ 4 ttyS0`, `softirq
/// TIMER`, `IPI reschedule`, `local timer`, `kernel thread kworker/3:1`, `sh (pid 812)`):
/// the same advice the audit gives for the matching row.
pub fn noise_fix(kind: &str, source: &str, nohz_full: bool, cpus: &CpuSet) -> String {
    let row = |label: &str| ipi_fix(label, nohz_full, cpus).1;
    match kind {
        "irq" => "isold item irq_affinity (or [irqs] allow: the workload's own)".into(),
        "softirq" => softirq_fix(source.strip_prefix("softirq ").unwrap_or(source)).into(),
        "timer" => row("LOC"),
        "ipi" if source.contains("reschedule") => row("RES"),
        "ipi" if source.contains("TLB shootdown") => "the workload's memory map changed on another CPU (a sibling thread's munmap, mprotect, madvise; KSM, THP): map and mlock its memory before it runs; isold items ksm and thp".into(),
        "ipi" if source.contains("function call") => row("CAL"),
        "ipi" if source.contains("irq work") => row("IWI"),
        "nmi" => row("NMI"),
        "thread" => match source.strip_prefix("kernel thread ") {
            Some(comm) => kthread_fix(comm).into(),
            None => "a task that is not the workload: isold item tasks moves the ones allowed elsewhere; one pinned here (a second program) must be moved by its owner".into(),
        },
        _ => row(""),
    }
}

/// Where a disturbance happens: the CPU, whether it is nohz_full, the audited CPUs.
struct At<'a> {
    cpu: usize,
    nohz_full: bool,
    cpus: &'a CpuSet,
    window_s: f64,
}

/// The interrupts counted on the CPU during the window: disturbers to `did`, the workload's
/// own IRQs to `workload`.
fn did_interrupts(
    d: &Deltas,
    at: &At,
    irqs: &[SeenIrq],
    (did, workload): (&mut Vec<Disturbance>, &mut Vec<Disturbance>),
) {
    let (cpu, window_s) = (at.cpu, at.window_s);
    for (i, row) in d.after.rows.iter().enumerate() {
        let n = d.row(i, cpu);
        if n == 0 {
            continue;
        }
        if let Some(num) = row.irq() {
            let seen = irqs.iter().find(|i| i.exposure.irq == num);
            let fix = seen
                .map(|i| i.exposure.fix.clone())
                .unwrap_or_else(|| "isold item irq_affinity".into());
            let name = row.action();
            let out = if seen.is_some_and(|i| i.workload) {
                &mut *workload
            } else {
                &mut *did
            };
            out.push(Disturbance {
                kind: "irq".into(),
                source: if name.is_empty() {
                    format!("IRQ {num}")
                } else {
                    format!("IRQ {num} {name}")
                },
                count: n,
                per_s: per_s(n, window_s),
                cpu_ms: None,
                fix,
            });
        } else {
            if row.label == "LOC" && per_s(n, window_s) <= TICK_STOPPED_PER_S {
                continue; // the residual tick of nohz_full: reported as the tick
            }
            let (kind, fix) = ipi_fix(&row.label, at.nohz_full, at.cpus);
            did.push(Disturbance {
                kind: kind.into(),
                source: format!("{} {}", row.label, row.description.to_lowercase()),
                count: n,
                per_s: per_s(n, window_s),
                cpu_ms: None,
                fix,
            });
        }
    }
}

fn softirq_fix(label: &str) -> &'static str {
    match label {
        "TIMER" | "HRTIMER" => {
            "timers armed on this CPU: sysctl kernel.timer_migration = 0, nohz_full"
        }
        "RCU" => "RCU callbacks: boot argument rcu_nocbs",
        "SCHED" => "load balancing: boot argument isolcpus=domain or an isolated cpuset partition",
        "NET_RX" | "NET_TX" => "a NIC's IRQ or RPS on this CPU: isold item irq_affinity",
        "BLOCK" | "IRQ_POLL" => {
            "a disk's completions on this CPU: isold item irq_affinity, isolcpus=managed_irq"
        }
        _ => "a driver's IRQ on this CPU: isold item irq_affinity",
    }
}

fn did_softirqs(d: &Deltas, cpu: usize, window_s: f64, out: &mut Vec<Disturbance>) {
    for (i, row) in d.after.rows.iter().enumerate() {
        let n = d.row(i, cpu);
        if n > 0 {
            out.push(Disturbance {
                kind: "softirq".into(),
                source: format!("softirq {}", row.label),
                count: n,
                per_s: per_s(n, window_s),
                cpu_ms: None,
                fix: softirq_fix(&row.label).into(),
            });
        }
    }
}

/// USER_HZ, the unit of the CPU times in `/proc/<pid>/stat` (100 on every Linux
/// architecture in use).
fn clock_ticks_per_s() -> u64 {
    // SAFETY: sysconf has no preconditions.
    match unsafe { libc::sysconf(libc::_SC_CLK_TCK) } {
        n if n > 0 => n as u64,
        _ => 100,
    }
}

fn kthread_fix(comm: &str) -> &'static str {
    let base = comm.split('/').next().unwrap_or(comm);
    match base {
        "kworker" => "work queued on this CPU: isold item workqueue for unbound work; per-CPU work has no run-time lever",
        "ksoftirqd" => "softirqs deferred to a thread: see the softirq rows",
        "rcuc" | "rcuop" | "rcuog" => "RCU: boot argument rcu_nocbs",
        "migration" => "tasks moved to or from this CPU: isold item tasks",
        "ktimers" => "timers: nohz_full, kernel.timer_migration = 0",
        "cpuhp" => "CPU hotplug",
        _ => "a per-CPU kernel thread: see its subsystem",
    }
}

/// The threads of a sample by identity (tid and start time), built once per audit.
fn by_identity(s: &Sample) -> HashMap<(i32, u64), &Thread> {
    s.threads
        .iter()
        .map(|t| ((t.tid, t.starttime), t))
        .collect()
}

fn did_threads(
    earlier: &HashMap<(i32, u64), &Thread>,
    after: &Sample,
    cpu: usize,
    window_s: f64,
    workloads: &Workloads,
    out: &mut Vec<Disturbance>,
    workloads_ran: &mut Vec<TaskRef>,
) {
    let ms_per_tick = 1000 / clock_ticks_per_s();
    for t in &after.threads {
        let (count, ticks, here) = match earlier.get(&(t.tid, t.starttime)) {
            Some(b) => (
                t.switches.saturating_sub(b.switches),
                t.cpu_ticks.saturating_sub(b.cpu_ticks),
                t.processor as usize == cpu || b.processor as usize == cpu,
            ),
            // Started during the window.
            None => (t.switches, t.cpu_ticks, t.processor as usize == cpu),
        };
        if !here || (count == 0 && ticks == 0) {
            continue;
        }
        let r = TaskRef::of(t);
        if workloads.is(t) {
            workloads_ran.push(r);
            continue;
        }
        let (kind, fix) = if t.is_pinned_by_kernel() {
            ("kthread", kthread_fix(&t.comm).to_string())
        } else if t.is_kthread() {
            (
                "kthread",
                "isold item tasks (moves kthreads that may move)".into(),
            )
        } else {
            ("task", "isold item tasks".into())
        };
        out.push(Disturbance {
            kind: kind.into(),
            source: r.name(),
            count,
            per_s: per_s(count, window_s),
            cpu_ms: Some(ticks * ms_per_tick),
            fix,
        });
    }
}

/// The threads runnable on `cpu` in both samples, with no context switch and no CPU time
/// between them: they waited the whole window (a runnable thread cannot sleep without
/// running first). Named with what used the CPU meanwhile.
fn starving_threads(
    earlier: &HashMap<(i32, u64), &Thread>,
    after: &Sample,
    cpu: usize,
    window_s: f64,
) -> Vec<Starving> {
    if window_s < STARVING_WINDOW_S {
        return Vec::new();
    }
    let on = |t: &Thread| t.state == 'R' && t.processor as usize == cpu;
    let behind = after
        .threads
        .iter()
        .filter(|t| t.processor as usize == cpu)
        .filter_map(|t| {
            let b = earlier.get(&(t.tid, t.starttime))?;
            let used = t.cpu_ticks.saturating_sub(b.cpu_ticks);
            (used > 0).then_some((used, t))
        })
        .max_by_key(|(used, t)| (*used, std::cmp::Reverse(t.tid)))
        .map(|(_, t)| TaskRef::of(t));
    after
        .threads
        .iter()
        .filter(|t| on(t))
        .filter(|t| {
            earlier.get(&(t.tid, t.starttime)).is_some_and(|b| {
                on(b) && b.switches == t.switches && b.cpu_ticks == t.cpu_ticks
            })
        })
        .map(|t| Starving {
            thread: TaskRef::of(t),
            waited_s: window_s,
            behind: behind.clone(),
            fix: "isold run: its stall guard lends a starving thread a slice ([stalls] in isold.toml); or a real-time workload that leaves its CPU now and then".into(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
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
        let after = table(
            "CPU0 CPU1\nLOC: 7 3 Local timer interrupts\n 30: 0 4 PCI-MSI x virtio1-input.0\n",
        );
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
}
