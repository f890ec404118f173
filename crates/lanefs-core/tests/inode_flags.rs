//! Inode flags (`chattr`): who may set them, and what immutable,
//! append-only and noatime refuse or keep, with the errno Linux tmpfs
//! gives for each case (read from a tmpfs on Linux 6.18; the mount test
//! `lanefs-cli/tests/chattr.rs` compares the same sequence with one).

use lanefs_core::iflags::{
    FlagsSet, FsxAttr, FS_APPEND_FL, FS_IMMUTABLE_FL, FS_NOATIME_FL, FS_NODUMP_FL,
};
use lanefs_core::*;

const I: u32 = FS_IMMUTABLE_FL;
const A: u32 = FS_APPEND_FL;

fn root() -> Cred {
    Cred::root()
}

/// A regular file `name` in the root with 5 bytes, mode 0o666.
fn file(fs: &Fs, name: &[u8]) -> Ino {
    let flags = libc::O_CREAT | libc::O_RDWR;
    let (a, f, _) = fs
        .open_at(&root(), ROOT_INO, name, flags, 0o666, 0, false)
        .unwrap();
    fs.write(&f, 0, b"hello").unwrap();
    a.ino
}

fn set(fs: &Fs, ino: Ino, flags: u32) {
    fs.set_flags(&root(), ino, FlagsSet::Flags(flags)).unwrap();
}

fn open(fs: &Fs, ino: Ino, flags: i32) -> Result<OpenFile> {
    fs.open(&root(), ino, flags)
}

fn times(a: Option<TimeSet>, m: Option<TimeSet>) -> SetAttr {
    SetAttr {
        atime: a,
        mtime: m,
        ..Default::default()
    }
}

#[test]
fn set_and_get_follow_fileattr_set() {
    let fs = Fs::new_in_memory();
    let ino = file(&fs, b"f");
    assert_eq!(fs.get_flags(ino), Ok(0));
    let before = fs.getattr(ino).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2));
    let all = FS_IMMUTABLE_FL | FS_APPEND_FL | FS_NODUMP_FL | FS_NOATIME_FL;
    let after = fs.set_flags(&root(), ino, FlagsSet::Flags(all)).unwrap();
    assert!(after.ctime > before.ctime, "ctime moves");
    assert_eq!(after.mtime, before.mtime, "mtime does not");
    assert_eq!(fs.get_flags(ino), Ok(all));
    assert_eq!(FsxAttr::of_flags(all).xflags, 0xd8);
    // Anything else: EOPNOTSUPP, and nothing changes.
    for bad in [0x8, 0x80000, I | 0x8, 0x2000_0000, 0x4000_0000] {
        let r = fs.set_flags(&root(), ino, FlagsSet::Flags(bad));
        assert_eq!(r.map(drop), Err(Errno::EOPNOTSUPP), "{bad:#x}");
    }
    assert_eq!(fs.get_flags(ino), Ok(all));
    // FS_IOC_FSSETXATTR's xflags.
    let fsx = |xflags| {
        FlagsSet::Fsx(FsxAttr {
            xflags,
            ..Default::default()
        })
    };
    fs.set_flags(&root(), ino, fsx(0x8)).unwrap();
    assert_eq!(fs.get_flags(ino), Ok(I));
    assert_eq!(
        fs.set_flags(&root(), ino, fsx(0x20)).map(drop),
        Err(Errno::EOPNOTSUPP)
    );
    // Only regular files and directories have flags.
    let fifo = fs
        .mknod(&root(), ROOT_INO, b"p", libc::S_IFIFO | 0o644, 0, 0)
        .unwrap();
    assert_eq!(fs.get_flags(fifo.ino), Err(Errno::ENOTTY));
    assert_eq!(
        fs.set_flags(&root(), fifo.ino, FlagsSet::Flags(0))
            .map(drop),
        Err(Errno::ENOTTY)
    );
}

