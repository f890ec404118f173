//! The store's memory budget: reading evicted objects back from their
//! homes, evicting clean ones, checkpointing when unsaved objects pile up,
//! and listing live inodes when not every object is held.
//!
//! The budget (`ImageConfig::cache_bytes`) is split evenly over the
//! `SHARDS` shard maps (inode numbers spread evenly over them), so no
//! counter is shared between shards: each shard keeps its own estimate
//! (`cache.rs`) under its own mutex. Locks: everything here runs under the
//! shard mutex of the object concerned (taken by the caller, in the order
//! of `store.rs`), except [`Inner::relieve`], which a call runs after it
//! has released every lock (it takes a checkpoint: `ckpt`, then gates,
//! ...), and [`Inner::list_live`], which holds `ckpt` (outermost) for the
//! whole scan so that no home moves while it reads the tables, then one
//! shard mutex at a time.
//!
//! Atomics (in [`CacheLimits`]): `published[s]` (`Padded`, Relaxed) publishes shard `s`'s unsaved
//! bytes; it is stored only by a holder of shard `s`'s mutex (after a
//! call's changes, after a checkpoint's), and summed without locks by a
//! call whose own shard is over its share of the dirty limit, to decide
//! whether the store as a whole is (a hint: a stale sum only moves a
//! checkpoint by one call).
//!
//! `never_written[g][w]` (Relaxed): bit `i % 64` of word `i / 64` says
//! that inode `i` of group `g` has two all-zero slots on disk, so an absent
//! object of that number is a fresh one (no read). Set at open from the
//! tables, cleared by a checkpoint's post-write update of a written slot,
//! under the number's shard mutex, which also orders every read of it (in
//! `ensure`, under the same mutex). A word covers numbers of many shards,
//! hence an atomic.
//!
//! Bounds: a shard holds its share of the budget, plus the objects in use
//! by calls under way and the one its latest call used (`cache.rs`), plus unsaved objects (all shards together up to
//! about twice the dirty limit `max(budget / 2, UNSAVED_MIN)`; they are
//! also bounded by the journal, which a checkpoint empties when half
//! full), plus objects that are never evictable (bad ones, link count 0
//! with an orphan slot). Each call moves the CLOCK hand at most
//! `EVICT_STEPS` times, so eviction is amortised over calls; a checkpoint
//! brings every shard under its share (`trim_all`).

use std::sync::atomic::{AtomicU64, Ordering};

use lanefs_store::{Ino, Result};

use crate::cache::ObjMap;
use crate::itable::read_home;
use crate::layout::{BLOCK, SLOT, SLOTS_PER_BLOCK};
use crate::object::{self, InodeObj, SLOT_LIVE};
use crate::store::{shard, Inner, SHARDS};

/// Most CLOCK steps one call takes (eviction is amortised over calls).
pub const EVICT_STEPS: usize = 32;
/// Least unsaved bytes (over all shards) before a call checkpoints: with
/// a tiny budget every few calls would checkpoint otherwise.
pub const UNSAVED_MIN: u64 = 256 << 10;

/// A shard's published unsaved bytes, on its own cache line.
#[repr(align(64))]
#[derive(Debug, Default)]
pub struct Padded(pub AtomicU64);

/// Limits of the object cache.
#[derive(Debug, Default)]
pub struct CacheLimits {
    /// Per shard: clean objects are evicted above this (`None`: unbounded).
    pub shard_bytes: Option<u64>,
    /// The dirty limit: unsaved bytes of all shards above this make a
    /// call checkpoint.
    pub unsaved: u64,
    /// Per shard: published unsaved bytes (module docs).
    pub published: Box<[Padded]>,
    /// Per group, one bit per inode number: its slots are all zero on disk
    /// (never written), so an absent object is a fresh one without reading
    /// them (module docs).
    pub never_written: Box<[Box<[AtomicU64]>]>,
}

impl CacheLimits {
    pub fn new(cache_bytes: Option<u64>, never_written: Vec<Vec<u64>>) -> CacheLimits {
        match cache_bytes {
            None => CacheLimits::default(),
            Some(b) => CacheLimits {
                shard_bytes: Some(b / SHARDS as u64),
                unsaved: (b / 2).max(UNSAVED_MIN),
                published: (0..SHARDS).map(|_| Padded::default()).collect(),
                never_written: never_written
                    .into_iter()
                    .map(|g| g.into_iter().map(AtomicU64::new).collect())
                    .collect(),
            },
        }
    }

