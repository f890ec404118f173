//! Recovery of hand-made journals: format 1 images open (and become
//! format 3), and the last batch of a format 2 journal is replayed only if
//! the pages it maps landed (only the last of several is checked). Replay
//! streams the journal: a long journal is replayed holding a few batches'
//! records; a record waiting for a predecessor in a later batch applies
//! once it comes, one whose predecessor never comes is dropped, and invalid
//! records (an object out of range, a pair a record before carries) never
//! apply. High-water marks: they cover what is written; a format 2 image
//! (no marks) is read whole and gets them; slots above a mark are an fsck
//! problem that repair fixes; an unsound superblock copy makes open read
//! every table.

use std::sync::Arc;

use lanefs_store::{DirEntryRecord, FileKind, InodeRecord, Store, Timespec, Txn, TxnOp};

use super::*;
use crate::device::MemDevice;
use crate::journal::{encode_batch, BATCH_RECORDS};
use crate::layout::FORMAT_VERSION_MIN;

const INO: Ino = 2;

fn file_record() -> Vec<u8> {
    InodeRecord {
        ino: INO,
        generation: 1,
        kind: FileKind::Regular,
        perm: 0o644,
        nlink: 1,
        size: BLOCK as u64,
        blocks: 1,
        ..InodeRecord::default()
    }
    .encode()
}

/// A fresh image whose newest superblock says `version` and whose journal
/// holds one batch: page 0 of inode 2 mapped to a data block holding
/// `page` (with `crc`, format 2), then the inode's record.
fn image_with_batch(version: u32, page: &[u8], crc: Option<u32>) -> (Arc<MemDevice>, u64) {
    let dev = Arc::new(MemDevice::new(4 << 20));
    mkfs_device(&*dev).unwrap();
    let mut sup = read_super(&*dev).unwrap();
    sup.version = version;
    sup.generation += 1;
    let bs = BLOCK as u64;
    dev.write_at(&sup.encode(), (sup.generation % 2) * bs)
        .unwrap();
    let block = sup.geo.group_data(0).0;
    dev.write_at(page, block * bs).unwrap();
    let mut payload = Vec::new();
    Record {
        objs: vec![(INO, 1)],
        ops: vec![Op::MapPage(INO, 0, block, crc)],
    }
    .encode_into(&mut payload);
    Record {
        objs: vec![(INO, 2)],
        ops: vec![Op::PutInode(INO, file_record())],
    }
    .encode_into(&mut payload);
    let batch = encode_batch(BATCH_RECORDS, sup.journal_tail_seq, &payload);
    let at = (sup.geo.journal_start + sup.journal_tail) * bs;
    dev.write_at(&batch, at).unwrap();
    (dev, block)
}

fn cfg() -> ImageConfig {
    ImageConfig {
        commit_interval: None,
        cache_bytes: None,
    }
}

#[test]
fn a_format_1_image_opens_and_is_rewritten_in_the_current_format() {
    let page = vec![0x5a; BLOCK];
    let (dev, _) = image_with_batch(FORMAT_VERSION_MIN, &page, None);
    assert_eq!(read_super(&*dev).unwrap().version, 1);
    let s = open_device(dev.clone(), &cfg()).unwrap();
    assert_eq!(s.recovery_report().records_replayed, 2);
    assert_eq!(s.recovery_report().records_unlanded, 0);
    let mut got = [0u8; BLOCK];
    assert!(s.read_page(INO, 0, &mut got).unwrap());
    assert_eq!(&got[..], &page[..]);
    assert_eq!(s.read_inode(INO).unwrap().unwrap().size, BLOCK as u64);
    // The open's checkpoint wrote a current (format 3) superblock.
    assert_eq!(read_super(&*dev).unwrap().version, FORMAT_VERSION);
    drop(s);
    let s = open_device(dev, &cfg()).unwrap();
    assert!(s.read_page(INO, 0, &mut got).unwrap());
    assert_eq!(&got[..], &page[..]);
}

