//! Orphan bookkeeping: inodes whose link count reached zero while they were
//! still open or looked up. They are freed at the last close or forget; the
//! table lists them so a checker (and, in milestone 2, crash recovery on the
//! image store) can find them.
//!
//! Locking: `shards[i]` (mutex) protects the set of orphans hashed to shard
//! `i` by inode number. A call holds one shard lock and nothing else; it may
//! be taken while the caller holds directory or inode locks (it is a leaf).
//! Milestone 2 replaces this with seed 002's slot blocks (atomic free count
//! per block, lane-hashed start, compare-and-swap slot claim).

use std::collections::HashSet;

use lanefs_store::Ino;
use parking_lot::Mutex;

/// Where unlinked-but-live inodes are recorded.
pub trait OrphanTable: Send + Sync {
    /// Record `ino` (idempotent).
    fn add(&self, ino: Ino);
    /// Forget `ino` (absent is fine).
    fn remove(&self, ino: Ino);
    /// Every recorded inode, in no particular order.
    fn list(&self) -> Vec<Ino>;
}

/// Sharded sets keyed by inode number.
pub struct ShardedOrphanTable {
    shards: Box<[Mutex<HashSet<Ino>>]>,
}

impl ShardedOrphanTable {
    pub fn new() -> ShardedOrphanTable {
        ShardedOrphanTable {
            shards: (0..16).map(|_| Mutex::new(HashSet::new())).collect(),
        }
    }

    fn shard(&self, ino: Ino) -> &Mutex<HashSet<Ino>> {
        &self.shards[(ino as usize) % self.shards.len()]
    }
}

impl Default for ShardedOrphanTable {
    fn default() -> Self {
        Self::new()
    }
}

impl OrphanTable for ShardedOrphanTable {
    fn add(&self, ino: Ino) {
        self.shard(ino).lock().insert(ino);
    }

    fn remove(&self, ino: Ino) {
        self.shard(ino).lock().remove(&ino);
    }

    fn list(&self) -> Vec<Ino> {
        self.shards
            .iter()
            .flat_map(|s| s.lock().iter().copied().collect::<Vec<_>>())
            .collect()
    }
}
