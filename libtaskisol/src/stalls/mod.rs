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
//!    busy. With no busy CPU and no loan the pass ends there. Where the noise ledger records
//!    task switches ([`Guard::set_event_counts`]), a CPU that was idle with no event written
//!    since, still idle, needs no `/proc/stat` (whose text the kernel makes from every IRQ's
//!    count), nor does one the ledger saw go idle at the count it has now
//!    ([`Guard::idle_by_ledger`]): while every watched CPU is so, a pass reads one `stats` file per CPU (and
//!    whether the instance records task switches), `/proc/stat` once per [`QUIET_FOR`]
//!    thresholds, and the passes come every half threshold ([`Guard::asleep`]). A busy CPU
//!    whose count stood between two reads ran one task all along (a real-time loop) and is
//!    busy still while its count stands: without `/proc/stat` while every watched CPU is
//!    known so, and, with nothing lent or asked about, a pass every half threshold or when
//!    a followed thread could first starve, the earlier ([`Guard::next_pass`]).
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
//! one per CPU at a time (the longest waiting first, the CPU's own kernel threads, whose work
//! other CPUs wait on, counting a threshold more), for at most `lend_for`, or until it is no
//! longer runnable; its own
//! policy is recorded in the state files first ([`crate::policy::state::Original::Loan`]) and written back at the
//! end, so `isold restore` and the next start after a `kill -9` give it back too; the record
//! is kept [`KEEP_FOR`] after the loan, so a thread lent again and again costs one write. Where the
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
use crate::policy::config::StallsConfig;
use crate::policy::state::StateFiles;
use crate::sched::SCHED_DEADLINE;
use crate::sysroot::SysRoot;

mod loan;

pub use loan::give_back_recorded;
use loan::Loan;
pub use loan::KEEP_FOR;

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
        /// The thread ran during the loan (one gone meanwhile did: it ran to its end).
        ran: bool,
        /// The CPU time it used during the loan: what the workload gave up (not known, 0,
        /// for a thread gone meanwhile).
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
    /// Passes that read no `/proc/stat`: every watched CPU ran one task (idle or not) since
    /// the last read, by the recorded task switches.
    pub quiet_passes: u64,
    /// Passes after which the guard waited half a threshold, not an interval: every watched
    /// CPU known idle ([`Guard::asleep`]).
    pub slept: u64,
}

/// What the task switches recorded on the watched CPUs tell: which ran one task all along
/// between the last two `/proc/stat` reads (no event written in between), the idle task
/// (`idle`: its idle time grew) or another (`busy`: it did not), so that they still do
/// until their count moves; the counts at the last read, and when it was.
#[derive(Debug, Default)]
struct Quiet {
    counts: Option<crate::cpuwatch::EventCounts>,
    at_stat: BTreeMap<usize, u64>,
    idle: CpuSet,
    busy: CpuSet,
    last_stat: Option<Instant>,
    /// The CPUs the noise ledger saw go idle, each with its count when it did
    /// ([`Guard::idle_by_ledger`]): idle still while the count is that.
    told: BTreeMap<usize, u64>,
    /// The CPUs known idle that way at the last pass.
    told_idle: CpuSet,
}

impl Quiet {
    /// Whether the noise ledger saw `cpu` go idle at the count it has now.
    fn told_idle(told: &BTreeMap<usize, u64>, counts: &BTreeMap<usize, u64>, cpu: usize) -> bool {
        counts.get(&cpu).is_some_and(|c| told.get(&cpu) == Some(c))
    }

    /// Whether `cpu`'s count is known now and the same as at the last `/proc/stat` read.
    fn count_stood(&self, counts: &BTreeMap<usize, u64>, cpu: usize) -> bool {
        counts
            .get(&cpu)
            .is_some_and(|c| self.at_stat.get(&cpu) == Some(c))
    }
}

