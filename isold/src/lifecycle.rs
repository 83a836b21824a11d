//! How `isold run` starts and stops next to systemd: the lock that says it runs, why it was
//! asked to stop (a stop, a restart, a shutdown), and the file descriptor store that keeps its
//! CPU latency request held across a restart.
//!
//! Why a stop is told from a restart or a shutdown by asking systemd for its jobs: systemd
//! sends the same SIGTERM in all three cases and passes the service nothing that says which
//! (`$SERVICE_RESULT` and friends reach only ExecStop= and ExecStopPost=, and describe how the
//! service ended, not why). What does say it is the job queue, fixed before the first SIGTERM
//! is sent: `systemctl restart` queues one job of type `restart` for the unit (it stays
//! `restart` while the unit stops, and becomes `start` only after); a plain `systemctl stop`
//! queues a `stop` job; a shutdown, reboot, halt, kexec or soft-reboot queues a `start` job
//! for shutdown.target (pulled in by systemd-poweroff.service and its siblings), which also
//! makes `systemctl is-system-running` say `stopping`. isold reads both with systemctl (the
//! manager's private socket: no D-Bus daemon needed) and restores only when it is sure: a stop
//! job for its own unit and no shutdown. A kill from outside systemd (`kill`, `systemctl
//! kill`) queues no job and is taken as "keep".

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The lock `isold run` holds while it runs, next to the runtime state file.
pub fn run_lock_path(state_path: &Path) -> PathBuf {
    state_path
        .parent()
        .unwrap_or(Path::new("."))
        .join(".isold.run.lock")
}

/// The lock of a running `isold run`: held (exclusively) for the life of the process.
#[derive(Debug)]
pub struct RunLock {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

/// Take the run lock of the state file `state_path`; `Err` with the message when another
/// `isold run` holds it.
pub fn lock_run(state_path: &Path) -> Result<RunLock, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = run_lock_path(state_path);
    if let Some(dir) = path.parent() {
        libtaskisol::policy::files::private_dir(dir)
            .map_err(|e| format!("{}: {}", dir.display(), io_text(&e)))?;
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libtaskisol::policy::files::NOFOLLOW)
        .open(&path)
        .map_err(|e| format!("{}: {}", path.display(), io_text(&e)))?;
    match nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(l) => Ok(RunLock { _lock: l }),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Err(format!(
            "another isold run is running with the state file {}",
            state_path.display()
        )),
        Err((_, e)) => Err(format!("flock({}): {e}", path.display())),
    }
}

/// Whether an `isold run` holds the run lock of `state_path`: `Some(pid)` (the pid of its
/// status file, when readable) if one does.
pub fn running(state_path: &Path) -> Option<Option<i32>> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libtaskisol::policy::files::NOFOLLOW)
        .open(run_lock_path(state_path))
        .ok()?;
    match nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockSharedNonblock) {
        Ok(_) => None,
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
            Some(crate::status::read(state_path).map(|s| s.pid))
        }
        Err(_) => None,
    }
}

fn io_text(e: &std::io::Error) -> String {
    libtaskisol::error::io_strerror(e)
}

/// Why `isold run` was asked to stop, as far as systemd's jobs tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopKind {
    /// A plain stop: `systemctl stop`, or SIGTERM/SIGINT outside systemd.
    Stop,
    /// `systemctl restart` (or try-restart, reload-or-restart).
    Restart,
    /// The system is shutting down, rebooting, halting or switching kernels.
    Shutdown,
    /// A container's stop (a Kubernetes pod or a podman container): a rollout, a drain, a
    /// node's shutdown or a pod deleted cannot be told apart from inside, and none is an
    /// undo (the uninstall runs `isold restore` itself).
    Container(String),
    /// It cannot be told (said why): treated as a restart, never undone.
    Unknown(String),
}

impl StopKind {
    /// For the log.
    pub fn describe(&self) -> String {
        match self {
            StopKind::Stop => "a stop".into(),
            StopKind::Restart => "a restart of the service".into(),
            StopKind::Shutdown => "the system shutting down".into(),
            StopKind::Container(what) => format!(
                "the stop of {what} (a rollout, a drain or a node's shutdown look the same)"
            ),
            StopKind::Unknown(why) => format!("a stop of unknown cause ({why})"),
        }
    }
}

