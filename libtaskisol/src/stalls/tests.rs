use super::loan::DEADLINE_GRACE;
use super::*;
use crate::policy::state::{Entry, Original, State};

fn seen(tid: i32, policy: u32, prio: u32) -> Seen {
    Seen {
        pid: tid,
        tid,
        starttime: 7,
        comm: format!("t{tid}"),
        flags: 0,
        state: 'R',
        cpu: 3,
        policy,
        rt_priority: prio,
        exec_ns: 0,
        runs: 0,
        cpu_ticks: 0,
    }
}

fn ids(v: Vec<(i32, Option<Seen>)>) -> Vec<(i32, Option<i32>)> {
    let mut v: Vec<_> = v.into_iter().map(|(t, b)| (t, b.map(|b| b.tid))).collect();
    v.sort();
    v
}

/// Behind a thread that ran, a thread that did not for the threshold starves; alone on
/// its CPU it starves once it cannot be the one running (2 s); a thread on loan is no
/// runner.
#[test]
fn who_starves_behind_whom() {
    let now = Instant::now();
    let t = Duration::from_millis(1500);
    let ago = |ms| now - Duration::from_millis(ms);
    let (lp, kw, other) = (seen(1, 1, 1), seen(2, 0, 0), seen(3, 0, 0));
    // The loop ran just now, the kworker waited 1.6 s: it starves behind the loop.
    let v = starving([(&lp, now), (&kw, ago(1600))].into_iter(), now, t);
    assert_eq!(ids(v), vec![(2, Some(1))]);
    // Under the threshold: nobody.
    assert!(starving([(&lp, now), (&kw, ago(1400))].into_iter(), now, t).is_empty());
    // Nothing seen to run: the highest of the stuck holds the CPU, the rest starve.
    let v = starving([(&lp, ago(1600)), (&kw, ago(1600))].into_iter(), now, t);
    assert_eq!(ids(v), vec![(2, Some(1))]);
    // Alone and stuck under 2 s: it may be the one running; at 2 s it is not.
    assert!(starving([(&kw, ago(1600))].into_iter(), now, t).is_empty());
    assert_eq!(
        ids(starving([(&kw, ago(2000))].into_iter(), now, t)),
        vec![(2, None)]
    );
    // A lent thread that runs is no runner: what holds the CPU is the loop.
    let lent = seen(4, SCHED_DEADLINE, 0);
    let v = starving(
        [(&lp, ago(1600)), (&lent, now), (&other, ago(1600))].into_iter(),
        now,
        t,
    );
    assert_eq!(ids(v), vec![(3, Some(1))]);
    // Other CPUs are judged apart.
    let mut far = seen(5, 0, 0);
    far.cpu = 2;
    assert!(starving([(&lp, now), (&far, ago(1600))].into_iter(), now, t).is_empty());
}

/// A tree with CPUs 0-3, a FIFO loop and a kworker on CPU 3.
struct Tree {
    dir: tempfile::TempDir,
    root: SysRoot,
    /// The loop's CPU time so far (its schedstat), ns.
    loop_ns: std::cell::Cell<u64>,
}

impl Tree {
    fn new() -> Tree {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::new(dir.path());
        let t = Tree {
            dir,
            root,
            loop_ns: std::cell::Cell::new(100),
        };
        t.put("proc/sys/kernel/random/boot_id", "b00t\n");
        t.idle([100, 100, 100, 100]);
        t.thread(10, "sh", 0x400100, 'R', 1, 1, 3, "3");
        t.thread(20, "kworker/3:1", 0x4208060, 'S', 0, 0, 3, "3");
        t.thread(30, "bash", 0x400100, 'S', 0, 0, 0, "0-1");
        t
    }

    fn put(&self, rel: &str, text: &str) {
        let p = self.dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn idle(&self, idle: [u64; 4]) {
        let mut text = "cpu  1 2 3 400 0 0 0 0 0 0\n".to_string();
        for (i, v) in idle.iter().enumerate() {
            text.push_str(&format!("cpu{i} 1 2 3 {v} 0 0 0 0 0 0\n"));
        }
        self.put("proc/stat", &text);
    }

    #[allow(clippy::too_many_arguments)]
    fn thread(
        &self,
        tid: i32,
        comm: &str,
        flags: u64,
        state: char,
        policy: u32,
        prio: u32,
        cpu: u32,
        aff: &str,
    ) {
        let mut f: Vec<String> = (3..=52).map(|_| "0".to_string()).collect();
        f[0] = state.to_string();
        f[6] = flags.to_string();
        f[19] = "7".into();
        f[36] = cpu.to_string();
        f[37] = prio.to_string();
        f[38] = policy.to_string();
        self.put(
            &format!("proc/{tid}/task/{tid}/stat"),
            &format!("{tid} ({comm}) {}\n", f.join(" ")),
        );
        self.put(
            &format!("proc/{tid}/task/{tid}/status"),
            &format!("Name:\t{comm}\nCpus_allowed_list:\t{aff}\n"),
        );
        self.put(&format!("proc/{tid}/task/{tid}/schedstat"), "100 0 5\n");
        self.put(
            &format!("proc/{tid}/stat"),
            &format!("{tid} ({comm}) {}\n", f.join(" ")),
        );
    }

    /// The loop on CPU 3 ran since the last look (its CPU time moved on).
    fn loop_ran(&self) {
        self.loop_ns.set(self.loop_ns.get() + 1000);
        self.put(
            "proc/10/task/10/schedstat",
            &format!("{} 0 5\n", self.loop_ns.get()),
        );
    }

    /// A quarter second on, the loop having run: the guard's pass then.
    fn step(&self, g: &mut Guard, at: &mut Instant) -> Vec<Event> {
        *at += Duration::from_millis(250);
        self.loop_ran();
        g.pass(&self.root, *at)
    }

    fn state_of(&self, tid: i32) -> (char, u32) {
        let s = crate::cpuwatch::read_seen(&self.root, tid, tid)
            .unwrap()
            .unwrap();
        (s.state, s.policy)
    }

    fn files(&self) -> StateFiles {
        StateFiles::new(
            self.dir.path().join("run/isold/state.json"),
            self.dir.path().join("var/lib/isold/state.json"),
        )
    }
}

/// A guard of CPUs 2-3 of the tree, recording in its state files.
fn guard(t: &Tree, settings: StallsConfig) -> Guard {
    Guard::new(Watch {
        cpus: "2-3".parse().unwrap(),
        settings,
        files: t.files(),
        isolated: "2-3".into(),
        config: "isold.toml".into(),
    })
}

/// The noise ledger's instance in the trees.
const INSTANCE: &str = "/sys/kernel/tracing/instances/isold";

impl Tree {
    /// The instance's `tracing_on`.
    fn tracing_on(&self, on: &str) {
        self.put(&format!("{}/tracing_on", &INSTANCE[1..]), on);
        self.put(
            &format!("{}/events/sched/sched_switch/enable", &INSTANCE[1..]),
            "1\n",
        );
    }

