//! The blocks of an image that file data cannot have, as the engine is
//! told of them ([`Store::watch_overhead`](lanefs_store::Store::watch_overhead)):
//! the entry and chain blocks the objects' homes take now, and a fixed
//! reserve for the ones the next checkpoints write before they free the
//! old (copy-on-write) and for the per-group room data allocation leaves
//! (`GROUP_META_RESERVE_BLOCKS`). Without it the engine counted only data
//! pages against the image's data blocks: it accepted writes (and
//! `fallocate`s) the image could not place once directories had taken
//! blocks, and they failed at writeback, after `write` had returned.
//!
//! Locking: `hook` (mutex, a leaf: the hook only adds to the engine's
//! counters) is held while `meta` changes and the hook hears of it, so the
//! watcher's first figure and every later change add up to `meta`. `meta`
//! (atomic) changes only at the end of a checkpoint (one at a time).

use std::sync::atomic::{AtomicI64, Ordering};

use lanefs_store::OverheadHook;
use parking_lot::Mutex;

use crate::layout::Geometry;
use crate::store::GROUP_META_RESERVE_BLOCKS;

/// Most blocks of the fixed reserve beyond the groups' own (16 MiB, as
/// ext4's reserved clusters).
const HEADROOM_MAX: u64 = 4096;

/// See the module doc.
pub(crate) struct Overhead {
    meta: AtomicI64,
    reserve: u64,
    hook: Mutex<Option<OverheadHook>>,
}

impl Overhead {
    /// `meta`: entry and chain blocks the homes take at open.
    pub fn new(geo: &Geometry, meta: u64) -> Overhead {
        // 2 % of the data blocks (ext4 keeps the same for its metadata),
        // above what each group keeps from data allocation.
        let headroom = (geo.data_blocks() / 50).min(HEADROOM_MAX);
        Overhead {
            meta: AtomicI64::new(meta as i64),
            reserve: geo.groups * GROUP_META_RESERVE_BLOCKS + headroom,
            hook: Mutex::new(None),
        }
    }

    /// Blocks file data cannot have now.
    pub fn blocks(&self) -> u64 {
        self.meta.load(Ordering::Relaxed).max(0) as u64 + self.reserve
    }

    /// Tell `hook` the overhead now, and each change later (it replaces an
    /// earlier watcher, which hears nothing more).
    pub fn watch(&self, hook: OverheadHook) {
        let mut h = self.hook.lock();
        hook(self.blocks() as i64);
        *h = Some(hook);
    }

    /// The homes' entry and chain blocks grew by `delta` (a checkpoint
    /// wrote its objects).
    pub fn changed(&self, delta: i64) {
        if delta == 0 {
            return;
        }
        let h = self.hook.lock();
        self.meta.fetch_add(delta, Ordering::Relaxed);
        if let Some(f) = &*h {
            f(delta);
        }
    }
}
