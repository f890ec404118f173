//! The handler's SETATTR (with the empty SETATTR of `chown(f, -1, -1)`,
//! which only the caller's system call tells from the kernel's pre-write
//! privilege kill) and the `sync`/`dirsync` durability of changes. A child
//! module of `handler`, for file size; same locking rules (none held
//! across engine calls).

use lanefs_core::{Attr, Cred, Errno, Ino, Result, SetAttr, TimeSet};

use super::{Handler, S_ISGID, S_ISUID, S_IXGRP};
use crate::cred::{cred_for, Caller};

impl Handler {
    /// `sync`/`dirsync`: make a change durable before answering (a whole
    /// `Fs::sync`, so that new parent directories go too). `counted`: the
    /// inode whose lookup reference the change took; it is given back if
    /// the sync fails, since the kernel then never learns the entry.
    pub(super) fn durable<T>(
        &self,
        wanted: bool,
        r: Result<T>,
        counted: impl Fn(&T) -> Option<Ino>,
    ) -> Result<T> {
        let v = r?;
        if !wanted {
            return Ok(v);
        }
        if let Err(e) = self.fs.sync() {
            tracing::error!(error = %e, "sync/dirsync mount: cannot make a change durable");
            if let Some(ino) = counted(&v) {
                self.fs.forget(ino, 1);
            }
            return Err(e);
        }
        Ok(v)
    }

    pub(super) fn dir_sync(&self) -> bool {
        self.config.sync_dir_changes || self.config.sync_writes
    }

    /// SETATTR: chmod, chown, truncate/ftruncate, utimens.
    pub fn setattr(
        &self,
        caller: &Caller,
        ino: Ino,
        changes: &SetAttr,
        fh: Option<u64>,
    ) -> Result<Attr> {
        let handle = match fh {
            Some(fh) => self.handles.get(fh),
            None => None,
        };
        let file = handle.as_ref().map(|h| &h.file).filter(|f| f.ino() == ino);
        let cred = cred_for(caller);
        let wb = self.writeback();
        // Under the writeback cache `chown(f, -1, -1)` carries the
        // kernel's ctime (it trusts its own c/mtime), otherwise nothing.
        let ctime_only = SetAttr {
            ctime: changes.ctime,
            ..Default::default()
        };
        if *changes == SetAttr::default() || (wb && *changes == ctime_only) {
            return self.chown_no_ids(&cred, caller.pid, ino, file);
        }
        // Only regular files: the kernel keeps c/mtime of nothing else.
        let regular = || {
            self.fs
                .getattr(ino)
                .is_ok_and(|a| a.kind == lanefs_core::FileKind::Regular)
        };
        let r = if wb && has_times(changes) && regular() {
            self.setattr_writeback_times(&cred, ino, changes, file)
        } else {
            self.fs.setattr(&cred, ino, changes, file)
        };
        self.durable(self.config.sync_writes, r, |_| None)
    }

