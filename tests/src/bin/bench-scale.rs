//! isold's cost at every size (scripts/bench-scale; BENCHMARKS.md, "Scale"). Grows the tree
//! captured from 6.12-rt (tests/fixtures/debian-6.12-rt-isold) to each size (taskisol_tests::
//! scale) and measures, on that fake root:
//! - apply, verify, restore: the release `isold` binary, wall time and peak RSS (wait4);
//! - one audit sample (`audit::Sample::read`: /proc/interrupts, /proc/softirqs, every
//!   thread), and the daemon's periodic scan (verify of the non-thread items plus the /proc
//!   walk of every thread), in this process, median of 5;
//! - `TaskFixer::fix` of a thread made wide again after apply, per thread, median over 200;
//! - `isold run` started on the applied tree: its resident memory (VmRSS) a second after it
//!   wrote its status file (its first apply done, between two scans of /proc), and its peak
//!   (wait4, after SIGTERM).
//!
//! Then the growth ratio of each figure between consecutive sizes, next to the work ratio.
//!
//!   bench-scale [--isold PATH] [--dir DIR] [SIZE...]
//!   bench-scale --make DIR SIZE     # only the tree (and DIR/etc/isold/isold.toml), kept:
//!                                   # for perf record and for trying isold by hand
//!
//! SIZE is CPUS/THREADS/IRQS (threads added as processes of 10 threads; the captured tree's
//! own and the per-CPU kthreads of every CPU come on top). The default is the four doubling
//! sizes up to 448/50000/4000.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use libtaskisol::audit::Sample;
use libtaskisol::policy::engine;
use libtaskisol::policy::fastpath::TaskFixer;
use libtaskisol::sysroot::SysRoot;
use libtaskisol::tasks;
use taskisol_tests::scale::{grow, Grown, Scale};

const DEFAULT_SIZES: &[&str] = &[
    "56/6250/500",
    "112/12500/1000",
    "224/25000/2000",
    "448/50000/4000",
];

struct Row {
    size: Grown,
    apply: (f64, u64),
    verify: (f64, u64),
    restore: (f64, u64),
    audit: f64,
    scan: f64,
    fix: f64,
    daemon_rss: u64,
    daemon_scan_rss: u64,
    daemon_peak: u64,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut isold = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .join("isold");
    let mut dir = None;
    let mut sizes = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--isold" => isold = PathBuf::from(args.next().expect("--isold PATH")),
            "--dir" => dir = Some(PathBuf::from(args.next().expect("--dir DIR"))),
            "--make" => {
                let to = PathBuf::from(args.next().expect("--make DIR SIZE"));
                let s = parse_size(&args.next().expect("--make DIR SIZE"));
                let fixture =
                    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/debian-6.12-rt-isold");
                let g = grow(&fixture, &to, &s).expect("grow the tree");
                write_config(&to, g.cpus);
                println!(
                    "{}: {} CPUs, {} threads, {} IRQs",
                    to.display(),
                    g.cpus,
                    g.threads,
                    g.irqs
                );
                return;
            }
            "--hold" => {
                let n = args.next().expect("--hold N CPU");
                let cpu = args.next().expect("--hold N CPU");
                hold(n.parse().expect("N"), cpu.parse().expect("CPU"));
                return;
            }
            "--host-threads" => {
                let n = args.next().expect("--host-threads N");
                host_threads(n.parse().expect("--host-threads N: a number"));
                return;
            }
            s => sizes.push(parse_size(s)),
        }
    }
    if sizes.is_empty() {
        sizes = DEFAULT_SIZES.iter().map(|s| parse_size(s)).collect();
    }
    if !isold.exists() {
        eprintln!(
            "bench-scale: {}: no isold binary (cargo build --release -p isold)",
            isold.display()
        );
        std::process::exit(1);
    }
    let tmp = match &dir {
        Some(d) => {
            std::fs::create_dir_all(d).unwrap();
            tempfile::tempdir_in(d).unwrap()
        }
        None => tempfile::tempdir().unwrap(),
    };
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/debian-6.12-rt-isold");
    let mut rows = Vec::new();
    for (i, s) in sizes.iter().enumerate() {
        let root_dir = tmp.path().join(format!("root{i}"));
        let t0 = Instant::now();
        let size = grow(&fixture, &root_dir, s).expect("grow the tree");
        eprintln!(
            "== {} CPUs, {} threads, {} IRQs (tree made in {:.1} s)",
            size.cpus,
            size.threads,
            size.irqs,
            t0.elapsed().as_secs_f64()
        );
        let row = measure(&isold, &root_dir, size);
        std::fs::remove_dir_all(&root_dir).unwrap();
        rows.push(row);
    }
    print_table(&rows);
    host_figures();
}

