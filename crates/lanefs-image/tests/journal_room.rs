//! Records as large as the engine makes (two inode records with
//! `XATTR_TOTAL_MAX` = 256 KiB of extended attributes each: one rename or
//! link `Txn`) on the smallest journal (1 MiB, images up to 8 MiB).
//!
//! Until a checkpoint that empties the journal moved its tail to block 0,
//! the second such record never committed: after the first batch (129
//! blocks) the checkpoint left the empty journal's tail at block 129; a
//! batch of 129 blocks then fitted neither before the journal's end nor,
//! wrapped, before the tail, and no checkpoint could move the tail of an
//! empty journal. Every commit answered `ENOSPC` from then on (the record
//! applied in memory and kept in the carry, the store not marked failed),
//! so nothing the file system did after it became durable.

mod common;

use common::*;
use lanefs_store::{FileKind, Store, Txn, TxnOp};

#[test]
fn records_as_large_as_the_engine_makes_commit_on_the_smallest_journal() {
    let dev = fresh(4 << 20);
    let s = open(&dev);
    assert_eq!(s.geometry().journal_blocks, 256);
    let (a, b) = (s.alloc_ino().unwrap(), s.alloc_ino().unwrap());
    let big = |ino, v: u8| {
        let mut r = rec(ino, FileKind::Regular, 1, 0);
        r.xattrs = (0..4)
            .map(|k| (format!("user.x{k}").into_bytes(), vec![v; 65536]))
            .collect();
        r
    };
    for round in 0..4u8 {
        let mut t = Txn::new();
        t.push(TxnOp::PutInode(big(a, round))).unwrap();
        t.push(TxnOp::PutInode(big(b, round))).unwrap();
        assert_eq!(s.commit(&t), Ok(()), "round {round}: commit");
        assert_eq!(s.sync(), Ok(()), "round {round}: sync");
    }
}

/// The same record when the journal is nearly half full (128 one-block
/// batches, no checkpoint yet): it fits neither before the end nor,
/// wrapped, before the tail, and once applied no checkpoint could commit
/// it (a checkpoint commits first). A record over a quarter of the
/// journal checkpoints before it applies.
#[test]
fn a_large_record_on_a_nearly_half_full_journal_commits() {
    let dev = fresh(4 << 20);
    let s = open(&dev);
    let (a, b, c) = (
        s.alloc_ino().unwrap(),
        s.alloc_ino().unwrap(),
        s.alloc_ino().unwrap(),
    );
    let big = |ino, v: u8| {
        let mut r = rec(ino, FileKind::Regular, 1, 0);
        r.xattrs = (0..4)
            .map(|k| (format!("user.x{k}").into_bytes(), vec![v; 65536]))
            .collect();
        r
    };
    s.checkpoint().unwrap();
    for k in 0..128 {
        s.write_inode(&rec(c, FileKind::Regular, 1, k)).unwrap();
        s.sync().unwrap();
    }
    for round in 0..3u8 {
        let mut t = Txn::new();
        t.push(TxnOp::PutInode(big(a, round))).unwrap();
        t.push(TxnOp::PutInode(big(b, round))).unwrap();
        assert_eq!(s.commit(&t), Ok(()), "round {round}: commit");
        assert_eq!(s.sync(), Ok(()), "round {round}: sync");
        s.write_inode(&rec(c, FileKind::Regular, 1, 1000)).unwrap();
        assert_eq!(s.sync(), Ok(()), "round {round}: a small record after");
    }
    drop(s);
    let s = open(&dev);
    assert_eq!(s.read_inode(a).unwrap().unwrap().xattrs[0].1[0], 2);
    assert_eq!(s.read_inode(c).unwrap().unwrap().size, 1000);
}

/// The same records on a power-cut device, cut at every event (torn at
/// every other one): the journal's rewind to block 0 never loses a synced round (the
/// old superblock, read if the cut falls before the new one is durable,
/// still finds its batches), and never shows a round not written.
#[test]
fn a_cut_around_the_journal_rewind_keeps_every_synced_record() {
    use lanefs_image::crash::CrashDevice;
    use lanefs_image::{fsck_device, ImageStore, MemDevice};
    use std::sync::Arc;
    const ROUNDS: u8 = 4;
    let base = fresh(4 << 20).snapshot();
    let big = |ino, v: u8| {
        let mut r = rec(ino, FileKind::Regular, 1, 0);
        r.xattrs = (0..4)
            .map(|k| (format!("user.x{k}").into_bytes(), vec![v; 65536]))
            .collect();
        r
    };
    // `synced`: the last round whose sync returned; `inos`: the two
    // numbers (the same in every run: one thread, one lane).
    let run = |dev: Arc<CrashDevice>,
               synced: &mut Option<u8>,
               inos: &mut (u64, u64)|
     -> lanefs_store::Result<()> {
        let s = ImageStore::open_device(dev, &cfg())?;
        let (a, b) = (s.alloc_ino()?, s.alloc_ino()?);
        *inos = (a, b);
        for round in 0..ROUNDS {
            let mut t = Txn::new();
            t.push(TxnOp::PutInode(big(a, round))).unwrap();
            t.push(TxnOp::PutInode(big(b, round))).unwrap();
            s.commit(&t)?;
            s.sync()?;
            *synced = Some(round);
        }
        Ok(())
    };
    let dry = Arc::new(CrashDevice::new(base.clone(), None, 1, false));
    let mut inos = (0, 0);
    run(dry.clone(), &mut None, &mut inos).unwrap();
    let (a, b) = inos;
    let events = dry.events();
    for cut_at in 1..=events {
        {
            let (seed, tear) = (cut_at, cut_at % 2 == 1);
            let dev = Arc::new(CrashDevice::new(
                base.clone(),
                Some(cut_at),
                seed + cut_at,
                tear,
            ));
            let mut synced = None;
            let mut got = (a, b);
            let _ = run(dev.clone(), &mut synced, &mut got);
            assert_eq!(got, (a, b), "the numbers of the dry run");
            let Some(image) = dev.crash_image() else {
                continue;
            };
            let what = format!("cut at {cut_at}/{events}, tear {tear}");
            let dev = Arc::new(MemDevice::from_bytes(image));
            let r = fsck_device(dev.clone(), false).unwrap();
            assert!(r.store_clean(), "{what}: {r:#?}");
            let s = ImageStore::open_device(dev, &cfg()).unwrap();
            let ra = s.read_inode(a).unwrap();
            let rb = s.read_inode(b).unwrap();
            let round =
                |r: &Option<lanefs_store::InodeRecord>| r.as_ref().map(|r| r.xattrs[0].1[0]);
            assert_eq!(round(&ra), round(&rb), "{what}: the Txn is torn");
            match (synced, round(&ra)) {
                (Some(want), Some(got)) => assert!(
                    got == want || got == want + 1,
                    "{what}: synced round {want}, found {got}"
                ),
                (Some(want), None) => panic!("{what}: synced round {want} lost"),
                (None, got) => assert!(got.is_none_or(|g| g == 0), "{what}: {got:?}"),
            }
        }
    }
}
