//! `isold run`'s metrics (`[metrics]` in isold.toml), in Prometheus's text format (the
//! `prometheus` crate's registry and encoder): the daemon's own work, and the health of each
//! isolated CPU sampled every `interval` the way `isold audit` samples it
//! ([`libtaskisol::audit::Sample`]). Published on a loopback HTTP listener (`GET /metrics`
//! only; nothing it serves changes anything) and/or in a file for node_exporter's textfile
//! collector, replaced by rename so that a reader never sees half of it.
//!
//! Series stay few: the per-CPU ones exist for the isolated CPUs only, and a source that
//! never fired on a CPU has no series there; a value named by a network device or a thread,
//! which come and go, has no series of its own ([`repair_value`]).

mod health;
mod http;

use std::collections::HashMap;
use std::sync::Mutex;

use libtaskisol::cpuset::CpuSet;
use libtaskisol::policy::Policy;
use prometheus::core::Collector;
use prometheus::{
    CounterVec, Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter,
    IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

pub use health::{scope_of, WALK_DUTY, WALK_EVERY_SAMPLES};
pub use http::{head_len, listen, route, sandbox_hint, serve, Route, LIMITS};

use health::{Last, Walked};

/// Every metric name isold publishes (man/isold.8 lists the same; a test keeps them equal).
pub const NAMES: &[&str] = &[
    "isold_info",
    "isold_corrections_total",
    "isold_task_correction_seconds",
    "isold_drift_repairs_total",
    "isold_contested_values",
    "isold_owner_pins_total",
    "isold_policy_holds",
    "isold_claims_refused_total",
    "isold_nri_connected",
    "isold_cpu_interrupts_total",
    "isold_cpu_softirqs_total",
    "isold_cpu_foreign_context_switches_total",
    "isold_cpu_tick_rate_hertz",
    "isold_health_samples_total",
    "isold_health_sample_duration_seconds",
    "isold_service_cpu_seconds_total",
    "isold_stall_rescues_total",
    "isold_stall_lent_seconds_total",
    "isold_stall_wait_seconds",
    "isold_stall_loans",
    "isold_stall_guard_cpu_seconds",
    "isold_cpu_noise_seconds_total",
    "isold_cpu_noise_events_total",
    "isold_cpu_noise_duration_seconds",
];

/// The reasons of `isold_claims_refused_total` (libtaskisol's `ClaimError::reason`, and
/// `state`: the claims file could not be written).
pub const CLAIM_REFUSALS: [&str; 7] = [
    "not_allowed",
    "shared",
    "no_housekeeping",
    "power_conflict",
    "no_process",
    "invalid",
    "state",
];

/// The daemon's metrics. Cheap to update from any thread (atomics); encoded on demand.
pub struct Metrics {
    registry: Registry,
    info: IntGaugeVec,
    corrections: IntCounterVec,
    task_reaction: Histogram,
    drift_repairs: IntCounterVec,
    contested: IntGauge,
    owner_pins: IntCounter,
    holds: IntGauge,
    claims_refused: IntCounterVec,
    nri_connected: IntGauge,
    cpu_interrupts: IntCounterVec,
    cpu_softirqs: IntCounterVec,
    cpu_foreign_switches: IntCounterVec,
    cpu_tick_rate: GaugeVec,
    samples: IntCounter,
    sample_seconds: Gauge,
    stall_rescues: IntCounterVec,
    stall_lent_seconds: CounterVec,
    stall_wait: Histogram,
    stall_lent: IntGauge,
    stall_cpu: Gauge,
    noise_seconds: CounterVec,
    noise_events: IntCounterVec,
    noise_duration: HistogramVec,
    /// What the noise counters have counted so far, for the differences.
    noise_counted: Mutex<NoiseCounted>,
    /// The last health sample, for the differences.
    last: Mutex<Option<Last>>,
    /// The last walk of the threads: when, what it cost, and the samples taken since.
    walked: Mutex<Option<Walked>>,
    /// The CPUs whose foreign context switches the noise ledger counts as it reads them
    /// (every thread it sees come on one of them that is neither the workload nor isold):
    /// the walks leave them out.
    switches_by_ledger: Mutex<CpuSet>,
    service_cpu: CounterVec,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// What the noise counters were given so far: each source's totals, and the sources that
/// have a label of their own (at most twice `[noise] sources` per CPU; the rest count as
/// `other`).
#[derive(Default)]
struct NoiseCounted {
    totals: HashMap<(usize, libtaskisol::noise::Source), (u64, u64)>,
    named: HashMap<usize, std::collections::HashSet<libtaskisol::noise::Source>>,
}

/// The noise histogram's bounds, seconds: 1 us to 10 ms, 20 us among them.
pub const NOISE_BUCKETS: [f64; 13] = [
    1e-6, 2e-6, 5e-6, 10e-6, 20e-6, 50e-6, 100e-6, 200e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3,
];

fn must<T>(r: prometheus::Result<T>) -> T {
    // The names and labels are constants of this file: a failure is a bug, caught by the
    // tests that build a Metrics.
    r.expect("metric definition")
}

impl Metrics {
    /// The metrics of a daemon keeping `policy`.
    ///
    /// Long because it registers every metric family, one statement each, so that the exposition's
    /// names and help texts read as one list.
    pub fn new(policy: &Policy) -> Metrics {
        let registry = Registry::new();
        let reg = |c: Box<dyn Collector>| must(registry.register(c));
        let info = must(IntGaugeVec::new(
            Opts::new("isold_info", "isold run's version and policy (always 1)"),
            &["version", "preset", "isolated"],
        ));
        info.with_label_values(&[
            env!("CARGO_PKG_VERSION"),
            policy.preset().name(),
            &policy.isolated.to_string(),
        ])
        .set(1);
        let corrections = must(IntCounterVec::new(
            Opts::new(
                "isold_corrections_total",
                "Values isold put right again after the first apply, by item (task, irq_affinity, sysctl, ...)",
            ),
            &["kind"],
        ));
        let task_reaction = must(Histogram::with_opts(
            HistogramOpts::new(
                "isold_task_correction_seconds",
                "Time from the kernel's event of a wide task (fork, exec, rename) to its affinity read back narrowed",
            )
            .buckets(vec![
                0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0,
            ]),
        ));
        let drift_repairs = must(IntCounterVec::new(
            Opts::new(
                "isold_drift_repairs_total",
                "Values without change events (sysctls, sysfs, IRQs, workqueues) put back after they drifted, by value (rps:*, net_queues:*, sched:* for those of network devices and threads)",
            ),
            &["item", "value"],
        ));
        let contested = must(IntGauge::new(
            "isold_contested_values",
            "Values something else keeps changing back, left alone for a growing back-off",
        ));
        let owner_pins = must(IntCounter::new(
            "isold_owner_pins_total",
            "Threads left on an affinity their owner set while isold was narrowing them (libvirt's vcpupin, DPDK, taskset -p); never counted as corrections",
        ));
        let holds = must(IntGauge::new(
            "isold_policy_holds",
            "1 when the last check found the policy in force, with nothing contested or failed; else 0",
        ));
        let per_cpu = |name: &str, help: &str, label: &str| {
            must(IntCounterVec::new(Opts::new(name, help), &["cpu", label]))
        };
        let cpu_interrupts = per_cpu(
            "isold_cpu_interrupts_total",
            "Interrupts on an isolated CPU, by source (LOC, RES, CAL, TLB, ..., or a device IRQ's handler name), as /proc/interrupts counts them",
            "source",
        );
        let cpu_softirqs = per_cpu(
            "isold_cpu_softirqs_total",
            "Softirqs on an isolated CPU, by kind, as /proc/softirqs counts them",
            "kind",
        );
        let cpu_foreign_switches = must(IntCounterVec::new(
            Opts::new(
                "isold_cpu_foreign_context_switches_total",
                "Context switches of threads that are not the workload's (kernel threads included) onto an isolated CPU: as the noise ledger sees them on the CPUs it records, else counted at each walk of the threads (one health sample in ten at most)",
            ),
            &["cpu"],
        ));
        let cpu_tick_rate = must(GaugeVec::new(
            Opts::new(
                "isold_cpu_tick_rate_hertz",
                "Local timer interrupts per second on an isolated CPU over the last health interval (nohz_full: about 1 with one task, 0 idle)",
            ),
            &["cpu"],
        ));
        let claims_refused = must(IntCounterVec::new(
            Opts::new(
                "isold_claims_refused_total",
                "Containers' claims refused, by reason (not_allowed, shared, no_housekeeping, power_conflict, no_process, invalid, state)",
            ),
            &["reason"],
        ));
        // Every reason at 0 from the start: a rate or an alert sees the series before the
        // first refusal.
        for reason in CLAIM_REFUSALS {
            claims_refused.with_label_values(&[reason]);
        }
        let nri_connected = must(IntGauge::new(
            "isold_nri_connected",
            "1 while isold is registered with the runtime's NRI socket ([containers] nri), 0 while it dials again; absent without NRI",
        ));
        let samples = must(IntCounter::new(
            "isold_health_samples_total",
            "Health samples taken",
        ));
        let sample_seconds = must(Gauge::new(
            "isold_health_sample_duration_seconds",
            "Wall time of the last health sample (the interrupt tables read; every thread too, one sample in ten at most)",
        ));
        let service_cpu = must(CounterVec::new(
            Opts::new(
                "isold_service_cpu_seconds_total",
                "CPU time of the daemon's threads by the service they work for (events and tasks, drift watch, metrics, noise ledger, stall guard, hook socket, NRI plugin), as of the last task sweep",
            ),
            &["service"],
        ));
        let stall_rescues = must(IntCounterVec::new(
            Opts::new(
                "isold_stall_rescues_total",
                "Threads starved on an isolated CPU (runnable, not run for [stalls] threshold) that the stall guard lent a slice, by CPU and kind (percpu_kthread, kthread, task)",
            ),
            &["cpu", "kind"],
        ));
        let stall_lent_seconds = must(CounterVec::new(
            Opts::new(
                "isold_stall_lent_seconds_total",
                "CPU time the threads the stall guard lent a slice used on an isolated CPU (counted when each loan ends): what the workload gave up, by CPU",
            ),
            &["cpu"],
        ));
        let stall_wait = must(Histogram::with_opts(
            HistogramOpts::new(
                "isold_stall_wait_seconds",
                "How long a starved thread had waited, runnable, when the stall guard lent it a slice",
            )
            .buckets(vec![0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0]),
        ));
        let stall_lent = must(IntGauge::new(
            "isold_stall_loans",
            "Threads the stall guard lends a slice now",
        ));
        let stall_cpu = must(Gauge::new(
            "isold_stall_guard_cpu_seconds",
            "CPU time the stall guard's thread used since the start (on a housekeeping CPU)",
        ));
        let noise_seconds = must(CounterVec::new(
            Opts::new(
                "isold_cpu_noise_seconds_total",
                "Time interruptions took from an isolated CPU, net of the ones nested in them (the noise ledger), by CPU, kind (irq, softirq, ipi, timer, vector, nmi, thread) and source; sources past [noise] sources are summed as other",
            ),
            &["cpu", "kind", "source"],
        ));
        let noise_events = must(IntCounterVec::new(
            Opts::new(
                "isold_cpu_noise_events_total",
                "Interruptions of an isolated CPU (the noise ledger), by CPU, kind and source",
            ),
            &["cpu", "kind", "source"],
        ));
        let noise_duration = must(HistogramVec::new(
            HistogramOpts::new(
                "isold_cpu_noise_duration_seconds",
                "How long each interruption of an isolated CPU took (net), by CPU",
            )
            .buckets(NOISE_BUCKETS.to_vec()),
            &["cpu"],
        ));
        reg(Box::new(info.clone()));
        reg(Box::new(corrections.clone()));
        reg(Box::new(task_reaction.clone()));
        reg(Box::new(drift_repairs.clone()));
        reg(Box::new(contested.clone()));
        reg(Box::new(owner_pins.clone()));
        reg(Box::new(holds.clone()));
        reg(Box::new(claims_refused.clone()));
        if policy.containers().is_some_and(|c| c.nri) {
            reg(Box::new(nri_connected.clone()));
        }
        reg(Box::new(cpu_interrupts.clone()));
        reg(Box::new(cpu_softirqs.clone()));
        reg(Box::new(cpu_foreign_switches.clone()));
        reg(Box::new(cpu_tick_rate.clone()));
        reg(Box::new(samples.clone()));
        reg(Box::new(sample_seconds.clone()));
        reg(Box::new(service_cpu.clone()));
        // Also with the guard off: a reload may turn it on.
        reg(Box::new(stall_rescues.clone()));
        reg(Box::new(stall_lent_seconds.clone()));
        reg(Box::new(stall_wait.clone()));
        reg(Box::new(stall_lent.clone()));
        reg(Box::new(stall_cpu.clone()));
        reg(Box::new(noise_seconds.clone()));
        reg(Box::new(noise_events.clone()));
        reg(Box::new(noise_duration.clone()));
        Metrics {
            registry,
            info,
            corrections,
            task_reaction,
            drift_repairs,
            contested,
            owner_pins,
            holds,
            claims_refused,
            nri_connected,
            cpu_interrupts,
            cpu_softirqs,
            cpu_foreign_switches,
            cpu_tick_rate,
            samples,
            sample_seconds,
            stall_rescues,
            stall_lent_seconds,
            stall_wait,
            stall_lent,
            stall_cpu,
            noise_seconds,
            noise_events,
            noise_duration,
            noise_counted: Mutex::new(NoiseCounted::default()),
            last: Mutex::new(None),
            walked: Mutex::new(None),
            switches_by_ledger: Mutex::new(CpuSet::new()),
            service_cpu,
        }
    }

    /// A new policy (reload): its info line.
    pub fn policy(&self, policy: &Policy) {
        self.info.reset();
        self.info
            .with_label_values(&[
                env!("CARGO_PKG_VERSION"),
                policy.preset().name(),
                &policy.isolated.to_string(),
            ])
            .set(1);
    }

    /// A value of `item` put right again; `value` (the target's id) when it is a drift
    /// repair (a value without change events), `None` for a task.
    pub fn corrected(&self, item: &str, value: Option<&str>) {
        self.corrections.with_label_values(&[item]).inc();
        if let Some(v) = value {
            self.drift_repairs
                .with_label_values(&[item, &repair_value(v)])
                .inc();
        }
    }

    /// A thread left on its owner's affinity, set while isold narrowed it.
    /// Each service's CPU time grown since the last reading, seconds (the daemon's meter,
    /// `daemon::cpu`, says by how much).
    pub fn service_cpu(&self, grown: &[(String, f64)]) {
        for (name, s) in grown {
            if *s > 0.0 {
                self.service_cpu.with_label_values(&[name]).inc_by(*s);
            }
        }
    }

    pub fn owner_pin(&self) {
        self.owner_pins.inc();
    }

    /// A wide task narrowed `seconds` after its event.
    pub fn task_reaction(&self, seconds: f64) {
        self.task_reaction.observe(seconds);
    }

    /// The number of contested values now.
    pub fn contested(&self, n: usize) {
        self.contested.set(n as i64);
    }

    /// A container's claim refused for `reason`.
    pub fn claim_refused(&self, reason: &str) {
        self.claims_refused.with_label_values(&[reason]).inc();
    }

    /// Whether the NRI plugin is registered with the runtime now.
    pub fn nri_connected(&self, yes: bool) {
        self.nri_connected.set(i64::from(yes));
    }

    /// A starved thread lent a slice after `waited` seconds.
    pub fn stall_rescue(&self, cpu: u32, kind: &str, waited: f64) {
        self.stall_rescues
            .with_label_values(&[&cpu.to_string(), kind])
            .inc();
        self.stall_wait.observe(waited);
    }

    /// A loan ended: the CPU time its thread used on `cpu`.
    pub fn stall_lent(&self, cpu: u32, seconds: f64) {
        self.stall_lent_seconds
            .with_label_values(&[&cpu.to_string()])
            .inc_by(seconds);
    }

    /// The stall guard's loans now and its CPU time so far.
    pub fn stall_figures(&self, lent: usize, cpu_s: f64) {
        self.stall_lent.set(lent as i64);
        self.stall_cpu.set(cpu_s);
    }

    /// One interruption of `cpu`, `seconds` long.
    pub fn noise_observe(&self, cpu: usize, seconds: f64) {
        self.noise_duration
            .with_label_values(&[&cpu.to_string()])
            .observe(seconds);
    }

    /// The noise ledger records `cpus` (none: it stopped) and counts their foreign context
    /// switches from now on ([`Metrics::foreign_switch`]).
    pub fn ledger_counts_switches(&self, cpus: &CpuSet) {
        *self
            .switches_by_ledger
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = cpus.clone();
    }

    /// A thread that is neither the workload nor isold came on `cpu`, as the noise ledger
    /// saw it.
    pub fn foreign_switch(&self, cpu: usize) {
        self.cpu_foreign_switches
            .with_label_values(&[&cpu.to_string()])
            .inc();
    }

    /// The noise ledger's sums now: what grew since the last call is counted. The `top`
    /// sources of each CPU by time get a label of their own (and keep it, up to twice
    /// `top`); the others are summed as `other` of their kind.
    pub fn noise_sums(
        &self,
        sums: &std::collections::BTreeMap<usize, libtaskisol::noise::Sums>,
        top: usize,
    ) {
        let mut counted = self.noise_counted.lock().unwrap_or_else(|e| e.into_inner());
        let counted = &mut *counted;
        for (&cpu, s) in sums {
            let mut ranked: Vec<(&libtaskisol::noise::Source, &libtaskisol::noise::Tally)> =
                s.by_source.iter().collect();
            ranked.sort_by(|a, b| b.1.ns.cmp(&a.1.ns).then_with(|| a.0.cmp(b.0)));
            let named = counted.named.entry(cpu).or_default();
            for (src, _) in ranked.iter().take(top) {
                if named.len() < 2 * top {
                    named.insert((*src).clone());
                }
            }
            let c = cpu.to_string();
            for (src, t) in ranked {
                let last = counted.totals.entry((cpu, src.clone())).or_insert((0, 0));
                let (events, ns) = (t.events - last.0.min(t.events), t.ns - last.1.min(t.ns));
                *last = (t.events, t.ns);
                if events == 0 && ns == 0 {
                    continue;
                }
                let label = if named.contains(src) {
                    src.name.as_str()
                } else {
                    "other"
                };
                let l = [c.as_str(), src.kind.as_str(), label];
                self.noise_events.with_label_values(&l).inc_by(events);
                self.noise_seconds
                    .with_label_values(&l)
                    .inc_by(ns as f64 / 1e9);
            }
        }
    }

    /// Whether the policy holds now.
    pub fn holds(&self, yes: bool) {
        self.holds.set(i64::from(yes));
    }

    /// The text format of every metric.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail on I/O; a metric that cannot be encoded is a bug.
        must(TextEncoder::new().encode(&self.registry.gather(), &mut out));
        out
    }
}

/// The `value` label of `isold_drift_repairs_total` for the target `id`: the id of a value
/// the machine has a fixed set of (`sysctl:vm.stat_interval`, `irq:4`, `workqueue:cpumask`,
/// `rps:default`, a file), and for one named by a network device or a thread, which come and
/// go, its kind with `*` for the device or thread (`rps:*` for `rps:DEV:rx-N`,
/// `net_queues:*`, `sched:*`, `task:*`): every pod's veth would otherwise add a series that
/// lives as long as the daemon.
pub fn repair_value(id: &str) -> std::borrow::Cow<'_, str> {
    match id.split_once(':') {
        Some(("rps", key)) if key != "default" => "rps:*".into(),
        Some(("net_queues", _)) => "net_queues:*".into(),
        Some(("sched", _)) => "sched:*".into(),
        Some(("task", _)) => "task:*".into(),
        _ => id.into(),
    }
}

