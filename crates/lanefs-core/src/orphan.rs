//! The orphan table (seed 002): inodes whose link count reached zero while
//! they were still open or looked up. They are freed at the last close or
//! forget; the table lists them so a checker (and crash recovery on the
//! image store, issue 13) can find them.
//!
//! `add(ino)` returns an [`OrphanSlot`]; the engine keeps it in the inode's
//! `Meta` and gives it back to `remove(slot)`. Two designs behind
//! [`OrphanTable`]:
//!
//! * [`SlotOrphanTable`] (default, `orphan=slots`), ext4's lockless orphan
//!   file: [`ORPHAN_BLOCKS`] blocks of [`ORPHAN_BLOCK_SLOTS`] slots. A slot
//!   holds an inode number, 0 when free. `add` starts at a block hashed from
//!   its lane, claims room in a block by decrementing the block's free count
//!   if positive, then claims a zero slot in it by compare-and-swap; after
//!   [`ORPHAN_CLAIM_PASSES`] passes over the block without winning a slot
//!   (slots constantly taken and freed), or when every block is full, it
//!   gives the room back and falls back to the overflow list (ext4 falls
//!   back to its old in-inode orphan list). `remove` stores 0 and
//!   increments the free count.
//! * [`LockedOrphanTable`] (`orphan=locked`): the same slots under one
//!   mutex, searched from the first block (ext4's orphan file before the
//!   seed, `of_lock`).
//!
//! Atomics and locks of `SlotOrphanTable`:
//! * `blocks[b].free` (AcqRel): slots of block `b` not yet promised. A
//!   successful decrement-if-positive promises one zero slot to the caller:
//!   at any time, `free` ≤ the number of zero slots, so a promised slot is
//!   always found eventually (the bounded passes only guard against slots
//!   freed and retaken faster than the search moves).
//! * `blocks[b].slots[j]` (AcqRel compare-and-swap 0 → ino; Release store
//!   ino → 0 by `remove`, which happens before its `free` increment, so a
//!   claimer that won room finds a zero slot). A slot handle is owned by one
//!   inode between `add` and `remove`.
//! * `overflow` (mutex, a leaf): the fallback list, keyed by handle.
//!
//! Lock order: both tables' locks are leaves (taken under an inode's
//! `meta`, nothing taken under them).

use std::collections::HashMap;

use lanefs_store::Ino;

use crate::lane::lane;
use crate::sync::{spin_hint, AtomicU32, AtomicU64, Mutex, Ordering};

/// Bytes of one orphan block (the unit issue 13 persists).
pub const ORPHAN_BLOCK_BYTES: usize = 4096;
/// Inode numbers per block: 8 bytes each; the last 8 bytes of the block are
/// kept for a tail (magic and checksum, as ext4's `ext4_orphan_block_tail`).
pub const ORPHAN_BLOCK_SLOTS: usize = ORPHAN_BLOCK_BYTES / 8 - 1;
/// Blocks in the table (fixed, as ext4's orphan file sized at mkfs).
pub const ORPHAN_BLOCKS: usize = 16;
/// Passes over a block without winning a slot before falling back (ext4:
/// `looped > 3`).
pub const ORPHAN_CLAIM_PASSES: usize = 4;

/// Where an orphan is recorded: `block * slots_per_block + index` in the
/// slot table, or an overflow-list key (top bit set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OrphanSlot(u64);

const OVERFLOW_BIT: u64 = 1 << 63;

impl OrphanSlot {
    /// In the overflow list rather than a slot block.
    pub fn is_overflow(self) -> bool {
        self.0 & OVERFLOW_BIT != 0
    }
}

/// Where unlinked-but-live inodes are recorded.
pub trait OrphanTable: Send + Sync {
    /// Record `ino` (non-zero); the returned handle is given back to
    /// `remove` exactly once.
    fn add(&self, ino: Ino) -> OrphanSlot;
    /// Forget the orphan recorded at `slot`.
    fn remove(&self, slot: OrphanSlot);
    /// Every recorded inode, in no particular order (exact when quiet).
    fn list(&self) -> Vec<Ino>;
}

