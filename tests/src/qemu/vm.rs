//! Building the initramfs, running QEMU, collecting and judging the guest's results.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::Value;

use super::cpio::Cpio;
use super::qmp::Qmp;
use super::{
    bin_dir, cache_dir, debroot_hint, fixture, kmod, DebRoot, Expect, Failure, HarnessError,
    Kernel, KernelRole, Outcome, Scenario, Step, StepOutput, Userland, SETUP_HINT,
};

const GUEST_INIT: &str = include_str!("../../guest/init");
const GUEST_LIB: &str = include_str!("../../guest/lib.sh");
const BUSYBOX: &str = "/bin/busybox";
const DEBIAN_RUNNER: &str = include_str!("../../guest/debian-runner");
const DEBIAN_UNIT: &str = include_str!("../../guest/taskisol-steps.service");
const PERSIST_INIT: &str = include_str!("../../guest/persist-init");
const TMPFS_INIT: &str = include_str!("../../guest/tmpfs-init");
const AT_SHUTDOWN: &str = include_str!("../../guest/at-shutdown");
const AT_SHUTDOWN_UNIT: &str = include_str!("../../guest/taskisol-at-shutdown.service");

/// Where a scenario's files go: $TASKISOL_KEEP/<scenario> when set, else
/// <cache>/runs/<scenario> (overwritten by the next run, kept for diagnosis until then).
fn workdir(scenario: &str) -> Result<PathBuf, HarnessError> {
    let base = std::env::var_os("TASKISOL_KEEP")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join("runs"));
    let dir = base.join(scenario);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)
        .map_err(|e| HarnessError::Io(format!("create {}: {e}", dir.display())))?;
    Ok(dir)
}

fn find_qemu() -> Result<PathBuf, HarnessError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("qemu-system-x86_64"))
        .find(|p| p.is_file())
        .ok_or_else(|| HarnessError::setup("qemu-system-x86_64 is not installed", SETUP_HINT))
}

/// The shared libraries and the dynamic loader a binary needs, as ldd resolves them. We copy
/// these rather than build static binaries so that the guest runs the very release binaries a
/// user gets (glibc-dynamic); a static glibc build would be a second full compile, and the
/// musl target is not installable on the offline CI machines.
fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>, HarnessError> {
    let out = Command::new("ldd").arg(binary).output().map_err(|e| {
        HarnessError::setup(
            format!("cannot run ldd: {e}"),
            "apt-get install -y libc-bin",
        )
    })?;
    let text = String::from_utf8_lossy(&out.stdout);
    if text.contains("not a dynamic executable") || !out.status.success() {
        return Ok(Vec::new());
    }
    let mut libs = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.trim(),
            None => line,
        };
        let path = path.split(" (").next().unwrap_or("").trim();
        if path == "not found" {
            return Err(HarnessError::Io(format!(
                "{}: a shared library is not found: {line}",
                binary.display()
            )));
        }
        if path.starts_with('/') {
            libs.push(PathBuf::from(path));
        }
    }
    Ok(libs)
}

fn read(path: &Path) -> Result<Vec<u8>, HarnessError> {
    fs::read(path).map_err(|e| HarnessError::Io(format!("read {}: {e}", path.display())))
}

/// The steps as the guest runs them: a module-loading step first when modules are needed.
fn guest_steps(modules: &[kmod::Module]) -> Vec<Step> {
    let mut steps = Vec::new();
    if !modules.is_empty() {
        let mut script = String::new();
        for (i, m) in modules.iter().enumerate() {
            script.push_str(&format!(
                "insmod /modules/{i:02}-{}.ko || {{ echo \"insmod {} failed\"; exit 1; }}\n",
                m.name, m.name
            ));
        }
        script.push_str("lsmod\n");
        steps.push(Step {
            name: "load_modules".into(),
            script,
            timeout: Duration::from_secs(60),
            expects: vec![Expect::exit(0)],
            shutdown: None,
        });
    }
    steps
}

/// The source files a binary was built from, from cargo's dep-info file next to it
/// (`target/release/chisol.d`: "<binary>: <source> <source> ...", spaces escaped with '\\').
fn dep_info_sources(binary: &Path) -> Option<Vec<std::path::PathBuf>> {
    let text = fs::read_to_string(binary.with_extension("d")).ok()?;
    let (_, deps) = text.lines().next()?.split_once(": ")?;
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = deps.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => cur.extend(chars.next()),
            ' ' => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur).into());
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur.into());
    }
    Some(out)
}

