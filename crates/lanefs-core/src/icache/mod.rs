//! Inode cache: inode number → in-memory [`Inode`] (seed 000).
//!
//! Four designs behind [`InodeCache`], chosen by `FsConfig::variants.icache`
//! in `Fs::new`; all share the chained table of `table` and differ only in
//! its [`LockPolicy`](table::LockPolicy):
//! * `Rcu` (default): lookups lock-free under a crossbeam-epoch guard; a
//!   miss inserts a LOADING placeholder under one bucket lock (re-checking)
//!   and loads from the store outside any lock.
//! * `Global`: one global lock, taken for the search and again for the
//!   insert of a cold lookup (Linux before the seed).
//! * `RcuGlobalInsert`: lock-free search, inserts under the global lock (the
//!   seed's patch).
//! * `BucketLock`: a lock per bucket held by searches and inserts, a cold
//!   lookup searching and inserting in one section (hash-bl / lock array).
//!
//! Inode cache locking rules:
//! * The table's locks (bucket mutexes, the global mutex) protect chain
//!   changes, and searches in the locked designs. They are leaves: nothing
//!   else is taken, no store call made and no wait begun under them. So any
//!   lock (a directory's `meta` included) may be held around a cache call.
//! * Each inode's [`Life`] word (state + references + `ON_LRU`, see `life`)
//!   decides its life: lookups take a reference only by increment-if-live;
//!   eviction claims an inode only by CAS from (LIVE, 0 references) to
//!   FREEING, never by `Arc::strong_count`.
//! * Waiting: a lookup that meets a LOADING placeholder, a FREEING or a
//!   DEAD inode spins a bounded number of times, then yields ([`Backoff`]),
//!   and searches again — Linux's wait on `I_NEW` / `I_FREEING`. The threads
//!   waited for never wait on a cache lookup themselves while in that state
//!   (a loader only reads the store; an evictor takes the inode's own
//!   `meta`, which is never held around a lookup).
//! * Memory: the `Arc<Inode>` is the memory owner (the hash node holds one,
//!   counted references hold clones); hash nodes are freed through the
//!   epoch, so a reference handed out by `get_rcu` stays valid while the
//!   caller's guard is pinned.
//! * The LRU of unreferenced inodes (`lru`) has its own leaf locks.

mod life;
mod lru;
mod table;

use crate::sync::Arc;

use crossbeam_epoch::Guard;
use lanefs_store::{Ino, Result};

pub(crate) use life::{Claim, Life, State};
pub(crate) use lru::InodeLru;
#[cfg(all(test, not(lanefs_shuttle)))]
pub(crate) use lru::{FREED_BATCH, HOLES_MIN};

use crate::inode::Inode;
use crate::variants::IcacheVariant;

/// A counted reference from a lookup, and whether this call loaded it.
pub(crate) struct Loaded {
    pub inode: Arc<Inode>,
    pub new: bool,
}

/// What the core needs of an inode cache. Every reference returned by
/// `get`/`get_or_load` carries one count on the inode's `Life`, which the
/// caller gives back with `Life::put`.
pub(crate) trait InodeCache: Send + Sync {
    /// The LIVE cached inode, with a reference; `None` on a miss.
    fn get(&self, ino: Ino) -> Option<Arc<Inode>>;
    /// The cached inode, or the one `load` makes, with a reference. `load`
    /// runs outside any lock, while a LOADING placeholder holds the number;
    /// it returns an inode whose `Life` holds one reference (the caller's).
    /// `None` when `load` finds nothing.
    fn get_or_load(
        &self,
        ino: Ino,
        load: &mut dyn FnMut() -> Result<Option<Inode>>,
    ) -> Result<Option<Loaded>>;
    /// The hashed inode without taking a reference, valid while `guard` is
    /// pinned; `None` on a miss or a LOADING entry. It does not read the
    /// inode's life word (which every counted reference writes), so a
    /// lock-free walk shares no cache line with references taken on the
    /// inodes it passes: the inode may be FREEING (being evicted: its
    /// attributes and index are whole, and no change can be in flight —
    /// changes hold counted references) or freed (callers check the
    /// attribute mirror's `freed`, set before the inode turns DEAD).
    #[allow(dead_code)]
    fn get_rcu<'g>(&'g self, ino: Ino, guard: &'g Guard) -> Option<&'g Inode>;
    /// Insert a newly allocated inode (its number fresh from the store).
    fn insert_new(&self, inode: Arc<Inode>);
    /// Unhash `inode` if it is the cached object for its number. Returns
    /// whether it was removed.
    fn remove(&self, inode: &Inode) -> bool;
    /// Call `f` on every published inode (a snapshot, part by part; no
    /// lock held in `f`).
    fn for_each(&self, f: &mut dyn FnMut(&Arc<Inode>)) {
        for part in 0..self.parts() {
            self.for_each_in(part, f);
        }
    }
    /// How many parts the table's walks are cut into (at least one): page
    /// reclaim walks one part at a time, concurrent reclaimers different
    /// ones.
    fn parts(&self) -> usize;
    /// Call `f` on every published inode of part `part % parts()` (a
    /// snapshot; no lock held in `f`).
    fn for_each_in(&self, part: usize, f: &mut dyn FnMut(&Arc<Inode>));
    /// Published inodes, counted by walking the table (for checks).
    fn len(&self) -> usize;
}

/// The cache of `variant`, sized for `max_inodes`.
pub(crate) fn new_cache(variant: IcacheVariant, max_inodes: usize) -> Box<dyn InodeCache> {
    use table::*;
    match variant {
        IcacheVariant::Rcu => Box::new(Table::<RcuPolicy>::new(max_inodes)),
        IcacheVariant::Global => Box::new(Table::<GlobalPolicy>::new(max_inodes)),
        IcacheVariant::RcuGlobalInsert => Box::new(Table::<RcuGlobalInsertPolicy>::new(max_inodes)),
        IcacheVariant::BucketLock => Box::new(Table::<BucketLockPolicy>::new(max_inodes)),
    }
}

/// Spins before a waiter starts yielding the CPU.
const SPINS_BEFORE_YIELD: u32 = 64;

/// Bounded spin, then yield (through `crate::sync`, so model checks see it).
pub(crate) struct Backoff(u32);

impl Backoff {
    pub fn new() -> Self {
        Backoff(0)
    }

    pub fn wait(&mut self) {
        if self.0 < SPINS_BEFORE_YIELD {
            self.0 += 1;
            crate::sync::spin_hint();
        } else {
            crate::sync::yield_now();
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(all(test, lanefs_shuttle))]
mod model;