/// The configured design with the default geometry.
pub fn new_orphan_table(variant: crate::OrphanVariant) -> Box<dyn OrphanTable> {
    match variant {
        crate::OrphanVariant::Slots => Box::new(SlotOrphanTable::new()),
        crate::OrphanVariant::Locked => Box::new(LockedOrphanTable::new()),
    }
}

/// The fallback list shared by both designs.
#[derive(Default)]
struct Overflow {
    next: u64,
    map: HashMap<u64, Ino>,
}

impl Overflow {
    fn add(&mut self, ino: Ino) -> OrphanSlot {
        self.next += 1;
        let key = OVERFLOW_BIT | self.next;
        self.map.insert(key, ino);
        OrphanSlot(key)
    }

    fn remove(&mut self, slot: OrphanSlot) {
        let was = self.map.remove(&slot.0);
        debug_assert!(was.is_some(), "overflow orphan {slot:?} removed twice");
    }
}

/// One block's free count and slots. Each on a cache line of its own: at 24
/// bytes, neighbouring blocks' free counts shared lines, so lanes that
/// start in different blocks still bounced one line (29 % of seed 002's
/// stress-orphan at 16 threads went to `add` and `remove`).
#[repr(align(64))]
struct SlotBlock {
    free: AtomicU32,
    slots: Box<[AtomicU64]>,
}

/// The lockless slot table (default).
pub struct SlotOrphanTable {
    blocks: Box<[SlotBlock]>,
    slots_per_block: usize,
    overflow: Mutex<Overflow>,
}

impl SlotOrphanTable {
    pub fn new() -> SlotOrphanTable {
        SlotOrphanTable::with_geometry(ORPHAN_BLOCKS, ORPHAN_BLOCK_SLOTS)
    }

    /// A table of `blocks × slots_per_block` (model checks use tiny ones).
    pub(crate) fn with_geometry(blocks: usize, slots_per_block: usize) -> SlotOrphanTable {
        assert!(blocks > 0 && slots_per_block > 0 && slots_per_block <= u32::MAX as usize);
        SlotOrphanTable {
            blocks: (0..blocks)
                .map(|_| SlotBlock {
                    free: AtomicU32::new(slots_per_block as u32),
                    slots: (0..slots_per_block).map(|_| AtomicU64::new(0)).collect(),
                })
                .collect(),
            slots_per_block,
            overflow: Mutex::new(Overflow::default()),
        }
    }

    /// `add` starting the block search at `start` (the lane hash, or a
    /// model thread's choice).
    pub(crate) fn add_from(&self, start: usize, ino: Ino) -> OrphanSlot {
        debug_assert_ne!(ino, 0, "0 marks a free slot");
        let n = self.blocks.len();
        for step in 0..n {
            let b = (start + step) % n;
            if !dec_if_positive(&self.blocks[b].free) {
                continue;
            }
            if let Some(j) = self.claim_in(b, ino) {
                return OrphanSlot((b * self.slots_per_block + j) as u64);
            }
            // Lost every race in this block: give the room back and use
            // the overflow list (ext4 falls back to the old orphan list).
            self.blocks[b].free.fetch_add(1, Ordering::AcqRel);
            break;
        }
        self.overflow.lock().add(ino)
    }

    /// Claim a zero slot of block `b`, room already promised.
    fn claim_in(&self, b: usize, ino: Ino) -> Option<usize> {
        let slots = &self.blocks[b].slots;
        for _pass in 0..ORPHAN_CLAIM_PASSES {
            for (j, slot) in slots.iter().enumerate() {
                if slot.load(Ordering::Relaxed) == 0
                    && slot
                        .compare_exchange(0, ino, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                {
                    return Some(j);
                }
            }
            spin_hint();
        }
        None
    }
}

impl Default for SlotOrphanTable {
    fn default() -> Self {
        Self::new()
    }
}

fn dec_if_positive(a: &AtomicU32) -> bool {
    a.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1))
        .is_ok()
}

impl OrphanTable for SlotOrphanTable {
    fn add(&self, ino: Ino) -> OrphanSlot {
        self.add_from(lane().wrapping_mul(13) % self.blocks.len(), ino)
    }

