//! Safe task-isolation API for the calling task (patched kernels only).
//!
//! # Safety on stock kernels
//!
//! The prctl numbers of the task-isolation series (63..67) were later reused by mainline for
//! unrelated operations: `PR_SME_SET_VL`/`PR_SME_GET_VL` (arm64), `PR_SET_MDWE`,
//! `PR_GET_MDWE` and `PR_SET_MEMORY_MERGE` (6.4+). On a stock kernel, `prctl(67, ..)` run
//! as root *enables KSM merging for the process* and returns 0, looking like a successful
//! activation; 65 can make the process's memory permanently non-executable-writable.
//!
//! This module therefore makes it impossible to issue those prctls without positive
//! detection: every call is a method of [`TaskIsolation`], and the only way to obtain a
//! `TaskIsolation` is [`TaskIsolation::detect`], which succeeds only when the running
//! kernel's `/proc/self/task_isolation` exists and reads in the exact format of the series.
//! Detection reads nothing but that file and issues no prctl. It deliberately ignores any
//! [`SysRoot`](crate::SysRoot): a fixture tree describes some other machine, and must never
//! unlock system calls on this one.
//!
//! All calls act on the calling *thread*: the kernel has no pid argument. Configure before
//! creating threads (or use inheritance), and call from the thread that will run isolated.

use std::fmt;

use nix::errno::Errno;

use crate::abi;
use crate::error::{Error, Result, Unsupported};
use crate::procfs::TaskIsolationState;

/// The file whose existence proves the kernel carries the task-isolation patches.
pub const PROBE_PATH: &str = "/proc/self/task_isolation";

/// Parse a comma-separated list of quiesce names (`vmstat_sync`) into quiesce bits.
pub fn parse_quiesce_list(list: &str) -> Result<u64> {
    let mut mask = 0;
    for name in list.split(',') {
        let name = name.trim();
        match abi::QUIESCE_NAMES.iter().find(|(_, n)| *n == name) {
            Some((bit, _)) => mask |= bit,
            None => {
                let known: Vec<&str> = abi::QUIESCE_NAMES.iter().map(|(_, n)| *n).collect();
                return Err(Error::Invalid(format!(
                    "unknown quiesce feature {name:?} (supported: {})",
                    known.join(", ")
                )));
            }
        }
    }
    Ok(mask)
}

/// Names of quiesce bits, comma-separated (`vmstat_sync`).
pub fn quiesce_names(mask: u64) -> String {
    let v: Vec<&str> = abi::QUIESCE_NAMES
        .iter()
        .filter(|(b, _)| mask & b != 0)
        .map(|(_, n)| *n)
        .collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(",")
    }
}

/// The quiesce configuration of a task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuiesceConfig {
    /// Quiesce bits performed on every return to user mode while active.
    pub mask: u64,
    /// Bits performed once and then cleared from `mask` (must be within `mask`).
    pub oneshot: u64,
}

impl QuiesceConfig {
    /// Quiesce `mask` on every return to user mode.
    pub fn every_time(mask: u64) -> Self {
        QuiesceConfig { mask, oneshot: 0 }
    }
}

/// What children created by fork/clone inherit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Inherit(pub u8);

impl Inherit {
    /// Nothing is inherited.
    pub const NONE: Inherit = Inherit(0);
    /// Children inherit the configuration (`-I conf`), e.g. worker threads that activate
    /// themselves.
    pub const CONF: Inherit = Inherit(abi::ISOL_INHERIT_CONF);
    /// Children inherit the configuration and the active state (`-I active`).
    pub const ACTIVE: Inherit = Inherit(abi::ISOL_INHERIT_CONF | abi::ISOL_INHERIT_ACTIVE);

    /// Parse chisol's `conf` / `active`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "conf" => Ok(Inherit::CONF),
            "active" => Ok(Inherit::ACTIVE),
            _ => Err(Error::Invalid(format!(
                "unknown inheritance {s:?} (use conf or active)"
            ))),
        }
    }
}

