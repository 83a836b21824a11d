//! The periodic check of a daemon, reduced to one read per value.
//!
//! Sysctls, sysfs values, IRQ affinities and the policy's files have no change event. A
//! [`Watch`] keeps, for every such target of a policy, the file and what it must hold, plus the
//! IRQ numbers under `/proc/irq`. [`Watch::drifted`] reads each file once and compares: no
//! plan, no `/proc/interrupts`, no state file, no lock. Files under `/proc` and `/sys` stay
//! open, and a check is one pread(2) at offset 0 each (the kernel makes the text anew on every
//! read from 0), plus one rewind and read of the open `/proc/irq` directory; the policy's own
//! files are read by path, since an editor replaces them with a new file. When values differ, [`Watch::drift`]
//! names their targets, for the caller to apply those alone
//! ([`engine::apply_only`](super::engine::apply_only)); when an IRQ came or went, the watch no
//! longer covers every IRQ, and the caller runs the full verify and apply. Either way it then
//! builds a new watch.

use std::collections::BTreeSet;
use std::fs::File;
use std::os::unix::fs::FileExt;

use super::plan::{self, Op, Target, Want};
use super::state::State;
use super::Policy;
use crate::cpuset::CpuSet;
use crate::error::Result;
use crate::irq;
use crate::sysroot::SysRoot;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Check {
    /// An attribute compared as the plan compares it.
    Want(Want),
    /// An IRQ's `smp_affinity_list`.
    Cpus(CpuSet),
    /// A whole file the policy owns.
    Content(String),
}

/// One watched file: its target, its kernel path, what it must hold, and (under `/proc` and
/// `/sys`) the file kept open.
#[derive(Debug)]
struct Item {
    target: Target,
    path: String,
    check: Check,
    file: Option<File>,
}

/// What a policy's event-less values must look like.
#[derive(Debug, Default)]
pub struct Watch {
    items: Vec<Item>,
    irqs: BTreeSet<u32>,
    /// `/proc/irq`, kept open.
    irq_dir: Option<std::sync::Mutex<nix::dir::Dir>>,
}

/// What [`Watch::drift`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drift {
    /// Every watched value holds what it must.
    None,
    /// IRQs came or went since the watch was made: it does not cover them all.
    IrqSet,
    /// These targets no longer hold what they must (or their files cannot be read), in plan
    /// order.
    Targets(Vec<Target>),
}

fn irq_numbers(root: &SysRoot) -> BTreeSet<u32> {
    root.read_dir_numbers::<u32>("/proc/irq")
        .unwrap_or_default()
        .into_iter()
        .collect()
}

/// The IRQ numbers in the open directory `dir` (read from its start).
fn irq_numbers_in(dir: &mut nix::dir::Dir) -> Option<BTreeSet<u32>> {
    let mut set = BTreeSet::new();
    // The iterator rewinds the directory when dropped, ready for the next check.
    for e in dir.iter() {
        let e = e.ok()?;
        if let Some(n) = e.file_name().to_str().ok().and_then(|n| n.parse().ok()) {
            set.insert(n);
        }
    }
    Some(set)
}

impl Watch {
    /// The watch of `policy` (its thread and partition items are not watched here). Targets
    /// the state file at `state_path` records as not changeable are left out: they differ
    /// for good.
    pub fn of(root: &SysRoot, policy: &Policy, state_path: &std::path::Path) -> Result<Watch> {
        let unchangeable = State::unchangeable_of(state_path)?;
        let mut items = Vec::new();
        for t in plan::plan(policy, root)? {
            if unchangeable.contains_key(&t.id) {
                continue;
            }
            let (path, check) = match &t.op {
                // A file this kernel lacks (a sysctl of another configuration) is not
                // watched: apply reported it not present.
                Op::Attr { path, want } if root.exists(path) => {
                    (path.clone(), Check::Want(want.clone()))
                }
                Op::Irq { irq: n, want } => (
                    irq::irq_file(*n, "smp_affinity_list"),
                    Check::Cpus(want.clone()),
                ),
                Op::File { path, content } => (path.clone(), Check::Content(content.clone())),
                _ => continue,
            };
            let file = if path.starts_with("/proc/") || path.starts_with("/sys/") {
                File::open(root.path(&path)).ok()
            } else {
                None
            };
            items.push(Item {
                target: t,
                path,
                check,
                file,
            });
        }
        let irq_dir = nix::dir::Dir::open(
            &root.path("/proc/irq"),
            nix::fcntl::OFlag::O_RDONLY
                | nix::fcntl::OFlag::O_DIRECTORY
                | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .ok()
        .map(std::sync::Mutex::new);
        Ok(Watch {
            items,
            irqs: irq_numbers(root),
            irq_dir,
        })
    }

    /// Whether the IRQs under `/proc/irq` are still those the watch was made with.
    fn same_irqs(&self, root: &SysRoot) -> bool {
        let now = match &self.irq_dir {
            Some(d) => d
                .lock()
                .ok()
                .and_then(|mut d| irq_numbers_in(&mut d))
                .unwrap_or_else(|| irq_numbers(root)),
            None => irq_numbers(root),
        };
        now == self.irqs
    }

    /// How many files a check reads.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether it watches nothing.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The first watched file that no longer holds what it must (or cannot be read), or
    /// `/proc/irq` when IRQs came or went.
    pub fn drifted(&self, root: &SysRoot) -> Option<String> {
        if !self.same_irqs(root) {
            return Some("/proc/irq".into());
        }
        self.items
            .iter()
            .find(|i| !i.holds(root))
            .map(|i| i.path.clone())
    }

    /// Every watched value read once: which targets drifted, or whether IRQs came or went.
    pub fn drift(&self, root: &SysRoot) -> Drift {
        if !self.same_irqs(root) {
            return Drift::IrqSet;
        }
        let off: Vec<Target> = self
            .items
            .iter()
            .filter(|i| !i.holds(root))
            .map(|i| i.target.clone())
            .collect();
        if off.is_empty() {
            Drift::None
        } else {
            Drift::Targets(off)
        }
    }
}

impl Item {
    /// Whether the file holds what the check wants (unreadable: no).
    fn holds(&self, root: &SysRoot) -> bool {
        let text = match &self.file {
            Some(f) => read_from_start(f),
            None => root.read_to_string(self.path.as_str()).ok(),
        };
        match (text, &self.check) {
            (Some(raw), Check::Want(w)) => w.matches(&raw),
            (Some(raw), Check::Cpus(want)) => {
                CpuSet::parse_list(raw.trim()).is_ok_and(|c| &c == want)
            }
            (Some(raw), Check::Content(c)) => &raw == c,
            (None, _) => false,
        }
    }
}

/// The whole text of an open kernel file, read from offset 0: one pread(2) for anything
/// shorter than 4 KiB.
fn read_from_start(f: &File) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    loop {
        match f.read_at(&mut buf[len..], len as u64) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if len < buf.len() {
                    break;
                }
                buf.resize(buf.len() * 2, 0);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).ok()
}
