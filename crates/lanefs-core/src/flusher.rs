//! The mount's flusher: a [`Ticker`] that writes back every dirty inode
//! each `FsConfig::writeback_interval` when the store persists, so that
//! what a crash can lose without an `fsync` or `sync` is bounded in time
//! (with the store's own commit interval) — Linux's flusher threads, whose
//! `dirty_expire_centisecs` bounds it there. Without it a file written and
//! closed through the embedded library (`lanefs::Filesystem` on an image)
//! stayed in the engine's write-back cache until eviction or unmount: a
//! crash minutes later lost its data and size although the image store had
//! committed everything it had been given. (`lanefs mount` already synced
//! the whole mount on a timer of its own.)
//!
//! Locking: none of its own (the ticker's stop flag is a leaf). A round
//! holds a counted reference to the mount (upgraded from a `Weak`, so the
//! thread never keeps a dropped mount alive between rounds) and takes what
//! `FsInner::writeback` takes, inode by inode. If the last other reference
//! goes during a round, the mount is dropped on this thread: its drop only
//! stops the ticker.
#![cfg_attr(lanefs_shuttle, allow(dead_code))]

use std::time::Duration;

use lanefs_store::Ticker;

use crate::fs::FsInner;
use crate::sync::Weak;

/// Start the flusher of `fs` (`None` if no thread could be made: writes
/// then reach the store at `fsync`, `sync`, eviction and unmount only).
pub(crate) fn start(fs: Weak<FsInner>, every: Duration) -> Option<Ticker> {
    let tick = move || match fs.upgrade() {
        Some(fs) => {
            fs.write_back_dirty();
            true
        }
        None => false,
    };
    Ticker::spawn("lanefs-flush", every, tick)
        .map_err(|e| tracing::error!("no flusher thread: {e}"))
        .ok()
}
