//! The audit end to end: the recorder sees the engine, the commutativity
//! check rejects non-commuting pairs, conflicts are found and named, and
//! the small pair set runs on the default engine and a before-design.
#![cfg(feature = "audit")]

use lanefs_audit::ops::Op;
use lanefs_audit::{audit_variant, expand_variants, PairResult, PairSet, Runner};
use lanefs_core::Variants;

fn pair(a: Op, b: Op) -> PairResult {
    let r = Runner::new(Variants::default()).pair(&a, &b);
    assert!(r.error.is_none(), "{a} ‖ {b}: {:?}", r.error);
    r
}

#[test]
fn non_commuting_pairs_are_rejected_and_not_audited() {
    // Two exclusive creates of one name: whichever runs first wins.
    let r = pair(Op::Create("/d1/new"), Op::Create("/d1/new"));
    assert!(!r.commutes, "{r:?}");
    assert!(r.differs.as_deref().unwrap().contains("EEXIST"), "{r:?}");
    assert_eq!(r.conflict_free, None, "a non-commuting pair is not audited");
    // Two writes of different bytes to one range: the last one wins.
    let w = |byte| Op::Write {
        file: 0,
        off: 0,
        len: 100,
        byte,
    };
    let r = pair(w(b'w'), w(b'z'));
    assert!(!r.commutes, "{r:?}");
    // stat sees the size a truncate changes.
    let r = pair(Op::Stat("/d1/f1"), Op::Truncate("/d1/f1", 100));
    assert!(!r.commutes, "{r:?}");
    // readdir sees a create in its directory.
    let r = pair(Op::Create("/d1/new"), Op::Readdir("/d1"));
    assert!(!r.commutes, "{r:?}");
}

#[test]
fn commuting_pairs_on_one_object_conflict_with_named_locations() {
    // Two writes of the same bytes to one range commute, and both change
    // the same page and the file's size and times.
    let w = Op::Write {
        file: 0,
        off: 0,
        len: 100,
        byte: b'w',
    };
    let r = pair(w.clone(), w);
    assert!(r.commutes, "{r:?}");
    assert_eq!(r.conflict_free, Some(false), "{r:?}");
    let sites: Vec<&String> = r
        .conflicts
        .iter()
        .flat_map(|c| c.a_sites.iter().chain(&c.b_sites))
        .collect();
    assert!(
        sites
            .iter()
            .any(|s| s.starts_with("crates/lanefs-core/src/") && s.contains(".rs:")),
        "conflicts are named by file:line: {sites:?}"
    );
    // Two chmods of one file to one mode commute; both write its record.
    let r = pair(Op::Chmod("/d1/f1", 0o600), Op::Chmod("/d1/f1", 0o600));
    assert!(r.commutes, "{r:?}");
    assert_eq!(r.conflict_free, Some(false), "{r:?}");
    assert!(
        r.conflicts
            .iter()
            .any(|c| c.what == "key" || c.what == "mutex"),
        "the inode's lock or record is among them: {:?}",
        r.conflicts
    );
}

#[test]
fn independent_reads_are_conflict_free() {
    // Reads through each side's own handle of two different files.
    let r = pair(
        Op::Read {
            file: 0,
            off: 0,
            len: 100,
        },
        Op::Read {
            file: 2,
            off: 0,
            len: 100,
        },
    );
    assert!(r.commutes, "{r:?}");
    assert_eq!(r.conflict_free, Some(true), "{:?}", r.conflicts);
}

#[test]
fn small_set_runs_on_the_default_and_a_before_design_which_conflicts_more() {
    let t = std::time::Instant::now();
    let variants = expand_variants("default;icache=global").unwrap();
    let reports: Vec<_> = variants
        .into_iter()
        .map(|(name, v)| audit_variant(&name, v, PairSet::Small).unwrap())
        .collect();
    let (default, global) = (&reports[0], &reports[1]);
    for r in &reports {
        assert_eq!(r.overall.errors, 0, "{}", r.text());
        assert!(r.overall.commuting > 100, "{}", r.text());
        assert!(
            r.overall.commuting < r.overall.pairs,
            "some pairs do not commute"
        );
        assert!(r.text().contains("stat"));
    }
    // POSIX decides commutativity, not the design.
    assert_eq!(default.overall.commuting, global.overall.commuting);
    assert!(
        global.overall.conflict_free < default.overall.conflict_free,
        "the global icache lock should conflict more:\n{}\n{}",
        default.summary_line(),
        global.summary_line()
    );
    assert!(
        t.elapsed().as_secs() < 60,
        "small set took {:?}",
        t.elapsed()
    );
    let dir = std::env::temp_dir().join(format!("lanefs-audit-test-{}", std::process::id()));
    let files = default.write(&dir).unwrap();
    assert_eq!(files.len(), 3);
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    assert_eq!(json["overall"]["commuting"], default.overall.commuting);
    assert!(
        std::fs::metadata(&files[2]).unwrap().len() > 0,
        "heatmap written"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
