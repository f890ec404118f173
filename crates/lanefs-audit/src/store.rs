//! [`RecordingStore`]: a [`Store`] that passes every call to an inner
//! store and, in audited builds, logs the keys each call reads and writes
//! into the calling thread's recorder, in the key layout of
//! `lanefs_store::Txn`: `i/<ino>` (inode record), `d/<dir>/<name>` (entry),
//! `p/<ino>/<index>` (data page), `u/<lane>` (usage), plus `x/<ino>`
//! (unwritten extents), `a/<lane>` (the inode allocator's lane) and `sb`
//! (the superblock).
//!
//! A scan or a range delete is logged as a prefix ending in `*`
//! (`d/<dir>/*`, `p/<ino>/*`), which conflicts with every key it covers. A
//! page range of at most [`RANGE_KEYS`] pages is logged page by page.
//!
//! A store of an extra file-system instance (the `mount`/`umount` ops'
//! instances, see `world`) is made with [`RecordingStore::tagged`]: its
//! keys carry the instance's tag as a prefix (`m0.1/sb`, `n1.0/i/1`), as
//! the key spaces of two stores are disjoint — two instances writing
//! their own superblocks share no key.
//!
//! The store is audited at key level, as a distributed key-value store
//! would see it; the memory store's own shard locks (chosen by inode
//! number) are not recorded. It does not forward `Store::volatile`: it
//! answers `false`, so the engine hands it the transactions of a
//! persistent store (every changed record with its entries), the shape a
//! distributed store would get.
//!
//! No locks or atomics of its own.

use std::ops::Range;

use lanefs_store::{DirEntryRecord, Ino, InodeRecord, Page, Result, Store, Superblock, Txn, TxnOp};

/// Largest page range logged as separate keys.
pub const RANGE_KEYS: u64 = 64;

/// A store wrapper that logs keys (see the module doc).
pub struct RecordingStore<S> {
    inner: S,
    /// Prefix of every key logged (`""` for the main instance's store,
    /// `"<tag>/"` for a tagged one).
    prefix: String,
}

impl<S: Store> RecordingStore<S> {
    /// The main instance's store: keys as `lanefs_store::Txn` names them.
    pub fn new(inner: S) -> Self {
        RecordingStore {
            inner,
            prefix: String::new(),
        }
    }

    /// An extra instance's store: every key logged as `<tag>/<key>`.
    pub fn tagged(inner: S, tag: &str) -> Self {
        RecordingStore {
            inner,
            prefix: format!("{tag}/"),
        }
    }

    /// Log `k()` (with this store's prefix).
    fn key(&self, k: impl FnOnce() -> String, write: bool, call: &'static str) {
        key(|| format!("{}{}", self.prefix, k()), write, call);
    }

    fn pages(&self, ino: Ino, start: u64, end: u64, write: bool, call: &'static str) {
        if end.saturating_sub(start) <= RANGE_KEYS {
            for i in start..end {
                self.key(|| format!("p/{ino}/{i}"), write, call);
            }
        } else {
            self.key(|| format!("p/{ino}/*"), write, call);
        }
    }

    fn free(&self, ino: Ino, call: &'static str) {
        self.key(|| format!("i/{ino}"), true, call);
        self.key(|| format!("d/{ino}/*"), true, call);
        self.key(|| format!("p/{ino}/*"), true, call);
        self.key(|| format!("x/{ino}"), true, call);
        // The number goes back to the freeing lane's allocator.
        self.key(|| format!("a/{}", lanefs_store::lane()), true, call);
    }
}

#[cfg(feature = "audit")]
fn key(k: impl FnOnce() -> String, write: bool, call: &'static str) {
    if lanefs_core::audit::active() {
        lanefs_core::audit::record_key(k(), write, call);
    }
}

