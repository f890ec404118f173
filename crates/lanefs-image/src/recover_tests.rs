//! Recovery of hand-made journals: format 1 images open (and become
//! format 3), and the last batch of a format 2 journal is replayed only if
//! the pages it maps landed. High-water marks: they cover what is written;
//! a format 2 image (no marks) is read whole and gets them; slots above a
//! mark are an fsck problem that repair fixes; an unsound superblock copy
//! makes open read every table.

use std::sync::Arc;

use lanefs_store::{FileKind, InodeRecord, Store};

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
    let inos: Vec<Ino> = (0..n)
        .map(|_| {
            let ino = s.alloc_ino().unwrap();
            let mut r = InodeRecord::decode(&file_record()).unwrap();
            r.ino = ino;
            r.blocks = 0;
            s.write_inode(&r).unwrap();
            ino
        })
        .collect();
    drop(s);
    (dev, inos)
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
    let (g, _) = geo.ino_place(inos[0]).unwrap();
    let top = inos
        .iter()
        .map(|&i| geo.ino_place(i).unwrap().1)
        .max()
        .unwrap();
    assert_eq!(marks[g as usize], geo.mark_for(top), "{marks:?}");
    for (h, &m) in marks.iter().enumerate() {
        if h as u64 != g {
            assert_eq!(m, 0, "group {h}: nothing written");
        }
    }
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
    assert_eq!(r.inodes, 30);
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
    assert_eq!(r.inodes, 30);
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
    assert!(r.clean, "{r:#?}");
    let s = open_device(dev, &cfg()).unwrap();
    assert_eq!(live(&s), inos);
}
