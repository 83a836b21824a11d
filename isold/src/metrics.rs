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

use std::collections::HashMap;
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use libtaskisol::audit::{Sample, Scope, Workloads};
use libtaskisol::cpuset::CpuSet;
use libtaskisol::irq::Interrupts;
use libtaskisol::policy::config::MetricsConfig;
use libtaskisol::policy::Policy;
use libtaskisol::SysRoot;
use prometheus::core::Collector;
use prometheus::{
    CounterVec, Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter,
    IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

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
    service_cpu: CounterVec,
}

/// A walk of every thread (for the foreign context switches) is the health sample's main
/// cost: it is made at most once every [`WALK_EVERY_SAMPLES`] samples, and no more than
/// once per [`WALK_DUTY`] times its own time; the samples between read the interrupt tables
/// alone. Threads that live through two walks (the CPUs' kernel threads, a workload's
/// neighbours) have every switch counted; one that starts and exits between two walks is
/// not seen.
pub const WALK_EVERY_SAMPLES: u32 = 10;
/// See [`WALK_EVERY_SAMPLES`].
pub const WALK_DUTY: u32 = 50;

#[derive(Debug, Clone, Copy)]
struct Walked {
    at: Instant,
    cost: Duration,
    samples_since: u32,
}

impl Walked {
    /// Whether the next sample walks the threads.
    fn due(walked: Option<&Walked>, now: Instant) -> bool {
        walked.map_or(true, |w| {
            w.samples_since + 1 >= WALK_EVERY_SAMPLES
                && now.saturating_duration_since(w.at) >= w.cost * WALK_DUTY
        })
    }
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

/// What the next health sample is compared with.
struct Last {
    at: Instant,
    /// (cpu, source) -> the kernel's count, summed over rows of one source.
    interrupts: HashMap<(usize, String), u64>,
    softirqs: HashMap<(usize, String), u64>,
    /// (tid, start time) -> context switches.
    switches: HashMap<(i32, u64), u64>,
}

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
                "Context switches of threads that are not the workload's (kernel threads included) that last ran on an isolated CPU, counted at each walk of the threads (one health sample in ten at most)",
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

    /// Take a health sample under `root` for the CPUs of `scope` and add what changed since
    /// the last one.
    pub fn sample(&self, root: &SysRoot, scope: &Scope) -> libtaskisol::Result<()> {
        let t = Instant::now();
        let mut walked = self.walked.lock().unwrap_or_else(|e| e.into_inner());
        let walk = Walked::due(walked.as_ref(), t);
        let s = if walk {
            let s = Sample::read_for(root, &scope.cpus)?;
            *walked = Some(Walked {
                at: t,
                cost: t.elapsed(),
                samples_since: 0,
            });
            s
        } else {
            if let Some(w) = walked.as_mut() {
                w.samples_since += 1;
            }
            Sample::read_counters(root)?
        };
        drop(walked);
        self.take(root, scope, &s, t, walk);
        self.samples.inc();
        self.sample_seconds.set(t.elapsed().as_secs_f64());
        Ok(())
    }

