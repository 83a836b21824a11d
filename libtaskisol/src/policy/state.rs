//! The state file: every original value, persisted before it is first overwritten.
//!
//! Written atomically (temporary file, fsync, rename, fsync of the directory), so a crash or
//! `kill -9` at any point leaves either the previous or the new state, never a torn one. An
//! entry, once recorded, is never replaced: an apply after an interrupted one keeps the
//! value that was there before the first apply.
//!
//! Entries recorded one at a time (a daemon narrowing each new task) go to a journal next to
//! it instead, appended and fdatasync'd: the cost of recording stays constant however many
//! originals are kept. Each line carries its entry's length and CRC-32 (`journal_line`). A
//! last line cut by a crash is ignored (its value was not changed yet: the write comes after
//! the append); a whole line that is not an entry, or whose mark does not match, is set aside
//! for the administrator (`state.journal.bad`) and every other line is used. The next whole
//! write folds the journal in.

use std::cell::{Cell, OnceCell};
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::durable;
pub use super::journal::{
    append_entries, journal_path, set_aside_kept, set_aside_path, JOURNAL_MAX,
};
pub(crate) use super::journal::{ends_with_newline, journal_line, open_journal};
use super::journal::{journal_entries, keep_set_aside};

use crate::error::{Error, Result};
use crate::sysroot::SysRoot;

/// The default state file of values in the running kernel (below the root): it dies with the
/// boot, as they do.
pub const DEFAULT_STATE: &str = "/run/isold/state.json";

/// The default state file of the files on disk isold writes (below the root): it survives a
/// reboot, as they do.
pub const DEFAULT_PERSISTENT_STATE: &str = "/var/lib/isold/state.json";

/// Where isold keeps the originals. Values of the running kernel (sysctls, IRQs, tasks, the
/// partition) go to `runtime`, on a file system that dies with the boot, as they do; files on
/// disk (modprobe.d, irqbalance's defaults, systemd's and GRUB's drop-ins) go to
/// `persistent`, which survives reboots, so that `isold restore` after any number of them
/// still removes exactly what isold added. The lock is next to `runtime`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateFiles {
    /// The runtime state file (`/run/isold/state.json`).
    pub runtime: PathBuf,
    /// The persistent state file (`/var/lib/isold/state.json`).
    pub persistent: PathBuf,
}

impl StateFiles {
    /// These two files.
    pub fn new(runtime: impl Into<PathBuf>, persistent: impl Into<PathBuf>) -> StateFiles {
        StateFiles {
            runtime: runtime.into(),
            persistent: persistent.into(),
        }
    }

    /// The default files below `root`.
    pub fn default_for(root: &SysRoot) -> StateFiles {
        StateFiles::new(
            root.path(DEFAULT_STATE),
            root.path(DEFAULT_PERSISTENT_STATE),
        )
    }

    /// Both, for messages.
    pub fn shown(&self) -> String {
        format!(
            "{} and {}",
            self.runtime.display(),
            self.persistent.display()
        )
    }
}

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
    /// Restore undoes isold's own lines only (see [`super::files::undo_edit`]).
    File {
        /// Path (below the root).
        path: String,
        /// The original content.
        content: Option<String>,
        /// The outermost directory apply creates for it, removed again by restore (when
        /// empty).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        created_dir: Option<String>,
        /// What isold last wrote (recorded before the write): restore finds isold's lines by
        /// it. `None` in state files before 3533f0d: restore then finds isold's lines by the forms its
        /// item writes (`engine::written_before_0_2`), never puts the original back whole over
        /// the administrator's later lines.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        written: Option<String>,
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
        /// The CPUs isold took it off (the isolated ones it had), grown by a later narrowing
        /// and shrunk by a give-back: isold never puts a thread back on one of them, so a
        /// thread found on one at restore was pinned there by its owner since (libvirt's
        /// `<vcpupin>`, DPDK's main lcore, `taskset -p`) and keeps its pin. `None` in state
        /// files before it existed: restore puts the original back whatever the thread has.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        taken_off: Option<String>,
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
    /// A thread the stall guard lent a slice (SCHED_DEADLINE, or SCHED_FIFO where the
    /// kernel refuses a deadline task): its own policy, recorded before the loan, written
    /// back when the loan ends, by `isold restore` and at the next start after a crash.
    Loan {
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
        /// Nice value.
        nice: i32,
        /// Whether it had reset-on-fork.
        reset_on_fork: bool,
    },
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
    /// Originals in the order they were first recorded. Every pass over them, in this
    /// module too, goes through [`State::entries`] or [`State::entries_mut`] (or the index),
    /// so that [`entries_examined`] counts it.
    entries: Vec<Entry>,
    /// Targets the kernel refused to change, with the reason (verify reports them as such).
    #[serde(default)]
    pub unchangeable: BTreeMap<String, String>,
    /// Whole journal lines that are not entries (a write cut short by a full disk, a
    /// corrupt line): left out of the state, and moved to `<journal>.bad` for the
    /// administrator at the next whole write.
    #[serde(skip)]
    pub set_aside: Vec<String>,
    /// Where each id is in `entries`: made on the first lookup, kept by [`State::record`],
    /// dropped by [`State::entries_mut`]. Tens of thousands of originals (a thread each) are
    /// looked up in constant time, so recording them all stays linear.
    #[serde(skip)]
    index: Index,
}

/// The position of each id in [`State::entries`] (the first, should one repeat); a cache that
/// takes no part in comparisons and is not copied by a clone (made again if the copy is
/// looked up: most copies are kept to compare or to save, and a daemon keeps one).
#[derive(Debug, Default)]
struct Index(OnceCell<HashMap<String, usize>>);

impl Clone for Index {
    fn clone(&self) -> Index {
        Index::default()
    }
}

impl PartialEq for Index {
    fn eq(&self, _: &Index) -> bool {
        true
    }
}

impl Eq for Index {}

thread_local! {
    static EXAMINED: Cell<u64> = const { Cell::new(0) };
}

/// How many entries this thread has been handed by [`State::entries`] and
/// [`State::entries_mut`] (each call counts the entries it gives): every pass over the
/// originals goes through them, so an apply that looked at every original for each target
/// would show here as quadratic growth. The scale tests (tests/tests/scale.rs) compare it
/// between sizes; operations, not time.
pub fn entries_examined() -> u64 {
    EXAMINED.with(Cell::get)
}

fn examined(n: usize) {
    EXAMINED.with(|c| c.set(c.get() + n as u64));
}

/// What this process last read or wrote: fingerprints of the state file's text and of the
/// part of the journal merged, and the state they make. A daemon that applies to one thread
/// at a time reads both files before each change (another isold command may have written
/// them) but parses only what it has not seen. Fingerprints, not copies of the texts: with
/// 50,000 originals the state file is 10 MB, which a daemon need not keep.
struct Last {
    path: PathBuf,
    main: Fingerprint,
    journal: Stream,
    state: State,
}

/// The length and SipHash of a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    len: usize,
    hash: u64,
}

fn fingerprint(text: &str) -> Fingerprint {
    Stream::new(text).fingerprint()
}

/// A fingerprint that text can be added to (the journal grows by appends).
#[derive(Clone)]
struct Stream {
    len: usize,
    hasher: std::collections::hash_map::DefaultHasher,
}

impl Stream {
    fn new(text: &str) -> Stream {
        let mut s = Stream {
            len: 0,
            hasher: Default::default(),
        };
        s.add(text);
        s
    }

