//! What reading a state file costs, by part (BENCHMARKS.md, "One-shot apply and restore
//! against tuned"): the file parsed whole as `isold restore` parses it, its originals parsed
//! one by one as journal lines are, the parsed state cloned, and `State::load` of the same
//! file again (a daemon's path: the last file read is kept, its text compared).
//!
//!   cargo run --release -p libtaskisol --example state_load_cost -- /run/isold/state.json
use libtaskisol::policy::state::{Entry, State};
use std::time::Instant;

const RUNS: u32 = 200;

fn per_run(what: &str, mut f: impl FnMut()) {
    let t = Instant::now();
    for _ in 0..RUNS {
        f();
    }
    println!(
        "{what:<28} {:>8.1} us",
        t.elapsed().as_secs_f64() * 1e6 / f64::from(RUNS)
    );
}

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: state_load_cost STATE_FILE");
        std::process::exit(2);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("state_load_cost: {path}: {e}");
            std::process::exit(1);
        }
    };
    let state: State = match serde_json::from_str(&text) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("state_load_cost: {path}: not a state file: {e}");
            std::process::exit(1);
        }
    };
    let lines: Vec<String> = state
        .entries()
        .iter()
        .map(|e| serde_json::to_string(e).expect("an entry serializes"))
        .collect();
    println!("{path}: {} originals", lines.len());
    per_run("parsed whole", || {
        let s: State = serde_json::from_str(&text).expect("parsed once already");
        std::hint::black_box(s);
    });
    per_run("originals one by one", || {
        for l in &lines {
            let e: Entry = serde_json::from_str(l).expect("written by serde");
            std::hint::black_box(e);
        }
    });
    per_run("cloned", || {
        std::hint::black_box(state.clone());
    });
    let p = std::path::Path::new(&path);
    per_run("State::load, read again", || {
        std::hint::black_box(State::load(p).expect("loads"));
    });
}
