//! The containers' claims the daemon owns: kept in `claims.json` next to the runtime state
//! file (before a claim is applied, after a release is), released when the container's
//! process is gone. What a claim takes and gives back is the domain's
//! ([`libtaskisol::claims`]); the policy change it makes is the daemon's
//! ([`super::isolator::Daemon`]).

use std::path::PathBuf;

use libtaskisol::claims::store::ClaimsFile;
use libtaskisol::claims::{self, Claim, ClaimRequest};
use libtaskisol::SysRoot;

use super::os::Env;

#[derive(Debug)]
pub struct Claims {
    /// The claims in force.
    pub list: Vec<Claim>,
    path: PathBuf,
    boot_id: String,
}

impl Claims {
    /// The claims file of this boot; one that cannot be read is said and left (the claims in
    /// it are lost: their CPUs stay as they are until `isold restore`).
    pub fn load(env: &Env) -> Claims {
        let boot_id = libtaskisol::policy::state::boot_id(&env.root).unwrap_or_default();
        let path = ClaimsFile::path_for(&env.files.runtime);
        let list = match ClaimsFile::load(&path, &boot_id) {
            Ok(loaded) => {
                // Left out alone: what they isolated is given back by the start's
                // reconciliation, the other tenants keep theirs.
                for why in &loaded.dropped {
                    env.log.warn(&format!(
                        "{}: {why}: dropped; its CPUs are given back",
                        path.display()
                    ));
                }
                let c = loaded.claims;
                if !c.is_empty() {
                    env.log.info(&format!(
                        "{} container claim(s) from before the start",
                        c.len()
                    ));
                }
                c
            }
            Err(e) => {
                // Kept for the administrator, out of the way of the next write; what its
                // claims narrowed is given back by the start's reconciliation.
                let aside = path.with_extension("json.bad");
                let moved = match std::fs::rename(&path, &aside) {
                    Ok(()) => format!("set aside as {}", aside.display()),
                    Err(e) => format!("not set aside: {e}"),
                };
                env.log.warn(&format!(
                    "{e}; {moved}; starting without the containers' claims: what they isolated is given back"
                ));
                Vec::new()
            }
        };
        Claims {
            list,
            path,
            boot_id,
        }
    }

    /// Keep `list` in the file.
    pub fn save(&self, list: &[Claim]) -> Result<(), String> {
        ClaimsFile::save(&self.path, &self.boot_id, list)
            .map_err(|e| format!("cannot write {}: {e}", self.path.display()))
    }

    /// The claims whose container is gone.
    pub fn dead(&self, root: &SysRoot) -> Vec<Claim> {
        self.list
            .iter()
            .filter(|c| !c.alive(root))
            .cloned()
            .collect()
    }

    /// The claims but those of `container`.
    pub fn others(&self, container: &str) -> Vec<Claim> {
        self.list
            .iter()
            .filter(|o| o.container != container)
            .cloned()
            .collect()
    }

    /// The claim of `container`, if it holds one.
    pub fn of(&self, container: &str) -> Option<&Claim> {
        self.list.iter().find(|c| c.container == container)
    }
}

/// What a claim made: the reply's sentence.
pub fn made(claim: &Claim, changed: usize, problems: usize) -> String {
    let isolated = claim.isolated_set();
    let mut what = Vec::new();
    if !isolated.is_empty() {
        what.push(format!("CPUs {isolated} isolated"));
    }
    if let Some(q) = &claim.pm_qos {
        what.push(format!("PM QoS {q}"));
    }
    if let Some(g) = &claim.governor {
        what.push(format!("governor {g}"));
    }
    format!(
        "{}: {} on CPUs {} ({changed} value(s) changed{})",
        claim.who(),
        what.join(", "),
        claim.cpus,
        if problems > 0 {
            format!(", {problems} problem(s): see isold's log")
        } else {
            String::new()
        }
    )
}

/// `req` checked against the machine, the policy's own isolated CPUs and the claims in
/// force: the claims to put in force with it.
pub fn admit(
    root: &SysRoot,
    policy: &libtaskisol::policy::Policy,
    list: &Claims,
    req: &ClaimRequest,
) -> Result<(Claim, Vec<Claim>), claims::ClaimError> {
    let others = list.others(&req.container);
    let claim = Claim::resolve(root, req, policy, &others)?;
    let mut all = others;
    all.push(claim.clone());
    Ok((claim, all))
}
