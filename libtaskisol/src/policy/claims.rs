//! Containers' claims on CPUs: isolation that follows a container while it runs.
//!
//! A container asks by annotation (isold's own `isold.io/isolate`, or the names of CRI-O's
//! high-performance hooks, so that pods written for the Node Tuning Operator need no change).
//! isold's OCI hook reads the container's state and bundle ([`HookState`], [`Bundle`]), turns
//! the annotations into a [`Request`] and hands it to the running daemon over its socket
//! ([`Message`]). The daemon checks it against the machine ([`Claim::resolve`]), keeps it in a
//! runtime file ([`ClaimsFile`]) and applies the policy with the claim in it
//! ([`super::Policy::with_claims`]): the claimed CPUs join the isolated ones for IRQs, tasks,
//! kthreads and workqueues, and get the PM QoS limit and governor asked for. When the
//! container is gone (its poststop hook, or its process found dead) the claim is released and
//! each value gets back what the claim took from it.
//!
//! Everything that comes from outside (annotations, the hook's standard input, the bundle's
//! `config.json`, a socket message) is checked here, and a bad value is an error naming the
//! field and the value.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::sysroot::SysRoot;

/// isold's own annotation: `"true"` isolates the container's CPUs while it runs.
pub const ISOLATE: &str = "isold.io/isolate";
/// CRI-O's: `disable` (or the deprecated `true`) isolates the container's CPUs from IRQs
/// (isold: from IRQs, tasks, kthreads and workqueues); `housekeeping` keeps the first core of
/// the container (and its SMT siblings) taking them.
pub const CRIO_IRQ: &str = "irq-load-balancing.crio.io";
/// CRI-O's: `enable`, `disable` or `max_latency:N` (microseconds): each CPU's PM QoS resume
/// latency.
pub const CRIO_CSTATES: &str = "cpu-c-states.crio.io";
/// CRI-O's: each CPU's cpufreq governor.
pub const CRIO_GOVERNOR: &str = "cpu-freq-governor.crio.io";
/// CRI-O's annotations that are the runtime's business (scheduler load balancing, CFS
/// quota): accepted, left to the runtime.
pub const CRIO_RUNTIME_ONLY: [&str; 2] = ["cpu-load-balancing.crio.io", "cpu-quota.crio.io"];
/// The annotation in which CRI-O and the kubelet name the container (`KEY/NAME` forms of the
/// annotations above apply to that container only).
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";

/// The largest message, state or `config.json` isold reads from a container or the socket.
pub const MAX_INPUT: usize = 1 << 20;

/// Which of a container's CPUs are isolated for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolate {
    /// None: only the power settings asked for.
    No,
    /// All of them.
    All,
    /// All but the first core of the container and its SMT siblings (CRI-O's
    /// `housekeeping`).
    Housekeeping,
}

/// What a container's annotations ask for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Which CPUs to isolate.
    pub isolate: Isolate,
    /// The PM QoS resume latency to write to each of its CPUs (`n/a`, `0` or microseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pm_qos: Option<String>,
    /// The cpufreq governor for each of its CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub governor: Option<String>,
}

/// The value of annotation `key` for container `name`: `KEY/NAME` before `KEY`.
fn annotation<'a>(
    ann: &'a BTreeMap<String, String>,
    key: &str,
    name: Option<&str>,
) -> Option<(String, &'a str)> {
    if let Some(n) = name {
        let k = format!("{key}/{n}");
        if let Some(v) = ann.get(&k) {
            return Some((k, v.as_str()));
        }
    }
    ann.get(key).map(|v| (key.to_string(), v.as_str()))
}

fn bad(key: &str, value: &str, why: &str) -> String {
    format!("annotation {key}: '{}' {why}", shown(value))
}

/// A value as it may be printed: control characters escaped, at most 64 characters.
fn shown(v: &str) -> String {
    let mut s: String = v.chars().take(64).flat_map(char::escape_default).collect();
    if v.chars().count() > 64 {
        s.push_str("...");
    }
    s
}

impl Request {
    /// What the annotations of container `name` ask for; `None` when they ask for nothing.
    /// A value isold does not understand is an error naming the annotation and the value
    /// (the container must not start believing it is isolated).
    pub fn from_annotations(
        ann: &BTreeMap<String, String>,
        name: Option<&str>,
    ) -> Result<Option<Request>, String> {
        let mut isolate = Isolate::No;
        if let Some((k, v)) = annotation(ann, ISOLATE, name) {
            isolate = match v {
                "true" => Isolate::All,
                "false" => Isolate::No,
                _ => return Err(bad(&k, v, "is not true or false")),
            };
        }
        if let Some((k, v)) = annotation(ann, CRIO_IRQ, name) {
            let asked = match v {
                "disable" | "true" => Isolate::All,
                "housekeeping" => Isolate::Housekeeping,
                "enable" | "false" => Isolate::No,
                _ => return Err(bad(&k, v, "is not disable, housekeeping or enable")),
            };
            // The wider of the two: isold's own `true` and CRI-O's `housekeeping` is all.
            isolate = match (isolate, asked) {
                (Isolate::All, _) | (_, Isolate::All) => Isolate::All,
                (Isolate::Housekeeping, _) | (_, Isolate::Housekeeping) => Isolate::Housekeeping,
                _ => Isolate::No,
            };
        }
        let pm_qos = match annotation(ann, CRIO_CSTATES, name) {
            None => None,
            Some((_, "enable")) => Some("0".to_string()),
            Some((_, "disable")) => Some("n/a".to_string()),
            Some((k, v)) => match v.strip_prefix("max_latency:") {
                Some(n) => Some(latency(&k, v, n)?),
                None => return Err(bad(&k, v, "is not enable, disable or max_latency:N")),
            },
        };
        let governor = match annotation(ann, CRIO_GOVERNOR, name) {
            None => None,
            Some((_, v)) if valid_governor(v) => Some(v.to_string()),
            Some((k, v)) => {
                return Err(bad(
                    &k,
                    v,
                    "is not a cpufreq governor name (1 to 15 of a-z, 0-9, _)",
                ))
            }
        };
        if isolate == Isolate::No && pm_qos.is_none() && governor.is_none() {
            return Ok(None);
        }
        Ok(Some(Request {
            isolate,
            pm_qos,
            governor,
        }))
    }
}

