//! `renameat2(RENAME_WHITEOUT)`: the source name is left naming a whiteout
//! — a 0/0 character device of mode 0 owned by the caller, its group as a
//! create in the source directory — in the same step as the move. Every
//! expectation is what tmpfs does (checked on a tmpfs mount, kernel 6.18):
//! a whiteout over a replaced target, across directories with a directory,
//! with `RENAME_NOREPLACE`, by a user in a setgid directory; two names of
//! one inode: nothing happens; a failed rename leaves no whiteout and no
//! inode behind.

use std::sync::Arc;

use lanefs_core::{
    Attr, Cred, Errno, FileKind, Fs, FsConfig, MemoryStore, DIRENT_SIZE, RENAME_EXCHANGE,
    RENAME_NOREPLACE, RENAME_WHITEOUT, ROOT_INO,
};

fn fresh() -> (Arc<MemoryStore>, Fs) {
    let store = Arc::new(MemoryStore::default());
    let fs = Fs::new(store.clone(), FsConfig::default()).unwrap();
    (store, fs)
}

fn used_inodes(fs: &Fs) -> u64 {
    let s = fs.statfs().unwrap();
    s.files - s.files_free
}

#[track_caller]
fn assert_whiteout(a: &Attr, uid: u32, gid: u32) {
    assert_eq!(
        (a.kind, a.perm, a.rdev, a.nlink, a.size),
        (FileKind::CharDevice, 0, 0, 1, 0),
        "a whiteout: 0/0 character device, mode 0"
    );
    assert_eq!((a.uid, a.gid), (uid, gid), "owner");
}

#[test]
fn whiteout_is_left_at_the_source_name() {
    let (_store, fs) = fresh();
    let root = Cred::root();
    let f = fs
        .mknod(&root, ROOT_INO, b"a", libc::S_IFREG | 0o644, 0, 0)
        .unwrap();
    let before = fs.getattr(ROOT_INO).unwrap();
    let inodes = used_inodes(&fs);
    fs.rename(&root, ROOT_INO, b"a", ROOT_INO, b"b", RENAME_WHITEOUT)
        .unwrap();
    assert_eq!(fs.lookup(&root, ROOT_INO, b"b").unwrap().ino, f.ino);
    let w = fs.lookup(&root, ROOT_INO, b"a").unwrap();
    assert_whiteout(&w, 0, 0);
    assert_ne!(w.ino, f.ino);
    assert_eq!(used_inodes(&fs), inodes + 1, "the whiteout is an inode");
    let after = fs.getattr(ROOT_INO).unwrap();
    assert_eq!(
        after.size,
        before.size + DIRENT_SIZE,
        "one more entry (tmpfs: 20 bytes per entry)"
    );
    assert_eq!(after.nlink, before.nlink);
    // The source's ctime moves; the whiteout is made at the rename's time.
    assert!(w.ctime >= before.ctime);
    // Over an existing target, again leaving a whiteout (the old whiteout
    // is replaced by the move of `b`, then `b` becomes one).
    fs.rename(&root, ROOT_INO, b"b", ROOT_INO, b"a", RENAME_WHITEOUT)
        .unwrap();
    assert_eq!(fs.lookup(&root, ROOT_INO, b"a").unwrap().ino, f.ino);
    assert_whiteout(&fs.lookup(&root, ROOT_INO, b"b").unwrap(), 0, 0);
    assert_eq!(
        used_inodes(&fs),
        inodes + 1,
        "the replaced whiteout is freed"
    );
    fs.check().unwrap();
}