/// The path of release binary `name` in [`bin_dir`], refused when it is missing or older than
/// its sources (see [`check_fresh`]; not checked for a $TASKISOL_BIN_DIR given by hand). Also
/// for what a test takes from there by other ways than the guest's /usr/bin (the Debian
/// package of `make deb-package`).
pub fn release_binary(name: &str) -> Result<PathBuf, HarnessError> {
    let path = bin_dir().join(name);
    if !path.is_file() {
        return Err(HarnessError::setup(
            format!("release binary {} is missing", path.display()),
            "cargo build --release --workspace --bins --features taskisol-tests/qemu",
        ));
    }
    if std::env::var_os("TASKISOL_BIN_DIR").is_none() {
        check_fresh(name, &path)?;
    }
    Ok(path)
}

/// Refuses release binaries older than their sources: the guest would test stale code and
/// nobody would notice. "Their sources" are exactly the files cargo's dep-info lists for the
/// binary, so a changed test or benchmark does not count.
fn check_fresh(_name: &str, binary: &Path) -> Result<(), HarnessError> {
    let built = fs::metadata(binary).and_then(|m| m.modified()).ok();
    let stale = dep_info_sources(binary).and_then(|srcs| {
        srcs.into_iter().find(|src| {
            match (built, fs::metadata(src).and_then(|m| m.modified()).ok()) {
                (Some(b), Some(m)) => m > b,
                _ => false,
            }
        })
    });
    match stale {
        Some(src) => Err(HarnessError::setup(
            format!(
                "release binary {} is older than its source {}",
                binary.display(),
                src.display()
            ),
            "cargo build --release --workspace --bins --features taskisol-tests/qemu",
        )),
        None => Ok(()),
    }
}

/// The packed Debian root of scripts/setup-debroot of this flavour, for this kernel.
fn debian_root(kernel: &Kernel, debroot: DebRoot) -> Result<Vec<u8>, HarnessError> {
    let dir = cache_dir().join(debroot.dir_name());
    let stamp = fs::read_to_string(dir.join("stamp")).unwrap_or_default();
    if !dir.join("root.cpio").is_file() {
        return Err(HarnessError::setup(
            format!(
                "the Debian root is not built ({} is missing)",
                dir.join("root.cpio").display()
            ),
            debroot_hint(debroot),
        ));
    }
    let has = |pkg: &str| {
        let words: Vec<&str> = stamp.split_whitespace().collect();
        words.windows(2).any(|w| w == ["kernel", pkg])
    };
    // The packaged kernel brings its own modules: its test installs them with dpkg.
    if kernel.role != KernelRole::Isol61Deb && !has(&kernel.package) {
        return Err(HarnessError::setup(
            format!(
                "the Debian root has the modules of another kernel than {} ({})",
                kernel.package,
                stamp.trim()
            ),
            debroot_hint(debroot),
        ));
    }
    read(&dir.join("root.cpio"))
}