/// `max_latency:N`: N microseconds, 1 to 2^31-1 (the kernel's limit for the attribute; a zero
/// limit is `disable`).
fn latency(key: &str, value: &str, n: &str) -> Result<String, String> {
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || n.len() > 10 {
        return Err(bad(
            key,
            value,
            "is not max_latency:N with N a number of microseconds",
        ));
    }
    match n.parse::<u64>() {
        Ok(0) => Err(bad(key, value, "asks for a zero latency: that is disable")),
        Ok(v) if v <= i32::MAX as u64 => Ok(v.to_string()),
        _ => Err(bad(
            key,
            value,
            "is over the kernel's limit of 2147483647 us",
        )),
    }
}

/// A governor name as the kernel spells them (`CPUFREQ_NAME_LEN` is 16 with the NUL).
pub fn valid_governor(v: &str) -> bool {
    (1..=15).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// A PM QoS value as the daemon accepts it from a request: `n/a`, or a number of microseconds
/// up to 2^31-1 (`0` is "no constraint").
pub fn valid_pm_qos(v: &str) -> bool {
    v == "n/a"
        || (!v.is_empty()
            && v.len() <= 10
            && v.bytes().all(|b| b.is_ascii_digit())
            && v.parse::<u64>().is_ok_and(|n| n <= i32::MAX as u64))
}

/// A container id as runtimes make them (podman and CRI-O: 64 hex digits; others: names):
/// 1 to 128 of letters, digits, `-`, `_`, `.`, not starting with `.`.
pub fn valid_container_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// The container's state as an OCI runtime gives it to a hook on standard input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookState {
    /// The container id.
    pub id: String,
    /// Its process, in the runtime's PID namespace (0 once it is gone, at poststop).
    pub pid: i32,
    /// The bundle directory (with `config.json`).
    pub bundle: PathBuf,
    /// The annotations, when the runtime passes them (it must, per the runtime spec).
    pub annotations: BTreeMap<String, String>,
    /// `creating`, `created`, `running` or `stopped`.
    pub status: String,
}

#[derive(Deserialize)]
struct RawState {
    id: Option<String>,
    #[serde(default)]
    pid: Option<i64>,
    bundle: Option<String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    status: String,
}

impl HookState {
    /// Parse the state a hook reads on standard input. Errors name the field and its value.
    pub fn parse(bytes: &[u8]) -> Result<HookState, String> {
        if bytes.len() > MAX_INPUT {
            return Err(format!(
                "the container state on standard input is {} bytes, over {MAX_INPUT}",
                bytes.len()
            ));
        }
        let raw: RawState = serde_json::from_slice(bytes).map_err(|e| {
            format!("the container state on standard input is not an OCI state (JSON): {e}")
        })?;
        let id = raw
            .id
            .ok_or("the container state on standard input has no id")?;
        if !valid_container_id(&id) {
            return Err(format!(
                "the container state's id '{}' is not a container id (1 to 128 of letters, digits, -, _, .)",
                shown(&id)
            ));
        }
        let pid = match raw.pid {
            None => 0,
            Some(p) if (0..=i32::MAX as i64).contains(&p) => p as i32,
            Some(p) => return Err(format!("the container state's pid {p} is not a process id")),
        };
        let bundle = raw
            .bundle
            .ok_or("the container state on standard input has no bundle")?;
        if !bundle.starts_with('/') {
            return Err(format!(
                "the container state's bundle '{}' is not an absolute path",
                shown(&bundle)
            ));
        }
        Ok(HookState {
            id,
            pid,
            bundle: PathBuf::from(bundle),
            annotations: raw.annotations,
            status: raw.status,
        })
    }
}

/// What isold reads from a bundle's `config.json`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bundle {
    /// `annotations`.
    pub annotations: BTreeMap<String, String>,
    /// `linux.resources.cpu.cpus`: the container's cpuset, when it has one.
    pub cpus: Option<CpuSet>,
    /// `linux.cgroupsPath`.
    pub cgroups_path: Option<String>,
}

impl Bundle {
    /// The Kubernetes QoS class that is not Guaranteed, when the cgroup path says so
    /// (`kubepods-burstable-...` with the systemd driver, `/kubepods/besteffort/...` with
    /// cgroupfs): such a pod's cpuset is the shared pool, never its own CPUs, and CRI-O's
    /// hooks leave it alone too.
    pub fn shared_pool_qos(&self) -> Option<&'static str> {
        let p = self.cgroups_path.as_deref()?;
        ["burstable", "besteffort"].into_iter().find(|q| {
            p.contains(&format!("kubepods-{q}")) || p.contains(&format!("/kubepods/{q}/"))
        })
    }
}

#[derive(Deserialize)]
struct RawConfig {
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    linux: Option<RawLinux>,
}
#[derive(Deserialize)]
struct RawLinux {
    #[serde(default)]
    resources: Option<RawResources>,
    #[serde(default, rename = "cgroupsPath")]
    cgroups_path: Option<String>,
}
#[derive(Deserialize)]
struct RawResources {
    #[serde(default)]
    cpu: Option<RawCpu>,
}
#[derive(Deserialize)]
struct RawCpu {
    #[serde(default)]
    cpus: Option<String>,
}

