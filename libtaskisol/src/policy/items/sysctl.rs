//! `sysctl`: the kernel parameters of `[sysctl]` (the table is the configuration's; turning
//! the item off empties the preset's part of it).

use super::{Item, Machine, Planning, Setting, BASE};
use crate::error::Result;
use crate::policy::target::{attr, Want};

/// The `sysctl` item.
pub const ITEM: Item = Item {
    name: "sysctl",
    doc: "the kernel parameters of [sysctl]",
    man: MAN,
    plan,
    restores: |kind, name| {
        (kind == "sysctl" && !name.is_empty())
            .then(|| crate::sysctl::path_of(name).ok())
            .flatten()
    },
    audit,
    ..BASE
};

const MAN: &str = r#"The kernel parameters of
.BR [sysctl] .
All presets: vm.swappiness 10, vm.dirty_ratio 10, vm.dirty_background_ratio 3,
net.core.busy_read 50, net.core.busy_poll 50, net.ipv4.tcp_fastopen 3,
kernel.numa_balancing 0, kernel.hung_task_timeout_secs 600, kernel.nmi_watchdog 0,
vm.stat_interval 10, kernel.timer_migration 0; all but cpu\-partitioning:
kernel.sched_rt_runtime_us \-1."#;

fn plan(p: &mut Planning<'_>) -> Result<()> {
    for (name, value) in &p.policy.config.sysctl {
        p.out.push(attr(
            "sysctl",
            format!("sysctl:{name}"),
            format!("sysctl {name}"),
            crate::sysctl::path_of(name)?,
            Want::Text(value.clone()),
        ));
    }
    Ok(())
}

fn audit(m: &Machine<'_>, out: &mut Vec<Setting>) -> Result<()> {
    let sysctl = |n: &str| crate::sysctl::read(m.root, n).ok().flatten();
    type Row<'a> = (&'a str, fn(&str) -> bool, &'a str, &'a str);
    let rows: [Row; 4] = [
        (
            "kernel.timer_migration",
            |v| v == "0",
            "timers armed on housekeeping CPUs may migrate to isolated ones",
            "sysctl kernel.timer_migration = 0 (isold preset)",
        ),
        (
            "vm.stat_interval",
            |v| v.parse::<u32>().is_ok_and(|s| s >= 10),
            "vmstat work runs on every CPU that has counters to fold, each interval",
            "sysctl vm.stat_interval = 10 (isold preset)",
        ),
        (
            "kernel.sched_rt_runtime_us",
            |v| v == "-1",
            "RT throttling takes the CPU from a SCHED_FIFO workload for part of every second",
            "sysctl kernel.sched_rt_runtime_us = -1 (isold preset, except cpu-partitioning)",
        ),
        (
            "kernel.nmi_watchdog",
            |v| v == "0",
            "the NMI watchdog's perf event interrupts every CPU periodically",
            "sysctl kernel.nmi_watchdog = 0 (isold preset)",
        ),
    ];
    for (name, ok, why, fix) in rows {
        out.extend(Setting::judged(name, sysctl(name), ok, why, fix));
    }
    Ok(())
}
