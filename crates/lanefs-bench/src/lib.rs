//! `lanefs bench`: workloads, targets and reports.
//!
//! * [`workload`] — the fxmark-style matrix and fs_mark, written once against
//!   [`backend::Backend`];
//! * [`backend`] — the engine through the Rust API, syscalls on any
//!   directory, and the peer libraries;
//! * [`target`] — what `--target` names, with the managed mounts;
//! * [`harness`] — timing one cell (start barrier, stop flag) and the
//!   interleaved schedule;
//! * [`results`], [`table`], [`plot`] — JSON/CSV, tables, PNG;
//! * [`cli`] — `lanefs bench` and `lanefs bench report`;
//! * [`out`] — stdout and stderr without a panic on a closed pipe (also
//!   used by the `lanefs` command).

/// One line to stderr, as `eprintln!` but never a panic ([`out`]).
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::out::stderr_line(format_args!($($arg)*))
    };
}

pub mod backend;
pub mod cli;
pub mod harness;
pub mod out;
pub mod plot;
pub mod results;
pub mod seeds;
pub mod table;
pub mod target;
pub mod workload;
