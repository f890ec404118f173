//! POSIX ACLs in the engine, as tmpfs keeps them. Every expected value
//! here was read from a tmpfs (Linux 6.18, `os.setxattr`/`os.getxattr`
//! of the raw `posix_acl_xattr` values, `umask 077` for the inheritance):
//! the binary format and its errors, the mode kept in step with the ACL
//! both ways, inheritance of a directory's default ACL, and the
//! permission checks (`access`, lookups through a directory, creates in
//! one) that evaluate the access ACL.

use lanefs_core::{
    posix_acl_xattr, Cred, Errno, Fs, SetAttr, MAY_EXEC, MAY_READ, MAY_WRITE, ROOT_INO,
};

const ACCESS: &[u8] = b"system.posix_acl_access";
const DEFAULT: &[u8] = b"system.posix_acl_default";
const U: u32 = u32::MAX;
const USER_OBJ: u16 = 1;
const USER: u16 = 2;
const GROUP_OBJ: u16 = 4;
const GROUP: u16 = 8;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn names(list: Vec<u8>) -> Vec<String> {
    list.split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8(n.to_vec()).unwrap())
        .collect()
}

fn file(fs: &Fs, cred: &Cred, dir: u64, name: &[u8], mode: u32, umask: u32) -> u64 {
    let flags = libc::O_CREAT | libc::O_EXCL | libc::O_RDWR;
    let (a, h, _) = fs
        .open_at(cred, dir, name, flags, mode, umask, false)
        .unwrap();
    drop(h);
    a.ino
}

fn chmod(fs: &Fs, cred: &Cred, ino: u64, mode: u32) {
    let ch = SetAttr {
        mode: Some(mode),
        ..Default::default()
    };
    fs.setattr(cred, ino, &ch, None).unwrap();
}

fn perm(fs: &Fs, ino: u64) -> u16 {
    fs.getattr(ino).unwrap().perm
}

