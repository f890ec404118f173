//! The mount's flusher: a thread that writes back every dirty inode each
//! `FsConfig::writeback_interval` when the store persists, so that what a
//! crash can lose without an `fsync` or `sync` is bounded in time (with the
//! store's own commit interval) — Linux's flusher threads, whose
//! `dirty_expire_centisecs` bounds it there. Without it a file written and
//! closed through the embedded library (`lanefs::Filesystem` on an image)
//! stayed in the engine's write-back cache until eviction or unmount: a
//! crash minutes later lost its data and size although the image store had
//! committed everything it had been given. (`lanefs mount` already synced
//! the whole mount on a timer of its own.)
//!
//! Locking: `stop` (a mutex and condvar of its own, a leaf) holds the flag
//! that ends the thread; the thread waits on it between rounds and holds
//! nothing of the mount while it waits. A round holds a counted reference
//! to the mount (upgraded from a `Weak`, so the thread never keeps a
//! dropped mount alive between rounds) and takes what `FsInner::writeback`
//! takes, inode by inode. If the last other reference goes during a round,
//! the mount is dropped on this thread: its drop only raises the flag.

#![cfg_attr(lanefs_shuttle, allow(dead_code))]

use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::fs::FsInner;
use crate::sync::Weak;

/// The flusher of one mount; dropping it (or `stop`) ends its thread at
/// its next wake-up, without waiting for it.
pub(crate) struct Flusher {
    stop: Arc<(Mutex<bool>, Condvar)>,
}

impl Flusher {
    pub fn start(fs: Weak<FsInner>, every: Duration) -> Flusher {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = Arc::clone(&stop);
        let spawned = std::thread::Builder::new()
            .name("lanefs-flush".into())
            .spawn(move || loop {
                {
                    let mut stopped = flag.0.lock();
                    if !*stopped {
                        flag.1.wait_for(&mut stopped, every);
                    }
                    if *stopped {
                        return;
                    }
                }
                let Some(fs) = fs.upgrade() else { return };
                fs.write_back_dirty();
            });
        if let Err(e) = spawned {
            tracing::error!("no flusher thread (writes reach the store at fsync, sync, eviction and unmount only): {e}");
        }
        Flusher { stop }
    }

    pub fn stop(&self) {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.stop();
    }
}
