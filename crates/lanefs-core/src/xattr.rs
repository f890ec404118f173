//! Extended attributes, with Linux's namespace rules (`xattr_permission`):
//! `user.*` only on regular files and directories (and in a sticky
//! directory only its owner may write them), `trusted.*` root only,
//! `security.*` readable by all and writable by root, `system.*` (other
//! than the ACLs) `EOPNOTSUPP` with no permission check, unknown prefixes
//! `EOPNOTSUPP` after the ordinary permission check.
//! POSIX ACLs (`system.posix_acl_access`, `system.posix_acl_default`)
//! are kept as tmpfs keeps them (`acl`, Linux's `do_set_acl` →
//! `set_posix_acl` → `simple_set_acl`): the value is parsed and checked
//! before anything else (`EINVAL`, `EOPNOTSUPP` for another version), an
//! empty one or one without entries removes the ACL; a symlink has none
//! (`EOPNOTSUPP`); a default ACL only on a directory (`EACCES`; removing
//! one from a non-directory: no change); only the owner or root sets or
//! removes one (`EPERM`); the flags `XATTR_CREATE`/`XATTR_REPLACE` are
//! ignored, as `do_set_acl` ignores them; setting or removing the access
//! ACL updates the mode (`posix_acl_update_mode`: the ACL's bits, an ACL
//! the mode says all of is stored as none, setgid goes when the caller is
//! outside the group and not root); reading needs no permission, and a
//! listing names them first, as `simple_xattr_list`.
//! Values live in the inode record, under the inode's `meta` lock (a
//! directory's ACLs are changed holding every stripe of its entry lock
//! too, before `meta`, as its mode is: `FsInner::dir_freeze`); a change
//! of a regular file's xattrs updates its privilege hint
//! ([`Inode::note_privs`](crate::inode::Inode::note_privs)) under it. A
//! freed inode has none left ([`Inode::mark_freed`](crate::inode::Inode::mark_freed)):
//! every call on one (reached through a reference taken before the free)
//! answers `ENOENT`, as if it came after the name went.

use lanefs_store::{Errno, FileKind, InodeRecord, Result, Timespec};

use crate::acl;
use crate::fs::touch_c;
use crate::perm::{self, has_privs, owner_or_root, S_ISVTX};
use crate::{
    Cred, Fs, MAY_READ, MAY_WRITE, XATTR_CREATE, XATTR_NAME_MAX, XATTR_REPLACE, XATTR_SIZE_MAX,
    XATTR_TOTAL_MAX,
};

const PREFIXES: [&[u8]; 4] = [b"user.", b"trusted.", b"security.", b"system."];

