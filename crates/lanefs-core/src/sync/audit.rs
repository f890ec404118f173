//! The conflict audit's recorder (`--features audit`): drop-in wrappers
//! for the seam's atomics and locks that log, per thread, every shared
//! location an operation touches, so that `lanefs-audit` can tell whether
//! two commuting operations touched a common cache line.
//!
//! What is recorded, while this thread's recorder is on ([`start`] ..
//! [`stop`]), each access named by the `file:line` of the call
//! (`#[track_caller]`):
//! * atomic loads: a read of the atomic's cache line (address / 64);
//! * atomic stores and read-modify-writes (`swap`, `compare_exchange*`
//!   whether or not it succeeds, `fetch_*`): a write of its line;
//! * lock acquisitions (`lock`, `read`, `write`, `try_*`): a write of the
//!   lock word's line — a read lock also read-modify-writes the word;
//! * anything else a caller reports with [`record_key`] (the audit's store
//!   wrapper logs store keys this way, in a name space of their own), and
//!   accesses inside crates that do not use the seam, reported as a read
//!   or write of one object's line with [`record_opaque`] (the directory's
//!   listing partitions, crossbeam-skiplist: an insert or remove writes
//!   the list's own line — its length and height seed — a listing reads
//!   it).
//!
//! What is not recorded: plain loads and stores under a lock (the lock's
//! line stands for them), `Arc`/`Weak` reference counts (`Arc` stays
//! `std::sync::Arc`: the core passes `Arc<dyn Store>` and
//! `Arc<dyn Shrinker>` through its public API and coerces `Arc<T>` into
//! them, which a newtype cannot do on stable Rust), `OnceLock` (a
//! read-mostly global), `fence`s, crossbeam-epoch internals (a pin touches
//! the thread's own participant; the global epoch is read-mostly),
//! crossbeam-skiplist's nodes (its list's line stands for them), the allocator, and page bytes copied by
//! the read path's inline-assembly copy (the file's sequence count, an
//! audited atomic, is read around it).
//!
//! Cost: with the recorder off, each access costs one thread-local flag
//! check; builds without the feature do not contain this module at all.
//!
//! No locks or atomics of its own: the log is thread-local.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::panic::Location;
use std::sync::atomic::{self as std_atomic, Ordering};

/// What an access touched.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// A cache line of memory (address / 64).
    Line(usize),
    /// A store key (`i/<ino>`, `d/<dir>/<name>`, `p/<ino>/<index>`, …).
    Key(String),
}

/// Where in the code an access was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Site {
    /// A `file:line` in the engine.
    Code(&'static Location<'static>),
    /// A store call (the key says which record).
    Store(&'static str),
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Site::Code(l) => write!(f, "{}:{}", l.file(), l.line()),
            Site::Store(call) => write!(f, "store::{call}"),
        }
    }
}

/// One recorded access.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Access {
    pub target: Target,
    /// The exact address for a [`Target::Line`] (0 for a key), so that a
    /// reader can tell true sharing (one word) from false sharing.
    pub addr: usize,
    pub write: bool,
    /// What kind of location: `atomic`, `mutex`, `rwlock`, `key`.
    pub what: &'static str,
    pub site: Site,
}

thread_local! {
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    static LOG: RefCell<Vec<Access>> = const { RefCell::new(Vec::new()) };
}

/// Start recording this thread's accesses (clearing any earlier log).
pub fn start() {
    LOG.with(|l| l.borrow_mut().clear());
    ACTIVE.with(|a| a.set(true));
}

/// Stop recording and hand back what this thread touched since [`start`].
pub fn stop() -> Vec<Access> {
    ACTIVE.with(|a| a.set(false));
    LOG.with(|l| std::mem::take(&mut *l.borrow_mut()))
}

/// Whether this thread is recording.
#[inline]
pub fn active() -> bool {
    ACTIVE.with(|a| a.get())
}

fn push(a: Access) {
    LOG.with(|l| l.borrow_mut().push(a));
}

/// Record an access to a store key (for store wrappers).
pub fn record_key(key: String, write: bool, call: &'static str) {
    if active() {
        push(Access {
            target: Target::Key(key),
            addr: 0,
            write,
            what: "key",
            site: Site::Store(call),
        });
    }
}

/// Record an access to `at`'s line made by code that does not go through
/// the seam (`sync::note_opaque`), as `what = "opaque"`.
#[track_caller]
pub fn record_opaque<T>(at: *const T, write: bool) {
    line(at, write, "opaque");
}

#[inline(always)]
#[track_caller]
fn line<T: ?Sized>(addr: *const T, write: bool, what: &'static str) {
    if active() {
        let addr = addr.cast::<u8>() as usize;
        push(Access {
            target: Target::Line(addr / 64),
            addr,
            write,
            what,
            site: Site::Code(Location::caller()),
        });
    }
}

