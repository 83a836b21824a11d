//! From a [`Policy`] to concrete targets: one per file, IRQ or thread, each with the value
//! the policy wants. Planning only reads.
//!
//! Each item plans its own targets ([`super::items`]); the order is the order of the items
//! ([`super::items::ALL`]), which is the order of apply; restore goes backwards.

use super::items::{self, Planning};
use super::Policy;
use crate::error::Result;
use crate::sysroot::SysRoot;

pub use super::items::cgroup_partition::partition_repair_target;
pub use super::items::irq_affinity::DEFAULT_SMP_AFFINITY;
pub use super::items::irqbalance::{with_banned_cpus, IRQBALANCE_FILES};
pub use super::items::ksm::KSM_RUN;
pub use super::items::kvm::KVM_CONF;
pub use super::items::machinecheck::MACHINECHECK_DIR;
pub use super::items::printk::PRINTK;
pub use super::items::systemd_cpuaffinity::CPUAFFINITY_CONF;
pub use super::items::tasks::{plan_for_threads, thread_verdict, ThreadVerdict};
pub use super::items::thp::THP_ENABLED;
pub use super::items::{owned_files, read_file_opt};
pub use super::target::{choice_of, irq_off, narrowed, Op, Target, Want};

/// Plan every target of `policy` on the kernel under `root`.
pub fn plan(policy: &Policy, root: &SysRoot) -> Result<Vec<Target>> {
    let mut p = Planning::new(policy, root);
    for item in items::ALL {
        crate::cost::stage("plan", item.name, || (item.plan)(&mut p))?;
    }
    Ok(p.out)
}

/// The targets of the network devices `names` only (those that exist): a daemon's answer to
/// devices that appeared, without planning the rest of the machine. The items that plan per
/// device are those that take network devices (`net_queues`, `rps`); every other item plans
/// nothing here.
pub fn plan_devices(
    policy: &Policy,
    root: &SysRoot,
    names: std::collections::BTreeSet<String>,
) -> Result<Vec<Target>> {
    let mut p = Planning::new(policy, root);
    p.devices = Some(names);
    for item in items::ALL.iter().filter(|i| i.per_device) {
        (item.plan)(&mut p)?;
    }
    Ok(p.out)
}

/// The targets of the item named `item` alone.
pub fn plan_item(policy: &Policy, root: &SysRoot, item: &str) -> Result<Vec<Target>> {
    let mut p = Planning::new(policy, root);
    for i in items::ALL.iter().filter(|i| i.name == item) {
        (i.plan)(&mut p)?;
    }
    Ok(p.out)
}

/// The targets of the configuration files the policy writes (a part of [`plan`], without its
/// task scan).
pub fn file_targets(policy: &Policy, root: &SysRoot) -> Result<Vec<Target>> {
    let mut p = Planning::new(policy, root);
    for item in items::ALL.iter().filter(|i| !i.files.is_empty()) {
        (item.plan)(&mut p)?;
    }
    Ok(p.out)
}

#[cfg(test)]
mod tests {
    use super::super::items::tasks::allowed_cgroup;
    use super::super::Status;
    use super::*;
    use crate::cpuset::CpuSet;

    fn fixture_policy(config: &str) -> Policy {
        let root = SysRoot::new(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/fixtures/debian-6.12-rt-isold"),
        );
        let cfg = super::super::config::Config::parse(config, std::path::Path::new("isold.toml"))
            .unwrap();
        Policy::resolve(cfg, &root).unwrap()
    }

    /// The cgroup allow-list leaves a workload's wide thread alone, never isold's own, and
    /// costs no cgroup read when it is empty.
    #[test]
    fn the_cgroup_allow_list_spares_workloads_but_not_isold() {
        let wide = CpuSet::parse_list("0-3").unwrap();
        let listed = fixture_policy("isolated_cpus = \"2-3\"\n[tasks]\nallow_cgroup = [\"/rt\"]\n");
        let other = std::process::id() as i32 + 1;
        let me = std::process::id() as i32;
        let rt = || Ok(Some("/rt".to_string()));
        assert!(matches!(
            thread_verdict(&listed, &wide, 0, "app", other, rt).unwrap(),
            ThreadVerdict::Leave(Status::LeftAlone { .. })
        ));
        assert!(matches!(
            thread_verdict(&listed, &wide, 0, "isold", me, rt).unwrap(),
            ThreadVerdict::Narrow(_)
        ));
        let plain = fixture_policy("isolated_cpus = \"2-3\"\n");
        let unread = || -> Result<Option<String>> { panic!("the cgroup was read") };
        assert!(matches!(
            thread_verdict(&plain, &wide, 0, "app", other, unread).unwrap(),
            ThreadVerdict::Narrow(_)
        ));
    }

