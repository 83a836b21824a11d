//! Big machines made from a small captured one: a copy of a tree captured from a real kernel
//! (tests/fixtures/debian-6.12-rt-isold, 4 CPUs) grown to any number of CPUs, threads and
//! IRQs, with every file written as the kernel writes it at that size: masks in 32-bit groups
//! separated by commas, /proc/interrupts one column per CPU, the per-CPU kthreads of every
//! CPU, `Cpus_allowed` masks as wide as the CPU count. The scale benchmark
//! (scripts/bench-scale) and the scale tests (tests/tests/scale.rs) run isold on these.

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::Path;

use libtaskisol::cpuset::CpuSet;

/// What to grow the tree to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scale {
    /// Online CPUs (at least the captured tree's 4).
    pub cpus: usize,
    /// Wide user processes added (affinity: every CPU), each with `threads_per_proc` threads.
    pub procs: usize,
    /// Threads of each added process.
    pub threads_per_proc: usize,
    /// Device IRQs added (MSI-X queues, affinity every CPU, effective one CPU each).
    pub irqs: usize,
}

/// What the grown tree holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Grown {
    /// Threads in /proc (kthreads included).
    pub threads: usize,
    /// IRQ directories in /proc/irq.
    pub irqs: usize,
    /// Online CPUs.
    pub cpus: usize,
}

/// The first IRQ number of the added IRQs (MSI-X vectors on x86 start well above the legacy
/// ones).
pub const FIRST_ADDED_IRQ: u32 = 24;

