//! The kubelet's word on a container's CPUs: which containers hold exclusive CPUs, as its
//! static CPU manager decides (a Guaranteed pod's container whose CPU request is whole), and
//! what it recorded in `/var/lib/kubelet/cpu_manager_state`. Only such a container may claim
//! isolated CPUs: any other's cpuset is the node's shared pool. Every source of claims (the
//! OCI hook, NRI) judges with [`exclusive`].

use std::collections::BTreeMap;

use super::oci::PodQos;
use super::shown;
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

/// The pod UID of a container whose `cgroups_path` (or a pod's cgroup parent) is the
/// kubelet's: `pod<uid>` (the systemd driver writes its dashes as underscores).
pub fn pod_uid(cgroups_path: &str) -> Option<String> {
    let level = if !cgroups_path.starts_with('/') && cgroups_path.split(':').count() == 3 {
        let slice = cgroups_path.split(':').next()?.strip_suffix(".slice")?;
        slice.rsplit('-').next()?.to_string()
    } else {
        cgroups_path
            .split('/')
            .filter(|p| !p.is_empty())
            .find(|p| p.starts_with("pod"))?
            .to_string()
    };
    let uid = level.strip_prefix("pod")?.replace('_', "-");
    (!uid.is_empty()).then_some(uid)
}

/// What the kubelet says of a container's CPUs, as far as isold can tell.
#[derive(Debug, Clone, Copy)]
pub struct KubeContainer<'a> {
    /// Its cgroups path (OCI `linux.cgroupsPath`, NRI `linux.cgroups_path`).
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
}

/// Whether container `c` holds exclusive CPUs, as the kubelet decides it: `Ok` for a
/// Guaranteed pod's container with a whole CPU request (shares a non-zero multiple of 1024,
/// CRI-O's own test) whose cpuset is the one the kubelet recorded for it (when `state` has
/// a state: `Ok(None)` is a node without one). A container that is not a kubelet pod's (podman,
/// ctr, another orchestrator) is `Ok`: the kubelet has no word on it.
pub fn exclusive(
    c: &KubeContainer,
    state: &Result<Option<CpuManagerState>, StateError>,
) -> Result<(), NotExclusive> {
    let Some(qos) = PodQos::of_cgroups_path(c.cgroups_path) else {
        return Ok(());
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
    let uid = pod_uid(c.cgroups_path).unwrap_or_default();
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
