//! `irq_affinity`: every IRQ under /proc/irq (the workload's own left alone) and
//! `default_smp_affinity`, off the isolated CPUs.

use super::{Item, Planning, BASE};
use crate::error::Result;
use crate::irq;
use crate::policy::config::allowed_irq;
use crate::policy::target::{attr, known, narrowed, Op, Target, Want};
use crate::policy::Status;

/// `default_smp_affinity`.
pub const DEFAULT_SMP_AFFINITY: &str = "/proc/irq/default_smp_affinity";

/// The `irq_affinity` item.
pub const ITEM: Item = Item {
    name: "irq_affinity",
    doc: "every IRQ and default_smp_affinity off the isolated CPUs",
    man: MAN,
    plan,
    restores: |kind, n| match (kind, n) {
        ("irq", "default") => Some(DEFAULT_SMP_AFFINITY.into()),
        ("irq", n) => n
            .parse::<u32>()
            .ok()
            .map(|n| irq::irq_file(n, "smp_affinity_list")),
        _ => None,
    },
    ..BASE
};

const MAN: &str = r#"Every IRQ under
.I /proc/irq
and
.IR default_smp_affinity :
the current CPUs minus the isolated ones, or every housekeeping CPU when none is left (all
presets); but the workload's IRQs of
.BR [irqs] ,
which stay where they are.
An IRQ already off the isolated CPUs is right wherever it is among the others (irqbalance
may move it there)."#;

fn plan(p: &mut Planning<'_>) -> Result<()> {
    if !p.policy.on("irq_affinity") {
        return Ok(());
    }
    let hk = &p.policy.housekeeping;
    for info in irq::list(p.root)? {
        let name = if info.action.is_empty() {
            String::from("no handler")
        } else {
            info.action.clone()
        };
        let (id, label) = (
            format!("irq:{}", info.irq),
            format!("IRQ {} ({name})", info.irq),
        );
        if let Some(a) = allowed_irq(&p.policy.config.irq_allow, info.irq, &info.actions) {
            // The workload's own IRQ (a NIC queue that feeds its thread): never written, so
            // never recorded, so never restored either.
            p.out.push(known(
                "irq_affinity",
                id,
                label,
                Status::LeftAlone {
                    reason: format!("the workload's IRQ ([irqs] allow {a})"),
                },
            ));
            continue;
        }
        p.out.push(Target {
            item: "irq_affinity",
            id,
            label,
            op: Op::Irq {
                irq: info.irq,
                want: narrowed(&info.affinity, hk),
            },
        });
    }
    let def = irq::default_affinity(p.root)?;
    p.out.push(attr(
        "irq_affinity",
        "irq:default".into(),
        "default_smp_affinity".into(),
        DEFAULT_SMP_AFFINITY.into(),
        Want::Mask(narrowed(&def, hk)),
    ));
    Ok(())
}
