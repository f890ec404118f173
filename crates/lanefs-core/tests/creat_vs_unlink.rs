//! `open(O_CREAT)` of a name racing unlinks of it: the directory exists
//! throughout, so every open must succeed — opening the file it found or
//! made, even if that was unlinked a moment later (as on Linux, where the
//! open holds the dentry), or creating the name again — never `ENOENT`
//! (a kernel tmpfs gave none in 200000 such opens). Before, an open that
//! found the file and lost it to an unlink (freed: nothing kept it)
//! before its handle pinned it failed with `ENOENT` (9 runs in 10 at the
//! default length); the same window between a create and its open is
//! the shuttle model `model_creating_open_vs_unlink`.
//!
//! Knob: `LANEFS_CREAT_UNLINK_ROUNDS` (opens per opener, default 200000).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lanefs_core::*;

mod common;

#[test]
fn an_o_creat_open_racing_unlinks_never_fails_with_enoent() {
    let rounds = common::knob("LANEFS_CREAT_UNLINK_ROUNDS", 200_000) as usize;
    let fs = Fs::new_in_memory();
    let stop = Arc::new(AtomicBool::new(false));
    let unlinker = {
        let fs = fs.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let r = Cred::root();
            let mut removed = 0u64;
            while !stop.load(Ordering::Relaxed) {
                match fs.unlink(&r, ROOT_INO, b"f") {
                    Ok(()) => removed += 1,
                    Err(Errno::ENOENT) => {}
                    Err(e) => panic!("unlink: {e:?}"),
                }
            }
            removed
        })
    };
    let openers: Vec<_> = (0..2)
        .map(|_| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let r = Cred::root();
                let flags = libc::O_CREAT | libc::O_RDWR;
                for i in 0..rounds {
                    match fs.open_at(&r, ROOT_INO, b"f", flags, 0o644, 0, false) {
                        Ok((_, h, _)) => {
                            // The handle works, linked or not.
                            fs.write(&h, 0, b"x").expect("write");
                        }
                        Err(e) => panic!("open {i} of an existing directory's name: {e:?}"),
                    }
                }
            })
        })
        .collect();
    for o in openers {
        o.join().expect("opener");
    }
    stop.store(true, Ordering::Relaxed);
    let removed = unlinker.join().expect("unlinker");
    assert!(removed > 0, "no unlink ever raced");
    let _ = fs.unlink(&Cred::root(), ROOT_INO, b"f");
    if let Err(bad) = fs.check() {
        panic!("after the race: {bad:?}");
    }
}
