//! Every record kind survives sync + reopen (and drop + reopen); bad input
//! gives errors, not panics; one corrupt object answers EIO alone.

mod common;

use std::sync::Arc;

use common::*;
use lanefs_image::{describe_open_error, fsck, fsck_device, mkfs, ImageStore, MemDevice, BLOCK};
use lanefs_store::{
    DirEntryRecord, Errno, FileKind, InodeRecord, Store, Superblock, Txn, TxnOp, ROOT_INO,
};

fn entry(name: &str, ino: u64, kind: FileKind, cookie: u64) -> DirEntryRecord {
    DirEntryRecord {
        name: name.as_bytes().to_vec(),
        ino,
        kind,
        cookie,
    }
}

#[test]
fn every_record_kind_survives_sync_and_reopen() {
    let dev = fresh(8 << 20);
    let s = open(&dev);
    assert_eq!(
        s.superblock().unwrap().used_inodes,
        0,
        "a fresh image holds no file system"
    );
    s.write_inode(&rec(ROOT_INO, FileKind::Directory, 2, 0))
        .unwrap();
    let dir = s.alloc_ino().unwrap();
    let file = s.alloc_ino().unwrap();
    let link = s.alloc_ino().unwrap();
    let mut big = rec(link, FileKind::Symlink, 1, 4000);
    big.symlink = vec![b'x'; 4000];
    big.xattrs = vec![
        (b"user.a".to_vec(), vec![1; 9000]),
        (b"user.b".to_vec(), vec![]),
    ];
    s.write_inode(&big).unwrap();
    s.write_inode(&rec(dir, FileKind::Directory, 2, 0)).unwrap();
    // Counts the 8 pages it ends with (recovery derives a block count).
    let file_rec = InodeRecord {
        blocks: 8,
        ..rec(file, FileKind::Regular, 1, 10 * 4096)
    };
    s.write_inode(&file_rec).unwrap();
    for i in 0..300u64 {
        s.dir_insert(
            dir,
            &entry(&format!("entry-{i:03}"), file, FileKind::Regular, i + 3),
        )
        .unwrap();
    }
    s.dir_remove(dir, b"entry-007").unwrap();
    s.dir_insert(dir, &entry("entry-008", link, FileKind::Symlink, 99))
        .unwrap();
    for i in 0..10 {
        s.write_page(file, i, &pattern(file, i)).unwrap();
    }
    assert_eq!(s.punch_pages(file, 2, 4).unwrap(), 2);
    s.write_page(file, 5, &pattern(file, 55)).unwrap();
    let mut t = Txn::new();
    t.push(TxnOp::PutEntry(
        ROOT_INO,
        entry("d", dir, FileKind::Directory, 3),
    ))
    .unwrap();
    t.push(TxnOp::Usage(3, 10, 3)).unwrap();
    s.commit(&t).unwrap();
    let sb = Superblock {
        total_blocks: 1,
        total_inodes: 2,
        used_blocks: 8,
        used_inodes: 4,
    };
    s.write_superblock(&sb).unwrap();
    let gone = s.alloc_ino().unwrap();
    s.write_inode(&rec(gone, FileKind::Regular, 1, 0)).unwrap();
    s.write_page(gone, 0, &pattern(gone, 0)).unwrap();
    s.free_ino(gone).unwrap();
    s.sync().unwrap();

    let check = |s: &ImageStore| {
        assert_eq!(s.read_inode(link).unwrap().unwrap(), big);
        assert_eq!(s.read_inode(file).unwrap().unwrap(), file_rec);
        // Directory records were written with size 0 and never updated:
        // recovery derives size, link count and next cookie from entries.
        let d = s.read_inode(dir).unwrap().unwrap();
        assert_eq!((d.size, d.nlink, d.next_cookie), (20 * 301, 2, 303));
        let root = s.read_inode(ROOT_INO).unwrap().unwrap();
        assert_eq!((root.size, root.nlink, root.next_cookie), (20 * 3, 3, 4));
        let mut es = s.dir_read(dir).unwrap();
        es.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(es.len(), 299);
        assert_eq!(es[7], entry("entry-008", link, FileKind::Symlink, 99));
        assert_eq!(
            s.dir_read(ROOT_INO).unwrap(),
            vec![entry("d", dir, FileKind::Directory, 3)]
        );
        let mut p = [0u8; 4096];
        for i in 0..10 {
            let present = s.read_page(file, i, &mut p).unwrap();
            assert_eq!(present, !(2..4).contains(&i), "page {i}");
            if present {
                assert!(
                    is_pattern(&p, file, if i == 5 { 55 } else { i }),
                    "page {i}"
                );
            }
        }
        assert_eq!(s.page_count(file).unwrap(), 8);
        assert_eq!(s.read_inode(gone).unwrap(), None);
        assert_eq!(s.page_count(gone).unwrap(), 0);
        let mut inos = s.list_inodes().unwrap();
        inos.sort_unstable();
        assert_eq!(inos, vec![ROOT_INO, dir, file, link]);
        // Counters are rebuilt from what is there at open.
        let got = s.superblock().unwrap();
        assert_eq!(got.used_inodes, 4);
        assert_eq!(got.used_blocks, 8);
    };
    // The image as the last sync left it, as if the power went now.
    let crashed = Arc::new(MemDevice::from_bytes(dev.snapshot()));
    drop(s);
    for d in [crashed, dev] {
        let s = open(&d);
        check(&s);
        assert_eq!(s.recovery_report().bad_objects, Vec::<u64>::new());
        drop(s);
        let r = fsck_device(d.clone(), false).unwrap();
        assert!(r.store_clean(), "{r:#?}");
        assert_eq!(
            (r.inodes, r.directories, r.entries, r.data_pages),
            (4, 2, 300, 8)
        );
        let s = open(&d);
        check(&s);
    }
}

