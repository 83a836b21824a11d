//! The SECCOMP_RET_TRACE filter that makes only the interesting syscalls stop the tracee.
//!
//! Hand-written (a dozen BPF instructions) rather than built with `seccompiler`: that crate
//! kills the process on a foreign audit arch and always sets no_new_privs, while here other
//! ABIs must run untouched and no_new_privs is set only when the kernel demands it.

use std::io;

/// `AUDIT_ARCH_X86_64` (EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE); not in libc.
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
/// Offsets in `struct seccomp_data`.
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;

const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const BPF_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// A filter that returns SECCOMP_RET_TRACE for the x86_64 syscalls in `nrs` and allows
/// everything else. Only the native x86_64 ABI is filtered: i386 (int 0x80) and x32 syscalls
/// are allowed unseen — the emulator supports x86_64 programs only.
pub fn trace_filter(nrs: &[libc::c_long]) -> Vec<libc::sock_filter> {
    let n = nrs.len();
    assert!(n < 250, "jump offsets are 8 bits");
    let mut prog = vec![
        insn(BPF_LD_W_ABS, 0, 0, DATA_ARCH),
        insn(BPF_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        insn(BPF_RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
        insn(BPF_LD_W_ABS, 0, 0, DATA_NR),
    ];
    for (i, &nr) in nrs.iter().enumerate() {
        // On a match jump over the remaining tests and the ALLOW to the TRACE return.
        prog.push(insn(BPF_JEQ_K, (n - i) as u8, 0, nr as u32));
    }
    prog.push(insn(BPF_RET_K, 0, 0, libc::SECCOMP_RET_ALLOW));
    prog.push(insn(BPF_RET_K, 0, 0, libc::SECCOMP_RET_TRACE));
    prog
}

/// Installs `prog` on the calling thread. Called in the forked child between fork and exec,
/// after the tracer has attached (a RET_TRACE with no tracer fails the syscall with ENOSYS).
/// Without CAP_SYS_ADMIN the kernel requires no_new_privs; it is set only in that case, so a
/// privileged run does not change how set-uid programs behave under the emulator.
pub fn install(prog: &[libc::sock_filter]) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: prog.len() as libc::c_ushort,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    let set = || {
        // SAFETY: `fprog` points to `prog`, which outlives the call; the kernel copies the
        // program and does not keep the pointer.
        unsafe {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                &fprog as *const libc::sock_fprog,
            )
        }
    };
    if set() == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EACCES) {
        return Err(err);
    }
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if set() == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