impl fmt::Display for Inherit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Inherit::NONE => f.write_str("none"),
            Inherit::CONF => f.write_str("conf"),
            Inherit::ACTIVE => f.write_str("active"),
            Inherit(other) => write!(f, "0x{other:x}"),
        }
    }
}

/// Proof that the running kernel has the task-isolation interface, and the handle through
/// which its prctls are issued. See the module documentation for why this matters.
#[derive(Debug)]
pub struct TaskIsolation {
    // Private: only `detect` constructs it.
    _proof: (),
}

/// Why reading the probe file failed: ENOENT means a kernel without the interface; any other
/// error keeps its errno (an EACCES or EIO must not read as "no such kernel feature").
fn probe_read_error(e: &std::io::Error) -> Unsupported {
    match e.raw_os_error() {
        Some(libc::ENOENT) => Unsupported::NoProcFile,
        Some(n) => Unsupported::Unreadable {
            op: "read /proc/self/task_isolation",
            errno: Errno::from_raw(n),
        },
        // read_to_string's only error without an errno: the file is not UTF-8.
        None => Unsupported::UnknownFormat(e.to_string()),
    }
}

fn op_name(option: i32) -> &'static str {
    match option {
        abi::PR_ISOL_FEAT_GET => "PR_ISOL_FEAT_GET",
        abi::PR_ISOL_CFG_GET => "PR_ISOL_CFG_GET",
        abi::PR_ISOL_CFG_SET => "PR_ISOL_CFG_SET",
        abi::PR_ISOL_ACTIVATE_GET => "PR_ISOL_ACTIVATE_GET",
        abi::PR_ISOL_ACTIVATE_SET => "PR_ISOL_ACTIVATE_SET",
        _ => "unknown",
    }
}

impl TaskIsolation {
    /// Detect the interface without side effects: succeeds only when the running kernel's
    /// `/proc/self/task_isolation` exists and is in the series' three-line format.
    /// No prctl is issued.
    pub fn detect() -> std::result::Result<TaskIsolation, Unsupported> {
        // /proc must be procfs: a tmpfs or bind-mounted fake /proc (containers) must not
        // unlock prctl 67, which on a stock kernel run as root enables KSM merging.
        let fs = nix::sys::statfs::statfs("/proc").map_err(|errno| Unsupported::Unreadable {
            op: "statfs /proc",
            errno,
        })?;
        if fs.filesystem_type() != nix::sys::statfs::PROC_SUPER_MAGIC {
            return Err(Unsupported::NotProcfs {
                magic: fs.filesystem_type().0 as i64,
            });
        }
        match std::fs::read_to_string(PROBE_PATH) {
            Ok(content) => match TaskIsolationState::parse(&content) {
                Ok(_) => Ok(TaskIsolation { _proof: () }),
                Err(reason) => Err(Unsupported::UnknownFormat(reason)),
            },
            Err(e) => Err(probe_read_error(&e)),
        }
    }

    fn prctl(&self, option: i32, args: [u64; 4], desc: &str) -> Result<i32> {
        debug_assert!(abi::PR_ISOL_ALL.contains(&option));
        // SAFETY: `self` proves the kernel implements these options; every pointer argument
        // the callers pass points to a live, correctly sized #[repr(C)] value.
        let ret = unsafe {
            libc::prctl(
                option,
                args[0] as libc::c_ulong,
                args[1] as libc::c_ulong,
                args[2] as libc::c_ulong,
                args[3] as libc::c_ulong,
            )
        };
        if ret < 0 {
            return Err(Error::Prctl {
                op: format!("{}({desc})", op_name(option)),
                errno: Errno::last(),
            });
        }
        Ok(ret)
    }

