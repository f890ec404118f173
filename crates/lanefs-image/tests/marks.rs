//! Inode-table high-water marks (docs/FORMAT.md, "High-water marks"): open
//! reads only the table blocks in use, so a fresh image of any size reads
//! none; inodes created past a mark after the last checkpoint come back
//! from the journal after a crash, keep their numbers (the allocator never
//! hands one out again) and survive the next open (the recovery
//! checkpoint raised the mark before writing their slots), fsck clean.
//!
//! Knobs: `LANEFS_CRASH_CUTS` (default 120) and `LANEFS_CRASH_SEED`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use lanefs_image::crash::{next_rand, CrashDevice};
use lanefs_image::{
    fsck_device, mkfs, Device, FileDevice, Geometry, ImageConfig, ImageStore, MemDevice, BLOCK,
};
use lanefs_store::{
    DirEntryRecord, Errno, FileKind, Ino, Result, Store, Txn, TxnOp, PAGE_SIZE, ROOT_INO,
};

/// A file device that records which inode-table blocks are read (a mutex
/// over the list: a test device).
struct Counting {
    dev: FileDevice,
    geo: Geometry,
    /// (group, table block) of every table block read.
    table_reads: parking_lot::Mutex<Vec<(u64, u64)>>,
    bytes: AtomicU64,
}

impl Counting {
    fn open(path: &std::path::Path) -> Arc<Counting> {
        let dev = FileDevice::open(path).unwrap();
        let geo = Geometry::for_size(dev.len() / BLOCK as u64).unwrap();
        Arc::new(Counting {
            dev,
            geo,
            table_reads: parking_lot::Mutex::new(Vec::new()),
            bytes: AtomicU64::new(0),
        })
    }
}

impl Device for Counting {
    fn len(&self) -> u64 {
        self.dev.len()
    }
    fn read_at(&self, buf: &mut [u8], off: u64) -> Result<()> {
        self.bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        let bs = BLOCK as u64;
        let (first, end) = (off / bs, (off + buf.len() as u64).div_ceil(bs));
        let mut reads = self.table_reads.lock();
        for b in first..end {
            for g in 0..self.geo.groups {
                let t = self.geo.group_first_block(g);
                if (t..t + self.geo.itable_blocks).contains(&b) {
                    reads.push((g, b - t));
                }
            }
        }
        drop(reads);
        self.dev.read_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> Result<()> {
        self.dev.write_at(buf, off)
    }
    fn flush(&self) -> Result<()> {
        self.dev.flush()
    }
}

/// Create a regular file `name` in `dir` with a fresh number (one Txn).
fn create(s: &ImageStore, dir: Ino, name: &str) -> Result<Ino> {
    let ino = s.alloc_ino()?;
    let mut txn = Txn::new();
    txn.push(TxnOp::PutInode(rec(ino, FileKind::Regular, 1, 0)))?;
    txn.push(TxnOp::PutEntry(
        dir,
        DirEntryRecord {
            name: name.as_bytes().to_vec(),
            ino,
            kind: FileKind::Regular,
            cookie: ino + 3,
        },
    ))?;
    s.commit(&txn)?;
    Ok(ino)
}

#[test]
fn a_fresh_large_image_opens_without_reading_its_inode_tables() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.img");
    // 1 GiB, sparse: 64 groups of 960 inode numbers, 60 MiB of tables.
    mkfs(&path, 1 << 30).unwrap();
    let dev = Counting::open(&path);
    let geo = dev.geo;
    assert!(geo.groups == 64 && geo.itable_blocks >= 200, "{geo:?}");
    let s = ImageStore::open_device(dev.clone(), &cfg()).unwrap();
    assert_eq!(
        *dev.table_reads.lock(),
        vec![],
        "a fresh image: no inode-table block read"
    );
    // What open reads besides: superblocks, orphan file, journal (at most
    // 64 MiB whatever the image's size).
    let read = dev.bytes.load(Ordering::Relaxed);
    assert!(
        read <= (4 + geo.orphan_blocks + geo.journal_blocks) * BLOCK as u64,
        "{read}"
    );
    // 300 files from this thread: one group (its lane's), numbers from the
    // lowest, 75 table blocks.
    s.write_inode(&rec(ROOT_INO, FileKind::Directory, 2, 0))
        .unwrap();
    let inos: Vec<Ino> = (0..300)
        .map(|i| create(&s, ROOT_INO, &format!("f{i}")).unwrap())
        .collect();
    drop(s);
    // The device holds the image's lock (`FileDevice`): let it go before
    // the image is opened again.
    drop(dev);
    let mut in_use: BTreeMap<u64, u64> = BTreeMap::new();
    for &ino in inos.iter().chain([&ROOT_INO]) {
        let (g, i) = geo.ino_place(ino).unwrap();
        let blocks = in_use.entry(g).or_default();
        *blocks = (*blocks).max(i / 4 + 1);
    }
    for budget in [None, Some(TINY_BUDGET)] {
        let dev = Counting::open(&path);
        let s = ImageStore::open_device(
            dev.clone(),
            &ImageConfig {
                commit_interval: None,
                cache_bytes: budget,
            },
        )
        .unwrap();
        let mut live = s.list_inodes().unwrap();
        live.sort_unstable();
        let mut want: Vec<Ino> = inos.iter().copied().chain([ROOT_INO]).collect();
        want.sort_unstable();
        assert_eq!(live, want, "budget {budget:?}");
        drop(s);
        let reads = dev.table_reads.lock();
        let distinct: BTreeSet<&(u64, u64)> = reads.iter().collect();
        for &&(g, b) in &distinct {
            assert!(
                in_use.get(&g).is_some_and(|&n| b < n),
                "budget {budget:?}: table block {b} of group {g} read; in use: {in_use:?}"
            );
        }
        let used: u64 = in_use.values().sum();
        assert_eq!(
            distinct.len() as u64,
            used,
            "budget {budget:?}: every block in use read (and no other)"
        );
    }
    let r = lanefs_image::fsck(&path, false).unwrap();
    assert!(r.store_clean(), "{r:#?}");
    assert_eq!(r.inodes, 301);
}

