//! What a crash loses of writes nobody synced is bounded in time (issue
//! 13: "a background commit bounds what a crash can lose"): a file written
//! and closed without `fsync`, and a directory made, are on the media
//! within about two commit intervals — the mount's flusher writes dirty
//! inodes back to the store each interval (`FsConfig::writeback_interval`)
//! and the store's committer commits them. Before the flusher, the file's
//! data and size stayed in the engine's write-back cache: a copy of the
//! image taken seconds later (what a power cut leaves) had the file's name
//! but size 0.

use std::io;
use std::time::{Duration, Instant};

use lanefs::{Filesystem, FsConfig, ImageConfig, OpenOptions};

#[test]
fn unsynced_writes_reach_the_media_within_two_commit_intervals() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let img = dir.path().join("fs.img");
    let cut = dir.path().join("cut.img");
    drop(Filesystem::create_image(&img, 64 << 20)?);
    let every = Duration::from_millis(200);
    let image = ImageConfig {
        commit_interval: Some(every),
        cache_bytes: Some(1 << 20),
    };
    let fs = Filesystem::open_image_with(&img, &image, FsConfig::default())?;
    let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    let f = fs.open_with("/a", OpenOptions::new().write(true).create(true))?;
    f.write_at(&data, 0)?;
    drop(f);
    fs.create_dir("/sub")?;
    // Copies of the image while the mount runs, as a power cut would
    // leave it, until one holds everything (generous for a loaded
    // machine: the bound is two intervals, 0.4 s).
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "unsynced writes not on the media after {:?}",
            start.elapsed()
        );
        std::thread::sleep(every);
        std::fs::copy(&img, &cut)?;
        // A copy taken while the store writes is not always one a power
        // cut could leave (the copy is not atomic): try again then.
        let Ok(copy) = Filesystem::open_image_with(&cut, &image, FsConfig::default()) else {
            continue;
        };
        let got = copy
            .open_with("/a", OpenOptions::new().read(true))
            .and_then(|f| {
                let mut buf = vec![0u8; data.len()];
                let n = f.read_at(&mut buf, 0)?;
                Ok((copy.metadata("/a")?.len(), n, buf))
            });
        if let Ok((len, n, buf)) = got {
            if len == data.len() as u64 && n == data.len() && buf == data {
                assert!(copy.metadata("/sub")?.is_dir());
                break;
            }
        }
    }
    drop(fs);
    Ok(())
}
