//! `isold bootargs`: the kernel arguments the policy needs, which the running kernel lacks,
//! and the GRUB drop-in that gives them to the next boot.

use std::fmt::Write as _;

use libtaskisol::audit::Scope;
use libtaskisol::policy::bootargs::{self, BootArg};
use libtaskisol::policy::engine;
use libtaskisol::policy::grub;
use libtaskisol::policy::state::StateFiles;
use libtaskisol::{topology, SysRoot};

use crate::cli::BootargsArgs;
use crate::exit::{fail, print_out, EXIT_FAILURE, EXIT_OK};
use crate::text::wrap;

/// `isold bootargs`: exit 0 when the running kernel has every argument, 1 when some are
/// missing (after writing the GRUB drop-in with --write-grub, 0).
///
/// Long because it is one report printed section by section (the arguments had, missing, wrong;
/// GRUB's drop-in); split, each part would only pass the buffer on.
pub fn run(root: &SysRoot, scope: &Scope, args: &BootargsArgs, files: &StateFiles) -> i32 {
    let online = match topology::online_cpus(root) {
        Ok(o) => o,
        Err(e) => return fail(e),
    };
    let cmdline = match root.read_value_opt("/proc/cmdline") {
        Ok(c) => c.unwrap_or_default(),
        Err(e) => return fail(e),
    };
    let housekeeping = online.difference(&scope.cpus);
    if housekeeping.is_empty() {
        // As the configuration's isolated_cpus: irqaffinity= would be empty, and the
        // kernel would have no CPU left for its own work.
        return fail(format!(
            "isolated CPUs {}: no housekeeping CPU left: they cover every online CPU ({online})",
            scope.cpus
        ));
    }
    let machine = bootargs::Machine::read(root);
    let all = bootargs::needed(scope.preset, &scope.cpus, &housekeeping, &machine, &cmdline);
    // Said once each: an argument for hardware the machine lacks, and the preset's fit.
    let not_needed = bootargs::not_needed(&machine, &cmdline);
    let virt = libtaskisol::virt::detect(root);
    let advice = libtaskisol::policy::preset::advice(
        scope.preset,
        scope.preset_at.as_deref(),
        virt.as_ref(),
    );
    let missing: Vec<&BootArg> = all.iter().filter(|a| !a.satisfied).collect();
    // The next boot's line: what the running one has besides, then every argument.
    let every: Vec<&BootArg> = all.iter().collect();
    let next = bootargs::next_cmdline(&cmdline, &every);
    let long = bootargs::too_long(&next);
    // GRUB's files as update-grub would read them with the drop-in --write-grub writes: the
    // complete set, not only what this boot lacks (a command line that came from an earlier
    // drop-in must come from the next one too).
    let text = bootargs::grub_drop_in(&every);
    let sources = match grub::sources(root) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let with_drop_in = grub::with_file(&sources, bootargs::GRUB_DROP_IN, &text);
    let grub_model = grub::model(&with_drop_in);
    let conflicts = bootargs::grub_conflicts(&grub_model, &every);
    if args.write_grub {
        let drop_in_exists = root.exists(bootargs::GRUB_DROP_IN);
        if missing.is_empty() && !drop_in_exists {
            return print_out("bootargs: the running kernel has every argument; nothing written\n");
        }
        if root.is_host() && !nix::unistd::geteuid().is_root() {
            return fail(format!(
                "bootargs --write-grub needs root privileges: it writes {}",
                bootargs::GRUB_DROP_IN
            ));
        }
        if let Some(why) = &long {
            return fail(format!("bootargs: {why}; nothing written"));
        }
        let writes = match grub_edits(&with_drop_in, &conflicts, &every) {
            Ok(w) => w,
            Err(why) => return fail(format!("bootargs: {why}; nothing written")),
        };
        // Through the engine: each original (none for the drop-in, usually; GRUB's own file
        // where an argument is replaced) is recorded in the persistent state file first, so
        // that isold restore puts it back byte for byte after any number of reboots.
        let mut all_writes: Vec<(String, String)> = writes;
        all_writes.push((bootargs::GRUB_DROP_IN.to_string(), text));
        let rep = match engine::write_owned_files(root, files, "bootargs", &all_writes) {
            Ok(rep) => rep,
            Err(e) => return crate::exit::fail_with(e),
        };
        if let Some(o) = rep.problems().next() {
            return fail(format!("{}: {}", o.label, o.status));
        }
        let mut out = String::new();
        for c in &conflicts {
            let _ = writeln!(
                out,
                "replaced {} with {} in {} line {} ({}): {}",
                c.word,
                c.arg,
                root.path(&c.file).display(),
                c.line,
                c.var,
                c.why
            );
        }
        let _ = writeln!(
            out,
            "wrote {}; run update-grub and reboot to use it (isold restore {})",
            root.path(bootargs::GRUB_DROP_IN).display(),
            if conflicts.is_empty() {
                "removes it"
            } else {
                "removes it and puts back what it replaced"
            }
        );
        return print_out(&out);
    }
    if args.json {
        let v = serde_json::json!({
            "cpus": scope.cpus.to_string(),
            "preset": scope.preset.name(),
            "args": all,
            "missing": missing.iter().map(|a| a.arg.as_str()).collect::<Vec<_>>(),
            "cmdline_length": next.len(),
            "cmdline_max": bootargs::COMMAND_LINE_SIZE - 1,
            "too_long": long,
            "conflicts": conflicts,
            "not_needed": not_needed,
            "virtualization": virt,
            "advice": advice,
            "not_understood": grub_model
                .not_understood
                .iter()
                .map(|(f, l)| format!("{f}:{l}"))
                .collect::<Vec<_>>(),
        });
        let code = print_out(&format!("{v:#}\n"));
        return if code == EXIT_OK && missing.is_empty() && long.is_none() {
            EXIT_OK
        } else {
            EXIT_FAILURE
        };
    }
    let mut s = format!(
        "isold bootargs: CPUs {} ({}), preset {}\n",
        scope.cpus.to_kernel_list(),
        scope.source,
        scope.preset
    );
    let drop_in = root
        .read_to_string(bootargs::GRUB_DROP_IN)
        .unwrap_or_default();
    let written = bootargs::drop_in_args(&drop_in);
    for a in &all {
        let conflicted = conflicts.iter().any(|c| c.arg == a.arg);
        let state = if !a.satisfied && written.contains(&a.arg.as_str()) && conflicted {
            format!(
                "MISSING (in {}, but the kernel would not take it: see conflict)",
                bootargs::GRUB_DROP_IN
            )
        } else if !a.satisfied && written.contains(&a.arg.as_str()) {
            format!(
                "MISSING (in {}: waits for update-grub and a reboot)",
                bootargs::GRUB_DROP_IN
            )
        } else if a.satisfied && a.current.is_none() {
            "kernel default".to_string()
        } else if a.satisfied {
            "have".to_string()
        } else {
            match &a.current {
                Some(c) => format!("MISSING (kernel has {c})"),
                None => "MISSING".into(),
            }
        };
        let _ = writeln!(s, "  {:<36} {state}", a.arg);
        let _ = writeln!(s, "      {}", wrap(&a.why, 6, 6));
        if !a.satisfied {
            if let Some(why) = bootargs::running_conflict(&cmdline, &a.arg) {
                let _ = writeln!(s, "      {}", wrap(&why, 6, 6));
            }
        }
        for c in conflicts.iter().filter(|c| c.arg == a.arg) {
            let line = if c.word.is_empty() {
                format!("conflict: {}: {}", c.whence(), c.why)
            } else {
                format!(
                    "conflict: {} at {}: {}; the next boot would not have {} (--write-grub replaces it)",
                    c.word,
                    c.whence(),
                    c.why,
                    a.arg
                )
            };
            let _ = writeln!(s, "      {}", wrap(&line, 6, 6));
        }
    }
    for n in &not_needed {
        let _ = writeln!(s, "  {:<36} not proposed", n.arg);
        let _ = writeln!(s, "      {}", wrap(&n.why, 6, 6));
    }
    for (f, l) in &grub_model.not_understood {
        let _ = writeln!(
            s,
            "  note: {f}:{l} sets the kernel line with a command substitution, which isold does not run"
        );
    }
    if let Some(a) = &advice {
        let _ = writeln!(s, "  note: {}", wrap(a, 8, 8));
    }
    let _ = writeln!(
        s,
        "  command line with them: {} of {} bytes",
        next.len(),
        bootargs::COMMAND_LINE_SIZE - 1
    );
    if let Some(why) = &long {
        let _ = writeln!(s, "bootargs: {why}");
    }
    if missing.is_empty() {
        s.push_str("bootargs: the running kernel has every argument\n");
    } else {
        let words: Vec<&str> = missing.iter().map(|a| a.arg.as_str()).collect();
        let _ = writeln!(
            s,
            "bootargs: {} missing; add to the kernel command line:\n{}",
            missing.len(),
            words.join(" ")
        );
        s.push_str("(isold bootargs --write-grub writes every argument to /etc/default/grub.d/isold.cfg)\n");
    }
    match print_out(&s) {
        EXIT_OK if missing.is_empty() && long.is_none() => EXIT_OK,
        _ => EXIT_FAILURE,
    }
}

