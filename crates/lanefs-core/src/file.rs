//! Open files and data: open, read, write, truncate (via setattr),
//! fallocate, fsync, readdir, and attribute changes.
//!
//! Locks: a file's data lock (`Body::File`) is taken before its `meta`
//! (and after any directory entry lock, as in the mount's order); a pure
//! overwrite takes the data lock alone (`write_data`: its times go to the
//! file's data side, `pcache`);
//! `open_at` finds the entry lock-free and opens the inode it names, as
//! Linux's RCU-walk open does; a counted open that truncates an existing
//! file holds the name's stripe across the truncate and the count
//! (`FsInner::open_named`: the stripe, then the data lock, then `meta`). Setattr of a directory's mode or owner
//! holds every stripe of its entry lock (`FsInner::dir_freeze`). Reads go through the mount's
//! [`PageCache`] design: lock-free from cached pages by default (seed 003),
//! falling back to the data lock — shared, or exclusive to pull missing
//! pages from the store.
//!
//! Atomics: `OpenFile::list_bound` (a pointer from `Box::into_raw`, or
//! null) is a directory handle's listing bound (`dir` module doc, "A
//! listing ends where it began"), moved in and out whole by swaps: a
//! readdir takes it out for its call and puts it (or a new one) back, so
//! two readdirs of one handle never share the box (the kernel runs them one
//! at a time anyway: it holds the file's position lock around each).

use crate::sync::{Arc, AtomicPtr, Ordering};
use crate::types::relatime_due;
use crate::DirAt;
use crate::ReadVariant;

use lanefs_store::{Errno, FileKind, Ino, Result, Timespec};

use crate::dir::{
    below_bound, partition_of, position_of, resume_after, ListBatch, ListBound, Stripes,
};
use crate::fs::{
    check_name, creation_perm, data_change_time, fold_dir_changes, fold_file_times,
    is_dot_or_dotdot, touch_c, touch_mc, FsInner, IRef,
};
use crate::handles::HandleRef;
use crate::inode::{Body, Inode};
use crate::namei::{Made, NewNode};
use crate::pcache::page_range;
use crate::perm::{self, has_privs, owner_or_root, privs_to_kill, S_ISGID, S_ISUID, S_IXGRP};
use crate::xattr::kill_capability;
use crate::{
    AtimePolicy, Attr, Cred, DirEntry, Fs, SetAttr, TimeSet, FALLOC_FL_KEEP_SIZE,
    FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE, FILE_SIZE_MAX, MAY_EXEC, MAY_READ, MAY_WRITE,
    O_EXEC_OPEN,
};

/// An open regular file or directory. Closing is dropping it; the last
/// close of an unlinked file frees it.
pub struct OpenFile {
    fs: FsRef,
    inode: HeldInode,
    flags: i32,
    cred: Cred,
    /// A directory's listing bound, taken when a call of a listing stops
    /// early (`dir` module doc, "A listing ends where it began"); `None`
    /// for a file, and until a listing needs one. A pointer from
    /// `Box::into_raw` or null, owned by the handle and moved in and out
    /// whole by swaps ([`OpenFile::take_bound`], [`OpenFile::put_bound`]);
    /// a listing that never needs one only loads it.
    list_bound: AtomicPtr<ListBound>,
}

/// The engine as a handle holds it: counted on a lane in
/// `FsInner::handles`, not by `Arc` (the `handles` module says why).
type FsRef = HandleRef<FsInner>;

/// The inode as a handle holds it: a pointer, kept valid by the open count
/// the handle holds (`opens`), not an `Arc` whose count every open and
/// close of the file would write. An inode is unhashed — its cache `Arc`
/// dropped, through the epoch — only once a seal found no handle open
/// (`Opens::seal`), and the root lives as long as the engine.
struct HeldInode(std::ptr::NonNull<Inode>);

// SAFETY: a `HeldInode` only hands out `&Inode` (`Deref`), and `Inode` is
// `Sync`; it is as safe to send or share as the `&Inode` it stands for.
unsafe impl Send for HeldInode {}
// SAFETY: as for `Send` above.
unsafe impl Sync for HeldInode {}

impl HeldInode {
    /// Point at `inode`, whose open count the caller has just raised (or
    /// adopted) for the handle this will be part of: the count keeps it
    /// hashed, and so its memory alive, until that handle's close.
    fn counted(inode: &Inode) -> HeldInode {
        HeldInode(std::ptr::NonNull::from(inode))
    }
}

impl std::ops::Deref for HeldInode {
    type Target = Inode;
    fn deref(&self) -> &Inode {
        // SAFETY: made by `counted` for a handle that holds one open count
        // of the inode; the count is given back only by the handle's close
        // (`OpenFile::close_inode`), which uses the inode afterwards only
        // through a pointer it re-borrows under an epoch guard pinned from
        // before the count went down, and nothing uses this one after the
        // close. Until then no seal succeeds (`Opens::seal`), so the cache
        // keeps the inode hashed and its `Arc` alive (or it is the root,
        // kept by the engine, which the handle keeps).
        unsafe { self.0.as_ref() }
    }
}

/// Count a new handle of `fs`.
fn fs_ref(fs: &FsInner) -> FsRef {
    // SAFETY: every `FsInner` is made in `Fs::new`, inside an `Arc` given
    // to `HandleUsers::new` (which hands a clone to `handles.keep`) before
    // any handle exists, and it is given up only by
    // `Handles::close`/`begin_closing`.
    unsafe { HandleRef::new(fs) }
}

impl OpenFile {
    /// The inode this handle refers to.
    pub fn ino(&self) -> Ino {
        self.inode.ino
    }

    /// The inode it holds (model checks: the handle is on the cached
    /// object).
    #[cfg(all(test, lanefs_shuttle))]
    pub(crate) fn inode_ptr(&self) -> *const Inode {
        &*self.inode
    }

    /// The `open(2)` flags it was opened with.
    pub fn flags(&self) -> i32 {
        self.flags
    }

    /// The inode flags (`iflags`), from the attribute mirror.
    pub fn inode_flags(&self) -> u32 {
        self.inode.meta.perm_attr().iflags()
    }

    /// An `O_PATH` handle ([`Fs::open_path`]): it grants no access.
    pub fn is_path(&self) -> bool {
        self.flags & libc::O_PATH != 0
    }

    /// Open for reading: never an `O_PATH` handle (whose access mode bits
    /// are `O_RDONLY`'s zero).
    fn readable(&self) -> bool {
        self.flags & libc::O_PATH == 0
            && matches!(self.flags & libc::O_ACCMODE, libc::O_RDONLY | libc::O_RDWR)
    }

    fn writable(&self) -> bool {
        self.flags & libc::O_PATH == 0
            && matches!(self.flags & libc::O_ACCMODE, libc::O_WRONLY | libc::O_RDWR)
    }

    /// A second handle on the same inode with open flags `flags`, holding
    /// the opener's credentials, *without* a permission check. For a FUSE
    /// adapter under the kernel's writeback cache, which reads through a
    /// write-only open to fill partial pages: the kernel checked the
    /// opener's access when it opened, and the first handle checked it
    /// here too. Fails with `ENOENT` if the inode is already freed.
    pub fn reopen_unchecked(&self, flags: i32) -> Result<OpenFile> {
        // This handle pins the inode (no free can seal it), so the count
        // can be raised without `meta` and without a check.
        if !self.fs.opens.raise(&self.inode) {
            return Err(Errno::ENOENT);
        }
        Ok(OpenFile::new(
            &self.fs,
            &self.inode,
            flags,
            self.cred.clone(),
        ))
    }

    /// Move atime after an access, as the mount's [`AtimePolicy`] says
    /// (relatime by default: bring atime past mtime/ctime), unless `flags`
    /// — the descriptor's flags now, whose `O_NOATIME` `fcntl(F_SETFL)`
    /// may have changed since the open; the handle's own for the embedded
    /// API — hold `O_NOATIME`, or the inode has `FS_NOATIME_FL` (`iflags`,
    /// read under `meta`, which an update takes anyway).
    fn touch_atime_as(&self, flags: i32) {
        if flags & libc::O_NOATIME != 0 {
            return;
        }
        let config = &self.fs.config;
        if config.nodiratime && self.inode.kind == FileKind::Directory {
            return;
        }
        match config.atime {
            AtimePolicy::Never => {}
            AtimePolicy::Strict => {
                let mut m = self.inode.meta.lock();
                if !crate::iflags::skips_atime(m.rec.flags) {
                    m.rec.atime = Timespec::now();
                    m.dirty = true;
                }
            }
            AtimePolicy::Relatime => {
                if self.inode.kind == FileKind::Directory {
                    // Its entries' changes move its times in its stripes
                    // without setting `atime_stale` (`dir_attr`): compare
                    // lock-free.
                    let a = self
                        .inode
                        .attr_snapshot()
                        .attr(self.inode.ino, self.inode.kind);
                    if !relatime_due(a.atime, a.mtime, a.ctime) {
                        return;
                    }
                } else if !self.inode.atime_stale.load(Ordering::Relaxed)
                    && !self.data_atime_stale()
                {
                    return;
                }
                let mut m = self.inode.meta.lock();
                if let Body::File(d) = &self.inode.body {
                    // Before the times are read (`pcache` module doc).
                    d.take_atime_stale();
                }
                // A directory's times with its stripes' changes, a file's
                // with its data-side times.
                let a = self.inode.attr_locked(&m);
                if relatime_due(m.rec.atime, a.mtime, a.ctime)
                    && !crate::iflags::skips_atime(m.rec.flags)
                {
                    m.rec.atime = Timespec::now();
                    m.dirty = true;
                }
                if self.inode.atime_stale.load(Ordering::Relaxed) {
                    self.inode.atime_stale.store(false, Ordering::Relaxed);
                }
            }
        }
    }
}

impl OpenFile {
    /// A pure overwrite moved a regular file's times past atime (`pcache`).
    fn data_atime_stale(&self) -> bool {
        let atime = || self.inode.meta.attr().atime();
        matches!(&self.inode.body, Body::File(d) if d.atime_stale_since(atime))
    }

