//! Many lanes at once: allocation comes from each lane's own group, and
//! concurrent Txns from many threads, with checkpoints racing them, all
//! survive sync and reopen.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::*;
use lanefs_image::ImageStore;
use lanefs_store::{DirEntryRecord, FileKind, Store, Txn, TxnOp, ROOT_INO};

const THREADS: usize = 4;
const FILES: u64 = 150;

#[test]
fn lanes_allocate_from_their_own_groups() {
    let dev = fresh(16 << 20);
    let s = Arc::new(open(&dev));
    let geo = s.geometry();
    assert!(geo.groups >= THREADS as u64, "{geo:?}");
    let per_thread: Vec<(usize, BTreeSet<u64>)> = (0..THREADS)
        .map(|_| {
            let s = s.clone();
            std::thread::spawn(move || {
                let lane = lanefs_store::lane();
                let groups = (0..20)
                    .map(|_| geo.ino_place(s.alloc_ino().unwrap()).unwrap().0)
                    .collect();
                (lane, groups)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    for (lane, groups) in &per_thread {
        let want: BTreeSet<u64> = [(*lane as u64) % geo.groups].into();
        assert_eq!(
            groups, &want,
            "lane {lane} allocates from its own group only"
        );
    }
}

#[test]
fn concurrent_txns_from_many_lanes_all_survive() {
    let dev = fresh(32 << 20);
    let s = Arc::new(open(&dev));
    s.write_inode(&rec(ROOT_INO, FileKind::Directory, 2, 0))
        .unwrap();
    // Checkpoints race with the writers the whole time.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let checkpointer = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                s.checkpoint().unwrap();
                n += 1;
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
            n
        })
    };
    let made: Vec<Vec<(u64, u64)>> = (0..THREADS)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                let dir = s.alloc_ino().unwrap();
                let mut txn = Txn::new();
                txn.push(TxnOp::PutInode(rec(dir, FileKind::Directory, 2, 0)))
                    .unwrap();
                let e = DirEntryRecord {
                    name: format!("t{t}").into_bytes(),
                    ino: dir,
                    kind: FileKind::Directory,
                    cookie: 3,
                };
                txn.push(TxnOp::PutEntry(ROOT_INO, e)).unwrap();
                s.commit(&txn).unwrap();
                let mut out = vec![(dir, 0)];
                for i in 0..FILES {
                    let f = s.alloc_ino().unwrap();
                    s.write_page(f, i, &pattern(f, i)).unwrap();
                    let mut txn = Txn::new();
                    txn.push(TxnOp::PutInode(rec(
                        f,
                        FileKind::Regular,
                        1,
                        (i + 1) * 4096,
                    )))
                    .unwrap();
                    let e = DirEntryRecord {
                        name: format!("f{i}").into_bytes(),
                        ino: f,
                        kind: FileKind::Regular,
                        cookie: i + 3,
                    };
                    txn.push(TxnOp::PutEntry(dir, e)).unwrap();
                    txn.push(TxnOp::Usage(lanefs_store::lane() as u32, 1, 1))
                        .unwrap();
                    s.commit(&txn).unwrap();
                    if i % 50 == 0 {
                        s.sync().unwrap();
                    }
                    out.push((f, i));
                }
                s.sync().unwrap();
                out
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(checkpointer.join().unwrap() > 0);
    // Crash right after the syncs returned: no final checkpoint.
    let crashed = Arc::new(lanefs_image::MemDevice::from_bytes(dev.snapshot()));
    drop(s);
    for (which, d) in [("crashed", crashed), ("dropped", dev)] {
        let s = ImageStore::open_device(d.clone(), &cfg()).unwrap();
        assert_eq!(s.dir_read(ROOT_INO).unwrap().len(), THREADS);
        let mut p = [0u8; 4096];
        for files in &made {
            let dir = files[0].0;
            assert_eq!(s.dir_read(dir).unwrap().len() as u64, FILES);
            for &(f, i) in &files[1..] {
                assert_eq!(s.read_inode(f).unwrap().unwrap().size, (i + 1) * 4096);
                let present = s.read_page(f, i, &mut p).unwrap();
                assert!(
                    present && is_pattern(&p, f, i),
                    "{which}: file {f} page {i}: present {present}, head {:?}",
                    &p[..16]
                );
            }
        }
        assert_eq!(
            s.superblock().unwrap().used_inodes,
            1 + (THREADS as u64) * (FILES + 1)
        );
        drop(s);
        let r = lanefs_image::fsck_device(d, false).unwrap();
        assert!(r.clean, "{r:#?}");
    }
}

tiny_budget_too!(
    lanes_allocate_from_their_own_groups,
    concurrent_txns_from_many_lanes_all_survive,
);
