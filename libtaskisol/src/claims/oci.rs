//! The OCI hook's inputs: the container's state, which an OCI runtime gives a hook on
//! standard input, and what isold reads of the bundle's `config.json`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use super::kubelet::PodQos;
use super::{valid_container_id, InputError, MAX_INPUT};
use crate::cpuset::CpuSet;

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

const STATE: &str = "the container state on standard input";

impl HookState {
    /// Parse the state a hook reads on standard input. Errors name the field and its value.
    pub fn parse(bytes: &[u8]) -> Result<HookState, InputError> {
        if bytes.len() > MAX_INPUT {
            return Err(InputError::TooBig {
                what: STATE.into(),
                len: bytes.len(),
            });
        }
        let raw: RawState = serde_json::from_slice(bytes).map_err(|e| InputError::Malformed {
            what: STATE.into(),
            expected: "an OCI state (JSON)",
            error: e.to_string(),
        })?;
        let missing = |field| InputError::Missing {
            what: STATE.into(),
            field,
        };
        let invalid = |field, value: String, why| InputError::Invalid {
            what: "the container state".into(),
            field,
            value,
            why,
        };
        let id = raw.id.ok_or_else(|| missing("id"))?;
        if !valid_container_id(&id) {
            return Err(invalid(
                "id",
                id,
                "is not a container id (1 to 128 of letters, digits, -, _, .)",
            ));
        }
        let pid = match raw.pid {
            None => 0,
            Some(p) if (0..=i32::MAX as i64).contains(&p) => p as i32,
            Some(p) => return Err(invalid("pid", p.to_string(), "is not a process id")),
        };
        let bundle = raw.bundle.ok_or_else(|| missing("bundle"))?;
        if !bundle.starts_with('/') {
            return Err(invalid("bundle", bundle, "is not an absolute path"));
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
    /// `linux.resources.cpu.shares`, when given.
    pub shares: Option<u64>,
    /// `linux.cgroupsPath`.
    pub cgroups_path: Option<String>,
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
    #[serde(default)]
    shares: Option<u64>,
}

impl Bundle {
    /// The pod's QoS class when the container is a kubelet pod's ([`PodQos::of_cgroups_path`]).
    pub fn pod_qos(&self) -> Option<PodQos> {
        PodQos::of_cgroups_path(self.cgroups_path.as_deref()?)
    }

    /// Read `DIR/config.json`.
    pub fn read(dir: &Path) -> Result<Bundle, InputError> {
        let path = dir.join("config.json");
        let read = |e: std::io::Error| InputError::Read {
            path: path.clone(),
            error: crate::error::io_strerror(&e),
        };
        let mut bytes = Vec::new();
        let f = std::fs::File::open(&path).map_err(read)?;
        use std::io::Read;
        f.take(MAX_INPUT as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(read)?;
        Bundle::parse_named(&bytes, &path.display().to_string())
    }

    /// Parse a `config.json`.
    pub fn parse(bytes: &[u8]) -> Result<Bundle, InputError> {
        Bundle::parse_named(bytes, "the runtime configuration")
    }

    fn parse_named(bytes: &[u8], what: &str) -> Result<Bundle, InputError> {
        if bytes.len() > MAX_INPUT {
            return Err(InputError::TooBig {
                what: what.into(),
                len: bytes.len(),
            });
        }
        let raw: RawConfig = serde_json::from_slice(bytes).map_err(|e| InputError::Malformed {
            what: what.into(),
            expected: "an OCI runtime configuration (JSON)",
            error: e.to_string(),
        })?;
        let cgroups_path = raw.linux.as_ref().and_then(|l| l.cgroups_path.clone());
        let cpu = raw.linux.and_then(|l| l.resources).and_then(|r| r.cpu);
        let shares = cpu.as_ref().and_then(|c| c.shares);
        let cpus = match cpu.and_then(|c| c.cpus) {
            None => None,
            Some(s) if s.trim().is_empty() => None,
            Some(s) => Some(
                CpuSet::parse_list(s.trim()).map_err(|_| InputError::Invalid {
                    what: what.into(),
                    field: "linux.resources.cpu.cpus",
                    value: s.clone(),
                    why: "is not a CPU list",
                })?,
            ),
        };
        Ok(Bundle {
            annotations: raw.annotations,
            cpus,
            shares,
            cgroups_path,
        })
    }
}
