//! isold: apply, verify and restore an isolated-CPU policy. All kernel knowledge lives in
//! libtaskisol (`policy`); this crate parses options, prints, and picks exit codes.

pub mod audit;
pub mod bootargs;
pub mod claims;
pub mod cli;
pub mod contest;
pub mod daemon;
pub mod exit;
pub mod lifecycle;
pub mod metrics;
pub mod noise;
pub mod peers;
pub mod status;
#[cfg(test)]
mod testing;
pub mod text;

use clap::Parser;
use libtaskisol::policy::items::tasks::KERNEL_MANAGED;
use libtaskisol::policy::state::StateFiles;
use libtaskisol::policy::{config::Config, engine, Policy, Report, ResolveError, Status};
use libtaskisol::SysRoot;

use cli::{Cli, Command, Output};

pub use exit::{
    fail, fail_with, unconfigured, usage, EXIT_FAILURE, EXIT_NOT_CONFIGURED, EXIT_NOT_RUNNING,
    EXIT_OK, EXIT_STATUS_UNKNOWN, EXIT_USAGE,
};
pub use exit::{load_policy, print_out};

/// Parse `args` (with `argv[0]`) and run; returns the exit code.
///
/// Long because it is one arm per command, each a few lines that hand over to the command's module.
pub fn main_with_args(args: Vec<std::ffi::OsString>) -> i32 {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return EXIT_OK;
            }
            if e.kind() == ErrorKind::MissingSubcommand
                || e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            {
                // The commands as --help lists them, from the same definition.
                use clap::CommandFactory;
                eprint!("{}", Cli::command().render_help());
                return EXIT_USAGE;
            }
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            return usage(first.strip_prefix("error: ").unwrap_or(first));
        }
    };
    let root = match &cli.root {
        Some(d) => SysRoot::new(d),
        None => SysRoot::host(),
    };
    let defaults = StateFiles::default_for(&root);
    let files = StateFiles::new(
        cli.state.clone().unwrap_or(defaults.runtime),
        cli.persistent_state.clone().unwrap_or(defaults.persistent),
    );
    let state_path = files.runtime.clone();
    let config_path = cli
        .config
        .clone()
        .unwrap_or_else(|| root.path("/etc/isold/isold.toml"));
    let writes = matches!(
        cli.command,
        Command::Apply(_) | Command::Restore(_) | Command::Run(_)
    );
    if writes && root.is_host() && !nix::unistd::geteuid().is_root() {
        let what = match cli.command {
            Command::Apply(_) => "apply",
            Command::Run(_) => "run",
            _ => "restore",
        };
        return fail(format!(
            "{what} needs root privileges: it writes /proc/sys, /sys, /proc/irq and other tasks' CPU affinity"
        ));
    }
    let scope_of = |cpus: Option<&str>| {
        audit::scope(&root, &config_path, cli.config.is_some(), cpus, &state_path)
    };
    let timed = match &cli.command {
        Command::Apply(o) | Command::Verify(o) | Command::Plan(o) | Command::Check(o) => o.timings,
        Command::Restore(r) => r.out.timings,
        _ => false,
    };
    let started = timed.then(|| {
        libtaskisol::cost::start();
        std::time::Instant::now()
    });
    let code = match &cli.command {
        Command::Apply(out) => {
            let policy = match resolve(&config_path, &root) {
                Ok(p) => p,
                Err(code) => return code,
            };
            match engine::apply(&root, &policy, &files) {
                Ok(rep) => finish(&rep, out, rep.problems().count() == 0),
                Err(e) => fail_with(e),
            }
        }
        Command::Verify(out) => {
            let policy = match resolve(&config_path, &root) {
                Ok(p) => p,
                Err(code) => return code,
            };
            match engine::verify(&root, &policy, &files) {
                Ok(rep) => finish(&rep, out, rep.problems().count() == 0),
                Err(e) => fail_with(e),
            }
        }
        Command::Plan(out) => {
            let policy = match resolve(&config_path, &root) {
                Ok(p) => p,
                Err(code) => return code,
            };
            match engine::verify(&root, &policy, &files) {
                Ok(mut rep) => {
                    rep.command = "plan".into();
                    rep.notes.extend(preset_advice(&root, &policy.config).1);
                    let ok = !rep
                        .outcomes
                        .iter()
                        .any(|o| matches!(o.status, Status::Failed { .. }));
                    finish(&rep, out, ok)
                }
                Err(e) => fail_with(e),
            }
        }
        Command::Restore(args) => {
            let out = &args.out;
            if let Some(pid) = lifecycle::running(&files.runtime) {
                return fail(format!(
                    "isold run{} is keeping the policy and would put it right again: stop it first (systemctl stop isold), then run isold restore",
                    pid.map_or_else(String::new, |p| format!(" (pid {p})"))
                ));
            }
            if args.salvage {
                for path in [&files.runtime, &files.persistent] {
                    match libtaskisol::policy::salvage::salvage(path) {
                        Ok(None) => {}
                        Ok(Some(s)) => eprintln!(
                            "isold: {} could not be read: {} original(s) salvaged from it and restored below, {} lost (those values stay as they are); the file is kept as {}",
                            path.display(),
                            s.kept,
                            s.lost,
                            s.aside.display()
                        ),
                        Err(e) => return fail(format!("--salvage: {e}")),
                    }
                }
            }
            match engine::restore(&root, &files) {
                Ok(rep) => finish(&rep, out, rep.problems().count() == 0),
                Err(e) => fail_with(e),
            }
        }
        Command::Check(out) => {
            let policy = match resolve(&config_path, &root) {
                Ok(p) => p,
                Err(code) => return code,
            };
            check(&root, &policy, out)
        }
        Command::Audit(args) => match scope_of(args.cpus.as_deref()) {
            Ok(scope) => audit::run(&root, &scope, args, &config_path, &state_path),
            Err(code) => code,
        },
        Command::Noise(args) if args.duration.is_none() => {
            noise::from_daemon(&root, &state_path, args)
        }
        Command::Noise(args) => match scope_of(args.cpus.as_deref()) {
            Ok(scope) => noise::run(&root, &scope, args),
            Err(code) => code,
        },
        Command::Bootargs(args) => match scope_of(args.cpus.as_deref()) {
            Ok(scope) => bootargs::run(&root, &scope, args, &files),
            Err(code) => code,
        },
        Command::Run(args) => daemon::run(&root, &config_path, &files, args),
        Command::Status(args) => status::status(&root, &config_path, &state_path, args.json),
        Command::Hook(args) => claims::hook(&root, &claims::socket_path(&state_path), args),
        Command::Claims(args) => claims::list(&claims::socket_path(&state_path), args.json),
        Command::Items(args) => items(args),
        Command::Completions(args) => completions(args.shell),
    };
    if let Some(t) = started {
        eprint!(
            "{}",
            timings(
                &libtaskisol::cost::stop(),
                t.elapsed(),
                cpu_times(),
                since_exec()
            )
        );
    }
    code
}

