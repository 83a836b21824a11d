//! The kubelet's word on a container's CPUs: which containers hold exclusive CPUs, as its
//! static CPU manager decides (a Guaranteed pod's container whose CPU request is whole), and
//! what it recorded in `/var/lib/kubelet/cpu_manager_state`. Only such a container may claim
//! isolated CPUs: any other's cpuset is the node's shared pool. Every source of claims (the
//! OCI hook, NRI) judges with [`exclusive`].

use std::collections::BTreeMap;

use super::{shown, shown_at_most};
use crate::cpuset::CpuSet;
use crate::sysroot::SysRoot;

/// Where the kubelet keeps its CPU manager's state.
pub const STATE_PATH: &str = "/var/lib/kubelet/cpu_manager_state";
/// The largest state isold reads (the kubelet's for 1,000 containers is about 100 KiB).
pub const MAX_STATE: usize = 4 << 20;
/// The CPU shares of one whole CPU (the kubelet gives N * 1024 for N CPUs).
pub const SHARES_PER_CPU: u64 = 1024;

/// `cpu_manager_state`, as the kubelet writes it (format v2: entries by pod UID, then
/// container name).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CpuManagerState {
    /// `policyName`: `static` or `none`.
    pub policy_name: String,
    /// `defaultCpuSet`: the shared pool, as written.
    pub default_cpu_set: String,
    /// `entries`: pod UID -> container name -> its exclusive CPUs, as written.
    pub entries: BTreeMap<String, BTreeMap<String, String>>,
    /// `checksum`.
    pub checksum: u64,
}

/// A state file isold cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("{path}: {error}")]
    Read { path: String, error: String },
    #[error("{path}: {len} bytes, over {MAX_STATE}")]
    TooBig { path: String, len: usize },
    #[error("{path}: not the kubelet's CPU manager state: {why}")]
    Malformed { path: String, why: String },
    #[error("{path}: checksum {written} is not the content's ({computed}): the kubelet would refuse this file too")]
    Checksum {
        path: String,
        written: u64,
        computed: u32,
    },
}

impl CpuManagerState {
    /// Parse the file's bytes (`path` names it in errors). Keys are read without regard to
    /// case, as the kubelet reads them; the checksum must match, or be 0 (which the kubelet
    /// accepts).
    pub fn parse(bytes: &[u8], path: &str) -> Result<CpuManagerState, StateError> {
        let bad = |why: String| StateError::Malformed {
            path: path.into(),
            why,
        };
        if bytes.len() > MAX_STATE {
            return Err(StateError::TooBig {
                path: path.into(),
                len: bytes.len(),
            });
        }
        let v: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        let obj = v
            .as_object()
            .ok_or_else(|| bad("not a JSON object".into()))?;
        let mut s = CpuManagerState::default();
        for (k, v) in obj {
            let text = |field: &str| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| bad(format!("{field} is not a string")))
            };
            match k.to_ascii_lowercase().as_str() {
                "policyname" => s.policy_name = text("policyName")?,
                "defaultcpuset" => s.default_cpu_set = text("defaultCpuSet")?,
                "checksum" => {
                    s.checksum = v
                        .as_u64()
                        .ok_or_else(|| bad(format!("checksum {v} is not a number")))?
                }
                "entries" => {
                    let pods = v
                        .as_object()
                        .ok_or_else(|| bad("entries is not an object".into()))?;
                    for (uid, ctrs) in pods {
                        let ctrs = ctrs.as_object().ok_or_else(|| {
                            bad(format!(
                                "entries of pod {} is not an object (a v1 state, keyed by container id: the kubelet migrates it at its start)",
                                shown(uid)
                            ))
                        })?;
                        let mut m = BTreeMap::new();
                        for (name, set) in ctrs {
                            let set = set.as_str().ok_or_else(|| {
                                bad(format!(
                                    "the CPUs of {}/{} are not a string",
                                    shown(uid),
                                    shown(name)
                                ))
                            })?;
                            m.insert(name.clone(), set.to_string());
                        }
                        s.entries.insert(uid.clone(), m);
                    }
                }
                _ => {}
            }
        }
        if s.policy_name.is_empty() {
            return Err(bad("no policyName".into()));
        }
        let computed = s.computed_checksum();
        if s.checksum != 0 && s.checksum != u64::from(computed) {
            return Err(StateError::Checksum {
                path: path.into(),
                written: s.checksum,
                computed,
            });
        }
        Ok(s)
    }

    /// The state in `root`'s `/var/lib/kubelet/cpu_manager_state`: `None` when there is none
    /// (no kubelet, or not its static policy's node).
    pub fn read(root: &SysRoot) -> Result<Option<CpuManagerState>, StateError> {
        let path = root.path(STATE_PATH);
        let shown_path = path.display().to_string();
        let read = |e: std::io::Error| StateError::Read {
            path: shown_path.clone(),
            error: crate::error::io_strerror(&e),
        };
        let f = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(read(e)),
        };
        let mut bytes = Vec::new();
        use std::io::Read;
        f.take(MAX_STATE as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(read)?;
        CpuManagerState::parse(&bytes, &shown_path).map(Some)
    }

    /// The kubelet's checksum of this state: FNV-1a (32 bits) over go-spew's dump of its
    /// checkpoint with the checksum 0 (`checkpointmanager/checksum`, `dump.ForHash`).
    pub fn computed_checksum(&self) -> u32 {
        let mut entries = String::new();
        for (i, (uid, ctrs)) in self.entries.iter().enumerate() {
            if i > 0 {
                entries.push(' ');
            }
            entries.push_str(uid);
            entries.push_str(":map[");
            for (j, (name, set)) in ctrs.iter().enumerate() {
                if j > 0 {
                    entries.push(' ');
                }
                entries.push_str(name);
                entries.push(':');
                entries.push_str(set);
            }
            entries.push(']');
        }
        let dump = format!(
            "(*state.CPUManagerCheckpoint){{PolicyName:(string){} DefaultCPUSet:(string){} Entries:(map[string]map[string]string)map[{entries}] Checksum:(checksum.Checksum)0}}",
            self.policy_name, self.default_cpu_set
        );
        let mut h: u32 = 0x811c_9dc5;
        for b in dump.bytes() {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
        h
    }

    /// The exclusive CPUs the kubelet gave container `name` of pod `uid`.
    pub fn exclusive_of(&self, uid: &str, name: &str) -> Option<&str> {
        self.entries
            .get(uid)
            .and_then(|c| c.get(name))
            .map(String::as_str)
    }

    /// The pod UID of a container named `name` the kubelet gave exactly `cpus` (none for an
    /// empty set).
    pub fn holder(&self, name: &str, cpus: &CpuSet) -> Option<&str> {
        if cpus.is_empty() {
            return None;
        }
        self.exclusive()
            .into_iter()
            .find(|(_, n, set)| *n == name && set == cpus)
            .map(|(uid, _, _)| uid)
    }

    /// Every exclusive CPU, by pod UID and container name, as sets (unparsable ones left
    /// out).
    pub fn exclusive(&self) -> Vec<(&str, &str, CpuSet)> {
        self.entries
            .iter()
            .flat_map(|(uid, c)| {
                c.iter().filter_map(move |(name, set)| {
                    CpuSet::parse_list(set)
                        .ok()
                        .map(|s| (uid.as_str(), name.as_str(), s))
                })
            })
            .collect()
    }
}

