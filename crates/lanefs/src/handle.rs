//! The path layer's handles (`File`, `ReadDir`) and its state (`Inner`):
//! a handle counts itself on its lane in `Inner::handles` and holds a
//! pointer, instead of a clone of the `Filesystem` (whose two `Arc` counts
//! every open and close through the path layer wrote: 36 of the conflict
//! audit's pairs, docs/AUDIT.md). The same scheme as the engine's own
//! handles (`lanefs_core::Handles`): the state keeps an `Arc` of itself
//! until the last `Filesystem` is dropped (`Users`) and the lanes sum to
//! zero, read under all their locks.
//!
//! Locks: those of `Handles` (leaves).

use std::ptr::NonNull;
use std::sync::Arc;

use crate::Inner;

/// The `Filesystem` clones' share of the state: dropped with the last, it
/// lets the last handle release the state.
pub(crate) struct Users(pub Arc<Inner>);

impl Drop for Users {
    fn drop(&mut self) {
        drop(self.0.handles.begin_closing());
    }
}

/// A handle's reference to the path layer's state.
pub(crate) struct InnerRef(NonNull<Inner>);

// SAFETY: an `InnerRef` only hands out `&Inner` (`Deref`), and `Inner` is
// shared between threads already (every `Filesystem` clone holds it in an
// `Arc`), so sending or sharing the pointer is as safe as that `Arc`.
unsafe impl Send for InnerRef {}
// SAFETY: as for `Send` above.
unsafe impl Sync for InnerRef {}

impl InnerRef {
    /// Count a new handle on this thread's lane and point at `inner`.
    pub fn new(inner: &Inner) -> InnerRef {
        inner.handles.open();
        InnerRef(NonNull::from(inner))
    }
}

impl std::ops::Deref for InnerRef {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        // SAFETY: the pointer came from a live `&Inner` (`new`), and the
        // count `new` added keeps the state's own `Arc` (`Handles::keep`)
        // until `drop` gives it back as its very last step.
        unsafe { self.0.as_ref() }
    }
}

impl Drop for InnerRef {
    /// Uncount the handle; the state (and with it the engine's `Fs` it
    /// holds) may go now, dropped here if this was the last handle after
    /// the last `Filesystem`. Nothing uses this reference afterwards.
    fn drop(&mut self) {
        drop(self.handles.close());
    }
}