/// The running kernel with `n` more threads (this process's, sleeping, pinned to the first
/// online CPU): one audit sample of the last CPU (`Sample::read_for`: an affinity system
/// call a thread, the files of those that may run there), a sample of every thread, and
/// verify of a policy isolating the last CPU. Nothing but this process's own threads is
/// touched; they end with it.
fn host_threads(n: usize) {
    let host = SysRoot::host();
    let online = libtaskisol::topology::online_cpus(&host).expect("online CPUs");
    let (Some(first), Some(last)) = (online.first(), online.last().filter(|&l| l > 0)) else {
        println!("host: one CPU, nothing to audit apart");
        return;
    };
    // Processes of 10,000 threads each: a thread takes four memory maps (stack, guard,
    // signal stack and its guard), and a process may have 65,530 (vm.max_map_count).
    let t0 = Instant::now();
    let mut holders = Vec::new();
    let mut left = n;
    while left > 0 {
        let k = left.min(10_000);
        left -= k;
        let mut c = Command::new(std::env::current_exe().unwrap())
            .args(["--hold", &k.to_string(), &first.to_string()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(c.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line.trim(), "ready", "a holder of {k} threads");
        holders.push(c);
    }
    eprintln!("{n} threads started in {:.1} s", t0.elapsed().as_secs_f64());
    let cpus: libtaskisol::CpuSet = [last].into_iter().collect();
    let mut on = 0;
    let audit = median(
        || {
            let t = Instant::now();
            on = Sample::read_for(&host, &cpus)
                .expect("sample")
                .threads
                .len();
            t.elapsed().as_secs_f64()
        },
        5,
    );
    libtaskisol::cost::start();
    Sample::read_for(&host, &cpus).expect("sample");
    let calls = libtaskisol::cost::stop().calls;
    let calls: Vec<String> = calls
        .iter()
        .map(|l| format!("{} {} ({:.1} ms)", l.count, l.name, l.seconds * 1e3))
        .collect();
    eprintln!("   the audit sample's system calls: {}", calls.join(", "));
    let mut all = 0;
    let full = median(
        || {
            let t = Instant::now();
            all = Sample::read(&host).expect("sample").threads.len();
            t.elapsed().as_secs_f64()
        },
        3,
    );
    let (verify, _) = host_verify(&host, last, 3);
    for mut c in holders {
        drop(c.stdin.take());
        c.wait().unwrap();
    }
    println!(
        "This machine's kernel with {n} more threads ({all} in all, pinned to CPU {first}; the audit of CPU {last}): one audit sample {:.1} ms ({on} threads may run there), a sample of every thread {:.1} ms, verify {:.1} ms",
        audit * 1e3,
        full * 1e3,
        verify * 1e3
    );
}

/// `--hold N CPU`: N sleeping threads pinned to CPU; "ready" on stdout once all are up;
/// gone when stdin closes.
fn hold(n: usize, cpu: usize) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Barrier};
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(Barrier::new(n + 1));
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let (stop, ready) = (stop.clone(), ready.clone());
            std::thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || {
                    let one: libtaskisol::CpuSet = [cpu].into_iter().collect();
                    libtaskisol::sched::set_affinity(0, &one).expect("pin the thread");
                    ready.wait();
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::park();
                    }
                })
                .expect("a thread (threads-max, pid_max?)")
        })
        .collect();
    ready.wait();
    println!("ready");
    let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.thread().unpark();
        h.join().unwrap();
    }
}

/// The median of `runs` verifies, on the running system, of a policy isolating CPU `last`
/// (state files in a temporary directory: verify writes none), with the policy.
fn host_verify(host: &SysRoot, last: usize, runs: usize) -> (f64, libtaskisol::policy::Policy) {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("isold.toml");
    std::fs::write(&config, format!("isolated_cpus = \"{last}\"\n")).unwrap();
    let policy = libtaskisol::policy::load(&config, host).expect("policy");
    let files = libtaskisol::policy::state::StateFiles::new(
        tmp.path().join("run/state.json"),
        tmp.path().join("lib/state.json"),
    );
    let verify = median(
        || {
            let t = Instant::now();
            engine::verify(host, &policy, &files).expect("verify");
            t.elapsed().as_secs_f64()
        },
        runs,
    );
    assert!(!files.runtime.exists(), "verify wrote a state file");
    (verify, policy)
}

