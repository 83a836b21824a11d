//! Parsers for the per-task files under `/proc`: the task-isolation state file of patched
//! kernels, `/proc/<pid>/stat` and `/proc/<pid>/status`.

use std::fmt;
use std::path::Path;

use crate::abi;
use crate::error::{Error, Result};
use crate::sysroot::SysRoot;

/// The state shown by `/proc/<pid>/task_isolation`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskIsolationState {
    /// Configured features (`abi::ISOL_F_QUIESCE`).
    pub configured: u64,
    /// Active features.
    pub active: u64,
    /// Quiesce bits being performed (`abi::ISOL_F_QUIESCE_VMSTATS`).
    pub quiescing: u64,
}

const LINES: [&str; 3] = ["Configured state:", "Active state:", "Quiescing:"];

fn names_to_mask(rest: &str, table: &[(u64, &str)]) -> std::result::Result<u64, String> {
    // The kernel prints each name followed by one space, or "none " for an empty mask.
    let body = rest
        .strip_prefix(' ')
        .ok_or_else(|| "expected a space after the colon".to_string())?;
    if !body.ends_with(' ') {
        return Err("expected the list to end with a space".into());
    }
    let names: Vec<&str> = body[..body.len() - 1].split(' ').collect();
    if names == ["none"] {
        return Ok(0);
    }
    let mut mask = 0;
    for n in names {
        match table.iter().find(|(_, name)| *name == n) {
            Some((bit, _)) => mask |= bit,
            None => return Err(format!("unknown name {n:?}")),
        }
    }
    if mask == 0 {
        return Err("empty list (the kernel prints \"none \")".into());
    }
    Ok(mask)
}

fn mask_to_names(mask: u64, table: &[(u64, &str)]) -> String {
    let mut s = String::new();
    for (bit, name) in table {
        if mask & bit != 0 {
            s.push_str(name);
            s.push(' ');
        }
    }
    let unknown = table.iter().fold(mask, |m, (bit, _)| m & !bit);
    if unknown != 0 {
        s.push_str(&format!("0x{unknown:x} "));
    }
    if s.is_empty() {
        s.push_str("none ");
    }
    s
}

impl TaskIsolationState {
    /// Parse the exact three-line format of the v8..v12 series:
    ///
    /// ```text
    /// Configured state: quiesce
    /// Active state: none
    /// Quiescing: vmstat_sync
    /// ```
    ///
    /// The error text says which line is wrong and why.
    pub fn parse(content: &str) -> std::result::Result<Self, String> {
        let lines: Vec<&str> = content.lines().collect();
        if lines.len() != 3 || !content.ends_with('\n') {
            return Err(format!(
                "expected 3 newline-terminated lines, found {}",
                lines.len()
            ));
        }
        let mut masks = [0u64; 3];
        for (i, (line, prefix)) in lines.iter().zip(LINES).enumerate() {
            let rest = line
                .strip_prefix(prefix)
                .ok_or_else(|| format!("line {} does not start with {prefix:?}", i + 1))?;
            let table = if i == 2 {
                abi::QUIESCE_NAMES
            } else {
                abi::FEATURE_NAMES
            };
            masks[i] = names_to_mask(rest, table).map_err(|e| format!("line {}: {e}", i + 1))?;
        }
        Ok(TaskIsolationState {
            configured: masks[0],
            active: masks[1],
            quiescing: masks[2],
        })
    }

    /// Read and parse `/proc/<tid>/task_isolation` (a thread id works at the top level).
    pub fn read(root: &SysRoot, tid: i32) -> Result<Self> {
        Self::read_path(root, &format!("/proc/{tid}/task_isolation"))
    }

    /// Read and parse a task_isolation file at a kernel path.
    pub fn read_path(root: &SysRoot, abs: &str) -> Result<Self> {
        root.read_parsed(abs, Self::parse)
    }

    /// Names of the configured features, as the kernel prints them (`"quiesce"`, `"none"`).
    pub fn configured_names(&self) -> String {
        mask_to_names(self.configured, abi::FEATURE_NAMES)
            .trim_end()
            .to_string()
    }

    /// Names of the active features.
    pub fn active_names(&self) -> String {
        mask_to_names(self.active, abi::FEATURE_NAMES)
            .trim_end()
            .to_string()
    }

    /// Names of the quiesce bits being performed (`"vmstat_sync"`, `"none"`).
    pub fn quiescing_names(&self) -> String {
        mask_to_names(self.quiescing, abi::QUIESCE_NAMES)
            .trim_end()
            .to_string()
    }
}

impl fmt::Display for TaskIsolationState {
    /// The exact file format, so that a state prints as the kernel would print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Configured state: {}\nActive state: {}\nQuiescing: {}\n",
            mask_to_names(self.configured, abi::FEATURE_NAMES),
            mask_to_names(self.active, abi::FEATURE_NAMES),
            mask_to_names(self.quiescing, abi::QUIESCE_NAMES)
        )
    }
}

