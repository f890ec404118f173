//! Reproducers for engine behaviour seen through the mount (run with
//! `cargo test -p lanefs-fuse --test core_repro`).

use lanefs_core::{Cred, Fs, SetAttr};

fn file_with_mode(fs: &Fs, name: &[u8], perm: u32) -> u64 {
    let root = Cred::root();
    let a = fs
        .mknod(&root, 1, name, libc::S_IFREG | 0o644, 0, 0)
        .unwrap();
    let ch = SetAttr {
        mode: Some(perm),
        ..Default::default()
    };
    assert_eq!(
        fs.setattr(&root, a.ino, &ch, None).unwrap().perm as u32,
        perm
    );
    a.ino
}

/// chown of a 07755 file: Linux (tmpfs) clears setuid and setgid and keeps
/// the sticky bit -> 01755. The kernel's FUSE client sends exactly that as
/// one SETATTR {mode: 01755, uid, gid}.
#[test]
fn chown_with_mode_keeps_sticky_bit() {
    let fs = Fs::new_in_memory();
    let root = Cred::root();
    let ino = file_with_mode(&fs, b"f", 0o7755);
    let ch = SetAttr {
        mode: Some(0o1755),
        uid: Some(1001),
        gid: Some(2000),
        ..Default::default()
    };
    let a = fs.setattr(&root, ino, &ch, None).unwrap();
    assert_eq!(a.perm, 0o1755, "got {:o}", a.perm);
}

/// Plain chown (no mode): setuid/setgid cleared, sticky kept.
#[test]
fn chown_keeps_sticky_bit() {
    let fs = Fs::new_in_memory();
    let root = Cred::root();
    let ino = file_with_mode(&fs, b"f", 0o7755);
    let ch = SetAttr {
        uid: Some(1001),
        gid: Some(2000),
        ..Default::default()
    };
    let a = fs.setattr(&root, ino, &ch, None).unwrap();
    assert_eq!(a.perm, 0o1755, "got {:o}", a.perm);
}

/// Regression (found through the mount, fixed in the engine): `fallocate` by a non-root caller must drop setuid
/// (and setgid when group-exec is set), as `write` and `truncate` do —
/// Linux's `file_modified()` in `vfs_fallocate`; tmpfs shows 06777 -> 0777
/// after `fallocate -p` or a size-extending `fallocate` by uid 1000. Through FUSE (with `FUSE_HANDLE_KILLPRIV_V2`) the
/// kernel leaves this to the file system.
#[test]
fn fallocate_by_user_drops_suid_sgid() {
    let fs = Fs::new_in_memory();
    let ino = file_with_mode(&fs, b"f", 0o6777);
    let user = Cred::user(1000, 1000);
    for mode in [
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        0, // allocate (extends)
    ] {
        let root = Cred::root();
        let ch = SetAttr {
            mode: Some(0o6777),
            ..Default::default()
        };
        fs.setattr(&root, ino, &ch, None).unwrap();
        let f = fs.open(&user, ino, libc::O_RDWR).unwrap();
        fs.write(&f, 0, &[1u8; 8192]).unwrap(); // the write itself kills...
        fs.setattr(&root, ino, &ch, None).unwrap(); // ...so restore 06777
        fs.fallocate(&f, mode, 0, 16384).unwrap();
        let perm = fs.getattr(ino).unwrap().perm;
        assert_eq!(perm, 0o777, "fallocate mode {mode:#x}: perm {perm:o}");
    }
}

/// Regression (found through the mount, fixed in the engine): a write or truncate by a non-root caller who is
/// not in the file's group drops setgid even without group-exec (Linux's
/// `setattr_should_drop_sgid`: S_IXGRP set, *or* caller not in the group
/// and without CAP_FSETID). tmpfs: 02767 (gid 0) written by uid 1000 gid
/// 1000 -> 0767.
#[test]
fn write_by_non_member_drops_sgid_without_group_exec() {
    let fs = Fs::new_in_memory();
    let ino = file_with_mode(&fs, b"f", 0o2767);
    let user = Cred::user(1000, 1000);
    let f = fs.open(&user, ino, libc::O_WRONLY).unwrap();
    fs.write(&f, 0, b"x").unwrap();
    let perm = fs.getattr(ino).unwrap().perm;
    assert_eq!(perm, 0o767, "write: perm {perm:o}");
    let ch = SetAttr {
        mode: Some(0o2767),
        ..Default::default()
    };
    fs.setattr(&Cred::root(), ino, &ch, None).unwrap();
    let tr = SetAttr {
        size: Some(1),
        ..Default::default()
    };
    fs.setattr(&user, ino, &tr, None).unwrap();
    let perm = fs.getattr(ino).unwrap().perm;
    assert_eq!(perm, 0o767, "truncate: perm {perm:o}");
}
