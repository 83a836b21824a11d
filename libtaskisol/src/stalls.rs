//! The stall guard: threads starved on the isolated CPUs found and lent a bounded slice.
//!
//! A real-time workload that never sleeps (a SCHED_FIFO poller, RT throttling off) keeps
//! every lower thread of its CPU from running: the CPU's kworker (so `echo 1 >
//! /proc/sys/vm/stat_refresh`, `drop_caches` and workqueue flushes hang), ksoftirqd, and on
//! RT kernels rcuc, ktimers and irq_work at the loop's priority; a SCHED_OTHER task an
//! operator starts there never runs. From 6.12 the kernel's fair server gives fair tasks
//! 50 ms a second (after about a second), but not real-time kernel threads, nor anything
//! when the server's runtime is 0.
//!
//! Detection, every `interval` ([`Guard::pass`]):
//! 1. `/proc/stat`: a watched CPU whose idle time grew had nothing waiting; the others are
//!    busy. With no busy CPU and no loan the pass ends there.
//! 2. The threads that live on the busy CPUs (their per-CPU kernel threads and the threads
//!    whose affinity is inside the watched CPUs) are read at most every half threshold, the
//!    threads the caller saw start or exec ([`Guard::ask`]) for five seconds, and a walk
//!    over every thread's stat ([`cpuwatch::walk`]) finds the rest at most every 10 s; each
//!    at most once per fifty times its own cost. A runnable one on a busy CPU is followed.
//! 3. A followed thread starves when it has stayed runnable on its CPU without running (CPU
//!    time and run count unchanged) for `threshold`, while another thread of that CPU ran,
//!    or ranks at least as high, or alone for [`NOT_RUNNING_AFTER`] ([`starving`]).
//!
//! A starving thread is lent SCHED_DEADLINE (`runtime_us` every `period_us`, reset-on-fork),
//! one per CPU at a time, for at most `lend_for`, or until it is no longer runnable; its own
//! policy is recorded in the state files first ([`Original::Loan`]) and written back at the
//! end, so `isold restore` and the next start after a `kill -9` give it back too. Where the
//! kernel refuses a deadline task (EPERM: RT throttling on with isolcpus, whose CPUs share no
//! root domain with the rest), or does not run it for a second (7.x keeps a thread that
//! overran an earlier loan throttled until its far deadline), the loan is SCHED_FIFO one
//! above the thread that holds the CPU, set and taken back by the guard for the share a
//! deadline loan has (a tick, 4 ms, per period) of each pass.
//! Never lent to: user threads with a real-time policy (the workload's), deadline threads,
//! `migration/N` (the stop class), threads matching `ignore_threads`.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use crate::cpuset::CpuSet;
use crate::cpuwatch::{self, Kind, Seen};
use crate::error::Result;
use crate::policy::config::{glob_match, StallsConfig};
use crate::policy::state::{Entry, Ledger, Original, State, StateFiles};
use crate::policy::{engine, threads, Status};
use crate::sched::{SchedAttr, SCHED_DEADLINE};
use crate::sysroot::SysRoot;

/// How a loan is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// SCHED_DEADLINE with the configured runtime and period.
    Deadline,
    /// SCHED_FIFO at this priority, for a share of each pass (the kernel refused a deadline).
    Fifo(u32),
}

impl std::fmt::Display for How {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            How::Deadline => f.write_str("SCHED_DEADLINE"),
            How::Fifo(p) => write!(f, "SCHED_FIFO {p} pulses (no deadline task allowed here)"),
        }
    }
}

/// A thread lent a slice.
#[derive(Debug, Clone, PartialEq)]
pub struct Rescue {
    /// The thread as it was found.
    pub thread: Seen,
    /// What kind of thread.
    pub kind: Kind,
    /// How long it had been seen runnable without running.
    pub waited: Duration,
    /// What held the CPU meanwhile (a label), when known.
    pub behind: Option<String>,
    /// How it was lent.
    pub how: How,
    /// The first loan of this episode (the thread runnable without a break): said in the
    /// log; later loans of the same episode are counted only.
    pub first_of_episode: bool,
}

/// What one pass did.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A starving thread was lent a slice.
    Rescued(Rescue),
    /// A loan ended and the thread has its own policy back (`to`), or is gone.
    Returned {
        /// The thread.
        label: String,
        /// Its CPU.
        cpu: u32,
        /// How long the loan lasted.
        held: Duration,
        /// The thread ran during the loan.
        ran: bool,
        /// The CPU time it used during the loan: what the workload gave up.
        used: Duration,
        /// What it was given back (`None`: gone).
        to: Option<String>,
        /// How it was lent at the end (a deadline loan the thread could not run under
        /// becomes SCHED_FIFO pulses).
        how: How,
    },
    /// Something could not be done (said once per thread and episode by the caller).
    Failed(String),
    /// A walk over every thread: how many were runnable on a busy watched CPU, how many
    /// per-CPU kernel threads the watched CPUs have, and how long it took.
    Walked {
        /// The busy watched CPUs.
        busy: CpuSet,
        /// Runnable threads found on them.
        runnable: usize,
        /// Threads that live on the watched CPUs (their per-CPU kernel threads, threads whose
        /// affinity is inside them).
        residents: usize,
        /// Its length.
        took: Duration,
    },
}

/// What the guard watches and how.
#[derive(Debug, Clone)]
pub struct Watch {
    /// The CPUs (isolated, less `ignore_cpus`).
    pub cpus: CpuSet,
    /// The `[stalls]` settings.
    pub settings: StallsConfig,
    /// Where the loans are recorded.
    pub files: StateFiles,
    /// What heads a runtime state file the guard has to start (the policy's CPUs and file).
    pub isolated: String,
    /// See `isolated`.
    pub config: String,
}

#[derive(Debug)]
struct Track {
    seen: Seen,
    /// When it was last seen to run (or first seen runnable).
    since: Instant,
    /// A loan of this episode was said.
    said: bool,
}

#[derive(Debug)]
struct Loan {
    id: String,
    thread: Seen,
    original: SchedAttr,
    since: Instant,
    how: How,
    /// The SCHED_FIFO priority of the fallback: one above what holds the CPU.
    above: u32,
}

impl Loan {
    /// The CPU time a loan `held` long may use: the configured share (a deadline task's
    /// runtime is enforced at the next tick: a tick at least per period), and one slice
    /// more. A SCHED_FIFO pulse is given only while the thread used less; a thread that
    /// overran its deadline loan (the tick stopped on a nohz_full CPU) waits until the
    /// allowance catches up.
    fn allowance(&self, settings: &StallsConfig, held: Duration) -> Duration {
        let slice = Duration::from_micros(settings.runtime_us.max(crate::policy::config::TICK_US));
        let periods = held.as_secs_f64() / (settings.period_us as f64 / 1e6);
        slice.mul_f64(periods + 1.0)
    }
}

