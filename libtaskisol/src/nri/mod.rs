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
use crate::claims::{ClaimRequest, Request};

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

/// The QoS class of a kubelet pod's container that has no CPUs of its own to isolate (its
/// pod is Burstable or BestEffort, as its `cgroups_path` says in the kubelet's layout, either
/// cgroup driver): its cpuset is the node's shared pool. `None` for a Guaranteed pod's
/// container, or one that is not a kubelet pod's. The OCI hook judges the same way.
pub fn shared_pool(c: &api::Container) -> Option<crate::claims::oci::PodQos> {
    crate::claims::oci::PodQos::of_cgroups_path(&c.cgroups_path)
        .filter(|q| *q != crate::claims::oci::PodQos::Guaranteed)
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
