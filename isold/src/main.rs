fn main() {
    std::process::exit(isold::main_with_args(std::env::args_os().collect()));
}
