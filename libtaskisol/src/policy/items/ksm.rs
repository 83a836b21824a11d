//! `ksm`: KSM's `run`.

use super::{Item, Machine, Planning, Setting, BASE};
use crate::error::Result;
use crate::policy::target::{attr, Want};

/// KSM's run file.
pub const KSM_RUN: &str = "/sys/kernel/mm/ksm/run";

/// The `ksm` item.
pub const ITEM: Item = Item {
    name: "ksm",
    doc: "KSM run: 0 stop, 1 run, 2 stop and unmerge",
    man: MAN,
    parse: |v| match v {
        "false" => Ok(None),
        "0" | "1" | "2" => Ok(Some(v.into())),
        _ => Err(format!("takes 0, 1, 2 or false, not {v:?}")),
    },
    plan,
    restores: |kind, key| (kind == "ksm" && key.is_empty()).then(|| KSM_RUN.into()),
    audit,
    ..BASE
};

const MAN: &str = r#"KSM
.IR run :
0, 1 or 2 (stop and unmerge: realtime\-virtual\-host and cpu\-partitioning)."#;

fn plan(p: &mut Planning<'_>) -> Result<()> {
    if let Some(v) = p.policy.value("ksm") {
        p.out.push(attr(
            "ksm",
            "ksm".into(),
            "KSM run".into(),
            KSM_RUN.into(),
            Want::Text(v.to_string()),
        ));
    }
    Ok(())
}

fn audit(m: &Machine<'_>, out: &mut Vec<Setting>) -> Result<()> {
    out.extend(Setting::judged(
        "ksm",
        m.root.read_value_opt(KSM_RUN)?,
        |v| v != "1",
        "ksmd merges pages, and its changes to mappings send TLB shootdowns",
        "isold item ksm",
    ));
    Ok(())
}
