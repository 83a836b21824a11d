//! The main loop: events as they come, timed work when due, until SIGTERM or SIGINT.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use nix::sys::signalfd::SignalFd;

use super::isolator::Daemon;
use super::os::notify;
use super::os::secs;
use super::scanner::{Ctl, ScanMsg, Scanner};
use super::service::{Note, Request};
use crate::cli::RunArgs;

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
        if d.partition.unwatched_now(&d.policy) {
            deadline = deadline.min(self.next_partition);
        }
        if let Some(at) = d.tasks.next_due() {
            deadline = deadline.min(at);
        }
        if d.books.dirty {
            deadline = deadline.min(self.last_status + Duration::from_millis(200));
        }
        if d.books.tasks_unlogged > 0 {
            deadline = deadline.min(self.last_task_log + Duration::from_secs(10));
        }
        if let Some(at) = d.partition.retry {
            deadline = deadline.min(at);
        }
        if !d.claims.list.is_empty() {
            deadline = deadline.min(self.next_claims);
        }
        let wait = deadline.saturating_duration_since(Instant::now());
        PollTimeout::try_from(wait.as_millis().min(60_000) as i32).unwrap_or(PollTimeout::NONE)
    }

    /// Whatever is due now.
    fn run_due(&mut self, d: &mut Daemon) {
        let now = Instant::now();
        if d.partition.retry.is_some_and(|at| now >= at) {
            d.partition.retry = None;
            d.partition.check(&d.env, &d.policy, &mut d.books, true);
        }
        for ch in d.partition.contests.sweep(now) {
            d.books.contest_changed(&ch);
            d.books.refresh_contested(d.partition.contests.list());
        }
        if d.partition.unwatched_now(&d.policy) && now >= self.next_partition {
            d.partition.check(&d.env, &d.policy, &mut d.books, false);
            self.next_partition = Instant::now() + self.interval;
        }
        if now >= self.next_sweep {
            let (tasks, mut cx) = d.tasks_cx();
            tasks.sweep(&mut cx);
            tasks.forget_gone(&mut cx, now);
            d.books.refresh_waiting(&d.env.root, &d.policy);
            d.service_figures();
            self.next_sweep = Instant::now() + self.task_interval;
        }
        if !d.tasks.new_kthreads.is_empty() {
            let (tasks, mut cx) = d.tasks_cx();
            tasks.due_kthreads(&mut cx, now);
        }
        if !d.tasks.new_threads.is_empty() {
            let (tasks, mut cx) = d.tasks_cx();
            tasks.due_threads(&mut cx, now);
        }
        if d.books.tasks_unlogged > 0 && self.last_task_log.elapsed() >= Duration::from_secs(10) {
            d.books.log_tasks();
            self.last_task_log = Instant::now();
        }
        // The status file follows the corrections, at most every 200 ms: a burst of them
        // costs one write.
        if d.books.dirty && self.last_status.elapsed() >= Duration::from_millis(200) {
            d.books.save_status();
            d.books.dirty = false;
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
    /// The services whose wake was readable, by index.
    services: Vec<usize>,
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
    let sources = [
        d.tasks.procs.as_ref().map(|p| p.as_fd()),
        d.uevents.as_ref().map(|u| u.as_fd()),
        d.partition.inotify.as_ref().map(|i| i.as_fd()),
    ];
    let [proc_i, uev_i, ino_i] = sources.map(|fd| {
        fd.map(|fd| {
            fds.push(PollFd::new(fd, PollFlags::POLLIN));
            fds.len() - 1
        })
    });
    let services: Vec<(usize, usize)> = d
        .services
        .wakes()
        .map(|(i, fd)| {
            fds.push(PollFd::new(fd, PollFlags::POLLIN));
            (i, fds.len() - 1)
        })
        .collect();
    if let Err(e) = nix::poll::poll(&mut fds, timeout) {
        if e != nix::errno::Errno::EINTR {
            d.env.log.warn(&format!("poll: {e}"));
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
        services: services
            .into_iter()
            .filter(|&(_, at)| ready(Some(at)))
            .map(|(i, _)| i)
            .collect(),
    })
}

/// The loop of `isold run` after its first apply: the exit code.
pub(super) fn serve(mut d: Daemon, signals: &SignalFd, args: &RunArgs) -> i32 {
    let mut timers = Timers::new(args);
    let Some(mut scanner) = d.scanner(timers.interval) else {
        return d.stop(Signal::SIGTERM).max(crate::exit::EXIT_FAILURE);
    };
    loop {
        let Some(ready) = wait_for(&d, signals, &scanner, timers.timeout(&d)) else {
            continue;
        };
        if ready.signals {
            if let Some(code) = d.on_signals(signals, &mut scanner, timers.interval) {
                return code;
            }
        }
        if ready.procs {
            let (tasks, mut cx) = d.tasks_cx();
            if tasks.on_proc_events(&mut cx) {
                cx.env
                    .log
                    .warn("process events were lost (socket overflow): scanning every task");
                tasks.full_scan(&mut cx);
            }
            let started = std::mem::take(&mut d.tasks.started);
            if !started.is_empty() {
                d.tell(Note::Started(started));
            }
        }
        if ready.uevents {
            d.on_uevents(&scanner);
        }
        if ready.inotify {
            if let Some(i) = d.partition.inotify.as_ref() {
                let _ = i.read_events();
            }
            d.partition.check(&d.env, &d.policy, &mut d.books, true);
        }
        if ready.scanner {
            d.on_scan_messages(&scanner);
        }
        for i in ready.services {
            let (services, lent) = d.lent();
            let asked = services.wake(i, lent);
            if let Some(code) = d.carry_out(asked, &mut scanner, timers.interval) {
                return code;
            }
        }
        if Instant::now() >= timers.next_claims {
            timers.next_claims = Instant::now() + timers.interval;
            if !d.claims.dead(&d.env.root).is_empty() {
                scanner.stop();
                d.release_dead_claims();
                scanner = match d.scanner(timers.interval) {
                    Some(s) => s,
                    None => return d.stop(Signal::SIGTERM).max(crate::exit::EXIT_FAILURE),
                };
            }
        }
        timers.run_due(&mut d);
    }
}

impl Daemon {
    /// A scan thread for the policy in force; `None` (said in the log) when it cannot start.
    fn scanner(&self, interval: Duration) -> Option<Scanner> {
        let started = Scanner::start(
            self.env.root.clone(),
            self.policy.clone(),
            self.env.files.clone(),
            interval,
        );
        match started {
            Ok(s) => Some(s),
            Err(e) => {
                self.env
                    .log
                    .warn(&format!("cannot start the scan thread: {e}"));
                None
            }
        }
    }

    /// What the services asked, each carried out and answered in turn; one that may change
    /// the policy with the scan thread stopped (`Some(exit code)` if it cannot be started
    /// again).
    fn carry_out(
        &mut self,
        asked: Vec<Request>,
        scanner: &mut Scanner,
        interval: Duration,
    ) -> Option<i32> {
        for Request { ask, answer } in asked {
            if !self.changes_policy(&ask) {
                answer(&self.on_ask(ask));
                continue;
            }
            scanner.stop();
            let reply = self.on_ask(ask);
            answer(&reply);
            match self.scanner(interval) {
                Some(s) => *scanner = s,
                None => return Some(self.stop(Signal::SIGTERM).max(crate::exit::EXIT_FAILURE)),
            }
        }
        None
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
                    self.env.log.info("SIGHUP: reloading the configuration");
                    // The scan thread stops first: a scan of the old policy must not undo the
                    // new one.
                    scanner.stop();
                    self.reload();
                    *scanner = match self.scanner(interval) {
                        Some(s) => s,
                        None => {
                            return Some(self.stop(Signal::SIGTERM).max(crate::exit::EXIT_FAILURE))
                        }
                    };
                    self.notify_ready();
                }
                Ok(s) => {
                    scanner.stop();
                    return Some(self.stop(s));
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
                    self.env.log.trace(&format!("{} uevent(s)", evs.len()));
                }
                // A device that went away (a pod's veth deleted or moved into the pod's
                // namespace) leaves the state at the next task sweep; a rename (`move`) or
                // lost events do not say which name is gone: every device is looked at.
                for e in &evs {
                    match (e.action.as_str(), e.subsystem.as_deref(), e.net_device()) {
                        ("remove", Some("net"), Some(dev)) => self.tasks.device_removed(dev),
                        ("move", Some("net"), Some(_)) => self.tasks.forget_all_devices = true,
                        _ => {}
                    }
                }
                if lost {
                    self.tasks.forget_all_devices = true;
                }
                // Network devices and their queues alone (veths, a pod's): planned for those
                // devices only. Anything else, or events lost, is a rescan of everything.
                let others = lost || evs.iter().any(|e| e.net_device().is_none());
                if others {
                    // A CPU that came or went may let a failed partition be made.
                    self.partition.failed = false;
                    scanner.send(Ctl::Rescan);
                } else if !evs.is_empty() {
                    let names = evs
                        .iter()
                        .filter(|e| e.action != "remove")
                        .filter_map(|e| e.net_device().map(str::to_string))
                        .collect::<std::collections::BTreeSet<String>>();
                    if !names.is_empty() {
                        scanner.send(Ctl::Devices(names));
                    }
                }
            }
            Err(e) => self.env.log.warn(&format!("uevents: {e}")),
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
                    self.books.holds(rep.problems().count() == 0);
                }
                ScanMsg::Failed(e) => {
                    self.books.holds(false);
                    self.env.log.warn(&format!("scan: {e}"))
                }
                ScanMsg::Contest(change) => self.books.contest_changed(&change),
                ScanMsg::Contested(list) => {
                    self.books.scan_contested = list;
                    self.books.refresh_contested(self.partition.contests.list());
                }
            }
        }
    }
}
