//! Helpers shared by the image-store tests.
#![allow(dead_code)]

use std::sync::Arc;

use lanefs_image::{mkfs_device, ImageConfig, ImageStore, MemDevice};
use lanefs_store::{FileKind, Ino, InodeRecord, Timespec, PAGE_SIZE};

pub fn cfg() -> ImageConfig {
    ImageConfig {
        commit_interval: None,
    }
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
