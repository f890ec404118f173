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
//! listing alone. The modules that hold the calls (`metadata`, `names`,
//! `tree`, `attrs`, `open`) take no lock or atomic of their own.
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

mod attrs;
mod file;
mod handle;
mod metadata;
mod names;
mod open;
mod tree;
mod walk;

pub use file::{File, OpenOptions};
pub use lanefs_core::*;
pub use lanefs_image::{ImageConfig, ImageStore, RecoveryReport};
pub use metadata::{DirEntryOwned, Metadata, ReadDir};
pub use walk::{MAXSYMLINKS, PATH_BYTES_MAX};

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use walk::{Held, Parent, Walker};

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
}

/// The README's Rust examples, compiled and run as doctests so that they
/// stay true.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