    /// A new handle of `inode` in `fs` (counted on this lane), whose open
    /// count the caller raised (or adopted, born open) for it.
    fn new(fs: &FsInner, inode: &Inode, flags: i32, cred: Cred) -> OpenFile {
        OpenFile {
            fs: fs_ref(fs),
            inode: HeldInode::counted(inode),
            flags,
            cred,
            list_bound: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Take the listing bound out of the handle (a load alone when there
    /// is none).
    fn take_bound(&self) -> Option<Box<ListBound>> {
        if self.list_bound.load(Ordering::Relaxed).is_null() {
            return None;
        }
        let p = self
            .list_bound
            .swap(std::ptr::null_mut(), Ordering::Acquire);
        // SAFETY: a non-null value comes from `Box::into_raw` (`put_bound`)
        // and the swap moved it out: this call owns it alone.
        (!p.is_null()).then(|| unsafe { Box::from_raw(p) })
    }

    /// Give the handle its listing bound (dropping one it held).
    fn put_bound(&self, b: Box<ListBound>) {
        let old = self.list_bound.swap(Box::into_raw(b), Ordering::AcqRel);
        if !old.is_null() {
            // SAFETY: as in `take_bound`: the swap moved it out to us.
            drop(unsafe { Box::from_raw(old) });
        }
    }
}

impl Drop for OpenFile {
    /// A close lowers the open count on its lane only (`Opens::lower`): two
    /// closes of one file, or a close beside a write or a rename of it,
    /// share no written line. Only when a decision waits on the count (a
    /// free or an eviction that found the file open) does it review, under
    /// `meta` (`FsInner::review_closed`): the close that finds no handle
    /// left frees an unlinked inode or offers a linked one to the LRU.
    fn drop(&mut self) {
        drop(self.take_bound());
        self.close_inode();
        // Then the fields: `fs` uncounts the handle (`HandleRef::drop`), after
        // which the engine may go.
    }
}

impl OpenFile {
    fn close_inode(&self) {
        // Pinned before the count goes down: from then on another thread
        // may seal and unhash the inode, whose memory the epoch keeps
        // until this guard goes.
        let guard = crossbeam_epoch::pin();
        let inode: *const Inode = &*self.inode;
        if !self.fs.opens.lower(&self.inode) {
            return;
        }
        // SAFETY: the inode was alive when `guard` was pinned (this
        // handle's count held it hashed); its cache `Arc` is dropped only by
        // a hash node's destruction deferred past every guard pinned before
        // its removal (`icache`), or it is the root, kept by the engine
        // (which `self.fs` keeps). So it stays valid while `guard` is.
        let inode = unsafe { &*inode };
        self.fs.review_closed(inode);
        drop(guard);
    }
}

impl std::fmt::Debug for OpenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenFile")
            .field("ino", &self.inode.ino)
            .field("flags", &self.flags)
            .finish()
    }
}

/// An orphan-table entry held for the length of a truncate; dropping it
/// (success, error or panic) removes the entry.
struct OrphanGuard<'a>(
    &'a dyn crate::orphan::OrphanTable,
    crate::orphan::OrphanSlot,
);

impl Drop for OrphanGuard<'_> {
    fn drop(&mut self) {
        self.0.remove(self.1);
    }
}

/// The checks of an open, without `meta`: the attribute mirror (a racing
/// chmod or chown is seen before or after, as Linux's `may_open` reads
/// `i_mode` without the inode lock). `created`: the caller just made the
/// file, so no permission is asked.
fn open_checks(inode: &Inode, cred: &Cred, flags: i32, created: bool) -> Result<()> {
    let mask = open_mask(inode, flags)?;
    if !created {
        inode.permission_unlocked(cred, mask)?;
        // Only an open for writing or truncating can meet append-only (a
        // read-only open reads no flags).
        if flags & (libc::O_ACCMODE | libc::O_TRUNC) != 0 {
            crate::iflags::may_open(inode.meta.perm_attr().iflags(), flags)?;
        }
    }
    match inode.kind {
        FileKind::Regular | FileKind::Directory => {}
        // Special files' I/O belongs to drivers and pipes, which an
        // embedded engine does not have (the FUSE kernel side opens them
        // itself).
        _ => return Err(Errno::ENXIO),
    }
    if flags & libc::O_NOATIME != 0 && !cred.is_root() && cred.uid != inode.meta.perm_attr().uid() {
        return Err(Errno::EPERM);
    }
    Ok(())
}

/// `may_open`: type checks, then permission for the access mode.
fn open_mask(inode: &Inode, flags: i32) -> Result<u32> {
    if flags & libc::O_DIRECTORY != 0 && inode.kind != FileKind::Directory {
        return Err(Errno::ENOTDIR);
    }
    let mut mask = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => MAY_READ,
        libc::O_WRONLY => MAY_WRITE,
        _ => MAY_READ | MAY_WRITE,
    };
    if flags & libc::O_TRUNC != 0 {
        mask |= MAY_WRITE;
    }
    match inode.kind {
        FileKind::Symlink => return Err(Errno::ELOOP),
        FileKind::Directory if mask & MAY_WRITE != 0 => return Err(Errno::EISDIR),
        _ => {}
    }
    if flags & O_EXEC_OPEN != 0 {
        // `execve`: execute permission, not read (`may_open`'s
        // `MAY_EXEC`), and only of a regular file.
        if inode.kind != FileKind::Regular {
            return Err(Errno::EACCES);
        }
        mask = (mask & !MAY_READ) | MAY_EXEC;
    }
    Ok(mask)
}

impl FsInner {
    /// Open `at` without a counted reference, from the cache under an
    /// epoch guard: the open count is raised first, which fails once a free
    /// or an eviction sealed it (inode doc) — so a raise that succeeds
    /// pins a hashed, current inode, and the checks that follow read its
    /// mirror. Writes only this lane's open-count cache (`opens`), not the
    /// `life` word every counted reference to the file writes. `None`:
    /// not cached, sealed, another generation, or an open that truncates
    /// — the caller takes the counted path.
    fn open_rcu(self: &Arc<Self>, cred: &Cred, at: DirAt, flags: i32) -> Option<Result<OpenFile>> {
        if flags & libc::O_TRUNC != 0 {
            return None;
        }
        let guard = crossbeam_epoch::pin();
        let found = self.iget_rcu(at.ino, &guard)?;
        if !at.matches(found.generation) || !self.opens.raise(found) {
            return None;
        }
        // `found` came from `iget_rcu` under `guard`: the count raised while
        // it was pinned (and so before any removal of its node) keeps it
        // hashed from here, and so alive past the guard (`HeldInode`).
        let file = OpenFile::new(self, found, flags, cred.clone());
        drop(guard);
        // Refused: dropping the handle closes it (the last close decides
        // as any other).
        Some(open_checks(&file.inode, cred, flags, false).map(|()| {
            self.stripe_for_overwrites(&file);
            file
        }))
    }

    /// A regular file opened for writing in place (not `O_APPEND`; an
    /// `O_TRUNC` open empties it first): stripes before its first
    /// overwrites (`FileData::stripe_for_overwrites`), in the lock-free
    /// read design, which alone takes overwrites under stripes.
    fn stripe_for_overwrites(&self, file: &OpenFile) {
        if let Body::File(d) = &file.inode.body {
            if file.writable()
                && file.flags & libc::O_APPEND == 0
                && self.config.variants.read == ReadVariant::Lockless
            {
                d.stripe_for_overwrites();
            }
        }
    }

    /// Open `found`, held by a counted reference (or the root) until the
    /// handle pins it: eviction cannot claim it meanwhile.
    ///
    /// `born_open`: a file this call just made, born open (one open count
    /// set before it was hashed: `NewNode::opens`), which the handle
    /// adopts — nothing could free it between its creation and here. No
    /// permission is asked (`open_checks`' `created`) and nothing is
    /// truncated. Otherwise the checks come first, then the open count is
    /// raised (`ENOENT` once a free sealed it), then `O_TRUNC` truncates.
    ///
    /// `counted` adds a lookup reference and returns the attributes read
    /// in the same `meta` section. A file this call made is counted as is
    /// (its handle pins it). An existing one was found by a name, and is
    /// counted only if still named there (`Meta::still_named`, the rule of
    /// every answer by name); otherwise (unlinked or renamed over since
    /// the name was read, kept only by other handles) the handle is
    /// dropped and the answer is `ENOENT`: the caller reads the name again.
    /// The count comes last, after `O_TRUNC`, so that the attributes it
    /// returns are those after the open and a failed truncate leaves no
    /// count behind (its caller, which gets the error, never forgets one).
    fn open_inode(
        self: &Arc<Self>,
        cred: &Cred,
        found: &IRef<'_>,
        flags: i32,
        born_open: bool,
        counted: bool,
    ) -> Result<(OpenFile, Option<Attr>)> {
        let inode: &Inode = found;
        if !born_open {
            open_checks(inode, cred, flags, false)?;
            if !self.opens.raise(inode) {
                return Err(Errno::ENOENT);
            }
        }
        // A handle holds the inode by pointer and the engine by a per-lane
        // count: neither writes a line shared with other handles.
        let file = OpenFile::new(self, inode, flags, cred.clone());
        // From here a refusal drops the handle, which closes it (the last
        // close decides as any other: a file made unlinked is freed).
        if born_open {
            open_checks(&file.inode, cred, flags, true)?;
        } else if flags & libc::O_TRUNC != 0 && file.inode.kind == FileKind::Regular {
            self.truncate(cred, &file.inode, 0, None, false)?;
        } else {
            self.stripe_for_overwrites(&file);
        }
        if !counted {
            return Ok((file, None));
        }
        let mut m = file.inode.meta.lock();
        // Not freed: the handle pins it.
        if !born_open && !m.still_named() {
            return Err(Errno::ENOENT);
        }
        *m.lookups_mut() += 1;
        let attr = file.inode.attr_locked(&m);
        drop(m);
        Ok((file, Some(attr)))
    }