    /// CPU `cpu`'s `stats` in the instance, as 6.1 prints it: `read` events read, no other.
    fn events(&self, cpu: usize, read: u64) {
        self.put(
            &format!("{}/per_cpu/cpu{cpu}/stats", &INSTANCE[1..]),
            &format!("entries: 0\noverrun: 0\ncommit overrun: 0\nbytes: 0\noldest event ts:  0.000000\nnow ts:  9.000000\ndropped events: 0\nread events: {read}\n"),
        );
    }
}

/// A guard of CPUs 2-3 of the tree that reads the instance's counts of `cpus`.
fn counting_guard(t: &Tree, cpus: &str) -> Guard {
    let mut g = guard(t, StallsConfig::default());
    g.set_event_counts(crate::cpuwatch::EventCounts::open(
        &t.root,
        INSTANCE,
        &cpus.parse().unwrap(),
    ));
    g
}

/// A tree whose instance records CPUs 2-3 (10 and 20 events written so far), and a guard of
/// both that reads its counts.
fn recording() -> (Tree, Guard) {
    let t = Tree::new();
    t.tracing_on("1\n");
    t.events(2, 10);
    t.events(3, 20);
    let g = counting_guard(&t, "2-3");
    (t, g)
}

/// A guard of the tree that made its first pass, then CPU 3 busy and its kworker woken
/// there.
fn kworker_waits() -> (Tree, Guard, Instant) {
    let t = Tree::new();
    let mut g = guard(&t, StallsConfig::default());
    let t0 = Instant::now();
    g.pass(&t.root, t0);
    t.idle([200, 200, 200, 100]);
    t.thread(20, "kworker/3:1", 0x4208060, 'R', 0, 0, 3, "3");
    (t, g, t0)
}

fn loans(files: &StateFiles) -> usize {
    State::load(&files.runtime).unwrap().map_or(0, |s| {
        s.entries()
            .iter()
            .filter(|e| e.id.starts_with("loan:"))
            .count()
    })
}

/// With the task switches the noise ledger records on CPUs 2-3: once both were idle at a
/// `/proc/stat` read with no event written in between, passes read no `/proc/stat` (it is
/// gone and no pass fails) until a threshold after that read, when it is read once more; an
/// event on CPU 3 (a task switched in) brings the reads back at once, and the kworker that
/// starves there is lent a slice a threshold later, as without the counts.
#[test]
fn idle_cpus_with_no_task_switch_need_no_proc_stat() {
    let (t, mut g) = recording();
    assert_eq!(g.event_counts_dir(), Some(INSTANCE));
    let t0 = Instant::now();
    let ms = |n: u64| Duration::from_millis(n);
    g.pass(&t.root, t0);
    // Idle both, and no event: known idle from this read on.
    t.idle([200, 200, 200, 200]);
    assert!(g.pass(&t.root, t0 + ms(250)).is_empty());
    assert_eq!(g.work.quiet_passes, 0);
    let stat = t.dir.path().join("proc/stat");
    std::fs::remove_file(&stat).unwrap();
    for k in 2..=40 {
        let ev = g.pass(&t.root, t0 + ms(250 * k));
        assert!(ev.is_empty(), "pass {k}: {ev:?}");
    }
    assert_eq!(g.work.quiet_passes, 39);
    // Five thresholds after the last read: read again (and its failure said).
    let ev = g.pass(&t.root, t0 + ms(10_250));
    assert!(matches!(&ev[..], [Event::Failed(_)]), "{ev:?}");
    assert_eq!(g.work.quiet_passes, 39);
    assert!(!g.asleep(), "nothing known idle without the read");
    // Idle all along since the last read 10.25 s ago: 1,100 ticks more.
    t.idle([1300, 1300, 1300, 1300]);
    g.pass(&t.root, t0 + ms(10_500));
    g.pass(&t.root, t0 + ms(10_750));
    assert_eq!(g.work.quiet_passes, 40);
    // The instance stops recording task switches: every pass reads /proc/stat again.
    let enable = t
        .dir
        .path()
        .join(&INSTANCE[1..])
        .join("events/sched/sched_switch/enable");
    std::fs::write(&enable, "0\n").unwrap();
    t.idle([1325, 1325, 1325, 1325]);
    g.pass(&t.root, t0 + ms(11_000));
    assert_eq!(g.work.quiet_passes, 40);
    assert!(!g.asleep());
    std::fs::write(&enable, "1\n").unwrap();
    for (k, idle) in [(11_250, 1350), (11_500, 1375), (11_750, 1375)] {
        t.idle([idle; 4]);
        g.pass(&t.root, t0 + ms(k));
    }
    assert_eq!(g.work.quiet_passes, 41);
    // A task switched in on CPU 3, which is busy from now on, its kworker woken.
    t.events(3, 21);
    t.idle([1400, 1400, 1400, 1375]);
    t.thread(20, "kworker/3:1", 0x4208060, 'R', 0, 0, 3, "3");
    let switched = t0 + ms(11_750);
    let mut at = switched;
    let mut rescued = None;
    let mut steps = 0;
    for _ in 0..12 {
        steps += 1;
        for e in t.step(&mut g, &mut at) {
            if let Event::Rescued(r) = e {
                rescued = Some((at - switched, r.thread.tid));
            }
        }
        if rescued.is_some() {
            break;
        }
    }
    let (after, tid) = rescued.expect("the kworker was lent a slice");
    assert_eq!(tid, 20);
    assert!(after >= ms(2000) && after < ms(2600), "{after:?}");
    // The first pass sees CPU 3's count move, the second finds it busy with its count
    // standing since: from the third on, the loop runs there still and no pass reads
    // /proc/stat, as long as no task switches in.
    assert_eq!(g.work.quiet_passes, 41 + steps - 2, "{steps} steps");
}

/// A CPU found busy whose count stood between two reads ran one task all along: busy still
/// while the count stands, without `/proc/stat`, and its threads are looked at as before;
/// a task switched in there, or at another watched CPU, brings the read back.
#[test]
fn a_cpu_that_runs_one_task_is_known_busy_until_a_switch() {
    let (t, mut g) = recording();
    let t0 = Instant::now();
    let ms = |n: u64| Duration::from_millis(n);
    g.pass(&t.root, t0);
    // CPU 2 idle, CPU 3 runs the loop: both ran one task since the first read.
    t.idle([200, 200, 200, 100]);
    g.pass(&t.root, t0 + ms(250));
    assert_eq!((g.work.quiet_passes, g.work.busy_passes), (0, 1));
    let stat = t.dir.path().join("proc/stat");
    let text = std::fs::read(&stat).unwrap();
    std::fs::remove_file(&stat).unwrap();
    for k in 2..=5 {
        let ev = g.pass(&t.root, t0 + ms(250 * k));
        assert!(ev.is_empty(), "pass {k}: {ev:?}");
    }
    assert_eq!((g.work.quiet_passes, g.work.busy_passes), (4, 5));
    assert!(!g.asleep(), "a busy CPU: no sleep");
    // Known busy, nothing followed, lent or asked about: the next look when the residents
    // are read again, half a threshold on.
    assert_eq!(g.next_pass(t0 + ms(1250)), t0 + ms(2250));
    // A thread switched in on CPU 2: the read again (its failure said).
    t.events(2, 11);
    let ev = g.pass(&t.root, t0 + ms(1500));
    assert!(matches!(&ev[..], [Event::Failed(_)]), "{ev:?}");
    assert_eq!(g.work.quiet_passes, 4);
    std::fs::write(&stat, text).unwrap();
}

/// A count that stands while the CPU's idle time hardly grows (the recording stopped in a
/// way its files do not show, and a loop took the CPU) does not make the CPU idle again at
/// the bound's read: the guard looks every interval from then on, finds the CPU busy and
/// lends its kworker a slice a threshold later.
#[test]
fn a_cpu_idle_for_a_moment_only_is_not_known_idle() {
    let (t, mut g) = recording();
    let t0 = Instant::now();
    let ms = |n: u64| Duration::from_millis(n);
    g.pass(&t.root, t0);
    t.idle([200, 200, 200, 200]);
    g.pass(&t.root, t0 + ms(250));
    assert!(g.asleep());
    // CPU 3 was idle 0.2 s of the next 10 s, then a loop ran there with no event recorded.
    t.idle([1200, 1200, 1200, 220]);
    t.thread(20, "kworker/3:1", 0x4208060, 'R', 0, 0, 3, "3");
    let bound = t0 + ms(10_250);
    g.pass(&t.root, bound);
    assert_eq!(g.work.quiet_passes, 0, "the bound's read");
    assert!(!g.asleep(), "CPU 3 not idle all along");
    assert_eq!(g.next_pass(bound), bound + ms(250));
    let mut at = bound;
    let mut lent = None;
    for _ in 0..12 {
        if t.step(&mut g, &mut at)
            .iter()
            .any(|e| matches!(e, Event::Rescued(r) if r.thread.tid == 20))
        {
            lent = Some(at - bound);
            break;
        }
    }
    let after = lent.expect("the kworker was lent a slice");
    assert!(after >= ms(2000) && after < ms(2800), "{after:?}");
}

/// While every watched CPU is known idle from the recorded task switches the guard looks
/// every half threshold, not every interval; an event on one of them (a task switched in)
/// brings the interval back at once. Without the counts it looks every interval whatever
/// the CPUs do.
#[test]
fn a_guard_over_cpus_known_idle_looks_every_half_threshold() {
    let (t, mut g) = recording();
    let mut plain = guard(&t, StallsConfig::default());
    let t0 = Instant::now();
    let ms = |n: u64| Duration::from_millis(n);
    for g in [&mut g, &mut plain] {
        g.pass(&t.root, t0);
        assert!(!g.asleep(), "nothing known idle before a second read");
        assert_eq!(g.next_pass(t0), t0 + ms(250));
    }
    t.idle([200, 200, 200, 200]);
    g.pass(&t.root, t0 + ms(250));
    plain.pass(&t.root, t0 + ms(250));
    assert!(g.asleep());
    assert_eq!(g.next_pass(t0 + ms(250)), t0 + ms(1250));
    assert!(!plain.asleep(), "no counts, nothing known idle");
    assert_eq!(plain.next_pass(t0 + ms(250)), t0 + ms(500));
    // A quiet pass keeps it asleep.
    g.pass(&t.root, t0 + ms(1250));
    assert_eq!(g.work.quiet_passes, 1);
    assert_eq!(g.next_pass(t0 + ms(1250)), t0 + ms(2250));
    // A task switched in on CPU 3: awake from the pass that sees the count move.
    t.events(3, 21);
    t.idle([400, 400, 400, 250]);
    g.pass(&t.root, t0 + ms(2250));
    assert!(!g.asleep());
    assert_eq!(g.work.slept, 2);
    assert_eq!(g.next_pass(t0 + ms(2250)), t0 + ms(2500));
    // Only CPU 2 watched: CPU 3's switches do not wake it.
    let mut two = Guard::new(Watch {
        cpus: "2".parse().unwrap(),
        settings: StallsConfig::default(),
        files: t.files(),
        isolated: "2-3".into(),
        config: "isold.toml".into(),
    });
    two.set_event_counts(crate::cpuwatch::EventCounts::open(
        &t.root,
        INSTANCE,
        &"2".parse().unwrap(),
    ));
    two.pass(&t.root, t0);
    t.idle([600, 600, 600, 250]);
    t.events(3, 22);
    two.pass(&t.root, t0 + ms(250));
    assert!(two.asleep());
}

/// A CPU whose idle time grew while an event was written there (idle, then a task switched
/// in) is not known idle: the next pass reads `/proc/stat` and finds it busy.
#[test]
fn a_cpu_that_switched_while_idle_time_grew_is_not_known_idle() {
    let (t, mut g) = recording();
    let t0 = Instant::now();
    g.pass(&t.root, t0);
    t.idle([200, 200, 200, 200]);
    t.events(3, 21);
    g.pass(&t.root, t0 + Duration::from_millis(250));
    t.idle([300, 300, 300, 200]);
    t.thread(20, "kworker/3:1", 0x4208060, 'R', 0, 0, 3, "3");
    g.pass(&t.root, t0 + Duration::from_millis(500));
    assert_eq!(g.work.quiet_passes, 0);
    assert_eq!(g.work.busy_passes, 1, "CPU 3 found busy");
}

/// A CPU the instance does not record (no count), or an instance that stopped recording
/// (`tracing_on` 0): every pass reads `/proc/stat`.
#[test]
fn without_a_count_for_every_cpu_each_pass_reads_proc_stat() {
    for (on, cpus) in [("1\n", "2"), ("0\n", "2-3")] {
        let t = Tree::new();
        t.tracing_on(on);
        t.events(2, 5);
        t.events(3, 5);
        let mut g = counting_guard(&t, cpus);
        let t0 = Instant::now();
        for k in 0..6u32 {
            t.idle([100, 100, 100 + u64::from(k) * 25, 100 + u64::from(k) * 25]);
            g.pass(&t.root, t0 + Duration::from_millis(250) * k);
        }
        assert_eq!(g.work.quiet_passes, 0, "{on:?} {cpus}");
    }
}

/// The kworker of CPU 3 runnable and never running behind the loop: lent SCHED_DEADLINE
/// after the threshold, its own policy recorded first; once it sleeps, given back and the
/// record gone. A loan left by a guard that died is given back by give_back_recorded.
#[test]
fn a_starving_kworker_is_lent_a_slice_and_given_it_back() {
    let t = Tree::new();
    let files = t.files();
    let mut g = guard(&t, StallsConfig::default());
    let t0 = Instant::now();
    let ev = g.pass(&t.root, t0);
    assert!(
        matches!(&ev[..], [Event::Walked { residents: 2, .. }]),
        "{ev:?}"
    );
    // CPU 3 busy from now on (its idle time stands), the kworker woken there.
    t.idle([200, 200, 200, 100]);
    t.thread(20, "kworker/3:1", 0x4208060, 'R', 0, 0, 3, "3");
    let mut at = t0;
    let mut rescued = None;
    for _ in 0..12 {
        for e in t.step(&mut g, &mut at) {
            if let Event::Rescued(r) = e {
                rescued = Some((at - t0, r));
            }
        }
        if rescued.is_some() {
            break;
        }
    }
    let (after, r) = rescued.expect("the kworker was lent a slice");
    assert!(
        after >= Duration::from_secs(2) && after < Duration::from_millis(2600),
        "{after:?}"
    );
    assert_eq!(r.thread.tid, 20);
    assert_eq!(r.kind, Kind::PerCpuKthread);
    assert_eq!(r.behind.as_deref(), Some("sh (pid 10)"));
    assert_eq!(r.how, How::Deadline);
    assert!(r.first_of_episode);
    assert_eq!(t.state_of(20), ('R', SCHED_DEADLINE));
    assert_eq!(loans(&files), 1);
    assert_eq!(g.lent(), 1);
    // The loop is never lent anything.
    assert_eq!(t.state_of(10), ('R', 1));
    // It ran and sleeps: given back at the next pass.
    t.thread(20, "kworker/3:1", 0x4208060, 'S', SCHED_DEADLINE, 0, 3, "3");
    t.put("proc/20/task/20/schedstat", "900 0 6\n");
    let ev = g.pass(&t.root, at + Duration::from_millis(250));
    assert!(
        ev.iter().any(
            |e| matches!(e, Event::Returned { ran: true, to: Some(to), .. } if to == "SCHED_OTHER")
        ),
        "{ev:?}"
    );
    assert_eq!(t.state_of(20), ('S', 0));
    // Its record is kept a while, for a next loan.
    assert_eq!(loans(&files), 1);
    assert_eq!(g.lent(), 0);

    // Woken again and starving: lent again; the guard dies; the record gives it back.
    t.thread(20, "kworker/3:1", 0x4208060, 'R', 0, 0, 3, "3");
    let mut at = at + Duration::from_millis(250);
    for _ in 0..12 {
        t.step(&mut g, &mut at);
        if g.lent() == 1 {
            break;
        }
    }
    assert_eq!(t.state_of(20), ('R', SCHED_DEADLINE));
    drop(g);
    let back = give_back_recorded(&t.root, &files).unwrap();
    assert_eq!(
        back,
        ["lent a slice: kworker/3:1 (kernel thread 20): restored: SCHED_OTHER"]
    );
    assert_eq!(t.state_of(20), ('R', 0));
    assert_eq!(loans(&files), 0);
}

/// A thread still runnable when its loan runs out (it needs more than one loan's slices)
/// is lent again at the next pass, not a threshold later; the second loan is no new
/// episode.
#[test]
fn a_thread_still_waiting_when_its_loan_runs_out_is_lent_again_at_once() {
    let (t, mut g, t0) = kworker_waits();
    let mut kw_ns = 100;
    let (mut lent, mut returned, mut again) = (None, None, None);
    for i in 1..=40u64 {
        let at = t0 + Duration::from_millis(250 * i);
        t.loop_ran();
        if lent.is_some() && returned.is_none() {
            // It runs a little under its loan, never enough to finish, and not at all
            // once the loan is over.
            kw_ns += 10;
            t.put("proc/20/task/20/schedstat", &format!("{kw_ns} 0 6\n"));
        }
        for e in g.pass(&t.root, at) {
            match e {
                Event::Rescued(r) if lent.is_none() => lent = Some((at, r.first_of_episode)),
                // It ran under its deadline loan: never taken for one the kernel did not run.
                Event::Returned { how, .. } if returned.is_none() => {
                    assert_eq!(how, How::Deadline);
                    returned = Some(at)
                }
                Event::Rescued(r) if returned.is_some() && again.is_none() => {
                    again = Some((at, r.first_of_episode))
                }
                _ => {}
            }
        }
        if again.is_some() {
            break;
        }
    }
    let (l, first) = lent.expect("lent");
    assert!(first);
    let r = returned.expect("its loan ran out");
    assert!(r - l >= Duration::from_secs(3), "{:?}", r - l);
    let (a, first_again) = again.expect("lent again");
    assert!(a - r <= Duration::from_millis(250), "{:?}", a - r);
    assert!(!first_again);
}

/// Two threads starving on one CPU: one loan at a time (the workload loses one slice's
/// share), the second when the first is given back.
#[test]
fn one_loan_per_cpu_at_a_time() {
    let t = Tree::new();
    t.thread(70, "kworker/3:2", 0x4208060, 'S', 0, 0, 3, "3");
    let mut g = guard(&t, StallsConfig::default());
    let t0 = Instant::now();
    g.pass(&t.root, t0);
    t.idle([200, 200, 200, 100]);
    t.thread(20, "kworker/3:1", 0x4208060, 'R', 0, 0, 3, "3");
    t.thread(70, "kworker/3:2", 0x4208060, 'R', 0, 0, 3, "3");
    let mut at = t0;
    for _ in 0..12 {
        t.step(&mut g, &mut at);
    }
    assert_eq!(g.lent(), 1);
    let lent: Vec<i32> = [20, 70]
        .into_iter()
        .filter(|&tid| t.state_of(tid).1 == SCHED_DEADLINE)
        .collect();
    assert_eq!(lent.len(), 1, "{lent:?}");
    // The lent one ran and sleeps: the other is lent at the next pass.
    let first = lent[0];
    let name = if first == 20 {
        "kworker/3:1"
    } else {
        "kworker/3:2"
    };
    t.thread(first, name, 0x4208060, 'S', SCHED_DEADLINE, 0, 3, "3");
    t.put(&format!("proc/{first}/task/{first}/schedstat"), "900 0 6\n");
    g.pass(&t.root, at + Duration::from_millis(250));
    let other = if first == 20 { 70 } else { 20 };
    assert_eq!(t.state_of(first), ('S', 0));
    assert_eq!(t.state_of(other), ('R', SCHED_DEADLINE));
}

/// The state files' names, inodes, lengths and modification times: a write replaces a
/// file (a new inode) or appends to the journal.
fn state_snapshot(t: &Tree) -> Vec<(String, u64, u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let mut v: Vec<_> = std::fs::read_dir(t.dir.path().join("run/isold"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                m.ino(),
                m.len(),
                m.mtime(),
                m.mtime_nsec(),
            )
        })
        .collect();
    v.sort();
    v
}

