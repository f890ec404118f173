//! Inode cache: inode number → in-memory [`Inode`].
//!
//! Locking rules:
//! * `shards[i]` (RwLock) protects the map of shard `i` (inode numbers hashed
//!   by a multiplicative hash). Read for hits; write for inserting a loaded
//!   inode (after re-checking that no other thread inserted it first), for
//!   removal and for eviction. A miss reads the record from the store *under
//!   the shard write lock*, so a load cannot race with the eviction or the
//!   writeback of the same inode.
//! * Under a shard lock only `Inode::meta`/`body` are taken, and only with
//!   `try_lock` (the eviction callback): the shard lock is never waited for
//!   while holding an inode lock and vice versa.
//!
//! A reference is an `Arc<Inode>` cloned under the shard lock; an entry
//! whose `Arc` count is 1 is held by nobody but the cache, and since new
//! references are only made under the shard lock, the eviction callback can
//! trust that count while it holds the shard write lock.
//! Milestone 2 replaces the shard locks on the lookup path with an
//! epoch-protected lock-free table (seed 000) behind this same trait.

use std::sync::Arc;

use foldhash::{HashMap, HashMapExt};
use lanefs_store::{Ino, Result};
use parking_lot::RwLock;

use crate::inode::Inode;

/// What the core needs of an inode cache.
pub(crate) trait InodeCache: Send + Sync {
    /// The cached inode, if any.
    fn get(&self, ino: Ino) -> Option<Arc<Inode>>;
    /// The cached inode, or the one `load` makes (inserted first); `None`
    /// when `load` finds nothing.
    fn get_or_load(
        &self,
        ino: Ino,
        load: &mut dyn FnMut() -> Result<Option<Inode>>,
    ) -> Result<Option<Arc<Inode>>>;
    /// Insert a new inode, replacing any stale entry of the same number.
    fn insert(&self, inode: Arc<Inode>);
    /// Remove `inode` if it is the cached object for its number (a new inode
    /// may already have taken the number). Returns whether it was removed.
    fn remove(&self, inode: &Inode) -> bool;
    /// Offer up to `nr` entries (from shard `start` on) to `try_evict`,
    /// which writes back and returns `true` to have the entry removed.
    /// Returns the number removed.
    fn evict(
        &self,
        start: usize,
        nr: usize,
        try_evict: &mut dyn FnMut(&Arc<Inode>) -> bool,
    ) -> usize;
    /// Call `f` on every cached inode (a snapshot; no lock held during `f`).
    fn for_each(&self, f: &mut dyn FnMut(&Arc<Inode>));
    fn len(&self) -> usize;
}

type Shard = RwLock<HashMap<Ino, Arc<Inode>>>;

/// Sharded hash map cache.
pub(crate) struct ShardedInodeCache {
    shards: Box<[Shard]>,
}

const SHARDS: usize = 256;

impl ShardedInodeCache {
    pub fn new() -> Self {
        ShardedInodeCache {
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
        }
    }

    fn shard(&self, ino: Ino) -> &Shard {
        let h = ino.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56;
        &self.shards[h as usize % SHARDS]
    }
}

impl InodeCache for ShardedInodeCache {
    fn get(&self, ino: Ino) -> Option<Arc<Inode>> {
        self.shard(ino).read().get(&ino).cloned()
    }

    fn get_or_load(
        &self,
        ino: Ino,
        load: &mut dyn FnMut() -> Result<Option<Inode>>,
    ) -> Result<Option<Arc<Inode>>> {
        if let Some(i) = self.get(ino) {
            return Ok(Some(i));
        }
        let mut shard = self.shard(ino).write();
        if let Some(i) = shard.get(&ino) {
            return Ok(Some(i.clone()));
        }
        let Some(inode) = load()? else {
            return Ok(None);
        };
        let inode = Arc::new(inode);
        shard.insert(ino, inode.clone());
        Ok(Some(inode))
    }

    fn insert(&self, inode: Arc<Inode>) {
        self.shard(inode.ino).write().insert(inode.ino, inode);
    }

    fn remove(&self, inode: &Inode) -> bool {
        let mut shard = self.shard(inode.ino).write();
        match shard.get(&inode.ino) {
            Some(cached) if std::ptr::eq(Arc::as_ptr(cached), inode) => {
                shard.remove(&inode.ino);
                true
            }
            _ => false,
        }
    }

    fn evict(
        &self,
        start: usize,
        nr: usize,
        try_evict: &mut dyn FnMut(&Arc<Inode>) -> bool,
    ) -> usize {
        let mut removed = 0;
        for k in 0..SHARDS {
            if removed >= nr {
                break;
            }
            let mut shard = self.shards[(start + k) % SHARDS].write();
            shard.retain(|_, inode| {
                if removed < nr && try_evict(inode) {
                    removed += 1;
                    false
                } else {
                    true
                }
            });
        }
        removed
    }

    fn for_each(&self, f: &mut dyn FnMut(&Arc<Inode>)) {
        for shard in self.shards.iter() {
            let snapshot: Vec<Arc<Inode>> = shard.read().values().cloned().collect();
            for i in &snapshot {
                f(i);
            }
        }
    }

    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read().len()).sum()
    }
}
