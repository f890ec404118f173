//! Helpers for fuzzing images: recompute the checksum of every structure
//! whose magic is recognised, so that mutated fields get past the CRC and
//! reach the decoders. No locks, no atomics.

use crate::crc::crc32c;
use crate::journal::{BATCH_HEADER, BATCH_MAGIC};
use crate::layout::{get_u32, get_u64, seal_block, DiskSuper, BLOCK, SB_MAGIC, SLOT};
use crate::object::{CHAIN_MAGIC, DIRENT_MAGIC, SLOT_MAGIC};
use crate::orphan::ORPHAN_MAGIC;

/// Reseal every superblock, slot, chain, entry, orphan block and journal
/// batch found in `img` (by magic, at block or slot boundaries).
pub fn reseal_all(img: &mut [u8]) {
    let blocks = img.len() / BLOCK;
    let mut journal: Option<(usize, usize)> = None;
    for copy in 0..2.min(blocks) {
        let b = &mut img[copy * BLOCK..(copy + 1) * BLOCK];
        if get_u64(b, 0) == SB_MAGIC {
            seal_block(b);
            if let Ok(s) = DiskSuper::decode(b) {
                journal = Some((s.geo.journal_start as usize, s.geo.journal_blocks as usize));
            }
        }
    }
    for bi in 2..blocks {
        let b = &mut img[bi * BLOCK..(bi + 1) * BLOCK];
        let m = get_u32(b, 0);
        if m == CHAIN_MAGIC || m == DIRENT_MAGIC || m == ORPHAN_MAGIC {
            seal_block(b);
            continue;
        }
        if m == BATCH_MAGIC {
            let in_journal = journal.is_some_and(|(s, n)| (s..s + n).contains(&bi));
            let len = get_u64(b, 16) as usize;
            let end = bi * BLOCK + BATCH_HEADER + len;
            if in_journal && end <= img.len() {
                let (h, rest) = img[bi * BLOCK..].split_at_mut(BATCH_HEADER);
                let c = crc32c(&[&h[..24], &rest[..len]]);
                h[24..28].copy_from_slice(&c.to_le_bytes());
            }
            continue;
        }
        for s in b.chunks_mut(SLOT) {
            if get_u32(s, 0) == SLOT_MAGIC {
                let c = crc32c(&[&s[..SLOT - 4]]);
                s[SLOT - 4..].copy_from_slice(&c.to_le_bytes());
            }
        }
    }
}