/// A deadline loan under which the thread has not run for this long is made SCHED_FIFO
/// pulses instead: a thread that overran an earlier loan carries the deficit in its
/// deadline entity, and 7.x keeps it throttled until its far deadline.
const DEADLINE_GRACE: Duration = Duration::from_secs(1);

/// Figures of the guard's own work.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Work {
    /// Passes made.
    pub passes: u64,
    /// Passes that found a busy watched CPU.
    pub busy_passes: u64,
    /// Walks over every thread.
    pub walks: u64,
    /// The last walk's length.
    pub last_walk: Duration,
    /// The last pass's length (without a walk, the residents' read and the state files'
    /// writes).
    pub last_pass: Duration,
    /// The last read of the residents.
    pub last_roster: Duration,
    /// SCHED_FIFO pulses given.
    pub pulses: u64,
    /// SCHED_FIFO pulses withheld: the thread had used its loan's allowance.
    pub pulses_withheld: u64,
}

/// The guard's memory between passes.
#[derive(Debug)]
pub struct Guard {
    watch: Watch,
    idle: BTreeMap<usize, u64>,
    tracked: HashMap<i32, Track>,
    loans: HashMap<i32, Loan>,
    /// The threads that live on the watched CPUs (tid -> pid, the CPUs it may run on):
    /// their per-CPU kernel threads, and threads whose affinity is inside them. Read every
    /// pass while one of their CPUs is busy.
    roster: HashMap<i32, (i32, CpuSet)>,
    /// Threads the caller saw start or exec (process events), looked at in the passes of
    /// the next second, two at least: one that lands on a busy watched CPU is followed from
    /// then on. (when asked, passes that looked, pid, tid)
    asked: Vec<(Instant, u8, i32, i32)>,
    /// Time spent this pass on work with a bound of its own (the residents' read) and on
    /// recording and giving back loans (the state files): not the pass's own length.
    ledger_time: Duration,
    next_walk: Option<Instant>,
    /// How long the last pass took.
    last_pass: Duration,
    /// When the residents are read next, and how long the last read took: at most every
    /// half threshold, and every fifty times its own length (a big machine's thousands).
    next_roster: Option<Instant>,
    /// The last failure to read the CPUs' times, said once until it changes.
    failing: Option<String>,
    /// What the guard did so far.
    pub work: Work,
}

/// The guard spends at most one 50th of a CPU: a walk over every thread is made at most
/// once per fifty times its own length, and a pass at most once per fifty times its own.
const DUTY: u32 = 50;

/// A walk over every thread (for threads that moved themselves onto a watched CPU without
/// an exec, and threads that were runnable before the guard started) at most this often.
const WALK_EVERY: Duration = Duration::from_secs(10);

/// How long a thread the caller asked about is looked at: long enough for a program that
/// moves itself onto an isolated CPU after its exec (`taskset -c 3 CMD`, a workload's
/// launcher) to have done so.
const ASKED_FOR: Duration = Duration::from_secs(5);

/// At most this many threads asked about are kept (a fork storm).
const ASKED_MAX: usize = 16384;

impl Guard {
    /// A guard over `watch` (nothing is read until the first pass).
    pub fn new(watch: Watch) -> Guard {
        Guard {
            watch,
            idle: BTreeMap::new(),
            tracked: HashMap::new(),
            loans: HashMap::new(),
            roster: HashMap::new(),
            asked: Vec::new(),
            ledger_time: Duration::ZERO,
            next_walk: None,
            last_pass: Duration::ZERO,
            next_roster: None,
            failing: None,
            work: Work::default(),
        }
    }

    /// Threads that started or exec'd (the caller's process events): looked at during the
    /// next second.
    pub fn ask(&mut self, ids: impl IntoIterator<Item = (i32, i32)>, now: Instant) {
        for (pid, tid) in ids {
            if self.asked.len() >= ASKED_MAX {
                break;
            }
            self.asked.push((now, 0, pid, tid));
        }
    }

    /// When the next pass is due after one that started at `start`: the interval, or
    /// fifty times the last pass's length when that is longer (a big machine), but never
    /// more than half the threshold, so that a starving thread waits at most one and a half
    /// times the threshold.
    pub fn next_pass(&self, start: Instant) -> Instant {
        let st = &self.watch.settings;
        start
            + (self.last_pass * DUTY)
                .min(st.threshold / 2)
                .max(st.interval)
    }

    /// The CPUs watched.
    pub fn cpus(&self) -> &CpuSet {
        &self.watch.cpus
    }

    /// Watch other CPUs, or with other settings, from now on (a reload, a claim); loans on
    /// CPUs no longer watched end at the next pass.
    pub fn set_watch(&mut self, watch: Watch) {
        self.watch = watch;
        self.idle.clear();
        self.next_walk = None;
    }

    /// Time between two passes.
    pub fn interval(&self) -> Duration {
        self.watch.settings.interval
    }

    /// How many threads are lent a slice now.
    pub fn lent(&self) -> usize {
        self.loans.len()
    }

    /// One look at the watched CPUs: starving threads lent a slice, ended loans given back.
    pub fn pass(&mut self, root: &SysRoot, now: Instant) -> Vec<Event> {
        let start = Instant::now();
        let walks = self.work.walks;
        self.ledger_time = Duration::ZERO;
        let events = self.pass_inner(root, now);
        // A walk has its own bound (see `walk`): a pass is judged by the rest.
        let walked = if self.work.walks > walks {
            self.work.last_walk
        } else {
            Duration::ZERO
        };
        // So have the state files' writes, which come with a loan or its end only.
        self.last_pass = start
            .elapsed()
            .saturating_sub(walked)
            .saturating_sub(self.ledger_time);
        self.work.last_pass = self.last_pass;
        events
    }

