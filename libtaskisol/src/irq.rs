//! Interrupts: the `/proc/irq/N` directories (every IRQ the kernel has allocated, including
//! those with no handler yet, which `/proc/interrupts` does not list), their affinity files,
//! `default_smp_affinity`, and the `/proc/interrupts` table.

use crate::cpuset::CpuSet;
use crate::error::{Error, Result};
use crate::sysroot::SysRoot;
use crate::topology::{read_cpu_list, read_cpu_list_opt, read_cpu_mask};

/// The numbers of every IRQ under `/proc/irq`, ascending.
pub fn irq_numbers(root: &SysRoot) -> Result<Vec<u32>> {
    root.read_dir_numbers("/proc/irq")
}

/// The kernel path of a file of IRQ `irq` (`smp_affinity_list`, `effective_affinity_list`).
pub fn irq_file(irq: u32, name: &str) -> String {
    format!("/proc/irq/{irq}/{name}")
}

/// The CPUs IRQ `irq` may be delivered to (`smp_affinity_list`).
pub fn affinity(root: &SysRoot, irq: u32) -> Result<CpuSet> {
    read_cpu_list(root, &irq_file(irq, "smp_affinity_list"))
}

/// The CPUs the interrupt controller really targets (`effective_affinity_list`); `None` where
/// the kernel lacks the file (CONFIG_GENERIC_IRQ_EFFECTIVE_AFF_MASK off).
pub fn effective_affinity(root: &SysRoot, irq: u32) -> Result<Option<CpuSet>> {
    read_cpu_list_opt(root, &irq_file(irq, "effective_affinity_list"))
}

/// Set the affinity of IRQ `irq`. Managed IRQs and some legacy ones (the x86 timer and
/// cascade) refuse with EIO (older kernels) or EPERM: see [`is_unmovable_errno`].
pub fn set_affinity(root: &SysRoot, irq: u32, cpus: &CpuSet) -> Result<()> {
    root.write_attr(irq_file(irq, "smp_affinity_list"), &cpus.to_list_string())
}

/// Whether an affinity write failed because the kernel does not let this IRQ move (as
/// opposed to a bad value): EIO from `irq_can_set_affinity_usr()` and managed IRQs, EPERM on
/// newer kernels.
pub fn is_unmovable_errno(errno: Option<i32>) -> bool {
    matches!(errno, Some(libc::EIO) | Some(libc::EPERM))
}

/// The affinity new IRQs get (`/proc/irq/default_smp_affinity`, a hex mask).
pub fn default_affinity(root: &SysRoot) -> Result<CpuSet> {
    read_cpu_mask(root, "/proc/irq/default_smp_affinity")
}

/// One row of `/proc/interrupts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterruptRow {
    /// The label before the colon: an IRQ number ("24") or a per-CPU source ("LOC").
    pub label: String,
    /// Counts per CPU, in the order of [`Interrupts::cpus`]; fewer for rows such as `ERR`.
    pub counts: Vec<u64>,
    /// The rest of the line: chip, hardware IRQ, trigger and action names
    /// (`IO-APIC   2-edge      timer`), or the description (`Local timer interrupts`).
    pub description: String,
}

impl InterruptRow {
    /// The IRQ number, for numbered rows.
    pub fn irq(&self) -> Option<u32> {
        self.label.parse().ok()
    }

    /// The names of the IRQ's handlers (actions) of a numbered row, as the kernel lists them
    /// after the chip, the hardware IRQ number and the trigger (`virtio0-input.0`; a shared
    /// line has several: `ehci_hcd:usb1, uhci_hcd:usb3`); none without a handler. Where the
    /// trigger word cannot be found, the last word.
    pub fn actions(&self) -> Vec<String> {
        if self.irq().is_none() {
            return Vec::new();
        }
        let words: Vec<&str> = self.description.split_whitespace().collect();
        let trigger = words.iter().rposition(|w| {
            let w = w.to_ascii_lowercase();
            ["edge", "level", "fasteoi", "eoi"]
                .iter()
                .any(|t| w == *t || w.ends_with(&format!("-{t}")))
        });
        let rest = match trigger {
            Some(i) => &words[i + 1..],
            None => &words[words.len().saturating_sub(1)..],
        };
        rest.join(" ")
            .split(", ")
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// The handlers' names joined as the kernel shows them (`virtio0-input.0`,
    /// `ehci_hcd:usb1, uhci_hcd:usb3`); empty when the IRQ has no handler.
    pub fn action(&self) -> String {
        self.actions().join(", ")
    }
}

/// The `/proc/interrupts` table.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Interrupts {
    /// The CPU of each count column (offline CPUs have no column).
    pub cpus: Vec<usize>,
    /// Every row, in file order.
    pub rows: Vec<InterruptRow>,
}

