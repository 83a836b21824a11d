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
        with_field(text, "Cpus_allowed_list", &cpus.to_string())
    })
}

/// Write `want` as a thread's affinity only if it is still `read`: `Ok(None)` when written,
/// `Ok(Some(now))` when it had become `now` (someone else's: left so); an error as
/// [`set_thread_affinity`]'s (ESRCH: gone). On the running system the check and the write are
/// back to back ([`sched::set_affinity_if`]); on a tree, its status file read and rewritten.
pub(crate) fn set_thread_affinity_if(
    root: &SysRoot,
    pid: i32,
    tid: i32,
    read: &CpuSet,
    want: &CpuSet,
) -> Result<Option<CpuSet>> {
    if root.is_host() {
        return sched::set_affinity_if(tid, read, want);
    }
    match affinity_now(root, pid, tid)? {
        None => Err(Error::syscall(
            format!("thread {tid}"),
            nix::errno::Errno::ESRCH,
        )),
        Some(now) if now != *read => Ok(Some(now)),
        Some(_) => set_thread_affinity(root, pid, tid, want).map(|()| None),
    }
}

/// `text` (a status file) with the value of its `key:` line replaced; unchanged without one.
/// One copy of the file, whatever its length (a thread each on a tree of 50,000).
fn with_field(text: &str, key: &str, value: &str) -> String {
    let start = if text.starts_with(key) && text[key.len()..].starts_with(':') {
        Some(0)
    } else {
        text.match_indices(&format!("\n{key}:"))
            .next()
            .map(|(i, _)| i + 1)
    };
    let Some(start) = start else {
        return text.to_string();
    };
    let end = text[start..]
        .find('\n')
        .map_or(text.len(), |i| start + i + 1);
    let mut out = String::with_capacity(text.len() + value.len());
    out.push_str(&text[..start]);
    out.push_str(key);
    out.push_str(":\t");
    out.push_str(value);
    out.push('\n');
    out.push_str(&text[end..]);
    out
}

/// How a refused affinity write is reported: ESRCH, the thread exited (gone); EINVAL, no
/// CPU of the mask is allowed to it (the kernel will not change it); anything else is a
/// failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    Gone,
    NotChangeable,
    Failed,
}

pub(crate) fn refusal(e: &Error) -> Refusal {
    match e.errno() {
        Some(libc::ESRCH) | Some(libc::ENOENT) => Refusal::Gone,
        Some(libc::EINVAL) => Refusal::NotChangeable,
        _ => Refusal::Failed,
    }
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
    // rt_priority and policy are fields 40 and 41.
    edit_stat_fields(
        root,
        pid,
        tid,
        &[
            (40, policy.priority().to_string()),
            (41, policy.policy_number().to_string()),
        ],
    )
}

/// On a tree: the stat file's fields (numbered as proc(5) does, 3 the first after the comm's
/// closing parenthesis) set to the values given.
fn edit_stat_fields(root: &SysRoot, pid: i32, tid: i32, set: &[(usize, String)]) -> Result<()> {
    edit_tree_file(root, &format!("/proc/{pid}/task/{tid}/stat"), |text| {
        let close = text.rfind(')').unwrap_or(0);
        let (head, tail) = text.split_at(close + 1);
        let mut f: Vec<String> = tail.split_whitespace().map(str::to_string).collect();
        if f.len() >= 39 {
            for (field, value) in set {
                f[field - 3].clone_from(value);
            }
        }
        format!("{head} {}\n", f.join(" "))
    })
}

/// A thread's scheduling attributes: `sched_getattr(2)` on the running system; on a tree,
/// its stat file's policy, rt_priority and nice (fields 41, 40 and 19).
pub(crate) fn thread_attr(root: &SysRoot, pid: i32, tid: i32) -> Result<sched::SchedAttr> {
    if root.is_host() {
        return sched::get_attr(tid);
    }
    let text = read_tree_file(root, &format!("/proc/{pid}/task/{tid}/stat"))?;
    let close = text.rfind(')').unwrap_or(0);
    let f: Vec<&str> = text[close + 1..].split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
    Ok(sched::SchedAttr::plain(
        num(38) as u32,
        num(37) as u32,
        num(16) as i32,
        false,
    ))
}

/// Set a thread's scheduling attributes: `sched_setattr(2)` on the running system; on a
/// tree, its stat file's policy, rt_priority and nice.
pub(crate) fn set_thread_attr(
    root: &SysRoot,
    pid: i32,
    tid: i32,
    attr: &sched::SchedAttr,
) -> Result<()> {
    if root.is_host() {
        return sched::set_attr(tid, attr);
    }
    // nice, rt_priority and policy are fields 19, 40 and 41.
    edit_stat_fields(
        root,
        pid,
        tid,
        &[
            (19, attr.nice.to_string()),
            (40, attr.priority.to_string()),
            (41, attr.policy.to_string()),
        ],
    )
}

