//! Per-lane open counts (`opens.rs`) under stress through the engine:
//! waves of short-lived threads (each taking a new lane, so well past the
//! 64 lane caches over the run, and lanes reused modulo 64 by threads
//! that never met) open a few names, clone handles (`reopen_unchecked`),
//! pass handles to other threads that close them, open by number, make
//! `O_TMPFILE` files, take and forget lookup counts, rename over and
//! unlink the names, while the inode cache is a few inodes and is shrunk
//! and evicted. Every handle must read back the number its file was
//! written with (an orphan's data stays readable until its last close);
//! afterwards the engine's check (which sums the lanes) must pass and
//! every inode must be freed once the handles are closed: no leak, no
//! double free (the store's used-inode count comes back to the root).

use std::sync::{Arc, Mutex};

use lanefs_core::{Cred, Fs, FsConfig, MemoryStore, OpenFile};
use lanefs_store::{Errno, Ino, ROOT_INO};

mod common;
use common::Rng;

const NAMES: [&[u8]; 3] = [b"f0", b"f1", b"f2"];

/// Shared between the waves: handles anyone may clone or close, numbers
/// anyone may open, lookup counts anyone may forget.
#[derive(Default)]
struct Shared {
    pool: Mutex<Vec<OpenFile>>,
    inos: Mutex<Vec<Ino>>,
    looked: Mutex<Vec<Ino>>,
}

/// A file's contents: its own number, so that any handle can tell it
/// reads the file it was opened on.
fn stamp(fs: &Fs, f: &OpenFile) {
    let (n, _) = fs.write(f, 0, &f.ino().to_le_bytes()).unwrap();
    assert_eq!(n, 8);
}

fn verify(fs: &Fs, f: &OpenFile) {
    if f.is_path() || f.flags() & libc::O_ACCMODE == libc::O_WRONLY {
        return;
    }
    let mut buf = [0u8; 8];
    let n = fs.read(f, 0, &mut buf).unwrap();
    assert_eq!(
        n,
        8,
        "ino {}: the data went while a handle was open",
        f.ino()
    );
    assert_eq!(
        u64::from_le_bytes(buf),
        f.ino(),
        "a handle reads another file's data"
    );
}

/// A new file with its stamp, under a temporary name renamed over `name`
/// (so a name only ever names a stamped file).
fn replace(fs: &Fs, sh: &Shared, rng: &mut Rng, tmp: &[u8], name: &[u8]) {
    let r = Cred::root();
    let flags = libc::O_CREAT | libc::O_EXCL | libc::O_RDWR;
    let (attr, f, _) = fs
        .open_at(&r, ROOT_INO, tmp, flags, 0o644, 0, false)
        .unwrap();
    stamp(fs, &f);
    fs.rename(&r, ROOT_INO, tmp, ROOT_INO, name, 0).unwrap();
    sh.inos.lock().unwrap().push(attr.ino);
    if rng.below(2) == 0 {
        sh.pool.lock().unwrap().push(f);
    }
}

