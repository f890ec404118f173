//! fsck's link-count pass (e2fsck's pass 4): every live inode's link count
//! against the directory entries that name it; and its reachability pass
//! (e2fsck's pass 3).
//!
//! One pass over the objects counts, per inode number, the entries of live
//! directories that name it (a hash map indexed by inode number), and keeps
//! each live record's kind and link count; [`LinkCounts::findings`] then
//! compares them, so the cost is linear in objects plus entries.
//!
//! What a count must be (docs/FORMAT.md, "fsck"): a file, symlink or
//! special inode's link count is the number of entries naming it; a
//! directory's is 2 + its subdirectories (derived from its entries at load,
//! "Derived fields"), which is right exactly when one entry names it (none
//! for the root: its `..` is itself). A live inode no entry names is
//! *leaked*. Link count 0 is an orphan (recovery frees it): a problem only
//! if an entry still names it.
//!
//! Pass 3 ([`LinkCounts::reach_findings`]) uses the same counts: a walk
//! over entries of kind directory from the root (and from every leaked
//! directory, pass 4's) must reach every live directory, and a directory
//! named once must have its namer as its record's parent.
//!
//! No locks or atomics: the caller hands in the objects, each under
//! whatever lock holds it while [`LinkCounter::add`] runs (`check` owns
//! the loaded maps; repair locks one shard at a time).

use std::collections::{HashMap, HashSet};

use lanefs_store::{DirEntryRecord, FileKind, Ino, InodeRecord, ROOT_INO};

use crate::object::InodeObj;

/// A live record's kind and link count.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LinkRec {
    pub ino: Ino,
    pub kind: FileKind,
    pub nlink: u32,
    /// The record's parent (`..`; meaningful for a directory).
    pub parent: Ino,
}

/// Accumulates [`LinkCounts`] one object at a time.
#[derive(Default)]
pub(crate) struct LinkCounter {
    c: LinkCounts,
}

/// Entry references and live records of a whole image.
#[derive(Default)]
pub(crate) struct LinkCounts {
    /// Per inode number: entries of live directories that name it.
    pub refs: HashMap<Ino, u32>,
    /// Per directory: the `(parent, name)` of each entry of kind directory
    /// that names it (repair keeps one).
    pub dir_names: HashMap<Ino, Vec<(Ino, Vec<u8>)>>,
    /// Per live directory: the inodes its entries of kind directory name
    /// (the edges of the reachability walk).
    pub subdirs: HashMap<Ino, Vec<Ino>>,
    /// Every live, readable record whose kind and link count decode.
    pub records: Vec<LinkRec>,
}

/// One inode whose link count disagrees with its entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LinkFinding {
    /// Link count above 0 and no entry names it.
    Leaked {
        ino: Ino,
        kind: FileKind,
        nlink: u32,
    },
    /// A non-directory whose link count is not its entries' number, or any
    /// inode with link count 0 that entries still name.
    Count {
        ino: Ino,
        kind: FileKind,
        nlink: u32,
        refs: u32,
    },
    /// A live directory named by more than one entry (the root: by any).
    DirNames { ino: Ino, refs: u32 },
    /// A live directory that entries name but that no path from the root
    /// (nor from a leaked directory) reaches: it is in, or hangs off, a
    /// cycle of directories that name each other (e2fsck's pass 3).
    /// `by` is a directory naming it.
    Unreachable { ino: Ino, by: Ino },
    /// A reachable directory named once, by `by`, whose record's parent
    /// (`..`) is `parent`.
    Parent { ino: Ino, parent: Ino, by: Ino },
}

impl LinkFinding {
    pub fn ino(&self) -> Ino {
        match *self {
            LinkFinding::Leaked { ino, .. }
            | LinkFinding::Count { ino, .. }
            | LinkFinding::DirNames { ino, .. }
            | LinkFinding::Unreachable { ino, .. }
            | LinkFinding::Parent { ino, .. } => ino,
        }
    }

    /// The problem line fsck reports.
    pub fn describe(&self) -> String {
        match *self {
            LinkFinding::Leaked { ino, kind, nlink } => {
                format!("inode {ino} ({kind:?}): link count {nlink} but no entry names it (leaked)")
            }
            LinkFinding::Count {
                ino,
                kind,
                nlink,
                refs,
            } => format!("inode {ino} ({kind:?}): link count {nlink} but {refs} entries name it"),
            LinkFinding::DirNames { ino, refs } => {
                let want = if ino == ROOT_INO { 0 } else { 1 };
                format!("directory {ino} is named by {refs} entries, not {want}")
            }
            LinkFinding::Unreachable { ino, by } => format!(
                "directory {ino} is unreachable from the root (named by directory {by}: a cycle detached from the tree)"
            ),
            LinkFinding::Parent { ino, parent, by } => format!(
                "directory {ino} has parent {parent} in its record but is named by directory {by}"
            ),
        }
    }
}

