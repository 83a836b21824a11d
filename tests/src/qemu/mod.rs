//! Real-kernel test harness: boots Debian's kernels under QEMU (TCG software emulation) with
//! isolation on the command line, and runs our release binaries inside the guest.
//!
//! One boot runs a whole [`Scenario`]: a list of shell steps executed by the guest's init
//! (tests/guest/init), whose exit codes and outputs come back as JSON lines on the guest's
//! second serial port and are judged on the host by each step's [`Expect`]ations. The kernel
//! console (ttyS0) only goes to a log file for diagnosis; it is never parsed.
//!
//! Set-up (QEMU, busybox-static, the kernels) is scripts/setup-qemu; everything missing is a
//! [`HarnessError::Setup`] that names the command to run.

mod cpio;
pub mod daemon_bench;
pub mod demo;
pub mod fixture;
mod kmod;
pub mod noise;
pub mod peers;
mod qmp;
pub mod quiesce;
pub mod seed;
pub mod stalls;
mod vm;

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

pub use vm::{release_binary, run};

/// Why a scenario could not be run at all (as opposed to a check that failed).
#[derive(Debug)]
pub enum HarnessError {
    /// Something is not installed or not built; `fix` says what to run.
    Setup {
        what: String,
        fix: String,
    },
    Io(String),
}

impl HarnessError {
    pub(crate) fn setup(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Self::Setup {
            what: what.into(),
            fix: fix.into(),
        }
    }
}

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Setup { what, fix } => write!(f, "{what}\n  to fix: {fix}"),
            Self::Io(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for HarnessError {}

/// How to build the Debian root of this flavour (`Scenario::debroot`).
pub(crate) fn debroot_hint(debroot: DebRoot) -> &'static str {
    match debroot {
        DebRoot::Base => "scripts/setup-debroot (as root, after scripts/setup-qemu: debootstrap of bookworm with systemd, tuned and tuna into $TASKISOL_CACHE/debroot, about 3 minutes once)",
        DebRoot::Libvirt => "scripts/setup-debroot libvirt (as root, after scripts/setup-qemu: debootstrap of bookworm with systemd, libvirt, qemu-system-x86 and podman into $TASKISOL_CACHE/debroot-libvirt, about 2-5 minutes once)",
        DebRoot::Containerd => "scripts/setup-debroot containerd (as root, after scripts/setup-qemu: debootstrap of sid with systemd, containerd 2.x and runc into $TASKISOL_CACHE/debroot-containerd, about 2 minutes once)",
    }
}

pub(crate) const SETUP_HINT: &str = "scripts/setup-qemu (as root, with the same TASKISOL_CACHE if set: installs qemu-system-x86, busybox-static, xz-utils and fetches the kernels into $TASKISOL_CACHE/kernels, default .cache/kernels)";

/// The workspace root (tests/..).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests crate has a parent directory")
        .to_path_buf()
}

/// Where scripts/setup-qemu keeps kernels (and the harness its last runs): $TASKISOL_CACHE
/// or <workspace>/.cache.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("TASKISOL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".cache"))
}

/// Where the release binaries are: $TASKISOL_BIN_DIR, or $CARGO_TARGET_DIR/release, or
/// <workspace>/target/release.
pub fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TASKISOL_BIN_DIR") {
        return PathBuf::from(d);
    }
    // A relative CARGO_TARGET_DIR is relative to the workspace (where cargo was run), not
    // to this test's working directory (tests/).
    std::env::var_os("CARGO_TARGET_DIR")
        .map(|d| workspace_root().join(d))
        .unwrap_or_else(|| workspace_root().join("target"))
        .join("release")
}

/// The kernels the suite boots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelRole {
    /// Debian 12's stock kernel, linux-image-6.1.0-N-amd64.
    Stock61,
    /// Debian 12's backported PREEMPT_RT kernel, linux-image-6.12.N+deb12-rt-amd64.
    Rt612,
    /// Debian sid's generic 7.x kernel, linux-binary-7.N.M+debK-amd64 (with its
    /// linux-modules package).
    Gen7,
    /// Debian sid's PREEMPT_RT 7.x kernel, linux-binary-7.N.M+debK-rt-amd64.
    Rt7,
    /// Debian 12's 6.1 source with the project's task-isolation series (kernel/patches), the
    /// minimal test configuration of `scripts/build-kernel test`: no modules.
    Isol61,
    /// The same series as the Debian package `scripts/build-kernel deb --config
    /// kernel/config/guest.config` makes (linux-image-6.1.N-isol), unpacked: the kernel the
    /// package test boots the Debian root with, and whose package it installs there.
    Isol61Deb,
}

