//! Inode flags, as Linux tmpfs keeps them (`chattr`/`lsattr`:
//! `FS_IOC_GETFLAGS`/`FS_IOC_SETFLAGS`, and `FS_IOC_FSGETXATTR`/
//! `FS_IOC_FSSETXATTR`'s xflags): `FS_IMMUTABLE_FL`, `FS_APPEND_FL`,
//! `FS_NODUMP_FL` and `FS_NOATIME_FL` on regular files and directories
//! (mm/shmem.c, `shmem_fileattr_get/set`), stored in the inode record
//! (`InodeRecord::flags`) and mirrored in its permission group
//! (`attr_seq`), so that checks on hot paths read them without `meta`.
//!
//! Setting them ([`Fs::set_flags`]) follows `vfs_fileattr_set` and
//! `fileattr_set_prepare`: only the owner or root (`EPERM`), a change of
//! immutable or append-only only by root (`CAP_LINUX_IMMUTABLE`, `EPERM`),
//! any other flag or xflag `EOPNOTSUPP`; ctime moves.
//!
//! The rules that refuse changes are the VFS's, each applied where the
//! engine makes the check Linux makes beside it (the FUSE kernel inode
//! carries no `S_IMMUTABLE`/`S_APPEND`, so through a mount the kernel
//! enforces nothing and the engine is the only checker):
//! * `may_write` in every permission check (`inode_permission`'s
//!   `IS_IMMUTABLE` for `MAY_WRITE`): opens for writing or `O_TRUNC`,
//!   `truncate(2)`, creates, links, removals and renames in an immutable
//!   directory, a directory moved to another parent — `EPERM`, root too;
//! * `may_open` — an append-only file opens for writing only with
//!   `O_APPEND`, never with `O_TRUNC` (`may_open`);
//! * `blocks_delete` — no entry of an append-only directory goes, and no
//!   immutable or append-only inode loses a name (`may_delete`, for
//!   unlink, rmdir and both names of a rename);
//! * `may_link` — no new name for an immutable or append-only inode
//!   (`vfs_link`);
//! * [`may_setattr`] — `notify_change`'s `may_setattr` and the truncates'
//!   `IS_APPEND` (`vfs_truncate`, `do_ftruncate`);
//! * [`may_fallocate`] — `vfs_fallocate`;
//! * `may_write_xattr` — `xattr_permission`/`may_write_xattr` (ACLs too);
//! * `skips_atime` — `atime_needs_update`'s `S_NOATIME`.
//!
//! A new inode inherits its directory's `FS_NODUMP_FL` and
//! `FS_NOATIME_FL` (`inherited`), as on tmpfs.
//!
//! As on tmpfs, writes through a handle opened before the flag was set
//! still succeed (the VFS checks at open), and so does an `ftruncate` of
//! an immutable file through such a handle; `fallocate` does not. Unlike
//! tmpfs, `chown(f, -1, -1)` of a flagged setuid/setgid file is `EPERM`:
//! its callers express the privilege kill as a mode change
//! (docs/SEMANTICS.md, accepted divergences).
//!
//! Locks: none of its own. [`Fs::set_flags`] changes the record under the
//! inode's `meta` (a directory's under every stripe of its entry lock as
//! well, as a chmod: creates and removals read its flags from the mirror,
//! exact under one stripe).

use lanefs_store::{Errno, FileKind, Ino, InodeRecord, Result, Timespec};

pub use lanefs_store::{
    FS_APPEND_FL, FS_IMMUTABLE_FL, FS_NOATIME_FL, FS_NODUMP_FL, INODE_FLAGS_KNOWN,
};

use crate::fs::{fold_dir_changes, touch_c};
use crate::{Attr, Cred, Fs, SetAttr, TimeSet, FALLOC_FL_KEEP_SIZE, MAY_WRITE};

