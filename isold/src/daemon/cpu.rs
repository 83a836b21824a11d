//! What each of the daemon's services costs: the CPU time of its threads, told apart by their
//! names (each service runs on threads of its own, named `isold-*`), and the process's own
//! total, which also holds the time of threads that ended (a walk's short-lived workers).
//! Read from this process's /proc entries whatever the root (the daemon is always real).

use std::collections::BTreeMap;

use crate::status::ServiceCpu;

/// The service a thread of the daemon works for, by the thread's name.
pub fn service_of(comm: &str) -> &'static str {
    match comm {
        "isold" => "events and tasks",
        "isold-scan" => "drift watch",
        "isold-health" | "isold-http" => "metrics",
        "isold-noise" => "noise ledger",
        "isold-stalls" => "stall guard",
        "isold-hooks" => "hook socket",
        c if c.starts_with("isold-nri") => "NRI plugin",
        _ => "other",
    }
}

/// A thread's CPU time in seconds from its `schedstat` (nanoseconds), else from its `stat`
/// (utime and stime in clock ticks).
fn thread_cpu_s(dir: &std::path::Path) -> Option<f64> {
    if let Some(ns) = std::fs::read_to_string(dir.join("schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
    {
        return Some(ns as f64 / 1e9);
    }
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    let stat = libtaskisol::procfs::TaskStat::parse(&stat).ok()?;
    Some(stat.cpu_ticks as f64 / ticks_per_s())
}

fn ticks_per_s() -> f64 {
    // SAFETY: sysconf(3) has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// Each service's threads and CPU time now, in the order of [`service_of`]'s names, and the
/// whole process's CPU time (getrusage: the ended threads too).
pub fn services() -> (Vec<ServiceCpu>, f64) {
    let mut by: BTreeMap<&'static str, (usize, f64)> = BTreeMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for e in dir.flatten() {
            let path = e.path();
            let Ok(comm) = std::fs::read_to_string(path.join("comm")) else {
                continue;
            };
            let Some(s) = thread_cpu_s(&path) else {
                continue;
            };
            let slot = by.entry(service_of(comm.trim_end())).or_default();
            slot.0 += 1;
            slot.1 += s;
        }
    }
    let list = by
        .into_iter()
        .map(|(name, (threads, cpu_s))| ServiceCpu {
            name: name.into(),
            threads,
            cpu_s,
        })
        .collect();
    (list, process_cpu_s())
}

/// This process's CPU time, user and system, of every thread it had.
fn process_cpu_s() -> f64 {
    // SAFETY: rusage is plain old data; all zeros is a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage(2) fills the struct it is given, which lives across the call.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0.0;
    }
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(u.ru_utime) + s(u.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thread_name_belongs_to_its_service() {
        for (comm, service) in [
            ("isold", "events and tasks"),
            ("isold-scan", "drift watch"),
            ("isold-health", "metrics"),
            ("isold-http", "metrics"),
            ("isold-noise", "noise ledger"),
            ("isold-stalls", "stall guard"),
            ("isold-hooks", "hook socket"),
            ("isold-nri", "NRI plugin"),
            ("isold-nri-wait", "NRI plugin"),
            ("cargo-test", "other"),
        ] {
            assert_eq!(service_of(comm), service, "{comm}");
        }
    }

    #[test]
    fn this_process_has_its_threads_counted_and_a_total_at_least_their_sum() {
        let spin = std::thread::Builder::new()
            .name("isold-scan".into())
            .spawn(|| {
                let t = std::time::Instant::now();
                let mut x = 0u64;
                while t.elapsed() < std::time::Duration::from_millis(30) {
                    x = x.wrapping_add(std::hint::black_box(1));
                }
                let (list, total) = services();
                (x, list, total)
            })
            .unwrap();
        let (_, list, total) = spin.join().unwrap();
        let scan = list
            .iter()
            .find(|s| s.name == "drift watch")
            .expect("{list:?}");
        assert_eq!(scan.threads, 1, "{list:?}");
        assert!(scan.cpu_s >= 0.02, "{list:?}");
        let sum: f64 = list.iter().map(|s| s.cpu_s).sum();
        // getrusage counts in ticks on some kernels: a tick of slack.
        assert!(total + 0.011 >= sum, "total {total} < threads' {sum}");
    }
}
