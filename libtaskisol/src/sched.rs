//! Scheduler system calls: CPU affinity of any size, scheduling policy and priority, and the
//! per-process flags that a workload inherits across `execve` (THP disable).

use std::fmt;
use std::str::FromStr;

use nix::errno::Errno;

use crate::cpuset::CpuSet;
use crate::error::{Error, Result};

/// Largest affinity buffer tried, in bytes (8M CPUs): far above any NR_CPUS.
const MAX_AFFINITY_BYTES: usize = 1 << 20;

/// The CPU affinity of task `tid` (0 = the calling thread).
///
/// The buffer starts at 128 bytes (1024 CPUs, glibc's `cpu_set_t`) and doubles while the
/// kernel answers EINVAL, which it does when the buffer is smaller than its `nr_cpu_ids`.
pub fn get_affinity(tid: i32) -> Result<CpuSet> {
    affinity_with_growing_buffer(tid, |buf| {
        // SAFETY: buf is a valid writable buffer of buf.len() bytes; the raw syscall writes
        // at most that many bytes and returns how many it wrote.
        let ret = crate::cost::call(crate::cost::Call::GetAffinity, || unsafe {
            libc::syscall(
                libc::SYS_sched_getaffinity,
                tid as libc::pid_t,
                buf.len(),
                buf.as_mut_ptr(),
            )
        });
        // -1 and errno on failure, else the bytes written (never 0: at least one long).
        match ret {
            -1 => Err(Errno::last()),
            n => Ok(n as usize),
        }
    })
}

/// The buffer loop of [`get_affinity`], around `getaffinity(buf) -> bytes written`.
fn affinity_with_growing_buffer(
    tid: i32,
    mut getaffinity: impl FnMut(&mut [u8]) -> std::result::Result<usize, Errno>,
) -> Result<CpuSet> {
    let mut len = 128usize;
    loop {
        let mut buf = vec![0u8; len];
        match getaffinity(&mut buf) {
            Ok(written) => {
                buf.truncate(written);
                return Ok(CpuSet::from_kernel_bitmap(&buf));
            }
            Err(Errno::EINVAL) if len < MAX_AFFINITY_BYTES => len *= 2,
            Err(errno) => {
                return Err(Error::syscall(
                    format!("sched_getaffinity(pid {tid})"),
                    errno,
                ))
            }
        }
    }
}

/// Set the CPU affinity of task `tid` (0 = the calling thread).
///
/// The kernel refuses (EINVAL) a set with no online CPU allowed by the task's cpuset, and
/// (EINVAL) any change of a `PF_NO_SETAFFINITY` kernel thread.
pub fn set_affinity(tid: i32, cpus: &CpuSet) -> Result<()> {
    let buf = cpus.to_kernel_bitmap(std::mem::size_of::<libc::c_ulong>());
    // SAFETY: buf is a valid readable buffer of buf.len() bytes for the duration of the call.
    let ret = crate::cost::call(crate::cost::Call::SetAffinity, || unsafe {
        libc::syscall(
            libc::SYS_sched_setaffinity,
            tid as libc::pid_t,
            buf.len(),
            buf.as_ptr(),
        )
    });
    if ret < 0 {
        return Err(Error::syscall(
            format!("sched_setaffinity(pid {tid}, CPUs {cpus})"),
            Errno::last(),
        ));
    }
    Ok(())
}

