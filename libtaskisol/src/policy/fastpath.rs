//! One task, as fast as it can be done right: the daemon's answer to an exec'd or forked task
//! whose affinity reaches into the isolated CPUs.
//!
//! [`super::engine::apply_threads`] does the same through the general path (lock, whole state
//! loaded, plan, evaluate, record, change, read back): about 50 system calls and a copy of the
//! state per task. [`TaskFixer::fix`] makes the same decision as the plan (workloads inside the
//! isolated CPUs, allow-listed names and cgroups, threads the kernel pins are left alone) and
//! keeps the same promise (the original is in the state file's journal before the affinity is
//! written, an original already recorded is never replaced) in about 15 system calls, by
//! remembering which task originals the state file holds. It trusts that memory only while the
//! state file is the one it last saw (same inode, size and times): when another isold command
//! rewrote it, or for anything it does not handle (kthread priority rules), it answers
//! [`Fix::UseEngine`] and the caller takes the general path, then calls
//! [`TaskFixer::resync`].

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::config::glob_match;
use super::plan::{thread_verdict, ThreadVerdict};
use super::state::{self, Entry, Original, State};
use super::Status;
use super::{threads, Policy};
use crate::error::{Error, Result};
use crate::procfs::{TaskStat, PF_KTHREAD};
use crate::sysroot::SysRoot;
use crate::tasks;

/// What [`TaskFixer::fix`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fix {
    /// The affinity does not reach into the isolated CPUs, or lies inside them (a workload).
    Fine,
    /// Left where it is, for the reason given (allow-listed, pinned by the kernel); it stays so
    /// until it execs or is renamed.
    Settled(String),
    /// Narrowed: the label (`task 812 (sleep)`), the affinity before and after.
    Changed {
        label: String,
        from: String,
        to: String,
    },
    /// Its owner set its affinity while isold was changing it (before isold's write, or
    /// right after it): left as the owner set it, and no correction of isold's. The label,
    /// the affinity now, and when it was seen.
    Contested {
        label: String,
        now: String,
        why: String,
    },
    /// The task exited before it could be changed.
    Gone,
    /// Not for this path: take [`super::engine::apply_threads`], then [`TaskFixer::resync`].
    UseEngine,
}

/// Where [`TaskFixer::fix`] stands when it calls the hook of [`TaskFixer::between_steps`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The original is in the journal; the affinity is read again and written next.
    Recorded,
    /// The affinity was written; it is read back next.
    Written,
}

type Hook = Box<dyn FnMut(Step, i32) + Send>;

/// A test's hook, called with the step and the tid (never inside the read-to-write window).
struct StepHook(Option<Hook>);

impl std::fmt::Debug for StepHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Some(hook)"
        } else {
            "None"
        })
    }
}

/// The identity of the state file: it is replaced (rename) on every whole write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

fn file_id(path: &Path) -> Option<FileId> {
    let m = fs::metadata(path).ok()?;
    Some(FileId {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime: (m.mtime(), m.mtime_nsec()),
        ctime: (m.ctime(), m.ctime_nsec()),
    })
}

/// The task originals a state file holds, and the file they were read from.
#[derive(Debug)]
pub struct TaskFixer {
    state_path: PathBuf,
    seen: Option<FileId>,
    recorded: HashSet<String>,
    /// The lock file of [`super::engine::lock`], kept open: two system calls a task instead
    /// of five.
    lock_file: Option<fs::File>,
    /// The state file's journal, open for appending: valid while the state file is the one
    /// seen (a whole write removes the journal and replaces the state file).
    journal: Option<fs::File>,
    /// The journal's last line may be cut short: the next append ends it first.
    torn: bool,
    hook: StepHook,
}

/// The lock held while the fixer records and writes; released when dropped. It holds the
/// descriptor of [`TaskFixer::lock_file`], which stays open as long as the fixer.
struct Held(std::os::fd::RawFd);

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: flock on the fixer's lock file, open while the fixer lives (a Held never
        // outlives the call that took it).
        unsafe { libc::flock(self.0, libc::LOCK_UN) };
    }
}

