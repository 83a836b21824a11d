//! The ledger over time: each CPU's sums since the recording started, and the same by
//! minute for the last hour and by hour for the last day, so that a window ("the last 10
//! minutes", "since 03:00") can be answered after the fact. [`LedgerFile`] is how a
//! recorder (the daemon) hands it to a reader (`isold noise`): one JSON file written whole.
//!
//! Memory and the file stay bounded: every bucket keeps at most `sources` sources per CPU
//! (those that took the most time), the rest folded into one source named "other" of its
//! kind; the sums since the start keep at most [`SINCE_START_SOURCES`].

use std::collections::{BTreeMap, VecDeque};

use super::{Interruption, Kind, Source, Sums, Tally};

/// Minutes kept by the minute.
pub const MINUTES: usize = 60;
/// Hours kept by the hour (older ones are dropped).
pub const HOURS: usize = 24;
/// Sources kept per CPU in the sums since the start (threads named by pid come and go).
pub const SINCE_START_SOURCES: usize = 256;

/// The name of the source that stands for the sources folded away.
pub const OTHER: &str = "other";

impl Kind {
    /// How many kinds there are.
    pub const COUNT: usize = 7;

    /// The kind named `s` by [`Kind::as_str`].
    pub fn parse(s: &str) -> Option<Kind> {
        [
            Kind::Irq,
            Kind::Softirq,
            Kind::Ipi,
            Kind::Timer,
            Kind::Vector,
            Kind::Nmi,
            Kind::Thread,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

impl Tally {
    /// Add `other`'s figures to these.
    pub fn merge(&mut self, other: &Tally) {
        self.events += other.events;
        self.ns += other.ns;
        self.longest_ns = self.longest_ns.max(other.longest_ns);
    }
}

impl Sums {
    /// Add `other`'s figures to these.
    pub fn merge(&mut self, other: &Sums) {
        for (s, t) in &other.by_source {
            self.by_source.entry(s.clone()).or_default().merge(t);
        }
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
        if let Some(l) = &other.longest {
            if self.longest.as_ref().map_or(true, |m| m.net_ns < l.net_ns) {
                self.longest = Some(l.clone());
            }
        }
    }

    /// Keep the `keep` sources that took the most time; each kind's others are summed into
    /// one source named [`OTHER`]. The histogram and the longest are untouched.
    pub fn fold(&mut self, keep: usize) {
        if self.by_source.len() <= keep {
            return;
        }
        let mut ranked: Vec<(Source, Tally)> =
            std::mem::take(&mut self.by_source).into_iter().collect();
        ranked.sort_by(|a, b| b.1.ns.cmp(&a.1.ns).then_with(|| a.0.cmp(&b.0)));
        // Room for the "other" sources among the kept.
        let named = keep.saturating_sub(Kind::COUNT).max(1);
        for (i, (s, t)) in ranked.into_iter().enumerate() {
            let s = if i < named || s.name == OTHER {
                s
            } else {
                Source {
                    kind: s.kind,
                    name: OTHER.into(),
                }
            };
            self.by_source.entry(s).or_default().merge(&t);
        }
    }
}

/// Every CPU's sums over one span of wall-clock time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Span {
    /// Unix time of its start, seconds.
    pub from: u64,
    /// Unix time of its end, seconds (exclusive; the current minute's end is its last read).
    pub to: u64,
    pub per_cpu: BTreeMap<usize, Sums>,
}

impl Span {
    fn fold(&mut self, keep: usize) {
        for s in self.per_cpu.values_mut() {
            s.fold(keep);
        }
    }

    fn merge(&mut self, other: &Span) {
        self.from = self.from.min(other.from);
        self.to = self.to.max(other.to);
        for (cpu, s) in &other.per_cpu {
            self.per_cpu.entry(*cpu).or_default().merge(s);
        }
    }
}

/// The ledger's sums since the start and by minute and hour.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    /// Unix time of the start, seconds.
    pub started: u64,
    /// Since the start.
    pub since_start: BTreeMap<usize, Sums>,
    /// The minute under way.
    pub current: Span,
    /// Closed minutes, the oldest first.
    pub minutes: VecDeque<Span>,
    /// Closed hours, the oldest first.
    pub hours: VecDeque<Span>,
    /// Sources kept per CPU in a bucket.
    pub sources: usize,
}

impl Ledger {
    /// An empty ledger started at Unix time `now`, keeping `sources` per CPU in a bucket.
    pub fn new(now: u64, sources: usize) -> Ledger {
        Ledger {
            started: now,
            current: Span {
                from: now - now % 60,
                to: now,
                ..Span::default()
            },
            sources: sources.max(Kind::COUNT + 1),
            ..Ledger::default()
        }
    }

