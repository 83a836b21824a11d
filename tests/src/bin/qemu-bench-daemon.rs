//! The guest half of scripts/bench-daemon (see taskisol_tests::qemu::daemon_bench).

fn main() {
    match taskisol_tests::qemu::daemon_bench::run_bench() {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("qemu-bench-daemon: {e}");
            std::process::exit(1);
        }
    }
}
