//! The transport-neutral request handler: one method per FUSE request that
//! maps the decoded arguments to engine ([`Fs`]) calls and returns a plain
//! reply value or an [`Errno`]. A transport (`transport_dev` over
//! `/dev/fuse`, `transport_uring` over FUSE-over-io_uring) only decodes,
//! calls [`guarded`] around one of these methods, and encodes the result.
//!
//! # Locking rules
//!
//! The handler itself holds no lock across an engine call. Its shared state:
//!
//! * `handles` ([`HandleTable`]): per-shard `RwLock`s, leaf locks (see
//!   `handles.rs`); an `Arc<Handle>` is cloned out and the shard lock is
//!   dropped before the engine is called.
//! * `config`: immutable after construction.
//! * `invalidate`, `writeback` (`OnceLock`s): set once by the
//!   transport before requests are served, read-only afterwards.
//! * `listings` ([`ListingGuard`], with `cache_dir` only): per-shard
//!   `Mutex`es, leaf locks held only to record a listing reply or a
//!   change of a directory (see `dircache.rs`), never across an engine
//!   call or a notification.
//! * Lookup counts live in the engine (`Fs::lookup_counted`/`forget`); the
//!   handler's only duty is to take exactly one reference per entry it hands
//!   to the kernel (LOOKUP, CREATE, MKNOD, MKDIR, SYMLINK, LINK, and every
//!   READDIRPLUS entry except `.` and `..`) and to give back what FORGET and
//!   BATCH_FORGET return, plus any reference it took for an entry the
//!   transport could not deliver (a READDIRPLUS buffer that filled up).
//!
//! Engine locks (inode, directory, page cache) are taken inside `Fs` calls
//! only, in the engine's documented order; see `docs/ARCHITECTURE.md`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use lanefs_core::{Attr, DirEntry, Errno, Fs, Ino, Result, StatFs, NAME_MAX};

use crate::cred::{cred_for, Caller};
use crate::dircache::ListingGuard;
use crate::handles::{Handle, HandleTable};

#[path = "handler_ioctl.rs"]
mod ioctl;
#[path = "handler_setattr.rs"]
mod setattr;

/// Environment variable that names a file name whose LOOKUP panics inside
/// the handler (fault injection for the panic-safety test). Unset means no
/// fault is ever injected.
pub const FAULT_PANIC_NAME_ENV: &str = "LANEFS_FAULT_PANIC_NAME";

const S_ISUID: u16 = 0o4000;
const S_ISGID: u16 = 0o2000;
const S_IXGRP: u16 = 0o010;
use lanefs_core::{
    XATTR_NAME_CAPS as CAPS_XATTR, XATTR_NAME_POSIX_ACL_ACCESS, XATTR_NAME_POSIX_ACL_DEFAULT,
};

fn is_acl_name(name: &[u8]) -> bool {
    name == XATTR_NAME_POSIX_ACL_ACCESS || name == XATTR_NAME_POSIX_ACL_DEFAULT
}

/// Size of a `fuse_direntplus` header: `fuse_entry_out` (128) + `fuse_dirent` (24).
const DIRENTPLUS_HEADER_BYTES: usize = 152;
/// Size of a `fuse_dirent` header.
const DIRENT_HEADER_BYTES: usize = 24;
/// Largest READ the handler serves in one call (the kernel never asks more
/// than `max_pages` * 4 KiB; this bounds a bogus request).
pub const READ_BYTES_MAX: u32 = 16 << 20;

/// How the kernel may cache what the handler returns.
#[derive(Clone, Debug)]
pub struct CacheConfig {
    /// How long the kernel may trust a name -> inode mapping.
    pub entry_ttl: Duration,
    /// How long the kernel may trust attributes.
    pub attr_ttl: Duration,
    /// How long the kernel may remember that a name does not exist
    /// (0 disables negative entries).
    pub negative_ttl: Duration,
    /// Keep a file's page cache across opens (`FOPEN_KEEP_CACHE`).
    pub keep_cache: bool,
    /// Let the kernel cache directory listings across opens
    /// (`FOPEN_CACHE_DIR | FOPEN_KEEP_CACHE` on OPENDIR; on by default,
    /// `-o nocache_dir` turns it off). Correct while every change of a
    /// directory goes through this kernel, which marks its cached listing
    /// stale itself when it creates, removes or renames an entry; the
    /// handler covers what it does not: a moved directory's `..`
    /// (`Handler::dir_moved`), a listing cached across a change
    /// ([`crate::dircache`]) and a change whose reply was an error
    /// (`Handler::dir_changes`).
    pub cache_dir: bool,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            entry_ttl: Duration::from_secs(1),
            attr_ttl: Duration::from_secs(1),
            negative_ttl: Duration::from_secs(1),
            keep_cache: true,
            cache_dir: true,
        }
    }
}

