//! The daemon's books: what it corrected, what it found it cannot change, how fast it
//! answered, what it publishes (the status file, the metrics). Every room reports here; a
//! value reported the same way every scan is logged once.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use libtaskisol::audit::Scope;
use libtaskisol::policy::{Policy, Report, Status};

use super::os::{monotonic_ns, now_s, Log};
use crate::contest;
use crate::metrics::Metrics;
use crate::status::{Correction, DaemonStatus, OwnerPins, Reaction, SetAside, REACTIONS_KEPT};

/// `[metrics]`: what is published, with the scope its health samples use (renewed when the
/// policy changes).
pub type Published = (Arc<Metrics>, Arc<Mutex<Scope>>);

#[derive(Debug)]
pub struct Books {
    pub status: DaemonStatus,
    status_file: PathBuf,
    /// The runtime state file: its journal's set-aside lines are in the status.
    state_file: PathBuf,
    log: Log,
    /// Last status word per target id of a problem, so that a value reported the same way
    /// every scan is logged once.
    last_word: BTreeMap<String, &'static str>,
    /// The status file is behind.
    pub dirty: bool,
    /// Task corrections not logged yet, and the last one.
    pub tasks_unlogged: u64,
    tasks_last: String,
    /// The last reaction times to process events (event to read back), nanoseconds, and how
    /// many were measured in all.
    reactions: VecDeque<u64>,
    reactions_count: u64,
    /// The contested values of the scan thread.
    pub scan_contested: Vec<contest::Contested>,
    pub metrics: Option<Published>,
    /// Each service's CPU time at the last sweep.
    cpu: super::cpu::Meter,
}

impl Books {
    pub fn new(status: DaemonStatus, state_file: PathBuf, log: Log) -> Books {
        Books {
            status,
            status_file: crate::status::status_path(&state_file),
            state_file,
            log,
            last_word: BTreeMap::new(),
            dirty: false,
            tasks_unlogged: 0,
            tasks_last: String::new(),
            reactions: VecDeque::with_capacity(REACTIONS_KEPT),
            reactions_count: 0,
            scan_contested: Vec::new(),
            metrics: None,
            cpu: Default::default(),
        }
    }

    pub fn save_status(&mut self) {
        self.status.updated = now_s();
        self.status.task_reaction = Reaction::of(&self.reactions, self.reactions_count);
        let text = serde_json::to_string_pretty(&self.status).expect("status serializes") + "\n";
        // Readable by anyone who can enter the directory (0700 under the unit: root).
        if let Err(e) =
            libtaskisol::policy::files::replace(&self.status_file, text.as_bytes(), Some(0o644))
        {
            self.log
                .warn(&format!("cannot write {}: {e}", self.status_file.display()));
        }
    }

    /// Where the noise ledger's file goes: next to the status file.
    pub fn noise_file(&self) -> PathBuf {
        crate::status::noise_path(&self.state_file)
    }

    /// The status file removed (the daemon stops).
    pub fn remove_status(&self) {
        let _ = std::fs::remove_file(&self.status_file);
    }