/// Set the affinity of task `tid` to `cpus` only if it is still `expect`: `Ok(None)` when
/// written, `Ok(Some(now))` when it was `now` instead and was left so.
///
/// The kernel has no compare-and-swap for an affinity, so the check and the write are two
/// system calls; everything else (both bitmaps, the buffer for the kernel's answer) is made
/// before them, so that nothing (no allocation, no I/O, no lock) runs between them: an owner's
/// `sched_setaffinity` can still land in the few hundred nanoseconds between the two, or
/// longer when this thread is preempted there, and is then overwritten unseen.
pub fn set_affinity_if(tid: i32, expect: &CpuSet, cpus: &CpuSet) -> Result<Option<CpuSet>> {
    let expect_bits = expect.to_kernel_bitmap(std::mem::size_of::<libc::c_ulong>());
    let want = cpus.to_kernel_bitmap(std::mem::size_of::<libc::c_ulong>());
    // NR_CPUS is at most 8192 (x86's MAXSMP): 1 KiB holds any kernel's mask. On the stack.
    let mut now = [0u8; 1024];
    // SAFETY: now is a valid writable buffer of now.len() bytes; the raw syscall writes at
    // most that many bytes and returns how many it wrote.
    let got = crate::cost::call(crate::cost::Call::GetAffinity, || unsafe {
        libc::syscall(
            libc::SYS_sched_getaffinity,
            tid as libc::pid_t,
            now.len(),
            now.as_mut_ptr(),
        )
    });
    if got < 0 {
        return Err(Error::syscall(
            format!("sched_getaffinity(pid {tid})"),
            Errno::last(),
        ));
    }
    let now = &now[..(got as usize).min(now.len())];
    if !same_bitmap(now, &expect_bits) {
        return Ok(Some(CpuSet::from_kernel_bitmap(now)));
    }
    // SAFETY: want is a valid readable buffer of want.len() bytes for the duration of the call.
    let ret = crate::cost::call(crate::cost::Call::SetAffinity, || unsafe {
        libc::syscall(
            libc::SYS_sched_setaffinity,
            tid as libc::pid_t,
            want.len(),
            want.as_ptr(),
        )
    });
    if ret < 0 {
        return Err(Error::syscall(
            format!("sched_setaffinity(pid {tid}, CPUs {cpus})"),
            Errno::last(),
        ));
    }
    Ok(None)
}

/// Two kernel bitmaps of the same CPUs, whatever their lengths (the tail beyond the shorter
/// one all zero).
fn same_bitmap(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n] && a[n..].iter().all(|&x| x == 0) && b[n..].iter().all(|&x| x == 0)
}

/// A scheduling policy with its priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedPolicy {
    /// SCHED_OTHER (CFS/EEVDF), nice unchanged.
    Other,
    /// SCHED_FIFO with a real-time priority 1..=99.
    Fifo(u32),
    /// SCHED_RR with a real-time priority 1..=99.
    RoundRobin(u32),
    /// SCHED_BATCH.
    Batch,
    /// SCHED_IDLE.
    Idle,
}

impl SchedPolicy {
    /// The kernel's policy number (as in `/proc/<pid>/stat` field 41).
    pub fn policy_number(&self) -> i32 {
        match self {
            SchedPolicy::Other => libc::SCHED_OTHER,
            SchedPolicy::Fifo(_) => libc::SCHED_FIFO,
            SchedPolicy::RoundRobin(_) => libc::SCHED_RR,
            SchedPolicy::Batch => libc::SCHED_BATCH,
            SchedPolicy::Idle => libc::SCHED_IDLE,
        }
    }

    /// The static priority (0 for the non-RT policies).
    pub fn priority(&self) -> u32 {
        match self {
            SchedPolicy::Fifo(p) | SchedPolicy::RoundRobin(p) => *p,
            _ => 0,
        }
    }

    /// Whether this is a real-time policy (needs CAP_SYS_NICE or RLIMIT_RTPRIO).
    pub fn is_realtime(&self) -> bool {
        matches!(self, SchedPolicy::Fifo(_) | SchedPolicy::RoundRobin(_))
    }

    /// The policy from `/proc/<pid>/stat` fields 41 (policy) and 40 (rt_priority).
    pub fn from_stat(policy: u32, rt_priority: u32) -> Option<Self> {
        Some(match policy as i32 {
            libc::SCHED_OTHER => SchedPolicy::Other,
            libc::SCHED_FIFO => SchedPolicy::Fifo(rt_priority),
            libc::SCHED_RR => SchedPolicy::RoundRobin(rt_priority),
            libc::SCHED_BATCH => SchedPolicy::Batch,
            libc::SCHED_IDLE => SchedPolicy::Idle,
            _ => return None,
        })
    }

