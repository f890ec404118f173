//! Development entry point: `lanefs-bench …` is `lanefs bench …`.

use clap::Parser;

#[derive(Parser)]
#[command(name = "lanefs-bench", about = "lanefs bench (development binary)")]
struct Cli {
    #[command(flatten)]
    args: lanefs_bench::cli::BenchArgs,
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = lanefs_bench::cli::run(cli.args) {
        eprintln!("lanefs bench: {e}");
        std::process::exit(1);
    }
}