fn is_acl(name: &[u8]) -> bool {
    acl::Kind::of_name(name).is_some()
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
    if write {
        crate::iflags::may_write_xattr(rec.flags)?;
    }
    let denied = if write { Errno::EPERM } else { Errno::ENODATA };
    let mask = if write { MAY_WRITE } else { MAY_READ };
    if name.starts_with(b"security.") {
        if write && !cred.is_root() {
            return Err(Errno::EPERM);
        }
    } else if name.starts_with(b"system.") {
        // Other `system.` names than the ACLs (handled before): the VFS
        // checks nothing for `system.*`; no handler takes them.
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
        if let Some(kind) = acl::Kind::of_name(name) {
            // `do_set_acl`: the value is parsed first; the flags are not
            // looked at.
            let parsed = if value.is_empty() {
                None
            } else {
                acl::parse(value)?
            };
            return self.set_acl(cred, ino, kind, parsed);
        }
        let inode = self.inner.iget(ino)?;
        let mut m = inode.meta.lock();
        if m.freed {
            return Err(Errno::ENOENT);
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
        if let Some(kind) = acl::Kind::of_name(name) {
            // `vfs_get_acl`: no permission is checked.
            return acl::stored(&m.rec, kind)
                .map(<[u8]>::to_vec)
                .ok_or(Errno::ENODATA);
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
        // The ACLs first, as `simple_xattr_list` lists them.
        for kind in [acl::Kind::Access, acl::Kind::Default] {
            if acl::stored(&m.rec, kind).is_some() {
                out.extend_from_slice(kind.name());
                out.push(0);
            }
        }
        for (k, _) in &m.rec.xattrs {
            if is_acl(k) || (k.starts_with(b"trusted.") && !cred.is_root()) {
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
        if let Some(kind) = acl::Kind::of_name(name) {
            // `vfs_remove_acl`: `set_posix_acl(.., NULL)`.
            return self.set_acl(cred, ino, kind, None);
        }
        let inode = self.inner.iget(ino)?;
        let mut m = inode.meta.lock();
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

    /// `set_posix_acl` of a parsed value (`None`: remove), as tmpfs: see
    /// the module doc and [`acl::set`]. Moves ctime when something was
    /// done (removing an ACL that is not there included).
    fn set_acl(
        &self,
        cred: &Cred,
        ino: lanefs_store::Ino,
        kind: acl::Kind,
        value: Option<acl::Acl>,
    ) -> Result<()> {
        let inode = self.inner.iget(ino)?;
        // A directory's ACLs are what creates in it check and inherit,
        // under one stripe of its entry lock (from its mirror, and its
        // default ACL under its `meta`): hold them all, as a change of its
        // mode does (Linux: the inode lock, which creates in it hold).
        let _frozen = self.inner.dir_freeze(&inode);
        let mut m = inode.meta.lock();
        if m.rec.kind == FileKind::Symlink {
            return Err(Errno::EOPNOTSUPP);
        }
        crate::iflags::may_write_xattr(m.rec.flags)?;
        // Checked on a copy: an ACL that does not fit leaves the record
        // as it was.
        let mut rec = m.rec.clone();
        if acl::set(cred, &mut rec, kind, value)?.is_none() {
            return Ok(());
        }
        if m.freed {
            // Its attributes went with it (`Inode::mark_freed`).
            return Err(Errno::ENOENT);
        }
        if total_size(&rec) > XATTR_TOTAL_MAX {
            return Err(Errno::ENOSPC);
        }
        let had_privs = has_privs(&m.rec);
        m.rec.perm = rec.perm;
        m.rec.xattrs = rec.xattrs;
        inode.note_privs(had_privs, &m.rec);
        touch_c(&inode, &mut m, Timespec::now());
        Ok(())
    }
}

#[cfg(all(test, lanefs_shuttle))]
mod model {
    use crate::{Cred, Fs, XATTR_NAME_POSIX_ACL_ACCESS, XATTR_NAME_POSIX_ACL_DEFAULT};
    use lanefs_store::ROOT_INO;
    use shuttle::thread;

    /// A default ACL set on a directory racing a create in it, watched by
    /// a third thread that sees the ACL set and then the name still
    /// missing: the create then came after the set, so the new file must
    /// have inherited the ACL. Before a directory's ACL change held every
    /// stripe of its entry lock, the create could check the directory
    /// (default ACL: none) under its stripe, the set finish, the watcher
    /// look, and only then the name be linked — a file made after the set
    /// without its default ACL.
    #[test]
    fn model_default_acl_set_vs_create_in_the_directory() {
        // u::rwx, u:1000:rwx, g::r-x, m::rwx, o::---
        let mut dacl = 2u32.to_le_bytes().to_vec();
        for (tag, perm, id) in [
            (1u16, 7u16, u32::MAX),
            (2, 7, 1000),
            (4, 5, u32::MAX),
            (0x10, 7, u32::MAX),
            (0x20, 0, u32::MAX),
        ] {
            dacl.extend_from_slice(&tag.to_le_bytes());
            dacl.extend_from_slice(&perm.to_le_bytes());
            dacl.extend_from_slice(&id.to_le_bytes());
        }
        crate::sync::check_pct(
            move || {
                let fs = Fs::new_in_memory();
                let r = Cred::root();
                let d = fs.mkdir(&r, ROOT_INO, b"d", 0o755, 0).unwrap().ino;
                let setter = {
                    let (fs, dacl) = (fs.clone(), dacl.clone());
                    thread::spawn(move || {
                        fs.setxattr(&Cred::root(), d, XATTR_NAME_POSIX_ACL_DEFAULT, &dacl, 0)
                            .unwrap()
                    })
                };
                let creator = {
                    let fs = fs.clone();
                    thread::spawn(move || {
                        let f = fs.mknod(&Cred::root(), d, b"f", 0o666, 0o077, 0).unwrap();
                        fs.forget(f.ino, 1);
                    })
                };
                let seen = fs.getxattr(&r, d, XATTR_NAME_POSIX_ACL_DEFAULT).is_ok();
                let after_the_set = seen && fs.lookup(&r, d, b"f").is_err();
                setter.join().unwrap();
                creator.join().unwrap();
                let f = fs.lookup(&r, d, b"f").unwrap();
                let inherited = fs.getxattr(&r, f.ino, XATTR_NAME_POSIX_ACL_ACCESS).is_ok();
                // Inherited: 0666 masked by the ACL (no umask); else 0600.
                assert_eq!(f.perm, if inherited { 0o660 } else { 0o600 });
                if after_the_set {
                    assert!(inherited, "a create after the set missed the default ACL");
                }
                if let Err(p) = fs.check() {
                    panic!("inconsistent: {p:?}");
                }
            },
            crate::sync::model_iterations(),
            3,
        );
    }
}
