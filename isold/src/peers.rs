//! Slow peers, served so that none can hold anything up: the metrics scrapers' HTTP and the
//! OCI hook's socket. One thread per listener waits in poll(2) on the listener and every
//! connection; each connection has a deadline from its accept to its whole request, and one
//! for its answer, and at most `max_conns` are open at once (the others wait in the
//! listener's backlog). An idle or slow-drip client costs a file descriptor until its
//! deadline, never a thread, and never the daemon's main loop.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};

/// How much a listener takes.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once.
    pub max_conns: usize,
    /// From the accept to the whole request.
    pub read: Duration,
    /// From the answer (or the request, while the answer is prepared elsewhere) to its last
    /// byte written.
    pub write: Duration,
    /// The largest request.
    pub max_request: usize,
}

/// A listening socket of either kind.
pub trait Listen: AsFd {
    type Conn: Read + Write + AsFd;
    /// The next waiting connection, non-blocking.
    fn take(&self) -> std::io::Result<Self::Conn>;
}

impl Listen for std::net::TcpListener {
    type Conn = std::net::TcpStream;
    fn take(&self) -> std::io::Result<Self::Conn> {
        let (c, _) = self.accept()?;
        c.set_nonblocking(true)?;
        Ok(c)
    }
}

impl Listen for UnixListener {
    type Conn = UnixStream;
    fn take(&self) -> std::io::Result<Self::Conn> {
        let (c, _) = self.accept()?;
        c.set_nonblocking(true)?;
        Ok(c)
    }
}

/// What a listener does with its connections' bytes.
pub trait Service<C> {
    /// A new connection: `Some(answer)` refuses it at once (a peer that may not talk).
    fn accepted(&mut self, conn: &C) -> Option<Vec<u8>>;
    /// The length of the request at the start of `buf`, once it is whole.
    fn complete(&self, buf: &[u8]) -> Option<usize>;
    /// A whole request of connection `id`: its answer now, or `None` when it comes later
    /// through the replies channel.
    fn request(&mut self, id: u64, req: &[u8]) -> Option<Vec<u8>>;
    /// The answer to a request over the size limit.
    fn too_big(&self) -> Vec<u8>;
}

enum Phase {
    Reading,
    /// The request went elsewhere; its answer comes through the replies channel.
    Waiting,
    Writing(Vec<u8>, usize),
}

struct Conn<C> {
    conn: C,
    buf: Vec<u8>,
    phase: Phase,
    deadline: Instant,
}

/// Answers made elsewhere, by connection, and the socket that is readable when one waits.
pub type Replies = (Receiver<(u64, Vec<u8>)>, UnixStream);