/// `FS_XFLAG_IMMUTABLE`.
pub const FS_XFLAG_IMMUTABLE: u32 = 0x8;
/// `FS_XFLAG_APPEND`.
pub const FS_XFLAG_APPEND: u32 = 0x10;
/// `FS_XFLAG_SYNC`.
pub const FS_XFLAG_SYNC: u32 = 0x20;
/// `FS_XFLAG_NOATIME`.
pub const FS_XFLAG_NOATIME: u32 = 0x40;
/// `FS_XFLAG_NODUMP`.
pub const FS_XFLAG_NODUMP: u32 = 0x80;
/// `FS_XFLAG_PROJINHERIT`.
const FS_XFLAG_PROJINHERIT: u32 = 0x200;
/// `FS_XFLAG_EXTSIZE`: an extent size hint (cleared when the hint is 0).
const FS_XFLAG_EXTSIZE: u32 = 0x800;
/// `FS_XFLAG_EXTSZINHERIT`: only on a directory (`EINVAL` otherwise).
const FS_XFLAG_EXTSZINHERIT: u32 = 0x1000;
/// `FS_XFLAG_DAX`.
const FS_XFLAG_DAX: u32 = 0x8000;
/// `FS_XFLAG_COWEXTSIZE` (cleared when the hint is 0).
const FS_XFLAG_COWEXTSIZE: u32 = 0x10000;
/// `FS_XFLAG_HASATTR`: reported by XFS, ignored when set.
const FS_XFLAG_HASATTR: u32 = 0x8000_0000;
/// `FS_XFLAG_COMMON`: the xflags that have an `FS_*_FL` twin.
const FS_XFLAG_COMMON: u32 = FS_XFLAG_SYNC
    | FS_XFLAG_IMMUTABLE
    | FS_XFLAG_APPEND
    | FS_XFLAG_NODUMP
    | FS_XFLAG_NOATIME
    | FS_XFLAG_DAX
    | FS_XFLAG_PROJINHERIT;

/// `FS_SYNC_FL`, `FS_DAX_FL`, `FS_PROJINHERIT_FL`: what the common xflags
/// without a flag this engine keeps become (and are refused as).
const FS_SYNC_FL: u32 = 0x8;
const FS_DAX_FL: u32 = 0x0200_0000;
const FS_PROJINHERIT_FL: u32 = 0x2000_0000;

/// The pairs of an `FS_*_FL` flag and its `FS_XFLAG_*` twin.
const TWINS: [(u32, u32); 7] = [
    (FS_IMMUTABLE_FL, FS_XFLAG_IMMUTABLE),
    (FS_APPEND_FL, FS_XFLAG_APPEND),
    (FS_SYNC_FL, FS_XFLAG_SYNC),
    (FS_NOATIME_FL, FS_XFLAG_NOATIME),
    (FS_NODUMP_FL, FS_XFLAG_NODUMP),
    (FS_DAX_FL, FS_XFLAG_DAX),
    (FS_PROJINHERIT_FL, FS_XFLAG_PROJINHERIT),
];

/// `struct fsxattr`, as `FS_IOC_FSGETXATTR`/`FS_IOC_FSSETXATTR` carry it
/// (28 bytes: five `u32`s, then 8 bytes of padding, which are ignored).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsxAttr {
    pub xflags: u32,
    pub extsize: u32,
    pub nextents: u32,
    pub projid: u32,
    pub cowextsize: u32,
}

impl FsxAttr {
    /// Bytes of `struct fsxattr`.
    pub const SIZE: usize = 28;

    /// What `FS_IOC_FSGETXATTR` reports for `flags` (`fileattr_fill_flags`).
    pub fn of_flags(flags: u32) -> FsxAttr {
        let xflags = TWINS
            .iter()
            .filter(|(f, _)| flags & f != 0)
            .fold(0, |x, (_, xf)| x | xf);
        FsxAttr {
            xflags,
            ..FsxAttr::default()
        }
    }

