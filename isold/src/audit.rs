//! `isold audit`: which CPUs (noise and bootargs use it too), the two samples, the human form.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use libtaskisol::audit::{self, Audit, CpuAudit, Scope, TaskRef};
use libtaskisol::osnoise;
use libtaskisol::policy::bootargs::BootArg;
use libtaskisol::policy::config::{Config, CpuSpec};
use libtaskisol::policy::preset::Preset;
use libtaskisol::policy::state::State;
use libtaskisol::policy::{Policy, ResolveError};
use libtaskisol::tickstop;
use libtaskisol::topology::{self, IsolatedCpus};
use libtaskisol::{CpuSet, SysRoot};

use crate::cli::AuditArgs;
use crate::exit::{fail, print_out};
use crate::text::{cell, wrap};

/// Lines of disturbers shown per CPU without --verbose.
const SHOWN: usize = 8;

/// Which CPUs to audit and which workloads are meant to be there: `--cpus`, else the
/// configuration file when it exists (or was named), else the CPUs the kernel isolates.
pub fn scope(
    root: &SysRoot,
    config_path: &Path,
    config_named: bool,
    cpus: Option<&str>,
    state_path: &Path,
) -> Result<Scope, i32> {
    let config = if config_named || config_path.exists() {
        Some(Config::load(config_path).map_err(crate::exit::unconfigured)?)
    } else {
        None
    };
    let base = config
        .clone()
        .unwrap_or_else(|| Config::defaults(Preset::default(), CpuSpec::Auto));
    let online = topology::online_cpus(root).map_err(fail)?;
    let (set, source) = match (cpus, &config) {
        (Some(list), _) => {
            let set = CpuSet::parse_list(list).map_err(|e| {
                crate::exit::usage(format!("--cpus: invalid CPU list {list:?}: {e}"))
            })?;
            let offline = set.difference(&online);
            if set.is_empty() || !offline.is_empty() {
                return Err(fail(format!(
                    "--cpus {list}: CPUs {offline} are not online (online: {online})"
                )));
            }
            (set, "--cpus".to_string())
        }
        (None, Some(c)) => {
            let policy = Policy::resolve(c.clone(), root).map_err(|e| match e {
                ResolveError::Config(c) => crate::exit::unconfigured(c),
                ResolveError::Kernel(k) => fail(k),
            })?;
            (policy.isolated, c.file.display().to_string())
        }
        (None, None) => {
            let iso = IsolatedCpus::discover(root).map_err(fail)?;
            let set = iso.all().intersection(&online);
            if set.is_empty() {
                return Err(fail(format!(
                    "no isolated CPUs: the kernel isolates none (no isolcpus, nohz_full or isolated cpuset partition) and {} does not exist; name them with --cpus LIST",
                    config_path.display()
                )));
            }
            let mut how: Vec<&str> = set.iter().flat_map(|c| iso.mechanisms(c)).collect();
            how.sort();
            how.dedup();
            (set, format!("the kernel: {}", how.join(", ")))
        }
    };
    // What apply learnt: the IRQs it moved and those the kernel refused to move.
    let mut irq_movable = std::collections::BTreeMap::new();
    if let Some(st) = State::load(state_path).map_err(crate::exit::fail_with)? {
        let irq_of = |id: &str| id.strip_prefix("irq:").and_then(|n| n.parse::<u32>().ok());
        for e in st.entries() {
            if let Some(n) = irq_of(&e.id) {
                irq_movable.insert(n, true);
            }
        }
        for id in st.unchangeable.keys() {
            if let Some(n) = irq_of(id) {
                irq_movable.insert(n, false);
            }
        }
    }
    Ok(Scope {
        cpus: set,
        source,
        preset: base.preset,
        preset_at: base.preset_at(),
        allow_comm: base.allow_comm,
        allow_cgroup: base.allow_cgroup,
        allow_irqs: base.irq_allow,
        irq_movable,
    })
}

