//! The audit end to end: commutativity decisions, conflicts found, and the
//! small pair set on the default engine and a before-design.
#![cfg(feature = "audit")]

use lanefs_audit::ops::Op;
use lanefs_audit::{audit_variant, expand_variants, PairSet, Runner};
use lanefs_core::Variants;

fn pair(a: Op, b: Op) -> lanefs_audit::PairResult {
    let r = Runner::new(Variants::default()).pair(&a, &b);
    assert!(r.error.is_none(), "{a} ‖ {b}: {:?}", r.error);
    r
}

#[test]
fn small_set_smoke() {
    for (name, v) in expand_variants("all").unwrap() {
        let t = std::time::Instant::now();
        let r = audit_variant(&name, v, PairSet::Small).unwrap();
        eprintln!("{:?}", t.elapsed());
        eprintln!("{}", r.text());
    }
}
