//! lanefs: an embeddable many-core file system — the Rust API.
//!
//! Two levels:
//!
//! * the core's handle-based calls ([`Fs`], re-exported with every core type
//!   from [`lanefs_core`]): inode numbers, FUSE-style lookup counts, errnos;
//! * a path layer in the manner of [`std::fs`] on [`Filesystem`]: paths are
//!   resolved as Linux resolves them (absolute, or relative to the root; `.`
//!   and `..`; repeated slashes; symlinks followed in every intermediate
//!   component and in the last one wherever Linux follows; at most 40 links,
//!   `ELOOP` beyond; a trailing slash requires a directory; a path longer
//!   than 4095 bytes is `ENAMETOOLONG`; an empty path is `ENOENT`). Each
//!   call acts as the Linux system call of the same name, including the
//!   checks that Linux's VFS makes before a file system is asked.
//!
//! Errors are [`std::io::Error`]s that carry the raw errno
//! (`err.raw_os_error()`); [`Errno`] converts both ways.
//!
//! # Locks and atomics
//!
//! One of its own: the position a [`File`] shares with its clones and
//! `&File` calls, a leaf `Mutex` (the `file` module says which calls hold
//! it). A [`Filesystem`] is an `Arc` of the core
//! instance plus a credential and a umask (values, copied per view). A path
//! is first resolved by the core's RCU-walk (no lock, no reference; one
//! counted lookup on the final inode unless the call is a `stat`); what
//! that cannot answer (symlinks to follow, `..`, cache misses, concurrent
//! changes) is walked with every directory the walk stands in pinned by a
//! counted lookup that a guard gives back (`forget`) when it drops, so a
//! concurrent `rmdir` can never make a call operate in a freed or reused
//! inode; all other synchronization is the core's (see its module docs and
//! `docs/ARCHITECTURE.md`). A [`File`]'s position is a plain field changed
//! through `&mut self` until a clone or a `&File` call shares it. The
//! entries of one [`ReadDir`] share the path listed by an `Arc` of that
//! listing alone.
//!
//! # Example
//!
//! ```
//! use std::io::Write;
//! use lanefs::{Cred, Filesystem};
//!
//! let fs = Filesystem::new_in_memory()?;
//! fs.create_dir_all("/home/ann/docs")?;
//! fs.chown("/home/ann", Some(1000), Some(1000))?;
//! fs.write("/home/ann/docs/todo.txt", b"write the docs\n")?;
//! fs.symlink("docs/todo.txt", "/home/ann/todo")?;
//! assert_eq!(fs.read("/home/ann/todo")?, b"write the docs\n");
//!
//! // A view with another credential and umask: permission checks apply.
//! let ann = fs.with_cred(Cred::user(1000, 1000)).with_umask(0o077);
//! let mut f = ann.create("/home/ann/diary")?;
//! f.write_all(b"dear diary")?;
//! assert_eq!(fs.metadata("/home/ann/diary")?.permissions(), 0o600);
//! let err = ann.create_dir("/etc").unwrap_err();
//! assert_eq!(err.raw_os_error(), Some(libc::EACCES));
//!
//! let names: Vec<_> = fs
//!     .read_dir("/home/ann")?
//!     .map(|e| e.map(|e| e.file_name()))
//!     .collect::<Result<_, _>>()?;
//! assert_eq!(names.len(), 3);
//! # Ok::<(), std::io::Error>(())
//! ```

mod file;
mod handle;
mod walk;

pub use file::{File, OpenOptions};
pub use lanefs_core::*;
pub use lanefs_image::{ImageConfig, ImageStore, RecoveryReport};
pub use walk::{MAXSYMLINKS, PATH_BYTES_MAX};

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use walk::{Held, Last, Parent, Walker};

/// The access-mode and open-time flags the core's `open` understands.
const CORE_OPEN_FLAGS: i32 = libc::O_ACCMODE | libc::O_TRUNC | libc::O_APPEND | libc::O_NOATIME;

/// How many directory entries [`ReadDir`] fetches from the core at once.
const READDIR_BATCH_MAX: usize = 128;

struct Inner {
    /// Dropped before `fs` (field order): the engine's unmount then holds
    /// the last reference to a memory store it made, and skips handing
    /// the store every directory's entries (`FsInner::drop`).
    memory: Option<Arc<MemoryStore>>,
    /// The image store underneath, when this instance opened it.
    image: Option<Arc<ImageStore>>,
    fs: Fs,
    /// `File`s' and `ReadDir`s' references to this state, per lane, and
    /// its reference to itself while any is open (`handle.rs`).
    handles: Handles<Inner>,
}

impl Drop for Inner {
    /// An image this instance opened gets everything written back when the
    /// last view goes; the store's own drop then checkpoints it.
    fn drop(&mut self) {
        if self.image.is_some() {
            let _ = self.fs.sync();
        }
    }
}

/// A file-system instance seen with one credential and one umask.
///
/// Cloning is cheap; [`with_cred`](Self::with_cred) and
/// [`with_umask`](Self::with_umask) make other views of the same instance.
#[derive(Clone)]
pub struct Filesystem {
    inner: Arc<Inner>,
    cred: Arc<Cred>,
    umask: u32,
    /// Shared by the clones: dropped with the last, it lets the last open
    /// `File` or `ReadDir` release the state (`handle.rs`).
    _user: Arc<lanefs_core::HandleUsers<Inner>>,
}

impl std::fmt::Debug for Filesystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filesystem")
            .field("cred", &self.cred)
            .field("umask", &format_args!("{:#o}", self.umask))
            .finish()
    }
}

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

/// Linux's `chown_common` on inode `ino` of kind `kind` (through `handle`
/// for `fchown`): `None` leaves an id alone.
pub(crate) fn chown_common(
    core: &Fs,
    cred: &Cred,
    ino: Ino,
    kind: FileKind,
    handle: Option<&OpenFile>,
    uid: Option<u32>,
    gid: Option<u32>,
) -> io::Result<()> {
    let mut changes = SetAttr {
        uid,
        gid,
        ..SetAttr::default()
    };
    if uid.is_none() && gid.is_none() && kind != FileKind::Directory {
        // chown(-1, -1) still clears setuid and setgid on a
        // non-directory, as Linux's chown_common
        // (setattr_should_drop_sgid: setgid goes if group-executable
        // or the caller is neither in the file's group nor root).
        let attr = core.getattr(ino)?;
        let perm = attr.perm as u32;
        let mut newperm = perm & !libc::S_ISUID;
        if perm & libc::S_ISGID != 0
            && (perm & libc::S_IXGRP != 0 || !(cred.is_root() || cred.in_group(attr.gid)))
        {
            newperm &= !libc::S_ISGID;
        }
        if newperm != perm {
            changes.mode = Some(newperm);
        }
    }
    core.setattr_no_attr(cred, ino, &changes, handle)?;
    if uid.is_none() && gid.is_none() && kind != FileKind::Directory {
        // chown_common's ATTR_KILL_PRIV: `setattr_prepare` removes the
        // file capability once the change is allowed, whoever the
        // caller is (`cap_inode_killpriv`). A given uid or gid does it
        // inside the core's setattr.
        kill_capability(core, ino)?;
    }
    Ok(())
}

