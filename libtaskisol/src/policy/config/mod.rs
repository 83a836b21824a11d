//! The configuration file (`/etc/isold/isold.toml`, see man/isold.toml.5), validated before
//! anything is touched. Every error names the file, the line and the reason; an unknown key
//! comes with the closest valid name.
//!
//! This module holds what a configuration is; `parse` reads the file (its `[items]`
//! from the items' declarations, [`super::items`]), and `tables` the tables of `isold
//! run`'s own settings (`[stalls]`, `[noise]`, `[metrics]`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use super::preset::Preset;
use crate::cpuset::CpuSet;
use crate::sched::SchedPolicy;

mod parse;
mod tables;

pub use crate::glob::glob_match;

/// A configuration error: file, line (1-based, where known) and reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The configuration file.
    pub file: PathBuf,
    /// The line of the offending key or value.
    pub line: Option<usize>,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.file.display(), l, self.reason),
            None => write!(f, "{}: {}", self.file.display(), self.reason),
        }
    }
}

/// Where the isolated CPUs come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuSpec {
    /// An explicit CPU list.
    List(CpuSet),
    /// The CPUs the running kernel isolates (isolcpus domain, nohz_full, isolated cpuset
    /// partitions).
    Auto,
}

/// An IRQ that belongs to the workload (`[irqs] allow`): left exactly as it is by apply,
/// verify, the daemon and restore, and shown by audit as the workload's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IrqAllow {
    /// By number.
    Number(u32),
    /// By a pattern over its action names as `/proc/interrupts` shows them (`eth1-rx-*`).
    Name(String),
}

impl IrqAllow {
    /// Whether IRQ `irq`, whose handlers are named `actions`, is this one.
    pub fn matches(&self, irq: u32, actions: &[String]) -> bool {
        match self {
            IrqAllow::Number(n) => *n == irq,
            IrqAllow::Name(p) => actions.iter().any(|a| glob_match(p, a)),
        }
    }
}

impl fmt::Display for IrqAllow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IrqAllow::Number(n) => write!(f, "{n}"),
            IrqAllow::Name(p) => write!(f, "{p:?}"),
        }
    }
}

/// The entry of `allow` that IRQ `irq` (handlers `actions`) matches, if any.
pub fn allowed_irq<'a>(
    allow: &'a [IrqAllow],
    irq: u32,
    actions: &[String],
) -> Option<&'a IrqAllow> {
    allow.iter().find(|a| a.matches(irq, actions))
}

/// What `isold run` does with the applied values when it stops (`on_stop`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnStop {
    /// Leave every value as applied: stopping the service is not undoing it (`isold restore`
    /// is). A restart, a crash or a shutdown never opens a window where the workload's CPUs
    /// are disturbed.
    #[default]
    Keep,
    /// Restore everything on a plain stop (`systemctl stop`), never while the system shuts
    /// down or the service restarts.
    Restore,
}

impl OnStop {
    /// The name in the configuration file.
    pub fn name(self) -> &'static str {
        match self {
            OnStop::Keep => "keep",
            OnStop::Restore => "restore",
        }
    }
}

/// The default path of the cgroup partition item.
pub const DEFAULT_PARTITION: &str = "/sys/fs/cgroup/isolated";

