//! Store transactions: the record changes of one engine operation, made
//! durable all-or-nothing by [`Store::commit`](crate::Store::commit).
//!
//! One engine operation (create, link, unlink, rename, truncate, setattr,
//! an inode writeback…) hands the store one [`Txn`]. The shape is chosen so
//! that it maps one-to-one onto
//! * a journal commit of the image store (one journal record per `Txn`), and
//! * a transaction of a distributed key-value store: every [`TxnOp`] is a
//!   put, a delete or a prefix/range delete of keys laid out as
//!   `i/<ino>` (inode record), `d/<dir>/<name>` (directory entry),
//!   `p/<ino>/<index>` (data page) and `u/<lane>` (per-lane usage deltas) —
//!   an etcd `Txn().Then(put…, delete…)` or a FoundationDB transaction.
//!
//! No key is written by every transaction: usage is kept per lane
//! ([`TxnOp::Usage`] names the lane), so two creates on two lanes write
//! disjoint keys and never conflict in an optimistic store.
//!
//! What the engine puts in one (docs/ARCHITECTURE.md, "one operation, one
//! transaction"): the entries it adds or removes, the full record of a new
//! inode, the record of every inode whose link count, parent or kind
//! changed, and [`TxnOp::FreeInode`] when an inode is freed. Never the
//! parent directory's own record: a directory's size, link count and next
//! cookie are derived from its entries after a crash
//! ([`InodeRecord::derive_dir`]), so two creates in one directory write
//! disjoint keys. The largest is a rename that replaces a directory or
//! moves one across directories: 2 entries and 2 records (4 operations).
//!
//! Bounds: at most [`TXN_OPS_MAX`] operations and [`TXN_BYTES_MAX`] bytes of
//! encoded records per transaction (etcd's defaults are 128 operations and a
//! 1.5 MiB request). With the engine's limits (a 4095-byte symlink target,
//! 256 KiB of xattr names and values, names of at least 6 bytes, 8 bytes of
//! framing per xattr) a record encodes to under 616 KiB, so the largest
//! engine transaction (2 records, 2 entries of at most 255-byte names) is
//! under 1.25 MiB. Data pages are not carried by metadata transactions:
//! they are written with [`Store::write_page`](crate::Store::write_page)
//! *before* the transaction that makes them reachable (ext4's
//! `data=ordered`), so a crash exposes no stale or foreign data.
//!
//! Inode numbers are reserved with [`Store::alloc_ino`](crate::Store::alloc_ino)
//! outside transactions; a reservation that no committed `Txn` used is
//! found free again by recovery (the allocator is a cache of the inode
//! table, rebuilt at mount).

use crate::{DirEntryRecord, Errno, Ino, InodeRecord, Result, ROOT_INO};

/// Most operations in one transaction.
pub const TXN_OPS_MAX: usize = 16;
/// Most bytes of encoded records in one transaction (etcd's default
/// request limit; see the module docs for the engine's largest).
pub const TXN_BYTES_MAX: usize = 1536 * 1024;
/// Longest entry name a store accepts.
pub const NAME_BYTES_MAX: usize = 255;

/// One record change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TxnOp {
    /// Create or replace the record of `rec.ino` (key `i/<ino>`).
    PutInode(InodeRecord),
    /// Forget inode `ino` entirely: its record, entries and pages (keys
    /// `i/<ino>`, prefix `d/<ino>/`, prefix `p/<ino>/`); the number is free.
    FreeInode(Ino),
    /// Add or replace an entry of `dir` (key `d/<dir>/<name>`).
    PutEntry(Ino, DirEntryRecord),
    /// Remove entry `name` of `dir` (absent is fine).
    RemoveEntry(Ino, Vec<u8>),
    /// Remove pages `start..end` of `ino` (range `p/<ino>/<start>..<end>`).
    PunchPages(Ino, u64, u64),
    /// Add signed deltas to lane `lane`'s usage record (key `u/<lane>`):
    /// `(lane, blocks, inodes)`.
    Usage(u32, i64, i64),
}

impl TxnOp {
    /// Bytes this operation adds to a transaction's encoded size.
    pub fn encoded_len(&self) -> usize {
        const HEADER: usize = 1 + 8;
        HEADER
            + match self {
                TxnOp::PutInode(r) => r.encoded_len(),
                TxnOp::PutEntry(_, e) => e.name.len() + e.encode_value().len(),
                TxnOp::RemoveEntry(_, name) => name.len(),
                TxnOp::FreeInode(_) => 0,
                TxnOp::PunchPages(..) => 16,
                TxnOp::Usage(..) => 20,
            }
    }
}

/// The record changes of one engine operation, in the order they apply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Txn {
    ops: Vec<TxnOp>,
    bytes: usize,
}

impl Txn {
    pub fn new() -> Txn {
        Txn::default()
    }

    /// `EINVAL` if an operation names something no store accepts: an empty
    /// or over-long entry name, inode 0, or freeing the root. Stores check
    /// this before applying anything, so such a transaction changes
    /// nothing.
    pub fn check(&self) -> Result<()> {
        let name_ok = |n: &[u8]| !n.is_empty() && n.len() <= NAME_BYTES_MAX;
        let ok = self.ops.iter().all(|op| match op {
            TxnOp::PutInode(r) => r.ino != 0,
            TxnOp::FreeInode(i) => *i != 0 && *i != ROOT_INO,
            TxnOp::PutEntry(d, e) => *d != 0 && e.ino != 0 && name_ok(&e.name),
            TxnOp::RemoveEntry(d, n) => *d != 0 && name_ok(n),
            TxnOp::PunchPages(i, ..) => *i != 0,
            TxnOp::Usage(..) => true,
        });
        if ok {
            Ok(())
        } else {
            Err(Errno::EINVAL)
        }
    }

