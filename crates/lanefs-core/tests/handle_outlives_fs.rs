//! An open handle keeps the engine alive after the last `Fs` is dropped
//! (handles count per lane, `handles.rs`), and the last close, on any
//! thread, releases it: the engine writes back and lets go of its store.

use std::sync::Arc;

#[allow(dead_code)] // this binary uses only `create_rw`
mod common;

use common::create_rw;
use lanefs_core::{Fs, FsConfig, MemoryStore, Store};

#[test]
fn the_last_close_after_the_last_fs_releases_the_engine() {
    let store = Arc::new(MemoryStore::default());
    let fs = Fs::new(store.clone(), FsConfig::default()).unwrap();
    let (attr, f) = create_rw(&fs, b"f");
    fs.write(&f, 0, b"kept").unwrap();
    let g = f.reopen_unchecked(libc::O_RDONLY).unwrap();
    let clone = fs.clone();
    drop(fs);
    drop(clone);
    assert!(
        Arc::strong_count(&store) > 1,
        "the engine went while two handles were open"
    );
    // One handle closed here, the other on another thread (another lane).
    drop(f);
    assert!(Arc::strong_count(&store) > 1, "released with a handle open");
    std::thread::spawn(move || drop(g)).join().unwrap();
    assert_eq!(
        Arc::strong_count(&store),
        1,
        "the engine still holds its store after the last close"
    );
    // Written back when it went.
    let mut page = [0u8; lanefs_core::PAGE_SIZE];
    assert!(store.read_page(attr.ino, 0, &mut page).unwrap());
    assert_eq!(&page[..4], b"kept");
}

#[test]
fn without_handles_the_engine_goes_with_the_last_fs() {
    let store = Arc::new(MemoryStore::default());
    let fs = Fs::new(store.clone(), FsConfig::default()).unwrap();
    let (_, f) = create_rw(&fs, b"f");
    drop(f);
    drop(fs);
    assert_eq!(Arc::strong_count(&store), 1);
}