impl LinkCounter {
    /// Count `o` (inode `ino`): its record, and if it is a live directory,
    /// the entries it holds. Bad objects are left to fsck's other checks;
    /// a malformed entry is not counted.
    pub fn add(&mut self, ino: Ino, o: &InodeObj) {
        if o.bad {
            return;
        }
        // A record that does not decode is left alone, as fsck's other
        // checks treat it (entries naming it are dangling).
        let Some(Ok(rec)) = o.rec.as_deref().map(InodeRecord::decode) else {
            return;
        };
        let (kind, nlink, parent) = (rec.kind, rec.nlink, rec.parent);
        self.c.records.push(LinkRec {
            ino,
            kind,
            nlink,
            parent,
        });
        // Entries of a dead directory (link count 0, freed at the next
        // mount with it) or of a non-directory name nothing reachable.
        if kind != FileKind::Directory || nlink == 0 {
            return;
        }
        let Some(d) = &o.dir else { return };
        for (name, v) in d.entries() {
            let Ok(e) = DirEntryRecord::decode_value(name, v) else {
                continue;
            };
            *self.c.refs.entry(e.ino).or_default() += 1;
            if e.kind == FileKind::Directory {
                self.c.subdirs.entry(ino).or_default().push(e.ino);
                self.c
                    .dir_names
                    .entry(e.ino)
                    .or_default()
                    .push((ino, name.clone()));
            }
        }
    }

    pub fn finish(self) -> LinkCounts {
        self.c
    }
}

impl LinkCounts {
    pub fn refs(&self, ino: Ino) -> u32 {
        self.refs.get(&ino).copied().unwrap_or(0)
    }

    /// What disagrees, in inode order: link counts (pass 4), then
    /// reachability and parents (pass 3, [`LinkCounts::reach_findings`]).
    pub fn findings(&self) -> Vec<LinkFinding> {
        let mut out: Vec<LinkFinding> = self
            .records
            .iter()
            .filter_map(|r| finding(r, self.refs(r.ino)))
            .collect();
        out.extend(self.reach_findings());
        out.sort_by_key(LinkFinding::ino);
        out
    }

    /// Live directories (link count above 0).
    fn live_dirs(&self) -> impl Iterator<Item = &LinkRec> {
        self.records
            .iter()
            .filter(|r| r.kind == FileKind::Directory && r.nlink > 0)
    }

    /// The directories reached by walking entries of kind directory from
    /// `starts` (iterative, a visited set: linear in directories plus
    /// their entries).
    fn reach(&self, starts: impl IntoIterator<Item = Ino>) -> HashSet<Ino> {
        let mut seen = HashSet::new();
        let mut work: Vec<Ino> = starts.into_iter().collect();
        while let Some(d) = work.pop() {
            if !seen.insert(d) {
                continue;
            }
            if let Some(subs) = self.subdirs.get(&d) {
                work.extend(subs.iter().copied().filter(|s| !seen.contains(s)));
            }
        }
        seen
    }

    /// Pass 3: every live directory named by at least one entry must be
    /// reached from the root. The walk also starts at every leaked
    /// directory (named by none: pass 4 reports and frees it with what it
    /// holds), so what is left unreached is in, or under, a detached cycle.
    /// A reached directory named once must have the naming directory as
    /// its record's parent (named more often: pass 4's `DirNames`).
    pub fn reach_findings(&self) -> Vec<LinkFinding> {
        let leaked = self
            .live_dirs()
            .filter(|r| r.ino != ROOT_INO && self.refs(r.ino) == 0)
            .map(|r| r.ino);
        let seen = self.reach(std::iter::once(ROOT_INO).chain(leaked));
        let mut out = Vec::new();
        for r in self.live_dirs() {
            let names = self.dir_names.get(&r.ino).map_or(&[][..], |v| &v[..]);
            if !seen.contains(&r.ino) {
                let by = names.first().map_or(0, |(p, _)| *p);
                out.push(LinkFinding::Unreachable { ino: r.ino, by });
            } else if r.ino != ROOT_INO && self.refs(r.ino) == 1 {
                if let [(by, _)] = names {
                    if *by != r.parent {
                        out.push(LinkFinding::Parent {
                            ino: r.ino,
                            parent: r.parent,
                            by: *by,
                        });
                    }
                }
            }
        }
        out
    }
}

