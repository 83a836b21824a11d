//! The noise ledger's arithmetic: from one CPU's stream of kernel events (the entries and
//! exits of device IRQs, softirqs and APIC vectors, NMIs, and context switches), each
//! interruption of that CPU with its source and its *net* duration: the time it took from
//! the CPU less the interruptions nested in it (an IRQ during a softirq counts for the IRQ,
//! not twice), as osnoise accounts it. A thread that runs on the CPU and is not the workload
//! is an interruption from its switch in to its switch out; on PREEMPT_RT a device's IRQ
//! thread (`irq/4-ttyS0`) is charged to that IRQ.
//!
//! Durations are lower bounds: the kernel's entry and exit code around a handler is not
//! bracketed by any event.
//!
//! This module is the arithmetic; `decode` turns the kernel's records into its events,
//! `record` records them in a tracefs instance and reads it, `report` ranks the sums.

use std::collections::BTreeMap;

mod decode;
mod ledger;
mod record;
mod report;

pub use decode::{Decoder, EVENTS, NMI_EVENT, TLB_EVENT, TLB_REMOTE_SHOOTDOWN, VECTORS};
pub use ledger::{
    sums_of, FileLongest, FileSource, FileSpan, FileSums, Ledger, LedgerFile, Span, HOURS, MINUTES,
    OTHER,
};
pub use record::{
    daemon_instance, find, instance_of, measure, remove_recording, unix_offset, ProcThreads,
    Recorder, INSTANCE,
};
pub use report::{CpuReport, SourceReport};

/// What an interruption is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A device IRQ's handler (and, on PREEMPT_RT, its thread).
    Irq,
    /// A softirq.
    Softirq,
    /// An inter-processor interrupt: function call, reschedule, irq work, TLB shootdown.
    Ipi,
    /// The local timer (the tick, hrtimers).
    Timer,
    /// Another APIC vector (thermal, threshold, error, spurious, platform).
    Vector,
    /// A non-maskable interrupt.
    Nmi,
    /// A thread that ran instead of the workload.
    Thread,
}

impl Kind {
    /// Its name in metrics labels and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Irq => "irq",
            Kind::Softirq => "softirq",
            Kind::Ipi => "ipi",
            Kind::Timer => "timer",
            Kind::Vector => "vector",
            Kind::Nmi => "nmi",
            Kind::Thread => "thread",
        }
    }
}

/// Who interrupted: a kind and a name (`IRQ 4 ttyS0`, `softirq TIMER`, `IPI reschedule`,
/// `local timer`, `kernel thread kworker/3:1`, `sh (pid 812)`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Source {
    /// Its kind.
    pub kind: Kind,
    /// Its name.
    pub name: String,
}

/// The softirq vectors' names (include/linux/interrupt.h), by number.
pub const SOFTIRQ_NAMES: [&str; 10] = [
    "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU",
];

/// One event of a CPU's stream, as the ledger needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `irq:irq_handler_entry`.
    IrqEntry {
        /// The IRQ number.
        irq: i64,
        /// Its handler's name.
        name: String,
    },
    /// `irq:irq_handler_exit`.
    IrqExit {
        /// The IRQ number.
        irq: i64,
    },
    /// `irq:softirq_entry`.
    SoftirqEntry {
        /// The vector.
        vec: u64,
    },
    /// `irq:softirq_exit`.
    SoftirqExit {
        /// The vector.
        vec: u64,
    },
    /// `irq_vectors:<name>_entry` (`local_timer`, `reschedule`, `call_function`, ...).
    VectorEntry {
        /// The tracepoint's name less `_entry`.
        name: String,
    },
    /// `irq_vectors:<name>_exit`.
    VectorExit {
        /// The tracepoint's name less `_exit`.
        name: String,
    },
    /// `nmi:nmi_handler`, recorded after the handler ran.
    Nmi {
        /// The handler (a symbol, or an address).
        handler: String,
        /// How long it ran, ns.
        delta_ns: u64,
    },
    /// `sched:sched_switch`.
    Switch {
        /// The thread leaving the CPU.
        prev_pid: i32,
        /// It leaves runnable (preempted): it waits for the CPU.
        prev_runnable: bool,
        /// The thread coming on.
        next_pid: i32,
        /// Its name.
        next_comm: String,
    },
    /// `tlb:tlb_flush`.
    TlbFlush {
        /// Why (TLB_REMOTE_SHOOTDOWN: for another CPU's change of the memory map).
        reason: i64,
    },
}

