//! The ledger's sums as a report: by CPU, the sources ranked by the time they took.

use super::{Source, Sums, BUCKETS_NS};

/// One source's figures (`isold noise --json`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SourceReport {
    /// [`super::Kind::as_str`].
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
    /// The same as Unix time, where the recording's clock can be told as such.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_at_unix: Option<f64>,
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
            longest_at_unix: None,
            sources,
            buckets,
        }
    }
}
