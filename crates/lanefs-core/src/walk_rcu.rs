//! The engine's RCU-walk: path resolution that takes no lock and no
//! reference on the way (Linux's `LOOKUP_RCU`).
//!
//! Under one crossbeam-epoch guard, for each component the walk:
//! 1. checks search permission on the directory it stands in from the
//!    inode's attribute mirror (`attr_seq`), without `meta`;
//! 2. looks the name up in the directory's loaded index, lock-free (not
//!    loaded → bail out), keeping the identity of the entry's node;
//! 3. finds the child with `FsInner::iget_rcu` (a guard-scoped reference,
//!    no count, not even a read of its life word; a miss or an inode in
//!    flight → bail out) and whether it was freed (its header's `freed`
//!    flag, on the read-mostly line with its kind: no seqlocked group of
//!    the mirror, which a `chmod` writes), and, for the last when the
//!    caller wants its attributes, the whole mirror (a directory on the
//!    way has its permission group read by step 1 of the next component,
//!    unless the caller needs no mode bits to search it: root);
//! 4. checks that the same node still holds the name in the same index
//!    (`DirState::still_holds`): the entry stayed linked from the lookup to
//!    here, so the child could not have been freed and its number could
//!    not have been reused (an inode is freed only after its last entry is
//!    gone, and an unlinked node is never linked again); otherwise → retry
//!    the whole walk.
//!
//! A symlink in the middle (or a last one the caller must follow), `..`,
//! a directory whose search permission its access ACL decides (`acl`:
//! the ACL is read under `meta`), a cache miss, or more than [`RCU_WALK_RETRIES`] failed validations end
//! the RCU-walk with "not handled" (`None`); the caller then walks with
//! counted lookups (the reference walk), which handles everything.
//!
//! The guarantee (the same as the reference walk's): every step is one
//! linearizable lookup — the entry it followed was present in the directory
//! it stood in at some instant between that step's start and end
//! (renames included: all of a rename's names switch at one instant,
//! `dir`, "Renames"), and the
//! attributes returned are one whole version of the final inode's that held
//! while its entry was linked. The walk as a whole is not atomic against
//! changes of *other* directories (neither is Linux's). It never returns,
//! and never dereferences, a freed inode: inodes and indexes found under the
//! guard are reclaimed only after it is dropped.
//!
//! A counted walk adds its one lookup reference under the final inode's
//! `meta`, and only if it is still named there (`Meta::still_named`:
//! linked and not freed, as every answer by name); otherwise the entry
//! went after validation and the walk runs again. Its attributes are read
//! in that same section, so a counted walk, like a stat walk, never
//! answers a link count of 0.
//!
//! Locks taken: none, except `meta` of the final inode for a counted walk
//! (to add the one lookup reference), and what `iget_rcu` takes (none in
//! the icache's lock-free design).

use crossbeam_epoch::Guard;
use lanefs_store::{Errno, FileKind, Ino, Result};

use crate::attr_seq::AttrSnapshot;
use crate::fs::{check_name, FsInner};
use crate::inode::{Body, Inode};
use crate::{Attr, Cred, DirAt, Fs, MAY_EXEC};

/// Whole-walk retries after a failed validation before giving up.
pub const RCU_WALK_RETRIES: usize = 4;
/// Most components callers pass in one RCU-walk without allocating (a
/// longer path takes the reference walk).
pub const MAX_RCU_COMPONENTS: usize = 64;

/// A resolved path's final inode.
pub(crate) struct Resolved {
    pub found: Found,
    /// Its attributes, when asked for.
    pub attr: Option<Attr>,
}

/// The inode a lock-free walk ended on: its number, kind and generation
/// (which, with the number, names it even after a caller that took no
/// reference let go: [`DirAt`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    pub ino: Ino,
    pub kind: FileKind,
    pub generation: u64,
}

impl Found {
    fn of(inode: &Inode) -> Found {
        Found {
            ino: inode.ino,
            kind: inode.kind,
            generation: inode.generation,
        }
    }

    /// This inode as the directory of an operation, checked by generation.
    pub fn at(&self) -> DirAt {
        DirAt::checked(self.ino, self.generation)
    }
}