    fn add(&mut self, text: &str) {
        use std::hash::Hasher;
        self.hasher.write(text.as_bytes());
        self.len += text.len();
    }

    fn fingerprint(&self) -> Fingerprint {
        use std::hash::Hasher;
        Fingerprint {
            len: self.len,
            hash: self.hasher.finish(),
        }
    }
}

static LAST: std::sync::Mutex<Option<Last>> = std::sync::Mutex::new(None);

/// A state file's text that does not parse, said with what the admin can check.
fn state_error(path: &Path, text: &str, e: &serde_json::Error) -> Error {
    Error::State {
        path: path.into(),
        reason: if e.is_eof() {
            format!("it ends early ({} bytes: truncated?): {e}", text.len())
        } else {
            e.to_string()
        },
    }
}

fn json(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// Drop this process's copy of the state file last read or written (the next load parses the
/// file). A daemon calls it once a pass over every thread is done: with tens of thousands of
/// originals the copy is the largest thing it holds, and its next pass reads both state
/// files anyway.
pub fn drop_cache() {
    if let Ok(mut last) = LAST.lock() {
        *last = None;
    }
}

fn remember(path: &Path, main: &str, journal: &str, st: &State) {
    if let Ok(mut last) = LAST.lock() {
        *last = Some(Last {
            path: path.to_path_buf(),
            main: fingerprint(main),
            journal: Stream::new(journal),
            state: st.clone(),
        });
    }
}

/// Forget what this process read or wrote last, as a new process after a crash would have.
#[cfg(feature = "fault-injection")]
pub(crate) fn forget() {
    if let Ok(mut last) = LAST.lock() {
        *last = None;
    }
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
        if let Some(Entry {
            original: Original::Partition(p),
            ..
        }) = self.get_mut(id)
        {
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

    /// An empty state for this boot.
    pub fn new(boot_id: String, isolated: String, config: String) -> State {
        State {
            version: STATE_VERSION,
            boot_id,
            isolated,
            config,
            entries: Vec::new(),
            unchangeable: BTreeMap::new(),
            set_aside: Vec::new(),
            index: Index::default(),
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
            let seen = l.journal.fingerprint();
            (l.main == fingerprint(&main)
                && journal.is_char_boundary(seen.len)
                && journal.get(..seen.len).map(fingerprint) == Some(seen))
            .then(|| (l.state.clone(), seen.len))
        });
        let (mut st, from) = match cached {
            Some(c) => c,
            None => (Self::parse(path, &main)?, 0),
        };
        // Only whole lines: a line cut by a crash in the middle of its write is not an entry.
        let tail = journal.rsplit('\n').next().map_or(0, str::len);
        let whole = (journal.len() - tail).max(from);
        // A whole line that is not an entry (an append cut short, the next one on a line of
        // its own since) is set aside: what comes before and after it is used.
        for line in journal[from..whole].lines() {
            if line.trim().is_empty() {
                continue;
            }
            for part in journal_entries(line) {
                match part {
                    Ok(e) => {
                        st.record(e);
                    }
                    Err(bad) => st.set_aside.push(bad.to_string()),
                }
            }
        }
        remember(path, &main, &journal[..whole], &st);
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
            if let Some(l) = last.as_ref().filter(|l| l.main == fingerprint(&main)) {
                // The journal only ever adds entries, never unchangeable marks.
                return Ok(l.state.unchangeable.clone());
            }
        }
        // Only the marks: the entries (an original a thread on a big machine) are read past,
        // not kept, so that a reader of marks (verify; the daemon's scan thread, twice a
        // second) holds no copy of them.
        #[derive(Deserialize)]
        struct Marks {
            version: u32,
            #[serde(default)]
            unchangeable: BTreeMap<String, String>,
        }
        let m: Marks = serde_json::from_str(&main).map_err(|e| state_error(path, &main, &e))?;
        if m.version != STATE_VERSION {
            return Err(Error::State {
                path: path.into(),
                reason: format!(
                    "its format is version {}, this isold reads version {STATE_VERSION}",
                    m.version
                ),
            });
        }
        Ok(m.unchangeable)
    }

    fn parse(path: &Path, text: &str) -> Result<State> {
        let st: State = serde_json::from_str(text).map_err(|e| state_error(path, text, &e))?;
        if st.version != STATE_VERSION {
            return Err(Error::State {
                path: path.into(),
                reason: format!(
                    "its format is version {}, this isold reads version {STATE_VERSION}",
                    st.version
                ),
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
                    l.journal.add(&journal_line(e));
                }
            } else {
                *last = None;
            }
        }
        Ok(())
    }

    /// The originals, in the order they were first recorded.
    pub fn entries(&self) -> &[Entry] {
        examined(self.entries.len());
        &self.entries
    }

    /// The originals to change in place (the id lookups are made again afterwards).
    pub fn entries_mut(&mut self) -> &mut Vec<Entry> {
        examined(self.entries.len());
        self.index = Index::default();
        &mut self.entries
    }

    fn index(&self) -> &HashMap<String, usize> {
        self.index.0.get_or_init(|| {
            examined(self.entries.len());
            let mut m = HashMap::with_capacity(self.entries.len());
            for (i, e) in self.entries.iter().enumerate() {
                m.entry(e.id.clone()).or_insert(i);
            }
            m
        })
    }

    /// Whether `id` has an original recorded.
    pub fn has(&self, id: &str) -> bool {
        self.index().contains_key(id)
    }

    /// The original recorded for `id`.
    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.index().get(id).map(|&i| &self.entries[i])
    }

    /// The original recorded for `id`, to change in place.
    pub fn get_mut(&mut self, id: &str) -> Option<&mut Entry> {
        let i = *self.index().get(id)?;
        Some(&mut self.entries[i])
    }

    /// Record an original unless one is recorded already. Returns whether it was added.
    pub fn record(&mut self, entry: Entry) -> bool {
        if self.has(&entry.id) {
            return false;
        }
        if let Some(m) = self.index.0.get_mut() {
            m.insert(entry.id.clone(), self.entries.len());
        }
        self.entries.push(entry);
        true
    }

    /// The state file's text: JSON with one original a line (an admin can still read and
    /// grep it; indenting each field, as a pretty printer does, made it 60 % larger).
    fn to_text(&self) -> String {
        let entries = self.entries();
        let mut out = Vec::with_capacity(256 + entries.len() * 200);
        let head = |k: &str, v: &str| format!("  {}: {},\n", json(k), json(v));
        out.extend_from_slice(b"{\n");
        out.extend_from_slice(format!("  \"version\": {},\n", self.version).as_bytes());
        out.extend_from_slice(head("boot_id", &self.boot_id).as_bytes());
        out.extend_from_slice(head("isolated", &self.isolated).as_bytes());
        out.extend_from_slice(head("config", &self.config).as_bytes());
        out.extend_from_slice(b"  \"entries\": [");
        for (i, e) in entries.iter().enumerate() {
            out.extend_from_slice(if i == 0 { b"\n    " } else { b",\n    " });
            serde_json::to_writer(&mut out, e).expect("entry serializes");
        }
        out.extend_from_slice(if entries.is_empty() {
            b"],\n"
        } else {
            b"\n  ],\n"
        });
        out.extend_from_slice(b"  \"unchangeable\": ");
        serde_json::to_writer(&mut out, &self.unchangeable).expect("map serializes");
        out.extend_from_slice(b"\n}\n");
        String::from_utf8(out).expect("JSON is UTF-8")
    }

    /// Persist atomically: temporary file, fsync, rename, fsync of the directory.
    pub fn save(&self, path: &Path) -> Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let werr = |p: &Path, source: std::io::Error| Error::Write {
            path: p.into(),
            data: "(isold state)".into(),
            source,
        };
        super::files::private_dir(dir).map_err(|e| werr(dir, e))?;
        let tmp: PathBuf = dir.join(format!(
            ".{}.tmp",
            path.file_name()
                .map_or("state".into(), |n| n.to_string_lossy())
        ));
        let json = self.to_text();
        // Exclusively: a symlink left under the temporary name is removed, never followed.
        let mut f = super::files::create_exclusive(&tmp, 0o600).map_err(|e| werr(&tmp, e))?;
        let written = durable::write(&mut f, json.as_bytes())
            .and_then(|()| durable::sync_all(&f))
            .map_err(|e| werr(&tmp, e))
            .and_then(|()| durable::rename(&tmp, path).map_err(|e| werr(path, e)));
        if let Err(e) = written {
            // What a full directory took is given back.
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        drop(f);
        fs::File::open(dir)
            .and_then(|d| durable::sync_all(&d))
            .map_err(|e| werr(dir, e))?;
        // Everything the journal held is in the file now (a crash before this removal leaves
        // entries in both: loading records each id once); what was no entry is kept aside.
        let jpath = journal_path(path);
        keep_set_aside(path, &self.set_aside)?;
        match fs::remove_file(&jpath) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(werr(&jpath, e)),
        }
        if self.set_aside.is_empty() {
            remember(path, &json, "", self);
        } else {
            let mut kept = self.clone();
            kept.set_aside.clear();
            remember(path, &json, "", &kept);
        }
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

