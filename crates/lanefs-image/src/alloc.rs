//! Allocation groups: inode numbers and data blocks.
//!
//! Locking rules:
//! * `groups[g]` (mutex, own cache line): group `g`'s free inode numbers,
//!   its data-block bitmap, its allocation hint and its *deferred* frees.
//!   A thread allocates from the group of its lane (`lane() % groups`) and
//!   moves to the next group only when that one is full, so allocations on
//!   different lanes take different locks. At most one group lock is held
//!   at a time; a group lock may be taken under an inode shard lock (frees
//!   from a store call), never the other way round.
//!
//! The allocator is a cache of what the inode images say (as in redb): it
//! is not written to disk; `recover.rs` rebuilds it at open from the
//! extents, chains and entry blocks of every object.
//!
//! Deferred frees: a data block dropped by a journal record must not be
//! reused until that record can no longer be rolled back, or a crash could
//! bring back the old mapping over someone else's data. Such blocks wait in
//! `pending` until the end of the next checkpoint (the engine counts them
//! free at once; a page write that finds no block checkpoints first:
//! `store.rs`, "Free space").

use lanefs_store::lane;
use parking_lot::Mutex;

use crate::layout::Geometry;

#[derive(Default)]
struct Group {
    /// One bit per inode number of the group (index in the group): set =
    /// free. The lowest free number is handed out first. A bitmap (1 bit a
    /// number) rather than a list (8 bytes a free number): on a fresh image
    /// of 10 M inodes that is 1.2 MiB instead of 80 MiB, under a memory
    /// budget (docs/ARCHITECTURE.md, "Image store: memory budget").
    free_inos: Vec<u64>,
    free_ino_count: u64,
    /// No free number below word `ino_hint` of `free_inos`.
    ino_hint: usize,
    /// One bit per data block of the group: set = in use.
    used: Vec<u64>,
    first: u64,
    end: u64,
    free_blocks: u64,
    hint: u64,
    pending: Vec<u64>,
}

#[repr(align(64))]
struct Padded(Mutex<Group>);

pub struct Groups {
    geo: Geometry,
    groups: Box<[Padded]>,
}

impl Group {
    fn bit(&self, b: u64) -> (usize, u64) {
        let i = b - self.first;
        ((i / 64) as usize, 1u64 << (i % 64))
    }
    fn is_used(&self, b: u64) -> bool {
        let (w, m) = self.bit(b);
        self.used[w] & m != 0
    }
    fn set(&mut self, b: u64, used: bool) {
        let (w, m) = self.bit(b);
        debug_assert_ne!(
            self.used[w] & m != 0,
            used,
            "block {b} already in that state"
        );
        if used {
            self.used[w] |= m;
            self.free_blocks -= 1;
        } else {
            self.used[w] &= !m;
            self.free_blocks += 1;
        }
    }
    /// Take the lowest free inode index of the group.
    fn alloc_ino_index(&mut self) -> Option<u64> {
        if self.free_ino_count == 0 {
            return None;
        }
        let (w, word) = self.free_inos[self.ino_hint..]
            .iter()
            .enumerate()
            .find(|(_, w)| **w != 0)
            .map(|(k, w)| (self.ino_hint + k, *w))?;
        let bit = word.trailing_zeros() as u64;
        self.free_inos[w] &= !(1 << bit);
        self.free_ino_count -= 1;
        self.ino_hint = w;
        Some(w as u64 * 64 + bit)
    }

    fn free_ino_index(&mut self, i: u64) {
        let (w, m) = ((i / 64) as usize, 1u64 << (i % 64));
        if let Some(word) = self.free_inos.get_mut(w) {
            if *word & m == 0 {
                *word |= m;
                self.free_ino_count += 1;
                self.ino_hint = self.ino_hint.min(w);
            }
        }
    }

    fn alloc(&mut self, prefer: Option<u64>, reserve: u64) -> Option<u64> {
        if self.free_blocks <= reserve {
            return None;
        }
        if let Some(p) = prefer {
            if (self.first..self.end).contains(&p) && !self.is_used(p) {
                self.set(p, true);
                return Some(p);
            }
        }
        let n = self.end - self.first;
        for k in 0..n {
            let b = self.first + (self.hint + k) % n;
            if !self.is_used(b) {
                self.set(b, true);
                self.hint = b + 1 - self.first;
                return Some(b);
            }
        }
        debug_assert!(false, "free count says a block is free");
        None
    }
}

/// Set bits `from..to` of a bitmap (bit `i` is bit `i % 64` of word
/// `i / 64`), a word at a time.
pub(crate) fn set_bit_range(bits: &mut [u64], from: u64, to: u64) {
    let mut i = from;
    while i < to {
        let (w, b) = ((i / 64) as usize, i % 64);
        let n = (64 - b).min(to - i);
        let ones = if n == 64 {
            u64::MAX
        } else {
            ((1u64 << n) - 1) << b
        };
        bits[w] |= ones;
        i += n;
    }
}

impl Groups {
    /// Every data block free; no inode number free until `set_free_inos`.
    pub fn new(geo: Geometry) -> Groups {
        let groups = (0..geo.groups)
            .map(|g| {
                let (first, end) = geo.group_data(g);
                Padded(Mutex::new(Group {
                    free_inos: Vec::new(),
                    free_ino_count: 0,
                    ino_hint: 0,
                    used: vec![0; (end - first).div_ceil(64) as usize],
                    first,
                    end,
                    free_blocks: end - first,
                    hint: 0,
                    pending: Vec::new(),
                }))
            })
            .collect();
        Groups { geo, groups }
    }

    fn home(&self) -> usize {
        lane() % self.groups.len()
    }

