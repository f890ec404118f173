//! Development entry point: `lanefs-bench …` is `lanefs bench …`.

use clap::Parser;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "lanefs-bench", about = "lanefs bench (development binary)")]
struct Cli {
    #[command(flatten)]
    args: lanefs_bench::cli::BenchArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match lanefs_bench::cli::run(cli.args) {
        // Killed by SIGPIPE instead when stdout's reader left early
        // (`lanefs_bench::out`).
        Ok(()) => lanefs_bench::out::success(),
        Err(e) => {
            lanefs_bench::out::stderr_line(format_args!("lanefs bench: {e}"));
            ExitCode::FAILURE
        }
    }
}
