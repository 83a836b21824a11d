//! libtaskisol: Linux CPU isolation for latency-critical work.
//!
//! * [`abi`]: the task-isolation prctl ABI of patched kernels (numbers, `#[repr(C)]` structs).
//! * [`isolation`]: the safe API on the calling task; it can only be used after the running
//!   kernel was positively detected, because prctl 63..67 mean other things on stock kernels.
//! * [`procfs`]: `/proc/<pid>/task_isolation`, `/proc/<pid>/stat`, `/proc/<pid>/status`.
//! * [`cpuset`]: CPU sets of any size, list and hex-mask formats.
//! * [`topology`]: online CPUs, isolated CPUs by mechanism, kernel version, cgroup v2.
//! * [`sched`]: affinity, scheduling policy, THP disable.
//! * [`launch`]: check-then-apply plans for starting a workload isolated (used by chisol).
//! * [`irq`], [`tasks`], [`workqueue`], [`sysctl`], [`power`]: the kernel facts an
//!   isolation policy acts on (IRQ affinity, threads, unbound workqueues, `/proc/sys`, PM QoS
//!   and cpufreq).
//! * [`policy`]: the isolation policy engine (configuration, presets, apply, verify,
//!   restore with a crash-safe state file), used by isold.
//! * [`claims`]: containers' claims on CPUs (the domain, and its OCI and socket inputs),
//!   made into a policy by [`claims::policy_with`].
//! * [`nri`]: the NRI plugin protocol (multiplexer, ttrpc, messages) and a container's claim
//!   from what NRI says of it.
//! * [`cpuwatch`] and [`stalls`]: what runs and waits on the isolated CPUs, and the stall
//!   guard that lends a starved thread a bounded SCHED_DEADLINE slice.
//! * [`sysroot`]: where `/proc` and `/sys` are read, so everything can run on fixture trees.
//!
//! ```
//! use libtaskisol::{topology::IsolatedCpus, SysRoot, TaskIsolation};
//!
//! # fn main() -> libtaskisol::Result<()> {
//! let iso = IsolatedCpus::discover(&SysRoot::host())?;
//! println!("isolated CPUs: {}", iso.all()); // e.g. "2-3"
//! match TaskIsolation::detect() {
//!     // Side-effect free: only /proc/self/task_isolation is read.
//!     Ok(ti) => println!("features: {:#x}", ti.features()?),
//!     Err(why) => println!("{why}"),
//! }
//! # Ok(())
//! # }
//! ```
pub mod abi;
pub mod audit;
pub mod claims;
pub mod cost;
pub mod cpuset;
pub mod cpuwatch;
pub mod error;
pub mod events;
pub mod glob;
pub mod irq;
pub mod isolation;
pub mod launch;
pub mod net;
pub mod noise;
pub mod nri;
pub mod osnoise;
pub mod par;
pub mod policy;
pub mod power;
pub mod procfs;
pub mod rawtrace;
pub mod sched;
pub mod stalls;
pub mod sysctl;
pub mod sysroot;
pub mod tasks;
pub mod tickstop;
pub mod topology;
pub mod tracefs;
pub mod virt;
pub mod workqueue;

pub use cpuset::{CpuSet, CpuSetError};
pub use error::{Error, Result, Unsupported};
pub use isolation::{Inherit, QuiesceConfig, TaskIsolation};
pub use procfs::TaskIsolationState;
pub use sysroot::SysRoot;