    pub fn bounded(&self) -> bool {
        self.shard_bytes.is_some()
    }
}

/// What the object cache holds, summed over the shards (each read under
/// its own lock, so a sum taken while calls run is approximate).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub objects: u64,
    /// Estimated bytes held: the objects, and the shard maps at their
    /// capacity.
    pub bytes: u64,
    /// Part of `bytes` with changes not at their homes yet.
    pub unsaved_bytes: u64,
    /// Objects read back from their homes since open.
    pub reads: u64,
    /// Objects evicted since open.
    pub evictions: u64,
}

/// How far a shard is over its dirty limit after a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Pressure {
    None,
    /// Over the limit: checkpoint unless one is running.
    Soft,
    /// Over twice the limit: checkpoint (wait for the running one).
    Hard,
}

impl Inner {
    /// Make sure the object of `ino` is in `m` (its shard, locked): under a
    /// budget, one not held is read back from its home. Unbounded, every
    /// object with a home is held from open, so an absent one is free.
    pub fn ensure(&self, m: &mut ObjMap, ino: Ino) -> Result<()> {
        if !self.limits.bounded() || m.contains(ino) {
            return Ok(());
        }
        if self.never_written(ino) {
            m.insert(ino, InodeObj::default());
            return Ok(());
        }
        let obj = read_home(&*self.dev, &self.geo, ino)?;
        m.insert(ino, obj);
        m.reads += 1;
        Ok(())
    }

    fn never_written_bit(&self, ino: Ino) -> Option<(&AtomicU64, u64)> {
        let (g, i) = self.geo.ino_place(ino)?;
        let word = self
            .limits
            .never_written
            .get(g as usize)?
            .get((i / 64) as usize)?;
        Some((word, 1 << (i % 64)))
    }

    fn never_written(&self, ino: Ino) -> bool {
        self.never_written_bit(ino)
            .is_some_and(|(w, m)| w.load(Ordering::Relaxed) & m != 0)
    }

    /// A checkpoint wrote a slot of `ino` (caller holds its shard).
    pub fn mark_written(&self, ino: Ino) {
        if let Some((w, m)) = self.never_written_bit(ino) {
            w.fetch_and(!m, Ordering::Relaxed);
        }
    }

    /// Evict clean objects of `m` while it is over its share (bounded).
    pub fn trim(&self, m: &mut ObjMap) {
        if let Some(limit) = self.limits.shard_bytes {
            m.evict(limit, EVICT_STEPS);
        }
    }

    /// Publish shard `s`'s unsaved bytes (`m` is shard `s`, locked) and
    /// say whether the store is over its dirty limit: summed over every
    /// shard only when this one is over its share.
    /// At the end of a checkpoint, which made objects clean: bring every
    /// shard under its share (up to two turns of the hand each: the first
    /// may only clear use marks). Not on a call's path; it costs about
    /// what the checkpoint's own pass over the held objects does.
    pub fn trim_all(&self) {
        let Some(limit) = self.limits.shard_bytes else {
            return;
        };
        for s in self.shards.iter() {
            let mut m = s.lock();
            let steps = 2 * m.len() + 1;
            m.evict(limit, steps);
        }
    }

