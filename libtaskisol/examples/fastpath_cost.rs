//! What one correction of `isold run` costs natively: TaskFixer::fix on a freshly spawned
//! child of this process (`sleep`) that was given a wide affinity: the stat read, the journal
//! append with its fdatasync, sched_setaffinity and the read back. Only this process's own
//! children are changed. The state file goes to a tmpfs when there is one (/dev/shm), as
//! /run/isold is one.
//!
//!   cargo run --release -p libtaskisol --example fastpath_cost [N]
//!
//! Needs two online CPUs at least: CPU 1 plays the isolated one, the others housekeeping.

use libtaskisol::policy::config::Config;
use libtaskisol::policy::fastpath::{Fix, TaskFixer};
use libtaskisol::policy::state::State;
use libtaskisol::policy::Policy;
use libtaskisol::{sched, topology, CpuSet, SysRoot};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(1000, |a| a.parse().expect("N"));
    let root = SysRoot::host();
    let online = topology::online_cpus(&root).expect("online CPUs");
    let cfg = Config::parse(
        "isolated_cpus = \"1\"\n",
        std::path::Path::new("bench.toml"),
    )
    .expect("config");
    let policy = Policy::resolve(cfg, &root).expect("policy");
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm")
    } else {
        tempfile::tempdir()
    }
    .expect("temp dir");
    let state = base.path().join("state.json");
    State::new(String::new(), "1".into(), "bench".into())
        .save(&state)
        .expect("state");
    let mut fixer = TaskFixer::new(&state);
    fixer.resync().expect("resync");
    let wide: CpuSet = online.clone();
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let mut child = std::process::Command::new("sleep")
            .arg("100")
            .spawn()
            .expect("sleep");
        let pid = child.id() as i32;
        sched::set_affinity(pid, &wide).expect("widen the child");
        let t = std::time::Instant::now();
        let r = fixer.fix(&root, &policy, pid, pid).expect("fix");
        times.push(t.elapsed().as_secs_f64() * 1e6);
        assert!(matches!(r, Fix::Changed { .. }), "{r:?}");
        child.kill().expect("kill");
        child.wait().expect("wait");
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let at = |p: f64| times[((times.len() as f64 * p).ceil() as usize).clamp(1, n) - 1];
    println!(
        "TaskFixer::fix, {n} tasks, state on {}: median {:.0} us, p99 {:.0} us, max {:.0} us",
        base.path().parent().unwrap().display(),
        at(0.5),
        at(0.99),
        at(1.0)
    );
}