impl KernelRole {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stock61 => "stock61",
            Self::Rt612 => "rt612",
            Self::Gen7 => "gen7",
            Self::Rt7 => "rt7",
            Self::Isol61 => "isol61",
            Self::Isol61Deb => "isol61deb",
        }
    }

    /// Arguments every boot of this kernel gets under TCG. 7.x's clocksource watchdog
    /// marks the TSC unstable under TCG in some boots, and then the tick of a busy
    /// nohz_full CPU never stops (tick_stop's dependency CLOCK_UNSTABLE): `tsc=reliable`.
    pub fn tcg_args(self) -> &'static str {
        match self {
            Self::Stock61 | Self::Rt612 | Self::Isol61 | Self::Isol61Deb => "",
            Self::Gen7 | Self::Rt7 => "tsc=reliable ",
        }
    }
}

/// An unpacked kernel package in the cache.
#[derive(Debug, Clone)]
pub struct Kernel {
    pub role: KernelRole,
    /// Package name, e.g. linux-image-6.12.117+deb12-rt-amd64.
    pub package: String,
    /// Debian version of the package, e.g. 6.12.117-1~deb12u1.
    pub version: String,
    /// `uname -r` of the kernel (the directory name under lib/modules).
    pub release: String,
    pub vmlinuz: PathBuf,
    pub moddir: PathBuf,
}

impl Kernel {
    /// Finds the kernel that scripts/setup-qemu selected for `role`.
    pub fn locate(role: KernelRole) -> Result<Self, HarnessError> {
        let kernels = cache_dir().join("kernels");
        let pkg_file = kernels.join(format!("{}.pkg", role.as_str()));
        let package = fs::read_to_string(&pkg_file)
            .map_err(|_| {
                HarnessError::setup(
                    format!(
                        "the {} kernel is not set up ({} is missing)",
                        role.as_str(),
                        pkg_file.display()
                    ),
                    SETUP_HINT,
                )
            })?
            .trim()
            .to_string();
        let root = kernels.join(&package);
        let version = fs::read_to_string(root.join(".version"))
            .unwrap_or_default()
            .trim()
            .to_string();
        let missing = || {
            HarnessError::setup(
                format!(
                    "kernel package {package} is not unpacked in {}",
                    root.display()
                ),
                SETUP_HINT,
            )
        };
        let moddir = fs::read_dir(root.join("lib/modules"))
            .map_err(|_| missing())?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.is_dir())
            .ok_or_else(missing)?;
        let release = moddir
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(missing)?
            .to_string();
        let vmlinuz = root.join("boot").join(format!("vmlinuz-{release}"));
        if !vmlinuz.is_file() {
            return Err(missing());
        }
        Ok(Self {
            role,
            package,
            version,
            release,
            vmlinuz,
            moddir,
        })
    }
}

/// What a step printed and how it ended, as reported by the guest.
#[derive(Debug, Clone, Default)]
pub struct StepOutput {
    pub rc: i32,
    pub stdout: String,
    pub stderr: String,
}

impl StepOutput {
    /// The value of a `key=value` or `key:<whitespace>value` line of stdout.
    pub fn field(&self, key: &str) -> Option<&str> {
        self.stdout.lines().find_map(|l| {
            let rest = l.trim_start().strip_prefix(key)?;
            let rest = rest.strip_prefix('=').or_else(|| rest.strip_prefix(':'))?;
            Some(rest.trim())
        })
    }

    fn describe(&self) -> String {
        format!(
            "exit {}, stdout {:?}, stderr {:?}",
            self.rc,
            clip(&self.stdout),
            clip(&self.stderr)
        )
    }
}

fn clip(s: &str) -> String {
    const MAX: usize = 600;
    if s.len() <= MAX {
        s.to_string()
    } else {
        let mut end = MAX;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &s[..end])
    }
}

type Judge = Box<dyn Fn(&StepOutput) -> Result<(), String> + Send + Sync>;

