//! Clients that connect and send nothing, or a byte now and then: what a local user can do to
//! any listener, and what must not stall a daemon.
//!
//! Usage:
//!   isol-idle tcp HOST:PORT N SECS     N idle connections to a TCP listener
//!   isol-idle unix PATH N SECS         N idle connections to a unix socket
//!   isol-idle drip-tcp HOST:PORT SECS  one connection that sends a byte every 200 ms
//!   isol-idle drip-unix PATH SECS      the same on a unix socket
//!
//! Prints `connected=N` once they are open, then holds them SECS seconds and prints
//! `closed=K`: how many the listener closed meanwhile (its deadlines).

use std::io::{Read, Write};
use std::time::{Duration, Instant};

enum Conn {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

impl Conn {
    fn open(kind: &str, addr: &str) -> std::io::Result<Conn> {
        Ok(match kind {
            "tcp" => Conn::Tcp(std::net::TcpStream::connect(addr)?),
            _ => Conn::Unix(std::os::unix::net::UnixStream::connect(addr)?),
        })
    }
    fn set_nonblocking(&self) -> std::io::Result<()> {
        match self {
            Conn::Tcp(c) => c.set_nonblocking(true),
            Conn::Unix(c) => c.set_nonblocking(true),
        }
    }
    /// Whether the peer closed it (a read of 0 bytes, or a reset).
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 256];
        let r = match self {
            Conn::Tcp(c) => c.read(&mut b),
            Conn::Unix(c) => c.read(&mut b),
        };
        match r {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
        }
    }
    fn send(&mut self, b: &[u8]) -> bool {
        match self {
            Conn::Tcp(c) => c.write_all(b).is_ok(),
            Conn::Unix(c) => c.write_all(b).is_ok(),
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || -> ! {
        eprintln!("usage: isol-idle tcp|unix ADDR N SECS | drip-tcp|drip-unix ADDR SECS");
        std::process::exit(2)
    };
    let (kind, addr) = match (args.first(), args.get(1)) {
        (Some(k), Some(a)) => (k.as_str(), a.as_str()),
        _ => usage(),
    };
    let drip = kind.starts_with("drip-");
    let kind = kind.trim_start_matches("drip-");
    let (n, secs): (usize, u64) = if drip {
        (
            1,
            args.get(2)
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| usage()),
        )
    } else {
        match (
            args.get(2).and_then(|s| s.parse().ok()),
            args.get(3).and_then(|s| s.parse().ok()),
        ) {
            (Some(n), Some(s)) => (n, s),
            _ => usage(),
        }
    };
    let mut conns: Vec<Conn> = (0..n)
        .map(|_| {
            Conn::open(kind, addr).unwrap_or_else(|e| {
                eprintln!("isol-idle: cannot connect to {addr}: {e}");
                std::process::exit(1)
            })
        })
        .collect();
    for c in &conns {
        let _ = c.set_nonblocking();
    }
    println!("connected={n}");
    let _ = std::io::stdout().flush();
    let until = Instant::now() + Duration::from_secs(secs);
    let mut closed = vec![false; n];
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(200));
        for (i, c) in conns.iter_mut().enumerate() {
            if closed[i] {
                continue;
            }
            if drip && !c.send(b"G") {
                closed[i] = true;
                continue;
            }
            closed[i] = c.closed();
        }
    }
    println!("closed={}", closed.iter().filter(|c| **c).count());
}