#[test]
fn a_format_2_last_batch_applies_only_if_its_pages_landed() {
    let page = vec![0xa5; BLOCK];
    let crc = crc32c(&[&page]);
    let (dev, _) = image_with_batch(FORMAT_VERSION, &page, Some(crc));
    let s = open_device(dev, &cfg()).unwrap();
    assert_eq!(s.recovery_report().records_unlanded, 0);
    let mut got = [0u8; BLOCK];
    assert!(s.read_page(INO, 0, &mut got).unwrap());
    assert_eq!(&got[..], &page[..]);

    // The data write did not land (the block holds zeros): the whole batch
    // is dropped, the record with it.
    let (dev, block) = image_with_batch(FORMAT_VERSION, &page, Some(crc));
    dev.write_at(&[0u8; BLOCK], block * BLOCK as u64).unwrap();
    let r = fsck_report(&dev);
    assert!(r.clean, "{r:#?}");
    assert_eq!(r.records_unlanded, 2);
    assert!(r.notes.iter().any(|n| n.contains("not replayed")), "{r:#?}");
    let s = open_device(dev.clone(), &cfg()).unwrap();
    assert_eq!(s.recovery_report().records_unlanded, 2);
    assert_eq!(s.recovery_report().records_replayed, 0);
    assert!(!s.read_page(INO, 0, &mut got).unwrap());
    assert_eq!(s.read_inode(INO).unwrap(), None);
    drop(s);
    assert!(fsck_report(&dev).clean);

    // A torn data write (one sector missing) is not landed either.
    let (dev, block) = image_with_batch(FORMAT_VERSION, &page, Some(crc));
    dev.write_at(&[0u8; 512], block * BLOCK as u64 + 1024)
        .unwrap();
    let s = open_device(dev, &cfg()).unwrap();
    assert_eq!(s.recovery_report().records_unlanded, 2);
}

fn fsck_report(dev: &Arc<MemDevice>) -> crate::FsckReport {
    crate::fsck_device(dev.clone(), false).unwrap()
}

#[test]
fn a_newer_format_is_refused_with_one_line() {
    let dev = MemDevice::new(4 << 20);
    mkfs_device(&dev).unwrap();
    let mut sup = read_super(&dev).unwrap();
    sup.version = FORMAT_VERSION + 1;
    sup.generation += 1;
    dev.write_at(&sup.encode(), (sup.generation % 2) * BLOCK as u64)
        .unwrap();
    assert_eq!(read_super(&dev).err(), Some(Errno::EUCLEAN));
    let line = describe_open_error(&dev);
    assert!(
        line.contains(&format!("version {}", FORMAT_VERSION + 1)) && !line.contains('\n'),
        "{line}"
    );
}

/// An image with `n` files (records only) created from this thread, and
/// their numbers, closed (checkpointed).
fn image_with_files(n: usize) -> (Arc<MemDevice>, Vec<Ino>) {
    let dev = Arc::new(MemDevice::new(4 << 20));
    mkfs_device(&*dev).unwrap();
    let s = open_device(dev.clone(), &cfg()).unwrap();
    // A root directory naming every file, so that link counts hold.
    let mut root = InodeRecord::decode(&file_record()).unwrap();
    (root.ino, root.kind, root.nlink, root.blocks) = (ROOT_INO, FileKind::Directory, 2, 0);
    s.write_inode(&root).unwrap();
    let files: Vec<Ino> = (0..n)
        .map(|i| {
            let ino = s.alloc_ino().unwrap();
            let mut r = InodeRecord::decode(&file_record()).unwrap();
            r.ino = ino;
            r.blocks = 0;
            s.write_inode(&r).unwrap();
            let e = DirEntryRecord {
                name: format!("f{i}").into_bytes(),
                ino,
                kind: FileKind::Regular,
                cookie: i as u64 + 3,
            };
            s.dir_insert(ROOT_INO, &e).unwrap();
            ino
        })
        .collect();
    drop(s);
    // Every live inode, the root first (`live`'s order).
    (dev, std::iter::once(ROOT_INO).chain(files).collect())
}

/// Rewrite the newest superblock as `f` makes it (generation + 1, the
/// other copy's place).
fn rewrite_super(dev: &MemDevice, f: impl FnOnce(&mut DiskSuper)) {
    let mut sup = read_super(dev).unwrap();
    sup.generation += 1;
    f(&mut sup);
    dev.write_at(&sup.encode(), (sup.generation % 2) * BLOCK as u64)
        .unwrap();
}

fn live(s: &ImageStore) -> Vec<Ino> {
    let mut v = s.list_inodes().unwrap();
    v.sort_unstable();
    v
}

