//! `reclaim=deferred` (default): lock-free scans, unregister never waits.
//!
//! The registry is [`REGISTRY_SHARDS`] shards; a shrinker joins the shard of
//! the registering thread's lane, so mounts created on different lanes
//! never touch the same lock or cache line. Each shard publishes an
//! immutable list of entries through an epoch-protected pointer.
//!
//! Locks and atomics:
//! * `Shard::writer` (mutex, a leaf): serialises the register/unregister
//!   calls of one shard (they copy the list, change the copy, publish it).
//!   Scans never take it.
//! * `Shard::list` (crossbeam-epoch `Atomic`; Release store by writers,
//!   Acquire load by scans under a guard): the current list. A replaced
//!   list is freed by `defer_destroy` once every guard that could have read
//!   it is gone, which drops its references to the entries.
//! * `Entry` is reference-counted (`Arc`): each published list holds one
//!   reference, each scan one per entry it is about to call. The shrinker
//!   is freed with the last reference — never while a scan uses it.
//! * `Entry::dead` (Release store by unregister before it unlinks the
//!   entry, Acquire load by scans): a scan skips dead entries it still
//!   finds in an old list, and checks again just before each call.
//! * `SCAN_SNAPSHOT` (thread-local, no synchronisation): a scanning
//!   thread's buffer for the references it copies under its one pin; taken
//!   for the scan and put back empty, so scans allocate only to grow it.

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned};

use super::{ReclaimRegistry, Shrinker, ShrinkerId};
use crate::lane::lane;
use crate::sync::{Arc, AtomicBool, AtomicU64, Mutex, Ordering};

/// Shards of the deferred registry (lanes map onto them modulo this).
pub const REGISTRY_SHARDS: usize = 32;

pub(super) struct Entry {
    pub id: u64,
    pub shrinker: Arc<dyn Shrinker>,
    pub dead: AtomicBool,
}

pub(super) type List = Vec<Arc<Entry>>;

/// One published list and the lock its writers share (also used by
/// `sync-grace`, which differs only in what unregister waits for).
pub(super) struct EpochList {
    writer: Mutex<()>,
    list: Atomic<List>,
}

impl EpochList {
    pub fn new() -> EpochList {
        EpochList {
            writer: Mutex::new(()),
            list: Atomic::new(Vec::new()),
        }
    }

    /// Replace the list with `change(current)`; the old one is freed after
    /// the epoch.
    pub fn update(&self, change: impl FnOnce(&List) -> List) {
        let _w = self.writer.lock();
        let guard = epoch::pin();
        let old = self.list.load(Ordering::Acquire, &guard);
        // SAFETY: lists are only ever replaced under `writer`, which we
        // hold, and freed through `defer_destroy` after being unlinked; a
        // non-null `old` loaded under `guard` stays valid while it lives.
        let next = change(unsafe { old.as_ref() }.expect("the list is never null"));
        self.list.store(Owned::new(next), Ordering::Release);
        // SAFETY: `old` is unlinked (no new reader can load it); readers
        // that loaded it hold guards, and the epoch defers the free past
        // them. Only this writer (under `writer`) could unlink it.
        unsafe { guard.defer_destroy(old) };
    }

    /// References to the live entries (the scan's snapshot).
    pub fn live(&self) -> Vec<Arc<Entry>> {
        let mut snapshot = Vec::new();
        self.live_into(&epoch::pin(), &mut snapshot);
        snapshot
    }

    /// Append references to the live entries to `snapshot`, under the
    /// caller's `guard` (one pin may cover every shard of a scan).
    pub fn live_into(&self, guard: &Guard, snapshot: &mut Vec<Arc<Entry>>) {
        let list = self.list.load(Ordering::Acquire, guard);
        // SAFETY: loaded under `guard`; freed only via `defer_destroy`.
        let list = unsafe { list.as_ref() }.expect("the list is never null");
        snapshot.extend(
            list.iter()
                .filter(|e| !e.dead.load(Ordering::Acquire))
                .cloned(),
        );
    }

    pub fn len(&self) -> usize {
        let guard = epoch::pin();
        // SAFETY: as in `live`.
        unsafe { self.list.load(Ordering::Acquire, &guard).as_ref() }.map_or(0, Vec::len)
    }
}

impl Drop for EpochList {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader or writer can hold the list.
        unsafe {
            let list = self.list.load(Ordering::Relaxed, epoch::unprotected());
            if !list.is_null() {
                drop(list.into_owned());
            }
        }
    }
}

/// Mark `id` dead and unlink it from `list`.
pub(super) fn unlink(list: &EpochList, id: u64) {
    list.update(|cur| {
        let mut next = Vec::with_capacity(cur.len());
        for e in cur {
            if e.id == id {
                e.dead.store(true, Ordering::Release);
            } else {
                next.push(e.clone());
            }
        }
        debug_assert_eq!(next.len() + 1, cur.len(), "shrinker {id} not registered");
        next
    });
}

/// Call every entry of `snapshot` still alive.
pub(super) fn scan_all(snapshot: &[Arc<Entry>], nr: usize) -> usize {
    snapshot
        .iter()
        .filter(|e| !e.dead.load(Ordering::Acquire))
        .map(|e| e.shrinker.scan(nr))
        .sum()
}

