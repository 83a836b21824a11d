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