#[test]
fn only_the_owner_sets_and_only_root_changes_immutable_or_append() {
    let fs = Fs::new_in_memory();
    let ino = file(&fs, b"f");
    let owner_ids = SetAttr {
        uid: Some(1000),
        gid: Some(1000),
        ..Default::default()
    };
    fs.setattr(&root(), ino, &owner_ids, None).unwrap();
    let (owner, other) = (Cred::user(1000, 1000), Cred::user(1001, 1001));
    let s = |c: &Cred, f| fs.set_flags(c, ino, FlagsSet::Flags(f)).map(drop);
    assert_eq!(s(&other, FS_NODUMP_FL), Err(Errno::EPERM));
    assert_eq!(
        s(&other, 0),
        Err(Errno::EPERM),
        "even a set that changes nothing"
    );
    assert_eq!(s(&owner, FS_NODUMP_FL), Ok(()));
    assert_eq!(s(&owner, FS_NODUMP_FL | I), Err(Errno::EPERM));
    assert_eq!(s(&owner, 0x8), Err(Errno::EOPNOTSUPP));
    set(&fs, ino, I | FS_NODUMP_FL);
    // Keeping immutable while changing another flag is the owner's right.
    assert_eq!(s(&owner, I), Ok(()));
    assert_eq!(s(&owner, 0), Err(Errno::EPERM));
    assert_eq!(fs.get_flags(ino), Ok(I));
}

#[test]
fn an_immutable_file_refuses_changes() {
    let fs = Fs::new_in_memory();
    let ino = file(&fs, b"i");
    let old = open(&fs, ino, libc::O_RDWR).unwrap();
    fs.setxattr(&root(), ino, b"user.a", b"1", 0).unwrap();
    set(&fs, ino, I);
    let r = root();
    for flags in [
        libc::O_WRONLY,
        libc::O_RDWR,
        libc::O_RDONLY | libc::O_TRUNC,
        libc::O_WRONLY | libc::O_APPEND,
    ] {
        assert_eq!(
            open(&fs, ino, flags).map(drop),
            Err(Errno::EPERM),
            "{flags:#x}"
        );
    }
    assert!(open(&fs, ino, libc::O_RDONLY).is_ok());
    assert_eq!(fs.access(&r, ino, MAY_WRITE), Err(Errno::EPERM));
    // A handle opened before: writes and ftruncate go on (tmpfs), fallocate not.
    assert_eq!(fs.write(&old, 0, b"X").map(|w| w.0), Ok(1));
    assert!(fs
        .setattr(
            &r,
            ino,
            &SetAttr {
                size: Some(2),
                ..Default::default()
            },
            Some(&old)
        )
        .is_ok());
    assert_eq!(fs.fallocate(&old, 0, 0, 8192), Err(Errno::EPERM));
    let size = SetAttr {
        size: Some(1),
        ..Default::default()
    };
    assert_eq!(
        fs.setattr(&r, ino, &size, None).map(drop),
        Err(Errno::EPERM)
    );
    let refused = [
        SetAttr {
            mode: Some(0o600),
            ..Default::default()
        },
        SetAttr {
            uid: Some(1),
            ..Default::default()
        },
        SetAttr {
            gid: Some(1),
            ..Default::default()
        },
        times(Some(TimeSet::At(Timespec { sec: 1, nsec: 0 })), None),
        times(Some(TimeSet::Now), Some(TimeSet::Now)),
        times(Some(TimeSet::Now), None),
        times(None, Some(TimeSet::Now)),
    ];
    for ch in &refused {
        assert_eq!(
            fs.setattr(&r, ino, ch, None).map(drop),
            Err(Errno::EPERM),
            "{ch:?}"
        );
    }
    // Nothing asked: allowed (`chown(f, -1, -1)`).
    assert!(fs.setattr(&r, ino, &SetAttr::default(), None).is_ok());
    assert_eq!(fs.setxattr(&r, ino, b"user.b", b"1", 0), Err(Errno::EPERM));
    assert_eq!(fs.removexattr(&r, ino, b"user.a"), Err(Errno::EPERM));
    assert_eq!(fs.getxattr(&r, ino, b"user.a").unwrap(), b"1");
    let acl = posix_acl_xattr(&[
        (0x01, 6, u32::MAX),
        (0x04, 4, u32::MAX),
        (0x20, 4, u32::MAX),
    ]);
    assert_eq!(
        fs.setxattr(&r, ino, XATTR_NAME_POSIX_ACL_ACCESS, &acl, 0),
        Err(Errno::EPERM)
    );
    assert_eq!(
        fs.link(&r, ino, ROOT_INO, b"i2").map(drop),
        Err(Errno::EPERM)
    );
    assert_eq!(fs.unlink(&r, ROOT_INO, b"i"), Err(Errno::EPERM));
    assert_eq!(
        fs.rename(&r, ROOT_INO, b"i", ROOT_INO, b"j", 0),
        Err(Errno::EPERM)
    );
    file(&fs, b"f");
    assert_eq!(
        fs.rename(&r, ROOT_INO, b"f", ROOT_INO, b"i", 0),
        Err(Errno::EPERM)
    );
    assert_eq!(
        fs.rename(&r, ROOT_INO, b"f", ROOT_INO, b"i", RENAME_EXCHANGE),
        Err(Errno::EPERM)
    );
    // rmdir of a file: EPERM before ENOTDIR, as `may_delete`.
    assert_eq!(fs.rmdir(&r, ROOT_INO, b"i"), Err(Errno::EPERM));
    drop(old);
    // Cleared, everything is allowed again.
    set(&fs, ino, 0);
    fs.unlink(&r, ROOT_INO, b"i").unwrap();
    fs.check().unwrap();
}