/// A Kubernetes pod's QoS class, as the kubelet's cgroup layout says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodQos {
    /// Requests equal limits: with the static CPU manager, whole CPUs of its own.
    Guaranteed,
    /// Its cpuset is the shared pool.
    Burstable,
    /// Its cpuset is the shared pool.
    BestEffort,
}

impl PodQos {
    /// The kubelet's name of the class.
    pub fn name(self) -> &'static str {
        match self {
            PodQos::Guaranteed => "Guaranteed",
            PodQos::Burstable => "Burstable",
            PodQos::BestEffort => "BestEffort",
        }
    }

    /// The QoS class of a container whose cgroups path is `path` ([`PodCgroup::parse`]):
    /// `None` when the path is none of the kubelet's pod cgroups.
    pub fn of_cgroups_path(path: &str) -> Option<PodQos> {
        PodCgroup::parse(path).map(|p| p.qos)
    }
}

/// A kubelet pod's container as its cgroup places it: the pod's QoS class and UID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodCgroup {
    /// The class of the level the kubelet put the pod under.
    pub qos: PodQos,
    /// The pod's UID, with dashes, as `cpu_manager_state` keys it.
    pub uid: String,
}

impl PodCgroup {
    /// The pod of a container whose OCI `linux.cgroupsPath` (which NRI passes unchanged as
    /// `linux.cgroups_path`: containerd and CRI-O read it from the OCI spec), or whose cgroup
    /// (`/proc/PID/cgroup`, from a cgroup mount) is `path`, read level by level: `None` when
    /// it is none of the kubelet's pod cgroups.
    ///
    /// With cgroupsPerQOS (its default) the kubelet makes a pod's cgroup `pod<uid>` under
    /// `kubepods` (Guaranteed) or `kubepods/burstable`, `kubepods/besteffort`, below its
    /// `--cgroup-root` (k8s `pkg/kubelet/cm`, `GetPodContainerName`), and gives it to the
    /// runtime as CRI `cgroup_parent`, under which the runtime puts the container:
    /// - cgroupfs driver: `/kubepods[/burstable|/besteffort]/pod<uid>/<id>` (containerd),
    ///   `.../pod<uid>/crio-<id>` (CRI-O); the cgroup is the same path.
    /// - systemd driver: `kubepods[-burstable|-besteffort]-pod<uid>.slice:cri-containerd:<id>`
    ///   or `...:crio:<id>` (runc's `slice:prefix:name`, with the pod slice's own name); the
    ///   cgroup is `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/
    ///   cri-containerd-<id>.scope` (`crio-<id>.scope`; crun runs the container in a `container`
    ///   child of its scope). systemd spells a slice's parents in its name, so its
    ///   dash-separated parts are the levels; the kubelet writes a UID's dashes as underscores.
    ///
    /// Without cgroupsPerQOS the kubelet makes no pod cgroup (its `podContainerManagerNoop`
    /// gives an empty `cgroup_parent`) and the runtime uses its own default (`/k8s.io/<id>`,
    /// `system.slice:crio:<id>`, `/crio/crio-<id>`), which says nothing of the pod: `None`,
    /// and [`exclusive`] asks the kubelet's state instead.
    ///
    /// Only whole levels count: a pod or container whose name contains "burstable" is not
    /// taken for a class.
    pub fn parse(path: &str) -> Option<PodCgroup> {
        let colon: Vec<&str> = path.split(':').collect();
        if let [slice, prefix, id] = colon[..] {
            if [slice, prefix, id].iter().any(|p| p.contains('/')) {
                return None;
            }
            if prefix.is_empty() || id.is_empty() {
                return None;
            }
            return PodCgroup::of_levels(&slice_levels(slice)?);
        }
        let mut parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        if let [.., scope, "container"] = parts[..] {
            if scope.ends_with(".scope") {
                parts.pop();
            }
        }
        let [dirs @ .., pod, container] = &parts[..] else {
            return None;
        };
        let Some(levels) = slice_levels(pod) else {
            // cgroupfs: a directory a level.
            let mut levels = dirs.to_vec();
            levels.push(pod);
            return PodCgroup::of_levels(&levels);
        };
        // systemd: the pod's slice under the slices its name spells, then the container's
        // scope.
        let scope = container.strip_suffix(".scope")?;
        let parents = levels.len() - 1;
        if scope.is_empty() || dirs.len() < parents {
            return None;
        }
        let spelled = (1..levels.len()).map(|n| format!("{}.slice", levels[..n].join("-")));
        if !dirs[dirs.len() - parents..].iter().copied().eq(spelled) {
            return None;
        }
        PodCgroup::of_levels(&levels)
    }

