//! `cgroup_partition`: a cgroup v2 isolated partition of the isolated CPUs.

use super::tasks::allowed_cgroup;
use super::{Item, Planning, BASE};
use crate::error::Result;
use crate::policy::config::DEFAULT_PARTITION;
use crate::policy::paths::{valid_partition_dir, CGROUP_MOUNT};
use crate::policy::target::{known, Op, Target};
use crate::policy::{Policy, Status};
use crate::sysroot::SysRoot;
use crate::tasks::Thread;

/// The `cgroup_partition` item.
pub const ITEM: Item = Item {
    name: "cgroup_partition",
    doc: "a cgroup v2 isolated partition of the isolated CPUs",
    man: MAN,
    parse: |v| match v {
        "false" => Ok(None),
        "true" => Ok(Some(DEFAULT_PARTITION.into())),
        p if valid_partition_dir(p) => Ok(Some(p.trim_end_matches('/').into())),
        _ => Err(format!(
            "takes true, false or a cgroup directory below {CGROUP_MOUNT}/, not {v:?}"
        )),
    },
    plan,
    ..BASE
};

const MAN: &str = r#"A cgroup v2 cpuset partition of type
.B isolated
holding the isolated CPUs: they leave the scheduler's load balancing at run time, without a
reboot.
.B true
means
.IR /sys/fs/cgroup/isolated ;
a directory below
.I /sys/fs/cgroup/
names another (default off).
Once the partition is valid no other cgroup can use its CPUs, so the workloads (processes
whose threads all run inside the isolated CPUs, started by root or a libvirt machine's) are
moved into it first, each thread keeping its affinity.
Another user's process pinned inside the isolated CPUs is no workload and has no say: it is
not moved in and is no reason to refuse; apply names it, and the kernel gives it CPUs outside
the partition.
isold enables
.B cpuset
in the parent's cgroup.subtree_control if needed, creates the directory, writes
cpuset.cpus (and cpuset.cpus.exclusive where the kernel has it), then
.B isolated
to cpuset.cpus.partition.
isold reads back what the kernel made of it, whatever its version: when the kernel reads
back
.BI "isolated invalid (" reason )
the item fails with that reason and every step is undone: no cgroup is left behind.
Kernels differ on CPUs that isolcpus already took out of the scheduler domains: 6.12 refuses
them
.RI ( "partition config conflicts with housekeeping setup" ),
6.1 and 7.x make the partition.
A 7.x partition also moves the unbound workqueues and unbound kthreads off its CPUs by itself;
isold's own items agree with it and verify does not count it as drift.
restore moves the workloads back, removes the directory it created (a directory that holds
other tasks by then is reported, not forced) and disables
.B cpuset
again if it enabled it.
Removing a partition makes the kernel reset the tasks of the cgroups around it to their
cgroup's CPUs: a task the kernel had kept narrower (under
.BR isolcpus= ,
init and everything started at boot run on the housekeeping CPUs only) would come out of
restore on every CPU.
isold records, before the first change, each thread with CPUs outside the isolated ones
but not all of the isolated ones, and after the removal gives those the kernel widened their
recorded affinity back; a thread pinned by its owner since keeps its pin (the kernel keeps an
affinity a task set itself, and isold writes only over the value the removal made).
Partitions do not give nohz_full, RCU offload or managed IRQ moves (not on 7.x either: its
isolated partition does not stop the tick without
.B nohz_full=
at boot).
.IP
isold makes the partition only where moving the workloads breaks nothing, and otherwise
fails the item with the reason, changing nothing:
a cgroup systemd manages (a slice such as
.I /sys/fs/cgroup/system.slice
or a unit's cgroup; give the unit
.BI AllowedCPUs= cpus
and, on systemd 261 and later,
.BR CPUSetPartition=isolated );
a workload in a unit's cgroup (moving it out would take it from its unit: the same advice);
a process with threads both inside and outside the isolated CPUs (QEMU's emulator thread on
a housekeeping CPU and its vCPUs pinned to isolated ones: the partition would take the vCPUs'
CPUs or strand the other threads; give such a process a partition of its own);
a directory that already held tasks or cgroups before isold made it (it is someone
else's).
An allow\-listed workload
.RB ( [tasks] )
is never moved: the partition is refused while it would strand one."#;

/// After the tasks: the workloads it moves in keep their CPUs, the rest already left.
fn plan(p: &mut Planning<'_>) -> Result<()> {
    let Some(dir) = p.policy.cgroup_partition() else {
        return Ok(());
    };
    let threads = p.threads()?;
    let t = plan_partition(p.policy, p.root, dir, &threads)?;
    p.out.push(t);
    Ok(())
}

/// The `cgroup_partition` target, or the refusal when a workload the allow-list keeps in
/// its cgroup (a VM's vCPUs under libvirt's machine.slice) would lose its CPUs to it.
fn plan_partition(
    policy: &Policy,
    root: &SysRoot,
    dir: &str,
    threads: &[Thread],
) -> Result<Target> {
    let c = &policy.config;
    let p = crate::policy::partition::plan(root, dir, &policy.static_isolated(), threads)?;
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
        if let Some(why) = crate::policy::partition::refusal(&p, threads) {
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
    let dir = policy.cgroup_partition()?;
    let (id, label) = partition_names(dir);
    Some(Target {
        item: "cgroup_partition",
        id,
        label,
        op: Op::Partition(crate::policy::partition::PartitionPlan {
            dir: dir.to_string(),
            cpus: policy.static_isolated(),
            workloads: Vec::new(),
            narrow: Vec::new(),
            others: Vec::new(),
            other_pids: Default::default(),
        }),
    })
}
