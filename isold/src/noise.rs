//! `isold noise`: every interruption of the isolated CPUs over a window, timed and named
//! (libtaskisol::noise records them in a tracefs instance of its own and reads it from a
//! housekeeping CPU).

use std::fmt::Write as _;
use std::time::Duration;

use libtaskisol::audit::{noise_fix, Scope};
use libtaskisol::noise::{self, CpuReport};
use libtaskisol::sysroot::SysRoot;
use libtaskisol::topology::{self, IsolatedCpus};
use serde::{Deserialize, Serialize};

use crate::audit::rate;
use crate::cli::NoiseArgs;
use crate::exit::{fail, print_out, EXIT_OK};
use crate::text::wrap;

/// Sources shown per CPU without --verbose.
const SHOWN: usize = 8;

/// How often the CPUs' buffers are read during the window.
const READ_EVERY: Duration = Duration::from_millis(250);

/// `isold noise --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoiseReport {
    /// The running kernel's release.
    pub kernel: String,
    /// The CPUs watched.
    pub cpus: String,
    /// Where they come from.
    pub source: String,
    /// The window, seconds.
    pub window_s: f64,
    /// Unix time of the window's start (the daemon's ledger; none for a measure of its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_unix: Option<u64>,
    /// One entry per CPU, ascending.
    pub per_cpu: Vec<CpuReport>,
    /// Pages of the kernel's buffers that came after lost events (the reader fell behind).
    pub lost_pages: u64,
    /// Remarks.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// `isold noise --duration SECS`: one recording of its own.
pub fn run(root: &SysRoot, scope: &Scope, args: &NoiseArgs) -> i32 {
    let duration = args.duration.unwrap_or(10.0);
    if !(duration > 0.0 && duration <= 3600.0) {
        return crate::exit::usage(format!(
            "--duration {duration}: give seconds from more than 0 to 3600"
        ));
    }
    if root.is_host() {
        // The observer stays off the CPUs it watches.
        if let Ok(online) = topology::online_cpus(root) {
            let _ = libtaskisol::sched::set_affinity(0, &online.difference(&scope.cpus));
        }
    }
    let tracefs = match noise::find(root) {
        Ok(t) => t,
        Err(why) => return fail(format!("noise: {why}")),
    };
    if let Some(why) = libtaskisol::tracefs::enabling_would_wait(root, &tracefs, &scope.cpus) {
        return fail(format!("noise: {why}"));
    }
    let window = Duration::from_secs_f64(duration);
    let offset = noise::unix_offset();
    // Said on standard error once the events are enabled (that interrupts every CPU once):
    // the window starts then.
    let ready = || {
        eprintln!(
            "isold noise: recording CPUs {} for {} s",
            scope.cpus, duration
        )
    };
    let (sums, rec) = match noise::measure(root, &tracefs, scope, window, READ_EVERY, ready) {
        Ok(v) => v,
        Err(e) => return fail(format!("noise: {e}")),
    };
    let lost = rec.lost_pages;
    let mono = rec.clock == "mono";
    let mut notes = Vec::new();
    if rec.bad_pages > 0 {
        notes.push(format!(
            "{} pages of the kernel's buffers did not parse and were skipped",
            rec.bad_pages
        ));
    }
    if let Err(e) = rec.stop(root) {
        notes.push(format!("the tracefs instance was not removed: {e}"));
    }
    notes.extend(without_quiesce_notes(root, &scope.cpus));
    let nohz = IsolatedCpus::discover(root)
        .map(|i| i.nohz_full)
        .unwrap_or_default();
    let per_cpu = sums
        .iter()
        .map(|(&cpu, s)| {
            let mut c = report_of(cpu, s, &nohz, &scope.cpus);
            if mono {
                c.longest_at_unix = c.longest_at_seconds.map(|t| t + offset);
            }
            c
        })
        .collect();
    let report = NoiseReport {
        kernel: kernel(root),
        cpus: scope.cpus.to_string(),
        source: scope.source.clone(),
        window_s: duration,
        from_unix: None,
        per_cpu,
        lost_pages: lost,
        notes,
    };
    print(&report, args)
}

