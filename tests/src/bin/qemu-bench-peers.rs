//! The guest half of scripts/bench-peers (see taskisol_tests::qemu::peers): the tools named on
//! the command line (default: tuned tuna isold isold-run), one boot each; or, with `pairs`,
//! scripts/bench-oneshot's boot (tuned's switch and stop against isold's apply and restore,
//! alternating).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("pairs") {
        // pairs [BASE]: BASE, another isold binary timed beside this build's.
        let base = match args.get(1).map(std::fs::read).transpose() {
            Ok(b) => b,
            Err(e) => {
                eprintln!("qemu-bench-peers: {}: {e}", args[1]);
                std::process::exit(2);
            }
        };
        match taskisol_tests::qemu::peers::run_pairs(base.as_deref()) {
            Ok(true) => return,
            Ok(false) => std::process::exit(1),
            Err(e) => {
                eprintln!("qemu-bench-peers: {e}");
                std::process::exit(1);
            }
        }
    }
    let tools: Vec<&str> = if args.is_empty() {
        taskisol_tests::qemu::peers::TOOLS.to_vec()
    } else {
        args.iter().map(String::as_str).collect()
    };
    if let Some(bad) = tools
        .iter()
        .find(|t| !taskisol_tests::qemu::peers::TOOLS.contains(t))
    {
        eprintln!("qemu-bench-peers: unknown tool {bad:?} (tuned, tuna, isold, isold-run)");
        std::process::exit(2);
    }
    match taskisol_tests::qemu::peers::run_peers(&tools) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("qemu-bench-peers: {e}");
            std::process::exit(1);
        }
    }
}
