//! The LRU of unreferenced inodes, sharded by lane.
//!
//! An inode has at most one entry here, and has one exactly while its
//! `Life` has `ON_LRU` set: whoever sets the bit (`Life::mark_on_lru`, after
//! a last `put` or when `maybe_free` sees the last lookup/open go) pushes
//! the entry; whoever pops the entry owns the bit and settles it with
//! `Life::claim_for_evict`. Entries are removed lazily: a referenced or
//! pinned inode that reaches the front is dropped from the list once and
//! comes back only when it is released again, so eviction never rescans
//! pinned inodes (the "eviction cliff").
//!
//! Freed inodes. An inode freed while its entry is queued (`Life::kill`
//! found `ON_LRU`) is no file any more, but the entry holds its whole
//! `Inode` (about 1 KiB) and nothing pops it while the live inodes stay
//! under the budget. `FsInner` counts such entries (`lru_dead`). They used
//! to wait for a purge pass over every shard, run once they outnumbered
//! the cached inodes — so under a large inode budget a mass removal (`rm
//! -rf` of a million cached files) kept up to half a million freed inodes,
//! about 0.5 GiB, until the count caught up. A pass walks every entry, so
//! purging earlier than that would cost more than O(1) per freed inode;
//! and an entry cannot give back part of its inode, which is one
//! allocation (splitting it would add an indirection to every lookup and
//! stat). So a freed inode's entry is taken out *where it is*:
//! * Every entry carries its push's sequence number in its shard (shards
//!   number their pushes from 0; entries stay in that order, so a shard is
//!   sorted by it), and the pusher stores the entry's shard and number in
//!   the inode (`Life::lru_at`, on the line the push writes anyway).
//! * A free that found its entry queued notes that position on *its own
//!   lane's* shard ([`note_freed`](InodeLru::note_freed)), not on the
//!   entry's: frees on two lanes write no common line even when both
//!   entries sit in one shard (the conflict audit's `rmdir ‖ rmdir`, whose
//!   inodes the preparation lane pushed). Every [`FREED_BATCH`]th note on a
//!   shard takes that shard's notes and, shard by shard, finds each entry
//!   by binary search and, if its inode is DEAD, takes it
//!   (`Life::leave_lru_if_dead`, so exactly one taker counts it) and leaves
//!   a hole (`None`, 16 bytes) in its place. Pops skip holes; a shard whose
//!   holes are the most of its entries (and at least [`HOLES_MIN`])
//!   compacts, taking the holes and any DEAD entry out in one walk, which
//!   so removes more than half of what it walks: O(1) per hole. Cost per
//!   freed inode: O(1) amortised plus one search, O(log n) in the shard's
//!   length, under that shard's lock.
//! * So at most `FREED_BATCH - 1` noted entries per shard wait
//!   (`LRU_SHARDS × (FREED_BATCH - 1)`, about 0.5 MiB of inodes) and holes
//!   cost 16 bytes each, fewer than the shard's live entries. A note may
//!   miss: an evictor that popped the entry and gives it a second chance
//!   pushes it elsewhere after the free read its position, or the free
//!   read the position of an earlier push before the current pusher
//!   stored its own. Such entries stay counted and go as before: by a pop
//!   (`Claim::Gone`) or by `FsInner::purge_dead_lru`'s pass over every
//!   shard ([`remove_dead`](InodeLru::remove_dead)), once the counted dead
//!   outnumber the cached inodes.
//!
//! Locks: `shards[i]` (mutex) protects shard `i`'s queue, its holes count
//! and the notes of frees on its lanes; a leaf lock, held only for a push,
//! a pop, a note, the take-out of one shard's noted entries (one shard at
//! a time, never two), or one compaction of that queue (no inode lock, no
//! store call under it; the taken entries are dropped after it). Each
//! shard (its lock and queue header) starts a cache line of its own, so
//! lanes that push to and note on their own shards share no line.

use std::collections::VecDeque;

use lanefs_store::CacheLine;

use crate::inode::Inode;
use crate::sync::{Arc, Mutex};
#[cfg(test)]
use crate::sync::{AtomicUsize, Ordering};

/// Number of LRU shards (a power of two).
pub(crate) const LRU_SHARDS: usize = 16;
/// Bits of a position (`Life::lru_at`) that hold the shard; the rest hold
/// the sequence number (2^60 pushes per shard: centuries).
const SHARD_BITS: u32 = LRU_SHARDS.trailing_zeros();
const SEQ_MASK: u64 = (1 << (64 - SHARD_BITS)) - 1;

/// Notes of freed inodes' entries a shard gathers before it takes them out
/// (module header): the most that wait per shard, and the batch that pays
/// for the locks of the shards they sit in.
pub(crate) const FREED_BATCH: usize = 32;
/// Fewest holes that make a shard compact.
pub(crate) const HOLES_MIN: usize = 64;

fn position(shard: usize, seq: u64) -> u64 {
    debug_assert!(seq <= SEQ_MASK);
    ((shard as u64) << (64 - SHARD_BITS)) | seq
}

fn shard_of(at: u64) -> usize {
    (at >> (64 - SHARD_BITS)) as usize
}

fn seq_of(at: u64) -> u64 {
    at & SEQ_MASK
}

/// One shard: its entries, oldest first, each with its push's sequence
/// number (`None`: a hole left by a freed inode's entry taken out).
#[derive(Default)]
struct Queue {
    entries: VecDeque<(u64, Option<Arc<Inode>>)>,
    /// The sequence number of the next push.
    next_seq: u64,
    /// Entries that are holes.
    holes: usize,
    /// Positions of entries whose inodes frees on this shard's lanes found
    /// queued, not taken out yet.
    freed: Vec<u64>,
}