/// One expectation on a step's result.
pub enum Expect {
    Exit(i32),
    /// Trimmed stdout equals.
    Stdout(String),
    /// Trimmed stderr equals: a message checked whole, not by a prefix.
    Stderr(String),
    StdoutHas(String),
    /// Some line of stdout equals (trimmed).
    StdoutLine(String),
    /// stdout or stderr contains.
    OutputHas(String),
    /// Neither stdout nor stderr contains.
    OutputLacks(String),
    /// A `key=value` / `key:\tvalue` line of stdout has this (trimmed) value.
    Field(String, String),
    /// Anything else: a description of what is expected, and a judge that returns the actual
    /// value when it does not hold.
    That(String, Judge),
}

impl fmt::Debug for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.expected())
    }
}

impl Expect {
    pub fn exit(rc: i32) -> Self {
        Self::Exit(rc)
    }
    pub fn stdout(s: &str) -> Self {
        Self::Stdout(s.into())
    }
    pub fn stderr(s: &str) -> Self {
        Self::Stderr(s.into())
    }
    pub fn stdout_has(s: &str) -> Self {
        Self::StdoutHas(s.into())
    }
    pub fn stdout_line(s: &str) -> Self {
        Self::StdoutLine(s.into())
    }
    pub fn output_has(s: &str) -> Self {
        Self::OutputHas(s.into())
    }
    pub fn output_lacks(s: &str) -> Self {
        Self::OutputLacks(s.into())
    }
    pub fn field(key: &str, value: &str) -> Self {
        Self::Field(key.into(), value.into())
    }
    pub fn that(
        expected: &str,
        judge: impl Fn(&StepOutput) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        Self::That(expected.into(), Box::new(judge))
    }

    /// This expectation, held only where `applies` says the step took the path it is about
    /// (a kernel that behaves another way says so in the step's output, and the step
    /// carries the expectations of that path too).
    pub fn when(
        self,
        path: &str,
        applies: impl Fn(&StepOutput) -> bool + Send + Sync + 'static,
    ) -> Self {
        let what = format!("{} ({path})", self.expected());
        Self::That(
            what,
            Box::new(move |out| {
                if applies(out) {
                    self.judge(out)
                } else {
                    Ok(())
                }
            }),
        )
    }

    fn expected(&self) -> String {
        match self {
            Self::Exit(rc) => format!("exit status {rc}"),
            Self::Stdout(s) => format!("stdout {s:?}"),
            Self::Stderr(s) => format!("stderr {s:?}"),
            Self::StdoutHas(s) => format!("stdout containing {s:?}"),
            Self::StdoutLine(s) => format!("a stdout line {s:?}"),
            Self::OutputHas(s) => format!("output containing {s:?}"),
            Self::OutputLacks(s) => format!("output not containing {s:?}"),
            Self::Field(k, v) => format!("{k} = {v:?}"),
            Self::That(what, _) => what.clone(),
        }
    }

    /// `Err(actual)` when the expectation does not hold.
    fn judge(&self, out: &StepOutput) -> Result<(), String> {
        let both = || format!("{}{}", out.stdout, out.stderr);
        let ok = match self {
            Self::Exit(rc) => out.rc == *rc,
            Self::Stdout(s) => out.stdout.trim() == s.trim(),
            Self::Stderr(s) => out.stderr.trim() == s.trim(),
            Self::StdoutHas(s) => out.stdout.contains(s.as_str()),
            Self::StdoutLine(s) => out.stdout.lines().any(|l| l.trim() == s.trim()),
            Self::OutputHas(s) => both().contains(s.as_str()),
            Self::OutputLacks(s) => !both().contains(s.as_str()),
            Self::Field(k, v) => {
                return match out.field(k) {
                    Some(actual) if actual == v.trim() => Ok(()),
                    Some(actual) => Err(format!("{k} = {actual:?} ({})", out.describe())),
                    None => Err(format!("no {k} line ({})", out.describe())),
                }
            }
            Self::That(_, judge) => {
                return judge(out).map_err(|a| format!("{a} ({})", out.describe()))
            }
        };
        if ok {
            Ok(())
        } else {
            Err(out.describe())
        }
    }
}

