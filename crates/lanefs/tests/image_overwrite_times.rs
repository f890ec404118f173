//! A pure overwrite (inside the size, onto allocated pages) changes a
//! file's mtime and ctime on its data side only, without the inode's
//! record: `fsync` must still put them into the image's record, so that
//! they survive a crash right after it (a copy of the image file taken
//! then), and unmounting and opening the image again.

use std::io;

use lanefs::{Filesystem, OpenOptions, TimeSet, Timespec};

mod common;
use common::check_then_fsck;

#[test]
fn an_overwrite_then_fsync_keeps_mtime_across_reopen() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let img = dir.path().join("fs.img");
    let synced = dir.path().join("synced.img");
    drop(Filesystem::create_image(&img, 64 << 20)?);
    let past = Timespec {
        sec: 1_000_000,
        nsec: 5,
    };
    let (mtime, ctime) = {
        let fs = Filesystem::open_image(&img)?;
        let f = fs.open_with("/f", OpenOptions::new().write(true).create(true))?;
        f.write_at(&[3u8; 10_000], 0)?;
        fs.set_times("/f", None, Some(TimeSet::At(past)))?;
        f.sync_all()?;
        assert_eq!(fs.metadata("/f")?.mtime(), past);
        let t0 = Timespec::now();
        // Inside the size, onto written pages: a pure overwrite.
        f.write_at(b"overwritten", 4090)?;
        let m = fs.metadata("/f")?;
        assert!(m.mtime() >= t0, "mtime {:?} not moved", m.mtime());
        assert!(m.ctime() >= t0, "ctime {:?} not moved", m.ctime());
        assert_eq!(m.len(), 10_000);
        f.sync_all()?;
        // What fsync made durable, as a crash now would leave it (no
        // writeback at unmount).
        std::fs::copy(&img, &synced)?;
        (m.mtime(), m.ctime())
    };
    for image in [&synced, &img] {
        let fs = Filesystem::open_image(image)?;
        let m = fs.metadata("/f")?;
        assert_eq!(
            (m.mtime(), m.ctime(), m.len()),
            (mtime, ctime, 10_000),
            "{image:?}"
        );
        let mut buf = [0u8; 11];
        fs.open_with("/f", OpenOptions::new().read(true))?
            .read_at(&mut buf, 4090)?;
        assert_eq!(&buf, b"overwritten");
        check_then_fsck(fs, image)?;
    }
    Ok(())
}
