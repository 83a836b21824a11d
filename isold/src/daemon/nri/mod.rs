//! NRI: `isold run` as a plugin of the runtime's NRI socket (containerd 2.x, CRI-O 1.30+), a
//! source of claims beside the OCI hook.
//!
//! A thread of its own dials the socket, registers (name `isold`, index 90), subscribes to
//! CreateContainer, StartContainer, UpdateContainer, PostUpdateContainer, StopContainer and
//! RemoveContainer, and answers each call itself, never behind the daemon's other work:
//!
//! - whether a container may claim is judged in this thread, from the claims and policy the
//!   main loop last published ([`View`]) and the kubelet's word
//!   ([`libtaskisol::nri::claim_for`]): only a container that holds exclusive CPUs claims;
//!   a container that asks for nothing is answered at once;
//! - at CreateContainer a claim the rule refuses fails the creation (the reason goes back
//!   to the runtime, and to the kubelet);
//! - at StartContainer the claim is made by the main loop ([`Ask`]); the answer waits for it
//!   in a second thread, at most [`ANSWER_WITHIN`] (or 3/4 of the runtime's timeout), while
//!   this one goes on reading; a claim not made by then is made late, the start goes on;
//! - UpdateContainer that would give a claiming container a cpuset its claim may not have
//!   is refused with the reason (the kubelet logs it and the container keeps its CPUs);
//!   PostUpdateContainer moves the claim to the new cpuset (CPUs given back restored, new
//!   ones isolated), or releases it when the new cpuset may not be claimed;
//! - a stop or a removal releases the claim; Synchronize (after a restart of isold or of
//!   the runtime) gives every container that exists, and the main loop reconciles the
//!   claims NRI made with it. Synchronize is answered first and judged after: the runtime
//!   gives the whole exchange one deadline (2 s) whatever the pods carry, and closes a
//!   plugin that misses it. isold adjusts nothing in a container.
//!
//! What is kept of the runtime's messages is bounded ([`libtaskisol::nri::api`]): a message
//! is at most 4 MiB, annotations isold does not read are not decoded.
//!
//! isold is registered once the runtime's Synchronize is answered (the status and
//! `isold_nri_connected` say so from then on). When the runtime closes a registered
//! connection (its restart), the thread dials again at once; a dial that fails, or a
//! connection that ends before it is registered, is tried again after [`RETRY_FIRST`]
//! doubling to [`RETRY_MAX`]; each said in the log and the status.
//!
//! Neither of the plugin's threads is niced, unlike the daemon's background threads: they
//! answer within the runtime's deadline, and at nice 19 under isold.service's `Nice=-10`
//! they got 1/600 of a housekeeping CPU while the main loop was busy (a Synchronize answered
//! in 2.5 ms alone took 287 ms beside one busy nice -10 thread, and seconds in a slow guest).
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
use std::time::{Duration, Instant};

use libtaskisol::claims::{Claim, ClaimRequest};
use libtaskisol::nri::api::{self, Event, PodContainer};
use libtaskisol::nri::mux::{self, Demux};
use libtaskisol::nri::ttrpc::{self, code, Reader, Request, Response};
use libtaskisol::nri::{self as nri_proto, claim_for, Judged};
use libtaskisol::policy::Policy;
use libtaskisol::SysRoot;

use super::os::Log;
use super::service::{self, Ask as Asked, Cx, Service};

mod session;
#[cfg(test)]
mod tests;

use session::Session;

/// How long a StartContainer waits for the main loop's claim before it is answered anyway
/// (the runtime gives each call 2 s, and closes a plugin that misses it).
pub const ANSWER_WITHIN: Duration = Duration::from_millis(1500);

/// The most pods and containers one Synchronize may carry (all its chunks): the rest are
/// skipped, said in the log.
pub const MAX_SYNC_OBJECTS: usize = 1 << 17;

/// What the runtime's calls ask of the main loop.
#[derive(Debug)]
pub enum Ask {
    /// A claim this thread refused (CreateContainer, StartContainer, UpdateContainer): logged
    /// and counted.
    Refused {
        reason: &'static str,
        message: String,
    },
    /// What the daemon carries out: StartContainer's claim (with its process),
    /// PostUpdateContainer's (`Follow`: moved to the new cpuset, or released when that cannot
    /// be claimed), the release after StopContainer, RemoveContainer or an update that left
    /// the container nothing to claim, and Synchronize's containers (`Sync`: every one that
    /// exists, and the claims the running ones ask for).
    Do(Asked),
}

/// The main loop's word on an [`Ask`].
pub type Answer = Result<(), String>;

/// The first wait before dialling again after a failure.
pub const RETRY_FIRST: Duration = Duration::from_millis(250);
/// The longest: a connect(2) to a socket nobody listens on costs nothing, and containers
/// the runtime creates while isold is not registered are not isolated until it is.
pub const RETRY_MAX: Duration = Duration::from_secs(5);