impl Entry {
    /// Whether this entry is one isold could have recorded: the path it restores follows
    /// from its kind and id (never taken from the file as written), the item is the id's,
    /// the text restore writes is the content recorded, a thread's ids agree. `Err` says
    /// what is wrong; such an entry is never written back (a state file edited to say
    /// `/proc/sys/../../../etc/shadow` writes nothing there).
    pub fn check(&self) -> std::result::Result<(), String> {
        use super::paths;
        let (kind, key) = self.id.split_once(':').unwrap_or((self.id.as_str(), ""));
        // A thread's entry is named by its kind, tid and start time: a pid reused since is
        // never mistaken for it.
        let thread = |kind: &str, pid: i32, tid: i32, starttime: u64| {
            if self.id != format!("{kind}:{tid}:{starttime}") || pid <= 0 || tid <= 0 {
                return Err(format!(
                    "thread {pid}/{tid} started at {starttime} is not the thread of {}",
                    self.id
                ));
            }
            Ok(())
        };
        let sched = |policy: u32, rt_priority: u32| {
            crate::sched::SchedPolicy::from_stat(policy, rt_priority)
                .map(drop)
                .ok_or_else(|| format!("policy {policy} priority {rt_priority}"))
        };
        let item = |want: &str| -> std::result::Result<(), String> {
            if self.item == want {
                Ok(())
            } else {
                Err(format!(
                    "item {:?} is not the item of {} ({want})",
                    self.item, self.id
                ))
            }
        };
        let cpu_of = |key: &str| {
            key.strip_prefix("cpu")
                .and_then(|n| n.parse::<usize>().ok())
        };
        match &self.original {
            Original::Attr {
                path,
                content,
                restore,
            } => {
                let (it, want) = match (kind, key) {
                    ("sysctl", name) if !name.is_empty() => (
                        "sysctl",
                        crate::sysctl::path_of(name).map_err(|e| e.to_string())?,
                    ),
                    ("printk", "") => ("printk", paths::PRINTK.to_string()),
                    ("thp", "") => ("thp", paths::THP_ENABLED.to_string()),
                    ("ksm", "") => ("ksm", paths::KSM_RUN.to_string()),
                    ("machinecheck", n)
                        if n.strip_prefix("machinecheck")
                            .is_some_and(|d| d.parse::<u32>().is_ok()) =>
                    {
                        (
                            "machinecheck",
                            format!("{}/{n}/ignore_ce", paths::MACHINECHECK_DIR),
                        )
                    }
                    ("workqueue", "") => ("workqueue", crate::workqueue::unbound_cpumask_path()),
                    ("workqueue", q)
                        if !q.contains('/') && q != "." && q != ".." && !q.is_empty() =>
                    {
                        ("workqueue", crate::workqueue::queue_cpumask_path(q))
                    }
                    ("pm_qos", k) if cpu_of(k).is_some() => (
                        "pm_qos",
                        crate::power::resume_latency_path(cpu_of(k).unwrap_or_default()),
                    ),
                    ("cpufreq", k) if cpu_of(k).is_some() => (
                        "cpufreq",
                        crate::power::governor_path(cpu_of(k).unwrap_or_default()),
                    ),
                    ("irq", "default") => ("irq_affinity", paths::DEFAULT_SMP_AFFINITY.to_string()),
                    ("irq", n) if n.parse::<u32>().is_ok() => (
                        "irq_affinity",
                        crate::irq::irq_file(n.parse().unwrap_or_default(), "smp_affinity_list"),
                    ),
                    _ => return Err(format!("{} names no kernel value isold sets", self.id)),
                };
                if *path != want {
                    return Err(format!("{path} is not the file of {} ({want})", self.id));
                }
                item(it)?;
                let plain = content.trim_end_matches('\n');
                if restore != plain && restore != super::plan::choice_of(content) {
                    return Err(format!(
                        "the text to write back ({restore:?}) is not the content recorded ({plain:?})"
                    ));
                }
                Ok(())
            }
            Original::File {
                path, created_dir, ..
            } => {
                if kind != "file" || key != path {
                    return Err(format!("{path} is not the file of {}", self.id));
                }
                let Some(it) = paths::owned_item(path) else {
                    return Err(format!("{path} is not a file isold writes"));
                };
                item(it)?;
                if let Some(d) = created_dir {
                    let d = Path::new(d);
                    let inside = Path::new(path).parent().is_some_and(|p| p.starts_with(d));
                    // Never the root directory (restore removes only empty directories).
                    if !inside || d.components().count() < 2 {
                        return Err(format!(
                            "{} is not a directory apply could have made for {path}",
                            d.display()
                        ));
                    }
                }
                Ok(())
            }
            Original::Affinity {
                pid,
                tid,
                starttime,
                cpus,
                taken_off,
                ..
            } => {
                thread("task", *pid, *tid, *starttime)?;
                item("tasks")?;
                for list in std::iter::once(cpus).chain(taken_off) {
                    crate::cpuset::CpuSet::parse_list(list)
                        .map_err(|e| format!("CPUs {list:?}: {e}"))?;
                }
                Ok(())
            }
            Original::Sched {
                pid,
                tid,
                starttime,
                policy,
                rt_priority,
                ..
            } => {
                thread("sched", *pid, *tid, *starttime)?;
                item("kthread_priority")?;
                sched(*policy, *rt_priority)
            }
            Original::Loan {
                pid,
                tid,
                starttime,
                policy,
                rt_priority,
                nice,
                ..
            } => {
                thread("loan", *pid, *tid, *starttime)?;
                item("stalls")?;
                if !(-20..=19).contains(nice) {
                    return Err(format!("nice {nice}"));
                }
                sched(*policy, *rt_priority)
            }
            Original::Partition(p) => {
                if kind != "cgroup_partition"
                    || key != p.dir
                    || !super::paths::valid_partition_dir(&p.dir)
                {
                    return Err(format!(
                        "{} is not the partition directory of {}",
                        p.dir, self.id
                    ));
                }
                item("cgroup_partition")?;
                for m in &p.moved {
                    let cg_ok = m.cgroup.starts_with('/')
                        && !m.cgroup.split('/').any(|c| c == "." || c == "..");
                    if m.pid <= 0 || !cg_ok {
                        return Err(format!(
                            "workload {} in cgroup {:?} is not one isold could have moved",
                            m.pid, m.cgroup
                        ));
                    }
                }
                Ok(())
            }
        }
    }
}