    /// Check the priority against the kernel's range for the policy
    /// (`sched_get_priority_min/max`), so a bad value is reported before anything changes.
    pub fn validate(&self) -> Result<()> {
        if !self.is_realtime() {
            return Ok(());
        }
        let pol = self.policy_number();
        // SAFETY: plain syscalls without pointer arguments.
        let min = priority_bound(unsafe { libc::sched_get_priority_min(pol) }, "min", self)?;
        // SAFETY: as above.
        let max = priority_bound(unsafe { libc::sched_get_priority_max(pol) }, "max", self)?;
        let p = self.priority() as i32;
        if p < min || p > max {
            return Err(Error::Invalid(format!(
                "priority {p} is out of range for {self} (valid: {min}..{max})"
            )));
        }
        Ok(())
    }
}

/// The answer of `sched_get_priority_{min,max}`: -1 (EINVAL) only for a policy the kernel
/// does not know.
fn priority_bound(ret: libc::c_int, which: &str, policy: &SchedPolicy) -> Result<i32> {
    match ret {
        -1 => Err(Error::syscall(
            format!("sched_get_priority_{which}({policy})"),
            Errno::last(),
        )),
        v => Ok(v),
    }
}

impl fmt::Display for SchedPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchedPolicy::Other => write!(f, "SCHED_OTHER"),
            SchedPolicy::Fifo(p) => write!(f, "SCHED_FIFO priority {p}"),
            SchedPolicy::RoundRobin(p) => write!(f, "SCHED_RR priority {p}"),
            SchedPolicy::Batch => write!(f, "SCHED_BATCH"),
            SchedPolicy::Idle => write!(f, "SCHED_IDLE"),
        }
    }
}

impl FromStr for SchedPolicy {
    type Err = Error;
    /// `fifo:10`, `rr:5`, `other`, `batch`, `idle` (as policy files and configs spell them).
    fn from_str(s: &str) -> Result<Self> {
        let (name, prio) = match s.split_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (s, None),
        };
        let prio = || -> Result<u32> {
            prio.and_then(|p| p.parse().ok()).ok_or_else(|| {
                Error::Invalid(format!(
                    "scheduling policy {s:?} needs a numeric priority, e.g. {name}:10"
                ))
            })
        };
        Ok(match name.to_ascii_lowercase().as_str() {
            "other" | "normal" => SchedPolicy::Other,
            "fifo" => SchedPolicy::Fifo(prio()?),
            "rr" => SchedPolicy::RoundRobin(prio()?),
            "batch" => SchedPolicy::Batch,
            "idle" => SchedPolicy::Idle,
            _ => {
                return Err(Error::Invalid(format!(
                    "unknown scheduling policy {s:?} (other, fifo:N, rr:N, batch, idle)"
                )))
            }
        })
    }
}

/// Set the scheduling policy and priority of task `tid` (0 = the calling thread).
pub fn set_scheduler(tid: i32, policy: SchedPolicy) -> Result<()> {
    let param = libc::sched_param {
        sched_priority: policy.priority() as i32,
    };
    // SAFETY: param is a valid sched_param that lives across the call.
    let ret = crate::cost::call(crate::cost::Call::SetScheduler, || unsafe {
        libc::sched_setscheduler(tid, policy.policy_number(), &param)
    });
    if ret == -1 {
        return Err(Error::syscall(
            format!("sched_setscheduler(pid {tid}, {policy})"),
            Errno::last(),
        ));
    }
    Ok(())
}

