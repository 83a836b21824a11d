//! The socket `isold hook` talks to (`/run/isold/isold.sock`): a source of claims. Each
//! request is parsed here and carried out by the daemon ([`super::isolator::Daemon`]).

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use libtaskisol::claims::wire::{Message, Reply};

use crate::claims::{answer, read_line};

/// The daemon's listening socket: mode 0600 in isold's 0700 runtime directory, and a peer
/// that is not root is refused anyway.
#[derive(Debug)]
pub struct Server {
    listener: UnixListener,
    path: PathBuf,
}

impl Server {
    /// Bind `path` (a socket left by a daemon that died is replaced: the run lock says no
    /// other daemon runs).
    pub fn bind(path: &Path) -> std::io::Result<Server> {
        if let Some(dir) = path.parent() {
            libtaskisol::policy::files::private_dir(dir)?;
        }
        // Whatever is in the way and cannot be removed makes the bind fail, with its reason.
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        listener.set_nonblocking(true)?;
        Ok(Server {
            listener,
            path: path.to_path_buf(),
        })
    }

    /// The fd to poll.
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.listener.as_fd()
    }

    /// The next waiting connection with its message, or `None` when there is none. A peer
    /// that is not root, or a message that cannot be read, is answered here.
    pub fn next(&self) -> Option<(UnixStream, Result<Message, String>)> {
        loop {
            // WouldBlock: no more waiting; any other error: tried again at the next poll.
            let Ok((stream, _)) = self.listener.accept() else {
                return None;
            };
            let _ = stream.set_nonblocking(false);
            let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
            match peer_uid(&stream) {
                Some(0) => {}
                uid => {
                    answer(
                        stream,
                        &Reply::said(
                            false,
                            format!(
                                "refused: only root may talk to isold (peer uid {})",
                                uid.map_or("unknown".into(), |u| u.to_string())
                            ),
                        ),
                    );
                    continue;
                }
            }
            let msg =
                read_line(&stream).and_then(|l| Message::parse(&l).map_err(|e| e.to_string()));
            return Some((stream, msg));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn peer_uid(s: &UnixStream) -> Option<u32> {
    nix::sys::socket::getsockopt(s, nix::sys::socket::sockopt::PeerCredentials)
        .ok()
        .map(|c| c.uid())
}