#[test]
fn bad_names_and_inode_numbers_are_errors() {
    let dev = fresh(4 << 20);
    let s = open(&dev);
    let long = entry(&"n".repeat(256), 5, FileKind::Regular, 3);
    assert_eq!(s.dir_insert(2, &long), Err(Errno::EINVAL));
    assert_eq!(s.free_ino(ROOT_INO), Err(Errno::EINVAL));
    let far = s.geometry().max_ino() + 1;
    assert_eq!(s.read_inode(far), Err(Errno::EINVAL));
    assert_eq!(
        s.write_inode(&rec(far, FileKind::Regular, 1, 0)),
        Err(Errno::EINVAL)
    );
    let mut t = Txn::new();
    t.push(TxnOp::PutInode(rec(3, FileKind::Regular, 1, 0)))
        .unwrap();
    t.push(TxnOp::PutInode(rec(far, FileKind::Regular, 1, 0)))
        .unwrap();
    assert_eq!(s.commit(&t), Err(Errno::EINVAL));
    assert_eq!(
        s.read_inode(3).unwrap(),
        None,
        "a refused Txn changes nothing"
    );
}

#[test]
fn foreign_truncated_and_tiny_images_are_refused_with_a_reason() {
    let foreign = Arc::new(MemDevice::from_bytes(vec![0xAB; 4 << 20]));
    assert_eq!(
        ImageStore::open_device(foreign.clone(), &cfg()).err(),
        Some(Errno::EUCLEAN)
    );
    assert!(describe_open_error(&*foreign).contains("not a lanefs image"));
    assert_eq!(fsck_device(foreign, false).err(), Some(Errno::EUCLEAN));
    let dev = fresh(4 << 20);
    let mut img = dev.snapshot();
    img.truncate(2 << 20);
    let cut = Arc::new(MemDevice::from_bytes(img));
    assert_eq!(
        ImageStore::open_device(cut.clone(), &cfg()).err(),
        Some(Errno::EUCLEAN)
    );
    assert!(
        describe_open_error(&*cut).contains("truncated"),
        "{}",
        describe_open_error(&*cut)
    );
    let tiny = Arc::new(MemDevice::from_bytes(vec![0; 100]));
    assert_eq!(
        ImageStore::open_device(tiny.clone(), &cfg()).err(),
        Some(Errno::EUCLEAN)
    );
    assert!(describe_open_error(&*tiny).contains("too small"));
    assert_eq!(
        lanefs_image::mkfs_device(&MemDevice::new(64 * BLOCK)),
        Err(Errno::EINVAL)
    );
}

