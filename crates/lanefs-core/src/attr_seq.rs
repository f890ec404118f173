//! Attributes readable without `meta`: a per-inode seqlock mirror of the
//! [`Attr`] fields of the inode's record, and the guard around `meta` that
//! republishes it.
//!
//! Locks and atomics:
//! * `MetaLock::mutex` is the inode's `meta` mutex (see `inode`): it
//!   protects the record and the life-cycle fields. Every change of them is
//!   made through a [`MetaGuard`], whose `DerefMut` marks it changed and
//!   whose drop republishes the mirror *before* the mutex is released (and
//!   writes nothing when the attribute words did not change) — so
//!   mirror writers are serialised by `meta`, and call sites stay as they
//!   were (`inode.meta.lock()`).
//! * `AttrSeq::seq` (seqcount): odd while a writer is copying, even
//!   otherwise. Writer: `seq = s+1` (Relaxed), `fence(Release)`, words
//!   (Relaxed), `seq = s+2` (Release). Reader: `s1 = seq` (Acquire; retry
//!   while odd), words (Relaxed), `fence(Acquire)`, `s2 = seq` (Relaxed);
//!   the copy is whole iff `s1 == s2`. The Release fence after the odd
//!   store pairs with the reader's Acquire fence: a reader that saw any
//!   word of a later write sees `s2 != s1`. Every word is an atomic, so a
//!   torn read is a retry, never undefined behaviour.
//! * The mirror is two such groups, each with its own `seq`, on separate
//!   cache lines: the permission group (perm, uid, gid and the `freed`
//!   flag: what the permission check of a lookup reads, as Linux's RCU walk
//!   reads `i_mode`/`i_uid`; with two flags saying whether the record
//!   holds an access ACL or a default ACL (`acl`), so that a check of an
//!   inode without one reads nothing else, and the inode flags (`iflags`:
//!   immutable and append-only decide writes, opens and removals); a lock-free walk learns that an inode is dead
//!   from the inode's own `freed` flag, on its read-mostly header line) and
//!   the rest (times, size, links). A writer bumps only the
//!   groups it changes — both to odd before any word when it changes both
//!   — so creates in a directory do not write what walks through it read.
//!   A whole read checks both sequences.
//!
//! Lock order: none of its own; `meta` keeps its place in the mount's order.

use std::ops::{Deref, DerefMut};

use lanefs_store::{FileKind, Ino, InodeRecord, Timespec, PAGE_SIZE};

use crate::dir_attr::{DirAttrs, DirChanges};
use crate::inode::Meta;
use crate::sync::{fence, AtomicU64, Mutex, MutexGuard, Ordering};
use crate::Attr;

/// Words of the permission group: what a path walk's permission check
/// reads (Linux's RCU walk reads `i_mode`/`i_uid`/`i_gid`), and `freed`.
/// perm (bits 0..16) | freed (bit 16) | access ACL (bit 17) | default
/// ACL (bit 18) | inode flags (bits 24..32: `FS_*_FL`, all below 0x100).
const P_PERM_FREED: usize = 0;
/// uid | gid << 32.
const P_UID_GID: usize = 1;
const PERM_WORDS: usize = 2;
const FREED_BIT: u64 = 1 << 16;
const ACCESS_ACL_BIT: u64 = 1 << 17;
const DEFAULT_ACL_BIT: u64 = 1 << 18;
const IFLAGS_SHIFT: u32 = 24;

/// Words of the other attributes (times, size, links: what changes when a
/// directory's entries change).
const W_GENERATION: usize = 0;
const W_NLINK: usize = 1;
const W_SIZE: usize = 2;
const W_BLOCKS: usize = 3;
const W_ATIME_SEC: usize = 4;
const W_MTIME_SEC: usize = 5;
const W_CTIME_SEC: usize = 6;
const W_BTIME_SEC: usize = 7;
/// atime.nsec | mtime.nsec << 32.
const W_AM_NSEC: usize = 8;
/// ctime.nsec | btime.nsec << 32.
const W_CB_NSEC: usize = 9;
const W_RDEV: usize = 10;
const REST_WORDS: usize = 11;