/// Targets whose start job means the system is going down.
const SHUTDOWN_UNITS: &[&str] = &[
    "shutdown.target",
    "reboot.target",
    "poweroff.target",
    "halt.target",
    "kexec.target",
    "soft-reboot.target",
    "final.target",
];

/// The cause of a stop of `unit`, from `systemctl list-jobs --no-legend` (one job a line:
/// id, unit, type, state) and `systemctl is-system-running` (`stopping` during a shutdown).
pub fn classify(jobs: &str, unit: &str, system_state: &str) -> StopKind {
    let mut own = None;
    for line in jobs.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [_, u, kind, ..] = f[..] else { continue };
        if SHUTDOWN_UNITS.contains(&u) && kind == "start" {
            return StopKind::Shutdown;
        }
        if u == unit {
            own = Some(kind.to_string());
        }
    }
    if system_state.trim() == "stopping" {
        return StopKind::Shutdown;
    }
    match own.as_deref() {
        Some("stop") => StopKind::Stop,
        Some(k) if k.contains("restart") => StopKind::Restart,
        Some(k) => StopKind::Unknown(format!("{unit} has a job of type {k}")),
        None => StopKind::Unknown(format!(
            "no job of systemd stops {unit}: a signal sent from outside systemd"
        )),
    }
}

/// The service unit this process runs in, from the last component of its cgroup
/// (`0::/system.slice/isold.service`).
pub fn own_unit(cgroup_file: &str) -> Option<String> {
    cgroup_file
        .lines()
        .find_map(|l| l.strip_prefix("0::"))?
        .rsplit('/')
        .find(|c| c.ends_with(".service"))
        .map(str::to_string)
}

/// Ask systemd why this process is being stopped. A process that is not the main process of
/// a service (no `$INVOCATION_ID`, which systemd sets for every service it starts; not in a
/// service's cgroup; started by hand from a shell that runs inside some service, whose
/// environment it inherits) was signalled by whoever started it: a plain stop.
pub fn stop_kind() -> StopKind {
    if let Some(what) = container(
        |k| std::env::var_os(k).is_some(),
        |p| std::path::Path::new(p).exists(),
        &std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default(),
    ) {
        return StopKind::Container(what);
    }
    if std::env::var_os("INVOCATION_ID").is_none() {
        return StopKind::Stop;
    }
    let Some(unit) = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .as_deref()
        .and_then(own_unit)
    else {
        return StopKind::Stop;
    };
    match systemctl(&["show", "--property=MainPID", "--value", &unit]) {
        Ok(main) if main.trim() == std::process::id().to_string() => {}
        Ok(_) => return StopKind::Stop,
        Err(e) => return StopKind::Unknown(format!("systemctl show {unit}: {e}")),
    }
    let jobs = match systemctl(&["list-jobs", "--no-legend", "--no-pager", "--full"]) {
        Ok(out) => out,
        Err(e) => return StopKind::Unknown(format!("systemctl list-jobs: {e}")),
    };
    // is-system-running exits non-zero for every state but "running": only its output counts.
    let state = systemctl(&["is-system-running"]).unwrap_or_else(|e| e);
    classify(&jobs, &unit, &state)
}

/// Whether this process runs in a container, and which kind: from the environment a pod or
/// a runtime gives (`KUBERNETES_SERVICE_HOST`, podman's `container`), the file podman
/// leaves (`/run/.containerenv`), or its cgroup (a kubelet's `kubepods`, podman's
/// `libpod-`, docker's, containerd's `cri-containerd-`). `env` and `exists` answer for the
/// environment and the files.
pub fn container(
    env: impl Fn(&str) -> bool,
    exists: impl Fn(&str) -> bool,
    cgroup: &str,
) -> Option<String> {
    if env("KUBERNETES_SERVICE_HOST") {
        return Some("a Kubernetes pod".into());
    }
    let path = cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or("");
    if path.split('/').any(|c| c.starts_with("kubepods")) {
        return Some("a Kubernetes pod".into());
    }
    // Not /.dockerenv: a build or CI machine is often a docker container whose processes
    // belong to no pod and no rollout.
    if env("container") || exists("/run/.containerenv") {
        return Some("a container".into());
    }
    let runtime = ["libpod-", "docker-", "cri-containerd-", "crio-"];
    path.split('/')
        .any(|c| runtime.iter().any(|r| c.starts_with(r)) && c.ends_with(".scope"))
        .then(|| "a container".into())
}

