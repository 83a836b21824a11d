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
//!
//! Start it wide (`taskset -c 0-3 isol-pinner ...`) for the race a daemon has with the pins.

use std::sync::mpsc;
use std::time::Duration;

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
            // SAFETY: a zeroed cpu_set_t is an empty set.
            let mut start: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            // SAFETY: sysconf has no preconditions.
            let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
            for cpu in 0..online.min(libc::CPU_SETSIZE as usize) {
                // SAFETY: cpu is below CPU_SETSIZE.
                unsafe { libc::CPU_SET(cpu, &mut start) };
            }
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
        _ => {
            eprintln!("usage: isol-pinner split CPU... | isol-pinner stress N MS DELAY CPU...");
            std::process::exit(2);
        }
    }
}
