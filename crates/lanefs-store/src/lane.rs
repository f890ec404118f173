//! Lanes: a small per-thread index that spreads per-CPU-style state.
//!
//! Each thread gets a lane number once, round-robin, the first time it asks;
//! sharded structures (counters, the orphan table, the memory store's inode
//! allocator) use `lane() % shards`, so
//! threads that run on different cores mostly touch different cache lines.
//! A thread-local is used rather than `sched_getcpu` because it is free to
//! read and stable across migrations (a migrated thread keeps its lane; the
//! shard it writes stays exclusive to it as long as lanes ≤ shards).
//!
//! Atomics: `NEXT_LANE` (Relaxed) only hands out distinct numbers.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

static NEXT_LANE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static LANE: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// This thread's lane number.
pub fn lane() -> usize {
    LANE.with(|l| {
        let v = l.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT_LANE.fetch_add(1, Ordering::Relaxed);
        l.set(v);
        v
    })
}

/// Pin this thread's lane to `n` (for tools and tests that need distinct,
/// reproducible lanes, such as the conflict audit; engines never call it).
/// Two threads pinned to one lane share its shards, as two threads that
/// got the same lane round-robin would.
pub fn set_lane(n: usize) {
    LANE.with(|l| l.set(n));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_lane_pins_this_thread_only() {
        let other = std::thread::spawn(|| {
            set_lane(7);
            lane()
        })
        .join()
        .unwrap();
        assert_eq!(other, 7);
        let mine = std::thread::spawn(|| {
            let first = lane();
            set_lane(first + 100);
            (first, lane())
        })
        .join()
        .unwrap();
        assert_eq!(mine.1, mine.0 + 100, "a handed-out lane can be re-pinned");
    }
}
