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
use super::entry::{Entry, Original};
use super::journal::{append_entries, journal_entries, journal_line, journal_path, keep_set_aside};

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
/// Forget what this process remembers of the state files (the last one read), as a new
/// process after a crash or a reboot would: the next load reads them from the disk (the
/// fault injector's tests, [`super::durable::faults`]).
#[cfg(feature = "fault-injection")]
pub fn new_process() {
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
    pub fn add_moved(&mut self, id: &str, moved: &[crate::policy::partition::Moved]) {
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
        crate::policy::files::private_dir(dir).map_err(|e| werr(dir, e))?;
        let tmp: PathBuf = dir.join(format!(
            ".{}.tmp",
            path.file_name()
                .map_or("state".into(), |n| n.to_string_lossy())
        ));
        let json = self.to_text();
        // Exclusively: a symlink left under the temporary name is removed, never followed.
        let mut f =
            crate::policy::files::create_exclusive(&tmp, 0o600).map_err(|e| werr(&tmp, e))?;
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

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
