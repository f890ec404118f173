//! `reclaim=sync-grace`: lock-free scans inside a sleepable-RCU read
//! section; unregister waits synchronously for a full grace period (the
//! regression of seed 001, commit f95bdb700bc6 "make global slab shrink
//! lockless", where `unregister_shrinker` called `synchronize_srcu`).
//!
//! The list is the deferred design's single [`EpochList`] (one, not
//! sharded, as Linux's `shrinker_list`); what differs is [`Srcu`]: a scan
//! runs inside `read_lock`/`read_unlock`, and `unregister` unlinks the entry
//! and then calls `synchronize`, which returns only once every scan that
//! may have seen the entry has finished. So once `unregister` returns the
//! shrinker is never called again — paid for by every unregister waiting
//! for the slowest scan in flight, of any mount.
//!
//! Atomics and locks of `Srcu` (the classic two-index SRCU):
//! * `phase` (SeqCst): its low bit is the index new readers count in.
//! * `shards[s].locks[i]`, `shards[s].unlocks[i]` (SeqCst, monotonic):
//!   readers that entered / left with index `i`, counted on their lane's
//!   shard. Readers of index `i` are gone when Σ unlocks (read first) equals
//!   Σ locks (read second).
//! * `gp` (mutex, a leaf): one grace period at a time.
//!   `synchronize`: wait for the non-current index to drain (late readers
//!   of the previous flip), flip, wait for the old index to drain. The
//!   caller's unlink is SeqCst-ordered before the flip, so a reader not
//!   counted by the wait enters after it and reads the new list.
//!
//! The conflict audit sees the grace period whole: `Srcu`'s counters and
//! `gp` are the seam's (`crate::sync`) types, so an unregister's wait
//! records `gp` and `phase` as written and every shard's counters as read;
//! the list's epoch pointer is reported by `EpochList` (`deferred`).

use super::deferred::{scan_all, unlink, EpochList};
use super::{ReclaimRegistry, Shrinker, ShrinkerId};
use crate::lane::lane;
use crate::sync::{yield_now, Arc, AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering};

/// Reader-count shards of the grace-period machinery.
const SRCU_SHARDS: usize = 32;

#[repr(align(64))]
struct ReaderShard {
    locks: [AtomicU64; 2],
    unlocks: [AtomicU64; 2],
}

/// Sleepable RCU: read sections may block; `synchronize` waits for every
/// read section that began before it.
pub(crate) struct Srcu {
    phase: AtomicUsize,
    shards: Box<[ReaderShard]>,
    gp: Mutex<()>,
}

/// An open read section; give it back to [`Srcu::read_unlock`].
pub(crate) struct ReadSection {
    index: usize,
    shard: usize,
}

impl Srcu {
    pub fn new() -> Srcu {
        Srcu {
            phase: AtomicUsize::new(0),
            shards: (0..SRCU_SHARDS)
                .map(|_| ReaderShard {
                    locks: [AtomicU64::new(0), AtomicU64::new(0)],
                    unlocks: [AtomicU64::new(0), AtomicU64::new(0)],
                })
                .collect(),
            gp: Mutex::new(()),
        }
    }

    pub fn read_lock_on(&self, shard: usize) -> ReadSection {
        let shard = shard % self.shards.len();
        let index = self.phase.load(Ordering::SeqCst) & 1;
        self.shards[shard].locks[index].fetch_add(1, Ordering::SeqCst);
        ReadSection { index, shard }
    }

    pub fn read_unlock(&self, r: ReadSection) {
        self.shards[r.shard].unlocks[r.index].fetch_add(1, Ordering::SeqCst);
    }

    fn readers_gone(&self, index: usize) -> bool {
        let unlocks: u64 = self
            .shards
            .iter()
            .map(|s| s.unlocks[index].load(Ordering::SeqCst))
            .sum();
        let locks: u64 = self
            .shards
            .iter()
            .map(|s| s.locks[index].load(Ordering::SeqCst))
            .sum();
        debug_assert!(unlocks <= locks, "a read section left twice");
        unlocks == locks
    }

