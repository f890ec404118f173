//! Open counts, per lane (sv6's Refcache applied to `Inode::opens`).
//!
//! An inode's open handles are counted by the sum of a global part on the
//! inode ([`OpenCount::count`], on a line of its own) and a delta in each
//! lane's cache here ([`Opens`], one per file system). An open adds +1 on
//! the opener's lane, a close −1 on the closer's: a handle closed on
//! another lane than it was opened on leaves one lane above and another
//! below, and only the sum means anything. Opens and closes of one file
//! from two lanes so write only their own lanes' lines, and read the
//! inode's [`OpenCount`] line (which neither writes).
//!
//! Locking rules:
//! * Each lane has a direct-mapped cache of [`SLOTS`] slots (an inode's is
//!   slot `ino % SLOTS`), each with its own lock, key (the inode's address,
//!   or 0) and delta, on a line of its own: an open or close writes only
//!   its inode's slot in its own lane, and a sealer of another file, which
//!   reads its own inode's slot in every used lane without a lock, reads
//!   no line that open writes (unless the two numbers share a slot).
//!   `slot.lock` (mutex) is taken by the opens and closes of lane `l` (a
//!   leaf) and by a sealer or reviewer (under the inode's `meta`) that
//!   finds its inode's key there. Key and delta are written only under the
//!   slot's lock; the key is stored SeqCst whenever it changes (an entry
//!   whose delta comes back to 0 keeps its key: opening and closing a file
//!   on one lane again and again stores no key). A collision flushes the
//!   old entry's nonzero delta into its inode's `count` before the slot is
//!   reused (under the slot's lock). Keys never dangle: an inode leaves the
//!   cache (evicted or freed) only after a seal, and once sealed no slot
//!   holds its key (below).
//! * `lanes[l]` (atomic pointer, SeqCst): lane `l`'s cache, made on the
//!   lane's first use (by a CAS from null: a lane nobody uses costs a
//!   pointer, not a kilobyte) after `used` covers it; a sealer that finds
//!   it null skips the lane.
//! * `used` (atomic, SeqCst, on a line of its own): one more than the
//!   highest lane used (at least [`USED_FLOOR`]: the first lanes cost no
//!   write of it), raised (`fetch_max`, only when it grows, so at most once
//!   per lane and file system) by an open or close before it takes its
//!   slot's lock; sealers and reviewers look at lanes `0..used` only, so
//!   lanes nobody uses cost nothing.
//! * `OpenCount::count` (atomic): the global part, changed by flushes
//!   (under the flushed slot's lock: collisions, sealers, reviewers); set
//!   before the inode is hashed for a file born open (`NewNode::opens`).
//! * `OpenCount::state` (atomic, SeqCst; written only under the inode's
//!   `meta`, or by the evictor that holds its seal): [`SEALED`] (a free or
//!   an eviction was decided: no handle may be made; an eviction given up
//!   clears it), [`SEALING`] (a seal is reading the lanes: an open backs
//!   out and waits outside its slot's lock) and [`REVIEW`] (a seal or a
//!   review found the file open: its closes review, below).
//!
//! Sealing ([`Opens::seal`], under `meta`, by every decision that must not
//! meet a new handle: a free, an eviction) is exact. It sets `SEALING`
//! (SeqCst), reads `used`, then each used lane's pointer and its inode's
//! slot there (SeqCst, no lock); in each slot that holds its key it takes
//! the slot's lock and moves the delta into `count`; it seals iff `count`
//! is then 0. An open raises `used` past its lane, makes the lane if it
//! has none, takes its slot's lock, stores its +1 (the key SeqCst if it
//! was not there), then reads `state` (SeqCst); if it finds `SEALING` or
//! `SEALED` it takes the +1 back before it lets the lock go, and waits or
//! fails. Store, then load, on both sides (a Dekker pair: each load of the
//! sealer's that could miss the open — `used`, the lane's pointer, the
//! key — would read before a store the opener makes before it reads
//! `state`, so in the SeqCst order the sealer's `SEALING` comes before the
//! opener's read of `state`): either the sealer reads the key (and, taking
//! that slot's lock, the exact delta) or the opener reads the seal and
//! backs out. So a +1 the sealer does not count is never kept, and what it
//! misses is only −1s of closes that come after its read, of handles whose
//! +1 it counted: its sum is never below the true count, and a seal never
//! succeeds while a handle exists. A successful seal leaves no key of its
//! inode in any lane: it emptied the slots it saw holding it; an open that
//! stored the key after that read backs out and empties the slot if that
//! leaves it at 0; and a close that stored it would be a −1 the seal
//! missed, which needs a +1 it counted, which a sum of 0 rules out.
//!
//! Zero detection: a plain close reads no other lane. A seal that fails,
//! and a review that finds the file open ([`Opens::review`], by whoever
//! would offer a linked inode back to the LRU), leave [`REVIEW`] set (set
//! before the lanes are read; a close stores its −1, then reads `state`:
//! the same Dekker pair); a close that sees it reviews under `meta`
//! (`FsInner::review_closed`): when the sum is 0 it frees an unlinked
//! inode (`maybe_free`, which seals) or offers a linked one to the LRU,
//! and clears the bit. Either the reviewer (or sealer) counts the close's
//! −1 or the close sees the bit, so the last close of an orphan frees it,
//! and an inode the evictor found open goes back to the LRU at its last
//! close. A review is not a seal (opens go on meanwhile): it may offer an
//! inode that a new handle keeps, which the evictor then finds open again
//! (and sets the bit again). Closes of a file with no decision pending
//! write only their lane.
//!
//! Departures from sv6's Refcache: no epochs of deltas and no delayed zero
//! detection — a decision that needs the count (free, eviction) reads its
//! slot in every used lane at once (locking only the slots that hold it),
//! which is exact; zero is detected synchronously by closes of inodes a
//! decision is waiting on (`REVIEW`), not by a background review; and no
//! dirty-inode list: a seal finds its inode's entries by reading one slot
//! per lane. Keys are inode addresses, kept valid by the rule that an
//! inode leaves the cache only sealed (and its memory only after an epoch,
//! `icache`).

