//! Every namespace operation reaches the store as one `Store::commit` (and
//! the freeing of an inode as one more), with no record or entry written
//! outside a transaction, and no transaction holds its parent directory's
//! record (so creates of two names in one directory touch disjoint keys).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use lanefs_core::*;
use lanefs_store::{DirEntryRecord, InodeRecord, Page, Superblock, Txn, TxnOp};
use parking_lot::Mutex;

#[allow(dead_code)] // this binary uses only `names_in_store`
mod common;
use common::names_in_store;

/// A memory store that counts commits and the record writes made outside
/// them, and keeps every transaction's inode records.
#[derive(Default)]
struct Counting {
    inner: MemoryStore,
    commits: AtomicUsize,
    /// `write_inode`, `dir_insert`, `dir_remove`, `free_ino` calls.
    direct: AtomicUsize,
    /// Per commit: the inode numbers of its `PutInode`s and its op count.
    txns: Mutex<Vec<(Vec<Ino>, usize)>>,
    /// Answer `Store::volatile` with this (the memory store's own answer is
    /// `true`; `false` stands for a persistent store).
    volatile: bool,
}

impl Counting {
    fn take(&self) -> (usize, usize, Vec<(Vec<Ino>, usize)>) {
        (
            self.commits.swap(0, Ordering::SeqCst),
            self.direct.swap(0, Ordering::SeqCst),
            std::mem::take(&mut *self.txns.lock()),
        )
    }
}

impl Store for Counting {
    fn superblock(&self) -> Result<Superblock> {
        self.inner.superblock()
    }
    fn write_superblock(&self, sb: &Superblock) -> Result<()> {
        self.inner.write_superblock(sb)
    }
    fn alloc_ino(&self) -> Result<Ino> {
        self.inner.alloc_ino()
    }
    fn free_ino(&self, ino: Ino) -> Result<()> {
        self.direct.fetch_add(1, Ordering::SeqCst);
        self.inner.free_ino(ino)
    }
    fn read_inode(&self, ino: Ino) -> Result<Option<InodeRecord>> {
        self.inner.read_inode(ino)
    }
    fn write_inode(&self, rec: &InodeRecord) -> Result<()> {
        self.direct.fetch_add(1, Ordering::SeqCst);
        self.inner.write_inode(rec)
    }
    fn dir_read(&self, dir: Ino) -> Result<Vec<DirEntryRecord>> {
        self.inner.dir_read(dir)
    }
    fn dir_insert(&self, dir: Ino, entry: &DirEntryRecord) -> Result<()> {
        self.direct.fetch_add(1, Ordering::SeqCst);
        self.inner.dir_insert(dir, entry)
    }
    fn dir_remove(&self, dir: Ino, name: &[u8]) -> Result<()> {
        self.direct.fetch_add(1, Ordering::SeqCst);
        self.inner.dir_remove(dir, name)
    }
    fn read_page(&self, ino: Ino, index: u64, buf: &mut Page) -> Result<bool> {
        self.inner.read_page(ino, index, buf)
    }
    fn write_page(&self, ino: Ino, index: u64, data: &Page) -> Result<()> {
        self.inner.write_page(ino, index, data)
    }
    fn punch_pages(&self, ino: Ino, start: u64, end: u64) -> Result<u64> {
        self.inner.punch_pages(ino, start, end)
    }
    fn list_inodes(&self) -> Result<Vec<Ino>> {
        self.inner.list_inodes()
    }
    fn page_count(&self, ino: Ino) -> Result<u64> {
        self.inner.page_count(ino)
    }
    fn sync(&self) -> Result<()> {
        self.inner.sync()
    }
    fn volatile(&self) -> bool {
        self.volatile
    }
    fn commit(&self, txn: &Txn) -> Result<()> {
        self.commits.fetch_add(1, Ordering::SeqCst);
        let puts = txn
            .ops()
            .iter()
            .filter_map(|op| match op {
                TxnOp::PutInode(r) => Some(r.ino),
                _ => None,
            })
            .collect();
        self.txns.lock().push((puts, txn.ops().len()));
        self.inner.commit(txn)
    }
}

