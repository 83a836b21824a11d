//! The plugin's session against a runtime the test plays over a socket pair, with the main
//! loop's end of the channel in the test's hands.

use std::io::ErrorKind;
use std::os::fd::AsRawFd;

use libtaskisol::nri::api::{Container, ContainerState, PodSandbox};
use libtaskisol::nri::wire::Encoder;

use super::*;

/// The runtime's side of one connection.
struct Runtime {
    stream: UnixStream,
    demux: Demux,
    /// The plugin's answers (conn 1) and calls (conn 2).
    answers: Reader,
    calls: Reader,
    next_stream: u32,
}

impl Runtime {
    /// The next whole message of the plugin on `conn`; `None` when nothing comes within the
    /// stream's read timeout.
    fn read(&mut self, conn: u32) -> Option<ttrpc::Message> {
        loop {
            while let Some((c, p)) = self.demux.next_frame().unwrap() {
                assert!(
                    p.len() <= mux::MAX_SENT_PAYLOAD,
                    "a frame of {} bytes",
                    p.len()
                );
                match c {
                    mux::PLUGIN_CONN => self.answers.push(&p),
                    mux::RUNTIME_CONN => self.calls.push(&p),
                    c => panic!("a frame for connection {c}"),
                }
            }
            let r = match conn {
                mux::PLUGIN_CONN => &mut self.answers,
                _ => &mut self.calls,
            };
            if let Some(m) = r.next_message().unwrap() {
                return Some(m);
            }
            let mut buf = [0u8; 65536];
            match self.stream.read(&mut buf) {
                Ok(0) => panic!("the plugin closed the connection"),
                Ok(n) => self.demux.push(&buf[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return None
                }
                Err(e) => panic!("reading the plugin: {e}"),
            }
        }
    }

    /// The plugin's RegisterPlugin, answered.
    fn register(&mut self) {
        let m = self.read(mux::RUNTIME_CONN).expect("RegisterPlugin");
        let req = Request::decode(&m.data).unwrap();
        assert_eq!(req.method, "RegisterPlugin");
        let reply = ttrpc::Message {
            stream: m.stream,
            kind: ttrpc::RESPONSE,
            flags: 0,
            data: Response::default().encode(),
        };
        self.stream
            .write_all(&mux::frames(mux::RUNTIME_CONN, &reply.encode()))
            .unwrap();
    }

    /// Call `method`: its answer, `None` when none came within the read timeout.
    fn call(&mut self, method: &str, payload: Vec<u8>) -> Option<Response> {
        let m = ttrpc::Message {
            stream: self.next_stream,
            kind: ttrpc::REQUEST,
            flags: 0,
            data: Request {
                service: api::PLUGIN_SERVICE.into(),
                method: method.into(),
                payload,
                timeout_nano: 2_000_000_000,
            }
            .encode(),
        };
        self.next_stream += 2;
        self.stream
            .write_all(&mux::frames(mux::PLUGIN_CONN, &m.encode()))
            .unwrap();
        let r = self.read(mux::PLUGIN_CONN)?;
        assert_eq!((r.stream, r.kind), (m.stream, ttrpc::RESPONSE));
        Some(Response::decode(&r.data).unwrap())
    }
}

/// Fill the send buffer of `s` (without changing the blocking mode it shares with its
/// clones): the next write on it blocks until the other end reads.
fn fill(s: &UnixStream) {
    let chunk = [b'x'; 4096];
    loop {
        match nix::sys::socket::send(
            s.as_raw_fd(),
            &chunk,
            nix::sys::socket::MsgFlags::MSG_DONTWAIT,
        ) {
            Ok(_) => {}
            Err(nix::errno::Errno::EAGAIN) => return,
            Err(e) => panic!("filling the waker: {e}"),
        }
    }
}

/// Synchronize with five pods of 128 KiB of annotations each (a big
/// last-applied-configuration) is answered before the main loop is told anything of it:
/// with the main loop's waker blocked (a main loop busy elsewhere), the answer still comes
/// within the runtime's deadline, and the containers reach the main loop after it. isold is
/// registered from then on.
#[test]
fn synchronize_is_answered_before_the_main_loop_is_told() {
    let (plugin_end, runtime_end) = UnixStream::pair().unwrap();
    // Blocking, unlike the daemon's: the plugin's first wake-up of the main loop stops it.
    let (notify_main, woken) = UnixStream::pair().unwrap();
    woken.set_nonblocking(true).unwrap();
    let (to_main, asks) = std::sync::mpsc::channel();
    let link = Arc::new(Mutex::new(Link::default()));
    let ctx = Ctx {
        link: link.clone(),
        log: Log {
            verbose: 0,
            journal: false,
        },
        root: SysRoot::new("/nonexistent"),
        view: Published::default(),
        to_main,
        notify_main: notify_main.try_clone().unwrap(),
    };
    // Not scoped: with the old order its thread stays blocked, and the test must not wait
    // for it.
    std::thread::spawn(move || {
        let w = plugin_end.try_clone().unwrap();
        Session::new(plugin_end, w, &ctx).serve()
    });
    runtime_end
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut rt = Runtime {
        stream: runtime_end,
        demux: Demux::default(),
        answers: Reader::default(),
        calls: Reader::default(),
        next_stream: 1,
    };
    rt.register();
    let r = rt
        .call("Configure", Vec::new())
        .expect("Configure answered");
    assert_eq!(r.code, code::OK);
    assert!(
        !link.lock().unwrap().connected,
        "registered before Synchronize"
    );
    let mut sync = Encoder::default();
    for i in 0..5 {
        let pod = PodSandbox {
            id: format!("pod{i}"),
            annotations: [(
                "kubectl.kubernetes.io/last-applied-configuration".to_string(),
                "x".repeat(128 << 10),
            )]
            .into(),
            ..Default::default()
        };
        sync.message(1, &pod.encode());
    }
    for i in 0..5 {
        let c = Container {
            id: format!("c{i}"),
            pod_sandbox_id: format!("pod{i}"),
            state: ContainerState::Running,
            pid: 4242,
            cpus: "0-3".into(),
            ..Default::default()
        };
        sync.message(2, &c.encode());
    }
    assert!(sync.0.len() > 5 * (128 << 10));
    // Configure's answer is followed by a wake-up of the main loop: taken before the waker
    // is filled, or it would block the plugin before it reads Synchronize.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut one = [0u8; 1];
    while !matches!((&woken).read(&mut one), Ok(1)) {
        assert!(Instant::now() < deadline, "no wake-up after Configure");
        std::thread::sleep(Duration::from_millis(1));
    }
    fill(&notify_main);
    let answer = rt.call("Synchronize", sync.0);
    let told_first = asks.try_recv().is_ok();
    // The main loop wakes: whatever the plugin waits on goes on.
    let mut drained = [0u8; 65536];
    let mut drain = || while matches!((&woken).read(&mut drained), Ok(n) if n > 0) {};
    drain();
    assert!(
        !told_first,
        "the main loop was told of the Synchronize before its answer"
    );
    let answer = answer.expect("Synchronize answered within the runtime's 2 s");
    assert_eq!((answer.code, answer.payload.len()), (code::OK, 0));
    let deadline = Instant::now() + Duration::from_secs(10);
    let told = loop {
        drain();
        match asks.recv_timeout(Duration::from_millis(20)) {
            Ok((ask, _)) => break ask,
            Err(_) if Instant::now() < deadline => {}
            Err(e) => panic!("the main loop was never told: {e}"),
        }
    };
    match told {
        Ask::Do(Asked::Sync { existing, asks }) => {
            assert_eq!(existing, ["c0", "c1", "c2", "c3", "c4"]);
            assert!(asks.is_empty(), "{asks:?}");
        }
        other => panic!("{other:?}"),
    }
    let l = link.lock().unwrap().clone();
    assert!(l.connected && l.connects == 1, "{l:?}");
}
