//! Reclaim registry (seed 001): the caches that can shrink, across every
//! mount of the process, and what drives them under memory pressure.
//!
//! Every [`Fs`](crate::Fs) registers one [`Shrinker`] (its inode and page
//! caches) in the process-wide registry of its configured design
//! ([`registry`]) and unregisters it when the instance is dropped. Designs
//! behind [`ReclaimRegistry`], selected by `FsConfig::variants.reclaim`:
//!
//! * [`DeferredRegistry`] (default, `reclaim=deferred`): entries sit in
//!   epoch-protected slots; scans are lock-free (one epoch guard while
//!   they call each shrinker through a borrowed reference), unregister clears
//!   the entry's slot and frees it through deferred reclamation. Neither
//!   register nor unregister ever waits for a scan or a grace period.
//! * [`RwLockRegistry`] (`reclaim=rwlock`): one global reader-writer lock;
//!   scans hold it shared for the whole scan, register and unregister take
//!   it exclusively (Linux's `shrinker_rwsem` before 6.4).
//! * [`SyncGraceRegistry`] (`reclaim=sync-grace`): lock-free scans inside a
//!   sleepable-RCU read section; unregister waits for a full grace period
//!   (every scan that may have seen the entry has finished) before it
//!   returns — commit f95bdb700bc6, the −88.8% stress-ng ramfs regression.
//!
//! What unregister guarantees differs, exactly:
//! * `rwlock`, `sync-grace`: once `unregister` returns, the shrinker is never
//!   called again (the guarantee Dave Chinner names in the seed thread).
//! * `deferred`: once `unregister` returns no new scan finds the entry, but
//!   a scan that had already taken its reference may still make one call
//!   (Kirill Tkhai's split unregister, with `super_cache_scan` checking
//!   `SB_ACTIVE`); the shrinker object lives until that call returns. The
//!   engine's shrinker holds only a `Weak` to its mount and does nothing
//!   once the mount is gone.
//!
//! Pressure ([`pressure`]): every mount charges its cached inodes and pages
//! to one process-wide count; a mount that adds to its cache checks that
//! count against the process limit ([`set_process_cache_limit`]) and, when
//! over, asks its registry to scan every mount (one reclaimer at a time).
//!
//! Locks: each design's locks are leaves with respect to the engine — a
//! scan holds none of them while it calls a shrinker except `rwlock`'s read
//! side and `sync-grace`'s read section, both of which a shrinker never
//! re-enters (it does not register or unregister).

mod deferred;
pub(crate) mod pressure;
mod rwlock;
mod sync_grace;

use crate::sync::{Arc, OnceLock};
use crate::ReclaimVariant;

pub use deferred::DeferredRegistry;
pub use pressure::{
    process_cache_limit, process_cached_objects, set_process_cache_limit,
    DEFAULT_PROCESS_CACHE_OBJECTS,
};
pub use rwlock::RwLockRegistry;
pub use sync_grace::SyncGraceRegistry;

/// A cache that can give memory back.
pub trait Shrinker: Send + Sync {
    /// Objects that could be freed now (an estimate).
    fn count(&self) -> usize;
    /// Free up to `nr` objects; returns how many were freed.
    fn scan(&self, nr: usize) -> usize;
}

/// Handle returned by [`ReclaimRegistry::register`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShrinkerId(pub(crate) u64);

/// A set of shrinkers scanned together.
pub trait ReclaimRegistry: Send + Sync {
    /// Add a shrinker; scans may call it from now on.
    fn register(&self, s: Arc<dyn Shrinker>) -> ShrinkerId;
    /// Remove a shrinker (see the module header for what each design
    /// guarantees once this returns).
    fn unregister(&self, id: ShrinkerId);
    /// Ask every live shrinker to free up to `nr` objects; the total freed.
    fn shrink_all(&self, nr: usize) -> usize;
    /// Registered shrinkers.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A registry of `variant`'s design, private to the caller (tests).
pub fn new_registry(variant: ReclaimVariant) -> Box<dyn ReclaimRegistry> {
    match variant {
        ReclaimVariant::Deferred => Box::new(DeferredRegistry::new()),
        ReclaimVariant::RwLock => Box::new(RwLockRegistry::new()),
        ReclaimVariant::SyncGrace => Box::new(SyncGraceRegistry::new()),
    }
}

/// The process-wide registry of `variant`'s design, which every mount
/// configured with it joins.
pub fn registry(variant: ReclaimVariant) -> &'static dyn ReclaimRegistry {
    static DEFERRED: OnceLock<DeferredRegistry> = OnceLock::new();
    static RWLOCK: OnceLock<RwLockRegistry> = OnceLock::new();
    static SYNC_GRACE: OnceLock<SyncGraceRegistry> = OnceLock::new();
    match variant {
        ReclaimVariant::Deferred => DEFERRED.get_or_init(DeferredRegistry::new),
        ReclaimVariant::RwLock => RWLOCK.get_or_init(RwLockRegistry::new),
        ReclaimVariant::SyncGrace => SYNC_GRACE.get_or_init(SyncGraceRegistry::new),
    }
}

