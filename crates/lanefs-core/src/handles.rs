//! Open handles' references to the engine, counted per lane (Linux's
//! per-CPU `mnt_count`, and sv6's Refcache idea in its simplest form).
//!
//! Every [`OpenFile`](crate::OpenFile) keeps the engine (`FsInner`) alive.
//! With an `Arc` per handle, every open and close in the whole file system
//! wrote the `Arc`'s one count: opens of different files shared a line (the
//! audit saw 60 such pairs once it was told about `Arc` counts). Here a
//! handle adds one to its lane's count and holds a plain pointer; the engine
//! holds its own `Arc` (`keep`) until no `Fs` is left *and* the counts sum
//! to zero, then gives it up.
//!
//! Locking rules:
//! * `lanes[l]` (mutex, on a cache line of its own): the handles counted on
//!   lane `l`. An open adds 1 on the opener's lane, a close subtracts 1 on
//!   the closer's (a handle closed on another thread than opened it leaves
//!   one lane above and another below: only the sum means anything). Taken
//!   alone, except by [`Handles::release_if_idle`], which takes them all in
//!   index order to read an exact sum.
//! * `closing` (read and written under a lane lock's ordering: stored
//!   before `begin_closing` takes any lane lock, read by a close under its
//!   lane's lock): set once, when the last `Fs` is dropped. A close that
//!   sees it sums the lanes; one that does not ran before `begin_closing`
//!   took its lane's lock, so that sum sees its subtraction.
//! * `keep` (mutex, a leaf): the engine's reference to itself, taken out
//!   (and dropped by the caller, outside every lock) once closing and idle.

use std::ptr::NonNull;

use crate::inode::OwnLine;
use crate::sync::{Arc, AtomicBool, Mutex, Ordering};

/// Lanes with a count of their own (more lanes share them).
const HANDLE_LANES: usize = 64;

/// Handles' references to an instance of `T`, per lane (module doc): the
/// engine's, and the path layer's for its own state.
pub struct Handles<T> {
    lanes: Box<[OwnLine<Mutex<i64>>]>,
    closing: AtomicBool,
    keep: Mutex<Option<Arc<T>>>,
}

impl<T> Default for Handles<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Handles<T> {
    pub fn new() -> Self {
        Handles {
            lanes: (0..HANDLE_LANES).map(|_| OwnLine(Mutex::new(0))).collect(),
            closing: AtomicBool::new(false),
            keep: Mutex::new(None),
        }
    }

    /// Give the engine its own reference (once, after it is made).
    pub fn keep(&self, me: Arc<T>) {
        *self.keep.lock() = Some(me);
    }

    fn lane(&self) -> &Mutex<i64> {
        &self.lanes[crate::lane::lane() % HANDLE_LANES]
    }

    /// A handle is made (the caller holds an `Fs`, or another handle).
    pub fn open(&self) {
        *self.lane().lock() += 1;
    }

    /// A handle is gone. Returns the engine's own reference when this was
    /// the last handle after the last `Fs`: the caller drops it (which may
    /// drop the engine) and must not touch the engine afterwards.
    #[must_use]
    pub fn close(&self) -> Option<Arc<T>> {
        let closing = {
            let mut n = self.lane().lock();
            *n -= 1;
            self.closing.load(Ordering::Relaxed)
        };
        if closing {
            self.release_if_idle()
        } else {
            None
        }
    }

    /// The last `Fs` is gone: from now on the last close releases the
    /// engine. Returns its reference if no handle is open.
    #[must_use]
    pub fn begin_closing(&self) -> Option<Arc<T>> {
        self.closing.store(true, Ordering::Relaxed);
        self.release_if_idle()
    }

    fn release_if_idle(&self) -> Option<Arc<T>> {
        let held: Vec<_> = self.lanes.iter().map(|l| l.lock()).collect();
        let open: i64 = held.iter().map(|n| **n).sum();
        debug_assert!(open >= 0, "more closes than opens");
        let keep = if open == 0 {
            self.keep.lock().take()
        } else {
            None
        };
        drop(held);
        keep
    }

    /// Handles open now (exact while no open or close runs).
    #[cfg(all(test, not(lanefs_shuttle)))]
    pub fn open_count(&self) -> i64 {
        self.lanes.iter().map(|l| *l.lock()).sum()
    }
}

