//! POSIX ACLs as Linux keeps them (`fs/posix_acl.c`), stored as the
//! extended attributes `system.posix_acl_access` and
//! `system.posix_acl_default` of an inode's record, in the kernel's xattr
//! format (`posix_acl_xattr`: a 4-byte little-endian header holding
//! version 2, then 8-byte entries `tag: u16, perm: u16, id: u32`), as
//! `posix_acl_to_xattr` writes it: the id of an entry that names no one
//! (owner, owning group, mask, other) is `ACL_UNDEFINED_ID`.
//!
//! What is here: parsing (`posix_acl_from_xattr`), validation
//! (`posix_acl_valid`), the mode an ACL stands for and whether it is more
//! than the mode (`posix_acl_equiv_mode`), a chmod's rewrite of the ACL
//! (`__posix_acl_chmod`), a create's inheritance from the directory's
//! default ACL (`posix_acl_create_masq`) and the permission check
//! (`posix_acl_permission`, reached as `acl_permission_check` reaches it).
//! Pure functions of bytes, credentials and modes: no locks. The callers
//! (`xattr`, `perm`, `fs::alloc_inode`, `file`'s setattr) hold the
//! inode's `meta` while they read or change the attributes.
//!
//! An inode with an access ACL or a default ACL has a flag in its
//! attribute mirror's permission group (`attr_seq`), so that the
//! permission checks of inodes without one (the common case) read no
//! record and take no lock.

use lanefs_store::{Errno, InodeRecord, Result};

use crate::{Cred, XATTR_NAME_POSIX_ACL_ACCESS, XATTR_NAME_POSIX_ACL_DEFAULT};

/// `POSIX_ACL_XATTR_VERSION`.
const VERSION: u32 = 2;
const HEADER: usize = 4;
const ENTRY: usize = 8;
/// `ACL_UNDEFINED_ID`.
const UNDEFINED_ID: u32 = u32::MAX;

pub(crate) const USER_OBJ: u16 = 0x01;
pub(crate) const USER: u16 = 0x02;
pub(crate) const GROUP_OBJ: u16 = 0x04;
pub(crate) const GROUP: u16 = 0x08;
pub(crate) const MASK: u16 = 0x10;
pub(crate) const OTHER: u16 = 0x20;

/// Read, write, execute: the only permission bits an entry may hold.
const RWX: u16 = 7;

/// One entry (`posix_acl_entry`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub tag: u16,
    pub perm: u16,
    /// The uid of a `USER` entry, the gid of a `GROUP` entry, else unused.
    pub id: u32,
}

/// A parsed ACL (never empty: an empty one is "no ACL").
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Acl {
    pub entries: Vec<Entry>,
}

/// Which of an inode's two ACLs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Access,
    Default,
}

impl Kind {
    pub fn of_name(name: &[u8]) -> Option<Kind> {
        if name == XATTR_NAME_POSIX_ACL_ACCESS {
            Some(Kind::Access)
        } else if name == XATTR_NAME_POSIX_ACL_DEFAULT {
            Some(Kind::Default)
        } else {
            None
        }
    }

    pub fn name(self) -> &'static [u8] {
        match self {
            Kind::Access => XATTR_NAME_POSIX_ACL_ACCESS,
            Kind::Default => XATTR_NAME_POSIX_ACL_DEFAULT,
        }
    }
}

/// The stored value of `rec`'s ACL of `kind`, if it has one.
pub(crate) fn stored(rec: &InodeRecord, kind: Kind) -> Option<&[u8]> {
    if rec.xattrs.is_empty() {
        return None;
    }
    let name = kind.name();
    rec.xattrs
        .binary_search_by(|(k, _)| k.as_slice().cmp(name))
        .ok()
        .map(|i| rec.xattrs[i].1.as_slice())
}

