//! Reclaim registry: the caches that can shrink, across every mount of the
//! process, under memory pressure (seed 001's shrinker list).
//!
//! Locking: `entries` (mutex) protects the list of registered shrinkers. A
//! scan clones the `Arc`s under the lock and calls them *after* dropping it,
//! so a slow shrinker never blocks registration, and unregistering only
//! removes an entry: it never waits for running scans or a grace period (a
//! scan in flight keeps its own `Arc`; the shrinker object is freed when the
//! last one drops). The lock is a leaf: nothing else is taken under it.

use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

/// A cache that can give memory back.
pub trait Shrinker: Send + Sync {
    /// Objects that could be freed now (an estimate).
    fn count(&self) -> usize;
    /// Free up to `nr` objects; returns how many were freed.
    fn scan(&self, nr: usize) -> usize;
}

/// Handle returned by [`ReclaimRegistry::register`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShrinkerId(u64);

/// Registered shrinkers and the last id handed out.
#[derive(Default)]
struct Entries {
    last_id: u64,
    list: Vec<(u64, Arc<dyn Shrinker>)>,
}

/// A set of shrinkers scanned together.
#[derive(Default)]
pub struct ReclaimRegistry {
    entries: Mutex<Entries>,
}

impl ReclaimRegistry {
    /// The process-wide registry every mount joins.
    pub fn global() -> &'static ReclaimRegistry {
        static GLOBAL: OnceLock<ReclaimRegistry> = OnceLock::new();
        GLOBAL.get_or_init(ReclaimRegistry::default)
    }

    pub fn register(&self, s: Arc<dyn Shrinker>) -> ShrinkerId {
        let mut e = self.entries.lock();
        e.last_id += 1;
        let id = e.last_id;
        e.list.push((id, s));
        ShrinkerId(id)
    }

    /// Remove a shrinker. Returns at once; scans already running finish
    /// with their own reference.
    pub fn unregister(&self, id: ShrinkerId) {
        self.entries.lock().list.retain(|(i, _)| *i != id.0);
    }

    /// Ask every shrinker to free up to `nr` objects; returns the total freed.
    pub fn shrink_all(&self, nr: usize) -> usize {
        let snapshot: Vec<Arc<dyn Shrinker>> = self
            .entries
            .lock()
            .list
            .iter()
            .map(|(_, s)| s.clone())
            .collect();
        snapshot.iter().map(|s| s.scan(nr)).sum()
    }

    /// Number of registered shrinkers.
    pub fn len(&self) -> usize {
        self.entries.lock().list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Fake(AtomicUsize);
    impl Shrinker for Fake {
        fn count(&self) -> usize {
            self.0.load(Ordering::Relaxed)
        }
        fn scan(&self, nr: usize) -> usize {
            let n = nr.min(self.count());
            self.0.fetch_sub(n, Ordering::Relaxed);
            n
        }
    }

    #[test]
    fn register_scan_unregister() {
        let r = ReclaimRegistry::default();
        let a = r.register(Arc::new(Fake(AtomicUsize::new(5))));
        let _b = r.register(Arc::new(Fake(AtomicUsize::new(2))));
        assert_eq!(r.shrink_all(3), 5);
        r.unregister(a);
        assert_eq!(r.len(), 1);
        assert_eq!(
            r.shrink_all(10),
            0,
            "b had 2 and gave both in the first scan"
        );
    }
}
