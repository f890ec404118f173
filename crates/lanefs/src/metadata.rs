//! What `stat` and a directory listing give: [`Metadata`],
//! [`DirEntryOwned`] and the [`ReadDir`] iterator, with the calls on
//! [`Filesystem`] that make them (`metadata`, `symlink_metadata`,
//! `exists`, `try_exists`, `read_dir`).
//!
//! Locks and atomics: none of its own. A `stat` asks the core's RCU-walk
//! (no lock, no reference) first, the reference walk only where that
//! cannot answer. A
//! [`ReadDir`] holds its directory open (a core `OpenFile`) and a
//! reference to the instance counted on its lane (`handle.rs`); its
//! entries share the listed path by an `Arc` of that listing alone.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use lanefs_core::{Attr, Errno, FileKind, Ino, OpenFile, Result, Timespec};

use crate::{bytes, handle, Filesystem};

/// How many directory entries [`ReadDir`] fetches from the core at once.
const READDIR_BATCH_MAX: usize = 128;

/// Attributes of a file, as `stat` returns them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Metadata(pub Attr);

impl Metadata {
    /// The core attributes.
    pub fn attr(&self) -> &Attr {
        &self.0
    }
    pub fn kind(&self) -> FileKind {
        self.0.kind
    }
    pub fn is_dir(&self) -> bool {
        self.0.kind == FileKind::Directory
    }
    pub fn is_file(&self) -> bool {
        self.0.kind == FileKind::Regular
    }
    pub fn is_symlink(&self) -> bool {
        self.0.kind == FileKind::Symlink
    }
    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.0.size
    }
    /// True when the size is zero.
    pub fn is_empty(&self) -> bool {
        self.0.size == 0
    }
    /// Permission bits with setuid, setgid and sticky (`st_mode & 0o7777`).
    pub fn permissions(&self) -> u32 {
        self.0.perm as u32
    }
    /// `st_mode`: type and permission bits.
    pub fn mode(&self) -> u32 {
        self.0.mode()
    }
    pub fn ino(&self) -> Ino {
        self.0.ino
    }
    pub fn nlink(&self) -> u32 {
        self.0.nlink
    }
    pub fn uid(&self) -> u32 {
        self.0.uid
    }
    pub fn gid(&self) -> u32 {
        self.0.gid
    }
    pub fn rdev(&self) -> u64 {
        self.0.rdev
    }
    pub fn blocks(&self) -> u64 {
        self.0.blocks
    }
    pub fn atime(&self) -> Timespec {
        self.0.atime
    }
    pub fn mtime(&self) -> Timespec {
        self.0.mtime
    }
    pub fn ctime(&self) -> Timespec {
        self.0.ctime
    }
    /// Last modification as a [`std::time::SystemTime`].
    pub fn modified(&self) -> std::time::SystemTime {
        self.0.mtime.into()
    }
    /// Last access as a [`std::time::SystemTime`].
    pub fn accessed(&self) -> std::time::SystemTime {
        self.0.atime.into()
    }
    /// Creation (birth) time as a [`std::time::SystemTime`].
    pub fn created(&self) -> std::time::SystemTime {
        self.0.btime.into()
    }
    pub fn btime(&self) -> Timespec {
        self.0.btime
    }
    /// Preferred I/O size (`st_blksize`).
    pub fn blksize(&self) -> u32 {
        self.0.blksize
    }
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntryOwned {
    name: Vec<u8>,
    ino: Ino,
    kind: FileKind,
    /// The path the listing was asked for, shared by its entries.
    dir: Arc<Path>,
}

impl DirEntryOwned {
    /// The path given to [`Filesystem::read_dir`] joined with the name, as
    /// [`std::fs::DirEntry::path`].
    ///
    /// ```
    /// let fs = lanefs::Filesystem::new_in_memory()?;
    /// fs.create_dir_all("/a/b")?;
    /// let e = fs.read_dir("/a")?.next().unwrap()?;
    /// assert_eq!(e.path(), std::path::Path::new("/a/b"));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn path(&self) -> PathBuf {
        self.dir.join(std::ffi::OsStr::from_bytes(&self.name))
    }
    /// The name as raw bytes.
    pub fn name_bytes(&self) -> &[u8] {
        &self.name
    }
    /// The name.
    pub fn file_name(&self) -> OsString {
        OsString::from_vec(self.name.clone())
    }
    pub fn ino(&self) -> Ino {
        self.ino
    }
    /// The file type.
    pub fn kind(&self) -> FileKind {
        self.kind
    }
}