#[test]
fn an_append_only_file_grows_only() {
    let fs = Fs::new_in_memory();
    let ino = file(&fs, b"a");
    let old = open(&fs, ino, libc::O_WRONLY).unwrap();
    set(&fs, ino, A);
    let r = root();
    assert_eq!(open(&fs, ino, libc::O_WRONLY).map(drop), Err(Errno::EPERM));
    assert_eq!(open(&fs, ino, libc::O_RDWR).map(drop), Err(Errno::EPERM));
    let trunc = libc::O_WRONLY | libc::O_APPEND | libc::O_TRUNC;
    assert_eq!(open(&fs, ino, trunc).map(drop), Err(Errno::EPERM));
    let rdtrunc = libc::O_RDONLY | libc::O_TRUNC;
    assert_eq!(open(&fs, ino, rdtrunc).map(drop), Err(Errno::EPERM));
    let app = open(&fs, ino, libc::O_WRONLY | libc::O_APPEND).unwrap();
    fs.write(&app, 0, b"Y").unwrap();
    assert_eq!(fs.getattr(ino).unwrap().size, 6, "appended at the end");
    // ftruncate through any handle: EPERM.
    let size = SetAttr {
        size: Some(2),
        ..Default::default()
    };
    assert_eq!(
        fs.setattr(&r, ino, &size, Some(&app)).map(drop),
        Err(Errno::EPERM)
    );
    assert_eq!(
        fs.setattr(&r, ino, &size, Some(&old)).map(drop),
        Err(Errno::EPERM)
    );
    assert_eq!(
        fs.setattr(&r, ino, &size, None).map(drop),
        Err(Errno::EPERM)
    );
    // fallocate: a plain allocation only.
    assert!(fs.fallocate(&app, FALLOC_FL_KEEP_SIZE, 0, 8192).is_ok());
    let punch = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
    assert_eq!(fs.fallocate(&app, punch, 0, 1), Err(Errno::EPERM));
    let mode = SetAttr {
        mode: Some(0o600),
        ..Default::default()
    };
    assert_eq!(
        fs.setattr(&r, ino, &mode, None).map(drop),
        Err(Errno::EPERM)
    );
    let explicit = times(Some(TimeSet::At(Timespec { sec: 1, nsec: 0 })), None);
    assert_eq!(
        fs.setattr(&r, ino, &explicit, None).map(drop),
        Err(Errno::EPERM)
    );
    let now_omit = times(Some(TimeSet::Now), None);
    assert_eq!(
        fs.setattr(&r, ino, &now_omit, None).map(drop),
        Err(Errno::EPERM)
    );
    let touch = times(Some(TimeSet::Now), Some(TimeSet::Now));
    assert!(
        fs.setattr(&r, ino, &touch, None).is_ok(),
        "a touch is allowed"
    );
    assert_eq!(fs.setxattr(&r, ino, b"user.a", b"1", 0), Err(Errno::EPERM));
    assert_eq!(
        fs.link(&r, ino, ROOT_INO, b"a2").map(drop),
        Err(Errno::EPERM)
    );
    assert_eq!(fs.unlink(&r, ROOT_INO, b"a"), Err(Errno::EPERM));
    assert_eq!(
        fs.rename(&r, ROOT_INO, b"a", ROOT_INO, b"b", 0),
        Err(Errno::EPERM)
    );
}