use crate::inode::{Inode, OwnLine};
use crate::sync::{AtomicI64, AtomicPtr, AtomicU32, AtomicUsize, Mutex, Ordering};

/// Lanes with a cache of their own (more lanes share them).
pub(crate) const OPEN_LANES: usize = 64;
/// Entries of a lane's direct-mapped cache.
pub(crate) const SLOTS: usize = 16;
/// Lanes counted as used from the start: a small mount's opens never
/// write `used`, which every seal reads. One in model checks, so that they
/// explore lanes coming into use.
pub(crate) const USED_FLOOR: usize = if cfg!(lanefs_shuttle) { 1 } else { 4 };

/// `OpenCount::state`: no handle may be made (a free or an eviction).
pub(crate) const SEALED: u32 = 1;
/// `OpenCount::state`: a seal is reading the lanes; opens wait.
pub(crate) const SEALING: u32 = 2;
/// `OpenCount::state`: a decision found the file open; closes review.
pub(crate) const REVIEW: u32 = 4;

/// The inode's part of its open count (module doc), on a line of its own.
pub(crate) struct OpenCount {
    count: AtomicI64,
    state: AtomicU32,
}

impl OpenCount {
    /// Born with `n` handles (a file made open: `NewNode::opens`), set
    /// before the inode is hashed.
    pub fn new(n: u64) -> OpenCount {
        OpenCount {
            count: AtomicI64::new(n as i64),
            state: AtomicU32::new(0),
        }
    }

    /// Set the born-open count of an inode nobody else can see yet.
    pub fn set_born(&self, n: u64) {
        self.count.store(n as i64, Ordering::Relaxed);
    }

    /// Sealed (a free or an eviction was decided).
    pub fn is_sealed(&self) -> bool {
        self.state.load(Ordering::SeqCst) & SEALED != 0
    }

    /// Seal an inode that never had a handle and never will (a discarded
    /// creation: under `meta`, or before anyone else could see it).
    pub fn seal_unused(&self) {
        self.state.store(SEALED, Ordering::SeqCst);
    }
}

/// One entry of a lane's cache with its lock, on a line of its own.
#[repr(align(64))]
struct Slot {
    lock: Mutex<()>,
    /// The inode's address; 0: empty.
    key: AtomicUsize,
    delta: AtomicI64,
}

/// One lane's cache (module doc).
struct Lane {
    slots: [Slot; SLOTS],
}

fn key_of(inode: &Inode) -> usize {
    inode as *const Inode as usize
}

fn slot_of(inode: &Inode) -> usize {
    (inode.ino % SLOTS as u64) as usize
}

impl Slot {
    /// Add `d` to `inode`'s delta, flushing a colliding entry into its own
    /// inode's global count first. Under the slot's lock.
    fn add(&self, inode: &Inode, d: i64) {
        let key = key_of(inode);
        let held = self.key.load(Ordering::Relaxed);
        if held == key {
            self.delta
                .store(self.delta.load(Ordering::Relaxed) + d, Ordering::Relaxed);
            return;
        }
        let old = self.delta.load(Ordering::Relaxed);
        if held != 0 && old != 0 {
            // SAFETY: a key in a slot is a live inode's: an inode leaves
            // the cache (and later its memory) only sealed, and a seal
            // leaves no key of its inode in any slot (module doc); this
            // slot's lock is held, so no seal empties it meanwhile.
            let other = unsafe { &*(held as *const Inode) };
            other.opens.count.fetch_add(old, Ordering::SeqCst);
        }
        self.delta.store(d, Ordering::Relaxed);
        self.key.store(key, Ordering::SeqCst);
    }

    /// Take back an open's +1 that met a seal, emptying the slot if that
    /// leaves it at 0: the sealer may have read the slot before the open
    /// stored its key, and a key it did not see must not outlive the seal.
    /// Under the slot's lock.
    fn back_out(&self, inode: &Inode) {
        self.add(inode, -1);
        if self.delta.load(Ordering::Relaxed) == 0 {
            self.key.store(0, Ordering::SeqCst);
        }
    }

    /// Whether the slot holds `inode`'s key (read without the lock).
    fn holds(&self, inode: &Inode) -> bool {
        self.key.load(Ordering::SeqCst) == key_of(inode)
    }

