//! The periodic scan of the values without events (sysctls, sysfs, IRQs, workqueues), on a
//! thread of its own so that it never delays the answer to a process event: a compare that
//! takes no lock and writes nothing while nothing drifted, an apply when something did.
//! Reports with changes go back to the main thread, which counts and logs them. A value
//! something else keeps changing back is left alone for a growing back-off.

use std::io::Write;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use libtaskisol::policy::state::StateFiles;
use libtaskisol::policy::watch::{Drift, Watch};
use libtaskisol::policy::{engine, plan, Policy, Report, Status};
use libtaskisol::SysRoot;

use super::os::nice_this_thread;
use crate::contest;

/// The policy the periodic scan applies: everything but the thread items and the partition,
/// which have events of their own (and cost a /proc scan). Public for the scale benchmark.
pub fn scan_policy(policy: &Policy) -> Policy {
    Policy {
        config: policy
            .config
            .without(&["tasks", "kthread_priority", "cgroup_partition"]),
        ..policy.clone()
    }
}

/// How long the scan thread gathers the devices that come before it plans them: each plan
/// reads the state file once (a thousand veths' originals), whatever the devices.
const DEVICES_SETTLE: Duration = Duration::from_millis(150);

/// What the main thread tells the scan thread.
pub enum Ctl {
    /// Look now (a device came or went): after 100 ms, once its driver has requested its IRQs.
    Rescan,
    /// Network devices (or their queues) came: plan and apply the items that take network
    /// devices for them alone, not the whole machine (a node starting pods makes veths all
    /// day).
    Devices(std::collections::BTreeSet<String>),
    /// Stop, before the restore.
    Stop,
}

/// What the scan thread tells the main thread.
pub enum ScanMsg {
    /// An apply that changed something, or said something.
    Report(Report),
    /// A check or an apply that failed.
    Failed(String),
    /// A value became contested, or settled ([`crate::contest`]).
    Contest(contest::Change),
    /// The contested values now.
    Contested(Vec<contest::Contested>),
}

/// The scan thread, seen from the main thread.
#[derive(Debug)]
pub struct Scanner {
    ctl: Sender<Ctl>,
    pub reports: Receiver<ScanMsg>,
    /// Readable when a report is waiting (the main thread polls it).
    pub wake: std::os::unix::net::UnixStream,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for ScanMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScanMsg")
    }
}

impl std::fmt::Debug for Ctl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ctl")
    }
}

/// The scan thread's own state.
struct Scan {
    root: SysRoot,
    scan: Policy,
    files: StateFiles,
    watch: Option<Watch>,
    contests: contest::Contests,
}

