//! The isolation policy engine behind isold: a configuration ([`config`]) resolved against
//! the running kernel into a [`Policy`], planned into concrete [`Target`]s (one per file,
//! IRQ or thread), and applied, verified or restored by [`engine`].
//!
//! Every original value is persisted in a crash-safe state file ([`state`]) before it is
//! first overwritten: values of the running kernel in one that dies with the boot, files on
//! disk in one that survives it. Restore puts them back byte for byte, also after a crash or
//! `kill -9` in the middle of apply, and after any number of reboots for files (of which it
//! undoes isold's own lines only). A task is restored only if it is still the same task (pid
//! and start time). Restore trusts nothing in a state file it could not have written
//! ([`state::Entry::check`]).
//!
//! ```no_run
//! use libtaskisol::policy::{config::Config, engine, state::StateFiles, Policy};
//! use libtaskisol::SysRoot;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let root = SysRoot::host();
//! let config = Config::load("/etc/isold/isold.toml".as_ref())?;
//! let policy = Policy::resolve(config, &root)?;
//! let report = engine::apply(&root, &policy, &StateFiles::default_for(&root))?;
//! println!("{}", report.summary());
//! # Ok(())
//! # }
//! ```

pub mod bootargs;
mod channels;
mod common;
pub mod config;
pub mod engine;
pub mod fastpath;
pub mod files;
pub mod grub;
pub mod items;
pub mod lines;
pub mod partition;
pub mod paths;
pub mod plan;
pub mod preset;
mod restore;
pub mod salvage;
pub mod state;
pub mod target;
/// The durable writes: [`state::durable`], where the state room keeps them.
pub use state::durable;
pub mod threads;
pub mod watch;

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::cpuset::CpuSet;
use crate::sysroot::SysRoot;
use crate::topology::{self, IsolatedCpus};
use config::{Config, ConfigError, CpuSpec};

pub use plan::{Op, Target, Want};

/// A configuration resolved against the kernel: concrete CPU sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The configuration.
    pub config: Config,
    /// Online CPUs.
    pub online: CpuSet,
    /// The isolated CPUs.
    pub isolated: CpuSet,
    /// Online CPUs that are not isolated: where everything else runs.
    pub housekeeping: CpuSet,
    /// The CPUs isolated for containers' claims only: a part of `isolated` the configuration
    /// does not isolate, quiet while their containers run ([`Policy::with_claimed`]).
    pub claimed: CpuSet,
    /// The power settings containers' claims want, per CPU (their values win on their CPUs).
    pub claimed_power: BTreeMap<usize, PowerWant>,
}

/// What containers' claims want of one CPU's power settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PowerWant {
    /// PM QoS resume latency text.
    pub pm_qos: Option<String>,
    /// cpufreq governor.
    pub governor: Option<String>,
}

/// Why a configuration cannot be applied to this machine.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The file is wrong for this machine (CPUs not online, none left for housekeeping).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Reading the kernel's state failed.
    #[error(transparent)]
    Kernel(#[from] crate::Error),
}

