//! Containers' claims on CPUs: isolation that follows a container while it runs.
//!
//! The domain: what a claim is ([`Claim`]: a container, its CPUs, what it asks for), how a
//! request is checked against the machine and the other claims ([`Claim::resolve`]), and
//! what the claims in force make of a policy ([`policy_with`]): their isolated CPUs join the
//! configuration's for IRQs, tasks, kthreads and workqueues, and their CPUs get the PM QoS
//! limit and governor asked for. Nothing here knows where a claim came from.
//!
//! Around it, each in its own module and depending only on this one:
//! - [`annotations`]: what a container's annotations ask for (isold's own and CRI-O's), the
//!   same for every source of claims;
//! - [`oci`]: the OCI hook's inputs (the container's state on standard input, the bundle's
//!   `config.json`);
//! - [`wire`]: the messages between `isold hook` and the daemon's socket;
//! - [`store`]: the runtime file in which the daemon keeps the claims across a restart.
//!
//! Everything that comes from outside is checked, and a bad value is an error naming the
//! field and the value, escaped ([`shown`]).

pub mod annotations;
pub mod kubelet;
pub mod oci;
pub mod store;
pub mod wire;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::policy::{Policy, PowerWant};
use crate::sysroot::SysRoot;

pub use annotations::{Isolate, Request};

/// The largest message, state or `config.json` isold reads from a container or the socket.
pub const MAX_INPUT: usize = 1 << 20;

/// Input from outside (a container's state or bundle, a socket message, the claims file)
/// that is not what it should be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// Larger than [`MAX_INPUT`].
    #[error("{what} is {len} bytes, over {MAX_INPUT}")]
    TooBig {
        /// What was read.
        what: String,
        /// Its length.
        len: usize,
    },
    /// Not the format it should be in.
    #[error("{what} is not {expected}: {error}")]
    Malformed {
        /// What was read.
        what: String,
        /// What it should be.
        expected: &'static str,
        /// The parser's word.
        error: String,
    },
    /// A field that must be there is not.
    #[error("{what} has no {field}")]
    Missing {
        /// What was read.
        what: String,
        /// The field.
        field: &'static str,
    },
    /// A field's value is not one isold accepts.
    #[error("{what}'s {field} '{}' {why}", shown(value))]
    Invalid {
        /// What was read.
        what: String,
        /// The field.
        field: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A file that cannot be read.
    #[error("cannot read {}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The system's word.
        error: String,
    },
    /// A claims file of a version this isold does not write.
    #[error("{}: claims file version {version} (this isold writes 1)", path.display())]
    Version {
        /// The file.
        path: PathBuf,
        /// Its version.
        version: u32,
    },
}