/// The thread ids of process `pid`, ascending.
pub fn thread_ids(root: &SysRoot, pid: i32) -> Result<Vec<i32>> {
    let dir = format!("/proc/{pid}/task");
    let mut tids = Vec::new();
    for name in root.read_dir_names(&dir)? {
        let tid = name.parse::<i32>().map_err(|_| Error::Parse {
            path: root.path(&dir),
            input: name.clone(),
            reason: "entry is not a thread id".into(),
        })?;
        tids.push(tid);
    }
    tids.sort_unstable();
    Ok(tids)
}

/// Whether `e` says that the task being read has exited: its `/proc` directory is gone
/// (ENOENT), or it went away while its file was read (ESRCH). Any other error is real.
pub fn task_exited(e: &Error) -> bool {
    matches!(e.errno(), Some(libc::ENOENT | libc::ESRCH))
}

/// Fields of `/proc/<pid>/stat` that isolation tools look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskStat {
    /// Task id.
    pub pid: i32,
    /// Command name (between the parentheses; may contain spaces and parentheses).
    pub comm: String,
    /// State letter (R, S, D, ...).
    pub state: char,
    /// `PF_*` flags (field 9).
    pub flags: u64,
    /// Start time after boot, in clock ticks (field 22): with the pid, it tells a task from
    /// a later one that reused its pid.
    pub starttime: u64,
    /// CPU time used so far, user and system, in clock ticks (fields 14 and 15).
    pub cpu_ticks: u64,
    /// CPU it last ran on (field 39).
    pub processor: u32,
    /// Real-time priority (field 40).
    pub rt_priority: u32,
    /// Scheduling policy (field 41): 0 OTHER, 1 FIFO, 2 RR, 3 BATCH, 5 IDLE, 6 DEADLINE.
    pub policy: u32,
    /// Threads of its process (field 20), in any thread's stat.
    pub num_threads: i64,
}

/// `PF_KTHREAD`: the task is a kernel thread.
pub const PF_KTHREAD: u64 = 0x0020_0000;
/// `PF_NO_SETAFFINITY`: the kernel refuses affinity changes (per-CPU kthreads).
pub const PF_NO_SETAFFINITY: u64 = 0x0400_0000;

impl TaskStat {
    /// Parse the content of a stat file (with procfs-core, which finds `comm` between the
    /// first `(` and the last `)`, because a task can name itself `a) b (c`).
    pub fn parse(content: &str) -> std::result::Result<Self, String> {
        use procfs_core::FromRead;
        let st =
            procfs_core::process::Stat::from_read(content.as_bytes()).map_err(|e| e.to_string())?;
        // processor, rt_priority and policy exist since 2.5.19/2.6.x; their absence means
        // a truncated file.
        let missing = |f: &str| format!("missing field {f}");
        Ok(TaskStat {
            pid: st.pid,
            comm: st.comm,
            state: st.state,
            flags: u64::from(st.flags),
            starttime: st.starttime,
            cpu_ticks: st.utime + st.stime,
            processor: st.processor.ok_or_else(|| missing("processor"))? as u32,
            rt_priority: st.rt_priority.ok_or_else(|| missing("rt_priority"))?,
            policy: st.policy.ok_or_else(|| missing("policy"))?,
            num_threads: st.num_threads,
        })
    }

    /// Read `/proc/<pid>/stat` (or `/proc/<pid>/task/<tid>/stat` via [`TaskStat::read_path`]).
    pub fn read(root: &SysRoot, pid: i32) -> Result<Self> {
        Self::read_path(root, &format!("/proc/{pid}/stat"))
    }

    /// Read and parse a stat file at a kernel path.
    pub fn read_path(root: &SysRoot, abs: &str) -> Result<Self> {
        let text = root.read_record(abs)?;
        Self::parse(&text).map_err(|reason| Error::Parse {
            path: root.path(abs),
            input: text,
            reason,
        })
    }

    /// Whether this is a kernel thread.
    pub fn is_kthread(&self) -> bool {
        self.flags & PF_KTHREAD != 0
    }
}

/// The value of `Key:` in a `/proc/<pid>/status` text (`Cpus_allowed_list`, `THP_enabled`).
pub fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    let [v] = status_fields(status, [key]);
    v
}

/// The values of several `Key:`s of a status text in one pass over its lines (a thread's
/// affinity and context switches: three fields of sixty lines, for each of 50,000 threads).
pub fn status_fields<'a, const N: usize>(status: &'a str, keys: [&str; N]) -> [Option<&'a str>; N] {
    let mut out = [None; N];
    let mut left = N;
    for line in status.split('\n') {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        if let Some(i) = keys.iter().position(|key| *key == k) {
            if out[i].is_none() {
                out[i] = Some(v.trim());
                left -= 1;
                if left == 0 {
                    break;
                }
            }
        }
    }
    out
}

/// The value of `Key:` in `/proc/<pid>/status`, or a parse error naming the file.
pub fn read_status_field(root: &SysRoot, pid: i32, key: &str) -> Result<String> {
    read_status_field_at(root, &format!("/proc/{pid}/status"), key)
}

