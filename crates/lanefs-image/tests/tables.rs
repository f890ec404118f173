//! Loading inode tables at open: groups are loaded on several threads, yet
//! a corrupted image opens the same way every time (the lowest inode keeps
//! a block two images claim), and many groups' objects all come back.

mod common;

use std::sync::Arc;

use common::*;
use lanefs_image::{Geometry, ImageStore, MemDevice, BLOCK};
use lanefs_store::{FileKind, Ino, Store, PAGE_SIZE};

const SLOT: usize = 512;

/// Bitwise CRC32C, independent of the crate's.
fn crc32c(b: &[u8]) -> u32 {
    let mut c = !0u32;
    for &x in b {
        c ^= x as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// Byte offset of `ino`'s newest live slot and of its first extent's block
/// field (slot header 40 bytes; image: record length, record, extent count,
/// then (page u64, block u64, pages u32)).
fn first_extent_at(img: &[u8], geo: &Geometry, ino: Ino) -> (usize, usize) {
    let (g, i) = geo.ino_place(ino).unwrap();
    let pair = (geo.group_first_block(g) * BLOCK as u64) as usize + (2 * i as usize) * SLOT;
    let stamp = |at: usize| u64::from_le_bytes(img[at + 16..at + 24].try_into().unwrap());
    let live = |at: usize| img[at..at + 4] == *b"INOD";
    let slot = match (live(pair), live(pair + SLOT)) {
        (true, true) if stamp(pair + SLOT) > stamp(pair) => pair + SLOT,
        (true, _) => pair,
        _ => pair + SLOT,
    };
    let rec_len = u32::from_le_bytes(img[slot + 40..slot + 44].try_into().unwrap()) as usize;
    let ext = slot + 44 + rec_len;
    assert_eq!(img[ext..ext + 4], 1u32.to_le_bytes(), "one extent");
    (slot, ext + 4 + 8)
}

#[test]
fn a_block_claimed_twice_goes_to_the_lowest_inode_on_every_open() {
    let bytes = 32 << 20;
    let dev = fresh(bytes);
    let geo = Geometry::for_size((bytes / BLOCK) as u64).unwrap();
    assert!(geo.groups >= 8, "{geo:?}");
    let s = open(&dev);
    // Files with one page each filling group 0, then one in each other
    // group: group 0 takes longest to load, so without the one-thread
    // reload the first inode of group 1 would often claim first.
    let per = geo.inodes_per_group;
    let inos: Vec<Ino> = (1..per)
        .map(|i| geo.ino_of(0, i))
        .chain((1..geo.groups).map(|g| geo.ino_of(g, 0)))
        .collect();
    for &ino in &inos {
        s.write_inode(&rec(ino, FileKind::Regular, 1, PAGE_SIZE as u64))
            .unwrap();
        s.write_page(ino, 0, &pattern(ino, 0)).unwrap();
    }
    s.checkpoint().unwrap();
    drop(s);
    let mut img = dev.snapshot();
    // Group 1's file now also claims the page of group 0's last file.
    let first = geo.ino_of(0, per - 1);
    let last = geo.ino_of(1, 0);
    let (_, from) = first_extent_at(&img, &geo, first);
    let (slot, to) = first_extent_at(&img, &geo, last);
    let shared: [u8; 8] = img[from..from + 8].try_into().unwrap();
    img[to..to + 8].copy_from_slice(&shared);
    let c = crc32c(&img[slot..slot + SLOT - 4]);
    img[slot + SLOT - 4..slot + SLOT].copy_from_slice(&c.to_le_bytes());
    for round in 0..8 {
        let bad = Arc::new(MemDevice::from_bytes(img.clone()));
        let s = ImageStore::open_device(bad, &cfg()).unwrap();
        let r = s.recovery_report();
        assert_eq!(r.bad_objects, vec![last], "round {round}: {r:#?}");
        let mut p = [0u8; PAGE_SIZE];
        for &ino in inos.iter().filter(|&&i| i != last) {
            assert!(s.read_page(ino, 0, &mut p).unwrap(), "round {round}");
            assert!(is_pattern(&p, ino, 0), "round {round}: inode {ino}");
        }
        assert_eq!(s.read_inode(last), Err(lanefs_store::Errno::EIO));
        let mut listed = s.list_inodes().unwrap();
        listed.sort_unstable();
        assert_eq!(listed, inos, "round {round}");
    }
}

tiny_budget_too!(a_block_claimed_twice_goes_to_the_lowest_inode_on_every_open,);
