//! The differential test (engine against the Linux kernel's tmpfs, see
//! `differential.rs`) with the engine on the image store and a tiny cache
//! budget: 16 inodes and 16 pages, so that inodes, directories and pages
//! are evicted and reloaded from the store all the time (and every other
//! case shrinks the caches after every step). After each case:
//! the engine's check passes; the image, as a power cut right after `sync`
//! would leave it (journal not checkpointed), recovers to the same tree;
//! unmounted cleanly it is fsck-clean and reopens to the same tree; and
//! once everything is removed only the root inode is left.
//!
//! Knobs: `LANEFS_DIFF_IMAGE_CASES` (default 300), `LANEFS_DIFF_STEPS`.
//! Needs root (tmpfs mount, setfsuid), as `differential.rs`.

use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use lanefs::{FileKind, Filesystem, FsConfig, ImageConfig, ImageStore, ROOT_INO};
use lanefs_difftest::{
    cases_from_env, host_protected_hardlinks, run_case_stats, run_proptest, strategy, Case,
    EngineTarget, KernelTarget, Stats, Target, TmpfsMount,
};
use lanefs_image::{fsck_device, mkfs_device, MemDevice};

const CASES_DEFAULT: u32 = 300;
/// Room for every case's data (writes are small; large sizes are sparse).
const IMAGE_BYTES: usize = 8 << 20;
/// The cache budget: a handful of objects, far fewer than a case touches.
const CACHE_OBJECTS: usize = 16;

fn store_config() -> ImageConfig {
    ImageConfig {
        commit_interval: None,
        // The store's objects too: a few objects' worth, evicted and read
        // back from their homes all the time.
        cache_bytes: Some(4096),
    }
}

fn mount(dev: &Arc<MemDevice>) -> Result<(Filesystem, Arc<ImageStore>), String> {
    let store = ImageStore::open_device(dev.clone(), &store_config())
        .map_err(|e| format!("open image: {e}"))?;
    let store = Arc::new(store);
    let config = FsConfig {
        protected_hardlinks: host_protected_hardlinks(),
        cache_inodes_max: CACHE_OBJECTS,
        cache_pages_max: CACHE_OBJECTS,
        ..FsConfig::default()
    };
    let fs = Filesystem::from_store(store.clone(), config).map_err(|e| e.to_string())?;
    Ok((fs, store))
}

/// The tree of the image `dev` holds, opened afresh (recovery included),
/// and that the engine's check passes on it.
fn tree_after_reopen(dev: Arc<MemDevice>, umask: u32) -> Result<lanefs_difftest::Tree, String> {
    let (fs, _store) = mount(&dev)?;
    fs.core()
        .check()
        .map_err(|p| format!("Fs::check after reopening: {p:?}"))?;
    EngineTarget::with_fs(fs, umask, false).snapshot()
}

fn one_case(mount_k: &TmpfsMount, case: &Case, shrink: bool) -> Result<Stats, String> {
    let mut stats = Stats::default();
    let dev = Arc::new(MemDevice::new(IMAGE_BYTES));
    mkfs_device(&*dev).map_err(|e| format!("mkfs: {e}"))?;
    let (fs, store) = mount(&dev)?;
    let mut engine = EngineTarget::with_fs(fs, case.umask, shrink);
    let dir = mount_k.fresh_dir().map_err(|e| e.to_string())?;
    let mut kernel = KernelTarget::new(&dir, case.umask, "tmpfs").map_err(|e| e.to_string())?;
    let result = run_case_stats(case, &mut engine, &mut kernel, &mut stats);
    drop(kernel);
    lanefs_difftest::clear_inode_flags(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    engine.close_all();
    let fs = engine.fs().clone();
    fs.core()
        .check()
        .map_err(|p| format!("Fs::check after the case: {p:?}"))?;
    let tree = engine.snapshot()?;
    // A power cut right after sync: the journal holds what the homes lack.
    fs.sync().map_err(|e| e.to_string())?;
    let cut = Arc::new(MemDevice::from_bytes(dev.snapshot()));
    let recovered = tree_after_reopen(cut, case.umask)?;
    let diff = tree.diff("before the cut", &recovered, "recovered");
    if !diff.is_empty() {
        return Err(format!("recovery after sync lost changes: {diff:#?}"));
    }
    // A clean unmount: fsck-clean, and the same tree.
    drop(engine);
    drop(fs);
    drop(store);
    let report = fsck_device(dev.clone(), false).map_err(|e| format!("fsck: {e}"))?;
    if !report.clean {
        return Err(format!("fsck after unmount: {report:#?}"));
    }
    let reopened = tree_after_reopen(dev.clone(), case.umask)?;
    let diff = tree.diff("before unmount", &reopened, "reopened");
    if !diff.is_empty() {
        return Err(format!("reopened image differs: {diff:#?}"));
    }
    drain_and_check(&dev)?;
    Ok(stats)
}

/// Remove everything below the root; only the root inode is left, also
/// after reopening.
fn drain_and_check(dev: &Arc<MemDevice>) -> Result<(), String> {
    let (fs, store) = mount(dev)?;
    lanefs_difftest::clear_engine_flags(&fs).map_err(|e| format!("clearing flags: {e}"))?;
    for e in fs.read_dir("/").map_err(|e| e.to_string())? {
        let e = e.map_err(|e| e.to_string())?;
        let p = std::path::Path::new("/").join(std::ffi::OsStr::from_bytes(e.name_bytes()));
        let r = if e.kind() == FileKind::Directory {
            fs.remove_dir_all(&p)
        } else {
            fs.remove_file(&p)
        };
        r.map_err(|err| format!("cleanup of {p:?}: {err}"))?;
    }
    fs.sync().map_err(|e| e.to_string())?;
    drop(fs);
    let left = lanefs::Store::list_inodes(&*store).map_err(|e| e.to_string())?;
    if left != [ROOT_INO] {
        return Err(format!("inodes left after removing everything: {left:?}"));
    }
    Ok(())
}

#[test]
fn differential_vs_tmpfs_on_image_small_cache() {
    let mount_k = match TmpfsMount::new() {
        Ok(m) => m,
        Err(e) => panic!("the differential test needs root to mount a tmpfs ({e}); run as root"),
    };
    let cases = cases_from_env("LANEFS_DIFF_IMAGE_CASES", CASES_DEFAULT);
    let steps = cases_from_env("LANEFS_DIFF_STEPS", strategy::STEPS_MAX as u32) as usize;
    // Every other case also evicts every unreferenced object after each
    // step (`Fs::shrink`), so that everything is reloaded from the store.
    let mut n = 0u64;
    let total = run_proptest(cases, steps, |case| {
        n += 1;
        one_case(&mount_k, case, n.is_multiple_of(2))
    })
    .unwrap_or_else(|e| panic!("image store, small cache: {e}"));
    eprintln!("differential on the image store (cache {CACHE_OBJECTS} objects): {total}");
}
