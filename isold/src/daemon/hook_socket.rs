//! The socket `isold hook` talks to (`/run/isold/isold.sock`): a source of claims, and a
//! service of the daemon ([`HookSocket`]).
//!
//! A thread of its own accepts and reads the connections ([`crate::peers`]: bounded, each
//! with a deadline), refuses a peer that is not root, parses each request line and hands
//! it to the main loop, which polls [`Server::wake`], carries the request out and gives its
//! reply back with [`Server::answer`]. A client that connects and sends nothing, or drips a
//! byte at a time, delays no task correction, reload or stop.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use libtaskisol::claims::wire::{Message, Reply};
use libtaskisol::claims::MAX_INPUT;

use super::service::{Ask, Cx, Request, Service};
use crate::peers::{self, Limits};

/// How the socket bounds its clients: 16 at once, 5 s from the accept to the whole request
/// line, 120 s for the daemon's reply to be made and taken (the hook waits 60 s).
pub const LIMITS: Limits = Limits {
    max_conns: 16,
    read: Duration::from_secs(5),
    write: Duration::from_secs(120),
    max_request: MAX_INPUT,
};

/// A request read from a client: its connection and what it asked (or why it could not be
/// read).
pub type Incoming = (u64, Result<Message, String>);

/// The daemon's listening socket: mode 0600 in isold's 0700 runtime directory, and a peer
/// that is not root is refused anyway.
#[derive(Debug)]
pub struct Server {
    path: PathBuf,
    requests: Receiver<Incoming>,
    /// Readable when a request waits (the main loop polls it).
    pub wake: UnixStream,
    replies: Sender<(u64, Vec<u8>)>,
    /// Wakes the socket's thread for a reply.
    reply_wake: Arc<UnixStream>,
}

impl Server {
    /// Bind `path` (a socket left by a daemon that died is replaced: the run lock says no
    /// other daemon runs) and start serving it.
    pub fn bind(path: &Path) -> std::io::Result<Server> {
        if let Some(dir) = path.parent() {
            libtaskisol::policy::files::private_dir(dir)?;
        }
        // Whatever is in the way and cannot be removed makes the bind fail, with its reason.
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        listener.set_nonblocking(true)?;
        let (wake, notify_main) = peers::waker()?;
        let (socket_wake, reply_wake) = peers::waker()?;
        let (to_main, requests) = std::sync::mpsc::channel();
        let (replies, from_main) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("isold-hooks".into())
            .spawn(move || {
                let clients = Clients {
                    to_main,
                    notify_main,
                };
                peers::serve(listener, LIMITS, clients, Some((from_main, socket_wake)));
            })?;
        Ok(Server {
            path: path.to_path_buf(),
            requests,
            wake,
            replies,
            reply_wake: Arc::new(reply_wake),
        })
    }

    /// The next request waiting, or `None`.
    pub fn next(&self) -> Option<Incoming> {
        let mut drain = [0u8; 64];
        while matches!(std::io::Read::read(&mut &self.wake, &mut drain), Ok(n) if n > 0) {}
        self.requests.try_recv().ok()
    }

    /// Where the reply to request `id` goes: the socket's thread writes it.
    pub fn answerer(&self, id: u64) -> impl FnOnce(&Reply) + 'static {
        let (replies, wake) = (self.replies.clone(), self.reply_wake.clone());
        move |reply| {
            let _ = replies.send((id, line(reply)));
            let _ = (&*wake).write_all(b"r");
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One reply line.
fn line(reply: &Reply) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(reply).expect("reply serializes");
    bytes.push(b'\n');
    bytes
}

/// The socket thread's side: peers checked, request lines parsed and sent on.
struct Clients {
    to_main: Sender<Incoming>,
    notify_main: UnixStream,
}

impl peers::Service<UnixStream> for Clients {
    fn accepted(&mut self, conn: &UnixStream) -> Option<Vec<u8>> {
        match peer_uid(conn) {
            Some(0) => None,
            uid => Some(line(&Reply::said(
                false,
                format!(
                    "refused: only root may talk to isold (peer uid {})",
                    uid.map_or("unknown".into(), |u| u.to_string())
                ),
            ))),
        }
    }
    fn complete(&self, buf: &[u8]) -> Option<usize> {
        buf.iter().position(|&b| b == b'\n').map(|i| i + 1)
    }
    fn request(&mut self, id: u64, req: &[u8]) -> Option<Vec<u8>> {
        let msg = Message::parse(req).map_err(|e| e.to_string());
        if self.to_main.send((id, msg)).is_err() {
            return Some(line(&Reply::said(false, "isold run is stopping")));
        }
        let _ = (&self.notify_main).write_all(b"r");
        None
    }
    fn too_big(&self) -> Vec<u8> {
        line(&Reply::said(
            false,
            format!("request over {MAX_INPUT} bytes"),
        ))
    }
}

fn peer_uid(s: &UnixStream) -> Option<u32> {
    nix::sys::socket::getsockopt(s, nix::sys::socket::sockopt::PeerCredentials)
        .ok()
        .map(|c| c.uid())
}

/// The socket as a service of the daemon: `None` when it could not be bound (said once:
/// containers then start as `isold hook --if-down` says).
#[derive(Debug, Default)]
pub(super) struct HookSocket {
    server: Option<Server>,
}

impl HookSocket {
    /// Listen for `isold hook`. Opened before the first apply: a hook that connects
    /// meanwhile waits for its answer.
    pub fn open(cx: &mut Cx<'_>) -> HookSocket {
        let path = crate::claims::socket_path(&cx.env.files.runtime);
        match Server::bind(&path) {
            Ok(s) => HookSocket { server: Some(s) },
            Err(e) => {
                cx.env.log.warn(&format!(
                    "cannot listen on {}: {e}: containers cannot claim CPUs",
                    path.display()
                ));
                HookSocket::default()
            }
        }
    }
}

impl Service for HookSocket {
    fn name(&self) -> &'static str {
        "hook socket"
    }

    fn wake(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.server.as_ref().map(|s| s.wake.as_fd())
    }

    /// The requests waiting, for the daemon; one that could not be read is answered here.
    fn on_wake(&mut self, cx: &mut Cx<'_>) -> Vec<Request> {
        let Some(server) = self.server.as_ref() else {
            return Vec::new();
        };
        let mut asked = Vec::new();
        while let Some((id, msg)) = server.next() {
            let answer = server.answerer(id);
            let ask = match msg {
                Err(e) => {
                    cx.env.log.warn(&format!("socket: {e}"));
                    answer(&Reply::said(false, e));
                    continue;
                }
                Ok(Message::List {}) => Ask::List,
                Ok(Message::Release { container }) => Ask::Release(container),
                // What the hook asks is the hook's: `source` is NRI's word only.
                Ok(Message::Claim(req)) => Ask::Claim(libtaskisol::claims::ClaimRequest {
                    source: None,
                    ..req
                }),
            };
            asked.push(Request::new(ask, answer));
        }
        asked
    }
}