/// Configuration of a [`Handler`].
#[derive(Clone, Debug, Default)]
pub struct HandlerConfig {
    pub cache: CacheConfig,
    /// The kernel checks permissions (`-o default_permissions`); the
    /// engine still sees the caller's identity for ownership and for the
    /// setgid rules.
    pub default_permissions: bool,
    /// Fault injection: LOOKUP of this name panics. Only
    /// [`HandlerConfig::with_env_faults`] sets it.
    pub fault_panic_name: Option<Vec<u8>>,
    /// Fault injection: LOOKUP of this name kills the transport worker
    /// that serves it (outside the request guard). Only
    /// [`HandlerConfig::with_env_faults`] sets it
    /// ([`crate::workers::FAULT_WORKER_PANIC_NAME_ENV`]).
    pub fault_worker_panic_name: Option<Vec<u8>>,
    /// `sync` mount: every WRITE and SETATTR is made durable before it is
    /// answered (and implies `sync_dir_changes`).
    pub sync_writes: bool,
    /// `dirsync` (or `sync`) mount: every directory change (create,
    /// mknod, mkdir, symlink, link, unlink, rmdir, rename) is made durable
    /// before it is answered.
    pub sync_dir_changes: bool,
}

impl HandlerConfig {
    /// Read the fault-injection hooks from the environment
    /// ([`FAULT_PANIC_NAME_ENV`], `LANEFS_FAULT_WORKER_PANIC_NAME`).
    pub fn with_env_faults(mut self) -> Self {
        use std::os::unix::ffi::OsStrExt;
        let read = |var: &str| {
            std::env::var_os(var)
                .filter(|v| !v.is_empty())
                .map(|v| v.as_bytes().to_vec())
        };
        self.fault_panic_name = read(FAULT_PANIC_NAME_ENV);
        self.fault_worker_panic_name = read(crate::workers::FAULT_WORKER_PANIC_NAME_ENV);
        self
    }
}

/// Result of OPEN, OPENDIR and the open half of CREATE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opened {
    pub fh: u64,
    /// Tell the kernel to keep the page cache of this file.
    pub keep_cache: bool,
}

/// One READDIRPLUS entry for the transport to encode.
pub struct PlusEntry<'a> {
    pub name: &'a [u8],
    pub attr: Attr,
    /// Offset of the next entry (the kernel passes it back to continue).
    pub next_offset: u64,
    /// Whether a lookup reference was taken for it (all but `.` and `..`).
    pub counted: bool,
}

/// Run one handler call, turning a panic into `EIO` (logged with the
/// operation name) so that one bad request can never take the daemon down.
pub fn guarded<T>(op: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".into());
            tracing::error!(op, panic = %msg, "request handler panicked; answered EIO");
            Err(Errno::EIO)
        }
    }
}

/// Open flags of the I/O handle under the writeback cache: write-only
/// becomes read-write, and `O_APPEND` (with the one-shot `O_CREAT`,
/// `O_EXCL`, `O_TRUNC`, already applied by the first open) goes.
pub fn writeback_io_flags(flags: i32) -> i32 {
    let mut f = flags & !(libc::O_APPEND | libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
    if f & libc::O_ACCMODE == libc::O_WRONLY {
        f = (f & !libc::O_ACCMODE) | libc::O_RDWR;
    }
    f
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(())
}

/// What of an inode the kernel must forget (see [`Invalidator`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalidate {
    /// Its cached attributes (`inval_inode` with offset -1).
    Attr,
    /// Its attributes and its cached pages, which for a directory are its
    /// cached listing (`inval_inode` with offset 0, length 0: all).
    AttrAndPages,
    /// Its attributes and its first cached page (`inval_inode` with
    /// offset 0, length 1): for a directory, the start of its cached
    /// listing, without which the kernel throws the listing away at its
    /// next read ([`crate::dircache`]).
    AttrAndFirstPage,
}

/// How the handler tells the kernel to drop what it caches of an inode
/// (set by the transport once its session exists).
pub type Invalidator = Box<dyn Fn(Ino, Invalidate) + Send + Sync>;

/// FUSE request handler over one engine instance.
pub struct Handler {
    fs: Fs,
    handles: HandleTable,
    config: HandlerConfig,
    /// Set once (`OnceLock`) by the transport before requests are served;
    /// read-only afterwards.
    invalidate: std::sync::OnceLock<Invalidator>,
    /// Whether the kernel's writeback cache is on (negotiated at INIT; set
    /// once by the transport before requests are served).
    writeback: std::sync::OnceLock<bool>,
    /// With `cache_dir`: which directories' cached listings may hold
    /// entries from before a change ([`crate::dircache`]).
    listings: Option<ListingGuard>,
    /// Idle upkeep of the workers ([`crate::upkeep`]); off until enabled.
    upkeep: crate::upkeep::Upkeep,
}

impl Handler {
    /// A handler serving `fs`. While mounted it must be the only thing
    /// that changes `fs`: the kernel keeps names, attributes, pages and
    /// directory listings (`cache_dir`) on the understanding that every
    /// change arrives through it (docs/FUSE.md, kernel cache). `lanefs
    /// mount` holds to that (it calls only `sync` from outside); a program
    /// that changed a mounted `Fs` through another clone would have to
    /// send the invalidations itself.
    pub fn new(fs: Fs, config: HandlerConfig) -> Handler {
        Handler {
            fs,
            handles: HandleTable::default(),
            listings: config.cache.cache_dir.then(ListingGuard::default),
            config,
            invalidate: std::sync::OnceLock::new(),
            writeback: std::sync::OnceLock::new(),
            upkeep: crate::upkeep::Upkeep::default(),
        }
    }

