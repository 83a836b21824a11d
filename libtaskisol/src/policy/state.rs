//! The state file: every original value, persisted before it is first overwritten.
//!
//! Written atomically (temporary file, fsync, rename, fsync of the directory), so a crash or
//! `kill -9` at any point leaves either the previous or the new state, never a torn one. An
//! entry, once recorded, is never replaced: an apply after an interrupted one keeps the
//! value that was there before the first apply.
//!
//! Entries recorded one at a time (a daemon narrowing each new task) go to a journal next to
//! it instead, appended and fdatasync'd: the cost of recording stays constant however many
//! originals are kept. A line cut by a crash is ignored (its value was not changed yet: the
//! write comes after the append); the next whole write folds the journal in.

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

/// What this process last read or wrote: the state file's text, the part of the journal
/// merged, and the state they make. A daemon that applies to one thread at a time reads both
/// files before each change (another isold command may have written them) but parses only
/// what it has not seen.
struct Last {
    path: PathBuf,
    main: String,
    journal: String,
    state: State,
}

static LAST: std::sync::Mutex<Option<Last>> = std::sync::Mutex::new(None);

fn remember(path: &Path, main: String, journal: String, st: &State) {
    if let Ok(mut last) = LAST.lock() {
        *last = Some(Last {
            path: path.to_path_buf(),
            main,
            journal,
            state: st.clone(),
        });
    }
}

/// The journal of a state file: entries recorded since its last whole write, one JSON line
/// each (`state.json` -> `state.journal`).
pub fn journal_path(path: &Path) -> PathBuf {
    path.with_extension("journal")
}

/// Past this size the journal is folded into the state file by a whole write.
pub const JOURNAL_MAX: u64 = 1 << 20;

/// Append `entries` to the journal of the state file at `path`: one write of whole lines and
/// one fdatasync, whatever the number of entries already recorded. `Ok(false)`, and nothing
/// written, when the journal has grown past 1 MiB and should be folded into a whole write
/// ([`State::save`]). The caller holds the lock and has checked that no entry's id is
/// recorded yet.
pub fn append_entries(path: &Path, entries: &[Entry]) -> Result<bool> {
    let jpath = journal_path(path);
    if fs::metadata(&jpath).map_or(0, |m| m.len()) > JOURNAL_MAX {
        return Ok(false);
    }
    let mut lines = String::new();
    for e in entries {
        lines.push_str(&serde_json::to_string(e).expect("entry serializes"));
        lines.push('\n');
    }
    let werr = |source| Error::Write {
        path: jpath.clone(),
        data: "(isold journal)".into(),
        source,
    };
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&jpath)
        .map_err(werr)?;
    f.write_all(lines.as_bytes())
        .and_then(|()| f.sync_data())
        .map_err(werr)?;
    Ok(true)
}

