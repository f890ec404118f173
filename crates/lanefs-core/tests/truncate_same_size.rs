//! A truncate to the current size gives back what `fallocate(KEEP_SIZE)`
//! reserved past the end of the file, as Linux's tmpfs (`shmem_setattr`
//! truncates from the new size whenever the size does not grow) and ext4
//! do: `truncate -s $(stat -c %s f) f` is the usual way to drop such a
//! reservation. Until 2026-11 lanefs kept it (blocks and the capacity's
//! free count) until the file shrank below it or was freed; found through
//! a mount (`ftruncate(fd, size)` left `st_blocks` at 2048 where tmpfs gave
//! 24). An `open(O_TRUNC)` of an empty file is the same truncate, size 0
//! to 0. Growing keeps the reservation, as on Linux.

use std::sync::Arc;

use lanefs_core::*;

const SECTORS_PER_PAGE: u64 = PAGE_SIZE as u64 / 512;
const RESERVED: i64 = 1 << 20;

fn fs() -> Fs {
    let store = MemoryStore::new(MemoryStoreConfig {
        capacity_bytes: 64 << 20,
        max_inodes: 64,
    });
    Fs::new(Arc::new(store), FsConfig::default()).unwrap()
}

fn open(fs: &Fs, name: &[u8], flags: i32) -> OpenFile {
    fs.open_at(&Cred::root(), ROOT_INO, name, flags, 0o644, 0, false)
        .unwrap()
        .1
}

fn truncate(fs: &Fs, f: &OpenFile, size: u64) {
    let ch = SetAttr {
        size: Some(size),
        ..Default::default()
    };
    fs.setattr(&Cred::root(), f.ino(), &ch, Some(f)).unwrap();
}

/// (size, pages counted in `st_blocks`, pages in use by the whole fs).
fn usage(fs: &Fs, f: &OpenFile, free0: u64) -> (u64, u64, u64) {
    let a = fs.getattr(f.ino()).unwrap();
    let used = free0 - fs.statfs().unwrap().blocks_free;
    (a.size, a.blocks / SECTORS_PER_PAGE, used)
}

#[test]
fn truncate_to_the_same_size_frees_the_reservation_past_the_end() {
    for shrink in [false, true] {
        let fs = fs();
        let free0 = fs.statfs().unwrap().blocks_free;
        let f = open(&fs, b"f", libc::O_CREAT | libc::O_RDWR);
        fs.write(&f, 0, &[7u8; 10_000]).unwrap();
        fs.fallocate(&f, FALLOC_FL_KEEP_SIZE, 0, RESERVED).unwrap();
        let reserved = RESERVED as u64 / PAGE_SIZE as u64;
        assert_eq!(usage(&fs, &f, free0), (10_000, reserved, reserved));
        if shrink {
            // Everything read back from the store (extents learnt anew).
            fs.fsync(&f, false).unwrap();
            fs.shrink();
        }
        truncate(&fs, &f, 10_000);
        assert_eq!(
            usage(&fs, &f, free0),
            (10_000, 3, 3),
            "the pages past the end went (shrink first: {shrink})"
        );
        let mut buf = vec![0u8; 10_001];
        assert_eq!(fs.read(&f, 0, &mut buf).unwrap(), 10_000);
        assert!(buf[..10_000].iter().all(|b| *b == 7), "data kept");
        fs.check().unwrap();
    }
}

#[test]
fn o_trunc_of_an_empty_file_frees_its_reservation() {
    let fs = fs();
    let free0 = fs.statfs().unwrap().blocks_free;
    let f = open(&fs, b"e", libc::O_CREAT | libc::O_RDWR);
    fs.fallocate(&f, FALLOC_FL_KEEP_SIZE, 0, RESERVED).unwrap();
    assert_eq!(usage(&fs, &f, free0).1, RESERVED as u64 / PAGE_SIZE as u64);
    let g = open(&fs, b"e", libc::O_RDWR | libc::O_TRUNC);
    assert_eq!(usage(&fs, &g, free0), (0, 0, 0));
    fs.check().unwrap();
}

#[test]
fn growing_keeps_the_reservation_past_the_end() {
    let fs = fs();
    let free0 = fs.statfs().unwrap().blocks_free;
    let f = open(&fs, b"g", libc::O_CREAT | libc::O_RDWR);
    fs.write(&f, 0, &[1u8; 100]).unwrap();
    fs.fallocate(&f, FALLOC_FL_KEEP_SIZE, 0, RESERVED).unwrap();
    let reserved = RESERVED as u64 / PAGE_SIZE as u64;
    truncate(&fs, &f, 20_000);
    assert_eq!(usage(&fs, &f, free0), (20_000, reserved, reserved));
    // A file without a reservation: a same-size truncate frees nothing.
    let h = open(&fs, b"h", libc::O_CREAT | libc::O_RDWR);
    fs.write(&h, 0, &[2u8; 5000]).unwrap();
    truncate(&fs, &h, 5000);
    assert_eq!(usage(&fs, &h, free0 - reserved), (5000, 2, 2));
    fs.check().unwrap();
}

/// A `truncate(2)` (no handle, no time asked for) to the size a file with
/// nothing allocated has changes no time, as on tmpfs and ext4; through a
/// handle (`ftruncate(2)`) the times move, and by path they move where
/// pages are allocated (tmpfs frees from the end then, `shmem_setattr`).
/// Until 2026-11 every truncate moved them.
#[test]
fn truncate_by_path_to_the_same_size_of_an_unallocated_file_moves_no_time() {
    let fs = fs();
    let times = |f: &OpenFile| {
        let a = fs.getattr(f.ino()).unwrap();
        (a.mtime, a.ctime)
    };
    let by_path = |f: &OpenFile, size: u64| {
        let ch = SetAttr {
            size: Some(size),
            ..Default::default()
        };
        fs.setattr(&Cred::root(), f.ino(), &ch, None).unwrap();
    };
    let pause = || std::thread::sleep(std::time::Duration::from_millis(2));
    for (name, size) in [(&b"empty"[..], 0u64), (b"sparse", 100_000)] {
        let f = open(&fs, name, libc::O_CREAT | libc::O_RDWR);
        truncate(&fs, &f, size);
        let t0 = times(&f);
        pause();
        by_path(&f, size);
        assert_eq!(times(&f), t0, "{name:?}: truncate(2) to its size");
        truncate(&fs, &f, size);
        let t1 = times(&f);
        assert!(t1.0 > t0.0 && t1.1 > t0.1, "{name:?}: ftruncate moves both");
    }
    let f = open(&fs, b"data", libc::O_CREAT | libc::O_RDWR);
    fs.write(&f, 0, b"0123456789").unwrap();
    let t0 = times(&f);
    pause();
    by_path(&f, 10);
    let t1 = times(&f);
    assert!(
        t1.0 > t0.0 && t1.1 > t0.1,
        "allocated: truncate(2) moves both"
    );
    // Growing and shrinking by path move both, allocated or not.
    let g = open(&fs, b"grow", libc::O_CREAT | libc::O_RDWR);
    let t0 = times(&g);
    pause();
    by_path(&g, 5);
    let t1 = times(&g);
    assert!(t1.0 > t0.0 && t1.1 > t0.1, "growing by path moves both");
    pause();
    by_path(&g, 0);
    let t2 = times(&g);
    assert!(t2.0 > t1.0 && t2.1 > t1.1, "shrinking by path moves both");
    fs.check().unwrap();
}
