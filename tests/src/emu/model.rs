//! The emulated kernel side of the task-isolation series: the per-task `task_isol_info`, the
//! five prctls, inheritance at fork, the quiesce point on return to user mode and the
//! `/proc/<pid>/task_isolation` text.
//!
//! Pure logic: user memory is reached through [`UserMemory`], so the rules can be unit-tested
//! without a tracee. The ptrace side lives in `tracer.rs`. Where each rule comes from is listed
//! at the top of `isol-emu.rs`.

use libtaskisol::abi::{
    TaskIsolInheritControl, TaskIsolQuiesceControl, TaskIsolQuiesceExtensions, FEATURE_NAMES,
    ISOL_F_QUIESCE, ISOL_F_QUIESCE_VMSTATS, ISOL_INHERIT_ACTIVE, ISOL_INHERIT_CONF, I_CFG_FEAT,
    I_CFG_INHERIT, PR_ISOL_ACTIVATE_GET, PR_ISOL_ACTIVATE_SET, PR_ISOL_CFG_GET, PR_ISOL_CFG_SET,
    PR_ISOL_FEAT_GET, QUIESCE_CONTROL, QUIESCE_NAMES,
};
use nix::errno::Errno;
use serde_json::{json, Value};

/// The emulated `struct task_isol_info`. A task without one has "no context": `None` in
/// [`TaskIsol`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IsolInfo {
    /// Configured features (`conf_mask`).
    pub conf_mask: u64,
    /// Active features (`active_mask`).
    pub active_mask: u64,
    /// Quiesce bits performed while active.
    pub quiesce_mask: u64,
    /// Quiesce bits performed once, then cleared from `quiesce_mask`.
    pub oneshot_mask: u64,
    /// ISOL_INHERIT_CONF / ISOL_INHERIT_ACTIVE.
    pub inherit_mask: u8,
    /// Not kernel state: how many quiesce points performed a vmstat sync (see
    /// [`exit_to_user_mode`]), so tests can see that activation had an effect.
    pub quiesce_syncs: u64,
}

/// A task's isolation context, `None` until CFG_SET (or inheritance) allocates it.
pub type TaskIsol = Option<IsolInfo>;

/// `copy_to_user`/`copy_from_user` for the calling task; `Err` means the access faulted.
pub trait UserMemory {
    /// Read exactly `buf.len()` bytes at `addr`.
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), Errno>;
    /// Write all of `data` at `addr`.
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), Errno>;
}

/// Runs prctl `option` for the calling task. `None` when `option` is not one of the
/// task-isolation prctls (63..67): the caller lets the real kernel handle it.
///
/// `option` is the C `int` the kernel sees: callers truncate the register to 32 bits first,
/// because `SYSCALL_DEFINE5(prctl, int, option, ...)` does.
pub fn isol_prctl(
    task: &mut TaskIsol,
    option: i32,
    args: [u64; 4],
    mem: &mut dyn UserMemory,
) -> Option<Result<i64, Errno>> {
    let [a2, a3, a4, a5] = args;
    let ret = match option {
        PR_ISOL_FEAT_GET => feat_get(a2, a3, mem),
        PR_ISOL_CFG_GET => cfg_get(task, a2, a3, a4, a5, mem),
        PR_ISOL_CFG_SET => cfg_set(task, a2, a3, a4, a5, mem),
        PR_ISOL_ACTIVATE_GET => activate_get(task, a2, mem),
        PR_ISOL_ACTIVATE_SET => activate_set(task, a2, mem),
        _ => return None,
    };
    Some(ret.map(|()| 0))
}

fn feat_get(what: u64, addr: u64, mem: &mut dyn UserMemory) -> Result<(), Errno> {
    match what {
        0 => mem.write(addr, &ISOL_F_QUIESCE.to_le_bytes()),
        ISOL_F_QUIESCE => {
            let ext = TaskIsolQuiesceExtensions {
                supported_quiesce_bits: ISOL_F_QUIESCE_VMSTATS,
                ..Default::default()
            };
            mem.write(addr, &extensions_bytes(&ext))
        }
        _ => Err(Errno::EINVAL),
    }
}