    /// The `FS_*_FL` flags its common xflags stand for
    /// (`fileattr_fill_xflags`).
    pub fn flags(&self) -> u32 {
        TWINS
            .iter()
            .filter(|(_, xf)| self.xflags & xf != 0)
            .fold(0, |f, (fl, _)| f | fl)
    }

    /// Parse the struct (native byte order, as the kernel copies it);
    /// `None` when `b` is shorter than [`FsxAttr::SIZE`].
    pub fn from_bytes(b: &[u8]) -> Option<FsxAttr> {
        let w = |i: usize| -> Option<u32> {
            Some(u32::from_ne_bytes(
                b.get(i * 4..i * 4 + 4)?.try_into().ok()?,
            ))
        };
        if b.len() < Self::SIZE {
            return None;
        }
        Some(FsxAttr {
            xflags: w(0)?,
            extsize: w(1)?,
            nextents: w(2)?,
            projid: w(3)?,
            cowextsize: w(4)?,
        })
    }

    /// The struct as the kernel lays it out (padding zero).
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut out = [0u8; Self::SIZE];
        let words = [
            self.xflags,
            self.extsize,
            self.nextents,
            self.projid,
            self.cowextsize,
        ];
        for (i, v) in words.iter().enumerate() {
            out[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
        }
        out
    }
}

/// What a set asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlagsSet {
    /// `FS_IOC_SETFLAGS`: the whole flag word (an `int`).
    Flags(u32),
    /// `FS_IOC_FSSETXATTR`.
    Fsx(FsxAttr),
}

/// `inode_permission`: a write to an immutable inode is `EPERM`.
pub(crate) fn may_write(flags: u32, mask: u32) -> Result<()> {
    if mask & MAY_WRITE != 0 && flags & FS_IMMUTABLE_FL != 0 {
        return Err(Errno::EPERM);
    }
    Ok(())
}

/// `may_open`, after the permission check: an append-only file opens for
/// writing only with `O_APPEND`, and never with `O_TRUNC`.
pub(crate) fn may_open(flags: u32, open_flags: i32) -> Result<()> {
    if flags & FS_APPEND_FL != 0
        && ((open_flags & libc::O_ACCMODE != libc::O_RDONLY && open_flags & libc::O_APPEND == 0)
            || open_flags & libc::O_TRUNC != 0)
    {
        return Err(Errno::EPERM);
    }
    Ok(())
}

/// `may_delete` (with `EPERM`, beside the sticky rule): an entry of an
/// append-only directory (`dir`'s flags) may not go, nor a name of an
/// immutable or append-only inode (`victim`'s).
pub(crate) fn blocks_delete(dir: u32, victim: u32) -> bool {
    dir & FS_APPEND_FL != 0 || victim & (FS_IMMUTABLE_FL | FS_APPEND_FL) != 0
}

/// `vfs_link`: an immutable or append-only inode gets no new name.
pub(crate) fn may_link(flags: u32) -> Result<()> {
    if flags & (FS_IMMUTABLE_FL | FS_APPEND_FL) != 0 {
        return Err(Errno::EPERM);
    }
    Ok(())
}

