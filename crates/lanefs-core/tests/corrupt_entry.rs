//! A directory entry to a free inode number (a corrupt store) is
//! `EUCLEAN` to a lookup and to an `O_CREAT` open of its name. Before, the
//! lookup answered `ENOENT`, so the open created the name, found it taken,
//! looked it up again, and so on forever — each round's new inode left to
//! an epoch collection that its own pinned guard held back (the unbounded
//! growth `tests/races.rs` met after a race had left such an entry).

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use lanefs_core::*;
use lanefs_store::{DirEntryRecord, Store};

#[test]
fn an_entry_to_a_free_number_is_euclean_not_an_endless_create() {
    let store = Arc::new(MemoryStore::default());
    let fs = Fs::new(store.clone(), FsConfig::default()).unwrap();
    let free = store.alloc_ino().unwrap();
    store.free_ino(free).unwrap();
    store
        .dir_insert(
            ROOT_INO,
            &DirEntryRecord {
                name: b"x".to_vec(),
                ino: free,
                kind: FileKind::Regular,
                cookie: 1000,
            },
        )
        .unwrap();
    let r = Cred::root();
    let files_free = fs.statfs().unwrap().files_free;
    let (tx, rx) = mpsc::channel();
    let opener = fs.clone();
    std::thread::spawn(move || {
        let flags = libc::O_CREAT | libc::O_RDWR;
        let got = opener
            .open_at(&Cred::root(), ROOT_INO, b"x", flags, 0o644, 0, false)
            .map(|(a, _, created)| (a.ino, created));
        let _ = tx.send(got);
    });
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("an O_CREAT open of the name never returned");
    assert_eq!(got.err(), Some(Errno::EUCLEAN));
    // Nothing was made: no inode is left taken.
    assert_eq!(fs.statfs().unwrap().files_free, files_free);
    assert_eq!(fs.lookup(&r, ROOT_INO, b"x").err(), Some(Errno::EUCLEAN));
}
