fn main() {
    std::process::exit(chisol::main_with_args(std::env::args_os().collect()));
}
