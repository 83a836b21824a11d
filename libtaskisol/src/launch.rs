//! Start a workload isolated: resolve a request (task isolation, CPUs, scheduling, THP,
//! cgroup) into concrete steps, check every prerequisite *before* changing anything, then
//! apply the steps to the calling process in a fixed order. The caller execs the workload
//! afterwards; settings that survive `execve` are exactly the ones applied here.
//!
//! Order, and why:
//! 1. cgroup: attaching to a cpuset cgroup resets the task's affinity to the cgroup's CPUs,
//!    so it must come before any affinity of our own.
//! 2. CPU affinity: the task migrates to its CPUs before anything quiesces there.
//! 3. THP disable (`PR_SET_THP_DISABLE`).
//! 4. scheduling policy and priority.
//! 5. task isolation, in the order of the original util-linux chisol: configure quiesce,
//!    activate, configure inheritance.

use std::path::{Path, PathBuf};

use crate::abi;
use crate::cpuset::CpuSet;
use crate::error::{Error, Result, Unsupported};
use crate::isolation::{quiesce_names, Inherit, QuiesceConfig, TaskIsolation};
use crate::sched::{self, SchedPolicy};
use crate::sysroot::SysRoot;
use crate::topology::{self, IsolatedCpus, KernelVersion};

/// Which CPUs the workload runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuTarget {
    /// An explicit list.
    List(CpuSet),
    /// Every CPU the kernel isolates (isolcpus domain, nohz_full, isolated partitions).
    Isolated,
}

/// What to do when task isolation is requested but the kernel has no interface.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Fallback {
    /// Fail: nothing is started.
    #[default]
    None,
    /// Run anyway when the target CPUs get the kernel's own vmstat protection.
    Native,
}

/// A request, as chisol's options express it.
#[derive(Debug, Clone, Default)]
pub struct LaunchSpec {
    /// Quiesce configuration (`-q`).
    pub quiesce: Option<QuiesceConfig>,
    /// Activate before exec (`-a`).
    pub activate: bool,
    /// Inheritance (`-I`).
    pub inherit: Option<Inherit>,
    /// CPUs (`-c`, `--isolated`).
    pub cpus: Option<CpuTarget>,
    /// Scheduling (`-f`, `-r`).
    pub sched: Option<SchedPolicy>,
    /// `PR_SET_THP_DISABLE` (`--no-thp`).
    pub no_thp: bool,
    /// cgroup v2 directory to move into (`--cgroup`), a real path.
    pub cgroup: Option<PathBuf>,
    /// What to do without the task-isolation interface (`--fallback`).
    pub fallback: Fallback,
}

impl LaunchSpec {
    /// Whether the request uses the task-isolation prctls.
    pub fn wants_task_isolation(&self) -> bool {
        self.quiesce.is_some() || self.activate || self.inherit.is_some()
    }
}

/// One change to the calling process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Write our pid to `<dir>/cgroup.procs`.
    MoveToCgroup(PathBuf),
    /// `sched_setaffinity`.
    SetAffinity(CpuSet),
    /// `PR_SET_THP_DISABLE`.
    DisableThp,
    /// `sched_setscheduler`.
    SetScheduler(SchedPolicy),
    /// `PR_ISOL_CFG_SET` quiesce.
    ConfigureQuiesce(QuiesceConfig),
    /// `PR_ISOL_ACTIVATE_SET`.
    Activate(u64),
    /// `PR_ISOL_CFG_SET` inheritance.
    SetInherit(Inherit),
}

impl Step {
    /// What the step does, for messages ("failed to <describe>").
    pub fn describe(&self) -> String {
        match self {
            Step::MoveToCgroup(p) => format!("move into cgroup {}", p.display()),
            Step::SetAffinity(c) => format!("set CPU affinity to {c}"),
            Step::DisableThp => "disable transparent huge pages".into(),
            Step::SetScheduler(p) => format!("set scheduling policy {p}"),
            Step::ConfigureQuiesce(q) => {
                format!("configure task isolation quiesce {}", quiesce_names(q.mask))
            }
            Step::Activate(_) => "activate task isolation".into(),
            Step::SetInherit(i) => format!("set task isolation inheritance to {i}"),
        }
    }
}

