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

use std::collections::BTreeMap;
use std::os::unix::fs::OpenOptionsExt;

use crate::cpuset::CpuSet;
use crate::error::{Error, Result};
use crate::sysroot::SysRoot;

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
        /// The thread coming on.
        next_pid: i32,
        /// Its name.
        next_comm: String,
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
    /// Exits without an entry (the stream started inside a handler, or lost events).
    pub unmatched: u64,
}

impl Cpu {
    /// Take one event at `ts` (ns); the interruptions it ends are passed to `out`.
    pub fn event(
        &mut self,
        ts: u64,
        ev: &Event,
        threads: &dyn Threads,
        out: &mut impl FnMut(Interruption),
    ) {
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
            Event::Switch {
                next_pid,
                next_comm,
                ..
            } => {
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
                if let Runner::Other(source) = threads.runner(*next_pid, next_comm) {
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

/// The tracepoints the ledger records, below an instance's `events/`. The vectors present
/// differ by kernel and architecture: those without a directory are left out.
pub const EVENTS: [&str; 5] = [
    "irq/irq_handler_entry",
    "irq/irq_handler_exit",
    "irq/softirq_entry",
    "irq/softirq_exit",
    "sched/sched_switch",
];

/// The NMI tracepoint (after the handler ran, with its length).
pub const NMI_EVENT: &str = "nmi/nmi_handler";

/// The APIC vectors' tracepoints (`irq_vectors/<name>_entry` and `_exit`, x86).
pub const VECTORS: [&str; 11] = [
    "local_timer",
    "reschedule",
    "call_function",
    "call_function_single",
    "irq_work",
    "x86_platform_ipi",
    "thermal_apic",
    "threshold_apic",
    "deferred_error_apic",
    "error_apic",
    "spurious_apic",
];

#[derive(Debug, Clone)]
enum Decode {
    IrqEntry {
        irq: crate::rawtrace::Field,
        name: crate::rawtrace::Field,
    },
    IrqExit {
        irq: crate::rawtrace::Field,
    },
    SoftirqEntry {
        vec: crate::rawtrace::Field,
    },
    SoftirqExit {
        vec: crate::rawtrace::Field,
    },
    VectorEntry(String),
    VectorExit(String),
    Nmi {
        handler: crate::rawtrace::Field,
        delta: crate::rawtrace::Field,
    },
    Switch {
        prev_pid: crate::rawtrace::Field,
        next_pid: crate::rawtrace::Field,
        next_comm: crate::rawtrace::Field,
    },
}

/// Turns raw records into [`Event`]s, by the `format` files of the events recorded.
#[derive(Debug, Clone, Default)]
pub struct Decoder {
    by_id: std::collections::HashMap<u16, Decode>,
}

impl Decoder {
    /// Learn an event from its `format` file (`system/name` as in [`EVENTS`]); an event the
    /// ledger does not know, or a format without the fields it reads, is an error naming it.
    pub fn learn(
        &mut self,
        event: &str,
        format: &crate::rawtrace::Format,
    ) -> std::result::Result<(), String> {
        let f = |name: &str| {
            format
                .field(name)
                .cloned()
                .ok_or_else(|| format!("{event}: no field {name} in its format"))
        };
        let d = match event {
            "irq/irq_handler_entry" => Decode::IrqEntry {
                irq: f("irq")?,
                name: f("name")?,
            },
            "irq/irq_handler_exit" => Decode::IrqExit { irq: f("irq")? },
            "irq/softirq_entry" => Decode::SoftirqEntry { vec: f("vec")? },
            "irq/softirq_exit" => Decode::SoftirqExit { vec: f("vec")? },
            "nmi/nmi_handler" => Decode::Nmi {
                handler: f("handler")?,
                delta: f("delta_ns")?,
            },
            "sched/sched_switch" => Decode::Switch {
                prev_pid: f("prev_pid")?,
                next_pid: f("next_pid")?,
                next_comm: f("next_comm")?,
            },
            other => match other.strip_prefix("irq_vectors/").and_then(|v| {
                v.strip_suffix("_entry")
                    .map(|n| (n, true))
                    .or_else(|| v.strip_suffix("_exit").map(|n| (n, false)))
            }) {
                Some((n, true)) => Decode::VectorEntry(n.to_string()),
                Some((n, false)) => Decode::VectorExit(n.to_string()),
                None => return Err(format!("{other}: not an event of the noise ledger")),
            },
        };
        self.by_id.insert(format.id, d);
        Ok(())
    }

    /// The event of one record; `None` for a record of an event not learnt, or one too short
    /// for its fields.
    pub fn decode(&self, rec: &[u8]) -> Option<Event> {
        let d = self.by_id.get(&crate::rawtrace::common_type(rec)?)?;
        Some(match d {
            Decode::IrqEntry { irq, name } => Event::IrqEntry {
                irq: irq.i64_of(rec)?,
                name: name.str_of(rec).unwrap_or_default().to_string(),
            },
            Decode::IrqExit { irq } => Event::IrqExit {
                irq: irq.i64_of(rec)?,
            },
            Decode::SoftirqEntry { vec } => Event::SoftirqEntry {
                vec: vec.u64_of(rec)?,
            },
            Decode::SoftirqExit { vec } => Event::SoftirqExit {
                vec: vec.u64_of(rec)?,
            },
            Decode::VectorEntry(n) => Event::VectorEntry { name: n.clone() },
            Decode::VectorExit(n) => Event::VectorExit { name: n.clone() },
            Decode::Nmi { handler, delta } => Event::Nmi {
                // A function pointer: its address (the kernel prints the symbol).
                handler: format!("{:#x}", handler.u64_of(rec)?),
                delta_ns: delta.u64_of(rec)?,
            },
            Decode::Switch {
                prev_pid,
                next_pid,
                next_comm,
            } => Event::Switch {
                prev_pid: prev_pid.i64_of(rec)? as i32,
                next_pid: next_pid.i64_of(rec)? as i32,
                next_comm: next_comm.str_of(rec).unwrap_or_default().to_string(),
            },
        })
    }
}

/// The tracefs directory with instances and the ledger's tracepoints, or why there is none.
pub fn find(root: &SysRoot) -> std::result::Result<String, String> {
    crate::tracefs::find(root, |dir| {
        EVENTS
            .iter()
            .find(|e| !root.exists(format!("{dir}/events/{e}")))
            .map(|e| format!("the kernel has no {e} tracepoint ({dir}/events/{e})"))
    })
}

/// The tracefs instance the ledger records in.
pub const INSTANCE: &str = "isold-noise";

/// A recording of the isolated CPUs' interruptions in the tracefs instance
/// [`INSTANCE`], read without a blocking reader: each CPU's `trace_pipe_raw` opened
/// O_NONBLOCK and read on the caller's timer from a housekeeping CPU, so the CPUs recorded
/// never wake a reader (the ring buffer's wake-up is an irq_work on the writing CPU).
/// Everything that interrupts every CPU (making the instance, enabling its events: static
/// keys patched on each) happens in [`Recorder::start`], before the workload should start.
#[derive(Debug)]
pub struct Recorder {
    dir: String,
    layout: crate::rawtrace::PageLayout,
    decoder: Decoder,
    cpus: Vec<(usize, std::fs::File, Cpu)>,
    /// Events the recorder did not know how to read (a page that did not parse).
    pub bad_pages: u64,
    /// Pages whose writer had overrun the reader (events lost before them).
    pub lost_pages: u64,
}

impl Recorder {
    /// Make the instance below `tracefs` (removing one a killed daemon left), record on
    /// `cpus` only, enable the ledger's events that this kernel has, and open each CPU's
    /// raw pipe. The instance keeps the buffers the kernel made (a resize queues work on
    /// every CPU).
    pub fn start(root: &SysRoot, tracefs: &str, cpus: &CpuSet) -> Result<Recorder> {
        let dir = format!("{tracefs}/instances/{INSTANCE}");
        if root.exists(&dir) {
            let _ = root.write(format!("{dir}/events/enable"), "0");
            crate::tracefs::remove_instance(root, &dir)?;
        }
        crate::tracefs::make_instance(root, tracefs, &dir, &[])?;
        let made = (|| -> Result<Recorder> {
            root.write(format!("{dir}/tracing_cpumask"), cpus.to_mask_string())?;
            let layout = match root.read_to_string(format!("{dir}/events/header_page")) {
                Ok(t) => crate::rawtrace::PageLayout::parse(&t).map_err(|reason| Error::Parse {
                    path: root.path(format!("{dir}/events/header_page")),
                    input: t.lines().next().unwrap_or_default().into(),
                    reason,
                })?,
                Err(_) => crate::rawtrace::PageLayout::default(),
            };
            let mut names: Vec<String> = EVENTS.iter().map(|e| e.to_string()).collect();
            names.push(NMI_EVENT.to_string());
            for v in VECTORS {
                names.push(format!("irq_vectors/{v}_entry"));
                names.push(format!("irq_vectors/{v}_exit"));
            }
            let mut decoder = Decoder::default();
            for e in &names {
                if !root.exists(format!("{dir}/events/{e}")) {
                    if EVENTS.contains(&e.as_str()) {
                        return Err(Error::Parse {
                            path: root.path(format!("{dir}/events/{e}")),
                            input: String::new(),
                            reason: "the kernel has no such tracepoint".into(),
                        });
                    }
                    continue;
                }
                let format = crate::rawtrace::Format::read(root, &dir, e)?;
                decoder.learn(e, &format).map_err(|reason| Error::Parse {
                    path: root.path(format!("{dir}/events/{e}/format")),
                    input: format.name.clone(),
                    reason,
                })?;
                root.write(format!("{dir}/events/{e}/enable"), "1")?;
            }
            let mut open = Vec::new();
            for cpu in cpus.iter() {
                let path = root.path(format!("{dir}/per_cpu/cpu{cpu}/trace_pipe_raw"));
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(&path)
                    .map_err(|source| Error::Read {
                        path: path.clone(),
                        source,
                    })?;
                open.push((cpu, f, Cpu::default()));
            }
            Ok(Recorder {
                dir: dir.clone(),
                layout,
                decoder,
                cpus: open,
                bad_pages: 0,
                lost_pages: 0,
            })
        })();
        if made.is_err() {
            let _ = root.write(format!("{dir}/events/enable"), "0");
            let _ = crate::tracefs::remove_instance(root, &dir);
        }
        made
    }

    /// Read what each CPU recorded since the last call, to the end of what is there (never
    /// waiting), and pass each interruption with its CPU to `out`.
    pub fn read(
        &mut self,
        threads: &dyn Threads,
        out: &mut impl FnMut(usize, Interruption),
    ) -> Result<usize> {
        use std::io::Read;
        let mut page = vec![0u8; 4096];
        let mut n = 0;
        for (cpu, file, state) in &mut self.cpus {
            loop {
                let got = match file.read(&mut page) {
                    Ok(0) => break,
                    Ok(got) => got,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(source) => {
                        return Err(Error::Read {
                            path: format!("{}/per_cpu/cpu{cpu}/trace_pipe_raw", self.dir).into(),
                            source,
                        })
                    }
                };
                let decoder = &self.decoder;
                let parsed = crate::rawtrace::parse_page(&page[..got], &self.layout, |ts, rec| {
                    if let Some(ev) = decoder.decode(rec) {
                        state.event(ts, &ev, threads, &mut |i| out(*cpu, i));
                        n += 1;
                    }
                });
                match parsed {
                    Ok(info) if info.missed => self.lost_pages += 1,
                    Ok(_) => {}
                    Err(_) => self.bad_pages += 1,
                }
            }
        }
        Ok(n)
    }

    /// Stop recording and remove the instance.
    pub fn stop(self, root: &SysRoot) -> Result<()> {
        let _ = root.write(format!("{}/events/enable", self.dir), "0");
        drop(self.cpus);
        crate::tracefs::remove_instance(root, &self.dir)
    }
}

/// The threads of the running system (or a tree) as the ledger tells them apart: the idle
/// task, the workload (as the audit has it: user threads inside the CPUs, or allow-listed),
/// and the rest by name, each read once (`/proc/<tid>`).
pub struct ProcThreads<'a> {
    root: &'a SysRoot,
    workloads: crate::audit::Workloads<'a>,
    seen: std::cell::RefCell<std::collections::HashMap<i32, Runner>>,
    /// Threads left out (the observer's own): neither noise nor workload.
    pub ignore: std::collections::HashSet<i32>,
}

impl std::fmt::Debug for ProcThreads<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcThreads")
            .field("seen", &self.seen.borrow().len())
            .finish()
    }
}

impl<'a> ProcThreads<'a> {
    /// The threads under `root`, the workloads of `scope`.
    pub fn new(root: &'a SysRoot, scope: &'a crate::audit::Scope) -> Self {
        ProcThreads {
            root,
            workloads: crate::audit::Workloads::new(root, scope),
            seen: Default::default(),
            ignore: Default::default(),
        }
    }
}

impl Threads for ProcThreads<'_> {
    fn runner(&self, pid: i32, comm: &str) -> Runner {
        if pid == 0 || self.ignore.contains(&pid) {
            return Runner::Idle;
        }
        if let Some(r) = self.seen.borrow().get(&pid) {
            return r.clone();
        }
        // The event's pid is a thread id: /proc/<tid>/task/<tid> is that thread.
        let r = match crate::tasks::read_thread(self.root, pid, pid) {
            Ok(Some(t)) if self.workloads.is(&t) => Runner::Workload,
            Ok(Some(t)) => Runner::Other(thread_source(t.pid, comm, t.is_kthread())),
            // Gone already: by its name.
            _ => Runner::Other(thread_source(pid, comm, false)),
        };
        self.seen.borrow_mut().insert(pid, r.clone());
        r
    }
}