#[test]
fn directory_moved_across_parents_leaves_a_whiteout() {
    let (_store, fs) = fresh();
    let root = Cred::root();
    let a = fs.mkdir(&root, ROOT_INO, b"A", 0o755, 0).unwrap();
    let b = fs.mkdir(&root, ROOT_INO, b"B", 0o755, 0).unwrap();
    let sub = fs.mkdir(&root, a.ino, b"sub", 0o755, 0).unwrap();
    fs.mkdir(&root, sub.ino, b"deep", 0o755, 0).unwrap();
    fs.rename(&root, a.ino, b"sub", b.ino, b"moved", RENAME_WHITEOUT)
        .unwrap();
    let (a2, b2) = (fs.getattr(a.ino).unwrap(), fs.getattr(b.ino).unwrap());
    // tmpfs: A keeps its size (the whiteout took the entry) and loses the
    // subdirectory's link; B gains both.
    assert_eq!((a2.nlink, a2.size), (2, 3 * DIRENT_SIZE));
    assert_eq!((b2.nlink, b2.size), (3, 3 * DIRENT_SIZE));
    assert_whiteout(&fs.lookup(&root, a.ino, b"sub").unwrap(), 0, 0);
    let moved = fs.lookup(&root, b.ino, b"moved").unwrap();
    assert_eq!(moved.ino, sub.ino);
    assert_eq!(fs.lookup(&root, moved.ino, b"..").unwrap().ino, b.ino);
    // A whiteout is not a directory: a directory cannot be renamed over
    // it, a file can.
    fs.mknod(&root, b.ino, b"f", libc::S_IFREG | 0o644, 0, 0)
        .unwrap();
    assert_eq!(
        fs.rename(&root, b.ino, b"moved", a.ino, b"sub", 0),
        Err(Errno::ENOTDIR)
    );
    fs.rename(&root, b.ino, b"f", a.ino, b"sub", 0).unwrap();
    fs.check().unwrap();
}

#[test]
fn noreplace_whiteout_and_invalid_combinations() {
    let (_store, fs) = fresh();
    let root = Cred::root();
    fs.mknod(&root, ROOT_INO, b"a", libc::S_IFREG | 0o644, 0, 0)
        .unwrap();
    fs.mknod(&root, ROOT_INO, b"b", libc::S_IFREG | 0o644, 0, 0)
        .unwrap();
    let inodes = used_inodes(&fs);
    let flags = RENAME_WHITEOUT | RENAME_NOREPLACE;
    assert_eq!(
        fs.rename(&root, ROOT_INO, b"a", ROOT_INO, b"b", flags),
        Err(Errno::EEXIST)
    );
    assert_eq!(
        fs.rename(
            &root,
            ROOT_INO,
            b"a",
            ROOT_INO,
            b"b",
            RENAME_WHITEOUT | RENAME_EXCHANGE
        ),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        fs.rename(&root, ROOT_INO, b"nope", ROOT_INO, b"c", RENAME_WHITEOUT),
        Err(Errno::ENOENT)
    );
    // A directory that would not be empty: the allocated whiteout goes.
    let d = fs.mkdir(&root, ROOT_INO, b"d", 0o755, 0).unwrap();
    let e = fs.mkdir(&root, ROOT_INO, b"e", 0o755, 0).unwrap();
    fs.mkdir(&root, e.ino, b"x", 0o755, 0).unwrap();
    assert_eq!(
        fs.rename(&root, ROOT_INO, b"d", ROOT_INO, b"e", RENAME_WHITEOUT),
        Err(Errno::ENOTEMPTY)
    );
    assert_eq!(fs.lookup(&root, ROOT_INO, b"d").unwrap().ino, d.ino);
    assert_eq!(
        used_inodes(&fs),
        inodes + 3,
        "no whiteout left by a failed rename"
    );
    fs.rename(&root, ROOT_INO, b"a", ROOT_INO, b"c", flags)
        .unwrap();
    assert_whiteout(&fs.lookup(&root, ROOT_INO, b"a").unwrap(), 0, 0);
    fs.check().unwrap();
}

