//! `fallocate` on the image store costs O(extents) (issue 13): the image
//! keeps a file's unwritten extents in its object and journal (format 4)
//! instead of the engine writing a zero page for every allocated page at
//! writeback. Checked structurally, not by time: a 1 GiB allocation under
//! a small cache budget leaves the (sparse) image file's own allocation
//! almost unchanged, the file reads zeros and counts its blocks, and all of
//! it survives reopening, punching and writing into the range.

use std::io;
use std::os::unix::fs::MetadataExt;

use lanefs::{
    Filesystem, FsConfig, ImageConfig, OpenOptions, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE,
};

mod common;
use common::check_then_fsck;

const GIB: u64 = 1 << 30;

fn small_budget() -> (ImageConfig, FsConfig) {
    let image = ImageConfig {
        commit_interval: None,
        cache_bytes: Some(1 << 20),
    };
    let config = FsConfig {
        cache_pages_max: 256,
        ..FsConfig::default()
    };
    (image, config)
}

/// Bytes the image file takes on its own file system.
fn image_bytes(img: &std::path::Path) -> u64 {
    std::fs::metadata(img).unwrap().blocks() * 512
}

#[test]
fn a_gigabyte_fallocate_writes_no_zero_pages_and_survives_reopen() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let img = dir.path().join("fs.img");
    drop(Filesystem::create_image(&img, 2 * GIB)?);
    let (image, config) = small_budget();
    let before = image_bytes(&img);
    {
        let fs = Filesystem::open_image_with(&img, &image, config.clone())?;
        let f = fs.open_with("/big", OpenOptions::new().write(true).create(true))?;
        f.fallocate(0, 0, GIB as i64)?;
        f.sync_all()?;
        let m = fs.metadata("/big")?;
        assert_eq!((m.len(), m.blocks()), (GIB, GIB / 512));
        fs.sync()?;
    }
    let grown = image_bytes(&img) - before;
    assert!(
        grown < 64 << 20,
        "a 1 GiB fallocate wrote {grown} bytes into the image (zero pages?)"
    );

    let fs = Filesystem::open_image_with(&img, &image, config.clone())?;
    let m = fs.metadata("/big")?;
    assert_eq!((m.len(), m.blocks()), (GIB, GIB / 512), "after reopen");
    let f = fs.open_with("/big", OpenOptions::new().read(true).write(true))?;
    let mut buf = vec![7u8; 8192];
    for off in [0, GIB / 2 - 4096, GIB - 8192] {
        assert_eq!(f.read_at(&mut buf, off)?, buf.len());
        assert!(buf.iter().all(|&b| b == 0), "zeros at {off}");
    }
    // Data into the range, a hole punched out of it.
    f.write_at(b"inside", GIB / 4)?;
    f.fallocate(
        FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
        (GIB / 2) as i64,
        (64 << 20) as i64,
    )?;
    f.sync_all()?;
    drop(f);
    drop(fs);

    let fs = Filesystem::open_image_with(&img, &image, config)?;
    let m = fs.metadata("/big")?;
    assert_eq!(m.len(), GIB);
    assert_eq!(
        m.blocks(),
        (GIB - (64 << 20)) / 512,
        "the punched range freed"
    );
    let f = fs.open_with("/big", OpenOptions::new().read(true))?;
    let mut word = [0u8; 6];
    f.read_at(&mut word, GIB / 4)?;
    assert_eq!(&word, b"inside");
    drop(f);
    check_then_fsck(fs, &img)
}

/// A truncate to the current size gives the `KEEP_SIZE` reservation past
/// the end back (as tmpfs and ext4; `lanefs-core/tests/truncate_same_size.rs`),
/// also on the image store, where the extents are read back from the
/// image first; the result survives reopening and fsck is clean.
#[test]
fn same_size_truncate_frees_the_reservation_on_the_image() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let img = dir.path().join("fs.img");
    drop(Filesystem::create_image(&img, 256 << 20)?);
    let (image, config) = small_budget();
    {
        let fs = Filesystem::open_image_with(&img, &image, config.clone())?;
        let f = fs.open_with("/f", OpenOptions::new().write(true).create(true))?;
        f.write_at(&[3u8; 10_000], 0)?;
        f.fallocate(FALLOC_FL_KEEP_SIZE, 0, 8 << 20)?;
        f.sync_all()?;
        assert_eq!(fs.metadata("/f")?.blocks(), (8 << 20) / 512);
        fs.sync()?;
    }
    {
        let fs = Filesystem::open_image_with(&img, &image, config.clone())?;
        let f = fs.open_with("/f", OpenOptions::new().write(true))?;
        f.set_len(10_000)?;
        f.sync_all()?;
        let m = fs.metadata("/f")?;
        assert_eq!((m.len(), m.blocks()), (10_000, 3 * 8));
        fs.sync()?;
    }
    let fs = Filesystem::open_image_with(&img, &image, config)?;
    let m = fs.metadata("/f")?;
    assert_eq!((m.len(), m.blocks()), (10_000, 3 * 8), "after reopen");
    let f = fs.open_with("/f", OpenOptions::new().read(true))?;
    let mut buf = vec![0u8; 10_000];
    f.read_at(&mut buf, 0)?;
    assert!(buf.iter().all(|&b| b == 3));
    drop(f);
    check_then_fsck(fs, &img)
}
