//! The socket `isold hook` talks to (`/run/isold/isold.sock`): a source of claims.
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
use std::time::Duration;

use libtaskisol::claims::wire::{Message, Reply};
use libtaskisol::claims::MAX_INPUT;

use crate::peers::{self, Limits, Service};

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
    reply_wake: UnixStream,
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
            reply_wake,
        })
    }

    /// The fd to poll.
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.wake.as_fd()
    }

    /// The next request waiting, or `None`.
    pub fn next(&self) -> Option<Incoming> {
        let mut drain = [0u8; 64];
        while matches!(std::io::Read::read(&mut &self.wake, &mut drain), Ok(n) if n > 0) {}
        self.requests.try_recv().ok()
    }

    /// The reply to request `id`, written by the socket's thread.
    pub fn answer(&self, id: u64, reply: &Reply) {
        let _ = self.replies.send((id, line(reply)));
        let _ = (&self.reply_wake).write_all(b"r");
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

impl Service<UnixStream> for Clients {
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
