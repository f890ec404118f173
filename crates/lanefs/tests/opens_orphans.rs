//! Open files and orphans through the path API under churn, on memory and
//! on an image whose inode cache and block cache are tiny (objects evicted
//! and read back all the time): waves of new threads (new lanes, well past
//! the engine's 64 lane caches over the run) open a few names, clone
//! handles (`try_clone`), hand handles to later threads that close them,
//! rename new files over the names and remove them, and shrink the cache.
//! Every file holds its own inode number, so a handle that reads anything
//! else (or nothing: an orphan's data freed under an open handle) fails.
//! At the end, with every handle closed and every name removed, the
//! engine's check is clean, the inode count is back where it began, and
//! `lanefs fsck` finds the image clean (no orphan left behind).

mod common;

use std::io;
use std::sync::Mutex;
use std::time::Duration;

use lanefs::{File, Filesystem, FsConfig, MemoryStoreConfig};

const NAMES: [&str; 3] = ["/a", "/b", "/c"];

use common::Rng;

fn verify(f: &File) {
    let mut buf = [0u8; 8];
    f.read_exact_at(&mut buf, 0)
        .unwrap_or_else(|e| panic!("ino {}: {e}", f.ino()));
    assert_eq!(u64::from_le_bytes(buf), f.ino(), "another file's data");
}

/// A new file holding its number, renamed over `name`.
fn replace(fs: &Filesystem, tmp: &str, name: &str) -> File {
    let f = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(fs, tmp)
        .unwrap();
    f.write_all_at(&f.ino().to_le_bytes(), 0).unwrap();
    fs.rename(tmp, name).unwrap();
    f
}

fn worker(fs: &Filesystem, pool: &Mutex<Vec<File>>, seed: u64, ops: usize) {
    let mut rng = Rng(seed | 1);
    let tmp = format!("/tmp{seed}");
    let mut mine = Vec::new();
    for _ in 0..ops {
        let name = NAMES[rng.index(NAMES.len())];
        match rng.index(8) {
            0 | 1 => match fs.open(name) {
                Ok(f) => {
                    verify(&f);
                    mine.push(f);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => panic!("open {name}: {e}"),
            },
            2 => {
                let pool = pool.lock().unwrap();
                if !pool.is_empty() {
                    let g = pool[rng.index(pool.len())].try_clone().unwrap();
                    drop(pool);
                    verify(&g);
                    mine.push(g);
                }
            }
            3 => {
                let f = pool.lock().unwrap().pop();
                if let Some(f) = f {
                    verify(&f);
                }
                if !mine.is_empty() {
                    let f = mine.swap_remove(rng.index(mine.len()));
                    if rng.index(2) == 0 {
                        pool.lock().unwrap().push(f);
                    }
                }
            }
            4 => {
                let f = replace(fs, &tmp, name);
                pool.lock().unwrap().push(f);
            }
            5 => match fs.remove_file(name) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => panic!("remove {name}: {e}"),
            },
            6 => {
                fs.core().shrink();
            }
            _ => mine.iter().for_each(verify),
        }
    }
    pool.lock().unwrap().extend(mine);
}

fn churn(fs: &Filesystem, waves: u64, threads: u64, ops: usize) {
    let before = fs.statfs().unwrap();
    for name in NAMES {
        drop(replace(fs, "/init", name));
    }
    let pool = Mutex::new(Vec::new());
    for w in 0..waves {
        std::thread::scope(|s| {
            for t in 0..threads {
                let pool = &pool;
                s.spawn(move || worker(fs, pool, w * 100 + t, ops));
            }
        });
        fs.core()
            .check()
            .unwrap_or_else(|p| panic!("after wave {w}: {p:#?}"));
    }
    for name in NAMES {
        let _ = fs.remove_file(name);
    }
    // Every file left is an orphan now: readable until its last close,
    // which a thread of its own (a new lane) makes.
    let left: Vec<File> = pool.into_inner().unwrap();
    left.iter().for_each(verify);
    fs.core().shrink();
    left.iter().for_each(verify);
    std::thread::scope(|s| {
        for c in left.chunks(left.len().div_ceil(4).max(1)) {
            s.spawn(move || c.iter().for_each(verify));
        }
    });
    for f in left {
        std::thread::spawn(move || drop(f)).join().unwrap();
    }
    fs.core().check().unwrap();
    assert_eq!(
        fs.statfs().unwrap().files_free,
        before.files_free,
        "an orphan outlived its last close"
    );
}

#[test]
fn orphans_on_memory() {
    let config = FsConfig {
        cache_inodes_max: 4,
        cache_pages_max: 8,
        ..FsConfig::default()
    };
    let fs = Filesystem::in_memory(MemoryStoreConfig::default(), config).unwrap();
    churn(&fs, 5, 12, 300);
}

#[test]
fn orphans_on_an_image_with_tiny_caches() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("o.img");
    lanefs_image::mkfs(&img, 64 << 20).unwrap();
    let config = FsConfig {
        cache_inodes_max: 4,
        cache_pages_max: 8,
        ..FsConfig::default()
    };
    let store = lanefs::ImageConfig {
        commit_interval: Some(Duration::from_millis(20)),
        cache_bytes: Some(4096),
    };
    let fs = Filesystem::open_image_with(&img, &store, config).unwrap();
    churn(&fs, 4, 10, 300);
    common::check_then_fsck(fs, &img).unwrap();
}