/// One interruption.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interruption {
    /// When it began, ns (the trace clock).
    pub start_ns: u64,
    /// The time it took from the CPU, less what was nested in it, ns.
    pub net_ns: u64,
    /// Who.
    pub source: Source,
    /// Counted as an event of its source: not the run of a PREEMPT_RT IRQ thread, whose
    /// IRQ was counted at its handler's entry (its time is the IRQ's all the same).
    pub counted: bool,
}

/// Whom a thread that comes on the CPU is: the idle task, the workload (not noise), or
/// another thread (noise, under this name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runner {
    /// The idle task (pid 0).
    Idle,
    /// The workload: its running is what the CPU is for.
    Workload,
    /// Noise, named.
    Other(Source),
}

/// Tells threads apart: the caller knows which are the workload's and which kernel threads.
pub trait Threads {
    /// Who thread `pid` named `comm` is.
    fn runner(&self, pid: i32, comm: &str) -> Runner;

    /// How surely workload thread `pid` is a CPU's main workload, from what the user said of
    /// it (pinned to that CPU alone, a real-time policy): of a CPU's workload threads the
    /// highest rank is the main one, and among equals the one that ran the most. 0 when
    /// nothing is known.
    fn rank(&self, _pid: i32) -> u8 {
        0
    }
}

#[derive(Debug, Clone)]
struct Open {
    source: Source,
    /// How it is closed: the exit that matches it.
    key: Key,
    start: u64,
    /// Time of interruptions nested in it.
    nested: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Key {
    Irq(i64),
    Softirq(u64),
    Vector(String),
}

#[derive(Debug, Clone)]
struct Running {
    source: Source,
    start: u64,
    nested: u64,
}

/// One CPU's ledger state between events.
#[derive(Debug, Clone, Default)]
pub struct Cpu {
    stack: Vec<Open>,
    /// A noise thread on the CPU now.
    running: Option<Running>,
    /// The CPU's main workload thread, preempted and waiting for the CPU: any other thread
    /// that runs meanwhile is noise, a workload's too (a second program pinned to the CPU).
    waiting: Option<i32>,
    /// The workload thread on the CPU now, since when.
    on: Option<(i32, u64)>,
    /// The time each workload thread ran on the CPU: of those of the highest
    /// [`Threads::rank`], the one that ran the most is its main workload (oslat's thread, not
    /// the shell someone pinned beside it).
    workload_ns: BTreeMap<i32, u64>,
    /// The first event's time, before any switch was seen: the thread that leaves at the
    /// first switch ran since (a recording started while the workload ran).
    first: Option<u64>,
    /// A switch was seen.
    switched: bool,
    /// The last switch seen went to the idle task.
    to_idle: bool,
    /// Exits without an entry (the stream started inside a handler, or lost events).
    pub unmatched: u64,
}

impl Cpu {
    /// Whether the last task switch seen went to the idle task (none seen: not known).
    pub fn idle(&self) -> bool {
        self.switched && self.to_idle
    }

