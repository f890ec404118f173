//! `O_TMPFILE` (`Fs::tmpfile`, FUSE TMPFILE): an unnamed file with a link
//! count of 0 that lives while open or looked up, is an orphan meanwhile,
//! and may be given one name by `link` unless it was made `O_EXCL`
//! (Linux's `I_LINKABLE`). Checked against what tmpfs does, and that
//! nothing is left in the store once it is gone.

use std::sync::Arc;

#[allow(dead_code)] // this binary uses only `names_in_store` and `knob`
mod common;

use common::names_in_store;
use lanefs_core::{Cred, Errno, Fs, FsConfig, MemoryStore, ROOT_INO};

fn fresh() -> (Arc<MemoryStore>, Fs) {
    let store = Arc::new(MemoryStore::default());
    let fs = Fs::new(store.clone(), FsConfig::default()).unwrap();
    (store, fs)
}

/// After everything is gone only the root is left, and the engine's own
/// check passes.
fn assert_empty(store: &MemoryStore, fs: &Fs) {
    fs.check().unwrap();
    fs.sync().unwrap();
    assert_eq!(store.inode_records(), 1, "an inode leaked");
    assert_eq!(store.page_records(), 0, "pages leaked");
}

#[test]
fn unnamed_file_is_freed_at_the_last_close() {
    let (store, fs) = fresh();
    let root = Cred::root();
    let (a, f) = fs
        .tmpfile(
            &root,
            ROOT_INO,
            libc::O_TMPFILE | libc::O_RDWR,
            0o666,
            0o022,
            false,
        )
        .unwrap();
    assert_eq!((a.nlink, a.perm, a.size), (0, 0o644, 0));
    fs.write(&f, 0, &[7u8; 10_000]).unwrap();
    let mut buf = [0u8; 4];
    assert_eq!(fs.read(&f, 9_998, &mut buf).unwrap(), 2);
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 0);
    // No name appeared, and the engine's checker accepts it (an orphan).
    assert!(names_in_store(&*store, ROOT_INO).is_empty());
    fs.check().unwrap();
    drop(f);
    assert_eq!(fs.getattr(a.ino).map(|_| ()), Err(Errno::ENOENT));
    assert_empty(&store, &fs);
}

#[test]
fn link_names_it_once_unless_excl() {
    let (store, fs) = fresh();
    let root = Cred::root();
    let (a, f) = fs
        .tmpfile(
            &root,
            ROOT_INO,
            libc::O_TMPFILE | libc::O_WRONLY,
            0o600,
            0,
            false,
        )
        .unwrap();
    fs.write(&f, 0, b"kept").unwrap();
    let l = fs.link(&root, a.ino, ROOT_INO, b"named").unwrap();
    assert_eq!(l.nlink, 1);
    fs.forget(a.ino, 1);
    // Named: a second name is an ordinary link.
    assert_eq!(fs.link(&root, a.ino, ROOT_INO, b"again").unwrap().nlink, 2);
    fs.forget(a.ino, 1);
    fs.check().unwrap();
    // Unlinked again: no longer linkable (the kernel's I_LINKABLE is gone
    // after the first link too).
    fs.unlink(&root, ROOT_INO, b"named").unwrap();
    fs.unlink(&root, ROOT_INO, b"again").unwrap();
    assert_eq!(
        fs.link(&root, a.ino, ROOT_INO, b"third").map(|_| ()),
        Err(Errno::ENOENT)
    );
    drop(f);
    assert_empty(&store, &fs);

    // O_EXCL: never linkable.
    let flags = libc::O_TMPFILE | libc::O_RDWR | libc::O_EXCL;
    let (a, f) = fs.tmpfile(&root, ROOT_INO, flags, 0o600, 0, false).unwrap();
    assert_eq!(
        fs.link(&root, a.ino, ROOT_INO, b"x").map(|_| ()),
        Err(Errno::ENOENT)
    );
    drop(f);
    assert_empty(&store, &fs);
}

#[test]
fn named_file_keeps_its_data_and_is_no_orphan() {
    let (store, fs) = fresh();
    let root = Cred::root();
    let (a, f) = fs
        .tmpfile(
            &root,
            ROOT_INO,
            libc::O_TMPFILE | libc::O_RDWR,
            0o644,
            0,
            false,
        )
        .unwrap();
    fs.write(&f, 0, b"data").unwrap();
    fs.link(&root, a.ino, ROOT_INO, b"f").unwrap();
    fs.forget(a.ino, 1);
    drop(f);
    // Still there after the last close, from the store too.
    fs.shrink();
    fs.check().unwrap();
    let (_, g, _) = fs
        .open_at(&root, ROOT_INO, b"f", libc::O_RDONLY, 0, 0, false)
        .unwrap();
    let mut buf = [0u8; 8];
    assert_eq!(fs.read(&g, 0, &mut buf).unwrap(), 4);
    assert_eq!(&buf[..4], b"data");
    drop(g);
    fs.unlink(&root, ROOT_INO, b"f").unwrap();
    assert_empty(&store, &fs);
}