impl Interrupts {
    /// Parse the text of `/proc/interrupts`.
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let mut lines = text.lines();
        let header = lines.next().ok_or("empty file")?;
        let cpus = header
            .split_whitespace()
            .map(|c| {
                c.strip_prefix("CPU")
                    .and_then(|n| n.parse::<usize>().ok())
                    .ok_or_else(|| format!("header column {c:?} is not CPUn"))
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let mut rows = Vec::new();
        for line in lines {
            let Some((label, rest)) = line.split_once(':') else {
                if line.trim().is_empty() {
                    continue;
                }
                return Err(format!("line without a label: {line:?}"));
            };
            // Byte by byte: on a 448-CPU host the file holds two million counts.
            let b = rest.as_bytes();
            let mut counts = Vec::with_capacity(cpus.len());
            let mut at = 0;
            while counts.len() < cpus.len() {
                let mut i = at;
                while i < b.len() && b[i].is_ascii_whitespace() {
                    i += 1;
                }
                let start = i;
                let mut n: u64 = 0;
                while i < b.len() && b[i].is_ascii_digit() {
                    n = n
                        .checked_mul(10)
                        .and_then(|n| n.checked_add(u64::from(b[i] - b'0')))
                        .ok_or_else(|| format!("count too large in {line:?}"))?;
                    i += 1;
                }
                if i == start {
                    break;
                }
                counts.push(n);
                at = i;
            }
            rows.push(InterruptRow {
                label: label.trim().to_string(),
                counts,
                description: rest[at..].trim().to_string(),
            });
        }
        Ok(Interrupts { cpus, rows })
    }

    /// Read and parse `/proc/interrupts`.
    pub fn read(root: &SysRoot) -> Result<Self> {
        root.read_parsed("/proc/interrupts", Self::parse)
    }

    /// The row of IRQ `irq`, if the IRQ has one (IRQs without a handler have none).
    pub fn irq(&self, irq: u32) -> Option<&InterruptRow> {
        self.rows.iter().find(|r| r.irq() == Some(irq))
    }
}

/// An IRQ as isolation tools see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IrqInfo {
    /// The IRQ number.
    pub irq: u32,
    /// `smp_affinity_list`.
    pub affinity: CpuSet,
    /// `effective_affinity_list`, where the kernel has it.
    pub effective: Option<CpuSet>,
    /// The action names from `/proc/interrupts`, joined with ", " (empty without a
    /// handler).
    pub action: String,
    /// Each action name (a shared line has several).
    pub actions: Vec<String>,
}

