//! The read path designs of seed 003, behind [`PageCache`] (one per mount,
//! chosen by `FsConfig::variants.read`):
//!
//! * [`LocklessRead`] (default): copy from cached pages with no lock, under
//!   an epoch guard, validated by the file's sequence count (parent
//!   module). A page that is neither cached nor known to be a hole, or a
//!   change that overlapped the copy (after [`LOCKLESS_TRIES`] attempts),
//!   falls back to the locked path, which finishes the read keeping the
//!   bytes already copied when the sequence count shows nothing changed
//!   since (IOCB_CACHED with the fallback Matthew Wilcox asked for).
//! * [`LockedRead`] (the before-design): every read takes the data lock
//!   shared, and exclusively to load missing pages from the store.
//!
//! Guarantee (both designs): a read returns bytes all from before or all
//! from after any one write, truncate, punch or zero-range of the same file
//! that overlaps it in time — XFS's read/write atomicity, for every
//! data-changing call, not only for the same range. The lock-free copy is
//! accepted only if no change section began or ended while it ran and no
//! overwrite under a stripe (`lanes`; each inside one page) changed a page
//! while it was copied, and the locked path holds the data lock while it
//! copies. What is no longer promised since overwrites take stripes: that
//! a read spanning pages sees *several* overwrites of different pages as
//! one snapshot — it may see a later overwrite of one page and miss an
//! earlier one of another, as a read on Linux's page cache may (each
//! overwrite is still seen whole).

use crossbeam_epoch as epoch;
use lanefs_store::{Ino, Result, Store};

use super::{readable, FileData};
use crate::sync::{fence, spin_hint, Ordering};
use crate::ReadVariant;

/// Lock-free attempts before a read falls back to the data lock.
pub(crate) const LOCKLESS_TRIES: usize = 3;

/// A read design.
pub(crate) trait PageCache: Send + Sync {
    /// Read `buf.len()` bytes at `offset` of `file` (fewer at end of file).
    /// Returns the bytes read and how many pages were loaded into the cache
    /// (also when the read fails part way).
    fn read(
        &self,
        file: &FileData,
        store: &dyn Store,
        ino: Ino,
        offset: u64,
        buf: &mut [u8],
    ) -> (Result<usize>, usize);
}

/// The design `variant` names.
pub(crate) fn page_cache(variant: ReadVariant) -> Box<dyn PageCache> {
    match variant {
        ReadVariant::Lockless => Box::new(LocklessRead),
        ReadVariant::Locked => Box::new(LockedRead),
    }
}

/// A prefix `buf[..done]` of a read of `n` bytes, copied lock-free while the
/// sequence count was `seq`.
#[derive(Clone, Copy)]
struct Progress {
    seq: u64,
    done: usize,
    n: usize,
}

pub(crate) struct LockedRead;

impl PageCache for LockedRead {
    fn read(
        &self,
        file: &FileData,
        store: &dyn Store,
        ino: Ino,
        offset: u64,
        buf: &mut [u8],
    ) -> (Result<usize>, usize) {
        file.read_locked(store, ino, offset, buf, None)
    }
}

pub(crate) struct LocklessRead;

impl PageCache for LocklessRead {
    fn read(
        &self,
        file: &FileData,
        store: &dyn Store,
        ino: Ino,
        offset: u64,
        buf: &mut [u8],
    ) -> (Result<usize>, usize) {
        let guard = epoch::pin();
        for _ in 0..LOCKLESS_TRIES {
            let seq = file.seq.load(Ordering::Acquire);
            if !seq.is_multiple_of(2) {
                spin_hint();
                continue;
            }
            let size = file.size.load(Ordering::Relaxed);
            let all_cached = file.all_cached.load(Ordering::Acquire);
            let n = readable(size, offset, buf.len());
            let stripes = file.stripes();
            let Some(done) = file.copy_cached(offset, buf, 0, n, all_cached, stripes, &guard)
            else {
                continue;
            };
            fence(Ordering::Acquire);
            if file.seq.load(Ordering::Relaxed) != seq {
                continue;
            }
            if done == n {
                return (Ok(n), 0);
            }
            let progress = Progress { seq, done, n };
            drop(guard);
            return file.read_locked(store, ino, offset, buf, Some(progress));
        }
        drop(guard);
        file.read_locked(store, ino, offset, buf, None)
    }
}

impl FileData {
    /// The locked read: shared lock while every page is cached, exclusive
    /// to load the rest (and always exclusive for a file with stripes:
    /// overwrites under a stripe do not wait for the shared lock).
    /// Continues `progress` when the sequence count still equals the one
    /// it was copied under.
    fn read_locked(
        &self,
        store: &dyn Store,
        ino: Ino,
        offset: u64,
        buf: &mut [u8],
        progress: Option<Progress>,
    ) -> (Result<usize>, usize) {
        let stopped = 'shared: {
            let _shared = self.map.read();
            if self.stripes().is_some() {
                break 'shared progress;
            }
            // SAFETY: pages and index nodes are detached only under the data
            // lock held exclusively; while it is held shared nothing
            // reachable from the index is freed, so no pin is needed (the
            // before-design pays no epoch cost).
            let guard = unsafe { epoch::unprotected() };
            // Stable while the lock is held: changes need it exclusively.
            let seq = self.seq.load(Ordering::Relaxed);
            let (from, n) = match progress {
                Some(p) if p.seq == seq => (p.done, p.n),
                _ => (
                    0,
                    readable(self.size.load(Ordering::Relaxed), offset, buf.len()),
                ),
            };
            let all_cached = self.all_cached.load(Ordering::Acquire);
            let done = self
                .copy_cached(offset, buf, from, n, all_cached, None, guard)
                .expect("no stripes to validate by");
            if done == n {
                return (Ok(n), 0);
            }
            Some(Progress { seq, done, n })
        };
        let mut pm = self.write();
        let seq = self.seq.load(Ordering::Relaxed);
        let (from, n) = match stopped {
            Some(p) if p.seq == seq => (p.done, p.n),
            _ => (0, readable(pm.size(), offset, buf.len())),
        };
        pm.read_fill(store, ino, offset, buf, from, n)
    }
}
