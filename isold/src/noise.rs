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

use crate::audit::{rate, wrap};
use crate::cli::NoiseArgs;
use crate::exit::{fail, print_out, EXIT_OK};

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
    /// One entry per CPU, ascending.
    pub per_cpu: Vec<CpuReport>,
    /// Pages of the kernel's buffers that came after lost events (the reader fell behind).
    pub lost_pages: u64,
    /// Remarks.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// `isold noise`.
pub fn run(root: &SysRoot, scope: &Scope, args: &NoiseArgs) -> i32 {
    if !(args.duration > 0.0 && args.duration <= 3600.0) {
        return fail(format!(
            "--duration {}: give seconds from more than 0 to 3600",
            args.duration
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
    let window = Duration::from_secs_f64(args.duration);
    // Said on standard error once the events are enabled (that interrupts every CPU once):
    // the window starts then.
    let ready = || {
        eprintln!(
            "isold noise: recording CPUs {} for {} s",
            scope.cpus, args.duration
        )
    };
    let (sums, rec) = match noise::measure(root, &tracefs, scope, window, READ_EVERY, ready) {
        Ok(v) => v,
        Err(e) => return fail(format!("noise: {e}")),
    };
    let lost = rec.lost_pages;
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
    let nohz = IsolatedCpus::discover(root)
        .map(|i| i.nohz_full)
        .unwrap_or_default();
    let per_cpu = sums
        .iter()
        .map(|(&cpu, s)| {
            CpuReport::of(cpu, s, |src| {
                noise_fix(
                    src.kind.as_str(),
                    &src.name,
                    nohz.contains(cpu),
                    &scope.cpus,
                )
            })
        })
        .collect();
    let report = NoiseReport {
        kernel: root
            .read_value_opt("/proc/sys/kernel/osrelease")
            .ok()
            .flatten()
            .unwrap_or_default(),
        cpus: scope.cpus.to_string(),
        source: scope.source.clone(),
        window_s: args.duration,
        per_cpu,
        lost_pages: lost,
        notes,
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(j) => print_out(&format!("{j}\n")),
            Err(e) => fail(e),
        }
    } else {
        print_out(&human(&report, args.verbose));
        EXIT_OK
    }
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
    let head = format!(
        "isold noise: CPUs {} ({}), Linux {}, window {} s",
        r.cpus, r.source, r.kernel, r.window_s
    );
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
            rate(c.events as f64 / r.window_s),
            dur(c.seconds),
            c.seconds / r.window_s * 100.0,
            dur(c.longest_seconds),
            c.longest_source,
            c.longest_at_seconds
                .map_or_else(String::new, |t| format!(" at {t:.6} s"))
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
            let mut name = src.source.clone();
            if name.len() > 38 {
                name.truncate(37);
                name.push('~');
            }
            let _ = writeln!(
                s,
                "  {:>8} {:>10} {:>10}  {:<38} [{n}]",
                src.events,
                dur(src.seconds),
                dur(src.longest_seconds),
                name
            );
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
}
