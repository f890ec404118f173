//! Seed 003: reads stay atomic against writes, truncates, punches and
//! zero-ranges of the same range, for every read design. A writer cycles
//! the whole range through complete versions (a pattern, zeros, empty);
//! readers, with page drops racing them, must only ever see one complete
//! version: all `LEN` bytes equal, or nothing.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use lanefs_core::*;

/// Spans four pages, starting and ending inside one.
const LEN: usize = 3 * PAGE_SIZE + 1000;
const WRITER_ROUNDS: u64 = 4000;
const READERS: usize = 2;

fn fs_with(read: ReadVariant) -> Fs {
    let config = FsConfig {
        variants: Variants {
            read,
            ..Variants::default()
        },
        ..FsConfig::default()
    };
    Fs::new(Arc::new(MemoryStore::default()), config).unwrap()
}

fn open(fs: &Fs, flags: i32) -> OpenFile {
    let r = Cred::root();
    fs.open_at(&r, ROOT_INO, b"f", flags | libc::O_CREAT, 0o644, 0, false)
        .unwrap()
        .1
}

/// One writer round: every step leaves the range in a complete version.
fn writer_round(fs: &Fs, f: &OpenFile, round: u64) {
    let r = Cred::root();
    let pattern = vec![(round % 250) as u8 + 1; LEN];
    fs.write(f, 0, &pattern).unwrap();
    match round % 4 {
        0 => fs
            .fallocate(f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, LEN as i64)
            .unwrap(),
        1 => fs
            .fallocate(f, FALLOC_FL_ZERO_RANGE, 0, LEN as i64)
            .unwrap(),
        2 => {
            let to = |size| SetAttr {
                size: Some(size),
                ..Default::default()
            };
            fs.setattr(&r, f.ino(), &to(0), Some(f)).unwrap();
            fs.setattr(&r, f.ino(), &to(LEN as u64), Some(f)).unwrap();
        }
        _ => {
            let other = vec![(round % 250) as u8 + 2; LEN];
            fs.write(f, 0, &other).unwrap();
        }
    }
}

/// `Some(byte)` when `got` is one complete version.
fn version(got: &[u8], whole: usize) -> Option<u8> {
    if got.is_empty() {
        return Some(0);
    }
    (got.len() == whole && got.iter().all(|b| *b == got[0])).then_some(got[0])
}

fn run(read: ReadVariant) {
    let fs = fs_with(read);
    let w = open(&fs, libc::O_RDWR);
    fs.write(&w, 0, &[1u8; LEN]).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..READERS)
        .map(|i| {
            let (fs, done, reads) = (fs.clone(), done.clone(), reads.clone());
            std::thread::spawn(move || {
                let f = open(&fs, libc::O_RDONLY);
                let mut buf = vec![0u8; LEN];
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ i as u64;
                while !done.load(Ordering::Relaxed) {
                    // Whole range, or a random piece of it.
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let (off, len) = if x.is_multiple_of(2) {
                        (0, LEN)
                    } else {
                        let off = (x >> 8) as usize % LEN;
                        (off, 1 + (x >> 32) as usize % (LEN - off))
                    };
                    let n = fs.read(&f, off as u64, &mut buf[..len]).unwrap();
                    assert!(
                        version(&buf[..n], len).is_some(),
                        "{read:?}: torn read at {off}+{len}: {n} bytes, first {:?} last {:?}",
                        buf.first(),
                        buf[..n].last()
                    );
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let dropper = {
        let (fs, done) = (fs.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                fs.shrink();
                std::thread::yield_now();
            }
        })
    };
    // Readers first: on a loaded machine the writer could otherwise finish
    // every round before any reader ran (seen in a run beside a build).
    let start = std::time::Instant::now();
    while reads.load(Ordering::Relaxed) == 0 && start.elapsed().as_secs() < 10 {
        std::thread::yield_now();
    }
    for round in 0..WRITER_ROUNDS {
        writer_round(&fs, &w, round);
    }
    done.store(true, Ordering::Relaxed);
    for t in readers {
        t.join().unwrap();
    }
    dropper.join().unwrap();
    assert!(reads.load(Ordering::Relaxed) > 0);
    drop(w);
    fs.check().unwrap();
}

#[test]
fn lockless_reads_see_whole_versions_only() {
    run(ReadVariant::Lockless);
}

#[test]
fn locked_reads_see_whole_versions_only() {
    run(ReadVariant::Locked);
}
