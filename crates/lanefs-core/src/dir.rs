//! Directory index: the in-memory map of one directory's entries, with
//! lock-free lookups and listing.
//!
//! A directory inode's `Body::Dir` holds a [`DirState`]: the directory's
//! change lock, an epoch-protected pointer to the loaded [`DirIndex`] (null
//! until loaded; set back to null by a shrink or when the directory is
//! freed). Entries are written through
//! to the store, so dropping an index loses nothing.
//!
//! Locks and atomics:
//! * `DirState::change` (mutex, the directory's *entry lock* of the mount's
//!   lock order): held by every change of entries, by loading and by
//!   dropping the index. Lookups and listings never take it.
//! * `DirState::index` (`AtomicPtr`): swapped only under `change`; stored
//!   Release, loaded Acquire by readers inside an epoch guard. An index
//!   taken out is freed through `defer` (after every guard that could have
//!   loaded it is gone); at the directory's own drop it is freed at once
//!   (nobody can reach a dropped inode).
//! * Entry validation (no directory-wide sequence): a lock-free reader
//!   that found an entry and then the inode it names checks that the same
//!   node still holds the name in the same installed index
//!   ([`DirState::still_holds`]); nodes are never relinked once unlinked
//!   and not reused under the reader's guard, so the entry stayed linked in
//!   between and the inode's number was not freed and reused. This is
//!   Linux's per-dentry `d_seq` rather than a per-directory count: removing
//!   one name in a directory does not make walks through other names of it
//!   retry (the conflict audit found the old directory-wide count written
//!   by every removal and read by every walk through the directory).
//! * Inside a [`DirIndex`]: a [`NameTable`] (`dir_hash`), a hash trie of
//!   immutable nodes with lock-free lookups; its one writer is the holder
//!   of `change`. A chain that grows past a few nodes splits into a
//!   sub-level (copying only that chain), so no change ever copies the
//!   whole directory.
//! * `by_cookie`, a lock-free skip list (crossbeam-skiplist, same epoch
//!   collector) from cookie to name, for listing; `len` is written by the
//!   writer only (Relaxed).
//!
//! Lock order: `change` is the "directory entry lock" of the mount's order
//! (`fs`): ancestors before descendants; two unrelated directories only
//! under the rename lock, by inode number; before any `meta`.
//!
//! Readdir cookies: every entry gets a cookie from its directory's
//! `next_cookie` when it is inserted and keeps it until removed (an
//! exchange keeps both cookies); cookies are persisted with the entry.
//! Listing returns entries in cookie order after the caller's offset: it
//! walks `by_cookie` from the offset and returns an entry only if the name
//! still maps to that cookie. An entry present for the whole listing is in
//! both maps throughout, so it is returned exactly once, whatever is
//! inserted or removed meanwhile and across evictions of the index; an
//! entry added or removed during the listing is returned at most once per
//! cookie it had. Cookies 0, 1 and 2 are the start, `.` and `..`.

use std::ops::Bound;
use std::ptr;

use crossbeam_epoch::Guard;
use crossbeam_skiplist::base::SkipList;
use lanefs_store::{DirEntryRecord, FileKind, Ino};

use crate::dir_hash::{EntryRef, NameTable};
use crate::inode::OwnLine;
use crate::sync::{AtomicPtr, AtomicUsize, Mutex, MutexGuard, Ordering};

/// First cookie handed to a real entry.
pub(crate) const FIRST_COOKIE: u64 = 3;

/// One entry's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    pub ino: Ino,
    pub kind: FileKind,
    pub cookie: u64,
}

/// A loaded directory index.
pub(crate) struct DirIndex {
    names: NameTable,
    by_cookie: SkipList<u64, Box<[u8]>>,
    len: AtomicUsize,
}

impl DirIndex {
    fn new() -> DirIndex {
        DirIndex {
            names: NameTable::new(),
            by_cookie: SkipList::new(crossbeam_epoch::default_collector().clone()),
            len: AtomicUsize::new(0),
        }
    }

    /// An index holding `records` (built before anyone can see it).
    pub fn from_records(records: Vec<DirEntryRecord>) -> DirIndex {
        let d = DirIndex::new();
        let guard = crossbeam_epoch::pin();
        for r in records {
            let slot = Slot {
                ino: r.ino,
                kind: r.kind,
                cookie: r.cookie,
            };
            // SAFETY: `d` is not shared yet: this thread is its only writer.
            unsafe { d.insert(&r.name, slot, &guard) };
        }
        d
    }