    fn pass_inner(&mut self, root: &SysRoot, now: Instant) -> Vec<Event> {
        self.work.passes += 1;
        let mut events = Vec::new();
        let busy = match cpuwatch::idle_ticks(root) {
            Ok(idle) => {
                self.failing = None;
                let busy = self.busy(&idle);
                self.idle = idle;
                busy
            }
            Err(e) => {
                let msg = format!("stall guard: {e}");
                if self.failing.as_ref() != Some(&msg) {
                    events.push(Event::Failed(msg.clone()));
                    self.failing = Some(msg);
                }
                CpuSet::new()
            }
        };
        // The first pass walks whatever the CPUs do: it finds the per-CPU kernel threads.
        if self.next_walk.is_none()
            || (!busy.is_empty() && self.next_walk.is_some_and(|at| now >= at))
        {
            let runnable = self.walk(root, &busy, now);
            events.push(Event::Walked {
                busy: busy.clone(),
                runnable,
                residents: self.roster.len(),
                took: self.work.last_walk,
            });
        }
        self.asked.retain(|(at, looked, ..)| {
            *looked < 2 || now.saturating_duration_since(*at) < ASKED_FOR
        });
        if busy.is_empty() && self.loans.is_empty() {
            self.tracked.clear();
            return events;
        }
        if !busy.is_empty() {
            self.work.busy_passes += 1;
        }
        self.follow(root, &busy, now);
        self.look_at_known(root, &busy, now);
        self.end_loans(root, &busy, now, &mut events);
        let mut starving = starving(
            self.tracked.values().map(|t| (&t.seen, t.since)),
            now,
            self.watch.settings.threshold,
        );
        // The longest waiting first (one loan per CPU).
        starving.sort_by_key(|(tid, _)| self.tracked.get(tid).map(|t| t.since));
        // One loan per CPU at a time: the workload loses at most one slice's share.
        let mut lent_on: CpuSet = self.loans.values().map(|l| l.thread.cpu as usize).collect();
        for (tid, behind) in starving {
            let Some(cpu) = self.tracked.get(&tid).map(|t| t.seen.cpu as usize) else {
                continue;
            };
            if lent_on.contains(cpu) || self.loans.contains_key(&tid) || !self.lendable(tid) {
                continue;
            }
            self.lend(root, tid, behind, now, &mut events);
            if self.loans.contains_key(&tid) {
                lent_on.insert(cpu);
            }
        }
        self.pulse(root, now);
        events
    }

    /// The watched CPUs whose idle time did not grow since the last pass.
    fn busy(&self, idle: &BTreeMap<usize, u64>) -> CpuSet {
        let mut busy = CpuSet::new();
        for cpu in self.watch.cpus.iter() {
            if let (Some(before), Some(now)) = (self.idle.get(&cpu), idle.get(&cpu)) {
                if now == before {
                    busy.insert(cpu);
                }
            }
        }
        busy
    }

    /// The threads found before, read again: gone, asleep or moved off a busy CPU, they
    /// leave; run since, their clock starts again.
    fn follow(&mut self, root: &SysRoot, busy: &CpuSet, now: Instant) {
        self.tracked.retain(|&tid, t| {
            let Ok(Some(s)) = cpuwatch::read_seen(root, t.seen.pid, tid) else {
                return false;
            };
            if !s.same_thread(&t.seen) || s.state != 'R' || !busy.contains(s.cpu as usize) {
                return false;
            }
            if s.ran_since(&t.seen) {
                t.since = now;
            }
            t.seen = s;
            true
        });
    }

    fn walk(&mut self, root: &SysRoot, busy: &CpuSet, now: Instant) -> usize {
        let start = Instant::now();
        let mut runnable = 0;
        if let Ok(found) = cpuwatch::walk(root, &self.watch.cpus, busy) {
            self.roster = found
                .residents
                .into_iter()
                .map(|(pid, tid, cpus)| (tid, (pid, cpus)))
                .collect();
            runnable = found.runnable.len();
            for s in found.runnable {
                self.track(s, now);
            }
        }
        let cost = start.elapsed();
        self.work.walks += 1;
        self.work.last_walk = cost;
        self.next_walk = Some(now + (cost * DUTY).max(WALK_EVERY));
        runnable
    }

    fn track(&mut self, s: Seen, now: Instant) {
        self.tracked.entry(s.tid).or_insert(Track {
            seen: s,
            since: now,
            said: false,
        });
    }

    /// The threads that live on the busy CPUs, and the threads the caller asked about: those
    /// runnable on a busy CPU are followed from now on; an asked thread whose affinity is
    /// inside the watched CPUs lives there from now on.
    fn look_at_known(&mut self, root: &SysRoot, busy: &CpuSet, now: Instant) {
        // The residents: most sleep, so a stat read each (schedstat for the runnable).
        if self.next_roster.map_or(true, |at| now >= at) {
            let start = Instant::now();
            let ids: Vec<(i32, i32)> = self
                .roster
                .iter()
                .filter(|(tid, (_, cpus))| {
                    !cpus.is_disjoint(busy) && !self.tracked.contains_key(tid)
                })
                .map(|(&tid, &(pid, _))| (pid, tid))
                .collect();
            for (pid, tid) in ids {
                match cpuwatch::read_if_runnable(root, pid, tid, busy) {
                    None => {
                        self.roster.remove(&tid);
                    }
                    Some(Some(s)) => self.track(s, now),
                    Some(None) => {}
                }
            }
            let cost = start.elapsed();
            self.ledger_time += cost;
            self.work.last_roster = cost;
            self.next_roster = Some(now + (cost * DUTY).max(self.watch.settings.threshold / 2));
        }
        let mut look: Vec<(i32, i32)> = Vec::new();
        let watched = self.watch.cpus.clone();
        let watched = &watched;
        let mut residents = Vec::new();
        self.asked.retain_mut(|(_, looked, pid, tid)| {
            *looked = looked.saturating_add(1);
            if self.tracked.contains_key(tid) || self.roster.contains_key(tid) {
                return false;
            }
            // One system call tells whether it may be on a watched CPU at all; its stat is
            // read only then.
            match cpuwatch::affinity(root, *pid, *tid) {
                None => false,
                Some(a) if a.is_disjoint(watched) => true,
                Some(a) => {
                    if a.is_subset(watched) {
                        residents.push((*tid, (*pid, a)));
                    }
                    look.push((*pid, *tid));
                    true
                }
            }
        });
        self.roster.extend(residents);
        for (pid, tid) in look {
            let Ok(Some(s)) = cpuwatch::read_seen(root, pid, tid) else {
                self.roster.remove(&tid);
                continue;
            };
            if let Some(cpu) = s
                .kind()
                .eq(&Kind::PerCpuKthread)
                .then(|| cpuwatch::percpu_kthread_cpu(s.comm.as_bytes()))
                .flatten()
                .filter(|c| watched.contains(*c))
            {
                // A kworker made since the last walk.
                self.roster.insert(tid, (pid, CpuSet::from_iter([cpu])));
            }
            if s.state == 'R' && busy.contains(s.cpu as usize) {
                self.track(s, now);
            }
        }
    }

