//! One connection to the runtime's NRI socket: the calls read and answered in order
//! ([`Session`]), and the second thread that answers a StartContainer once the main loop made
//! its claim, or at its deadline.

use super::*;

/// A call whose answer waits for the main loop: its stream, when it was read, the main
/// loop's word, the latest time to answer, and who it is (for the log).
struct Waiting {
    stream: u32,
    read_at: Instant,
    word: Receiver<Answer>,
    deadline: Instant,
    who: String,
}

/// The waiting thread of a connection: each call answered with the main loop's word, or at
/// its deadline without it. Ends with the connection (its sender dropped).
fn answer_when_told(
    writer: Writer,
    waiting: Receiver<Waiting>,
    log: Log,
    link: Arc<Mutex<Link>>,
    notify_main: UnixStream,
) {
    for w in waiting {
        let left = w.deadline.saturating_duration_since(Instant::now());
        let resp = match w.word.recv_timeout(left) {
            Ok(Err(reason)) => refusal(reason),
            Ok(Ok(())) => Response::default(),
            Err(_) => {
                log.warn(&format!(
                    "NRI: {}: the claim is not made yet; its start goes on and the claim is made when the daemon gets to it",
                    w.who
                ));
                Response::default()
            }
        };
        if respond(&writer, w.stream, &resp).is_err() {
            return;
        }
        answered(&link, &notify_main, w.read_at.elapsed());
    }
}

/// One connection to the runtime.
pub(super) struct Session<'a> {
    reader: UnixStream,
    writer: Writer,
    ctx: &'a Ctx,
    waiting: Option<Sender<Waiting>>,
    /// How long a call may wait for the main loop.
    within: Duration,
    /// Synchronize's chunks so far: pods and containers.
    sync: (Vec<api::PodSandbox>, Vec<api::Container>),
    /// Objects of this Synchronize skipped (over [`MAX_SYNC_OBJECTS`] or undecodable).
    sync_skipped: usize,
    /// The last chunk of a Synchronize answered: its containers are judged and told to the
    /// main loop next.
    sync_due: bool,
    /// The runtime's Synchronize answered once: the runtime calls this plugin.
    pub(super) registered: bool,
    /// When the call being answered was read whole.
    read_at: Instant,
}

