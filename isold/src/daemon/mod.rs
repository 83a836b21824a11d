//! `isold run`: apply the policy, then keep it true until stopped.
//!
//! Two threads, pinned to the housekeeping CPUs. The main one (`serve`) waits in poll(2)
//! on:
//! - the process events connector: a task that is exec'd, forked or renamed is checked at
//!   once with one sched_getaffinity(2) call, and read from /proc only when its affinity
//!   reaches into the isolated CPUs (or its new name matches a kthread priority rule)
//!   (`tasks`);
//! - kobject uevents: a device that comes or goes makes the scan thread look at once;
//! - inotify on the cgroup partition's files: a changed or invalid partition is made again
//!   at once (`partition`);
//! - a signalfd for SIGHUP (reload), SIGTERM and SIGINT (stop);
//! - the scan thread's reports, counted and logged here (`books`);
//! - the socket of `isold hook` (`hook_socket`): containers' claims (`claims`);
//! - a timer: every `--task-interval` the affinity of every known thread is checked with
//!   sched_getaffinity(2), which catches affinity changes made without an exec (no event
//!   exists for them).
//!
//! The scan thread (`scanner`) reads, every half `--interval`, the values that have no
//! event (sysctls, sysfs, IRQ affinity, workqueue masks) and puts the drifted ones right, so
//! none stays drifted longer than `--interval`.
//!
//! Every correction goes through the engine (libtaskisol::policy::engine): the original is in
//! the state file before the first write, an original already recorded is never replaced
//! (after kill -9 the next start takes over the state file as it is). Stopping leaves the
//! policy in force (`on_stop = "keep"`, the default: `isold restore` is the undo); with
//! `on_stop = "restore"` a plain stop restores, a restart or a shutdown never does (see
//! [`crate::lifecycle`]).
//!
//! The services beside the policy (the stall guard, the noise ledger, the NRI plugin, the
//! hook socket, the metrics publisher) are rooms of their own behind one interface
//! (`service`): each owns its thread, start, reload and stop, its status lines and
//! metrics; the loop polls their wakes and carries out what they ask.
//!
//! The parts import downward only: `os` and `cpu` (each service's CPU time) at the bottom;
//! `books` (the status and metrics records) on them; `service` (the services' interface) on
//! those; `scanner`, `tasks`, `partition`, `power`, `claims` and the services (`stalls`,
//! `noise`, `nri`, `hook_socket`, `publish`) on those; `isolator` composes them into the
//! daemon, `serve` is the loop over it, and this module starts it.

mod books;
mod claims;
mod cpu;
mod hook_socket;
mod isolator;
mod noise;
mod nri;
mod os;
mod partition;
mod power;
mod publish;
mod scanner;
mod serve;
mod service;
mod stalls;
mod tasks;

use std::path::Path;

use libtaskisol::policy::state::StateFiles;
use libtaskisol::{sched, SysRoot};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use crate::cli::RunArgs;
use crate::lifecycle;
use isolator::Daemon;
use os::{not_configured, Env, Log};
pub use scanner::scan_policy;
pub use tasks::NEW_THREAD_GRACE;

/// `isold run`: returns the exit code.
pub fn run(root: &SysRoot, config_path: &Path, files: &StateFiles, args: &RunArgs) -> i32 {
    os::one_heap();
    let log = Log::new(args.verbose);
    let base = match crate::exit::load_policy(config_path, root) {
        Ok(p) => p,
        Err(msg) => return not_configured(&log, &msg),
    };
    let env = Env {
        root: root.clone(),
        files: files.clone(),
        log,
    };
    // The state directories hold every original: 0700 at every start, whoever made them
    // (a kubelet's hostPath is 0755; under isold.service systemd's RuntimeDirectory is).
    for dir in [&files.runtime, &files.persistent].map(|f| f.parent()) {
        let Some(dir) = dir else { continue };
        match libtaskisol::policy::files::take_private_dir(dir) {
            Ok(Some(mode)) => log.warn(&format!(
                "{} had mode {mode:04o}: made 0700 (it holds the original values)",
                dir.display()
            )),
            Ok(None) => {}
            Err(e) => log.warn(&format!("cannot make {} private: {e}", dir.display())),
        }
    }
    // The claims of containers made before a restart are in force until found released:
    // the first apply keeps their CPUs quiet, then the dead ones are given back.
    let claims = claims::Claims::load(&env);
    let _run_lock = match lifecycle::lock_run(&files.runtime) {
        Ok(l) => l,
        Err(msg) => {
            log.warn(&msg);
            return crate::exit::EXIT_FAILURE;
        }
    };
    let signals = match block_signals(&log) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let policy = libtaskisol::claims::policy_with(&base, &claims.list);
    let claimable = libtaskisol::claims::claimable(&policy, &claims.list);
    if root.is_host() {
        // Never a source of noise itself: nothing of isold runs on an isolated CPU.
        if let Err(e) = sched::set_affinity(0, &policy.housekeeping) {
            log.warn(&format!(
                "cannot pin isold to the housekeeping CPUs {}: {e}",
                policy.housekeeping
            ));
        }
    }
    // Loans of a stall guard that did not end them (kill -9, a crash): its threads get their
    // own policy back before anything else.
    match libtaskisol::stalls::give_back_recorded(root, files) {
        Ok(back) => {
            for line in back {
                log.info(&format!(
                    "stall guard: a loan of an earlier run given back: {line}"
                ));
            }
        }
        Err(e) => log.warn(&format!("stall guard: loans of an earlier run: {e}")),
    }
    let mut d = Daemon::new(env, config_path, base, policy, claims, args);
    // Subscribe before the first apply: a task started meanwhile is seen either way.
    d.open_events(args);
    // The services, each started here, in the order they are called in. The hook socket
    // first: a hook that connects during the first apply waits for its answer.
    d.add(hook_socket::HookSocket::open);
    if let Err(code) = d.first_apply() {
        return code;
    }
    d.release_dead_claims();
    d.reconcile(&claimable);
    // The metrics before the others, which count into them.
    d.add(publish::Publisher::start);
    d.add(stalls::Guard::start);
    // Ready once the ledger has enabled its events (or said why not): a workload started
    // after isold is ready never has that work queued behind it.
    d.add(noise::Noise::start);
    d.ready();
    d.add(nri::Nri::start);
    serve::serve(d, &signals, args)
}

/// SIGHUP, SIGTERM and SIGINT are taken by a signalfd only: blocked first, before anything
/// can arrive.
fn block_signals(log: &Log) -> Result<SignalFd, i32> {
    let mut mask = SigSet::empty();
    for s in [Signal::SIGHUP, Signal::SIGTERM, Signal::SIGINT] {
        mask.add(s);
    }
    if let Err(e) = mask.thread_block() {
        log.warn(&format!("cannot block signals: {e}"));
        return Err(crate::exit::EXIT_FAILURE);
    }
    SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC).map_err(|e| {
        log.warn(&format!("signalfd: {e}"));
        crate::exit::EXIT_FAILURE
    })
}
