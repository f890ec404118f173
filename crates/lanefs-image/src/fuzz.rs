//! Fuzzing support: the entry function every image fuzzer calls
//! ([`check_image_input`]), the compact *sparse image* input format it
//! takes ([`encode_sparse`], [`decode_sparse`]), and [`reseal_all`], which
//! recomputes the checksum of every structure whose magic is recognised so
//! that mutated fields get past the CRC and reach the decoders.
//!
//! Used by the `cargo fuzz` targets in `fuzz/` (libFuzzer, nightly) and by
//! the stable test `tests/fuzz_corpus.rs`, which replays the committed
//! corpus `fuzz/corpus/open_check/` plus deterministic mutations of it
//! through the same function. No locks, no atomics.
//!
//! # Sparse image format
//!
//! An image is mostly zeros (an empty 2 MiB image has a few hundred
//! meaningful bytes), so the fuzz input names only the non-zero runs:
//!
//! | size | field |
//! |---|---|
//! | 1 | flags: bit 0 reseal every checksum after decoding; bit 1 also run `fsck --repair` and check the result; bit 2 use the store after opening it |
//! | 4 | image length in blocks (u32; taken modulo [`FUZZ_BLOCKS_MAX`] + 1) |
//! | … | runs, back to back: block u32, offset in the block u16, length u16, then `length` bytes |
//!
//! A run starts at byte `block × 4096 + offset % 4096` and is clipped at the
//! end of the image and of the input, so every byte string decodes to some
//! image of at most [`FUZZ_BLOCKS_MAX`] blocks: the memory one input costs is
//! bounded whatever the bytes.

use std::sync::Arc;

use lanefs_store::{InodeRecord, Store, Timespec};

use crate::crash::next_rand;
use crate::crc::crc32c;
use crate::device::MemDevice;
use crate::fsck::fsck_device;
use crate::journal::{BATCH_HEADER, BATCH_MAGIC};
use crate::layout::{get_u32, get_u64, seal_block, DiskSuper, BLOCK, SB_MAGIC, SLOT};
use crate::object::{CHAIN_MAGIC, DIRENT_MAGIC, SLOT_MAGIC};
use crate::orphan::ORPHAN_MAGIC;
use crate::store::{ImageConfig, ImageStore};

/// Largest image a fuzz input decodes to: 2048 blocks, 8 MiB.
pub const FUZZ_BLOCKS_MAX: u32 = 2048;
/// Flag bit: reseal every checksum after decoding.
pub const FLAG_RESEAL: u8 = 1;
/// Flag bit: run `fsck --repair` as well, and require a clean result.
pub const FLAG_REPAIR: u8 = 2;
/// Flag bit: read and write through the opened store.
pub const FLAG_EXERCISE: u8 = 4;
const HEADER: usize = 5;
const RUN_HEADER: usize = 8;
/// Zero bytes inside a run cost less than starting a new run below this.
const RUN_GAP: usize = RUN_HEADER + 1;

/// Encode `img` (whole blocks) as a sparse-image fuzz input with `flags`.
pub fn encode_sparse(img: &[u8], flags: u8) -> Vec<u8> {
    let blocks = (img.len() / BLOCK).min(FUZZ_BLOCKS_MAX as usize);
    let mut out = vec![flags];
    out.extend_from_slice(&(blocks as u32).to_le_bytes());
    for b in 0..blocks {
        let block = &img[b * BLOCK..(b + 1) * BLOCK];
        let mut at = 0;
        while at < BLOCK {
            let Some(start) = block[at..].iter().position(|&x| x != 0).map(|p| at + p) else {
                break;
            };
            // Extend the run while the next non-zero byte is close.
            let mut end = start + 1;
            let mut zeros = 0;
            while end + zeros < BLOCK {
                if block[end + zeros] != 0 {
                    end += zeros + 1;
                    zeros = 0;
                } else if zeros + 1 >= RUN_GAP {
                    break;
                } else {
                    zeros += 1;
                }
            }
            out.extend_from_slice(&(b as u32).to_le_bytes());
            out.extend_from_slice(&(start as u16).to_le_bytes());
            out.extend_from_slice(&((end - start) as u16).to_le_bytes());
            out.extend_from_slice(&block[start..end]);
            at = end;
        }
    }
    out
}