/// verify and one audit sample on this machine's own /proc and /sys, read only: a policy
/// isolating the last online CPU, state files in a temporary directory (nothing is written).
fn host_figures() {
    let host = SysRoot::host();
    let online = libtaskisol::topology::online_cpus(&host).expect("online CPUs");
    let Some(last) = online.last().filter(|&l| l > 0) else {
        println!("\nhost: one CPU, no policy to verify");
        return;
    };
    let threads = tasks::all_threads(&host).map(|t| t.len()).unwrap_or(0);
    let (verify, policy) = host_verify(&host, last, 5);
    let audit = median(
        || {
            let t = Instant::now();
            Sample::read_for(&host, &policy.isolated).expect("sample");
            t.elapsed().as_secs_f64()
        },
        5,
    );
    println!(
        "\nThis machine's own /proc ({} CPUs, {threads} threads; isolated_cpus = \"{last}\"): verify {:.1} ms, one audit sample {:.1} ms",
        online.len(),
        verify * 1e3,
        audit * 1e3
    );
}

fn parse_size(s: &str) -> Scale {
    let v: Vec<usize> = s
        .split('/')
        .map(|x| {
            x.parse()
                .unwrap_or_else(|_| panic!("size {s}: CPUS/THREADS/IRQS"))
        })
        .collect();
    assert_eq!(v.len(), 3, "size {s}: CPUS/THREADS/IRQS");
    Scale {
        cpus: v[0],
        procs: v[1] / 10,
        threads_per_proc: 10,
        irqs: v[2],
    }
}

/// Housekeeping: CPUs 0-1 and the first two of the second half (one pair per socket on a
/// two-socket machine); every other CPU isolated: a list with a hole, as on real hosts.
fn isolated_list(n: usize) -> String {
    if n <= 4 {
        return "2-3".into();
    }
    let h = n / 2;
    format!("2-{},{}-{}", h - 1, h + 2, n - 1)
}

/// Run isold with `args` on `root`: wall seconds and peak RSS in KiB; exit code checked.
// The child is reaped by wait4, for its rusage, not by Child::wait.
#[allow(clippy::zombie_processes)]
fn isold_cmd(isold: &Path, root: &Path, config: &Path, args: &[&str], ok: &[i32]) -> (f64, u64) {
    let t = Instant::now();
    let child = Command::new(isold)
        .arg("--root")
        .arg(root)
        .arg("-c")
        .arg(config)
        .args(args)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (status, rss) = wait4(child.id() as i32);
    let secs = t.elapsed().as_secs_f64();
    let code = status.code().unwrap_or(-1);
    assert!(
        ok.contains(&code),
        "isold {args:?} exited {code} ({status:?})"
    );
    (secs, rss)
}

