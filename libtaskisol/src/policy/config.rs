//! The configuration file (`/etc/isold/isold.toml`, see man/isold.toml.5), validated before
//! anything is touched. Every error names the file, the line and the reason; an unknown key
//! comes with the closest valid name.

use std::fmt;
use std::path::{Path, PathBuf};

use toml_edit::{ImDocument, Item, TableLike, Value};

use super::preset::{self, Preset};
use crate::cpuset::CpuSet;
use crate::sched::SchedPolicy;

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

/// The items of a policy, by their names in the file's `[items]` table.
pub const ITEMS: &[(&str, &str)] = &[
    ("sysctl", "the kernel parameters of [sysctl]"),
    ("thp", "transparent hugepages: never, madvise or always"),
    (
        "workqueue",
        "unbound workqueue cpumasks on the housekeeping CPUs",
    ),
    (
        "machinecheck",
        "machinecheck ignore_ce = 1 (no corrected-error polling)",
    ),
    ("ksm", "KSM run: 0 stop, 1 run, 2 stop and unmerge"),
    (
        "irq_affinity",
        "every IRQ and default_smp_affinity off the isolated CPUs",
    ),
    ("tasks", "movable tasks and kthreads off the isolated CPUs"),
    ("kthread_priority", "the [kthread_priority] rules"),
    (
        "pm_qos",
        "resume latency limit of the isolated CPUs in microseconds",
    ),
    ("cpufreq", "cpufreq governor of the isolated CPUs"),
    (
        "kvm",
        "the [kvm] module options, in /etc/modprobe.d/isold-kvm.conf",
    ),
    (
        "irqbalance",
        "IRQBALANCE_BANNED_CPULIST = the isolated CPUs",
    ),
    ("printk", "console log level (first field of kernel.printk)"),
    (
        "cgroup_partition",
        "a cgroup v2 isolated partition of the isolated CPUs",
    ),
    (
        "systemd_cpuaffinity",
        "systemd's CPUAffinity = the housekeeping CPUs",
    ),
];

const TOP_KEYS: &[&str] = &[
    "isolated_cpus",
    "preset",
    "on_stop",
    "items",
    "sysctl",
    "tasks",
    "kthread_priority",
    "kvm",
    "irqs",
    "metrics",
    "containers",
    "stalls",
    "noise",
];
const TASK_KEYS: &[&str] = &["allow_comm", "allow_cgroup"];
const IRQ_KEYS: &[&str] = &["allow"];

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
    /// `on_stop`.
    pub on_stop: OnStop,
    /// sysctl name and value, in preset order then file order.
    pub sysctl: Vec<(String, String)>,
    /// The line of each sysctl the file names (the others come from the preset).
    pub sysctl_lines: std::collections::BTreeMap<String, usize>,
    /// The line of `[items] printk`, when the file sets it.
    pub printk_line: Option<usize>,
    /// THP `enabled` value.
    pub thp: Option<String>,
    /// Unbound workqueue cpumasks.
    pub workqueue: bool,
    /// machinecheck ignore_ce.
    pub machinecheck: bool,
    /// KSM `run` value.
    pub ksm: Option<u8>,
    /// IRQ affinity.
    pub irq_affinity: bool,
    /// Task affinity.
    pub tasks: bool,
    /// Thread-name patterns of tasks left where they are.
    pub allow_comm: Vec<String>,
    /// cgroup v2 paths whose tasks are left where they are.
    pub allow_cgroup: Vec<String>,
    /// IRQs that belong to the workload (`[irqs] allow`).
    pub irq_allow: Vec<IrqAllow>,
    /// kthread name pattern and policy.
    pub kthread_priority: Vec<(String, SchedPolicy)>,
    /// PM QoS resume latency limit of isolated CPUs, microseconds.
    pub pm_qos: Option<u32>,
    /// cpufreq governor of isolated CPUs.
    pub cpufreq: Option<String>,
    /// KVM module options: module, parameter, value.
    pub kvm: Vec<(String, String, String)>,
    /// irqbalance banned CPUs.
    pub irqbalance: bool,
    /// Console log level.
    pub printk: Option<u8>,
    /// cgroup v2 isolated partition directory.
    pub cgroup_partition: Option<String>,
    /// systemd CPUAffinity drop-in.
    pub systemd_cpuaffinity: bool,
    /// `[metrics]`: what `isold run` publishes; `None` without the table.
    pub metrics: Option<MetricsConfig>,
    /// `[containers]`: what containers' claims may take; `None` without the table.
    pub containers: Option<ContainersConfig>,
    /// `[stalls]`: the stall guard of `isold run` (on unless turned off).
    pub stalls: StallsConfig,
    /// `[noise]`: the noise ledger of `isold run` (on unless turned off).
    pub noise: NoiseConfig,
}

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

impl StallsConfig {
    /// One `key = value` of the table.
    fn set(&mut self, key: &str, v: &Value) -> Result<(), String> {
        let secs = |v: &Value, lo: f64, hi: f64| -> Result<std::time::Duration, String> {
            let s = match v {
                Value::Integer(n) => *n.value() as f64,
                Value::Float(f) => *f.value(),
                _ => return Err(format!("stalls.{key} must be a number of seconds")),
            };
            if !(lo..=hi).contains(&s) {
                return Err(format!(
                    "stalls.{key}: {s} is not a number of seconds from {lo} to {hi}"
                ));
            }
            Ok(std::time::Duration::from_secs_f64(s))
        };
        let micros = |v: &Value, lo: i64, hi: i64| -> Result<u64, String> {
            match v {
                Value::Integer(n) if (lo..=hi).contains(n.value()) => Ok(*n.value() as u64),
                Value::Integer(n) => Err(format!(
                    "stalls.{key}: {} is not a number of microseconds from {lo} to {hi}",
                    n.value()
                )),
                _ => Err(format!(
                    "stalls.{key} must be a whole number of microseconds"
                )),
            }
        };
        match key {
            "enabled" => match v {
                Value::Boolean(b) => self.enabled = *b.value(),
                _ => return Err("stalls.enabled takes true or false".into()),
            },
            "threshold" => self.threshold = secs(v, 0.1, 600.0)?,
            "lend_for" => self.lend_for = secs(v, 0.01, 60.0)?,
            "interval" => self.interval = secs(v, 0.05, 10.0)?,
            // The kernel's SCHED_DEADLINE bounds: a runtime of at least 1024 ns, a period
            // within sched_deadline_period_{min,max}_us (100 .. 4194304 by default).
            "runtime_us" => self.runtime_us = micros(v, 2, 1_000_000)?,
            "period_us" => self.period_us = micros(v, 100, 4_194_304)?,
            "ignore_cpus" => {
                let Value::String(s) = v else {
                    return Err("stalls.ignore_cpus must be a string (a CPU list, \"3\")".into());
                };
                self.ignore_cpus = CpuSet::parse_list(s.value().trim())
                    .map_err(|e| format!("stalls.ignore_cpus: {e}"))?;
            }
            "ignore_threads" => {
                let Value::Array(a) = v else {
                    return Err("stalls.ignore_threads must be an array of name patterns".into());
                };
                for e in a.iter() {
                    match e {
                        Value::String(s) if !s.value().is_empty() => {
                            self.ignore_threads.push(s.value().clone())
                        }
                        _ => {
                            return Err(
                                "stalls.ignore_threads must be an array of non-empty strings"
                                    .into(),
                            )
                        }
                    }
                }
            }
            _ => return Err(unknown("key", key, STALLS_KEYS)),
        }
        Ok(())
    }

    /// The slice's share of a CPU, checked once the table is read: the workload keeps at
    /// least 99 % of its CPU while a thread is lent one.
    fn check(&self) -> Result<(), String> {
        if self.runtime_us > self.period_us {
            return Err(format!(
                "stalls.runtime_us ({}) is longer than stalls.period_us ({})",
                self.runtime_us, self.period_us
            ));
        }
        // The kernel stops a deadline task that ran out of runtime at its next tick (unless
        // the HRTICK_DL scheduler feature is on): a lent thread may run a whole tick per
        // period, 4 ms at HZ=250. The share is judged on that.
        let slice = self.runtime_us.max(TICK_US);
        if slice * 100 > self.period_us {
            return Err(format!(
                "stalls: runtime_us = {} every period_us = {} lends up to {:.1} % of the CPU (a lent thread runs until the kernel's tick, {} us at HZ=250, when its runtime is shorter); at most 1 %: period_us of {} or more",
                self.runtime_us,
                self.period_us,
                slice as f64 * 100.0 / self.period_us as f64,
                TICK_US,
                slice * 100
            ));
        }
        Ok(())
    }
}

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