    #[test]
    fn wants_compare_as_the_kernel_prints() {
        assert!(Want::Choice("never".into()).matches("always madvise [never]\n"));
        assert!(!Want::Choice("never".into()).matches("always [madvise] never\n"));
        assert_eq!(
            Want::Choice("never".into()).restore_text("always [madvise] never\n"),
            "madvise"
        );
        let m = Want::Mask(CpuSet::parse_list("0-1").unwrap());
        assert!(m.matches("3\n") && m.matches("00000000,00000003\n") && !m.matches("f\n"));
        assert_eq!(m.write_text("f\n"), "3");
        let p = Want::First("4".into());
        assert!(!p.matches("7\t4\t1\t7\n"));
        assert_eq!(p.write_text("7\t4\t1\t7\n"), "4\t4\t1\t7");
        assert!(p.matches("4\t4\t1\t7\n"));
        assert_eq!(p.restore_text("7\t4\t1\t7\n"), "7\t4\t1\t7");
        assert!(Want::Text("32768 60999".into()).matches("32768\t60999\n"));
        assert!(!Want::Text("0".into()).matches("00\n"));
        let allow = ["/machine.slice".to_string(), "/kubepods/*/pod*".to_string()];
        assert!(allowed_cgroup(&allow, "/machine.slice").is_some());
        assert!(allowed_cgroup(&allow, "/machine.slice/vm1.scope").is_some());
        assert!(allowed_cgroup(&allow, "/machine.slicex").is_none());
        assert!(allowed_cgroup(&allow, "/").is_none());
        assert!(allowed_cgroup(&allow, "/kubepods/burstable/pod12").is_some());
        assert!(allowed_cgroup(&["/a/".to_string()], "/a/b").is_some());
        // A configuration file that is missing is no content; one that cannot be read is an
        // error, never taken as missing.
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::new(dir.path());
        assert_eq!(read_file_opt(&root, "/etc/x.conf").unwrap(), None);
        std::fs::create_dir_all(dir.path().join("etc/x.conf")).unwrap();
        assert_eq!(
            read_file_opt(&root, "/etc/x.conf").unwrap_err().errno(),
            Some(libc::EISDIR)
        );
        // Brackets the wrong way round are no choice.
        assert_eq!(choice_of("] x [\n"), "] x [");
        assert_eq!(choice_of("a]b [c] d"), "c");
        assert_eq!(choice_of("2\n"), "2");
    }

    #[test]
    fn narrowing_keeps_housekeeping_cpus_or_takes_them_all() {
        let hk = CpuSet::parse_list("0-1").unwrap();
        assert_eq!(
            narrowed(&CpuSet::parse_list("1-3").unwrap(), &hk).to_string(),
            "1"
        );
        assert_eq!(
            narrowed(&CpuSet::parse_list("2-3").unwrap(), &hk).to_string(),
            "0-1"
        );
    }

    #[test]
    fn irqbalance_files_keep_everything_else() {
        let cpus = CpuSet::parse_list("2-3").unwrap();
        assert_eq!(
            with_banned_cpus(
                "#IRQBALANCE_BANNED_CPULIST=\nIRQBALANCE_ONESHOT=0\nIRQBALANCE_BANNED_CPULIST=7\n",
                &cpus
            ),
            "#IRQBALANCE_BANNED_CPULIST=\nIRQBALANCE_ONESHOT=0\nIRQBALANCE_BANNED_CPULIST=2-3\n"
        );
        assert_eq!(
            with_banned_cpus("A=1", &cpus),
            "A=1\nIRQBALANCE_BANNED_CPULIST=2-3\n"
        );
    }
}
