//! Extended attributes, with Linux's namespace rules (`xattr_permission`):
//! `user.*` only on regular files and directories (and in a sticky
//! directory only its owner may write them), `trusted.*` root only,
//! `security.*` readable by all and writable by root, `system.*` and
//! unknown prefixes `EOPNOTSUPP` after the ordinary permission check.
//! POSIX ACLs (`system.posix_acl_access`, `system.posix_acl_default`) are
//! not kept: reading one finds none (`ENODATA`, as tmpfs for a file without
//! an ACL), removing one succeeds for the owner or root (`EPERM` for
//! others; a default ACL of a non-directory: always; removing the access
//! ACL drops setgid when the owner is outside the group, as
//! `posix_acl_update_mode`), setting one is
//! `EOPNOTSUPP` (docs/SEMANTICS.md, accepted divergences).
//! Values live in the inode record, under the inode's `meta` lock; a change
//! of a regular file's xattrs updates its privilege hint
//! ([`Inode::note_privs`](crate::inode::Inode::note_privs)) under it. A
//! freed inode has none left ([`Inode::mark_freed`](crate::inode::Inode::mark_freed)):
//! every call on one (reached through a reference taken before the free)
//! answers `ENOENT`, as if it came after the name went.

use lanefs_store::{Errno, FileKind, InodeRecord, Result, Timespec};

use crate::fs::touch_c;
use crate::perm::{self, has_privs, owner_or_root, S_ISGID, S_ISVTX};
use crate::{
    Cred, Fs, MAY_READ, MAY_WRITE, XATTR_CREATE, XATTR_NAME_MAX, XATTR_REPLACE, XATTR_SIZE_MAX,
    XATTR_TOTAL_MAX,
};

const PREFIXES: [&[u8]; 4] = [b"user.", b"trusted.", b"security.", b"system."];

const ACL_ACCESS: &[u8] = crate::XATTR_NAME_POSIX_ACL_ACCESS;
const ACL_DEFAULT: &[u8] = crate::XATTR_NAME_POSIX_ACL_DEFAULT;

fn is_acl(name: &[u8]) -> bool {
    name == ACL_ACCESS || name == ACL_DEFAULT
}