#[test]
fn checks_as_open_and_create() {
    let (store, fs) = fresh();
    let root = Cred::root();
    let user = Cred::user(1000, 1000);
    // Read-only: EINVAL (open(2)'s check).
    assert_eq!(
        fs.tmpfile(
            &root,
            ROOT_INO,
            libc::O_TMPFILE | libc::O_RDONLY,
            0o600,
            0,
            false
        )
        .map(|_| ()),
        Err(Errno::EINVAL)
    );
    // A directory the caller may not write: EACCES.
    let d = fs.mkdir(&root, ROOT_INO, b"d", 0o755, 0).unwrap();
    assert_eq!(
        fs.tmpfile(
            &user,
            d.ino,
            libc::O_TMPFILE | libc::O_RDWR,
            0o600,
            0,
            false
        )
        .map(|_| ()),
        Err(Errno::EACCES)
    );
    // A setgid directory: its group, and a non-member's setgid goes.
    let g = fs.mkdir(&root, ROOT_INO, b"g", 0o777, 0).unwrap();
    fs.setattr(
        &root,
        g.ino,
        &lanefs_core::SetAttr {
            mode: Some(0o2777),
            gid: Some(50),
            ..Default::default()
        },
        None,
    )
    .unwrap();
    let (a, f) = fs
        .tmpfile(
            &user,
            g.ino,
            libc::O_TMPFILE | libc::O_RDWR,
            0o2770,
            0,
            false,
        )
        .unwrap();
    assert_eq!((a.uid, a.gid, a.perm), (1000, 50, 0o770));
    drop(f);
    // A regular file is not a directory.
    let (fa, h) = {
        let (a, h, _) = fs
            .open_at(
                &root,
                ROOT_INO,
                b"file",
                libc::O_CREAT | libc::O_RDWR,
                0o644,
                0,
                false,
            )
            .unwrap();
        (a, h)
    };
    drop(h);
    assert_eq!(
        fs.tmpfile(
            &root,
            fa.ino,
            libc::O_TMPFILE | libc::O_RDWR,
            0o600,
            0,
            false
        )
        .map(|_| ()),
        Err(Errno::ENOTDIR)
    );
    fs.unlink(&root, ROOT_INO, b"file").unwrap();
    fs.rmdir(&root, ROOT_INO, b"d").unwrap();
    fs.rmdir(&root, ROOT_INO, b"g").unwrap();
    fs.forget(d.ino, 1);
    fs.forget(g.ino, 1);
    assert_empty(&store, &fs);
}

/// An `O_TMPFILE` open racing a caller that forgets, opens and closes the
/// numbers it gets — one kept from an earlier file, now reused (the
/// memory store hands a lane's freed number out again), as a FUSE FORGET
/// or OPEN of a stale number does. The new file is born open and an
/// orphan before its number can be found, so neither frees it: every
/// `O_TMPFILE` open succeeds. Before, the file had no open count until
/// its handle raised one, and a forget (or the last close of the
/// stranger's handle) in between freed it — no links, lookups or opens —
/// so the open failed with `ENOENT`.
///
/// Knob: `LANEFS_TMPFILE_RACE_ROUNDS` (opens, default 100000).
#[test]
fn an_unnamed_file_is_not_freed_by_its_number_before_its_open() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let rounds = common::knob("LANEFS_TMPFILE_RACE_ROUNDS", 100_000);
    let (store, fs) = fresh();
    let last = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let stranger = {
        let (fs, last, stop) = (fs.clone(), last.clone(), stop.clone());
        std::thread::spawn(move || {
            let r = Cred::root();
            let mut opened = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let ino = last.load(Ordering::Relaxed);
                if ino == 0 {
                    std::hint::spin_loop();
                    continue;
                }
                fs.forget(ino, 1);
                if let Ok(h) = fs.open(&r, ino, libc::O_RDONLY) {
                    opened += 1;
                    drop(h);
                }
            }
            opened
        })
    };
    let r = Cred::root();
    for i in 0..rounds {
        let (a, f) = fs
            .tmpfile(&r, ROOT_INO, libc::O_RDWR, 0o600, 0, false)
            .unwrap_or_else(|e| panic!("O_TMPFILE open {i}: {e:?}"));
        last.store(a.ino, Ordering::Relaxed);
        fs.write(&f, 0, b"x").unwrap();
        drop(f);
    }
    stop.store(true, Ordering::Relaxed);
    assert!(
        stranger.join().unwrap() > 0,
        "the stranger never opened one"
    );
    assert_empty(&store, &fs);
}