thread_local! {
    /// A scanning thread's snapshot buffer, kept between its scans (empty
    /// while no scan of this thread runs; a nested scan finds it taken and
    /// starts its own).
    static SCAN_SNAPSHOT: std::cell::RefCell<Vec<Arc<Entry>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// The default registry.
pub struct DeferredRegistry {
    shards: Box<[EpochList]>,
    next_id: AtomicU64,
}

impl DeferredRegistry {
    pub fn new() -> DeferredRegistry {
        DeferredRegistry {
            shards: (0..REGISTRY_SHARDS).map(|_| EpochList::new()).collect(),
            next_id: AtomicU64::new(0),
        }
    }

    /// `register` into shard `shard` (the lane's, or a model thread's).
    pub(crate) fn register_on(&self, shard: usize, s: Arc<dyn Shrinker>) -> ShrinkerId {
        let shard = shard % self.shards.len();
        let seq = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let id = seq * REGISTRY_SHARDS as u64 + shard as u64;
        let entry = Arc::new(Entry {
            id,
            shrinker: s,
            dead: AtomicBool::new(false),
        });
        self.shards[shard].update(|cur| {
            // One allocation of the final size (a clone then a push would
            // grow the copy a second time).
            let mut next = Vec::with_capacity(cur.len() + 1);
            next.extend(cur.iter().cloned());
            next.push(entry);
            next
        });
        ShrinkerId(id)
    }
}

impl Default for DeferredRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl ReclaimRegistry for DeferredRegistry {
    fn register(&self, s: Arc<dyn Shrinker>) -> ShrinkerId {
        self.register_on(lane(), s)
    }

    fn unregister(&self, id: ShrinkerId) {
        let shard = (id.0 % REGISTRY_SHARDS as u64) as usize;
        unlink(&self.shards[shard], id.0);
    }

    fn shrink_all(&self, nr: usize) -> usize {
        // One pin for the copy of every shard (a pin is a full fence, and
        // may run a collection), into this thread's reused buffer: a scan
        // neither pins nor allocates per shard. The guard is dropped
        // before any shrinker runs.
        let mut snapshot = SCAN_SNAPSHOT.with(|b| std::mem::take(&mut *b.borrow_mut()));
        debug_assert!(snapshot.is_empty(), "a scan's snapshot outlived it");
        {
            let guard = epoch::pin();
            for shard in self.shards.iter() {
                shard.live_into(&guard, &mut snapshot);
            }
        }
        let freed = scan_all(&snapshot, nr);
        // Our references go before the deferred unmounts run, so an entry
        // whose last reference is ours is freed here, not kept to the next
        // scan.
        snapshot.clear();
        super::drain_after_scan();
        SCAN_SNAPSHOT.with(|b| *b.borrow_mut() = snapshot);
        freed
    }

    fn len(&self) -> usize {
        self.shards.iter().map(EpochList::len).sum()
    }
}

#[cfg(all(test, lanefs_shuttle))]
mod model {
    use super::*;
    use crate::sync::model_iterations;

    /// A shrinker that records its calls and its own destruction.
    struct Probe {
        freed: Arc<AtomicBool>,
        calls: Arc<AtomicU64>,
        /// Set once unregister returned; the scan spins on it while
        /// `wait_for_unregister`, so an unregister that waited for scans
        /// would deadlock (shuttle reports it).
        unregistered: Arc<AtomicBool>,
        wait_for_unregister: bool,
    }
    impl Shrinker for Probe {
        fn count(&self) -> usize {
            1
        }
        fn scan(&self, _: usize) -> usize {
            assert!(!self.freed.load(Ordering::SeqCst), "use after free");
            self.calls.fetch_add(1, Ordering::SeqCst);
            while self.wait_for_unregister && !self.unregistered.load(Ordering::SeqCst) {
                shuttle::thread::yield_now();
            }
            1
        }
    }
    impl Drop for Probe {
        fn drop(&mut self) {
            self.freed.store(true, Ordering::SeqCst);
        }
    }

    fn probe(
        wait: bool,
    ) -> (
        Arc<dyn Shrinker>,
        Arc<AtomicBool>,
        Arc<AtomicU64>,
        Arc<AtomicBool>,
    ) {
        let (freed, calls, unreg) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let p = Probe {
            freed: freed.clone(),
            calls: calls.clone(),
            unregistered: unreg.clone(),
            wait_for_unregister: wait,
        };
        (Arc::new(p), freed, calls, unreg)
    }

    /// Scans race an unregister (and a register on the same shard): no
    /// shrinker is called after its object is freed, unregister never
    /// waits for a scan (a scan that waits for unregister to return does
    /// not deadlock), and once unregister returned and the scans finished,
    /// no later scan calls it.
    #[test]
    fn model_scan_vs_unregister() {
        shuttle::check_random(
            || {
                let r = Arc::new(DeferredRegistry::new());
                let (p, _freed, calls, unreg) = probe(true);
                let id = r.register_on(0, p);
                let scanners: Vec<_> = (0..2)
                    .map(|_| {
                        let r = r.clone();
                        shuttle::thread::spawn(move || r.shrink_all(1))
                    })
                    .collect();
                let r2 = r.clone();
                let other = shuttle::thread::spawn(move || {
                    let (q, _, _, _) = probe(false);
                    r2.register_on(0, q)
                });
                r.unregister(id);
                unreg.store(true, Ordering::SeqCst);
                let other_id = other.join().unwrap();
                for s in scanners {
                    s.join().unwrap();
                }
                let before = calls.load(Ordering::SeqCst);
                assert!(before <= 2);
                r.shrink_all(1);
                assert_eq!(
                    calls.load(Ordering::SeqCst),
                    before,
                    "called after unregister"
                );
                assert_eq!(r.len(), 1);
                r.unregister(other_id);
                assert!(r.is_empty());
            },
            model_iterations(),
        );
    }
}