    /// SETATTR with times under the writeback cache, where the kernel owns
    /// mtime and ctime of regular files and sends them as explicit values:
    /// alone when it flushes them (close, fsync, the flusher, a
    /// close-on-exec: `fuse_flush_times`, as whoever triggers it), and
    /// beside every truncate and chmod/chown (explicit `mtime`/`ctime`
    /// where it would otherwise say "now"). The engine would refuse an
    /// explicit mtime from anyone but the owner, failing a writer's
    /// `close`, `fsync` or `ftruncate`; so the times are the kernel's
    /// clock, applied with the kernel's authority after the rest of the
    /// change passed the engine's checks as the caller.
    ///
    /// A user's own `utimensat` arrives in the same shape. With
    /// `default_permissions` (which `writeback_cache` implies) the kernel
    /// has already checked it (`setattr_prepare`), so the split is right.
    /// Without it, a request that sets atime is a user's (the kernel never
    /// flushes atime) and gets the engine's rules, "atime now +
    /// kernel-clock mtime" read as the both-`UTIME_NOW` touch that write
    /// permission allows; an mtime-only `utimensat` cannot be told from
    /// the kernel's flush (asking `/proc/<pid>/syscall` would deadlock
    /// against a close-on-exec, whose exec holds the lock that read
    /// needs), so a writer who is not the owner could set it: the hole
    /// docs/FUSE.md names for `no_default_permissions`.
    fn setattr_writeback_times(
        &self,
        cred: &Cred,
        ino: Ino,
        changes: &SetAttr,
        file: Option<&lanefs_core::OpenFile>,
    ) -> Result<Attr> {
        if changes.atime.is_some() {
            // A user's `utimensat` (the kernel never flushes atime): the
            // inode flags' rules, which the engine cannot apply to times
            // that come with the kernel's ctime, with "atime now +
            // kernel-clock mtime" as the both-`UTIME_NOW` touch.
            let mut ch = SetAttr {
                atime: changes.atime,
                mtime: changes.mtime,
                ..Default::default()
            };
            if ch.atime == Some(TimeSet::Now) && matches!(ch.mtime, Some(TimeSet::At(_))) {
                ch.mtime = Some(TimeSet::Now);
            }
            lanefs_core::iflags::may_setattr(self.fs.get_flags(ino)?, &ch, false)?;
        }
        if !self.config.default_permissions && changes.atime.is_some() {
            let mut ch = changes.clone();
            if ch.atime == Some(TimeSet::Now) && matches!(ch.mtime, Some(TimeSet::At(_))) {
                ch.mtime = Some(TimeSet::Now);
            }
            return self.fs.setattr(cred, ino, &ch, file);
        }
        let times = SetAttr {
            atime: changes.atime,
            mtime: changes.mtime,
            ctime: changes.ctime,
            ..Default::default()
        };
        let rest = SetAttr {
            atime: None,
            mtime: None,
            ctime: None,
            ..changes.clone()
        };
        if rest != SetAttr::default() {
            self.fs.setattr(cred, ino, &rest, file)?;
        }
        self.fs.setattr(&Cred::root(), ino, &times, file)
    }

    /// An empty SETATTR: what `chown(f, -1, -1)` becomes (the kernel
    /// sends ATTR_CTIME alone, and under `FUSE_HANDLE_KILLPRIV_V2` drops
    /// the ATTR_KILL_SUID/SGID that `chown_common` adds, leaving them to
    /// us). Linux: on a non-directory setuid goes, setgid too when
    /// group-exec is set or the caller is outside the group
    /// (`setattr_should_drop_sgid`); that is a mode change, so a caller
    /// who is neither owner nor root gets EPERM (`setattr_prepare`) when a
    /// bit would go; otherwise ctime moves.
    ///
    /// The same empty SETATTR is also what `file_remove_privs` sends
    /// before a write by a caller without `CAP_FSETID` (ATTR_FORCE alone),
    /// which must not fail: the WRITE that follows drops the bits by the
    /// writer's rules. The wire does not tell the two apart, the caller's
    /// thread does: it is blocked in its system call while we answer, so
    /// `/proc/<pid>/syscall` names `chown`/`fchown`/`lchown`/`fchownat`
    /// for the first ([`crate::cred::in_chown_syscall`]). If that cannot
    /// be read, the request is taken for the write's (only ctime moves).
    fn chown_no_ids(
        &self,
        cred: &lanefs_core::Cred,
        caller_pid: u32,
        ino: Ino,
        file: Option<&lanefs_core::OpenFile>,
    ) -> Result<Attr> {
        let a = self.fs.getattr(ino)?;
        let mut kill = 0u16;
        if a.kind != lanefs_core::FileKind::Directory {
            kill = a.perm & S_ISUID;
            if a.perm & S_ISGID != 0
                && (a.perm & S_IXGRP != 0 || (!cred.is_root() && !cred.in_group(a.gid)))
            {
                kill |= S_ISGID;
            }
        }
        let owner = cred.is_root() || cred.uid == a.uid;
        if kill != 0 && !owner && crate::cred::in_chown_syscall(caller_pid) {
            return Err(Errno::EPERM);
        }
        let ch = if kill != 0 && owner {
            SetAttr {
                mode: Some((a.perm & !kill) as u32),
                ..Default::default()
            }
        } else {
            SetAttr {
                ctime: Some(lanefs_core::Timespec::now()),
                ..Default::default()
            }
        };
        self.fs.setattr(cred, ino, &ch, file)
    }
}

/// Whether a SETATTR sets any time.
fn has_times(ch: &SetAttr) -> bool {
    ch.atime.is_some() || ch.mtime.is_some() || ch.ctime.is_some()
}
