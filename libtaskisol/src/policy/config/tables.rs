//! The tables of `isold run`'s own settings (`[stalls]`, `[noise]`, `[metrics]`) and the
//! network items' `[net]`, one `key = value` at a time.

use std::path::Path;

use toml_edit::Value;

use super::{
    unknown, MetricsConfig, NetConfig, NoiseConfig, StallsConfig, METRICS_KEYS, NET_KEYS,
    NOISE_KEYS, STALLS_KEYS, TICK_US,
};
use crate::cpuset::CpuSet;

impl StallsConfig {
    /// One `key = value` of the table.
    pub(super) fn set(&mut self, key: &str, v: &Value) -> Result<(), String> {
        let secs = |v: &Value, lo: f64, hi: f64| -> Result<std::time::Duration, String> {
            let s = match v {
                Value::Integer(n) => *n.value() as f64,
                Value::Float(f) => *f.value(),
                _ => return Err(format!("stalls.{key} must be a number of seconds")),
            };
            if !(lo..=hi).contains(&s) {
                return Err(format!(
                    "stalls.{key}: {s} is not a number of seconds from {lo} to {hi}"
                ));
            }
            Ok(std::time::Duration::from_secs_f64(s))
        };
        let micros = |v: &Value, lo: i64, hi: i64| -> Result<u64, String> {
            match v {
                Value::Integer(n) if (lo..=hi).contains(n.value()) => Ok(*n.value() as u64),
                Value::Integer(n) => Err(format!(
                    "stalls.{key}: {} is not a number of microseconds from {lo} to {hi}",
                    n.value()
                )),
                _ => Err(format!(
                    "stalls.{key} must be a whole number of microseconds"
                )),
            }
        };
        match key {
            "enabled" => match v {
                Value::Boolean(b) => self.enabled = *b.value(),
                _ => return Err("stalls.enabled takes true or false".into()),
            },
            "threshold" => self.threshold = secs(v, 0.1, 600.0)?,
            "lend_for" => self.lend_for = secs(v, 0.01, 60.0)?,
            "interval" => self.interval = secs(v, 0.05, 10.0)?,
            // The kernel's SCHED_DEADLINE bounds: a runtime of at least 1024 ns, a period
            // within sched_deadline_period_{min,max}_us (100 .. 4194304 by default).
            "runtime_us" => self.runtime_us = micros(v, 2, 1_000_000)?,
            "period_us" => self.period_us = micros(v, 100, 4_194_304)?,
            "ignore_cpus" => {
                let Value::String(s) = v else {
                    return Err("stalls.ignore_cpus must be a string (a CPU list, \"3\")".into());
                };
                self.ignore_cpus = CpuSet::parse_list(s.value().trim())
                    .map_err(|e| format!("stalls.ignore_cpus: {e}"))?;
            }
            "ignore_threads" => {
                let Value::Array(a) = v else {
                    return Err("stalls.ignore_threads must be an array of name patterns".into());
                };
                for e in a.iter() {
                    match e {
                        Value::String(s) if !s.value().is_empty() => {
                            self.ignore_threads.push(s.value().clone())
                        }
                        _ => {
                            return Err(
                                "stalls.ignore_threads must be an array of non-empty strings"
                                    .into(),
                            )
                        }
                    }
                }
            }
            _ => return Err(unknown("key", key, STALLS_KEYS)),
        }
        Ok(())
    }

    /// The slice's share of a CPU, checked once the table is read: the workload keeps at
    /// least 99 % of its CPU while a thread is lent one.
    pub(super) fn check(&self) -> Result<(), String> {
        if self.runtime_us > self.period_us {
            return Err(format!(
                "stalls.runtime_us ({}) is longer than stalls.period_us ({})",
                self.runtime_us, self.period_us
            ));
        }
        // The kernel stops a deadline task that ran out of runtime at its next tick (unless
        // the HRTICK_DL scheduler feature is on): a lent thread may run a whole tick per
        // period, 4 ms at HZ=250. The share is judged on that.
        let slice = self.runtime_us.max(TICK_US);
        if slice * 100 > self.period_us {
            return Err(format!(
                "stalls: runtime_us = {} every period_us = {} lends up to {:.1} % of the CPU (a lent thread runs until the kernel's tick, {} us at HZ=250, when its runtime is shorter); at most 1 %: period_us of {} or more",
                self.runtime_us,
                self.period_us,
                slice as f64 * 100.0 / self.period_us as f64,
                TICK_US,
                slice * 100
            ));
        }
        Ok(())
    }
}

