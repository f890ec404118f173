//! A `File` or `ReadDir` keeps the file system alive after the last
//! `Filesystem` clone is dropped, works on, and the last one to close, on
//! any thread, lets the instance go (everything written back to its store).

use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::Arc;

use lanefs::{Filesystem, FsConfig, MemoryStoreConfig, OpenOptions, Store};

#[test]
fn files_and_listings_outlive_the_filesystem() {
    let fs = Filesystem::in_memory(MemoryStoreConfig::default(), FsConfig::default()).unwrap();
    let store = fs.memory_store().unwrap().clone();
    fs.create_dir("/d").unwrap();
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .open(&fs, "/d/a")
        .unwrap();
    let listing = fs.read_dir("/d").unwrap();
    let other = fs.with_umask(0o077);
    drop(fs);
    drop(other);
    assert!(Arc::strong_count(&store) > 1, "gone with a file open");
    f.write_all(b"kept").unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut back = String::new();
    f.read_to_string(&mut back).unwrap();
    assert_eq!(back, "kept");
    let names: Vec<_> = listing.map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["a"]);
    let ino = f.metadata().unwrap().ino();
    std::thread::spawn(move || drop(f)).join().unwrap();
    assert_eq!(
        Arc::strong_count(&store),
        1,
        "not released after the last close"
    );
    let mut page = [0u8; lanefs::PAGE_SIZE];
    assert!(store.read_page(ino, 0, &mut page).unwrap());
    assert_eq!(&page[..4], b"kept");
}
