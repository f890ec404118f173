//! A store without unwritten-extent records (the `Store` defaults, as a
//! store written before them): `fallocate` still counts blocks exactly —
//! writeback turns the extents into zero pages in the store.

use std::sync::Arc;

use lanefs_core::*;

mod common;
use common::HookedStore;

#[test]
fn extents_become_zero_pages_on_a_store_without_extent_records() {
    let fs = Fs::new(Arc::new(HookedStore::new(|_| Ok(()))), FsConfig::default()).unwrap();
    let r = Cred::root();
    let flags = libc::O_CREAT | libc::O_RDWR;
    let (_, f, _) = fs
        .open_at(&r, ROOT_INO, b"f", flags, 0o644, 0, false)
        .unwrap();
    fs.write(&f, 1, b"x").unwrap();
    fs.fallocate(&f, 0, 0, 40 * PAGE_SIZE as i64).unwrap();
    fs.fsync(&f, false).unwrap();
    fs.check().unwrap();
    fs.shrink();
    let mut buf = [9u8; 3];
    fs.read(&f, 0, &mut buf).unwrap();
    assert_eq!(buf, [0, b'x', 0]);
    fs.fallocate(&f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 8192)
        .unwrap();
    assert_eq!(fs.getattr(f.ino()).unwrap().blocks, 38 * 8);
    // Pages not all cached (after a shrink), huge ranges: answered from
    // counts of what exists, never by walking the range (these hung with a
    // range count over the store's default `count_pages`).
    fs.fsync(&f, false).unwrap();
    fs.shrink();
    let huge = FILE_SIZE_MAX as i64;
    assert_eq!(
        fs.fallocate(&f, FALLOC_FL_KEEP_SIZE, 0, huge),
        Err(Errno::ENOSPC)
    );
    fs.fallocate(
        &f,
        FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
        3 * 4096,
        huge - 3 * 4096,
    )
    .unwrap();
    assert_eq!(fs.getattr(f.ino()).unwrap().blocks, 8);
    fs.shrink();
    let to = SetAttr {
        size: Some(1),
        ..Default::default()
    };
    fs.setattr(&r, f.ino(), &to, Some(&f)).unwrap();
    assert_eq!(fs.getattr(f.ino()).unwrap().blocks, 0);
    drop(f);
    fs.check().unwrap();
}
