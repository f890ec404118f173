//! The mount's atime policy (`FsConfig::atime`, `nodiratime`) and the
//! setuid/setgid kill by the writer (`Fs::write_as`, `Fs::fallocate_as`),
//! which happens in the same step as the data change.

use std::sync::Arc;

use lanefs_core::*;

const CREAT: i32 = libc::O_CREAT | libc::O_RDWR;

fn fs_with(atime: AtimePolicy, nodiratime: bool) -> Fs {
    let cfg = FsConfig {
        atime,
        nodiratime,
        ..FsConfig::default()
    };
    Fs::new(Arc::new(MemoryStore::default()), cfg).unwrap()
}

/// A file with data whose atime is set an hour in the future (newer than
/// mtime and ctime, so relatime leaves it alone), and a directory with
/// its atime an hour in the past... both read once; returns how the
/// atimes moved: (file moved, dir moved).
fn read_and_list(fs: &Fs, atime_in_future: bool) -> (bool, bool) {
    let root = Cred::root();
    let (a, f, _) = fs
        .open_at(&root, ROOT_INO, b"f", CREAT, 0o644, 0, false)
        .unwrap();
    fs.write(&f, 0, b"data").unwrap();
    let d = fs.mkdir(&root, ROOT_INO, b"d", 0o755, 0).unwrap();
    let now = Timespec::now();
    let at = Timespec {
        sec: if atime_in_future {
            now.sec + 3600
        } else {
            now.sec - 3600
        },
        nsec: 0,
    };
    for ino in [a.ino, d.ino] {
        let ch = SetAttr {
            atime: Some(TimeSet::At(at)),
            ..Default::default()
        };
        fs.setattr(&root, ino, &ch, None).unwrap();
    }
    let mut buf = [0u8; 8];
    assert_eq!(fs.read(&f, 0, &mut buf).unwrap(), 4);
    let dir = fs.open(&root, d.ino, libc::O_RDONLY).unwrap();
    fs.readdir(&dir, 0, &mut |_| false).unwrap();
    let moved = |ino| fs.getattr(ino).unwrap().atime != at;
    (moved(a.ino), moved(d.ino))
}

#[test]
fn relatime_is_the_default_and_moves_only_stale_atimes() {
    assert_eq!(FsConfig::default().atime, AtimePolicy::Relatime);
    // atime older than mtime/ctime: moved.
    assert_eq!(
        read_and_list(&fs_with(AtimePolicy::Relatime, false), false),
        (true, true)
    );
    // atime newer than mtime/ctime: left alone.
    assert_eq!(
        read_and_list(&fs_with(AtimePolicy::Relatime, false), true),
        (false, false)
    );
}

#[test]
fn strictatime_moves_every_access_noatime_none() {
    assert_eq!(
        read_and_list(&fs_with(AtimePolicy::Strict, false), true),
        (true, true)
    );
    assert_eq!(
        read_and_list(&fs_with(AtimePolicy::Never, false), false),
        (false, false)
    );
}

#[test]
fn nodiratime_spares_directories_only() {
    assert_eq!(
        read_and_list(&fs_with(AtimePolicy::Strict, true), true),
        (true, false)
    );
    assert_eq!(
        read_and_list(&fs_with(AtimePolicy::Relatime, true), false),
        (true, false)
    );
}

/// A listing's atime follows the flags it is given (`Fs::readdir_flags`,
/// the descriptor's flags now: FUSE's READDIR carries them) and, through
/// `Fs::readdir`, the handle's own open flags.
#[test]
fn listing_atime_follows_the_descriptors_noatime() {
    let fs = fs_with(AtimePolicy::Strict, false);
    let root = Cred::root();
    let d = fs.mkdir(&root, ROOT_INO, b"d", 0o755, 0).unwrap();
    let at = Timespec { sec: 1000, nsec: 0 };
    let list = |open_flags: i32, flags: Option<i32>| {
        let ch = SetAttr {
            atime: Some(TimeSet::At(at)),
            ..Default::default()
        };
        fs.setattr(&root, d.ino, &ch, None).unwrap();
        let dir = fs.open(&root, d.ino, libc::O_RDONLY | open_flags).unwrap();
        match flags {
            Some(f) => fs.readdir_flags(&dir, 0, f, &mut |_| false).unwrap(),
            None => fs.readdir(&dir, 0, &mut |_| false).unwrap(),
        }
        fs.getattr(d.ino).unwrap().atime != at
    };
    assert!(!list(libc::O_NOATIME, None), "opened O_NOATIME");
    assert!(list(0, None), "opened plain");
    assert!(!list(0, Some(libc::O_NOATIME)), "O_NOATIME set since");
    assert!(list(libc::O_NOATIME, Some(0)), "O_NOATIME cleared since");
}