    /// Move `inode`'s delta into its global count and empty the slot if it
    /// holds it. Under the slot's lock.
    fn flush(&self, inode: &Inode) {
        if self.key.load(Ordering::Relaxed) == key_of(inode) {
            inode
                .opens
                .count
                .fetch_add(self.delta.load(Ordering::Relaxed), Ordering::SeqCst);
            self.delta.store(0, Ordering::Relaxed);
            self.key.store(0, Ordering::SeqCst);
        }
    }

    /// `inode`'s delta here. Under the slot's lock.
    fn delta(&self, inode: &Inode) -> i64 {
        if self.key.load(Ordering::Relaxed) == key_of(inode) {
            self.delta.load(Ordering::Relaxed)
        } else {
            0
        }
    }
}

/// The lanes' caches of one file system (module doc).
pub(crate) struct Opens {
    /// Each lane's cache, from `Box::into_raw`, or null until the lane is
    /// first used (the first [`USED_FLOOR`] are made with the file
    /// system): a lane nobody uses costs a pointer. Set once, by a CAS
    /// from null (SeqCst: part of the Dekker pair), freed at drop.
    lanes: Box<[AtomicPtr<Lane>]>,
    used: OwnLine<AtomicUsize>,
}

impl Drop for Opens {
    fn drop(&mut self) {
        for l in self.lanes.iter() {
            let p = l.load(Ordering::Relaxed);
            if !p.is_null() {
                // SAFETY: a non-null pointer came from `Box::into_raw`
                // (`new_lane`) and was published once; `&mut self` means
                // nobody can reach it any more.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}

fn new_lane() -> *mut Lane {
    Box::into_raw(Box::new(Lane {
        slots: std::array::from_fn(|_| Slot {
            lock: Mutex::new(()),
            key: AtomicUsize::new(0),
            delta: AtomicI64::new(0),
        }),
    }))
}

impl Default for Opens {
    fn default() -> Self {
        Self::new()
    }
}

/// This thread's lane. Model checks run every model thread on one OS
/// thread (so one `lane()`): there each gets the lane of its model id.
fn this_lane() -> usize {
    #[cfg(lanefs_shuttle)]
    let l = usize::from(shuttle::thread::current().id());
    #[cfg(not(lanefs_shuttle))]
    let l = crate::lane::lane();
    l % OPEN_LANES
}

impl Opens {
    pub fn new() -> Self {
        Opens {
            lanes: (0..OPEN_LANES)
                .map(|l| {
                    AtomicPtr::new(if l < USED_FLOOR {
                        new_lane()
                    } else {
                        std::ptr::null_mut()
                    })
                })
                .collect(),
            used: OwnLine(AtomicUsize::new(USED_FLOOR)),
        }
    }

    /// Lane `l`'s cache, if it was ever used (SeqCst).
    fn lane(&self, l: usize) -> Option<&Lane> {
        let p = self.lanes[l].load(Ordering::SeqCst);
        // SAFETY: a non-null pointer came from `Box::into_raw` and stays
        // until `self` is dropped.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// Lane `l`'s cache, made on its first use.
    fn lane_or_new(&self, l: usize) -> &Lane {
        if let Some(lane) = self.lane(l) {
            return lane;
        }
        let mine = new_lane();
        match self.lanes[l].compare_exchange(
            std::ptr::null_mut(),
            mine,
            Ordering::SeqCst,
            Ordering::SeqCst,
        ) {
            // SAFETY: published just now; stays until `self` is dropped.
            Ok(_) => unsafe { &*mine },
            Err(theirs) => {
                // SAFETY: `mine` was never published: this call owns it.
                drop(unsafe { Box::from_raw(mine) });
                // SAFETY: as in `lane`.
                unsafe { &*theirs }
            }
        }
    }

    /// `inode`'s slot in this thread's lane, the lane counted as used
    /// (before the slot's lock is taken: the Dekker pair of the module doc
    /// needs the sealer to look at it).
    fn my_slot(&self, inode: &Inode) -> &Slot {
        let l = this_lane();
        if self.used.load(Ordering::SeqCst) <= l {
            self.used.fetch_max(l + 1, Ordering::SeqCst);
        }
        &self.lane_or_new(l).slots[slot_of(inode)]
    }

    /// `inode`'s slot in every used lane (read after the caller wrote
    /// `state`).
    fn used_slots<'a>(&'a self, inode: &Inode) -> impl Iterator<Item = &'a Slot> {
        let used = self.used.load(Ordering::SeqCst).min(OPEN_LANES);
        let i = slot_of(inode);
        (0..used).filter_map(move |l| self.lane(l).map(|lane| &lane.slots[i]))
    }

    /// Make a handle: +1 on this lane unless a free or an eviction sealed
    /// the count (`false`); waits out a seal in progress. The caller holds
    /// a counted reference, a handle, or an epoch guard over the inode
    /// found in the cache (`open_rcu`).
    pub fn raise(&self, inode: &Inode) -> bool {
        let slot = self.my_slot(inode);
        let mut backoff = crate::icache::Backoff::new();
        loop {
            {
                let _l = slot.lock.lock();
                slot.add(inode, 1);
                let st = inode.opens.state.load(Ordering::SeqCst);
                if st & (SEALED | SEALING) == 0 {
                    return true;
                }
                // Back out before the lock goes: nobody that takes it sees
                // this +1.
                slot.back_out(inode);
                if st & SEALED != 0 {
                    return false;
                }
            }
            // The sealer may need this slot's lock: wait outside it.
            backoff.wait();
        }
    }

    /// A handle is gone: −1 on this lane. Returns whether a decision waits
    /// on the count ([`REVIEW`]): the caller, still pinning the inode's
    /// memory with an epoch guard, then reviews (`FsInner::review_closed`).
    pub fn lower(&self, inode: &Inode) -> bool {
        let slot = self.my_slot(inode);
        let _l = slot.lock.lock();
        slot.add(inode, -1);
        inode.opens.state.load(Ordering::SeqCst) & REVIEW != 0
    }

    /// Move the inode's deltas into its global count from every used lane
    /// whose slot holds its key (after `state` was written); the count
    /// after.
    fn gather(&self, inode: &Inode) -> i64 {
        for slot in self.used_slots(inode) {
            if slot.holds(inode) {
                let _l = slot.lock.lock();
                slot.flush(inode);
            }
        }
        inode.opens.count.load(Ordering::SeqCst)
    }

    /// Under `meta`, for a decision to free or evict: seal the count at 0
    /// so that no handle is made from now on. `false` if a handle is open
    /// (its closes review then: [`REVIEW`]). Sealing twice is allowed.
    pub fn seal(&self, inode: &Inode) -> bool {
        let st = &inode.opens.state;
        if st.load(Ordering::SeqCst) & SEALED != 0 {
            return true;
        }
        st.fetch_or(SEALING | REVIEW, Ordering::SeqCst);
        let total = self.gather(inode);
        debug_assert!(total >= 0, "more closes than opens");
        let sealed = total == 0;
        st.store(if sealed { SEALED } else { REVIEW }, Ordering::SeqCst);
        sealed
    }

    /// Undo an eviction's seal (by the evictor that holds it and then gave
    /// the inode back): no handle could be made meanwhile.
    pub fn unseal(&self, inode: &Inode) {
        debug_assert_eq!(inode.opens.state.load(Ordering::Relaxed), SEALED);
        debug_assert_eq!(inode.opens.count.load(Ordering::Relaxed), 0);
        inode.opens.state.store(0, Ordering::SeqCst);
    }

    /// Under `meta`: whether no handle was open when the lanes were read.
    /// If one was, [`REVIEW`] is left set, so that the closes review (the
    /// last one finds 0); if none was, it is cleared. Not a seal: an open
    /// may come at any time.
    pub fn review(&self, inode: &Inode) -> bool {
        let st = &inode.opens.state;
        if st.load(Ordering::SeqCst) & SEALED != 0 {
            return true;
        }
        st.fetch_or(REVIEW, Ordering::SeqCst);
        let idle = self.gather(inode) == 0;
        if idle {
            st.fetch_and(!REVIEW, Ordering::SeqCst);
        }
        idle
    }

    /// Handles open now: the sum over the used lanes (exact while no open
    /// or close of the inode runs; `check`, tests).
    pub fn open_count(&self, inode: &Inode) -> i64 {
        let mut n = inode.opens.count.load(Ordering::SeqCst);
        for slot in self.used_slots(inode) {
            let _l = slot.lock.lock();
            n += slot.delta(inode);
        }
        n
    }

    /// Lanes used so far (tests).
    #[cfg(all(test, not(lanefs_shuttle)))]
    pub fn used(&self) -> usize {
        self.used.load(Ordering::SeqCst)
    }

    /// Whether any slot holds the key `key` (tests: no key may outlive a
    /// seal).
    #[cfg(test)]
    pub fn holds_key(&self, key: usize) -> bool {
        (0..OPEN_LANES).filter_map(|l| self.lane(l)).any(|l| {
            l.slots.iter().any(|s| {
                let _l = s.lock.lock();
                s.key.load(Ordering::Relaxed) == key
            })
        })
    }
}

/// The address an inode is keyed by (tests).
#[cfg(test)]
pub(crate) fn test_key(inode: &Inode) -> usize {
    key_of(inode)
}

/// Whether two inodes share a slot of a lane's cache (tests).
#[cfg(test)]
pub(crate) fn collide(a: &Inode, b: &Inode) -> bool {
    slot_of(a) == slot_of(b)
}

#[cfg(all(test, not(lanefs_shuttle)))]
mod tests {
    use super::*;
    use lanefs_store::{FileKind, InodeRecord, Timespec};

    fn inode(ino: u64) -> Box<Inode> {
        let t = Timespec { sec: 0, nsec: 0 };
        Box::new(Inode::new(
            InodeRecord {
                ino,
                generation: 1,
                kind: FileKind::Symlink,
                perm: 0o777,
                nlink: 1,
                atime: t,
                mtime: t,
                ctime: t,
                btime: t,
                ..InodeRecord::default()
            },
            false,
        ))
    }

    /// Run `f` on a thread pinned to lane `l`.
    fn on_lane<R: Send>(l: usize, f: impl FnOnce() -> R + Send) -> R {
        std::thread::scope(|s| {
            s.spawn(|| {
                lanefs_store::set_lane(l);
                f()
            })
            .join()
            .unwrap()
        })
    }

    /// Opens and closes on different lanes: only the sum counts; a seal
    /// fails while a handle is open (and leaves the review bit for the
    /// closes), succeeds at 0, clears every entry of the inode, and makes
    /// later opens fail until an unseal.
    #[test]
    fn the_sum_over_lanes_decides_the_seal() {
        let opens = Opens::new();
        let a = inode(2);
        assert!(on_lane(3, || opens.raise(&a)));
        assert!(on_lane(5, || opens.raise(&a)));
        assert_eq!(opens.used(), 6, "the highest lane used, plus one");
        assert!(on_lane(1, || opens.raise(&a)) && !on_lane(1, || opens.lower(&a)));
        assert_eq!(
            opens.used(),
            6,
            "lanes below the floor or used cost nothing"
        );
        assert!(!on_lane(1, || opens.lower(&a)), "no decision waits");
        assert_eq!(opens.open_count(&a), 1);
        assert!(!opens.seal(&a), "sealed while open");
        assert!(!a.opens_sealed());
        assert!(!opens.holds_key(test_key(&a)), "the seal flushed the lanes");
        assert!(
            on_lane(7, || opens.lower(&a)),
            "the failed seal asks for a review"
        );
        assert_eq!(opens.open_count(&a), 0);
        assert!(opens.review(&a), "the last close finds 0");
        assert!(
            !on_lane(7, || opens.raise(&a) && opens.lower(&a)),
            "review cleared"
        );
        assert!(opens.seal(&a));
        assert!(opens.seal(&a), "sealing twice is allowed");
        assert!(!opens.holds_key(test_key(&a)), "a key outlived the seal");
        assert!(!on_lane(2, || opens.raise(&a)), "opened after the seal");
        opens.unseal(&a);
        assert!(on_lane(2, || opens.raise(&a)));
        assert_eq!(opens.open_count(&a), 1);
    }

    /// Two inodes in one slot of a lane: the second flushes the first's
    /// delta into its global count, and the sums stay exact.
    #[test]
    fn a_collision_flushes_into_the_global_count() {
        let opens = Opens::new();
        let all: Vec<_> = (2..40).map(inode).collect();
        let (x, y) = all
            .iter()
            .enumerate()
            .find_map(|(i, x)| all[i + 1..].iter().find(|y| collide(x, y)).map(|y| (x, y)))
            .expect("no two of 38 inodes share one of 16 slots");
        on_lane(4, || {
            assert!(opens.raise(x));
            assert!(opens.raise(x));
            assert!(opens.raise(y));
        });
        assert_eq!(x.opens.count.load(Ordering::Relaxed), 2, "not flushed");
        assert_eq!(opens.open_count(x), 2);
        assert_eq!(opens.open_count(y), 1);
        on_lane(4, || opens.lower(x));
        on_lane(9, || opens.lower(x));
        assert_eq!(opens.open_count(x), 0);
        assert!(opens.seal(x));
        assert_eq!(opens.open_count(y), 1, "the seal of x touched y");
        assert!(!opens.seal(y));
    }

    /// An open waits out a seal in progress and fails once it sealed; the
    /// opens that came first make the seal fail. Many rounds on real
    /// threads: the count is never left wrong.
    #[test]
    fn opens_and_closes_race_seals_exactly() {
        let opens = Opens::new();
        let a = inode(2);
        for _ in 0..200 {
            let (made, sealed) = std::thread::scope(|s| {
                let openers: Vec<_> = (0..3)
                    .map(|l| {
                        let (opens, a) = (&opens, &a);
                        s.spawn(move || {
                            lanefs_store::set_lane(l + 10);
                            let made = opens.raise(a);
                            if made {
                                opens.lower(a);
                                opens.raise(a)
                            } else {
                                false
                            }
                        })
                    })
                    .collect();
                let sealed = opens.seal(&a);
                let made = openers
                    .into_iter()
                    .map(|h| h.join().unwrap())
                    .filter(|made| *made)
                    .count();
                (made, sealed)
            });
            if sealed {
                assert_eq!(opens.open_count(&a), 0);
                assert!(!opens.holds_key(test_key(&a)));
                opens.unseal(&a);
            }
            assert_eq!(opens.open_count(&a), made as i64);
            for _ in 0..made {
                opens.lower(&a);
            }
            assert!(opens.seal(&a), "left open");
            opens.unseal(&a);
        }
    }
}

/// The protocol on the whole engine with real threads.
#[cfg(all(test, not(lanefs_shuttle)))]
mod engine_tests {
    use crate::{Cred, Fs};
    use lanefs_store::ROOT_INO;

    /// Threads on many lanes (past `OPEN_LANES`, so two share one, and
    /// each new lane made while others run) open and close one file, each
    /// closing some handles another thread opened, while it is unlinked
    /// and the cache is evicted: it is freed exactly once, after the last
    /// handle, and the engine's check (which sums the lanes) passes.
    #[test]
    fn many_lanes_open_and_close_one_file_while_it_is_unlinked() {
        let fs = Fs::new_in_memory();
        let r = Cred::root();
        let files_free = || fs.statfs().unwrap().files_free;
        let free_before = files_free();
        let flags = libc::O_CREAT | libc::O_RDWR;
        let (attr, keep, _) = fs
            .open_at(&r, ROOT_INO, b"f", flags, 0o644, 0, false)
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let rx = std::sync::Mutex::new(rx);
        std::thread::scope(|s| {
            for t in 0..24 {
                let (fs, tx, rx, keep) = (&fs, tx.clone(), &rx, &keep);
                s.spawn(move || {
                    lanefs_store::set_lane(t * 3);
                    for i in 0..200 {
                        let h = keep.reopen_unchecked(libc::O_RDONLY).unwrap();
                        if i % 3 == 0 {
                            tx.send(h).unwrap();
                        } else {
                            drop(h);
                        }
                        if let Ok(other) = rx.lock().unwrap().try_recv() {
                            drop(other);
                        }
                        if i % 50 == 0 {
                            fs.inner.evict_inodes(8);
                        }
                    }
                });
            }
            fs.unlink(&Cred::root(), ROOT_INO, b"f").unwrap();
        });
        drop(tx);
        let rest: Vec<_> = rx.into_inner().unwrap().into_iter().collect();
        assert_eq!(files_free(), free_before - 1, "freed while open");
        let inode = fs
            .inner
            .iget(attr.ino)
            .expect("an open orphan left the cache");
        assert_eq!(fs.inner.opens.open_count(&inode) as usize, rest.len() + 1);
        drop(inode);
        drop(rest);
        fs.check().unwrap();
        drop(keep);
        assert_eq!(files_free(), free_before, "not freed once");
        fs.check().unwrap();
    }

    /// Opens and closes of files on lanes 0..70 (lanes 64.. share the
    /// caches of 0..6) leave entries with a delta of 0 in many lanes; a
    /// handle opened on one lane and closed on another leaves a +1 and a
    /// −1. An eviction, a free by unlink and a free by the last close of
    /// an orphan must each leave no key of the inode in any lane (the
    /// memory is held here by an `Arc`, so the address is not reused by
    /// another inode meanwhile), and a seal must count the deltas of
    /// every lane: a file kept open is neither evicted nor freed.
    #[test]
    fn no_key_outlives_an_eviction_or_a_free() {
        let fs = Fs::new_in_memory();
        let r = Cred::root();
        // Pinned throughout: no inode's memory (so no key) is reused.
        let guard = crossbeam_epoch::pin();
        let cached = |ino| fs.inner.iget_rcu(ino, &guard).map(super::test_key);
        let flags = libc::O_CREAT | libc::O_RDWR;
        let names: [&[u8]; 4] = [b"evicted", b"unlinked", b"orphan", b"kept"];
        let mut inodes = Vec::new();
        for name in names {
            let (a, f, _) = fs
                .open_at(&r, ROOT_INO, name, flags, 0o644, 0, false)
                .unwrap();
            drop(f);
            inodes.push((a.ino, cached(a.ino).unwrap()));
        }
        let (orphan_ino, kept_ino) = (inodes[2].0, inodes[3].0);
        let mut held = Vec::new();
        for l in 0..70 {
            std::thread::scope(|s| {
                s.spawn(|| {
                    lanefs_store::set_lane(l);
                    for (ino, _) in &inodes {
                        drop(fs.open(&r, *ino, libc::O_RDONLY).unwrap());
                    }
                    // Opened here, closed on another lane.
                    if l % 10 == 9 {
                        held.push(fs.open(&r, orphan_ino, libc::O_RDONLY).unwrap());
                        held.push(fs.open(&r, kept_ino, libc::O_RDONLY).unwrap());
                    }
                });
            });
            if l % 10 == 0 && l > 0 {
                std::thread::scope(|s| {
                    s.spawn(|| {
                        lanefs_store::set_lane(l + 1);
                        held.drain(..2).for_each(drop);
                    });
                });
            }
        }
        assert_eq!(held.len(), 2, "one orphan and one kept handle left");
        let holds = |i: usize| fs.inner.opens.holds_key(inodes[i].1);
        assert!((0..4).all(holds), "the opens left entries");
        fs.unlink(&r, ROOT_INO, b"unlinked").unwrap();
        assert_eq!(cached(inodes[1].0), None, "not freed");
        assert!(!holds(1), "a key outlived a free");
        fs.unlink(&r, ROOT_INO, b"orphan").unwrap();
        fs.shrink();
        assert_eq!(cached(inodes[0].0), None, "not evicted");
        assert!(!holds(0), "a key outlived an eviction");
        assert_eq!(cached(kept_ino), Some(inodes[3].1), "evicted while open");
        assert_eq!(cached(orphan_ino), Some(inodes[2].1), "freed while open");
        fs.check().unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                lanefs_store::set_lane(200);
                held.drain(..).for_each(drop);
            });
        });
        assert_eq!(
            cached(orphan_ino),
            None,
            "an orphan outlived its last close"
        );
        assert!(!holds(2), "a key outlived a last close");
        fs.shrink();
        assert_eq!(cached(kept_ino), None, "not offered back to the LRU");
        assert!(!holds(3), "a key outlived an eviction");
        fs.check().unwrap();
    }
}

