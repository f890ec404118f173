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

use lanefs_core::*;

mod common;

const NAMES: [&[u8]; 2] = [b"a", b"b"];

#[test]
fn a_rename_target_stays_linked_until_its_name_moves() {
    let rounds = common::knob("LANEFS_RENAME_WINDOW_ROUNDS", 20_000) as usize;
    let fs = Fs::new_in_memory();
    let root = Cred::root();
    let reader_fs = fs.clone();
    let read = move |k: usize| {
        let (fs, r) = (&reader_fs, Cred::root());
        let mut found = false;
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
                Ok(()) => found = true,
                Err(Errno::ENOENT) => {}
                Err(e) => panic!("lookup of {:?}: {e:?}", n),
            }
        }
        found
    };
    let found: u64 = common::with_readers(2, read, || {
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
        for w in writers {
            w.join().expect("writer");
        }
    })
    .into_iter()
    .sum();
    assert!(found > 0, "the readers never found a name");
    for n in NAMES {
        fs.unlink(&root, ROOT_INO, n).expect("unlink");
    }
    assert_eq!(fs.check(), Ok(()));
}