    /// The workers' idle upkeep ([`crate::upkeep`]): the daemon enables it
    /// and ticks it; the transports register their workers.
    pub fn upkeep(&self) -> &crate::upkeep::Upkeep {
        &self.upkeep
    }

    /// Record whether INIT turned the kernel's writeback cache on (first
    /// call wins; unset means off).
    pub fn set_writeback(&self, on: bool) {
        let _ = self.writeback.set(on);
    }

    /// Whether the kernel's writeback cache is on for this session.
    pub fn writeback(&self) -> bool {
        self.writeback.get().copied().unwrap_or(false)
    }

    /// The engine handle that OPEN/CREATE keep for I/O: one without
    /// `O_APPEND`, in every mode. The kernel picks the offset of every
    /// WRITE itself: for an `O_APPEND` descriptor the size it holds, under
    /// the inode lock (`generic_write_checks`); it tracks whether the
    /// descriptor appends *now* (`fcntl(F_SETFL)` turns `O_APPEND` on and
    /// off after the open); and it writes pages a shared mapping dirtied
    /// back at their own offsets through any writable handle of the file.
    /// Re-applying `O_APPEND` here moved such data to the end of the file
    /// (until 2026-11: a store through `mmap` of an `O_APPEND` descriptor,
    /// or a write after `O_APPEND` was cleared).
    ///
    /// With the writeback cache (docs/FUSE.md, "Writeback cache") it can
    /// also serve READs when the file was opened write-only (the kernel
    /// reads through any open handle to fill the rest of a partially
    /// written page). Read permission is not checked for it: the kernel
    /// checked the opener's access at `open(2)`, and data read this way
    /// only fills the kernel's page cache, which the VFS serves only to
    /// descriptors opened for reading (a write-only descriptor can neither
    /// read nor map it readable).
    fn io_file(&self, file: lanefs_core::OpenFile) -> Result<lanefs_core::OpenFile> {
        let flags = if self.writeback() {
            writeback_io_flags(file.flags())
        } else {
            file.flags() & !libc::O_APPEND
        };
        if flags == file.flags() {
            return Ok(file);
        }
        file.reopen_unchecked(flags)
    }

    /// Install the transport's invalidation (first call wins).
    pub fn set_invalidator(&self, f: Invalidator) {
        let _ = self.invalidate.set(f);
    }

    /// The engine changed attributes the kernel cannot know about (the
    /// setuid/setgid kill of a write or an `O_TRUNC` open by a non-root
    /// caller, which the engine applies itself under
    /// `FUSE_HANDLE_KILLPRIV_V2`): make the kernel ask again.
    fn attrs_changed(&self, ino: Ino) {
        if let Some(f) = self.invalidate.get() {
            f(ino, Invalidate::Attr);
        }
    }

    /// A directory was moved to another parent: its `..` changed, which
    /// the kernel does not know (it drops the cached listings of the two
    /// parents only, `fuse_dir_changed`), so a listing it cached
    /// (`cache_dir`) would still show the old parent's inode. Dropping
    /// the directory's pages drops that listing. Safe inside the RENAME
    /// handler: the kernel holds no lock of those pages while it waits
    /// for a reply (a listing locks a cache page only to copy entries in
    /// after its READDIR was answered).
    fn dir_moved(&self, parent: Ino, name: &[u8]) {
        if !self.config.cache.cache_dir {
            return;
        }
        let Some(f) = self.invalidate.get() else {
            return;
        };
        match self.fs.lookup(&lanefs_core::Cred::root(), parent, name) {
            Ok(a) if a.kind == lanefs_core::FileKind::Directory => {
                f(a.ino, Invalidate::AttrAndPages)
            }
            _ => {}
        }
    }

    /// A READDIR or READDIRPLUS reply for `dir` with `entries` entries is
    /// about to be sent. An empty one can complete the kernel's cached
    /// listing: if the directory changed after an earlier reply could
    /// have put entries in that cache, drop its first page first
    /// ([`crate::dircache`] says why that is enough).
    fn listing_reply(&self, dir: Ino, entries: usize) {
        let Some(g) = &self.listings else {
            return;
        };
        if entries > 0 {
            g.filled(dir);
            return;
        }
        if let Some(mark) = g.end_needs_drop(dir) {
            if let Some(f) = self.invalidate.get() {
                f(dir, Invalidate::AttrAndFirstPage);
            }
            g.covered(dir, mark);
        }
    }

    /// The engine's result `r` of a change of the entries of `dirs`,
    /// made durable as the mount asks ([`Self::durable`]). A change is
    /// recorded for the cached listings (`cache_dir`) before its reply
    /// goes out; one that the engine made but whose reply is an error
    /// (the kernel then does not mark the directory changed) drops the
    /// first page of their cached listings at once.
    fn dir_changes<T>(
        &self,
        dirs: &[Ino],
        r: Result<T>,
        counted: impl Fn(&T) -> Option<Ino>,
    ) -> Result<T> {
        let made = r.is_ok();
        if let (true, Some(g)) = (made, &self.listings) {
            for &d in dirs {
                g.changed(d);
            }
        }
        let r = self.durable(self.dir_sync(), r, counted);
        if made && r.is_err() {
            self.dir_change_unseen(dirs);
        }
        r
    }

