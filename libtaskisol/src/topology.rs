//! What the kernel says about its CPUs: online/present/possible, which CPUs are isolated and
//! by which mechanism (isolcpus domain, nohz_full, cgroup v2 isolated partitions), and the
//! kernel version that decides which protections apply.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::cpuset::CpuSet;
use crate::error::{Error, Result};
use crate::sysroot::SysRoot;

/// A kernel release (`6.12.57+deb12-rt-amd64` -> 6.12.57).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KernelVersion {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Patch level (0 when absent).
    pub patch: u32,
}

impl KernelVersion {
    /// Build a version.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        KernelVersion {
            major,
            minor,
            patch,
        }
    }

    /// Parse a release string as in `uname -r`.
    pub fn parse(release: &str) -> Option<Self> {
        let mut nums = release.trim().split(|c: char| !c.is_ascii_digit());
        let major = nums.next()?.parse().ok()?;
        let minor = nums.next()?.parse().ok()?;
        let patch = nums.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        Some(KernelVersion::new(major, minor, patch))
    }

    /// The running (or fixture) kernel, from `/proc/sys/kernel/osrelease`.
    pub fn read(root: &SysRoot) -> Result<Self> {
        root.read_parsed("/proc/sys/kernel/osrelease", |rel| {
            KernelVersion::parse(rel).ok_or_else(|| "not a kernel release".to_string())
        })
    }

    /// Whether this version is at least `major.minor`.
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }
}

impl fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Read a CPU list file (e.g. `/sys/devices/system/cpu/online`); the error names the file.
///
/// `(null)` reads as the empty set: the kernel prints a cpumask that was never allocated that
/// way (seen in `/sys/devices/system/cpu/nohz_full` of Debian 6.1 and 6.12 booted without
/// `nohz_full=`).
pub fn read_cpu_list(root: &SysRoot, abs: &str) -> Result<CpuSet> {
    root.read_parsed(abs, |v| {
        if v.trim() == "(null)" {
            return Ok(CpuSet::new());
        }
        CpuSet::parse_list(v).map_err(|e| e.reason)
    })
}

/// Like [`read_cpu_list`], but a file that does not exist is the empty set.
pub fn read_cpu_list_opt(root: &SysRoot, abs: &str) -> Result<Option<CpuSet>> {
    if !root.exists(abs) {
        return Ok(None);
    }
    read_cpu_list(root, abs).map(Some)
}

/// Read a hex CPU mask file (e.g. `/proc/irq/default_smp_affinity`).
pub fn read_cpu_mask(root: &SysRoot, abs: &str) -> Result<CpuSet> {
    root.read_parsed(abs, |v| CpuSet::parse_mask(v).map_err(|e| e.reason))
}

/// Online CPUs.
pub fn online_cpus(root: &SysRoot) -> Result<CpuSet> {
    read_cpu_list(root, "/sys/devices/system/cpu/online")
}

/// Present CPUs.
pub fn present_cpus(root: &SysRoot) -> Result<CpuSet> {
    read_cpu_list(root, "/sys/devices/system/cpu/present")
}

/// Possible CPUs (the kernel's nr_cpu_ids is `possible.last() + 1`).
pub fn possible_cpus(root: &SysRoot) -> Result<CpuSet> {
    read_cpu_list(root, "/sys/devices/system/cpu/possible")
}

/// Where cgroup v2 is mounted, from `/proc/self/mountinfo` (the first `cgroup2` mount), as
/// a kernel path. `None` when no cgroup2 file system is mounted.
pub fn cgroup2_mount(root: &SysRoot) -> Result<Option<PathBuf>> {
    Ok(mounts_of(root, "cgroup2", None)?.into_iter().next())
}

