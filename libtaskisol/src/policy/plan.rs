//! From a [`Policy`] to concrete targets: one per file, IRQ or thread, each with the value
//! the policy wants. Planning only reads.
//!
//! The order is the order of apply; restore goes backwards. Per-workqueue cpumasks come
//! before the global one, so that restore widens the global mask first (the kernel clips a
//! workqueue's mask to the global one).

use super::config::{allowed_irq, glob_match};
use super::{Policy, Status};
use crate::cpuset::CpuSet;
use crate::error::Result;
use crate::sched::SchedPolicy;
use crate::sysroot::SysRoot;
use crate::{irq, power, sysctl, tasks, workqueue};

/// How an attribute's content is compared with the wanted value, and written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Want {
    /// The same whitespace-separated words (sysctls, most sysfs files).
    Text(String),
    /// The bracketed choice of a file like `always [madvise] never`.
    Choice(String),
    /// A hex CPU mask file (workqueue cpumask, `default_smp_affinity`).
    Mask(CpuSet),
    /// The first field of a multi-field file (`kernel.printk`'s console log level).
    First(String),
}

impl Want {
    /// Whether `raw` (the file's content) is what is wanted.
    pub fn matches(&self, raw: &str) -> bool {
        match self {
            Want::Text(v) => raw.split_whitespace().eq(v.split_whitespace()),
            Want::Choice(v) => choice_of(raw) == v,
            Want::Mask(set) => CpuSet::parse_mask(raw.trim()).is_ok_and(|m| &m == set),
            Want::First(v) => raw.split_whitespace().next() == Some(v.as_str()),
        }
    }

    /// The text to write, given the current content.
    pub fn write_text(&self, raw: &str) -> String {
        match self {
            Want::Text(v) | Want::Choice(v) => v.clone(),
            Want::Mask(set) => set.to_mask_string(),
            Want::First(v) => {
                let mut words: Vec<&str> = raw.split_whitespace().collect();
                if words.is_empty() {
                    v.clone()
                } else {
                    words[0] = v;
                    words.join("\t")
                }
            }
        }
    }

    /// The text that writes `raw` back.
    pub fn restore_text(&self, raw: &str) -> String {
        match self {
            Want::Choice(_) => choice_of(raw).to_string(),
            _ => raw.trim_end_matches('\n').to_string(),
        }
    }

    /// The wanted value, for messages.
    pub fn shown(&self) -> String {
        match self {
            Want::Text(v) | Want::Choice(v) | Want::First(v) => v.clone(),
            Want::Mask(set) => format!("{} ({set})", set.to_mask_string()),
        }
    }
}

/// `always [madvise] never` -> `madvise`; a file without brackets is its own value.
pub(crate) fn choice_of(raw: &str) -> &str {
    raw.split_once('[')
        .and_then(|(_, rest)| rest.split_once(']'))
        .map_or(raw.trim(), |(choice, _)| choice)
}

/// What a target is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A kernel attribute file.
    Attr {
        /// Kernel path.
        path: String,
        /// The wanted content.
        want: Want,
    },
    /// An IRQ's `smp_affinity_list`.
    Irq {
        /// The IRQ.
        irq: u32,
        /// The wanted affinity.
        want: CpuSet,
    },
    /// A configuration file owned by the policy (below the root).
    File {
        /// Path.
        path: String,
        /// The wanted content.
        content: String,
    },
    /// A thread's affinity.
    Affinity {
        /// The thread as planned.
        thread: tasks::Thread,
        /// The wanted affinity.
        want: CpuSet,
    },
    /// A kthread's scheduling policy.
    Sched {
        /// The thread as planned.
        thread: tasks::Thread,
        /// The wanted policy.
        want: SchedPolicy,
    },
    /// Nothing to write: the planner already knows the outcome (left alone, not movable).
    Known(Status),
    /// The cgroup v2 isolated partition and the workloads to move into it.
    Partition(super::partition::PartitionPlan),
}

/// One thing the policy sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The item (`[items]` name).
    pub item: &'static str,
    /// Stable id, the key of the state file.
    pub id: String,
    /// For people.
    pub label: String,
    /// What to do.
    pub op: Op,
}