/// This process's user and system CPU time, seconds.
fn cpu_times() -> (f64, f64) {
    // SAFETY: rusage is plain data, valid all zero; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to an rusage for the call.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (s(ru.ru_utime), s(ru.ru_stime))
}

/// Seconds from this process's start (its exec) to now: its start time in `/proc/self/stat`
/// (clock ticks after boot) against `CLOCK_BOOTTIME`, to a clock tick (10 ms at 100 Hz).
fn since_exec() -> Option<f64> {
    let st = libtaskisol::procfs::TaskStat::read_path(&SysRoot::host(), "/proc/self/stat").ok()?;
    // SAFETY: sysconf(3) has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    // SAFETY: timespec is plain data, valid all zero; clock_gettime fills it.
    let mut now: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a timespec for the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) } != 0 || hz <= 0 {
        return None;
    }
    Some(now.tv_sec as f64 + now.tv_nsec as f64 / 1e9 - st.starttime as f64 / hz as f64)
}

/// `--timings`: where the command's time went, for standard error; `since_exec`, the time
/// since the process started, says what came before the command began (starting the
/// process, loading the program, reading the arguments: under an emulator, a large share).
pub fn timings(
    c: &libtaskisol::cost::Costs,
    wall: std::time::Duration,
    cpu: (f64, f64),
    since_exec: Option<f64>,
) -> String {
    let before = since_exec.map_or_else(String::new, |e| {
        format!(
            " (and {:.2} s from the exec to the command's start)",
            (e - wall.as_secs_f64()).max(0.0)
        )
    });
    let mut s = format!(
        "timings: {:.3} s wall{before}, {:.3} s user, {:.3} s system\n",
        wall.as_secs_f64(),
        cpu.0,
        cpu.1
    );
    let width = c
        .stages
        .iter()
        .chain(&c.calls)
        .map(|l| l.name.len())
        .max()
        .unwrap_or(0);
    let mut part = |title: &str, lines: &[libtaskisol::cost::Line], what: &str| {
        s.push_str(title);
        for l in lines {
            s.push_str(&format!(
                "  {:<width$}  {:>9.3} s  {:>9} {what}\n",
                l.name, l.seconds, l.count
            ));
        }
    };
    part(
        "by stage and item (wall time; the \"workers\" lines are the wall time of passes spread over\n\
         several threads, whose items add up every worker's time):\n",
        &c.stages,
        "times",
    );
    part("system calls by kind:\n", &c.calls, "calls");
    s
}