    /// Log and count what an apply (start, scan, event) changed. `initial`: an apply that
    /// puts a policy in force, whose changes are not corrections.
    pub fn take_report(&mut self, rep: &Report, initial: bool) -> usize {
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
            if let Status::OwnerSet { now, reason } = &o.status {
                self.owner_pin(&o.label, now, reason);
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
        // A report says set-aside lines once (they leave the journal with its write): its
        // note is the log's line, and the status counts what the file keeps now.
        for note in &rep.notes {
            self.log.info(note);
        }
        if rep.set_aside > 0 {
            self.refresh_set_aside(false);
        }
        n
    }

    /// The set-aside lines the state directory keeps, for the status; `at_start`: said in
    /// the log too, once (lines set aside before this daemon, not looked at yet).
    pub fn refresh_set_aside(&mut self, at_start: bool) {
        let now = libtaskisol::policy::state::set_aside_kept(&self.state_file)
            .filter(|&n| n > 0)
            .map(|lines| SetAside {
                lines,
                file: libtaskisol::policy::state::set_aside_path(&self.state_file)
                    .display()
                    .to_string(),
            });
        if at_start {
            if let Some(a) = &now {
                self.log.warn(&format!(
                    "{}: {} line(s) of the state journal were set aside (not whole entries: a write cut short or changed); look at them, then remove the file",
                    a.file, a.lines
                ));
            }
        }
        if now != self.status.set_aside {
            self.status.set_aside = now;
            self.dirty = true;
        }
    }

    /// A new policy in force: problems are logged again when seen again.
    pub fn policy_changed(&mut self, config_path: &std::path::Path, policy: &Policy) {
        self.last_word.clear();
        self.status.config = config_path.display().to_string();
        self.status.preset = policy.preset().name().to_string();
        self.status.isolated = policy.isolated.to_string();
        self.status.housekeeping = policy.housekeeping.to_string();
        self.status.on_stop = policy.on_stop().name().into();
        if let Some((m, scope)) = &self.metrics {
            m.policy(policy);
            *scope.lock().unwrap_or_else(|e| e.into_inner()) = crate::metrics::scope_of(policy);
        }
    }

    /// What is kept per thread for the log and the status, dropped when the thread exits:
    /// the memory of a long run stays bounded by the threads alive.
    pub fn forget_thread(&mut self, tid: i32) {
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

    /// Count and log one correction; the status file follows within a scan interval.
    /// Tasks are logged one by one only with -v, else summed up every 10 s: a burst of wide
    /// tasks must not become a burst of journal writes on the housekeeping CPUs.
    pub fn corrected(&mut self, item: &str, label: &str, what: &str) {
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

    /// A task corrected by the fast path (which has no report).
    pub fn task_corrected(&mut self, label: &str, what: &str) {
        if let Some((m, _)) = &self.metrics {
            m.corrected("tasks", None);
        }
        self.corrected("tasks", label, what);
    }

    /// Each service's CPU time now and since the last call, for the status and the metrics.
    pub fn service_figures(&mut self) {
        let r = self.cpu.read(std::time::Instant::now());
        if let Some((m, _)) = &self.metrics {
            m.service_cpu(&r.grown);
        }
        self.status.services = r.services;
        self.status.cpu_s = r.cpu_s;
        self.status.cpu_ms_per_s = r.ms_per_s;
        self.status.cpu_window_s = r.window_s;
        self.dirty = true;
    }

    /// A thread left on an affinity its owner set while isold narrowed it (`why`: when
    /// isold found it so): counted, never a correction. Logged with -v only: a program that
    /// pins its threads as it makes them can do so by the thousand.
    pub fn owner_pin(&mut self, label: &str, now: &str, why: &str) {
        self.log
            .debug(&format!("{label}: left on {now}, its owner's: {why}"));
        if let Some((m, _)) = &self.metrics {
            m.owner_pin();
        }
        let p = self
            .status
            .owner_pins
            .get_or_insert_with(OwnerPins::default);
        p.count += 1;
        p.last = format!("{label} on CPUs {now}, {why}");
        self.dirty = true;
    }

    /// A container's claim refused: said, and counted by `reason`.
    pub fn refused(&mut self, reason: &str, msg: &str) {
        self.log.warn(msg);
        *self
            .status
            .claims_refused
            .entry(reason.to_string())
            .or_default() += 1;
        if let Some((m, _)) = &self.metrics {
            m.claim_refused(reason);
        }
        self.dirty = true;
    }

    /// The summary line of the task corrections since the last one.
    pub fn log_tasks(&mut self) {
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
    pub fn reacted(&mut self, at_ns: u64) {
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

    /// The status's contested values: the scan thread's and `partition`'s.
    pub fn refresh_contested(&mut self, partition: Vec<contest::Contested>) {
        let mut all = self.scan_contested.clone();
        all.extend(partition);
        if let Some((m, _)) = &self.metrics {
            m.contested(all.len());
        }
        if all != self.status.contested {
            self.status.contested = all;
            self.dirty = true;
        }
    }

    /// A value became contested (said once, as a warning) or settled.
    pub fn contest_changed(&mut self, change: &contest::Change) {
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

    /// Whether the policy holds, for the metrics: the last check's word, and nothing
    /// contested.
    pub fn holds(&self, checked_ok: bool) {
        if let Some((m, _)) = &self.metrics {
            m.holds(checked_ok && self.status.contested.is_empty());
        }
    }

    /// The policy's files that wait for a reboot, a module load or a daemon restart, for the
    /// status (a few reads: no task scan).
    pub fn refresh_waiting(&mut self, root: &libtaskisol::SysRoot, policy: &Policy) {
        let now: Vec<String> = match libtaskisol::policy::engine::waiting(root, policy) {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use libtaskisol::policy::config::{Config, CpuSpec};
    use libtaskisol::policy::preset::Preset;
    use libtaskisol::policy::Outcome;
    use libtaskisol::CpuSet;

    /// A thread its owner pinned while isold narrowed it is counted as the owner's (status,
    /// its text, the metric), never as a correction; the thread isold did narrow is one.
    #[test]
    fn an_owners_pin_is_counted_apart_from_corrections() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log {
            verbose: 0,
            journal: false,
        };
        let mut books = Books::new(DaemonStatus::default(), dir.path().join("state.json"), log);
        let iso: CpuSet = "2-3".parse().unwrap();
        let policy = Policy {
            config: Config::defaults(Preset::RealtimeVirtualHost, CpuSpec::List(iso.clone())),
            online: "0-3".parse().unwrap(),
            isolated: iso,
            housekeeping: "0-1".parse().unwrap(),
            claimed: CpuSet::new(),
            claimed_power: Default::default(),
        };
        let metrics = Arc::new(Metrics::new(&policy));
        books.metrics = Some((
            metrics.clone(),
            Arc::new(Mutex::new(crate::metrics::scope_of(&policy))),
        ));
        let o = |id: &str, label: &str, status| Outcome {
            item: "tasks".into(),
            id: id.into(),
            label: label.into(),
            status,
        };
        let rep = Report {
            outcomes: vec![
                o(
                    "task:7:1",
                    "task 7 (vcpu)",
                    Status::OwnerSet {
                        now: "3".into(),
                        reason: "set right after isold wrote 0-1".into(),
                    },
                ),
                o(
                    "task:8:1",
                    "task 8 (sh)",
                    Status::Changed {
                        from: "0-3".into(),
                        to: "0-1".into(),
                    },
                ),
            ],
            written: vec!["task:7:1".into(), "task:8:1".into()],
            ..Report::default()
        };
        assert_eq!(books.take_report(&rep, false), 1);
        books.task_corrected("task 9 (w)", "changed: 0-3 -> 0-1");
        books.owner_pin("task 10 (dpdk)", "2", "set while isold looked at it");
        assert_eq!(books.status.corrections.get("tasks"), Some(&2));
        let pins = books.status.owner_pins.clone().unwrap();
        assert_eq!(pins.count, 2);
        assert_eq!(
            pins.last,
            "task 10 (dpdk) on CPUs 2, set while isold looked at it"
        );
        let text = crate::status::human_status(&books.status);
        assert!(
            text.contains("  threads left on their owner's pin, set while isold narrowed them: 2 (the last: task 10 (dpdk) on CPUs 2, set while isold looked at it)\n"),
            "{text}"
        );
        let m = String::from_utf8(metrics.encode()).unwrap();
        assert!(m.contains("\nisold_owner_pins_total 2\n"), "{m}");
        assert!(
            m.contains("isold_corrections_total{kind=\"tasks\"} 2\n"),
            "{m}"
        );
    }
}
