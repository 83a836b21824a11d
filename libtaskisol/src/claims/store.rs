//! The claims in force, as the daemon keeps them in its runtime directory (they die with the
//! boot, as the containers do): written before a claim is applied, after a release is.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{valid_container_id, valid_governor, valid_pm_qos, Claim, InputError};
use crate::cpuset::CpuSet;

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
    /// not one isold writes is an error naming it.
    pub fn load(path: &Path, boot_id: &str) -> Result<Vec<Claim>, InputError> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(InputError::Read {
                    path: path.into(),
                    error: crate::error::io_strerror(&e),
                })
            }
        };
        let f: ClaimsFile = serde_json::from_slice(&bytes).map_err(|e| InputError::Malformed {
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
                return Err(InputError::Invalid {
                    what: path.display().to_string(),
                    field: "claim of",
                    value: c.container.clone(),
                    why: "is not one isold writes",
                });
            }
        }
        Ok(f.claims)
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