impl Bundle {
    /// Read `DIR/config.json`.
    pub fn read(dir: &Path) -> Result<Bundle, String> {
        let path = dir.join("config.json");
        let mut bytes = Vec::new();
        let f = std::fs::File::open(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        use std::io::Read;
        f.take(MAX_INPUT as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Bundle::parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parse a `config.json`.
    pub fn parse(bytes: &[u8]) -> Result<Bundle, String> {
        if bytes.len() > MAX_INPUT {
            return Err(format!("over {MAX_INPUT} bytes"));
        }
        let raw: RawConfig = serde_json::from_slice(bytes)
            .map_err(|e| format!("not an OCI runtime configuration (JSON): {e}"))?;
        let cgroups_path = raw.linux.as_ref().and_then(|l| l.cgroups_path.clone());
        let cpus = match raw
            .linux
            .and_then(|l| l.resources)
            .and_then(|r| r.cpu)
            .and_then(|c| c.cpus)
        {
            None => None,
            Some(s) if s.trim().is_empty() => None,
            Some(s) => Some(CpuSet::parse_list(s.trim()).map_err(|e| {
                format!(
                    "linux.resources.cpu.cpus '{}' is not a CPU list: {e}",
                    shown(&s)
                )
            })?),
        };
        Ok(Bundle {
            annotations: raw.annotations,
            cpus,
            cgroups_path,
        })
    }
}

/// A message on the daemon's socket: one JSON object on one line, answered by one
/// [`Reply`] line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Message {
    /// A container starts and asks for its CPUs.
    Claim(ClaimRequest),
    /// A container stopped: give its CPUs back.
    Release {
        /// The container id.
        container: String,
    },
    /// The claims in force.
    List {},
}

/// A container's claim as the hook sends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    /// The container id.
    pub container: String,
    /// Its name, for messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its process (in the daemon's PID namespace): the claim lasts as long as it does.
    pub pid: i32,
    /// Its cpuset, as a CPU list.
    pub cpus: String,
    /// What it asks for.
    pub request: Request,
}

/// The daemon's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply {
    /// Whether the request was carried out.
    pub ok: bool,
    /// What was done, or why not.
    pub message: String,
    /// The claims in force (for `list`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<Claim>,
}

impl Message {
    /// Parse one line from the socket. Errors say what is wrong with it.
    pub fn parse(line: &[u8]) -> Result<Message, String> {
        if line.len() > MAX_INPUT {
            return Err(format!("message over {MAX_INPUT} bytes"));
        }
        let m: Message = serde_json::from_slice(line)
            .map_err(|e| format!("not a request (a JSON object: claim, release or list): {e}"))?;
        match &m {
            Message::Claim(c) if !valid_container_id(&c.container) => Err(format!(
                "claim: container id '{}' is not a container id",
                shown(&c.container)
            )),
            Message::Release { container } if !valid_container_id(container) => Err(format!(
                "release: container id '{}' is not a container id",
                shown(container)
            )),
            _ => Ok(m),
        }
    }
}

/// A claim in force: a container, how to tell it is still alive, and what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    /// The container id.
    pub container: String,
    /// Its name, for messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its process.
    pub pid: i32,
    /// That process's start time (clock ticks after boot): a reused pid is not the container.
    pub starttime: u64,
    /// The container's CPUs.
    pub cpus: String,
    /// The CPUs isolated for it (a CPU list, maybe empty).
    pub isolated: String,
    /// The PM QoS resume latency of its CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pm_qos: Option<String>,
    /// The cpufreq governor of its CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub governor: Option<String>,
}

impl Claim {
    /// The container's CPUs.
    pub fn cpu_set(&self) -> CpuSet {
        CpuSet::parse_list(&self.cpus).unwrap_or_default()
    }

    /// The CPUs isolated for it.
    pub fn isolated_set(&self) -> CpuSet {
        CpuSet::parse_list(&self.isolated).unwrap_or_default()
    }

    /// How the claim is named in messages: the container's name, or its short id.
    pub fn who(&self) -> String {
        who(&self.container, self.name.as_deref())
    }

    /// Check request `req` against the machine and the claims already in force (`others`,
    /// which it does not replace), with `online` the online CPUs and `static_isolated` the
    /// ones the policy isolates anyway. The claim's process must be alive.
    pub fn resolve(
        root: &SysRoot,
        req: &ClaimRequest,
        online: &CpuSet,
        static_isolated: &CpuSet,
        others: &[Claim],
    ) -> Result<Claim, String> {
        let who = who(&req.container, req.name.as_deref());
        let cpus = CpuSet::parse_list(&req.cpus)
            .map_err(|e| format!("{who}: cpus '{}' is not a CPU list: {e}", shown(&req.cpus)))?;
        if cpus.is_empty() {
            return Err(format!("{who}: no cpuset: isolating it would isolate every CPU; give it CPUs (--cpuset-cpus, a Guaranteed pod)"));
        }
        let off = cpus.difference(online);
        if !off.is_empty() {
            return Err(format!(
                "{who}: CPUs {off} are not online (online: {online})"
            ));
        }
        if req.pid <= 0 {
            return Err(format!("{who}: pid {} is not a process", req.pid));
        }
        let stat = format!("/proc/{0}/task/{0}/stat", req.pid);
        let starttime = match crate::procfs::TaskStat::read_path(root, &stat) {
            Ok(s) => s.starttime,
            Err(e) => {
                return Err(format!(
                    "{who}: its process {} cannot be read: {e}",
                    req.pid
                ))
            }
        };
        let r = &req.request;
        if let Some(v) = &r.pm_qos {
            if !valid_pm_qos(v) {
                return Err(format!(
                    "{who}: PM QoS '{}' is not n/a or a number of microseconds",
                    shown(v)
                ));
            }
        }
        if let Some(g) = &r.governor {
            if !valid_governor(g) {
                return Err(format!(
                    "{who}: governor '{}' is not a cpufreq governor name",
                    shown(g)
                ));
            }
            for cpu in cpus.iter() {
                if let Ok(Some(av)) = crate::power::available_governors(root, cpu) {
                    if !av.contains(g) {
                        return Err(format!(
                            "{who}: CPU {cpu} offers no governor {g} (available: {})",
                            av.join(" ")
                        ));
                    }
                }
            }
        }
        let isolated = match r.isolate {
            Isolate::No => CpuSet::new(),
            Isolate::All => cpus.clone(),
            Isolate::Housekeeping => {
                let first = cpus.first().expect("not empty");
                let siblings = crate::topology::read_cpu_list_opt(
                    root,
                    &format!("/sys/devices/system/cpu/cpu{first}/topology/thread_siblings_list"),
                )
                .ok()
                .flatten()
                .unwrap_or_else(|| {
                    let mut s = CpuSet::new();
                    s.insert(first);
                    s
                });
                cpus.difference(&siblings)
            }
        };
        let mut all = static_isolated.union(&isolated);
        for o in others.iter().filter(|o| o.container != req.container) {
            all = all.union(&o.isolated_set());
            let shared = o.cpu_set().intersection(&cpus);
            if shared.is_empty() {
                continue;
            }
            for (what, mine, theirs) in [
                ("PM QoS", &r.pm_qos, &o.pm_qos),
                ("governor", &r.governor, &o.governor),
            ] {
                if let (Some(m), Some(t)) = (mine, theirs) {
                    if m != t {
                        return Err(format!(
                            "{who}: CPUs {shared} have {what} {t} for {}, not {m}",
                            o.who()
                        ));
                    }
                }
            }
        }
        if online.difference(&all).is_empty() {
            return Err(format!(
                "{who}: isolating CPUs {isolated} leaves no housekeeping CPU (isolated already: {})",
                static_isolated.union(&others.iter().fold(CpuSet::new(), |a, o| a.union(&o.isolated_set())))
            ));
        }
        Ok(Claim {
            container: req.container.clone(),
            name: req.name.clone(),
            pid: req.pid,
            starttime,
            cpus: cpus.to_string(),
            isolated: isolated.to_string(),
            pm_qos: r.pm_qos.clone(),
            governor: r.governor.clone(),
        })
    }

