//! Where isold's items live: the kernel files and the files on disk it writes. One module
//! below every other of the policy, so that the configuration, the plan, the state files and
//! the partition agree on them without depending on each other.

/// Where the cgroup v2 hierarchy is mounted (the configuration names directories below it).
pub const CGROUP_MOUNT: &str = "/sys/fs/cgroup";

/// Whether `dir` can be the partition's directory: below [`CGROUP_MOUNT`], without `.` or
/// `..` components (the configuration and a state file are checked by it alike).
pub fn valid_partition_dir(dir: &str) -> bool {
    dir.starts_with(&format!("{CGROUP_MOUNT}/"))
        && dir.len() > CGROUP_MOUNT.len() + 1
        && !dir.split('/').any(|c| c == ".." || c == ".")
}

/// Where `isold bootargs --write-grub` puts its drop-in.
pub const GRUB_DROP_IN: &str = "/etc/default/grub.d/isold.cfg";

/// The console log level's file (`printk` item).
pub const PRINTK: &str = "/proc/sys/kernel/printk";
/// Transparent hugepages (`thp` item).
pub const THP_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/enabled";
/// KSM (`ksm` item).
pub const KSM_RUN: &str = "/sys/kernel/mm/ksm/run";
/// The machinecheck devices (`machinecheck` item).
pub const MACHINECHECK_DIR: &str = "/sys/devices/system/machinecheck";
/// `default_smp_affinity` (`irq_affinity` item).
pub const DEFAULT_SMP_AFFINITY: &str = "/proc/irq/default_smp_affinity";
/// The KVM module options isold owns (`kvm` item).
pub const KVM_CONF: &str = "/etc/modprobe.d/isold-kvm.conf";
/// systemd's drop-in isold owns (`systemd_cpuaffinity` item).
pub const CPUAFFINITY_CONF: &str = "/etc/systemd/system.conf.d/isold-cpuaffinity.conf";
/// irqbalance's defaults files isold edits (`irqbalance` item): Debian's, then Red Hat's.
pub const IRQBALANCE_FILES: [&str; 2] = ["/etc/default/irqbalance", "/etc/sysconfig/irqbalance"];

/// The item of a file on disk isold may write: one of [`owned_files`], or a file GRUB's
/// `grub-mkconfig` sources (`/etc/default/grub`, `/etc/default/grub.d/*.cfg`), in which
/// `isold bootargs --write-grub` replaces an argument the kernel would take over its
/// drop-in's ([`super::grub::is_source_path`]). A state file naming any other path is
/// refused.
pub fn owned_item(path: &str) -> Option<&'static str> {
    owned_files()
        .into_iter()
        .find(|(_, p)| *p == path)
        .map(|(item, _)| item)
        .or_else(|| super::grub::is_source_path(path).then_some("bootargs"))
}

/// Every file on disk isold writes, with its item: nothing else is ever written or restored
/// as a file (a state file naming another path is refused).
pub fn owned_files() -> [(&'static str, &'static str); 5] {
    [
        ("kvm", KVM_CONF),
        ("irqbalance", IRQBALANCE_FILES[0]),
        ("irqbalance", IRQBALANCE_FILES[1]),
        ("systemd_cpuaffinity", CPUAFFINITY_CONF),
        ("bootargs", GRUB_DROP_IN),
    ]
}