fn encode_perm(rec: &InodeRecord, freed: bool) -> [u64; PERM_WORDS] {
    let mut w = [0u64; PERM_WORDS];
    w[P_PERM_FREED] = rec.perm as u64
        | if freed { FREED_BIT } else { 0 }
        | u64::from(rec.flags & 0xff) << IFLAGS_SHIFT;
    if !rec.xattrs.is_empty() {
        use crate::acl::{stored, Kind};
        if stored(rec, Kind::Access).is_some() {
            w[P_PERM_FREED] |= ACCESS_ACL_BIT;
        }
        if stored(rec, Kind::Default).is_some() {
            w[P_PERM_FREED] |= DEFAULT_ACL_BIT;
        }
    }
    w[P_UID_GID] = rec.uid as u64 | (rec.gid as u64) << 32;
    w
}

fn encode_rest(rec: &InodeRecord) -> [u64; REST_WORDS] {
    let mut w = [0u64; REST_WORDS];
    w[W_GENERATION] = rec.generation;
    w[W_NLINK] = rec.nlink as u64;
    w[W_SIZE] = rec.size;
    w[W_BLOCKS] = rec.blocks;
    w[W_ATIME_SEC] = rec.atime.sec as u64;
    w[W_MTIME_SEC] = rec.mtime.sec as u64;
    w[W_CTIME_SEC] = rec.ctime.sec as u64;
    w[W_BTIME_SEC] = rec.btime.sec as u64;
    w[W_AM_NSEC] = rec.atime.nsec as u64 | (rec.mtime.nsec as u64) << 32;
    w[W_CB_NSEC] = rec.ctime.nsec as u64 | (rec.btime.nsec as u64) << 32;
    w[W_RDEV] = rec.rdev;
    w
}

fn time(sec: u64, nsec: u64) -> Timespec {
    Timespec {
        sec: sec as i64,
        nsec: nsec as u32,
    }
}

/// A consistent copy of the permission group.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PermSnapshot {
    words: [u64; PERM_WORDS],
}

impl PermSnapshot {
    pub fn freed(&self) -> bool {
        self.words[P_PERM_FREED] & FREED_BIT != 0
    }
    pub fn perm(&self) -> u16 {
        self.words[P_PERM_FREED] as u16
    }
    /// The record holds an access ACL (`acl`).
    pub fn has_acl(&self) -> bool {
        self.words[P_PERM_FREED] & ACCESS_ACL_BIT != 0
    }
    /// The record holds a default ACL (a directory's, `acl`).
    pub fn has_default_acl(&self) -> bool {
        self.words[P_PERM_FREED] & DEFAULT_ACL_BIT != 0
    }
    pub fn uid(&self) -> u32 {
        self.words[P_UID_GID] as u32
    }
    pub fn gid(&self) -> u32 {
        (self.words[P_UID_GID] >> 32) as u32
    }
    /// The inode flags (`FS_*_FL`, `iflags`).
    pub fn iflags(&self) -> u32 {
        (self.words[P_PERM_FREED] >> IFLAGS_SHIFT) as u32 & 0xff
    }
}

/// A consistent copy of the whole mirror.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AttrSnapshot {
    perm: PermSnapshot,
    rest: [u64; REST_WORDS],
}

impl AttrSnapshot {
    pub fn freed(&self) -> bool {
        self.perm.freed()
    }
    pub fn perm(&self) -> u16 {
        self.perm.perm()
    }
    pub fn uid(&self) -> u32 {
        self.perm.uid()
    }
    pub fn gid(&self) -> u32 {
        self.perm.gid()
    }
    pub fn nlink(&self) -> u32 {
        self.rest[W_NLINK] as u32
    }
    pub fn atime(&self) -> Timespec {
        time(self.rest[W_ATIME_SEC], self.rest[W_AM_NSEC] & 0xffff_ffff)
    }
    /// The permission group alone.
    pub fn perm_snapshot(&self) -> &PermSnapshot {
        &self.perm
    }

