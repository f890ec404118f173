//! The POSIX ACL attribute names on files without an ACL, as tmpfs
//! answers (checked against tmpfs by hand and through a mount):
//! `getxattr` finds none (`ENODATA`, no permission needed), `removexattr`
//! succeeds for the owner or root and moves ctime (`EPERM` for anyone
//! else; a default ACL of a non-directory: always succeeds, ctime kept),
//! a symlink has no ACL operations (`EOPNOTSUPP`), and a value that is no
//! ACL is refused before anything else (`EINVAL`). Setting ACLs:
//! `posix_acl.rs`.

use lanefs_core::{Cred, Errno, Fs, ROOT_INO};

const ACCESS: &[u8] = b"system.posix_acl_access";
const DEFAULT: &[u8] = b"system.posix_acl_default";

#[test]
fn acl_names_answer_as_tmpfs_without_acls() {
    let fs = Fs::new_in_memory();
    let root = Cred::root();
    let user = Cred::user(1000, 1000);
    let (f, h, _) = fs
        .open_at(
            &root,
            ROOT_INO,
            b"f",
            libc::O_CREAT | libc::O_RDWR,
            0o600,
            0,
            false,
        )
        .unwrap();
    drop(h);
    let d = fs.mkdir(&root, ROOT_INO, b"d", 0o700, 0).unwrap();
    let p = fs
        .mknod(&root, ROOT_INO, b"p", libc::S_IFIFO | 0o600, 0, 0)
        .unwrap();
    let s = fs.symlink(&root, ROOT_INO, b"s", b"f").unwrap();
    let ctime = |ino| fs.getattr(ino).unwrap().ctime;

    for who in [&root, &user] {
        for ino in [f.ino, d.ino, p.ino] {
            for name in [ACCESS, DEFAULT] {
                assert_eq!(fs.getxattr(who, ino, name), Err(Errno::ENODATA));
            }
        }
        for name in [ACCESS, DEFAULT] {
            assert_eq!(fs.getxattr(who, s.ino, name), Err(Errno::EOPNOTSUPP));
            assert_eq!(fs.removexattr(who, s.ino, name), Err(Errno::EOPNOTSUPP));
        }
    }
    for ino in [f.ino, d.ino, p.ino] {
        // Not the owner: EPERM, except a default ACL of a non-directory.
        assert_eq!(fs.removexattr(&user, ino, ACCESS), Err(Errno::EPERM));
        assert_eq!(fs.setxattr(&user, ino, ACCESS, b"x", 0), Err(Errno::EINVAL));
        let before = ctime(ino);
        std::thread::sleep(std::time::Duration::from_millis(2));
        if ino == d.ino {
            assert_eq!(fs.removexattr(&user, ino, DEFAULT), Err(Errno::EPERM));
            fs.removexattr(&root, ino, DEFAULT).unwrap();
            assert_ne!(ctime(ino), before, "removing a default ACL moves ctime");
        } else {
            fs.removexattr(&user, ino, DEFAULT).unwrap();
            fs.removexattr(&root, ino, DEFAULT).unwrap();
            assert_eq!(ctime(ino), before, "no default ACL on a non-directory");
        }
        let before = ctime(ino);
        std::thread::sleep(std::time::Duration::from_millis(2));
        fs.removexattr(&root, ino, ACCESS).unwrap();
        assert_ne!(ctime(ino), before, "removing an access ACL moves ctime");
        // Not an ACL: refused.
        assert_eq!(fs.setxattr(&root, ino, ACCESS, b"x", 0), Err(Errno::EINVAL));
        assert!(fs.listxattr(&root, ino).unwrap().is_empty());
    }
    // Removing the access ACL drops setgid when the owner is outside the
    // file's group (`posix_acl_update_mode`); a member, root, or removing
    // the default ACL keeps it.
    let set = |ino, perm, gid| {
        fs.setattr(
            &root,
            ino,
            &lanefs_core::SetAttr {
                mode: Some(perm),
                uid: Some(1000),
                gid: Some(gid),
                ..Default::default()
            },
            None,
        )
        .unwrap();
    };
    let perm = |ino| fs.getattr(ino).unwrap().perm;
    set(f.ino, 0o2755, 0);
    fs.removexattr(&user, f.ino, DEFAULT).unwrap();
    assert_eq!(perm(f.ino), 0o2755);
    fs.removexattr(&root, f.ino, ACCESS).unwrap();
    assert_eq!(perm(f.ino), 0o2755);
    fs.removexattr(&user, f.ino, ACCESS).unwrap();
    assert_eq!(perm(f.ino), 0o755, "outside the group: setgid goes");
    set(f.ino, 0o2755, 1000);
    fs.removexattr(&user, f.ino, ACCESS).unwrap();
    assert_eq!(perm(f.ino), 0o2755, "in the group: setgid stays");
    set(d.ino, 0o2755, 0);
    fs.removexattr(&user, d.ino, ACCESS).unwrap();
    assert_eq!(perm(d.ino), 0o755, "directories too");
    // Other `system.` names stay unsupported, with no permission check
    // (a user's read of a 0600 root file: EOPNOTSUPP; of an unknown
    // prefix: the check first, EACCES; as tmpfs).
    assert_eq!(
        fs.getxattr(&root, f.ino, b"system.foo"),
        Err(Errno::EOPNOTSUPP)
    );
    set(f.ino, 0o600, 0);
    fs.setattr(
        &root,
        f.ino,
        &lanefs_core::SetAttr {
            uid: Some(0),
            ..Default::default()
        },
        None,
    )
    .unwrap();
    assert_eq!(
        fs.getxattr(&user, f.ino, b"system.foo"),
        Err(Errno::EOPNOTSUPP)
    );
    assert_eq!(fs.getxattr(&user, f.ino, b"foo.bar"), Err(Errno::EACCES));
    fs.check().unwrap();
}
