//! The `[items]` of a policy, each declared once, in its own file, as an [`Item`]: its name
//! and documentation, how its `[items]` value is read, what it plans, which kernel values and
//! files it may write back at restore, what `isold audit` says about the machine for it and
//! what its files wait for. The configuration's parser, the plan, the state file's check
//! ([`crate::policy::state::Entry::check`]), the audit's settings, `isold items` and the man
//! page's list of items all read [`ALL`].
//!
//! Adding an item: a file here with its `ITEM` (and its tests), its line in [`ALL`] (the
//! order of apply), and its default in the presets' table ([`super::preset::SETTINGS`]).
//! An item whose value is a word or a flag needs nothing else: the configuration keeps it by
//! name ([`super::Policy::value`]). The engine writes what the plan asks ([`super::Op`]),
//! verify compares it, restore puts back what was recorded.

use std::rc::Rc;

use serde::{Deserialize, Serialize};

use super::target::Target;
use super::Policy;
use crate::cpuset::CpuSet;
use crate::error::Result;
use crate::sysroot::SysRoot;
use crate::tasks::Thread;

pub mod cgroup_partition;
pub mod cpufreq;
pub mod irq_affinity;
pub mod irqbalance;
pub mod ksm;
pub mod kthread_priority;
pub mod kvm;
pub mod machinecheck;
pub mod net_queues;
pub mod pm_qos;
pub mod printk;
pub mod rps;
pub mod sysctl;
pub mod systemd_cpuaffinity;
pub mod tasks;
pub mod thp;
pub mod workqueue;

/// Every item, in the order apply sets them (restore goes backwards): the kernel's settings,
/// then the workqueues (per-workqueue masks before the global one), power, the network's
/// channels and masks (before the IRQs: a driver respreads its queues' interrupts when its
/// channels change), IRQs, threads, the
/// partition (after the threads: the workloads it moves in keep their CPUs, the rest already
/// left), and the files read at boot last.
pub const ALL: &[&Item] = &[
    &sysctl::ITEM,
    &printk::ITEM,
    &thp::ITEM,
    &ksm::ITEM,
    &machinecheck::ITEM,
    &workqueue::ITEM,
    &pm_qos::ITEM,
    &cpufreq::ITEM,
    &net_queues::ITEM,
    &rps::ITEM,
    &irq_affinity::ITEM,
    &tasks::ITEM,
    &kthread_priority::ITEM,
    &cgroup_partition::ITEM,
    &kvm::ITEM,
    &irqbalance::ITEM,
    &systemd_cpuaffinity::ITEM,
];

/// The item named `name`.
pub fn by_name(name: &str) -> Option<&'static Item> {
    ALL.iter().copied().find(|i| i.name == name)
}

/// One `[items]` row, declared once.
pub struct Item {
    /// Its name in `[items]`, in the state file and in reports.
    pub name: &'static str,
    /// One line: what it sets.
    pub doc: &'static str,
    /// Its paragraph in isold.toml(5), troff, after `.TP` and `.B name`.
    pub man: &'static str,
    /// The value of `[items] name = v` (`v` as the file spells it; `true` arrives as the
    /// preset's value where the preset has one): `None` turns the item off, `Some` is the
    /// value kept (see [`super::Policy::value`]). `Err` says what it takes, after the item's
    /// name ("takes true or false, not \"x\"").
    pub parse: fn(&str) -> std::result::Result<Option<String>, String>,
    /// Its targets, in apply order.
    pub plan: fn(&mut Planning<'_>) -> Result<()>,
    /// The kernel file of a recorded value whose id is `kind:key` (`ksm`, `irq:24`), when the
    /// item records such values: a state file's entry is written back only to the file its id
    /// names here.
    pub restores: fn(kind: &str, key: &str) -> Option<String>,
    /// The files on disk it writes (below the root): no other file is ever written or
    /// restored for it.
    pub files: &'static [&'static str],
    /// Its findings in `isold audit`: the machine's values that decide whether the kernel
    /// puts work on the audited CPUs.
    pub audit: fn(&Machine<'_>, &mut Vec<Setting>) -> Result<()>,
    /// What to tell after an apply that changed it.
    pub applied_note: Option<&'static str>,
    /// What a file it wrote, right on disk, still waits for to take effect, if anything.
    pub waiting: fn(&SysRoot, &Target) -> Option<String>,
    /// Whether a line of a file it wrote belongs to it, for state files older than 0.2 that
    /// did not record what isold wrote.
    pub line_before_0_2: fn(&str) -> bool,
    /// Whether it plans per network device, honouring [`Planning::devices`]: a device's
    /// events make `isold run` plan it for that device alone.
    pub per_device: bool,
}

impl std::fmt::Debug for Item {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Item({})", self.name)
    }
}

