//! Threads race every name operation over a tiny namespace (so they collide
//! constantly), with shrinks in between; afterwards the store must be
//! consistent and, once everything is removed, empty. A deadlock shows up as
//! a hang (the test harness' timeout). Each seed "before" design
//! (`Variants::baselines()`) runs the same races with fewer operations.
//!
//! Knob: `LANEFS_RACES_SEED` — mixed into every thread's random seed
//! (default 0: the fixed seeds), for soak runs with fresh sequences.

use std::sync::Arc;

use lanefs_core::*;

mod common;
use common::Rng;

const NAMES: [&[u8]; 4] = [b"a", b"b", b"c", b"d"];

fn dir_inos(fs: &Fs) -> Vec<Ino> {
    let r = Cred::root();
    let mut out = vec![ROOT_INO];
    for n in NAMES {
        if let Ok(a) = fs.lookup(&r, ROOT_INO, n) {
            if a.kind == FileKind::Directory {
                out.push(a.ino);
            }
        }
    }
    out
}

fn worker(fs: Fs, seed: u64, ops: usize) {
    let r = Cred::root();
    let mixed = std::env::var("LANEFS_RACES_SEED")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    // Never 0 (xorshift's fixed point).
    let mut rng = Rng((seed ^ mixed).max(1));
    let mut open: Vec<OpenFile> = Vec::new();
    for _ in 0..ops {
        let dirs = dir_inos(&fs);
        let (d1, d2) = (rng.pick(&dirs), rng.pick(&dirs));
        let (n1, n2) = (rng.pick(&NAMES), rng.pick(&NAMES));
        match rng.next() % 12 {
            0 => {
                if let Ok(a) = fs.mkdir(&r, d1, n1, 0o755, 0) {
                    fs.forget(a.ino, 1);
                }
            }
            1 => {
                if let Ok(a) = fs.mknod(&r, d1, n1, 0o644, 0, 0) {
                    fs.forget(a.ino, 1);
                }
            }
            2 => {
                let _ = fs.unlink(&r, d1, n1);
            }
            3 => {
                let _ = fs.rmdir(&r, d1, n1);
            }
            4 => {
                let flags = [0, RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_WHITEOUT]
                    [(rng.next() % 4) as usize];
                let _ = fs.rename(&r, d1, n1, d2, n2, flags);
            }
            5 => {
                if let Ok(a) = fs.lookup(&r, d1, n1) {
                    if let Ok(l) = fs.link(&r, a.ino, d2, n2) {
                        fs.forget(l.ino, 1);
                    }
                }
            }
            6 | 7 => {
                let flags = libc::O_CREAT | libc::O_RDWR;
                if let Ok((_, f, _)) = fs.open_at(&r, d1, n1, flags, 0o644, 0, false) {
                    let off = rng.next() % 20_000;
                    let _ = fs.write(&f, off, &[rng.next() as u8; 5000]);
                    if open.len() < 8 {
                        open.push(f);
                    }
                }
            }
            8 => {
                if let Some(f) = open.pop() {
                    let mut buf = [0u8; 3000];
                    let _ = fs.read(&f, rng.next() % 20_000, &mut buf);
                    let _ = fs.fallocate(&f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 100, 9000);
                }
            }
            9 => {
                // Deliberately unheld (against the contract): must still not
                // corrupt anything.
                if let Ok(a) = fs.lookup(&r, d1, n1) {
                    let ch = SetAttr {
                        size: Some(rng.next() % 10_000),
                        ..Default::default()
                    };
                    let _ = fs.setattr(&r, a.ino, &ch, None);
                }
            }
            10 => {
                if let Ok(f) = fs.open(&r, d1, libc::O_RDONLY) {
                    let _ = fs.readdir(&f, 0, &mut |_| false);
                }
            }
            _ => {
                fs.shrink();
            }
        }
    }
}

