//! The engine on a power-cut device: `lanefs_core::Fs` on an `ImageStore`
//! on a `CrashDevice`. After each cut: the image opens and every file whose sync returned has its full
//! contents, a write-temp-then-rename never leaves an empty or missing file,
//! and an unlink whose sync returned stays done.
//!
//! Knob: `LANEFS_ENGINE_CRASH_CUTS` (default 60).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use lanefs_core::{Cred, Fs, FsConfig, ROOT_INO};
use lanefs_image::crash::{next_rand, CrashDevice};
use lanefs_image::{fsck_device, Device, ImageStore, MemDevice};
use lanefs_store::{Errno, Result};

const CREAT: i32 = libc::O_CREAT | libc::O_RDWR;
const FILES: u64 = 16;

fn body(k: u64, seed: u64) -> Vec<u8> {
    let len = 1000 + ((k * 7919 + seed) % 20_000) as usize;
    (0..len).map(|i| (i as u64 * 31 + k + seed) as u8).collect()
}

/// What must hold after a cut: name -> contents that must be there.
#[derive(Default)]
struct Expect {
    durable: BTreeMap<String, Vec<u8>>,
    /// Renamed from temp to final: (temp, final, contents), one must exist.
    renames: Vec<(String, String, Vec<u8>)>,
    gone: Vec<String>,
}

fn workload(dev: Arc<dyn Device>, seed: u64, ex: &mut Expect, full: bool) -> Result<()> {
    let store = Arc::new(ImageStore::open_device(dev, &cfg())?);
    let fs = Fs::new(store, FsConfig::default())?;
    let root = Cred::root();
    let d = match fs.lookup(&root, ROOT_INO, b"d") {
        Ok(a) => a,
        Err(_) => fs.mkdir(&root, ROOT_INO, b"d", 0o755, 0)?,
    };
    let mut rng = seed | 1;
    for k in 0..FILES {
        let data = body(k, seed);
        match next_rand(&mut rng) % 3 {
            0 => {
                let name = format!("f{k}");
                let (_, f, _) =
                    fs.open_at(&root, d.ino, name.as_bytes(), CREAT, 0o644, 0, false)?;
                fs.write(&f, 0, &data)?;
                durable(&fs, &f, full)?;
                ex.durable.insert(name, data);
            }
            1 => {
                let (tmp, fin) = (format!("tmp{k}"), format!("r{k}"));
                let (_, f, _) = fs.open_at(&root, d.ino, tmp.as_bytes(), CREAT, 0o644, 0, false)?;
                fs.write(&f, 0, &data)?;
                durable(&fs, &f, full)?;
                ex.durable.insert(tmp.clone(), data.clone());
                fs.rename(&root, d.ino, tmp.as_bytes(), d.ino, fin.as_bytes(), 0)?;
                ex.durable.remove(&tmp);
                ex.renames.push((tmp.clone(), fin.clone(), data.clone()));
                fs.sync()?;
                ex.renames.pop();
                ex.durable.insert(fin, data);
            }
            _ => {
                if let Some(victim) = ex.durable.keys().next().cloned() {
                    let data = ex.durable.remove(&victim).expect("present");
                    // Until the sync returns it may or may not be gone.
                    ex.renames.push((victim.clone(), victim.clone(), data));
                    fs.unlink(&root, d.ino, victim.as_bytes())?;
                    fs.sync()?;
                    ex.renames.pop();
                    ex.gone.push(victim);
                }
            }
        }
    }
    Ok(())
}

/// `fsync` of the file (`full`), or `syncfs` of the whole file system.
fn durable(fs: &Fs, f: &lanefs_core::OpenFile, full: bool) -> Result<()> {
    if full {
        fs.fsync(f, false)
    } else {
        fs.sync()
    }
}

fn read_all(fs: &Fs, dir: u64, name: &str) -> Option<Vec<u8>> {
    let root = Cred::root();
    let a = fs.lookup(&root, dir, name.as_bytes()).ok()?;
    let f = fs.open(&root, a.ino, libc::O_RDONLY).unwrap();
    let mut buf = vec![0u8; a.size as usize];
    assert_eq!(fs.read(&f, 0, &mut buf).unwrap(), buf.len());
    Some(buf)
}

