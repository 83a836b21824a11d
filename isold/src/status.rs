//! The daemon's status file (`status.json` next to the state file, written whole and renamed
//! into place) and `isold status`, which reads it. Below the daemon, the run lock and the
//! audit, which all read it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::contest;

/// What `isold status` reads: kept current by the daemon in `status.json` next to the state
/// file (written whole and renamed into place, so a reader never sees half of it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DaemonStatus {
    pub pid: i32,
    /// Unix time of the start, seconds.
    pub started: u64,
    /// Unix time of the last write of this file.
    pub updated: u64,
    pub config: String,
    pub preset: String,
    pub isolated: String,
    pub housekeeping: String,
    /// How new and changed tasks are seen: "proc connector" or "periodic scans (why)".
    pub task_events: String,
    /// Whether device uevents trigger rescans ("uevents") or not (why).
    pub device_events: String,
    pub interval_s: f64,
    pub task_interval_s: f64,
    /// The PM QoS CPU latency request held on /dev/cpu_dma_latency, microseconds.
    pub cpu_dma_latency_us: Option<u32>,
    /// Corrections since the start, by item (tasks, irq_affinity, sysctl, ...).
    pub corrections: BTreeMap<String, u64>,
    /// The NRI plugin's connection to the runtime (`[containers] nri`), when it is on.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub nri: String,
    /// Containers' claims refused since the start, by reason.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub claims_refused: BTreeMap<String, u64>,
    pub last_correction: Option<Correction>,
    /// Threads left on an affinity their owner set while isold was narrowing them (set
    /// between isold's read and its write, or right after the write): how many since the
    /// start, and the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_pins: Option<OwnerPins>,
    /// Targets the kernel does not let isold change, with why.
    pub not_changeable: Vec<String>,
    pub reloads: u64,
    /// "running", or "stopping" while it stops.
    pub state: String,
    /// The configuration's `on_stop` ("keep" or "restore").
    #[serde(default)]
    pub on_stop: String,
    /// Files the policy wrote that are not in effect yet, each with what it waits for.
    #[serde(default)]
    pub waiting: Vec<String>,
    /// Values something else keeps changing back, left alone for a growing back-off.
    #[serde(default)]
    pub contested: Vec<contest::Contested>,
    /// Lines of the state journal that were no entries (a write cut short by a full disk
    /// or a crash, or changed since), kept for the administrator: how many, and where.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_aside: Option<SetAside>,
    /// How fast wide tasks were narrowed in answer to their process event (fast or general
    /// path): from the kernel's event to the affinity read back, over the last
    /// [`REACTIONS_KEPT`] corrections.
    #[serde(default)]
    pub task_reaction: Option<Reaction>,
    /// The stall guard (`[stalls]`): what it watches and what it lent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stalls: Option<Stalls>,
    /// The noise ledger (`[noise]`): what it records and each CPU's longest interruption.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<NoiseStatus>,
    /// What each of the daemon's services has cost so far: its threads' CPU time (as of the
    /// last task sweep).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<ServiceCpu>,
    /// The daemon's whole CPU time at the same moment, seconds (ended threads included).
    #[serde(default)]
    pub cpu_s: f64,
    /// Its rate over the last `cpu_window_s` seconds (between two task sweeps), ms per s.
    #[serde(default)]
    pub cpu_ms_per_s: f64,
    #[serde(default)]
    pub cpu_window_s: f64,
}

/// One service of the daemon and its cost (see [`DaemonStatus::services`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServiceCpu {
    /// "events and tasks", "drift watch", "metrics", "noise ledger", "stall guard", "hook
    /// socket", "NRI plugin", "other".
    pub name: String,
    /// Its threads now.
    pub threads: usize,
    /// Their CPU time since the start, seconds.
    pub cpu_s: f64,
    /// Their CPU time over the last task sweep's interval, ms per s: what it costs now.
    #[serde(default)]
    pub ms_per_s: f64,
}

