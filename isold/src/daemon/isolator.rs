//! The daemon: the policy in force and the parts that keep it (tasks, the partition, the
//! latency request, the claims, the books), its services (`service`), and what changes the
//! policy (a reload, a claim made or released) or ends it (a stop).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use libtaskisol::claims::wire::Reply;
use libtaskisol::claims::{Claim, ClaimRequest};
use libtaskisol::events::{ProcEvents, Uevents};
use libtaskisol::policy::config::OnStop;
use libtaskisol::policy::fastpath::TaskFixer;
use libtaskisol::policy::{engine, plan, Policy, Report, Status};
use nix::sys::signal::Signal;

use super::books::Books;
use super::os::{give_back_memory, not_configured, notify, now_s, Env, Log};
use super::service::{Ask, Lent, Note, Service, Services};
use super::{claims, partition, power, tasks};
use crate::cli::RunArgs;
use crate::lifecycle::{self, StopKind};
use crate::status::DaemonStatus;

/// Why the policy in force changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    /// SIGHUP: a new configuration file.
    Reload,
    /// A container's claim made.
    Claim,
    /// A container's claim released.
    Release,
}

impl Change {
    /// The word that starts its log lines.
    fn word(self) -> &'static str {
        match self {
            Change::Reload => "reload",
            Change::Claim => "claim",
            Change::Release => "release",
        }
    }
}

/// The items a container's claim changes: IRQs, workqueues, tasks (with their allow-lists)
/// and the power settings. The rest does not depend on the claims, and the scan thread keeps
/// it; leaving it out keeps a container's start from waiting for it.
pub const CLAIM_ITEMS: &[&str] = &["workqueue", "irq_affinity", "tasks", "pm_qos", "cpufreq"];

fn claims_policy(policy: &Policy) -> Policy {
    policy.only(CLAIM_ITEMS)
}

pub(super) struct Daemon {
    pub(super) env: Env,
    config_path: PathBuf,
    /// The policy in force: the configuration's, with the claims'.
    pub(super) policy: Policy,
    /// The policy of the configuration file alone.
    base: Policy,
    pub(super) books: Books,
    pub(super) tasks: tasks::Tasks,
    pub(super) uevents: Option<Uevents>,
    pub(super) partition: partition::Partition,
    dma: power::DmaLatency,
    pub(super) claims: claims::Claims,
    /// The services: the hook socket, the metrics, the stall guard, the noise ledger, NRI.
    pub(super) services: Services,
}

/// An event source, or `None` with the status text and the one log line that say what
/// replaces it (`instead` gives both from the error).
fn opened<T>(
    source: libtaskisol::Result<T>,
    (ok, status): (&str, &mut String),
    log: &Log,
    instead: impl FnOnce(&libtaskisol::Error) -> (String, String),
) -> Option<T> {
    match source {
        Ok(s) => {
            *status = ok.into();
            Some(s)
        }
        Err(e) => {
            let (text, line) = instead(&e);
            *status = text;
            log.warn(&line);
            None
        }
    }
}

impl Daemon {
    pub(super) fn new(
        env: Env,
        config_path: &Path,
        base: Policy,
        policy: Policy,
        claims: claims::Claims,
        args: &RunArgs,
    ) -> Daemon {
        let status = DaemonStatus {
            pid: std::process::id() as i32,
            started: now_s(),
            interval_s: args.interval,
            task_interval_s: args.task_interval,
            state: "running".into(),
            ..DaemonStatus::default()
        };
        let mut books = Books::new(status, env.files.runtime.clone(), env.log);
        books.policy_changed(config_path, &policy);
        books.refresh_set_aside(true);
        Daemon {
            config_path: config_path.to_path_buf(),
            base,
            policy,
            books,
            tasks: tasks::Tasks::new(TaskFixer::new(&env.files.runtime)),
            uevents: None,
            partition: partition::Partition::default(),
            dma: power::DmaLatency::taken_back(&env),
            claims,
            services: Services::default(),
            env,
        }
    }