    /// Whether the guard may lend to this thread at all.
    fn lendable(&self, tid: i32) -> bool {
        let Some(t) = self.tracked.get(&tid) else {
            return false;
        };
        let s = &t.seen;
        let user_rt = s.kind() == Kind::Task && s.is_realtime();
        !(user_rt
            || s.policy == SCHED_DEADLINE
            || s.comm.starts_with("migration/")
            || self
                .watch
                .settings
                .ignore_threads
                .iter()
                .any(|p| glob_match(p, &s.comm)))
    }

    fn lend(
        &mut self,
        root: &SysRoot,
        tid: i32,
        behind: Option<Seen>,
        now: Instant,
        events: &mut Vec<Event>,
    ) {
        let Some(t) = self.tracked.get_mut(&tid) else {
            return;
        };
        let s = t.seen.clone();
        let original = match threads::thread_attr(root, s.pid, s.tid) {
            Ok(a) => a,
            Err(_) => return,
        };
        if original.policy == SCHED_DEADLINE {
            return;
        }
        let id = format!("loan:{}:{}", s.tid, s.starttime);
        let t0 = Instant::now();
        let recorded = record(root, &self.watch, &id, &s, &original);
        self.ledger_time += t0.elapsed();
        let Some(t) = self.tracked.get_mut(&tid) else {
            return;
        };
        if let Err(e) = recorded {
            if !t.said {
                t.said = true;
                events.push(Event::Failed(format!(
                    "stall guard: {} starves on CPU {} but its policy could not be recorded, so it is not lent a slice: {e}",
                    s.label(),
                    s.cpu
                )));
            }
            return;
        }
        let st = &self.watch.settings;
        let dl = SchedAttr::deadline(st.runtime_us * 1000, st.period_us * 1000);
        let above = behind
            .as_ref()
            .filter(|b| b.is_realtime())
            .map_or(1, |b| b.rt_priority + 1)
            .clamp(1, 99);
        let how = match threads::set_thread_attr(root, s.pid, s.tid, &dl) {
            Ok(()) => How::Deadline,
            Err(e) if matches!(e.errno(), Some(libc::EPERM) | Some(libc::EBUSY)) => {
                How::Fifo(above)
            }
            Err(e) => {
                let _ = engine::restore_where(root, &self.watch.files, |i| i == id);
                if !matches!(e.errno(), Some(libc::ESRCH)) && !t.said {
                    t.said = true;
                    events.push(Event::Failed(format!(
                        "stall guard: {} starves on CPU {}: {e}",
                        s.label(),
                        s.cpu
                    )));
                }
                return;
            }
        };
        let first = !t.said;
        t.said = true;
        events.push(Event::Rescued(Rescue {
            kind: s.kind(),
            waited: now.saturating_duration_since(t.since),
            behind: behind.map(|b| b.label()),
            how,
            first_of_episode: first,
            thread: s.clone(),
        }));
        self.loans.insert(
            tid,
            Loan {
                id,
                thread: s,
                original,
                since: now,
                how,
                above,
            },
        );
    }

    /// The loans that are over: the thread is gone, no longer runnable (it ran and waits
    /// for something else now), its CPU not watched or not busy, or `lend_for` passed.
    fn end_loans(&mut self, root: &SysRoot, busy: &CpuSet, now: Instant, ev: &mut Vec<Event>) {
        let lend_for = self.watch.settings.lend_for;
        for l in self.loans.values_mut() {
            if l.how != How::Deadline || now.saturating_duration_since(l.since) < DEADLINE_GRACE {
                continue;
            }
            let ran = cpuwatch::read_seen(root, l.thread.pid, l.thread.tid)
                .ok()
                .flatten()
                .is_some_and(|s| s.ran_since(&l.thread));
            if !ran {
                // Its own policy between the pulses (the deadline entity's throttle goes).
                let _ = threads::set_thread_attr(root, l.thread.pid, l.thread.tid, &l.original);
                l.how = How::Fifo(l.above);
            }
        }
        // (tid, still waiting: runnable on its busy CPU when its time ran out)
        let over: Vec<(i32, bool)> = self
            .loans
            .iter()
            .filter_map(|(&tid, l)| {
                let now_seen = cpuwatch::read_seen(root, l.thread.pid, l.thread.tid)
                    .ok()
                    .flatten()
                    .filter(|s| s.same_thread(&l.thread));
                match now_seen {
                    None => Some((tid, false)),
                    Some(s) if s.state != 'R' || !busy.contains(s.cpu as usize) => {
                        Some((tid, false))
                    }
                    Some(_) if now.saturating_duration_since(l.since) >= lend_for => {
                        Some((tid, true))
                    }
                    Some(_) => None,
                }
            })
            .collect();
        for (tid, waiting) in over {
            if let Some(e) = self.give_back(root, tid, now, waiting) {
                ev.push(e);
            }
        }
    }

    /// `waiting`: its loan ran out with the thread still runnable: it may be lent again at
    /// the next pass (after any other thread of its CPU waiting longer), not a threshold
    /// later, or a thread that needs more than one loan's slices (an exec, a long work item)
    /// would wait a threshold between each.
    fn give_back(
        &mut self,
        root: &SysRoot,
        tid: i32,
        now: Instant,
        waiting: bool,
    ) -> Option<Event> {
        let loan = self.loans.remove(&tid)?;
        let seen = cpuwatch::read_seen(root, loan.thread.pid, tid)
            .ok()
            .flatten();
        let ran = seen.as_ref().is_some_and(|s| s.ran_since(&loan.thread));
        let used = Duration::from_nanos(
            seen.as_ref()
                .map_or(0, |s| s.exec_ns.saturating_sub(loan.thread.exec_ns)),
        );
        let threshold = self.watch.settings.threshold;
        if let Some(t) = self.tracked.get_mut(&tid) {
            t.since = if waiting {
                now.checked_sub(threshold).unwrap_or(now)
            } else {
                now
            };
            if let Some(s) = seen {
                t.seen = s;
            }
        }
        let label = loan.thread.label();
        let cpu = loan.thread.cpu;
        let how = loan.how;
        let held = now.saturating_duration_since(loan.since);
        let t0 = Instant::now();
        let restored = engine::restore_where(root, &self.watch.files, |i| i == loan.id);
        self.ledger_time += t0.elapsed();
        Some(
            match restored {
                Ok(rep) => match rep.outcomes.first().map(|o| &o.status) {
                    Some(Status::Restored { to }) => Event::Returned {
                        label,
                        cpu,
                        held,
                        ran,
                        used,
                        to: Some(to.clone()),
                        how,
                    },
                    Some(Status::Gone) | None => Event::Returned {
                        label,
                        cpu,
                        held,
                        ran,
                        used,
                        to: None,
                        how,
                    },
                    Some(other) => Event::Failed(format!(
                        "stall guard: {label}: its own policy ({}) could not be given back: {other}; it stays in the state file for isold restore",
                        loan.original
                    )),
                },
                Err(e) => Event::Failed(format!(
                    "stall guard: {label}: its own policy ({}) could not be given back: {e}; it stays in the state file for isold restore",
                    loan.original
                )),
            },
        )
    }