fn worker(fs: &Fs, sh: &Shared, seed: u64, ops: usize) {
    let r = Cred::root();
    let mut rng = Rng(seed | 1);
    let tmp = format!("tmp{seed}").into_bytes();
    let mut mine: Vec<OpenFile> = Vec::new();
    for _ in 0..ops {
        let name = NAMES[rng.below(NAMES.len())];
        match rng.below(16) {
            0..=2 => match fs.open_at(&r, ROOT_INO, name, libc::O_RDWR, 0, 0, false) {
                Ok((attr, f, _)) => {
                    assert_eq!(attr.ino, f.ino());
                    verify(fs, &f);
                    if rng.below(2) == 0 {
                        mine.push(f);
                    } else {
                        sh.pool.lock().unwrap().push(f);
                    }
                }
                Err(Errno::ENOENT) => {}
                Err(e) => panic!("open: {e:?}"),
            },
            3 | 4 => {
                // Clone a handle someone else (maybe a thread gone) opened.
                let pool = sh.pool.lock().unwrap();
                if !pool.is_empty() {
                    let f = &pool[rng.below(pool.len())];
                    let flags = [libc::O_RDONLY, libc::O_RDWR, libc::O_WRONLY][rng.below(3)];
                    let g = f.reopen_unchecked(flags).expect("clone of an open file");
                    drop(pool);
                    verify(fs, &g);
                    mine.push(g);
                }
            }
            5..=7 => {
                // Close one, on this lane, maybe opened on another.
                let taken = {
                    let mut pool = sh.pool.lock().unwrap();
                    (!pool.is_empty()).then(|| {
                        let i = rng.below(pool.len());
                        pool.swap_remove(i)
                    })
                };
                if let Some(f) = taken {
                    verify(fs, &f);
                    drop(f);
                }
                if !mine.is_empty() && rng.below(2) == 0 {
                    let f = mine.swap_remove(rng.below(mine.len()));
                    verify(fs, &f);
                    drop(f);
                }
            }
            8 => replace(fs, sh, &mut rng, &tmp, name),
            9 => match fs.unlink(&r, ROOT_INO, name) {
                Ok(()) | Err(Errno::ENOENT) => {}
                Err(e) => panic!("unlink: {e:?}"),
            },
            10 => {
                // By number: maybe freed, maybe reused by another file
                // (whose stamp is its own number too).
                let ino = {
                    let inos = sh.inos.lock().unwrap();
                    (!inos.is_empty()).then(|| inos[rng.below(inos.len())])
                };
                if let Some(ino) = ino {
                    if rng.below(3) == 0 {
                        match fs.open_path(&r, ino.into()) {
                            Ok(f) => mine.push(f),
                            Err(Errno::ENOENT) => {}
                            Err(e) => panic!("O_PATH open by number: {e:?}"),
                        }
                        continue;
                    }
                    match fs.open(&r, ino, libc::O_RDONLY) {
                        Ok(f) => {
                            // A number reused by a file not stamped yet
                            // reads short: only a full read is compared.
                            let mut buf = [0u8; 8];
                            if fs.read(&f, 0, &mut buf).unwrap() == 8 {
                                assert_eq!(u64::from_le_bytes(buf), ino);
                            }
                            if rng.below(2) == 0 {
                                drop(f);
                            }
                        }
                        Err(Errno::ENOENT) | Err(Errno::ENXIO) | Err(Errno::EISDIR) => {}
                        Err(e) => panic!("open by number: {e:?}"),
                    }
                }
            }
            11 => {
                let (attr, f) = fs
                    .tmpfile(&r, ROOT_INO, libc::O_RDWR, 0o600, 0, false)
                    .unwrap();
                assert_eq!(attr.nlink, 0);
                stamp(fs, &f);
                sh.inos.lock().unwrap().push(attr.ino);
                if rng.below(2) == 0 {
                    sh.pool.lock().unwrap().push(f);
                }
            }
            12 => match fs.lookup_counted(&r, ROOT_INO, name) {
                Ok(a) => sh.looked.lock().unwrap().push(a.ino),
                Err(Errno::ENOENT) => {}
                Err(e) => panic!("lookup: {e:?}"),
            },
            13 => {
                let ino = sh.looked.lock().unwrap().pop();
                if let Some(ino) = ino {
                    fs.forget(ino, 1);
                }
            }
            14 => {
                fs.shrink();
            }
            _ => {
                for f in &mine {
                    verify(fs, f);
                }
                if rng.below(4) == 0 {
                    // Move to another lane (maybe one past the 64 caches,
                    // or one another thread uses): the handles opened on
                    // the old one are closed on the new one.
                    lanefs_store::set_lane(rng.below(200));
                }
            }
        }
    }
    // Half of what is left goes to threads of later waves.
    for f in mine {
        // (An `O_PATH` handle by number may be on a file not stamped yet:
        // not one to clone for reading.)
        if !f.is_path() && rng.below(2) == 0 {
            sh.pool.lock().unwrap().push(f);
        }
    }
}