fn resolve(path: &std::path::Path, root: &SysRoot) -> Result<Policy, i32> {
    libtaskisol::cost::stage("config", "read and resolved", || {
        let config = Config::load(path).map_err(unconfigured)?;
        Policy::resolve(config, root).map_err(|e| match e {
            ResolveError::Config(c) => unconfigured(c),
            ResolveError::Kernel(k) => fail(k),
        })
    })
}

/// `isold completions SHELL`: the script, from the same definition as --help.
fn completions(shell: clap_complete::Shell) -> i32 {
    use clap::CommandFactory;
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "isold", &mut script);
    print_out(&String::from_utf8_lossy(&script))
}

/// Whether the machine is a virtual machine, and what to say of the policy's preset there.
fn preset_advice(root: &SysRoot, c: &Config) -> (Option<libtaskisol::virt::Virt>, Option<String>) {
    let virt = libtaskisol::virt::detect(root);
    let advice =
        libtaskisol::policy::preset::advice(c.preset, c.preset_at().as_deref(), virt.as_ref());
    (virt, advice)
}

fn check(root: &SysRoot, policy: &Policy, out: &Output) -> i32 {
    let c = &policy.config;
    let (virt, advice) = preset_advice(root, c);
    if out.json {
        let v = serde_json::json!({
            "config": c.file,
            "preset": c.preset.name(),
            "isolated": policy.isolated.to_string(),
            "housekeeping": policy.housekeeping.to_string(),
            "on_stop": c.on_stop.name(),
            "virtualization": virt,
            "advice": advice,
        });
        return print_out(&format!("{v}\n"));
    }
    let mut s = format!(
        "{}: valid\npreset {}, isolated CPUs {}, housekeeping CPUs {}\non_stop = {}\n",
        c.file.display(),
        c.preset,
        policy.isolated,
        policy.housekeeping,
        c.on_stop.name()
    );
    for (k, v) in &c.sysctl {
        s.push_str(&format!("  sysctl {k} = {v}\n"));
    }
    for (p, pol) in &c.kthread_priority {
        s.push_str(&format!("  kthread {p}: {pol}\n"));
    }
    if let Some(a) = advice {
        s.push_str(&format!("note: {a}\n"));
    }
    print_out(&s)
}

/// Print a report; `ok` picks the exit code.
fn finish(rep: &Report, out: &Output, ok: bool) -> i32 {
    libtaskisol::cost::stage("report", "printed", || finish_report(rep, out, ok))
}

fn finish_report(rep: &Report, out: &Output, ok: bool) -> i32 {
    let text = if out.json {
        let mut t = serde_json::to_string_pretty(rep).expect("report serializes");
        t.push('\n');
        t
    } else {
        human(rep, out.verbose)
    };
    match print_out(&text) {
        0 if ok => EXIT_OK,
        _ => EXIT_FAILURE,
    }
}

