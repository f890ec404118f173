//! The daemon's side of the kernel's cached directory listings
//! (`cache_dir`, `FOPEN_CACHE_DIR`): what keeps a listing from showing a
//! name removed before it began.
//!
//! # The hole in the kernel's own check (fs/fuse/readdir.c)
//!
//! The kernel builds one cached listing per directory inode, shared by
//! every open of it, by appending the entries of READDIR replies whose
//! offset is where the cache ends (`fuse_add_dirent_to_cache`, `rdc.pos`);
//! an empty reply at that offset completes it (`fuse_readdir_cache_end`,
//! `rdc.cached`). It checks the cache against the directory's version
//! (`rdc.iversion`, recorded when a fill starts, against the version that
//! `fuse_dir_changed` bumps on every create, remove, link and rename) only
//! in `fuse_readdir_cached` for a `getdents` at offset 0 *that finds the
//! cache complete*. A `getdents` at offset 0 that finds a fill in progress
//! is simply served by the daemon, unchecked, and the same descriptor's
//! later calls read the cache once it is complete, again unchecked (the
//! offset is not 0). A fill may span a change: the kernel takes the
//! directory's `i_rwsem` shared around each READDIR and exclusively around
//! each change, so no reply is ever computed across a change, but the
//! lock is dropped between two `getdents` calls, and a fill is as many
//! calls as the listing takes. So:
//!
//! 1. A opens the directory and reads part of it: its replies start the
//!    cache, including name N.
//! 2. N is unlinked (the version is bumped; the partial cache is left as
//!    it is).
//! 3. B opens the directory; its first `getdents` finds the fill
//!    incomplete and asks the daemon (correct: no N).
//! 4. A reads on to the end: the cache is complete, with N.
//! 5. B's next `getdents` (offset > 0) is served from the cache, which
//!    shows N — removed before B opened the directory.
//!
//! (`tests/dircache.rs`, `listing_never_shows_a_name_removed_before_it_began`,
//! does exactly this; `tests/stress.rs` hits it by chance.) A listing
//! abandoned half way and continued after a change by a reader that
//! reaches the same offset goes the same way.
//!
//! # The guard
//!
//! A reader always reads a complete cache from its first page: a
//! descriptor's position in the cache (`ff->readdir.cache_off`) restarts
//! at 0 whenever the cache's `rdc.version` differs from the one it last
//! read (every reset bumps it, and a cache is complete at most once per
//! version), and a page missing from the page cache makes the kernel
//! reset the cache (`fuse_rdc_reset`) and ask the daemon. So a complete
//! cache without its first page is never served; it is thrown away at its
//! first read.
//!
//! The daemon therefore drops a directory's first cache page
//! (`inval_inode` with offset 0, length 1, [`Invalidate::FirstPage`])
//! before it sends an empty READDIR or READDIRPLUS reply — the only reply
//! that can complete a cache — whenever the directory's entries changed
//! after some reply with entries was sent for it since the last such
//! drop. Why that suffices: take a complete cache holding a reply R
//! computed before a change C of the directory, C before the empty reply
//! E that completed it. R was recorded here ([`ListingGuard::filled`])
//! before it was sent; the kernel handled R before it let C run (the
//! directory lock), and C before it sent E, so C was recorded
//! ([`ListingGuard::changed`]) after R and before E was handled. Either a
//! drop happened between R and E — after R's entries were in the cache,
//! so the fill had begun and its first page cannot come back within the
//! same version (only an empty cache starts a page at offset 0) — or E
//! finds the change not yet covered and drops the first page itself,
//! before the kernel sees E. Either way the completed cache lacks its
//! first page and is never served. Caches without such a straddle are
//! left alone: the kernel's version check keeps covering changes made
//! after a cache was completed.
//!
//! Dropping only the first page (not every page) leaves a fill that is
//! past its first page able to continue and complete (after which it is
//! thrown away); one whose end is still in the first page cannot append
//! there again and stays incomplete for good (the kernel then lists that
//! directory through the daemon, as without `cache_dir`, until it drops
//! the inode). That takes a
//! concurrent reader whose empty reply arrives while another descriptor
//! has read less than a page of cached entries, with a change in
//! between; it costs speed, never correctness.
//!
//! A change the kernel does not learn of (the engine made it but the
//! reply is an error: a `dirsync` mount whose sync failed) does not bump
//! the directory's version, so the kernel would keep serving a complete
//! cache; the handler drops the first page at once then
//! (`Handler::dir_changes`).
//!
//! The drop is sent from inside the request handler, before the reply:
//! the kernel processes an `inval_inode` notification in the `write(2)`
//! that delivers it, so the page is gone before the reply is even sent.
//! Safe there: the requester holds no page lock while it waits for the
//! reply, and a page lock is otherwise held only briefly to copy entries
//! (into the reader's buffer: one that faults on a file of this same
//! mount would wait for this daemon while the page is locked, as it
//! would for the whole-listing drop of a moved directory; not guarded
//! against).
//!
//! # Locking rules
//!
//! * `ListingGuard::shards[i]` (`parking_lot::Mutex`): protects shard
//!   `i`'s map from a directory's inode number to its [`DirMarks`]. A
//!   leaf lock: held only to read or update one entry, never across an
//!   engine call, a notification or another lock.
//! * No atomics here. The order "recorded, then replied" that the argument
//!   above uses comes from the shard lock (each record is done under it
//!   before the reply is sent) and from the kernel, which handles a reply
//!   before it sends the next request that depends on it.
//!
//! A directory's entry is created by its first reply with entries and
//! kept for the life of the mount (one small entry per directory listed
//! since the mount): dropping it could lose a change still to be covered,
//! and the kernel's FORGET does not say safely when it has no cache left.