fn remove_all(fs: &Fs, dir: Ino) {
    let r = Cred::root();
    let f = fs.open(&r, dir, libc::O_RDONLY).unwrap();
    let mut entries = Vec::new();
    fs.readdir(&f, 2, &mut |e| {
        entries.push((e.name.to_vec(), e.ino, e.kind));
        false
    })
    .unwrap();
    drop(f);
    for (name, ino, kind) in entries {
        if kind == FileKind::Directory {
            remove_all(fs, ino);
            fs.rmdir(&r, dir, &name).unwrap();
        } else {
            fs.unlink(&r, dir, &name).unwrap();
        }
    }
}

/// Operations per thread on the default engine and on each baseline.
const OPS: usize = 4000;
const VARIANT_OPS: usize = 2000;

#[test]
fn racing_name_operations_stay_consistent() {
    racing_name_operations(Variants::default(), OPS);
}

/// Every seed "before" design (`Variants::baselines()`) under the same
/// races, with fewer operations: exactly as consistent as the default.
#[test]
fn racing_name_operations_every_baseline() {
    for (name, v) in Variants::baselines() {
        eprintln!("races: baseline {name}");
        racing_name_operations(v, VARIANT_OPS);
    }
}

fn racing_name_operations(variants: Variants, ops: usize) {
    let store = Arc::new(MemoryStore::default());
    let config = FsConfig {
        cache_inodes_max: 8,
        cache_pages_max: 16,
        variants,
        ..FsConfig::default()
    };
    let fs = Fs::new(store.clone(), config).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || worker(fs, 0x9E37_79B9 + t * 7919, ops))
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    if let Err(p) = fs.check() {
        panic!("inconsistent after races ({variants}): {p:#?}");
    }
    remove_all(&fs, ROOT_INO);
    if let Err(p) = fs.check() {
        panic!("inconsistent after cleanup ({variants}): {p:#?}");
    }
    assert_eq!(store.inode_records(), 1, "only the root is left");
    assert_eq!(store.page_records(), 0);
}

/// `O_CREAT` opens racing on the same names (the create allocates before
/// taking the directory's lock and re-checks under it): every name is
/// created exactly once, every opener gets that one inode, and `O_EXCL`
/// succeeds for exactly one racer per name.
#[test]
fn racing_creates_of_one_name_make_one_inode() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 200;
    for variants in [Variants::default()]
        .into_iter()
        .chain(Variants::baselines().into_iter().map(|(_, v)| v))
    {
        let fs = Fs::new(
            Arc::new(MemoryStore::default()),
            FsConfig {
                variants,
                ..FsConfig::default()
            },
        )
        .unwrap();
        let barrier = Arc::new(std::sync::Barrier::new(THREADS));
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let (fs, barrier) = (fs.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let root = Cred::root();
                    let mut seen = Vec::new();
                    for round in 0..ROUNDS {
                        barrier.wait();
                        let plain = format!("p{round}");
                        let (attr, file, created) = fs
                            .open_at(
                                &root,
                                ROOT_INO,
                                plain.as_bytes(),
                                libc::O_CREAT | libc::O_RDWR,
                                0o644,
                                0,
                                false,
                            )
                            .unwrap();
                        drop(file);
                        let excl = format!("x{round}");
                        let won = match fs.open_at(
                            &root,
                            ROOT_INO,
                            excl.as_bytes(),
                            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                            0o644,
                            0,
                            false,
                        ) {
                            Ok(_) => true,
                            Err(e) => {
                                assert_eq!(e, Errno::EEXIST);
                                false
                            }
                        };
                        seen.push((attr.ino, created, won));
                    }
                    seen
                })
            })
            .collect();
        let results: Vec<Vec<(Ino, bool, bool)>> =
            threads.into_iter().map(|t| t.join().unwrap()).collect();
        for round in 0..ROUNDS {
            let row: Vec<_> = results.iter().map(|r| r[round]).collect();
            assert!(
                row.iter().all(|s| s.0 == row[0].0),
                "round {round}: {row:?}"
            );
            assert_eq!(
                row.iter().filter(|s| s.1).count(),
                1,
                "round {round}: {row:?}"
            );
            assert_eq!(
                row.iter().filter(|s| s.2).count(),
                1,
                "round {round}: {row:?}"
            );
        }
        if let Err(p) = fs.check() {
            panic!("inconsistent after racing creates ({variants}): {p:#?}");
        }
    }
}
