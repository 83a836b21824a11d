//! The library's error type. Every variant carries what a user needs to act: the file, the
//! value, the operation and the errno. Errors print with `Display`; `source()` chains the
//! underlying I/O error where there is one.

use std::io;
use std::path::PathBuf;

use nix::errno::Errno;

use crate::cpuset::CpuSetError;

/// Result alias of the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why the task-isolation interface cannot be used on this kernel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    /// `/proc/self/task_isolation` does not exist: the kernel lacks the task-isolation patches.
    #[error("task isolation interface not available: the kernel has no /proc/self/task_isolation (it needs the out-of-tree task-isolation patches)")]
    NoProcFile,
    /// The file exists but is not in the format of the supported ABI (v8..v12).
    #[error("task isolation interface not recognised: /proc/self/task_isolation has an unknown format ({0}); refusing to issue prctls 63..67")]
    UnknownFormat(String),
    /// `/proc` is not a procfs mount (a tmpfs or a bind mount, as in some containers): its
    /// `self/task_isolation` says nothing about the running kernel.
    #[error("task isolation interface not usable: /proc is not a procfs mount (file system magic {magic:#x}); refusing to issue prctls 63..67")]
    NotProcfs {
        /// `f_type` of statfs(2) on `/proc`.
        magic: i64,
    },
    /// A call needed for detection failed: `op` is `statfs /proc` or `read
    /// /proc/self/task_isolation`.
    #[error("task isolation interface not usable: cannot {op}: {}", strerror(*errno))]
    Unreadable {
        /// What failed.
        op: &'static str,
        /// Its errno.
        errno: Errno,
    },
}

/// Errors of libtaskisol.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading a file failed.
    #[error("failed to read {}: {}", path.display(), io_strerror(source))]
    Read {
        /// The real path (below the sysroot).
        path: PathBuf,
        /// The I/O error, with its errno.
        source: io::Error,
    },
    /// Writing a file failed.
    #[error("failed to write '{}' to {}: {}", data.trim_end(), path.display(), io_strerror(source))]
    Write {
        /// The real path (below the sysroot).
        path: PathBuf,
        /// What was written.
        data: String,
        /// The I/O error, with its errno.
        source: io::Error,
    },
    /// A file's content is not in the expected format.
    #[error("unexpected content in {}: {reason}: {input:?}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The offending text.
        input: String,
        /// What was expected.
        reason: String,
    },
    /// A CPU list or mask is invalid.
    #[error(transparent)]
    CpuSet(#[from] CpuSetError),
    /// The task-isolation interface is not available.
    #[error(transparent)]
    Unsupported(#[from] Unsupported),
    /// A task-isolation prctl failed.
    #[error("prctl {op} failed with {errno:?}: {}", strerror(*errno))]
    Prctl {
        /// The call, e.g. `PR_ISOL_CFG_SET(I_CFG_FEAT, ISOL_F_QUIESCE)`.
        op: String,
        /// The errno the kernel returned.
        errno: Errno,
    },
    /// Another system call failed.
    #[error("{op} failed with {errno:?}: {}", strerror(*errno))]
    Syscall {
        /// What was attempted, with its arguments.
        op: String,
        /// The errno.
        errno: Errno,
    },
    /// A request that cannot be satisfied (bad value, missing prerequisite).
    #[error("{0}")]
    Invalid(String),
    /// The originals of the values an apply is about to change could not be written to the
    /// state directory (full, read-only, failing): the apply stops before its first change.
    #[error("cannot record the original values in {}: writing {}: {}; nothing was changed", dir.display(), file.display(), io_strerror(source))]
    Record {
        /// The state directory.
        dir: PathBuf,
        /// The file whose write failed (a temporary file, the journal, the directory).
        file: PathBuf,
        /// The I/O error, with its errno.
        source: io::Error,
    },
    /// An isold state file that cannot be read as one (corrupt, truncated, of another
    /// version): the message says what the admin can do, since it holds the only copy of the
    /// original values.
    #[error("{}: not a usable isold state file: {reason}. Nothing was changed. It holds the original values of what isold changed: keep a copy and repair it (see FILES in isold(8)), or move it aside (mv {} {}.broken) to start afresh, after which the values found are taken as the originals, some of them perhaps isold's own", path.display(), path.display(), path.display())]
    State {
        /// The state file (or its journal).
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// The C library's text for `errno` (`strerror(3)`), as util-linux prints it: nix's own
/// descriptions differ for some values (EOPNOTSUPP).
pub fn strerror(errno: Errno) -> String {
    let text = io::Error::from_raw_os_error(errno as i32).to_string();
    match text.rfind(" (os error ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// An I/O error's text without Rust's " (os error N)" suffix, so messages end in the
/// strerror(3) text as util-linux prints them.
pub fn io_strerror(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => strerror(Errno::from_raw(n)),
        None => e.to_string(),
    }
}

impl Error {
    /// The errno behind this error, if there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Read { source, .. }
            | Error::Write { source, .. }
            | Error::Record { source, .. } => source.raw_os_error(),
            Error::Prctl { errno, .. }
            | Error::Syscall { errno, .. }
            | Error::Unsupported(Unsupported::Unreadable { errno, .. }) => Some(*errno as i32),
            _ => None,
        }
    }

    pub(crate) fn syscall(op: impl Into<String>, errno: Errno) -> Self {
        Error::Syscall {
            op: op.into(),
            errno,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_like_util_linux() {
        assert_eq!(strerror(Errno::EOPNOTSUPP), "Operation not supported");
        let e = Error::Prctl {
            op: "PR_ISOL_CFG_SET(I_CFG_INHERIT, conf)".into(),
            errno: Errno::EINVAL,
        };
        assert_eq!(
            e.to_string(),
            "prctl PR_ISOL_CFG_SET(I_CFG_INHERIT, conf) failed with EINVAL: Invalid argument"
        );
        assert_eq!(e.errno(), Some(libc::EINVAL));
        let e = Error::Write {
            path: "/sys/fs/cgroup/rt/cgroup.procs".into(),
            data: "123\n".into(),
            source: io::Error::from_raw_os_error(libc::EBUSY),
        };
        assert_eq!(
            e.to_string(),
            "failed to write '123' to /sys/fs/cgroup/rt/cgroup.procs: Device or resource busy"
        );
    }
}