/// The noise ledger's part of the status (see [`DaemonStatus::noise`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NoiseStatus {
    /// "recording CPUs 2-3", or why not.
    pub state: String,
    /// Each CPU's longest interruption since the start: (CPU, seconds, source).
    pub longest: Vec<(usize, f64, String)>,
    /// Interruptions counted since the start, all CPUs.
    pub events: u64,
    /// Pages of the kernel's buffers that followed lost events.
    pub lost_pages: u64,
    /// The ledger thread's CPU time so far, seconds.
    pub cpu_s: f64,
}

/// The stall guard's part of the status (see [`DaemonStatus::stalls`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stalls {
    /// "on: CPUs 2-3, ..." or "off (why)".
    pub guard: String,
    /// What the kernel's fair server gives fair tasks on those CPUs.
    pub fair_server: String,
    /// Threads lent a slice since the start.
    pub rescues: u64,
    /// The same by CPU.
    pub by_cpu: BTreeMap<String, u64>,
    /// The CPU time the lent threads used, seconds, by CPU: what the workload gave up.
    #[serde(default)]
    pub lent_s_by_cpu: BTreeMap<String, f64>,
    /// Threads lent a slice now.
    pub lent_now: u64,
    /// The last rescue, said as the log said it, with its Unix time.
    pub last: Option<Correction>,
    /// The guard thread's CPU time so far, seconds.
    pub cpu_s: f64,
    /// Its passes, its walks over every thread, and the last walk's length.
    #[serde(default)]
    pub passes: u64,
    /// The passes that read no `/proc/stat`: the noise ledger's task switches said every
    /// watched CPU ran the task it ran at the last read (idle or not).
    #[serde(default)]
    pub quiet_passes: u64,
    /// The passes after which the guard waited half a threshold: every watched CPU known
    /// idle from the ledger's task switches.
    #[serde(default)]
    pub slept: u64,
    #[serde(default)]
    pub walks: u64,
    #[serde(default)]
    pub last_walk_ms: f64,
}

/// Threads left on their owner's pin (see [`DaemonStatus::owner_pins`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OwnerPins {
    /// Since the start.
    pub count: u64,
    /// The last: the thread, its affinity and when isold found it so.
    pub last: String,
}

/// The state journal's lines set aside (see [`DaemonStatus::set_aside`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SetAside {
    /// Lines in the file.
    pub lines: usize,
    /// The file that keeps them (`state.journal.bad`).
    pub file: String,
}

/// How many of the last task corrections `task_reaction` covers.
pub const REACTIONS_KEPT: usize = 1000;

/// Percentiles of the reaction to wide tasks, milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reaction {
    /// Corrections measured since the start (the percentiles cover the last 1000).
    pub count: u64,
    pub median_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Reaction {
    /// The percentiles of `ns` (nanoseconds; `count`: all corrections measured).
    pub fn of(ns: &std::collections::VecDeque<u64>, count: u64) -> Option<Reaction> {
        if ns.is_empty() {
            return None;
        }
        let mut v: Vec<u64> = ns.iter().copied().collect();
        v.sort_unstable();
        let at =
            |p: f64| v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1] as f64 / 1e6;
        Some(Reaction {
            count,
            median_ms: at(0.5),
            p99_ms: at(0.99),
            max_ms: at(1.0),
        })
    }
}

/// One value put right.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Correction {
    /// Unix time, seconds.
    pub at: u64,
    pub item: String,
    pub label: String,
    /// The outcome as the engine reports it ("changed: 3 -> 0-1").
    pub what: String,
}

/// Where the status file goes: next to the state file.
pub fn status_path(state_path: &Path) -> PathBuf {
    state_path
        .parent()
        .unwrap_or(Path::new("."))
        .join("status.json")
}