#[test]
fn one_corrupt_inode_answers_eio_and_the_rest_is_usable() {
    let dev = fresh(4 << 20);
    let s = open(&dev);
    let a = s.alloc_ino().unwrap();
    let b = s.alloc_ino().unwrap();
    s.write_inode(&rec(a, FileKind::Regular, 1, 1)).unwrap();
    s.write_inode(&rec(b, FileKind::Regular, 1, 2)).unwrap();
    s.checkpoint().unwrap();
    s.write_inode(&rec(a, FileKind::Regular, 1, 3)).unwrap();
    drop(s);
    // Both slots of `a` hold a durable image now; flip a byte in each.
    let geo = lanefs_image::Geometry::for_size((4 << 20) / BLOCK as u64).unwrap();
    let (g, i) = geo.ino_place(a).unwrap();
    let at = (geo.group_first_block(g) * BLOCK as u64) as usize + (2 * i as usize) * 512;
    let mut img = dev.snapshot();
    img[at + 100] ^= 1;
    img[at + 612] ^= 1;
    let bad = Arc::new(MemDevice::from_bytes(img));
    let r = fsck_device(bad.clone(), false).unwrap();
    assert!(
        !r.clean && r.problems.iter().any(|p| p.contains(&format!("inode {a}"))),
        "{r:#?}"
    );
    let s = ImageStore::open_device(bad.clone(), &cfg()).unwrap();
    assert_eq!(s.recovery_report().bad_objects, vec![a]);
    assert_eq!(s.read_inode(a), Err(Errno::EIO));
    assert_eq!(
        s.write_inode(&rec(a, FileKind::Regular, 1, 9)),
        Err(Errno::EIO)
    );
    assert_eq!(s.read_inode(b).unwrap().unwrap().size, 2);
    let c = s.alloc_ino().unwrap();
    assert_ne!(c, a, "an unreadable inode's number is not handed out");
    s.write_inode(&rec(c, FileKind::Regular, 1, 4)).unwrap();
    s.dir_insert(b, &entry("to-bad", a, FileKind::Regular, 3))
        .unwrap();
    // A root naming the files, so that their link counts hold and the
    // repair keeps the sound ones.
    s.write_inode(&rec(ROOT_INO, FileKind::Directory, 2, 0))
        .unwrap();
    for (name, ino, cookie) in [("a", a, 3), ("b", b, 4), ("c", c, 5)] {
        s.dir_insert(ROOT_INO, &entry(name, ino, FileKind::Regular, cookie))
            .unwrap();
    }
    drop(s);
    let r = fsck_device(bad.clone(), true).unwrap();
    assert!(r.clean, "{r:#?}");
    assert!(
        r.repaired.iter().any(|l| l.contains("dropped")),
        "{:?}",
        r.repaired
    );
    assert!(
        r.repaired.iter().any(|l| l.contains("entry removed")),
        "{:?}",
        r.repaired
    );
    let s = ImageStore::open_device(bad, &cfg()).unwrap();
    assert_eq!(s.read_inode(a).unwrap(), None);
    assert_eq!(s.read_inode(b).unwrap().unwrap().size, 2);
    assert_eq!(s.read_inode(c).unwrap().unwrap().size, 4);
}

/// Regression (fuzzing, 3,000 mutations): `fsck --repair` left the
/// entries of an inode whose record is not a directory ("has entries but
/// is Some(Fifo)"), so the repaired image was still unclean.
#[test]
fn repair_drops_the_entries_of_a_non_directory() {
    let dev = fresh(4 << 20);
    let s = open(&dev);
    s.write_inode(&rec(ROOT_INO, FileKind::Directory, 2, 0))
        .unwrap();
    let fifo = s.alloc_ino().unwrap();
    let file = s.alloc_ino().unwrap();
    s.write_inode(&rec(fifo, FileKind::Fifo, 1, 0)).unwrap();
    s.write_inode(&rec(file, FileKind::Regular, 1, 0)).unwrap();
    s.dir_insert(ROOT_INO, &entry("fifo", fifo, FileKind::Fifo, 3))
        .unwrap();
    s.dir_insert(ROOT_INO, &entry("file", file, FileKind::Regular, 4))
        .unwrap();
    // An entry inside the fifo, naming a live file: reachable by nobody.
    s.dir_insert(fifo, &entry("inside", file, FileKind::Regular, 3))
        .unwrap();
    s.checkpoint().unwrap();
    drop(s);
    let r = fsck_device(dev.clone(), false).unwrap();
    assert!(
        !r.clean
            && r.problems
                .iter()
                .any(|p| p.contains(&format!("inode {fifo}: has entries"))),
        "{r:#?}"
    );
    let r = fsck_device(dev.clone(), true).unwrap();
    assert!(r.store_clean(), "{r:#?}");
    assert!(
        r.repaired
            .iter()
            .any(|l| l.contains("has entries") && l.contains("entry removed")),
        "{:?}",
        r.repaired
    );
    let r = fsck_device(dev.clone(), false).unwrap();
    assert!(r.store_clean(), "{r:#?}");
    let s = open(&dev);
    assert_eq!(s.dir_read(fifo).unwrap(), Vec::new());
    assert_eq!(s.read_inode(file).unwrap().unwrap().ino, file);
}

