//! Multi-threaded stress: threads doing random operations in a shared
//! directory and in private ones (with cross-directory renames and links,
//! unlink-while-open, truncates, xattrs, listings, cache shrinks), then:
//! `Fs::check()` is clean; the inode and block counters equal the true
//! counts found by walking the tree; and after removing everything and
//! closing every handle the memory store holds only the root inode and no
//! pages.
//!
//! Every test runs on the default engine and again on each seed "before"
//! design (`Variants::baselines()`), with fewer operations, in the
//! `*_every_baseline` tests: a baseline must be exactly as correct.
//!
//! The `*_on_image_small_cache` tests run the same on an image file
//! (`Filesystem::open_image_with`) with a cache budget of 32 inodes and 32
//! pages, so that objects are evicted and reloaded from the image store all
//! the time, and a background commit every 20 ms; after each the image is
//! unmounted, must be fsck-clean and reopen to the same counts.
//!
//! Knobs: `LANEFS_STRESS_OPS` — operations per thread (default 20000);
//! `LANEFS_STRESS_VARIANT_OPS` — per thread and baseline (default 4000);
//! `LANEFS_STRESS_IMAGE_OPS` — per thread on the image (default 4000);
//! `LANEFS_STRESS_SEED` — mixed into every thread's random seed (default
//! 0: the fixed seeds), for soak runs with fresh operation sequences.

use std::collections::HashSet;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};

use lanefs::{
    Cred, Errno, File, FileKind, Filesystem, FsConfig, MemoryStoreConfig, OpenOptions, Variants,
    PAGE_SIZE,
};

const THREADS: usize = 4;
const OPS_DEFAULT: usize = 20_000;
/// Operations per thread for each baseline variant.
const VARIANT_OPS_DEFAULT: usize = 4_000;
/// Rounds of the rmdir race, and for each baseline variant.
const RMDIR_ROUNDS: usize = 4000;
const RMDIR_VARIANT_ROUNDS: usize = 1000;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A fresh in-memory file system with the engine's mechanisms set to
/// `variants`.
/// `LANEFS_STRESS_SEED` (0 when unset): mixed into the random seeds.
fn seed_from_env() -> u64 {
    env_usize("LANEFS_STRESS_SEED", 0) as u64
}

fn new_fs(variants: Variants) -> io::Result<Filesystem> {
    let config = FsConfig {
        variants,
        ..FsConfig::default()
    };
    Filesystem::in_memory(MemoryStoreConfig::default(), config)
}

/// Operations per thread on the image store.
const IMAGE_OPS_DEFAULT: usize = 4_000;
/// The image tests' cache budget, in inodes and in pages.
const IMAGE_CACHE_OBJECTS: usize = 32;

/// A fresh image file in a new temporary directory, mounted with a tiny
/// cache and a background commit every 20 ms.
fn new_image_fs() -> io::Result<(Filesystem, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let img = dir.path().join("stress.img");
    lanefs_image::mkfs(&img, 256 << 20)?;
    let fs = open_image_small_cache(&img)?;
    Ok((fs, dir))
}

fn open_image_small_cache(img: &Path) -> io::Result<Filesystem> {
    let config = FsConfig {
        cache_inodes_max: IMAGE_CACHE_OBJECTS,
        cache_pages_max: IMAGE_CACHE_OBJECTS,
        ..FsConfig::default()
    };
    let store = lanefs::ImageConfig {
        commit_interval: Some(std::time::Duration::from_millis(20)),
        // The store's objects under a few objects' worth (evicted and read
        // back from their homes all the time).
        cache_bytes: Some(4096),
    };
    Filesystem::open_image_with(img, &store, config)
}

