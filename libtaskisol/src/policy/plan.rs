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

/// The console log level's file (`printk` item).
pub const PRINTK: &str = "/proc/sys/kernel/printk";
/// Transparent hugepages (`thp` item).
pub const THP_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/enabled";
/// KSM (`ksm` item).
pub const KSM_RUN: &str = "/sys/kernel/mm/ksm/run";
/// The machinecheck devices (`machinecheck` item).
pub const MACHINECHECK_DIR: &str = "/sys/devices/system/machinecheck";
/// `default_smp_affinity` (`irq_affinity` item).
pub const DEFAULT_SMP_AFFINITY: &str = "/proc/irq/default_smp_affinity";
/// The KVM module options isold owns (`kvm` item).
pub const KVM_CONF: &str = "/etc/modprobe.d/isold-kvm.conf";
/// systemd's drop-in isold owns (`systemd_cpuaffinity` item).
pub const CPUAFFINITY_CONF: &str = "/etc/systemd/system.conf.d/isold-cpuaffinity.conf";
/// irqbalance's defaults files isold edits (`irqbalance` item): Debian's, then Red Hat's.
pub const IRQBALANCE_FILES: [&str; 2] = ["/etc/default/irqbalance", "/etc/sysconfig/irqbalance"];

/// Every file on disk isold writes, with its item: nothing else is ever written or restored
/// as a file (a state file naming another path is refused).
pub fn owned_files() -> [(&'static str, &'static str); 5] {
    [
        ("kvm", KVM_CONF),
        ("irqbalance", IRQBALANCE_FILES[0]),
        ("irqbalance", IRQBALANCE_FILES[1]),
        ("systemd_cpuaffinity", CPUAFFINITY_CONF),
        ("bootargs", super::bootargs::GRUB_DROP_IN),
    ]
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
    let c = &policy.config;
    let hk = &policy.housekeeping;
    let iso = &policy.isolated;
    let mut out = Vec::new();

    for (name, value) in &c.sysctl {
        let path = sysctl::path_of(name)?;
        out.push(attr(
            "sysctl",
            format!("sysctl:{name}"),
            format!("sysctl {name}"),
            path,
            Want::Text(value.clone()),
        ));
    }
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
    if c.workqueue {
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
    }
    if let Some(us) = c.pm_qos {
        for cpu in iso.iter() {
            out.push(attr(
                "pm_qos",
                format!("pm_qos:cpu{cpu}"),
                format!("CPU {cpu} PM QoS resume latency"),
                power::resume_latency_path(cpu),
                Want::Text(power::resume_latency_text(us)),
            ));
        }
    }
    if let Some(gov) = &c.cpufreq {
        for cpu in iso.iter() {
            let id = format!("cpufreq:cpu{cpu}");
            let label = format!("CPU {cpu} cpufreq governor");
            match power::available_governors(root, cpu)? {
                Some(av) if !av.contains(gov) => out.push(known(
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
                    Want::Text(gov.clone()),
                )),
            }
        }
    }
    if c.irq_affinity {
        for info in irq::list(root)? {
            let name = if info.action.is_empty() {
                String::from("no handler")
            } else {
                info.action.clone()
            };
            if let Some(a) = allowed_irq(&c.irq_allow, info.irq, &info.actions) {
                // The workload's own IRQ (a NIC queue that feeds its thread): never written,
                // so never recorded, so never restored either.
                out.push(known(
                    "irq_affinity",
                    format!("irq:{}", info.irq),
                    format!("IRQ {} ({name})", info.irq),
                    Status::LeftAlone {
                        reason: format!("the workload's IRQ ([irqs] allow {a})"),
                    },
                ));
                continue;
            }
            out.push(Target {
                item: "irq_affinity",
                id: format!("irq:{}", info.irq),
                label: format!("IRQ {} ({name})", info.irq),
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
    }
    // One read of every thread for the items that need it (a /proc scan: thousands of files).
    let threads = if c.tasks || !c.kthread_priority.is_empty() || c.cgroup_partition.is_some() {
        tasks::all_threads(root)?
    } else {
        Vec::new()
    };
    if c.tasks || !c.kthread_priority.is_empty() {
        plan_threads(policy, root, &threads, &mut out);
    }
    if let Some(dir) = &c.cgroup_partition {
        // After the tasks: the workloads it moves in keep their CPUs, the rest already left.
        let p = super::partition::plan(root, dir, iso, &threads)?;
        let (id, label) = partition_names(dir);
        // A workload the allow-list keeps in its cgroup (a VM's vCPUs under libvirt's
        // machine.slice) would lose its CPUs to the partition: refuse before any write.
        let kept: Vec<String> = p
            .workloads
            .iter()
            .filter_map(|(t, cg, _)| {
                allowed_cgroup(&c.allow_cgroup, cg)
                    .map(|a| format!("{} ({}) in {cg} (allow_cgroup {a})", t.pid, t.comm))
            })
            .collect();
        if kept.is_empty() {
            out.push(Target {
                item: "cgroup_partition",
                id,
                label,
                op: Op::Partition(p),
            });
        } else {
            out.push(known(
                "cgroup_partition",
                id,
                label,
                Status::Failed {
                    error: format!(
                        "not made: the partition would take the CPUs of allow-listed workload(s) that must stay in their cgroup: {}; name a partition directory that holds them, or leave cgroup_partition off",
                        kept.join(", ")
                    ),
                },
            ));
        }
    }
    out.extend(file_targets(policy, root)?);
    Ok(out)
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
            cpus: policy.isolated.clone(),
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

fn plan_threads(policy: &Policy, root: &SysRoot, threads: &[tasks::Thread], out: &mut Vec<Target>) {
    let c = &policy.config;
    let iso = &policy.isolated;
    let me = std::process::id() as i32;
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
        let status = if t.is_pinned_by_kernel() {
            Some(Status::NotChangeable {
                reason: format!(
                    "the kernel manages its affinity (PF_NO_SETAFFINITY), CPUs {}",
                    t.affinity
                ),
            })
        } else if t.affinity.is_subset(iso) {
            Some(Status::LeftAlone {
                reason: format!(
                    "workload: affinity {} is inside the isolated CPUs",
                    t.affinity
                ),
            })
        } else if let Some(p) = c.allow_comm.iter().find(|p| glob_match(p, &t.comm)) {
            Some(Status::LeftAlone {
                reason: format!("allow-listed thread name ({p})"),
            })
        } else if t.pid == me {
            None
        } else if !c.allow_cgroup.is_empty() {
            let cg = cgroups
                .entry(t.pid)
                .or_insert_with(|| tasks::cgroup_of(root, t.pid).ok().flatten());
            cg.as_deref()
                .and_then(|cg| allowed_cgroup(&c.allow_cgroup, cg))
                .map(|p| Status::LeftAlone {
                    reason: format!("allow-listed cgroup {p}"),
                })
        } else {
            None
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
                with_banned_cpus(&text, &policy.isolated),
            ));
        }
    }
    if c.systemd_cpuaffinity {
        out.push((
            "systemd_cpuaffinity",
            CPUAFFINITY_CONF.into(),
            format!(
                "# Written by isold: systemd and its services on the housekeeping CPUs.\n[Manager]\nCPUAffinity={}\n",
                policy.housekeeping
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