/// A thread that starves again and again (ktimers/3 behind a FIFO loop) costs one state
/// write: its own policy is recorded before its first loan and kept between loans, each
/// loan's end writes its policy back without touching the state files, and the record goes
/// once it is not lent again for KEEP_FOR. A policy its owner changed between two loans is
/// recorded anew and is what it gets back.
#[test]
fn a_thread_lent_again_and_again_is_recorded_once() {
    let (t, mut g, t0) = kworker_waits();
    let files = t.files();
    let mut kw_ns = 100;
    let mut runs = 6;
    let mut at = t0;
    let lend = |g: &mut Guard, at: &mut Instant| {
        for _ in 0..16 {
            t.step(g, at);
            if g.lent() == 1 {
                return;
            }
        }
        panic!("not lent");
    };
    lend(&mut g, &mut at);
    let recorded = state_snapshot(&t);
    assert_eq!(loans(&files), 1);
    for _ in 0..5 {
        // It runs under its loan and sleeps: its own policy back at the next pass.
        kw_ns += 1000;
        runs += 1;
        t.thread(20, "kworker/3:1", 0x4208060, 'S', SCHED_DEADLINE, 0, 3, "3");
        t.put("proc/20/task/20/schedstat", &format!("{kw_ns} 0 {runs}\n"));
        t.step(&mut g, &mut at);
        assert_eq!(g.lent(), 0);
        assert_eq!(t.state_of(20), ('S', 0));
        // Woken again: it starves again and is lent again.
        t.thread(20, "kworker/3:1", 0x4208060, 'R', 0, 0, 3, "3");
        t.put("proc/20/task/20/schedstat", &format!("{kw_ns} 0 {runs}\n"));
        lend(&mut g, &mut at);
        assert_eq!(t.state_of(20), ('R', SCHED_DEADLINE));
    }
    assert_eq!(state_snapshot(&t), recorded, "the state files were written");
    assert_eq!(loans(&files), 1);

    // Given back; its owner makes it SCHED_BATCH before it starves again: recorded anew,
    // and SCHED_BATCH is what it gets back.
    kw_ns += 1000;
    runs += 1;
    t.thread(20, "kworker/3:1", 0x4208060, 'S', SCHED_DEADLINE, 0, 3, "3");
    t.put("proc/20/task/20/schedstat", &format!("{kw_ns} 0 {runs}\n"));
    t.step(&mut g, &mut at);
    t.thread(20, "kworker/3:1", 0x4208060, 'R', 3, 0, 3, "3");
    t.put("proc/20/task/20/schedstat", &format!("{kw_ns} 0 {runs}\n"));
    lend(&mut g, &mut at);
    assert_ne!(state_snapshot(&t), recorded);
    assert_eq!(loans(&files), 1);
    kw_ns += 1000;
    t.thread(20, "kworker/3:1", 0x4208060, 'S', SCHED_DEADLINE, 0, 3, "3");
    t.put(
        "proc/20/task/20/schedstat",
        &format!("{kw_ns} 0 {}\n", runs + 1),
    );
    t.step(&mut g, &mut at);
    assert_eq!(t.state_of(20), ('S', 3));

    // Not lent again for KEEP_FOR: the record goes.
    let ended = at;
    while at < ended + KEEP_FOR - Duration::from_millis(300) {
        t.step(&mut g, &mut at);
    }
    assert_eq!(loans(&files), 1);
    while at < ended + KEEP_FOR + Duration::from_millis(300) {
        t.step(&mut g, &mut at);
    }
    assert_eq!(loans(&files), 0);
    assert_eq!(g.recorded(), 0);
    assert_eq!(t.state_of(20), ('S', 3));
}

