//! Crash tests: a workload runs on a device that cuts the power at a
//! random write or flush (dropping unflushed writes at random, tearing
//! some sector-sized pieces with `tear`). After each cut: the image opens,
//! fsck is clean before and after recovery, every change whose sync
//! returned is there, every committed Txn is all-or-nothing, data pages
//! are never foreign or stale, orphans are freed and counters are exact.
//!
//! Knobs: `LANEFS_CRASH_CUTS` (default 200; 10000 for a long run) and
//! `LANEFS_CRASH_SEED`.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::*;
use lanefs_image::crash::{next_rand, CrashDevice};
use lanefs_image::{fsck_device, Device, ImageStore, MemDevice};
use lanefs_store::{DirEntryRecord, FileKind, Ino, Result, Store, Txn, TxnOp, ROOT_INO};

const PAIRS: usize = 6;
const STEPS: u64 = 48;
const IMAGE_BYTES: usize = 4 << 20;

/// The file system before the workload: a directory and PAIRS inode pairs.
struct Setup {
    image: Vec<u8>,
    dir: Ino,
    pairs: Vec<(Ino, Ino)>,
}

fn setup() -> Setup {
    let dev = fresh(IMAGE_BYTES);
    let s = open(&dev);
    s.write_inode(&rec(ROOT_INO, FileKind::Directory, 2, 0))
        .unwrap();
    let dir = s.alloc_ino().unwrap();
    s.write_inode(&rec(dir, FileKind::Directory, 2, 0)).unwrap();
    let pairs: Vec<(Ino, Ino)> = (0..PAIRS)
        .map(|_| {
            let (a, b) = (s.alloc_ino().unwrap(), s.alloc_ino().unwrap());
            s.write_inode(&rec(a, FileKind::Regular, 1, 0)).unwrap();
            s.write_inode(&rec(b, FileKind::Regular, 1, 0)).unwrap();
            (a, b)
        })
        .collect();
    for (i, (a, _)) in pairs.iter().enumerate() {
        s.dir_insert(dir, &pair_entry(i, *a, 0)).unwrap();
    }
    s.sync().unwrap();
    drop(s);
    Setup {
        image: dev.snapshot(),
        dir,
        pairs,
    }
}

fn pair_entry(i: usize, a: Ino, v: u64) -> DirEntryRecord {
    DirEntryRecord {
        name: format!("pair-{i}").into_bytes(),
        ino: a,
        kind: FileKind::Regular,
        cookie: v + 3,
    }
}

/// What the workload knows about each pair.
#[derive(Clone, Default)]
struct Model {
    /// Value of each pair when the last sync returned.
    synced: Vec<u64>,
    /// Every value a commit of the pair was attempted with.
    tried: Vec<BTreeSet<u64>>,
}

/// Workers with their own lanes, sorted by lane-buffer index, highest
/// first; step k runs on worker `(k - 1) % WORKERS`, so consecutive records
/// sit in lane buffers of *decreasing* index and a group commit writes them in reverse causal order: replay
/// must order them by stamps.
const WORKERS: u64 = 8;

type Job<'a> = Box<dyn FnOnce() -> (bool, Result<()>) + Send + 'a>;

