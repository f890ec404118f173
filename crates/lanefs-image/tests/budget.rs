//! The store's memory budget (`ImageConfig::cache_bytes`): with many more
//! inodes than fit, the store holds about its budget, evicts and reads
//! objects back, and every inode, page and entry reads back identical, also
//! after reopening under the budget; a corrupted home of an evicted object
//! answers EIO for that object only.

mod common;

use std::sync::Arc;

use common::*;
use lanefs_image::{Device, Geometry, ImageConfig, ImageStore, MemDevice, BLOCK};
use lanefs_store::{DirEntryRecord, Errno, FileKind, Ino, InodeRecord, Store, PAGE_SIZE};

const BUDGET: u64 = 32 << 10;
/// Over the budget a store may hold when no call is under way and nothing
/// is unsaved: each of the 64 shards may keep one object beyond its share
/// (eviction stops once the shard is under it), and the files here take
/// well under 1 KiB each. (Each shard also keeps the object its latest call
/// used, whatever its size: `held_within_budget` makes that a small one.)
const SLACK: u64 = 64 << 10;

/// A number in `ino`'s cache shard (the store's shards are chosen by
/// `lanefs_store::ino_shard` over 64 shards), at least 64 past it: past
/// the few dozen numbers these tests use.
fn same_shard(ino: Ino) -> Ino {
    let shard = |n| lanefs_store::ino_shard(n, 6);
    (ino + 64..).find(|&n| shard(n) == shard(ino)).unwrap()
}

fn budget_cfg() -> ImageConfig {
    ImageConfig {
        commit_interval: None,
        cache_bytes: Some(BUDGET),
    }
}

fn entry(name: &str, ino: Ino) -> DirEntryRecord {
    DirEntryRecord {
        name: name.as_bytes().to_vec(),
        ino,
        kind: FileKind::Regular,
        cookie: ino + 3,
    }
}

struct Tree {
    dir: Ino,
    /// Record, whether it has a page, name in `dir`.
    files: Vec<(InodeRecord, bool, String)>,
}

/// A directory with `n` files in it; every seventh file has a page.
fn build(s: &ImageStore, n: usize) -> Tree {
    let dir = s.alloc_ino().unwrap();
    s.write_inode(&rec(dir, FileKind::Directory, 2, 0)).unwrap();
    let mut files = Vec::new();
    for k in 0..n {
        let ino = s.alloc_ino().unwrap();
        let paged = k % 7 == 0;
        let mut r = rec(
            ino,
            FileKind::Regular,
            1,
            if paged { 4096 } else { k as u64 },
        );
        r.blocks = paged as u64;
        if paged {
            s.write_page(ino, 0, &pattern(ino, 0)).unwrap();
        }
        s.write_inode(&r).unwrap();
        s.dir_insert(dir, &entry(&format!("f{k}"), ino)).unwrap();
        files.push((r, paged, format!("f{k}")));
    }
    Tree { dir, files }
}

fn verify(s: &ImageStore, t: &Tree) {
    let mut page = [0u8; PAGE_SIZE];
    for (r, paged, _) in &t.files {
        assert_eq!(s.read_inode(r.ino).unwrap().as_ref(), Some(r));
        assert_eq!(s.read_page(r.ino, 0, &mut page).unwrap(), *paged);
        if *paged {
            assert!(is_pattern(&page, r.ino, 0));
        }
    }
    let mut names: Vec<(Vec<u8>, Ino)> = s
        .dir_read(t.dir)
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.ino))
        .collect();
    names.sort();
    let mut want: Vec<(Vec<u8>, Ino)> = t
        .files
        .iter()
        .map(|(r, _, name)| (name.clone().into_bytes(), r.ino))
        .collect();
    want.sort();
    assert!(
        names == want,
        "{} entries read, {} expected",
        names.len(),
        want.len()
    );
    let mut live = s.list_inodes().unwrap();
    live.sort_unstable();
    let mut want: Vec<Ino> = t.files.iter().map(|(r, _, _)| r.ino).collect();
    want.push(t.dir);
    want.sort_unstable();
    assert!(live == want, "{} live, {} expected", live.len(), want.len());
}

/// The store holds at most its budget and the slack, once the directory
/// (2000 entries, bigger than the budget) is not the object its shard used
/// last.
fn held_within_budget(s: &ImageStore, t: &Tree, what: &str) {
    let _ = s.read_inode(same_shard(t.dir)).unwrap();
    let st = s.cache_stats();
    eprintln!("{what}: {st:?}");
    assert!(
        st.bytes <= BUDGET + SLACK,
        "{what}: {st:?} over {BUDGET} + {SLACK}"
    );
}

