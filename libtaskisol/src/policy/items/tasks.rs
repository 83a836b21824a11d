//! `tasks`: every movable thread, user or kernel, off the isolated CPUs; and the one pass
//! over the threads that also plans `kthread_priority`'s rules.

use super::{Item, Machine, Planning, Setting, BASE};
use crate::cpuset::CpuSet;
use crate::error::Result;
use crate::policy::config::glob_match;
use crate::policy::target::{known, narrowed, Op, Target};
use crate::policy::{Policy, Status};
use crate::sysroot::SysRoot;
use crate::tasks::Thread;

/// The `tasks` item.
pub const ITEM: Item = Item {
    name: "tasks",
    doc: "movable tasks and kthreads off the isolated CPUs",
    man: MAN,
    plan,
    audit,
    ..BASE
};

const MAN: &str = r#"Every movable thread, user or kernel: the same narrowing (all presets).
Threads with an affinity inside the isolated CPUs are workloads and are left alone, so are
those of
.BR [tasks] .
A pin made by the workload itself stands: the affinity is read again just before the write,
and a thread whose affinity changed since isold looked (libvirt's
.BR <vcpupin> ,
a DPDK lcore, taskset \-p) is left as it was set."#;

/// One read of every thread for both thread items, when either is on.
fn plan(p: &mut Planning<'_>) -> Result<()> {
    let policy = p.policy;
    if !policy.on("tasks") && policy.config.kthread_priority.is_empty() {
        return Ok(());
    }
    let threads = p.threads()?;
    plan_threads(policy, p.root, &threads, &mut p.out);
    Ok(())
}

/// The consoles' printing kthreads (6.12+: pr/ttyS0 for nbcon consoles, pr/legacy on
/// PREEMPT_RT) write to the console outside the caller's context.
fn audit(m: &Machine<'_>, out: &mut Vec<Setting>) -> Result<()> {
    let printers: Vec<&Thread> = m
        .threads
        .iter()
        .filter(|t| t.is_kthread() && t.comm.starts_with("pr/"))
        .collect();
    if printers.is_empty() {
        return Ok(());
    }
    let value: Vec<String> = printers
        .iter()
        .map(|t| format!("{} on CPUs {}", t.comm, t.affinity))
        .collect();
    out.extend(Setting::judged(
        "console printing threads",
        Some(value.join(", ")),
        |_| printers.iter().all(|t| t.affinity.is_disjoint(m.cpus)),
        "a console's printing thread may run on the isolated CPUs and spend milliseconds there on a serial port",
        "isold item tasks (moves it to the housekeeping CPUs)",
    ));
    Ok(())
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
pub fn plan_for_threads(policy: &Policy, root: &SysRoot, threads: &[Thread]) -> Vec<Target> {
    let mut out = Vec::new();
    plan_threads(policy, root, threads, &mut out);
    out
}

/// What the policy does with a thread that reaches into the isolated CPUs: the one place the
/// plan and the daemon's fast path ([`crate::policy::fastpath`]) decide it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThreadVerdict {
    /// Left where it is, and why (pinned by the kernel, a workload, allow-listed).
    Leave(Status),
    /// Narrowed to these CPUs.
    Narrow(CpuSet),
}

/// How a thread whose affinity the kernel manages is "not changeable", before its CPUs: a
/// report's reader can sum such threads up.
pub const KERNEL_MANAGED: &str = "the kernel manages its affinity (PF_NO_SETAFFINITY), CPUs ";

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
            reason: format!("{KERNEL_MANAGED}{affinity}"),
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

fn plan_threads(policy: &Policy, root: &SysRoot, threads: &[Thread], out: &mut Vec<Target>) {
    let c = &policy.config;
    let on = policy.on("tasks");
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
        if !on || t.affinity.is_disjoint(iso) {
            continue;
        }
        let cgroup = || {
            Ok(cgroups
                .entry(t.pid)
                .or_insert_with(|| crate::tasks::cgroup_of(root, t.pid).ok().flatten())
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
