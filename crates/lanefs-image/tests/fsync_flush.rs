//! One device flush per commit (docs/FORMAT.md, "One flush per commit"):
//! `fsync` of a new file flushes the device once, and power cuts during
//! create+write+fsync and overwrite+fsync workloads never cost a file
//! whose fsync returned its content, nor give any file content that was
//! never written.
//!
//! Knobs: `LANEFS_FSYNC_CUTS` (default 64) and `LANEFS_CRASH_SEED`.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use lanefs_core::{Cred, Fs, FsConfig, OpenFile, ROOT_INO};
use lanefs_image::crash::{next_rand, CrashDevice};
use lanefs_image::{fsck_device, Device, ImageStore, MemDevice, SECTOR};
use lanefs_store::Result;

const CREAT: i32 = libc::O_CREAT | libc::O_RDWR;
const STEPS: u64 = 24;

/// Version `v` of file `k`'s content, `len` bytes: every 8-byte word names
/// the file, the version and its position, so no sector of one version
/// equals a sector of another (or zeros).
fn content(k: u64, v: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut w = 0u64;
    while out.len() < len {
        let word = (k + 1) << 48 | (v + 1) << 32 | w;
        out.extend_from_slice(&word.to_le_bytes());
        w += 1;
    }
    out.truncate(len);
    out
}

/// What the workload did to file `f{k}`.
#[derive(Clone, Debug)]
struct FileModel {
    len: usize,
    /// Versions written, in order (0 = the create's).
    written: u64,
    /// The version whose fsync returned last, if any.
    synced: Option<u64>,
}

/// A device that counts flushes (and passes everything to memory).
struct Counting {
    mem: MemDevice,
    flushes: AtomicU64,
}

impl Device for Counting {
    fn len(&self) -> u64 {
        self.mem.len()
    }
    fn read_at(&self, buf: &mut [u8], off: u64) -> Result<()> {
        self.mem.read_at(buf, off)
    }
    fn write_at(&self, buf: &[u8], off: u64) -> Result<()> {
        self.mem.write_at(buf, off)
    }
    fn flush(&self) -> Result<()> {
        self.flushes.fetch_add(1, Ordering::SeqCst);
        self.mem.flush()
    }
}

fn create(fs: &Fs, dir: u64, k: u64, data: &[u8]) -> Result<OpenFile> {
    let root = Cred::root();
    let name = format!("f{k}");
    let (_, f, _) = fs.open_at(&root, dir, name.as_bytes(), CREAT, 0o644, 0, false)?;
    fs.write(&f, 0, data)?;
    Ok(f)
}

/// The workload: new files (1 to 3 pages and a tail) written and fsynced,
/// and overwrites of earlier files fsynced, with checkpoints now and then
/// so that overwrites hit both journaled pages (copied) and checkpointed
/// ones (overwritten in place). `files` is updated as calls return.
fn workload(dev: Arc<dyn Device>, seed: u64, files: &mut Vec<FileModel>) -> Result<()> {
    let store = Arc::new(ImageStore::open_device(dev, &cfg())?);
    let fs = Fs::new(store.clone(), FsConfig::default())?;
    let root = Cred::root();
    let d = fs.mkdir(&root, ROOT_INO, b"d", 0o755, 0)?;
    fs.sync()?;
    let mut rng = seed | 1;
    let mut open: Vec<OpenFile> = Vec::new();
    for _ in 0..STEPS {
        let r = next_rand(&mut rng);
        if open.is_empty() || !r.is_multiple_of(3) {
            let k = files.len() as u64;
            let len = (1 + r % 3) as usize * 4096 + (r >> 8) as usize % 4096;
            files.push(FileModel {
                len,
                written: 1,
                synced: None,
            });
            let f = create(&fs, d.ino, k, &content(k, 0, len))?;
            fs.fsync(&f, false)?;
            files[k as usize].synced = Some(0);
            open.push(f);
        } else {
            // Often the newest file: its pages are mapped by the last
            // batch, which recovery checks.
            let k = match (r >> 8) % 2 {
                0 => open.len() as u64 - 1,
                _ => (r >> 9) % open.len() as u64,
            };
            let m = &mut files[k as usize];
            let v = m.written;
            m.written += 1;
            let data = content(k, v, m.len);
            fs.write(&open[k as usize], 0, &data)?;
            fs.fsync(&open[k as usize], false)?;
            files[k as usize].synced = Some(v);
        }
        if r.is_multiple_of(5) {
            store.checkpoint()?;
        }
    }
    Ok(())
}