    /// The process events connector and the uevent socket, each replaced by scans (said once)
    /// when it cannot be had.
    pub(super) fn open_events(&mut self, args: &RunArgs) {
        let status = &mut self.books.status;
        if !self.env.root.is_host() {
            status.task_events = "periodic scans (--root: a captured tree has no events)".into();
            status.device_events = "none (--root)".into();
            return;
        }
        self.tasks.procs = opened(
            ProcEvents::open(),
            ("proc connector", &mut status.task_events),
            &self.env.log,
            |e| {
                (
                    format!("periodic scans ({e})"),
                    format!(
                        "process events connector unavailable ({e}): new tasks are found by a /proc scan every {} s",
                        args.task_interval
                    ),
                )
            },
        );
        self.uevents = opened(
            Uevents::open(),
            ("uevents", &mut status.device_events),
            &self.env.log,
            |e| {
                (
                    format!("none ({e})"),
                    format!(
                        "device uevents unavailable ({e}): new IRQs are found by the scan every {} s",
                        args.interval
                    ),
                )
            },
        );
    }

    /// What a call of a service may use of the daemon, and the services.
    pub(super) fn lent(&mut self) -> (&mut Services, Lent<'_>) {
        (
            &mut self.services,
            Lent {
                env: &self.env,
                policy: &self.policy,
                claims: &self.claims.list,
                books: &mut self.books,
            },
        )
    }

    /// A service started: `make` builds it with what it needs of the daemon.
    pub(super) fn add<S: Service + 'static>(
        &mut self,
        make: impl FnOnce(&mut super::service::Cx<'_>) -> S,
    ) {
        let (services, lent) = self.lent();
        services.add(lent, make);
    }

    /// The services told that the policy or the claims in force changed.
    fn policy_told(&mut self) {
        let (services, lent) = self.lent();
        services.each(lent, |s, cx| s.policy_changed(cx));
    }

    /// Every service's figures into the books (at every task sweep).
    pub(super) fn service_figures(&mut self) {
        let (services, lent) = self.lent();
        services.each(lent, |s, cx| s.figures(cx));
        self.books.service_figures();
    }

    /// A note of the daemon's own to every service.
    pub(super) fn tell(&mut self, note: Note) {
        let (services, lent) = self.lent();
        services.tell(note, lent);
    }

    /// Log and count what an apply changed (`initial`: one that puts a policy in force).
    pub(super) fn take_report(&mut self, rep: &Report, initial: bool) {
        self.partition.note(rep);
        self.books.take_report(rep, initial);
    }

    /// A pass over threads: what it needs of the daemon.
    pub(super) fn tasks_cx(&mut self) -> (&mut tasks::Tasks, tasks::Ctx<'_>) {
        (
            &mut self.tasks,
            tasks::Ctx {
                env: &self.env,
                policy: &self.policy,
                books: &mut self.books,
            },
        )
    }

    /// The policy applied as `isold apply` does; `Err` with the exit code when it cannot be.
    pub(super) fn first_apply(&mut self) -> Result<(), i32> {
        match engine::apply(&self.env.root, &self.policy, &self.env.files) {
            Ok(rep) => {
                self.env.log.info(&format!(
                    "isolating CPUs {} (housekeeping CPUs {}): {}",
                    self.policy.isolated,
                    self.policy.housekeeping,
                    rep.summary()
                ));
                self.take_report(&rep, true);
                // The apply's garbage goes back before what the daemon keeps is made, so that
                // what it keeps is not strewn over pages the allocator cannot return.
                drop(rep);
                give_back_memory();
                self.tasks.learn_all(&self.env);
                self.tasks.resync(&self.env.log);
                give_back_memory();
                Ok(())
            }
            Err(e @ libtaskisol::Error::State { .. }) => {
                Err(not_configured(&self.env.log, &e.to_string()))
            }
            Err(e) => {
                self.env.log.warn(&format!("apply: {e}"));
                Err(crate::exit::EXIT_FAILURE)
            }
        }
    }