/// A step that failed while applying a plan.
#[derive(Debug, thiserror::Error)]
#[error("failed to {}: {source}", step.describe())]
pub struct StepError {
    /// The step.
    pub step: Step,
    /// Why.
    #[source]
    pub source: Error,
}

/// A checked plan: applying it changes only the calling process.
#[derive(Debug)]
pub struct LaunchPlan {
    /// The steps, in the order they are applied.
    pub steps: Vec<Step>,
    /// Facts worth telling the user (e.g. which native protection replaces task isolation).
    pub notes: Vec<String>,
    isolation: Option<TaskIsolation>,
}

fn cgroup_cpus(root: &SysRoot, dir: &Path) -> Result<Option<CpuSet>> {
    topology::read_cpu_list_opt(root, &dir.join("cpuset.cpus.effective").to_string_lossy())
}

impl LaunchSpec {
    /// Resolve and check everything. Nothing is changed; an error here means nothing would
    /// be started. `root` is where /proc and /sys are read; task-isolation detection always
    /// looks at the running kernel.
    pub fn plan(&self, root: &SysRoot) -> Result<LaunchPlan> {
        let mut steps = Vec::new();
        let mut notes = Vec::new();

        if self.activate && self.quiesce.is_none() {
            return Err(Error::Invalid(
                "--activate needs --quiesce: there is nothing configured to activate".into(),
            ));
        }

        // cgroup first: it constrains the CPUs.
        let mut allowed = topology::online_cpus(root)?;
        if let Some(dir) = &self.cgroup {
            let procs = dir.join("cgroup.procs");
            if !root.path(&procs).exists() {
                return Err(Error::Invalid(format!(
                    "{} is not a cgroup v2 directory (no cgroup.procs)",
                    dir.display()
                )));
            }
            if let Some(c) = cgroup_cpus(root, dir)? {
                allowed = allowed.intersection(&c);
            }
            steps.push(Step::MoveToCgroup(dir.clone()));
        }

        let needs_isolated = matches!(self.cpus, Some(CpuTarget::Isolated))
            || (self.wants_task_isolation() && self.fallback == Fallback::Native);
        let isolated = if needs_isolated {
            Some(IsolatedCpus::discover(root)?)
        } else {
            None
        };

        let target = match &self.cpus {
            None => None,
            Some(CpuTarget::List(cpus)) => {
                if cpus.is_empty() {
                    return Err(Error::Invalid("empty CPU list".into()));
                }
                let off = cpus.difference(&allowed);
                if !off.is_empty() {
                    return Err(Error::Invalid(format!(
                        "CPUs {off} are not available{} (available: {allowed})",
                        if self.cgroup.is_some() {
                            " in the cgroup"
                        } else {
                            " (not online)"
                        }
                    )));
                }
                Some(cpus.clone())
            }
            Some(CpuTarget::Isolated) => {
                let iso = isolated.as_ref().map(IsolatedCpus::all).unwrap_or_default();
                if iso.is_empty() {
                    return Err(Error::Invalid(
                        "--isolated: this machine has no isolated CPUs (no isolcpus=domain, nohz_full= or isolated cpuset partition)".into(),
                    ));
                }
                let usable = iso.intersection(&allowed);
                if usable.is_empty() {
                    return Err(Error::Invalid(format!(
                        "--isolated: the isolated CPUs {iso} are not available{} (available: {allowed})",
                        if self.cgroup.is_some() { " in the cgroup" } else { "" }
                    )));
                }
                Some(usable)
            }
        };
        if let Some(t) = &target {
            steps.push(Step::SetAffinity(t.clone()));
        }

        if self.no_thp {
            steps.push(Step::DisableThp);
        }

        if let Some(p) = self.sched {
            p.validate()?;
            if p.is_realtime() && !sched::may_use_realtime(p.priority()) {
                return Err(Error::Invalid(format!(
                    "setting {p} needs CAP_SYS_NICE (or RLIMIT_RTPRIO >= {}); run as root or grant the capability",
                    p.priority()
                )));
            }
            steps.push(Step::SetScheduler(p));
        }

        let mut isolation = None;
        if self.wants_task_isolation() {
            match TaskIsolation::detect() {
                Ok(ti) => {
                    if let Some(q) = self.quiesce {
                        // Errors here (EOPNOTSUPP with CONFIG_TASK_ISOLATION=n) are
                        // reported as they are, with the call and errno.
                        let features = ti.features()?;
                        let supported = if features & abi::ISOL_F_QUIESCE != 0 {
                            ti.supported_quiesce()?
                        } else {
                            0
                        };
                        if q.mask & !supported != 0 {
                            return Err(Error::Invalid(format!(
                                "quiesce {} is not supported by this kernel (supported: {})",
                                quiesce_names(q.mask & !supported),
                                quiesce_names(supported)
                            )));
                        }
                        steps.push(Step::ConfigureQuiesce(q));
                        if self.activate {
                            steps.push(Step::Activate(abi::ISOL_F_QUIESCE));
                        }
                    }
                    if let Some(i) = self.inherit {
                        steps.push(Step::SetInherit(i));
                    }
                    isolation = Some(ti);
                }
                Err(why) => match self.fallback {
                    Fallback::None => return Err(why.into()),
                    Fallback::Native => {
                        let kernel = KernelVersion::read(root)?;
                        let cpus = match &target {
                            Some(t) => t.clone(),
                            None => sched::get_affinity(0)?.intersection(&allowed),
                        };
                        let iso = isolated.unwrap_or_default();
                        match iso.native_vmstat_protection(kernel, &cpus) {
                            Ok(how) => notes.push(format!(
                                "task isolation interface not available; native protection in effect: {how}"
                            )),
                            Err(whynot) => {
                                return Err(Error::Invalid(format!(
                                    "{why}; --fallback=native: no native vmstat protection: {whynot}"
                                )))
                            }
                        }
                    }
                },
            }
        }

        Ok(LaunchPlan {
            steps,
            notes,
            isolation,
        })
    }
}