/// Decode a sparse-image fuzz input: its flags and the image. Never fails:
/// a short header means an empty image.
pub fn decode_sparse(data: &[u8]) -> (u8, Vec<u8>) {
    if data.len() < HEADER {
        return (data.first().copied().unwrap_or(0), Vec::new());
    }
    let flags = data[0];
    let blocks = u32::from_le_bytes(data[1..5].try_into().unwrap()) % (FUZZ_BLOCKS_MAX + 1);
    let mut img = vec![0u8; blocks as usize * BLOCK];
    let mut rest = &data[HEADER..];
    while rest.len() >= RUN_HEADER {
        let block = u32::from_le_bytes(rest[0..4].try_into().unwrap()) as usize;
        let offset = u16::from_le_bytes(rest[4..6].try_into().unwrap()) as usize % BLOCK;
        let len = u16::from_le_bytes(rest[6..8].try_into().unwrap()) as usize;
        rest = &rest[RUN_HEADER..];
        let bytes = &rest[..len.min(rest.len())];
        rest = &rest[bytes.len()..];
        let start = block.saturating_mul(BLOCK).saturating_add(offset);
        if start < img.len() {
            let n = bytes.len().min(img.len() - start);
            img[start..start + n].copy_from_slice(&bytes[..n]);
        }
    }
    (flags, img)
}

/// What one input led to, for the corpus tests' coverage checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuzzOutcome {
    /// The store opened (recovery succeeded).
    pub opened: bool,
    /// fsck (without repair) produced a report.
    pub checked: bool,
    /// That report was clean.
    pub clean: bool,
}

/// The fuzz entry: decode `data` ([`decode_sparse`]), reseal it if its
/// flags say so, open it as a store (recovery included) and, when that
/// works and the flags say so, read and write through it; check it with
/// fsck; with the repair flag, repair a copy and require that what repair
/// leaves is clean. Every outcome must be a result — a panic, a hang or an
/// unbounded allocation in here is a bug in the image code.
pub fn check_image_input(data: &[u8]) -> FuzzOutcome {
    check_image_input_with(data, None)
}

/// [`check_image_input`] with the store's object cache under
/// `cache_bytes` (evicted objects are read back from the image).
pub fn check_image_input_with(data: &[u8], cache_bytes: Option<u64>) -> FuzzOutcome {
    let (flags, mut img) = decode_sparse(data);
    if flags & FLAG_RESEAL != 0 {
        reseal_all(&mut img);
    }
    let mut out = FuzzOutcome::default();
    let cfg = ImageConfig {
        commit_interval: None,
        cache_bytes,
    };
    if let Ok(s) = ImageStore::open_device(Arc::new(MemDevice::from_bytes(img.clone())), &cfg) {
        out.opened = true;
        if flags & FLAG_EXERCISE != 0 {
            exercise(&s);
        }
    }
    if let Ok(r) = fsck_device(Arc::new(MemDevice::from_bytes(img.clone())), false) {
        out.checked = true;
        out.clean = r.clean;
    }
    if flags & FLAG_REPAIR != 0 {
        if let Ok(r) = fsck_device(Arc::new(MemDevice::from_bytes(img)), true) {
            assert!(r.clean, "repair left problems: {r:#?}");
        }
    }
    out
}