    /// Count an interruption of `cpu`, read at Unix time `now`.
    pub fn add(&mut self, now: u64, cpu: usize, i: &Interruption) {
        self.tick(now);
        let s = self.since_start.entry(cpu).or_default();
        s.add(i);
        if s.by_source.len() > SINCE_START_SOURCES + SINCE_START_SOURCES / 4 {
            s.fold(SINCE_START_SOURCES);
        }
        let c = self.current.per_cpu.entry(cpu).or_default();
        c.add(i);
        // A minute with thousands of pids is folded as it goes, not only when it closes.
        if c.by_source.len() > 4 * self.sources {
            c.fold(self.sources);
        }
    }

    /// Time passes: the minute under way is closed when `now` is past it, minutes older
    /// than an hour go into their hour, hours older than a day are dropped.
    pub fn tick(&mut self, now: u64) {
        let minute = now - now % 60;
        if minute <= self.current.from {
            self.current.to = self.current.to.max(now);
            return;
        }
        let mut done = std::mem::replace(
            &mut self.current,
            Span {
                from: minute,
                to: now,
                ..Span::default()
            },
        );
        done.to = done.from + 60;
        done.fold(self.sources);
        self.minutes.push_back(done);
        while self
            .minutes
            .front()
            .is_some_and(|m| m.from + 3600 <= minute)
        {
            let m = self.minutes.pop_front().expect("a front");
            let hour = m.from - m.from % 3600;
            match self.hours.back_mut() {
                Some(h) if h.from == hour => {
                    h.merge(&m);
                    h.fold(self.sources);
                }
                _ => self.hours.push_back(Span {
                    from: hour,
                    to: hour + 3600,
                    per_cpu: m.per_cpu,
                }),
            }
        }
        while self
            .hours
            .front()
            .is_some_and(|h| h.from + 3600 * (HOURS as u64 + 1) <= minute)
        {
            self.hours.pop_front();
        }
    }

    /// The sums of the spans that started at or after Unix time `since` (the oldest kept
    /// when `since` is older), with the span they cover.
    pub fn window(&self, since: u64) -> Span {
        let mut w = Span {
            from: self.current.from,
            to: self.current.to,
            ..Span::default()
        };
        let spans = self
            .hours
            .iter()
            .chain(self.minutes.iter())
            .chain(std::iter::once(&self.current));
        // An hour that began before `since` is taken only when no minute is finer.
        for s in spans.filter(|s| s.to > since && (s.from >= since || s.to - s.from <= 60)) {
            w.merge(s);
        }
        w.from = w.from.max(self.started);
        w
    }
}

/// One source in a [`LedgerFile`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FileSource {
    pub kind: String,
    pub source: String,
    pub events: u64,
    pub ns: u64,
    pub longest_ns: u64,
}

/// A CPU's longest interruption in a [`LedgerFile`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FileLongest {
    pub kind: String,
    pub source: String,
    pub ns: u64,
    /// When it began, by the recording's clock (CLOCK_MONOTONIC where the kernel has it), ns.
    pub start_ns: u64,
    /// The same as Unix time, seconds.
    pub at_unix: f64,
}

/// A CPU's sums in a [`LedgerFile`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FileSums {
    pub cpu: usize,
    pub sources: Vec<FileSource>,
    /// As [`Sums::buckets`].
    pub histogram: Vec<u64>,
    pub longest: Option<FileLongest>,
}

/// A span in a [`LedgerFile`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FileSpan {
    pub from_unix: u64,
    pub to_unix: u64,
    pub per_cpu: Vec<FileSums>,
}

/// The ledger as its recorder writes it for readers (`noise.json` next to isold's status).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LedgerFile {
    /// The recorder's process.
    pub pid: i32,
    /// What it does: "recording CPUs 2-3", or why not.
    pub state: String,
    /// The CPUs recorded.
    pub cpus: String,
    /// Unix time of the recording's start and of this file, seconds.
    pub started_unix: u64,
    pub updated_unix: u64,
    /// Pages of the kernel's buffers that followed lost events.
    pub lost_pages: u64,
    pub since_start: Vec<FileSums>,
    /// Closed hours, closed minutes and the minute under way, the oldest first.
    pub spans: Vec<FileSpan>,
}