    /// Supported features (`ISOL_F_QUIESCE`).
    pub fn features(&self) -> Result<u64> {
        let mut mask: u64 = 0;
        self.prctl(
            abi::PR_ISOL_FEAT_GET,
            [0, &mut mask as *mut u64 as u64, 0, 0],
            "0",
        )?;
        Ok(mask)
    }

    /// Supported quiesce bits (`ISOL_F_QUIESCE_VMSTATS`).
    pub fn supported_quiesce(&self) -> Result<u64> {
        let mut ext = abi::TaskIsolQuiesceExtensions::default();
        self.prctl(
            abi::PR_ISOL_FEAT_GET,
            [
                abi::ISOL_F_QUIESCE,
                &mut ext as *mut abi::TaskIsolQuiesceExtensions as u64,
                0,
                0,
            ],
            "ISOL_F_QUIESCE",
        )?;
        Ok(ext.supported_quiesce_bits)
    }

    /// Configured features of the calling thread (0 when none).
    pub fn configured(&self) -> Result<u64> {
        let mut mask: u64 = 0;
        self.prctl(
            abi::PR_ISOL_CFG_GET,
            [abi::I_CFG_FEAT, 0, &mut mask as *mut u64 as u64, 0],
            "I_CFG_FEAT, 0",
        )?;
        Ok(mask)
    }

    /// The quiesce mask of the calling thread (the kernel does not return the oneshot mask).
    pub fn quiesce_mask(&self) -> Result<u64> {
        let mut ctl = abi::TaskIsolQuiesceControl::default();
        self.prctl(
            abi::PR_ISOL_CFG_GET,
            [
                abi::I_CFG_FEAT,
                abi::ISOL_F_QUIESCE,
                abi::QUIESCE_CONTROL,
                &mut ctl as *mut abi::TaskIsolQuiesceControl as u64,
            ],
            "I_CFG_FEAT, ISOL_F_QUIESCE, QUIESCE_CONTROL",
        )?;
        Ok(ctl.quiesce_mask)
    }

    /// Configure quiescing for the calling thread (allocates its isolation context).
    pub fn set_quiesce(&self, cfg: QuiesceConfig) -> Result<()> {
        let ctl = abi::TaskIsolQuiesceControl {
            flags: 0,
            quiesce_mask: cfg.mask,
            quiesce_oneshot_mask: cfg.oneshot,
            pad: [0; 5],
        };
        self.prctl(
            abi::PR_ISOL_CFG_SET,
            [
                abi::I_CFG_FEAT,
                abi::ISOL_F_QUIESCE,
                abi::QUIESCE_CONTROL,
                &ctl as *const abi::TaskIsolQuiesceControl as u64,
            ],
            &format!(
                "I_CFG_FEAT, ISOL_F_QUIESCE, QUIESCE_CONTROL, quiesce_mask={}, oneshot={}",
                quiesce_names(cfg.mask),
                quiesce_names(cfg.oneshot)
            ),
        )?;
        Ok(())
    }

    /// Inheritance of the calling thread (EINVAL when it has no isolation context yet).
    pub fn inherit(&self) -> Result<Inherit> {
        let mut ctl = abi::TaskIsolInheritControl::default();
        self.prctl(
            abi::PR_ISOL_CFG_GET,
            [
                abi::I_CFG_INHERIT,
                &mut ctl as *mut abi::TaskIsolInheritControl as u64,
                0,
                0,
            ],
            "I_CFG_INHERIT",
        )?;
        Ok(Inherit(ctl.inherit_mask))
    }

    /// Set what children of the calling thread inherit.
    pub fn set_inherit(&self, inherit: Inherit) -> Result<()> {
        let ctl = abi::TaskIsolInheritControl {
            inherit_mask: inherit.0,
            flags: 0,
            pad: [0; 6],
        };
        self.prctl(
            abi::PR_ISOL_CFG_SET,
            [
                abi::I_CFG_INHERIT,
                &ctl as *const abi::TaskIsolInheritControl as u64,
                0,
                0,
            ],
            &format!("I_CFG_INHERIT, {inherit}"),
        )?;
        Ok(())
    }

