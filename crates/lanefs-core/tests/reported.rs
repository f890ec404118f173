//! Regressions for core bugs found by the Rust API's tests (differential
//! runs against tmpfs). Each test states what Linux does. Calls that could
//! deadlock run on a helper thread with a deadline so the suite cannot hang.

use std::sync::mpsc;
use std::time::Duration;

use lanefs_core::{Cred, Errno, Fs, ROOT_INO};

/// Run `f` on a thread; `None` if it has not returned after 5 seconds
/// (the thread is left behind, blocked).
fn with_deadline<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(5)).ok()
}

/// `link(dir, dir/name)` must fail with EPERM (hard links to directories
/// are not allowed); the core locks the directory's metadata twice and
/// deadlocks (`Fs::link`, crates/lanefs-core/src/namei.rs: `dir.meta.lock()`
/// then `inode.meta.lock()` on the same inode).
#[test]
fn core_link_directory_into_itself_is_eperm_not_deadlock() {
    let fs = Fs::new_in_memory();
    let got = with_deadline(move || {
        fs.link(&Cred::root(), ROOT_INO, ROOT_INO, b"x")
            .map(|a| a.ino)
    });
    assert_eq!(
        got,
        Some(Err(Errno::EPERM)),
        "None means the call deadlocked"
    );
}

/// `utimensat(path, [UTIME_NOW, UTIME_OMIT])` by a non-owner who may write
/// the file must fail with EPERM: only "both UTIME_NOW" is the
/// write-permission "touch" case (Linux `may_setattr`/`setattr_prepare`,
/// checked on tmpfs). The core accepts it.
#[test]
fn core_setattr_now_and_omit_by_non_owner_is_eperm() {
    use lanefs_core::{SetAttr, TimeSet};
    let fs = Fs::new_in_memory();
    let root = Cred::root();
    let (attr, file, _) = fs
        .open_at(
            &root,
            ROOT_INO,
            b"f",
            libc::O_CREAT | libc::O_WRONLY,
            0o666,
            0,
            false,
        )
        .expect("create");
    drop(file);
    let bob = Cred::user(1001, 1001);
    let now_omit = SetAttr {
        atime: Some(TimeSet::Now),
        ..SetAttr::default()
    };
    assert_eq!(
        fs.setattr(&bob, attr.ino, &now_omit, None).map(|_| ()),
        Err(Errno::EPERM)
    );
}

/// A write by a caller who is neither root nor in the file's group clears
/// setgid even without group execute (Linux >= 6.2
/// `setattr_should_drop_sgid`; seen on tmpfs by the differential test:
/// `open("a", O_WRONLY|O_CREAT, 0o2000)` by root, then a write by uid 1000
/// leaves mode 0o100000 on tmpfs, 0o102000 on lanefs).
#[test]
fn core_write_by_non_member_clears_setgid_without_group_exec() {
    let fs = Fs::new_in_memory();
    let (attr, file, _) = fs
        .open_at(
            &Cred::root(),
            ROOT_INO,
            b"f",
            libc::O_CREAT | libc::O_RDWR,
            0o2666,
            0,
            false,
        )
        .expect("create");
    assert_eq!(attr.perm, 0o2666);
    let _ = file;
    let bob = Cred::user(1001, 1001);
    let h = fs
        .open(&bob, attr.ino, libc::O_WRONLY)
        .expect("open for bob");
    fs.write(&h, 0, b"x").expect("write");
    assert_eq!(fs.getattr(attr.ino).expect("getattr").perm, 0o666);
}

/// `fallocate` by a caller without CAP_FSETID clears setuid (and setgid
/// when the caller is not in the file's group), as a write does: tmpfs's
/// `shmem_fallocate` calls `file_modified`. Seen by the differential test:
/// `create("c", 0o2272)` by root, `open("c", O_WRONLY)` by uid 1000,
/// `fallocate(fd, 0, 0, 1)`: tmpfs 0o100272, lanefs 0o102272.
#[test]
fn core_fallocate_by_non_root_clears_suid_sgid() {
    let fs = Fs::new_in_memory();
    let (attr, file, _) = fs
        .open_at(
            &Cred::root(),
            ROOT_INO,
            b"f",
            libc::O_CREAT | libc::O_RDWR,
            0o6777,
            0,
            false,
        )
        .expect("create");
    assert_eq!(attr.perm, 0o6777);
    drop(file);
    let bob = Cred::user(1001, 1001);
    let h = fs
        .open(&bob, attr.ino, libc::O_WRONLY)
        .expect("open for bob");
    fs.fallocate(&h, 0, 0, 1).expect("fallocate");
    assert_eq!(fs.getattr(attr.ino).expect("getattr").perm, 0o777);
}

/// An unprivileged user may create a character device with device number
/// 0/0 — the overlayfs "whiteout" (Linux >= 5.8 `vfs_mknod`: the
/// CAP_MKNOD check skips `S_ISCHR && dev == WHITEOUT_DEV`). Seen by the
/// differential test: `mknod("a", S_IFCHR, 0)` by uid 1000 in a directory
/// it owns: tmpfs ok, lanefs EPERM.
#[test]
fn core_unprivileged_mknod_whiteout_is_allowed() {
    let fs = Fs::new_in_memory();
    let root = Cred::root();
    let dir = fs.mkdir(&root, ROOT_INO, b"d", 0o777, 0).expect("mkdir");
    let alice = Cred::user(1000, 1000);
    let got = fs
        .mknod(&alice, dir.ino, b"wh", libc::S_IFCHR, 0, 0)
        .map(|a| (a.kind, a.rdev));
    assert_eq!(got, Ok((lanefs_core::FileKind::CharDevice, 0)));
    // Any other device number still needs CAP_MKNOD.
    let other = fs.mknod(
        &alice,
        dir.ino,
        b"dev",
        libc::S_IFCHR,
        0,
        libc::makedev(1, 3),
    );
    assert_eq!(other.map(|_| ()), Err(Errno::EPERM));
}
/// Creating a file in a setgid directory whose group the caller is not in
/// drops setgid from the requested mode when it is group-executable —
/// tested on the mode *before* the umask (Linux `vfs_prepare_mode`:
/// `mode_strip_sgid` then `mode_strip_umask`). Seen by the differential
/// test: root dir 0o6013, uid 1000 opens "c" with O_CREAT, mode 0o2775,
/// umask 0o077: tmpfs 0o100700, lanefs 0o102700.
#[test]
fn core_create_strips_sgid_before_applying_umask() {
    let fs = Fs::new_in_memory();
    let root = Cred::root();
    let dir = fs.mkdir(&root, ROOT_INO, b"d", 0o777, 0).expect("mkdir");
    let sgid = lanefs_core::SetAttr {
        mode: Some(0o2777),
        ..lanefs_core::SetAttr::default()
    };
    assert_eq!(
        fs.setattr(&root, dir.ino, &sgid, None).expect("chmod").perm,
        0o2777
    );
    let alice = Cred::user(1000, 1000);
    let (attr, _file, created) = fs
        .open_at(
            &alice,
            dir.ino,
            b"f",
            libc::O_CREAT | libc::O_WRONLY,
            0o2775,
            0o077,
            false,
        )
        .expect("create");
    assert!(created);
    assert_eq!(attr.gid, 0, "group from the setgid directory");
    assert_eq!(attr.perm, 0o700);
}
