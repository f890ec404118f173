//! The journaled data blocks: blocks mapped to a page by a journal record
//! that recovery may still replay (docs/FORMAT.md, "One flush per
//! commit"). Recovery checks the CRC32C such a record carries against the
//! block, so the block must not be overwritten in place: a page in one of
//! these blocks is rewritten copy-on-write (`ImageStore::write_page`).
//!
//! Locking: `shards[b % JOURNALED_SHARDS]` (mutex, a leaf: nothing is
//! taken under it) protects that shard's two generations of block numbers:
//! * `cur`: blocks mapped by records appended since the last checkpoint
//!   took every gate. A block is added by `submit` while it holds its
//!   lane's gate, so a checkpoint (which holds every gate when it calls
//!   [`Journaled::rotate`]) sees exactly the blocks of the records its
//!   commit writes before the new journal tail.
//! * `old`: blocks of records before the tail a checkpoint is writing.
//!   They stay protected until its superblock is durable
//!   ([`Journaled::forget_old`]); a failed checkpoint leaves them (and the
//!   next rotate keeps them).
//!
//! Size: one entry per page mapped since the checkpoint before last, at
//! most the mapping records half a journal holds (a checkpoint starts when
//! it is half full): at most about 20 K per MiB of journal (53-byte records).
//!
//! No atomics. A block leaves both sets only at a checkpoint, and blocks
//! are never freed for reuse between checkpoints (frees are deferred), so a
//! stale "journaled" answer only costs a needless copy.

use std::collections::HashSet;
use std::hash::BuildHasherDefault;

use parking_lot::Mutex;

use crate::object::IntHasher;

/// Shards of the journaled-block set.
pub const JOURNALED_SHARDS: usize = 64;

type BlockSet = HashSet<u64, BuildHasherDefault<IntHasher>>;

#[derive(Default)]
struct Gens {
    cur: BlockSet,
    old: BlockSet,
}

/// The journaled data blocks (see the module docs).
pub struct Journaled {
    shards: Box<[Mutex<Gens>]>,
}

impl Default for Journaled {
    fn default() -> Self {
        Journaled {
            shards: (0..JOURNALED_SHARDS)
                .map(|_| Mutex::new(Gens::default()))
                .collect(),
        }
    }
}

impl Journaled {
    fn shard(&self, b: u64) -> &Mutex<Gens> {
        &self.shards[b as usize % JOURNALED_SHARDS]
    }

    /// `b` is mapped by a record being appended (caller holds a gate).
    pub fn insert(&self, b: u64) {
        self.shard(b).lock().cur.insert(b);
    }

    /// Whether a record recovery may replay maps `b`.
    pub fn contains(&self, b: u64) -> bool {
        let g = self.shard(b).lock();
        g.cur.contains(&b) || g.old.contains(&b)
    }

    /// A checkpoint (holding every gate) moves the tail past every record
    /// appended so far: their blocks become `old`.
    pub fn rotate(&self) {
        for s in self.shards.iter() {
            let mut g = s.lock();
            let cur = std::mem::take(&mut g.cur);
            if g.old.is_empty() {
                g.old = cur;
            } else {
                g.old.extend(cur);
            }
        }
    }

    /// The checkpoint's superblock is durable: no replay reaches the
    /// records of the `old` blocks any more.
    pub fn forget_old(&self) {
        for s in self.shards.iter() {
            s.lock().old.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_stay_journaled_until_the_checkpoint_after_them_completes() {
        let j = Journaled::default();
        j.insert(5);
        j.insert(69);
        assert!(j.contains(5) && j.contains(69) && !j.contains(6));
        j.rotate();
        j.insert(7);
        assert!(j.contains(5), "the checkpoint is still writing");
        j.forget_old();
        assert!(!j.contains(5) && !j.contains(69));
        assert!(j.contains(7), "appended after the rotate");
        // A failed checkpoint (no forget_old) keeps its blocks.
        j.rotate();
        j.insert(8);
        j.rotate();
        assert!(j.contains(7) && j.contains(8));
        j.forget_old();
        assert!(!j.contains(7) && !j.contains(8));
    }
}
