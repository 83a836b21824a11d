//! The NRI v0.8.0 messages isold reads and writes (package `nri.pkg.api.v1alpha1`, field
//! numbers as its `api.proto`): registration, configuration, synchronization, the container
//! lifecycle and pod events. Of pods and containers only what a claim needs is decoded (ids,
//! names, the annotations isold reads, the cpuset and CPU shares, the cgroups path, the pid,
//! the state); every other field is skipped without a copy.
//!
//! What is kept is bounded whatever the runtime sends: identifiers and paths at most
//! [`MAX_NAME`] and [`MAX_PATH`] bytes (longer ones fail the decoding of their pod or
//! container), a cpuset at most [`crate::CpuSet::MAX_LIST_BYTES`], and annotations only
//! those [`crate::claims::annotations::read_by_isold`] names, at most
//! [`annotations::MAX_KEPT`] of [`annotations::MAX_VALUE`] bytes each.

use std::collections::BTreeMap;

use super::wire::{self, DecodeError, Encoder};
use crate::claims::annotations;

/// The longest id, name, uid or namespace kept.
pub const MAX_NAME: usize = 1024;
/// The longest cgroups path or cgroup parent kept.
pub const MAX_PATH: usize = 4096;

fn name(what: &'static str, v: &wire::Value) -> Result<String, DecodeError> {
    wire::string_capped(what, v, MAX_NAME)
}

fn path(what: &'static str, v: &wire::Value) -> Result<String, DecodeError> {
    wire::string_capped(what, v, MAX_PATH)
}

/// An annotation entry, kept when isold reads it.
fn annotation(
    what: &'static str,
    v: &wire::Value,
    map: &mut BTreeMap<String, String>,
) -> Result<(), DecodeError> {
    wire::map_entry_kept(
        what,
        v,
        map,
        annotations::read_by_isold,
        annotations::MAX_KEPT,
        annotations::MAX_VALUE,
    )
    .map(|_| ())
}

/// The ttrpc service the runtime serves (the plugin calls it).
pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";
/// The ttrpc service the plugin serves (the runtime calls it).
pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";

/// NRI's events (`Event`): a subscription mask has bit `1 << (event - 1)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Event {
    RunPodSandbox = 1,
    StopPodSandbox = 2,
    RemovePodSandbox = 3,
    CreateContainer = 4,
    PostCreateContainer = 5,
    StartContainer = 6,
    PostStartContainer = 7,
    UpdateContainer = 8,
    PostUpdateContainer = 9,
    StopContainer = 10,
    RemoveContainer = 11,
}

impl Event {
    /// The event of a `StateChangeEvent.event` value.
    pub fn of(v: u64) -> Option<Event> {
        use Event::*;
        Some(match v {
            1 => RunPodSandbox,
            2 => StopPodSandbox,
            3 => RemovePodSandbox,
            4 => CreateContainer,
            5 => PostCreateContainer,
            6 => StartContainer,
            7 => PostStartContainer,
            8 => UpdateContainer,
            9 => PostUpdateContainer,
            10 => StopContainer,
            11 => RemoveContainer,
            _ => return None,
        })
    }

    /// Its bit in a subscription mask.
    pub fn bit(self) -> i32 {
        1 << (self as u32 - 1)
    }
}

/// The subscription mask of `events`.
pub fn mask(events: &[Event]) -> i32 {
    events.iter().fold(0, |m, e| m | e.bit())
}

/// `RegisterPluginRequest`.
pub fn register_plugin(name: &str, idx: &str) -> Vec<u8> {
    let mut e = Encoder::default();
    e.string(1, name).string(2, idx);
    e.0
}

/// `ConfigureRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Configure {
    pub config: String,
    pub runtime_name: String,
    pub runtime_version: String,
    /// Milliseconds.
    pub registration_timeout: i64,
    /// Milliseconds.
    pub request_timeout: i64,
}

impl Configure {
    pub fn decode(b: &[u8]) -> Result<Configure, DecodeError> {
        const W: &str = "ConfigureRequest";
        let mut c = Configure::default();
        for (n, v) in wire::fields(W, b)? {
            match n {
                1 => c.config = wire::string(W, &v)?,
                2 => c.runtime_name = wire::string(W, &v)?,
                3 => c.runtime_version = wire::string(W, &v)?,
                4 => c.registration_timeout = wire::number(W, &v)? as i64,
                5 => c.request_timeout = wire::number(W, &v)? as i64,
                _ => {}
            }
        }
        Ok(c)
    }
}

/// `ConfigureResponse`: the events subscribed to (field 2).
pub fn configure_response(events: i32) -> Vec<u8> {
    let mut e = Encoder::default();
    e.varint(2, events as u32 as u64);
    e.0
}

