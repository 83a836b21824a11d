//! isol-nri-load: containerd's side of NRI under load, for `scripts/bench-nri` (a benchmark,
//! not a test). It listens at SOCKET, accepts the plugin (`isold run` with `[containers] nri`),
//! answers its registration, configures it (2 s per request, as containerd 2.1.9), then:
//!
//! 1. Synchronize with PODS pods of ANNOTATION bytes of annotations each (one container each),
//!    split into chunks of at most 4 MiB as NRI splits it (`more = true` but the last);
//! 2. the plugin's peak memory (VmHWM of its process, told by SO_PEERCRED);
//! 3. BURST pods started at once: every CreateContainer, then every StartContainer, written
//!    before any answer is read, for containers that ask for nothing; among them one that
//!    claims CPU 3 (whose start waits for the daemon to apply the claim); each answer timed
//!    from the moment its call was written.
//!
//! ```text
//! isol-nri-load SOCKET [PODS [ANNOTATION [BURST]]]     defaults: 1000 131072 100
//! ```
//!
//! Prints `key=value` lines: sync_s, hwm_kib, rss_kib, plain_median_ms, plain_worst_ms,
//! claim_ms, refused, failed.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use libtaskisol::nri::api::{self, Container, ContainerState, PodSandbox};
use libtaskisol::nri::mux::{self, Demux};
use libtaskisol::nri::ttrpc::{self, code, Reader, Request, Response};
use libtaskisol::nri::wire::Encoder;

struct Runtime {
    stream: UnixStream,
    demux: Demux,
    replies: Reader,
    calls: Reader,
    next: u32,
}

impl Runtime {
    fn fill(&mut self) {
        let mut buf = vec![0u8; 1 << 16];
        let n = self.stream.read(&mut buf).expect("reading the plugin");
        assert!(n > 0, "the plugin closed the connection");
        self.demux.push(&buf[..n]);
        while let Some((conn, p)) = self.demux.next_frame().expect("a frame") {
            match conn {
                mux::PLUGIN_CONN => self.replies.push(&p),
                _ => self.calls.push(&p),
            }
        }
    }

    /// Write a call; its stream.
    fn send(&mut self, method: &str, payload: Vec<u8>) -> u32 {
        let stream = self.next;
        self.next += 2;
        let req = Request {
            service: api::PLUGIN_SERVICE.into(),
            method: method.into(),
            payload,
            timeout_nano: 2_000_000_000,
        };
        let m = ttrpc::Message {
            stream,
            kind: ttrpc::REQUEST,
            flags: 0,
            data: req.encode(),
        };
        self.stream
            .write_all(&mux::frames(mux::PLUGIN_CONN, &m.encode()))
            .expect("writing a call");
        stream
    }

    /// The next reply: its stream and response.
    fn reply(&mut self) -> (u32, Response) {
        loop {
            if let Some(m) = self.replies.next_message().expect("a reply") {
                return (m.stream, Response::decode(&m.data).expect("a response"));
            }
            self.fill();
        }
    }

    fn call(&mut self, method: &str, payload: Vec<u8>) -> Response {
        let s = self.send(method, payload);
        let (got, r) = self.reply();
        assert_eq!(got, s, "the reply of another call");
        r
    }
}

fn arg(i: usize, default: usize) -> usize {
    std::env::args()
        .nth(i)
        .map(|a| a.parse().expect("a number"))
        .unwrap_or(default)
}