impl Policy {
    /// Resolve `config` against the kernel under `root`: `auto` becomes the CPUs the kernel
    /// isolates; the CPUs must be online and leave at least one housekeeping CPU.
    pub fn resolve(config: Config, root: &SysRoot) -> std::result::Result<Policy, ResolveError> {
        let online = topology::online_cpus(root)?;
        let isolated = match &config.isolated {
            CpuSpec::List(set) => {
                let offline = set.difference(&online);
                if !offline.is_empty() {
                    return Err(config
                        .isolated_error(format!(
                            "isolated_cpus: CPUs {offline} are not online (online: {online})"
                        ))
                        .into());
                }
                set.clone()
            }
            CpuSpec::Auto => {
                let all = IsolatedCpus::discover(root)?.all().intersection(&online);
                if all.is_empty() {
                    return Err(config
                        .isolated_error(
                            "isolated_cpus = \"auto\", but the kernel isolates no CPU (no isolcpus, nohz_full or isolated cpuset partition)"
                                .into(),
                        )
                        .into());
                }
                all
            }
        };
        // A sysctl the file names that this kernel lacks is a mistake to say now (a preset's
        // may be absent on some kernels: reported "not present" by apply).
        for (name, _) in &config.sysctl {
            let Some(&line) = config.sysctl_lines.get(name) else {
                continue;
            };
            let path = crate::sysctl::path_of(name)?;
            if !root.exists(&path) {
                let hint = closest_sysctl(root, name)
                    .map(|c| format!(" (did you mean '{c}'?)"))
                    .unwrap_or_default();
                return Err(config
                    .error_at(
                        Some(line),
                        format!("sysctl {name}: this kernel has no {path}{hint}"),
                    )
                    .into());
            }
        }
        let housekeeping = online.difference(&isolated);
        if housekeeping.is_empty() {
            return Err(config
                .isolated_error(format!(
                    "isolated_cpus: no housekeeping CPU left: {isolated} covers every online CPU"
                ))
                .into());
        }
        if let Some(cc) = &config.containers {
            // Claims of every CPU the table names must still leave housekeeping CPUs: the
            // kubelet hands them all out exclusively at once.
            let left = housekeeping.difference(&cc.cpus);
            if left.is_empty() {
                return Err(config
                    .error_at(
                        cc.cpus_line,
                        format!(
                            "containers.cpus: no housekeeping CPU left: {} and isolated_cpus {isolated} cover every online CPU ({online})",
                            cc.cpus
                        ),
                    )
                    .into());
            }
        }
        Ok(Policy {
            config,
            online,
            isolated,
            housekeeping,
            claimed: CpuSet::new(),
            claimed_power: BTreeMap::new(),
        })
    }

    /// The CPUs the configuration isolates, without the containers' claims: the partition,
    /// irqbalance's banned CPUs and the boot-time files follow these only.
    pub fn static_isolated(&self) -> CpuSet {
        self.isolated.difference(&self.claimed)
    }

    /// This policy with only the items named in `items` (the rest off): what a change that
    /// touches only those applies.
    pub fn only(&self, items: &[&str]) -> Policy {
        Policy {
            config: self.config.only(items),
            ..self.clone()
        }
    }

    /// This policy with the items named in `items` off (see [`Config::without`]).
    pub fn without(&self, items: &[&str]) -> Policy {
        Policy {
            config: self.config.without(items),
            ..self.clone()
        }
    }

    /// Whether the `tasks` item is on: wide tasks are narrowed off the isolated CPUs.
    pub fn narrows_tasks(&self) -> bool {
        self.config.on("tasks")
    }

    /// The configuration file it came from.
    pub fn config_file(&self) -> &std::path::Path {
        &self.config.file
    }

    /// Its preset.
    pub fn preset(&self) -> preset::Preset {
        self.config.preset
    }

    /// What stopping `isold run` does (`on_stop`).
    pub fn on_stop(&self) -> config::OnStop {
        self.config.on_stop
    }

    /// The stall guard's settings (`[stalls]`).
    pub fn stalls(&self) -> &config::StallsConfig {
        &self.config.stalls
    }

    /// The noise ledger's settings (`[noise]`).
    pub fn noise(&self) -> &config::NoiseConfig {
        &self.config.noise
    }

    /// What `isold run` publishes (`[metrics]`), when the table is there.
    pub fn metrics(&self) -> Option<&config::MetricsConfig> {
        self.config.metrics.as_ref()
    }

    /// What containers' claims may take (`[containers]`), when the table is there.
    pub fn containers(&self) -> Option<&config::ContainersConfig> {
        self.config.containers.as_ref()
    }

    /// The cgroup v2 isolated partition's directory, when the item is on.
    pub fn cgroup_partition(&self) -> Option<&str> {
        self.config.value("cgroup_partition")
    }

    /// The value of item `item` when it is on (see [`Config::value`]).
    pub fn value(&self, item: &str) -> Option<&str> {
        self.config.value(item)
    }

    /// Whether item `item` is on.
    pub fn on(&self, item: &str) -> bool {
        self.config.on(item)
    }

    /// The PM QoS resume latency limit of the isolated CPUs (microseconds), when the item is
    /// on.
    pub fn pm_qos(&self) -> Option<u32> {
        self.config.value("pm_qos").and_then(|v| v.parse().ok())
    }

