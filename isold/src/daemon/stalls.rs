//! The stall guard (`[stalls]`, on by default), a service of the daemon: its thread looks at
//! the isolated CPUs from a housekeeping CPU every `interval` (libtaskisol::stalls) and lends
//! a starving thread a bounded slice. What it did goes to the main thread, which logs and
//! counts it here ([`Guard`]: its status lines and metrics); a stop gives every loan back
//! before the daemon ends.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use libtaskisol::cpuwatch::EventCounts;
use libtaskisol::policy::state::StateFiles;
use libtaskisol::policy::Policy;
use libtaskisol::stalls::{self, Event, Watch};
use libtaskisol::{CpuSet, SysRoot};

use super::os::thread_cpu_ns;
use super::service::{Cx, Note, Recording, Request, Service};

/// How long a stop waits for the guard's thread.
pub const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// What the main thread tells the guard.
pub enum Ctl {
    /// Watch these CPUs with these settings from now on.
    Watch(Box<Watch>),
    /// Threads that started or exec'd (pid, tid): one that lands on a watched CPU is
    /// followed.
    Look(Vec<(i32, i32)>),
    /// The noise ledger's shared figures: where it records task switches on the watched
    /// CPUs, whose event counts spare the guard's passes `/proc/stat` while those CPUs idle.
    Ledger(Arc<dyn Recording>),
    /// Close the ledger's files the guard keeps open (its instance is about to be removed,
    /// which they would keep busy), then say so.
    CloseCounts(Sender<()>),
    /// Give every loan back and end.
    Stop,
}

/// The guard's own figures, read by the main thread for the status and the metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// Threads lent a slice now.
    pub lent: usize,
    /// Threads whose policy the state files hold for a loan (lent now or lately).
    pub recorded: usize,
    /// The guard thread's CPU time so far.
    pub cpu_s: f64,
    /// Passes, walks and the last walk's length.
    pub work: stalls::Work,
}

/// The guard's thread, seen from the main thread.
pub struct StallGuard {
    ctl: Sender<Ctl>,
    pub events: Receiver<Event>,
    /// Readable when events wait (the main thread polls it).
    pub wake: std::os::unix::net::UnixStream,
    pub figures: Arc<Mutex<Figures>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for StallGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StallGuard")
    }
}

/// The CPUs the guard watches under `policy`: every isolated one (the configuration's and
/// the claimed ones) but `ignore_cpus`.
pub fn watched(policy: &Policy) -> CpuSet {
    policy.isolated.difference(&policy.stalls().ignore_cpus)
}

/// What the guard watches under `policy`.
pub fn watch_of(policy: &Policy, files: &StateFiles) -> Watch {
    Watch {
        cpus: watched(policy),
        settings: policy.stalls().clone(),
        files: files.clone(),
        isolated: policy.isolated.to_string(),
        config: policy.config_file().display().to_string(),
    }
}

/// What the kernel gives fair tasks on the watched CPUs by itself (6.12+'s fair server),
/// read from debugfs, for the status and the start's log line.
pub fn fair_server_said(root: &SysRoot, cpus: &CpuSet) -> String {
    let mut on = CpuSet::new();
    let mut off = CpuSet::new();
    let mut share = None;
    for cpu in cpus.iter() {
        match stalls::fair_server(root, cpu) {
            Some((0, _)) => off.insert(cpu),
            Some((rt, period)) => {
                on.insert(cpu);
                share = Some((rt, period));
            }
            None => {}
        }
    }
    if on.is_empty() && off.is_empty() {
        return if root.exists("/sys/kernel/debug/sched") {
            "none (a kernel before 6.12: every thread below the workload waits for the guard)"
                .into()
        } else {
            "unknown (debugfs is not mounted)".into()
        };
    }
    let mut parts = Vec::new();
    if let Some((rt, period)) = share {
        parts.push(format!(
            "{} ms every {} ms for fair tasks on CPUs {on}",
            rt / 1_000_000,
            period / 1_000_000
        ));
    }
    if !off.is_empty() {
        parts.push(format!("off (runtime 0) on CPUs {off}"));
    }
    parts.join("; ")
}