/// Why a claim is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    /// The container's cpuset is not a CPU list.
    #[error("{who}: cpus '{}' is not a CPU list: {error}", shown(value))]
    NotCpuList {
        /// The container, as messages name it.
        who: String,
        /// The text received.
        value: String,
        /// Why it is not one.
        error: String,
    },
    /// The container has no cpuset.
    #[error("{who}: no cpuset: isolating it would isolate every CPU; give it CPUs (--cpuset-cpus, a Guaranteed pod)")]
    NoCpuset {
        /// The container.
        who: String,
    },
    /// Some of its CPUs are not online.
    #[error("{who}: CPUs {off} are not online (online: {online})")]
    Offline {
        /// The container.
        who: String,
        /// Its CPUs that are not online.
        off: CpuSet,
        /// The online CPUs.
        online: CpuSet,
    },
    /// A pod id that is not a sandbox id.
    #[error("{who}: pod '{}' is not a sandbox id", shown(value))]
    BadPod {
        /// The container.
        who: String,
        /// The value received.
        value: String,
    },
    /// The pid is not one.
    #[error("{who}: pid {pid} is not a process")]
    NoPid {
        /// The container.
        who: String,
        /// The pid received.
        pid: i32,
    },
    /// Its process cannot be read (gone, or another namespace's).
    #[error("{who}: its process {pid} cannot be read: {error}")]
    Unreadable {
        /// The container.
        who: String,
        /// Its process.
        pid: i32,
        /// Why.
        error: String,
    },
    /// A PM QoS value that is not one.
    #[error(
        "{who}: PM QoS '{}' is not n/a or a number of microseconds",
        shown(value)
    )]
    BadPmQos {
        /// The container.
        who: String,
        /// The value received.
        value: String,
    },
    /// A governor name that is not one.
    #[error("{who}: governor '{}' is not a cpufreq governor name", shown(value))]
    BadGovernor {
        /// The container.
        who: String,
        /// The value received.
        value: String,
    },
    /// A CPU of the container does not offer the governor.
    #[error("{who}: CPU {cpu} offers no governor {governor} (available: {})", available.join(" "))]
    NoSuchGovernor {
        /// The container.
        who: String,
        /// The CPU.
        cpu: usize,
        /// The governor asked for.
        governor: String,
        /// The ones it offers.
        available: Vec<String>,
    },
    /// Another container holds a power setting of a shared CPU differently.
    #[error("{who}: CPUs {cpus} have {what} {theirs} for {other}, not {mine}")]
    PowerConflict {
        /// The container.
        who: String,
        /// The CPUs both have.
        cpus: CpuSet,
        /// Which setting.
        what: PowerSetting,
        /// The other container's value.
        theirs: Box<str>,
        /// The other container.
        other: String,
        /// This one's.
        mine: Box<str>,
    },
    /// CPUs the administrator did not give containers (`[containers] cpus`).
    #[error("{}", not_allowed(who, outside, allowed, *table))]
    NotAllowed {
        /// The container.
        who: String,
        /// Its CPUs that no claim may have.
        outside: CpuSet,
        /// The CPUs a claim may have: `isolated_cpus` and `[containers] cpus`.
        allowed: CpuSet,
        /// Whether the configuration has a `[containers]` table.
        table: bool,
    },
    /// CPUs another pod's container holds.
    #[error("{who}: CPUs {cpus} are claimed by {other}, a container of another pod: two pods never share a claimed CPU")]
    Shared {
        /// The container.
        who: String,
        /// The CPUs both have.
        cpus: CpuSet,
        /// The container that holds them.
        other: String,
    },
    /// No CPU would be left for housekeeping.
    #[error(
        "{who}: isolating CPUs {isolated} leaves no housekeeping CPU (isolated already: {already})"
    )]
    NoHousekeeping {
        /// The container.
        who: String,
        /// The CPUs it would isolate.
        isolated: CpuSet,
        /// The CPUs isolated already (the configuration's and the other claims').
        already: CpuSet,
    },
}

fn not_allowed(who: &str, outside: &CpuSet, allowed: &CpuSet, table: bool) -> String {
    if table {
        format!("{who}: CPUs {outside} are not for containers: a claim may have only CPUs of isolated_cpus and [containers] cpus ({allowed})")
    } else {
        format!("{who}: CPUs {outside} are not isolated by the configuration, and it has no [containers] table: a container may only ask for PM QoS and governor on isolated CPUs ({allowed})")
    }
}

impl ClaimError {
    /// The reason in a word, for the metrics (`isold_claims_refused_total{reason}`).
    pub fn reason(&self) -> &'static str {
        match self {
            ClaimError::NotAllowed { .. } => "not_allowed",
            ClaimError::Shared { .. } => "shared",
            ClaimError::NoHousekeeping { .. } => "no_housekeeping",
            ClaimError::PowerConflict { .. } => "power_conflict",
            ClaimError::NoPid { .. } | ClaimError::Unreadable { .. } => "no_process",
            ClaimError::NotCpuList { .. }
            | ClaimError::NoCpuset { .. }
            | ClaimError::BadPod { .. }
            | ClaimError::Offline { .. }
            | ClaimError::BadPmQos { .. }
            | ClaimError::BadGovernor { .. }
            | ClaimError::NoSuchGovernor { .. } => "invalid",
        }
    }
}

/// The CPUs a claim may have under `policy`: the configuration's isolated CPUs and
/// `[containers] cpus` (none beyond the isolated ones without the table).
pub fn allowed_cpus(policy: &Policy) -> CpuSet {
    let stat = policy.static_isolated();
    match policy.containers() {
        Some(c) => stat.union(&c.cpus),
        None => stat,
    }
}

/// The CPUs a claim may ever have isolated beyond the configuration: `[containers] cpus`
/// and those of the claims in force (`list`), online. Effects on them that no live claim
/// wants are given back at the daemon's start, whatever happened to its claims file.
pub fn claimable(policy: &Policy, list: &[Claim]) -> CpuSet {
    let table = policy
        .containers()
        .map(|c| c.cpus.clone())
        .unwrap_or_default();
    table.union(&isolated_by(list)).intersection(&policy.online)
}

