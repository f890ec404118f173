//! A directory's link count with its subdirectories counted per stripe
//! (`dir_attr`): mkdirs, rmdirs and renames moving directories in
//! different stripes of one directory, racing stats, write-backs (folds)
//! and index take-outs, leave it exact; every value a stat sees is one the
//! directory could have had; `LINK_MAX` is never passed and `EMLINK` comes
//! exactly at it, also from many threads at once and after a reload.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use lanefs_core::*;

fn fs() -> Fs {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig {
        capacity_bytes: 1 << 26,
        max_inodes: 1 << 20,
    }));
    Fs::new(store, FsConfig::default()).unwrap()
}

fn checked(fs: &Fs, what: &str) {
    if let Err(problems) = fs.check() {
        panic!("{what}: check failed: {problems:#?}");
    }
}

/// Writers make subdirectories of `d` (keeping some, removing others at
/// once, moving some to `e` and back) while a reader stats `d`, another
/// thread writes everything back (folding the stripes into the record)
/// and another shrinks (taking the index out). Every link count seen is
/// between 2 and 2 + the subdirectories made so far; at the end it is
/// 2 + those kept, in memory, after a shrink and reload, and in the store.
#[test]
fn racing_mkdir_rmdir_rename_keep_the_link_count_exact() {
    const WRITERS: usize = 3;
    const EACH: usize = 600;
    let fs = fs();
    let r = Cred::root();
    let d = fs.mkdir(&r, ROOT_INO, b"d", 0o755, 0).unwrap();
    let e = fs.mkdir(&r, ROOT_INO, b"e", 0o755, 0).unwrap();
    let made = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // The writers start once the reader has read: on two cores they could
    // otherwise all finish before the reader is scheduled at all.
    let reader_ran = Arc::new(AtomicBool::new(false));
    let kept: usize = std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|t| {
                let (fs, made, reader_ran) = (fs.clone(), made.clone(), reader_ran.clone());
                s.spawn(move || {
                    while !reader_ran.load(Ordering::SeqCst) {
                        std::thread::yield_now();
                    }
                    let r = Cred::root();
                    let mut kept = 0;
                    for i in 0..EACH {
                        let name = format!("t{t}-{i}");
                        made.fetch_add(1, Ordering::SeqCst);
                        fs.mkdir(&r, d.ino, name.as_bytes(), 0o755, 0).unwrap();
                        match i % 4 {
                            0 => fs.rmdir(&r, d.ino, name.as_bytes()).unwrap(),
                            1 => {
                                // Out to `e` and back under another name
                                // (another stripe, most likely).
                                let back = format!("{name}-back");
                                fs.rename(&r, d.ino, name.as_bytes(), e.ino, name.as_bytes(), 0)
                                    .unwrap();
                                fs.rename(&r, e.ino, name.as_bytes(), d.ino, back.as_bytes(), 0)
                                    .unwrap();
                                kept += 1;
                            }
                            2 => {
                                // Renamed within `d`, then removed under
                                // its new name (its link leaves another
                                // stripe than it came in by).
                                let moved = format!("{name}-moved");
                                fs.rename(&r, d.ino, name.as_bytes(), d.ino, moved.as_bytes(), 0)
                                    .unwrap();
                                fs.rmdir(&r, d.ino, moved.as_bytes()).unwrap();
                            }
                            _ => kept += 1,
                        }
                    }
                    kept
                })
            })
            .collect();
        let reader = {
            let (fs, made, stop) = (fs.clone(), made.clone(), stop.clone());
            let reader_ran = reader_ran.clone();
            s.spawn(move || {
                let mut seen = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    // Read the bound after the stat: every subdirectory
                    // the stat counted was announced before.
                    let nlink = fs.getattr(d.ino).unwrap().nlink as usize;
                    let bound = made.load(Ordering::SeqCst);
                    assert!(
                        (2..=2 + bound).contains(&nlink),
                        "nlink {nlink} with {bound} subdirectories made"
                    );
                    seen += 1;
                    reader_ran.store(true, Ordering::SeqCst);
                }
                seen
            })
        };
        let folder = {
            let (fs, stop) = (fs.clone(), stop.clone());
            s.spawn(move || {
                let mut i = 0u32;
                while !stop.load(Ordering::SeqCst) {
                    if i.is_multiple_of(2) {
                        fs.sync().unwrap();
                    } else {
                        fs.shrink();
                    }
                    i += 1;
                    std::thread::yield_now();
                }
            })
        };
        let kept = writers.into_iter().map(|w| w.join().unwrap()).sum();
        stop.store(true, Ordering::SeqCst);
        assert!(reader.join().unwrap() > 0, "the reader never ran");
        folder.join().unwrap();
        kept
    });
    let want = 2 + kept as u32;
    assert_eq!(fs.getattr(d.ino).unwrap().nlink, want, "in memory");
    assert_eq!(fs.getattr(e.ino).unwrap().nlink, 2, "e");
    fs.shrink();
    assert_eq!(fs.getattr(d.ino).unwrap().nlink, want, "after a reload");
    checked(&fs, "after the race");
}