fn edit_tree_file(root: &SysRoot, abs: &str, edit: impl FnOnce(&str) -> String) -> Result<()> {
    let text = read_tree_file(root, abs)?;
    root.write(abs, edit(&text))
}

/// A thread's file on a tree; a missing one is a thread that is gone (ESRCH, as the system
/// call says).
fn read_tree_file(root: &SysRoot, abs: &str) -> Result<String> {
    root.read_to_string(abs).map_err(|e| {
        if e.errno() == Some(libc::ENOENT) {
            Error::syscall(format!("thread of {abs}"), nix::errno::Errno::ESRCH)
        } else {
            e
        }
    })
}

/// A thread's affinity as [`affinity_now`] reads it; `None` when it is gone or cannot be read.
pub(crate) fn affinity(root: &SysRoot, pid: i32, tid: i32) -> Option<CpuSet> {
    affinity_now(root, pid, tid).ok().flatten()
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
    // The status file alone: its Cpus_allowed_list is what the system call returns.
    let path = format!("/proc/{pid}/task/{tid}/status");
    let status = match root.read_to_string(&path) {
        Ok(s) => s,
        Err(e) if crate::tasks::gone(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let list =
        crate::procfs::status_field(&status, "Cpus_allowed_list").ok_or_else(|| Error::Parse {
            path: root.path(&path),
            input: "Cpus_allowed_list".into(),
            reason: "field not present".into(),
        })?;
    Ok(Some(CpuSet::parse_list(list)?))
}

#[cfg(test)]
mod tests {
    use super::{refusal, Refusal};
    use crate::cpuset::CpuSet;
    use crate::error::Error;

    /// On a tree: the status file's list; a thread without one is gone; a file that cannot
    /// be read, or has no list, is an error.
    #[test]
    fn a_trees_affinity_now_reads_the_status_file() {
        let t = tempfile::tempdir().unwrap();
        let root = crate::sysroot::SysRoot::new(t.path());
        let put = |rel: &str, text: &str| {
            let p = t.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        put(
            "proc/5/task/5/status",
            "Name:\tw\nCpus_allowed_list:\t0-1,3\n",
        );
        put("proc/5/task/6/status", "Name:\tw\n");
        std::fs::create_dir_all(t.path().join("proc/5/task/7/status")).unwrap();
        assert_eq!(
            super::affinity_now(&root, 5, 5).unwrap(),
            Some(CpuSet::parse_list("0-1,3").unwrap())
        );
        assert_eq!(super::affinity_now(&root, 5, 9).unwrap(), None);
        assert!(super::affinity_now(&root, 5, 6).is_err());
        assert!(super::affinity_now(&root, 5, 7).is_err());
    }

    /// On the running system: this thread's own affinity; an exited thread is gone.
    #[test]
    fn the_running_systems_affinity_now_is_the_system_call() {
        let host = crate::sysroot::SysRoot::host();
        let me = std::process::id() as i32;
        let mine = crate::sched::get_affinity(me).unwrap();
        assert_eq!(super::affinity_now(&host, me, me).unwrap(), Some(mine));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        child.wait().unwrap();
        assert_eq!(super::affinity_now(&host, pid, pid).unwrap(), None);
    }

    #[test]
    fn a_refused_write_is_gone_not_changeable_or_failed() {
        let e = |n| Error::syscall("sched_setaffinity", nix::errno::Errno::from_raw(n));
        assert_eq!(refusal(&e(libc::ESRCH)), Refusal::Gone);
        assert_eq!(refusal(&e(libc::ENOENT)), Refusal::Gone);
        assert_eq!(refusal(&e(libc::EINVAL)), Refusal::NotChangeable);
        assert_eq!(refusal(&e(libc::EPERM)), Refusal::Failed);
        assert_eq!(refusal(&e(libc::EIO)), Refusal::Failed);
    }
    #[test]
    fn a_tree_edit_replaces_the_one_line() {
        let st = "Name:\tCpus_allowed_list:\nCpus_allowed:\tf\nCpus_allowed_list:\t0-3\nMems:\t0\n";
        assert_eq!(
            super::with_field(st, "Cpus_allowed_list", "0-1"),
            "Name:\tCpus_allowed_list:\nCpus_allowed:\tf\nCpus_allowed_list:\t0-1\nMems:\t0\n"
        );
        // First line, last line without its newline, no such line.
        assert_eq!(super::with_field("A:\t1\nB:\t2", "A", "3"), "A:\t3\nB:\t2");
        assert_eq!(
            super::with_field("A:\t1\nB:\t2", "B", "3"),
            "A:\t1\nB:\t3\n"
        );
        assert_eq!(super::with_field("A:\t1\n", "C", "3"), "A:\t1\n");
    }
}