#[test]
fn a_file_image_can_be_made_opened_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("img");
    mkfs(&path, 4 << 20).unwrap();
    let s = ImageStore::open(&path).unwrap();
    let a = s.alloc_ino().unwrap();
    s.write_inode(&rec(a, FileKind::Regular, 1, 7)).unwrap();
    s.write_page(a, 3, &pattern(a, 3)).unwrap();
    s.sync().unwrap();
    drop(s);
    let r = fsck(&path, false).unwrap();
    assert!(
        r.store_clean() && r.inodes == 1 && r.data_pages == 1,
        "{r:#?}"
    );
    let s = ImageStore::open(&path).unwrap();
    let mut p = [0; 4096];
    assert!(s.read_page(a, 3, &mut p).unwrap() && is_pattern(&p, a, 3));
    assert!(s.recovery_report().duration.as_secs() < 60);
}

#[test]
fn a_full_image_says_enospc_and_still_checkpoints() {
    let dev = fresh(4 << 20);
    let s = open(&dev);
    let f = s.alloc_ino().unwrap();
    s.write_inode(&rec(f, FileKind::Regular, 1, 0)).unwrap();
    let mut n = 0;
    let err = loop {
        match s.write_page(f, n, &pattern(f, n)) {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(err, Errno::ENOSPC);
    assert!(n > 100, "{n} pages fit");
    // Entry blocks still find room: the groups keep a reserve for homes.
    let d = s.alloc_ino().unwrap();
    s.write_inode(&rec(d, FileKind::Directory, 2, 0)).unwrap();
    for i in 0..40 {
        s.dir_insert(
            d,
            &entry(&format!("{i:0>200}"), f, FileKind::Regular, i + 3),
        )
        .unwrap();
    }
    s.checkpoint().unwrap();
    // Freed pages are reusable after the checkpoint that makes the punch durable.
    assert_eq!(s.punch_pages(f, 0, 10).unwrap(), 10);
    s.write_page(f, n, &pattern(f, n)).unwrap();
    s.sync().unwrap();
    drop(s);
    let s = open(&dev);
    assert_eq!(s.page_count(f).unwrap(), n + 1 - 10);
    assert_eq!(s.dir_read(d).unwrap().len(), 40);
    drop(s);
    assert!(fsck_device(dev, false).unwrap().store_clean());
}

tiny_budget_too!(
    every_record_kind_survives_sync_and_reopen,
    bad_names_and_inode_numbers_are_errors,
    one_corrupt_inode_answers_eio_and_the_rest_is_usable,
    a_full_image_says_enospc_and_still_checkpoints,
);

/// `count_pages` answers from the page map: no device read, whatever the
/// range (the trait's default read every index, a device read per mapped
/// page: a truncate of a large fallocated, written file read all of it).
#[test]
fn count_pages_reads_nothing_from_the_device() {
    use std::sync::atomic::{AtomicU64, Ordering};
    struct Reads {
        mem: lanefs_image::MemDevice,
        reads: AtomicU64,
    }
    impl lanefs_image::Device for Reads {
        fn len(&self) -> u64 {
            self.mem.len()
        }
        fn read_at(&self, buf: &mut [u8], off: u64) -> lanefs_store::Result<()> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            self.mem.read_at(buf, off)
        }
        fn write_at(&self, buf: &[u8], off: u64) -> lanefs_store::Result<()> {
            self.mem.write_at(buf, off)
        }
        fn flush(&self) -> lanefs_store::Result<()> {
            self.mem.flush()
        }
    }
    let mem = lanefs_image::MemDevice::new(8 << 20);
    lanefs_image::mkfs_device(&mem).unwrap();
    let dev = std::sync::Arc::new(Reads {
        mem,
        reads: AtomicU64::new(0),
    });
    let s = lanefs_image::ImageStore::open_device(dev.clone(), &cfg()).unwrap();
    let ino = s.alloc_ino().unwrap();
    s.write_inode(&rec(ino, FileKind::Regular, 1, 64 * 4096))
        .unwrap();
    for i in (0..64).step_by(2) {
        s.write_page(ino, i, &pattern(ino, i)).unwrap();
    }
    let before = dev.reads.load(Ordering::SeqCst);
    assert_eq!(s.count_pages(ino, 0, 64).unwrap(), 32);
    assert_eq!(s.count_pages(ino, 10, 20).unwrap(), 5);
    assert_eq!(s.count_pages(ino, 64, 4096).unwrap(), 0);
    assert_eq!(s.count_pages(ino, 5, 5).unwrap(), 0);
    assert_eq!(dev.reads.load(Ordering::SeqCst), before, "device reads");
}