fn attr(item: &'static str, id: String, label: String, path: String, want: Want) -> Target {
    Target {
        item,
        id,
        label,
        op: Op::Attr { path, want },
    }
}

fn known(item: &'static str, id: String, label: String, status: Status) -> Target {
    Target {
        item,
        id,
        label,
        op: Op::Known(status),
    }
}

pub use super::paths::{
    owned_files, CPUAFFINITY_CONF, DEFAULT_SMP_AFFINITY, IRQBALANCE_FILES, KSM_RUN, KVM_CONF,
    MACHINECHECK_DIR, PRINTK, THP_ENABLED,
};

/// Whether an IRQ's affinity keeps it off the isolated CPUs: then it is right wherever it is
/// among the others (the plan narrows it to the housekeeping CPUs it had; irqbalance, which
/// isold bans from the isolated CPUs, may move it among them without a fight).
pub fn irq_off(affinity: &CpuSet, isolated: &CpuSet) -> bool {
    !affinity.is_empty() && affinity.is_disjoint(isolated)
}

/// `current ∩ housekeeping`, or every housekeeping CPU when that is empty.
pub fn narrowed(current: &CpuSet, housekeeping: &CpuSet) -> CpuSet {
    let n = current.intersection(housekeeping);
    if n.is_empty() {
        housekeeping.clone()
    } else {
        n
    }
}

/// Plan every target of `policy` on the kernel under `root`.
pub fn plan(policy: &Policy, root: &SysRoot) -> Result<Vec<Target>> {
    use crate::cost::stage;
    let c = &policy.config;
    let mut out = Vec::new();
    stage("plan", "sysctl", || plan_sysctls(policy, &mut out))?;
    stage("plan", "kernel settings", || {
        plan_kernel_settings(policy, root, &mut out)
    })?;
    stage("plan", "workqueues", || {
        plan_workqueues(policy, root, &mut out)
    })?;
    stage("plan", "power", || plan_power(policy, root, &mut out))?;
    if c.irq_affinity {
        stage("plan", "irqs", || plan_irqs(policy, root, &mut out))?;
    }
    // One read of every thread for the items that need it (a /proc scan: thousands of files).
    let threads = if c.tasks || !c.kthread_priority.is_empty() || c.cgroup_partition.is_some() {
        stage("plan", "read every thread", || {
            tasks::all_threads_with(root, tasks::Detail::NoSwitches)
        })?
    } else {
        Vec::new()
    };
    if c.tasks || !c.kthread_priority.is_empty() {
        stage("plan", "threads", || {
            plan_threads(policy, root, &threads, &mut out)
        });
    }
    if let Some(dir) = &c.cgroup_partition {
        // After the tasks: the workloads it moves in keep their CPUs, the rest already left.
        let p = stage("plan", "partition", || {
            plan_partition(policy, root, dir, &threads)
        })?;
        out.push(p);
    }
    out.extend(stage("plan", "files", || file_targets(policy, root))?);
    Ok(out)
}

/// The `[sysctl]` targets.
fn plan_sysctls(policy: &Policy, out: &mut Vec<Target>) -> Result<()> {
    for (name, value) in &policy.config.sysctl {
        out.push(attr(
            "sysctl",
            format!("sysctl:{name}"),
            format!("sysctl {name}"),
            sysctl::path_of(name)?,
            Want::Text(value.clone()),
        ));
    }
    Ok(())
}