impl NoiseConfig {
    /// One `key = value` of the table.
    pub(super) fn set(&mut self, key: &str, v: &Value) -> Result<(), String> {
        match key {
            "enabled" => match v {
                Value::Boolean(b) => self.enabled = *b.value(),
                _ => return Err("noise.enabled takes true or false".into()),
            },
            "interval" => {
                let s = match v {
                    Value::Integer(n) => *n.value() as f64,
                    Value::Float(f) => *f.value(),
                    _ => return Err("noise.interval must be a number of seconds".into()),
                };
                if !(0.05..=60.0).contains(&s) {
                    return Err(format!(
                        "noise.interval: {s} is not a number of seconds from 0.05 to 60"
                    ));
                }
                self.interval = std::time::Duration::from_secs_f64(s);
            }
            "sources" => match v {
                Value::Integer(n) if (1..=100).contains(n.value()) => {
                    self.sources = *n.value() as usize
                }
                _ => return Err("noise.sources must be a whole number from 1 to 100".into()),
            },
            "ignore_cpus" => {
                let Value::String(s) = v else {
                    return Err("noise.ignore_cpus must be a string (a CPU list, \"3\")".into());
                };
                self.ignore_cpus = CpuSet::parse_list(s.value().trim())
                    .map_err(|e| format!("noise.ignore_cpus: {e}"))?;
            }
            _ => return Err(unknown("key", key, NOISE_KEYS)),
        }
        Ok(())
    }
}

impl MetricsConfig {
    /// One `key = value` of the table.
    pub(super) fn set(&mut self, key: &str, v: &Value) -> Result<(), String> {
        match key {
            "listen" => {
                let Value::String(s) = v else {
                    return Err("metrics.listen must be a string (\"127.0.0.1:9645\")".into());
                };
                let addr: std::net::SocketAddr = s.value().trim().parse().map_err(|_| {
                    format!(
                        "metrics.listen: {:?} is not an address and port (\"127.0.0.1:9645\")",
                        s.value()
                    )
                })?;
                if !addr.ip().is_loopback() {
                    return Err(format!(
                        "metrics.listen: {addr} is not a loopback address: the listener has no authentication (put a proxy in front of it, or use textfile)"
                    ));
                }
                if addr.port() == 0 {
                    return Err("metrics.listen: give a port (0 picks a random one)".into());
                }
                self.listen = Some(addr);
            }
            "textfile" => {
                let Value::String(s) = v else {
                    return Err("metrics.textfile must be a string (a path)".into());
                };
                let p = Path::new(s.value());
                if !p.is_absolute() || p.file_name().is_none() {
                    return Err(format!(
                        "metrics.textfile: {:?} is not an absolute file path",
                        s.value()
                    ));
                }
                if p.extension().and_then(|e| e.to_str()) != Some("prom") {
                    return Err(format!(
                        "metrics.textfile: {:?} does not end in .prom (node_exporter's textfile collector reads only those)",
                        s.value()
                    ));
                }
                self.textfile = Some(p.into());
            }
            "interval" => {
                let secs = match v {
                    Value::Integer(n) => *n.value() as f64,
                    Value::Float(f) => *f.value(),
                    _ => return Err("metrics.interval must be a number of seconds".into()),
                };
                if !(1.0..=3600.0).contains(&secs) {
                    return Err(format!(
                        "metrics.interval: {secs} is not a number of seconds from 1 to 3600"
                    ));
                }
                self.interval = std::time::Duration::from_secs_f64(secs);
            }
            _ => return Err(unknown("key", key, METRICS_KEYS)),
        }
        Ok(())
    }
}

impl NetConfig {
    /// One `key = value` of the table.
    pub(super) fn set(&mut self, key: &str, v: &Value) -> Result<(), String> {
        let patterns = |v: &Value| -> Result<Vec<String>, String> {
            let Value::Array(a) = v else {
                return Err(format!(
                    "net.{key} must be a list of device name patterns ([\"eth*\"])"
                ));
            };
            a.iter()
                .map(|p| match p {
                    Value::String(s) if !s.value().is_empty() && !s.value().contains('/') => {
                        Ok(s.value().clone())
                    }
                    Value::String(s) => Err(format!(
                        "net.{key}: {:?} is not a device name pattern",
                        s.value()
                    )),
                    _ => Err(format!("net.{key}: each entry must be a string")),
                })
                .collect()
        };
        match key {
            "channels" => match v {
                Value::Integer(n) if (1..=65535).contains(n.value()) => {
                    self.channels = Some(*n.value() as u32)
                }
                _ => return Err("net.channels must be a whole number from 1 to 65535".into()),
            },
            "rps_physical" => self.rps_physical = patterns(v)?,
            "ignore" => self.ignore = patterns(v)?,
            _ => return Err(unknown("key", key, NET_KEYS)),
        }
        Ok(())
    }
}
