//! NRI: `isold run` as a plugin of the runtime's NRI socket (containerd 2.x, CRI-O 1.30+), a
//! source of claims beside the OCI hook.
//!
//! A thread of its own dials the socket, registers (name `isold`, index 90), subscribes to
//! CreateContainer, StartContainer, StopContainer and RemoveContainer, and answers each call
//! within the runtime's 2 s: it asks the main loop ([`Ask`]) and waits for its word at most
//! [`ANSWER_WITHIN`], after which the call is answered and the work goes on. At
//! CreateContainer a claim the administrator's rule refuses fails the creation (the reason
//! goes back to the runtime, and to the kubelet); at StartContainer the claim is made with
//! the container's process; a stop or a removal releases it; Synchronize (after a restart of
//! isold or of the runtime) gives every container that exists, and the main loop reconciles
//! the claims NRI made with it. isold adjusts nothing in a container.
//!
//! When the runtime closes the connection (its restart), the thread dials again with a
//! back-off of 1 s doubling to 30 s, and says so in the log and the status.
//!
//! Only external mode: a pre-installed plugin (`/opt/nri/plugins`) is started by the runtime
//! with a replaced environment and killed with it, which is the wrong owner for the node's
//! policy; `isold run` is its own service.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use libtaskisol::claims::ClaimRequest;
use libtaskisol::nri::api::{self, Event, PodContainer};
use libtaskisol::nri::mux::{self, Demux};
use libtaskisol::nri::ttrpc::{self, code, Reader, Request, Response};
use libtaskisol::nri::{self as nri_proto, claim_of};

use super::os::{nice_this_thread, Log};

/// How long a call waits for the main loop before it is answered anyway (the runtime gives
/// each call 2 s, and closes a plugin that misses it).
pub const ANSWER_WITHIN: Duration = Duration::from_millis(1500);

/// What the runtime's calls ask of the main loop.
#[derive(Debug)]
pub enum Ask {
    /// CreateContainer: would its claim be admitted? (`Err(reason)` fails the creation.)
    Admit(ClaimRequest),
    /// StartContainer: its claim, with its process.
    Claim(ClaimRequest),
    /// StopContainer or RemoveContainer: its claim released.
    Release(String),
    /// Synchronize: every container that exists, and the claims the running ones ask for.
    Sync {
        existing: Vec<String>,
        asks: Vec<ClaimRequest>,
    },
}

/// The main loop's word on an [`Ask`].
pub type Answer = Result<(), String>;

/// The connection's state, for `isold status` and the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Link {
    pub connected: bool,
    /// Connections made since the start.
    pub connects: u64,
    /// Why the last connection ended or failed.
    pub last_error: String,
}

/// The plugin, seen from the main loop.
#[derive(Debug)]
pub struct Plugin {
    asks: Receiver<(Ask, Option<SyncSender<Answer>>)>,
    /// Readable when an ask waits.
    pub wake: UnixStream,
    pub link: Arc<Mutex<Link>>,
    pub socket: PathBuf,
}

impl Plugin {
    /// Start the thread that keeps a connection to `socket`.
    pub fn start(socket: PathBuf, log: Log) -> std::io::Result<Plugin> {
        let (wake, notify_main) = crate::peers::waker()?;
        let (to_main, asks) = std::sync::mpsc::channel();
        let link = Arc::new(Mutex::new(Link::default()));
        let (l, path) = (link.clone(), socket.clone());
        std::thread::Builder::new()
            .name("isold-nri".into())
            .spawn(move || {
                nice_this_thread();
                keep_connected(&path, &l, &log, &to_main, &notify_main)
            })?;
        Ok(Plugin {
            asks,
            wake,
            link,
            socket,
        })
    }

    /// The next ask waiting, with where its answer goes (none: nobody waits for it).
    pub fn next(&self) -> Option<(Ask, Option<SyncSender<Answer>>)> {
        let mut drain = [0u8; 64];
        while matches!((&self.wake).read(&mut drain), Ok(n) if n > 0) {}
        self.asks.try_recv().ok()
    }

    /// Whether it is registered with the runtime now.
    pub fn connected(&self) -> bool {
        self.link
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .connected
    }