    /// Whether the container's process is still the one that claimed.
    pub fn alive(&self, root: &SysRoot) -> bool {
        // An unreadable process is taken as alive: releasing a running container's CPUs
        // hurts it; keeping a dead one's is only a CPU kept quiet a little longer.
        tasks_same(root, self.pid, self.starttime).unwrap_or(true)
    }
}

fn tasks_same(root: &SysRoot, pid: i32, starttime: u64) -> crate::Result<bool> {
    crate::tasks::is_same_thread(root, pid, pid, starttime)
}

/// A container in messages: its name and short id, or its short id.
fn who(id: &str, name: Option<&str>) -> String {
    match name {
        Some(n) => format!("container {n} ({})", short(id)),
        None => format!("container {}", short(id)),
    }
}

/// The first 12 characters of a container id, as podman and crictl show them.
pub fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

/// The claims in force, as the daemon keeps them in its runtime directory (they die with
/// the boot, as the containers do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ClaimsFile {
    /// 1.
    pub version: u32,
    /// The boot that made them.
    pub boot_id: String,
    /// The claims, oldest first.
    pub claims: Vec<Claim>,
}

impl ClaimsFile {
    /// The file next to the runtime state file.
    pub fn path_for(runtime_state: &Path) -> PathBuf {
        runtime_state.with_file_name("claims.json")
    }

    /// Read `path`: an absent file, or one of an earlier boot, holds no claim. A file that is
    /// not one isold writes is an error naming it (the daemon says so and starts without the
    /// claims: their containers' processes are found by the next check, or not at all).
    pub fn load(path: &Path, boot_id: &str) -> Result<Vec<Claim>, String> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        let f: ClaimsFile = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{}: not a claims file: {e}", path.display()))?;
        if f.version != 1 {
            return Err(format!(
                "{}: claims file version {} (this isold writes 1)",
                path.display(),
                f.version
            ));
        }
        if f.boot_id != boot_id {
            return Ok(Vec::new());
        }
        for c in &f.claims {
            if !valid_container_id(&c.container)
                || CpuSet::parse_list(&c.cpus).is_err()
                || CpuSet::parse_list(&c.isolated).is_err()
                || !c.pm_qos.as_deref().map_or(true, valid_pm_qos)
                || !c.governor.as_deref().map_or(true, valid_governor)
            {
                return Err(format!(
                    "{}: claim of '{}' is not one isold writes",
                    path.display(),
                    shown(&c.container)
                ));
            }
        }
        Ok(f.claims)
    }

    /// Write `claims` to `path` (by rename, mode 0600; the directory is made 0700).
    pub fn save(path: &Path, boot_id: &str, claims: &[Claim]) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            super::files::private_dir(dir)?;
        }
        if claims.is_empty() {
            return match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            };
        }
        let f = ClaimsFile {
            version: 1,
            boot_id: boot_id.to_string(),
            claims: claims.to_vec(),
        };
        let mut bytes = serde_json::to_vec_pretty(&f).expect("claims serialize");
        bytes.push(b'\n');
        super::files::replace(path, &bytes, Some(0o600))
    }
}

/// What a container's claims want of one CPU's power settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PowerWant {
    /// PM QoS resume latency text.
    pub pm_qos: Option<String>,
    /// cpufreq governor.
    pub governor: Option<String>,
}

