//! The LRU of unreferenced inodes, sharded by lane.
//!
//! An inode has at most one entry here, and has one exactly while its
//! `Life` has `ON_LRU` set: whoever sets the bit (`Life::mark_on_lru`, after
//! a last `put` or when `maybe_free` sees the last lookup/open go) pushes
//! the entry; whoever pops the entry owns the bit and settles it with
//! `Life::claim_for_evict`. Entries are removed lazily: a referenced or
//! pinned inode that reaches the front is dropped from the list once and
//! comes back only when it is released again, so eviction never rescans
//! pinned inodes (the "eviction cliff"). The exception is an inode freed
//! while its entry was queued: nothing would pop that entry while the live
//! inodes stay under the budget, so its memory would be kept for good;
//! `FsInner` counts such entries (`lru_dead`) and takes them all out in one
//! pass ([`InodeLru::remove_dead`]) once they outnumber the cached inodes.
//!
//! Locks: `shards[i]` (mutex) protects shard `i`'s queue; a leaf lock, held
//! only for a push, a pop or one purge pass over that queue (no inode lock,
//! no store call under it; the purged entries are dropped after it). Each
//! shard (its lock and queue header) has a cache line of its own, so lanes
//! that push to their own shards share no line.

use std::collections::VecDeque;

use lanefs_store::CacheLine;

use crate::inode::Inode;
use crate::sync::{Arc, Mutex};
#[cfg(test)]
use crate::sync::{AtomicUsize, Ordering};

/// Number of LRU shards (a power of two).
pub(crate) const LRU_SHARDS: usize = 16;

/// One lane's queue, with its lock, on a line of its own.
type Shard = CacheLine<Mutex<VecDeque<Arc<Inode>>>>;

pub(crate) struct InodeLru {
    shards: Box<[Shard]>,
    /// Entries popped so far (tests count eviction work with it).
    #[cfg(test)]
    pub popped: AtomicUsize,
}

impl InodeLru {
    pub fn new() -> Self {
        InodeLru {
            shards: (0..LRU_SHARDS)
                .map(|_| CacheLine(Mutex::new(VecDeque::new())))
                .collect(),
            #[cfg(test)]
            popped: AtomicUsize::new(0),
        }
    }

    /// Add the entry its caller owes after a successful `mark_on_lru`.
    pub fn push(&self, inode: Arc<Inode>) {
        debug_assert!(inode.life.on_lru());
        let shard = crate::lane() % LRU_SHARDS;
        self.shards[shard].lock().push_back(inode);
    }

    /// The oldest entry of some shard (this lane's first), or `None` when
    /// every shard is empty.
    pub fn pop(&self) -> Option<Arc<Inode>> {
        #[cfg(test)]
        self.popped.fetch_add(1, Ordering::Relaxed);
        // This lane's shard first: no shared write beyond the shard locks.
        let start = crate::lane();
        (0..LRU_SHARDS).find_map(|k| self.shards[(start + k) % LRU_SHARDS].lock().pop_front())
    }

    /// Entries (for tests and checks).
    /// Take every entry of a freed (`DEAD`) inode off the LRU, shard by
    /// shard, and return them (for the caller to drop with no lock held).
    /// Each shard's lock is held for one pass over its queue.
    pub fn remove_dead(&self) -> Vec<Arc<Inode>> {
        let mut dead = Vec::new();
        for shard in self.shards.iter() {
            shard.lock().retain(|inode| {
                if inode.life.leave_lru_if_dead() {
                    dead.push(Arc::clone(inode));
                    false
                } else {
                    true
                }
            });
        }
        dead
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}