/// Mount points from `/proc/self/mountinfo` whose file system type is `fstype` and, when
/// given, whose super options contain `option` (e.g. the cgroup v1 `cpuset` hierarchy).
fn mounts_of(root: &SysRoot, fstype: &str, option: Option<&str>) -> Result<Vec<PathBuf>> {
    let text = match root.read_to_string("/proc/self/mountinfo") {
        Ok(t) => t,
        Err(e) if e.errno() == Some(libc::ENOENT) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mut r = right.split_whitespace();
        if r.next() != Some(fstype) {
            continue;
        }
        let super_opts = r.nth(1).unwrap_or("");
        if option.is_some_and(|o| !super_opts.split(',').any(|x| x == o)) {
            continue;
        }
        if let Some(mp) = left.split_whitespace().nth(4) {
            let mp = unescape_mountinfo(mp).map_err(|reason| Error::Parse {
                path: root.path("/proc/self/mountinfo"),
                input: mp.to_string(),
                reason,
            })?;
            out.push(PathBuf::from(mp));
        }
    }
    Ok(out)
}

/// The CPUs the cpuset of cgroup v2 directory `dir` (a kernel path below `mount`) lets its
/// tasks use: its `cpuset.cpus.effective`, or the nearest ancestor's when the cpuset
/// controller is not enabled in `dir`. `None` when no level has the file (cpuset is bound
/// to cgroup v1, or not built).
pub fn cgroup_cpuset_cpus(root: &SysRoot, mount: &Path, dir: &Path) -> Result<Option<CpuSet>> {
    for d in dir.ancestors().take_while(|d| d.starts_with(mount)) {
        let f = d.join("cpuset.cpus.effective");
        if let Some(c) = read_cpu_list_opt(root, &f.to_string_lossy())? {
            return Ok(Some(c));
        }
    }
    Ok(None)
}

/// The CPUs the cpusets of task `pid` ("self" or a number) allow: the cgroup v2 cpuset of its
/// cgroup and, on hybrid systems, the cgroup v1 `cpuset` hierarchy's `cpuset.effective_cpus`.
/// `sched_setaffinity` silently drops CPUs outside this set, so callers check against it.
/// `None` when neither can be read.
pub fn task_cpuset_cpus(root: &SysRoot, pid: &str) -> Result<Option<CpuSet>> {
    let text = match root.read_to_string(format!("/proc/{pid}/cgroup")) {
        Ok(t) => t,
        Err(e) if e.errno() == Some(libc::ENOENT) => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut result: Option<CpuSet> = None;
    let mut narrow = |c: CpuSet| {
        result = Some(match result.take() {
            Some(r) => r.intersection(&c),
            None => c,
        });
    };
    for line in text.lines() {
        // hierarchy-id:controllers:path; v2 is "0::/path".
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if (id, ctrls) == ("0", "") {
            if let Some(mount) = cgroup2_mount(root)? {
                if let Some(c) = cgroup_cpuset_cpus(root, &mount, &mount.join(rel))? {
                    narrow(c);
                }
            }
        } else if ctrls.split(',').any(|c| c == "cpuset") {
            for mount in mounts_of(root, "cgroup", Some("cpuset"))? {
                let f = mount.join(rel).join("cpuset.effective_cpus");
                if let Some(c) = read_cpu_list_opt(root, &f.to_string_lossy())? {
                    narrow(c);
                    break;
                }
            }
        }
    }
    Ok(result)
}

// mountinfo escapes space, tab, newline and backslash as \ooo octal. The kernel only writes
// byte values, so \400..\777 cannot come from it: refused rather than wrapped to a byte.
fn unescape_mountinfo(s: &str) -> std::result::Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = u32::from(b[i + 1] - b'0') * 64
                + u32::from(b[i + 2] - b'0') * 8
                + u32::from(b[i + 3] - b'0');
            let byte = u8::try_from(v).map_err(|_| {
                format!(
                    "octal escape {} is above \\377",
                    String::from_utf8_lossy(&b[i..i + 4])
                )
            })?;
            out.push(byte);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// A cgroup v2 cpuset partition whose `cpuset.cpus.partition` reads `isolated`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsolatedPartition {
    /// The cgroup directory, as a kernel path (`/sys/fs/cgroup/rt`).
    pub path: PathBuf,
    /// Its `cpuset.cpus.effective`.
    pub cpus: CpuSet,
}

/// Limits of the cgroup walk: a misbehaving tree must not make discovery unbounded.
const MAX_CGROUP_DEPTH: usize = 16;
const MAX_CGROUP_DIRS: usize = 100_000;