/// The image before the workload: root and one directory, checkpointed.
fn setup() -> (Vec<u8>, Ino) {
    let dev = fresh(4 << 20);
    let s = open(&dev);
    s.write_inode(&rec(ROOT_INO, FileKind::Directory, 2, 0))
        .unwrap();
    let dir = s.alloc_ino().unwrap();
    s.write_inode(&rec(dir, FileKind::Directory, 2, 0)).unwrap();
    drop(s);
    (dev.snapshot(), dir)
}

/// Creates in bursts, each synced, with a checkpoint after some: many
/// creates land past the mark of the last checkpoint. `synced` gets every
/// (name, number) whose sync returned.
fn workload(s: &ImageStore, dir: Ino, seed: u64, synced: &mut BTreeMap<String, Ino>) -> Result<()> {
    let mut rng = seed | 1;
    let mut made = Vec::new();
    for burst in 0..8 {
        for k in 0..(3 + next_rand(&mut rng) % 10) {
            let name = format!("b{burst}-{k}");
            made.push((name.clone(), create(s, dir, &name)?));
        }
        s.sync()?;
        synced.extend(made.drain(..));
        if next_rand(&mut rng).is_multiple_of(3) {
            s.checkpoint()?;
        }
    }
    Ok(())
}

/// The image opens (fsck clean before and after), every synced file is
/// there under its number, numbers are unique, and new numbers are free
/// ones; after a reopen everything is still there.
fn verify(image: Vec<u8>, dir: Ino, synced: &BTreeMap<String, Ino>, what: &str) {
    let dev = Arc::new(MemDevice::from_bytes(image));
    let r = fsck_device(dev.clone(), false).unwrap();
    assert!(r.store_clean(), "{what}: fsck before recovery: {r:#?}");
    let s = open(&dev);
    let entries: BTreeMap<String, Ino> = s
        .dir_read(dir)
        .unwrap()
        .into_iter()
        .map(|e| (String::from_utf8(e.name).unwrap(), e.ino))
        .collect();
    for (name, ino) in synced {
        assert_eq!(entries.get(name), Some(ino), "{what}: synced {name} lost");
    }
    let live: BTreeSet<Ino> = s.list_inodes().unwrap().into_iter().collect();
    let named: BTreeSet<Ino> = entries.values().copied().collect();
    assert_eq!(named.len(), entries.len(), "{what}: a number named twice");
    for ino in &named {
        assert!(live.contains(ino), "{what}: entry -> free inode {ino}");
        assert!(s.read_inode(*ino).unwrap().is_some(), "{what}");
    }
    // Every number the allocator hands out is free.
    let mut fresh_files = BTreeMap::new();
    for k in 0..40 {
        let ino = match create(&s, dir, &format!("after-{k}")) {
            Err(Errno::ENOSPC) => break,
            r => r.unwrap(),
        };
        assert!(!live.contains(&ino), "{what}: inode {ino} handed out again");
        fresh_files.insert(format!("after-{k}"), ino);
    }
    drop(s);
    let r = fsck_device(dev.clone(), false).unwrap();
    assert!(r.store_clean(), "{what}: fsck after recovery: {r:#?}");
    let s = open(&dev);
    let again: BTreeMap<String, Ino> = s
        .dir_read(dir)
        .unwrap()
        .into_iter()
        .map(|e| (String::from_utf8(e.name).unwrap(), e.ino))
        .collect();
    for (name, ino) in entries.iter().chain(&fresh_files) {
        assert_eq!(again.get(name), Some(ino), "{what}: {name} lost at reopen");
        assert!(s.read_inode(*ino).unwrap().is_some(), "{what}: {name}");
    }
}

