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
//! * `lanes[l]` (mutex, on lines of its own): lane `l`'s direct-mapped
//!   cache of (inode address, delta) entries. Taken by the opens and closes
//!   of the threads of lane `l` (alone: a leaf) and by sealers and
//!   reviewers (all used lanes, ascending, under the inode's `meta`).
//!   A collision flushes the old entry's delta into its inode's
//!   `count` (under the lane's lock). An entry's key is the inode's
//!   address, which never dangles: an inode leaves the cache (evicted or
//!   freed) only after a seal, which clears its entries from every lane
//!   that may hold one (below).
//! * `used` (atomic, SeqCst, on a line of its own): one more than the
//!   highest lane used, raised (`fetch_max`, only when it grows) by an open
//!   or close before it takes its lane's lock; sealers and reviewers take
//!   lanes `0..used` only, so lanes nobody uses cost nothing.
//! * `OpenCount::count` (atomic): the global part, changed by flushes
//!   (under the flushing lane's lock) and by sealers (under `meta` and
//!   every used lane's lock); set before the inode is hashed for a file
//!   born open (`NewNode::opens`).
//! * `OpenCount::state` (atomic, SeqCst; written only under the inode's
//!   `meta`): [`SEALED`] (a free or an eviction was decided: no handle may
//!   be made; an eviction given up clears it), [`SEALING`] (a seal is
//!   summing the lanes: an open waits, outside its lane's lock) and
//!   [`REVIEW`] (a seal or a review found the file open: its closes review,
//!   below).
//!
//! Sealing ([`Opens::seal`], under `meta`, by every decision that must not
//! meet a new handle: a free, an eviction) is exact: it sets `SEALING`
//! (SeqCst), then reads `used` (SeqCst), takes lanes `0..used` in order,
//! moves this inode's deltas into `count`, and seals iff `count` is 0. An
//! open takes its lane's lock and reads `state` under it (SeqCst), after
//! raising `used` past its lane (SeqCst): a Dekker pair, so either the
//! sealer's `used` covers the opener's lane (and their lane lock orders
//! them: the sealer sees the +1, or the opener sees `SEALING`/`SEALED`),
//! or the opener's read of `state` comes after `SEALING` was set and it
//! waits or fails. So a lane the sealer did not take holds no +1 of this
//! inode, only −1s (closes of handles whose +1 the sealer does see): the
//! sum the sealer reads is never below the true count, and a seal never
//! succeeds while a handle exists. Once sealed the count is 0 and no entry
//! of the inode is left in any lane: those it took were cleared, those it
//! did not take never held one (−1s there would need a +1 it saw).
//!
//! Zero detection: a plain close reads no other lane. A seal that fails,
//! and a review that finds the file open ([`Opens::review`], by whoever
//! would offer a linked inode back to the LRU), leave [`REVIEW`] set
//! (set before the lanes are read, the same Dekker pair as above with a
//! close's read of `state`); a close that sees it reviews under `meta`
//! (`FsInner::review_closed`): when the sum is 0 it frees an unlinked
//! inode (`maybe_free`) or offers a linked one to the LRU, and clears the
//! bit. Either the reviewer (or sealer) counts the close's −1 or the close
//! sees the bit, so the last close of an orphan frees it, and an inode the
//! evictor found open goes back to the LRU at its last close. Closes of a
//! file with no decision pending write only their lane.
//!
//! Departures from sv6's Refcache: no epochs of deltas and no delayed zero
//! detection — a decision that needs the count (free, eviction) sums the
//! used lanes at once under their locks, which is exact but costs one lock
//! per used lane; zero is detected synchronously by closes of inodes a
//! decision is waiting on (`REVIEW`), not by a background review. Keys are
//! inode addresses, kept valid by the rule that an inode leaves the cache
//! only sealed (and its memory only after an epoch, `icache`).

use crate::inode::{Inode, OwnLine};
use crate::sync::{AtomicI64, AtomicU32, AtomicUsize, Mutex, MutexGuard, Ordering};

/// Lanes with a cache of their own (more lanes share them).
pub(crate) const OPEN_LANES: usize = 64;
/// Entries of a lane's direct-mapped cache (a power of two).
const SLOTS: usize = 16;

/// `OpenCount::state`: no handle may be made (a free or an eviction).
pub(crate) const SEALED: u32 = 1;
/// `OpenCount::state`: a seal is summing the lanes; opens wait.
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

#[derive(Clone, Copy)]
struct Slot {
    /// The inode's address; 0: empty.
    key: usize,
    delta: i64,
}

/// One lane's direct-mapped cache of deltas.
struct LaneCache {
    slots: [Slot; SLOTS],
}

fn key_of(inode: &Inode) -> usize {
    inode as *const Inode as usize
}

fn slot_of(key: usize) -> usize {
    // Inodes are 896 bytes: drop the low bits, then mix.
    ((key >> 6).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros())) as usize
}

impl LaneCache {
    /// Add `d` to `inode`'s delta, flushing a colliding entry into its own
    /// inode's global count first.
    fn add(&mut self, inode: &Inode, d: i64) {
        let key = key_of(inode);
        let s = &mut self.slots[slot_of(key)];
        if s.key != key {
            if s.key != 0 && s.delta != 0 {
                // SAFETY: an entry's inode is alive: it leaves the cache
                // (and later its memory) only after a seal cleared its
                // entries from every lane that may hold one (module doc),
                // and this lane's lock is held, so no seal clears this one
                // meanwhile.
                let other = unsafe { &*(s.key as *const Inode) };
                other.opens.count.fetch_add(s.delta, Ordering::AcqRel);
            }
            *s = Slot { key, delta: 0 };
        }
        s.delta += d;
    }

