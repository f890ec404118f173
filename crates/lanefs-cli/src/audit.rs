//! `lanefs audit`: the conflict audit (crate `lanefs-audit`) from the
//! command line. Writes, per variant, `audit-<variant>.{json,txt,png}`
//! into `--out`, and `summary.txt` (one line per variant), and prints the
//! text tables. Without the `audit` feature it exits non-zero saying how
//! to build it.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

#[derive(Args, Debug)]
pub struct AuditArgs {
    /// Engine variant(s): `default`, `all` (the default and every
    /// before-design), or `mechanism=design[,…]`; several separated by `;`.
    #[arg(long, default_value = "default")]
    variant: String,
    /// Directory for the JSON, text and heatmap outputs.
    #[arg(long, default_value = "audit-results")]
    out: PathBuf,
    /// Candidate pairs: `small` (seconds) or `full`.
    #[arg(long, default_value = "full")]
    pairs: String,
}

pub fn cmd_audit(a: &AuditArgs) -> ExitCode {
    match run(a) {
        // Killed by SIGPIPE instead when stdout's reader left early.
        Ok(()) => lanefs_bench::out::success(),
        Err(msg) => {
            say!("lanefs audit: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: &AuditArgs) -> Result<(), String> {
    if !lanefs_audit::recording_available() {
        return Err(lanefs_audit::NOT_BUILT.into());
    }
    let set = lanefs_audit::PairSet::parse(&a.pairs)?;
    let variants = lanefs_audit::expand_variants(&a.variant)?;
    let mut summary = String::new();
    // The outputs are written even when stdout fails: the first error
    // other than a reader gone is reported at the end.
    let mut printed = Ok(());
    for (name, v) in variants {
        let r = lanefs_audit::audit_variant(&name, v, set)?;
        printed = printed.and(lanefs_bench::out::stdout(&r.text()));
        let files = r
            .write(&a.out)
            .map_err(|e| format!("{}: {e}", a.out.display()))?;
        for f in files {
            say!("wrote {}", f.display());
        }
        summary.push_str(&r.summary_line());
        summary.push('\n');
    }
    let path = a.out.join("summary.txt");
    std::fs::write(&path, &summary).map_err(|e| format!("{}: {e}", path.display()))?;
    printed.and(lanefs_bench::out::stdout(&format!("\n{summary}\n")))
}
