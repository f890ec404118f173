//! Geometry and the superblock: where every region of an image starts, and
//! the double-buffered, checksummed superblock that records it (byte layout
//! in docs/FORMAT.md). Pure functions over bytes; no locks, no atomics.

use lanefs_store::{Errno, Result, Superblock};

use crate::crc::crc32c;

/// Block size of every image.
pub const BLOCK: usize = 4096;
/// The unit the media is assumed to write atomically.
pub const SECTOR: usize = 512;
/// Bytes of one inode slot (two slots per inode: A and B).
pub const SLOT: usize = 512;
/// Inode slots per inode-table block.
pub const SLOTS_PER_BLOCK: u64 = (BLOCK / SLOT) as u64;
/// Lanes with their own usage record (`u/<lane>` in the Txn key layout).
pub const USAGE_LANES: usize = 64;
/// Most allocation groups.
pub const GROUPS_MAX: u64 = 64;
/// Fewest data blocks a group has.
pub const GROUP_DATA_BLOCKS_MIN: u64 = 64;
/// Bytes of data per inode number made by mkfs (one inode per 16 KiB).
pub const BYTES_PER_INODE: u64 = 16 * 1024;
/// Journal size bounds in blocks (1 MiB .. 64 MiB).
pub const JOURNAL_BLOCKS_MIN: u64 = 256;
pub const JOURNAL_BLOCKS_MAX: u64 = 16384;
/// Orphan-file blocks.
pub const ORPHAN_BLOCKS: u64 = 4;

pub const SB_MAGIC: u64 = u64::from_le_bytes(*b"LANEFSIM");
/// The format this code writes: 4 (files keep their unwritten extents —
/// `fallocate` — in their object image and in journal records of kind 10,
/// so that `fallocate` of any size costs O(extents)). 3 brought the
/// superblock's per-group inode-table high-water marks (open reads only
/// the table in use), 2 one device flush per commit (journal records that
/// map new data pages carry the pages' CRC32C).
pub const FORMAT_VERSION: u32 = 4;
/// The first format whose superblock carries the high-water marks.
pub const FORMAT_MARKS: u32 = 3;
/// High-water marks count whole inode-table blocks (4 inode numbers):
/// open reads exactly the blocks in use. Raising a mark costs a checkpoint
/// one superblock write, with no flush of its own.
pub const MARK_STEP: u64 = SLOTS_PER_BLOCK / 2;
/// The oldest format this code opens: version 1 journals have no page
/// checksums (their commits flushed data before the batch); the first
/// checkpoint (the one every open makes) rewrites the image as version 2.
pub const FORMAT_VERSION_MIN: u32 = 1;
/// Offset of the CRC32C in a 4 KiB metadata block (covers bytes before it).
pub const BLOCK_CRC_AT: usize = BLOCK - 4;
/// Journal sequence numbers stay below this (they start from the clock in
/// nanoseconds, about 2^61 today, and grow by one per batch): a larger one
/// in a superblock is corruption, and one in a batch header is ignored.
pub const JOURNAL_SEQ_LIMIT: u64 = 1 << 63;
/// Object stamps stay below this (they start at 0 and grow by one per
/// record): a larger one on disk is corruption, so that no increment can
/// overflow.
pub const STAMP_LIMIT: u64 = 1 << 63;

/// Where everything is, in blocks. Written by mkfs, read from the superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub total_blocks: u64,
    pub journal_start: u64,
    pub journal_blocks: u64,
    pub orphan_start: u64,
    pub orphan_blocks: u64,
    pub groups: u64,
    pub group_start: u64,
    pub blocks_per_group: u64,
    /// Inode numbers per group.
    pub inodes_per_group: u64,
    /// Inode-table blocks at the start of each group.
    pub itable_blocks: u64,
}