/// Unmount `fs` (the last view of an image), check the image with fsck,
/// reopen it and check the engine and the counts again.
fn unmount_check_reopen(fs: Filesystem, dir: &tempfile::TempDir) -> io::Result<()> {
    let before = true_counts(&fs)?;
    // The budget held: what is cached stays near it (a little slack for
    // pages counted before the budget is enforced), far below what the
    // walk just visited.
    let (inodes, pages) = fs.core().cache_counts();
    assert!(
        inodes <= 2 * IMAGE_CACHE_OBJECTS && pages <= 2 * IMAGE_CACHE_OBJECTS,
        "cache over budget: {inodes} inodes, {pages} pages"
    );
    drop(fs);
    let img = dir.path().join("stress.img");
    let report = lanefs_image::fsck(&img, false)?;
    assert!(report.clean, "fsck after unmount: {report:#?}");
    let fs = open_image_small_cache(&img)?;
    if let Err(problems) = fs.core().check() {
        panic!("check after reopening: {:#?}", problems);
    }
    assert_eq!(true_counts(&fs)?, before, "the same tree after reopening");
    Ok(())
}
const NAMES: usize = 12;

/// xorshift64*: a small deterministic generator per thread.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Errors a racing operation may legitimately get; anything else fails.
fn allowed(e: &io::Error) -> bool {
    let ok = [
        Errno::ENOENT,
        Errno::EEXIST,
        Errno::ENOTEMPTY,
        Errno::ENOTDIR,
        Errno::EISDIR,
        Errno::EINVAL,
        Errno::ENODATA,
        Errno::EMLINK,
        Errno::EPERM,
        Errno::EACCES,
        Errno::ELOOP,
        // Opening a whiteout (a 0/0 character device RENAME_WHITEOUT left).
        Errno::ENXIO,
    ];
    match e.raw_os_error() {
        Some(n) => ok.contains(&Errno(n)),
        None => false,
    }
}

fn path(dirs: &[String], rng: &mut Rng) -> String {
    let d = &dirs[rng.below(dirs.len() as u64) as usize];
    let n = rng.below(NAMES as u64);
    match rng.below(4) {
        0 => format!("{}/sub{}/n{}", d, n % 3, rng.below(NAMES as u64)),
        _ => format!("{}/n{}", d, n),
    }
}

/// Runs `ops` random operations; returns how many succeeded.
fn worker(fs: Filesystem, me: usize, ops: usize, start: Arc<Barrier>) -> Result<usize, String> {
    let mut succeeded = 0;
    // Never 0 (xorshift's fixed point).
    let mut rng = Rng((0x9e37_79b9_7f4a_7c15
        ^ ((me as u64 + 1) * 0x1234_5678_9abc_def1)
        ^ seed_from_env())
    .max(1));
    let dirs = vec!["/shared".to_string(), format!("/private{}", me)];
    let mut open: Vec<File> = Vec::new();
    start.wait();
    for i in 0..ops {
        let p = path(&dirs, &mut rng);
        let q = path(&dirs, &mut rng);
        let r: io::Result<()> = match rng.below(20) {
            0 | 1 => fs.write(&p, vec![me as u8; rng.below(3 * PAGE_SIZE as u64) as usize]),
            2 => fs.create_dir(&p),
            3 => fs.remove_file(&p),
            4 => fs.remove_dir(&p),
            5 | 6 => fs.rename(&p, &q),
            7 => fs.hard_link(&p, &q),
            8 => fs.symlink(&q, &p),
            9 => fs.truncate(&p, rng.below(5 * PAGE_SIZE as u64)),
            10 => fs.read(&p).map(drop),
            11 => fs.read_dir(&dirs[rng.below(2) as usize]).and_then(|it| {
                for e in it {
                    e?;
                }
                Ok(())
            }),
            12 => fs.set_xattr(&p, b"user.t", &[me as u8; 16], 0),
            13 => fs.metadata(&p).map(drop),
            14 => {
                // Open, then maybe unlink while open, and keep using it.
                match OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .open(&fs, &p)
                {
                    Ok(f) => {
                        if rng.below(2) == 0 {
                            let _ = fs.remove_file(&p);
                        }
                        let r = f.write_at(&[1u8; 100], rng.below(2 * PAGE_SIZE as u64));
                        open.push(f);
                        r.map(drop)
                    }
                    Err(e) => Err(e),
                }
            }
            15 => match open.pop() {
                Some(f) => f.read_at(&mut [0u8; 64], 0).map(drop),
                None => Ok(()),
            },
            16 => fs.create_dir(format!(
                "{}/sub{}",
                dirs[rng.below(2) as usize],
                rng.below(3)
            )),
            17 => fs.remove_dir_all(format!(
                "{}/sub{}",
                dirs[rng.below(2) as usize],
                rng.below(3)
            )),
            18 => {
                if i % 97 == 0 {
                    fs.core().shrink();
                }
                let flags = match rng.below(2) {
                    0 => lanefs::RENAME_EXCHANGE,
                    _ => lanefs::RENAME_WHITEOUT,
                };
                fs.rename_flags(&p, &q, flags)
            }
            _ => fs
                .with_cred(Cred::user(1000 + me as u32, 1000))
                .write(&p, b"user"),
        };
        match r {
            Ok(()) => succeeded += 1,
            Err(e) if allowed(&e) => {}
            Err(e) => {
                return Err(format!(
                    "thread {} op {}: unexpected error {:?} ({})",
                    me, i, e, p
                ))
            }
        }
        if open.len() > 8 {
            open.remove(0);
        }
    }
    Ok(succeeded)
}

