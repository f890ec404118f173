use lanefs_store::MemoryStore;

use super::*;
use crate::pcache::read::{LockedRead, LocklessRead};

const INO: Ino = 9;

fn write(f: &FileData, s: &MemoryStore, off: u64, data: &[u8]) -> u64 {
    let mut pm = f.write();
    let holes = pm
        .prepare(s, INO, page_range(off, data.len() as u64))
        .unwrap();
    pm.write(off, data, Timespec::default());
    holes
}

fn read(f: &FileData, s: &MemoryStore, off: u64, len: usize) -> (Vec<u8>, usize) {
    let mut buf = vec![0xEEu8; len];
    let (n, loaded) = LocklessRead.read(f, s, INO, off, &mut buf);
    buf.truncate(n.unwrap());
    let mut locked = vec![0xDDu8; len];
    let (m, _) = LockedRead.read(f, s, INO, off, &mut locked);
    locked.truncate(m.unwrap());
    assert_eq!(buf, locked, "both designs read the same bytes");
    (buf, loaded)
}

#[test]
fn write_read_holes_and_store_roundtrip() {
    let s = MemoryStore::default();
    let f = FileData::new(0, true);
    assert_eq!(write(&f, &s, 5000, b"hello"), 1);
    assert_eq!(write(&f, &s, 5002, b"XY"), 0, "same page: no new block");
    assert_eq!(f.write().cache_only(), 1);
    let (buf, loaded) = read(&f, &s, 0, 6000);
    assert_eq!(loaded, 0, "a new file's missing page is a cached hole");
    assert_eq!(buf.len(), 5005);
    assert!(buf[..5000].iter().all(|b| *b == 0));
    assert_eq!(&buf[5000..5005], b"heXYo");
    {
        let mut pm = f.write();
        pm.flush(&s, INO).unwrap();
        assert_eq!(pm.drop_clean(), 1);
    }
    let (small, loaded) = read(&f, &s, 5000, 5);
    assert_eq!(loaded, 1, "dropped page comes back from the store");
    assert_eq!(&small, b"heXYo");
    let (_, loaded) = read(&f, &s, 0, 10);
    assert_eq!(loaded, 0, "all store pages cached again: page 0 is a hole");
}

#[test]
fn reloaded_file_learns_its_holes() {
    let s = MemoryStore::default();
    let f = FileData::new(0, true);
    write(&f, &s, 3 * PAGE, &[5; 10]);
    f.write().flush(&s, INO).unwrap();
    let g = FileData::new(3 * PAGE + 10, false);
    let mut buf = [1u8; 10];
    let (n, loaded) = LocklessRead.read(&g, &s, INO, 0, &mut buf);
    assert_eq!(
        (n.unwrap(), loaded),
        (10, 0),
        "page 0 is a hole in the store"
    );
    assert_eq!(buf, [0; 10]);
    assert!(
        !g.all_cached.load(Ordering::Relaxed),
        "page 3 not cached yet"
    );
    let (n, loaded) = LocklessRead.read(&g, &s, INO, 3 * PAGE, &mut buf);
    assert_eq!((n.unwrap(), loaded), (10, 1));
    assert_eq!(buf, [5; 10]);
    assert!(g.all_cached.load(Ordering::Relaxed));
}

#[test]
fn truncate_and_punch_count_freed_pages_once() {
    let s = MemoryStore::default();
    let f = FileData::new(0, true);
    write(&f, &s, 0, &[7u8; 3 * PAGE_SIZE]);
    f.write().flush(&s, INO).unwrap();
    write(&f, &s, 3 * PAGE, &[8u8; 10]);
    assert_eq!(
        f.write()
            .truncate(
                &s,
                INO,
                PAGE + 1,
                Some((Timespec::default(), Timespec::default()))
            )
            .unwrap(),
        2,
        "pages 2 (store) and 3 (cache)"
    );
    let (buf, _) = read(&f, &s, PAGE - 5, 10);
    assert_eq!(buf, [7, 7, 7, 7, 7, 7]);
    f.write()
        .truncate(
            &s,
            INO,
            3 * PAGE,
            Some((Timespec::default(), Timespec::default())),
        )
        .unwrap();
    let (tail, _) = read(&f, &s, PAGE + 1, 4);
    assert_eq!(tail, [0; 4], "truncate zeroed the tail of the last page");
    let freed = f.write().punch(&s, INO, 10, 2 * PAGE).unwrap();
    assert_eq!(freed, 1, "page 1 wholly inside the punched range");
    let (head, _) = read(&f, &s, 0, 12);
    assert_eq!(head[..10], [7; 10]);
    assert_eq!(head[10..], [0; 2]);
}

#[test]
fn allocation_by_range_costs_no_pages() {
    let s = MemoryStore::default();
    let f = FileData::new(0, true);
    write(&f, &s, 2 * PAGE, b"data");
    let huge = 0..(1u64 << 51);
    let mut pm = f.write();
    assert_eq!(
        pm.holes(&s, INO, huge.clone(), u64::MAX).unwrap(),
        (1 << 51) - 1
    );
    pm.allocate(0..1 << 40, None);
    assert_eq!(pm.cached_pages(), 1, "no page materialised");
    assert_eq!(
        pm.holes(&s, INO, huge.clone(), u64::MAX).unwrap(),
        (1 << 51) - (1 << 40)
    );
    assert_eq!(pm.prepare(&s, INO, 5..7).unwrap(), 0, "extent pages");
    pm.flush(&s, INO).unwrap();
    assert_eq!(s.allocated_pages(INO).unwrap(), 1 << 40);
    assert_eq!(pm.punch(&s, INO, 0, 1 << 52).unwrap(), 1 << 40);
    assert_eq!(pm.cached_pages(), 0);
    pm.flush(&s, INO).unwrap();
    assert_eq!(s.allocated_pages(INO).unwrap(), 0);
    assert!(s.read_unwritten(INO).unwrap().is_empty());
}

#[test]
fn zero_range_keeps_blocks_and_zeroes_data() {
    let s = MemoryStore::default();
    let f = FileData::new(0, true);
    write(&f, &s, 0, &[3u8; 4 * PAGE_SIZE]);
    f.write().flush(&s, INO).unwrap();
    let mut pm = f.write();
    assert_eq!(
        pm.holes(&s, INO, page_range(100, 6 * PAGE), u64::MAX)
            .unwrap(),
        3
    );
    pm.zero_range(&s, INO, 100, 6 * PAGE, Some(100 + 6 * PAGE))
        .unwrap();
    assert_eq!(pm.size(), 100 + 6 * PAGE);
    pm.flush(&s, INO).unwrap();
    assert_eq!(s.allocated_pages(INO).unwrap(), 7);
    drop(pm);
    let (buf, _) = read(&f, &s, 0, 8 * PAGE_SIZE);
    assert_eq!(buf.len() as u64, 100 + 6 * PAGE);
    assert!(buf[..100].iter().all(|b| *b == 3));
    assert!(buf[100..].iter().all(|b| *b == 0));
}