#[test]
fn many_inodes_stay_under_the_budget_and_read_back() {
    let dev = fresh(64 << 20);
    let n = 2000;
    let s = ImageStore::open_device(dev.clone(), &budget_cfg()).unwrap();
    let t = build(&s, n);
    let st = s.cache_stats();
    assert!(
        st.evictions > 0 && (st.objects as usize) < n / 2,
        "objects are evicted as they become clean: {st:?}"
    );
    s.checkpoint().unwrap();
    held_within_budget(&s, &t, "after the checkpoint");
    verify(&s, &t);
    let st = s.cache_stats();
    assert!(
        st.reads as usize >= n / 2,
        "evicted objects were read back: {st:?}"
    );
    held_within_budget(&s, &t, "after reading everything");
    // Changing evicted objects reads them back and keeps them until saved.
    let mut t = t;
    for (r, _, _) in t.files.iter_mut().step_by(3) {
        r.size += 1;
        s.write_inode(r).unwrap();
    }
    s.dir_remove(t.dir, b"f1").unwrap();
    s.free_ino(t.files[1].0.ino).unwrap();
    let gone = t.files.remove(1).0;
    s.sync().unwrap();
    verify(&s, &t);
    assert_eq!(s.read_inode(gone.ino).unwrap(), None);
    drop(s);
    // Reopened under the budget (streaming load), and unbounded.
    let s = ImageStore::open_device(dev.clone(), &budget_cfg()).unwrap();
    held_within_budget(&s, &t, "after open");
    verify(&s, &t);
    assert_eq!(s.read_inode(gone.ino).unwrap(), None);
    drop(s);
    let s = open(&dev);
    verify(&s, &t);
    let r = lanefs_image::fsck_device(dev.clone(), false).unwrap();
    assert!(r.store_clean(), "{r:#?}");
}

#[test]
fn replay_after_a_crash_reads_back_what_the_records_touch() {
    let dev = fresh(64 << 20);
    let s = ImageStore::open_device(dev.clone(), &budget_cfg()).unwrap();
    let mut t = build(&s, 600);
    s.checkpoint().unwrap();
    // Changes only in the journal, then a crash (no checkpoint at drop).
    for (r, _, _) in t.files.iter_mut().step_by(5) {
        r.size += 7;
        s.write_inode(r).unwrap();
    }
    s.dir_insert(t.dir, &entry("late", t.files[0].0.ino))
        .unwrap();
    s.sync().unwrap();
    let crashed = Arc::new(MemDevice::from_bytes(dev.snapshot()));
    drop(s);
    let s = ImageStore::open_device(crashed.clone(), &budget_cfg()).unwrap();
    assert!(s.recovery_report().records_replayed > 0);
    let late = s.dir_read(t.dir).unwrap();
    assert!(late.iter().any(|e| e.name == b"late"));
    s.dir_remove(t.dir, b"late").unwrap();
    verify(&s, &t);
    drop(s);
    let r = lanefs_image::fsck_device(crashed, false).unwrap();
    assert!(r.store_clean(), "{r:#?}");
}

/// An object bigger than its shard's share (a file of 2000 pages under a
/// 32 KiB budget) is not read back for every page of a sequential read.
#[test]
fn a_big_file_is_not_read_back_for_every_page() {
    let dev = fresh(32 << 20);
    let s = ImageStore::open_device(dev.clone(), &budget_cfg()).unwrap();
    let ino = s.alloc_ino().unwrap();
    let pages = 2000;
    for p in 0..pages {
        s.write_page(ino, p, &pattern(ino, p)).unwrap();
    }
    let mut r = rec(ino, FileKind::Regular, 1, pages * PAGE_SIZE as u64);
    r.blocks = pages;
    s.write_inode(&r).unwrap();
    s.checkpoint().unwrap();
    let before = s.cache_stats().reads;
    let mut page = [0u8; PAGE_SIZE];
    for p in 0..pages {
        assert!(s.read_page(ino, p, &mut page).unwrap());
        assert!(is_pattern(&page, ino, p));
    }
    let reads = s.cache_stats().reads - before;
    assert!(reads <= 1, "read back {reads} times");
}