/// Distinct inodes reachable from the root, and the data pages they hold.
fn true_counts(fs: &Filesystem) -> io::Result<(u64, u64)> {
    let mut seen = HashSet::new();
    let mut pages = 0;
    let mut stack: Vec<PathBuf> = vec![PathBuf::from("/")];
    while let Some(p) = stack.pop() {
        let m = fs.symlink_metadata(&p)?;
        if seen.insert(m.ino()) {
            pages += m.blocks() / (PAGE_SIZE as u64 / 512);
        }
        if m.is_dir() {
            for e in fs.read_dir(&p)? {
                let e = e?;
                let mut c = p.as_os_str().as_bytes().to_vec();
                if !c.ends_with(b"/") {
                    c.push(b'/');
                }
                c.extend_from_slice(e.name_bytes());
                stack.push(PathBuf::from(std::ffi::OsStr::from_bytes(&c)));
            }
        }
    }
    Ok((seen.len() as u64, pages))
}

#[test]
fn stress_random_ops_then_check_and_no_leaks() -> io::Result<()> {
    stress_random_ops(
        Variants::default(),
        env_usize("LANEFS_STRESS_OPS", OPS_DEFAULT),
    )
}

#[test]
fn stress_random_ops_every_baseline() -> io::Result<()> {
    let ops = env_usize("LANEFS_STRESS_VARIANT_OPS", VARIANT_OPS_DEFAULT);
    for (name, v) in Variants::baselines() {
        eprintln!("stress: baseline {}", name);
        stress_random_ops(v, ops)?;
    }
    Ok(())
}

fn stress_random_ops(variants: Variants, ops: usize) -> io::Result<()> {
    stress_random_ops_on(&new_fs(variants)?, ops)
}

#[test]
fn stress_random_ops_on_image_small_cache() -> io::Result<()> {
    let (fs, dir) = new_image_fs()?;
    stress_random_ops_on(&fs, env_usize("LANEFS_STRESS_IMAGE_OPS", IMAGE_OPS_DEFAULT))?;
    unmount_check_reopen(fs, &dir)
}