    /// The pod of the kubelet's levels, root first: the last is `pod<uid>`, under `kubepods`
    /// or `kubepods/<burstable|besteffort>` (what is above is the kubelet's `--cgroup-root`).
    fn of_levels(levels: &[&str]) -> Option<PodCgroup> {
        let (qos, pod) = match levels {
            [.., "kubepods", "burstable", pod] => (PodQos::Burstable, pod),
            [.., "kubepods", "besteffort", pod] => (PodQos::BestEffort, pod),
            [.., "kubepods", pod] => (PodQos::Guaranteed, pod),
            _ => return None,
        };
        let uid = pod.strip_prefix("pod")?;
        let valid = !uid.is_empty()
            && uid
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        valid.then(|| PodCgroup {
            qos,
            uid: uid.replace('_', "-"),
        })
    }
}

/// The levels of a systemd slice's name (`a-b-c.slice`: a, b, c).
fn slice_levels(name: &str) -> Option<Vec<&str>> {
    let stem = name.strip_suffix(".slice")?;
    (!stem.is_empty()).then(|| stem.split('-').collect())
}

/// The pod UID of a container whose cgroups path (or cgroup) is the kubelet's
/// ([`PodCgroup::parse`]), with dashes as the kubelet's state keys it.
pub fn pod_uid(cgroups_path: &str) -> Option<String> {
    PodCgroup::parse(cgroups_path).map(|p| p.uid)
}

/// What the kubelet says of a container's CPUs, as far as isold can tell.
#[derive(Debug, Clone, Copy)]
pub struct KubeContainer<'a> {
    /// Its cgroups path (OCI `linux.cgroupsPath`, NRI `linux.cgroups_path`: the same value).
    pub cgroups_path: &'a str,
    /// Its CPU shares (`linux.resources.cpu.shares`), when given.
    pub shares: Option<u64>,
    /// Its cpuset, as a CPU list.
    pub cpus: &'a str,
    /// Its name in the pod (the kubelet's container name).
    pub name: Option<&'a str>,
}

/// Why a kubelet pod's container holds no exclusive CPUs: its cpuset is the shared pool (or
/// not what the kubelet gave it), which isold does not isolate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotExclusive {
    #[error("its pod is {} (not Guaranteed): its cpuset is the shared pool", .0.name())]
    Qos(PodQos),
    #[error("its CPU request is not a whole number of CPUs (cpu shares {shares}, not a multiple of 1024): the kubelet's static CPU manager gives it the shared pool")]
    Fractional { shares: u64 },
    #[error("it has no CPU shares, so no whole CPU request: the kubelet's static CPU manager gives it the shared pool")]
    NoShares,
    #[error("the kubelet's CPU manager policy is '{}' ({STATE_PATH}): no container has exclusive CPUs", shown(.0))]
    PolicyNone(String),
    #[error(
        "the kubelet gave container {} of pod {} no exclusive CPUs ({STATE_PATH})",
        shown(name),
        shown(uid)
    )]
    NotRecorded { uid: String, name: String },
    #[error("its cpuset {cpus} is not the CPUs the kubelet gave it ({kubelet}, {STATE_PATH})")]
    Differs { cpus: String, kubelet: String },
    #[error("the kubelet's CPU manager state cannot be read: {0}")]
    State(StateError),
    #[error(
        "{}, none of the kubelet's pod cgroups (kubepods[/burstable|/besteffort]/pod<uid>), and the kubelet's CPU manager state ({STATE_PATH}) records no exclusive CPUs {} for it: isold cannot tell whether its cpuset is the shared pool",
        if path.is_empty() { "it has no cgroups path".to_string() } else { format!("its cgroups path is '{}'", shown_at_most(path, 256)) },
        shown(cpus)
    )]
    UnknownCgroupsPath { path: String, cpus: String },
}

impl NotExclusive {
    /// Whether isold cannot tell if the container holds exclusive CPUs (the kubelet's state
    /// cannot be read, or its cgroups path is none of the kubelet's while the kubelet keeps a
    /// state): its claim is refused, not let through. Otherwise the kubelet's word is that it
    /// holds none, and it is left as it is.
    pub fn undecided(&self) -> bool {
        matches!(
            self,
            NotExclusive::State(_) | NotExclusive::UnknownCgroupsPath { .. }
        )
    }
}