/// The initramfs: for busybox, one archive with init, busybox, the binaries and their
/// libraries; for Debian, the packed root followed by a second archive with the runner and its
/// unit, busybox and the binaries (the root's glibc is the one they were built against: both
/// are Debian 12). Steps and modules are the same in both.
fn build_initramfs(
    s: &Scenario,
    kernel: &Kernel,
    steps: &[&Step],
    modules: &[kmod::Module],
) -> Result<Vec<u8>, HarnessError> {
    let busybox = Path::new(BUSYBOX);
    if !busybox.is_file() || !shared_libraries(busybox)?.is_empty() {
        return Err(HarnessError::setup(
            "the guest needs a static /bin/busybox (package busybox-static)",
            SETUP_HINT,
        ));
    }
    let mut c = Cpio::new();
    let mut image = Vec::new();
    match s.userland {
        Userland::Busybox => {
            if s.tmpfs_root {
                return Err(HarnessError::Io(format!(
                    "scenario {}: tmpfs_root is for Debian guests (busybox's init needs no pivot_root)",
                    s.name
                )));
            }
            c.file("/init", 0o755, GUEST_INIT.as_bytes());
            c.char_dev("/dev/console", 5, 1);
            for d in [
                "/proc",
                "/sys",
                "/tmp",
                "/run",
                "/bin",
                "/sbin",
                "/usr/bin",
                "/usr/sbin",
            ] {
                c.dir(d);
            }
            c.file(BUSYBOX, 0o755, &read(busybox)?);
        }
        Userland::Debian => {
            if !matches!(
                kernel.role,
                KernelRole::Rt612 | KernelRole::Rt7 | KernelRole::Isol61Deb
            ) || (kernel.role == KernelRole::Rt7 && s.debroot == DebRoot::Libvirt)
                || (kernel.role == KernelRole::Isol61Deb && s.debroot != DebRoot::Base)
            {
                return Err(HarnessError::Io(format!(
                    "scenario {}: the Debian roots have the modules of rt612 (and, but for libvirt's, rt7) only; the project's packaged kernel boots the base root, its package brings its modules",
                    s.name
                )));
            }
            image = debian_root(kernel, s.debroot)?;
            // Only below directories that are real in the root: an archive's directory entry
            // replaces a symlink of that name (/bin -> usr/bin) when the kernel unpacks it.
            c.file("/usr/bin/busybox", 0o755, &read(busybox)?);
            c.file("/guest/debian-runner", 0o755, DEBIAN_RUNNER.as_bytes());
            let unit = "/etc/systemd/system/taskisol-steps.service";
            c.file(unit, 0o644, DEBIAN_UNIT.as_bytes());
            c.symlink(
                "/etc/systemd/system/multi-user.target.wants/taskisol-steps.service",
                unit,
            );
            if s.disk_mb.is_some() {
                c.file("/guest/persist-init", 0o755, PERSIST_INIT.as_bytes());
            }
            if s.tmpfs_root {
                // The rdinit; busybox switch_root insists on a regular /init.
                c.file("/init", 0o755, TMPFS_INIT.as_bytes());
                c.dir("/newroot");
            }
            if steps.iter().any(|st| st.shutdown.is_some()) {
                c.file("/guest/at-shutdown", 0o755, AT_SHUTDOWN.as_bytes());
                let unit = "/etc/systemd/system/taskisol-at-shutdown.service";
                c.file(unit, 0o644, AT_SHUTDOWN_UNIT.as_bytes());
                c.symlink(
                    "/etc/systemd/system/multi-user.target.wants/taskisol-at-shutdown.service",
                    unit,
                );
            }
        }
    }
    c.file("/guest/lib.sh", 0o644, GUEST_LIB.as_bytes());

    for name in &s.binaries {
        // A path: a program of the host's (oslat from rt-tests), at the same path.
        let (path, guest) = if name.starts_with('/') {
            let p = PathBuf::from(name);
            if !p.is_file() {
                return Err(HarnessError::setup(
                    format!("{name} is not installed"),
                    SETUP_HINT,
                ));
            }
            (p, name.clone())
        } else {
            (release_binary(name)?, format!("/usr/bin/{name}"))
        };
        c.file(&guest, 0o755, &read(&path)?);
        if s.userland == Userland::Debian {
            continue;
        }
        for lib in shared_libraries(&path)? {
            let guest = lib.to_string_lossy().to_string();
            if !c.contains(&guest) {
                // fs::read follows symlinks: the guest gets the library under the name the
                // loader asks for.
                c.file(&guest, 0o755, &read(&lib)?);
            }
        }
    }

    for (path, mode, content) in &s.files {
        c.file(path, *mode, content);
    }
    for (i, m) in modules.iter().enumerate() {
        c.file(&format!("/modules/{i:02}-{}.ko", m.name), 0o644, &m.image);
    }

    let mut list = String::new();
    for (i, step) in steps.iter().enumerate() {
        let run_line = |step: &Step, file: &str| {
            format!(
                "run_step '{}' {} {file}",
                step.name,
                step.timeout.as_secs().max(1)
            )
        };
        if let Some((how, check)) = &step.shutdown {
            let check_line = match check {
                Some(chk) => {
                    let file = format!("/scenario/check-{i:03}.sh");
                    let script = format!(". /guest/lib.sh\n{}\n", chk.script);
                    c.file(&file, 0o755, script.as_bytes());
                    run_line(chk, &file)
                }
                None => "-".into(),
            };
            list.push_str(&format!(
                "{} '{}' \"{check_line}\"\n",
                how.command(),
                step.name
            ));
            continue;
        }
        let file = format!("/scenario/{i:03}.sh");
        let script = format!(". /guest/lib.sh\n{}\n", step.script);
        c.file(&file, 0o755, script.as_bytes());
        list.push_str(&run_line(step, &file));
        list.push('\n');
    }
    c.file("/scenario/steps.sh", 0o644, list.as_bytes());
    c.file("/scenario/kernel", 0o644, kernel.package.as_bytes());
    image.extend_from_slice(&c.finish());
    Ok(image)
}

