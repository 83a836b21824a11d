//! The presets: every setting of tuned's realtime profiles as data, one table.
//!
//! A row names an item, the value it takes, and the presets it is part of. The configuration
//! file can override any value or turn any item off (see man/isold.toml.5).

use std::fmt;
use std::str::FromStr;

/// A named set of defaults, after the tuned profile of the same name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Preset {
    /// A host running latency-critical VMs: realtime plus KSM off, KVM module options and
    /// kthread priorities.
    #[default]
    RealtimeVirtualHost,
    /// A guest with pinned vCPUs: realtime plus kthread priorities.
    RealtimeVirtualGuest,
    /// A bare-metal real-time machine.
    Realtime,
    /// Packet processing (DPDK and the like): no RT throttling change, no kthread
    /// priorities, systemd's own services kept on the housekeeping CPUs.
    CpuPartitioning,
}

impl Preset {
    /// Every preset, the default first.
    pub const ALL: [Preset; 4] = [
        Preset::RealtimeVirtualHost,
        Preset::RealtimeVirtualGuest,
        Preset::Realtime,
        Preset::CpuPartitioning,
    ];

    /// The name used in the configuration file.
    pub fn name(self) -> &'static str {
        match self {
            Preset::RealtimeVirtualHost => "realtime-virtual-host",
            Preset::RealtimeVirtualGuest => "realtime-virtual-guest",
            Preset::Realtime => "realtime",
            Preset::CpuPartitioning => "cpu-partitioning",
        }
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Preset {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Preset::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown preset {s:?}"))
    }
}

use Preset::{
    CpuPartitioning as CP, Realtime as RT, RealtimeVirtualGuest as RVG, RealtimeVirtualHost as RVH,
};

const ALL: &[Preset] = &[RVH, RVG, RT, CP];
const RT3: &[Preset] = &[RVH, RVG, RT];

/// One row of the preset table: `key` is `item` or `item:sub-key`
/// (`sysctl:vm.stat_interval`, `kthread_priority:ksoftirqd/*`, `kvm:kvm.nx_huge_pages`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// What is set.
    pub key: &'static str,
    /// The value, in the configuration file's spelling.
    pub value: &'static str,
    /// The presets that include it.
    pub presets: &'static [Preset],
    /// Where it comes from (the tuned profile), for the man page and `isold` output.
    pub origin: &'static str,
}

const fn s(
    key: &'static str,
    value: &'static str,
    presets: &'static [Preset],
    origin: &'static str,
) -> Setting {
    Setting {
        key,
        value,
        presets,
        origin,
    }
}

/// Every setting of every preset.
pub const SETTINGS: &[Setting] = &[
    s("sysctl:vm.swappiness", "10", ALL, "latency-performance"),
    s("sysctl:vm.dirty_ratio", "10", ALL, "latency-performance"),
    s(
        "sysctl:vm.dirty_background_ratio",
        "3",
        ALL,
        "latency-performance",
    ),
    s("sysctl:net.core.busy_read", "50", ALL, "network-latency"),
    s("sysctl:net.core.busy_poll", "50", ALL, "network-latency"),
    s("sysctl:net.ipv4.tcp_fastopen", "3", ALL, "network-latency"),
    s("sysctl:kernel.numa_balancing", "0", ALL, "network-latency"),
    s(
        "sysctl:kernel.hung_task_timeout_secs",
        "600",
        ALL,
        "network-latency",
    ),
    s("sysctl:kernel.nmi_watchdog", "0", ALL, "network-latency"),
    s("sysctl:vm.stat_interval", "10", ALL, "network-latency"),
    s("sysctl:kernel.timer_migration", "0", ALL, "network-latency"),
    s("sysctl:kernel.sched_rt_runtime_us", "-1", RT3, "realtime"),
    s("thp", "never", ALL, "network-latency"),
    s("workqueue", "true", ALL, "realtime"),
    s("machinecheck", "true", RT3, "realtime"),
    s(
        "ksm",
        "2",
        &[RVH, CP],
        "realtime-virtual-host, cpu-partitioning",
    ),
    s("net_queues", "true", RT3, "realtime ([net] channels)"),
    s("irq_affinity", "true", ALL, "realtime"),
    s("tasks", "true", ALL, "realtime"),
    s(
        "tasks:allow_comm",
        "pmd*",
        ALL,
        "realtime-virtual-host ps_blacklist",
    ),
    s(
        "tasks:allow_comm",
        "PMD*",
        ALL,
        "realtime-virtual-host ps_blacklist",
    ),
    s("tasks:allow_comm", "lcore-worker-*", ALL, "DPDK lcores"),
    s("tasks:allow_comm", "CPU */KVM", ALL, "qemu vCPU threads"),
    s(
        "kthread_priority",
        "true",
        &[RVH, RVG],
        "realtime-virtual-host",
    ),
    s(
        "kthread_priority:ksoftirqd/*",
        "fifo:2",
        &[RVH, RVG],
        "realtime-virtual-host",
    ),
    s(
        "kthread_priority:ktimers/*",
        "fifo:2",
        &[RVH, RVG],
        "realtime-virtual-host",
    ),
    s(
        "kthread_priority:ktimersoftd/*",
        "fifo:3",
        &[RVH, RVG],
        "realtime-virtual-host",
    ),
    s(
        "kthread_priority:rcuc/*",
        "fifo:4",
        &[RVH, RVG],
        "realtime-virtual-host",
    ),
    s(
        "kthread_priority:rcub/*",
        "fifo:4",
        &[RVH, RVG],
        "realtime-virtual-host",
    ),
    s(
        "pm_qos",
        "3",
        ALL,
        "latency-performance (force_latency fallback)",
    ),
    s("cpufreq", "performance", ALL, "latency-performance"),
    s("kvm", "true", &[RVH], "realtime-virtual-host"),
    s(
        "kvm:kvm.kvmclock_periodic_sync",
        "0",
        &[RVH],
        "realtime-virtual-host",
    ),
    s(
        "kvm:kvm.nx_huge_pages",
        "0",
        &[RVH],
        "realtime-virtual-host",
    ),
    s(
        "kvm:kvm_intel.ple_gap",
        "0",
        &[RVH],
        "realtime-virtual-host",
    ),
    s("irqbalance", "true", ALL, "realtime"),
    s(
        "printk",
        "4",
        RT3,
        "isold: a slow console stalls the CPU that prints",
    ),
    s(
        "cgroup_partition",
        "false",
        ALL,
        "isold: runtime isolation without a reboot",
    ),
    s("systemd_cpuaffinity", "true", &[CP], "cpu-partitioning"),
];