/// What the main loop last put in force, for this thread's judgements.
#[derive(Debug)]
pub struct View {
    pub policy: Policy,
    pub claims: Vec<Claim>,
}

/// The [`View`] the main loop publishes (at the plugin's start and at every change of the
/// policy or the claims) and the plugin's thread reads.
#[derive(Debug, Clone, Default)]
pub struct Published(Arc<Mutex<Option<Arc<View>>>>);

impl Published {
    pub fn publish(&self, view: View) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(view));
    }

    fn get(&self) -> Option<Arc<View>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The connection's state, for `isold status` and the metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Link {
    /// Registered: the runtime's Synchronize answered, until the connection ends.
    pub connected: bool,
    /// Registrations made since the start.
    pub connects: u64,
    /// Why the last connection ended or failed.
    pub last_error: String,
    /// Calls answered since the start.
    pub answered: u64,
    /// How long the last [`KEPT_ANSWERS`] answers took, from the call read whole to the
    /// answer written, in microseconds.
    pub answer_us: std::collections::VecDeque<u32>,
}

/// How many answer times [`Link`] keeps.
pub const KEPT_ANSWERS: usize = 1000;

impl Link {
    /// An answer written `took` after its call was read.
    fn answered(&mut self, took: Duration) {
        self.answered += 1;
        if self.answer_us.len() == KEPT_ANSWERS {
            self.answer_us.pop_front();
        }
        self.answer_us
            .push_back(took.as_micros().min(u128::from(u32::MAX)) as u32);
    }

    /// "answers: N, median X ms, worst Y ms": the kept answer times.
    fn answers(&self) -> Option<String> {
        let mut t: Vec<u32> = self.answer_us.iter().copied().collect();
        if t.is_empty() {
            return None;
        }
        t.sort_unstable();
        let ms = |us: u32| f64::from(us) / 1000.0;
        Some(format!(
            "answers: {}, median {:.1} ms, worst {:.1} ms (of the last {})",
            self.answered,
            ms(t[t.len() / 2]),
            ms(t[t.len() - 1]),
            t.len()
        ))
    }
}

/// The plugin, seen from the main loop.
#[derive(Debug)]
pub struct Plugin {
    asks: Receiver<(Ask, Option<SyncSender<Answer>>)>,
    /// Readable when an ask waits.
    pub wake: UnixStream,
    pub link: Arc<Mutex<Link>>,
    pub socket: PathBuf,
    pub view: Published,
}

/// What the plugin's thread needs besides the connection.
struct Ctx {
    link: Arc<Mutex<Link>>,
    log: Log,
    root: SysRoot,
    view: Published,
    to_main: Sender<(Ask, Option<SyncSender<Answer>>)>,
    notify_main: UnixStream,
}

