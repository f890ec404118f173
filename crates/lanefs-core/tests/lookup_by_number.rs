//! `Fs::lookup_number_counted`: an inode found by its number alone, as a
//! file handle finds it (FUSE's LOOKUP of `.` under `FUSE_EXPORT_SUPPORT`,
//! which the kernel sends for `open_by_handle_at` of an inode it evicted;
//! xfstests generic/426, 467, 477). Any kind, counted, read back from the
//! store after the inode left the cache; a number that names nothing, or a
//! file removed and freed, is `ENOENT` (the kernel's `ESTALE`); a number
//! reused answers the new inode with its own generation (the kernel then
//! finds the handle stale).

use lanefs_core::*;

fn root() -> Cred {
    Cred::root()
}

#[test]
fn any_kind_by_number_counted_and_read_back_after_eviction() {
    let fs = Fs::new_in_memory();
    let r = root();
    let d = fs.mkdir(&r, ROOT_INO, b"d", 0o755, 0).unwrap();
    let f = fs.mknod(&r, d.ino, b"f", 0o640, 0, 0).unwrap();
    let l = fs.symlink(&r, d.ino, b"l", b"f").unwrap();
    for a in [&d, &f, &l] {
        fs.forget(a.ino, 1);
    }
    // Nothing holds them: out of the cache, into the store only.
    fs.shrink();
    for a in [&d, &f, &l] {
        let got = fs.lookup_number_counted(a.ino).unwrap();
        assert_eq!(
            (got.ino, got.generation, got.kind, got.perm, got.nlink),
            (a.ino, a.generation, a.kind, a.perm, a.nlink)
        );
    }
    // The directory's parent, as the kernel reconnects a directory handle.
    let up = fs.lookup_counted(&r, d.ino, b"..").unwrap();
    assert_eq!(up.ino, ROOT_INO);
    // Each answer took one reference: given back, everything is removable
    // and nothing leaks.
    for a in [&d, &f, &l] {
        fs.forget(a.ino, 1);
    }
    fs.check().unwrap();
    fs.unlink(&r, d.ino, b"f").unwrap();
    fs.unlink(&r, d.ino, b"l").unwrap();
    fs.rmdir(&r, ROOT_INO, b"d").unwrap();
    fs.check().unwrap();
}

#[test]
fn freed_or_unknown_numbers_are_enoent_and_reuse_has_a_new_generation() {
    let fs = Fs::new_in_memory();
    let r = root();
    assert_eq!(fs.lookup_number_counted(0).unwrap_err(), Errno::ENOENT);
    assert_eq!(
        fs.lookup_number_counted(1 << 40).unwrap_err(),
        Errno::ENOENT
    );
    let f = fs.mknod(&r, ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    fs.forget(f.ino, 1);
    fs.unlink(&r, ROOT_INO, b"f").unwrap();
    assert_eq!(fs.lookup_number_counted(f.ino).unwrap_err(), Errno::ENOENT);
    // Create until the number comes back (the store reuses freed numbers).
    let mut reused = None;
    for i in 0..64 {
        let x = fs
            .mknod(&r, ROOT_INO, format!("x{i}").as_bytes(), 0o644, 0, 0)
            .unwrap();
        fs.forget(x.ino, 1);
        if x.ino == f.ino {
            reused = Some(x);
            break;
        }
    }
    let x = reused.expect("the memory store reuses a freed inode number");
    let got = fs.lookup_number_counted(f.ino).unwrap();
    assert_eq!(got.generation, x.generation);
    assert_ne!(got.generation, f.generation);
    fs.forget(got.ino, 1);
    fs.check().unwrap();
}

#[test]
fn an_unlinked_open_file_answers_until_its_last_close() {
    let fs = Fs::new_in_memory();
    let r = root();
    let f = fs.mknod(&r, ROOT_INO, b"f", 0o644, 0, 0).unwrap();
    let h = fs.open(&r, f.ino, libc::O_RDWR).unwrap();
    fs.forget(f.ino, 1);
    fs.unlink(&r, ROOT_INO, b"f").unwrap();
    let got = fs.lookup_number_counted(f.ino).unwrap();
    assert_eq!((got.ino, got.nlink), (f.ino, 0));
    fs.forget(f.ino, 1);
    drop(h);
    assert_eq!(fs.lookup_number_counted(f.ino).unwrap_err(), Errno::ENOENT);
    fs.check().unwrap();
}
