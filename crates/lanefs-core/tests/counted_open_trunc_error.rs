//! A counted open (FUSE CREATE) of an existing file with `O_TRUNC` whose
//! truncate fails gives no lookup reference: the caller gets the error
//! and never learns the entry, so it has nothing to forget. Before, the
//! open counted the lookup before it truncated, and the failed truncate
//! left that count behind: once unlinked, the file lived on as an orphan
//! with a lookup nobody held, until unmount.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

mod common;

use common::{Call, HookedStore};
use lanefs_core::{Cred, Errno, Fs, FsConfig, ROOT_INO};

#[test]
fn a_failed_o_trunc_of_a_counted_open_leaves_no_lookup() {
    let fail = Arc::new(AtomicBool::new(false));
    let store = {
        let fail = fail.clone();
        HookedStore::new(move |call| {
            if call == Call::Punch && fail.load(Ordering::Relaxed) {
                return Err(Errno::EIO);
            }
            Ok(())
        })
    };
    let fs = Fs::new(Arc::new(store), FsConfig::default()).unwrap();
    let r = Cred::root();
    let (a, f) = common::create_rw(&fs, b"f");
    fs.write(&f, 0, &[7u8; 10_000]).unwrap();
    drop(f);
    // The pages go to the store: a truncate must punch them there.
    fs.sync().unwrap();
    fail.store(true, Ordering::Relaxed);
    let flags = libc::O_CREAT | libc::O_RDWR | libc::O_TRUNC;
    let opened = fs.open_at(&r, ROOT_INO, b"f", flags, 0o644, 0, true);
    assert_eq!(opened.err(), Some(Errno::EIO), "the truncate failed");
    fail.store(false, Ordering::Relaxed);
    fs.unlink(&r, ROOT_INO, b"f").unwrap();
    // Nothing holds it: freed with its last link.
    assert_eq!(
        fs.getattr(a.ino).err(),
        Some(Errno::ENOENT),
        "a lookup was left"
    );
    if let Err(bad) = fs.check() {
        panic!("{bad:?}");
    }
}
