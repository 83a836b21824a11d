//! man/chisol.1 must describe exactly the options the program accepts.

use std::collections::BTreeSet;

use clap::CommandFactory;

fn man_options() -> BTreeSet<String> {
    let man = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../man/chisol.1"))
        .expect("man/chisol.1 exists");
    let section = man
        .split(".SH OPTIONS")
        .nth(1)
        .and_then(|s| s.split("\n.SH ").next())
        .expect("man page has an OPTIONS section");
    let mut out = BTreeSet::new();
    let mut lines = section.lines();
    while let Some(l) = lines.next() {
        if l != ".TP" {
            continue;
        }
        // The tag line of a .TP paragraph names the option(s).
        let tag = lines.next().unwrap_or_default().replace("\\-", "-");
        for word in tag.split(|c: char| c.is_whitespace() || c == '"' || c == ',') {
            let word = word.trim_start_matches("\\fB").trim_end_matches("\\fR");
            if let Some(long) = word.strip_prefix("--") {
                out.insert(format!("--{long}"));
            } else if word.len() == 2 && word.starts_with('-') {
                out.insert(word.to_string());
            }
        }
    }
    out
}

fn cli_options() -> BTreeSet<String> {
    let cmd = chisol::cli::Cli::command();
    let mut out = BTreeSet::new();
    for a in cmd.get_arguments() {
        if let Some(s) = a.get_short() {
            out.insert(format!("-{s}"));
        }
        if let Some(l) = a.get_long() {
            out.insert(format!("--{l}"));
        }
    }
    out.insert("-h".into());
    out.insert("--help".into());
    out
}

#[test]
fn man_page_and_cli_list_the_same_options() {
    let man = man_options();
    let cli = cli_options();
    assert!(man.contains("--quiesce") && man.contains("-q"), "{man:?}");
    let only_man: Vec<_> = man.difference(&cli).collect();
    let only_cli: Vec<_> = cli.difference(&man).collect();
    assert!(
        only_man.is_empty() && only_cli.is_empty(),
        "man/chisol.1 and the CLI disagree: only in the man page {only_man:?}, only in the CLI {only_cli:?}"
    );
}

#[test]
fn man_page_shows_the_oslat_example() {
    let man =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../man/chisol.1")).unwrap();
    assert!(man.contains("chisol \\-q vmstat_sync \\-I conf oslat \\-f 1 \\-c 2\\-3"));
    // The help's examples and the man page's agree on the oslat use.
    let help = chisol::cli::Cli::command().render_help().to_string();
    assert!(
        help.contains("chisol -q vmstat_sync -I conf oslat -f 1 -c 2-3"),
        "{help}"
    );
}