/// Copy the captured tree `from` to `to` grown to `s`. `to` must not exist.
pub fn grow(from: &Path, to: &Path, s: &Scale) -> io::Result<Grown> {
    copy_dir(from, to)?;
    let old_all = read_list(&to.join("sys/devices/system/cpu/online"))?;
    let n = s.cpus.max(old_all.last().map_or(1, |c| c + 1));
    let all = CpuSet::first_n(n);

    // CPU lists and per-CPU sysfs files.
    let list = all.to_list_string();
    for f in ["online", "possible", "present"] {
        fs::write(
            to.join("sys/devices/system/cpu").join(f),
            format!("{list}\n"),
        )?;
    }
    // CPU 0's per-CPU files copied for every CPU that has none.
    for c in 0..n {
        for (dir, file) in [
            (
                "sys/devices/system/cpu/cpu{}/power",
                "pm_qos_resume_latency_us",
            ),
            (
                "sys/devices/system/machinecheck/machinecheck{}",
                "ignore_ce",
            ),
        ] {
            let d = to.join(dir.replace("{}", &c.to_string()));
            if !d.exists() {
                fs::create_dir_all(&d)?;
                fs::copy(to.join(dir.replace("{}", "0")).join(file), d.join(file))?;
            }
        }
    }
    // Masks and lists that named every CPU name every CPU; every mask is as wide as the
    // kernel prints it for n CPUs.
    let widen = |set: CpuSet| if set == old_all { all.clone() } else { set };
    for f in [
        "proc/irq/default_smp_affinity",
        "sys/devices/virtual/workqueue/cpumask",
        "sys/devices/virtual/workqueue/cpumask_requested",
        "sys/devices/virtual/workqueue/writeback/cpumask",
        "sys/devices/virtual/workqueue/blkcg_punt_bio/cpumask",
    ] {
        rewrite_mask(&to.join(f), n, widen)?;
    }
    rewrite_list(&to.join("sys/fs/cgroup/cpuset.cpus.effective"), widen)?;
    let mut irqs = 0;
    for e in fs::read_dir(to.join("proc/irq"))? {
        let d = e?.path();
        if !d.is_dir() {
            continue;
        }
        irqs += 1;
        for m in ["smp_affinity", "effective_affinity"] {
            rewrite_mask(&d.join(m), n, widen)?;
            rewrite_list(&d.join(format!("{m}_list")), widen)?;
        }
    }

    // Threads: wide ones widened; the per-CPU kthreads of CPU 1 copied for every new CPU.
    let mut next_pid = 0i32;
    let mut percpu = Vec::new();
    let mut threads = 0;
    let pids: Vec<i32> = numbered(&to.join("proc"))?;
    for &pid in &pids {
        for tid in numbered(&to.join(format!("proc/{pid}/task")))? {
            threads += 1;
            next_pid = next_pid.max(tid + 1);
            let p = to.join(format!("proc/{pid}/task/{tid}/status"));
            let status = fs::read_to_string(&p)?;
            let aff = field(&status, "Cpus_allowed_list").unwrap_or_default();
            let set = CpuSet::parse_list(aff.trim()).map_err(io::Error::other)?;
            if set == old_all {
                fs::write(&p, with_affinity(&status, &all, n))?;
            }
            let name = field(&status, "Name").unwrap_or_default();
            if pid == tid && aff.trim() == "1" && per_cpu_name(&name, 1).is_some() {
                percpu.push(pid);
            }
        }
    }
    next_pid = next_pid.max(1000);
    for c in old_all.last().map_or(0, |l| l + 1)..n {
        for &src in &percpu {
            let pid = next_pid;
            next_pid += 1;
            let status = fs::read_to_string(to.join(format!("proc/{src}/task/{src}/status")))?;
            let name = field(&status, "Name").unwrap_or_default();
            let new_name = per_cpu_name(&name, 1).map_or(name.clone(), |f| f(c));
            let one = CpuSet::parse_list(&c.to_string()).map_err(io::Error::other)?;
            let status = with_affinity(&status, &one, n)
                .replace(&format!("Name:\t{name}\n"), &format!("Name:\t{new_name}\n"));
            let status = with_ids(&status, pid, pid);
            let stat = fs::read_to_string(to.join(format!("proc/{src}/task/{src}/stat")))?;
            let stat = stat_with(&stat, pid, &new_name);
            let cgroup = fs::read(to.join(format!("proc/{src}/cgroup")))?;
            add_thread(to, pid, pid, &status, &stat)?;
            fs::write(to.join(format!("proc/{pid}/cgroup")), cgroup)?;
            threads += 1;
        }
    }

    // Wide user processes: copies of init's files with their own ids.
    let status = fs::read_to_string(to.join("proc/1/task/1/status"))?;
    let stat = fs::read_to_string(to.join("proc/1/task/1/stat"))?;
    let wide = with_affinity(&status, &all, n);
    for i in 0..s.procs {
        let pid = next_pid;
        next_pid += s.threads_per_proc as i32;
        let name = format!("app{i}");
        let proc_status = wide
            .replace("Name:\tinit\n", &format!("Name:\t{name}\n"))
            .replace(
                "Threads:\t1\n",
                &format!("Threads:\t{}\n", s.threads_per_proc),
            );
        for k in 0..s.threads_per_proc as i32 {
            let tid = pid + k;
            add_thread(
                to,
                pid,
                tid,
                &with_ids(&proc_status, pid, tid),
                &stat_with(&stat, tid, &name),
            )?;
            threads += 1;
        }
        fs::write(to.join(format!("proc/{pid}/cgroup")), "0::/\n")?;
    }

    // Device IRQs: /proc/irq/N and a line each in /proc/interrupts.
    for k in 0..s.irqs {
        let irq = FIRST_ADDED_IRQ + k as u32;
        let d = to.join(format!("proc/irq/{irq}"));
        fs::create_dir_all(&d)?;
        let eff = CpuSet::parse_list(&(k % n).to_string()).map_err(io::Error::other)?;
        fs::write(
            d.join("smp_affinity"),
            format!("{}\n", all.to_mask_string_width(n)),
        )?;
        fs::write(d.join("smp_affinity_list"), format!("{list}\n"))?;
        fs::write(
            d.join("effective_affinity"),
            format!("{}\n", eff.to_mask_string_width(n)),
        )?;
        fs::write(d.join("effective_affinity_list"), format!("{eff}\n"))?;
        irqs += 1;
    }
    rewrite_interrupts(&to.join("proc/interrupts"), old_all.len(), n, s.irqs)?;
    Ok(Grown {
        threads,
        irqs,
        cpus: n,
    })
}

fn copy_dir(from: &Path, to: &Path) -> io::Result<()> {
    fs::create_dir_all(to)?;
    for e in fs::read_dir(from)? {
        let e = e?;
        let dst = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &dst)?;
        } else {
            fs::copy(e.path(), &dst)?;
        }
    }
    Ok(())
}

