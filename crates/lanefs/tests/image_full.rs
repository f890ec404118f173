//! A full image never loses a `write` the engine accepted (issue 13): the
//! engine counts against the image's data blocks less what the image's own
//! structures take (entry and chain blocks, and the room its checkpoints
//! need), so a write either fails with `ENOSPC` when it is made or is
//! placed at writeback. Before, directories' blocks were not counted: the
//! writes filling the image succeeded and the `fsync` after them failed
//! with `ENOSPC`, their data gone. Likewise a write into a range
//! `fallocate` allocated must not meet `ENOSPC` at all.

use std::io;

use lanefs::{Filesystem, FsConfig, ImageConfig, OpenOptions};

mod common;
use common::check_then_fsck;

const MIB: u64 = 1 << 20;

fn open(img: &std::path::Path) -> io::Result<Filesystem> {
    let image = ImageConfig {
        commit_interval: None,
        cache_bytes: Some(MIB),
    };
    let config = FsConfig {
        cache_pages_max: 256,
        ..FsConfig::default()
    };
    Filesystem::open_image_with(img, &image, config)
}

/// Directories with many entries, so that their entry blocks take a good
/// part of a small image, made durable (a checkpoint writes their blocks).
fn fill_directories(fs: &Filesystem, dirs: usize, files: usize) -> io::Result<()> {
    for d in 0..dirs {
        fs.create_dir(format!("/d{d}"))?;
        for i in 0..files {
            let name = format!("/d{d}/a-name-long-enough-to-take-room-{i:05}");
            fs.open_with(name, OpenOptions::new().write(true).create(true))?;
        }
        fs.sync()?;
    }
    Ok(())
}

/// Byte `i` of the data written at `off`.
fn pattern(off: u64, i: usize) -> u8 {
    ((off / 4096) as u8).wrapping_mul(31) ^ (i as u8)
}

/// Write 64 KiB chunks to `path` until the engine says `ENOSPC`; returns
/// the bytes written. Any other error fails the test.
fn write_until_full(fs: &Filesystem, path: &str) -> io::Result<u64> {
    let f = fs.open_with(path, OpenOptions::new().write(true).create(true))?;
    let mut off = 0u64;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = pattern(off + (i as u64 / 4096) * 4096, i);
        }
        match f.write_at(&buf, off) {
            Ok(n) => off += n as u64,
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => return Err(e),
        }
    }
    f.sync_all()?;
    Ok(off)
}

fn check_pattern(fs: &Filesystem, path: &str, len: u64) -> io::Result<()> {
    let f = fs.open_with(path, OpenOptions::new().read(true))?;
    let mut buf = vec![0u8; 4096];
    let mut off = 0;
    while off < len {
        let n = f.read_at(&mut buf, off)?;
        for (i, &b) in buf[..n].iter().enumerate() {
            assert_eq!(b, pattern(off, i), "byte {} of {path}", off + i as u64);
        }
        off += n as u64;
    }
    Ok(())
}

#[test]
fn writes_that_fill_an_image_with_directories_on_it_all_reach_the_media() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let img = dir.path().join("fs.img");
    drop(Filesystem::create_image(&img, 64 * MIB)?);
    let written = {
        let fs = open(&img)?;
        fill_directories(&fs, 30, 100)?;
        let written = write_until_full(&fs, "/big")?;
        assert!(written > 32 * MIB, "only {written} bytes fit");
        fs.sync()?;
        written
    };
    let fs = open(&img)?;
    assert_eq!(fs.metadata("/big")?.len(), written);
    check_pattern(&fs, "/big", written)?;
    check_then_fsck(fs, &img)
}

#[test]
fn writes_into_an_allocated_range_of_a_full_image_never_meet_enospc() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let img = dir.path().join("fs.img");
    drop(Filesystem::create_image(&img, 64 * MIB)?);
    let fs = open(&img)?;
    fill_directories(&fs, 10, 100)?;
    let held = 8 * MIB;
    let f = fs.open_with(
        "/held",
        OpenOptions::new().read(true).write(true).create(true),
    )?;
    f.fallocate(0, 0, held as i64)?;
    write_until_full(&fs, "/other")?;
    // Every page of the allocated range gets data now, and must be placed.
    let mut buf = vec![0u8; 64 << 10];
    let mut off = 0;
    while off < held {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = pattern(off + (i as u64 / 4096) * 4096, i);
        }
        f.write_at(&buf, off)?;
        off += buf.len() as u64;
    }
    f.sync_all()?;
    drop(f);
    fs.sync()?;
    drop(fs);
    let fs = open(&img)?;
    check_pattern(&fs, "/held", held)?;
    check_then_fsck(fs, &img)
}