/// What one attempt ended with.
enum Attempt<'g> {
    /// Resolved: the final inode and, if asked for, a whole copy of its
    /// attributes.
    Found(&'g Inode, Option<AttrSnapshot>),
    /// A definite answer (ENOENT, ENOTDIR, EACCES, ENAMETOOLONG, ...).
    Failed(Errno),
    /// A concurrent change was seen: try again.
    Retry,
    /// Not handled lock-free (symlink, `..`, cache miss).
    Bail,
}

impl FsInner {
    /// One lock-free attempt to resolve `comps` from `start`.
    fn walk_rcu_once<'g>(
        &'g self,
        cred: &Cred,
        start: DirAt,
        comps: &[&[u8]],
        want_attr: bool,
        guard: &'g Guard,
    ) -> Attempt<'g> {
        let Some(mut cur) = self.iget_rcu(start.ino, guard) else {
            return Attempt::Bail;
        };
        if !start.matches(cur.generation) {
            // The directory the caller found is gone (its number reused).
            return Attempt::Failed(Errno::ENOENT);
        }
        for (i, &name) in comps.iter().enumerate() {
            let is_last = i + 1 == comps.len();
            if cur.kind != FileKind::Directory {
                return Attempt::Failed(Errno::ENOTDIR);
            }
            match cur.permission_rcu(cred, MAY_EXEC) {
                Some(Ok(())) => {}
                Some(Err(e)) => return Attempt::Failed(e),
                // A directory whose access ACL decides: its record is
                // read under `meta`, by the reference walk.
                None => return Attempt::Bail,
            }
            if name == b"." {
                continue;
            }
            if name == b".." {
                return Attempt::Bail;
            }
            if let Err(e) = check_name(name) {
                return Attempt::Failed(e);
            }
            let Body::Dir(state) = &cur.body else {
                return Attempt::Failed(Errno::ENOTDIR);
            };
            let Some(index) = state.index(guard) else {
                return Attempt::Bail;
            };
            let Some(entry) = index.get_entry(name, guard) else {
                return Attempt::Failed(Errno::ENOENT);
            };
            let slot = entry.slot();
            let Some(child) = self.iget_rcu(slot.ino, guard) else {
                return Attempt::Bail;
            };
            child.mark_referenced();
            // The final inode's whole mirror (if the caller wants it), read
            // while its entry is still to be validated (so the attributes
            // held while it was linked); otherwise only the permission
            // group: a directory's times and size, which every create in
            // it changes, live on other lines (its stripes', `dir_attr`).
            let attr = (is_last && want_attr).then(|| child.attr_snapshot());
            let freed = match &attr {
                Some(a) => a.freed(),
                None => child.is_freed(),
            };
            // The entry stayed linked while we found its inode (a removal
            // of another name in the directory does not disturb this).
            if !state.still_holds(index, &entry, guard) {
                return Attempt::Retry;
            }
            debug_assert_eq!(child.ino, slot.ino);
            if freed || child.kind != slot.kind {
                // Linked, yet freed: a stale cache object of a reused
                // number; the reference walk sorts it out.
                return Attempt::Bail;
            }
            if is_last {
                return Attempt::Found(child, attr);
            }
            if child.kind == FileKind::Symlink {
                return Attempt::Bail;
            }
            if child.kind != FileKind::Directory {
                return Attempt::Failed(Errno::ENOTDIR);
            }
            cur = child;
        }
        // The path ended on a directory we stand in (`.`, or no component).
        let a = want_attr.then(|| cur.attr_snapshot());
        let freed = match &a {
            Some(a) => a.freed(),
            None => cur.is_freed(),
        };
        if freed {
            return Attempt::Failed(Errno::ENOENT);
        }
        Attempt::Found(cur, a)
    }

    /// Resolve `comps` from directory `start` lock-free; with `counted`,
    /// add one lookup reference to the final inode; its attributes only
    /// with `want_attr`. `None` when the walk cannot answer lock-free (see
    /// the module doc).
    pub fn walk_rcu(
        &self,
        cred: &Cred,
        start: DirAt,
        comps: &[&[u8]],
        counted: bool,
        want_attr: bool,
    ) -> Option<Result<Resolved>> {
        let guard = crossbeam_epoch::pin();
        for _ in 0..=RCU_WALK_RETRIES {
            match self.walk_rcu_once(cred, start, comps, want_attr, &guard) {
                Attempt::Found(inode, attr) if !counted => {
                    return Some(Ok(Resolved {
                        found: Found::of(inode),
                        attr: attr.map(|a| a.attr(inode.ino, inode.kind)),
                    }));
                }
                Attempt::Found(inode, _) => {
                    // The one reference of a counted walk. The inode cannot
                    // be reclaimed under the guard; it may have lost its
                    // last link (unlinked or renamed over) since
                    // validation, or been freed: then the name is gone
                    // and the walk reads it again (`Meta::still_named`,
                    // the rule of every answer by name) — also when the
                    // inode lives on as an orphan open elsewhere, whose
                    // count of 0 is no answer for a name.
                    let mut m = inode.meta.lock();
                    // Or being evicted (the walk sees FREEING inodes:
                    // `get_rcu`): an evictor that checked the pins before
                    // this `meta` would unhash it with our count. Its claim
                    // precedes its `meta`, so under ours we see FREEING.
                    if !m.still_named() || inode.life.state() != crate::icache::State::Live {
                        drop(m);
                        crate::sync::yield_now();
                        continue;
                    }
                    *m.lookups_mut() += 1;
                    return Some(Ok(Resolved {
                        found: Found::of(inode),
                        attr: want_attr.then(|| inode.attr_locked(&m)),
                    }));
                }
                Attempt::Failed(e) => return Some(Err(e)),
                Attempt::Retry => crate::sync::spin_hint(),
                Attempt::Bail => return None,
            }
        }
        None
    }
}

