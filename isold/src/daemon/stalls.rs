//! The stall guard's thread (`[stalls]`, on by default): every `interval` it looks at the
//! isolated CPUs from a housekeeping CPU (libtaskisol::stalls) and lends a starving thread a
//! bounded slice. What it did goes to the main thread, which logs and counts it; a stop
//! gives every loan back before the daemon ends.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use libtaskisol::cpuwatch::EventCounts;
use libtaskisol::policy::state::StateFiles;
use libtaskisol::policy::Policy;
use libtaskisol::stalls::{self, Event, Guard, Watch};
use libtaskisol::{CpuSet, SysRoot};

use super::os::thread_cpu_ns;

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
    Ledger(Arc<Mutex<super::noise::Shared>>),
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
    let mut guard = Guard::new(watch);
    let mut next = Instant::now() + guard.interval();
    let mut ledger: Option<Arc<Mutex<super::noise::Shared>>> = None;
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
        let now_recording = ledger.as_ref().and_then(|l| {
            l.lock()
                .unwrap_or_else(|e| e.into_inner())
                .recording
                .clone()
        });
        if now_recording != counted {
            guard.set_event_counts(
                now_recording
                    .as_ref()
                    .and_then(|(dir, cpus)| EventCounts::open(&root, dir, cpus)),
            );
            counted = now_recording;
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
