//! Isolation that follows containers: `isold hook` (the OCI hook podman and CRI-O run at a
//! container's start and stop) and the daemon's end of its socket.
//!
//! The hook reads the container's state on standard input and its bundle's `config.json`,
//! turns the annotations into a request ([`libtaskisol::claims::Request`]) and sends
//! it to `isold run` over a root-only socket next to the runtime state file
//! (`/run/isold/isold.sock`). The daemon owns the claims: it applies them, keeps them in
//! `/run/isold/claims.json`, and releases them when the container's poststop hook says so or
//! when it finds the container's process gone.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use libtaskisol::claims::annotations::{name_of, pod_of};
use libtaskisol::claims::kubelet::{exclusive, CpuManagerState, KubeContainer};
use libtaskisol::claims::oci::{Bundle, HookState};
use libtaskisol::claims::wire::{Message, Reply};
use libtaskisol::claims::{ClaimRequest, Request, MAX_INPUT};
use libtaskisol::SysRoot;

use crate::cli::{HookArgs, IfDown};

/// The daemon's socket next to the runtime state file.
pub fn socket_path(runtime_state: &Path) -> PathBuf {
    runtime_state.with_file_name("isold.sock")
}

/// How long the hook waits for the daemon's answer (an apply on a big host takes seconds).
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// One line of at most [`MAX_INPUT`] bytes.
fn read_line(s: &UnixStream) -> Result<Vec<u8>, String> {
    let mut line = Vec::new();
    BufReader::new(s.take(MAX_INPUT as u64 + 1))
        .read_until(b'\n', &mut line)
        .map_err(|e| format!("reading the request: {e}"))?;
    if line.len() > MAX_INPUT {
        return Err(format!("request over {MAX_INPUT} bytes"));
    }
    Ok(line)
}

/// Send `msg` to the daemon at `socket` and wait for its answer. `Err(None)` when no daemon
/// listens there.
pub fn send(socket: &Path, msg: &Message) -> Result<Reply, Option<String>> {
    let mut s = match UnixStream::connect(socket) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Err(None)
        }
        Err(e) => return Err(Some(format!("cannot connect to {}: {e}", socket.display()))),
    };
    let _ = s.set_read_timeout(Some(REPLY_TIMEOUT));
    let mut bytes = serde_json::to_vec(msg).expect("message serializes");
    bytes.push(b'\n');
    // A refusal (a peer that is not root) may come before the request is read: the answer
    // is there to read even when the write found the socket closed.
    let sent = s.write_all(&bytes);
    let line = read_line(&s).map_err(Some)?;
    if let (Err(e), true) = (&sent, line.is_empty()) {
        return Err(Some(format!("sending to {}: {e}", socket.display())));
    }
    if line.is_empty() {
        return Err(Some(format!(
            "{} closed without an answer",
            socket.display()
        )));
    }
    serde_json::from_slice(&line)
        .map_err(|e| Some(format!("{} answered something else: {e}", socket.display())))
}