impl NoiseConfig {
    /// One `key = value` of the table.
    fn set(&mut self, key: &str, v: &Value) -> Result<(), String> {
        match key {
            "enabled" => match v {
                Value::Boolean(b) => self.enabled = *b.value(),
                _ => return Err("noise.enabled takes true or false".into()),
            },
            "interval" => {
                let s = match v {
                    Value::Integer(n) => *n.value() as f64,
                    Value::Float(f) => *f.value(),
                    _ => return Err("noise.interval must be a number of seconds".into()),
                };
                if !(0.05..=60.0).contains(&s) {
                    return Err(format!(
                        "noise.interval: {s} is not a number of seconds from 0.05 to 60"
                    ));
                }
                self.interval = std::time::Duration::from_secs_f64(s);
            }
            "sources" => match v {
                Value::Integer(n) if (1..=100).contains(n.value()) => {
                    self.sources = *n.value() as usize
                }
                _ => return Err("noise.sources must be a whole number from 1 to 100".into()),
            },
            "ignore_cpus" => {
                let Value::String(s) = v else {
                    return Err("noise.ignore_cpus must be a string (a CPU list, \"3\")".into());
                };
                self.ignore_cpus = CpuSet::parse_list(s.value().trim())
                    .map_err(|e| format!("noise.ignore_cpus: {e}"))?;
            }
            _ => return Err(unknown("key", key, NOISE_KEYS)),
        }
        Ok(())
    }
}

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

impl MetricsConfig {
    /// One `key = value` of the table.
    fn set(&mut self, key: &str, v: &Value) -> Result<(), String> {
        match key {
            "listen" => {
                let Value::String(s) = v else {
                    return Err("metrics.listen must be a string (\"127.0.0.1:9645\")".into());
                };
                let addr: std::net::SocketAddr = s.value().trim().parse().map_err(|_| {
                    format!(
                        "metrics.listen: {:?} is not an address and port (\"127.0.0.1:9645\")",
                        s.value()
                    )
                })?;
                if !addr.ip().is_loopback() {
                    return Err(format!(
                        "metrics.listen: {addr} is not a loopback address: the listener has no authentication (put a proxy in front of it, or use textfile)"
                    ));
                }
                if addr.port() == 0 {
                    return Err("metrics.listen: give a port (0 picks a random one)".into());
                }
                self.listen = Some(addr);
            }
            "textfile" => {
                let Value::String(s) = v else {
                    return Err("metrics.textfile must be a string (a path)".into());
                };
                let p = Path::new(s.value());
                if !p.is_absolute() || p.file_name().is_none() {
                    return Err(format!(
                        "metrics.textfile: {:?} is not an absolute file path",
                        s.value()
                    ));
                }
                if p.extension().and_then(|e| e.to_str()) != Some("prom") {
                    return Err(format!(
                        "metrics.textfile: {:?} does not end in .prom (node_exporter's textfile collector reads only those)",
                        s.value()
                    ));
                }
                self.textfile = Some(p.into());
            }
            "interval" => {
                let secs = match v {
                    Value::Integer(n) => *n.value() as f64,
                    Value::Float(f) => *f.value(),
                    _ => return Err("metrics.interval must be a number of seconds".into()),
                };
                if !(1.0..=3600.0).contains(&secs) {
                    return Err(format!(
                        "metrics.interval: {secs} is not a number of seconds from 1 to 3600"
                    ));
                }
                self.interval = std::time::Duration::from_secs_f64(secs);
            }
            _ => return Err(unknown("key", key, METRICS_KEYS)),
        }
        Ok(())
    }
}

fn line_of(text: &str, span: Option<std::ops::Range<usize>>) -> Option<usize> {
    span.map(|r| text[..r.start.min(text.len())].matches('\n').count() + 1)
}

pub(crate) fn closest<'a>(word: &str, valid: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    valid
        .into_iter()
        .map(|v| (strsim::levenshtein(word, v), v))
        .filter(|(d, v)| *d <= (v.len() / 3).max(2))
        .min()
        .map(|(_, v)| v)
}

fn unknown(kind: &str, word: &str, valid: &[&str]) -> String {
    match closest(word, valid.iter().copied()) {
        Some(c) => format!("unknown {kind} '{word}' (did you mean '{c}'?)"),
        None => format!("unknown {kind} '{word}' (valid: {})", valid.join(", ")),
    }
}

/// A value as the preset table spells it.
fn value_text(v: &Value) -> Option<String> {
    Some(match v {
        Value::String(s) => s.value().clone(),
        Value::Integer(i) => i.value().to_string(),
        Value::Boolean(b) => b.value().to_string(),
        _ => return None,
    })
}

fn parse_sched(s: &str) -> Result<SchedPolicy, String> {
    let (pol, prio_text) = s.split_once(':').unwrap_or((s, ""));
    let prio = || {
        prio_text
            .parse::<u32>()
            .ok()
            .filter(|p| (1..=99).contains(p))
            .ok_or_else(|| format!("bad priority in {s:?}: expected 1..99"))
    };
    match pol {
        "fifo" => Ok(SchedPolicy::Fifo(prio()?)),
        "rr" => Ok(SchedPolicy::RoundRobin(prio()?)),
        "other" if prio_text.is_empty() => Ok(SchedPolicy::Other),
        _ => Err(format!(
            "bad scheduling policy {s:?}: expected fifo:N, rr:N or other"
        )),
    }
}

fn parse_bool(item: &str, v: &str) -> Result<bool, String> {
    match v {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("{item} takes true or false, not {v:?}")),
    }
}

/// The value an item falls back to when the file says `true` and the preset lacks it.
fn table_value(item: &str) -> &'static str {
    preset::SETTINGS
        .iter()
        .find(|s| s.key == item)
        .map_or("true", |s| s.value)
}

impl Config {
    /// The settings of `preset` with nothing overridden, for `isolated`.
    pub fn defaults(preset: Preset, isolated: CpuSpec) -> Config {
        let mut c = Config {
            file: PathBuf::from("(defaults)"),
            isolated_line: None,
            isolated,
            preset,
            on_stop: OnStop::Keep,
            sysctl: Vec::new(),
            sysctl_lines: Default::default(),
            printk_line: None,
            thp: None,
            workqueue: false,
            machinecheck: false,
            ksm: None,
            irq_affinity: false,
            tasks: false,
            allow_comm: Vec::new(),
            allow_cgroup: Vec::new(),
            irq_allow: Vec::new(),
            kthread_priority: Vec::new(),
            pm_qos: None,
            cpufreq: None,
            kvm: Vec::new(),
            irqbalance: false,
            printk: None,
            cgroup_partition: None,
            systemd_cpuaffinity: false,
            metrics: None,
            containers: None,
            stalls: StallsConfig::default(),
            noise: NoiseConfig::default(),
        };
        for s in preset::settings(preset) {
            let r = match s.key.split_once(':') {
                None => c.set_item(s.key, s.value),
                Some(("sysctl", k)) => c.set_sysctl(k, Some(s.value)),
                Some(("kthread_priority", k)) => c.set_kthread(k, Some(s.value)),
                Some(("kvm", k)) => c.set_kvm(k, Some(s.value)),
                Some(("tasks", "allow_comm")) => {
                    c.allow_comm.push(s.value.to_string());
                    Ok(())
                }
                Some(_) => Err(format!("bad preset row {}", s.key)),
            };
            r.expect("the preset table is valid (tested)");
        }
        c
    }

    /// This configuration with only the items `keep` on: every other item of [`ITEMS`]
    /// turned off as `[items] NAME = false` turns it off. One operation over the item table,
    /// so an item added to the table is never kept by a restricted copy silently; the rest
    /// (CPUs, allow-lists, `on_stop`, `[metrics]`) is kept.
    pub fn only(&self, keep: &[&str]) -> Config {
        self.switched_off(|item| !keep.contains(&item))
    }

    /// This configuration with the items `drop` turned off, as [`Config::only`] does.
    pub fn without(&self, drop: &[&str]) -> Config {
        self.switched_off(|item| drop.contains(&item))
    }

    fn switched_off(&self, off: impl Fn(&str) -> bool) -> Config {
        let mut c = self.clone();
        for (item, _) in ITEMS.iter().filter(|(item, _)| off(item)) {
            c.set_item(item, "false")
                .expect("every item of ITEMS can be turned off");
        }
        c
    }