    /// The entry `name`, lock-free.
    pub fn get(&self, name: &[u8], guard: &Guard) -> Option<Slot> {
        self.names.get(name, guard)
    }

    /// The entry `name` with its node's identity (see [`NameTable::holds`]).
    pub fn get_entry<'g>(&'g self, name: &[u8], guard: &'g Guard) -> Option<EntryRef<'g>> {
        self.names.get_entry(name, guard)
    }

    /// Entries. Exact for the writer; a snapshot for others.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Up to `max` entries with cookie > `after`, in cookie order,
    /// lock-free (see the module doc for the guarantee).
    pub fn list_after(&self, after: u64, max: usize, guard: &Guard) -> Vec<(Vec<u8>, Slot)> {
        let mut out = Vec::new();
        let mut e = self.by_cookie.lower_bound(Bound::Excluded(&after), guard);
        while let Some(entry) = e {
            if out.len() >= max {
                break;
            }
            let cookie = *entry.key();
            let name = entry.value();
            if let Some(slot) = self.get(name, guard) {
                if slot.cookie == cookie {
                    out.push((name.to_vec(), slot));
                }
            }
            e = entry.next();
        }
        out
    }

    /// Insert or replace `name`.
    ///
    /// # Safety
    /// The caller is the index's only writer (holds the owning directory's
    /// change lock, or owns the index).
    unsafe fn insert(&self, name: &[u8], slot: Slot, guard: &Guard) -> Option<Slot> {
        // SAFETY: the caller is the only writer (this function's contract).
        let old = unsafe { self.names.insert(name, slot, guard) };
        match old {
            Some(old_slot) if old_slot.cookie != slot.cookie => {
                if let Some(e) = self.by_cookie.remove(&old_slot.cookie, guard) {
                    e.release(guard);
                }
            }
            Some(_) => {}
            None => {
                let n = self.len.load(Ordering::Relaxed) + 1;
                self.len.store(n, Ordering::Relaxed);
            }
        }
        let cookie_moved = match old {
            Some(o) => o.cookie != slot.cookie,
            None => true,
        };
        if cookie_moved {
            self.by_cookie
                .insert(slot.cookie, name.into(), guard)
                .release(guard);
        }
        old
    }

    /// Remove `name`.
    ///
    /// # Safety
    /// As [`insert`](Self::insert).
    unsafe fn remove(&self, name: &[u8], guard: &Guard) -> Option<Slot> {
        // SAFETY: the caller is the only writer (this function's contract).
        let slot = unsafe { self.names.remove(name, guard) }?;
        let n = self.len.load(Ordering::Relaxed);
        debug_assert!(n > 0, "removing from an empty index");
        self.len.store(n - 1, Ordering::Relaxed);
        if let Some(e) = self.by_cookie.remove(&slot.cookie, guard) {
            e.release(guard);
        }
        Some(slot)
    }
}

/// A directory's entry state: change lock and loaded index.
pub(crate) struct DirState {
    /// On a line of its own: every change of entries writes it, and
    /// lookups, which read `index`, must not share its line.
    change: OwnLine<Mutex<()>>,
    index: AtomicPtr<DirIndex>,
}

impl Default for DirState {
    fn default() -> Self {
        DirState {
            change: OwnLine(Mutex::new(())),
            index: AtomicPtr::new(ptr::null_mut()),
        }
    }
}

impl Drop for DirState {
    fn drop(&mut self) {
        let p = *self.index.get_mut();
        if !p.is_null() {
            // SAFETY: the directory inode is being dropped, so no guard can
            // still reach its index (inodes themselves are reclaimed after
            // every reader's guard, see `FsInner::iget_rcu`).
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

impl DirState {
    /// The loaded index, lock-free, or `None` when not loaded.
    pub fn index<'g>(&self, _guard: &'g Guard) -> Option<&'g DirIndex> {
        let p = self.index.load(Ordering::Acquire);
        // SAFETY: an index taken out of `self.index` is freed through
        // `defer` (see `DirChange::take`), after `_guard`.
        unsafe { p.as_ref() }
    }

    /// Is `e`, found in `index` under `guard`, still linked in this
    /// directory: `index` is still the installed one (an index taken out
    /// and reloaded has new nodes) and `e`'s node is still in it? Then the
    /// entry stayed linked from the lookup until now, so the inode it names
    /// was not freed and its number not reused in between.
    pub fn still_holds(&self, index: &DirIndex, e: &EntryRef<'_>, guard: &Guard) -> bool {
        ptr::eq(self.index.load(Ordering::Acquire), index) && index.names.holds(e, guard)
    }

    /// Take the change lock.
    pub fn lock(&self) -> DirChange<'_> {
        DirChange {
            _lock: self.change.lock(),
            state: self,
        }
    }