/// Whether container `c` holds exclusive CPUs, as the kubelet decides it: `Ok` for a
/// Guaranteed pod's container with a whole CPU request (shares a non-zero multiple of 1024,
/// CRI-O's own test) whose cpuset is the one the kubelet recorded for it (when `state` has
/// a state: `Ok(None)` is a node without one).
///
/// A container whose cgroups path is none of the kubelet's pod cgroups ([`PodCgroup::parse`])
/// is a container outside Kubernetes (podman, ctr), a kubelet's without cgroupsPerQOS, or a
/// form isold does not know. On a node without a kubelet state the kubelet has no word on it:
/// `Ok`. Where the kubelet keeps one, only its record says such a container holds exclusive
/// CPUs (a container of that name given exactly its CPUs); any other is
/// [`NotExclusive::UnknownCgroupsPath`], refused ([`NotExclusive::undecided`]): a Burstable
/// pod's container on the shared pool must not pass for an exclusive one.
pub fn exclusive(
    c: &KubeContainer,
    state: &Result<Option<CpuManagerState>, StateError>,
) -> Result<(), NotExclusive> {
    let Some(PodCgroup { qos, uid }) = PodCgroup::parse(c.cgroups_path) else {
        return recorded_without_pod_cgroup(c, state);
    };
    if qos != PodQos::Guaranteed {
        return Err(NotExclusive::Qos(qos));
    }
    match c.shares {
        None | Some(0) => return Err(NotExclusive::NoShares),
        Some(s) if s % SHARES_PER_CPU != 0 => return Err(NotExclusive::Fractional { shares: s }),
        Some(_) => {}
    }
    let state = match state {
        Ok(None) => return Ok(()),
        Ok(Some(s)) => s,
        Err(e) => return Err(NotExclusive::State(e.clone())),
    };
    if state.policy_name != "static" {
        return Err(NotExclusive::PolicyNone(state.policy_name.clone()));
    }
    let name = c.name.unwrap_or_default();
    let Some(kubelet) = state.exclusive_of(&uid, name) else {
        return Err(NotExclusive::NotRecorded {
            uid,
            name: name.into(),
        });
    };
    let same = match (CpuSet::parse_list(kubelet), CpuSet::parse_list(c.cpus)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same {
        return Err(NotExclusive::Differs {
            cpus: c.cpus.into(),
            kubelet: kubelet.into(),
        });
    }
    Ok(())
}

/// [`exclusive`] for a container whose cgroups path names no kubelet pod: `Ok` without a
/// kubelet state; with one, `Ok` only when the kubelet's static policy recorded a container
/// of its name with exactly its CPUs (without the pod's UID, the name and the CPUs are what
/// can be matched; the kubelet's exclusive sets never overlap the shared pool, so a
/// shared-pool cpuset never matches).
fn recorded_without_pod_cgroup(
    c: &KubeContainer,
    state: &Result<Option<CpuManagerState>, StateError>,
) -> Result<(), NotExclusive> {
    let state = match state {
        Ok(None) => return Ok(()),
        Ok(Some(s)) => s,
        Err(e) => return Err(NotExclusive::State(e.clone())),
    };
    let recorded = state.policy_name == "static"
        && match (c.name, CpuSet::parse_list(c.cpus)) {
            (Some(name), Ok(cpus)) => state.holder(name, &cpus).is_some(),
            _ => false,
        };
    if recorded {
        return Ok(());
    }
    Err(NotExclusive::UnknownCgroupsPath {
        path: c.cgroups_path.into(),
        cpus: c.cpus.into(),
    })
}

/// Where kubeadm (and most installers) keep the kubelet's configuration.
pub const CONFIG_PATH: &str = "/var/lib/kubelet/config.yaml";

/// The kubelet's `reservedSystemCPUs` in `root`'s `/var/lib/kubelet/config.yaml`, when it
/// sets them (a top-level key of the KubeletConfiguration; `None` when the file, the key or
/// a CPU list in it is missing).
pub fn reserved_cpus(root: &SysRoot) -> Option<CpuSet> {
    let text = root.read_to_string(CONFIG_PATH).ok()?;
    text.lines().find_map(|l| {
        let v = l.strip_prefix("reservedSystemCPUs:")?;
        let v = v
            .split('#')
            .next()?
            .trim()
            .trim_matches(|c| c == '"' || c == '\'');
        CpuSet::parse_list(v).ok()
    })
}

/// Where isold and the kubelet disagree: what, and what to change.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Disagreement {
    pub what: String,
    pub fix: String,
}

