//! What tracing asks of every CPU, shared by the audit's tick_stop recording and the noise
//! ledger: the first event enabled after boot makes the kernel grow its trace buffer from
//! the boot's minimal size (top-level `buffer_size_kb` reads `7 (expanded: 1408)` until
//! then: `tracing_update_buffers`, on 6.1 at least). Growing it queues work on every CPU and
//! waits for it (`ring_buffer_resize`), so while a real-time workload keeps an isolated
//! CPU's kworker from running, that first enable waits as long: measured on 6.1 with a
//! SCHED_FIFO loop on CPU 3, `isold audit` blocked in `event_enable_write` until the stall
//! guard lent the kworker a slice.
//!
//! And what both do with tracefs: find it, make their own instance, remove it.

use crate::cpuset::CpuSet;
use crate::error::{Error, Result};
use crate::sysroot::SysRoot;

/// Where tracefs is looked for, in order.
pub const TRACEFS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Why there is no tracefs directory a caller can use: a user of the library can tell a
/// kernel that lacks something from a file it could not read.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    /// Neither `/sys/kernel/tracing` nor `/sys/kernel/debug/tracing` is mounted.
    #[error("tracefs is not mounted (at {} or {})", TRACEFS[0], TRACEFS[1])]
    NotMounted,
    /// It is mounted but not readable (EACCES: it takes root).
    #[error("{dir} is not readable (it takes root)")]
    Denied {
        /// The tracefs directory.
        dir: String,
    },
    /// The kernel lacks what the caller needs there (a tracer, a tracepoint, instances),
    /// said with what and where.
    #[error("{what}")]
    Lacks {
        /// What is missing, and where it was looked for.
        what: String,
    },
    /// A file of it could not be read (the path and errno are the error's).
    #[error(transparent)]
    Read(#[from] Error),
}

/// The tracefs directory (`/sys/kernel/tracing`, else the debugfs one) with instances, or why
/// there is none; `missing(dir)` names what else a caller needs there and this kernel lacks
/// (its tracepoints), said before a missing instances directory.
pub fn find(
    root: &SysRoot,
    missing: impl Fn(&str) -> Option<String>,
) -> std::result::Result<String, Unavailable> {
    let mut denied = None;
    for dir in TRACEFS {
        match std::fs::metadata(root.path(format!("{dir}/available_events"))) {
            Ok(_) => {
                if let Some(what) = missing(dir) {
                    return Err(Unavailable::Lacks { what });
                }
                if !root.exists(format!("{dir}/instances")) {
                    return Err(Unavailable::Lacks {
                        what: format!("tracefs at {dir} has no instances directory"),
                    });
                }
                return Ok(dir.to_string());
            }
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                denied.get_or_insert(dir);
            }
            Err(_) => {}
        }
    }
    Err(match denied {
        Some(d) => Unavailable::Denied { dir: d.to_string() },
        None => Unavailable::NotMounted,
    })
}

/// Make the instance `dir` below `tracefs`. A captured tree has no kernel to make its files:
/// it gets a copy of the top-level instance's `tree_files` that exist.
pub fn make_instance(root: &SysRoot, tracefs: &str, dir: &str, tree_files: &[&str]) -> Result<()> {
    let err = |source| Error::Write {
        path: root.path(dir),
        data: "(mkdir)".into(),
        source,
    };
    std::fs::create_dir(root.path(dir)).map_err(err)?;
    if !root.is_host() {
        for f in tree_files {
            let from = root.path(format!("{tracefs}/{f}"));
            let to = root.path(format!("{dir}/{f}"));
            if from.exists() {
                let copy = std::fs::create_dir_all(to.parent().expect("below the instance"))
                    .and_then(|()| std::fs::copy(&from, &to));
                copy.map_err(err)?;
            }
        }
    }
    Ok(())
}

/// Remove an instance. The kernel removes an instance's files with it: in a captured tree
/// they are removed first.
pub fn remove_instance(root: &SysRoot, dir: &str) -> Result<()> {
    let path = root.path(dir);
    let res = if root.is_host() {
        std::fs::remove_dir(&path)
    } else {
        std::fs::remove_dir_all(&path)
    };
    res.map_err(|source| Error::Write {
        path,
        data: "(rmdir)".into(),
        source,
    })
}