    /// Move `inode`'s delta into its global count and clear its entry.
    fn flush(&mut self, inode: &Inode) {
        let key = key_of(inode);
        let s = &mut self.slots[slot_of(key)];
        if s.key == key {
            if s.delta != 0 {
                inode.opens.count.fetch_add(s.delta, Ordering::AcqRel);
            }
            *s = Slot { key: 0, delta: 0 };
        }
    }

    fn delta(&self, inode: &Inode) -> i64 {
        let key = key_of(inode);
        let s = &self.slots[slot_of(key)];
        if s.key == key {
            s.delta
        } else {
            0
        }
    }
}

/// The lanes' caches of one file system (module doc).
pub(crate) struct Opens {
    lanes: Box<[OwnLine<Mutex<LaneCache>>]>,
    used: OwnLine<AtomicUsize>,
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
                .map(|_| {
                    OwnLine(Mutex::new(LaneCache {
                        slots: [Slot { key: 0, delta: 0 }; SLOTS],
                    }))
                })
                .collect(),
            used: OwnLine(AtomicUsize::new(0)),
        }
    }

    /// This thread's lane, counted as used (before its lock is taken: the
    /// Dekker pair of the module doc).
    fn my_lane(&self) -> &Mutex<LaneCache> {
        let l = this_lane();
        if self.used.load(Ordering::SeqCst) <= l {
            self.used.fetch_max(l + 1, Ordering::SeqCst);
        }
        &self.lanes[l]
    }

    /// Make a handle: +1 on this lane unless a free or an eviction sealed
    /// the count (`false`); waits out a seal in progress. The caller holds
    /// a counted reference, a handle, or an epoch guard over the inode
    /// found in the cache (`open_rcu`).
    pub fn raise(&self, inode: &Inode) -> bool {
        let lane = self.my_lane();
        let mut backoff = crate::icache::Backoff::new();
        loop {
            {
                let mut c = lane.lock();
                let st = inode.opens.state.load(Ordering::SeqCst);
                if st & SEALED != 0 {
                    return false;
                }
                if st & SEALING == 0 {
                    c.add(inode, 1);
                    return true;
                }
            }
            // The sealer may need this lane's lock: wait outside it.
            backoff.wait();
        }
    }

    /// A handle is gone: −1 on this lane. Returns whether a decision waits
    /// on the count ([`REVIEW`]): the caller, still pinning the inode's
    /// memory with an epoch guard, then reviews (`FsInner::review_closed`).
    pub fn lower(&self, inode: &Inode) -> bool {
        let lane = self.my_lane();
        let mut c = lane.lock();
        c.add(inode, -1);
        inode.opens.state.load(Ordering::SeqCst) & REVIEW != 0
    }

    /// Every used lane's lock, in order, after `state` was written (SeqCst:
    /// the read of `used` comes after it).
    fn lock_used(&self) -> Vec<MutexGuard<'_, LaneCache>> {
        let used = self.used.load(Ordering::SeqCst).min(OPEN_LANES);
        self.lanes[..used].iter().map(|l| l.lock()).collect()
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
        let mut lanes = self.lock_used();
        for c in lanes.iter_mut() {
            c.flush(inode);
        }
        let total = inode.opens.count.load(Ordering::SeqCst);
        debug_assert!(total >= 0, "more closes than opens");
        let sealed = total == 0;
        st.store(if sealed { SEALED } else { REVIEW }, Ordering::SeqCst);
        drop(lanes);
        sealed
    }

    /// Undo an eviction's seal (by an evictor that then gave the inode
    /// back, under `meta`): no handle could be made meanwhile.
    pub fn unseal(&self, inode: &Inode) {
        debug_assert_eq!(inode.opens.state.load(Ordering::Relaxed), SEALED);
        debug_assert_eq!(inode.opens.count.load(Ordering::Relaxed), 0);
        inode.opens.state.store(0, Ordering::SeqCst);
    }

    /// Under `meta`: whether no handle is open. If one is, [`REVIEW`] is
    /// left set, so that the closes review (the last one sees 0); if none
    /// is, it is cleared.
    pub fn review(&self, inode: &Inode) -> bool {
        let st = &inode.opens.state;
        if st.load(Ordering::SeqCst) & SEALED != 0 {
            return true;
        }
        st.fetch_or(REVIEW, Ordering::SeqCst);
        let mut lanes = self.lock_used();
        for c in lanes.iter_mut() {
            c.flush(inode);
        }
        let idle = inode.opens.count.load(Ordering::SeqCst) == 0;
        if idle {
            st.fetch_and(!REVIEW, Ordering::SeqCst);
        }
        drop(lanes);
        idle
    }

    /// Handles open now: the sum over the used lanes (exact while no open
    /// or close of the inode runs; `check`, tests).
    pub fn open_count(&self, inode: &Inode) -> i64 {
        let lanes = self.lock_used();
        inode.opens.count.load(Ordering::SeqCst) + lanes.iter().map(|c| c.delta(inode)).sum::<i64>()
    }

    /// Lanes used so far (tests).
    #[cfg(test)]
    pub fn used(&self) -> usize {
        self.used.load(Ordering::SeqCst)
    }

    /// Whether any lane holds an entry for the inode at `key` (tests: no
    /// key may outlive a seal).
    #[cfg(test)]
    pub fn holds_key(&self, key: usize) -> bool {
        self.lanes
            .iter()
            .any(|l| l.lock().slots.iter().any(|s| s.key == key))
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
    slot_of(key_of(a)) == slot_of(key_of(b))
}