fn kernel(root: &SysRoot) -> String {
    root.read_value_opt("/proc/sys/kernel/osrelease")
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// A CPU's report, each source with its fix.
fn report_of(
    cpu: usize,
    s: &noise::Sums,
    nohz: &libtaskisol::CpuSet,
    cpus: &libtaskisol::CpuSet,
) -> CpuReport {
    CpuReport::of(cpu, s, |src| {
        noise_fix(src.kind.as_str(), &src.name, nohz.contains(cpu), cpus)
    })
}

/// A `--since` duration: seconds, or a number with s, m, h or d.
pub fn parse_since(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (num, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => t.split_at(i),
        None => (t, "s"),
    };
    let mult = match unit {
        "s" | "sec" => 1,
        "m" | "min" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => 0,
    };
    match num.parse::<u64>() {
        Ok(n) if n > 0 && mult > 0 => Ok(n.saturating_mul(mult)),
        _ => Err(format!(
            "--since {text}: give a duration such as 90s, 10m, 2h or 1d"
        )),
    }
}

/// `isold noise` without --duration: the running daemon's ledger (`noise.json` next to its
/// status), since its start or over `--since`.
pub fn from_daemon(root: &SysRoot, state_path: &std::path::Path, args: &NoiseArgs) -> i32 {
    let since = match args.since.as_deref().map(parse_since).transpose() {
        Ok(s) => s,
        Err(e) => return crate::exit::usage(e),
    };
    let only: Option<libtaskisol::CpuSet> = match args.cpus.as_deref().map(str::parse).transpose() {
        Ok(c) => c,
        Err(e) => return crate::exit::usage(format!("--cpus: {e}")),
    };
    match daemon_report(
        root,
        state_path,
        since,
        only.as_ref(),
        crate::status::now_s(),
    ) {
        // The ledger of a daemon that is gone is shown, and said so by the exit status too.
        Ok(r) => match print(&r, args) {
            EXIT_OK if crate::lifecycle::running(state_path).is_none() => {
                crate::exit::EXIT_NOT_RUNNING
            }
            code => code,
        },
        Err(code) => code,
    }
}

/// The report of the daemon's ledger over the last `since` seconds (None: since its start)
/// at Unix time `now`, for the CPUs `only` (None: every one recorded); Err: the exit code,
/// the reason said on standard error.
pub fn daemon_report(
    root: &SysRoot,
    state_path: &std::path::Path,
    since: Option<u64>,
    only: Option<&libtaskisol::CpuSet>,
    now: u64,
) -> Result<NoiseReport, i32> {
    let path = crate::status::noise_path(state_path);
    let running = crate::lifecycle::running(state_path);
    let file = match std::fs::read_to_string(&path) {
        Ok(t) => match serde_json::from_str::<noise::LedgerFile>(&t) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("isold: {}: not a noise ledger: {e}", path.display());
                return Err(crate::exit::EXIT_STATUS_UNKNOWN);
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!(
                "isold: {}: {} (measure once with --duration SECS)",
                path.display(),
                if running.is_some() {
                    "isold run keeps no noise ledger ([noise] enabled = false, or it has not started yet)"
                } else {
                    "isold run is not running"
                }
            );
            return Err(crate::exit::EXIT_NOT_RUNNING);
        }
        Err(e) => {
            eprintln!(
                "isold: cannot read {}: {}",
                path.display(),
                libtaskisol::error::io_strerror(&e)
            );
            return Err(crate::exit::EXIT_STATUS_UNKNOWN);
        }
    };
    let (from, per) = file.window(since.map(|s| now.saturating_sub(s)));
    let recorded: libtaskisol::CpuSet = file.cpus.parse().unwrap_or_default();
    let cpus = match only {
        Some(o) => o.intersection(&recorded),
        None => recorded.clone(),
    };
    let nohz = IsolatedCpus::discover(root)
        .map(|i| i.nohz_full)
        .unwrap_or_default();
    let mut notes = Vec::new();
    if running.is_none() || file.state == "stopped" {
        notes.push(format!(
            "isold run (pid {}) is not running: its ledger as it was at {}",
            file.pid,
            utc(file.updated_unix as f64)
        ));
    } else if !file.state.starts_with("recording") {
        notes.push(format!("the ledger is not recording: {}", file.state));
    }
    if let Some(o) = only {
        let missing = o.difference(&recorded);
        if !missing.is_empty() {
            notes.push(format!("CPUs {missing} are not recorded by isold run"));
        }
    }
    if let Some(s) = since {
        if file.started_unix > now.saturating_sub(s) {
            notes.push(format!(
                "the ledger starts at {} (isold run's start)",
                utc(file.started_unix as f64)
            ));
        } else if from > now.saturating_sub(s) + 60 {
            notes.push(format!(
                "past the last hour the ledger is kept by the hour: from {}",
                utc(from as f64)
            ));
        }
    }
    let per_cpu = cpus
        .iter()
        .map(|cpu| match per.get(&cpu) {
            Some((s, at)) => {
                let mut c = report_of(cpu, s, &nohz, &recorded);
                // 0: a recording clock that is not CLOCK_MONOTONIC, with no Unix time.
                c.longest_at_unix = at.filter(|t| *t > 0.0);
                c
            }
            None => report_of(cpu, &noise::Sums::default(), &nohz, &recorded),
        })
        .collect();
    notes.extend(without_quiesce_notes(root, &cpus));
    let end = file.updated_unix.max(from);
    Ok(NoiseReport {
        kernel: kernel(root),
        cpus: cpus.to_string(),
        source: format!("the ledger of isold run, pid {}", file.pid),
        window_s: (end - from) as f64,
        from_unix: Some(from),
        per_cpu,
        lost_pages: file.lost_pages,
        notes,
    })
}