/// The guard's memory between passes.
#[derive(Debug)]
pub struct Guard {
    watch: Watch,
    idle: BTreeMap<usize, u64>,
    tracked: HashMap<i32, Track>,
    loans: HashMap<i32, Loan>,
    /// The threads whose own policy is recorded in the state files for their loans (kept
    /// between loans, see [`loan::KEEP_FOR`]).
    kept: HashMap<i32, loan::Kept>,
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
    /// The last pass knew every watched CPU busy or idle from the recorded task switches.
    last_quiet: bool,
    /// When the residents are read next, and how long the last read took: at most every
    /// half threshold, and every fifty times its own length (a big machine's thousands).
    next_roster: Option<Instant>,
    /// The last failure to read the CPUs' times, said once until it changes.
    failing: Option<String>,
    /// The recorded task switches, where the noise ledger records them.
    quiet: Quiet,
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

/// While the recorded task switches say every watched CPU is idle, `/proc/stat` is read
/// once per this many thresholds (10 s with the default 2 s): `/proc/stat` costs the kernel
/// every IRQ's count on every CPU, and the counts already say more.
pub const QUIET_FOR: u32 = 5;

impl Guard {
    /// A guard over `watch` (nothing is read until the first pass).
    pub fn new(watch: Watch) -> Guard {
        Guard {
            watch,
            idle: BTreeMap::new(),
            tracked: HashMap::new(),
            loans: HashMap::new(),
            kept: HashMap::new(),
            roster: HashMap::new(),
            asked: Vec::new(),
            ledger_time: Duration::ZERO,
            next_walk: None,
            last_pass: Duration::ZERO,
            last_quiet: false,
            next_roster: None,
            failing: None,
            quiet: Quiet::default(),
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
    /// times the threshold and an interval (the pass that finds its CPU's idle time grown
    /// since the last read, the CPU idle then, and the next that finds it busy). While every
    /// watched CPU is known idle from the recorded task
    /// switches ([`Guard::asleep`]), half the threshold: nothing can starve on a CPU that
    /// runs its idle task, and the next pass sees a count that moved since. Likewise while
    /// every watched CPU is known busy or idle from them (a real-time loop that runs on with
    /// its count standing) with nothing lent and no thread asked about: the threads that live
    /// there are read every half threshold whatever the passes, and a followed thread can
    /// starve no sooner than its threshold after it was last seen to run, when a pass comes
    /// (the earlier of the two); a task switched in or an interrupt there moves the count,
    /// which that pass sees.
    pub fn next_pass(&self, start: Instant) -> Instant {
        let st = &self.watch.settings;
        let wait = if self.asleep() {
            st.threshold / 2
        } else if self.last_quiet && self.loans.is_empty() && self.asked.is_empty() {
            self.tracked
                .values()
                .map(|t| (t.since + st.threshold).saturating_duration_since(start))
                .min()
                .map_or(st.threshold / 2, |due| due.min(st.threshold / 2))
        } else {
            (self.last_pass * DUTY).min(st.threshold / 2)
        };
        start + wait.max(st.interval)
    }

    /// Whether every watched CPU was idle at the last look with no task switched in since,
    /// by the recorded task switches, with nothing lent or followed and the first walk
    /// made: the guard waits half a threshold between its passes then, where it waits an
    /// interval otherwise.
    pub fn asleep(&self) -> bool {
        let q = &self.quiet;
        q.counts.is_some()
            && self.next_walk.is_some()
            && self.loans.is_empty()
            && self.tracked.is_empty()
            && !self.watch.cpus.is_empty()
            && self
                .watch
                .cpus
                .iter()
                .all(|cpu| q.idle.contains(cpu) || q.told_idle.contains(cpu))
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
        self.quiet.idle = CpuSet::new();
        self.quiet.busy = CpuSet::new();
        self.next_walk = None;
    }

    /// The event counts of the instance that records task switches on the watched CPUs
    /// (the noise ledger's), or none: every pass then reads `/proc/stat`.
    pub fn set_event_counts(&mut self, counts: Option<crate::cpuwatch::EventCounts>) {
        self.quiet = Quiet {
            counts,
            ..Quiet::default()
        };
    }

    /// What the noise ledger saw at its last read of the instance whose counts the guard
    /// reads: the CPUs whose last task switch went to the idle task, each with its count
    /// before that read. A CPU whose count is that still has run its idle task since, with
    /// nothing switched in: known idle without `/proc/stat`, as one whose count stood since
    /// the last `/proc/stat` found it idle (a PREEMPT_RT kernel's idle CPUs run ktimers
    /// every second or two, which moves their counts between two passes).
    pub fn idle_by_ledger(&mut self, told: BTreeMap<usize, u64>) {
        self.quiet.told = told;
    }

    /// The directory of the instance whose counts the guard reads.
    pub fn event_counts_dir(&self) -> Option<&str> {
        self.quiet.counts.as_ref().map(|c| c.dir())
    }

    /// Time between two passes.
    pub fn interval(&self) -> Duration {
        self.watch.settings.interval
    }

    /// How many threads are lent a slice now.
    pub fn lent(&self) -> usize {
        self.loans.len()
    }

    /// How many threads have their own policy recorded in the state files for a loan (lent
    /// now, or lately: see [`KEEP_FOR`]).
    pub fn recorded(&self) -> usize {
        self.kept.len()
    }

    /// One look at the watched CPUs: starving threads lent a slice, ended loans given back.
    pub fn pass(&mut self, root: &SysRoot, now: Instant) -> Vec<Event> {
        let start = Instant::now();
        let walks = self.work.walks;
        self.ledger_time = Duration::ZERO;
        let events = self.pass_inner(root, now);
        if self.asleep() {
            self.work.slept += 1;
        }
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
        let counts = self
            .quiet
            .counts
            .as_ref()
            .map(|c| c.read())
            .unwrap_or_default();
        let known = self.known_now(&counts, now);
        self.last_quiet = known.is_some();
        self.quiet.told_idle = match &known {
            Some(_) => self
                .watch
                .cpus
                .iter()
                .filter(|cpu| Quiet::told_idle(&self.quiet.told, &counts, *cpu))
                .collect(),
            None => CpuSet::new(),
        };
        if known.is_some() {
            self.work.quiet_passes += 1;
        }
        if known
            .as_ref()
            .is_some_and(|b| b.is_empty() && self.loans.is_empty() && self.tracked.is_empty())
        {
            self.forget_asked(now);
            self.forget_kept(root, now);
            return events;
        }
        let read = match known {
            Some(busy) => Ok(busy),
            None => cpuwatch::idle_ticks(root).map(|idle| {
                let busy = self.busy(&idle);
                self.quiet.idle = self.quiet_idle(&idle, &counts, now);
                self.quiet.busy = busy
                    .iter()
                    .filter(|cpu| self.quiet.count_stood(&counts, *cpu))
                    .collect();
                self.quiet.at_stat = counts;
                self.quiet.last_stat = Some(now);
                self.idle = idle;
                busy
            }),
        };
        let busy = match read {
            Ok(busy) => {
                self.failing = None;
                busy
            }
            Err(e) => {
                // Nothing is known without the read: the guard looks every interval.
                self.quiet.idle = CpuSet::new();
                self.quiet.busy = CpuSet::new();
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
        self.forget_asked(now);
        if busy.is_empty() && self.loans.is_empty() {
            self.tracked.clear();
            self.forget_kept(root, now);
            return events;
        }
        if !busy.is_empty() {
            self.work.busy_passes += 1;
        }
        self.follow(root, &busy, now);
        self.look_at_known(root, &busy, now);
        self.end_loans(root, &busy, now, &mut events);
        self.forget_kept(root, now);
        let mut starving = starving(
            self.tracked.values().map(|t| (&t.seen, t.since)),
            now,
            self.watch.settings.threshold,
        );
        // One loan per CPU, the longest waiting first; a CPU's own kernel threads (other CPUs
        // wait on their work: a flush, a grace period, a timer) count a threshold more: they
        // go before a task that waited as long, never before one that waited a threshold
        // longer, so a task is not kept waiting behind kernel threads that starve again and
        // again (ktimers/3, rcuc/3 behind a FIFO loop on PREEMPT_RT).
        let threshold = self.watch.settings.threshold;
        starving.sort_by_key(|(tid, _)| {
            self.tracked.get(tid).map(|t| match t.seen.kind() {
                Kind::PerCpuKthread => t.since,
                _ => t.since + threshold,
            })
        });
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

    /// The busy watched CPUs, told by the recorded task switches without `/proc/stat`: every
    /// watched CPU ran one task between the last two reads of it (the idle task or another),
    /// and no event was written there since (no task switched in: it runs that task still);
    /// the first pass (its walk) made; and `/proc/stat` read within [`QUIET_FOR`] thresholds
    /// (a bound should the instance stop writing task switches in a way its files do not
    /// show: a filter set on the event). `None` when `/proc/stat` must be read.
    fn known_now(&self, counts: &BTreeMap<usize, u64>, now: Instant) -> Option<CpuSet> {
        let q = &self.quiet;
        let bound = self.watch.settings.threshold * QUIET_FOR;
        if self.next_walk.is_none()
            || !q
                .last_stat
                .is_some_and(|at| now.saturating_duration_since(at) < bound)
        {
            return None;
        }
        let mut busy = CpuSet::new();
        for cpu in self.watch.cpus.iter() {
            if !q.count_stood(counts, cpu) {
                if !Quiet::told_idle(&q.told, counts, cpu) {
                    return None;
                }
            } else if q.busy.contains(cpu) {
                busy.insert(cpu);
            } else if !q.idle.contains(cpu) && !Quiet::told_idle(&q.told, counts, cpu) {
                return None;
            }
        }
        Some(busy)
    }

    /// The threads asked about that were looked at twice and are past [`ASKED_FOR`]
    /// forgotten.
    fn forget_asked(&mut self, now: Instant) {
        self.asked.retain(|(at, looked, ..)| {
            *looked < 2 || now.saturating_duration_since(*at) < ASKED_FOR
        });
    }

    /// The watched CPUs idle now by the recorded task switches: no event was written between
    /// the counts read at the last `/proc/stat` and `counts`, read just before this one (one
    /// task ran all along; a switch after `counts` moves the count, which the next pass sees),
    /// and that task was the idle task: the idle time grew by at least half the time between
    /// the two reads (a CPU idle all along gains about all of it, whatever interrupted it for
    /// a moment; a count that stood while a loop ran, because the recording stopped in a way
    /// its files do not show, does not make a busy CPU idle again).
    fn quiet_idle(
        &self,
        idle: &BTreeMap<usize, u64>,
        counts: &BTreeMap<usize, u64>,
        now: Instant,
    ) -> CpuSet {
        let Some(at) = self.quiet.last_stat else {
            return CpuSet::new();
        };
        let half = now.saturating_duration_since(at).as_secs_f64()
            * cpuwatch::clock_ticks_per_s() as f64
            / 2.0;
        self.watch
            .cpus
            .iter()
            .filter(|cpu| {
                let grew = matches!(
                    (self.idle.get(cpu), idle.get(cpu)),
                    (Some(before), Some(after)) if after > before && (after - before) as f64 >= half
                );
                grew && self.quiet.count_stood(counts, *cpu)
            })
            .collect()
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
mod tests;