#[test]
fn binary_format_errors_and_normalisation() {
    let fs = Fs::new_in_memory();
    let root = Cred::root();
    let f = file(&fs, &root, ROOT_INO, b"f", 0o644, 0);
    let set = |v: &[u8]| fs.setxattr(&root, f, ACCESS, v, 0);
    assert_eq!(set(b"\x02\x00\x00"), Err(Errno::EINVAL), "short header");
    assert_eq!(set(&3u32.to_le_bytes()), Err(Errno::EOPNOTSUPP), "version");
    let mut v3 = 3u32.to_le_bytes().to_vec();
    v3.push(b'x');
    assert_eq!(set(&v3), Err(Errno::EOPNOTSUPP), "version before size");
    let mut partial = 2u32.to_le_bytes().to_vec();
    partial.extend_from_slice(b"xxx");
    assert_eq!(set(&partial), Err(Errno::EINVAL), "partial entry");
    let bad = [
        // Out of order.
        posix_acl_xattr(&[(GROUP_OBJ, 7, U), (USER_OBJ, 7, U), (OTHER, 0, U)]),
        // Permission bits beyond rwx.
        posix_acl_xattr(&[(USER_OBJ, 8, U), (GROUP_OBJ, 7, U), (OTHER, 0, U)]),
        // A named entry needs a mask.
        posix_acl_xattr(&[
            (USER_OBJ, 7, U),
            (USER, 7, 5),
            (GROUP_OBJ, 7, U),
            (OTHER, 0, U),
        ]),
        // No such user.
        posix_acl_xattr(&[
            (USER_OBJ, 7, U),
            (USER, 7, U),
            (GROUP_OBJ, 7, U),
            (MASK, 7, U),
            (OTHER, 0, U),
        ]),
        // Unknown tag.
        posix_acl_xattr(&[
            (USER_OBJ, 7, U),
            (0x40, 7, 1),
            (GROUP_OBJ, 7, U),
            (OTHER, 0, U),
        ]),
        // Missing other.
        posix_acl_xattr(&[(USER_OBJ, 7, U), (GROUP_OBJ, 7, U)]),
    ];
    for v in &bad {
        assert_eq!(set(v), Err(Errno::EINVAL), "{v:x?}");
    }
    assert_eq!(perm(&fs, f), 0o644, "a refused ACL changes nothing");
    // A header alone removes (there is none): fine.
    set(&2u32.to_le_bytes()).unwrap();
    // An ACL the mode says all of: the mode changes, no ACL is kept.
    set(&posix_acl_xattr(&[
        (USER_OBJ, 6, U),
        (GROUP_OBJ, 0, U),
        (OTHER, 4, U),
    ]))
    .unwrap();
    assert_eq!(perm(&fs, f), 0o604);
    assert!(names(fs.listxattr(&root, f).unwrap()).is_empty());
    assert_eq!(fs.getxattr(&root, f, ACCESS), Err(Errno::ENODATA));
    // An extended one: kept, the mode's group bits are the mask;
    // XATTR_CREATE is ignored (twice).
    let ext = posix_acl_xattr(&[
        (USER_OBJ, 7, U),
        (USER, 5, 1000),
        (GROUP_OBJ, 4, U),
        (MASK, 5, U),
        (OTHER, 0, U),
    ]);
    for _ in 0..2 {
        fs.setxattr(&root, f, ACCESS, &ext, lanefs_core::XATTR_CREATE)
            .unwrap();
    }
    assert_eq!(perm(&fs, f), 0o750);
    assert_eq!(
        fs.getxattr(&root, f, ACCESS).unwrap(),
        hex("0200000001000700ffffffff02000500e803000004000400ffffffff10000500ffffffff20000000ffffffff")
    );
    // Ids of the object entries are written as undefined.
    let mut odd = ext.clone();
    odd[8..12].copy_from_slice(&7u32.to_le_bytes());
    fs.setxattr(&root, f, ACCESS, &odd, 0).unwrap();
    assert_eq!(fs.getxattr(&root, f, ACCESS).unwrap(), ext);
    // Duplicates and unsorted named entries are taken as given.
    let unsorted = posix_acl_xattr(&[
        (USER_OBJ, 7, U),
        (USER, 5, 1001),
        (USER, 5, 1000),
        (GROUP_OBJ, 4, U),
        (MASK, 5, U),
        (OTHER, 0, U),
    ]);
    fs.setxattr(&root, f, ACCESS, &unsorted, 0).unwrap();
    assert_eq!(fs.getxattr(&root, f, ACCESS).unwrap(), unsorted);
    // Listed first, as tmpfs lists them.
    fs.setxattr(&root, f, b"user.x", b"1", 0).unwrap();
    assert_eq!(
        names(fs.listxattr(&root, f).unwrap()),
        ["system.posix_acl_access", "user.x"]
    );
    // A default ACL only on a directory; never on a symlink.
    assert_eq!(fs.setxattr(&root, f, DEFAULT, &ext, 0), Err(Errno::EACCES));
    let s = fs.symlink(&root, ROOT_INO, b"s", b"f").unwrap().ino;
    assert_eq!(
        fs.setxattr(&root, s, ACCESS, &ext, 0),
        Err(Errno::EOPNOTSUPP)
    );
    // Only the owner or root; the value is checked first.
    let user = Cred::user(1000, 1000);
    assert_eq!(fs.setxattr(&user, f, ACCESS, &ext, 0), Err(Errno::EPERM));
    assert_eq!(fs.setxattr(&user, f, ACCESS, b"x", 0), Err(Errno::EINVAL));
    assert_eq!(fs.removexattr(&user, f, ACCESS), Err(Errno::EPERM));
    // Removing the ACL keeps the mode; the ACL is gone.
    fs.removexattr(&root, f, ACCESS).unwrap();
    assert_eq!(perm(&fs, f), 0o750);
    assert_eq!(fs.getxattr(&root, f, ACCESS), Err(Errno::ENODATA));
    assert_eq!(names(fs.listxattr(&root, f).unwrap()), ["user.x"]);
    fs.check().unwrap();
}

#[test]
fn chmod_and_acl_stay_in_step() {
    let fs = Fs::new_in_memory();
    let root = Cred::root();
    let f = file(&fs, &root, ROOT_INO, b"f", 0o644, 0);
    let ext = posix_acl_xattr(&[
        (USER_OBJ, 7, U),
        (USER, 5, 1000),
        (GROUP_OBJ, 4, U),
        (MASK, 5, U),
        (OTHER, 0, U),
    ]);
    fs.setxattr(&root, f, ACCESS, &ext, 0).unwrap();
    chmod(&fs, &root, f, 0o701);
    assert_eq!(perm(&fs, f), 0o701);
    assert_eq!(
        fs.getxattr(&root, f, ACCESS).unwrap(),
        hex("0200000001000700ffffffff02000500e803000004000400ffffffff10000000ffffffff20000100ffffffff"),
        "owner and other take the mode's bits, the mask the group's; named entries stay"
    );
    // Setting an access ACL drops setgid when the owner is outside the
    // group (`posix_acl_update_mode`); root keeps it.
    fs.setattr(
        &root,
        f,
        &SetAttr {
            uid: Some(1000),
            gid: Some(0),
            mode: Some(0o2755),
            ..Default::default()
        },
        None,
    )
    .unwrap();
    let user = Cred::user(1000, 1000);
    fs.setxattr(&root, f, ACCESS, &ext, 0).unwrap();
    assert_eq!(perm(&fs, f), 0o2750);
    fs.setxattr(&user, f, ACCESS, &ext, 0).unwrap();
    assert_eq!(perm(&fs, f), 0o750);
    fs.check().unwrap();
}

