//! [`Fs`]: one mounted file system (the superblock) and its inode life cycle.
//!
//! Mount-level locks and atomics:
//! * `rename_lock` (mutex): held by cross-directory renames only, for the
//!   whole rename. It keeps the tree's shape (directories' parents) stable
//!   while a rename checks ancestry and locks two directories.
//! * `free_blocks`, `free_inodes`, `cached_pages`, `cached_inodes`: per-lane
//!   counters (see `counters`); reservations happen before any change, so a
//!   failed reservation (`ENOSPC`) leaves nothing half-done.
//! * `evict_cursor` (Relaxed): spreads eviction scans over icache shards.
//!
//! The whole lock order (outermost first), repeated in docs/ARCHITECTURE.md:
//! 1. `rename_lock`
//! 2. directory entry locks (`Body::Dir`): ancestors before descendants;
//!    two unrelated directories (only under `rename_lock`) by inode number
//! 3. a file's data lock (`Body::File`)
//! 4. icache shard locks
//! 5. `Inode::meta` — a directory's before that of an inode linked (or
//!    being linked) in it; a non-directory's meta is always innermost;
//!    taken only with `try_lock` under a shard lock
//! 6. leaf locks: orphan-table shards, store-internal locks, counters' slow
//!    path, the reclaim registry.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use lanefs_store::{
    Errno, FileKind, Ino, InodeRecord, Result, Store, Superblock, Timespec, ROOT_INO,
};
use parking_lot::Mutex;

use crate::counters::{Counter, PercpuCounter};
use crate::dir::FIRST_COOKIE;
use crate::icache::{InodeCache, ShardedInodeCache};
use crate::inode::{Body, Inode, Meta};
use crate::namei::NewNode;
use crate::orphan::{OrphanTable, ShardedOrphanTable};
use crate::pcache::{page_cache, PageCache};
use crate::perm::{self, S_ISGID, S_IXGRP};
use crate::reclaim::{ReclaimRegistry, Shrinker, ShrinkerId};
use crate::{Attr, Cred, FsConfig, ShrinkStats, StatFs, DIRENT_SIZE, NAME_MAX};

/// One file-system instance over a store. Cheap to clone (shared inside);
/// the instance is unmounted (everything written back) when the last clone
/// and the last [`OpenFile`](crate::OpenFile) are dropped.
#[derive(Clone)]
pub struct Fs {
    pub(crate) inner: Arc<FsInner>,
}

pub(crate) struct FsInner {
    pub store: Arc<dyn Store>,
    pub config: FsConfig,
    pub root: Arc<Inode>,
    pub icache: Box<dyn InodeCache>,
    pub orphans: Box<dyn OrphanTable>,
    pub free_blocks: Box<dyn Counter>,
    pub free_inodes: Box<dyn Counter>,
    pub cached_pages: Box<dyn Counter>,
    pub cached_inodes: Box<dyn Counter>,
    /// The read path design (seed 003), from `config.variants.read`.
    pub page_cache: Box<dyn PageCache>,
    pub rename_lock: Mutex<()>,
    pub totals: Superblock,
    evict_cursor: AtomicUsize,
    shrinker: Mutex<Option<ShrinkerId>>,
}

/// A borrowed or owned reference to a cached inode. The root is pinned by
/// the mount and borrowed, so the hottest inode's refcount is never touched.
pub(crate) enum IRef<'a> {
    Root(&'a Arc<Inode>),
    Cached(Arc<Inode>),
}

impl std::ops::Deref for IRef<'_> {
    type Target = Inode;
    fn deref(&self) -> &Inode {
        match self {
            IRef::Root(r) => r,
            IRef::Cached(c) => c,
        }
    }
}

impl IRef<'_> {
    pub fn arc(&self) -> Arc<Inode> {
        match self {
            IRef::Root(r) => Arc::clone(r),
            IRef::Cached(c) => c.clone(),
        }
    }
}

