//! Task correction: threads that reach into the isolated CPUs narrowed as they appear
//! (process events: fork, exec, comm), every known thread's affinity checked every
//! `--task-interval`, or a full /proc scan where there are no events. The fast path
//! ([`TaskFixer`]) takes one task in about 12 system calls; the engine takes the rest.

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};

use libtaskisol::events::{ProcEvent, ProcEvents, Stamped};
use libtaskisol::policy::config::glob_match;
use libtaskisol::policy::fastpath::{Fix, TaskFixer};
use libtaskisol::policy::{engine, Policy, Status};
use libtaskisol::tasks::{self, Thread};
use libtaskisol::{sched, CpuSet};

use super::books::Books;
use super::os::Env;
use super::os::{give_back_memory, thread_cpu_ns};

/// How long a new thread of a running process is left before it is looked at: a program that
/// pins its threads into the isolated CPUs does so right after creating each (microseconds
/// natively, milliseconds under emulation), and isold must never narrow a thread between its
/// creation and its pin. The stress test pins up to 20 ms after creation.
pub const NEW_THREAD_GRACE: Duration = Duration::from_millis(50);

/// Threads gone since the state last lost its gone threads' originals, after which the next
/// task sweep drops them ([`engine::forget_gone_threads`]): the state of a host with churn
/// stays as large as its live narrowed threads, for one load and write per thousand exits
/// and a stat read per exit.
pub const FORGET_AFTER_EXITS: u64 = 1000;

/// Fewer exits than that are dropped this long after the last pass: once the churn stops,
/// the state holds the live narrowed threads only (at most one whole write a minute).
pub const FORGET_AFTER: Duration = Duration::from_secs(60);

/// Exited tids kept for that at most (a fork storm between two sweeps): past it, every
/// original is looked at instead.
const FORGET_TIDS_KEPT: usize = 65536;

/// Network devices removed since the state last lost gone devices' entries, after which the
/// next task sweep drops them ([`engine::forget_gone_devices`]): with `rps` on a pod's veth
/// leaves its queue masks' originals, and a node with pod churn would keep every veth it
/// ever steered. Fewer are dropped [`FORGET_AFTER`] after the last pass, as exits are.
pub const FORGET_AFTER_DEVICES: usize = 100;

/// Removed devices' names kept for that at most: past it, every device's entries are
/// looked at instead.
const FORGET_DEVICES_KEPT: usize = 4096;

/// A thread to look at (pid, tid), with the time of the event that asked for it.
type Ask = (i32, i32, Option<u64>);

#[derive(Debug)]
pub struct Tasks {
    /// The process events connector (`None`: scans instead).
    pub procs: Option<ProcEvents>,
    /// Threads known to exist (connector mode): the task sweep checks their affinity.
    known: BTreeSet<i32>,
    /// Threads the policy leaves where they are although they reach into the isolated CPUs
    /// (allow-listed, not changeable): not read again until exec, rename or exit.
    settled: HashSet<i32>,
    /// The fast path for single tasks.
    fixer: TaskFixer,
    /// kthreads forked by kthreadd, looked at once named: (when, forked at, pid, tid).
    pub new_kthreads: Vec<(Instant, Instant, i32, i32)>,
    /// New threads of running processes, looked at a moment later: (when, pid, tid, the
    /// event's time). A program that pins a thread right after creating it (DPDK, QEMU's
    /// vCPUs under libvirt) has done so by then.
    pub new_threads: Vec<(Instant, i32, i32, u64)>,
    /// Threads gone since their originals were last dropped from the state (their tids).
    pub exited: HashSet<i32>,
    /// Every thread's original is looked at the next time (a start after churn, or more
    /// exits than are worth keeping).
    pub forget_all: bool,
    /// Network devices the kernel said were removed since their entries were last dropped
    /// from the state (their names).
    pub gone_devices: BTreeSet<String>,
    /// Every network device's entries are looked at the next time (a device renamed, whose
    /// old name the event does not give; events lost; more removals than are worth keeping).
    pub forget_all_devices: bool,
    /// When the last pass that dropped gone threads' or devices' originals ran (or the
    /// start).
    last_forget: Instant,
    /// Threads that started or exec'd since the stall guard was last told (pid, tid).
    pub started: Vec<(i32, i32)>,
}

/// What a pass needs of the daemon: where, which policy, and the books to report to.
pub struct Ctx<'a> {
    pub env: &'a Env,
    pub policy: &'a Policy,
    pub books: &'a mut Books,
}