impl Plugin {
    /// Start the thread that keeps a connection to `socket`.
    pub fn start(
        socket: PathBuf,
        log: Log,
        root: SysRoot,
        view: Published,
    ) -> std::io::Result<Plugin> {
        let (wake, notify_main) = crate::peers::waker()?;
        let (to_main, asks) = std::sync::mpsc::channel();
        let link = Arc::new(Mutex::new(Link::default()));
        let path = socket.clone();
        let ctx = Ctx {
            link: link.clone(),
            log,
            root,
            view: view.clone(),
            to_main,
            notify_main,
        };
        std::thread::Builder::new()
            .name("isold-nri".into())
            .spawn(move || keep_connected(&path, &ctx))?;
        Ok(Plugin {
            asks,
            wake,
            link,
            socket,
            view,
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
        let answers = l.answers().map(|a| format!("; {a}")).unwrap_or_default();
        match (l.connected, l.last_error.is_empty()) {
            (true, _) => format!(
                "registered with {} (connections: {}){answers}",
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

/// Dial, serve until the connection ends, dial again; forever.
fn keep_connected(path: &std::path::Path, ctx: &Ctx) {
    let (log, link) = (&ctx.log, &ctx.link);
    let mut backoff = RETRY_FIRST;
    let mut at_once: Option<Instant> = None;
    let mut said = String::new();
    loop {
        let (ended, registered) = match UnixStream::connect(path).map(|s| (refused(&s), s)) {
            // Whoever can bind the path is not trusted for it: the runtime runs as root.
            Ok((Some(why), _)) => (why, false),
            Ok((None, s)) => match s.try_clone() {
                Err(e) => (format!("cannot share the connection: {e}"), false),
                Ok(w) => {
                    link.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .last_error
                        .clear();
                    log.info(&format!("NRI: connected to {}", path.display()));
                    let _ = (&ctx.notify_main).write_all(b"c");
                    let mut session = Session::new(s, w, ctx);
                    let ended = session.serve();
                    (ended, session.registered)
                }
            },
            Err(e) => (format!("cannot connect: {e}"), false),
        };
        {
            let mut l = link.lock().unwrap_or_else(|e| e.into_inner());
            l.connected = false;
            l.last_error = ended.clone();
        }
        let _ = (&ctx.notify_main).write_all(b"s");
        if registered {
            said.clear();
        }
        if ended != said {
            log.warn(&format!(
                "NRI: {}: {ended}; dialling again every {} s at most",
                path.display(),
                RETRY_MAX.as_secs()
            ));
            said = ended;
        }
        // A registered connection that ends is the runtime's restart (or its drop of isold):
        // dialled again at once, at most once per RETRY_MAX, so that a runtime that drops
        // isold right after each registration is not dialled in a loop.
        if registered && at_once.map_or(true, |t| t.elapsed() >= RETRY_MAX) {
            at_once = Some(Instant::now());
            backoff = RETRY_FIRST;
            continue;
        }
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(RETRY_MAX);
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

/// The writing half of a connection, shared by the reading thread and the waiting one: one
/// message's frames at a time.
type Writer = Arc<Mutex<UnixStream>>;

fn send(writer: &Writer, conn: u32, bytes: &[u8]) -> std::io::Result<()> {
    writer
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .write_all(&mux::frames(conn, bytes))
}

fn respond(writer: &Writer, stream: u32, resp: &Response) -> std::io::Result<()> {
    let out = ttrpc::Message {
        stream,
        kind: ttrpc::RESPONSE,
        flags: 0,
        data: resp.encode(),
    };
    send(writer, mux::PLUGIN_CONN, &out.encode())
}

/// An answer written `took` after its call was read: kept for the status, and the main
/// loop woken to show it.
fn answered(ctx_link: &Mutex<Link>, notify_main: &UnixStream, took: Duration) {
    ctx_link
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .answered(took);
    let _ = (&*notify_main).write_all(b"a");
}

/// The NRI plugin as a service of the daemon (`[containers] nri`): its thread, its status
/// line (`nri`) and `isold_nri_connected`.
#[derive(Debug, Default)]
pub(super) struct Nri {
    plugin: Option<Plugin>,
}

impl Nri {
    /// The plugin's thread started when the configuration asks for it (it dials and
    /// registers by itself), with the policy and claims in force to judge by.
    pub fn start(cx: &mut Cx<'_>) -> Nri {
        let Some(c) = cx.policy.containers().filter(|c| c.nri) else {
            return Nri::default();
        };
        match Plugin::start(
            c.nri_socket.clone(),
            cx.env.log,
            cx.env.root.clone(),
            Published::default(),
        ) {
            Ok(p) => {
                cx.books.status.nri = p.describe();
                let mut n = Nri { plugin: Some(p) };
                n.policy_changed(cx);
                n
            }
            Err(e) => {
                cx.env.log.warn(&format!("NRI: cannot start: {e}"));
                Nri::default()
            }
        }
    }
}

impl Service for Nri {
    fn name(&self) -> &'static str {
        "NRI plugin"
    }

    fn wake(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.plugin.as_ref().map(|p| p.wake.as_fd())
    }

    /// What the runtime's calls asked: a refusal counted and answered here, the rest for the
    /// daemon to carry out; the connection's state to the status and the metrics.
    fn on_wake(&mut self, cx: &mut Cx<'_>) -> Vec<service::Request> {
        let Some(p) = self.plugin.as_ref() else {
            return Vec::new();
        };
        let mut asked = Vec::new();
        while let Some((ask, answer)) = p.next() {
            let reply = move |r: &libtaskisol::claims::wire::Reply| {
                if let Some(a) = answer {
                    let _ = a.send(if r.ok { Ok(()) } else { Err(r.message.clone()) });
                }
            };
            let ask = match ask {
                Ask::Refused { reason, message } => {
                    cx.books.refused(reason, &message);
                    reply(&libtaskisol::claims::wire::Reply::said(false, message));
                    continue;
                }
                Ask::Do(ask) => ask,
            };
            asked.push(service::Request::new(ask, reply));
        }
        let line = p.describe();
        if let Some((m, _)) = &cx.books.metrics {
            m.nri_connected(p.connected());
        }
        if line != cx.books.status.nri {
            cx.books.status.nri = line;
            cx.books.dirty = true;
        }
        asked
    }

    /// The policy and the claims in force, to the plugin's thread, which judges the
    /// runtime's calls by them.
    fn policy_changed(&mut self, cx: &mut Cx<'_>) {
        if let Some(p) = &self.plugin {
            p.view.publish(View {
                policy: cx.policy.clone(),
                claims: cx.claims.to_vec(),
            });
        }
    }
}