fn stress_random_ops_on(fs: &Filesystem, ops: usize) -> io::Result<()> {
    fs.create_dir("/shared")?;
    fs.set_permissions("/shared", 0o777)?;
    for t in 0..THREADS {
        fs.create_dir(format!("/private{}", t))?;
        fs.set_permissions(format!("/private{}", t), 0o777)?;
    }
    let start = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let fs = fs.clone();
            let start = start.clone();
            std::thread::spawn(move || worker(fs, t, ops, start))
        })
        .collect();
    let mut succeeded = 0;
    for h in handles {
        match h.join() {
            Ok(Ok(n)) => succeeded += n,
            Ok(Err(e)) => panic!("{}", e),
            Err(_) => panic!("a stress thread panicked"),
        }
    }
    // The mix must really change the tree, not just collect errors.
    assert!(
        succeeded * 4 >= ops * THREADS,
        "only {} of {} operations succeeded",
        succeeded,
        ops * THREADS
    );
    // Every handle is closed now (the threads dropped theirs).
    fs.sync()?;
    if let Err(problems) = fs.core().check() {
        panic!("check after stress: {:#?}", problems);
    }
    let (inodes, pages) = true_counts(fs)?;
    assert!(
        inodes > 1 + 1 + THREADS as u64,
        "the stress left files behind to count"
    );
    let s = fs.statfs()?;
    assert_eq!(
        s.files - s.files_free,
        inodes,
        "inode counter = reachable inodes"
    );
    assert_eq!(
        s.blocks - s.blocks_free,
        pages,
        "block counter = pages of reachable files"
    );
    fs.core().shrink();
    assert_eq!(
        true_counts(fs)?,
        (inodes, pages),
        "same after evicting the caches"
    );

    // Remove everything; the store must hold only the root and no pages.
    for e in fs.read_dir("/")?.collect::<io::Result<Vec<_>>>()? {
        let p = Path::new("/").join(std::ffi::OsStr::from_bytes(e.name_bytes()));
        if e.kind() == FileKind::Directory {
            fs.remove_dir_all(&p)?;
        } else {
            fs.remove_file(&p)?;
        }
    }
    fs.sync()?;
    fs.core().shrink();
    if let Err(problems) = fs.core().check() {
        panic!("check after removing everything: {:#?}", problems);
    }
    match fs.memory_store() {
        Some(store) => {
            assert_eq!(store.inode_records(), 1, "only the root inode is left");
            assert_eq!(store.page_records(), 0, "no data pages are left");
        }
        None => {
            let left = fs.core().store().list_inodes()?;
            assert_eq!(left, [lanefs::ROOT_INO], "only the root inode is left");
        }
    }
    let s = fs.statfs()?;
    assert_eq!(s.files - s.files_free, 1);
    assert_eq!(s.blocks_free, s.blocks);
    Ok(())
}

/// Path walks racing with rmdir/mkdir of the directory they walk through:
/// every call gets a clean answer (success or ENOENT/EEXIST/ENOTEMPTY),
/// and the tree is consistent after.
#[test]
fn walks_race_with_rmdir() -> io::Result<()> {
    walks_race_with_rmdir_on(Variants::default(), RMDIR_ROUNDS)
}

#[test]
fn walks_race_with_rmdir_every_baseline() -> io::Result<()> {
    for (name, v) in Variants::baselines() {
        eprintln!("rmdir race: baseline {}", name);
        walks_race_with_rmdir_on(v, RMDIR_VARIANT_ROUNDS)?;
    }
    Ok(())
}

fn walks_race_with_rmdir_on(variants: Variants, rounds: usize) -> io::Result<()> {
    walks_race_with_rmdir_in(&new_fs(variants)?, rounds)
}

#[test]
fn walks_race_with_rmdir_on_image_small_cache() -> io::Result<()> {
    let (fs, dir) = new_image_fs()?;
    walks_race_with_rmdir_in(&fs, RMDIR_VARIANT_ROUNDS)?;
    unmount_check_reopen(fs, &dir)
}

fn walks_race_with_rmdir_in(fs: &Filesystem, rounds: usize) -> io::Result<()> {
    fs.create_dir("/race")?;
    let start = Arc::new(Barrier::new(3));
    let mut handles = Vec::new();
    {
        let fs = fs.clone();
        let start = start.clone();
        handles.push(std::thread::spawn(move || -> Result<(), String> {
            start.wait();
            for _ in 0..rounds {
                for r in [fs.create_dir("/race/d"), fs.remove_dir("/race/d")] {
                    match r {
                        Ok(()) => {}
                        Err(e) if allowed(&e) => {}
                        Err(e) => return Err(format!("mkdir/rmdir: {}", e)),
                    }
                }
            }
            Ok(())
        }));
    }
    for t in 0..2 {
        let fs = fs.clone();
        let start = start.clone();
        handles.push(std::thread::spawn(move || -> Result<(), String> {
            start.wait();
            let p = format!("/race/d/f{}", t);
            for _ in 0..rounds {
                for r in [
                    fs.write(&p, b"x"),
                    fs.remove_file(&p),
                    fs.metadata("/race/d/..").map(drop),
                ] {
                    match r {
                        Ok(()) => {}
                        Err(e) if allowed(&e) => {}
                        Err(e) => return Err(format!("walker: {}", e)),
                    }
                }
            }
            Ok(())
        }));
    }
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("{}", e),
            Err(_) => panic!("a racing thread panicked"),
        }
    }
    let _ = fs.remove_dir_all("/race/d");
    fs.sync()?;
    if let Err(problems) = fs.core().check() {
        panic!("check after the race: {:#?}", problems);
    }
    Ok(())
}

