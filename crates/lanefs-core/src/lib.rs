//! lanefs VFS core: one file-system instance ([`Fs`], the "mount") over a
//! [`Store`].
//!
//! All calls are inode-number based, with Linux semantics and errnos, as a
//! FUSE daemon sees the world: entry-returning calls (`lookup_counted`,
//! `create`, `mknod`, `mkdir`, `symlink`, `link`) add one to the inode's
//! lookup count, which [`Fs::forget`] gives back; an inode whose link count
//! is zero lives on while it is looked up or open, and is freed at the last
//! `forget` or close. The Rust API crate (`lanefs`) builds paths and `File`
//! types on top.
//!
//! See `docs/ARCHITECTURE.md` for the layers and the whole lock order.

mod types;

pub use lanefs_store::{
    Errno, FileKind, Ino, MemoryStore, MemoryStoreConfig, Result, Store, Timespec, PAGE_SIZE,
    ROOT_INO,
};
pub use types::*;

use std::sync::Arc;

/// One file-system instance over a store. Cheap to clone (shared inside).
#[derive(Clone)]
pub struct Fs {
    _store: Arc<dyn Store>,
}

/// An open regular file or directory. Closing is dropping it.
pub struct OpenFile {
    ino: Ino,
}

impl OpenFile {
    /// The inode this handle refers to.
    pub fn ino(&self) -> Ino {
        self.ino
    }
}

/// Counts from a cache shrink, for tests and stats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShrinkStats {
    pub inodes_evicted: usize,
    pub pages_dropped: usize,
    pub dirs_dropped: usize,
}

#[allow(unused_variables)]
impl Fs {
    /// Open the file system kept in `store`, creating an empty one (just the
    /// root directory) if the store holds none.
    pub fn new(store: Arc<dyn Store>, config: FsConfig) -> Result<Fs> {
        Ok(Fs { _store: store })
    }

    /// A fresh file system on a [`MemoryStore`] with default limits.
    pub fn new_in_memory() -> Fs {
        Fs {
            _store: Arc::new(MemoryStore::default()),
        }
    }