    /// Open `child`, found as `name` in `dir` (validated: `lookup_child`),
    /// as [`open_inode`](Self::open_inode) does an existing file. A
    /// counted open that truncates holds the name's stripe from before the
    /// truncate to the count, with the entry confirmed to name `child`
    /// (as `remove` confirms its victim): no unlink or rename of the name
    /// runs in between, so the file it truncates is the one it answers,
    /// still named. Without the stripe the name could go after the
    /// truncate and before the count, and the open — whose answer by name
    /// must be linked (`Meta::still_named`) — read the name again and
    /// answered another file (or `ENOENT`) after truncating this one, the
    /// unlinked file another handle keeps: a loss of data no serial order
    /// gives. `ENOENT` (nothing done) when the name no longer names
    /// `child`: the caller reads it again. An uncounted open may answer
    /// the file unlinked (as Linux's open holds the dentry it found), and
    /// takes no stripe.
    pub(crate) fn open_named(
        self: &Arc<Self>,
        cred: &Cred,
        dir: &Inode,
        name: &[u8],
        child: &IRef<'_>,
        flags: i32,
        counted: bool,
    ) -> Result<(OpenFile, Option<Attr>)> {
        let truncating = flags & libc::O_TRUNC != 0 && child.kind == FileKind::Regular;
        if !(counted && truncating) {
            return self.open_inode(cred, child, flags, false, counted);
        }
        // Lock order: the directory's entry lock before the file's data
        // lock (the truncate) and its `meta`.
        let idx = self.dir_write(dir, Stripes::Of(&[name]))?;
        match idx.get(name) {
            // The entry we hold locked links it: not freed from here (a
            // freed one is a stale object of a reused number).
            Some(slot) if slot.ino == child.ino && !child.meta.lock().freed => {}
            _ => return Err(Errno::ENOENT),
        }
        let opened = self.open_inode(cred, child, flags, false, counted);
        drop(idx);
        opened
    }

    /// Set the size of regular file `inode` (checks done by the caller),
    /// its ctime and mtime to now (or mtime to `mtime`); its attributes
    /// after. `by_path`: a `truncate(2)` (no open file, no time asked
    /// for), which to the size the file has, with nothing allocated,
    /// changes no time: tmpfs's `shmem_setattr` moves them only when the
    /// size changes or it frees pages (`info->alloced`), ext4's only when
    /// the size changes, and `truncate(2)` asks for none (`do_truncate`
    /// without `ATTR_MTIME | ATTR_CTIME`), while `ftruncate(2)` and an
    /// `O_TRUNC` open ask for both, so they always move them.
    fn truncate(
        &self,
        cred: &Cred,
        inode: &Inode,
        size: u64,
        mtime: Option<TimeSet>,
        by_path: bool,
    ) -> Result<Attr> {
        let Body::File(data) = &inode.body else {
            return Err(Errno::EINVAL);
        };
        let mut pm = data.write();
        // The clock is read under the data lock (Linux: under the inode
        // lock), so that the times set are not older than those of an
        // overwrite that finished before the lock was taken.
        let now = Timespec::now();
        // A shrinking truncate is crash bookkeeping's other client (seed
        // 002, ext4's `ext4_setattr`): the inode is in the orphan table
        // while its pages go, unless it is there already (unlinked), so
        // that a store whose truncate is not one transaction could finish
        // it at recovery. Removed once the size is recorded.
        let (truncating, quiet) = {
            let m = inode.meta.lock();
            if m.freed {
                return Err(Errno::ENOENT);
            }
            // The record's blocks count every allocated page (the data
            // lock, held, keeps them from changing).
            let quiet = by_path && mtime.is_none() && size == pm.size() && m.rec.blocks == 0;
            let truncating = (size < pm.size() && m.orphan_slot.get().is_none())
                .then(|| self.orphans.add(inode.ino));
            (truncating, quiet)
        };
        let _in_table = truncating.map(|slot| OrphanGuard(&*self.orphans, slot));
        let before = pm.cached_pages();
        let times = (!quiet).then(|| (mtime.map_or(now, |t| t.at(now)), now));
        let freed = pm.truncate(&*self.store, inode.ino, size, times);
        self.cached_pages
            .add(pm.cached_pages() as i64 - before as i64);
        let freed = freed?;
        self.free_blocks.add(freed as i64);
        let mut m = inode.meta.lock();
        self.give_back_stale(pm.take_stale_freed(), &mut m);
        m.rec.size = pm.size();
        debug_assert!(m.rec.blocks >= freed, "freed more blocks than allocated");
        m.rec.blocks -= freed;
        if quiet {
            // The data side's times (and whether the record lags behind
            // them) stay as they were; only a privilege kill below may
            // change the record.
            m.dirty = true;
        } else {
            let now = data_change_time(&pm, &m, now, mtime);
            touch_mc(inode, &mut m, now);
            if let Some(t) = mtime {
                m.rec.mtime = t.at(now);
            }
            // The record holds the data-side times now.
            pm.clear_times_dirty();
        }
        // `do_truncate`: `dentry_needs_remove_privs`, even when the size
        // does not change.
        kill_privs(cred, inode, &mut m);
        Ok(inode.attr_locked(&m))
    }
}

/// Linux `file_remove_privs` / `dentry_needs_remove_privs` on a regular
/// file after a data change (write, truncate, fallocate) by `cred`:
/// setuid/setgid by [`privs_to_kill`], and `security.capability` whenever
/// it is present, even for root (`security_inode_need_killpriv` does not
/// look at the caller). The caller updates ctime.
fn kill_privs(cred: &Cred, inode: &Inode, m: &mut crate::inode::Meta) {
    if m.rec.kind != FileKind::Regular {
        return;
    }
    let kill = privs_to_kill(cred, &m.rec);
    if kill != 0 {
        m.rec.perm &= !kill;
    }
    // Anything removed means the file had privileges; nothing removed,
    // nothing changed (no hint to update, and no second look at the
    // record: this runs on every write that is not a pure overwrite).
    if kill_capability(&mut m.rec) || kill != 0 {
        inode.note_privs(true, &m.rec);
    }
}

impl Fs {
    /// Open inode `ino` with `open(2)` flags (`O_RDONLY`/`O_WRONLY`/`O_RDWR`,
    /// `O_TRUNC`, `O_APPEND`, `O_NOATIME`, `O_DIRECTORY`, and the kernel's
    /// [`O_EXEC_OPEN`] of an `execve`). Directories open read-only;
    /// symlinks give `ELOOP`; device, fifo and socket nodes `ENXIO`.
    pub fn open(&self, cred: &Cred, ino: Ino, flags: i32) -> Result<OpenFile> {
        self.open_checked(cred, ino.into(), flags)
    }

    /// As [`open`](Self::open), for a caller that holds no reference on
    /// the inode (a path walk that counted nothing): `ENOENT` unless the
    /// number still names the generation `at` saw.
    pub fn open_checked(&self, cred: &Cred, at: DirAt, flags: i32) -> Result<OpenFile> {
        if let Some(opened) = self.inner.open_rcu(cred, at, flags) {
            return opened;
        }
        // The counted reference is held until the open count pins the inode.
        let inode = self.inner.iget(at.ino)?;
        if !at.matches(inode.generation) {
            return Err(Errno::ENOENT);
        }
        let (file, _) = self.inner.open_inode(cred, &inode, flags, false, false)?;
        Ok(file)
    }

    /// An `O_PATH` handle on `at`, of any kind (a symlink, a device node
    /// too): no permission is checked (Linux asks only for search
    /// permission on the path, which the caller's walk checked) and no
    /// access is granted — reads, writes, listings and changes through it
    /// are refused; it names the inode (its attributes, a `link` of it)
    /// and keeps an unlinked one alive as any open does. `ENOENT` unless
    /// the number still names the generation `at` saw.
    pub fn open_path(&self, cred: &Cred, at: DirAt) -> Result<OpenFile> {
        let found = self.inner.iget(at.ino)?;
        if !at.matches(found.generation) {
            return Err(Errno::ENOENT);
        }
        // The counted reference is held until the open count pins it.
        if !self.inner.opens.raise(&found) {
            return Err(Errno::ENOENT);
        }
        Ok(OpenFile::new(
            &self.inner,
            &found,
            libc::O_PATH,
            cred.clone(),
        ))
    }

    /// Look up `name` in `parent` and open it, creating a regular file with
    /// `mode & !umask` if absent and `flags` has `O_CREAT` (`O_EXCL`: the
    /// name must not exist). The lookup is lock-free; an entry unlinked
    /// between lookup and open is opened as it was (as on Linux, where the
    /// open holds the dentry it found) while something else keeps the
    /// inode; one freed meanwhile (unlinked, or renamed over, with nothing
    /// keeping it) is looked up (or, with `O_CREAT`, created) again — so a
    /// name that stays linked throughout, whatever it names, is never
    /// `ENOENT`. A file this call creates is born open, so it is opened
    /// even if unlinked at once. `counted` adds a lookup reference (FUSE
    /// CREATE), to an existing file only if still named when it is counted
    /// (`Meta::still_named`; else the name is read again), and its
    /// attributes are then read in the same step: a counted open of an
    /// existing name never answers a link count of 0. Returns the
    /// attributes after the open (after `O_TRUNC`), the handle, and whether
    /// the file was created.
    #[allow(clippy::too_many_arguments)]
    pub fn open_at(
        &self,
        cred: &Cred,
        parent: impl Into<DirAt>,
        name: &[u8],
        flags: i32,
        mode: u32,
        umask: u32,
        counted: bool,
    ) -> Result<(Attr, OpenFile, bool)> {
        let fs = &self.inner;
        let creat = flags & libc::O_CREAT != 0;
        let parent = parent.into();
        let ((file, attr), created) = fs.with_dir(parent, |dir| {
            dir.permission_unlocked(cred, MAY_EXEC)?;
            if is_dot_or_dotdot(name) {
                if creat {
                    return Err(Errno::EISDIR);
                }
                // Counted as any other name (the caller forgets one):
                // counting nothing here, its forget took a reference
                // someone else held.
                let target = fs.lookup(cred, parent, name, counted)?;
                // By number *and* generation: nothing holds the directory
                // found (uncounted), which may be removed and its number
                // reused by another inode before the open.
                let at = DirAt::checked(target.ino, target.generation);
                match self.open_checked(cred, at, flags) {
                    Ok(file) => Ok(((file, counted.then_some(target)), false)),
                    Err(e) => {
                        // Our count keeps the number to this inode.
                        if counted {
                            self.forget(target.ino, 1);
                        }
                        Err(e)
                    }
                }
            } else if !creat {
                check_name(name)?;
                loop {
                    let child = fs.lookup_child(dir, name)?;
                    match fs.open_named(cred, dir, name, &child, flags, counted) {
                        Ok(opened) => return Ok((opened, false)),
                        // Freed, or (counted) no longer named, since the
                        // lookup: the open comes after that unlink or
                        // rename, so the name is looked up again.
                        Err(Errno::ENOENT) => crate::sync::yield_now(),
                        Err(e) => return Err(e),
                    }
                }
            } else {
                check_name(name)?;
                self.open_or_create(cred, dir, name, flags, mode, umask, counted)
            }
        })?;
        let attr = attr.unwrap_or_else(|| {
            let m = file.inode.meta.lock();
            file.inode.attr_locked(&m)
        });
        Ok((attr, file, created))
    }