/// A stop drops every kept record: nothing of the guard is left in the state files.
#[test]
fn a_stop_leaves_no_record() {
    let (t, mut g, t0) = kworker_waits();
    let mut at = t0;
    while g.lent() == 0 && at < t0 + Duration::from_secs(4) {
        t.step(&mut g, &mut at);
    }
    t.thread(20, "kworker/3:1", 0x4208060, 'S', SCHED_DEADLINE, 0, 3, "3");
    t.put("proc/20/task/20/schedstat", "900 0 6\n");
    g.pass(&t.root, at + Duration::from_millis(250));
    assert_eq!((g.lent(), loans(&t.files())), (0, 1));
    g.give_back_all(&t.root);
    assert_eq!(loans(&t.files()), 0);
    assert_eq!(t.state_of(20), ('S', 0));
}

/// A task and CPU 3's kworker found starving at the same pass: the kworker, whose work
/// other CPUs wait on (a flush, stat_refresh), is lent first, the task when it is given
/// back. (The two wait equally long; without the rule the order would be the hash map's.)
#[test]
fn a_cpus_own_kernel_thread_is_lent_before_a_task() {
    for _ in 0..8 {
        let t = Tree::new();
        t.thread(40, "sh", 0x400100, 'S', 0, 0, 3, "3");
        let mut g = guard(&t, StallsConfig::default());
        let t0 = Instant::now();
        g.pass(&t.root, t0);
        t.idle([200, 200, 200, 100]);
        t.thread(40, "sh", 0x400100, 'R', 0, 0, 3, "3");
        t.thread(20, "kworker/3:1", 0x4208060, 'R', 0, 0, 3, "3");
        let mut at = t0;
        let mut first = None;
        for _ in 0..16 {
            first = t.step(&mut g, &mut at).into_iter().find_map(|e| match e {
                Event::Rescued(r) => Some(r.thread.tid),
                _ => None,
            });
            if first.is_some() {
                break;
            }
        }
        assert_eq!(first, Some(20));
        assert_eq!(t.state_of(40), ('R', 0));
        // The kworker ran and sleeps: the task is lent at the next pass.
        t.thread(20, "kworker/3:1", 0x4208060, 'S', SCHED_DEADLINE, 0, 3, "3");
        t.put("proc/20/task/20/schedstat", "900 0 6\n");
        g.pass(&t.root, at + Duration::from_millis(250));
        assert_eq!(t.state_of(40), ('R', SCHED_DEADLINE));
    }
}

