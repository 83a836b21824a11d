//! Reading a configuration file: the preset's settings, then the file's overrides, each
//! checked where it stands. `[items]` values are read by the items' own declarations
//! ([`crate::policy::items`]).

use std::path::{Path, PathBuf};

use toml_edit::{ImDocument, Item, TableLike, Value};

use super::*;
use crate::policy::items;
use crate::policy::preset;

const TOP_KEYS: &[&str] = &[
    "isolated_cpus",
    "preset",
    "on_stop",
    "items",
    "sysctl",
    "tasks",
    "kthread_priority",
    "kvm",
    "irqs",
    "metrics",
    "containers",
    "stalls",
    "noise",
    "net",
];
const TASK_KEYS: &[&str] = &["allow_comm", "allow_cgroup"];
const IRQ_KEYS: &[&str] = &["allow"];

fn value_text(v: &Value) -> Option<String> {
    Some(match v {
        Value::String(s) => s.value().clone(),
        Value::Integer(i) => i.value().to_string(),
        Value::Boolean(b) => b.value().to_string(),
        _ => return None,
    })
}

pub(super) fn parse_sched(s: &str) -> Result<SchedPolicy, String> {
    let (pol, prio_text) = s.split_once(':').unwrap_or((s, ""));
    let prio = || {
        prio_text
            .parse::<u32>()
            .ok()
            .filter(|p| (1..=99).contains(p))
            .ok_or_else(|| format!("bad priority in {s:?}: expected 1..99"))
    };
    match pol {
        "fifo" => Ok(SchedPolicy::Fifo(prio()?)),
        "rr" => Ok(SchedPolicy::RoundRobin(prio()?)),
        "other" if prio_text.is_empty() => Ok(SchedPolicy::Other),
        _ => Err(format!(
            "bad scheduling policy {s:?}: expected fifo:N, rr:N or other"
        )),
    }
}

/// The items whose state is a table of the file (`[sysctl]`, `[kthread_priority]`, `[kvm]`).
const TABLE_ITEMS: &[&str] = &["sysctl", "kthread_priority", "kvm"];

/// The values of `t` with their whole dotted names (`prefix.key`) and their keys' spans, in
/// the table's order: a table below (`vm.stat_interval = 10`, `[sysctl.vm]`, `vm = { ...
/// }`) is a part of the name, anything else (a value, an array of tables) an entry.
fn dotted<'a>(
    t: &'a dyn TableLike,
    prefix: &str,
    out: &mut Vec<(String, Option<std::ops::Range<usize>>, &'a Item)>,
) {
    for (k, item) in t.iter() {
        let name = if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        };
        match item.as_table_like() {
            Some(sub) => dotted(sub, &name, out),
            None => {
                let span = t.get_key_value(k).and_then(|(key, _)| key.span());
                out.push((name, span, item));
            }
        }
    }
}
fn item_names() -> Vec<&'static str> {
    items::ALL.iter().map(|i| i.name).collect()
}

/// The value an item falls back to when the file says `true` and the preset lacks it.
fn table_value(item: &str) -> &'static str {
    preset::SETTINGS
        .iter()
        .find(|s| s.key == item)
        .map_or("true", |s| s.value)
}

