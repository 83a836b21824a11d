//! Test-only support for taskisol: the ptrace-based task-isolation emulator, test workers
//! and the QEMU harness. Nothing here ships.
pub mod qemu;