/// Serve `listener` until `replies` is disconnected (or forever without one).
///
/// Long because it is one poll loop whose phases (accept, read, wait, write, expire) share the
/// connection table.
pub fn serve<L: Listen, S: Service<L::Conn>>(
    listener: L,
    limits: Limits,
    mut service: S,
    replies: Option<Replies>,
) {
    let mut conns: HashMap<u64, Conn<L::Conn>> = HashMap::new();
    let mut next_id = 0u64;
    loop {
        let now = Instant::now();
        let (ready, woken) = {
            let mut fds = Vec::with_capacity(conns.len() + 2);
            let ids: Vec<u64> = conns.keys().copied().collect();
            for id in &ids {
                let c = &conns[id];
                let flags = match c.phase {
                    Phase::Reading => PollFlags::POLLIN,
                    Phase::Waiting => PollFlags::empty(),
                    Phase::Writing(..) => PollFlags::POLLOUT,
                };
                fds.push(PollFd::new(c.conn.as_fd(), flags));
            }
            let accepting = conns.len() < limits.max_conns;
            if accepting {
                fds.push(PollFd::new(listener.as_fd(), PollFlags::POLLIN));
            }
            if let Some((_, w)) = &replies {
                fds.push(PollFd::new(w.as_fd(), PollFlags::POLLIN));
            }
            let next = conns.values().map(|c| c.deadline).min();
            let timeout = next.map_or(PollTimeout::NONE, |d| {
                let ms = d.saturating_duration_since(now).as_millis().min(60_000) as i32;
                PollTimeout::try_from(ms + 1).unwrap_or(PollTimeout::NONE)
            });
            if nix::poll::poll(&mut fds, timeout).is_err() {
                continue;
            }
            let hit = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
            let ready: Vec<u64> = ids
                .iter()
                .zip(&fds)
                .filter(|(_, f)| hit(f))
                .map(|(id, _)| *id)
                .collect();
            let mut rest = fds[ids.len()..].iter();
            let listening = accepting && rest.next().is_some_and(hit);
            let woken = replies.is_some() && rest.next().is_some_and(hit);
            ((ready, listening), woken)
        };
        let now = Instant::now();
        if woken {
            let Some((rx, w)) = &replies else {
                unreachable!()
            };
            let mut drain = [0u8; 64];
            while matches!((&*w).read(&mut drain), Ok(n) if n > 0) {}
            loop {
                match rx.try_recv() {
                    Ok((id, answer)) => {
                        if let Some(c) = conns.get_mut(&id) {
                            c.phase = Phase::Writing(answer, 0);
                            c.deadline = now + limits.write;
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return,
                }
            }
        }
        if ready.1 {
            while conns.len() < limits.max_conns {
                let Ok(conn) = listener.take() else { break };
                let (phase, deadline) = match service.accepted(&conn) {
                    Some(answer) => (Phase::Writing(answer, 0), now + limits.write),
                    None => (Phase::Reading, now + limits.read),
                };
                conns.insert(
                    next_id,
                    Conn {
                        conn,
                        buf: Vec::new(),
                        phase,
                        deadline,
                    },
                );
                next_id += 1;
            }
        }
        for id in ready.0 {
            let Some(c) = conns.get_mut(&id) else {
                continue;
            };
            let open = match c.phase {
                Phase::Reading => read_some(c, id, &limits, &mut service, now),
                Phase::Writing(..) => write_some(c),
                // Polled for nothing: only a hang-up or an error wakes it (the client gave
                // up); its answer, when it comes, has nowhere to go.
                Phase::Waiting => false,
            };
            if !open {
                conns.remove(&id);
            }
        }
        conns.retain(|_, c| c.deadline > Instant::now());
    }
}

/// Read what is there; the request handed on once whole. `false`: close it.
fn read_some<C: Read + Write, S: Service<C>>(
    c: &mut Conn<C>,
    id: u64,
    limits: &Limits,
    service: &mut S,
    now: Instant,
) -> bool {
    let mut chunk = [0u8; 4096];
    let eof = loop {
        match c.conn.read(&mut chunk) {
            Ok(0) => break true,
            Ok(n) => {
                c.buf.extend_from_slice(&chunk[..n]);
                if c.buf.len() > limits.max_request {
                    c.phase = Phase::Writing(service.too_big(), 0);
                    c.deadline = now + limits.write;
                    return write_some(c);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break false,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    };
    let len = match service.complete(&c.buf) {
        Some(n) => n,
        None if eof && !c.buf.is_empty() => c.buf.len(),
        None if eof => return false,
        None => return true,
    };
    match service.request(id, &c.buf[..len]) {
        Some(answer) => {
            c.phase = Phase::Writing(answer, 0);
            c.deadline = now + limits.write;
            write_some(c)
        }
        None => {
            c.phase = Phase::Waiting;
            c.deadline = now + limits.write;
            true
        }
    }
}

/// Write what the peer takes; `false` once all is written (close it) or it failed.
fn write_some<C: Write>(c: &mut Conn<C>) -> bool {
    let Phase::Writing(answer, done) = &mut c.phase else {
        return true;
    };
    while *done < answer.len() {
        match c.conn.write(&answer[*done..]) {
            Ok(0) => return false,
            Ok(n) => *done += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    false
}

/// A pair of sockets: a write to the second makes the first readable (a wake-up for a poll).
pub fn waker() -> std::io::Result<(UnixStream, UnixStream)> {
    let (r, w) = UnixStream::pair()?;
    r.set_nonblocking(true)?;
    w.set_nonblocking(true)?;
    Ok((r, w))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Never;

    impl Service<UnixStream> for Never {
        fn accepted(&mut self, _: &UnixStream) -> Option<Vec<u8>> {
            None
        }
        fn complete(&self, buf: &[u8]) -> Option<usize> {
            buf.iter().position(|&b| b == b'\n').map(|i| i + 1)
        }
        fn request(&mut self, _: u64, _: &[u8]) -> Option<Vec<u8>> {
            None
        }
        fn too_big(&self) -> Vec<u8> {
            Vec::new()
        }
    }

    /// The CPU time thread `tid` of this process has used, in clock ticks.
    fn ticks(tid: i32) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
        let f: Vec<&str> = stat[stat.rfind(") ").unwrap() + 2..].split(' ').collect();
        f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
    }

    /// A client that sent its request and hung up while its answer is being made costs
    /// nothing: the loop does not spin on its hang-up.
    #[test]
    fn a_client_gone_while_its_answer_is_made_is_dropped_not_polled_forever() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let (_keep, wake) = waker().unwrap();
        let (_replies, rx) = std::sync::mpsc::channel();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tid_tx.send(unsafe { libc::gettid() }).unwrap();
            serve(listener, LIMITS_TEST, Never, Some((rx, wake)));
        });
        let tid = tid_rx.recv().unwrap();
        let mut c = UnixStream::connect(&path).unwrap();
        c.write_all(b"ask\n").unwrap();
        drop(c);
        std::thread::sleep(Duration::from_millis(200));
        let before = ticks(tid);
        std::thread::sleep(Duration::from_secs(1));
        let used = ticks(tid) - before;
        assert!(used < 20, "the serving thread used {used} ticks in 1 s");
    }

    const LIMITS_TEST: Limits = Limits {
        max_conns: 4,
        read: Duration::from_secs(5),
        write: Duration::from_secs(120),
        max_request: 1024,
    };
}