/// This process's pid namespace as the kernel names it (the number in `/proc/self/ns/pid`'s
/// `pid:[N]`), 0 when it cannot be read. Trace instances are shared by every pid namespace of
/// the machine: isold's names carry it, so that a pid is only ever judged in its own.
pub fn own_pid_ns() -> u64 {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|l| {
            let l = l.to_string_lossy().into_owned();
            l.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
        })
        .unwrap_or(0)
}

/// The name of an instance of process `pid` of pid namespace `ns`: `<prefix><ns>-<pid>`.
pub fn owned_name(prefix: &str, ns: u64, pid: u32) -> String {
    format!("{prefix}{ns}-{pid}")
}

/// Whether the instance `name` is provably stale: named by [`owned_name`] with `prefix`, made
/// in pid namespace `ns` (this process's), by a process that no longer exists under `root`.
/// An instance of another namespace (a second isold in a container, or the host's seen from
/// one), or named otherwise (isold before namespaces were in the name), is never stale: its
/// pid means nothing here.
pub fn stale(root: &SysRoot, prefix: &str, name: &str, ns: u64) -> bool {
    let Some((their_ns, pid)) = name.strip_prefix(prefix).and_then(|r| r.split_once('-')) else {
        return false;
    };
    match (their_ns.parse::<u64>(), pid.parse::<u32>()) {
        (Ok(n), Ok(p)) => n == ns && ns != 0 && !root.exists(format!("/proc/{p}")),
        _ => false,
    }
}

/// Remove the instances below `tracefs` that [`stale`] proves stale (their events off first).
pub fn remove_stale(root: &SysRoot, tracefs: &str, prefix: &str) {
    let Ok(names) = root.read_dir_names(format!("{tracefs}/instances")) else {
        return;
    };
    let ns = own_pid_ns();
    for n in names.iter().filter(|n| stale(root, prefix, n, ns)) {
        let dir = format!("{tracefs}/instances/{n}");
        let _ = root.write(format!("{dir}/events/enable"), "0");
        let _ = remove_instance(root, &dir);
    }
}

/// Whether the kernel's trace buffer is still at its boot size: the next event enabled
/// anywhere grows it (`buffer_size_kb` says `(expanded: N)`).
pub fn unexpanded(root: &SysRoot, tracefs: &str) -> bool {
    root.read_to_string(format!("{tracefs}/buffer_size_kb"))
        .is_ok_and(|t| t.contains("expanded"))
}

