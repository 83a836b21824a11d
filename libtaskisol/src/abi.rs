//! The task-isolation prctl ABI of the out-of-tree "extensible prctl task isolation interface
//! and vmstat sync" series (v8..v12, 2021-2022), exactly as the patched kernels define it.
//!
//! These are raw numbers and `#[repr(C)]` structures. They are public so that other tools can
//! interoperate, but **do not pass them to `prctl(2)` yourself**: mainline Linux later gave the
//! same numbers to unrelated prctls (63/64 = `PR_SME_SET_VL`/`PR_SME_GET_VL` on arm64,
//! 65/66 = `PR_SET_MDWE`/`PR_GET_MDWE`, 67 = `PR_SET_MEMORY_MERGE`). On a stock 6.4+ kernel
//! `prctl(67, ..)` run as root silently enables KSM merging for the process and returns 0.
//! Use [`crate::isolation::TaskIsolation`], which can only be obtained after the interface was
//! positively detected through `/proc/self/task_isolation`.

/// `prctl` option: read the supported feature mask, or a feature's extensions.
pub const PR_ISOL_FEAT_GET: i32 = 63;
/// `prctl` option: read the configuration of the calling task.
pub const PR_ISOL_CFG_GET: i32 = 64;
/// `prctl` option: change the configuration of the calling task.
pub const PR_ISOL_CFG_SET: i32 = 65;
/// `prctl` option: read the active feature mask of the calling task.
pub const PR_ISOL_ACTIVATE_GET: i32 = 66;
/// `prctl` option: activate (or deactivate, with 0) configured features.
pub const PR_ISOL_ACTIVATE_SET: i32 = 67;

/// All five task-isolation prctl options, lowest first.
pub const PR_ISOL_ALL: [i32; 5] = [
    PR_ISOL_FEAT_GET,
    PR_ISOL_CFG_GET,
    PR_ISOL_CFG_SET,
    PR_ISOL_ACTIVATE_GET,
    PR_ISOL_ACTIVATE_SET,
];

/// `what` argument of CFG_GET/CFG_SET: the feature configuration.
pub const I_CFG_FEAT: u64 = 1;
/// `what` argument of CFG_GET/CFG_SET: the inheritance control.
pub const I_CFG_INHERIT: u64 = 2;

/// Feature bit: quiescing of deferred kernel activity on return to user mode.
pub const ISOL_F_QUIESCE: u64 = 1 << 0;

/// Quiesce bit, defined by the series but unused.
pub const ISOL_F_QUIESCE_MULTIPLE: u64 = 1 << 0;
/// Quiesce bit: sync per-CPU vmstat counters (user-visible name `vmstat_sync`).
pub const ISOL_F_QUIESCE_VMSTATS: u64 = 1 << 0;

/// Inheritance bit: children inherit the configuration.
pub const ISOL_INHERIT_CONF: u8 = 1 << 0;
/// Inheritance bit: children also inherit the active state (requires [`ISOL_INHERIT_CONF`]).
pub const ISOL_INHERIT_ACTIVE: u8 = 1 << 1;

/// Must be passed as arg4 of the quiesce CFG_GET/CFG_SET calls.
pub const QUIESCE_CONTROL: u64 = 1 << 0;

/// `struct task_isol_quiesce_extensions` (64 bytes), filled by
/// `prctl(PR_ISOL_FEAT_GET, ISOL_F_QUIESCE, &ext)`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TaskIsolQuiesceExtensions {
    /// Reserved, 0.
    pub flags: u64,
    /// Quiesce bits the kernel supports ([`ISOL_F_QUIESCE_VMSTATS`]).
    pub supported_quiesce_bits: u64,
    /// Reserved.
    pub pad: [u64; 6],
}

/// `struct task_isol_quiesce_control` (64 bytes), for the quiesce CFG_GET/CFG_SET calls.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TaskIsolQuiesceControl {
    /// Must be 0.
    pub flags: u64,
    /// Quiesce bits to perform while active.
    pub quiesce_mask: u64,
    /// Quiesce bits to perform once, then clear from `quiesce_mask` (must be within it).
    pub quiesce_oneshot_mask: u64,
    /// Reserved.
    pub pad: [u64; 5],
}

/// `struct task_isol_inherit_control` (8 bytes), for the I_CFG_INHERIT calls.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TaskIsolInheritControl {
    /// [`ISOL_INHERIT_CONF`] and/or [`ISOL_INHERIT_ACTIVE`].
    pub inherit_mask: u8,
    /// Must be 0.
    pub flags: u8,
    /// Reserved.
    pub pad: [u8; 6],
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<TaskIsolQuiesceExtensions>() == 64);
    assert!(offset_of!(TaskIsolQuiesceExtensions, flags) == 0);
    assert!(offset_of!(TaskIsolQuiesceExtensions, supported_quiesce_bits) == 8);
    assert!(offset_of!(TaskIsolQuiesceExtensions, pad) == 16);

    assert!(size_of::<TaskIsolQuiesceControl>() == 64);
    assert!(offset_of!(TaskIsolQuiesceControl, flags) == 0);
    assert!(offset_of!(TaskIsolQuiesceControl, quiesce_mask) == 8);
    assert!(offset_of!(TaskIsolQuiesceControl, quiesce_oneshot_mask) == 16);
    assert!(offset_of!(TaskIsolQuiesceControl, pad) == 24);

    assert!(size_of::<TaskIsolInheritControl>() == 8);
    assert!(offset_of!(TaskIsolInheritControl, inherit_mask) == 0);
    assert!(offset_of!(TaskIsolInheritControl, flags) == 1);
    assert!(offset_of!(TaskIsolInheritControl, pad) == 2);
};

/// Names of the quiesce bits, as the kernel prints them in `/proc/<pid>/task_isolation`
/// ("Quiescing:" line) and as chisol accepts them in `-q`.
pub const QUIESCE_NAMES: &[(u64, &str)] = &[(ISOL_F_QUIESCE_VMSTATS, "vmstat_sync")];

/// Names of the feature bits ("Configured state:" and "Active state:" lines).
pub const FEATURE_NAMES: &[(u64, &str)] = &[(ISOL_F_QUIESCE, "quiesce")];