    /// After the first apply: the latency request held, the partition watched, the status
    /// written, READY=1 to systemd.
    pub(super) fn ready(&mut self) {
        self.books.status.cpu_dma_latency_us = self.dma.hold(&self.env, &self.policy);
        self.books.refresh_waiting(&self.env.root, &self.policy);
        self.partition.watch(&self.env, &self.policy);
        self.books.save_status();
        self.notify_ready();
    }

    pub(super) fn notify_ready(&self) {
        notify(&format!(
            "READY=1\nSTATUS=isolating CPUs {}; tasks: {}",
            self.policy.isolated, self.books.status.task_events
        ));
    }

    /// SIGHUP: the new file resolved; what it no longer covers restored; the rest applied.
    pub(super) fn reload(&mut self) {
        let base = match crate::exit::load_policy(&self.config_path, &self.env.root) {
            Ok(p) => p,
            Err(msg) => {
                self.env
                    .log
                    .warn(&format!("reload: {msg}; keeping the policy in force"));
                return;
            }
        };
        let new = libtaskisol::claims::policy_with(&base, &self.claims.list);
        if new == self.policy {
            self.env.log.info("reload: the configuration is unchanged");
        } else {
            self.base = base;
            self.change_policy(new, Change::Reload);
        }
        self.books.status.reloads += 1;
        self.books.save_status();
    }

    /// Put policy `new` in force in place of the current one (a reload, a container's claim
    /// made or released), the scan thread stopped by the caller: what the new policy no
    /// longer covers is restored, CPUs it no longer isolates are given back to the IRQs,
    /// threads and masks that had them ([`engine::give_back`]: a narrowed thread is never
    /// widened onto a CPU that stays isolated on the way), then the new policy is applied.
    /// `Some(report of the apply)`, `None` when the new policy cannot be planned (the current
    /// one stays).
    fn change_policy(&mut self, new: Policy, change: Change) -> Option<Report> {
        let why = change.word();
        // A claim changes the isolated CPUs and the power settings only: what it touches is
        // planned and applied, and only power values can stop being covered.
        let claims_only = change != Change::Reload;
        let scoped = if claims_only {
            claims_policy(&new)
        } else {
            new.clone()
        };
        let ids: HashSet<String> = match plan::plan(&scoped, &self.env.root) {
            Ok(t) => t.into_iter().map(|t| t.id).collect(),
            Err(e) => {
                self.env
                    .log
                    .warn(&format!("{why}: {e}; keeping the policy in force"));
                return None;
            }
        };
        // A narrowed thread the new plan does not list (it is off the isolated CPUs now) keeps
        // its narrowing while the item is on: give_back widens it by the freed CPUs only.
        let tasks_kept = new.narrows_tasks();
        // The stall guard's loans are its own to end (it knows when a thread has run), and
        // the noise ledger's instance is the ledger's to remove (`noise::Noise`, when
        // `[noise]` is turned off, once its readers closed their files): no plan lists it,
        // and removing it here would disable its events under a ledger that records on.
        self.restore_uncovered(why, |id| {
            ids.contains(id)
                || id.starts_with("loan:")
                || id == super::noise::instance_id()
                || (tasks_kept && id.starts_with("task:"))
                || (claims_only && !id.starts_with("pm_qos:") && !id.starts_with("cpufreq:"))
        });
        let freed = self.policy.isolated.difference(&new.isolated);
        let before = self.policy.isolated.clone();
        self.give_back(why, &freed, &before);
        self.policy = new;
        self.policy_told();
        self.books.policy_changed(&self.config_path, &self.policy);
        let rep = match engine::apply(&self.env.root, &scoped, &self.env.files) {
            Ok(rep) => {
                self.env
                    .log
                    .info(&format!("{why}: apply: {}", rep.summary()));
                self.take_report(&rep, true);
                Some(rep)
            }
            Err(e) => {
                self.env.log.warn(&format!("{why}: apply: {e}"));
                None
            }
        };
        self.tasks.policy_changed(&self.env.log);
        give_back_memory();
        self.books.status.cpu_dma_latency_us = self.dma.hold(&self.env, &self.policy);
        self.partition.watch(&self.env, &self.policy);
        self.books.refresh_waiting(&self.env.root, &self.policy);
        self.books.save_status();
        rep
    }