    /// Take the change lock if it is free.
    pub fn try_lock(&self) -> Option<DirChange<'_>> {
        Some(DirChange {
            _lock: self.change.try_lock()?,
            state: self,
        })
    }
}

/// The change lock of one directory, held.
pub(crate) struct DirChange<'a> {
    _lock: MutexGuard<'a, ()>,
    state: &'a DirState,
}

impl<'a> DirChange<'a> {
    /// The loaded index. Valid while the lock is held: only a holder of the
    /// lock takes it out.
    pub fn index(&self) -> Option<&DirIndex> {
        let p = self.state.index.load(Ordering::Relaxed);
        // SAFETY: only lock holders swap the pointer, and we hold the lock.
        unsafe { p.as_ref() }
    }

    /// Install a freshly loaded index (none must be loaded).
    pub fn install(&mut self, idx: DirIndex) {
        debug_assert!(self.index().is_none(), "index loaded twice");
        let p = Box::into_raw(Box::new(idx));
        self.state.index.store(p, Ordering::Release);
    }

    /// Drop the loaded index; whether there was one.
    pub fn take(&mut self) -> bool {
        let p = self.state.index.swap(ptr::null_mut(), Ordering::AcqRel);
        if p.is_null() {
            return false;
        }
        let guard = crossbeam_epoch::pin();
        // SAFETY: unpublished above; readers that loaded it hold guards and
        // the free runs after them.
        unsafe { guard.defer_unchecked(move || drop(Box::from_raw(p))) };
        true
    }

    /// The lock with the index loaded (by `load` if needed).
    pub fn loaded<E>(
        mut self,
        load: impl FnOnce() -> Result<DirIndex, E>,
    ) -> Result<DirWrite<'a>, E> {
        if self.index().is_none() {
            self.install(load()?);
        }
        let index = self.state.index.load(Ordering::Relaxed);
        debug_assert!(!index.is_null());
        Ok(DirWrite {
            _change: self,
            index,
        })
    }
}

/// A directory's change lock held with its index loaded: the only writer.
pub(crate) struct DirWrite<'a> {
    /// Held (never read) for as long as this writer lives.
    _change: DirChange<'a>,
    /// Non-null; stays installed while `change` is held.
    index: *const DirIndex,
}

impl DirWrite<'_> {
    fn idx(&self) -> &DirIndex {
        // SAFETY: installed when this was made, and only a holder of the
        // change lock (which we are) takes an index out.
        unsafe { &*self.index }
    }

    pub fn get(&self, name: &[u8]) -> Option<Slot> {
        self.idx().get(name, &crossbeam_epoch::pin())
    }

    pub fn len(&self) -> usize {
        self.idx().len()
    }

    /// Insert `name`, or replace it (a new node: readers validating the
    /// old one see it gone).
    pub fn insert(&mut self, name: &[u8], slot: Slot) {
        let guard = crossbeam_epoch::pin();
        // SAFETY: we hold the change lock: the only writer.
        unsafe { self.idx().insert(name, slot, &guard) };
    }

    /// Remove `name`.
    pub fn remove(&mut self, name: &[u8]) -> Option<Slot> {
        let guard = crossbeam_epoch::pin();
        // SAFETY: we hold the change lock: the only writer.
        unsafe { self.idx().remove(name, &guard) }
    }
}

/// A loaded index pinned by an epoch guard, for lock-free reads.
pub(crate) struct DirRead<'a> {
    guard: Guard,
    index: &'a DirIndex,
}

impl DirState {
    /// The loaded index for reading, or `None` when not loaded.
    pub fn reader(&self) -> Option<DirRead<'_>> {
        let guard = crossbeam_epoch::pin();
        let p = self.index.load(Ordering::Acquire);
        // SAFETY: an index taken out is freed through `defer` after every
        // guard pinned before, including `guard`, which `DirRead` keeps for
        // as long as it lends the reference (the field order drops
        // `index` with it; the reference never leaves `&self` methods).
        let index = unsafe { p.as_ref()? };
        Some(DirRead { guard, index })
    }
}