    /// The status line.
    pub fn describe(&self) -> String {
        let l = self.link.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match (l.connected, l.last_error.is_empty()) {
            (true, _) => format!(
                "registered with {} (connections: {})",
                self.socket.display(),
                l.connects
            ),
            (false, true) => format!("connecting to {}", self.socket.display()),
            (false, false) => format!(
                "not connected to {}: {}; dialling again",
                self.socket.display(),
                l.last_error
            ),
        }
    }
}

/// Dial, serve until the connection ends, dial again with back-off; forever.
fn keep_connected(
    path: &std::path::Path,
    link: &Mutex<Link>,
    log: &Log,
    to_main: &Sender<(Ask, Option<SyncSender<Answer>>)>,
    notify_main: &UnixStream,
) {
    let mut backoff = Duration::from_secs(1);
    let mut said = String::new();
    loop {
        let ended = match UnixStream::connect(path).map(|s| (refused(&s), s)) {
            // Whoever can bind the path is not trusted for it: the runtime runs as root.
            Ok((Some(why), _)) => why,
            Ok((None, s)) => {
                {
                    let mut l = link.lock().unwrap_or_else(|e| e.into_inner());
                    l.connected = true;
                    l.connects += 1;
                    l.last_error.clear();
                }
                log.info(&format!("NRI: connected to {}", path.display()));
                let _ = (&*notify_main).write_all(b"c");
                backoff = Duration::from_secs(1);
                said.clear();
                let mut session = Session {
                    stream: s,
                    log: *log,
                    to_main,
                    notify_main,
                    sync: (Vec::new(), Vec::new()),
                };
                session.serve()
            }
            Err(e) => format!("cannot connect: {e}"),
        };
        {
            let mut l = link.lock().unwrap_or_else(|e| e.into_inner());
            l.connected = false;
            l.last_error = ended.clone();
        }
        let _ = (&*notify_main).write_all(b"s");
        if ended != said {
            log.warn(&format!(
                "NRI: {}: {ended}; dialling again every {} s at most",
                path.display(),
                30
            ));
            said = ended;
        }
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

/// Why the NRI server at the other end of `s` is not trusted: it is not root (nor isold's own
/// user, when isold does not run as root); None when it is.
fn refused(s: &UnixStream) -> Option<String> {
    let uid = nix::sys::socket::getsockopt(s, nix::sys::socket::sockopt::PeerCredentials)
        .map(|c| c.uid());
    let me = nix::unistd::geteuid().as_raw();
    match uid {
        Ok(0) => None,
        Ok(u) if u == me => None,
        Ok(u) => Some(format!(
            "refused: the server runs as uid {u}, not root (a runtime's NRI socket is root's)"
        )),
        Err(e) => Some(format!(
            "refused: its user cannot be told (SO_PEERCRED: {e})"
        )),
    }
}

/// One connection to the runtime.
struct Session<'a> {
    stream: UnixStream,
    log: Log,
    to_main: &'a Sender<(Ask, Option<SyncSender<Answer>>)>,
    notify_main: &'a UnixStream,
    /// Synchronize's chunks so far: pods and containers.
    sync: (Vec<api::PodSandbox>, Vec<api::Container>),
}

impl Session<'_> {
    /// Register, then answer the runtime's calls until the connection ends: why it ended.
    fn serve(&mut self) -> String {
        let register = Request {
            service: api::RUNTIME_SERVICE.into(),
            method: "RegisterPlugin".into(),
            payload: api::register_plugin(nri_proto::PLUGIN_NAME, nri_proto::PLUGIN_IDX),
            timeout_nano: 0,
        };
        let msg = ttrpc::Message {
            stream: 1,
            kind: ttrpc::REQUEST,
            flags: 0,
            data: register.encode(),
        };
        if let Err(e) = self.send(mux::RUNTIME_CONN, &msg.encode()) {
            return format!("registering: {e}");
        }
        let (mut demux, mut calls, mut replies) =
            (Demux::default(), Reader::default(), Reader::default());
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match self.stream.read(&mut buf) {
                Ok(0) => return "the runtime closed the connection".into(),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return format!("reading: {e}"),
            };
            demux.push(&buf[..n]);
            loop {
                let frame = match demux.next_frame() {
                    Ok(Some(f)) => f,
                    Ok(None) => break,
                    Err(e) => return e.to_string(),
                };
                match frame.0 {
                    mux::PLUGIN_CONN => calls.push(&frame.1),
                    mux::RUNTIME_CONN => replies.push(&frame.1),
                    _ => {}
                }
            }
            if let Err(e) = self.answer_calls(&mut calls) {
                return e;
            }
            if let Err(e) = self.read_replies(&mut replies) {
                return e;
            }
        }
    }

    fn send(&mut self, conn: u32, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(&mux::frames(conn, bytes))
    }

    /// The runtime's calls that are whole, each answered.
    fn answer_calls(&mut self, calls: &mut Reader) -> Result<(), String> {
        while let Some(m) = calls.next_message().map_err(|e| e.to_string())? {
            if m.kind != ttrpc::REQUEST {
                continue;
            }
            let resp = match Request::decode(&m.data) {
                Ok(req) => self.call(&req),
                Err(e) => Response {
                    code: code::INVALID_ARGUMENT,
                    message: e.to_string(),
                    payload: Vec::new(),
                },
            };
            let out = ttrpc::Message {
                stream: m.stream,
                kind: ttrpc::RESPONSE,
                flags: 0,
                data: resp.encode(),
            };
            self.send(mux::PLUGIN_CONN, &out.encode())
                .map_err(|e| format!("answering: {e}"))?;
        }
        Ok(())
    }

    /// The runtime's replies to this plugin's calls (its registration).
    fn read_replies(&mut self, replies: &mut Reader) -> Result<(), String> {
        while let Some(m) = replies.next_message().map_err(|e| e.to_string())? {
            let r = Response::decode(&m.data).map_err(|e| e.to_string())?;
            if r.code != code::OK {
                return Err(format!(
                    "the runtime refused the registration: {} (code {})",
                    r.message, r.code
                ));
            }
        }
        Ok(())
    }

    /// One call of the runtime.
    fn call(&mut self, req: &Request) -> Response {
        if req.service != api::PLUGIN_SERVICE {
            return Response {
                code: code::INVALID_ARGUMENT,
                message: format!("no service {}", req.service),
                payload: Vec::new(),
            };
        }
        let ok = |payload: Vec<u8>| Response {
            code: code::OK,
            message: String::new(),
            payload,
        };
        let bad = |e: libtaskisol::nri::wire::DecodeError| Response {
            code: code::INVALID_ARGUMENT,
            message: e.to_string(),
            payload: Vec::new(),
        };
        match req.method.as_str() {
            "Configure" => {
                if let Ok(c) = api::Configure::decode(&req.payload) {
                    self.log.info(&format!(
                        "NRI: configured by {} {} (requests within {} ms)",
                        c.runtime_name, c.runtime_version, c.request_timeout
                    ));
                }
                ok(api::configure_response(api::mask(&[
                    Event::CreateContainer,
                    Event::StartContainer,
                    Event::StopContainer,
                    Event::RemoveContainer,
                ])))
            }
            "Synchronize" => match api::Synchronize::decode(&req.payload) {
                Ok(s) => {
                    self.sync.0.extend(s.pods);
                    self.sync.1.extend(s.containers);
                    if !s.more {
                        self.synchronized();
                    }
                    ok(api::synchronize_response(s.more))
                }
                Err(e) => bad(e),
            },
            "CreateContainer" | "StopContainer" | "UpdateContainer" => {
                match PodContainer::decode_request(&req.payload) {
                    Ok(pc) => self.container_call(&req.method, &pc),
                    Err(e) => bad(e),
                }
            }
            "StateChange" => match PodContainer::decode_event(&req.payload) {
                Ok(pc) => self.state_change(&pc),
                Err(e) => bad(e),
            },
            "Shutdown" => ok(Vec::new()),
            m => Response {
                code: code::UNIMPLEMENTED,
                message: format!("isold has no {m}"),
                payload: Vec::new(),
            },
        }
    }

    /// The claim `c` of `pod` asks for, as the OCI hook would make it: none for a container
    /// whose pod is not Guaranteed (its cpuset is the shared pool, left as it is; logged).
    fn claim(
        &self,
        pod: &api::PodSandbox,
        c: &api::Container,
    ) -> Result<
        Option<libtaskisol::claims::ClaimRequest>,
        libtaskisol::claims::annotations::AnnotationError,
    > {
        let r = claim_of(pod, c)?;
        if r.is_some() {
            if let Some(qos) = libtaskisol::nri::shared_pool(c) {
                self.log.info(&format!(
                    "NRI: container {} asks for isolated CPUs, but its pod is {} (not Guaranteed): its cpuset is the shared pool, left as it is",
                    c.id,
                    qos.name()
                ));
                return Ok(None);
            }
        }
        Ok(r)
    }

    /// The last chunk of Synchronize: every container that exists, to the main loop.
    fn synchronized(&mut self) {
        let (pods, containers) = std::mem::take(&mut self.sync);
        let pods: BTreeMap<&str, &api::PodSandbox> =
            pods.iter().map(|p| (p.id.as_str(), p)).collect();
        let empty = api::PodSandbox::default();
        let mut asks = Vec::new();
        for c in &containers {
            if c.state != api::ContainerState::Running || c.pid == 0 {
                continue;
            }
            let pod = pods
                .get(c.pod_sandbox_id.as_str())
                .copied()
                .unwrap_or(&empty);
            match self.claim(pod, c) {
                Ok(Some(r)) => asks.push(r),
                Ok(None) => {}
                Err(e) => self.log.warn(&format!("NRI: container {}: {e}", c.id)),
            }
        }
        let existing = containers.into_iter().map(|c| c.id).collect();
        self.tell(Ask::Sync { existing, asks }, false);
    }

    /// CreateContainer (the claim admitted or the creation failed), StopContainer (the claim
    /// released), UpdateContainer (nothing).
    fn container_call(&mut self, method: &str, pc: &PodContainer) -> Response {
        let Some(c) = &pc.container else {
            return Response::default();
        };
        match method {
            "CreateContainer" => match self.claim(&pc.pod, c) {
                Ok(Some(r)) => self.ask_or_refuse(Ask::Admit(r)),
                Ok(None) => Response::default(),
                Err(e) => refusal(e.to_string()),
            },
            "StopContainer" => {
                self.tell(Ask::Release(c.id.clone()), false);
                Response::default()
            }
            _ => Response::default(),
        }
    }

    /// StartContainer (the claim made), RemoveContainer (released); other events: nothing.
    fn state_change(&mut self, pc: &PodContainer) -> Response {
        let Some(c) = &pc.container else {
            return Response::default();
        };
        match pc.event {
            Some(Event::StartContainer) => match self.claim(&pc.pod, c) {
                Ok(Some(r)) => self.ask_or_refuse(Ask::Claim(r)),
                Ok(None) => Response::default(),
                Err(e) => refusal(e.to_string()),
            },
            Some(Event::RemoveContainer) => {
                self.tell(Ask::Release(c.id.clone()), false);
                Response::default()
            }
            _ => Response::default(),
        }
    }

    /// Ask the main loop and wait for its word, at most [`ANSWER_WITHIN`]: a refusal is the
    /// runtime's error; no word in time lets the container go on.
    fn ask_or_refuse(&mut self, ask: Ask) -> Response {
        match self.tell(ask, true) {
            Some(Err(reason)) => refusal(reason),
            _ => Response::default(),
        }
    }

    /// Hand `ask` to the main loop; with `wait`, its answer (`None`: none in time).
    fn tell(&mut self, ask: Ask, wait: bool) -> Option<Answer> {
        let (tx, rx) = if wait {
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        if self.to_main.send((ask, tx)).is_err() {
            return None;
        }
        let _ = (&*self.notify_main).write_all(b"n");
        rx?.recv_timeout(ANSWER_WITHIN).ok()
    }
}

/// A claim refused: an error status the runtime passes on (it fails the container's
/// creation or start, and the kubelet shows the message).
fn refusal(reason: String) -> Response {
    Response {
        code: code::FAILED_PRECONDITION,
        message: format!("isold: {reason}"),
        payload: Vec::new(),
    }
}
