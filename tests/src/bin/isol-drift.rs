//! How long a daemon leaves a drifted value drifted: what someone resetting a sysctl or moving
//! an IRQ by hand does, timed. For each of N trials: a random wait of 0-999 ms (so the writes
//! fall at every phase of the daemon's periodic check), each FILE=VALUE written, then every
//! FILE read every 2 ms until none of them holds its VALUE any more; the time from the last
//! write to that read is the trial's figure.
//!
//! Usage: isol-drift N TIMEOUT_MS FILE=VALUE...
//! Prints one line per trial ("trial I: MS ms" or "trial I: still drifted after T ms: FILE"),
//! then one `key=value` line each: count, put_back, median_ms, max_ms.

use std::time::{Duration, Instant};

use taskisol_tests::percentile;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: isol-drift N TIMEOUT_MS FILE=VALUE...");
        std::process::exit(2);
    }
    let n: usize = args[1].parse().expect("N");
    let timeout = Duration::from_millis(args[2].parse().expect("TIMEOUT_MS"));
    let drifts: Vec<(String, String)> = args[3..]
        .iter()
        .map(|a| {
            let (f, v) = a.split_once('=').expect("FILE=VALUE");
            (f.to_string(), v.to_string())
        })
        .collect();
    // A small LCG seeded by the clock: the phases need to differ, not to be unpredictable.
    let mut seed = Instant::now().elapsed().as_nanos() as u64
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
    let mut times = Vec::new();
    for i in 0..n {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        std::thread::sleep(Duration::from_millis((seed >> 33) % 1000));
        for (f, v) in &drifts {
            if let Err(e) = std::fs::write(f, format!("{v}\n")) {
                eprintln!("{f}: cannot write {v}: {e}");
                std::process::exit(1);
            }
        }
        let t0 = Instant::now();
        let mut left: Vec<&(String, String)> = drifts.iter().collect();
        while !left.is_empty() && t0.elapsed() < timeout {
            left.retain(|(f, v)| std::fs::read_to_string(f).is_ok_and(|s| s.trim() == v));
            if !left.is_empty() {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        match left.first() {
            None => {
                println!("trial {i}: {ms:.1} ms");
                times.push(ms);
            }
            Some((f, _)) => println!(
                "trial {i}: still drifted after {} ms: {f}",
                timeout.as_millis()
            ),
        }
    }
    println!("count={n}");
    println!("put_back={}", times.len());
    println!("median_ms={:.1}", percentile(&mut times, 0.5));
    println!("max_ms={:.1}", percentile(&mut times, 1.0));
}