    fn remove(&self, slot: OrphanSlot) {
        if slot.is_overflow() {
            self.overflow.lock().remove(slot);
            return;
        }
        let (b, j) = (
            slot.0 as usize / self.slots_per_block,
            slot.0 as usize % self.slots_per_block,
        );
        let block = &self.blocks[b];
        let was = block.slots[j].swap(0, Ordering::AcqRel);
        debug_assert_ne!(was, 0, "orphan slot {slot:?} removed twice");
        let free = block.free.fetch_add(1, Ordering::AcqRel);
        debug_assert!((free as usize) < self.slots_per_block);
    }

    fn list(&self) -> Vec<Ino> {
        let mut out: Vec<Ino> = self
            .blocks
            .iter()
            .flat_map(|b| b.slots.iter().map(|s| s.load(Ordering::Acquire)))
            .filter(|ino| *ino != 0)
            .collect();
        out.extend(self.overflow.lock().map.values().copied());
        out
    }
}

/// `orphan=locked`: the same slot layout under one mutex.
pub struct LockedOrphanTable {
    inner: Mutex<LockedInner>,
}

struct LockedInner {
    /// `blocks × slots_per_block` inode numbers, 0 when free.
    slots: Vec<Ino>,
    free: Vec<u32>,
    slots_per_block: usize,
    overflow: Overflow,
}

impl LockedOrphanTable {
    pub fn new() -> LockedOrphanTable {
        LockedOrphanTable::with_geometry(ORPHAN_BLOCKS, ORPHAN_BLOCK_SLOTS)
    }

    pub(crate) fn with_geometry(blocks: usize, slots_per_block: usize) -> LockedOrphanTable {
        LockedOrphanTable {
            inner: Mutex::new(LockedInner {
                slots: vec![0; blocks * slots_per_block],
                free: vec![slots_per_block as u32; blocks],
                slots_per_block,
                overflow: Overflow::default(),
            }),
        }
    }
}

impl Default for LockedOrphanTable {
    fn default() -> Self {
        Self::new()
    }
}

impl OrphanTable for LockedOrphanTable {
    fn add(&self, ino: Ino) -> OrphanSlot {
        debug_assert_ne!(ino, 0, "0 marks a free slot");
        let mut t = self.inner.lock();
        let spb = t.slots_per_block;
        let Some(b) = t.free.iter().position(|f| *f > 0) else {
            return t.overflow.add(ino);
        };
        let j = t.slots[b * spb..(b + 1) * spb]
            .iter()
            .position(|s| *s == 0)
            .expect("a block with free entries has a zero slot");
        t.free[b] -= 1;
        t.slots[b * spb + j] = ino;
        OrphanSlot((b * spb + j) as u64)
    }

    fn remove(&self, slot: OrphanSlot) {
        let mut t = self.inner.lock();
        if slot.is_overflow() {
            t.overflow.remove(slot);
            return;
        }
        let i = slot.0 as usize;
        debug_assert_ne!(t.slots[i], 0, "orphan slot {slot:?} removed twice");
        t.slots[i] = 0;
        let b = i / t.slots_per_block;
        t.free[b] += 1;
    }

    fn list(&self) -> Vec<Ino> {
        let t = self.inner.lock();
        let mut out: Vec<Ino> = t.slots.iter().copied().filter(|i| *i != 0).collect();
        out.extend(t.overflow.map.values().copied());
        out
    }
}

#[cfg(all(test, not(lanefs_shuttle)))]
mod tests {
    use super::*;
    use crate::sync::Arc;
    use std::collections::HashSet;

    fn tables() -> Vec<(&'static str, Arc<dyn OrphanTable>)> {
        vec![
            ("slots", Arc::new(SlotOrphanTable::with_geometry(3, 4))),
            ("locked", Arc::new(LockedOrphanTable::with_geometry(3, 4))),
        ]
    }

