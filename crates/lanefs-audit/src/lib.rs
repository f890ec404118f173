//! The conflict audit: the scalable commutativity rule (Clements et al.,
//! SOSP 2013) as a number that does not depend on the machine's cores.
//!
//! For every pair of operations of a small universe (`pairs`), the audit
//! decides empirically whether the pair commutes (same results and same
//! observable state in both orders, from a fresh prepared state: `world`),
//! and, for the pairs that commute, whether the engine ran them
//! *conflict-free*: neither op wrote a cache line or store key that the
//! other read or wrote (`runner`, over the recorder of lanefs-core's
//! `audit` feature and the key log of [`store::RecordingStore`]).
//!
//! Outputs per engine variant ([`report`]): the fraction conflict-free
//! overall and per op-kind pair, a JSON file with every pair, a heatmap
//! PNG (op × op, sv6-style) and a text table. See docs/AUDIT.md.
//!
//! Without the `audit` feature the crate builds, but [`audit_variant`]
//! returns [`runner::NOT_BUILT`].

pub mod ops;
pub mod pairs;
pub mod report;
pub mod runner;
pub mod store;
pub mod world;

use lanefs_core::Variants;

pub use pairs::PairSet;
pub use report::VariantReport;
pub use runner::{recording_available, PairResult, Runner, NOT_BUILT};

/// The variants named by `spec`: `all` (the default and every
/// before-design), `default`, or `mechanism=design[,…]`; several specs
/// separated by `;`.
pub fn expand_variants(spec: &str) -> Result<Vec<(String, Variants)>, String> {
    let mut out = Vec::new();
    for s in spec.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        if s == "all" {
            out.push(("default".to_string(), Variants::default()));
            out.extend(Variants::baselines());
        } else {
            let v = Variants::parse(s)?;
            out.push((v.to_string(), v));
        }
    }
    if out.is_empty() {
        return Err("no variant given".into());
    }
    Ok(out)
}

/// Audit every pair of `set` on one variant.
pub fn audit_variant(
    name: &str,
    variants: Variants,
    set: PairSet,
) -> Result<VariantReport, String> {
    if !recording_available() {
        return Err(NOT_BUILT.into());
    }
    // The runner pins the calling thread's lane; run it on a thread of its
    // own so the caller keeps its lane.
    let name = name.to_string();
    std::thread::spawn(move || {
        let runner = Runner::new(variants);
        let results = pairs::pairs(set)
            .iter()
            .map(|(a, b)| runner.pair(a, b))
            .collect();
        VariantReport::new(&name, &variants.to_string(), results)
    })
    .join()
    .map_err(|_| "the audit thread panicked".to_string())
}