/// Methods every audited atomic has.
macro_rules! atomic_common {
    ($name:ident, $std:ty, $val:ty) => {
        impl $name {
            #[inline]
            #[track_caller]
            pub fn load(&self, o: Ordering) -> $val {
                line(self, false, "atomic");
                self.0.load(o)
            }
            #[inline]
            #[track_caller]
            pub fn store(&self, v: $val, o: Ordering) {
                line(self, true, "atomic");
                self.0.store(v, o)
            }
            #[inline]
            #[track_caller]
            pub fn swap(&self, v: $val, o: Ordering) -> $val {
                line(self, true, "atomic");
                self.0.swap(v, o)
            }
            #[inline]
            #[track_caller]
            pub fn compare_exchange(
                &self,
                cur: $val,
                new: $val,
                s: Ordering,
                f: Ordering,
            ) -> Result<$val, $val> {
                line(self, true, "atomic");
                self.0.compare_exchange(cur, new, s, f)
            }
            #[inline]
            #[track_caller]
            pub fn compare_exchange_weak(
                &self,
                cur: $val,
                new: $val,
                s: Ordering,
                f: Ordering,
            ) -> Result<$val, $val> {
                line(self, true, "atomic");
                self.0.compare_exchange_weak(cur, new, s, f)
            }
            #[inline]
            #[track_caller]
            pub fn fetch_update<F: FnMut($val) -> Option<$val>>(
                &self,
                s: Ordering,
                f: Ordering,
                g: F,
            ) -> Result<$val, $val> {
                line(self, true, "atomic");
                self.0.fetch_update(s, f, g)
            }
            #[inline]
            pub fn get_mut(&mut self) -> &mut $val {
                self.0.get_mut()
            }
            #[inline]
            pub fn into_inner(self) -> $val {
                self.0.into_inner()
            }
            #[inline]
            pub fn as_ptr(&self) -> *mut $val {
                self.0.as_ptr()
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }
    };
}

/// An audited integer or boolean atomic.
macro_rules! atomic_value {
    ($name:ident, $std:ty, $val:ty) => {
        #[doc = concat!("`", stringify!($std), "`, audited.")]
        #[derive(Default)]
        #[repr(transparent)]
        pub struct $name($std);

        impl $name {
            pub const fn new(v: $val) -> Self {
                $name(<$std>::new(v))
            }
        }

        atomic_common!($name, $std, $val);
    };
}

/// `fetch_*` read-modify-writes of an audited atomic.
macro_rules! atomic_rmw {
    ($name:ident, $val:ty, $($op:ident),*) => {
        impl $name {
            $(
                #[inline]
                #[track_caller]
                pub fn $op(&self, v: $val, o: Ordering) -> $val {
                    line(self, true, "atomic");
                    self.0.$op(v, o)
                }
            )*
        }
    };
}

atomic_value!(AtomicBool, std_atomic::AtomicBool, bool);
atomic_rmw!(AtomicBool, bool, fetch_or, fetch_and, fetch_xor);
atomic_value!(AtomicU32, std_atomic::AtomicU32, u32);
atomic_value!(AtomicU64, std_atomic::AtomicU64, u64);
atomic_value!(AtomicI32, std_atomic::AtomicI32, i32);
atomic_value!(AtomicI64, std_atomic::AtomicI64, i64);
atomic_value!(AtomicUsize, std_atomic::AtomicUsize, usize);
atomic_rmw!(AtomicU32, u32, fetch_add, fetch_sub, fetch_or, fetch_and, fetch_max, fetch_min);
atomic_rmw!(AtomicU64, u64, fetch_add, fetch_sub, fetch_or, fetch_and, fetch_max, fetch_min);
atomic_rmw!(AtomicI32, i32, fetch_add, fetch_sub, fetch_or, fetch_and, fetch_max, fetch_min);
atomic_rmw!(AtomicI64, i64, fetch_add, fetch_sub, fetch_or, fetch_and, fetch_max, fetch_min);
atomic_rmw!(
    AtomicUsize,
    usize,
    fetch_add,
    fetch_sub,
    fetch_or,
    fetch_and,
    fetch_max,
    fetch_min
);

/// `AtomicPtr<T>`, audited.
#[repr(transparent)]
pub struct AtomicPtr<T>(std_atomic::AtomicPtr<T>);

impl<T> AtomicPtr<T> {
    pub const fn new(p: *mut T) -> Self {
        AtomicPtr(std_atomic::AtomicPtr::new(p))
    }
}

impl<T> Default for AtomicPtr<T> {
    fn default() -> Self {
        AtomicPtr::new(std::ptr::null_mut())
    }
}

/// `atomic_common!` for a generic pointer type.
mod ptr_impl {
    use super::*;
    type P<T> = *mut T;

    impl<T> AtomicPtr<T> {
        #[inline]
        #[track_caller]
        pub fn load(&self, o: Ordering) -> P<T> {
            line(self, false, "atomic");
            self.0.load(o)
        }
        #[inline]
        #[track_caller]
        pub fn store(&self, v: P<T>, o: Ordering) {
            line(self, true, "atomic");
            self.0.store(v, o)
        }
        #[inline]
        #[track_caller]
        pub fn swap(&self, v: P<T>, o: Ordering) -> P<T> {
            line(self, true, "atomic");
            self.0.swap(v, o)
        }
        #[inline]
        #[track_caller]
        pub fn compare_exchange(
            &self,
            cur: P<T>,
            new: P<T>,
            s: Ordering,
            f: Ordering,
        ) -> Result<P<T>, P<T>> {
            line(self, true, "atomic");
            self.0.compare_exchange(cur, new, s, f)
        }
        #[inline]
        #[track_caller]
        pub fn compare_exchange_weak(
            &self,
            cur: P<T>,
            new: P<T>,
            s: Ordering,
            f: Ordering,
        ) -> Result<P<T>, P<T>> {
            line(self, true, "atomic");
            self.0.compare_exchange_weak(cur, new, s, f)
        }
        #[inline]
        pub fn get_mut(&mut self) -> &mut P<T> {
            self.0.get_mut()
        }
        #[inline]
        pub fn into_inner(self) -> P<T> {
            self.0.into_inner()
        }
    }

    impl<T> fmt::Debug for AtomicPtr<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            fmt::Debug::fmt(&self.0, f)
        }
    }
}