/// How `isold plan` words a deviation: what apply would do about it.
const WOULD_CHANGE: &str = "would change";

/// The human form: one line per outcome worth reading, then the summary. Thread moves are
/// summed up unless --verbose (there can be thousands).
pub fn human(rep: &Report, verbose: bool) -> String {
    let mut s = String::new();
    if !rep.isolated.is_empty() {
        s.push_str(&format!(
            "isold {}: isolated CPUs {}",
            rep.command, rep.isolated
        ));
        if !rep.housekeeping.is_empty() {
            s.push_str(&format!(", housekeeping CPUs {}", rep.housekeeping));
        }
        s.push('\n');
    }
    if rep.command == "plan" {
        s.push_str(&plan_summary(rep));
    }
    let mut moved = 0usize;
    let mut absent: Vec<(&str, usize)> = Vec::new();
    // Kernel threads whose affinity the kernel manages, by their CPUs: one line, not dozens.
    let mut managed: Vec<(&str, usize)> = Vec::new();
    for o in &rep.outcomes {
        if let Status::NotChangeable { reason } = &o.status {
            if let Some(cpus) = reason.strip_prefix(KERNEL_MANAGED).filter(|_| !verbose) {
                match managed.iter_mut().find(|(c, _)| *c == cpus) {
                    Some((_, n)) => *n += 1,
                    None => managed.push((cpus, 1)),
                }
                continue;
            }
        }
        if matches!(o.status, Status::NotPresent { .. }) && !verbose {
            match absent.iter_mut().find(|(i, _)| *i == o.item) {
                Some((_, n)) => *n += 1,
                None => absent.push((&o.item, 1)),
            }
            continue;
        }
        let quiet = matches!(o.status, Status::AlreadyRight | Status::LeftAlone { .. })
            || (o.item == "tasks"
                && matches!(
                    o.status,
                    Status::Changed { .. } | Status::Gone | Status::Restored { .. }
                ));
        let plan = rep.command == "plan";
        let deviates = matches!(o.status, Status::Deviates { .. });
        let quiet = quiet || (plan && o.item == "tasks" && deviates);
        if o.item == "tasks"
            && (matches!(o.status, Status::Changed { .. } | Status::Restored { .. })
                || (plan && deviates))
        {
            moved += 1;
        }
        if quiet && !verbose {
            continue;
        }
        s.push_str(&format!(
            "  {:<17} {}: {}\n",
            if plan && deviates {
                WOULD_CHANGE
            } else {
                o.status.word()
            },
            o.label,
            o.status
        ));
    }
    if moved > 0 && !verbose {
        let verb = match rep.command.as_str() {
            "restore" => "restored",
            "plan" => "would be moved",
            _ => "moved",
        };
        s.push_str(&format!(
            "  tasks: {moved} thread affinities {verb} (-v lists them)\n"
        ));
    }
    if !managed.is_empty() {
        let total: usize = managed.iter().map(|(_, n)| n).sum();
        managed.sort_by_key(|&(cpus, n)| (std::cmp::Reverse(n), cpus));
        let by_cpus: Vec<String> = managed
            .iter()
            .map(|(cpus, n)| {
                let noun = if cpus.contains([',', '-']) {
                    "CPUs"
                } else {
                    "CPU"
                };
                format!("{n} on {noun} {cpus}")
            })
            .collect();
        s.push_str(&format!(
            "  {:<17} {total} kernel thread{} whose affinity the kernel manages (PF_NO_SETAFFINITY): {} (-v lists them)\n",
            Status::NotChangeable { reason: String::new() }.word(),
            if total == 1 { "" } else { "s" },
            by_cpus.join(", ")
        ));
    }
    if !absent.is_empty() {
        let list: Vec<String> = absent
            .iter()
            .map(|(i, n)| {
                if *n == 1 {
                    i.to_string()
                } else {
                    format!("{i} ({n})")
                }
            })
            .collect();
        s.push_str(&format!(
            "  not present on this kernel, nothing to do: {} (-v lists them)\n",
            list.join(", ")
        ));
    }
    for n in &rep.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    let problems = rep.problems().count();
    let summary = rep.summary();
    let summary = if rep.command == "plan" {
        summary.replace(" deviates", &format!(" {WOULD_CHANGE}"))
    } else {
        summary
    };
    s.push_str(&format!("{}: {summary}", rep.command));
    if rep.command == "verify" {
        s.push_str(if problems == 0 {
            " (clean)"
        } else {
            " (deviations found)"
        });
    }
    s.push('\n');
    s
}

