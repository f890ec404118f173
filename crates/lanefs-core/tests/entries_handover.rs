//! On the memory store (a volatile store) a directory's entries live in one
//! place at a time: the engine's index while it is loaded, the store while
//! not (`Store::volatile`, `Store::dir_take`, `Store::dir_put_all`). Before,
//! the store kept a second copy of every entry, written by a store call on
//! every create, unlink and rename. Checked here: the copy is gone while
//! the index is loaded, the entries go back to the store when the index is
//! dropped (exactly: removed names too) and come back from it, and a store
//! mounted again holds every entry (and no inode that was unlinked while
//! still looked up: the unmount freed it).

use std::sync::Arc;

use lanefs_core::*;
use lanefs_store::MemoryStore;

#[allow(dead_code)] // this binary uses only `names_in_store`
mod common;
use common::names_in_store;

fn name(i: usize) -> Vec<u8> {
    format!("f{i:03}").into_bytes()
}

#[test]
fn a_loaded_directory_keeps_its_entries_in_its_index_only() {
    let store = Arc::new(MemoryStore::default());
    let fs = Fs::new(store.clone(), FsConfig::default()).unwrap();
    let r = Cred::root();
    let d = fs.mkdir(&r, ROOT_INO, b"d", 0o755, 0).unwrap().ino;
    for i in 0..100 {
        let f = fs.mknod(&r, d, &name(i), 0o644, 0, 0).unwrap();
        fs.forget(f.ino, 1);
    }
    for i in (0..100).step_by(2) {
        fs.unlink(&r, d, &name(i)).unwrap();
    }
    fs.rename(&r, d, &name(1), d, b"moved", 0).unwrap();
    assert!(names_in_store(&*store, d).is_empty(), "a second copy");

    // Dropped (the directory is unreferenced): the store gets exactly the
    // entries the index had.
    fs.forget(d, 1);
    fs.shrink();
    let mut want: Vec<Vec<u8>> = (3..100).step_by(2).map(name).collect();
    want.push(b"moved".to_vec());
    want.sort();
    assert_eq!(names_in_store(&*store, d), want);

    // Loaded again: every name is there, and the store's copy is gone.
    for n in &want {
        fs.lookup(&r, d, n).unwrap();
    }
    assert_eq!(fs.lookup(&r, d, &name(0)), Err(Errno::ENOENT));
    assert!(
        names_in_store(&*store, d).is_empty(),
        "a second copy after reload"
    );
    fs.check().unwrap();
}

#[test]
fn a_memory_store_mounted_again_holds_every_entry() {
    let store = Arc::new(MemoryStore::default());
    let r = Cred::root();
    let d = {
        let fs = Fs::new(store.clone(), FsConfig::default()).unwrap();
        let d = fs.mkdir(&r, ROOT_INO, b"d", 0o755, 0).unwrap().ino;
        for i in 0..20 {
            let f = fs.mknod(&r, d, &name(i), 0o644, 0, 0).unwrap();
            // One left looked up: unlinked below, it is freed at unmount.
            if i != 0 {
                fs.forget(f.ino, 1);
            }
        }
        fs.unlink(&r, d, &name(0)).unwrap();
        d
    };
    let fs = Fs::new(store.clone(), FsConfig::default()).unwrap();
    assert_eq!(fs.lookup(&r, ROOT_INO, b"d").unwrap().ino, d);
    for i in 1..20 {
        fs.lookup(&r, d, &name(i)).unwrap();
    }
    assert_eq!(fs.lookup(&r, d, &name(0)), Err(Errno::ENOENT));
    fs.check().unwrap();
}