/// Replace (`Some`) or remove (`None`) `rec`'s ACL of `kind`, keeping the
/// attributes sorted by name.
pub(crate) fn put(rec: &mut InodeRecord, kind: Kind, value: Option<Vec<u8>>) {
    let name = kind.name();
    let pos = rec.xattrs.binary_search_by(|(k, _)| k.as_slice().cmp(name));
    match (pos, value) {
        (Ok(i), Some(v)) => rec.xattrs[i].1 = v,
        (Err(i), Some(v)) => rec.xattrs.insert(i, (name.to_vec(), v)),
        (Ok(i), None) => {
            rec.xattrs.remove(i);
        }
        (Err(_), None) => {}
    }
}

/// `posix_acl_from_xattr` then `posix_acl_valid`: `Ok(None)` for an
/// empty value or a header without entries (both remove the ACL);
/// `EOPNOTSUPP` for another version; `EINVAL` for anything malformed (a
/// short header, a partial entry, an unknown tag, an undefined user or
/// group id, permission bits beyond rwx, entries out of the required
/// order, a named entry without a mask).
#[cfg(test)]
pub(crate) fn parse_valid(value: &[u8]) -> Result<Option<Acl>> {
    if value.is_empty() {
        return Ok(None);
    }
    let acl = match parse(value)? {
        Some(a) => a,
        None => return Ok(None),
    };
    acl.valid()?;
    Ok(Some(acl))
}

/// `posix_acl_from_xattr` (no validation of order or permission bits).
pub(crate) fn parse(value: &[u8]) -> Result<Option<Acl>> {
    if value.len() < HEADER {
        return Err(Errno::EINVAL);
    }
    let version = u32::from_le_bytes([value[0], value[1], value[2], value[3]]);
    if version != VERSION {
        return Err(Errno::EOPNOTSUPP);
    }
    let body = &value[HEADER..];
    if !body.len().is_multiple_of(ENTRY) {
        return Err(Errno::EINVAL);
    }
    if body.is_empty() {
        return Ok(None);
    }
    let mut entries = Vec::with_capacity(body.len() / ENTRY);
    for e in body.chunks_exact(ENTRY) {
        let tag = u16::from_le_bytes([e[0], e[1]]);
        let perm = u16::from_le_bytes([e[2], e[3]]);
        let raw_id = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
        let id = match tag {
            USER_OBJ | GROUP_OBJ | MASK | OTHER => UNDEFINED_ID,
            // `make_kuid`/`make_kgid` of -1: no such id.
            USER | GROUP if raw_id == UNDEFINED_ID => return Err(Errno::EINVAL),
            USER | GROUP => raw_id,
            _ => return Err(Errno::EINVAL),
        };
        entries.push(Entry { tag, perm, id });
    }
    Ok(Some(Acl { entries }))
}

/// A POSIX ACL's value as `system.posix_acl_access`/`default` carry it,
/// in the kernel's xattr format (`posix_acl_xattr`: version 2, then each
/// entry's tag, permission bits and id, little-endian; the id is
/// `u32::MAX` for the entries that name no one: owner, owning group,
/// mask, other). For callers of `setxattr`; tags as in `<sys/acl.h>`
/// (`ACL_USER_OBJ` 1, `ACL_USER` 2, `ACL_GROUP_OBJ` 4, `ACL_GROUP` 8,
/// `ACL_MASK` 0x10, `ACL_OTHER` 0x20).
pub fn posix_acl_xattr(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    encode(entries.iter().copied())
}

fn encode(entries: impl ExactSizeIterator<Item = (u16, u16, u32)>) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + ENTRY * entries.len());
    out.extend_from_slice(&VERSION.to_le_bytes());
    for (tag, perm, id) in entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    out
}

impl Acl {
    /// The three entries that stand for `perm`'s rwx bits.
    #[cfg(test)]
    pub fn from_mode(perm: u16) -> Acl {
        let e = |tag, shift: u16| Entry {
            tag,
            perm: (perm >> shift) & RWX,
            id: UNDEFINED_ID,
        };
        Acl {
            entries: vec![e(USER_OBJ, 6), e(GROUP_OBJ, 3), e(OTHER, 0)],
        }
    }