fn cfg_get(
    task: &TaskIsol,
    what: u64,
    a3: u64,
    a4: u64,
    a5: u64,
    mem: &mut dyn UserMemory,
) -> Result<(), Errno> {
    match what {
        I_CFG_FEAT => match a3 {
            // No context is not an error here: the configured mask of such a task is 0.
            0 => mem.write(a4, &task.map_or(0, |i| i.conf_mask).to_le_bytes()),
            ISOL_F_QUIESCE => {
                if a4 != QUIESCE_CONTROL {
                    return Err(Errno::EINVAL);
                }
                // Only quiesce_mask is reported; the oneshot mask is write-only in the series.
                let ctrl = TaskIsolQuiesceControl {
                    quiesce_mask: task.map_or(0, |i| i.quiesce_mask),
                    ..Default::default()
                };
                mem.write(a5, &control_bytes(&ctrl))
            }
            _ => Err(Errno::EINVAL),
        },
        I_CFG_INHERIT => {
            let info = task.as_ref().ok_or(Errno::EINVAL)?;
            let ctrl = TaskIsolInheritControl {
                inherit_mask: info.inherit_mask,
                ..Default::default()
            };
            mem.write(a3, &inherit_bytes(&ctrl))
        }
        _ => Err(Errno::EINVAL),
    }
}

fn cfg_set(
    task: &mut TaskIsol,
    what: u64,
    a3: u64,
    a4: u64,
    a5: u64,
    mem: &mut dyn UserMemory,
) -> Result<(), Errno> {
    match (what, a3) {
        (I_CFG_FEAT, ISOL_F_QUIESCE) => {
            // arg4 is checked before the structure is read: a bad pointer with a bad arg4 is
            // EINVAL, not EFAULT.
            if a4 != QUIESCE_CONTROL {
                return Err(Errno::EINVAL);
            }
            let mut raw = [0u8; 64];
            mem.read(a5, &mut raw)?;
            let ctrl = control_from_bytes(&raw);
            if ctrl.flags != 0 {
                return Err(Errno::EINVAL);
            }
            if ctrl.quiesce_mask != 0 && ctrl.quiesce_mask != ISOL_F_QUIESCE_VMSTATS {
                return Err(Errno::EINVAL);
            }
            if ctrl.quiesce_oneshot_mask & !ctrl.quiesce_mask != 0 {
                return Err(Errno::EINVAL);
            }
            let info = task.get_or_insert_with(IsolInfo::default);
            info.quiesce_mask = ctrl.quiesce_mask;
            info.oneshot_mask = ctrl.quiesce_oneshot_mask;
            // Even a 0 quiesce mask marks the feature configured.
            info.conf_mask |= ISOL_F_QUIESCE;
            Ok(())
        }
        (I_CFG_FEAT, _) => Err(Errno::EINVAL),
        (I_CFG_INHERIT, _) => {
            let mut raw = [0u8; 8];
            mem.read(a3, &mut raw)?;
            let mask = raw[0];
            if mask & !(ISOL_INHERIT_CONF | ISOL_INHERIT_ACTIVE) != 0 {
                return Err(Errno::EINVAL);
            }
            if mask & ISOL_INHERIT_ACTIVE != 0 && mask & ISOL_INHERIT_CONF == 0 {
                return Err(Errno::EINVAL);
            }
            // The `flags` byte (raw[1]) is not checked: v12's cfg_inherit_set ignores it.
            task.get_or_insert_with(IsolInfo::default).inherit_mask = mask;
            Ok(())
        }
        _ => Err(Errno::EINVAL),
    }
}

fn activate_get(task: &TaskIsol, addr: u64, mem: &mut dyn UserMemory) -> Result<(), Errno> {
    // The context check comes first: no context and a bad pointer is EINVAL.
    let info = task.as_ref().ok_or(Errno::EINVAL)?;
    mem.write(addr, &info.active_mask.to_le_bytes())
}

fn activate_set(task: &mut TaskIsol, addr: u64, mem: &mut dyn UserMemory) -> Result<(), Errno> {
    // Here the read comes first: no context and a bad pointer is EFAULT.
    let mut raw = [0u8; 8];
    mem.read(addr, &mut raw)?;
    let mask = u64::from_le_bytes(raw);
    if mask != 0 && mask != ISOL_F_QUIESCE {
        return Err(Errno::EINVAL);
    }
    // Activation does not require the feature to be configured, only a context.
    let info = task.as_mut().ok_or(Errno::EINVAL)?;
    info.active_mask = mask;
    Ok(())
}