impl Fs {
    /// Resolve the plain names `comps` from directory `start` without
    /// taking a lock or a reference (the RCU-walk), each step with the
    /// checks of [`lookup`](Self::lookup): search permission, name rules,
    /// `ENOENT`, `ENOTDIR` for a non-directory in the middle. `.` is
    /// understood. Returns the final inode's attributes (not held: use them
    /// as a `stat`), or `None` when the walk cannot answer lock-free — a
    /// symlink in the middle, `..`, a cache miss, or repeated concurrent
    /// changes — and the caller should walk with [`lookup`](Self::lookup) /
    /// [`lookup_counted`](Self::lookup_counted) instead. A final symlink is
    /// returned, not followed.
    pub fn resolve_rcu(
        &self,
        cred: &Cred,
        start: impl Into<DirAt>,
        comps: &[&[u8]],
    ) -> Option<Result<Attr>> {
        let r = self
            .inner
            .walk_rcu(cred, start.into(), comps, false, true)?;
        Some(r.map(|r| r.attr.expect("asked for")))
    }

    /// As [`resolve_rcu`](Self::resolve_rcu), but only the final inode's
    /// number, kind and generation: it reads none of its times and size
    /// (for a directory, the lines every change in it writes), as a walk
    /// to the parent of a name to create or remove needs. Nothing is
    /// held: pass [`Found::at`] to the operation, which fails with
    /// `ENOENT` if the directory was freed meanwhile.
    pub fn resolve_rcu_ino(
        &self,
        cred: &Cred,
        start: impl Into<DirAt>,
        comps: &[&[u8]],
    ) -> Option<Result<Found>> {
        self.resolve_found(cred, start.into(), comps, false)
    }

    /// As [`resolve_rcu_ino`](Self::resolve_rcu_ino), adding one lookup
    /// reference to the final inode (give it back with
    /// [`forget`](Self::forget)).
    pub fn resolve_rcu_counted(
        &self,
        cred: &Cred,
        start: impl Into<DirAt>,
        comps: &[&[u8]],
    ) -> Option<Result<Found>> {
        self.resolve_found(cred, start.into(), comps, true)
    }

    fn resolve_found(
        &self,
        cred: &Cred,
        start: DirAt,
        comps: &[&[u8]],
        counted: bool,
    ) -> Option<Result<Found>> {
        let r = self.inner.walk_rcu(cred, start, comps, counted, false)?;
        Some(r.map(|r| r.found))
    }
}