/// Validate a name for creation or lookup: `ENOENT` when empty,
/// `ENAMETOOLONG` past [`NAME_MAX`], `EINVAL` with `/` or NUL.
pub(crate) fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() {
        return Err(Errno::ENOENT);
    }
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    if name.iter().any(|b| *b == b'/' || *b == 0) {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

pub(crate) fn is_dot_or_dotdot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// Set mtime and ctime to `now` and mark the record dirty.
pub(crate) fn touch_mc(inode: &Inode, m: &mut Meta, now: Timespec) {
    m.rec.mtime = now;
    m.rec.ctime = now;
    m.dirty = true;
    inode.atime_stale.store(true, Ordering::Relaxed);
}

/// Set ctime to `now` and mark the record dirty.
pub(crate) fn touch_c(inode: &Inode, m: &mut Meta, now: Timespec) {
    m.rec.ctime = now;
    m.dirty = true;
    inode.atime_stale.store(true, Ordering::Relaxed);
}

/// A generation number unique per lane without shared writes.
fn new_generation() -> u64 {
    use std::cell::Cell;
    thread_local!(static NEXT: Cell<u64> = const { Cell::new(0) });
    let n = NEXT.with(|c| {
        let v = c.get() + 1;
        c.set(v);
        v
    });
    ((crate::lane::lane() as u64 + 1) << 40) | (n & ((1 << 40) - 1))
}

struct FsShrinker(Weak<FsInner>);

impl Shrinker for FsShrinker {
    fn count(&self) -> usize {
        self.0.upgrade().map_or(0, |fs| {
            fs.cached_inodes.sum().max(0) as usize + fs.cached_pages.sum().max(0) as usize
        })
    }
    fn scan(&self, nr: usize) -> usize {
        let Some(fs) = self.0.upgrade() else { return 0 };
        let pages = fs.reclaim_pages(nr);
        pages + fs.evict_inodes(nr)
    }
}

impl Fs {
    /// Open the file system kept in `store`, creating an empty one (just the
    /// root directory) if the store holds none.
    pub fn new(store: Arc<dyn Store>, config: FsConfig) -> Result<Fs> {
        let mut sb = store.superblock()?;
        let root_rec = if sb.used_inodes == 0 {
            if sb.total_inodes == 0 {
                return Err(Errno::ENOSPC);
            }
            let now = Timespec::now();
            let rec = InodeRecord {
                ino: ROOT_INO,
                generation: 1,
                kind: FileKind::Directory,
                perm: config.root_perm & 0o7777,
                uid: config.root_uid,
                gid: config.root_gid,
                nlink: 2,
                size: 2 * DIRENT_SIZE,
                blocks: 0,
                atime: now,
                mtime: now,
                ctime: now,
                btime: now,
                rdev: 0,
                parent: ROOT_INO,
                next_cookie: FIRST_COOKIE,
                symlink: Vec::new(),
                xattrs: Vec::new(),
            };
            store.write_inode(&rec)?;
            sb.used_inodes = 1;
            store.write_superblock(&sb)?;
            rec
        } else {
            store.read_inode(ROOT_INO)?.ok_or(Errno::EUCLEAN)?
        };
        let free_blocks = sb.total_blocks.saturating_sub(sb.used_blocks) as i64;
        let free_inodes = sb.total_inodes.saturating_sub(sb.used_inodes) as i64;
        let inner = Arc::new(FsInner {
            store,
            root: Arc::new(Inode::new(root_rec, false)),
            icache: Box::new(ShardedInodeCache::new()),
            orphans: Box::new(ShardedOrphanTable::new()),
            free_blocks: Box::new(PercpuCounter::new(free_blocks, 64)),
            free_inodes: Box::new(PercpuCounter::new(free_inodes, 64)),
            cached_pages: Box::new(PercpuCounter::new(0, 64)),
            cached_inodes: Box::new(PercpuCounter::new(0, 64)),
            page_cache: page_cache(config.variants.read),
            rename_lock: Mutex::new(()),
            totals: sb,
            config,
            evict_cursor: AtomicUsize::new(0),
            shrinker: Mutex::new(None),
        });
        let id = ReclaimRegistry::global().register(Arc::new(FsShrinker(Arc::downgrade(&inner))));
        *inner.shrinker.lock() = Some(id);
        Ok(Fs { inner })
    }

    /// A fresh file system on a [`MemoryStore`](lanefs_store::MemoryStore)
    /// with default limits.
    ///
    /// ```
    /// let fs = lanefs_core::Fs::new_in_memory();
    /// assert_eq!(fs.getattr(lanefs_core::ROOT_INO).unwrap().nlink, 2);
    /// ```
    pub fn new_in_memory() -> Fs {
        let store = Arc::new(lanefs_store::MemoryStore::default());
        match Fs::new(store, FsConfig::default()) {
            Ok(fs) => fs,
            // A new memory store always has room for the root directory.
            Err(e) => unreachable!("a fresh memory store failed to format: {e}"),
        }
    }

    /// The store this file system lives in.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// Attributes of `ino`.
    pub fn getattr(&self, ino: Ino) -> Result<Attr> {
        let inode = self.inner.iget(ino)?;
        let m = inode.meta.lock();
        if m.freed {
            return Err(Errno::ENOENT);
        }
        Ok(Attr::from_record(&m.rec))
    }

    /// `access(2)`: `mask` of [`MAY_READ`](crate::MAY_READ),
    /// [`MAY_WRITE`](crate::MAY_WRITE), [`MAY_EXEC`](crate::MAY_EXEC)
    /// (0 = exists).
    pub fn access(&self, cred: &Cred, ino: Ino, mask: u32) -> Result<()> {
        let inode = self.inner.iget(ino)?;
        let m = inode.meta.lock();
        perm::permission(cred, &m.rec, mask)
    }

    /// Give back `n` lookup references of `ino` (FUSE's FORGET). Unknown
    /// inodes and excess counts are ignored.
    pub fn forget(&self, ino: Ino, n: u64) {
        if ino == ROOT_INO {
            return;
        }
        let Some(inode) = self.inner.icache.get(ino) else {
            return;
        };
        {
            let mut m = inode.meta.lock();
            m.lookups = m.lookups.saturating_sub(n);
        }
        self.inner.maybe_free(&inode);
    }

    /// File-system totals and free space.
    pub fn statfs(&self) -> Result<StatFs> {
        let fs = &self.inner;
        let free_blocks = fs.free_blocks.sum().clamp(0, fs.totals.total_blocks as i64) as u64;
        let free_inodes = fs.free_inodes.sum().clamp(0, fs.totals.total_inodes as i64) as u64;
        Ok(StatFs {
            block_size: lanefs_store::PAGE_SIZE as u32,
            blocks: fs.totals.total_blocks,
            blocks_free: free_blocks,
            blocks_avail: free_blocks,
            files: fs.totals.total_inodes,
            files_free: free_inodes,
            name_max: NAME_MAX as u32,
        })
    }

    /// Write everything dirty back to the store and sync it (`syncfs`).
    pub fn sync(&self) -> Result<()> {
        self.inner.sync_all()
    }

    /// Write back and evict every unreferenced cached object: inodes,
    /// directory indexes, data pages. Everything is read back on demand.
    pub fn shrink(&self) -> ShrinkStats {
        let fs = &self.inner;
        let mut stats = ShrinkStats::default();
        let mut visit = |inode: &Arc<Inode>| {
            let (pages, dir) = fs.drop_caches_of(inode);
            stats.pages_dropped += pages;
            stats.dirs_dropped += dir as usize;
        };
        visit(&fs.root);
        fs.icache.for_each(&mut visit);
        stats.inodes_evicted = fs.evict_inodes(usize::MAX);
        stats
    }

    /// Inodes and data pages currently cached (for tests and stats).
    pub fn cache_counts(&self) -> (usize, usize) {
        let fs = &self.inner;
        (fs.icache.len(), fs.cached_pages.sum().max(0) as usize)
    }
}

impl FsInner {
    /// The inode `ino`, from the cache or the store.
    pub fn iget(&self, ino: Ino) -> Result<IRef<'_>> {
        if ino == ROOT_INO {
            return Ok(IRef::Root(&self.root));
        }
        if ino == 0 {
            return Err(Errno::ENOENT);
        }
        let mut loaded = false;
        let found = self
            .icache
            .get_or_load(ino, &mut || match self.store.read_inode(ino)? {
                // An unlinked inode is never evicted (it is freed or pinned),
                // so a record with no links is one being freed right now.
                Some(rec) if rec.nlink == 0 => Ok(None),
                Some(rec) if rec.ino == ino => {
                    loaded = true;
                    Ok(Some(Inode::new(rec, false)))
                }
                Some(_) => Err(Errno::EUCLEAN),
                None => Ok(None),
            })?;
        let inode = found.ok_or(Errno::ENOENT)?;
        if loaded {
            self.cached_inodes.add(1);
            self.enforce_inode_budget();
        }
        Ok(IRef::Cached(inode))
    }

    /// A directory inode, or `ENOTDIR`.
    pub fn dir(&self, ino: Ino) -> Result<IRef<'_>> {
        let d = self.iget(ino)?;
        if d.kind != FileKind::Directory {
            return Err(Errno::ENOTDIR);
        }
        Ok(d)
    }

    /// Make a new inode owned by `cred` in directory `parent` (whose record
    /// is `parent_rec`), applying setgid-directory inheritance. Reserves an
    /// inode (`ENOSPC`); the caller links it into the directory.
    #[allow(clippy::too_many_arguments)]
    pub fn alloc_inode(
        &self,
        cred: &Cred,
        parent_rec: &InodeRecord,
        n: &NewNode<'_>,
    ) -> Result<Arc<Inode>> {
        if !self.free_inodes.try_sub(1) {
            return Err(Errno::ENOSPC);
        }
        let ino = match self.store.alloc_ino() {
            Ok(i) => i,
            Err(e) => {
                self.free_inodes.add(1);
                return Err(e);
            }
        };
        let now = Timespec::now();
        let (kind, rdev, symlink) = (n.kind, n.rdev, n.target);
        let mut perm = n.perm & 0o7777;
        let mut gid = cred.gid;
        if parent_rec.perm & S_ISGID != 0 {
            gid = parent_rec.gid;
            if kind == FileKind::Directory {
                perm |= S_ISGID;
            } else if n.requested & (S_ISGID | S_IXGRP) == (S_ISGID | S_IXGRP)
                && !cred.is_root()
                && !cred.in_group(parent_rec.gid)
            {
                perm &= !S_ISGID;
            }
        }
        let is_dir = kind == FileKind::Directory;
        let rec = InodeRecord {
            ino,
            generation: new_generation(),
            kind,
            perm,
            uid: cred.uid,
            gid,
            nlink: if is_dir { 2 } else { 1 },
            size: if is_dir {
                2 * DIRENT_SIZE
            } else {
                symlink.len() as u64
            },
            blocks: 0,
            atime: now,
            mtime: now,
            ctime: now,
            btime: now,
            rdev,
            parent: if is_dir { parent_rec.ino } else { 0 },
            next_cookie: FIRST_COOKIE,
            symlink: symlink.to_vec(),
            xattrs: Vec::new(),
        };
        let inode = Arc::new(Inode::new(rec, true));
        {
            let mut m = inode.meta.lock();
            m.lookups = n.lookups;
            m.opens = n.opens;
        }
        self.icache.insert(inode.clone());
        self.cached_inodes.add(1);
        Ok(inode)
    }

    /// Undo `alloc_inode` for an inode that was never linked.
    pub fn discard_new(&self, inode: &Inode) {
        inode.meta.lock().freed = true;
        if let Err(e) = self.store.free_ino(inode.ino) {
            tracing::error!(ino = inode.ino, "store refused to free a new inode: {e}");
        }
        if self.icache.remove(inode) {
            self.cached_inodes.add(-1);
        }
        self.free_inodes.add(1);
    }

    /// Free `inode` if nothing keeps it: no links, lookups or opens. Must be
    /// called with none of the inode's locks held.
    pub fn maybe_free(&self, inode: &Inode) {
        let freeable = |m: &Meta| {
            !m.freed && m.rec.nlink == 0 && m.lookups == 0 && m.opens == 0 && inode.ino != ROOT_INO
        };
        if !freeable(&inode.meta.lock()) {
            return;
        }
        // The data lock first (lock order), so that `rec.blocks` is read
        // after any truncate or punch in flight has accounted its pages.
        let mut data = match &inode.body {
            Body::File(d) => Some(d.write()),
            _ => None,
        };
        let blocks = {
            let mut m = inode.meta.lock();
            if !freeable(&m) {
                return;
            }
            m.freed = true;
            m.dirty = false;
            m.rec.blocks
        };
        if let Some(pm) = data.as_mut() {
            let n = pm.discard();
            self.cached_pages.add(-(n as i64));
        }
        drop(data);
        if let Body::Dir(d) = &inode.body {
            d.write().index = None;
        }
        // Free in the store while the dead inode still holds its cache slot:
        // a concurrent `iget` finds it (and sees `freed`) instead of loading
        // a stale record. Then give up the slot, unless a new inode that
        // reused the number already took it.
        self.orphans.remove(inode.ino);
        if let Err(e) = self.store.free_ino(inode.ino) {
            tracing::error!(ino = inode.ino, "store refused to free an inode: {e}");
        }
        if self.icache.remove(inode) {
            self.cached_inodes.add(-1);
        }
        self.free_blocks.add(blocks as i64);
        self.free_inodes.add(1);
    }

    /// After a link count reached zero: record the orphan if the inode lives
    /// on (looked up or open). Called under `meta`.
    pub fn note_unlinked(&self, ino: Ino, m: &Meta) {
        if m.rec.nlink == 0 && (m.lookups > 0 || m.opens > 0) {
            self.orphans.add(ino);
        }
    }

    /// Write back one inode's dirty pages and record.
    pub fn writeback(&self, inode: &Inode) -> Result<()> {
        if let Body::File(d) = &inode.body {
            d.write().flush(&*self.store, inode.ino)?;
        }
        let mut m = inode.meta.lock();
        if m.dirty && !m.freed {
            self.store.write_inode(&m.rec)?;
            m.dirty = false;
        }
        Ok(())
    }

    pub fn sync_all(&self) -> Result<()> {
        let mut first_err = Ok(());
        let mut visit = |inode: &Arc<Inode>| {
            if let Err(e) = self.writeback(inode) {
                if first_err.is_ok() {
                    first_err = Err(e);
                }
            }
        };
        visit(&self.root);
        self.icache.for_each(&mut visit);
        first_err?;
        let sb = Superblock {
            used_blocks: self
                .totals
                .total_blocks
                .saturating_sub(self.free_blocks.sum().max(0) as u64),
            used_inodes: self
                .totals
                .total_inodes
                .saturating_sub(self.free_inodes.sum().max(0) as u64),
            ..self.totals
        };
        self.store.write_superblock(&sb)?;
        self.store.sync()
    }

    /// Write back and drop the clean pages and the directory index of one
    /// inode if its locks are free. Returns (pages dropped, index dropped).
    fn drop_caches_of(&self, inode: &Inode) -> (usize, bool) {
        match &inode.body {
            Body::File(d) => {
                let Some(mut pm) = d.try_write() else {
                    return (0, false);
                };
                if pm.flush(&*self.store, inode.ino).is_err() {
                    return (0, false);
                }
                let n = pm.drop_clean();
                self.cached_pages.add(-(n as i64));
                (n, false)
            }
            Body::Dir(d) => {
                let Some(mut ds) = d.try_write() else {
                    return (0, false);
                };
                (0, ds.index.take().is_some())
            }
            Body::Other => (0, false),
        }
    }

    /// Eviction callback, called under an icache shard write lock: write the
    /// inode back and say whether it may leave the cache.
    fn try_evict(&self, inode: &Arc<Inode>) -> bool {
        if Arc::strong_count(inode) != 1 {
            return false;
        }
        let Some(m) = inode.meta.try_lock() else {
            return false;
        };
        // A freed inode keeps its slot until `maybe_free` has removed its
        // record from the store; evicting it earlier would let an `iget`
        // reload the stale record as a zombie.
        if m.lookups != 0 || m.opens != 0 || m.freed {
            return false;
        }
        drop(m);
        let (pages, _) = self.drop_caches_of(inode);
        let _ = pages;
        if let Body::File(d) = &inode.body {
            // Dirty pages left (a racing writer cannot exist: count is 1).
            match d.try_read() {
                Some(pm) if pm.cached_pages() == 0 => {}
                _ => return false,
            }
        }
        let Some(mut m) = inode.meta.try_lock() else {
            return false;
        };
        if m.dirty {
            if self.store.write_inode(&m.rec).is_err() {
                return false;
            }
            m.dirty = false;
        }
        true
    }

    /// Evict up to `nr` unreferenced inodes; returns how many left.
    pub fn evict_inodes(&self, nr: usize) -> usize {
        let start = self.evict_cursor.fetch_add(1, Ordering::Relaxed);
        let n = self.icache.evict(start, nr, &mut |i| self.try_evict(i));
        self.cached_inodes.add(-(n as i64));
        n
    }

    fn enforce_inode_budget(&self) {
        let over = self.cached_inodes.sum() - self.config.cache_inodes_max as i64;
        if over > 0 {
            self.evict_inodes((over as usize).max(16));
        }
    }

    /// Drop clean pages (after writeback) until about `nr` are gone.
    pub fn reclaim_pages(&self, nr: usize) -> usize {
        let mut dropped = 0;
        self.icache.for_each(&mut |inode| {
            if dropped < nr {
                dropped += self.drop_caches_of(inode).0;
            }
        });
        dropped
    }

    /// Called after pages were added to the cache, with no locks held.
    pub fn enforce_page_budget(&self) {
        let over = self.cached_pages.sum() - self.config.cache_pages_max as i64;
        if over > 0 {
            self.reclaim_pages(over as usize + self.config.cache_pages_max / 8);
        }
    }
}

impl Drop for FsInner {
    fn drop(&mut self) {
        if let Some(id) = self.shrinker.lock().take() {
            ReclaimRegistry::global().unregister(id);
        }
        if let Err(e) = self.sync_all() {
            tracing::error!("writeback at unmount failed: {e}");
        }
    }
}

/// Set permissions for a new inode of `kind` from a caller's `mode` and
/// `umask`, as `vfs_prepare_mode`.
pub(crate) fn creation_perm(kind: FileKind, mode: u32, umask: u32) -> u16 {
    let allowed = match kind {
        FileKind::Directory => 0o1777,
        FileKind::Symlink => return 0o777,
        _ => 0o7777,
    };
    (mode & allowed & !umask) as u16
}

/// `EMLINK` check for adding one link.
pub(crate) fn check_link_room(nlink: u32) -> Result<()> {
    if nlink >= crate::LINK_MAX {
        Err(Errno::EMLINK)
    } else {
        Ok(())
    }
}
