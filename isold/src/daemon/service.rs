//! The interface every service of the daemon has: the stall guard, the noise ledger, the NRI
//! plugin, the socket of `isold hook` and the metrics publisher are each a room of their own
//! (one file each) behind [`Service`], and the daemon's loop knows nothing else of them. A
//! service owns its thread, its start, what it does when the policy changes, its stop, its
//! lines in `isold status` and its metrics; its CPU time is told apart by its threads' names
//! (`cpu`). Adding one is its file and the line that starts it (`daemon::run`).
//!
//! Services do not reach into one another: what one has to tell the others is a [`Note`],
//! which the daemon delivers; what one asks of the policy in force (a container's claim) is a
//! [`Request`], which the daemon carries out and answers.

use std::os::fd::BorrowedFd;
use std::sync::Arc;

use libtaskisol::claims::wire::Reply;
use libtaskisol::claims::{Claim, ClaimRequest};
use libtaskisol::policy::Policy;
use libtaskisol::CpuSet;

use super::books::Books;
use super::os::Env;

/// A service of the daemon, seen from its loop. Every method but [`Service::name`] has a
/// default that does nothing: a service says only what it takes part in.
pub(super) trait Service {
    /// Its name in the log, as `isold status` names its threads' CPU time (`cpu`).
    fn name(&self) -> &'static str;

    /// What poll(2) waits on for it, while it has anything to say to the main thread.
    fn wake(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    /// [`Service::wake`] was readable: what it had is taken (counted, logged), and what it
    /// asks of the policy in force is returned.
    fn on_wake(&mut self, _cx: &mut Cx<'_>) -> Vec<Request> {
        Vec::new()
    }

    /// The policy or the claims in force changed (a reload, a claim made or released): it
    /// follows them (started, stopped, told).
    fn policy_changed(&mut self, _cx: &mut Cx<'_>) {}

    /// Another service's note (and, last, each of its own).
    fn hear(&mut self, _note: &Note, _cx: &mut Cx<'_>) {}

    /// At every task sweep: its figures into the status and the metrics.
    fn figures(&mut self, _cx: &mut Cx<'_>) {}

    /// The daemon stops: its thread ended, whatever it lent given back.
    fn stop(&mut self, _cx: &mut Cx<'_>) {}
}

/// What a service may use of the daemon while it is called.
pub(super) struct Cx<'a> {
    pub env: &'a Env,
    /// The policy in force.
    pub policy: &'a Policy,
    /// The containers' claims in force.
    pub claims: &'a [Claim],
    pub books: &'a mut Books,
    pub board: &'a mut Board,
}

/// Where the noise ledger records task switches now: its tracefs instance and the CPUs, which
/// the stall guard reads event counts from (`None` while it does not record).
pub(super) trait Recording: Send + Sync {
    fn recording(&self) -> Option<(String, CpuSet)>;

    /// The CPUs whose last task switch the ledger read went to the idle task, each with
    /// its event count before that read (see `libtaskisol::stalls::Guard::idle_by_ledger`).
    fn idle_at(&self) -> std::collections::BTreeMap<usize, u64> {
        Default::default()
    }
}

/// What a service tells the others.
#[derive(Clone)]
pub(super) enum Note {
    /// The noise ledger started (where it records, as it goes), or is about to remove its
    /// instance (`None`: files of it kept open are closed now).
    Ledger(Option<Arc<dyn Recording>>),
    /// Threads that started or exec'd (pid, tid), from the process events.
    Started(Vec<(i32, i32)>),
}

/// The notes said and not yet delivered, and what they say that lasts (a service that starts
/// later learns it here).
#[derive(Default)]
pub(super) struct Board {
    /// The noise ledger's recording, while it runs.
    pub ledger: Option<Arc<dyn Recording>>,
    /// The service called now (its index), the sender of what it says.
    pub(super) speaker: Option<usize>,
    pub(super) notes: std::collections::VecDeque<(Option<usize>, Note)>,
}

impl Board {
    /// `note` for every service: the others hear it first, its sender last (so that a sender
    /// acts on what the others did with it: the ledger removes its instance once the guard
    /// closed its files).
    pub fn say(&mut self, note: Note) {
        if let Note::Ledger(l) = &note {
            self.ledger = l.clone();
        }
        self.notes.push_back((self.speaker, note));
    }
}

/// What a service asks of the policy in force.
#[derive(Debug)]
pub(super) enum Ask {
    /// The claims in force.
    List,
    /// A container's claim on its CPUs.
    Claim(ClaimRequest),
    /// A container's claim moved to its new cpuset, or released when that cannot be claimed.
    Follow(ClaimRequest),
    /// A container's claim released.
    Release(String),
    /// The runtime's containers: the claims of those gone released, the running ones' made.
    Sync {
        existing: Vec<String>,
        asks: Vec<ClaimRequest>,
    },
}

/// An [`Ask`] with where its answer goes.
pub(super) struct Request {
    pub ask: Ask,
    pub answer: Box<dyn FnOnce(&Reply)>,
}

impl Request {
    pub fn new(ask: Ask, answer: impl FnOnce(&Reply) + 'static) -> Request {
        Request {
            ask,
            answer: Box::new(answer),
        }
    }
}

/// The services of a daemon, in the order they started: the order they are called in.
#[derive(Default)]
pub(super) struct Services {
    list: Vec<Box<dyn Service>>,
    pub board: Board,
}

/// What the daemon lends a service call (all but the services themselves).
pub(super) struct Lent<'a> {
    pub env: &'a Env,
    pub policy: &'a Policy,
    pub claims: &'a [Claim],
    pub books: &'a mut Books,
}

impl Lent<'_> {
    /// What a call of service `speaker` (none: the daemon) gets, with the board.
    fn cx<'b>(&'b mut self, board: &'b mut Board, speaker: Option<usize>) -> Cx<'b> {
        board.speaker = speaker;
        Cx {
            env: self.env,
            policy: self.policy,
            claims: self.claims,
            books: &mut *self.books,
            board,
        }
    }
}

impl Services {
    /// `make` builds and starts a service; it joins the others, and what it said is delivered.
    pub fn add<S: Service + 'static>(
        &mut self,
        mut lent: Lent<'_>,
        make: impl FnOnce(&mut Cx<'_>) -> S,
    ) {
        let s = make(&mut lent.cx(&mut self.board, Some(self.list.len())));
        lent.env
            .log
            .debug(&format!("service started: {}", s.name()));
        self.list.push(Box::new(s));
        self.deliver(&mut lent);
    }

    /// `f` on every service in turn, then what they said delivered.
    pub fn each(&mut self, mut lent: Lent<'_>, mut f: impl FnMut(&mut dyn Service, &mut Cx<'_>)) {
        for (i, s) in self.list.iter_mut().enumerate() {
            f(s.as_mut(), &mut lent.cx(&mut self.board, Some(i)));
        }
        self.deliver(&mut lent);
    }

    /// Service `i`'s wake was readable: what it asks.
    pub fn wake(&mut self, i: usize, mut lent: Lent<'_>) -> Vec<Request> {
        let Some(s) = self.list.get_mut(i) else {
            return Vec::new();
        };
        let asked = s.on_wake(&mut lent.cx(&mut self.board, Some(i)));
        self.deliver(&mut lent);
        asked
    }

    /// A note of the daemon's own (no sender), delivered at once.
    pub fn tell(&mut self, note: Note, mut lent: Lent<'_>) {
        self.board.speaker = None;
        self.board.say(note);
        self.deliver(&mut lent);
    }

    /// The fds to poll, each with its service's index.
    pub fn wakes(&self) -> impl Iterator<Item = (usize, BorrowedFd<'_>)> {
        self.list
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.wake().map(|fd| (i, fd)))
    }

