//! Unbound workqueues: the global `cpumask` under `/sys/devices/virtual/workqueue` and the
//! per-workqueue `cpumask` of queues created with WQ_SYSFS (`writeback`, ...). Both are hex
//! masks. Per-CPU kworkers (`kworker/N:M`) cannot be moved; only unbound work can.

use crate::cpuset::CpuSet;
use crate::error::Result;
use crate::sysroot::SysRoot;
use crate::topology::read_cpu_mask;

/// The directory of the workqueue sysfs files.
pub const WORKQUEUE_DIR: &str = "/sys/devices/virtual/workqueue";

/// The kernel path of the global unbound cpumask.
pub fn unbound_cpumask_path() -> String {
    format!("{WORKQUEUE_DIR}/cpumask")
}

/// The global unbound cpumask; `None` where the kernel has no such file.
pub fn unbound_cpumask(root: &SysRoot) -> Result<Option<CpuSet>> {
    let p = unbound_cpumask_path();
    if !root.exists(&p) {
        return Ok(None);
    }
    read_cpu_mask(root, &p).map(Some)
}

/// The names of the workqueues that have their own `cpumask` file, sorted.
pub fn queues_with_cpumask(root: &SysRoot) -> Result<Vec<String>> {
    if !root.exists(WORKQUEUE_DIR) {
        return Ok(Vec::new());
    }
    let mut v: Vec<String> = root
        .read_dir_names(WORKQUEUE_DIR)?
        .into_iter()
        .filter(|n| root.path(format!("{WORKQUEUE_DIR}/{n}/cpumask")).is_file())
        .collect();
    v.sort();
    Ok(v)
}

/// The kernel path of a workqueue's cpumask.
pub fn queue_cpumask_path(name: &str) -> String {
    format!("{WORKQUEUE_DIR}/{name}/cpumask")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unbound_cpumask_is_read_where_the_kernel_has_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::new(dir.path());
        assert_eq!(unbound_cpumask(&root).unwrap(), None);
        let p = root.path(unbound_cpumask_path());
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        assert_eq!(p, dir.path().join("sys/devices/virtual/workqueue/cpumask"));
        std::fs::write(&p, "c\n").unwrap();
        assert_eq!(
            unbound_cpumask(&root).unwrap(),
            Some("2-3".parse().unwrap())
        );
        std::fs::write(&p, "zz\n").unwrap();
        assert!(unbound_cpumask(&root).is_err());
    }
}