/// printk, THP, KSM and machine-check polling: one kernel file each (one per machinecheck
/// device).
fn plan_kernel_settings(policy: &Policy, root: &SysRoot, out: &mut Vec<Target>) -> Result<()> {
    let c = &policy.config;
    if let Some(v) = &c.printk {
        out.push(attr(
            "printk",
            "printk".into(),
            "console log level (kernel.printk)".into(),
            PRINTK.into(),
            Want::First(v.to_string()),
        ));
    }
    if let Some(v) = &c.thp {
        out.push(attr(
            "thp",
            "thp".into(),
            "transparent_hugepage/enabled".into(),
            THP_ENABLED.into(),
            Want::Choice(v.clone()),
        ));
    }
    if let Some(v) = c.ksm {
        out.push(attr(
            "ksm",
            "ksm".into(),
            "KSM run".into(),
            KSM_RUN.into(),
            Want::Text(v.to_string()),
        ));
    }
    if c.machinecheck {
        let dir = MACHINECHECK_DIR;
        let mut names = if root.exists(dir) {
            root.read_dir_names(dir)?
        } else {
            Vec::new()
        };
        names.sort();
        for n in names.iter().filter(|n| n.starts_with("machinecheck")) {
            out.push(attr(
                "machinecheck",
                format!("machinecheck:{n}"),
                format!("{n}/ignore_ce"),
                format!("{dir}/{n}/ignore_ce"),
                Want::Text("1".into()),
            ));
        }
    }
    Ok(())
}

/// Every workqueue's cpumask, then the global one (restore widens the global mask first:
/// the kernel clips a workqueue's mask to it).
fn plan_workqueues(policy: &Policy, root: &SysRoot, out: &mut Vec<Target>) -> Result<()> {
    if !policy.config.workqueue {
        return Ok(());
    }
    let hk = &policy.housekeeping;
    for q in workqueue::queues_with_cpumask(root)? {
        out.push(attr(
            "workqueue",
            format!("workqueue:{q}"),
            format!("workqueue {q} cpumask"),
            workqueue::queue_cpumask_path(&q),
            Want::Mask(hk.clone()),
        ));
    }
    out.push(attr(
        "workqueue",
        "workqueue".into(),
        "unbound workqueue cpumask".into(),
        workqueue::unbound_cpumask_path(),
        Want::Mask(hk.clone()),
    ));
    Ok(())
}

/// The PM QoS resume latency and the cpufreq governor of each isolated CPU, and of each CPU
/// of a container that asked for them (its claim's values win on its CPUs).
fn plan_power(policy: &Policy, root: &SysRoot, out: &mut Vec<Target>) -> Result<()> {
    let c = &policy.config;
    let stat = policy.static_isolated();
    let claimed = &policy.claimed_power;
    let cpus = stat.union(&claimed.keys().copied().collect());
    let want = |cpu: usize| claimed.get(&cpu);
    for cpu in cpus.iter() {
        let us = want(cpu).and_then(|w| w.pm_qos.clone()).or_else(|| {
            c.pm_qos
                .filter(|_| stat.contains(cpu))
                .map(power::resume_latency_text)
        });
        if let Some(text) = us {
            out.push(attr(
                "pm_qos",
                format!("pm_qos:cpu{cpu}"),
                format!("CPU {cpu} PM QoS resume latency"),
                power::resume_latency_path(cpu),
                Want::Text(text),
            ));
        }
    }
    for cpu in cpus.iter() {
        let gov = want(cpu)
            .and_then(|w| w.governor.clone())
            .or_else(|| c.cpufreq.clone().filter(|_| stat.contains(cpu)));
        let Some(gov) = gov else { continue };
        let id = format!("cpufreq:cpu{cpu}");
        let label = format!("CPU {cpu} cpufreq governor");
        match power::available_governors(root, cpu)? {
            Some(av) if !av.contains(&gov) => out.push(known(
                "cpufreq",
                id,
                label,
                Status::NotChangeable {
                    reason: format!("governor {gov} not offered (available: {})", av.join(" ")),
                },
            )),
            _ => out.push(attr(
                "cpufreq",
                id,
                label,
                power::governor_path(cpu),
                Want::Text(gov),
            )),
        }
    }
    Ok(())
}

