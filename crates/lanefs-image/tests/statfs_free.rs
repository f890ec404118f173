//! Space freed by removals shows in `statfs` at once, not only after the
//! next checkpoint: the entry and chain blocks of objects a checkpoint
//! wrote stay allocated (copy-on-write) until the next checkpoint writes
//! their new images, and until 2026-11 the store counted them as used
//! until then, so `df` after `rm` and `sync` stayed below its start (up to
//! ~200 blocks in a stress-ng sweep, back only after a remount). The
//! blocks the next checkpoint frees are now free for `statfs`, and a page
//! write that finds no block allocatable checkpoints first (as it did for
//! data blocks freed by journal records), so that space is really there.

use std::path::Path;
use std::sync::Arc;

use lanefs_core::{Cred, Fs, FsConfig, Ino, SetAttr, StatFs, ROOT_INO};
use lanefs_image::{fsck, mkfs, ImageStore};

mod common;

const CREAT: i32 = libc::O_CREAT | libc::O_RDWR;
const PAGE: usize = 4096;

fn mount(path: &Path) -> (Fs, Arc<ImageStore>) {
    let store = Arc::new(ImageStore::open_with(path, &common::cfg()).unwrap());
    (Fs::new(store.clone(), FsConfig::default()).unwrap(), store)
}

fn checked(fs: &Fs) {
    if let Err(p) = fs.check() {
        panic!("check failed: {p:#?}");
    }
}

fn counts(s: &StatFs) -> (u64, u64, u64, u64) {
    (s.blocks, s.blocks_free, s.blocks_avail, s.files_free)
}

/// Names long enough that a directory of [`dir_files`] of them has more
/// entry blocks than its slot can list inline (a chain block too).
fn name(i: usize) -> Vec<u8> {
    format!("a-file-with-a-name-long-enough-to-fill-blocks-{i:06}").into_bytes()
}

/// Files of the swept directory: under the tiny budget, where every call
/// checkpoints (pressure), fewer (no chain block then), or the test takes
/// a minute of flushes.
fn dir_files() -> usize {
    if common::cfg().cache_bytes.is_none() {
        4000
    } else {
        600
    }
}

const ROOT_FILES: usize = 300;

fn create(fs: &Fs, dir: Ino, i: usize, pages: usize) {
    let root = Cred::root();
    let (_, f, created) = fs
        .open_at(&root, dir, &name(i), CREAT, 0o644, 0o022, false)
        .unwrap();
    assert!(created);
    if pages > 0 {
        fs.write(&f, 0, &vec![i as u8 | 1; pages * PAGE]).unwrap();
    }
}

/// Every kind of home block: a directory's entry blocks and its chain,
/// a long symlink's chain, a fragmented file's extent chain (truncated to
/// zero, not removed), small files' records; a checkpoint writes them all
/// home, then they are removed and the mount synced.
fn sweep(fs: &Fs, store: &ImageStore) -> StatFs {
    let root = Cred::root();
    let d = fs.mkdir(&root, ROOT_INO, b"d", 0o755, 0).unwrap();
    for i in 0..dir_files() {
        create(fs, d.ino, i, usize::from(i % 3 == 0));
    }
    for i in 0..ROOT_FILES {
        create(fs, ROOT_INO, i, 2);
    }
    let target = vec![b'x'; 3000];
    let link = fs.symlink(&root, ROOT_INO, b"long-link", &target).unwrap();
    // Every other page: one extent a page, more than the slot holds.
    let (_, frag, _) = fs
        .open_at(&root, ROOT_INO, b"fragmented", CREAT, 0o644, 0, false)
        .unwrap();
    for p in 0..200u64 {
        fs.write(&frag, 2 * p * PAGE as u64, &[7u8; PAGE]).unwrap();
    }
    fs.sync().unwrap();
    // What a half-full journal or cache pressure would start.
    store.checkpoint().unwrap();
    let during = fs.statfs().unwrap();

    for i in 0..dir_files() {
        fs.unlink(&root, d.ino, &name(i)).unwrap();
    }
    fs.rmdir(&root, ROOT_INO, b"d").unwrap();
    // `mkdir` and `symlink` count a lookup (FUSE's): give them back.
    fs.forget(d.ino, 1);
    for i in 0..ROOT_FILES {
        fs.unlink(&root, ROOT_INO, &name(i)).unwrap();
    }
    fs.unlink(&root, ROOT_INO, b"long-link").unwrap();
    fs.forget(link.ino, 1);
    let frag_ino = fs.lookup(&root, ROOT_INO, b"fragmented").unwrap().ino;
    let zero = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    fs.setattr(&root, frag_ino, &zero, Some(&frag)).unwrap();
    drop(frag);
    fs.sync().unwrap();
    during
}

