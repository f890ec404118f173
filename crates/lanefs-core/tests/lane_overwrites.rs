//! Overwrites of one file from many lanes (`pcache::lanes`): once two
//! lanes have overwritten a file, a pure overwrite inside one cached page
//! takes only its page's stripe. These tests race such overwrites against
//! lock-free readers, truncates, fsync and page drops, and check what the
//! data lock used to guarantee:
//! * a read sees each overwrite whole (every page of a read holds one
//!   overwrite's bytes, never a mix);
//! * no overwrite is lost: what a read returns after `fsync` and a page
//!   drop is what it returned before (a page an overwrite dirtied under its
//!   stripe is written back, not dropped as clean);
//! * the file's mtime is the latest overwrite's, and goes back only when
//!   `utimens` sets it.
//!
//! Knob: `LANEFS_LANE_RACE_MS` — how long the race runs (default 1000).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lanefs_core::*;

mod common;

const PAGES: u64 = 6;
const SIZE: u64 = PAGES * PAGE_SIZE as u64;

fn race_time() -> Duration {
    Duration::from_millis(common::knob("LANEFS_LANE_RACE_MS", 1000))
}

/// `/f` of [`SIZE`] bytes of 1, open read-write, and its inode.
fn file(fs: &Fs) -> (Ino, OpenFile) {
    let (a, f) = common::create_rw(fs, b"f");
    fs.write(&f, 0, &[1u8; SIZE as usize]).unwrap();
    (a.ino, f)
}

/// Overwrite page `page` of `f` with `byte` from a fresh thread (a lane
/// of its own).
fn overwrite_on_new_lane(fs: &Fs, f: &Arc<OpenFile>, page: u64, byte: u8) {
    let (fs, f) = (fs.clone(), f.clone());
    std::thread::spawn(move || {
        fs.write(&f, page * PAGE_SIZE as u64, &[byte; PAGE_SIZE])
            .unwrap();
    })
    .join()
    .unwrap();
}

/// The pieces of `buf` (read at `off`) page by page: each must be one byte
/// repeated.
fn assert_pages_whole(buf: &[u8], off: u64) {
    let mut at = 0usize;
    while at < buf.len() {
        let pos = off + at as u64;
        let end = (at + PAGE_SIZE - (pos % PAGE_SIZE as u64) as usize).min(buf.len());
        let piece = &buf[at..end];
        assert!(
            piece.iter().all(|b| *b == piece[0]),
            "torn page at {pos}: {:?} … {:?}",
            &piece[..piece.len().min(8)],
            &piece[piece.len().saturating_sub(8)..]
        );
        at = end;
    }
}