    /// `posix_acl_to_xattr`.
    pub fn to_xattr(&self) -> Vec<u8> {
        encode(self.entries.iter().map(|e| (e.tag, e.perm, e.id)))
    }

    /// `posix_acl_valid`: one owner entry, named users, one owning-group
    /// entry, named groups, a mask (required with any named entry), one
    /// other entry, in that order; permission bits rwx only.
    pub fn valid(&self) -> Result<()> {
        #[derive(PartialEq)]
        enum State {
            UserObj,
            User,
            Group,
            Other,
            Done,
        }
        let mut state = State::UserObj;
        let mut needs_mask = false;
        for e in &self.entries {
            if e.perm & !RWX != 0 {
                return Err(Errno::EINVAL);
            }
            state = match (e.tag, &state) {
                (USER_OBJ, State::UserObj) => State::User,
                (USER, State::User) => {
                    needs_mask = true;
                    State::User
                }
                (GROUP_OBJ, State::User) => State::Group,
                (GROUP, State::Group) => {
                    needs_mask = true;
                    State::Group
                }
                (MASK, State::Group) => State::Other,
                (OTHER, State::Other) => State::Done,
                (OTHER, State::Group) if !needs_mask => State::Done,
                _ => return Err(Errno::EINVAL),
            };
        }
        if state == State::Done {
            Ok(())
        } else {
            Err(Errno::EINVAL)
        }
    }

    /// `posix_acl_equiv_mode`: `perm` with its rwx bits replaced by those
    /// the ACL stands for (the mask's as the group's when there is one),
    /// and whether the ACL says more than a mode can (a mask or a named
    /// entry).
    pub fn equiv_mode(&self, perm: u16) -> (u16, bool) {
        let mut mode = 0u16;
        let mut not_equiv = false;
        for e in &self.entries {
            let p = e.perm & RWX;
            match e.tag {
                USER_OBJ => mode |= p << 6,
                GROUP_OBJ => mode |= p << 3,
                OTHER => mode |= p,
                MASK => {
                    mode = (mode & !0o070) | p << 3;
                    not_equiv = true;
                }
                _ => not_equiv = true,
            }
        }
        ((perm & !0o777) | mode, not_equiv)
    }

    /// `__posix_acl_chmod_masq`: the owner and other entries take the
    /// mode's bits, and the mask (or, without one, the owning group's
    /// entry) the group bits; named entries are kept.
    pub fn chmod(&mut self, perm: u16) {
        let mut group_obj = None;
        let mut mask = None;
        for (i, e) in self.entries.iter_mut().enumerate() {
            match e.tag {
                USER_OBJ => e.perm = (perm >> 6) & RWX,
                OTHER => e.perm = perm & RWX,
                GROUP_OBJ => group_obj = Some(i),
                MASK => mask = Some(i),
                _ => {}
            }
        }
        if let Some(i) = mask.or(group_obj) {
            self.entries[i].perm = (perm >> 3) & RWX;
        }
    }

    /// `posix_acl_create_masq`: a default ACL made the access ACL of a new
    /// inode created with `perm` (no umask applied): each of owner, other
    /// and mask (or the owning group without a mask) keeps only the bits
    /// `perm` grants, and `perm` only the bits they keep. Returns the new
    /// mode and whether the ACL says more than it (else none is stored).
    pub fn create_masq(&mut self, perm: u16) -> (u16, bool) {
        let mut mode = perm;
        let mut not_equiv = false;
        let mut group_obj = None;
        let mut mask = None;
        for (i, e) in self.entries.iter_mut().enumerate() {
            match e.tag {
                USER_OBJ => {
                    e.perm &= (mode >> 6) & RWX;
                    mode &= (e.perm << 6) | !0o700;
                }
                OTHER => {
                    e.perm &= mode & RWX;
                    mode &= e.perm | !0o007;
                }
                GROUP_OBJ => group_obj = Some(i),
                MASK => {
                    mask = Some(i);
                    not_equiv = true;
                }
                _ => not_equiv = true,
            }
        }
        if let Some(i) = mask.or(group_obj) {
            let e = &mut self.entries[i];
            e.perm &= (mode >> 3) & RWX;
            mode &= (e.perm << 3) | !0o070;
        }
        ((perm & !0o777) | (mode & 0o777), not_equiv)
    }