/// A symlink has no ACL operations at all (`EOPNOTSUPP`, as on tmpfs).
fn acl_on_symlink(name: &[u8], rec: &InodeRecord) -> Result<()> {
    if is_acl(name) && rec.kind == FileKind::Symlink {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok(())
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > XATTR_NAME_MAX {
        return Err(Errno::ERANGE);
    }
    if name.contains(&0) {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// `xattr_permission` followed by the handler lookup.
fn xattr_permission(cred: &Cred, rec: &InodeRecord, name: &[u8], write: bool) -> Result<()> {
    let denied = if write { Errno::EPERM } else { Errno::ENODATA };
    let mask = if write { MAY_WRITE } else { MAY_READ };
    if name.starts_with(b"security.") {
        if write && !cred.is_root() {
            return Err(Errno::EPERM);
        }
    } else if name.starts_with(b"system.") {
        // No POSIX ACL support: let the permission check speak first.
    } else if name.starts_with(b"trusted.") {
        if !cred.is_root() {
            return Err(denied);
        }
    } else if name.starts_with(b"user.") {
        if rec.kind != FileKind::Regular && rec.kind != FileKind::Directory {
            return Err(denied);
        }
        if write
            && rec.kind == FileKind::Directory
            && rec.perm & S_ISVTX != 0
            && !owner_or_root(cred, rec)
        {
            return Err(Errno::EPERM);
        }
        perm::permission(cred, rec, mask)?;
    } else {
        perm::permission(cred, rec, mask)?;
    }
    match PREFIXES.iter().find(|p| name.starts_with(p)) {
        None => Err(Errno::EOPNOTSUPP),
        Some(p) if *p == b"system." => Err(Errno::EOPNOTSUPP),
        Some(p) if name.len() == p.len() => Err(Errno::EINVAL),
        Some(_) => Ok(()),
    }
}

pub(crate) use crate::XATTR_NAME_CAPS;

/// Remove the file capability from `rec`, as Linux does when privileges
/// are killed: `security_inode_need_killpriv` (commoncap.c
/// `cap_inode_need_killpriv`: a `security.capability` value of non-zero
/// length is present) then `security_inode_killpriv` (`cap_inode_killpriv`:
/// remove it). Neither looks at the caller's credentials, so root's writes
/// remove it too. Returns whether it was removed. Called under `meta`.
pub(crate) fn kill_capability(rec: &mut InodeRecord) -> bool {
    match capability_at(rec) {
        Some(i) => {
            rec.xattrs.remove(i);
            true
        }
        None => false,
    }
}

/// Where `rec` holds a non-empty `security.capability` (what
/// [`kill_capability`] removes).
fn capability_at(rec: &InodeRecord) -> Option<usize> {
    let found = rec
        .xattrs
        .binary_search_by(|(k, _)| k.as_slice().cmp(XATTR_NAME_CAPS));
    found.ok().filter(|i| !rec.xattrs[*i].1.is_empty())
}

/// `rec` holds a non-empty `security.capability` (a write removes it).
pub(crate) fn has_capability(rec: &InodeRecord) -> bool {
    capability_at(rec).is_some()
}

fn total_size(rec: &InodeRecord) -> usize {
    rec.xattrs.iter().map(|(k, v)| k.len() + v.len()).sum()
}

impl Fs {
    /// Set extended attribute `name` ([`XATTR_CREATE`]: must not exist,
    /// [`XATTR_REPLACE`]: must exist).
    pub fn setxattr(
        &self,
        cred: &Cred,
        ino: lanefs_store::Ino,
        name: &[u8],
        value: &[u8],
        flags: u32,
    ) -> Result<()> {
        if flags & !(XATTR_CREATE | XATTR_REPLACE) != 0 {
            return Err(Errno::EINVAL);
        }
        check_name(name)?;
        if value.len() > XATTR_SIZE_MAX {
            return Err(Errno::E2BIG);
        }
        let inode = self.inner.iget(ino)?;
        let mut m = inode.meta.lock();
        if m.freed {
            return Err(Errno::ENOENT);
        }
        acl_on_symlink(name, &m.rec)?;
        if is_acl(name) && !owner_or_root(cred, &m.rec) {
            // `set_posix_acl`: only the owner may set an ACL.
            return Err(Errno::EPERM);
        }
        xattr_permission(cred, &m.rec, name, true)?;
        let pos = m
            .rec
            .xattrs
            .binary_search_by(|(k, _)| k.as_slice().cmp(name));
        let old_len = match pos {
            Ok(_) if flags & XATTR_CREATE != 0 => return Err(Errno::EEXIST),
            Err(_) if flags & XATTR_REPLACE != 0 => return Err(Errno::ENODATA),
            Ok(i) => m.rec.xattrs[i].0.len() + m.rec.xattrs[i].1.len(),
            Err(_) => 0,
        };
        if total_size(&m.rec) - old_len + name.len() + value.len() > XATTR_TOTAL_MAX {
            return Err(Errno::ENOSPC);
        }
        let had_privs = has_privs(&m.rec);
        match pos {
            Ok(i) => m.rec.xattrs[i].1 = value.to_vec(),
            Err(i) => m.rec.xattrs.insert(i, (name.to_vec(), value.to_vec())),
        }
        inode.note_privs(had_privs, &m.rec);
        touch_c(&inode, &mut m, Timespec::now());
        Ok(())
    }

    /// The value of extended attribute `name` (`ENODATA` if unset).
    pub fn getxattr(&self, cred: &Cred, ino: lanefs_store::Ino, name: &[u8]) -> Result<Vec<u8>> {
        check_name(name)?;
        let inode = self.inner.iget(ino)?;
        let m = inode.meta.lock();
        if m.freed {
            // Its values went with it (`Inode::mark_freed`).
            return Err(Errno::ENOENT);
        }
        acl_on_symlink(name, &m.rec)?;
        if is_acl(name) {
            // No ACL is ever kept; the VFS checks no permission for it.
            return Err(Errno::ENODATA);
        }
        xattr_permission(cred, &m.rec, name, false)?;
        match m
            .rec
            .xattrs
            .binary_search_by(|(k, _)| k.as_slice().cmp(name))
        {
            Ok(i) => Ok(m.rec.xattrs[i].1.clone()),
            Err(_) => Err(Errno::ENODATA),
        }
    }

    /// Names of the extended attributes of `ino`, each followed by a NUL
    /// (`trusted.*` only for root).
    pub fn listxattr(&self, cred: &Cred, ino: lanefs_store::Ino) -> Result<Vec<u8>> {
        let inode = self.inner.iget(ino)?;
        let m = inode.meta.lock();
        if m.freed {
            return Err(Errno::ENOENT);
        }
        let mut out = Vec::new();
        for (k, _) in &m.rec.xattrs {
            if k.starts_with(b"trusted.") && !cred.is_root() {
                continue;
            }
            out.extend_from_slice(k);
            out.push(0);
        }
        Ok(out)
    }

    /// Remove extended attribute `name` (`ENODATA` if unset).
    pub fn removexattr(&self, cred: &Cred, ino: lanefs_store::Ino, name: &[u8]) -> Result<()> {
        check_name(name)?;
        let inode = self.inner.iget(ino)?;
        let mut m = inode.meta.lock();
        acl_on_symlink(name, &m.rec)?;
        if is_acl(name) {
            // `set_posix_acl(.., NULL)` on a file without an ACL: a default
            // ACL of a non-directory is no change; otherwise the owner (or
            // root) removes nothing and ctime moves (`simple_set_acl`).
            if name == ACL_DEFAULT && m.rec.kind != FileKind::Directory {
                return Ok(());
            }
            if !owner_or_root(cred, &m.rec) {
                return Err(Errno::EPERM);
            }
            if m.freed {
                return Err(Errno::ENOENT);
            }
            if name == ACL_ACCESS
                && m.rec.perm & S_ISGID != 0
                && !cred.is_root()
                && !cred.in_group(m.rec.gid)
            {
                // `posix_acl_update_mode`: an owner outside the file's
                // group (without CAP_FSETID) loses setgid, directories too.
                let had_privs = has_privs(&m.rec);
                m.rec.perm &= !S_ISGID;
                inode.note_privs(had_privs, &m.rec);
            }
            touch_c(&inode, &mut m, Timespec::now());
            return Ok(());
        }
        if m.freed {
            return Err(Errno::ENOENT);
        }
        xattr_permission(cred, &m.rec, name, true)?;
        match m
            .rec
            .xattrs
            .binary_search_by(|(k, _)| k.as_slice().cmp(name))
        {
            Ok(i) => {
                let had_privs = has_privs(&m.rec);
                m.rec.xattrs.remove(i);
                inode.note_privs(had_privs, &m.rec);
                touch_c(&inode, &mut m, Timespec::now());
                Ok(())
            }
            Err(_) => Err(Errno::ENODATA),
        }
    }
}
