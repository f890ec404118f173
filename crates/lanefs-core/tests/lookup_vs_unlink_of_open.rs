//! Lookups of a name racing the unlink of its last link while a handle
//! keeps the file open (so that it lives on as an orphan): a name resolves
//! to a linked inode or to nothing (Linux: an unlinked-but-open file is
//! unreachable by name), so every answer by name — a lookup, counted or
//! not, and a counted `open(O_CREAT)` of the existing name (FUSE CREATE)
//! — has a link count above 0. Before, the lock-free counted walk
//! (`walk_rcu`, which FUSE LOOKUP and the path layer's counted walk use)
//! counted any orphan whose last link went between its validation of the
//! entry and its `meta` (`countable_by_name`: linked *or an orphan*) and
//! returned it with nlink 0; the counted open did the same without
//! looking at the link count at all.
//!
//! A writer creates `f` (keeping the handle), unlinks it and closes it,
//! again and again; readers look `f` up and assert the link count of
//! every success.
//!
//! Knob: `LANEFS_LOOKUP_UNLINK_ROUNDS` (unlinks by the writer, default
//! 100000).

use lanefs_core::*;

mod common;

#[test]
fn no_answer_by_name_has_a_link_count_of_0() {
    let rounds = common::knob("LANEFS_LOOKUP_UNLINK_ROUNDS", 100_000) as usize;
    let fs = Fs::new_in_memory();
    let reader_fs = fs.clone();
    let read = move |k: usize| {
        let (fs, r) = (&reader_fs, Cred::root());
        let got = match k {
            0 => fs.lookup_counted(&r, ROOT_INO, b"f").inspect(|a| {
                fs.forget(a.ino, 1);
            }),
            1 => fs.lookup(&r, ROOT_INO, b"f"),
            _ => {
                let flags = libc::O_CREAT | libc::O_RDWR;
                match fs.open_at(&r, ROOT_INO, b"f", flags, 0o644, 0, true) {
                    Ok((a, h, created)) => {
                        drop(h);
                        fs.forget(a.ino, 1);
                        if created {
                            // Its own file, not an answer for a name it
                            // found.
                            return false;
                        }
                        Ok(a)
                    }
                    Err(e) => Err(e),
                }
            }
        };
        match got {
            Ok(a) => {
                assert!(a.nlink > 0, "reader {k} answered an unlinked inode: {a:?}");
                true
            }
            Err(Errno::ENOENT) if k != 2 => false,
            Err(e) => panic!("reader {k}: {e:?}"),
        }
    };
    let r = Cred::root();
    let flags = libc::O_CREAT | libc::O_RDWR;
    let found: u64 = common::with_readers(3, read, || {
        for i in 0..rounds {
            let (_, h, _) = fs
                .open_at(&r, ROOT_INO, b"f", flags, 0o644, 0, false)
                .unwrap_or_else(|e| panic!("open {i}: {e:?}"));
            match fs.unlink(&r, ROOT_INO, b"f") {
                Ok(()) | Err(Errno::ENOENT) => {}
                Err(e) => panic!("unlink {i}: {e:?}"),
            }
            drop(h);
        }
    })
    .into_iter()
    .sum();
    assert!(found > 0, "the readers never found the name");
    let _ = fs.unlink(&r, ROOT_INO, b"f");
    if let Err(bad) = fs.check() {
        panic!("after the race: {bad:?}");
    }
}