fn wait4(pid: i32) -> (std::process::ExitStatus, u64) {
    let mut st = 0;
    // SAFETY: rusage is plain data, valid all zero.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 fills st and ru for our own child.
    let r = unsafe { libc::wait4(pid, &mut st, 0, &mut ru) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    (std::process::ExitStatus::from_raw(st), ru.ru_maxrss as u64)
}

fn median(mut f: impl FnMut() -> f64, n: usize) -> f64 {
    let mut v: Vec<f64> = (0..n).map(|_| f()).collect();
    taskisol_tests::percentile(&mut v, 0.5)
}

/// The configuration of a grown tree: `DIR/etc/isold/isold.toml`.
fn write_config(root_dir: &Path, cpus: usize) -> PathBuf {
    let config = root_dir.join("etc/isold/isold.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(
        &config,
        format!("isolated_cpus = \"{}\"\n", isolated_list(cpus)),
    )
    .unwrap();
    config
}

// The daemon is reaped by wait4, for its rusage, not by Child::wait.
#[allow(clippy::zombie_processes)]
/// The stall guard's cost at this size, every isolated CPU busy (their idle time standing
/// still in /proc/stat): its first pass (a walk over every thread's stat), then a steady
/// pass (the threads that live on the busy CPUs read), median of 20. A tree's files cost
/// less to read than the kernel's: lower bounds.
fn stall_guard(
    root: &libtaskisol::SysRoot,
    policy: &libtaskisol::policy::Policy,
    files: &libtaskisol::policy::state::StateFiles,
) {
    use libtaskisol::stalls::{Guard, Watch};
    let stat = |bump: u64| {
        let mut text = String::from("cpu  0 0 0 0 0 0 0 0 0 0\n");
        for cpu in policy.online.iter() {
            let idle = if policy.isolated.contains(cpu) {
                0
            } else {
                bump
            };
            text.push_str(&format!("cpu{cpu} 1 0 1 {idle} 0 0 0 0 0 0\n"));
        }
        std::fs::write(root.path("/proc/stat"), text).unwrap();
    };
    stat(0);
    let mut g = Guard::new(Watch {
        cpus: policy.isolated.clone(),
        settings: policy.config.stalls.clone(),
        files: files.clone(),
        isolated: policy.isolated.to_string(),
        config: "bench".into(),
    });
    let t0 = Instant::now();
    let first = Instant::now();
    let residents = g
        .pass(root, t0)
        .into_iter()
        .find_map(|e| match e {
            libtaskisol::stalls::Event::Walked { residents, .. } => Some(residents),
            _ => None,
        })
        .unwrap_or(0);
    let walk = first.elapsed().as_secs_f64();
    let mut per = Vec::new();
    for i in 1..=20u32 {
        stat(u64::from(i));
        let t = Instant::now();
        g.pass(root, t0 + Duration::from_millis(250 * u64::from(i)));
        per.push(t.elapsed().as_secs_f64());
    }
    let pass = taskisol_tests::percentile(&mut per, 0.5);
    eprintln!(
        "   stall guard: first pass (walk over every thread) {:.0} ms, steady pass with {} busy CPUs {:.2} ms, read of the {} threads that live there {:.1} ms",
        walk * 1000.0,
        policy.isolated.len(),
        pass * 1000.0,
        residents,
        g.work.last_roster.as_secs_f64() * 1000.0
    );
}

fn measure(isold: &Path, root_dir: &Path, size: Grown) -> Row {
    let config = write_config(root_dir, size.cpus);
    let root = SysRoot::new(root_dir);
    let apply = isold_cmd(isold, root_dir, &config, &["apply"], &[0]);
    eprintln!("   apply   {:.2} s, {} KiB", apply.0, apply.1);
    let verify = isold_cmd(isold, root_dir, &config, &["verify"], &[0]);
    eprintln!("   verify  {:.2} s, {} KiB", verify.0, verify.1);

    let policy = libtaskisol::policy::load(&config, &root).expect("policy");
    // As isold audit takes it: the threads that may run on the isolated CPUs (after the
    // apply, their per-CPU kthreads and the workloads), every other one read no further
    // than its affinity.
    let mut sampled = 0;
    let audit = median(
        || {
            let t = Instant::now();
            let s = Sample::read_for(&root, &policy.isolated).unwrap();
            assert!(s
                .threads
                .iter()
                .all(|t| !t.affinity.is_disjoint(&policy.isolated)));
            sampled = s.threads.len();
            t.elapsed().as_secs_f64()
        },
        5,
    );
    eprintln!(
        "   audit sample {:.1} ms ({sampled} threads may run on the isolated CPUs)",
        audit * 1e3
    );
    let files = engine::default_state_files(&root);
    let scan_policy = isold::daemon::scan_policy(&policy);
    let scan = median(
        || {
            let t = Instant::now();
            let r = engine::verify(&root, &scan_policy, &files).unwrap();
            assert!(!r.outcomes.is_empty());
            let th = tasks::all_threads(&root).unwrap();
            assert!(th.len() >= size.threads);
            t.elapsed().as_secs_f64()
        },
        5,
    );
    eprintln!("   daemon scan {:.1} ms", scan * 1e3);

    // The fast path: added threads made wide again, then fixed one by one.
    let all = libtaskisol::cpuset::CpuSet::first_n(size.cpus);
    let wide: Vec<(i32, i32)> = tasks::all_threads(&root)
        .unwrap()
        .into_iter()
        .filter(|t| t.comm.starts_with("app"))
        .take(200)
        .map(|t| (t.pid, t.tid))
        .collect();
    for &(pid, tid) in &wide {
        let p = root_dir.join(format!("proc/{pid}/task/{tid}/status"));
        let st = std::fs::read_to_string(&p).unwrap();
        let st: String = st
            .lines()
            .map(|l| {
                if l.starts_with("Cpus_allowed_list:") {
                    format!("Cpus_allowed_list:\t{all}\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        std::fs::write(&p, st).unwrap();
    }
    let mut fixer = TaskFixer::new(&files.runtime);
    fixer.resync().unwrap();
    let mut per = Vec::new();
    for &(pid, tid) in &wide {
        let t = Instant::now();
        let f = fixer.fix(&root, &policy, pid, tid).unwrap();
        per.push(t.elapsed().as_secs_f64());
        assert!(
            matches!(f, libtaskisol::policy::fastpath::Fix::Changed { .. }),
            "{pid}/{tid}: {f:?}"
        );
    }
    let fix = taskisol_tests::percentile(&mut per, 0.5);
    eprintln!("   TaskFixer::fix {:.0} µs a thread", fix * 1e6);

    stall_guard(&root, &policy, &files);

    // The daemon: started on the applied tree, stopped after 2 s (on_stop keeps). Reaped by
    // wait4 below (for its peak RSS), which clippy does not see.
    #[allow(clippy::zombie_processes)]
    let child = Command::new(isold)
        .arg("--root")
        .arg(root_dir)
        .arg("-c")
        .arg(&config)
        .args(["run", "--interval", "1", "--task-interval", "1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // After its first apply (the status file written): its resident memory every 100 ms for
    // 3 s, at rest and during the task scans (every --task-interval on a tree, where no
    // process events come; on a running system only at the start and after lost events).
    let status = root_dir.join("run/isold/status.json");
    let t0 = Instant::now();
    while !status.exists() && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let rss = || -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", child.id()))
            .ok()
            .and_then(|st| {
                libtaskisol::procfs::status_field(&st, "VmRSS")?
                    .trim_end_matches(" kB")
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    };
    let seen: Vec<u64> = (0..30)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            rss()
        })
        .collect();
    let daemon_rss = seen.iter().copied().min().unwrap_or(0);
    let daemon_scan_rss = seen.iter().copied().max().unwrap_or(0);
    // SAFETY: our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let (st, daemon_peak) = wait4(child.id() as i32);
    assert!(st.success(), "isold run: {st:?}");
    eprintln!(
        "   isold run resident {daemon_rss} KiB at rest, {daemon_scan_rss} KiB in its scans, peak {daemon_peak} KiB"
    );

    let restore = isold_cmd(isold, root_dir, &config, &["restore"], &[0]);
    eprintln!("   restore {:.2} s, {} KiB", restore.0, restore.1);
    Row {
        size,
        apply,
        verify,
        restore,
        audit,
        scan,
        fix,
        daemon_rss,
        daemon_scan_rss,
        daemon_peak,
    }
}

fn print_table(rows: &[Row]) {
    println!("| CPUs / threads / IRQs | apply | verify | restore | audit sample | daemon scan | `TaskFixer::fix` | peak RSS apply | `isold run` resident at rest / in task scans / peak |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        println!(
            "| {} / {} / {} | {:.2} s | {:.2} s | {:.2} s | {:.0} ms | {:.0} ms | {:.0} µs | {:.1} MiB | {:.1} / {:.1} / {:.1} MiB |",
            r.size.cpus,
            r.size.threads,
            r.size.irqs,
            r.apply.0,
            r.verify.0,
            r.restore.0,
            r.audit * 1e3,
            r.scan * 1e3,
            r.fix * 1e6,
            r.apply.1 as f64 / 1024.0,
            r.daemon_rss as f64 / 1024.0,
            r.daemon_scan_rss as f64 / 1024.0,
            r.daemon_peak as f64 / 1024.0,
        );
    }
    if rows.len() < 2 {
        return;
    }
    println!();
    println!("Growth between consecutive sizes (work: threads + IRQs + CPUs; linear means growth ≈ work):");
    println!();
    println!("| from → to | work | apply | verify | restore | audit sample | daemon scan | fix |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for w in rows.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        let work = |r: &Row| (r.size.threads + r.size.irqs + r.size.cpus) as f64;
        println!(
            "| {} → {} threads | {:.2}x | {:.2}x | {:.2}x | {:.2}x | {:.2}x | {:.2}x | {:.2}x |",
            a.size.threads,
            b.size.threads,
            work(b) / work(a),
            b.apply.0 / a.apply.0,
            b.verify.0 / a.verify.0,
            b.restore.0 / a.restore.0,
            b.audit / a.audit,
            b.scan / a.scan,
            b.fix / a.fix,
        );
    }
}
