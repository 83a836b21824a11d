//! Thread changes: system calls on the running system, edits of the tree's `status` and
//! `stat` files on a captured one (so that the whole engine runs on fixtures). The engine, the
//! partition and the fast path all change threads through here.

use crate::cpuset::CpuSet;
use crate::error::{Error, Result};
use crate::sched::{self, SchedPolicy};
use crate::sysroot::SysRoot;

/// A thread's CPU affinity.
pub(crate) fn set_thread_affinity(root: &SysRoot, pid: i32, tid: i32, cpus: &CpuSet) -> Result<()> {
    if root.is_host() {
        return sched::set_affinity(tid, cpus);
    }
    edit_tree_file(root, &format!("/proc/{pid}/task/{tid}/status"), |text| {
        text.lines()
            .map(|l| {
                if l.starts_with("Cpus_allowed_list:") {
                    format!("Cpus_allowed_list:\t{cpus}\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect()
    })
}

/// A thread's scheduling policy and priority.
pub(crate) fn set_thread_sched(
    root: &SysRoot,
    pid: i32,
    tid: i32,
    policy: SchedPolicy,
) -> Result<()> {
    if root.is_host() {
        return sched::set_scheduler(tid, policy);
    }
    edit_tree_file(root, &format!("/proc/{pid}/task/{tid}/stat"), |text| {
        // Fields after the comm's closing parenthesis start at field 3; rt_priority and
        // policy are fields 40 and 41.
        let close = text.rfind(')').unwrap_or(0);
        let (head, tail) = text.split_at(close + 1);
        let mut f: Vec<String> = tail.split_whitespace().map(str::to_string).collect();
        if f.len() >= 39 {
            f[37] = policy.priority().to_string();
            f[38] = policy.policy_number().to_string();
        }
        format!("{head} {}\n", f.join(" "))
    })
}

fn edit_tree_file(root: &SysRoot, abs: &str, edit: impl FnOnce(&str) -> String) -> Result<()> {
    let text = root.read_to_string(abs).map_err(|e| {
        if e.errno() == Some(libc::ENOENT) {
            Error::syscall(format!("thread of {abs}"), nix::errno::Errno::ESRCH)
        } else {
            e
        }
    })?;
    root.write(abs, edit(&text))
}

/// A thread's affinity: a system call on the running system, the `Cpus_allowed_list` of its
/// status file in a tree (nothing else is read, as on the running system).
pub(crate) fn affinity(root: &SysRoot, pid: i32, tid: i32) -> Option<CpuSet> {
    if root.is_host() {
        return sched::get_affinity(tid).ok();
    }
    let status = root
        .read_to_string(format!("/proc/{pid}/task/{tid}/status"))
        .ok()?;
    CpuSet::parse_list(crate::procfs::status_field(&status, "Cpus_allowed_list")?).ok()
}

/// A thread's affinity, read as close to a write as can be: the system call on the running
/// system; on a tree, its status file. `Ok(None)` when the thread is gone; an error (a file
/// that cannot be read) is one.
pub(crate) fn affinity_now(root: &SysRoot, pid: i32, tid: i32) -> Result<Option<CpuSet>> {
    if root.is_host() {
        return match sched::get_affinity(tid) {
            Ok(a) => Ok(Some(a)),
            Err(e) if e.errno() == Some(libc::ESRCH) => Ok(None),
            Err(e) => Err(e),
        };
    }
    Ok(crate::tasks::read_thread(root, pid, tid)?.map(|t| t.affinity))
}