    /// The kernel threads' scheduling rules: name pattern and policy.
    pub fn kthread_priority(&self) -> &[(String, crate::sched::SchedPolicy)] {
        &self.config.kthread_priority
    }

    /// This policy with containers' claims in force instead of the ones it had: the CPUs
    /// `wanted` join the configuration's for IRQs, tasks, kthreads and workqueues, and the
    /// CPUs of `power` get the power settings asked for ([`crate::claims::policy_with`]).
    /// Claims that would leave no housekeeping CPU are refused before
    /// ([`crate::claims::Claim::resolve`]); if one got here anyway, the claimed CPUs are
    /// left out.
    pub fn with_claimed(&self, wanted: &CpuSet, power: BTreeMap<usize, PowerWant>) -> Policy {
        let stat = self.static_isolated();
        let wanted = wanted.intersection(&self.online);
        let mut claimed = wanted.difference(&stat);
        if self.online.difference(&stat.union(&claimed)).is_empty() {
            claimed = CpuSet::new();
        }
        let isolated = stat.union(&claimed);
        Policy {
            config: self.config.clone(),
            online: self.online.clone(),
            housekeeping: self.online.difference(&isolated),
            isolated,
            claimed,
            claimed_power: power,
        }
    }
}

/// The existing sysctl closest to `name`: at the deepest directory of its path that exists,
/// the entry closest to the name's next part, with the rest of the name after it.
fn closest_sysctl(root: &SysRoot, name: &str) -> Option<String> {
    let sep = if name.contains('/') { '/' } else { '.' };
    let parts: Vec<&str> = name.split(sep).collect();
    let mut dir = String::from("/proc/sys");
    for (i, part) in parts.iter().enumerate() {
        let next = format!("{dir}/{part}");
        if root.exists(&next) {
            dir = next;
            continue;
        }
        let entries = root.read_dir_names(&dir).ok()?;
        let best = config::closest(part, entries.iter().map(String::as_str))?;
        let mut out: Vec<&str> = parts[..i].to_vec();
        out.push(best);
        out.extend(&parts[i + 1..]);
        return Some(out.join(&sep.to_string()));
    }
    None
}

/// The outcome for one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Status {
    /// The value was already what the policy wants.
    AlreadyRight,
    /// Written and read back.
    Changed {
        /// Before.
        from: String,
        /// After.
        to: String,
    },
    /// The IRQ's affinity is set; the interrupt controller moves it when it next fires
    /// (x86 IO-APIC): `effective_affinity_list` still names an isolated CPU.
    MovePending {
        /// The effective CPUs now.
        effective: String,
    },
    /// A file that holds what the policy wants, but is read only at boot or when a module
    /// or daemon starts: not in effect yet.
    Waiting {
        /// What it takes ("a reboot", "the kvm modules are loaded again").
        until: String,
    },
    /// This kernel has nothing to set (THP on PREEMPT_RT, no cpufreq in a VM).
    NotPresent {
        /// Why.
        reason: String,
    },
    /// The kernel refuses to change it (legacy or managed IRQs, per-CPU kthreads).
    NotChangeable {
        /// Why.
        reason: String,
    },
    /// Deliberately not touched (a workload on the isolated CPUs, an allow-listed task).
    LeftAlone {
        /// Why.
        reason: String,
    },
    /// A thread's affinity its owner set (libvirt's `<vcpupin>`, DPDK, `taskset -p`) while
    /// isold was changing it, or since isold narrowed it: left as set, never counted as a
    /// correction or put back by restore.
    OwnerSet {
        /// The thread's affinity now, its owner's.
        now: String,
        /// When isold found it so.
        reason: String,
    },
    /// verify: the live value differs from the policy.
    Deviates {
        /// The live value.
        current: String,
        /// What the policy wants.
        want: String,
    },
    /// The task exited (or its pid was reused) before it could be changed or restored.
    Gone,
    /// restore: put back to the original.
    Restored {
        /// The value written back.
        to: String,
    },
    /// The operation failed; the message names the file, value and errno.
    Failed {
        /// The error.
        error: String,
    },
}