/// One check run by the guest: a shell script (busybox sh; /guest/lib.sh is sourced first)
/// and what its result must look like.
#[derive(Debug)]
pub struct Step {
    pub name: String,
    pub script: String,
    pub timeout: Duration,
    pub expects: Vec<Expect>,
    /// A step that takes the guest down instead of running `script` (Debian guests with a
    /// disk): a real `systemctl reboot` or `systemctl poweroff`, with an optional check run
    /// during that shutdown once isold.service has stopped.
    pub shutdown: Option<(Shutdown, Option<Box<Step>>)>,
}

/// How a [`Scenario::reboot`] or [`Scenario::poweroff`] step takes the guest down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    Reboot,
    Poweroff,
}

impl Shutdown {
    fn command(self) -> &'static str {
        match self {
            Shutdown::Reboot => "reboot_step",
            Shutdown::Poweroff => "poweroff_step",
        }
    }
}

/// A check that failed: which one, what was expected, what the guest showed.
#[derive(Debug, Clone)]
pub struct Failure {
    pub check: String,
    pub expected: String,
    pub actual: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "check {}: expected {}, actual {}",
            self.check, self.expected, self.actual
        )
    }
}

/// The isolation arguments the suite boots with.
pub const ISOL23: &str =
    "isolcpus=managed_irq,domain,2-3 nohz_full=2-3 rcu_nocbs=2-3 irqaffinity=0-1";

/// What the guest runs as its userland.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Userland {
    /// busybox-static as init and every tool (tests/guest/init): boots in seconds.
    Busybox,
    /// The Debian 12 root of scripts/setup-debroot with systemd as PID 1; the steps run in a
    /// service after multi-user.target (tests/guest/debian-runner), under `busybox sh` so that
    /// lib.sh and step scripts behave as in the busybox guest. rt612 only.
    Debian,
}

/// Which Debian root of scripts/setup-debroot a [`Userland::Debian`] guest boots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DebRoot {
    /// `scripts/setup-debroot`: systemd, tuned, tuna, irqbalance (`.cache/debroot`).
    Base,
    /// `scripts/setup-debroot libvirt`: systemd, libvirt and QEMU, a KVM host's userland, and
    /// podman with crun (`.cache/debroot-libvirt`).
    Libvirt,
    /// `scripts/setup-debroot containerd`: Debian sid (containerd 2.x with NRI, runc) with
    /// systemd, and the image [`CONTAINERD_IMAGE_TAR`] (`.cache/debroot-containerd`).
    Containerd,
}

impl DebRoot {
    /// Its directory under the cache.
    pub fn dir_name(self) -> &'static str {
        match self {
            Self::Base => "debroot",
            Self::Libvirt => "debroot-libvirt",
            Self::Containerd => "debroot-containerd",
        }
    }
}

/// One boot: a kernel, a command line, modules to load, steps to run, host actions the guest
/// may request, and optionally a fixture to capture.
#[derive(Debug)]
pub struct Scenario {
    pub name: String,
    pub role: KernelRole,
    /// Added to "console=ttyS0 quiet panic=-1".
    pub cmdline: String,
    /// Modules to insmod first (dependencies are added; built-ins skipped).
    pub modules: Vec<String>,
    pub steps: Vec<Step>,
    /// QMP commands run when the guest emits {"ev":"request","name":...}.
    pub requests: BTreeMap<String, Vec<Value>>,
    /// (capture step, fixture name): the guest's isolation view captured by that step goes
    /// to tests/fixtures/<name> (see [`fixture`]).
    pub fixtures: Vec<(String, String)>,
    /// Bound on the whole boot; QEMU is killed past it.
    pub timeout: Duration,
    /// Release binaries copied to /usr/bin of the guest (with their shared libraries).
    pub binaries: Vec<String>,
    pub userland: Userland,
    /// Guest memory in MiB.
    pub memory_mb: u32,
    /// vCPUs (4 unless a scenario is about big machines: `-smp`, all on QEMU's one TCG
    /// thread).
    pub cpus: u32,
    /// More files for the guest: (path, mode, content). In the Debian root only below
    /// directories that are real there (/etc/..., /usr/lib/...), never below /bin or /lib
    /// (symlinks the archive's directory entries would replace).
    pub files: Vec<(String, u32, Vec<u8>)>,
    /// A virtio disk of this many MiB (ext4, made anew for each run) holding the Debian
    /// guest's /etc and /var/lib (tests/guest/persist-init): what the guest writes there
    /// survives its reboots.
    pub disk_mb: Option<u32>,
    /// The Debian root a [`Userland::Debian`] guest boots.
    pub debroot: DebRoot,
    /// Boot a [`Userland::Debian`] guest from a copy of its root in a tmpfs
    /// (tests/guest/tmpfs-init is `/init`, which switch_roots into it before systemd starts):
    /// the initramfs's rootfs is no mount, where `pivot_root` fails, and container runtimes
    /// need it. Costs the copy (11-17 s for the 390 MB containers root under TCG) and no
    /// memory once booted (switch_root empties the rootfs). With [`Scenario::disk_mb`] it goes
    /// on with persist-init (no test does both yet).
    pub tmpfs_root: bool,
    /// QEMU runs in a network namespace of its own, and the request `nic` hot-plugs a
    /// virtio-net NIC with this many queue pairs (`mq=on`) on a multi-queue tap device QEMU
    /// makes there: the host's network is untouched, and the guest's eth0 has real queues,
    /// queue interrupts and channels (after the steps that capture fixtures, whose IRQs it
    /// would change). See [`Scenario::with_nic`].
    pub nic_queues: Option<u32>,
}

