//! Name operations: lookup, create, link, unlink, rmdir, rename.
//!
//! Locks taken here, in the mount's order (see `fs`): the rename lock for
//! cross-directory renames; directory entry locks parent-before-child (and
//! by inode number for unrelated directories under the rename lock); then
//! `meta` of the parent before `meta` of the child. Checks follow Linux's
//! order (`link_path_walk`'s search permission, then `ENAMETOOLONG`, dead
//! directory, `EEXIST`/`ENOENT`, `may_create`/`may_delete`, type checks), so
//! that a request with several faults fails with the same errno as on tmpfs.

use crate::dir::{DirIndex, DirRead, DirWrite, Slot};
use crate::fs::{
    check_link_room, check_name, creation_perm, is_dot_or_dotdot, touch_c, touch_mc, FsInner, IRef,
    ParentAttrs,
};
use crate::inode::{Body, Inode, Meta};
use crate::perm::{self, may_link, sticky_denies};
use crate::{
    Attr, Cred, Fs, DIRENT_SIZE, MAY_EXEC, MAY_WRITE, RENAME_EXCHANGE, RENAME_NOREPLACE,
    RENAME_WHITEOUT, SYMLINK_MAX,
};
use lanefs_store::{DirEntryRecord, Errno, FileKind, Ino, Result, Timespec};

/// What a new node is made of.
pub(crate) struct NewNode<'a> {
    pub kind: FileKind,
    /// Permission bits after the umask.
    pub perm: u16,
    /// Permission bits as requested, before the umask (Linux strips a
    /// non-member's setgid by looking at these).
    pub requested: u16,
    pub rdev: u64,
    pub target: &'a [u8],
    pub lookups: u64,
    pub opens: u64,
    /// Creating a device node needs `CAP_MKNOD` (root).
    pub needs_mknod_cap: bool,
}

/// What [`FsInner::create_in`] did.
pub(crate) enum Made<'a> {
    /// Created and linked; the creator's reference.
    New(IRef<'a>),
    /// The name exists (non-exclusive create): look it up again.
    Exists,
}

