//! The guest half of scripts/bench-stalld: isold's stall guard and stalld side by side in
//! one boot per kernel (see taskisol_tests::qemu::stalls::bench_scenario).
//!
//!   qemu-bench-stalld STALLD_BINARY [stock61|rt612|rt7 ...]

use taskisol_tests::qemu::{self, stalls, KernelRole};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(bin) = args.first() else {
        eprintln!("usage: qemu-bench-stalld STALLD_BINARY [stock61|rt612|rt7 ...]");
        std::process::exit(2);
    };
    let stalld = std::fs::read(bin).unwrap_or_else(|e| {
        eprintln!("qemu-bench-stalld: {bin}: {e}");
        std::process::exit(2);
    });
    let roles: Vec<KernelRole> = if args.len() > 1 {
        args[1..]
            .iter()
            .map(|r| match r.as_str() {
                "stock61" => KernelRole::Stock61,
                "rt612" => KernelRole::Rt612,
                "rt7" => KernelRole::Rt7,
                other => {
                    eprintln!("qemu-bench-stalld: unknown kernel {other:?} (stock61, rt612, rt7)");
                    std::process::exit(2);
                }
            })
            .collect()
    } else {
        vec![KernelRole::Stock61, KernelRole::Rt7]
    };
    let mut ok = true;
    for role in roles {
        let s = stalls::bench_scenario(role, &stalld);
        eprintln!("bench-stalld: booting {}", role.as_str());
        match qemu::run(&s) {
            Ok(o) => {
                println!("\n## {}: {}", role.as_str(), o.summary());
                for step in &s.steps {
                    if let Some(out) = o.outputs.get(&step.name) {
                        println!("\n== {}\n{}{}", step.name, out.stdout, out.stderr);
                    }
                }
                println!("\n{}", stalls::bench_report(&o));
                for f in &o.failures {
                    println!("FAILED: {f}");
                    ok = false;
                }
            }
            Err(e) => {
                eprintln!("qemu-bench-stalld: {e}");
                ok = false;
            }
        }
    }
    if !ok {
        std::process::exit(1);
    }
}
