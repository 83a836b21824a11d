//! Where a command's time goes: wall time per stage and item, and the system calls the
//! library made by kind, each with its count and time. Off unless [`start`] is called (one
//! relaxed atomic load per call then); `isold apply --timings` prints it.
//!
//! The calls are counted where the library makes them: a file read by path is one `open`,
//! its `read`s (the last one returns 0) and one `close`; a directory listing is one
//! `readdir` (its open, getdents and close together); the scheduler calls are one each.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ON: AtomicBool = AtomicBool::new(false);

/// A kind of system call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Open,
    Read,
    Write,
    Close,
    ReadDir,
    GetAffinity,
    SetAffinity,
    SetScheduler,
}

impl Call {
    pub const ALL: [Call; 8] = [
        Call::Open,
        Call::Read,
        Call::Write,
        Call::Close,
        Call::ReadDir,
        Call::GetAffinity,
        Call::SetAffinity,
        Call::SetScheduler,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Call::Open => "open",
            Call::Read => "read",
            Call::Write => "write",
            Call::Close => "close",
            Call::ReadDir => "readdir",
            Call::GetAffinity => "sched_getaffinity",
            Call::SetAffinity => "sched_setaffinity",
            Call::SetScheduler => "sched_setscheduler",
        }
    }
}

static COUNT: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];
static NANOS: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];

/// (stage, item) -> (count, nanoseconds), in the order first seen.
type Stages = Vec<((&'static str, String), (u64, u64))>;
static STAGES: Mutex<Stages> = Mutex::new(Vec::new());

/// Start counting (from zero).
pub fn start() {
    for i in 0..Call::ALL.len() {
        COUNT[i].store(0, Relaxed);
        NANOS[i].store(0, Relaxed);
    }
    STAGES.lock().unwrap_or_else(|e| e.into_inner()).clear();
    ON.store(true, Relaxed);
}

/// Whether counting is on.
pub fn on() -> bool {
    ON.load(Relaxed)
}

/// Run `f`, one system call of kind `c`, counted and timed when counting is on.
#[inline]
pub fn call<T>(c: Call, f: impl FnOnce() -> T) -> T {
    if !on() {
        return f();
    }
    let t = Instant::now();
    let r = f();
    let i = c as usize;
    COUNT[i].fetch_add(1, Relaxed);
    NANOS[i].fetch_add(t.elapsed().as_nanos() as u64, Relaxed);
    r
}

/// Run `f`, a step of `stage` (plan, check, change, ...) for `item`, counted and timed
/// when counting is on. Steps of one (stage, item) add up.
#[inline]
pub fn stage<T>(stage: &'static str, item: &str, f: impl FnOnce() -> T) -> T {
    if !on() {
        return f();
    }
    let t = Instant::now();
    let r = f();
    let d = t.elapsed().as_nanos() as u64;
    let mut s = STAGES.lock().unwrap_or_else(|e| e.into_inner());
    match s
        .iter_mut()
        .find(|((st, it), _)| *st == stage && it == item)
    {
        Some((_, (n, ns))) => {
            *n += 1;
            *ns += d;
        }
        None => s.push(((stage, item.to_string()), (1, d))),
    }
    r
}

/// One line of [`Costs`]: a stage and item, or a kind of call.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Line {
    pub name: String,
    pub count: u64,
    pub seconds: f64,
}

/// What was counted since [`start`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Costs {
    /// "stage item" lines, in the order first seen.
    pub stages: Vec<Line>,
    /// One line per kind of call made, most time first.
    pub calls: Vec<Line>,
}

/// Stop counting; what was counted.
pub fn stop() -> Costs {
    ON.store(false, Relaxed);
    let secs = |ns: u64| Duration::from_nanos(ns).as_secs_f64();
    let stages = STAGES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|((stage, item), (n, ns))| Line {
            name: format!("{stage} {item}"),
            count: *n,
            seconds: secs(*ns),
        })
        .collect();
    let mut calls: Vec<Line> = Call::ALL
        .iter()
        .map(|c| Line {
            name: c.name().into(),
            count: COUNT[*c as usize].load(Relaxed),
            seconds: secs(NANOS[*c as usize].load(Relaxed)),
        })
        .filter(|l| l.count > 0)
        .collect();
    calls.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
    Costs { stages, calls }
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the counters are global to the process, and other tests read files while
    // it runs; it looks only at its own stages, and at least its own calls.
    #[test]
    fn counts_only_while_on_and_adds_up_per_stage() {
        let mine = |c: &Costs| -> Vec<(String, u64)> {
            c.stages
                .iter()
                .filter(|l| l.name.starts_with("cost-test"))
                .map(|l| (l.name.clone(), l.count))
                .collect()
        };
        let calls = |c: &Costs, name: &str| {
            c.calls
                .iter()
                .find(|l| l.name == name)
                .map_or(0, |l| l.count)
        };
        stage("cost-test", "off", || ());
        start();
        assert!(on());
        assert_eq!(call(Call::SetScheduler, || 7), 7);
        call(Call::SetScheduler, || ());
        assert_eq!(stage("cost-test", "irqs", || "v"), "v");
        stage("cost-test", "tasks", || ());
        stage("cost-test", "irqs", || ());
        let c = stop();
        assert!(!on());
        assert_eq!(
            mine(&c),
            [("cost-test irqs".into(), 2), ("cost-test tasks".into(), 1)]
        );
        assert!(calls(&c, "sched_setscheduler") >= 2);
        assert!(c.calls.windows(2).all(|w| w[0].seconds >= w[1].seconds));
        stage("cost-test", "off", || ());
        assert_eq!(mine(&stop()).len(), 2, "nothing counted while off");
        start();
        assert!(mine(&stop()).is_empty(), "start begins at zero");
    }
}