/// Model checks of the protocol on the whole engine (module doc): each
/// thread is its own lane here (`this_lane`).
#[cfg(all(test, lanefs_shuttle))]
mod model {
    use super::test_key;
    use crate::{Cred, Fs, OpenFile};
    use lanefs_store::{Ino, ROOT_INO};
    use shuttle::thread;

    fn create(fs: &Fs, name: &[u8]) -> (Ino, OpenFile) {
        let flags = libc::O_CREAT | libc::O_RDWR;
        let (attr, f, _) = fs
            .open_at(&Cred::root(), ROOT_INO, name, flags, 0o644, 0, false)
            .unwrap();
        (attr.ino, f)
    }

    fn files_free(fs: &Fs) -> u64 {
        fs.statfs().unwrap().files_free
    }

    /// Two opens on two lanes — one from the cache with no reference
    /// (`open_rcu`), one on the counted path (`open_path`) — race the
    /// eviction's seal. Each handle that is made is on the cached inode
    /// (never on one the evictor unhashed), and both count.
    #[test]
    fn model_opens_on_two_lanes_vs_eviction() {
        crate::sync::check_pct(
            || {
                let fs = Fs::new_in_memory();
                let (ino, f) = create(&fs, b"f");
                drop(f);
                let rcu = {
                    let fs = fs.clone();
                    thread::spawn(move || fs.open(&Cred::root(), ino, libc::O_RDONLY).unwrap())
                };
                let counted = {
                    let fs = fs.clone();
                    thread::spawn(move || fs.open_path(&Cred::root(), ino.into()).unwrap())
                };
                let evictor = {
                    let fs = fs.clone();
                    thread::spawn(move || fs.inner.evict_inodes(4))
                };
                evictor.join().unwrap();
                let handles = [rcu.join().unwrap(), counted.join().unwrap()];
                let cached = fs.inner.iget(ino).unwrap();
                for h in &handles {
                    assert!(
                        std::ptr::eq(h.inode_ptr(), &*cached),
                        "a handle on an evicted inode"
                    );
                }
                assert_eq!(fs.inner.opens.open_count(&cached), 2);
                drop(cached);
                drop(handles);
                fs.inner.evict_inodes(4);
                fs.check().unwrap();
            },
            crate::sync::model_iterations(),
            3,
        );
    }