/// On a kernel with the task-isolation interface, one note per thread pinned inside `cpus`
/// that runs without the vmstat quiesce: the vmstat work its system calls leave behind is
/// noise this recording may count. Nothing on other kernels.
fn without_quiesce_notes(root: &SysRoot, cpus: &libtaskisol::CpuSet) -> Vec<String> {
    match libtaskisol::audit::pinned_without_quiesce(root, cpus) {
        Ok(threads) => threads
            .iter()
            .map(|t| {
                format!(
                    "the kernel has task isolation, and {} runs on CPUs {} without the vmstat quiesce: start it with chisol -q vmstat_sync -I conf (threads that activate themselves) or -a -I active",
                    t.name(),
                    t.affinity
                )
            })
            .collect(),
        Err(e) => vec![format!("the threads' task isolation could not be read: {e}")],
    }
}

fn print(report: &NoiseReport, args: &NoiseArgs) -> i32 {
    if args.json {
        match serde_json::to_string_pretty(report) {
            Ok(j) => print_out(&format!("{j}\n")),
            Err(e) => fail(e),
        }
    } else {
        print_out(&human(report, args.verbose));
        EXIT_OK
    }
}

/// Unix time `t` as UTC, to the millisecond: `2026-12-04 03:12:05.123 UTC`.
pub fn utc(t: f64) -> String {
    let ms = (t * 1000.0).round() as i64;
    let (secs, ms) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days to a civil date (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{ms:03} UTC",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

/// A duration for a human: ns, us or ms with three digits.
fn dur(s: f64) -> String {
    let us = s * 1e6;
    if us < 1.0 {
        format!("{:.0} ns", s * 1e9)
    } else if us < 1000.0 {
        format!("{us:.1} us")
    } else if us < 1e6 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{s:.2} s")
    }
}

/// The human form: a block per CPU, fitting 80 columns.
pub fn human(r: &NoiseReport, verbose: bool) -> String {
    let mut s = String::new();
    let head = match r.from_unix {
        Some(f) => format!(
            "isold noise: CPUs {} ({}), Linux {}, {} s since {}",
            r.cpus,
            r.source,
            r.kernel,
            r.window_s,
            utc(f as f64)
        ),
        None => format!(
            "isold noise: CPUs {} ({}), Linux {}, window {} s",
            r.cpus, r.source, r.kernel, r.window_s
        ),
    };
    let _ = writeln!(s, "{}", wrap(&head, 0, 2));
    for c in &r.per_cpu {
        if c.events == 0 {
            let _ = writeln!(s, "CPU {}: no interruption", c.cpu);
            continue;
        }
        let line = format!(
            "CPU {}: {} interruptions ({}/s), {} in all ({:.4} %); longest {}: {}{}",
            c.cpu,
            c.events,
            rate(c.events as f64 / r.window_s.max(1.0)),
            dur(c.seconds),
            c.seconds / r.window_s.max(1.0) * 100.0,
            dur(c.longest_seconds),
            c.longest_source,
            match (c.longest_at_unix, c.longest_at_seconds) {
                (Some(u), _) => format!(" at {}", utc(u)),
                (None, Some(t)) => format!(" at {t:.6} s"),
                (None, None) => String::new(),
            }
        );
        let _ = writeln!(s, "{}", wrap(&line, 0, 2));
        let _ = writeln!(s, "    events      total    longest  source");
        let shown = if verbose { usize::MAX } else { SHOWN };
        let mut fixes: Vec<&str> = Vec::new();
        for src in c.sources.iter().take(shown) {
            let n = match fixes.iter().position(|f| *f == src.fix) {
                Some(i) => i + 1,
                None => {
                    fixes.push(&src.fix);
                    fixes.len()
                }
            };
            let (first, rest) = crate::text::cell(&src.source, 38);
            let _ = writeln!(
                s,
                "  {:>8} {:>10} {:>10}  {:<38} [{n}]",
                src.events,
                dur(src.seconds),
                dur(src.longest_seconds),
                first
            );
            for r in rest {
                let _ = writeln!(s, "{:34}{r}", "");
            }
        }
        if c.sources.len() > shown {
            let _ = writeln!(
                s,
                "  ... and {} more (-v or --json lists them)",
                c.sources.len() - shown
            );
        }
        for (i, f) in fixes.iter().enumerate() {
            let head = format!("  [{}] fix: ", i + 1);
            let _ = writeln!(s, "{head}{}", wrap(f, head.len(), 6));
        }
    }
    if r.lost_pages > 0 {
        let line = format!(
            "note: events were lost before {} pages (the reader fell behind)",
            r.lost_pages
        );
        let _ = writeln!(s, "{}", wrap(&line, 0, 2));
    }
    for n in &r.notes {
        let _ = writeln!(s, "{}", wrap(&format!("note: {n}"), 0, 2));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use libtaskisol::noise::{Interruption, Kind, Source, Sums};

    /// The longest interruption and its source in the CPU's line, the sources ranked by
    /// time with their fixes numbered, a quiet CPU in one line, all within 80 columns.
    #[test]
    fn the_human_form_names_the_longest_and_ranks_by_time() {
        let mut sums = Sums::default();
        let i = |kind, name: &str, start_ns, net_ns| Interruption {
            start_ns,
            net_ns,
            counted: true,
            source: Source {
                kind,
                name: name.into(),
            },
        };
        for n in 0..30 {
            sums.add(&i(Kind::Irq, "IRQ 4 ttyS0", 1_000_000_000 + n, 4_000));
        }
        sums.add(&i(
            Kind::Thread,
            "kernel thread kworker/3:1",
            1_234_567_000_000,
            83_200,
        ));
        sums.add(&i(Kind::Ipi, "IPI reschedule", 2_000_000_000, 900));
        let cpus: libtaskisol::cpuset::CpuSet = "2-3".parse().unwrap();
        let c = CpuReport::of(3, &sums, |s| {
            noise_fix(s.kind.as_str(), &s.name, true, &cpus)
        });
        assert_eq!(c.longest_source, "kernel thread kworker/3:1");
        assert_eq!(c.longest_kind, "thread");
        assert_eq!(c.events, 32);
        let r = NoiseReport {
            kernel: "6.1.0".into(),
            cpus: "2-3".into(),
            source: "--cpus".into(),
            window_s: 10.0,
            from_unix: None,
            per_cpu: vec![CpuReport::of(2, &Sums::default(), |_| String::new()), c],
            lost_pages: 0,
            notes: Vec::new(),
        };
        let text = human(&r, false);
        assert!(text.contains("CPU 2: no interruption\n"), "{text}");
        assert!(
            text.contains("CPU 3: 32 interruptions (3.2/s), 204.1 us in all (0.0020 %); longest 83.2 us:\n  kernel thread kworker/3:1 at 1234.567000 s\n"),
            "{text}"
        );
        let rows: Vec<&str> = text.lines().filter(|l| l.ends_with(']')).collect();
        assert_eq!(rows.len(), 3, "{text}");
        assert!(
            rows[0].contains("120.0 us") && rows[0].contains("IRQ 4 ttyS0"),
            "{text}"
        );
        assert!(rows[1].contains("kworker/3:1"), "{text}");
        assert!(text.contains("[1] fix: isold item irq_affinity"), "{text}");
        assert!(text.contains("fix: work queued on this CPU"), "{text}");
        assert!(text.lines().all(|l| l.len() <= 80), "{text}");
        let j: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert_eq!(j["per_cpu"][1]["cpu"], 3);
        assert_eq!(j["per_cpu"][1]["longest_seconds"], 83.2e-6);
        assert_eq!(
            j["per_cpu"][1]["longest_source"],
            "kernel thread kworker/3:1"
        );
        assert_eq!(j["per_cpu"][1]["sources"][0]["source"], "IRQ 4 ttyS0");
    }

    /// `isold noise` reads the daemon's file: since its start, over the last minutes, each
    /// CPU's longest with its Unix time; a stopped daemon's ledger is shown as of its end.
    #[test]
    fn the_daemons_ledger_is_read_whole_and_by_window() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state.json");
        let t0 = 1_796_000_400u64; // a whole hour
        let mut l = noise::Ledger::new(t0, 24);
        let irq = |ns| Interruption {
            start_ns: 5_000_000_000,
            net_ns: ns,
            counted: true,
            source: Source {
                kind: Kind::Irq,
                name: "IRQ 4 ttyS0".into(),
            },
        };
        l.add(t0 + 10, 3, &irq(50_000));
        l.add(t0 + 600, 3, &irq(4_000));
        l.add(t0 + 610, 3, &irq(3_000));
        let f = noise::LedgerFile::of(&l, 1, "stopped", "2-3", 0, t0 + 620, &|ns| {
            t0 as f64 + ns as f64 / 1e9
        });
        std::fs::write(
            crate::status::noise_path(&state),
            serde_json::to_string(&f).unwrap(),
        )
        .unwrap();
        let root = SysRoot::new(dir.path());
        let all = daemon_report(&root, &state, None, None, t0 + 625).unwrap();
        assert_eq!(all.cpus, "2-3");
        assert_eq!(all.per_cpu[0].events, 0);
        let c = &all.per_cpu[1];
        assert_eq!((c.cpu, c.events, c.longest_seconds), (3, 3, 50e-6));
        assert_eq!(c.longest_at_unix, Some(t0 as f64 + 5.0));
        assert!(all.notes[0].contains("is not running"), "{:?}", all.notes);
        // The last 5 minutes: the two small ones.
        let w = daemon_report(&root, &state, Some(300), None, t0 + 625).unwrap();
        let c = &w.per_cpu[1];
        assert_eq!((c.events, c.longest_seconds), (2, 4e-6));
        assert_eq!(w.from_unix, Some(t0 + 300));
        let text = human(&w, false);
        assert!(
            text.contains("320 s since\n  2026-11-30 01:05:00.000 UTC"),
            "{text}"
        );
        // CPU 3 alone.
        let only: libtaskisol::CpuSet = "3".parse().unwrap();
        let o = daemon_report(&root, &state, None, Some(&only), t0 + 625).unwrap();
        assert_eq!(o.per_cpu.len(), 1);
        // No file: not running.
        std::fs::remove_file(crate::status::noise_path(&state)).unwrap();
        assert_eq!(
            daemon_report(&root, &state, None, None, t0).unwrap_err(),
            crate::exit::EXIT_NOT_RUNNING
        );
        assert_eq!(parse_since("10m"), Ok(600));
        assert_eq!(parse_since("90"), Ok(90));
        assert!(parse_since("10 parsecs").is_err() && parse_since("0s").is_err());
        assert_eq!(utc(0.0), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(utc(951_782_400.5), "2000-02-29 00:00:00.500 UTC");
    }
}
