//! `isold run`: apply the policy, then keep it true until stopped, and restore on the way out.
//!
//! Two threads, pinned to the housekeeping CPUs. The main one waits in poll(2) on:
//! - the process events connector: a task that is exec'd, forked or renamed is checked at
//!   once with one sched_getaffinity(2) call, and read from /proc only when its affinity
//!   reaches into the isolated CPUs (or its new name matches a kthread priority rule);
//! - kobject uevents: a device that comes or goes makes the scan thread look at once;
//! - inotify on the cgroup partition's `cpuset.cpus`, `cpuset.cpus.exclusive` and
//!   `cpuset.cpus.partition`: a changed or invalid partition is made again at once;
//! - a signalfd for SIGHUP (reload), SIGTERM and SIGINT (restore and exit);
//! - the scan thread's reports, counted and logged here;
//! - a timer: every `--task-interval` the affinity of every known thread is checked with
//!   sched_getaffinity(2), which catches affinity changes made without an exec (no event
//!   exists for them).
//!
//! The scan thread ([`Scanner`]) reads, every half `--interval`, the values that have no event
//! (sysctls, sysfs, IRQ affinity, workqueue masks) and puts the drifted ones right, so none
//! stays drifted longer than `--interval`.
//!
//! Without the connector (no CAP_NET_ADMIN, not in the initial namespaces) the task check is
//! a full /proc scan every `--task-interval` instead, said in one log line.
//!
//! Every correction goes through the engine (libtaskisol::policy::engine): the original is in
//! the state file before the first write, an original already recorded is never replaced
//! (after kill -9 the next start takes over the state file as it is). Stopping leaves the
//! policy in force (`on_stop = "keep"`, the default: `isold restore` is the undo); with
//! `on_stop = "restore"` a plain stop restores, a restart or a shutdown never does (see
//! [`crate::lifecycle`]).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs;
use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use libtaskisol::audit::Scope;
use libtaskisol::events::{ProcEvent, ProcEvents, Stamped, Uevents};
use libtaskisol::policy::claims::{Claim, ClaimsFile, Message, Reply};
use libtaskisol::policy::config::{glob_match, Config, OnStop};
use libtaskisol::policy::fastpath::{Fix, TaskFixer};
use libtaskisol::policy::state::StateFiles;
use libtaskisol::policy::watch::{Drift, Watch};
use libtaskisol::policy::{engine, partition, plan, Policy, Report, Status};
use libtaskisol::tasks::{self, Thread};
use libtaskisol::{sched, CpuSet, SysRoot};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use serde::{Deserialize, Serialize};

use crate::cli::RunArgs;
use crate::contest;
use crate::lifecycle::{self, StopKind};

/// What `isold status` reads: kept current by the daemon in `status.json` next to the state
/// file (written whole and renamed into place, so a reader never sees half of it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DaemonStatus {
    pub pid: i32,
    /// Unix time of the start, seconds.
    pub started: u64,
    /// Unix time of the last write of this file.
    pub updated: u64,
    pub config: String,
    pub preset: String,
    pub isolated: String,
    pub housekeeping: String,
    /// How new and changed tasks are seen: "proc connector" or "periodic scans (why)".
    pub task_events: String,
    /// Whether device uevents trigger rescans ("uevents") or not (why).
    pub device_events: String,
    pub interval_s: f64,
    pub task_interval_s: f64,
    /// The PM QoS CPU latency request held on /dev/cpu_dma_latency, microseconds.
    pub cpu_dma_latency_us: Option<u32>,
    /// Corrections since the start, by item (tasks, irq_affinity, sysctl, ...).
    pub corrections: BTreeMap<String, u64>,
    pub last_correction: Option<Correction>,
    /// Targets the kernel does not let isold change, with why.
    pub not_changeable: Vec<String>,
    pub reloads: u64,
    /// "running", or "stopping" while it stops.
    pub state: String,
    /// The configuration's `on_stop` ("keep" or "restore").
    #[serde(default)]
    pub on_stop: String,
    /// Files the policy wrote that are not in effect yet, each with what it waits for.
    #[serde(default)]
    pub waiting: Vec<String>,
    /// Values something else keeps changing back, left alone for a growing back-off.
    #[serde(default)]
    pub contested: Vec<contest::Contested>,
    /// How fast wide tasks were narrowed in answer to their process event (fast or general
    /// path): from the kernel's event to the affinity read back, over the last
    /// [`REACTIONS_KEPT`] corrections.
    #[serde(default)]
    pub task_reaction: Option<Reaction>,
}

/// How long a new thread of a running process is left before it is looked at: a program that
/// pins its threads into the isolated CPUs does so right after creating each (microseconds
/// natively, milliseconds under emulation), and isold must never narrow a thread between its
/// creation and its pin. The stress test pins up to 20 ms after creation.
pub const NEW_THREAD_GRACE: Duration = Duration::from_millis(50);

/// How many of the last task corrections `task_reaction` covers.
pub const REACTIONS_KEPT: usize = 1000;

/// Percentiles of the reaction to wide tasks, milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reaction {
    /// Corrections measured since the start (the percentiles cover the last 1000).
    pub count: u64,
    pub median_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Reaction {
    /// The percentiles of `ns` (nanoseconds; `count`: all corrections measured).
    fn of(ns: &std::collections::VecDeque<u64>, count: u64) -> Option<Reaction> {
        if ns.is_empty() {
            return None;
        }
        let mut v: Vec<u64> = ns.iter().copied().collect();
        v.sort_unstable();
        let at =
            |p: f64| v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1] as f64 / 1e6;
        Some(Reaction {
            count,
            median_ms: at(0.5),
            p99_ms: at(0.99),
            max_ms: at(1.0),
        })
    }
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of the connector's timestamps.
fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// One value put right.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Correction {
    /// Unix time, seconds.
    pub at: u64,
    pub item: String,
    pub label: String,
    /// The outcome as the engine reports it ("changed: 3 -> 0-1").
    pub what: String,
}

/// The CPU time this thread has used, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// The clock `clock` in nanoseconds.
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: t is a valid timespec to write to.
    unsafe { libc::clock_gettime(clock, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Where the status file goes: next to the state file.
pub fn status_path(state_path: &Path) -> PathBuf {
    state_path
        .parent()
        .unwrap_or(Path::new("."))
        .join("status.json")
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Log to stderr; under systemd (JOURNAL_STREAM set) with the syslog level prefix journald
/// reads (`<4>` warning, `<6>` info, `<7>` debug).
#[derive(Debug, Clone, Copy)]
struct Log {
    verbose: u8,
    journal: bool,
}

impl Log {
    fn line(&self, level: u8, msg: &str) {
        let mut err = std::io::stderr().lock();
        let _ = if self.journal {
            writeln!(err, "<{level}>{msg}")
        } else {
            writeln!(err, "isold: {msg}")
        };
    }
    fn warn(&self, msg: &str) {
        self.line(4, msg);
    }
    fn info(&self, msg: &str) {
        self.line(6, msg);
    }
    fn debug(&self, msg: &str) {
        if self.verbose >= 1 {
            self.line(7, msg);
        }
    }
    fn trace(&self, msg: &str) {
        if self.verbose >= 2 {
            self.line(7, msg);
        }
    }
}

/// sd_notify(3): one datagram to $NOTIFY_SOCKET (a path, or '@' for the abstract namespace).
fn notify(msg: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let path = path.to_string_lossy().into_owned();
    if let Some(name) = path.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        if let Ok(addr) = std::os::unix::net::SocketAddr::from_abstract_name(name) {
            let _ = sock.send_to_addr(msg.as_bytes(), &addr);
        }
    } else {
        let _ = sock.send_to(msg.as_bytes(), &path);
    }
}

/// The policy the periodic scan applies: everything but the thread items and the partition,
/// which have events of their own (and cost a /proc scan). Public for the scale benchmark.
pub fn scan_policy(policy: &Policy) -> Policy {
    let mut p = policy.clone();
    p.config.tasks = false;
    p.config.kthread_priority.clear();
    p.config.cgroup_partition = None;
    p
}

/// Why the policy in force changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// SIGHUP: a new configuration file.
    Reload,
    /// A container's claim made.
    Claim,
    /// A container's claim released.
    Release,
}

impl Change {
    /// The word that starts its log lines.
    fn word(self) -> &'static str {
        match self {
            Change::Reload => "reload",
            Change::Claim => "claim",
            Change::Release => "release",
        }
    }
}

/// The items a container's claim changes: IRQs, workqueues, tasks (with their allow-lists)
/// and the power settings. The rest does not depend on the claims, and the scan thread keeps
/// it; leaving it out keeps a container's start from waiting for it.
fn claims_policy(policy: &Policy) -> Policy {
    let mut p = policy.clone();
    let c = &mut p.config;
    c.sysctl.clear();
    c.thp = None;
    c.machinecheck = false;
    c.ksm = None;
    c.kthread_priority.clear();
    c.kvm.clear();
    c.irqbalance = false;
    c.printk = None;
    c.systemd_cpuaffinity = false;
    c.cgroup_partition = None;
    p
}

/// Only the partition item of `policy`.
fn partition_policy(policy: &Policy) -> Option<Policy> {
    policy.config.cgroup_partition.as_ref()?;
    let c = &policy.config;
    let mut only = Config::defaults(c.preset, c.isolated.clone());
    only.file = c.file.clone();
    only.sysctl.clear();
    only.thp = None;
    only.workqueue = false;
    only.machinecheck = false;
    only.ksm = None;
    only.irq_affinity = false;
    only.tasks = false;
    only.kthread_priority.clear();
    only.pm_qos = None;
    only.cpufreq = None;
    only.kvm.clear();
    only.irqbalance = false;
    only.printk = None;
    only.systemd_cpuaffinity = false;
    only.cgroup_partition = c.cgroup_partition.clone();
    Some(Policy {
        config: only,
        ..policy.clone()
    })
}

/// What the main thread tells the scan thread.
enum Ctl {
    /// Look now (a device came or went): after 100 ms, once its driver has requested its IRQs.
    Rescan,
    /// Stop, before the restore.
    Stop,
}

/// What the scan thread tells the main thread.
enum ScanMsg {
    /// An apply that changed something, or said something.
    Report(Report),
    /// A check or an apply that failed.
    Failed(String),
    /// A value became contested, or settled ([`crate::contest`]).
    Contest(contest::Change),
    /// The contested values now.
    Contested(Vec<contest::Contested>),
}