    #[test]
    fn add_list_remove_and_overflow() {
        for (name, t) in tables() {
            // 12 slots, 20 orphans: 8 go to the overflow list.
            let slots: Vec<OrphanSlot> = (1..=20).map(|ino| t.add(ino)).collect();
            assert_eq!(
                slots.iter().filter(|s| s.is_overflow()).count(),
                8,
                "{name}"
            );
            let distinct: HashSet<_> = slots.iter().collect();
            assert_eq!(distinct.len(), 20, "{name}: a slot handed out twice");
            let mut listed = t.list();
            listed.sort();
            assert_eq!(listed, (1..=20).collect::<Vec<_>>(), "{name}");
            for s in slots.iter().step_by(2) {
                t.remove(*s);
            }
            let mut listed = t.list();
            listed.sort();
            assert_eq!(listed, (2..=20).step_by(2).collect::<Vec<_>>(), "{name}");
            // Freed slots are reused before the overflow list.
            assert!(!t.add(99).is_overflow(), "{name}");
        }
    }

    #[test]
    fn default_geometry_is_one_block_per_4k() {
        assert_eq!((ORPHAN_BLOCK_SLOTS + 1) * 8, ORPHAN_BLOCK_BYTES);
        let t = SlotOrphanTable::new();
        let s = t.add_from(ORPHAN_BLOCKS - 1, 7);
        assert_eq!(s.0 as usize / ORPHAN_BLOCK_SLOTS, ORPHAN_BLOCKS - 1);
    }

    #[test]
    fn threads_add_and_remove_without_loss() {
        for (name, t) in tables() {
            let handles: Vec<_> = (0..4u64)
                .map(|th| {
                    let t = t.clone();
                    std::thread::spawn(move || {
                        let mut kept = Vec::new();
                        for i in 0..2_000u64 {
                            let ino = th * 1_000_000 + i + 1;
                            let s = t.add(ino);
                            if i % 3 == 0 {
                                kept.push(ino);
                            } else {
                                t.remove(s);
                            }
                        }
                        kept
                    })
                })
                .collect();
            let mut want: Vec<Ino> = handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect();
            want.sort();
            let mut got = t.list();
            got.sort();
            assert_eq!(got, want, "{name}");
        }
    }
}

#[cfg(all(test, lanefs_shuttle))]
mod model {
    use super::*;
    use crate::sync::{model_iterations, Arc};
    use std::collections::HashSet;

    /// Adds and removes race on a table of 2 blocks × 2 slots (so blocks
    /// fill, claims collide and the overflow list is used): no slot is
    /// handed out twice, nothing is lost, the free counts stay exact.
    #[test]
    fn model_add_vs_remove() {
        crate::sync::check_random(
            || {
                let t = Arc::new(SlotOrphanTable::with_geometry(2, 2));
                let pre = t.add_from(0, 100);
                let threads: Vec<_> = (0..3u64)
                    .map(|th| {
                        let t = t.clone();
                        shuttle::thread::spawn(move || {
                            let a = t.add_from(th as usize, 10 + th);
                            let b = t.add_from(th as usize + 1, 20 + th);
                            assert_ne!(a, b);
                            t.remove(a);
                            (b, 20 + th)
                        })
                    })
                    .collect();
                let t2 = t.clone();
                let remover = shuttle::thread::spawn(move || t2.remove(pre));
                let kept: Vec<(OrphanSlot, Ino)> =
                    threads.into_iter().map(|h| h.join().unwrap()).collect();
                remover.join().unwrap();
                let slots: HashSet<OrphanSlot> = kept.iter().map(|k| k.0).collect();
                assert_eq!(slots.len(), kept.len(), "a slot handed out twice");
                let mut listed = t.list();
                listed.sort();
                assert_eq!(listed, vec![20, 21, 22]);
                let in_blocks = kept.iter().filter(|k| !k.0.is_overflow()).count();
                let free: u32 = t.blocks.iter().map(|b| b.free.load(Ordering::SeqCst)).sum();
                assert_eq!(free as usize, 4 - in_blocks, "free counts drifted");
                for (slot, ino) in kept {
                    if !slot.is_overflow() {
                        let (b, j) = (slot.0 as usize / 2, slot.0 as usize % 2);
                        assert_eq!(t.blocks[b].slots[j].load(Ordering::SeqCst), ino);
                    }
                    t.remove(slot);
                }
                assert!(t.list().is_empty());
            },
            model_iterations(),
        );
    }
}
