//! Measure recovery at open: create FILES files (one Txn each, with the
//! inode record and the directory entry) in 100 directories on an image
//! file, sync, copy the image as a power cut would leave it (no final
//! checkpoint), open the copy and print the recovery report.
//!
//! `cargo run --release -p lanefs-image --example recovery_time -- [FILES] [DIR] [MODE]`
//!
//! MODE `all` (default) does everything; `prepare` only leaves the cut
//! image at `DIR/lanefs-recovery-cut.img`; `open` only opens that image
//! (copy it first with `cp --sparse=always` to measure again: open
//! checkpoints it), so a profiler can record the open alone.
//! `LANEFS_STORE_CACHE_MIB=N` opens the cut image with a store budget of
//! N MiB (`ImageConfig::cache_bytes`: the streaming load).

use std::path::Path;
use std::time::Instant;

use lanefs_image::{mkfs, ImageConfig, ImageStore};
use lanefs_store::{DirEntryRecord, FileKind, Store, Txn, TxnOp, ROOT_INO};

mod common;
use common::rec;

/// Copy `from` to `to` as a power cut would leave it, keeping holes (a
/// 1 MiB chunk of zeros is not written): a million-file image is tens of
/// GiB of mostly holes.
fn sparse_copy(from: &Path, to: &Path) {
    use std::os::unix::fs::FileExt;
    let src = std::fs::File::open(from).unwrap();
    let dst = std::fs::File::create(to).unwrap();
    let len = src.metadata().unwrap().len();
    dst.set_len(len).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(buf.len() as u64) as usize;
        src.read_exact_at(&mut buf[..n], at).unwrap();
        if buf[..n].iter().any(|&b| b != 0) {
            dst.write_all_at(&buf[..n], at).unwrap();
        }
        at += n as u64;
    }
    // On the media before the open, as after a power cut: otherwise the
    // open's first flush writes the copy and is counted as recovery.
    dst.sync_all().unwrap();
}

fn main() {
    let mut args = std::env::args().skip(1);
    let files: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let dir = args
        .next()
        .unwrap_or_else(|| std::env::temp_dir().display().to_string());
    let mode = args.next().unwrap_or_else(|| "all".into());
    let img = Path::new(&dir).join("lanefs-recovery.img");
    let copy = Path::new(&dir).join("lanefs-recovery-cut.img");
    if mode != "open" {
        prepare(files, &img, &copy);
    }
    if mode == "prepare" {
        return;
    }
    open(files, &copy);
    let _ = std::fs::remove_file(&copy);
}

/// Make the image, `files` creates, and leave its power-cut copy at `copy`.
fn prepare(files: u64, img: &Path, copy: &Path) {
    // One inode per 16 KiB, plus room: a sparse file.
    let size = (files + 1000) * 16 * 1024 * 5 / 4;
    let t = Instant::now();
    mkfs(img, size).unwrap();
    println!("mkfs {} MiB: {:?}", size >> 20, t.elapsed());
    let s = ImageStore::open_with(
        img,
        &ImageConfig {
            commit_interval: None,
            cache_bytes: None,
        },
    )
    .unwrap();
    s.write_inode(&rec(ROOT_INO, FileKind::Directory)).unwrap();
    let dirs: Vec<u64> = (0..100)
        .map(|d| {
            let ino = s.alloc_ino().unwrap();
            let mut txn = Txn::new();
            txn.push(TxnOp::PutInode(rec(ino, FileKind::Directory)))
                .unwrap();
            let e = DirEntryRecord {
                name: format!("d{d}").into_bytes(),
                ino,
                kind: FileKind::Directory,
                cookie: d + 3,
            };
            txn.push(TxnOp::PutEntry(ROOT_INO, e)).unwrap();
            s.commit(&txn).unwrap();
            ino
        })
        .collect();
    let t = Instant::now();
    for i in 0..files {
        let ino = s.alloc_ino().unwrap();
        let mut txn = Txn::new();
        txn.push(TxnOp::PutInode(rec(ino, FileKind::Regular)))
            .unwrap();
        let e = DirEntryRecord {
            name: format!("file-{i}").into_bytes(),
            ino,
            kind: FileKind::Regular,
            cookie: i + 3,
        };
        txn.push(TxnOp::PutEntry(dirs[(i % 100) as usize], e))
            .unwrap();
        s.commit(&txn).unwrap();
    }
    s.sync().unwrap();
    println!("{files} creates + sync: {:?}", t.elapsed());
    let t = Instant::now();
    sparse_copy(img, copy);
    println!("sparse copy: {:?}", t.elapsed());
    drop(s);
    let _ = std::fs::remove_file(img);
}

/// Open the cut image (recovery) and print the report.
fn open(files: u64, copy: &Path) {
    let cache_bytes = std::env::var("LANEFS_STORE_CACHE_MIB")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(|m| m << 20);
    let t = Instant::now();
    let s = ImageStore::open_with(
        copy,
        &ImageConfig {
            commit_interval: None,
            cache_bytes,
        },
    )
    .unwrap();
    let wall = t.elapsed();
    let r = s.recovery_report();
    println!(
        "recovery: {:?} (load+replay {:?}, checkpoint {:?}; open wall {:?}): {} batches, {} records replayed, {} dropped, {} held at most, {} orphans freed, {} bad",
        r.duration,
        r.load,
        r.checkpoint,
        wall,
        r.batches,
        r.records_replayed,
        r.records_dropped,
        r.records_held_max,
        r.orphans_freed,
        r.bad_objects.len()
    );
    assert_eq!(s.list_inodes().unwrap().len() as u64, files + 101);
}