#[test]
fn marks_cover_what_is_written_and_only_that() {
    let (dev, inos) = image_with_files(30);
    let sup = read_super(&*dev).unwrap();
    let geo = sup.geo;
    let marks = sup.marks.clone().unwrap();
    // Per group, the mark over its highest written inode (0: none).
    let mut want = vec![0; geo.groups as usize];
    for &i in &inos {
        let (g, place) = geo.ino_place(i).unwrap();
        want[g as usize] = want[g as usize].max(geo.mark_for(place));
    }
    assert_eq!(marks, want);
    assert!(crate::fsck_device(dev, false).unwrap().clean);
}

#[test]
fn a_format_2_image_is_read_whole_and_rewritten_with_marks() {
    let (dev, inos) = image_with_files(30);
    rewrite_super(&dev, |s| {
        s.version = 2;
        s.marks = None;
    });
    assert_eq!(read_super(&*dev).unwrap().version, 2);
    let r = crate::fsck_device(dev.clone(), false).unwrap();
    assert!(r.clean, "{r:#?}");
    assert_eq!(r.inodes, inos.len() as u64);
    let s = open_device(dev.clone(), &cfg()).unwrap();
    assert_eq!(live(&s), inos);
    drop(s);
    let sup = read_super(&*dev).unwrap();
    assert_eq!(sup.version, FORMAT_VERSION);
    let (g, _) = sup.geo.ino_place(inos[0]).unwrap();
    assert!(sup.marks.unwrap()[g as usize] > 0);
    let s = open_device(dev, &cfg()).unwrap();
    assert_eq!(live(&s), inos);
}

#[test]
fn slots_above_a_mark_are_a_problem_that_repair_fixes() {
    let (dev, inos) = image_with_files(30);
    // A superblock whose marks say nothing was written.
    rewrite_super(&dev, |s| {
        s.marks = Some(vec![0; s.geo.groups as usize]);
    });
    let r = crate::fsck_device(dev.clone(), false).unwrap();
    assert!(!r.clean);
    assert!(
        r.problems.iter().any(|p| p.contains("high-water mark")),
        "{r:#?}"
    );
    let r = crate::fsck_device(dev.clone(), true).unwrap();
    assert!(r.clean, "{r:#?}");
    assert_eq!(r.inodes, inos.len() as u64);
    let s = open_device(dev, &cfg()).unwrap();
    assert_eq!(live(&s), inos);
}

#[test]
fn a_superblock_copy_that_fails_its_checks_makes_open_read_every_table() {
    let (dev, inos) = image_with_files(30);
    // The newest copy lost its marks; the other copy is garbage: the
    // marks are not trusted, so the files are found.
    rewrite_super(&dev, |s| {
        s.marks = Some(vec![0; s.geo.groups as usize]);
    });
    let newest = read_super(&*dev).unwrap().generation;
    dev.write_at(&[0xee; 512], ((newest + 1) % 2) * BLOCK as u64)
        .unwrap();
    let s = open_device(dev.clone(), &cfg()).unwrap();
    assert_eq!(live(&s), inos);
    drop(s);
    // The checkpoint wrote marks over them: a normal open finds them.
    let r = crate::fsck_device(dev.clone(), false).unwrap();
    assert!(r.store_clean(), "{r:#?}");
    let s = open_device(dev, &cfg()).unwrap();
    assert_eq!(live(&s), inos);
}

/// A regular file's record: `ino`, mode `perm`, `size` bytes, mtime `t`.
fn file_rec(ino: Ino, perm: u16, size: u64, t: i64) -> InodeRecord {
    let mut r = InodeRecord::decode(&file_record()).unwrap();
    r.ino = ino;
    r.perm = perm;
    r.size = size;
    r.blocks = size.div_ceil(BLOCK as u64);
    r.mtime = Timespec { sec: t, nsec: 0 };
    r
}

/// Page 0 of file `i` in the long-journal test.
fn page_of(i: u64) -> Vec<u8> {
    (0..BLOCK).map(|b| (i as usize * 7 + b) as u8).collect()
}