fn file_sums(cpu: usize, s: &Sums, unix_of: &dyn Fn(u64) -> f64) -> FileSums {
    FileSums {
        cpu,
        sources: s
            .by_source
            .iter()
            .map(|(src, t)| FileSource {
                kind: src.kind.as_str().into(),
                source: src.name.clone(),
                events: t.events,
                ns: t.ns,
                longest_ns: t.longest_ns,
            })
            .collect(),
        histogram: s.buckets.to_vec(),
        longest: s.longest.as_ref().map(|l| FileLongest {
            kind: l.source.kind.as_str().into(),
            source: l.source.name.clone(),
            ns: l.net_ns,
            start_ns: l.start_ns,
            at_unix: unix_of(l.start_ns),
        }),
    }
}

/// The sums a [`FileSums`] stands for (a source of an unknown kind is read as a vector).
pub fn sums_of(f: &FileSums) -> Sums {
    let mut s = Sums::default();
    for src in &f.sources {
        s.by_source.insert(
            Source {
                kind: Kind::parse(&src.kind).unwrap_or(Kind::Vector),
                name: src.source.clone(),
            },
            Tally {
                events: src.events,
                ns: src.ns,
                longest_ns: src.longest_ns,
            },
        );
    }
    for (a, b) in s.buckets.iter_mut().zip(f.histogram.iter()) {
        *a = *b;
    }
    s.longest = f.longest.as_ref().map(|l| Interruption {
        start_ns: l.start_ns,
        net_ns: l.ns,
        counted: true,
        source: Source {
            kind: Kind::parse(&l.kind).unwrap_or(Kind::Vector),
            name: l.source.clone(),
        },
    });
    s
}

impl LedgerFile {
    /// The file of `ledger` written by process `pid` at Unix time `now`; `unix_of` turns
    /// the recording's clock into Unix time.
    pub fn of(
        ledger: &Ledger,
        pid: i32,
        state: &str,
        cpus: &str,
        lost_pages: u64,
        now: u64,
        unix_of: &dyn Fn(u64) -> f64,
    ) -> LedgerFile {
        let sums = |m: &BTreeMap<usize, Sums>| -> Vec<FileSums> {
            m.iter().map(|(&c, s)| file_sums(c, s, unix_of)).collect()
        };
        LedgerFile {
            pid,
            state: state.into(),
            cpus: cpus.into(),
            started_unix: ledger.started,
            updated_unix: now,
            lost_pages,
            since_start: sums(&ledger.since_start),
            spans: ledger
                .hours
                .iter()
                .chain(ledger.minutes.iter())
                .chain(std::iter::once(&ledger.current))
                .map(|s| FileSpan {
                    from_unix: s.from,
                    to_unix: s.to,
                    per_cpu: sums(&s.per_cpu),
                })
                .collect(),
        }
    }