/// The value of `Key:` in the status file at a kernel path (`/proc/<pid>/task/<tid>/status`).
pub fn read_status_field_at(root: &SysRoot, abs: &str, key: &str) -> Result<String> {
    let content = root.read_to_string(abs)?;
    status_field(&content, key)
        .map(str::to_string)
        .ok_or_else(|| Error::Parse {
            path: root.path(Path::new(abs)),
            input: key.to_string(),
            reason: "field not present".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_field_is_a_whole_key_at_the_start_of_a_line() {
        let st = "Name:\tPid-1\nTracerPid:\t0\nPPid:\t1\nPid:\t42\nNSpid:\t42\n\
                  Cpus_allowed:\tf\nCpus_allowed_list:\t0-3\r\nlast:\t  x  ";
        assert_eq!(status_field(st, "Pid"), Some("42"));
        assert_eq!(status_field(st, "Name"), Some("Pid-1"));
        assert_eq!(status_field(st, "Cpus_allowed"), Some("f"));
        assert_eq!(status_field(st, "Cpus_allowed_list"), Some("0-3"));
        assert_eq!(status_field(st, "last"), Some("x"));
        assert_eq!(status_field(st, "allowed"), None);
        assert_eq!(status_field(st, "Cpus"), None);
        assert_eq!(status_field(st, "Threads"), None);
        assert_eq!(status_field(st, ""), None);
        assert_eq!(status_field("", "Pid"), None);
    }

    #[test]
    fn parses_every_state_of_the_reference() {
        let s = TaskIsolationState::parse(
            "Configured state: quiesce \nActive state: quiesce \nQuiescing: vmstat_sync \n",
        )
        .unwrap();
        assert_eq!(
            s,
            TaskIsolationState {
                configured: 1,
                active: 1,
                quiescing: 1
            }
        );
        let none = TaskIsolationState::parse(
            "Configured state: none \nActive state: none \nQuiescing: none \n",
        )
        .unwrap();
        assert_eq!(none, TaskIsolationState::default());
        assert_eq!(none.configured_names(), "none");
        assert_eq!(s.quiescing_names(), "vmstat_sync");
        // Bits this library has no name for are shown, not dropped.
        let odd = TaskIsolationState {
            configured: 1 | 4,
            active: 8,
            quiescing: 0,
        };
        assert_eq!(odd.configured_names(), "quiesce 0x4");
        assert_eq!(odd.active_names(), "0x8");
        assert_eq!(odd.quiescing_names(), "none");
    }

    #[test]
    fn display_is_the_kernel_format_byte_for_byte() {
        for text in [
            "Configured state: quiesce \nActive state: none \nQuiescing: vmstat_sync \n",
            "Configured state: none \nActive state: none \nQuiescing: none \n",
        ] {
            assert_eq!(TaskIsolationState::parse(text).unwrap().to_string(), text);
        }
    }

    #[test]
    fn rejects_anything_else_with_a_reason() {
        for (bad, why) in [
            ("", "3 newline-terminated lines"),
            (
                "Configured state: quiesce\nActive state: none \nQuiescing: none \n",
                "end with a space",
            ),
            (
                "Configured state: none \nActive state: none \nQuiescing: bogus \n",
                "unknown name \"bogus\"",
            ),
            (
                "Active state: none \nConfigured state: none \nQuiescing: none \n",
                "line 1 does not start",
            ),
            (
                "Configured state: none \nActive state: none \nQuiescing: none ",
                "newline-terminated",
            ),
        ] {
            let e = TaskIsolationState::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    #[test]
    fn stat_with_hostile_comm() {
        let line = "42 (a) b (c) S 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 -2 0 1 0 100 0 0 \
                    18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 3 10 1 0 0 0";
        let st = TaskStat::parse(line).unwrap();
        assert_eq!(st.comm, "a) b (c");
        assert_eq!(st.state, 'S');
        assert_eq!(st.flags, 4194560);
        assert_eq!(st.starttime, 100);
        assert_eq!((st.processor, st.rt_priority, st.policy), (3, 10, 1));
        assert!(!st.is_kthread());
        let kthread = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0 \
                       18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0";
        let st = TaskStat::parse(kthread).unwrap();
        assert_eq!(st.flags, 0x208040);
        assert!(st.is_kthread(), "PF_KTHREAD (0x200000) is set");
        assert!(
            TaskStat::parse("42 (x) S 1 2").is_err(),
            "a truncated stat is an error"
        );
    }

    #[test]
    fn reads_this_process() {
        let me = std::process::id() as i32;
        let st = TaskStat::read(&SysRoot::host(), me).unwrap();
        assert_eq!(st.pid, me);
        let cpus = read_status_field(&SysRoot::host(), me, "Cpus_allowed_list").unwrap();
        assert!(!crate::CpuSet::parse_list(&cpus).unwrap().is_empty());
        assert!(thread_ids(&SysRoot::host(), me).unwrap().contains(&me));
    }
}
