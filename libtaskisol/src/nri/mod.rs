//! NRI (the Node Resource Interface of containerd 2.x and CRI-O): the protocol of a plugin,
//! in isold's own code. [`mux`] cuts the trunk into logical connections, [`ttrpc`] each
//! connection into calls, [`api`] decodes the messages, [`wire`] is the protobuf wire format
//! under them. [`claim_of`] turns a container NRI describes into the claim the OCI hook would
//! make of it: the same annotations, the same rule.

pub mod api;
pub mod mux;
pub mod ttrpc;
pub mod wire;

use std::collections::BTreeMap;

use crate::claims::annotations::AnnotationError;
use crate::claims::kubelet;
use crate::claims::{Claim, ClaimRequest, Request};
use crate::policy::Policy;
use crate::sysroot::SysRoot;

/// The source of NRI's claims ([`crate::claims::Claim::source`]).
pub const SOURCE: &str = "nri";

/// The name isold registers under.
pub const PLUGIN_NAME: &str = "isold";
/// Its index: plugins are called in ascending order of theirs; isold adjusts nothing, so it
/// goes late, after the plugins that may change a container's cpuset.
pub const PLUGIN_IDX: &str = "90";

/// The claim a container asks for, as its annotations say (the pod's, then the container's,
/// which win): `None` when it asks for nothing. `pid` is the container's process (NRI gives
/// it from the start on).
pub fn claim_of(
    pod: &api::PodSandbox,
    c: &api::Container,
) -> Result<Option<ClaimRequest>, AnnotationError> {
    let mut ann: BTreeMap<String, String> = pod.annotations.clone();
    ann.extend(c.annotations.clone());
    let name = (!c.name.is_empty()).then_some(c.name.as_str());
    let Some(request) = Request::from_annotations(&ann, name)? else {
        return Ok(None);
    };
    let pod_id = if pod.id.is_empty() {
        &c.pod_sandbox_id
    } else {
        &pod.id
    };
    Ok(Some(ClaimRequest {
        container: c.id.clone(),
        name: name.map(str::to_string),
        pod: (!pod_id.is_empty()).then(|| pod_id.clone()),
        source: Some(SOURCE.into()),
        pid: c.pid as i32,
        cpus: c.cpus.clone(),
        request,
    }))
}

/// What a container NRI describes may claim, judged now ([`claim_for`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judged {
    /// It asks for nothing.
    Nothing,
    /// It asks, but holds no exclusive CPUs (the kubelet's word, [`kubelet::exclusive`]): left
    /// as it is, said in the log.
    NotExclusive(String),
    /// Its claim, admissible now.
    Claim(ClaimRequest),
    /// Its claim refused: the reason in a word (the metrics'), the message, and the request
    /// when it is well formed (the main loop may judge it again).
    Refused {
        reason: &'static str,
        message: String,
        claim: Option<ClaimRequest>,
    },
}

/// What container `c` of `pod` may claim: what its annotations ask ([`claim_of`]), only if
/// it holds exclusive CPUs as the kubelet decides (its QoS class, its CPU request, the
/// kubelet's `cpu_manager_state` when there is one, read by `kubelet` only for a container
/// that asks; one that cannot be read refuses), and within the
/// administrator's rule against the claims in force (`view`: the policy and the claims,
/// `None` when the daemon has not said them yet, which refuses). The OCI hook judges the
/// same way ([`kubelet::exclusive`], [`Claim::admissible`] in the daemon).
pub fn claim_for(
    root: &SysRoot,
    pod: &api::PodSandbox,
    c: &api::Container,
    kubelet: impl FnOnce() -> Result<Option<kubelet::CpuManagerState>, kubelet::StateError>,
    view: Option<(&Policy, &[Claim])>,
) -> Judged {
    let req = match claim_of(pod, c) {
        Ok(None) => return Judged::Nothing,
        Ok(Some(r)) => r,
        Err(e) => {
            return Judged::Refused {
                reason: "invalid",
                message: e.to_string(),
                claim: None,
            }
        }
    };
    let k = kubelet::KubeContainer {
        cgroups_path: &c.cgroups_path,
        shares: c.shares,
        cpus: &c.cpus,
        name: (!c.name.is_empty()).then_some(c.name.as_str()),
    };
    match kubelet::exclusive(&k, &kubelet()) {
        Ok(()) => {}
        // isold cannot tell whether the kubelet gave it CPUs (its state unreadable, or a
        // cgroups path none of its own while it keeps one): refused, not let through.
        Err(e) if e.undecided() => {
            return Judged::Refused {
                reason: "kubelet_state",
                message: format!("claim refused: {e}"),
                claim: None,
            }
        }
        Err(e) => return Judged::NotExclusive(e.to_string()),
    }
    let Some((policy, claims)) = view else {
        return Judged::Refused {
            reason: "starting",
            message: "isold is starting: it cannot judge the claim yet".into(),
            claim: Some(req),
        };
    };
    // The container's own claim (asked again at a Synchronize) is no other's: `admissible`
    // leaves it out.
    match Claim::admissible(root, &req, policy, claims) {
        Ok(()) => Judged::Claim(req),
        Err(e) => Judged::Refused {
            reason: e.reason(),
            message: format!("claim refused: {e}"),
            claim: Some(req),
        },
    }
}

/// Every ttrpc message of one side of a recorded trunk, in order, with its connection: what
/// the runtime or the plugin sent, whole (a recording that ends inside a frame or a message
/// is an error naming the offset). For reading recordings (tests, debugging), not the live
/// path.
pub fn read_trunk(bytes: &[u8]) -> Result<Vec<(u32, ttrpc::Message)>, String> {
    let mut demux = mux::Demux::default();
    demux.push(bytes);
    let mut readers: BTreeMap<u32, ttrpc::Reader> = BTreeMap::new();
    let mut out = Vec::new();
    let mut at = 0usize;
    while let Some((conn, payload)) = demux
        .next_frame()
        .map_err(|e| format!("at byte {at}: {e}"))?
    {
        at += 8 + payload.len();
        let r = readers.entry(conn).or_default();
        r.push(&payload);
        while let Some(m) = r
            .next_message()
            .map_err(|e| format!("connection {conn}, frame ending at byte {at}: {e}"))?
        {
            out.push((conn, m));
        }
    }
    if at != bytes.len() {
        return Err(format!(
            "{} bytes after the last whole frame (byte {at})",
            bytes.len() - at
        ));
    }
    if let Some((conn, r)) = readers.iter().find(|(_, r)| r.pending() > 0) {
        return Err(format!(
            "connection {conn}: a message cut after {} bytes",
            r.pending()
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
