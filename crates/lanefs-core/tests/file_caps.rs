//! File capabilities (`security.capability`) are removed as Linux removes
//! them: by any data change (write, truncate — even to the same size —
//! `O_TRUNC`, fallocate), whoever the writer is, and by chown/chgrp of a
//! non-directory; never by a write of zero bytes or by a read.

use lanefs_core::*;

const CAPS: &[u8] = b"security.capability";
const CREAT: i32 = libc::O_CREAT | libc::O_RDWR;

/// A VFS_CAP_REVISION_2 blob (`struct vfs_cap_data`): magic_etc
/// 0x02000001 (revision 2, effective bit) little-endian, then
/// permitted/inheritable pairs; permitted = CAP_NET_BIND_SERVICE (bit 10).
fn cap_blob() -> Vec<u8> {
    let mut v = Vec::with_capacity(20);
    v.extend_from_slice(&0x0200_0001u32.to_le_bytes());
    v.extend_from_slice(&(1u32 << 10).to_le_bytes()); // permitted, low
    v.extend_from_slice(&0u32.to_le_bytes()); // inheritable, low
    v.extend_from_slice(&0u32.to_le_bytes()); // permitted, high
    v.extend_from_slice(&0u32.to_le_bytes()); // inheritable, high
    v
}

/// A file `name` in the root directory with 20 bytes of data, owned by
/// uid 1000, with a capability and a user attribute set by root.
fn capable_file(fs: &Fs, name: &[u8]) -> OpenFile {
    let root = Cred::root();
    let (a, f, _) = fs
        .open_at(&root, ROOT_INO, name, CREAT, 0o755, 0, false)
        .unwrap();
    fs.write(&f, 0, &[7u8; 20]).unwrap();
    let owner = SetAttr {
        uid: Some(1000),
        gid: Some(1000),
        ..Default::default()
    };
    fs.setattr(&root, a.ino, &owner, None).unwrap();
    fs.setxattr(&root, a.ino, CAPS, &cap_blob(), 0).unwrap();
    fs.setxattr(&root, a.ino, b"user.keep", b"v", 0).unwrap();
    assert_eq!(fs.getxattr(&root, a.ino, CAPS).unwrap(), cap_blob());
    f
}

fn has_caps(fs: &Fs, ino: Ino) -> bool {
    match fs.getxattr(&Cred::root(), ino, CAPS) {
        Ok(v) => {
            assert_eq!(v, cap_blob());
            true
        }
        Err(e) => {
            assert_eq!(e, Errno::ENODATA);
            false
        }
    }
}

fn user_attr_kept(fs: &Fs, ino: Ino) {
    assert_eq!(fs.getxattr(&Cred::root(), ino, b"user.keep").unwrap(), b"v");
}

#[test]
fn root_write_removes_capability_zero_length_write_keeps_it() {
    let fs = Fs::new_in_memory();
    let f = capable_file(&fs, b"w");
    let ino = f.ino();
    assert_eq!(fs.write(&f, 0, b"").unwrap().0, 0);
    let mut buf = [0u8; 8];
    fs.read(&f, 0, &mut buf).unwrap();
    assert!(has_caps(&fs, ino), "no data change: capability stays");
    let ctime = fs.getattr(ino).unwrap().ctime;
    fs.write(&f, 3, b"x").unwrap();
    assert!(!has_caps(&fs, ino), "root's write removes it");
    user_attr_kept(&fs, ino);
    assert!(fs.getattr(ino).unwrap().ctime >= ctime);
}

#[test]
fn owner_write_removes_capability() {
    let fs = Fs::new_in_memory();
    let _setup = capable_file(&fs, b"w");
    let ino = fs.lookup(&Cred::root(), ROOT_INO, b"w").unwrap().ino;
    let alice = Cred::user(1000, 1000);
    let f = fs.open(&alice, ino, libc::O_WRONLY).unwrap();
    fs.write(&f, 0, b"y").unwrap();
    assert!(!has_caps(&fs, ino));
    user_attr_kept(&fs, ino);
}

#[test]
fn truncate_removes_capability_even_to_the_same_size() {
    let fs = Fs::new_in_memory();
    let f = capable_file(&fs, b"t");
    let ino = f.ino();
    let same = SetAttr {
        size: Some(20),
        ..Default::default()
    };
    fs.setattr(&Cred::root(), ino, &same, Some(&f)).unwrap();
    assert_eq!(fs.getattr(ino).unwrap().size, 20);
    assert!(!has_caps(&fs, ino), "do_truncate kills privileges always");
    user_attr_kept(&fs, ino);
}

#[test]
fn open_with_o_trunc_removes_capability() {
    let fs = Fs::new_in_memory();
    let _setup = capable_file(&fs, b"o");
    let ino = _setup.ino();
    let g = fs
        .open(&Cred::root(), ino, libc::O_WRONLY | libc::O_TRUNC)
        .unwrap();
    assert_eq!(fs.getattr(g.ino()).unwrap().size, 0);
    assert!(!has_caps(&fs, ino));
    let plain = capable_file(&fs, b"p");
    let h = fs.open(&Cred::root(), plain.ino(), libc::O_RDWR).unwrap();
    drop(h);
    assert!(
        has_caps(&fs, plain.ino()),
        "an open without O_TRUNC keeps it"
    );
}

#[test]
fn fallocate_removes_capability() {
    let fs = Fs::new_in_memory();
    let f = capable_file(&fs, b"a");
    fs.fallocate(&f, 0, 0, 8192).unwrap();
    assert!(!has_caps(&fs, f.ino()));
}

#[test]
fn chown_and_chgrp_remove_capability_chmod_and_utimes_keep_it() {
    let fs = Fs::new_in_memory();
    let root = Cred::root();
    let f = capable_file(&fs, b"c");
    let ino = f.ino();
    let chmod = SetAttr {
        mode: Some(0o750),
        atime: Some(TimeSet::Now),
        mtime: Some(TimeSet::Now),
        ..Default::default()
    };
    fs.setattr(&root, ino, &chmod, None).unwrap();
    assert!(
        has_caps(&fs, ino),
        "chmod and utimes do not kill privileges"
    );
    let chown_same = SetAttr {
        uid: Some(1000),
        ..Default::default()
    };
    fs.setattr(&root, ino, &chown_same, None).unwrap();
    assert!(
        !has_caps(&fs, ino),
        "chown to the same owner still kills it"
    );
    user_attr_kept(&fs, ino);

    let g = capable_file(&fs, b"g");
    let alice = Cred::user(1000, 1000);
    let chgrp = SetAttr {
        gid: Some(1000),
        ..Default::default()
    };
    fs.setattr(&alice, g.ino(), &chgrp, None).unwrap();
    assert!(!has_caps(&fs, g.ino()), "the owner's chgrp kills it");
}

#[test]
fn chown_of_a_directory_keeps_its_security_attribute() {
    let fs = Fs::new_in_memory();
    let root = Cred::root();
    let d = fs.mkdir(&root, ROOT_INO, b"d", 0o755, 0).unwrap();
    fs.setxattr(&root, d.ino, CAPS, &cap_blob(), 0).unwrap();
    let chown = SetAttr {
        uid: Some(1000),
        ..Default::default()
    };
    fs.setattr(&root, d.ino, &chown, None).unwrap();
    assert!(
        has_caps(&fs, d.ino),
        "chown_common adds no ATTR_KILL_PRIV on a directory"
    );
}
