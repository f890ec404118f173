//! A name that stays linked throughout — renamed over again and again, so
//! that it always names some file — is never `ENOENT` to a lookup or an
//! open (POSIX `rename`: "a link named new shall remain visible to other
//! processes throughout the renaming operation"; Linux's open holds the
//! dentry it found, so it opens the old file or the new one). Before, a
//! lookup or a plain open that found the old file and lost it to the
//! rename — freed, nothing else kept it — before it took `meta` or raised
//! the open count answered `ENOENT` (the reference lookup's "freed"
//! branch, `open_at` without `O_CREAT`) instead of reading the name again
//! as every answer by name now does (`Meta::still_named`).
//!
//! Knob: `LANEFS_RENAME_OVER_ROUNDS` (renames by the writer, default
//! 50000).

use lanefs_core::*;

mod common;

#[test]
fn a_name_renamed_over_is_never_enoent() {
    let rounds = common::knob("LANEFS_RENAME_OVER_ROUNDS", 50_000) as usize;
    let fs = Fs::new_in_memory();
    let r = Cred::root();
    let f = fs.mknod(&r, ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    fs.forget(f.ino, 1);
    let reader_fs = fs.clone();
    let read = move |k: usize| {
        let (fs, r) = (&reader_fs, Cred::root());
        let got = match k {
            0 => fs
                .open_at(&r, ROOT_INO, b"f", libc::O_RDONLY, 0, 0, false)
                .map(|(a, h, _)| {
                    drop(h);
                    a
                }),
            1 => fs.lookup(&r, ROOT_INO, b"f"),
            _ => fs.lookup_counted(&r, ROOT_INO, b"f").inspect(|a| {
                fs.forget(a.ino, 1);
            }),
        };
        match got {
            // An open may find the old file and keep it: its attributes,
            // read after the open, may then show it unlinked (as `fstat`
            // would). A lookup's never.
            Ok(a) => assert!(k == 0 || a.nlink > 0, "reader {k}: {a:?}"),
            Err(e) => panic!("reader {k}: {e:?}"),
        }
        true
    };
    let answers = common::with_readers(3, read, || {
        for i in 0..rounds {
            let t = fs.mknod(&r, ROOT_INO, b"t", 0o644, 0, 0).unwrap();
            fs.forget(t.ino, 1);
            fs.rename(&r, ROOT_INO, b"t", ROOT_INO, b"f", 0)
                .unwrap_or_else(|e| panic!("rename {i}: {e:?}"));
        }
    });
    assert!(answers.iter().all(|&n| n > 0), "a reader never answered");
    fs.unlink(&r, ROOT_INO, b"f").unwrap();
    if let Err(bad) = fs.check() {
        panic!("after the race: {bad:?}");
    }
}