/// The periodic scan of the values without events (sysctls, sysfs, IRQs, workqueues), on a
/// thread of its own so that it never delays the answer to a process event: a compare that
/// takes no lock and writes nothing while nothing drifted, an apply when something did.
/// Reports with changes go back to the main thread, which counts and logs them. A value
/// something else keeps changing back is left alone for a growing back-off.
struct Scanner {
    ctl: std::sync::mpsc::Sender<Ctl>,
    reports: std::sync::mpsc::Receiver<ScanMsg>,
    /// Readable when a report is waiting (the main thread polls it).
    wake: std::os::unix::net::UnixStream,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Scanner {
    fn start(
        root: SysRoot,
        policy: Policy,
        files: StateFiles,
        interval: Duration,
    ) -> std::io::Result<Scanner> {
        let (ctl, ctl_rx) = std::sync::mpsc::channel::<Ctl>();
        let (tx, reports) = std::sync::mpsc::channel();
        let (wake, mut notify_main) = std::os::unix::net::UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        let thread = std::thread::Builder::new()
            .name("isold-scan".into())
            .spawn(move || {
                // Background work: the main thread (process events) goes first whenever both
                // want the same CPU, and so does everything else (nice 19: at nice 0 the
                // check, a few milliseconds under QEMU's emulation, cost the exec'd tasks of
                // the service test a third of their reactions within 20 ms).
                nice_this_thread();
                let scan = scan_policy(&policy);
                // One read per watched value each check; a drifted value's target applied
                // alone; the full compare only when the set of IRQs changed, after a uevent,
                // or without a watch. Checks run every half interval, start to start, so a
                // drifted value is put back within one interval.
                let period = interval / 2;
                let mut watch = Watch::of(&root, &scan, &files).ok();
                let mut contests = contest::Contests::default();
                let mut next = Instant::now() + period;
                loop {
                    let mut full = false;
                    let wait = next.saturating_duration_since(Instant::now());
                    match ctl_rx.recv_timeout(wait) {
                        Ok(Ctl::Stop) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                            return
                        }
                        Ok(Ctl::Rescan) => {
                            full = true;
                            std::thread::sleep(Duration::from_millis(100));
                            // A burst of uevents is one rescan.
                            while let Ok(c) = ctl_rx.try_recv() {
                                match c {
                                    Ctl::Stop => return,
                                    Ctl::Rescan => {}
                                }
                            }
                        }
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                            // A check that ran late moves the next one, never bunches them.
                            next = (next + period).max(Instant::now() + period / 2);
                        }
                    }
                    let drift = match &watch {
                        Some(w) if !full => w.drift(&root),
                        _ => Drift::IrqSet,
                    };
                    let now = Instant::now();
                    // Contested values in their back-off are left as the other program set
                    // them.
                    let free = |targets: Vec<plan::Target>| -> Vec<plan::Target> {
                        targets
                            .into_iter()
                            .filter(|t| !contests.waiting(&t.id, now))
                            .collect()
                    };
                    let mut outs = Vec::new();
                    match drift {
                        Drift::None => {}
                        Drift::Targets(targets) => {
                            let targets = free(targets);
                            if !targets.is_empty() {
                                outs.push(engine::apply_only(&root, &scan, &files, targets));
                            }
                        }
                        Drift::IrqSet => outs.push(drifted(&root, &scan, &files).and_then(|d| {
                            if d {
                                let targets = free(plan::plan(&scan, &root)?);
                                engine::apply_only(&root, &scan, &files, targets)
                            } else {
                                Ok(Report::default())
                            }
                        })),
                    }
                    let applied = !outs.is_empty();
                    let mut msgs = Vec::new();
                    for out in outs {
                        match out {
                            Ok(rep) => {
                                for o in rep.outcomes.iter().filter(|o| rep.written.contains(&o.id))
                                {
                                    msgs.extend(
                                        contests
                                            .repaired(&o.id, &o.label, now)
                                            .map(ScanMsg::Contest),
                                    );
                                }
                                if !rep.outcomes.is_empty() || !rep.notes.is_empty() {
                                    msgs.push(ScanMsg::Report(rep));
                                }
                            }
                            Err(e) => msgs.push(ScanMsg::Failed(e.to_string())),
                        }
                    }
                    let settled = contests.sweep(now);
                    let contests_changed = msgs.iter().any(|m| matches!(m, ScanMsg::Contest(_)))
                        || !settled.is_empty()
                        || applied && !contests.list().is_empty();
                    msgs.extend(settled.into_iter().map(ScanMsg::Contest));
                    if contests_changed {
                        msgs.push(ScanMsg::Contested(contests.list()));
                    }
                    for msg in msgs {
                        if tx.send(msg).is_err() {
                            return;
                        }
                        let _ = notify_main.write_all(b"r");
                    }
                    if applied {
                        watch = Watch::of(&root, &scan, &files).ok();
                    }
                }
            })?;
        Ok(Scanner {
            ctl,
            reports,
            wake,
            thread: Some(thread),
        })
    }

    fn send(&self, c: Ctl) {
        let _ = self.ctl.send(c);
    }

    fn stop(&mut self) {
        self.send(Ctl::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The error of `result` when it is the first of a run of failures (`failing` remembers
/// the run; a success ends it), so that a repeated failure is logged once.
fn first_failure<E>(result: Result<(), E>, failing: &mut bool) -> Option<E> {
    let was_failing = std::mem::replace(failing, result.is_err());
    result.err().filter(|_| !was_failing)
}

/// Nice 19 for the calling thread: background work (the scan, the metrics) never delays the
/// main thread's answer to a process event.
fn nice_this_thread() {
    // SAFETY: setpriority on this thread's own id; lowering priority needs no privilege.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19);
    }
}

/// One malloc arena for the whole daemon. glibc gives each thread that allocates its own
/// (the scan thread, the metrics, the workers of a pass over every thread), and each keeps
/// freed memory of its own: on the 448-CPU tree the daemon rested at 23 MiB with them and
/// 12.6 MiB with one. The threads allocate little between their system calls, so they
/// hardly wait for each other.
fn one_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets a parameter of the allocator; called before this process
    // starts any thread of its own.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Give the heap freed after a pass over every thread back to the system, the cached copy of
/// the state file first. glibc keeps freed heap otherwise, and on a machine with tens of
/// thousands of threads the daemon's resident memory would stay near the peak of its first
/// apply.
fn give_back_memory() {
    libtaskisol::policy::state::drop_cache();
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free memory of the allocator's heap to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Whether any value of `policy` differs from what it wants (read-only, no lock).
fn drifted(root: &SysRoot, policy: &Policy, files: &StateFiles) -> libtaskisol::Result<bool> {
    Ok(engine::verify(root, policy, files)?
        .outcomes
        .iter()
        .any(|o| matches!(o.status, Status::Deviates { .. })))
}

struct Daemon {
    root: SysRoot,
    config_path: PathBuf,
    files: StateFiles,
    policy: Policy,
    log: Log,
    status: DaemonStatus,
    procs: Option<ProcEvents>,
    uevents: Option<Uevents>,
    /// Threads known to exist (connector mode): the task sweep checks their affinity.
    known: BTreeSet<i32>,
    /// Threads the policy leaves where they are although they reach into the isolated CPUs
    /// (allow-listed, not changeable): not read again until exec, rename or exit.
    settled: HashSet<i32>,
    /// Last status word per target id, so that a value reported the same way every scan is
    /// logged once.
    last_word: BTreeMap<String, &'static str>,
    dma: Option<fs::File>,
    /// `dma` is in systemd's file descriptor store.
    dma_stored: bool,
    inotify: Option<nix::sys::inotify::Inotify>,
    /// The last attempt to make the partition failed: periodic checks wait for an event.
    partition_failed: bool,
    /// The partition could not be watched (said once).
    partition_unwatched: bool,
    /// Repairs of the partition: one that something else keeps undoing backs off.
    partition_contests: contest::Contests,
    /// The partition is left alone until then (contested), then checked again.
    partition_retry: Option<Instant>,
    /// The contested values of the scan thread.
    scan_contested: Vec<contest::Contested>,
    /// The fast path for single tasks.
    fixer: TaskFixer,
    /// kthreads forked by kthreadd, looked at once named: (when, forked at, pid, tid).
    new_kthreads: Vec<(Instant, Instant, i32, i32)>,
    /// New threads of running processes, looked at a moment later: (when, pid, tid, the
    /// event's time). A program that pins a thread right after creating it (DPDK, QEMU's
    /// vCPUs under libvirt) has done so by then.
    new_threads: Vec<(Instant, i32, i32, u64)>,
    /// The status file is behind.
    dirty: bool,
    /// Task corrections not logged yet, and the last one.
    tasks_unlogged: u64,
    tasks_last: String,
    /// The last reaction times to process events (event to read back), nanoseconds, and how
    /// many were measured in all.
    reactions: std::collections::VecDeque<u64>,
    reactions_count: u64,
    /// `[metrics]`: what is published, with the scope its health samples use (renewed on a
    /// reload).
    metrics: Option<(Arc<crate::metrics::Metrics>, Arc<Mutex<Scope>>)>,
    /// The socket `isold hook` talks to (`None` when it could not be bound: said once).
    server: Option<crate::claims::Server>,
    /// Where the claims are kept, and the boot they belong to.
    claims_path: PathBuf,
    boot_id: String,
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

impl Daemon {
    fn save_status(&mut self) {
        self.status.updated = now_s();
        self.status.task_reaction = Reaction::of(&self.reactions, self.reactions_count);
        let path = status_path(&self.files.runtime);
        let text = serde_json::to_string_pretty(&self.status).expect("status serializes") + "\n";
        // Readable by anyone who can enter the directory (0700 under the unit: root).
        if let Err(e) = libtaskisol::policy::files::replace(&path, text.as_bytes(), Some(0o644)) {
            self.log
                .warn(&format!("cannot write {}: {e}", path.display()));
        }
    }

    /// Log and count what an apply (start, scan, event) changed. `initial`: the first apply,
    /// whose changes are the policy being applied, not corrections.
    fn take_report(&mut self, rep: &Report, initial: bool) -> usize {
        let mut n = 0;
        // Sets, not searches of the lists: an apply on a big machine has tens of thousands of
        // outcomes, written targets and kthreads that cannot move.
        let written: HashSet<&str> = rep.written.iter().map(String::as_str).collect();
        let mut listed: Option<HashSet<String>> = None;
        for o in &rep.outcomes {
            let word = o.status.word();
            // Only a problem's word is kept (to log it once): the map stays as small as the
            // problems, not as large as the threads.
            let before = if matches!(
                o.status,
                Status::NotChangeable { .. } | Status::Failed { .. }
            ) {
                self.last_word.insert(o.id.clone(), word)
            } else {
                self.last_word.remove(&o.id)
            };
            if o.item == "cgroup_partition" {
                self.partition_failed = matches!(o.status, Status::Failed { .. });
            }
            if let Status::NotChangeable { reason } = &o.status {
                if before != Some(word) {
                    let entry = format!("{}: {reason}", o.label);
                    let listed = listed.get_or_insert_with(|| {
                        self.status.not_changeable.iter().cloned().collect()
                    });
                    if listed.insert(entry.clone()) {
                        self.status.not_changeable.push(entry);
                    }
                    if !initial {
                        self.log
                            .info(&format!("{}: not changeable: {reason}", o.label));
                    }
                }
                continue;
            }
            if let Status::Failed { error } = &o.status {
                if before != Some(word) {
                    self.log.warn(&format!("{}: {error}", o.label));
                }
                continue;
            }
            if initial || !written.contains(o.id.as_str()) {
                continue;
            }
            n += 1;
            if let Some((m, _)) = &self.metrics {
                m.corrected(&o.item, (o.item != "tasks").then_some(o.id.as_str()));
            }
            self.corrected(&o.item, &o.label, &o.status.to_string());
        }
        for note in &rep.notes {
            self.log.info(note);
        }
        n
    }

    /// Whether a thread with this affinity needs reading: it reaches into the isolated CPUs
    /// without being inside them (a workload).
    fn suspicious(&self, aff: &CpuSet) -> bool {
        !aff.is_disjoint(&self.policy.isolated) && !aff.is_subset(&self.policy.isolated)
    }

    /// Read these threads and apply the thread items to them; `since`: when the event that
    /// asked for it was read, for the log.
    fn fix_threads(
        &mut self,
        ids: &[(i32, i32)],
        since: Option<(Instant, u64)>,
        stamps: &[(i32, u64)],
    ) {
        let mut threads: Vec<Thread> = Vec::new();
        for &(pid, tid) in ids {
            match tasks::read_thread(&self.root, pid, tid) {
                Ok(Some(t)) => threads.push(t),
                Ok(None) => {}
                Err(e) => self.log.debug(&format!("task {tid}: {e}")),
            }
        }
        if threads.is_empty() {
            return;
        }
        match engine::apply_threads(&self.root, &self.policy, &self.files, &threads) {
            Ok(rep) => {
                for o in &rep.outcomes {
                    if matches!(
                        o.status,
                        Status::LeftAlone { .. } | Status::NotChangeable { .. }
                    ) {
                        if let Some(t) = threads
                            .iter()
                            .find(|t| o.id.starts_with(&format!("task:{}:", t.tid)))
                        {
                            self.settled.insert(t.tid);
                        }
                    }
                }
                for &(tid, at) in stamps {
                    let prefix = format!("task:{tid}:");
                    if rep.written.iter().any(|id| id.starts_with(&prefix)) {
                        self.reacted(at);
                    }
                }
                if let Some((t, cpu)) = since.filter(|_| !rep.written.is_empty()) {
                    self.log.debug(&format!(
                        "{} thread(s) corrected {:.2} ms after the event was read ({:.2} ms of isold's CPU time)",
                        rep.written.len(),
                        t.elapsed().as_secs_f64() * 1000.0,
                        (thread_cpu_ns().saturating_sub(cpu)) as f64 / 1e6
                    ));
                }
                self.take_report(&rep, false);
            }
            Err(e) => self.log.warn(&format!("tasks: {e}")),
        }
    }

    /// What is kept per thread for the log and the status, dropped when the thread exits:
    /// the memory of a long run stays bounded by the threads alive.
    fn forget_thread(&mut self, tid: i32) {
        for prefix in [format!("task:{tid}:"), format!("sched:{tid}:")] {
            let ids: Vec<String> = self
                .last_word
                .range(prefix.clone()..)
                .take_while(|(k, _)| k.starts_with(&prefix))
                .map(|(k, _)| k.clone())
                .collect();
            for id in ids {
                self.last_word.remove(&id);
            }
        }
        let (task, kthread) = (format!("task {tid} ("), format!("kthread {tid} ("));
        self.status
            .not_changeable
            .retain(|n| !n.starts_with(&task) && !n.starts_with(&kthread));
    }

    /// The fast path for one task (see libtaskisol::policy::fastpath); `true` when it must
    /// take the general path instead.
    fn fix_one(
        &mut self,
        pid: i32,
        tid: i32,
        since: Option<(Instant, u64)>,
        event_ns: Option<u64>,
    ) -> bool {
        match self.fixer.fix(&self.root, &self.policy, pid, tid) {
            Ok(Fix::Fine) | Ok(Fix::Gone) => false,
            Ok(Fix::Settled(why)) => {
                self.settled.insert(tid);
                self.log.debug(&format!("task {tid}: left alone: {why}"));
                false
            }
            Ok(Fix::Changed { label, from, to }) => {
                if let Some(at) = event_ns {
                    self.reacted(at);
                }
                if let Some((t, cpu)) = since {
                    self.log.debug(&format!(
                        "{label} corrected {:.2} ms after the event was read ({:.2} ms of isold's CPU time)",
                        t.elapsed().as_secs_f64() * 1000.0,
                        (thread_cpu_ns().saturating_sub(cpu)) as f64 / 1e6
                    ));
                }
                if let Some((m, _)) = &self.metrics {
                    m.corrected("tasks", None);
                }
                self.corrected("tasks", &label, &format!("changed: {from} -> {to}"));
                false
            }
            Ok(Fix::UseEngine) => true,
            Err(e) => {
                self.log.warn(&format!("task {tid}: {e}"));
                false
            }
        }
    }

    /// Count and log one correction; the status file follows within a scan interval.
    /// Tasks are logged one by one only with -v, else summed up every 10 s: a burst of wide
    /// tasks must not become a burst of journal writes on the housekeeping CPUs.
    fn corrected(&mut self, item: &str, label: &str, what: &str) {
        *self.status.corrections.entry(item.to_string()).or_default() += 1;
        if item == "tasks" {
            self.log.debug(&format!("corrected {label}: {what}"));
            self.tasks_unlogged += 1;
            self.tasks_last = format!("{label}: {what}");
        } else {
            self.log.info(&format!("corrected {label}: {what}"));
        }
        self.status.last_correction = Some(Correction {
            at: now_s(),
            item: item.into(),
            label: label.into(),
            what: what.into(),
        });
        self.dirty = true;
    }

    /// A scan thread for the policy in force; `None` (said in the log) when it cannot start.
    fn scanner(&self, interval: Duration) -> Option<Scanner> {
        match Scanner::start(
            self.root.clone(),
            self.policy.clone(),
            self.files.clone(),
            interval,
        ) {
            Ok(s) => Some(s),
            Err(e) => {
                self.log.warn(&format!("cannot start the scan thread: {e}"));
                None
            }
        }
    }

    /// The summary line of the task corrections since the last one.
    fn log_tasks(&mut self) {
        if self.tasks_unlogged == 0 {
            return;
        }
        self.log.info(&format!(
            "corrected {} wide task(s); the last: {}",
            self.tasks_unlogged, self.tasks_last
        ));
        self.tasks_unlogged = 0;
    }

    /// A task narrowed in answer to an event the kernel stamped `at_ns`: its reaction time.
    fn reacted(&mut self, at_ns: u64) {
        if self.reactions.len() == REACTIONS_KEPT {
            self.reactions.pop_front();
        }
        let ns = monotonic_ns().saturating_sub(at_ns);
        self.reactions.push_back(ns);
        if let Some((m, _)) = &self.metrics {
            m.task_reaction(ns as f64 / 1e9);
        }
        self.reactions_count += 1;
    }

    /// Tasks for the general path, then the fast path's memory of the state file renewed.
    /// `stamps`: the event time of threads that are there in answer to an event.
    fn fix_with_engine(&mut self, ids: &[(i32, i32)], stamps: &[(i32, u64)]) {
        if ids.is_empty() {
            return;
        }
        self.fix_threads(ids, None, stamps);
        if let Err(e) = self.fixer.resync() {
            self.log.warn(&format!("state file: {e}"));
        }
    }

    fn on_proc_events(&mut self) -> bool {
        let Some(p) = self.procs.as_mut() else {
            return false;
        };
        let read_at = (Instant::now(), thread_cpu_ns());
        let batch = match p.read() {
            Ok(b) => b,
            Err(e) => {
                self.log.warn(&format!("process events: {e}"));
                return false;
            }
        };
        let kthread_rules = !self.policy.config.kthread_priority.is_empty();
        let mut check: Vec<(i32, i32, u64)> = Vec::new();
        let mut engine: Vec<(i32, i32)> = Vec::new();
        for Stamped { at_ns, event: ev } in batch.events {
            self.log.trace(&format!("event {ev:?}"));
            match ev {
                ProcEvent::Fork {
                    parent_tgid,
                    child_pid,
                    child_tgid,
                } => {
                    self.known.insert(child_pid);
                    if parent_tgid == 2 {
                        // A kthread: kthreadd forks it, then its creator names it. Its
                        // priority rule is looked up once it has its name.
                        if kthread_rules && self.new_kthreads.len() < 4096 {
                            self.new_kthreads.push((
                                Instant::now() + Duration::from_millis(50),
                                Instant::now(),
                                child_tgid,
                                child_pid,
                            ));
                        }
                    } else if child_pid != child_tgid && self.new_threads.len() < 65536 {
                        // A thread of a running process: its creator may pin it at once.
                        self.new_threads.push((
                            Instant::now() + NEW_THREAD_GRACE,
                            child_tgid,
                            child_pid,
                            at_ns,
                        ));
                    } else {
                        check.push((child_tgid, child_pid, at_ns));
                    }
                }
                ProcEvent::Exec { pid, tgid } => {
                    self.settled.remove(&pid);
                    check.push((tgid, pid, at_ns));
                }
                ProcEvent::Comm { pid, tgid, comm } => {
                    self.settled.remove(&pid);
                    // Only a name a priority rule matches needs the general path; the fast
                    // path reads the name itself for the allow-list. (An exec renames its
                    // task too: it must not cost the general path.)
                    let rule = self
                        .policy
                        .config
                        .kthread_priority
                        .iter()
                        .any(|(p, _)| glob_match(p, &comm));
                    if rule {
                        engine.push((tgid, pid));
                    } else {
                        check.push((tgid, pid, at_ns));
                    }
                }
                ProcEvent::Exit { pid, .. } => {
                    self.known.remove(&pid);
                    self.settled.remove(&pid);
                    self.new_threads.retain(|t| t.2 != pid);
                    self.forget_thread(pid);
                }
            }
        }
        let mut stamps = Vec::new();
        for (pid, tid, at_ns) in check {
            if engine.contains(&(pid, tid)) || self.settled.contains(&tid) {
                continue;
            }
            if self.fix_one(pid, tid, Some(read_at), Some(at_ns)) {
                engine.push((pid, tid));
                stamps.push((tid, at_ns));
            }
        }
        self.fix_with_engine(&engine, &stamps);
        batch.lost
    }

    /// New threads whose grace is over: checked as a process event's task is.
    fn due_threads(&mut self, now: Instant) {
        let due = take_due(&mut self.new_threads, now, |t| t.0);
        let mut engine = Vec::new();
        let mut stamps = Vec::new();
        for (_, pid, tid, at_ns) in due {
            if self.settled.contains(&tid) {
                continue;
            }
            if self.fix_one(pid, tid, None, Some(at_ns)) {
                engine.push((pid, tid));
                stamps.push((tid, at_ns));
            }
        }
        self.fix_with_engine(&engine, &stamps);
    }

    /// New kthreads whose names are due to be known: their priority rules applied.
    /// A kthread still called `kthreadd` has not been named by its creator yet (naming sends
    /// no process event): it is looked at again 100 ms later, for 5 s at most.
    fn due_kthreads(&mut self, now: Instant) {
        let due = take_due(&mut self.new_kthreads, now, |t| t.0);
        let mut later = std::mem::take(&mut self.new_kthreads);
        let mut ids = Vec::new();
        for (_, forked, pid, tid) in due {
            let comm = self
                .root
                .read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                .unwrap_or_default();
            if comm.trim() == "kthreadd" && now.duration_since(forked) < Duration::from_secs(5) {
                later.push((now + Duration::from_millis(100), forked, pid, tid));
            } else if !comm.is_empty() {
                ids.push((pid, tid));
            }
        }
        self.new_kthreads = later;
        self.fix_with_engine(&ids, &[]);
    }

    /// Every known thread's affinity by system call; the suspicious ones read and fixed.
    fn sweep_tasks(&mut self) {
        if self.procs.is_none() || !self.root.is_host() {
            // No event stream: the full scan is the only way to see new tasks.
            self.full_task_scan();
            return;
        }
        let mut read = Vec::new();
        let mut gone = Vec::new();
        for &tid in &self.known {
            if self.settled.contains(&tid) {
                continue;
            }
            match sched::get_affinity(tid) {
                Ok(a) if self.suspicious(&a) => read.push(tid),
                Ok(_) => {}
                Err(_) => gone.push(tid),
            }
        }
        for tid in gone {
            self.known.remove(&tid);
        }
        let mut engine = Vec::new();
        for tid in read {
            // The process of a thread: the Tgid line of its status (one read per suspicious
            // thread).
            let Some(tgid) = self
                .root
                .read_to_string(format!("/proc/{tid}/status"))
                .ok()
                .and_then(|st| {
                    libtaskisol::procfs::status_field(&st, "Tgid")?
                        .trim()
                        .parse()
                        .ok()
                })
            else {
                continue;
            };
            if self.fix_one(tgid, tid, None, None) {
                engine.push((tgid, tid));
            }
        }
        self.fix_with_engine(&engine, &[]);
    }

    /// Every thread read from /proc and the thread items applied (start, lost events, no
    /// connector).
    fn full_task_scan(&mut self) {
        let threads = match tasks::all_threads_with(&self.root, tasks::Detail::NoSwitches) {
            Ok(t) => t,
            Err(e) => {
                self.log.warn(&format!("tasks: {e}"));
                return;
            }
        };
        self.known = threads.iter().map(|t| t.tid).collect();
        self.settled.retain(|t| self.known.contains(t));
        match engine::apply_threads(&self.root, &self.policy, &self.files, &threads) {
            Ok(rep) => {
                self.take_report(&rep, false);
            }
            Err(e) => self.log.warn(&format!("tasks: {e}")),
        }
        drop(threads);
        give_back_memory();
    }

    /// The partition checked (three reads) and, when it is not an isolated partition of the
    /// isolated CPUs, made again. `event`: a watched file changed (else a periodic check,
    /// skipped while the last attempt failed: retried on an event, a uevent or a reload).
    fn check_partition(&mut self, event: bool) {
        let Some(dir) = self.policy.config.cgroup_partition.clone() else {
            return;
        };
        if self.partition_failed && !event {
            return;
        }
        let Some(p) = partition_policy(&self.policy) else {
            return;
        };
        let id = format!("cgroup_partition:{dir}");
        // A change that lands while the partition is made again has its event dropped with
        // the old watches: looked at again after the new ones are in place (three tries).
        for _ in 0..3 {
            if partition::holds(&self.root, &dir, &self.policy.isolated) {
                return;
            }
            let now = Instant::now();
            if self.partition_contests.waiting(&id, now) {
                // Contested: left as the other program set it until the back-off ends.
                self.partition_retry = self.partition_contests.until(&id);
                return;
            }
            // A partition this daemon made (its directory is there): remade without the
            // workload scan of every task; otherwise the whole item, as apply does it.
            let out = match plan::partition_repair_target(&p) {
                Some(t) if self.root.exists(&dir) => {
                    engine::apply_only(&self.root, &p, &self.files, vec![t])
                }
                _ => engine::apply(&self.root, &p, &self.files),
            };
            match out {
                Ok(rep) => {
                    if rep.written.contains(&id) {
                        if let Some(ch) = self.partition_contests.repaired(
                            &id,
                            &format!("isolated partition {dir}"),
                            now,
                        ) {
                            self.contest_changed(&ch);
                        }
                        self.refresh_contested();
                    }
                    self.take_report(&rep, false);
                }
                Err(e) => self.log.warn(&format!("cgroup partition: {e}")),
            }
            // The apply's own writes queued events, and a directory made again needs new
            // watches.
            self.watch_partition();
            if self.partition_failed {
                return;
            }
        }
    }

    /// inotify on the partition's files; without it (no directory, no inotify) the main loop
    /// checks the partition every interval.
    fn watch_partition(&mut self) {
        self.inotify = None;
        let Some(dir) = &self.policy.config.cgroup_partition else {
            return;
        };
        use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
        // All the flags there are: IN_NONBLOCK and IN_CLOEXEC.
        let watched = Inotify::init(InitFlags::all()).and_then(|i| {
            for f in partition::watched_files(dir.trim_end_matches('/')) {
                let path = self.root.path(&f);
                // cpuset.cpus.exclusive is new in 6.7.
                if f.ends_with(".exclusive") && !path.exists() {
                    continue;
                }
                i.add_watch(&path, AddWatchFlags::IN_MODIFY)?;
            }
            Ok(i)
        });
        match watched {
            Ok(i) => {
                self.inotify = Some(i);
                self.partition_unwatched = false;
            }
            Err(e) if !self.partition_unwatched => {
                self.partition_unwatched = true;
                self.log.warn(&format!(
                    "cannot watch the partition {dir}: {e}; it is checked every interval instead"
                ));
            }
            Err(_) => {}
        }
    }

    /// PM QoS: hold a CPU latency request while running (closing the file drops it).
    /// The request is kept in systemd's file descriptor store (isold.service allows one):
    /// across a restart, or a restart after a crash, the CPU latency limit never lapses. A
    /// plain stop releases it (systemd empties the store of a unit that stops).
    fn hold_dma_latency(&mut self) {
        self.status.cpu_dma_latency_us = None;
        let Some(us) = self.policy.config.pm_qos else {
            if self.dma.take().is_some() && self.dma_stored {
                lifecycle::notify_with_fds(
                    &format!("FDSTOREREMOVE=1\nFDNAME={}", lifecycle::DMA_FDNAME),
                    &[],
                );
                self.dma_stored = false;
            }
            return;
        };
        let path = self.root.path("/dev/cpu_dma_latency");
        let value = i32::try_from(us).unwrap_or(i32::MAX);
        // A request already held (this process's, or the one systemd kept for it) takes the
        // new value in place: there is no moment without one.
        let held = match self.dma.take() {
            Some(f) => Ok(f),
            None => fs::OpenOptions::new().write(true).open(&path),
        };
        match held.and_then(|mut f| f.write_all(&value.to_ne_bytes()).map(|()| f)) {
            Ok(f) => {
                if self.root.is_host() && !self.dma_stored {
                    use std::os::fd::AsRawFd;
                    self.dma_stored = lifecycle::notify_with_fds(
                        &format!("FDSTORE=1\nFDNAME={}", lifecycle::DMA_FDNAME),
                        &[f.as_raw_fd()],
                    );
                }
                self.dma = Some(f);
                self.status.cpu_dma_latency_us = Some(us);
                self.log
                    .debug(&format!("holding {} at {us} us", path.display()));
            }
            Err(e) => self.log.warn(&format!(
                "cannot hold {} at {us} us: {}",
                path.display(),
                libtaskisol::error::io_strerror(&e)
            )),
        }
    }

    /// SIGHUP: the new file resolved; what it no longer covers restored; the rest applied.
    fn reload(&mut self) {
        let new = match crate::load_policy(&self.config_path, &self.root) {
            Ok(p) => p.with_claims(&self.policy.claims),
            Err(msg) => {
                self.log
                    .warn(&format!("reload: {msg}; keeping the policy in force"));
                return;
            }
        };
        if new == self.policy {
            self.log.info("reload: the configuration is unchanged");
            self.status.reloads += 1;
            self.save_status();
            return;
        }
        if self.policy.config.metrics != new.config.metrics {
            self.log.info(
                "reload: [metrics] changed: the listener and the textfile change at the next restart",
            );
        }
        self.change_policy(new, Change::Reload);
        self.status.reloads += 1;
        self.save_status();
    }

    /// Put policy `new` in force in place of the current one (a reload, a container's claim
    /// made or released), the scan thread stopped by the caller: what the new policy no
    /// longer covers is restored, CPUs it no longer isolates are given back to the IRQs,
    /// threads and masks that had them ([`engine::give_back`]: a narrowed thread is never
    /// widened onto a CPU that stays isolated on the way), then the new policy is applied.
    /// `Some(report of the apply)`, `None` when the new policy cannot be planned (the current
    /// one stays).
    fn change_policy(&mut self, new: Policy, change: Change) -> Option<Report> {
        let why = change.word();
        // A claim changes the isolated CPUs and the power settings only: what it touches is
        // planned and applied, and only power values can stop being covered.
        let claims_only = change != Change::Reload;
        let scoped = if claims_only {
            claims_policy(&new)
        } else {
            new.clone()
        };
        let ids: HashSet<String> = match plan::plan(&scoped, &self.root) {
            Ok(t) => t.into_iter().map(|t| t.id).collect(),
            Err(e) => {
                self.log
                    .warn(&format!("{why}: {e}; keeping the policy in force"));
                return None;
            }
        };
        // A narrowed thread the new plan does not list (it is off the isolated CPUs now) keeps
        // its narrowing while the item is on: give_back widens it by the freed CPUs only.
        let tasks_kept = new.config.tasks;
        let covered = |id: &str| {
            ids.contains(id)
                || (tasks_kept && id.starts_with("task:"))
                || (claims_only && !id.starts_with("pm_qos:") && !id.starts_with("cpufreq:"))
        };
        match engine::restore_where(&self.root, &self.files, |id| !covered(id)) {
            Ok(rep) => {
                let n = rep
                    .outcomes
                    .iter()
                    .filter(|o| matches!(o.status, Status::Restored { .. }))
                    .count();
                if n > 0 {
                    self.log.info(&format!(
                        "{why}: {n} value(s) the new policy no longer covers restored"
                    ));
                }
                for o in rep.problems() {
                    self.log.warn(&format!("{why}: {}: {}", o.label, o.status));
                }
            }
            Err(e) => self.log.warn(&format!("{why}: restore: {e}")),
        }
        let freed = self.policy.isolated.difference(&new.isolated);
        match engine::give_back(&self.root, &self.files, &freed) {
            Ok(rep) => {
                if !rep.outcomes.is_empty() {
                    self.log.info(&format!(
                        "{why}: CPUs {freed} given back to {} value(s)",
                        rep.outcomes.len()
                    ));
                }
                for o in rep.problems() {
                    self.log.warn(&format!("{why}: {}: {}", o.label, o.status));
                }
            }
            Err(e) => self
                .log
                .warn(&format!("{why}: giving CPUs {freed} back: {e}")),
        }
        self.policy = new;
        if let Some((m, scope)) = &self.metrics {
            m.policy(&self.policy);
            *scope.lock().unwrap_or_else(|e| e.into_inner()) =
                crate::metrics::scope_of(&self.policy);
        }
        self.last_word.clear();
        self.settled.clear();
        let rep = match engine::apply(&self.root, &scoped, &self.files) {
            Ok(rep) => {
                self.log.info(&format!("{why}: apply: {}", rep.summary()));
                self.take_report(&rep, true);
                Some(rep)
            }
            Err(e) => {
                self.log.warn(&format!("{why}: apply: {e}"));
                None
            }
        };
        if let Err(e) = self.fixer.resync() {
            self.log.warn(&format!("state file: {e}"));
        }
        give_back_memory();
        self.hold_dma_latency();
        self.watch_partition();
        self.fill_status_policy();
        self.status.on_stop = self.policy.config.on_stop.name().into();
        self.refresh_waiting();
        self.save_status();
        rep
    }

    /// The status's contested values: the scan thread's and the partition's.
    /// Whether the policy holds, for the metrics: the last check's word, and nothing
    /// contested.
    fn holds(&self, checked_ok: bool) {
        if let Some((m, _)) = &self.metrics {
            m.holds(checked_ok && self.status.contested.is_empty());
        }
    }

    /// `[metrics]`: the listener and the health sampler started (each on a thread of its
    /// own, niced: they must never delay a correction), or said why not. A listener that
    /// cannot bind is a warning: isolation does not wait for metrics.
    fn start_metrics(&mut self) {
        let Some(cfg) = self.policy.config.metrics.clone() else {
            return;
        };
        let metrics = Arc::new(crate::metrics::Metrics::new(&self.policy));
        metrics.holds(self.status.contested.is_empty());
        let scope = Arc::new(Mutex::new(crate::metrics::scope_of(&self.policy)));
        match crate::metrics::listen(&cfg) {
            None => {}
            Some(Ok(l)) => {
                let m = metrics.clone();
                let spawned =
                    std::thread::Builder::new()
                        .name("isold-http".into())
                        .spawn(move || {
                            nice_this_thread();
                            crate::metrics::serve(l, m)
                        });
                match spawned {
                    Ok(_) => self.log.info(&format!(
                        "metrics on http://{}/metrics",
                        cfg.listen.expect("listening")
                    )),
                    Err(e) => self.log.warn(&format!("metrics listener: {e}")),
                }
            }
            Some(Err(e)) => self.log.warn(&format!(
                "cannot listen on {} for metrics: {e}{}",
                cfg.listen.expect("asked"),
                crate::metrics::sandbox_hint(&e)
            )),
        }
        let (m, sc, root, log) = (metrics.clone(), scope.clone(), self.root.clone(), self.log);
        let spawned = std::thread::Builder::new()
            .name("isold-health".into())
            .spawn(move || {
                nice_this_thread();
                // Each failure is said once until the next success, not every interval.
                let (mut sample_failing, mut text_failing) = (false, false);
                loop {
                    let scope = sc.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    if let Some(e) = first_failure(m.sample(&root, &scope), &mut sample_failing) {
                        log.warn(&format!("health sample: {e}"));
                    }
                    if let Some(path) = &cfg.textfile {
                        let written = crate::metrics::write_textfile(path, &m);
                        if let Some(e) = first_failure(written, &mut text_failing) {
                            log.warn(&format!(
                                "cannot write {}: {e}{}",
                                path.display(),
                                crate::metrics::sandbox_hint(&e)
                            ));
                        }
                    }
                    std::thread::sleep(cfg.interval);
                }
            });
        if let Err(e) = spawned {
            self.log.warn(&format!("metrics sampler: {e}"));
        }
        self.metrics = Some((metrics, scope));
    }

    fn refresh_contested(&mut self) {
        let mut all = self.scan_contested.clone();
        all.extend(self.partition_contests.list());
        if let Some((m, _)) = &self.metrics {
            m.contested(all.len());
        }
        if all != self.status.contested {
            self.status.contested = all;
            self.dirty = true;
        }
    }

    /// A value became contested (said once, as a warning) or settled.
    fn contest_changed(&mut self, change: &contest::Change) {
        match change {
            contest::Change::Contested(c) => self.log.warn(&format!(
                "{}: something else keeps changing it back ({} repairs within {} s): repaired again after {} s, twice as long each time it is undone (up to {} s); find what writes it (tuned, irqbalance, a script) or leave it out of the policy",
                c.label,
                c.repairs,
                contest::WINDOW.as_secs(),
                c.backoff_s,
                contest::MAX_BACKOFF.as_secs()
            )),
            contest::Change::Settled { label, .. } => {
                self.log.info(&format!("{label}: no longer changed back"))
            }
        }
        self.dirty = true;
    }

    /// The policy's files that wait for a reboot, a module load or a daemon restart, for the
    /// status (a few reads: no task scan).
    fn refresh_waiting(&mut self) {
        let now: Vec<String> = match engine::waiting(&self.root, &self.policy) {
            Ok(w) => w
                .iter()
                .map(|o| format!("{}: {}", o.label, o.status))
                .collect(),
            Err(e) => vec![format!("cannot tell: {e}")],
        };
        if now != self.status.waiting {
            for w in now.iter().filter(|w| !self.status.waiting.contains(w)) {
                self.log.info(w);
            }
            self.status.waiting = now;
            self.dirty = true;
        }
    }

    fn fill_status_policy(&mut self) {
        self.status.config = self.config_path.display().to_string();
        self.status.preset = self.policy.config.preset.name().to_string();
        self.status.isolated = self.policy.isolated.to_string();
        self.status.housekeeping = self.policy.housekeeping.to_string();
    }
}

/// `isold run`: returns the exit code.
pub fn run(root: &SysRoot, config_path: &Path, files: &StateFiles, args: &RunArgs) -> i32 {
    one_heap();
    let log = Log {
        verbose: args.verbose,
        journal: std::env::var_os("JOURNAL_STREAM").is_some(),
    };
    let policy = match crate::load_policy(config_path, root) {
        Ok(p) => p,
        Err(msg) => return not_configured(&log, &msg),
    };
    // The claims of containers made before a restart are in force until found released:
    // the first apply keeps their CPUs quiet, then the dead ones are given back.
    let claims = load_claims(root, files, &log);
    let policy = policy.with_claims(&claims);
    let _run_lock = match lifecycle::lock_run(&files.runtime) {
        Ok(l) => l,
        Err(msg) => {
            log.warn(&msg);
            return crate::EXIT_FAILURE;
        }
    };
    let signals = match block_signals(&log) {
        Ok(s) => s,
        Err(code) => return code,
    };
    if root.is_host() {
        // Never a source of noise itself: nothing of isold runs on an isolated CPU.
        if let Err(e) = sched::set_affinity(0, &policy.housekeeping) {
            log.warn(&format!(
                "cannot pin isold to the housekeeping CPUs {}: {e}",
                policy.housekeeping
            ));
        }
    }
    let mut d = Daemon::new(root, config_path, files, policy, log, args);
    // Subscribe before the first apply: a task started meanwhile is seen either way.
    d.open_events(args);
    // A hook that connects during the first apply waits for its answer.
    d.open_socket();
    if let Err(code) = d.first_apply() {
        return code;
    }
    d.release_dead_claims();
    d.ready();
    d.start_metrics();
    let timers = Timers::new(args);
    match d.scanner(timers.interval) {
        Some(scanner) => serve(d, &signals, scanner, timers),
        None => stop(&mut d, Signal::SIGTERM).max(crate::EXIT_FAILURE),
    }
}

/// The claims file of this boot; one that cannot be read is said and left (the claims in it
/// are lost: their CPUs stay as they are until `isold restore`).
fn load_claims(root: &SysRoot, files: &StateFiles, log: &Log) -> Vec<Claim> {
    let boot = libtaskisol::policy::state::boot_id(root).unwrap_or_default();
    match ClaimsFile::load(&ClaimsFile::path_for(&files.runtime), &boot) {
        Ok(c) => {
            if !c.is_empty() {
                log.info(&format!(
                    "{} container claim(s) from before the start",
                    c.len()
                ));
            }
            c
        }
        Err(e) => {
            log.warn(&format!("{e}; starting without the containers' claims"));
            Vec::new()
        }
    }
}

/// A configuration or state file that cannot be used stays so: exit 6, which isold.service
/// does not restart on (RestartPreventExitStatus=6), with the reason in the log and in
/// `systemctl status`.
fn not_configured(log: &Log, msg: &str) -> i32 {
    log.warn(msg);
    notify(&format!(
        "STATUS=not started: {}",
        msg.lines().next().unwrap_or_default()
    ));
    crate::EXIT_NOT_CONFIGURED
}

/// SIGHUP, SIGTERM and SIGINT are taken by a signalfd only: blocked first, before anything
/// can arrive.
fn block_signals(log: &Log) -> Result<SignalFd, i32> {
    let mut mask = SigSet::empty();
    for s in [Signal::SIGHUP, Signal::SIGTERM, Signal::SIGINT] {
        mask.add(s);
    }
    if let Err(e) = mask.thread_block() {
        log.warn(&format!("cannot block signals: {e}"));
        return Err(crate::EXIT_FAILURE);
    }
    SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC).map_err(|e| {
        log.warn(&format!("signalfd: {e}"));
        crate::EXIT_FAILURE
    })
}

impl Daemon {
    fn new(
        root: &SysRoot,
        config_path: &Path,
        files: &StateFiles,
        policy: Policy,
        log: Log,
        args: &RunArgs,
    ) -> Daemon {
        let on_stop = policy.config.on_stop;
        let dma = if root.is_host() {
            lifecycle::stored_fd(lifecycle::DMA_FDNAME).map(fs::File::from)
        } else {
            None
        };
        if dma.is_some() {
            log.info("took the CPU latency request back from systemd's file descriptor store");
        }
        let mut d = Daemon {
            root: root.clone(),
            config_path: config_path.to_path_buf(),
            files: files.clone(),
            policy,
            log,
            status: DaemonStatus {
                pid: std::process::id() as i32,
                started: now_s(),
                interval_s: args.interval,
                task_interval_s: args.task_interval,
                state: "running".into(),
                on_stop: on_stop.name().into(),
                ..DaemonStatus::default()
            },
            procs: None,
            uevents: None,
            known: BTreeSet::new(),
            settled: HashSet::new(),
            last_word: BTreeMap::new(),
            dma_stored: dma.is_some(),
            dma,
            inotify: None,
            partition_failed: false,
            partition_unwatched: false,
            partition_contests: contest::Contests::default(),
            partition_retry: None,
            scan_contested: Vec::new(),
            fixer: TaskFixer::new(&files.runtime),
            new_kthreads: Vec::new(),
            new_threads: Vec::new(),
            dirty: false,
            tasks_unlogged: 0,
            tasks_last: String::new(),
            reactions: std::collections::VecDeque::with_capacity(REACTIONS_KEPT),
            reactions_count: 0,
            metrics: None,
            server: None,
            claims_path: ClaimsFile::path_for(&files.runtime),
            boot_id: libtaskisol::policy::state::boot_id(root).unwrap_or_default(),
        };
        d.fill_status_policy();
        d
    }

    /// The process events connector and the uevent socket, each replaced by scans (said once)
    /// when it cannot be had.
    fn open_events(&mut self, args: &RunArgs) {
        if !self.root.is_host() {
            self.status.task_events =
                "periodic scans (--root: a captured tree has no events)".into();
            self.status.device_events = "none (--root)".into();
            return;
        }
        self.procs = opened(
            ProcEvents::open(),
            ("proc connector", &mut self.status.task_events),
            &self.log,
            |e| {
                (
                    format!("periodic scans ({e})"),
                    format!(
                        "process events connector unavailable ({e}): new tasks are found by a /proc scan every {} s",
                        args.task_interval
                    ),
                )
            },
        );
        self.uevents = opened(
            Uevents::open(),
            ("uevents", &mut self.status.device_events),
            &self.log,
            |e| {
                (
                    format!("none ({e})"),
                    format!(
                        "device uevents unavailable ({e}): new IRQs are found by the scan every {} s",
                        args.interval
                    ),
                )
            },
        );
    }

    /// The policy applied as `isold apply` does; `Err` with the exit code when it cannot be.
    fn first_apply(&mut self) -> Result<(), i32> {
        match engine::apply(&self.root, &self.policy, &self.files) {
            Ok(rep) => {
                self.log.info(&format!(
                    "isolating CPUs {} (housekeeping {}): {}",
                    self.policy.isolated,
                    self.policy.housekeeping,
                    rep.summary()
                ));
                self.take_report(&rep, true);
                // The apply's garbage goes back before what the daemon keeps is made, so that
                // what it keeps is not strewn over pages the allocator cannot return.
                drop(rep);
                give_back_memory();
                // The threads known: their ids only (a directory listing per process, no
                // file of theirs read).
                if let Ok(pids) = tasks::pids(&self.root) {
                    self.known = pids
                        .into_iter()
                        .flat_map(|pid| {
                            libtaskisol::procfs::thread_ids(&self.root, pid).unwrap_or_default()
                        })
                        .collect();
                }
                if let Err(e) = self.fixer.resync() {
                    self.log.warn(&format!("state file: {e}"));
                }
                give_back_memory();
                Ok(())
            }
            Err(e @ libtaskisol::Error::State { .. }) => {
                Err(not_configured(&self.log, &e.to_string()))
            }
            Err(e) => {
                self.log.warn(&format!("apply: {e}"));
                Err(crate::EXIT_FAILURE)
            }
        }
    }

    /// After the first apply: the latency request held, the partition watched, the status
    /// written, READY=1 to systemd.
    fn ready(&mut self) {
        self.hold_dma_latency();
        self.refresh_waiting();
        self.watch_partition();
        self.save_status();
        self.notify_ready();
    }

    fn notify_ready(&self) {
        notify(&format!(
            "READY=1\nSTATUS=isolating CPUs {}; tasks: {}",
            self.policy.isolated, self.status.task_events
        ));
    }
}

impl Daemon {
    /// Listen for `isold hook` (said once when the socket cannot be bound: containers then
    /// start as `--if-down` says).
    fn open_socket(&mut self) {
        let path = crate::claims::socket_path(&self.files.runtime);
        match crate::claims::Server::bind(&path) {
            Ok(s) => self.server = Some(s),
            Err(e) => self.log.warn(&format!(
                "cannot listen on {}: {e}: containers cannot claim CPUs",
                path.display()
            )),
        }
    }

    /// Keep the claims in their file (before a claim is applied, after a release is).
    fn save_claims(&self, claims: &[Claim]) -> Result<(), String> {
        ClaimsFile::save(&self.claims_path, &self.boot_id, claims)
            .map_err(|e| format!("cannot write {}: {e}", self.claims_path.display()))
    }

    /// The claims whose container is gone.
    fn dead_claims(&self) -> Vec<Claim> {
        self.policy
            .claims
            .iter()
            .filter(|c| !c.alive(&self.root))
            .cloned()
            .collect()
    }

    /// Release the claims whose container's process is gone (killed, its poststop hook never
    /// run): `true` when there were any.
    fn release_dead_claims(&mut self) -> bool {
        let dead = self.dead_claims();
        if dead.is_empty() {
            return false;
        }
        for c in &dead {
            self.log.info(&format!(
                "{}: its process {} is gone: releasing CPUs {}",
                c.who(),
                c.pid,
                c.cpus
            ));
        }
        let left: Vec<Claim> = self
            .policy
            .claims
            .iter()
            .filter(|c| !dead.contains(c))
            .cloned()
            .collect();
        self.set_claims(left, Change::Release);
        true
    }

    /// Put `claims` in force: the policy changed, then the file written.
    fn set_claims(&mut self, claims: Vec<Claim>, change: Change) -> Option<Report> {
        let new = self.policy.with_claims(&claims);
        let rep = self.change_policy(new, change);
        if let Err(e) = self.save_claims(&self.policy.claims) {
            self.log.warn(&e);
        }
        rep
    }

    /// What a request on the socket asks, carried out: the reply.
    fn on_request(&mut self, msg: Message) -> Reply {
        let reply = |ok: bool, message: String| Reply {
            ok,
            message,
            claims: Vec::new(),
        };
        match msg {
            Message::List {} => Reply {
                ok: true,
                message: format!("{} claim(s)", self.policy.claims.len()),
                claims: self.policy.claims.clone(),
            },
            Message::Release { container } => {
                let Some(c) = self
                    .policy
                    .claims
                    .iter()
                    .find(|c| c.container == container)
                    .cloned()
                else {
                    return reply(
                        true,
                        format!(
                            "container {} holds no claim",
                            libtaskisol::policy::claims::short(&container)
                        ),
                    );
                };
                let left: Vec<Claim> = self
                    .policy
                    .claims
                    .iter()
                    .filter(|o| o.container != container)
                    .cloned()
                    .collect();
                self.set_claims(left, Change::Release);
                let msg = format!("{}: CPUs {} released", c.who(), c.cpus);
                self.log.info(&msg);
                reply(true, msg)
            }
            Message::Claim(req) => {
                let others: Vec<Claim> = self
                    .policy
                    .claims
                    .iter()
                    .filter(|o| o.container != req.container)
                    .cloned()
                    .collect();
                let claim = match Claim::resolve(
                    &self.root,
                    &req,
                    &self.policy.online,
                    &self.policy.static_isolated(),
                    &others,
                ) {
                    Ok(c) => c,
                    Err(e) => {
                        self.log.warn(&format!("claim refused: {e}"));
                        return reply(false, format!("claim refused: {e}"));
                    }
                };
                let mut claims = others;
                claims.push(claim.clone());
                // Kept before it is applied: a daemon killed in the middle finds it at its
                // next start.
                if let Err(e) = self.save_claims(&claims) {
                    self.log.warn(&format!("claim refused: {e}"));
                    return reply(false, format!("claim refused: {e}"));
                }
                let isolated = claim.isolated_set();
                let rep = self.set_claims(claims, Change::Claim);
                let problems = rep.as_ref().map_or(0, |r| r.problems().count());
                let mut what = Vec::new();
                if !isolated.is_empty() {
                    what.push(format!("CPUs {isolated} isolated"));
                }
                if let Some(q) = &claim.pm_qos {
                    what.push(format!("PM QoS {q}"));
                }
                if let Some(g) = &claim.governor {
                    what.push(format!("governor {g}"));
                }
                let msg = format!(
                    "{}: {} on CPUs {} ({} value(s) changed{})",
                    claim.who(),
                    what.join(", "),
                    claim.cpus,
                    rep.as_ref().map_or(0, |r| r
                        .outcomes
                        .iter()
                        .filter(|o| matches!(o.status, Status::Changed { .. }))
                        .count()),
                    if problems > 0 {
                        format!(", {problems} problem(s): see isold's log")
                    } else {
                        String::new()
                    }
                );
                self.log.info(&msg);
                reply(true, msg)
            }
        }
    }
}

/// The main thread's timed work: the task sweep, the partition check without inotify, the
/// status file (at most every 200 ms) and the task log (every 10 s).
struct Timers {
    interval: Duration,
    task_interval: Duration,
    next_sweep: Instant,
    /// The partition when it cannot be watched: three reads every interval.
    next_partition: Instant,
    last_status: Instant,
    last_task_log: Instant,
    /// The claims' containers are looked for every interval.
    next_claims: Instant,
}

impl Timers {
    fn new(args: &RunArgs) -> Timers {
        let (interval, task_interval) = (secs(args.interval), secs(args.task_interval));
        let now = Instant::now();
        Timers {
            interval,
            task_interval,
            next_sweep: now + task_interval,
            next_partition: now + interval,
            last_status: now,
            last_task_log: now,
            next_claims: now + interval,
        }
    }

    /// How long poll(2) may sleep.
    fn timeout(&self, d: &Daemon) -> PollTimeout {
        let mut deadline = self.next_sweep;
        if d.partition_unwatched_now() {
            deadline = deadline.min(self.next_partition);
        }
        if let Some((at, _, _, _)) = d.new_kthreads.iter().min_by_key(|k| k.0) {
            deadline = deadline.min(*at);
        }
        if let Some((at, ..)) = d.new_threads.iter().min_by_key(|k| k.0) {
            deadline = deadline.min(*at);
        }
        if d.dirty {
            deadline = deadline.min(self.last_status + Duration::from_millis(200));
        }
        if d.tasks_unlogged > 0 {
            deadline = deadline.min(self.last_task_log + Duration::from_secs(10));
        }
        if let Some(at) = d.partition_retry {
            deadline = deadline.min(at);
        }
        if !d.policy.claims.is_empty() {
            deadline = deadline.min(self.next_claims);
        }
        let wait = deadline.saturating_duration_since(Instant::now());
        PollTimeout::try_from(wait.as_millis().min(60_000) as i32).unwrap_or(PollTimeout::NONE)
    }

    /// Whatever is due now.
    fn run_due(&mut self, d: &mut Daemon) {
        let now = Instant::now();
        if d.partition_retry.is_some_and(|at| now >= at) {
            d.partition_retry = None;
            d.check_partition(true);
        }
        for ch in d.partition_contests.sweep(now) {
            d.contest_changed(&ch);
            d.refresh_contested();
        }
        if d.partition_unwatched_now() && now >= self.next_partition {
            d.check_partition(false);
            self.next_partition = Instant::now() + self.interval;
        }
        if now >= self.next_sweep {
            d.sweep_tasks();
            d.refresh_waiting();
            self.next_sweep = Instant::now() + self.task_interval;
        }
        if !d.new_kthreads.is_empty() {
            d.due_kthreads(now);
        }
        if !d.new_threads.is_empty() {
            d.due_threads(now);
        }
        if d.tasks_unlogged > 0 && self.last_task_log.elapsed() >= Duration::from_secs(10) {
            d.log_tasks();
            self.last_task_log = Instant::now();
        }
        // The status file follows the corrections, at most every 200 ms: a burst of them
        // costs one write.
        if d.dirty && self.last_status.elapsed() >= Duration::from_millis(200) {
            d.save_status();
            d.dirty = false;
            self.last_status = Instant::now();
        }
    }
}

/// Which of the main thread's sources poll(2) found readable.
#[derive(Debug, Default)]
struct Ready {
    signals: bool,
    procs: bool,
    uevents: bool,
    inotify: bool,
    scanner: bool,
    socket: bool,
}

/// Sleep in poll(2) on every source until one is readable or `timeout` passes; `None` when
/// poll failed (said, unless a signal interrupted it).
fn wait_for(
    d: &Daemon,
    signals: &SignalFd,
    scanner: &Scanner,
    timeout: PollTimeout,
) -> Option<Ready> {
    let mut fds = vec![
        PollFd::new(signals.as_fd(), PollFlags::POLLIN),
        PollFd::new(scanner.wake.as_fd(), PollFlags::POLLIN),
    ];
    let proc_i = d.procs.as_ref().map(|p| {
        fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
        fds.len() - 1
    });
    let uev_i = d.uevents.as_ref().map(|u| {
        fds.push(PollFd::new(u.as_fd(), PollFlags::POLLIN));
        fds.len() - 1
    });
    let ino_i = d.inotify.as_ref().map(|i| {
        fds.push(PollFd::new(i.as_fd(), PollFlags::POLLIN));
        fds.len() - 1
    });
    let sock_i = d.server.as_ref().map(|s| {
        fds.push(PollFd::new(s.as_fd(), PollFlags::POLLIN));
        fds.len() - 1
    });
    if let Err(e) = nix::poll::poll(&mut fds, timeout) {
        if e != nix::errno::Errno::EINTR {
            d.log.warn(&format!("poll: {e}"));
            std::thread::sleep(Duration::from_millis(100));
        }
        return None;
    }
    let ready =
        |i: Option<usize>| i.is_some_and(|i| fds[i].revents().is_some_and(|r| !r.is_empty()));
    Some(Ready {
        signals: ready(Some(0)),
        scanner: ready(Some(1)),
        procs: ready(proc_i),
        uevents: ready(uev_i),
        inotify: ready(ino_i),
        socket: ready(sock_i),
    })
}

/// The main loop: events as they come, timed work when due, until SIGTERM or SIGINT.
fn serve(mut d: Daemon, signals: &SignalFd, mut scanner: Scanner, mut timers: Timers) -> i32 {
    loop {
        let Some(ready) = wait_for(&d, signals, &scanner, timers.timeout(&d)) else {
            continue;
        };
        if ready.signals {
            if let Some(code) = d.on_signals(signals, &mut scanner, timers.interval) {
                return code;
            }
        }
        if ready.procs && d.on_proc_events() {
            d.log
                .warn("process events were lost (socket overflow): scanning every task");
            d.full_task_scan();
        }
        if ready.uevents {
            d.on_uevents(&scanner);
        }
        if ready.inotify {
            if let Some(i) = d.inotify.as_ref() {
                let _ = i.read_events();
            }
            d.check_partition(true);
        }
        if ready.scanner {
            d.on_scan_messages(&scanner);
        }
        if ready.socket {
            if let Some(code) = d.on_socket(&mut scanner, timers.interval) {
                return code;
            }
        }
        if Instant::now() >= timers.next_claims {
            timers.next_claims = Instant::now() + timers.interval;
            if !d.dead_claims().is_empty() {
                scanner.stop();
                d.release_dead_claims();
                scanner = match d.scanner(timers.interval) {
                    Some(s) => s,
                    None => return stop(&mut d, Signal::SIGTERM).max(crate::EXIT_FAILURE),
                };
            }
        }
        timers.run_due(&mut d);
    }
}

impl Daemon {
    /// The requests waiting on the socket, each answered; a claim or release changes the
    /// policy with the scan thread stopped (`Some(exit code)` if it cannot be started again).
    fn on_socket(&mut self, scanner: &mut Scanner, interval: Duration) -> Option<i32> {
        loop {
            let (stream, msg) = self.server.as_ref()?.next()?;
            let reply = match msg {
                Err(e) => {
                    self.log.warn(&format!("socket: {e}"));
                    Reply {
                        ok: false,
                        message: e,
                        claims: Vec::new(),
                    }
                }
                Ok(m @ Message::List {}) => self.on_request(m),
                Ok(m) => {
                    scanner.stop();
                    let r = self.on_request(m);
                    *scanner = match self.scanner(interval) {
                        Some(s) => s,
                        None => {
                            crate::claims::answer(stream, &r);
                            return Some(stop(self, Signal::SIGTERM).max(crate::EXIT_FAILURE));
                        }
                    };
                    r
                }
            };
            crate::claims::answer(stream, &reply);
        }
    }

    /// The partition is configured but not watched by inotify.
    fn partition_unwatched_now(&self) -> bool {
        self.inotify.is_none() && self.policy.config.cgroup_partition.is_some()
    }

    /// SIGHUP reloads (with a new scan thread); SIGTERM and SIGINT stop: `Some(exit code)`.
    fn on_signals(
        &mut self,
        signals: &SignalFd,
        scanner: &mut Scanner,
        interval: Duration,
    ) -> Option<i32> {
        while let Ok(Some(info)) = signals.read_signal() {
            match Signal::try_from(info.ssi_signo as i32) {
                Ok(Signal::SIGHUP) => {
                    notify("RELOADING=1");
                    self.log.info("SIGHUP: reloading the configuration");
                    // The scan thread stops first: a scan of the old policy must not undo the
                    // new one.
                    scanner.stop();
                    self.reload();
                    *scanner = match self.scanner(interval) {
                        Some(s) => s,
                        None => return Some(stop(self, Signal::SIGTERM).max(crate::EXIT_FAILURE)),
                    };
                    self.notify_ready();
                }
                Ok(s) => {
                    scanner.stop();
                    return Some(stop(self, s));
                }
                Err(_) => {}
            }
        }
        None
    }

    /// A device came or went: the scan thread looks again shortly, once the burst is over
    /// (drivers request their IRQs after the uevent).
    fn on_uevents(&mut self, scanner: &Scanner) {
        let Some(u) = self.uevents.as_mut() else {
            return;
        };
        match u.read() {
            Ok((evs, lost)) => {
                if !evs.is_empty() || lost {
                    self.log.trace(&format!("{} uevent(s)", evs.len()));
                    // A CPU that came or went may let a failed partition be made.
                    self.partition_failed = false;
                    scanner.send(Ctl::Rescan);
                }
            }
            Err(e) => self.log.warn(&format!("uevents: {e}")),
        }
    }

    /// What the scan thread reported.
    fn on_scan_messages(&mut self, scanner: &Scanner) {
        let mut byte = [0u8; 64];
        while matches!(std::io::Read::read(&mut &scanner.wake, &mut byte), Ok(n) if n > 0) {}
        while let Ok(msg) = scanner.reports.try_recv() {
            match msg {
                ScanMsg::Report(rep) => {
                    self.take_report(&rep, false);
                    self.holds(rep.problems().count() == 0);
                }
                ScanMsg::Failed(e) => {
                    self.holds(false);
                    self.log.warn(&format!("scan: {e}"))
                }
                ScanMsg::Contest(change) => self.contest_changed(&change),
                ScanMsg::Contested(list) => {
                    self.scan_contested = list;
                    self.refresh_contested();
                }
            }
        }
    }
}

/// An event source, or `None` with the status text and the one log line that say what
/// replaces it (`instead` gives both from the error).
fn opened<T>(
    source: libtaskisol::Result<T>,
    (ok, status): (&str, &mut String),
    log: &Log,
    instead: impl FnOnce(&libtaskisol::Error) -> (String, String),
) -> Option<T> {
    match source {
        Ok(s) => {
            *status = ok.into();
            Some(s)
        }
        Err(e) => {
            let (text, line) = instead(&e);
            *status = text;
            log.warn(&line);
            None
        }
    }
}

/// SIGTERM/SIGINT: stop watching. With `on_stop = "keep"` (the default) every applied value
/// stays; with `"restore"` a plain stop restores them, a restart or a shutdown does not (a
/// restart would open a window where IRQs and tasks come back onto the workload's CPUs; a
/// shutdown would remove the boot-time files the next boot needs).
fn stop(d: &mut Daemon, sig: Signal) -> i32 {
    d.log_tasks();
    let kind = match d.policy.config.on_stop {
        OnStop::Keep => None,
        OnStop::Restore => Some(lifecycle::stop_kind()),
    };
    let restore = kind == Some(StopKind::Stop);
    notify(if restore {
        "STOPPING=1\nSTATUS=restoring the original values"
    } else {
        "STOPPING=1\nSTATUS=stopping; the policy stays in force"
    });
    d.status.state = "stopping".into();
    d.save_status();
    let code = if restore {
        d.log.info(&format!(
            "{sig}: a stop, and on_stop = \"restore\": restoring the original values"
        ));
        match engine::restore(&d.root, &d.files) {
            Ok(rep) => {
                for o in rep.problems() {
                    d.log.warn(&format!("{}: {}", o.label, o.status));
                }
                d.log.info(&format!("restore: {}", rep.summary()));
                if rep.problems().count() == 0 {
                    crate::EXIT_OK
                } else {
                    crate::EXIT_FAILURE
                }
            }
            Err(e) => {
                d.log.warn(&format!("restore: {e}"));
                crate::EXIT_FAILURE
            }
        }
    } else {
        let why = match &kind {
            None => "on_stop = \"keep\"".to_string(),
            Some(k) => format!("on_stop = \"restore\", but this is {}", k.describe()),
        };
        d.log.info(&format!(
            "{sig}: the policy stays in force ({why}); `isold restore` puts the original values back"
        ));
        crate::EXIT_OK
    };
    d.dma = None;
    let _ = fs::remove_file(status_path(&d.files.runtime));
    code
}

/// `isold status`: the daemon's status file, and whether its process is alive. Exit 0 when
/// it runs, 3 when it does not, 4 when that cannot be told (the file cannot be read: its
/// directory is root's only under isold.service, or it is not a status file).
pub fn status(state_path: &Path, json: bool) -> i32 {
    let path = status_path(state_path);
    let read = match fs::read_to_string(&path) {
        Ok(t) => serde_json::from_str::<DaemonStatus>(&t)
            .map(Some)
            .map_err(|e| format!("{}: not an isold status file: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!(
            "cannot read {}: {}{}",
            path.display(),
            libtaskisol::error::io_strerror(&e),
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                " (run isold status as root)"
            } else {
                ""
            }
        )),
    };
    let st = match read {
        Ok(st) => st,
        Err(msg) => {
            if json {
                println!("{}", serde_json::json!({ "running": null, "error": msg }));
            } else {
                eprintln!("isold: {msg}");
            }
            return crate::EXIT_STATUS_UNKNOWN;
        }
    };
    let alive = st.as_ref().is_some_and(|s| {
        fs::read_to_string(format!("/proc/{}/comm", s.pid)).is_ok_and(|c| c.trim() == "isold")
    });
    if json {
        let v = serde_json::json!({ "running": alive, "status": st });
        println!("{v}");
    } else {
        match (&st, alive) {
            (Some(s), true) => print!("{}", human_status(s)),
            (Some(s), false) => println!(
                "isold run is not running (its last status, {}, names pid {}, which is gone)",
                path.display(),
                s.pid
            ),
            (None, _) => println!("isold run is not running (no {})", path.display()),
        }
    }
    if alive {
        crate::EXIT_OK
    } else {
        crate::EXIT_NOT_RUNNING
    }
}

/// The human form of a running daemon's status.
pub fn human_status(s: &DaemonStatus) -> String {
    let mut out = format!(
        "isold run: {} (pid {}), since {} s ago\n  policy {} ({}): isolated CPUs {}, housekeeping {}\n  tasks: {}; devices: {}\n  scans every {} s, every thread's affinity every {} s\n",
        s.state,
        s.pid,
        now_s().saturating_sub(s.started),
        s.config,
        s.preset,
        s.isolated,
        s.housekeeping,
        s.task_events,
        s.device_events,
        s.interval_s,
        s.task_interval_s
    );
    if let Some(us) = s.cpu_dma_latency_us {
        out.push_str(&format!("  holding /dev/cpu_dma_latency at {us} us\n"));
    }
    if !s.on_stop.is_empty() {
        out.push_str(&format!(
            "  on stop: {}\n",
            if s.on_stop == "restore" {
                "restore (a plain stop; never a restart or a shutdown)"
            } else {
                "keep every value (isold restore undoes them)"
            }
        ));
    }
    if !s.waiting.is_empty() {
        out.push_str(&format!("  waiting ({}):\n", s.waiting.len()));
        for w in &s.waiting {
            out.push_str(&format!("    {w}\n"));
        }
    }
    if !s.contested.is_empty() {
        out.push_str(&format!(
            "  contested: changed back by something else ({}):\n",
            s.contested.len()
        ));
        for c in &s.contested {
            out.push_str(&format!(
                "    {}: {} repairs, now repaired every {} s\n",
                c.label, c.repairs, c.backoff_s
            ));
        }
    }
    let total: u64 = s.corrections.values().sum();
    if total == 0 {
        out.push_str("  corrections: none\n");
    } else {
        let by: Vec<String> = s
            .corrections
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        out.push_str(&format!("  corrections: {total} ({})\n", by.join(", ")));
    }
    if let Some(c) = &s.last_correction {
        out.push_str(&format!(
            "  last correction {} s ago: {}: {}\n",
            now_s().saturating_sub(c.at),
            c.label,
            c.what
        ));
    }
    if let Some(r) = &s.task_reaction {
        out.push_str(&format!(
            "  wide tasks narrowed {:.2} ms after their event (median; p99 {:.2} ms, max {:.2} ms, last {} of {})\n",
            r.median_ms,
            r.p99_ms,
            r.max_ms,
            r.count.min(REACTIONS_KEPT as u64),
            r.count
        ));
    }
    if s.reloads > 0 {
        out.push_str(&format!("  reloads: {}\n", s.reloads));
    }
    // Threads the kernel pins (per-CPU kthreads, kworkers) are many and expected: counted;
    // the rest (IRQs, files) listed.
    let (threads, other): (Vec<&String>, Vec<&String>) = s
        .not_changeable
        .iter()
        .partition(|n| n.starts_with("kthread ") || n.starts_with("task "));
    if !other.is_empty() {
        out.push_str(&format!("  not changeable ({}):\n", other.len()));
        for n in other {
            out.push_str(&format!("    {n}\n"));
        }
    }
    if !threads.is_empty() {
        out.push_str(&format!(
            "  threads whose affinity the kernel manages: {} (--json lists them)\n",
            threads.len()
        ));
    }
    out
}

/// Takes out of `pending` the entries due at `now` (`at` of each: when it is due), in their
/// order; the others stay.
fn take_due<T>(pending: &mut Vec<T>, now: Instant, at: impl Fn(&T) -> Instant) -> Vec<T> {
    let (due, later): (Vec<T>, Vec<T>) = std::mem::take(pending)
        .into_iter()
        .partition(|t| at(t) <= now);
    *pending = later;
    due
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new thread is looked at once its grace is over, to the instant, not before: the
    /// ones still in their grace wait, in order.
    #[test]
    fn new_threads_wait_out_their_grace() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut pending = vec![(at(50), 1), (at(80), 2), (at(50), 3), (at(120), 4)];
        assert_eq!(take_due(&mut pending, at(49), |t| t.0), []);
        assert_eq!(pending.len(), 4);
        assert_eq!(
            take_due(&mut pending, at(50), |t| t.0),
            [(at(50), 1), (at(50), 3)]
        );
        assert_eq!(pending, [(at(80), 2), (at(120), 4)]);
        assert_eq!(take_due(&mut pending, at(200), |t| t.0).len(), 2);
        assert!(pending.is_empty());
    }

    #[test]
    fn reaction_percentiles_cover_the_kept_times() {
        let none = std::collections::VecDeque::new();
        assert_eq!(Reaction::of(&none, 0), None);
        // 1..=200 ms: the median is the 100th, the p99 the 198th, the max the 200th.
        let ns: std::collections::VecDeque<u64> =
            (1..=200u64).rev().map(|ms| ms * 1_000_000).collect();
        let r = Reaction::of(&ns, 1234).unwrap();
        assert_eq!(
            r,
            Reaction {
                count: 1234,
                median_ms: 100.0,
                p99_ms: 198.0,
                max_ms: 200.0,
            }
        );
        let one: std::collections::VecDeque<u64> = [2_500_000].into();
        let r = Reaction::of(&one, 1).unwrap();
        assert_eq!((r.median_ms, r.p99_ms, r.max_ms), (2.5, 2.5, 2.5));
    }

    #[test]
    fn status_shows_the_reaction_when_there_is_one() {
        let mut s = DaemonStatus {
            state: "running".into(),
            ..DaemonStatus::default()
        };
        assert!(!human_status(&s).contains("narrowed"));
        s.task_reaction = Some(Reaction {
            count: 1500,
            median_ms: 0.31,
            p99_ms: 1.2,
            max_ms: 4.567,
        });
        let text = human_status(&s);
        assert!(
            text.contains("  wide tasks narrowed 0.31 ms after their event (median; p99 1.20 ms, max 4.57 ms, last 1000 of 1500)\n"),
            "{text}"
        );
    }
}
