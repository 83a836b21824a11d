//! The periodic check of a daemon, reduced to one read per value.
//!
//! Sysctls, sysfs values, IRQ affinities and the policy's files have no change event. A
//! [`Watch`] keeps, for every such target of a policy, the file and what it must hold, plus the
//! IRQ numbers under `/proc/irq`. [`Watch::drifted`] reads each file once and compares: no
//! plan, no `/proc/interrupts`, no state file, no lock. The kernel's attributes stay open and
//! a check reads each with one pread(2) at offset 0 (the kernel makes the text anew on every
//! read from 0), plus one rewind and read of the open `/proc/irq` directory; the policy's own
//! files are read by path, since an editor replaces them with a new file. When values differ,
//! [`Watch::drift`] names their targets, for the caller to apply those alone
//! ([`engine::apply_only`](super::engine::apply_only)); when an IRQ came or went, the watch no
//! longer covers every IRQ, and the caller runs the full verify and apply. Either way it then
//! builds a new watch.

use std::collections::BTreeSet;
use std::fs::File;
use std::os::unix::fs::FileExt;

use super::plan::{self, Op, Target, Want};
use super::state::{State, StateFiles};
use super::Policy;
use crate::cpuset::CpuSet;
use crate::error::Result;
use crate::irq;
use crate::sysroot::SysRoot;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Check {
    /// An attribute compared as the plan compares it.
    Want(Want),
    /// An IRQ's `smp_affinity_list`: right when it names no isolated CPU (where among the
    /// others is irqbalance's business: it may move it, isold does not fight it).
    OffCpus(CpuSet),
    /// isold's lines in a file it shares with its administrator: right when putting them in
    /// changes nothing (the administrator's own lines are no drift).
    Lines(super::lines::FileEdit),
}

/// One watched file: its target, its kernel path, what it must hold, and (a kernel
/// attribute) the file kept open.
#[derive(Debug)]
struct Item {
    target: Target,
    path: String,
    check: Check,
    file: Option<File>,
    /// How much a read of `file` asks for: [`READ_FIRST`] until its text filled that.
    read_len: std::sync::atomic::AtomicUsize,
}

/// What a policy's event-less values must look like.
#[derive(Debug, Default)]
pub struct Watch {
    items: Vec<Item>,
    /// The IRQs when the watch was made; `None` when the policy does not set IRQs'
    /// affinities (`irq_affinity` off): IRQs that come or go change nothing it watches.
    irqs: Option<BTreeSet<u32>>,
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
    /// the runtime state file records as not changeable are left out: they differ
    /// for good.
    pub fn of(root: &SysRoot, policy: &Policy, files: &StateFiles) -> Result<Watch> {
        let unchangeable = State::unchangeable_of(&files.runtime)?;
        let mut items = Vec::new();
        let mut opened = 0;
        for t in plan::plan(policy, root)? {
            // A network device's queue masks are not polled (a node with a thousand veths
            // has thousands): the devices' events bring new ones, a full compare (any other
            // event, a reload) puts back one changed by hand.
            if unchangeable.contains_key(&t.id) || t.id.starts_with("rps:") && t.id != "rps:default"
            {
                continue;
            }
            let (path, check) = match &t.op {
                // A file this kernel lacks (a sysctl of another configuration) is not
                // watched: apply reported it not present.
                Op::Attr { path, want } if root.exists(path) => {
                    (path.clone(), Check::Want(want.clone()))
                }
                Op::Irq { irq: n, .. } => (
                    irq::irq_file(*n, "smp_affinity_list"),
                    Check::OffCpus(policy.isolated.clone()),
                ),
                Op::File { path, edit } => (path.clone(), Check::Lines(edit.clone())),
                _ => continue,
            };
            // Kernel attributes stay open, up to OPEN_MAX of them (a node with a thousand
            // veths has four thousand rx queues: the rest are read by path); the policy's
            // own files are read by path.
            let file = match check {
                Check::Lines(_) => None,
                _ if opened >= OPEN_MAX => None,
                _ => File::open(root.path(&path)).ok(),
            };
            opened += usize::from(file.is_some());
            items.push(Item {
                target: t,
                path,
                check,
                file,
                read_len: READ_FIRST.into(),
            });
        }
        if !policy.on("irq_affinity") {
            return Ok(Watch {
                items,
                irqs: None,
                irq_dir: None,
            });
        }
        // std opens it read-only and close-on-exec; fdopendir takes the descriptor over.
        let irq_dir = File::open(root.path("/proc/irq"))
            .ok()
            .and_then(|f| nix::dir::Dir::from_fd(std::os::fd::IntoRawFd::into_raw_fd(f)).ok())
            .map(std::sync::Mutex::new);
        Ok(Watch {
            items,
            irqs: Some(irq_numbers(root)),
            irq_dir,
        })
    }

    /// Watch these targets too (a new device's): the attributes among them, read by path
    /// (not a device's queue masks: see [`Watch::of`]).
    pub fn add(&mut self, root: &SysRoot, targets: &[Target]) {
        for t in targets.iter().filter(|t| !t.id.starts_with("rps:")) {
            if let Op::Attr { path, want } = &t.op {
                if root.exists(path) && !self.items.iter().any(|i| i.target.id == t.id) {
                    self.items.push(Item {
                        target: t.clone(),
                        path: path.clone(),
                        check: Check::Want(want.clone()),
                        file: None,
                        read_len: READ_FIRST.into(),
                    });
                }
            }
        }
    }