impl TaskFixer {
    /// A fixer for the runtime state file at `state_path` (task originals live there only);
    /// [`TaskFixer::resync`] before the first use.
    pub fn new(state_path: &Path) -> TaskFixer {
        TaskFixer {
            state_path: state_path.to_path_buf(),
            seen: None,
            recorded: HashSet::new(),
            lock_file: None,
            journal: None,
            torn: false,
            hook: StepHook(None),
        }
    }

    /// Call `hook` at each [`Step`] of [`TaskFixer::fix`]: for tests that make an owner pin
    /// a thread at the worst moment (right after the journal write, right after isold's).
    pub fn between_steps(&mut self, hook: impl FnMut(Step, i32) + Send + 'static) {
        self.hook = StepHook(Some(Box::new(hook)));
    }

    fn step(&mut self, step: Step, tid: i32) {
        if let Some(h) = self.hook.0.as_mut() {
            h(step, tid);
        }
    }

    fn lock(&mut self) -> Result<Held> {
        if self.lock_file.is_none() {
            // Creates the directory and the file, as the engine's lock does.
            drop(super::engine::lock(&self.state_path)?);
            let path = super::engine::lock_path(&self.state_path);
            self.lock_file = Some(fs::OpenOptions::new().write(true).open(&path).map_err(
                |source| Error::Write {
                    path,
                    data: "(lock)".into(),
                    source,
                },
            )?);
        }
        let fd = std::os::fd::AsRawFd::as_raw_fd(self.lock_file.as_ref().expect("opened above"));
        // SAFETY: flock on an open descriptor owned by self.
        if unsafe { libc::flock(fd, libc::LOCK_EX) } != 0 {
            return Err(Error::syscall(
                "flock(isold lock)",
                nix::errno::Errno::last(),
            ));
        }
        Ok(Held(fd))
    }

    /// Read the state file again (after the general path, or another isold command, wrote it).
    pub fn resync(&mut self) -> Result<()> {
        let _lock = super::engine::lock(&self.state_path)?;
        self.seen = None;
        self.recorded.clear();
        self.journal = None;
        if let Some(st) = State::load(&self.state_path)? {
            self.recorded = st
                .entries()
                .iter()
                .filter(|e| e.id.starts_with("task:"))
                .map(|e| e.id.clone())
                .collect();
            self.seen = file_id(&self.state_path);
        }
        Ok(())
    }

