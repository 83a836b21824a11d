//! The guest half of scripts/bench-peers (see taskisol_tests::qemu::peers): the tools named on
//! the command line (default: tuned tuna isold isold-run), one boot each.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
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