/// Free for statfs is free for writes, though the blocks a sweep freed are
/// allocatable only after a checkpoint (the writes' own): write all of it,
/// have it placed, remove it, and find `statfs` as it was.
/// `written`: blocks of homes that the checkpoints the fill runs write
/// for the first time (beside the root's entry block for `big`).
fn fill_and_empty(fs: &Fs, store: &ImageStore, before: &StatFs, written: u64) {
    let root = Cred::root();
    assert!(store.freed_at_next_checkpoint() > 0);
    let (_, big, _) = fs
        .open_at(&root, ROOT_INO, b"big", CREAT, 0o644, 0, false)
        .unwrap();
    let chunk = vec![5u8; 64 * PAGE];
    let mut off = 0u64;
    for n in [64, 1] {
        while fs.write(&big, off, &chunk[..n * PAGE]).is_ok() {
            off += (n * PAGE) as u64;
        }
    }
    // All of it but the entry block that names `big` in the root (and
    // `written`), which the checkpoints that made room wrote.
    assert!(
        off / PAGE as u64 >= before.blocks_free - 1 - written,
        "{off}: {:?}",
        fs.statfs().unwrap()
    );
    // It is all placed: written back and committed without ENOSPC.
    fs.sync().unwrap();
    assert_eq!(fs.statfs().unwrap().blocks_free, 0);
    checked(fs);
    drop(big);
    fs.unlink(&root, ROOT_INO, b"big").unwrap();
    fs.sync().unwrap();
    // `big`'s entry block in the root: freed, and free for statfs.
    let (blocks, free, avail, files) = counts(before);
    assert_eq!(
        counts(&fs.statfs().unwrap()),
        (blocks - written, free - written, avail - written, files)
    );
}

#[test]
fn removals_give_statfs_its_start_back_after_sync() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("fs.img");
    mkfs(&img, 128 << 20).unwrap();
    let root = Cred::root();
    let (fs, store) = mount(&img);
    let start = fs.statfs().unwrap();
    let during = sweep(&fs, &store);
    // The checkpoint wrote homes (entry and chain blocks).
    assert!(during.blocks < start.blocks, "{during:?}");
    // The emptied `fragmented` is left: an inode, and the root's one
    // entry block (the root had none at the start).
    let left = fs.statfs().unwrap();
    assert_eq!(
        counts(&left),
        (
            start.blocks - 1,
            start.blocks_free - 1,
            start.blocks_avail - 1,
            start.files_free - 1
        ),
        "start {start:?}, after {left:?}"
    );
    fs.unlink(&root, ROOT_INO, b"fragmented").unwrap();
    fs.sync().unwrap();
    let after = fs.statfs().unwrap();
    assert_eq!(counts(&after), counts(&start), "{after:?}");
    checked(&fs);

    // Under the tiny budget every write checkpoints (pressure): a fill
    // takes minutes of flushes and proves nothing more.
    if common::cfg().cache_bytes.is_none() {
        fill_and_empty(&fs, &store, &after, 0);
    }
    drop(fs);
    drop(store);
    let r = fsck(&img, false).unwrap();
    assert!(r.clean, "{r:#?}");

    // A remount (its recovery checkpoints) agrees with what statfs said.
    let (fs, _store) = mount(&img);
    assert_eq!(counts(&fs.statfs().unwrap()), counts(&after));
    checked(&fs);
}