/// A task waiting behind a kernel thread of its CPU that never gets done (each loan runs
/// out with it still runnable) is lent once it has waited a threshold longer: a CPU's own
/// kernel threads go first only among threads that waited about as long. (Seen: a task
/// preempted inside an RCU read-side section on CPU 3 of 7.2-rt, kept waiting for minutes
/// behind ktimers/3 and rcuc/3, stalled RCU for the whole machine.)
#[test]
fn a_task_is_not_kept_waiting_behind_kernel_threads_for_good() {
    let t = Tree::new();
    t.thread(40, "sh", 0x400100, 'S', 0, 0, 3, "3");
    let mut g = guard(&t, StallsConfig::default());
    let t0 = Instant::now();
    g.pass(&t.root, t0);
    t.idle([200, 200, 200, 100]);
    t.thread(40, "sh", 0x400100, 'R', 0, 0, 3, "3");
    t.thread(20, "kworker/3:1", 0x4208060, 'R', 0, 0, 3, "3");
    let mut at = t0;
    let mut lent = Vec::new();
    for _ in 0..40 {
        for e in t.step(&mut g, &mut at) {
            if let Event::Rescued(r) = e {
                lent.push((r.thread.tid, at - t0));
            }
        }
        if lent.iter().any(|(tid, _)| *tid == 40) {
            break;
        }
    }
    assert_eq!(lent.first().map(|l| l.0), Some(20), "{lent:?}");
    let task = lent.iter().find(|(tid, _)| *tid == 40);
    assert!(
        task.is_some_and(|(_, after)| *after <= Duration::from_millis(5500)),
        "{lent:?}"
    );
}