/// The power settings the claims want, per CPU.
pub fn power_of(claims: &[Claim]) -> BTreeMap<usize, PowerWant> {
    let mut out: BTreeMap<usize, PowerWant> = BTreeMap::new();
    for c in claims {
        if c.pm_qos.is_none() && c.governor.is_none() {
            continue;
        }
        for cpu in c.cpu_set().iter() {
            let w = out.entry(cpu).or_default();
            if c.pm_qos.is_some() {
                w.pm_qos = c.pm_qos.clone();
            }
            if c.governor.is_some() {
                w.governor = c.governor.clone();
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn req(pairs: &[(&str, &str)]) -> Result<Option<Request>, String> {
        Request::from_annotations(&ann(pairs), Some("rt"))
    }

    #[test]
    fn isolds_and_crios_annotations_ask_the_same() {
        let all = Some(Request {
            isolate: Isolate::All,
            pm_qos: None,
            governor: None,
        });
        assert_eq!(req(&[(ISOLATE, "true")]).unwrap(), all);
        assert_eq!(req(&[(CRIO_IRQ, "disable")]).unwrap(), all);
        assert_eq!(req(&[(CRIO_IRQ, "true")]).unwrap(), all);
        assert_eq!(
            req(&[(CRIO_IRQ, "housekeeping")]).unwrap().unwrap().isolate,
            Isolate::Housekeeping
        );
        assert_eq!(
            req(&[(ISOLATE, "true"), (CRIO_IRQ, "housekeeping")])
                .unwrap()
                .unwrap()
                .isolate,
            Isolate::All
        );
        assert_eq!(req(&[(ISOLATE, "false")]).unwrap(), None);
        assert_eq!(req(&[(CRIO_IRQ, "enable")]).unwrap(), None);
        assert_eq!(req(&[("io.other", "x")]).unwrap(), None);
        assert_eq!(req(&[]).unwrap(), None);
        for (v, want) in [
            ("enable", "0"),
            ("disable", "n/a"),
            ("max_latency:10", "10"),
            ("max_latency:2147483647", "2147483647"),
        ] {
            let r = req(&[(CRIO_CSTATES, v)]).unwrap().unwrap();
            assert_eq!(r.pm_qos.as_deref(), Some(want), "{v}");
            assert_eq!(r.isolate, Isolate::No);
        }
        let r = req(&[(CRIO_GOVERNOR, "performance")]).unwrap().unwrap();
        assert_eq!(r.governor.as_deref(), Some("performance"));
        // The runtime's own annotations ask isold for nothing.
        assert_eq!(
            req(&[
                (CRIO_RUNTIME_ONLY[0], "disable"),
                (CRIO_RUNTIME_ONLY[1], "disable")
            ])
            .unwrap(),
            None
        );
    }

    #[test]
    fn a_containers_own_annotation_wins_and_others_do_not_apply() {
        let r = req(&[(ISOLATE, "false"), ("isold.io/isolate/rt", "true")]).unwrap();
        assert_eq!(r.unwrap().isolate, Isolate::All);
        assert_eq!(req(&[("isold.io/isolate/other", "true")]).unwrap(), None);
        let r = Request::from_annotations(&ann(&[("isold.io/isolate/rt", "true")]), None);
        assert_eq!(r.unwrap(), None);
    }

    #[test]
    fn bad_annotation_values_are_refused_naming_key_and_value() {
        for (k, v, why) in [
            (ISOLATE, "yes", "annotation isold.io/isolate: 'yes' is not true or false"),
            (ISOLATE, "", "annotation isold.io/isolate: '' is not true or false"),
            (CRIO_IRQ, "off", "annotation irq-load-balancing.crio.io: 'off' is not disable, housekeeping or enable"),
            (CRIO_CSTATES, "max_latency:", "is not max_latency:N"),
            (CRIO_CSTATES, "max_latency:-1", "is not max_latency:N"),
            (CRIO_CSTATES, "max_latency:0", "asks for a zero latency"),
            (CRIO_CSTATES, "max_latency:2147483648", "over the kernel's limit"),
            (CRIO_CSTATES, "max_latency:99999999999", "is not max_latency:N"),
            (CRIO_CSTATES, "off", "is not enable, disable or max_latency:N"),
            (CRIO_GOVERNOR, "Performance", "is not a cpufreq governor name"),
            (CRIO_GOVERNOR, "../../x", "is not a cpufreq governor name"),
            (CRIO_GOVERNOR, "a_governor_name_too_long", "is not a cpufreq governor name"),
            (CRIO_GOVERNOR, "", "is not a cpufreq governor name"),
        ] {
            let e = req(&[(k, v)]).unwrap_err();
            assert!(e.contains(why) && e.contains(k), "{k}={v}: {e}");
        }
        let e = req(&[(ISOLATE, "tr\nue")]).unwrap_err();
        assert!(e.contains("'tr\\nue'"), "{e}");
    }

    #[test]
    fn the_hook_state_is_checked_field_by_field() {
        let ok = br#"{"ociVersion":"1.0.2","id":"abc123","status":"created","pid":42,"bundle":"/run/b","annotations":{"isold.io/isolate":"true"}}"#;
        let s = HookState::parse(ok).unwrap();
        assert_eq!(
            (s.id.as_str(), s.pid, s.status.as_str()),
            ("abc123", 42, "created")
        );
        assert_eq!(s.bundle, Path::new("/run/b"));
        assert_eq!(s.annotations.get(ISOLATE).map(String::as_str), Some("true"));
        // poststop: no pid.
        let s = HookState::parse(br#"{"id":"abc","bundle":"/b","status":"stopped"}"#).unwrap();
        assert_eq!(s.pid, 0);
        for (input, why) in [
            (&b"not json"[..], "is not an OCI state (JSON)"),
            (br#"{"bundle":"/b"}"#, "has no id"),
            (
                br#"{"id":"../x","bundle":"/b"}"#,
                "id '../x' is not a container id",
            ),
            (br#"{"id":"","bundle":"/b"}"#, "is not a container id"),
            (
                br#"{"id":"a","bundle":"b"}"#,
                "bundle 'b' is not an absolute path",
            ),
            (br#"{"id":"a"}"#, "has no bundle"),
            (
                br#"{"id":"a","bundle":"/b","pid":-4}"#,
                "pid -4 is not a process id",
            ),
            (
                br#"{"id":"a","bundle":"/b","pid":"x"}"#,
                "is not an OCI state",
            ),
            (
                br#"{"id":"a","bundle":"/b","annotations":{"k":1}}"#,
                "is not an OCI state",
            ),
        ] {
            let e = HookState::parse(input).unwrap_err();
            assert!(e.contains(why), "{}: {e}", String::from_utf8_lossy(input));
        }
        let big = vec![b' '; MAX_INPUT + 1];
        assert!(HookState::parse(&big).unwrap_err().contains("over"));
    }

    #[test]
    fn the_bundle_gives_the_cpuset_and_the_annotations() {
        let b = Bundle::parse(
            br#"{"ociVersion":"1.0","annotations":{"a":"b"},"linux":{"resources":{"cpu":{"cpus":"3","shares":2}}}}"#,
        )
        .unwrap();
        assert_eq!(b.cpus, Some("3".parse().unwrap()));
        assert_eq!(b.annotations.get("a").map(String::as_str), Some("b"));
        assert_eq!(Bundle::parse(br#"{"linux":{}}"#).unwrap().cpus, None);
        assert_eq!(b.shared_pool_qos(), None);
        for (path, qos) in [
            ("kubepods-burstable-pod1.slice:crio:abc", Some("burstable")),
            ("/kubepods/besteffort/pod1/abc", Some("besteffort")),
            ("kubepods-pod1.slice:crio:abc", None),
            ("/kubepods/pod1/abc", None),
            ("machine.slice:libpod:abc", None),
        ] {
            let json = format!(r#"{{"linux":{{"cgroupsPath":"{path}"}}}}"#);
            assert_eq!(
                Bundle::parse(json.as_bytes()).unwrap().shared_pool_qos(),
                qos,
                "{path}"
            );
        }
        assert_eq!(Bundle::parse(br#"{}"#).unwrap().cpus, None);
        let e = Bundle::parse(br#"{"linux":{"resources":{"cpu":{"cpus":"3-x"}}}}"#).unwrap_err();
        assert!(
            e.contains("linux.resources.cpu.cpus '3-x' is not a CPU list"),
            "{e}"
        );
        assert!(Bundle::parse(b"[")
            .unwrap_err()
            .contains("not an OCI runtime configuration"));
        let dir = tempfile::tempdir().unwrap();
        let e = Bundle::read(dir.path()).unwrap_err();
        assert!(
            e.contains("config.json") && e.contains("No such file"),
            "{e}"
        );
    }

    #[test]
    fn socket_messages_are_checked() {
        let m = Message::parse(
            br#"{"claim":{"container":"abc","pid":4,"cpus":"3","request":{"isolate":"all"}}}"#,
        )
        .unwrap();
        assert!(
            matches!(m, Message::Claim(ref c) if c.cpus == "3" && c.request.isolate == Isolate::All)
        );
        assert_eq!(
            Message::parse(br#"{"release":{"container":"abc"}}"#).unwrap(),
            Message::Release {
                container: "abc".into()
            }
        );
        assert_eq!(Message::parse(br#"{"list":{}}"#).unwrap(), Message::List {});
        for (input, why) in [
            (&br#"{"claim":{"container":"a/b","pid":4,"cpus":"3","request":{"isolate":"all"}}}"#[..], "container id 'a/b'"),
            (br#"{"release":{"container":""}}"#, "release: container id ''"),
            (br#"{"restore":{}}"#, "not a request"),
            (br#"{"claim":{"container":"a","pid":4,"cpus":"3","request":{"isolate":"most"}}}"#, "not a request"),
            (br#"{"claim":{"container":"a","pid":4,"cpus":"3","request":{"isolate":"all"},"x":1}}"#, "not a request"),
            (b"", "not a request"),
        ] {
            let e = Message::parse(input).unwrap_err();
            assert!(e.contains(why), "{}: {e}", String::from_utf8_lossy(input));
        }
    }

    fn claim(cpus: &str, isolated: &str) -> Claim {
        Claim {
            container: format!("c{cpus}"),
            name: None,
            pid: 1,
            starttime: 1,
            cpus: cpus.into(),
            isolated: isolated.into(),
            pm_qos: None,
            governor: None,
        }
    }

    fn policy(isolated: &str) -> super::super::Policy {
        use super::super::config::{Config, CpuSpec};
        let iso: CpuSet = isolated.parse().unwrap();
        let online: CpuSet = "0-7".parse().unwrap();
        super::super::Policy {
            config: Config::defaults(
                super::super::preset::Preset::RealtimeVirtualHost,
                CpuSpec::List(iso.clone()),
            ),
            housekeeping: online.difference(&iso),
            online,
            isolated: iso,
            claimed: CpuSet::new(),
            claims: Vec::new(),
        }
    }

    /// Claims add their isolated CPUs to the configuration's, never take the configuration's
    /// away, and a policy with other claims starts from the configuration's CPUs again.
    #[test]
    fn claims_add_cpus_to_the_configurations_and_are_replaced_whole() {
        let p = policy("2");
        let with = p.with_claims(&[claim("3", "3"), claim("2,5", "2,5"), claim("6", "")]);
        assert_eq!(with.isolated.to_string(), "2-3,5");
        assert_eq!(with.claimed.to_string(), "3,5");
        assert_eq!(with.housekeeping.to_string(), "0-1,4,6-7");
        assert_eq!(with.static_isolated().to_string(), "2");
        assert_eq!(with.claims.len(), 3);
        let fewer = with.with_claims(&[claim("5", "5")]);
        assert_eq!(fewer.isolated.to_string(), "2,5");
        assert_eq!(fewer.housekeeping.to_string(), "0-1,3-4,6-7");
        let none = fewer.with_claims(&[]);
        assert_eq!(none, p);
        // Claims that would leave no housekeeping CPU are left out (refused before).
        let all = p.with_claims(&[claim("0-1,3-7", "0-1,3-7")]);
        assert_eq!(all.isolated.to_string(), "2");
        assert!(all.claimed.is_empty());
        // Offline CPUs are no claim's.
        let off = p.with_claims(&[claim("9", "9")]);
        assert_eq!(off.isolated.to_string(), "2");
    }

    /// What a claim is checked for against the machine: its process read, its CPUs online,
    /// a housekeeping CPU left with the others' claims, no power setting another holds
    /// differently, CRI-O's housekeeping keeping the first core's siblings.
    #[test]
    fn a_claim_is_resolved_against_the_machine_and_the_other_claims() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::new(dir.path());
        let put = |p: &str, v: &str| {
            let f = dir.path().join(p.trim_start_matches('/'));
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, v).unwrap();
        };
        put("/proc/7/task/7/stat", "7 (rt) S 1 7 7 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 99 2314240 379 18446744073709551615 4198400 5785993 140721731535456 0 0 0 0 4 65538 1 0 0 17 3 0 0 0 0 0 6141704 6178576 911699968 140721731538890 140721731538912 140721731538912 140721731538930 0\n");
        put(
            "/sys/devices/system/cpu/cpu4/topology/thread_siblings_list",
            "4,6\n",
        );
        let online: CpuSet = "0-7".parse().unwrap();
        let stat: CpuSet = "2".parse().unwrap();
        let req = |cpus: &str, isolate: Isolate, q: Option<&str>| ClaimRequest {
            container: "abc".into(),
            name: Some("rt".into()),
            pid: 7,
            cpus: cpus.into(),
            request: Request {
                isolate,
                pm_qos: q.map(Into::into),
                governor: None,
            },
        };
        let c = Claim::resolve(
            &root,
            &req("3", Isolate::All, Some("n/a")),
            &online,
            &stat,
            &[],
        )
        .unwrap();
        assert_eq!(
            (c.starttime, c.cpus.as_str(), c.isolated.as_str()),
            (99, "3", "3")
        );
        assert_eq!(c.who(), "container rt (abc)");
        let c = Claim::resolve(
            &root,
            &req("4-7", Isolate::Housekeeping, None),
            &online,
            &stat,
            &[],
        )
        .unwrap();
        assert_eq!(c.isolated, "5,7");
        let c = Claim::resolve(
            &root,
            &req("3", Isolate::No, Some("5")),
            &online,
            &stat,
            &[],
        )
        .unwrap();
        assert_eq!(c.isolated, "");
        put(
            "/sys/devices/system/cpu/cpu3/cpufreq/scaling_available_governors",
            "performance powersave\n",
        );
        let mut g = req("3", Isolate::No, None);
        g.request.governor = Some("performance".into());
        let c = Claim::resolve(&root, &g, &online, &stat, &[]).unwrap();
        assert_eq!(c.governor.as_deref(), Some("performance"));
        g.request.governor = Some("schedutil".into());
        let e = Claim::resolve(&root, &g, &online, &stat, &[]).unwrap_err();
        assert!(
            e.contains("CPU 3 offers no governor schedutil (available: performance powersave)"),
            "{e}"
        );
        g.request.governor = Some("Bad".into());
        let e = Claim::resolve(&root, &g, &online, &stat, &[]).unwrap_err();
        assert!(
            e.contains("governor 'Bad' is not a cpufreq governor name"),
            "{e}"
        );
        let mut other = claim("3-4", "0-1,3-7");
        other.pm_qos = Some("n/a".into());
        other.name = Some("db".into());
        for (r, others, why) in [
            (
                req("3", Isolate::All, Some("5")),
                vec![other.clone()],
                "CPUs 3 have PM QoS n/a for container db (c3-4), not 5",
            ),
            (
                req("0-1,3-7", Isolate::All, None),
                vec![],
                "leaves no housekeeping CPU",
            ),
            (
                req("3,8", Isolate::All, None),
                vec![],
                "CPUs 8 are not online",
            ),
            (req("", Isolate::All, None), vec![], "no cpuset"),
            (
                req("x", Isolate::All, None),
                vec![],
                "cpus 'x' is not a CPU list",
            ),
        ] {
            let e = Claim::resolve(&root, &r, &online, &stat, &others).unwrap_err();
            assert!(
                e.contains(why) && e.starts_with("container rt (abc): "),
                "{e}"
            );
        }
        // The same PM QoS is no conflict; another container's isolated CPUs count.
        let mut same = other.clone();
        same.isolated = "3".into();
        assert!(Claim::resolve(
            &root,
            &req("3", Isolate::All, Some("n/a")),
            &online,
            &stat,
            &[same]
        )
        .is_ok());
        let mut wide = claim("0-1,4-7", "0-1,4-7");
        wide.container = "wide".into();
        let e = Claim::resolve(
            &root,
            &req("3", Isolate::All, None),
            &online,
            &stat,
            &[wide.clone()],
        )
        .unwrap_err();
        assert!(e.contains("leaves no housekeeping CPU"), "{e}");
        // A claim replacing its own earlier one does not conflict with it.
        let mut mine = wide;
        mine.container = "abc".into();
        assert!(Claim::resolve(
            &root,
            &req("3", Isolate::All, None),
            &online,
            &stat,
            &[mine]
        )
        .is_ok());
        let mut gone = req("3", Isolate::All, None);
        gone.pid = 8;
        let e = Claim::resolve(&root, &gone, &online, &stat, &[]).unwrap_err();
        assert!(e.contains("its process 8 cannot be read"), "{e}");
        // Alive while the same process; gone when it is not (or reused).
        let mut c =
            Claim::resolve(&root, &req("3", Isolate::All, None), &online, &stat, &[]).unwrap();
        assert!(c.alive(&root));
        c.starttime = 98;
        assert!(!c.alive(&root));
        c.pid = 8;
        assert!(!c.alive(&root));
    }

    #[test]
    fn names_and_values_are_checked_character_by_character() {
        for ok in ["performance", "gov_2", "a"] {
            assert!(valid_governor(ok), "{ok}");
        }
        for bad in ["", "Gov", "a-b", "sixteen_letters_", "a b"] {
            assert!(!valid_governor(bad), "{bad}");
        }
        for ok in ["n/a", "0", "7", "2147483647"] {
            assert!(valid_pm_qos(ok), "{ok}");
        }
        for bad in ["", "N/A", "1x", "-1", "2147483648", "99999999999", " 1"] {
            assert!(!valid_pm_qos(bad), "{bad}");
        }
        for ok in ["a", "a.b-c_D9", &"f".repeat(128)] {
            assert!(valid_container_id(ok), "{ok}");
        }
        for bad in ["", ".a", "a/b", "a b", "a\n", &"f".repeat(129)] {
            assert!(!valid_container_id(bad), "{bad}");
        }
        // What is shown of a value: 64 characters, then "...".
        let v64 = "v".repeat(64);
        assert_eq!(shown(&v64), v64);
        assert_eq!(shown(&format!("{v64}w")), format!("{v64}..."));
    }

    /// Inputs up to MAX_INPUT bytes are read whole; one byte more is refused as too big.
    #[test]
    fn inputs_are_bounded_at_exactly_max_input() {
        let pad = |json: &str, len: usize| {
            let mut v = json.as_bytes().to_vec();
            v.resize(len, b' ');
            v
        };
        let state = r#"{"id":"a","bundle":"/b"}"#;
        assert!(HookState::parse(&pad(state, MAX_INPUT)).is_ok());
        assert!(HookState::parse(&pad(state, MAX_INPUT + 1))
            .unwrap_err()
            .contains("over"));
        let config = r#"{"linux":{"resources":{"cpu":{"cpus":"3"}}}}"#;
        assert!(Bundle::parse(&pad(config, MAX_INPUT)).is_ok());
        assert!(Bundle::parse(&pad(config, MAX_INPUT + 1))
            .unwrap_err()
            .contains("over"));
        let list = r#"{"list":{}}"#;
        assert!(Message::parse(&pad(list, MAX_INPUT)).is_ok());
        assert!(Message::parse(&pad(list, MAX_INPUT + 1))
            .unwrap_err()
            .contains("over"));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), pad(config, MAX_INPUT)).unwrap();
        assert_eq!(
            Bundle::read(dir.path()).unwrap().cpus,
            Some("3".parse().unwrap())
        );
        std::fs::write(dir.path().join("config.json"), pad(config, MAX_INPUT + 1)).unwrap();
        let e = Bundle::read(dir.path()).unwrap_err();
        assert!(e.contains("config.json: over"), "{e}");
        // An empty cpuset is none.
        let b = Bundle::parse(br#"{"linux":{"resources":{"cpu":{"cpus":" "}}}}"#).unwrap();
        assert_eq!(b.cpus, None);
    }

    #[test]
    fn power_follows_each_claims_cpus() {
        let c = |cpus: &str, q: Option<&str>, g: Option<&str>| Claim {
            container: "c".into(),
            name: None,
            pid: 1,
            starttime: 1,
            cpus: cpus.into(),
            isolated: String::new(),
            pm_qos: q.map(Into::into),
            governor: g.map(Into::into),
        };
        let p = power_of(&[
            c("2-3", Some("n/a"), None),
            c("5", None, Some("performance")),
            c("6", None, None),
        ]);
        assert_eq!(p.keys().copied().collect::<Vec<_>>(), vec![2, 3, 5]);
        assert_eq!(p[&3].pm_qos.as_deref(), Some("n/a"));
        assert_eq!(p[&5].governor.as_deref(), Some("performance"));
        assert_eq!(p[&5].pm_qos, None);
    }

    #[test]
    fn claims_files_of_another_boot_hold_nothing_and_bad_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/claims.json");
        let claim = Claim {
            container: "abc".into(),
            name: Some("rt".into()),
            pid: 5,
            starttime: 7,
            cpus: "3".into(),
            isolated: "3".into(),
            pm_qos: Some("n/a".into()),
            governor: None,
        };
        ClaimsFile::save(&path, "boot1", std::slice::from_ref(&claim)).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            ClaimsFile::load(&path, "boot1").unwrap(),
            vec![claim.clone()]
        );
        assert_eq!(ClaimsFile::load(&path, "boot2").unwrap(), vec![]);
        ClaimsFile::save(&path, "boot1", &[]).unwrap();
        assert!(!path.exists());
        assert_eq!(ClaimsFile::load(&path, "boot1").unwrap(), vec![]);
        std::fs::write(&path, "{").unwrap();
        assert!(ClaimsFile::load(&path, "b")
            .unwrap_err()
            .contains("not a claims file"));
        let mut bad = claim;
        bad.pm_qos = Some("lots".into());
        let f = ClaimsFile {
            version: 1,
            boot_id: "b".into(),
            claims: vec![bad],
        };
        std::fs::write(&path, serde_json::to_vec(&f).unwrap()).unwrap();
        let e = ClaimsFile::load(&path, "b").unwrap_err();
        assert!(e.contains("claim of 'abc' is not one isold writes"), "{e}");
        // Each field is checked on its own.
        let good = Claim {
            container: "abc".into(),
            name: None,
            pid: 5,
            starttime: 7,
            cpus: "3".into(),
            isolated: "3".into(),
            pm_qos: None,
            governor: None,
        };
        let bads: [fn(&mut Claim); 5] = [
            |c| c.container = "a/b".into(),
            |c| c.cpus = "x".into(),
            |c| c.isolated = "x".into(),
            |c| c.pm_qos = Some("x".into()),
            |c| c.governor = Some("X".into()),
        ];
        for (i, bad) in bads.iter().enumerate() {
            let mut c = good.clone();
            bad(&mut c);
            let f = ClaimsFile {
                version: 1,
                boot_id: "b".into(),
                claims: vec![good.clone(), c],
            };
            std::fs::write(&path, serde_json::to_vec(&f).unwrap()).unwrap();
            assert!(
                ClaimsFile::load(&path, "b")
                    .unwrap_err()
                    .contains("is not one isold writes"),
                "{i}"
            );
        }
        let f = ClaimsFile {
            version: 2,
            boot_id: "b".into(),
            claims: vec![],
        };
        std::fs::write(&path, serde_json::to_vec(&f).unwrap()).unwrap();
        assert!(ClaimsFile::load(&path, "b")
            .unwrap_err()
            .contains("claims file version 2"));
        // A path that cannot be read is an error, not "no claim"; nor can it be saved over.
        let e = ClaimsFile::load(dir.path(), "b").unwrap_err();
        assert!(e.contains("cannot read"), "{e}");
        assert!(ClaimsFile::save(dir.path(), "b", &[]).is_err());
        std::fs::remove_file(&path).unwrap();
        ClaimsFile::save(&path, "b", &[]).unwrap();
        assert_eq!(
            ClaimsFile::path_for(Path::new("/run/isold/state.json")),
            Path::new("/run/isold/claims.json")
        );
    }
}