/// "  CPU time: 2.1 ms/s over the last 10 s (0.84 s since the start): drift watch 1.2 ms/s
/// (0.31 s), ...": each service's cost now, the dearest first, as of the daemon's last sweep
/// (before a second sweep, the figures since the start alone).
fn services_line(s: &DaemonStatus) -> String {
    let now = s.cpu_window_s > 0.0;
    let mut by: Vec<&ServiceCpu> = s.services.iter().collect();
    by.sort_by(|a, b| {
        let key = |v: &ServiceCpu| if now { v.ms_per_s } else { v.cpu_s };
        key(b).total_cmp(&key(a)).then(a.name.cmp(&b.name))
    });
    let parts: Vec<String> = by
        .iter()
        .map(|v| {
            if now {
                format!("{} {:.1} ms/s ({:.2} s)", v.name, v.ms_per_s, v.cpu_s)
            } else {
                format!("{} {:.2} s", v.name, v.cpu_s)
            }
        })
        .collect();
    let head = if now {
        format!(
            "{:.1} ms/s over the last {:.0} s ({:.2} s since the start)",
            s.cpu_ms_per_s, s.cpu_window_s, s.cpu_s
        )
    } else {
        format!("{:.2} s since the start", s.cpu_s)
    };
    format!("  CPU time: {head}: {}\n", parts.join(", "))
}

/// Where the noise ledger's file goes: next to the state file.
pub fn noise_path(state_path: &Path) -> PathBuf {
    state_path
        .parent()
        .unwrap_or(Path::new("."))
        .join("noise.json")
}

/// Unix time now, seconds.
pub(crate) fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The status file of the daemon whose state file is `state_path`, when it can be read.
pub fn read(state_path: &Path) -> Option<DaemonStatus> {
    fs::read_to_string(status_path(state_path))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
}

/// `isold status`: the daemon's status file, and whether its process is alive. Exit 0 when
/// it runs, 3 when it does not, 4 when that cannot be told (the file cannot be read: its
/// directory is root's only under isold.service, or it is not a status file).
pub fn status(
    root: &libtaskisol::SysRoot,
    config_path: &Path,
    state_path: &Path,
    json: bool,
) -> i32 {
    let path = status_path(state_path);
    let read = match fs::read_to_string(&path) {
        Ok(t) => serde_json::from_str::<DaemonStatus>(&t)
            .map(Some)
            .map_err(|e| format!("{}: not an isold status file: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!(
            "cannot read {}: {}{}",
            path.display(),
            libtaskisol::error::io_strerror(&e),
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                " (run isold status as root)"
            } else {
                ""
            }
        )),
    };
    let st = match read {
        Ok(st) => st,
        Err(msg) => {
            if json {
                println!("{}", serde_json::json!({ "running": null, "error": msg }));
            } else {
                eprintln!("isold: {msg}");
            }
            return crate::exit::EXIT_STATUS_UNKNOWN;
        }
    };
    let alive = st.as_ref().is_some_and(|s| {
        fs::read_to_string(format!("/proc/{}/comm", s.pid)).is_ok_and(|c| c.trim() == "isold")
    });
    let kubelet = crate::claims::kubelet_disagreements(root, config_path, state_path);
    if json {
        let v = serde_json::json!({ "running": alive, "status": st, "kubelet": kubelet });
        println!("{v}");
    } else {
        match (&st, alive) {
            (Some(s), true) => {
                print!("{}", human_status(s));
                if !kubelet.is_empty() {
                    println!("  isold and the kubelet disagree ({}):", kubelet.len());
                    for d in &kubelet {
                        println!("    {}\n      fix: {}", d.what, d.fix);
                    }
                }
            }
            (Some(s), false) => println!(
                "isold run is not running (its last status, {}, names pid {}, which is gone)",
                path.display(),
                s.pid
            ),
            (None, _) => println!("isold run is not running (no {})", path.display()),
        }
    }
    if alive {
        crate::exit::EXIT_OK
    } else {
        crate::exit::EXIT_NOT_RUNNING
    }
}