    /// Take one event at `ts` (ns); the interruptions it ends are passed to `out`.
    ///
    /// Long because it is one arm per kind of trace event: the state machine of a CPU reads best in
    /// one place.
    pub fn event(
        &mut self,
        ts: u64,
        ev: &Event,
        threads: &dyn Threads,
        out: &mut impl FnMut(Interruption),
    ) {
        self.first.get_or_insert(ts);
        match ev {
            Event::IrqEntry { irq, name } => self.open(
                ts,
                Key::Irq(*irq),
                Source {
                    kind: Kind::Irq,
                    name: irq_name(*irq, name),
                },
            ),
            Event::IrqExit { irq } => self.close(ts, &Key::Irq(*irq), out),
            Event::SoftirqEntry { vec } => self.open(
                ts,
                Key::Softirq(*vec),
                Source {
                    kind: Kind::Softirq,
                    name: format!("softirq {}", softirq_name(*vec)),
                },
            ),
            Event::SoftirqExit { vec } => self.close(ts, &Key::Softirq(*vec), out),
            Event::VectorEntry { name } => self.open(ts, Key::Vector(name.clone()), vector(name)),
            Event::VectorExit { name } => self.close(ts, &Key::Vector(name.clone()), out),
            Event::Nmi { handler, delta_ns } => {
                let start = ts.saturating_sub(*delta_ns);
                self.nest(*delta_ns);
                out(Interruption {
                    start_ns: start,
                    net_ns: *delta_ns,
                    source: Source {
                        kind: Kind::Nmi,
                        name: format!("NMI {handler}"),
                    },
                    counted: true,
                });
            }
            Event::TlbFlush { reason } => {
                if *reason == decode::TLB_REMOTE_SHOOTDOWN {
                    if let Some(o) = self.stack.last_mut() {
                        if matches!(&o.key, Key::Vector(v) if v.starts_with("call_function")) {
                            o.source = Source {
                                kind: Kind::Ipi,
                                name: "IPI TLB shootdown".into(),
                            };
                        }
                    }
                }
            }
            Event::Switch {
                prev_pid,
                prev_runnable,
                next_pid,
                next_comm,
            } => {
                self.to_idle = *next_pid == 0;
                if !self.switched {
                    self.switched = true;
                    if *prev_pid != 0 && threads.runner(*prev_pid, "") == Runner::Workload {
                        self.on = Some((*prev_pid, self.first.unwrap_or(ts)));
                    }
                }
                if let Some((pid, since)) = self.on.take() {
                    *self.workload_ns.entry(pid).or_default() += ts.saturating_sub(since);
                    if self.workload_ns.len() > 64 {
                        // Threads come and go: the least run are forgotten.
                        let least = self
                            .workload_ns
                            .iter()
                            .min_by_key(|(_, &n)| n)
                            .map(|(&p, _)| p);
                        if let Some(p) = least {
                            self.workload_ns.remove(&p);
                        }
                    }
                }
                let main = self
                    .workload_ns
                    .iter()
                    .max_by_key(|(&p, &n)| (threads.rank(p), n))
                    .map(|(&p, _)| p);
                if *prev_runnable && self.waiting.is_none() && main == Some(*prev_pid) {
                    self.waiting = Some(*prev_pid);
                }
                if let Some(r) = self.running.take() {
                    let gross = ts.saturating_sub(r.start);
                    out(Interruption {
                        start_ns: r.start,
                        net_ns: gross.saturating_sub(r.nested),
                        counted: r.source.kind != Kind::Irq,
                        source: r.source,
                    });
                }
                // A switch happens in thread context: whatever was open was lost.
                self.stack.clear();
                if self.waiting == Some(*next_pid) {
                    self.waiting = None;
                }
                let runner = threads.runner(*next_pid, next_comm);
                // Run time that was no interruption of another.
                if runner == Runner::Workload && self.waiting.is_none() {
                    self.on = Some((*next_pid, ts));
                }
                let source = match runner {
                    Runner::Other(source) => Some(source),
                    Runner::Workload if self.waiting.is_some() => {
                        Some(thread_source(*next_pid, next_comm, false))
                    }
                    Runner::Workload => None,
                    // Nobody waits on an idle CPU.
                    Runner::Idle => {
                        self.waiting = None;
                        None
                    }
                };
                if let Some(source) = source {
                    self.running = Some(Running {
                        source,
                        start: ts,
                        nested: 0,
                    });
                }
            }
        }
    }

    fn open(&mut self, ts: u64, key: Key, source: Source) {
        self.stack.push(Open {
            source,
            key,
            start: ts,
            nested: 0,
        });
    }