/// A lent thread that ends (it ran to its end) is given back as gone and as having run,
/// and its loan stays SCHED_DEADLINE: it is not taken for one the kernel did not run,
/// however late the guard looks.
#[test]
fn a_lent_thread_that_ends_ran_and_is_no_fifo_loan() {
    let (t, mut g, t0) = kworker_waits();
    let mut at = t0;
    while g.lent() == 0 && at < t0 + Duration::from_secs(4) {
        t.step(&mut g, &mut at);
    }
    assert_eq!(g.lent(), 1);
    std::fs::remove_dir_all(t.dir.path().join("proc/20")).unwrap();
    let ev = g.pass(&t.root, at + DEADLINE_GRACE + Duration::from_millis(200));
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::Returned {
                ran: true,
                to: None,
                how: How::Deadline,
                ..
            }
        )),
        "{ev:?}"
    );
    assert_eq!(g.lent(), 0);
    assert_eq!(loans(&t.files()), 0);
}

/// A deadline loan the thread does not run under for a second becomes SCHED_FIFO
/// pulses; a thread that used its loan's allowance (an overrun: the tick stopped on a
/// nohz_full CPU) gets no pulse until the allowance catches up, so a CPU hog lent a
/// slice costs the workload its share and no more.
#[test]
fn pulses_stop_at_the_loans_allowance() {
    let (t, mut g, t0) = kworker_waits();
    let mut at = t0;
    let mut lent_at = None;
    for _ in 0..20 {
        t.step(&mut g, &mut at);
        if g.lent() == 1 && lent_at.is_none() {
            lent_at = Some(at);
        }
        if lent_at.is_some_and(|l| at - l >= DEADLINE_GRACE + Duration::from_millis(500)) {
            break;
        }
    }
    let lent_at = lent_at.expect("lent");
    // It never ran under its deadline loan: pulses since the grace ran out, its own
    // policy between them.
    assert!(g.work.pulses >= 1, "{:?}", g.work);
    assert_eq!(g.work.pulses_withheld, 0);
    assert_eq!(t.state_of(20), ('R', 0));
    assert_eq!(g.lent(), 1);
    // It ran 30 ms in one go: far over 100 us (a tick: 4 ms) per 0.5 s.
    t.put("proc/20/task/20/schedstat", "30000100 0 6\n");
    let pulses = g.work.pulses;
    at += Duration::from_millis(250);
    g.pass(&t.root, at);
    assert_eq!(g.work.pulses, pulses, "{:?}", g.work);
    assert_eq!(g.work.pulses_withheld, 1);
    // Still runnable when the loan runs out: the log says how it was lent at the end.
    let mut ended = None;
    while at - lent_at < Duration::from_secs(4) && ended.is_none() {
        at += Duration::from_millis(250);
        ended = g.pass(&t.root, at).into_iter().find_map(|e| match e {
            Event::Returned { how, used, .. } => Some((how, used)),
            _ => None,
        });
    }
    let (how, used) = ended.expect("the loan ended");
    assert_eq!(how, How::Fifo(2));
    assert_eq!(used, Duration::from_millis(30));
    assert_eq!(g.work.pulses, pulses);
}