/// Iterator over a directory's entries (without `.` and `..`, as
/// [`std::fs::read_dir`]). Entries are fetched from the core in batches
/// with readdir cookies, so an entry that exists for the whole listing is
/// returned exactly once even while the directory changes.
pub struct ReadDir {
    handle: OpenFile,
    /// The path listed, for [`DirEntryOwned::path`].
    dir: Arc<Path>,
    inner: handle::InnerRef,
    buffered: VecDeque<DirEntryOwned>,
    offset: u64,
    done: bool,
}

impl ReadDir {
    fn fill(&mut self) -> Result<()> {
        let mut batch = Vec::new();
        let mut next = self.offset;
        self.inner.fs.readdir(&self.handle, self.offset, &mut |e| {
            next = e.next_offset;
            if e.name != b"." && e.name != b".." {
                batch.push(DirEntryOwned {
                    name: e.name.to_vec(),
                    ino: e.ino,
                    kind: e.kind,
                    dir: self.dir.clone(),
                });
            }
            batch.len() >= READDIR_BATCH_MAX
        })?;
        if next == self.offset {
            self.done = true;
        }
        self.offset = next;
        self.buffered.extend(batch);
        Ok(())
    }
}

impl Iterator for ReadDir {
    type Item = io::Result<DirEntryOwned>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.buffered.is_empty() && !self.done {
            if let Err(e) = self.fill() {
                self.done = true;
                return Some(Err(e.into()));
            }
        }
        self.buffered.pop_front().map(Ok)
    }
}

impl Filesystem {
    /// List a directory (follows symlinks; needs read permission).
    ///
    /// ```
    /// use lanefs::{FileKind, Filesystem};
    /// let fs = Filesystem::new_in_memory()?;
    /// fs.create_dir("/d")?;
    /// fs.symlink("/d", "/link")?;
    /// let mut kinds: Vec<(String, FileKind)> = fs
    ///     .read_dir("/")?
    ///     .map(|e| e.map(|e| (e.file_name().to_string_lossy().into_owned(), e.kind())))
    ///     .collect::<std::io::Result<_>>()?;
    /// kinds.sort_by(|a, b| a.0.cmp(&b.0));
    /// assert_eq!(kinds, [("d".into(), FileKind::Directory), ("link".into(), FileKind::Symlink)]);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn read_dir<P: AsRef<Path>>(&self, path: P) -> io::Result<ReadDir> {
        // Held by the generation the walk saw, not counted (as an open by
        // path): listing a directory writes no reference count of it, so a
        // listing beside a change in the directory shares no line on it.
        let mut w = self.walker();
        let h = w.resolve_seen(bytes(&path), true)?;
        if h.kind != FileKind::Directory {
            return Err(Errno::ENOTDIR.into());
        }
        let handle = self
            .core()
            .open_checked(&self.cred, h.at(), libc::O_RDONLY)?;
        Ok(ReadDir {
            dir: Arc::from(path.as_ref()),
            inner: self.handle_ref(),
            handle,
            buffered: VecDeque::new(),
            offset: 0,
            done: false,
        })
    }

    /// `stat(path)`: follows a final symlink.
    pub fn metadata<P: AsRef<Path>>(&self, path: P) -> io::Result<Metadata> {
        Ok(Metadata(self.stat(bytes(&path), true)?))
    }

    /// `lstat(path)`: a final symlink is not followed.
    pub fn symlink_metadata<P: AsRef<Path>>(&self, path: P) -> io::Result<Metadata> {
        Ok(Metadata(self.stat(bytes(&path), false)?))
    }

    /// `stat`/`lstat`: the RCU-walk (no lock, no reference), else the
    /// reference walk and `getattr` of the pinned result.
    fn stat(&self, path: &[u8], follow: bool) -> Result<Attr> {
        if let Some(r) = self.walker().stat_rcu(path, follow) {
            return r;
        }
        let h = self.resolve(path, follow)?;
        self.core().getattr(h.ino)
    }

    /// As [`try_exists`](Self::try_exists), under the name of
    /// [`std::fs::exists`].
    pub fn exists<P: AsRef<Path>>(&self, path: P) -> io::Result<bool> {
        self.try_exists(path)
    }

    /// True if `path` resolves (following symlinks); errors other than
    /// `ENOENT` are returned.
    pub fn try_exists<P: AsRef<Path>>(&self, path: P) -> io::Result<bool> {
        match self.stat(bytes(&path), true) {
            Ok(_) => Ok(true),
            Err(Errno::ENOENT) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}
