//! `[metrics]`, a service of the daemon ([`Publisher`]): the listener and the health sampler,
//! each on a thread of its own, niced: they must never delay a correction. A listener that
//! cannot bind is a warning: isolation does not wait for metrics. The other services count
//! into what it publishes (the books' `metrics`).

use std::sync::{Arc, Mutex};

use libtaskisol::policy::config::MetricsConfig;
use libtaskisol::policy::Policy;

use super::books::Published;
use super::os::Env;
use super::os::{first_failure, nice_this_thread};
use super::service::{Cx, Service};
use crate::metrics;

/// The metrics of `policy` published as its `[metrics]` table says, or `None` without one.
fn start(env: &Env, policy: &Policy, holds: bool) -> Option<Published> {
    let cfg = policy.metrics().cloned()?;
    let published = Arc::new(metrics::Metrics::new(policy));
    published.holds(holds);
    let scope = Arc::new(Mutex::new(metrics::scope_of(policy)));
    match metrics::listen(&cfg) {
        None => {}
        Some(Ok(l)) => {
            let m = published.clone();
            let spawned = std::thread::Builder::new()
                .name("isold-http".into())
                .spawn(move || {
                    nice_this_thread();
                    metrics::serve(l, m)
                });
            match spawned {
                Ok(_) => env.log.info(&format!(
                    "metrics on http://{}/metrics",
                    cfg.listen.expect("listening")
                )),
                Err(e) => env.log.warn(&format!("metrics listener: {e}")),
            }
        }
        Some(Err(e)) => env.log.warn(&format!(
            "cannot listen on {} for metrics: {e}{}",
            cfg.listen.expect("asked"),
            metrics::sandbox_hint(&e)
        )),
    }
    let (m, sc, root, log) = (published.clone(), scope.clone(), env.root.clone(), env.log);
    let spawned = std::thread::Builder::new()
        .name("isold-health".into())
        .spawn(move || {
            nice_this_thread();
            // Each failure is said once until the next success, not every interval.
            let (mut sample_failing, mut text_failing) = (false, false);
            loop {
                let scope = sc.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if let Some(e) = first_failure(m.sample(&root, &scope), &mut sample_failing) {
                    log.warn(&format!("health sample: {e}"));
                }
                if let Some(path) = &cfg.textfile {
                    let written = metrics::write_textfile(path, &m);
                    if let Some(e) = first_failure(written, &mut text_failing) {
                        log.warn(&format!(
                            "cannot write {}: {e}{}",
                            path.display(),
                            metrics::sandbox_hint(&e)
                        ));
                    }
                }
                std::thread::sleep(cfg.interval);
            }
        });
    if let Err(e) = spawned {
        env.log.warn(&format!("metrics sampler: {e}"));
    }
    Some((published, scope))
}

/// The metrics publisher as a service of the daemon: started once, with the `[metrics]` of
/// the first policy.
#[derive(Debug)]
pub(super) struct Publisher {
    /// The `[metrics]` in force (a reload's change is said once).
    cfg: Option<MetricsConfig>,
}

impl Publisher {
    /// Publishing, when the configuration has `[metrics]`: the other services count into it
    /// from now on.
    pub fn start(cx: &mut Cx<'_>) -> Publisher {
        let holds = cx.books.status.contested.is_empty();
        cx.books.metrics = start(cx.env, cx.policy, holds);
        Publisher {
            cfg: cx.policy.metrics().cloned(),
        }
    }
}

impl Service for Publisher {
    fn name(&self) -> &'static str {
        "metrics"
    }

    fn policy_changed(&mut self, cx: &mut Cx<'_>) {
        if cx.policy.metrics() != self.cfg.as_ref() {
            cx.env.log.info(
                "reload: [metrics] changed: the listener and the textfile change at the next restart",
            );
            self.cfg = cx.policy.metrics().cloned();
        }
    }
}