    /// Each CPU's sums since Unix time `since` (None: since the start; down to the minute in
    /// the last hour, up to the hour before it), with the Unix time the sums really start from and the longest interruptions' Unix times by CPU.
    pub fn window(&self, since: Option<u64>) -> (u64, BTreeMap<usize, (Sums, Option<f64>)>) {
        let mut out: BTreeMap<usize, (Sums, Option<f64>)> = BTreeMap::new();
        let take = |out: &mut BTreeMap<usize, (Sums, Option<f64>)>, f: &FileSums| {
            let e = out.entry(f.cpu).or_default();
            let before = e.0.longest.as_ref().map(|l| l.net_ns);
            e.0.merge(&sums_of(f));
            if let Some(l) = &f.longest {
                // As merge takes it: the first, or a longer one.
                if before.map_or(true, |b| l.ns > b) {
                    e.1 = Some(l.at_unix);
                }
            }
        };
        let Some(since) = since else {
            for f in &self.since_start {
                take(&mut out, f);
            }
            return (self.started_unix, out);
        };
        // By the minute in the last hour (a minute with nothing has no span), else from
        // the first whole hour.
        let from = if since + 3600 >= self.updated_unix {
            since - since % 60
        } else {
            since.div_ceil(3600) * 3600
        };
        for s in self.spans.iter().filter(|s| s.from_unix >= from) {
            for f in &s.per_cpu {
                take(&mut out, f);
            }
        }
        (from.max(self.started_unix), out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn irq(name: &str, start_ns: u64, net_ns: u64) -> Interruption {
        Interruption {
            start_ns,
            net_ns,
            counted: true,
            source: Source {
                kind: Kind::Irq,
                name: name.into(),
            },
        }
    }

    /// A window is the minutes since its start; minutes older than an hour are answered by
    /// their hour; nothing older than a day is kept.
    #[test]
    fn a_window_sums_the_minutes_since_its_start() {
        let t0 = 1_800_000_000; // a whole hour
        let mut l = Ledger::new(t0, 12);
        // One IRQ a minute for three hours, the one of minute 100 the longest.
        for m in 0..180u64 {
            let ns = if m == 100 { 9_000 } else { 1_000 + m };
            l.add(
                t0 + m * 60 + 5,
                3,
                &irq("IRQ 4 ttyS0", m * 60_000_000_000, ns),
            );
        }
        l.tick(t0 + 180 * 60 + 1);
        // The closed minutes of the last hour, the one under way the 60th.
        assert_eq!(l.minutes.len(), MINUTES - 1);
        assert_eq!(l.hours.len(), 3);
        assert_eq!(
            l.since_start[&3].by_source.values().next().unwrap().events,
            180
        );
        // The last 10 minutes: 10 closed ones and the one under way (empty); a window is
        // rounded out to whole minutes.
        let w = l.window(t0 + 170 * 60 + 1);
        assert_eq!(w.per_cpu[&3].by_source.values().next().unwrap().events, 10);
        let w = l.window(t0 + 170 * 60);
        assert_eq!(w.per_cpu[&3].by_source.values().next().unwrap().events, 10);
        assert_eq!(w.from, t0 + 170 * 60);
        // Two hours back: the second hour whole and the last hour's minutes.
        let w = l.window(t0 + 3600);
        assert_eq!(w.per_cpu[&3].by_source.values().next().unwrap().events, 120);
        assert_eq!(w.per_cpu[&3].longest.as_ref().unwrap().net_ns, 9_000);
        // The same through the file.
        let f = LedgerFile::of(
            &l,
            7,
            "recording CPUs 3",
            "3",
            0,
            t0 + 180 * 60 + 1,
            &|ns| t0 as f64 + ns as f64 / 1e9,
        );
        let f: LedgerFile = serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
        let (from, per) = f.window(Some(t0 + 3600));
        assert_eq!(from, t0 + 3600);
        let (s, at) = &per[&3];
        assert_eq!(s.by_source.values().next().unwrap().events, 120);
        assert_eq!(s.longest.as_ref().unwrap().net_ns, 9_000);
        assert_eq!(*at, Some(t0 as f64 + 6000.0));
        let (from, per) = f.window(None);
        assert_eq!(from, t0);
        assert_eq!(per[&3].0.by_source.values().next().unwrap().events, 180);
        // A day later the first hours are gone.
        l.tick(t0 + 26 * 3600);
        assert!(l.hours.len() <= HOURS, "{}", l.hours.len());
        assert!(l.hours.front().unwrap().from >= t0 + 3600);
    }

    /// A minute with a thousand threads keeps the sources that took the most time, the rest
    /// summed into "other" of their kind: no event and no nanosecond is lost.
    #[test]
    fn folding_keeps_every_event() {
        let mut l = Ledger::new(60, 12);
        for p in 0..1000u64 {
            l.add(
                61,
                2,
                &Interruption {
                    start_ns: p,
                    net_ns: 1000 + p,
                    counted: true,
                    source: crate::noise::thread_source(p as i32 + 100, "sh", false),
                },
            );
        }
        l.add(61, 2, &irq("IRQ 4 ttyS0", 5, 10));
        l.tick(121);
        let m = &l.minutes[0].per_cpu[&2];
        assert!(m.by_source.len() <= 12, "{}", m.by_source.len());
        let events: u64 = m.by_source.values().map(|t| t.events).sum();
        let ns: u64 = m.by_source.values().map(|t| t.ns).sum();
        assert_eq!(events, 1001);
        assert_eq!(ns, (0..1000).map(|p| 1000 + p).sum::<u64>() + 10);
        assert!(m
            .by_source
            .keys()
            .any(|s| s.name == OTHER && s.kind == Kind::Thread));
        // The IRQ, the least time of all, is folded into its kind's "other", not lost.
        assert!(m.by_source.keys().any(|s| s.kind == Kind::Irq));
        assert!(m.by_source.keys().any(|s| s.name == "sh (pid 1099)"));
    }
}