/// Every IRQ under /proc/irq (the workload's own left alone) and `default_smp_affinity`.
fn plan_irqs(policy: &Policy, root: &SysRoot, out: &mut Vec<Target>) -> Result<()> {
    let hk = &policy.housekeeping;
    for info in irq::list(root)? {
        let name = if info.action.is_empty() {
            String::from("no handler")
        } else {
            info.action.clone()
        };
        let (id, label) = (
            format!("irq:{}", info.irq),
            format!("IRQ {} ({name})", info.irq),
        );
        if let Some(a) = allowed_irq(&policy.config.irq_allow, info.irq, &info.actions) {
            // The workload's own IRQ (a NIC queue that feeds its thread): never written, so
            // never recorded, so never restored either.
            out.push(known(
                "irq_affinity",
                id,
                label,
                Status::LeftAlone {
                    reason: format!("the workload's IRQ ([irqs] allow {a})"),
                },
            ));
            continue;
        }
        out.push(Target {
            item: "irq_affinity",
            id,
            label,
            op: Op::Irq {
                irq: info.irq,
                want: narrowed(&info.affinity, hk),
            },
        });
    }
    let def = irq::default_affinity(root)?;
    out.push(attr(
        "irq_affinity",
        "irq:default".into(),
        "default_smp_affinity".into(),
        DEFAULT_SMP_AFFINITY.into(),
        Want::Mask(narrowed(&def, hk)),
    ));
    Ok(())
}

/// The `cgroup_partition` target, or the refusal when a workload the allow-list keeps in
/// its cgroup (a VM's vCPUs under libvirt's machine.slice) would lose its CPUs to it.
fn plan_partition(
    policy: &Policy,
    root: &SysRoot,
    dir: &str,
    threads: &[tasks::Thread],
) -> Result<Target> {
    let c = &policy.config;
    let p = super::partition::plan(root, dir, &policy.static_isolated(), threads)?;
    let (id, label) = partition_names(dir);
    let kept: Vec<String> = p
        .workloads
        .iter()
        .filter_map(|(t, cg, _)| {
            allowed_cgroup(&c.allow_cgroup, cg)
                .map(|a| format!("{} ({}) in {cg} (allow_cgroup {a})", t.pid, t.comm))
        })
        .collect();
    if kept.is_empty() {
        if let Some(why) = super::partition::refusal(&p, threads) {
            return Ok(known(
                "cgroup_partition",
                id,
                label,
                Status::Failed {
                    error: format!("not made: {why}"),
                },
            ));
        }
        return Ok(Target {
            item: "cgroup_partition",
            id,
            label,
            op: Op::Partition(p),
        });
    }
    Ok(known(
        "cgroup_partition",
        id,
        label,
        Status::Failed {
            error: format!(
                "not made: the partition would take the CPUs of allow-listed workload(s) that must stay in their cgroup: {}; name a partition directory that holds them, or leave cgroup_partition off",
                kept.join(", ")
            ),
        },
    ))
}

fn partition_names(dir: &str) -> (String, String) {
    (
        format!("cgroup_partition:{dir}"),
        format!("isolated partition {dir}"),
    )
}

/// The `cgroup_partition` target of `policy` without its workload scan (none to move in): a
/// daemon's repair of a partition it made, which a write by hand or the kernel turned into
/// something else. No /proc read; `None` without the item.
pub fn partition_repair_target(policy: &Policy) -> Option<Target> {
    let dir = policy.config.cgroup_partition.as_ref()?;
    let (id, label) = partition_names(dir);
    Some(Target {
        item: "cgroup_partition",
        id,
        label,
        op: Op::Partition(super::partition::PartitionPlan {
            dir: dir.clone(),
            cpus: policy.static_isolated(),
            workloads: Vec::new(),
        }),
    })
}

/// The `allow_cgroup` entry that holds the cgroup `cg`, if any.
pub(crate) fn allowed_cgroup<'a>(allow: &'a [String], cg: &str) -> Option<&'a String> {
    allow.iter().find(|p| {
        cg == p.as_str()
            || cg.starts_with(&format!("{}/", p.trim_end_matches('/')))
            || glob_match(p, cg)
    })
}

/// The thread targets (affinity, kthread priority) of `policy` for these threads only.
pub fn plan_for_threads(policy: &Policy, root: &SysRoot, threads: &[tasks::Thread]) -> Vec<Target> {
    let mut out = Vec::new();
    plan_threads(policy, root, threads, &mut out);
    out
}

