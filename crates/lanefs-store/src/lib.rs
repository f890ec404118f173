//! The bottom layer of lanefs: where records live.
//!
//! The VFS core is written against the [`Store`] trait only. A store keeps
//! serialized inode records, directory entries and data pages, allocates
//! inode numbers and keeps the superblock's counters; it never sees the
//! core's cache objects. [`MemoryStore`] is the embedded default; the
//! journaled image store (milestone 2) implements the same trait.
//!
//! Capacity is enforced by the core's counters (so that a write can fail with
//! `ENOSPC` before anything changes); the store only records the totals in
//! its [`Superblock`], and reports the blocks its own structures take
//! ([`Store::watch_overhead`]).

pub mod codec;
mod errno;
mod lane;
mod memory;
mod record;
mod shard;
mod ticker;
mod txn;

pub use errno::{Errno, Result};
pub use lane::{lane, set_lane};
pub use memory::{MemoryStore, MemoryStoreConfig};
pub use record::{
    DirDerived, DirEntryRecord, FileKind, Ino, InodeRecord, Page, Timespec, DIRENT_SIZE,
    FS_APPEND_FL, FS_IMMUTABLE_FL, FS_NOATIME_FL, FS_NODUMP_FL, INODE_FLAGS_KNOWN, PAGE_SIZE,
    ROOT_INO,
};
pub use shard::{ino_shard, CacheLine};
pub use ticker::Ticker;
pub use txn::{Txn, TxnOp, TXN_BYTES_MAX, TXN_OPS_MAX};

/// File-system-wide totals and usage, as kept by a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Superblock {
    /// Capacity in [`PAGE_SIZE`] blocks.
    pub total_blocks: u64,
    /// Capacity in inodes.
    pub total_inodes: u64,
    /// Blocks in use, as last written by the core (exact at sync).
    pub used_blocks: u64,
    /// Inodes in use, as last written by the core (exact at sync).
    pub used_inodes: u64,
}

/// Told of changes, in blocks, of a store's overhead
/// ([`Store::watch_overhead`]): positive when it grew.
pub type OverheadHook = Box<dyn Fn(i64) + Send + Sync>;