/// Run until the device fails; every error is the power cut.
fn workload(s: &ImageStore, st: &Setup, seed: u64, m: &mut Model) -> Result<()> {
    let mut rng = seed | 1;
    let mut last = vec![0u64; PAIRS];
    std::thread::scope(|sc| {
        let (done_tx, done_rx) = std::sync::mpsc::channel::<(bool, Result<()>)>();
        let (lane_tx, lane_rx) = std::sync::mpsc::channel::<usize>();
        let mut workers: Vec<(usize, std::sync::mpsc::Sender<Job<'_>>)> = (0..WORKERS)
            .map(|_| {
                let (tx, rx) = std::sync::mpsc::channel::<Job<'_>>();
                let done = done_tx.clone();
                let lane_tx = lane_tx.clone();
                sc.spawn(move || {
                    lane_tx.send(lanefs_store::lane() % 64).unwrap();
                    while let Ok(job) = rx.recv() {
                        let _ = done.send(job());
                    }
                });
                (lane_rx.recv().unwrap(), tx)
            })
            .collect();
        // Highest lane buffer index first.
        workers.sort_by_key(|w| std::cmp::Reverse(w.0));
        let workers: Vec<_> = workers.into_iter().map(|(_, tx)| tx).collect();
        let result = (|| {
            for step in 1..=STEPS {
                let i = (next_rand(&mut rng) % PAIRS as u64) as usize;
                let extra = next_rand(&mut rng) % 8;
                m.tried[i].insert(step);
                let w = ((step - 1) % WORKERS) as usize;
                workers[w]
                    .send(Box::new(move || one_step(s, st, step, i, extra)))
                    .unwrap();
                let (committed, r) = done_rx.recv().unwrap();
                if committed {
                    last[i] = step;
                }
                r?;
                if step % 4 == 0 {
                    s.sync()?;
                    m.synced.copy_from_slice(&last);
                }
            }
            Ok(())
        })();
        drop(workers);
        result
    })
}

/// One step of the workload: `(whether its Txn committed, result)`.
fn one_step(s: &ImageStore, st: &Setup, v: u64, i: usize, extra: u64) -> (bool, Result<()>) {
    let (a, b) = st.pairs[i];
    // Data first (data=ordered), then the Txn that makes it reachable.
    if let Err(e) = s.write_page(a, v, &pattern(a, v)) {
        return (false, Err(e));
    }
    let mut t = Txn::new();
    t.push(TxnOp::PutInode(rec(a, FileKind::Regular, 1, v)))
        .unwrap();
    t.push(TxnOp::PutInode(rec(b, FileKind::Regular, 1, v)))
        .unwrap();
    t.push(TxnOp::PutEntry(st.dir, pair_entry(i, a, v)))
        .unwrap();
    t.push(TxnOp::Usage(i as u32, 1, 0)).unwrap();
    if let Err(e) = s.commit(&t) {
        return (false, Err(e));
    }
    let r = (|| {
        match extra {
            0 => {
                // Drop old pages: their blocks are reused after a checkpoint.
                s.punch_pages(a, 0, v)?;
            }
            1 => {
                // A short-lived file, freed.
                let t = s.alloc_ino()?;
                s.write_inode(&rec(t, FileKind::Regular, 1, 8192))?;
                s.write_page(t, 0, &pattern(t, 0))?;
                s.write_page(t, 1, &pattern(t, 1))?;
                s.free_ino(t)?;
            }
            2 => {
                // Unlinked while open, then the power goes: an orphan.
                let t = s.alloc_ino()?;
                s.write_inode(&rec(t, FileKind::Regular, 0, 4096))?;
                s.write_page(t, 0, &pattern(t, 0))?;
            }
            3 => s.checkpoint()?,
            4 => {
                // A new file's page before the record that creates it (the
                // order Txn prescribes); a cut between leaves a reservation
                // with pages, which recovery frees.
                let t = s.alloc_ino()?;
                s.write_page(t, 3, &pattern(t, 3))?;
                s.checkpoint()?;
                s.write_inode(&rec(t, FileKind::Regular, 1, 4 * 4096))?;
            }
            5 => {
                // fallocate: the pair's second file's unwritten extent
                // moves (format 4: one journaled list, counted in blocks).
                let extent = v * 8..v * 8 + 4;
                s.write_unwritten(b, std::slice::from_ref(&extent))?;
            }
            _ => {}
        }
        Ok(())
    })();
    (true, r)
}

fn verify(image: Vec<u8>, st: &Setup, m: &Model, what: &str) {
    let raw = fsck_device(Arc::new(MemDevice::from_bytes(image.clone())), false)
        .unwrap_or_else(|e| panic!("{what}: fsck of the crashed image failed: {e}"));
    assert!(
        raw.store_clean(),
        "{what}: crashed image not clean: {raw:#?}"
    );
    let dev = Arc::new(MemDevice::from_bytes(image));
    let s = ImageStore::open_device(dev.clone(), &cfg())
        .unwrap_or_else(|e| panic!("{what}: open: {e}"));
    if std::env::var("LANEFS_CRASH_DEBUG").is_ok() {
        let r = s.recovery_report();
        eprintln!(
            "{what}: replayed {} dropped {} held {} batches {} orphans {} synced {:?}",
            r.records_replayed,
            r.records_dropped,
            r.records_held_max,
            r.batches,
            r.orphans_freed,
            m.synced
        );
    }
    let entries = s.dir_read(st.dir).unwrap();
    for (i, &(a, b)) in st.pairs.iter().enumerate() {
        let ra = s.read_inode(a).unwrap().unwrap().size;
        let rb = s.read_inode(b).unwrap().unwrap().size;
        let e = entries
            .iter()
            .find(|e| e.name == format!("pair-{i}").as_bytes())
            .unwrap();
        assert_eq!(
            (ra, rb, e.cookie),
            (ra, ra, ra + 3),
            "{what}: pair {i} torn"
        );
        assert!(
            ra >= m.synced[i],
            "{what}: pair {i} lost a synced value: {ra} < {}",
            m.synced[i]
        );
        assert!(
            ra == 0 || m.tried[i].contains(&ra),
            "{what}: pair {i} has a value never written: {ra}"
        );
        let mut p = [0u8; 4096];
        if ra > 0 {
            assert!(
                s.read_page(a, ra, &mut p).unwrap(),
                "{what}: pair {i} page {ra} missing"
            );
        }
        let u = s.read_unwritten(b).unwrap();
        assert!(
            u.is_empty()
                || (u.len() == 1
                    && u[0].end - u[0].start == 4
                    && u[0].start % 8 == 0
                    && m.tried[i].contains(&(u[0].start / 8))),
            "{what}: pair {i} has unwritten extents never written: {u:?}"
        );
        for idx in 0..=STEPS {
            if s.read_page(a, idx, &mut p).unwrap() {
                assert!(
                    is_pattern(&p, a, idx),
                    "{what}: pair {i} page {idx} holds foreign data"
                );
            }
        }
    }
    let inos = s.list_inodes().unwrap();
    let mut pages = 0;
    for &ino in &inos {
        let r = s.read_inode(ino).unwrap().unwrap();
        assert!(r.nlink > 0, "{what}: orphan {ino} survived recovery");
        if r.size == 4 * 4096 {
            // Made by step kind 4: its page went before its record.
            let mut p = [0u8; 4096];
            assert!(
                s.read_page(ino, 3, &mut p).unwrap() && is_pattern(&p, ino, 3),
                "{what}: {ino} lost its page"
            );
        }
        pages += s.allocated_pages(ino).unwrap();
    }
    let sb = s.superblock().unwrap();
    assert_eq!(
        (sb.used_inodes, sb.used_blocks),
        (inos.len() as u64, pages),
        "{what}: counters"
    );
    drop(s);
    let after = fsck_device(dev, false).unwrap();
    assert!(
        after.store_clean() && after.orphans_pending == 0,
        "{what}: not clean after recovery: {after:#?}"
    );
}

fn run_cuts(tear: bool) {
    let cuts = env_u64("LANEFS_CRASH_CUTS", 200) / 2;
    let seed0 = env_u64("LANEFS_CRASH_SEED", 0x5eed);
    let st = setup();
    let fresh_model = || Model {
        synced: vec![0; PAIRS],
        tried: vec![BTreeSet::new(); PAIRS],
    };
    let mut rng = seed0 ^ tear as u64;
    let mut total_cut = 0;
    // Runs until `cuts` cut points fell within their runs (at most twice
    // as many tries).
    for n in 0..2 * cuts {
        if total_cut == cuts {
            break;
        }
        let seed = next_rand(&mut rng);
        // A dry run finds how many events this workload makes.
        let dry = Arc::new(CrashDevice::new(st.image.clone(), None, seed, tear));
        let s = ImageStore::open_device(dry.clone(), &cfg()).unwrap();
        workload(&s, &st, seed, &mut fresh_model()).unwrap();
        let events = dry.events();
        drop(s);
        let cut_at = 1 + next_rand(&mut rng) % events;
        let dev = Arc::new(CrashDevice::new(st.image.clone(), Some(cut_at), seed, tear));
        let mut m = fresh_model();
        if let Ok(s) = ImageStore::open_device(dev.clone(), &cfg()) {
            let _ = workload(&s, &st, seed, &mut m);
            drop(s);
        }
        // The run is not exactly the dry run's (the background commit's
        // timing varies the events): a cut past the end of this run is
        // no cut, and is not counted: another is tried.
        let Some(image) = dev.crash_image() else {
            continue;
        };
        total_cut += 1;
        verify(
            image,
            &st,
            &m,
            &format!("cut {n} (seed {seed:#x}, event {cut_at}/{events}, tear {tear})"),
        );
    }
    assert_eq!(total_cut, cuts, "too few cut points fell within their runs");
}

#[test]
fn power_cuts_drop_unflushed_writes() {
    run_cuts(false);
}

#[test]
fn power_cuts_drop_and_tear_unflushed_writes() {
    run_cuts(true);
}

#[test]
fn the_crash_device_reads_its_own_pending_writes() {
    let d = CrashDevice::new(vec![0; 8192], Some(3), 1, false);
    d.write_at(&[1; 512], 0).unwrap();
    let mut b = [0u8; 1024];
    d.read_at(&mut b, 0).unwrap();
    assert_eq!((b[511], b[512]), (1, 0));
    d.flush().unwrap();
    assert!(d.write_at(&[2; 512], 512).is_err(), "event 3 is the cut");
    assert!(d.flush().is_err(), "no device after the cut");
    let img = d.crash_image().unwrap();
    assert_eq!(img[0], 1, "the flushed write survives");
}

tiny_budget_too!(
    power_cuts_drop_unflushed_writes,
    power_cuts_drop_and_tear_unflushed_writes,
);