    /// Narrow thread `tid` of process `pid` if the policy says so.
    ///
    /// Long because it is the plan's decision for one thread, the same checks in the same order as
    /// the plan's, so that the two can be compared line by line.
    pub fn fix(&mut self, root: &SysRoot, policy: &Policy, pid: i32, tid: i32) -> Result<Fix> {
        let iso = &policy.isolated;
        let aff = match threads::affinity(root, pid, tid) {
            Some(a) => a,
            None => return Ok(Fix::Gone),
        };
        if aff.is_disjoint(iso) || aff.is_subset(iso) {
            return Ok(Fix::Fine);
        }
        let c = &policy.config;
        if !policy.on("tasks") {
            return Ok(Fix::Fine);
        }
        let stat = match TaskStat::read_path(root, &format!("/proc/{pid}/task/{tid}/stat")) {
            Ok(s) => s,
            Err(e) if matches!(e.errno(), Some(libc::ENOENT) | Some(libc::ESRCH)) => {
                return Ok(Fix::Gone)
            }
            Err(e) => return Err(e),
        };
        let kthread = stat.flags & PF_KTHREAD != 0;
        if kthread
            && c.kthread_priority
                .iter()
                .any(|(p, _)| glob_match(p, &stat.comm))
        {
            return Ok(Fix::UseEngine);
        }
        let verdict = thread_verdict(policy, &aff, stat.flags, &stat.comm, pid, || {
            tasks::cgroup_of(root, pid)
        })?;
        let want = match verdict {
            ThreadVerdict::Narrow(want) => want,
            ThreadVerdict::Leave(Status::LeftAlone { reason })
            | ThreadVerdict::Leave(Status::NotChangeable { reason }) => {
                return Ok(Fix::Settled(reason))
            }
            ThreadVerdict::Leave(other) => return Ok(Fix::Settled(other.to_string())),
        };
        let id = format!("task:{tid}:{}", stat.starttime);
        let label = format!(
            "{} {tid} ({})",
            if kthread { "kthread" } else { "task" },
            stat.comm
        );
        let _lock = self.lock()?;
        let now = file_id(&self.state_path);
        if now.is_none() || now != self.seen {
            return Ok(Fix::UseEngine);
        }
        if !self.recorded.contains(&id) {
            let entry = Entry {
                id: id.clone(),
                item: "tasks".into(),
                label: label.clone(),
                original: Original::Affinity {
                    pid,
                    tid,
                    starttime: stat.starttime,
                    comm: stat.comm.clone(),
                    cpus: aff.to_string(),
                    taken_off: Some(aff.difference(&want).to_string()),
                },
            };
            if !self.append(&entry)? {
                // The journal is due to be folded in: the general path does that.
                return Ok(Fix::UseEngine);
            }
            self.recorded.insert(id);
        }
        self.step(Step::Recorded, tid);
        // Something may have pinned it since it was read (libvirt's <vcpupin>, DPDK, taskset
        // -p, its own creator right after pthread_create, or while the journal was written):
        // it is read again right before the write, with nothing between the two, and a change
        // is the owner's.
        match threads::set_thread_affinity_if(root, pid, tid, &aff, &want) {
            Ok(None) => {}
            // Moved off the isolated CPUs by someone else: nothing left to do.
            Ok(Some(now)) if now.is_disjoint(iso) => return Ok(Fix::Fine),
            Ok(Some(now)) => {
                return Ok(Fix::Contested {
                    label,
                    now: now.to_string(),
                    why: "set while isold looked at it".into(),
                })
            }
            Err(e) => {
                return match threads::refusal(&e) {
                    threads::Refusal::Gone => Ok(Fix::Gone),
                    _ => Err(e),
                }
            }
        }
        self.step(Step::Written, tid);
        // Read back: what isold wrote, or the owner's value set right after (which stands).
        // What this read cannot see is an owner's write between the check and isold's write
        // above: isold's overwrote it (see docs/ARCHITECTURE.md, "Pins").
        match threads::affinity(root, pid, tid) {
            None => Ok(Fix::Gone),
            Some(now) if now == want => Ok(Fix::Changed {
                label,
                from: aff.to_string(),
                to: now.to_string(),
            }),
            Some(now) => Ok(Fix::Contested {
                label,
                now: now.to_string(),
                why: format!("set right after isold wrote {want}"),
            }),
        }
    }
}

impl TaskFixer {
    /// One entry to the journal, through the descriptor kept open; `Ok(false)` when the
    /// journal is due to be folded into a whole write.
    fn append(&mut self, entry: &Entry) -> Result<bool> {
        let jpath = state::journal_path(&self.state_path);
        let werr = |source| Error::Write {
            path: jpath.clone(),
            data: "(isold journal)".into(),
            source,
        };
        if self.journal.is_none() {
            let f = state::open_journal(&jpath).map_err(werr)?;
            // A last line cut short (by another writer, before this one) is ended first.
            self.torn = !state::ends_with_newline(&jpath);
            self.journal = Some(f);
        }
        let f = self.journal.as_mut().expect("opened above");
        if f.metadata().map_err(werr)?.len() > state::JOURNAL_MAX {
            return Ok(false);
        }
        let mut line = if self.torn {
            "\n".to_string()
        } else {
            String::new()
        };
        line.push_str(&state::journal_line(entry));
        let written =
            super::durable::write(f, line.as_bytes()).and_then(|()| super::durable::sync_data(f));
        // A write that failed (a full disk) may have left part of its line.
        self.torn = written.is_err();
        written.map_err(werr)?;
        Ok(true)
    }
}