fn status_kib(pid: i32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let socket = std::env::args()
        .nth(1)
        .expect("usage: isol-nri-load SOCKET [PODS [ANNOTATION [BURST]]]");
    let (pods, ann_bytes, burst) = (arg(2, 1000), arg(3, 128 << 10), arg(4, 100));
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket).expect("binding the socket");
    let (stream, _) = listener.accept().expect("the plugin's connection");
    let pid = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
        .expect("SO_PEERCRED")
        .pid();
    let mut rt = Runtime {
        stream,
        demux: Demux::default(),
        replies: Reader::default(),
        calls: Reader::default(),
        next: 1,
    };
    // The registration.
    let reg = loop {
        if let Some(m) = rt.calls.next_message().expect("a call") {
            break m;
        }
        rt.fill();
    };
    let ok = ttrpc::Message {
        stream: reg.stream,
        kind: ttrpc::RESPONSE,
        flags: 0,
        data: Vec::new(),
    };
    rt.stream
        .write_all(&mux::frames(mux::RUNTIME_CONN, &ok.encode()))
        .unwrap();
    let mut conf = Encoder::default();
    conf.string(2, "containerd")
        .string(3, "2.1.9+load")
        .varint(4, 5000)
        .varint(5, 2000);
    assert_eq!(rt.call("Configure", conf.0).code, code::OK);

    // 1. Synchronize, in chunks of at most 4 MiB.
    let big = "x".repeat(ann_bytes);
    let pod = |i: usize| PodSandbox {
        id: format!("pod{i:05}"),
        name: format!("p{i}"),
        uid: format!("uid-{i}"),
        namespace: "default".into(),
        annotations: BTreeMap::from([(
            "kubectl.kubernetes.io/last-applied-configuration".to_string(),
            big.clone(),
        )]),
        cgroup_parent: format!("/kubepods/besteffort/poduid-{i}"),
        pid: 1,
    };
    let container = |i: usize, name: &str, cpus: &str, pid: u32| Container {
        id: format!("{name}{i:05}"),
        pod_sandbox_id: format!("pod{i:05}"),
        name: "work".into(),
        state: if pid > 0 {
            ContainerState::Running
        } else {
            ContainerState::Created
        },
        annotations: BTreeMap::from([(
            "kubectl.kubernetes.io/last-applied-configuration".to_string(),
            big.clone(),
        )]),
        cpus: cpus.into(),
        shares: Some(2),
        cgroups_path: format!("/kubepods/besteffort/poduid-{i}/{name}{i:05}"),
        pid,
    };
    let t0 = Instant::now();
    let limit = ttrpc::MAX_DATA - 64 * 1024;
    let mut chunk = Encoder::default();
    for i in 0..pods {
        let mut one = Encoder::default();
        one.message(1, &pod(i).encode())
            .message(2, &container(i, "c", "0-3", 1).encode());
        if !chunk.0.is_empty() && chunk.0.len() + one.0.len() > limit {
            chunk.varint(3, 1);
            let r = rt.call("Synchronize", std::mem::take(&mut chunk.0));
            assert_eq!(r.code, code::OK, "{r:?}");
        }
        chunk.0.extend(one.0);
    }
    let r = rt.call("Synchronize", chunk.0);
    assert_eq!(r.code, code::OK, "{r:?}");
    let sync_s = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(500));
    println!("pods={pods}\nannotation_bytes={ann_bytes}\nsync_s={sync_s:.2}");
    println!(
        "hwm_kib={}\nrss_kib={}",
        status_kib(pid, "VmHWM:"),
        status_kib(pid, "VmRSS:")
    );

    // 2. BURST pods at once: every creation, then every start, before any answer is read.
    let annotated = PodSandbox {
        annotations: BTreeMap::from([("isold.io/isolate".to_string(), "true".to_string())]),
        cgroup_parent: String::new(),
        ..pod(99_999)
    };
    let claimer = Container {
        cgroups_path: String::new(),
        shares: Some(1024),
        // The process the benchmark's fake root has for it.
        ..container(99_999, "claim", "3", 4242)
    };
    let mut sent: HashMap<u32, (Instant, bool)> = HashMap::new();
    let small_pod = |i: usize| PodSandbox {
        annotations: BTreeMap::new(),
        ..pod(100_000 + i)
    };
    for i in 0..burst {
        let mut e = Encoder::default();
        e.message(1, &small_pod(i).encode())
            .message(2, &container(100_000 + i, "b", "0-3", 0).encode());
        let s = rt.send("CreateContainer", e.0);
        sent.insert(s, (Instant::now(), false));
    }
    for i in 0..burst {
        if i == burst / 2 {
            let mut e = Encoder::default();
            e.varint(1, 6)
                .message(2, &annotated.encode())
                .message(3, &claimer.encode());
            let s = rt.send("StateChange", e.0);
            sent.insert(s, (Instant::now(), true));
        }
        let mut e = Encoder::default();
        e.varint(1, 6)
            .message(2, &small_pod(i).encode())
            .message(3, &container(100_000 + i, "b", "0-3", 1).encode());
        let s = rt.send("StateChange", e.0);
        sent.insert(s, (Instant::now(), false));
    }
    let (mut plain, mut claim_ms, mut refused) = (Vec::new(), f64::NAN, 0);
    while !sent.is_empty() {
        let (s, r) = rt.reply();
        let (at, is_claim) = sent.remove(&s).expect("a reply to a call made");
        let ms = at.elapsed().as_secs_f64() * 1e3;
        if r.code != code::OK {
            refused += 1;
            eprintln!("refused: {}", r.message);
        }
        if is_claim {
            claim_ms = ms;
        } else {
            plain.push(ms);
        }
    }
    plain.sort_by(f64::total_cmp);
    println!(
        "burst={burst}\nplain_median_ms={:.2}\nplain_worst_ms={:.2}\nclaim_ms={claim_ms:.2}\nrefused={refused}",
        plain[plain.len() / 2],
        plain[plain.len() - 1]
    );
    println!(
        "hwm_kib_after={}\nrss_kib_after={}",
        status_kib(pid, "VmHWM:"),
        status_kib(pid, "VmRSS:")
    );
}
