//! Helpers shared by the image-store tests.
#![allow(dead_code)]

use std::sync::Arc;

use lanefs_image::{mkfs_device, ImageConfig, ImageStore, MemDevice};
use lanefs_store::{FileKind, Ino, InodeRecord, Timespec, PAGE_SIZE};

/// Store budget of the tests run by [`tiny_budget_too`]: a few objects'
/// worth, so objects are evicted and read back all the time.
pub const TINY_BUDGET: u64 = 4 << 10;

thread_local! {
    static BUDGET: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// The store configuration of the tests: no background commit; the
/// object cache unbounded, or [`TINY_BUDGET`] inside [`with_tiny_budget`].
pub fn cfg() -> ImageConfig {
    ImageConfig {
        commit_interval: None,
        cache_bytes: BUDGET.with(|b| b.get()),
    }
}

/// Run `test` with every store it opens (on this thread, through
/// [`cfg`]) under [`TINY_BUDGET`].
pub fn with_tiny_budget(test: fn()) {
    BUDGET.with(|b| b.set(Some(TINY_BUDGET)));
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            BUDGET.with(|b| b.set(None));
        }
    }
    let _reset = Reset;
    test();
}

/// Also run the named tests of this file with a tiny store budget, as
/// `tiny_budget::NAME`.
#[macro_export]
macro_rules! tiny_budget_too {
    ($($name:ident),* $(,)?) => {
        mod tiny_budget {
            $(
                #[test]
                fn $name() {
                    $crate::common::with_tiny_budget(super::$name);
                }
            )*
        }
    };
}

pub fn rec(ino: Ino, kind: FileKind, nlink: u32, size: u64) -> InodeRecord {
    let t = Timespec {
        sec: 1_700_000_000,
        nsec: 5,
    };
    InodeRecord {
        ino,
        generation: 1,
        kind,
        perm: 0o644,
        uid: 1000,
        gid: 100,
        nlink,
        size,
        atime: t,
        mtime: t,
        ctime: t,
        btime: t,
        parent: if kind == FileKind::Directory { 1 } else { 0 },
        next_cookie: 3,
        ..InodeRecord::default()
    }
}

/// A page whose bytes say which inode and page index it belongs to.
pub fn pattern(ino: Ino, index: u64) -> [u8; PAGE_SIZE] {
    let mut p = [0u8; PAGE_SIZE];
    for (k, c) in p.chunks_mut(16).enumerate() {
        c[..8].copy_from_slice(&ino.to_le_bytes());
        c[8..16].copy_from_slice(&(index ^ k as u64).to_le_bytes());
    }
    p
}

pub fn is_pattern(p: &[u8; PAGE_SIZE], ino: Ino, index: u64) -> bool {
    *p == pattern(ino, index)
}

/// A fresh image of `bytes` in memory.
pub fn fresh(bytes: usize) -> Arc<MemDevice> {
    let dev = Arc::new(MemDevice::new(bytes));
    mkfs_device(&*dev).unwrap();
    dev
}

pub fn open(dev: &Arc<MemDevice>) -> ImageStore {
    ImageStore::open_device(dev.clone(), &cfg()).unwrap()
}

pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Recover the engine from a crashed image: `fsck` (no repair) must find
/// it clean, then a store and an engine open on it and pass the engine's
/// check.
pub fn recover_engine(dev: Arc<lanefs_image::MemDevice>, what: &str) -> lanefs_core::Fs {
    let raw = lanefs_image::fsck_device(dev.clone(), false)
        .unwrap_or_else(|e| panic!("{what}: fsck: {e}"));
    assert!(raw.clean, "{what}: crashed image not clean: {raw:#?}");
    let store =
        Arc::new(ImageStore::open_device(dev, &cfg()).unwrap_or_else(|e| panic!("{what}: {e}")));
    let fs = lanefs_core::Fs::new(store, lanefs_core::FsConfig::default()).unwrap();
    if let Err(p) = fs.check() {
        panic!("{what}: engine check after recovery: {p:#?}");
    }
    fs
}

/// After a recovered engine's checks changed the image (`stage` says
/// which): the engine's check passes, and once it is dropped `fsck` finds
/// the image clean with no orphan left to free.
pub fn assert_clean_after(
    fs: lanefs_core::Fs,
    dev: Arc<lanefs_image::MemDevice>,
    what: &str,
    stage: &str,
) {
    if let Err(p) = fs.check() {
        panic!("{what}: engine check after {stage}: {p:#?}");
    }
    drop(fs);
    let after = lanefs_image::fsck_device(dev, false).unwrap();
    assert!(
        after.clean && after.orphans_pending == 0,
        "{what}: not clean after recovery: {after:#?}"
    );
}
