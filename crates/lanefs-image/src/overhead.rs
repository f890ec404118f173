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
//! Less the home blocks the next checkpoint frees (`gone`): those of
//! objects freed, directories' emptied entry blocks, the chain blocks of
//! images that shrank (of a file with data pages, as far as a bound of one
//! extent a page shows: `InodeObj::next_home_blocks_max`). Copy-on-write
//! keeps them allocated until that checkpoint has written the new images
//! (a crash before must find the old ones), but they are free space for
//! `statfs` as soon as the store call that freed them, as the data pages
//! such a call frees are (the engine counts those free at once, and the
//! allocator hands them out after the checkpoint: `alloc.rs`, "Deferred
//! frees"). A page write that finds no block allocatable while some wait
//! checkpoints first (`Inner::alloc_data_block`), so what `statfs` offers
//! can be written; until then data leaves each group its share of the
//! reserve (`Overhead::group_share`), so that checkpoint finds the room
//! for its copy-on-write the reserve is there for. Until 2026-11 they
//! stayed counted until that checkpoint, which only a half-full journal or
//! cache pressure starts: `df` after `rm` and `lanefs sync` stayed below
//! its start until a remount.
//!
//! Locking: `hook` (mutex, a leaf: the hook only adds to the engine's
//! counters) is held while `meta` or `gone` changes and the hook hears of
//! it, so the watcher's first figure and every later change add up to
//! `meta - gone` (plus the reserve). `meta` (atomic) changes only at the
//! end of a checkpoint (one at a time); `gone` (atomic) there and after
//! each store call that changes an object's `InodeObj::gone` (set under
//! the object's shard lock, reported here once the call has released it).

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
    /// Of `meta`, the blocks the next checkpoint frees (module doc).
    gone: AtomicI64,
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
            gone: AtomicI64::new(0),
            reserve: geo.groups * GROUP_META_RESERVE_BLOCKS + headroom,
            hook: Mutex::new(None),
        }
    }

    /// Blocks file data cannot have once the next checkpoint has run.
    pub fn blocks(&self) -> u64 {
        let meta = self.meta.load(Ordering::Relaxed) - self.gone.load(Ordering::Relaxed);
        meta.max(0) as u64 + self.reserve
    }

    /// The fixed reserve shared out over `groups` groups: what data
    /// allocation leaves in each while home blocks wait (`gone`), so that
    /// the checkpoint that frees them finds the whole reserve.
    pub fn group_share(&self, groups: u64) -> u64 {
        self.reserve.div_ceil(groups.max(1))
    }

    /// Home blocks the next checkpoint frees (counted free already).
    pub fn gone(&self) -> u64 {
        self.gone.load(Ordering::Relaxed).max(0) as u64
    }

    /// Tell `hook` the overhead now, and each change later (it replaces an
    /// earlier watcher, which hears nothing more).
    pub fn watch(&self, hook: OverheadHook) {
        let mut h = self.hook.lock();
        hook(self.blocks() as i64);
        *h = Some(hook);
    }

    /// The homes' entry and chain blocks grew by `meta` (a checkpoint
    /// wrote its objects), and the part of them the next checkpoint frees
    /// by `gone`.
    pub fn changed(&self, meta: i64, gone: i64) {
        if meta == 0 && gone == 0 {
            return;
        }
        let h = self.hook.lock();
        self.meta.fetch_add(meta, Ordering::Relaxed);
        self.gone.fetch_add(gone, Ordering::Relaxed);
        if let (Some(f), true) = (&*h, meta != gone) {
            f(meta - gone);
        }
    }
}