/// User threads with a real-time policy (the workload's), threads named in
/// ignore_threads and migration/N are never lent anything.
#[test]
fn the_workloads_rt_threads_and_ignored_ones_are_left_alone() {
    let t = Tree::new();
    t.thread(40, "app-rt", 0x400100, 'R', 1, 1, 3, "3");
    t.thread(50, "ktimers/3", 0x4208040, 'R', 1, 1, 3, "3");
    t.thread(60, "migration/3", 0x4208040, 'R', 1, 99, 3, "3");
    let st = StallsConfig {
        ignore_threads: vec!["ktimers/*".into()],
        ..StallsConfig::default()
    };
    let mut g = guard(&t, st);
    let t0 = Instant::now();
    g.pass(&t.root, t0);
    t.idle([200, 200, 200, 100]);
    for i in 1..=16 {
        t.loop_ran();
        let ev = g.pass(&t.root, t0 + Duration::from_millis(250 * i));
        assert!(!ev.iter().any(|e| matches!(e, Event::Rescued(_))), "{ev:?}");
    }
    for tid in [40, 50, 60] {
        assert_ne!(t.state_of(tid).1, SCHED_DEADLINE);
    }
}

fn loan_entry(starttime: u64, policy: u32) -> Entry {
    Entry {
        id: format!("loan:20:{starttime}"),
        item: "stalls".into(),
        label: "lent a slice: kworker/3:1 (kernel thread 20)".into(),
        original: Original::Loan {
            pid: 20,
            tid: 20,
            starttime,
            comm: "kworker/3:1".into(),
            policy,
            rt_priority: 0,
            nice: 0,
            reset_on_fork: false,
        },
    }
}

/// What the guard's records rest on: record_current writes a new entry, leaves an equal one
/// unwritten and replaces a changed one; forget_where drops the entries it picks and says
/// how many, leaves the rest, and touches nothing over a state with a line set aside.
#[test]
fn records_are_written_only_when_new_or_changed_and_forgotten_by_id() {
    use crate::policy::engine::{forget_where, record_current};
    let t = Tree::new();
    let files = t.files();
    let rec = |e| record_current(&t.root, &files, "2-3", "isold.toml", e).unwrap();
    assert!(rec(loan_entry(7, 0)));
    let written = state_snapshot(&t);
    assert!(!rec(loan_entry(7, 0)));
    assert_eq!(state_snapshot(&t), written);
    assert!(rec(loan_entry(7, 3)));
    let s = State::load(&files.runtime).unwrap().unwrap();
    assert!(matches!(
        s.get("loan:20:7").map(|e| &e.original),
        Some(Original::Loan { policy: 3, .. })
    ));
    assert!(rec(loan_entry(8, 0)));
    assert_eq!(loans(&files), 2);
    assert_eq!(
        forget_where(&t.root, &files, |i| i == "loan:20:7").unwrap(),
        1
    );
    assert_eq!(loans(&files), 1);
    assert_eq!(
        forget_where(&t.root, &files, |i| i == "loan:20:7").unwrap(),
        0
    );
    // A torn journal line: set aside for the next apply or restore to report, so the state
    // is not rewritten here.
    let journal = t.dir.path().join("run/isold/state.journal");
    let mut text = std::fs::read_to_string(&journal).unwrap_or_default();
    text.push_str("{\"torn\n");
    std::fs::write(&journal, text).unwrap();
    assert_eq!(forget_where(&t.root, &files, |_| true).unwrap(), 0);
    assert_eq!(loans(&files), 1);
}

/// A thread gone and another given its tid: the old record goes when the new one is lent,
/// and recorded() counts the threads the state holds for the guard.
#[test]
fn a_reused_tid_replaces_the_gone_threads_record() {
    let (t, mut g, t0) = kworker_waits();
    let files = t.files();
    let mut at = t0;
    while g.lent() == 0 && at < t0 + Duration::from_secs(4) {
        t.step(&mut g, &mut at);
    }
    assert_eq!((g.lent(), g.recorded()), (1, 1));
    // It runs and sleeps: given back, its record kept.
    t.thread(20, "kworker/3:1", 0x4208060, 'S', SCHED_DEADLINE, 0, 3, "3");
    t.put("proc/20/task/20/schedstat", "900 0 6\n");
    t.step(&mut g, &mut at);
    assert_eq!((g.lent(), g.recorded()), (0, 1));
    // Gone; a new thread with tid 20 (another start time) starves there.
    let stat = t.dir.path().join("proc/20/task/20/stat");
    let text = std::fs::read_to_string(&stat).unwrap();
    let mut f: Vec<String> = text.split(' ').map(String::from).collect();
    // Field 22, the start time (the fixture's 7).
    f[21] = "8".into();
    f[2] = "R".into();
    f[40] = "0".into();
    let text = f.join(" ");
    std::fs::write(&stat, &text).unwrap();
    std::fs::write(t.dir.path().join("proc/20/stat"), &text).unwrap();
    while g.lent() == 0 && at < t0 + Duration::from_secs(12) {
        t.step(&mut g, &mut at);
    }
    assert_eq!((g.lent(), g.recorded()), (1, 1));
    let s = State::load(&files.runtime).unwrap().unwrap();
    let ids: Vec<&str> = s
        .entries()
        .iter()
        .map(|e| e.id.as_str())
        .filter(|i| i.starts_with("loan:"))
        .collect();
    assert_eq!(ids, ["loan:20:8"]);
}