/// What a plan changes, before the list: what it moves off the isolated CPUs, then the
/// settings, each counted in words for people (one line each; none when nothing would).
fn plan_summary(rep: &Report) -> String {
    // (item, singular, plural, moves off the isolated CPUs)
    const WORDS: &[(&str, &str, &str, bool)] = &[
        ("irq_affinity", "IRQ", "IRQs", true),
        ("tasks", "thread", "threads", true),
        ("workqueue", "workqueue mask", "workqueue masks", true),
        (
            "net_queues",
            "network device's channels",
            "network devices' channels",
            true,
        ),
        ("rps", "RPS mask", "RPS masks", true),
        (
            "cgroup_partition",
            "isolated cgroup partition",
            "isolated cgroup partitions",
            true,
        ),
        (
            "irqbalance",
            "irqbalance's banned CPUs",
            "irqbalance's banned CPUs",
            true,
        ),
        (
            "systemd_cpuaffinity",
            "systemd's CPUAffinity",
            "systemd's CPUAffinity",
            true,
        ),
        ("sysctl", "sysctl", "sysctls", false),
        (
            "kthread_priority",
            "kthread priority",
            "kthread priorities",
            false,
        ),
        (
            "machinecheck",
            "machine-check setting",
            "machine-check settings",
            false,
        ),
        ("pm_qos", "PM QoS limit", "PM QoS limits", false),
        ("cpufreq", "cpufreq governor", "cpufreq governors", false),
        ("ksm", "KSM", "KSM", false),
        ("thp", "THP", "THP", false),
        ("printk", "console log level", "console log levels", false),
        ("kvm", "KVM options file", "KVM options files", false),
    ];
    let changing = |o: &&libtaskisol::policy::Outcome| matches!(o.status, Status::Deviates { .. });
    // The default IRQ affinity is the irq_affinity item's too, but no IRQ.
    let default_irq = |o: &libtaskisol::policy::Outcome| o.id == "irq:default";
    let count = |item: &str| {
        rep.outcomes
            .iter()
            .filter(changing)
            .filter(|o| o.item == item && !default_irq(o))
            .count()
    };
    let mut off = Vec::new();
    let mut set = Vec::new();
    for &(item, one, many, moves) in WORDS {
        let n = count(item);
        let mut words = match n {
            0 if item != "irq_affinity" => continue,
            0 => String::new(),
            // A thing that is not counted (KSM, THP) is named alone.
            _ if one == many => one.to_string(),
            1 => format!("1 {one}"),
            n => format!("{n} {many}"),
        };
        if item == "irq_affinity" && rep.outcomes.iter().filter(changing).any(default_irq) {
            if !words.is_empty() {
                words.push_str(" and ");
            }
            words.push_str("the default IRQ affinity");
        }
        if words.is_empty() {
            continue;
        }
        if moves { &mut off } else { &mut set }.push(words);
    }
    // Anything the table does not name yet, by its item's name.
    let mut others: Vec<&str> = rep
        .outcomes
        .iter()
        .filter(|o| matches!(o.status, Status::Deviates { .. }))
        .map(|o| o.item.as_str())
        .filter(|i| !WORDS.iter().any(|w| w.0 == *i))
        .collect();
    others.dedup();
    set.extend(others.iter().map(|i| format!("{} {i}", count(i))));
    let mut s = String::new();
    if !off.is_empty() {
        s.push_str(&format!(
            "would move off CPUs {}: {}\n",
            rep.isolated,
            off.join(", ")
        ));
    }
    if !set.is_empty() {
        s.push_str(&format!("would set: {}\n", set.join(", ")));
    }
    s
}