/// The image tarball of the containers root (`scripts/setup-debroot libvirt`): busybox-static's
/// root tree, for `podman import` with no registry.
pub const BUSYBOX_IMAGE_TAR: &str = "/usr/local/share/taskisol/busybox-rootfs.tar";

/// The image of the containerd root (`scripts/setup-debroot containerd`): an OCI image layout
/// tarball of busybox-static's root tree whose command is a long sleep, named
/// [`CONTAINERD_IMAGE`] once imported with `ctr -n k8s.io images import`.
pub const CONTAINERD_IMAGE_TAR: &str = "/usr/local/share/taskisol/busybox-oci.tar";
/// Its name in containerd (isol-cri's image, and the pods' sandbox image).
pub const CONTAINERD_IMAGE: &str = "docker.io/library/isol-busybox:1";

impl Scenario {
    pub fn new(name: &str, role: KernelRole, cmdline: &str) -> Self {
        Self {
            name: name.into(),
            role,
            cmdline: cmdline.into(),
            modules: Vec::new(),
            steps: Vec::new(),
            requests: BTreeMap::new(),
            fixtures: Vec::new(),
            timeout: Duration::from_secs(
                std::env::var("TASKISOL_QEMU_TIMEOUT")
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(300),
            ),
            binaries: vec!["chisol".into(), "isol-emu".into()],
            userland: Userland::Busybox,
            memory_mb: 1024,
            cpus: 4,
            files: Vec::new(),
            disk_mb: None,
            nic_queues: None,
            debroot: DebRoot::Base,
            tmpfs_root: false,
        }
    }

    /// A boot of 6.12-rt into the Debian root with systemd (scripts/setup-debroot), with isold
    /// and chisol in /usr/bin. Its default bound is 900 s: systemd reaches multi-user.target
    /// 50-70 s after QEMU starts under TCG, and the root is 200 MB to unpack.
    pub fn debian(name: &str, cmdline: &str) -> Self {
        let mut s = Self::new(name, KernelRole::Rt612, cmdline);
        s.userland = Userland::Debian;
        s.memory_mb = 2048;
        s.binaries = vec!["isold".into(), "chisol".into()];
        if std::env::var_os("TASKISOL_QEMU_TIMEOUT").is_none() {
            s.timeout = Duration::from_secs(900);
        }
        s
    }

    /// A boot of 6.12-rt into the Debian root with libvirt and QEMU
    /// (`scripts/setup-debroot libvirt`), 3 GiB: a KVM host whose VMs run under TCG inside
    /// the guest. Its default bound is 1800 s: a VM's start takes 5-14 s under TCG, and a
    /// scenario starts dozens.
    pub fn debian_libvirt(name: &str, cmdline: &str) -> Self {
        let mut s = Self::debian(name, cmdline);
        s.debroot = DebRoot::Libvirt;
        s.memory_mb = 3072;
        if std::env::var_os("TASKISOL_QEMU_TIMEOUT").is_none() {
            s.timeout = Duration::from_secs(1800);
        }
        s
    }