    /// The originals of the targets `covered` does not keep, put back.
    fn restore_uncovered(&mut self, why: &str, covered: impl Fn(&str) -> bool) {
        let log = self.env.log;
        match engine::restore_where(&self.env.root, &self.env.files, |id| !covered(id)) {
            Ok(rep) => {
                let n = rep
                    .outcomes
                    .iter()
                    .filter(|o| matches!(o.status, Status::Restored { .. }))
                    .count();
                if n > 0 {
                    log.info(&format!(
                        "{why}: {n} value(s) the new policy no longer covers restored"
                    ));
                }
                for o in rep.problems() {
                    log.warn(&format!("{why}: {}: {}", o.label, o.status));
                }
            }
            Err(e) => log.warn(&format!("{why}: restore: {e}")),
        }
    }

    /// CPUs `freed` given back to the values that had them.
    fn give_back(
        &mut self,
        why: &str,
        freed: &libtaskisol::CpuSet,
        isolated_before: &libtaskisol::CpuSet,
    ) {
        let log = self.env.log;
        match engine::give_back(&self.env.root, &self.env.files, freed, isolated_before) {
            Ok(rep) => {
                if !rep.outcomes.is_empty() {
                    log.info(&format!(
                        "{why}: CPUs {freed} given back to {} value(s)",
                        rep.outcomes.len()
                    ));
                }
                for o in rep.problems() {
                    log.warn(&format!("{why}: {}: {}", o.label, o.status));
                }
            }
            Err(e) => log.warn(&format!("{why}: giving CPUs {freed} back: {e}")),
        }
    }

    /// Put `claims` in force: the policy changed, then the file written.
    pub(super) fn set_claims(&mut self, claims: Vec<Claim>, change: Change) -> Option<Report> {
        let new = libtaskisol::claims::policy_with(&self.base, &claims);
        self.claims.list = claims;
        let rep = self.change_policy(new.clone(), change);
        if let Err(e) = self.claims.save(&self.claims.list) {
            self.env.log.warn(&e);
        }
        // The claims changed though the policy could not: the services learn them.
        if self.policy != new {
            self.policy_told();
        }
        rep
    }

    /// The effects the state file holds on claimable CPUs that neither the configuration
    /// nor a live claim isolates, given back: after a start whose claims file was missing,
    /// corrupt or of another version, what its claims narrowed does not stay narrowed. (While
    /// the daemon runs, every claim released and every reload gives its freed CPUs back in
    /// `change_policy`.)
    pub(super) fn reconcile(&mut self, claimable: &libtaskisol::CpuSet) {
        let freed = claimable.difference(&self.policy.isolated);
        let before = self.policy.static_isolated().union(claimable);
        self.give_back("reconcile", &freed, &before);
    }

    /// Release the claims whose container's process is gone (killed, its poststop hook never
    /// run): `true` when there were any.
    pub(super) fn release_dead_claims(&mut self) -> bool {
        let dead = self.claims.dead(&self.env.root);
        if dead.is_empty() {
            return false;
        }
        for c in &dead {
            self.env.log.info(&format!(
                "{}: its process {} is gone: releasing CPUs {}",
                c.who(),
                c.pid,
                c.cpus
            ));
        }
        let left: Vec<Claim> = self
            .claims
            .list
            .iter()
            .filter(|c| !dead.contains(c))
            .cloned()
            .collect();
        self.set_claims(left, Change::Release);
        true
    }