/// An item with nothing but its name, documentation and a flag: the base the items' files
/// fill in (`Item { name, doc, man, plan, ..items::BASE }`).
pub const BASE: Item = Item {
    name: "",
    doc: "",
    man: "",
    parse: flag,
    plan: |_| Ok(()),
    restores: |_, _| None,
    files: &[],
    audit: |_, _| Ok(()),
    applied_note: None,
    waiting: |_, _| None,
    line_before_0_2: |_| false,
    per_device: false,
};

/// `true` or `false`.
pub fn flag(v: &str) -> std::result::Result<Option<String>, String> {
    match v {
        "true" => Ok(Some("true".into())),
        "false" => Ok(None),
        _ => Err(format!("takes true or false, not {v:?}")),
    }
}

/// The item of a recorded kernel value whose id is `kind:key`, and its file.
pub fn restored_file(kind: &str, key: &str) -> Option<(&'static str, String)> {
    ALL.iter()
        .find_map(|i| (i.restores)(kind, key).map(|path| (i.name, path)))
}

/// The item of a file on disk isold may write: one an item declares, or a file GRUB's
/// `grub-mkconfig` sources (`/etc/default/grub`, `/etc/default/grub.d/*.cfg`), in which
/// `isold bootargs --write-grub` replaces an argument the kernel would take over its
/// drop-in's ([`super::grub::is_source_path`]). A state file naming any other path is
/// refused.
pub fn owned_item(path: &str) -> Option<&'static str> {
    owned_files()
        .find(|(_, p)| *p == path)
        .map(|(item, _)| item)
        .or_else(|| super::grub::is_source_path(path).then_some("bootargs"))
}

/// Every file on disk isold writes, with its item: nothing else is ever written or restored
/// as a file (a state file naming another path is refused).
pub fn owned_files() -> impl Iterator<Item = (&'static str, &'static str)> {
    ALL.iter()
        .flat_map(|i| i.files.iter().map(|f| (i.name, *f)))
        .chain(std::iter::once(("bootargs", super::paths::GRUB_DROP_IN)))
}

/// The CPU of a per-CPU value's key (`cpu3`).
fn cpu_of(key: &str) -> Option<usize> {
    key.strip_prefix("cpu")
        .and_then(|n| n.parse::<usize>().ok())
}

/// A file's content, `None` when it does not exist; one that cannot be read is an error,
/// never taken as missing.
pub fn read_file_opt(root: &SysRoot, path: &str) -> Result<Option<String>> {
    match root.read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.errno() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A file target's path and when the file last changed (seconds since the epoch): what an
/// item's `waiting` compares with the time its reader started.
fn file_changed(root: &SysRoot, t: &Target) -> Option<(String, u64)> {
    let super::target::Op::File { path, .. } = &t.op else {
        return None;
    };
    let changed = std::fs::metadata(root.path(path)).ok()?.modified().ok()?;
    let secs = changed
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs();
    Some((path.clone(), secs))
}

/// What an item's plan reads and where it puts its targets.
#[derive(Debug)]
pub struct Planning<'a> {
    /// The policy.
    pub policy: &'a Policy,
    /// The kernel.
    pub root: &'a SysRoot,
    /// The targets so far.
    pub out: Vec<Target>,
    /// Only these network devices, for the items that plan per device (a daemon's answer
    /// to the devices' events); `None`: the whole machine.
    pub devices: Option<std::collections::BTreeSet<String>>,
    threads: Option<Rc<Vec<Thread>>>,
}

impl<'a> Planning<'a> {
    /// A plan of `policy` on the kernel under `root`, empty so far.
    pub fn new(policy: &'a Policy, root: &'a SysRoot) -> Planning<'a> {
        Planning {
            policy,
            root,
            out: Vec::new(),
            devices: None,
            threads: None,
        }
    }

    /// The network devices to plan: those named by [`Planning::devices`] that exist, or every
    /// device of the namespace.
    pub fn net_devices(&self) -> Result<Vec<crate::net::NetDev>> {
        match &self.devices {
            None => crate::net::devices(self.root),
            Some(names) => {
                let mut out = Vec::new();
                for n in names.iter().filter(|n| crate::net::valid_name(n)) {
                    out.extend(crate::net::device(self.root, n)?);
                }
                Ok(out)
            }
        }
    }

    /// Every thread, read once for the items that need them (a /proc scan: thousands of
    /// files).
    pub fn threads(&mut self) -> Result<Rc<Vec<Thread>>> {
        if let Some(t) = &self.threads {
            return Ok(t.clone());
        }
        let root = self.root;
        let t = Rc::new(crate::cost::stage("plan", "read every thread", || {
            crate::tasks::all_threads_with(root, crate::tasks::Detail::NoSwitches)
        })?);
        self.threads = Some(t.clone());
        Ok(t)
    }
}