    fn set_item(&mut self, item: &str, v: &str) -> Result<(), String> {
        let v = if v == "true" && !matches!(table_value(item), "true" | "false") {
            table_value(item)
        } else {
            v
        };
        let off = v == "false";
        match item {
            "sysctl" => {
                if !parse_bool(item, v)? {
                    self.sysctl.clear();
                }
            }
            "thp" => {
                self.thp = match v {
                    "false" => None,
                    "never" | "madvise" | "always" => Some(v.into()),
                    _ => {
                        return Err(format!(
                            "thp takes never, madvise, always or false, not {v:?}"
                        ))
                    }
                }
            }
            "workqueue" => self.workqueue = parse_bool(item, v)?,
            "machinecheck" => self.machinecheck = parse_bool(item, v)?,
            "ksm" => {
                self.ksm = match v {
                    "false" => None,
                    "0" | "1" | "2" => Some(v.parse().unwrap()),
                    _ => return Err(format!("ksm takes 0, 1, 2 or false, not {v:?}")),
                }
            }
            "irq_affinity" => self.irq_affinity = parse_bool(item, v)?,
            "tasks" => self.tasks = parse_bool(item, v)?,
            "kthread_priority" => {
                if !parse_bool(item, v)? {
                    self.kthread_priority.clear();
                }
            }
            "pm_qos" => {
                self.pm_qos =
                    if off {
                        None
                    } else {
                        Some(v.parse::<u32>().ok().filter(|n| *n <= i32::MAX as u32).ok_or_else(
                        || format!("pm_qos takes a latency in microseconds or false, not {v:?}"),
                    )?)
                    }
            }
            "cpufreq" => {
                self.cpufreq = if off {
                    None
                } else if !v.is_empty() && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                {
                    Some(v.into())
                } else {
                    return Err(format!("cpufreq takes a governor name or false, not {v:?}"));
                }
            }
            "kvm" => {
                if !parse_bool(item, v)? {
                    self.kvm.clear();
                }
            }
            "irqbalance" => self.irqbalance = parse_bool(item, v)?,
            "printk" => {
                self.printk = if off {
                    None
                } else {
                    Some(v.parse::<u8>().ok().filter(|n| *n <= 8).ok_or_else(|| {
                        format!("printk takes a console log level 0..8 or false, not {v:?}")
                    })?)
                }
            }
            "cgroup_partition" => {
                self.cgroup_partition = match v {
                    "false" => None,
                    "true" => Some(DEFAULT_PARTITION.into()),
                    p if super::paths::valid_partition_dir(p) => {
                        Some(p.trim_end_matches('/').into())
                    }
                    _ => {
                        return Err(format!(
                    "cgroup_partition takes true, false or a cgroup directory below {}/, not {v:?}",
                    super::paths::CGROUP_MOUNT
                ))
                    }
                }
            }
            "systemd_cpuaffinity" => self.systemd_cpuaffinity = parse_bool(item, v)?,
            _ => unreachable!("checked against ITEMS"),
        }
        Ok(())
    }

    fn set_sysctl(&mut self, key: &str, v: Option<&str>) -> Result<(), String> {
        crate::sysctl::path_of(key).map_err(|e| e.to_string())?;
        self.sysctl.retain(|(k, _)| k != key);
        match v {
            None => {}
            Some("true") => {
                return Err(format!(
                    "sysctl {key} needs a value (or false to leave it alone)"
                ))
            }
            Some(v) if v.contains('\n') => {
                return Err(format!("sysctl {key}: a value cannot span lines"))
            }
            Some(v) if v.trim().is_empty() => {
                return Err(format!(
                    "sysctl {key}: an empty value writes nothing (give a value, or false to leave it alone)"
                ))
            }
            Some(v) => self.sysctl.push((key.into(), v.into())),
        }
        Ok(())
    }

    fn set_kthread(&mut self, pattern: &str, v: Option<&str>) -> Result<(), String> {
        self.kthread_priority.retain(|(k, _)| k != pattern);
        if let Some(v) = v {
            self.kthread_priority
                .push((pattern.into(), parse_sched(v)?));
        }
        Ok(())
    }

    fn set_kvm(&mut self, key: &str, v: Option<&str>) -> Result<(), String> {
        let Some((module, param)) = key.split_once('.') else {
            return Err(format!("kvm option {key:?} is not module.parameter"));
        };
        let word =
            |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !word(module) || !word(param) {
            return Err(format!("kvm option {key:?} is not module.parameter"));
        }
        self.kvm.retain(|(m, p, _)| !(m == module && p == param));
        match v {
            None => {}
            Some(v) if v.is_empty() || v.contains(char::is_whitespace) => {
                return Err(format!("kvm option {key}: bad value {v:?}"))
            }
            Some(v) => self.kvm.push((module.into(), param.into(), v.into())),
        }
        Ok(())
    }