/// A parsed, validated configuration: the preset's settings with the file's overrides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The file it came from (for messages).
    pub file: PathBuf,
    /// The line of `isolated_cpus`.
    pub isolated_line: Option<usize>,
    /// `isolated_cpus`.
    pub isolated: CpuSpec,
    /// `preset`.
    pub preset: Preset,
    /// The line of `preset`, when the file names one (else the default).
    pub preset_line: Option<usize>,
    /// `on_stop`.
    pub on_stop: OnStop,
    /// sysctl name and value, in preset order then file order.
    pub sysctl: Vec<(String, String)>,
    /// The line of each sysctl the file names (the others come from the preset).
    pub sysctl_lines: std::collections::BTreeMap<String, usize>,
    /// The line of `[items] printk`, when the file sets it.
    pub printk_line: Option<usize>,
    /// The value of each item that is on, by name, as its declaration parsed it
    /// ([`Config::value`]); the tables of `sysctl`, `kthread_priority` and `kvm` are below.
    pub values: BTreeMap<String, String>,
    /// Thread-name patterns of tasks left where they are.
    pub allow_comm: Vec<String>,
    /// cgroup v2 paths whose tasks are left where they are.
    pub allow_cgroup: Vec<String>,
    /// IRQs that belong to the workload (`[irqs] allow`).
    pub irq_allow: Vec<IrqAllow>,
    /// kthread name pattern and policy.
    pub kthread_priority: Vec<(String, SchedPolicy)>,
    /// KVM module options: module, parameter, value.
    pub kvm: Vec<(String, String, String)>,
    /// `[metrics]`: what `isold run` publishes; `None` without the table.
    pub metrics: Option<MetricsConfig>,
    /// `[containers]`: what containers' claims may take; `None` without the table.
    pub containers: Option<ContainersConfig>,
    /// `[stalls]`: the stall guard of `isold run` (on unless turned off).
    pub stalls: StallsConfig,
    /// `[noise]`: the noise ledger of `isold run` (on unless turned off).
    pub noise: NoiseConfig,
    /// `[net]`: which network devices the `net_queues` and `rps` items take.
    pub net: NetConfig,
}

/// `[net]` of the configuration: the network devices of the `net_queues` and `rps` items.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetConfig {
    /// `channels`: the most channels a device keeps (default: the housekeeping CPUs).
    pub channels: Option<u32>,
    /// `rps_physical`: name patterns of devices that are not virtual whose rx queues the
    /// `rps` item takes too (by default it takes virtual devices only).
    pub rps_physical: Vec<String>,
    /// `ignore`: name patterns of devices both items leave alone.
    pub ignore: Vec<String>,
}

impl NetConfig {
    /// Whether device `name` is left alone (`ignore`).
    pub fn ignores(&self, name: &str) -> bool {
        self.ignore.iter().any(|p| glob_match(p, name))
    }
}

const NET_KEYS: &[&str] = &["channels", "rps_physical", "ignore"];

/// `[stalls]` of the configuration: how `isold run` finds threads starved on the isolated
/// CPUs (runnable there, not run for `threshold`) and what it lends them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StallsConfig {
    /// `enabled`: the guard runs (default true).
    pub enabled: bool,
    /// `threshold`: how long a runnable thread may wait before it is lent a slice.
    pub threshold: std::time::Duration,
    /// `runtime_us` and `period_us`: the SCHED_DEADLINE slice lent, in microseconds.
    pub runtime_us: u64,
    /// See `runtime_us`.
    pub period_us: u64,
    /// `lend_for`: how long one loan lasts at most before the thread's own policy is back.
    pub lend_for: std::time::Duration,
    /// `interval`: time between two looks at the isolated CPUs.
    pub interval: std::time::Duration,
    /// `ignore_cpus`: CPUs the guard leaves alone.
    pub ignore_cpus: CpuSet,
    /// `ignore_threads`: thread name patterns the guard never lends to.
    pub ignore_threads: Vec<String>,
}

impl Default for StallsConfig {
    fn default() -> StallsConfig {
        StallsConfig {
            enabled: true,
            threshold: std::time::Duration::from_secs(2),
            runtime_us: 100,
            period_us: 500_000,
            lend_for: std::time::Duration::from_secs(3),
            interval: std::time::Duration::from_millis(250),
            ignore_cpus: CpuSet::new(),
            ignore_threads: Vec::new(),
        }
    }
}

/// A tick at HZ=250 (Debian's kernels), in microseconds: how long a lent thread may overrun
/// its runtime before the kernel throttles it.
pub const TICK_US: u64 = 4000;

const STALLS_KEYS: &[&str] = &[
    "enabled",
    "threshold",
    "runtime_us",
    "period_us",
    "lend_for",
    "interval",
    "ignore_cpus",
    "ignore_threads",
];

/// `[noise]` of the configuration: the noise ledger of `isold run`, which times and names
/// every interruption of the isolated CPUs (libtaskisol::noise).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoiseConfig {
    /// `enabled`: the ledger records (default true).
    pub enabled: bool,
    /// `interval`: how often the kernel's buffers are read.
    pub interval: std::time::Duration,
    /// `sources`: the sources per CPU the metrics name, by time taken; the rest are
    /// summed as `other`.
    pub sources: usize,
    /// `ignore_cpus`: CPUs the ledger does not record.
    pub ignore_cpus: CpuSet,
}