    fn close(&mut self, ts: u64, key: &Key, out: &mut impl FnMut(Interruption)) {
        // The innermost open entry of this key; any opened after it lost their exits.
        let Some(i) = self.stack.iter().rposition(|o| &o.key == key) else {
            self.unmatched += 1;
            return;
        };
        self.stack.truncate(i + 1);
        let o = self.stack.pop().expect("found above");
        let gross = ts.saturating_sub(o.start);
        self.nest(gross);
        out(Interruption {
            start_ns: o.start,
            net_ns: gross.saturating_sub(o.nested),
            source: o.source,
            counted: true,
        });
    }

    /// `gross` ns were taken by an interruption nested in whatever is open below it.
    fn nest(&mut self, gross: u64) {
        if let Some(parent) = self.stack.last_mut() {
            parent.nested += gross;
        } else if let Some(r) = &mut self.running {
            r.nested += gross;
        }
    }
}

/// "IRQ 4 ttyS0".
fn irq_name(irq: i64, name: &str) -> String {
    if name.is_empty() {
        format!("IRQ {irq}")
    } else {
        format!("IRQ {irq} {name}")
    }
}

fn softirq_name(vec: u64) -> String {
    SOFTIRQ_NAMES
        .get(vec as usize)
        .map_or_else(|| vec.to_string(), |n| n.to_string())
}

/// An APIC vector's source by its tracepoint's name.
fn vector(name: &str) -> Source {
    let (kind, text) = match name {
        "local_timer" => (Kind::Timer, "local timer".to_string()),
        "reschedule" => (Kind::Ipi, "IPI reschedule".to_string()),
        "call_function" => (Kind::Ipi, "IPI function call".to_string()),
        "call_function_single" => (Kind::Ipi, "IPI function call single".to_string()),
        "irq_work" => (Kind::Ipi, "IPI irq work".to_string()),
        other => (Kind::Vector, format!("vector {other}")),
    };
    Source { kind, name: text }
}

/// A thread's source: the IRQ its name says for a PREEMPT_RT IRQ thread (`irq/4-ttyS0`),
/// else `kernel thread NAME` or `NAME (pid N)`.
pub fn thread_source(pid: i32, comm: &str, kthread: bool) -> Source {
    if kthread {
        if let Some((n, dev)) = comm
            .strip_prefix("irq/")
            .and_then(|r| r.split_once('-'))
            .and_then(|(n, d)| n.parse::<i64>().ok().map(|n| (n, d)))
        {
            return Source {
                kind: Kind::Irq,
                name: irq_name(n, dev),
            };
        }
        return Source {
            kind: Kind::Thread,
            name: format!("kernel thread {comm}"),
        };
    }
    Source {
        kind: Kind::Thread,
        name: format!("{comm} (pid {pid})"),
    }
}

/// What the ledger keeps of one source on one CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Interruptions.
    pub events: u64,
    /// Their net time, ns.
    pub ns: u64,
    /// The longest, ns.
    pub longest_ns: u64,
}

/// The histogram's upper bounds, ns: 1 us to 10 ms, 20 us among them.
pub const BUCKETS_NS: [u64; 13] = [
    1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000, 2_000_000,
    5_000_000, 10_000_000,
];

/// One CPU's sums: by source, the durations' histogram, the longest interruption.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sums {
    /// By source.
    pub by_source: BTreeMap<Source, Tally>,
    /// Interruptions at or under each of [`BUCKETS_NS`] (not cumulative), and over the last.
    pub buckets: [u64; BUCKETS_NS.len() + 1],
    /// The longest so far.
    pub longest: Option<Interruption>,
}