#[test]
fn two_names_of_one_inode_stay_and_make_no_whiteout() {
    let (_store, fs) = fresh();
    let root = Cred::root();
    let f = fs
        .mknod(&root, ROOT_INO, b"h1", libc::S_IFREG | 0o644, 0, 0)
        .unwrap();
    fs.link(&root, f.ino, ROOT_INO, b"h2").unwrap();
    let inodes = used_inodes(&fs);
    fs.rename(&root, ROOT_INO, b"h1", ROOT_INO, b"h2", RENAME_WHITEOUT)
        .unwrap();
    for n in [&b"h1"[..], b"h2"] {
        let a = fs.lookup(&root, ROOT_INO, n).unwrap();
        assert_eq!((a.ino, a.nlink), (f.ino, 2));
    }
    assert_eq!(used_inodes(&fs), inodes);
    fs.check().unwrap();
}

#[test]
fn a_user_makes_a_whiteout_with_the_setgid_directorys_group() {
    let (_store, fs) = fresh();
    let root = Cred::root();
    let d = fs.mkdir(&root, ROOT_INO, b"sg", 0o777, 0).unwrap();
    fs.setattr(
        &root,
        d.ino,
        &lanefs_core::SetAttr {
            mode: Some(0o2777),
            gid: Some(50),
            ..Default::default()
        },
        None,
    )
    .unwrap();
    let user = Cred::user(1000, 1000);
    fs.mknod(&user, d.ino, b"x", libc::S_IFREG | 0o644, 0, 0)
        .unwrap();
    fs.rename(&user, d.ino, b"x", d.ino, b"y", RENAME_WHITEOUT)
        .unwrap();
    // No CAP_MKNOD needed (Linux 5.8+); tmpfs: uid 1000, gid 50, 020000.
    assert_whiteout(&fs.lookup(&user, d.ino, b"x").unwrap(), 1000, 50);
    fs.check().unwrap();
}

#[test]
fn no_inode_for_the_whiteout_is_enospc_after_the_checks() {
    // tmpfs (nr_inodes=4, full): a whiteout rename is ENOSPC and nothing
    // moves; the allocation comes after the rename's checks
    // (`shmem_rename2`), so a caller who may not write the directory gets
    // EACCES and a missing source ENOENT.
    let store = Arc::new(MemoryStore::new(lanefs_core::MemoryStoreConfig {
        capacity_bytes: 1 << 20,
        max_inodes: 4,
    }));
    let fs = Fs::new(store, FsConfig::default()).unwrap();
    let root = Cred::root();
    let d = fs.mkdir(&root, ROOT_INO, b"d", 0o755, 0).unwrap();
    fs.mkdir(&root, d.ino, b"x", 0o755, 0).unwrap();
    let a = fs
        .mknod(&root, ROOT_INO, b"a", libc::S_IFREG | 0o644, 0, 0)
        .unwrap();
    assert_eq!(used_inodes(&fs), 4, "full");
    assert_eq!(
        fs.rename(&root, ROOT_INO, b"a", ROOT_INO, b"b", RENAME_WHITEOUT),
        Err(Errno::ENOSPC)
    );
    assert_eq!(fs.lookup(&root, ROOT_INO, b"a").unwrap().ino, a.ino);
    assert_eq!(fs.lookup(&root, ROOT_INO, b"b"), Err(Errno::ENOENT));
    let user = Cred::user(1000, 1000);
    assert_eq!(
        fs.rename(&user, ROOT_INO, b"a", ROOT_INO, b"b", RENAME_WHITEOUT),
        Err(Errno::EACCES)
    );
    assert_eq!(
        fs.rename(&root, ROOT_INO, b"nope", ROOT_INO, b"b", RENAME_WHITEOUT),
        Err(Errno::ENOENT)
    );
    fs.mknod(&root, ROOT_INO, b"e", libc::S_IFREG, 0, 0)
        .expect_err("full");
    assert_eq!(
        fs.rename(&root, ROOT_INO, b"d", ROOT_INO, b"d2", RENAME_WHITEOUT),
        Err(Errno::ENOSPC)
    );
    // A plain rename still works: it needs no inode.
    fs.rename(&root, ROOT_INO, b"a", ROOT_INO, b"b", 0).unwrap();
    fs.check().unwrap();
}