/// What the audit looks at for the items' findings.
#[derive(Debug)]
pub struct Machine<'a> {
    /// The kernel.
    pub root: &'a SysRoot,
    /// Every thread, as the audit's last sample read them.
    pub threads: &'a [Thread],
    /// The audited CPUs.
    pub cpus: &'a CpuSet,
}

/// A setting that decides whether the kernel puts work on the CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setting {
    /// What it is (`tick`, `kernel.timer_migration`, ...).
    pub name: String,
    /// Its value here.
    pub value: String,
    /// Whether it keeps the CPU quiet.
    pub ok: bool,
    /// What it does to the CPU when not ok.
    pub why: String,
    /// What changes it (an isold item, a sysctl, a boot argument); empty when ok.
    pub fix: String,
}

impl Setting {
    /// The setting `name` with value `value` (nothing when the kernel lacks it), quiet when
    /// `ok` says so, else with `why` and `fix`.
    pub fn judged(
        name: &str,
        value: Option<String>,
        ok: impl Fn(&str) -> bool,
        why: &str,
        fix: &str,
    ) -> Option<Setting> {
        let value = value?;
        let good = ok(&value);
        Some(Setting {
            name: name.into(),
            value,
            ok: good,
            why: why.into(),
            fix: if good { String::new() } else { fix.into() },
        })
    }
}

/// The isold.toml(5) text of every item: `.TP`, the name in bold, its paragraph.
pub fn man_page_list() -> String {
    ALL.iter()
        .map(|i| format!(".TP\n.B {}\n{}\n", i.name, i.man.trim_end()))
        .collect()
}

/// The line of isold.toml(5)'s source where [`man_page_list`] goes.
pub const MAN_PAGE_MARK: &str = ".\\\" @ITEMS@";

/// The man page `template` with the items' list in place of its [`MAN_PAGE_MARK`] line;
/// `None` without that line.
pub fn man_page(template: &str) -> Option<String> {
    let mut out = String::with_capacity(template.len() + 16384);
    let mut found = false;
    for line in template.split_inclusive('\n') {
        if line.trim_end() == MAN_PAGE_MARK {
            out.push_str(&man_page_list());
            found = true;
        } else {
            out.push_str(line);
        }
    }
    found.then_some(out)
}

/// How a configuration sets item `name`, in words: its value, `on`, `off`, or for a table
/// item the number of its rows.
pub fn shown_value(c: &super::config::Config, name: &str) -> String {
    let rows = match name {
        "sysctl" => Some(c.sysctl.len()),
        "kthread_priority" => Some(c.kthread_priority.len()),
        "kvm" => Some(c.kvm.len()),
        _ => None,
    };
    match (rows, c.value(name)) {
        (Some(0), _) | (None, None) => "off".into(),
        (Some(n), _) => format!("{n} rows"),
        (None, Some("true")) => "on".into(),
        (None, Some(v)) => v.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_documented() {
        let mut names: Vec<&str> = ALL.iter().map(|i| i.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        for i in ALL {
            assert!(!i.doc.is_empty() && !i.man.is_empty(), "{}", i.name);
            // One entry of the list: no empty line, no new section or entry.
            assert!(
                !i.man.lines().any(|l| l.trim().is_empty()
                    || [".SH", ".SS", ".TP"].iter().any(|m| l.starts_with(m))),
                "{}: a paragraph, not a section",
                i.name
            );
        }
    }

    #[test]
    fn a_recorded_value_belongs_to_one_item_only() {
        for (kind, key) in [
            ("ksm", ""),
            ("irq", "7"),
            ("irq", "default"),
            ("sysctl", "vm.stat_interval"),
            ("workqueue", ""),
            ("pm_qos", "cpu3"),
        ] {
            let owners: Vec<&str> = ALL
                .iter()
                .filter(|i| (i.restores)(kind, key).is_some())
                .map(|i| i.name)
                .collect();
            assert_eq!(owners.len(), 1, "{kind}:{key}: {owners:?}");
        }
        assert_eq!(restored_file("ksm", "x"), None);
        assert_eq!(restored_file("nothing", ""), None);
    }

    #[test]
    fn owned_files_are_the_items_and_grubs() {
        assert_eq!(owned_item(kvm::KVM_CONF), Some("kvm"));
        assert_eq!(owned_item("/etc/default/irqbalance"), Some("irqbalance"));
        assert_eq!(
            owned_item(super::super::paths::GRUB_DROP_IN),
            Some("bootargs")
        );
        assert_eq!(owned_item("/etc/default/grub"), Some("bootargs"));
        assert_eq!(owned_item("/etc/shadow"), None);
    }
}
