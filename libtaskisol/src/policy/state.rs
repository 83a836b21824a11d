//! The state file: every original value, persisted before it is first overwritten.
//!
//! Written atomically (temporary file, fsync, rename, fsync of the directory), so a crash or
//! `kill -9` at any point leaves either the previous or the new state, never a torn one. An
//! entry, once recorded, is never replaced: an apply after an interrupted one keeps the
//! value that was there before the first apply.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::sysroot::SysRoot;

/// The default state file (below the root).
pub const DEFAULT_STATE: &str = "/run/isold/state.json";

/// The format version of the state file.
pub const STATE_VERSION: u32 = 1;

/// What an original value was, and how to put it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Original {
    /// A kernel attribute file (sysctl, sysfs, `/proc/irq`): its content as read, and the
    /// text that writes it back (they differ for choice files such as THP's
    /// `always [madvise] never`).
    Attr {
        /// Kernel path.
        path: String,
        /// The content as read, byte for byte.
        content: String,
        /// What to write to restore it.
        restore: String,
    },
    /// A configuration file the policy writes: its content, or `None` when it did not exist.
    File {
        /// Path (below the root).
        path: String,
        /// The original content.
        content: Option<String>,
        /// The outermost directory apply creates for it, removed again by restore (when
        /// empty).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        created_dir: Option<String>,
    },
    /// A thread's CPU affinity.
    Affinity {
        /// Process id.
        pid: i32,
        /// Thread id.
        tid: i32,
        /// Start time (ticks after boot): the thread is restored only if it still matches.
        starttime: u64,
        /// Thread name, for messages.
        comm: String,
        /// The original `Cpus_allowed_list`.
        cpus: String,
    },
    /// A thread's scheduling policy and priority.
    Sched {
        /// Process id.
        pid: i32,
        /// Thread id.
        tid: i32,
        /// Start time.
        starttime: u64,
        /// Thread name.
        comm: String,
        /// Policy number.
        policy: u32,
        /// Real-time priority.
        rt_priority: u32,
    },
    /// The `cgroup_partition` item: the cgroup directory and the workloads moved into it.
    Partition(super::partition::PartitionOriginal),
}

impl Original {
    /// Whether the value lives in the running kernel (void after a reboot), as opposed to a
    /// file on disk.
    pub fn is_runtime(&self) -> bool {
        !matches!(self, Original::File { .. })
    }
}

/// One recorded original.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Stable id of the target (`sysctl:vm.stat_interval`, `irq:24`, `task:812:1503`).
    pub id: String,
    /// The item it belongs to.
    pub item: String,
    /// Human-readable description.
    pub label: String,
    /// The original.
    pub original: Original,
}

/// The persisted state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// [`STATE_VERSION`].
    pub version: u32,
    /// `/proc/sys/kernel/random/boot_id` of the boot that recorded it.
    pub boot_id: String,
    /// The isolated CPUs of the policy applied.
    pub isolated: String,
    /// The configuration file applied.
    pub config: String,
    /// Originals in the order they were first recorded.
    pub entries: Vec<Entry>,
    /// Targets the kernel refused to change, with the reason (verify reports them as such).
    #[serde(default)]
    pub unchangeable: BTreeMap<String, String>,
}

/// The running kernel's boot id (empty when the file is missing, as in captured trees).
pub fn boot_id(root: &SysRoot) -> Result<String> {
    Ok(root
        .read_value_opt("/proc/sys/kernel/random/boot_id")?
        .unwrap_or_default())
}

impl State {
    /// Add the workloads of `moved` that the partition entry `id` does not list yet (same
    /// pid and start time); the ones it lists keep their recorded cgroup.
    pub fn add_moved(&mut self, id: &str, moved: &[super::partition::Moved]) {
        for e in &mut self.entries {
            if e.id != id {
                continue;
            }
            if let Original::Partition(p) = &mut e.original {
                for m in moved {
                    if !p
                        .moved
                        .iter()
                        .any(|r| r.pid == m.pid && r.starttime == m.starttime)
                    {
                        p.moved.push(m.clone());
                    }
                }
            }
        }
    }

    /// An empty state for this boot.
    pub fn new(boot_id: String, isolated: String, config: String) -> State {
        State {
            version: STATE_VERSION,
            boot_id,
            isolated,
            config,
            entries: Vec::new(),
            unchangeable: BTreeMap::new(),
        }
    }

