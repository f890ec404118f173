//! The in-memory inode: a cached copy of an [`InodeRecord`] plus the
//! per-kind body (page map or directory index) and the reference counts that
//! decide its life.
//!
//! Inode locking rules:
//! * `meta` (mutex) protects the record (attributes, link count, size,
//!   xattrs, symlink target), `dirty`, `lookups` and `freed`.
//!   A directory's link count, size, mtime and ctime are its record's
//!   (the base) plus what changes of names recorded in its stripes since
//!   the last fold (`dir_attr`); read them with [`Inode::attr_snapshot`]
//!   or [`Inode::attr_locked`], never from `rec` alone. `links_granted`
//!   (a directory's subdirectory links granted to its stripes) is under
//!   `meta` too, outside the mirror.
//!   Releasing it after a change republishes the lock-free attribute
//!   mirror (a seqlock, see `attr_seq`) that getattr, lookup and the
//!   permission check of a walk read instead of taking it. It is
//!   a leaf lock except that the icache may take it with `try_lock` while
//!   holding a shard lock (eviction never blocks on it).
//! * `body` is the data of a regular file (`FileData`, whose data lock is
//!   an `RwLock<PageMap>`; reads may copy cached pages without it, see
//!   `pcache`) or a directory's entry state (`DirState`: its striped entry
//!   lock, lookups take none, see `dir`); either lock is taken
//!   before `meta` whenever both are held.
//!   A regular file's mtime is its data-side mtime (`pcache::FileData`,
//!   under its data lock), and its ctime `max(rec.ctime, dctime)`: a pure
//!   overwrite (`file::write_data`) changes them without `meta`, and the
//!   record's copy catches up at writeback (`times_dirty`). Read them with
//!   [`Inode::attr_snapshot`] or [`Inode::attr_locked`] too.
//! * `atime_stale` (Relaxed): set whenever mtime or ctime changes under
//!   `meta` (stored only if not already set, so that repeated changes do
//!   not write the line reads load), cleared when atime is brought past
//!   them — lets reads skip `meta` in the common relatime case. A stale
//!   `false` only delays an atime update. A pure overwrite sets the
//!   data-side flag instead (`pcache`); reads check both. Not used for a
//!   directory: the changes of its entries move its times in its stripes
//!   (`dir_attr`), and a listing compares atime with them lock-free
//!   instead.
//!
//! * `opens` (on a line of its own): the global part of the open count and
//!   its state (sealed, sealing, review), see `opens`: the rest of the count
//!   is in the file system's per-lane caches (`FsInner::opens`), where an
//!   open adds +1 on its lane ([`Opens::raise`](crate::opens::Opens::raise),
//!   which fails once sealed) and a close −1 on its own, writing nothing
//!   shared. An open is made by a caller that holds a counted reference or
//!   another handle, or from the cache under an epoch guard with no
//!   reference at all (`open_rcu`); a creating or `O_TMPFILE` open sets the
//!   count before the inode is hashed (`NewNode::opens`, adopted by its
//!   handle: `FsInner::open_inode`'s `born_open`), so that it is open before
//!   its name (or, unnamed, its number) is visible.
//!   Sealed at 0 ([`Opens::seal`](crate::opens::Opens::seal), exact: it
//!   reads the inode's slot in every used lane and gathers the deltas it
//!   finds) under `meta` by every decision
//!   that must not meet a new handle: a free (`note_unlinked` when the last
//!   link goes, or `maybe_free`) and an eviction (`evict_claimed`, which
//!   unseals if it gives the inode back). An open that raised the count
//!   first makes the seal fail; one that comes after fails, with `ENOENT`
//!   on the counted path, or by falling back to it from the cache (which
//!   waits out the eviction and loads the file again). So no handle is ever
//!   made to a freed or evicted inode. A seal that fails leaves the count's
//!   review bit set, and the closes review under `meta`
//!   (`FsInner::review_closed`): the one that finds the sum 0 frees the
//!   inode if unlinked, or offers it back to the LRU. Opens and closes of
//!   one file, or an open beside a write, a rename, a link or a truncate of
//!   it, so share no written line.
//!   An unlinked inode is sealed or recorded as an orphan in the section
//!   that took its last link (`note_unlinked`); an `O_TMPFILE` inode,
//!   born open with no link, is recorded in the section that commits its
//!   record, before it is born (`tmpfile_in`).
//!   A handle holds its inode by pointer, not by `Arc`: an inode is
//!   unhashed (and its cache `Arc` dropped through the epoch) only once
//!   sealed, so the count keeps the memory; a close pins the epoch before
//!   it lowers the count and uses the inode after it only under that pin.
//!
//! * `life` (the icache's state word, see `icache::life`): cache state
//!   LIVE/FREEING/DEAD, counted references and LRU membership; lock-free.
//!
//! Life: an inode is freed (record, data, number) when `nlink == 0`,
//! `lookups == 0` and `opens == 0`, all checked and `freed` set under `meta`
//! — so exactly one thread frees it; it is then `DEAD` and unhashed before
//! the store may reuse its number. It may be evicted from the cache when its
//! `life` is LIVE with no counted references (claimed FREEING by CAS), and
//! then, under `meta`, `lookups == opens == 0`; it is written back before it
//! leaves the hash.

