//! Per-lane counters with a batch (XFS/Linux `percpu_counter` style).
//!
//! Used for free blocks, free inodes and cached pages. The hot path adds to
//! this lane's shard only; a shard whose local value reaches `±batch` folds
//! it into `global`. Only `sum` (statfs, checkpoints, checks) visits every
//! shard. A reservation (`try_sub`) far from zero never sums: it checks the
//! cheap `global` estimate against the worst-case error (`batch × shards`)
//! and only near the limit takes `slow` and sums exactly — seed 004's rule,
//! "no exact compare on the hot path".
//!
//! Atomics and locks:
//! * `shards[i]` (Relaxed): this lane's unfolded delta. Folding moves a value
//!   from a shard to `global` with two atomic adds; the total is preserved
//!   whatever interleaving, so `sum` is exact when nobody is adding.
//! * `global` (Relaxed): folded value; an estimate off by < `batch` per shard.
//! * `folds_started`, `folds_finished` (SeqCst): bracket every fold. An
//!   exact sum retries until no fold started before it finished
//!   (`started` read after the sum equals `finished` read before it), so it
//!   never sees a value in flight between a shard and `global`.
//! * `slow` (mutex): serializes exact reservations near the limit so two of
//!   them cannot both take the last blocks.
//!   Fast-path reservations only happen while the estimate exceeds the
//!   request plus twice the worst-case error, so they cannot cross zero.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::lane::lane;

/// A counter the core can swap implementations of (milestone 2 adds the
/// seed's "before" designs: one shared atomic, exact compare every time).
pub trait Counter: Send + Sync {
    /// Add `delta` (may be negative).
    fn add(&self, delta: i64);
    /// Subtract `n` if the value stays ≥ 0; `false` otherwise (nothing changed).
    fn try_sub(&self, n: u64) -> bool;
    /// Exact value when no update runs concurrently; an estimate otherwise.
    fn sum(&self) -> i64;
}

#[repr(align(64))]
struct Shard(AtomicI64);

/// The production [`Counter`]: per-lane shards, folded in batches.
pub struct PercpuCounter {
    global: AtomicI64,
    shards: Box<[Shard]>,
    batch: i64,
    folds_started: AtomicU64,
    folds_finished: AtomicU64,
    slow: Mutex<()>,
}

const SHARDS: usize = 32;

impl PercpuCounter {
    /// A counter starting at `value` with fold threshold `batch`.
    pub fn new(value: i64, batch: i64) -> PercpuCounter {
        PercpuCounter {
            global: AtomicI64::new(value),
            shards: (0..SHARDS).map(|_| Shard(AtomicI64::new(0))).collect(),
            batch: batch.max(1),
            folds_started: AtomicU64::new(0),
            folds_finished: AtomicU64::new(0),
            slow: Mutex::new(()),
        }
    }

    fn error_bound(&self) -> i64 {
        self.batch * self.shards.len() as i64
    }
}

impl Counter for PercpuCounter {
    fn add(&self, delta: i64) {
        if delta == 0 {
            return;
        }
        let shard = &self.shards[lane() % self.shards.len()].0;
        let local = shard.fetch_add(delta, Ordering::Relaxed) + delta;
        if local >= self.batch || local <= -self.batch {
            self.folds_started.fetch_add(1, Ordering::SeqCst);
            shard.fetch_sub(local, Ordering::SeqCst);
            self.global.fetch_add(local, Ordering::SeqCst);
            self.folds_finished.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn try_sub(&self, n: u64) -> bool {
        if n == 0 {
            return true;
        }
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let estimate = self.global.load(Ordering::Relaxed);
        if estimate.saturating_sub(2 * self.error_bound()) > n {
            self.add(-n);
            return true;
        }
        let _exact = self.slow.lock();
        if self.sum() >= n {
            self.add(-n);
            true
        } else {
            false
        }
    }

    fn sum(&self) -> i64 {
        loop {
            let finished = self.folds_finished.load(Ordering::SeqCst);
            let local: i64 = self.shards.iter().map(|s| s.0.load(Ordering::SeqCst)).sum();
            let total = self.global.load(Ordering::SeqCst) + local;
            if self.folds_started.load(Ordering::SeqCst) == finished {
                return total;
            }
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn sums_exactly_when_quiet() {
        let c = PercpuCounter::new(100, 4);
        for _ in 0..10 {
            c.add(3);
        }
        c.add(-5);
        assert_eq!(c.sum(), 125);
    }

    #[test]
    fn reservations_never_go_below_zero_under_threads() {
        let c = Arc::new(PercpuCounter::new(10_000, 8));
        let taken: i64 = (0..4)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || (0..5000).filter(|_| c.try_sub(1)).count() as i64)
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .sum();
        assert_eq!(taken, 10_000, "exactly the capacity is handed out");
        assert_eq!(c.sum(), 0);
        assert!(!c.try_sub(1));
    }
}