impl Tasks {
    pub fn new(fixer: TaskFixer) -> Tasks {
        Tasks {
            procs: None,
            known: BTreeSet::new(),
            settled: HashSet::new(),
            fixer,
            new_kthreads: Vec::new(),
            new_threads: Vec::new(),
            exited: HashSet::new(),
            forget_all: true,
            gone_devices: BTreeSet::new(),
            forget_all_devices: false,
            last_forget: Instant::now(),
            started: Vec::new(),
        }
    }

    /// A new policy in force: every thread is judged again.
    pub fn policy_changed(&mut self, log: &super::os::Log) {
        self.settled.clear();
        self.resync(log);
    }

    /// The fast path's memory of the state file renewed.
    pub fn resync(&mut self, log: &super::os::Log) {
        if let Err(e) = self.fixer.resync() {
            log.warn(&format!("state file: {e}"));
        }
    }

    /// The threads known after the first apply: their ids only (a directory listing per
    /// process, no file of theirs read).
    pub fn learn_all(&mut self, env: &Env) {
        if let Ok(pids) = tasks::pids(&env.root) {
            self.known = pids
                .into_iter()
                .flat_map(|pid| libtaskisol::procfs::thread_ids(&env.root, pid).unwrap_or_default())
                .collect();
        }
    }

    /// Whether a thread with this affinity needs reading: it reaches into the isolated CPUs
    /// without being inside them (a workload).
    fn suspicious(policy: &Policy, aff: &CpuSet) -> bool {
        !aff.is_disjoint(&policy.isolated) && !aff.is_subset(&policy.isolated)
    }

