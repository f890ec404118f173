//! The candidate pairs: every op of a small argument universe against
//! every other (and itself), and the COMMUTER-style configuration of each
//! pair (same/different directory, name, file, overlapping/disjoint range,
//! existing/missing target), derived from the arguments.
//!
//! The universe names existing and missing paths in two directories, so
//! that each kind pair meets each configuration that the tree can give,
//! and mounts and unmounts of whole instances (each side unmounts its own
//! prepared instances: `umount(extra #0) ‖ umount(extra #0)` drops two
//! different ones; configuration `diff-instance`); which pairs commute is
//! decided by running them (`runner`), not here.
//!
//! No locks or atomics.

use crate::ops::Op;

/// Which candidate set to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairSet {
    /// A few arguments per kind (CI: seconds).
    Small,
    /// The whole universe.
    Full,
}

impl PairSet {
    pub fn parse(s: &str) -> Result<PairSet, String> {
        match s {
            "small" => Ok(PairSet::Small),
            "full" => Ok(PairSet::Full),
            _ => Err(format!("unknown pair set {s:?} (small|full)")),
        }
    }
}

/// The ops of the universe.
pub fn universe(set: PairSet) -> Vec<Op> {
    use Op::*;
    let mut ops = vec![
        Stat("/d1/f1"),
        Stat("/d2/g1"),
        Stat("/d1/new"),
        Open("/d1/f1"),
        Open("/d2/g1"),
        Read {
            file: 0,
            off: 0,
            len: 100,
        },
        Read {
            file: 2,
            off: 0,
            len: 100,
        },
        Write {
            file: 0,
            off: 0,
            len: 100,
            byte: b'w',
        },
        Write {
            file: 2,
            off: 0,
            len: 100,
            byte: b'w',
        },
        Create("/d1/new"),
        Create("/d2/new"),
        Unlink("/d1/f1"),
        Unlink("/d2/g1"),
        Rename("/d1/f1", "/d1/new"),
        Rename("/d2/g1", "/d2/new"),
        Mkdir("/d1/new"),
        Mkdir("/d2/new"),
        Rmdir("/d1/sub"),
        Rmdir("/d2/sub"),
        Link("/d1/f1", "/d1/new"),
        Link("/d2/g1", "/d2/new"),
        Readdir("/d1"),
        Readdir("/d2"),
        Truncate("/d1/f1", 100),
        Truncate("/d2/g1", 100),
        Chmod("/d1/f1", 0o600),
        Chmod("/d2/g1", 0o600),
        Fstat(0),
        Fstat(2),
        Close(0),
        Close(2),
        Mount,
        Umount(0),
    ];
    if set == PairSet::Full {
        ops.extend([
            Stat("/d1/f2"),
            Stat("/d1/sub"),
            Stat("/d2/new"),
            Open("/d1/f2"),
            Open("/d1/new"),
            Read {
                file: 0,
                off: 4096,
                len: 100,
            },
            Read {
                file: 0,
                off: 50,
                len: 100,
            },
            Read {
                file: 1,
                off: 0,
                len: 100,
            },
            Write {
                file: 0,
                off: 4096,
                len: 100,
                byte: b'w',
            },
            Write {
                file: 0,
                off: 50,
                len: 100,
                byte: b'z',
            },
            Write {
                file: 0,
                off: 0,
                len: 100,
                byte: b'z',
            },
            Write {
                file: 1,
                off: 0,
                len: 100,
                byte: b'w',
            },
            Create("/d1/new2"),
            Create("/d1/f1"),
            Unlink("/d1/f2"),
            Unlink("/d2/l2"),
            Unlink("/d1/new"),
            Rename("/d1/f1", "/d2/new"),
            Rename("/d1/f2", "/d1/new2"),
            Rename("/d1/f1", "/d2/g1"),
            Rename("/d1/new", "/d1/x"),
            Mkdir("/d1/new2"),
            Mkdir("/d1/sub"),
            Rmdir("/d1/new"),
            Link("/d1/f1", "/d2/new"),
            Link("/d1/f2", "/d1/new2"),
            Link("/d1/f2", "/d1/f1"),
            Readdir("/d1/sub"),
            Truncate("/d1/f1", 0),
            Truncate("/d1/f1", 5000),
            Truncate("/d1/f2", 100),
            Truncate("/d1/new", 0),
            Chmod("/d1/f1", 0o640),
            Chmod("/d1/f2", 0o600),
            Chmod("/d1/sub", 0o700),
            Fstat(1),
            Close(1),
            Umount(1),
        ]);
    }
    ops
}

/// Every unordered pair of the universe, itself included.
pub fn pairs(set: PairSet) -> Vec<(Op, Op)> {
    let ops = universe(set);
    let mut out = Vec::new();
    for i in 0..ops.len() {
        for j in i..ops.len() {
            // Keep the heatmap's kind order: the earlier kind on the left.
            let (a, b) = if ops[j].kind_index() < ops[i].kind_index() {
                (&ops[j], &ops[i])
            } else {
                (&ops[i], &ops[j])
            };
            out.push((a.clone(), b.clone()));
        }
    }
    out
}

fn parent(p: &str) -> &str {
    match p.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &p[..i],
    }
}

/// The pair's configuration in COMMUTER's terms, e.g.
/// `same-dir,diff-name,disjoint-range`.
pub fn config(a: &Op, b: &Op) -> String {
    // Mounts and unmounts never touch the main instance or one another's
    // instance (each side unmounts its own).
    if [a, b]
        .iter()
        .any(|o| matches!(o, Op::Mount | Op::Umount(_)))
    {
        return "diff-instance".into();
    }
    let (pa, pb) = (a.paths(), b.paths());
    let mut parts = Vec::new();
    // The directories an op reads or changes entries of: its paths'
    // parents, and for readdir the directory itself.
    let dirs = |o: &Op, ps: &[&'static str]| -> Vec<&'static str> {
        match o {
            Op::Readdir(d) => vec![*d],
            _ => ps.iter().map(|p| parent(p)).collect(),
        }
    };
    let (dirs_a, dirs_b) = (dirs(a, &pa), dirs(b, &pb));
    let same_dir = dirs_a.iter().any(|d| dirs_b.contains(d));
    parts.push(if same_dir { "same-dir" } else { "diff-dir" });
    let same_name = pa.iter().any(|p| pb.contains(p));
    parts.push(if same_name { "same-name" } else { "diff-name" });
    let fd_op = |o: &Op| {
        matches!(
            o,
            Op::Read { .. } | Op::Write { .. } | Op::Fstat(_) | Op::Close(_)
        )
    };
    if fd_op(a) || fd_op(b) {
        parts.push(if same_name { "same-file" } else { "diff-file" });
    }
    if let (Some((s1, e1)), Some((s2, e2))) = (a.range(), b.range()) {
        if same_name {
            parts.push(if s1 < e2 && s2 < e1 {
                "overlap"
            } else {
                "disjoint"
            });
        }
    }
    parts.join(",")
}