/// `isold audit`.
///
/// Long because it is the command's steps in order: scope, the state file's view, two samples, the
/// report.
pub fn run(
    root: &SysRoot,
    scope: &Scope,
    args: &AuditArgs,
    config_path: &Path,
    state_path: &Path,
) -> i32 {
    if !(args.duration >= 0.0 && args.duration <= 3600.0) {
        return crate::exit::usage(format!(
            "--duration {}: give seconds from 0 to 3600",
            args.duration
        ));
    }
    let me = std::process::id() as i32;
    if root.is_host() {
        // The observer stays off the CPUs it watches.
        if let Ok(online) = topology::online_cpus(root) {
            let hk = online.difference(&scope.cpus);
            let _ = libtaskisol::sched::set_affinity(0, &hk);
        }
    }
    // The observers stay out of what they observe: this process and the tracer's threads.
    let sample = || -> Result<audit::Sample, i32> {
        let mut s = audit::Sample::read_for(root, &scope.cpus).map_err(fail)?;
        if root.is_host() {
            s.threads.retain(|t| t.pid != me);
        }
        if args.osnoise {
            s.threads.retain(|t| !t.comm.starts_with("osnoise/"));
        }
        Ok(s)
    };
    let mut notes = Vec::new();
    let tracer = if args.osnoise {
        match osnoise::find(root) {
            Ok(dir) => match osnoise::Run::start(root, &dir, &scope.cpus) {
                Ok(run) => Some(run),
                Err(e) => return fail(format!("--osnoise: {e}")),
            },
            Err(why) => {
                notes.push(format!("osnoise: {why}; audited without it"));
                None
            }
        }
    } else {
        None
    };
    // The kernel's own reason a tick ran (tick_stop), recorded over the window; why not, for
    // a note should a tick have run.
    let mut tick_trace = Err(String::new());
    if args.duration > 0.0 {
        tick_trace = tickstop::find(root)
            .map_err(|e| e.to_string())
            .and_then(|dir| {
                if let Some(why) =
                    libtaskisol::tracefs::enabling_would_wait(root, &dir, &scope.cpus)
                {
                    return Err(format!("not recorded: {why}"));
                }
                tickstop::Recording::start(root, &dir, &scope.cpus)
                    .map_err(|e| format!("could not record it: {e}"))
            });
    }
    let started = Instant::now();
    let before = sample();
    if before.is_ok() {
        std::thread::sleep(Duration::from_secs_f64(args.duration));
    }
    let after = before.and_then(|b| sample().map(|a| (b, a)));
    // The window ends with the second sample: stopping the tracers (tick_stop's instance
    // is removed after an RCU grace period) is not part of it.
    let elapsed = started.elapsed().as_secs_f64();
    let noise = tracer.map(|t| t.finish(root));
    let tick_trace = tick_trace.and_then(|rec| {
        rec.finish(root)
            .map_err(|e| format!("its record could not be read: {e}"))
    });
    let (before, after) = match after {
        Ok(ba) => ba,
        Err(code) => return code,
    };
    let noise = match noise {
        Some(Ok(n)) => Some(n),
        Some(Err(e)) => return fail(format!("--osnoise: {e}")),
        None => None,
    };
    // No window asked, none taken: the two samples' few milliseconds apart are no
    // observation, and rates from them would be a single count scaled up.
    let window = if args.duration <= 0.0 {
        0.0
    } else if root.is_host() {
        elapsed
    } else {
        args.duration
    };
    let window = (window * 100.0).round() / 100.0;
    let mut a = match audit::audit(root, scope, &before, &after, window) {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    if let Some(n) = &noise {
        for c in &mut a.per_cpu {
            c.osnoise = n.get(&c.cpu).cloned();
            if c.osnoise.is_none() {
                notes.push(format!("osnoise: no sample from CPU {} (a SCHED_FIFO or SCHED_RR task there keeps the tracer's thread from running)", c.cpu));
            }
        }
    }
    match &tick_trace {
        Ok(t) => {
            a.add_tick_stops(t);
            if t.lost > 0 {
                notes.push(format!("tick_stop: the trace buffer lost {} events; the tick's reasons are counted from the rest", t.lost));
            }
        }
        Err(why) if !why.is_empty() && a.any_tick_ran() => notes.push(format!(
            "tick_stop: {why}; the tick's reason is the audit's reading of the counters, not the kernel's"
        )),
        Err(_) => {}
    }
    a.notes = notes;
    a.settings.extend(contested(state_path));
    a.settings.extend(
        crate::claims::kubelet_disagreements(root, config_path, state_path)
            .into_iter()
            .map(|d| libtaskisol::audit::Setting {
                name: "kubelet".into(),
                value: d.what,
                ok: false,
                why: "isold and the kubelet's CPU manager disagree on which CPUs are whose".into(),
                fix: d.fix,
            }),
    );
    let text = if args.json {
        let mut t = serde_json::to_string_pretty(&a).expect("audit serializes");
        t.push('\n');
        t
    } else {
        human(&a, args.verbose)
    };
    print_out(&text)
}

/// The values `isold run` finds changed back again and again (from its status file): another
/// program writes them, and the CPUs get whatever the last writer wanted.
fn contested(state_path: &Path) -> Vec<libtaskisol::audit::Setting> {
    let Some(st) = crate::status::read(state_path) else {
        return Vec::new();
    };
    st.contested
        .into_iter()
        .map(|c| libtaskisol::audit::Setting {
            name: c.label,
            value: format!(
                "contested ({} repairs by isold run, now every {} s)",
                c.repairs, c.backoff_s
            ),
            ok: false,
            why: "another program keeps changing it back: it and isold undo each other".into(),
            fix: "find what writes it (tuned, irqbalance, a script) and stop it, or leave it out of the policy".into(),
        })
        .collect()
}

pub(crate) fn rate(r: f64) -> String {
    if r >= 100.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

/// Long because it prints one CPU's block line by line in the order the reader sees it.
fn cpu_block(s: &mut String, c: &CpuAudit, verbose: bool) {
    let tick = match &c.tick {
        Some(t) if t.stopped => format!("tick stopped ({}/s)", rate(t.per_s)),
        Some(t) => match t.reasons.as_deref() {
            Some([first, ..]) => format!(
                "tick running ({}/s, kernel: {})",
                rate(t.per_s),
                first.dependency
            ),
            _ => format!("tick running ({}/s)", rate(t.per_s)),
        },
        None => "no window".into(),
    };
    let by = if c.isolated_by.is_empty() {
        "not isolated by the kernel".to_string()
    } else {
        c.isolated_by.join(" + ")
    };
    let line = format!("CPU {}: {}, {tick}; {by}", c.cpu, c.verdict.to_uppercase());
    let _ = writeln!(s, "{}", wrap(&line, 0, 2));
    let mut fixes: Vec<&str> = Vec::new();
    let shown = if verbose { usize::MAX } else { SHOWN };
    for d in c.disturbed_by.iter().take(shown) {
        let n = match fixes.iter().position(|f| *f == d.fix) {
            Some(i) => i + 1,
            None => {
                fixes.push(&d.fix);
                fixes.len()
            }
        };
        let src = match d.cpu_ms {
            Some(ms) if ms > 0 => format!("{} ({ms} ms CPU)", d.source),
            _ => d.source.clone(),
        };
        let (first, rest) = cell(&src, 44);
        let _ = writeln!(
            s,
            "  {:>8} {:>8}/s  {:<44} [{n}]",
            d.count,
            rate(d.per_s),
            first
        );
        for r in rest {
            let _ = writeln!(s, "{:21}{r}", "");
        }
    }
    if c.disturbed_by.len() > shown {
        let _ = writeln!(
            s,
            "  ... and {} more (-v or --json lists them)",
            c.disturbed_by.len() - shown
        );
    }
    for (i, f) in fixes.iter().enumerate() {
        let head = format!("  [{}] fix: ", i + 1);
        let _ = writeln!(s, "{head}{}", wrap(f, head.len(), 6));
    }
    if !c.workloads_ran.is_empty() {
        let names: Vec<String> = c
            .workloads_ran
            .iter()
            .map(|w| format!("{} {}", w.tid, w.comm))
            .collect();
        let head = "  workloads ran (meant to be here): ";
        let _ = writeln!(s, "{head}{}", wrap(&names.join(", "), head.len(), 4));
    }
    if !c.workload_irqs_fired.is_empty() {
        let names: Vec<String> = c
            .workload_irqs_fired
            .iter()
            .map(|d| format!("{} ({})", d.source, d.count))
            .collect();
        let head = "  the workload's IRQs fired (meant to be here): ";
        let _ = writeln!(s, "{head}{}", wrap(&names.join(", "), head.len(), 4));
    }
    if !c.without_quiesce.is_empty() {
        let names: Vec<String> = c.without_quiesce.iter().map(TaskRef::name).collect();
        let line = format!(
            "WITHOUT QUIESCE: the kernel has task isolation, and {} run{} here without the vmstat quiesce: the vmstat work its system calls leave behind runs on this CPU later; fix: start it with chisol -q vmstat_sync -I conf (threads that activate themselves) or -a -I active",
            names.join(", "),
            if names.len() == 1 { "s" } else { "" }
        );
        let _ = writeln!(s, "  {}", wrap(&line, 2, 4));
    }
    for st in &c.starving {
        let behind = st
            .behind
            .as_ref()
            .map_or(String::new(), |b| format!(" behind {}", b.name()));
        let line = format!(
            "STARVING: {}, runnable the whole {} s window without running{behind}; fix: {}",
            st.thread.name(),
            st.waited_s,
            st.fix
        );
        let _ = writeln!(s, "  {}", wrap(&line, 2, 4));
    }
    if let Some(n) = &c.osnoise {
        let line = format!(
            "osnoise: {} us of noise in {:.1} s measured ({} periods), longest {} us; interference: {} IRQ, {} softirq, {} thread, {} NMI, {} hardware",
            n.noise_us,
            n.runtime_us as f64 / 1e6,
            n.periods,
            n.max_single_us,
            n.irq,
            n.softirq,
            n.thread,
            n.nmi,
            n.hw
        );
        let _ = writeln!(s, "  {}", wrap(&line, 2, 4));
    }
    let can = &c.can_disturb;
    let irqs: Vec<String> = can
        .irqs
        .iter()
        .map(|i| {
            let name = if i.name.is_empty() { "-" } else { &i.name };
            match i.managed {
                Some(true) => format!("{} {name} (managed)", i.irq),
                _ => format!("{} {name}", i.irq),
            }
        })
        .collect();
    let mut can_line = format!(
        "can: {} IRQs, {} tasks and movable kthreads, {} per-CPU kthreads, {} workloads",
        can.irqs.len(),
        can.tasks.len(),
        can.percpu_kthreads.len(),
        can.workloads.len()
    );
    for st in can.settings.iter().filter(|st| !st.ok) {
        let _ = write!(can_line, "; {} {} ({})", st.name, st.value, st.fix);
    }
    let _ = writeln!(s, "  {}", wrap(&can_line, 2, 4));
    if !irqs.is_empty() {
        let _ = writeln!(s, "    IRQs: {}", wrap(&irqs.join(", "), 10, 6));
    }
    if !can.workload_irqs.is_empty() {
        let names: Vec<String> = can
            .workload_irqs
            .iter()
            .map(|i| format!("{} {}", i.irq, i.name))
            .collect();
        let head = "    the workload's IRQs: ";
        let _ = writeln!(s, "{head}{}", wrap(&names.join(", "), head.len(), 6));
    }
    if verbose {
        for t in &can.tasks {
            let _ = writeln!(s, "    may run here: {} {} ({})", t.tid, t.comm, t.affinity);
        }
        for t in &can.percpu_kthreads {
            let _ = writeln!(s, "    per-CPU kthread: {} {}", t.tid, t.comm);
        }
    } else if !can.tasks.is_empty() {
        // The user's own tasks first: those an admin acts on; movable kthreads after them
        // (a line of kthreads must not hide the wide task someone started by hand).
        let mut order: Vec<&libtaskisol::audit::TaskRef> = can.tasks.iter().collect();
        order.sort_by_key(|t| (t.kthread, t.tid));
        let names: Vec<String> = order
            .iter()
            .take(6)
            .map(|t| format!("{} {}", t.tid, t.comm))
            .collect();
        let more = if can.tasks.len() > 6 { ", ..." } else { "" };
        let _ = writeln!(
            s,
            "    tasks: {}",
            wrap(&format!("{}{more}", names.join(", ")), 11, 6)
        );
    }
}

/// The human form: one block per CPU, then the machine-wide settings and boot arguments
/// that are not right.
pub fn human(a: &Audit, verbose: bool) -> String {
    let mut s = String::new();
    let head = format!(
        "isold audit: CPUs {} ({}), housekeeping CPUs {}, Linux {}, window {} s",
        a.cpus, a.source, a.housekeeping, a.kernel, a.window_s
    );
    let _ = writeln!(s, "{}", wrap(&head, 0, 2));
    if let Some(hk) = &a.kernel_housekeeping {
        let _ = writeln!(
            s,
            "kernel housekeeping CPUs (/sys/devices/system/cpu/housekeeping): {hk}"
        );
    }
    for c in &a.per_cpu {
        cpu_block(&mut s, c, verbose);
    }
    let bad: Vec<_> = a.settings.iter().filter(|st| !st.ok).collect();
    if !bad.is_empty() {
        let _ = writeln!(s, "machine-wide:");
        for st in bad {
            let line = format!("{} is {}: {}; fix: {}", st.name, st.value, st.why, st.fix);
            let _ = writeln!(s, "  {}", wrap(&line, 2, 4));
        }
    }
    let missing: Vec<&BootArg> = a.missing_boot_args().collect();
    if !missing.is_empty() {
        let words: Vec<&str> = missing.iter().map(|b| b.arg.as_str()).collect();
        let line = format!(
            "boot arguments missing (isold bootargs): {}",
            words.join(" ")
        );
        let _ = writeln!(s, "{}", wrap(&line, 0, 2));
    }
    for n in &a.notes {
        let _ = writeln!(s, "{}", wrap(&format!("note: {n}"), 0, 2));
    }
    let starving: usize = a.per_cpu.iter().map(|c| c.starving.len()).sum();
    if starving > 0 {
        let cpus: Vec<String> = a
            .per_cpu
            .iter()
            .filter(|c| !c.starving.is_empty())
            .map(|c| c.cpu.to_string())
            .collect();
        let _ = writeln!(
            s,
            "starving now: {starving} thread{} on CPU {}",
            if starving == 1 { "" } else { "s" },
            cpus.join(",")
        );
    }
    let disturbed: Vec<String> = a.disturbed().map(|c| c.cpu.to_string()).collect();
    let quiet = a.per_cpu.iter().filter(|c| c.verdict == "quiet").count();
    if a.window_s <= 0.0 {
        s.push_str("audit: no window (--duration 0): what can disturb, not what did\n");
    } else if disturbed.is_empty() {
        let _ = writeln!(s, "audit: {quiet} of {} CPUs quiet", a.per_cpu.len());
    } else {
        let _ = writeln!(
            s,
            "audit: {quiet} of {} CPUs quiet, disturbed: {}",
            a.per_cpu.len(),
            disturbed.join(",")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use libtaskisol::audit::{Disturbance, Exposure, Tick};

    #[test]
    fn rates_lose_decimals_from_100() {
        assert_eq!(rate(250.0), "250");
        assert_eq!(rate(100.0), "100");
        assert_eq!(rate(1.25), "1.2");
        assert_eq!(rate(0.0), "0.0");
    }

    fn d(kind: &str, source: &str, count: u64, fix: &str) -> Disturbance {
        Disturbance {
            kind: kind.into(),
            source: source.into(),
            count,
            per_s: count as f64 / 2.0,
            cpu_ms: (kind == "task").then_some(1500),
            fix: fix.into(),
        }
    }

    fn cpu(n: usize, did: Vec<Disturbance>) -> CpuAudit {
        CpuAudit {
            cpu: n,
            isolated_by: vec!["nohz_full".into()],
            verdict: if did.is_empty() { "quiet" } else { "disturbed" }.into(),
            tick: Some(Tick {
                per_s: if did.is_empty() { 0.5 } else { 250.0 },
                stopped: did.is_empty(),
                nohz_full: true,
                reasons: None,
            }),
            disturbed_by: did,
            workloads_ran: Vec::new(),
            workload_irqs_fired: Vec::new(),
            starving: Vec::new(),
            without_quiesce: Vec::new(),
            can_disturb: Exposure::default(),
            osnoise: None,
        }
    }

    /// Eight disturbers a CPU, fixes numbered once each, the rest counted; quiet CPUs in one
    /// line; notes and the closing count.
    #[test]
    fn the_human_form_ranks_numbers_fixes_and_counts() {
        let mut did: Vec<Disturbance> = (0..10)
            .map(|i| {
                d(
                    "ipi",
                    &format!("X{i} thing"),
                    100 - i,
                    if i % 2 == 0 { "fix even" } else { "fix odd" },
                )
            })
            .collect();
        did[0] = d("task", "task 812 busy", 100, "isold item tasks");
        let a = Audit {
            kernel: "6.12".into(),
            cpus: "2-3".into(),
            source: "--cpus".into(),
            housekeeping: "0-1".into(),
            kernel_housekeeping: None,
            window_s: 2.0,
            settings: Vec::new(),
            boot_args: Vec::new(),
            per_cpu: vec![cpu(2, Vec::new()), cpu(3, did)],
            notes: vec!["osnoise: not here".into()],
        };
        let text = human(&a, false);
        assert!(
            text.starts_with(
                "isold audit: CPUs 2-3 (--cpus), housekeeping CPUs 0-1, Linux 6.12, window 2 s\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("CPU 2: QUIET, tick stopped (0.5/s); nohz_full\n"),
            "{text}"
        );
        assert!(
            text.contains("CPU 3: DISTURBED, tick running (250/s); nohz_full\n"),
            "{text}"
        );
        assert!(
            text.contains("       100     50.0/s  task 812 busy (1500 ms CPU)"),
            "{text}"
        );
        assert!(
            text.contains("  ... and 2 more (-v or --json lists them)\n"),
            "{text}"
        );
        assert!(
            text.contains("  [1] fix: isold item tasks\n  [2] fix: fix odd\n  [3] fix: fix even\n"),
            "{text}"
        );
        assert_eq!(
            text.matches("[3]").count(),
            1 + 3,
            "X2, X4, X6 and the fix line: {text}"
        );
        assert!(text.contains("note: osnoise: not here\n"), "{text}");
        assert!(
            text.ends_with("audit: 1 of 2 CPUs quiet, disturbed: 3\n"),
            "{text}"
        );
        assert!(text.lines().all(|l| l.len() <= 80), "{text}");
        let all = human(&a, true);
        assert!(
            all.contains("X9 thing") && !all.contains("... and"),
            "{all}"
        );
        let mut quiet = a.clone();
        quiet.per_cpu.truncate(1);
        assert!(human(&quiet, false).ends_with("audit: 1 of 1 CPUs quiet\n"));
        // A thread starving on CPU 3: named with what held the CPU, and counted at the end.
        let task = |pid: i32, comm: &str, kthread: bool| libtaskisol::audit::TaskRef {
            pid,
            tid: pid,
            comm: comm.into(),
            affinity: "3".into(),
            kthread,
        };
        let mut starved = a.clone();
        starved.per_cpu[1].starving = vec![libtaskisol::audit::Starving {
            thread: task(103, "kworker/3:1", true),
            waited_s: 2.0,
            behind: Some(task(904, "rtloop", false)),
            fix: "isold run".into(),
        }];
        let text = human(&starved, false);
        assert!(
            text.contains("  STARVING: kthread 103 kworker/3:1, runnable the whole 2 s window without\n    running behind task 904 rtloop; fix: isold run\n"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "starving now: 1 thread on CPU 3\naudit: 1 of 2 CPUs quiet, disturbed: 3\n"
            ),
            "{text}"
        );
    }

    /// The kernel's first reason in the CPU's line, which wraps at 79 columns like the rest
    /// (6.1's `isolcpus domain + nohz_full` made it 88).
    #[test]
    fn the_cpu_line_names_the_kernels_reason_and_wraps() {
        let mut c = cpu(3, vec![d("tick", "LOC local timer interrupts", 500, "f")]);
        c.isolated_by = vec!["isolcpus domain".into(), "nohz_full".into()];
        c.tick.as_mut().unwrap().reasons = Some(vec![libtaskisol::audit::TickReason {
            dependency: "POSIX_TIMER".into(),
            count: 500,
            pids: vec![125],
            fix: "f".into(),
        }]);
        let mut s = String::new();
        cpu_block(&mut s, &c, false);
        assert!(
            s.starts_with(
                "CPU 3: DISTURBED, tick running (250/s, kernel: POSIX_TIMER); isolcpus domain +\n  nohz_full\n"
            ),
            "{s}"
        );
        c.tick.as_mut().unwrap().reasons = Some(Vec::new());
        let mut s = String::new();
        cpu_block(&mut s, &c, false);
        assert!(
            s.starts_with("CPU 3: DISTURBED, tick running (250/s); isolcpus domain + nohz_full\n"),
            "{s}"
        );
    }

    fn task(tid: i32, comm: &str) -> libtaskisol::audit::TaskRef {
        libtaskisol::audit::TaskRef {
            pid: tid,
            tid,
            comm: comm.into(),
            affinity: "0-3".into(),
            kthread: false,
        }
    }

    /// The details of a CPU's block: CPU time only when there was some, long names cut at
    /// 44 columns, no "more" line at exactly eight disturbers, the workloads that ran,
    /// managed IRQs, only the settings that are not right, the IRQ line only with IRQs, the
    /// first six tasks then "...", and everything with -v.
    #[test]
    fn a_cpu_block_shows_what_matters_and_no_more() {
        let mut did: Vec<Disturbance> = (0..SHOWN as u64)
            .map(|i| d("ipi", &format!("Y{i}"), 50 - i, "f"))
            .collect();
        did[0] = d("task", &format!("task 9 {}", "n".repeat(60)), 50, "f");
        did[1].kind = "task".into();
        did[1].cpu_ms = Some(0);
        let mut c = cpu(3, did);
        c.workloads_ran = vec![task(77, "rtapp")];
        // Six movable kthreads of low pids, then the user's own tasks.
        c.can_disturb.tasks = (1..=6)
            .map(|i| libtaskisol::audit::TaskRef {
                kthread: true,
                ..task(i, &format!("k{i}"))
            })
            .chain((7..=8).map(|i| task(i, &format!("t{i}"))))
            .collect();
        c.can_disturb.percpu_kthreads = vec![task(40, "ksoftirqd/3")];
        c.can_disturb.irqs = vec![libtaskisol::audit::IrqExposure {
            irq: 30,
            name: "nvme0q3".into(),
            affinity: "3".into(),
            effective: Some("3".into()),
            managed: Some(true),
            movable: Some(false),
            fix: "x".into(),
        }];
        c.can_disturb.settings = vec![
            libtaskisol::audit::Setting {
                name: "tick".into(),
                value: "periodic".into(),
                ok: false,
                why: "w".into(),
                fix: "boot argument nohz_full=3".into(),
            },
            libtaskisol::audit::Setting {
                name: "rcu callbacks".into(),
                value: "offloaded".into(),
                ok: true,
                why: "w".into(),
                fix: String::new(),
            },
        ];
        let mut s = String::new();
        cpu_block(&mut s, &c, false);
        // A long name is wrapped in its column, whole.
        assert!(
            s.contains(&format!("  task 9 {} [1]\n", "n".repeat(37))),
            "{s}"
        );
        assert!(
            s.contains(&format!("\n{:21}{} (1500 ms CPU)\n", "", "n".repeat(23))),
            "{s}"
        );
        assert!(!s.contains('~'), "{s}");
        assert!(
            s.contains("  Y1                                           [1]\n"),
            "no CPU time when none: {s}"
        );
        assert!(!s.contains("more"), "{s}");
        assert!(
            s.contains("  workloads ran (meant to be here): 77 rtapp\n"),
            "{s}"
        );
        assert!(s.contains("    IRQs: 30 nvme0q3 (managed)\n"), "{s}");
        assert!(
            s.contains("0 workloads;\n    tick periodic (boot argument nohz_full=3)\n"),
            "{s}"
        );
        assert!(!s.contains("rcu callbacks"), "{s}");
        assert!(
            s.contains("    tasks: 7 t7, 8 t8, 1 k1, 2 k2, 3 k3, 4 k4, ...\n"),
            "{s}"
        );
        assert!(!s.contains("per-CPU kthread:"), "{s}");
        let mut v = String::new();
        cpu_block(&mut v, &c, true);
        assert!(
            v.contains("    may run here: 7 t7 (0-3)\n")
                && v.contains("    per-CPU kthread: 40 ksoftirqd/3\n"),
            "{v}"
        );
        // A name of exactly 44 columns fits whole.
        let mut whole = String::new();
        cpu_block(
            &mut whole,
            &cpu(1, vec![d("ipi", &"w".repeat(44), 1, "f")]),
            false,
        );
        assert!(
            whole.contains(&format!("  {} [1]\n", "w".repeat(44))),
            "{whole}"
        );
        let mut plain = cpu(2, vec![d("ipi", "Z", 1, "f")]);
        plain.can_disturb.tasks = (1..=6).map(|i| task(i, "u")).collect();
        let mut s = String::new();
        cpu_block(&mut s, &plain, false);
        assert!(
            !s.contains("IRQs:") && !s.contains("workloads ran") && !s.contains(", ..."),
            "{s}"
        );
    }
}