/// Disable transparent huge pages for the calling process (`PR_SET_THP_DISABLE`); the flag
/// is inherited by children and kept across `execve`, and shows as `THP_enabled: 0` in
/// `/proc/<pid>/status`.
pub fn set_thp_disable() -> Result<()> {
    // SAFETY: PR_SET_THP_DISABLE takes integer arguments only.
    let ret = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1 as libc::c_ulong, 0, 0, 0) };
    // 0 on success. It cannot fail with these arguments, so a test cannot tell "-1" from
    // "1" or "< 0" from "> 0"; "!= 0" has no such twin.
    if ret != 0 {
        return Err(Error::syscall(
            "prctl(PR_SET_THP_DISABLE, 1)",
            Errno::last(),
        ));
    }
    Ok(())
}

/// Whether the calling process may use a real-time policy with `priority`: CAP_SYS_NICE in
/// its effective set, or an RLIMIT_RTPRIO at least that high. A failing lookup is an error of
/// its own, not a "no": the user must not be told to get a capability they may have.
pub fn may_use_realtime(priority: u32) -> Result<bool> {
    let cap = caps::has_cap(
        None,
        caps::CapSet::Effective,
        caps::Capability::CAP_SYS_NICE,
    )
    .map_err(|e| Error::Invalid(format!("failed to read this process's capabilities: {e}")));
    let rtprio = || {
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_RTPRIO)
            .map(|(soft, _)| soft)
            .map_err(|errno| Error::syscall("getrlimit(RLIMIT_RTPRIO)", errno))
    };
    realtime_allowed(cap, rtprio, priority)
}

/// The decision of [`may_use_realtime`], given the lookups (the RLIMIT_RTPRIO one is only
/// made without the capability).
fn realtime_allowed(
    has_cap_sys_nice: Result<bool>,
    rlimit_rtprio: impl FnOnce() -> Result<u64>,
    priority: u32,
) -> Result<bool> {
    if has_cap_sys_nice? {
        return Ok(true);
    }
    Ok(rlimit_rtprio()? >= u64::from(priority))
}

/// `SCHED_DEADLINE`'s policy number (`/proc/<pid>/stat` field 41 shows it as 6).
pub const SCHED_DEADLINE: u32 = 6;

/// `SCHED_FLAG_RESET_ON_FORK`: a child forked by the thread starts with the default policy
/// (a deadline parent's fork is refused with EAGAIN otherwise).
pub const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;

/// The kernel's `struct sched_attr` as of its first version (`SCHED_ATTR_SIZE_VER0`, 48
/// bytes): what `sched_setattr(2)` needs for `SCHED_DEADLINE`, which `sched_setscheduler`
/// cannot set. libc has no wrapper for the two system calls.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedAttr {
    /// The size of this structure (48).
    pub size: u32,
    /// Policy number.
    pub policy: u32,
    /// `SCHED_FLAG_*`.
    pub flags: u64,
    /// Nice value (SCHED_OTHER, SCHED_BATCH).
    pub nice: i32,
    /// Real-time priority (SCHED_FIFO, SCHED_RR).
    pub priority: u32,
    /// SCHED_DEADLINE's runtime in ns (6.12+ report the fair slice here for SCHED_OTHER).
    pub runtime: u64,
    /// SCHED_DEADLINE's relative deadline in ns.
    pub deadline: u64,
    /// SCHED_DEADLINE's period in ns.
    pub period: u64,
}

const _: () = assert!(std::mem::size_of::<SchedAttr>() == 48);

impl SchedAttr {
    /// A SCHED_DEADLINE reservation of `runtime_ns` every `period_ns` (deadline = period),
    /// with reset-on-fork.
    pub fn deadline(runtime_ns: u64, period_ns: u64) -> SchedAttr {
        SchedAttr {
            size: 48,
            policy: SCHED_DEADLINE,
            flags: SCHED_FLAG_RESET_ON_FORK,
            runtime: runtime_ns,
            deadline: period_ns,
            period: period_ns,
            ..SchedAttr::default()
        }
    }

