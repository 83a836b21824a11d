//! `cpufreq`: the cpufreq governor of each isolated CPU, and of each CPU of a container that
//! asked for one (its claim's governor wins on its CPUs).

use super::{Item, Planning, BASE};
use crate::error::Result;
use crate::policy::target::{attr, known, Want};
use crate::policy::Status;
use crate::power;

/// The `cpufreq` item.
pub const ITEM: Item = Item {
    name: "cpufreq",
    doc: "cpufreq governor of the isolated CPUs",
    man: MAN,
    parse: |v| match v {
        "false" => Ok(None),
        _ if !v.is_empty() && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') => {
            Ok(Some(v.into()))
        }
        _ => Err(format!("takes a governor name or false, not {v:?}")),
    },
    plan,
    restores: |kind, key| {
        (kind == "cpufreq")
            .then(|| super::cpu_of(key))
            .flatten()
            .map(power::governor_path)
    },
    ..BASE
};

const MAN: &str = r#"The cpufreq governor of each isolated CPU (all presets: performance).
A governor the CPU does not offer is reported as not changeable."#;

fn plan(p: &mut Planning<'_>) -> Result<()> {
    let policy = p.policy;
    let stat = policy.static_isolated();
    let claimed = &policy.claimed_power;
    for cpu in stat.union(&claimed.keys().copied().collect()).iter() {
        let gov = claimed
            .get(&cpu)
            .and_then(|w| w.governor.clone())
            .or_else(|| {
                policy
                    .value("cpufreq")
                    .filter(|_| stat.contains(cpu))
                    .map(str::to_string)
            });
        let Some(gov) = gov else { continue };
        let id = format!("cpufreq:cpu{cpu}");
        let label = format!("CPU {cpu} cpufreq governor");
        match power::available_governors(p.root, cpu)? {
            Some(av) if !av.contains(&gov) => p.out.push(known(
                "cpufreq",
                id,
                label,
                Status::NotChangeable {
                    reason: format!("governor {gov} not offered (available: {})", av.join(" ")),
                },
            )),
            _ => p.out.push(attr(
                "cpufreq",
                id,
                label,
                power::governor_path(cpu),
                Want::Text(gov),
            )),
        }
    }
    Ok(())
}