fn read_all(fs: &Fs, dir: u64, k: u64) -> Option<Vec<u8>> {
    let root = Cred::root();
    let a = fs.lookup(&root, dir, format!("f{k}").as_bytes()).ok()?;
    let f = fs.open(&root, a.ino, libc::O_RDONLY).unwrap();
    let mut buf = vec![0u8; a.size as usize];
    assert_eq!(fs.read(&f, 0, &mut buf).unwrap(), buf.len());
    Some(buf)
}

/// Every sector of `got` is the same sector of one of `versions` (or, for
/// a file never synced, zeros: a hole where a page was not yet mapped).
fn sectors_written(got: &[u8], k: u64, versions: std::ops::Range<u64>, zeros: bool) -> bool {
    let all: Vec<Vec<u8>> = versions.map(|v| content(k, v, got.len())).collect();
    got.chunks(SECTOR).enumerate().all(|(i, s)| {
        all.iter()
            .any(|c| c[i * SECTOR..i * SECTOR + s.len()] == *s)
            || (zeros && s.iter().all(|&b| b == 0))
    })
}

fn verify(image: Vec<u8>, files: &[FileModel], what: &str) {
    let dev = Arc::new(MemDevice::from_bytes(image));
    let raw = fsck_device(dev.clone(), false).unwrap_or_else(|e| panic!("{what}: fsck: {e}"));
    assert!(raw.clean, "{what}: crashed image not clean: {raw:#?}");
    let store = Arc::new(
        ImageStore::open_device(dev.clone(), &cfg()).unwrap_or_else(|e| panic!("{what}: {e}")),
    );
    let fs = Fs::new(store, FsConfig::default()).unwrap();
    if let Err(p) = fs.check() {
        panic!("{what}: engine check after recovery: {p:#?}");
    }
    let root = Cred::root();
    let Ok(d) = fs.lookup(&root, ROOT_INO, b"d") else {
        assert!(files.is_empty(), "{what}: d missing");
        return;
    };
    for (k, m) in files.iter().enumerate() {
        let k = k as u64;
        let got = read_all(&fs, d.ino, k);
        match (m.synced, got) {
            (Some(s), None) => panic!("{what}: f{k} (synced version {s}) missing"),
            (Some(s), Some(got)) if s + 1 == m.written => assert!(
                got == content(k, s, m.len),
                "{what}: f{k} lost its synced version {s}"
            ),
            (Some(s), Some(got)) => assert!(
                got.len() == m.len && sectors_written(&got, k, s..m.written, false),
                "{what}: f{k} holds content never written (synced {s} of {})",
                m.written
            ),
            (None, None) => {}
            (None, Some(got)) => assert!(
                (got.is_empty() || got.len() == m.len)
                    && sectors_written(&got, k, 0..m.written, true),
                "{what}: unsynced f{k} holds content never written"
            ),
        }
    }
    drop(fs);
    let after = fsck_device(dev, false).unwrap();
    assert!(after.clean, "{what}: not clean after recovery: {after:#?}");
}

fn run(tear: bool) {
    let cuts = env_u64("LANEFS_FSYNC_CUTS", 64).div_ceil(2);
    let base = fresh(8 << 20).snapshot();
    let mut rng = env_u64("LANEFS_CRASH_SEED", 0xf5c) ^ tear as u64 | 1;
    let mut unlanded = 0;
    for n in 0..cuts {
        let seed = next_rand(&mut rng);
        let dry = Arc::new(CrashDevice::new(base.clone(), None, seed, tear));
        workload(dry.clone(), seed, &mut Vec::new()).unwrap();
        let events = dry.events();
        // Spread over the run, at a random event within each stretch.
        let stretch = events.div_ceil(cuts).max(1);
        let cut_at = (1 + n * stretch + next_rand(&mut rng) % stretch).min(events);
        let dev = Arc::new(CrashDevice::new(base.clone(), Some(cut_at), seed, tear));
        let mut files = Vec::new();
        // The cut may also fall in the final checkpoint at drop.
        let _ = workload(dev.clone(), seed, &mut files);
        let image = dev.crash_image().expect("cut");
        let what = format!("cut {n} (seed {seed:#x}, event {cut_at}/{events}, tear {tear})");
        let r = fsck_device(Arc::new(MemDevice::from_bytes(image.clone())), false).unwrap();
        unlanded += r.records_unlanded;
        verify(image, &files, &what);
    }
    if std::env::var("LANEFS_CRASH_DEBUG").is_ok() {
        eprintln!("tear {tear}: {unlanded} records unlanded over {cuts} cuts");
    }
}

