//! Fixture snapshots: the guest's view of isolation, committed under
//! tests/fixtures/<name>/ as a tree that mirrors the guest's paths (proc/..., sys/...), for the
//! fake-root tests.
//!
//! `TASKISOL_UPDATE_FIXTURES=1` rewrites the tree from the guest. Otherwise the freshly
//! captured isolation-relevant files must equal the committed ones; files that legitimately
//! differ between boots are left out of the comparison (see [`comparison`]).
//!
//! Besides the guest files, the tree holds `irqs-on-isolated-cpus.txt`: the IRQs whose
//! effective affinity includes an isolated CPU, one per line.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use super::{parse_cpu_list, Failure, Outcome};

/// Name of the report file at the root of each fixture tree.
pub const IRQ_REPORT: &str = "irqs-on-isolated-cpus.txt";

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

fn updating() -> bool {
    std::env::var("TASKISOL_UPDATE_FIXTURES").is_ok_and(|v| v == "1")
}

#[derive(Debug, PartialEq, Eq)]
enum Comparison {
    Exact,
    /// /proc/interrupts: which IRQs exist, on which chip, with which name; not the counts.
    InterruptLayout,
    Ignored,
}

fn comparison(path: &str) -> Comparison {
    match path {
        "proc/interrupts" | "proc/softirqs" => Comparison::InterruptLayout,
        // Changes with every Debian kernel update, which the suite picks up on its own.
        "proc/sys/kernel/osrelease" => Comparison::Ignored,
        // Mount ids and options are not isolation state.
        "proc/self/mountinfo" => Comparison::Ignored,
        // New every boot.
        "proc/sys/kernel/random/boot_id" => Comparison::Ignored,
        // Tasks: pids, start times and counters differ between boots.
        p if p
            .strip_prefix("proc/")
            .and_then(|r| r.split('/').next())
            .is_some_and(|pid| pid.chars().all(|c| c.is_ascii_digit())) =>
        {
            Comparison::Ignored
        }
        _ => Comparison::Exact,
    }
}

/// Number of CPU columns of /proc/interrupts (its header row: "CPU0 CPU1 ...").
fn cpu_columns(interrupts: &str) -> usize {
    interrupts
        .lines()
        .next()
        .map(|h| {
            h.split_whitespace()
                .filter(|t| t.starts_with("CPU"))
                .count()
        })
        .unwrap_or(0)
}

/// Each row without its counts: "24: PCI-MSI 49152-edge virtio0-config".
fn interrupt_layout(interrupts: &str) -> String {
    let ncpu = cpu_columns(interrupts);
    let mut out = String::new();
    for line in interrupts.lines().skip(1) {
        let mut tokens = line.split_whitespace();
        let Some(id) = tokens.next() else { continue };
        let rest: Vec<&str> = tokens.collect();
        let counts = rest
            .iter()
            .take(ncpu)
            .take_while(|t| t.chars().all(|c| c.is_ascii_digit()))
            .count();
        out.push_str(id);
        for t in &rest[counts..] {
            out.push(' ');
            out.push_str(t);
        }
        out.push('\n');
    }
    out
}

/// IRQ number -> description ("IO-APIC 4-edge ttyS0").
fn irq_names(interrupts: &str) -> BTreeMap<String, String> {
    interrupt_layout(interrupts)
        .lines()
        .filter_map(|l| {
            let (id, rest) = l.split_once(' ').unwrap_or((l, ""));
            let id = id.strip_suffix(':')?;
            id.chars()
                .all(|c| c.is_ascii_digit())
                .then(|| (id.to_string(), rest.to_string()))
        })
        .collect()
}

fn text(files: &BTreeMap<String, Vec<u8>>, path: &str) -> String {
    files
        .get(path)
        .map(|b| String::from_utf8_lossy(b).trim().to_string())
        .unwrap_or_default()
}

