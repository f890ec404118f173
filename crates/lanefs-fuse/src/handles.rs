//! The open-file handle table: FUSE `fh` -> open engine file.
//!
//! # Locking rules
//!
//! * `HandleTable::shards[i]` (a `parking_lot::RwLock`) protects shard `i`'s
//!   map and its `next` counter. Readers (READ, WRITE, READDIR, FSYNC, ...)
//!   take it shared just long enough to clone an `Arc`; OPEN/CREATE/OPENDIR
//!   take it exclusive to insert, RELEASE/RELEASEDIR to remove.
//! * No other lock is ever taken while a shard lock is held, and no engine
//!   call runs under it (the `Arc` is cloned out first), so a shard lock is
//!   always a leaf in the lock order.
//! * There is no global counter: a new handle goes to the shard of the CPU
//!   the opener runs on, and its number is `(per-shard sequence << SHARD_BITS)
//!   | shard`, so opens on different CPUs touch different cache lines and a
//!   lookup finds the shard from the number alone.
//!
//! A released handle may still be in use by a request that cloned its `Arc`
//! before the RELEASE (the kernel does not send one while requests on the
//! file are in flight, but nothing here relies on that): the engine's
//! `OpenFile` is closed when the last `Arc` goes.

use std::collections::HashMap;
use std::sync::Arc;

use lanefs_core::OpenFile;
use parking_lot::RwLock;

/// log2 of the number of shards.
const SHARD_BITS: u32 = 6;
/// Number of shards (a power of two, more than the CPUs we expect to serve from
/// is wasted memory only).
const SHARDS: usize = 1 << SHARD_BITS;

/// One open file or directory as the adapter keeps it.
pub struct Handle {
    /// The engine's open file; closed when the last `Arc<Handle>` drops.
    pub file: OpenFile,
    /// The `open(2)` flags it was opened with.
    pub flags: i32,
    /// Who opened it (the engine's kill rules apply to the opener; a
    /// write by someone else through this handle is corrected for).
    pub opener: crate::cred::Caller,
}

#[derive(Default)]
struct Shard {
    map: HashMap<u64, Arc<Handle>>,
    /// Sequence number of the next handle of this shard (starts at 1 so that
    /// `fh` 0 is never handed out).
    next: u64,
}

/// Sharded map from FUSE file handle to [`Handle`].
pub struct HandleTable {
    shards: Box<[RwLock<Shard>]>,
}

impl Default for HandleTable {
    fn default() -> Self {
        HandleTable {
            shards: (0..SHARDS).map(|_| RwLock::new(Shard::default())).collect(),
        }
    }
}

/// The shard for new handles opened on this thread: the current CPU when the
/// kernel tells it (cheap vDSO-free syscall via `sched_getcpu`), else a hash
/// of the thread id.
fn home_shard() -> usize {
    // SAFETY: sched_getcpu has no preconditions; it returns -1 on error.
    let cpu = unsafe { libc::sched_getcpu() };
    if cpu >= 0 {
        cpu as usize & (SHARDS - 1)
    } else {
        // SAFETY: gettid has no preconditions and cannot fail.
        let tid = unsafe { libc::gettid() };
        tid as usize & (SHARDS - 1)
    }
}

impl HandleTable {
    /// Store `handle`, returning its new file handle number (never 0).
    pub fn insert(&self, handle: Handle) -> u64 {
        let shard = home_shard();
        let mut s = self.shards[shard].write();
        s.next += 1;
        let fh = (s.next << SHARD_BITS) | shard as u64;
        s.map.insert(fh, Arc::new(handle));
        fh
    }

    /// The handle `fh`, if open.
    pub fn get(&self, fh: u64) -> Option<Arc<Handle>> {
        let shard = (fh as usize) & (SHARDS - 1);
        self.shards[shard].read().map.get(&fh).cloned()
    }

    /// Forget handle `fh`, returning it (closed when the caller drops it, or
    /// later if a request still holds it).
    pub fn remove(&self, fh: u64) -> Option<Arc<Handle>> {
        let shard = (fh as usize) & (SHARDS - 1);
        self.shards[shard].write().map.remove(&fh)
    }

    /// Number of open handles (sums every shard; for tests and stats).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read().map.len()).sum()
    }

    /// True if no handle is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanefs_core::{Cred, Fs};

    fn open_root(fs: &Fs) -> Handle {
        Handle {
            file: fs.open(&Cred::root(), 1, libc::O_RDONLY).unwrap(),
            flags: 0,
            opener: crate::cred::Caller::default(),
        }
    }

    #[test]
    fn insert_get_remove_from_many_threads() {
        let fs = Fs::new_in_memory();
        let t = std::sync::Arc::new(HandleTable::default());
        let fhs: Vec<Vec<u64>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    let t = t.clone();
                    let fs = fs.clone();
                    s.spawn(move || (0..500).map(|_| t.insert(open_root(&fs))).collect())
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut all: Vec<u64> = fhs.into_iter().flatten().collect();
        assert_eq!(t.len(), 2000);
        assert!(all.iter().all(|&fh| fh != 0 && t.get(fh).is_some()));
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 2000, "handle numbers must be unique");
        for fh in &all {
            assert!(t.remove(*fh).is_some());
            assert!(t.get(*fh).is_none());
            assert!(t.remove(*fh).is_none());
        }
        assert!(t.is_empty());
    }
}