/// Both state files, loaded as one [`State`], and written back split: what a command works
/// on. The runtime file is this boot's or none (one of an earlier boot keeps only its files'
/// originals, which move to the persistent file); the persistent file holds only files.
/// Entries that fail [`Entry::check`] are set aside in `rejected` and dropped from both
/// files at the next write.
#[derive(Debug)]
pub(crate) struct Ledger {
    files: StateFiles,
    /// Every usable entry, the runtime file's first.
    pub state: State,
    /// The runtime and persistent parts as they are on disk (`None`: no file).
    runtime_disk: Option<State>,
    persistent_disk: Option<State>,
    /// Entries refused by [`Entry::check`], with why.
    pub rejected: Vec<(Entry, String)>,
    /// The runtime file was from an earlier boot.
    pub earlier_boot: bool,
}

impl Ledger {
    /// Load both files (`isolated` and `config` head a new runtime file).
    pub fn load(
        files: &StateFiles,
        root: &SysRoot,
        isolated: String,
        config: String,
    ) -> Result<Ledger> {
        let boot = boot_id(root)?;
        let runtime_disk = State::load(&files.runtime)?;
        let persistent_disk = State::load(&files.persistent)?;
        let mut earlier_boot = false;
        let mut state = match &runtime_disk {
            Some(s) if s.boot_id == boot => s.clone(),
            Some(s) => {
                earlier_boot = true;
                let mut fresh = State::new(boot.clone(), isolated, config);
                fresh.set_aside.clone_from(&s.set_aside);
                // Files on disk outlive the boot (state files of isold 0.1 kept them here).
                *fresh.entries_mut() = s
                    .entries()
                    .iter()
                    .filter(|e| !e.original.is_runtime())
                    .cloned()
                    .collect();
                fresh
            }
            None => State::new(boot.clone(), isolated, config),
        };
        let mut rejected = Vec::new();
        if let Some(p) = &persistent_disk {
            for e in p.entries() {
                if e.original.is_runtime() {
                    rejected.push((
                        e.clone(),
                        format!(
                            "a value of the running kernel in {}, which holds files only",
                            files.persistent.display()
                        ),
                    ));
                } else {
                    state.record(e.clone());
                }
            }
        }
        state.entries_mut().retain(|e| match e.check() {
            Ok(()) => true,
            Err(why) => {
                rejected.push((e.clone(), why));
                false
            }
        });
        Ok(Ledger {
            files: files.clone(),
            state,
            runtime_disk,
            persistent_disk,
            rejected,
            earlier_boot,
        })
    }

    /// The runtime state file (whose journal takes the appends).
    pub fn runtime_path(&self) -> &Path {
        &self.files.runtime
    }

    /// Whether neither file exists.
    pub fn is_empty_on_disk(&self) -> bool {
        self.runtime_disk.is_none() && self.persistent_disk.is_none()
    }

    /// `e`, a failed [`Ledger::persist`] before any change, said as such: which state
    /// directory could not take the originals, the file and the errno.
    pub fn not_recorded(&self, e: Error) -> Error {
        match e {
            Error::Write { path, source, .. } => {
                let dir = [&self.files.runtime, &self.files.persistent]
                    .into_iter()
                    .filter_map(|f| f.parent())
                    .find(|d| path.starts_with(d))
                    .map_or_else(|| path.clone(), Path::to_path_buf);
                Error::Record {
                    dir,
                    file: path,
                    source,
                }
            }
            other => other,
        }
    }

    /// The runtime part of `state` and its persistent part.
    fn split(&self) -> (State, State) {
        let (run, pers): (Vec<Entry>, Vec<Entry>) = self
            .state
            .entries()
            .iter()
            .cloned()
            .partition(|e| e.original.is_runtime());
        let mut r = self.state.clone();
        *r.entries_mut() = run;
        let mut p = State::new(
            self.state.boot_id.clone(),
            self.state.isolated.clone(),
            self.state.config.clone(),
        );
        *p.entries_mut() = pers;
        (r, p)
    }