/// `parking_lot::Mutex`, audited: every acquisition writes the lock word.
#[derive(Default)]
#[repr(transparent)]
pub struct Mutex<T: ?Sized>(parking_lot::Mutex<T>);

impl<T> Mutex<T> {
    pub const fn new(v: T) -> Self {
        Mutex(parking_lot::Mutex::new(v))
    }
    pub fn into_inner(self) -> T {
        self.0.into_inner()
    }
}

impl<T: ?Sized> Mutex<T> {
    #[inline]
    #[track_caller]
    pub fn lock(&self) -> parking_lot::MutexGuard<'_, T> {
        line(self, true, "mutex");
        self.0.lock()
    }
    #[inline]
    #[track_caller]
    pub fn try_lock(&self) -> Option<parking_lot::MutexGuard<'_, T>> {
        line(self, true, "mutex");
        self.0.try_lock()
    }
    #[inline]
    pub fn get_mut(&mut self) -> &mut T {
        self.0.get_mut()
    }
    #[inline]
    #[track_caller]
    pub fn is_locked(&self) -> bool {
        line(self, false, "mutex");
        self.0.is_locked()
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// `parking_lot::RwLock`, audited: read and write acquisitions both write
/// the lock word (a reader read-modify-writes the reader count).
#[derive(Default)]
#[repr(transparent)]
pub struct RwLock<T: ?Sized>(parking_lot::RwLock<T>);

impl<T> RwLock<T> {
    pub const fn new(v: T) -> Self {
        RwLock(parking_lot::RwLock::new(v))
    }
    pub fn into_inner(self) -> T {
        self.0.into_inner()
    }
}

impl<T: ?Sized> RwLock<T> {
    #[inline]
    #[track_caller]
    pub fn read(&self) -> parking_lot::RwLockReadGuard<'_, T> {
        line(self, true, "rwlock");
        self.0.read()
    }
    #[inline]
    #[track_caller]
    pub fn write(&self) -> parking_lot::RwLockWriteGuard<'_, T> {
        line(self, true, "rwlock");
        self.0.write()
    }
    #[inline]
    #[track_caller]
    pub fn try_read(&self) -> Option<parking_lot::RwLockReadGuard<'_, T>> {
        line(self, true, "rwlock");
        self.0.try_read()
    }
    #[inline]
    #[track_caller]
    pub fn try_write(&self) -> Option<parking_lot::RwLockWriteGuard<'_, T>> {
        line(self, true, "rwlock");
        self.0.try_write()
    }
    #[inline]
    pub fn get_mut(&mut self) -> &mut T {
        self.0.get_mut()
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorder_logs_atomics_and_locks_with_their_call_sites() {
        let counter = AtomicU64::new(0);
        let lock = Mutex::new(0u32);
        counter.load(Ordering::Relaxed); // not recording: not logged
        start();
        let load_line = line!() + 1;
        counter.load(Ordering::Relaxed);
        counter.fetch_add(1, Ordering::Relaxed);
        *lock.lock() += 1;
        let log = stop();
        counter.store(5, Ordering::Relaxed); // stopped: not logged
        assert_eq!(log.len(), 3, "{log:?}");
        let c_line = Target::Line(&counter as *const AtomicU64 as usize / 64);
        assert_eq!(log[0].target, c_line);
        assert!(!log[0].write);
        assert_eq!(log[1].target, c_line);
        assert!(log[1].write);
        assert_eq!(log[2].what, "mutex");
        assert!(log[2].write);
        match log[0].site {
            Site::Code(l) => {
                assert!(l.file().ends_with("audit.rs"), "{}", l.file());
                assert_eq!(l.line(), load_line);
            }
            Site::Store(_) => panic!("an atomic named as a store key"),
        }
        assert!(stop().is_empty());
    }
}
