//! An oslat-like test workload: it behaves like the patched oslat/cyclictest of the
//! task-isolation series. Each measuring thread reads its configured features; if some are
//! configured it activates them, runs a short loop, deactivates, and reports what its own
//! `/proc/<tid>/task_isolation` said at each point. One JSON line per thread on stdout.
//!
//! Unlike the patched oslat it goes through libtaskisol, so on a stock kernel it issues no
//! task-isolation prctl at all and reports `"interface": false`.
//!
//! Usage: isol-worker [THREADS] [LOOP_MS]

use std::time::{Duration, Instant};

use libtaskisol::TaskIsolation;
use serde_json::json;

fn state_text(tid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{tid}/task_isolation"))
        .unwrap_or_else(|e| format!("error: {e}"))
}

fn measure(thread: usize, loop_ms: u64) -> serde_json::Value {
    let tid = nix::unistd::gettid().as_raw();
    let cpus = libtaskisol::sched::get_affinity(0)
        .map(|c| c.to_string())
        .unwrap_or_default();
    let Ok(ti) = TaskIsolation::detect() else {
        return json!({"thread": thread, "tid": tid, "interface": false, "cpus": cpus});
    };
    let configured = ti.configured();
    let mut out = json!({
        "thread": thread,
        "tid": tid,
        "interface": true,
        "cpus": cpus,
        "configured": configured.as_ref().ok(),
        "configured_error": configured.as_ref().err().map(|e| e.to_string()),
        "before": state_text(tid),
    });
    let mask = configured.unwrap_or(0);
    if mask != 0 {
        out["activate_error"] = json!(ti.activate(mask).err().map(|e| e.to_string()));
        out["active"] = json!(ti.active().ok());
        out["during"] = json!(state_text(tid));
    }
    // The "measurement": a loop that returns to user mode often (each syscall is a quiesce
    // point on a patched kernel).
    let start = Instant::now();
    let mut max_gap = Duration::ZERO;
    let mut last = start;
    while start.elapsed() < Duration::from_millis(loop_ms) {
        let _ = nix::unistd::getppid();
        let now = Instant::now();
        max_gap = max_gap.max(now - last);
        last = now;
    }
    out["max_gap_ns"] = json!(max_gap.as_nanos() as u64);
    if mask != 0 {
        out["deactivate_error"] = json!(ti.deactivate().err().map(|e| e.to_string()));
        out["after"] = json!(state_text(tid));
    }
    out
}

fn main() {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let loop_ms: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(20);
    let main_tid = nix::unistd::gettid().as_raw();
    println!(
        "{}",
        json!({"main": true, "tid": main_tid, "state": state_text(main_tid)})
    );
    let handles: Vec<_> = (0..threads)
        .map(|i| std::thread::spawn(move || measure(i, loop_ms)))
        .collect();
    for h in handles {
        match h.join() {
            Ok(v) => println!("{v}"),
            Err(_) => {
                eprintln!("isol-worker: a measuring thread panicked");
                std::process::exit(1);
            }
        }
    }
}