impl Geometry {
    /// The layout mkfs gives an image of `total_blocks` blocks.
    pub fn for_size(total_blocks: u64) -> Result<Geometry> {
        let journal_blocks = (total_blocks / 8).clamp(JOURNAL_BLOCKS_MIN, JOURNAL_BLOCKS_MAX);
        let journal_start = 2;
        let orphan_start = journal_start + journal_blocks;
        let group_start = orphan_start + ORPHAN_BLOCKS;
        let rest = total_blocks.checked_sub(group_start).ok_or(Errno::EINVAL)?;
        // A group is at least its data minimum plus one inode-table block.
        let groups = (rest / (4 * GROUP_DATA_BLOCKS_MIN)).clamp(1, GROUPS_MAX);
        let blocks_per_group = rest / groups;
        // One inode per BYTES_PER_INODE, rounded up to whole table blocks.
        let per_table_block = SLOTS_PER_BLOCK / 2;
        let inodes = (blocks_per_group * BLOCK as u64 / BYTES_PER_INODE).max(per_table_block);
        let itable_blocks = inodes.div_ceil(per_table_block);
        let inodes_per_group = itable_blocks * per_table_block;
        if blocks_per_group < itable_blocks + GROUP_DATA_BLOCKS_MIN {
            return Err(Errno::EINVAL);
        }
        let g = Geometry {
            total_blocks,
            journal_start,
            journal_blocks,
            orphan_start,
            orphan_blocks: ORPHAN_BLOCKS,
            groups,
            group_start,
            blocks_per_group,
            inodes_per_group,
            itable_blocks,
        };
        g.validate()?;
        Ok(g)
    }

    /// Reject a geometry whose regions overlap or leave the device.
    pub fn validate(&self) -> Result<()> {
        let ok = self.journal_start == 2
            && self.journal_blocks >= 2
            && self.journal_blocks <= JOURNAL_BLOCKS_MAX
            && self.orphan_start == self.journal_start + self.journal_blocks
            && self.orphan_blocks == ORPHAN_BLOCKS
            && self.group_start == self.orphan_start + self.orphan_blocks
            && (1..=GROUPS_MAX).contains(&self.groups)
            && self.itable_blocks >= 1
            // Checked: corrupt fields must not wrap into a valid-looking
            // geometry.
            && self.total_blocks.checked_mul(BLOCK as u64).is_some()
            && self.itable_blocks.checked_mul(SLOTS_PER_BLOCK / 2) == Some(self.inodes_per_group)
            && self.blocks_per_group > self.itable_blocks
            && self
                .groups
                .checked_mul(self.blocks_per_group)
                .and_then(|b| b.checked_add(self.group_start))
                .is_some_and(|end| end <= self.total_blocks);
        if ok {
            Ok(())
        } else {
            Err(Errno::EUCLEAN)
        }
    }

    /// Largest inode number.
    pub fn max_ino(&self) -> u64 {
        self.groups * self.inodes_per_group
    }

    /// (group, index in group) of `ino` (inode numbers start at 1).
    pub fn ino_place(&self, ino: u64) -> Option<(u64, u64)> {
        if ino == 0 || ino > self.max_ino() {
            return None;
        }
        let i = ino - 1;
        Some((i / self.inodes_per_group, i % self.inodes_per_group))
    }

    pub fn ino_of(&self, group: u64, index: u64) -> u64 {
        group * self.inodes_per_group + index + 1
    }

    /// Byte offset of slot `slot` (0 = A, 1 = B) of `ino`.
    pub fn slot_offset(&self, ino: u64, slot: usize) -> u64 {
        let (g, i) = self
            .ino_place(ino)
            .expect("caller checked the inode number");
        let block = self.group_first_block(g) + (2 * i) / SLOTS_PER_BLOCK;
        block * BLOCK as u64 + ((2 * i) % SLOTS_PER_BLOCK + slot as u64) * SLOT as u64
    }

    pub fn group_first_block(&self, g: u64) -> u64 {
        self.group_start + g * self.blocks_per_group
    }

    /// Data blocks of group `g`: `first..end`.
    pub fn group_data(&self, g: u64) -> (u64, u64) {
        let first = self.group_first_block(g) + self.itable_blocks;
        (first, self.group_first_block(g) + self.blocks_per_group)
    }

    /// The group a data block belongs to, if it is a data block at all.
    pub fn data_block_group(&self, block: u64) -> Option<u64> {
        if block < self.group_start {
            return None;
        }
        let g = (block - self.group_start) / self.blocks_per_group;
        if g >= self.groups {
            return None;
        }
        let (first, end) = self.group_data(g);
        (first..end).contains(&block).then_some(g)
    }

    pub fn data_blocks(&self) -> u64 {
        self.groups * (self.blocks_per_group - self.itable_blocks)
    }
}

/// One lane's usage record with its object stamp.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UsageRec {
    pub stamp: u64,
    pub blocks: i64,
    pub inodes: i64,
}