/// What keeps its handles' counts in a [`Handles`] of itself.
pub trait HandleOwner: Sized {
    fn handles(&self) -> &Handles<Self>;
    /// The last user is going (called by [`HandleUsers`]' drop, before its
    /// handles are told): stop what only users need.
    fn users_gone(&self) {}
}

/// The users' share of an owner `T` (held by the engine's `Fs` clones, or
/// by the path layer's `Filesystem` clones, in one `Arc`): made with the
/// owner, it gives the owner's handles their reference to it
/// ([`Handles::keep`]); dropped with the last user, it tells them that no
/// user is left ([`Handles::begin_closing`]), so that the last handle — or
/// this drop, if none is open — releases the owner.
pub struct HandleUsers<T: HandleOwner>(Arc<T>);

impl<T: HandleOwner> HandleUsers<T> {
    /// Start counting `owner`'s handles (once per owner, before any
    /// handle is made: then [`HandleRef::new`]'s contract holds for it).
    pub fn new(owner: &Arc<T>) -> HandleUsers<T> {
        owner.handles().keep(owner.clone());
        HandleUsers(owner.clone())
    }
}

impl<T: HandleOwner> Drop for HandleUsers<T> {
    fn drop(&mut self) {
        self.0.users_gone();
        drop(self.0.handles().begin_closing());
    }
}

/// A handle's reference to its owner `T` (the engine, or the path layer's
/// state): a count on the opener's lane in the owner's [`Handles`] and a
/// pointer, not an `Arc` (the module doc says why). Dropping it uncounts
/// the handle, and may drop the owner.
pub struct HandleRef<T: HandleOwner>(NonNull<T>);

// SAFETY: a `HandleRef` only hands out `&T` (`Deref`) and may drop `T` (the
// last one, through `close`), so sending or sharing it is as safe as
// sending or sharing an `Arc<T>`, which needs `T: Send + Sync`.
unsafe impl<T: HandleOwner + Send + Sync> Send for HandleRef<T> {}
// SAFETY: as for `Send` above.
unsafe impl<T: HandleOwner + Send + Sync> Sync for HandleRef<T> {}

impl<T: HandleOwner> HandleRef<T> {
    /// Count a new handle on this thread's lane and point at `owner`.
    ///
    /// # Safety
    /// `owner` lives in an `Arc` a clone of which was given to its
    /// handles' [`keep`](Handles::keep) (by [`HandleUsers::new`]), and is
    /// given up only through them (`close`, `begin_closing`): then the
    /// count taken here keeps it alive until this reference is dropped.
    pub unsafe fn new(owner: &T) -> HandleRef<T> {
        owner.handles().open();
        HandleRef(NonNull::from(owner))
    }
}

impl<T: HandleOwner> std::ops::Deref for HandleRef<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the pointer came from a live `&T` (`new`), whose contract
        // and the count `new` took keep `T` alive until `drop` gives the
        // count back as its very last step.
        unsafe { self.0.as_ref() }
    }
}

impl<T: HandleOwner> Drop for HandleRef<T> {
    /// Uncount the handle: the owner may go now (dropped here with the
    /// reference `close` returns, if this was the last handle after the
    /// last user), so nothing uses this reference afterwards. A drop, so
    /// that a handle unwound by a panic is uncounted too.
    fn drop(&mut self) {
        drop(self.handles().close());
    }
}

#[cfg(all(test, not(lanefs_shuttle)))]
mod tests {
    use super::*;

    #[test]
    fn released_after_the_last_user_and_the_last_handle() {
        let me = Arc::new(Handles::<u8>::new());
        // A stand-in for the engine: the handles keep a reference to `me`.
        let cell: Arc<Handles<Handles<u8>>> = Arc::new(Handles::new());
        cell.keep(me.clone());
        cell.open();
        cell.open();
        assert_eq!(cell.open_count(), 2);
        assert!(cell.close().is_none(), "not closing yet");
        assert!(cell.begin_closing().is_none(), "a handle is open");
        let on_other_lane = {
            let cell = cell.clone();
            std::thread::spawn(move || cell.close()).join().unwrap()
        };
        assert!(on_other_lane.is_some(), "the last close releases");
        assert_eq!(cell.open_count(), 0);
        assert!(cell.begin_closing().is_none(), "released once");
    }

    #[test]
    fn released_at_once_without_handles() {
        let cell: Handles<u8> = Handles::new();
        cell.keep(Arc::new(7));
        assert_eq!(cell.begin_closing().as_deref(), Some(&7));
    }
}