use std::collections::HashMap;

use lanefs_core::Ino;
use parking_lot::Mutex;

/// log2 of the number of shards.
const SHARD_BITS: u32 = 6;

/// What the guard knows of one listed directory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct DirMarks {
    /// Changes of its entries recorded since its first reply with entries.
    changes: u64,
    /// `changes` as it was when its first cache page was last dropped
    /// because of them (`changes == covered`: nothing to drop).
    covered: u64,
}

/// Per-directory records of listing replies and changes (see the module
/// documentation).
pub struct ListingGuard {
    shards: Box<[Mutex<HashMap<Ino, DirMarks>>]>,
}

impl Default for ListingGuard {
    fn default() -> Self {
        ListingGuard {
            shards: (0..1usize << SHARD_BITS)
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
        }
    }
}

impl ListingGuard {
    fn shard(&self, dir: Ino) -> &Mutex<HashMap<Ino, DirMarks>> {
        // Inode numbers are handed out in sequence: the low bits spread.
        &self.shards[(dir as usize) & ((1 << SHARD_BITS) - 1)]
    }

    /// A READDIR or READDIRPLUS reply with at least one entry of `dir` is
    /// about to be sent (the kernel may cache what it holds).
    pub fn filled(&self, dir: Ino) {
        self.shard(dir).lock().entry(dir).or_default();
    }

    /// The entries of `dir` changed (recorded before the change's reply
    /// is sent). Nothing to record for a directory never listed: no
    /// cached listing of it can exist.
    pub fn changed(&self, dir: Ino) {
        if let Some(m) = self.shard(dir).lock().get_mut(&dir) {
            m.changes += 1;
        }
    }

    /// An empty reply for `dir` is about to be sent: `Some(mark)` when its
    /// first cache page must be dropped first, after which the caller
    /// passes `mark` to [`covered`](Self::covered).
    pub fn end_needs_drop(&self, dir: Ino) -> Option<u64> {
        let shard = self.shard(dir).lock();
        let m = shard.get(&dir)?;
        (m.changes != m.covered).then_some(m.changes)
    }

    /// The first cache page of `dir` was dropped after the changes
    /// counted up to `mark`. (Recorded only once the drop is done: a
    /// concurrent empty reply that finds the changes not yet covered
    /// drops the page too, rather than completing a cache before the
    /// first drop has landed.)
    pub fn covered(&self, dir: Ino, mark: u64) {
        if let Some(m) = self.shard(dir).lock().get_mut(&dir) {
            m.covered = m.covered.max(mark);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unlisted_directories_need_nothing() {
        let g = ListingGuard::default();
        g.changed(5);
        assert_eq!(g.end_needs_drop(5), None);
    }

    #[test]
    fn a_change_after_a_listing_reply_is_dropped_once() {
        let g = ListingGuard::default();
        g.filled(7);
        assert_eq!(g.end_needs_drop(7), None, "no change yet");
        g.changed(7);
        g.changed(7);
        let mark = g.end_needs_drop(7).expect("two changes to cover");
        assert_eq!(mark, 2);
        // Until the drop is recorded, every end asks for one.
        assert_eq!(g.end_needs_drop(7), Some(2));
        g.covered(7, mark);
        assert_eq!(g.end_needs_drop(7), None);
        // Other directories are independent, also in the same shard.
        g.filled(7 + (1 << SHARD_BITS));
        g.changed(7 + (1 << SHARD_BITS));
        assert_eq!(g.end_needs_drop(7), None);
        assert_eq!(g.end_needs_drop(7 + (1 << SHARD_BITS)), Some(1));
    }

    #[test]
    fn a_change_during_a_drop_is_not_lost() {
        let g = ListingGuard::default();
        g.filled(9);
        g.changed(9);
        let mark = g.end_needs_drop(9).unwrap();
        g.changed(9);
        g.covered(9, mark);
        assert_eq!(g.end_needs_drop(9), Some(2));
        // An older mark recorded late does not move `covered` back.
        g.covered(9, 2);
        g.covered(9, mark);
        assert_eq!(g.end_needs_drop(9), None);
    }
}