    /// Whether the IRQs under `/proc/irq` are still those the watch was made with (a read
    /// that fails says no: the caller then compares everything).
    fn same_irqs(&self, root: &SysRoot) -> bool {
        let Some(irqs) = &self.irqs else {
            return true;
        };
        let now = match &self.irq_dir {
            Some(d) => d.lock().ok().and_then(|mut d| irq_numbers_in(&mut d)),
            None => Some(irq_numbers(root)),
        };
        now.is_some_and(|n| n == *irqs)
    }

    /// How many files a check reads.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether it watches nothing: no file, and not the set of IRQs (a check would read
    /// nothing and find nothing).
    pub fn is_empty(&self) -> bool {
        self.items.is_empty() && self.irqs.is_none()
    }

    /// The first watched file that no longer holds what it must (or cannot be read), or
    /// `/proc/irq` when IRQs came or went.
    pub fn drifted(&self, root: &SysRoot) -> Option<String> {
        if !self.same_irqs(root) {
            return Some("/proc/irq".into());
        }
        let mut buf = [0u8; READ_MAX];
        self.items
            .iter()
            .find(|i| !i.holds(root, &mut buf))
            .map(|i| i.path.clone())
    }

    /// Every watched value read once: which targets drifted, or whether IRQs came or went.
    pub fn drift(&self, root: &SysRoot) -> Drift {
        if !self.same_irqs(root) {
            return Drift::IrqSet;
        }
        let mut buf = [0u8; READ_MAX];
        let off: Vec<Target> = self
            .items
            .iter()
            .filter(|i| !i.holds(root, &mut buf))
            .map(|i| i.target.clone())
            .collect();
        if off.is_empty() {
            Drift::None
        } else {
            Drift::Targets(off)
        }
    }
}

/// The most attributes a watch keeps open: the daemon's descriptors stay well under the
/// usual limit of 1024 whatever the machine (thousands of IRQs, of rx queues).
const OPEN_MAX: usize = 512;

/// The longest kernel attribute read through its open file: more than any value watched
/// (a mask of 8192 CPUs is 2 KiB); a longer one reads as unreadable, so it is compared by the
/// full verify instead.
const READ_MAX: usize = 16 * 1024;

/// What the first read of an attribute asks for: more than any sysctl or sysfs value a policy
/// sets but a big CPU mask. A sysctl's read allocates and zeroes a kernel buffer of the size
/// asked (`proc_sys_call_handler`), twice the cost of the read itself at [`READ_MAX`]; a
/// text that fills this is read again at [`READ_MAX`], and that attribute from then on.
const READ_FIRST: usize = 512;

impl Item {
    /// Whether the file holds what the check wants (unreadable: no). `buf`: room to read an
    /// open attribute into.
    fn holds(&self, root: &SysRoot, buf: &mut [u8]) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let by_path;
        let text = match &self.file {
            Some(f) => {
                let mut len = self.read_len.load(Relaxed).min(buf.len());
                let mut n = match f.read_at(&mut buf[..len], 0) {
                    Ok(n) => n,
                    Err(_) => return false,
                };
                if n == len && len < buf.len() {
                    // It may go on: this attribute is read whole from now on.
                    len = buf.len();
                    self.read_len.store(len, Relaxed);
                    n = match f.read_at(buf, 0) {
                        Ok(n) => n,
                        Err(_) => return false,
                    };
                }
                match text_read(&buf[..len], n) {
                    Some(t) => t,
                    None => return false,
                }
            }
            None => match root.read_to_string(self.path.as_str()) {
                Ok(t) => {
                    by_path = t;
                    by_path.as_str()
                }
                Err(_) => return false,
            },
        };
        match &self.check {
            Check::Want(w) => w.matches(text),
            Check::OffCpus(iso) => {
                CpuSet::parse_list(text.trim()).is_ok_and(|c| plan::irq_off(&c, iso))
            }
            // A file changed within the last FILE_SETTLE may be half written (an editor that
            // truncates and then writes): its check waits, rather than write isold's lines
            // into what the administrator is still writing.
            Check::Lines(e) => e.holds(Some(text)) || self.settling(root),
        }
    }
}

/// How long a file the policy edits is left after a change before a check may repair it.
const FILE_SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

impl Item {
    /// Whether the file was changed within the last [`FILE_SETTLE`].
    fn settling(&self, root: &SysRoot) -> bool {
        std::fs::metadata(root.path(&self.path))
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().map_or(true, |e| e < FILE_SETTLE))
    }
}

/// The text of an open kernel attribute read from offset 0 (the kernel makes it anew on each
/// read from 0): `n` bytes of `buf`. `None` when the text fills `buf` (it may go on) or is
/// not UTF-8.
fn text_read(buf: &[u8], n: usize) -> Option<&str> {
    if n >= buf.len() {
        return None;
    }
    std::str::from_utf8(&buf[..n]).ok()
}
