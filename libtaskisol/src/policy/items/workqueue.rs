//! `workqueue`: every per-workqueue cpumask, then the global unbound one, on the
//! housekeeping CPUs (restore widens the global mask first: the kernel clips a workqueue's
//! mask to it).

use super::{Item, Planning, BASE};
use crate::error::Result;
use crate::policy::target::{attr, Want};
use crate::workqueue;

/// The `workqueue` item.
pub const ITEM: Item = Item {
    name: "workqueue",
    doc: "unbound workqueue cpumasks on the housekeeping CPUs",
    man: MAN,
    plan,
    restores: |kind, q| match (kind, q) {
        ("workqueue", "") => Some(workqueue::unbound_cpumask_path()),
        ("workqueue", q) if !q.contains('/') && q != "." && q != ".." => {
            Some(workqueue::queue_cpumask_path(q))
        }
        _ => None,
    },
    ..BASE
};

const MAN: &str = r#"The unbound workqueue cpumask and every per\-workqueue cpumask = the housekeeping CPUs (all
presets)."#;

fn plan(p: &mut Planning<'_>) -> Result<()> {
    if !p.policy.on("workqueue") {
        return Ok(());
    }
    let hk = &p.policy.housekeeping;
    for q in workqueue::queues_with_cpumask(p.root)? {
        p.out.push(attr(
            "workqueue",
            format!("workqueue:{q}"),
            format!("workqueue {q} cpumask"),
            workqueue::queue_cpumask_path(&q),
            Want::Mask(hk.clone()),
        ));
    }
    p.out.push(attr(
        "workqueue",
        "workqueue".into(),
        "unbound workqueue cpumask".into(),
        workqueue::unbound_cpumask_path(),
        Want::Mask(hk.clone()),
    ));
    Ok(())
}