    /// Append `op`; `E2BIG` (and nothing added) past [`TXN_OPS_MAX`] or
    /// [`TXN_BYTES_MAX`] — an engine operation that needs more must be
    /// split into steps that are each consistent on their own.
    pub fn push(&mut self, op: TxnOp) -> Result<()> {
        let len = op.encoded_len();
        if self.ops.len() >= TXN_OPS_MAX || self.bytes + len > TXN_BYTES_MAX {
            return Err(Errno::E2BIG);
        }
        self.bytes += len;
        self.ops.push(op);
        Ok(())
    }

    pub fn ops(&self) -> &[TxnOp] {
        &self.ops
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Encoded size so far.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_enforced_without_partial_adds() {
        let mut t = Txn::new();
        for i in 0..TXN_OPS_MAX {
            t.push(TxnOp::FreeInode(i as Ino + 2)).unwrap();
        }
        assert_eq!(t.push(TxnOp::FreeInode(99)), Err(Errno::E2BIG));
        assert_eq!(t.ops().len(), TXN_OPS_MAX);
        let mut big = Txn::new();
        let name = vec![b'x'; 255];
        let mut pushed = 0;
        while big.push(TxnOp::RemoveEntry(5, name.clone())).is_ok() {
            pushed += 1;
        }
        assert_eq!(pushed, TXN_OPS_MAX, "255-byte names fit the byte bound");
        assert!(big.bytes() <= TXN_BYTES_MAX);
    }

    #[test]
    fn default_commit_applies_every_op_in_order() {
        use crate::{FileKind, MemoryStore, Store};
        let s = MemoryStore::default();
        let dir = s.alloc_ino().unwrap();
        let file = s.alloc_ino().unwrap();
        let entry = DirEntryRecord {
            name: b"f".to_vec(),
            ino: file,
            kind: FileKind::Regular,
            cookie: 3,
        };
        let mut t = Txn::new();
        t.push(TxnOp::PutEntry(dir, entry.clone())).unwrap();
        t.push(TxnOp::RemoveEntry(dir, b"absent".to_vec())).unwrap();
        t.push(TxnOp::Usage(0, 1, 1)).unwrap();
        s.commit(&t).unwrap();
        assert_eq!(s.dir_read(dir).unwrap(), vec![entry]);
        let mut t = Txn::new();
        t.push(TxnOp::RemoveEntry(dir, b"f".to_vec())).unwrap();
        t.push(TxnOp::FreeInode(file)).unwrap();
        s.commit(&t).unwrap();
        assert!(s.dir_read(dir).unwrap().is_empty());
        assert_eq!(
            s.alloc_ino().unwrap(),
            file,
            "the freed number is free again"
        );
    }

    #[test]
    fn default_commit_with_a_bad_op_applies_nothing() {
        use crate::{FileKind, MemoryStore, Store};
        let s = MemoryStore::default();
        let dir = s.alloc_ino().unwrap();
        let entry = DirEntryRecord {
            name: b"f".to_vec(),
            ino: 7,
            kind: FileKind::Regular,
            cookie: 3,
        };
        let mut t = Txn::new();
        t.push(TxnOp::PutEntry(dir, entry)).unwrap();
        t.push(TxnOp::FreeInode(ROOT_INO)).unwrap();
        assert_eq!(s.commit(&t), Err(Errno::EINVAL));
        assert!(s.dir_read(dir).unwrap().is_empty(), "half applied");
    }

    #[test]
    fn encoded_len_matches_encode() {
        use crate::FileKind;
        let mut r = InodeRecord {
            ino: 9,
            generation: 1,
            kind: FileKind::Symlink,
            perm: 0o777,
            uid: 1,
            gid: 2,
            nlink: 1,
            size: 3,
            next_cookie: 3,
            symlink: b"abc".to_vec(),
            ..InodeRecord::default()
        };
        assert_eq!(r.encoded_len(), r.encode().len());
        r.xattrs.push((b"user.a".to_vec(), vec![1; 100]));
        r.xattrs.push((b"user.bb".to_vec(), Vec::new()));
        assert_eq!(r.encoded_len(), r.encode().len());
        assert_eq!(
            TxnOp::PutInode(r.clone()).encoded_len(),
            9 + r.encode().len()
        );
    }

    #[test]
    fn derive_dir_follows_the_entries() {
        use crate::{DirDerived, FileKind, DIRENT_SIZE};
        let mut r = InodeRecord {
            ino: 5,
            generation: 1,
            kind: FileKind::Directory,
            perm: 0o755,
            nlink: 2,
            size: 2 * DIRENT_SIZE,
            parent: 1,
            next_cookie: 3,
            ..InodeRecord::default()
        };
        let mut d = DirDerived::default();
        assert!(!r.derive_dir(&d), "an empty directory's record is right");
        for (i, kind) in [FileKind::Regular, FileKind::Directory]
            .into_iter()
            .enumerate()
        {
            d.add(&DirEntryRecord {
                name: vec![b'a' + i as u8],
                ino: 10 + i as Ino,
                kind,
                cookie: 7 + i as u64,
            });
        }
        assert!(r.derive_dir(&d));
        assert_eq!((r.size, r.nlink, r.next_cookie), (4 * DIRENT_SIZE, 3, 9));
        assert!(!r.derive_dir(&d), "derived twice changes nothing");
        r.next_cookie = 50;
        assert!(!r.derive_dir(&d), "a cookie is never handed out twice");
        assert_eq!(r.next_cookie, 50);
        r.nlink = 0;
        r.size = 0;
        assert!(!r.derive_dir(&d), "a dead directory is left alone");
    }
}