/// Two threads with records: the one that expires goes, the other's stays, and goes in
/// its turn once its own last loan is KEEP_FOR old.
#[test]
fn each_record_expires_on_its_own() {
    let t = Tree::new();
    t.thread(40, "sh", 0x400100, 'S', 0, 0, 3, "3");
    let mut g = guard(&t, StallsConfig::default());
    let t0 = Instant::now();
    g.pass(&t.root, t0);
    t.idle([200, 200, 200, 100]);
    t.thread(20, "kworker/3:1", 0x4208060, 'R', 0, 0, 3, "3");
    t.thread(40, "sh", 0x400100, 'R', 0, 0, 3, "3");
    let files = t.files();
    let mut at = t0;
    // The kworker is lent first, runs and sleeps: its record kept from here.
    while !(g.lent() == 1 && t.state_of(20).1 == SCHED_DEADLINE) {
        t.step(&mut g, &mut at);
        assert!(at < t0 + Duration::from_secs(5));
    }
    t.thread(20, "kworker/3:1", 0x4208060, 'S', SCHED_DEADLINE, 0, 3, "3");
    t.put("proc/20/task/20/schedstat", "900 0 6\n");
    t.step(&mut g, &mut at);
    let kw_back = at;
    // The task, which never runs, is lent on and on meanwhile.
    while at < kw_back + KEEP_FOR {
        t.step(&mut g, &mut at);
    }
    assert_eq!(
        loans(&files),
        1,
        "the kworker's record went, the task's stays"
    );
    assert_eq!(g.recorded(), 1);
    // The task runs and sleeps: its own record goes KEEP_FOR later.
    t.thread(40, "sh", 0x400100, 'S', SCHED_DEADLINE, 0, 3, "3");
    t.put("proc/40/task/40/schedstat", "900 0 6\n");
    t.step(&mut g, &mut at);
    assert_eq!(t.state_of(40), ('S', 0));
    let task_back = at;
    while at < task_back + KEEP_FOR + Duration::from_millis(300) {
        t.step(&mut g, &mut at);
    }
    assert_eq!((loans(&files), g.recorded()), (0, 0));
}

/// A CPU whose count moved since the last `/proc/stat` (a PREEMPT_RT kernel's idle CPU runs
/// ktimers every second or two) is known idle without it when the noise ledger saw its last
/// task switch go to the idle task at the count it has now; a count that moved past what the
/// ledger saw needs the read again.
#[test]
fn a_cpu_the_ledger_saw_go_idle_needs_no_proc_stat() {
    let (t, mut g) = recording();
    let t0 = Instant::now();
    let ms = |n: u64| Duration::from_millis(n);
    g.pass(&t.root, t0);
    t.idle([200, 200, 200, 200]);
    g.pass(&t.root, t0 + ms(250));
    assert!(g.asleep());
    let quiet = g.work.quiet_passes;
    std::fs::remove_file(t.dir.path().join("proc/stat")).unwrap();
    // ktimers/3 ran and CPU 3 went idle again: its count moved; the ledger read up to
    // count 23 and saw the switch back to the idle task.
    t.events(3, 23);
    g.idle_by_ledger([(3, 23)].into_iter().collect());
    let ev = g.pass(&t.root, t0 + ms(500));
    assert!(ev.is_empty(), "{ev:?}");
    assert_eq!(g.work.quiet_passes, quiet + 1);
    assert!(g.asleep(), "every CPU known idle: the guard sleeps");
    // What the ledger saw at another count tells nothing: /proc/stat is read (and fails).
    g.idle_by_ledger([(2, 10), (3, 22)].into_iter().collect());
    let ev = g.pass(&t.root, t0 + ms(1000));
    assert!(matches!(&ev[..], [Event::Failed(_)]), "{ev:?}");
    assert_eq!(g.work.quiet_passes, quiet + 1);
    assert!(!g.asleep());
}

/// While every watched CPU is known busy or idle from the counts and nothing is lent or
/// asked about, the next pass is due when a followed thread could first starve (its
/// threshold after it was first seen waiting), or half a threshold on, the earlier; once a
/// thread is lent a slice, every interval again.
#[test]
fn a_known_busy_cpu_is_looked_at_when_a_followed_thread_is_due() {
    let (t, mut g) = recording();
    let t0 = Instant::now();
    let ms = |n: u64| Duration::from_millis(n);
    g.pass(&t.root, t0);
    t.idle([200, 200, 200, 100]);
    t.thread(20, "kworker/3:1", 0x4208060, 'R', 0, 0, 3, "3");
    g.pass(&t.root, t0 + ms(250));
    assert_eq!(g.work.busy_passes, 1);
    std::fs::remove_file(t.dir.path().join("proc/stat")).unwrap();
    let ev = g.pass(&t.root, t0 + ms(500));
    assert!(ev.is_empty(), "{ev:?}");
    assert_eq!(g.work.quiet_passes, 1, "CPU 3 known busy from its count");
    assert_eq!(
        g.next_pass(t0 + ms(500)),
        t0 + ms(1500),
        "half a threshold on"
    );
    g.pass(&t.root, t0 + ms(1500));
    // Followed since 0.25 s: due at 2.25 s, before half a threshold on.
    assert_eq!(g.next_pass(t0 + ms(1500)), t0 + ms(2250));
    let ev = g.pass(&t.root, t0 + ms(2250));
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Rescued(r) if r.thread.tid == 20)),
        "{ev:?}"
    );
    assert_eq!(
        g.next_pass(t0 + ms(2250)),
        t0 + ms(2500),
        "a loan: every interval"
    );
}
