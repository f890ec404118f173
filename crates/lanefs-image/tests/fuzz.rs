//! Thousands of randomly corrupted images, opened, used and checked: every
//! outcome is a result (an error or a report), never a panic.
//!
//! Corruptions: byte flips in the metadata area, flips followed by
//! resealing every checksum (so the decoders see the damage), zeroed or
//! random blocks, truncation. Knob: `LANEFS_FUZZ_ITERS` (default 2000),
//! `LANEFS_FUZZ_SEED`.

mod common;

use std::sync::Arc;

use common::*;
use lanefs_image::crash::next_rand;
use lanefs_image::fuzz::reseal_all;
use lanefs_image::{fsck_device, ImageStore, MemDevice, BLOCK};
use lanefs_store::{DirEntryRecord, FileKind, Store, ROOT_INO};

/// A small image with a directory tree, long records (chains), pages, an
/// orphan and journal records not yet checkpointed.
fn base_image() -> Vec<u8> {
    let dev = fresh(2 << 20);
    let s = open(&dev);
    s.write_inode(&rec(ROOT_INO, FileKind::Directory, 2, 0))
        .unwrap();
    let d = s.alloc_ino().unwrap();
    s.write_inode(&rec(d, FileKind::Directory, 2, 0)).unwrap();
    s.dir_insert(
        ROOT_INO,
        &DirEntryRecord {
            name: b"d".to_vec(),
            ino: d,
            kind: FileKind::Directory,
            cookie: 3,
        },
    )
    .unwrap();
    for i in 0..12u64 {
        let f = s.alloc_ino().unwrap();
        let mut r = rec(f, FileKind::Regular, 1, 4096 * 3);
        if i % 4 == 0 {
            r.xattrs = vec![(b"user.x".to_vec(), vec![i as u8; 700])];
        }
        s.write_inode(&r).unwrap();
        for p in 0..3 {
            s.write_page(f, p, &pattern(f, p)).unwrap();
        }
        let name = format!("file-{i}-{}", "n".repeat(i as usize * 10));
        s.dir_insert(
            d,
            &DirEntryRecord {
                name: name.into_bytes(),
                ino: f,
                kind: FileKind::Regular,
                cookie: i + 3,
            },
        )
        .unwrap();
        if i == 5 {
            s.checkpoint().unwrap();
        }
    }
    let o = s.alloc_ino().unwrap();
    s.write_inode(&rec(o, FileKind::Regular, 0, 0)).unwrap();
    s.sync().unwrap();
    let img = dev.snapshot();
    drop(s);
    img
}

fn exercise(s: &ImageStore) {
    let Ok(inos) = s.list_inodes() else { return };
    let mut page = [0u8; 4096];
    for ino in inos {
        let _ = s.read_inode(ino);
        if let Ok(es) = s.dir_read(ino) {
            for e in es.iter().take(3) {
                let _ = s.read_inode(e.ino);
            }
        }
        let _ = s.read_page(ino, 1, &mut page);
        let _ = s.write_page(ino, 7, &page);
        let _ = s.punch_pages(ino, 0, 1);
    }
    if let Ok(n) = s.alloc_ino() {
        let _ = s.write_inode(&rec(n, FileKind::Regular, 1, 1));
    }
    let _ = s.sync();
}

#[test]
fn corrupted_images_never_panic() {
    let iters = env_u64("LANEFS_FUZZ_ITERS", 2000);
    let mut rng = env_u64("LANEFS_FUZZ_SEED", 0xf022) | 1;
    let base = base_image();
    let meta_end = {
        let geo = ImageStore::open_device(Arc::new(MemDevice::from_bytes(base.clone())), &cfg())
            .unwrap()
            .geometry();
        (geo.group_data(0).0 as usize + 64) * BLOCK
    };
    let (mut opened, mut refused, mut clean) = (0, 0, 0);
    for _ in 0..iters {
        let mut img = base.clone();
        let kind = next_rand(&mut rng) % 5;
        let flips = 1 + next_rand(&mut rng) % 16;
        match kind {
            0 | 1 => {
                for _ in 0..flips {
                    let at = (next_rand(&mut rng) as usize) % meta_end.min(img.len());
                    img[at] ^= 1 << (next_rand(&mut rng) % 8);
                }
                if kind == 1 {
                    reseal_all(&mut img);
                }
            }
            2 => {
                let b = (next_rand(&mut rng) as usize) % (img.len() / BLOCK);
                let fill = if next_rand(&mut rng).is_multiple_of(2) {
                    0
                } else {
                    next_rand(&mut rng) as u8
                };
                img[b * BLOCK..(b + 1) * BLOCK].fill(fill);
                reseal_all(&mut img);
            }
            3 => {
                // Overwrite a random field-sized run with random bytes, resealed.
                let at = (next_rand(&mut rng) as usize) % meta_end.min(img.len());
                let len = (1 + next_rand(&mut rng) % 8) as usize;
                for k in at..(at + len).min(img.len()) {
                    img[k] = next_rand(&mut rng) as u8;
                }
                reseal_all(&mut img);
            }
            _ => {
                let len = (next_rand(&mut rng) as usize) % img.len();
                img.truncate(len);
            }
        }
        let dev = Arc::new(MemDevice::from_bytes(img.clone()));
        match ImageStore::open_device(dev.clone(), &cfg()) {
            Ok(s) => {
                opened += 1;
                exercise(&s);
            }
            Err(_) => refused += 1,
        }
        if let Ok(r) = fsck_device(Arc::new(MemDevice::from_bytes(img.clone())), false) {
            clean += r.clean as u64;
        }
        if next_rand(&mut rng).is_multiple_of(8) {
            let dev = Arc::new(MemDevice::from_bytes(img));
            if let Ok(r) = fsck_device(dev.clone(), true) {
                // What repair leaves is clean.
                assert!(r.clean, "repair left problems: {r:#?}");
            }
        }
    }
    assert!(
        opened > 0 && refused > 0,
        "the corruptions reach both outcomes: {opened} opened, {refused} refused"
    );
    assert!(clean < iters, "some corruption is found");
}

tiny_budget_too!(corrupted_images_never_panic,);
