//! A file's mtime and ctime on an image, under racing changes: pure
//! overwrites (data-side times only), chmod, ftruncate, `UTIME_NOW`,
//! growing writes and fsync/syncfs on real threads while an observer checks
//! that stat's times never go back. Then the times stat shows after a last
//! overwrite and fsync must be what a copy of the image taken right then
//! (a crash) holds, what eviction and reload keep, and what the image holds
//! after unmount.
//!
//! Knob: `LANEFS_TIMES_RACE_MS` — how long each round races (default 400;
//! three rounds).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lanefs::{FileKind, Filesystem, OpenOptions, TimeSet, Timespec};

mod common;
use common::check_then_fsck;

const SIZE: u64 = 16384;
const ROUNDS: u32 = 3;

fn race_time() -> Duration {
    let ms = std::env::var("LANEFS_TIMES_RACE_MS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(400);
    Duration::from_millis(ms)
}

fn key(t: Timespec) -> (i64, u32) {
    (t.sec, t.nsec)
}

/// Race every change on `/f` for [`race_time`], the observer checking that
/// its times never go back.
fn race(fs: &Filesystem) -> io::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let rw = || fs.open_with("/f", OpenOptions::new().read(true).write(true));
    let mut threads: Vec<std::thread::JoinHandle<io::Result<()>>> = Vec::new();
    for what in 0..6u32 {
        let (fs, f, stop) = (fs.clone(), rw()?, stop.clone());
        threads.push(std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                match what {
                    0 => drop(f.write_at(&[i as u8; 32], (i * 131) % (SIZE - 32))?),
                    1 => f.set_permissions(if i.is_multiple_of(2) { 0o600 } else { 0o644 })?,
                    2 => f.set_len(SIZE)?,
                    3 => fs.set_times("/f", Some(TimeSet::Now), Some(TimeSet::Now))?,
                    4 => {
                        f.write_at(&[1u8; 8], SIZE + i % 64)?;
                        f.set_len(SIZE)?;
                    }
                    _ => {
                        if i.is_multiple_of(4) {
                            fs.sync()?;
                        } else {
                            f.sync_all()?;
                        }
                    }
                }
                i += 1;
            }
            Ok(())
        }));
    }
    let observer = {
        let (fs, stop) = (fs.clone(), stop.clone());
        std::thread::spawn(move || -> io::Result<u64> {
            let (mut last_m, mut last_c) = ((0, 0), (0, 0));
            let mut reads = 0;
            while !stop.load(Ordering::Relaxed) {
                let m = fs.metadata("/f")?;
                let (mt, ct) = (key(m.mtime()), key(m.ctime()));
                assert!(mt >= last_m, "mtime went back: {last_m:?} then {mt:?}");
                assert!(ct >= last_c, "ctime went back: {last_c:?} then {ct:?}");
                (last_m, last_c) = (mt, ct);
                reads += 1;
            }
            Ok(reads)
        })
    };
    std::thread::sleep(race_time());
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("a changer panicked")?;
    }
    let reads = observer.join().expect("the observer panicked")?;
    assert!(reads > 0, "the observer read nothing");
    Ok(())
}

#[test]
fn racing_changes_then_fsync_keep_the_times_on_the_image() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let img = dir.path().join("fs.img");
    drop(Filesystem::create_image(&img, 64 << 20)?);
    {
        let fs = Filesystem::open_image(&img)?;
        let f = fs.open_with("/f", OpenOptions::new().write(true).create(true))?;
        f.write_at(&[5u8; SIZE as usize], 0)?;
        f.sync_all()?;
    }
    for round in 0..ROUNDS {
        let synced = dir.path().join(format!("synced-{round}.img"));
        let want = {
            let fs = Filesystem::open_image(&img)?;
            race(&fs)?;
            let f = fs.open_with("/f", OpenOptions::new().write(true))?;
            // A last pure overwrite: its times are on the data side only
            // until fsync puts them into the record.
            f.write_at(b"last", 100)?;
            let m = f.metadata()?;
            f.sync_all()?;
            std::fs::copy(&img, &synced)?;
            let after = f.metadata()?;
            assert_eq!(
                (after.mtime(), after.ctime()),
                (m.mtime(), m.ctime()),
                "fsync changed the times"
            );
            // Evicted (no handle, no lookup left) and read back.
            drop(f);
            fs.core().shrink();
            let back = fs.metadata("/f")?;
            assert_eq!(
                (back.mtime(), back.ctime(), back.len()),
                (m.mtime(), m.ctime(), SIZE),
                "round {round}: times lost by eviction"
            );
            (m.mtime(), m.ctime(), m.mode())
        };
        for image in [&synced, &img] {
            let fs = Filesystem::open_image(image)?;
            let m = fs.metadata("/f")?;
            assert_eq!(m.kind(), FileKind::Regular);
            assert_eq!(
                (m.mtime(), m.ctime(), m.mode(), m.len()),
                (want.0, want.1, want.2, SIZE),
                "round {round}, {image:?}"
            );
            let mut buf = [0u8; 4];
            fs.open_with("/f", OpenOptions::new().read(true))?
                .read_at(&mut buf, 100)?;
            assert_eq!(&buf, b"last");
            check_then_fsck(fs, image)?;
        }
    }
    Ok(())
}