#[cfg(all(test, lanefs_shuttle))]
mod model {
    use super::*;
    use shuttle::thread;

    /// A stat walk racing a rename, an unlink and a create that may reuse
    /// the freed number: the walk answers the file that was at the name
    /// (same number and generation, still linked) or ENOENT, or steps
    /// aside — never a freed inode, never the new file under the old name.
    /// (Same-directory renames only: the cross-directory rename lock is a
    /// parking_lot mutex, which a model thread must not block on.)
    #[test]
    fn model_walk_vs_rename_unlink() {
        crate::sync::check_random(
            || {
                let fs = Fs::new_in_memory();
                let r = Cred::root();
                let d = fs
                    .mkdir(&r, lanefs_store::ROOT_INO, b"d", 0o755, 0)
                    .unwrap();
                let x = fs.mknod(&r, d.ino, b"x", 0o644, 0, 0).unwrap();
                fs.forget(x.ino, 1);
                // Load the index and cache the inodes: the walk can answer.
                assert!(fs.resolve_rcu(&r, 1, &[b"d", b"x"]).is_some());
                let writer = {
                    let fs = fs.clone();
                    thread::spawn(move || {
                        let r = Cred::root();
                        fs.rename(&r, d.ino, b"x", d.ino, b"y", 0).unwrap();
                        fs.unlink(&r, d.ino, b"y").unwrap();
                        let z = fs.mknod(&r, d.ino, b"x", 0o600, 0, 0).unwrap();
                        fs.forget(z.ino, 1);
                    })
                };
                for name in [&b"x"[..], b"y", b"x"] {
                    match fs.resolve_rcu(&r, 1, &[b"d", name]) {
                        Some(Ok(a)) => {
                            assert_eq!(a.nlink, 1, "walk returned an unlinked inode");
                            let old = a.ino == x.ino && a.generation == x.generation;
                            let new = name == b"x" && a.perm == 0o600;
                            assert!(old || new, "walk returned {a:?}");
                            if a.ino == x.ino && a.generation != x.generation {
                                assert_eq!(a.perm, 0o600);
                            }
                        }
                        Some(Err(e)) => assert_eq!(e, Errno::ENOENT),
                        None => {}
                    }
                }
                writer.join().unwrap();
            },
            crate::sync::model_iterations(),
        );
    }

    /// A counted lookup (FUSE LOOKUP; the path layer's counted walk is the
    /// same `walk_rcu`) racing the unlink of the name's last link while a
    /// handle keeps the file open, so that it lives on as an orphan: the
    /// lookup misses, or answers the file while linked (and counts it) —
    /// never the orphan with a link count of 0. Before, a counted walk
    /// whose `meta` came after an unlink that followed its validation
    /// counted any orphan (`countable_by_name`: linked *or an orphan*) and
    /// returned its attributes with nlink 0.
    #[test]
    fn model_counted_walk_vs_unlink_of_open_file() {
        crate::sync::check_pct(
            || {
                let fs = Fs::new_in_memory();
                let r = Cred::root();
                let flags = libc::O_CREAT | libc::O_RDWR;
                let (f, h, _) = fs
                    .open_at(&r, lanefs_store::ROOT_INO, b"f", flags, 0o644, 0, false)
                    .unwrap();
                // Cached, its directory's index loaded: the lock-free walk
                // answers.
                assert!(fs.resolve_rcu(&r, 1, &[b"f"]).is_some());
                let unlinker = {
                    let fs = fs.clone();
                    thread::spawn(move || {
                        fs.unlink(&Cred::root(), lanefs_store::ROOT_INO, b"f")
                            .unwrap();
                    })
                };
                match fs.lookup_counted(&r, lanefs_store::ROOT_INO, b"f") {
                    Ok(a) => {
                        assert_eq!(a.ino, f.ino);
                        assert_eq!(a.nlink, 1, "a lookup answered an unlinked inode");
                        fs.forget(a.ino, 1);
                    }
                    Err(e) => assert_eq!(e, Errno::ENOENT),
                }
                unlinker.join().unwrap();
                drop(h);
                if let Err(p) = fs.check() {
                    panic!("inconsistent: {p:?}");
                }
            },
            crate::sync::model_iterations(),
            3,
        );
    }
}