/// One source's figures (`isold noise --json`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SourceReport {
    /// [`Kind::as_str`].
    pub kind: String,
    /// Its name.
    pub source: String,
    /// Interruptions.
    pub events: u64,
    /// Their net time, seconds.
    pub seconds: f64,
    /// The longest, seconds.
    pub longest_seconds: f64,
    /// What removes it.
    pub fix: String,
}

/// One CPU's figures (`isold noise --json`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CpuReport {
    /// The CPU.
    pub cpu: usize,
    /// Interruptions.
    pub events: u64,
    /// Their net time, seconds.
    pub seconds: f64,
    /// The longest interruption, seconds (0 with none).
    pub longest_seconds: f64,
    /// Its source ("" with none).
    pub longest_source: String,
    /// Its kind ("" with none).
    pub longest_kind: String,
    /// When it began, by the trace clock (seconds since boot, about the uptime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_at_seconds: Option<f64>,
    /// The sources, the most time first.
    pub sources: Vec<SourceReport>,
    /// The durations' histogram: (upper bound in seconds, interruptions at or under it and
    /// over the bound before); the last bound is infinite (null in JSON).
    pub buckets: Vec<(Option<f64>, u64)>,
}

impl CpuReport {
    /// The report of one CPU's sums; `fix` names the fix of a source.
    pub fn of(cpu: usize, sums: &Sums, fix: impl Fn(&Source) -> String) -> CpuReport {
        let mut sources: Vec<SourceReport> = sums
            .by_source
            .iter()
            .map(|(s, t)| SourceReport {
                kind: s.kind.as_str().into(),
                source: s.name.clone(),
                events: t.events,
                seconds: t.ns as f64 / 1e9,
                longest_seconds: t.longest_ns as f64 / 1e9,
                fix: fix(s),
            })
            .collect();
        sources.sort_by(|a, b| {
            b.seconds
                .total_cmp(&a.seconds)
                .then_with(|| b.events.cmp(&a.events))
                .then_with(|| a.source.cmp(&b.source))
        });
        let mut buckets: Vec<(Option<f64>, u64)> = BUCKETS_NS
            .iter()
            .zip(sums.buckets.iter())
            .map(|(&b, &n)| (Some(b as f64 / 1e9), n))
            .collect();
        buckets.push((None, sums.buckets[BUCKETS_NS.len()]));
        let l = sums.longest.as_ref();
        CpuReport {
            cpu,
            events: sources.iter().map(|s| s.events).sum(),
            seconds: sums.by_source.values().map(|t| t.ns).sum::<u64>() as f64 / 1e9,
            longest_seconds: l.map_or(0.0, |l| l.net_ns as f64 / 1e9),
            longest_source: l.map_or_else(String::new, |l| l.source.name.clone()),
            longest_kind: l.map_or_else(String::new, |l| l.source.kind.as_str().into()),
            longest_at_seconds: l.map(|l| l.start_ns as f64 / 1e9),
            sources,
            buckets,
        }
    }
}

