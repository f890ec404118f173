//! Open time against capacity and use: an image file sized for INODES
//! inode numbers (the size `many_files` gives that many files, sparse) is
//! made, opened fresh, given FILES files (records in 100 directories) and
//! closed (checkpoint), opened again, given FILES more after that open's
//! checkpoint, synced and left without a checkpoint (the store is leaked, as
//! a power cut after the sync would leave it), and opened a last time
//! (journal replay). Each open prints its wall time, the recovery report's
//! split and the bytes it read from the image (a counting device). For
//! issue 13's open cost; figures are not recorded in the docs.
//!
//! `cargo run --release -p lanefs-image --example open_time -- [INODES] [DIR] [FILES]`
//! (defaults 10000000, the temp dir, 100000). The image
//! (`DIR/lanefs-open-time.img`) is removed at the end.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use lanefs_image::{mkfs, Device, FileDevice, ImageConfig, ImageStore};
use lanefs_store::{DirEntryRecord, FileKind, Ino, Result, Store, Txn, TxnOp, ROOT_INO};

mod common;
use common::rec;

/// A file device that counts what is read from it (atomics, Relaxed: the
/// totals are read after the open returns).
struct Counting {
    dev: FileDevice,
    bytes: AtomicU64,
    reads: AtomicU64,
}

impl Device for Counting {
    fn len(&self) -> u64 {
        self.dev.len()
    }
    fn read_at(&self, buf: &mut [u8], off: u64) -> Result<()> {
        self.bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.dev.read_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> Result<()> {
        self.dev.write_at(buf, off)
    }
    fn flush(&self) -> Result<()> {
        self.dev.flush()
    }
}

fn cfg() -> ImageConfig {
    ImageConfig {
        commit_interval: None,
        cache_bytes: None,
    }
}

/// Open `img` through a counting device and report.
fn open(what: &str, img: &Path) -> ImageStore {
    let dev = Arc::new(Counting {
        dev: FileDevice::open(img).expect("open the image file"),
        bytes: AtomicU64::new(0),
        reads: AtomicU64::new(0),
    });
    let t = Instant::now();
    let s = ImageStore::open_device(dev.clone(), &cfg()).expect("open");
    let wall = t.elapsed();
    let r = s.recovery_report();
    println!(
        "{what:<28} open {:>8.3} s (load {:.3} s, checkpoint {:.3} s): read {} MiB in {} reads; \
         {} records replayed ({} held at most), {} live inodes",
        wall.as_secs_f64(),
        r.load.as_secs_f64(),
        r.checkpoint.as_secs_f64(),
        dev.bytes.load(Ordering::Relaxed) >> 20,
        dev.reads.load(Ordering::Relaxed),
        r.records_replayed,
        r.records_held_max,
        s.superblock().map_or(0, |sb| sb.used_inodes),
    );
    s
}

/// `files` regular files in `dirs` (names `{tag}{i}`), one Txn each.
fn create(s: &ImageStore, dirs: &[Ino], files: u64, tag: &str) {
    for i in 0..files {
        let ino = s.alloc_ino().expect("alloc_ino");
        let mut txn = Txn::new();
        txn.push(TxnOp::PutInode(rec(ino, FileKind::Regular)))
            .unwrap();
        let e = DirEntryRecord {
            name: format!("{tag}{i}").into_bytes(),
            ino,
            kind: FileKind::Regular,
            cookie: ino,
        };
        txn.push(TxnOp::PutEntry(dirs[(i % dirs.len() as u64) as usize], e))
            .unwrap();
        s.commit(&txn).expect("create");
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let inodes: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    let dir = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let files: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let img = dir.join("lanefs-open-time.img");
    // As `many_files` sizes an image for `inodes` files in directories of
    // 1000: one inode per 16 KiB, with room.
    let size = (inodes + inodes.div_ceil(1000) + 10_000) * 16 * 1024 * 5 / 4;
    let t = Instant::now();
    mkfs(&img, size).expect("mkfs");
    println!(
        "mkfs {} MiB ({} inode numbers): {:.3} s",
        size >> 20,
        inodes,
        t.elapsed().as_secs_f64()
    );
    let s = open("fresh", &img);
    let geo = s.geometry();
    println!(
        "geometry: {} groups, {} inode numbers, inode tables {} MiB",
        geo.groups,
        geo.max_ino(),
        (geo.groups * geo.itable_blocks * 4096) >> 20
    );
    s.write_inode(&rec(ROOT_INO, FileKind::Directory)).unwrap();
    let dirs: Vec<Ino> = (0..100)
        .map(|_| {
            let ino = s.alloc_ino().unwrap();
            s.write_inode(&rec(ino, FileKind::Directory)).unwrap();
            ino
        })
        .collect();
    let t = Instant::now();
    create(&s, &dirs, files, "a");
    drop(s);
    println!(
        "{files} creates + close (checkpoint): {:.3} s",
        t.elapsed().as_secs_f64()
    );
    let s = open(&format!("{files} files"), &img);
    let t = Instant::now();
    create(&s, &dirs, files, "b");
    s.sync().unwrap();
    println!(
        "{files} more creates + sync: {:.3} s",
        t.elapsed().as_secs_f64()
    );
    // No checkpoint: the next open replays the journal.
    std::mem::forget(s);
    let s = open(&format!("{} files, replay", 2 * files), &img);
    assert_eq!(
        s.superblock().unwrap().used_inodes,
        2 * files + dirs.len() as u64 + 1
    );
    drop(s);
    let _ = std::fs::remove_file(&img);
}