/// Where a file system's records live.
///
/// All methods take `&self` and may be called from many threads at once; an
/// implementation must serialize what needs it internally (the memory store
/// shards by inode number so that unrelated inodes never share a lock).
///
/// Calls for one inode are ordered by the core (it holds that inode's lock
/// while it writes the inode's record, entries or pages), so a store need not
/// order them itself.
pub trait Store: Send + Sync + 'static {
    /// The superblock. A store that holds no file system yet reports zero
    /// `used_inodes`; the core then creates the root directory.
    fn superblock(&self) -> Result<Superblock>;
    /// Record usage (called by the core at sync and shutdown).
    fn write_superblock(&self, sb: &Superblock) -> Result<()>;

    /// Hand out an inode number that is not in use (never [`ROOT_INO`]).
    fn alloc_ino(&self) -> Result<Ino>;
    /// Forget inode `ino` entirely: its record, its directory entries and
    /// its data pages. The number may be handed out again.
    fn free_ino(&self, ino: Ino) -> Result<()>;

    /// Read the record of `ino`; `None` when there is none.
    fn read_inode(&self, ino: Ino) -> Result<Option<InodeRecord>>;
    /// Create or replace the record of `rec.ino`.
    fn write_inode(&self, rec: &InodeRecord) -> Result<()>;

    /// All entries of directory `dir` (without `.` and `..`), in any order.
    fn dir_read(&self, dir: Ino) -> Result<Vec<DirEntryRecord>>;
    /// Add `entry` to `dir`, replacing an entry of the same name.
    fn dir_insert(&self, dir: Ino, entry: &DirEntryRecord) -> Result<()>;
    /// [`dir_read`](Self::dir_read) for the engine's load of a directory's
    /// index. A [`volatile`](Self::volatile) store may give the entries up
    /// (the engine keeps them until [`dir_put_all`](Self::dir_put_all));
    /// the default keeps them.
    fn dir_take(&self, dir: Ino) -> Result<Vec<DirEntryRecord>> {
        self.dir_read(dir)
    }
    /// Make `entries` the entries of `dir` (a volatile store's entries
    /// given back when the engine drops the directory's index). The
    /// default removes the names the store has that `entries` lacks (a
    /// store that kept them at [`dir_take`](Self::dir_take)), then inserts
    /// every entry.
    fn dir_put_all(&self, dir: Ino, entries: Vec<DirEntryRecord>) -> Result<()> {
        let keep: std::collections::HashSet<&[u8]> = entries.iter().map(|e| &e.name[..]).collect();
        for old in self.dir_read(dir)? {
            if !keep.contains(&old.name[..]) {
                self.dir_remove(dir, &old.name)?;
            }
        }
        entries.iter().try_for_each(|e| self.dir_insert(dir, e))
    }
    /// Remove the entry called `name` from `dir` (absent is not an error).
    fn dir_remove(&self, dir: Ino, name: &[u8]) -> Result<()>;

    /// Read page `index` of `ino` into `buf`; `false` (and `buf` untouched)
    /// when the page was never written or was punched: a hole.
    fn read_page(&self, ino: Ino, index: u64, buf: &mut Page) -> Result<bool>;
    /// Write page `index` of `ino`.
    fn write_page(&self, ino: Ino, index: u64, data: &Page) -> Result<()>;
    /// Remove pages `start..end` of `ino`; returns how many existed.
    fn punch_pages(&self, ino: Ino, start: u64, end: u64) -> Result<u64>;

    /// Data pages of `ino` with an index in `start..end`. The core counts
    /// allocated blocks of a range with this (fallocate, punch, truncate),
    /// so it should cost O(pages in the range), not O(range): the default
    /// reads every index and is only fit for small ranges — override it.
    fn count_pages(&self, ino: Ino, start: u64, end: u64) -> Result<u64> {
        let mut buf = [0u8; PAGE_SIZE];
        let mut n = 0;
        for idx in start..end {
            n += u64::from(self.read_page(ino, idx, &mut buf)?);
        }
        Ok(n)
    }

    /// Whether `ino` has a data page with an index of `start` or more. The
    /// core asks once per regular file it loads from a store that outlives
    /// the process (a crash can leave pages past a file's size, which it
    /// removes), so it should cost O(log pages): the default counts the
    /// pages below `start` and compares with all of them — override it.
    fn has_pages_from(&self, ino: Ino, start: u64) -> Result<bool> {
        Ok(self.count_pages(ino, 0, start)? < self.page_count(ino)?)
    }

    /// The unwritten extents of `ino`: page ranges `start..end` allocated
    /// to the file (by `fallocate`) that read as zeros wherever no data page
    /// exists. Sorted, disjoint. A page is allocated (one block) when it is a
    /// data page, inside an extent, or both. Default: none.
    fn read_unwritten(&self, ino: Ino) -> Result<Vec<std::ops::Range<u64>>> {
        let _ = ino;
        Ok(Vec::new())
    }

    /// Replace the unwritten extents of `ino` (the core writes the whole
    /// list at writeback, with the pages). [`free_ino`](Self::free_ino)
    /// drops them. Default: a store without extent records accepts only an
    /// empty list (`EOPNOTSUPP` otherwise).
    fn write_unwritten(&self, ino: Ino, extents: &[std::ops::Range<u64>]) -> Result<()> {
        let _ = ino;
        if extents.is_empty() {
            Ok(())
        } else {
            Err(Errno::EOPNOTSUPP)
        }
    }

    /// Blocks allocated to `ino`: data pages and unwritten extents, a page
    /// in both counted once (for checkers; may be slow). Default:
    /// [`page_count`](Self::page_count).
    fn allocated_pages(&self, ino: Ino) -> Result<u64> {
        self.page_count(ino)
    }

    /// Every inode number that has a record (for checkers; may be slow).
    fn list_inodes(&self) -> Result<Vec<Ino>>;
    /// Number of data pages stored for `ino` (for checkers; may be slow).
    fn page_count(&self, ino: Ino) -> Result<u64>;

    /// Make everything written so far durable. Every store has this call, so
    /// fsync takes one code path whatever the store.
    fn sync(&self) -> Result<()>;

    /// Does this store end with the process (nothing to recover after a
    /// crash)? Then the engine keeps the records an operation changes in
    /// its write-back cache, as it does for sizes and times, and hands
    /// [`commit`](Self::commit) only the frees: the records reach the
    /// store at writeback (eviction, fsync, sync), before anything could
    /// read them from it, and a directory's entries live in one place at a
    /// time — the engine's index while it is loaded, the store while not:
    /// the engine takes them out with [`dir_take`](Self::dir_take) when it
    /// loads the index and gives them back with
    /// [`dir_put_all`](Self::dir_put_all) when it drops it (no second copy
    /// of every entry, and no store call per change of names). A store
    /// that persists answers `false` (the default) and gets every record
    /// and entry an operation changes in that operation's transaction, so
    /// a crash can never leave an entry to a free inode or a record
    /// nothing links.
    fn volatile(&self) -> bool {
        false
    }

    /// Report the blocks of `total_blocks` that file data cannot have:
    /// the store's own structures on the media (an image's entry and chain
    /// blocks) and the room it keeps for the ones its next writes need. The
    /// store calls `hook` at once with that number, then with each
    /// change as it happens (the core charges them to its free-space
    /// counter, so that a `write` or `fallocate` the core accepts always
    /// finds a block at writeback). The default never calls it: a store
    /// whose structures take no blocks of the capacity (the memory store).
    fn watch_overhead(&self, hook: OverheadHook) {
        let _ = hook;
    }

    /// Objects of the store's own cache that [`shrink`](Self::shrink) could
    /// give back now (an estimate; 0 for a store that caches nothing of
    /// its own, or keeps it all by design, as the memory store does).
    fn reclaimable(&self) -> usize {
        0
    }

    /// Give back up to `nr` clean objects of the store's own cache (they
    /// are read back when next needed): memory pressure, through the
    /// engine's shrinker in the reclaim registry. Returns how many went.
    fn shrink(&self, nr: usize) -> usize {
        let _ = nr;
        0
    }

    /// Apply the record changes of one engine operation all-or-nothing (see
    /// [`Txn`] for the shape, the bounds and the key layout it maps to).
    /// Durable no later than the next [`sync`](Self::sync). An error means
    /// nothing was applied: the engine changes its memory only after this
    /// returned `Ok`.
    ///
    /// The default checks every operation's arguments first (the only
    /// failures of the memory store's calls), then applies the operations
    /// one by one through the calls above: all-or-nothing for a store that
    /// fails only on bad arguments and cannot crash (the memory store). A
    /// persistent store overrides it with one journal record, a store that
    /// may fail half-way with its own transaction. [`TxnOp::Usage`] is
    /// dropped by the default: such stores keep usage in the superblock
    /// written at sync.
    fn commit(&self, txn: &Txn) -> Result<()> {
        txn.check()?;
        for op in txn.ops() {
            match op {
                TxnOp::PutInode(rec) => self.write_inode(rec)?,
                TxnOp::FreeInode(ino) => self.free_ino(*ino)?,
                TxnOp::PutEntry(dir, e) => self.dir_insert(*dir, e)?,
                TxnOp::RemoveEntry(dir, name) => self.dir_remove(*dir, name)?,
                TxnOp::PunchPages(ino, start, end) => {
                    self.punch_pages(*ino, *start, *end)?;
                }
                TxnOp::Usage(..) => {}
            }
        }
        Ok(())
    }
}