/// A power setting a claim asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerSetting {
    /// The PM QoS resume latency.
    PmQos,
    /// The cpufreq governor.
    Governor,
}

impl std::fmt::Display for PowerSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PowerSetting::PmQos => "PM QoS",
            PowerSetting::Governor => "governor",
        })
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
    /// Its pod (the runtime's sandbox id), when it has one: containers of one pod may share
    /// CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// What asked for it: `nri` for NRI's runtime, none for the OCI hook. NRI's
    /// synchronization releases only its own claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
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

/// What a source of claims (the OCI hook, NRI) asks for one container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    /// The container id.
    pub container: String,
    /// Its name, for messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its pod (the runtime's sandbox id), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// What asks: `nri`, or none for the OCI hook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Its process (in the daemon's PID namespace): the claim lasts as long as it does.
    pub pid: i32,
    /// Its cpuset, as a CPU list.
    pub cpus: String,
    /// What it asks for.
    pub request: Request,
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

    /// Check request `req` against the administrator's rule (`policy`: its online CPUs, the
    /// ones its configuration isolates, its `[containers] cpus`), the machine and the claims
    /// already in force (`others`, which it does not replace). The claim's CPUs must all be
    /// the configuration's isolated CPUs or `[containers] cpus`, none another pod's claim's,
    /// and its process must be alive.
    pub fn resolve(
        root: &SysRoot,
        req: &ClaimRequest,
        policy: &Policy,
        others: &[Claim],
    ) -> Result<Claim, ClaimError> {
        Claim::resolve_as(root, req, policy, others, true)
    }

    /// [`Claim::resolve`] before the container has a process (NRI's CreateContainer): every
    /// check but its process's, so that a claim the rule refuses fails the container's
    /// creation. The claim itself is made at its start.
    pub fn admissible(
        root: &SysRoot,
        req: &ClaimRequest,
        policy: &Policy,
        others: &[Claim],
    ) -> Result<(), ClaimError> {
        Claim::resolve_as(root, req, policy, others, false).map(|_| ())
    }

    /// Long because it is the claim rule's checks in order, each refusal with its own message.
    fn resolve_as(
        root: &SysRoot,
        req: &ClaimRequest,
        policy: &Policy,
        others: &[Claim],
        process: bool,
    ) -> Result<Claim, ClaimError> {
        let (online, static_isolated) = (&policy.online, &policy.static_isolated());
        let who = who(&req.container, req.name.as_deref());
        let cpus = CpuSet::parse_list(&req.cpus).map_err(|e| ClaimError::NotCpuList {
            who: who.clone(),
            value: req.cpus.clone(),
            error: e.to_string(),
        })?;
        if cpus.is_empty() {
            return Err(ClaimError::NoCpuset { who });
        }
        let off = cpus.difference(online);
        if !off.is_empty() {
            return Err(ClaimError::Offline {
                who,
                off,
                online: online.clone(),
            });
        }
        let allowed = allowed_cpus(policy);
        let outside = cpus.difference(&allowed);
        if !outside.is_empty() {
            return Err(ClaimError::NotAllowed {
                who,
                outside,
                allowed,
                table: policy.config.containers.is_some(),
            });
        }
        if let Some(pod) = &req.pod {
            if !valid_container_id(pod) {
                return Err(ClaimError::BadPod {
                    who,
                    value: pod.clone(),
                });
            }
        }
        let starttime = if process {
            if req.pid <= 0 {
                return Err(ClaimError::NoPid { who, pid: req.pid });
            }
            let stat = format!("/proc/{0}/task/{0}/stat", req.pid);
            match crate::procfs::TaskStat::read_path(root, &stat) {
                Ok(s) => s.starttime,
                Err(e) => {
                    return Err(ClaimError::Unreadable {
                        who,
                        pid: req.pid,
                        error: e.to_string(),
                    })
                }
            }
        } else {
            0
        };
        let r = &req.request;
        check_power(root, &who, r, &cpus)?;
        let isolated = isolated_of(root, r.isolate, &cpus);
        let mut all = static_isolated.union(&isolated);
        for o in others.iter().filter(|o| o.container != req.container) {
            all = all.union(&o.isolated_set());
            let shared = o.cpu_set().intersection(&cpus);
            if shared.is_empty() {
                continue;
            }
            if req.pod.is_none() || req.pod != o.pod {
                return Err(ClaimError::Shared {
                    who,
                    cpus: shared,
                    other: o.who(),
                });
            }
            for (what, mine, theirs) in [
                (PowerSetting::PmQos, &r.pm_qos, &o.pm_qos),
                (PowerSetting::Governor, &r.governor, &o.governor),
            ] {
                if let (Some(m), Some(t)) = (mine, theirs) {
                    if m != t {
                        return Err(ClaimError::PowerConflict {
                            who,
                            cpus: shared,
                            what,
                            theirs: t.as_str().into(),
                            other: o.who(),
                            mine: m.as_str().into(),
                        });
                    }
                }
            }
        }
        if online.difference(&all).is_empty() {
            return Err(ClaimError::NoHousekeeping {
                who,
                isolated,
                already: static_isolated.union(&isolated_by(others)),
            });
        }
        Ok(Claim {
            container: req.container.clone(),
            name: req.name.clone(),
            pod: req.pod.clone(),
            source: req.source.clone(),
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
        crate::tasks::is_same_thread(root, self.pid, self.pid, self.starttime).unwrap_or(true)
    }
}

/// The power values of request `r` checked, and its governor offered by each of `cpus`.
fn check_power(root: &SysRoot, who: &str, r: &Request, cpus: &CpuSet) -> Result<(), ClaimError> {
    if let Some(v) = &r.pm_qos {
        if !valid_pm_qos(v) {
            return Err(ClaimError::BadPmQos {
                who: who.into(),
                value: v.clone(),
            });
        }
    }
    let Some(g) = &r.governor else {
        return Ok(());
    };
    if !valid_governor(g) {
        return Err(ClaimError::BadGovernor {
            who: who.into(),
            value: g.clone(),
        });
    }
    for cpu in cpus.iter() {
        if let Ok(Some(av)) = crate::power::available_governors(root, cpu) {
            if !av.contains(g) {
                return Err(ClaimError::NoSuchGovernor {
                    who: who.into(),
                    cpu,
                    governor: g.clone(),
                    available: av,
                });
            }
        }
    }
    Ok(())
}

/// The CPUs of `cpus` that `isolate` isolates. CRI-O's `housekeeping` keeps the first CPU
/// and its SMT siblings.
fn isolated_of(root: &SysRoot, isolate: Isolate, cpus: &CpuSet) -> CpuSet {
    match isolate {
        Isolate::No => CpuSet::new(),
        Isolate::All => cpus.clone(),
        Isolate::Housekeeping => {
            let Some(first) = cpus.first() else {
                return CpuSet::new();
            };
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
    }
}

/// The CPUs `claims` isolate.
pub fn isolated_by(claims: &[Claim]) -> CpuSet {
    claims
        .iter()
        .fold(CpuSet::new(), |a, c| a.union(&c.isolated_set()))
}

/// Policy `base` with `claims` in force instead of the claims it had ([`Policy::with_claimed`]).
pub fn policy_with(base: &Policy, claims: &[Claim]) -> Policy {
    base.with_claimed(&isolated_by(claims), power_of(claims))
}

/// A container in messages: its name and short id, or its short id; both escaped.
pub fn who(id: &str, name: Option<&str>) -> String {
    match name {
        Some(n) => format!("container {} ({})", shown(n), shown(short(id))),
        None => format!("container {}", shown(short(id))),
    }
}

/// The first 12 characters of a container id, as podman and crictl show them.
pub fn short(id: &str) -> &str {
    match id.char_indices().nth(12) {
        Some((i, _)) => &id[..i],
        None => id,
    }
}

/// A value from outside as it may be printed: control characters escaped, at most 64
/// characters.
pub fn shown(v: &str) -> String {
    shown_at_most(v, 64)
}

/// [`shown`] with room for `max` characters (a cgroups path, with a pod UID and a 64-digit
/// container id, runs to about 150).
pub fn shown_at_most(v: &str, max: usize) -> String {
    let mut s: String = v.chars().take(max).flat_map(char::escape_default).collect();
    if v.chars().count() > max {
        s.push_str("...");
    }
    s
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
mod tests;
