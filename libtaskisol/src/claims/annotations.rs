//! What a container's annotations ask for: isold's own `isold.io/isolate`, or the names of
//! CRI-O's high-performance hooks, so that pods written for the Node Tuning Operator need no
//! change. Every source of claims (the OCI hook, NRI) reads them here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{shown, valid_governor};

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
/// CRI-O's: `disable` (or the deprecated `true`) takes the container's CPUs out of the
/// scheduler's load balancing. The intent is the same as `irq-load-balancing.crio.io`'s: no
/// other work on them. isold isolates them (IRQs, tasks, kthreads, workqueues); the
/// scheduler's own domains stay the runtime's (CRI-O) or the cpuset partition's.
pub const CRIO_CPU_LB: &str = "cpu-load-balancing.crio.io";
/// CRI-O's annotation that is the runtime's business only (CFS quota): accepted, left to
/// the runtime.
pub const CRIO_RUNTIME_ONLY: [&str; 1] = ["cpu-quota.crio.io"];
/// The keys whose values isold reads (each also as `KEY/NAME`): every other annotation of a
/// pod or container is skipped undecoded ([`read_by_isold`]).
pub const READ: [&str; 5] = [ISOLATE, CRIO_IRQ, CRIO_CPU_LB, CRIO_CSTATES, CRIO_GOVERNOR];
/// The longest value of an annotation isold keeps (longer ones are cut, and so refused as
/// values isold does not understand): the longest valid one is `max_latency:2147483647`.
pub const MAX_VALUE: usize = 256;
/// The most annotations isold keeps of one pod or container (each one it reads, for up to
/// this many containers by `KEY/NAME`).
pub const MAX_KEPT: usize = 256;

/// Whether isold reads annotation `key`: one of [`READ`] (or its `KEY/NAME` form), the
/// container's name or its pod's id.
pub fn read_by_isold(key: &str) -> bool {
    key == CONTAINER_NAME
        || key == CONTAINERD_CONTAINER_NAME
        || SANDBOX_IDS.contains(&key)
        || READ.iter().any(|k| {
            key.strip_prefix(k)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
}
/// The annotation in which CRI-O and the kubelet name the container (`KEY/NAME` forms of the
/// annotations above apply to that container only).
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// The annotation in which containerd's CRI plugin names the container.
pub const CONTAINERD_CONTAINER_NAME: &str = "io.kubernetes.cri.container-name";

/// The container's name in its pod, from the runtime's annotations (CRI-O's, then
/// containerd's).
pub fn name_of(ann: &BTreeMap<String, String>) -> Option<String> {
    [CONTAINER_NAME, CONTAINERD_CONTAINER_NAME]
        .iter()
        .find_map(|k| ann.get(*k).cloned())
}

/// The annotations in which runtimes name a container's pod (its sandbox): CRI-O's, then
/// containerd's CRI plugin's.
pub const SANDBOX_IDS: [&str; 2] = [
    "io.kubernetes.cri-o.SandboxID",
    "io.kubernetes.cri.sandbox-id",
];

/// The container's pod, from the runtime's annotations (`None` outside a pod).
pub fn pod_of(ann: &BTreeMap<String, String>) -> Option<String> {
    SANDBOX_IDS.iter().find_map(|k| ann.get(*k).cloned())
}

/// An annotation whose value isold does not understand: the container must not start
/// believing it is isolated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("annotation {}: '{}' {why}", shown(key), shown(value))]
pub struct AnnotationError {
    /// The annotation (`KEY` or `KEY/NAME`).
    pub key: String,
    /// Its value.
    pub value: String,
    /// What is wrong with it.
    pub why: &'static str,
}

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

fn bad(key: &str, value: &str, why: &'static str) -> AnnotationError {
    AnnotationError {
        key: key.into(),
        value: value.into(),
        why,
    }
}

impl Request {
    /// What the annotations of container `name` ask for; `None` when they ask for nothing.
    pub fn from_annotations(
        ann: &BTreeMap<String, String>,
        name: Option<&str>,
    ) -> Result<Option<Request>, AnnotationError> {
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
        if let Some((k, v)) = annotation(ann, CRIO_CPU_LB, name) {
            match v {
                "disable" | "true" => isolate = Isolate::All,
                "enable" | "false" => {}
                _ => return Err(bad(&k, v, "is not disable or enable")),
            }
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
fn latency(key: &str, value: &str, n: &str) -> Result<String, AnnotationError> {
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