    /// With a directory's stripe changes (size, times, subdirectories)
    /// folded in (`dir_attr`).
    pub fn folded(mut self, c: DirChanges) -> AttrSnapshot {
        if c.is_empty() {
            return self;
        }
        let w = &mut self.rest;
        let DirAttrs {
            nlink,
            size,
            mtime,
            ctime,
        } = c.applied(DirAttrs {
            nlink: w[W_NLINK] as u32,
            size: w[W_SIZE],
            mtime: time(w[W_MTIME_SEC], w[W_AM_NSEC] >> 32),
            ctime: time(w[W_CTIME_SEC], w[W_CB_NSEC] & 0xffff_ffff),
        });
        w[W_NLINK] = nlink as u64;
        w[W_SIZE] = size;
        w[W_MTIME_SEC] = mtime.sec as u64;
        w[W_CTIME_SEC] = ctime.sec as u64;
        w[W_AM_NSEC] = (w[W_AM_NSEC] & 0xffff_ffff) | (mtime.nsec as u64) << 32;
        w[W_CB_NSEC] = (w[W_CB_NSEC] & !0xffff_ffff) | ctime.nsec as u64;
        self
    }

    /// With a regular file's data-side times `(mtime, dctime)` folded in
    /// (`pcache::fold_times`).
    pub fn with_data_times(mut self, data: (Timespec, Timespec)) -> AttrSnapshot {
        let w = &mut self.rest;
        let record_ctime = time(w[W_CTIME_SEC], w[W_CB_NSEC] & 0xffff_ffff);
        let (mtime, ctime) = crate::pcache::fold_times(record_ctime, data);
        w[W_MTIME_SEC] = mtime.sec as u64;
        w[W_CTIME_SEC] = ctime.sec as u64;
        w[W_AM_NSEC] = (w[W_AM_NSEC] & 0xffff_ffff) | (mtime.nsec as u64) << 32;
        w[W_CB_NSEC] = (w[W_CB_NSEC] & !0xffff_ffff) | ctime.nsec as u64;
        self
    }

    /// The attributes, as `Attr::from_record` makes them.
    pub fn attr(&self, ino: Ino, kind: FileKind) -> Attr {
        let w = &self.rest;
        Attr {
            ino,
            generation: w[W_GENERATION],
            kind,
            perm: self.perm(),
            nlink: self.nlink(),
            uid: self.uid(),
            gid: self.gid(),
            size: w[W_SIZE],
            // Saturating: a corrupt record from the store must not overflow.
            blocks: w[W_BLOCKS].saturating_mul(PAGE_SIZE as u64 / 512),
            atime: time(w[W_ATIME_SEC], w[W_AM_NSEC] & 0xffff_ffff),
            mtime: time(w[W_MTIME_SEC], w[W_AM_NSEC] >> 32),
            ctime: time(w[W_CTIME_SEC], w[W_CB_NSEC] & 0xffff_ffff),
            btime: time(w[W_BTIME_SEC], w[W_CB_NSEC] >> 32),
            rdev: w[W_RDEV],
            blksize: PAGE_SIZE as u32,
        }
    }
}

/// One seqlock-protected group of words, alone on its cache line(s).
#[repr(align(64))]
struct SeqWords<const N: usize> {
    seq: AtomicU64,
    words: [AtomicU64; N],
}

impl<const N: usize> SeqWords<N> {
    fn new(w: [u64; N]) -> Self {
        SeqWords {
            seq: AtomicU64::new(0),
            words: std::array::from_fn(|i| AtomicU64::new(w[i])),
        }
    }

    /// Only the writer stores words, so its Relaxed loads see its own last
    /// values.
    fn holds(&self, w: &[u64; N]) -> bool {
        self.words
            .iter()
            .zip(w)
            .all(|(slot, v)| slot.load(Ordering::Relaxed) == *v)
    }

