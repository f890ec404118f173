//! The synchronisation seam: every lock-free structure of the core takes its
//! atomics, `Arc`, locks and spin hints from here, so that one build flag
//! swaps them all for a model checker's.
//!
//! * Normal builds: `std` atomics and `Arc`, `parking_lot` locks.
//! * `RUSTFLAGS="--cfg lanefs_shuttle"`: `shuttle`'s, whose every operation
//!   is a scheduling point. Each lock-free module keeps its model checks in
//!   a `#[cfg(all(test, lanefs_shuttle))]` module of tests named `model_*`,
//!   which explore interleavings of the real structure; `scripts/test.sh`
//!   runs them (`cargo test -p lanefs-core --lib model_ --test-threads=1`)
//!   in their own target directory, with [`model_iterations`] as the
//!   budget (`LANEFS_SHUTTLE_ITERS`, default 1000), each through
//!   `check_random` here, which collects the epoch's garbage inside the
//!   execution (see there).
//!
//! * `--features audit` (not with shuttle): thin wrappers over the normal
//!   types that, while the current thread's recorder is on, log every
//!   shared location touched at cache-line granularity, named by the
//!   `file:line` of the access (see [`audit`]). `Arc`, `Weak` and
//!   `OnceLock` stay `std`'s in every build (see `audit` for why).
//!
//! The lock wrappers keep `parking_lot`'s shape (`lock()` returns the guard
//! directly) under both builds, so structure code is written once.
//! Memory reclamation (crossbeam-epoch) is not swapped: under shuttle all
//! model threads share one OS thread and so one epoch participant, which
//! only ever delays frees (never frees early).

// Each structure takes what it needs; not every build uses every name.
#![allow(unused_imports, dead_code)]

#[cfg(not(any(lanefs_shuttle, feature = "audit")))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(not(lanefs_shuttle))]
pub(crate) use std::sync::{Arc, OnceLock, Weak};

// The conflict audit (`--features audit`): recording wrappers with the
// same API (see `sync/audit.rs`). Shuttle builds keep shuttle's types.
#[cfg(all(feature = "audit", not(lanefs_shuttle)))]
pub mod audit;
#[cfg(all(feature = "audit", not(lanefs_shuttle)))]
pub(crate) use audit::{
    AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Mutex, RwLock,
};
#[cfg(all(feature = "audit", not(lanefs_shuttle)))]
pub(crate) use parking_lot::{MutexGuard, RwLockReadGuard, RwLockWriteGuard};
#[cfg(all(feature = "audit", not(lanefs_shuttle)))]
pub(crate) use std::sync::atomic::{fence, Ordering};

#[cfg(lanefs_shuttle)]
pub(crate) use shuttle::sync::atomic::{
    fence, AtomicBool, AtomicI32, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(lanefs_shuttle)]
pub(crate) use shuttle::sync::Arc;
#[cfg(lanefs_shuttle)]
pub(crate) use std::sync::{OnceLock, Weak};

/// Report to the conflict audit an access it cannot see, made inside a
/// crate that does not go through this seam (crossbeam-skiplist): a read
/// or write of `at`'s cache line, named by the caller's `file:line`. Other
/// builds: nothing.
#[inline(always)]
#[track_caller]
pub(crate) fn note_opaque<T>(at: &T, write: bool) {
    #[cfg(all(feature = "audit", not(lanefs_shuttle)))]
    audit::record_opaque(at, write);
    #[cfg(not(all(feature = "audit", not(lanefs_shuttle))))]
    let _ = (at, write);
}

/// Report to the conflict audit a clone or drop of an `Arc` whose data is at
/// `data`: a write of the line holding its reference counts (`std`'s
/// `ArcInner` keeps them just before the data: at 16 bytes before it, or
/// in the 64 bytes before a 64-aligned one — the line of `data - 16`
/// either way). `std::sync::Arc` does not go through this seam. Other
/// builds: nothing.
#[inline(always)]
#[track_caller]
pub(crate) fn note_arc_count<T>(data: *const T) {
    #[cfg(all(feature = "audit", not(lanefs_shuttle)))]
    audit::record_opaque(data.cast::<u8>().wrapping_sub(16), true);
    #[cfg(not(all(feature = "audit", not(lanefs_shuttle))))]
    let _ = data;
}

