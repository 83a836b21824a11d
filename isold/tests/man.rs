//! man/isold.8 must describe exactly the options and commands isold accepts, and
//! dist/isold.toml must be a valid configuration.

use std::collections::BTreeSet;

use clap::CommandFactory;

/// A man page as installed: isold.toml(5) with the items' paragraphs from their declarations.
fn man(name: &str) -> String {
    let text =
        std::fs::read_to_string(format!("{}/../man/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    if name == "isold.toml.5" {
        return libtaskisol::policy::items::man_page(&text).expect("the @ITEMS@ line");
    }
    text
}

fn tagged(section: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut lines = section.lines();
    while let Some(l) = lines.next() {
        if l != ".TP" {
            continue;
        }
        let tag = lines.next().unwrap_or_default().replace("\\-", "-");
        for word in tag.split(|c: char| c.is_whitespace() || c == '"' || c == ',') {
            let w = word.trim_start_matches("\\fB").trim_end_matches("\\fR");
            if w.starts_with("--")
                || (w.len() == 2 && w.starts_with('-'))
                || (!w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            {
                out.insert(w.to_string());
            }
        }
    }
    out
}

fn section<'a>(text: &'a str, name: &str) -> &'a str {
    text.split(&format!(".SH {name}\n"))
        .nth(1)
        .and_then(|s| s.split("\n.SH ").next())
        .unwrap_or_else(|| panic!("section {name}"))
}

#[test]
fn man_page_and_cli_agree() {
    let page = man("isold.8");
    let opts: BTreeSet<String> = tagged(section(&page, "OPTIONS"))
        .into_iter()
        .filter(|w| w.starts_with('-'))
        .collect();
    let cmds = tagged(section(&page, "COMMANDS"));
    let cmd = isold::cli::Cli::command();
    let mut cli_opts = BTreeSet::from(["-h".to_string(), "--help".to_string()]);
    let mut add = |c: &clap::Command| {
        for a in c.get_arguments().filter(|a| !a.is_hide_set()) {
            if let Some(s) = a.get_short() {
                cli_opts.insert(format!("-{s}"));
            }
            if let Some(l) = a.get_long() {
                cli_opts.insert(format!("--{l}"));
            }
        }
    };
    add(&cmd);
    for sc in cmd.get_subcommands() {
        add(sc);
    }
    let cli_cmds: BTreeSet<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .filter(|n| n != "help")
        .collect();
    assert_eq!(opts, cli_opts, "options of man/isold.8 vs the CLI");
    assert_eq!(cmds, cli_cmds, "commands of man/isold.8 vs the CLI");
}

#[test]
fn man_page_of_the_file_documents_every_item() {
    let page = man("isold.toml.5").replace("\\-", "-");
    let items = tagged(section(&page, "[items]"));
    let known: BTreeSet<String> = libtaskisol::policy::items::ALL
        .iter()
        .map(|i| i.name.to_string())
        .collect();
    assert_eq!(items, known, "items of man/isold.toml.5 vs the library");
}

#[test]
fn the_example_configuration_is_valid() {
    let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../dist/isold.toml"));
    let c = libtaskisol::policy::config::Config::load(path).unwrap();
    assert_eq!(c.preset.name(), "realtime-virtual-host");
}

#[test]
fn man_page_lists_every_metric_and_no_other() {
    let page = man("isold.8");
    let listed: BTreeSet<String> = tagged(section(&page, "METRICS"))
        .into_iter()
        .filter(|w| w.starts_with("isold_"))
        .collect();
    let code: BTreeSet<String> = isold::metrics::NAMES
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        listed, code,
        "metrics of man/isold.8 vs isold::metrics::NAMES"
    );
    // And NAMES is what the daemon registers: every name appears in an encoding.
    let policy = libtaskisol::policy::Policy::resolve(
        libtaskisol::policy::config::Config::parse(
            "isolated_cpus = \"2-3\"\n",
            std::path::Path::new("isold.toml"),
        )
        .unwrap(),
        &libtaskisol::SysRoot::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/debian-6.12-rt-isold"
        )),
    )
    .unwrap();
    let m = isold::metrics::Metrics::new(&policy);
    m.corrected("sysctl", Some("sysctl:vm.stat_interval"));
    m.task_reaction(0.01);
    let text = String::from_utf8(m.encode()).unwrap();
    let encoded: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    let code_registered: BTreeSet<String> = encoded.intersection(&code).cloned().collect();
    // Vectors without a series yet are not encoded: those of the health samples.
    // And the NRI plugin's, registered with `[containers] nri` only; and the stall guard's
    // rescues, a vector with a series per CPU and kind once a thread was rescued there; and
    // the noise ledger's, a series per CPU (and source) once an interruption was recorded.
    let sampled = [
        "isold_cpu_noise_seconds_total",
        "isold_cpu_noise_events_total",
        "isold_cpu_noise_duration_seconds",
        "isold_stall_rescues_total",
        "isold_stall_lent_seconds_total",
        "isold_cpu_interrupts_total",
        "isold_cpu_softirqs_total",
        "isold_cpu_foreign_context_switches_total",
        "isold_cpu_tick_rate_hertz",
        "isold_nri_connected",
        "isold_service_cpu_seconds_total",
    ];
    let want: BTreeSet<String> = code
        .iter()
        .filter(|n| !sampled.contains(&n.as_str()))
        .cloned()
        .collect();
    assert_eq!(code_registered, want, "{text}");
    assert_eq!(encoded.difference(&code).count(), 0, "{text}");
}

/// The README reads top down: what and why, then the two commands, on a first screen of 40
/// lines at most; then the path for one's own host.
#[test]
fn the_readmes_first_screen_fits_40_lines() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let first = text
        .split("\n## On your own host\n")
        .next()
        .expect("README has \"On your own host\"");
    assert!(
        first.lines().count() <= 40,
        "{} lines before \"On your own host\"",
        first.lines().count()
    );
    for cmd in ["./scripts/demo ", "./scripts/test "] {
        assert!(first.contains(cmd), "{cmd} on the first screen");
    }
    let host = text.split("\n## On your own host\n").nth(1).unwrap();
    for step in [
        "isold check",
        "isold plan",
        "isold bootargs",
        "isold apply",
        "isold verify",
        "systemctl start isold",
        "isold restore",
    ] {
        assert!(
            host.contains(&format!("\n{step}")),
            "{step} in the own-host path"
        );
    }
}