#[test]
fn overwrites_from_many_lanes_are_whole_and_never_lost() {
    let fs = Fs::new_in_memory();
    let (_, f) = file(&fs);
    let f = Arc::new(f);
    // Two lanes overwrite it through the locked path: it gets stripes.
    overwrite_on_new_lane(&fs, &f, 0, 2);
    overwrite_on_new_lane(&fs, &f, 1, 3);
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for w in 0..2u64 {
        let (fs, f, stop) = (fs.clone(), f.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let mut i = w;
            while !stop.load(Ordering::Relaxed) {
                // Mostly a lane's own page, sometimes the other's or a
                // shared one; bytes never 0 (a truncated page reads 0).
                let page = match i % 8 {
                    0 => (w + 1) % 2,
                    1 => 4,
                    _ => w,
                };
                let byte = 10 + (i % 200) as u8;
                fs.write(&f, page * PAGE_SIZE as u64, &[byte; PAGE_SIZE])
                    .unwrap();
                i += 2;
            }
        }));
    }
    {
        // Exclusive changes between the overwrites: truncate away the last
        // page and back, fsync (writeback folds the stripes' pages), page
        // drops (which must keep every dirty page).
        let (fs, f, stop) = (fs.clone(), f.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let root = Cred::root();
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                match i % 3 {
                    0 => {
                        let to = |size| SetAttr {
                            size: Some(size),
                            ..Default::default()
                        };
                        fs.setattr(&root, f.ino(), &to(SIZE - PAGE_SIZE as u64), Some(&f))
                            .unwrap();
                        fs.setattr(&root, f.ino(), &to(SIZE), Some(&f)).unwrap();
                    }
                    1 => fs.fsync(&f, false).unwrap(),
                    _ => {
                        fs.shrink();
                    }
                }
                i += 1;
                std::thread::yield_now();
            }
        }));
    }
    for r in 0..2u64 {
        let (fs, f, stop, reads) = (fs.clone(), f.clone(), stop.clone(), reads.clone());
        threads.push(std::thread::spawn(move || {
            let mut buf = vec![0u8; SIZE as usize];
            let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ r;
            while !stop.load(Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let off = (x >> 8) % SIZE;
                let len = 1 + ((x >> 32) % (SIZE - off)) as usize;
                let n = fs.read(&f, off, &mut buf[..len]).unwrap();
                assert_pages_whole(&buf[..n], off);
                reads.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    std::thread::sleep(race_time());
    stop.store(true, Ordering::Relaxed);
    let mut failure = None;
    for t in threads {
        if let Err(e) = t.join() {
            failure.get_or_insert(e);
        }
    }
    if let Some(e) = failure {
        std::panic::resume_unwind(e);
    }
    assert!(
        reads.load(Ordering::Relaxed) > 0,
        "the readers read nothing"
    );
    // One more overwrite under a stripe after the last writeback, then
    // nothing may be lost by a page drop without fsync's writeback...
    overwrite_on_new_lane(&fs, &f, 3, 250);
    let mut before = vec![0u8; SIZE as usize];
    assert_eq!(fs.read(&f, 0, &mut before).unwrap(), SIZE as usize);
    assert_eq!(before[3 * PAGE_SIZE], 250);
    fs.shrink();
    let mut after = vec![0u8; SIZE as usize];
    fs.read(&f, 0, &mut after).unwrap();
    assert!(before == after, "a page drop lost an overwrite");
    // ... nor by writeback and a drop of everything clean.
    fs.sync().unwrap();
    fs.shrink();
    fs.read(&f, 0, &mut after).unwrap();
    assert!(before == after, "writeback lost an overwrite");
    drop(f);
    fs.check().unwrap();
}

#[test]
fn mtime_follows_overwrites_from_many_lanes_and_utimens() {
    let fs = Fs::new_in_memory();
    let root = Cred::root();
    let (ino, f) = file(&fs);
    let f = Arc::new(f);
    overwrite_on_new_lane(&fs, &f, 0, 2);
    overwrite_on_new_lane(&fs, &f, 1, 3);
    let future = Timespec {
        sec: 4_000_000_000,
        nsec: 5,
    };
    let set = SetAttr {
        mtime: Some(TimeSet::At(future)),
        ..Default::default()
    };
    fs.setattr(&root, ino, &set, None).unwrap();
    assert_eq!(fs.getattr(ino).unwrap().mtime, future);
    // An overwrite after utimens into the future sets mtime to now, as
    // Linux does (file_update_time), the second one under its stripe.
    for page in [2, 2, 5] {
        let before = Timespec::now();
        overwrite_on_new_lane(&fs, &f, page, 9);
        let a = fs.getattr(ino).unwrap();
        assert!(a.mtime >= before && a.mtime < future, "mtime {:?}", a.mtime);
        assert!(a.ctime >= a.mtime);
        assert_eq!(a.size, SIZE);
    }
    // The times reach the record at sync and survive an eviction.
    let shown = fs.getattr(ino).unwrap();
    fs.sync().unwrap();
    drop(f);
    fs.shrink();
    let again = fs.getattr(ino).unwrap();
    assert_eq!((again.mtime, again.ctime), (shown.mtime, shown.ctime));
    fs.check().unwrap();
}

#[test]
fn writes_a_stripe_cannot_take_go_down_the_locked_path() {
    let fs = Fs::new_in_memory();
    let (ino, f) = file(&fs);
    let f = Arc::new(f);
    overwrite_on_new_lane(&fs, &f, 0, 2);
    overwrite_on_new_lane(&fs, &f, 1, 3);
    // Past the size, across a page boundary, at the end of the offsets.
    let near_end = u64::MAX - 2;
    assert_eq!(fs.write(&f, near_end, &[1; 3]), Err(Errno::EFBIG));
    let across = PAGE_SIZE as u64 - 2;
    assert_eq!(fs.write(&f, across, &[4; 4]).unwrap().0, 4);
    assert_eq!(fs.write(&f, SIZE - 1, &[5; 2]).unwrap().0, 2);
    let a = fs.getattr(ino).unwrap();
    assert_eq!(a.size, SIZE + 1);
    let mut buf = [0u8; 6];
    fs.read(&f, across - 1, &mut buf).unwrap();
    assert_eq!(buf, [2, 4, 4, 4, 4, 3]);
    drop(f);
    fs.check().unwrap();
}
