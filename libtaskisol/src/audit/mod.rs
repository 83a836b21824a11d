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
//!
//! One file per kind of finding: `exposure` (the IRQs that can reach a CPU), `deltas`
//! (what interrupts and softirqs did, with their fixes), `threads` (the threads that ran and
//! those starving); the machine's settings are the items' own (`policy::items`).

use std::collections::HashMap;

mod deltas;
mod exposure;
mod threads;

pub use deltas::noise_fix;
use deltas::{did_interrupts, did_softirqs, tick_of, At, Deltas};
use exposure::irq_exposures;
use threads::{by_identity, did_threads, starving_threads};

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
    /// The file and line that name the preset (`None`: the default).
    pub preset_at: Option<String>,
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
            preset_at: None,
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

    /// The interrupt tables alone, no thread: what a sample between two walks of the
    /// threads reads (`isold run`'s metrics walk the threads at a slower pace).
    pub fn read_counters(root: &SysRoot) -> Result<Sample> {
        Self::read_with(root, |_| Ok(Vec::new()))
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
    /// On a kernel with the task-isolation interface: workload threads allowed on it that
    /// run without the vmstat quiesce active (`/proc/<tid>/task_isolation`), so the vmstat
    /// work their system calls leave behind runs on the CPU later. Empty on other kernels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub without_quiesce: Vec<TaskRef>,
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
///
/// Long because it fills each CPU's audit field by field from the same two samples; the findings
/// themselves are in exposure.rs, deltas.rs and threads.rs.
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
    let boot_args = bootargs::needed(
        scope.preset,
        &scope.cpus,
        &housekeeping,
        &bootargs::Machine::read(root),
        &cmdline,
    );
    let settings = machine_settings(root, &after.threads, &scope.cpus)?;
    let irqs = irq_exposures(root, &scope.irq_movable, &scope.allow_irqs)?;
    let unbound = workqueue::unbound_cpumask(root)?;
    let rcu_nocbs = bootargs::last_value(&cmdline, "rcu_nocbs")
        .and_then(|v| CpuSet::parse_list(&v).ok())
        .unwrap_or_default();
    let workload_of = Workloads::new(root, scope);
    // The kernel has the task-isolation interface (the project's own kernel): its file exists
    // for every task.
    let interface = has_task_isolation(root);
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
        let mut workloads_ran = Vec::new();
        // No window, nothing observed: two samples a few milliseconds apart (taken anyway)
        // say nothing of what disturbs, and their counts would read as rates.
        if window_s > 0.0 {
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
            did_threads(
                &earlier,
                after,
                cpu,
                window_s,
                &workload_of,
                &mut did,
                &mut workloads_ran,
            );
        }
        did.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.source.cmp(&b.source)));
        let starving = starving_threads(&earlier, after, cpu, window_s);
        let without_quiesce = if interface {
            without_quiesce(root, &can.workloads)
        } else {
            Vec::new()
        };
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
            without_quiesce,
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

/// Whether the kernel under `root` has the task-isolation interface (its procfs file exists).
/// A read, never a prctl.
pub fn has_task_isolation(root: &SysRoot) -> bool {
    root.read_value_opt("/proc/self/task_isolation")
        .ok()
        .flatten()
        .is_some()
}

/// On a kernel with the task-isolation interface, the user threads pinned inside `cpus`
/// (their whole affinity in it) that run without the vmstat quiesce active: the workloads
/// `isold noise` names. Empty, with nothing read, on other kernels.
pub fn pinned_without_quiesce(root: &SysRoot, cpus: &CpuSet) -> Result<Vec<TaskRef>> {
    if !has_task_isolation(root) {
        return Ok(Vec::new());
    }
    let pinned: Vec<TaskRef> = tasks::threads_on(root, cpus)?
        .iter()
        .filter(|t| !t.is_kthread() && !t.affinity.is_empty() && t.affinity.is_subset(cpus))
        .map(TaskRef::of)
        .collect();
    Ok(without_quiesce(root, &pinned))
}

/// The workload threads (not kthreads) whose `/proc/<tid>/task_isolation` shows no active
/// vmstat quiesce; a thread gone meanwhile is left out.
fn without_quiesce(root: &SysRoot, workloads: &[TaskRef]) -> Vec<TaskRef> {
    workloads
        .iter()
        .filter(|w| !w.kthread)
        .filter(|w| {
            crate::TaskIsolationState::read(root, w.tid).is_ok_and(|s| {
                s.active & crate::abi::ISOL_F_QUIESCE == 0
                    || s.quiescing & crate::abi::ISOL_F_QUIESCE_VMSTATS == 0
            })
        })
        .cloned()
        .collect()
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

/// A count over the window as a rate per second, to a tenth.
fn per_s(count: u64, window_s: f64) -> f64 {
    if window_s > 0.0 {
        (count as f64 / window_s * 10.0).round() / 10.0
    } else {
        0.0
    }
}

/// The fix for a per-CPU kernel thread, by its name.
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

#[cfg(test)]
mod tests;
