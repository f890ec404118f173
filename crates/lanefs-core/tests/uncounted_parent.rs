//! Changes of names in a directory nobody holds a reference to
//! (`Fs::with_dir` inside the engine, `DirAt` outside): a stale generation
//! answers `ENOENT`, and creates, unlinks and renames racing the eviction of
//! their directory lose nothing — the directory's entries, size and link
//! count stay exact, for every inode-cache design.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lanefs_core::*;

const ALL: [IcacheVariant; 4] = [
    IcacheVariant::Rcu,
    IcacheVariant::Global,
    IcacheVariant::RcuGlobalInsert,
    IcacheVariant::BucketLock,
];

fn fs_with(icache: IcacheVariant, cache_inodes_max: usize) -> Fs {
    let mut config = FsConfig {
        cache_inodes_max,
        ..FsConfig::default()
    };
    config.variants.icache = icache;
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig {
        capacity_bytes: 1 << 26,
        max_inodes: 1 << 20,
    }));
    Fs::new(store, config).unwrap()
}

fn checked(fs: &Fs, what: &str) {
    if let Err(problems) = fs.check() {
        panic!("{what}: check failed: {problems:#?}");
    }
}

#[test]
fn a_stale_generation_is_enoent() {
    let fs = Fs::new_in_memory();
    let r = Cred::root();
    let d = fs.mkdir(&r, ROOT_INO, b"d", 0o755, 0).unwrap();
    fs.forget(d.ino, 1);
    let here = DirAt::checked(d.ino, d.generation);
    let other = DirAt::checked(d.ino, d.generation.wrapping_add(1));
    assert_eq!(
        fs.mknod(&r, other, b"f", 0o644, 0, 0).unwrap_err(),
        Errno::ENOENT
    );
    assert_eq!(fs.lookup(&r, other, b"f").unwrap_err(), Errno::ENOENT);
    let f = fs.mknod(&r, here, b"f", 0o644, 0, 0).unwrap();
    fs.forget(f.ino, 1);
    assert_eq!(fs.lookup(&r, here, b"f").unwrap().ino, f.ino);
    assert_eq!(
        fs.rename(&r, here, b"f", other, b"g", 0).unwrap_err(),
        Errno::ENOENT
    );
    assert_eq!(fs.unlink(&r, other, b"f").unwrap_err(), Errno::ENOENT);
    fs.rename(&r, here, b"f", here, b"g", 0).unwrap();
    fs.unlink(&r, here, b"g").unwrap();
    fs.rmdir(&r, ROOT_INO, b"d").unwrap();
    // Gone: whatever has the number now (nothing, or a new inode), the
    // generation seen no longer names it.
    assert_eq!(
        fs.mknod(&r, here, b"f", 0o644, 0, 0).unwrap_err(),
        Errno::ENOENT
    );
    assert_eq!(fs.unlink(&r, here, b"f").unwrap_err(), Errno::ENOENT);
    checked(&fs, "after rmdir");
}

/// Two threads create, rename and unlink names in one unreferenced
/// directory while a third evicts everything unreferenced in a loop (and a
/// tiny budget evicts on every create): the directory is claimed for
/// eviction while changes run in it, which must either finish first or
/// see the claim and start over on a counted reference.
#[test]
fn changes_in_an_unreferenced_directory_beside_eviction() {
    const PER_THREAD: usize = 400;
    for v in ALL {
        let fs = fs_with(v, 8);
        let r = Cred::root();
        let d = fs.mkdir(&r, ROOT_INO, b"d", 0o755, 0).unwrap();
        let sub = fs.mkdir(&r, d.ino, b"sub", 0o755, 0).unwrap();
        fs.forget(sub.ino, 1);
        fs.forget(d.ino, 1);
        let at = DirAt::checked(d.ino, d.generation);
        let stop = Arc::new(AtomicBool::new(false));
        std::thread::scope(|s| {
            let evictor = {
                let (fs, stop) = (fs.clone(), stop.clone());
                s.spawn(move || {
                    let mut rounds = 0u64;
                    loop {
                        fs.shrink();
                        rounds += 1;
                        if stop.load(Ordering::Relaxed) {
                            return rounds;
                        }
                    }
                })
            };
            let workers: Vec<_> = (0..2)
                .map(|t| {
                    let fs = fs.clone();
                    s.spawn(move || {
                        let r = Cred::root();
                        for i in 0..PER_THREAD {
                            let a = format!("t{t}-{i}");
                            let b = format!("t{t}-{i}-moved");
                            let f = fs.mknod(&r, at, a.as_bytes(), 0o644, 0, 0).unwrap();
                            fs.forget(f.ino, 1);
                            fs.rename(&r, at, a.as_bytes(), at, b.as_bytes(), 0)
                                .unwrap();
                            // A lookup of an existing name through the
                            // directory (open by name), then a create of
                            // one that exists (open, no O_EXCL).
                            let (_, h, _) = fs
                                .open_at(&r, at, b.as_bytes(), libc::O_RDONLY, 0, 0, false)
                                .unwrap();
                            drop(h);
                            let flags = libc::O_RDWR | libc::O_CREAT;
                            let (_, h, made) = fs
                                .open_at(&r, at, b.as_bytes(), flags, 0o644, 0, false)
                                .unwrap();
                            assert!(!made, "{b} exists");
                            drop(h);
                            if i % 2 == 0 {
                                fs.unlink(&r, at, b.as_bytes()).unwrap();
                            }
                            if i % 50 == 0 {
                                let sd = format!("t{t}-dir{i}");
                                let x = fs.mkdir(&r, at, sd.as_bytes(), 0o755, 0).unwrap();
                                fs.forget(x.ino, 1);
                            }
                        }
                    })
                })
                .collect();
            // Stop the evictor before any worker's panic is passed on.
            let results: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
            stop.store(true, Ordering::Relaxed);
            assert!(evictor.join().unwrap() > 0);
            for r in results {
                r.unwrap();
            }
        });
        let files = 2 * PER_THREAD / 2;
        let dirs = 2 * PER_THREAD.div_ceil(50) + 1;
        let a = fs.getattr(d.ino).unwrap();
        assert_eq!(a.nlink as usize, 2 + dirs, "{v:?}: link count");
        let h = fs.open(&r, d.ino, libc::O_RDONLY).unwrap();
        let mut names = 0;
        fs.readdir(&h, 0, &mut |e| {
            if e.name != b"." && e.name != b".." {
                names += 1;
            }
            false
        })
        .unwrap();
        drop(h);
        assert_eq!(names, files + dirs, "{v:?}: entries");
        fs.shrink();
        let again = fs.getattr(d.ino).unwrap();
        assert_eq!(again.size, a.size, "{v:?}: size after a reload");
        assert_eq!(again.nlink, a.nlink, "{v:?}: link count after a reload");
        checked(&fs, &format!("{v:?}"));
    }
}