fn run_cuts(tear: bool) {
    let (image, dir) = setup();
    let cuts = env_u64("LANEFS_CRASH_CUTS", 120);
    let mut rng = env_u64("LANEFS_CRASH_SEED", 0x6d61_726b) | 1;
    for cut in 0..cuts {
        let seed = next_rand(&mut rng);
        let dry = Arc::new(CrashDevice::new(image.clone(), None, seed, tear));
        let s = ImageStore::open_device(dry.clone(), &cfg()).unwrap();
        workload(&s, dir, seed, &mut BTreeMap::new()).unwrap();
        drop(s);
        let events = dry.events();
        let cut_at = 1 + next_rand(&mut rng) % events;
        let dev = Arc::new(CrashDevice::new(image.clone(), Some(cut_at), seed, tear));
        let mut synced = BTreeMap::new();
        match ImageStore::open_device(dev.clone(), &cfg()) {
            Ok(s) => {
                let _ = workload(&s, dir, seed, &mut synced);
                drop(s);
            }
            Err(e) => assert_eq!(e, Errno::EIO),
        }
        let crashed = dev.crash_image().expect("the power was cut");
        let what = format!("cut {cut} at event {cut_at} of {events} (seed {seed:#x})");
        verify(crashed.clone(), dir, &synced, &what);
        // A second cut, in the recovery itself (its checkpoint writes the
        // replayed inodes' slots past the marks).
        let dry = Arc::new(CrashDevice::new(crashed.clone(), None, seed, tear));
        drop(ImageStore::open_device(dry.clone(), &cfg()).unwrap());
        let again_at = 1 + next_rand(&mut rng) % dry.events();
        let dev = Arc::new(CrashDevice::new(crashed, Some(again_at), seed, tear));
        if let Ok(s) = ImageStore::open_device(dev.clone(), &cfg()) {
            drop(s);
        }
        if let Some(img) = dev.crash_image() {
            verify(
                img,
                dir,
                &synced,
                &format!("{what}, recovery cut at {again_at}"),
            );
        }
    }
}

#[test]
fn creates_past_the_mark_survive_power_cuts_with_unique_numbers() {
    run_cuts(false);
}

#[test]
fn creates_past_the_mark_survive_torn_power_cuts() {
    run_cuts(true);
}

#[test]
fn creates_past_the_mark_after_the_last_checkpoint_come_back_once() {
    let (image, dir) = setup();
    let dev = Arc::new(MemDevice::from_bytes(image));
    let s = open(&dev);
    let mut synced = BTreeMap::new();
    for k in 0..5 {
        synced.insert(
            format!("old{k}"),
            create(&s, dir, &format!("old{k}")).unwrap(),
        );
    }
    s.checkpoint().unwrap();
    // Past the mark: 40 creates (10 table blocks), synced, no checkpoint.
    for k in 0..40 {
        synced.insert(
            format!("new{k}"),
            create(&s, dir, &format!("new{k}")).unwrap(),
        );
    }
    s.write_page(synced["new39"], 0, &pattern(synced["new39"], 0))
        .unwrap();
    s.sync().unwrap();
    let crashed = dev.snapshot();
    // The store is dropped later: the image is the state after the sync.
    verify(crashed.clone(), dir, &synced, "crash after sync");
    let dev2 = Arc::new(MemDevice::from_bytes(crashed));
    let s2 = open(&dev2);
    assert_eq!(s2.recovery_report().records_replayed, 41);
    let mut p = [0u8; PAGE_SIZE];
    assert!(s2.read_page(synced["new39"], 0, &mut p).unwrap());
    assert!(is_pattern(&p, synced["new39"], 0));
    drop(s2);
    drop(s);
}

tiny_budget_too!(creates_past_the_mark_after_the_last_checkpoint_come_back_once,);