    /// Active features of the calling thread (EINVAL when it has no isolation context).
    pub fn active(&self) -> Result<u64> {
        let mut mask: u64 = 0;
        self.prctl(
            abi::PR_ISOL_ACTIVATE_GET,
            [&mut mask as *mut u64 as u64, 0, 0, 0],
            "",
        )?;
        Ok(mask)
    }

    /// Activate `features` (`ISOL_F_QUIESCE`) for the calling thread; 0 deactivates.
    pub fn activate(&self, features: u64) -> Result<()> {
        let mask = features;
        self.prctl(
            abi::PR_ISOL_ACTIVATE_SET,
            [&mask as *const u64 as u64, 0, 0, 0],
            &format!("{features:#x}"),
        )?;
        Ok(())
    }

    /// Deactivate everything for the calling thread.
    pub fn deactivate(&self) -> Result<()> {
        self.activate(0)
    }

    /// The calling thread's state as `/proc/<tid>/task_isolation` shows it.
    pub fn thread_state(&self) -> Result<TaskIsolationState> {
        let tid = nix::unistd::gettid().as_raw();
        TaskIsolationState::read(&crate::SysRoot::host(), tid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiesce_names_parse() {
        assert_eq!(
            parse_quiesce_list("vmstat_sync").unwrap(),
            abi::ISOL_F_QUIESCE_VMSTATS
        );
        let e = parse_quiesce_list("vmstat_sync,tlb").unwrap_err();
        assert!(e.to_string().contains("\"tlb\""), "{e}");
        assert!(e.to_string().contains("vmstat_sync"), "{e}");
        assert_eq!(quiesce_names(1), "vmstat_sync");
        assert_eq!(quiesce_names(0), "none");
    }

    #[test]
    fn inherit_parses_chisol_words() {
        assert_eq!(Inherit::parse("conf").unwrap().0, abi::ISOL_INHERIT_CONF);
        assert_eq!(
            Inherit::parse("active").unwrap().0,
            abi::ISOL_INHERIT_CONF | abi::ISOL_INHERIT_ACTIVE
        );
        assert!(Inherit::parse("all").is_err());
        // Display names what the kernel reports, even a mask chisol never sets.
        let shown: Vec<String> = [Inherit::NONE, Inherit::CONF, Inherit::ACTIVE, Inherit(2)]
            .iter()
            .map(Inherit::to_string)
            .collect();
        assert_eq!(shown, ["none", "conf", "active", "0x2"]);
    }

    #[test]
    fn an_unreadable_probe_keeps_its_errno() {
        let e = probe_read_error(&std::io::Error::from_raw_os_error(libc::EACCES));
        assert_eq!(
            e,
            Unsupported::Unreadable {
                op: "read /proc/self/task_isolation",
                errno: Errno::EACCES
            }
        );
        assert_eq!(
            e.to_string(),
            "task isolation interface not usable: cannot read /proc/self/task_isolation: Permission denied"
        );
        assert_eq!(Error::from(e).errno(), Some(libc::EACCES));
        assert_eq!(
            probe_read_error(&std::io::Error::from_raw_os_error(libc::ENOENT)),
            Unsupported::NoProcFile
        );
        let e = probe_read_error(&std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        ));
        assert!(matches!(e, Unsupported::UnknownFormat(_)), "{e}");
        assert_eq!(Error::from(e).errno(), None);
    }

    #[test]
    fn detection_is_negative_on_a_stock_kernel() {
        // This host runs a stock kernel (the test suite never runs on a patched one outside
        // the emulator, which tests the positive case end to end).
        if std::path::Path::new(PROBE_PATH).exists() {
            assert!(TaskIsolation::detect().is_ok());
        } else {
            assert_eq!(
                TaskIsolation::detect().unwrap_err(),
                Unsupported::NoProcFile
            );
        }
    }
}
