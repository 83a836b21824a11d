//! The ground apply ([`super::engine`]) and restore ([`super::restore`]) both stand on: the
//! state file's lock, a report's head and its note on set-aside journal lines, whole-file
//! writes and removals with the directories made for them, and runs of per-thread work
//! spread over this process's CPUs. It imports neither of them.

use std::fs;
use std::path::{Path, PathBuf};

use super::state::{self, Ledger, Original};
use super::{Policy, Report, Status};
use crate::error::{Error, Result};
use crate::sysroot::SysRoot;

pub(crate) fn failed(e: impl std::fmt::Display) -> Status {
    Status::Failed {
        error: e.to_string(),
    }
}

/// Write a whole file atomically, keeping its owner and mode, creating its directory (see
/// [`super::files::replace`]).
pub(crate) fn write_file(root: &SysRoot, abs: &str, content: &str) -> Result<()> {
    let path = root.path(abs);
    let err = |source| Error::Write {
        path: path.clone(),
        data: content.lines().next().unwrap_or("").to_string(),
        source,
    };
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(err)?;
    }
    super::files::replace(&path, content.as_bytes(), None).map_err(err)
}

pub(crate) fn remove_file(root: &SysRoot, abs: &str) -> Result<()> {
    let path = root.path(abs);
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Error::Write {
            path,
            data: "(remove)".into(),
            source,
        }),
    }
}

/// Remove the directories between `abs` and `created` (inclusive) that are empty: the ones
/// apply made for the file. A directory something else has filled since stays (removing it
/// fails, and so does removing any directory above it).
pub(crate) fn remove_created_dirs(root: &SysRoot, abs: &str, created: Option<&str>) {
    let Some(created) = created else {
        return;
    };
    for d in Path::new(abs)
        .ancestors()
        .skip(1)
        .take_while(|d| d.starts_with(created))
    {
        let _ = fs::remove_dir(root.path(d));
    }
}

/// An exclusive lock next to the state file, so two isold commands never interleave.
pub struct StateLock {
    _lock: nix::fcntl::Flock<fs::File>,
}

impl std::fmt::Debug for StateLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateLock")
    }
}

/// The lock file of the state file `state_path`.
pub fn lock_path(state_path: &Path) -> PathBuf {
    state_path
        .parent()
        .unwrap_or(Path::new("."))
        .join(".isold.lock")
}

/// Take the lock of the state file `state_path` (waiting for another isold command).
pub fn lock(state_path: &Path) -> Result<StateLock> {
    let dir = state_path.parent().unwrap_or(Path::new("."));
    let lock_path = lock_path(state_path);
    let werr = |p: &Path, source| Error::Write {
        path: p.into(),
        data: "(lock)".into(),
        source,
    };
    super::files::private_dir(dir).map_err(|e| werr(dir, e))?;
    let f = {
        use std::os::unix::fs::OpenOptionsExt;
        fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(super::files::NOFOLLOW)
            .open(&lock_path)
            .map_err(|e| werr(&lock_path, e))?
    };
    let lock = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, errno)| Error::syscall(format!("flock({})", lock_path.display()), errno))?;
    Ok(StateLock { _lock: lock })
}

pub(crate) fn report(command: &str, policy: Option<&Policy>) -> Report {
    Report {
        command: command.into(),
        isolated: policy.map(|p| p.isolated.to_string()).unwrap_or_default(),
        housekeeping: policy
            .map(|p| p.housekeeping.to_string())
            .unwrap_or_default(),
        ..Report::default()
    }
}

/// The journal lines that were not entries (an append cut short by a full disk), said once
/// per report: the originals before and after them are used.
pub(crate) fn set_aside_note(ledger: &Ledger, rep: &mut Report) {
    let n = ledger.state.set_aside.len();
    if n > 0 {
        let journal = state::journal_path(ledger.runtime_path());
        rep.set_aside = n;
        rep.notes.push(format!(
            "{}: {n} line(s) are not whole isold entries (a write cut short by a full disk or a crash, or changed since); every other line is used, and these are kept in {} for you to look at",
            journal.display(),
            state::set_aside_path(ledger.runtime_path()).display()
        ));
    }
}

/// Whether restoring `o` puts back one thread's value and nothing else (the engine's
/// `per_thread` for a change).
pub(crate) fn per_thread_original(o: &Original) -> bool {
    matches!(
        o,
        Original::Affinity { .. } | Original::Sched { .. } | Original::Loan { .. }
    )
}

/// Threads changed or restored at once per worker, at least (a worker's start costs about
/// as much as a few dozen changes).
pub(crate) const THREADS_PER_WORKER: usize = 1000;

/// `one` of each item, in order: runs of items that `independent` says touch one thread
/// each on this process's CPUs ([`crate::par`], timed as `workers what`), every other item
/// alone, in order.
pub(crate) fn in_runs<T: Sync, R: Send>(
    items: &[T],
    independent: impl Fn(&T) -> bool,
    what: &str,
    one: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let mut out = Vec::with_capacity(items.len());
    for run in items.chunk_by(|a, b| independent(a) == independent(b)) {
        if independent(&run[0]) {
            out.extend(crate::cost::stage("workers", what, || {
                crate::par::map(run, THREADS_PER_WORKER, &one)
            }));
        } else {
            out.extend(run.iter().map(&one));
        }
    }
    out
}
