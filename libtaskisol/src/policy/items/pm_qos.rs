//! `pm_qos`: the PM QoS resume latency limit of each isolated CPU, and of each CPU of a
//! container that asked for one (its claim's value wins on its CPUs).

use super::{Item, Planning, BASE};
use crate::error::Result;
use crate::policy::target::{attr, Want};
use crate::power;

/// The `pm_qos` item.
pub const ITEM: Item = Item {
    name: "pm_qos",
    doc: "resume latency limit of the isolated CPUs in microseconds",
    man: MAN,
    parse: |v| match v {
        "false" => Ok(None),
        _ => v
            .parse::<u32>()
            .ok()
            .filter(|n| *n <= i32::MAX as u32)
            .map(|n| Some(n.to_string()))
            .ok_or_else(|| format!("takes a latency in microseconds or false, not {v:?}")),
    },
    plan,
    restores: |kind, key| {
        (kind == "pm_qos")
            .then(|| super::cpu_of(key))
            .flatten()
            .map(power::resume_latency_path)
    },
    ..BASE
};

const MAN: &str = r#"The PM QoS resume latency limit of each isolated CPU, in microseconds (all presets: 3);
0 means no idle state at all (written as the kernel's
.BR n/a )."#;

fn plan(p: &mut Planning<'_>) -> Result<()> {
    let policy = p.policy;
    let stat = policy.static_isolated();
    let claimed = &policy.claimed_power;
    for cpu in stat.union(&claimed.keys().copied().collect()).iter() {
        let us = claimed
            .get(&cpu)
            .and_then(|w| w.pm_qos.clone())
            .or_else(|| {
                policy
                    .pm_qos()
                    .filter(|_| stat.contains(cpu))
                    .map(power::resume_latency_text)
            });
        if let Some(text) = us {
            p.out.push(attr(
                "pm_qos",
                format!("pm_qos:cpu{cpu}"),
                format!("CPU {cpu} PM QoS resume latency limit (us; 0: none)"),
                power::resume_latency_path(cpu),
                Want::Text(text),
            ));
        }
    }
    Ok(())
}