/// `isold hook`: read the container's state on standard input, then ask the daemon to claim
/// (at creation) or release (at poststop) its CPUs. Exit 0 lets the container go on; 1 stops
/// its start (a refused claim, a bad annotation, and a daemon not running with `--if-down
/// fail`).
///
/// Long because it is the hook's steps in the order the runtime expects them, each with its exit
/// code and message.
pub fn hook(root: &SysRoot, socket: &Path, args: &HookArgs) -> i32 {
    SYSLOG.store(root.is_host(), std::sync::atomic::Ordering::Relaxed);
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin()
        .take(MAX_INPUT as u64 + 1)
        .read_to_end(&mut input)
    {
        return hook_fail(&format!(
            "cannot read the container state on standard input: {e}"
        ));
    }
    let state = match HookState::parse(&input) {
        Ok(s) => s,
        Err(e) => return hook_fail(&e.to_string()),
    };
    if state.status == "stopped" || args.stage.as_deref() == Some("poststop") {
        return release(socket, &state.id);
    }
    let bundle = match Bundle::read(&state.bundle) {
        Ok(b) => b,
        Err(e) => return hook_fail(&format!("container {}: {e}", short(&state.id))),
    };
    // The bundle's annotations are the container's; the state's are the same when the
    // runtime passes them.
    let mut ann = state.annotations.clone();
    ann.extend(bundle.annotations.clone());
    let name = name_of(&ann);
    let request = match Request::from_annotations(&ann, name.as_deref()) {
        Ok(Some(r)) => r,
        Ok(None) => return 0,
        Err(e) => return hook_fail(&format!("container {}: {e}", short(&state.id))),
    };
    if let Some(uid) = rootless() {
        // A rootless runtime runs its hooks as its user, who may not reach isold's socket
        // (root's, in a 0700 directory): said plainly, not as a connection error.
        return refused(
            args,
            &state.id,
            &format!(
                "container {} asks for isolated CPUs, but it runs rootless (uid {uid}): only root's containers (rootful podman, CRI-O, containerd) may claim CPUs",
                short(&state.id)
            ),
        );
    }
    // As CRI-O's hooks, and as NRI judges: only a container that holds exclusive CPUs (a
    // Guaranteed pod's, with whole CPUs, as the kubelet recorded it) has CPUs of its own.
    let cpu_list = bundle
        .cpus
        .as_ref()
        .map(|c| c.to_string())
        .unwrap_or_default();
    let kube = KubeContainer {
        cgroups_path: bundle.cgroups_path.as_deref().unwrap_or_default(),
        shares: bundle.shares,
        cpus: &cpu_list,
        name: name.as_deref(),
    };
    match exclusive(&kube, &CpuManagerState::read(root)) {
        Ok(()) => {}
        // Whether the kubelet gave it CPUs cannot be told (its state unreadable, or a cgroups
        // path none of its own while it keeps one): refused, not let through.
        Err(why) if why.undecided() => {
            return refused(
                args,
                &state.id,
                &format!("container {}: claim refused: {why}", short(&state.id)),
            );
        }
        Err(why) => {
            eprintln!(
                "isold: container {} asks for isolated CPUs, but {why}: it is left as it is",
                short(&state.id),
            );
            return 0;
        }
    }
    if state.pid <= 0 {
        return hook_fail(&format!(
            "container {}: the state has no pid (status '{}'): isold's hook belongs to the prestart or createRuntime stage",
            short(&state.id),
            state.status
        ));
    }
    let Some(cpus) = bundle.cpus else {
        return hook_fail(&format!(
            "container {}: it asks for isolated CPUs but has no cpuset (linux.resources.cpu.cpus): give it CPUs (podman --cpuset-cpus, a Guaranteed pod with whole CPUs)",
            short(&state.id)
        ));
    };
    let msg = Message::Claim(ClaimRequest {
        container: state.id.clone(),
        name,
        pod: pod_of(&ann),
        source: None,
        pid: state.pid,
        cpus: cpus.to_string(),
        request,
    });
    match send(socket, &msg) {
        Ok(r) if r.ok => {
            eprintln!("isold: {}", r.message);
            0
        }
        Ok(r) => refused(args, &state.id, &r.message),
        Err(None) => {
            let what = format!(
                "isold run is not running (no daemon at {}): container {} asked for isolated CPUs {cpus}",
                socket.display(),
                short(&state.id)
            );
            match args.if_down {
                IfDown::Start => {
                    eprintln!("isold: {what}; it starts without them (--if-down start)");
                    0
                }
                IfDown::Fail => hook_fail(&format!("{what}; not started (--if-down fail)")),
            }
        }
        Err(Some(e)) => hook_fail(&e),
    }
}

/// A claim refused (by the daemon, or because the container is rootless): the container's
/// start fails with `why`, or it starts without isolated CPUs (`--if-refused start`).
fn refused(args: &HookArgs, id: &str, why: &str) -> i32 {
    match args.if_refused {
        IfDown::Start => {
            eprintln!(
                "isold: {why}; container {} starts without isolated CPUs (--if-refused start)",
                short(id)
            );
            crate::exit::EXIT_OK
        }
        IfDown::Fail => hook_fail(why),
    }
}