/// `ContainerState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContainerState {
    #[default]
    Unknown,
    Created,
    Paused,
    Running,
    Stopped,
}

/// A pod, as NRI describes it (the fields isold reads).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodSandbox {
    pub id: String,
    pub name: String,
    pub uid: String,
    pub namespace: String,
    pub annotations: BTreeMap<String, String>,
    /// `linux.cgroup_parent`.
    pub cgroup_parent: String,
    pub pid: u32,
}

impl PodSandbox {
    pub fn decode(b: &[u8]) -> Result<PodSandbox, DecodeError> {
        const W: &str = "PodSandbox";
        let mut p = PodSandbox::default();
        for (n, v) in wire::fields(W, b)? {
            match n {
                1 => p.id = name(W, &v)?,
                2 => p.name = name(W, &v)?,
                3 => p.uid = name(W, &v)?,
                4 => p.namespace = name(W, &v)?,
                6 => annotation(W, &v, &mut p.annotations)?,
                8 => {
                    for (ln, lv) in wire::fields(W, wire::bytes(W, &v)?)? {
                        if ln == 3 {
                            p.cgroup_parent = path(W, &lv)?;
                        }
                    }
                }
                9 => p.pid = wire::number(W, &v)? as u32,
                _ => {}
            }
        }
        Ok(p)
    }

    /// Encoded (for tests and recorded streams).
    pub fn encode(&self) -> Encoder {
        let mut linux = Encoder::default();
        linux.string(3, &self.cgroup_parent);
        let mut e = Encoder::default();
        e.string(1, &self.id)
            .string(2, &self.name)
            .string(3, &self.uid)
            .string(4, &self.namespace)
            .map(6, &self.annotations)
            .message(8, &linux)
            .varint(9, u64::from(self.pid));
        e
    }
}

/// A container, as NRI describes it (the fields isold reads).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Container {
    pub id: String,
    pub pod_sandbox_id: String,
    pub name: String,
    pub state: ContainerState,
    pub annotations: BTreeMap<String, String>,
    /// `linux.resources.cpu.cpus`: its cpuset.
    pub cpus: String,
    /// `linux.resources.cpu.shares`, when set.
    pub shares: Option<u64>,
    /// `linux.cgroups_path`.
    pub cgroups_path: String,
    /// Its process (0 before its start).
    pub pid: u32,
}

impl Container {
    pub fn decode(b: &[u8]) -> Result<Container, DecodeError> {
        const W: &str = "Container";
        let mut c = Container::default();
        for (n, v) in wire::fields(W, b)? {
            match n {
                1 => c.id = name(W, &v)?,
                2 => c.pod_sandbox_id = name(W, &v)?,
                3 => c.name = name(W, &v)?,
                4 => {
                    c.state = match wire::number(W, &v)? {
                        1 => ContainerState::Created,
                        2 => ContainerState::Paused,
                        3 => ContainerState::Running,
                        4 => ContainerState::Stopped,
                        _ => ContainerState::Unknown,
                    }
                }
                6 => annotation(W, &v, &mut c.annotations)?,
                11 => c.decode_linux(wire::bytes(W, &v)?)?,
                12 => c.pid = wire::number(W, &v)? as u32,
                _ => {}
            }
        }
        Ok(c)
    }

    /// `LinuxContainer`: resources (3), cgroups_path (5).
    fn decode_linux(&mut self, b: &[u8]) -> Result<(), DecodeError> {
        const W: &str = "LinuxContainer";
        for (n, v) in wire::fields(W, b)? {
            match n {
                3 => {
                    let r = Resources::decode(wire::bytes(W, &v)?)?;
                    (self.cpus, self.shares) = (r.cpus, r.shares);
                }
                5 => self.cgroups_path = path(W, &v)?,
                _ => {}
            }
        }
        Ok(())
    }

    /// Encoded (for tests and recorded streams).
    pub fn encode(&self) -> Encoder {
        let resources = Resources {
            cpus: self.cpus.clone(),
            shares: self.shares,
        }
        .encode();
        let mut linux = Encoder::default();
        linux.message(3, &resources).string(5, &self.cgroups_path);
        let state = match self.state {
            ContainerState::Unknown => 0,
            ContainerState::Created => 1,
            ContainerState::Paused => 2,
            ContainerState::Running => 3,
            ContainerState::Stopped => 4,
        };
        let mut e = Encoder::default();
        e.string(1, &self.id)
            .string(2, &self.pod_sandbox_id)
            .string(3, &self.name)
            .varint(4, state)
            .map(6, &self.annotations)
            .message(11, &linux)
            .varint(12, u64::from(self.pid));
        e
    }
}