#[test]
fn default_acl_is_inherited_without_umask() {
    let fs = Fs::new_in_memory();
    let root = Cred::root();
    let d = fs.mkdir(&root, ROOT_INO, b"d", 0o755, 0).unwrap().ino;
    let dflt = posix_acl_xattr(&[
        (USER_OBJ, 7, U),
        (USER, 5, 1000),
        (GROUP_OBJ, 5, U),
        (MASK, 7, U),
        (OTHER, 1, U),
    ]);
    fs.setxattr(&root, d, DEFAULT, &dflt, 0).unwrap();
    assert_eq!(perm(&fs, d), 0o755, "a default ACL leaves the mode alone");
    let umask = 0o077;
    let g = file(&fs, &root, d, b"g", 0o666, umask);
    let sub = fs.mkdir(&root, d, b"sub", 0o777, umask).unwrap().ino;
    let fifo = fs
        .mknod(&root, d, b"fifo", libc::S_IFIFO | 0o666, umask, 0)
        .unwrap()
        .ino;
    // An `O_TMPFILE` file too (kept by its handle while checked).
    let (t, _tmp) = fs
        .tmpfile(&root, d, libc::O_RDWR, 0o666, umask, false)
        .unwrap();
    let file_acl = hex(
        "0200000001000600ffffffff02000500e803000004000500ffffffff10000600ffffffff20000000ffffffff",
    );
    for ino in [g, fifo, t.ino] {
        assert_eq!(perm(&fs, ino), 0o660);
        assert_eq!(
            names(fs.listxattr(&root, ino).unwrap()),
            ["system.posix_acl_access"]
        );
        assert_eq!(fs.getxattr(&root, ino, ACCESS).unwrap(), file_acl);
    }
    assert_eq!(perm(&fs, sub), 0o771);
    assert_eq!(
        names(fs.listxattr(&root, sub).unwrap()),
        ["system.posix_acl_access", "system.posix_acl_default"]
    );
    assert_eq!(fs.getxattr(&root, sub, ACCESS).unwrap(), dflt);
    assert_eq!(fs.getxattr(&root, sub, DEFAULT).unwrap(), dflt);
    // Grandchildren inherit from the subdirectory in turn.
    let gg = file(&fs, &root, sub, b"gg", 0o640, umask);
    assert_eq!(perm(&fs, gg), 0o640);
    // A symlink gets none.
    let s = fs.symlink(&root, d, b"s", b"g").unwrap().ino;
    assert_eq!(perm(&fs, s), 0o777);
    assert!(names(fs.listxattr(&root, s).unwrap()).is_empty());
    // A default ACL of base entries only: the mode is masked by it (no
    // umask), and no access ACL is stored.
    fs.setxattr(
        &root,
        d,
        DEFAULT,
        &posix_acl_xattr(&[(USER_OBJ, 7, U), (GROUP_OBJ, 5, U), (OTHER, 1, U)]),
        0,
    )
    .unwrap();
    let h2 = file(&fs, &root, d, b"h", 0o666, umask);
    assert_eq!(perm(&fs, h2), 0o640);
    assert!(names(fs.listxattr(&root, h2).unwrap()).is_empty());
    // Without a default ACL the umask applies, as before.
    fs.removexattr(&root, d, DEFAULT).unwrap();
    let i = file(&fs, &root, d, b"i", 0o666, umask);
    assert_eq!(perm(&fs, i), 0o600);
    fs.check().unwrap();
}