#[test]
fn each_name_operation_is_one_transaction_without_its_parents_record() {
    let store = Arc::new(Counting::default());
    let fs = Fs::new(store.clone(), FsConfig::default()).unwrap();
    let r = Cred::root();
    let a = fs.mkdir(&r, ROOT_INO, b"a", 0o755, 0).unwrap().ino;
    let b = fs.mkdir(&r, ROOT_INO, b"b", 0o755, 0).unwrap().ino;
    fs.mkdir(&r, a, b"sub", 0o755, 0).unwrap();
    let empty = fs.mkdir(&r, b, b"empty", 0o755, 0).unwrap().ino;
    store.take();
    // (what, transactions expected, the operation)
    type Op = Box<dyn Fn(&Fs, &Cred) -> Result<()>>;
    let ops: Vec<(&str, usize, Op)> = vec![
        (
            "mknod",
            1,
            Box::new(move |fs, r| fs.mknod(r, a, b"f", 0o644, 0, 0).map(drop)),
        ),
        (
            "symlink",
            1,
            Box::new(move |fs, r| fs.symlink(r, a, b"s", b"f").map(drop)),
        ),
        (
            "create",
            1,
            Box::new(move |fs, r| {
                fs.open_at(r, a, b"c", libc::O_CREAT | libc::O_RDWR, 0o644, 0, false)
                    .map(drop)
            }),
        ),
        (
            "mkdir",
            1,
            Box::new(move |fs, r| fs.mkdir(r, a, b"d", 0o755, 0).map(drop)),
        ),
        (
            "link",
            1,
            Box::new(move |fs, r| {
                let f = fs.lookup(r, a, b"f")?;
                fs.link(r, f.ino, b, b"l").map(drop)
            }),
        ),
        (
            "rename",
            1,
            Box::new(move |fs, r| fs.rename(r, a, b"f", a, b"g", 0)),
        ),
        (
            "rename over a name",
            2, // and the replaced file (neither open nor looked up) freed
            Box::new(move |fs, r| fs.rename(r, b, b"l", a, b"c", 0)),
        ),
        (
            "rename a directory across, over an empty one",
            1,
            Box::new(move |fs, r| fs.rename(r, a, b"sub", b, b"empty", 0)),
        ),
        (
            "exchange",
            1,
            Box::new(move |fs, r| fs.rename(r, b, b"empty", a, b"d", RENAME_EXCHANGE)),
        ),
        (
            "unlink (still looked up)",
            1,
            Box::new(move |fs, r| fs.unlink(r, a, b"s")),
        ),
        (
            "rmdir (still looked up)",
            1,
            Box::new(move |fs, r| fs.rmdir(r, b, b"empty")),
        ),
    ];
    for (what, want, op) in &ops {
        op(&fs, &r).unwrap_or_else(|e| panic!("{what}: {e}"));
        let (commits, direct, txns) = store.take();
        assert_eq!(
            (commits, direct),
            (*want, 0),
            "{what}: transactions, writes outside them"
        );
        for (puts, len) in &txns {
            assert!(*len <= 4, "{what}: {len} operations in one transaction");
            for dir in [ROOT_INO, a, b] {
                assert!(
                    !puts.contains(&dir),
                    "{what}: the parent directory's record is in the transaction"
                );
            }
        }
    }
    // The last lookup references of unlinked inodes go: one freeing
    // transaction each.
    let f = fs.lookup(&r, a, b"g").unwrap().ino;
    fs.unlink(&r, a, b"g").unwrap();
    fs.unlink(&r, a, b"c").unwrap();
    store.take();
    for (ino, n) in [(f, 2), (empty, 1)] {
        fs.forget(ino, n);
        let (commits, direct, txns) = store.take();
        assert_eq!((commits, direct, txns[0].1), (1, 0, 1), "free {ino}");
    }
    fs.check().unwrap();
}

/// On a volatile store (the memory store) an operation that changes names
/// makes no store call at all: the records it changed stay dirty in the
/// write-back cache and reach the store at writeback, where the store then
/// holds exactly the engine's records, and the entries live in the loaded
/// index (the store gets them back when the index is dropped).
#[test]
fn a_volatile_store_gets_records_at_writeback() {
    let store = Arc::new(Counting {
        volatile: true,
        ..Counting::default()
    });
    let fs = Fs::new(store.clone(), FsConfig::default()).unwrap();
    let r = Cred::root();
    let d = fs.mkdir(&r, ROOT_INO, b"d", 0o755, 0).unwrap().ino;
    store.take();
    let f = fs.mknod(&r, d, b"f", 0o644, 0, 0).unwrap();
    let l = fs.link(&r, f.ino, ROOT_INO, b"l").unwrap();
    fs.rename(&r, d, b"f", d, b"g", 0).unwrap();
    let (commits, direct, txns) = store.take();
    assert_eq!((commits, direct), (0, 0), "store calls: {txns:?}");
    assert!(store.inner.read_inode(f.ino).unwrap().is_none());
    assert!(
        store.inner.dir_read(d).unwrap().is_empty(),
        "entries in the store"
    );
    fs.sync().unwrap();
    let rec = store
        .inner
        .read_inode(f.ino)
        .unwrap()
        .expect("written back");
    assert_eq!((rec.nlink, rec.perm), (2, 0o644));
    assert_eq!(l.nlink, 2);
    fs.check().unwrap();
    // `check` dropped the indexes: the store has the entries now.
    assert_eq!(names_in_store(&store.inner, d), vec![b"g".to_vec()]);
    assert_eq!(
        names_in_store(&store.inner, ROOT_INO),
        vec![b"d".to_vec(), b"l".to_vec()]
    );
}