    /// SCHED_FIFO loans: the thread boosted for its share of this pass, then its own policy
    /// back.
    fn pulse(&mut self, root: &SysRoot, now: Instant) {
        let st = &self.watch.settings;
        // The share a deadline loan has: up to a tick per period.
        let slice = st.runtime_us.max(crate::policy::config::TICK_US);
        let share = st.interval.mul_f64(slice as f64 / st.period_us as f64);
        let mut withheld = 0;
        let boosted: Vec<&Loan> = self
            .loans
            .values()
            .filter(|l| matches!(l.how, How::Fifo(_)))
            .filter(|l| {
                // Within its allowance (a guard woken late boosts longer than `share`).
                let used = cpuwatch::read_seen(root, l.thread.pid, l.thread.tid)
                    .ok()
                    .flatten()
                    .filter(|s| s.same_thread(&l.thread))
                    .map(|s| Duration::from_nanos(s.exec_ns.saturating_sub(l.thread.exec_ns)));
                let within = used
                    .is_some_and(|u| u < l.allowance(st, now.saturating_duration_since(l.since)));
                withheld += u64::from(used.is_some() && !within);
                within
            })
            .filter(|l| {
                let How::Fifo(p) = l.how else { return false };
                threads::set_thread_attr(
                    root,
                    l.thread.pid,
                    l.thread.tid,
                    &SchedAttr::plain(1, p, 0, true),
                )
                .is_ok()
            })
            .collect();
        self.work.pulses_withheld += withheld;
        if boosted.is_empty() {
            return;
        }
        self.work.pulses += boosted.len() as u64;
        // The guard itself above every pulse while one is out: a guard that a busy
        // housekeeping CPU kept from waking would leave the thread boosted for as long.
        let own = root.is_host().then(|| {
            let me = nix::unistd::gettid().as_raw();
            // Written back as a plain policy: 6.12+ reports the fair slice in the runtime,
            // and writing that back would pin a custom slice.
            let was = crate::sched::get_attr(me)
                .ok()
                .filter(|a| a.policy != SCHED_DEADLINE)
                .map(|a| SchedAttr::plain(a.policy, a.priority, a.nice, a.reset_on_fork()));
            let top = boosted
                .iter()
                .filter_map(|l| match l.how {
                    How::Fifo(p) => Some(p),
                    How::Deadline => None,
                })
                .max()
                .unwrap_or(1);
            let raised =
                crate::sched::set_attr(me, &SchedAttr::plain(1, (top + 1).min(99), 0, true))
                    .is_ok();
            (me, was.filter(|_| raised))
        });
        std::thread::sleep(share);
        for l in boosted {
            let _ = threads::set_thread_attr(root, l.thread.pid, l.thread.tid, &l.original);
        }
        if let Some((me, Some(was))) = own {
            let _ = crate::sched::set_attr(me, &was);
        }
    }

    /// Every loan given back (a stop, the guard turned off).
    pub fn give_back_all(&mut self, root: &SysRoot) -> Vec<Event> {
        let now = Instant::now();
        let tids: Vec<i32> = self.loans.keys().copied().collect();
        tids.into_iter()
            .filter_map(|tid| self.give_back(root, tid, now, false))
            .collect()
    }
}

/// The loan's original in the state files, before the loan.
fn record(root: &SysRoot, w: &Watch, id: &str, s: &Seen, original: &SchedAttr) -> Result<()> {
    let _lock = engine::lock(&w.files.runtime)?;
    let mut ledger = Ledger::load(&w.files, root, w.isolated.clone(), w.config.clone())?;
    ledger.state.record(Entry {
        id: id.to_string(),
        item: "stalls".into(),
        label: format!("lent a slice: {}", s.label()),
        original: Original::Loan {
            pid: s.pid,
            tid: s.tid,
            starttime: s.starttime,
            comm: s.comm.clone(),
            policy: original.policy,
            rt_priority: original.priority,
            nice: original.nice,
            reset_on_fork: original.reset_on_fork(),
        },
    });
    ledger.persist().map_err(|e| ledger.not_recorded(e))
}

/// Every loan recorded in the state files given back (a start after a crash): a line per
/// thread (what it got back) and per note of the restore, or the error.
pub fn give_back_recorded(root: &SysRoot, files: &StateFiles) -> Result<Vec<String>> {
    // Read first: a state without loans is not written (its set-aside journal lines, if
    // any, are for the apply that follows to report).
    let any = {
        let _lock = engine::lock(&files.runtime)?;
        State::load(&files.runtime)?
            .is_some_and(|s| s.entries().iter().any(|e| e.id.starts_with("loan:")))
    };
    if !any {
        return Ok(Vec::new());
    }
    let rep = engine::restore_where(root, files, |id| id.starts_with("loan:"))?;
    Ok(rep
        .outcomes
        .into_iter()
        .filter(|o| o.id.starts_with("loan:"))
        .map(|o| format!("{}: {}", o.label, o.status))
        .chain(rep.notes)
        .collect())
}

/// Whether the kernel's fair server serves fair tasks on `cpu` (6.12+: a deadline entity of
/// `runtime` ns every `period` ns per CPU, debugfs `sched/fair_server/cpuN`): `Some(runtime,
/// period)` when it does, `Some((0, period))` when its runtime is 0 (turned off), `None`
/// when the kernel has none or debugfs is not mounted.
pub fn fair_server(root: &SysRoot, cpu: usize) -> Option<(u64, u64)> {
    let dir = format!("/sys/kernel/debug/sched/fair_server/cpu{cpu}");
    let read =
        |f: &str| -> Option<u64> { root.read_value(format!("{dir}/{f}")).ok()?.parse().ok() };
    Some((read("runtime")?, read("period")?))
}

/// A running thread's CPU time moves at least once a second even on a nohz_full CPU with its
/// tick stopped (the kernel's remote tick updates it from a housekeeping CPU), so one that
/// has not moved for this long is not running, whatever else the guard knows of its CPU.
pub const NOT_RUNNING_AFTER: Duration = Duration::from_secs(2);