impl DirRead<'_> {
    pub fn get(&self, name: &[u8]) -> Option<Slot> {
        self.index.get(name, &self.guard)
    }

    /// The entry `name` with its node's identity, for [`still_linked`](Self::still_linked).
    pub fn get_entry(&self, name: &[u8]) -> Option<EntryRef<'_>> {
        self.index.get_entry(name, &self.guard)
    }

    /// Is `e` (from [`get_entry`](Self::get_entry) on this reader) still
    /// linked in `state`, the directory this reader reads?
    pub fn still_linked(&self, state: &DirState, e: &EntryRef<'_>) -> bool {
        state.still_holds(self.index, e, &self.guard)
    }

    pub fn list_after(&self, after: u64, max: usize) -> Vec<(Vec<u8>, Slot)> {
        self.index.list_after(after, max, &self.guard)
    }
}

#[cfg(all(test, not(lanefs_shuttle)))]
mod tests {
    use super::*;

    fn wr(d: &DirState) -> DirWrite<'_> {
        d.lock()
            .loaded(|| Err::<DirIndex, ()>(()))
            .expect("loaded by the test")
    }

    fn slot(ino: Ino, cookie: u64) -> Slot {
        Slot {
            ino,
            kind: FileKind::Regular,
            cookie,
        }
    }

    fn loaded() -> DirState {
        let d = DirState::default();
        d.lock().install(DirIndex::from_records(Vec::new()));
        d
    }

    #[test]
    fn listing_is_in_cookie_order_and_resumable() {
        let d = loaded();
        let mut w = wr(&d);
        w.insert(b"b", slot(10, 5));
        w.insert(b"a", slot(11, 3));
        w.insert(b"c", slot(12, 4));
        let g = crossbeam_epoch::pin();
        let idx = w.idx();
        let all: Vec<_> = idx
            .list_after(0, 10, &g)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(all, vec![b"a".to_vec(), b"c".to_vec(), b"b".to_vec()]);
        let rest: Vec<_> = idx
            .list_after(4, 10, &g)
            .into_iter()
            .map(|(n, s)| (n, s.ino))
            .collect();
        assert_eq!(rest, vec![(b"b".to_vec(), 10)]);
        drop(g);
        assert_eq!(w.remove(b"c"), Some(slot(12, 4)));
        let g = crossbeam_epoch::pin();
        let idx = w.idx();
        assert_eq!(idx.list_after(3, 1, &g).len(), 1);
        drop(g);
        w.insert(b"b", slot(13, 6));
        let g = crossbeam_epoch::pin();
        let idx = w.idx();
        assert_eq!(idx.len(), 2);
        assert_eq!(
            idx.list_after(5, 10, &g)[0].1.ino,
            13,
            "replacing moves the cookie"
        );
        assert!(idx.list_after(4, 10, &g).iter().all(|(n, _)| n != b"c"));
    }

    #[test]
    fn splitting_keeps_every_entry_and_entries_validate_by_identity() {
        let d = loaded();
        let n = 1000u64;
        {
            let mut w = wr(&d);
            for i in 0..n {
                w.insert(format!("f{i}").as_bytes(), slot(100 + i, FIRST_COOKIE + i));
            }
        }
        let g = crossbeam_epoch::pin();
        let idx = d.index(&g).unwrap();
        assert_eq!(idx.len(), n as usize);
        for i in 0..n {
            assert_eq!(
                idx.get(format!("f{i}").as_bytes(), &g).unwrap().ino,
                100 + i
            );
        }
        assert_eq!(idx.get(b"nope", &g), None);
        let listed = idx.list_after(0, usize::MAX, &g);
        assert_eq!(listed.len(), n as usize);
        assert!(listed.windows(2).all(|w| w[0].1.cookie < w[1].1.cookie));
        // Entry identity: other names' changes leave an entry valid; its
        // own removal, replacement or a reload of the index do not.
        let (f0, f1, f2) = (
            idx.get_entry(b"f0", &g).unwrap(),
            idx.get_entry(b"f1", &g).unwrap(),
            idx.get_entry(b"f2", &g).unwrap(),
        );
        wr(&d).insert(b"new", slot(5000, 5000));
        assert!(d.still_holds(idx, &f0, &g), "another name's insert");
        assert!(wr(&d).remove(b"f1").is_some());
        assert!(!d.still_holds(idx, &f1, &g), "its own removal");
        assert!(d.still_holds(idx, &f0, &g), "another name's removal");
        wr(&d).insert(b"f2", slot(6000, 6000));
        assert!(!d.still_holds(idx, &f2, &g), "its own replacement");
        assert!(d.lock().take());
        assert!(!d.still_holds(idx, &f0, &g), "the index was taken out");
        drop(g);
        let g = crossbeam_epoch::pin();
        assert!(d.index(&g).is_none());
    }
}