#[cfg(not(feature = "audit"))]
fn key(_: impl FnOnce() -> String, _: bool, _: &'static str) {}

fn entry(dir: Ino, name: &[u8]) -> String {
    format!("d/{dir}/{}", String::from_utf8_lossy(name))
}

impl<S: Store> Store for RecordingStore<S> {
    fn superblock(&self) -> Result<Superblock> {
        self.key(|| "sb".into(), false, "superblock");
        self.inner.superblock()
    }
    fn write_superblock(&self, sb: &Superblock) -> Result<()> {
        self.key(|| "sb".into(), true, "write_superblock");
        self.inner.write_superblock(sb)
    }
    fn alloc_ino(&self) -> Result<Ino> {
        self.key(|| format!("a/{}", lanefs_store::lane()), true, "alloc_ino");
        let ino = self.inner.alloc_ino()?;
        self.key(|| format!("i/{ino}"), true, "alloc_ino");
        Ok(ino)
    }
    fn free_ino(&self, ino: Ino) -> Result<()> {
        self.free(ino, "free_ino");
        self.inner.free_ino(ino)
    }
    fn read_inode(&self, ino: Ino) -> Result<Option<InodeRecord>> {
        self.key(|| format!("i/{ino}"), false, "read_inode");
        self.inner.read_inode(ino)
    }
    fn write_inode(&self, rec: &InodeRecord) -> Result<()> {
        self.key(|| format!("i/{}", rec.ino), true, "write_inode");
        self.inner.write_inode(rec)
    }
    fn dir_read(&self, dir: Ino) -> Result<Vec<DirEntryRecord>> {
        self.key(|| format!("d/{dir}/*"), false, "dir_read");
        self.inner.dir_read(dir)
    }
    fn dir_insert(&self, dir: Ino, e: &DirEntryRecord) -> Result<()> {
        self.key(|| entry(dir, &e.name), true, "dir_insert");
        self.inner.dir_insert(dir, e)
    }
    fn dir_remove(&self, dir: Ino, name: &[u8]) -> Result<()> {
        self.key(|| entry(dir, name), true, "dir_remove");
        self.inner.dir_remove(dir, name)
    }
    fn read_page(&self, ino: Ino, index: u64, buf: &mut Page) -> Result<bool> {
        self.key(|| format!("p/{ino}/{index}"), false, "read_page");
        self.inner.read_page(ino, index, buf)
    }
    fn write_page(&self, ino: Ino, index: u64, data: &Page) -> Result<()> {
        self.key(|| format!("p/{ino}/{index}"), true, "write_page");
        self.inner.write_page(ino, index, data)
    }
    fn punch_pages(&self, ino: Ino, start: u64, end: u64) -> Result<u64> {
        self.pages(ino, start, end, true, "punch_pages");
        self.inner.punch_pages(ino, start, end)
    }
    fn count_pages(&self, ino: Ino, start: u64, end: u64) -> Result<u64> {
        self.pages(ino, start, end, false, "count_pages");
        self.inner.count_pages(ino, start, end)
    }
    fn has_pages_from(&self, ino: Ino, start: u64) -> Result<bool> {
        self.pages(ino, start, u64::MAX, false, "has_pages_from");
        self.inner.has_pages_from(ino, start)
    }
    fn read_unwritten(&self, ino: Ino) -> Result<Vec<Range<u64>>> {
        self.key(|| format!("x/{ino}"), false, "read_unwritten");
        self.inner.read_unwritten(ino)
    }
    fn write_unwritten(&self, ino: Ino, extents: &[Range<u64>]) -> Result<()> {
        self.key(|| format!("x/{ino}"), true, "write_unwritten");
        self.inner.write_unwritten(ino, extents)
    }
    fn allocated_pages(&self, ino: Ino) -> Result<u64> {
        self.key(|| format!("p/{ino}/*"), false, "allocated_pages");
        self.key(|| format!("x/{ino}"), false, "allocated_pages");
        self.inner.allocated_pages(ino)
    }
    fn list_inodes(&self) -> Result<Vec<Ino>> {
        self.key(|| "i/*".into(), false, "list_inodes");
        self.inner.list_inodes()
    }
    fn page_count(&self, ino: Ino) -> Result<u64> {
        self.key(|| format!("p/{ino}/*"), false, "page_count");
        self.inner.page_count(ino)
    }
    fn sync(&self) -> Result<()> {
        self.key(|| "sync".into(), true, "sync");
        self.inner.sync()
    }
    fn commit(&self, txn: &Txn) -> Result<()> {
        for op in txn.ops() {
            match op {
                TxnOp::PutInode(r) => self.key(|| format!("i/{}", r.ino), true, "commit"),
                TxnOp::FreeInode(ino) => self.free(*ino, "commit"),
                TxnOp::PutEntry(dir, e) => self.key(|| entry(*dir, &e.name), true, "commit"),
                TxnOp::RemoveEntry(dir, name) => self.key(|| entry(*dir, name), true, "commit"),
                TxnOp::PunchPages(ino, s, e) => self.pages(*ino, *s, *e, true, "commit"),
                TxnOp::Usage(lane, ..) => self.key(|| format!("u/{lane}"), true, "commit"),
            }
        }
        self.inner.commit(txn)
    }
}
