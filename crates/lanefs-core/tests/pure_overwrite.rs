//! Pure overwrites (`Fs::write` inside the size, onto allocated pages,
//! with no privilege to remove) keep a regular file's mtime and the ctime of
//! its data change on the file's data side, without the inode's `meta`:
//! what every reader and the record must still show.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use lanefs_core::*;

const CREAT: i32 = libc::O_CREAT | libc::O_RDWR;
const CAPS: &[u8] = b"security.capability";

fn past() -> Timespec {
    Timespec {
        sec: 1_000_000,
        nsec: 123,
    }
}

/// `/name` with two allocated pages, its mtime and ctime set to [`past`].
fn file_in_past(fs: &Fs, name: &[u8]) -> (Attr, OpenFile) {
    let root = Cred::root();
    let (a, f, _) = fs
        .open_at(&root, ROOT_INO, name, CREAT, 0o644, 0, false)
        .unwrap();
    fs.write(&f, 0, &[1u8; 8192]).unwrap();
    let back = SetAttr {
        mtime: Some(TimeSet::At(past())),
        ctime: Some(past()),
        ..Default::default()
    };
    let after = fs.setattr(&root, a.ino, &back, None).unwrap();
    assert_eq!((after.mtime, after.ctime), (past(), past()));
    let a = fs.getattr(a.ino).unwrap();
    assert_eq!((a.mtime, a.ctime), (past(), past()), "set in the past");
    (a, f)
}

#[test]
fn a_pure_overwrite_moves_mtime_and_ctime_and_keeps_the_size() {
    let fs = Fs::new_in_memory();
    let (a, f) = file_in_past(&fs, b"f");
    let t0 = Timespec::now();
    assert_eq!(fs.write(&f, 100, b"hello").unwrap(), (5, 105));
    let b = fs.getattr(a.ino).unwrap();
    assert!(b.mtime >= t0, "mtime {:?} not past {t0:?}", b.mtime);
    assert!(b.ctime >= t0, "ctime {:?} not past {t0:?}", b.ctime);
    assert_eq!(b.size, 8192);
    assert_eq!(b.blocks, a.blocks);
    // The same through the open path's locked attributes.
    let (c, _, _) = fs
        .open_at(&Cred::root(), ROOT_INO, b"f", libc::O_RDONLY, 0, 0, false)
        .unwrap();
    assert_eq!((c.mtime, c.ctime), (b.mtime, b.ctime));
    let mut buf = [0u8; 5];
    fs.read(&f, 100, &mut buf).unwrap();
    assert_eq!(&buf, b"hello");
    fs.check().unwrap();
}

#[test]
fn chmod_after_an_overwrite_keeps_its_mtime() {
    let fs = Fs::new_in_memory();
    let (a, f) = file_in_past(&fs, b"f");
    fs.write(&f, 0, b"x").unwrap();
    let w = fs.getattr(a.ino).unwrap();
    assert!(w.mtime > past());
    let mode = SetAttr {
        mode: Some(0o600),
        ..Default::default()
    };
    let c = fs.setattr(&Cred::root(), a.ino, &mode, None).unwrap();
    let g = fs.getattr(a.ino).unwrap();
    for x in [c, g] {
        assert_eq!(x.perm, 0o600);
        assert_eq!(x.mtime, w.mtime, "chmod moved mtime");
        assert!(x.ctime >= w.ctime && x.ctime >= w.mtime);
    }
}

#[test]
fn utimens_after_an_overwrite_sets_exactly_the_given_mtime() {
    let fs = Fs::new_in_memory();
    let (a, f) = file_in_past(&fs, b"f");
    fs.write(&f, 0, b"x").unwrap();
    let w = fs.getattr(a.ino).unwrap();
    let t = Timespec {
        sec: 2_000_000,
        nsec: 7,
    };
    let set = SetAttr {
        mtime: Some(TimeSet::At(t)),
        ..Default::default()
    };
    let r = fs.setattr(&Cred::root(), a.ino, &set, None).unwrap();
    let g = fs.getattr(a.ino).unwrap();
    assert_eq!((r.mtime, g.mtime), (t, t));
    assert!(g.ctime >= w.ctime, "ctime went back");
    // And it is what the record keeps.
    fs.sync().unwrap();
    let rec = fs.store().read_inode(a.ino).unwrap().unwrap();
    assert_eq!(rec.mtime, t);
    assert_eq!(rec.ctime, g.ctime);
}

#[test]
fn a_non_root_write_to_a_setuid_file_still_clears_setuid() {
    let fs = Fs::new_in_memory();
    let root = Cred::root();
    let (a, f) = file_in_past(&fs, b"f");
    drop(f);
    let suid = SetAttr {
        mode: Some(0o4666),
        ..Default::default()
    };
    fs.setattr(&root, a.ino, &suid, None).unwrap();
    let user = Cred::user(1000, 1000);
    let f = fs.open(&user, a.ino, libc::O_RDWR).unwrap();
    let before = fs.getattr(a.ino).unwrap();
    fs.write(&f, 0, b"y").unwrap();
    let after = fs.getattr(a.ino).unwrap();
    assert_eq!(after.perm, 0o666, "setuid kept");
    assert!(after.ctime >= before.ctime);
    // Without privileges left, the next overwrite is pure and still
    // moves the times.
    let t0 = Timespec::now();
    fs.write(&f, 1, b"z").unwrap();
    let again = fs.getattr(a.ino).unwrap();
    assert!(again.mtime >= t0 && again.ctime >= t0);
    assert_eq!(again.perm, 0o666);
}