#[test]
fn permission_checks_evaluate_the_access_acl() {
    let fs = Fs::new_in_memory();
    let root = Cred::root();
    let named = Cred::user(1000, 1000); // a named user
    let member = Cred::user(1001, 0); // in the owning group (0)
    let in_g = Cred {
        uid: 1002,
        gid: 1002,
        groups: vec![2000],
    }; // in a named group
    let other = Cred::user(1003, 1003);
    let f = file(&fs, &root, ROOT_INO, b"f", 0o644, 0);
    fs.setxattr(
        &root,
        f,
        ACCESS,
        &posix_acl_xattr(&[
            (USER_OBJ, 6, U),
            (USER, 6, 1000),
            (GROUP_OBJ, 0, U),
            (GROUP, 4, 2000),
            (MASK, 6, U),
            (OTHER, 4, U),
        ]),
        0,
    )
    .unwrap();
    assert_eq!(perm(&fs, f), 0o664);
    let ok = |c: &Cred, m| fs.access(c, f, m).is_ok();
    assert!(ok(&named, MAY_READ | MAY_WRITE), "named user: rw");
    assert!(
        !ok(&member, MAY_READ),
        "owning group: nothing, though the mode's group bits say rw"
    );
    assert!(
        ok(&in_g, MAY_READ) && !ok(&in_g, MAY_WRITE),
        "named group: r"
    );
    assert!(ok(&other, MAY_READ) && !ok(&other, MAY_WRITE), "other: r");
    // Opens check the same.
    let open = |c: &Cred, flags| fs.open_at(c, ROOT_INO, b"f", flags, 0, 0, false).map(drop);
    open(&named, libc::O_RDWR).unwrap();
    assert_eq!(open(&member, libc::O_RDONLY), Err(Errno::EACCES));
    // The mask limits named entries.
    chmod(&fs, &root, f, 0o644);
    assert!(ok(&named, MAY_READ) && !ok(&named, MAY_WRITE), "mask r--");
    // With no group bits at all Linux does not look at the ACL: the
    // named user is "other".
    chmod(&fs, &root, f, 0o604);
    assert!(
        ok(&named, MAY_READ),
        "mask ---: the mode's other bits decide"
    );
    assert!(
        !ok(&member, MAY_READ),
        "and the owning group the group bits"
    );
    chmod(&fs, &root, f, 0o600);
    assert!(!ok(&named, MAY_READ));

    // Search permission on a directory, through lookups (the lock-free
    // walk and the reference walk) and creates in it.
    let d = fs.mkdir(&root, ROOT_INO, b"d", 0o755, 0).unwrap().ino;
    file(&fs, &root, d, b"x", 0o644, 0);
    fs.setxattr(
        &root,
        d,
        ACCESS,
        &posix_acl_xattr(&[
            (USER_OBJ, 7, U),
            (USER, 7, 1000),
            (GROUP_OBJ, 0, U),
            (MASK, 7, U),
            (OTHER, 0, U),
        ]),
        0,
    )
    .unwrap();
    assert_eq!(perm(&fs, d), 0o770);
    for _ in 0..2 {
        assert!(fs.lookup(&named, d, b"x").is_ok(), "named user may search");
        assert_eq!(
            fs.lookup(&member, d, b"x").err(),
            Some(Errno::EACCES),
            "the owning group's entry has nothing"
        );
        assert_eq!(fs.lookup(&other, d, b"x").err(), Some(Errno::EACCES));
        assert!(fs
            .resolve_rcu(&named, ROOT_INO, &[b"d", b"x"])
            .is_none_or(|r| r.is_ok()));
        assert!(fs
            .resolve_rcu(&member, ROOT_INO, &[b"d", b"x"])
            .is_none_or(|r| r.err() == Some(Errno::EACCES)));
    }
    file(&fs, &named, d, b"mine", 0o644, 0);
    assert_eq!(
        fs.mkdir(&member, d, b"no", 0o755, 0).err(),
        Some(Errno::EACCES)
    );
    fs.unlink(&named, d, b"mine").unwrap();
    fs.rename(&named, d, b"x", d, b"y", 0).unwrap();
    assert_eq!(
        fs.rename(&member, d, b"y", d, b"x", 0).err(),
        Some(Errno::EACCES)
    );
    assert!(fs.access(&named, d, MAY_WRITE | MAY_EXEC).is_ok());
    // The owner's entry is the mode's owner bits.
    chmod(&fs, &root, d, 0o070);
    assert_eq!(fs.access(&root, d, MAY_READ), Ok(()));
    fs.check().unwrap();
}