    /// Read and validate a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.into(),
            line: None,
            reason: format!("cannot read: {}", crate::error::io_strerror(&e)),
        })?;
        Config::parse(&text, path)
    }

    /// Parse and validate the text of a configuration file named `file`.
    pub fn parse(text: &str, file: &Path) -> Result<Config, ConfigError> {
        let err = |span: Option<std::ops::Range<usize>>, reason: String| ConfigError {
            file: file.into(),
            line: line_of(text, span),
            reason,
        };
        let doc = ImDocument::parse(text).map_err(|e| {
            let msg = e.message().trim().to_string();
            err(e.span(), format!("not valid TOML: {msg}"))
        })?;
        let top = doc.as_table();
        for (k, _) in top.iter() {
            if !TOP_KEYS.contains(&k) {
                let key = top.key(k).and_then(|k| k.span());
                return Err(err(key, unknown("key", k, TOP_KEYS)));
            }
        }
        let str_of = |k: &str| -> Result<Option<(String, Option<usize>)>, ConfigError> {
            match top.get(k) {
                None => Ok(None),
                Some(Item::Value(Value::String(s))) => {
                    Ok(Some((s.value().clone(), line_of(text, s.span()))))
                }
                Some(i) => Err(err(i.span(), format!("{k} must be a string"))),
            }
        };
        let preset = match str_of("preset")? {
            None => Preset::default(),
            Some((p, line)) => p.parse().map_err(|_| ConfigError {
                file: file.into(),
                line,
                reason: unknown("preset", &p, &Preset::ALL.map(Preset::name)),
            })?,
        };
        let (isolated, isolated_line) = match str_of("isolated_cpus")? {
            None => {
                return Err(err(
                    None,
                    "isolated_cpus is missing: give a CPU list (\"2-3\") or \"auto\"".into(),
                ))
            }
            Some((s, line)) if s.trim() == "auto" => (CpuSpec::Auto, line),
            Some((s, line)) => match CpuSet::parse_list(&s) {
                Ok(set) if set.is_empty() => {
                    return Err(ConfigError {
                        file: file.into(),
                        line,
                        reason: "isolated_cpus is empty".into(),
                    })
                }
                Ok(set) => (CpuSpec::List(set), line),
                Err(e) => {
                    return Err(ConfigError {
                        file: file.into(),
                        line,
                        reason: format!("isolated_cpus: {e}"),
                    })
                }
            },
        };
        let mut c = Config::defaults(preset, isolated);
        c.file = file.into();
        c.isolated_line = isolated_line;
        if let Some((v, line)) = str_of("on_stop")? {
            c.on_stop = match v.as_str() {
                "keep" => OnStop::Keep,
                "restore" => OnStop::Restore,
                _ => {
                    return Err(ConfigError {
                        file: file.into(),
                        line,
                        reason: unknown("on_stop value", &v, &["keep", "restore"]),
                    })
                }
            };
        }

        let table = |k: &str| -> Result<Option<&dyn TableLike>, ConfigError> {
            match top.get(k) {
                None => Ok(None),
                Some(i) => i
                    .as_table_like()
                    .map(Some)
                    .ok_or_else(|| err(i.span(), format!("{k} must be a table ([{k}])"))),
            }
        };
        // One walk for every table of key = value overrides.
        let walk = |t: &dyn TableLike,
                    section: &str,
                    f: &mut dyn FnMut(&str, &Value) -> Result<(), String>|
         -> Result<(), ConfigError> {
            for (k, item) in t.iter() {
                let key_span = t.get_key_value(k).and_then(|(key, _)| key.span());
                let span = item.span().or(key_span.clone());
                let Item::Value(v) = item else {
                    return Err(err(
                        span,
                        format!("[{section}] {k} must be a value, not a table"),
                    ));
                };
                f(k, v).map_err(|reason| err(key_span.clone().or(span.clone()), reason))?;
            }
            Ok(())
        };
        if let Some(t) = table("items")? {
            let names: Vec<&str> = ITEMS.iter().map(|(n, _)| *n).collect();
            walk(t, "items", &mut |k, v| {
                if !names.contains(&k) {
                    return Err(unknown("item", k, &names));
                }
                let text =
                    value_text(v).ok_or_else(|| format!("item {k}: unsupported value type"))?;
                c.set_item(k, &text)
            })?;
        }
        let line_in = |t: &dyn TableLike, k: &str| {
            line_of(text, t.get_key_value(k).and_then(|(key, _)| key.span()))
        };
        if let Some(t) = table("items")? {
            if c.printk.is_some() {
                c.printk_line = line_in(t, "printk");
            }
        }
        if let Some(t) = table("sysctl")? {
            walk(t, "sysctl", &mut |k, v| match v {
                Value::Boolean(b) if !*b.value() => c.set_sysctl(k, None),
                Value::String(_) | Value::Integer(_) => c.set_sysctl(k, value_text(v).as_deref()),
                _ => Err(format!("sysctl {k} takes a number, a string or false")),
            })?;
            for (k, _) in t
                .iter()
                .filter(|(k, _)| c.sysctl.iter().any(|(n, _)| n == k))
            {
                if let Some(line) = line_in(t, k) {
                    c.sysctl_lines.insert(k.to_string(), line);
                }
            }
        }
        c.one_setting_per_file()?;
        if let Some(t) = table("kthread_priority")? {
            walk(t, "kthread_priority", &mut |k, v| match v {
                Value::Boolean(b) if !*b.value() => c.set_kthread(k, None),
                Value::String(s) => c.set_kthread(k, Some(s.value())),
                _ => Err(format!(
                    "kthread_priority {k:?} takes \"fifo:N\", \"rr:N\", \"other\" or false"
                )),
            })?;
        }
        if let Some(t) = table("kvm")? {
            walk(t, "kvm", &mut |k, v| match v {
                Value::Boolean(b) if !*b.value() => c.set_kvm(k, None),
                Value::String(_) | Value::Integer(_) => c.set_kvm(k, value_text(v).as_deref()),
                _ => Err(format!("kvm {k} takes a number, a string or false")),
            })?;
        }
        if let Some(t) = table("tasks")? {
            walk(t, "tasks", &mut |k, v| {
                if !TASK_KEYS.contains(&k) {
                    return Err(unknown("key", k, TASK_KEYS));
                }
                let Value::Array(a) = v else {
                    return Err(format!("tasks.{k} must be an array of strings"));
                };
                let mut list = Vec::new();
                for e in a.iter() {
                    match e {
                        Value::String(s) if !s.value().is_empty() => list.push(s.value().clone()),
                        _ => {
                            return Err(format!("tasks.{k} must be an array of non-empty strings"))
                        }
                    }
                }
                if k == "allow_cgroup" {
                    if let Some(bad) = list.iter().find(|p| !p.starts_with('/')) {
                        return Err(format!(
                            "tasks.allow_cgroup: {bad:?} is not a cgroup path starting with /"
                        ));
                    }
                    c.allow_cgroup.extend(list);
                } else {
                    c.allow_comm.extend(list);
                }
                Ok(())
            })?;
        }
        if let Some(t) = table("irqs")? {
            walk(t, "irqs", &mut |k, v| {
                if !IRQ_KEYS.contains(&k) {
                    return Err(unknown("key", k, IRQ_KEYS));
                }
                let Value::Array(a) = v else {
                    return Err(
                        "irqs.allow must be an array of IRQ numbers and name patterns".into(),
                    );
                };
                for e in a.iter() {
                    c.irq_allow.push(match e {
                        Value::Integer(n) => {
                            IrqAllow::Number(u32::try_from(*n.value()).map_err(|_| {
                                format!("irqs.allow: {} is not an IRQ number", n.value())
                            })?)
                        }
                        Value::String(s) if s.value().trim().is_empty() => {
                            return Err("irqs.allow: an empty name matches no IRQ".into())
                        }
                        // A number written as a string is the number.
                        Value::String(s) => match s.value().trim().parse::<u32>() {
                            Ok(n) => IrqAllow::Number(n),
                            Err(_) => IrqAllow::Name(s.value().clone()),
                        },
                        other => {
                            return Err(format!(
                                "irqs.allow takes IRQ numbers and name patterns, not {}",
                                other.type_name()
                            ))
                        }
                    });
                }
                Ok(())
            })?;
        }
        if let Some(t) = table("metrics")? {
            let mut m = MetricsConfig {
                listen: None,
                textfile: None,
                interval: METRICS_INTERVAL,
            };
            walk(t, "metrics", &mut |k, v| m.set(k, v))?;
            if m.listen.is_none() && m.textfile.is_none() {
                let span = top.get("metrics").and_then(|i| i.span());
                return Err(err(
                    span,
                    "[metrics] publishes nothing: give listen (\"127.0.0.1:9645\"), textfile, or both"
                        .into(),
                ));
            }
            c.metrics = Some(m);
        }
        if let Some(t) = table("containers")? {
            let mut cc = ContainersConfig::default();
            walk(t, "containers", &mut |k, v| {
                match k {
                "cpus" => {
                    let Value::String(s) = v else {
                        return Err("containers.cpus must be a string (a CPU list, \"4-7\")".into());
                    };
                    cc.cpus = CpuSet::parse_list(s.value().trim())
                        .map_err(|e| format!("containers.cpus: {e}"))?;
                    cc.cpus_line = line_of(text, s.span());
                    Ok(())
                }
                "nri" => match v {
                    Value::Boolean(b) => {
                        cc.nri = *b.value();
                        Ok(())
                    }
                    _ => Err("containers.nri takes true or false".into()),
                },
                "nri_socket" => match v {
                    Value::String(s) if Path::new(s.value()).is_absolute() => {
                        cc.nri_socket = PathBuf::from(s.value());
                        Ok(())
                    }
                    _ => Err("containers.nri_socket must be an absolute path (\"/var/run/nri/nri.sock\")".into()),
                },
                _ => Err(unknown("key", k, CONTAINERS_KEYS)),
            }
            })?;
            c.containers = Some(cc);
        }
        if let Some(t) = table("stalls")? {
            let mut st = StallsConfig::default();
            walk(t, "stalls", &mut |k, v| st.set(k, v))?;
            if let Err(reason) = st.check() {
                let span = top.get("stalls").and_then(|i| i.span());
                return Err(err(span, reason));
            }
            c.stalls = st;
        }
        if let Some(t) = table("noise")? {
            let mut n = NoiseConfig::default();
            walk(t, "noise", &mut |k, v| n.set(k, v))?;
            c.noise = n;
        }
        Ok(c)
    }

    /// Two settings that write one file would undo each other at every check of a daemon:
    /// refused, naming both.
    fn one_setting_per_file(&self) -> Result<(), ConfigError> {
        let mut by_path: std::collections::BTreeMap<String, Vec<(String, Option<usize>)>> =
            Default::default();
        let from = |line: Option<usize>| match line {
            Some(l) => format!("line {l}"),
            None => format!("preset {}", self.preset),
        };
        for (name, _) in &self.sysctl {
            if let Ok(path) = crate::sysctl::path_of(name) {
                by_path.entry(path).or_default().push((
                    format!("[sysctl] {name}"),
                    self.sysctl_lines.get(name).copied(),
                ));
            }
        }
        if self.printk.is_some() {
            by_path
                .entry(super::paths::PRINTK.to_string())
                .or_default()
                .push(("the printk item".into(), self.printk_line));
        }
        for (path, who) in by_path {
            if let [a, b, ..] = &who[..] {
                return Err(ConfigError {
                    file: self.file.clone(),
                    line: b.1.or(a.1),
                    reason: format!(
                        "{} ({}) and {} ({}) both write {path}: isold would undo one with the other at every check; keep one (false turns either off)",
                        a.0,
                        from(a.1),
                        b.0,
                        from(b.1)
                    ),
                });
            }
        }
        Ok(())
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

/// Shell-style matching of a thread name, cgroup path or IRQ name: `*`, `?` and `[...]`
/// classes (with ranges and a leading `!` or `^`). Written here because thread names are not
/// paths: `*` must match `/` (`ksoftirqd/*`), which path globbing crates refuse.
///
/// It takes at most |pattern| x |name| steps, whatever the pattern: the parts between stars
/// are placed left to right at their first fit, never tried again (a leftmost fit leaves the
/// most room for the rest, so no backtracking is needed). A recursive matcher tried every
/// split of every star: `*?` sixteen times then `*Z` took 14 s over 130 thread names.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    if pattern.contains(['?', '[']) {
        glob_steps(pattern, name).0
    } else {
        star_match(pattern, name)
    }
}

