//! What drives the registry: a process-wide budget of cached objects.
//!
//! Each mount's `cached_pages` and `cached_inodes` counters are
//! [`Charged`]: every change is also added to one process-wide per-lane
//! counter, so the total across mounts costs nothing extra to keep. A mount
//! that has just grown its cache (its page- or inode-budget check, with no
//! locks held) calls [`relieve`]: when the estimated total exceeds the
//! process limit, one thread at a time asks the mount's registry to scan
//! every registered mount — the analogue of direct reclaim running
//! `shrink_slab` across every superblock. Per-mount budgets still apply on
//! their own; this bounds the sum when many mounts each stay under theirs.
//!
//! Atomics:
//! * `cached` (a per-lane counter): objects cached by all live mounts.
//! * `limit` (Relaxed): the process limit, set by [`set_process_cache_limit`].
//! * `reclaiming` (Acquire swap / Release store): one reclaimer at a time;
//!   others carry on (their objects are counted for the next check).

use super::ReclaimRegistry;
use crate::counters::{Counter, PercpuCounter};
use crate::sync::{AtomicBool, AtomicUsize, OnceLock, Ordering};

/// Default process-wide limit on cached objects (inodes + pages): 2 Mi,
/// about 8 GiB of pages.
pub const DEFAULT_PROCESS_CACHE_OBJECTS: usize = 1 << 21;
/// Fold threshold of the process-wide counter.
const PRESSURE_BATCH: i64 = 64;

struct Pressure {
    cached: PercpuCounter,
    limit: AtomicUsize,
    reclaiming: AtomicBool,
}

fn state() -> &'static Pressure {
    static STATE: OnceLock<Pressure> = OnceLock::new();
    STATE.get_or_init(|| Pressure {
        cached: PercpuCounter::new(0, PRESSURE_BATCH),
        limit: AtomicUsize::new(DEFAULT_PROCESS_CACHE_OBJECTS),
        reclaiming: AtomicBool::new(false),
    })
}

/// Bound the inodes and pages cached by all mounts of this process
/// together; over it, mounts that grow their caches reclaim from all.
pub fn set_process_cache_limit(objects: usize) {
    state().limit.store(objects, Ordering::Relaxed);
}

/// The current process-wide limit on cached objects.
pub fn process_cache_limit() -> usize {
    state().limit.load(Ordering::Relaxed)
}

/// Objects cached by all live mounts (exact when quiet).
pub fn process_cached_objects() -> i64 {
    state().cached.sum()
}

/// Fold the process-wide counter's shards into its total (the conflict
/// audit's preparation: see `PercpuCounter::fold_all`).
#[cfg(all(feature = "audit", not(lanefs_shuttle)))]
pub fn settle_for_audit() {
    state().cached.fold_all();
}

/// If the process is over its limit, scan `registry` (every mount of that
/// design) for the excess plus an eighth of the limit, so that reclaim runs
/// in batches rather than at every insert. Returns the objects freed.
/// Call with no locks held.
pub(crate) fn relieve(registry: &dyn ReclaimRegistry) -> usize {
    let p = state();
    let limit = p.limit.load(Ordering::Relaxed);
    let over = p.cached.estimate() - limit as i64;
    if over <= 0 || p.reclaiming.swap(true, Ordering::Acquire) {
        return 0;
    }
    let freed = registry.shrink_all(over as usize + limit / 8);
    p.reclaiming.store(false, Ordering::Release);
    freed
}

/// A mount's cache counter whose changes are also charged to the process.
pub(crate) struct Charged(Box<dyn Counter>);

impl Charged {
    pub fn new(own: Box<dyn Counter>) -> Charged {
        state().cached.add(own.sum());
        Charged(own)
    }
}

impl Counter for Charged {
    fn add(&self, delta: i64) {
        self.0.add(delta);
        state().cached.add(delta);
    }

    fn try_sub(&self, n: u64) -> bool {
        let ok = self.0.try_sub(n);
        if ok {
            state().cached.add(-(n as i64));
        }
        ok
    }

    fn sum(&self) -> i64 {
        self.0.sum()
    }

    fn estimate(&self) -> i64 {
        self.0.estimate()
    }

    fn error_bound(&self) -> i64 {
        self.0.error_bound()
    }
}

impl Drop for Charged {
    /// A dropped mount's remaining objects leave the process total.
    fn drop(&mut self) {
        state().cached.add(-self.0.sum());
    }
}