    /// The entries of `dirs` changed without the kernel learning of it:
    /// drop the first page of their cached listings, so that none is
    /// served again unchecked.
    fn dir_change_unseen(&self, dirs: &[Ino]) {
        if self.listings.is_none() {
            return;
        }
        if let Some(f) = self.invalidate.get() {
            for &d in dirs {
                f(d, Invalidate::AttrAndFirstPage);
            }
        }
    }

    /// The engine behind this handler.
    pub fn fs(&self) -> &Fs {
        &self.fs
    }

    pub fn config(&self) -> &HandlerConfig {
        &self.config
    }

    /// Number of open file and directory handles.
    pub fn open_handles(&self) -> usize {
        self.handles.len()
    }

    fn handle(&self, fh: u64) -> Result<std::sync::Arc<Handle>> {
        self.handles.get(fh).ok_or(Errno::EBADF)
    }

    /// LOOKUP: counted.
    pub fn lookup(&self, caller: &Caller, parent: Ino, name: &[u8]) -> Result<Attr> {
        if let Some(bad) = &self.config.fault_panic_name {
            if bad.as_slice() == name {
                panic!(
                    "fault injection: lookup of {:?}",
                    String::from_utf8_lossy(name)
                );
            }
        }
        check_name(name)?;
        if name == b"." {
            // Never a path walk's (the VFS resolves `.` itself): the
            // kernel's `fuse_get_dentry` asking for an inode by number to
            // open a file handle whose inode it evicted
            // (`FUSE_EXPORT_SUPPORT`; `open_by_handle_at`, NFS export).
            // `parent` may be any kind; the kernel checks the generation.
            // (`..` of a directory, which reconnects a directory handle,
            // is an ordinary lookup.)
            return self.fs.lookup_number_counted(parent);
        }
        self.fs.lookup_counted(&cred_for(caller), parent, name)
    }

    /// Whether node id `ino` names an inode (a live one, or an unlinked
    /// one something still holds): what tells a LOOKUP's missing name
    /// (a negative entry) from a missing parent (`ENOENT`).
    pub fn node_exists(&self, ino: Ino) -> bool {
        self.fs.getattr(ino).is_ok()
    }

    /// FORGET.
    pub fn forget(&self, ino: Ino, nlookup: u64) {
        self.fs.forget(ino, nlookup)
    }

    /// GETATTR (`fh` is set for `fstat` on an open file).
    pub fn getattr(&self, ino: Ino, _fh: Option<u64>) -> Result<Attr> {
        self.fs.getattr(ino)
    }