    /// Add sample `s` (taken at `at`) to the counters: the differences from the last sample
    /// (the kernel's whole count the first time for the interrupt counters, which then equal
    /// the kernel's); the context switches when it `walked` the threads, from the last walk.
    fn take(&self, root: &SysRoot, scope: &Scope, s: &Sample, at: Instant, walked: bool) {
        let cpus = &scope.cpus;
        let interrupts = by_source(&s.interrupts, cpus, true);
        let softirqs = s
            .softirqs
            .as_ref()
            .map(|t| by_source(t, cpus, false))
            .unwrap_or_default();
        let workloads = Workloads::new(root, scope);
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let switches: HashMap<(i32, u64), u64> = if walked {
            s.threads
                .iter()
                .map(|t| ((t.tid, t.starttime), t.switches))
                .collect()
        } else {
            last.as_mut()
                .map(|l| std::mem::take(&mut l.switches))
                .unwrap_or_default()
        };
        let add = |vec: &IntCounterVec,
                   now: &HashMap<(usize, String), u64>,
                   before: Option<&HashMap<(usize, String), u64>>| {
            for ((cpu, source), n) in now {
                let was = before.and_then(|b| b.get(&(*cpu, source.clone())).copied());
                // A count that went down is a new one (an IRQ number given to another
                // device): all of it is new.
                let d = match was {
                    Some(w) if w <= *n => n - w,
                    _ => *n,
                };
                if d > 0 {
                    vec.with_label_values(&[&cpu.to_string(), source]).inc_by(d);
                }
            }
        };
        add(
            &self.cpu_interrupts,
            &interrupts,
            last.as_ref().map(|l| &l.interrupts),
        );
        add(
            &self.cpu_softirqs,
            &softirqs,
            last.as_ref().map(|l| &l.softirqs),
        );
        if let Some(l) = last.as_ref() {
            let me = std::process::id() as i32;
            // Between two walks `s` has no thread.
            for t in &s.threads {
                if !cpus.contains(t.processor as usize) || t.pid == me || workloads.is(t) {
                    continue;
                }
                // A thread started since the last sample: every switch it made is new.
                let d = t
                    .switches
                    .saturating_sub(l.switches.get(&(t.tid, t.starttime)).copied().unwrap_or(0));
                if d > 0 {
                    self.cpu_foreign_switches
                        .with_label_values(&[&t.processor.to_string()])
                        .inc_by(d);
                }
            }
            let secs = at.duration_since(l.at).as_secs_f64();
            if secs > 0.0 {
                for cpu in cpus.iter() {
                    let k = (cpu, "LOC".to_string());
                    let now = interrupts.get(&k).copied().unwrap_or(0);
                    let was = l.interrupts.get(&k).copied().unwrap_or(0);
                    self.cpu_tick_rate
                        .with_label_values(&[&cpu.to_string()])
                        .set(now.saturating_sub(was) as f64 / secs);
                }
            }
        }
        *last = Some(Last {
            at,
            interrupts,
            softirqs,
            switches,
        });
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

/// The counts of a `/proc/interrupts` or `/proc/softirqs` table on `cpus`, by source: a
/// numbered IRQ by its handlers' names (`irqN` without one), any other row by its label
/// (LOC, RES, TIMER, NET_RX, ...). Zero counts are left out.
fn by_source(t: &Interrupts, cpus: &CpuSet, irqs: bool) -> HashMap<(usize, String), u64> {
    let mut out: HashMap<(usize, String), u64> = HashMap::new();
    for row in &t.rows {
        let source = match row.irq() {
            Some(n) if irqs => {
                let a = row.action();
                if a.is_empty() {
                    format!("irq{n}")
                } else {
                    a
                }
            }
            _ => row.label.clone(),
        };
        for (col, n) in row.counts.iter().enumerate() {
            let Some(&cpu) = t.cpus.get(col) else {
                continue;
            };
            if *n > 0 && cpus.contains(cpu) {
                *out.entry((cpu, source.clone())).or_default() += n;
            }
        }
    }
    out
}

/// The workload scope of `policy` for the health samples: its isolated CPUs and allow-lists.
pub fn scope_of(policy: &Policy) -> Scope {
    let c = &policy.config;
    Scope {
        cpus: policy.isolated.clone(),
        source: "isold run".into(),
        preset: c.preset,
        preset_at: c.preset_at(),
        allow_comm: c.allow_comm.clone(),
        allow_cgroup: c.allow_cgroup.clone(),
        allow_irqs: c.irq_allow.clone(),
        irq_movable: Default::default(),
    }
}

/// How the metrics listener bounds its scrapers: 64 connections at once, 2 s from the
/// accept to the whole request head, 5 s to take the answer, heads up to 8 KiB.
pub const LIMITS: crate::peers::Limits = crate::peers::Limits {
    max_conns: 64,
    read: Duration::from_secs(2),
    write: Duration::from_secs(5),
    max_request: 8192,
};

/// The loopback HTTP listener: `GET /metrics` answered with the text format; anything else
/// 404 (another path) or 405 (another method). Connections are served side by side
/// ([`crate::peers`]): an idle or slow scraper delays no other, nor the daemon.
pub fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    crate::peers::serve(listener, LIMITS, Scrapes(metrics), None);
}

struct Scrapes(Arc<Metrics>);

impl crate::peers::Service<TcpStream> for Scrapes {
    fn accepted(&mut self, _: &TcpStream) -> Option<Vec<u8>> {
        None
    }
    fn complete(&self, buf: &[u8]) -> Option<usize> {
        head_len(buf)
    }
    fn request(&mut self, _: u64, req: &[u8]) -> Option<Vec<u8>> {
        Some(answer(req, &self.0))
    }
    fn too_big(&self) -> Vec<u8> {
        response("431 Request Header Fields Too Large", "text/plain", b"")
    }
}

/// The length of the request head at the start of `buf` (up to its blank line), once whole.
pub fn head_len(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What a request line asks: `GET /metrics` (a query ignored), another path, another method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Metrics,
    NotFound,
    NotAllowed,
}

/// The route of the request head `head` (any bytes).
pub fn route(head: &[u8]) -> Route {
    let line = String::from_utf8_lossy(head);
    let mut words = line.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    match (method, target.split('?').next().unwrap_or("")) {
        ("GET", "/metrics") => Route::Metrics,
        ("GET", _) => Route::NotFound,
        _ => Route::NotAllowed,
    }
}

fn answer(head: &[u8], metrics: &Metrics) -> Vec<u8> {
    match route(head) {
        Route::Metrics => response(
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            &metrics.encode(),
        ),
        Route::NotFound => response("404 Not Found", "text/plain", b"only /metrics\n"),
        Route::NotAllowed => response("405 Method Not Allowed", "text/plain", b"only GET\n"),
    }
}

fn response(status: &str, kind: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// Bind the listener of `[metrics] listen`.
pub fn listen(cfg: &MetricsConfig) -> Option<std::io::Result<TcpListener>> {
    cfg.listen.map(TcpListener::bind)
}

/// Write the text format to `[metrics] textfile`: a temporary file renamed over it, 0644, not
/// synced (the next sample writes it again).
pub fn write_textfile(path: &std::path::Path, metrics: &Metrics) -> std::io::Result<()> {
    libtaskisol::policy::files::replace_volatile(path, &metrics.encode(), Some(0o644))
}

/// What to add to an error of the listener or the textfile that a sandbox gives: the
/// shipped isold.service allows no IP socket (EAFNOSUPPORT), and IPAddressDeny and
/// ProtectSystem make a bind or a write fail with EPERM, EACCES or EROFS.
pub fn sandbox_hint(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EAFNOSUPPORT | libc::EPERM | libc::EACCES | libc::EROFS) => {
            " (under isold.service, [metrics] needs the drop-in of isold(8), METRICS: systemctl edit isold)"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Pod churn with `rps` on: the repairs of 1,000 veths' queues (and of hot-plugged NICs'
    /// channels, and of kthreads' priorities) leave the metrics page with the series one
    /// veth gives, only the counts larger; a value the machine has a fixed set of keeps its
    /// own series.
    #[test]
    fn the_threads_are_walked_one_sample_in_ten_and_at_most_a_fiftieth_of_the_time() {
        let t0 = Instant::now();
        assert!(Walked::due(None, t0), "the first sample walks");
        let cheap = |samples_since| Walked {
            at: t0,
            cost: Duration::from_millis(10),
            samples_since,
        };
        let at = t0 + Duration::from_secs(9);
        assert!(!Walked::due(Some(&cheap(0)), at));
        assert!(
            !Walked::due(Some(&cheap(8)), at),
            "the ninth sample after reads tables"
        );
        assert!(Walked::due(Some(&cheap(9)), at), "the tenth walks");
        let dear = Walked {
            cost: Duration::from_secs(1),
            ..cheap(9)
        };
        assert!(!Walked::due(Some(&dear), at), "a 1 s walk waits 50 s");
        assert!(Walked::due(Some(&dear), t0 + Duration::from_secs(50)));
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

    #[test]
    fn a_sandboxs_refusal_names_the_drop_in() {
        for errno in [libc::EAFNOSUPPORT, libc::EPERM, libc::EACCES, libc::EROFS] {
            let e = std::io::Error::from_raw_os_error(errno);
            assert!(
                sandbox_hint(&e).contains("drop-in of isold(8), METRICS"),
                "{e}"
            );
        }
        for errno in [libc::EADDRINUSE, libc::ENOSPC] {
            assert_eq!(sandbox_hint(&std::io::Error::from_raw_os_error(errno)), "");
        }
    }

    #[test]
    fn sources_are_handler_names_or_labels_on_the_isolated_cpus_only() {
        let t = Interrupts::parse(
            "  CPU0 CPU1 CPU2 CPU3\n  4:  1 0 5 0  IO-APIC 4-edge ttyS0\n 30:  0 0 2 3  PCI-MSI 1-edge\nLOC:  9 9 7 1  Local timer interrupts\nRES:  0 0 0 0  Rescheduling interrupts\n",
        )
        .unwrap();
        let m = by_source(&t, &CpuSet::parse_list("2-3").unwrap(), true);
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort();
        assert_eq!(
            v,
            [
                ((2, "LOC".into()), 7),
                ((2, "irq30".into()), 2),
                ((2, "ttyS0".into()), 5),
                ((3, "LOC".into()), 1),
                ((3, "irq30".into()), 3),
            ]
        );
    }

    proptest::proptest! {
        /// Any bytes: the head's end is found or not, never past the bytes, and a route
        /// is given without a panic.
        #[test]
        fn any_bytes_are_routed_without_a_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            if let Some(n) = head_len(&bytes) {
                proptest::prop_assert!(n <= bytes.len());
                proptest::prop_assert!(bytes[..n].ends_with(b"\n\n") || bytes[..n].ends_with(b"\r\n\r\n"));
            }
            let _ = route(&bytes);
        }

        /// A GET of /metrics, with any query and headers, is the metrics; the head ends at
        /// its first blank line, whatever follows.
        #[test]
        fn a_get_of_metrics_is_found_whatever_the_headers(
            query in "[a-z0-9=&]{0,20}",
            headers in proptest::collection::vec("[A-Za-z-]{1,12}: [ -~]{0,30}", 0..6),
            rest in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
        ) {
            let mut head = format!("GET /metrics{}{query} HTTP/1.1\r\n", if query.is_empty() { "" } else { "?" });
            for h in &headers {
                head.push_str(h);
                head.push_str("\r\n");
            }
            head.push_str("\r\n");
            let mut bytes = head.clone().into_bytes();
            bytes.extend_from_slice(&rest);
            proptest::prop_assert_eq!(head_len(&bytes), Some(head.len()));
            proptest::prop_assert_eq!(route(&bytes), Route::Metrics);
            proptest::prop_assert_eq!(route(head.replace("GET", "POST").as_bytes()), Route::NotAllowed);
            proptest::prop_assert_eq!(route(head.replace("/metrics", "/other").as_bytes()), Route::NotFound);
        }
    }
}
