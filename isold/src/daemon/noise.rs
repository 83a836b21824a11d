//! The noise ledger (`[noise]`, on by default), a service of the daemon ([`Noise`]): its thread records every interruption of
//! the isolated CPUs in a tracefs instance of its own (libtaskisol::noise) and reads it every
//! `interval` from a housekeeping CPU, without ever blocking on the kernel's buffers (a
//! blocking reader makes the writer wake it with an irq_work on the CPU recorded). Its sums
//! feed the metrics (`isold_cpu_noise_*`) and the status, and its ledger by minute and
//! hour goes to `noise.json` next to the status (written whole when it changed, at most once
//! an interval), which `isold noise` reads.
//!
//! The instance outlives the daemon: a stop, a restart or a kill -9 leaves it recording with
//! its events enabled, and the next start adopts it, so that only the first start patches
//! kernel text (which interrupts every CPU, the isolated ones too). It is recorded in the
//! state files before it is made ([`Original::TraceInstance`]): `isold restore`, a stop with
//! `on_stop = "restore"` and `[noise] enabled = false` remove it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use libtaskisol::audit::Scope;
use libtaskisol::noise::{self, Ledger, LedgerFile, ProcThreads, Recorder, Sums};
use libtaskisol::policy::config::NoiseConfig;
use libtaskisol::policy::engine;
use libtaskisol::policy::state::{Entry, Original, StateFiles};
use libtaskisol::{CpuSet, SysRoot};

use super::os::now_s;
use super::service::{Cx, Note, Recording, Service};
use crate::metrics::Metrics;

/// How often a ledger that could not start tries again (tracefs mounted late, or the first
/// event would have waited behind a workload).
const RETRY: Duration = Duration::from_secs(10);

/// How long the names of threads are trusted before they are read again (a pid reused).
const NAMES_FOR: Duration = Duration::from_secs(60);

/// What the main thread tells the ledger.
pub enum Ctl {
    /// Record these CPUs, with this scope's workloads and these settings, from now on.
    Watch(CpuSet, Box<Scope>, NoiseConfig),
    /// End, the instance left recording for the next start.
    Stop,
}

/// Where the instance is recorded before it is made: the state files, and what heads a
/// runtime state file the ledger has to start (the policy's CPUs and file).
#[derive(Debug, Clone)]
pub struct Books {
    pub files: StateFiles,
    pub isolated: String,
    pub config: String,
}

/// The state files' id of the daemon's instance.
pub fn instance_id() -> String {
    format!("trace_instance:{}", noise::daemon_instance())
}

/// The instance `dir` recorded in the state files as isold's, before it is made.
fn record_instance(root: &SysRoot, books: &Books, dir: &str) -> libtaskisol::Result<()> {
    let entry = Entry {
        id: instance_id(),
        item: "noise".into(),
        label: format!("the noise ledger's tracefs instance {dir}"),
        original: Original::TraceInstance { dir: dir.into() },
    };
    engine::record_original(root, &books.files, &books.isolated, &books.config, entry).map(drop)
}

/// The daemon's instance removed and forgotten (`[noise] enabled = false`): its events
/// disabled, which interrupts every CPU once.
pub fn remove_instance(root: &SysRoot, files: &StateFiles) -> Result<(), String> {
    let id = instance_id();
    let rep = engine::restore_where(root, files, |i| i == id).map_err(|e| e.to_string())?;
    let problem = rep
        .problems()
        .next()
        .map(|o| format!("{}: {}", o.label, o.status));
    problem.map_or(Ok(()), Err)
}

/// What the ledger shares with the main thread.
#[derive(Debug, Clone, Default)]
pub struct Shared {
    /// What it does: "recording CPUs 2-3", or why not.
    pub state: String,
    /// Each CPU's sums since the start.
    pub per_cpu: BTreeMap<usize, Sums>,
    /// Pages that followed lost events.
    pub lost_pages: u64,
    /// The thread's CPU time so far, seconds.
    pub cpu_s: f64,
    /// The instance recording now (its directory below the root) and its CPUs: the stall
    /// guard reads its event counts ([`libtaskisol::cpuwatch::EventCounts`]).
    pub recording: Option<(String, CpuSet)>,
    /// The CPUs whose last task switch read went to the idle task, each with its event count
    /// before that read: idle still while the count is that (the stall guard's word).
    pub idle_at: BTreeMap<usize, u64>,
}

