//! The guest half of scripts/bench-daemon (see taskisol_tests::qemu::daemon_bench);
//! `--bootargs` boots with the isolation arguments and measures only the interrupts.

fn main() {
    let with_bootargs = std::env::args().nth(1).as_deref() == Some("--bootargs");
    match taskisol_tests::qemu::daemon_bench::run_bench(with_bootargs) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("qemu-bench-daemon: {e}");
            std::process::exit(1);
        }
    }
}