impl Sums {
    /// Count one interruption.
    pub fn add(&mut self, i: &Interruption) {
        let t = self.by_source.entry(i.source.clone()).or_default();
        t.events += u64::from(i.counted);
        t.ns += i.net_ns;
        t.longest_ns = t.longest_ns.max(i.net_ns);
        let b = BUCKETS_NS
            .iter()
            .position(|&b| i.net_ns <= b)
            .unwrap_or(BUCKETS_NS.len());
        self.buckets[b] += 1;
        if self.longest.as_ref().map_or(true, |l| l.net_ns < i.net_ns) {
            self.longest = Some(i.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pids 100 and 101 are workloads, 0 idle, kthreads are below 50.
    struct T;
    impl Threads for T {
        fn runner(&self, pid: i32, comm: &str) -> Runner {
            match pid {
                0 => Runner::Idle,
                100 | 101 => Runner::Workload,
                p => Runner::Other(thread_source(p, comm, p < 50)),
            }
        }
    }

    fn run(events: &[(u64, Event)]) -> (Vec<(String, u64, u64)>, Cpu) {
        let mut cpu = Cpu::default();
        let mut got = Vec::new();
        for (ts, e) in events {
            cpu.event(*ts, e, &T, &mut |i: Interruption| {
                got.push((i.source.name, i.start_ns, i.net_ns))
            });
        }
        (got, cpu)
    }

    fn sw(prev: i32, next: i32, comm: &str) -> Event {
        Event::Switch {
            prev_pid: prev,
            prev_runnable: false,
            next_pid: next,
            next_comm: comm.into(),
        }
    }

    /// A switch away from a thread that stays runnable (preempted).
    fn preempt(prev: i32, next: i32, comm: &str) -> Event {
        Event::Switch {
            prev_pid: prev,
            prev_runnable: true,
            next_pid: next,
            next_comm: comm.into(),
        }
    }

    /// A CPU is idle when the last task switch seen went to the idle task; not known before
    /// the first switch.
    #[test]
    fn a_cpu_is_idle_after_a_switch_to_the_idle_task() {
        let (_, cpu) = run(&[(
            0,
            Event::VectorEntry {
                name: "local_timer".into(),
            },
        )]);
        assert!(!cpu.idle(), "no switch seen");
        let (_, cpu) = run(&[(0, sw(100, 0, "swapper/3"))]);
        assert!(cpu.idle());
        let (_, cpu) = run(&[(0, sw(100, 0, "swapper/3")), (10, sw(0, 101, "ktimers/3"))]);
        assert!(!cpu.idle());
        let (_, cpu) = run(&[
            (0, sw(0, 101, "ktimers/3")),
            (10, sw(101, 0, "swapper/3")),
            (
                20,
                Event::VectorEntry {
                    name: "local_timer".into(),
                },
            ),
        ]);
        assert!(cpu.idle(), "an interrupt of the idle task leaves it idle");
    }

    /// A second program pinned to the CPU (a workload by the rule) that preempts the main
    /// workload (the one that ran the most) is noise for the time the workload waited; the
    /// same program running while the workload sleeps is not, nor is the main workload
    /// when it preempts the other.
    #[test]
    fn a_workload_that_preempts_another_is_noise() {
        let (got, _) = run(&[
            (0, sw(0, 100, "oslat")),
            (1_000, preempt(100, 101, "sh")),
            (31_000, preempt(101, 100, "oslat")),
            // The workload sleeps: the other runs on a CPU nobody waits for.
            (40_000, sw(100, 101, "sh")),
            (50_000, sw(101, 0, "swapper/3")),
            (60_000, sw(0, 100, "oslat")),
            // The shell, preempted in its turn by the main workload: oslat is no noise.
            (70_000, sw(100, 101, "sh")),
            (71_000, preempt(101, 100, "oslat")),
            (90_000, sw(100, 0, "swapper/3")),
        ]);
        assert_eq!(got, vec![("sh (pid 101)".to_string(), 1_000, 30_000)]);
        // A recording that starts while the workload runs: it ran since the first event.
        let (got, _) = run(&[
            (
                0,
                Event::VectorEntry {
                    name: "local_timer".into(),
                },
            ),
            (
                500,
                Event::VectorExit {
                    name: "local_timer".into(),
                },
            ),
            (100_000, preempt(100, 101, "sh")),
            (103_000, sw(101, 100, "oslat")),
            (110_000, preempt(100, 101, "sh")),
            (112_000, sw(101, 100, "oslat")),
        ]);
        let shell: Vec<_> = got.iter().filter(|g| g.0 == "sh (pid 101)").collect();
        assert_eq!(shell.len(), 2, "{got:?}");
    }

    /// Pid 101 (a shell that ran first and longest) and 100 (the workload the user pinned to
    /// this CPU alone, real-time): the ranked one is the main workload from its first run.
    #[test]
    fn the_workload_the_user_pinned_is_the_main_one_whoever_ran_more() {
        struct Ranked;
        impl Threads for Ranked {
            fn runner(&self, pid: i32, comm: &str) -> Runner {
                T.runner(pid, comm)
            }
            fn rank(&self, pid: i32) -> u8 {
                u8::from(pid == 100) * 2
            }
        }
        let events = [
            (0, sw(0, 101, "sh")),
            (500_000, sw(101, 100, "oslat")),
            (501_000, preempt(100, 101, "sh")),
            (531_000, sw(101, 100, "oslat")),
        ];
        let mut cpu = Cpu::default();
        let mut got = Vec::new();
        for (ts, e) in &events {
            cpu.event(*ts, e, &Ranked, &mut |i: Interruption| {
                got.push((i.source.name, i.start_ns, i.net_ns))
            });
        }
        assert_eq!(got, vec![("sh (pid 101)".to_string(), 501_000, 30_000)]);
        // Unranked, the shell that ran the most is taken for the workload: no noise.
        let (got, _) = run(&events);
        assert_eq!(got, vec![]);
    }

    /// A flush asked by another CPU inside a function call IPI makes that IPI a TLB
    /// shootdown; a flush of a context switch leaves a function call as it is.
    #[test]
    fn a_remote_flush_names_a_tlb_shootdown() {
        let call = |entry: bool| {
            let name = "call_function_single".to_string();
            if entry {
                Event::VectorEntry { name }
            } else {
                Event::VectorExit { name }
            }
        };
        let (got, _) = run(&[
            (1_000, call(true)),
            (1_500, Event::TlbFlush { reason: 1 }),
            (3_000, call(false)),
            (5_000, call(true)),
            (5_500, Event::TlbFlush { reason: 0 }),
            (6_000, call(false)),
        ]);
        assert_eq!(
            got,
            vec![
                ("IPI TLB shootdown".to_string(), 1_000, 2_000),
                ("IPI function call single".to_string(), 5_000, 1_000)
            ]
        );
    }

    /// The timer's softirq runs on the timer interrupt's exit and a device IRQ lands in it:
    /// each is charged its own time, the softirq less the IRQ's.
    #[test]
    fn nested_interruptions_are_charged_net() {
        let (got, cpu) = run(&[
            (
                1_000,
                Event::VectorEntry {
                    name: "local_timer".into(),
                },
            ),
            (
                1_000,
                Event::VectorExit {
                    name: "local_timer".into(),
                },
            ),
            (
                2_000,
                Event::VectorEntry {
                    name: "local_timer".into(),
                },
            ),
            (3_500, Event::SoftirqEntry { vec: 1 }),
            (
                4_000,
                Event::IrqEntry {
                    irq: 4,
                    name: "ttyS0".into(),
                },
            ),
            (9_000, Event::IrqExit { irq: 4 }),
            (10_000, Event::SoftirqExit { vec: 1 }),
            (
                10_500,
                Event::VectorExit {
                    name: "local_timer".into(),
                },
            ),
        ]);
        assert_eq!(
            got,
            [
                ("local timer".into(), 1_000, 0),
                ("IRQ 4 ttyS0".into(), 4_000, 5_000),
                ("softirq TIMER".into(), 3_500, 1_500),
                ("local timer".into(), 2_000, 2_000),
            ]
        );
        assert_eq!(cpu.unmatched, 0);
    }

    /// A kworker switched in for the workload is an interruption until the workload is back,
    /// less the IPI that came meanwhile; the idle task and the workload are none; an IRQ
    /// thread of PREEMPT_RT counts for its IRQ.
    #[test]
    fn threads_that_ran_instead_of_the_workload() {
        let (got, _) = run(&[
            (0, sw(0, 100, "oslat")),
            (1_000, sw(100, 20, "kworker/3:1")),
            (
                2_000,
                Event::VectorEntry {
                    name: "reschedule".into(),
                },
            ),
            (
                2_500,
                Event::VectorExit {
                    name: "reschedule".into(),
                },
            ),
            (31_000, sw(20, 100, "oslat")),
            (40_000, sw(100, 21, "irq/4-ttyS0")),
            (47_000, sw(21, 0, "swapper/3")),
            (50_000, sw(0, 400, "logger")),
            (50_700, sw(400, 100, "oslat")),
        ]);
        assert_eq!(
            got,
            [
                ("IPI reschedule".into(), 2_000, 500),
                ("kernel thread kworker/3:1".into(), 1_000, 29_500),
                ("IRQ 4 ttyS0".into(), 40_000, 7_000),
                ("logger (pid 400)".into(), 50_000, 700),
            ]
        );
        // The IRQ thread's run is the IRQ's time, not one more IRQ.
        let mut cpu = Cpu::default();
        let mut sums = Sums::default();
        for (ts, e) in [
            (0, sw(0, 100, "oslat")),
            (
                10,
                Event::IrqEntry {
                    irq: 4,
                    name: "ttyS0".into(),
                },
            ),
            (20, Event::IrqExit { irq: 4 }),
            (40_000, sw(100, 21, "irq/4-ttyS0")),
            (47_000, sw(21, 100, "oslat")),
        ] {
            cpu.event(ts, &e, &T, &mut |i: Interruption| sums.add(&i));
        }
        let t = sums.by_source.values().next().unwrap();
        assert_eq!(sums.by_source.len(), 1);
        assert_eq!((t.events, t.ns, t.longest_ns), (1, 7_010, 7_000));
    }

    /// An exit whose entry was never seen is counted apart; an entry whose exit was lost
    /// is dropped when an outer one closes; an NMI comes with its own length.
    #[test]
    fn lost_and_unmatched_events_and_nmis() {
        let (got, cpu) = run(&[
            (500, Event::IrqExit { irq: 9 }),
            (1_000, Event::SoftirqEntry { vec: 9 }),
            (
                1_100,
                Event::IrqEntry {
                    irq: 11,
                    name: String::new(),
                },
            ),
            (5_000, Event::SoftirqExit { vec: 9 }),
            (
                9_000,
                Event::Nmi {
                    handler: "perf_event_nmi_handler".into(),
                    delta_ns: 3_000,
                },
            ),
        ]);
        assert_eq!(
            got,
            [
                ("softirq RCU".into(), 1_000, 4_000),
                ("NMI perf_event_nmi_handler".into(), 6_000, 3_000),
            ]
        );
        assert_eq!(cpu.unmatched, 1);
    }

    #[test]
    fn sums_rank_bucket_and_keep_the_longest() {
        let mut s = Sums::default();
        let i = |name: &str, ns: u64| Interruption {
            start_ns: ns,
            net_ns: ns,
            counted: true,
            source: Source {
                kind: Kind::Irq,
                name: name.into(),
            },
        };
        for x in [
            i("a", 500),
            i("a", 1_000),
            i("b", 25_000),
            i("a", 20_000_000),
        ] {
            s.add(&x);
        }
        assert_eq!(s.buckets[0], 2, "500 ns and 1 us: at or under 1 us");
        assert_eq!(s.buckets[5], 1, "25 us: under 50 us");
        assert_eq!(s.buckets[BUCKETS_NS.len()], 1, "20 ms: over 10 ms");
        assert_eq!(s.longest.as_ref().unwrap().net_ns, 20_000_000);
        let a = s.by_source.iter().find(|(k, _)| k.name == "a").unwrap().1;
        assert_eq!((a.events, a.ns, a.longest_ns), (3, 20_001_500, 20_000_000));
        assert!(BUCKETS_NS.contains(&20_000));
    }
}