fn verify(image: Vec<u8>, ex: &Expect, what: &str, full: bool) {
    let dev = Arc::new(MemDevice::from_bytes(image));
    let raw = fsck_device(dev.clone(), false).unwrap_or_else(|e| panic!("{what}: fsck: {e}"));
    assert!(
        raw.clean || !full,
        "{what}: crashed image not clean: {raw:#?}"
    );
    let store = Arc::new(ImageStore::open_device(dev, &cfg()).unwrap());
    let fs = Fs::new(store, FsConfig::default()).unwrap();
    if full {
        if let Err(p) = fs.check() {
            panic!("{what}: engine check after recovery: {p:#?}");
        }
    }
    let root = Cred::root();
    let Ok(d) = fs.lookup(&root, ROOT_INO, b"d") else {
        assert!(
            ex.durable.is_empty() && ex.gone.is_empty(),
            "{what}: d missing"
        );
        return;
    };
    for (name, data) in &ex.durable {
        let got =
            read_all(&fs, d.ino, name).unwrap_or_else(|| panic!("{what}: fsynced {name} missing"));
        assert!(
            got == *data,
            "{what}: fsynced {name} has other contents ({} bytes)",
            got.len()
        );
    }
    for (tmp, fin, data) in &ex.renames {
        let a = read_all(&fs, d.ino, tmp);
        let b = read_all(&fs, d.ino, fin);
        assert!(
            a.as_ref() == Some(data) || b.as_ref() == Some(data) || (tmp == fin && a.is_none()),
            "{what}: {tmp} -> {fin}: neither name holds the contents"
        );
    }
    for name in &ex.gone {
        assert_eq!(
            fs.lookup(&root, d.ino, name.as_bytes()).err(),
            Some(Errno::ENOENT),
            "{what}: {name} came back"
        );
    }
}

fn run(full: bool) {
    let cuts = env_u64("LANEFS_ENGINE_CRASH_CUTS", 60);
    let base = fresh(8 << 20).snapshot();
    let mut rng = env_u64("LANEFS_CRASH_SEED", 0xe2e) | 1;
    for n in 0..cuts {
        let seed = next_rand(&mut rng);
        let tear = n % 2 == 1;
        let dry = Arc::new(CrashDevice::new(base.clone(), None, seed, tear));
        workload(dry.clone(), seed, &mut Expect::default(), full).unwrap();
        let events = dry.events();
        let cut_at = 1 + next_rand(&mut rng) % events;
        let dev = Arc::new(CrashDevice::new(base.clone(), Some(cut_at), seed, tear));
        let mut ex = Expect::default();
        // The cut may also fall in the final checkpoint at drop.
        let _ = workload(dev.clone(), seed, &mut ex, full);
        let image = dev.crash_image().expect("cut");
        verify(
            image,
            &ex,
            &format!("cut {n} (seed {seed:#x}, event {cut_at}/{events}, tear {tear})"),
            full,
        );
    }
}

/// Durability points are `syncfs` (`Fs::sync`): every file synced is
/// intact, renames leave one full name, synced unlinks stay done. fsck and
/// the engine check are not asserted: see the next test.
#[test]
fn engine_power_cuts_keep_synced_files() {
    run(false);
}

/// The full guarantee: durability points are `fsync` of the file, and after
/// the cut fsck is clean and the engine's own check passes. Each engine
/// operation reaches the store as one `Txn` (`Store::commit`): an entry and
/// the record it names are durable together, an unlinked inode is an orphan
/// until its freeing transaction, and recovery derives a directory's size,
/// link count and next cookie from its entries (the directory's record is
/// written only at writeback). fsync's store sync commits the journal, so
/// the file's create transaction (its entry) is durable with its data.
#[test]
fn engine_power_cuts_full_guarantee() {
    run(true);
}

tiny_budget_too!(
    engine_power_cuts_keep_synced_files,
    engine_power_cuts_full_guarantee,
);