/// Write the text format to `[metrics] textfile`: a temporary file renamed over it, 0644, not
/// synced (the next sample writes it again).
pub fn write_textfile(path: &std::path::Path, metrics: &Metrics) -> std::io::Result<()> {
    libtaskisol::policy::files::replace_volatile(path, &metrics.encode(), Some(0o644))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPUs the noise ledger records are never walked for their foreign context switches:
    /// the ledger counts them as it sees threads come on; the others are walked as before.
    #[test]
    fn the_ledgers_cpus_are_not_walked_and_its_switches_are_counted() {
        let (_dir, tree) = crate::testing::captured_tree();
        let root = libtaskisol::SysRoot::new(&tree);
        let p = policy();
        let scope = scope_of(&p);
        let m = Metrics::new(&p);
        let walked = |m: &Metrics| {
            m.walked
                .lock()
                .unwrap()
                .as_ref()
                .map(|w| w.cpus.to_string())
        };
        m.sample(&root, &scope).unwrap();
        assert_eq!(
            walked(&m).as_deref(),
            Some("2-3"),
            "no ledger: the first sample walks"
        );
        m.ledger_counts_switches(&"2-3".parse().unwrap());
        *m.walked.lock().unwrap() = None;
        m.sample(&root, &scope).unwrap();
        assert_eq!(
            walked(&m),
            None,
            "every CPU the ledger's: no walk, though one is due"
        );
        m.foreign_switch(3);
        m.foreign_switch(3);
        let text = String::from_utf8(m.encode()).unwrap();
        assert!(
            text.contains("isold_cpu_foreign_context_switches_total{cpu=\"3\"} 2"),
            "{text}"
        );
        // ksoftirqd/2 switched 40 times while the ledger counted CPU 2's switches: the walk
        // that takes CPU 2 back starts its counts there, and counts none of them again.
        let st = tree.join("proc/43/task/43/status");
        let text = std::fs::read_to_string(&st).unwrap();
        assert!(text.contains("voluntary_ctxt_switches:\t2461"));
        std::fs::write(
            &st,
            text.replace(
                "voluntary_ctxt_switches:\t2461",
                "voluntary_ctxt_switches:\t2501",
            ),
        )
        .unwrap();
        m.ledger_counts_switches(&"3".parse().unwrap());
        m.sample(&root, &scope).unwrap();
        assert_eq!(walked(&m).as_deref(), Some("2"), "CPU 2 alone walked");
        let text = String::from_utf8(m.encode()).unwrap();
        assert!(
            !text.contains("isold_cpu_foreign_context_switches_total{cpu=\"2\"}"),
            "{text}"
        );
        m.ledger_counts_switches(&CpuSet::new());
        *m.walked.lock().unwrap() = None;
        m.sample(&root, &scope).unwrap();
        assert_eq!(
            walked(&m).as_deref(),
            Some("2-3"),
            "the ledger stopped: both walked"
        );
    }

    /// CPUs 2-3 isolated of 0-3, realtime-virtual-host.
    fn policy() -> Policy {
        let iso: CpuSet = "2-3".parse().unwrap();
        Policy {
            config: libtaskisol::policy::config::Config::defaults(
                libtaskisol::policy::preset::Preset::RealtimeVirtualHost,
                libtaskisol::policy::config::CpuSpec::List(iso.clone()),
            ),
            online: "0-3".parse().unwrap(),
            isolated: iso,
            housekeeping: "0-1".parse().unwrap(),
            claimed: CpuSet::new(),
            claimed_power: Default::default(),
        }
    }

    #[test]
    fn each_services_cpu_time_grows_its_counter_and_nothing_makes_no_series() {
        let m = Metrics::new(&policy());
        let grown = |s: f64| {
            vec![
                ("stall guard".to_string(), s),
                ("hook socket".to_string(), 0.0),
            ]
        };
        let counted = |m: &Metrics| m.service_cpu.with_label_values(&["stall guard"]).get();
        m.service_cpu(&grown(1.5));
        m.service_cpu(&grown(0.5));
        assert!((counted(&m) - 2.0).abs() < 1e-9, "{}", counted(&m));
        m.service_cpu(&grown(0.5));
        assert!((counted(&m) - 2.5).abs() < 1e-9, "{}", counted(&m));
        let text = String::from_utf8(m.encode()).unwrap();
        assert!(text.contains("isold_service_cpu_seconds_total{service=\"stall guard\"} 2.5"));
        assert!(!text.contains("service=\"hook socket\""), "{text}");
    }

    /// Pod churn with `rps` on: the repairs of 1,000 veths' queues (and of hot-plugged NICs'
    /// channels, and of kthreads' priorities) leave the metrics page with the series one
    /// veth gives, only the counts larger; a value the machine has a fixed set of keeps its
    /// own series.
    #[test]
    fn a_thousand_devices_repairs_leave_the_series_of_one() {
        let page = |devices: u32| {
            let m = Metrics::new(&policy());
            m.corrected("sysctl", Some("sysctl:vm.stat_interval"));
            m.corrected("rps", Some("rps:default"));
            for d in 0..devices {
                for q in 0..2 {
                    m.corrected("rps", Some(&format!("rps:veth{d:08x}:rx-{q}")));
                }
                m.corrected("net_queues", Some(&format!("net_queues:enp{d}")));
                m.corrected("kthread_priority", Some(&format!("sched:{}:77", 1000 + d)));
            }
            String::from_utf8(m.encode()).unwrap()
        };
        let (one, many) = (page(1), page(1000));
        let repairs = |text: &str| -> Vec<String> {
            text.lines()
                .filter(|l| l.starts_with("isold_drift_repairs_total{"))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(
            repairs(&many).len(),
            repairs(&one).len(),
            "the series of one device"
        );
        assert_eq!(
            repairs(&many),
            [
                "isold_drift_repairs_total{item=\"kthread_priority\",value=\"sched:*\"} 1000",
                "isold_drift_repairs_total{item=\"net_queues\",value=\"net_queues:*\"} 1000",
                "isold_drift_repairs_total{item=\"rps\",value=\"rps:*\"} 2000",
                "isold_drift_repairs_total{item=\"rps\",value=\"rps:default\"} 1",
                "isold_drift_repairs_total{item=\"sysctl\",value=\"sysctl:vm.stat_interval\"} 1",
            ]
        );
        // The same lines, the counts aside: the page grows by the digits of the counts only.
        let shape = |text: &str| -> Vec<String> {
            text.lines()
                .map(|l| {
                    l.rsplit_once(' ')
                        .map_or(l, |(series, _)| series)
                        .to_string()
                })
                .collect()
        };
        assert_eq!(shape(&one), shape(&many));
        assert!(
            many.len() <= one.len() + 20,
            "{} -> {}",
            one.len(),
            many.len()
        );
    }

    /// The ledger's sums counted by difference: the top sources named, the rest summed as
    /// `other` of their kind, a named source keeping its label, and each interruption in
    /// the histogram.
    #[test]
    fn noise_counters_name_the_top_sources_and_fold_the_rest() {
        use libtaskisol::noise::{Interruption, Kind, Source, Sums};
        let m = Metrics::new(&policy());
        let mut sums = std::collections::BTreeMap::new();
        let s: &mut Sums = sums.entry(3).or_default();
        let i = |kind, name: &str, ns| Interruption {
            start_ns: 0,
            net_ns: ns,
            source: Source {
                kind,
                name: name.into(),
            },
            counted: true,
        };
        for x in [
            i(Kind::Irq, "IRQ 4 ttyS0", 30_000),
            i(Kind::Irq, "IRQ 4 ttyS0", 10_000),
            i(Kind::Thread, "kernel thread kworker/3:1", 25_000),
            i(Kind::Irq, "IRQ 9 acpi", 1_000),
        ] {
            s.add(&x);
            m.noise_observe(3, x.net_ns as f64 / 1e9);
        }
        m.noise_sums(&sums, 2);
        // Once more with nothing new: nothing counted twice.
        m.noise_sums(&sums, 2);
        let text = String::from_utf8(m.encode()).unwrap();
        let has = |l: &str| text.lines().any(|x| x == l);
        assert!(
            has("isold_cpu_noise_events_total{cpu=\"3\",kind=\"irq\",source=\"IRQ 4 ttyS0\"} 2"),
            "{text}"
        );
        assert!(has("isold_cpu_noise_seconds_total{cpu=\"3\",kind=\"irq\",source=\"IRQ 4 ttyS0\"} 0.00004"), "{text}");
        assert!(has("isold_cpu_noise_events_total{cpu=\"3\",kind=\"thread\",source=\"kernel thread kworker/3:1\"} 1"), "{text}");
        assert!(
            has("isold_cpu_noise_events_total{cpu=\"3\",kind=\"irq\",source=\"other\"} 1"),
            "{text}"
        );
        assert!(!text.contains("IRQ 9 acpi"), "{text}");
        assert!(
            has("isold_cpu_noise_duration_seconds_bucket{cpu=\"3\",le=\"0.00002\"} 2"),
            "{text}"
        );
        assert!(
            has("isold_cpu_noise_duration_seconds_count{cpu=\"3\"} 4"),
            "{text}"
        );
    }
}