/// Threads make subdirectories in one directory until each gets
/// `EMLINK`: exactly `LINK_MAX - 2` are made, whatever the interleaving
/// and however the links were spread over the stripes' rooms. Then one
/// removed makes room for exactly one (in any stripe), also after the
/// index was taken out and reloaded; a directory moved in gets `EMLINK`
/// too, and the store agrees.
#[test]
fn emlink_comes_exactly_at_link_max_from_many_threads() {
    const THREADS: usize = 8;
    let fs = fs();
    let r = Cred::root();
    let p = fs.mkdir(&r, ROOT_INO, b"p", 0o755, 0).unwrap();
    let made: usize = std::thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                let fs = fs.clone();
                s.spawn(move || {
                    let r = Cred::root();
                    let mut made = 0;
                    for i in 0u32.. {
                        let name = format!("t{t}-{i}");
                        match fs.mkdir(&r, p.ino, name.as_bytes(), 0o755, 0) {
                            Ok(a) => {
                                fs.forget(a.ino, 1);
                                made += 1;
                            }
                            Err(e) => {
                                assert_eq!(e, Errno::EMLINK, "{name}");
                                break;
                            }
                        }
                        if i.is_multiple_of(5000) && t == 0 {
                            // A fold in the middle (rooms stay granted).
                            fs.sync().unwrap();
                        }
                    }
                    made
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(made, (LINK_MAX - 2) as usize);
    assert_eq!(fs.getattr(p.ino).unwrap().nlink, LINK_MAX);
    // Full from every stripe's point of view.
    for i in 0..64 {
        let name = format!("late-{i}");
        assert_eq!(
            fs.mkdir(&r, p.ino, name.as_bytes(), 0o755, 0).unwrap_err(),
            Errno::EMLINK,
            "{name}"
        );
    }
    // A directory moved in is refused too, and changes nothing.
    let q = fs.mkdir(&r, ROOT_INO, b"q", 0o755, 0).unwrap();
    fs.mkdir(&r, q.ino, b"sub", 0o755, 0).unwrap();
    assert_eq!(
        fs.rename(&r, q.ino, b"sub", p.ino, b"sub", 0).unwrap_err(),
        Errno::EMLINK
    );
    assert_eq!(fs.getattr(q.ino).unwrap().nlink, 3);
    // One removed: exactly one fits again, whichever stripe asks.
    fs.rmdir(&r, p.ino, b"t0-0").unwrap();
    let mut fitted = 0;
    for i in 0..64 {
        if fs
            .mkdir(&r, p.ino, format!("again-{i}").as_bytes(), 0o755, 0)
            .is_ok()
        {
            fitted += 1;
        }
    }
    assert_eq!(fitted, 1);
    assert_eq!(fs.getattr(p.ino).unwrap().nlink, LINK_MAX);
    // Taken out and reloaded: still full, still exact.
    fs.shrink();
    assert_eq!(fs.getattr(p.ino).unwrap().nlink, LINK_MAX);
    assert_eq!(
        fs.mkdir(&r, p.ino, b"after-reload", 0o755, 0).unwrap_err(),
        Errno::EMLINK
    );
    fs.rmdir(&r, p.ino, b"t1-0").unwrap();
    assert_eq!(fs.getattr(p.ino).unwrap().nlink, LINK_MAX - 1);
    fs.rename(&r, q.ino, b"sub", p.ino, b"sub", 0).unwrap();
    assert_eq!(fs.getattr(p.ino).unwrap().nlink, LINK_MAX);
    assert_eq!(fs.getattr(q.ino).unwrap().nlink, 2);
    assert_eq!(
        fs.mkdir(&r, p.ino, b"one-more", 0o755, 0).unwrap_err(),
        Errno::EMLINK
    );
    checked(&fs, "at the limit");
}

/// RENAME_EXCHANGE of a directory with a non-directory across parents
/// moves one link from one parent to the other, and is refused with
/// `EMLINK` when the gaining parent is full.
#[test]
fn exchange_moves_a_link_between_parents() {
    let fs = fs();
    let r = Cred::root();
    let a = fs.mkdir(&r, ROOT_INO, b"a", 0o755, 0).unwrap();
    let b = fs.mkdir(&r, ROOT_INO, b"b", 0o755, 0).unwrap();
    fs.mkdir(&r, a.ino, b"dir", 0o755, 0).unwrap();
    fs.mknod(&r, b.ino, b"file", 0o644, 0, 0).unwrap();
    fs.rename(&r, a.ino, b"dir", b.ino, b"file", RENAME_EXCHANGE)
        .unwrap();
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 2);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 3);
    fs.rename(&r, a.ino, b"dir", b.ino, b"file", RENAME_EXCHANGE)
        .unwrap();
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 3);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 2);
    fs.shrink();
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 3);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 2);
    checked(&fs, "after exchanges");
}