use crate::sync::{AtomicBool, AtomicU64, Ordering};
use std::cell::Cell;

use lanefs_store::{FileKind, Ino, InodeRecord};

use crate::attr_seq::{AttrSnapshot, MetaLock};
use crate::Attr;

use crate::dir::DirState;
use crate::icache::Life;
use crate::opens::OpenCount;
use crate::orphan::OrphanSlot;
use crate::pcache::FileData;

/// Mutable state of an inode, under `Inode::meta`.
pub(crate) struct Meta {
    pub rec: InodeRecord,
    /// `rec` differs from the store's copy.
    pub dirty: bool,
    /// Lookup references (FUSE lookup counts).
    pub lookups: u64,
    /// Storage released; the inode is dead.
    pub freed: bool,
    /// A directory's subdirectory links granted to the stripes of its
    /// loaded index: Σ over stripes of `subdirs + room`, plus reservations
    /// in flight (`dir_attr`). `rec.nlink + links_granted ≤ LINK_MAX`.
    /// Negative when subdirectories counted in `rec.nlink` were removed
    /// since the last fold (`subdirs` below 0, their links now in rooms).
    /// Not in the mirror (changed through `MetaGuard::links_granted_mut`).
    pub links_granted: i64,
    /// Where the orphan table records this inode while it is unlinked but
    /// alive. A `Cell` so that `note_unlinked` can fill it through the
    /// `&Meta` its callers pass; only ever touched under `meta`.
    pub orphan_slot: Cell<Option<OrphanSlot>>,
    /// Made by `O_TMPFILE` without `O_EXCL` and not linked yet: a link
    /// may give it its first name although its link count is 0 (Linux's
    /// `I_LINKABLE`).
    pub linkable: bool,
}

impl Meta {
    /// Whether an inode a lookup found by a name may be answered for that
    /// name now (under `meta`, after the name was validated): not freed,
    /// and linked. The one rule of every answer by name — the reference
    /// lookup (`FsInner::lookup`, `..` included), the lock-free counted
    /// walk (`walk_rcu`) and an open of a name that counts a lookup
    /// (`FsInner::open_inode`): otherwise the name was unlinked (or
    /// renamed over) since it was read, and the caller reads it again
    /// (the entry went first: unlinks and renames move or remove it before
    /// they take the count down, so the next read misses it or finds what
    /// replaced it).
    ///
    /// Not linked is never answered, even for an orphan kept open
    /// elsewhere: a name resolves to a linked inode or to nothing (an
    /// unlinked inode is unreachable by name on Linux), and attributes
    /// with a link count of 0 paired with a name are an answer no serial
    /// order gives. Counting one whose last link went while nothing pinned
    /// it was worse: the unlink sealed its open count and recorded no
    /// orphan (`note_unlinked`), so counted it lived on unlinked, not in
    /// the orphan table (`check`: "leaked") and unopenable by its holder.
    pub fn still_named(&self) -> bool {
        !self.freed && self.rec.nlink > 0
    }
}

