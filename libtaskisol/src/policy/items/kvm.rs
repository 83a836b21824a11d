//! `kvm`: the options of `[kvm]` (the table is the configuration's) in a modprobe.d file,
//! for the parameters the loaded modules have.

use super::{Item, Planning, BASE};
use crate::error::Result;
use crate::policy::lines::{FileEdit, Key, Line};
use crate::policy::target::{Op, Target};
use crate::sysroot::SysRoot;

/// The KVM module options isold owns.
pub const KVM_CONF: &str = "/etc/modprobe.d/isold-kvm.conf";

/// The `kvm` item.
pub const ITEM: Item = Item {
    name: "kvm",
    doc: "the [kvm] module options, in /etc/modprobe.d/isold-kvm.conf",
    man: MAN,
    plan,
    files: &[KVM_CONF],
    applied_note: Some("kvm: the module options take effect when the kvm modules are next loaded"),
    waiting: |root, t| match &t.op {
        Op::File { edit, .. } => waiting(root, &edit.own()),
        _ => None,
    },
    line_before_0_2: |l| l.starts_with("options "),
    ..BASE
};

const MAN: &str = r#"The options of
.B [kvm]
in
.IR /etc/modprobe.d/isold\-kvm.conf ,
only for parameters the loaded module has (realtime\-virtual\-host:
kvm.kvmclock_periodic_sync 0, kvm.nx_huge_pages 0, kvm_intel.ple_gap 0; the kvm module of 7.x
has no kvmclock_periodic_sync, so the file has none there).
They take effect when the module is next loaded (verify and status say the file waits for it
while the loaded module has other values); the file stays across reboots until
.BR "isold restore" ."#;

fn plan(p: &mut Planning<'_>) -> Result<()> {
    let c = &p.policy.config;
    if c.kvm.is_empty() {
        return Ok(());
    }
    let mut by_module: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for (m, param, v) in &c.kvm {
        if !p.root.exists(format!("/sys/module/{m}/parameters/{param}")) {
            continue;
        }
        let pv = (param.clone(), v.to_string());
        match by_module.iter_mut().find(|(mm, _)| mm == m) {
            Some((_, v2)) => v2.push(pv),
            None => by_module.push((m.clone(), vec![pv])),
        }
    }
    if by_module.is_empty() {
        return Ok(());
    }
    let mut lines = vec![Line::by_prefix(
        "# Written by isold",
        "# Written by isold (realtime KVM options); removed by `isold restore`.".into(),
    )];
    for (m, opts) in by_module {
        let text = opts
            .iter()
            .map(|(p, v)| format!("{p}={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        lines.push(Line {
            key: Key::Options {
                module: m.clone(),
                params: opts.into_iter().map(|(p, _)| p).collect(),
            },
            text: format!("options {m} {text}"),
        });
    }
    let edit = FileEdit::Lines {
        lines,
        append: false,
    };
    p.out.push(Target::file("kvm", KVM_CONF, edit));
    Ok(())
}

/// A module parameter's value as sysfs shows it and as modprobe.d writes it, compared as
/// the kernel parses them (`Y`, `1` and `on` are one boolean).
fn same_param(shown: &str, written: &str) -> bool {
    fn norm(v: &str) -> String {
        match v.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" | "1" | "on" | "true" => "1".into(),
            "n" | "no" | "0" | "off" | "false" => "0".into(),
            other => other.to_string(),
        }
    }
    norm(shown) == norm(written)
}

/// The loaded modules' parameters that differ from the file: it waits for their next load.
fn waiting(root: &SysRoot, content: &str) -> Option<String> {
    let mut differ = Vec::new();
    for line in content.lines() {
        let mut w = line.split_whitespace();
        if w.next() != Some("options") {
            continue;
        }
        let Some(module) = w.next() else { continue };
        for opt in w {
            let Some((p, v)) = opt.split_once('=') else {
                continue;
            };
            let path = format!("/sys/module/{module}/parameters/{p}");
            if let Ok(Some(now)) = root.read_value_opt(&path) {
                if !same_param(&now, v) {
                    differ.push(format!("{module}.{p} is {now}, the file says {v}"));
                }
            }
        }
    }
    (!differ.is_empty()).then(|| {
        format!(
            "the kvm modules are loaded again (or a reboot): {}",
            differ.join(", ")
        )
    })
}