/// A hint inside a retry loop: lets a model checker run another thread.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(lanefs_shuttle)]
    shuttle::thread::yield_now();
    #[cfg(not(lanefs_shuttle))]
    std::hint::spin_loop();
}

/// Give up the CPU while waiting for another thread (a state change that
/// takes longer than a few spins, such as an inode being freed).
#[inline]
pub(crate) fn yield_now() {
    #[cfg(lanefs_shuttle)]
    shuttle::thread::yield_now();
    #[cfg(not(lanefs_shuttle))]
    std::thread::yield_now();
}

#[cfg(not(any(lanefs_shuttle, feature = "audit")))]
pub(crate) use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

#[cfg(lanefs_shuttle)]
pub(crate) use model_locks::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// `parking_lot`-shaped wrappers over shuttle's locks (poisoning is
/// impossible in a model run that stops at the first panic).
#[cfg(lanefs_shuttle)]
mod model_locks {
    pub(crate) use shuttle::sync::{MutexGuard, RwLockReadGuard, RwLockWriteGuard};

    #[derive(Default)]
    pub(crate) struct Mutex<T>(shuttle::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub fn new(v: T) -> Self {
            Mutex(shuttle::sync::Mutex::new(v))
        }
        pub fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }
        pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            self.0.try_lock().ok()
        }
    }

    #[derive(Default)]
    pub(crate) struct RwLock<T>(shuttle::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub fn new(v: T) -> Self {
            RwLock(shuttle::sync::RwLock::new(v))
        }
        pub fn read(&self) -> RwLockReadGuard<'_, T> {
            self.0.read().unwrap_or_else(|e| e.into_inner())
        }
        pub fn write(&self) -> RwLockWriteGuard<'_, T> {
            self.0.write().unwrap_or_else(|e| e.into_inner())
        }
        pub fn try_write(&self) -> Option<RwLockWriteGuard<'_, T>> {
            self.0.try_write().ok()
        }
        pub fn try_read(&self) -> Option<RwLockReadGuard<'_, T>> {
            self.0.try_read().ok()
        }
    }
}

/// Run a model check: `shuttle::check_random` of `f`, each iteration
/// ending with the epoch's garbage collected *inside* the execution.
/// Deferred frees of the engine's structures (icache nodes, directory
/// indexes, page indexes) load model atomics in their `Drop`; run later by
/// another test's thread, or by a test thread's exit (crossbeam finalizes
/// its thread-local handle then), they touch a model atomic outside any
/// execution and shuttle aborts the process. Model checks also run one at
/// a time (`--test-threads=1` in scripts/test.sh), so no other thread's
/// pin holds the epoch back while an iteration drains it.
#[cfg(all(test, lanefs_shuttle))]
pub(crate) fn check_random<F: Fn() + Send + Sync + 'static>(f: F, iterations: usize) {
    shuttle::check_random(drained(f), iterations);
}

/// As [`check_random`] with shuttle's PCT scheduler (priorities changed at
/// `depth` random points): it finds the races where one thread must stall
/// for a long stretch of another's steps, which a uniformly random
/// schedule almost never produces.
#[cfg(all(test, lanefs_shuttle))]
pub(crate) fn check_pct<F: Fn() + Send + Sync + 'static>(f: F, iterations: usize, depth: usize) {
    shuttle::check_pct(drained(f), iterations, depth);
}

#[cfg(all(test, lanefs_shuttle))]
fn drained<F: Fn() + Send + Sync + 'static>(f: F) -> impl Fn() + Send + Sync + 'static {
    move || {
        f();
        // Each flush seals the local bag, tries to advance the global
        // epoch and runs the bags two epochs old: a few rounds empty them
        // when nobody else is pinned.
        for _ in 0..4 {
            crossbeam_epoch::pin().flush();
        }
    }
}

/// Iterations for one model check: `LANEFS_SHUTTLE_ITERS`, default 1000.
#[cfg(lanefs_shuttle)]
pub(crate) fn model_iterations() -> usize {
    std::env::var("LANEFS_SHUTTLE_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}
