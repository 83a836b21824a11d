//! A fork storm: N processes that exit at once, at most 64 alive at a time (the load a
//! daemon listening to process events must absorb without growing). Prints the seconds it
//! took.
//!
//! Usage: isol-forkstorm N

use std::time::Instant;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| {
            eprintln!("usage: isol-forkstorm N");
            std::process::exit(2)
        });
    let t = Instant::now();
    let mut alive = 0usize;
    for _ in 0..n {
        if alive == 64 {
            let _ = nix::sys::wait::wait();
            alive -= 1;
        }
        // SAFETY: the child only calls _exit.
        match unsafe { nix::unistd::fork() }.expect("fork") {
            nix::unistd::ForkResult::Child => {
                // SAFETY: _exit in the forked child.
                unsafe { libc::_exit(0) }
            }
            nix::unistd::ForkResult::Parent { .. } => alive += 1,
        }
    }
    while alive > 0 {
        let _ = nix::sys::wait::wait();
        alive -= 1;
    }
    println!("storm_s={:.2}", t.elapsed().as_secs_f64());
}