fn setup(cache_inodes_max: usize) -> (Arc<MemoryStore>, Fs, Shared) {
    let store = Arc::new(MemoryStore::default());
    let config = FsConfig {
        cache_inodes_max,
        cache_pages_max: 16,
        ..FsConfig::default()
    };
    let fs = Fs::new(store.clone(), config).unwrap();
    let sh = Shared::default();
    let mut rng = Rng(7);
    for name in NAMES {
        replace(&fs, &sh, &mut rng, b"init", name);
    }
    (store, fs, sh)
}

/// Run `waves` waves of `threads` new threads (each a new lane).
fn run_waves(fs: &Fs, sh: &Shared, waves: u64, threads: u64, ops: usize) {
    for w in 0..waves {
        std::thread::scope(|s| {
            for t in 0..threads {
                s.spawn(move || worker(fs, sh, 0x9E37_79B9 ^ (w * 1000 + t), ops));
            }
        });
        if let Err(p) = fs.check() {
            panic!("inconsistent after wave {w}: {p:#?}");
        }
    }
}

/// Forget the lookups left, close every handle (on threads of their own:
/// new lanes), remove the names.
fn wind_down(fs: &Fs, sh: &Shared) {
    for ino in sh.looked.lock().unwrap().drain(..) {
        fs.forget(ino, 1);
    }
    let handles: Vec<OpenFile> = sh.pool.lock().unwrap().drain(..).collect();
    for f in &handles {
        verify(fs, f);
    }
    let mut chunks: Vec<Vec<OpenFile>> = (0..4).map(|_| Vec::new()).collect();
    for (i, f) in handles.into_iter().enumerate() {
        chunks[i % 4].push(f);
    }
    std::thread::scope(|s| {
        for c in chunks {
            s.spawn(move || drop(c));
        }
    });
    for name in NAMES {
        match fs.unlink(&Cred::root(), ROOT_INO, name) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => panic!("unlink: {e:?}"),
        }
    }
}

#[test]
fn many_lanes_open_clone_close_unlink_rename_evict() {
    let (store, fs, sh) = setup(4);
    let free_before = fs.statfs().unwrap().files_free + NAMES.len() as u64;
    run_waves(&fs, &sh, 8, 16, 1200);
    wind_down(&fs, &sh);
    fs.shrink();
    if let Err(p) = fs.check() {
        panic!("inconsistent at the end: {p:#?}");
    }
    assert_eq!(
        fs.statfs().unwrap().files_free,
        free_before,
        "an inode leaked (or was freed twice)"
    );
    assert_eq!(store.inode_records(), 1, "only the root is left");
    drop(fs);
    assert_eq!(store.inode_records(), 1);
}

/// The same with the last `Fs` dropped while handles (of orphans among
/// them) are open: the handles keep the engine, read their files, and the
/// last close, on a new lane, frees what is unlinked.
#[test]
fn handles_outlive_the_fs_under_churn() {
    let (store, fs, sh) = setup(2);
    run_waves(&fs, &sh, 4, 12, 1000);
    for ino in sh.looked.lock().unwrap().drain(..) {
        fs.forget(ino, 1);
    }
    for name in NAMES {
        let _ = fs.unlink(&Cred::root(), ROOT_INO, name);
    }
    let handles: Vec<OpenFile> = sh.pool.lock().unwrap().drain(..).collect();
    let reader = fs.clone();
    for f in &handles {
        verify(&reader, f);
    }
    drop(reader);
    drop(fs);
    // Every name is gone: whatever is left is open, an orphan.
    std::thread::scope(|s| {
        for c in handles.chunks(8) {
            s.spawn(move || {
                for f in c {
                    let g = f.reopen_unchecked(libc::O_RDONLY).unwrap();
                    drop(g);
                }
            });
        }
    });
    let n = handles.len();
    let mut handles = handles;
    while let Some(f) = handles.pop() {
        std::thread::spawn(move || drop(f)).join().unwrap();
    }
    assert_eq!(
        store.inode_records(),
        1,
        "an orphan outlived its last close ({n} handles)"
    );
}