    /// Load the state file; `Ok(None)` when there is none.
    pub fn load(path: &Path) -> Result<Option<State>> {
        let text = match fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(Error::Read {
                    path: path.into(),
                    source,
                })
            }
        };
        let st: State = serde_json::from_str(&text).map_err(|e| Error::Parse {
            path: path.into(),
            input: text.chars().take(200).collect(),
            reason: format!("not an isold state file: {e}"),
        })?;
        if st.version != STATE_VERSION {
            return Err(Error::Parse {
                path: path.into(),
                input: format!("version {}", st.version),
                reason: format!("state file version {} is not {STATE_VERSION}", st.version),
            });
        }
        Ok(Some(st))
    }

    /// Whether `id` has an original recorded.
    pub fn has(&self, id: &str) -> bool {
        self.entries.iter().any(|e| e.id == id)
    }

    /// Record an original unless one is recorded already. Returns whether it was added.
    pub fn record(&mut self, entry: Entry) -> bool {
        if self.has(&entry.id) {
            return false;
        }
        self.entries.push(entry);
        true
    }

    /// Persist atomically: temporary file, fsync, rename, fsync of the directory.
    pub fn save(&self, path: &Path) -> Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let werr = |p: &Path, source: std::io::Error| Error::Write {
            path: p.into(),
            data: "(isold state)".into(),
            source,
        };
        fs::create_dir_all(dir).map_err(|e| werr(dir, e))?;
        let tmp: PathBuf = dir.join(format!(
            ".{}.tmp",
            path.file_name()
                .map_or("state".into(), |n| n.to_string_lossy())
        ));
        let json = serde_json::to_string_pretty(self).expect("state serializes");
        let mut f = fs::File::create(&tmp).map_err(|e| werr(&tmp, e))?;
        f.write_all(json.as_bytes())
            .and_then(|()| f.write_all(b"\n"))
            .and_then(|()| f.sync_all())
            .map_err(|e| werr(&tmp, e))?;
        drop(f);
        fs::rename(&tmp, path).map_err(|e| werr(path, e))?;
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| werr(dir, e))
    }

    /// Remove the state file (after a complete restore).
    pub fn remove(path: &Path) -> Result<()> {
        match fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(Error::Write {
                path: path.into(),
                data: "(remove)".into(),
                source,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, content: &str) -> Entry {
        Entry {
            id: id.into(),
            item: "sysctl".into(),
            label: id.into(),
            original: Original::Attr {
                path: "/proc/sys/x".into(),
                content: content.into(),
                restore: content.trim_end().into(),
            },
        }
    }

    #[test]
    fn the_first_original_wins_and_survives_a_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/isold/state.json");
        let mut st = State::new("b".into(), "2-3".into(), "/etc/isold/isold.toml".into());
        assert!(st.record(entry("sysctl:x", "1\n")));
        assert!(
            !st.record(entry("sysctl:x", "0\n")),
            "an original is never replaced"
        );
        st.save(&path).unwrap();
        let back = State::load(&path).unwrap().unwrap();
        assert_eq!(back, st);
        assert_eq!(
            back.entries[0].original,
            Original::Attr {
                path: "/proc/sys/x".into(),
                content: "1\n".into(),
                restore: "1".into()
            }
        );
        assert!(!dir.path().join("run/isold/.state.json.tmp").exists());
        State::remove(&path).unwrap();
        assert_eq!(State::load(&path).unwrap(), None);
        State::remove(&path).unwrap();
    }

    #[test]
    fn a_foreign_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        fs::write(&path, "{\"version\": 9}").unwrap();
        let e = State::load(&path).unwrap_err().to_string();
        assert!(
            e.contains("state.json") && e.contains("not an isold state file"),
            "{e}"
        );
    }

    /// A read or remove error other than "no such file" is an error, not "no state".
    #[test]
    fn only_a_missing_file_means_no_state() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("state.json");
        assert!(State::load(&p).unwrap().is_none());
        State::remove(&p).unwrap();
        std::fs::create_dir_all(p.join("x")).unwrap();
        assert!(State::load(&p).is_err());
        assert!(State::remove(&p).is_err());
    }

    /// Workloads added to a partition entry later: a pid it lists with the same start time
    /// is the same process (kept as recorded); a reused pid is another one (added).
    #[test]
    fn later_workloads_are_added_once() {
        use crate::policy::partition::{Moved, PartitionOriginal};
        let moved = |pid, starttime, cgroup: &str| Moved {
            pid,
            starttime,
            comm: "w".into(),
            cgroup: cgroup.into(),
            threads: vec![],
        };
        let mut st = State::new("b".into(), "2-3".into(), "c".into());
        st.record(Entry {
            id: "cgroup_partition:/sys/fs/cgroup/iso".into(),
            item: "cgroup_partition".into(),
            label: "p".into(),
            original: Original::Partition(PartitionOriginal {
                dir: "/sys/fs/cgroup/iso".into(),
                created: true,
                enabled_cpuset: true,
                cpus: None,
                exclusive: None,
                partition: None,
                moved: vec![moved(10, 100, "/")],
            }),
        });
        st.add_moved(
            "cgroup_partition:/sys/fs/cgroup/iso",
            &[
                moved(10, 100, "/elsewhere"),
                moved(10, 200, "/a"),
                moved(11, 100, "/b"),
            ],
        );
        st.add_moved("other", &[moved(12, 1, "/c")]);
        let Original::Partition(p) = &st.entries[0].original else {
            panic!()
        };
        let got: Vec<(i32, u64, &str)> = p
            .moved
            .iter()
            .map(|m| (m.pid, m.starttime, m.cgroup.as_str()))
            .collect();
        assert_eq!(got, vec![(10, 100, "/"), (10, 200, "/a"), (11, 100, "/b")]);
    }
}