/// [`glob_match`] of a pattern whose only special character is `*` (the usual ones:
/// `ksoftirqd/*`, `CPU */KVM`), on the text itself: no allocation, for every one of 50,000
/// threads. The same leftmost placement of the parts between stars.
fn star_match(pattern: &str, name: &str) -> bool {
    let Some((first, tail)) = pattern.split_once('*') else {
        return pattern == name;
    };
    let (middle, last) = tail.rsplit_once('*').unwrap_or(("", tail));
    if first.len() + last.len() > name.len() || !name.starts_with(first) || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for part in middle.split('*').filter(|p| !p.is_empty()) {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

/// One element of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Star,
    Any,
    Lit(char),
    /// Members (single characters and inclusive ranges), negated.
    Class(Vec<(char, char)>, bool),
}

impl Tok {
    fn matches(&self, c: char) -> bool {
        match self {
            Tok::Star | Tok::Any => true,
            Tok::Lit(l) => *l == c,
            Tok::Class(set, negate) => set.iter().any(|(a, b)| *a <= c && c <= *b) != *negate,
        }
    }
}

fn tokens(pattern: &str) -> Vec<Tok> {
    let p: Vec<char> = pattern.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            '*' => out.push(Tok::Star),
            '?' => out.push(Tok::Any),
            '[' => match class(&p[i + 1..]) {
                Some((tok, len)) => {
                    out.push(tok);
                    i += 1 + len;
                    continue;
                }
                // An unclosed class is literal text.
                None => out.push(Tok::Lit('[')),
            },
            c => out.push(Tok::Lit(c)),
        }
        i += 1;
    }
    out
}

/// The class that `p` (after its `[`) starts, and its length including the `]`; `None`
/// when it is not closed. A `]` first (after the negation) is a member; so is a `-` before
/// the `]`.
fn class(p: &[char]) -> Option<(Tok, usize)> {
    let negate = matches!(p.first(), Some('!') | Some('^'));
    let mut i = usize::from(negate);
    let mut set = Vec::new();
    let mut first = true;
    while i < p.len() {
        if p[i] == ']' && !first {
            return Some((Tok::Class(set, negate), i + 1));
        }
        first = false;
        if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
            set.push((p[i], p[i + 2]));
            i += 3;
        } else {
            set.push((p[i], p[i]));
            i += 1;
        }
    }
    None
}

/// Whether `seg` (no star in it) matches `n` at its start; counts the characters compared.
fn fits(seg: &[Tok], n: &[char], steps: &mut usize) -> bool {
    seg.len() <= n.len()
        && seg.iter().zip(n).all(|(t, c)| {
            *steps += 1;
            t.matches(*c)
        })
}