    /// Open a write: the sequence goes odd. Returns the even value.
    fn begin(&self) -> u64 {
        let s = self.seq.load(Ordering::Relaxed);
        debug_assert!(s & 1 == 0, "two mirror writers at once");
        self.seq.store(s + 1, Ordering::Relaxed);
        s
    }

    fn store(&self, w: [u64; N]) {
        for (slot, v) in self.words.iter().zip(w) {
            slot.store(v, Ordering::Relaxed);
        }
    }

    fn end(&self, s: u64) {
        self.seq.store(s + 2, Ordering::Release);
    }

    fn load(&self) -> [u64; N] {
        std::array::from_fn(|i| self.words[i].load(Ordering::Relaxed))
    }
}

/// The mirror: two seqlocked groups on separate lines, so that a change of
/// times, size or links (every create or unlink in a directory) does not
/// write the line a walk through that directory reads for its permission
/// check.
pub(crate) struct AttrSeq {
    perm: SeqWords<PERM_WORDS>,
    rest: SeqWords<REST_WORDS>,
}

impl AttrSeq {
    fn new(rec: &InodeRecord, freed: bool) -> AttrSeq {
        AttrSeq {
            perm: SeqWords::new(encode_perm(rec, freed)),
            rest: SeqWords::new(encode_rest(rec)),
        }
    }

    /// Publish `rec`. Callers are serialised by `meta` (the only caller is
    /// [`MetaGuard`]'s drop, which runs under it). Only the groups whose
    /// words changed are written: a change of life-cycle fields alone
    /// (lookup counts, dirty) writes nothing. When both change, both
    /// sequences go odd before any word is stored, so a whole read sees
    /// both changes or neither.
    fn publish(&self, rec: &InodeRecord, freed: bool) {
        let (p, r) = (encode_perm(rec, freed), encode_rest(rec));
        let (p_changed, r_changed) = (!self.perm.holds(&p), !self.rest.holds(&r));
        if !p_changed && !r_changed {
            return;
        }
        let sp = p_changed.then(|| self.perm.begin());
        let sr = r_changed.then(|| self.rest.begin());
        fence(Ordering::Release);
        if p_changed {
            self.perm.store(p);
        }
        if r_changed {
            self.rest.store(r);
        }
        if let Some(s) = sp {
            self.perm.end(s);
        }
        if let Some(s) = sr {
            self.rest.end(s);
        }
    }

    /// A whole copy, retrying while a writer is mid-copy.
    pub fn read(&self) -> AttrSnapshot {
        loop {
            let sp = self.perm.seq.load(Ordering::Acquire);
            let sr = self.rest.seq.load(Ordering::Acquire);
            if (sp | sr) & 1 == 0 {
                let p = self.perm.load();
                let r = self.rest.load();
                fence(Ordering::Acquire);
                if self.perm.seq.load(Ordering::Relaxed) == sp
                    && self.rest.seq.load(Ordering::Relaxed) == sr
                {
                    return AttrSnapshot {
                        perm: PermSnapshot { words: p },
                        rest: r,
                    };
                }
            }
            crate::sync::spin_hint();
        }
    }

    /// The permission group only.
    pub fn read_perm(&self) -> PermSnapshot {
        loop {
            let s = self.perm.seq.load(Ordering::Acquire);
            if s & 1 == 0 {
                let words = self.perm.load();
                fence(Ordering::Acquire);
                if self.perm.seq.load(Ordering::Relaxed) == s {
                    return PermSnapshot { words };
                }
            }
            crate::sync::spin_hint();
        }
    }
}

/// An inode's `meta` mutex with its attribute mirror.
pub(crate) struct MetaLock {
    mutex: Mutex<Meta>,
    attr: AttrSeq,
}

impl MetaLock {
    pub fn new(meta: Meta) -> MetaLock {
        MetaLock {
            attr: AttrSeq::new(&meta.rec, meta.freed),
            mutex: Mutex::new(meta),
        }
    }