#[test]
fn an_immutable_directory_keeps_its_entries() {
    let fs = Fs::new_in_memory();
    let r = root();
    let d = fs.mkdir(&r, ROOT_INO, b"d", 0o777, 0).unwrap().ino;
    let e = fs.mkdir(&r, ROOT_INO, b"e", 0o777, 0).unwrap().ino;
    fs.open_at(&r, d, b"x", libc::O_CREAT | libc::O_RDWR, 0o644, 0, false)
        .unwrap();
    fs.mkdir(&r, d, b"sub", 0o755, 0).unwrap();
    let f = file(&fs, b"f");
    set(&fs, d, I);
    let creat = libc::O_CREAT | libc::O_WRONLY;
    let ex = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY;
    assert_eq!(
        fs.open_at(&r, d, b"n", creat, 0o644, 0, false).map(drop),
        Err(Errno::EPERM)
    );
    // A taken name is EEXIST first; an existing file opens for writing.
    assert_eq!(
        fs.open_at(&r, d, b"x", ex, 0o644, 0, false).map(drop),
        Err(Errno::EEXIST)
    );
    assert!(fs.open_at(&r, d, b"x", libc::O_WRONLY, 0, 0, false).is_ok());
    assert_eq!(fs.mkdir(&r, d, b"m", 0o755, 0).map(drop), Err(Errno::EPERM));
    assert_eq!(
        fs.mkdir(&r, d, b"x", 0o755, 0).map(drop),
        Err(Errno::EEXIST)
    );
    assert_eq!(
        fs.mknod(&r, d, b"p", libc::S_IFIFO | 0o644, 0, 0).map(drop),
        Err(Errno::EPERM)
    );
    assert_eq!(fs.symlink(&r, d, b"s", b"t").map(drop), Err(Errno::EPERM));
    assert_eq!(fs.link(&r, f, d, b"l").map(drop), Err(Errno::EPERM));
    assert_eq!(fs.unlink(&r, d, b"x"), Err(Errno::EPERM));
    assert_eq!(fs.unlink(&r, d, b"zz"), Err(Errno::ENOENT));
    assert_eq!(fs.rmdir(&r, d, b"sub"), Err(Errno::EPERM));
    assert_eq!(fs.rename(&r, d, b"x", d, b"y", 0), Err(Errno::EPERM));
    assert_eq!(fs.rename(&r, d, b"x", ROOT_INO, b"x", 0), Err(Errno::EPERM));
    assert_eq!(fs.rename(&r, ROOT_INO, b"f", d, b"f", 0), Err(Errno::EPERM));
    assert_eq!(fs.rename(&r, d, b"sub", e, b"sub", 0), Err(Errno::EPERM));
    assert_eq!(
        fs.rename(&r, ROOT_INO, b"d", ROOT_INO, b"d2", 0),
        Err(Errno::EPERM)
    );
    assert_eq!(fs.rmdir(&r, ROOT_INO, b"d"), Err(Errno::EPERM));
    assert_eq!(
        fs.tmpfile(&r, d, libc::O_WRONLY, 0o600, 0, false).map(drop),
        Err(Errno::EPERM)
    );
    let mode = SetAttr {
        mode: Some(0o700),
        ..Default::default()
    };
    assert_eq!(fs.setattr(&r, d, &mode, None).map(drop), Err(Errno::EPERM));
    // unlink of an immutable directory: EPERM before EISDIR.
    let ed = fs.mkdir(&r, ROOT_INO, b"ed", 0o755, 0).unwrap().ino;
    set(&fs, ed, I);
    assert_eq!(fs.unlink(&r, ROOT_INO, b"ed"), Err(Errno::EPERM));
    assert_eq!(fs.rmdir(&r, ROOT_INO, b"ed"), Err(Errno::EPERM));
    // A directory moved to another parent needs write access to itself
    // (its `..`): an immutable one stays.
    let c = fs.mkdir(&r, e, b"c", 0o755, 0).unwrap().ino;
    set(&fs, c, I);
    assert_eq!(fs.rename(&r, e, b"c", ROOT_INO, b"c", 0), Err(Errno::EPERM));
    set(&fs, d, 0);
    fs.unlink(&r, d, b"x").unwrap();
    fs.check().unwrap();
}

