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
}

impl<S: Store> RecordingStore<S> {
    pub fn new(inner: S) -> Self {
        RecordingStore { inner }
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

fn pages(ino: Ino, start: u64, end: u64, write: bool, call: &'static str) {
    if end.saturating_sub(start) <= RANGE_KEYS {
        for i in start..end {
            key(|| format!("p/{ino}/{i}"), write, call);
        }
    } else {
        key(|| format!("p/{ino}/*"), write, call);
    }
}

fn free(ino: Ino, call: &'static str) {
    key(|| format!("i/{ino}"), true, call);
    key(|| format!("d/{ino}/*"), true, call);
    key(|| format!("p/{ino}/*"), true, call);
    key(|| format!("x/{ino}"), true, call);
    // The number goes back to the freeing lane's allocator.
    key(|| format!("a/{}", lanefs_store::lane()), true, call);
}

fn entry(dir: Ino, name: &[u8]) -> String {
    format!("d/{dir}/{}", String::from_utf8_lossy(name))
}

impl<S: Store> Store for RecordingStore<S> {
    fn superblock(&self) -> Result<Superblock> {
        key(|| "sb".into(), false, "superblock");
        self.inner.superblock()
    }
    fn write_superblock(&self, sb: &Superblock) -> Result<()> {
        key(|| "sb".into(), true, "write_superblock");
        self.inner.write_superblock(sb)
    }
    fn alloc_ino(&self) -> Result<Ino> {
        key(|| format!("a/{}", lanefs_store::lane()), true, "alloc_ino");
        let ino = self.inner.alloc_ino()?;
        key(|| format!("i/{ino}"), true, "alloc_ino");
        Ok(ino)
    }
    fn free_ino(&self, ino: Ino) -> Result<()> {
        free(ino, "free_ino");
        self.inner.free_ino(ino)
    }
    fn read_inode(&self, ino: Ino) -> Result<Option<InodeRecord>> {
        key(|| format!("i/{ino}"), false, "read_inode");
        self.inner.read_inode(ino)
    }
    fn write_inode(&self, rec: &InodeRecord) -> Result<()> {
        key(|| format!("i/{}", rec.ino), true, "write_inode");
        self.inner.write_inode(rec)
    }
    fn dir_read(&self, dir: Ino) -> Result<Vec<DirEntryRecord>> {
        key(|| format!("d/{dir}/*"), false, "dir_read");
        self.inner.dir_read(dir)
    }
    fn dir_insert(&self, dir: Ino, e: &DirEntryRecord) -> Result<()> {
        key(|| entry(dir, &e.name), true, "dir_insert");
        self.inner.dir_insert(dir, e)
    }
    fn dir_remove(&self, dir: Ino, name: &[u8]) -> Result<()> {
        key(|| entry(dir, name), true, "dir_remove");
        self.inner.dir_remove(dir, name)
    }
    fn read_page(&self, ino: Ino, index: u64, buf: &mut Page) -> Result<bool> {
        key(|| format!("p/{ino}/{index}"), false, "read_page");
        self.inner.read_page(ino, index, buf)
    }
    fn write_page(&self, ino: Ino, index: u64, data: &Page) -> Result<()> {
        key(|| format!("p/{ino}/{index}"), true, "write_page");
        self.inner.write_page(ino, index, data)
    }
    fn punch_pages(&self, ino: Ino, start: u64, end: u64) -> Result<u64> {
        pages(ino, start, end, true, "punch_pages");
        self.inner.punch_pages(ino, start, end)
    }
    fn count_pages(&self, ino: Ino, start: u64, end: u64) -> Result<u64> {
        pages(ino, start, end, false, "count_pages");
        self.inner.count_pages(ino, start, end)
    }
    fn read_unwritten(&self, ino: Ino) -> Result<Vec<Range<u64>>> {
        key(|| format!("x/{ino}"), false, "read_unwritten");
        self.inner.read_unwritten(ino)
    }
    fn write_unwritten(&self, ino: Ino, extents: &[Range<u64>]) -> Result<()> {
        key(|| format!("x/{ino}"), true, "write_unwritten");
        self.inner.write_unwritten(ino, extents)
    }
    fn allocated_pages(&self, ino: Ino) -> Result<u64> {
        key(|| format!("p/{ino}/*"), false, "allocated_pages");
        key(|| format!("x/{ino}"), false, "allocated_pages");
        self.inner.allocated_pages(ino)
    }
    fn list_inodes(&self) -> Result<Vec<Ino>> {
        key(|| "i/*".into(), false, "list_inodes");
        self.inner.list_inodes()
    }
    fn page_count(&self, ino: Ino) -> Result<u64> {
        key(|| format!("p/{ino}/*"), false, "page_count");
        self.inner.page_count(ino)
    }
    fn sync(&self) -> Result<()> {
        key(|| "sync".into(), true, "sync");
        self.inner.sync()
    }
    fn commit(&self, txn: &Txn) -> Result<()> {
        for op in txn.ops() {
            match op {
                TxnOp::PutInode(r) => key(|| format!("i/{}", r.ino), true, "commit"),
                TxnOp::FreeInode(ino) => free(*ino, "commit"),
                TxnOp::PutEntry(dir, e) => key(|| entry(*dir, &e.name), true, "commit"),
                TxnOp::RemoveEntry(dir, name) => key(|| entry(*dir, name), true, "commit"),
                TxnOp::PunchPages(ino, s, e) => pages(*ino, *s, *e, true, "commit"),
                TxnOp::Usage(lane, ..) => key(|| format!("u/{lane}"), true, "commit"),
            }
        }
        self.inner.commit(txn)
    }
}