fn numbered(dir: &Path) -> io::Result<Vec<i32>> {
    let mut v: Vec<i32> = fs::read_dir(dir)?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    v.sort_unstable();
    Ok(v)
}

fn read_list(p: &Path) -> io::Result<CpuSet> {
    CpuSet::parse_list(fs::read_to_string(p)?.trim()).map_err(io::Error::other)
}

fn rewrite_mask(p: &Path, n: usize, widen: impl Fn(CpuSet) -> CpuSet) -> io::Result<()> {
    if !p.exists() {
        return Ok(());
    }
    let set = CpuSet::parse_mask(fs::read_to_string(p)?.trim()).map_err(io::Error::other)?;
    fs::write(p, format!("{}\n", widen(set).to_mask_string_width(n)))
}

fn rewrite_list(p: &Path, widen: impl Fn(CpuSet) -> CpuSet) -> io::Result<()> {
    let Ok(text) = fs::read_to_string(p) else {
        return Ok(());
    };
    let set = CpuSet::parse_list(text.trim()).map_err(io::Error::other)?;
    fs::write(p, format!("{}\n", widen(set)))
}

fn field(status: &str, name: &str) -> Option<String> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(":\t"))
        .map(str::to_string)
}

/// `Name` of a kthread bound to `cpu` ("ksoftirqd/1", "kworker/1:0H-events_highpri"): a
/// function giving its name on another CPU.
fn per_cpu_name(name: &str, cpu: usize) -> Option<impl Fn(usize) -> String + '_> {
    let (head, rest) = name.split_once('/')?;
    let tail = rest.strip_prefix(&cpu.to_string())?;
    if !(tail.is_empty() || tail.starts_with(':')) {
        return None;
    }
    Some(move |c: usize| format!("{head}/{c}{tail}"))
}

