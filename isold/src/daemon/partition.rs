//! The cgroup partition, the main thread's: inotify on its `cpuset.cpus`,
//! `cpuset.cpus.exclusive` and `cpuset.cpus.partition`, three reads to check it, and a repair
//! of the partition target alone when its directory is there. A repair that something else
//! keeps undoing backs off ([`crate::contest`]); one that failed is retried on the next
//! event, uevent or reload, not every interval.

use std::time::Instant;

use libtaskisol::policy::{engine, partition, plan, Policy, Report, Status};

use super::books::Books;
use super::os::Env;
use crate::contest;

#[derive(Debug, Default)]
pub struct Partition {
    pub inotify: Option<nix::sys::inotify::Inotify>,
    /// The last attempt to make the partition failed: periodic checks wait for an event.
    pub failed: bool,
    /// The partition could not be watched (said once).
    unwatched: bool,
    /// Repairs of the partition: one that something else keeps undoing backs off.
    pub contests: contest::Contests,
    /// The partition is left alone until then (contested), then checked again.
    pub retry: Option<Instant>,
}

/// Only the partition item of `policy`.
fn partition_policy(policy: &Policy) -> Option<Policy> {
    policy.cgroup_partition()?;
    Some(policy.only(&["cgroup_partition"]))
}

impl Partition {
    /// What a report says of the partition: whether its last attempt failed.
    pub fn note(&mut self, rep: &Report) {
        if let Some(o) = rep.outcomes.iter().find(|o| o.item == "cgroup_partition") {
            self.failed = matches!(o.status, Status::Failed { .. });
        }
    }

    /// The partition is configured but not watched by inotify.
    pub fn unwatched_now(&self, policy: &Policy) -> bool {
        self.inotify.is_none() && policy.cgroup_partition().is_some()
    }

    /// The partition checked (three reads) and, when it is not an isolated partition of the
    /// isolated CPUs, made again. `event`: a watched file changed (else a periodic check,
    /// skipped while the last attempt failed: retried on an event, a uevent or a reload).
    pub fn check(&mut self, env: &Env, policy: &Policy, books: &mut Books, event: bool) {
        let Some(dir) = policy.cgroup_partition().map(str::to_string) else {
            return;
        };
        if self.failed && !event {
            return;
        }
        let Some(p) = partition_policy(policy) else {
            return;
        };
        let id = format!("cgroup_partition:{dir}");
        // A change that lands while the partition is made again has its event dropped with
        // the old watches: looked at again after the new ones are in place (three tries).
        for _ in 0..3 {
            if partition::holds(&env.root, &dir, &policy.isolated) {
                return;
            }
            let now = Instant::now();
            if self.contests.waiting(&id, now) {
                // Contested: left as the other program set it until the back-off ends.
                self.retry = self.contests.until(&id);
                return;
            }
            // A partition this daemon made (its directory is there): remade without the
            // workload scan of every task; otherwise the whole item, as apply does it.
            let out = match plan::partition_repair_target(&p) {
                Some(t) if env.root.exists(&dir) => {
                    engine::apply_only(&env.root, &p, &env.files, vec![t])
                }
                _ => engine::apply(&env.root, &p, &env.files),
            };
            match out {
                Ok(rep) => {
                    if rep.written.contains(&id) {
                        let label = format!("isolated partition {dir}");
                        if let Some(ch) = self.contests.repaired(&id, &label, now) {
                            books.contest_changed(&ch);
                        }
                        books.refresh_contested(self.contests.list());
                    }
                    self.note(&rep);
                    books.take_report(&rep, false);
                }
                Err(e) => env.log.warn(&format!("cgroup partition: {e}")),
            }
            // The apply's own writes queued events, and a directory made again needs new
            // watches.
            self.watch(env, policy);
            if self.failed {
                return;
            }
        }
    }

    /// inotify on the partition's files; without it (no directory, no inotify) the main loop
    /// checks the partition every interval.
    pub fn watch(&mut self, env: &Env, policy: &Policy) {
        self.inotify = None;
        let Some(dir) = policy.cgroup_partition() else {
            return;
        };
        use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
        // All the flags there are: IN_NONBLOCK and IN_CLOEXEC.
        let watched = Inotify::init(InitFlags::all()).and_then(|i| {
            for f in partition::watched_files(dir.trim_end_matches('/')) {
                let path = env.root.path(&f);
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
                self.unwatched = false;
            }
            Err(e) if !self.unwatched => {
                self.unwatched = true;
                env.log.warn(&format!(
                    "cannot watch the partition {dir}: {e}; it is checked every interval instead"
                ));
            }
            Err(_) => {}
        }
    }
}