/// What the policy does with a thread that reaches into the isolated CPUs: the one place the
/// plan and the daemon's fast path ([`super::fastpath`]) decide it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThreadVerdict {
    /// Left where it is, and why (pinned by the kernel, a workload, allow-listed).
    Leave(Status),
    /// Narrowed to these CPUs.
    Narrow(CpuSet),
}

/// The verdict for a thread of process `pid` with this affinity (reaching into the isolated
/// CPUs), `PF_*` flags and name; `cgroup` gives its process's cgroup, asked only when the
/// allow-list of cgroups needs it.
pub fn thread_verdict(
    policy: &Policy,
    affinity: &CpuSet,
    flags: u64,
    comm: &str,
    pid: i32,
    cgroup: impl FnOnce() -> Result<Option<String>>,
) -> Result<ThreadVerdict> {
    let c = &policy.config;
    let leave = |reason: String| Ok(ThreadVerdict::Leave(Status::LeftAlone { reason }));
    if flags & crate::procfs::PF_NO_SETAFFINITY != 0 {
        return Ok(ThreadVerdict::Leave(Status::NotChangeable {
            reason: format!("the kernel manages its affinity (PF_NO_SETAFFINITY), CPUs {affinity}"),
        }));
    }
    if affinity.is_subset(&policy.isolated) {
        return leave(format!(
            "workload: affinity {affinity} is inside the isolated CPUs"
        ));
    }
    if let Some(p) = c.allow_comm.iter().find(|p| glob_match(p, comm)) {
        return leave(format!("allow-listed thread name ({p})"));
    }
    // isold itself never stays wide, whatever its cgroup.
    if pid != std::process::id() as i32 && !c.allow_cgroup.is_empty() {
        if let Some(p) = cgroup()?.and_then(|cg| allowed_cgroup(&c.allow_cgroup, &cg).cloned()) {
            return leave(format!("allow-listed cgroup {p}"));
        }
    }
    Ok(ThreadVerdict::Narrow(narrowed(
        affinity,
        &policy.housekeeping,
    )))
}

fn plan_threads(policy: &Policy, root: &SysRoot, threads: &[tasks::Thread], out: &mut Vec<Target>) {
    let c = &policy.config;
    let iso = &policy.isolated;
    let mut cgroups: std::collections::HashMap<i32, Option<String>> = Default::default();
    for t in threads {
        let id = format!("task:{}:{}", t.tid, t.starttime);
        let label = format!(
            "{} {} ({})",
            if t.is_kthread() { "kthread" } else { "task" },
            t.tid,
            t.comm
        );
        if t.is_kthread() {
            if let Some((pat, want)) = c
                .kthread_priority
                .iter()
                .find(|(p, _)| glob_match(p, &t.comm))
            {
                out.push(Target {
                    item: "kthread_priority",
                    id: format!("sched:{}:{}", t.tid, t.starttime),
                    label: format!("{label} priority (rule {pat})"),
                    op: Op::Sched {
                        thread: t.clone(),
                        want: *want,
                    },
                });
            }
        }
        if !c.tasks || t.affinity.is_disjoint(iso) {
            continue;
        }
        let cgroup = || {
            Ok(cgroups
                .entry(t.pid)
                .or_insert_with(|| tasks::cgroup_of(root, t.pid).ok().flatten())
                .clone())
        };
        let status = match thread_verdict(policy, &t.affinity, t.flags, &t.comm, t.pid, cgroup) {
            Ok(ThreadVerdict::Leave(s)) => Some(s),
            _ => None,
        };
        match status {
            Some(s) => out.push(known("tasks", id, label, s)),
            None => {
                let want = narrowed(&t.affinity, &policy.housekeeping);
                out.push(Target {
                    item: "tasks",
                    id,
                    label,
                    op: Op::Affinity {
                        thread: t.clone(),
                        want,
                    },
                });
            }
        }
    }
}

