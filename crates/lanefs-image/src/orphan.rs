//! The orphan file: inodes whose link count is 0, kept in checksummed slot
//! blocks (seed 002's ext4 orphan file) so recovery can free them.
//!
//! The in-memory table is the seed's lock-free design: each block has an
//! atomic free count; an adder starts at its lane's block, claims room in a
//! block with a decrement-if-positive of that count (AcqRel CAS), then a
//! slot with a CAS from 0 to the inode number (AcqRel). Removal stores 0
//! (Release) and increments the count (Release). `dirty` (Relaxed) marks
//! blocks a checkpoint must write; checkpoints read slots and clear `dirty`
//! while holding every gate of the store, which orders them after every
//! change (the gate unlock/lock pairs give the happens-before).
//!
//! A full table is not an error: recovery also frees every live inode with
//! link count 0 it finds while loading (the table is the fast path a
//! partially loaded store would need, and the cross-check fsck uses).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use lanefs_store::lane;

use crate::layout::{block_sealed, get_u32, get_u64, seal_block, BLOCK, BLOCK_CRC_AT};

pub const ORPHAN_MAGIC: u32 = u32::from_le_bytes(*b"ORPH");
const HEADER: usize = 16;
/// Slots per orphan block.
pub const SLOTS_PER_BLOCK: usize = (BLOCK_CRC_AT - HEADER) / 8;

struct OrphanBlock {
    free: AtomicU32,
    slots: Box<[AtomicU64]>,
    dirty: AtomicBool,
}

pub struct OrphanFile {
    blocks: Box<[OrphanBlock]>,
}

impl OrphanFile {
    /// An empty table of `n` blocks, every block dirty (so the first
    /// checkpoint writes them all).
    pub fn new(n: usize) -> OrphanFile {
        OrphanFile {
            blocks: (0..n)
                .map(|_| OrphanBlock {
                    free: AtomicU32::new(SLOTS_PER_BLOCK as u32),
                    slots: (0..SLOTS_PER_BLOCK).map(|_| AtomicU64::new(0)).collect(),
                    dirty: AtomicBool::new(true),
                })
                .collect(),
        }
    }

    /// Record `ino`; its slot number, or `None` when every block is full.
    pub fn add(&self, ino: u64) -> Option<u32> {
        debug_assert_ne!(ino, 0);
        let n = self.blocks.len();
        let start = lane() % n;
        for k in 0..n {
            let bi = (start + k) % n;
            let b = &self.blocks[bi];
            let claimed = b
                .free
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| f.checked_sub(1))
                .is_ok();
            if !claimed {
                continue;
            }
            // The decrement reserved one empty slot in this block for us.
            loop {
                for (si, s) in b.slots.iter().enumerate() {
                    if s.compare_exchange(0, ino, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                    {
                        b.dirty.store(true, Ordering::Relaxed);
                        return Some((bi * SLOTS_PER_BLOCK + si) as u32);
                    }
                }
                std::hint::spin_loop();
            }
        }
        None
    }

    pub fn remove(&self, slot: u32) {
        let (bi, si) = (
            slot as usize / SLOTS_PER_BLOCK,
            slot as usize % SLOTS_PER_BLOCK,
        );
        let b = &self.blocks[bi];
        let old = b.slots[si].swap(0, Ordering::Release);
        debug_assert_ne!(old, 0, "removing an empty orphan slot");
        b.free.fetch_add(1, Ordering::Release);
        b.dirty.store(true, Ordering::Relaxed);
    }

    /// Encoded images of the dirty blocks, `(index, bytes)`; clears `dirty`.
    pub fn take_dirty(&self) -> Vec<(usize, Vec<u8>)> {
        let mut out = Vec::new();
        for (bi, b) in self.blocks.iter().enumerate() {
            if b.dirty.swap(false, Ordering::Relaxed) {
                let mut buf = vec![0u8; BLOCK];
                buf[0..4].copy_from_slice(&ORPHAN_MAGIC.to_le_bytes());
                buf[8..16].copy_from_slice(&(bi as u64).to_le_bytes());
                for (si, s) in b.slots.iter().enumerate() {
                    let at = HEADER + 8 * si;
                    buf[at..at + 8].copy_from_slice(&s.load(Ordering::Acquire).to_le_bytes());
                }
                seal_block(&mut buf);
                out.push((bi, buf));
            }
        }
        out
    }
}

/// The inode numbers listed in orphan block `bi`; `None` if it is torn or
/// not an orphan block.
pub fn decode_orphan_block(b: &[u8], bi: u64) -> Option<Vec<u64>> {
    if !block_sealed(b) || get_u32(b, 0) != ORPHAN_MAGIC || get_u64(b, 8) != bi {
        return None;
    }
    Some(
        (0..SLOTS_PER_BLOCK)
            .map(|si| get_u64(b, HEADER + 8 * si))
            .filter(|&i| i != 0)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_fill_every_block_then_refuse_and_persist() {
        let t = OrphanFile::new(2);
        let slots: Vec<u32> = (1..=2 * SLOTS_PER_BLOCK as u64)
            .map(|i| t.add(i).unwrap())
            .collect();
        assert_eq!(t.add(99_999), None, "full");
        t.remove(slots[5]);
        assert_eq!(t.add(77), Some(slots[5]), "the freed slot is found again");
        let dirty = t.take_dirty();
        assert_eq!(dirty.len(), 2);
        let listed: Vec<u64> = dirty
            .iter()
            .flat_map(|(i, b)| decode_orphan_block(b, *i as u64).unwrap())
            .collect();
        assert_eq!(listed.len(), 2 * SLOTS_PER_BLOCK);
        assert!(listed.contains(&77) && !listed.contains(&6));
        assert!(
            t.take_dirty().is_empty(),
            "clean after the checkpoint took them"
        );
    }

    #[test]
    fn concurrent_adders_get_distinct_slots() {
        let t = std::sync::Arc::new(OrphanFile::new(4));
        let hs: Vec<_> = (0..4u64)
            .map(|k| {
                let t = t.clone();
                std::thread::spawn(move || {
                    (0..300)
                        .map(|i| t.add(k * 1000 + i + 1).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<u32> = hs.into_iter().flat_map(|h| h.join().unwrap()).collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 1200);
    }
}
