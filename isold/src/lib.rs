//! isold: apply, verify and restore an isolated-CPU policy. All kernel knowledge lives in
//! libtaskisol (`policy`); this crate parses options, prints, and picks exit codes.

pub mod cli;

use std::io::Write;

use clap::Parser;
use libtaskisol::policy::{config::Config, engine, Policy, Report, ResolveError, Status};
use libtaskisol::SysRoot;

use cli::{Cli, Command, Output};

/// Exit code: success (verify: no deviation).
pub const EXIT_OK: i32 = 0;
/// Exit code: failure, invalid configuration, or (verify) a deviation.
pub const EXIT_FAILURE: i32 = 1;

fn fail(msg: impl std::fmt::Display) -> i32 {
    eprintln!("isold: {msg}");
    EXIT_FAILURE
}

/// Parse `args` (with `argv[0]`) and run; returns the exit code.
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
                eprintln!("isold: no command given (apply, verify, restore, check)\nTry 'isold --help' for more information.");
                return EXIT_FAILURE;
            }
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("isold: {first}\nTry 'isold --help' for more information.");
            return EXIT_FAILURE;
        }
    };
    let root = match &cli.root {
        Some(d) => SysRoot::new(d),
        None => SysRoot::host(),
    };
    let state_path = cli
        .state
        .clone()
        .unwrap_or_else(|| engine::default_state_path(&root));
    let config_path = cli
        .config
        .clone()
        .unwrap_or_else(|| root.path("/etc/isold/isold.toml"));
    let writes = matches!(cli.command, Command::Apply(_) | Command::Restore(_));
    if writes && root.is_host() && !nix::unistd::geteuid().is_root() {
        let what = if matches!(cli.command, Command::Apply(_)) {
            "apply"
        } else {
            "restore"
        };
        return fail(format!(
            "{what} needs root privileges: it writes /proc/sys, /sys, /proc/irq and other tasks' CPU affinity"
        ));
    }
    match &cli.command {
        Command::Apply(out) => {
            let policy = match resolve(&config_path, &root) {
                Ok(p) => p,
                Err(code) => return code,
            };
            match engine::apply(&root, &policy, &state_path) {
                Ok(rep) => finish(&rep, out, rep.problems().count() == 0),
                Err(e) => fail(e),
            }
        }
        Command::Verify(out) => {
            let policy = match resolve(&config_path, &root) {
                Ok(p) => p,
                Err(code) => return code,
            };
            match engine::verify(&root, &policy, &state_path) {
                Ok(rep) => finish(&rep, out, rep.problems().count() == 0),
                Err(e) => fail(e),
            }
        }
        Command::Restore(out) => match engine::restore(&root, &state_path) {
            Ok(rep) => finish(&rep, out, rep.problems().count() == 0),
            Err(e) => fail(e),
        },
        Command::Check(out) => {
            let policy = match resolve(&config_path, &root) {
                Ok(p) => p,
                Err(code) => return code,
            };
            check(&policy, out)
        }
    }
}

fn resolve(path: &std::path::Path, root: &SysRoot) -> Result<Policy, i32> {
    let config = Config::load(path).map_err(fail)?;
    Policy::resolve(config, root).map_err(|e| match e {
        ResolveError::Config(c) => fail(c),
        ResolveError::Kernel(k) => fail(k),
    })
}

fn check(policy: &Policy, out: &Output) -> i32 {
    let c = &policy.config;
    if out.json {
        let v = serde_json::json!({
            "config": c.file,
            "preset": c.preset.name(),
            "isolated": policy.isolated.to_string(),
            "housekeeping": policy.housekeeping.to_string(),
        });
        return print_out(&format!("{v}\n"));
    }
    let mut s = format!(
        "{}: valid\npreset {}, isolated CPUs {}, housekeeping CPUs {}\n",
        c.file.display(),
        c.preset,
        policy.isolated,
        policy.housekeeping
    );
    for (k, v) in &c.sysctl {
        s.push_str(&format!("  sysctl {k} = {v}\n"));
    }
    for (p, pol) in &c.kthread_priority {
        s.push_str(&format!("  kthread {p}: {pol}\n"));
    }
    print_out(&s)
}

/// Print a report; `ok` picks the exit code.
fn finish(rep: &Report, out: &Output, ok: bool) -> i32 {
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
    let mut moved = 0usize;
    let mut absent: Vec<(&str, usize)> = Vec::new();
    for o in &rep.outcomes {
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
        if o.item == "tasks" && matches!(o.status, Status::Changed { .. } | Status::Restored { .. })
        {
            moved += 1;
        }
        if quiet && !verbose {
            continue;
        }
        s.push_str(&format!(
            "  {:<17} {}: {}\n",
            o.status.word(),
            o.label,
            o.status
        ));
    }
    if moved > 0 && !verbose {
        let verb = if rep.command == "restore" {
            "restored"
        } else {
            "moved"
        };
        s.push_str(&format!(
            "  tasks: {moved} thread affinities {verb} (-v lists them)\n"
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
    s.push_str(&format!("{}: {}", rep.command, rep.summary()));
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

fn print_out(text: &str) -> i32 {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => EXIT_OK,
        Err(e) => fail(format!(
            "write error: {}",
            libtaskisol::error::io_strerror(&e)
        )),
    }
}