/// The user a rootless runtime runs this hook for: not root, or root of a user namespace
/// other than the initial one (rootless podman runs its hooks inside its namespace, as its
/// uid 0); its uid on the host.
fn rootless() -> Option<u32> {
    let euid = nix::unistd::geteuid().as_raw();
    if euid != 0 {
        return Some(euid);
    }
    let map = std::fs::read_to_string("/proc/self/uid_map").ok()?;
    host_uid_of_root(&map)
}

/// Root's uid on the host in a uid map, when the map is not the initial namespace's.
fn host_uid_of_root(map: &str) -> Option<u32> {
    let mut lines = map
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>());
    let first = lines.next()?;
    if let ["0", "0", "4294967295"] = first[..] {
        return None;
    }
    std::iter::once(first)
        .chain(lines)
        .find(|f| f.first() == Some(&"0"))
        .and_then(|f| f.get(1)?.parse().ok())
}

fn release(socket: &Path, id: &str) -> i32 {
    if rootless().is_some() {
        // A rootless container claimed nothing.
        return crate::exit::EXIT_OK;
    }
    let msg = Message::Release {
        container: id.to_string(),
    };
    match send(socket, &msg) {
        // What was given back, or that the container held nothing (or a refusal): said
        // either way, and the container's stop goes on.
        Ok(r) => {
            eprintln!("isold: {}", r.message);
            0
        }
        // The daemon releases it when it finds the container's process gone.
        Err(None) => 0,
        Err(Some(e)) => {
            eprintln!("isold: {e}; the daemon releases the claim when it finds the container gone");
            0
        }
    }
}

/// Whether a refusal also goes to syslog (the running system's hook; not `--root`).
static SYSLOG: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A container not started: why, on the hook's standard error for the runtime, and in the
/// system log (`journalctl -t isold-hook`), since runtimes keep a hook's output from their
/// user (crun reports only the hook's exit code).
fn hook_fail(msg: &str) -> i32 {
    eprintln!("isold: {msg}");
    if SYSLOG.load(std::sync::atomic::Ordering::Relaxed) {
        syslog(msg);
    }
    crate::exit::EXIT_FAILURE
}

/// One line to the system log socket, as syslog(3) sends it (facility daemon, level err):
/// open to every user, so a rootless runtime's hook is heard too.
fn syslog(msg: &str) {
    let line = format!("<27>isold-hook[{}]: {msg}", std::process::id());
    if let Ok(s) = std::os::unix::net::UnixDatagram::unbound() {
        let _ = s.send_to(line.as_bytes(), "/dev/log");
    }
}

fn short(id: &str) -> &str {
    libtaskisol::claims::short(id)
}

/// `isold claims`: the claims the running daemon holds; exit 4 when it is not running.
pub fn list(socket: &Path, json: bool) -> i32 {
    let reply = match send(socket, &Message::List {}) {
        Ok(r) if !r.ok => {
            eprintln!("isold: {}", r.message);
            return crate::exit::EXIT_STATUS_UNKNOWN;
        }
        Ok(r) => r,
        Err(None) => {
            eprintln!(
                "isold: isold run is not running (no daemon at {})",
                socket.display()
            );
            return crate::exit::EXIT_NOT_RUNNING;
        }
        Err(Some(e)) => {
            eprintln!("isold: {e}");
            return crate::exit::EXIT_STATUS_UNKNOWN;
        }
    };
    if json {
        println!(
            "{}",
            serde_json::to_string(&reply.claims).expect("claims serialize")
        );
        return crate::exit::EXIT_OK;
    }
    if reply.claims.is_empty() {
        println!("no container claims CPUs");
    }
    for c in &reply.claims {
        let mut what = Vec::new();
        if !c.isolated.is_empty() {
            what.push(format!("isolated {}", c.isolated));
        }
        if let Some(q) = &c.pm_qos {
            what.push(format!("PM QoS {q}"));
        }
        if let Some(g) = &c.governor {
            what.push(format!("governor {g}"));
        }
        println!(
            "{}: CPUs {}, pid {}: {}",
            c.who(),
            c.cpus,
            c.pid,
            what.join(", ")
        );
    }
    crate::exit::EXIT_OK
}