impl Config {
    /// The settings of `preset` with nothing overridden, for `isolated`.
    pub fn defaults(preset: Preset, isolated: CpuSpec) -> Config {
        let mut c = Config {
            file: PathBuf::from("(defaults)"),
            isolated_line: None,
            isolated,
            preset,
            preset_line: None,
            on_stop: OnStop::Keep,
            sysctl: Vec::new(),
            sysctl_lines: Default::default(),
            printk_line: None,
            values: Default::default(),
            allow_comm: Vec::new(),
            allow_cgroup: Vec::new(),
            irq_allow: Vec::new(),
            kthread_priority: Vec::new(),
            kvm: Vec::new(),
            metrics: None,
            containers: None,
            stalls: StallsConfig::default(),
            noise: NoiseConfig::default(),
            net: NetConfig::default(),
        };
        for s in preset::settings(preset) {
            let r = match s.key.split_once(':') {
                None => c.set_item(s.key, s.value),
                Some(("sysctl", k)) => c.set_sysctl(k, Some(s.value)),
                Some(("kthread_priority", k)) => c.set_kthread(k, Some(s.value)),
                Some(("kvm", k)) => c.set_kvm(k, Some(s.value)),
                Some(("tasks", "allow_comm")) => {
                    c.allow_comm.push(s.value.to_string());
                    Ok(())
                }
                Some(_) => Err(format!("bad preset row {}", s.key)),
            };
            r.expect("the preset table is valid (tested)");
        }
        c
    }

    /// This configuration with only the items `keep` on: every other item of [`items::ALL`]
    /// turned off as `[items] NAME = false` turns it off. One operation over the item table,
    /// so an item added to the table is never kept by a restricted copy silently; the rest
    /// (CPUs, allow-lists, `on_stop`, `[metrics]`) is kept.
    pub fn only(&self, keep: &[&str]) -> Config {
        self.switched_off(|item| !keep.contains(&item))
    }

    /// This configuration with the items `drop` turned off, as [`Config::only`] does.
    pub fn without(&self, drop: &[&str]) -> Config {
        self.switched_off(|item| drop.contains(&item))
    }

    fn switched_off(&self, off: impl Fn(&str) -> bool) -> Config {
        let mut c = self.clone();
        for item in items::ALL.iter().filter(|i| off(i.name)) {
            c.set_item(item.name, "false")
                .expect("every item can be turned off");
        }
        c
    }

    pub(super) fn set_item(&mut self, item: &str, v: &str) -> Result<(), String> {
        let Some(decl) = items::by_name(item) else {
            return Err(unknown("item", item, &item_names()));
        };
        let v = if v == "true" && !matches!(table_value(item), "true" | "false") {
            table_value(item)
        } else {
            v
        };
        let value = (decl.parse)(v).map_err(|e| format!("{item} {e}"))?;
        if TABLE_ITEMS.contains(&item) {
            // Its state is its table: off empties it (the file's own rows, read after
            // `[items]`, still count).
            if value.is_none() {
                match item {
                    "sysctl" => self.sysctl.clear(),
                    "kthread_priority" => self.kthread_priority.clear(),
                    _ => self.kvm.clear(),
                }
            }
            return Ok(());
        }
        match value {
            Some(v) => self.values.insert(item.to_string(), v),
            None => self.values.remove(item),
        };
        Ok(())
    }

    fn set_sysctl(&mut self, key: &str, v: Option<&str>) -> Result<(), String> {
        crate::sysctl::path_of(key).map_err(|e| e.to_string())?;
        self.sysctl.retain(|(k, _)| k != key);
        match v {
            None => {}
            Some("true") => {
                return Err(format!(
                    "sysctl {key} needs a value (or false to leave it alone)"
                ))
            }
            Some(v) if v.contains('\n') => {
                return Err(format!("sysctl {key}: a value cannot span lines"))
            }
            Some(v) if v.trim().is_empty() => {
                return Err(format!(
                    "sysctl {key}: an empty value writes nothing (give a value, or false to leave it alone)"
                ))
            }
            Some(v) => self.sysctl.push((key.into(), v.into())),
        }
        Ok(())
    }

    fn set_kthread(&mut self, pattern: &str, v: Option<&str>) -> Result<(), String> {
        self.kthread_priority.retain(|(k, _)| k != pattern);
        if let Some(v) = v {
            self.kthread_priority
                .push((pattern.into(), parse_sched(v)?));
        }
        Ok(())
    }