/// The rows of `preset`.
pub fn settings(preset: Preset) -> impl Iterator<Item = &'static Setting> {
    SETTINGS.iter().filter(move |s| s.presets.contains(&preset))
}

/// What to say of `preset` on a machine that is the virtual machine `virt` (`None`: bare
/// metal), `named_at` the file and line that name it (`None`: the default): the guest preset
/// in a virtual machine, the host or bare-metal ones outside. `None` when it fits.
pub fn advice(
    preset: Preset,
    named_at: Option<&str>,
    virt: Option<&crate::virt::Virt>,
) -> Option<String> {
    let chosen = match named_at {
        Some(at) => format!("{preset} ({at})"),
        None => format!("{preset} (the default)"),
    };
    match (preset, virt) {
        (Preset::RealtimeVirtualHost, Some(v)) => Some(format!(
            "this machine is a virtual machine ({v}): for a guest with pinned vCPUs the preset is realtime-virtual-guest (preset = \"realtime-virtual-guest\"); {chosen} is for the host that runs latency-critical VMs"
        )),
        (Preset::RealtimeVirtualGuest, None) => Some(format!(
            "this machine is not a virtual machine (no hypervisor in its DMI strings, no hypervisor flag): {chosen} is for a guest; on bare metal the preset is realtime, or realtime-virtual-host to run latency-critical VMs"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guest_is_advised_the_guest_preset_and_metal_not() {
        let vm = crate::virt::Virt {
            hypervisor: "qemu".into(),
            evidence: "DMI sys_vendor \"QEMU\"".into(),
        };
        let a = advice(RVH, None, Some(&vm)).unwrap();
        assert!(
            a.starts_with("this machine is a virtual machine (qemu, by DMI sys_vendor \"QEMU\"): for a guest with pinned vCPUs the preset is realtime-virtual-guest (preset = \"realtime-virtual-guest\"); realtime-virtual-host (the default) is for"),
            "{a}"
        );
        assert!(advice(RVH, Some("/etc/isold/isold.toml:2"), Some(&vm))
            .unwrap()
            .contains("realtime-virtual-host (/etc/isold/isold.toml:2) is for the host"));
        assert_eq!(advice(RVG, None, Some(&vm)), None);
        assert_eq!(advice(RT, None, Some(&vm)), None, "named for a reason");
        assert_eq!(advice(RVH, None, None), None);
        assert!(advice(RVG, Some("isold.toml:1"), None)
            .unwrap()
            .contains("realtime-virtual-guest (isold.toml:1) is for a guest"));
    }

    #[test]
    fn names_round_trip_and_the_default_is_the_virtual_host() {
        for p in Preset::ALL {
            assert_eq!(p.name().parse::<Preset>().unwrap(), p);
        }
        assert_eq!(Preset::default().name(), "realtime-virtual-host");
        assert!("realtime-virtual".parse::<Preset>().is_err());
    }

    #[test]
    fn presets_differ_as_tuned_profiles_do() {
        let has = |p, k: &str| settings(p).any(|s| s.key == k);
        assert!(has(RVH, "ksm") && !has(RVG, "ksm"));
        assert!(has(RVH, "kvm") && !has(RVG, "kvm") && !has(RT, "kvm"));
        assert!(!has(CP, "sysctl:kernel.sched_rt_runtime_us"));
        assert!(has(CP, "systemd_cpuaffinity") && !has(RVH, "systemd_cpuaffinity"));
        assert!(!has(CP, "kthread_priority:ksoftirqd/*"));
    }
}