/// Read every inode and a few entries and pages, write a page, punch one,
/// create an inode and sync: the calls a mount makes first.
fn exercise(s: &ImageStore) {
    let Ok(inos) = s.list_inodes() else { return };
    let mut page = [0u8; 4096];
    for ino in inos.into_iter().take(256) {
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
    if let Ok(ino) = s.alloc_ino() {
        let t = Timespec::default();
        let _ = s.write_inode(&InodeRecord {
            ino,
            generation: 1,
            perm: 0o644,
            nlink: 1,
            size: 1,
            atime: t,
            mtime: t,
            ctime: t,
            btime: t,
            ..InodeRecord::default()
        });
    }
    let _ = s.sync();
    let _ = s.checkpoint();
}

/// Change 1..=4 things in a sparse input — bytes of the runs (the image's
/// metadata), a run header, the flags, the length — and set the reseal flag
/// half of the time: the stable tests' stand-in for libFuzzer's mutator.
/// `rng` is a [`next_rand`] state.
pub fn mutate_input(input: &mut Vec<u8>, rng: &mut u64) {
    for _ in 0..1 + next_rand(rng) % 4 {
        let r = next_rand(rng);
        let at = 5 + (next_rand(rng) as usize) % input.len().saturating_sub(5).max(1);
        match r % 8 {
            0..=3 if at < input.len() => input[at] ^= 1 << (next_rand(rng) % 8),
            4 if at < input.len() => {
                for k in at..(at + 1 + (r >> 8) as usize % 8).min(input.len()) {
                    input[k] = next_rand(rng) as u8;
                }
            }
            5 if at + 8 <= input.len() => {
                // An interesting integer: 0, all ones, or a small one.
                let v: u64 = [0, u64::MAX, 1, 4096, (r >> 16) % 64][(r >> 8) as usize % 5];
                let w = [1usize, 2, 4, 8][(r >> 12) as usize % 4];
                input[at..at + w].copy_from_slice(&v.to_le_bytes()[..w]);
            }
            6 if (r >> 20).is_multiple_of(4) => input.truncate(at),
            _ => {
                if let Some(f) = input.first_mut() {
                    *f = next_rand(rng) as u8;
                }
            }
        }
    }
    if next_rand(rng).is_multiple_of(2) && !input.is_empty() {
        input[0] |= FLAG_RESEAL;
    }
}

/// Reseal every superblock, slot, chain, entry, orphan block and journal
/// batch found in `img` (by magic, at block or slot boundaries).
pub fn reseal_all(img: &mut [u8]) {
    let blocks = img.len() / BLOCK;
    let mut journal: Option<(usize, usize)> = None;
    for copy in 0..2.min(blocks) {
        let b = &mut img[copy * BLOCK..(copy + 1) * BLOCK];
        if get_u64(b, 0) == SB_MAGIC {
            seal_block(b);
            if let Ok(s) = DiskSuper::decode(b) {
                journal = Some((s.geo.journal_start as usize, s.geo.journal_blocks as usize));
            }
        }
    }
    for bi in 2..blocks {
        let b = &mut img[bi * BLOCK..(bi + 1) * BLOCK];
        let m = get_u32(b, 0);
        if m == CHAIN_MAGIC || m == DIRENT_MAGIC || m == ORPHAN_MAGIC {
            seal_block(b);
            continue;
        }
        if m == BATCH_MAGIC {
            let in_journal = journal.is_some_and(|(s, n)| (s..s + n).contains(&bi));
            let len = get_u64(b, 16) as usize;
            let end = (bi * BLOCK + BATCH_HEADER).saturating_add(len);
            if in_journal && end <= img.len() {
                let (h, rest) = img[bi * BLOCK..].split_at_mut(BATCH_HEADER);
                let c = crc32c(&[&h[..24], &rest[..len]]);
                h[24..28].copy_from_slice(&c.to_le_bytes());
            }
            continue;
        }
        for s in b.chunks_mut(SLOT) {
            if get_u32(s, 0) == SLOT_MAGIC {
                let c = crc32c(&[&s[..SLOT - 4]]);
                s[SLOT - 4..].copy_from_slice(&c.to_le_bytes());
            }
        }
    }
}

/// The committed seed corpus of the fuzz targets (`fuzz/corpus/open_check/`
/// of this repository), as `(file name, bytes)` sorted by name, for the
/// stable replays in the test suites. Panics if the corpus is missing (the
/// tests that call it must not pass vacuously).
pub fn committed_corpus() -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/open_check");
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the fuzz corpus {} is missing: {e}", dir.display()))
        .map(|e| {
            let e = e.unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
            let bytes = std::fs::read(e.path())
                .unwrap_or_else(|err| panic!("reading {}: {err}", e.path().display()));
            (e.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    out.sort();
    out
}
