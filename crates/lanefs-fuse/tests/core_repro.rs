//! Reproducers for engine behaviour seen through the mount (run with
//! `cargo test -p lanefs-fuse --test core_repro`).

use lanefs_core::{Cred, Fs, SetAttr};

fn file_with_mode(fs: &Fs, name: &[u8], perm: u32) -> u64 {
    let root = Cred::root();
    let a = fs.mknod(&root, 1, name, libc::S_IFREG | 0o644, 0, 0).unwrap();
    let ch = SetAttr {
        mode: Some(perm),
        ..Default::default()
    };
    assert_eq!(fs.setattr(&root, a.ino, &ch, None).unwrap().perm as u32, perm);
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
