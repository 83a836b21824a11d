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
    /// What the step does, for messages (`failed to <describe>`).
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

/// Check that `dir` (a kernel path) is a cgroup v2 directory a task can join usefully, and
/// return the cgroup2 mount it is under.
fn check_cgroup_dir(root: &SysRoot, dir: &Path) -> Result<PathBuf> {
    if !dir.is_absolute() {
        return Err(Error::Invalid(format!(
            "cgroup path {} must be absolute",
            dir.display()
        )));
    }
    let mount = topology::cgroup2_mount(root)?
        .ok_or_else(|| Error::Invalid("no cgroup v2 file system is mounted".into()))?;
    if !dir.starts_with(&mount) || !root.path(dir.join("cgroup.procs")).is_file() {
        return Err(Error::Invalid(format!(
            "{} is not a cgroup v2 directory (cgroup2 is mounted at {})",
            dir.display(),
            mount.display()
        )));
    }
    let part = dir.join("cpuset.cpus.partition");
    if let Some(state) = root.read_value_opt(&part)? {
        // "isolated invalid (<reason>)", "root invalid (...)": the CPUs are not what the user
        // set up, and a latency-critical workload must not start there unnoticed.
        if state.contains("invalid") {
            return Err(Error::Invalid(format!(
                "cgroup {} is an invalid partition: {}",
                dir.display(),
                state.trim()
            )));
        }
    }
    Ok(mount)
}

/// Refuse quiesce bits the kernel does not report. `features` is PR_ISOL_FEAT_GET's mask;
/// the supported bits are asked for (FEAT_GET with ISOL_F_QUIESCE) only when the kernel has
/// the quiesce feature at all, since otherwise that call is invalid.
fn check_quiesce_supported(
    mask: u64,
    features: u64,
    supported_quiesce: impl FnOnce() -> Result<u64>,
) -> Result<()> {
    let supported = if features & abi::ISOL_F_QUIESCE != 0 {
        supported_quiesce()?
    } else {
        0
    };
    let missing = mask & !supported;
    if missing != 0 {
        return Err(Error::Invalid(format!(
            "quiesce {} is not supported by this kernel (supported: {})",
            quiesce_names(missing),
            quiesce_names(supported)
        )));
    }
    Ok(())
}