/// The human form of a running daemon's status.
///
/// Long because it prints one section after another of a single status; split, each part would only
/// pass the buffer on.
pub fn human_status(s: &DaemonStatus) -> String {
    let mut out = format!(
        "isold run: {} (pid {}), since {} s ago\n  policy {} ({}): isolated CPUs {}, housekeeping CPUs {}\n  tasks: {}; devices: {}\n  scans every {} s, every thread's affinity every {} s\n",
        s.state,
        s.pid,
        now_s().saturating_sub(s.started),
        s.config,
        s.preset,
        s.isolated,
        s.housekeeping,
        s.task_events,
        s.device_events,
        s.interval_s,
        s.task_interval_s
    );
    if let Some(us) = s.cpu_dma_latency_us {
        out.push_str(&format!("  holding /dev/cpu_dma_latency at {us} us\n"));
    }
    if !s.on_stop.is_empty() {
        out.push_str(&format!(
            "  on stop: {}\n",
            if s.on_stop == "restore" {
                "restore (a plain stop; never a restart or a shutdown)"
            } else {
                "keep every value (isold restore undoes them)"
            }
        ));
    }
    if !s.waiting.is_empty() {
        out.push_str(&format!("  waiting ({}):\n", s.waiting.len()));
        for w in &s.waiting {
            out.push_str(&format!("    {w}\n"));
        }
    }
    if !s.contested.is_empty() {
        out.push_str(&format!(
            "  contested: changed back by something else ({}):\n",
            s.contested.len()
        ));
        for c in &s.contested {
            out.push_str(&format!(
                "    {}: {} repairs, now repaired every {} s\n",
                c.label, c.repairs, c.backoff_s
            ));
        }
    }
    let total: u64 = s.corrections.values().sum();
    if total == 0 {
        out.push_str("  corrections: none\n");
    } else {
        let by: Vec<String> = s
            .corrections
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        out.push_str(&format!("  corrections: {total} ({})\n", by.join(", ")));
    }
    if !s.nri.is_empty() {
        out.push_str(&format!("  NRI: {}\n", s.nri));
    }
    if !s.claims_refused.is_empty() {
        let by: Vec<String> = s
            .claims_refused
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        out.push_str(&format!(
            "  containers' claims refused: {} ({})\n",
            s.claims_refused.values().sum::<u64>(),
            by.join(", ")
        ));
    }
    if let Some(c) = &s.last_correction {
        out.push_str(&format!(
            "  last correction {} s ago: {}: {}\n",
            now_s().saturating_sub(c.at),
            c.label,
            c.what
        ));
    }
    if let Some(p) = &s.owner_pins {
        out.push_str(&format!(
            "  threads left on their owner's pin, set while isold narrowed them: {} (the last: {})\n",
            p.count, p.last
        ));
    }
    if let Some(r) = &s.task_reaction {
        out.push_str(&format!(
            "  wide tasks narrowed {:.2} ms after their event (median; p99 {:.2} ms, max {:.2} ms, last {} of {})\n",
            r.median_ms,
            r.p99_ms,
            r.max_ms,
            r.count.min(REACTIONS_KEPT as u64),
            r.count
        ));
    }
    if let Some(a) = &s.set_aside {
        out.push_str(&format!(
            "  state journal: {} line(s) set aside, not whole entries (a write cut short or changed), kept in {}\n",
            a.lines, a.file
        ));
    }
    if let Some(g) = &s.stalls {
        out.push_str(&format!("  stall guard: {}\n", g.guard));
        out.push_str(&format!("    kernel's fair server: {}\n", g.fair_server));
        let by: Vec<String> = g.by_cpu.iter().map(|(k, v)| format!("{k} {v}")).collect();
        out.push_str(&format!(
            "    rescued: {}{}; lent now: {}\n    guard: {:.2} s of CPU time, {} passes ({} without /proc/stat, told by the noise ledger's task switches; {} before a sleep of half a threshold, every watched CPU idle), {} walks over every thread (the last {:.1} ms)\n",
            g.rescues,
            if by.is_empty() {
                String::new()
            } else {
                format!(" ({})", by.join(", "))
            },
            g.lent_now,
            g.cpu_s,
            g.passes,
            g.quiet_passes,
            g.slept,
            g.walks,
            g.last_walk_ms
        ));
        if !g.lent_s_by_cpu.is_empty() {
            let by: Vec<String> = g
                .lent_s_by_cpu
                .iter()
                .map(|(k, v)| format!("{k} {:.1} ms", v * 1000.0))
                .collect();
            out.push_str(&format!(
                "    CPU time the lent threads used: {}\n",
                by.join(", ")
            ));
        }
        if let Some(c) = &g.last {
            out.push_str(&format!(
                "    last rescue {} s ago: {}\n",
                now_s().saturating_sub(c.at),
                c.what
            ));
        }
    }
    if let Some(n) = &s.noise {
        out.push_str(&format!("  noise ledger: {}\n", n.state));
        if n.events > 0 || n.cpu_s > 0.0 {
            out.push_str(&format!(
                "    interruptions recorded: {}; ledger: {:.2} s of CPU time{}\n",
                n.events,
                n.cpu_s,
                if n.lost_pages > 0 {
                    format!("; events lost before {} pages", n.lost_pages)
                } else {
                    String::new()
                }
            ));
        }
        for (cpu, secs, source) in &n.longest {
            out.push_str(&format!(
                "    CPU {cpu}: longest interruption {:.1} us: {source}\n",
                secs * 1e6
            ));
        }
    }
    if !s.services.is_empty() {
        out.push_str(&services_line(s));
    }
    if s.reloads > 0 {
        out.push_str(&format!("  reloads: {}\n", s.reloads));
    }
    // Threads the kernel pins (per-CPU kthreads, kworkers) are many and expected: counted;
    // the rest (IRQs, files) listed.
    let (threads, other): (Vec<&String>, Vec<&String>) = s
        .not_changeable
        .iter()
        .partition(|n| n.starts_with("kthread ") || n.starts_with("task "));
    if !other.is_empty() {
        out.push_str(&format!("  not changeable ({}):\n", other.len()));
        for n in other {
            out.push_str(&format!("    {n}\n"));
        }
    }
    if !threads.is_empty() {
        out.push_str(&format!(
            "  threads whose affinity the kernel manages: {} (--json lists them)\n",
            threads.len()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_services_cpu_time_is_shown_the_dearest_now_first() {
        let mut s = DaemonStatus {
            cpu_s: 0.5,
            services: vec![
                ServiceCpu {
                    name: "drift watch".into(),
                    threads: 1,
                    cpu_s: 0.1,
                    ms_per_s: 4.0,
                },
                ServiceCpu {
                    name: "metrics".into(),
                    threads: 2,
                    cpu_s: 0.3,
                    ms_per_s: 1.5,
                },
            ],
            ..DaemonStatus::default()
        };
        // Before a second sweep: no rate yet, the totals, the dearest first.
        assert_eq!(
            services_line(&s),
            "  CPU time: 0.50 s since the start: metrics 0.30 s, drift watch 0.10 s\n"
        );
        (s.cpu_ms_per_s, s.cpu_window_s) = (6.0, 10.0);
        assert_eq!(
            services_line(&s),
            "  CPU time: 6.0 ms/s over the last 10 s (0.50 s since the start): drift watch 4.0 ms/s (0.10 s), metrics 1.5 ms/s (0.30 s)\n"
        );
    }

    #[test]
    fn reaction_percentiles_cover_the_kept_times() {
        let none = std::collections::VecDeque::new();
        assert_eq!(Reaction::of(&none, 0), None);
        // 1..=200 ms: the median is the 100th, the p99 the 198th, the max the 200th.
        let ns: std::collections::VecDeque<u64> =
            (1..=200u64).rev().map(|ms| ms * 1_000_000).collect();
        let r = Reaction::of(&ns, 1234).unwrap();
        assert_eq!(
            r,
            Reaction {
                count: 1234,
                median_ms: 100.0,
                p99_ms: 198.0,
                max_ms: 200.0,
            }
        );
        let one: std::collections::VecDeque<u64> = [2_500_000].into();
        let r = Reaction::of(&one, 1).unwrap();
        assert_eq!((r.median_ms, r.p99_ms, r.max_ms), (2.5, 2.5, 2.5));
    }

    /// Each optional part of `isold status` is shown when it has something and only then.
    #[test]
    fn status_shows_each_part_that_has_something_and_no_other() {
        let empty = DaemonStatus {
            state: "running".into(),
            ..DaemonStatus::default()
        };
        let parts = [
            "  on stop: ",
            "  waiting (",
            "  contested: ",
            "  corrections: none\n",
            "  NRI: ",
            "  containers' claims refused: ",
            "    CPU time the lent threads used: ",
            "  CPU time: ",
            "  reloads: ",
        ];
        let text = human_status(&empty);
        for p in &parts[..] {
            assert_eq!(
                text.contains(p),
                *p == "  corrections: none\n",
                "{p:?} in {text}"
            );
        }
        let full = DaemonStatus {
            on_stop: "restore".into(),
            waiting: vec!["/etc/default/grub: update-grub and a reboot".into()],
            contested: vec![contest::Contested {
                id: "sysctl:kernel.printk".into(),
                label: "sysctl kernel.printk".into(),
                repairs: 5,
                backoff_s: 40,
            }],
            corrections: [("sysctl".to_string(), 3)].into(),
            nri: "registered with /run/containerd/containerd.sock".into(),
            claims_refused: [("shared".to_string(), 2)].into(),
            stalls: Some(Stalls {
                guard: "on: CPUs 2-3".into(),
                lent_s_by_cpu: [("3".to_string(), 0.0125)].into(),
                passes: 12,
                quiet_passes: 5,
                slept: 9,
                ..Stalls::default()
            }),
            services: vec![ServiceCpu {
                name: "drift watch".into(),
                threads: 1,
                cpu_s: 0.1,
                ms_per_s: 0.0,
            }],
            reloads: 2,
            ..empty.clone()
        };
        let text = human_status(&full);
        for want in [
            "  on stop: restore (a plain stop; never a restart or a shutdown)\n",
            "  waiting (1):\n    /etc/default/grub: update-grub and a reboot\n",
            "  contested: changed back by something else (1):\n    sysctl kernel.printk: 5 repairs, now repaired every 40 s\n",
            "  corrections: 3 (sysctl 3)\n",
            "  NRI: registered with /run/containerd/containerd.sock\n",
            "  containers' claims refused: 2 (shared 2)\n",
            "    CPU time the lent threads used: 3 12.5 ms\n",
            "  CPU time: 0.00 s since the start: drift watch 0.10 s\n",
            "  reloads: 2\n",
            "12 passes (5 without /proc/stat, told by the noise ledger's task switches; 9 before a sleep of half a threshold, every watched CPU idle), 0 walks",
        ] {
            assert!(text.contains(want), "{want:?} in {text}");
        }
        assert!(!text.contains("corrections: none"), "{text}");
        let keep = DaemonStatus {
            on_stop: "keep".into(),
            ..empty
        };
        assert!(human_status(&keep)
            .contains("  on stop: keep every value (isold restore undoes them)\n"));
    }

    #[test]
    fn the_ledgers_figures_show_once_it_counted_or_ran_and_lost_pages_only_when_some() {
        let with = |events: u64, cpu_s: f64, lost_pages: u64| {
            human_status(&DaemonStatus {
                noise: Some(NoiseStatus {
                    state: "recording CPUs 3".into(),
                    events,
                    cpu_s,
                    lost_pages,
                    ..NoiseStatus::default()
                }),
                ..DaemonStatus::default()
            })
        };
        assert!(!with(0, 0.0, 0).contains("interruptions recorded"));
        assert!(with(0, 0.01, 0)
            .contains("    interruptions recorded: 0; ledger: 0.01 s of CPU time\n"));
        assert!(
            with(7, 0.0, 0).contains("    interruptions recorded: 7; ledger: 0.00 s of CPU time\n")
        );
        assert!(with(7, 0.0, 2).contains(
            "    interruptions recorded: 7; ledger: 0.00 s of CPU time; events lost before 2 pages\n"
        ));
    }

    #[test]
    fn kernel_managed_threads_are_counted_and_other_unchangeables_listed() {
        let s = |not_changeable: Vec<&str>| {
            human_status(&DaemonStatus {
                not_changeable: not_changeable.into_iter().map(String::from).collect(),
                ..DaemonStatus::default()
            })
        };
        let text = s(vec![
            "kthread 40 ksoftirqd/3",
            "task 812/813 worker",
            "IRQ 0 (timer): the kernel refuses",
        ]);
        assert!(
            text.contains("  not changeable (1):\n    IRQ 0 (timer): the kernel refuses\n"),
            "{text}"
        );
        assert!(
            text.contains("  threads whose affinity the kernel manages: 2 (--json lists them)\n"),
            "{text}"
        );
        let none = s(vec![]);
        assert!(!none.contains("not changeable") && !none.contains("kernel manages"));
    }

    #[test]
    fn the_last_correction_is_told_in_seconds_ago() {
        let s = DaemonStatus {
            last_correction: Some(Correction {
                at: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_secs()
                    - 30,
                item: "sysctl".into(),
                label: "sysctl vm.stat_interval".into(),
                what: "changed: 1 -> 10".into(),
            }),
            ..DaemonStatus::default()
        };
        let text = human_status(&s);
        assert!(
            text.contains(
                "  last correction 30 s ago: sysctl vm.stat_interval: changed: 1 -> 10\n"
            ) || text.contains("  last correction 31 s ago: "),
            "{text}"
        );
    }

    #[test]
    fn status_shows_the_reaction_when_there_is_one() {
        let mut s = DaemonStatus {
            state: "running".into(),
            ..DaemonStatus::default()
        };
        assert!(!human_status(&s).contains("narrowed"));
        s.task_reaction = Some(Reaction {
            count: 1500,
            median_ms: 0.31,
            p99_ms: 1.2,
            max_ms: 4.567,
        });
        let text = human_status(&s);
        assert!(
            text.contains("  wide tasks narrowed 0.31 ms after their event (median; p99 1.20 ms, max 4.57 ms, last 1000 of 1500)\n"),
            "{text}"
        );
    }

    #[test]
    fn status_names_each_cpus_longest_interruption() {
        let s = DaemonStatus {
            state: "running".into(),
            noise: Some(NoiseStatus {
                state: "recording CPUs 2-3".into(),
                longest: vec![(3, 83.2e-6, "kernel thread kworker/3:1".into())],
                events: 412,
                lost_pages: 0,
                cpu_s: 0.25,
            }),
            ..DaemonStatus::default()
        };
        let text = human_status(&s);
        assert!(
            text.contains("  noise ledger: recording CPUs 2-3\n"),
            "{text}"
        );
        assert!(
            text.contains("    interruptions recorded: 412; ledger: 0.25 s of CPU time\n"),
            "{text}"
        );
        assert!(
            text.contains("    CPU 3: longest interruption 83.2 us: kernel thread kworker/3:1\n"),
            "{text}"
        );
    }
}