/// The starving threads among `tracked` (each with when it last ran), with what holds their
/// CPU when the guard knows it. A thread starves when it has not run for `threshold` and
/// another thread of its CPU ran meanwhile, or ranks at least as high; or, with nothing
/// else known of its CPU, when it has not run for [`NOT_RUNNING_AFTER`] either.
pub fn starving<'a>(
    tracked: impl Iterator<Item = (&'a Seen, Instant)>,
    now: Instant,
    threshold: Duration,
) -> Vec<(i32, Option<Seen>)> {
    let mut by_cpu: BTreeMap<u32, Vec<(&Seen, Duration)>> = BTreeMap::new();
    for (s, since) in tracked {
        by_cpu
            .entry(s.cpu)
            .or_default()
            .push((s, now.saturating_duration_since(since)));
    }
    let mut out = Vec::new();
    for threads in by_cpu.values() {
        let stuck = |w: &Duration| *w >= threshold;
        // A thread on loan (SCHED_DEADLINE) runs because of the guard: what holds the CPU is
        // the best of the others.
        let runner = threads
            .iter()
            .filter(|(s, w)| !stuck(w) && s.policy != SCHED_DEADLINE)
            .map(|(s, _)| *s)
            .max_by_key(|s| s.rank());
        // Nothing ran that the guard saw: the highest of the stuck ones may be holding the
        // CPU with its counters not moved yet.
        let assumed = runner.is_none().then(|| {
            threads
                .iter()
                .map(|(s, _)| *s)
                .filter(|s| s.policy != SCHED_DEADLINE)
                .max_by_key(|s| s.rank())
        });
        for (s, waited) in threads {
            if !stuck(waited) {
                continue;
            }
            let holds = assumed.flatten().is_some_and(|a| a.same_thread(s));
            if !holds || *waited >= NOT_RUNNING_AFTER.max(threshold) {
                out.push((
                    s.tid,
                    runner.or(assumed.flatten().filter(|_| !holds)).cloned(),
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(tid: i32, policy: u32, prio: u32) -> Seen {
        Seen {
            pid: tid,
            tid,
            starttime: 7,
            comm: format!("t{tid}"),
            flags: 0,
            state: 'R',
            cpu: 3,
            policy,
            rt_priority: prio,
            exec_ns: 0,
            runs: 0,
            cpu_ticks: 0,
        }
    }

    fn ids(v: Vec<(i32, Option<Seen>)>) -> Vec<(i32, Option<i32>)> {
        let mut v: Vec<_> = v.into_iter().map(|(t, b)| (t, b.map(|b| b.tid))).collect();
        v.sort();
        v
    }

    /// Behind a thread that ran, a thread that did not for the threshold starves; alone on
    /// its CPU it starves once it cannot be the one running (2 s); a thread on loan is no
    /// runner.
    #[test]
    fn who_starves_behind_whom() {
        let now = Instant::now();
        let t = Duration::from_millis(1500);
        let ago = |ms| now - Duration::from_millis(ms);
        let (lp, kw, other) = (seen(1, 1, 1), seen(2, 0, 0), seen(3, 0, 0));
        // The loop ran just now, the kworker waited 1.6 s: it starves behind the loop.
        let v = starving([(&lp, now), (&kw, ago(1600))].into_iter(), now, t);
        assert_eq!(ids(v), vec![(2, Some(1))]);
        // Under the threshold: nobody.
        assert!(starving([(&lp, now), (&kw, ago(1400))].into_iter(), now, t).is_empty());
        // Nothing seen to run: the highest of the stuck holds the CPU, the rest starve.
        let v = starving([(&lp, ago(1600)), (&kw, ago(1600))].into_iter(), now, t);
        assert_eq!(ids(v), vec![(2, Some(1))]);
        // Alone and stuck under 2 s: it may be the one running; at 2 s it is not.
        assert!(starving([(&kw, ago(1600))].into_iter(), now, t).is_empty());
        assert_eq!(
            ids(starving([(&kw, ago(2000))].into_iter(), now, t)),
            vec![(2, None)]
        );
        // A lent thread that runs is no runner: what holds the CPU is the loop.
        let lent = seen(4, SCHED_DEADLINE, 0);
        let v = starving(
            [(&lp, ago(1600)), (&lent, now), (&other, ago(1600))].into_iter(),
            now,
            t,
        );
        assert_eq!(ids(v), vec![(3, Some(1))]);
        // Other CPUs are judged apart.
        let mut far = seen(5, 0, 0);
        far.cpu = 2;
        assert!(starving([(&lp, now), (&far, ago(1600))].into_iter(), now, t).is_empty());
    }

    /// A tree with CPUs 0-3, a FIFO loop and a kworker on CPU 3.
    struct Tree {
        dir: tempfile::TempDir,
        root: SysRoot,
    }

    impl Tree {
        fn new() -> Tree {
            let dir = tempfile::tempdir().unwrap();
            let root = SysRoot::new(dir.path());
            let t = Tree { dir, root };
            t.put("proc/sys/kernel/random/boot_id", "b00t\n");
            t.idle([100, 100, 100, 100]);
            t.thread(10, "sh", 0x400100, 'R', 1, 1, 3, "3");
            t.thread(20, "kworker/3:1", 0x4208060, 'S', 0, 0, 3, "3");
            t.thread(30, "bash", 0x400100, 'S', 0, 0, 0, "0-1");
            t
        }

        fn put(&self, rel: &str, text: &str) {
            let p = self.dir.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }

        fn idle(&self, idle: [u64; 4]) {
            let mut text = "cpu  1 2 3 400 0 0 0 0 0 0\n".to_string();
            for (i, v) in idle.iter().enumerate() {
                text.push_str(&format!("cpu{i} 1 2 3 {v} 0 0 0 0 0 0\n"));
            }
            self.put("proc/stat", &text);
        }

        #[allow(clippy::too_many_arguments)]
        fn thread(
            &self,
            tid: i32,
            comm: &str,
            flags: u64,
            state: char,
            policy: u32,
            prio: u32,
            cpu: u32,
            aff: &str,
        ) {
            let mut f: Vec<String> = (3..=52).map(|_| "0".to_string()).collect();
            f[0] = state.to_string();
            f[6] = flags.to_string();
            f[19] = "7".into();
            f[36] = cpu.to_string();
            f[37] = prio.to_string();
            f[38] = policy.to_string();
            self.put(
                &format!("proc/{tid}/task/{tid}/stat"),
                &format!("{tid} ({comm}) {}\n", f.join(" ")),
            );
            self.put(
                &format!("proc/{tid}/task/{tid}/status"),
                &format!("Name:\t{comm}\nCpus_allowed_list:\t{aff}\n"),
            );
            self.put(&format!("proc/{tid}/task/{tid}/schedstat"), "100 0 5\n");
            self.put(
                &format!("proc/{tid}/stat"),
                &format!("{tid} ({comm}) {}\n", f.join(" ")),
            );
        }

        fn state_of(&self, tid: i32) -> (char, u32) {
            let s = crate::cpuwatch::read_seen(&self.root, tid, tid)
                .unwrap()
                .unwrap();
            (s.state, s.policy)
        }

        fn files(&self) -> StateFiles {
            StateFiles::new(
                self.dir.path().join("run/isold/state.json"),
                self.dir.path().join("var/lib/isold/state.json"),
            )
        }
    }

    /// A guard of CPUs 2-3 of the tree, recording in its state files.
    fn guard(t: &Tree, settings: StallsConfig) -> Guard {
        Guard::new(Watch {
            cpus: "2-3".parse().unwrap(),
            settings,
            files: t.files(),
            isolated: "2-3".into(),
            config: "isold.toml".into(),
        })
    }

    /// A guard of the tree that made its first pass, then CPU 3 busy and its kworker woken
    /// there.
    fn kworker_waits() -> (Tree, Guard, Instant) {
        let t = Tree::new();
        let mut g = guard(&t, StallsConfig::default());
        let t0 = Instant::now();
        g.pass(&t.root, t0);
        t.idle([200, 200, 200, 100]);
        t.thread(20, "kworker/3:1", 0x4208060, 'R', 0, 0, 3, "3");
        (t, g, t0)
    }

    fn loans(files: &StateFiles) -> usize {
        State::load(&files.runtime).unwrap().map_or(0, |s| {
            s.entries()
                .iter()
                .filter(|e| e.id.starts_with("loan:"))
                .count()
        })
    }

    /// The kworker of CPU 3 runnable and never running behind the loop: lent SCHED_DEADLINE
    /// after the threshold, its own policy recorded first; once it sleeps, given back and the
    /// record gone. A loan left by a guard that died is given back by give_back_recorded.
    #[test]
    fn a_starving_kworker_is_lent_a_slice_and_given_it_back() {
        let t = Tree::new();
        let files = t.files();
        let mut g = guard(&t, StallsConfig::default());
        let t0 = Instant::now();
        let ev = g.pass(&t.root, t0);
        assert!(
            matches!(&ev[..], [Event::Walked { residents: 2, .. }]),
            "{ev:?}"
        );
        // CPU 3 busy from now on (its idle time stands), the kworker woken there.
        t.idle([200, 200, 200, 100]);
        t.thread(20, "kworker/3:1", 0x4208060, 'R', 0, 0, 3, "3");
        let mut loop_ns = 100;
        let mut at = t0;
        let mut rescued = None;
        for _ in 0..12 {
            at += Duration::from_millis(250);
            loop_ns += 1000;
            t.put("proc/10/task/10/schedstat", &format!("{loop_ns} 0 5\n"));
            for e in g.pass(&t.root, at) {
                if let Event::Rescued(r) = e {
                    rescued = Some((at - t0, r));
                }
            }
            if rescued.is_some() {
                break;
            }
        }
        let (after, r) = rescued.expect("the kworker was lent a slice");
        assert!(
            after >= Duration::from_secs(2) && after < Duration::from_millis(2600),
            "{after:?}"
        );
        assert_eq!(r.thread.tid, 20);
        assert_eq!(r.kind, Kind::PerCpuKthread);
        assert_eq!(r.behind.as_deref(), Some("sh (pid 10)"));
        assert_eq!(r.how, How::Deadline);
        assert!(r.first_of_episode);
        assert_eq!(t.state_of(20), ('R', SCHED_DEADLINE));
        assert_eq!(loans(&files), 1);
        assert_eq!(g.lent(), 1);
        // The loop is never lent anything.
        assert_eq!(t.state_of(10), ('R', 1));
        // It ran and sleeps: given back at the next pass.
        t.thread(20, "kworker/3:1", 0x4208060, 'S', SCHED_DEADLINE, 0, 3, "3");
        t.put("proc/20/task/20/schedstat", "900 0 6\n");
        let ev = g.pass(&t.root, at + Duration::from_millis(250));
        assert!(
            ev.iter().any(|e| matches!(e, Event::Returned { ran: true, to: Some(to), .. } if to == "SCHED_OTHER")),
            "{ev:?}"
        );
        assert_eq!(t.state_of(20), ('S', 0));
        assert_eq!(loans(&files), 0);
        assert_eq!(g.lent(), 0);

        // Woken again and starving: lent again; the guard dies; the record gives it back.
        t.thread(20, "kworker/3:1", 0x4208060, 'R', 0, 0, 3, "3");
        let mut at = at + Duration::from_millis(250);
        for _ in 0..12 {
            at += Duration::from_millis(250);
            loop_ns += 1000;
            t.put("proc/10/task/10/schedstat", &format!("{loop_ns} 0 5\n"));
            g.pass(&t.root, at);
            if g.lent() == 1 {
                break;
            }
        }
        assert_eq!(t.state_of(20), ('R', SCHED_DEADLINE));
        drop(g);
        let back = give_back_recorded(&t.root, &files).unwrap();
        assert_eq!(
            back,
            ["lent a slice: kworker/3:1 (kernel thread 20): restored: SCHED_OTHER"]
        );
        assert_eq!(t.state_of(20), ('R', 0));
        assert_eq!(loans(&files), 0);
    }

    /// A thread still runnable when its loan runs out (it needs more than one loan's slices)
    /// is lent again at the next pass, not a threshold later; the second loan is no new
    /// episode.
    #[test]
    fn a_thread_still_waiting_when_its_loan_runs_out_is_lent_again_at_once() {
        let (t, mut g, t0) = kworker_waits();
        let mut loop_ns = 100;
        let mut kw_ns = 100;
        let (mut lent, mut returned, mut again) = (None, None, None);
        for i in 1..=40u64 {
            let at = t0 + Duration::from_millis(250 * i);
            loop_ns += 1000;
            t.put("proc/10/task/10/schedstat", &format!("{loop_ns} 0 5\n"));
            if lent.is_some() && returned.is_none() {
                // It runs a little under its loan, never enough to finish, and not at all
                // once the loan is over.
                kw_ns += 10;
                t.put("proc/20/task/20/schedstat", &format!("{kw_ns} 0 6\n"));
            }
            for e in g.pass(&t.root, at) {
                match e {
                    Event::Rescued(r) if lent.is_none() => lent = Some((at, r.first_of_episode)),
                    Event::Returned { .. } if returned.is_none() => returned = Some(at),
                    Event::Rescued(r) if returned.is_some() && again.is_none() => {
                        again = Some((at, r.first_of_episode))
                    }
                    _ => {}
                }
            }
            if again.is_some() {
                break;
            }
        }
        let (l, first) = lent.expect("lent");
        assert!(first);
        let r = returned.expect("its loan ran out");
        assert!(r - l >= Duration::from_secs(3), "{:?}", r - l);
        let (a, first_again) = again.expect("lent again");
        assert!(a - r <= Duration::from_millis(250), "{:?}", a - r);
        assert!(!first_again);
    }

    /// Two threads starving on one CPU: one loan at a time (the workload loses one slice's
    /// share), the second when the first is given back.
    #[test]
    fn one_loan_per_cpu_at_a_time() {
        let t = Tree::new();
        t.thread(70, "kworker/3:2", 0x4208060, 'S', 0, 0, 3, "3");
        let mut g = guard(&t, StallsConfig::default());
        let t0 = Instant::now();
        g.pass(&t.root, t0);
        t.idle([200, 200, 200, 100]);
        t.thread(20, "kworker/3:1", 0x4208060, 'R', 0, 0, 3, "3");
        t.thread(70, "kworker/3:2", 0x4208060, 'R', 0, 0, 3, "3");
        let mut loop_ns = 100;
        let mut at = t0;
        for _ in 0..12 {
            at += Duration::from_millis(250);
            loop_ns += 1000;
            t.put("proc/10/task/10/schedstat", &format!("{loop_ns} 0 5\n"));
            g.pass(&t.root, at);
        }
        assert_eq!(g.lent(), 1);
        let lent: Vec<i32> = [20, 70]
            .into_iter()
            .filter(|&tid| t.state_of(tid).1 == SCHED_DEADLINE)
            .collect();
        assert_eq!(lent.len(), 1, "{lent:?}");
        // The lent one ran and sleeps: the other is lent at the next pass.
        let first = lent[0];
        let name = if first == 20 {
            "kworker/3:1"
        } else {
            "kworker/3:2"
        };
        t.thread(first, name, 0x4208060, 'S', SCHED_DEADLINE, 0, 3, "3");
        t.put(&format!("proc/{first}/task/{first}/schedstat"), "900 0 6\n");
        g.pass(&t.root, at + Duration::from_millis(250));
        let other = if first == 20 { 70 } else { 20 };
        assert_eq!(t.state_of(first), ('S', 0));
        assert_eq!(t.state_of(other), ('R', SCHED_DEADLINE));
    }

    /// A deadline loan the thread does not run under for a second becomes SCHED_FIFO
    /// pulses; a thread that used its loan's allowance (an overrun: the tick stopped on a
    /// nohz_full CPU) gets no pulse until the allowance catches up, so a CPU hog lent a
    /// slice costs the workload its share and no more.
    #[test]
    fn pulses_stop_at_the_loans_allowance() {
        let (t, mut g, t0) = kworker_waits();
        let mut loop_ns = 100;
        let mut at = t0;
        let mut lent_at = None;
        for _ in 0..20 {
            at += Duration::from_millis(250);
            loop_ns += 1000;
            t.put("proc/10/task/10/schedstat", &format!("{loop_ns} 0 5\n"));
            g.pass(&t.root, at);
            if g.lent() == 1 && lent_at.is_none() {
                lent_at = Some(at);
            }
            if lent_at.is_some_and(|l| at - l >= DEADLINE_GRACE + Duration::from_millis(500)) {
                break;
            }
        }
        let lent_at = lent_at.expect("lent");
        // It never ran under its deadline loan: pulses since the grace ran out, its own
        // policy between them.
        assert!(g.work.pulses >= 1, "{:?}", g.work);
        assert_eq!(g.work.pulses_withheld, 0);
        assert_eq!(t.state_of(20), ('R', 0));
        assert_eq!(g.lent(), 1);
        // It ran 30 ms in one go: far over 100 us (a tick: 4 ms) per 0.5 s.
        t.put("proc/20/task/20/schedstat", "30000100 0 6\n");
        let pulses = g.work.pulses;
        at += Duration::from_millis(250);
        g.pass(&t.root, at);
        assert_eq!(g.work.pulses, pulses, "{:?}", g.work);
        assert_eq!(g.work.pulses_withheld, 1);
        // Still runnable when the loan runs out: the log says how it was lent at the end.
        let mut ended = None;
        while at - lent_at < Duration::from_secs(4) && ended.is_none() {
            at += Duration::from_millis(250);
            ended = g.pass(&t.root, at).into_iter().find_map(|e| match e {
                Event::Returned { how, used, .. } => Some((how, used)),
                _ => None,
            });
        }
        let (how, used) = ended.expect("the loan ended");
        assert_eq!(how, How::Fifo(2));
        assert_eq!(used, Duration::from_millis(30));
        assert_eq!(g.work.pulses, pulses);
    }

    /// User threads with a real-time policy (the workload's), threads named in
    /// ignore_threads and migration/N are never lent anything.
    #[test]
    fn the_workloads_rt_threads_and_ignored_ones_are_left_alone() {
        let t = Tree::new();
        t.thread(40, "app-rt", 0x400100, 'R', 1, 1, 3, "3");
        t.thread(50, "ktimers/3", 0x4208040, 'R', 1, 1, 3, "3");
        t.thread(60, "migration/3", 0x4208040, 'R', 1, 99, 3, "3");
        let st = StallsConfig {
            ignore_threads: vec!["ktimers/*".into()],
            ..StallsConfig::default()
        };
        let mut g = guard(&t, st);
        let t0 = Instant::now();
        g.pass(&t.root, t0);
        t.idle([200, 200, 200, 100]);
        let mut loop_ns = 100;
        for i in 1..=16 {
            loop_ns += 1000;
            t.put("proc/10/task/10/schedstat", &format!("{loop_ns} 0 5\n"));
            let ev = g.pass(&t.root, t0 + Duration::from_millis(250 * i));
            assert!(!ev.iter().any(|e| matches!(e, Event::Rescued(_))), "{ev:?}");
        }
        for tid in [40, 50, 60] {
            assert_ne!(t.state_of(tid).1, SCHED_DEADLINE);
        }
    }
}