    fn wait_drained(&self, index: usize) {
        while !self.readers_gone(index) {
            yield_now();
        }
    }

    /// Wait until every read section that began before this call ended.
    pub fn synchronize(&self) {
        let _gp = self.gp.lock();
        let current = self.phase.load(Ordering::SeqCst) & 1;
        self.wait_drained(current ^ 1);
        self.phase.fetch_add(1, Ordering::SeqCst);
        self.wait_drained(current);
    }
}

/// The synchronous-grace-period registry.
pub struct SyncGraceRegistry {
    list: EpochList,
    srcu: Srcu,
    next_id: AtomicU64,
}

impl SyncGraceRegistry {
    pub fn new() -> SyncGraceRegistry {
        SyncGraceRegistry {
            list: EpochList::new(),
            srcu: Srcu::new(),
            next_id: AtomicU64::new(0),
        }
    }

    /// `shrink_all` counting its read section on shard `shard`.
    pub(crate) fn shrink_all_on(&self, shard: usize, nr: usize) -> usize {
        let section = self.srcu.read_lock_on(shard);
        let freed = scan_all(&self.list.live(), nr);
        self.srcu.read_unlock(section);
        super::drain_after_scan();
        freed
    }
}

impl Default for SyncGraceRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl ReclaimRegistry for SyncGraceRegistry {
    fn register(&self, s: Arc<dyn Shrinker>) -> ShrinkerId {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let entry = Arc::new(super::deferred::Entry {
            id,
            shrinker: s,
            dead: AtomicBool::new(false),
        });
        self.list.update(|cur| {
            let mut next = cur.clone();
            next.push(entry);
            next
        });
        ShrinkerId(id)
    }

    fn unregister(&self, id: ShrinkerId) {
        unlink(&self.list, id.0);
        self.srcu.synchronize();
    }

    fn shrink_all(&self, nr: usize) -> usize {
        self.shrink_all_on(lane(), nr)
    }

    fn len(&self) -> usize {
        self.list.len()
    }
}

#[cfg(all(test, lanefs_shuttle))]
mod model {
    use super::*;
    use crate::sync::model_iterations;

    struct Probe {
        unregistered: Arc<AtomicBool>,
        calls: Arc<AtomicU64>,
    }
    impl Shrinker for Probe {
        fn count(&self) -> usize {
            1
        }
        fn scan(&self, _: usize) -> usize {
            assert!(
                !self.unregistered.load(Ordering::SeqCst),
                "called after unregister returned"
            );
            self.calls.fetch_add(1, Ordering::SeqCst);
            shuttle::thread::yield_now();
            assert!(
                !self.unregistered.load(Ordering::SeqCst),
                "unregister returned during a call"
            );
            1
        }
    }

    /// Scans on two reader shards race unregister: the shrinker is never
    /// running or called once unregister has returned (a full grace
    /// period), however the phases interleave.
    #[test]
    fn model_scan_vs_unregister_waits_a_grace_period() {
        crate::sync::check_random(
            || {
                let r = Arc::new(SyncGraceRegistry::new());
                let unregistered = Arc::new(AtomicBool::new(false));
                let calls = Arc::new(AtomicU64::new(0));
                let id = r.register(Arc::new(Probe {
                    unregistered: unregistered.clone(),
                    calls: calls.clone(),
                }));
                let scanners: Vec<_> = (0..3)
                    .map(|shard| {
                        let r = r.clone();
                        shuttle::thread::spawn(move || {
                            r.shrink_all_on(shard, 1);
                            r.shrink_all_on(shard, 1);
                        })
                    })
                    .collect();
                // A second grace period in flight exercises the flips.
                let r2 = r.clone();
                let other = shuttle::thread::spawn(move || r2.srcu.synchronize());
                r.unregister(id);
                unregistered.store(true, Ordering::SeqCst);
                other.join().unwrap();
                for s in scanners {
                    s.join().unwrap();
                }
                assert!(calls.load(Ordering::SeqCst) <= 6);
                assert!(r.is_empty());
            },
            model_iterations(),
        );
    }
}
