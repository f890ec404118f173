//! The calls that change attributes by path — `set_permissions`,
//! `chown`/`lchown`, `set_times`/`set_symlink_times`, `truncate`, and
//! the inode flags (`flags`/`set_flags`, `lsattr`/`chattr`) — with
//! `access`, `statfs`, `sync` and the extended-attribute calls; and
//! `chown_common`, shared with `File::set_owner`.
//!
//! Locks and atomics: none of its own; each call pins what it resolved by
//! a counted lookup for its duration (`walk.rs`), the rest is the core's.

use std::io;
use std::path::Path;

use lanefs_core::iflags::FlagsSet;
use lanefs_core::{
    Cred, Errno, FileKind, Fs, Ino, OpenFile, Result, SetAttr, StatFs, TimeSet, MAY_EXEC, MAY_READ,
    MAY_WRITE, XATTR_CREATE, XATTR_NAME_MAX, XATTR_REPLACE, XATTR_SIZE_MAX,
};

use crate::{bytes, Filesystem};

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

impl Filesystem {
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

    /// `lsattr`: the inode flags of `path` (`FS_IOC_GETFLAGS`; follows
    /// symlinks): `FS_IMMUTABLE_FL`, `FS_APPEND_FL`, `FS_NODUMP_FL`,
    /// `FS_NOATIME_FL` (`lanefs_core::iflags`). As the ioctl on a
    /// descriptor `open(path, O_RDONLY)` gave: read permission is needed,
    /// and anything but a regular file or a directory is `ENOTTY`.
    pub fn flags<P: AsRef<Path>>(&self, path: P) -> io::Result<u32> {
        let h = self.resolve(bytes(&path), true)?;
        Self::flags_open_checks(self.core(), &self.cred, h.ino, h.kind)?;
        Ok(self.core().get_flags(h.ino)?)
    }

    /// `chattr`: set the inode flags of `path` (`FS_IOC_SETFLAGS` with
    /// [`FlagsSet::Flags`], `FS_IOC_FSSETXATTR` with [`FlagsSet::Fsx`];
    /// follows symlinks), by the rules of `Fs::set_flags`: the owner or
    /// root, immutable and append-only by root only. Opened as by
    /// [`flags`](Self::flags).
    pub fn set_flags<P: AsRef<Path>>(&self, path: P, set: FlagsSet) -> io::Result<()> {
        let h = self.resolve(bytes(&path), true)?;
        Self::flags_open_checks(self.core(), &self.cred, h.ino, h.kind)?;
        self.core().set_flags(&self.cred, h.ino, set)?;
        Ok(())
    }

    /// What opening `ino` read-only for the flag ioctls asks.
    fn flags_open_checks(core: &Fs, cred: &Cred, ino: Ino, kind: FileKind) -> Result<()> {
        if !matches!(kind, FileKind::Regular | FileKind::Directory) {
            return Err(Errno::ENOTTY);
        }
        core.access(cred, ino, MAY_READ)
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
}
