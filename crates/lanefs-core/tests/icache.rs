//! Inode cache (seed 000) through the public API, for every icache design:
//! the budget, eviction with pinned inodes, counter drift, a failing store,
//! and a multi-threaded stress of cold lookups with a tiny budget.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lanefs_core::*;

mod common;
use common::{Call, HookedStore};

const ALL: [IcacheVariant; 4] = [
    IcacheVariant::Rcu,
    IcacheVariant::Global,
    IcacheVariant::RcuGlobalInsert,
    IcacheVariant::BucketLock,
];

fn fs_with(icache: IcacheVariant, cache_inodes_max: usize, store: Arc<dyn Store>) -> Fs {
    let mut config = FsConfig {
        cache_inodes_max,
        ..FsConfig::default()
    };
    config.variants.icache = icache;
    Fs::new(store, config).unwrap()
}

fn memory_store() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new(MemoryStoreConfig {
        capacity_bytes: 1 << 26,
        max_inodes: 1 << 20,
    }))
}

fn checked(fs: &Fs, what: &str) {
    if let Err(problems) = fs.check() {
        panic!("{what}: check failed: {problems:#?}");
    }
}

fn name(i: usize) -> Vec<u8> {
    format!("f{i}").into_bytes()
}

/// Regression: `alloc_inode` ignored the budget (10,000 cached with a limit
/// of 100).
#[test]
fn creation_respects_the_inode_budget() {
    for v in ALL {
        let fs = fs_with(v, 100, memory_store());
        let r = Cred::root();
        for i in 0..10_000 {
            let a = fs.mknod(&r, ROOT_INO, &name(i), 0o644, 0, 0).unwrap();
            fs.forget(a.ino, 1);
        }
        let (inodes, _) = fs.cache_counts();
        assert!(
            inodes <= 100,
            "{v:?}: {inodes} inodes cached with a budget of 100"
        );
        checked(&fs, &format!("{v:?}"));
        // Everything is still there, read back from the store.
        for i in (0..10_000).step_by(997) {
            let a = fs.lookup(&r, ROOT_INO, &name(i)).unwrap();
            assert_eq!(fs.getattr(a.ino).unwrap().ino, a.ino);
        }
    }
}

/// Regression (eviction cliff): with pinned inodes filling the budget, cold
/// lookups still evict unreferenced inodes and the cache stays at budget
/// plus the pinned ones; pinned inodes are never evicted.
#[test]
fn pinned_inodes_do_not_block_eviction() {
    for v in ALL {
        let fs = fs_with(v, 64, memory_store());
        let r = Cred::root();
        let mut pinned = Vec::new();
        for i in 0..64 {
            // Counted: each keeps one lookup reference.
            pinned.push(fs.mknod(&r, ROOT_INO, &name(i), 0o644, 0, 0).unwrap().ino);
        }
        let mut cold = Vec::new();
        for i in 64..2064 {
            let a = fs.mknod(&r, ROOT_INO, &name(i), 0o644, 0, 0).unwrap();
            fs.forget(a.ino, 1);
            cold.push(a.ino);
        }
        fs.shrink();
        for &ino in &cold {
            assert_eq!(fs.getattr(ino).unwrap().ino, ino);
            let (inodes, _) = fs.cache_counts();
            assert!(inodes <= 64 + 64 + 16, "{v:?}: {inodes} cached");
        }
        for &ino in &pinned {
            fs.forget(ino, 1);
        }
        checked(&fs, &format!("{v:?}"));
    }
}

