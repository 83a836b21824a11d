//! `machinecheck`: no corrected-error polling (`ignore_ce` of every machinecheck device).

use super::{Item, Planning, BASE};
use crate::error::Result;
use crate::policy::target::{attr, Want};

/// The machinecheck devices.
pub const MACHINECHECK_DIR: &str = "/sys/devices/system/machinecheck";

/// The `machinecheck` item.
pub const ITEM: Item = Item {
    name: "machinecheck",
    doc: "machinecheck ignore_ce = 1 (no corrected-error polling)",
    man: MAN,
    plan,
    restores: |kind, n| {
        (kind == "machinecheck"
            && n.strip_prefix("machinecheck")
                .is_some_and(|d| d.parse::<u32>().is_ok()))
        .then(|| format!("{MACHINECHECK_DIR}/{n}/ignore_ce"))
    },
    ..BASE
};

const MAN: &str = r#".I ignore_ce
= 1 on every machinecheck device: no corrected\-error polling (all but cpu\-partitioning)."#;

fn plan(p: &mut Planning<'_>) -> Result<()> {
    if !p.policy.on("machinecheck") {
        return Ok(());
    }
    let dir = MACHINECHECK_DIR;
    let mut names = if p.root.exists(dir) {
        p.root.read_dir_names(dir)?
    } else {
        Vec::new()
    };
    names.sort();
    for n in names.iter().filter(|n| n.starts_with("machinecheck")) {
        p.out.push(attr(
            "machinecheck",
            format!("machinecheck:{n}"),
            format!("{n}/ignore_ce"),
            format!("{dir}/{n}/ignore_ce"),
            Want::Text("1".into()),
        ));
    }
    Ok(())
}