impl<'a> Session<'a> {
    pub(super) fn new(reader: UnixStream, writer: UnixStream, ctx: &'a Ctx) -> Session<'a> {
        let writer: Writer = Arc::new(Mutex::new(writer));
        let (tx, rx) = std::sync::mpsc::channel();
        let (w, log, link) = (writer.clone(), ctx.log, ctx.link.clone());
        let waiting = ctx.notify_main.try_clone().ok().and_then(|notify| {
            std::thread::Builder::new()
                .name("isold-nri-wait".into())
                .spawn(move || answer_when_told(w, rx, log, link, notify))
                .ok()
                .map(|_| tx)
        });
        Session {
            reader,
            writer,
            ctx,
            waiting,
            within: ANSWER_WITHIN,
            sync: (Vec::new(), Vec::new()),
            sync_skipped: 0,
            sync_due: false,
            registered: false,
            read_at: Instant::now(),
        }
    }

    /// Register, then answer the runtime's calls until the connection ends: why it ended.
    pub(super) fn serve(&mut self) -> String {
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
        if let Err(e) = send(&self.writer, mux::RUNTIME_CONN, &msg.encode()) {
            return format!("registering: {e}");
        }
        let (mut demux, mut calls, mut replies) =
            (Demux::default(), Reader::default(), Reader::default());
        let mut buf = vec![0u8; 64 * 1024];
        let ended = loop {
            let n = match self.reader.read(&mut buf) {
                Ok(0) => break "the runtime closed the connection".to_string(),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => break format!("reading: {e}"),
            };
            demux.push(&buf[..n]);
            let mut failed = None;
            loop {
                let frame = match demux.next_frame() {
                    Ok(Some(f)) => f,
                    Ok(None) => break,
                    Err(e) => {
                        failed = Some(e.to_string());
                        break;
                    }
                };
                match frame.0 {
                    mux::PLUGIN_CONN => calls.push(&frame.1),
                    mux::RUNTIME_CONN => replies.push(&frame.1),
                    _ => {}
                }
            }
            if let Some(e) = failed {
                break e;
            }
            if let Err(e) = self.answer_calls(&mut calls) {
                break e;
            }
            if let Err(e) = read_replies(&mut replies) {
                break e;
            }
        };
        // The waiting thread answers what it holds and ends.
        self.waiting = None;
        let _ = self.reader.shutdown(std::net::Shutdown::Both);
        ended
    }

    /// The runtime's calls that are whole, each answered (or handed to the waiting thread).
    fn answer_calls(&mut self, calls: &mut Reader) -> Result<(), String> {
        while let Some(m) = calls.next_message().map_err(|e| e.to_string())? {
            if m.kind != ttrpc::REQUEST {
                continue;
            }
            self.read_at = Instant::now();
            let resp = match Request::decode(&m.data) {
                Ok(req) => self.call(m.stream, &req),
                Err(e) => Some(Response {
                    code: code::INVALID_ARGUMENT,
                    message: e.to_string(),
                    payload: Vec::new(),
                }),
            };
            if let Some(resp) = resp {
                respond(&self.writer, m.stream, &resp).map_err(|e| format!("answering: {e}"))?;
                answered(
                    &self.ctx.link,
                    &self.ctx.notify_main,
                    self.read_at.elapsed(),
                );
            }
            // Answered first, judged after: the runtime's deadline covers the whole
            // exchange, and the main loop told before the answer would compete with it for
            // the housekeeping CPUs (its reconciliation, a new scan).
            if std::mem::take(&mut self.sync_due) {
                self.synchronized();
            }
        }
        Ok(())
    }

    /// One call of the runtime: its answer, or `None` when the waiting thread gives it.
    fn call(&mut self, stream: u32, req: &Request) -> Option<Response> {
        if req.service != api::PLUGIN_SERVICE {
            return Some(Response {
                code: code::INVALID_ARGUMENT,
                message: format!("no service {}", req.service),
                payload: Vec::new(),
            });
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
        Some(match req.method.as_str() {
            "Configure" => {
                if let Ok(c) = api::Configure::decode(&req.payload) {
                    self.ctx.log.info(&format!(
                        "NRI: configured by {} {} (requests within {} ms)",
                        c.runtime_name, c.runtime_version, c.request_timeout
                    ));
                    if c.request_timeout > 0 {
                        let theirs = Duration::from_millis(c.request_timeout as u64 * 3 / 4);
                        self.within = ANSWER_WITHIN.min(theirs);
                    }
                }
                ok(api::configure_response(api::mask(&[
                    Event::CreateContainer,
                    Event::StartContainer,
                    Event::UpdateContainer,
                    Event::PostUpdateContainer,
                    Event::StopContainer,
                    Event::RemoveContainer,
                ])))
            }
            "Synchronize" => match api::Synchronize::decode(&req.payload) {
                Ok(s) => {
                    for e in &s.bad {
                        self.ctx
                            .log
                            .warn(&format!("NRI: Synchronize: skipped: {e}"));
                    }
                    self.sync_skipped += s.bad.len();
                    for p in s.pods {
                        self.keep_synced(|sync| &mut sync.0, p);
                    }
                    for c in s.containers {
                        self.keep_synced(|sync| &mut sync.1, c);
                    }
                    self.sync_due = !s.more;
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
                Ok(pc) => return self.state_change(stream, &pc),
                Err(e) => bad(e),
            },
            "Shutdown" => ok(Vec::new()),
            m => Response {
                code: code::UNIMPLEMENTED,
                message: format!("isold has no {m}"),
                payload: Vec::new(),
            },
        })
    }

    fn keep_synced<T>(
        &mut self,
        list: impl Fn(&mut (Vec<api::PodSandbox>, Vec<api::Container>)) -> &mut Vec<T>,
        item: T,
    ) {
        let l = list(&mut self.sync);
        if l.len() < MAX_SYNC_OBJECTS {
            l.push(item);
        } else {
            self.sync_skipped += 1;
        }
    }

    /// What container `c` of `pod` may claim, judged now: the annotations, the kubelet's
    /// word, the administrator's rule against the claims in force.
    fn judge(&self, pod: &api::PodSandbox, c: &api::Container) -> Judged {
        // Most containers ask for nothing: claim_for reads the kubelet's state only for one
        // that asks.
        let view = self.ctx.view.get();
        claim_for(
            &self.ctx.root,
            pod,
            c,
            || libtaskisol::claims::kubelet::CpuManagerState::read(&self.ctx.root),
            view.as_ref().map(|v| (&v.policy, v.claims.as_slice())),
        )
    }

    /// Whether container `id` holds a claim now, as the main loop last said.
    fn claimed(&self, id: &str) -> bool {
        self.ctx
            .view
            .get()
            .is_some_and(|v| v.claims.iter().any(|c| c.container == id))
    }

    /// The last chunk of Synchronize, answered: isold registered, and every container that
    /// exists to the main loop.
    fn synchronized(&mut self) {
        let (pods, containers) = std::mem::take(&mut self.sync);
        if !self.registered {
            self.registered = true;
            let mut l = self.ctx.link.lock().unwrap_or_else(|e| e.into_inner());
            l.connected = true;
            l.connects += 1;
            l.last_error.clear();
        }
        self.ctx.log.info(&format!(
            "NRI: registered and synchronized: {} pod(s), {} container(s)",
            pods.len(),
            containers.len()
        ));
        if self.sync_skipped > 0 {
            self.ctx.log.warn(&format!(
                "NRI: Synchronize: {} pod(s) or container(s) skipped",
                std::mem::take(&mut self.sync_skipped)
            ));
        }
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
            match self.judge(pod, c) {
                Judged::Claim(r) => asks.push(r),
                Judged::Nothing => {}
                Judged::NotExclusive(why) => self
                    .ctx
                    .log
                    .debug(&format!("NRI: Synchronize: container {}: {why}", c.id)),
                // Made again by the main loop, whose refusal is logged and counted.
                Judged::Refused { claim: Some(r), .. } => asks.push(r),
                Judged::Refused { message, .. } => self
                    .ctx
                    .log
                    .warn(&format!("NRI: container {}: {message}", c.id)),
            }
        }
        let existing = containers.into_iter().map(|c| c.id).collect();
        self.tell(Ask::Do(Asked::Sync { existing, asks }));
    }

    fn said_not_exclusive(&self, c: &api::Container, why: &str) {
        self.ctx.log.info(&format!(
            "NRI: {} asks for isolated CPUs, but {why}: it is left as it is",
            libtaskisol::claims::who(&c.id, (!c.name.is_empty()).then_some(c.name.as_str()))
        ));
    }

    /// A refusal, told to the main loop (which logs and counts it) and answered.
    fn refuse(&mut self, reason: &'static str, message: String) -> Response {
        self.tell(Ask::Refused {
            reason,
            message: message.clone(),
        });
        refusal(message)
    }

    /// CreateContainer (the claim judged: the creation fails when it is refused),
    /// UpdateContainer (an update the claim cannot follow refused), StopContainer (the claim
    /// released).
    fn container_call(&mut self, method: &str, pc: &PodContainer) -> Response {
        let Some(c) = &pc.container else {
            return Response::default();
        };
        match method {
            "CreateContainer" => match self.judge(&pc.pod, c) {
                Judged::Claim(_) | Judged::Nothing => Response::default(),
                Judged::NotExclusive(why) => {
                    self.said_not_exclusive(c, &why);
                    Response::default()
                }
                Judged::Refused {
                    reason, message, ..
                } => self.refuse(reason, message),
            },
            "UpdateContainer" => {
                let Some(new) = pc.update.as_ref().filter(|u| !u.cpus.is_empty()) else {
                    return Response::default();
                };
                let same = match (
                    libtaskisol::CpuSet::parse_list(&new.cpus),
                    libtaskisol::CpuSet::parse_list(&c.cpus),
                ) {
                    (Ok(a), Ok(b)) => a == b,
                    _ => false,
                };
                if same {
                    return Response::default();
                }
                // The kubelet's cpuset-only update carries shares of 0: the container's own
                // stay what they are.
                let moved = api::Container {
                    cpus: new.cpus.clone(),
                    ..c.clone()
                };
                match self.judge(&pc.pod, &moved) {
                    Judged::Claim(_) | Judged::Nothing => Response::default(),
                    Judged::NotExclusive(why) if self.claimed(&c.id) => self.refuse(
                        "update",
                        format!(
                            "update to cpuset {} refused: {} holds isolated CPUs {}, and {why}",
                            new.cpus,
                            libtaskisol::claims::who(
                                &c.id,
                                (!c.name.is_empty()).then_some(c.name.as_str())
                            ),
                            c.cpus
                        ),
                    ),
                    Judged::NotExclusive(_) => Response::default(),
                    Judged::Refused {
                        reason, message, ..
                    } => self.refuse(
                        reason,
                        format!("update to cpuset {} refused: {message}", new.cpus),
                    ),
                }
            }
            "StopContainer" => {
                self.tell(Ask::Do(Asked::Release(c.id.clone())));
                Response::default()
            }
            _ => Response::default(),
        }
    }

    /// StartContainer (the claim made; the answer waits for it in the waiting thread),
    /// PostUpdateContainer (the claim follows the new cpuset), RemoveContainer (released);
    /// other events: nothing.
    fn state_change(&mut self, stream: u32, pc: &PodContainer) -> Option<Response> {
        let Some(c) = &pc.container else {
            return Some(Response::default());
        };
        Some(match pc.event {
            Some(Event::StartContainer) => match self.judge(&pc.pod, c) {
                Judged::Claim(r) => return self.claim_then_answer(stream, r),
                // Said at its creation.
                Judged::Nothing | Judged::NotExclusive(_) => Response::default(),
                Judged::Refused {
                    reason, message, ..
                } => self.refuse(reason, message),
            },
            Some(Event::PostUpdateContainer) => {
                match self.judge(&pc.pod, c) {
                    Judged::Claim(r) => self.tell(Ask::Do(Asked::Follow(r))),
                    Judged::Refused { claim: Some(r), .. } => self.tell(Ask::Do(Asked::Follow(r))),
                    _ if self.claimed(&c.id) => {
                        self.ctx.log.info(&format!(
                            "NRI: container {} now has cpuset {}, which it may not claim: its claim is released",
                            c.id, c.cpus
                        ));
                        self.tell(Ask::Do(Asked::Release(c.id.clone())))
                    }
                    _ => {}
                }
                Response::default()
            }
            Some(Event::RemoveContainer) => {
                self.tell(Ask::Do(Asked::Release(c.id.clone())));
                Response::default()
            }
            _ => Response::default(),
        })
    }

    /// The claim to the main loop; the answer given by the waiting thread with its word.
    fn claim_then_answer(&mut self, stream: u32, r: ClaimRequest) -> Option<Response> {
        let who = libtaskisol::claims::who(&r.container, r.name.as_deref());
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        if self
            .ctx
            .to_main
            .send((Ask::Do(Asked::Claim(r)), Some(tx)))
            .is_err()
        {
            return Some(Response::default());
        }
        let _ = (&self.ctx.notify_main).write_all(b"n");
        let w = Waiting {
            stream,
            read_at: self.read_at,
            word: rx,
            deadline: Instant::now() + self.within,
            who,
        };
        match &self.waiting {
            Some(tx) => match tx.send(w) {
                Ok(()) => None,
                Err(e) => Some(e.0.word.recv_timeout(self.within).map_or_else(
                    |_| Response::default(),
                    |a| a.map_or_else(refusal, |()| Response::default()),
                )),
            },
            None => Some(
                w.word
                    .recv_timeout(self.within)
                    .ok()
                    .and_then(Result::err)
                    .map_or_else(Response::default, refusal),
            ),
        }
    }

    /// Hand `ask` to the main loop; nobody waits for its word.
    fn tell(&mut self, ask: Ask) {
        if self.ctx.to_main.send((ask, None)).is_ok() {
            let _ = (&self.ctx.notify_main).write_all(b"n");
        }
    }
}

/// The runtime's replies to this plugin's calls (its registration).
fn read_replies(replies: &mut Reader) -> Result<(), String> {
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

/// A claim refused: an error status the runtime passes on (it fails the container's
/// creation or start, and the kubelet shows the message).
fn refusal(reason: String) -> Response {
    Response {
        code: code::FAILED_PRECONDITION,
        message: format!("isold: {reason}"),
        payload: Vec::new(),
    }
}
