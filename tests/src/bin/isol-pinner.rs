//! Threads that something pins into the isolated CPUs, as DPDK, libvirt (`<vcpupin>`) and
//! `taskset -p` do: what a daemon that narrows wide tasks must never undo.
//!
//! Usage:
//!   isol-pinner split CPU...          one thread pinned on each CPU, the main thread left as
//!                                     it is (QEMU: the emulator on the housekeeping CPUs,
//!                                     vCPUs on isolated ones); prints "ready" and sleeps
//!   isol-pinner stress N MS DELAY CPU...
//!                                     N threads, each created while the creator runs on every
//!                                     online CPU (it widens itself again before each: a daemon
//!                                     may have narrowed it), and pinned by the creator
//!                                     0 to DELAY ms after (at random: some pins land while a
//!                                     daemon is narrowing the new thread), round robin over
//!                                     the CPUs; after MS ms,
//!                                     each thread's affinity is read back: prints threads=N,
//!                                     lost=K (threads not on their pin) and one "loss:" line each
//!   isol-pinner race N ROUND DELAY_US SETTLE_MS CPU...
//!                                     the racer: N threads, ROUND alive at once, each made
//!                                     while the creator runs on every online CPU and pinning
//!                                     itself 0 to DELAY_US µs after it starts (at random),
//!                                     round robin over the CPUs; SETTLE_MS after the last pin
//!                                     of a round every thread's affinity is read back. Prints
//!                                     per round and in all: threads, born_narrow (made after
//!                                     a daemon narrowed the creator: not in the race),
//!                                     narrowed_first (found narrowed by a daemon before its
//!                                     pin: the daemon came first, the pin after), lost
//!                                     (not on its pin) with one "loss:" line each (at most 20)
//!
//! Start it wide (`taskset -c 0-3 isol-pinner ...`) for the race a daemon has with the pins.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

fn pin(tid: i32, cpu: usize) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes within it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: cpu is below CPU_SETSIZE (checked by the caller's parse).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: set is a valid cpu_set_t of the size given.
    let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn affinity_of(tid: i32) -> String {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_else(|| "?".into())
}

/// A thread that sends its tid and then sleeps until the process ends.
fn sleeper(tx: mpsc::Sender<i32>) {
    std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        let _ = tx.send(unsafe { libc::gettid() });
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    });
}

/// The affinity of task `tid` by system call, as a CPU list (`None`: gone).
fn affinity_now(tid: i32) -> Option<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: set is a valid writable cpu_set_t of the size given.
    let rc =
        unsafe { libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return None;
    }
    // SAFETY: c is below CPU_SETSIZE; set is a valid cpu_set_t.
    Some(
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect(),
    )
}

fn list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Every online CPU as a cpu_set_t.
fn online_set() -> (libc::cpu_set_t, usize) {
    // SAFETY: a zeroed cpu_set_t is an empty set.
    let mut start: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: sysconf has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    for cpu in 0..online.min(libc::CPU_SETSIZE as usize) {
        // SAFETY: cpu is below CPU_SETSIZE.
        unsafe { libc::CPU_SET(cpu, &mut start) };
    }
    (start, online)
}

struct Slot {
    tid: AtomicI32,
    /// Its affinity when it started was not every online CPU.
    born_narrow: AtomicBool,
    /// Its affinity right before its pin was no longer what it started with.
    narrowed_first: AtomicBool,
}

#[derive(Default)]
struct Tally {
    threads: usize,
    born_narrow: usize,
    narrowed_first: usize,
    lost: usize,
}