    pub fn lock(&self) -> MetaGuard<'_> {
        let guard = self.mutex.lock();
        held::enter();
        MetaGuard {
            guard,
            attr: &self.attr,
            changed: false,
        }
    }

    /// The mirror, without the lock.
    #[inline]
    pub fn attr(&self) -> AttrSnapshot {
        self.attr.read()
    }

    /// The mirror's permission group (mode, owner, `freed`), without the
    /// lock and without reading the line times and sizes live on.
    #[inline]
    pub fn perm_attr(&self) -> PermSnapshot {
        self.attr.read_perm()
    }

    /// How many times the mirror's times, size and links were republished
    /// (tests: a change that writes none of them leaves it alone).
    #[cfg(test)]
    pub fn rest_writes(&self) -> u64 {
        self.attr.rest.seq.load(Ordering::Relaxed) / 2
    }
}

/// `meta` held; republishes the mirror on drop if it was borrowed mutably.
pub(crate) struct MetaGuard<'a> {
    guard: MutexGuard<'a, Meta>,
    attr: &'a AttrSeq,
    changed: bool,
}

impl Deref for MetaGuard<'_> {
    type Target = Meta;
    fn deref(&self) -> &Meta {
        &self.guard
    }
}

impl DerefMut for MetaGuard<'_> {
    fn deref_mut(&mut self) -> &mut Meta {
        self.changed = true;
        &mut self.guard
    }
}

impl MetaGuard<'_> {
    /// The lookup count, writable without republishing the mirror (it is
    /// not in the mirror): opening, closing, looking up and forgetting an
    /// inode write only `meta`'s lock word and this, no mirror line that
    /// lock-free readers load.
    pub fn lookups_mut(&mut self) -> &mut u64 {
        &mut self.guard.lookups
    }

    /// A directory's subdirectory links granted to its stripes
    /// (`dir_attr`), as [`lookups_mut`](Self::lookups_mut): a grant
    /// writes no mirror line.
    pub fn links_granted_mut(&mut self) -> &mut i64 {
        &mut self.guard.links_granted
    }
}

impl Drop for MetaGuard<'_> {
    fn drop(&mut self) {
        if self.changed {
            self.attr.publish(&self.guard.rec, self.guard.freed);
        }
        held::leave();
    }
}

/// How many `meta` locks this thread holds, in debug builds, so that code
/// that must not run under any `meta` (an icache insert or load: shard
/// locks come before `meta` in the lock order) can assert it.
mod held {
    #[cfg(all(debug_assertions, not(lanefs_shuttle)))]
    thread_local!(static HELD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) });
    // Shuttle runs its tasks on one OS thread: a count per task, or one
    // task's `meta` held while another runs trips the other's
    // lock-order assertions.
    #[cfg(all(debug_assertions, lanefs_shuttle))]
    shuttle::thread_local!(static HELD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) });

    #[inline]
    pub(super) fn enter() {
        #[cfg(debug_assertions)]
        HELD.with(|h| h.set(h.get() + 1));
    }

    #[inline]
    pub(super) fn leave() {
        #[cfg(debug_assertions)]
        HELD.with(|h| {
            debug_assert!(h.get() > 0, "meta released more often than taken");
            h.set(h.get() - 1)
        });
    }

    /// `meta` locks held by this thread (always 0 in release builds).
    pub(crate) fn count() -> usize {
        #[cfg(debug_assertions)]
        return HELD.with(|h| h.get());
        #[cfg(not(debug_assertions))]
        0
    }
}

/// `meta` locks held by this thread (debug builds; 0 in release builds).
pub(crate) fn metas_held() -> usize {
    held::count()
}

#[cfg(all(test, not(lanefs_shuttle)))]
mod tests {
    use super::*;

    fn rec() -> InodeRecord {
        InodeRecord {
            ino: 7,
            generation: 9,
            perm: 0o4755,
            uid: 1000,
            gid: 1001,
            nlink: 3,
            size: 12345,
            blocks: 4,
            atime: Timespec { sec: -5, nsec: 1 },
            mtime: Timespec {
                sec: 6,
                nsec: 999_999_999,
            },
            ctime: Timespec { sec: 7, nsec: 3 },
            btime: Timespec { sec: 8, nsec: 4 },
            rdev: 0x0103,
            next_cookie: 3,
            ..InodeRecord::default()
        }
    }