/// A directory's times follow its entries' changes as Linux's do: a
/// create sets mtime and ctime to now even after `utimensat` put mtime in
/// the future, and a listing after a change moves a relatime atime that
/// was newer than the times before the change.
#[test]
fn directory_times_follow_entry_changes() {
    let fs = fs_with(AtimePolicy::Relatime, false);
    let root = Cred::root();
    let d = fs.mkdir(&root, ROOT_INO, b"d", 0o755, 0).unwrap();
    let now = Timespec::now();
    let future = Timespec {
        sec: now.sec + 3600,
        nsec: 0,
    };
    let later = Timespec {
        sec: future.sec + 10,
        nsec: 0,
    };
    let ch = SetAttr {
        mtime: Some(TimeSet::At(future)),
        atime: Some(TimeSet::At(later)),
        ..Default::default()
    };
    fs.setattr(&root, d.ino, &ch, None).unwrap();
    assert_eq!(fs.getattr(d.ino).unwrap().mtime, future);
    // Listed now: atime is newer than mtime and ctime: left alone.
    let dir = fs.open(&root, d.ino, libc::O_RDONLY).unwrap();
    fs.readdir(&dir, 0, &mut |_| false).unwrap();
    assert_eq!(fs.getattr(d.ino).unwrap().atime, later);
    fs.mknod(&root, d.ino, b"x", libc::S_IFREG | 0o644, 0, 0)
        .unwrap();
    let a = fs.getattr(d.ino).unwrap();
    assert!(a.mtime < future && a.mtime >= now, "mtime {:?}", a.mtime);
    assert_eq!(a.ctime, a.mtime);
    assert_eq!(a.size, 3 * DIRENT_SIZE);
    // Relatime: atime is still newer than the new times, so a listing
    // leaves it; set it to the past and the next listing moves it.
    fs.readdir(&dir, 0, &mut |_| false).unwrap();
    assert_eq!(fs.getattr(d.ino).unwrap().atime, later);
    let past = Timespec {
        sec: now.sec - 3600,
        nsec: 0,
    };
    let ch = SetAttr {
        atime: Some(TimeSet::At(past)),
        ..Default::default()
    };
    fs.setattr(&root, d.ino, &ch, None).unwrap();
    fs.readdir(&dir, 0, &mut |_| false).unwrap();
    assert!(fs.getattr(d.ino).unwrap().atime >= now);
}

/// A 06775 file owned by 1000:1000, opened for writing by root.
fn special_file(fs: &Fs, name: &[u8]) -> (Ino, OpenFile) {
    let root = Cred::root();
    let (a, f, _) = fs
        .open_at(&root, ROOT_INO, name, CREAT, 0o6775, 0, false)
        .unwrap();
    let ch = SetAttr {
        uid: Some(1000),
        gid: Some(1000),
        mode: Some(0o6775),
        ..Default::default()
    };
    fs.setattr(&root, a.ino, &ch, None).unwrap();
    assert_eq!(fs.getattr(a.ino).unwrap().perm, 0o6775);
    (a.ino, f)
}

#[test]
fn write_as_kills_by_the_writer_not_the_opener() {
    let fs = fs_with(AtimePolicy::Relatime, false);
    let user = Cred {
        uid: 1001,
        gid: 1001,
        groups: vec![],
    };
    // Opened by root, written by a user: both bits go (group-exec set).
    let (ino, f) = special_file(&fs, b"a");
    fs.write_as(&f, 0, b"x", &user).unwrap();
    assert_eq!(fs.getattr(ino).unwrap().perm, 0o775);
    // Opened by root, written with CAP_FSETID (root): kept.
    let (ino, f) = special_file(&fs, b"b");
    fs.write_as(&f, 0, b"x", &Cred::root()).unwrap();
    assert_eq!(fs.getattr(ino).unwrap().perm, 0o6775);
    // Opened by the owner, written by root: kept, though the opener would
    // have dropped them.
    let (ino, _) = special_file(&fs, b"c");
    let owner = Cred {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    };
    let uf = fs.open(&owner, ino, libc::O_WRONLY).unwrap();
    fs.write_as(&uf, 0, b"x", &Cred::root()).unwrap();
    assert_eq!(fs.getattr(ino).unwrap().perm, 0o6775);
    // fallocate by the caller's rules, the same way.
    let (ino, f) = special_file(&fs, b"d");
    fs.fallocate_as(&f, 0, 0, 4096, &user).unwrap();
    assert_eq!(fs.getattr(ino).unwrap().perm, 0o775);
    let (ino, f) = special_file(&fs, b"e");
    fs.fallocate_as(&f, 0, 0, 4096, &Cred::root()).unwrap();
    assert_eq!(fs.getattr(ino).unwrap().perm, 0o6775);
    // A zero-length write changes nothing.
    let (ino, f) = special_file(&fs, b"g");
    fs.write_as(&f, 0, b"", &user).unwrap();
    assert_eq!(fs.getattr(ino).unwrap().perm, 0o6775);
}

/// `chown` decides the setgid drop from the file as it was
/// (`setattr_should_drop_sgid` in `chown_common`): an owner outside the
/// file's current group who moves it to their own group loses a
/// non-group-executable setgid; one inside the current group keeps it.
/// (Found by the differential test against tmpfs.)
#[test]
fn chown_drops_setgid_by_the_old_group() {
    let fs = fs_with(AtimePolicy::Relatime, false);
    let root = Cred::root();
    for (name, caller_groups, keeps) in
        [(&b"out"[..], vec![], false), (&b"in"[..], vec![1000], true)]
    {
        let (a, _, _) = fs
            .open_at(&root, ROOT_INO, name, CREAT, 0o644, 0, false)
            .unwrap();
        let setup = SetAttr {
            uid: Some(1001),
            gid: Some(1000),
            ..Default::default()
        };
        fs.setattr(&root, a.ino, &setup, None).unwrap();
        let mode = SetAttr {
            mode: Some(0o2745),
            ..Default::default()
        };
        fs.setattr(&root, a.ino, &mode, None).unwrap();
        let owner = Cred {
            uid: 1001,
            gid: 2000,
            groups: caller_groups,
        };
        let chgrp = SetAttr {
            gid: Some(2000),
            ..Default::default()
        };
        fs.setattr(&owner, a.ino, &chgrp, None).unwrap();
        let want = if keeps { 0o2745 } else { 0o745 };
        assert_eq!(
            fs.getattr(a.ino).unwrap().perm,
            want,
            "{}",
            String::from_utf8_lossy(name)
        );
    }
}