    /// A boot of 6.12-rt into the same Debian root as [`Scenario::debian_libvirt`] (it has
    /// podman, crun and netavark, storage driver `vfs`, and the image [`BUSYBOX_IMAGE_TAR`]),
    /// with the root copied into a tmpfs ([`Scenario::tmpfs_root`]) so that crun can
    /// `pivot_root` into a container, 2 GiB, isold and chisol in /usr/bin.
    pub fn debian_containers(name: &str, cmdline: &str) -> Self {
        let mut s = Self::debian(name, cmdline);
        s.debroot = DebRoot::Libvirt;
        s.tmpfs_root = true;
        s
    }

    /// A boot of 6.12-rt into the Debian sid root with containerd 2.x and runc
    /// (`scripts/setup-debroot containerd`) from a copy of the root in a tmpfs (runc's
    /// `pivot_root`), 2 GiB, isold, chisol and the CRI client isol-cri in /usr/bin.
    pub fn debian_containerd(name: &str, cmdline: &str) -> Self {
        let mut s = Self::debian(name, cmdline);
        s.debroot = DebRoot::Containerd;
        s.tmpfs_root = true;
        s.binaries.push("isol-cri".into());
        s
    }

    /// Adds a step with the default 60 s bound (TCG is slow; a step that is killed fails).
    pub fn step(&mut self, name: &str, script: &str, expects: Vec<Expect>) -> &mut Self {
        self.step_with_timeout(name, script, Duration::from_secs(60), expects)
    }

    /// The binaries a step needs put in the guest, each once however many steps need it.
    pub fn need_binaries(&mut self, names: &[&str]) {
        for b in names {
            if !self.binaries.iter().any(|x| x == b) {
                self.binaries.push((*b).into());
            }
        }
    }

