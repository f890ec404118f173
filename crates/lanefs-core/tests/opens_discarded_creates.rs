//! Creates discarded on a store error (`discard_new`: the new inode is
//! sealed unused, never having had a handle) racing opens, closes and
//! forgets by number of the numbers being handed out, on many lanes, with
//! a tiny inode cache: no handle is made to an unborn or discarded inode
//! (an open by number of one fails, or opens a file that reads as its own),
//! and once everything is closed and removed, check is clean and every
//! number is back (nothing leaked, nothing freed twice).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

mod common;

use common::{Call, HookedStore};
use lanefs_core::{Cred, Errno, Fs, FsConfig, OpenFile, ROOT_INO};

#[test]
fn discarded_creates_racing_opens_by_number() {
    let calls = Arc::new(AtomicU64::new(1));
    let store = {
        let calls = calls.clone();
        HookedStore::new(move |call| {
            // Every third entry insert fails while the counter runs.
            let n = calls.load(Ordering::Relaxed);
            if call == Call::DirInsert
                && n != 0
                && calls.fetch_add(1, Ordering::Relaxed).is_multiple_of(3)
            {
                return Err(Errno::EIO);
            }
            Ok(())
        })
    };
    let config = FsConfig {
        cache_inodes_max: 4,
        ..FsConfig::default()
    };
    let fs = Fs::new(Arc::new(store), config).unwrap();
    let r = Cred::root();
    let free_before = fs.statfs().unwrap().files_free;
    let last = AtomicU64::new(0);
    let pool: Mutex<Vec<OpenFile>> = Mutex::new(Vec::new());
    let (made, failed) = (AtomicU64::new(0), AtomicU64::new(0));
    for wave in 0..5u64 {
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let (fs, r, last, pool, made, failed) = (&fs, &r, &last, &pool, &made, &failed);
                s.spawn(move || {
                    for i in 0..600u64 {
                        match (t + i) % 4 {
                            0 | 1 => {
                                let name = format!("c{wave}_{t}_{i}");
                                let flags = libc::O_CREAT | libc::O_EXCL | libc::O_RDWR;
                                let made_now = if i % 8 == 0 {
                                    fs.tmpfile(r, ROOT_INO, libc::O_RDWR, 0o600, 0, false)
                                } else {
                                    fs.open_at(r, ROOT_INO, name.as_bytes(), flags, 0o644, 0, false)
                                        .map(|(a, f, _)| (a, f))
                                };
                                match made_now {
                                    Ok((a, f)) => {
                                        fs.write(&f, 0, &a.ino.to_le_bytes()).unwrap();
                                        last.fetch_max(a.ino, Ordering::Relaxed);
                                        made.fetch_add(1, Ordering::Relaxed);
                                        pool.lock().unwrap().push(f);
                                    }
                                    Err(Errno::EIO) => {
                                        failed.fetch_add(1, Ordering::Relaxed);
                                    }
                                    Err(e) => panic!("create: {e:?}"),
                                }
                            }
                            2 => {
                                // Numbers about to be handed out (maybe
                                // unborn, maybe discarded) and just handed.
                                let base = last.load(Ordering::Relaxed);
                                for ino in base.saturating_sub(2)..base + 4 {
                                    if ino <= ROOT_INO {
                                        continue;
                                    }
                                    if let Ok(f) = fs.open(r, ino, libc::O_RDONLY) {
                                        let mut buf = [0u8; 8];
                                        if fs.read(&f, 0, &mut buf).unwrap() == 8 {
                                            assert_eq!(u64::from_le_bytes(buf), ino);
                                        }
                                        if ino % 2 == 0 {
                                            pool.lock().unwrap().push(f);
                                        }
                                    }
                                    fs.forget(ino, 1);
                                }
                            }
                            _ => {
                                let f = pool.lock().unwrap().pop();
                                drop(f);
                                if i % 16 == 3 {
                                    fs.shrink();
                                }
                            }
                        }
                    }
                });
            }
        });
        if let Err(p) = fs.check() {
            panic!("inconsistent after wave {wave}: {p:#?}");
        }
    }
    calls.store(0, Ordering::Relaxed);
    assert!(made.load(Ordering::Relaxed) > 0 && failed.load(Ordering::Relaxed) > 0);
    let left: Vec<OpenFile> = pool.into_inner().unwrap();
    std::thread::spawn(move || drop(left)).join().unwrap();
    let dir = fs.open(&r, ROOT_INO, libc::O_RDONLY).unwrap();
    let mut names: Vec<Vec<u8>> = Vec::new();
    fs.readdir(&dir, 0, &mut |e| {
        if e.name != b"." && e.name != b".." {
            names.push(e.name.to_vec());
        }
        false
    })
    .unwrap();
    drop(dir);
    for n in names {
        fs.unlink(&r, ROOT_INO, &n).unwrap();
    }
    if let Err(p) = fs.check() {
        panic!("inconsistent at the end: {p:#?}");
    }
    assert_eq!(
        fs.statfs().unwrap().files_free,
        free_before,
        "a number leaked"
    );
}