/// `isold items`: each item, its line of documentation and its value in each preset; or the
/// man page of the configuration file made from a template.
fn items(args: &cli::ItemsArgs) -> i32 {
    use libtaskisol::policy::config::{Config, CpuSpec};
    use libtaskisol::policy::items;
    use libtaskisol::policy::preset::Preset;
    if let Some(template) = &args.man_page {
        let text = match std::fs::read_to_string(template) {
            Ok(t) => t,
            Err(e) => return fail(format!("{}: {e}", template.display())),
        };
        let Some(page) = items::man_page(&text) else {
            return fail(format!(
                "{}: no line .\\\" @ITEMS@ to put the items in",
                template.display()
            ));
        };
        // A closed pipe (`| head`) ends the output, quietly.
        let _ = std::io::Write::write_all(&mut std::io::stdout(), page.as_bytes());
        return EXIT_OK;
    }
    let presets: Vec<(Preset, Config)> = Preset::ALL
        .into_iter()
        .map(|p| (p, Config::defaults(p, CpuSpec::Auto)))
        .collect();
    if args.json {
        let list: Vec<serde_json::Value> = items::ALL
            .iter()
            .map(|item| {
                let values: serde_json::Map<String, serde_json::Value> = presets
                    .iter()
                    .map(|(p, c)| {
                        (
                            p.name().to_string(),
                            items::shown_value(c, item.name).into(),
                        )
                    })
                    .collect();
                serde_json::json!({ "name": item.name, "doc": item.doc, "presets": values })
            })
            .collect();
        return print_out(&format!("{:#}\n", serde_json::Value::from(list)));
    }
    let mut text = String::new();
    for item in items::ALL {
        let values: Vec<String> = presets
            .iter()
            .map(|(p, c)| format!("{p} {}", items::shown_value(c, item.name)))
            .collect();
        text.push_str(&format!(
            "{}: {}\n  {}\n",
            item.name,
            item.doc,
            values.join(", ")
        ));
    }
    let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
    EXIT_OK
}

#[cfg(test)]
mod tests {
    use super::*;
    use libtaskisol::policy::Outcome;

    fn o(item: &str, label: &str, status: Status) -> Outcome {
        Outcome {
            item: item.into(),
            id: label.into(),
            label: label.into(),
            status,
        }
    }

    #[test]
    fn timings_say_what_came_before_the_command_began() {
        let c = libtaskisol::cost::Costs {
            stages: vec![],
            calls: vec![],
        };
        let wall = std::time::Duration::from_millis(500);
        let t = timings(&c, wall, (0.1, 0.2), Some(0.8));
        assert!(
            t.starts_with("timings: 0.500 s wall (and 0.30 s from the exec to the command's start), 0.100 s user, 0.200 s system\n"),
            "{t}"
        );
        // Unknown, or a clock tick short: nothing said, never a negative time.
        assert!(timings(&c, wall, (0.1, 0.2), None).starts_with("timings: 0.500 s wall, 0.100"));
        assert!(timings(&c, wall, (0.1, 0.2), Some(0.49)).contains("(and 0.00 s from"));
        // This process started before now: the figure is there and not negative.
        let e = since_exec().expect("this process's start time");
        assert!((0.0..3600.0).contains(&e), "{e}");
    }

    fn absent() -> Status {
        Status::NotPresent {
            reason: "this kernel has no file".into(),
        }
    }

    fn changed() -> Status {
        Status::Changed {
            from: "0-3".into(),
            to: "0-1".into(),
        }
    }

    /// plan's first lines: one of a kind in the singular, the default IRQ affinity named
    /// alone when no IRQ moves, KSM without a count, nothing said of what does not change,
    /// an item the words lack counted by its name.
    #[test]
    fn a_plans_summary_counts_in_words() {
        let dev = || Status::Deviates {
            current: "a".into(),
            want: "b".into(),
        };
        let mut default_irq = o("irq_affinity", "default_smp_affinity", dev());
        default_irq.id = "irq:default".into();
        let rep = Report {
            command: "plan".into(),
            isolated: "2-3".into(),
            housekeeping: "0-1".into(),
            outcomes: vec![
                o("irq_affinity", "IRQ 0 (timer)", Status::AlreadyRight),
                default_irq,
                o("tasks", "task 1", dev()),
                o("sysctl", "sysctl vm.stat_interval", dev()),
                o("ksm", "KSM run", dev()),
                o("thp", "THP", Status::AlreadyRight),
                o("newitem", "x", dev()),
                o("newitem", "y", dev()),
            ],
            notes: vec![],
            set_aside: 0,
            written: vec![],
        };
        assert_eq!(
            plan_summary(&rep),
            "would move off CPUs 2-3: the default IRQ affinity, 1 thread\nwould set: 1 sysctl, KSM, 2 newitem\n"
        );
        assert_eq!(
            super::text::cell(&"x".repeat(44), 44),
            ("x".repeat(44), vec![])
        );
    }

