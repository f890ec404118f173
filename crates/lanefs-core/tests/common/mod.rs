//! Test support shared by the core's integration tests.
//!
//! [`create_rw`]: a file made read-write in the root.
//!
//! [`knob`]: a test's length from the environment.
//!
//! [`names_in_store`]: the names a store holds for a directory, sorted.
//!
//! [`Rng`]: a seeded xorshift for the random-operation races.
//!
//! [`with_readers`]: reader threads looping over lookups while this
//! thread changes names (the race tests' scaffolding).
//!
//! [`HookedStore`]: a [`Store`] that forwards the trait's *required* calls
//! to a [`MemoryStore`] and asks a hook first, which may fail the call. The
//! optional calls (unwritten-extent records, range counts) are not
//! forwarded, so they take the trait's defaults: the store behaves like one
//! written before those calls existed. A transaction (`commit`) asks the
//! hook once per operation before applying any, and fails whole.

use lanefs_core::*;
use lanefs_store::{DirEntryRecord, InodeRecord, Page, Superblock, Txn, TxnOp};

/// A seeded xorshift64 (seed not 0): the random-operation races draw
/// from it, so a failing seed replays.
#[allow(dead_code)] // not every test binary draws
pub struct Rng(pub u64);

#[allow(dead_code)]
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform-ish in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
}

/// A test's length knob: the environment variable `name` as a number
/// (soak runs set it), else `default`.
#[allow(dead_code)] // not every test binary has a knob
pub fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// Run `readers` threads, reader `k` calling `read(k)` again and again,
/// while this thread runs `write`; stop them once it returns. What each
/// reader's calls returned `true` for (its answers that count: the
/// caller asserts there were some, so a test whose readers never got an
/// answer does not pass by asserting nothing). A reader's panic fails
/// the test.
#[allow(dead_code)] // not every test binary races readers
pub fn with_readers<R>(readers: usize, read: R, write: impl FnOnce()) -> Vec<u64>
where
    R: Fn(usize) -> bool + Send + Sync + 'static,
{
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let stop = Arc::new(AtomicBool::new(false));
    let read = Arc::new(read);
    let handles: Vec<_> = (0..readers)
        .map(|k| {
            let (stop, read) = (stop.clone(), read.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += read(k) as u64;
                }
                n
            })
        })
        .collect();
    // Stop the readers even if the writer panics, so that the panic is
    // reported instead of the test hanging.
    struct StopOnDrop(Arc<AtomicBool>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let stopper = StopOnDrop(stop);
    write();
    drop(stopper);
    handles
        .into_iter()
        .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
        .collect()
}

/// The names `store` holds for directory `dir`, sorted.
#[allow(dead_code)] // not every test binary reads a store's entries
pub fn names_in_store(store: &dyn Store, dir: Ino) -> Vec<Vec<u8>> {
    let mut v: Vec<_> = store
        .dir_read(dir)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    v.sort();
    v
}

/// Create `/name` read-write as root (mode 0644): its attributes and the
/// handle.
#[allow(dead_code)] // not every test binary creates files this way
pub fn create_rw(fs: &Fs, name: &[u8]) -> (Attr, OpenFile) {
    let flags = libc::O_CREAT | libc::O_RDWR;
    let (attr, f, _) = fs
        .open_at(&Cred::root(), ROOT_INO, name, flags, 0o644, 0, false)
        .unwrap();
    (attr, f)
}

/// Which store call the hook is asked about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(dead_code)] // each test binary matches on the calls it cares about
pub enum Call {
    FreeIno,
    DirInsert,
    DirRemove,
    /// `punch_pages` (a truncate or hole punch of pages in the store).
    Punch,
    /// Any other call.
    Other,
}

#[allow(dead_code)] // not every test binary hooks a store
type Hook = Box<dyn Fn(Call) -> Result<()> + Send + Sync>;

#[allow(dead_code)] // not every test binary hooks a store
pub struct HookedStore {
    inner: MemoryStore,
    hook: Hook,
}

#[allow(dead_code)] // not every test binary hooks a store
impl HookedStore {
    /// A fresh memory store behind `hook`.
    pub fn new(hook: impl Fn(Call) -> Result<()> + Send + Sync + 'static) -> HookedStore {
        HookedStore {
            inner: MemoryStore::default(),
            hook: Box::new(hook),
        }
    }
}

impl Store for HookedStore {
    fn superblock(&self) -> Result<Superblock> {
        (self.hook)(Call::Other)?;
        self.inner.superblock()
    }
    fn write_superblock(&self, sb: &Superblock) -> Result<()> {
        (self.hook)(Call::Other)?;
        self.inner.write_superblock(sb)
    }
    fn alloc_ino(&self) -> Result<Ino> {
        (self.hook)(Call::Other)?;
        self.inner.alloc_ino()
    }
    fn free_ino(&self, ino: Ino) -> Result<()> {
        (self.hook)(Call::FreeIno)?;
        self.inner.free_ino(ino)
    }
    fn read_inode(&self, ino: Ino) -> Result<Option<InodeRecord>> {
        (self.hook)(Call::Other)?;
        self.inner.read_inode(ino)
    }
    fn write_inode(&self, rec: &InodeRecord) -> Result<()> {
        (self.hook)(Call::Other)?;
        self.inner.write_inode(rec)
    }
    fn dir_read(&self, dir: Ino) -> Result<Vec<DirEntryRecord>> {
        (self.hook)(Call::Other)?;
        self.inner.dir_read(dir)
    }
    fn dir_insert(&self, dir: Ino, entry: &DirEntryRecord) -> Result<()> {
        (self.hook)(Call::DirInsert)?;
        self.inner.dir_insert(dir, entry)
    }
    fn dir_remove(&self, dir: Ino, name: &[u8]) -> Result<()> {
        (self.hook)(Call::DirRemove)?;
        self.inner.dir_remove(dir, name)
    }
    fn read_page(&self, ino: Ino, index: u64, buf: &mut Page) -> Result<bool> {
        (self.hook)(Call::Other)?;
        self.inner.read_page(ino, index, buf)
    }
    fn write_page(&self, ino: Ino, index: u64, data: &Page) -> Result<()> {
        (self.hook)(Call::Other)?;
        self.inner.write_page(ino, index, data)
    }
    fn punch_pages(&self, ino: Ino, start: u64, end: u64) -> Result<u64> {
        (self.hook)(Call::Punch)?;
        self.inner.punch_pages(ino, start, end)
    }
    fn list_inodes(&self) -> Result<Vec<Ino>> {
        (self.hook)(Call::Other)?;
        self.inner.list_inodes()
    }
    fn page_count(&self, ino: Ino) -> Result<u64> {
        (self.hook)(Call::Other)?;
        self.inner.page_count(ino)
    }
    fn sync(&self) -> Result<()> {
        (self.hook)(Call::Other)?;
        self.inner.sync()
    }
    fn commit(&self, txn: &Txn) -> Result<()> {
        for op in txn.ops() {
            (self.hook)(match op {
                TxnOp::FreeInode(_) => Call::FreeIno,
                TxnOp::PutEntry(..) => Call::DirInsert,
                TxnOp::RemoveEntry(..) => Call::DirRemove,
                _ => Call::Other,
            })?;
        }
        self.inner.commit(txn)
    }
}
