//! Measure memory and time of many files on an image with a small cache
//! budget: create FILES empty files in 1000 directories through the path
//! API, sync, stat every one, and print the time of each phase and the
//! process's resident memory (VmRSS, and the peak VmHWM) after each, then
//! the same after the engine's caches are shrunk. For issue 13's memory
//! budget; figures are not recorded in the docs (the machine is shared).
//!
//! `cargo run --release -p lanefs --example image_many_files -- [FILES] [DIR] [CACHE_MIB]`
//! (defaults 1000000, the temp dir, 64: split as `lanefs mount
//! --cache-size` splits it, three quarters pages, a quarter inodes at 1 KiB).
//! `LANEFS_SKIP_STAT=1` skips the stat pass; `LANEFS_KEEP_IMAGE=1` keeps the image (`DIR/lanefs-many-files.img`);
//! `image_many_files --open IMAGE` then only opens it in a fresh process and
//! prints the memory its loaded metadata takes.

use std::time::Instant;

use lanefs::{Filesystem, FsConfig, ImageConfig, PAGE_SIZE};

fn status(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn report(phase: &str, t: Instant, fs: &Filesystem) {
    let (inodes, pages) = fs.core().cache_counts();
    println!(
        "{phase:<22} {:>8.2} s   VmRSS {:>6} MiB   VmHWM {:>6} MiB   cached inodes {inodes}, pages {pages}",
        t.elapsed().as_secs_f64(),
        status("VmRSS:") / 1024,
        status("VmHWM:") / 1024
    );
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("--open") {
        // Only open an existing image: the memory of its loaded metadata.
        let img = args.nth(1).expect("--open IMAGE");
        let t = Instant::now();
        let fs = Filesystem::open_image_with(
            &img,
            &ImageConfig {
                commit_interval: None,
                cache_bytes: None,
            },
            FsConfig::default(),
        )?;
        report("open", t, &fs);
        return Ok(());
    }
    let files: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let dir = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let cache_mib: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let img = dir.join("lanefs-many-files.img");
    let cache = cache_mib << 20;
    let config = FsConfig {
        cache_pages_max: ((cache / 4 * 3) / PAGE_SIZE as u64).max(64) as usize,
        cache_inodes_max: ((cache / 4) / 1024).max(64) as usize,
        ..FsConfig::default()
    };
    // One inode per 16 KiB, with room.
    let size = (files + 10_000) * 16 * 1024 * 5 / 4;
    let t = Instant::now();
    lanefs_image::mkfs(&img, size)?;
    let store = ImageConfig {
        commit_interval: None,
        cache_bytes: None,
    };
    let fs = Filesystem::open_image_with(&img, &store, config)?;
    report("mkfs + open", t, &fs);
    let dirs = 1000u64;
    let t = Instant::now();
    for d in 0..dirs {
        fs.create_dir(format!("/d{d}"))?;
    }
    for i in 0..files {
        fs.write(format!("/d{}/f{i}", i % dirs), b"")?;
    }
    report("create", t, &fs);
    let t = Instant::now();
    fs.sync()?;
    report("sync", t, &fs);
    if std::env::var_os("LANEFS_SKIP_STAT").is_none() {
        let t = Instant::now();
        for i in 0..files {
            fs.metadata(format!("/d{}/f{i}", i % dirs))?;
        }
        report("stat", t, &fs);
    }
    let t = Instant::now();
    fs.core().shrink();
    report("shrink caches", t, &fs);
    let t = Instant::now();
    drop(fs);
    println!(
        "unmount (checkpoint)   {:>8.2} s",
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let fs = Filesystem::open_image_with(&img, &store, FsConfig::default())?;
    report("reopen (clean)", t, &fs);
    drop(fs);
    if std::env::var_os("LANEFS_KEEP_IMAGE").is_none() {
        std::fs::remove_file(&img)?;
    }
    Ok(())
}