    /// Write what differs from the files on disk: the persistent file whole (it changes
    /// rarely), the runtime one by appending to its journal when it only gained entries,
    /// else whole; a file left without entries is removed.
    pub fn persist(&mut self) -> Result<()> {
        let (run, pers) = self.split();
        let pers_on_disk = self.persistent_disk.as_ref().map(|d| d.entries());
        if pers_on_disk != Some(pers.entries()) {
            if pers.entries().is_empty() {
                if self.persistent_disk.is_some() {
                    State::remove(&self.files.persistent)?;
                }
                self.persistent_disk = None;
            } else {
                pers.save(&self.files.persistent)?;
                self.persistent_disk = Some(pers);
            }
        }
        // Journal lines set aside at the load leave the journal now, into the set-aside
        // file: said once (by the report of this load), kept for the administrator.
        let aside = !run.set_aside.is_empty();
        if self.runtime_disk.as_ref() == Some(&run) && !aside {
            return Ok(());
        }
        if run.entries().is_empty() && run.unchangeable.is_empty() {
            if self.runtime_disk.is_some() {
                keep_set_aside(&self.files.runtime, &run.set_aside)?;
                State::remove(&self.files.runtime)?;
            }
            self.state.set_aside.clear();
            self.runtime_disk = None;
            return Ok(());
        }
        let added = match &self.runtime_disk {
            Some(d)
                if !aside
                    && d.version == run.version
                    && d.boot_id == run.boot_id
                    && d.isolated == run.isolated
                    && d.config == run.config
                    && d.unchangeable == run.unchangeable
                    && run.entries().starts_with(d.entries()) =>
            {
                Some(run.entries()[d.entries().len()..].to_vec())
            }
            _ => None,
        };
        match added {
            Some(added) => run.append(&self.files.runtime, &added)?,
            None => run.save(&self.files.runtime)?,
        }
        let mut run = run;
        run.set_aside.clear();
        self.state.set_aside.clear();
        self.runtime_disk = Some(run);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::journal::{crc32, marked_entry};
    use super::*;
    use std::io::Write;

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

    /// A journal's fingerprint grows with its appends: the same as the whole text's.
    #[test]
    fn a_fingerprint_streams() {
        let mut st = Stream::new("{\"id\":1}\n");
        st.add("{\"id\":2}");
        st.add("\n");
        let whole = fingerprint("{\"id\":1}\n{\"id\":2}\n");
        assert_eq!(st.fingerprint(), whole);
        assert_eq!(whole.len, 18);
        assert_ne!(fingerprint("{\"id\":1}\n"), whole);
    }

    /// Each pass over the entries counts them all, on this thread.
    #[test]
    fn passes_over_the_entries_are_counted() {
        let mut st = State::new("b".into(), "2-3".into(), "c".into());
        for id in ["a", "b", "c"] {
            st.record(entry(id, "1\n"));
        }
        let before = entries_examined();
        assert_eq!(st.entries().len(), 3);
        st.entries_mut().retain(|e| e.id != "b");
        assert_eq!(entries_examined() - before, 6);
        // Looked up by the index made once (two entries), not by a pass per lookup.
        let before = entries_examined();
        assert!(st.has("a") && st.has("c") && !st.has("b"));
        assert_eq!(entries_examined() - before, 2);
    }

    #[test]
    fn the_state_file_is_json_with_an_original_a_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let mut st = State::new("b\"1".into(), "2-3".into(), "/etc/a\nb.toml".into());
        st.save(&path).unwrap();
        assert_eq!(State::load(&path).unwrap().unwrap(), st);
        st.record(entry("sysctl:a", "1\n"));
        st.record(entry("sysctl:b", "\"2\"\t\n"));
        st.unchangeable.insert("irq:0".into(), "EIO".into());
        st.save(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(serde_json::from_str::<State>(&text).unwrap(), st);
        *LAST.lock().unwrap() = None;
        assert_eq!(State::load(&path).unwrap().unwrap(), st);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 11, "{text}");
        assert!(lines[6].starts_with("    {\"id\":\"sysctl:a\""), "{text}");
        assert!(lines[7].starts_with("    {\"id\":\"sysctl:b\""), "{text}");
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
            back.entries()[0].original,
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
        st.append(&path, &st.entries()[1..]).unwrap();
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
        let ids: Vec<&str> = back.entries().iter().map(|e| e.id.as_str()).collect();
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
        assert_eq!(back.entries()[0], entry("sysctl:a", "1\n"));
        assert_eq!(back.entries().len(), 2);

        // A broken line in the middle is set aside; the lines around it are used.
        fs::write(
            &jpath,
            format!("not json\n{}\n", serde_json::to_string(&c).unwrap()),
        )
        .unwrap();
        let back = State::load(&path).unwrap().unwrap();
        assert_eq!(back.set_aside, ["not json"]);
        assert!(back.has("sysctl:c"));

        // A whole write folds the journal in; remove takes both.
        fs::remove_file(&jpath).unwrap();
        st.append(&path, &st.entries()[1..]).unwrap();
        assert!(jpath.exists());
        st.save(&path).unwrap();
        assert!(!jpath.exists());
        assert_eq!(State::load(&path).unwrap().unwrap(), st);
        st.append(&path, &st.entries()[1..]).unwrap();
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

    /// An append cut short by a full disk leaves a torn last line: the next append starts on
    /// a line of its own, every whole entry before and after loads, the torn line is set
    /// aside and goes to `state.journal.bad` at the next whole write, once.
    #[test]
    fn a_torn_journal_line_loses_nothing_around_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let jpath = journal_path(&path);
        let mut st = State::new("b".into(), "2-3".into(), "c".into());
        st.record(entry("sysctl:a", "1\n"));
        st.save(&path).unwrap();
        assert!(append_entries(&path, &[entry("sysctl:b", "2\n")]).unwrap());
        assert!(append_entries(&path, &[entry("sysctl:b2", "2\n")]).unwrap());
        // A whole last line needs no ending: no empty line between appends.
        let text = fs::read_to_string(&jpath).unwrap();
        assert_eq!(text.lines().count(), 2, "{text:?}");
        assert!(!text.contains("\n\n"), "{text:?}");
        // The disk fills in the middle of the next append.
        let torn = serde_json::to_string(&entry("sysctl:x", "9\n")).unwrap();
        let mut f = fs::OpenOptions::new().append(true).open(&jpath).unwrap();
        f.write_all(&torn.as_bytes()[..20]).unwrap();
        drop(f);
        // Space again: the next appends.
        assert!(append_entries(&path, &[entry("sysctl:c", "3\n")]).unwrap());
        assert!(append_entries(&path, &[entry("sysctl:d", "4\n")]).unwrap());
        let back = State::load(&path).unwrap().unwrap();
        let ids: Vec<&str> = back.entries().iter().map(|e| e.id.as_str()).collect();
        assert_eq!(
            ids,
            ["sysctl:a", "sysctl:b", "sysctl:b2", "sysctl:c", "sysctl:d"]
        );
        assert_eq!(back.set_aside, [&torn[..20]]);
        back.save(&path).unwrap();
        let bad = set_aside_path(&path);
        assert_eq!(bad, dir.path().join("state.journal.bad"));
        assert_eq!(
            fs::read_to_string(&bad).unwrap(),
            format!("{}\n", &torn[..20])
        );
        assert!(!jpath.exists());
        let again = State::load(&path).unwrap().unwrap();
        assert!(again.set_aside.is_empty());
        assert_eq!(again.entries().len(), 5);
        again.save(&path).unwrap();
        assert_eq!(
            fs::read_to_string(&bad).unwrap().lines().count(),
            1,
            "set aside twice"
        );
    }

