//! `RENAME_WHITEOUT` on an image: the whiteout (a 0/0 character device of
//! mode 0) is written with the move, in one transaction, and is there
//! after the image is opened again; the engine's check and fsck agree.

use std::io;

use lanefs::{Filesystem, RENAME_WHITEOUT};

mod common;
use common::check_then_fsck;

#[test]
fn whiteout_survives_reopen_and_fsck() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let img = dir.path().join("fs.img");
    let fs = Filesystem::create_image(&img, 64 << 20)?;
    fs.create_dir("/A")?;
    fs.create_dir("/B")?;
    fs.create_dir("/A/sub")?;
    fs.write("/A/f", b"data")?;
    fs.rename_flags("/A/f", "/B/g", RENAME_WHITEOUT)?;
    fs.rename_flags("/A/sub", "/B/sub", RENAME_WHITEOUT)?;
    fs.sync()?;
    drop(fs);
    let fs = Filesystem::open_image(&img)?;
    for p in ["/A/f", "/A/sub"] {
        let w = fs.symlink_metadata(p)?;
        assert_eq!(
            (w.mode(), w.rdev(), w.nlink(), w.len()),
            (libc::S_IFCHR, 0, 1, 0),
            "{p}"
        );
    }
    assert_eq!(fs.read("/B/g")?, b"data");
    assert!(fs.metadata("/B/sub")?.is_dir());
    assert_eq!(fs.metadata("/A")?.nlink(), 2);
    assert_eq!(fs.metadata("/B")?.nlink(), 3);
    // A whiteout is removed as any node.
    fs.remove_file("/A/f")?;
    check_then_fsck(fs, &img)
}
