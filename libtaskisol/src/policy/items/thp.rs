//! `thp`: transparent hugepages' `enabled`.

use super::{Item, Machine, Planning, Setting, BASE};
use crate::error::Result;
use crate::policy::target::{attr, choice_of, Want};

/// Transparent hugepages' mode file.
pub const THP_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

/// The `thp` item.
pub const ITEM: Item = Item {
    name: "thp",
    doc: "transparent hugepages: never, madvise or always",
    man: MAN,
    parse: |v| match v {
        "false" => Ok(None),
        "never" | "madvise" | "always" => Ok(Some(v.into())),
        _ => Err(format!("takes never, madvise, always or false, not {v:?}")),
    },
    plan,
    restores: |kind, key| (kind == "thp" && key.is_empty()).then(|| THP_ENABLED.into()),
    audit,
    ..BASE
};

const MAN: &str = r#"Transparent huge pages:
.BR never " (all presets), " madvise " or " always .
Nothing to do on kernels without THP (Debian's PREEMPT_RT kernels)."#;

fn plan(p: &mut Planning<'_>) -> Result<()> {
    if let Some(v) = p.policy.value("thp") {
        p.out.push(attr(
            "thp",
            "thp".into(),
            "transparent_hugepage/enabled".into(),
            THP_ENABLED.into(),
            Want::Choice(v.to_string()),
        ));
    }
    Ok(())
}

fn audit(m: &Machine<'_>, out: &mut Vec<Setting>) -> Result<()> {
    let thp = m
        .root
        .read_value_opt(THP_ENABLED)?
        .map(|v| choice_of(&v).to_string());
    out.extend(Setting::judged(
        "transparent_hugepage",
        thp,
        |v| v != "always",
        "khugepaged scans and collapses pages of every process, also on isolated CPUs",
        "isold item thp (never)",
    ));
    Ok(())
}