/// `LinuxResources`, the part isold reads: `cpu` (2) -> `shares` (1, an `OptionalUInt64`)
/// and `cpus` (6).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Resources {
    /// The cpuset ("" when not set).
    pub cpus: String,
    /// The CPU shares, when set.
    pub shares: Option<u64>,
}

impl Resources {
    pub fn decode(b: &[u8]) -> Result<Resources, DecodeError> {
        const W: &str = "LinuxResources";
        let mut r = Resources::default();
        for (n, v) in wire::fields(W, b)? {
            if n != 2 {
                continue;
            }
            for (cn, cv) in wire::fields(W, wire::bytes(W, &v)?)? {
                match cn {
                    1 => {
                        for (on, ov) in wire::fields(W, wire::bytes(W, &cv)?)? {
                            if on == 1 {
                                r.shares = Some(wire::number(W, &ov)?);
                            }
                        }
                        r.shares.get_or_insert(0);
                    }
                    6 => r.cpus = wire::string_capped(W, &cv, crate::CpuSet::MAX_LIST_BYTES)?,
                    _ => {}
                }
            }
        }
        Ok(r)
    }

    /// Encoded (for tests and recorded streams).
    pub fn encode(&self) -> Encoder {
        let mut cpu = Encoder::default();
        if let Some(s) = self.shares {
            let mut opt = Encoder::default();
            opt.varint(1, s);
            cpu.message(1, &opt);
        }
        cpu.string(6, &self.cpus);
        let mut resources = Encoder::default();
        resources.message(2, &cpu);
        resources
    }
}

/// `SynchronizeRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Synchronize {
    pub pods: Vec<PodSandbox>,
    pub containers: Vec<Container>,
    /// More chunks follow: answer `more = true` and nothing else.
    pub more: bool,
    /// The pods and containers that could not be decoded, each alone: the others are
    /// synchronized.
    pub bad: Vec<DecodeError>,
}

impl Synchronize {
    pub fn decode(b: &[u8]) -> Result<Synchronize, DecodeError> {
        const W: &str = "SynchronizeRequest";
        let mut s = Synchronize::default();
        for (n, v) in wire::fields(W, b)? {
            match n {
                1 => match PodSandbox::decode(wire::bytes(W, &v)?) {
                    Ok(p) => s.pods.push(p),
                    Err(e) => s.bad.push(e),
                },
                2 => match Container::decode(wire::bytes(W, &v)?) {
                    Ok(c) => s.containers.push(c),
                    Err(e) => s.bad.push(e),
                },
                3 => s.more = wire::number(W, &v)? != 0,
                _ => {}
            }
        }
        Ok(s)
    }
}

/// `SynchronizeResponse` with no update: `more` echoed (the runtime closes a plugin that
/// answers a split request otherwise).
pub fn synchronize_response(more: bool) -> Vec<u8> {
    let mut e = Encoder::default();
    e.varint(2, u64::from(more));
    e.0
}

/// A pod and a container: `CreateContainerRequest`, `StopContainerRequest`,
/// `UpdateContainerRequest` (pod 1, container 2, the update's resources 3) and
/// `StateChangeEvent` (event 1, pod 2, container 3).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodContainer {
    /// The event of a `StateChangeEvent`.
    pub event: Option<Event>,
    pub pod: PodSandbox,
    /// `None` for a pod's event.
    pub container: Option<Container>,
    /// An `UpdateContainerRequest`'s `linux_resources`: what the container is to have.
    pub update: Option<Resources>,
}

impl PodContainer {
    /// A `CreateContainerRequest`, `StopContainerRequest` or `UpdateContainerRequest`.
    pub fn decode_request(b: &[u8]) -> Result<PodContainer, DecodeError> {
        const W: &str = "UpdateContainerRequest";
        let mut pc = Self::decode("container request", b, 1, 2, None)?;
        for (n, v) in wire::fields(W, b)? {
            if n == 3 {
                pc.update = Some(Resources::decode(wire::bytes(W, &v)?)?);
            }
        }
        Ok(pc)
    }

    /// A `StateChangeEvent`.
    pub fn decode_event(b: &[u8]) -> Result<PodContainer, DecodeError> {
        Self::decode("StateChangeEvent", b, 2, 3, Some(1))
    }

    fn decode(
        what: &'static str,
        b: &[u8],
        pod: u32,
        container: u32,
        event: Option<u32>,
    ) -> Result<PodContainer, DecodeError> {
        let mut out = PodContainer::default();
        for (n, v) in wire::fields(what, b)? {
            if Some(n) == event {
                out.event = Event::of(wire::number(what, &v)?);
            } else if n == pod {
                out.pod = PodSandbox::decode(wire::bytes(what, &v)?)?;
            } else if n == container {
                out.container = Some(Container::decode(wire::bytes(what, &v)?)?);
            }
        }
        Ok(out)
    }
}
