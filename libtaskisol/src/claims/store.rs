//! The claims in force, as the daemon keeps them in its runtime directory (they die with the
//! boot, as the containers do): written before a claim is applied, after a release is.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{valid_container_id, valid_governor, valid_pm_qos, Claim, InputError};
use crate::cpuset::CpuSet;

/// What [`ClaimsFile::load`] read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Loaded {
    /// The claims, oldest first.
    pub claims: Vec<Claim>,
    /// The claims left out, each with why ("claim 2 (\"abc\"): its governor ...").
    pub dropped: Vec<String>,
}

/// Why isold cannot use claim `c` as a claim of its own, if it cannot.
fn unusable(c: &Claim) -> Option<String> {
    if !valid_container_id(&c.container) {
        return Some("its container id is not one a runtime gives".into());
    }
    if let Err(e) = CpuSet::parse_list(&c.cpus) {
        return Some(format!("its CPUs {:?}: {e}", c.cpus));
    }
    if let Err(e) = CpuSet::parse_list(&c.isolated) {
        return Some(format!("its isolated CPUs {:?}: {e}", c.isolated));
    }
    if let Some(q) = c.pm_qos.as_deref().filter(|q| !valid_pm_qos(q)) {
        return Some(format!("its PM QoS {q:?} is not one isold writes"));
    }
    if let Some(g) = c.governor.as_deref().filter(|g| !valid_governor(g)) {
        return Some(format!("its governor {g:?} is not one isold writes"));
    }
    None
}

/// The file's contents.
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
    /// not one isold writes is an error naming it. A claim in it that isold cannot use (a
    /// container id, a CPU list, a setting isold never writes, a field of the wrong type) is
    /// left out alone, its reason in [`Loaded::dropped`]: one bad entry drops no other
    /// tenant's claim.
    pub fn load(path: &Path, boot_id: &str) -> Result<Loaded, InputError> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Loaded::default()),
            Err(e) => {
                return Err(InputError::Read {
                    path: path.into(),
                    error: crate::error::io_strerror(&e),
                })
            }
        };
        /// The file with its claims not read yet: each is read on its own.
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            version: u32,
            boot_id: String,
            claims: Vec<serde_json::Value>,
        }
        let f: Raw = serde_json::from_slice(&bytes).map_err(|e| InputError::Malformed {
            what: path.display().to_string(),
            expected: "a claims file",
            error: e.to_string(),
        })?;
        if f.version != 1 {
            return Err(InputError::Version {
                path: path.into(),
                version: f.version,
            });
        }
        let mut out = Loaded::default();
        if f.boot_id != boot_id {
            return Ok(out);
        }
        for (i, v) in f.claims.into_iter().enumerate() {
            let named = v
                .get("container")
                .and_then(|c| c.as_str())
                .map(|c| format!("claim {} ({c:?})", i + 1))
                .unwrap_or_else(|| format!("claim {}", i + 1));
            match serde_json::from_value::<Claim>(v) {
                Ok(c) => match unusable(&c) {
                    None => out.claims.push(c),
                    Some(why) => out.dropped.push(format!("{named}: {why}")),
                },
                Err(e) => out.dropped.push(format!("{named}: not a claim: {e}")),
            }
        }
        Ok(out)
    }

    /// Write `claims` to `path` (by rename, mode 0600; the directory is made 0700).
    pub fn save(path: &Path, boot_id: &str, claims: &[Claim]) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            crate::policy::files::private_dir(dir)?;
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
        crate::policy::files::replace(path, &bytes, Some(0o600))
    }
}
