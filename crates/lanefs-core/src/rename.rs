//! rename and renameat2 (`RENAME_NOREPLACE`, `RENAME_EXCHANGE`,
//! `RENAME_WHITEOUT`).
//!
//! Locks, in the mount's order (see `fs`): the rename lock for
//! cross-directory renames; the stripes of the two names in their
//! directories' entry locks (ancestor first, unrelated ones by inode
//! number; both names' stripes at once, ascending, within one directory)
//! and every stripe of a replaced directory; then `meta`s: a directory
//! gaining a subdirectory reserves its link first, in the stripe of the
//! name it gains (`fs::reserve_subdir_link`: its `meta` only for a grant;
//! near `LINK_MAX`, when every stripe is needed, the rename starts over
//! holding every stripe of both directories), and the directory losing it
//! gives the link back to the stripe of the name it loses (`dir_attr`);
//! the records that go into the store transaction are
//! held across the commit — a replaced inode's (its link count) and a
//! moved directory's (its parent); two are held together only when both
//! are directories, which the ancestor checks make unrelated, lower inode
//! number first. The directories' own `meta`s are taken one at a time
//! after the commit, only for the moved inodes' ctimes: the directories'
//! own size, times and link counts change in the names' stripes. A
//! missing source is answered `ENOENT` before any of these, by a lock-free
//! look (`FsInner::child_exists`).
//!
//! Atomic for lookups (`dir`, "Renames"): after its store transaction
//! commits, a rename stages its names in the index against one switch
//! (`RenameSwitch`) and commits it with one store — both names of a
//! rename or an exchange, the source's whiteout — then finishes them, all
//! under the names' stripes. The switch commits inside the `meta` sections
//! held across the store commit: a moved directory's (whose parent, its
//! `..`, changes in the same section, so a `..` lookup, which reads it
//! under that `meta`, switches with the entries) and a replaced inode's
//! (whose link count drops after the switch, so no lookup finds a name to
//! an inode whose last link went). A whiteout is marked born after the
//! switch, before its stripe is given back: a lookup that finds it in
//! between waits (`lookup_child`), and the RCU-walk steps aside.
//!
//! Each rename is one [`Txn`]: the new entry (or both, exchanged), the
//! removed one, the replaced inode's record and a moved directory's record
//! — at most 4 operations; with `RENAME_WHITEOUT` the removed entry is
//! instead the source name pointing at the whiteout, whose record goes
//! along (5).
//!
//! `RENAME_WHITEOUT` (as tmpfs's `shmem_whiteout`): the source name is
//! left naming a new 0/0 character device of mode 0, owned by the caller
//! (group as a create in the source directory: its setgid rule), in the
//! same transaction as the move. Its inode is allocated before any lock
//! (the icache insert may wait, `FsInner::alloc_inode`) and discarded
//! after the locks are given back if the rename does not use it (an
//! error, or two names of one inode: nothing changes). Its group is set
//! under the source name's stripe, where the directory's mode and group
//! are exact; its `meta` is taken alone (no other `meta` held), before
//! the commit and after it. Nothing can reach it before its entry exists
//! (until it is marked born, under the source's stripe, a number that
//! names it finds nothing: `Inode::born`).

use crate::attr_seq::{MetaGuard, PermSnapshot};
use crate::dir::{DirWrite, RenameSwitch, Slot, Stripes};
use crate::fs::{
    check_name, ctime_at, is_dot_or_dotdot, reserve_subdir_link, touch_c, FsInner, IRef,
    NoLinkRoom, ParentAttrs,
};
use crate::inode::Inode;
use crate::namei::{relinked, NewNode};
use crate::perm::{self, sticky_denies, S_ISGID, S_ISVTX};
use crate::sync::Ordering;
use crate::{
    Cred, DirAt, Fs, MAY_EXEC, MAY_WRITE, RENAME_EXCHANGE, RENAME_NOREPLACE, RENAME_WHITEOUT,
};
use lanefs_store::{Errno, FileKind, Ino, InodeRecord, Result, Timespec, Txn, TxnOp};

