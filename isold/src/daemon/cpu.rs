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
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    read("schedstat")
        .and_then(|t| from_schedstat(&t))
        .or_else(|| from_stat(&read("stat")?, ticks_per_s()))
}

/// The first field of a `schedstat` (time on the CPU, ns), in seconds.
fn from_schedstat(text: &str) -> Option<f64> {
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(ns as f64 / 1e9)
}

/// utime plus stime of a `stat`, in seconds at `ticks` a second.
fn from_stat(text: &str, ticks: f64) -> Option<f64> {
    let stat = libtaskisol::procfs::TaskStat::parse(text).ok()?;
    Some(stat.cpu_ticks as f64 / ticks)
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
            ms_per_s: 0.0,
        })
        .collect();
    (list, process_cpu_s())
}

/// Each service's CPU time with its rate since the last reading: what it costs now, which
/// the figure since the start (the first apply included) does not say.
#[derive(Debug, Default)]
pub struct Meter {
    last: Option<(std::time::Instant, BTreeMap<String, f64>, f64)>,
}

/// One reading of a [`Meter`].
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub services: Vec<ServiceCpu>,
    /// The whole process's CPU time since the start, seconds.
    pub cpu_s: f64,
    /// Its rate since the last reading, ms per s; 0 at the first.
    pub ms_per_s: f64,
    /// Seconds since the last reading (0 at the first).
    pub window_s: f64,
    /// Each service's CPU time since the last reading, seconds (all of it at the first):
    /// what its counter grows by.
    pub grown: Vec<(String, f64)>,
}

/// What a figure grew by from `was` to `now`; one that went down is threads made again (a
/// reload that restarted the guard: an ended thread's time leaves with it): all of it new.
fn grew(now: f64, was: f64) -> f64 {
    if now >= was {
        now - was
    } else {
        now
    }
}

impl Meter {
    /// The services now, each with its rate since the last reading.
    pub fn read(&mut self, now: std::time::Instant) -> Reading {
        let (services, cpu_s) = services();
        self.at(now, services, cpu_s)
    }

    fn at(
        &mut self,
        now: std::time::Instant,
        mut services: Vec<ServiceCpu>,
        cpu_s: f64,
    ) -> Reading {
        let (mut window, mut ms_per_s) = (0.0, 0.0);
        let was = |name: &str| {
            self.last
                .as_ref()
                .and_then(|(_, before, _)| before.get(name).copied())
                .unwrap_or(0.0)
        };
        let grown: Vec<(String, f64)> = services
            .iter()
            .map(|s| (s.name.clone(), grew(s.cpu_s, was(&s.name))))
            .collect();
        if let Some((at, _, total)) = &self.last {
            window = now.saturating_duration_since(*at).as_secs_f64();
            if window > 0.0 {
                ms_per_s = grew(cpu_s, *total) * 1000.0 / window;
                for (s, (_, g)) in services.iter_mut().zip(&grown) {
                    s.ms_per_s = g * 1000.0 / window;
                }
            }
        }
        let by_name = services.iter().map(|s| (s.name.clone(), s.cpu_s)).collect();
        self.last = Some((now, by_name, cpu_s));
        Reading {
            services,
            cpu_s,
            ms_per_s,
            window_s: window,
            grown,
        }
    }
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
    fn cpu_time_is_read_from_schedstat_or_from_stats_ticks() {
        assert_eq!(from_schedstat("1500000000 2000 31\n"), Some(1.5));
        assert_eq!(from_schedstat(""), None);
        // Fields 14 and 15 (utime 250, stime 50) at 100 ticks a second.
        let stat = "812 (isold-scan) S 1 812 812 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 \
                    5000 1000000 200 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(from_stat(stat, 100.0), Some(3.0));
        assert_eq!(from_stat(stat, 250.0), Some(1.2));
        assert!(ticks_per_s() >= 100.0, "USER_HZ is 100 or more");
    }