/// A line-wise reader of a file another process is still appending to.
struct Tail {
    path: PathBuf,
    pos: u64,
    partial: Vec<u8>,
}

impl Tail {
    fn lines(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        let Ok(mut f) = fs::File::open(&self.path) else {
            return out;
        };
        if f.seek(SeekFrom::Start(self.pos)).is_err() {
            return out;
        }
        let mut buf = Vec::new();
        if let Ok(n) = f.read_to_end(&mut buf) {
            self.pos += n as u64;
        }
        self.partial.extend_from_slice(&buf);
        while let Some(i) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=i).collect();
            out.push(String::from_utf8_lossy(&line).trim().to_string());
        }
        out
    }
}

/// The whole event at the end of a line that is not one: a line whose end was lost glues
/// itself to the next event, and that next event is kept.
fn recover_event(line: &str) -> Option<Value> {
    let i = line.rfind("{\"ev\":")?;
    if i == 0 {
        return None;
    }
    serde_json::from_str::<Value>(&line[i..])
        .ok()
        .filter(Value::is_object)
}

/// The step a cut line was the event of: its start is intact even when its end is lost.
fn step_of_cut_line(line: &str) -> Option<String> {
    let rest = &line[line.find("\"step\":\"")? + 8..];
    Some(rest[..rest.find('"')?].to_string())
}

fn describe_garbage(line: &str) -> String {
    let head: String = line.chars().take(100).collect();
    let tail: String = {
        let v: Vec<char> = line.chars().collect();
        v[v.len().saturating_sub(60)..].iter().collect()
    };
    format!("{} bytes: {head:?} ... {tail:?}", line.len())
}

fn b64(v: Option<&Value>) -> Vec<u8> {
    v.and_then(Value::as_str)
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .unwrap_or_default()
}

fn console_tail(workdir: &Path) -> String {
    let text = fs::read(workdir.join("console.log")).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(12)..].join("\n    ")
}

/// A QEMU process that is killed and reaped when dropped.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            kill(&mut self.0);
        }
    }
}

fn kill(child: &mut Child) {
    // SIGKILL: a wedged TCG guest does not react to anything gentler in bounded time.
    let _ = child.kill();
    let _ = child.wait();
}