/// Every valid isolated partition below the cgroup v2 mount `mount` (a kernel path).
pub fn isolated_partitions(root: &SysRoot, mount: &Path) -> Result<Vec<IsolatedPartition>> {
    walk_partitions(root, mount, MAX_CGROUP_DEPTH, MAX_CGROUP_DIRS)
}

/// [`isolated_partitions`] with its limits as arguments, so tests can reach them.
fn walk_partitions(
    root: &SysRoot,
    mount: &Path,
    max_depth: usize,
    max_dirs: usize,
) -> Result<Vec<IsolatedPartition>> {
    let mut out = Vec::new();
    let mut stack = vec![(mount.to_path_buf(), 0usize)];
    let mut seen = 0usize;
    while let Some((dir, depth)) = stack.pop() {
        seen += 1;
        if seen > max_dirs {
            return Err(Error::Invalid(format!(
                "more than {max_dirs} cgroups below {}; not walking further",
                mount.display()
            )));
        }
        let part = dir.join("cpuset.cpus.partition");
        if dir != mount {
            if let Some(state) = root.read_value_opt(&part)? {
                // Invalid partitions read "isolated invalid (<reason>)".
                if state.trim() == "isolated" {
                    let eff = dir.join("cpuset.cpus.effective");
                    let cpus = read_cpu_list(root, &eff.to_string_lossy())?;
                    out.push(IsolatedPartition {
                        path: dir.clone(),
                        cpus,
                    });
                }
            }
        }
        if depth >= max_depth {
            continue;
        }
        let names = match root.read_dir_names(&dir) {
            Ok(n) => n,
            // A cgroup removed while walking.
            Err(e) if e.errno() == Some(libc::ENOENT) => continue,
            Err(e) => return Err(e),
        };
        for n in names {
            let child = dir.join(&n);
            if root.path(&child).is_dir() {
                stack.push((child, depth + 1));
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// The CPUs the kernel isolates, by mechanism.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IsolatedCpus {
    /// `isolcpus=` domain isolation (`/sys/devices/system/cpu/isolated`).
    pub domain: CpuSet,
    /// `nohz_full=` CPUs (`/sys/devices/system/cpu/nohz_full`; absent without NO_HZ_FULL).
    pub nohz_full: CpuSet,
    /// Valid cgroup v2 isolated partitions.
    pub partitions: Vec<IsolatedPartition>,
    /// The root cgroup's `cpuset.cpus.isolated` (6.8+), when it exists.
    pub cgroup_isolated: Option<CpuSet>,
}

impl IsolatedCpus {
    /// Discover isolation from the files of `root`.
    pub fn discover(root: &SysRoot) -> Result<Self> {
        let domain =
            read_cpu_list_opt(root, "/sys/devices/system/cpu/isolated")?.unwrap_or_default();
        let nohz_full =
            read_cpu_list_opt(root, "/sys/devices/system/cpu/nohz_full")?.unwrap_or_default();
        let (partitions, cgroup_isolated) = match cgroup2_mount(root)? {
            Some(mount) => {
                let iso = mount.join("cpuset.cpus.isolated");
                (
                    isolated_partitions(root, &mount)?,
                    read_cpu_list_opt(root, &iso.to_string_lossy())?,
                )
            }
            None => (Vec::new(), None),
        };
        Ok(IsolatedCpus {
            domain,
            nohz_full,
            partitions,
            cgroup_isolated,
        })
    }

    /// CPUs of all isolated partitions.
    pub fn partition_cpus(&self) -> CpuSet {
        let mut s = self
            .partitions
            .iter()
            .fold(CpuSet::new(), |acc, p| acc.union(&p.cpus));
        if let Some(iso) = &self.cgroup_isolated {
            // 6.8+ root file: partitions (and, 6.12+, boot isolcpus CPUs).
            s = s.union(&iso.difference(&self.domain));
        }
        s
    }

    /// Every isolated CPU: domain ∪ nohz_full ∪ isolated partitions.
    pub fn all(&self) -> CpuSet {
        self.domain
            .union(&self.nohz_full)
            .union(&self.partition_cpus())
    }

    /// Which mechanisms isolate `cpu`, in the kernel's words.
    pub fn mechanisms(&self, cpu: usize) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.domain.contains(cpu) {
            v.push("isolcpus domain");
        }
        if self.nohz_full.contains(cpu) {
            v.push("nohz_full");
        }
        if self.partition_cpus().contains(cpu) {
            v.push("isolated cpuset partition");
        }
        v
    }

    /// Whether the kernel itself keeps deferred vmstat work off every CPU of `cpus`,
    /// the protection that task isolation's `vmstat_sync` gives on patched kernels.
    ///
    /// Since 6.5 vmstat_shepherd skips CPUs for which `cpu_is_isolated()` is true: isolcpus
    /// domain and nohz_full CPUs; cpuset isolated partitions count from 6.8. Returns a
    /// description of the protection in effect, or why it is not.
    pub fn native_vmstat_protection(
        &self,
        kernel: KernelVersion,
        cpus: &CpuSet,
    ) -> std::result::Result<String, String> {
        if cpus.is_empty() {
            return Err("no target CPUs".into());
        }
        if !kernel.at_least(6, 5) {
            return Err(format!(
                "Linux {kernel} predates 6.5, whose vmstat_shepherd skips isolated CPUs"
            ));
        }
        let mut protected = self.domain.union(&self.nohz_full);
        if kernel.at_least(6, 8) {
            protected = protected.union(&self.partition_cpus());
        }
        let unprotected = cpus.difference(&protected);
        if !unprotected.is_empty() {
            return Err(format!(
                "CPUs {unprotected} are not isolcpus domain or nohz_full CPUs{}",
                if kernel.at_least(6, 8) {
                    " and not in an isolated cpuset partition"
                } else {
                    " (isolated cpuset partitions count only from 6.8)"
                }
            ));
        }
        let mut how: Vec<String> = Vec::new();
        for cpu in cpus.iter() {
            how.push(format!("{cpu}: {}", self.mechanisms(cpu).join(" + ")));
        }
        Ok(format!(
            "Linux {kernel} skips deferred vmstat work on isolated CPUs (vmstat_shepherd, 6.5+); CPUs {cpus} are isolated ({})",
            how.join("; ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (p, c) in files {
            let full = d.path().join(p.trim_start_matches('/'));
            fs::create_dir_all(full.parent().unwrap()).unwrap();
            fs::write(full, c).unwrap();
        }
        d
    }

    #[test]
    fn versions() {
        let v = KernelVersion::parse("6.12.57+deb12-rt-amd64").unwrap();
        assert_eq!(v, KernelVersion::new(6, 12, 57));
        assert!(v.at_least(6, 5) && !v.at_least(6, 13));
        assert_eq!(
            KernelVersion::parse("6.1.0-57-amd64").unwrap(),
            KernelVersion::new(6, 1, 0)
        );
        assert_eq!(
            KernelVersion::parse("7.0-rc1").unwrap(),
            KernelVersion::new(7, 0, 0)
        );
        assert!(KernelVersion::parse("garbage").is_none());
        assert_eq!(v.to_string(), "6.12.57");
    }

    #[test]
    fn cpu_files_are_read_where_the_kernel_keeps_them() {
        let d = tree(&[
            ("/sys/devices/system/cpu/online", "0-1\n"),
            ("/sys/devices/system/cpu/present", "0-3\n"),
            ("/sys/devices/system/cpu/possible", "0-7\n"),
            ("/sys/devices/system/cpu/nohz_full", "(null)\n"),
            ("/proc/irq/default_smp_affinity", "0c\n"),
        ]);
        let root = SysRoot::new(d.path());
        assert_eq!(online_cpus(&root).unwrap().to_string(), "0-1");
        assert_eq!(present_cpus(&root).unwrap().to_string(), "0-3");
        assert_eq!(possible_cpus(&root).unwrap().to_string(), "0-7");
        assert_eq!(
            read_cpu_mask(&root, "/proc/irq/default_smp_affinity")
                .unwrap()
                .to_string(),
            "2-3"
        );
        let e = read_cpu_mask(&root, "/sys/devices/system/cpu/online").unwrap_err();
        assert!(matches!(e, Error::Parse { .. }), "{e}");
        assert_eq!(
            read_cpu_list_opt(&root, "/sys/devices/system/cpu/nohz_full").unwrap(),
            Some(CpuSet::new()),
            "(null) is the empty set"
        );
        assert_eq!(
            read_cpu_list_opt(&root, "/sys/devices/system/cpu/isolated").unwrap(),
            None
        );
    }

    #[test]
    fn discovers_all_three_mechanisms() {
        let d = tree(&[
            ("/sys/devices/system/cpu/isolated", "2-3\n"),
            ("/sys/devices/system/cpu/nohz_full", "2-4\n"),
            (
                "/proc/self/mountinfo",
                "30 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n",
            ),
            ("/sys/fs/cgroup/cpuset.cpus.isolated", "2-3,6\n"),
            ("/sys/fs/cgroup/rt/cpuset.cpus.partition", "isolated\n"),
            ("/sys/fs/cgroup/rt/cpuset.cpus.effective", "6\n"),
            (
                "/sys/fs/cgroup/bad/cpuset.cpus.partition",
                "isolated invalid (Cpu list in cpuset.cpus not exclusive)\n",
            ),
            ("/sys/fs/cgroup/bad/cpuset.cpus.effective", "7\n"),
            ("/sys/fs/cgroup/member/cpuset.cpus.partition", "member\n"),
        ]);
        let root = SysRoot::new(d.path());
        let iso = IsolatedCpus::discover(&root).unwrap();
        assert_eq!(iso.domain.to_string(), "2-3");
        assert_eq!(iso.nohz_full.to_string(), "2-4");
        assert_eq!(
            iso.partitions.len(),
            1,
            "invalid partitions are not isolated"
        );
        assert_eq!(iso.partitions[0].path, Path::new("/sys/fs/cgroup/rt"));
        assert_eq!(iso.all().to_string(), "2-4,6");
        assert_eq!(iso.mechanisms(2), vec!["isolcpus domain", "nohz_full"]);
        assert_eq!(iso.mechanisms(6), vec!["isolated cpuset partition"]);
    }

    #[test]
    fn nothing_isolated_on_a_plain_machine() {
        let d = tree(&[("/sys/devices/system/cpu/isolated", "\n")]);
        let iso = IsolatedCpus::discover(&SysRoot::new(d.path())).unwrap();
        assert!(iso.all().is_empty());
    }

    #[test]
    fn native_protection_follows_kernel_versions() {
        let iso = IsolatedCpus {
            domain: "2".parse().unwrap(),
            nohz_full: "3".parse().unwrap(),
            partitions: vec![IsolatedPartition {
                path: "/sys/fs/cgroup/rt".into(),
                cpus: "5".parse().unwrap(),
            }],
            cgroup_isolated: None,
        };
        let c23: CpuSet = "2-3".parse().unwrap();
        let ok = iso
            .native_vmstat_protection(KernelVersion::new(6, 12, 0), &c23)
            .unwrap();
        assert!(ok.contains("2: isolcpus domain; 3: nohz_full"), "{ok}");
        let no = iso
            .native_vmstat_protection(KernelVersion::new(6, 1, 0), &c23)
            .unwrap_err();
        assert!(no.contains("predates 6.5"), "{no}");
        let c5: CpuSet = "5".parse().unwrap();
        assert!(iso
            .native_vmstat_protection(KernelVersion::new(6, 6, 0), &c5)
            .is_err());
        assert!(iso
            .native_vmstat_protection(KernelVersion::new(6, 8, 0), &c5)
            .is_ok());
        let c01: CpuSet = "0-1".parse().unwrap();
        let no = iso
            .native_vmstat_protection(KernelVersion::new(6, 12, 0), &c01)
            .unwrap_err();
        assert!(no.contains("CPUs 0-1"), "{no}");
    }

    #[test]
    fn task_cpuset_follows_v2_and_v1_hierarchies() {
        let d = tree(&[
            (
                "/proc/self/mountinfo",
                "30 1 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
                 31 1 0:27 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n",
            ),
            ("/proc/self/cgroup", "5:cpuset:/box\n0::/user.slice/a\n"),
            ("/sys/fs/cgroup/unified/cpuset.cpus.effective", "0-3\n"),
            (
                "/sys/fs/cgroup/unified/user.slice/cpuset.cpus.effective",
                "0-2\n",
            ),
            ("/sys/fs/cgroup/cpuset/box/cpuset.effective_cpus", "1-3\n"),
        ]);
        let root = SysRoot::new(d.path());
        // v2: user.slice/a has no cpuset file, so its parent's applies; v1 narrows further.
        assert_eq!(
            task_cpuset_cpus(&root, "self")
                .unwrap()
                .unwrap()
                .to_string(),
            "1-2"
        );
        let none = tree(&[("/proc/self/cgroup", "0::/\n")]);
        assert_eq!(
            task_cpuset_cpus(&SysRoot::new(none.path()), "self").unwrap(),
            None
        );
        // No such task: no cpuset; a cgroup file that cannot be read is an error.
        assert_eq!(task_cpuset_cpus(&root, "4242").unwrap(), None);
        let bad = tree(&[("/proc/self/cgroup/x", "")]);
        let e = task_cpuset_cpus(&SysRoot::new(bad.path()), "self").unwrap_err();
        assert_eq!(e.errno(), Some(libc::EISDIR));
    }

    #[test]
    fn cgroup_cpuset_is_the_nearest_level_with_the_file_within_the_mount() {
        let d = tree(&[
            ("/sys/fs/cgroup/cpuset.cpus.effective", "0-3\n"),
            ("/sys/fs/cgroup/a/cpuset.cpus.effective", "1-3\n"),
            ("/sys/fs/cgroup/a/b/c/cgroup.procs", ""),
            ("/sys/fs/cpuset.cpus.effective", "7\n"),
            ("/etc/x/cgroup.procs", ""),
        ]);
        let root = SysRoot::new(d.path());
        let m = Path::new("/sys/fs/cgroup");
        let cpus = |dir: &str| {
            cgroup_cpuset_cpus(&root, m, Path::new(dir))
                .unwrap()
                .map(|c| c.to_string())
        };
        assert_eq!(cpus("/sys/fs/cgroup/a").as_deref(), Some("1-3"));
        assert_eq!(cpus("/sys/fs/cgroup/a/b/c").as_deref(), Some("1-3"));
        assert_eq!(cpus("/sys/fs/cgroup/z").as_deref(), Some("0-3"));
        assert_eq!(cpus("/sys/fs/cgroup").as_deref(), Some("0-3"));
        // Never above the mount: /sys/fs has a file, but it is no cgroup's.
        std::fs::remove_file(d.path().join("sys/fs/cgroup/cpuset.cpus.effective")).unwrap();
        assert_eq!(cpus("/sys/fs/cgroup/z"), None);
        assert_eq!(cpus("/etc/x"), None);
    }

    #[test]
    fn mounts_are_found_by_type_and_super_option() {
        let d = tree(&[(
            "/proc/self/mountinfo",
            "22 1 0:20 / /proc rw - proc proc rw\n\
             30 1 0:26 / /sys/fs/cgroup/uni\\040fied rw - cgroup2 cgroup2 rw,nsdelegate\n\
             31 1 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
             32 1 0:28 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n\
             33 1 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
             a line without the separator\n",
        )]);
        let root = SysRoot::new(d.path());
        assert_eq!(
            mounts_of(&root, "cgroup", Some("cpuset")).unwrap(),
            [PathBuf::from("/sys/fs/cgroup/cpuset")]
        );
        assert_eq!(mounts_of(&root, "cgroup", None).unwrap().len(), 3);
        assert_eq!(
            cgroup2_mount(&root).unwrap(),
            Some(PathBuf::from("/sys/fs/cgroup/uni fied"))
        );
        // No mountinfo: nothing mounted. Any other error is one.
        let none = tree(&[("/proc/self/cgroup", "0::/\n")]);
        assert_eq!(cgroup2_mount(&SysRoot::new(none.path())).unwrap(), None);
        let bad = tree(&[("/proc/self/mountinfo/x", "")]);
        let e = cgroup2_mount(&SysRoot::new(bad.path())).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EISDIR));
    }

    #[test]
    fn the_partition_walk_is_bounded() {
        let d = tree(&[
            ("/sys/fs/cgroup/a/cpuset.cpus.partition", "isolated\n"),
            ("/sys/fs/cgroup/a/cpuset.cpus.effective", "1\n"),
            ("/sys/fs/cgroup/a/b/cpuset.cpus.partition", "isolated\n"),
            ("/sys/fs/cgroup/a/b/cpuset.cpus.effective", "2\n"),
            ("/sys/fs/cgroup/a/b/c/cpuset.cpus.partition", "isolated\n"),
            ("/sys/fs/cgroup/a/b/c/cpuset.cpus.effective", "3\n"),
        ]);
        let root = SysRoot::new(d.path());
        let m = Path::new("/sys/fs/cgroup");
        let cpus = |depth, dirs| -> Vec<String> {
            walk_partitions(&root, m, depth, dirs)
                .unwrap()
                .iter()
                .map(|p| p.cpus.to_string())
                .collect()
        };
        assert_eq!(
            cpus(16, 4),
            ["1", "2", "3"],
            "the mount and 3 levels: 4 dirs"
        );
        assert_eq!(
            cpus(2, 100),
            ["1", "2"],
            "a/b is at depth 2: its children are not read"
        );
        assert_eq!(cpus(1, 100), ["1"]);
        let e = walk_partitions(&root, m, 16, 3).unwrap_err().to_string();
        assert_eq!(
            e,
            "more than 3 cgroups below /sys/fs/cgroup; not walking further"
        );
        // A mount point that is gone: nothing; one that is not a directory: an error.
        assert!(isolated_partitions(&root, Path::new("/sys/fs/none"))
            .unwrap()
            .is_empty());
        let e = isolated_partitions(&root, Path::new("/sys/fs/cgroup/a/cpuset.cpus.effective"))
            .unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOTDIR));
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_mountinfo("/a\\040b").unwrap(), "/a b");
        assert_eq!(unescape_mountinfo("/plain").unwrap(), "/plain");
        assert_eq!(unescape_mountinfo("/\\377").unwrap(), "/\u{fffd}");
        assert_eq!(unescape_mountinfo("/a\\134b").unwrap(), "/a\\b");
        // Not an escape: fewer than three octal digits, or a non-octal digit.
        assert_eq!(unescape_mountinfo("/a\\04").unwrap(), "/a\\04");
        assert_eq!(unescape_mountinfo("/a\\048").unwrap(), "/a\\048");
    }

    /// \400 and above cannot be a byte: a parse error naming the file, not a panic (debug)
    /// or a wrapped byte (release) that turns into another path.
    #[test]
    fn mountinfo_escapes_above_377_are_refused() {
        let d = tree(&[(
            "/proc/self/mountinfo",
            "30 1 0:26 / /sys/fs/cg\\400roup rw - cgroup2 cgroup2 rw\n",
        )]);
        let e = cgroup2_mount(&SysRoot::new(d.path())).unwrap_err();
        assert!(matches!(e, Error::Parse { .. }), "{e}");
        let m = e.to_string();
        assert!(
            m.contains("proc/self/mountinfo")
                && m.contains("octal escape \\400 is above \\377")
                && m.contains("/sys/fs/cg\\\\400roup"),
            "{m}"
        );
        let d = tree(&[(
            "/proc/self/mountinfo",
            "30 1 0:26 / /sys/fs/cg\\377roup rw - cgroup2 cgroup2 rw\n",
        )]);
        assert!(cgroup2_mount(&SysRoot::new(d.path())).unwrap().is_some());
    }

    #[test]
    fn bad_list_names_the_file() {
        let d = tree(&[("/sys/devices/system/cpu/online", "0-x\n")]);
        let e = online_cpus(&SysRoot::new(d.path())).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("sys/devices/system/cpu/online") && m.contains("0-x"),
            "{m}"
        );
    }
}