impl Status {
    /// A short word for summaries.
    pub fn word(&self) -> &'static str {
        match self {
            Status::AlreadyRight => "already right",
            Status::Changed { .. } => "changed",
            Status::MovePending { .. } => "set, move pending",
            Status::Waiting { .. } => "set, waiting",
            Status::NotPresent { .. } => "not present",
            Status::NotChangeable { .. } => "not changeable",
            Status::LeftAlone { .. } => "left alone",
            Status::OwnerSet { .. } => "owner's pin",
            Status::Deviates { .. } => "deviates",
            Status::Gone => "gone",
            Status::Restored { .. } => "restored",
            Status::Failed { .. } => "failed",
        }
    }

    /// Whether this outcome is an error (apply/restore) or a deviation (verify).
    pub fn is_problem(&self) -> bool {
        matches!(self, Status::Failed { .. } | Status::Deviates { .. })
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Changed { from, to } => write!(f, "changed: {from} -> {to}"),
            Status::MovePending { effective } => {
                write!(
                    f,
                    "set, move pending (effective CPUs still {effective}: the kernel moves it when it next fires)"
                )
            }
            Status::Waiting { until } => write!(f, "set, takes effect after {until}"),
            Status::NotPresent { reason } => write!(f, "not present: {reason}"),
            Status::NotChangeable { reason } => write!(f, "not changeable: {reason}"),
            Status::LeftAlone { reason } => write!(f, "left alone: {reason}"),
            Status::OwnerSet { now, reason } => write!(f, "left on {now}: {reason}"),
            Status::Deviates { current, want } => write!(f, "is {current}, policy wants {want}"),
            Status::Restored { to } => write!(f, "restored: {to}"),
            Status::Failed { error } => write!(f, "failed: {error}"),
            other => f.write_str(other.word()),
        }
    }
}

/// One line of a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// The item (`sysctl`, `irq_affinity`, `tasks`, ...).
    pub item: String,
    /// The target's id.
    pub id: String,
    /// What it is.
    pub label: String,
    /// What happened.
    #[serde(flatten)]
    pub status: Status,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The result of apply, verify or restore.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The command (`apply`, `verify`, `restore`).
    pub command: String,
    /// Isolated CPUs (empty for restore without a state file).
    pub isolated: String,
    /// Housekeeping CPUs.
    pub housekeeping: String,
    /// Every target's outcome.
    pub outcomes: Vec<Outcome>,
    /// Remarks for the user (what needs a restart, which state file was used).
    pub notes: Vec<String>,
    /// Lines of the state journal that were no entries (cut short, changed), found by this
    /// command and moved to the set-aside file (a note says where).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub set_aside: usize,
    /// apply: the ids of the targets it wrote to (found different from the policy), whatever
    /// their outcome; a daemon counts these as corrections. Not part of the JSON.
    #[serde(skip)]
    pub written: Vec<String>,
}

impl Report {
    /// Outcomes with a problem (failures, deviations).
    pub fn problems(&self) -> impl Iterator<Item = &Outcome> {
        self.outcomes.iter().filter(|o| o.status.is_problem())
    }

    /// How many outcomes have the status word `word`.
    pub fn count(&self, word: &str) -> usize {
        self.outcomes
            .iter()
            .filter(|o| o.status.word() == word)
            .count()
    }

    /// Counts by status word, in a fixed order: "changed 12, already right 80, ...".
    pub fn summary(&self) -> String {
        const ORDER: [&str; 12] = [
            "changed",
            "restored",
            "already right",
            "set, move pending",
            "set, waiting",
            "left alone",
            "owner's pin",
            "not changeable",
            "not present",
            "gone",
            "deviates",
            "failed",
        ];
        let parts: Vec<String> = ORDER
            .iter()
            .filter_map(|w| match self.count(w) {
                0 => None,
                n => Some(format!("{n} {w}")),
            })
            .collect();
        if parts.is_empty() {
            "nothing to do".into()
        } else {
            parts.join(", ")
        }
    }
}

/// Read the value of a kernel attribute for display: trimmed.
pub(crate) fn shown(raw: &str) -> String {
    raw.trim_end_matches('\n').to_string()
}

/// Convenience: [`Policy::resolve`] of a file.
pub fn load(path: &std::path::Path, root: &SysRoot) -> std::result::Result<Policy, ResolveError> {
    Policy::resolve(Config::load(path)?, root)
}
