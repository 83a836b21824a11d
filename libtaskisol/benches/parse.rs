//! How fast the parsers a daemon runs in its scan loop are: CPU masks and lists as the
//! kernel prints them (`/proc/irq/N/smp_affinity`, `Cpus_allowed_list`), the task-isolation
//! state file, `/proc/<pid>/stat`, and isolated-CPU discovery on a fixture tree.
//!
//! Run: cargo bench -p libtaskisol --bench parse

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use libtaskisol::procfs::TaskStat;
use libtaskisol::topology::IsolatedCpus;
use libtaskisol::{CpuSet, SysRoot, TaskIsolationState};

fn cpusets(c: &mut Criterion) {
    // A MAXSMP kernel (nr_cpu_ids 8192) prints 256 groups for every mask.
    let wide: CpuSet = "0-1,4096-4097,8190-8191".parse().unwrap();
    let mask8192 = wide.to_mask_string_width(8192);
    let mask4 = "f";
    let list = "0-3,8,10-11,16-31,64,100-127";
    c.bench_function("parse_mask 4 CPUs", |b| {
        b.iter(|| CpuSet::parse_mask(black_box(mask4)).unwrap())
    });
    c.bench_function("parse_mask 8192 CPUs", |b| {
        b.iter(|| CpuSet::parse_mask(black_box(&mask8192)).unwrap())
    });
    c.bench_function("to_mask_string 8192 CPUs", |b| {
        b.iter(|| black_box(&wide).to_mask_string_width(8192))
    });
    c.bench_function("parse_list 6 ranges", |b| {
        b.iter(|| CpuSet::parse_list(black_box(list)).unwrap())
    });
    let a: CpuSet = "0-8191".parse().unwrap();
    c.bench_function("intersection 8192 CPUs", |b| {
        b.iter(|| black_box(&a).intersection(black_box(&wide)))
    });
}

fn procfs(c: &mut Criterion) {
    let ti = "Configured state: quiesce \nActive state: quiesce \nQuiescing: vmstat_sync \n";
    c.bench_function("TaskIsolationState::parse", |b| {
        b.iter(|| TaskIsolationState::parse(black_box(ti)).unwrap())
    });
    let stat = "1234 (kworker/3:1-events) I 2 0 0 0 -1 69238880 0 0 0 0 0 5 0 0 20 0 1 0 \
                280 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 17 3 0 0 0 0 0 \
                0 0 0 0 0 0 0 0";
    c.bench_function("TaskStat::parse", |b| {
        b.iter(|| TaskStat::parse(black_box(stat)).unwrap())
    });
}

fn discovery(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let w = |p: &str, v: &str| {
        let f = dir.path().join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, v).unwrap();
    };
    w("sys/devices/system/cpu/isolated", "2-3\n");
    w("sys/devices/system/cpu/nohz_full", "2-3\n");
    w(
        "proc/self/mountinfo",
        "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
    );
    w("sys/fs/cgroup/cpuset.cpus.isolated", "2-3\n");
    for i in 0..50 {
        w(
            &format!("sys/fs/cgroup/g{i}/cpuset.cpus.partition"),
            "member\n",
        );
        w(
            &format!("sys/fs/cgroup/g{i}/cpuset.cpus.effective"),
            "0-1\n",
        );
    }
    let root = SysRoot::new(dir.path());
    c.bench_function("IsolatedCpus::discover (50 cgroups)", |b| {
        b.iter(|| IsolatedCpus::discover(black_box(&root)).unwrap())
    });
}

criterion_group!(benches, cpusets, procfs, discovery);
criterion_main!(benches);
