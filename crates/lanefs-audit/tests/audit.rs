//! The audit end to end: the recorder sees the engine, the commutativity
//! check rejects non-commuting pairs, conflicts are found and named, and
//! the small pair set runs on the default engine and a before-design.
#![cfg(feature = "audit")]

use lanefs_audit::ops::Op;
use lanefs_audit::{audit_variant, expand_variants, PairResult, PairSet, Runner};
use lanefs_core::Variants;

/// The tests of this file one at a time: each runs its sides on lanes 1
/// and 2, and process-wide per-lane state (the cache-budget counter) is
/// shared by every instance in the process, so two tests beside each
/// other would change what the other's pairs find on their lanes.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LANES: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LANES.lock().unwrap_or_else(|e| e.into_inner())
}

fn pair(a: Op, b: Op) -> PairResult {
    let r = Runner::new(Variants::default()).pair(&a, &b);
    assert!(r.error.is_none(), "{a} ‖ {b}: {:?}", r.error);
    r
}

#[test]
fn non_commuting_pairs_are_rejected_and_not_audited() {
    let _serial = one_at_a_time();
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
    // readdir sees which inode a name is (`d_ino`): a rename over a name
    // changes it, though the names stay the same.
    let r = pair(Op::Rename("/d1/f1", "/d2/g1"), Op::Readdir("/d2"));
    assert!(!r.commutes, "{r:?}");
    assert!(r.differs.as_deref().unwrap().contains("g1"), "{r:?}");
}

#[test]
fn commuting_pairs_on_one_object_conflict_with_named_locations() {
    let _serial = one_at_a_time();
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
    let _serial = one_at_a_time();
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
    let _serial = one_at_a_time();
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
    // COMMUTER's calls are a strict part of the file ops, and counting
    // over a kind set adds up its kind pairs.
    let (m, f) = (default.commuter_op_counts(), default.file_op_counts());
    assert!(
        m.commuting > 0 && m.commuting < f.commuting && m.pairs < f.pairs,
        "{m:?} {f:?}"
    );
    let rw = default.kind_counts("read", "read").commuting
        + default.kind_counts("read", "write").commuting
        + default.kind_counts("write", "write").commuting;
    assert_eq!(default.counts_over(&["read", "write"]).commuting, rw);
    // Mounts and unmounts are in the small set: they commute with each
    // other and with every op, and touch nothing of the main instance.
    for (x, y) in [("mount", "umount"), ("umount", "umount"), ("mount", "stat")] {
        let c = default.kind_counts(x, y);
        assert!(
            c.commuting > 0 && c.commuting == c.pairs,
            "{x} ‖ {y}: {c:?}"
        );
    }
    for k in ["stat", "write", "create", "rename", "close"] {
        let c = default.kind_counts("umount", k);
        let conflicts: Vec<_> = default
            .results
            .iter()
            .filter(|r| r.a_kind == "umount" || r.b_kind == "umount")
            .filter(|r| r.conflict_free == Some(false))
            .map(|r| format!("{} ‖ {}: {:?}", r.a, r.b, r.conflicts))
            .collect();
        assert_eq!(
            c.conflict_free, c.commuting,
            "umount ‖ {k}: {c:?}; {conflicts:#?}"
        );
    }
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

/// Mount and unmount whole instances: every pair of them commutes (each
/// side unmounts its own instance; one unmounted twice fails), none
/// conflicts with an op on the main instance, and the reclaim registry's
/// before-designs (seed 001) conflict on their global state: `rwlock` on
/// its one lock, `sync-grace` on its grace period.
#[test]
fn mounts_and_unmounts_commute_and_show_the_registry_designs() {
    let _serial = one_at_a_time();
    use lanefs_audit::ops::Raw;
    let world = lanefs_audit::world::World::prepare(&Variants::default()).unwrap();
    assert!(matches!(Op::Umount(0).run(&world, 0), Raw::Unit));
    assert!(
        matches!(Op::Umount(0).run(&world, 0), Raw::Err(libc::EINVAL)),
        "an instance is unmounted once"
    );
    assert!(
        matches!(Op::Umount(0).run(&world, 1), Raw::Unit),
        "side 1's own"
    );
    drop(world);
    let registry_ops = [Op::Mount, Op::Umount(0), Op::Umount(1)];
    let sites = |r: &PairResult| -> Vec<String> {
        r.conflicts
            .iter()
            .flat_map(|c| c.a_sites.iter().chain(&c.b_sites).cloned())
            .collect()
    };
    for v in ["default", "reclaim=rwlock", "reclaim=sync-grace"] {
        let (_, variants) = expand_variants(v).unwrap().remove(0);
        let runner = Runner::new(variants);
        for (i, a) in registry_ops.iter().enumerate() {
            let r = runner.pair(a, &Op::Stat("/d1/f1"));
            assert!(r.error.is_none() && r.commutes, "{v}: {r:?}");
            assert_eq!(r.conflict_free, Some(true), "{v}: {r:?}");
            for b in &registry_ops[i..] {
                let r = runner.pair(a, b);
                assert!(r.error.is_none(), "{v}: {a} ‖ {b}: {:?}", r.error);
                assert!(r.commutes, "{v}: {a} ‖ {b}: {:?}", r.differs);
                let sites = sites(&r);
                match v {
                    "reclaim=rwlock" => assert!(
                        sites.iter().any(|s| s.contains("reclaim/rwlock.rs")),
                        "{v}: {a} ‖ {b}: the registry lock: {sites:?}"
                    ),
                    "reclaim=sync-grace" if matches!((a, b), (Op::Umount(_), Op::Umount(_))) => {
                        assert!(
                            sites.iter().any(|s| s.contains("reclaim/sync_grace.rs")),
                            "{v}: {a} ‖ {b}: the grace period: {sites:?}"
                        )
                    }
                    "reclaim=sync-grace" => {
                        assert_eq!(r.conflict_free, Some(false), "{v}: {a} ‖ {b}")
                    }
                    // The default never serialises two registrations on
                    // one lock (each lane has its own shard).
                    _ => assert!(
                        r.conflicts
                            .iter()
                            .all(|c| !c.same_word || c.what != "mutex"),
                        "{v}: {a} ‖ {b}: {:?}",
                        r.conflicts
                    ),
                }
            }
        }
    }
}