    /// A policy without reservation: `policy` with `priority` (real-time) or `nice`, and
    /// reset-on-fork when `reset_on_fork`. The runtime is 0: on 6.12+ writing back the slice
    /// that sched_getattr reported would pin it as a custom slice.
    pub fn plain(policy: u32, priority: u32, nice: i32, reset_on_fork: bool) -> SchedAttr {
        SchedAttr {
            size: 48,
            policy,
            flags: if reset_on_fork {
                SCHED_FLAG_RESET_ON_FORK
            } else {
                0
            },
            nice,
            priority,
            ..SchedAttr::default()
        }
    }

    /// Whether reset-on-fork is set.
    pub fn reset_on_fork(&self) -> bool {
        self.flags & SCHED_FLAG_RESET_ON_FORK != 0
    }
}

impl fmt::Display for SchedAttr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.policy {
            SCHED_DEADLINE => write!(
                f,
                "SCHED_DEADLINE {} us every {} us",
                self.runtime / 1000,
                self.period / 1000
            ),
            p => match SchedPolicy::from_stat(p, self.priority) {
                Some(pol @ (SchedPolicy::Other | SchedPolicy::Batch)) if self.nice != 0 => {
                    write!(f, "{pol} nice {}", self.nice)
                }
                Some(pol) => write!(f, "{pol}"),
                None => write!(f, "policy {p}"),
            },
        }
    }
}

/// `sched_getattr(2)` of task `tid`.
pub fn get_attr(tid: i32) -> Result<SchedAttr> {
    let mut attr = SchedAttr::default();
    // SAFETY: attr is a writable sched_attr of the size passed; flags must be 0.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid as libc::c_long,
            &mut attr as *mut SchedAttr,
            std::mem::size_of::<SchedAttr>() as libc::c_uint,
            0 as libc::c_uint,
        )
    };
    if ret == -1 {
        return Err(Error::syscall(
            format!("sched_getattr(pid {tid})"),
            Errno::last(),
        ));
    }
    Ok(attr)
}