    /// The unlink of a file's last name races closes on two other lanes,
    /// one of which first opens a third handle from its own. The inode is
    /// freed exactly once, after its last handle (closed on a fourth
    /// lane), never while one is open, and never leaked; no lane keeps its
    /// key.
    #[test]
    fn model_last_closes_on_other_lanes_vs_unlink() {
        crate::sync::check_pct(
            || {
                let fs = Fs::new_in_memory();
                let r = Cred::root();
                let free_before = files_free(&fs);
                let (_, a) = create(&fs, b"f");
                let (_, b, _) = fs
                    .open_at(&r, ROOT_INO, b"f", libc::O_RDWR, 0, 0, false)
                    .unwrap();
                // SAFETY: only compared, never dereferenced.
                let key = test_key(unsafe { &*a.inode_ptr() });
                let closer = thread::spawn(move || drop(a));
                let reopener = thread::spawn(move || {
                    let c = b.reopen_unchecked(libc::O_RDONLY).unwrap();
                    drop(b);
                    c
                });
                let unlinker = {
                    let fs = fs.clone();
                    thread::spawn(move || fs.unlink(&Cred::root(), ROOT_INO, b"f").unwrap())
                };
                closer.join().unwrap();
                unlinker.join().unwrap();
                let c = reopener.join().unwrap();
                assert_eq!(files_free(&fs), free_before - 1, "freed while open");
                fs.check().unwrap();
                let last = thread::spawn(move || drop(c));
                last.join().unwrap();
                assert_eq!(files_free(&fs), free_before, "not freed once");
                assert!(!fs.inner.opens.holds_key(key), "a key outlived the free");
                fs.check().unwrap();
            },
            crate::sync::model_iterations(),
            3,
        );
    }