    pub fn step_with_timeout(
        &mut self,
        name: &str,
        script: &str,
        timeout: Duration,
        expects: Vec<Expect>,
    ) -> &mut Self {
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c)),
            "step names go into JSON unescaped: {name}"
        );
        assert!(
            !self.steps.iter().any(|s| s.name == name),
            "duplicate step {name}"
        );
        self.steps.push(Step {
            name: name.into(),
            script: script.into(),
            timeout,
            expects,
            shutdown: None,
        });
        self
    }

    /// A real reboot of the Debian guest (`systemctl reboot`): every unit stops, the kernel
    /// goes down and boots again with the same disk ([`Scenario::disk_mb`], which this needs),
    /// and the steps after this one run in the new boot. `check` (name, script, expectations)
    /// runs during the shutdown, after isold.service has stopped.
    pub fn reboot(&mut self, name: &str, check: Option<(&str, &str, Vec<Expect>)>) -> &mut Self {
        self.shutdown_step(name, Shutdown::Reboot, check)
    }

    /// A clean `systemctl poweroff` of the Debian guest: the scenario's last step; `check` as
    /// for [`Scenario::reboot`].
    pub fn poweroff(&mut self, name: &str, check: Option<(&str, &str, Vec<Expect>)>) -> &mut Self {
        self.shutdown_step(name, Shutdown::Poweroff, check)
    }

    fn shutdown_step(
        &mut self,
        name: &str,
        how: Shutdown,
        check: Option<(&str, &str, Vec<Expect>)>,
    ) -> &mut Self {
        assert!(
            self.userland == Userland::Debian && self.disk_mb.is_some(),
            "{name}: a shutdown step needs a Debian guest with a disk"
        );
        self.step(name, "", vec![Expect::exit(0)]);
        let check = check.map(|(n, script, expects)| {
            assert!(
                !self.steps.iter().any(|s| s.name == n),
                "duplicate step {n}"
            );
            Box::new(Step {
                name: n.into(),
                script: script.into(),
                timeout: Duration::from_secs(120),
                expects,
                shutdown: None,
            })
        });
        self.steps.last_mut().expect("just added").shutdown = Some((how, check));
        self
    }

    /// Every step the host judges: the steps, and the checks run during shutdowns.
    pub fn judged_steps(&self) -> Vec<&Step> {
        let mut out = Vec::new();
        for s in &self.steps {
            out.push(s);
            if let Some((_, Some(c))) = &s.shutdown {
                out.push(c);
            }
        }
        out
    }

    /// How many times the guest boots: once, and once more per reboot step.
    pub fn boots(&self) -> usize {
        1 + self
            .steps
            .iter()
            .filter(|s| matches!(s.shutdown, Some((Shutdown::Reboot, _))))
            .count()
    }

    /// Adds a file to the guest (see [`Scenario::files`]).
    pub fn file(&mut self, path: &str, mode: u32, content: &[u8]) -> &mut Self {
        self.files.push((path.into(), mode, content.to_vec()));
        self
    }

    pub fn modules(&mut self, names: &[&str]) -> &mut Self {
        self.modules.extend(names.iter().map(|s| s.to_string()));
        self
    }

    /// A step that hot-plugs the virtio-net NIC of `queues` queue pairs (QEMU in its own
    /// network namespace) and waits for the guest's eth0 with all its queues.
    pub fn with_nic(&mut self, queues: u32) -> &mut Self {
        self.nic_queues = Some(queues);
        self.modules(&["virtio_pci", "virtio_net"]);
        self.on_request("nic", hotplug_mq_nic(queues));
        let last = queues - 1;
        self.step(
            "hotplug_multiqueue_nic",
            &format!(
                "host_request nic\nwait_for 60 test -e /sys/class/net/eth0/queues/rx-{last} || echo timeout=yes\n\
                 ls /sys/class/net/eth0/queues"
            ),
            vec![Expect::exit(0), Expect::output_lacks("timeout=yes")],
        )
    }

    pub fn on_request(&mut self, name: &str, qmp_commands: Vec<Value>) -> &mut Self {
        self.requests.insert(name.into(), qmp_commands);
        self
    }

    /// Captures the isolation view at this point of the scenario into fixture `name`, with
    /// the files of the given cgroup partition directories.
    pub fn capture_fixture(&mut self, name: &str, partitions: &[&str]) -> &mut Self {
        let step = format!("capture_{name}");
        self.fixtures.push((step.clone(), name.into()));
        let script = format!("capture_isolation_view {}", partitions.join(" "));
        self.step(&step, &script, vec![Expect::exit(0)])
    }

    /// Like [`Scenario::capture_fixture`], plus every file isold's presets touch and each
    /// task's `stat`, `status` and `cgroup` (`capture_isold_view` in tests/guest/lib.sh).
    pub fn capture_isold_fixture(&mut self, name: &str) -> &mut Self {
        let step = format!("capture_{name}");
        self.fixtures.push((step.clone(), name.into()));
        // Every task's three files and every CPU's: over a minute with 64 CPUs under TCG.
        self.step_with_timeout(
            &step,
            "capture_isold_view",
            Duration::from_secs(300),
            vec![Expect::exit(0)],
        )
    }

    /// Like [`Scenario::capture_isold_fixture`], plus `/proc/softirqs` and `/proc/consoles`
    /// (`capture_audit_view`): the fake-root tests of `isold audit` compare two of them.
    pub fn capture_audit_fixture(&mut self, name: &str) -> &mut Self {
        let step = format!("capture_{name}");
        self.fixtures.push((step.clone(), name.into()));
        // The same bound as capture_isold_fixture, which it does and more: in the audit
        // scenario four busy loops share the guest's one TCG thread with the capture, and
        // with a second guest beside it on the machine 120 s was once not enough.
        self.step_with_timeout(
            &step,
            "capture_audit_view",
            Duration::from_secs(300),
            vec![Expect::exit(0)],
        )
    }
}

/// QMP commands that hot-plug a virtio-net NIC of `queues` queue pairs on a multi-queue tap
/// (QEMU's own network namespace: [`Scenario::nic_queues`]).
pub fn hotplug_mq_nic(queues: u32) -> Vec<Value> {
    vec![
        serde_json::json!({"execute": "netdev_add", "arguments": {"type": "tap", "id": "n0", "ifname": "tq0", "script": "no", "downscript": "no", "vhost": false, "queues": queues}}),
        // vectors: one per queue of each pair, one for the configuration.
        serde_json::json!({"execute": "device_add", "arguments": {"driver": "virtio-net-pci", "id": "nic0", "netdev": "n0", "mq": true, "vectors": 2 * queues + 2}}),
    ]
}

/// QMP commands that hot-plug a virtio-net NIC (no backend: only its IRQs matter).
pub fn hotplug_virtio_net(id: &str) -> Vec<Value> {
    vec![
        serde_json::json!({"execute": "device_add", "arguments": {"driver": "virtio-net-pci", "id": id}}),
    ]
}