/// Why making an instance or enabling an event now would wait behind a workload, `None`
/// when it is safe:
/// - the buffer is unexpanded and a runnable real-time thread sits on one of `cpus`: the
///   first event enabled grows the buffer with work queued on every CPU, which waits behind
///   that thread for as long as it runs;
/// - a thread starves now on one of `cpus` behind a runnable real-time thread (both runnable
///   on the same CPU), with RT throttling off and no fair server serving it (before 6.12, or
///   its runtime 0): work the kernel queues there meanwhile waits too, and making an instance
///   (megabytes of buffers, memory reclaim draining every CPU's lists) was seen to wait on
///   6.1.
pub fn enabling_would_wait(root: &SysRoot, tracefs: &str, cpus: &CpuSet) -> Option<String> {
    let threads = crate::tasks::threads_on(root, cpus).ok()?;
    // A real-time workload: kernel threads of those classes (ktimers/N, rcuc/N, IRQ threads on
    // PREEMPT_RT) run briefly and leave the CPU; a user thread is what may hold it for good.
    let holds =
        |t: &&crate::tasks::Thread| t.state == 'R' && matches!(t.policy, 1 | 2) && !t.is_kthread();
    let rt_on = |cpu: u32| threads.iter().filter(holds).find(|t| t.processor == cpu);
    let rt = threads
        .iter()
        .filter(holds)
        .find(|t| cpus.contains(t.processor as usize))?;
    if unexpanded(root, tracefs) {
        return Some(format!(
            "the kernel's trace buffer is still at its boot size ({tracefs}/buffer_size_kb): the first event enabled grows it with work queued on every CPU, which would wait behind the real-time thread {} (pid {}) on CPU {}; record once before the workload starts (isold run does at its start)",
            rt.comm, rt.tid, rt.processor
        ));
    }
    // A starving thread waits only a while where RT throttling leaves the CPU to it now and
    // then, or the kernel's fair server (6.12+) serves it.
    if root
        .read_value("/proc/sys/kernel/sched_rt_runtime_us")
        .is_ok_and(|v| v != "-1")
    {
        return None;
    }
    let fair_server = crate::topology::KernelVersion::read(root).is_ok_and(|v| v.at_least(6, 12));
    let served = |cpu: u32| match root.read_value(format!(
        "/sys/kernel/debug/sched/fair_server/cpu{cpu}/runtime"
    )) {
        Ok(v) => v != "0",
        Err(_) => fair_server,
    };
    let (starving, behind) = threads.iter().find_map(|t| {
        if t.state != 'R' || matches!(t.policy, 1 | 2) || !cpus.contains(t.processor as usize) {
            return None;
        }
        if served(t.processor) {
            return None;
        }
        rt_on(t.processor).map(|r| (t, r))
    })?;
    Some(format!(
        "{} (pid {}) is runnable on CPU {} behind the real-time thread {} (pid {}): the kernel's work for that CPU would wait as it does, and tracing would wait for it; isold run's stall guard lends such threads a slice",
        starving.comm, starving.tid, starving.processor, behind.comm, behind.tid
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only an instance of this pid namespace whose process is gone is stale: another
    /// namespace's (a second isold in a container) and an old-style name are left alone.
    #[test]
    fn only_instances_of_our_pid_namespace_whose_process_is_gone_are_stale() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::new(dir.path());
        std::fs::create_dir_all(dir.path().join("proc/77")).unwrap();
        let ns = 4026531836;
        let p = "isold-audit-";
        assert_eq!(owned_name(p, ns, 77), "isold-audit-4026531836-77");
        assert!(stale(&root, p, "isold-audit-4026531836-78", ns));
        assert!(!stale(&root, p, "isold-audit-4026531836-77", ns), "alive");
        assert!(
            !stale(&root, p, "isold-audit-4026532100-78", ns),
            "another namespace"
        );
        assert!(!stale(&root, p, "isold-audit-78", ns), "old-style name");
        assert!(!stale(&root, p, "mine", ns));
        assert!(!stale(&root, p, "isold-audit-0-78", 0), "namespace unknown");
        assert!(own_pid_ns() > 0);
        assert_eq!(
            std::fs::read_link("/proc/self/ns/pid").unwrap(),
            std::path::PathBuf::from(format!("pid:[{}]", own_pid_ns())),
            "the kernel's number of this pid namespace"
        );
        // The same through remove_stale, on a tracefs tree.
        let t = dir.path().join("sys/kernel/tracing/instances");
        let ours = own_pid_ns();
        for n in [
            owned_name(p, ours, 78),
            owned_name(p, ours, 77),
            owned_name(p, ours + 1, 78),
        ] {
            std::fs::create_dir_all(t.join(&n).join("events")).unwrap();
        }
        remove_stale(&root, "/sys/kernel/tracing", p);
        assert!(!t.join(owned_name(p, ours, 78)).exists());
        assert!(t.join(owned_name(p, ours, 77)).exists());
        assert!(t.join(owned_name(p, ours + 1, 78)).exists());
    }

    #[test]
    fn an_unexpanded_buffer_with_a_realtime_thread_on_the_cpus_would_wait() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let put = |rel: &str, text: &str| {
            let p = d.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        let root = SysRoot::new(d);
        let t = "/sys/kernel/tracing";
        put("sys/kernel/tracing/buffer_size_kb", "7 (expanded: 1408)\n");
        put("proc/sys/kernel/sched_rt_runtime_us", "-1\n");
        put("proc/sys/kernel/osrelease", "6.1.0-57-amd64\n");
        let stat = |pid: i32, comm: &str, state: char, cpu: u32, policy: u32| {
            let mut f: Vec<String> = (3..=52).map(|_| "0".to_string()).collect();
            f[0] = state.to_string();
            f[36] = cpu.to_string();
            f[37] = u32::from(policy != 0).to_string();
            f[38] = policy.to_string();
            format!("{pid} ({comm}) {}\n", f.join(" "))
        };
        put("proc/40/task/40/stat", &stat(40, "rtloop", 'R', 3, 1));
        put(
            "proc/40/task/40/status",
            "Name:\trtloop\nCpus_allowed_list:\t3\n",
        );
        put("proc/40/stat", &stat(40, "rtloop", 'R', 3, 1));
        let cpus: CpuSet = "2-3".parse().unwrap();
        // A real-time kernel thread runnable on CPU 2 (ktimers/2 on PREEMPT_RT): it leaves
        // the CPU, tracing need not wait for it.
        let mut f: Vec<String> = (3..=52).map(|_| "0".to_string()).collect();
        f[0] = "R".into();
        f[6] = "2097152".into(); // PF_KTHREAD
        f[36] = "2".into();
        f[37] = "1".into();
        f[38] = "1".into();
        let kt = format!("41 (ktimers/2) {}\n", f.join(" "));
        put("proc/41/task/41/stat", &kt);
        put(
            "proc/41/task/41/status",
            "Name:\tktimers/2\nCpus_allowed_list:\t2\n",
        );
        put("proc/41/stat", &kt);
        let cpu2: CpuSet = "2".parse().unwrap();
        assert_eq!(enabling_would_wait(&root, t, &cpu2), None);
        let why = enabling_would_wait(&root, t, &cpus).expect("it would wait");
        assert!(why.contains("rtloop (pid 40) on CPU 3"), "{why}");
        // Expanded: safe.
        put("sys/kernel/tracing/buffer_size_kb", "1408\n");
        assert_eq!(enabling_would_wait(&root, t, &cpus), None);
        // Expanded, but a kworker runnable behind the loop on CPU 3: it starves, and tracing
        // would wait for it.
        put("proc/37/task/37/stat", &stat(37, "kworker/3:1", 'R', 3, 0));
        put(
            "proc/37/task/37/status",
            "Name:\tkworker/3:1\nCpus_allowed_list:\t3\n",
        );
        put("proc/37/stat", &stat(37, "kworker/3:1", 'R', 3, 0));
        let why = enabling_would_wait(&root, t, &cpus).expect("it would wait");
        assert!(
            why.contains("kworker/3:1 (pid 37) is runnable on CPU 3 behind the real-time thread rtloop (pid 40)"),
            "{why}"
        );
        // RT throttling on, or a fair server: it waits a while only.
        put("proc/sys/kernel/sched_rt_runtime_us", "950000\n");
        assert_eq!(enabling_would_wait(&root, t, &cpus), None);
        put("proc/sys/kernel/sched_rt_runtime_us", "-1\n");
        put("proc/sys/kernel/osrelease", "6.12.57+deb13-rt-amd64\n");
        assert_eq!(enabling_would_wait(&root, t, &cpus), None);
        // Its runtime set to 0: no server.
        put("sys/kernel/debug/sched/fair_server/cpu3/runtime", "0\n");
        assert!(enabling_would_wait(&root, t, &cpus).is_some());
        // The same kworker asleep: safe.
        put("proc/37/task/37/stat", &stat(37, "kworker/3:1", 'S', 3, 0));
        assert_eq!(enabling_would_wait(&root, t, &cpus), None);
        // Unexpanded but the thread is SCHED_OTHER: safe.
        put("sys/kernel/tracing/buffer_size_kb", "7 (expanded: 1408)\n");
        put("proc/40/task/40/stat", &stat(40, "rtloop", 'R', 3, 0));
        assert_eq!(enabling_would_wait(&root, t, &cpus), None);
    }
}