/// Regression: `cached_inodes` drifted when a freed number was reused by a
/// new inode before the old cache entry was removed. Two threads create and
/// unlink in one directory so numbers recycle; the checker compares the
/// counter with the table.
#[test]
fn cached_inodes_counter_does_not_drift() {
    for v in ALL {
        let fs = fs_with(v, 32, memory_store());
        let threads: Vec<_> = (0..3)
            .map(|t| {
                let fs = fs.clone();
                std::thread::spawn(move || {
                    let r = Cred::root();
                    for i in 0..1500 {
                        let n = format!("t{t}-{}", i % 7).into_bytes();
                        if let Ok(a) = fs.mknod(&r, ROOT_INO, &n, 0o644, 0, 0) {
                            fs.forget(a.ino, 1);
                        }
                        let _ = fs.getattr(ROOT_INO);
                        let _ = fs.unlink(&r, ROOT_INO, &n);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        checked(&fs, &format!("{v:?}"));
        fs.shrink();
        assert_eq!(
            fs.cache_counts().0,
            0,
            "{v:?}: unreferenced inodes left after shrink"
        );
    }
}

/// Regression: when the store refuses `free_ino`, the free-inode and
/// free-block counters must not be credited (the store still holds them).
#[test]
fn failed_free_credits_no_counters() {
    for v in ALL {
        // `free_ino` fails while `fail_free` is set.
        let fail_free = Arc::new(AtomicBool::new(false));
        let flag = fail_free.clone();
        let store = Arc::new(HookedStore::new(move |call| {
            if call == Call::FreeIno && flag.load(Ordering::Relaxed) {
                return Err(Errno::EIO);
            }
            Ok(())
        }));
        let fs = fs_with(v, 1 << 10, store.clone());
        let (_, f) = common::create_rw(&fs, b"f");
        fs.write(&f, 0, &[7u8; 3 * PAGE_SIZE]).unwrap();
        drop(f);
        fs.sync().unwrap();
        let before = fs.statfs().unwrap();
        fail_free.store(true, Ordering::Relaxed);
        fs.unlink(&Cred::root(), ROOT_INO, b"f").unwrap();
        let after = fs.statfs().unwrap();
        assert_eq!(after.files_free, before.files_free, "{v:?}: inode credited");
        assert_eq!(
            after.blocks_free, before.blocks_free,
            "{v:?}: blocks credited"
        );
    }
}

/// Threads stat-walk private trees through a 64-inode cache (the seed000
/// shape): every lookup is cold, inodes recycle constantly, and every answer
/// must still be right.
#[test]
fn cold_lookup_stress_with_a_tiny_budget() {
    const THREADS: usize = 4;
    const DIRS: usize = 8;
    const FILES: usize = 16;
    for v in ALL {
        let fs = fs_with(v, 64, memory_store());
        let r = Cred::root();
        let mut trees = Vec::new();
        for t in 0..THREADS {
            let top = fs
                .mkdir(&r, ROOT_INO, format!("t{t}").as_bytes(), 0o755, 0)
                .unwrap();
            fs.forget(top.ino, 1);
            let mut files = Vec::new();
            for d in 0..DIRS {
                let dir = fs.mkdir(&r, top.ino, &name(d), 0o755, 0).unwrap();
                fs.forget(dir.ino, 1);
                for f in 0..FILES {
                    let mode = 0o600 + (f as u32 % 64);
                    let a = fs.mknod(&r, dir.ino, &name(f), mode, 0, 0).unwrap();
                    fs.forget(a.ino, 1);
                    files.push((d, f, a.ino, a.perm));
                }
            }
            trees.push((top.ino, files));
        }
        let workers: Vec<_> = trees
            .into_iter()
            .map(|(top, files)| {
                let fs = fs.clone();
                std::thread::spawn(move || {
                    let r = Cred::root();
                    for round in 0..20 {
                        for &(d, f, ino, perm) in &files {
                            let dir = fs.lookup(&r, top, &name(d)).unwrap();
                            let a = fs.lookup(&r, dir.ino, &name(f)).unwrap();
                            assert_eq!((a.ino, a.perm), (ino, perm), "round {round}");
                            assert_eq!(fs.getattr(ino).unwrap().perm, perm);
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        let (inodes, _) = fs.cache_counts();
        assert!(
            inodes <= 64 + 16,
            "{v:?}: {inodes} cached over a budget of 64"
        );
        checked(&fs, &format!("{v:?}"));
    }
}
