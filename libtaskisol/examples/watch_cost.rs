//! What one periodic check of `isold run` costs natively: `Watch::drift` over this machine's
//! own values (the sysctls, sysfs files, IRQ affinities and workqueue masks of the default
//! policy with CPU 1 as the isolated one), read-only: nothing is written. Prints how many
//! files a check reads, the median and p99 of N checks, and the same for reading every file
//! by path (open, read, close: what a check cost before the files were kept open).
//!
//!   cargo run --release -p libtaskisol --example watch_cost [N]
//!
//! Needs two online CPUs at least. The values differ from the policy here (it was never
//! applied): a check then reads every file, as a check that finds nothing does.

use std::time::Instant;

use libtaskisol::policy::config::Config;
use libtaskisol::policy::watch::{Drift, Watch};
use libtaskisol::policy::{plan, Op, Policy};
use libtaskisol::SysRoot;

fn percentiles(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    let at = |p: f64| v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1];
    (at(0.5), at(0.99))
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(1000, |a| a.parse().expect("N"));
    let root = SysRoot::host();
    let cfg = Config::parse(
        "isolated_cpus = \"1\"\n",
        std::path::Path::new("bench.toml"),
    )
    .expect("config");
    // What the daemon's scan thread watches: no thread or partition items.
    let policy = Policy::resolve(cfg, &root).expect("policy").without(&[
        "tasks",
        "kthread_priority",
        "cgroup_partition",
    ]);
    let dir = tempfile::tempdir().expect("temp dir");
    let files = libtaskisol::policy::state::StateFiles::new(
        dir.path().join("state.json"),
        dir.path().join("persistent.json"),
    );
    let w = Watch::of(&root, &policy, &files).expect("watch");
    let paths: Vec<String> = plan::plan(&policy, &root)
        .expect("plan")
        .into_iter()
        .filter_map(|t| match t.op {
            Op::Attr { path, .. } if root.exists(&path) => Some(path),
            Op::Irq { irq, .. } => Some(format!("/proc/irq/{irq}/smp_affinity_list")),
            Op::File { path, .. } => Some(path),
            _ => None,
        })
        .collect();
    let mut kept = Vec::with_capacity(n);
    let mut drifted = 0;
    for _ in 0..n {
        let t = Instant::now();
        let d = w.drift(&root);
        kept.push(t.elapsed().as_secs_f64() * 1e6);
        drifted = match d {
            Drift::Targets(v) => v.len(),
            _ => 0,
        };
    }
    let mut by_path = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let _ = root.read_dir_numbers::<u32>("/proc/irq");
        for p in &paths {
            let _ = std::hint::black_box(root.read_to_string(p.as_str()));
        }
        by_path.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let (m, p99) = percentiles(kept);
    let (bm, bp99) = percentiles(by_path);
    println!("files={} (drifted here: {drifted})", w.len());
    println!("check_median_us={m:.1}");
    println!("check_p99_us={p99:.1}");
    println!("by_path_median_us={bm:.1}");
    println!("by_path_p99_us={bp99:.1}");
}