    /// Whether carrying `ask` out may change the policy in force (the scan thread is
    /// stopped for it).
    pub(super) fn changes_policy(&self, ask: &Ask) -> bool {
        match ask {
            Ask::List => false,
            // Every container's stop and removal comes: only a claim's changes anything.
            Ask::Release(id) => self.claims.of(id).is_some(),
            Ask::Claim(_) | Ask::Follow(_) | Ask::Sync { .. } => true,
        }
    }

    /// What a service asks, carried out: the reply.
    pub(super) fn on_ask(&mut self, ask: Ask) -> Reply {
        match ask {
            Ask::List => Reply {
                ok: true,
                message: format!("{} claim(s)", self.claims.list.len()),
                claims: self.claims.list.clone(),
            },
            Ask::Release(container) => self.release(&container),
            Ask::Claim(req) => self.claim(&req),
            Ask::Follow(req) => match self.follow(&req) {
                Ok(()) => Reply::said(true, String::new()),
                Err(e) => Reply::said(false, e),
            },
            Ask::Sync { existing, asks } => {
                self.synchronize(&existing, asks);
                Reply::said(true, String::new())
            }
        }
    }

    /// NRI's PostUpdateContainer: the claim of `req`'s container moved to its new cpuset,
    /// or, when that cannot be claimed, released (a claim never keeps CPUs its container no
    /// longer has).
    fn follow(&mut self, req: &ClaimRequest) -> Result<(), String> {
        if self
            .claims
            .of(&req.container)
            .is_some_and(|c| libtaskisol::CpuSet::parse_list(&req.cpus).ok() == Some(c.cpu_set()))
        {
            return Ok(());
        }
        let r = self.claim(req);
        if r.ok {
            return Ok(());
        }
        if self.claims.of(&req.container).is_some() {
            self.env.log.info(&format!(
                "{}: its new cpuset {} cannot be claimed: its claim is released",
                libtaskisol::claims::who(&req.container, req.name.as_deref()),
                req.cpus
            ));
            self.release(&req.container);
        }
        Err(r.message)
    }

    /// NRI's synchronization: NRI's claims whose container no longer exists released, the
    /// running containers' claims not held yet made.
    fn synchronize(&mut self, existing: &[String], asks: Vec<ClaimRequest>) {
        let gone: Vec<String> = self
            .claims
            .list
            .iter()
            .filter(|c| {
                c.source.as_deref() == Some(libtaskisol::nri::SOURCE)
                    && !existing.contains(&c.container)
            })
            .map(|c| c.container.clone())
            .collect();
        for id in gone {
            self.release(&id);
        }
        for req in asks {
            // Not held, or held with a cpuset the container no longer has (an update missed
            // while isold was away).
            let held = self.claims.of(&req.container).map(|c| c.cpu_set());
            if held.is_none() || libtaskisol::CpuSet::parse_list(&req.cpus).ok() != held {
                self.claim(&req);
            }
        }
    }

    /// A container stopped: its CPUs given back.
    fn release(&mut self, container: &str) -> Reply {
        let Some(c) = self.claims.of(container).cloned() else {
            return Reply::said(
                true,
                format!(
                    "container {} holds no claim",
                    libtaskisol::claims::shown(libtaskisol::claims::short(container))
                ),
            );
        };
        self.set_claims(self.claims.others(container), Change::Release);
        let msg = format!("{}: CPUs {} released", c.who(), c.cpus);
        self.env.log.info(&msg);
        Reply::said(true, msg)
    }

    /// A container starts and asks for its CPUs: checked, kept, applied.
    fn claim(&mut self, req: &ClaimRequest) -> Reply {
        let refused = |books: &mut Books, reason: &str, e: &dyn std::fmt::Display| {
            books.refused(reason, &format!("claim refused: {e}"));
            Reply::said(false, format!("claim refused: {e}"))
        };
        let (claim, all) = match claims::admit(&self.env.root, &self.policy, &self.claims, req) {
            Ok(c) => c,
            Err(e) => return refused(&mut self.books, e.reason(), &e),
        };
        // Kept before it is applied: a daemon killed in the middle finds it at its next
        // start.
        if let Err(e) = self.claims.save(&all) {
            return refused(&mut self.books, "state", &e);
        }
        let rep = self.set_claims(all, Change::Claim);
        let changed = rep.as_ref().map_or(0, |r| {
            r.outcomes
                .iter()
                .filter(|o| matches!(o.status, Status::Changed { .. }))
                .count()
        });
        let problems = rep.as_ref().map_or(0, |r| r.problems().count());
        let msg = claims::made(&claim, changed, problems);
        self.env.log.info(&msg);
        Reply::said(true, msg)
    }

