//! The periodic check of a daemon, reduced to one read per value.
//!
//! Sysctls, sysfs values, IRQ affinities and the policy's files have no change event. A
//! [`Watch`] keeps, for every such target of a policy, the file and what it must hold, plus the
//! IRQ numbers under `/proc/irq`. [`Watch::drifted`] reads each file once and compares: no
//! plan, no `/proc/interrupts`, no state file, no lock. Only when something differs (or an IRQ
//! came or went) does the caller run the full verify and apply, then build a new watch.

use std::collections::BTreeSet;

use super::plan::{self, Op, Want};
use super::state::State;
use super::Policy;
use crate::cpuset::CpuSet;
use crate::error::Result;
use crate::irq;
use crate::sysroot::SysRoot;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Check {
    /// An attribute compared as the plan compares it.
    Want(Want),
    /// An IRQ's `smp_affinity_list`.
    Cpus(CpuSet),
    /// A whole file the policy owns.
    Content(String),
}

/// What a policy's event-less values must look like.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Watch {
    items: Vec<(String, Check)>,
    irqs: BTreeSet<u32>,
}

fn irq_numbers(root: &SysRoot) -> BTreeSet<u32> {
    root.read_dir_numbers::<u32>("/proc/irq")
        .unwrap_or_default()
        .into_iter()
        .collect()
}

impl Watch {
    /// The watch of `policy` (its thread and partition items are not watched here). Targets
    /// the state file at `state_path` records as not changeable are left out: they differ
    /// for good.
    pub fn of(root: &SysRoot, policy: &Policy, state_path: &std::path::Path) -> Result<Watch> {
        let unchangeable = State::unchangeable_of(state_path)?;
        let mut items = Vec::new();
        for t in plan::plan(policy, root)? {
            if unchangeable.contains_key(&t.id) {
                continue;
            }
            match t.op {
                // A file this kernel lacks (a sysctl of another configuration) is not
                // watched: apply reported it not present.
                Op::Attr { path, want } if root.exists(&path) => {
                    items.push((path, Check::Want(want)))
                }
                Op::Irq { irq: n, want } => {
                    items.push((irq::irq_file(n, "smp_affinity_list"), Check::Cpus(want)))
                }
                Op::File { path, content } => items.push((path, Check::Content(content))),
                _ => {}
            }
        }
        Ok(Watch {
            items,
            irqs: irq_numbers(root),
        })
    }

    /// How many files a check reads.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether it watches nothing.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The first watched file that no longer holds what it must (or cannot be read), or
    /// `/proc/irq` when IRQs came or went.
    pub fn drifted(&self, root: &SysRoot) -> Option<String> {
        if irq_numbers(root) != self.irqs {
            return Some("/proc/irq".into());
        }
        self.items
            .iter()
            .find(|(path, check)| {
                let ok = match (root.read_to_string(path.as_str()), check) {
                    (Ok(raw), Check::Want(w)) => w.matches(&raw),
                    (Ok(raw), Check::Cpus(want)) => {
                        CpuSet::parse_list(raw.trim()).is_ok_and(|c| &c == want)
                    }
                    (Ok(raw), Check::Content(c)) => &raw == c,
                    (Err(_), _) => false,
                };
                !ok
            })
            .map(|(p, _)| p.clone())
    }
}
