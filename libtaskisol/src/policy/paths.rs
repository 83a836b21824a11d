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
