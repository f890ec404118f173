//! Memory pressure reaches an image store's own cache: the engine's
//! shrinker in the reclaim registry asks the store for a share of each
//! scan (`Store::shrink`), the store drops clean inode objects whatever its
//! budget, and they read back from their homes. Its own test binary: it
//! lowers the process-wide cache limit, which every mount of a process
//! shares.

use std::io;

mod common;
use common::check_then_fsck;

use lanefs::{set_process_cache_limit, Filesystem, ImageConfig};

const FILES: usize = 600;

fn data(i: usize) -> Vec<u8> {
    format!("file {i} of the reclaim test").into_bytes()
}

#[test]
fn pressure_evicts_clean_store_objects_and_they_read_back() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let img = dir.path().join("fs.img");
    {
        let fs = Filesystem::create_image(&img, 64 << 20)?;
        fs.create_dir("/d")?;
        for i in 0..FILES {
            fs.write(format!("/d/f{i}"), data(i))?;
        }
        fs.sync()?;
    }
    // Reopened: the engine's caches start empty; the store's default
    // budget (512 MiB) holds every object, so only pressure can make it
    // drop any, and after a checkpoint all are clean (evictable).
    let fs = Filesystem::open_image_with(&img, &ImageConfig::default(), Default::default())?;
    let store = fs.image_store().expect("an image store").clone();
    store.checkpoint().map_err(io::Error::from)?;
    let before = store.cache_stats();
    assert!(before.objects as usize > FILES, "{before:?}");

    // Far fewer cached inodes and pages than the files: walking them makes
    // the engine reclaim, and each scan asks the store for its share.
    set_process_cache_limit(128);
    for i in 0..FILES {
        assert_eq!(fs.metadata(format!("/d/f{i}"))?.len(), data(i).len() as u64);
    }
    let squeezed = store.cache_stats();
    assert!(
        squeezed.evictions > before.evictions && squeezed.objects < before.objects,
        "pressure left the store's objects alone: {before:?} → {squeezed:?}"
    );

    // Everything reads back, through objects read from their homes.
    for i in (0..FILES).rev() {
        assert_eq!(fs.read(format!("/d/f{i}"))?, data(i), "f{i}");
    }
    let names = fs.read_dir("/d")?.count();
    assert_eq!(names, FILES);
    assert!(
        store.cache_stats().reads > before.reads,
        "nothing was read back"
    );
    assert!(fs.metadata("/d")?.is_dir());
    drop(store);
    // The image the squeezed store wrote back is whole.
    check_then_fsck(fs, &img)
}