    /// `posix_acl_permission` for a caller who is not the owner (the
    /// owner's entry is the mode's owner bits, checked before): a named
    /// user's entry, else the owning group's and named groups' entries
    /// the caller is in (any that grants all of `want`), each limited by
    /// the mask; a caller in some group but granted by none is refused;
    /// else the other entry.
    pub fn permission(&self, cred: &Cred, owner: u32, group: u32, want: u32) -> Result<()> {
        let want = (want & 7) as u16;
        let mask = self
            .entries
            .iter()
            .find(|e| e.tag == MASK)
            .map_or(RWX, |e| e.perm);
        let grant = |p: u16, masked: bool| {
            let p = if masked { p & mask } else { p };
            if p & want == want {
                Ok(())
            } else {
                Err(Errno::EACCES)
            }
        };
        let mut found = false;
        for e in &self.entries {
            match e.tag {
                USER_OBJ if cred.uid == owner => return grant(e.perm, false),
                USER if cred.uid == e.id => return grant(e.perm, true),
                GROUP_OBJ | GROUP => {
                    let gid = if e.tag == GROUP_OBJ { group } else { e.id };
                    if cred.in_group(gid) {
                        found = true;
                        if e.perm & want == want {
                            return grant(e.perm, true);
                        }
                    }
                }
                OTHER if found => return Err(Errno::EACCES),
                OTHER => return grant(e.perm, false),
                _ => {}
            }
        }
        Err(Errno::EACCES)
    }
}

/// `set_posix_acl` on a record whose kind is not a symlink (the caller
/// answers those `EOPNOTSUPP` first), of an ACL parsed with [`parse`]
/// (`None`: remove): `EACCES` for a default ACL on a
/// non-directory (removing one: no change), `EPERM` for a caller who is
/// neither the owner nor root, `EINVAL` for an invalid ACL; then, for an
/// access ACL, `posix_acl_update_mode` — the mode takes the ACL's bits,
/// an ACL a mode can say is stored as none, and setgid goes when the
/// caller is outside the file's group and not root — and the ACL is kept
/// in the record (`simple_set_acl`). `Ok(None)`: nothing to do (a
/// default ACL removed from a non-directory); otherwise the caller moves
/// ctime.
pub(crate) fn set(
    cred: &Cred,
    rec: &mut InodeRecord,
    kind: Kind,
    acl: Option<Acl>,
) -> Result<Option<()>> {
    use lanefs_store::FileKind;
    if kind == Kind::Default && rec.kind != FileKind::Directory {
        return if acl.is_some() {
            Err(Errno::EACCES)
        } else {
            Ok(None)
        };
    }
    if !crate::perm::owner_or_root(cred, rec) {
        return Err(Errno::EPERM);
    }
    if let Some(a) = &acl {
        a.valid()?;
    }
    let keep = match kind {
        Kind::Access => {
            let mut perm = rec.perm;
            let keep = match &acl {
                Some(a) => {
                    let (p, not_equiv) = a.equiv_mode(perm);
                    perm = p;
                    not_equiv
                }
                None => false,
            };
            if !cred.is_root() && !cred.in_group(rec.gid) {
                perm &= !crate::perm::S_ISGID;
            }
            rec.perm = perm;
            if keep {
                acl
            } else {
                None
            }
        }
        Kind::Default => acl,
    };
    put(rec, kind, keep.map(|a| a.to_xattr()));
    Ok(Some(()))
}

/// After a mode change of `rec` (`posix_acl_chmod`): its access ACL, if
/// it has one, takes the new owner, group (mask) and other bits.
pub(crate) fn chmod(rec: &mut InodeRecord) {
    let Some(value) = stored(rec, Kind::Access) else {
        return;
    };
    let Ok(Some(mut acl)) = parse(value) else {
        return;
    };
    acl.chmod(rec.perm);
    let new = acl.to_xattr();
    if new != value {
        put(rec, Kind::Access, Some(new));
    }
}