/// Where isold's policy (its `isolated` CPUs, the CPUs a claim may have: `allowed`), its
/// claims in force and the kubelet disagree: the kubelet's CPU manager is not static; a claim
/// whose CPUs the kubelet gave no container; a container's exclusive CPUs outside what a claim
/// may have; the kubelet's reserved CPUs (`reserved`) or its shared pool on isolated CPUs.
pub fn disagreements(
    state: &CpuManagerState,
    reserved: Option<&CpuSet>,
    isolated: &CpuSet,
    allowed: &CpuSet,
    claims: &[super::Claim],
) -> Vec<Disagreement> {
    let mut out = Vec::new();
    if state.policy_name != "static" {
        out.push(Disagreement {
            what: format!(
                "the kubelet's CPU manager policy is '{}': no container has CPUs of its own, so none may claim",
                shown(&state.policy_name)
            ),
            fix: "cpuManagerPolicy: static in the kubelet's configuration (drain the node, remove cpu_manager_state, restart the kubelet)".into(),
        });
    }
    let exclusive = state.exclusive();
    for c in claims {
        let cpus = c.cpu_set();
        let known = exclusive
            .iter()
            .any(|(_, name, set)| *set == cpus && c.name.as_deref().map_or(true, |n| n == *name));
        if !known {
            out.push(Disagreement {
                what: format!(
                    "{} claims CPUs {}, which the kubelet gave no container",
                    c.who(),
                    c.cpus
                ),
                fix: "a container outside the kubelet, or the kubelet's state was reset: remove the container or restart it through the kubelet".into(),
            });
        }
    }
    for (uid, name, set) in &exclusive {
        let outside = set.difference(allowed);
        if !outside.is_empty() {
            out.push(Disagreement {
                what: format!(
                    "container {} of pod {} holds exclusive CPUs {set}; {outside} are neither isolated_cpus nor [containers] cpus, so it may not claim them",
                    shown(name),
                    shown(uid)
                ),
                fix: "give [containers] cpus the CPUs the kubelet hands out (the online CPUs less reservedSystemCPUs)".into(),
            });
        }
    }
    if let Some(r) = reserved {
        let both = r.intersection(isolated);
        if !both.is_empty() {
            out.push(Disagreement {
                what: format!(
                    "the kubelet's reservedSystemCPUs {r} include isolated CPUs {both}: the kubelet and the system's daemons are kept on CPUs isold keeps quiet"
                ),
                fix: "reservedSystemCPUs = the housekeeping CPUs".into(),
            });
        }
    }
    if let Ok(shared) = CpuSet::parse_list(&state.default_cpu_set) {
        let both = shared.intersection(isolated);
        if !both.is_empty() {
            out.push(Disagreement {
                what: format!(
                    "the kubelet's shared pool {shared} includes isolated CPUs {both}: Burstable and BestEffort pods run there"
                ),
                fix: "leave CPUs the kubelet hands out to claims ([containers] cpus) rather than isolated_cpus, or reserve them (reservedSystemCPUs) away from the pool".into(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(policy: &str, default: &str, entries: &[(&str, &[(&str, &str)])]) -> CpuManagerState {
        CpuManagerState {
            policy_name: policy.into(),
            default_cpu_set: default.into(),
            entries: entries
                .iter()
                .map(|(u, c)| {
                    (
                        u.to_string(),
                        c.iter()
                            .map(|(n, s)| (n.to_string(), s.to_string()))
                            .collect(),
                    )
                })
                .collect(),
            checksum: 0,
        }
    }

    /// The vectors of the kubelet's own `state_checkpoint_test.go`.
    #[test]
    fn the_checksum_is_the_kubelets() {
        assert_eq!(state("none", "4-6", &[]).computed_checksum(), 354655845);
        assert_eq!(
            state(
                "none",
                "1-3",
                &[("pod", &[("container1", "4-6"), ("container2", "1-3")])]
            )
            .computed_checksum(),
            3610638499
        );
        assert_eq!(state("other", "1-3", &[]).computed_checksum(), 1394507217);
    }

    /// The dump the checksum hashes, with two pods: entries joined by a space, in key order.
    #[test]
    fn the_checksum_covers_every_pod_in_order() {
        let fnv = |t: &str| {
            t.bytes().fold(0x811c_9dc5u32, |h, b| {
                (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
            })
        };
        let st = state(
            "static",
            "0-1",
            &[("u2", &[("b", "3")]), ("u1", &[("a", "2"), ("c", "4-5")])],
        );
        assert_eq!(
            st.computed_checksum(),
            fnv("(*state.CPUManagerCheckpoint){PolicyName:(string)static DefaultCPUSet:(string)0-1 Entries:(map[string]map[string]string)map[u1:map[a:2 c:4-5] u2:map[b:3]] Checksum:(checksum.Checksum)0}")
        );
    }

    /// The file below a root: none is no kubelet; one that cannot be read, or too big, is an
    /// error naming it.
    #[test]
    fn the_state_file_is_read_below_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::new(dir.path());
        assert_eq!(CpuManagerState::read(&root), Ok(None));
        let path = dir.path().join("var/lib/kubelet/cpu_manager_state");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(
            &path,
            br#"{"policyName":"static","defaultCpuSet":"0-3","checksum":0}"#,
        )
        .unwrap();
        let s = CpuManagerState::read(&root).unwrap().unwrap();
        assert_eq!(
            (s.policy_name.as_str(), s.default_cpu_set.as_str()),
            ("static", "0-3")
        );
        // Exactly the limit reads; a byte more is refused.
        let mut big = br#"{"policyName":"static","checksum":0}"#.to_vec();
        big.resize(MAX_STATE, b' ');
        std::fs::write(&path, &big).unwrap();
        assert!(CpuManagerState::read(&root).unwrap().is_some());
        big.push(b' ');
        std::fs::write(&path, &big).unwrap();
        assert!(matches!(
            CpuManagerState::read(&root),
            Err(StateError::TooBig { len, .. }) if len == MAX_STATE + 1
        ));
        assert!(matches!(
            CpuManagerState::parse(&big, "p"),
            Err(StateError::TooBig { .. })
        ));
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        let e = CpuManagerState::read(&root).unwrap_err();
        assert!(
            matches!(&e, StateError::Read { path: p, .. } if p.ends_with("cpu_manager_state")),
            "{e}"
        );
        // An open that fails for another reason than a missing file (ENOTDIR) is an error
        // too, not "no kubelet".
        std::fs::remove_dir_all(dir.path().join("var/lib/kubelet")).unwrap();
        std::fs::write(dir.path().join("var/lib/kubelet"), b"").unwrap();
        let e = CpuManagerState::read(&root).unwrap_err();
        assert!(e.to_string().contains("Not a directory"), "{e}");
    }

    #[test]
    fn a_state_is_read_as_the_kubelet_reads_it() {
        let ok = br#"{"policyName":"none","defaultCpuSet":"1-3","entries":{"pod":{"container1":"4-6","container2":"1-3"}},"checksum":3610638499}"#;
        let s = CpuManagerState::parse(ok, "f").unwrap();
        assert_eq!(s.exclusive_of("pod", "container1"), Some("4-6"));
        // Keys in any case; no entries; checksum 0 is accepted.
        let s = CpuManagerState::parse(
            br#"{"POLICYNAME":"static","defaultcpuset":"0-3","checksum":0}"#,
            "f",
        )
        .unwrap();
        assert_eq!((s.policy_name.as_str(), s.entries.len()), ("static", 0));
        let bad = br#"{"policyName":"none","defaultCpuSet":"1-3","entries":{"pod":{"container1":"4-7"}},"checksum":3610638499}"#;
        let e = CpuManagerState::parse(bad, "/var/lib/kubelet/cpu_manager_state").unwrap_err();
        assert!(
            matches!(
                e,
                StateError::Checksum {
                    written: 3610638499,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("/var/lib/kubelet/cpu_manager_state"));
        for junk in [&b"[]"[..], b"{\"entries\":{}}", b"{\"policyName\":3}", b"{"] {
            assert!(CpuManagerState::parse(junk, "f").is_err(), "{junk:?}");
        }
        let v1 =
            br#"{"policyName":"static","defaultCpuSet":"0-3","entries":{"abc":"2"},"checksum":0}"#;
        assert!(CpuManagerState::parse(v1, "f")
            .unwrap_err()
            .to_string()
            .contains("v1"));
    }

    #[test]
    fn disagreements_with_the_kubelet_are_named() {
        use crate::claims::Claim;
        let claim = |name: &str, cpus: &str| Claim {
            container: "c1".into(),
            name: Some(name.into()),
            pod: None,
            source: None,
            pid: 1,
            starttime: 1,
            cpus: cpus.into(),
            isolated: cpus.into(),
            pm_qos: None,
            governor: None,
        };
        let set = |s: &str| CpuSet::parse_list(s).unwrap();
        let st = state(
            "static",
            "0-1",
            &[("u1", &[("work", "3")]), ("u2", &[("db", "4-5")])],
        );
        let (iso, allowed) = (set("2"), set("2-4"));
        // Agreement: a claim the kubelet recorded, reserved and shared pool on housekeeping.
        assert_eq!(
            disagreements(
                &st,
                Some(&set("0-1")),
                &iso,
                &set("2-5"),
                &[claim("work", "3")]
            ),
            vec![]
        );
        let d = disagreements(
            &state("none", "0-5", &[("u2", &[("db", "4-5")])]),
            Some(&set("1-2")),
            &iso,
            &allowed,
            &[claim("work", "3"), claim("db", "4-5")],
        );
        let whats: Vec<&str> = d.iter().map(|d| d.what.as_str()).collect();
        assert_eq!(whats.len(), 5, "{whats:#?}");
        assert!(whats[0].contains("policy is 'none'"));
        assert!(whats[1].contains("work (c1) claims CPUs 3, which the kubelet gave no container"));
        assert!(whats[2].contains("db of pod u2 holds exclusive CPUs 4-5; 5 are neither"));
        assert!(whats[3].contains("reservedSystemCPUs 1-2 include isolated CPUs 2"));
        assert!(whats[4].contains("shared pool 0-5 includes isolated CPUs 2"));
        // The same container name on other CPUs, or the same CPUs under another name: the
        // kubelet did not give those CPUs to that container.
        for c in [claim("work", "4"), claim("db", "3")] {
            let d = disagreements(&st, None, &iso, &set("2-5"), std::slice::from_ref(&c));
            assert_eq!(d.len(), 1, "{c:?}: {d:?}");
        }
    }

    #[test]
    fn reserved_cpus_come_from_the_kubelets_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::new(dir.path());
        assert_eq!(reserved_cpus(&root), None);
        std::fs::create_dir_all(dir.path().join("var/lib/kubelet")).unwrap();
        std::fs::write(
            dir.path().join("var/lib/kubelet/config.yaml"),
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0-1\" # housekeeping\n",
        )
        .unwrap();
        assert_eq!(
            reserved_cpus(&root),
            Some(CpuSet::parse_list("0-1").unwrap())
        );
    }

    #[test]
    fn the_pod_uid_comes_from_either_drivers_cgroup() {
        for (path, uid) in [
            ("/kubepods/pod1234-ab/c1", Some("1234-ab")),
            ("/kubepods/burstable/pod1234-ab/c1", Some("1234-ab")),
            (
                "kubepods-pod1234_ab.slice:cri-containerd:c1",
                Some("1234-ab"),
            ),
            ("kubepods-besteffort-pod99.slice:crio:c1", Some("99")),
            ("/k8s.io/c1", None),
            ("/kubepods/pod/c1", None),
            // A relative cgroupfs path is not the systemd driver's for lacking a slash.
            ("kubepods/pod12/c1", Some("12")),
        ] {
            assert_eq!(pod_uid(path).as_deref(), uid, "{path}");
        }
    }

    /// Every pod cgroup the kubelet makes, as each runtime and cgroup driver writes the
    /// container's cgroups path (OCI `linux.cgroupsPath`, NRI `linux.cgroups_path`) and as the
    /// cgroup itself reads; the UID with its dashes whichever driver spelled it.
    #[test]
    fn every_cgroup_path_the_kubelet_makes_is_parsed() {
        use PodQos::*;
        const UID: &str = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
        const ID: &str = "9a8b7c6d5e4f30211203f4e5d6c7b8a99a8b7c6d5e4f30211203f4e5d6c7b8a9";
        let sd = UID.replace('-', "_");
        let rows: Vec<(String, PodQos, &str)> = vec![
            // cgroupfs driver: containerd (the id), CRI-O (crio-<id>).
            (format!("/kubepods/pod{UID}/{ID}"), Guaranteed, UID),
            (format!("/kubepods/burstable/pod{UID}/{ID}"), Burstable, UID),
            (format!("/kubepods/besteffort/pod{UID}/{ID}"), BestEffort, UID),
            (format!("/kubepods/pod{UID}/crio-{ID}"), Guaranteed, UID),
            (format!("/kubepods/burstable/pod{UID}/crio-{ID}"), Burstable, UID),
            (format!("/kubepods/besteffort/pod{UID}/crio-{ID}"), BestEffort, UID),
            // The kubelet's --cgroup-root above kubepods; the cgroup below a v1 mount.
            (format!("/kubelet/kubepods/burstable/pod{UID}/{ID}"), Burstable, UID),
            (format!("/sys/fs/cgroup/cpuset/kubepods/pod{UID}/{ID}"), Guaranteed, UID),
            // A static pod's UID (a hash, no dashes).
            ("/kubepods/pod6c2b1d1e0f9a8b7c6d5e4f3a2b1c0d9e/abc".into(), Guaranteed, "6c2b1d1e0f9a8b7c6d5e4f3a2b1c0d9e"),
            // systemd driver, runc's slice:prefix:name: containerd, CRI-O.
            (format!("kubepods-pod{sd}.slice:cri-containerd:{ID}"), Guaranteed, UID),
            (format!("kubepods-burstable-pod{sd}.slice:cri-containerd:{ID}"), Burstable, UID),
            (format!("kubepods-besteffort-pod{sd}.slice:cri-containerd:{ID}"), BestEffort, UID),
            (format!("kubepods-pod{sd}.slice:crio:{ID}"), Guaranteed, UID),
            (format!("kubepods-burstable-pod{sd}.slice:crio:{ID}"), Burstable, UID),
            (format!("kubepods-besteffort-pod{sd}.slice:crio:{ID}"), BestEffort, UID),
            (format!("kubelet-kubepods-pod{sd}.slice:crio:{ID}"), Guaranteed, UID),
            // systemd driver, the cgroup: the slices the pod's name spells, the scope.
            (format!("/kubepods.slice/kubepods-pod{sd}.slice/cri-containerd-{ID}.scope"), Guaranteed, UID),
            (format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{sd}.slice/cri-containerd-{ID}.scope"), Burstable, UID),
            (format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{sd}.slice/crio-{ID}.scope"), BestEffort, UID),
            // crun's child of the scope; below the cgroup v2 mount.
            (format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{sd}.slice/crio-{ID}.scope/container"), Burstable, UID),
            (format!("/sys/fs/cgroup/kubepods.slice/kubepods-pod{sd}.slice/crio-{ID}.scope"), Guaranteed, UID),
            // The issue's path.
            ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/cri-containerd-abc.scope".into(), Burstable, "1234"),
        ];
        for (path, qos, uid) in &rows {
            let want = Some(PodCgroup {
                qos: *qos,
                uid: uid.to_string(),
            });
            assert_eq!(PodCgroup::parse(path), want, "{path}");
            assert_eq!(PodQos::of_cgroups_path(path), Some(*qos), "{path}");
            assert_eq!(pod_uid(path).as_deref(), Some(*uid), "{path}");
        }
        for path in [
            // No pod cgroup (the kubelet without cgroupsPerQOS): the runtimes' defaults.
            format!("/k8s.io/{ID}"),
            format!("system.slice:crio:{ID}"),
            format!("/crio/crio-{ID}"),
            // Not the kubelet's.
            "/pod1234/abc".into(),
            "machine.slice:libpod:abc".into(),
            "/machine.slice/libpod-abc.scope".into(),
            // A slice chain that is not the pod slice's own spelling, or a pod slice with no
            // scope below it, or more below the scope than crun's child.
            format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-burstable-pod{sd}.slice/crio-a.scope"),
            format!("/kubepods-burstable.slice/kubepods-burstable-pod{sd}.slice/crio-a.scope"),
            format!("/kubepods.slice/kubepods-pod{sd}.slice/a"),
            format!("/kubepods.slice/kubepods-pod{sd}.slice/.scope"),
            format!("/kubepods.slice/kubepods-pod{sd}.slice/crio-a.scope/b"),
            format!("/kubepods/pod{UID}/a/container"),
            // slice:prefix:name with a part missing, or a path for a part.
            format!("kubepods-pod{sd}.slice::a"),
            format!("kubepods-pod{sd}.slice:crio:"),
            format!("/kubepods.slice/kubepods-pod{sd}.slice:crio:a"),
            // A dash in a systemd pod level is a level of its own.
            format!("kubepods-burstable-pod{UID}.slice:crio:a"),
        ] {
            assert_eq!(PodCgroup::parse(&path), None, "{path}");
            assert_eq!(pod_uid(&path), None, "{path}");
        }
    }

    /// Issue 48: a Burstable container with a fractional request, on the shared pool, whose
    /// cgroup path is the systemd one of the issue, is not exclusive, with or without the
    /// kubelet's state.
    #[test]
    fn a_burstable_container_on_the_shared_pool_is_not_exclusive() {
        let c = KubeContainer {
            cgroups_path: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/cri-containerd-abc.scope",
            shares: Some(512),
            cpus: "0-3",
            name: Some("work"),
        };
        let st = Ok(Some(state("static", "0-3", &[])));
        for s in [&st, &Ok(None)] {
            assert_eq!(exclusive(&c, s), Err(NotExclusive::Qos(PodQos::Burstable)));
        }
    }

    /// Where the kubelet keeps a state, a container whose cgroups path is none of its pod
    /// cgroups is refused, naming the path, unless the kubelet recorded a container of its
    /// name with exactly its CPUs (the kubelet without cgroupsPerQOS). Without a state the
    /// kubelet has no word on it; with one that cannot be read, it is refused.
    #[test]
    fn an_unknown_cgroups_path_is_refused_while_the_kubelet_keeps_a_state() {
        let c = |path: &'static str, cpus: &'static str| KubeContainer {
            cgroups_path: path,
            shares: Some(2048),
            cpus,
            name: Some("work"),
        };
        let rec = Ok(Some(state("static", "0-1", &[("u1", &[("work", "2-3")])])));
        for path in [
            "/pod1234/abc",
            "/machine.slice/libpod-1.scope",
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/abc",
            // No cgroupsPerQOS: containerd's, CRI-O's (systemd, cgroupfs) default.
            "/k8s.io/abc",
            "system.slice:crio:abc",
            "/crio/crio-abc",
        ] {
            let e = exclusive(&c(path, "0-1"), &rec).unwrap_err();
            assert_eq!(
                e,
                NotExclusive::UnknownCgroupsPath {
                    path: path.into(),
                    cpus: "0-1".into()
                }
            );
            assert!(e.undecided(), "{e}");
            let msg = e.to_string();
            assert!(
                msg.contains(&format!("its cgroups path is '{path}'"))
                    && msg.contains("cannot tell"),
                "{msg}"
            );
            // The kubelet recorded it: exclusive.
            assert_eq!(exclusive(&c(path, "3,2"), &rec), Ok(()), "{path}");
            // No kubelet state: not the kubelet's to say.
            assert_eq!(exclusive(&c(path, "0-1"), &Ok(None)), Ok(()), "{path}");
        }
        // Recorded under another name, on other CPUs, by a policy that is not static, or
        // without a name: refused.
        let other = KubeContainer {
            name: Some("db"),
            ..c("/k8s.io/abc", "2-3")
        };
        let nameless = KubeContainer {
            name: None,
            ..c("/k8s.io/abc", "2-3")
        };
        let none_policy = Ok(Some(state("none", "0-3", &[("u1", &[("work", "2-3")])])));
        for (k, s) in [
            (other, &rec),
            (nameless, &rec),
            (c("/k8s.io/abc", "2"), &rec),
            (c("/k8s.io/abc", ""), &rec),
            (c("/k8s.io/abc", "2-3"), &none_policy),
        ] {
            assert!(
                matches!(
                    exclusive(&k, s),
                    Err(NotExclusive::UnknownCgroupsPath { .. })
                ),
                "{k:?}"
            );
        }
        let e = exclusive(&c("", "2-3"), &Ok(Some(state("static", "0-1", &[])))).unwrap_err();
        assert!(e.to_string().starts_with("it has no cgroups path"), "{e}");
        let broken = Err(StateError::Read {
            path: "p".into(),
            error: "EACCES".into(),
        });
        let e = exclusive(&c("/pod1234/abc", "2-3"), &broken).unwrap_err();
        assert!(matches!(e, NotExclusive::State(_)) && e.undecided(), "{e}");
        // The kubelet's word that a container holds none is not a refusal.
        assert!(!NotExclusive::Qos(PodQos::Burstable).undecided());
        assert!(!NotExclusive::NoShares.undecided());
    }

    #[test]
    fn only_a_whole_cpu_guaranteed_container_the_kubelet_recorded_is_exclusive() {
        let c = |path: &'static str, shares: Option<u64>, cpus: &'static str| KubeContainer {
            cgroups_path: path,
            shares,
            cpus,
            name: Some("work"),
        };
        let g = "/kubepods/podu1/c1";
        let none = Ok(None);
        assert_eq!(exclusive(&c(g, Some(2048), "2-3"), &none), Ok(()));
        assert_eq!(
            exclusive(&c("/kubepods/burstable/podu1/c1", Some(2048), "2-3"), &none),
            Err(NotExclusive::Qos(PodQos::Burstable))
        );
        assert_eq!(
            exclusive(&c("/kubepods/besteffort/podu1/c1", Some(2), "0-3"), &none),
            Err(NotExclusive::Qos(PodQos::BestEffort))
        );
        assert_eq!(
            exclusive(&c(g, Some(1536), "0-3"), &none),
            Err(NotExclusive::Fractional { shares: 1536 })
        );
        assert_eq!(
            exclusive(&c(g, None, "2"), &none),
            Err(NotExclusive::NoShares)
        );
        // Not a kubelet pod: the kubelet has no word on it.
        assert_eq!(
            exclusive(&c("/machine.slice/libpod-1", None, "2"), &none),
            Ok(())
        );
        // With the kubelet's record.
        let rec = Ok(Some(state("static", "0-1", &[("u1", &[("work", "2-3")])])));
        assert_eq!(exclusive(&c(g, Some(2048), "3,2"), &rec), Ok(()));
        assert!(matches!(
            exclusive(&c(g, Some(1024), "3"), &rec),
            Err(NotExclusive::Differs { .. })
        ));
        assert!(matches!(
            exclusive(&c("/kubepods/podu2/c1", Some(1024), "3"), &rec),
            Err(NotExclusive::NotRecorded { .. })
        ));
        let off = Ok(Some(state("none", "0-3", &[])));
        assert!(matches!(
            exclusive(&c(g, Some(2048), "2-3"), &off),
            Err(NotExclusive::PolicyNone(_))
        ));
        let broken = Err(StateError::Read {
            path: "p".into(),
            error: "EACCES".into(),
        });
        assert!(matches!(
            exclusive(&c(g, Some(2048), "2-3"), &broken),
            Err(NotExclusive::State(_))
        ));
    }
}