impl LaunchPlan {
    /// Apply every step to the calling process, in order; stop at the first failure.
    pub fn apply_to_self(&self, root: &SysRoot) -> std::result::Result<(), StepError> {
        for step in &self.steps {
            self.apply_step(root, step).map_err(|source| StepError {
                step: step.clone(),
                source,
            })?;
        }
        Ok(())
    }

    fn isolation(&self) -> Result<&TaskIsolation> {
        self.isolation
            .as_ref()
            .ok_or(Error::Unsupported(Unsupported::NoProcFile))
    }

    fn apply_step(&self, root: &SysRoot, step: &Step) -> Result<()> {
        match step {
            Step::MoveToCgroup(dir) => root.write(
                dir.join("cgroup.procs"),
                format!("{}\n", std::process::id()),
            ),
            Step::SetAffinity(cpus) => sched::set_affinity(0, cpus),
            Step::DisableThp => sched::set_thp_disable(),
            Step::SetScheduler(p) => sched::set_scheduler(0, *p),
            Step::ConfigureQuiesce(q) => self.isolation()?.set_quiesce(*q),
            Step::Activate(f) => self.isolation()?.activate(*f),
            Step::SetInherit(i) => self.isolation()?.set_inherit(*i),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn fixture(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (p, c) in files {
            let full = d.path().join(p.trim_start_matches('/'));
            fs::create_dir_all(full.parent().unwrap()).unwrap();
            fs::write(full, c).unwrap();
        }
        d
    }

    fn base() -> tempfile::TempDir {
        fixture(&[
            ("/sys/devices/system/cpu/online", "0-3\n"),
            ("/sys/devices/system/cpu/isolated", "2-3\n"),
            ("/sys/devices/system/cpu/nohz_full", "2-3\n"),
            ("/proc/sys/kernel/osrelease", "6.12.57+deb12-rt-amd64\n"),
            (
                "/proc/self/mountinfo",
                "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
            ),
            ("/sys/fs/cgroup/rt/cgroup.procs", ""),
            ("/sys/fs/cgroup/rt/cpuset.cpus.effective", "3\n"),
            ("/sys/fs/cgroup/rt/cpuset.cpus.partition", "isolated\n"),
        ])
    }

    #[test]
    fn steps_come_in_the_documented_order() {
        let d = base();
        let spec = LaunchSpec {
            cpus: Some(CpuTarget::List("3".parse().unwrap())),
            no_thp: true,
            sched: Some(SchedPolicy::Other),
            cgroup: Some("/sys/fs/cgroup/rt".into()),
            ..Default::default()
        };
        let plan = spec.plan(&SysRoot::new(d.path())).unwrap();
        assert_eq!(
            plan.steps,
            vec![
                Step::MoveToCgroup("/sys/fs/cgroup/rt".into()),
                Step::SetAffinity("3".parse().unwrap()),
                Step::DisableThp,
                Step::SetScheduler(SchedPolicy::Other),
            ]
        );
    }

    #[test]
    fn isolated_means_every_isolated_cpu_within_the_cgroup() {
        let d = base();
        let root = SysRoot::new(d.path());
        let spec = LaunchSpec {
            cpus: Some(CpuTarget::Isolated),
            ..Default::default()
        };
        assert_eq!(
            spec.plan(&root).unwrap().steps,
            vec![Step::SetAffinity("2-3".parse().unwrap())]
        );
        let spec = LaunchSpec {
            cpus: Some(CpuTarget::Isolated),
            cgroup: Some("/sys/fs/cgroup/rt".into()),
            ..Default::default()
        };
        assert_eq!(
            spec.plan(&root).unwrap().steps[1],
            Step::SetAffinity("3".parse().unwrap())
        );
    }

    #[test]
    fn bad_requests_fail_before_any_change() {
        let d = base();
        let root = SysRoot::new(d.path());
        let cases: Vec<(LaunchSpec, &str)> = vec![
            (
                LaunchSpec {
                    cpus: Some(CpuTarget::List("7".parse().unwrap())),
                    ..Default::default()
                },
                "CPUs 7 are not available",
            ),
            (
                LaunchSpec {
                    cpus: Some(CpuTarget::List("2".parse().unwrap())),
                    cgroup: Some("/sys/fs/cgroup/rt".into()),
                    ..Default::default()
                },
                "in the cgroup (available: 3)",
            ),
            (
                LaunchSpec {
                    cgroup: Some("/sys/fs/cgroup/nope".into()),
                    ..Default::default()
                },
                "not a cgroup v2 directory",
            ),
            (
                LaunchSpec {
                    activate: true,
                    ..Default::default()
                },
                "--activate needs --quiesce",
            ),
            (
                LaunchSpec {
                    sched: Some(SchedPolicy::Fifo(0)),
                    ..Default::default()
                },
                "out of range",
            ),
        ];
        for (spec, want) in cases {
            let e = spec.plan(&root).unwrap_err().to_string();
            assert!(e.contains(want), "{spec:?}: {e}");
        }
    }

    #[test]
    fn stock_kernel_refuses_or_falls_back_natively() {
        if TaskIsolation::detect().is_ok() {
            return; // only meaningful on stock kernels; the emulator tests the other side
        }
        let d = base();
        let root = SysRoot::new(d.path());
        let mut spec = LaunchSpec {
            quiesce: Some(QuiesceConfig::every_time(abi::ISOL_F_QUIESCE_VMSTATS)),
            cpus: Some(CpuTarget::Isolated),
            ..Default::default()
        };
        let e = spec.plan(&root).unwrap_err();
        assert!(
            matches!(e, Error::Unsupported(Unsupported::NoProcFile)),
            "{e}"
        );

        spec.fallback = Fallback::Native;
        let plan = spec.plan(&root).unwrap();
        assert_eq!(plan.steps, vec![Step::SetAffinity("2-3".parse().unwrap())]);
        assert!(
            plan.notes[0].contains("native protection in effect"),
            "{:?}",
            plan.notes
        );

        spec.cpus = Some(CpuTarget::List("0-1".parse().unwrap()));
        let e = spec.plan(&root).unwrap_err().to_string();
        assert!(e.contains("no native vmstat protection: CPUs 0-1"), "{e}");
    }
}
