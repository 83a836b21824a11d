//! Values something else keeps changing back (tuned, irqbalance, a script, a second policy):
//! repaired a few times, then left alone for a back-off that doubles, so that two programs
//! that disagree do not write the same file in a busy loop. Each value becomes "contested"
//! once, said once in the log and kept in `isold status` until it holds again.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Repairs of one value within [`WINDOW`] that make it contested: more than someone drifting
/// a value by hand, or a test timing the repairs, does in a minute (twenty trials of
/// `isol-drift` stay within it), and what a program undoing every repair reaches in ten
/// seconds at the default `--interval` (two checks a second), in a second at 0.1.
pub const REPAIRS: usize = 20;
/// See [`REPAIRS`].
pub const WINDOW: Duration = Duration::from_secs(60);
/// The first back-off; each repair that is undone again doubles it, up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(10);
/// See [`FIRST_BACKOFF`].
pub const MAX_BACKOFF: Duration = Duration::from_secs(600);

/// A contested value as `isold status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Contested {
    /// The target's id (`sysctl:kernel.printk`).
    pub id: String,
    /// What it is.
    pub label: String,
    /// Repairs since it became contested, the first [`REPAIRS`] included.
    pub repairs: u64,
    /// The current back-off: the value is left as the other program set it this long before
    /// isold repairs it once more, seconds.
    pub backoff_s: u64,
}

#[derive(Debug, Default)]
struct Value {
    label: String,
    /// Repairs within the window.
    recent: VecDeque<Instant>,
    repairs: u64,
    /// While contested: until when it is left alone, and the back-off that gave it.
    backoff: Option<(Instant, Duration)>,
    /// The last repair: a value that holds for a whole window after it is no longer
    /// contested.
    last: Option<Instant>,
}

/// What changed in the contests, for the log and the status.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// It became contested now.
    Contested(Contested),
    /// It held for a whole window after its last repair.
    Settled { id: String, label: String },
}

/// The repairs of every value, by target id.
#[derive(Debug, Default)]
pub struct Contests {
    values: HashMap<String, Value>,
}

impl Contests {
    /// Whether the value `id` is to be left alone now (contested, in its back-off).
    pub fn waiting(&self, id: &str, now: Instant) -> bool {
        self.values
            .get(id)
            .and_then(|v| v.backoff)
            .is_some_and(|(until, _)| now < until)
    }

    /// Until when the value `id` is left alone, while contested.
    pub fn until(&self, id: &str) -> Option<Instant> {
        self.values.get(id)?.backoff.map(|(until, _)| until)
    }

