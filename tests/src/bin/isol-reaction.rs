//! How fast a daemon narrows a task that widens its affinity: what `taskset -c WIDE cmd`
//! does, timed. For each of N tasks: fork; the child sets its affinity to WIDE and execs
//! `sleep 1000` (the exec is the event a daemon acts on); the parent polls the child's
//! affinity with sched_getaffinity(2) every 1 ms until it no longer reaches into ISOLATED,
//! and records the time from the child's execve(2) call (the task's start as the command it
//! runs; the child writes the clock to a shared page just before) and from the fork. Children
//! are killed as soon as they are measured.
//!
//! Usage: isol-reaction N WIDE ISOLATED [TIMEOUT_MS [WARMUP]]
//! WARMUP tasks (default 0) go first and are not counted: under QEMU's software emulation the
//! first run of every code path (the daemon's, the kernel's exec, this program's) is
//! translated first, a cost real hardware does not have.
//! Prints one line per task ("task I: MS ms (from fork MS ms)" or "task I: not narrowed in T
//! ms"), then one `key=value` line each: count, narrowed, within_20ms, median_ms, p99_ms,
//! max_ms (from the exec) and median_from_fork_ms.

use std::ffi::CString;
use std::time::{Duration, Instant};

use libtaskisol::{sched, CpuSet};
use taskisol_tests::percentile;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: isol-reaction N WIDE ISOLATED [TIMEOUT_MS [WARMUP]]");
        std::process::exit(2);
    }
    let n: usize = args[1].parse().expect("N");
    let wide: CpuSet = args[2].parse().expect("WIDE");
    let isolated: CpuSet = args[3].parse().expect("ISOLATED");
    let timeout =
        Duration::from_millis(args.get(4).map_or(1000, |t| t.parse().expect("TIMEOUT_MS")));
    let warmup: usize = args.get(5).map_or(0, |w| w.parse().expect("WARMUP"));
    let sleep = CString::new("/bin/sleep").unwrap();
    let arg1 = CString::new("1000").unwrap();
    // One shared page: the child's CLOCK_MONOTONIC at its execve, in nanoseconds.
    // SAFETY: an anonymous shared mapping of one page, checked for failure; only this
    // process and its children use it, as one aligned u64.
    let page = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(page, libc::MAP_FAILED, "mmap");
    let exec_ns = page.cast::<u64>();
    let mut times: Vec<f64> = Vec::new();
    let mut from_fork: Vec<f64> = Vec::new();
    for i in 0..warmup + n {
        // SAFETY: exec_ns points into the live mapping.
        unsafe { exec_ns.write_volatile(0) };
        let start = Instant::now();
        // SAFETY: the child only calls sched_setaffinity and execv (async-signal-safe) before
        // exec or _exit.
        let pid = match unsafe { nix::unistd::fork() }.expect("fork") {
            nix::unistd::ForkResult::Child => {
                let _ = sched::set_affinity(0, &wide);
                // SAFETY: exec_ns points into the shared mapping.
                unsafe { exec_ns.write_volatile(monotonic_ns()) };
                let _ = nix::unistd::execv(&sleep, &[&sleep, &arg1]);
                // SAFETY: _exit in the forked child.
                unsafe { libc::_exit(127) };
            }
            nix::unistd::ForkResult::Parent { child } => child,
        };
        let mut done = None;
        let mut seen_wide = false;
        let comm = format!("/proc/{pid}/comm");
        while start.elapsed() < timeout {
            match sched::get_affinity(pid.as_raw()) {
                Ok(a) if !a.is_disjoint(&isolated) => seen_wide = true,
                // Narrow, and past the exec (so past the widening, which comes before it): not
                // the mask inherited at fork.
                Ok(_)
                    if seen_wide
                        || std::fs::read_to_string(&comm).is_ok_and(|c| c.trim() == "sleep") =>
                {
                    done = Some(start.elapsed());
                    break;
                }
                Ok(_) => {}
                Err(_) => break,
            }
            std::thread::sleep(Duration::from_micros(1000));
        }
        let narrowed_at = monotonic_ns();
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(pid, None);
        // SAFETY: exec_ns points into the live mapping; the child is gone.
        let exec_at = unsafe { exec_ns.read_volatile() };
        if i < warmup {
            println!(
                "warm-up {i}: {}",
                if done.is_some() {
                    "narrowed"
                } else {
                    "not narrowed"
                }
            );
            continue;
        }
        let i = i - warmup;
        match done {
            Some(d) => {
                let fork_ms = d.as_secs_f64() * 1000.0;
                // Narrowed before the child reached its exec (at its fork event): 0 ms after
                // its start.
                let ms = if exec_at == 0 {
                    0.0
                } else {
                    narrowed_at.saturating_sub(exec_at) as f64 / 1e6
                };
                println!("task {i}: {ms:.2} ms (from fork {fork_ms:.2} ms)");
                times.push(ms);
                from_fork.push(fork_ms);
            }
            None => println!(
                "task {i}: not narrowed in {} ms{}",
                timeout.as_millis(),
                if seen_wide { "" } else { " (never seen wide)" }
            ),
        }
    }
    let narrowed = times.len();
    let within = times.iter().filter(|t| **t <= 20.0).count();
    println!("count={n}");
    println!("narrowed={narrowed}");
    println!("within_20ms={within}");
    println!("median_ms={:.2}", percentile(&mut times, 0.5));
    println!("p99_ms={:.2}", percentile(&mut times, 0.99));
    println!("max_ms={:.2}", percentile(&mut times, 1.0));
    println!("median_from_fork_ms={:.2}", percentile(&mut from_fork, 0.5));
}

/// CLOCK_MONOTONIC in nanoseconds (async-signal-safe: the forked child calls it).
fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: t is a valid timespec to write to.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}