    /// SIGTERM/SIGINT: stop watching. With `on_stop = "keep"` (the default) every applied
    /// value stays; with `"restore"` a plain stop restores them, a restart or a shutdown does
    /// not (a restart would open a window where IRQs and tasks come back onto the workload's
    /// CPUs; a shutdown would remove the boot-time files the next boot needs).
    pub(super) fn stop(&mut self, sig: Signal) -> i32 {
        self.books.log_tasks();
        // Loans are never left behind, whatever on_stop says (the stall guard's stop).
        let (services, lent) = self.lent();
        services.each(lent, |s, cx| s.stop(cx));
        let kind = match self.policy.on_stop() {
            OnStop::Keep => None,
            OnStop::Restore => Some(lifecycle::stop_kind()),
        };
        let restore = kind == Some(StopKind::Stop);
        notify(if restore {
            "STOPPING=1\nSTATUS=restoring the original values"
        } else {
            "STOPPING=1\nSTATUS=stopping; the policy stays in force"
        });
        self.books.status.state = "stopping".into();
        self.books.save_status();
        let log = self.env.log;
        let code = if restore {
            log.info(&format!(
                "{sig}: a stop, and on_stop = \"restore\": restoring the original values"
            ));
            match engine::restore(&self.env.root, &self.env.files) {
                Ok(rep) => {
                    for o in rep.problems() {
                        log.warn(&format!("{}: {}", o.label, o.status));
                    }
                    log.info(&format!("restore: {}", rep.summary()));
                    if rep.problems().count() == 0 {
                        crate::exit::EXIT_OK
                    } else {
                        crate::exit::EXIT_FAILURE
                    }
                }
                Err(e) => {
                    log.warn(&format!("restore: {e}"));
                    crate::exit::EXIT_FAILURE
                }
            }
        } else {
            let why = match &kind {
                None => "on_stop = \"keep\"".to_string(),
                Some(k) => format!("on_stop = \"restore\", but this is {}", k.describe()),
            };
            log.info(&format!(
                "{sig}: the policy stays in force ({why}); `isold restore` puts the original values back"
            ));
            crate::exit::EXIT_OK
        };
        self.dma.close();
        self.books.remove_status();
        code
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A claim plans only the items a claim changes: the sysctls, THP, KSM, the files and the
    /// partition are the scan's and the configuration's, never a container start's wait.
    #[test]
    fn a_claims_policy_has_the_claim_items_only() {
        let c = libtaskisol::policy::config::Config::parse(
            "isolated_cpus = \"2\"\n[items]\ncgroup_partition = true\n",
            Path::new("isold.toml"),
        )
        .unwrap();
        assert!(!c.sysctl.is_empty() && c.on("cgroup_partition") && c.on("irqbalance"));
        let p = Policy {
            config: c.clone(),
            online: "0-3".parse().unwrap(),
            isolated: "2".parse().unwrap(),
            housekeeping: "0-1,3".parse().unwrap(),
            claimed: Default::default(),
            claimed_power: Default::default(),
        };
        let q = claims_policy(&p);
        assert_eq!(q.config, c.only(CLAIM_ITEMS));
        assert!(q.config.sysctl.is_empty() && q.config.value("cgroup_partition").is_none());
        assert!(!q.config.on("irqbalance") && q.config.kvm.is_empty());
        assert!(q.config.on("tasks") && q.config.on("irq_affinity") && q.config.on("workqueue"));
        assert_eq!(q.isolated, p.isolated);
    }
}