impl FsInner {
    /// The directory's index for lock-free reading, loading it if needed
    /// (the load takes the directory's change lock).
    pub fn dir_read<'a>(&self, dir: &'a Inode) -> Result<DirRead<'a>> {
        let Body::Dir(state) = &dir.body else {
            return Err(Errno::ENOTDIR);
        };
        loop {
            if let Some(r) = state.reader() {
                return Ok(r);
            }
            let mut w = state.lock();
            if w.index().is_none() {
                w.install(DirIndex::from_records(self.store.dir_read(dir.ino)?));
            }
        }
    }

    /// The inode linked as `name` in `dir`, by a lock-free lookup validated
    /// by the entry's identity: the node found still holds the name after
    /// the inode was found, so the entry stayed linked in between and the
    /// number was not freed and reused (without validation a racing
    /// unlink, free and create could hand back an unrelated inode). The
    /// lookup's epoch guard stays pinned across `iget` (which may wait for
    /// a loading or evicted inode) so that the node's identity holds.
    pub fn lookup_child(&self, dir: &Inode, name: &[u8]) -> Result<IRef<'_>> {
        let Body::Dir(state) = &dir.body else {
            return Err(Errno::ENOTDIR);
        };
        loop {
            let r = self.dir_read(dir)?;
            let Some(e) = r.get_entry(name) else {
                return Err(Errno::ENOENT);
            };
            let child = self.iget(e.slot().ino);
            if r.still_linked(state, &e) {
                return child;
            }
        }
    }

    /// The directory's change lock with its index loaded.
    pub fn dir_write<'a>(&self, dir: &'a Inode) -> Result<DirWrite<'a>> {
        let Body::Dir(state) = &dir.body else {
            return Err(Errno::ENOTDIR);
        };
        state
            .lock()
            .loaded(|| Ok(DirIndex::from_records(self.store.dir_read(dir.ino)?)))
    }

    /// For a directory about to lose its last name (rmdir, rename over it):
    /// lock its entries (after its parent's, per the lock order) and keep
    /// them locked while it dies, so nothing is created in it meanwhile.
    /// `ENOTEMPTY` if it has entries; `None` for a non-directory.
    pub fn lock_empty_victim<'a>(
        &self,
        victim: &'a Inode,
        is_dir: bool,
    ) -> Result<Option<DirWrite<'a>>> {
        if !is_dir {
            return Ok(None);
        }
        let idx = self.dir_write(victim)?;
        if idx.len() != 0 {
            return Err(Errno::ENOTEMPTY);
        }
        Ok(Some(idx))
    }

    /// Add entry `name → (ino, kind)` to `dir` (store first, then index).
    #[allow(clippy::too_many_arguments)]
    pub fn add_entry(
        &self,
        dir: &Inode,
        idx: &mut DirWrite<'_>,
        dm: &mut Meta,
        name: &[u8],
        ino: Ino,
        kind: FileKind,
        now: Timespec,
    ) -> Result<()> {
        let cookie = dm.rec.next_cookie;
        self.store.dir_insert(
            dir.ino,
            &DirEntryRecord {
                name: name.to_vec(),
                ino,
                kind,
                cookie,
            },
        )?;
        dm.rec.next_cookie += 1;
        idx.insert(name, Slot { ino, kind, cookie });
        dm.rec.size += DIRENT_SIZE;
        touch_mc(dir, dm, now);
        Ok(())
    }

    /// Remove entry `name` from `dir` (store first, then index).
    pub fn remove_entry(
        &self,
        dir: &Inode,
        idx: &mut DirWrite<'_>,
        dm: &mut Meta,
        name: &[u8],
        now: Timespec,
    ) -> Result<()> {
        self.store.dir_remove(dir.ino, name)?;
        idx.remove(name);
        debug_assert!(dm.rec.size >= 3 * DIRENT_SIZE, "directory size underflow");
        dm.rec.size -= DIRENT_SIZE;
        touch_mc(dir, dm, now);
        Ok(())
    }

    /// Create `name` in `parent` (mknod, mkdir, symlink).
    pub fn create_node(
        &self,
        cred: &Cred,
        parent: Ino,
        name: &[u8],
        n: NewNode<'_>,
    ) -> Result<IRef<'_>> {
        let dir = self.dir(parent)?;
        dir.permission_unlocked(cred, MAY_EXEC)?;
        if is_dot_or_dotdot(name) {
            return Err(Errno::EEXIST);
        }
        check_name(name)?;
        match self.create_in(cred, &dir, name, &n, true)? {
            Made::New(inode) => Ok(inode),
            Made::Exists => Err(Errno::EEXIST),
        }
    }

    /// Create `name` in `dir` unless it exists (`EEXIST` if `exclusive`,
    /// else [`Made::Exists`]: the caller looks the name up again).
    ///
    /// The new inode is allocated *before* the directory's entry lock is
    /// taken, from the parent's attributes read under its `meta`; under the
    /// lock the checks are repeated and, if the parent's owner or mode moved
    /// meanwhile (so inheritance or permission could differ), the inode is
    /// discarded and the create starts over. The entry lock is held only
    /// to link the name (the store's entry, the index, the directory's
    /// attributes), so creates in one directory serialise on that alone.
    pub fn create_in(
        &self,
        cred: &Cred,
        dir: &Inode,
        name: &[u8],
        n: &NewNode<'_>,
        exclusive: bool,
    ) -> Result<Made<'_>> {
        loop {
            // Load the index (under the entry lock) before taking `meta`.
            let exists = self.dir_read(dir)?.get(name).is_some();
            let parent = {
                let dm = dir.meta.lock();
                match create_checks(cred, &dm, exists, n, exclusive)? {
                    Some(p) => p,
                    None => return Ok(Made::Exists),
                }
            };
            // No lock held: the icache insert may wait (lock order).
            let inode = self.alloc_inode(cred, &parent, n)?;
            let mut idx = match self.dir_write(dir) {
                Ok(idx) => idx,
                Err(e) => {
                    self.discard_new(&inode);
                    return Err(e);
                }
            };
            let mut dm = dir.meta.lock();
            let exists = idx.get(name).is_some();
            let again = create_checks(cred, &dm, exists, n, exclusive);
            match again {
                Ok(Some(p)) if p == parent => {}
                other => {
                    drop(dm);
                    drop(idx);
                    self.discard_new(&inode);
                    match other? {
                        // The parent's mode or owner moved: start over.
                        Some(_) => continue,
                        None => return Ok(Made::Exists),
                    }
                }
            }
            let now = Timespec::now();
            if let Err(e) = self.add_entry(dir, &mut idx, &mut dm, name, inode.ino, n.kind, now) {
                drop(dm);
                drop(idx);
                self.discard_new(&inode);
                return Err(e);
            }
            if n.kind == FileKind::Directory {
                dm.rec.nlink += 1;
            }
            return Ok(Made::New(inode));
        }
    }

    /// Find `name` in `parent`; add a lookup reference if `counted`.
    pub fn lookup(&self, cred: &Cred, parent: Ino, name: &[u8], counted: bool) -> Result<Attr> {
        if let Some(r) = self.walk_rcu(cred, parent, &[name], counted) {
            return r;
        }
        let dir = self.dir(parent)?;
        dir.permission_unlocked(cred, MAY_EXEC)?;
        let attr_of = |inode: &Inode| {
            let mut m = inode.meta.lock();
            if m.freed {
                return Err(Errno::ENOENT);
            }
            if counted {
                m.lookups += 1;
            }
            Ok(Attr::from_record(&m.rec))
        };
        if name == b"." {
            return attr_of(&dir);
        }
        if name == b".." {
            // A dead directory's `..` is ENOENT: its recorded parent number
            // is held by nobody and may have been reused (docs/SEMANTICS.md).
            let up = {
                let dm = dir.meta.lock();
                if dm.rec.nlink == 0 {
                    return Err(Errno::ENOENT);
                }
                dm.rec.parent
            };
            return attr_of(&*self.iget(up)?);
        }
        check_name(name)?;
        let child = self.lookup_child(&dir, name)?;
        attr_of(&child)
    }

    /// Report a store call that undoes part of a failed change. The change
    /// already fails with the first error; a failed undo leaves the store
    /// behind memory (the next writeback or check shows it).
    pub fn undo(&self, r: Result<()>) {
        if let Err(e) = r {
            tracing::error!("store refused to undo a failed change: {e}");
        }
    }

    /// Is directory `ancestor` equal to `dir` or above it? Walks parents;
    /// call under `rename_lock` so the shape cannot change.
    fn is_ancestor(&self, ancestor: Ino, mut dir: Ino) -> Result<bool> {
        for _ in 0..100_000 {
            if dir == ancestor {
                return Ok(true);
            }
            if dir == lanefs_store::ROOT_INO {
                return Ok(false);
            }
            dir = self.iget(dir)?.meta.lock().rec.parent;
        }
        Err(Errno::ELOOP)
    }
}