    /// Mark `b` in use while loading; `false` if it is not a data block or
    /// is already in use (a cross-link in a corrupted image).
    pub fn claim(&self, b: u64) -> bool {
        let Some(g) = self.geo.data_block_group(b) else {
            return false;
        };
        let mut grp = self.groups[g as usize].0.lock();
        if grp.is_used(b) {
            return false;
        }
        grp.set(b, true);
        true
    }

    /// Set the free inode numbers of every group (at load): `free[g]` has
    /// one bit per inode index of group `g` (`inodes_per_group` bits, the
    /// rest clear), set = free. Costs a pass over the words, not a test per
    /// number: a fresh image of 10 M numbers has 160 K words.
    pub fn set_free_inos(&self, free: Vec<Vec<u64>>) {
        debug_assert_eq!(free.len(), self.groups.len());
        for (p, bits) in self.groups.iter().zip(free) {
            debug_assert_eq!(bits.len() as u64, self.geo.inodes_per_group.div_ceil(64));
            let mut grp = p.0.lock();
            grp.free_ino_count = bits.iter().map(|w| w.count_ones() as u64).sum();
            grp.free_inos = bits;
            grp.ino_hint = 0;
        }
    }

    pub fn alloc_ino(&self) -> Option<u64> {
        let n = self.groups.len();
        let start = self.home();
        (0..n).find_map(|k| {
            let g = (start + k) % n;
            let i = self.groups[g].0.lock().alloc_ino_index()?;
            Some(self.geo.ino_of(g as u64, i))
        })
    }

    /// `ino` is free again (freeing a free number changes nothing).
    pub fn free_ino(&self, ino: u64) {
        if let Some((g, i)) = self.geo.ino_place(ino) {
            self.groups[g as usize].0.lock().free_ino_index(i);
        }
    }

    /// A free data block, `prefer` if it is free, from a group that keeps
    /// more than `reserve` free blocks; `None` when there is none.
    pub fn alloc_block(&self, prefer: Option<u64>, reserve: u64) -> Option<u64> {
        let n = self.groups.len();
        let start = prefer
            .and_then(|p| self.geo.data_block_group(p))
            .map_or_else(|| self.home(), |g| g as usize);
        (0..n).find_map(|k| {
            let g = (start + k) % n;
            self.groups[g]
                .0
                .lock()
                .alloc(if k == 0 { prefer } else { None }, reserve)
        })
    }

    /// Free `b` now (its last reference is gone from every durable state).
    pub fn free_block(&self, b: u64) {
        if let Some(g) = self.geo.data_block_group(b) {
            let mut grp = self.groups[g as usize].0.lock();
            if grp.is_used(b) {
                grp.set(b, false);
            }
        }
    }

    /// Free `b` at the end of the next checkpoint.
    pub fn defer_free(&self, b: u64) {
        if let Some(g) = self.geo.data_block_group(b) {
            self.groups[g as usize].0.lock().pending.push(b);
        }
    }

    /// Take every deferred free (at a checkpoint snapshot).
    pub fn take_pending(&self) -> Vec<u64> {
        self.groups
            .iter()
            .flat_map(|p| std::mem::take(&mut p.0.lock().pending))
            .collect()
    }

    /// Deferred frees waiting for the next checkpoint.
    pub fn pending_blocks(&self) -> u64 {
        self.groups
            .iter()
            .map(|p| p.0.lock().pending.len() as u64)
            .sum()
    }

    pub fn has_pending(&self) -> bool {
        self.groups.iter().any(|p| !p.0.lock().pending.is_empty())
    }

    pub fn free_blocks(&self) -> u64 {
        self.groups.iter().map(|p| p.0.lock().free_blocks).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_inodes_come_from_groups_and_go_back() {
        let geo = Geometry::for_size(4096).unwrap();
        let g = Groups::new(geo);
        let total = g.free_blocks();
        assert_eq!(total, geo.data_blocks());
        let a = g.alloc_block(None, 0).unwrap();
        let b = g.alloc_block(Some(a + 1), 0).unwrap();
        assert_eq!(
            b,
            a + 1,
            "the preferred neighbour is taken: extents stay long"
        );
        assert!(!g.claim(a), "already in use");
        g.defer_free(a);
        assert_eq!(g.free_blocks(), total - 2, "deferred frees wait");
        for p in g.take_pending() {
            g.free_block(p);
        }
        assert_eq!(g.free_blocks(), total - 1);
        let words = geo.inodes_per_group.div_ceil(64) as usize;
        let mut free = vec![vec![0u64; words]; geo.groups as usize];
        for bits in &mut free {
            set_bit_range(bits, 0, geo.inodes_per_group);
        }
        free[0][0] &= !1;
        g.set_free_inos(free);
        let i = g.alloc_ino().unwrap();
        assert_ne!(i, 1);
        let j = g.alloc_ino().unwrap();
        assert!(j > i, "lowest first");
        g.free_ino(i);
        g.free_ino(i);
        assert_eq!(g.alloc_ino(), Some(i));
        assert_ne!(g.alloc_ino(), Some(i), "a double free hands out once");
        let mut n = 1;
        while g.alloc_block(None, 0).is_some() {
            n += 1;
        }
        assert_eq!(n, total, "every block handed out exactly once");
    }

    #[test]
    fn bit_ranges_are_set_a_word_at_a_time() {
        for (from, to) in [
            (0, 0),
            (0, 1),
            (3, 64),
            (0, 64),
            (5, 200),
            (64, 128),
            (63, 65),
        ] {
            let mut v = vec![0u64; 4];
            set_bit_range(&mut v, from, to);
            for i in 0..256u64 {
                let set = v[(i / 64) as usize] & (1 << (i % 64)) != 0;
                assert_eq!(set, (from..to).contains(&i), "{from}..{to}: bit {i}");
            }
        }
    }
}