    fn meta(rec: InodeRecord) -> Meta {
        Meta {
            rec,
            dirty: false,
            lookups: 0,
            freed: false,
            links_granted: 0,
            orphan_slot: std::cell::Cell::new(None),
            linkable: false,
        }
    }

    #[test]
    fn mirror_round_trips_every_attr_field() {
        let l = MetaLock::new(meta(rec()));
        let snap = l.attr();
        assert_eq!(snap.attr(7, FileKind::Regular), Attr::from_record(&rec()));
        assert!(!snap.freed());
    }

    #[test]
    fn a_change_through_the_guard_is_republished_at_unlock() {
        let l = MetaLock::new(meta(rec()));
        {
            let mut m = l.lock();
            m.rec.perm = 0o600;
            m.rec.size = 1;
            m.freed = true;
            // Not yet published while held.
            assert_eq!(l.attr().perm(), 0o4755);
        }
        let snap = l.attr();
        assert_eq!(snap.perm(), 0o600);
        assert_eq!(snap.attr(7, FileKind::Regular).size, 1);
        assert!(snap.freed());
    }

    /// The point of two groups: a create in a directory (times, size)
    /// leaves the line a walk's permission check reads untouched.
    #[test]
    fn a_times_and_size_change_leaves_the_permission_group_untouched() {
        let l = MetaLock::new(meta(rec()));
        let perm_seq = l.attr.perm.seq.load(Ordering::Relaxed);
        {
            let mut m = l.lock();
            m.rec.mtime.sec += 1;
            m.rec.size += 20;
        }
        assert_eq!(l.attr.perm.seq.load(Ordering::Relaxed), perm_seq);
        assert_eq!(l.attr.rest.seq.load(Ordering::Relaxed), 2);
        assert_eq!(l.perm_attr().perm(), 0o4755);
        {
            let mut m = l.lock();
            m.rec.perm = 0o700;
        }
        assert_eq!(l.attr.perm.seq.load(Ordering::Relaxed), perm_seq + 2);
        assert_eq!(l.perm_attr().perm(), 0o700);
    }
}

#[cfg(all(test, lanefs_shuttle))]
mod model {
    use super::*;
    use shuttle::thread;

    /// A reader racing writers sees one whole record, never a mix: every
    /// write sets size == uid == gid == nlink, so a torn copy would differ.
    #[test]
    fn model_seqlock_reader_never_sees_a_torn_record() {
        crate::sync::check_random(
            || {
                let mut r = InodeRecord {
                    ino: 2,
                    generation: 1,
                    perm: 0o644,
                    next_cookie: 3,
                    ..InodeRecord::default()
                };
                r.nlink = 0;
                let l = crate::sync::Arc::new(MetaLock::new(Meta {
                    rec: r,
                    dirty: false,
                    lookups: 0,
                    freed: false,
                    links_granted: 0,
                    orphan_slot: std::cell::Cell::new(None),
                    linkable: false,
                }));
                let writers: Vec<_> = (1..=2u32)
                    .map(|v| {
                        let l = l.clone();
                        thread::spawn(move || {
                            let mut m = l.lock();
                            m.rec.size = v as u64;
                            m.rec.uid = v;
                            m.rec.gid = v;
                            m.rec.nlink = v;
                        })
                    })
                    .collect();
                for _ in 0..3 {
                    let s = l.attr();
                    let a = s.attr(2, FileKind::Regular);
                    assert!(a.size == a.uid as u64 && a.uid == a.gid && a.gid == a.nlink);
                }
                for w in writers {
                    w.join().unwrap();
                }
                assert_ne!(l.attr().uid(), 0);
            },
            crate::sync::model_iterations(),
        );
    }
}