fn read_opt(path: &Path) -> Result<Option<String>> {
    match fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Read {
            path: path.into(),
            source,
        }),
    }
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

    /// Load the state file with its journal; `Ok(None)` when there is none.
    pub fn load(path: &Path) -> Result<Option<State>> {
        let Some(main) = read_opt(path)? else {
            return Ok(None);
        };
        let jpath = journal_path(path);
        let journal = read_opt(&jpath)?.unwrap_or_default();
        // Start from what was parsed before when the state file reads the same and the
        // journal only grew since (the content is the key: the path adds nothing).
        let cached = LAST.lock().ok().and_then(|last| {
            let l = last.as_ref()?;
            (l.main == main && journal.starts_with(&l.journal))
                .then(|| (l.state.clone(), l.journal.len()))
        });
        let (mut st, from) = match cached {
            Some(c) => c,
            None => (Self::parse(path, &main)?, 0),
        };
        // Only whole lines: a line cut by a crash in the middle of its write is not an entry.
        let tail = journal.rsplit('\n').next().map_or(0, str::len);
        let whole = (journal.len() - tail).max(from);
        for (n, line) in journal[from..whole].lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let e: Entry = serde_json::from_str(line).map_err(|e| Error::Parse {
                path: jpath.clone(),
                input: line.chars().take(200).collect(),
                reason: format!(
                    "not an isold journal entry (line {} from byte {from}): {e}",
                    n + 1
                ),
            })?;
            st.record(e);
        }
        remember(path, main, journal[..whole].to_string(), &st);
        Ok(Some(st))
    }

    /// The targets recorded as not changeable in the state file at `path` (empty without
    /// one): what verify needs, without a copy of every entry when the file is the one last
    /// read or written.
    pub fn unchangeable_of(path: &Path) -> Result<BTreeMap<String, String>> {
        let Some(main) = read_opt(path)? else {
            return Ok(BTreeMap::new());
        };
        if let Ok(last) = LAST.lock() {
            if let Some(l) = last.as_ref().filter(|l| l.main == main) {
                // The journal only ever adds entries, never unchangeable marks.
                return Ok(l.state.unchangeable.clone());
            }
        }
        Ok(Self::load(path)?
            .map(|s| s.unchangeable)
            .unwrap_or_default())
    }

    fn parse(path: &Path, text: &str) -> Result<State> {
        let st: State = serde_json::from_str(text).map_err(|e| Error::Parse {
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
        Ok(st)
    }

    /// Persist `added`, entries already recorded in `self`, by appending them to the journal
    /// of the state file at `path` (see [`append_entries`]); a whole write instead when the
    /// journal is due to be folded in or the file does not exist.
    pub fn append(&self, path: &Path, added: &[Entry]) -> Result<()> {
        if added.is_empty() {
            return Ok(());
        }
        if !path.exists() || !append_entries(path, added)? {
            return self.save(path);
        }
        if let Ok(mut last) = LAST.lock() {
            if let Some(l) = last.as_mut().filter(|l| l.path == path) {
                l.state = self.clone();
                for e in added {
                    l.journal
                        .push_str(&serde_json::to_string(e).expect("entry serializes"));
                    l.journal.push('\n');
                }
            } else {
                *last = None;
            }
        }
        Ok(())
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
        let mut json = serde_json::to_string_pretty(self).expect("state serializes");
        json.push('\n');
        let mut f = fs::File::create(&tmp).map_err(|e| werr(&tmp, e))?;
        f.write_all(json.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| werr(&tmp, e))?;
        drop(f);
        fs::rename(&tmp, path).map_err(|e| werr(path, e))?;
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| werr(dir, e))?;
        // Everything the journal held is in the file now (a crash before this removal leaves
        // entries in both: loading records each id once).
        let jpath = journal_path(path);
        match fs::remove_file(&jpath) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(werr(&jpath, e)),
        }
        remember(path, json, String::new(), self);
        Ok(())
    }

    /// Remove the state file and its journal (after a complete restore).
    pub fn remove(path: &Path) -> Result<()> {
        for p in [path.to_path_buf(), journal_path(path)] {
            match fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(Error::Write {
                        path: p,
                        data: "(remove)".into(),
                        source,
                    })
                }
            }
        }
        if let Ok(mut last) = LAST.lock() {
            *last = None;
        }
        Ok(())
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

    /// Entries recorded one at a time go to the journal; loading merges them, a line cut by a
    /// crash is not an entry, a whole write folds the journal in and removes it.
    #[test]
    fn the_journal_holds_appended_originals_until_a_whole_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let jpath = journal_path(&path);
        assert_eq!(jpath, dir.path().join("state.journal"));
        let mut st = State::new("b".into(), "2-3".into(), "c".into());
        st.record(entry("sysctl:a", "1\n"));
        st.save(&path).unwrap();
        let main = fs::read_to_string(&path).unwrap();

        assert!(st.record(entry("sysctl:b", "2\n")));
        st.append(&path, &st.entries[1..]).unwrap();
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            main,
            "the state file is not rewritten"
        );
        assert_eq!(fs::read_to_string(&jpath).unwrap().lines().count(), 1);
        assert_eq!(State::load(&path).unwrap().unwrap(), st);

        // Another process appends (append_entries), then one of its lines is cut by a crash.
        let c = entry("sysctl:c", "3\n");
        assert!(append_entries(&path, std::slice::from_ref(&c)).unwrap());
        let mut f = fs::OpenOptions::new().append(true).open(&jpath).unwrap();
        f.write_all(b"{\"id\":\"sysctl:d\",\"it").unwrap();
        let back = State::load(&path).unwrap().unwrap();
        let ids: Vec<&str> = back.entries.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["sysctl:a", "sysctl:b", "sysctl:c"]);
        // A journal line for an id already recorded never replaces the first original.
        let again = entry("sysctl:a", "9\n");
        fs::write(
            &jpath,
            format!(
                "{}\n{}\n",
                serde_json::to_string(&again).unwrap(),
                serde_json::to_string(&c).unwrap()
            ),
        )
        .unwrap();
        let back = State::load(&path).unwrap().unwrap();
        assert_eq!(back.entries[0], entry("sysctl:a", "1\n"));
        assert_eq!(back.entries.len(), 2);

        // A broken line in the middle is an error naming the journal.
        fs::write(&jpath, "not json\n{}\n").unwrap();
        let e = State::load(&path).unwrap_err().to_string();
        assert!(e.contains("state.journal") && e.contains("line 1"), "{e}");

        // A whole write folds the journal in; remove takes both.
        fs::remove_file(&jpath).unwrap();
        st.append(&path, &st.entries[1..]).unwrap();
        assert!(jpath.exists());
        st.save(&path).unwrap();
        assert!(!jpath.exists());
        assert_eq!(State::load(&path).unwrap().unwrap(), st);
        st.append(&path, &st.entries[1..]).unwrap();
        State::remove(&path).unwrap();
        assert!(!jpath.exists() && !path.exists());
        assert_eq!(State::load(&path).unwrap(), None);
    }

    fn with_unchangeable(id: &str, why: &str, e: Entry) -> State {
        let mut st = State::new("b".into(), "2-3".into(), "c".into());
        st.record(e);
        st.unchangeable.insert(id.into(), why.into());
        st
    }

    /// What was read last is kept to save a parse, keyed by the file's content: a state file
    /// another process rewrote is read anew, entries and unchangeable marks alike.
    #[test]
    fn a_state_file_rewritten_elsewhere_is_read_anew() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let a = with_unchangeable("irq:0", "EPERM", entry("sysctl:a", "1\n"));
        a.save(&path).unwrap();
        assert_eq!(State::load(&path).unwrap().unwrap(), a);
        assert_eq!(State::unchangeable_of(&path).unwrap(), a.unchangeable);
        // Another process's write (this one's save would be remembered).
        let b = with_unchangeable("irq:2", "EIO", entry("sysctl:b", "2\n"));
        fs::write(&path, serde_json::to_string(&b).unwrap()).unwrap();
        assert_eq!(State::unchangeable_of(&path).unwrap(), b.unchangeable);
        assert_eq!(State::load(&path).unwrap().unwrap(), b);
    }

    /// An append to one state file never passes for another file's content.
    #[test]
    fn appending_to_one_state_file_leaves_another_as_it_reads() {
        let dir = tempfile::tempdir().unwrap();
        let (pa, pb) = (dir.path().join("a.json"), dir.path().join("b.json"));
        let a = with_unchangeable("irq:0", "EPERM", entry("sysctl:a", "1\n"));
        a.save(&pa).unwrap();
        let mut b = with_unchangeable("irq:2", "EIO", entry("sysctl:b", "2\n"));
        b.save(&pb).unwrap();
        assert_eq!(State::load(&pa).unwrap().unwrap(), a);
        b.record(entry("sysctl:c", "3\n"));
        b.append(&pb, &[entry("sysctl:c", "3\n")]).unwrap();
        assert_eq!(State::unchangeable_of(&pa).unwrap(), a.unchangeable);
        assert_eq!(State::load(&pa).unwrap().unwrap(), a);
        assert_eq!(State::load(&pb).unwrap().unwrap(), b);
    }

    /// The journal takes appends up to JOURNAL_MAX bytes; past it, the caller folds it in.
    #[test]
    fn the_journal_limit_is_inclusive() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let j = fs::File::create(journal_path(&path)).unwrap();
        j.set_len(JOURNAL_MAX).unwrap();
        assert!(append_entries(&path, &[entry("sysctl:a", "1\n")]).unwrap());
        j.set_len(JOURNAL_MAX + 1).unwrap();
        assert!(!append_entries(&path, &[entry("sysctl:b", "1\n")]).unwrap());
        assert_eq!(
            fs::metadata(journal_path(&path)).unwrap().len(),
            JOURNAL_MAX + 1
        );
    }

    #[test]
    fn a_journal_past_its_limit_is_folded_by_a_whole_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let mut st = State::new("b".into(), "2-3".into(), "c".into());
        st.save(&path).unwrap();
        fs::write(journal_path(&path), vec![b'\n'; JOURNAL_MAX as usize + 1]).unwrap();
        assert!(!append_entries(&path, &[entry("x", "1\n")]).unwrap());
        st.record(entry("x", "1\n"));
        st.append(&path, &st.entries.clone()).unwrap();
        assert!(!journal_path(&path).exists(), "folded into state.json");
        assert_eq!(State::load(&path).unwrap().unwrap(), st);
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