/// A number freed and saved, evicted, then handed out again: its new
/// record continues the stamps of the freed one (read back from the free
/// slot), so a crash before the next checkpoint replays it.
#[test]
fn a_reused_number_read_back_from_a_free_slot_replays_after_a_crash() {
    let dev = fresh(16 << 20);
    let tiny = ImageConfig {
        commit_interval: None,
        cache_bytes: Some(1),
    };
    let s = ImageStore::open_device(dev.clone(), &tiny).unwrap();
    let ino = s.alloc_ino().unwrap();
    for size in 1..=3 {
        s.write_inode(&rec(ino, FileKind::Regular, 1, size))
            .unwrap();
    }
    s.checkpoint().unwrap();
    s.free_ino(ino).unwrap();
    s.checkpoint().unwrap();
    // A shard keeps the object its latest call used; use another.
    assert_eq!(s.read_inode(same_shard(ino)).unwrap(), None);
    assert_eq!(s.cache_stats().objects, 1, "{:?}", s.cache_stats());
    assert_eq!(s.alloc_ino().unwrap(), ino, "the lowest free number again");
    let again = rec(ino, FileKind::Regular, 1, 77);
    s.write_inode(&again).unwrap();
    s.sync().unwrap();
    let crashed = dev.snapshot();
    drop(s);
    for cfg in [tiny, cfg()] {
        let dev = Arc::new(MemDevice::from_bytes(crashed.clone()));
        let s = ImageStore::open_device(dev, &cfg).unwrap();
        assert!(s.recovery_report().records_replayed > 0);
        assert_eq!(s.recovery_report().records_dropped, 0);
        assert_eq!(s.read_inode(ino).unwrap(), Some(again.clone()));
    }
}

#[test]
fn a_corrupted_home_of_an_evicted_object_answers_eio_for_it_only() {
    let bytes = 16 << 20;
    let dev = fresh(bytes);
    let geo = Geometry::for_size((bytes / BLOCK) as u64).unwrap();
    let tiny = ImageConfig {
        commit_interval: None,
        cache_bytes: Some(1),
    };
    let s = ImageStore::open_device(dev.clone(), &tiny).unwrap();
    let t = build(&s, 40);
    s.checkpoint().unwrap();
    assert!(
        s.cache_stats().objects <= 64,
        "a budget of one byte keeps only the object each shard used last: {:?}",
        s.cache_stats()
    );
    let (victim, _, _) = &t.files[3];
    // Make another object of the victim's shard the last used: the victim
    // is evicted.
    assert_eq!(s.read_inode(same_shard(victim.ino)).unwrap(), None);
    let held = s.cache_stats().objects;
    // Flip a byte in the newest slot of the victim (its home).
    let slot = |k: usize| geo.slot_offset(victim.ino, k);
    let mut b = vec![0u8; 1024];
    dev.read_at(&mut b, slot(0)).unwrap();
    let stamp = |at: usize| u64::from_le_bytes(b[at + 16..at + 24].try_into().unwrap());
    let newest = if b[512..516] == *b"INOD" && stamp(512) > stamp(0) {
        1
    } else {
        0
    };
    let mut byte = [0u8];
    dev.read_at(&mut byte, slot(newest) + 100).unwrap();
    byte[0] ^= 0x40;
    dev.write_at(&byte, slot(newest) + 100).unwrap();
    assert_eq!(s.read_inode(victim.ino), Err(Errno::EIO));
    assert_eq!(s.cache_stats().objects, held + 1, "read back (bad)");
    let mut r = victim.clone();
    r.size = 1;
    assert_eq!(s.write_inode(&r), Err(Errno::EIO));
    assert_eq!(s.read_inode(victim.ino), Err(Errno::EIO), "stays bad");
    // Everything else is usable.
    for (k, (other, _, _)) in t.files.iter().enumerate() {
        if k != 3 {
            assert_eq!(s.read_inode(other.ino).unwrap().as_ref(), Some(other));
        }
    }
    let fresh_ino = s.alloc_ino().unwrap();
    s.write_inode(&rec(fresh_ino, FileKind::Regular, 1, 5))
        .unwrap();
    s.sync().unwrap();
    // A corrupted entry block of the evicted directory: EIO for it only.
    let mut head = vec![0u8; 1024];
    dev.read_at(&mut head, geo.slot_offset(t.dir, 0)).unwrap();
    let dir_img = |at: usize| -> (u64, Vec<u8>) {
        let st = u64::from_le_bytes(head[at + 16..at + 24].try_into().unwrap());
        (st, head[at + 40..at + 512].to_vec())
    };
    let (sa, ia) = dir_img(0);
    let (sb, ib) = dir_img(512);
    let img = if head[512..516] == *b"INOD" && sb > sa {
        ib
    } else {
        ia
    };
    // Image: record length, record, extent count (0), block count, blocks.
    let rl = u32::from_le_bytes(img[0..4].try_into().unwrap()) as usize;
    let at = 4 + rl + 4 + 4;
    let first = u64::from_le_bytes(img[at..at + 8].try_into().unwrap());
    dev.write_at(&[0xAB; 8], first * BLOCK as u64 + 200)
        .unwrap();
    s.checkpoint().unwrap();
    assert_eq!(
        s.read_inode(same_shard(t.dir)).unwrap(),
        None,
        "evicts the directory"
    );
    assert_eq!(s.dir_read(t.dir), Err(Errno::EIO));
    assert_eq!(
        s.read_inode(t.files[0].0.ino).unwrap().as_ref(),
        Some(&t.files[0].0)
    );
}