    /// Every note said, to every service: the others first, in their order, then its sender;
    /// what they say on hearing it comes after.
    fn deliver(&mut self, lent: &mut Lent<'_>) {
        while let Some((from, note)) = self.board.notes.pop_front() {
            let order = (0..self.list.len())
                .filter(|&j| Some(j) != from)
                .chain(from.filter(|&f| f < self.list.len()));
            for j in order.collect::<Vec<_>>() {
                self.list[j].hear(&note, &mut lent.cx(&mut self.board, Some(j)));
            }
        }
        self.board.speaker = None;
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::path::Path;
    use std::rc::Rc;

    use libtaskisol::policy::config::Config;
    use libtaskisol::policy::state::StateFiles;
    use libtaskisol::SysRoot;

    use super::*;
    use crate::status::DaemonStatus;

    type Heard = Rc<RefCell<Vec<String>>>;

    /// A service that writes down what it hears, and says `Started` back once when it
    /// hears `answer_to`'s first note.
    struct Ear {
        name: &'static str,
        heard: Heard,
        answers: bool,
    }

    impl Service for Ear {
        fn name(&self) -> &'static str {
            self.name
        }

        fn hear(&mut self, note: &Note, cx: &mut Cx<'_>) {
            let what = match note {
                Note::Ledger(Some(_)) => "ledger".to_string(),
                Note::Ledger(None) => "ledger gone".to_string(),
                Note::Started(ids) => format!("started {ids:?}"),
            };
            self.heard
                .borrow_mut()
                .push(format!("{}: {what}", self.name));
            if self.answers && matches!(note, Note::Ledger(_)) {
                self.answers = false;
                cx.board.say(Note::Started(vec![(1, 1)]));
            }
        }

        fn policy_changed(&mut self, cx: &mut Cx<'_>) {
            if self.name == "b" {
                cx.board.say(Note::Ledger(None));
            }
        }
    }

    struct Nowhere;