/// The flag checks of a setattr `ch` of an inode with `flags`, before
/// any other of its checks but the truncate's own (`by_handle`: through
/// an open file, `ftruncate`):
/// * a size: append-only `EPERM` (`vfs_truncate`, `do_ftruncate`);
///   immutable `EPERM` by path (its `inode_permission`), allowed through
///   a handle (tmpfs lets an `ftruncate` through a descriptor opened
///   before the flag was set);
/// * mode, owner or group: immutable or append-only `EPERM`
///   (`may_setattr`);
/// * times: both `UTIME_NOW` (a touch) `EPERM` if immutable; any other
///   time change if immutable or append-only. A change that carries an
///   explicit ctime is the FUSE kernel's own times (the writeback cache's
///   flush of a writer's c/mtime, or its ctime of `chown(f, -1, -1)`),
///   not a user's `utimensat`, and is let through (the FUSE adapter
///   applies the rules itself to what it can tell is a user's).
pub fn may_setattr(flags: u32, ch: &SetAttr, by_handle: bool) -> Result<()> {
    if flags & (FS_IMMUTABLE_FL | FS_APPEND_FL) == 0 {
        return Ok(());
    }
    let both = FS_IMMUTABLE_FL | FS_APPEND_FL;
    let refused = |mask: u32| flags & mask != 0;
    if ch.size.is_some() && refused(if by_handle { FS_APPEND_FL } else { both }) {
        return Err(Errno::EPERM);
    }
    if (ch.mode.is_some() || ch.uid.is_some() || ch.gid.is_some()) && refused(both) {
        return Err(Errno::EPERM);
    }
    if ch.ctime.is_none() && (ch.atime.is_some() || ch.mtime.is_some()) {
        let touch = ch.atime == Some(TimeSet::Now) && ch.mtime == Some(TimeSet::Now);
        if refused(if touch { FS_IMMUTABLE_FL } else { both }) {
            return Err(Errno::EPERM);
        }
    }
    Ok(())
}

/// `vfs_fallocate`: only a plain allocation (± `KEEP_SIZE`) of an
/// append-only file, nothing of an immutable one. Public for the path
/// layer, which makes `vfs_fallocate`'s later checks (`EFBIG`) itself.
pub fn may_fallocate(flags: u32, mode: i32) -> Result<()> {
    if (mode & !FALLOC_FL_KEEP_SIZE != 0 && flags & FS_APPEND_FL != 0)
        || flags & FS_IMMUTABLE_FL != 0
    {
        return Err(Errno::EPERM);
    }
    Ok(())
}

/// `may_write_xattr`: no extended attribute (ACLs included) of an
/// immutable or append-only inode is set or removed.
pub(crate) fn may_write_xattr(flags: u32) -> Result<()> {
    may_link(flags)
}

/// The flags a new inode in a directory with `dir` flags gets
/// (`__shmem_get_inode`'s `SHMEM_FL_INHERITED`, every kind).
pub(crate) fn inherited(dir: u32) -> u32 {
    dir & (FS_NODUMP_FL | FS_NOATIME_FL)
}

/// `atime_needs_update`: an inode with `FS_NOATIME_FL` keeps its atime.
pub(crate) fn skips_atime(flags: u32) -> bool {
    flags & FS_NOATIME_FL != 0
}

/// The flags a set by `cred` of `rec` leaves (`vfs_fileattr_set`,
/// `fileattr_set_prepare`, `shmem_fileattr_set`, in their order).
fn planned(cred: &Cred, rec: &InodeRecord, set: FlagsSet) -> Result<u32> {
    if !cred.is_root() && cred.uid != rec.uid {
        return Err(Errno::EPERM);
    }
    let (flags, fsx) = match set {
        FlagsSet::Flags(f) => (f, None),
        FlagsSet::Fsx(x) => (x.flags(), Some(x)),
    };
    if (flags ^ rec.flags) & (FS_IMMUTABLE_FL | FS_APPEND_FL) != 0 && !cred.is_root() {
        return Err(Errno::EPERM);
    }
    if let Some(mut x) = fsx {
        x.xflags &= !FS_XFLAG_HASATTR;
        if rec.kind != FileKind::Directory && x.xflags & FS_XFLAG_EXTSZINHERIT != 0 {
            return Err(Errno::EINVAL);
        }
        // Extent size hints of zero turn their flags off.
        if x.extsize == 0 {
            x.xflags &= !(FS_XFLAG_EXTSIZE | FS_XFLAG_EXTSZINHERIT);
        }
        if x.cowextsize == 0 {
            x.xflags &= !FS_XFLAG_COWEXTSIZE;
        }
        // `fileattr_has_fsx`: anything but the common flags.
        if x.xflags & !FS_XFLAG_COMMON != 0 || x.extsize != 0 || x.projid != 0 || x.cowextsize != 0
        {
            return Err(Errno::EOPNOTSUPP);
        }
    }
    if flags & !INODE_FLAGS_KNOWN != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok(flags)
}