/// Listings racing with creates, unlinks and renames in the same
/// directory: every entry that exists for the whole listing is returned
/// exactly once.
#[test]
fn readdir_under_concurrent_churn() -> io::Result<()> {
    readdir_under_concurrent_churn_on(Variants::default())
}

#[test]
fn readdir_under_concurrent_churn_every_baseline() -> io::Result<()> {
    for (name, v) in Variants::baselines() {
        eprintln!("readdir churn: baseline {}", name);
        readdir_under_concurrent_churn_on(v)?;
    }
    Ok(())
}

fn readdir_under_concurrent_churn_on(variants: Variants) -> io::Result<()> {
    readdir_under_concurrent_churn_in(&new_fs(variants)?)
}

#[test]
fn readdir_under_concurrent_churn_on_image_small_cache() -> io::Result<()> {
    let (fs, dir) = new_image_fs()?;
    readdir_under_concurrent_churn_in(&fs)?;
    unmount_check_reopen(fs, &dir)
}

fn readdir_under_concurrent_churn_in(fs: &Filesystem) -> io::Result<()> {
    const STABLE: usize = 500;
    const LISTINGS: usize = 40;
    fs.create_dir("/d")?;
    for i in 0..STABLE {
        fs.write(format!("/d/stable{}", i), b"")?;
    }
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let stop = Arc::new(AtomicBool::new(false));
    let changes = Arc::new(AtomicU64::new(0));
    let churners: Vec<_> = (0..2)
        .map(|t| {
            let fs = fs.clone();
            let stop = stop.clone();
            let changes = changes.clone();
            std::thread::spawn(move || -> io::Result<()> {
                let mut rng = Rng(((7 + t as u64) ^ seed_from_env()).max(1));
                while !stop.load(Ordering::Relaxed) {
                    let a = format!("/d/churn{}-{}", t, rng.below(200));
                    let b = format!("/d/churn{}-{}", t, rng.below(200));
                    let r = match rng.below(3) {
                        0 => fs.write(&a, b""),
                        1 => fs.remove_file(&a),
                        _ => fs.rename(&a, &b),
                    };
                    match r {
                        Ok(()) => {
                            changes.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            })
        })
        .collect();
    // Keep listing until the directory has really changed under the
    // listings (a loaded machine may schedule the churners late), within
    // a bound.
    let before = changes.load(Ordering::Relaxed);
    let mut listings = 0;
    while listings < LISTINGS || changes.load(Ordering::Relaxed) < before + 200 {
        assert!(listings < 100_000, "the churners never ran");
        listings += 1;
        // A churned name may legitimately show up twice (removed and
        // created again: a new entry); a stable one exactly once.
        let mut seen: std::collections::HashMap<Vec<u8>, u32> = Default::default();
        for e in fs.read_dir("/d")? {
            *seen.entry(e?.name_bytes().to_vec()).or_default() += 1;
        }
        for i in 0..STABLE {
            let n = seen.get(format!("stable{}", i).as_bytes()).copied();
            assert_eq!(n, Some(1), "stable{} must be listed exactly once", i);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for c in churners {
        c.join()
            .map_err(|_| io::Error::other("churner panicked"))??;
    }
    fs.sync()?;
    if let Err(problems) = fs.core().check() {
        panic!("check after churn: {:#?}", problems);
    }
    Ok(())
}
