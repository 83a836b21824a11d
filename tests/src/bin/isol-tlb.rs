//! A workload whose sibling thread changes the memory map: one thread spins on SPIN_CPU (the
//! workload), another on FLUSH_CPU maps a page, writes it and unmaps it RATE times a second
//! for SECS seconds. Each unmap makes the kernel flush the page from every CPU the process
//! runs on: a TLB shootdown IPI to SPIN_CPU. Prints how many unmaps it made.
//!
//! Usage: isol-tlb SPIN_CPU FLUSH_CPU RATE SECS

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
            eprintln!(
                "isol-tlb: cannot pin to CPU {cpu}: {}",
                std::io::Error::last_os_error()
            );
            std::process::exit(1);
        }
    }
}

fn main() {
    let a: Vec<f64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap_or(-1.0))
        .collect();
    if a.len() != 4 || a.iter().any(|&v| v < 0.0) || a[2] <= 0.0 {
        eprintln!("usage: isol-tlb SPIN_CPU FLUSH_CPU RATE SECS");
        std::process::exit(2);
    }
    let (spin_cpu, flush_cpu, rate, secs) = (a[0] as usize, a[1] as usize, a[2], a[3]);
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let spinner = std::thread::spawn(move || {
        pin(spin_cpu);
        while !s.load(Ordering::Relaxed) {
            std::hint::spin_loop();
        }
    });
    pin(flush_cpu);
    // The spinner on its CPU first, so that the process's memory map is live there.
    std::thread::sleep(Duration::from_millis(200));
    let every = Duration::from_secs_f64(1.0 / rate);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut next = Instant::now();
    let mut unmaps = 0u64;
    while Instant::now() < end {
        // SAFETY: an anonymous private page, written within its length, then unmapped.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                eprintln!("isol-tlb: mmap: {}", std::io::Error::last_os_error());
                std::process::exit(1);
            }
            *(p as *mut u8) = 1;
            libc::munmap(p, 4096);
        }
        unmaps += 1;
        next += every;
        if let Some(d) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = spinner.join();
    println!("unmaps={unmaps}");
}