impl LaunchSpec {
    /// Resolve and check everything. Nothing is changed; an error here means nothing would
    /// be started. `root` is where /proc and /sys are read; task-isolation detection always
    /// looks at the running kernel.
    ///
    /// Long because it is the launch's checks in the order chisol applies them, a few lines each:
    /// one body keeps that order visible.
    pub fn plan(&self, root: &SysRoot) -> Result<LaunchPlan> {
        let mut steps = Vec::new();
        let mut notes = Vec::new();

        if self.activate && self.quiesce.is_none() {
            return Err(Error::Invalid(
                "--activate needs --quiesce: there is nothing configured to activate".into(),
            ));
        }

        // cgroup first: it constrains the CPUs. sched_setaffinity silently drops CPUs outside
        // the task's cpuset, so every check below is against the cpuset the task will be in.
        let online = topology::online_cpus(root)?;
        // Discovery walks the cgroup tree, whose size chisol does not control: only when an
        // answer needs it (--isolated, native fallback, an error's hint).
        let cell = std::cell::OnceCell::new();
        let isolated = || -> Result<&IsolatedCpus> {
            if let Some(v) = cell.get() {
                return Ok(v);
            }
            let v = IsolatedCpus::discover(root)?;
            Ok(cell.get_or_init(|| v))
        };
        let (allowed, where_) = match &self.cgroup {
            Some(dir) => {
                let mount = check_cgroup_dir(root, dir)?;
                steps.push(Step::MoveToCgroup(dir.clone()));
                let c = topology::cgroup_cpuset_cpus(root, &mount, dir)?;
                (
                    c.map_or(online.clone(), |c| online.intersection(&c)),
                    format!("in cgroup {}", dir.display()),
                )
            }
            None => match topology::task_cpuset_cpus(root, "self")? {
                Some(c) => (online.intersection(&c), "in this task's cpuset".to_string()),
                None => (online.clone(), "online".to_string()),
            },
        };

        // Isolated CPUs outside `allowed` can only be partition CPUs: say how to reach them.
        let partition_hint = |cpus: &CpuSet| -> Result<String> {
            let dirs: Vec<String> = isolated()?
                .partitions
                .iter()
                .filter(|p| !p.cpus.is_disjoint(cpus))
                .map(|p| format!("{} (CPUs {})", p.path.display(), p.cpus))
                .collect();
            Ok(if dirs.is_empty() {
                String::new()
            } else {
                format!(
                    "; they belong to the isolated partition {}: use --cgroup to run there",
                    dirs.join(", ")
                )
            })
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
                        "CPUs {off} are not available (available {where_}: {allowed}){}",
                        partition_hint(&off)?
                    )));
                }
                Some(cpus.clone())
            }
            Some(CpuTarget::Isolated) => {
                let iso = isolated()?.all();
                if iso.is_empty() {
                    return Err(Error::Invalid(
                        "--isolated: this machine has no isolated CPUs (no isolcpus=domain, nohz_full= or isolated cpuset partition)".into(),
                    ));
                }
                let usable = iso.intersection(&allowed);
                let unreachable = iso.difference(&allowed);
                if usable.is_empty() {
                    return Err(Error::Invalid(format!(
                        "--isolated: the isolated CPUs {iso} are not available (available {where_}: {allowed}){}",
                        partition_hint(&unreachable)?
                    )));
                }
                if !unreachable.is_empty() {
                    notes.push(format!(
                        "isolated CPUs {unreachable} are not available {where_}, running on {usable}{}",
                        partition_hint(&unreachable)?
                    ));
                }
                Some(usable)
            }
        };
        if let Some(t) = &target {
            let domain = || {
                topology::read_cpu_list_opt(root, "/sys/devices/system/cpu/isolated")
                    .map(Option::unwrap_or_default)
            };
            if t.len() > 1 && t.is_subset(&domain()?) {
                notes.push(format!(
                    "CPUs {t} are isolcpus domain CPUs: the scheduler does not balance tasks between them, so pin each thread of a multi-threaded workload to its own CPU"
                ));
            }
            steps.push(Step::SetAffinity(t.clone()));
        }

        if self.no_thp {
            steps.push(Step::DisableThp);
        }

        if let Some(p) = self.sched {
            p.validate()?;
            if p.is_realtime() && !sched::may_use_realtime(p.priority())? {
                return Err(Error::Invalid(format!(
                    "setting {p} needs CAP_SYS_NICE (or RLIMIT_RTPRIO >= {}); run as root or grant the capability",
                    p.priority()
                )));
            }
            if p.is_realtime() {
                // RT throttling lets non-RT tasks run for (period - runtime) of every period:
                // a busy-polling workload sees that as a regular stall on its CPU.
                let runtime = root.read_value_opt("/proc/sys/kernel/sched_rt_runtime_us")?;
                let period = root.read_value_opt("/proc/sys/kernel/sched_rt_period_us")?;
                // A runtime of the whole period or more throttles nothing (7.x-rt boots
                // with 1000000 of 1000000); -1 turns throttling off.
                let throttles = |r: &str, per: &str| match (r.parse::<i64>(), per.parse::<i64>()) {
                    (Ok(r), Ok(per)) => r >= 0 && r < per,
                    _ => r != "-1",
                };
                if let (Some(r), Some(per)) = (runtime, period) {
                    if throttles(r.trim(), per.trim()) {
                        notes.push(format!(
                            "RT throttling is on (kernel.sched_rt_runtime_us={}, sched_rt_period_us={}): a {p} task that never sleeps is stopped for the rest of each period; set sched_rt_runtime_us to -1 for busy-polling workloads",
                            r.trim(),
                            per.trim()
                        ));
                    }
                }
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
                        check_quiesce_supported(q.mask, ti.features()?, || ti.supported_quiesce())?;
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
                        // The CPUs the workload will run on: attaching to a cpuset cgroup
                        // can reset the affinity to the cgroup's CPUs, so without -c the
                        // whole cgroup must be protected.
                        let cpus = match (&target, &self.cgroup) {
                            (Some(t), _) => t.clone(),
                            (None, Some(_)) => allowed.clone(),
                            (None, None) => sched::get_affinity(0)?.intersection(&allowed),
                        };
                        match isolated()?.native_vmstat_protection(kernel, &cpus) {
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
            Step::SetAffinity(cpus) => {
                sched::set_affinity(0, cpus)?;
                // The kernel silently drops CPUs outside the task's cpuset: read back.
                let got = sched::get_affinity(0)?;
                if &got != cpus {
                    return Err(Error::Invalid(format!(
                        "the kernel narrowed the affinity to {got}: CPUs {} are outside this task's cpuset",
                        cpus.difference(&got)
                    )));
                }
                Ok(())
            }
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
            ("/sys/fs/cgroup/bad/cgroup.procs", ""),
            (
                "/sys/fs/cgroup/bad/cpuset.cpus.partition",
                "isolated invalid (Cpu list in cpuset.cpus not exclusive)\n",
            ),
            ("/etc/fake/cgroup.procs", ""),
        ])
    }

    #[test]
    fn isolated_cpus_outside_the_tasks_cpuset_are_named_with_their_partition() {
        let d = base();
        // Like 6.12: the root cgroup's effective CPUs exclude the partition's CPU 3.
        fs::write(d.path().join("proc/self/cgroup"), "0::/\n").unwrap();
        fs::write(
            d.path().join("sys/fs/cgroup/cpuset.cpus.effective"),
            "0-2\n",
        )
        .unwrap();
        let root = SysRoot::new(d.path());
        let spec = LaunchSpec {
            cpus: Some(CpuTarget::Isolated),
            ..Default::default()
        };
        let plan = spec.plan(&root).unwrap();
        assert_eq!(plan.steps, vec![Step::SetAffinity("2".parse().unwrap())]);
        assert!(
            plan.notes[0].contains(
                "isolated CPUs 3 are not available in this task's cpuset, running on 2; they belong to the isolated partition /sys/fs/cgroup/rt (CPUs 3): use --cgroup"
            ),
            "{:?}",
            plan.notes
        );
        let spec = LaunchSpec {
            cpus: Some(CpuTarget::List("3".parse().unwrap())),
            ..Default::default()
        };
        let e = spec.plan(&root).unwrap_err().to_string();
        assert!(e.contains("CPUs 3 are not available (available in this task's cpuset: 0-2); they belong to the isolated partition"), "{e}");
    }

    #[test]
    fn rt_policies_warn_about_rt_throttling() {
        let d = base();
        fs::create_dir_all(d.path().join("proc/sys/kernel")).unwrap();
        fs::write(
            d.path().join("proc/sys/kernel/sched_rt_runtime_us"),
            "950000\n",
        )
        .unwrap();
        fs::write(
            d.path().join("proc/sys/kernel/sched_rt_period_us"),
            "1000000\n",
        )
        .unwrap();
        let root = SysRoot::new(d.path());
        let spec = LaunchSpec {
            sched: Some(SchedPolicy::Fifo(1)),
            ..Default::default()
        };
        if !sched::may_use_realtime(1).unwrap() {
            // Without CAP_SYS_NICE the plan refuses before it gets to the note.
            let e = spec.plan(&root).unwrap_err().to_string();
            assert!(e.contains("needs CAP_SYS_NICE"), "{e}");
            return;
        }
        let plan = spec.plan(&root).unwrap();
        assert!(
            plan.notes[0].starts_with("RT throttling is on (kernel.sched_rt_runtime_us=950000, sched_rt_period_us=1000000)"),
            "{:?}",
            plan.notes
        );
        fs::write(d.path().join("proc/sys/kernel/sched_rt_runtime_us"), "-1\n").unwrap();
        assert!(spec.plan(&root).unwrap().notes.is_empty());
        // 7.x-rt's default: the whole period, nothing throttled.
        fs::write(
            d.path().join("proc/sys/kernel/sched_rt_runtime_us"),
            "1000000\n",
        )
        .unwrap();
        assert!(spec.plan(&root).unwrap().notes.is_empty());
        fs::write(
            d.path().join("proc/sys/kernel/sched_rt_runtime_us"),
            "999999\n",
        )
        .unwrap();
        assert!(spec.plan(&root).unwrap().notes[0].starts_with("RT throttling is on"));
        let spec = LaunchSpec {
            sched: Some(SchedPolicy::Other),
            ..Default::default()
        };
        fs::write(
            d.path().join("proc/sys/kernel/sched_rt_runtime_us"),
            "950000\n",
        )
        .unwrap();
        assert!(
            spec.plan(&root).unwrap().notes.is_empty(),
            "only RT policies are throttled"
        );
    }

    #[test]
    fn several_domain_cpus_get_a_load_balancing_note() {
        let d = base();
        let spec = LaunchSpec {
            cpus: Some(CpuTarget::List("2-3".parse().unwrap())),
            ..Default::default()
        };
        let plan = spec.plan(&SysRoot::new(d.path())).unwrap();
        assert!(
            plan.notes[0].contains("does not balance"),
            "{:?}",
            plan.notes
        );
        let spec = LaunchSpec {
            cpus: Some(CpuTarget::List("3".parse().unwrap())),
            ..Default::default()
        };
        assert!(spec.plan(&SysRoot::new(d.path())).unwrap().notes.is_empty());
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
                "CPUs 2 are not available (available in cgroup /sys/fs/cgroup/rt: 3)",
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
                    cgroup: Some("/sys/fs/cgroup/bad".into()),
                    ..Default::default()
                },
                "cgroup /sys/fs/cgroup/bad is an invalid partition: isolated invalid (Cpu list in cpuset.cpus not exclusive)",
            ),
            (
                LaunchSpec {
                    cgroup: Some("/etc/fake".into()),
                    ..Default::default()
                },
                "/etc/fake is not a cgroup v2 directory (cgroup2 is mounted at /sys/fs/cgroup)",
            ),
            (
                LaunchSpec {
                    cgroup: Some("rt".into()),
                    ..Default::default()
                },
                "cgroup path rt must be absolute",
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
    fn quiesce_bits_the_kernel_does_not_report_are_refused() {
        let vmstat = abi::ISOL_F_QUIESCE_VMSTATS;
        check_quiesce_supported(vmstat, abi::ISOL_F_QUIESCE, || Ok(vmstat)).unwrap();
        // The kernel has the quiesce feature but not this bit.
        let e = check_quiesce_supported(vmstat, abi::ISOL_F_QUIESCE, || Ok(0)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "quiesce vmstat_sync is not supported by this kernel (supported: none)"
        );
        // A bit this library has no name for, beside a supported one: only it is named.
        let e = check_quiesce_supported(vmstat | 2, abi::ISOL_F_QUIESCE, || Ok(vmstat))
            .unwrap_err()
            .to_string();
        assert!(e.contains("(supported: vmstat_sync)"), "{e}");
        // No ISOL_F_QUIESCE feature: the supported bits are not asked for (that call would
        // be invalid), and nothing is supported.
        let e = check_quiesce_supported(vmstat, 0, || -> Result<u64> {
            panic!("FEAT_GET(ISOL_F_QUIESCE) without the feature")
        })
        .unwrap_err();
        assert!(e.to_string().contains("(supported: none)"), "{e}");
        // The query's own failure is reported as it is.
        let e = check_quiesce_supported(vmstat, abi::ISOL_F_QUIESCE, || {
            Err(Error::syscall("x", nix::errno::Errno::EOPNOTSUPP))
        })
        .unwrap_err();
        assert_eq!(e.errno(), Some(libc::EOPNOTSUPP));
    }

    /// The kernel narrows an affinity silently (to the task's cpuset, and to its nr_cpu_ids);
    /// the read-back turns that into a failure before exec. Run on a thread of its own, so
    /// only that thread's affinity changes.
    #[test]
    fn a_narrowed_affinity_fails_the_step() {
        std::thread::spawn(|| {
            let now = sched::get_affinity(0).unwrap();
            // A CPU far above nr_cpu_ids: the kernel ignores the bitmap beyond its own size
            // and applies the rest, as it does for a CPU outside the cpuset.
            let mut wanted = now.clone();
            wanted.insert(100_000);
            let plan = LaunchPlan {
                steps: vec![Step::SetAffinity(wanted)],
                notes: Vec::new(),
                isolation: None,
            };
            let e = plan.apply_to_self(&SysRoot::host()).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("failed to set CPU affinity to {now},100000: the kernel narrowed the affinity to {now}: CPUs 100000 are outside this task's cpuset")
            );
            let plan = LaunchPlan {
                steps: vec![Step::SetAffinity(now.clone())],
                notes: Vec::new(),
                isolation: None,
            };
            plan.apply_to_self(&SysRoot::host()).unwrap();
        })
        .join()
        .unwrap();
    }

    #[test]
    fn stock_kernel_refuses_or_falls_back_natively() {
        assert!(
            TaskIsolation::detect().is_err(),
            "this test needs a stock kernel; the emulator tests the patched side"
        );
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
            plan.notes
                .iter()
                .any(|n| n.contains("native protection in effect")),
            "{:?}",
            plan.notes
        );

        spec.cpus = Some(CpuTarget::List("0-1".parse().unwrap()));
        let e = spec.plan(&root).unwrap_err().to_string();
        assert!(e.contains("no native vmstat protection: CPUs 0-1"), "{e}");
    }
}
