//! The loans: a starving thread lent SCHED_DEADLINE (or SCHED_FIFO pulses where the kernel
//! refuses or does not run it), its own policy recorded in the state files first and written
//! back when the loan ends, at a stop, or at the next start after a crash.

use std::time::{Duration, Instant};

use super::{Event, Guard, How, Rescue, Watch};
use crate::cpuset::CpuSet;
use crate::cpuwatch::{self, Kind, Seen};
use crate::error::Result;
use crate::policy::config::{glob_match, StallsConfig};
use crate::policy::state::{Entry, Original, State, StateFiles};
use crate::policy::{engine, threads};
use crate::sched::{SchedAttr, SCHED_DEADLINE};
use crate::sysroot::SysRoot;

#[derive(Debug)]
pub(super) struct Loan {
    pub(super) id: String,
    pub(super) thread: Seen,
    pub(super) original: SchedAttr,
    pub(super) since: Instant,
    pub(super) how: How,
    /// The SCHED_FIFO priority of the fallback: one above what holds the CPU.
    pub(super) above: u32,
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

/// A thread's own policy recorded in the state files for its loans: kept between them, so
/// that a thread that starves again and again (ktimers/3 behind a SCHED_FIFO loop) costs
/// one state write, not two per loan.
#[derive(Debug)]
pub(super) struct Kept {
    pub(super) id: String,
    /// What is recorded: the thread's own policy before its last loan.
    pub(super) original: SchedAttr,
    /// When the record goes if the thread is not lent again (`None` while it is lent, or
    /// when its policy could not be given back: then it stays for `isold restore`).
    pub(super) until: Option<Instant>,
}

/// How long a thread's record outlives its last loan: a thread lent again within it costs
/// no state write. Between its loans the thread has its own policy, so what a restore
/// would write meanwhile is what it has.
pub const KEEP_FOR: Duration = Duration::from_secs(10);

/// A deadline loan under which the thread has not run for this long is made SCHED_FIFO
/// pulses instead: a thread that overran an earlier loan carries the deficit in its
/// deadline entity, and 7.x keeps it throttled until its far deadline.
pub(super) const DEADLINE_GRACE: Duration = Duration::from_secs(1);

impl Guard {
    /// Whether the guard may lend to this thread at all.
    pub(super) fn lendable(&self, tid: i32) -> bool {
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

    pub(super) fn lend(
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
        // Written back as a plain policy: 6.12+ reports the fair slice in the runtime, and
        // writing that back would pin a custom slice.
        let original = match threads::thread_attr(root, s.pid, s.tid) {
            Ok(a) => SchedAttr::plain(a.policy, a.priority, a.nice, a.reset_on_fork()),
            Err(_) => return,
        };
        if original.policy == SCHED_DEADLINE {
            return;
        }
        let id = format!("loan:{}:{}", s.tid, s.starttime);
        let t0 = Instant::now();
        // A record of an earlier thread with this tid (it ended) goes; one of this thread
        // with the same policy is kept as it is.
        if let Some(old) = self.kept.get(&tid).filter(|k| k.id != id) {
            let old = old.id.clone();
            let _ = engine::forget_where(root, &self.watch.files, |i| i == old);
            self.kept.remove(&tid);
        }
        let kept = self.kept.get(&tid).is_some_and(|k| k.original == original);
        let recorded = if kept {
            Ok(())
        } else {
            record(root, &self.watch, &id, &s, &original)
        };
        self.ledger_time += t0.elapsed();
        if let Err(e) = recorded {
            if let Some(t) = self.tracked.get_mut(&tid).filter(|t| !t.said) {
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
                // Nothing changed: the record goes.
                let _ = engine::forget_where(root, &self.watch.files, |i| i == id);
                self.kept.remove(&tid);
                if let Some(t) = self.tracked.get_mut(&tid).filter(|t| !t.said) {
                    if !matches!(e.errno(), Some(libc::ESRCH)) {
                        t.said = true;
                        events.push(Event::Failed(format!(
                            "stall guard: {} starves on CPU {}: {e}",
                            s.label(),
                            s.cpu
                        )));
                    }
                }
                return;
            }
        };
        self.kept.insert(
            tid,
            Kept {
                id: id.clone(),
                original,
                until: None,
            },
        );
        let Some(t) = self.tracked.get_mut(&tid) else {
            return;
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
    pub(super) fn end_loans(
        &mut self,
        root: &SysRoot,
        busy: &CpuSet,
        now: Instant,
        ev: &mut Vec<Event>,
    ) {
        let lend_for = self.watch.settings.lend_for;
        for l in self.loans.values_mut() {
            if l.how != How::Deadline || now.saturating_duration_since(l.since) < DEADLINE_GRACE {
                continue;
            }
            // A thread gone meanwhile ran to its end: its loan ends below.
            let waits = cpuwatch::read_seen(root, l.thread.pid, l.thread.tid)
                .ok()
                .flatten()
                .is_some_and(|s| s.same_thread(&l.thread) && !s.ran_since(&l.thread));
            if waits {
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
    pub(super) fn give_back(
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
        // A runnable thread ends only by running: one gone meanwhile ran.
        let ran = seen.as_ref().map_or(true, |s| s.ran_since(&loan.thread));
        let used = Duration::from_nanos(
            seen.as_ref()
                .map_or(0, |s| s.exec_ns.saturating_sub(loan.thread.exec_ns)),
        );
        let threshold = self.watch.settings.threshold;
        let same = seen.as_ref().is_some_and(|s| s.same_thread(&loan.thread));
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
        // Its own policy back; the record stays for a while (a thread lent again soon costs
        // no state write), or goes now with a thread that is gone.
        let given = if same {
            match threads::set_thread_attr(root, loan.thread.pid, tid, &loan.original) {
                Ok(()) => Ok(()),
                Err(e) if matches!(e.errno(), Some(libc::ESRCH)) => Err(None),
                Err(e) => Err(Some(e)),
            }
        } else {
            Err(None)
        };
        let returned = |to| Event::Returned {
            label: label.clone(),
            cpu,
            held,
            ran,
            used,
            to,
            how,
        };
        Some(match given {
            Ok(()) => {
                if let Some(k) = self.kept.get_mut(&tid) {
                    k.until = Some(now + KEEP_FOR);
                }
                returned(Some(loan.original.to_string()))
            }
            Err(None) => {
                let t0 = Instant::now();
                let _ = engine::forget_where(root, &self.watch.files, |i| i == loan.id);
                self.ledger_time += t0.elapsed();
                self.kept.remove(&tid);
                returned(None)
            }
            // Kept (`until` stays `None`) for `isold restore`.
            Err(Some(e)) => Event::Failed(format!(
                "stall guard: {label}: its own policy ({}) could not be given back: {e}; it stays in the state file for isold restore",
                loan.original
            )),
        })
    }

    /// The records of threads not lent again within [`KEEP_FOR`] of their last loan dropped
    /// from the state files, in one write.
    pub(super) fn forget_kept(&mut self, root: &SysRoot, now: Instant) {
        let expired: Vec<String> = self
            .kept
            .values()
            .filter(|k| k.until.is_some_and(|u| now >= u))
            .map(|k| k.id.clone())
            .collect();
        if expired.is_empty() {
            return;
        }
        let t0 = Instant::now();
        if engine::forget_where(root, &self.watch.files, |i| expired.iter().any(|e| e == i)).is_ok()
        {
            self.kept.retain(|_, k| !expired.contains(&k.id));
        }
        self.ledger_time += t0.elapsed();
    }

    /// SCHED_FIFO loans: the thread boosted for its share of this pass, then its own policy
    /// back.
    pub(super) fn pulse(&mut self, root: &SysRoot, now: Instant) {
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

    /// Every loan given back and every record dropped (a stop, the guard turned off); a
    /// thread whose policy could not be given back keeps its record for `isold restore`.
    pub fn give_back_all(&mut self, root: &SysRoot) -> Vec<Event> {
        let now = Instant::now();
        let tids: Vec<i32> = self.loans.keys().copied().collect();
        let events = tids
            .into_iter()
            .filter_map(|tid| self.give_back(root, tid, now, false))
            .collect();
        for k in self.kept.values_mut().filter(|k| k.until.is_some()) {
            k.until = Some(now);
        }
        self.forget_kept(root, now);
        events
    }
}

/// The loan's original in the state files, before the loan.
fn record(root: &SysRoot, w: &Watch, id: &str, s: &Seen, original: &SchedAttr) -> Result<()> {
    let entry = Entry {
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
    };
    engine::record_current(root, &w.files, &w.isolated, &w.config, entry).map(drop)
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