    fn report(command: &str) -> Report {
        Report {
            command: command.into(),
            isolated: "2-3".into(),
            housekeeping: "0-1".into(),
            outcomes: vec![
                o("sysctl", "sysctl a", absent()),
                o("thp", "thp", absent()),
                o("sysctl", "sysctl b", absent()),
                o("sysctl", "sysctl c", Status::AlreadyRight),
                o("tasks", "task 1 (init)", changed()),
                o("tasks", "task 2 (sh)", changed()),
                o("tasks", "task 3 (sleep)", Status::Gone),
                o(
                    "tasks",
                    "task 4 (workload)",
                    Status::LeftAlone {
                        reason: "workload".into(),
                    },
                ),
                o("irq_affinity", "IRQ 4 (ttyS0)", changed()),
                o("irq_affinity", "IRQ 5 (gone)", Status::Gone),
            ],
            notes: vec!["kvm: later".into()],
            ..Report::default()
        }
    }

    /// Thread moves, "already right" and "left alone" are summed up; "not present" is one
    /// line per item with counts; other outcomes are listed, the summary counts them all.
    #[test]
    fn the_human_report_sums_up_the_many_and_lists_the_rest() {
        assert_eq!(
            human(&report("apply"), false),
            "isold apply: isolated CPUs 2-3, housekeeping CPUs 0-1\n\
             \x20 changed           IRQ 4 (ttyS0): changed: 0-3 -> 0-1\n\
             \x20 gone              IRQ 5 (gone): gone\n\
             \x20 tasks: 2 thread affinities moved (-v lists them)\n\
             \x20 not present on this kernel, nothing to do: sysctl (2), thp (-v lists them)\n\
             note: kvm: later\n\
             apply: 3 changed, 1 already right, 1 left alone, 3 not present, 2 gone\n"
        );
    }

    #[test]
    fn verbose_lists_every_outcome() {
        let text = human(&report("apply"), true);
        assert_eq!(text.lines().count(), 1 + 10 + 2, "{text}");
        assert!(text.contains("  already right     sysctl c: already right\n"));
        assert!(text.contains("  changed           task 2 (sh): changed: 0-3 -> 0-1\n"));
        assert!(text.contains("  not present       thp: not present: this kernel has no file\n"));
        assert!(!text.contains("(-v lists them)"), "{text}");
    }

    #[test]
    fn restore_says_restored_and_verify_says_clean_or_not() {
        let mut rep = report("restore");
        rep.housekeeping.clear();
        for o in &mut rep.outcomes {
            if matches!(o.status, Status::Changed { .. }) {
                o.status = Status::Restored { to: "0-3".into() };
            }
        }
        let text = human(&rep, false);
        assert!(
            text.starts_with("isold restore: isolated CPUs 2-3\n"),
            "{text}"
        );
        assert!(text.contains("  tasks: 2 thread affinities restored (-v lists them)\n"));
        assert!(!text.contains("verify"), "{text}");

        let mut rep = report("verify");
        rep.outcomes.truncate(4);
        assert!(human(&rep, false).ends_with("verify: 1 already right, 3 not present (clean)\n"));
        rep.outcomes.push(o(
            "sysctl",
            "sysctl d",
            Status::Deviates {
                current: "1".into(),
                want: "0".into(),
            },
        ));
        let text = human(&rep, false);
        assert!(
            text.contains("  deviates          sysctl d: is 1, policy wants 0\n"),
            "{text}"
        );
        assert!(text.ends_with(" (deviations found)\n"), "{text}");
    }
}