/// The finding for one record named by `refs` entries, if any.
pub(crate) fn finding(r: &LinkRec, refs: u32) -> Option<LinkFinding> {
    let LinkRec {
        ino, kind, nlink, ..
    } = *r;
    if nlink == 0 {
        // An orphan: recovery frees it (fsck notes it), unless named.
        return (refs > 0).then_some(LinkFinding::Count {
            ino,
            kind,
            nlink,
            refs,
        });
    }
    if kind == FileKind::Directory {
        // Its own count is derived from its entries at load; what can be
        // wrong is how many entries name it.
        let want = u32::from(ino != ROOT_INO);
        return match refs {
            0 if want == 1 => Some(LinkFinding::Leaked { ino, kind, nlink }),
            n if n != want => Some(LinkFinding::DirNames { ino, refs }),
            _ => None,
        };
    }
    match refs {
        0 => Some(LinkFinding::Leaked { ino, kind, nlink }),
        n if n != nlink => Some(LinkFinding::Count {
            ino,
            kind,
            nlink,
            refs,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(ino: Ino, kind: FileKind, nlink: u32, refs: u32) -> Option<LinkFinding> {
        finding(
            &LinkRec {
                ino,
                kind,
                nlink,
                parent: ROOT_INO,
            },
            refs,
        )
    }

    #[test]
    fn what_each_count_must_be() {
        use FileKind::{Directory as D, Regular as R, Symlink as S};
        assert_eq!(f(5, R, 2, 2), None);
        assert_eq!(f(5, S, 1, 1), None);
        assert_eq!(f(5, D, 4, 1), None, "a directory's own count is derived");
        assert_eq!(f(ROOT_INO, D, 3, 0), None, "the root has no name");
        assert_eq!(f(5, R, 0, 0), None, "an orphan: recovery's");
        assert_eq!(f(5, D, 0, 0), None, "a dead directory: recovery's");
        let leak = |kind, nlink| LinkFinding::Leaked {
            ino: 5,
            kind,
            nlink,
        };
        assert_eq!(f(5, R, 1, 0), Some(leak(R, 1)));
        assert_eq!(f(5, D, 2, 0), Some(leak(D, 2)));
        let count = |kind, nlink, refs| LinkFinding::Count {
            ino: 5,
            kind,
            nlink,
            refs,
        };
        assert_eq!(f(5, R, 3, 2), Some(count(R, 3, 2)));
        assert_eq!(f(5, R, 0, 1), Some(count(R, 0, 1)));
        assert_eq!(f(5, D, 0, 1), Some(count(D, 0, 1)));
        assert_eq!(
            f(5, D, 2, 2),
            Some(LinkFinding::DirNames { ino: 5, refs: 2 })
        );
        assert_eq!(
            f(ROOT_INO, D, 2, 1),
            Some(LinkFinding::DirNames {
                ino: ROOT_INO,
                refs: 1
            })
        );
    }

    /// Counts for directories `dirs` (each `(ino, parent)`) holding the
    /// directory entries `edges` (`(dir, sub)`).
    fn counts(dirs: &[(Ino, Ino)], edges: &[(Ino, Ino)]) -> LinkCounts {
        let mut c = LinkCounts::default();
        for &(ino, parent) in dirs {
            c.records.push(LinkRec {
                ino,
                kind: FileKind::Directory,
                nlink: 2,
                parent,
            });
        }
        for &(d, s) in edges {
            *c.refs.entry(s).or_default() += 1;
            c.subdirs.entry(d).or_default().push(s);
            c.dir_names.entry(s).or_default().push((d, b"x".to_vec()));
        }
        c
    }

    #[test]
    fn what_the_root_must_reach() {
        let r = ROOT_INO;
        // A tree: nothing.
        let c = counts(&[(r, r), (5, r), (6, 5)], &[(r, 5), (5, 6)]);
        assert_eq!(c.reach_findings(), []);
        // 5 <-> 6 detached, 7 hanging off 6: all three unreachable.
        let c = counts(&[(r, r), (5, 6), (6, 5), (7, 6)], &[(5, 6), (6, 5), (6, 7)]);
        let mut got: Vec<Ino> = c.reach_findings().iter().map(LinkFinding::ino).collect();
        got.sort_unstable();
        assert_eq!(got, [5, 6, 7]);
        assert!(c
            .findings()
            .iter()
            .all(|f| matches!(f, LinkFinding::Unreachable { .. })));
        // Under a leaked directory (pass 4's): not reported again.
        let c = counts(&[(r, r), (5, r), (6, 5)], &[(5, 6)]);
        assert_eq!(c.reach_findings(), []);
        // A wrong parent.
        let c = counts(&[(r, r), (5, r), (6, r)], &[(r, 5), (5, 6)]);
        assert_eq!(
            c.reach_findings(),
            [LinkFinding::Parent {
                ino: 6,
                parent: r,
                by: 5
            }]
        );
    }
}