    impl Recording for Nowhere {
        fn recording(&self) -> Option<(String, CpuSet)> {
            None
        }
    }

    struct Daemon {
        env: Env,
        policy: Policy,
        books: Books,
        services: Services,
    }

    impl Daemon {
        fn new() -> Daemon {
            let log = super::super::os::Log {
                verbose: 0,
                journal: false,
            };
            let root = SysRoot::new(Path::new("/nonexistent-isold-test"));
            let files = StateFiles::default_for(&root);
            let config = Config::parse("isolated_cpus = \"2\"\n", Path::new("isold.toml")).unwrap();
            Daemon {
                books: Books::new(DaemonStatus::default(), files.runtime.clone(), log),
                env: Env { root, files, log },
                policy: Policy {
                    config,
                    online: "0-3".parse().unwrap(),
                    isolated: "2".parse().unwrap(),
                    housekeeping: "0-1,3".parse().unwrap(),
                    claimed: Default::default(),
                    claimed_power: Default::default(),
                },
                services: Services::default(),
            }
        }

        fn lent(&mut self) -> (&mut Services, Lent<'_>) {
            (
                &mut self.services,
                Lent {
                    env: &self.env,
                    policy: &self.policy,
                    claims: &[],
                    books: &mut self.books,
                },
            )
        }

        fn add_ear(&mut self, name: &'static str, heard: &Heard, answers: bool) {
            let heard = heard.clone();
            let (services, lent) = self.lent();
            services.add(lent, |_| Ear {
                name,
                heard,
                answers,
            });
        }
    }

    /// A note reaches the other services first, in their order, and its sender last; what a
    /// service says on hearing one is delivered after it, to everyone.
    #[test]
    fn a_note_reaches_the_others_then_its_sender() {
        let heard: Heard = Rc::default();
        let mut d = Daemon::new();
        d.add_ear("a", &heard, false);
        d.add_ear("b", &heard, false);
        d.add_ear("c", &heard, true);
        let (services, lent) = d.lent();
        services.each(lent, |s, cx| s.policy_changed(cx));
        assert_eq!(
            *heard.borrow(),
            [
                "a: ledger gone",
                "c: ledger gone",
                "b: ledger gone",
                "a: started [(1, 1)]",
                "b: started [(1, 1)]",
                "c: started [(1, 1)]",
            ]
        );
    }

    /// A service that starts after the ledger learns where it records from the board, and
    /// a note of the daemon's own reaches every service in their order.
    #[test]
    fn a_later_service_finds_the_ledger_on_the_board() {
        let heard: Heard = Rc::default();
        let mut d = Daemon::new();
        let (services, lent) = d.lent();
        services.add(lent, |cx| {
            cx.board.say(Note::Ledger(Some(Arc::new(Nowhere))));
            Ear {
                name: "ledger",
                heard: heard.clone(),
                answers: false,
            }
        });
        assert_eq!(*heard.borrow(), ["ledger: ledger"]);
        let seen = Rc::new(RefCell::new(false));
        let s2 = seen.clone();
        let (services, lent) = d.lent();
        services.add(lent, move |cx| {
            *s2.borrow_mut() = cx.board.ledger.is_some();
            Ear {
                name: "guard",
                heard: Rc::default(),
                answers: false,
            }
        });
        assert!(*seen.borrow(), "the guard did not find the ledger");
        heard.borrow_mut().clear();
        let (services, lent) = d.lent();
        services.tell(Note::Started(vec![(7, 8)]), lent);
        assert_eq!(*heard.borrow(), ["ledger: started [(7, 8)]"]);
        let (services, lent) = d.lent();
        services.add(lent, |cx| {
            cx.board.say(Note::Ledger(None));
            Ear {
                name: "off",
                heard: Rc::default(),
                answers: false,
            }
        });
        assert!(
            d.services.board.ledger.is_none(),
            "a ledger gone stays on the board"
        );
    }

    /// Each service's name is the one `isold status` gives its threads' CPU time.
    #[test]
    fn each_service_is_named_as_its_threads_cpu_time() {
        use super::super::{cpu, hook_socket, noise, nri, publish, stalls};
        let named: [(&dyn Service, &str); 4] = [
            (&stalls::Guard::default(), "isold-stalls"),
            (&noise::Noise::default(), "isold-noise"),
            (&nri::Nri::default(), "isold-nri"),
            (&hook_socket::HookSocket::default(), "isold-hooks"),
        ];
        for (s, thread) in named {
            assert_eq!(s.name(), cpu::service_of(thread));
        }
        let mut d = Daemon::new();
        let (services, lent) = d.lent();
        services.add(lent, publish::Publisher::start);
        assert!(d.books.metrics.is_none(), "no [metrics]: nothing published");
        let p = d.services.list.pop().unwrap();
        assert_eq!(p.name(), cpu::service_of("isold-health"));
        assert_eq!(p.name(), cpu::service_of("isold-http"));
    }
}