/// The ledger's thread, seen from the main thread.
pub struct NoiseLedger {
    ctl: Sender<Ctl>,
    /// What it shares.
    pub shared: Arc<Mutex<Shared>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for NoiseLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NoiseLedger")
    }
}

impl NoiseLedger {
    /// Start recording `cpus` (`scope` tells the workload apart) as `cfg` says; the metrics
    /// get each interruption when published; the instance is recorded in `books` first.
    pub fn start(
        root: SysRoot,
        cpus: CpuSet,
        scope: Scope,
        cfg: NoiseConfig,
        metrics: Option<Arc<Metrics>>,
        file: PathBuf,
        books: Books,
    ) -> std::io::Result<NoiseLedger> {
        let (ctl, rx) = std::sync::mpsc::channel::<Ctl>();
        let shared = Arc::new(Mutex::new(Shared {
            state: "starting".into(),
            ..Shared::default()
        }));
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("isold-noise".into())
            .spawn(move || {
                let mut out = Out {
                    file,
                    ledger: Ledger::new(now_s(), cfg.sources.saturating_mul(2)),
                    lost_pages: 0,
                    mono: false,
                    written: None,
                };
                run(
                    &root,
                    &books,
                    cpus,
                    scope,
                    cfg,
                    metrics.as_deref(),
                    &rx,
                    &sh,
                    &mut out,
                )
            })?;
        Ok(NoiseLedger {
            ctl,
            shared,
            thread: Some(thread),
        })
    }

