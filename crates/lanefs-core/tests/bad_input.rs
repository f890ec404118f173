//! The core API refuses what the kernel and glibc refuse before they look
//! at a file: times with `nsec` of 10⁹ or more (`utimensat`), `access`
//! masks with bits other than read/write/execute (`faccessat`), and device
//! numbers that do not fit the kernel's 32 bits (glibc's `mknod`). Each
//! refusal changes nothing.

use std::sync::Arc;

use lanefs_core::*;

fn fresh() -> Fs {
    Fs::new(Arc::new(MemoryStore::default()), FsConfig::default()).unwrap()
}

#[test]
fn times_with_a_second_or_more_of_nanoseconds_are_einval() {
    let fs = fresh();
    let root = Cred::root();
    let a = fs
        .mknod(&root, ROOT_INO, b"f", libc::S_IFREG | 0o644, 0, 0)
        .unwrap();
    let bad = Timespec {
        sec: 5,
        nsec: 1_000_000_000,
    };
    for ch in [
        SetAttr {
            atime: Some(TimeSet::At(bad)),
            ..SetAttr::default()
        },
        SetAttr {
            mtime: Some(TimeSet::At(bad)),
            ..SetAttr::default()
        },
        SetAttr {
            ctime: Some(bad),
            ..SetAttr::default()
        },
        SetAttr {
            mode: Some(0o600),
            mtime: Some(TimeSet::At(Timespec {
                sec: 1,
                nsec: u32::MAX,
            })),
            ..SetAttr::default()
        },
    ] {
        assert_eq!(
            fs.setattr(&root, a.ino, &ch, None),
            Err(Errno::EINVAL),
            "{ch:?}"
        );
    }
    assert_eq!(
        fs.getattr(a.ino).unwrap(),
        a,
        "a refused setattr changes nothing"
    );
    let good = Timespec {
        sec: 5,
        nsec: 999_999_999,
    };
    let ch = SetAttr {
        mtime: Some(TimeSet::At(good)),
        ..SetAttr::default()
    };
    assert_eq!(fs.setattr(&root, a.ino, &ch, None).unwrap().mtime, good);
}

#[test]
fn access_masks_beyond_rwx_are_einval() {
    let fs = fresh();
    let root = Cred::root();
    for mask in [0, MAY_READ, MAY_READ | MAY_WRITE | MAY_EXEC] {
        assert_eq!(fs.access(&root, ROOT_INO, mask), Ok(()), "{mask:#o}");
    }
    for mask in [8, 0o10 | MAY_READ, u32::MAX] {
        assert_eq!(
            fs.access(&root, ROOT_INO, mask),
            Err(Errno::EINVAL),
            "{mask:#o}"
        );
    }
}

#[test]
fn device_numbers_past_32_bits_are_einval() {
    let fs = fresh();
    let root = Cred::root();
    let far = u64::from(u32::MAX) + 1;
    for mode in [
        libc::S_IFCHR | 0o600,
        libc::S_IFBLK | 0o600,
        libc::S_IFIFO | 0o600,
    ] {
        assert_eq!(
            fs.mknod(&root, ROOT_INO, b"dev", mode, 0, far),
            Err(Errno::EINVAL),
            "{mode:#o}"
        );
        assert_eq!(fs.lookup(&root, ROOT_INO, b"dev"), Err(Errno::ENOENT));
    }
    let a = fs
        .mknod(
            &root,
            ROOT_INO,
            b"dev",
            libc::S_IFCHR | 0o600,
            0,
            u64::from(u32::MAX),
        )
        .unwrap();
    assert_eq!(a.rdev, u64::from(u32::MAX));
}