    /// A repair of `id` was made at `now`; `Some` when this made it contested.
    pub fn repaired(&mut self, id: &str, label: &str, now: Instant) -> Option<Change> {
        let v = self.values.entry(id.to_string()).or_default();
        v.label = label.to_string();
        v.repairs += 1;
        v.last = Some(now);
        while v
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) > WINDOW)
        {
            v.recent.pop_front();
        }
        v.recent.push_back(now);
        match v.backoff {
            // Repaired after its back-off: undone again means a longer one.
            Some((_, last)) => {
                let next = (last * 2).min(MAX_BACKOFF);
                v.backoff = Some((now + next, next));
                None
            }
            None if v.recent.len() >= REPAIRS => {
                v.backoff = Some((now + FIRST_BACKOFF, FIRST_BACKOFF));
                Some(Change::Contested(Contested {
                    id: id.to_string(),
                    label: v.label.clone(),
                    repairs: v.recent.len() as u64,
                    backoff_s: FIRST_BACKOFF.as_secs(),
                }))
            }
            None => None,
        }
    }

    /// Values that held for a whole window since their last repair: forgotten, and the
    /// contested ones among them reported settled.
    pub fn sweep(&mut self, now: Instant) -> Vec<Change> {
        let mut out = Vec::new();
        self.values.retain(|id, v| {
            let quiet = v.last.map_or(true, |t| now.duration_since(t) > WINDOW)
                && v.backoff.map_or(true, |(until, _)| now > until);
            if quiet && v.backoff.is_some() {
                out.push(Change::Settled {
                    id: id.clone(),
                    label: v.label.clone(),
                });
            }
            !quiet
        });
        out
    }

    /// The contested values now, for the status.
    pub fn list(&self) -> Vec<Contested> {
        let mut out: Vec<Contested> = self
            .values
            .iter()
            .filter_map(|(id, v)| {
                let (_, backoff) = v.backoff?;
                Some(Contested {
                    id: id.clone(),
                    label: v.label.clone(),
                    repairs: v.repairs,
                    backoff_s: backoff.as_secs(),
                })
            })
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nineteen repairs a minute are corrections; the twentieth makes the value contested
    /// once; it is then left alone for 10 s, 20 s, 40 s ... up to 10 minutes; a value that
    /// holds for a minute after its last repair settles.
    #[test]
    fn a_value_changed_back_again_and_again_backs_off() {
        let mut c = Contests::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let ms = |m: u64| t0 + Duration::from_millis(m);
        for i in 0..19 {
            assert_eq!(c.repaired("sysctl:x", "sysctl x", ms(i * 200)), None);
            assert!(!c.waiting("sysctl:x", ms(i * 200)));
        }
        assert_eq!(
            c.repaired("sysctl:x", "sysctl x", at(4)),
            Some(Change::Contested(Contested {
                id: "sysctl:x".into(),
                label: "sysctl x".into(),
                repairs: 20,
                backoff_s: 10,
            }))
        );
        assert!(c.waiting("sysctl:x", at(13)));
        assert_eq!(c.until("sysctl:x"), Some(at(14)));
        assert_eq!(c.until("sysctl:y"), None);
        assert!(!c.waiting("sysctl:x", at(15)));
        assert!(!c.waiting("sysctl:y", at(5)), "only that value");
        // Repaired after the back-off and undone again: 20 s, then 40 s; reported once.
        assert_eq!(c.repaired("sysctl:x", "sysctl x", at(15)), None);
        assert!(c.waiting("sysctl:x", at(34)) && !c.waiting("sysctl:x", at(36)));
        assert_eq!(c.repaired("sysctl:x", "sysctl x", at(36)), None);
        assert_eq!(c.list()[0].backoff_s, 40);
        assert_eq!(c.list()[0].repairs, 22);
        let mut last = 36;
        for _ in 0..10 {
            last += 700;
            c.repaired("sysctl:x", "sysctl x", at(last));
        }
        assert_eq!(c.list()[0].backoff_s, 600, "at most 10 minutes");
        // Quiet for a minute after the last repair and the back-off: settled, forgotten.
        assert_eq!(c.sweep(at(last + 30)), []);
        assert_eq!(
            c.sweep(at(last + 601)),
            [Change::Settled {
                id: "sysctl:x".into(),
                label: "sysctl x".into()
            }]
        );
        assert!(c.list().is_empty());
        // Repairs spread over more than a minute never make it contested.
        let mut c = Contests::default();
        for i in 0..20 {
            assert_eq!(c.repaired("irq:4", "IRQ 4", at(i * 16)), None);
        }
        assert!(c.list().is_empty());
        assert_eq!(
            c.sweep(at(20 * 16 + 61)),
            [],
            "never contested: nothing to say"
        );
    }

    /// The bounds, to the instant: twenty repairs of which the first is exactly a minute old
    /// are within the minute; the back-off ends at its last instant; a value settles only
    /// once both the minute since its last repair and its back-off are over.
    #[test]
    fn the_bounds_are_exact() {
        let mut c = Contests::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(c.repaired("x", "x", at(0)), None);
        for _ in 0..18 {
            assert_eq!(c.repaired("x", "x", at(30)), None);
        }
        assert!(matches!(
            c.repaired("x", "x", at(60)),
            Some(Change::Contested(_))
        ));
        assert!(c.waiting("x", at(69)));
        assert!(!c.waiting("x", at(70)), "the back-off is over at its end");
        // Last repair at 60, back-off until 70: quiet only after 120.
        assert_eq!(c.sweep(at(120)), []);
        assert_eq!(c.list().len(), 1);
        assert_eq!(c.sweep(at(121)).len(), 1);
        // A back-off that ends after the window: settled only once it is over too.
        let mut c = Contests::default();
        for _ in 0..20 {
            c.repaired("y", "y", at(0));
        }
        c.repaired("y", "y", at(10)); // back-off 20 s: until 30
        c.repaired("y", "y", at(30)); // back-off 40 s: until 70
        assert_eq!(c.until("y"), Some(at(70)));
        c.values.get_mut("y").unwrap().backoff = Some((at(100), Duration::from_secs(70)));
        assert_eq!(c.sweep(at(100)), [], "the back-off ends at 100");
        assert_eq!(c.sweep(at(101)).len(), 1);
    }
}