    #[test]
    fn a_meter_gives_each_services_rate_since_its_last_reading() {
        let svc = |name: &str, cpu_s: f64| ServiceCpu {
            name: name.into(),
            threads: 1,
            cpu_s,
            ms_per_s: 0.0,
        };
        let mut m = Meter::default();
        let t0 = std::time::Instant::now();
        let first = m.at(t0, vec![svc("metrics", 1.0), svc("stall guard", 2.0)], 5.0);
        assert_eq!((first.ms_per_s, first.window_s), (0.0, 0.0));
        assert!(first.services.iter().all(|s| s.ms_per_s == 0.0));
        let t1 = t0 + std::time::Duration::from_secs(10);
        // The guard made again by a reload: its new thread's 0.05 s are all new.
        let next = m.at(
            t1,
            vec![svc("metrics", 1.05), svc("stall guard", 0.05)],
            5.2,
        );
        assert!((next.window_s - 10.0).abs() < 1e-9);
        assert!((next.ms_per_s - 20.0).abs() < 1e-6, "{next:?}");
        let rate = |n: &str| next.services.iter().find(|s| s.name == n).unwrap().ms_per_s;
        // The counters grow by the same: all of the first reading, then the differences.
        assert_eq!(
            first.grown,
            vec![
                ("metrics".to_string(), 1.0),
                ("stall guard".to_string(), 2.0)
            ]
        );
        let g = |n: &str| next.grown.iter().find(|(s, _)| s == n).unwrap().1;
        assert!((g("metrics") - 0.05).abs() < 1e-9, "{next:?}");
        assert!((g("stall guard") - 0.05).abs() < 1e-9, "{next:?}");
        assert!((rate("metrics") - 5.0).abs() < 1e-6, "{next:?}");
        assert!((rate("stall guard") - 5.0).abs() < 1e-6, "{next:?}");
        // Two readings at one instant: no window, no rate (not a division by zero).
        let same = m.at(t1, vec![svc("metrics", 1.06)], 5.3);
        assert_eq!((same.ms_per_s, same.window_s), (0.0, 0.0), "{same:?}");
        assert!(same.services.iter().all(|s| s.ms_per_s == 0.0), "{same:?}");
    }

    #[test]
    fn this_process_has_its_threads_counted_and_a_total_at_least_their_sum() {
        let before = process_cpu_s();
        let spin = std::thread::Builder::new()
            .name("isold-scan".into())
            .spawn(|| {
                // 30 ms of this thread's CPU in user space, then 30 ms in the kernel.
                let mut x = 0u64;
                while super::super::os::thread_cpu_ns() < 30_000_000 {
                    x = x.wrapping_add(std::hint::black_box(1));
                }
                while super::super::os::thread_cpu_ns() < 60_000_000 {
                    let _ = std::fs::metadata("/proc/self/stat");
                }
                let (list, total) = services();
                (x, list, total)
            })
            .unwrap();
        let (_, list, total) = spin.join().unwrap();
        // Seconds: a test process has not used a day of CPU.
        assert!(total < 86_400.0, "{total}");
        // User and system time, both (a tick of slack).
        assert!(
            (0.05..5.0).contains(&(total - before)),
            "the process's time grew by the thread's 60 ms: {before} -> {total}"
        );
        let scan = list
            .iter()
            .find(|s| s.name == "drift watch")
            .expect("{list:?}");
        assert_eq!(scan.threads, 1, "{list:?}");
        // The thread ran 60 ms: seconds, not nanoseconds or their square.
        assert!(scan.cpu_s >= 0.06 && scan.cpu_s < 5.0, "{list:?}");
        let sum: f64 = list.iter().map(|s| s.cpu_s).sum();
        // getrusage counts in ticks on some kernels: a tick of slack.
        assert!(total + 0.011 >= sum, "total {total} < threads' {sum}");
    }
}