impl Fs {
    /// `renameat2` with [`RENAME_NOREPLACE`], [`RENAME_EXCHANGE`] or
    /// [`RENAME_WHITEOUT`] (with or without `RENAME_NOREPLACE`: the source
    /// name is left naming a whiteout, a 0/0 character device of mode 0).
    pub fn rename(
        &self,
        cred: &Cred,
        parent: impl Into<DirAt>,
        name: &[u8],
        newparent: impl Into<DirAt>,
        newname: &[u8],
        flags: u32,
    ) -> Result<()> {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT) != 0
            || (flags & RENAME_EXCHANGE != 0 && flags & (RENAME_NOREPLACE | RENAME_WHITEOUT) != 0)
        {
            return Err(Errno::EINVAL);
        }
        let fs = &*self.inner;
        let (parent, newparent) = (parent.into(), newparent.into());
        if parent.ino == newparent.ino {
            let seen = match (parent.generation, newparent.generation) {
                // The same number seen at two generations: one of them
                // is gone.
                (Some(a), Some(b)) if a != b => return Err(Errno::ENOENT),
                (a, b) => a.or(b),
            };
            let dir_at = DirAt {
                ino: parent.ino,
                generation: seen,
            };
            return fs.with_dir(dir_at, |dir| {
                self.rename_in(cred, dir, dir, name, newname, flags)
            });
        }
        fs.with_dir(parent, |odir| {
            fs.with_dir(newparent, |ndir| {
                self.rename_in(cred, odir, ndir, name, newname, flags)
            })
        })
    }

    /// The body of rename in directories found (`odir` and `ndir` the same
    /// inode for a rename within one directory): checks, locks, then
    /// [`rename_locked`](Self::rename_locked).
    fn rename_in(
        &self,
        cred: &Cred,
        odir: &Inode,
        ndir: &Inode,
        name: &[u8],
        newname: &[u8],
        flags: u32,
    ) -> Result<()> {
        let mut all = false;
        loop {
            match self.rename_try(cred, odir, ndir, name, newname, flags, all)? {
                Renamed::Done => return Ok(()),
                // Nothing changed: again, holding every stripe.
                Renamed::NeedAllStripes => all = true,
            }
        }
    }

    /// One try of [`rename_in`](Self::rename_in), holding the names'
    /// stripes, or with `all` every stripe of both directories (across
    /// directories).
    #[allow(clippy::too_many_arguments)]
    fn rename_try(
        &self,
        cred: &Cred,
        odir: &Inode,
        ndir: &Inode,
        name: &[u8],
        newname: &[u8],
        flags: u32,
        all: bool,
    ) -> Result<Renamed> {
        let fs = &*self.inner;
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
        // A source that is not there fails before any lock, at the instant
        // of a lock-free look (Linux looks the source up before it checks
        // the change's permissions too): a rename of a missing name writes
        // nothing, not even a stripe lock that lookups of other names read
        // beside.
        if !fs.child_exists(odir, name)? {
            return Err(Errno::ENOENT);
        }
        // No lock held yet: the whiteout's allocation may wait. Dropped
        // (discarded unless linked) after every lock below. A failed
        // allocation (`ENOSPC`) is reported where tmpfs allocates it, after
        // every check of the rename (`shmem_rename2`).
        let whiteout = match flags & RENAME_WHITEOUT {
            0 => None,
            _ => Some(Whiteout::alloc(fs, cred, odir)),
        };
        let w_arg = || whiteout.as_ref().map(|w| w.as_ref().map_err(|e| *e));
        let (parent, newparent) = (odir.ino, ndir.ino);
        if parent == newparent {
            let mut idx = fs.dir_write(odir, Stripes::Of(&[name, newname]))?;
            // Within one directory no link count grows: never `NeedAll`.
            let victim = self.rename_locked(
                cred,
                odir,
                &mut idx,
                None,
                name,
                newname,
                flags,
                &mut None,
                w_arg(),
            )?;
            drop(idx);
            if let Ok(Some(v)) = victim {
                fs.maybe_free(&v);
            }
            drop(whiteout);
            return Ok(Renamed::Done);
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
        let (on, nn) = ([name], [newname]);
        let (ostripes, nstripes) = if all {
            (Stripes::All, Stripes::All)
        } else {
            (Stripes::Of(&on), Stripes::Of(&nn))
        };
        let (mut oidx, mut nidx) = if old_first {
            let o = fs.dir_write(odir, ostripes)?;
            (o, fs.dir_write(ndir, nstripes)?)
        } else {
            let n = fs.dir_write(ndir, nstripes)?;
            (fs.dir_write(odir, ostripes)?, n)
        };
        // Where a link reserved for a directory gaining a subdirectory is
        // held until used: `Some(true)` in `newname`'s stripe of `ndir`,
        // `Some(false)` in `name`'s of `odir`.
        let mut reserved = None;
        let victim = self.rename_locked(
            cred,
            odir,
            &mut oidx,
            Some((ndir, &mut nidx)),
            name,
            newname,
            flags,
            &mut reserved,
            w_arg(),
        );
        if victim.is_err() {
            // Nothing changed: the reserved link, unused, goes back.
            match reserved {
                Some(true) => nidx.add_link_room(newname, 1),
                Some(false) => oidx.add_link_room(name, 1),
                None => {}
            }
        }
        let victim = victim?;
        drop(oidx);
        drop(nidx);
        drop(whiteout);
        match victim {
            Ok(Some(v)) => fs.maybe_free(&v),
            Ok(None) => {}
            Err(NoLinkRoom::NeedAllStripes) => return Ok(Renamed::NeedAllStripes),
            Err(NoLinkRoom::Full) => return Err(Errno::EMLINK),
        }
        Ok(Renamed::Done)
    }

    /// The body of rename with the directory locks held. `new` is `None` for
    /// a rename within `odir`. `whiteout`: with `RENAME_WHITEOUT`, the
    /// inode to leave at `name`, marked linked if it was, or why it could
    /// not be allocated (answered once the rename's checks pass). Returns a replaced
    /// inode that may need freeing, or why a directory gaining a
    /// subdirectory had no link for it (nothing changed).
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
        reserved: &mut Option<bool>,
        whiteout: Option<std::result::Result<&Whiteout<'_>, Errno>>,
    ) -> Result<std::result::Result<Option<IRef<'_>>, NoLinkRoom>> {
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
        // Dead directories (exact from the mirror: an rmdir holds every
        // stripe of its victim, and we hold one).
        let odir_dead = odir.meta.attr().nlink() == 0;
        let ndir_dead = cross && ndir.meta.attr().nlink() == 0;
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
            return Ok(Ok(None));
        }
        let old = fs.iget(oslot.ino)?;
        let target: Option<IRef<'_>> = match nslot {
            Some(s) => Some(fs.iget(s.ino)?),
            None => None,
        };
        // may_delete(old), then may_create / may_delete(new). The
        // directories' mode and owner from their mirrors, exact under the
        // stripes we hold (a chmod, chown or ACL change of a directory
        // takes every stripe): no directory `meta` is taken unless its
        // access ACL decides; an inode's `meta` only when the directory is
        // sticky.
        let may_change = |dir: &Inode, a: &PermSnapshot| {
            perm::permission_snap(cred, dir, a, MAY_WRITE | MAY_EXEC)
        };
        let sticky_blocks = |dir: &PermSnapshot, inode: &Inode| {
            crate::iflags::blocks_delete(dir.iflags(), inode.meta.perm_attr().iflags())
                || (dir.perm() & S_ISVTX != 0
                    && sticky_denies(cred, dir.perm(), dir.uid(), inode.meta.lock().rec.uid))
        };
        let oa = odir.meta.perm_attr();
        may_change(odir, &oa)?;
        if sticky_blocks(&oa, &old) {
            return Err(Errno::EPERM);
        }
        {
            let na = if cross {
                let na = ndir.meta.perm_attr();
                may_change(ndir, &na)?;
                na
            } else {
                oa
            };
            if let Some(t) = &target {
                if sticky_blocks(&na, t) {
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
        }
        // A directory gaining a subdirectory reserves its link now, in the
        // stripe of the name it gains (`dir_attr`); given back if the
        // rename fails. The other directory loses one, given back to the
        // stripe of the name it loses when the rename is done.
        let ndir_gains = cross && old_is_dir && !new_is_dir;
        let odir_gains = cross && exchange && !old_is_dir && new_is_dir;
        if ndir_gains || odir_gains {
            let got = if ndir_gains {
                reserve_subdir_link(ndir, nidx!(), newname)
            } else {
                reserve_subdir_link(odir, oidx, name)
            };
            if let Err(no_room) = got {
                return Ok(Err(no_room));
            }
            *reserved = Some(ndir_gains);
        }
        // Every record change in one store transaction, then memory, which
        // cannot fail. One clock read for the whole rename; each inode's
        // ctime is no older than its record's, taken under its `meta`
        // (`ctime_at`), so that a change of it that finished before (a
        // chmod that read a later clock) is never undone — what Linux gets
        // by reading the clock under each inode lock, without a clock read
        // per inode. In the index every name that exists before the rename exists
        // throughout it: an entry over another is replaced in place, never
        // removed and re-added (POSIX: `newname` stays visible). The
        // directories' own records are not in the transaction: their size,
        // link count and next cookie follow from their entries.
        let now = Timespec::now();
        if exchange {
            let Some(t) = target else {
                return Err(Errno::ENOENT);
            };
            let ns = nslot.ok_or(Errno::ENOENT)?;
            let o_new = Slot {
                cookie: oslot.cookie,
                ..ns
            };
            let n_new = Slot {
                cookie: ns.cookie,
                ..oslot
            };
            let mut txn = Txn::new();
            fs.txn_entry(&mut txn, || TxnOp::PutEntry(odir.ino, o_new.record(name)))?;
            fs.txn_entry(&mut txn, || {
                TxnOp::PutEntry(ndir.ino, n_new.record(newname))
            })?;
            // A directory moving to the other parent takes its record (its
            // `..`) along; the metas of the records committed are held
            // across the commit. Only directories are locked together here
            // (by inode number: they are unrelated, see the ancestor checks).
            let moves = |i: &Inode| cross && i.kind == FileKind::Directory;
            let (mut om, mut tm) = match (moves(&old), moves(&t)) {
                (true, true) => {
                    let (a, b) = lock_dirs_by_ino(&old, &t);
                    (Some(a), Some(b))
                }
                (true, false) => (Some(old.meta.lock()), None),
                (false, true) => (None, Some(t.meta.lock())),
                (false, false) => (None, None),
            };
            for (m, to) in [(&om, ndir), (&tm, odir)] {
                if let Some(m) = m {
                    fs.txn_record(&mut txn, || reparented(&m.rec, to.ino, ctime_at(m, now)))?;
                }
            }
            fs.commit(&txn)?;
            // Both names re-pointed at once, by one switch (`dir`,
            // "Renames"), inside the `meta` sections of the directories
            // that move: a `..` lookup (under the directory's `meta`)
            // sees the new parent exactly when lookups see the entries.
            let mut switch = RenameSwitch::new();
            oidx.stage_put(name, o_new, &switch);
            nidx!().stage_put(newname, n_new, &switch);
            switch.commit();
            for (m, inode, to) in [(&mut om, &*old, ndir), (&mut tm, &*t, odir)] {
                if let Some(m) = m {
                    m.rec.parent = to.ino;
                    inode.parent.store(to.ino, Ordering::Release);
                    let t = ctime_at(m, now);
                    touch_c(inode, m, t);
                }
            }
            let unlocked = [(om.is_none(), &*old), (tm.is_none(), &*t)];
            drop(om);
            drop(tm);
            for (_, inode) in unlocked.into_iter().filter(|(u, _)| *u) {
                let mut m = inode.meta.lock();
                let t = ctime_at(&m, now);
                touch_c(inode, &mut m, t);
            }
            oidx.finish(name, &switch);
            nidx!().finish(newname, &switch);
            switch.retire();
            // A directory swapped for a non-directory across parents: the
            // gaining one uses its reserved link, the other gives one back
            // (each in the stripe of its name).
            let (o_subdirs, n_subdirs) = match (odir_gains, ndir_gains) {
                (true, _) => (1, -1),
                (_, true) => (-1, 1),
                _ => (0, 0),
            };
            debug_assert_eq!(
                reserved.is_some(),
                odir_gains || ndir_gains,
                "a directory gained no reserved link"
            );
            *reserved = None;
            oidx.note(name, 0, o_subdirs, now);
            nidx!().note(newname, 0, n_subdirs, now);
            return Ok(Ok(None));
        }
        // Replace (or create) newname, then drop name. A directory target
        // stays locked (and so empty) until it is dead.
        let t_idx = match &target {
            Some(t) => fs.lock_empty_victim(t, new_is_dir)?,
            None => None,
        };
        let whiteout = whiteout.transpose()?;
        let cookie = nidx!().new_cookie(newname);
        let moved = Slot { cookie, ..oslot };
        let mut txn = Txn::new();
        fs.txn_entry(&mut txn, || {
            TxnOp::PutEntry(ndir.ino, moved.record(newname))
        })?;
        // The whiteout takes the source's place (and cookie): `name` never
        // stops existing. Its record, with the group of a create in `odir`
        // (exact under our stripe) and this rename's time, goes along.
        let wslot = whiteout.map(|w| Slot {
            ino: w.inode.ino,
            kind: FileKind::CharDevice,
            cookie: oslot.cookie,
        });
        let mut w_in_store = false;
        match (whiteout, wslot) {
            (Some(w), Some(ws)) => {
                let mut wm = w.inode.meta.lock();
                if oa.perm() & S_ISGID != 0 {
                    wm.rec.gid = oa.gid();
                }
                (wm.rec.atime, wm.rec.mtime, wm.rec.ctime, wm.rec.btime) = (now, now, now, now);
                fs.txn_entry(&mut txn, || TxnOp::PutEntry(odir.ino, ws.record(name)))?;
                w_in_store = fs.txn_record(&mut txn, || wm.rec.clone())?;
            }
            _ => fs.txn_entry(&mut txn, || TxnOp::RemoveEntry(odir.ino, name.to_vec()))?,
        }
        // The replaced inode's new link count (0: an orphan until freed)
        // and a moved directory's new parent go with the entries. If both,
        // both are directories (kinds match without RENAME_EXCHANGE).
        let reparent = old_is_dir && cross;
        let mut switch = RenameSwitch::new();
        {
            let (mut om, mut tm) = match (&target, reparent) {
                (Some(t), true) => {
                    let (a, b) = lock_dirs_by_ino(&old, t);
                    (Some(a), Some(b))
                }
                (Some(t), false) => (None, Some(t.meta.lock())),
                (None, true) => (Some(old.meta.lock()), None),
                (None, false) => (None, None),
            };
            let t_nlink = tm.as_ref().map(|m| {
                debug_assert!(new_is_dir || m.rec.nlink > 0, "replacing an unlinked inode");
                if new_is_dir {
                    0
                } else {
                    m.rec.nlink.saturating_sub(1)
                }
            });
            if let (Some(m), Some(n)) = (&tm, t_nlink) {
                fs.txn_record(&mut txn, || relinked(&m.rec, n, ctime_at(m, now)))?;
            }
            if let Some(m) = &om {
                fs.txn_record(&mut txn, || reparented(&m.rec, ndir.ino, ctime_at(m, now)))?;
            }
            fs.commit(&txn)?;
            // `newname` re-pointed and `name` removed (or re-pointed at the
            // whiteout) at once, by one switch (`dir`, "Renames"): a
            // lookup never finds the inode under both names, nor under
            // neither. A moved directory's new parent is published in the
            // same `meta` section as the switch's commit, so a `..` lookup
            // (under that `meta`) sees it exactly when lookups see the
            // entries.
            nidx!().stage_put(newname, moved, &switch);
            match wslot {
                Some(ws) => oidx.stage_put(name, ws, &switch),
                None => oidx.stage_remove(name, &switch),
            }
            switch.commit();
            if let Some(m) = om.as_mut() {
                m.rec.parent = ndir.ino;
                old.parent.store(ndir.ino, Ordering::Release);
                let t = ctime_at(m, now);
                touch_c(&old, m, t);
            }
            // The replaced inode's link count dropped after the switch,
            // its `meta` held across both: while the old entry is visible
            // a lookup can reach the inode and release it, and a release
            // frees an unlinked inode nothing else keeps (`maybe_free`,
            // under `meta`), so it must not see the count at 0 before the
            // entry is gone (else the entry names a free number:
            // `EUCLEAN` to the next lookup, or a number reused under a
            // visible name).
            if let (Some(t), Some(m), Some(n)) = (&target, tm.as_mut(), t_nlink) {
                m.rec.nlink = n;
                let at = ctime_at(m, now);
                touch_c(t, m, at);
                fs.note_unlinked(t, m);
            }
        }
        if !reparent {
            // No other meta held: two non-directories' are never nested.
            let mut m = old.meta.lock();
            let t = ctime_at(&m, now);
            touch_c(&old, &mut m, t);
        }
        debug_assert_eq!(reserved.is_some(), ndir_gains, "a reserved link unused");
        *reserved = None;
        // The directories' sizes, times and link counts in the names'
        // stripes (`dir_attr`). `ndir` gains a link for a directory moved
        // in over a non-directory or nothing (reserved above); a
        // subdirectory replaced loses its link, unless by one moved in
        // (the count stays); `odir` loses the link of a directory moved
        // out.
        let n_subdirs = if ndir_gains {
            1
        } else if new_is_dir && !cross {
            -1
        } else {
            0
        };
        nidx!().note(
            newname,
            if target.is_none() { 1 } else { 0 },
            n_subdirs,
            now,
        );
        let o_subdirs = if old_is_dir && cross { -1 } else { 0 };
        if let Some(w) = whiteout {
            // The store has exactly its record now (a volatile store gets
            // it at writeback: the inode stays dirty). Named: found by
            // number from now on. (A lookup that found its entry since
            // the switch waits for this: `lookup_child`.)
            let mut wm = w.inode.meta.lock();
            wm.dirty &= !w_in_store;
            w.inode.mark_born();
            drop(wm);
            w.linked.set(true);
        }
        nidx!().finish(newname, &switch);
        oidx.finish(name, &switch);
        switch.retire();
        match wslot {
            Some(_) => oidx.note(name, 0, o_subdirs, now),
            None => oidx.note(name, -1, o_subdirs, now),
        }
        drop(t_idx);
        Ok(Ok(target))
    }
}

