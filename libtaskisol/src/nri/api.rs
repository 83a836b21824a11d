//! The NRI v0.8.0 messages isold reads and writes (package `nri.pkg.api.v1alpha1`, field
//! numbers as its `api.proto`): registration, configuration, synchronization, the container
//! lifecycle and pod events. Of pods and containers only what a claim needs is decoded (ids,
//! names, annotations, the cpuset, the cgroups path, the pid, the state); every other field
//! is skipped.

use std::collections::BTreeMap;

use super::wire::{self, DecodeError, Encoder};

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
                1 => p.id = wire::string(W, &v)?,
                2 => p.name = wire::string(W, &v)?,
                3 => p.uid = wire::string(W, &v)?,
                4 => p.namespace = wire::string(W, &v)?,
                6 => wire::map_entry(W, &v, &mut p.annotations)?,
                8 => {
                    for (ln, lv) in wire::fields(W, wire::bytes(W, &v)?)? {
                        if ln == 3 {
                            p.cgroup_parent = wire::string(W, &lv)?;
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
                1 => c.id = wire::string(W, &v)?,
                2 => c.pod_sandbox_id = wire::string(W, &v)?,
                3 => c.name = wire::string(W, &v)?,
                4 => {
                    c.state = match wire::number(W, &v)? {
                        1 => ContainerState::Created,
                        2 => ContainerState::Paused,
                        3 => ContainerState::Running,
                        4 => ContainerState::Stopped,
                        _ => ContainerState::Unknown,
                    }
                }
                6 => wire::map_entry(W, &v, &mut c.annotations)?,
                11 => c.decode_linux(wire::bytes(W, &v)?)?,
                12 => c.pid = wire::number(W, &v)? as u32,
                _ => {}
            }
        }
        Ok(c)
    }

    /// `LinuxContainer`: resources (3) -> cpu (2) -> cpus (6), cgroups_path (5).
    fn decode_linux(&mut self, b: &[u8]) -> Result<(), DecodeError> {
        const W: &str = "LinuxContainer";
        for (n, v) in wire::fields(W, b)? {
            match n {
                3 => {
                    for (rn, rv) in wire::fields(W, wire::bytes(W, &v)?)? {
                        if rn != 2 {
                            continue;
                        }
                        for (cn, cv) in wire::fields(W, wire::bytes(W, &rv)?)? {
                            if cn == 6 {
                                self.cpus = wire::string(W, &cv)?;
                            }
                        }
                    }
                }
                5 => self.cgroups_path = wire::string(W, &v)?,
                _ => {}
            }
        }
        Ok(())
    }

    /// Encoded (for tests and recorded streams).
    pub fn encode(&self) -> Encoder {
        let mut cpu = Encoder::default();
        cpu.string(6, &self.cpus);
        let mut resources = Encoder::default();
        resources.message(2, &cpu);
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

/// `SynchronizeRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Synchronize {
    pub pods: Vec<PodSandbox>,
    pub containers: Vec<Container>,
    /// More chunks follow: answer `more = true` and nothing else.
    pub more: bool,
}

impl Synchronize {
    pub fn decode(b: &[u8]) -> Result<Synchronize, DecodeError> {
        const W: &str = "SynchronizeRequest";
        let mut s = Synchronize::default();
        for (n, v) in wire::fields(W, b)? {
            match n {
                1 => s.pods.push(PodSandbox::decode(wire::bytes(W, &v)?)?),
                2 => s.containers.push(Container::decode(wire::bytes(W, &v)?)?),
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

/// A pod and a container: `CreateContainerRequest`, `StopContainerRequest` (pod 1,
/// container 2) and `StateChangeEvent` (event 1, pod 2, container 3).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodContainer {
    /// The event of a `StateChangeEvent`.
    pub event: Option<Event>,
    pub pod: PodSandbox,
    /// `None` for a pod's event.
    pub container: Option<Container>,
}

impl PodContainer {
    /// A `CreateContainerRequest` or `StopContainerRequest`.
    pub fn decode_request(b: &[u8]) -> Result<PodContainer, DecodeError> {
        Self::decode("container request", b, 1, 2, None)
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