    /// Held objects, summed over the shards (the registry's estimate of
    /// what [`shrink`](Self::shrink) could give back). None when unbounded:
    /// an object evicted there could not be told from a free number.
    pub fn reclaimable(&self) -> usize {
        if !self.limits.bounded() {
            return 0;
        }
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// Memory pressure (the engine's shrinker in the reclaim registry):
    /// drop up to about `nr` clean objects whatever the budget, moving each
    /// shard's CLOCK hand as a call over its share does (used objects lose
    /// their mark first), at most `2 × nr / SHARDS + 1` steps per shard,
    /// one shard mutex at a time. Unsaved objects stay (a checkpoint makes
    /// them clean). Unbounded stores drop nothing (see `reclaimable`).
    pub fn shrink(&self, nr: usize) -> usize {
        if !self.limits.bounded() || nr == 0 {
            return 0;
        }
        let steps = 2 * nr / SHARDS + 1;
        let mut dropped = 0;
        for s in self.shards.iter() {
            if dropped >= nr {
                break;
            }
            dropped += s.lock().evict(0, steps);
        }
        dropped
    }

    pub fn pressure(&self, s: usize, m: &ObjMap) -> Pressure {
        let l = &self.limits;
        if !l.bounded() {
            return Pressure::None;
        }
        let (_, unsaved) = m.bytes();
        l.published[s].0.store(unsaved, Ordering::Relaxed);
        if unsaved <= l.unsaved / SHARDS as u64 {
            return Pressure::None;
        }
        let total: u64 = l
            .published
            .iter()
            .map(|p| p.0.load(Ordering::Relaxed))
            .sum();
        if total > 2 * l.unsaved {
            Pressure::Hard
        } else if total > l.unsaved {
            Pressure::Soft
        } else {
            Pressure::None
        }
    }

    /// Checkpoint so that unsaved objects become clean and evictable. Run
    /// by a call that left one of `shards` over its dirty limit, with no
    /// lock held. A soft call leaves it to a checkpoint already running; a
    /// hard one waits its turn and checkpoints unless the shards are back
    /// under their limit by then.
    pub fn relieve(&self, pressure: Pressure, shards: &[usize]) -> Result<()> {
        if pressure == Pressure::Soft && self.ckpt.is_locked() {
            return Ok(());
        }
        let still = shards
            .iter()
            .any(|&s| self.pressure(s, &self.shards[s].lock()) != Pressure::None);
        if still {
            self.checkpoint()?;
        }
        Ok(())
    }

    pub fn cache_stats(&self) -> CacheStats {
        let mut st = CacheStats::default();
        for s in self.shards.iter() {
            let m = s.lock();
            let (_, u) = m.bytes();
            st.objects += m.len() as u64;
            st.bytes += m.footprint();
            st.unsaved_bytes += u;
            st.reads += m.reads;
            st.evictions += m.evictions;
        }
        st
    }

    /// Every live inode: held objects as they are, the others as their
    /// homes say (the newer valid slot is live and holds a record). Only
    /// the tables below the high-water marks are read (the pairs above
    /// are all zero); held objects above them (created since the last
    /// checkpoint) are listed from the shards.
    pub fn list_live(&self) -> Result<Vec<Ino>> {
        let st = self.ckpt.lock();
        let geo = &self.geo;
        let bs = BLOCK as u64;
        let inodes_per_block = SLOTS_PER_BLOCK / 2;
        let chunk_blocks = 256u64.min(geo.itable_blocks.max(1));
        let mut buf = vec![0u8; chunk_blocks as usize * BLOCK];
        let mut live = Vec::new();
        for g in 0..geo.groups {
            let mut blk = 0;
            let table_blocks = st.marks[g as usize].div_ceil(inodes_per_block);
            while blk < table_blocks {
                let nb = chunk_blocks.min(table_blocks - blk);
                let table = &mut buf[..nb as usize * BLOCK];
                self.dev
                    .read_at(table, (geo.group_first_block(g) + blk) * bs)?;
                for k in 0..nb * inodes_per_block {
                    let ino = geo.ino_of(g, blk * inodes_per_block + k);
                    let at = (2 * k) as usize * SLOT;
                    let m = self.shards[shard(ino)].lock();
                    let is_live = match m.get(&ino) {
                        Some(o) => o.rec.is_some(),
                        None => home_is_live(&table[at..at + 2 * SLOT], ino),
                    };
                    if is_live {
                        live.push(ino);
                    }
                }
                blk += nb;
            }
        }
        for s in self.shards.iter() {
            let m = s.lock();
            live.extend(m.iter().filter_map(|(&ino, o)| {
                let (g, i) = geo.ino_place(ino)?;
                (i >= st.marks[g as usize].div_ceil(inodes_per_block) * inodes_per_block
                    && o.rec.is_some())
                .then_some(ino)
            }));
        }
        drop(st);
        Ok(live)
    }
}

/// Whether a slot pair's newer valid slot is live with a record (the
/// image starts with the record's length). A torn pair is not listed: the
/// object is bad when read (EIO), as a bad object is not listed when held.
fn home_is_live(pair: &[u8], ino: Ino) -> bool {
    let (Ok(a), Ok(b)) = (
        object::decode_slot(&pair[..SLOT], ino),
        object::decode_slot(&pair[SLOT..], ino),
    ) else {
        return false;
    };
    let newer = match (a, b) {
        (Some(x), Some(y)) => Some(if y.stamp > x.stamp { y } else { x }),
        (x, y) => x.or(y),
    };
    newer.is_some_and(|s| s.state == SLOT_LIVE && s.inline.len() >= 4 && s.inline[..4] != [0; 4])
}