    /// Two files whose entries share a slot of a lane's cache: a close of
    /// one and an open of the other on that lane (which flushes the first
    /// one's delta into its global count) race the unlink of the first
    /// one's last name, whose seal sums the lanes. The first file is freed
    /// exactly once, after its close; no lane keeps its key.
    #[test]
    fn model_collision_flush_vs_seal() {
        crate::sync::check_pct(
            || {
                let fs = Fs::new_in_memory();
                let names: Vec<Vec<u8>> = (0..20).map(|i| format!("f{i}").into_bytes()).collect();
                let files: Vec<_> = names.iter().map(|n| create(&fs, n)).collect();
                // SAFETY: only hashed and compared, never dereferenced;
                // every file is open here.
                let inode = |f: &OpenFile| unsafe { &*f.inode_ptr() };
                let (i, j) = (0..files.len())
                    .find_map(|i| {
                        (i + 1..files.len())
                            .find(|&j| super::collide(inode(&files[i].1), inode(&files[j].1)))
                            .map(|j| (i, j))
                    })
                    .expect("no two of 20 inodes share one of 16 slots");
                let key = test_key(inode(&files[i].1));
                let y = files[j].0;
                let mut files = files;
                let hx = files.swap_remove(i).1;
                drop(files);
                let free_before = files_free(&fs);
                let lane = {
                    let fs = fs.clone();
                    thread::spawn(move || {
                        drop(hx);
                        let hy = fs.open(&Cred::root(), y, libc::O_RDONLY).unwrap();
                        drop(hy);
                    })
                };
                let unlinker = {
                    let fs = fs.clone();
                    let name = names[i].clone();
                    thread::spawn(move || fs.unlink(&Cred::root(), ROOT_INO, &name).unwrap())
                };
                lane.join().unwrap();
                unlinker.join().unwrap();
                assert_eq!(files_free(&fs), free_before + 1, "not freed once");
                assert!(!fs.inner.opens.holds_key(key), "a key outlived the free");
                fs.check().unwrap();
            },
            crate::sync::model_iterations(),
            3,
        );
    }