    /// `open(dir, O_TMPFILE | flags, mode)` (FUSE TMPFILE): a new regular
    /// file with `mode & !umask` and no name, opened with `flags`'s
    /// access mode (`O_TMPFILE`'s bits, `O_CREAT`, `O_TRUNC` and `O_EXCL`
    /// are taken off). It lives while open or looked up and is freed
    /// after, as an unlinked file; without `O_EXCL` a [`link`](Fs::link)
    /// of its number may give it a name (Linux's `I_LINKABLE`; `linkat`
    /// through `/proc/self/fd`). Write access is required
    /// (`EINVAL` otherwise, as `open(2)`), and the checks of a create in
    /// `dir`. `counted` adds a lookup reference (FUSE hands the inode to
    /// the kernel). Returns its attributes (link count 0) and the handle.
    #[allow(clippy::too_many_arguments)]
    pub fn tmpfile(
        &self,
        cred: &Cred,
        dir: impl Into<DirAt>,
        flags: i32,
        mode: u32,
        umask: u32,
        counted: bool,
    ) -> Result<(Attr, OpenFile)> {
        if flags & libc::O_ACCMODE == libc::O_RDONLY {
            return Err(Errno::EINVAL);
        }
        let fs = &self.inner;
        let linkable = flags & libc::O_EXCL == 0;
        let flags = flags & !(libc::O_TMPFILE | libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
        let perm = creation_perm(FileKind::Regular, mode, umask);
        let requested = creation_perm(FileKind::Regular, mode, 0);
        let (file, attr) = fs.with_dir(dir.into(), |d| {
            if d.kind != FileKind::Directory {
                return Err(Errno::ENOTDIR);
            }
            // Born open and an orphan (`tmpfile_in`): nothing frees it
            // before the handle adopts its open count, and a refused open
            // frees it at the handle's close.
            let inode = fs.tmpfile_in(cred, d, perm, requested, linkable)?;
            fs.open_inode(cred, &inode, flags, true, counted)
        })?;
        let attr = attr.unwrap_or_else(|| {
            let m = file.inode.meta.lock();
            file.inode.attr_locked(&m)
        });
        Ok((attr, file))
    }

    /// `O_CREAT` on a plain name: open it if it exists (found lock-free,
    /// as Linux's opportunistic lookup for `O_CREAT` does), else create
    /// it; a create that finds the name taken by a racing create opens
    /// that one (or fails with `EEXIST` under `O_EXCL`).
    #[allow(clippy::too_many_arguments)]
    fn open_or_create(
        &self,
        cred: &Cred,
        dir: &Inode,
        name: &[u8],
        flags: i32,
        mode: u32,
        umask: u32,
        counted: bool,
    ) -> Result<((OpenFile, Option<Attr>), bool)> {
        let fs = &self.inner;
        let exclusive = flags & libc::O_EXCL != 0;
        loop {
            if exclusive {
                // EEXIST needs no reference on what is there.
                if fs.child_exists(dir, name)? {
                    return Err(Errno::EEXIST);
                }
            } else {
                match fs.lookup_child(dir, name) {
                    Ok(child) => {
                        if child.kind == FileKind::Directory {
                            return Err(Errno::EISDIR);
                        }
                        match fs.open_named(cred, dir, name, &child, flags, counted) {
                            Ok(opened) => return Ok((opened, false)),
                            // Unlinked and freed (or being freed), or
                            // (counted) no longer named, since the lookup:
                            // the open comes after that unlink, so the
                            // name is looked up (or created) again.
                            Err(Errno::ENOENT) => continue,
                            Err(e) => return Err(e),
                        }
                    }
                    Err(Errno::ENOENT) => {}
                    Err(e) => return Err(e),
                }
            }
            // Born open (`opens: 1`, which the handle below adopts): an
            // unlink between the create and the open finds it open and
            // leaves it an orphan, as Linux's open holds what it created.
            // Born unopened, it was freed by such an unlink (nothing kept
            // it) and the open failed with `ENOENT`.
            let node = NewNode {
                kind: FileKind::Regular,
                perm: creation_perm(FileKind::Regular, mode, umask),
                requested: creation_perm(FileKind::Regular, mode, 0),
                rdev: 0,
                target: &[],
                lookups: 0,
                opens: 1,
                needs_mknod_cap: false,
            };
            if let Made::New(inode) = fs.create_in(cred, dir, name, &node, exclusive)? {
                return Ok((fs.open_inode(cred, &inode, flags, true, counted)?, true));
            }
        }
    }

    /// Read at `offset` into `buf`; returns the bytes read (0 at or past EOF).
    pub fn read(&self, file: &OpenFile, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.read_flags(file, offset, buf, file.flags)
    }

    /// As [`read`](Self::read), for a descriptor whose flags are now
    /// `flags`: only its `O_NOATIME` counts (whether atime moves), which
    /// `fcntl(F_SETFL)` may have set or cleared since the open. FUSE's
    /// READ carries the descriptor's current flags.
    pub fn read_flags(
        &self,
        file: &OpenFile,
        offset: u64,
        buf: &mut [u8],
        flags: i32,
    ) -> Result<usize> {
        if !file.readable() {
            return Err(Errno::EBADF);
        }
        let data = match &file.inode.body {
            Body::File(d) => d,
            Body::Dir(_) => return Err(Errno::EISDIR),
            Body::Other => return Err(Errno::EINVAL),
        };
        if buf.is_empty() {
            return Ok(0);
        }
        let fs = &self.inner;
        let (n, loaded) = fs
            .page_cache
            .read(data, &*fs.store, file.inode.ino, offset, buf);
        if loaded > 0 {
            fs.cached_pages.add(loaded as i64);
            fs.enforce_page_budget();
        }
        let n = n?;
        file.touch_atime_as(flags);
        Ok(n)
    }

    /// Write `data` at `offset` (at end of file for `O_APPEND`); returns the
    /// bytes written and the offset just past them. Fails with `ENOSPC`
    /// before changing anything when the new pages do not fit, and `EFBIG`
    /// at [`FILE_SIZE_MAX`]. A write of at least one byte removes
    /// privileges as Linux's `file_remove_privs`: setuid/setgid by the
    /// opener's credentials, `security.capability` always.
    pub fn write(&self, file: &OpenFile, offset: u64, data: &[u8]) -> Result<(usize, u64)> {
        self.write_data(file, offset, data, Some(&file.cred))
    }

    /// As [`Fs::write`], with setuid/setgid removed by the rules for
    /// `writer` instead of the opener, in the same step as the data change
    /// (Linux decides by the writing task: a write through an fd opened by
    /// someone else, or a write by a task with `CAP_FSETID`, which passes
    /// [`Cred::root`] to keep the bits). `security.capability` goes anyway.
    pub fn write_as(
        &self,
        file: &OpenFile,
        offset: u64,
        data: &[u8],
        writer: &Cred,
    ) -> Result<(usize, u64)> {
        self.write_data(file, offset, data, Some(writer))
    }

    /// As [`Fs::write`], for the write-back of pages a shared mapping
    /// dirtied (FUSE's `FUSE_WRITE_CACHE`): Linux's `page_mkwrite` only
    /// updates the times, so neither setuid/setgid nor the file capability
    /// is removed (tmpfs keeps them after a store through `mmap`).
    pub fn write_back_mapped(
        &self,
        file: &OpenFile,
        offset: u64,
        data: &[u8],
    ) -> Result<(usize, u64)> {
        self.write_data(file, offset, data, None)
    }

    /// Write `data` at `offset`; `remove_privs`: the data change removes
    /// privileges (`file_remove_privs`) as a `write(2)` by that caller
    /// does; `None`: it removes nothing.
    ///
    /// A *pure overwrite* — not `O_APPEND`, all of it inside the current
    /// size, on pages already allocated (no hole to reserve), and no
    /// privilege to remove (the file's privilege hint, `pcache`) — changes
    /// only the pages and the data-side times (`pcache`), under the data
    /// lock alone: no `meta`, no attribute mirror, no
    /// `Inode::atime_stale`. Its times reach the record at writeback. Every
    /// other write sets the record's size, blocks and times under `meta`
    /// as well. Once two lanes made pure overwrites of a file, one that
    /// stays inside one cached page takes only that page's stripe
    /// (`pcache::lanes`), not the data lock.
    fn write_data(
        &self,
        file: &OpenFile,
        offset: u64,
        data: &[u8],
        remove_privs: Option<&Cred>,
    ) -> Result<(usize, u64)> {
        if !file.writable() {
            return Err(Errno::EBADF);
        }
        let lock = match &file.inode.body {
            Body::File(d) => d,
            Body::Dir(_) => return Err(Errno::EISDIR),
            Body::Other => return Err(Errno::EINVAL),
        };
        if data.is_empty() {
            return Ok((0, offset));
        }
        let fs = &self.inner;
        let ino = file.inode.ino;
        let append = file.flags & libc::O_APPEND != 0;
        let keeps_privs = remove_privs.is_none() || !lock.may_have_privs();
        if !append && keeps_privs && lock.try_overwrite(offset, data) {
            return Ok((data.len(), offset + data.len() as u64));
        }
        let mut pm = lock.write();
        let off = if append { pm.size() } else { offset };
        if off >= FILE_SIZE_MAX {
            return Err(Errno::EFBIG);
        }
        let len = (data.len() as u64).min(FILE_SIZE_MAX - off) as usize;
        let before = pm.cached_pages();
        let holes = match pm.prepare(&*fs.store, ino, page_range(off, len as u64)) {
            Ok(h) if fs.free_blocks.try_sub(h) => Ok(h),
            Ok(_) => Err(Errno::ENOSPC),
            Err(e) => Err(e),
        };
        let holes = match holes {
            Ok(h) => h,
            Err(e) => {
                fs.cached_pages
                    .add(pm.cached_pages() as i64 - before as i64);
                return Err(e);
            }
        };
        let end = off + len as u64;
        let pure = !append
            && end <= pm.size()
            && holes == 0
            && (remove_privs.is_none() || !lock.may_have_privs());
        let now = Timespec::now();
        pm.write(off, &data[..len], now);
        let grown = pm.cached_pages() as i64 - before as i64;
        if pure {
            let stripes_allowed = fs.config.variants.read == ReadVariant::Lockless;
            pm.note_pure_overwrite(stripes_allowed.then(crate::lane::lane));
        } else {
            let mut m = file.inode.meta.lock();
            fs.give_back_stale(pm.take_stale_freed(), &mut m);
            let now = data_change_time(&pm, &m, now, None);
            m.rec.size = pm.size();
            m.rec.blocks += holes;
            touch_mc(&file.inode, &mut m, now);
            // The record holds the data-side times (`now`) again.
            pm.clear_times_dirty();
            if let Some(cred) = remove_privs {
                kill_privs(cred, &file.inode, &mut m);
            }
        }
        drop(pm);
        fs.cached_pages.add(grown);
        if grown > 0 {
            fs.enforce_page_budget();
        }
        Ok((len, end))
    }

    /// `fallocate(2)`: mode 0, [`FALLOC_FL_KEEP_SIZE`],
    /// `PUNCH_HOLE | KEEP_SIZE`, [`FALLOC_FL_ZERO_RANGE`] (± KEEP_SIZE).
    pub fn fallocate(&self, file: &OpenFile, mode: i32, offset: i64, len: i64) -> Result<()> {
        self.fallocate_as(file, mode, offset, len, &file.cred)
    }

    /// As [`Fs::fallocate`], with setuid/setgid removed by the rules for
    /// `caller` (the task calling `fallocate(2)`), in the same step.
    pub fn fallocate_as(
        &self,
        file: &OpenFile,
        mode: i32,
        offset: i64,
        len: i64,
        caller: &Cred,
    ) -> Result<()> {
        if offset < 0 || len <= 0 {
            return Err(Errno::EINVAL);
        }
        let known = FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE;
        let punch = mode & FALLOC_FL_PUNCH_HOLE != 0;
        let zero = mode & FALLOC_FL_ZERO_RANGE != 0;
        let keep = mode & FALLOC_FL_KEEP_SIZE != 0;
        if mode & !known != 0 || (punch && !keep) || (punch && zero) {
            return Err(Errno::EOPNOTSUPP);
        }
        if !file.writable() {
            return Err(Errno::EBADF);
        }
        crate::iflags::may_fallocate(file.inode.meta.perm_attr().iflags(), mode)?;
        let lock = match (&file.inode.body, file.inode.kind) {
            (Body::File(d), _) => d,
            (_, FileKind::Fifo) => return Err(Errno::ESPIPE),
            (Body::Dir(_), _) => return Err(Errno::EISDIR),
            _ => return Err(Errno::ENODEV),
        };
        let end = offset.checked_add(len).ok_or(Errno::EFBIG)? as u64;
        if end > FILE_SIZE_MAX {
            return Err(Errno::EFBIG);
        }
        let (off, len) = (offset as u64, len as u64);
        let fs = &self.inner;
        let ino = file.inode.ino;
        let mut pm = lock.write();
        let before = pm.cached_pages();
        // Every step costs O(extents + cached pages in the range), never
        // O(len): allocation is tracked by range (see `pcache`).
        let result = (|| -> Result<(i64, u64)> {
            if punch {
                let freed = pm.punch(&*fs.store, ino, off, len)?;
                return Ok((-(freed as i64), pm.size()));
            }
            if !keep && end > pm.size() {
                // The size grows: the old last page's tail reads zeros.
                pm.load_eof_page(&*fs.store, ino)?;
            }
            let range = page_range(off, len);
            let free = fs.free_blocks.sum().max(0) as u64;
            let holes = pm.holes(&*fs.store, ino, range.clone(), free)?;
            if !fs.free_blocks.try_sub(holes) {
                return Err(Errno::ENOSPC);
            }
            let new_size = (!keep).then_some(end);
            let done = if zero {
                pm.zero_range(&*fs.store, ino, off, len, new_size)
            } else {
                pm.allocate(range, new_size);
                Ok(())
            };
            if let Err(e) = done {
                fs.free_blocks.add(holes as i64);
                return Err(e);
            }
            Ok((holes as i64, pm.size()))
        })();
        fs.cached_pages
            .add(pm.cached_pages() as i64 - before as i64);
        let (block_delta, size) = result?;
        if block_delta < 0 {
            fs.free_blocks.add(-block_delta);
        }
        let now = Timespec::now();
        pm.set_times(now, now);
        let mut m = file.inode.meta.lock();
        fs.give_back_stale(pm.take_stale_freed(), &mut m);
        let now = data_change_time(&pm, &m, now, None);
        m.rec.size = size;
        let blocks = m.rec.blocks.checked_add_signed(block_delta);
        debug_assert!(blocks.is_some(), "block count out of range");
        m.rec.blocks = blocks.unwrap_or(0);
        touch_mc(&file.inode, &mut m, now);
        pm.clear_times_dirty();
        // `file_modified`, as a write.
        kill_privs(caller, &file.inode, &mut m);
        Ok(())
    }

    /// Make the file's data and metadata durable (one path for every store;
    /// `datasync` may skip metadata that is not needed to read the data).
    pub fn fsync(&self, file: &OpenFile, datasync: bool) -> Result<()> {
        let _ = datasync;
        if file.is_path() {
            return Err(Errno::EBADF);
        }
        self.inner.writeback(&file.inode)?;
        self.inner.store.sync()
    }

    /// List directory `file` from `offset` (0 = start; `.` and `..`
    /// included). `emit` returns `true` when it wants no more entries. The
    /// directory is not locked while `emit` runs, so it may call back into
    /// the file system.
    pub fn readdir(
        &self,
        file: &OpenFile,
        offset: u64,
        emit: &mut dyn FnMut(DirEntry<'_>) -> bool,
    ) -> Result<()> {
        self.readdir_flags(file, offset, file.flags, emit)
    }

    /// As [`readdir`](Self::readdir), for a descriptor whose flags are now
    /// `flags`: only its `O_NOATIME` counts (whether atime moves), which
    /// `fcntl(F_SETFL)` may have set or cleared since the open. FUSE's
    /// READDIR and READDIRPLUS carry the descriptor's current flags, as
    /// its READ does ([`read_flags`](Self::read_flags)).
    pub fn readdir_flags(
        &self,
        file: &OpenFile,
        offset: u64,
        flags: i32,
        emit: &mut dyn FnMut(DirEntry<'_>) -> bool,
    ) -> Result<()> {
        let dir = &file.inode;
        if file.is_path() {
            return Err(Errno::EBADF);
        }
        if dir.kind != FileKind::Directory {
            return Err(Errno::ENOTDIR);
        }
        // The listing's bound (`dir` module doc, "A listing ends where it
        // began"), out of the handle while this call lists; a listing from
        // the start drops the one before. Only the caller's own changes
        // between calls can keep a listing going, so a listing without a
        // bound takes one when a call stops early (before the caller can
        // change anything) or when a call after the first lists anything
        // (the caller may have renamed what the first returned); one that
        // a single call completes takes none. Calls on one handle take
        // turns (the kernel holds the file's position lock around each): a
        // racing call would list unbounded, never wrongly bounded.
        let held = file.take_bound();
        let bound = if offset == 0 { None } else { held };
        let keep_bound = |file: &OpenFile, bound: Option<Box<ListBound>>, take_new: bool| {
            let b = match bound {
                Some(b) => b,
                None if take_new => Box::new(self.inner.dir_read(dir)?.list_bound()),
                None => return Ok(()),
            };
            file.put_bound(b);
            Ok(())
        };
        let stop_early = |file: &OpenFile, bound| keep_bound(file, bound, true);
        let mut emitted = false;
        let mut off = offset;
        if off == 0 {
            let me = DirEntry {
                ino: dir.ino,
                kind: FileKind::Directory,
                name: b".",
                next_offset: 1,
            };
            if emit(me) {
                return stop_early(file, bound);
            }
            off = 1;
        }
        if off == 1 {
            let parent = dir.parent.load(Ordering::Acquire);
            let up = DirEntry {
                ino: parent,
                kind: FileKind::Directory,
                name: b"..",
                next_offset: 2,
            };
            if emit(up) {
                return stop_early(file, bound);
            }
            off = 2;
        }
        // Offsets are listing positions (`dir::position_of`), increasing
        // in listing order; the walk goes by cookie.
        let Some((mut off, skip_below)) = resume_after(off) else {
            // Past every entry.
            keep_bound(file, bound, false)?;
            file.touch_atime_as(flags);
            return Ok(());
        };
        let mut batch = ListBatch::default();
        loop {
            batch.clear();
            self.inner.dir_read(dir)?.list_into(off, 64, &mut batch);
            if batch.is_empty() {
                break;
            }
            emitted = true;
            for (name, slot) in batch.iter() {
                if bound
                    .as_deref()
                    .is_some_and(|b| !below_bound(b, slot.cookie))
                    || partition_of(slot.cookie) < skip_below
                {
                    // Linked since the listing began, or before the
                    // offset (one no entry returned): not listed.
                    off = slot.cookie;
                    continue;
                }
                let e = DirEntry {
                    ino: slot.ino,
                    kind: slot.kind,
                    name,
                    next_offset: position_of(slot.cookie),
                };
                if emit(e) {
                    file.touch_atime_as(flags);
                    return stop_early(file, bound);
                }
                off = slot.cookie;
            }
        }
        keep_bound(file, bound, emitted && offset != 0)?;
        file.touch_atime_as(flags);
        Ok(())
    }

    /// Change attributes (chmod, chown, truncate, utimens). `handle` is the
    /// open file the change came through (ftruncate, futimens), if any.
    /// All checks pass before anything changes. Returns the attributes
    /// after the change.
    pub fn setattr(
        &self,
        cred: &Cred,
        ino: Ino,
        ch: &SetAttr,
        handle: Option<&OpenFile>,
    ) -> Result<Attr> {
        self.setattr_impl(cred, ino, ch, handle, true)
            .map(|a| a.expect("attributes asked for"))
    }

    /// As [`setattr`](Self::setattr), for a caller that wants no attributes
    /// back (`chmod(2)`, `chown(2)`, `utimensat(2)` return none): a regular
    /// file's data-side times (`pcache`), which a concurrent overwrite
    /// writes, are then not read.
    pub fn setattr_no_attr(
        &self,
        cred: &Cred,
        ino: Ino,
        ch: &SetAttr,
        handle: Option<&OpenFile>,
    ) -> Result<()> {
        self.setattr_impl(cred, ino, ch, handle, false).map(drop)
    }

    // Inlined into both callers, so that `want_attr` is a constant in each
    // and `setattr`'s attributes are not moved through an `Option` (an
    // out-of-line copy cost ftruncate 2-3 %).
    #[inline(always)]
    fn setattr_impl(
        &self,
        cred: &Cred,
        ino: Ino,
        ch: &SetAttr,
        handle: Option<&OpenFile>,
        want_attr: bool,
    ) -> Result<Option<Attr>> {
        let fs = &self.inner;
        if !ch.times_valid() {
            return Err(Errno::EINVAL);
        }
        if handle.is_some_and(OpenFile::is_path) {
            // An `O_PATH` handle changes nothing (Linux: `EBADF`).
            return Err(Errno::EBADF);
        }
        // Through a handle of this inode (ftruncate, futimens): the inode
        // it holds, without a lookup and a count in the inode cache.
        let counted;
        let inode: &Inode = match handle {
            Some(h) if h.inode.ino == ino => &h.inode,
            _ => {
                counted = fs.iget(ino)?;
                &counted
            }
        };
        {
            let m = inode.meta.lock();
            if m.freed {
                return Err(Errno::ENOENT);
            }
            let rec = &m.rec;
            let owner = owner_or_root(cred, rec);
            if let Some(size) = ch.size {
                match inode.kind {
                    FileKind::Directory => return Err(Errno::EISDIR),
                    FileKind::Regular => {}
                    _ => return Err(Errno::EINVAL),
                }
                match handle {
                    Some(h) if !h.writable() => return Err(Errno::EINVAL),
                    Some(_) => {}
                    None => perm::permission(cred, rec, MAY_WRITE)?,
                }
                // Append-only's `EPERM` (`vfs_truncate`, `do_ftruncate`)
                // before `EFBIG`; the call below repeats it harmlessly.
                crate::iflags::may_setattr(rec.flags, ch, handle.is_some())?;
                if size > FILE_SIZE_MAX {
                    return Err(Errno::EFBIG);
                }
            }
            // `notify_change`'s `may_setattr` comes before the owner checks.
            crate::iflags::may_setattr(rec.flags, ch, handle.is_some())?;
            if !cred.is_root() {
                if ch.uid.is_some_and(|u| u != rec.uid || cred.uid != rec.uid) {
                    return Err(Errno::EPERM);
                }
                if ch
                    .gid
                    .is_some_and(|g| cred.uid != rec.uid || (!cred.in_group(g) && g != rec.gid))
                {
                    return Err(Errno::EPERM);
                }
            }
            if ch.mode.is_some() && !owner {
                return Err(Errno::EPERM);
            }
            // Only "both UTIME_NOW" is the touch case that write permission
            // allows; any other time change needs the owner (Linux's
            // ATTR_TIMES_SET rule).
            let touch = ch.atime == Some(TimeSet::Now) && ch.mtime == Some(TimeSet::Now);
            let explicit = !touch && (ch.atime.is_some() || ch.mtime.is_some());
            if explicit && !owner {
                return Err(Errno::EPERM);
            }
            if touch && !owner && handle.is_none_or(|h| !h.writable()) {
                perm::permission(cred, rec, MAY_WRITE)?;
            }
        }
        if let Some(size) = ch.size {
            // Without an open file and a time to set, a `truncate(2)`.
            let by_path = handle.is_none() && ch.ctime.is_none();
            let attr = fs.truncate(cred, inode, size, ch.mtime, by_path)?;
            let only_size = SetAttr {
                size: ch.size,
                mtime: ch.mtime,
                ..SetAttr::default()
            };
            if *ch == only_size {
                // Size, ctime and mtime are set: nothing else to change.
                return Ok(Some(attr));
            }
        }
        // A directory's mode and owner are what creates in it check and
        // inherit, under one stripe of its entry lock: hold them all. Its
        // size and times changed in the stripes (`dir_attr`) move into the
        // record first, so that times set here are what stat shows.
        let frozen = fs.dir_freeze(inode);
        if let Some(f) = &frozen {
            f.fold(|c, next| fold_dir_changes(inode, c, next, true));
        }
        // A regular file's mtime lives on its data side (`pcache`): a change
        // of the times takes the data lock, folds what a pure overwrite left
        // there into the record, and sets the data side to the result.
        let mut data_side = match &inode.body {
            Body::File(d) if ch.mtime.is_some() || ch.ctime.is_some() => Some(d.write()),
            _ => None,
        };
        let mut m = inode.meta.lock();
        if let Some(pm) = data_side.as_mut().filter(|pm| pm.times_dirty()) {
            fold_file_times(pm, &mut m);
        }
        // The clock is read under `meta` (and the data lock, when the times
        // change), so that the ctime set is not older than that of a change
        // that finished before the lock was taken, nor a `UTIME_NOW` older
        // than an overwrite's (Linux reads it under the inode lock).
        let now = Timespec::now();
        let had_privs = has_privs(&m.rec);
        if ch.uid.is_some() || ch.gid.is_some() {
            // `chown_common` decides from the inode as it was, before the
            // change (`setattr_should_drop_sgid`): setgid goes if it is
            // group-executable, or if the caller is neither in the file's
            // current group nor privileged.
            let drop_sgid =
                m.rec.perm & S_IXGRP != 0 || (!cred.is_root() && !cred.in_group(m.rec.gid));
            if let Some(u) = ch.uid {
                m.rec.uid = u;
            }
            if let Some(g) = ch.gid {
                m.rec.gid = g;
            }
            if inode.kind != FileKind::Directory {
                // `chown_common` adds ATTR_KILL_PRIV on a non-directory:
                // `setattr_prepare` → `security_inode_killpriv`.
                kill_capability(&mut m.rec);
                m.rec.perm &= !S_ISUID;
                if drop_sgid {
                    m.rec.perm &= !S_ISGID;
                }
            }
        }
        if let Some(mode) = ch.mode {
            let mut perm = (mode & 0o7777) as u16;
            if !cred.is_root() && !cred.in_group(m.rec.gid) {
                perm &= !S_ISGID;
            }
            m.rec.perm = perm;
            // `posix_acl_chmod`: the access ACL takes the new bits.
            crate::acl::chmod(&mut m.rec);
        }
        if let Some(t) = ch.atime {
            m.rec.atime = t.at(now);
        }
        if let Some(t) = ch.mtime {
            m.rec.mtime = t.at(now);
        }
        let changed = ch.mode.is_some()
            || ch.uid.is_some()
            || ch.gid.is_some()
            || ch.size.is_some()
            || ch.atime.is_some()
            || ch.mtime.is_some()
            || ch.ctime.is_some();
        if changed {
            touch_c(inode, &mut m, ch.ctime.unwrap_or(now));
        }
        if let Some(pm) = &data_side {
            pm.set_times(m.rec.mtime, m.rec.ctime);
        }
        inode.note_privs(had_privs, &m.rec);
        Ok(want_attr.then(|| inode.attr_locked(&m)))
    }
}

#[cfg(all(test, lanefs_shuttle))]
mod model {
    use crate::{Attr, Cred, Fs, OpenFile};
    use lanefs_store::ROOT_INO;
    use shuttle::thread;

    /// Create `/f` read-write as root: its attributes and the handle.
    fn create_f(fs: &Fs) -> (Attr, OpenFile) {
        let flags = libc::O_CREAT | libc::O_RDWR;
        let (attr, f, _) = fs
            .open_at(&Cred::root(), ROOT_INO, b"f", flags, 0o644, 0, false)
            .unwrap();
        (attr, f)
    }

    /// With `h` the last handle of an unlinked file: the file is still
    /// counted as used and the engine's check passes; once `h` is closed
    /// the file is freed (`files_free` back to `free_before`), exactly once.
    fn assert_freed_at_last_close(fs: &Fs, free_before: u64, h: OpenFile) {
        let files_free = || fs.statfs().unwrap().files_free;
        assert_eq!(files_free(), free_before - 1, "freed while open");
        fs.check().unwrap();
        drop(h);
        assert_eq!(files_free(), free_before, "not freed once");
        fs.check().unwrap();
    }

    /// A pure overwrite changes a file's times on its data side only (no
    /// `meta`), while a stat reads them lock-free and a writeback folds them
    /// into the record. The stat sees the times before or after, never
    /// older than before and never a ctime behind the mtime; once both are
    /// done, a sync leaves the record with exactly the mtime stat shows
    /// (a writeback that ran first left the overwrite's times dirty, one
    /// that ran after folded them).
    #[test]
    fn model_pure_overwrite_vs_stat_and_writeback() {
        crate::sync::check_random(
            || {
                let fs = Fs::new_in_memory();
                let (attr, f) = create_f(&fs);
                fs.write(&f, 0, &[1; 100]).unwrap();
                fs.sync().unwrap();
                let before = fs.getattr(attr.ino).unwrap();
                let writer = {
                    let fs = fs.clone();
                    thread::spawn(move || {
                        fs.write(&f, 10, b"x").unwrap();
                    })
                };
                let syncer = {
                    let fs = fs.clone();
                    thread::spawn(move || fs.sync().unwrap())
                };
                let seen = fs.getattr(attr.ino).unwrap();
                assert!(seen.mtime >= before.mtime, "mtime went back");
                assert!(seen.ctime >= seen.mtime, "ctime behind mtime");
                assert_eq!(seen.size, 100);
                writer.join().unwrap();
                syncer.join().unwrap();
                let after = fs.getattr(attr.ino).unwrap();
                assert!(after.mtime >= seen.mtime);
                fs.sync().unwrap();
                let rec = fs.store().read_inode(attr.ino).unwrap().unwrap();
                assert_eq!((rec.mtime, rec.ctime), (after.mtime, after.ctime));
                fs.check().unwrap();
            },
            crate::sync::model_iterations(),
        );
    }

    /// Every change reads the clock under the lock that orders it (the data
    /// lock, `meta`): a pure overwrite (data lock only), an ftruncate to
    /// the same size (data lock, then `meta`) and a chmod (`meta` only)
    /// race a stat. Under the model the clock follows the schedule, so a
    /// change that read it before its lock and set its times after a later
    /// change finished shows as stat's times going back. Two stats never
    /// see mtime or ctime go back, and the final ctime is no older than any
    /// change returned.
    #[test]
    fn model_overwrite_vs_ftruncate_and_chmod_times_never_go_back() {
        use crate::SetAttr;
        crate::sync::check_random(
            || {
                let fs = Fs::new_in_memory();
                let (attr, f) = create_f(&fs);
                fs.write(&f, 0, &[1; 100]).unwrap();
                let g = f.reopen_unchecked(libc::O_RDWR).unwrap();
                let ino = attr.ino;
                let writer = {
                    let fs = fs.clone();
                    thread::spawn(move || {
                        fs.write(&f, 10, b"x").unwrap();
                    })
                };
                let truncater = {
                    let fs = fs.clone();
                    thread::spawn(move || {
                        let ch = SetAttr {
                            size: Some(100),
                            ..SetAttr::default()
                        };
                        fs.setattr(&Cred::root(), ino, &ch, Some(&g)).unwrap().ctime
                    })
                };
                let chmoder = {
                    let fs = fs.clone();
                    thread::spawn(move || {
                        let ch = SetAttr {
                            mode: Some(0o600),
                            ..SetAttr::default()
                        };
                        fs.setattr(&Cred::root(), ino, &ch, None).unwrap().ctime
                    })
                };
                let a = fs.getattr(ino).unwrap();
                let b = fs.getattr(ino).unwrap();
                assert!(b.mtime >= a.mtime, "mtime went back");
                assert!(b.ctime >= a.ctime, "ctime went back");
                writer.join().unwrap();
                let returned = [truncater.join().unwrap(), chmoder.join().unwrap()];
                let end = fs.getattr(ino).unwrap();
                assert!(end.mtime >= b.mtime && end.ctime >= b.ctime);
                for c in returned {
                    assert!(end.ctime >= c, "ctime older than a finished change's");
                }
                fs.check().unwrap();
            },
            crate::sync::model_iterations(),
        );
    }

    /// Closes lower the open count without `meta` unless they are the last
    /// (`OpenFile::drop`). Two handles closed on two threads while a third
    /// unlinks the file and a fourth opens a second handle from the first
    /// (`reopen_unchecked`, which fails once the inode is freed): the
    /// inode is freed exactly once, after its last handle, and never while
    /// a handle is open — the free counts come back exactly, no orphan is
    /// left, and the engine's check passes.
    #[test]
    fn model_closes_vs_unlink_and_reopen() {
        crate::sync::check_random(
            || {
                let fs = Fs::new_in_memory();
                let r = Cred::root();
                let free_before = fs.statfs().unwrap().files_free;
                let (_, a) = create_f(&fs);
                let (_, b, _) = fs
                    .open_at(&r, ROOT_INO, b"f", libc::O_RDWR, 0, 0, false)
                    .unwrap();
                let reopener = thread::spawn(move || {
                    // `a` is open until this thread drops it: the reopen
                    // finds the inode alive.
                    let c = a
                        .reopen_unchecked(libc::O_RDONLY)
                        .expect("reopen of an open file");
                    drop(a);
                    c
                });
                let closer = thread::spawn(move || drop(b));
                let unlinker = {
                    let fs = fs.clone();
                    thread::spawn(move || fs.unlink(&Cred::root(), ROOT_INO, b"f").unwrap())
                };
                closer.join().unwrap();
                unlinker.join().unwrap();
                // One handle is left: the unlinked inode must still be
                // there, counted as used, until it closes.
                assert_freed_at_last_close(&fs, free_before, reopener.join().unwrap());
            },
            crate::sync::model_iterations(),
        );
    }

    /// An open that holds only a counted reference (a walk, or FUSE's open
    /// by number) races the unlink of the file's last name. Opens raise the
    /// count without `meta`; the unlink's decision seals it. Either the open
    /// wins (the inode lives on as an orphan until the handle closes) or it
    /// fails with `ENOENT` and the inode is freed; never a handle to a freed
    /// inode, never an inode left over.
    #[test]
    fn model_open_vs_unlink_of_last_name() {
        crate::sync::check_pct(
            || {
                let fs = Fs::new_in_memory();
                let free_before = fs.statfs().unwrap().files_free;
                let (attr, f) = create_f(&fs);
                drop(f);
                let opener = {
                    let fs = fs.clone();
                    thread::spawn(move || fs.open(&Cred::root(), attr.ino, libc::O_RDONLY))
                };
                let unlinker = {
                    let fs = fs.clone();
                    thread::spawn(move || fs.unlink(&Cred::root(), ROOT_INO, b"f").unwrap())
                };
                unlinker.join().unwrap();
                match opener.join().unwrap() {
                    Ok(h) => assert_freed_at_last_close(&fs, free_before, h),
                    Err(e) => {
                        assert_eq!(e, crate::Errno::ENOENT);
                        assert_eq!(fs.statfs().unwrap().files_free, free_before, "not freed");
                        fs.check().unwrap();
                    }
                }
            },
            crate::sync::model_iterations(),
            3,
        );
    }

    /// A counted `open(O_TRUNC)` of a name (FUSE CREATE, or an open with
    /// a lookup reference) racing the unlink of its last link while
    /// another handle keeps the file open: either the open comes first
    /// (it answers that file, truncated) or the unlink does (with
    /// `O_CREAT` it makes a new file, without it `ENOENT`) and the file
    /// the other handle holds keeps its data. Before, the open truncated
    /// the file it found, then, finding it no longer named when it came
    /// to count it, read the name again and answered a new file (or
    /// `ENOENT`): the unlinked file had lost its data to an open that
    /// did not open it.
    #[test]
    fn model_counted_truncating_open_vs_unlink_of_open_file() {
        counted_truncating_open_vs_unlink(true);
    }

    /// The same without `O_CREAT`.
    #[test]
    fn model_counted_truncating_open_without_creat_vs_unlink() {
        counted_truncating_open_vs_unlink(false);
    }

    fn counted_truncating_open_vs_unlink(creat: bool) {
        crate::sync::check_pct(
            move || {
                let fs = Fs::new_in_memory();
                let r = Cred::root();
                let (f, h) = create_f(&fs);
                fs.write(&h, 0, b"abc").unwrap();
                let unlinker = {
                    let fs = fs.clone();
                    thread::spawn(move || fs.unlink(&Cred::root(), ROOT_INO, b"f").unwrap())
                };
                let creat_flag = if creat { libc::O_CREAT } else { 0 };
                let flags = creat_flag | libc::O_TRUNC | libc::O_RDWR;
                let opened = fs.open_at(&r, ROOT_INO, b"f", flags, 0o644, 0, true);
                unlinker.join().unwrap();
                let mut buf = [0u8; 8];
                let kept = fs.read(&h, 0, &mut buf).unwrap();
                match opened {
                    Ok((a, g, created)) => {
                        if created {
                            assert_ne!(a.ino, f.ino);
                            assert_eq!(kept, 3, "the unlinked file was truncated");
                        } else {
                            assert_eq!(a.ino, f.ino);
                            assert_eq!(kept, 0, "opened with O_TRUNC, not truncated");
                        }
                        fs.forget(a.ino, 1);
                        drop(g);
                    }
                    Err(e) => {
                        assert!(!creat, "O_CREAT open: {e:?}");
                        assert_eq!(e, lanefs_store::Errno::ENOENT);
                        assert_eq!(kept, 3, "the unlinked file was truncated");
                    }
                }
                drop(h);
                let _ = fs.unlink(&r, ROOT_INO, b"f");
                if let Err(p) = fs.check() {
                    panic!("inconsistent: {p:?}");
                }
            },
            crate::sync::model_iterations(),
            3,
        );
    }

    /// A counted `open(O_CREAT)` (FUSE CREATE) of an existing name racing
    /// the unlink of its last link while another handle keeps the file
    /// open: the open answers the file while linked (link count 1, counted
    /// in the same step) or, after the unlink, creates the name again —
    /// never the orphan with a link count of 0 under the name it asked
    /// for (the rule of every counted answer by name, `Meta::still_named`).
    #[test]
    fn model_counted_open_of_name_vs_unlink_of_open_file() {
        crate::sync::check_pct(
            || {
                let fs = Fs::new_in_memory();
                let r = Cred::root();
                let (f, h) = create_f(&fs);
                let unlinker = {
                    let fs = fs.clone();
                    thread::spawn(move || fs.unlink(&Cred::root(), ROOT_INO, b"f").unwrap())
                };
                let flags = libc::O_CREAT | libc::O_RDWR;
                let (a, g, created) = fs
                    .open_at(&r, ROOT_INO, b"f", flags, 0o644, 0, true)
                    .expect("O_CREAT open");
                if !created {
                    assert_eq!(a.ino, f.ino);
                    assert_eq!(a.nlink, 1, "a counted open answered an unlinked inode");
                }
                unlinker.join().unwrap();
                fs.forget(a.ino, 1);
                drop((g, h));
                let _ = fs.unlink(&r, ROOT_INO, b"f");
                if let Err(p) = fs.check() {
                    panic!("inconsistent: {p:?}");
                }
            },
            crate::sync::model_iterations(),
            3,
        );
    }

    /// An `O_TMPFILE` open racing a caller that kept the number its file
    /// gets (freed before and handed out again: the memory store reuses a
    /// lane's freed numbers) and forgets it, then opens and closes it by
    /// number — what a FUSE FORGET or OPEN of a stale number does. The
    /// new file is born open and an orphan before its number is found, so
    /// neither frees it: the `O_TMPFILE` open succeeds, and the file is
    /// freed once, at its last close. Before, it was made with no open
    /// count and opened after it was found by number: in between, the
    /// forget (or the close of the stranger's handle) freed it — no links,
    /// lookups or opens — and the open failed with `ENOENT`.
    #[test]
    fn model_tmpfile_vs_forget_and_open_by_number() {
        crate::sync::check_pct(
            || {
                let fs = Fs::new_in_memory();
                let r = Cred::root();
                let free_before = fs.statfs().unwrap().files_free;
                let (old, h) = create_f(&fs);
                drop(h);
                fs.forget(old.ino, 1);
                fs.unlink(&r, ROOT_INO, b"f").unwrap();
                let stranger = {
                    let fs = fs.clone();
                    thread::spawn(move || {
                        for _ in 0..2 {
                            fs.forget(old.ino, 1);
                            if let Ok(h) = fs.open(&Cred::root(), old.ino, libc::O_RDONLY) {
                                drop(h);
                            }
                        }
                    })
                };
                let (a, t) = fs
                    .tmpfile(&r, ROOT_INO, libc::O_RDWR, 0o600, 0, false)
                    .expect("O_TMPFILE open");
                fs.write(&t, 0, b"x").unwrap();
                stranger.join().unwrap();
                assert_eq!(fs.getattr(a.ino).unwrap().nlink, 0);
                assert_freed_at_last_close(&fs, free_before, t);
            },
            crate::sync::model_iterations(),
            3,
        );
    }

    /// An open without a counted reference (`open_rcu`) races the eviction
    /// of the file it opens: the evictor seals the open count, the opener
    /// raises it, and whichever comes first wins. A handle that wins must
    /// be on the cached inode — a write through it is what a later lookup
    /// sees — and one that loses takes the counted path (which waits for
    /// the eviction and loads the file again).
    #[test]
    fn model_open_without_reference_vs_eviction() {
        crate::sync::check_pct(
            || {
                let fs = Fs::new_in_memory();
                let (attr, f) = create_f(&fs);
                drop(f);
                let opener = {
                    let fs = fs.clone();
                    thread::spawn(move || {
                        let h = fs.open(&Cred::root(), attr.ino, libc::O_RDWR).unwrap();
                        fs.write(&h, 0, b"x").unwrap();
                        h
                    })
                };
                let evictor = {
                    let fs = fs.clone();
                    thread::spawn(move || fs.inner.evict_inodes(4))
                };
                evictor.join().unwrap();
                let h = opener.join().unwrap();
                assert_eq!(
                    fs.getattr(attr.ino).unwrap().size,
                    1,
                    "the handle's inode left the cache"
                );
                drop(h);
                fs.inner.evict_inodes(4);
                assert_eq!(fs.getattr(attr.ino).unwrap().size, 1, "not written back");
                fs.check().unwrap();
            },
            crate::sync::model_iterations(),
            3,
        );
    }
}

#[cfg(all(test, not(lanefs_shuttle)))]
mod tests {
    use crate::inode::Body;
    use crate::sync::Ordering;
    use crate::{Cred, Fs};
    use lanefs_store::ROOT_INO;

    /// A pure overwrite changes the data side only: the attribute mirror's
    /// times group is not republished, `Inode::atime_stale` is not written
    /// and the record is not marked dirty; an append (not pure) does all.
    #[test]
    fn a_pure_overwrite_leaves_meta_and_the_mirror_alone() {
        let fs = Fs::new_in_memory();
        let flags = libc::O_CREAT | libc::O_RDWR;
        let (a, f, _) = fs
            .open_at(&Cred::root(), ROOT_INO, b"f", flags, 0o644, 0, false)
            .unwrap();
        fs.write(&f, 0, &[1; 5000]).unwrap();
        let mut buf = [0u8; 8];
        fs.read(&f, 0, &mut buf).unwrap();
        fs.sync().unwrap();
        let inode = fs.inner.iget(a.ino).unwrap();
        assert!(
            !inode.atime_stale.load(Ordering::Relaxed),
            "read cleared it"
        );
        let published = inode.meta.rest_writes();
        assert!(!inode.meta.lock().dirty);
        fs.write(&f, 10, b"abc").unwrap();
        fs.write(&f, 4097, b"def").unwrap();
        assert_eq!(inode.meta.rest_writes(), published, "mirror republished");
        assert!(!inode.atime_stale.load(Ordering::Relaxed));
        assert!(!inode.meta.lock().dirty, "record touched");
        let Body::File(d) = &inode.body else {
            unreachable!()
        };
        assert!(d.atime_stale(), "data-side atime flag not set");
        assert!(fs.getattr(a.ino).unwrap().mtime > fs.getattr(a.ino).unwrap().atime);
        fs.write(&f, 5000, b"append").unwrap();
        assert!(
            inode.meta.rest_writes() > published,
            "size change not published"
        );
        assert!(inode.meta.lock().dirty);
    }

    /// `f` in the root of `fs`, made and written with `size` bytes of 7,
    /// and its handle (read-write).
    fn written_file(fs: &Fs, size: usize) -> (crate::Attr, crate::OpenFile) {
        let make = libc::O_CREAT | libc::O_RDWR;
        let (a, f, _) = fs
            .open_at(&Cred::root(), ROOT_INO, b"f", make, 0o644, 0, false)
            .unwrap();
        fs.write(&f, 0, &vec![7; size]).unwrap();
        (a, f)
    }

    /// A handle of `f` (made by [`written_file`]) opened with `flags`.
    fn reopen(fs: &Fs, flags: i32) -> crate::OpenFile {
        fs.open_at(&Cred::root(), ROOT_INO, b"f", flags, 0, 0, false)
            .unwrap()
            .1
    }

    /// Whether regular file `ino` has stripes in use.
    fn striped(fs: &Fs, ino: lanefs_store::Ino) -> bool {
        let inode = fs.inner.iget(ino).unwrap();
        let Body::File(d) = &inode.body else {
            unreachable!()
        };
        d.has_stripes()
    }

    /// An overwrite under a stripe sets no file-wide flag, and the next
    /// read still brings atime past it (relatime).
    #[test]
    fn a_read_after_an_overwrite_under_a_stripe_moves_atime() {
        let fs = Fs::new_in_memory();
        let (a, f) = written_file(&fs, 8192);
        let mut buf = [0u8; 8];
        fs.read(&f, 0, &mut buf).unwrap();
        let g = reopen(&fs, libc::O_RDWR);
        let read_at = fs.getattr(a.ino).unwrap().atime;
        fs.read(&g, 0, &mut buf).unwrap();
        assert_eq!(fs.getattr(a.ino).unwrap().atime, read_at, "not due");
        fs.write(&g, 4100, b"xyz").unwrap();
        let inode = fs.inner.iget(a.ino).unwrap();
        let Body::File(d) = &inode.body else {
            unreachable!()
        };
        assert!(d.has_stripes(), "no stripes to overwrite under");
        assert!(!d.atime_stale(), "an overwrite under a stripe set the flag");
        drop(inode);
        let written = fs.getattr(a.ino).unwrap();
        assert!(written.mtime >= read_at);
        fs.read(&g, 0, &mut buf).unwrap();
        assert!(
            fs.getattr(a.ino).unwrap().atime > written.mtime,
            "atime not moved"
        );
        drop((f, g));
        fs.check().unwrap();
    }

    /// Stripes of a file cut to one page or none are retired (appends then
    /// take the data lock alone), and taken back into use when a writable
    /// open finds the file grown again; overwrites stay right throughout.
    #[test]
    fn stripes_retire_when_the_file_shrinks_to_a_page_and_come_back() {
        let fs = Fs::new_in_memory();
        let (a, f) = written_file(&fs, 8192);
        let g = reopen(&fs, libc::O_RDWR);
        assert!(striped(&fs, a.ino));
        fs.write(&g, 4096, b"under a stripe").unwrap();
        let cut = crate::SetAttr {
            size: Some(0),
            ..Default::default()
        };
        fs.setattr(&Cred::root(), a.ino, &cut, Some(&g)).unwrap();
        assert!(!striped(&fs, a.ino), "retired at one page or none");
        for i in 0..3u8 {
            fs.write(&g, i as u64 * 4096, &[i + 10; 4096]).unwrap();
        }
        assert!(!striped(&fs, a.ino), "appends do not bring them back");
        let h = reopen(&fs, libc::O_RDWR);
        assert!(
            striped(&fs, a.ino),
            "a writable open of the grown file does"
        );
        fs.write(&h, 5000, b"again").unwrap();
        let mut buf = vec![0u8; 3 * 4096];
        assert_eq!(fs.read(&f, 0, &mut buf).unwrap(), buf.len());
        let mut want = [[10u8; 4096], [11; 4096], [12; 4096]].concat();
        want[5000..5005].copy_from_slice(b"again");
        assert_eq!(buf, want);
        drop((f, g, h));
        fs.check().unwrap();
    }

    /// A writable open (not `O_APPEND`, not `O_TRUNC`) of a file of more
    /// than one page gives it stripes before its first overwrite; no
    /// other open does, nor one in the locked read design.
    #[test]
    fn a_writable_open_of_a_file_of_two_pages_makes_its_stripes() {
        use crate::variants::{ReadVariant, Variants};
        use crate::FsConfig;
        use lanefs_store::MemoryStore;
        use std::sync::Arc;

        let striped_after = |read: ReadVariant, size: usize, flags: i32| {
            let config = FsConfig {
                variants: Variants {
                    read,
                    ..Variants::default()
                },
                ..FsConfig::default()
            };
            let fs = Fs::new(Arc::new(MemoryStore::default()), config).unwrap();
            let (a, f) = written_file(&fs, size);
            assert!(!striped(&fs, a.ino), "written, never opened again");
            let g = reopen(&fs, flags);
            let made = striped(&fs, a.ino);
            drop((f, g));
            fs.check().unwrap();
            made
        };
        let lockless = ReadVariant::Lockless;
        assert!(striped_after(lockless, 8192, libc::O_RDWR));
        assert!(striped_after(lockless, 4097, libc::O_WRONLY));
        assert!(!striped_after(lockless, 4096, libc::O_RDWR), "one page");
        assert!(!striped_after(lockless, 8192, libc::O_RDONLY));
        let append = libc::O_RDWR | libc::O_APPEND;
        assert!(!striped_after(lockless, 8192, append));
        assert!(!striped_after(lockless, 8192, libc::O_RDWR | libc::O_TRUNC));
        assert!(!striped_after(ReadVariant::Locked, 8192, libc::O_RDWR));
    }
}
