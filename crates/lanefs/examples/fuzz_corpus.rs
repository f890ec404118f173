//! Write the seed corpus of the image fuzzers (`fuzz/corpus/open_check/`):
//! small valid images made by mkfs and a few file-system operations through
//! the path API, each in a different state (clean, journal to replay,
//! orphan pending, chains, many entries), encoded in the compact sparse
//! format of `lanefs_image::fuzz` (a few KiB each).
//!
//! `cargo run --release -p lanefs --example fuzz_corpus -- [DIR]`
//! (default `fuzz/corpus/open_check`). Deterministic except for the clock
//! fields (timestamps, the journal sequence mkfs takes from the clock), so
//! a rerun rewrites the files with equivalent images.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use lanefs::{Filesystem, FsConfig, ImageConfig, ImageStore, OpenOptions};
use lanefs_image::fuzz::{encode_sparse, FLAG_EXERCISE, FLAG_REPAIR, FLAG_RESEAL};
use lanefs_image::{mkfs_device, MemDevice};

/// The smallest image the format allows is about 1.4 MiB; this is it,
/// rounded up.
const IMAGE_BYTES: usize = 1536 * 1024;

/// A fresh image with the engine on it, the device to snapshot.
fn fresh() -> (Arc<MemDevice>, Filesystem, Arc<ImageStore>) {
    let dev = Arc::new(MemDevice::new(IMAGE_BYTES));
    mkfs_device(&*dev).expect("mkfs");
    let store = ImageStore::open_device(
        dev.clone(),
        &ImageConfig {
            commit_interval: None,
            cache_bytes: None,
        },
    )
    .expect("open");
    let store = Arc::new(store);
    let fs = Filesystem::from_store(store.clone(), FsConfig::default()).expect("mount");
    (dev, fs, store)
}

fn populate(fs: &Filesystem) -> std::io::Result<()> {
    fs.create_dir("/d")?;
    fs.write("/d/a.txt", b"hello, image")?;
    fs.write("/d/two-pages", vec![0x5a; 6000])?;
    fs.symlink("a.txt", "/d/link")?;
    fs.hard_link("/d/a.txt", "/hard")?;
    Ok(())
}

fn main() -> std::io::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("fuzz/corpus/open_check"));
    std::fs::create_dir_all(&dir)?;
    let all = FLAG_EXERCISE | FLAG_REPAIR;
    let mut seeds: Vec<(&str, u8, Vec<u8>)> = Vec::new();

    // mkfs and mount: only the root, checkpointed at unmount.
    let (dev, fs, store) = fresh();
    fs.sync()?;
    drop(fs);
    drop(store);
    seeds.push(("empty", all, dev.snapshot()));

    // A few files, unmounted cleanly (everything home, journal empty).
    let (dev, fs, store) = fresh();
    populate(&fs)?;
    fs.sync()?;
    drop(fs);
    drop(store);
    seeds.push(("clean", all, dev.snapshot()));
    seeds.push(("clean-resealed", all | FLAG_RESEAL, dev.snapshot()));

    // The same, synced but not unmounted: recovery replays the journal.
    let (dev, fs, store) = fresh();
    populate(&fs)?;
    fs.sync()?;
    seeds.push(("journal", all, dev.snapshot()));
    drop(fs);
    drop(store);

    // A file unlinked while open, synced, then the power cut: an orphan.
    let (dev, fs, store) = fresh();
    populate(&fs)?;
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .open(&fs, "/d/orphan")?;
    f.write_all(b"unlinked while open")?;
    fs.remove_file("/d/orphan")?;
    fs.sync()?;
    seeds.push(("orphan", all, dev.snapshot()));
    drop(f);
    drop(fs);
    drop(store);

    // Long records (xattrs past the slot: chain blocks) and a directory of
    // many entries (several entry blocks), half checkpointed.
    let (dev, fs, store) = fresh();
    fs.create_dir("/many")?;
    for i in 0..20 {
        let name = format!("/many/{i:02}-{}", "n".repeat(100 + i * 5));
        fs.write(&name, [i as u8; 10])?;
        if i == 9 {
            fs.sync()?;
            store.checkpoint()?;
        }
    }
    fs.set_xattr("/many", b"user.big", &[7u8; 1500], 0)?;
    fs.sync()?;
    seeds.push(("chains", all, dev.snapshot()));
    drop(fs);
    drop(store);

    for (name, flags, img) in seeds {
        let bytes = encode_sparse(&img, flags);
        let path = dir.join(format!("seed-{name}"));
        std::fs::write(&path, &bytes)?;
        println!("{} ({} bytes)", path.display(), bytes.len());
    }
    Ok(())
}
