//! The guest half of scripts/demo (see taskisol_tests::qemu::demo).

fn main() {
    match taskisol_tests::qemu::demo::run_demo() {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("qemu-demo: {e}");
            std::process::exit(1);
        }
    }
}