/// Where isold and the kubelet disagree on this node (`isold audit`, `isold status`): read
/// from the kubelet's `cpu_manager_state` and `config.yaml`, isold's configuration and its
/// claims file. None without a kubelet state (not a Kubernetes node, or not the static
/// policy's), nor when isold's configuration cannot be loaded (said elsewhere).
pub fn kubelet_disagreements(
    root: &SysRoot,
    config_path: &Path,
    state_path: &Path,
) -> Vec<libtaskisol::claims::kubelet::Disagreement> {
    use libtaskisol::claims::kubelet::{self, Disagreement};
    let state = match CpuManagerState::read(root) {
        Ok(None) => return Vec::new(),
        Ok(Some(s)) => s,
        Err(e) => {
            return vec![Disagreement {
                what: e.to_string(),
                fix: "no container may claim until the kubelet's state can be read".into(),
            }]
        }
    };
    let Ok(policy) = crate::exit::load_policy(config_path, root) else {
        return Vec::new();
    };
    let boot = libtaskisol::policy::state::boot_id(root).unwrap_or_default();
    let claims = libtaskisol::claims::store::ClaimsFile::load(
        &libtaskisol::claims::store::ClaimsFile::path_for(state_path),
        &boot,
    )
    .map(|l| l.claims)
    .unwrap_or_default();
    kubelet::disagreements(
        &state,
        kubelet::reserved_cpus(root).as_ref(),
        &policy.static_isolated(),
        &libtaskisol::claims::allowed_cpus(&policy),
        &claims,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request line of MAX_INPUT bytes is read whole; one byte more is refused, not cut.
    #[test]
    fn a_line_up_to_the_limit_is_read_and_one_byte_over_refused() {
        for (len, ok) in [(MAX_INPUT, true), (MAX_INPUT + 1, false)] {
            let (mut w, r) = UnixStream::pair().unwrap();
            let writer = std::thread::spawn(move || {
                let mut line = vec![b'x'; len - 1];
                line.push(b'\n');
                let _ = w.write_all(&line);
            });
            let got = read_line(&r);
            writer.join().unwrap();
            match got {
                Ok(line) => {
                    assert!(ok, "{len} bytes read");
                    assert_eq!(line.len(), len);
                }
                Err(e) => {
                    assert!(!ok, "{len} bytes refused: {e}");
                    assert_eq!(e, format!("request over {MAX_INPUT} bytes"));
                }
            }
        }
    }

    /// No daemon at the socket is `Err(None)` (the hook's --if-down decides); a socket path
    /// that cannot be connected to for another reason is an error that names it.
    #[test]
    fn no_daemon_is_told_apart_from_a_socket_that_cannot_be_used() {
        let dir = tempfile::tempdir().unwrap();
        let msg = Message::Release {
            container: "abc".into(),
        };
        assert!(matches!(
            send(&dir.path().join("isold.sock"), &msg),
            Err(None)
        ));
        let long = dir.path().join("x".repeat(200));
        match send(&long, &msg) {
            Err(Some(e)) => assert!(e.starts_with("cannot connect to "), "{e}"),
            other => panic!("a path too long for a socket: {other:?}"),
        }
    }

    /// The initial namespace's map is not rootless; a rootless podman's (its uid as root,
    /// its subuids after) names the user's uid.
    #[test]
    fn a_user_namespaces_root_is_its_users_uid() {
        assert_eq!(host_uid_of_root("         0          0 4294967295\n"), None);
        assert_eq!(
            host_uid_of_root("         0       1001          1\n"),
            Some(1001)
        );
        assert_eq!(host_uid_of_root("0 1001 1\n1 100000 65536\n"), Some(1001));
        assert_eq!(host_uid_of_root("1 100000 65536\n"), None);
        assert_eq!(host_uid_of_root(""), None);
    }
}
