//! Many files under one memory budget: FILES empty files in directories
//! of 1000, created through the engine (`lanefs_core::Fs`) on an image
//! file sized for them, then every one stat'ed (looked up by name in a
//! fresh order), with one `--cache-size`-like budget split as
//! `lanefs mount --cache-size` splits it: half for data pages, a quarter
//! for the engine's inodes (at 1 KiB each), a quarter for the store's inode
//! objects (`ImageConfig::cache_bytes`). Prints creates/s, stats/s, the
//! caches' contents and the process's peak resident memory (VmHWM). For
//! issue 13's memory budget; figures are not recorded in the docs.
//!
//! `cargo run --release -p lanefs-image --example many_files -- [FILES] [DIR] [CACHE_MIB]`
//! (defaults 1000000, the temp dir, 1024). Files are stat'ed directory by
//! directory (as `find` or `ls -lR` would), or with `LANEFS_STAT_ORDER=stride`
//! in a stride over all files (each stat in another directory: the worst
//! case for every cache). The image
//! (`DIR/lanefs-many-files.img`, sparse) is removed at the end unless
//! `LANEFS_KEEP_IMAGE=1`.

use std::sync::Arc;
use std::time::Instant;

use lanefs_core::{Cred, Fs, FsConfig, ROOT_INO};
use lanefs_image::{mkfs, ImageConfig, ImageStore, COMMIT_INTERVAL_DEFAULT};
use lanefs_store::PAGE_SIZE;

const PER_DIR: u64 = 1000;

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn report(phase: &str, n: u64, t: Instant, fs: &Fs, store: &ImageStore) {
    let secs = t.elapsed().as_secs_f64();
    let (inodes, pages) = fs.cache_counts();
    let st = store.cache_stats();
    println!(
        "{phase:<8} {n:>9} in {secs:>7.2} s = {:>9.0}/s   VmRSS {:>5} MiB  VmHWM {:>5} MiB   \
         engine: {inodes} inodes, {pages} pages; store: {} objects, {} MiB ({} MiB unsaved), \
         {} read back, {} evicted",
        n as f64 / secs.max(1e-9),
        status_kib("VmRSS:") / 1024,
        status_kib("VmHWM:") / 1024,
        st.objects,
        st.bytes >> 20,
        st.unsaved_bytes >> 20,
        st.reads,
        st.evictions,
    );
}

/// File `i`'s directory and name.
fn place(i: u64) -> (u64, Vec<u8>) {
    (i / PER_DIR, format!("f{i}").into_bytes())
}

fn main() {
    let mut args = std::env::args().skip(1);
    let files: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let dir = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let cache_mib: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let cache = cache_mib << 20;
    let config = FsConfig {
        cache_pages_max: ((cache / 2) / PAGE_SIZE as u64).max(64) as usize,
        cache_inodes_max: ((cache / 4) / 1024).max(64) as usize,
        ..FsConfig::default()
    };
    let store_cfg = ImageConfig {
        commit_interval: Some(COMMIT_INTERVAL_DEFAULT),
        cache_bytes: Some(cache / 4),
    };
    let dirs = files.div_ceil(PER_DIR);
    let img = dir.join("lanefs-many-files.img");
    // One inode per 16 KiB (the format's ratio), with room.
    let size = (files + dirs + 10_000) * 16 * 1024 * 5 / 4;
    let t = Instant::now();
    mkfs(&img, size).expect("mkfs");
    let store = Arc::new(ImageStore::open_with(&img, &store_cfg).expect("open"));
    let fs = Fs::new(store.clone(), config).expect("engine");
    println!(
        "{files} files in {dirs} directories, budget {cache_mib} MiB; mkfs {} MiB + open {:.2} s",
        size >> 20,
        t.elapsed().as_secs_f64()
    );
    let root = Cred::root();
    let t = Instant::now();
    // Creation returns a counted (lookup) reference, as to the kernel,
    // which forgets it when its own cache drops the inode: at once here.
    let dir_inos: Vec<u64> = (0..dirs)
        .map(|d| {
            let ino = fs
                .mkdir(&root, ROOT_INO, format!("d{d}").as_bytes(), 0o755, 0)
                .expect("mkdir")
                .ino;
            fs.forget(ino, 1);
            ino
        })
        .collect();
    for i in 0..files {
        let (d, name) = place(i);
        let a = fs
            .mknod(
                &root,
                dir_inos[d as usize],
                &name,
                libc::S_IFREG | 0o644,
                0,
                0,
            )
            .expect("create");
        fs.forget(a.ino, 1);
    }
    report("create", files, t, &fs, &store);
    let t = Instant::now();
    fs.sync().expect("sync");
    report("sync", files, t, &fs, &store);
    // In directory order, or in a stride prime to `files`, which visits
    // every file once, each time in another directory.
    let gcd = |mut a: u64, mut b: u64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let mut stride = 1;
    if std::env::var("LANEFS_STAT_ORDER").as_deref() == Ok("stride") {
        stride = 7_919 % files.max(1);
        while files > 1 && gcd(stride, files) != 1 {
            stride += 1;
        }
    }
    let t = Instant::now();
    let mut i = 0;
    for _ in 0..files {
        let (d, name) = place(i);
        let a = fs.lookup(&root, dir_inos[d as usize], &name).expect("stat");
        assert_eq!(a.size, 0);
        i = (i + stride) % files;
    }
    report("stat", files, t, &fs, &store);
    let t = Instant::now();
    drop(fs);
    drop(store);
    println!(
        "unmount (checkpoint) {:.2} s; peak VmHWM {} MiB",
        t.elapsed().as_secs_f64(),
        status_kib("VmHWM:") / 1024
    );
    if std::env::var_os("LANEFS_KEEP_IMAGE").is_none() {
        let _ = std::fs::remove_file(&img);
    }
}
