//! Namespace operations on a power-cut device: `lanefs_core::Fs` on an
//! `ImageStore` on a `CrashDevice`, running a random mix of create, mkdir,
//! link, unlink, rmdir, rename (plain, over an existing name, across
//! directories, `RENAME_NOREPLACE`, `RENAME_EXCHANGE`), writes without
//! fsync, unlink of open and looked-up files (orphans), forget and close
//! (frees), fsync and syncfs. After a cut at any device event the image
//! must be fsck-clean and pass the engine's own check: each operation
//! reached the store as one transaction, and recovery derives what the
//! transactions leave out (directory sizes, link counts, next cookies).
//!
//! Knob: `LANEFS_ENGINE_NAMES_CUTS` (default 40); `LANEFS_CRASH_SEED`.

mod common;

use std::sync::Arc;

use common::*;
use lanefs_core::{Cred, Fs, FsConfig, OpenFile, RENAME_EXCHANGE, RENAME_NOREPLACE, ROOT_INO};
use lanefs_image::crash::{next_rand, CrashDevice};
use lanefs_image::{fsck_device, Device, ImageStore, MemDevice};
use lanefs_store::{Errno, Ino, Result};

const STEPS: u64 = 80;
/// Names per directory: few, so operations often meet existing names.
const NAMES: u64 = 5;

fn pick<T: Copy>(rng: &mut u64, v: &[T]) -> T {
    v[(next_rand(rng) % v.len() as u64) as usize]
}

fn name(rng: &mut u64) -> Vec<u8> {
    format!("n{}", next_rand(rng) % NAMES).into_bytes()
}

/// The device is gone (the cut) or the store failed: stop.
fn fatal<T>(r: Result<T>) -> Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e @ (Errno::EIO | Errno::EUCLEAN)) => Err(e),
        // Every other errno is a legitimate answer to a random request.
        Err(_) => Ok(None),
    }
}

fn workload(dev: Arc<dyn Device>, seed: u64) -> Result<()> {
    let store = Arc::new(ImageStore::open_device(dev, &cfg())?);
    let fs = Fs::new(store, FsConfig::default())?;
    let r = Cred::root();
    let mut rng = seed | 1;
    // Held inode numbers (a lookup reference each): directories are never
    // forgotten, files may be.
    let mut dirs: Vec<Ino> = vec![ROOT_INO];
    let mut files: Vec<Ino> = Vec::new();
    let mut open: Vec<OpenFile> = Vec::new();
    for _ in 0..STEPS {
        let d = pick(&mut rng, &dirs);
        let d2 = pick(&mut rng, &dirs);
        let (n, n2) = (name(&mut rng), name(&mut rng));
        match next_rand(&mut rng) % 12 {
            0 | 1 => {
                if let Some(a) = fatal(fs.mknod(&r, d, &n, 0o644, 0, 0))? {
                    files.push(a.ino);
                }
            }
            2 => {
                if let Some(a) = fatal(fs.mkdir(&r, d, &n, 0o755, 0))? {
                    dirs.push(a.ino);
                }
            }
            3 if !files.is_empty() => {
                let f = pick(&mut rng, &files);
                if let Some(a) = fatal(fs.link(&r, f, d, &n))? {
                    fs.forget(a.ino, 1);
                }
            }
            4 => {
                fatal(fs.unlink(&r, d, &n))?;
            }
            5 => {
                fatal(fs.rmdir(&r, d, &n))?;
            }
            6..=8 => {
                let flags = match next_rand(&mut rng) % 4 {
                    0 => RENAME_NOREPLACE,
                    1 => RENAME_EXCHANGE,
                    _ => 0,
                };
                fatal(fs.rename(&r, d, &n, d2, &n2, flags))?;
            }
            9 if !files.is_empty() => {
                // Data without fsync: the record's size and blocks run
                // ahead of the store until writeback.
                let f = pick(&mut rng, &files);
                if let Some(h) = fatal(fs.open(&r, f, libc::O_RDWR))? {
                    let len = 1 + (next_rand(&mut rng) % 9000) as usize;
                    let off = next_rand(&mut rng) % 6000;
                    fatal(fs.write(&h, off, &vec![0x5a; len]))?;
                    if next_rand(&mut rng).is_multiple_of(2) {
                        open.push(h);
                    }
                }
            }
            10 => match next_rand(&mut rng) % 4 {
                0 if !open.is_empty() => {
                    let h = open.swap_remove((next_rand(&mut rng) % open.len() as u64) as usize);
                    fatal(fs.fsync(&h, false))?;
                }
                1 => {
                    fatal(fs.sync())?;
                }
                _ if !open.is_empty() => {
                    // A close: frees the file if it was unlinked meanwhile.
                    open.swap_remove((next_rand(&mut rng) % open.len() as u64) as usize);
                }
                _ => {}
            },
            _ if !files.is_empty() => {
                let i = (next_rand(&mut rng) % files.len() as u64) as usize;
                fs.forget(files.swap_remove(i), 1);
            }
            _ => {}
        }
    }
    Ok(())
}

fn verify(image: Vec<u8>, what: &str) {
    let dev = Arc::new(MemDevice::from_bytes(image));
    let raw = fsck_device(dev.clone(), false).unwrap_or_else(|e| panic!("{what}: fsck: {e}"));
    assert!(raw.clean, "{what}: crashed image not clean: {raw:#?}");
    let store = Arc::new(ImageStore::open_device(dev, &cfg()).unwrap());
    let fs = Fs::new(store, FsConfig::default()).unwrap();
    if let Err(p) = fs.check() {
        panic!("{what}: engine check after recovery: {p:#?}");
    }
}

#[test]
fn namespace_ops_cut_anywhere_leave_a_clean_image() {
    let cuts = env_u64("LANEFS_ENGINE_NAMES_CUTS", 40);
    let base = fresh(8 << 20).snapshot();
    let mut rng = env_u64("LANEFS_CRASH_SEED", 0x4a3e5) | 1;
    for n in 0..cuts {
        let seed = next_rand(&mut rng);
        let tear = n % 2 == 1;
        let dry = Arc::new(CrashDevice::new(base.clone(), None, seed, tear));
        workload(dry.clone(), seed).unwrap();
        // The dry run's image, unmounted cleanly, is clean too.
        verify(dry.current_image(), &format!("seed {seed:#x}, no cut"));
        let events = dry.events();
        let cut_at = 1 + next_rand(&mut rng) % events;
        let dev = Arc::new(CrashDevice::new(base.clone(), Some(cut_at), seed, tear));
        // The cut may also fall in the final checkpoint at drop.
        let _ = workload(dev.clone(), seed);
        let image = dev.crash_image().expect("cut");
        verify(
            image,
            &format!("cut {n} (seed {seed:#x}, event {cut_at}/{events}, tear {tear})"),
        );
    }
}

tiny_budget_too!(namespace_ops_cut_anywhere_leave_a_clean_image,);