/// A raw disk image of `mb` MiB with an empty ext4 file system, for [`Scenario::disk_mb`].
fn make_disk(workdir: &Path, mb: u32) -> Result<PathBuf, HarnessError> {
    let path = workdir.join("disk.img");
    let f = fs::File::create(&path)
        .map_err(|e| HarnessError::Io(format!("create {}: {e}", path.display())))?;
    f.set_len(u64::from(mb) << 20)
        .map_err(|e| HarnessError::Io(format!("size {}: {e}", path.display())))?;
    let mkfs = ["/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .ok_or_else(|| HarnessError::setup("mkfs.ext4 is not installed", SETUP_HINT))?;
    let out = Command::new(mkfs)
        .args(["-q", "-F", "-L", "taskisol"])
        .arg(&path)
        .output()
        .map_err(|e| HarnessError::Io(format!("{mkfs}: {e}")))?;
    if !out.status.success() {
        return Err(HarnessError::Io(format!(
            "{mkfs} {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(path)
}

/// Boots the scenario's kernel once, runs all its steps, judges them, handles its fixture.
pub fn run(s: &Scenario) -> Result<Outcome, HarnessError> {
    let qemu = find_qemu()?;
    let kernel = Kernel::locate(s.role)?;
    let workdir = workdir(&s.name)?;
    let module_names: Vec<&str> = s.modules.iter().map(String::as_str).collect();
    let modules = kmod::resolve(&kernel.moddir, &module_names)?;
    let extra = guest_steps(&modules);
    let steps: Vec<&Step> = extra.iter().chain(s.steps.iter()).collect();
    let initramfs = build_initramfs(s, &kernel, &steps, &modules)?;
    let judged: Vec<&Step> = extra.iter().chain(s.judged_steps()).collect();
    let disk = match s.disk_mb {
        Some(mb) => Some(make_disk(&workdir, mb)?),
        None => None,
    };
    let initrd = workdir.join("initramfs.cpio");
    fs::write(&initrd, &initramfs)
        .map_err(|e| HarnessError::Io(format!("write {}: {e}", initrd.display())))?;
    let results_path = workdir.join("results.jsonl");
    let console_path = workdir.join("console.log");
    // unix socket paths are limited to 108 bytes: keep the socket in a short temp dir under
    // /tmp itself, whatever $TMPDIR says.
    let sockdir = tempfile::Builder::new()
        .prefix("taskisol-qmp")
        .tempdir_in("/tmp")
        .map_err(|e| HarnessError::Io(format!("temp dir: {e}")))?;
    let qmp_path = sockdir.path().join("qmp.sock");
    // no_timer_check: under a loaded TCG host the kernel's boot-time check of the 8254 timer
    // fails ("MP-BIOS bug: 8254 timer not connected to IO-APIC") and IRQ 0 moves to the
    // local APIC, which would change /proc/interrupts from boot to boot.
    let init = match (s.userland, s.tmpfs_root, s.disk_mb) {
        (Userland::Busybox, ..) => "",
        // quiet keeps systemd's status lines off the console too; the journal has them.
        // tests/guest/tmpfs-init goes on with persist-init when there is a disk.
        (Userland::Debian, true, _) => "rdinit=/init systemd.unit=multi-user.target ",
        (Userland::Debian, false, None) => {
            "rdinit=/lib/systemd/systemd systemd.unit=multi-user.target "
        }
        (Userland::Debian, false, Some(_)) => {
            "rdinit=/guest/persist-init systemd.unit=multi-user.target "
        }
    };
    let boots = s.boots();
    let append = format!(
        "console=ttyS0 quiet panic=-1 no_timer_check {}{init}{} taskisol.scenario={}",
        s.role.tcg_args(),
        s.cmdline,
        s.name
    );
    fs::write(workdir.join("cmdline"), &append).map_err(|e| HarnessError::Io(e.to_string()))?;
    let qemu_log =
        fs::File::create(workdir.join("qemu.log")).map_err(|e| HarnessError::Io(e.to_string()))?;
    let qemu_log2 = qemu_log
        .try_clone()
        .map_err(|e| HarnessError::Io(e.to_string()))?;

    let start = Instant::now();
    let mut command = Command::new(&qemu);
    let own_netns = s.nic_queues.is_some();
    // SAFETY: the closure runs in the forked child before exec and only calls prctl and
    // unshare, which are async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            // The NIC's tap device is made by QEMU in a network namespace of its own.
            if own_netns && libc::unshare(libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // QEMU writes to files, so it would never notice its parent (the test) dying:
            // take it down with the test instead of leaving a guest running.
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command
        .args(["-accel", "tcg,thread=single", "-cpu", "max", "-smp"])
        .arg(s.cpus.to_string())
        .arg("-m")
        .arg(s.memory_mb.to_string())
        .args(["-nographic", "-display", "none", "-monitor", "none"])
        .args(["-nic", "none"])
        // A guest that reboots (a reboot step) is reset by QEMU and boots the same kernel
        // and initramfs again; otherwise a reset (a panic, with panic=-1) ends QEMU.
        .args(if boots > 1 {
            &[][..]
        } else {
            &["-no-reboot"][..]
        })
        .args(disk.iter().flat_map(|d| {
            [
                "-drive".to_string(),
                format!("file={},format=raw,if=virtio,cache=unsafe", d.display()),
            ]
        }))
        .arg("-kernel")
        .arg(&kernel.vmlinuz)
        .arg("-initrd")
        .arg(&initrd)
        .arg("-append")
        .arg(&append)
        .arg("-serial")
        .arg(format!("file:{}", console_path.display()))
        .arg("-serial")
        .arg(format!("file:{}", results_path.display()))
        .arg("-qmp")
        .arg(format!("unix:{},server=on,wait=off", qmp_path.display()))
        .stdin(Stdio::null())
        .stdout(qemu_log)
        .stderr(qemu_log2)
        .spawn()
        .map_err(|e| {
            HarnessError::setup(format!("cannot start {}: {e}", qemu.display()), SETUP_HINT)
        })?;
    // Killed and reaped on every way out of this function, early returns and panics included.
    let mut child = KillOnDrop(child);

    let mut failures = Vec::new();
    let mut qmp = None;
    if !s.requests.is_empty() {
        match Qmp::connect(&qmp_path, Duration::from_secs(20), || {
            matches!(child.0.try_wait(), Ok(Some(_)))
        }) {
            Ok(q) => qmp = Some(q),
            Err(e) => failures.push(Failure {
                check: "qmp".into(),
                expected: "QMP socket usable".into(),
                actual: e,
            }),
        }
    }

    let mut tail = Tail {
        path: results_path.clone(),
        pos: 0,
        partial: Vec::new(),
    };
    let mut boot_time = None;
    let mut booted = 0usize;
    let mut extra_boot = None;
    let mut done = false;
    let mut last_started = String::from("(none: init never reported)");
    let mut started = std::collections::BTreeSet::new();
    // Lines on the results port that are not one of our events: named when a step's result
    // is missing, so a lost or cut line explains itself instead of a bare "no result".
    let mut garbage: Vec<(Option<String>, String)> = Vec::new();
    let mut outputs = BTreeMap::new();
    let mut files = BTreeMap::new();
    let mut timed_out = false;
    let mut exited = false;
    loop {
        // Reading after try_wait: lines written just before exit are still picked up.
        exited = exited || matches!(child.0.try_wait(), Ok(Some(_)));
        for line in tail.lines() {
            let ev = match serde_json::from_str::<Value>(&line) {
                Ok(v) if v.is_object() => v,
                _ => {
                    garbage.push((step_of_cut_line(&line), describe_garbage(&line)));
                    match recover_event(&line) {
                        Some(v) => v,
                        None => continue,
                    }
                }
            };
            match ev.get("ev").and_then(Value::as_str) {
                Some("boot") => {
                    booted += 1;
                    boot_time.get_or_insert(start.elapsed());
                    if booted > boots {
                        extra_boot = Some(last_started.clone());
                    }
                }
                Some("start") => {
                    last_started = ev["step"].as_str().unwrap_or("?").to_string();
                    started.insert(last_started.clone());
                }
                Some("result") => {
                    let name = ev["step"].as_str().unwrap_or("?").to_string();
                    outputs.insert(
                        name,
                        StepOutput {
                            rc: ev["rc"]
                                .as_i64()
                                .and_then(|r| i32::try_from(r).ok())
                                .unwrap_or(-1),
                            stdout: String::from_utf8_lossy(&b64(ev.get("stdout"))).into_owned(),
                            stderr: String::from_utf8_lossy(&b64(ev.get("stderr"))).into_owned(),
                        },
                    );
                }
                Some("file") => {
                    let path = ev["path"].as_str().unwrap_or("?").to_string();
                    files
                        .entry(last_started.clone())
                        .or_insert_with(BTreeMap::new)
                        .insert(path, b64(ev.get("b64")));
                }
                Some("request") => {
                    let name = ev["name"].as_str().unwrap_or("?").to_string();
                    let result = match (s.requests.get(&name), qmp.as_mut()) {
                        (None, _) => Err(format!("the scenario defines no request {name}")),
                        (Some(_), None) => Err("no QMP connection".into()),
                        (Some(cmds), Some(q)) => {
                            cmds.iter().try_for_each(|c| q.execute(c).map(drop))
                        }
                    };
                    if let Err(e) = result {
                        failures.push(Failure {
                            check: format!("request {name}"),
                            expected: "the host carries it out".into(),
                            actual: e,
                        });
                    }
                }
                Some("done") => done = true,
                _ => {}
            }
        }
        if exited {
            break;
        }
        if let Some(during) = &extra_boot {
            failures.push(Failure {
                check: "boot".into(),
                expected: format!("{boots} boot(s): one, and one per reboot step"),
                actual: format!(
                    "boot {booted} during step {during} (a kernel panic, or a reset?); console tail:\n    {}",
                    console_tail(&workdir)
                ),
            });
            kill(&mut child.0);
            break;
        }
        if start.elapsed() > s.timeout {
            timed_out = true;
            kill(&mut child.0);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.0.wait();
    let wall_time = start.elapsed();

    if timed_out {
        failures.push(Failure {
            check: "boot".into(),
            expected: format!("the guest finishes within {} s", s.timeout.as_secs()),
            actual: format!(
                "QEMU killed after {:.0} s; last step started: {last_started}; console tail:\n    {}",
                wall_time.as_secs_f64(),
                console_tail(&workdir)
            ),
        });
    } else if !done {
        failures.push(Failure {
            check: "boot".into(),
            expected: "the guest runs all steps and powers off".into(),
            actual: format!(
                "QEMU exited early (kernel panic or init died?); last step started: {last_started}; console tail:\n    {}\n    qemu.log: {}",
                console_tail(&workdir),
                String::from_utf8_lossy(&fs::read(workdir.join("qemu.log")).unwrap_or_default()).trim()
            ),
        });
    }

    for step in &judged {
        match outputs.get(&step.name) {
            None => failures.push(Failure {
                check: step.name.clone(),
                expected: "the step runs".into(),
                actual: format!(
                    "no result from the guest (its start was {}reported){}",
                    if started.contains(&step.name) {
                        ""
                    } else {
                        "not "
                    },
                    {
                        let mine: Vec<&String> = garbage
                            .iter()
                            .filter(|(s, _)| s.as_deref() == Some(step.name.as_str()))
                            .map(|(_, d)| d)
                            .collect();
                        match (mine.is_empty(), garbage.len()) {
                            (_, 0) => String::new(),
                            (true, n) => format!("; {n} unreadable line(s) on the results port"),
                            (false, _) => format!(
                                "; its unreadable line(s) on the results port:\n    {}",
                                mine.iter()
                                    .map(|g| g.as_str())
                                    .collect::<Vec<_>>()
                                    .join("\n    ")
                            ),
                        }
                    }
                ),
            }),
            Some(out) => {
                for e in &step.expects {
                    if let Err(actual) = e.judge(out) {
                        let actual = if out.rc == 137 {
                            format!(
                                "killed after its {} s timeout: {actual}",
                                step.timeout.as_secs()
                            )
                        } else {
                            actual
                        };
                        failures.push(Failure {
                            check: step.name.clone(),
                            expected: e.expected(),
                            actual,
                        });
                    }
                }
            }
        }
    }

    let mut outcome = Outcome {
        scenario: s.name.clone(),
        kernel,
        boot_time,
        wall_time,
        outputs,
        files,
        failures,
        workdir,
        notes: Vec::new(),
    };
    for (step, name) in &s.fixtures {
        if outcome.outputs.contains_key(step) {
            let files = outcome.files.get(step).cloned().unwrap_or_default();
            fixture::process(name, &files, &mut outcome);
        }
    }
    Ok(outcome)
}

#[cfg(test)]
mod freshness_tests {
    use super::*;

    #[test]
    fn stale_only_when_a_listed_source_is_newer() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("a b.rs");
        let other = dir.path().join("unrelated.rs");
        fs::write(&src, "").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let bin = dir.path().join("prog");
        fs::write(&bin, "").unwrap();
        fs::write(
            bin.with_extension("d"),
            format!(
                "{}: {}\n",
                bin.display(),
                src.display().to_string().replace(' ', "\\ ")
            ),
        )
        .unwrap();
        assert_eq!(dep_info_sources(&bin).unwrap(), vec![src.clone()]);
        std::thread::sleep(Duration::from_millis(20));
        fs::write(&other, "").unwrap();
        assert!(
            check_fresh("prog", &bin).is_ok(),
            "a file the binary does not use"
        );
        fs::write(&src, "changed").unwrap();
        let e = check_fresh("prog", &bin).unwrap_err().to_string();
        assert!(
            e.contains("older than its source") && e.contains("a b.rs"),
            "{e}"
        );
    }
}

#[cfg(test)]
mod results_port_tests {
    use super::*;

    #[test]
    fn an_event_glued_to_a_cut_line_is_kept_and_the_cut_line_is_named() {
        let cut = r#"{"ev":"result","step":"a","rc":0,"stdout":"QUJD"#;
        let next = r#"{"ev":"start","step":"b"}"#;
        let glued = format!("{cut}{next}");
        assert!(serde_json::from_str::<Value>(&glued).is_err());
        assert_eq!(recover_event(&glued).unwrap()["step"], "b");
        // A line that is only a cut event, or no event at all, gives nothing back.
        assert!(recover_event(cut).is_none());
        assert!(recover_event("random console noise").is_none());
        assert_eq!(step_of_cut_line(&glued).as_deref(), Some("a"));
        assert_eq!(step_of_cut_line("random console noise"), None);
        let d = describe_garbage(&glued);
        assert!(d.starts_with(&format!("{} bytes: ", glued.len())), "{d}");
        assert!(d.contains("\"step\\\":\\\"b\\\"}"), "{d}");
    }
}
