//! Opens and closes of a file race the unlink of its last name, lookups
//! with their forgets, reopens of open handles and evictions, on real
//! threads. The file must be freed exactly once, at its last close (or at
//! the unlink, if nothing holds it then): while a handle the test holds is
//! open its data reads back and `statfs` counts it as used; once every
//! handle is closed, `statfs`' free inode and block counts are exactly
//! those from before it was created, the store holds only the root, and
//! the engine's check passes. Each seed "before" design runs too.
//!
//! Knob: `LANEFS_LAST_CLOSE_ROUNDS` — rounds per design (default 300).

use std::sync::{Arc, Barrier};

use lanefs_core::*;

mod common;

const DATA: usize = 3 * 4096 + 100;
const THREADS: usize = 4;

fn rounds() -> usize {
    common::knob("LANEFS_LAST_CLOSE_ROUNDS", 300) as usize
}

fn data(round: usize) -> Vec<u8> {
    (0..DATA).map(|i| (i * 7 + round) as u8 | 1).collect()
}

/// One thread's part of a round: `kind` picks what it races with.
fn part(fs: &Fs, kind: usize, round: usize, handle: Option<OpenFile>, want: &[u8]) {
    let root = Cred::root();
    match kind {
        // The unlink of the last name (exactly one thread does it).
        0 => {
            fs.unlink(&root, ROOT_INO, b"f").unwrap();
            drop(handle);
        }
        // Reads through its own handle, then a reopen of it, then closes.
        1 => {
            let h = handle.expect("a handle");
            let mut buf = vec![0u8; DATA];
            assert_eq!(fs.read(&h, 0, &mut buf).unwrap(), DATA);
            assert_eq!(buf, want, "round {round}: data changed while open");
            let again = h.reopen_unchecked(libc::O_RDONLY).unwrap();
            drop(h);
            let mut one = [0u8; 1];
            assert_eq!(fs.read(&again, 5, &mut one).unwrap(), 1);
            assert_eq!(one[0], want[5]);
            drop(again);
        }
        // Opens by name (fails once the name is gone), a lookup and its
        // forget, an eviction pass.
        2 => {
            drop(handle);
            for _ in 0..3 {
                match fs.open_at(&root, ROOT_INO, b"f", libc::O_RDWR, 0, 0, false) {
                    Ok((_, h, created)) => {
                        assert!(!created);
                        let mut one = [0u8; 1];
                        assert_eq!(fs.read(&h, 7, &mut one).unwrap(), 1);
                        assert_eq!(one[0], want[7]);
                    }
                    Err(e) => assert_eq!(e, Errno::ENOENT, "round {round}"),
                }
                // A counted lookup pins the inode until its forget.
                if let Ok(a) = fs.lookup_counted(&root, ROOT_INO, b"f") {
                    fs.forget(a.ino, 1);
                }
            }
            fs.shrink();
        }
        // Writes through its handle (inside the size: pure overwrites of
        // the same bytes), fsync, close.
        _ => {
            let h = handle.expect("a handle");
            fs.write(&h, 4096, &want[4096..4196]).unwrap();
            fs.fsync(&h, false).unwrap();
            drop(h);
            fs.shrink();
        }
    }
}

fn race(variants: Variants) {
    let store = Arc::new(MemoryStore::default());
    let fs = Fs::new(
        store.clone(),
        FsConfig {
            variants,
            cache_inodes_max: 4,
            ..FsConfig::default()
        },
    )
    .unwrap();
    let root = Cred::root();
    let base = fs.statfs().unwrap();
    let barrier = Arc::new(Barrier::new(THREADS + 1));
    for round in 0..rounds() {
        let want = Arc::new(data(round));
        let (_, f, created) = fs
            .open_at(
                &root,
                ROOT_INO,
                b"f",
                libc::O_CREAT | libc::O_RDWR,
                0o644,
                0,
                false,
            )
            .unwrap();
        assert!(created);
        fs.write(&f, 0, &want).unwrap();
        if round % 3 == 0 {
            fs.sync().unwrap();
        }
        let used = fs.statfs().unwrap();
        assert_eq!(used.files_free, base.files_free - 1);
        assert_eq!(used.blocks_free, base.blocks_free - 4);
        // The threads start from one barrier; which one closes last, and
        // whether the unlink comes before or after, varies by round.
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let kind = (t + round) % THREADS;
                let handle = (kind != 2).then(|| f.reopen_unchecked(libc::O_RDWR).unwrap());
                let (fs, barrier, want) = (fs.clone(), barrier.clone(), want.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    part(&fs, kind, round, handle, &want);
                })
            })
            .collect();
        // The test's own handle: open across the races, its file counted.
        let keep_to_end = round % 2 == 0;
        let mine = if keep_to_end {
            Some(f)
        } else {
            drop(f);
            None
        };
        barrier.wait();
        for t in threads {
            t.join().unwrap();
        }
        if let Some(f) = mine {
            let mid = fs.statfs().unwrap();
            assert_eq!(
                (mid.files_free, mid.blocks_free),
                (base.files_free - 1, base.blocks_free - 4),
                "round {round}: freed while open"
            );
            let mut buf = vec![0u8; DATA];
            assert_eq!(fs.read(&f, 0, &mut buf).unwrap(), DATA);
            assert_eq!(buf, *want, "round {round}");
            fs.check().unwrap();
            drop(f);
        }
        let after = fs.statfs().unwrap();
        assert_eq!(
            (after.files_free, after.blocks_free),
            (base.files_free, base.blocks_free),
            "round {round} ({variants}): not freed exactly once"
        );
        if let Err(p) = fs.check() {
            panic!("round {round} ({variants}): {p:#?}");
        }
        assert_eq!(
            store.inode_records(),
            1,
            "round {round}: only the root is left"
        );
        assert_eq!(store.page_records(), 0, "round {round}");
    }
}

#[test]
fn last_close_frees_exactly_once() {
    race(Variants::default());
}

#[test]
fn last_close_frees_exactly_once_every_baseline() {
    for (name, v) in Variants::baselines() {
        eprintln!("last close: baseline {name}");
        race(v);
    }
}