/// The decoded superblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskSuper {
    /// Format version: what `decode` read; what `encode` writes (the
    /// store always writes [`FORMAT_VERSION`]).
    pub version: u32,
    pub generation: u64,
    pub geo: Geometry,
    /// Block offset within the journal where replay starts.
    pub journal_tail: u64,
    /// Sequence number of the batch expected at `journal_tail`.
    pub journal_tail_seq: u64,
    /// The store superblock (`Store::write_superblock`) and its stamp.
    pub sb_stamp: u64,
    pub sb: Superblock,
    pub usage: [UsageRec; USAGE_LANES],
    /// Per group (format 3 on; `None` before): the high-water mark, a
    /// bound on the inode indices of the group whose slots may have been
    /// written (every slot pair at an index at or above it is all zero), a
    /// multiple of 4 (whole table blocks) at most `inodes_per_group`.
    pub marks: Option<Vec<u64>>,
}

fn put(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

pub fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

pub fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Seal a 4 KiB metadata block: CRC32C of bytes `..BLOCK_CRC_AT` at the end.
pub fn seal_block(b: &mut [u8]) {
    debug_assert_eq!(b.len(), BLOCK);
    let c = crc32c(&[&b[..BLOCK_CRC_AT]]);
    b[BLOCK_CRC_AT..].copy_from_slice(&c.to_le_bytes());
}

pub fn block_sealed(b: &[u8]) -> bool {
    b.len() == BLOCK && get_u32(b, BLOCK_CRC_AT) == crc32c(&[&b[..BLOCK_CRC_AT]])
}

const USAGE_AT: usize = 160;
/// Offset of the high-water marks (u64 per group, `GROUPS_MAX` of them).
const MARKS_AT: usize = USAGE_AT + 24 * USAGE_LANES;

impl Geometry {
    /// The high-water mark covering inode index `index` of a group: the
    /// next multiple of [`MARK_STEP`] above it, at most the group's size.
    pub fn mark_for(&self, index: u64) -> u64 {
        (index + 1)
            .div_ceil(MARK_STEP)
            .saturating_mul(MARK_STEP)
            .min(self.inodes_per_group)
    }
}

impl DiskSuper {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK];
        let g = &self.geo;
        put(&mut b, 0, SB_MAGIC);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..16].copy_from_slice(&(BLOCK as u32).to_le_bytes());
        for (i, v) in [
            self.generation,
            g.total_blocks,
            g.journal_start,
            g.journal_blocks,
            g.orphan_start,
            g.orphan_blocks,
            g.groups,
            g.group_start,
            g.blocks_per_group,
            g.inodes_per_group,
            g.itable_blocks,
            self.journal_tail,
            self.journal_tail_seq,
            self.sb_stamp,
            self.sb.total_blocks,
            self.sb.total_inodes,
            self.sb.used_blocks,
            self.sb.used_inodes,
        ]
        .into_iter()
        .enumerate()
        {
            put(&mut b, 16 + 8 * i, v);
        }
        for (i, u) in self.usage.iter().enumerate() {
            let at = USAGE_AT + 24 * i;
            put(&mut b, at, u.stamp);
            put(&mut b, at + 8, u.blocks as u64);
            put(&mut b, at + 16, u.inodes as u64);
        }
        if self.version >= FORMAT_MARKS {
            let marks = self.marks.as_deref().unwrap_or_default();
            debug_assert_eq!(marks.len() as u64, g.groups);
            for (i, m) in marks.iter().enumerate() {
                put(&mut b, MARKS_AT + 8 * i, *m);
            }
        }
        seal_block(&mut b);
        b
    }

    /// The format version of a sealed superblock copy newer than this code
    /// opens, if `b` is one (`decode` refuses it).
    pub fn newer_version(b: &[u8]) -> Option<u32> {
        let ok = b.len() == BLOCK && get_u64(b, 0) == SB_MAGIC && block_sealed(b);
        let v = get_u32(b, 8);
        (ok && v > FORMAT_VERSION).then_some(v)
    }

    /// Decode and check one superblock copy; `EUCLEAN` for anything wrong.
    pub fn decode(b: &[u8]) -> Result<DiskSuper> {
        if b.len() != BLOCK || get_u64(b, 0) != SB_MAGIC || !block_sealed(b) {
            return Err(Errno::EUCLEAN);
        }
        let version = get_u32(b, 8);
        if !(FORMAT_VERSION_MIN..=FORMAT_VERSION).contains(&version)
            || get_u32(b, 12) != BLOCK as u32
        {
            return Err(Errno::EUCLEAN);
        }
        let f = |i: usize| get_u64(b, 16 + 8 * i);
        let geo = Geometry {
            total_blocks: f(1),
            journal_start: f(2),
            journal_blocks: f(3),
            orphan_start: f(4),
            orphan_blocks: f(5),
            groups: f(6),
            group_start: f(7),
            blocks_per_group: f(8),
            inodes_per_group: f(9),
            itable_blocks: f(10),
        };
        geo.validate()?;
        let mut usage = [UsageRec::default(); USAGE_LANES];
        for (i, u) in usage.iter_mut().enumerate() {
            let at = USAGE_AT + 24 * i;
            *u = UsageRec {
                stamp: get_u64(b, at),
                blocks: get_u64(b, at + 8) as i64,
                inodes: get_u64(b, at + 16) as i64,
            };
        }
        let marks = (version >= FORMAT_MARKS).then(|| {
            (0..geo.groups as usize)
                .map(|i| get_u64(b, MARKS_AT + 8 * i))
                .collect::<Vec<u64>>()
        });
        if marks.as_ref().is_some_and(|m| {
            m.iter()
                .any(|&x| x > geo.inodes_per_group || x % (SLOTS_PER_BLOCK / 2) != 0)
        }) {
            return Err(Errno::EUCLEAN);
        }
        let s = DiskSuper {
            version,
            generation: f(0),
            geo,
            journal_tail: f(11),
            journal_tail_seq: f(12),
            sb_stamp: f(13),
            sb: Superblock {
                total_blocks: f(14),
                total_inodes: f(15),
                used_blocks: f(16),
                used_inodes: f(17),
            },
            usage,
            marks,
        };
        if s.journal_tail >= geo.journal_blocks
            || s.journal_tail_seq >= JOURNAL_SEQ_LIMIT
            || s.generation >= STAMP_LIMIT
            || s.sb_stamp >= STAMP_LIMIT
            || s.usage.iter().any(|u| u.stamp >= STAMP_LIMIT)
        {
            return Err(Errno::EUCLEAN);
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_fits_and_superblock_roundtrips() {
        for blocks in [600u64, 2048, 100_000, 1 << 22] {
            let g = Geometry::for_size(blocks).unwrap();
            assert!(g.group_start + g.groups * g.blocks_per_group <= blocks);
            let last = g.max_ino();
            assert_eq!(
                g.ino_place(last),
                Some((g.groups - 1, g.inodes_per_group - 1))
            );
            assert!(
                g.slot_offset(last, 1) + SLOT as u64 <= g.group_data(g.groups - 1).0 * BLOCK as u64
            );
            let mut s = DiskSuper {
                version: FORMAT_VERSION,
                generation: 3,
                geo: g,
                journal_tail: 1,
                journal_tail_seq: 9,
                sb_stamp: 4,
                sb: Superblock {
                    total_blocks: 5,
                    total_inodes: 6,
                    used_blocks: 7,
                    used_inodes: 8,
                },
                usage: [UsageRec::default(); USAGE_LANES],
                marks: Some(
                    (0..g.groups)
                        .map(|i| if i == 0 { 0 } else { g.mark_for(i * 100) })
                        .collect(),
                ),
            };
            s.usage[63] = UsageRec {
                stamp: 2,
                blocks: -5,
                inodes: 9,
            };
            let b = s.encode();
            assert_eq!(DiskSuper::decode(&b).unwrap(), s);
            let mut bad = b.clone();
            bad[100] ^= 1;
            assert_eq!(DiskSuper::decode(&bad), Err(Errno::EUCLEAN));
            // A mark past the group's table, or inside a table block.
            for wrong in [g.inodes_per_group + 4, 2] {
                let mut m = s.clone();
                m.marks.as_mut().unwrap()[g.groups as usize - 1] = wrong;
                assert_eq!(DiskSuper::decode(&m.encode()), Err(Errno::EUCLEAN));
            }
            let mut old = s.clone();
            old.version = 2;
            let back = DiskSuper::decode(&old.encode()).unwrap();
            assert_eq!(back.marks, None, "format 2 has no marks");
            s.version = 1;
            s.marks = None;
            assert_eq!(DiskSuper::decode(&s.encode()).unwrap().version, 1);
            assert_eq!(DiskSuper::newer_version(&s.encode()), None);
            s.version = FORMAT_VERSION + 1;
            s.marks = Some(vec![0; g.groups as usize]);
            let newer = s.encode();
            assert_eq!(DiskSuper::decode(&newer), Err(Errno::EUCLEAN));
            assert_eq!(DiskSuper::newer_version(&newer), Some(FORMAT_VERSION + 1));
        }
        assert!(Geometry::for_size(100).is_err(), "too small");
    }
}
