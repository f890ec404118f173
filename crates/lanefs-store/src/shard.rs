//! Shards keyed by inode number, for stores that split their maps by inode.
//!
//! Inode numbers are handed out in per-lane chunks (see `MemoryStore`'s
//! `ino_lanes` and the image store's allocation groups), so the first files
//! of many lanes have numbers equal modulo any small power of two: a shard
//! chosen by `ino % n` put every thread's first file under one lock (the
//! seed-002 experiment at 16 threads spent 30 % of its time waiting there).
//! [`ino_shard`] mixes the number first. Each shard sits on its own cache
//! line ([`CacheLine`]), so two shards' locks never share one either.

/// A value alone on its 64-byte cache line.
#[derive(Default)]
#[repr(align(64))]
pub struct CacheLine<T>(pub T);

impl<T> std::ops::Deref for CacheLine<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// The shard of inode `ino` among `2^bits` shards (Fibonacci hashing: the
/// high bits of the number times 2^64 / φ, so consecutive and
/// chunk-aligned numbers spread over all shards).
pub fn ino_shard(ino: u64, bits: u32) -> usize {
    debug_assert!((1..=16).contains(&bits));
    (ino.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_aligned_numbers_spread() {
        // The first number of each of 16 lanes' 1024-number chunks.
        let firsts: std::collections::HashSet<usize> =
            (0..16u64).map(|l| ino_shard(2 + l * 1024, 6)).collect();
        assert!(firsts.len() >= 12, "{firsts:?}");
        assert!((0..100_000u64).all(|i| ino_shard(i, 6) < 64));
    }

    #[test]
    fn shards_do_not_share_lines() {
        let v: Vec<CacheLine<parking_lot::Mutex<u8>>> =
            (0..2).map(|_| CacheLine::default()).collect();
        let a = &v[0] as *const _ as usize;
        let b = &v[1] as *const _ as usize;
        assert_eq!(b - a, 64);
    }
}