    /// Wait at most `timeout` for the first attempt to record to end (recording, or why
    /// not); false when it did not end in time.
    pub fn wait_started(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        loop {
            if self.shared.lock().unwrap_or_else(|e| e.into_inner()).state != "starting" {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn send(&self, c: Ctl) {
        let _ = self.ctl.send(c);
    }

    /// The thread ended (waiting for it at most 2 s), the instance left recording.
    pub fn stop(mut self) {
        self.send(Ctl::Stop);
        if let Some(t) = self.thread.take() {
            let until = Instant::now() + Duration::from_secs(2);
            while !t.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

/// The ledger over time and its file.
struct Out {
    file: PathBuf,
    ledger: Ledger,
    lost_pages: u64,
    /// The recording's clock is CLOCK_MONOTONIC (its times can be told as Unix time).
    mono: bool,
    /// What the file says: its state and CPUs, and its ledger's events and minute.
    written: Option<(String, String, u64, u64)>,
}

impl Out {
    /// The file written again when its figures, its state or its minute changed.
    fn write(&mut self, state: &str, cpus: &CpuSet) {
        let clock_mono = self.mono;
        let now = now_s();
        self.ledger.tick(now);
        let events: u64 = self
            .ledger
            .since_start
            .values()
            .flat_map(|s| s.by_source.values())
            .map(|t| t.events + t.ns)
            .sum();
        let key = (
            state.to_string(),
            cpus.to_string(),
            events,
            self.ledger.current.from,
        );
        if self.written.as_ref() == Some(&key) {
            return;
        }
        let off = noise::unix_offset();
        let unix_of = |ns: u64| {
            if clock_mono {
                ns as f64 / 1e9 + off
            } else {
                0.0
            }
        };
        let f = LedgerFile::of(
            &self.ledger,
            std::process::id() as i32,
            state,
            &cpus.to_string(),
            self.lost_pages,
            now,
            &unix_of,
        );
        let text = serde_json::to_string(&f).expect("the ledger serializes") + "\n";
        // As the status: readable by whoever may enter the directory.
        if libtaskisol::policy::files::replace(&self.file, text.as_bytes(), Some(0o644)).is_ok() {
            self.written = Some(key);
        }
    }
}

/// The recorder for `cpus`, or why there is none: the instance an earlier run left adopted
/// as it is, else made (recorded in `books` first) once enabling its events would not wait
/// behind a workload.
fn recorder(root: &SysRoot, books: &Books, cpus: &CpuSet) -> Result<Recorder, String> {
    if cpus.is_empty() {
        return Err("off (no isolated CPU to record)".into());
    }
    let tracefs = noise::find(root).map_err(|e| e.to_string())?;
    let dir = format!("{tracefs}/instances/{}", noise::daemon_instance());
    if !root.exists(&dir) {
        if let Some(why) = libtaskisol::tracefs::enabling_would_wait(root, &tracefs, cpus) {
            return Err(format!("waiting: {why}"));
        }
    }
    record_instance(root, books, &dir)
        .map_err(|e| format!("cannot record the instance in the state files: {e}"))?;
    Recorder::start(root, &tracefs, cpus, &noise::daemon_instance())
        .map_err(|e| format!("cannot record: {e}"))
}

/// Long because it is the ledger thread's one loop: control messages, the recorder's retries,
/// names, reads and publication share its state.
#[allow(clippy::too_many_arguments)]
fn run(
    root: &SysRoot,
    books: &Books,
    mut cpus: CpuSet,
    mut scope: Scope,
    mut cfg: NoiseConfig,
    metrics: Option<&Metrics>,
    ctl: &Receiver<Ctl>,
    shared: &Mutex<Shared>,
    out: &mut Out,
) {
    let say = |state: String| shared.lock().unwrap_or_else(|e| e.into_inner()).state = state;
    // Where it records, for the stall guard; and for the metrics, whose foreign context
    // switches on those CPUs it counts from then on (their walks leave them out).
    let recording = |r: Option<(String, CpuSet)>| {
        if let Some(m) = metrics {
            m.ledger_counts_switches(r.as_ref().map_or(&CpuSet::new(), |(_, c)| c));
        }
        let mut sh = shared.lock().unwrap_or_else(|e| e.into_inner());
        sh.recording = r;
        sh.idle_at.clear();
    };
    // The recording's event counts, read before each read of its buffers.
    let mut counts: Option<libtaskisol::cpuwatch::EventCounts> = None;
    let mut rec: Option<Recorder> = None;
    let mut retry_at = Instant::now();
    let mut names_at = Instant::now() + NAMES_FOR;
    let me: std::collections::HashSet<i32> = if root.is_host() {
        libtaskisol::procfs::thread_ids(root, std::process::id() as i32)
            .unwrap_or_default()
            .into_iter()
            .collect()
    } else {
        Default::default()
    };
    let mut threads = ProcThreads::new(root, &scope);
    threads.ignore = me.clone();
    loop {
        if rec.is_none() && Instant::now() >= retry_at {
            match recorder(root, books, &cpus) {
                Ok(r) => {
                    say(format!(
                        "recording CPUs {cpus}{}",
                        if r.adopted {
                            " (the instance of an earlier run, adopted)"
                        } else {
                            ""
                        }
                    ));
                    recording(Some((r.dir().to_string(), cpus.clone())));
                    counts = libtaskisol::cpuwatch::EventCounts::open(root, r.dir(), &cpus);
                    rec = Some(r);
                }
                Err(why) => {
                    say(why);
                    retry_at = Instant::now() + RETRY;
                }
            }
        }
        match ctl.recv_timeout(cfg.interval) {
            Ok(Ctl::Watch(c, s, n)) => {
                let moved = c != cpus;
                cpus = c;
                cfg = n;
                // The new scope's workloads from the next names on.
                drop(threads);
                scope = *s;
                threads = ProcThreads::new(root, &scope);
                threads.ignore = me.clone();
                if moved {
                    // Adopted again at once: only its CPUs are written.
                    recording(None);
                    counts = None;
                    if let Some(r) = rec.take() {
                        r.close();
                    }
                    retry_at = Instant::now();
                }
                continue;
            }
            Ok(Ctl::Stop) | Err(RecvTimeoutError::Disconnected) => {
                recording(None);
                if let Some(r) = rec.take() {
                    r.close();
                }
                say("stopped".into());
                // The ledger stays for `isold noise`, which says the daemon is gone.
                out.write("stopped", &cpus);
                return;
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        if Instant::now() >= names_at {
            drop(threads);
            threads = ProcThreads::new(root, &scope);
            threads.ignore = me.clone();
            names_at = Instant::now() + NAMES_FOR;
        }
        let Some(r) = rec.as_mut() else {
            let state = shared
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .state
                .clone();
            out.write(&state, &cpus);
            continue;
        };
        // Counted before the read: a CPU seen idle at the end of it has been idle since its
        // count was this (an event written meanwhile was read too, and moved it past).
        let before = counts.as_ref().map(|c| c.read()).unwrap_or_default();
        let mut got: Vec<(usize, noise::Interruption)> = Vec::new();
        let read = r.read(&threads, &mut |cpu, i| got.push((cpu, i)));
        let mut sh = shared.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = read {
            sh.state = format!("stopped: {e}");
            sh.recording = None;
            sh.idle_at.clear();
            drop(sh);
            counts = None;
            if let Some(m) = metrics {
                m.ledger_counts_switches(&CpuSet::new());
            }
            if let Some(r) = rec.take() {
                r.close();
            }
            retry_at = Instant::now() + RETRY;
            continue;
        }
        let now = now_s();
        for (cpu, i) in &got {
            out.ledger.add(now, *cpu, i);
            if let Some(m) = metrics {
                m.noise_observe(*cpu, i.net_ns as f64 / 1e9);
                // A thread that came on the CPU: its own run, or a PREEMPT_RT IRQ thread's
                // (counted as its IRQ).
                if i.source.kind == noise::Kind::Thread || !i.counted {
                    m.foreign_switch(*cpu);
                }
            }
        }
        if !got.is_empty() {
            sh.per_cpu = out.ledger.since_start.clone();
        }
        sh.idle_at = r
            .idle_cpus()
            .iter()
            .filter_map(|cpu| before.get(&cpu).map(|c| (cpu, *c)))
            .collect();
        sh.lost_pages = r.lost_pages;
        out.lost_pages = r.lost_pages;
        let state = sh.state.clone();
        out.mono = r.clock == "mono";
        sh.cpu_s = super::os::thread_cpu_ns() as f64 / 1e9;
        // The sums moved only with what was read.
        if let Some(m) = metrics.filter(|_| !got.is_empty()) {
            m.noise_sums(&sh.per_cpu, cfg.sources);
        }
        drop(sh);
        out.write(&state, &cpus);
    }
}

impl Recording for Mutex<Shared> {
    fn recording(&self) -> Option<(String, CpuSet)> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .recording
            .clone()
    }

    fn idle_at(&self) -> BTreeMap<usize, u64> {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .idle_at
            .clone()
    }
}

/// The noise ledger as a service of the daemon: its thread while `[noise]` has it on, its
/// lines in the status (`noise`); its metrics are counted by its thread.
#[derive(Debug, Default)]
pub(super) struct Noise {
    thread: Option<NoiseLedger>,
    /// Turned off by a reload: its instance goes once the others closed its files.
    removing: bool,
}

/// The CPUs the ledger records under `policy`: every isolated one but `[noise] ignore_cpus`.
fn noise_cpus(policy: &libtaskisol::policy::Policy) -> CpuSet {
    policy.isolated.difference(&policy.noise().ignore_cpus)
}

impl Noise {
    /// The ledger started for the policy in force, when `[noise]` has it on. It enables its
    /// events now, at the daemon's start, before the workload should run (enabling
    /// interrupts every CPU once); the daemon says it is ready after.
    pub fn start(cx: &mut Cx<'_>) -> Noise {
        let mut n = Noise::default();
        n.start_thread(cx);
        n
    }

    fn start_thread(&mut self, cx: &mut Cx<'_>) {
        let cfg = cx.policy.noise().clone();
        let state = if !cfg.enabled {
            "off ([noise] enabled = false)".to_string()
        } else {
            let metrics = cx.books.metrics.as_ref().map(|(m, _)| m.clone());
            match NoiseLedger::start(
                cx.env.root.clone(),
                noise_cpus(cx.policy),
                crate::metrics::scope_of(cx.policy),
                cfg,
                metrics,
                cx.books.noise_file(),
                Books {
                    files: cx.env.files.clone(),
                    isolated: cx.policy.isolated.to_string(),
                    config: cx.policy.config_file().display().to_string(),
                },
            ) {
                Ok(n) => {
                    cx.board.say(Note::Ledger(Some(n.shared.clone())));
                    // Its events enabled before the daemon says it is ready (at most 10 s).
                    let state = if n.wait_started(Duration::from_secs(10)) {
                        n.shared
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .state
                            .clone()
                    } else {
                        "starting".to_string()
                    };
                    self.thread = Some(n);
                    state
                }
                Err(e) => format!("off (its thread could not start: {e})"),
            }
        };
        cx.env.log.info(&format!("noise ledger: {state}"));
        cx.books.status.noise = Some(crate::status::NoiseStatus {
            state,
            ..Default::default()
        });
        cx.books.dirty = true;
    }
}

impl Service for Noise {
    fn name(&self) -> &'static str {
        "noise ledger"
    }

    /// It records the new policy's CPUs (started or stopped when `[noise] enabled`
    /// changed).
    fn policy_changed(&mut self, cx: &mut Cx<'_>) {
        match (&self.thread, cx.policy.noise().enabled) {
            (Some(n), true) => n.send(Ctl::Watch(
                noise_cpus(cx.policy),
                Box::new(crate::metrics::scope_of(cx.policy)),
                cx.policy.noise().clone(),
            )),
            (Some(_), false) => {
                if let Some(n) = self.thread.take() {
                    n.stop();
                }
                // Turned off: its instance goes too (its events disabled, once), when the
                // others closed its files (`hear`).
                self.removing = true;
                cx.board.say(Note::Ledger(None));
            }
            (None, true) => self.start_thread(cx),
            (None, false) => {}
        }
    }

    fn hear(&mut self, note: &Note, cx: &mut Cx<'_>) {
        if !(self.removing && matches!(note, Note::Ledger(None))) {
            return;
        }
        self.removing = false;
        if let Err(e) = remove_instance(&cx.env.root, &cx.env.files) {
            cx.env
                .log
                .warn(&format!("noise ledger: its instance not removed: {e}"));
        }
        self.start_thread(cx);
    }

    /// Its figures now, for the status.
    fn figures(&mut self, cx: &mut Cx<'_>) {
        let Some(n) = self.thread.as_ref() else {
            return;
        };
        // Read under the lock, not cloned: its sums by source are the ledger's whole.
        let sh = n.shared.lock().unwrap_or_else(|e| e.into_inner());
        let st = cx.books.status.noise.get_or_insert_with(Default::default);
        let longest: Vec<(usize, f64, String)> = sh
            .per_cpu
            .iter()
            .filter_map(|(&cpu, s)| {
                s.longest
                    .as_ref()
                    .map(|l| (cpu, l.net_ns as f64 / 1e9, l.source.name.clone()))
            })
            .collect();
        let events = sh
            .per_cpu
            .values()
            .flat_map(|s| s.by_source.values())
            .map(|t| t.events)
            .sum();
        if st.state != sh.state || st.longest != longest || st.events != events {
            st.state = sh.state.clone();
            st.longest = longest;
            st.events = events;
            st.lost_pages = sh.lost_pages;
            st.cpu_s = sh.cpu_s;
            cx.books.dirty = true;
        }
    }

    /// The thread ended, its instance left recording (for the next start to adopt).
    fn stop(&mut self, _cx: &mut Cx<'_>) {
        if let Some(n) = self.thread.take() {
            n.stop();
        }
    }
}