#[test]
fn a_long_journal_is_replayed_holding_a_few_batches() {
    // 64 MiB: a 2048-block journal, so 300 one-block batches stay below
    // the half-full mark that would checkpoint.
    let dev = Arc::new(MemDevice::new(64 << 20));
    mkfs_device(&*dev).unwrap();
    let s = open_device(dev.clone(), &cfg()).unwrap();
    let dir = s.alloc_ino().unwrap();
    let mut d = InodeRecord::decode(&file_record()).unwrap();
    d.ino = dir;
    d.kind = FileKind::Directory;
    d.perm = 0o755;
    d.nlink = 2;
    d.size = 0;
    d.blocks = 0;
    s.write_inode(&d).unwrap();
    s.sync().unwrap();
    const FILES: u64 = 300;
    let mut inos = Vec::new();
    for i in 0..FILES {
        // One batch: a create (record and entry), a page, the record
        // with its size, and the previous file's record again (a later
        // stamp of an object of the batch before).
        let ino = s.alloc_ino().unwrap();
        let mut txn = Txn::new();
        txn.push(TxnOp::PutInode(file_rec(ino, 0o600, 0, 0)))
            .unwrap();
        txn.push(TxnOp::PutEntry(
            dir,
            DirEntryRecord {
                name: format!("f{i}").into_bytes(),
                ino,
                kind: FileKind::Regular,
                cookie: i + 3,
            },
        ))
        .unwrap();
        s.commit(&txn).unwrap();
        s.write_page(ino, 0, page_of(i).as_slice().try_into().unwrap())
            .unwrap();
        s.write_inode(&file_rec(ino, 0o600, BLOCK as u64, 1))
            .unwrap();
        if let Some(&prev) = inos.last() {
            s.write_inode(&file_rec(prev, 0o640, BLOCK as u64, i as i64))
                .unwrap();
        }
        inos.push(ino);
        s.sync().unwrap();
    }
    // The power fails: the image as the last sync left it.
    let crashed = Arc::new(MemDevice::from_bytes(dev.snapshot()));
    drop(s);
    let s = open_device(crashed, &cfg()).unwrap();
    let r = s.recovery_report().clone();
    assert!(r.batches > FILES, "{r:#?}");
    assert!(r.records_replayed >= 1000, "{r:#?}");
    assert_eq!(r.records_dropped, 0, "{r:#?}");
    // Each batch has at most 4 records, and none waits past its batch: at
    // most two batches are held (the one applied, the one read ahead).
    // (And at least one such batch: the count is measured.)
    assert!((4..=8).contains(&r.records_held_max), "{r:#?}");
    assert!(r.records_held_max * 100 < r.records_replayed, "{r:#?}");
    let entries = s.dir_read(dir).unwrap();
    assert_eq!(entries.len() as u64, FILES);
    let mut page = [0u8; BLOCK];
    for (i, &ino) in inos.iter().enumerate() {
        assert!(entries
            .iter()
            .any(|e| e.ino == ino && e.name == format!("f{i}").as_bytes()));
        let rec = s.read_inode(ino).unwrap().unwrap();
        let last = i + 1 == inos.len();
        // Every file but the last was rewritten by the next batch.
        let (perm, t) = if last {
            (0o600, 1)
        } else {
            (0o640, i as i64 + 1)
        };
        assert_eq!(
            (rec.perm, rec.size, rec.mtime.sec),
            (perm, BLOCK as u64, t),
            "file {i}"
        );
        assert!(s.read_page(ino, 0, &mut page).unwrap());
        assert_eq!(&page[..], &page_of(i as u64)[..], "file {i}");
    }
}

/// A fresh image whose journal holds `batches`, one after another from
/// the tail (no page mappings: every batch has landed).
fn image_with_batches(batches: &[Vec<Record>]) -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(4 << 20));
    mkfs_device(&*dev).unwrap();
    let sup = read_super(&*dev).unwrap();
    let mut at = sup.geo.journal_start + sup.journal_tail;
    for (i, recs) in batches.iter().enumerate() {
        let mut payload = Vec::new();
        recs.iter().for_each(|r| r.encode_into(&mut payload));
        let b = encode_batch(BATCH_RECORDS, sup.journal_tail_seq + i as u64, &payload);
        dev.write_at(&b, at * BLOCK as u64).unwrap();
        at += (b.len() / BLOCK) as u64;
    }
    dev
}

/// A record putting file `ino`'s record (mode `perm`) at `stamp`, also
/// carrying `also`.
fn put(ino: Ino, stamp: u64, perm: u16, also: &[(u64, u64)]) -> Record {
    let mut objs = vec![(ino, stamp)];
    objs.extend_from_slice(also);
    Record {
        objs,
        ops: vec![Op::PutInode(ino, file_rec(ino, perm, 0, 0).encode())],
    }
}

