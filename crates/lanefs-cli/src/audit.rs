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
        Ok(()) => ExitCode::SUCCESS,
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
    for (name, v) in variants {
        let r = lanefs_audit::audit_variant(&name, v, set)?;
        print!("{}", r.text());
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
    tell!("\n{summary}");
    Ok(())
}
