//! isol-rawcall: issues RAW task-isolation prctls (63..67) described on its command line and
//! prints one JSON line per call, so that every argument check of `isol-emu` can be exercised.
//!
//! On a stock kernel these numbers are other prctls (PR_SET_MDWE, PR_SET_MEMORY_MERGE, ...), so
//! this program refuses to run unless it is traced by `isol-emu`, which sets
//! `ISOL_RAWCALL_I_AM_UNDER_EMU=1` (patched mode) or `=trace-only` (then only calls that do
//! not issue prctl 63..67 are allowed), or runs untraced on a kernel that has the interface
//! (`/proc/self/task_isolation` on procfs: the project's own kernel, where its answers are
//! compared with the emulator's). x86_64 only.
//!
//! Each argument is one call, e.g.
//! `isol-rawcall 'cfg-set-quiesce 0 1 0' 'activate-set 1' 'cat-ti self' fork-then 'activate-get'`.
//! Output lines: `{"call", "argv", "pid", "tid", "ret", "errno", "out", ...}`; `out` is the
//! 64-byte scratch buffer (as 8 u64 words, prefilled with 0xa5 bytes) after the call.

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[path = "../emu/rawcall.rs"]
mod rawcall;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn main() {
    rawcall::main();
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
fn main() {
    eprintln!("isol-rawcall: refusing to run: x86_64 Linux only");
    std::process::exit(2);
}
