//! What a plan is made of: [`Target`]s, each an [`Op`] with the value it wants ([`Want`]).
//! The types every item's plan ([`super::items`]) builds and the engine writes; below both.

use super::Status;
use crate::cpuset::CpuSet;
use crate::sched::SchedPolicy;
use crate::tasks;

/// How an attribute's content is compared with the wanted value, and written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Want {
    /// The same whitespace-separated words (sysctls, most sysfs files).
    Text(String),
    /// The bracketed choice of a file like `always [madvise] never`.
    Choice(String),
    /// A hex CPU mask file (workqueue cpumask, `default_smp_affinity`).
    Mask(CpuSet),
    /// The first field of a multi-field file (`kernel.printk`'s console log level).
    First(String),
}

impl Want {
    /// Whether `raw` (the file's content) is what is wanted.
    pub fn matches(&self, raw: &str) -> bool {
        match self {
            Want::Text(v) => raw.split_whitespace().eq(v.split_whitespace()),
            Want::Choice(v) => choice_of(raw) == v,
            Want::Mask(set) => CpuSet::parse_mask(raw.trim()).is_ok_and(|m| &m == set),
            Want::First(v) => raw.split_whitespace().next() == Some(v.as_str()),
        }
    }

    /// The text to write, given the current content.
    pub fn write_text(&self, raw: &str) -> String {
        match self {
            Want::Text(v) | Want::Choice(v) => v.clone(),
            Want::Mask(set) => set.to_mask_string(),
            Want::First(v) => {
                let mut words: Vec<&str> = raw.split_whitespace().collect();
                if words.is_empty() {
                    v.clone()
                } else {
                    words[0] = v;
                    words.join("\t")
                }
            }
        }
    }

    /// The text that writes `raw` back.
    pub fn restore_text(&self, raw: &str) -> String {
        match self {
            Want::Choice(_) => choice_of(raw).to_string(),
            _ => raw.trim_end_matches('\n').to_string(),
        }
    }

    /// The wanted value, for messages: a mask with its CPUs as a list beside it.
    pub fn shown(&self) -> String {
        match self {
            Want::Text(v) | Want::Choice(v) | Want::First(v) => v.clone(),
            Want::Mask(set) => format!("{} (CPUs {set})", set.to_mask_string()),
        }
    }

    /// A file's content `raw`, for messages, in the words of [`Want::shown`]: a mask file's
    /// with its CPUs as a list beside it.
    pub fn shown_current(&self, raw: &str) -> String {
        match self {
            Want::Mask(_) => mask_shown(raw),
            _ => raw.trim_end_matches('\n').to_string(),
        }
    }
}

/// A CPU mask file's content for people: the mask with its CPUs as a list beside it
/// (`f (CPUs 0-3)`, `0 (no CPU)`); as it is when it is no mask.
pub fn mask_shown(raw: &str) -> String {
    let text = raw.trim_end_matches('\n');
    match CpuSet::parse_mask(text.trim()) {
        Ok(set) if set.is_empty() => format!("{text} (no CPU)"),
        Ok(set) => format!("{text} (CPUs {set})"),
        Err(_) => text.to_string(),
    }
}

/// `always [madvise] never` -> `madvise`; a file without brackets is its own value.
pub fn choice_of(raw: &str) -> &str {
    raw.split_once('[')
        .and_then(|(_, rest)| rest.split_once(']'))
        .map_or(raw.trim(), |(choice, _)| choice)
}

/// What a target is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A kernel attribute file.
    Attr {
        /// Kernel path.
        path: String,
        /// The wanted content.
        want: Want,
    },
    /// An IRQ's `smp_affinity_list`.
    Irq {
        /// The IRQ.
        irq: u32,
        /// The wanted affinity.
        want: CpuSet,
    },
    /// A configuration file isold writes (below the root), shared with its administrator.
    File {
        /// Path.
        path: String,
        /// isold's lines in it, applied to the file as it is when it is written.
        edit: super::lines::FileEdit,
    },
    /// A thread's affinity.
    Affinity {
        /// The thread as planned.
        thread: tasks::Thread,
        /// The wanted affinity.
        want: CpuSet,
    },
    /// A kthread's scheduling policy.
    Sched {
        /// The thread as planned.
        thread: tasks::Thread,
        /// The wanted policy.
        want: SchedPolicy,
    },
    /// A network device's channel counts (rx, tx, other, combined; `net_queues`).
    Channels {
        /// The device.
        dev: String,
        /// Its ifindex when planned.
        ifindex: u32,
        /// The counts wanted.
        want: [u32; 4],
    },
    /// Nothing to write: the planner already knows the outcome (left alone, not movable).
    Known(Status),
    /// The cgroup v2 isolated partition and the workloads to move into it.
    Partition(super::partition::PartitionPlan),
}

/// One thing the policy sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The item (`[items]` name).
    pub item: &'static str,
    /// Stable id, the key of the state file.
    pub id: String,
    /// For people.
    pub label: String,
    /// What to do.
    pub op: Op,
}

impl Target {
    /// The target of a configuration file the policy writes, with isold's lines in it.
    pub fn file(item: &'static str, path: &str, edit: super::lines::FileEdit) -> Target {
        Target {
            item,
            id: format!("file:{path}"),
            label: path.to_string(),
            op: Op::File {
                path: path.to_string(),
                edit,
            },
        }
    }
}

pub(crate) fn attr(
    item: &'static str,
    id: String,
    label: String,
    path: String,
    want: Want,
) -> Target {
    Target {
        item,
        id,
        label,
        op: Op::Attr { path, want },
    }
}

pub(crate) fn known(item: &'static str, id: String, label: String, status: Status) -> Target {
    Target {
        item,
        id,
        label,
        op: Op::Known(status),
    }
}

/// Whether an IRQ's affinity keeps it off the isolated CPUs: then it is right wherever it is
/// among the others (the plan narrows it to the housekeeping CPUs it had; irqbalance, which
/// isold bans from the isolated CPUs, may move it among them without a fight).
pub fn irq_off(affinity: &CpuSet, isolated: &CpuSet) -> bool {
    !affinity.is_empty() && affinity.is_disjoint(isolated)
}

/// `current ∩ housekeeping`, or every housekeeping CPU when that is empty.
pub fn narrowed(current: &CpuSet, housekeeping: &CpuSet) -> CpuSet {
    let n = current.intersection(housekeeping);
    if n.is_empty() {
        housekeeping.clone()
    } else {
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mask is shown with its CPUs as a list, on both sides of a change; other values as
    /// they are, the file's newline dropped.
    #[test]
    fn a_mask_is_shown_with_its_cpus() {
        let m = Want::Mask("0-1".parse().unwrap());
        assert_eq!(m.shown(), "3 (CPUs 0-1)");
        assert_eq!(m.shown_current("f\n"), "f (CPUs 0-3)");
        assert_eq!(m.shown_current("0\n"), "0 (no CPU)");
        assert_eq!(m.shown_current("not a mask\n"), "not a mask");
        let t = Want::Text("10".into());
        assert_eq!(t.shown(), "10");
        assert_eq!(t.shown_current("f\n"), "f");
        assert_eq!(
            mask_shown("00000000,0000000f\n"),
            "00000000,0000000f (CPUs 0-3)"
        );
    }
}