/// QMP commands that hot-plug a virtio-blk disk on a null backend. Its queues use managed
/// IRQs (one per vCPU), the kind isolcpus=managed_irq is about.
pub fn hotplug_virtio_blk(id: &str) -> Vec<Value> {
    let node = format!("{id}-null");
    vec![
        serde_json::json!({"execute": "blockdev-add", "arguments": {"driver": "null-co", "node-name": node, "size": 1_048_576}}),
        serde_json::json!({"execute": "device_add", "arguments": {"driver": "virtio-blk-pci", "drive": node, "id": id}}),
    ]
}

/// Everything a boot produced. Its steps' expectations are judged by [`Outcome::assert_ok`]:
/// an outcome dropped unread passes whatever the guest printed.
#[derive(Debug)]
#[must_use = "a scenario's expectations are only judged by Outcome::assert_ok"]
pub struct Outcome {
    pub scenario: String,
    pub kernel: Kernel,
    /// From QEMU start to the guest's init running.
    pub boot_time: Option<Duration>,
    /// From QEMU start to QEMU exit.
    pub wall_time: Duration,
    pub outputs: BTreeMap<String, StepOutput>,
    /// Files captured by the guest: by the step that captured them, then by guest path.
    pub files: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    pub failures: Vec<Failure>,
    /// Where console.log, results.jsonl, qemu.log and initramfs.cpio are.
    pub workdir: PathBuf,
    /// Notes for the human (fixture updated, ...).
    pub notes: Vec<String>,
}

impl Outcome {
    /// Panics with every failure listed, the kernel used and where the logs are.
    pub fn assert_ok(&self) {
        eprintln!("{}", self.summary());
        if !self.failures.is_empty() {
            let mut msg = format!(
                "scenario {} on {} ({}): {} failed check(s):\n",
                self.scenario,
                self.kernel.package,
                self.kernel.version,
                self.failures.len()
            );
            for f in &self.failures {
                msg.push_str(&format!("  - {f}\n"));
            }
            msg.push_str(&format!(
                "guest console: {}\nresults: {}",
                self.workdir.join("console.log").display(),
                self.workdir.join("results.jsonl").display()
            ));
            panic!("{msg}");
        }
    }

    pub fn summary(&self) -> String {
        let boot = self
            .boot_time
            .map(|d| format!("{:.1} s", d.as_secs_f64()))
            .unwrap_or_else(|| "-".into());
        let mut s = format!(
            "qemu: scenario {} on {} {} (uname -r {}): boot {boot}, whole run {:.1} s, {} steps, {} failures; logs in {}",
            self.scenario,
            self.kernel.package,
            self.kernel.version,
            self.kernel.release,
            self.wall_time.as_secs_f64(),
            self.outputs.len(),
            self.failures.len(),
            self.workdir.display()
        );
        for n in &self.notes {
            s.push_str(&format!("\n  note: {n}"));
        }
        s
    }
}

/// Parses a kernel CPU list ("0-1,3"); an empty or "(null)" list is empty.
pub fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    // A small local parser rather than libtaskisol's CpuSet: the harness must judge the
    // guest independently of the code under test.
    let s = s.trim();
    let mut cpus = Vec::new();
    if s.is_empty() || s == "(null)" {
        return Some(cpus);
    }
    for part in s.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_like_the_kernel_prints_them() {
        assert_eq!(parse_cpu_list("0-1,3"), Some(vec![0, 1, 3]));
        assert_eq!(parse_cpu_list("(null)\n"), Some(vec![]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn fields_are_found_in_status_and_key_value_lines() {
        let out = StepOutput {
            rc: 0,
            stdout: "Name:\tcat\nCpus_allowed_list:\t2-3\npolicy=1\n".into(),
            stderr: String::new(),
        };
        assert_eq!(out.field("Cpus_allowed_list"), Some("2-3"));
        assert_eq!(out.field("policy"), Some("1"));
        assert_eq!(out.field("Cpus"), None);
        assert!(Expect::field("Cpus_allowed_list", "2-3")
            .judge(&out)
            .is_ok());
        let err = Expect::field("policy", "2").judge(&out).unwrap_err();
        assert!(err.contains("policy = \"1\""), "{err}");
    }
}