/// The child's context after fork/clone/vfork (`__copy_task_isol`).
pub fn copy_on_fork(parent: &TaskIsol) -> TaskIsol {
    let parent = parent.as_ref()?;
    if parent.inherit_mask & (ISOL_INHERIT_CONF | ISOL_INHERIT_ACTIVE) == 0 {
        return None;
    }
    let mut child = IsolInfo {
        inherit_mask: parent.inherit_mask,
        ..Default::default()
    };
    if parent.inherit_mask & ISOL_INHERIT_CONF != 0 {
        child.conf_mask = parent.conf_mask;
        child.quiesce_mask = parent.quiesce_mask;
        child.oneshot_mask = parent.oneshot_mask;
    }
    if parent.inherit_mask & ISOL_INHERIT_ACTIVE != 0 {
        child.active_mask = parent.active_mask;
    }
    Some(child)
}

/// A return to user mode (`task_isol_exit_to_user_mode`): while exactly ISOL_F_QUIESCE is
/// active and VMSTATS is in the quiesce mask, the vmstat sync happens (here: counted), and a
/// oneshot VMSTATS bit then leaves the quiesce mask. Returns whether a sync happened.
pub fn exit_to_user_mode(task: &mut TaskIsol) -> bool {
    let Some(info) = task.as_mut() else {
        return false;
    };
    if info.active_mask != ISOL_F_QUIESCE || info.quiesce_mask & ISOL_F_QUIESCE_VMSTATS == 0 {
        return false;
    }
    info.quiesce_syncs += 1;
    if info.oneshot_mask & ISOL_F_QUIESCE_VMSTATS != 0 {
        info.quiesce_mask &= !ISOL_F_QUIESCE_VMSTATS;
    }
    true
}

/// The text of `/proc/<pid>/task_isolation` for a task.
pub fn render_procfs(task: &TaskIsol) -> String {
    let info = task.unwrap_or_default();
    let mut out = String::new();
    state_line(
        &mut out,
        "Configured state: ",
        info.conf_mask,
        FEATURE_NAMES,
    );
    state_line(&mut out, "Active state: ", info.active_mask, FEATURE_NAMES);
    state_line(&mut out, "Quiescing: ", info.quiesce_mask, QUIESCE_NAMES);
    out
}

fn state_line(out: &mut String, header: &str, mask: u64, names: &[(u64, &str)]) {
    out.push_str(header);
    for (bit, name) in names {
        if mask & bit != 0 {
            out.push_str(name);
            out.push(' ');
        }
    }
    if mask == 0 {
        out.push_str("none ");
    }
    out.push('\n');
}

/// The state as it appears in the emulator's log.
pub fn state_json(task: &TaskIsol) -> Value {
    match task {
        None => json!({ "context": false }),
        Some(i) => json!({
            "context": true,
            "configured": i.conf_mask,
            "active": i.active_mask,
            "quiesce_mask": i.quiesce_mask,
            "oneshot_mask": i.oneshot_mask,
            "inherit_mask": i.inherit_mask,
            "quiesce_syncs": i.quiesce_syncs,
        }),
    }
}

// The #[repr(C)] structs are converted field by field (little-endian, x86_64) rather than
// transmuted, so no unsafe is needed and padding bytes are always written as zero.

fn words_to_bytes<const N: usize>(words: [u64; N]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn extensions_bytes(e: &TaskIsolQuiesceExtensions) -> Vec<u8> {
    let mut w = [0u64; 8];
    w[0] = e.flags;
    w[1] = e.supported_quiesce_bits;
    w[2..].copy_from_slice(&e.pad);
    words_to_bytes(w)
}

fn control_bytes(c: &TaskIsolQuiesceControl) -> Vec<u8> {
    let mut w = [0u64; 8];
    w[0] = c.flags;
    w[1] = c.quiesce_mask;
    w[2] = c.quiesce_oneshot_mask;
    w[3..].copy_from_slice(&c.pad);
    words_to_bytes(w)
}

fn control_from_bytes(raw: &[u8; 64]) -> TaskIsolQuiesceControl {
    let word = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&raw[i * 8..i * 8 + 8]);
        u64::from_le_bytes(b)
    };
    TaskIsolQuiesceControl {
        flags: word(0),
        quiesce_mask: word(1),
        quiesce_oneshot_mask: word(2),
        pad: [word(3), word(4), word(5), word(6), word(7)],
    }
}