/// Starts on a line of its own (`align(64)`): a regular file's data side
/// holds words every write stores (`pcache`), which must not share a line
/// with the inode's read-mostly header (`ino`, `kind`, `generation`,
/// `parent`, `born`), read by every lock-free walk and open. The padding
/// costs nothing: the inode's size stays 896 bytes.
// Shuttle's model atomics make `FileData` large in model builds only.
#[cfg_attr(lanefs_shuttle, allow(clippy::large_enum_variant))]
#[repr(align(64))]
pub(crate) enum Body {
    File(FileData),
    Dir(DirState),
    Other,
}

/// A value alone on its 64-byte cache line (the granularity at which the
/// conflict audit counts sharing; `crossbeam_utils::CachePadded` pads to
/// 128 bytes on x86-64 for the adjacent-line prefetcher, which would cost
/// every cached inode twice as much).
#[repr(align(64))]
pub(crate) struct OwnLine<T>(pub T);

impl<T> std::ops::Deref for OwnLine<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Field layout is by who writes what: `life` (written by every counted
/// reference), `atime_stale` (by every change of the times) and `opens`
/// (by every open and close) each on a line of their own, so that a lock-free walk or read, which reads the
/// attribute mirror, the kind and the body, shares no line with them.
pub(crate) struct Inode {
    pub ino: Ino,
    pub kind: FileKind,
    /// The record's generation, fixed for the inode's life (a reused
    /// number gets a new one): lets a caller holding no reference check
    /// that a number still names the inode it found (`DirAt`).
    pub generation: u64,
    /// A directory's parent: a copy of `rec.parent`, stored under `meta`
    /// and the rename lock whenever a rename moves the directory, so that
    /// `is_ancestor` (under the rename lock, where it cannot change) and
    /// the `..` of a listing read it without `meta`.
    pub parent: AtomicU64,
    /// Named by its creator: `false` for a new inode from its allocation
    /// (`FsInner::alloc_inode`, which hashes it before any lock is taken)
    /// until the create, rename (whiteout) or `O_TMPFILE` open that made
    /// it has linked it (or made it an orphan); a loaded inode is born. An
    /// unborn inode is not a file yet (its creator may still discard it),
    /// so a caller that reaches its number by any other way (one it kept
    /// while that number was freed and reused) misses it: `iget` answers
    /// `ENOENT` and `iget_rcu` nothing, so it is never linked, created in,
    /// opened or changed by number before it is named. Stored (Release)
    /// once, by the creator under the inode's `meta` while it still holds
    /// the directory's stripe; loaded Acquire. Written once, so it shares
    /// the read-mostly line of the fields above.
    pub born: AtomicBool,
    /// Freed (or its creation discarded): `Meta::freed`, stored (Release)
    /// once, under `meta`, where that is set; loaded Acquire by lock-free
    /// walks ([`is_freed`](Self::is_freed)), which so tell a stale cache
    /// object without reading a seqlocked group of the mirror: a walk by a
    /// caller whose search needs no mode bits (root) then reads no line a
    /// `chmod` writes. Written once: it shares the read-mostly line.
    freed: AtomicBool,
    /// The LRU's second-chance hint (Linux's `I_REFERENCED`), Relaxed: set
    /// by lock-free lookups when clear, cleared by the evictor; a hint,
    /// ordered by nothing ([`mark_referenced`](Self::mark_referenced)).
    /// Written at most once per eviction round, so it shares the line a
    /// walk reads anyway.
    referenced: AtomicBool,
    pub meta: MetaLock,
    pub body: Body,
    pub atime_stale: OwnLine<AtomicBool>,
    /// The global part of the open count and its seal (module doc,
    /// `opens`); the rest is in the lanes' caches (`FsInner::opens`).
    pub opens: OwnLine<OpenCount>,
    /// Cache life cycle: state, counted references, LRU membership.
    pub life: OwnLine<Life>,
}

impl Inode {
    /// Whether the inode's creator has named it (see `born`).
    #[inline]
    pub fn is_born(&self) -> bool {
        self.born.load(Ordering::Acquire)
    }

    /// The creator named it (linked it, or made it an orphan): from now on
    /// it is found by number. Called once, under `meta`.
    pub fn mark_born(&self) {
        self.born.store(true, Ordering::Release);
    }

    /// Whether the inode was freed (see `freed`).
    #[inline]
    pub fn is_freed(&self) -> bool {
        self.freed.load(Ordering::Acquire)
    }

    /// Mark the inode freed, in the caller's `meta` section, and let its
    /// extended attributes and symlink target go: nothing reads a freed
    /// inode's (`xattr` and `readlink` answer `ENOENT`), and the inode's
    /// memory may outlive the free by a while — its LRU entry waits for
    /// its note's batch (`InodeLru::note_freed`) or, if the note missed,
    /// among the dead, up to as many as there are cached inodes
    /// (`FsInner::purge_dead_lru`), and its hash node an epoch. Kept, each
    /// waiting inode held up to 256 KiB of values or a 4 KiB target.
    pub fn mark_freed(&self, m: &mut Meta) {
        m.freed = true;
        self.freed.store(true, Ordering::Release);
        m.rec.symlink = Vec::new();
        if !m.rec.xattrs.is_empty() {
            let had_privs = crate::perm::has_privs(&m.rec);
            m.rec.xattrs = Vec::new();
            self.note_privs(had_privs, &m.rec);
        }
    }

    /// Note a lock-free lookup of this inode for the LRU (Linux's
    /// `I_REFERENCED`): lock-free walks take no reference, so without this
    /// an inode only ever reached by them — a directory every path goes
    /// through — would age in the LRU like one nobody uses. Writes only
    /// when the evictor has cleared the hint since (once per eviction
    /// round), so walks through a hot directory share its line read-only.
    #[inline]
    pub fn mark_referenced(&self) {
        if !self.referenced.load(Ordering::Relaxed) {
            self.referenced.store(true, Ordering::Relaxed);
        }
    }

    /// Clear the hint; whether it was set (the evictor's second chance).
    pub fn take_referenced(&self) -> bool {
        self.referenced.load(Ordering::Relaxed) && self.referenced.swap(false, Ordering::Relaxed)
    }

    /// Sealed: a free or an eviction was decided, no handle may be made
    /// (`opens`).
    #[inline]
    pub fn opens_sealed(&self) -> bool {
        self.opens.is_sealed()
    }

    /// An inode for `rec`; `dirty` when the store does not have `rec` yet.
    pub fn new(rec: InodeRecord, dirty: bool) -> Inode {
        let body = match rec.kind {
            FileKind::Regular => Body::File(FileData::with_attrs(
                rec.size,
                rec.blocks == 0,
                rec.mtime,
                rec.ctime,
                false,
                crate::perm::has_privs(&rec),
            )),
            FileKind::Directory => Body::Dir(DirState::default()),
            _ => Body::Other,
        };
        let atime_stale = crate::types::relatime_due(rec.atime, rec.mtime, rec.ctime);
        Inode {
            ino: rec.ino,
            kind: rec.kind,
            generation: rec.generation,
            parent: AtomicU64::new(rec.parent),
            born: AtomicBool::new(true),
            freed: AtomicBool::new(false),
            // A new or newly loaded inode starts unreferenced (its load or
            // create put it at the LRU's tail already).
            referenced: AtomicBool::new(false),
            meta: MetaLock::new(Meta {
                rec,
                dirty,
                lookups: 0,
                freed: false,
                links_granted: 0,
                orphan_slot: Cell::new(None),
                linkable: false,
            }),
            body,
            atime_stale: OwnLine(AtomicBool::new(atime_stale)),
            opens: OwnLine(OpenCount::new(0)),
            // The loader's or creator's reference.
            life: OwnLine(Life::new_live(1)),
        }
    }

    /// The whole attribute mirror read lock-free, a directory's with its
    /// stripes' link count, size and time changes folded in (`dir_attr`),
    /// a regular file's with its data-side times (`pcache`).
    #[inline]
    pub fn attr_snapshot(&self) -> AttrSnapshot {
        match &self.body {
            Body::Dir(d) => {
                let (a, c) = d.attr_snapshot(|| self.meta.attr());
                a.folded(c)
            }
            Body::File(d) => self.meta.attr().with_data_times(d.times()),
            Body::Other => self.meta.attr(),
        }
    }

    /// The attributes from the record under `meta` (held by the caller as
    /// `m`), a directory's with its stripes' changes folded in, a regular
    /// file's with its data-side times (read lock-free: no change section
    /// takes `meta`).
    #[inline]
    pub fn attr_locked(&self, m: &Meta) -> Attr {
        let mut a = Attr::from_record(&m.rec);
        match &self.body {
            Body::Dir(d) => d.attr_snapshot(|| ()).1.apply_attr(&mut a),
            Body::File(d) => (a.mtime, a.ctime) = crate::pcache::fold_times(a.ctime, d.times()),
            Body::Other => {}
        }
        a
    }

    /// After a change of a regular file's mode, owner or xattrs (under
    /// `meta`; `had`: [`has_privs`](crate::perm::has_privs) of the record
    /// before, `rec`: after): keep its privilege hint equal to the record's
    /// (`pcache`). Touches the hint only when that changed, so a chmod that
    /// gives or takes no privilege writes and reads nothing of the data side.
    pub fn note_privs(&self, had: bool, rec: &lanefs_store::InodeRecord) {
        let has = crate::perm::has_privs(rec);
        if let (Body::File(d), true) = (&self.body, has != had) {
            d.set_privs(has);
        }
    }

    /// Permission check from the mirror, without `meta` (lookup hot path)
    /// unless the inode has an access ACL the check must read
    /// (`perm::permission_snap`): call holding no `meta`.
    /// Racing a chmod/chown, it sees the old or the new owner and mode.
    pub fn permission_unlocked(&self, cred: &crate::Cred, mask: u32) -> lanefs_store::Result<()> {
        if cred.is_root()
            && mask & crate::MAY_WRITE == 0
            && (mask & crate::MAY_EXEC == 0 || self.kind == FileKind::Directory)
        {
            return Ok(());
        }
        let a = self.meta.perm_attr();
        crate::perm::permission_snap(cred, self, &a, mask)
    }

    /// [`permission_unlocked`](Self::permission_unlocked) without any
    /// lock: `None` when the answer needs the inode's access ACL (the
    /// lock-free walk then hands over to the reference walk, as Linux's
    /// RCU walk does on `-ECHILD` from `get_inode_acl`).
    pub fn permission_rcu(
        &self,
        cred: &crate::Cred,
        mask: u32,
    ) -> Option<lanefs_store::Result<()>> {
        if cred.is_root()
            && mask & crate::MAY_WRITE == 0
            && (mask & crate::MAY_EXEC == 0 || self.kind == FileKind::Directory)
        {
            return Some(Ok(()));
        }
        let a = self.meta.perm_attr();
        if let Err(e) = crate::iflags::may_write(a.iflags(), mask) {
            return Some(Err(e));
        }
        if a.has_acl() && crate::perm::acl_may_decide(cred, &a, mask) {
            return None;
        }
        Some(crate::perm::permission_of(
            cred,
            self.kind,
            a.perm(),
            a.uid(),
            a.gid(),
            mask,
        ))
    }
}
#[cfg(all(test, not(lanefs_shuttle)))]
mod layout_tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The read-mostly header shares no line with the data side or the
    /// written words (`Body`'s doc), and the padding did not grow the inode
    /// (a size class up costs every cached inode).
    #[test]
    fn the_header_has_a_line_of_its_own() {
        let line = |off: usize| off / 64;
        let header = [
            offset_of!(Inode, ino),
            offset_of!(Inode, kind),
            offset_of!(Inode, generation),
            offset_of!(Inode, parent),
            offset_of!(Inode, born),
            offset_of!(Inode, freed),
            offset_of!(Inode, referenced),
        ];
        let first = line(header[0]);
        assert!(header.iter().all(|o| line(*o) == first), "{header:?}");
        let body = offset_of!(Inode, body);
        let body_lines = line(body)..line(body + size_of::<Body>() - 1) + 1;
        assert!(!body_lines.contains(&first), "header on a line of the body");
        for written in [
            offset_of!(Inode, atime_stale),
            offset_of!(Inode, opens),
            offset_of!(Inode, life),
        ] {
            assert_ne!(line(written), first);
        }
        assert!(
            size_of::<Inode>() <= 896,
            "inode grew: {}",
            size_of::<Inode>()
        );
    }
}