    fn set_kvm(&mut self, key: &str, v: Option<&str>) -> Result<(), String> {
        let Some((module, param)) = key.split_once('.') else {
            return Err(format!("kvm option {key:?} is not module.parameter"));
        };
        let word =
            |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !word(module) || !word(param) {
            return Err(format!("kvm option {key:?} is not module.parameter"));
        }
        self.kvm.retain(|(m, p, _)| !(m == module && p == param));
        match v {
            None => {}
            Some(v) if v.is_empty() || v.contains(char::is_whitespace) => {
                return Err(format!("kvm option {key}: bad value {v:?}"))
            }
            Some(v) => self.kvm.push((module.into(), param.into(), v.into())),
        }
        Ok(())
    }

    /// Read and validate a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.into(),
            line: None,
            reason: format!("cannot read: {}", crate::error::io_strerror(&e)),
        })?;
        Config::parse(&text, path)
    }

    /// The top-level keys: `preset`, `isolated_cpus` (required), `on_stop`; the rest of the
    /// configuration is the preset's defaults, for the tables to change.
    fn top_keys(top: &toml_edit::Table, text: &str, file: &Path) -> Result<Config, ConfigError> {
        let err = |span: Option<std::ops::Range<usize>>, reason: String| ConfigError {
            file: file.into(),
            line: line_of(text, span),
            reason,
        };
        let str_of = |k: &str| -> Result<Option<(String, Option<usize>)>, ConfigError> {
            match top.get(k) {
                None => Ok(None),
                Some(Item::Value(Value::String(s))) => {
                    Ok(Some((s.value().clone(), line_of(text, s.span()))))
                }
                Some(i) => Err(err(i.span(), format!("{k} must be a string"))),
            }
        };
        let (preset, preset_line) = match str_of("preset")? {
            None => (Preset::default(), None),
            Some((p, line)) => (
                p.parse().map_err(|_| ConfigError {
                    file: file.into(),
                    line,
                    reason: unknown("preset", &p, &Preset::ALL.map(Preset::name)),
                })?,
                line,
            ),
        };
        let (isolated, isolated_line) = match str_of("isolated_cpus")? {
            None => {
                return Err(err(
                    None,
                    "isolated_cpus is missing: give a CPU list (\"2-3\") or \"auto\"".into(),
                ))
            }
            Some((s, line)) if s.trim() == "auto" => (CpuSpec::Auto, line),
            Some((s, line)) => match CpuSet::parse_list(&s) {
                Ok(set) if set.is_empty() => {
                    return Err(ConfigError {
                        file: file.into(),
                        line,
                        reason: "isolated_cpus is empty".into(),
                    })
                }
                Ok(set) => (CpuSpec::List(set), line),
                Err(e) => {
                    return Err(ConfigError {
                        file: file.into(),
                        line,
                        reason: format!("isolated_cpus: {e}"),
                    })
                }
            },
        };
        let mut c = Config::defaults(preset, isolated);
        c.file = file.into();
        c.isolated_line = isolated_line;
        c.preset_line = preset_line;
        if let Some((v, line)) = str_of("on_stop")? {
            c.on_stop = match v.as_str() {
                "keep" => OnStop::Keep,
                "restore" => OnStop::Restore,
                _ => {
                    return Err(ConfigError {
                        file: file.into(),
                        line,
                        reason: unknown("on_stop value", &v, &["keep", "restore"]),
                    })
                }
            };
        }
        Ok(c)
    }

    /// Parse and validate the text of a configuration file named `file`.
    ///
    /// Long because every table is read in one pass with the same error mapping (`err`, `walk`);
    /// each table's own rules are in its type's `set`, `set_task_list`, `add_irq_allow` and the
    /// items'.
    pub fn parse(text: &str, file: &Path) -> Result<Config, ConfigError> {
        let err = |span: Option<std::ops::Range<usize>>, reason: String| ConfigError {
            file: file.into(),
            line: line_of(text, span),
            reason,
        };
        let doc = ImDocument::parse(text).map_err(|e| {
            let msg = e.message().trim().to_string();
            err(e.span(), format!("not valid TOML: {msg}"))
        })?;
        let top = doc.as_table();
        for (k, _) in top.iter() {
            if !TOP_KEYS.contains(&k) {
                let key = top.key(k).and_then(|k| k.span());
                return Err(err(key, unknown("key", k, TOP_KEYS)));
            }
        }
        let mut c = Config::top_keys(top, text, file)?;

        let table = |k: &str| -> Result<Option<&dyn TableLike>, ConfigError> {
            match top.get(k) {
                None => Ok(None),
                Some(i) => i
                    .as_table_like()
                    .map(Some)
                    .ok_or_else(|| err(i.span(), format!("{k} must be a table ([{k}])"))),
            }
        };
        // One walk for every table of key = value overrides.
        let walk = |t: &dyn TableLike,
                    section: &str,
                    f: &mut dyn FnMut(&str, &Value) -> Result<(), String>|
         -> Result<(), ConfigError> {
            for (k, item) in t.iter() {
                let key_span = t.get_key_value(k).and_then(|(key, _)| key.span());
                let span = item.span().or(key_span.clone());
                let Item::Value(v) = item else {
                    return Err(err(
                        span,
                        format!("[{section}] {k} must be a value, not a table"),
                    ));
                };
                f(k, v).map_err(|reason| err(key_span.clone().or(span.clone()), reason))?;
            }
            Ok(())
        };
        if let Some(t) = table("items")? {
            let names = item_names();
            walk(t, "items", &mut |k, v| {
                if !names.contains(&k) {
                    return Err(unknown("item", k, &names));
                }
                let text =
                    value_text(v).ok_or_else(|| format!("item {k}: unsupported value type"))?;
                c.set_item(k, &text)
            })?;
        }
        let line_in = |t: &dyn TableLike, k: &str| {
            line_of(text, t.get_key_value(k).and_then(|(key, _)| key.span()))
        };
        if let Some(t) = table("items")? {
            if c.on("printk") {
                c.printk_line = line_in(t, "printk");
            }
        }
        // The tables whose keys are dotted names, spelled as tuned does (`vm.stat_interval =
        // 10`, which TOML reads as tables) or quoted: each name whole, in file order.
        let walk_dotted = |t: &dyn TableLike,
                           section: &str,
                           f: &mut dyn FnMut(&str, &Value) -> Result<(), String>|
         -> Result<Vec<(String, Option<usize>)>, ConfigError> {
            let mut flat = Vec::new();
            dotted(t, "", &mut flat);
            flat.sort_by_key(|(_, span, _)| span.as_ref().map_or(usize::MAX, |s| s.start));
            let mut lines: Vec<(String, Option<usize>)> = Vec::new();
            for (name, key_span, item) in flat {
                // Quoted and dotted are two keys to TOML, one name here.
                if let Some((_, first)) = lines.iter().find(|(n, _)| *n == name) {
                    let first = first.map_or_else(String::new, |l| format!(" (line {l})"));
                    return Err(err(
                        key_span,
                        format!(
                            "[{section}] {name} is set twice: here and before{first}; keep one"
                        ),
                    ));
                }
                let Item::Value(v) = item else {
                    return Err(err(
                        item.span().or(key_span),
                        format!("[{section}] {name} must be a value, not a table"),
                    ));
                };
                f(&name, v).map_err(|reason| err(key_span.clone(), reason))?;
                lines.push((name, line_of(text, key_span)));
            }
            Ok(lines)
        };
        if let Some(t) = table("sysctl")? {
            let lines = walk_dotted(t, "sysctl", &mut |k, v| match v {
                Value::Boolean(b) if !*b.value() => c.set_sysctl(k, None),
                Value::String(_) | Value::Integer(_) => c.set_sysctl(k, value_text(v).as_deref()),
                _ => Err(format!("sysctl {k} takes a number, a string or false")),
            })?;
            for (k, line) in lines {
                if let Some(line) = line.filter(|_| c.sysctl.iter().any(|(n, _)| *n == k)) {
                    c.sysctl_lines.insert(k, line);
                }
            }
        }
        c.one_setting_per_file()?;
        if let Some(t) = table("kthread_priority")? {
            walk(t, "kthread_priority", &mut |k, v| match v {
                Value::Boolean(b) if !*b.value() => c.set_kthread(k, None),
                Value::String(s) => c.set_kthread(k, Some(s.value())),
                _ => Err(format!(
                    "kthread_priority {k:?} takes \"fifo:N\", \"rr:N\", \"other\" or false"
                )),
            })?;
        }
        if let Some(t) = table("kvm")? {
            walk_dotted(t, "kvm", &mut |k, v| match v {
                Value::Boolean(b) if !*b.value() => c.set_kvm(k, None),
                Value::String(_) | Value::Integer(_) => c.set_kvm(k, value_text(v).as_deref()),
                _ => Err(format!("kvm {k} takes a number, a string or false")),
            })?;
        }
        if let Some(t) = table("tasks")? {
            walk(t, "tasks", &mut |k, v| c.set_task_list(k, v))?;
        }
        if let Some(t) = table("irqs")? {
            walk(t, "irqs", &mut |k, v| c.add_irq_allow(k, v))?;
        }
        if let Some(t) = table("metrics")? {
            let mut m = MetricsConfig {
                listen: None,
                textfile: None,
                interval: METRICS_INTERVAL,
            };
            walk(t, "metrics", &mut |k, v| m.set(k, v))?;
            if m.listen.is_none() && m.textfile.is_none() {
                let span = top.get("metrics").and_then(|i| i.span());
                return Err(err(
                    span,
                    "[metrics] publishes nothing: give listen (\"127.0.0.1:9645\"), textfile, or both"
                        .into(),
                ));
            }
            c.metrics = Some(m);
        }
        if let Some(t) = table("containers")? {
            let mut cc = ContainersConfig::default();
            walk(t, "containers", &mut |k, v| cc.set(k, v, text))?;
            c.containers = Some(cc);
        }
        if let Some(t) = table("stalls")? {
            let mut st = StallsConfig::default();
            walk(t, "stalls", &mut |k, v| st.set(k, v))?;
            if let Err(reason) = st.check() {
                let span = top.get("stalls").and_then(|i| i.span());
                return Err(err(span, reason));
            }
            c.stalls = st;
        }
        if let Some(t) = table("noise")? {
            let mut n = NoiseConfig::default();
            walk(t, "noise", &mut |k, v| n.set(k, v))?;
            c.noise = n;
        }
        if let Some(t) = table("net")? {
            let mut n = NetConfig::default();
            walk(t, "net", &mut |k, v| n.set(k, v))?;
            c.net = n;
        }
        Ok(c)
    }

    /// An entry of `[tasks]`: `allow_comm` or `allow_cgroup`, an array of non-empty strings.
    fn set_task_list(&mut self, k: &str, v: &Value) -> Result<(), String> {
        if !TASK_KEYS.contains(&k) {
            return Err(unknown("key", k, TASK_KEYS));
        }
        let Value::Array(a) = v else {
            return Err(format!("tasks.{k} must be an array of strings"));
        };
        let mut list = Vec::new();
        for e in a.iter() {
            match e {
                Value::String(s) if !s.value().is_empty() => list.push(s.value().clone()),
                _ => return Err(format!("tasks.{k} must be an array of non-empty strings")),
            }
        }
        if k == "allow_cgroup" {
            if let Some(bad) = list.iter().find(|p| !p.starts_with('/')) {
                return Err(format!(
                    "tasks.allow_cgroup: {bad:?} is not a cgroup path starting with /"
                ));
            }
            self.allow_cgroup.extend(list);
        } else {
            self.allow_comm.extend(list);
        }
        Ok(())
    }

    /// The entry of `[irqs]`: `allow`, IRQ numbers and name patterns.
    fn add_irq_allow(&mut self, k: &str, v: &Value) -> Result<(), String> {
        if !IRQ_KEYS.contains(&k) {
            return Err(unknown("key", k, IRQ_KEYS));
        }
        let Value::Array(a) = v else {
            return Err("irqs.allow must be an array of IRQ numbers and name patterns".into());
        };
        for e in a.iter() {
            self.irq_allow.push(match e {
                Value::Integer(n) => IrqAllow::Number(
                    u32::try_from(*n.value())
                        .map_err(|_| format!("irqs.allow: {} is not an IRQ number", n.value()))?,
                ),
                Value::String(s) if s.value().trim().is_empty() => {
                    return Err("irqs.allow: an empty name matches no IRQ".into())
                }
                // A number written as a string is the number.
                Value::String(s) => match s.value().trim().parse::<u32>() {
                    Ok(n) => IrqAllow::Number(n),
                    Err(_) => IrqAllow::Name(s.value().clone()),
                },
                other => {
                    return Err(format!(
                        "irqs.allow takes IRQ numbers and name patterns, not {}",
                        other.type_name()
                    ))
                }
            });
        }
        Ok(())
    }

    /// Two settings that write one file would undo each other at every check of a daemon:
    /// refused, naming both.
    fn one_setting_per_file(&self) -> Result<(), ConfigError> {
        let mut by_path: std::collections::BTreeMap<String, Vec<(String, Option<usize>)>> =
            Default::default();
        let from = |line: Option<usize>| match line {
            Some(l) => format!("line {l}"),
            None => format!("preset {}", self.preset),
        };
        for (name, _) in &self.sysctl {
            if let Ok(path) = crate::sysctl::path_of(name) {
                by_path.entry(path).or_default().push((
                    format!("[sysctl] {name}"),
                    self.sysctl_lines.get(name).copied(),
                ));
            }
        }
        if self.on("printk") {
            by_path
                .entry(items::printk::PRINTK.to_string())
                .or_default()
                .push(("the printk item".into(), self.printk_line));
        }
        for (path, who) in by_path {
            if let [a, b, ..] = &who[..] {
                return Err(ConfigError {
                    file: self.file.clone(),
                    line: b.1.or(a.1),
                    reason: format!(
                        "{} ({}) and {} ({}) both write {path}: isold would undo one with the other at every check; keep one (false turns either off)",
                        a.0,
                        from(a.1),
                        b.0,
                        from(b.1)
                    ),
                });
            }
        }
        Ok(())
    }
}

impl ContainersConfig {
    /// An entry of `[containers]` (`text` is the file's, for the line of `cpus`).
    fn set(&mut self, k: &str, v: &Value, text: &str) -> Result<(), String> {
        match k {
            "cpus" => {
                let Value::String(s) = v else {
                    return Err("containers.cpus must be a string (a CPU list, \"4-7\")".into());
                };
                self.cpus = CpuSet::parse_list(s.value().trim())
                    .map_err(|e| format!("containers.cpus: {e}"))?;
                self.cpus_line = line_of(text, s.span());
                Ok(())
            }
            "nri" => match v {
                Value::Boolean(b) => {
                    self.nri = *b.value();
                    Ok(())
                }
                _ => Err("containers.nri takes true or false".into()),
            },
            "nri_socket" => match v {
                Value::String(s) if Path::new(s.value()).is_absolute() => {
                    self.nri_socket = PathBuf::from(s.value());
                    Ok(())
                }
                _ => Err(
                    "containers.nri_socket must be an absolute path (\"/var/run/nri/nri.sock\")"
                        .into(),
                ),
            },
            _ => Err(unknown("key", k, CONTAINERS_KEYS)),
        }
    }
}
