//! The guest half of scripts/bench-noise: the noise ledger's cost in `isold run`, one boot per
//! kernel (see taskisol_tests::qemu::noise::bench_scenario).
//!
//!   qemu-bench-noise [stock61|rt612|rt7 ...]

use taskisol_tests::qemu::{self, noise, KernelRole};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let roles: Vec<KernelRole> = if args.is_empty() {
        vec![KernelRole::Stock61, KernelRole::Rt7]
    } else {
        args.iter()
            .map(|r| match r.as_str() {
                "stock61" => KernelRole::Stock61,
                "rt612" => KernelRole::Rt612,
                "rt7" => KernelRole::Rt7,
                other => {
                    eprintln!("qemu-bench-noise: unknown kernel {other:?} (stock61, rt612, rt7)");
                    std::process::exit(2);
                }
            })
            .collect()
    };
    let mut ok = true;
    for role in roles {
        let s = noise::bench_scenario(role);
        eprintln!("bench-noise: booting {}", role.as_str());
        match qemu::run(&s) {
            Ok(o) => {
                println!("\n## {}: {}", role.as_str(), o.summary());
                if let Some(out) = o.outputs.get("noise_bench") {
                    println!("\n{}{}", out.stdout, out.stderr);
                }
                println!("\n{}", noise::bench_report(&o));
                for f in &o.failures {
                    println!("FAILED: {f}");
                    ok = false;
                }
            }
            Err(e) => {
                eprintln!("qemu-bench-noise: {e}");
                ok = false;
            }
        }
    }
    if !ok {
        std::process::exit(1);
    }
}