/// Every IRQ under `/proc/irq` with its affinity and name. An IRQ freed while being read is
/// left out.
pub fn list(root: &SysRoot) -> Result<Vec<IrqInfo>> {
    let table = match Interrupts::read(root) {
        Ok(t) => t,
        Err(Error::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Interrupts::default()
        }
        Err(e) => return Err(e),
    };
    // One pass over the rows (a search per IRQ was quadratic in the IRQ count).
    let rows: std::collections::HashMap<u32, &InterruptRow> = table
        .rows
        .iter()
        .filter_map(|r| Some((r.irq()?, r)))
        .collect();
    let mut out = Vec::new();
    for irq in irq_numbers(root)? {
        let affinity = match affinity(root, irq) {
            Ok(a) => a,
            Err(e) if e.errno() == Some(libc::ENOENT) => continue,
            Err(e) => return Err(e),
        };
        out.push(IrqInfo {
            irq,
            affinity,
            effective: effective_affinity(root, irq)?,
            action: rows.get(&irq).map(|r| r.action()).unwrap_or_default(),
            actions: rows.get(&irq).map(|r| r.actions()).unwrap_or_default(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "           CPU0       CPU1       CPU3       \n\
  0:         78          0          0   IO-APIC   2-edge      timer\n\
 24:          0          0          0  PCI-MSIX-0000:00:03.0   0-edge      virtio0-config\n\
LOC:        988        895        119   Local timer interrupts\n\
ERR:          0\n";

    #[test]
    fn parses_rows_with_the_cpu_of_each_column() {
        let t = Interrupts::parse(SAMPLE).unwrap();
        assert_eq!(t.cpus, vec![0, 1, 3]);
        assert_eq!(t.rows.len(), 4);
        assert_eq!(t.irq(0).unwrap().counts, vec![78, 0, 0]);
        assert_eq!(t.irq(0).unwrap().action(), "timer");
        assert_eq!(t.irq(24).unwrap().action(), "virtio0-config");
        let loc = &t.rows[2];
        assert_eq!(loc.label, "LOC");
        assert_eq!(loc.counts, vec![988, 895, 119]);
        assert_eq!(loc.description, "Local timer interrupts");
        assert_eq!(loc.action(), "");
        // A shared line lists every handler after the trigger; a row of another format (no
        // trigger word) gives its last word.
        let more = Interrupts::parse(
            "  CPU0 CPU1\n 16:  5  0  IO-APIC  16-fasteoi   ehci_hcd:usb1, uhci_hcd:usb3\n 30:  1  0  GICv3  27 Level     arch_timer\n 31:  1  0  weird chip name\n",
        )
        .unwrap();
        assert_eq!(
            more.irq(16).unwrap().actions(),
            ["ehci_hcd:usb1", "uhci_hcd:usb3"]
        );
        assert_eq!(
            more.irq(16).unwrap().action(),
            "ehci_hcd:usb1, uhci_hcd:usb3"
        );
        assert_eq!(more.irq(30).unwrap().actions(), ["arch_timer"]);
        assert_eq!(more.irq(31).unwrap().actions(), ["name"]);
        assert_eq!(t.rows[3].counts, vec![0]);
    }

    #[test]
    fn rejects_a_bad_header() {
        assert!(Interrupts::parse("CPU0 GPU1\n")
            .unwrap_err()
            .contains("GPU1"));
        assert!(Interrupts::parse("").is_err());
    }

    #[test]
    fn counts_stop_at_the_first_word_and_never_wrap() {
        let t = Interrupts::parse(
            "  CPU0 CPU1 CPU2
  7:  18446744073709551615 3x  4  IO-APIC 7-edge  kbd
",
        )
        .unwrap();
        assert_eq!(t.rows[0].counts, [u64::MAX, 3]);
        assert_eq!(t.rows[0].description, "x  4  IO-APIC 7-edge  kbd");
        let e = Interrupts::parse(
            "  CPU0
  7:  18446744073709551616  IO-APIC
",
        )
        .unwrap_err();
        assert!(
            e.contains("count too large") && e.contains("18446744073709551616"),
            "{e}"
        );
    }

    #[test]
    fn unmovable_errnos() {
        assert!(is_unmovable_errno(Some(libc::EIO)));
        assert!(is_unmovable_errno(Some(libc::EPERM)));
        assert!(!is_unmovable_errno(Some(libc::EINVAL)));
        assert!(!is_unmovable_errno(None));
    }

    /// A row never has more counts than the header has CPUs, even when its description
    /// starts with a number.
    #[test]
    fn counts_stop_at_the_cpu_columns() {
        let t = Interrupts::parse("CPU0 CPU1\n 27: 1 2 3-level gpio-keys\n").unwrap();
        assert_eq!(t.rows[0].counts, vec![1, 2]);
        assert_eq!(t.rows[0].description, "3-level gpio-keys");
    }

    fn put(dir: &std::path::Path, rel: &str, content: &str) {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    /// Every IRQ directory is listed, also without /proc/interrupts (then without names); an
    /// IRQ freed while being read (its file gone) is left out; any other read error is one.
    #[test]
    fn irqs_are_listed_from_proc_irq() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let root = SysRoot::new(d);
        put(d, "proc/irq/default_smp_affinity", "c\n");
        assert_eq!(default_affinity(&root).unwrap(), "2-3".parse().unwrap());
        put(d, "proc/irq/4/smp_affinity_list", "0-3\n");
        put(d, "proc/irq/4/effective_affinity_list", "1\n");
        std::fs::create_dir_all(d.join("proc/irq/9")).unwrap(); // freed meanwhile
        let l = list(&root).unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].irq, 4);
        assert_eq!(l[0].action, "");
        assert_eq!(l[0].effective, Some("1".parse().unwrap()));
        put(
            d,
            "proc/interrupts",
            "CPU0 CPU1\n  4: 0 1 IO-APIC 4-edge ttyS0\n",
        );
        assert_eq!(list(&root).unwrap()[0].action, "ttyS0");
        // A directory where a file should be: EISDIR, reported.
        std::fs::create_dir_all(d.join("proc/irq/9/smp_affinity_list")).unwrap();
        assert_eq!(list(&root).unwrap_err().errno(), Some(libc::EISDIR));
        std::fs::remove_dir_all(d.join("proc/irq/9")).unwrap();
        std::fs::remove_file(d.join("proc/interrupts")).unwrap();
        std::fs::create_dir(d.join("proc/interrupts")).unwrap();
        assert!(list(&root).is_err());
    }
}