/// Record the interruptions of `cpus` for `window` (reading every `every`), with the
/// workloads of `scope`; this process and its threads are left out; `ready` is called once
/// the recording runs (the window starts then). The sums by CPU and what the recorder lost.
pub fn measure(
    root: &SysRoot,
    tracefs: &str,
    scope: &crate::audit::Scope,
    window: std::time::Duration,
    every: std::time::Duration,
    ready: impl FnOnce(),
) -> Result<(BTreeMap<usize, Sums>, Recorder)> {
    let mut rec = Recorder::start(root, tracefs, &scope.cpus)?;
    let mut threads = ProcThreads::new(root, scope);
    if root.is_host() {
        if let Ok(tids) = crate::procfs::thread_ids(root, std::process::id() as i32) {
            threads.ignore.extend(tids);
        }
    }
    let mut sums: BTreeMap<usize, Sums> = scope.cpus.iter().map(|c| (c, Sums::default())).collect();
    // What was recorded before the window (the events' enabling) is dropped.
    rec.read(&threads, &mut |_, _| {})?;
    ready();
    let end = std::time::Instant::now() + window;
    loop {
        let now = std::time::Instant::now();
        if now >= end {
            break;
        }
        std::thread::sleep(every.min(end - now));
        rec.read(&threads, &mut |cpu, i| {
            sums.entry(cpu).or_default().add(&i);
        })?;
    }
    Ok((sums, rec))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pid 100 is the workload, 0 idle, kthreads are below 50.
    struct T;
    impl Threads for T {
        fn runner(&self, pid: i32, comm: &str) -> Runner {
            match pid {
                0 => Runner::Idle,
                100 => Runner::Workload,
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
            next_pid: next,
            next_comm: comm.into(),
        }
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

    /// Records decoded by their formats: an IRQ's entry with its name, a switch, a record
    /// of an event not learnt.
    #[test]
    fn records_are_decoded_by_their_formats() {
        let entry = crate::rawtrace::Format::parse("name: irq_handler_entry\nID: 139\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\tfield:int irq;\toffset:8;\tsize:4;\tsigned:1;\n\tfield:__data_loc char[] name;\toffset:12;\tsize:4;\tsigned:1;\n").unwrap();
        let switch = crate::rawtrace::Format::parse("name: sched_switch\nID: 316\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n").unwrap();
        let timer = crate::rawtrace::Format::parse("name: local_timer_entry\nID: 77\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:int vector;\toffset:8;\tsize:4;\tsigned:1;\n").unwrap();
        let mut d = Decoder::default();
        d.learn("irq/irq_handler_entry", &entry).unwrap();
        d.learn("sched/sched_switch", &switch).unwrap();
        d.learn("irq_vectors/local_timer_entry", &timer).unwrap();
        assert!(d
            .learn("irq/irq_handler_exit", &timer)
            .unwrap_err()
            .contains("no field irq"));
        assert!(d.learn("block/block_rq_issue", &timer).is_err());
        let mut rec = vec![0u8; 24];
        rec[0..2].copy_from_slice(&139u16.to_le_bytes());
        rec[8..12].copy_from_slice(&4i32.to_le_bytes());
        rec[12..16].copy_from_slice(&(16u32 | (6 << 16)).to_le_bytes());
        rec[16..22].copy_from_slice(b"ttyS0\0");
        assert_eq!(
            d.decode(&rec),
            Some(Event::IrqEntry {
                irq: 4,
                name: "ttyS0".into()
            })
        );
        let mut sw = vec![0u8; 64];
        sw[0..2].copy_from_slice(&316u16.to_le_bytes());
        sw[24..28].copy_from_slice(&812i32.to_le_bytes());
        sw[40..51].copy_from_slice(b"kworker/3:1");
        sw[56..60].copy_from_slice(&33i32.to_le_bytes());
        assert_eq!(
            d.decode(&sw),
            Some(Event::Switch {
                prev_pid: 812,
                next_pid: 33,
                next_comm: "kworker/3:1".into()
            })
        );
        let mut t = vec![0u8; 12];
        t[0..2].copy_from_slice(&77u16.to_le_bytes());
        assert_eq!(
            d.decode(&t),
            Some(Event::VectorEntry {
                name: "local_timer".into()
            })
        );
        t[0..2].copy_from_slice(&78u16.to_le_bytes());
        assert_eq!(d.decode(&t), None);
        assert_eq!(d.decode(&sw[..40]), None);
    }

    /// A CPU's raw pipe read to its end: the pages' records decoded and made interruptions,
    /// a page the writer overran counted.
    #[test]
    fn a_recorder_reads_each_cpus_pages_to_the_end() {
        let fmt = |name: &str, id: u16, fields: &str| {
            crate::rawtrace::Format::parse(&format!(
                "name: {name}\nID: {id}\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n{fields}"
            ))
            .unwrap()
        };
        let mut decoder = Decoder::default();
        decoder
            .learn(
                "irq/irq_handler_entry",
                &fmt(
                    "irq_handler_entry",
                    10,
                    "\tfield:int irq;\toffset:8;\tsize:4;\tsigned:1;\n\tfield:__data_loc char[] name;\toffset:12;\tsize:4;\tsigned:1;\n",
                ),
            )
            .unwrap();
        decoder
            .learn(
                "irq/irq_handler_exit",
                &fmt(
                    "irq_handler_exit",
                    11,
                    "\tfield:int irq;\toffset:8;\tsize:4;\tsigned:1;\n",
                ),
            )
            .unwrap();
        let rec = |id: u16, irq: i32| {
            let mut r = vec![0u8; 24];
            r[0..2].copy_from_slice(&id.to_le_bytes());
            r[8..12].copy_from_slice(&irq.to_le_bytes());
            r[12..16].copy_from_slice(&(16u32 | (6 << 16)).to_le_bytes());
            r[16..22].copy_from_slice(b"ttyS0\0");
            r
        };
        let page = |ts: u64, flags: u64, recs: &[(u32, Vec<u8>)]| {
            let mut data = Vec::new();
            for (delta, r) in recs {
                data.extend_from_slice(&((r.len() as u32 / 4) | (delta << 5)).to_le_bytes());
                data.extend_from_slice(r);
            }
            let mut p = ts.to_le_bytes().to_vec();
            p.extend_from_slice(&(data.len() as u64 | flags).to_le_bytes());
            p.extend_from_slice(&data);
            p.resize(4096, 0);
            p
        };
        let dir = tempfile::tempdir().unwrap();
        let pipe = dir.path().join("trace_pipe_raw");
        let mut bytes = page(1_000, 0, &[(0, rec(10, 4)), (7_000, rec(11, 4))]);
        bytes.extend(page(
            50_000,
            1 << 31,
            &[(0, rec(10, 4)), (25_000, rec(11, 4))],
        ));
        std::fs::write(&pipe, bytes).unwrap();
        let mut r = Recorder {
            dir: "/sys/kernel/tracing/instances/isold-noise".into(),
            layout: crate::rawtrace::PageLayout::default(),
            decoder,
            cpus: vec![(3, std::fs::File::open(&pipe).unwrap(), Cpu::default())],
            bad_pages: 0,
            lost_pages: 0,
        };
        let mut got = Vec::new();
        let n = r
            .read(&T, &mut |cpu, i| {
                got.push((cpu, i.source.name, i.start_ns, i.net_ns))
            })
            .unwrap();
        assert_eq!(n, 4);
        assert_eq!(
            got,
            [
                (3, "IRQ 4 ttyS0".to_string(), 1_000, 7_000),
                (3, "IRQ 4 ttyS0".to_string(), 50_000, 25_000)
            ]
        );
        assert_eq!((r.lost_pages, r.bad_pages), (1, 0));
        assert_eq!(r.read(&T, &mut |_, _| {}).unwrap(), 0, "read to the end");
    }
}