    /// Read these threads and apply the thread items to them; `since`: when the event that
    /// asked for it was read, for the log; `stamps`: the event time of threads that are
    /// there in answer to an event.
    fn fix_threads(
        &mut self,
        cx: &mut Ctx,
        ids: &[(i32, i32)],
        since: Option<(Instant, u64)>,
        stamps: &[(i32, u64)],
    ) {
        let log = cx.env.log;
        let mut threads: Vec<Thread> = Vec::new();
        for &(pid, tid) in ids {
            match tasks::read_thread(&cx.env.root, pid, tid) {
                Ok(Some(t)) => threads.push(t),
                Ok(None) => {}
                Err(e) => log.debug(&format!("task {tid}: {e}")),
            }
        }
        if threads.is_empty() {
            return;
        }
        let rep = match engine::apply_threads(&cx.env.root, cx.policy, &cx.env.files, &threads) {
            Ok(rep) => rep,
            Err(e) => return log.warn(&format!("tasks: {e}")),
        };
        for o in &rep.outcomes {
            if matches!(
                o.status,
                Status::LeftAlone { .. } | Status::NotChangeable { .. } | Status::OwnerSet { .. }
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
            // Narrowed by isold: a reaction (an owner's pin right after the write is not).
            if rep
                .outcomes
                .iter()
                .any(|o| o.id.starts_with(&prefix) && matches!(o.status, Status::Changed { .. }))
            {
                cx.books.reacted(at);
            }
        }
        if let Some((t, cpu)) = since.filter(|_| !rep.written.is_empty()) {
            log.debug(&format!(
                "{} thread(s) corrected {:.2} ms after the event was read ({:.2} ms of isold's CPU time)",
                rep.written.len(),
                t.elapsed().as_secs_f64() * 1000.0,
                (thread_cpu_ns().saturating_sub(cpu)) as f64 / 1e6
            ));
        }
        cx.books.take_report(&rep, false);
    }

    /// The fast path for one task (see libtaskisol::policy::fastpath); `true` when it must
    /// take the general path instead.
    fn fix_one(
        &mut self,
        cx: &mut Ctx,
        (pid, tid): (i32, i32),
        since: Option<(Instant, u64)>,
        event_ns: Option<u64>,
    ) -> bool {
        let log = cx.env.log;
        match self.fixer.fix(&cx.env.root, cx.policy, pid, tid) {
            Ok(Fix::Fine) | Ok(Fix::Gone) => false,
            Ok(Fix::Settled(why)) => {
                self.settled.insert(tid);
                log.debug(&format!("task {tid}: left alone: {why}"));
                false
            }
            // Its owner's value, set while isold changed it: it stands, and is no correction.
            Ok(Fix::Contested { label, now, why }) => {
                self.settled.insert(tid);
                cx.books.owner_pin(&label, &now, &why);
                false
            }
            Ok(Fix::Changed { label, from, to }) => {
                if let Some(at) = event_ns {
                    cx.books.reacted(at);
                }
                if let Some((t, cpu)) = since {
                    log.debug(&format!(
                        "{label} corrected {:.2} ms after the event was read ({:.2} ms of isold's CPU time)",
                        t.elapsed().as_secs_f64() * 1000.0,
                        (thread_cpu_ns().saturating_sub(cpu)) as f64 / 1e6
                    ));
                }
                cx.books
                    .task_corrected(&label, &format!("changed: {from} -> {to}"));
                false
            }
            Ok(Fix::UseEngine) => true,
            Err(e) => {
                log.warn(&format!("task {tid}: {e}"));
                false
            }
        }
    }

    /// Tasks for the general path, then the fast path's memory of the state file renewed.
    fn fix_with_engine(&mut self, cx: &mut Ctx, ids: &[(i32, i32)], stamps: &[(i32, u64)]) {
        if ids.is_empty() {
            return;
        }
        self.fix_threads(cx, ids, None, stamps);
        self.resync(&cx.env.log);
    }

    /// The threads of `asks` through the fast path, those it cannot take (and `engine`)
    /// through the engine; `since`: when their events were read, for the log.
    fn fix_asked(
        &mut self,
        cx: &mut Ctx,
        asks: Vec<Ask>,
        mut engine: Vec<(i32, i32)>,
        since: Option<(Instant, u64)>,
    ) {
        let mut stamps = Vec::new();
        for (pid, tid, at_ns) in asks {
            if engine.contains(&(pid, tid)) || self.settled.contains(&tid) {
                continue;
            }
            if self.fix_one(cx, (pid, tid), since, at_ns) {
                engine.push((pid, tid));
                stamps.extend(at_ns.map(|at| (tid, at)));
            }
        }
        self.fix_with_engine(cx, &engine, &stamps);
    }

    /// The process events waiting, each thread they name checked; `true` when events were
    /// lost (the caller scans every task).
    pub fn on_proc_events(&mut self, cx: &mut Ctx) -> bool {
        let Some(p) = self.procs.as_mut() else {
            return false;
        };
        let read_at = (Instant::now(), thread_cpu_ns());
        let batch = match p.read() {
            Ok(b) => b,
            Err(e) => {
                cx.env.log.warn(&format!("process events: {e}"));
                return false;
            }
        };
        let mut check: Vec<Ask> = Vec::new();
        let mut engine: Vec<(i32, i32)> = Vec::new();
        for Stamped { at_ns, event } in batch.events {
            cx.env.log.trace(&format!("event {event:?}"));
            self.on_event(cx, event, at_ns, &mut check, &mut engine);
        }
        self.fix_asked(cx, check, engine, Some(read_at));
        batch.lost
    }

    /// One process event: the thread it names to check now (`check`), through the engine
    /// (`engine`), later, or forgotten.
    fn on_event(
        &mut self,
        cx: &mut Ctx,
        event: ProcEvent,
        at_ns: u64,
        check: &mut Vec<Ask>,
        engine: &mut Vec<(i32, i32)>,
    ) {
        let rules = cx.policy.kthread_priority();
        match event {
            ProcEvent::Fork {
                parent_tgid,
                child_pid,
                child_tgid,
            } => {
                self.known.insert(child_pid);
                if self.started.len() < 4096 {
                    self.started.push((child_tgid, child_pid));
                }
                if parent_tgid == 2 {
                    // A kthread: kthreadd forks it, then its creator names it. Its
                    // priority rule is looked up once it has its name.
                    if !rules.is_empty() && self.new_kthreads.len() < 4096 {
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
                    check.push((child_tgid, child_pid, Some(at_ns)));
                }
            }
            ProcEvent::Exec { pid, tgid } => {
                self.settled.remove(&pid);
                if self.started.len() < 4096 {
                    self.started.push((tgid, pid));
                }
                check.push((tgid, pid, Some(at_ns)));
            }
            ProcEvent::Comm { pid, tgid, comm } => {
                self.settled.remove(&pid);
                // Only a name a priority rule matches needs the general path; the fast
                // path reads the name itself for the allow-list. (An exec renames its
                // task too: it must not cost the general path.)
                if rules.iter().any(|(p, _)| glob_match(p, &comm)) {
                    engine.push((tgid, pid));
                } else {
                    check.push((tgid, pid, Some(at_ns)));
                }
            }
            ProcEvent::Exit { pid, .. } => {
                self.exited(pid);
                self.known.remove(&pid);
                self.settled.remove(&pid);
                self.new_threads.retain(|t| t.2 != pid);
                cx.books.forget_thread(pid);
            }
        }
    }

    /// New threads whose grace is over: checked as a process event's task is.
    pub fn due_threads(&mut self, cx: &mut Ctx, now: Instant) {
        let due = take_due(&mut self.new_threads, now, |t| t.0);
        let asks = due
            .into_iter()
            .map(|(_, pid, tid, at_ns)| (pid, tid, Some(at_ns)))
            .collect();
        self.fix_asked(cx, asks, Vec::new(), None);
    }

    /// New kthreads whose names are due to be known: their priority rules applied.
    /// A kthread still called `kthreadd` has not been named by its creator yet (naming sends
    /// no process event): it is looked at again 100 ms later, for 5 s at most.
    pub fn due_kthreads(&mut self, cx: &mut Ctx, now: Instant) {
        let due = take_due(&mut self.new_kthreads, now, |t| t.0);
        let mut later = std::mem::take(&mut self.new_kthreads);
        let mut ids = Vec::new();
        for (_, forked, pid, tid) in due {
            let comm = cx
                .env
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
        self.fix_with_engine(cx, &ids, &[]);
    }

    /// Every known thread's affinity by system call; the suspicious ones read and fixed.
    pub fn sweep(&mut self, cx: &mut Ctx) {
        if self.procs.is_none() || !cx.env.root.is_host() {
            // No event stream: the full scan is the only way to see new tasks.
            self.full_scan(cx);
            return;
        }
        let mut read = Vec::new();
        let mut gone = Vec::new();
        for &tid in &self.known {
            if self.settled.contains(&tid) {
                continue;
            }
            match sched::get_affinity(tid) {
                Ok(a) if Tasks::suspicious(cx.policy, &a) => read.push(tid),
                Ok(_) => {}
                Err(_) => gone.push(tid),
            }
        }
        for tid in gone {
            self.known.remove(&tid);
        }
        let mut asks = Vec::new();
        for tid in read {
            // The process of a thread: the Tgid line of its status (one read per suspicious
            // thread).
            let tgid = cx
                .env
                .root
                .read_to_string(format!("/proc/{tid}/status"))
                .ok()
                .and_then(|st| {
                    libtaskisol::procfs::status_field(&st, "Tgid")?
                        .trim()
                        .parse()
                        .ok()
                });
            if let Some(tgid) = tgid {
                asks.push((tgid, tid, None));
            }
        }
        self.fix_asked(cx, asks, Vec::new(), None);
    }

    /// Every thread read from /proc and the thread items applied (start, lost events, no
    /// connector).
    pub fn full_scan(&mut self, cx: &mut Ctx) {
        let threads = match tasks::all_threads_with(&cx.env.root, tasks::Detail::NoSwitches) {
            Ok(t) => t,
            Err(e) => return cx.env.log.warn(&format!("tasks: {e}")),
        };
        let known: BTreeSet<i32> = threads.iter().map(|t| t.tid).collect();
        let gone: Vec<i32> = self.known.difference(&known).copied().collect();
        for tid in gone {
            self.exited(tid);
        }
        self.known = known;
        self.settled.retain(|t| self.known.contains(t));
        match engine::apply_threads(&cx.env.root, cx.policy, &cx.env.files, &threads) {
            Ok(rep) => {
                cx.books.take_report(&rep, false);
            }
            Err(e) => cx.env.log.warn(&format!("tasks: {e}")),
        }
        drop(threads);
        give_back_memory();
    }

    /// After [`FORGET_AFTER_EXITS`] exits or [`FORGET_AFTER_DEVICES`] removed network
    /// devices, or any of them [`FORGET_AFTER`] after the last pass, the originals of
    /// threads and the entries of devices that are gone dropped from the state (restore
    /// would find them gone), the fast path's memory of it renewed.
    pub fn forget_gone(&mut self, cx: &mut Ctx, now: Instant) {
        let pending =
            !self.exited.is_empty() || !self.gone_devices.is_empty() || self.forget_all_devices;
        let due = self.forget_all
            || self.exited.len() as u64 >= FORGET_AFTER_EXITS
            || self.gone_devices.len() >= FORGET_AFTER_DEVICES
            || (pending && now.duration_since(self.last_forget) >= FORGET_AFTER);
        if !due {
            return;
        }
        let (all, exited) = (self.forget_all, std::mem::take(&mut self.exited));
        let all_devices = all || self.forget_all_devices;
        let gone_devices = std::mem::take(&mut self.gone_devices);
        self.forget_all = false;
        self.forget_all_devices = false;
        self.last_forget = now;
        let log = cx.env.log;
        let mut dropped = false;
        if all || !exited.is_empty() {
            match engine::forget_gone_threads(&cx.env.root, &cx.env.files, |tid| {
                all || exited.contains(&tid)
            }) {
                Ok(0) => {}
                Ok(n) => {
                    log.info(&format!(
                        "state: the originals of {n} thread(s) that are gone dropped"
                    ));
                    dropped = true;
                }
                Err(e) => log.warn(&format!("state: dropping gone threads' originals: {e}")),
            }
        }
        if all_devices || !gone_devices.is_empty() {
            match engine::forget_gone_devices(&cx.env.root, &cx.env.files, |dev| {
                all_devices || gone_devices.contains(dev)
            }) {
                Ok(0) => {}
                Ok(n) => {
                    log.info(&format!(
                        "state: {n} original(s) of network devices that are gone dropped"
                    ));
                    dropped = true;
                }
                Err(e) => log.warn(&format!("state: dropping gone devices' originals: {e}")),
            }
        }
        if dropped {
            self.resync(&log);
            give_back_memory();
        }
    }

    /// Network device `name` removed (the kernel's `remove` uevent), for
    /// [`Tasks::forget_gone`].
    pub fn device_removed(&mut self, name: &str) {
        if self.gone_devices.len() < FORGET_DEVICES_KEPT {
            self.gone_devices.insert(name.to_string());
        } else {
            self.forget_all_devices = true;
        }
    }

    /// A thread that exited, for [`Tasks::forget_gone`].
    fn exited(&mut self, tid: i32) {
        if self.exited.len() < FORGET_TIDS_KEPT {
            self.exited.insert(tid);
        } else {
            self.forget_all = true;
        }
    }

    /// When the next new thread or kthread is due.
    pub fn next_due(&self) -> Option<Instant> {
        let k = self.new_kthreads.iter().map(|k| k.0).min();
        let t = self.new_threads.iter().map(|t| t.0).min();
        k.into_iter().chain(t).min()
    }
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
    use crate::status::DaemonStatus;
    use libtaskisol::policy::config::Config;
    use libtaskisol::policy::fastpath::Step;
    use libtaskisol::policy::state::{journal_path, StateFiles};
    use libtaskisol::SysRoot;
    use std::path::{Path, PathBuf};

    use super::super::os::{monotonic_ns, Log};

    /// A daemon's task side on the tree captured from the 6.12-rt guest, the policy applied
    /// once with thread 193 (`sh`) on 0-1 (nothing of it recorded).
    struct Fake {
        _dir: tempfile::TempDir,
        tree: PathBuf,
        env: Env,
        policy: Policy,
        books: Books,
        tasks: Tasks,
    }

    fn fake() -> Fake {
        let (dir, tree) = crate::testing::captured_tree();
        let root = SysRoot::new(&tree);
        set_affinity(&tree, "0-1");
        let cfg = Config::parse("isolated_cpus = \"2-3\"\n", Path::new("isold.toml")).unwrap();
        let policy = Policy::resolve(cfg, &root).unwrap();
        let files = StateFiles::default_for(&root);
        engine::apply(&root, &policy, &files).unwrap();
        let log = Log {
            verbose: 0,
            journal: false,
        };
        let books = Books::new(DaemonStatus::default(), files.runtime.clone(), log);
        let mut tasks = Tasks::new(TaskFixer::new(&files.runtime));
        tasks.resync(&log);
        Fake {
            _dir: dir,
            tree,
            env: Env { root, files, log },
            policy,
            books,
            tasks,
        }
    }

    /// Thread 193 given the affinity `cpus`, as a task widening itself.
    fn set_affinity(tree: &Path, cpus: &str) {
        let p = tree.join("proc/193/task/193/status");
        let text = std::fs::read_to_string(&p).unwrap();
        let out: Vec<String> = text
            .lines()
            .map(|l| {
                if l.starts_with("Cpus_allowed_list:") {
                    format!("Cpus_allowed_list:\t{cpus}")
                } else {
                    l.to_string()
                }
            })
            .collect();
        std::fs::write(&p, out.join("\n") + "\n").unwrap();
    }

    impl Fake {
        fn set_affinity(&self, cpus: &str) {
            set_affinity(&self.tree, cpus);
        }

        fn affinity(&self) -> String {
            tasks::read_thread(&self.env.root, 193, 193)
                .unwrap()
                .unwrap()
                .affinity
                .to_string()
        }

        /// Process events as one batch read from the connector, as `on_proc_events` takes
        /// them.
        fn events(&mut self, events: Vec<ProcEvent>) {
            let mut cx = Ctx {
                env: &self.env,
                policy: &self.policy,
                books: &mut self.books,
            };
            let (mut check, mut engine) = (Vec::new(), Vec::new());
            for e in events {
                self.tasks
                    .on_event(&mut cx, e, monotonic_ns(), &mut check, &mut engine);
            }
            self.tasks.fix_asked(&mut cx, check, engine, None);
        }

        /// Process exit events of `n` threads from tid `from` on.
        fn exits(&mut self, from: i32, n: i32) {
            self.events(
                (from..from + n)
                    .map(|pid| ProcEvent::Exit { pid, tgid: pid })
                    .collect(),
            );
        }

        /// 193 exec'd.
        fn exec_193(&mut self) {
            self.events(vec![ProcEvent::Exec {
                pid: 193,
                tgid: 193,
            }]);
        }

        /// 193 widened itself and exec'd: narrowed and its original recorded.
        fn exec_wide_193(&mut self) {
            self.set_affinity("0-3");
            self.exec_193();
        }

        /// A task sweep's drop of gone threads' originals, at `at`.
        fn forget(&mut self, at: Instant) {
            let mut cx = Ctx {
                env: &self.env,
                policy: &self.policy,
                books: &mut self.books,
            };
            self.tasks.forget_gone(&mut cx, at);
        }

        /// The general path for these threads, as the fast path hands them over.
        fn fix_threads(&mut self, ids: &[(i32, i32)], stamps: &[(i32, u64)]) {
            let mut cx = Ctx {
                env: &self.env,
                policy: &self.policy,
                books: &mut self.books,
            };
            self.tasks.fix_threads(&mut cx, ids, None, stamps);
        }

        fn corrected(&self) -> u64 {
            self.books
                .status
                .corrections
                .get("tasks")
                .copied()
                .unwrap_or(0)
        }

        fn reactions(&mut self) -> u64 {
            self.books.save_status();
            self.books
                .status
                .task_reaction
                .as_ref()
                .map_or(0, |r| r.count)
        }

        fn journal_lines(&self) -> usize {
            std::fs::read_to_string(journal_path(&self.env.files.runtime))
                .map(|t| t.lines().count())
                .unwrap_or(0)
        }

        fn state_inode(&self) -> u64 {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(&self.env.files.runtime).unwrap().ino()
        }
    }

    /// A task that widened itself and exec'd is narrowed in answer to the event by the fast
    /// path (one journal line, the state file not rewritten), counted as a correction and as
    /// a reaction; the fork and exec of the same batch cost one correction.
    #[test]
    fn a_wide_task_is_narrowed_at_its_exec_by_the_fast_path() {
        let mut f = fake();
        let steps = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = steps.clone();
        f.tasks
            .fixer
            .between_steps(move |step, tid| seen.lock().unwrap().push((step, tid)));
        let (lines, inode) = (f.journal_lines(), f.state_inode());
        f.set_affinity("0-3");
        f.events(vec![
            ProcEvent::Fork {
                parent_tgid: 1,
                child_pid: 193,
                child_tgid: 193,
            },
            ProcEvent::Exec {
                pid: 193,
                tgid: 193,
            },
        ]);
        assert_eq!(f.affinity(), "0-1");
        assert_eq!(f.corrected(), 1);
        assert_eq!(f.reactions(), 1);
        assert_eq!(f.journal_lines(), lines + 1, "its original journaled");
        assert_eq!(f.state_inode(), inode, "no whole write of the state");
        assert_eq!(
            *steps.lock().unwrap(),
            [(Step::Recorded, 193), (Step::Written, 193)],
            "the fast path took it"
        );
        // Already narrow: an exec is looked at and nothing is corrected.
        f.exec_193();
        assert_eq!((f.corrected(), f.reactions()), (1, 1));
    }

    /// When the state file is not the one the fast path knows (rewritten by someone else),
    /// the task is narrowed by the general path, still counted and timed.
    #[test]
    fn a_task_the_fast_path_hands_over_is_narrowed_by_the_general_path() {
        let mut f = fake();
        let state = f.env.files.runtime.clone();
        let copy = state.with_extension("copy");
        std::fs::copy(&state, &copy).unwrap();
        std::fs::rename(&copy, &state).unwrap();
        f.exec_wide_193();
        assert_eq!(f.affinity(), "0-1");
        assert_eq!(f.corrected(), 1);
        assert_eq!(f.reactions(), 1);
        // The fast path knows the state file again: the next one is its.
        let lines = f.journal_lines();
        f.set_affinity("1-3");
        f.exec_193();
        assert_eq!(f.affinity(), "1", "the isolated CPUs taken off");
        assert_eq!(
            f.journal_lines(),
            lines,
            "recorded already: nothing to journal"
        );
        assert_eq!(f.corrected(), 2);
    }

    fn has_original_of_193(f: &Fake) -> bool {
        libtaskisol::policy::state::State::load(&f.env.files.runtime)
            .unwrap()
            .is_some_and(|st| st.entries().iter().any(|e| e.id.starts_with("task:193:")))
    }

    /// A thread narrowed, then gone: its original leaves the state once a thousand threads
    /// have exited, its own exit among them (at the first sweep after a start every
    /// original is looked at).
    #[test]
    fn the_originals_of_gone_threads_leave_the_state_every_thousand_exits() {
        let mut f = fake();
        f.exec_wide_193();
        assert!(has_original_of_193(&f));
        let at = f.tasks.last_forget;
        // Still there: kept.
        f.forget(at);
        assert!(has_original_of_193(&f));
        assert!(!f.tasks.forget_all && f.tasks.exited.is_empty());
        std::fs::remove_dir_all(f.tree.join("proc/193")).unwrap();
        // A thousand other threads exit: only their originals are looked for.
        f.exits(100_000, FORGET_AFTER_EXITS as i32);
        f.forget(at);
        assert!(has_original_of_193(&f), "193's exit was not seen");
        assert!(f.tasks.exited.is_empty());
        // 193 and 998 others: not yet.
        f.exits(193, 1);
        f.exits(200_000, FORGET_AFTER_EXITS as i32 - 2);
        f.forget(at);
        assert!(has_original_of_193(&f), "not yet: 999 exits");
        f.exits(300_000, 1);
        f.forget(at);
        assert!(!has_original_of_193(&f), "dropped after 1000 exits");
        assert!(f.tasks.exited.is_empty());
    }

    /// A daemon started after threads it narrowed exited (while it was stopped) drops their
    /// originals at its first sweep, without their exit events.
    #[test]
    fn a_start_drops_the_originals_of_threads_gone_meanwhile() {
        let mut f = fake();
        f.exec_wide_193();
        assert!(has_original_of_193(&f));
        std::fs::remove_dir_all(f.tree.join("proc/193")).unwrap();
        f.tasks = Tasks::new(TaskFixer::new(&f.env.files.runtime));
        f.forget(Instant::now());
        assert!(!has_original_of_193(&f));
    }

    /// Fewer than a thousand exits are dropped a minute after the last pass: once the churn
    /// stops, the state keeps no gone thread's original.
    #[test]
    fn a_few_exits_are_dropped_a_minute_after_the_last_pass() {
        let mut f = fake();
        f.exec_wide_193();
        // The first pass (every original, at the start's first sweep) half a minute in.
        let t0 = Instant::now() + Duration::from_secs(30);
        f.forget(t0);
        std::fs::remove_dir_all(f.tree.join("proc/193")).unwrap();
        f.exits(193, 1);
        f.forget(t0 + FORGET_AFTER - Duration::from_secs(1));
        assert!(has_original_of_193(&f), "not a minute yet");
        f.forget(t0 + FORGET_AFTER);
        assert!(!has_original_of_193(&f), "a minute after the last pass");
        assert!(f.tasks.exited.is_empty());
    }

    /// A veth the daemon steered (`rps` on, its queue masks' originals recorded) and then
    /// removed: its entries leave the state at the first sweep after its `remove` event and
    /// FORGET_AFTER, or once FORGET_AFTER_DEVICES devices were removed; a device still there
    /// keeps its entries.
    #[test]
    fn the_entries_of_removed_devices_leave_the_state() {
        let mut f = fake();
        let cfg = Config::parse(
            "isolated_cpus = \"2-3\"\n[items]\nrps = true\n",
            Path::new("isold.toml"),
        )
        .unwrap();
        f.policy = Policy::resolve(cfg, &f.env.root).unwrap();
        for (name, ifindex) in [("vethgone", 7), ("vethstay", 8)] {
            let dev = f.tree.join("sys/devices/virtual/net").join(name);
            std::fs::create_dir_all(dev.join("queues/rx-0")).unwrap();
            std::fs::write(dev.join("ifindex"), format!("{ifindex}\n")).unwrap();
            std::fs::write(dev.join("queues/rx-0/rps_cpus"), "0\n").unwrap();
            std::fs::create_dir_all(f.tree.join("sys/class/net")).unwrap();
            std::os::unix::fs::symlink(
                format!("../../devices/virtual/net/{name}"),
                f.tree.join("sys/class/net").join(name),
            )
            .unwrap();
        }
        let names = ["vethgone", "vethstay"].map(String::from).into();
        let targets =
            libtaskisol::policy::plan::plan_devices(&f.policy, &f.env.root, names).unwrap();
        engine::apply_only(&f.env.root, &f.policy, &f.env.files, targets).unwrap();
        let has = |f: &Fake, dev: &str| {
            libtaskisol::policy::state::State::load(&f.env.files.runtime)
                .unwrap()
                .is_some_and(|st| st.has(&format!("rps:{dev}:rx-0")))
        };
        assert!(has(&f, "vethgone") && has(&f, "vethstay"));
        let t0 = Instant::now();
        f.forget(t0);
        assert!(
            has(&f, "vethgone"),
            "not removed yet: the start's pass keeps it"
        );
        std::fs::remove_file(f.tree.join("sys/class/net/vethgone")).unwrap();
        f.tasks.device_removed("vethgone");
        f.forget(t0 + FORGET_AFTER - Duration::from_secs(1));
        assert!(has(&f, "vethgone"), "not a minute yet");
        f.forget(t0 + FORGET_AFTER);
        assert!(!has(&f, "vethgone"), "a minute after the last pass");
        assert!(has(&f, "vethstay"));
        assert!(f.tasks.gone_devices.is_empty());
        // A burst of removals is dropped at once.
        let t1 = t0 + FORGET_AFTER;
        std::fs::remove_file(f.tree.join("sys/class/net/vethstay")).unwrap();
        for n in 0..FORGET_AFTER_DEVICES - 1 {
            f.tasks.device_removed(&format!("veth{n}"));
        }
        f.forget(t1);
        assert!(has(&f, "vethstay"), "its removal not seen");
        f.tasks.device_removed("vethstay");
        f.forget(t1);
        assert!(!has(&f, "vethstay"), "{FORGET_AFTER_DEVICES} removals");
    }

    /// The exited tids kept for the next drop are bounded: past the bound, every original
    /// is looked at instead.
    #[test]
    fn exited_tids_are_kept_up_to_a_bound() {
        let mut f = fake();
        f.tasks.forget_all = false;
        f.exits(1, FORGET_TIDS_KEPT as i32);
        assert_eq!(f.tasks.exited.len(), FORGET_TIDS_KEPT);
        assert!(!f.tasks.forget_all);
        f.exits(1_000_000, 1);
        assert_eq!(f.tasks.exited.len(), FORGET_TIDS_KEPT);
        assert!(f.tasks.forget_all);
    }

    /// Only threads isold narrowed count as reactions to their events: a thread asked for
    /// and gone, or not changed, does not, whatever else the same pass changed.
    #[test]
    fn only_threads_isold_narrowed_are_reactions() {
        let mut f = fake();
        f.set_affinity("0-3");
        let at = monotonic_ns();
        f.fix_threads(&[(193, 193), (4242, 4242)], &[(193, at), (4242, at)]);
        assert_eq!(f.affinity(), "0-1");
        assert_eq!(f.reactions(), 1);
        // Narrow already: read, not changed, not a reaction.
        f.fix_threads(&[(193, 193)], &[(193, at)]);
        assert_eq!(f.reactions(), 1);
    }

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
}