impl Scanner {
    pub fn start(
        root: SysRoot,
        policy: Policy,
        files: StateFiles,
        interval: Duration,
    ) -> std::io::Result<Scanner> {
        let (ctl, ctl_rx) = std::sync::mpsc::channel::<Ctl>();
        let (tx, reports) = std::sync::mpsc::channel();
        let (wake, notify_main) = std::os::unix::net::UnixStream::pair()?;
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
                let watch = Watch::of(&root, &scan, &files).ok();
                let mut s = Scan {
                    root,
                    scan,
                    files,
                    watch,
                    contests: contest::Contests::default(),
                };
                s.run(interval, &ctl_rx, &tx, notify_main);
            })?;
        Ok(Scanner {
            ctl,
            reports,
            wake,
            thread: Some(thread),
        })
    }

    pub fn send(&self, c: Ctl) {
        let _ = self.ctl.send(c);
    }

    pub fn stop(&mut self) {
        self.send(Ctl::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Scan {
    /// One read per watched value each check; a drifted value's target applied alone; the
    /// full compare only when the set of IRQs changed, after a uevent, or without a watch.
    /// Checks run every half interval, start to start, so a drifted value is put back within
    /// one interval; none while the watch is empty.
    fn run(
        &mut self,
        interval: Duration,
        ctl: &Receiver<Ctl>,
        tx: &Sender<ScanMsg>,
        mut notify_main: std::os::unix::net::UnixStream,
    ) {
        let period = interval / 2;
        let mut next = Instant::now() + period;
        loop {
            let mut full = false;
            // A watch of nothing (every item off) has no check to make: the thread sleeps
            // until it is told something.
            let asked = if self.watch.as_ref().is_some_and(Watch::is_empty) {
                ctl.recv().map_err(|_| RecvTimeoutError::Disconnected)
            } else {
                ctl.recv_timeout(next.saturating_duration_since(Instant::now()))
            };
            match asked {
                Ok(Ctl::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                Ok(Ctl::Rescan) => {
                    full = true;
                    std::thread::sleep(Duration::from_millis(100));
                    // A burst of uevents is one rescan.
                    while let Ok(c) = ctl.try_recv() {
                        if let Ctl::Stop = c {
                            return;
                        }
                    }
                }
                Ok(Ctl::Devices(mut names)) => {
                    // A burst of devices (a pair's two ends, their queues; a node starting
                    // pods) is one plan and one read of the state file; a rescan meanwhile
                    // covers them.
                    std::thread::sleep(DEVICES_SETTLE);
                    while let Ok(c) = ctl.try_recv() {
                        match c {
                            Ctl::Stop => return,
                            Ctl::Rescan => full = true,
                            Ctl::Devices(more) => names.extend(more),
                        }
                    }
                    if !full {
                        for msg in self.devices(names) {
                            if tx.send(msg).is_err() {
                                return;
                            }
                            let _ = notify_main.write_all(b"r");
                        }
                        continue;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    // A check that ran late moves the next one, never bunches them.
                    next = (next + period).max(Instant::now() + period / 2);
                }
            }
            for msg in self.check(full) {
                if tx.send(msg).is_err() {
                    return;
                }
                let _ = notify_main.write_all(b"r");
            }
        }
    }

    /// One check (`full`: the whole compare), and what the main thread is told of it.
    fn check(&mut self, full: bool) -> Vec<ScanMsg> {
        let drift = match &self.watch {
            Some(w) if !full => w.drift(&self.root),
            _ => Drift::IrqSet,
        };
        let now = Instant::now();
        // Contested values in their back-off are left as the other program set them.
        let contests = &self.contests;
        let free = |targets: Vec<plan::Target>| -> Vec<plan::Target> {
            targets
                .into_iter()
                .filter(|t| !contests.waiting(&t.id, now))
                .collect()
        };
        let (root, scan, files) = (&self.root, &self.scan, &self.files);
        let mut outs = Vec::new();
        match drift {
            Drift::None => {}
            Drift::Targets(targets) => {
                let targets = free(targets);
                if !targets.is_empty() {
                    outs.push(engine::apply_only(root, scan, files, targets));
                }
            }
            Drift::IrqSet => outs.push(drifted(root, scan, files).and_then(|d| {
                if d {
                    let targets = free(plan::plan(scan, root)?);
                    engine::apply_only(root, scan, files, targets)
                } else {
                    Ok(Report::default())
                }
            })),
        }
        let applied = !outs.is_empty();
        let msgs = self.messages(outs, applied, now);
        if applied {
            self.watch = Watch::of(&self.root, &self.scan, &self.files).ok();
        }
        msgs
    }

    /// The items that take network devices, for these devices only: planned, applied (the
    /// originals recorded first) and added to the watch.
    fn devices(&mut self, names: std::collections::BTreeSet<String>) -> Vec<ScanMsg> {
        let now = Instant::now();
        let (root, scan, files) = (&self.root, &self.scan, &self.files);
        let targets = match plan::plan_devices(scan, root, names) {
            Ok(t) => t,
            Err(e) => return vec![ScanMsg::Failed(e.to_string())],
        };
        let contests = &self.contests;
        let targets: Vec<plan::Target> = targets
            .into_iter()
            .filter(|t| !contests.waiting(&t.id, now))
            .collect();
        if let Some(w) = self.watch.as_mut() {
            w.add(root, &targets);
        }
        // What is right already (a device born with rps_default_mask) costs no read of the
        // state file: one read of each value here.
        let targets: Vec<plan::Target> = targets
            .into_iter()
            .filter(|t| match &t.op {
                plan::Op::Attr { path, want } => !root
                    .read_to_string(path)
                    .is_ok_and(|raw| want.matches(&raw)),
                plan::Op::Known(libtaskisol::policy::Status::AlreadyRight) => false,
                _ => true,
            })
            .collect();
        if targets.is_empty() {
            return Vec::new();
        }
        let out = engine::apply_only(root, scan, files, targets);
        self.messages(vec![out], false, now)
    }

    /// The reports of a check's applies, with the contests they changed.
    fn messages(
        &mut self,
        outs: Vec<libtaskisol::Result<Report>>,
        applied: bool,
        now: Instant,
    ) -> Vec<ScanMsg> {
        let mut msgs = Vec::new();
        for out in outs {
            match out {
                Ok(rep) => {
                    for o in rep.outcomes.iter().filter(|o| rep.written.contains(&o.id)) {
                        msgs.extend(
                            self.contests
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
        let settled = self.contests.sweep(now);
        let contests_changed = msgs.iter().any(|m| matches!(m, ScanMsg::Contest(_)))
            || !settled.is_empty()
            || applied && !self.contests.list().is_empty();
        msgs.extend(settled.into_iter().map(ScanMsg::Contest));
        if contests_changed {
            msgs.push(ScanMsg::Contested(self.contests.list()));
        }
        msgs
    }
}

/// Whether any value of `policy` differs from what it wants (read-only, no lock).
fn drifted(root: &SysRoot, policy: &Policy, files: &StateFiles) -> libtaskisol::Result<bool> {
    Ok(engine::verify(root, policy, files)?
        .outcomes
        .iter()
        .any(|o| matches!(o.status, Status::Deviates { .. })))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use libtaskisol::policy::config::Config;

    use super::*;

    /// How many times the scan thread ran so far (schedstat's timeslices), with its tid.
    fn scan_thread_runs() -> Option<(String, u64)> {
        for e in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            if comm.trim_end() == "isold-scan" {
                let stat = std::fs::read_to_string(e.path().join("schedstat")).ok()?;
                let runs = stat.split_whitespace().nth(2)?.parse().ok()?;
                return Some((e.file_name().to_string_lossy().into_owned(), runs));
            }
        }
        None
    }

    /// How many times the scan thread of `policy` (every half of a 0.2 s interval) ran over
    /// 1 s on the tree captured from the 6.12-rt guest.
    fn runs_over_a_second(items: &[&str]) -> u64 {
        let (_dir, tree) = crate::testing::captured_tree();
        let root = SysRoot::new(&tree);
        let cfg = Config::parse("isolated_cpus = \"2-3\"\n", Path::new("isold.toml")).unwrap();
        let policy = Policy::resolve(cfg, &root).unwrap().only(items);
        let files = StateFiles::default_for(&root);
        engine::apply(&root, &policy, &files).unwrap();
        let mut s = Scanner::start(root, policy, files, Duration::from_millis(200)).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let (tid, before) = scan_thread_runs().expect("the scan thread");
        std::thread::sleep(Duration::from_secs(1));
        let (tid2, after) = scan_thread_runs().expect("the scan thread");
        assert_eq!(tid, tid2, "one scan thread at a time");
        s.stop();
        after - before
    }

    /// With every item off there is nothing to check: the scan thread sleeps until it is told
    /// something, instead of waking every half interval; with one item on it checks.
    #[test]
    fn a_scan_of_nothing_sleeps_and_a_scan_of_something_checks() {
        let idle = runs_over_a_second(&[]);
        assert!(
            idle <= 1,
            "the scan thread of nothing ran {idle} times in 1 s"
        );
        let busy = runs_over_a_second(&["sysctl"]);
        assert!(
            busy >= 5,
            "the scan thread of sysctls ran {busy} times in 1 s"
        );
    }
}