#[test]
fn a_write_removes_the_file_capability() {
    let fs = Fs::new_in_memory();
    let root = Cred::root();
    let (a, f) = file_in_past(&fs, b"f");
    fs.setxattr(&root, a.ino, CAPS, &[1, 0, 0, 2], 0).unwrap();
    fs.write(&f, 0, b"y").unwrap();
    assert_eq!(fs.getxattr(&root, a.ino, CAPS), Err(Errno::ENODATA));
    // Set again after a pure overwrite: removed again by the next write.
    fs.write(&f, 1, b"y").unwrap();
    fs.setxattr(&root, a.ino, CAPS, &[1, 0, 0, 2], 0).unwrap();
    fs.write(&f, 2, b"y").unwrap();
    assert_eq!(fs.getxattr(&root, a.ino, CAPS), Err(Errno::ENODATA));
}

#[test]
fn an_overwrite_reaches_the_record_at_sync_and_after_reload() {
    let store = Arc::new(MemoryStore::default());
    let fs = Fs::new(store.clone(), FsConfig::default()).unwrap();
    let (a, f) = file_in_past(&fs, b"f");
    fs.sync().unwrap();
    fs.write(&f, 10, b"new").unwrap();
    let w = fs.getattr(a.ino).unwrap();
    assert!(w.mtime > past());
    fs.sync().unwrap();
    let rec = store.read_inode(a.ino).unwrap().unwrap();
    assert_eq!((rec.mtime, rec.ctime), (w.mtime, w.ctime), "sync");
    // A second overwrite, written back only at unmount.
    fs.write(&f, 20, b"later").unwrap();
    let w2 = fs.getattr(a.ino).unwrap();
    assert!(w2.mtime >= w.mtime);
    drop(f);
    drop(fs);
    let fs = Fs::new(store.clone(), FsConfig::default()).unwrap();
    let r = fs.getattr(a.ino).unwrap();
    assert_eq!((r.mtime, r.ctime, r.size), (w2.mtime, w2.ctime, 8192));
    fs.check().unwrap();
}

#[test]
fn a_read_after_an_overwrite_moves_a_relatime_atime() {
    let fs = Fs::new_in_memory();
    let (a, f) = file_in_past(&fs, b"f");
    let mut buf = [0u8; 4];
    fs.read(&f, 0, &mut buf).unwrap();
    let r1 = fs.getattr(a.ino).unwrap();
    assert!(r1.atime > r1.mtime && r1.atime > r1.ctime, "first read");
    fs.write(&f, 0, b"abcd").unwrap();
    let w = fs.getattr(a.ino).unwrap();
    assert!(w.mtime >= r1.atime);
    assert_eq!(w.atime, r1.atime, "a write moved atime");
    fs.read(&f, 0, &mut buf).unwrap();
    let r2 = fs.getattr(a.ino).unwrap();
    assert!(
        r2.atime >= w.mtime && r2.atime > r1.atime,
        "atime not moved"
    );
}

#[test]
fn stat_never_sees_mtime_go_back_during_overwrites() {
    let fs = Fs::new_in_memory();
    let (a, f) = file_in_past(&fs, b"f");
    // 0 until the reader has stated once, then the writes done + 1.
    let writes = Arc::new(AtomicU64::new(0));
    const WRITES: u64 = 5_000;
    let writer = {
        let fs = fs.clone();
        let writes = writes.clone();
        std::thread::spawn(move || {
            while writes.load(Ordering::Relaxed) == 0 {
                std::thread::yield_now();
            }
            for n in 0..WRITES {
                let off = (n * 512) % 8000;
                fs.write(&f, off, &n.to_le_bytes()).unwrap();
                writes.store(n + 2, Ordering::Relaxed);
            }
        })
    };
    let mut last = past();
    let mut stats = 0u64;
    let mut moved = 0u64;
    // From before the writer starts until it is done.
    loop {
        let g = fs.getattr(a.ino).unwrap();
        assert!(g.mtime >= last, "mtime went back: {:?} < {last:?}", g.mtime);
        assert!(g.ctime >= g.mtime, "ctime behind mtime");
        assert_eq!(g.size, 8192);
        moved += u64::from(g.mtime > last);
        last = g.mtime;
        stats += 1;
        match writes.load(Ordering::Relaxed) {
            0 => writes.store(1, Ordering::Relaxed),
            n if n > WRITES => break,
            _ => {}
        }
    }
    writer.join().unwrap();
    let g = fs.getattr(a.ino).unwrap();
    assert!(g.mtime >= last && g.mtime > past());
    assert!(stats > 1, "{stats} stats saw {moved} changes");
}

#[test]
fn data_side_times_before_1970_round_trip() {
    let fs = Fs::new_in_memory();
    let (a, _f) = file_in_past(&fs, b"f");
    let t = Timespec {
        sec: -86_400,
        nsec: 999_999_999,
    };
    let set = SetAttr {
        mtime: Some(TimeSet::At(t)),
        ctime: Some(t),
        ..Default::default()
    };
    fs.setattr(&Cred::root(), a.ino, &set, None).unwrap();
    let g = fs.getattr(a.ino).unwrap();
    assert_eq!((g.mtime, g.ctime), (t, t));
}
