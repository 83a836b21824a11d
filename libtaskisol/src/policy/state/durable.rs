//! The writes of the state path (the state files, their journal, the set-aside lines): write,
//! fsync and rename, in one place, so that a test can make each of them fail as a full disk,
//! a failing disk or a crash would (`faults`, with the `fault-injection` feature; without
//! it these are the plain calls).

use std::fs;
use std::io::{self, Write};
use std::path::Path;

/// Write all of `bytes` to `f`.
pub(crate) fn write(f: &mut fs::File, bytes: &[u8]) -> io::Result<()> {
    #[cfg(feature = "fault-injection")]
    if let Some(fault) = faults::at(faults::Point::Write) {
        return faults::write(f, bytes, fault);
    }
    f.write_all(bytes)
}

/// fsync(2) of `f` (a file or a directory).
pub(crate) fn sync_all(f: &fs::File) -> io::Result<()> {
    #[cfg(feature = "fault-injection")]
    if faults::at(faults::Point::Sync).is_some() {
        return Err(io::Error::from_raw_os_error(libc::EIO));
    }
    f.sync_all()
}

/// fdatasync(2) of `f`.
pub(crate) fn sync_data(f: &fs::File) -> io::Result<()> {
    #[cfg(feature = "fault-injection")]
    if faults::at(faults::Point::Sync).is_some() {
        return Err(io::Error::from_raw_os_error(libc::EIO));
    }
    f.sync_data()
}

/// rename(2) of `from` to `to`.
pub(crate) fn rename(from: &Path, to: &Path) -> io::Result<()> {
    #[cfg(feature = "fault-injection")]
    if faults::at(faults::Point::Rename).is_some() {
        faults::crash();
    }
    fs::rename(from, to)
}

/// Faults injected into the state path's writes, for tests (feature `fault-injection`). The
/// plan is the calling thread's own: tests run side by side, and the state path writes on the
/// thread that called apply, restore or the fast path. A crash unwinds with [`Crash`] (no
/// panic message: `resume_unwind`) and nothing after it runs, as after a power cut; the files
/// are left as the crash found them.
#[cfg(feature = "fault-injection")]
pub mod faults {
    use std::cell::RefCell;
    use std::fs;
    use std::io::{self, Write};

    /// What goes wrong.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Fault {
        /// A write stops half way and the machine stops with it.
        ShortWrite,
        /// A write stops half way with ENOSPC (a full directory); the caller goes on.
        NoSpace,
        /// fsync or fdatasync fails with EIO.
        EioAtSync,
        /// The machine stops just before a rename.
        CrashBeforeRename,
    }

    impl Fault {
        /// Every fault.
        pub const ALL: [Fault; 4] = [
            Fault::ShortWrite,
            Fault::NoSpace,
            Fault::EioAtSync,
            Fault::CrashBeforeRename,
        ];

        /// The operation it happens at.
        pub fn point(self) -> Point {
            match self {
                Fault::ShortWrite | Fault::NoSpace => Point::Write,
                Fault::EioAtSync => Point::Sync,
                Fault::CrashBeforeRename => Point::Rename,
            }
        }
    }

    /// An operation of the state path.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Point {
        /// A write of bytes.
        Write,
        /// An fsync or fdatasync.
        Sync,
        /// A rename.
        Rename,
    }

    /// How many operations of each kind a run made.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct Counts {
        /// Writes.
        pub writes: usize,
        /// fsyncs and fdatasyncs.
        pub syncs: usize,
        /// Renames.
        pub renames: usize,
    }

    impl Counts {
        /// The operations of `point`.
        pub fn of(&self, point: Point) -> usize {
            match point {
                Point::Write => self.writes,
                Point::Sync => self.syncs,
                Point::Rename => self.renames,
            }
        }
    }

    /// The payload of an injected crash.
    #[derive(Debug)]
    pub struct Crash;

    /// What a run under a fault did.
    #[derive(Debug)]
    pub enum Run<R> {
        /// It crashed at the fault: nothing after it ran.
        Crashed,
        /// It returned (after meeting the fault, or without: see `hit`).
        Returned {
            /// What it returned.
            value: R,
            /// Whether the fault was met.
            hit: bool,
        },
    }

    struct Plan {
        fault: Option<(Fault, usize)>,
        counts: Counts,
        hit: bool,
    }

    thread_local! {
        static PLAN: RefCell<Option<Plan>> = const { RefCell::new(None) };
    }

    /// Run `f`, counting the state path's operations it makes on this thread.
    pub fn count<R>(f: impl FnOnce() -> R) -> (R, Counts) {
        let Run::Returned { value, .. } = under(None, f) else {
            unreachable!("no fault, no crash")
        };
        let counts = PLAN.with(|p| p.borrow_mut().take().map(|p| p.counts));
        (value, counts.unwrap_or_default())
    }

    /// Run `f` with `fault` at the `nth` operation (from 0) of its kind.
    pub fn inject<R>(fault: Fault, nth: usize, f: impl FnOnce() -> R) -> Run<R> {
        let run = under(Some((fault, nth)), f);
        PLAN.with(|p| p.borrow_mut().take());
        run
    }

    fn under<R>(fault: Option<(Fault, usize)>, f: impl FnOnce() -> R) -> Run<R> {
        PLAN.with(|p| {
            *p.borrow_mut() = Some(Plan {
                fault,
                counts: Counts::default(),
                hit: false,
            })
        });
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(value) => Run::Returned {
                value,
                hit: PLAN.with(|p| p.borrow().as_ref().is_some_and(|p| p.hit)),
            },
            Err(payload) if payload.is::<Crash>() => Run::Crashed,
            Err(payload) => std::panic::resume_unwind(payload),
        }
    }

    /// Count an operation at `point`; the fault when it is the one planned.
    pub(super) fn at(point: Point) -> Option<Fault> {
        PLAN.with(|p| {
            let mut p = p.borrow_mut();
            let plan = p.as_mut()?;
            let n = plan.counts.of(point);
            match point {
                Point::Write => plan.counts.writes += 1,
                Point::Sync => plan.counts.syncs += 1,
                Point::Rename => plan.counts.renames += 1,
            }
            let (fault, nth) = plan.fault?;
            (fault.point() == point && nth == n).then(|| {
                plan.hit = true;
                fault
            })
        })
    }

    /// The first half of `bytes` written, then the fault.
    pub(super) fn write(f: &mut fs::File, bytes: &[u8], fault: Fault) -> io::Result<()> {
        f.write_all(&bytes[..bytes.len() / 2])?;
        match fault {
            Fault::NoSpace => Err(io::Error::from_raw_os_error(libc::ENOSPC)),
            _ => crash(),
        }
    }

    /// Stop here, as the machine would.
    pub(super) fn crash() -> ! {
        std::panic::resume_unwind(Box::new(Crash))
    }
}