/// Extended attributes as a record keeps them: (name, value), by name.
pub(crate) type Xattrs = Vec<(Vec<u8>, Vec<u8>)>;

/// What a new inode gets from its directory's default ACL `default`
/// (`posix_acl_create`), created with `perm` before any umask: its mode,
/// its access ACL (none when the mode says it all) and, for a directory,
/// the default ACL itself. `None` if the stored default ACL does not
/// parse (the caller then applies the umask, as for no default ACL).
pub(crate) fn inherit(default: &[u8], perm: u16, is_dir: bool) -> Option<(u16, Xattrs)> {
    let mut acl = parse(default).ok()??;
    let (perm, not_equiv) = acl.create_masq(perm);
    let mut xattrs = Vec::new();
    // Sorted by name: "…_access" before "…_default".
    if not_equiv {
        xattrs.push((XATTR_NAME_POSIX_ACL_ACCESS.to_vec(), acl.to_xattr()));
    }
    if is_dir {
        xattrs.push((XATTR_NAME_POSIX_ACL_DEFAULT.to_vec(), default.to_vec()));
    }
    Some((perm, xattrs))
}

/// `acl_permission_check`'s use of the access ACL of `rec`: for a caller
/// that is not the owner, when the mode has group bits (with none, Linux
/// does not look at the ACL: the mode's group and other bits decide).
/// `None`: no ACL to consult; the mode decides.
pub(crate) fn check(cred: &Cred, rec: &InodeRecord, mask: u32) -> Option<Result<()>> {
    if cred.uid == rec.uid || rec.perm & 0o070 == 0 {
        return None;
    }
    let acl = parse(stored(rec, Kind::Access)?).ok()??;
    Some(acl.permission(cred, rec.uid, rec.gid, mask))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(tag: u16, perm: u16, id: u32) -> Entry {
        Entry { tag, perm, id }
    }

    #[test]
    fn round_trip_and_normalised_ids() {
        let acl = Acl {
            entries: vec![
                e(USER_OBJ, 7, UNDEFINED_ID),
                e(USER, 5, 1000),
                e(GROUP_OBJ, 4, UNDEFINED_ID),
                e(MASK, 5, UNDEFINED_ID),
                e(OTHER, 0, UNDEFINED_ID),
            ],
        };
        let bytes = acl.to_xattr();
        assert_eq!(bytes.len(), 4 + 5 * 8);
        assert_eq!(parse_valid(&bytes).unwrap(), Some(acl.clone()));
        // An object entry's id is ignored and written as undefined.
        let mut odd = bytes.clone();
        odd[4 + 4..4 + 8].copy_from_slice(&7u32.to_le_bytes());
        assert_eq!(parse(&odd).unwrap().unwrap().to_xattr(), bytes);
    }

    #[test]
    fn equiv_mode_and_masq() {
        let a = Acl::from_mode(0o640);
        assert_eq!(a.equiv_mode(0o4777), (0o4640, false));
        let mut b = Acl {
            entries: vec![
                e(USER_OBJ, 7, UNDEFINED_ID),
                e(USER, 7, 5),
                e(GROUP_OBJ, 5, UNDEFINED_ID),
                e(MASK, 7, UNDEFINED_ID),
                e(OTHER, 5, UNDEFINED_ID),
            ],
        };
        assert_eq!(b.equiv_mode(0), (0o775, true));
        let (mode, ne) = b.clone().create_masq(0o666);
        assert_eq!((mode, ne), (0o664, true));
        b.chmod(0o701);
        assert_eq!(b.equiv_mode(0), (0o701, true));
        assert_eq!(b.entries[1].perm, 7, "named entries kept");
        assert_eq!(b.entries[2].perm, 5, "group entry kept under a mask");
    }
}