#[test]
fn an_append_only_directory_takes_new_entries_only() {
    let fs = Fs::new_in_memory();
    let r = root();
    let d = fs.mkdir(&r, ROOT_INO, b"ad", 0o777, 0).unwrap().ino;
    let creat = libc::O_CREAT | libc::O_WRONLY;
    fs.open_at(&r, d, b"x", creat, 0o644, 0, false).unwrap();
    fs.mkdir(&r, d, b"sub", 0o755, 0).unwrap();
    let f = file(&fs, b"f");
    let g = file(&fs, b"g");
    set(&fs, d, A);
    assert!(fs.open_at(&r, d, b"n", creat, 0o644, 0, false).is_ok());
    assert!(fs.mkdir(&r, d, b"m", 0o755, 0).is_ok());
    assert!(fs.symlink(&r, d, b"s", b"t").is_ok());
    assert!(fs.link(&r, f, d, b"l").is_ok());
    assert_eq!(fs.unlink(&r, d, b"x"), Err(Errno::EPERM));
    assert_eq!(fs.rmdir(&r, d, b"sub"), Err(Errno::EPERM));
    assert_eq!(fs.rename(&r, d, b"x", d, b"y", 0), Err(Errno::EPERM));
    assert_eq!(fs.rename(&r, d, b"n", ROOT_INO, b"n", 0), Err(Errno::EPERM));
    assert!(
        fs.rename(&r, ROOT_INO, b"g", d, b"g", 0).is_ok(),
        "a new name"
    );
    let _ = g;
    assert_eq!(
        fs.rename(&r, ROOT_INO, b"f", d, b"n", 0),
        Err(Errno::EPERM),
        "over one"
    );
    fs.check().unwrap();
}

#[test]
fn new_inodes_inherit_nodump_and_noatime() {
    let fs = Fs::new_in_memory();
    let r = root();
    let d = fs.mkdir(&r, ROOT_INO, b"d", 0o777, 0).unwrap().ino;
    set(&fs, d, FS_NODUMP_FL | FS_NOATIME_FL | A);
    let (f, _, _) = fs
        .open_at(&r, d, b"f", libc::O_CREAT | libc::O_WRONLY, 0o644, 0, false)
        .unwrap();
    let sub = fs.mkdir(&r, d, b"sub", 0o755, 0).unwrap().ino;
    assert_eq!(fs.get_flags(f.ino), Ok(FS_NODUMP_FL | FS_NOATIME_FL));
    assert_eq!(fs.get_flags(sub), Ok(FS_NODUMP_FL | FS_NOATIME_FL));
}

#[test]
fn noatime_keeps_atime_on_reads() {
    for atime in [AtimePolicy::Strict, AtimePolicy::Relatime] {
        let fs = Fs::new(
            std::sync::Arc::new(MemoryStore::new(MemoryStoreConfig::default())),
            FsConfig {
                atime,
                ..Default::default()
            },
        )
        .unwrap();
        let ino = file(&fs, b"f");
        let old = TimeSet::At(Timespec { sec: 1000, nsec: 0 });
        fs.setattr(&root(), ino, &times(Some(old), None), None)
            .unwrap();
        set(&fs, ino, FS_NOATIME_FL);
        let f = open(&fs, ino, libc::O_RDONLY).unwrap();
        let mut buf = [0u8; 5];
        fs.read(&f, 0, &mut buf).unwrap();
        assert_eq!(fs.getattr(ino).unwrap().atime.sec, 1000, "{atime:?}");
        set(&fs, ino, 0);
        fs.read(&f, 0, &mut buf).unwrap();
        assert!(fs.getattr(ino).unwrap().atime.sec > 1000, "{atime:?}");
    }
}

/// A symlink made in a noatime directory inherits the flag (it has no
/// ioctl of its own) and its reads keep atime, as on tmpfs.
#[test]
fn a_symlink_in_a_noatime_directory_keeps_its_atime() {
    let fs = Fs::new_in_memory();
    let r = root();
    for (dir, noatime) in [(&b"d"[..], true), (&b"e"[..], false)] {
        let d = fs.mkdir(&r, ROOT_INO, dir, 0o755, 0).unwrap().ino;
        if noatime {
            set(&fs, d, FS_NOATIME_FL);
        }
        let s = fs.symlink(&r, d, b"s", b"target").unwrap().ino;
        let old = TimeSet::At(Timespec { sec: 1000, nsec: 0 });
        fs.setattr(&r, s, &times(Some(old), None), None).unwrap();
        assert_eq!(fs.readlink(s).unwrap(), b"target");
        let kept = fs.getattr(s).unwrap().atime.sec == 1000;
        assert_eq!(kept, noatime);
    }
}

#[test]
fn flags_survive_eviction() {
    let fs = Fs::new_in_memory();
    let ino = file(&fs, b"f");
    set(&fs, ino, I | FS_NODUMP_FL);
    fs.sync().unwrap();
    fs.shrink();
    assert_eq!(fs.get_flags(ino), Ok(I | FS_NODUMP_FL));
    assert_eq!(open(&fs, ino, libc::O_WRONLY).map(drop), Err(Errno::EPERM));
}