/// The files GRUB's configuration needs changed so that the kernel takes the drop-in's
/// arguments: each conflicting occurrence replaced in place by isold's argument. `Err` names
/// an occurrence that cannot be replaced (written with quotes or expansions inside it, or a
/// later assignment that drops the drop-in's line), with its file and line; nothing is to be
/// written then. The result is checked again: the kernel line it makes has no conflict left.
fn grub_edits(
    sources: &[grub::Source],
    conflicts: &[bootargs::Conflict],
    every: &[&BootArg],
) -> Result<Vec<(String, String)>, String> {
    let mut by_file: std::collections::BTreeMap<&str, Vec<(usize, usize, String)>> =
        std::collections::BTreeMap::new();
    for c in conflicts {
        // A conflict with a span is one plain word of the administrator's files (never the
        // drop-in's: bootargs::grub_conflicts leaves those out); without one it is a word
        // written otherwise, or (no word) a later line that sets the variable anew.
        match c.span {
            Some((s, e)) => {
                by_file
                    .entry(c.file.as_str())
                    .or_default()
                    .push((s, e, c.arg.clone()));
            }
            _ if c.word.is_empty() => {
                return Err(format!(
                    "the kernel would not get {}: {}: {}; edit it by hand",
                    c.arg,
                    c.whence(),
                    c.why
                ))
            }
            _ => {
                return Err(format!(
                    "the kernel would ignore {}: {}: {} at {} is not written as one plain word, so isold does not replace it; edit it by hand",
                    c.arg,
                    c.why,
                    c.word,
                    c.whence()
                ))
            }
        }
    }
    let mut edited: Vec<grub::Source> = sources.to_vec();
    let mut out = Vec::new();
    for (file, edits) in by_file {
        let Some(src) = edited.iter_mut().find(|s| s.path == file) else {
            continue;
        };
        src.text = grub::replace_spans(&src.text, &edits);
        out.push((file.to_string(), src.text.clone()));
    }
    if let Some(c) = bootargs::grub_conflicts(&grub::model(&edited), every).first() {
        return Err(format!(
            "the kernel would still ignore {}: {} at {}: {}; edit it by hand",
            c.arg,
            c.word,
            c.whence(),
            c.why
        ));
    }
    Ok(out)
}
