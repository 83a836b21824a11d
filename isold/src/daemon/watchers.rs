//! The daemon's watchers beside the policy: the stall guard and the noise ledger started for
//! the policy in force, followed, restarted on a reload that changes them, and stopped; their
//! figures for status and metrics.

use super::isolator::Daemon;
use super::stalls;

impl Daemon {
    /// The stall guard started for the policy in force, when `[stalls]` has it on.
    pub(super) fn start_stall_guard(&mut self) {
        let st = self.policy.stalls();
        let watch = stalls::watch_of(&self.policy, &self.env.files);
        let fair = stalls::fair_server_said(&self.env.root, &watch.cpus);
        let guard = if !st.enabled {
            "off ([stalls] enabled = false)".to_string()
        } else if watch.cpus.is_empty() {
            "off (no isolated CPU to watch)".to_string()
        } else {
            match stalls::StallGuard::start(self.env.root.clone(), watch.clone()) {
                Ok(g) => {
                    if let Some(n) = &self.noise {
                        g.send(stalls::Ctl::Ledger(n.shared.clone()));
                    }
                    self.stalls = Some(g);
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
        self.env.log.info(&format!(
            "stall guard: {guard}; the kernel's fair server: {fair}"
        ));
        self.books.status_lend_for = format!("{} s", st.lend_for.as_secs_f64());
        let s = self
            .books
            .status
            .stalls
            .get_or_insert_with(Default::default);
        s.guard = guard;
        s.fair_server = fair;
        self.books.dirty = true;
    }

    /// Every loan given back and the guard's thread ended.
    pub(super) fn stop_stall_guard(&mut self) {
        if let Some(g) = self.stalls.take() {
            for e in g.stop() {
                self.books.stall(&e);
            }
        }
    }

    /// A new policy in force: the guard watches its CPUs with its settings (started or
    /// stopped when `[stalls] enabled` changed).
    pub(super) fn follow_stalls(&mut self) {
        let on = self.policy.stalls().enabled;
        match (&self.stalls, on) {
            (Some(g), true) => {
                self.books.status_lend_for =
                    format!("{} s", self.policy.stalls().lend_for.as_secs_f64());
                g.send(stalls::Ctl::Watch(Box::new(stalls::watch_of(
                    &self.policy,
                    &self.env.files,
                ))));
                if let Some(s) = self.books.status.stalls.as_mut() {
                    s.guard =
                        s.guard
                            .split_once(", a thread")
                            .map_or(s.guard.clone(), |(_, rest)| {
                                format!(
                                    "on: CPUs {}, a thread{rest}",
                                    stalls::watched(&self.policy)
                                )
                            });
                }
            }
            (Some(_), false) | (None, true) => {
                self.stop_stall_guard();
                self.start_stall_guard();
            }
            (None, false) => {}
        }
        self.follow_noise();
    }

    /// What the guard's thread reported: logged and counted.
    pub(super) fn on_stall_events(&mut self) {
        let Some(g) = self.stalls.as_ref() else {
            return;
        };
        let mut byte = [0u8; 64];
        while matches!(std::io::Read::read(&mut &g.wake, &mut byte), Ok(n) if n > 0) {}
        let events: Vec<_> = g.events.try_iter().collect();
        let f = g.figures.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for e in &events {
            self.books.stall(e);
        }
        self.books.stall_figures(&f);
    }

    /// The CPUs the noise ledger records under the policy: every isolated one but
    /// `[noise] ignore_cpus`.
    fn noise_cpus(&self) -> libtaskisol::CpuSet {
        self.policy
            .isolated
            .difference(&self.policy.noise().ignore_cpus)
    }

    /// The noise ledger started for the policy in force, when `[noise]` has it on. It
    /// enables its events now, at the daemon's start, before the workload should run
    /// (enabling interrupts every CPU once).
    pub(super) fn start_noise_ledger(&mut self) {
        let cfg = self.policy.noise().clone();
        let state = if !cfg.enabled {
            "off ([noise] enabled = false)".to_string()
        } else {
            let metrics = self.books.metrics.as_ref().map(|(m, _)| m.clone());
            match super::noise::NoiseLedger::start(
                self.env.root.clone(),
                self.noise_cpus(),
                crate::metrics::scope_of(&self.policy),
                cfg,
                metrics,
                self.books.noise_file(),
                super::noise::Books {
                    files: self.env.files.clone(),
                    isolated: self.policy.isolated.to_string(),
                    config: self.policy.config_file().display().to_string(),
                },
            ) {
                Ok(n) => {
                    if let Some(g) = &self.stalls {
                        g.send(stalls::Ctl::Ledger(n.shared.clone()));
                    }
                    // Its events enabled before the daemon says it is ready (at most 10 s).
                    let state = if n.wait_started(std::time::Duration::from_secs(10)) {
                        n.shared
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .state
                            .clone()
                    } else {
                        "starting".to_string()
                    };
                    self.noise = Some(n);
                    state
                }
                Err(e) => format!("off (its thread could not start: {e})"),
            }
        };
        self.env.log.info(&format!("noise ledger: {state}"));
        self.books.status.noise = Some(crate::status::NoiseStatus {
            state,
            ..Default::default()
        });
        self.books.dirty = true;
    }

    /// The ledger's thread ended, its instance left recording (for the next start to adopt:
    /// see [`super::noise`]).
    pub(super) fn stop_noise_ledger(&mut self) {
        if let Some(n) = self.noise.take() {
            n.stop();
        }
    }

    /// A new policy in force: the ledger records its CPUs (started or stopped when
    /// `[noise] enabled` changed).
    fn follow_noise(&mut self) {
        match (&self.noise, self.policy.noise().enabled) {
            (Some(n), true) => n.send(super::noise::Ctl::Watch(
                self.noise_cpus(),
                Box::new(crate::metrics::scope_of(&self.policy)),
                self.policy.noise().clone(),
            )),
            (Some(_), false) => {
                self.stop_noise_ledger();
                // The guard keeps files of the instance open: closed first, or the
                // instance's removal fails (EBUSY).
                if let Some(g) = &self.stalls {
                    if !g.close_counts(stalls::STOP_WAIT) {
                        self.env
                            .log
                            .warn("stall guard: the noise ledger's files not closed in time");
                    }
                }
                // Turned off: its instance goes too (its events disabled, once).
                if let Err(e) = super::noise::remove_instance(&self.env.root, &self.env.files) {
                    self.env
                        .log
                        .warn(&format!("noise ledger: its instance not removed: {e}"));
                }
                self.start_noise_ledger();
            }
            (None, true) => self.start_noise_ledger(),
            (None, false) => {}
        }
    }

    /// The ledger's figures now, for the status.
    pub(super) fn noise_figures(&mut self) {
        let Some(n) = self.noise.as_ref() else {
            return;
        };
        let sh = n.shared.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let st = self.books.status.noise.get_or_insert_with(Default::default);
        let longest: Vec<(usize, f64, String)> = sh
            .per_cpu
            .iter()
            .filter_map(|(&cpu, s)| {
                s.longest
                    .as_ref()
                    .map(|l| (cpu, l.net_ns as f64 / 1e9, l.source.name.clone()))
            })
            .collect();
        let events = sh
            .per_cpu
            .values()
            .flat_map(|s| s.by_source.values())
            .map(|t| t.events)
            .sum();
        if st.state != sh.state || st.longest != longest || st.events != events {
            st.state = sh.state;
            st.longest = longest;
            st.events = events;
            st.lost_pages = sh.lost_pages;
            st.cpu_s = sh.cpu_s;
            self.books.dirty = true;
        }
    }

    /// The guard's figures now (the status file and the metrics follow them).
    pub(super) fn stall_figures(&mut self) {
        if let Some(g) = self.stalls.as_ref() {
            let f = g.figures.lock().unwrap_or_else(|e| e.into_inner()).clone();
            self.books.stall_figures(&f);
            self.books.dirty = true;
        }
    }
}
