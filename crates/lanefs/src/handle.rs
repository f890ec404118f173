//! The path layer's handles (`File`, `ReadDir`) and its state (`Inner`):
//! a handle counts itself on its lane in `Inner::handles` and holds a
//! pointer ([`lanefs_core::HandleRef`], as the engine's own handles do),
//! instead of a clone of the `Filesystem`, whose two `Arc` counts every
//! open and close through the path layer wrote (36 of the conflict audit's
//! pairs, docs/AUDIT.md). The state keeps an `Arc` of itself until the last
//! `Filesystem` is dropped (`lanefs_core::HandleUsers`) and the lanes sum to zero.
//!
//! Locks: those of `Handles` (leaves).

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
    // `Arc` given to `HandleUsers::new` (which hands a clone to
    // `handles.keep`) before any handle exists, and it is given up only
    // through its `Handles`.
    unsafe { HandleRef::new(inner) }
}