/// A status file with its affinity lines for `set` on an `n`-CPU machine.
fn with_affinity(status: &str, set: &CpuSet, n: usize) -> String {
    let mut out = String::with_capacity(status.len() + n / 3);
    for l in status.lines() {
        if l.starts_with("Cpus_allowed:") {
            let _ = writeln!(out, "Cpus_allowed:\t{}", set.to_mask_string_width(n));
        } else if l.starts_with("Cpus_allowed_list:") {
            let _ = writeln!(out, "Cpus_allowed_list:\t{set}");
        } else {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

fn with_ids(status: &str, tgid: i32, tid: i32) -> String {
    let mut out = String::with_capacity(status.len());
    for l in status.lines() {
        let (k, _) = l.split_once(':').unwrap_or((l, ""));
        match k {
            "Tgid" | "NStgid" => {
                let _ = writeln!(out, "{k}:\t{tgid}");
            }
            "Pid" | "NSpid" => {
                let _ = writeln!(out, "{k}:\t{tid}");
            }
            _ => {
                out.push_str(l);
                out.push('\n');
            }
        }
    }
    out
}

/// A stat line with pid `tid` and comm `name`.
fn stat_with(stat: &str, tid: i32, name: &str) -> String {
    let close = stat.rfind(')').unwrap_or(0);
    let comm: String = name.chars().take(15).collect();
    format!("{tid} ({comm}{}", &stat[close..])
}

fn add_thread(root: &Path, pid: i32, tid: i32, status: &str, stat: &str) -> io::Result<()> {
    let d = root.join(format!("proc/{pid}/task/{tid}"));
    fs::create_dir_all(&d)?;
    fs::write(d.join("status"), status)?;
    fs::write(d.join("stat"), stat)
}

/// /proc/interrupts for `n` CPUs with `added` MSI-X lines after the captured device IRQs,
/// in the kernel's layout (show_interrupts, arch_show_interrupts): a header of `CPU%-8d`
/// columns, then each counter `%10u ` wide.
fn rewrite_interrupts(p: &Path, old_n: usize, n: usize, added: usize) -> io::Result<()> {
    let text = fs::read_to_string(p)?;
    let mut lines = text.lines();
    let _header = lines.next();
    // The label width: the kernel pads the IRQ number to the digits of the largest one.
    let largest = FIRST_ADDED_IRQ as usize + added;
    let prec = largest.to_string().len().max(3);
    let mut out = String::with_capacity(text.len() * n / old_n.max(1) + added * (n * 11 + 64));
    out.push_str(&" ".repeat(prec + 2));
    for c in 0..n {
        let _ = write!(out, "CPU{c:<8}");
    }
    out.push('\n');
    let mut device_done = false;
    let row = |out: &mut String, label: &str, counts: &[u64], rest: &str| {
        let _ = write!(out, "{label:>prec$}:");
        for c in 0..n {
            let v = counts
                .get(c)
                .copied()
                .unwrap_or(counts.get(c % old_n.max(1)).copied().unwrap_or(0));
            let _ = write!(out, " {v:>10}");
        }
        out.push_str(rest);
        out.push('\n');
    };
    for l in lines {
        let (label, after) = l.split_once(':').unwrap_or((l, ""));
        let label = label.trim();
        let mut counts = Vec::new();
        let mut rest = after;
        for _ in 0..old_n {
            let t = rest.trim_start();
            let end = t.find(' ').unwrap_or(t.len());
            match t[..end].parse::<u64>() {
                Ok(v) if end > 0 => {
                    counts.push(v);
                    rest = &t[end..];
                }
                _ => break,
            }
        }
        let numeric = label.parse::<u32>().is_ok();
        if !numeric && !device_done {
            device_done = true;
            for k in 0..added {
                let irq = FIRST_ADDED_IRQ as usize + k;
                let mut c = vec![0u64; n];
                c[k % n] = 1000 + k as u64;
                let q = k % 64;
                let dev = k / 64;
                row(
                    &mut out,
                    &irq.to_string(),
                    &c,
                    &format!(
                        "  IR-PCI-MSIX-0000:{:02x}:00.{}  {q}-edge      eth{dev}-TxRx-{q}",
                        0x3b + dev / 8,
                        dev % 8
                    ),
                );
            }
        }
        row(&mut out, label, &counts, rest);
    }
    fs::write(p, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/debian-6.12-rt-isold")
    }

    #[test]
    fn a_grown_tree_is_written_as_the_kernel_writes_it() {
        let t = tempfile::tempdir().unwrap();
        let to = t.path().join("r");
        let g = grow(
            &fixture(),
            &to,
            &Scale {
                cpus: 40,
                procs: 3,
                threads_per_proc: 4,
                irqs: 5,
            },
        )
        .unwrap();
        assert_eq!(g.cpus, 40);
        let read = |p: &str| fs::read_to_string(to.join(p)).unwrap();
        assert_eq!(read("sys/devices/system/cpu/online"), "0-39\n");
        // Two 32-bit groups, the first as short as the CPU count allows.
        assert_eq!(read("proc/irq/default_smp_affinity"), "ff,ffffffff\n");
        assert_eq!(read("proc/irq/24/smp_affinity_list"), "0-39\n");
        assert_eq!(read("proc/irq/24/effective_affinity"), "00,00000001\n");
        // IRQ 4 may use every CPU and its effective CPU is 1: now every CPU of 40, still 1.
        assert_eq!(read("proc/irq/4/smp_affinity_list"), "0-39\n");
        assert_eq!(read("proc/irq/4/effective_affinity_list"), "1\n");
        let intr = libtaskisol::irq::Interrupts::parse(&read("proc/interrupts")).unwrap();
        assert_eq!(intr.cpus, (0..40).collect::<Vec<_>>());
        assert_eq!(intr.rows.len(), 25 + 5);
        // The per-CPU kthreads of CPU 1 exist on CPU 39, bound there.
        let mut found = 0;
        for pid in numbered(&to.join("proc")).unwrap() {
            let st = read(&format!("proc/{pid}/task/{pid}/status"));
            if field(&st, "Name").as_deref() == Some("ksoftirqd/39") {
                assert_eq!(field(&st, "Cpus_allowed_list").as_deref(), Some("39"));
                assert_eq!(field(&st, "Cpus_allowed").as_deref(), Some("80,00000000"));
                found += 1;
            }
        }
        assert_eq!(found, 1);
        // 99 captured threads, 12 added, the 13 per-CPU kthreads of CPU 1 for 36 new CPUs.
        assert_eq!(g.threads, 99 + 12 + 36 * 13);
        assert_eq!(g.irqs, 16 + 5);
    }
}