impl StallGuard {
    pub fn start(root: SysRoot, watch: Watch) -> std::io::Result<StallGuard> {
        let (ctl, ctl_rx) = std::sync::mpsc::channel::<Ctl>();
        let (tx, events) = std::sync::mpsc::channel();
        let (wake, notify_main) = std::os::unix::net::UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        notify_main.set_nonblocking(true)?;
        let figures = Arc::new(Mutex::new(Figures::default()));
        let fig = figures.clone();
        let thread = std::thread::Builder::new()
            .name("isold-stalls".into())
            .spawn(move || run(root, watch, &ctl_rx, &tx, notify_main, &fig))?;
        Ok(StallGuard {
            ctl,
            events,
            wake,
            figures,
            thread: Some(thread),
        })
    }

    pub fn send(&self, c: Ctl) {
        let _ = self.ctl.send(c);
    }

    /// The noise ledger's files closed by the guard's thread, waited for at most `wait`
    /// (a pass in progress): `false` when it did not say so in time.
    pub fn close_counts(&self, wait: std::time::Duration) -> bool {
        let (ack, done) = std::sync::mpsc::channel();
        self.send(Ctl::CloseCounts(ack));
        done.recv_timeout(wait).is_ok()
    }

    /// Every loan given back and every record of one dropped, the thread ended: the events
    /// of the give-back. A stop waits for a pass in progress (a walk over every thread takes
    /// seconds under emulation) at most [`STOP_WAIT`]; a loan still out then is in the
    /// state file for the next start and `isold restore` (a record of a loan that ended
    /// gives the thread the policy it has).
    pub fn stop(mut self) -> Vec<Event> {
        self.send(Ctl::Stop);
        let recorded = self
            .figures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .recorded;
        // Nothing lent or recorded at the last pass: nothing to wait for (a loan made since
        // is in the state file, for the next start and `isold restore`).
        let wait = if recorded > 0 {
            STOP_WAIT
        } else {
            std::time::Duration::from_millis(100)
        };
        if let Some(t) = self.thread.take() {
            let until = Instant::now() + wait;
            while !t.is_finished() && Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
        self.events.try_iter().collect()
    }
}

fn run(
    root: SysRoot,
    watch: Watch,
    ctl: &Receiver<Ctl>,
    tx: &Sender<Event>,
    notify_main: std::os::unix::net::UnixStream,
    figures: &Mutex<Figures>,
) {
    let mut guard = stalls::Guard::new(watch);
    let mut next = Instant::now() + guard.interval();
    let mut ledger: Option<Arc<dyn Recording>> = None;
    let mut counted: Option<(String, CpuSet)> = None;
    let send = |events: Vec<Event>| {
        if events.is_empty() {
            return;
        }
        for e in events {
            let _ = tx.send(e);
        }
        let _ = std::io::Write::write(&mut &notify_main, &[1]);
    };
    loop {
        match ctl.recv_timeout(next.saturating_duration_since(Instant::now())) {
            Ok(Ctl::Watch(w)) => {
                guard.set_watch(*w);
                // Other CPUs, perhaps busy: not a sleep's wait.
                next = next.min(Instant::now() + guard.interval());
                continue;
            }
            Ok(Ctl::Look(ids)) => {
                guard.ask(ids, Instant::now());
                continue;
            }
            Ok(Ctl::Ledger(l)) => {
                ledger = Some(l);
                continue;
            }
            Ok(Ctl::CloseCounts(ack)) => {
                guard.set_event_counts(None);
                // Opened again only when the ledger records anew.
                ledger = None;
                counted = None;
                let _ = ack.send(());
                continue;
            }
            Ok(Ctl::Stop) | Err(RecvTimeoutError::Disconnected) => {
                send(guard.give_back_all(&root));
                return;
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        // The ledger's instance as it records now (it restarts, moves to other CPUs,
        // stops): its counts opened again when it changed.
        let now_recording = ledger.as_ref().and_then(|l| l.recording());
        if now_recording != counted {
            guard.set_event_counts(
                now_recording
                    .as_ref()
                    .and_then(|(dir, cpus)| EventCounts::open(&root, dir, cpus)),
            );
            counted = now_recording;
        }
        // What the ledger saw go idle, at which counts (read with the counts it matches).
        if counted.is_some() {
            guard.idle_by_ledger(ledger.as_ref().map(|l| l.idle_at()).unwrap_or_default());
        }
        let start = Instant::now();
        let events = guard.pass(&root, start);
        next = guard.next_pass(start);
        {
            let mut f = figures.lock().unwrap_or_else(|e| e.into_inner());
            f.lent = guard.lent();
            f.recorded = guard.recorded();
            f.cpu_s = thread_cpu_ns() as f64 / 1e9;
            f.work = guard.work.clone();
        }
        send(events);
    }
}

/// The stall guard as a service of the daemon: its thread while `[stalls]` has it on, its
/// lines in the status (`stalls`) and its metrics.
#[derive(Debug, Default)]
pub(super) struct Guard {
    thread: Option<StallGuard>,
    /// `[stalls] lend_for` as the rescue lines say it.
    lend_for: String,
}

impl Guard {
    /// The guard started for the policy in force, when `[stalls]` has it on.
    pub fn start(cx: &mut Cx<'_>) -> Guard {
        let mut g = Guard::default();
        g.start_thread(cx);
        g
    }

    fn start_thread(&mut self, cx: &mut Cx<'_>) {
        let st = cx.policy.stalls();
        let watch = watch_of(cx.policy, &cx.env.files);
        let fair = fair_server_said(&cx.env.root, &watch.cpus);
        let said = if !st.enabled {
            "off ([stalls] enabled = false)".to_string()
        } else if watch.cpus.is_empty() {
            "off (no isolated CPU to watch)".to_string()
        } else {
            match StallGuard::start(cx.env.root.clone(), watch.clone()) {
                Ok(g) => {
                    if let Some(l) = &cx.board.ledger {
                        g.send(Ctl::Ledger(l.clone()));
                    }
                    self.thread = Some(g);
                    format!(
                        "on: CPUs {}, a thread runnable {} s without running is lent SCHED_DEADLINE {} us every {} us for up to {} s",
                        watch.cpus,
                        st.threshold.as_secs_f64(),
                        st.runtime_us,
                        st.period_us,
                        st.lend_for.as_secs_f64()
                    )
                }
                Err(e) => format!("off (its thread could not start: {e})"),
            }
        };
        cx.env.log.info(&format!(
            "stall guard: {said}; the kernel's fair server: {fair}"
        ));
        self.lend_for = format!("{} s", st.lend_for.as_secs_f64());
        let s = cx.books.status.stalls.get_or_insert_with(Default::default);
        s.guard = said;
        s.fair_server = fair;
        cx.books.dirty = true;
    }

    /// Every loan given back and the thread ended.
    fn stop_thread(&mut self, cx: &mut Cx<'_>) {
        if let Some(g) = self.thread.take() {
            for e in g.stop() {
                self.event(&e, cx);
            }
        }
    }

    /// What the guard did: a rescue is said once per thread and episode, counted each time;
    /// a loan's end is said at -v.
    fn event(&self, e: &Event, cx: &mut Cx<'_>) {
        use crate::status::{Correction, Stalls};
        use libtaskisol::stalls::How;
        let log = cx.env.log;
        let books = &mut *cx.books;
        let g = books.status.stalls.get_or_insert_with(Stalls::default);
        match e {
            Event::Rescued(r) => {
                let what = format!(
                    "{} waited {:.1} s runnable on CPU {}{}: lent {} for up to {}",
                    r.thread.label(),
                    r.waited.as_secs_f64(),
                    r.thread.cpu,
                    r.behind
                        .as_ref()
                        .map_or_else(String::new, |b| format!(" behind {b}")),
                    r.how,
                    self.lend_for
                );
                g.rescues += 1;
                *g.by_cpu.entry(format!("CPU {}", r.thread.cpu)).or_default() += 1;
                g.last = Some(Correction {
                    at: super::os::now_s(),
                    item: "stalls".into(),
                    label: r.thread.label(),
                    what: what.clone(),
                });
                if r.first_of_episode {
                    log.info(&format!("stall guard: {what}"));
                } else {
                    log.debug(&format!("stall guard: again: {what}"));
                }
                if let Some((m, _)) = &books.metrics {
                    m.stall_rescue(r.thread.cpu, r.kind.as_str(), r.waited.as_secs_f64());
                }
            }
            Event::Returned {
                label,
                cpu,
                held,
                ran,
                used,
                to,
                how,
            } => {
                *g.lent_s_by_cpu.entry(format!("CPU {cpu}")).or_default() += used.as_secs_f64();
                if let Some((m, _)) = &books.metrics {
                    m.stall_lent(*cpu, used.as_secs_f64());
                }
                let how = match how {
                    How::Deadline => String::new(),
                    How::Fifo(p) => format!(", by SCHED_FIFO {p} pulses"),
                };
                let what = match to {
                    // Its CPU time went with it.
                    None => format!("it ran to its end{how}), thread gone"),
                    Some(t) => format!(
                        "{}, {:.1} ms of CPU{how}), back to {t}",
                        if *ran { "it ran" } else { "it did not run" },
                        used.as_secs_f64() * 1000.0
                    ),
                };
                log.debug(&format!(
                    "stall guard: {label} on CPU {cpu}: loan ended after {:.2} s ({what}",
                    held.as_secs_f64()
                ))
            }
            Event::Failed(msg) => log.warn(msg),
            Event::Walked {
                busy,
                runnable,
                residents,
                took,
            } => {
                log.debug(&format!(
                    "stall guard: a walk over every thread ({:.1} ms): {runnable} runnable on the busy CPUs {}, {residents} threads live on the watched CPUs",
                    took.as_secs_f64() * 1000.0,
                    if busy.is_empty() { "(none)".to_string() } else { busy.to_string() }
                ));
                return;
            }
        }
        books.dirty = true;
    }
}

impl Service for Guard {
    fn name(&self) -> &'static str {
        "stall guard"
    }

    fn wake(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.thread.as_ref().map(|g| g.wake.as_fd())
    }

    /// What the thread reported: logged and counted.
    fn on_wake(&mut self, cx: &mut Cx<'_>) -> Vec<Request> {
        let Some(g) = self.thread.as_ref() else {
            return Vec::new();
        };
        let mut byte = [0u8; 64];
        while matches!(std::io::Read::read(&mut &g.wake, &mut byte), Ok(n) if n > 0) {}
        let events: Vec<_> = g.events.try_iter().collect();
        for e in &events {
            self.event(e, cx);
        }
        self.figures(cx);
        Vec::new()
    }

    /// It watches the new policy's CPUs with its settings (started or stopped when
    /// `[stalls] enabled` changed).
    fn policy_changed(&mut self, cx: &mut Cx<'_>) {
        let on = cx.policy.stalls().enabled;
        match (&self.thread, on) {
            (Some(g), true) => {
                self.lend_for = format!("{} s", cx.policy.stalls().lend_for.as_secs_f64());
                g.send(Ctl::Watch(Box::new(watch_of(cx.policy, &cx.env.files))));
                if let Some(s) = cx.books.status.stalls.as_mut() {
                    s.guard = s
                        .guard
                        .split_once(", a thread")
                        .map_or(s.guard.clone(), |(_, rest)| {
                            format!("on: CPUs {}, a thread{rest}", watched(cx.policy))
                        });
                }
            }
            (Some(_), false) | (None, true) => {
                self.stop_thread(cx);
                self.start_thread(cx);
            }
            (None, false) => {}
        }
    }

    fn hear(&mut self, note: &Note, cx: &mut Cx<'_>) {
        let Some(g) = self.thread.as_ref() else {
            return;
        };
        match note {
            Note::Ledger(Some(l)) => g.send(Ctl::Ledger(l.clone())),
            // The instance goes: its files the guard keeps open would keep it busy.
            Note::Ledger(None) => {
                if !g.close_counts(STOP_WAIT) {
                    cx.env
                        .log
                        .warn("stall guard: the noise ledger's files not closed in time");
                }
            }
            Note::Started(ids) => g.send(Ctl::Look(ids.clone())),
        }
    }

    /// Its own figures (the status file and the metrics follow them).
    fn figures(&mut self, cx: &mut Cx<'_>) {
        let Some(g) = self.thread.as_ref() else {
            return;
        };
        let f = g.figures.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let books = &mut *cx.books;
        if let Some(s) = books.status.stalls.as_mut() {
            s.lent_now = f.lent as u64;
            s.cpu_s = f.cpu_s;
            s.passes = f.work.passes;
            s.quiet_passes = f.work.quiet_passes;
            s.slept = f.work.slept;
            s.walks = f.work.walks;
            s.last_walk_ms = f.work.last_walk.as_secs_f64() * 1000.0;
        }
        if let Some((m, _)) = &books.metrics {
            m.stall_figures(f.lent, f.cpu_s);
        }
        books.dirty = true;
    }

    /// Loans are never left behind, whatever `on_stop` says: a lent thread's policy is
    /// isold's only while isold watches it.
    fn stop(&mut self, cx: &mut Cx<'_>) {
        self.stop_thread(cx);
    }
}