impl Fs {
    /// Find `name` in directory `parent` without taking a lookup reference.
    /// `.` and `..` are understood.
    pub fn lookup(&self, cred: &Cred, parent: Ino, name: &[u8]) -> Result<Attr> {
        self.inner.lookup(cred, parent, name, false)
    }

    /// As [`lookup`](Self::lookup), adding one to the found inode's lookup
    /// count (give it back with [`forget`](Self::forget)).
    pub fn lookup_counted(&self, cred: &Cred, parent: Ino, name: &[u8]) -> Result<Attr> {
        self.inner.lookup(cred, parent, name, true)
    }

    fn created(&self, inode: IRef<'_>) -> Attr {
        let m = inode.meta.lock();
        Attr::from_record(&m.rec)
    }

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
        let kind = match mode & libc::S_IFMT {
            0 => FileKind::Regular,
            libc::S_IFDIR => return Err(Errno::EPERM),
            fmt => FileKind::from_mode(fmt).ok_or(Errno::EINVAL)?,
        };
        let is_dev = matches!(kind, FileKind::CharDevice | FileKind::BlockDevice);
        let node = NewNode {
            kind,
            perm: creation_perm(kind, mode, umask),
            requested: creation_perm(kind, mode, 0),
            rdev: if is_dev { rdev } else { 0 },
            target: &[],
            lookups: 1,
            opens: 0,
            // A 0/0 character device is an overlayfs whiteout, which Linux
            // 5.8+ lets anyone make.
            needs_mknod_cap: is_dev && !(kind == FileKind::CharDevice && rdev == 0),
        };
        Ok(self.created(self.inner.create_node(cred, parent, name, node)?))
    }

    /// Create a directory. Counted.
    pub fn mkdir(
        &self,
        cred: &Cred,
        parent: Ino,
        name: &[u8],
        mode: u32,
        umask: u32,
    ) -> Result<Attr> {
        let node = NewNode {
            kind: FileKind::Directory,
            perm: creation_perm(FileKind::Directory, mode, umask),
            requested: creation_perm(FileKind::Directory, mode, 0),
            rdev: 0,
            target: &[],
            lookups: 1,
            opens: 0,
            needs_mknod_cap: false,
        };
        Ok(self.created(self.inner.create_node(cred, parent, name, node)?))
    }

    /// Create a symbolic link to `target` (1 to 4095 bytes, no NUL). Counted.
    pub fn symlink(&self, cred: &Cred, parent: Ino, name: &[u8], target: &[u8]) -> Result<Attr> {
        if target.is_empty() {
            return Err(Errno::ENOENT);
        }
        if target.len() > SYMLINK_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        if target.contains(&0) {
            return Err(Errno::EINVAL);
        }
        let node = NewNode {
            kind: FileKind::Symlink,
            perm: 0o777,
            requested: 0o777,
            rdev: 0,
            target,
            lookups: 1,
            opens: 0,
            needs_mknod_cap: false,
        };
        Ok(self.created(self.inner.create_node(cred, parent, name, node)?))
    }

    /// The target of symlink `ino` (`EINVAL` for other kinds).
    pub fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        let inode = self.inner.iget(ino)?;
        if inode.kind != FileKind::Symlink {
            return Err(Errno::EINVAL);
        }
        let m = inode.meta.lock();
        Ok(m.rec.symlink.clone())
    }

    /// Add a hard link `newparent/newname` to `ino`. Counted.
    pub fn link(&self, cred: &Cred, ino: Ino, newparent: Ino, newname: &[u8]) -> Result<Attr> {
        let fs = &*self.inner;
        let inode = fs.iget(ino)?;
        let dir_owner_of_target = inode.meta.lock().rec.uid;
        let dir = fs.dir(newparent)?;
        dir.permission_unlocked(cred, MAY_EXEC)?;
        if is_dot_or_dotdot(newname) {
            return Err(Errno::EEXIST);
        }
        check_name(newname)?;
        let mut idx = fs.dir_write(&dir)?;
        let mut dm = dir.meta.lock();
        if dm.rec.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        if idx.get(newname).is_some() {
            return Err(Errno::EEXIST);
        }
        if inode.kind == FileKind::Directory {
            // Never linked; answer as Linux would without locking its meta
            // (it may be `dir` itself): may_linkat, may_create, then EPERM.
            if fs.config.protected_hardlinks && !cred.is_root() && cred.uid != dir_owner_of_target {
                return Err(Errno::EPERM);
            }
            perm::permission(cred, &dm.rec, MAY_WRITE | MAY_EXEC)?;
            return Err(Errno::EPERM);
        }
        let mut m = inode.meta.lock();
        if fs.config.protected_hardlinks && !may_link(cred, &m.rec) {
            return Err(Errno::EPERM);
        }
        perm::permission(cred, &dm.rec, MAY_WRITE | MAY_EXEC)?;
        if m.rec.nlink == 0 || m.freed {
            return Err(Errno::ENOENT);
        }
        check_link_room(m.rec.nlink)?;
        let now = Timespec::now();
        fs.add_entry(&dir, &mut idx, &mut dm, newname, ino, inode.kind, now)?;
        m.rec.nlink += 1;
        m.lookups += 1;
        touch_c(&inode, &mut m, now);
        Ok(Attr::from_record(&m.rec))
    }

    /// Remove a non-directory entry.
    pub fn unlink(&self, cred: &Cred, parent: Ino, name: &[u8]) -> Result<()> {
        self.remove(cred, parent, name, false)
    }

    /// Remove an empty directory.
    pub fn rmdir(&self, cred: &Cred, parent: Ino, name: &[u8]) -> Result<()> {
        self.remove(cred, parent, name, true)
    }

    fn remove(&self, cred: &Cred, parent: Ino, name: &[u8], want_dir: bool) -> Result<()> {
        let fs = &*self.inner;
        let dir = fs.dir(parent)?;
        dir.permission_unlocked(cred, MAY_EXEC)?;
        match (name, want_dir) {
            (b".", true) => return Err(Errno::EINVAL),
            (b"..", true) => return Err(Errno::ENOTEMPTY),
            (b"." | b"..", false) => return Err(Errno::EISDIR),
            _ => {}
        }
        check_name(name)?;
        // Find the victim lock-free, then confirm it under the entry lock:
        // the lock covers only the checks and the unlink itself.
        let (child, mut idx) = loop {
            let child = fs.lookup_child(&dir, name)?;
            let idx = fs.dir_write(&dir)?;
            match idx.get(name) {
                // A reference does not keep an unlinked inode from being
                // freed and its number reused: the same number is the same
                // inode only while that inode is not freed (and it cannot
                // be freed now: the entry we hold locked links it).
                Some(slot) if slot.ino == child.ino && !child.meta.lock().freed => {
                    break (child, idx)
                }
                // Replaced meanwhile (rename over it, or unlinked, freed
                // and the number reused): look again.
                Some(_) => continue,
                None => return Err(Errno::ENOENT),
            }
        };
        {
            let dm = dir.meta.lock();
            perm::permission(cred, &dm.rec, MAY_WRITE | MAY_EXEC)?;
            let cm = child.meta.lock();
            if sticky_denies(cred, &dm.rec, &cm.rec) {
                return Err(Errno::EPERM);
            }
        }
        let is_dir = child.kind == FileKind::Directory;
        if want_dir && !is_dir {
            return Err(Errno::ENOTDIR);
        }
        if !want_dir && is_dir {
            return Err(Errno::EISDIR);
        }
        let now = Timespec::now();
        {
            let _victim_lock = fs.lock_empty_victim(&child, is_dir)?;
            let mut dm = dir.meta.lock();
            fs.remove_entry(&dir, &mut idx, &mut dm, name, now)?;
            let mut cm = child.meta.lock();
            if is_dir {
                debug_assert!(dm.rec.nlink > 2, "removing a subdirectory not counted");
                dm.rec.nlink -= 1;
                cm.rec.nlink = 0;
            } else {
                debug_assert!(cm.rec.nlink > 0, "unlinking an unlinked inode");
                cm.rec.nlink -= 1;
            }
            touch_c(&child, &mut cm, now);
            fs.note_unlinked(child.ino, &cm);
        }
        drop(idx);
        fs.maybe_free(&child);
        Ok(())
    }

    /// `renameat2` with [`RENAME_NOREPLACE`] or [`RENAME_EXCHANGE`].
    pub fn rename(
        &self,
        cred: &Cred,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: u32,
    ) -> Result<()> {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT) != 0
            || (flags & RENAME_EXCHANGE != 0 && flags & (RENAME_NOREPLACE | RENAME_WHITEOUT) != 0)
        {
            return Err(Errno::EINVAL);
        }
        if flags & RENAME_WHITEOUT != 0 {
            // Whiteouts serve overlayfs; lanefs does not make them.
            return Err(Errno::EINVAL);
        }
        let fs = &*self.inner;
        let odir = fs.dir(parent)?;
        let ndir = fs.dir(newparent)?;
        odir.permission_unlocked(cred, MAY_EXEC)?;
        ndir.permission_unlocked(cred, MAY_EXEC)?;
        if is_dot_or_dotdot(name) {
            return Err(Errno::EBUSY);
        }
        if is_dot_or_dotdot(newname) {
            return Err(if flags & RENAME_NOREPLACE != 0 {
                Errno::EEXIST
            } else {
                Errno::EBUSY
            });
        }
        check_name(name)?;
        check_name(newname)?;
        if parent == newparent {
            let mut idx = fs.dir_write(&odir)?;
            let victim = self.rename_locked(cred, &odir, &mut idx, None, name, newname, flags)?;
            drop(idx);
            if let Some(v) = victim {
                fs.maybe_free(&v);
            }
            return Ok(());
        }
        let _shape = fs.rename_lock.lock();
        // Ancestors first; unrelated directories by inode number.
        let old_first = if fs.is_ancestor(parent, newparent)? {
            true
        } else if fs.is_ancestor(newparent, parent)? {
            false
        } else {
            parent < newparent
        };
        let (mut oidx, mut nidx) = if old_first {
            let o = fs.dir_write(&odir)?;
            (o, fs.dir_write(&ndir)?)
        } else {
            let n = fs.dir_write(&ndir)?;
            (fs.dir_write(&odir)?, n)
        };
        let victim = self.rename_locked(
            cred,
            &odir,
            &mut oidx,
            Some((&ndir, &mut nidx)),
            name,
            newname,
            flags,
        )?;
        drop(oidx);
        drop(nidx);
        if let Some(v) = victim {
            fs.maybe_free(&v);
        }
        Ok(())
    }

    /// The body of rename with the directory locks held. `new` is `None` for
    /// a rename within `odir`. Returns a replaced inode that may need freeing.
    #[allow(clippy::too_many_arguments)]
    fn rename_locked<'d>(
        &self,
        cred: &Cred,
        odir: &Inode,
        oidx: &mut DirWrite<'d>,
        new: Option<(&Inode, &mut DirWrite<'d>)>,
        name: &[u8],
        newname: &[u8],
        flags: u32,
    ) -> Result<Option<IRef<'_>>> {
        let fs = &*self.inner;
        let cross = new.is_some();
        let (ndir, mut nidx) = match new {
            Some((d, i)) => (d, Some(i)),
            None => (odir, None),
        };
        macro_rules! nidx {
            () => {
                match nidx.as_deref_mut() {
                    Some(i) => i,
                    None => &mut *oidx,
                }
            };
        }
        let odir_dead = odir.meta.lock().rec.nlink == 0;
        let ndir_dead = ndir.meta.lock().rec.nlink == 0;
        if odir_dead || ndir_dead {
            return Err(Errno::ENOENT);
        }
        let oslot = oidx.get(name).ok_or(Errno::ENOENT)?;
        let nslot = nidx!().get(newname);
        if flags & RENAME_NOREPLACE != 0 && nslot.is_some() {
            return Err(Errno::EEXIST);
        }
        if flags & RENAME_EXCHANGE != 0 && nslot.is_none() {
            return Err(Errno::ENOENT);
        }
        let exchange = flags & RENAME_EXCHANGE != 0;
        let old_is_dir = oslot.kind == FileKind::Directory;
        let new_is_dir = nslot.is_some_and(|s| s.kind == FileKind::Directory);
        if cross {
            // Moving a directory under itself, or onto one of its ancestors.
            if old_is_dir && fs.is_ancestor(oslot.ino, ndir.ino)? {
                return Err(Errno::EINVAL);
            }
            if let Some(ns) = nslot {
                if new_is_dir && fs.is_ancestor(ns.ino, odir.ino)? {
                    return Err(if exchange {
                        Errno::EINVAL
                    } else {
                        Errno::ENOTEMPTY
                    });
                }
            }
        }
        if nslot.is_some_and(|s| s.ino == oslot.ino) {
            return Ok(None);
        }
        let old = fs.iget(oslot.ino)?;
        let target: Option<IRef<'_>> = match nslot {
            Some(s) => Some(fs.iget(s.ino)?),
            None => None,
        };
        // may_delete(old), then may_create / may_delete(new).
        {
            let odm = odir.meta.lock();
            perm::permission(cred, &odm.rec, MAY_WRITE | MAY_EXEC)?;
            if sticky_denies(cred, &odm.rec, &old.meta.lock().rec) {
                return Err(Errno::EPERM);
            }
        }
        {
            let ndm = ndir.meta.lock();
            perm::permission(cred, &ndm.rec, MAY_WRITE | MAY_EXEC)?;
            if let Some(t) = &target {
                if sticky_denies(cred, &ndm.rec, &t.meta.lock().rec) {
                    return Err(Errno::EPERM);
                }
                // With RENAME_EXCHANGE any two kinds may swap.
                if !exchange && old_is_dir && !new_is_dir {
                    return Err(Errno::ENOTDIR);
                }
                if !exchange && !old_is_dir && new_is_dir {
                    return Err(Errno::EISDIR);
                }
            }
        }
        if cross {
            if old_is_dir {
                perm::permission(cred, &old.meta.lock().rec, MAY_WRITE)?;
            }
            if exchange && new_is_dir {
                if let Some(t) = &target {
                    perm::permission(cred, &t.meta.lock().rec, MAY_WRITE)?;
                }
            }
            if old_is_dir && !new_is_dir {
                check_link_room(ndir.meta.lock().rec.nlink)?;
            }
            if exchange && new_is_dir && !old_is_dir {
                check_link_room(odir.meta.lock().rec.nlink)?;
            }
        }
        let now = Timespec::now();
        // The store first, ordered so that a failure leaves it as it was
        // (each later step undoes the earlier ones); then memory, which
        // cannot fail. In the index every name that exists before the
        // rename exists throughout it: an entry over another is replaced in
        // place, never removed and re-added (POSIX: `newname` stays visible).
        if exchange {
            let Some(t) = target else {
                return Err(Errno::ENOENT);
            };
            let ns = nslot.ok_or(Errno::ENOENT)?;
            let entry = |name: &[u8], s: Slot| DirEntryRecord {
                name: name.to_vec(),
                ino: s.ino,
                kind: s.kind,
                cookie: s.cookie,
            };
            let o_new = Slot {
                cookie: oslot.cookie,
                ..ns
            };
            let n_new = Slot {
                cookie: ns.cookie,
                ..oslot
            };
            fs.store.dir_insert(odir.ino, &entry(name, o_new))?;
            if let Err(e) = fs.store.dir_insert(ndir.ino, &entry(newname, n_new)) {
                fs.undo(fs.store.dir_insert(odir.ino, &entry(name, oslot)));
                return Err(e);
            }
            oidx.insert(name, o_new);
            nidx!().insert(newname, n_new);
            if cross && old_is_dir != new_is_dir {
                let (gain, lose) = if old_is_dir {
                    (ndir, odir)
                } else {
                    (odir, ndir)
                };
                gain.meta.lock().rec.nlink += 1;
                let mut lm = lose.meta.lock();
                debug_assert!(
                    lm.rec.nlink > 2,
                    "a directory losing a subdirectory it lacks"
                );
                lm.rec.nlink -= 1;
            }
            for (inode, dir) in [(&*old, ndir), (&*t, odir)] {
                let mut m = inode.meta.lock();
                if inode.kind == FileKind::Directory {
                    m.rec.parent = dir.ino;
                }
                touch_c(inode, &mut m, now);
            }
            for d in [odir, ndir] {
                let mut m = d.meta.lock();
                touch_mc(d, &mut m, now);
            }
            return Ok(None);
        }
        // Replace (or create) newname, then drop name. A directory target
        // stays locked (and so empty) until it is dead.
        let t_idx = match &target {
            Some(t) => fs.lock_empty_victim(t, new_is_dir)?,
            None => None,
        };
        let cookie = ndir.meta.lock().rec.next_cookie;
        let moved = Slot { cookie, ..oslot };
        fs.store.dir_insert(
            ndir.ino,
            &DirEntryRecord {
                name: newname.to_vec(),
                ino: moved.ino,
                kind: moved.kind,
                cookie,
            },
        )?;
        if let Err(e) = fs.store.dir_remove(odir.ino, name) {
            fs.undo(match nslot {
                Some(ns) => fs.store.dir_insert(
                    ndir.ino,
                    &DirEntryRecord {
                        name: newname.to_vec(),
                        ino: ns.ino,
                        kind: ns.kind,
                        cookie: ns.cookie,
                    },
                ),
                None => fs.store.dir_remove(ndir.ino, newname),
            });
            return Err(e);
        }
        nidx!().insert(newname, moved);
        {
            let mut ndm = ndir.meta.lock();
            ndm.rec.next_cookie = cookie + 1;
            if target.is_none() {
                ndm.rec.size += DIRENT_SIZE;
            }
            if new_is_dir {
                debug_assert!(ndm.rec.nlink > 2, "replacing a subdirectory not counted");
                ndm.rec.nlink -= 1;
            }
            if old_is_dir && cross {
                ndm.rec.nlink += 1;
            }
            touch_mc(ndir, &mut ndm, now);
        }
        oidx.remove(name);
        {
            let mut odm = odir.meta.lock();
            debug_assert!(odm.rec.size >= 3 * DIRENT_SIZE, "directory size underflow");
            odm.rec.size -= DIRENT_SIZE;
            if old_is_dir && cross {
                debug_assert!(odm.rec.nlink > 2, "moving a subdirectory not counted");
                odm.rec.nlink -= 1;
            }
            touch_mc(odir, &mut odm, now);
        }
        if let Some(t) = &target {
            let mut tm = t.meta.lock();
            if new_is_dir {
                tm.rec.nlink = 0;
            } else {
                debug_assert!(tm.rec.nlink > 0, "replacing an unlinked inode");
                tm.rec.nlink -= 1;
            }
            touch_c(t, &mut tm, now);
            fs.note_unlinked(t.ino, &tm);
            drop(tm);
        }
        drop(t_idx);
        let replaced = target;
        let mut om = old.meta.lock();
        if old_is_dir {
            om.rec.parent = ndir.ino;
        }
        touch_c(&old, &mut om, now);
        Ok(replaced)
    }
}

/// The checks of a create, in Linux's order: the directory is alive,
/// `name` is free (`None` if it exists and the create is not
/// exclusive), write and search permission, `CAP_MKNOD`, link room.
/// `dm` is the directory's `meta`, `exists` whether `name` is in it.
fn create_checks(
    cred: &Cred,
    dm: &Meta,
    exists: bool,
    n: &NewNode<'_>,
    exclusive: bool,
) -> Result<Option<ParentAttrs>> {
    if dm.rec.nlink == 0 {
        return Err(Errno::ENOENT);
    }
    if exists {
        return if exclusive {
            Err(Errno::EEXIST)
        } else {
            Ok(None)
        };
    }
    perm::permission(cred, &dm.rec, MAY_WRITE | MAY_EXEC)?;
    if n.needs_mknod_cap && !cred.is_root() {
        return Err(Errno::EPERM);
    }
    if n.kind == FileKind::Directory {
        check_link_room(dm.rec.nlink)?;
    }
    Ok(Some(ParentAttrs::of(&dm.rec)))
}
