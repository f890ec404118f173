//! A rename over a name drops the replaced inode's link count only once
//! the name is re-pointed in the index. Before, the count reached 0 while
//! the old entry was still visible to lock-free lookups for a moment: a
//! lookup then took a reference (or a lookup count) to the unlinked inode,
//! its release freed it — nothing else kept it — and a lookup of the name
//! in that moment validated an entry to a free number (`EUCLEAN`, "a
//! corrupt directory"), or the number was reused under a visible name.
//! Found by the `lanefs` stress test (one run in ~40 failed).
//!
//! Here writers rename fresh symlinks over a few names again and again
//! while readers look the names up (counted, then forgotten: each
//! forget of an unlinked inode frees it) and read the links; every lookup
//! must find the name or miss it, never `EUCLEAN`.
//!
//! Knob: `LANEFS_RENAME_WINDOW_ROUNDS` (renames per writer, default
//! 20000).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lanefs_core::*;

mod common;

const NAMES: [&[u8]; 2] = [b"a", b"b"];

#[test]
fn a_rename_target_stays_linked_until_its_name_moves() {
    let rounds = common::knob("LANEFS_RENAME_WINDOW_ROUNDS", 20_000) as usize;
    let fs = Fs::new_in_memory();
    let root = Cred::root();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let r = Cred::root();
                let tmp = format!("tmp{w}");
                for i in 0..rounds {
                    let a = fs
                        .symlink(&r, ROOT_INO, tmp.as_bytes(), b"target")
                        .expect("symlink");
                    fs.forget(a.ino, 1);
                    let to = NAMES[i % NAMES.len()];
                    fs.rename(&r, ROOT_INO, tmp.as_bytes(), ROOT_INO, to, 0)
                        .expect("rename over");
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|k| {
            let fs = fs.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let r = Cred::root();
                let mut found = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for n in NAMES {
                        let got = if k == 0 {
                            fs.lookup_counted(&r, ROOT_INO, n).map(|a| {
                                let _ = fs.readlink(a.ino);
                                fs.forget(a.ino, 1);
                            })
                        } else {
                            fs.lookup(&r, ROOT_INO, n).map(drop)
                        };
                        match got {
                            Ok(()) => found += 1,
                            Err(Errno::ENOENT) => {}
                            Err(e) => panic!("lookup of {:?}: {e:?}", n),
                        }
                    }
                }
                found
            })
        })
        .collect();
    for w in writers {
        w.join().expect("writer");
    }
    stop.store(true, Ordering::Relaxed);
    let found: u64 = readers.into_iter().map(|h| h.join().expect("reader")).sum();
    assert!(found > 0, "the readers never found a name");
    for n in NAMES {
        fs.unlink(&root, ROOT_INO, n).expect("unlink");
    }
    assert_eq!(fs.check(), Ok(()));
}