thread_local! {
    static DROP_AFTER_SCAN: std::cell::RefCell<Vec<Box<dyn Send>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Keep `value` alive until the running scan has left the registry (its
/// read lock or read section). A shrinker that took a strong reference to
/// its mount hands it here: if that was the last one, the mount's
/// unmount (which unregisters) runs after the scan, never inside it —
/// where `rwlock` would deadlock on its own lock and `sync-grace` would
/// wait for its own read section.
pub fn drop_after_scan<T: Send + 'static>(value: T) {
    DROP_AFTER_SCAN.with(|d| d.borrow_mut().push(Box::new(value)));
}

/// Drop what the scan's shrinkers deferred; registries call this after
/// leaving their read side.
fn drain_after_scan() {
    let held = DROP_AFTER_SCAN.with(|d| std::mem::take(&mut *d.borrow_mut()));
    drop(held);
}

#[cfg(all(test, not(lanefs_shuttle)))]
mod tests {
    use super::*;
    use crate::sync::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Duration;

    const DESIGNS: [ReclaimVariant; 3] = [
        ReclaimVariant::Deferred,
        ReclaimVariant::RwLock,
        ReclaimVariant::SyncGrace,
    ];

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
        for v in DESIGNS {
            let r = new_registry(v);
            let a = r.register(Arc::new(Fake(AtomicUsize::new(5))));
            let b = r.register(Arc::new(Fake(AtomicUsize::new(2))));
            assert_ne!(a, b);
            assert_eq!(r.len(), 2, "{v:?}");
            assert_eq!(r.shrink_all(3), 5, "{v:?}: 3 from a, 2 from b");
            r.unregister(a);
            assert_eq!(r.len(), 1, "{v:?}");
            assert_eq!(r.shrink_all(10), 0, "{v:?}: b is empty, a is gone");
            r.unregister(b);
            assert!(r.is_empty(), "{v:?}");
        }
    }

    /// A shrinker that blocks until released, to hold a scan in flight.
    struct Stuck {
        entered: AtomicBool,
        release: AtomicBool,
    }
    impl Shrinker for Stuck {
        fn count(&self) -> usize {
            1
        }
        fn scan(&self, _: usize) -> usize {
            self.entered.store(true, Ordering::SeqCst);
            while !self.release.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            0
        }
    }

    /// The seed's point: with a scan stuck in another mount's shrinker,
    /// `deferred` unregisters at once; `rwlock` and `sync-grace` wait for
    /// the scan.
    #[test]
    fn unregister_waits_for_scans_only_in_the_before_designs() {
        for v in DESIGNS {
            let r: Arc<dyn ReclaimRegistry> = Arc::from(new_registry(v));
            let stuck = Arc::new(Stuck {
                entered: AtomicBool::new(false),
                release: AtomicBool::new(false),
            });
            r.register(stuck.clone());
            let mine = r.register(Arc::new(Fake(AtomicUsize::new(0))));
            let scanner = {
                let r = r.clone();
                std::thread::spawn(move || r.shrink_all(1))
            };
            while !stuck.entered.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            let done = Arc::new(AtomicBool::new(false));
            let unregister = {
                let (r, done) = (r.clone(), done.clone());
                std::thread::spawn(move || {
                    r.unregister(mine);
                    done.store(true, Ordering::SeqCst);
                })
            };
            std::thread::sleep(Duration::from_millis(50));
            let returned_during_scan = done.load(Ordering::SeqCst);
            stuck.release.store(true, Ordering::SeqCst);
            unregister.join().unwrap();
            scanner.join().unwrap();
            assert_eq!(
                returned_during_scan,
                v == ReclaimVariant::Deferred,
                "{v:?}: unregister returned while a scan ran: {returned_during_scan}"
            );
        }
    }
}