    /// Attributes of `ino`.
    pub fn getattr(&self, ino: Ino) -> Result<Attr> {
        Err(Errno::ENOSYS)
    }
    /// Change attributes (chmod, chown, truncate, utimens). `handle` is the
    /// open file the change came through (ftruncate, futimens), if any.
    pub fn setattr(
        &self,
        cred: &Cred,
        ino: Ino,
        changes: &SetAttr,
        handle: Option<&OpenFile>,
    ) -> Result<Attr> {
        Err(Errno::ENOSYS)
    }
    /// `access(2)`: `mask` of [`MAY_READ`], [`MAY_WRITE`], [`MAY_EXEC`] (0 = exists).
    pub fn access(&self, cred: &Cred, ino: Ino, mask: u32) -> Result<()> {
        Err(Errno::ENOSYS)
    }
    /// Find `name` in directory `parent` without taking a lookup reference.
    /// `.` and `..` are understood.
    pub fn lookup(&self, cred: &Cred, parent: Ino, name: &[u8]) -> Result<Attr> {
        Err(Errno::ENOSYS)
    }
    /// As [`lookup`](Self::lookup), adding one to the found inode's lookup count.
    pub fn lookup_counted(&self, cred: &Cred, parent: Ino, name: &[u8]) -> Result<Attr> {
        Err(Errno::ENOSYS)
    }
    /// Give back `n` lookup references of `ino` (FUSE's FORGET).
    pub fn forget(&self, ino: Ino, n: u64) {}
    /// Create a node: regular file, fifo, socket, character or block device
    /// (`mode` carries the type bits; 0 means regular). Counted.
    pub fn mknod(
        &self,
        cred: &Cred,
        parent: Ino,
        name: &[u8],
        mode: u32,
        umask: u32,
        rdev: u64,
    ) -> Result<Attr> {
        Err(Errno::ENOSYS)
    }
    /// Create a directory. Counted.
    pub fn mkdir(&self, cred: &Cred, parent: Ino, name: &[u8], mode: u32, umask: u32) -> Result<Attr> {
        Err(Errno::ENOSYS)
    }
    /// Create a symbolic link to `target`. Counted.
    pub fn symlink(&self, cred: &Cred, parent: Ino, name: &[u8], target: &[u8]) -> Result<Attr> {
        Err(Errno::ENOSYS)
    }
    /// The target of symlink `ino`.
    pub fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        Err(Errno::ENOSYS)
    }
    /// Add a hard link `newparent/newname` to `ino`. Counted.
    pub fn link(&self, cred: &Cred, ino: Ino, newparent: Ino, newname: &[u8]) -> Result<Attr> {
        Err(Errno::ENOSYS)
    }
    /// Remove a non-directory entry.
    pub fn unlink(&self, cred: &Cred, parent: Ino, name: &[u8]) -> Result<()> {
        Err(Errno::ENOSYS)
    }
    /// Remove an empty directory.
    pub fn rmdir(&self, cred: &Cred, parent: Ino, name: &[u8]) -> Result<()> {
        Err(Errno::ENOSYS)
    }
    /// `renameat2` with [`RENAME_NOREPLACE`] / [`RENAME_EXCHANGE`] flags.
    pub fn rename(
        &self,
        cred: &Cred,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: u32,
    ) -> Result<()> {
        Err(Errno::ENOSYS)
    }
    /// Open inode `ino` with `open(2)` flags (`O_RDONLY`/`O_WRONLY`/`O_RDWR`,
    /// `O_TRUNC`, `O_APPEND`, `O_NOATIME`). Directories open read-only.
    pub fn open(&self, cred: &Cred, ino: Ino, flags: i32) -> Result<OpenFile> {
        Err(Errno::ENOSYS)
    }
    /// Look up `name` in `parent` and open it, creating a regular file with
    /// `mode & !umask` if absent and `flags` has `O_CREAT` (`O_EXCL`: the
    /// name must not exist). Lookup and open happen under the directory's
    /// lock, so the entry cannot vanish in between. `counted` adds a lookup
    /// reference (FUSE CREATE). Returns the attributes after the open
    /// (after `O_TRUNC`) and whether the file was created.
    #[allow(clippy::too_many_arguments)]
    pub fn open_at(
        &self,
        cred: &Cred,
        parent: Ino,
        name: &[u8],
        flags: i32,
        mode: u32,
        umask: u32,
        counted: bool,
    ) -> Result<(Attr, OpenFile, bool)> {
        Err(Errno::ENOSYS)
    }
    /// Read at `offset` into `buf`; returns the bytes read (0 at or past EOF).
    pub fn read(&self, file: &OpenFile, offset: u64, buf: &mut [u8]) -> Result<usize> {
        Err(Errno::ENOSYS)
    }
    /// Write `data` at `offset` (at end of file for `O_APPEND`); returns
    /// the bytes written and the offset just past them.
    pub fn write(&self, file: &OpenFile, offset: u64, data: &[u8]) -> Result<(usize, u64)> {
        Err(Errno::ENOSYS)
    }
    /// `fallocate(2)`: mode 0, [`FALLOC_FL_KEEP_SIZE`],
    /// `PUNCH_HOLE | KEEP_SIZE`, [`FALLOC_FL_ZERO_RANGE`] (± KEEP_SIZE).
    pub fn fallocate(&self, file: &OpenFile, mode: i32, offset: i64, len: i64) -> Result<()> {
        Err(Errno::ENOSYS)
    }
    /// Make the file's data (and, unless `datasync`, its metadata) durable.
    pub fn fsync(&self, file: &OpenFile, datasync: bool) -> Result<()> {
        Err(Errno::ENOSYS)
    }
    /// List directory `file` from `offset` (0 = start; `.` and `..`
    /// included). `emit` returns `true` when it wants no more entries.
    pub fn readdir(
        &self,
        file: &OpenFile,
        offset: u64,
        emit: &mut dyn FnMut(DirEntry<'_>) -> bool,
    ) -> Result<()> {
        Err(Errno::ENOSYS)
    }
    /// File-system totals and free space.
    pub fn statfs(&self) -> Result<StatFs> {
        Err(Errno::ENOSYS)
    }
    /// Set extended attribute `name` ([`XATTR_CREATE`] / [`XATTR_REPLACE`]).
    pub fn setxattr(&self, cred: &Cred, ino: Ino, name: &[u8], value: &[u8], flags: u32) -> Result<()> {
        Err(Errno::ENOSYS)
    }
    /// The value of extended attribute `name`.
    pub fn getxattr(&self, cred: &Cred, ino: Ino, name: &[u8]) -> Result<Vec<u8>> {
        Err(Errno::ENOSYS)
    }
    /// Names of the extended attributes of `ino`, each followed by a NUL.
    pub fn listxattr(&self, cred: &Cred, ino: Ino) -> Result<Vec<u8>> {
        Err(Errno::ENOSYS)
    }
    /// Remove extended attribute `name`.
    pub fn removexattr(&self, cred: &Cred, ino: Ino, name: &[u8]) -> Result<()> {
        Err(Errno::ENOSYS)
    }
    /// Write everything dirty back to the store and sync it (`syncfs`).
    pub fn sync(&self) -> Result<()> {
        Err(Errno::ENOSYS)
    }
    /// Write back and evict every unreferenced cached object: inodes,
    /// directory indexes, data pages. Everything is read back on demand.
    pub fn shrink(&self) -> ShrinkStats {
        ShrinkStats::default()
    }
    /// Full consistency check of the store after a sync: link counts,
    /// dangling entries, parents, block and inode counters, leaks.
    /// Returns a description of every problem found.
    pub fn check(&self) -> std::result::Result<(), Vec<String>> {
        Err(vec!["not implemented".into()])
    }
}