    /// The evictor finds a file open (its seal fails and leaves the review
    /// bit) and takes it off the LRU while the last handle closes on
    /// another lane: either the evictor sees the close and evicts it, or
    /// the close sees the bit and offers the file back to the LRU — never
    /// an unpinned inode off the LRU for good (`check`), and a later
    /// eviction can take it.
    #[test]
    fn model_evictor_marks_open_inode_vs_last_close() {
        crate::sync::check_pct(
            || {
                let fs = Fs::new_in_memory();
                let (ino, f) = create(&fs, b"f");
                let closer = thread::spawn(move || drop(f));
                let evictor = {
                    let fs = fs.clone();
                    thread::spawn(move || fs.inner.evict_inodes(4))
                };
                closer.join().unwrap();
                evictor.join().unwrap();
                fs.check().unwrap();
                fs.inner.evict_inodes(4);
                let mut cached = false;
                fs.inner.icache.for_each(&mut |i| cached |= i.ino == ino);
                assert!(!cached, "the closed file stayed in the cache");
                fs.check().unwrap();
            },
            crate::sync::model_iterations(),
            3,
        );
    }
}

/// What the conflict audit sees of opens and closes of one file on two
/// lanes (`--features audit`).
#[cfg(all(test, feature = "audit", not(lanefs_shuttle)))]
mod audit_tests {
    use crate::sync::audit::{self, Access, Target};
    use crate::{Cred, Fs, OpenFile};
    use lanefs_store::{Ino, ROOT_INO};
    use std::collections::BTreeSet;