/// The targets of the configuration files the policy writes (a part of [`plan`], without its
/// /proc scan).
pub fn file_targets(policy: &Policy, root: &SysRoot) -> Result<Vec<Target>> {
    Ok(config_files(policy, root)?
        .into_iter()
        .map(|(item, path, content)| Target {
            item,
            id: format!("file:{path}"),
            label: path.clone(),
            op: Op::File { path, content },
        })
        .collect())
}

/// Configuration files the policy owns: (item, path, wanted content).
fn config_files(policy: &Policy, root: &SysRoot) -> Result<Vec<(&'static str, String, String)>> {
    let c = &policy.config;
    let mut out = Vec::new();
    if !c.kvm.is_empty() {
        let mut by_module: Vec<(String, Vec<String>)> = Vec::new();
        for (m, p, v) in &c.kvm {
            // Only parameters the module has: a modprobe option it lacks fails its load.
            if !root.exists(format!("/sys/module/{m}/parameters/{p}")) {
                continue;
            }
            match by_module.iter_mut().find(|(mm, _)| mm == m) {
                Some((_, v2)) => v2.push(format!("{p}={v}")),
                None => by_module.push((m.clone(), vec![format!("{p}={v}")])),
            }
        }
        if !by_module.is_empty() {
            let mut text = String::from(
                "# Written by isold (realtime KVM options); removed by `isold restore`.\n",
            );
            for (m, opts) in by_module {
                text.push_str(&format!("options {m} {}\n", opts.join(" ")));
            }
            out.push(("kvm", KVM_CONF.into(), text));
        }
    }
    if c.irqbalance {
        for path in IRQBALANCE_FILES {
            let Some(text) = read_file_opt(root, path)? else {
                continue;
            };
            out.push((
                "irqbalance",
                path.into(),
                with_banned_cpus(&text, &policy.static_isolated()),
            ));
        }
    }
    if c.systemd_cpuaffinity {
        out.push((
            "systemd_cpuaffinity",
            CPUAFFINITY_CONF.into(),
            format!(
                "# Written by isold: systemd and its services on the housekeeping CPUs.\n[Manager]\nCPUAffinity={}\n",
                policy.online.difference(&policy.static_isolated())
            ),
        ));
    }
    Ok(out)
}