/// `rec` of a directory moved under `parent`, with ctime `now`.
fn reparented(rec: &InodeRecord, parent: Ino, now: Timespec) -> InodeRecord {
    InodeRecord {
        parent,
        ctime: now,
        ..rec.clone()
    }
}

/// Lock the metas of two distinct, unrelated directories (neither is an
/// ancestor of the other), lower inode number first; returned in argument
/// order. The only place two such metas are held together.
fn lock_dirs_by_ino<'a>(a: &'a Inode, b: &'a Inode) -> (MetaGuard<'a>, MetaGuard<'a>) {
    debug_assert_ne!(a.ino, b.ino, "one inode locked twice");
    if a.ino < b.ino {
        let ga = a.meta.lock();
        (ga, b.meta.lock())
    } else {
        let gb = b.meta.lock();
        (a.meta.lock(), gb)
    }
}

/// What one try of a rename did.
enum Renamed {
    Done,
    /// A directory gaining a subdirectory needs every stripe for its link
    /// (`fs::NoLinkRoom::NeedAllStripes`); nothing changed.
    NeedAllStripes,
}

/// The node `RENAME_WHITEOUT` leaves at the source name: allocated before
/// the rename's locks, discarded on drop unless the rename linked it (drop
/// it with no lock held).
struct Whiteout<'a> {
    fs: &'a FsInner,
    inode: IRef<'a>,
    linked: std::cell::Cell<bool>,
}

impl<'a> Whiteout<'a> {
    /// A 0/0 character device of mode 0 owned by `cred`, its group as a
    /// create in `dir` (set again under the name's stripe). Anyone may
    /// make one (Linux 5.8+), so no `CAP_MKNOD`; `ENOSPC` without a free
    /// inode, as tmpfs.
    fn alloc(fs: &'a FsInner, cred: &Cred, dir: &Inode) -> Result<Whiteout<'a>> {
        let a = dir.meta.attr();
        let parent = ParentAttrs::of(dir, &a);
        let node = NewNode {
            kind: FileKind::CharDevice,
            perm: 0,
            requested: 0,
            rdev: 0,
            target: &[],
            lookups: 0,
            opens: 0,
            needs_mknod_cap: false,
        };
        Ok(Whiteout {
            fs,
            inode: fs.alloc_inode(cred, &parent, &node)?,
            linked: std::cell::Cell::new(false),
        })
    }
}

impl Drop for Whiteout<'_> {
    fn drop(&mut self) {
        if !self.linked.get() {
            self.fs.discard_new(&self.inode);
        }
    }
}
