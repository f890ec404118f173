//! Permission checks, as Linux's `generic_permission` and friends. Pure
//! functions of a credential and inode records: no locks — except
//! [`permission_snap`], which takes the inode's `meta` to read its access
//! ACL when its mirror says it has one (call it holding no `meta`).

use lanefs_store::{Errno, FileKind, InodeRecord, Result};

use crate::{Cred, MAY_EXEC, MAY_READ, MAY_WRITE};

pub(crate) const S_ISUID: u16 = 0o4000;
pub(crate) const S_ISGID: u16 = 0o2000;
pub(crate) const S_ISVTX: u16 = 0o1000;
pub(crate) const S_IXGRP: u16 = 0o010;

/// `inode_permission(mask)`: `EPERM` for a write to an immutable inode
/// (before anything else, root too); `EACCES` unless every bit of `mask`
/// is granted. Root passes read/write always and exec on directories or when any exec
/// bit is set (`CAP_DAC_OVERRIDE`). A caller other than the owner is
/// checked against the access ACL when the record has one and the mode
/// has group bits (`acl_permission_check`).
pub(crate) fn permission(cred: &Cred, rec: &InodeRecord, mask: u32) -> Result<()> {
    crate::iflags::may_write(rec.flags, mask)?;
    if mask != 0 && !cred.is_root() {
        if let Some(r) = crate::acl::check(cred, rec, mask) {
            return r;
        }
    }
    permission_of(cred, rec.kind, rec.perm, rec.uid, rec.gid, mask)
}

/// [`permission`] from `inode`'s mirror snapshot `a`: without any lock
/// unless the inode has an access ACL that the check must read (then
/// under its `meta`, from the record as it is now: a racing change is
/// seen before or after, as from the mirror). Call holding no `meta`.
pub(crate) fn permission_snap(
    cred: &Cred,
    inode: &crate::inode::Inode,
    a: &crate::attr_seq::PermSnapshot,
    mask: u32,
) -> Result<()> {
    crate::iflags::may_write(a.iflags(), mask)?;
    if a.has_acl() && acl_may_decide(cred, a, mask) {
        return permission(cred, &inode.meta.lock().rec, mask);
    }
    permission_of(cred, inode.kind, a.perm(), a.uid(), a.gid(), mask)
}

/// Whether a check by `cred` of an inode with an access ACL whose
/// mirror is `a` must read the ACL: a caller other than root and the
/// owner, of a mode with group bits (else the mode decides, as Linux's
/// `acl_permission_check`).
pub(crate) fn acl_may_decide(cred: &Cred, a: &crate::attr_seq::PermSnapshot, mask: u32) -> bool {
    mask != 0 && !cred.is_root() && cred.uid != a.uid() && a.perm() & 0o070 != 0
}

/// [`permission`] from the individual fields (no ACL, no inode flags:
/// the caller checks [`crate::iflags::may_write`]).
pub(crate) fn permission_of(
    cred: &Cred,
    kind: FileKind,
    perm: u16,
    uid: u32,
    gid: u32,
    mask: u32,
) -> Result<()> {
    if mask == 0 {
        return Ok(());
    }
    if cred.is_root() {
        if mask & MAY_EXEC == 0 || kind == FileKind::Directory || perm & 0o111 != 0 {
            return Ok(());
        }
        return Err(Errno::EACCES);
    }
    let perm = perm as u32;
    let bits = if cred.uid == uid {
        perm >> 6
    } else if cred.in_group(gid) {
        perm >> 3
    } else {
        perm
    } & 7;
    if bits & mask == mask {
        Ok(())
    } else {
        Err(Errno::EACCES)
    }
}

/// `inode_owner_or_capable`.
pub(crate) fn owner_or_root(cred: &Cred, rec: &InodeRecord) -> bool {
    cred.is_root() || cred.uid == rec.uid
}

/// The sticky-directory rule of `may_delete`: in a sticky directory only the
/// file's owner, the directory's owner or root may remove or rename it.
/// `dir_perm` and `dir_uid` are the directory's, `victim_uid` the owner of
/// the entry's inode.
pub(crate) fn sticky_denies(cred: &Cred, dir_perm: u16, dir_uid: u32, victim_uid: u32) -> bool {
    dir_perm & S_ISVTX != 0 && !cred.is_root() && cred.uid != victim_uid && cred.uid != dir_uid
}

/// `fs.protected_hardlinks`: may `cred` hard-link `rec`?
pub(crate) fn may_link(cred: &Cred, rec: &InodeRecord) -> bool {
    if owner_or_root(cred, rec) {
        return true;
    }
    rec.kind == FileKind::Regular
        && rec.perm & S_ISUID == 0
        && rec.perm & (S_ISGID | S_IXGRP) != (S_ISGID | S_IXGRP)
        && permission(cred, rec, MAY_READ | MAY_WRITE).is_ok()
}

/// Bits a write or truncate by `cred` strips (`file_remove_privs`, Linux
/// 6.2+ `setattr_should_drop_sgid`): setuid; setgid when group-exec is set
/// or the writer is not in the file's group. Root keeps them (`CAP_FSETID`).
pub(crate) fn privs_to_kill(cred: &Cred, rec: &InodeRecord) -> u16 {
    if cred.is_root() || rec.kind != FileKind::Regular {
        return 0;
    }
    let mut kill = rec.perm & S_ISUID;
    if rec.perm & S_ISGID != 0 && (rec.perm & S_IXGRP != 0 || !cred.in_group(rec.gid)) {
        kill |= S_ISGID;
    }
    kill
}

/// Whether a write may have privileges to remove from `rec`: setuid or
/// setgid (whoever writes), or a file capability. A write to a file
/// without any is decided without `meta` (`pcache`'s `privs` hint).
pub(crate) fn has_privs(rec: &InodeRecord) -> bool {
    rec.kind == FileKind::Regular
        && (rec.perm & (S_ISUID | S_ISGID) != 0 || crate::xattr::has_capability(rec))
}