/// The CPUs the kernel isolates by any mechanism: isolcpus domain, nohz_full, and cgroup v2
/// isolated partitions.
pub fn isolated_cpus(files: &BTreeMap<String, Vec<u8>>) -> Vec<u32> {
    let mut cpus: Vec<u32> = [
        "sys/devices/system/cpu/isolated",
        "sys/devices/system/cpu/nohz_full",
        "sys/fs/cgroup/cpuset.cpus.isolated",
    ]
    .iter()
    .flat_map(|p| parse_cpu_list(&text(files, p)).unwrap_or_default())
    .collect();
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

/// One line per IRQ whose effective affinity includes an isolated CPU (by any mechanism); and
/// failures for IRQs the kernel promised to keep off the boot-isolated CPUs: when the command
/// line sets irqaffinity=, an IRQ whose affinity mask has a housekeeping CPU must be delivered
/// to a housekeeping CPU (irqaffinity= places ordinary IRQs, isolcpus=managed_irq managed
/// ones). Cgroup partitions make no such promise, so their CPUs are only reported.
pub fn irqs_on_isolated(files: &BTreeMap<String, Vec<u8>>) -> (String, Vec<String>) {
    let isolated = isolated_cpus(files);
    let boot_isolated: Vec<u32> = [
        "sys/devices/system/cpu/isolated",
        "sys/devices/system/cpu/nohz_full",
    ]
    .iter()
    .flat_map(|p| parse_cpu_list(&text(files, p)).unwrap_or_default())
    .collect();
    let promised = text(files, "proc/cmdline")
        .split_whitespace()
        .any(|a| a.starts_with("irqaffinity="));
    let names = irq_names(&text(files, "proc/interrupts"));
    let mut irqs: Vec<u32> = files
        .keys()
        .filter_map(|p| {
            p.strip_prefix("proc/irq/")?
                .strip_suffix("/effective_affinity_list")?
                .parse()
                .ok()
        })
        .collect();
    irqs.sort_unstable();
    let mut report = String::new();
    let mut misplaced = Vec::new();
    for irq in irqs {
        let effective = text(files, &format!("proc/irq/{irq}/effective_affinity_list"));
        let affinity = text(files, &format!("proc/irq/{irq}/smp_affinity_list"));
        let eff = parse_cpu_list(&effective).unwrap_or_default();
        if !eff.iter().any(|c| isolated.contains(c)) {
            continue;
        }
        let name = names
            .get(&irq.to_string())
            .map(String::as_str)
            .unwrap_or("?");
        report.push_str(&format!(
            "{irq} smp_affinity_list={affinity} effective_affinity_list={effective} {name}\n"
        ));
        let aff = parse_cpu_list(&affinity).unwrap_or_default();
        let on_boot_isolated = eff.iter().any(|c| boot_isolated.contains(c));
        let may_use_housekeeping = aff.iter().any(|c| !boot_isolated.contains(c));
        if promised && on_boot_isolated && may_use_housekeeping {
            misplaced.push(format!(
                "IRQ {irq} ({name}) may run on housekeeping CPUs ({affinity}) but is delivered to {effective}"
            ));
        }
    }
    (report, misplaced)
}

fn read_tree(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            read_tree(root, &path, out)?;
        } else {
            let rel = path
                .strip_prefix(root)
                .expect("under root")
                .to_string_lossy()
                .to_string();
            out.insert(rel, fs::read(&path)?);
        }
    }
    Ok(())
}

fn clip(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let s = s.trim();
    if s.len() > 300 {
        let mut end = 300;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{:?}...", &s[..end])
    } else {
        format!("{s:?}")
    }
}

