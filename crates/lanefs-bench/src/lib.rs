//! `lanefs bench`: workloads, targets and reports.

pub mod cli {
    //! The `lanefs bench` subcommand: argument parsing and entry point.

    /// Arguments of `lanefs bench`.
    #[derive(clap::Args, Debug, Clone)]
    pub struct BenchArgs {
        /// Short profile (under 2 minutes on 2 cores).
        #[arg(long)]
        pub quick: bool,
    }

    /// Run `lanefs bench` with parsed arguments.
    pub fn run(args: BenchArgs) -> Result<(), String> {
        let _ = args;
        Err("lanefs bench: not implemented yet".into())
    }
}
