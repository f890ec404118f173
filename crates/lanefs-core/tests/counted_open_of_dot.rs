//! A counted open (`open_at(.., counted)`) of `.` or `..` adds the lookup
//! reference it promises, as one of any other name does: its caller
//! forgets one when done. Before, the dot names were opened by number
//! and counted nothing, so the caller's forget took away a reference
//! someone else held (FUSE's kernel, here): the directory, then removed,
//! was freed under that holder.

use lanefs_core::{Cred, DirAt, Errno, Fs, ROOT_INO};

#[test]
fn a_counted_open_of_dot_or_dotdot_counts_a_lookup() {
    for name in [&b"."[..], b".."] {
        let fs = Fs::new_in_memory();
        let r = Cred::root();
        // `d` looked up once by its holder (mkdir counts), `d/e` too.
        let d = fs.mkdir(&r, ROOT_INO, b"d", 0o755, 0).unwrap();
        let e = fs.mkdir(&r, d.ino, b"e", 0o755, 0).unwrap();
        // Open `d` as `d/.` or `d/e/..`, counted, then give that count back.
        let at = if name == b"." {
            DirAt::checked(d.ino, d.generation)
        } else {
            DirAt::checked(e.ino, e.generation)
        };
        let flags = libc::O_RDONLY | libc::O_DIRECTORY;
        let (a, h, created) = fs.open_at(&r, at, name, flags, 0, 0, true).unwrap();
        assert_eq!((a.ino, created), (d.ino, false));
        drop(h);
        fs.forget(a.ino, 1);
        // The holder's count keeps `d` once removed: still there by number.
        fs.rmdir(&r, d.ino, b"e").unwrap();
        fs.forget(e.ino, 1);
        fs.rmdir(&r, ROOT_INO, b"d").unwrap();
        let got = fs.getattr(d.ino);
        assert!(
            matches!(got, Ok(ref g) if g.ino == d.ino && g.nlink == 0),
            "{}: the holder's directory is gone: {got:?}",
            String::from_utf8_lossy(name)
        );
        fs.check().unwrap();
        fs.forget(d.ino, 1);
        assert_eq!(fs.getattr(d.ino).map(|g| g.ino), Err(Errno::ENOENT));
        fs.check().unwrap();
    }
}
