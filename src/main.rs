mod cli;

fn main() {
    sinklab::runtime::keep_freed_memory();
    std::process::exit(cli::main());
}