pub(crate) fn read_file_opt(root: &SysRoot, path: &str) -> Result<Option<String>> {
    match root.read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.errno() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// An irqbalance defaults file with `IRQBALANCE_BANNED_CPULIST` set to `cpus`: the first
/// uncommented assignment is replaced, or one is appended; everything else is kept.
pub fn with_banned_cpus(text: &str, cpus: &CpuSet) -> String {
    let line = format!("IRQBALANCE_BANNED_CPULIST={cpus}");
    let mut done = false;
    let mut out = String::with_capacity(text.len() + line.len() + 1);
    for l in text.split_inclusive('\n') {
        let t = l.trim_start();
        if !done && t.starts_with("IRQBALANCE_BANNED_CPULIST=") {
            out.push_str(&line);
            out.push('\n');
            done = true;
        } else {
            out.push_str(l);
        }
    }
    if !done {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture_policy(config: &str) -> Policy {
        let root = SysRoot::new(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/fixtures/debian-6.12-rt-isold"),
        );
        let cfg = super::super::config::Config::parse(config, std::path::Path::new("isold.toml"))
            .unwrap();
        Policy::resolve(cfg, &root).unwrap()
    }

    /// The cgroup allow-list leaves a workload's wide thread alone, never isold's own, and
    /// costs no cgroup read when it is empty.
    #[test]
    fn the_cgroup_allow_list_spares_workloads_but_not_isold() {
        let wide = CpuSet::parse_list("0-3").unwrap();
        let listed = fixture_policy("isolated_cpus = \"2-3\"\n[tasks]\nallow_cgroup = [\"/rt\"]\n");
        let other = std::process::id() as i32 + 1;
        let me = std::process::id() as i32;
        let rt = || Ok(Some("/rt".to_string()));
        assert!(matches!(
            thread_verdict(&listed, &wide, 0, "app", other, rt).unwrap(),
            ThreadVerdict::Leave(Status::LeftAlone { .. })
        ));
        assert!(matches!(
            thread_verdict(&listed, &wide, 0, "isold", me, rt).unwrap(),
            ThreadVerdict::Narrow(_)
        ));
        let plain = fixture_policy("isolated_cpus = \"2-3\"\n");
        let unread = || -> Result<Option<String>> { panic!("the cgroup was read") };
        assert!(matches!(
            thread_verdict(&plain, &wide, 0, "app", other, unread).unwrap(),
            ThreadVerdict::Narrow(_)
        ));
    }

    #[test]
    fn wants_compare_as_the_kernel_prints() {
        assert!(Want::Choice("never".into()).matches("always madvise [never]\n"));
        assert!(!Want::Choice("never".into()).matches("always [madvise] never\n"));
        assert_eq!(
            Want::Choice("never".into()).restore_text("always [madvise] never\n"),
            "madvise"
        );
        let m = Want::Mask(CpuSet::parse_list("0-1").unwrap());
        assert!(m.matches("3\n") && m.matches("00000000,00000003\n") && !m.matches("f\n"));
        assert_eq!(m.write_text("f\n"), "3");
        let p = Want::First("4".into());
        assert!(!p.matches("7\t4\t1\t7\n"));
        assert_eq!(p.write_text("7\t4\t1\t7\n"), "4\t4\t1\t7");
        assert!(p.matches("4\t4\t1\t7\n"));
        assert_eq!(p.restore_text("7\t4\t1\t7\n"), "7\t4\t1\t7");
        assert!(Want::Text("32768 60999".into()).matches("32768\t60999\n"));
        assert!(!Want::Text("0".into()).matches("00\n"));
        let allow = ["/machine.slice".to_string(), "/kubepods/*/pod*".to_string()];
        assert!(allowed_cgroup(&allow, "/machine.slice").is_some());
        assert!(allowed_cgroup(&allow, "/machine.slice/vm1.scope").is_some());
        assert!(allowed_cgroup(&allow, "/machine.slicex").is_none());
        assert!(allowed_cgroup(&allow, "/").is_none());
        assert!(allowed_cgroup(&allow, "/kubepods/burstable/pod12").is_some());
        assert!(allowed_cgroup(&["/a/".to_string()], "/a/b").is_some());
        // A configuration file that is missing is no content; one that cannot be read is an
        // error, never taken as missing.
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::new(dir.path());
        assert_eq!(read_file_opt(&root, "/etc/x.conf").unwrap(), None);
        std::fs::create_dir_all(dir.path().join("etc/x.conf")).unwrap();
        assert_eq!(
            read_file_opt(&root, "/etc/x.conf").unwrap_err().errno(),
            Some(libc::EISDIR)
        );
        // Brackets the wrong way round are no choice.
        assert_eq!(choice_of("] x [\n"), "] x [");
        assert_eq!(choice_of("a]b [c] d"), "c");
        assert_eq!(choice_of("2\n"), "2");
    }

    #[test]
    fn narrowing_keeps_housekeeping_cpus_or_takes_them_all() {
        let hk = CpuSet::parse_list("0-1").unwrap();
        assert_eq!(
            narrowed(&CpuSet::parse_list("1-3").unwrap(), &hk).to_string(),
            "1"
        );
        assert_eq!(
            narrowed(&CpuSet::parse_list("2-3").unwrap(), &hk).to_string(),
            "0-1"
        );
    }

    #[test]
    fn irqbalance_files_keep_everything_else() {
        let cpus = CpuSet::parse_list("2-3").unwrap();
        assert_eq!(
            with_banned_cpus(
                "#IRQBALANCE_BANNED_CPULIST=\nIRQBALANCE_ONESHOT=0\nIRQBALANCE_BANNED_CPULIST=7\n",
                &cpus
            ),
            "#IRQBALANCE_BANNED_CPULIST=\nIRQBALANCE_ONESHOT=0\nIRQBALANCE_BANNED_CPULIST=2-3\n"
        );
        assert_eq!(
            with_banned_cpus("A=1", &cpus),
            "A=1\nIRQBALANCE_BANNED_CPULIST=2-3\n"
        );
    }
}