    pub fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        self.fs.readlink(ino)
    }

    /// MKNOD: counted.
    pub fn mknod(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &[u8],
        mode: u32,
        umask: u32,
        rdev: u64,
    ) -> Result<Attr> {
        check_name(name)?;
        let r = self
            .fs
            .mknod(&cred_for(caller), parent, name, mode, umask, rdev);
        self.dir_changes(&[parent], r, |a| Some(a.ino))
    }

    /// MKDIR: counted.
    pub fn mkdir(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &[u8],
        mode: u32,
        umask: u32,
    ) -> Result<Attr> {
        check_name(name)?;
        let r = self.fs.mkdir(&cred_for(caller), parent, name, mode, umask);
        self.dir_changes(&[parent], r, |a| Some(a.ino))
    }

    pub fn unlink(&self, caller: &Caller, parent: Ino, name: &[u8]) -> Result<()> {
        check_name(name)?;
        let r = self.fs.unlink(&cred_for(caller), parent, name);
        self.dir_changes(&[parent], r, |_| None)
    }

    pub fn rmdir(&self, caller: &Caller, parent: Ino, name: &[u8]) -> Result<()> {
        check_name(name)?;
        let r = self.fs.rmdir(&cred_for(caller), parent, name);
        self.dir_changes(&[parent], r, |_| None)
    }

    /// SYMLINK: counted.
    pub fn symlink(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &[u8],
        target: &[u8],
    ) -> Result<Attr> {
        check_name(name)?;
        let r = self.fs.symlink(&cred_for(caller), parent, name, target);
        self.dir_changes(&[parent], r, |a| Some(a.ino))
    }

    pub fn rename(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: u32,
    ) -> Result<()> {
        check_name(name)?;
        check_name(newname)?;
        let r = self
            .fs
            .rename(&cred_for(caller), parent, name, newparent, newname, flags);
        // Made by the engine, even if the reply ends up an error (a
        // failed dirsync): the moved directory's `..` changed either way.
        let made = r.is_ok();
        let r = self.dir_changes(&[parent, newparent], r, |_| None);
        if made && parent != newparent {
            self.dir_moved(newparent, newname);
            if flags & libc::RENAME_EXCHANGE != 0 {
                self.dir_moved(parent, name);
            }
        }
        r
    }

    /// LINK: counted.
    pub fn link(&self, caller: &Caller, ino: Ino, newparent: Ino, newname: &[u8]) -> Result<Attr> {
        check_name(newname)?;
        let r = self.fs.link(&cred_for(caller), ino, newparent, newname);
        self.dir_changes(&[newparent], r, |a| Some(a.ino))
    }

    /// OPEN. `flags` are the opener's `f_flags`; the kernel's open of an
    /// `execve` carries `__FMODE_EXEC` there, which the engine takes as
    /// [`lanefs_core::O_EXEC_OPEN`] (execute permission, not read).
    pub fn open(&self, caller: &Caller, ino: Ino, flags: i32) -> Result<Opened> {
        let special = |perm: u16| perm & 0o6000;
        let before = if flags & libc::O_TRUNC != 0 && caller.uid != 0 {
            self.fs.getattr(ino).map(|a| special(a.perm)).unwrap_or(0)
        } else {
            0
        };
        let file = self.io_file(self.fs.open(&cred_for(caller), ino, flags)?)?;
        if before != 0 && self.fs.getattr(ino).map(|a| special(a.perm)).unwrap_or(0) != before {
            self.attrs_changed(ino);
        }
        Ok(self.opened(caller, flags, file))
    }

    /// A new handle for `file`, opened by `caller` with `flags` (OPEN,
    /// CREATE, TMPFILE).
    fn opened(&self, caller: &Caller, flags: i32, file: lanefs_core::OpenFile) -> Opened {
        let fh = self.handles.insert(Handle {
            file,
            flags,
            opener: *caller,
        });
        Opened {
            fh,
            keep_cache: self.config.cache.keep_cache,
        }
    }

    /// CREATE: counted (the new entry is handed to the kernel).
    pub fn create(
        &self,
        caller: &Caller,
        parent: Ino,
        name: &[u8],
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> Result<(Attr, Opened)> {
        check_name(name)?;
        let r = self.fs.open_at(
            &cred_for(caller),
            parent,
            name,
            flags | libc::O_CREAT,
            mode,
            umask,
            true,
        );
        let (attr, file, _created) = self.dir_changes(&[parent], r, |(a, _, _)| Some(a.ino))?;
        let file = match self.io_file(file) {
            Ok(f) => f,
            Err(e) => {
                // The kernel never learns the entry: give its reference
                // back, and keep its cached listing from hiding it.
                self.fs.forget(attr.ino, 1);
                self.dir_change_unseen(&[parent]);
                return Err(e);
            }
        };
        Ok((attr, self.opened(caller, flags, file)))
    }

    /// TMPFILE (`open(dir, O_TMPFILE)`): counted, as CREATE. The file has
    /// no name and a link count of 0; the kernel allows one LINK of it
    /// unless it was opened `O_EXCL` (its `I_LINKABLE`, which the engine
    /// mirrors), and otherwise it goes at the last close and FORGET.
    pub fn tmpfile(
        &self,
        caller: &Caller,
        parent: Ino,
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> Result<(Attr, Opened)> {
        let (attr, file) = self
            .fs
            .tmpfile(&cred_for(caller), parent, flags, mode, umask, true)?;
        let file = match self.io_file(file) {
            Ok(f) => f,
            Err(e) => {
                // The kernel never learns the inode: give its reference back.
                self.fs.forget(attr.ino, 1);
                return Err(e);
            }
        };
        Ok((attr, self.opened(caller, flags, file)))
    }

    /// READ: at most `size` bytes at `offset`.
    pub fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let h = self.handle(fh)?;
        let size = size.min(READ_BYTES_MAX) as usize;
        let mut buf = vec![0u8; size];
        let n = self.fs.read(&h.file, offset, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// WRITE: returns the bytes written. `kill_suidgid` is the kernel's
    /// `FUSE_WRITE_KILL_SUIDGID`: set when the writer lacks `CAP_FSETID`.
    /// Linux decides the setuid/setgid kill by the *writer*
    /// (`file_remove_privs` runs as the writing task), so the engine gets
    /// the writer's credentials and drops the bits in the same step as the
    /// data change (`Fs::write_as`): without the flag as root (the bits
    /// stay), with it as the caller. The engine removes
    /// `security.capability` itself (as `FUSE_HANDLE_KILLPRIV_V2` asks),
    /// whoever writes. `mapped` is `FUSE_WRITE_CACHE`: the write-back of
    /// pages a shared mapping dirtied, which removes no privileges
    /// (Linux's `page_mkwrite`).
    pub fn write(
        &self,
        caller: &Caller,
        fh: u64,
        offset: u64,
        data: &[u8],
        kill_suidgid: bool,
        mapped: bool,
    ) -> Result<u32> {
        let h = self.handle(fh)?;
        let ino = h.file.ino();
        // The mode before a write that may drop bits; `None` when it
        // cannot (the kernel flags every write without CAP_FSETID, and an
        // invalidation per write would cost a notification each).
        let special = |perm: u16| perm & (S_ISUID | S_ISGID);
        let before = (kill_suidgid && !mapped && !data.is_empty())
            .then(|| self.fs.getattr(ino).map(|a| a.perm).ok())
            .flatten()
            .filter(|p| special(*p) != 0);
        let (n, _end) = if mapped {
            self.fs.write_back_mapped(&h.file, offset, data)?
        } else if !kill_suidgid {
            self.fs
                .write_as(&h.file, offset, data, &lanefs_core::Cred::root())?
        } else if h.opener.uid == caller.uid && h.opener.gid == caller.gid {
            // The opener's credentials (groups read at open) are the
            // writer's: no second `/proc` read on the hot path.
            self.fs.write(&h.file, offset, data)?
        } else {
            self.fs.write_as(&h.file, offset, data, &cred_for(caller))?
        };
        if self.config.sync_writes {
            self.fs.fsync(&h.file, false)?;
        }
        if let Some(before) = before {
            if self.fs.getattr(ino).map(|a| a.perm).ok() != Some(before) {
                // The kernel cannot learn a dropped setuid/setgid from a
                // WRITE reply.
                self.attrs_changed(ino);
            }
        }
        u32::try_from(n).map_err(|_| Errno::EIO)
    }

    /// READ into `buf` (the transport's reply buffer): bytes read.
    /// `flags`: the descriptor's flags now (`fuse_read_in.flags`), whose
    /// `O_NOATIME` decides whether atime moves: `fcntl(F_SETFL)` may have
    /// changed it since the open (until 2026-11 the open's counted).
    pub fn read_into(&self, fh: u64, offset: u64, buf: &mut [u8], flags: i32) -> Result<usize> {
        let h = self.handle(fh)?;
        self.fs.read_flags(&h.file, offset, buf, flags)
    }

    /// FLUSH (each `close` of a descriptor): nothing is buffered here.
    pub fn flush(&self, fh: u64) -> Result<()> {
        self.handle(fh).map(|_| ())
    }

    /// RELEASE / RELEASEDIR: drop the handle (the engine closes the file
    /// when the last request using it finishes).
    pub fn release(&self, fh: u64) -> Result<()> {
        self.handles.remove(fh).map(|_| ()).ok_or(Errno::EBADF)
    }

    /// SYNCFS, and GETXATTR of `SYNC_XATTR` on the root (`lanefs sync`):
    /// write everything back and commit it; returns once it is durable.
    pub fn syncfs(&self) -> Result<()> {
        self.fs.sync()
    }

    pub fn fsync(&self, fh: u64, datasync: bool) -> Result<()> {
        let h = self.handle(fh)?;
        self.fs.fsync(&h.file, datasync)
    }

    /// FSYNCDIR: directory changes are made durable with the store.
    pub fn fsyncdir(&self, fh: u64, datasync: bool) -> Result<()> {
        let h = self.handle(fh)?;
        self.fs.fsync(&h.file, datasync)
    }

    /// OPENDIR. `ENOTDIR` for anything but a directory (the kernel sends
    /// OPENDIR only for directories; until the request fuzz test any
    /// inode got a handle, on which READDIR then failed).
    pub fn opendir(&self, caller: &Caller, ino: Ino, flags: i32) -> Result<Opened> {
        let file = self
            .fs
            .open(&cred_for(caller), ino, libc::O_RDONLY | libc::O_DIRECTORY)?;
        let fh = self.handles.insert(Handle {
            file,
            flags,
            opener: *caller,
        });
        Ok(Opened {
            fh,
            keep_cache: self.config.cache.cache_dir,
        })
    }

    /// READDIR: call `emit(entry)` for each entry
    /// from `offset` until it returns `true` (reply buffer full) or the
    /// directory ends. No lookup references are taken. `flags`: the
    /// descriptor's flags now (`fuse_read_in.flags`, as for READ), whose
    /// `O_NOATIME` decides whether atime moves (until 2026-11 the open's
    /// counted, and OPENDIR did not even pass it to the engine).
    pub fn readdir(
        &self,
        fh: u64,
        offset: u64,
        size: u32,
        flags: i32,
        emit: &mut dyn FnMut(DirEntry<'_>) -> bool,
    ) -> Result<()> {
        let h = self.handle(fh)?;
        let mut used = 0usize;
        let mut sent = 0usize;
        self.fs
            .readdir_flags(&h.file, offset, flags, &mut |e: DirEntry<'_>| {
                used += (DIRENT_HEADER_BYTES + e.name.len()).next_multiple_of(8);
                if used > size as usize {
                    return true;
                }
                let full = emit(e);
                sent += usize::from(!full);
                full
            })?;
        self.listing_reply(h.file.ino(), sent);
        Ok(())
    }

    /// READDIRPLUS: like [`readdir`](Self::readdir), with attributes; every
    /// entry but `.` and `..` carries a lookup reference. `emit` returns
    /// `true` when the entry did not fit; the handler then gives that
    /// reference back and stops. `flags` as for `readdir`.
    pub fn readdirplus(
        &self,
        fh: u64,
        offset: u64,
        size: u32,
        flags: i32,
        emit: &mut dyn FnMut(&PlusEntry<'_>) -> bool,
    ) -> Result<()> {
        let h = self.handle(fh)?;
        let dir = h.file.ino();
        // Collect names first: the engine may hold the directory's lock
        // while it calls us back, and lookups must not run under it.
        let mut raw: Vec<(Vec<u8>, Ino, u64)> = Vec::new();
        let mut used = 0usize;
        self.fs
            .readdir_flags(&h.file, offset, flags, &mut |e: DirEntry<'_>| {
                let sz = (DIRENTPLUS_HEADER_BYTES + e.name.len()).next_multiple_of(8);
                if used + sz > size as usize {
                    return true;
                }
                used += sz;
                raw.push((e.name.to_vec(), e.ino, e.next_offset));
                false
            })?;
        // Lookups for READDIRPLUS are the kernel's own: ownership and
        // permission were checked when the directory was opened.
        let cred = lanefs_core::Cred::root();
        let mut sent = 0usize;
        for (name, ino, next_offset) in raw {
            let dot = name == b"." || name == b"..";
            let attr = if dot {
                match self.fs.getattr(ino) {
                    Ok(a) => a,
                    Err(_) => continue,
                }
            } else {
                match self.fs.lookup_counted(&cred, dir, &name) {
                    Ok(a) => a,
                    // Removed since the listing: skip it.
                    Err(e) if e == Errno::ENOENT => continue,
                    Err(e) => return Err(e),
                }
            };
            let entry = PlusEntry {
                name: &name,
                attr,
                next_offset,
                counted: !dot,
            };
            if emit(&entry) {
                if entry.counted {
                    self.fs.forget(attr.ino, 1);
                }
                break;
            }
            sent += 1;
        }
        self.listing_reply(dir, sent);
        Ok(())
    }

    pub fn statfs(&self) -> Result<StatFs> {
        self.fs.statfs()
    }

    pub fn setxattr(
        &self,
        caller: &Caller,
        ino: Ino,
        name: &[u8],
        value: &[u8],
        flags: u32,
    ) -> Result<()> {
        if !is_acl_name(name) {
            return self.fs.setxattr(&cred_for(caller), ino, name, value, flags);
        }
        self.acl_change(ino, |fs| {
            fs.setxattr(&cred_for(caller), ino, name, value, flags)
        })
    }

    /// A change of a POSIX ACL, which may change the mode (the ACL's
    /// bits, setgid: the engine's `posix_acl_update_mode`). With
    /// `FUSE_POSIX_ACL` the kernel forgets the attributes after it
    /// (`fuse_set_acl`); without it (`no_default_permissions` mounts) it
    /// refreshes only ctime, so it is told to forget them when the mode
    /// moved.
    fn acl_change(&self, ino: Ino, change: impl FnOnce(&Fs) -> Result<()>) -> Result<()> {
        let perm = |fs: &Fs| fs.getattr(ino).map(|a| a.perm).ok();
        let before = perm(&self.fs);
        change(&self.fs)?;
        if perm(&self.fs) != before {
            self.attrs_changed(ino);
        }
        Ok(())
    }

    pub fn getxattr(&self, caller: &Caller, ino: Ino, name: &[u8]) -> Result<Vec<u8>> {
        self.fs.getxattr(&cred_for(caller), ino, name)
    }

    pub fn listxattr(&self, caller: &Caller, ino: Ino) -> Result<Vec<u8>> {
        self.fs.listxattr(&cred_for(caller), ino)
    }

    /// REMOVEXATTR. `security.capability` is removed whoever asks: the
    /// kernel has already refused a `removexattr(2)` without `CAP_SETFCAP`
    /// (commoncap.c `cap_inode_removexattr`), and its own privilege kill
    /// (`file_remove_privs` → `cap_inode_killpriv`, before a write by any
    /// user, or a chown) arrives here with the writer's uid; refusing
    /// that would fail the user's write.
    ///
    /// Removing the access ACL may drop setgid (the engine's
    /// `posix_acl_update_mode`): [`acl_change`](Self::acl_change).
    pub fn removexattr(&self, caller: &Caller, ino: Ino, name: &[u8]) -> Result<()> {
        let cred = if name == CAPS_XATTR {
            lanefs_core::Cred::root()
        } else {
            cred_for(caller)
        };
        if !is_acl_name(name) {
            return self.fs.removexattr(&cred, ino, name);
        }
        self.acl_change(ino, |fs| fs.removexattr(&cred, ino, name))
    }

    /// ACCESS (only sent without `default_permissions`).
    pub fn access(&self, caller: &Caller, ino: Ino, mask: u32) -> Result<()> {
        self.fs.access(&cred_for(caller), ino, mask)
    }

    /// FALLOCATE: the kernel leaves the setuid/setgid kill to us under
    /// `FUSE_HANDLE_KILLPRIV_V2`, by the caller's rules, applied by the
    /// engine in the same step as the allocation (`Fs::fallocate_as`).
    pub fn fallocate(
        &self,
        caller: &Caller,
        fh: u64,
        offset: u64,
        len: u64,
        mode: i32,
    ) -> Result<()> {
        let h = self.handle(fh)?;
        let offset = i64::try_from(offset).map_err(|_| Errno::EFBIG)?;
        let len = i64::try_from(len).map_err(|_| Errno::EFBIG)?;
        let cred = cred_for(caller);
        self.fs.fallocate_as(&h.file, mode, offset, len, &cred)?;
        if !cred.is_root() {
            // Bits the caller dropped: the kernel cannot see them in the reply.
            self.attrs_changed(h.file.ino());
        }
        Ok(())
    }

    /// Unmount-time cleanup: close every handle still open.
    pub fn destroy(&self) {
        tracing::debug!(open = self.handles.len(), "destroy");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guarded_turns_panic_into_eio() {
        let r: Result<()> = guarded("test", || panic!("boom"));
        assert_eq!(r, Err(Errno::EIO));
        let r: Result<u32> = guarded("test", || Ok(7));
        assert_eq!(r, Ok(7));
    }

    /// Under the writeback cache a write-only handle serves reads (without
    /// it: EBADF); in both modes writes land at the offset the kernel
    /// chose even on an `O_APPEND` open (until 2026-11 they were appended
    /// without the writeback cache, which moved a page written back from
    /// a shared mapping, as here, to the end of the file).
    #[test]
    fn writeback_handles_read_and_every_handle_ignores_append() {
        assert_eq!(
            writeback_io_flags(libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT),
            libc::O_RDWR
        );
        assert_eq!(writeback_io_flags(libc::O_RDONLY), libc::O_RDONLY);
        let c = Caller::default();
        for wb in [false, true] {
            let h = Handler::new(Fs::new_in_memory(), HandlerConfig::default());
            h.set_writeback(wb);
            let flags = libc::O_WRONLY | libc::O_APPEND;
            let (a, o) = h.create(&c, 1, b"f", 0o644, 0, flags).unwrap();
            h.write(&c, o.fh, 0, b"hello", false, true).unwrap();
            h.write(&c, o.fh, 1, b"EL", false, true).unwrap();
            let mut buf = [0u8; 8];
            let r = h.read_into(o.fh, 0, &mut buf, 0);
            if wb {
                assert_eq!(r, Ok(5));
            } else {
                assert_eq!(r, Err(Errno::EBADF));
                let ro = h.open(&c, a.ino, libc::O_RDONLY).unwrap();
                assert_eq!(h.read_into(ro.fh, 0, &mut buf, 0), Ok(5));
                h.release(ro.fh).unwrap();
            }
            assert_eq!(&buf[..5], b"hELlo", "writeback {wb}");
            assert_eq!(h.getattr(a.ino, None).unwrap().size, 5, "not appended");
            h.release(o.fh).unwrap();
        }
    }

    #[test]
    fn fault_name_panics_and_is_caught() {
        let cfg = HandlerConfig {
            fault_panic_name: Some(b"boom".to_vec()),
            ..Default::default()
        };
        let h = Handler::new(Fs::new_in_memory(), cfg);
        let caller = Caller::default();
        let r = guarded("lookup", || h.lookup(&caller, 1, b"boom"));
        assert_eq!(r.map(|_| ()), Err(Errno::EIO));
    }

    /// Every reference the handler hands out is given back by exactly the
    /// FORGETs the kernel would send: after everything is unlinked and
    /// forgotten, no inode but the root is left in the store.
    #[test]
    fn lookup_counts_are_exact() {
        use lanefs_core::{FsConfig, MemoryStore};
        use std::sync::Arc;
        let store = Arc::new(MemoryStore::default());
        let fs = Fs::new(store.clone(), FsConfig::default()).unwrap();
        let h = Handler::new(fs, HandlerConfig::default());
        let c = Caller::default();
        let d = h.mkdir(&c, 1, b"d", 0o755, 0).unwrap().ino; // +1 d
        let mut files = Vec::new();
        for i in 0..10 {
            let name = format!("f{i}");
            let (a, o) = h
                .create(&c, d, name.as_bytes(), 0o644, 0, libc::O_RDWR)
                .unwrap(); // +1 each
            h.write(&c, o.fh, 0, b"x", true, false).unwrap();
            h.release(o.fh).unwrap();
            files.push((name, a.ino));
        }
        // LOOKUP twice: +2 each.
        for (name, ino) in &files {
            assert_eq!(h.lookup(&c, d, name.as_bytes()).unwrap().ino, *ino);
            h.lookup(&c, d, name.as_bytes()).unwrap();
        }
        // READDIRPLUS that accepts only 5 entries (`.`, `..` and 3 files):
        // the 6th is refused and its reference must be given back.
        let o = h.opendir(&c, d, libc::O_RDONLY).unwrap();
        let mut seen = Vec::new();
        h.readdirplus(o.fh, 0, 1 << 20, 0, &mut |e: &PlusEntry<'_>| {
            if seen.len() == 5 {
                return true;
            }
            seen.push((e.name.to_vec(), e.attr.ino, e.counted));
            false
        })
        .unwrap();
        assert_eq!(seen.len(), 5);
        assert!(!seen[0].2 && !seen[1].2, "dots must not be counted");
        // The kernel forgets what it got.
        for (_, ino, counted) in &seen {
            if *counted {
                h.forget(*ino, 1);
            }
        }
        // Plain READDIR takes no references.
        let mut n = 0;
        h.readdir(o.fh, 0, u32::MAX, 0, &mut |_e| {
            n += 1;
            false
        })
        .unwrap();
        assert_eq!(n, 12);
        h.release(o.fh).unwrap();
        for (name, ino) in &files {
            h.unlink(&c, d, name.as_bytes()).unwrap();
            h.forget(*ino, 3);
        }
        h.rmdir(&c, 1, b"d").unwrap();
        h.forget(d, 1);
        assert_eq!(h.open_handles(), 0);
        h.fs().sync().unwrap();
        assert_eq!(store.inode_records(), 1, "inodes leaked by lookup counts");
        assert_eq!(store.page_records(), 0);
    }
}