#[test]
fn power_cuts_keep_fsynced_files_and_invent_nothing() {
    run(false);
}

#[test]
fn power_cuts_with_torn_writes_keep_fsynced_files_and_invent_nothing() {
    run(true);
}

/// A fsync of a new file costs one flush, and so does one of an
/// overwrite (copied while its page is journaled, in place after a
/// checkpoint).
#[test]
fn fsync_flushes_the_device_once() {
    let mem = MemDevice::new(16 << 20);
    lanefs_image::mkfs_device(&mem).unwrap();
    let dev = Arc::new(Counting {
        mem,
        flushes: AtomicU64::new(0),
    });
    let store = Arc::new(ImageStore::open_device(dev.clone(), &cfg()).unwrap());
    let fs = Fs::new(store.clone(), FsConfig::default()).unwrap();
    let root = Cred::root();
    let d = fs.mkdir(&root, ROOT_INO, b"d", 0o755, 0).unwrap();
    fs.sync().unwrap();
    let flushes = || dev.flushes.load(Ordering::SeqCst);
    for k in 0..8u64 {
        let len = 4096 * (1 + k as usize % 3) + 100;
        let before = flushes();
        let f = create(&fs, d.ino, k, &content(k, 0, len)).unwrap();
        fs.fsync(&f, false).unwrap();
        assert_eq!(flushes() - before, 1, "create, write and fsync of f{k}");
        let before = flushes();
        fs.write(&f, 0, &content(k, 1, len)).unwrap();
        fs.fsync(&f, false).unwrap();
        assert_eq!(flushes() - before, 1, "overwrite (journaled) of f{k}");
        if k % 2 == 0 {
            store.checkpoint().unwrap();
        }
        let before = flushes();
        fs.write(&f, 0, &content(k, 2, len)).unwrap();
        fs.fsync(&f, false).unwrap();
        assert_eq!(flushes() - before, 1, "overwrite of f{k}");
        assert_eq!(read_all(&fs, d.ino, k).unwrap(), content(k, 2, len));
    }
    drop(fs);
    drop(store);
    let s = ImageStore::open_device(dev.clone(), &cfg()).unwrap();
    let fs = Fs::new(Arc::new(s), FsConfig::default()).unwrap();
    let d = fs.lookup(&root, ROOT_INO, b"d").unwrap();
    for k in 0..8u64 {
        let len = 4096 * (1 + k as usize % 3) + 100;
        assert_eq!(read_all(&fs, d.ino, k).unwrap(), content(k, 2, len));
    }
}

/// A page whose mapping is in the journal's last batch is not overwritten
/// in place: if it were, the power failing after the overwrite reached the
/// media, before the next commit, would fail the batch's checksum and take
/// the fsynced file with it. A page mapped only by its home is overwritten
/// in place. The snapshots are the image with every write so far landed.
#[test]
fn an_overwrite_never_breaks_the_last_batch() {
    use lanefs_store::{FileKind, Store, PAGE_SIZE};
    let dev = fresh(8 << 20);
    let s = open(&dev);
    let ino = s.alloc_ino().unwrap();
    let page = |v: u64| {
        let mut p = [0u8; PAGE_SIZE];
        p.copy_from_slice(&content(ino, v, PAGE_SIZE));
        p
    };
    s.write_page(ino, 0, &page(0)).unwrap();
    s.write_inode(&rec(ino, FileKind::Regular, 1, PAGE_SIZE as u64))
        .unwrap();
    s.sync().unwrap();
    s.write_page(ino, 0, &page(1)).unwrap();
    let journaled = dev.snapshot();
    s.checkpoint().unwrap();
    s.write_page(ino, 0, &page(2)).unwrap();
    let in_place = dev.snapshot();
    std::mem::forget(s); // no final checkpoint: the snapshots are the cuts
    for (image, want, what) in [(journaled, 0, "journaled"), (in_place, 2, "in place")] {
        let s = ImageStore::open_device(Arc::new(MemDevice::from_bytes(image)), &cfg()).unwrap();
        assert_eq!(s.recovery_report().records_unlanded, 0, "{what}");
        assert!(s.read_inode(ino).unwrap().is_some(), "{what}: file lost");
        let mut got = [0u8; PAGE_SIZE];
        assert!(s.read_page(ino, 0, &mut got).unwrap(), "{what}: page lost");
        assert!(got == page(want), "{what}: not version {want}");
    }
}