/// `sched_setattr(2)` of task `tid`.
pub fn set_attr(tid: i32, attr: &SchedAttr) -> Result<()> {
    let mut a = *attr;
    a.size = std::mem::size_of::<SchedAttr>() as u32;
    // SAFETY: a is a valid sched_attr that lives across the call; flags must be 0.
    let ret = crate::cost::call(crate::cost::Call::SetScheduler, || unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            tid as libc::c_long,
            &a as *const SchedAttr,
            0 as libc::c_uint,
        )
    });
    if ret == -1 {
        return Err(Error::syscall(
            format!("sched_setattr(pid {tid}, {a})"),
            Errno::last(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affinity_round_trips_on_this_thread() {
        let cpus = get_affinity(0).unwrap();
        assert!(!cpus.is_empty());
        // Setting the same set is a no-op that must succeed.
        set_affinity(0, &cpus).unwrap();
        assert_eq!(get_affinity(0).unwrap(), cpus);
    }

    /// set_affinity_if on a thread of this test (nothing else on the machine is touched):
    /// written when the thread has the expected CPUs, left with its own CPUs returned when it
    /// has others, and the kernel's refusals are errors, never a write or a mismatch.
    #[test]
    fn set_affinity_if_writes_only_what_it_expected_and_reports_refusals() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() }).unwrap();
            let _ = done_rx.recv();
        });
        let tid = rx.recv().unwrap();
        let all = get_affinity(tid).unwrap();
        let first: CpuSet = all.iter().next().unwrap().to_string().parse().unwrap();
        // Expected: written.
        assert_eq!(set_affinity_if(tid, &all, &first).unwrap(), None);
        assert_eq!(get_affinity(tid).unwrap(), first);
        // Not what was expected: left as it is, and its CPUs returned.
        assert_eq!(
            set_affinity_if(tid, &all, &all).unwrap(),
            Some(first.clone())
        );
        assert_eq!(get_affinity(tid).unwrap(), first);
        // A CPU the kernel cannot give: its EINVAL, the thread untouched.
        let impossible: CpuSet = "8191".parse().unwrap();
        let e = set_affinity_if(tid, &first, &impossible).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EINVAL), "{e}");
        assert_eq!(get_affinity(tid).unwrap(), first);
        done_tx.send(()).unwrap();
        h.join().unwrap();
        // pthread_join returns when the kernel clears the thread's tid word, before the task
        // is reaped: wait until it is gone from /proc (a system call still finds it before).
        let dir = format!("/proc/self/task/{tid}");
        let t0 = std::time::Instant::now();
        while std::path::Path::new(&dir).exists() && t0.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // A thread that is gone: ESRCH, not a mismatch.
        let e = set_affinity_if(tid, &first, &all).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ESRCH), "{e}");
    }

    /// A kernel with more possible CPUs than 1024 (nr_cpu_ids 5000): EINVAL until the buffer
    /// holds its cpumask, then it writes the mask's size.
    #[test]
    fn affinity_buffer_grows_for_large_machines() {
        let mut tried = Vec::new();
        let cpus = affinity_with_growing_buffer(0, |buf| {
            tried.push(buf.len());
            if buf.len() * 8 < 5000 {
                return Err(Errno::EINVAL);
            }
            buf[624] = 0x80; // CPU 4999
            buf[0] = 0x01; // CPU 0
            Ok(632) // the kernel's cpumask size, in longs
        })
        .unwrap();
        assert_eq!(tried, [128, 256, 512, 1024]);
        assert_eq!(cpus.to_string(), "0,4999");
        // A kernel that keeps answering EINVAL: give up at the limit, with the errno.
        let mut calls = 0;
        let e = affinity_with_growing_buffer(7, |buf| {
            calls += 1;
            assert!(buf.len() <= MAX_AFFINITY_BYTES);
            Err(Errno::EINVAL)
        })
        .unwrap_err();
        assert_eq!(calls, 14, "128 bytes to 1 MiB, doubling");
        assert_eq!(e.errno(), Some(libc::EINVAL));
        assert!(
            e.to_string().starts_with("sched_getaffinity(pid 7) failed"),
            "{e}"
        );
        // Any other errno ends the loop at once.
        let mut calls = 0;
        let e = affinity_with_growing_buffer(0, |_| {
            calls += 1;
            Err(Errno::ESRCH)
        })
        .unwrap_err();
        assert_eq!((calls, e.errno()), (1, Some(libc::ESRCH)));
    }

    #[test]
    fn policies_have_their_kernel_numbers_and_names() {
        let table = [
            (SchedPolicy::Other, 0, 0, false, "SCHED_OTHER", "other"),
            (
                SchedPolicy::Fifo(10),
                1,
                10,
                true,
                "SCHED_FIFO priority 10",
                "fifo:10",
            ),
            (
                SchedPolicy::RoundRobin(5),
                2,
                5,
                true,
                "SCHED_RR priority 5",
                "rr:5",
            ),
            (SchedPolicy::Batch, 3, 0, false, "SCHED_BATCH", "batch"),
            (SchedPolicy::Idle, 5, 0, false, "SCHED_IDLE", "idle"),
        ];
        for (p, number, prio, rt, text, spelled) in table {
            assert_eq!(p.policy_number(), number, "{p:?}");
            assert_eq!(p.priority(), prio, "{p:?}");
            assert_eq!(p.is_realtime(), rt, "{p:?}");
            assert_eq!(p.to_string(), text);
            assert_eq!(spelled.parse::<SchedPolicy>().unwrap(), p);
            assert_eq!(SchedPolicy::from_stat(number as u32, prio), Some(p));
        }
        assert_eq!("NORMAL".parse::<SchedPolicy>().unwrap(), SchedPolicy::Other);
        assert_eq!(SchedPolicy::from_stat(6, 0), None, "SCHED_DEADLINE");
        // Non-RT policies have no priority range to check.
        SchedPolicy::Batch.validate().unwrap();
        SchedPolicy::Other.validate().unwrap();
        SchedPolicy::RoundRobin(1).validate().unwrap();
        let e = SchedPolicy::RoundRobin(100).validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            "priority 100 is out of range for SCHED_RR priority 100 (valid: 1..99)"
        );
    }

    #[test]
    fn scheduler_errors_name_the_call_and_errno() {
        // This thread's own policy, unchanged: succeeds without any privilege.
        set_scheduler(0, SchedPolicy::Other).unwrap();
        let e = set_scheduler(i32::MAX, SchedPolicy::Other).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ESRCH));
        assert!(
            e.to_string().starts_with(&format!(
                "sched_setscheduler(pid {}, SCHED_OTHER) failed with ESRCH",
                i32::MAX
            )),
            "{e}"
        );
        let e = priority_bound(-1, "max", &SchedPolicy::Fifo(1)).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("sched_get_priority_max(SCHED_FIFO priority 1) failed"),
            "{e}"
        );
        assert_eq!(
            priority_bound(99, "max", &SchedPolicy::Fifo(1)).unwrap(),
            99
        );
    }

    #[test]
    fn affinity_errors_name_the_call_and_errno() {
        let mut far = CpuSet::new();
        far.insert(100_000);
        let e = set_affinity(0, &far).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EINVAL));
        assert!(
            e.to_string()
                .contains("sched_setaffinity(pid 0, CPUs 100000)"),
            "{e}"
        );
        let e = get_affinity(i32::MAX).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ESRCH));
    }

    #[test]
    fn realtime_needs_the_capability_or_a_high_enough_rlimit() {
        let no_rlimit = || -> Result<u64> { panic!("RLIMIT_RTPRIO looked up with the capability") };
        assert!(realtime_allowed(Ok(true), no_rlimit, 99).unwrap());
        assert!(realtime_allowed(Ok(false), || Ok(10), 10).unwrap());
        assert!(!realtime_allowed(Ok(false), || Ok(10), 11).unwrap());
        assert!(!realtime_allowed(Ok(false), || Ok(0), 1).unwrap());
        // RLIM_INFINITY
        assert!(realtime_allowed(Ok(false), || Ok(u64::MAX), 99).unwrap());
    }

    #[test]
    fn a_failing_lookup_is_reported_as_itself() {
        let e = realtime_allowed(
            Err(Error::Invalid(
                "failed to read this process's capabilities: x".into(),
            )),
            || Ok(99),
            1,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to read this process's capabilities: x"
        );
        let e = realtime_allowed(
            Ok(false),
            || Err(Error::syscall("getrlimit(RLIMIT_RTPRIO)", Errno::EPERM)),
            1,
        )
        .unwrap_err();
        assert_eq!(e.errno(), Some(libc::EPERM));
        assert!(
            e.to_string().starts_with("getrlimit(RLIMIT_RTPRIO) failed"),
            "{e}"
        );
    }

    #[test]
    fn policies_parse_and_validate() {
        assert_eq!(
            "fifo:10".parse::<SchedPolicy>().unwrap(),
            SchedPolicy::Fifo(10)
        );
        assert_eq!(
            "rr:3".parse::<SchedPolicy>().unwrap(),
            SchedPolicy::RoundRobin(3)
        );
        assert_eq!("other".parse::<SchedPolicy>().unwrap(), SchedPolicy::Other);
        assert!("fifo".parse::<SchedPolicy>().is_err());
        assert!("deadline".parse::<SchedPolicy>().is_err());
        SchedPolicy::Fifo(99).validate().unwrap();
        let e = SchedPolicy::Fifo(100).validate().unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
        assert!(SchedPolicy::RoundRobin(0).validate().is_err());
        assert_eq!(SchedPolicy::from_stat(1, 10), Some(SchedPolicy::Fifo(10)));
    }
}
