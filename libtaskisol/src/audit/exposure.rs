//! The IRQs that can reach each audited CPU: affinity, effective affinity, whose they are.

use super::*;

/// Every IRQ with its affinity, effective affinity and exposure record.
/// An IRQ as the audit sees it: where it may and does go, what it is, whose it is.
pub(super) struct SeenIrq {
    pub(super) affinity: CpuSet,
    pub(super) effective: Option<CpuSet>,
    pub(super) exposure: IrqExposure,
    /// The workload's (`[irqs] allow`).
    pub(super) workload: bool,
}

pub(super) fn irq_exposures(
    root: &SysRoot,
    known: &std::collections::BTreeMap<u32, bool>,
    allow: &[crate::policy::config::IrqAllow],
) -> Result<Vec<SeenIrq>> {
    let mut out = Vec::new();
    // An IRQ without a handler is never delivered: no device requested it.
    for i in irq::list(root)?
        .into_iter()
        .filter(|i| !i.action.is_empty())
    {
        let flags = root
            .read_to_string(format!("/sys/kernel/debug/irq/irqs/{}", i.irq))
            .ok();
        let managed = flags
            .as_deref()
            .map(|f| f.contains("IRQD_AFFINITY_MANAGED"));
        let movable = flags
            .as_deref()
            .map(|f| {
                !["IRQD_AFFINITY_MANAGED", "IRQD_PER_CPU", "IRQD_NO_BALANCING"]
                    .iter()
                    .any(|b| f.contains(b))
            })
            .or_else(|| known.get(&i.irq).copied());
        let allowed = crate::policy::config::allowed_irq(allow, i.irq, &i.actions);
        let fix = match (allowed, managed, movable) {
            (Some(a), _, _) => format!("none: the workload's IRQ ([irqs] allow {a})"),
            (_, Some(true), _) => {
                "boot argument isolcpus=managed_irq,... (the kernel places managed IRQs)".into()
            }
            (_, _, Some(false)) => "none at run time: the kernel does not let this IRQ move".into(),
            _ => "isold item irq_affinity".into(),
        };
        out.push(SeenIrq {
            affinity: i.affinity.clone(),
            effective: i.effective.clone(),
            exposure: IrqExposure {
                irq: i.irq,
                name: i.action.clone(),
                affinity: i.affinity.to_string(),
                effective: i.effective.as_ref().map(|e| e.to_string()),
                managed,
                movable,
                fix,
            },
            workload: allowed.is_some(),
        });
    }
    Ok(out)
}