impl Default for NoiseConfig {
    fn default() -> NoiseConfig {
        NoiseConfig {
            enabled: true,
            interval: std::time::Duration::from_secs(1),
            sources: 12,
            ignore_cpus: CpuSet::new(),
        }
    }
}

const NOISE_KEYS: &[&str] = &["enabled", "interval", "sources", "ignore_cpus"];

/// `[containers]` of the configuration: the administrator's rule for containers' claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainersConfig {
    /// `cpus`: the only CPUs, beyond `isolated_cpus`, that a container's claim may isolate
    /// (on Kubernetes: the CPUs the kubelet hands out exclusively).
    pub cpus: CpuSet,
    /// The line of `cpus`.
    pub cpus_line: Option<usize>,
    /// `nri`: `isold run` is an NRI plugin of the runtime's socket (containerd 2.x, CRI-O).
    pub nri: bool,
    /// `nri_socket`: the runtime's NRI socket.
    pub nri_socket: PathBuf,
}

impl Default for ContainersConfig {
    fn default() -> ContainersConfig {
        ContainersConfig {
            cpus: CpuSet::new(),
            cpus_line: None,
            nri: false,
            nri_socket: PathBuf::from(NRI_SOCKET),
        }
    }
}

/// The default `[containers] nri_socket`: containerd's and CRI-O's.
pub const NRI_SOCKET: &str = "/var/run/nri/nri.sock";

const CONTAINERS_KEYS: &[&str] = &["cpus", "nri", "nri_socket"];

/// `[metrics]` of the configuration: where `isold run` publishes its metrics (Prometheus's
/// text format), and how often it samples the isolated CPUs' health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsConfig {
    /// `listen`: the loopback address of the HTTP listener that serves `/metrics`.
    pub listen: Option<std::net::SocketAddr>,
    /// `textfile`: a `.prom` file for node_exporter's textfile collector, replaced by rename.
    pub textfile: Option<PathBuf>,
    /// `interval`: time between two health samples (and textfile writes).
    pub interval: std::time::Duration,
}

/// The default `[metrics] interval`.
pub const METRICS_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

const METRICS_KEYS: &[&str] = &["listen", "textfile", "interval"];

impl Config {
    /// The value of item `item` when it is on (its `[items]` value, or the preset's), as the
    /// item's declaration parsed it; `None` when it is off.
    pub fn value(&self, item: &str) -> Option<&str> {
        self.values.get(item).map(String::as_str)
    }

    /// Whether item `item` is on.
    pub fn on(&self, item: &str) -> bool {
        self.values.contains_key(item)
    }

    /// An error at `line` of the file.
    pub fn error_at(&self, line: Option<usize>, reason: String) -> ConfigError {
        ConfigError {
            file: self.file.clone(),
            line,
            reason,
        }
    }

    /// The error for the `isolated_cpus` line.
    pub fn isolated_error(&self, reason: String) -> ConfigError {
        ConfigError {
            file: self.file.clone(),
            line: self.isolated_line,
            reason,
        }
    }
}

/// The 1-based line of a span of `text`.
impl Config {
    /// `FILE:LINE` of `preset`, when the file names it (`None`: the default).
    pub fn preset_at(&self) -> Option<String> {
        self.preset_line
            .map(|l| format!("{}:{l}", self.file.display()))
    }
}

fn line_of(text: &str, span: Option<std::ops::Range<usize>>) -> Option<usize> {
    span.map(|r| text[..r.start.min(text.len())].matches('\n').count() + 1)
}

/// The valid word closest to `word`, if one is close enough to be a typo of it.
pub(crate) fn closest<'a>(word: &str, valid: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    valid
        .into_iter()
        .map(|v| (strsim::levenshtein(word, v), v))
        .filter(|(d, v)| *d <= (v.len() / 3).max(2))
        .min()
        .map(|(_, v)| v)
}

/// An unknown word, with the closest valid one or the list of them.
fn unknown(kind: &str, word: &str, valid: &[&str]) -> String {
    match closest(word, valid.iter().copied()) {
        Some(c) => format!("unknown {kind} '{word}' (did you mean '{c}'?)"),
        None => format!("unknown {kind} '{word}' (valid: {})", valid.join(", ")),
    }
}

#[cfg(test)]
mod tests;