/// Run systemctl with `args`, for at most 10 s: its standard output, or why not.
fn systemctl(args: &[&str]) -> Result<String, String> {
    let mut child = Command::new("systemctl")
        .args(args)
        .env("SYSTEMD_PAGER", "")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| io_text(&e))?;
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("no answer within 10 s".into());
            }
            Err(e) => return Err(io_text(&e)),
        }
    }
    let mut out = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    Ok(out)
}

/// The name under which the CPU latency request is kept in systemd's file descriptor store.
pub const DMA_FDNAME: &str = "cpu_dma_latency";

/// The descriptor systemd passed back from its store under `name` (`$LISTEN_FDS`,
/// `$LISTEN_FDNAMES`, for this process), if any, made close-on-exec.
pub fn stored_fd(name: &str) -> Option<OwnedFd> {
    let pid: u32 = std::env::var("LISTEN_PID").ok()?.parse().ok()?;
    if pid != std::process::id() {
        return None;
    }
    let n: RawFd = std::env::var("LISTEN_FDS").ok()?.parse().ok()?;
    let names = std::env::var("LISTEN_FDNAMES").unwrap_or_default();
    let at = names.split(':').position(|x| x == name)? as RawFd;
    if at >= n {
        return None;
    }
    let fd = 3 + at;
    // The descriptor must be what the name says: the character device of the request (by
    // its device number: the path it was opened by belongs to the mount namespace of the
    // process that opened it, and reads "/cpu_dma_latency" from another one).
    let dev = nix::sys::stat::stat("/dev/cpu_dma_latency").ok()?;
    let held = nix::sys::stat::fstat(fd).ok()?;
    let chr = |m: u32| m & libc::S_IFMT == libc::S_IFCHR;
    if !chr(held.st_mode) || !chr(dev.st_mode) || held.st_rdev != dev.st_rdev {
        return None;
    }
    // systemd passes it without FD_CLOEXEC: no program isold runs (systemctl) may hold the
    // request.
    nix::fcntl::fcntl(
        fd,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )
    .ok()?;
    // SAFETY: systemd passed fd (3 + its index) to this process for it to own; fstat above
    // proved it open.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// sd_notify(3) with descriptors (`FDSTORE=1`): one datagram to `$NOTIFY_SOCKET` carrying
/// `fds` as SCM_RIGHTS. Without a notify socket, nothing.
pub fn notify_with_fds(msg: &str, fds: &[RawFd]) -> bool {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, UnixAddr};
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return false;
    };
    let path = path.to_string_lossy().into_owned();
    let addr = match path.strip_prefix('@') {
        Some(name) => UnixAddr::new_abstract(name.as_bytes()),
        None => UnixAddr::new(path.as_str()),
    };
    let Ok(addr) = addr else { return false };
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else {
        return false;
    };
    let iov = [std::io::IoSlice::new(msg.as_bytes())];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cmsg };
    sendmsg(
        sock.as_raw_fd(),
        &iov,
        cmsgs,
        MsgFlags::empty(),
        Some(&addr),
    )
    .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systemds_jobs_tell_a_stop_from_a_restart_and_a_shutdown() {
        let u = "isold.service";
        assert_eq!(
            classify("1234 isold.service stop running\n", u, "running\n"),
            StopKind::Stop
        );
        assert_eq!(
            classify("1234 isold.service restart running\n", u, "running\n"),
            StopKind::Restart
        );
        assert_eq!(
            classify("77 isold.service try-restart running\n", u, "degraded\n"),
            StopKind::Restart
        );
        let shutdown = "1 poweroff.target start waiting\n2 systemd-poweroff.service start waiting\n3 shutdown.target start waiting\n9 isold.service stop running\n";
        assert_eq!(classify(shutdown, u, "stopping\n"), StopKind::Shutdown);
        // The target's job alone, or the state alone, say it.
        assert_eq!(
            classify(
                "5 reboot.target start waiting\n9 isold.service stop running\n",
                u,
                ""
            ),
            StopKind::Shutdown
        );
        assert_eq!(
            classify("9 isold.service stop running\n", u, "stopping\n"),
            StopKind::Shutdown
        );
        // A stop job of shutdown.target (booting past it) is no shutdown.
        assert_eq!(
            classify(
                "5 shutdown.target stop waiting\n9 isold.service stop running\n",
                u,
                "running"
            ),
            StopKind::Stop
        );
        // Another unit's stop is not ours; no job at all is a kill from outside.
        assert!(matches!(
            classify("9 tuned.service stop running\n", u, "running"),
            StopKind::Unknown(ref w) if w.contains("outside systemd")
        ));
        assert!(matches!(
            classify("9 isold.service reload running\n", u, "running"),
            StopKind::Unknown(ref w) if w.contains("type reload")
        ));
        assert!(matches!(classify("", u, "running"), StopKind::Unknown(_)));
        // Garbage lines are skipped.
        assert_eq!(
            classify("x\n\n1234 isold.service stop running\n", u, "running"),
            StopKind::Stop
        );
    }

    #[test]
    fn the_unit_is_the_last_service_of_the_cgroup() {
        assert_eq!(
            own_unit("0::/system.slice/isold.service\n").as_deref(),
            Some("isold.service")
        );
        assert_eq!(
            own_unit("1:name=systemd:/x\n0::/system.slice/isold@a.service\n").as_deref(),
            Some("isold@a.service")
        );
        assert_eq!(
            own_unit("0::/user.slice/user-0.slice/session-1.scope\n"),
            None
        );
        assert_eq!(own_unit("12:cpuset:/\n"), None);
    }

    /// The lock file is never opened through a symlink someone left in its place.
    #[test]
    fn a_symlinked_run_lock_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state.json");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        std::os::unix::fs::symlink(&victim, run_lock_path(&state)).unwrap();
        let e = lock_run(&state).unwrap_err();
        assert!(e.contains("symbolic links"), "{e}");
        assert_eq!(running(&state), None);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    }

    #[test]
    fn the_run_lock_is_held_once() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("run/isold/state.json");
        assert_eq!(running(&state), None);
        let l = lock_run(&state).unwrap();
        assert!(lock_run(&state).unwrap_err().contains("another isold run"));
        assert_eq!(running(&state), Some(None));
        drop(l);
        assert_eq!(running(&state), None);
        assert!(lock_run(&state).is_ok());
    }

    /// A pod or a container is told by its environment, the files its runtime leaves or its
    /// cgroup; a service or a shell is not a container.
    #[test]
    fn a_containers_stop_is_told_from_a_services() {
        let none = |_: &str| false;
        let pod = container(|k| k == "KUBERNETES_SERVICE_HOST", none, "0::/\n");
        assert_eq!(pod.as_deref(), Some("a Kubernetes pod"));
        for cg in [
            "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope\n",
            "0::/kubepods/besteffort/pod1/abc\n",
        ] {
            assert_eq!(
                container(none, none, cg).as_deref(),
                Some("a Kubernetes pod"),
                "{cg}"
            );
        }
        assert_eq!(
            container(|k| k == "container", none, "0::/\n").as_deref(),
            Some("a container")
        );
        assert_eq!(
            container(none, |p| p == "/run/.containerenv", "0::/\n").as_deref(),
            Some("a container")
        );
        assert_eq!(
            container(
                none,
                none,
                "0::/machine.slice/libpod-0123abc.scope/container\n"
            )
            .as_deref(),
            Some("a container")
        );
        for cg in [
            "0::/system.slice/isold.service\n",
            "0::/user.slice/user-0.slice/session-1.scope\n",
            "0::/system.slice/libpod-like.service\n",
            "",
        ] {
            assert_eq!(container(none, none, cg), None, "{cg}");
        }
        assert!(StopKind::Container("a Kubernetes pod".into())
            .describe()
            .contains("a rollout, a drain or a node's shutdown"));
    }
}
