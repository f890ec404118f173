//! Regression: a truncate racing the last unlink of a file, under cache
//! pressure (eviction and page reclaim on every operation), must return each
//! freed block exactly once. Found by the race test: `maybe_free` read the
//! block count before a truncate in flight had accounted its pages, and
//! eviction let a dying inode's stale record be reloaded as a zombie.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lanefs_core::*;

fn run(config: FsConfig) {
    for round in 0..50 {
        let fs = Fs::new(Arc::new(MemoryStore::default()), config.clone()).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let truncator = {
            let (fs, stop) = (fs.clone(), stop.clone());
            std::thread::spawn(move || {
                let r = Cred::root();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    if let Ok(a) = fs.lookup(&r, ROOT_INO, b"f") {
                        let ch = SetAttr {
                            size: Some((i * 3001) % 12_000),
                            ..Default::default()
                        };
                        let _ = fs.setattr(&r, a.ino, &ch, None);
                    }
                }
            })
        };
        let r = Cred::root();
        for _ in 0..300 {
            let flags = libc::O_CREAT | libc::O_RDWR;
            if let Ok((_, f, _)) = fs.open_at(&r, ROOT_INO, b"f", flags, 0o644, 0, false) {
                let _ = fs.write(&f, 0, &[1u8; 9000]);
            }
            let _ = fs.unlink(&r, ROOT_INO, b"f");
        }
        stop.store(true, Ordering::Relaxed);
        truncator.join().unwrap();
        if let Err(p) = fs.check() {
            panic!("round {round}: {p:?}");
        }
        assert_eq!(
            fs.statfs().unwrap().blocks_free,
            fs.statfs().unwrap().blocks
        );
    }
}

#[test]
fn under_inode_eviction() {
    run(FsConfig {
        cache_inodes_max: 2,
        ..FsConfig::default()
    });
}

#[test]
fn under_page_reclaim() {
    run(FsConfig {
        cache_pages_max: 2,
        ..FsConfig::default()
    });
}