fn inherit_bytes(c: &TaskIsolInheritControl) -> Vec<u8> {
    let mut b = vec![c.inherit_mask, c.flags];
    b.extend_from_slice(&c.pad);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flat fake address space: [BASE, BASE + len) is mapped, everything else faults.
    struct Flat {
        base: u64,
        bytes: Vec<u8>,
    }

    impl Flat {
        fn new() -> Self {
            Flat {
                base: 0x1000,
                bytes: vec![0xa5; 256],
            }
        }
        fn range(&self, addr: u64, len: usize) -> Result<usize, Errno> {
            let off = addr.checked_sub(self.base).ok_or(Errno::EFAULT)? as usize;
            if off + len > self.bytes.len() {
                return Err(Errno::EFAULT);
            }
            Ok(off)
        }
        fn put(&mut self, addr: u64, data: &[u8]) {
            let off = self.range(addr, data.len()).unwrap();
            self.bytes[off..off + data.len()].copy_from_slice(data);
        }
        fn word(&self, addr: u64) -> u64 {
            let off = self.range(addr, 8).unwrap();
            u64::from_le_bytes(self.bytes[off..off + 8].try_into().unwrap())
        }
    }

    impl UserMemory for Flat {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
            let off = self.range(addr, buf.len())?;
            buf.copy_from_slice(&self.bytes[off..off + buf.len()]);
            Ok(())
        }
        fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), Errno> {
            let off = self.range(addr, data.len())?;
            self.bytes[off..off + data.len()].copy_from_slice(data);
            Ok(())
        }
    }

    const P: u64 = 0x1000;
    const BAD: u64 = 0x10;

    fn call(task: &mut TaskIsol, mem: &mut Flat, opt: i32, args: [u64; 4]) -> Result<i64, Errno> {
        isol_prctl(task, opt, args, mem).expect("isolation prctl")
    }

    fn set_quiesce(
        task: &mut TaskIsol,
        mem: &mut Flat,
        flags: u64,
        mask: u64,
        one: u64,
    ) -> Result<i64, Errno> {
        mem.put(P, &words_to_bytes([flags, mask, one, 0, 0, 0, 0, 0]));
        call(
            task,
            mem,
            PR_ISOL_CFG_SET,
            [I_CFG_FEAT, ISOL_F_QUIESCE, QUIESCE_CONTROL, P],
        )
    }

    #[test]
    fn other_options_are_not_ours() {
        let mut mem = Flat::new();
        assert!(isol_prctl(&mut None, 3, [0; 4], &mut mem).is_none());
        assert!(isol_prctl(&mut None, 68, [0; 4], &mut mem).is_none());
    }

    #[test]
    fn feat_get_reports_quiesce_and_vmstats() {
        let mut mem = Flat::new();
        assert_eq!(
            call(&mut None, &mut mem, PR_ISOL_FEAT_GET, [0, P, 0, 0]),
            Ok(0)
        );
        assert_eq!(mem.word(P), ISOL_F_QUIESCE);
        assert_eq!(
            mem.word(P + 8),
            0xa5a5_a5a5_a5a5_a5a5,
            "only 8 bytes written"
        );
        assert_eq!(
            call(&mut None, &mut mem, PR_ISOL_FEAT_GET, [1, P, 0, 0]),
            Ok(0)
        );
        assert_eq!(mem.word(P + 8), ISOL_F_QUIESCE_VMSTATS);
        assert_eq!(mem.word(P + 56), 0);
        assert_eq!(
            call(&mut None, &mut mem, PR_ISOL_FEAT_GET, [2, P, 0, 0]),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            call(&mut None, &mut mem, PR_ISOL_FEAT_GET, [0, BAD, 0, 0]),
            Err(Errno::EFAULT)
        );
    }

    #[test]
    fn quiesce_set_checks_in_kernel_order() {
        let mut mem = Flat::new();
        let mut t = None;
        assert_eq!(set_quiesce(&mut t, &mut mem, 1, 1, 0), Err(Errno::EINVAL));
        assert_eq!(set_quiesce(&mut t, &mut mem, 0, 2, 0), Err(Errno::EINVAL));
        assert_eq!(set_quiesce(&mut t, &mut mem, 0, 0, 1), Err(Errno::EINVAL));
        assert_eq!(t, None, "failed calls allocate nothing");
        let bad_arg4 = [I_CFG_FEAT, ISOL_F_QUIESCE, 2, BAD];
        assert_eq!(
            call(&mut t, &mut mem, PR_ISOL_CFG_SET, bad_arg4),
            Err(Errno::EINVAL)
        );
        let bad_ptr = [I_CFG_FEAT, ISOL_F_QUIESCE, QUIESCE_CONTROL, BAD];
        assert_eq!(
            call(&mut t, &mut mem, PR_ISOL_CFG_SET, bad_ptr),
            Err(Errno::EFAULT)
        );
        assert_eq!(set_quiesce(&mut t, &mut mem, 0, 0, 0), Ok(0));
        assert_eq!(t.unwrap().conf_mask, ISOL_F_QUIESCE);
    }

    #[test]
    fn activate_order_of_checks() {
        let mut mem = Flat::new();
        let mut t = None;
        assert_eq!(
            call(&mut t, &mut mem, PR_ISOL_ACTIVATE_GET, [BAD, 0, 0, 0]),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            call(&mut t, &mut mem, PR_ISOL_ACTIVATE_SET, [BAD, 0, 0, 0]),
            Err(Errno::EFAULT)
        );
        mem.put(P, &1u64.to_le_bytes());
        assert_eq!(
            call(&mut t, &mut mem, PR_ISOL_ACTIVATE_SET, [P, 0, 0, 0]),
            Err(Errno::EINVAL)
        );
        mem.put(P, &[1, 0, 0, 0, 0, 0, 0, 0]);
        call(&mut t, &mut mem, PR_ISOL_CFG_SET, [I_CFG_INHERIT, P, 0, 0]).unwrap();
        mem.put(P, &1u64.to_le_bytes());
        assert_eq!(
            call(&mut t, &mut mem, PR_ISOL_ACTIVATE_SET, [P, 0, 0, 0]),
            Ok(0)
        );
        assert_eq!(t.unwrap().active_mask, ISOL_F_QUIESCE);
    }

    #[test]
    fn oneshot_clears_after_one_sync() {
        let mut mem = Flat::new();
        let mut t = None;
        set_quiesce(&mut t, &mut mem, 0, 1, 1).unwrap();
        assert!(!exit_to_user_mode(&mut t), "not active yet");
        t.as_mut().unwrap().active_mask = ISOL_F_QUIESCE;
        assert!(exit_to_user_mode(&mut t));
        assert!(!exit_to_user_mode(&mut t));
        assert_eq!(t.unwrap().quiesce_mask, 0);
        assert_eq!(t.unwrap().quiesce_syncs, 1);
    }

    #[test]
    fn fork_copies_per_inherit_mask() {
        let parent = IsolInfo {
            conf_mask: 1,
            active_mask: 1,
            quiesce_mask: 1,
            oneshot_mask: 0,
            inherit_mask: 0,
            quiesce_syncs: 7,
        };
        assert_eq!(copy_on_fork(&Some(parent)), None);
        let conf = Some(IsolInfo {
            inherit_mask: ISOL_INHERIT_CONF,
            ..parent
        });
        let c = copy_on_fork(&conf).unwrap();
        assert_eq!((c.conf_mask, c.active_mask, c.quiesce_syncs), (1, 0, 0));
        let act = Some(IsolInfo {
            inherit_mask: 3,
            ..parent
        });
        assert_eq!(copy_on_fork(&act).unwrap().active_mask, 1);
    }

    #[test]
    fn procfs_text() {
        assert_eq!(
            render_procfs(&None),
            "Configured state: none \nActive state: none \nQuiescing: none \n"
        );
        let t = Some(IsolInfo {
            conf_mask: 1,
            active_mask: 1,
            quiesce_mask: 1,
            ..Default::default()
        });
        assert_eq!(
            render_procfs(&t),
            "Configured state: quiesce \nActive state: quiesce \nQuiescing: vmstat_sync \n"
        );
    }
}
