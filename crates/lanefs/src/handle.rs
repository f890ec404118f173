//! The path layer's handles (`File`, `ReadDir`) and its state (`Inner`):
//! a handle counts itself on its lane in `Inner::handles` and holds a
//! pointer ([`lanefs_core::HandleRef`], as the engine's own handles do),
//! instead of a clone of the `Filesystem`, whose two `Arc` counts every
//! open and close through the path layer wrote (36 of the conflict audit's
//! pairs, docs/AUDIT.md). The state keeps an `Arc` of itself until the last
//! `Filesystem` is dropped (`Users`) and the lanes sum to zero.
//!
//! Locks: those of `Handles` (leaves).

use std::sync::Arc;

use lanefs_core::{HandleOwner, HandleRef, Handles};

use crate::Inner;

impl HandleOwner for Inner {
    fn handles(&self) -> &Handles<Inner> {
        &self.handles
    }
}

/// A handle's reference to the path layer's state.
pub(crate) type InnerRef = HandleRef<Inner>;

/// Count a new handle of `inner`.
pub(crate) fn inner_ref(inner: &Inner) -> InnerRef {
    // SAFETY: every `Inner` is made by `Filesystem::with_inner`, inside an
    // `Arc` whose clone goes to `handles.keep` before any handle exists,
    // and it is given up only through its `Handles`.
    unsafe { HandleRef::new(inner) }
}

/// The `Filesystem` clones' share of the state: dropped with the last, it
/// lets the last handle release the state.
pub(crate) struct Users(pub Arc<Inner>);

impl Drop for Users {
    fn drop(&mut self) {
        drop(self.0.handles.begin_closing());
    }
}
