//! Inode flags (`chattr`) on an image: they live in the inode record
//! (version 2 of its layout, `lanefs_store::record`), so the journal,
//! checkpoints and recovery carry them as any other field. Set flags are
//! there, and still refuse what they refuse, after the store is opened
//! again; after a power cut every file whose flags were made durable
//! (`fsync`) has exactly them, one whose change was not has the old or
//! the new flags, and fsck and the engine's check are clean.
//!
//! Knob: `LANEFS_ENGINE_CRASH_CUTS` (default 40).

mod common;

use std::sync::Arc;

use common::*;
use lanefs_core::iflags::{FlagsSet, FS_APPEND_FL, FS_IMMUTABLE_FL, FS_NOATIME_FL, FS_NODUMP_FL};
use lanefs_core::{Cred, Fs, FsConfig, ROOT_INO};
use lanefs_image::crash::{next_rand, CrashDevice};
use lanefs_image::{fsck_device, Device, ImageStore, MemDevice};
use lanefs_store::{Errno, Result};

const CREAT: i32 = libc::O_CREAT | libc::O_RDWR;
const FILES: u64 = 12;
const CHOICES: [u32; 5] = [
    FS_IMMUTABLE_FL,
    FS_APPEND_FL | FS_NODUMP_FL,
    FS_NOATIME_FL,
    FS_NODUMP_FL | FS_NOATIME_FL | FS_IMMUTABLE_FL,
    0,
];

fn engine(dev: Arc<dyn Device>) -> Result<Fs> {
    let store = Arc::new(ImageStore::open_device(dev, &cfg())?);
    Fs::new(store, FsConfig::default())
}

#[test]
fn flags_survive_reopen_and_fsck() {
    let dev = fresh(8 << 20);
    let root = Cred::root();
    {
        let fs = engine(dev.clone()).unwrap();
        let d = fs.mkdir(&root, ROOT_INO, b"d", 0o755, 0).unwrap();
        let (f, _, _) = fs
            .open_at(&root, d.ino, b"f", CREAT, 0o644, 0, false)
            .unwrap();
        let set = |ino, flags| fs.set_flags(&root, ino, FlagsSet::Flags(flags)).unwrap();
        set(f.ino, FS_IMMUTABLE_FL | FS_NODUMP_FL);
        set(d.ino, FS_APPEND_FL | FS_NOATIME_FL);
        fs.sync().unwrap();
    }
    let fs = engine(dev.clone()).unwrap();
    let d = fs.lookup(&root, ROOT_INO, b"d").unwrap();
    let f = fs.lookup(&root, d.ino, b"f").unwrap();
    assert_eq!(fs.get_flags(f.ino), Ok(FS_IMMUTABLE_FL | FS_NODUMP_FL));
    assert_eq!(fs.get_flags(d.ino), Ok(FS_APPEND_FL | FS_NOATIME_FL));
    assert_eq!(
        fs.open(&root, f.ino, libc::O_WRONLY).err(),
        Some(Errno::EPERM)
    );
    assert_eq!(fs.unlink(&root, d.ino, b"f"), Err(Errno::EPERM));
    // A new entry inherits the directory's noatime.
    let (g, _, _) = fs
        .open_at(&root, d.ino, b"g", CREAT, 0o644, 0, false)
        .unwrap();
    assert_eq!(fs.get_flags(g.ino), Ok(FS_NOATIME_FL));
    fs.check().unwrap();
    drop(fs);
    let report = fsck_device(dev, false).unwrap();
    assert!(report.clean, "{report:#?}");
}

/// What must hold after a cut: per file made durable, the flags it may
/// have.
#[derive(Default)]
struct Expect(Vec<(String, Vec<u32>)>);

/// Create the files, then give each its flags and `fsync` it.
fn workload(dev: Arc<dyn Device>, seed: u64, ex: &mut Expect) -> Result<()> {
    let fs = engine(dev)?;
    let root = Cred::root();
    let mut rng = seed | 1;
    for k in 0..FILES {
        let name = format!("f{k}");
        let (a, f, _) = fs.open_at(&root, ROOT_INO, name.as_bytes(), CREAT, 0o644, 0, false)?;
        fs.fsync(&f, false)?;
        ex.0.push((name.clone(), vec![0]));
        let flags = CHOICES[(next_rand(&mut rng) % CHOICES.len() as u64) as usize];
        ex.0.last_mut().expect("pushed").1.push(flags);
        fs.set_flags(&root, a.ino, FlagsSet::Flags(flags))?;
        fs.fsync(&f, false)?;
        ex.0.last_mut().expect("pushed").1 = vec![flags];
    }
    Ok(())
}

fn verify(image: Vec<u8>, ex: &Expect, what: &str) {
    let dev = Arc::new(MemDevice::from_bytes(image));
    let raw = fsck_device(dev.clone(), false).unwrap_or_else(|e| panic!("{what}: fsck: {e}"));
    assert!(raw.clean, "{what}: crashed image not clean: {raw:#?}");
    let fs = engine(dev).unwrap();
    if let Err(p) = fs.check() {
        panic!("{what}: engine check after recovery: {p:#?}");
    }
    let root = Cred::root();
    for (name, allowed) in &ex.0 {
        let Ok(a) = fs.lookup(&root, ROOT_INO, name.as_bytes()) else {
            panic!("{what}: fsynced {name} missing");
        };
        let flags = fs.get_flags(a.ino).unwrap();
        assert!(
            allowed.contains(&flags),
            "{what}: {name} has flags {flags:#x}, expected one of {allowed:x?}"
        );
    }
}

#[test]
fn flags_after_power_cuts() {
    let cuts = env_u64("LANEFS_ENGINE_CRASH_CUTS", 40);
    let base = fresh(8 << 20).snapshot();
    let mut rng = env_u64("LANEFS_CRASH_SEED", 0xf1a) | 1;
    for n in 0..cuts {
        let seed = next_rand(&mut rng);
        let tear = n % 2 == 1;
        let dry = Arc::new(CrashDevice::new(base.clone(), None, seed, tear));
        workload(dry.clone(), seed, &mut Expect::default()).unwrap();
        let events = dry.events();
        let cut_at = 1 + next_rand(&mut rng) % events;
        let dev = Arc::new(CrashDevice::new(base.clone(), Some(cut_at), seed, tear));
        let mut ex = Expect::default();
        // The cut may also fall in the final checkpoint at drop.
        let _ = workload(dev.clone(), seed, &mut ex);
        let image = dev.crash_image().expect("cut");
        let what = format!("cut {n} (seed {seed:#x}, event {cut_at}/{events}, tear {tear})");
        verify(image, &ex, &what);
    }
}

tiny_budget_too!(flags_survive_reopen_and_fsck, flags_after_power_cuts);