/// Remove a non-empty `security.capability` from `ino`
/// (`cap_inode_need_killpriv` + `cap_inode_killpriv`).
fn kill_capability(core: &Fs, ino: Ino) -> io::Result<()> {
    const CAPS: &[u8] = lanefs_core::XATTR_NAME_CAPS;
    let root = Cred::root();
    match core.getxattr(&root, ino, CAPS) {
        Ok(v) if !v.is_empty() => match core.removexattr(&root, ino, CAPS) {
            Ok(()) | Err(Errno::ENODATA) => Ok(()),
            Err(e) => Err(e.into()),
        },
        Ok(_) | Err(Errno::ENODATA) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Whether what follows a non-directory in a path to canonicalize makes it
/// an error (glibc's `suffix_requires_dir_check`): a trailing slash, or
/// `.` or `..` after it. A name after it fails its own lookup (`ENOTDIR`).
fn suffix_needs_dir(rest: &[u8]) -> bool {
    if rest.first() != Some(&b'/') {
        return false;
    }
    let rest = &rest[rest.iter().position(|&b| b != b'/').unwrap_or(rest.len())..];
    let comp_end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
    matches!(&rest[..comp_end], b"" | b"." | b"..")
}

/// Why the image at `path` cannot be opened, as one line.
fn image_error(path: &Path) -> io::Error {
    let why = match lanefs_image::FileDevice::open(path) {
        Ok(dev) => lanefs_image::describe_open_error(&dev),
        Err(e) => io::Error::from(e).to_string(),
    };
    io::Error::other(format!("{}: {why}", path.display()))
}

fn bytes<P: AsRef<Path>>(p: &P) -> &[u8] {
    p.as_ref().as_os_str().as_bytes()
}

fn os_path(b: &[u8]) -> &Path {
    Path::new(std::ffi::OsStr::from_bytes(b))
}

impl Filesystem {
    /// A reference to this instance for a `File` or `ReadDir`: counted on
    /// this thread's lane, not by `Arc` (`handle.rs`).
    pub(crate) fn handle_ref(&self) -> handle::InnerRef {
        handle::inner_ref(&self.inner)
    }

    /// A fresh, empty file system in memory with default limits.
    ///
    /// ```
    /// let fs = lanefs::Filesystem::new_in_memory()?;
    /// assert!(fs.metadata("/")?.is_dir());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new_in_memory() -> io::Result<Filesystem> {
        Filesystem::in_memory(MemoryStoreConfig::default(), FsConfig::default())
    }

    /// A fresh file system on a [`MemoryStore`] with the given limits;
    /// [`memory_store`](Self::memory_store) gives access to the store.
    pub fn in_memory(store: MemoryStoreConfig, config: FsConfig) -> io::Result<Filesystem> {
        let mem = Arc::new(MemoryStore::new(store));
        let fs = Fs::new(mem.clone(), config)?;
        Ok(Filesystem::wrap(fs, Some(mem)))
    }

    /// Open the lanefs image at `path` (a file or block device formatted by
    /// [`create_image`](Self::create_image) or `lanefs mkfs`), recovering
    /// it first: journal replay, orphans freed
    /// ([`image_store`](Self::image_store)`.recovery_report()` says what was
    /// done). Default configuration: a background commit every
    /// [`lanefs_image::COMMIT_INTERVAL_DEFAULT`]. Dropping the last view
    /// writes everything back and checkpoints the image; only what
    /// `sync`/`sync_all` (or the background commit) made durable survives
    /// a crash.
    ///
    /// ```
    /// use lanefs::Filesystem;
    /// let dir = std::env::temp_dir().join(format!("lanefs-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let img = dir.join("fs.img");
    /// {
    ///     let fs = Filesystem::create_image(&img, 16 << 20)?;
    ///     fs.create_dir("/notes")?;
    ///     fs.write("/notes/a.txt", b"kept on disk")?;
    ///     fs.sync()?;
    /// }
    /// let fs = Filesystem::open_image(&img)?;
    /// assert_eq!(fs.read("/notes/a.txt")?, b"kept on disk");
    /// assert_eq!(fs.image_store().unwrap().recovery_report().orphans_freed, 0);
    /// drop(fs);
    /// std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn open_image<P: AsRef<Path>>(path: P) -> io::Result<Filesystem> {
        Filesystem::open_image_with(path, &ImageConfig::default(), FsConfig::default())
    }

    /// [`open_image`](Self::open_image) with a store and an engine
    /// configuration. A foreign, truncated or corrupt image is an
    /// [`io::ErrorKind::Other`]-kind error whose one-line message says which.
    pub fn open_image_with<P: AsRef<Path>>(
        path: P,
        image: &ImageConfig,
        mut config: FsConfig,
    ) -> io::Result<Filesystem> {
        let path = path.as_ref();
        // Dirty inodes written back as often as the store commits, unless
        // the caller chose: a crash loses at most about two intervals of
        // writes no fsync covered (`FsConfig::writeback_interval`).
        if config.writeback_interval.is_none() {
            config.writeback_interval = image.commit_interval;
        }
        let store = match ImageStore::open_with(path, image) {
            Ok(s) => Arc::new(s),
            Err(Errno::EUCLEAN) => return Err(image_error(path)),
            Err(e) => return Err(e.into()),
        };
        let fs = Fs::new(store.clone(), config)?;
        Ok(Filesystem::with_inner(Inner {
            fs,
            memory: None,
            image: Some(store),
            handles: Handles::new(),
        }))
    }

    /// Format `path` (a file, created or resized to `size` bytes, or a
    /// block device of at least `size` bytes) as an empty lanefs image and
    /// open it. Whatever `path` held is lost.
    pub fn create_image<P: AsRef<Path>>(path: P, size: u64) -> io::Result<Filesystem> {
        lanefs_image::mkfs(path.as_ref(), size)?;
        Filesystem::open_image(path)
    }

    /// The image store underneath, when this instance opened it.
    pub fn image_store(&self) -> Option<&Arc<ImageStore>> {
        self.inner.image.as_ref()
    }

    /// Open the file system kept in `store` (creating an empty one if the
    /// store holds none).
    pub fn from_store(store: Arc<dyn Store>, config: FsConfig) -> io::Result<Filesystem> {
        Ok(Filesystem::wrap(Fs::new(store, config)?, None))
    }

    /// Wrap an existing core instance.
    pub fn from_core(fs: Fs) -> Filesystem {
        Filesystem::wrap(fs, None)
    }

    fn wrap(fs: Fs, memory: Option<Arc<MemoryStore>>) -> Filesystem {
        Filesystem::with_inner(Inner {
            fs,
            memory,
            image: None,
            handles: Handles::new(),
        })
    }

    fn with_inner(inner: Inner) -> Filesystem {
        let inner = Arc::new(inner);
        Filesystem {
            _user: Arc::new(lanefs_core::HandleUsers::new(&inner)),
            inner,
            cred: Arc::new(Cred::root()),
            umask: 0o022,
        }
    }

    /// The core instance, for handle-based calls.
    pub fn core(&self) -> &Fs {
        &self.inner.fs
    }

    /// The memory store underneath, when this instance made it.
    pub fn memory_store(&self) -> Option<&Arc<MemoryStore>> {
        self.inner.memory.as_ref()
    }

    /// The same file system seen with credential `cred`.
    pub fn with_cred(&self, cred: Cred) -> Filesystem {
        Filesystem {
            cred: Arc::new(cred),
            ..self.clone()
        }
    }

    /// The same file system with umask `umask` for files this view creates.
    pub fn with_umask(&self, umask: u32) -> Filesystem {
        Filesystem {
            umask: umask & 0o777,
            ..self.clone()
        }
    }

    /// The credential of this view (root unless changed).
    pub fn cred(&self) -> &Cred {
        &self.cred
    }

    /// The umask of this view (`0o022` unless changed).
    pub fn umask(&self) -> u32 {
        self.umask
    }

    fn walker(&self) -> Walker<'_> {
        Walker::new(&self.inner.fs, &self.cred)
    }

    fn resolve(&self, path: &[u8], follow: bool) -> Result<Held<'_>> {
        self.walker().resolve(path, follow)
    }

    /// Name `(parent, name)` for an operation that creates `path`
    /// (Linux's `filename_create`): `/`, `.` and `..` are `EEXIST`; with a
    /// trailing slash (unless `dir`), `EEXIST` if the name exists, else
    /// `ENOENT`.
    fn create_target<'p>(&self, p: &'p Parent<'_>, dir: bool) -> Result<&'p [u8]> {
        let Some(name) = p.name() else {
            return Err(Errno::EEXIST);
        };
        if p.trailing_slash && !dir {
            return match self.core().lookup(&self.cred, p.dir.at(), name) {
                Ok(_) => Err(Errno::EEXIST),
                Err(e) => Err(e),
            };
        }
        Ok(name)
    }

    // ---- directories -------------------------------------------------

    /// `mkdir(path, 0o777)`, less the umask.
    pub fn create_dir<P: AsRef<Path>>(&self, path: P) -> io::Result<()> {
        self.create_dir_mode(path, 0o777)
    }

    /// `mkdir(path, mode)`, less the umask.
    pub fn create_dir_mode<P: AsRef<Path>>(&self, path: P, mode: u32) -> io::Result<()> {
        let mut w = self.walker();
        let p = w.parent(bytes(&path))?;
        let name = self.create_target(&p, true)?;
        let attr = self
            .core()
            .mkdir(&self.cred, p.dir.at(), name, mode, self.umask)?;
        self.core().forget(attr.ino, 1);
        Ok(())
    }

    /// Create a directory and every missing parent; an existing directory
    /// is fine (as [`std::fs::create_dir_all`]: the error of the deepest
    /// `mkdir` that failed for another reason is returned, and an empty
    /// path is nothing to create).
    pub fn create_dir_all<P: AsRef<Path>>(&self, path: P) -> io::Result<()> {
        self.create_dir_all_mode(path, 0o777)
    }

    /// [`create_dir_all`](Self::create_dir_all) giving each directory it
    /// creates mode `mode` less the umask, as std's
    /// `DirBuilder::new().recursive(true).mode(mode)`.
    ///
    /// ```
    /// let fs = lanefs::Filesystem::new_in_memory()?;
    /// fs.create_dir_all_mode("/a/b", 0o750)?;
    /// assert_eq!(fs.metadata("/a")?.permissions(), 0o750);
    /// assert_eq!(fs.metadata("/a/b")?.permissions(), 0o750);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn create_dir_all_mode<P: AsRef<Path>>(&self, path: P, mode: u32) -> io::Result<()> {
        let path = bytes(&path);
        if path.is_empty() {
            return Ok(());
        }
        walk::check_path(path)?;
        self.create_dir_all_bytes(path, mode, 0)
    }

    fn create_dir_all_bytes(&self, path: &[u8], mode: u32, depth: usize) -> io::Result<()> {
        let trimmed = match path.iter().rposition(|&b| b != b'/') {
            Some(end) => &path[..=end],
            None => return Ok(()), // the root
        };
        let p = Path::new(std::ffi::OsStr::from_bytes(trimmed));
        match self.create_dir_mode(p, mode) {
            Ok(()) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && depth < PATH_BYTES_MAX => {}
            Err(e) => {
                return match self.metadata(p) {
                    Ok(m) if m.is_dir() => Ok(()),
                    _ => Err(e),
                }
            }
        }
        let parent = match trimmed.iter().rposition(|&b| b == b'/') {
            Some(i) => &trimmed[..i],
            None => &[][..],
        };
        if !parent.is_empty() {
            self.create_dir_all_bytes(parent, mode, depth + 1)?;
        }
        match self.create_dir_mode(p, mode) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) && self.metadata(p)?.is_dir() => {
                Ok(())
            }
            r => r,
        }
    }

    /// `rmdir(path)`.
    pub fn remove_dir<P: AsRef<Path>>(&self, path: P) -> io::Result<()> {
        let mut w = self.walker();
        let p = w.parent(bytes(&path))?;
        match &p.last {
            Last::Root => Err(Errno::EBUSY.into()),
            Last::Dot => Err(Errno::EINVAL.into()),
            Last::DotDot => Err(Errno::ENOTEMPTY.into()),
            Last::Name(n) => Ok(self.core().rmdir(&self.cred, p.dir.at(), n)?),
        }
    }

    /// Remove `path` and everything below it, as [`std::fs::remove_dir_all`]:
    /// a symlink is removed itself and never followed, below `path` as
    /// well; a file gives `ENOTDIR`. As std, `path` names what `lstat`
    /// names — with a trailing slash, `link/` is the directory the link
    /// points to: its content is removed, then the final `rmdir` of the
    /// path fails (`ENOTDIR`), as `rmdir` of `dir/.` does (`EINVAL`) and
    /// of `/` (`EBUSY`: `remove_dir_all("/")` empties the file system).
    /// Entries that vanish meanwhile (another remover) are no error, nor
    /// is the directory itself gone at the end.
    ///
    /// ```
    /// let fs = lanefs::Filesystem::new_in_memory()?;
    /// fs.create_dir_all("/keep/data")?;
    /// fs.create_dir_all("/scratch/tmp")?;
    /// fs.symlink("/keep", "/scratch/tmp/keep")?;
    /// fs.remove_dir_all("/scratch")?;
    /// assert!(fs.metadata("/keep/data")?.is_dir());
    /// assert!(!fs.try_exists("/scratch")?);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn remove_dir_all<P: AsRef<Path>>(&self, path: P) -> io::Result<()> {
        let path = bytes(&path);
        if self.symlink_metadata(os_path(path))?.is_symlink() {
            return self.remove_file(os_path(path));
        }
        // std opens it O_NOFOLLOW | O_DIRECTORY: a symlink put there
        // meanwhile is ELOOP, anything else not a directory ENOTDIR.
        let h = self.resolve(path, false)?;
        match h.kind {
            FileKind::Directory => {}
            FileKind::Symlink => return Err(Errno::ELOOP.into()),
            _ => return Err(Errno::ENOTDIR.into()),
        }
        self.remove_tree(h.ino)?;
        drop(h);
        match self.remove_dir(os_path(path)) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            r => r,
        }
    }

    /// The names and kinds in directory `dir` (pinned by the caller).
    fn list_all(&self, dir: Ino) -> Result<Vec<(Vec<u8>, FileKind)>> {
        let handle = self.core().open(&self.cred, dir, libc::O_RDONLY)?;
        let mut entries = Vec::new();
        self.core().readdir(&handle, 0, &mut |e| {
            if e.name != b"." && e.name != b".." {
                entries.push((e.name.to_vec(), e.kind));
            }
            false
        })?;
        Ok(entries)
    }

    /// Empty directory `top` (pinned by the caller), depth first without
    /// recursion: a tree may be deeper than any path can name (built by
    /// renames), and its depth must not be bounded by the caller's stack.
    /// An entry gone meanwhile (`ENOENT`) is skipped, as std's removal does.
    fn remove_tree(&self, top: Ino) -> Result<()> {
        /// A directory being emptied: pinned by a counted lookup (given
        /// back on drop) unless it is `top`, with its name in the one
        /// below it on the stack and the entries left to remove.
        struct Level<'a> {
            fs: &'a Fs,
            ino: Ino,
            counted: bool,
            name: Vec<u8>,
            entries: Vec<(Vec<u8>, FileKind)>,
        }
        impl Drop for Level<'_> {
            fn drop(&mut self) {
                if self.counted {
                    self.fs.forget(self.ino, 1);
                }
            }
        }
        fn gone_ok(r: Result<()>) -> Result<()> {
            match r {
                Err(Errno::ENOENT) => Ok(()),
                r => r,
            }
        }
        let core = self.core();
        let mut stack = vec![Level {
            fs: core,
            ino: top,
            counted: false,
            name: Vec::new(),
            entries: self.list_all(top)?,
        }];
        while let Some(level) = stack.last_mut() {
            match level.entries.pop() {
                Some((name, FileKind::Directory)) => {
                    let attr = match core.lookup_counted(&self.cred, level.ino, &name) {
                        Err(Errno::ENOENT) => continue,
                        r => r?,
                    };
                    let mut next = Level {
                        fs: core,
                        ino: attr.ino,
                        counted: true,
                        name,
                        entries: Vec::new(),
                    };
                    if attr.kind != FileKind::Directory {
                        // Replaced by a non-directory meanwhile.
                        gone_ok(core.unlink(&self.cred, level.ino, &next.name))?;
                        continue;
                    }
                    next.entries = match self.list_all(attr.ino) {
                        Err(Errno::ENOENT) => continue,
                        r => r?,
                    };
                    stack.push(next);
                }
                Some((name, _)) => gone_ok(core.unlink(&self.cred, level.ino, &name))?,
                None => {
                    let done = stack.pop().expect("a level");
                    if let Some(parent) = stack.last() {
                        gone_ok(core.rmdir(&self.cred, parent.ino, &done.name))?;
                    }
                }
            }
        }
        Ok(())
    }

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

    // ---- names -------------------------------------------------------

    /// `unlink(path)`.
    pub fn remove_file<P: AsRef<Path>>(&self, path: P) -> io::Result<()> {
        let mut w = self.walker();
        let p = w.parent(bytes(&path))?;
        let Some(name) = p.name() else {
            return Err(Errno::EISDIR.into());
        };
        if p.trailing_slash {
            let attr = self.core().lookup(&self.cred, p.dir.at(), name)?;
            return Err(if attr.kind == FileKind::Directory {
                Errno::EISDIR
            } else {
                Errno::ENOTDIR
            }
            .into());
        }
        Ok(self.core().unlink(&self.cred, p.dir.at(), name)?)
    }

    /// `rename(from, to)`.
    pub fn rename<P: AsRef<Path>, Q: AsRef<Path>>(&self, from: P, to: Q) -> io::Result<()> {
        self.rename_flags(from, to, 0)
    }

    /// `renameat2(from, to, flags)` with [`RENAME_NOREPLACE`],
    /// [`RENAME_EXCHANGE`] and [`RENAME_WHITEOUT`] (the source name is left
    /// naming a whiteout: a 0/0 character device of mode 0).
    ///
    /// ```
    /// use lanefs::{Filesystem, RENAME_EXCHANGE, RENAME_NOREPLACE};
    /// let fs = Filesystem::new_in_memory()?;
    /// fs.write("/old", b"1")?;
    /// fs.write("/new", b"2")?;
    /// let err = fs.rename_flags("/old", "/new", RENAME_NOREPLACE).unwrap_err();
    /// assert_eq!(err.raw_os_error(), Some(libc::EEXIST));
    /// fs.rename_flags("/old", "/new", RENAME_EXCHANGE)?;
    /// assert_eq!(fs.read("/new")?, b"1");
    /// assert_eq!(fs.read("/old")?, b"2");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn rename_flags<P: AsRef<Path>, Q: AsRef<Path>>(
        &self,
        from: P,
        to: Q,
        flags: u32,
    ) -> io::Result<()> {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT) != 0
            || (flags & RENAME_EXCHANGE != 0 && flags & (RENAME_NOREPLACE | RENAME_WHITEOUT) != 0)
        {
            return Err(Errno::EINVAL.into());
        }
        let old = self.walker().parent(bytes(&from))?;
        let new = self.walker().parent(bytes(&to))?;
        let Some(old_name) = old.name() else {
            return Err(Errno::EBUSY.into());
        };
        let Some(new_name) = new.name() else {
            return Err(if flags & RENAME_NOREPLACE != 0 {
                Errno::EEXIST
            } else {
                Errno::EBUSY
            }
            .into());
        };
        if new_name.len() > NAME_MAX {
            // Linux looks the old name up first (ENOENT wins).
            self.core().lookup(&self.cred, old.dir.at(), old_name)?;
            return Err(Errno::ENAMETOOLONG.into());
        }
        if old.trailing_slash || new.trailing_slash {
            // Linux's do_renameat2: the slash rules need both entries' types.
            let core = self.core();
            let src = core.lookup(&self.cred, old.dir.at(), old_name)?;
            let dst = core.lookup(&self.cred, new.dir.at(), new_name);
            if let Err(e) = dst {
                if e != Errno::ENOENT || flags & RENAME_EXCHANGE != 0 {
                    return Err(e.into());
                }
            }
            let dst = dst.ok();
            if flags & RENAME_NOREPLACE != 0 && dst.is_some() {
                return Err(Errno::EEXIST.into());
            }
            if flags & RENAME_EXCHANGE != 0 {
                if let Some(d) = dst {
                    if d.kind != FileKind::Directory && new.trailing_slash {
                        return Err(Errno::ENOTDIR.into());
                    }
                }
            }
            if src.kind != FileKind::Directory
                && (old.trailing_slash || (flags & RENAME_EXCHANGE == 0 && new.trailing_slash))
            {
                return Err(Errno::ENOTDIR.into());
            }
        }
        Ok(self.core().rename(
            &self.cred,
            old.dir.at(),
            old_name,
            new.dir.at(),
            new_name,
            flags,
        )?)
    }

    /// `link(original, link)`: a new name for `original` (not followed if
    /// it is a symlink, as Linux's `link`).
    ///
    /// ```
    /// let fs = lanefs::Filesystem::new_in_memory()?;
    /// fs.write("/a", b"shared")?;
    /// fs.hard_link("/a", "/b")?;
    /// fs.remove_file("/a")?;
    /// assert_eq!(fs.read("/b")?, b"shared");
    /// assert_eq!(fs.metadata("/b")?.nlink(), 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn hard_link<P: AsRef<Path>, Q: AsRef<Path>>(
        &self,
        original: P,
        link: Q,
    ) -> io::Result<()> {
        // The source as seen, not counted (as the parent): the core checks
        // the generation, and a taken name fails before it touches it.
        let src = self.walker().resolve_seen(bytes(&original), false)?;
        let mut w = self.walker();
        let p = w.parent(bytes(&link))?;
        let name = self.create_target(&p, false)?;
        self.core()
            .link_no_attr(&self.cred, src.at(), p.dir.at(), name)?;
        Ok(())
    }

    /// `linkat(fd, "", AT_FDCWD, link, AT_EMPTY_PATH)`: a new name `link`
    /// for the open `file` — also the first name of a file opened
    /// `O_TMPFILE` without `O_EXCL`; `ENOENT` for another file with no
    /// name left.
    pub fn link_file<Q: AsRef<Path>>(&self, file: &File, link: Q) -> io::Result<()> {
        let mut w = self.walker();
        let p = w.parent(bytes(&link))?;
        let name = self.create_target(&p, false)?;
        self.core()
            .link_no_attr(&self.cred, file.ino(), p.dir.at(), name)?;
        Ok(())
    }

    /// `symlink(target, link)`: `link` will point at `target` (empty:
    /// `ENOENT`; longer than 4095 bytes: `ENAMETOOLONG`).
    pub fn symlink<P: AsRef<Path>, Q: AsRef<Path>>(&self, target: P, link: Q) -> io::Result<()> {
        let target = bytes(&target);
        walk::check_path(target)?;
        let mut w = self.walker();
        let p = w.parent(bytes(&link))?;
        let name = self.create_target(&p, false)?;
        let attr = self.core().symlink(&self.cred, p.dir.at(), name, target)?;
        self.core().forget(attr.ino, 1);
        Ok(())
    }

    /// The target of symlink `path` (`EINVAL` if it is not a symlink).
    pub fn read_link<P: AsRef<Path>>(&self, path: P) -> io::Result<PathBuf> {
        let h = self.resolve(bytes(&path), false)?;
        if h.kind != FileKind::Symlink {
            return Err(Errno::EINVAL.into());
        }
        let target = self.core().readlink(h.ino)?;
        Ok(PathBuf::from(OsString::from_vec(target)))
    }

    /// The absolute path `path` names, with every symlink resolved and no
    /// `.` or `..` left, as [`std::fs::canonicalize`] (glibc's `realpath`):
    /// every component must exist (`ENOENT`), `..` applies to the
    /// component before it once that is resolved (so `link/..` is the
    /// parent of the link's target), a component followed by `/`, `/.` or
    /// `/..` must be a directory (`ENOTDIR`), and more than
    /// [`MAXSYMLINKS`] links is `ELOOP`. Paths are relative to the root.
    ///
    /// ```
    /// let fs = lanefs::Filesystem::new_in_memory()?;
    /// fs.create_dir_all("/srv/data/v2")?;
    /// fs.symlink("data/v2", "/srv/current")?;
    /// assert_eq!(fs.canonicalize("/srv/current/../v2/.")?, std::path::Path::new("/srv/data/v2"));
    /// let err = fs.canonicalize("/srv/missing/..").unwrap_err();
    /// assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn canonicalize<P: AsRef<Path>>(&self, path: P) -> io::Result<PathBuf> {
        let path = bytes(&path);
        walk::check_path(path)?;
        // `resolved`: the answer so far, "" for the root, else "/a/b";
        // `rest[at..]`: what is left to resolve.
        let mut resolved: Vec<u8> = Vec::new();
        let mut rest = path.to_vec();
        let mut at = 0;
        let mut links = 0;
        loop {
            while rest.get(at) == Some(&b'/') {
                at += 1;
            }
            if at == rest.len() {
                break;
            }
            let end = rest[at..]
                .iter()
                .position(|&b| b == b'/')
                .map_or(rest.len(), |i| at + i);
            match &rest[at..end] {
                b"." => {}
                b".." => {
                    let cut = resolved.iter().rposition(|&b| b == b'/').unwrap_or(0);
                    resolved.truncate(cut);
                }
                name => {
                    let mut candidate = Vec::with_capacity(resolved.len() + 1 + name.len());
                    candidate.extend_from_slice(&resolved);
                    candidate.push(b'/');
                    candidate.extend_from_slice(name);
                    let candidate_path = Path::new(std::ffi::OsStr::from_bytes(&candidate));
                    let m = self.symlink_metadata(candidate_path)?;
                    if m.is_symlink() {
                        links += 1;
                        if links > MAXSYMLINKS {
                            return Err(Errno::ELOOP.into());
                        }
                        let target = self.read_link(candidate_path)?.into_os_string();
                        let mut next = target.into_vec();
                        if next.is_empty() {
                            return Err(Errno::ENOENT.into());
                        }
                        if next[0] == b'/' {
                            resolved.clear();
                        }
                        next.extend_from_slice(&rest[end..]);
                        rest = next;
                        at = 0;
                        continue;
                    }
                    if !m.is_dir() && suffix_needs_dir(&rest[end..]) {
                        return Err(Errno::ENOTDIR.into());
                    }
                    resolved = candidate;
                }
            }
            at = end;
        }
        if resolved.is_empty() {
            resolved.push(b'/');
        }
        Ok(PathBuf::from(OsString::from_vec(resolved)))
    }

    /// Copy the content of regular file `from` (symlinks followed) to `to`,
    /// created or truncated, and give `to` the permission bits of `from`
    /// (setuid and setgid included, when `to` is a regular file), as
    /// [`std::fs::copy`]; the number of bytes copied. A source that is not
    /// a regular file is an [`io::ErrorKind::InvalidInput`] error. Runs of
    /// zeros are left as holes.
    ///
    /// ```
    /// let fs = lanefs::Filesystem::new_in_memory()?;
    /// fs.write("/tool", b"#!/bin/sh\n")?;
    /// fs.set_permissions("/tool", 0o4750)?;
    /// assert_eq!(fs.copy("/tool", "/tool.bak")?, 10);
    /// assert_eq!(fs.read("/tool.bak")?, b"#!/bin/sh\n");
    /// assert_eq!(fs.metadata("/tool.bak")?.permissions(), 0o4750);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn copy<P: AsRef<Path>, Q: AsRef<Path>>(&self, from: P, to: Q) -> io::Result<u64> {
        const CHUNK: usize = 128 << 10;
        let reader = self.open(from)?;
        let meta = reader.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the source path is neither a regular file nor a symlink to a regular file",
            ));
        }
        let perm = meta.permissions();
        let mut writer = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(perm)
            .open(self, to)?;
        let regular = writer.metadata()?.is_file();
        if regular {
            // The file may have existed: its bits are set all the same.
            writer.set_permissions(perm)?;
        }
        let mut buf = vec![0u8; CHUNK.min(meta.len().max(1) as usize)];
        let mut copied = 0u64;
        loop {
            let n = reader.read_at(&mut buf, copied)?;
            if n == 0 {
                break;
            }
            let data = &buf[..n];
            if !regular {
                std::io::Write::write_all(&mut writer, data)?;
            } else if data.iter().any(|&b| b != 0) {
                writer.write_all_at(data, copied)?;
            }
            copied += n as u64;
        }
        if regular && writer.metadata()?.len() < copied {
            // Zeros at the end: a hole up to the size.
            writer.set_len(copied)?;
        }
        Ok(copied)
    }

    /// `mknod(path, mode, rdev)`: `mode` carries the type (regular when
    /// zero, fifo, socket, character or block device; a directory is
    /// `EPERM`, anything else `EINVAL`) and permission bits, less the umask.
    /// `rdev` is a `libc::makedev` number; one the kernel's 32-bit device
    /// number cannot hold (a major above 4095 or a minor above 2^20 - 1)
    /// is `EINVAL` for every type, before anything else (glibc's
    /// `mknodat`).
    pub fn mknod<P: AsRef<Path>>(&self, path: P, mode: u32, rdev: u64) -> io::Result<()> {
        if rdev > u64::from(u32::MAX) {
            return Err(Errno::EINVAL.into());
        }
        match mode & libc::S_IFMT {
            0 | libc::S_IFREG | libc::S_IFCHR | libc::S_IFBLK | libc::S_IFIFO | libc::S_IFSOCK => {}
            libc::S_IFDIR => return Err(Errno::EPERM.into()),
            _ => return Err(Errno::EINVAL.into()),
        }
        let mut w = self.walker();
        let p = w.parent(bytes(&path))?;
        let name = self.create_target(&p, false)?;
        let attr = self
            .core()
            .mknod(&self.cred, p.dir.at(), name, mode, self.umask, rdev)?;
        self.core().forget(attr.ino, 1);
        Ok(())
    }

    // ---- attributes --------------------------------------------------

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

    fn setattr_path(&self, path: &[u8], follow: bool, changes: &SetAttr) -> Result<()> {
        let h = self.resolve(path, follow)?;
        self.core()
            .setattr_no_attr(&self.cred, h.ino, changes, None)
    }

    /// `chmod(path, mode)` (follows symlinks).
    pub fn set_permissions<P: AsRef<Path>>(&self, path: P, mode: u32) -> io::Result<()> {
        let changes = SetAttr {
            mode: Some(mode & 0o7777),
            ..SetAttr::default()
        };
        self.setattr_path(bytes(&path), true, &changes)?;
        Ok(())
    }

    /// `chown(path, uid, gid)` (follows symlinks); `None` leaves an id alone,
    /// as does `Some(u32::MAX)` (chown's `-1`).
    pub fn chown<P: AsRef<Path>>(
        &self,
        path: P,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> io::Result<()> {
        self.chown_inner(bytes(&path), true, uid, gid)
    }

    /// `lchown(path, uid, gid)`: a final symlink itself is changed.
    pub fn lchown<P: AsRef<Path>>(
        &self,
        path: P,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> io::Result<()> {
        self.chown_inner(bytes(&path), false, uid, gid)
    }

    fn chown_inner(
        &self,
        path: &[u8],
        follow: bool,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> io::Result<()> {
        // `(uid_t)-1` is chown's "leave it" (`chown_common`), not an owner.
        let keep = |id: Option<u32>| id.filter(|&i| i != u32::MAX);
        let (uid, gid) = (keep(uid), keep(gid));
        let h = self.resolve(path, follow)?;
        chown_common(self.core(), &self.cred, h.ino, h.kind, None, uid, gid)
    }

    /// `utimensat(path, [atime, mtime], 0)`: `None` is `UTIME_OMIT`,
    /// [`TimeSet::Now`] is `UTIME_NOW`. Both omitted: nothing happens and
    /// the path is not even looked at, as on Linux.
    ///
    /// ```
    /// use lanefs::{Filesystem, TimeSet, Timespec};
    /// let fs = Filesystem::new_in_memory()?;
    /// fs.write("/f", b"")?;
    /// let t = Timespec { sec: 1_000_000_000, nsec: 5 };
    /// fs.set_times("/f", None, Some(TimeSet::At(t)))?;
    /// assert_eq!(fs.metadata("/f")?.mtime(), t);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_times<P: AsRef<Path>>(
        &self,
        path: P,
        atime: Option<TimeSet>,
        mtime: Option<TimeSet>,
    ) -> io::Result<()> {
        self.set_times_inner(bytes(&path), true, atime, mtime)
    }

    /// As [`set_times`](Self::set_times) with `AT_SYMLINK_NOFOLLOW`.
    pub fn set_symlink_times<P: AsRef<Path>>(
        &self,
        path: P,
        atime: Option<TimeSet>,
        mtime: Option<TimeSet>,
    ) -> io::Result<()> {
        self.set_times_inner(bytes(&path), false, atime, mtime)
    }

    fn set_times_inner(
        &self,
        path: &[u8],
        follow: bool,
        atime: Option<TimeSet>,
        mtime: Option<TimeSet>,
    ) -> io::Result<()> {
        if atime.is_none() && mtime.is_none() {
            return Ok(());
        }
        let h = self.resolve(path, follow)?;
        let bad =
            |t: &Option<TimeSet>| matches!(t, Some(TimeSet::At(ts)) if ts.nsec >= 1_000_000_000);
        if bad(&atime) || bad(&mtime) {
            return Err(Errno::EINVAL.into());
        }
        let changes = SetAttr {
            atime,
            mtime,
            ..SetAttr::default()
        };
        self.core()
            .setattr_no_attr(&self.cred, h.ino, &changes, None)?;
        Ok(())
    }

    /// `truncate(path, size)`: `EINVAL` for a size past `i64::MAX` or a
    /// file that is neither regular nor a directory, `EISDIR` for a
    /// directory.
    pub fn truncate<P: AsRef<Path>>(&self, path: P, size: u64) -> io::Result<()> {
        if size > i64::MAX as u64 {
            return Err(Errno::EINVAL.into());
        }
        let h = self.resolve(bytes(&path), true)?;
        match h.kind {
            FileKind::Regular => {}
            FileKind::Directory => return Err(Errno::EISDIR.into()),
            _ => return Err(Errno::EINVAL.into()),
        }
        let changes = SetAttr {
            size: Some(size),
            ..SetAttr::default()
        };
        self.core()
            .setattr_no_attr(&self.cred, h.ino, &changes, None)?;
        Ok(())
    }

    /// `faccessat(path, mask, AT_EACCESS)` with this view's credential:
    /// `mask` of [`MAY_READ`], [`MAY_WRITE`], [`MAY_EXEC`] (0: exists).
    pub fn access<P: AsRef<Path>>(&self, path: P, mask: u32) -> io::Result<()> {
        if mask & !(MAY_READ | MAY_WRITE | MAY_EXEC) != 0 {
            return Err(Errno::EINVAL.into());
        }
        let h = self.resolve(bytes(&path), true)?;
        Ok(self.core().access(&self.cred, h.ino, mask)?)
    }

    /// File-system totals and free space (`statvfs`).
    pub fn statfs(&self) -> io::Result<StatFs> {
        Ok(self.core().statfs()?)
    }

    /// Write everything back to the store and sync it (`syncfs`).
    pub fn sync(&self) -> io::Result<()> {
        Ok(self.core().sync()?)
    }

    // ---- extended attributes -----------------------------------------

    fn check_xattr_name(name: &[u8]) -> Result<()> {
        if name.is_empty() || name.len() > XATTR_NAME_MAX || name.contains(&0) {
            return Err(Errno::ERANGE);
        }
        Ok(())
    }

    /// `getxattr(path, name)` (follows symlinks): the whole value.
    pub fn get_xattr<P: AsRef<Path>>(&self, path: P, name: &[u8]) -> io::Result<Vec<u8>> {
        Self::check_xattr_name(name)?;
        let h = self.resolve(bytes(&path), true)?;
        Ok(self.core().getxattr(&self.cred, h.ino, name)?)
    }

    /// `setxattr(path, name, value, flags)` (follows symlinks) with
    /// [`XATTR_CREATE`] / [`XATTR_REPLACE`].
    pub fn set_xattr<P: AsRef<Path>>(
        &self,
        path: P,
        name: &[u8],
        value: &[u8],
        flags: u32,
    ) -> io::Result<()> {
        if flags & !(XATTR_CREATE | XATTR_REPLACE) != 0 {
            return Err(Errno::EINVAL.into());
        }
        Self::check_xattr_name(name)?;
        if value.len() > XATTR_SIZE_MAX {
            return Err(Errno::E2BIG.into());
        }
        let h = self.resolve(bytes(&path), true)?;
        Ok(self
            .core()
            .setxattr(&self.cred, h.ino, name, value, flags)?)
    }

    /// Names of the extended attributes of `path` (follows symlinks).
    pub fn list_xattr<P: AsRef<Path>>(&self, path: P) -> io::Result<Vec<Vec<u8>>> {
        let h = self.resolve(bytes(&path), true)?;
        let raw = self.core().listxattr(&self.cred, h.ino)?;
        Ok(raw
            .split(|&b| b == 0)
            .filter(|n| !n.is_empty())
            .map(|n| n.to_vec())
            .collect())
    }

    /// `removexattr(path, name)` (follows symlinks).
    pub fn remove_xattr<P: AsRef<Path>>(&self, path: P, name: &[u8]) -> io::Result<()> {
        Self::check_xattr_name(name)?;
        let h = self.resolve(bytes(&path), true)?;
        Ok(self.core().removexattr(&self.cred, h.ino, name)?)
    }

    // ---- files ---------------------------------------------------------

    /// Open `path` read-only.
    pub fn open<P: AsRef<Path>>(&self, path: P) -> io::Result<File> {
        self.open_flags(path, libc::O_RDONLY, 0)
    }

    /// Create or truncate `path` and open it write-only (mode `0o666` less
    /// the umask), as [`std::fs::File::create`].
    pub fn create<P: AsRef<Path>>(&self, path: P) -> io::Result<File> {
        self.open_flags(path, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, 0o666)
    }

    /// Create `path`, which must not exist (not even as a dangling
    /// symlink: `EEXIST`), and open it for reading and writing, as
    /// [`std::fs::File::create_new`].
    pub fn create_new<P: AsRef<Path>>(&self, path: P) -> io::Result<File> {
        self.open_flags(path, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, 0o666)
    }

    /// Open with [`OpenOptions`].
    pub fn open_with<P: AsRef<Path>>(&self, path: P, options: &OpenOptions) -> io::Result<File> {
        options.open(self, path)
    }

    /// `open(path, flags, mode)` with raw flags: access mode, `O_CREAT`,
    /// `O_EXCL`, `O_TRUNC`, `O_APPEND`, `O_NOFOLLOW`, `O_DIRECTORY`,
    /// `O_NOATIME`, `O_TMPFILE` (an unnamed file in directory `path`; see
    /// [`link_file`](Self::link_file)), `O_PATH` (a handle that only names
    /// the file: see [`open_path`](Self::open_path)); other flags are
    /// ignored.
    pub fn open_flags<P: AsRef<Path>>(&self, path: P, flags: i32, mode: u32) -> io::Result<File> {
        let path = bytes(&path);
        if flags & libc::O_PATH != 0 {
            return Ok(self.open_path(path, flags)?);
        }
        if flags & libc::O_CREAT != 0 && flags & libc::O_DIRECTORY != 0 {
            return Err(Errno::EINVAL.into());
        }
        if flags & libc::O_TMPFILE == libc::O_TMPFILE {
            return Ok(self.open_tmpfile(path, flags, mode)?);
        }
        if flags & libc::O_CREAT != 0 {
            return Ok(self.open_create(path, flags, mode)?);
        }
        let h = self
            .walker()
            .resolve_seen(path, flags & libc::O_NOFOLLOW == 0)?;
        let write = flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
        // Linux's do_open: O_DIRECTORY first, then may_open's type checks.
        match h.kind {
            FileKind::Directory if write => return Err(Errno::EISDIR.into()),
            FileKind::Directory => {}
            _ if flags & libc::O_DIRECTORY != 0 => return Err(Errno::ENOTDIR.into()),
            FileKind::Symlink => return Err(Errno::ELOOP.into()),
            _ => {}
        }
        let handle = self
            .core()
            .open_checked(&self.cred, h.at(), flags & CORE_OPEN_FLAGS)?;
        Ok(File::new(self, handle, h.kind, flags))
    }

    /// `open(path, O_PATH | …)`: as `open(2)` (`build_open_how`), every
    /// flag but `O_DIRECTORY` and `O_NOFOLLOW` is ignored — no create, no
    /// truncate, no access mode. Any kind opens (a symlink itself with
    /// `O_NOFOLLOW`, a device node, a directory); only search permission
    /// on the path is needed. The [`File`] names the file: `metadata` and
    /// [`link_file`](Self::link_file) work, reads, writes, `set_len`,
    /// `set_permissions`, syncs, `fallocate` and seeks are `EBADF`.
    fn open_path(&self, path: &[u8], flags: i32) -> Result<File> {
        let h = self
            .walker()
            .resolve_seen(path, flags & libc::O_NOFOLLOW == 0)?;
        if flags & libc::O_DIRECTORY != 0 && h.kind != FileKind::Directory {
            return Err(Errno::ENOTDIR);
        }
        let handle = self.core().open_path(&self.cred, h.at())?;
        Ok(File::new(self, handle, h.kind, libc::O_PATH))
    }

    /// `open(dir, O_TMPFILE | …)`: an unnamed regular file in directory
    /// `dir`, freed at its last close unless [`link_file`](Self::link_file)
    /// gives it a name first (not with `O_EXCL`). Write access is required
    /// (`EINVAL`), as are write and search permission on `dir`.
    fn open_tmpfile(&self, path: &[u8], flags: i32, mode: u32) -> Result<File> {
        let h = self
            .walker()
            .resolve_seen(path, flags & libc::O_NOFOLLOW == 0)?;
        if h.kind != FileKind::Directory {
            return Err(Errno::ENOTDIR);
        }
        let keep = CORE_OPEN_FLAGS | libc::O_TMPFILE | libc::O_EXCL;
        let (attr, handle) = self.core().tmpfile(
            &self.cred,
            h.at(),
            flags & keep,
            mode & 0o7777,
            self.umask,
            false,
        )?;
        Ok(File::new(self, handle, attr.kind, flags & !libc::O_TMPFILE))
    }

    fn open_create(&self, path: &[u8], flags: i32, mode: u32) -> Result<File> {
        let excl = flags & libc::O_EXCL != 0;
        let mut w = self.walker();
        let mut p = w.parent(path)?;
        loop {
            let Some(name) = p.name().map(<[u8]>::to_vec) else {
                return Err(if excl { Errno::EEXIST } else { Errno::EISDIR });
            };
            let name = name.as_slice();
            if p.trailing_slash {
                return Err(Errno::EISDIR);
            }
            if !excl {
                if let Ok(attr) = self.core().lookup(&self.cred, p.dir.at(), name) {
                    match attr.kind {
                        FileKind::Symlink if flags & libc::O_NOFOLLOW == 0 => {
                            p = w.follow_last(p, attr.ino)?;
                            continue;
                        }
                        FileKind::Directory => return Err(Errno::EISDIR),
                        // protected_regular / protected_fifos: not
                        // implemented (docs/SEMANTICS.md).
                        FileKind::Regular | FileKind::Fifo => {}
                        _ => {
                            self.may_create_in_sticky(p.dir.at(), &attr)?;
                            if attr.kind == FileKind::Symlink {
                                return Err(Errno::ELOOP);
                            }
                        }
                    }
                }
            }
            let core_flags = flags & (CORE_OPEN_FLAGS | libc::O_CREAT | libc::O_EXCL);
            let (attr, handle, _created) = self.core().open_at(
                &self.cred,
                p.dir.at(),
                name,
                core_flags,
                mode & 0o7777,
                self.umask,
                false,
            )?;
            return Ok(File::new(self, handle, attr.kind, flags));
        }
    }

    /// Linux's `may_create_in_sticky` for an `O_CREAT` open that found an
    /// existing symlink (with `O_NOFOLLOW`), socket or device node: in a
    /// sticky world-writable directory, only the node's owner or the
    /// directory's owner may open it (root included: no capability
    /// overrides this rule).
    fn may_create_in_sticky(&self, dir: DirAt, node: &Attr) -> Result<()> {
        let d = self.core().getattr(dir.ino)?;
        if !dir.matches(d.generation) {
            return Err(Errno::ENOENT);
        }
        let dir_mode = d.perm as u32;
        if dir_mode & libc::S_ISVTX == 0 || node.uid == d.uid || node.uid == self.cred.uid {
            return Ok(());
        }
        if dir_mode & 0o002 != 0 {
            return Err(Errno::EACCES);
        }
        Ok(())
    }

    /// The whole content of file `path`.
    pub fn read<P: AsRef<Path>>(&self, path: P) -> io::Result<Vec<u8>> {
        use std::io::Read;
        let mut f = self.open(path)?;
        let mut out = Vec::new();
        f.read_to_end(&mut out)?;
        Ok(out)
    }

    /// The whole content of file `path` as UTF-8 (as
    /// [`std::fs::read_to_string`]: an [`io::ErrorKind::InvalidData`] error
    /// if it is not).
    pub fn read_to_string<P: AsRef<Path>>(&self, path: P) -> io::Result<String> {
        String::from_utf8(self.read(path)?).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "stream did not contain valid UTF-8",
            )
        })
    }

    /// Create or truncate file `path` and write `data` to it.
    pub fn write<P: AsRef<Path>, D: AsRef<[u8]>>(&self, path: P, data: D) -> io::Result<()> {
        use std::io::Write;
        let mut f = self.create(path)?;
        f.write_all(data.as_ref())
    }
}

/// The README's Rust examples, compiled and run as doctests so that they
/// stay true.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