impl Queue {
    fn pop_front(&mut self) -> Option<Arc<Inode>> {
        while let Some((_, entry)) = self.entries.pop_front() {
            match entry {
                Some(inode) => return Some(inode),
                None => self.holes -= 1,
            }
        }
        None
    }

    /// Take out the entry pushed as `seq` if it is still here and its inode
    /// is DEAD, leaving a hole.
    fn take_dead(&mut self, seq: u64, dead: &mut Vec<Arc<Inode>>) {
        let Ok(i) = self.entries.binary_search_by_key(&seq, |e| e.0) else {
            return;
        };
        let entry = &mut self.entries[i].1;
        if entry.as_ref().is_some_and(|e| e.life.leave_lru_if_dead()) {
            dead.extend(entry.take());
            self.holes += 1;
        }
    }

    /// Drop the holes at either end; compact when holes are the most.
    fn tidy(&mut self, dead: &mut Vec<Arc<Inode>>) {
        while matches!(self.entries.front(), Some((_, None))) {
            self.entries.pop_front();
            self.holes -= 1;
        }
        while matches!(self.entries.back(), Some((_, None))) {
            self.entries.pop_back();
            self.holes -= 1;
        }
        if self.holes >= HOLES_MIN && self.holes * 2 > self.entries.len() {
            self.compact(dead);
        }
    }

    /// One walk: take out every hole and every DEAD inode's entry.
    fn compact(&mut self, dead: &mut Vec<Arc<Inode>>) {
        self.entries.retain_mut(|(_, entry)| {
            let take = match entry {
                None => return false,
                Some(inode) => inode.life.leave_lru_if_dead(),
            };
            if take {
                dead.extend(entry.take());
            }
            !take
        });
        self.holes = 0;
        // A queue that emptied gives its memory back (amortised: the walk
        // was as long).
        if self.entries.capacity() > 4 * self.entries.len().max(64) {
            self.entries.shrink_to(2 * self.entries.len());
        }
    }
}

/// One lane's queue, with its lock, on a line of its own.
type Shard = CacheLine<Mutex<Queue>>;

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
                .map(|_| CacheLine(Mutex::new(Queue::default())))
                .collect(),
            #[cfg(test)]
            popped: AtomicUsize::new(0),
        }
    }

    /// Add the entry its caller owes after a successful `mark_on_lru`.
    pub fn push(&self, inode: Arc<Inode>) {
        debug_assert!(inode.life.on_lru());
        let shard = crate::lane() % LRU_SHARDS;
        let mut q = self.shards[shard].lock();
        let seq = q.next_seq;
        q.next_seq += 1;
        inode.life.set_lru_at(position(shard, seq));
        q.entries.push_back((seq, Some(inode)));
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

    /// A free found `inode`'s entry queued (`Life::kill` returned `true`):
    /// note where it sits, on this lane's shard; every [`FREED_BATCH`]th
    /// note takes the noted entries out (module header). Returns the
    /// entries taken, for the caller to uncount and drop with no lock
    /// held.
    pub fn note_freed(&self, inode: &Inode) -> Vec<Arc<Inode>> {
        let at = inode.life.lru_at();
        let noted = {
            let mut q = self.shards[crate::lane() % LRU_SHARDS].lock();
            q.freed.push(at);
            if q.freed.len() < FREED_BATCH {
                return Vec::new();
            }
            std::mem::replace(&mut q.freed, Vec::with_capacity(FREED_BATCH))
        };
        self.take_noted(noted)
    }

    /// Take out the entries at `noted` whose inodes are DEAD, one shard's
    /// lock at a time.
    fn take_noted(&self, mut noted: Vec<u64>) -> Vec<Arc<Inode>> {
        // By shard, then by sequence number.
        noted.sort_unstable();
        let mut dead = Vec::new();
        for group in noted.chunk_by(|a, b| shard_of(*a) == shard_of(*b)) {
            // (`NOT_QUEUED` names the last shard and a number no push
            // reaches: a miss.)
            let mut q = self.shards[shard_of(group[0])].lock();
            for &at in group {
                q.take_dead(seq_of(at), &mut dead);
            }
            q.tidy(&mut dead);
        }
        dead
    }

    /// Take out, now, the entries this lane's shard has noted (model
    /// checks; frees batch them).
    #[cfg(all(test, lanefs_shuttle))]
    pub fn take_noted_now(&self) -> Vec<Arc<Inode>> {
        let noted = std::mem::take(&mut self.shards[crate::lane() % LRU_SHARDS].lock().freed);
        self.take_noted(noted)
    }

    /// Take every entry of a freed (`DEAD`) inode off the LRU, shard by
    /// shard, and return them (for the caller to drop with no lock held).
    /// Each shard's lock is held for one pass over its queue (which also
    /// drops its holes).
    pub fn remove_dead(&self) -> Vec<Arc<Inode>> {
        let mut dead = Vec::new();
        for shard in self.shards.iter() {
            shard.lock().compact(&mut dead);
        }
        dead
    }

    /// Entries (holes not counted; for tests and checks).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let q = s.lock();
                q.entries.len() - q.holes
            })
            .sum()
    }

    /// Entries plus holes (for tests: what the queues hold).
    #[cfg(all(test, not(lanefs_shuttle)))]
    pub fn slots(&self) -> usize {
        self.shards.iter().map(|s| s.lock().entries.len()).sum()
    }
}