/// One round of the racer: `n` threads, each pinning itself on `cpus[i % len]` within
/// `delay_us`, read back `settle_ms` after the last pin.
fn race_round(
    n: usize,
    delay_us: u64,
    settle_ms: u64,
    cpus: &[usize],
    seed: &mut u64,
    shown: &mut usize,
) -> Tally {
    let (start, online) = online_set();
    let slots: Arc<Vec<Slot>> = Arc::new(
        (0..n)
            .map(|_| Slot {
                tid: AtomicI32::new(0),
                born_narrow: AtomicBool::new(false),
                narrowed_first: AtomicBool::new(false),
            })
            .collect(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let pinned = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        // Wide again before each: a daemon may have narrowed the creator meanwhile.
        // SAFETY: start is a valid cpu_set_t of the size given.
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &start) };
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let delay = Duration::from_micros((*seed >> 33) % delay_us.max(1));
        let cpu = cpus[i % cpus.len()];
        let (slots, stop, pinned) = (slots.clone(), stop.clone(), pinned.clone());
        let h = std::thread::Builder::new()
            .stack_size(64 << 10)
            .spawn(move || {
                let me = &slots[i];
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::gettid() };
                let born = affinity_now(0).unwrap_or_default();
                me.tid.store(tid, SeqCst);
                me.born_narrow.store(born.len() != online, SeqCst);
                std::thread::sleep(delay);
                let before = affinity_now(0).unwrap_or_default();
                me.narrowed_first.store(before != born, SeqCst);
                if let Err(e) = pin(0, cpu) {
                    eprintln!("isol-pinner: pin {tid} to {cpu}: {e}");
                    std::process::exit(1);
                }
                pinned.fetch_add(1, SeqCst);
                while !stop.load(SeqCst) {
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
            .unwrap_or_else(|e| {
                eprintln!("isol-pinner: thread {i} of {n}: {e} (threads-max, ulimit -u?)");
                std::process::exit(1)
            });
        handles.push(h);
    }
    while pinned.load(SeqCst) < n {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(settle_ms));
    let mut t = Tally {
        threads: n,
        ..Tally::default()
    };
    for (i, s) in slots.iter().enumerate() {
        let cpu = cpus[i % cpus.len()];
        if s.born_narrow.load(SeqCst) {
            t.born_narrow += 1;
            continue;
        }
        if s.narrowed_first.load(SeqCst) {
            t.narrowed_first += 1;
        }
        let tid = s.tid.load(SeqCst);
        let now = affinity_now(tid).unwrap_or_default();
        if now != [cpu] {
            t.lost += 1;
            if *shown < 20 {
                *shown += 1;
                println!("loss: thread {tid} pinned on {cpu} is on {}", list(&now));
            }
        }
    }
    stop.store(true, SeqCst);
    for h in handles {
        let _ = h.join();
    }
    t
}

fn cpus(args: &[String]) -> Vec<usize> {
    args.iter()
        .map(|a| {
            a.parse::<usize>()
                .ok()
                .filter(|c| *c < libc::CPU_SETSIZE as usize)
                .unwrap_or_else(|| {
                    eprintln!("isol-pinner: {a:?} is not a CPU number");
                    std::process::exit(2)
                })
        })
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("split") if args.len() > 2 => {
            let (tx, rx) = mpsc::channel();
            for cpu in cpus(&args[2..]) {
                sleeper(tx.clone());
                let tid = rx.recv().expect("thread started");
                if let Err(e) = pin(tid, cpu) {
                    eprintln!("isol-pinner: pin {tid} to {cpu}: {e}");
                    std::process::exit(1);
                }
            }
            println!("ready");
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        Some("stress") if args.len() > 5 => {
            let n: usize = args[2].parse().expect("N");
            let ms: u64 = args[3].parse().expect("MS");
            let delay: u64 = args[4].parse().expect("DELAY");
            let cpus = cpus(&args[5..]);
            // A small LCG seeded by the clock: the delays need to differ, not to be unpredictable.
            let mut seed = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64);
            let (tx, rx) = mpsc::channel();
            let mut pins = Vec::with_capacity(n);
            // Every online CPU (a daemon may have narrowed this process already at its exec,
            // before main() ran: what it started with is not what it asked for).
            let (start, _) = online_set();
            for i in 0..n {
                // Wide again: every thread is born wide, as the first threads of a program
                // started wide are, before any daemon could narrow it.
                // SAFETY: start is a valid cpu_set_t of the size given.
                unsafe {
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &start)
                };
                sleeper(tx.clone());
                let tid = rx.recv().expect("thread started");
                let cpu = cpus[i % cpus.len()];
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                if delay > 0 {
                    std::thread::sleep(Duration::from_micros((seed >> 33) % (delay * 1000)));
                }
                if let Err(e) = pin(tid, cpu) {
                    eprintln!("isol-pinner: pin {tid} to {cpu}: {e}");
                    std::process::exit(1);
                }
                pins.push((tid, cpu));
            }
            std::thread::sleep(Duration::from_millis(ms));
            let mut lost = 0;
            for (tid, cpu) in &pins {
                let now = affinity_of(*tid);
                if now != cpu.to_string() {
                    lost += 1;
                    println!("loss: thread {tid} pinned on {cpu} is on {now}");
                }
            }
            println!("threads={n}");
            println!("lost={lost}");
        }
        Some("race") if args.len() > 6 => {
            let n: usize = args[2].parse().expect("N");
            let round: usize = args[3].parse::<usize>().expect("ROUND").max(1);
            let delay_us: u64 = args[4].parse().expect("DELAY_US");
            let settle_ms: u64 = args[5].parse().expect("SETTLE_MS");
            let cpus = cpus(&args[6..]);
            let mut seed = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64);
            let mut all = Tally::default();
            let mut shown = 0;
            let t0 = Instant::now();
            let mut left = n;
            let mut r = 0;
            while left > 0 {
                let k = left.min(round);
                let at = Instant::now();
                let t = race_round(k, delay_us, settle_ms, &cpus, &mut seed, &mut shown);
                r += 1;
                println!(
                    "round {r}: threads={} born_narrow={} narrowed_first={} lost={} ({} ms)",
                    t.threads,
                    t.born_narrow,
                    t.narrowed_first,
                    t.lost,
                    at.elapsed().as_millis()
                );
                all.threads += t.threads;
                all.born_narrow += t.born_narrow;
                all.narrowed_first += t.narrowed_first;
                all.lost += t.lost;
                left -= k;
            }
            println!("threads={}", all.threads);
            println!("born_narrow={}", all.born_narrow);
            println!("narrowed_first={}", all.narrowed_first);
            println!("lost={}", all.lost);
            println!("elapsed_ms={}", t0.elapsed().as_millis());
        }
        _ => {
            eprintln!("usage: isol-pinner split CPU... | isol-pinner stress N MS DELAY CPU... | isol-pinner race N ROUND DELAY_US SETTLE_MS CPU...");
            std::process::exit(2);
        }
    }
}