tiny_budget_too!(removals_give_statfs_its_start_back_after_sync);

/// Only home blocks wait for the checkpoint (no data page was freed), and
/// more of them than the room the store keeps beyond its groups' reserve:
/// a page write that did not checkpoint for them found no block at
/// writeback for what `statfs` had offered.
#[test]
fn home_blocks_freed_alone_are_writable() {
    const LINKS: usize = 1000;
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("fs.img");
    mkfs(&img, 64 << 20).unwrap();
    let root = Cred::root();
    let (fs, store) = mount(&img);
    let start = fs.statfs().unwrap();
    // A chain block each (the target does not fit the slot).
    let target = vec![b'y'; 600];
    let mut links = Vec::new();
    for i in 0..LINKS {
        links.push(fs.symlink(&root, ROOT_INO, &name(i), &target).unwrap().ino);
    }
    fs.sync().unwrap();
    store.checkpoint().unwrap();
    assert!(fs.statfs().unwrap().blocks_free <= start.blocks_free - LINKS as u64);
    for (i, ino) in links.into_iter().enumerate() {
        fs.unlink(&root, ROOT_INO, &name(i)).unwrap();
        fs.forget(ino, 1);
    }
    fs.sync().unwrap();
    let after = fs.statfs().unwrap();
    assert_eq!(counts(&after), counts(&start), "{after:?}");
    assert!(
        store.freed_at_next_checkpoint() >= LINKS as u64,
        "{}",
        store.freed_at_next_checkpoint()
    );
    checked(&fs);
    fill_and_empty(&fs, &store, &after, 0);
    drop(fs);
    drop(store);
    let r = fsck(&img, false).unwrap();
    assert!(r.clean, "{r:#?}");
}

/// The checkpoint a write runs for blocks that wait keeps the room the
/// store reserves for its copy-on-write. On an image big enough that the
/// groups' own reserve (16 blocks each, 64 groups) is below the 2 %
/// headroom: more blocks wait than that headroom, objects made since the
/// last checkpoint need more new blocks than the groups' reserve, and the
/// image is filled. Stopped only at the groups' reserve, data left that
/// checkpoint too few blocks for the new objects' chains: it failed the
/// store (`EIO`).
#[test]
fn a_checkpoint_for_waiting_blocks_keeps_its_headroom() {
    const OLD: usize = 1500;
    const NEW: usize = 1100;
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("fs.img");
    mkfs(&img, 256 << 20).unwrap();
    let root = Cred::root();
    let (fs, store) = mount(&img);
    let start = fs.statfs().unwrap();
    // A chain block each.
    let target = vec![b'y'; 600];
    let link = |i: usize| {
        let ino = fs.symlink(&root, ROOT_INO, &name(i), &target).unwrap().ino;
        fs.forget(ino, 1);
    };
    (0..OLD).for_each(link);
    fs.sync().unwrap();
    store.checkpoint().unwrap();
    (OLD..OLD + NEW).for_each(link);
    for i in 0..OLD {
        fs.unlink(&root, ROOT_INO, &name(i)).unwrap();
    }
    fs.sync().unwrap();
    assert!(store.freed_at_next_checkpoint() >= OLD as u64);
    let before = fs.statfs().unwrap();
    assert!(before.blocks > start.blocks - NEW as u64, "{before:?}");
    fill_and_empty(&fs, &store, &before, NEW as u64);
    checked(&fs);
    drop(fs);
    drop(store);
    let r = fsck(&img, false).unwrap();
    assert!(r.clean, "{r:#?}");
}