fn perm_of(s: &ImageStore, ino: Ino) -> Option<u16> {
    s.read_inode(ino).unwrap().map(|r| r.perm)
}

#[test]
fn a_record_waits_for_a_predecessor_in_a_later_batch() {
    let dev = image_with_batches(&[
        // Inode 2's second stamp, then inode 4's second (whose first is
        // never written).
        vec![put(2, 2, 0o600, &[]), put(4, 2, 0o600, &[])],
        vec![put(3, 1, 0o644, &[])],
        // Inode 2's first stamp: the first batch's record applies after it.
        vec![put(2, 1, 0o644, &[])],
    ]);
    let s = open_device(dev.clone(), &cfg()).unwrap();
    let r = s.recovery_report();
    assert_eq!((r.records_replayed, r.records_dropped), (3, 1), "{r:#?}");
    // Held most before the second batch: the two pending records, the
    // batch and the one read ahead.
    assert_eq!(r.records_held_max, 4, "{r:#?}");
    assert_eq!(perm_of(&s, 2), Some(0o600));
    assert_eq!(perm_of(&s, 3), Some(0o644));
    assert_eq!(perm_of(&s, 4), None);
    drop(s);
    assert!(crate::fsck_device(dev, false).unwrap().store_clean());
}

#[test]
fn invalid_records_never_apply() {
    // The geometry `image_with_batches` makes.
    let geo = Geometry::for_size((4 << 20) / BLOCK as u64).unwrap();
    let out_of_range = (geo.max_ino() + 1, 1);
    let dev = image_with_batches(&[
        vec![
            // Names an object out of range: invalid, though its other pair
            // follows a record of the next batch.
            put(2, 2, 0o600, &[out_of_range]),
            // Inode 3's second stamp, pending ...
            put(3, 2, 0o640, &[]),
        ],
        vec![
            put(2, 1, 0o644, &[]),
            // ... so a second record with it is invalid.
            put(3, 2, 0o666, &[]),
            put(3, 1, 0o644, &[]),
        ],
        // Inode 2's first stamp again, after it applied: invalid.
        vec![put(2, 1, 0o606, &[])],
    ]);
    let s = open_device(dev.clone(), &cfg()).unwrap();
    let r = s.recovery_report();
    assert_eq!((r.records_replayed, r.records_dropped), (3, 3), "{r:#?}");
    assert_eq!(perm_of(&s, 2), Some(0o644));
    assert_eq!(perm_of(&s, 3), Some(0o640));
    drop(s);
    assert!(crate::fsck_device(dev, false).unwrap().store_clean());
}

#[test]
fn only_the_last_of_several_batches_is_checked_for_landed_pages() {
    let geo = Geometry::for_size((4 << 20) / BLOCK as u64).unwrap();
    let block = geo.group_data(0).0;
    // The block holds zeros, not the page this CRC32C is of.
    let crc = crc32c(&[&[0x5a; BLOCK]]);
    let map = |ino: Ino, stamp: u64| Record {
        objs: vec![(ino, stamp)],
        ops: vec![Op::MapPage(ino, 0, block, Some(crc))],
    };
    // Not the last batch: replayed as written.
    let dev = image_with_batches(&[vec![map(2, 1)], vec![put(2, 2, 0o600, &[])]]);
    let s = open_device(dev, &cfg()).unwrap();
    let r = s.recovery_report();
    assert_eq!((r.records_replayed, r.records_unlanded), (2, 0), "{r:#?}");
    assert_eq!(r.records_held_max, 2, "{r:#?}");
    assert_eq!(s.page_count(2).unwrap(), 1);
    drop(s);
    // The last batch: dropped whole, the batches before it replayed.
    let dev = image_with_batches(&[
        vec![put(2, 1, 0o600, &[])],
        vec![map(2, 2), put(3, 1, 0o600, &[])],
    ]);
    let s = open_device(dev, &cfg()).unwrap();
    let r = s.recovery_report();
    assert_eq!((r.records_replayed, r.records_unlanded), (1, 2), "{r:#?}");
    assert_eq!(r.records_dropped, 0, "{r:#?}");
    assert_eq!(r.batches, 2, "{r:#?}");
    assert_eq!(perm_of(&s, 2), Some(0o600));
    assert_eq!(perm_of(&s, 3), None);
    assert_eq!(s.page_count(2).unwrap(), 0);
}