    /// On a thread of lane `lane`: open `ino` and close the handle once
    /// unrecorded (a lane's first use in a mount), then record `op`.
    fn recorded(fs: &Fs, lane: usize, ino: Ino, op: impl FnOnce(&Fs) + Send) -> Vec<Access> {
        std::thread::scope(|s| {
            s.spawn(|| {
                lanefs_store::set_lane(lane);
                drop(fs.open(&Cred::root(), ino, libc::O_RDONLY).unwrap());
                audit::start();
                op(fs);
                audit::stop()
            })
            .join()
            .unwrap()
        })
    }

    fn lines(log: &[Access], writes: bool) -> BTreeSet<usize> {
        log.iter()
            .filter(|a| a.write || !writes)
            .filter_map(|a| match a.target {
                Target::Line(l) => Some(l),
                Target::Key(_) => None,
            })
            .collect()
    }

    /// Neither side writes a line the other reads or writes.
    fn assert_conflict_free(a: &[Access], b: &[Access], what: &str) {
        let shared: Vec<_> = lines(a, true)
            .intersection(&lines(b, false))
            .chain(lines(b, true).intersection(&lines(a, false)))
            .copied()
            .collect();
        let sites: Vec<_> = a
            .iter()
            .chain(b)
            .filter(|x| matches!(x.target, Target::Line(l) if shared.contains(&l)))
            .map(|x| x.site.to_string())
            .collect();
        assert!(
            shared.is_empty(),
            "{what}: shared lines written at {sites:?}"
        );
    }

    /// Two opens, an open and a close, and two closes of one file, on two
    /// lanes, while another handle (opened on a third lane) keeps it open:
    /// each writes only its lane's slot (before, both wrote the file's one
    /// open count and its `Arc` count).
    #[test]
    fn opens_and_closes_of_one_file_on_two_lanes_share_no_written_line() {
        let fs = Fs::new_in_memory();
        let flags = libc::O_CREAT | libc::O_RDWR;
        let (attr, keep, _) = fs
            .open_at(&Cred::root(), ROOT_INO, b"f", flags, 0o644, 0, false)
            .unwrap();
        let ino = attr.ino;
        let open = |fs: &Fs| std::mem::forget(fs.open(&Cred::root(), ino, libc::O_RDONLY));
        let a = recorded(&fs, 1, ino, open);
        let b = recorded(&fs, 2, ino, open);
        assert!(!lines(&a, true).is_empty(), "nothing recorded");
        assert_conflict_free(&a, &b, "open ‖ open");
        let h = |fs: &Fs| fs.open(&Cred::root(), ino, libc::O_RDONLY).unwrap();
        let (h1, h2): (OpenFile, OpenFile) = (h(&fs), h(&fs));
        let c = recorded(&fs, 1, ino, move |_| drop(h1));
        let d = recorded(&fs, 2, ino, move |_| drop(h2));
        assert_conflict_free(&c, &d, "close ‖ close");
        assert_conflict_free(&a, &d, "open ‖ close");
        drop(keep);
    }
}