#[cfg(all(test, lanefs_shuttle))]
mod model {
    use super::*;
    use crate::sync::Arc;
    use crate::sync::AtomicU64;
    use shuttle::thread;

    fn wr(d: &DirState) -> DirWrite<'_> {
        d.lock()
            .loaded(|| Err::<DirIndex, ()>(()))
            .expect("loaded by the test")
    }

    fn slot(ino: Ino, cookie: u64) -> Slot {
        Slot {
            ino,
            kind: FileKind::Regular,
            cookie,
        }
    }

    /// Lookups racing inserts (with growth), removes and a drop/reload of
    /// the index: a lookup of a name that is present throughout always
    /// finds it with its value; a removed name is never found after the
    /// remove returned; a changed name is found with an old or new value.
    #[test]
    fn model_dir_lookup_vs_insert_remove_drop() {
        shuttle::check_random(
            || {
                let d = Arc::new(DirState::default());
                {
                    let mut w = d.lock();
                    w.install(DirIndex::from_records(vec![
                        DirEntryRecord {
                            name: b"stay".to_vec(),
                            ino: 10,
                            kind: FileKind::Regular,
                            cookie: 3,
                        },
                        DirEntryRecord {
                            name: b"gone".to_vec(),
                            ino: 11,
                            kind: FileKind::Regular,
                            cookie: 4,
                        },
                    ]));
                }
                let removed = Arc::new(AtomicU64::new(0));
                let writer = {
                    let d = d.clone();
                    let removed = removed.clone();
                    thread::spawn(move || {
                        // Enough inserts to split chains (model builds
                        // use a 2-slot fanout and split at 2 nodes).
                        for i in 0..9u64 {
                            let mut w = wr(&d);
                            w.insert(format!("n{i}").as_bytes(), slot(20 + i, 5 + i));
                        }
                        assert!(wr(&d).remove(b"gone").is_some());
                        removed.store(1, Ordering::Release);
                        wr(&d).insert(b"stay", slot(10, 3));
                    })
                };
                let dropper = {
                    let d = d.clone();
                    thread::spawn(move || {
                        // Drop and reload, as a shrink then a lookup miss:
                        // entries are written through, so the reload holds
                        // exactly what the taken index held.
                        let mut w = d.lock();
                        let g = crossbeam_epoch::pin();
                        let records: Vec<_> = w
                            .index()
                            .unwrap()
                            .list_after(0, usize::MAX, &g)
                            .into_iter()
                            .map(|(name, s)| DirEntryRecord {
                                name,
                                ino: s.ino,
                                kind: s.kind,
                                cookie: s.cookie,
                            })
                            .collect();
                        assert!(w.take());
                        w.install(DirIndex::from_records(records));
                    })
                };
                for _ in 0..4 {
                    let was_removed = removed.load(Ordering::Acquire) == 1;
                    let g = crossbeam_epoch::pin();
                    if let Some(idx) = d.index(&g) {
                        // Entry identity: once the removal is seen to have
                        // happened, an entry found before never validates.
                        if let Some(e) = idx.get_entry(b"gone", &g) {
                            thread::yield_now();
                            if removed.load(Ordering::Acquire) == 1 {
                                assert!(!d.still_holds(idx, &e, &g), "a removed entry validated");
                            }
                        }
                        assert_eq!(idx.get(b"stay", &g), Some(slot(10, 3)));
                        if was_removed {
                            assert_eq!(idx.get(b"gone", &g), None);
                        }
                        let listed = idx.list_after(0, usize::MAX, &g);
                        assert_eq!(
                            listed.iter().filter(|(n, _)| n == b"stay").count(),
                            1,
                            "an entry present throughout is listed exactly once"
                        );
                    }
                }
                writer.join().unwrap();
                dropper.join().unwrap();
            },
            crate::sync::model_iterations(),
        );
    }
}