impl Fs {
    /// The inode flags of `ino` (`FS_IOC_GETFLAGS`; `FsxAttr::of_flags`
    /// gives `FS_IOC_FSGETXATTR`'s answer). `ENOTTY` for anything but a
    /// regular file or a directory, as tmpfs.
    pub fn get_flags(&self, ino: Ino) -> Result<u32> {
        let inode = self.inner.iget(ino)?;
        if !matches!(inode.kind, FileKind::Regular | FileKind::Directory) {
            return Err(Errno::ENOTTY);
        }
        let a = inode.meta.perm_attr();
        if a.freed() {
            return Err(Errno::ENOENT);
        }
        Ok(a.iflags())
    }

    /// Set the inode flags of `ino` (`FS_IOC_SETFLAGS`/`FS_IOC_FSSETXATTR`)
    /// by the rules in the module doc; ctime moves. Returns the
    /// attributes after. `ENOTTY` for anything but a regular file or a
    /// directory.
    pub fn set_flags(&self, cred: &Cred, ino: Ino, set: FlagsSet) -> Result<Attr> {
        let fs = &self.inner;
        let inode = fs.iget(ino)?;
        if !matches!(inode.kind, FileKind::Regular | FileKind::Directory) {
            return Err(Errno::ENOTTY);
        }
        // A directory's flags decide creates and removals in it, checked
        // from its mirror under one stripe: hold them all (as a chmod).
        let frozen = fs.dir_freeze(&inode);
        if let Some(f) = &frozen {
            f.fold(|c, next| fold_dir_changes(&inode, c, next, true));
        }
        let mut m = inode.meta.lock();
        if m.freed {
            return Err(Errno::ENOENT);
        }
        let flags = planned(cred, &m.rec, set)?;
        let now = Timespec::now().max(m.rec.ctime);
        m.rec.flags = flags;
        touch_c(&inode, &mut m, now);
        Ok(inode.attr_locked(&m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(uid: u32, flags: u32) -> InodeRecord {
        InodeRecord {
            uid,
            flags,
            ..InodeRecord::default()
        }
    }

    #[test]
    fn xflags_map_both_ways() {
        let all = INODE_FLAGS_KNOWN;
        let x = FsxAttr::of_flags(all);
        // What tmpfs reports for all four: 0xd8.
        assert_eq!(x.xflags, 0xd8);
        assert_eq!(x.flags(), all);
        assert_eq!(FsxAttr::from_bytes(&x.to_bytes()), Some(x));
        assert_eq!(FsxAttr::from_bytes(&[0; 27]), None);
    }

    #[test]
    fn set_rules_in_linux_order() {
        let user = Cred::user(1000, 1000);
        let other = Cred::user(1001, 1001);
        let root = Cred::root();
        let r = rec(1000, 0);
        // Not the owner: EPERM, whatever is asked.
        assert_eq!(planned(&other, &r, FlagsSet::Flags(0)), Err(Errno::EPERM));
        assert_eq!(
            planned(&user, &r, FlagsSet::Flags(FS_NODUMP_FL)),
            Ok(FS_NODUMP_FL)
        );
        // Immutable or append-only changes need root, before EOPNOTSUPP.
        let ia = FS_IMMUTABLE_FL | FS_SYNC_FL;
        assert_eq!(planned(&user, &r, FlagsSet::Flags(ia)), Err(Errno::EPERM));
        assert_eq!(
            planned(&root, &r, FlagsSet::Flags(ia)),
            Err(Errno::EOPNOTSUPP)
        );
        assert_eq!(
            planned(&user, &r, FlagsSet::Flags(FS_SYNC_FL)),
            Err(Errno::EOPNOTSUPP)
        );
        // Keeping immutable while changing another flag is the owner's.
        let ri = rec(1000, FS_IMMUTABLE_FL);
        let keep = FS_IMMUTABLE_FL | FS_NOATIME_FL;
        assert_eq!(planned(&user, &ri, FlagsSet::Flags(keep)), Ok(keep));
        assert_eq!(planned(&user, &ri, FlagsSet::Flags(0)), Err(Errno::EPERM));
        // xflags: hints and flags outside the common ones.
        let fsx = |xflags, extsize| {
            FlagsSet::Fsx(FsxAttr {
                xflags,
                extsize,
                ..FsxAttr::default()
            })
        };
        assert_eq!(
            planned(&root, &r, fsx(FS_XFLAG_IMMUTABLE, 0)),
            Ok(FS_IMMUTABLE_FL)
        );
        assert_eq!(planned(&root, &r, fsx(FS_XFLAG_EXTSIZE, 0)), Ok(0));
        assert_eq!(planned(&root, &r, fsx(FS_XFLAG_HASATTR, 0)), Ok(0));
        assert_eq!(planned(&root, &r, fsx(0, 4096)), Err(Errno::EOPNOTSUPP));
        assert_eq!(planned(&root, &r, fsx(0x100, 0)), Err(Errno::EOPNOTSUPP));
        assert_eq!(
            planned(&root, &r, fsx(FS_XFLAG_SYNC, 0)),
            Err(Errno::EOPNOTSUPP)
        );
        assert_eq!(
            planned(&root, &r, fsx(FS_XFLAG_EXTSZINHERIT, 0)),
            Err(Errno::EINVAL)
        );
        let d = InodeRecord {
            kind: FileKind::Directory,
            ..r
        };
        assert_eq!(planned(&root, &d, fsx(FS_XFLAG_EXTSZINHERIT, 0)), Ok(0));
    }

    #[test]
    fn setattr_rules() {
        let ch = |f: fn(&mut SetAttr)| {
            let mut c = SetAttr::default();
            f(&mut c);
            c
        };
        let (i, a) = (FS_IMMUTABLE_FL, FS_APPEND_FL);
        let size = ch(|c| c.size = Some(0));
        assert_eq!(may_setattr(i, &size, false), Err(Errno::EPERM));
        assert_eq!(may_setattr(i, &size, true), Ok(()));
        assert_eq!(may_setattr(a, &size, true), Err(Errno::EPERM));
        let touch = ch(|c| (c.atime, c.mtime) = (Some(TimeSet::Now), Some(TimeSet::Now)));
        assert_eq!(may_setattr(i, &touch, false), Err(Errno::EPERM));
        assert_eq!(may_setattr(a, &touch, false), Ok(()));
        let now_omit = ch(|c| c.atime = Some(TimeSet::Now));
        assert_eq!(may_setattr(a, &now_omit, false), Err(Errno::EPERM));
        let mode = ch(|c| c.mode = Some(0o600));
        assert_eq!(may_setattr(a, &mode, false), Err(Errno::EPERM));
        assert_eq!(may_setattr(FS_NODUMP_FL, &mode, false), Ok(()));
        let kernel_times = ch(|c| {
            c.mtime = Some(TimeSet::At(Timespec::default()));
            c.ctime = Some(Timespec::default());
        });
        assert_eq!(may_setattr(a, &kernel_times, true), Ok(()));
        assert_eq!(may_open(a, libc::O_WRONLY), Err(Errno::EPERM));
        assert_eq!(may_open(a, libc::O_WRONLY | libc::O_APPEND), Ok(()));
        assert_eq!(
            may_open(a, libc::O_RDONLY | libc::O_TRUNC),
            Err(Errno::EPERM)
        );
        assert_eq!(may_fallocate(a, FALLOC_FL_KEEP_SIZE), Ok(()));
        assert_eq!(
            may_fallocate(a, crate::FALLOC_FL_PUNCH_HOLE),
            Err(Errno::EPERM)
        );
        assert_eq!(may_fallocate(i, 0), Err(Errno::EPERM));
    }
}