/// [`glob_match`] and the number of characters it compared (for the test of its bound).
fn glob_steps(pattern: &str, name: &str) -> (bool, usize) {
    let toks = tokens(pattern);
    let n: Vec<char> = name.chars().collect();
    let mut steps = 0;
    let segs: Vec<&[Tok]> = toks.split(|t| *t == Tok::Star).collect();
    let (first, rest) = segs.split_first().expect("split gives one part at least");
    let Some((last, middle)) = rest.split_last() else {
        // No star: the whole name, exactly.
        return (first.len() == n.len() && fits(first, &n, &mut steps), steps);
    };
    if first.len() + last.len() > n.len() || !fits(first, &n, &mut steps) {
        return (false, steps);
    }
    // The last part is anchored at the end; the middle ones go between, leftmost first.
    let end = n.len() - last.len();
    let mut at = first.len();
    for seg in middle {
        let mut placed = false;
        while at + seg.len() <= end {
            if fits(seg, &n[at..], &mut steps) {
                placed = true;
                break;
            }
            at += 1;
        }
        if !placed {
            return (false, steps);
        }
        at += seg.len();
    }
    (fits(last, &n[end..], &mut steps), steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/etc/isold/isold.toml"))
    }

    #[test]
    fn the_smallest_file_is_the_preset() {
        let c = parse("isolated_cpus = \"2-3\"\n").unwrap();
        assert_eq!(
            c.isolated,
            CpuSpec::List(CpuSet::parse_list("2-3").unwrap())
        );
        assert_eq!(c.preset, Preset::RealtimeVirtualHost);
        assert!(c
            .sysctl
            .contains(&("kernel.timer_migration".into(), "0".into())));
        assert!(c
            .sysctl
            .contains(&("kernel.sched_rt_runtime_us".into(), "-1".into())));
        assert_eq!(c.thp.as_deref(), Some("never"));
        assert_eq!(c.ksm, Some(2));
        assert!(c.irq_affinity && c.tasks && c.workqueue && c.machinecheck && c.irqbalance);
        assert_eq!(
            c.kthread_priority[0],
            ("ksoftirqd/*".into(), SchedPolicy::Fifo(2))
        );
        assert_eq!(c.kvm.len(), 3);
        assert_eq!(c.cgroup_partition, None);
        assert!(!c.systemd_cpuaffinity);
        assert_eq!(c.isolated_line, Some(1));
        assert_eq!(c.on_stop, OnStop::Keep, "stopping is not undoing");
    }

    #[test]
    fn irqs_allow_takes_numbers_and_names() {
        let c = parse("isolated_cpus = \"2-3\"\n[irqs]\nallow = [24, \"25\", \"eth1-rx-*\"]\n")
            .unwrap();
        assert_eq!(
            c.irq_allow,
            [
                IrqAllow::Number(24),
                IrqAllow::Number(25),
                IrqAllow::Name("eth1-rx-*".into())
            ]
        );
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            allowed_irq(&c.irq_allow, 30, &names(&["virtio0", "eth1-rx-3"])),
            Some(&IrqAllow::Name("eth1-rx-*".into()))
        );
        assert_eq!(
            allowed_irq(&c.irq_allow, 25, &[]),
            Some(&IrqAllow::Number(25))
        );
        assert_eq!(allowed_irq(&c.irq_allow, 26, &names(&["eth1-tx-0"])), None);
        assert_eq!(IrqAllow::Number(24).to_string(), "24");
        assert_eq!(IrqAllow::Name("a*".into()).to_string(), "\"a*\"");
        for (text, want) in [
            ("allow = [\"\"]", "irqs.allow: an empty name matches no IRQ"),
            ("allow = [-1]", "irqs.allow: -1 is not an IRQ number"),
            (
                "allow = [true]",
                "irqs.allow takes IRQ numbers and name patterns, not boolean",
            ),
            (
                "allow = \"eth*\"",
                "irqs.allow must be an array of IRQ numbers and name patterns",
            ),
            ("alow = [1]", "unknown key 'alow' (did you mean 'allow'?)"),
        ] {
            let e = parse(&format!("isolated_cpus = \"2-3\"\n[irqs]\n{text}\n")).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("/etc/isold/isold.toml:3: {want}"),
                "{text}"
            );
        }
    }

    /// Two settings of one file would fight at every check of the daemon: a configuration
    /// error naming both; turning either off resolves it. An empty value is no value.
    #[test]
    fn one_file_one_setting_and_no_empty_values() {
        let e = parse("isolated_cpus = \"2-3\"\n[sysctl]\n\"kernel.printk\" = \"7 4 1 7\"\n")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/isold/isold.toml:3: [sysctl] kernel.printk (line 3) and the printk item (preset realtime-virtual-host) both write /proc/sys/kernel/printk: isold would undo one with the other at every check; keep one (false turns either off)"
        );
        let e = parse(
            "isolated_cpus = \"2-3\"\n[items]\nprintk = 3\n[sysctl]\n\"kernel.printk\" = \"7 4 1 7\"\n",
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("/etc/isold/isold.toml:3: [sysctl] kernel.printk (line 5) and the printk item (line 3) both write"),
            "{e}"
        );
        assert!(parse(
            "isolated_cpus = \"2-3\"\n[items]\nprintk = false\n[sysctl]\n\"kernel.printk\" = \"7 4 1 7\"\n"
        )
        .is_ok());
        let e = parse(
            "isolated_cpus = \"2-3\"\n[sysctl]\n\"vm.stat_interval\" = 5\n\"vm/stat_interval\" = 6\n",
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("/etc/isold/isold.toml:4: [sysctl] vm.stat_interval (line 3) and [sysctl] vm/stat_interval (line 4) both write /proc/sys/vm/stat_interval"),
            "{e}"
        );
        let e =
            parse("isolated_cpus = \"2-3\"\n[sysctl]\n\"vm.swappiness\" = \" \"\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/isold/isold.toml:3: sysctl vm.swappiness: an empty value writes nothing (give a value, or false to leave it alone)"
        );
        let c = parse("isolated_cpus = \"2-3\"\n\n[sysctl]\n\"vm.swappiness\" = 1\n").unwrap();
        assert_eq!(c.sysctl_lines.get("vm.swappiness"), Some(&4));
        assert!(
            !c.sysctl_lines.contains_key("vm.dirty_ratio"),
            "a preset's has no line"
        );
    }

    #[test]
    fn containers_name_the_cpus_claims_may_take() {
        assert_eq!(parse("isolated_cpus = \"2\"\n").unwrap().containers, None);
        let c = parse("isolated_cpus = \"2\"\n\n[containers]\ncpus = \"3-5,7\"\n")
            .unwrap()
            .containers
            .unwrap();
        assert_eq!((c.cpus.to_string(), c.cpus_line), ("3-5,7".into(), Some(4)));
        let empty = parse("isolated_cpus = \"2\"\n[containers]\n").unwrap();
        let empty = empty.containers.unwrap();
        assert_eq!(empty.cpus, CpuSet::new());
        assert!(!empty.nri);
        assert_eq!(empty.nri_socket, Path::new("/var/run/nri/nri.sock"));
        let nri = parse(
            "isolated_cpus = \"2\"\n[containers]\nnri = true\nnri_socket = \"/run/x.sock\"\n",
        )
        .unwrap()
        .containers
        .unwrap();
        assert!(nri.nri);
        assert_eq!(nri.nri_socket, Path::new("/run/x.sock"));
        for (line, why) in [
            ("cpus = 3", "containers.cpus must be a string"),
            ("cpus = \"3-x\"", "containers.cpus: "),
            ("cpu = \"3\"", "unknown key 'cpu' (did you mean 'cpus'?)"),
            ("nri = \"yes\"", "containers.nri takes true or false"),
            (
                "nri_socket = \"nri.sock\"",
                "containers.nri_socket must be an absolute path",
            ),
        ] {
            let e = parse(&format!("isolated_cpus = \"2\"\n[containers]\n{line}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(why) && e.contains(":3: "), "{line}: {e}");
        }
    }

    #[test]
    fn the_noise_ledger_is_on_by_default_and_tuned_or_turned_off_by_the_table() {
        let c = parse("isolated_cpus = \"2-3\"\n").unwrap();
        assert_eq!(c.noise, NoiseConfig::default());
        assert!(c.noise.enabled);
        let c = parse(
            "isolated_cpus = \"2-3\"\n[noise]\nenabled = false\ninterval = 0.5\nsources = 4\nignore_cpus = \"2\"\n",
        )
        .unwrap();
        assert!(!c.noise.enabled);
        assert_eq!(c.noise.interval, std::time::Duration::from_millis(500));
        assert_eq!(c.noise.sources, 4);
        assert_eq!(c.noise.ignore_cpus, "2".parse().unwrap());
        for (bad, says) in [
            ("interval = 0", "noise.interval"),
            ("sources = 0", "noise.sources"),
            ("enabled = 1", "noise.enabled"),
            ("buffer = 1", "buffer"),
        ] {
            let e = parse(&format!("isolated_cpus = \"2-3\"\n[noise]\n{bad}\n")).unwrap_err();
            assert!(e.to_string().contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn stalls_are_guarded_by_default_and_tuned_or_turned_off_by_the_table() {
        let c = parse("isolated_cpus = \"2-3\"\n").unwrap();
        assert_eq!(c.stalls, StallsConfig::default());
        assert!(c.stalls.enabled);
        assert_eq!((c.stalls.runtime_us, c.stalls.period_us), (100, 500_000));
        let c = parse(
            "isolated_cpus = \"2-3\"\n[stalls]\nthreshold = 1.5\nperiod_us = 1000000\nlend_for = 2\nignore_cpus = \"3\"\nignore_threads = [\"ktimers/*\"]\n",
        )
        .unwrap();
        assert_eq!(c.stalls.threshold, std::time::Duration::from_millis(1500));
        assert_eq!(c.stalls.period_us, 1_000_000);
        assert_eq!(c.stalls.lend_for, std::time::Duration::from_secs(2));
        assert_eq!(c.stalls.ignore_cpus, "3".parse().unwrap());
        assert_eq!(c.stalls.ignore_threads, ["ktimers/*"]);
        assert!(
            !parse("isolated_cpus = \"2-3\"\n[stalls]\nenabled = false\n")
                .unwrap()
                .stalls
                .enabled
        );
        for (line, want) in [
            ("period_us = 399999", "lends up to 1.0 % of the CPU"),
            (
                "runtime_us = 5000\nperiod_us = 100000",
                "at most 1 %: period_us of 500000 or more",
            ),
            (
                "runtime_us = 1",
                "stalls.runtime_us: 1 is not a number of microseconds from 2",
            ),
            (
                "threshold = 0",
                "stalls.threshold: 0 is not a number of seconds",
            ),
            ("enabled = 1", "stalls.enabled takes true or false"),
            ("ignore_cpus = \"x\"", "stalls.ignore_cpus:"),
            ("thresold = 2", "threshold"),
        ] {
            let e = parse(&format!("isolated_cpus = \"2-3\"\n[stalls]\n{line}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    #[test]
    fn metrics_take_a_loopback_listener_a_prom_file_and_an_interval() {
        assert_eq!(parse("isolated_cpus = \"2-3\"\n").unwrap().metrics, None);
        let m = parse("isolated_cpus = \"2-3\"\n[metrics]\nlisten = \"127.0.0.1:9645\"\n")
            .unwrap()
            .metrics
            .unwrap();
        assert_eq!(m.listen, Some("127.0.0.1:9645".parse().unwrap()));
        assert_eq!((m.textfile, m.interval), (None, METRICS_INTERVAL));
        let m = parse(
            "isolated_cpus = \"2-3\"\n[metrics]\ntextfile = \"/var/lib/node_exporter/isold.prom\"\ninterval = 2.5\nlisten = \"[::1]:9645\"\n",
        )
        .unwrap()
        .metrics
        .unwrap();
        assert_eq!(m.listen, Some("[::1]:9645".parse().unwrap()));
        assert_eq!(
            m.textfile.as_deref(),
            Some(Path::new("/var/lib/node_exporter/isold.prom"))
        );
        assert_eq!(m.interval, std::time::Duration::from_millis(2500));
        for (line, want) in [
            (
                "listen = \"0.0.0.0:9645\"",
                "metrics.listen: 0.0.0.0:9645 is not a loopback address",
            ),
            (
                "listen = \"localhost\"",
                "metrics.listen: \"localhost\" is not an address and port",
            ),
            ("listen = 9645", "metrics.listen must be a string"),
            ("listen = \"127.0.0.1:0\"", "metrics.listen: give a port"),
            (
                "textfile = \"isold.prom\"",
                "metrics.textfile: \"isold.prom\" is not an absolute file path",
            ),
            (
                "textfile = \"/tmp/isold.txt\"",
                "metrics.textfile: \"/tmp/isold.txt\" does not end in .prom",
            ),
            ("textfile = true", "metrics.textfile must be a string"),
            (
                "interval = 0",
                "metrics.interval: 0 is not a number of seconds from 1 to 3600",
            ),
            ("interval = 3601", "metrics.interval: 3601 is not"),
            (
                "interval = \"5\"",
                "metrics.interval must be a number of seconds",
            ),
            ("port = 1", "unknown key 'port'"),
        ] {
            let e = parse(&format!("isolated_cpus = \"2-3\"\n[metrics]\n{line}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(&format!("/etc/isold/isold.toml:3: {want}")),
                "{line}: {e}"
            );
        }
        let e = parse("isolated_cpus = \"2-3\"\n[metrics]\ninterval = 5\n").unwrap_err();
        assert!(e.to_string().contains("[metrics] publishes nothing"), "{e}");
        let e = parse("isolated_cpus = \"2-3\"\nmetrics = 1\n").unwrap_err();
        assert!(e.to_string().contains("metrics must be a table"), "{e}");
    }

    #[test]
    fn on_stop_keeps_or_restores() {
        let c = parse("isolated_cpus = \"2-3\"\non_stop = \"restore\"\n").unwrap();
        assert_eq!(c.on_stop, OnStop::Restore);
        assert_eq!(c.on_stop.name(), "restore");
        let c = parse("on_stop = \"keep\"\nisolated_cpus = \"2-3\"\n").unwrap();
        assert_eq!(c.on_stop, OnStop::Keep);
        assert_eq!(c.on_stop.name(), "keep");
        let e = parse("isolated_cpus = \"2-3\"\non_stop = \"restor\"\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/isold/isold.toml:2: unknown on_stop value 'restor' (did you mean 'restore'?)"
        );
        let e = parse("isolated_cpus = \"2-3\"\non_stop = true\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/isold/isold.toml:2: on_stop must be a string"
        );
    }

    #[test]
    fn overrides_and_opt_outs() {
        let c = parse(
            "isolated_cpus = \"auto\"\npreset = \"cpu-partitioning\"\n\
             [items]\nthp = \"madvise\"\nksm = false\ncgroup_partition = true\nkthread_priority = true\n\
             [sysctl]\n\"vm.swappiness\" = 1\n\"kernel.nmi_watchdog\" = false\n\"kernel.printk_ratelimit\" = \"5\"\n\
             [kthread_priority]\n\"irq/*-virtio*\" = \"fifo:50\"\n\
             [tasks]\nallow_comm = [\"myapp*\"]\nallow_cgroup = [\"/machine.slice\"]\n",
        )
        .unwrap();
        assert_eq!(c.isolated, CpuSpec::Auto);
        assert_eq!(c.preset, Preset::CpuPartitioning);
        assert_eq!(c.thp.as_deref(), Some("madvise"));
        assert_eq!(c.ksm, None);
        assert_eq!(c.cgroup_partition.as_deref(), Some(DEFAULT_PARTITION));
        assert!(c.sysctl.contains(&("vm.swappiness".into(), "1".into())));
        assert!(!c.sysctl.iter().any(|(k, _)| k == "kernel.nmi_watchdog"));
        assert!(c
            .sysctl
            .contains(&("kernel.printk_ratelimit".into(), "5".into())));
        assert!(!c
            .sysctl
            .iter()
            .any(|(k, _)| k == "kernel.sched_rt_runtime_us"));
        assert_eq!(
            c.kthread_priority,
            vec![("irq/*-virtio*".into(), SchedPolicy::Fifo(50))]
        );
        assert!(c.allow_comm.contains(&"myapp*".to_string()));
        assert!(c.allow_comm.contains(&"pmd*".to_string()));
        assert_eq!(c.allow_cgroup, vec!["/machine.slice".to_string()]);
        assert!(c.systemd_cpuaffinity);
    }

    #[test]
    fn errors_name_file_line_and_reason() {
        for (text, line, want) in [
            (
                "isolated_cpu = \"2-3\"\n",
                Some(1),
                "unknown key 'isolated_cpu' (did you mean 'isolated_cpus'?)",
            ),
            (
                "\n\nisolated_cpus = \"2-x\"\n",
                Some(3),
                "isolated_cpus: invalid CPU list",
            ),
            (
                "isolated_cpus = \"2\"\npreset = \"realtime-virtual\"\n",
                Some(2),
                "unknown preset 'realtime-virtual' (did you mean 'realtime-virtual-host'?)",
            ),
            (
                "isolated_cpus = \"2\"\n[items]\nthp = \"nevr\"\n",
                Some(3),
                "thp takes never, madvise, always or false, not \"nevr\"",
            ),
            (
                "isolated_cpus = \"2\"\n[items]\nirq_afinity = false\n",
                Some(3),
                "unknown item 'irq_afinity' (did you mean 'irq_affinity'?)",
            ),
            (
                "isolated_cpus = \"2\"\n[sysctl]\n\"vm.swappiness\" = true\n",
                Some(3),
                "takes a number, a string or false",
            ),
            (
                "isolated_cpus = \"2\"\n[kthread_priority]\n\"rcuc/*\" = \"fifo:100\"\n",
                Some(3),
                "bad priority",
            ),
            (
                "isolated_cpus = \"2\"\n[tasks]\nallow_cgroup = [\"machine.slice\"]\n",
                Some(3),
                "not a cgroup path",
            ),
            (
                "isolated_cpus = 2\n",
                Some(1),
                "isolated_cpus must be a string",
            ),
            ("preset = \"realtime\"\n", None, "isolated_cpus is missing"),
            ("isolated_cpus = \"2\"\n[items\n", Some(2), "not valid TOML"),
            (
                "isolated_cpus = \"2\"\n[kvm]\nkvmclock = 0\n",
                Some(3),
                "not module.parameter",
            ),
            (
                "isolated_cpus = \"2\"\n[items]\npm_qos = -1\n",
                Some(3),
                "pm_qos takes",
            ),
            (
                "isolated_cpus = \"2\"\n[items]\nirq_affinity = \"yes\"\n",
                Some(3),
                "irq_affinity takes true or false, not \"yes\"",
            ),
            // Far from every item: the list, not a guess.
            (
                "isolated_cpus = \"2\"\n[items]\ncgroup = true\n",
                Some(3),
                "unknown item 'cgroup' (valid: ",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.reason.contains(want), "{text:?}: {e}");
            assert!(e.to_string().starts_with("/etc/isold/isold.toml:"), "{e}");
        }
    }

    /// Every value check of the file, accepted and refused, each refusal with its reason.
    #[test]
    fn values_are_checked_one_by_one() {
        let ok = |body: &str| {
            parse(&format!("isolated_cpus = \"2\"\n{body}"))
                .unwrap_or_else(|e| panic!("{body:?}: {e}"))
        };
        let refused = |body: &str, want: &str| {
            let e = parse(&format!("isolated_cpus = \"2\"\n{body}")).unwrap_err();
            assert!(e.reason.contains(want), "{body:?}: {e}");
        };
        let part = |v: &str| format!("[items]\ncgroup_partition = \"{v}\"\n");
        assert_eq!(
            ok(&part("/sys/fs/cgroup/rt/")).cgroup_partition.as_deref(),
            Some("/sys/fs/cgroup/rt")
        );
        assert_eq!(
            ok(&part("/sys/fs/cgroup/a")).cgroup_partition.as_deref(),
            Some("/sys/fs/cgroup/a")
        );
        assert_eq!(
            ok("[items]\ncgroup_partition = false\n").cgroup_partition,
            None
        );
        for bad in [
            "/sys/fs/cgroup/",
            "/sys/fs/cgroup",
            "/sys/fs/cgroupx/a",
            "/sys/fs/cgroup/../etc",
            "/sys/fs/cgroup/./a",
            "/sys/fs/cgroup/a/..",
            "/tmp/x",
        ] {
            refused(
                &part(bad),
                "cgroup_partition takes true, false or a cgroup directory below /sys/fs/cgroup/",
            );
        }
        refused(
            "[sysctl]\n\"vm.swappiness\" = \"1\\n2\"\n",
            "a value cannot span lines",
        );
        refused("[sysctl]\n\"vm.swappiness\" = \"true\"\n", "needs a value");
        refused(
            "[kthread_priority]\n\"ksoftirqd/*\" = true\n",
            "takes \"fifo:N\"",
        );
        assert!(!ok("[kthread_priority]\n\"ksoftirqd/*\" = false\n")
            .kthread_priority
            .iter()
            .any(|(p, _)| p == "ksoftirqd/*"));
        let kvm = ok("[kvm]\n\"kvm.halt_poll_ns\" = 0\n\"kvm.nx_huge_pages\" = false\n").kvm;
        assert!(kvm.contains(&("kvm".into(), "halt_poll_ns".into(), "0".into())));
        assert!(!kvm
            .iter()
            .any(|(m, p, _)| m == "kvm" && p == "nx_huge_pages"));
        for key in ["kvm", ".x", "kvm.", "kv m.x", "kvm.a-b"] {
            refused(
                &format!("[kvm]\n\"{key}\" = 1\n"),
                "is not module.parameter",
            );
        }
        refused("[kvm]\n\"kvm.x\" = \"\"\n", "bad value");
        refused("[kvm]\n\"kvm.x\" = \"a b\"\n", "bad value");
        refused(
            "[kvm]\n\"kvm.x\" = true\n",
            "takes a number, a string or false",
        );
        refused(
            "[tasks]\nallow_comm = [\"\"]\n",
            "must be an array of non-empty strings",
        );
        refused(
            "[tasks]\nallow_comm = [1]\n",
            "must be an array of non-empty strings",
        );
        refused(
            "[tasks]\nallow_comm = \"x\"\n",
            "must be an array of strings",
        );
        refused("[tasks]\nallow_pid = [\"x\"]\n", "unknown key 'allow_pid'");
        let e = parse("isolated_cpus = \"\"\n").unwrap_err();
        assert!(e.reason.contains("isolated_cpus is empty"), "{e}");
    }

    /// `true` keeps a list item's preset entries, `false` empties it; cpufreq takes a
    /// governor's name, nothing else.
    #[test]
    fn list_items_switch_and_cpufreq_takes_a_name() {
        let on = parse(
            "isolated_cpus = \"2\"\n[items]\nsysctl = true\nkthread_priority = true\nkvm = true\n",
        )
        .unwrap();
        assert!(!on.sysctl.is_empty());
        assert!(!on.kvm.is_empty());
        assert!(!on.kthread_priority.is_empty());
        let off = parse(
            "isolated_cpus = \"2\"\n[items]\nsysctl = false\nkthread_priority = false\nkvm = false\n",
        )
        .unwrap();
        assert!(off.sysctl.is_empty());
        assert!(off.kvm.is_empty());
        assert!(off.kthread_priority.is_empty());
        for good in ["performance", "my_gov2"] {
            let c = parse(&format!(
                "isolated_cpus = \"2\"\n[items]\ncpufreq = \"{good}\"\n"
            ))
            .unwrap();
            assert_eq!(c.cpufreq.as_deref(), Some(good));
        }
        for bad in ["", "perf ormance", "../x", "per-formance"] {
            let e = parse(&format!(
                "isolated_cpus = \"2\"\n[items]\ncpufreq = \"{bad}\"\n"
            ))
            .unwrap_err();
            assert!(
                e.reason.contains("cpufreq takes a governor name or false"),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn scheduling_policies_and_their_priorities() {
        assert_eq!(parse_sched("fifo:1"), Ok(SchedPolicy::Fifo(1)));
        assert_eq!(parse_sched("rr:99"), Ok(SchedPolicy::RoundRobin(99)));
        assert_eq!(parse_sched("other"), Ok(SchedPolicy::Other));
        for bad in ["other:5", "rr", "rr:0", "fifo:100", "batch:1", "fifo:x"] {
            assert!(parse_sched(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_bool("tasks", "false"), Ok(false));
        assert_eq!(parse_bool("tasks", "true"), Ok(true));
    }

    /// A restricted copy keeps exactly the items named, for every item of the table and
    /// every preset, and nothing else of the file changes.
    #[test]
    fn restricted_copies_keep_exactly_the_items_named() {
        let off_all = |c: &Config| {
            let mut d = c.clone();
            for (item, _) in ITEMS {
                d.set_item(item, "false").unwrap();
            }
            d
        };
        for p in Preset::ALL {
            let text = format!(
                "isolated_cpus = \"1\"\npreset = \"{p}\"\n[tasks]\nallow_comm = [\"x*\"]\n"
            );
            let c = parse(&text).unwrap();
            assert_eq!(c.only(&[]), off_all(&c));
            assert_eq!(c.without(&[]), c);
            for (item, _) in ITEMS {
                let mut want = c.clone();
                want.set_item(item, "false").unwrap();
                assert_eq!(c.without(&[item]), want, "{p} without {item}");
                let only = c.only(&[item]);
                assert_eq!(only.without(&[item]), off_all(&c), "{p} only {item}");
                assert_eq!(only.allow_comm, c.allow_comm);
                assert_eq!(
                    (only.file.clone(), only.isolated.clone()),
                    (c.file.clone(), c.isolated.clone())
                );
            }
        }
        let c = parse("isolated_cpus = \"1\"\n").unwrap();
        let only = c.only(&["cgroup_partition", "tasks"]);
        assert!(only.tasks && only.sysctl.is_empty() && only.kthread_priority.is_empty());
        assert_eq!(only.cgroup_partition, c.cgroup_partition);
    }

    #[test]
    fn every_preset_parses_with_every_item_switched() {
        for p in Preset::ALL {
            for (item, _) in ITEMS {
                for v in ["true", "false"] {
                    let text =
                        format!("isolated_cpus = \"1\"\npreset = \"{p}\"\n[items]\n{item} = {v}\n");
                    let c = parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
                    if v == "false" {
                        assert_eq!(c, {
                            let mut d =
                                parse(&text.replace(&format!("{item} = false"), "")).unwrap();
                            d.set_item(item, "false").unwrap();
                            d
                        });
                    }
                }
            }
        }
    }

    #[test]
    fn thread_name_globs() {
        assert!(glob_match("ksoftirqd/*", "ksoftirqd/3"));
        assert!(glob_match("CPU */KVM", "CPU 12/KVM"));
        assert!(glob_match("pmd*", "pmd-c03/id:7"));
        assert!(glob_match("rcu[bc]/?", "rcuc/2"));
        assert!(glob_match("rcu[!o]/*", "rcub/0"));
        assert!(!glob_match("rcu[!o]*", "rcuop/1"));
        assert!(glob_match("irq/[0-9]*-virtio*", "irq/25-virtio0-input.0"));
        assert!(!glob_match("ksoftirqd/*", "kworker/0:1"));
        assert!(!glob_match("pmd", "pmd1"));
        assert!(glob_match("a[", "a["));
        // The '!' or '^' that negates a class is not one of its members.
        assert!(glob_match("[!a]", "!"));
        assert!(glob_match("[^a]", "^"));
        assert!(!glob_match("[!a]", "a"));
        // A '-' before ']' or at the end is a member, not a range; an unclosed class is
        // literal text.
        assert!(glob_match("[a-]", "-"));
        assert!(glob_match("[xa-c]", "b"));
        assert!(
            !glob_match("[b-d]", "a") && !glob_match("[b-d]", "e"),
            "a range has two ends"
        );
        assert!(glob_match("[a-", "[a-"));
        assert!(!glob_match("[a-", "a"));
        assert!(!glob_match("a?", "a"), "'?' needs a character");
        assert!(
            !glob_match("a[", "ab"),
            "an unclosed class matches only '['"
        );
        assert!(glob_match("[]a]", "]") && glob_match("[!]a]", "b") && !glob_match("[!]a]", "]"));
        assert!(glob_match("*", "") && glob_match("**", "x") && !glob_match("?*", ""));
        assert!(glob_match("a*b*c", "aXbYbc") && !glob_match("a*b*c", "aXcYb"));
        assert!(
            glob_match("*ab", "aab") && glob_match("ab*ab", "abab") && !glob_match("ab*ab", "aba")
        );
        assert!(glob_match("/kubepods/*/pod*", "/kubepods/burstable/pod12"));
    }

    /// The pattern that took the recursive matcher 14 s over 130 thread names: sixteen `*?`
    /// then `*Z`, against names without a Z. The count of characters compared stays within
    /// |pattern| x |name|, also for a name a thousand characters long.
    #[test]
    fn a_pathological_pattern_costs_at_most_pattern_times_name() {
        let pattern = format!("{}*Z", "*?".repeat(16));
        for len in [15usize, 64, 1000] {
            let name = "a".repeat(len);
            let (hit, steps) = glob_steps(&pattern, &name);
            assert!(!hit);
            assert!(
                steps <= pattern.len() * len,
                "{steps} steps for a {len}-character name"
            );
            let (hit, _) = glob_steps(&pattern, &format!("{name}Z"));
            assert_eq!(hit, len >= 16, "{len}");
        }
        // The count is a count: each character compared once, no more and no fewer (a
        // bound over a count that stays 0 proves nothing).
        assert_eq!(glob_steps("abc", "abc"), (true, 3));
        assert_eq!(glob_steps("a*c", "abbc"), (true, 2));
        assert_eq!(glob_steps("ab", "ax"), (false, 2));
    }

    /// Against the recursive matcher it replaces, on every pattern and name built from a
    /// small alphabet: the same answers.
    #[test]
    fn the_segment_matcher_agrees_with_the_recursive_one() {
        fn slow(p: &[char], n: &[char]) -> bool {
            match p.first() {
                None => n.is_empty(),
                Some('*') => (0..=n.len()).any(|k| slow(&p[1..], &n[k..])),
                Some('?') => !n.is_empty() && slow(&p[1..], &n[1..]),
                Some(c) => n.first() == Some(c) && slow(&p[1..], &n[1..]),
            }
        }
        let alphabet = ['a', 'b', '*', '?'];
        let words = |max: usize, with: &[char]| {
            let mut out = vec![String::new()];
            let mut last = vec![String::new()];
            for _ in 0..max {
                last = last
                    .iter()
                    .flat_map(|w| with.iter().map(move |c| format!("{w}{c}")))
                    .collect();
                out.extend(last.iter().cloned());
            }
            out
        };
        let names = words(5, &['a', 'b']);
        for p in words(5, &alphabet) {
            let pc: Vec<char> = p.chars().collect();
            for n in &names {
                let nc: Vec<char> = n.chars().collect();
                assert_eq!(glob_match(&p, n), slow(&pc, &nc), "{p:?} {n:?}");
            }
        }
    }
}