/// Adds the IRQ check, then writes or compares the fixture `name`.
pub fn process(name: &str, files: &BTreeMap<String, Vec<u8>>, outcome: &mut Outcome) {
    let mut tree: BTreeMap<String, Vec<u8>> = files
        .iter()
        .map(|(p, b)| (p.trim_start_matches('/').to_string(), b.clone()))
        .collect();
    let (report, misplaced) = irqs_on_isolated(&tree);
    for m in misplaced {
        outcome.failures.push(Failure {
            check: format!("irqs_on_isolated_cpus ({name})"),
            expected: "IRQs that may use a housekeeping CPU are not delivered to isolated CPUs"
                .into(),
            actual: m,
        });
    }
    tree.insert(IRQ_REPORT.into(), report.into_bytes());

    let dir = fixtures_dir().join(name);
    if updating() {
        let _ = fs::remove_dir_all(&dir);
        for (rel, bytes) in &tree {
            let path = dir.join(rel);
            let written = fs::create_dir_all(path.parent().expect("has parent"))
                .and_then(|()| fs::write(&path, bytes));
            if let Err(e) = written {
                outcome.failures.push(Failure {
                    check: format!("fixture {name}"),
                    expected: format!("{} written", path.display()),
                    actual: e.to_string(),
                });
            }
        }
        outcome.notes.push(format!(
            "fixture {} rewritten ({} files)",
            dir.display(),
            tree.len()
        ));
        return;
    }

    let mut committed = BTreeMap::new();
    if let Err(e) = read_tree(&dir, &dir, &mut committed) {
        outcome.failures.push(Failure {
            check: format!("fixture {name}"),
            expected: format!("a committed fixture in {}", dir.display()),
            actual: format!("{e} (create it with TASKISOL_UPDATE_FIXTURES=1 and commit it)"),
        });
        return;
    }
    let paths: std::collections::BTreeSet<&String> = committed.keys().chain(tree.keys()).collect();
    for path in paths {
        let cmp = comparison(path);
        if cmp == Comparison::Ignored {
            continue;
        }
        let (old, new) = (committed.get(path), tree.get(path));
        let (old_n, new_n) = match cmp {
            Comparison::InterruptLayout => (
                old.map(|b| interrupt_layout(&String::from_utf8_lossy(b)).into_bytes()),
                new.map(|b| interrupt_layout(&String::from_utf8_lossy(b)).into_bytes()),
            ),
            _ => (old.cloned(), new.cloned()),
        };
        if old_n != new_n {
            outcome.failures.push(Failure {
                check: format!("fixture {name}: {path}"),
                expected: old_n.as_deref().map(clip).unwrap_or_else(|| "(absent)".into()),
                actual: format!(
                    "{} (if the kernel changed on purpose: TASKISOL_UPDATE_FIXTURES=1, review, commit)",
                    new_n.as_deref().map(clip).unwrap_or_else(|| "(absent)".into())
                ),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERRUPTS: &str = "           CPU0       CPU1       CPU2       CPU3       \n  \
0:         75          0          0          0   IO-APIC   2-edge      timer\n \
24:          0          0          5          0   PCI-MSI 49152-edge      virtio0-req.2\n\
LOC:        391        303         97         74   Local timer interrupts\n\
ERR:          0\n";

    #[test]
    fn task_files_and_boot_id_are_not_compared() {
        for p in [
            "proc/1/cgroup",
            "proc/812/task/812/stat",
            "proc/sys/kernel/random/boot_id",
        ] {
            assert_eq!(comparison(p), Comparison::Ignored, "{p}");
        }
        for p in [
            "proc/self/cgroup",
            "proc/irq/24/smp_affinity",
            "proc/sys/kernel/timer_migration",
        ] {
            assert_eq!(comparison(p), Comparison::Exact, "{p}");
        }
    }

    #[test]
    fn interrupt_layout_drops_counts_only() {
        assert_eq!(
            interrupt_layout(INTERRUPTS),
            "0: IO-APIC 2-edge timer\n24: PCI-MSI 49152-edge virtio0-req.2\nLOC: Local timer interrupts\nERR:\n"
        );
    }

    #[test]
    fn irqs_on_isolated_cpus_are_listed_and_misplaced_ones_flagged() {
        let mut files = BTreeMap::new();
        let mut put = |p: &str, v: &str| {
            files.insert(p.to_string(), v.as_bytes().to_vec());
        };
        put("proc/interrupts", INTERRUPTS);
        put("proc/cmdline", "isolcpus=2-3 irqaffinity=0-1\n");
        put("sys/devices/system/cpu/isolated", "2-3\n");
        put("sys/devices/system/cpu/nohz_full", "(null)\n");
        put("proc/irq/0/smp_affinity_list", "0-1\n");
        put("proc/irq/0/effective_affinity_list", "0\n");
        put("proc/irq/24/smp_affinity_list", "2\n");
        put("proc/irq/24/effective_affinity_list", "2\n");
        put("proc/irq/25/smp_affinity_list", "0-3\n");
        put("proc/irq/25/effective_affinity_list", "3\n");
        let (report, misplaced) = irqs_on_isolated(&files);
        assert_eq!(
            report,
            "24 smp_affinity_list=2 effective_affinity_list=2 PCI-MSI 49152-edge virtio0-req.2\n\
             25 smp_affinity_list=0-3 effective_affinity_list=3 ?\n"
        );
        assert_eq!(misplaced.len(), 1);
        assert!(misplaced[0].starts_with("IRQ 25"), "{misplaced:?}");
    }
}