    /// The check value of CRC-32 (the standard's "123456789"), and of nothing.
    #[test]
    fn crc32_is_the_standard_one() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"a"), 0xE8B7_BE43);
    }

    fn journal_of(entries: &[Entry]) -> String {
        entries.iter().map(journal_line).collect()
    }

    fn sample_entries() -> Vec<Entry> {
        vec![
            entry("sysctl:a", "1\n"),
            entry("sysctl:b", "\"{\\\"len\\\":9}\"\t\n"),
            entry("sysctl:\u{e9}t\u{e9}", "caf\u{e9}\n"),
            entry("sysctl:d", "4\n"),
        ]
    }

    /// A journal line is one JSON object: the entry with its length and CRC-32 in front,
    /// which an isold without the mark reads as the entry.
    #[test]
    fn a_journal_line_is_the_entry_with_its_length_and_crc() {
        let e = entry("sysctl:a", "1\n");
        let line = journal_line(&e);
        let body = serde_json::to_string(&e).unwrap();
        assert_eq!(
            line,
            format!(
                "{{\"len\":{},\"crc32\":\"{:08x}\",{}\n",
                body.len(),
                crc32(body.as_bytes()),
                &body[1..]
            )
        );
        assert!(line.starts_with("{\"len\":"), "{line}");
        assert_eq!(line.matches('\n').count(), 1);
        assert_eq!(serde_json::from_str::<Entry>(&line).unwrap(), e);
        assert_eq!(marked_entry(line.trim_end()), Some(e));
    }

    fn loaded(dir: &Path, journal: &str) -> State {
        let path = dir.join("state.json");
        if !path.exists() {
            State::new("b".into(), "2-3".into(), "c".into())
                .save(&path)
                .unwrap();
        }
        fs::write(journal_path(&path), journal).unwrap();
        *LAST.lock().unwrap() = None;
        State::load(&path).unwrap().unwrap()
    }

    fn ids(st: &State) -> Vec<String> {
        st.entries().iter().map(|e| e.id.clone()).collect()
    }

    /// A journal cut at any byte loads every entry whose line is whole before the cut, and
    /// nothing else; once the next append has ended the cut line, it is set aside and the
    /// entries before and after it load.
    #[test]
    fn a_journal_cut_at_any_byte_loads_everything_before_the_cut() {
        let dir = tempfile::tempdir().unwrap();
        let all = sample_entries();
        let text = journal_of(&all);
        let ends: Vec<usize> = text.match_indices('\n').map(|(i, _)| i + 1).collect();
        let next = entry("sysctl:next", "5\n");
        for cut in 0..=text.len() {
            let Some(head) = text.get(..cut) else {
                continue; // inside a character: a byte cut is still a text cut elsewhere
            };
            let whole = ends.iter().filter(|&&e| e <= cut).count();
            let want: Vec<String> = all[..whole].iter().map(|e| e.id.clone()).collect();
            let st = loaded(dir.path(), head);
            assert_eq!(ids(&st), want, "cut at {cut}");
            assert!(st.set_aside.is_empty(), "cut at {cut}: {:?}", st.set_aside);
            // The next append (it ends a cut line first).
            let path = dir.path().join("state.json");
            assert!(append_entries(&path, std::slice::from_ref(&next)).unwrap());
            *LAST.lock().unwrap() = None;
            let st = State::load(&path).unwrap().unwrap();
            let torn = &text[ends.get(whole.wrapping_sub(1)).map_or(0, |&e| e)..cut];
            // Cut just before its newline, a line is whole once the append has ended it.
            let ended = whole < all.len() && ends[whole] == cut + 1;
            let mut want = want;
            if ended {
                want.push(all[whole].id.clone());
            }
            want.push(next.id.clone());
            assert_eq!(ids(&st), want, "cut at {cut}, then an append");
            if torn.is_empty() || ended {
                assert!(st.set_aside.is_empty(), "cut at {cut}");
            } else {
                assert_eq!(st.set_aside, [torn], "cut at {cut}");
            }
        }
    }

    /// Bytes cut from anywhere in a marked line, or any byte of it changed, never load as an
    /// entry with another value: the line is set aside (or, its mark alone hit, read whole),
    /// and the lines around it load.
    #[test]
    fn a_changed_or_shortened_line_is_set_aside_and_its_neighbours_load() {
        let dir = tempfile::tempdir().unwrap();
        let all = sample_entries();
        let lines: Vec<String> = all.iter().map(journal_line).collect();
        let mid = &lines[1];
        let mut tried = 0;
        for at in 0..mid.len() - 1 {
            for bad in [
                // One byte changed (never into a line end).
                {
                    let mut b = mid.clone().into_bytes();
                    b[at] ^= if b[at] == b'\x0b' { 0x02 } else { 0x01 };
                    String::from_utf8(b).ok()
                },
                // One byte taken out.
                mid.get(..at)
                    .zip(mid.get(at + 1..))
                    .map(|(a, b)| format!("{a}{b}")),
            ]
            .into_iter()
            .flatten()
            {
                tried += 1;
                let text = format!("{}{bad}{}{}", lines[0], lines[2], lines[3]);
                let st = loaded(dir.path(), &text);
                for e in st.entries() {
                    assert!(all.contains(e), "byte {at}: {e:?} from {bad:?}");
                }
                for id in ["sysctl:a", "sysctl:\u{e9}t\u{e9}", "sysctl:d"] {
                    assert!(st.has(id), "byte {at}: {id} lost to {bad:?}");
                }
                // Set aside whole, or in parts where a changed byte made a second mark.
                let parts = if st.has("sysctl:b") {
                    String::new()
                } else {
                    bad.strip_suffix('\n').unwrap_or(&bad).to_string()
                };
                assert_eq!(st.set_aside.concat(), parts, "byte {at}: {bad:?}");
            }
        }
        assert!(tried > 2 * 100, "{tried}");
    }

    /// Lines of an isold before the mark load as they did; a line without the mark that is
    /// no entry is set aside.
    #[test]
    fn journal_lines_without_the_mark_still_load() {
        let dir = tempfile::tempdir().unwrap();
        let all = sample_entries();
        let old: String = all[..2]
            .iter()
            .map(|e| serde_json::to_string(e).unwrap() + "\n")
            .collect();
        let text = format!("{old}not an entry\n{}", journal_of(&all[2..]));
        let st = loaded(dir.path(), &text);
        assert_eq!(st.entries(), all.as_slice());
        assert_eq!(st.set_aside, ["not an entry"]);
    }

    /// An append that ran into a line cut short (a writer that did not end it) loses only
    /// the cut part.
    #[test]
    fn lines_run_together_lose_only_the_cut_part() {
        let dir = tempfile::tempdir().unwrap();
        let all = sample_entries();
        let lines: Vec<String> = all.iter().map(journal_line).collect();
        let cut = &lines[1][..40];
        let text = format!("{}{cut}{}{}", lines[0], lines[2], lines[3]);
        let st = loaded(dir.path(), &text);
        assert_eq!(ids(&st), ["sysctl:a", "sysctl:\u{e9}t\u{e9}", "sysctl:d"]);
        assert_eq!(st.set_aside, [cut]);
        // Without marks (an older isold's lines), the run-together line is set aside whole.
        let old = |e: &Entry| serde_json::to_string(e).unwrap();
        let text = format!("{}\n{}{}\n", old(&all[0]), &old(&all[1])[..9], old(&all[2]));
        let st = loaded(dir.path(), &text);
        assert_eq!(ids(&st), ["sysctl:a"]);
        assert_eq!(st.set_aside.len(), 1);
    }

    /// The journal and the lock are never opened through a symlink left in their place.
    #[test]
    fn the_journal_and_the_lock_refuse_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let victim = dir.path().join("victim");
        fs::write(&victim, "precious").unwrap();
        std::os::unix::fs::symlink(&victim, journal_path(&path)).unwrap();
        let e = append_entries(&path, &[entry("sysctl:x", "1\n")]).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ELOOP), "{e}");
        std::os::unix::fs::symlink(&victim, crate::policy::engine::lock_path(&path)).unwrap();
        let e = crate::policy::engine::lock(&path).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ELOOP), "{e}");
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
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
        st.append(&path, st.entries()).unwrap();
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
            e.contains("state.json: not a usable isold state file: missing field"),
            "{e}"
        );
        assert!(e.contains(".broken"), "says what the admin can do: {e}");
        // Cut short by a full disk or a copy: named as such.
        let st = State::new("b".into(), "2-3".into(), "c".into());
        st.save(&path).unwrap();
        let whole = fs::read_to_string(&path).unwrap();
        fs::write(&path, &whole[..whole.len() / 2]).unwrap();
        let e = State::load(&path).unwrap_err().to_string();
        assert!(e.contains("it ends early"), "{e}");
        fs::write(&path, whole.replace("\"version\": 1", "\"version\": 7")).unwrap();
        let e = State::load(&path).unwrap_err().to_string();
        assert!(
            e.contains("its format is version 7, this isold reads version 1"),
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
        let Original::Partition(p) = &st.entries()[0].original else {
            panic!()
        };
        let got: Vec<(i32, u64, &str)> = p
            .moved
            .iter()
            .map(|m| (m.pid, m.starttime, m.cgroup.as_str()))
            .collect();
        assert_eq!(got, vec![(10, 100, "/"), (10, 200, "/a"), (11, 100, "/b")]);
    }

    fn attr(id: &str, item: &str, path: &str, content: &str, restore: &str) -> Entry {
        Entry {
            id: id.into(),
            item: item.into(),
            label: id.into(),
            original: Original::Attr {
                path: path.into(),
                content: content.into(),
                restore: restore.into(),
            },
        }
    }

    fn file(path: &str, created_dir: Option<&str>) -> Entry {
        Entry {
            id: format!("file:{path}"),
            item: if path.contains("irqbalance") {
                "irqbalance"
            } else {
                "kvm"
            }
            .into(),
            label: path.into(),
            original: Original::File {
                path: path.into(),
                content: None,
                created_dir: created_dir.map(str::to_string),
                written: Some("x\n".into()),
            },
        }
    }

    /// What apply records passes; an entry whose path, item, text or thread does not follow
    /// from its id is refused, whatever the rest says.
    #[test]
    fn an_entry_must_be_one_isold_records() {
        let good = [
            attr(
                "sysctl:vm.stat_interval",
                "sysctl",
                "/proc/sys/vm/stat_interval",
                "1\n",
                "1",
            ),
            attr(
                "thp",
                "thp",
                "/sys/kernel/mm/transparent_hugepage/enabled",
                "always [madvise] never\n",
                "madvise",
            ),
            attr(
                "irq:24",
                "irq_affinity",
                "/proc/irq/24/smp_affinity_list",
                "0-3\n",
                "0-3",
            ),
            attr(
                "irq:default",
                "irq_affinity",
                "/proc/irq/default_smp_affinity",
                "f\n",
                "f",
            ),
            attr(
                "pm_qos:cpu3",
                "pm_qos",
                "/sys/devices/system/cpu/cpu3/power/pm_qos_resume_latency_us",
                "0\n",
                "0",
            ),
            attr(
                "cpufreq:cpu2",
                "cpufreq",
                "/sys/devices/system/cpu/cpu2/cpufreq/scaling_governor",
                "powersave\n",
                "powersave",
            ),
            attr(
                "workqueue",
                "workqueue",
                "/sys/devices/virtual/workqueue/cpumask",
                "f\n",
                "f",
            ),
            attr(
                "workqueue:writeback",
                "workqueue",
                "/sys/devices/virtual/workqueue/writeback/cpumask",
                "f\n",
                "f",
            ),
            attr(
                "machinecheck:machinecheck1",
                "machinecheck",
                "/sys/devices/system/machinecheck/machinecheck1/ignore_ce",
                "0\n",
                "0",
            ),
            attr(
                "printk",
                "printk",
                "/proc/sys/kernel/printk",
                "7\t4\t1\t7\n",
                "7\t4\t1\t7",
            ),
            attr("ksm", "ksm", "/sys/kernel/mm/ksm/run", "0\n", "0"),
            file("/etc/modprobe.d/isold-kvm.conf", Some("/etc/modprobe.d")),
            // A tree without /etc (a captured one) gets it made.
            file("/etc/modprobe.d/isold-kvm.conf", Some("/etc")),
            file("/etc/default/irqbalance", None),
        ];
        for e in &good {
            assert_eq!(e.check(), Ok(()), "{e:?}");
        }
        let bad = [
            attr(
                "sysctl:vm.stat_interval",
                "sysctl",
                "/proc/sys/../../../etc/shadow",
                "1\n",
                "1",
            ),
            attr(
                "sysctl:../../etc/shadow",
                "sysctl",
                "/proc/sys/../../etc/shadow",
                "1\n",
                "1",
            ),
            attr(
                "sysctl:vm.stat_interval",
                "sysctl",
                "/proc/sys/vm/stat_interval",
                "1\n",
                "0",
            ),
            attr(
                "sysctl:vm.stat_interval",
                "thp",
                "/proc/sys/vm/stat_interval",
                "1\n",
                "1",
            ),
            attr(
                "irq:24",
                "irq_affinity",
                "/proc/irq/25/smp_affinity_list",
                "0-3\n",
                "0-3",
            ),
            attr(
                "irq:x",
                "irq_affinity",
                "/proc/irq/x/smp_affinity_list",
                "0-3\n",
                "0-3",
            ),
            attr(
                "irq:x",
                "irq_affinity",
                "/proc/irq/0/smp_affinity_list",
                "0-3\n",
                "0-3",
            ),
            attr(
                "workqueue:..",
                "workqueue",
                "/sys/devices/virtual/workqueue/../cpumask",
                "f\n",
                "f",
            ),
            attr(
                "pm_qos:cpu",
                "pm_qos",
                "/sys/devices/system/cpu/cpu/power/pm_qos_resume_latency_us",
                "0\n",
                "0",
            ),
            attr(
                "machinecheck:../x",
                "machinecheck",
                "/sys/devices/system/machinecheck/../x/ignore_ce",
                "0\n",
                "0",
            ),
            attr("anything", "sysctl", "/proc/sys/vm/x", "1\n", "1"),
            file("/etc/passwd", None),
            file("/etc/modprobe.d/isold-kvm.conf", Some("/")),
            file("/etc/modprobe.d/isold-kvm.conf", Some("/usr/lib")),
        ];
        for e in &bad {
            assert!(e.check().is_err(), "{e:?}");
        }
        let mut f = file("/etc/default/irqbalance", None);
        f.id = "file:/etc/default/grub".into();
        assert!(f.check().is_err());

        let task = |id: &str, pid: i32, tid: i32, item: &str| Entry {
            id: id.into(),
            item: item.into(),
            label: "t".into(),
            original: Original::Affinity {
                pid,
                tid,
                starttime: 5,
                comm: "t".into(),
                cpus: "0-3".into(),
                taken_off: None,
            },
        };
        assert_eq!(task("task:21:5", 20, 21, "tasks").check(), Ok(()));
        assert!(task("task:22:5", 20, 21, "tasks").check().is_err());
        assert!(task("task:21:6", 20, 21, "tasks").check().is_err());
        assert!(task("task:21:5", 0, 21, "tasks").check().is_err());
        assert!(task("task:21:5", 20, 21, "sysctl").check().is_err());
        let sched = |id: &str, policy: u32| Entry {
            id: id.into(),
            item: "kthread_priority".into(),
            label: "t".into(),
            original: Original::Sched {
                pid: 21,
                tid: 21,
                starttime: 5,
                comm: "t".into(),
                policy,
                rt_priority: if policy == 1 { 2 } else { 0 },
            },
        };
        assert_eq!(sched("sched:21:5", 1).check(), Ok(()));
        assert!(sched("task:21:5", 1).check().is_err());
        assert!(sched("sched:21:5", 42).check().is_err());
        let loan = |id: &str, item: &str, nice: i32| Entry {
            id: id.into(),
            item: item.into(),
            label: "t".into(),
            original: Original::Loan {
                pid: 21,
                tid: 21,
                starttime: 5,
                comm: "kworker/3:1".into(),
                policy: 0,
                rt_priority: 0,
                nice,
                reset_on_fork: false,
            },
        };
        assert_eq!(loan("loan:21:5", "stalls", 0).check(), Ok(()));
        assert!(loan("sched:21:5", "stalls", 0).check().is_err());
        assert!(loan("loan:21:6", "stalls", 0).check().is_err());
        assert!(loan("loan:21:5", "kthread_priority", 0).check().is_err());
        assert!(loan("loan:21:5", "stalls", 20).check().is_err());

        use crate::policy::partition::{Moved, PartitionOriginal};
        let part = |dir: &str, cgroup: &str| Entry {
            id: format!("cgroup_partition:{dir}"),
            item: "cgroup_partition".into(),
            label: "p".into(),
            original: Original::Partition(PartitionOriginal {
                dir: dir.into(),
                created: true,
                enabled_cpuset: false,
                cpus: None,
                exclusive: None,
                partition: None,
                moved: vec![Moved {
                    pid: 7,
                    starttime: 1,
                    comm: "w".into(),
                    cgroup: cgroup.into(),
                    threads: vec![],
                }],
            }),
        };
        assert_eq!(
            part("/sys/fs/cgroup/iso", "/system.slice/x.service").check(),
            Ok(())
        );
        assert!(part("/sys/fs/cgroup/../../etc", "/").check().is_err());
        assert!(part("/etc/x", "/").check().is_err());
        assert!(part("/sys/fs/cgroup/iso", "/../../x").check().is_err());
        assert!(part("/sys/fs/cgroup/iso", "relative").check().is_err());
    }

    fn files_in(dir: &Path) -> StateFiles {
        StateFiles::new(dir.join("run/state.json"), dir.join("lib/state.json"))
    }

    fn tree_root(dir: &Path, boot: &str) -> SysRoot {
        let p = dir.join("root/proc/sys/kernel/random");
        fs::create_dir_all(&p).unwrap();
        fs::write(p.join("boot_id"), format!("{boot}\n")).unwrap();
        SysRoot::new(dir.join("root"))
    }

    /// Kernel values go to the runtime file, files to the persistent one; a runtime file of
    /// an earlier boot gives its files' originals to the persistent file and is gone.
    #[test]
    fn the_ledger_splits_runtime_values_from_files() {
        let dir = tempfile::tempdir().unwrap();
        let files = files_in(dir.path());
        let root = tree_root(dir.path(), "boot-1");
        let mut l = Ledger::load(&files, &root, "2-3".into(), "c".into()).unwrap();
        assert!(l.is_empty_on_disk());
        let sysctl = attr("sysctl:vm.x", "sysctl", "/proc/sys/vm/x", "1\n", "1");
        let kvm = file("/etc/modprobe.d/isold-kvm.conf", Some("/etc/modprobe.d"));
        l.state.record(sysctl.clone());
        l.state.record(kvm.clone());
        l.persist().unwrap();
        let run = State::load(&files.runtime).unwrap().unwrap();
        let pers = State::load(&files.persistent).unwrap().unwrap();
        assert_eq!(run.entries(), std::slice::from_ref(&sysctl));
        assert_eq!(pers.entries(), std::slice::from_ref(&kvm));
        // Both files are 0600 in 0700 directories.
        use std::os::unix::fs::MetadataExt;
        for f in [&files.runtime, &files.persistent] {
            assert_eq!(fs::metadata(f).unwrap().mode() & 0o777, 0o600);
            assert_eq!(
                fs::metadata(f.parent().unwrap()).unwrap().mode() & 0o777,
                0o700
            );
        }

        // One more kernel value: appended to the journal, the files stay as they are.
        let main = fs::read_to_string(&files.runtime).unwrap();
        let pers_text = fs::read_to_string(&files.persistent).unwrap();
        let mut l = Ledger::load(&files, &root, "2-3".into(), "c".into()).unwrap();
        assert_eq!(l.state.entries(), [sysctl.clone(), kvm.clone()]);
        let other = attr("sysctl:vm.y", "sysctl", "/proc/sys/vm/y", "2\n", "2");
        l.state.record(other.clone());
        l.persist().unwrap();
        assert_eq!(fs::read_to_string(&files.runtime).unwrap(), main);
        assert_eq!(fs::read_to_string(&files.persistent).unwrap(), pers_text);
        assert!(journal_path(&files.runtime).exists());

        // A reboot: the kernel values are void, the file's original stays.
        let root = tree_root(dir.path(), "boot-2");
        let mut l = Ledger::load(&files, &root, "2-3".into(), "c".into()).unwrap();
        assert!(l.earlier_boot);
        assert_eq!(l.state.entries(), std::slice::from_ref(&kvm));
        l.persist().unwrap();
        assert!(!files.runtime.exists() && !journal_path(&files.runtime).exists());
        assert_eq!(
            State::load(&files.persistent).unwrap().unwrap().entries(),
            std::slice::from_ref(&kvm)
        );

        // isold 0.1 kept files in the runtime file: after a reboot they move.
        let mut old = State::new("boot-1".into(), "2-3".into(), "c".into());
        let irqb = file("/etc/default/irqbalance", None);
        old.record(irqb.clone());
        old.save(&files.runtime).unwrap();
        let mut l = Ledger::load(&files, &root, "2-3".into(), "c".into()).unwrap();
        l.persist().unwrap();
        assert!(!files.runtime.exists());
        assert_eq!(
            State::load(&files.persistent).unwrap().unwrap().entries(),
            [irqb, kvm]
        );
    }

    /// Set-aside journal lines leave the journal at the ledger's next write, into the
    /// set-aside file, once: also when that write removes the state file (a restore).
    #[test]
    fn the_ledger_keeps_set_aside_lines_once_even_when_it_removes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let files = files_in(dir.path());
        let root = tree_root(dir.path(), "boot-1");
        let a = attr("sysctl:vm.x", "sysctl", "/proc/sys/vm/x", "1\n", "1");
        let mut run = State::new("boot-1".into(), "2-3".into(), "c".into());
        run.record(a.clone());
        run.save(&files.runtime).unwrap();
        let jpath = journal_path(&files.runtime);
        let bad = set_aside_path(&files.runtime);
        fs::write(&jpath, "{\"len\":3,\"crc32\":\"00000000\",\"id\":1}\n").unwrap();
        let mut l = Ledger::load(&files, &root, String::new(), String::new()).unwrap();
        assert_eq!(l.state.set_aside.len(), 1);
        // Nothing else to write: the lines alone make the write.
        l.persist().unwrap();
        assert!(!jpath.exists());
        assert_eq!(set_aside_kept(&files.runtime), Some(1));
        l.persist().unwrap();
        let l = Ledger::load(&files, &root, String::new(), String::new()).unwrap();
        assert!(l.state.set_aside.is_empty());
        assert_eq!(set_aside_kept(&files.runtime), Some(1));
        // A restore's write: the state file goes, the lines stay.
        fs::write(&jpath, "cut\n").unwrap();
        let mut l = Ledger::load(&files, &root, String::new(), String::new()).unwrap();
        assert_eq!(l.state.set_aside, ["cut"]);
        l.state.entries_mut().clear();
        l.persist().unwrap();
        assert!(!files.runtime.exists() && !jpath.exists());
        assert_eq!(
            fs::read_to_string(&bad).unwrap().lines().last(),
            Some("cut")
        );
        assert_eq!(set_aside_kept(&files.runtime), Some(2));
    }

    /// A tampered entry is set aside with its reason and leaves the files at the next write;
    /// a kernel value in the persistent file is one.
    #[test]
    fn the_ledger_sets_tampered_entries_aside() {
        let dir = tempfile::tempdir().unwrap();
        let files = files_in(dir.path());
        let root = tree_root(dir.path(), "boot-1");
        let mut run = State::new("boot-1".into(), "2-3".into(), "c".into());
        let good = attr("sysctl:vm.x", "sysctl", "/proc/sys/vm/x", "1\n", "1");
        run.record(good.clone());
        run.record(attr(
            "sysctl:vm.y",
            "sysctl",
            "/proc/sys/../../etc/y",
            "1\n",
            "1",
        ));
        run.save(&files.runtime).unwrap();
        let mut pers = State::new("boot-1".into(), "2-3".into(), "c".into());
        pers.record(attr("sysctl:vm.z", "sysctl", "/proc/sys/vm/z", "1\n", "1"));
        pers.save(&files.persistent).unwrap();
        let mut l = Ledger::load(&files, &root, String::new(), String::new()).unwrap();
        assert_eq!(l.state.entries(), std::slice::from_ref(&good));
        let why: Vec<&str> = l.rejected.iter().map(|(_, w)| w.as_str()).collect();
        assert_eq!(why.len(), 2, "{why:?}");
        assert!(why[0].contains("holds files only"), "{why:?}");
        assert!(why[1].contains("is not the file of sysctl:vm.y"), "{why:?}");
        l.persist().unwrap();
        assert_eq!(
            State::load(&files.runtime).unwrap().unwrap().entries(),
            [good]
        );
        assert!(!files.persistent.exists());
    }
}
