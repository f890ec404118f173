//! In-memory inode objects and their on-disk images.
//!
//! An *object* is everything the store keeps under one inode number: the
//! encoded [`InodeRecord`](lanefs_store::InodeRecord), the page map (page
//! index -> device block, written to disk as extents) and, for directories,
//! the entries grouped into entry blocks. Each object has one stamp, bumped
//! by every journal record that changes it; replay orders records by it.
//!
//! Objects are plain data: the store's shard mutexes protect them (see
//! `store.rs`). This file only transforms them: apply an operation, encode
//! or decode the slot, chain and entry blocks described in docs/FORMAT.md.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use lanefs_store::{Errno, FileKind, Result};

use crate::journal::Op;
use crate::layout::{block_sealed, get_u32, get_u64, seal_block, BLOCK, BLOCK_CRC_AT, SLOT};

pub const SLOT_MAGIC: u32 = u32::from_le_bytes(*b"INOD");
pub const CHAIN_MAGIC: u32 = u32::from_le_bytes(*b"ICHN");
pub const DIRENT_MAGIC: u32 = u32::from_le_bytes(*b"DENT");
pub const SLOT_LIVE: u8 = 1;
pub const SLOT_FREE: u8 = 2;
const SLOT_HEADER: usize = 40;
const SLOT_CRC_AT: usize = SLOT - 4;
/// Image bytes kept inside the slot itself.
pub const SLOT_INLINE_MAX: usize = SLOT_CRC_AT - SLOT_HEADER;
const CHAIN_HEADER: usize = 40;
/// Image bytes per chain block.
pub const CHAIN_PAYLOAD: usize = BLOCK_CRC_AT - CHAIN_HEADER;
const DIRENT_HEADER: usize = 32;
/// Entry bytes per entry block.
pub const DIRENT_CAPACITY: usize = BLOCK_CRC_AT - DIRENT_HEADER;
/// Most image bytes (bounds the chain walk of a corrupted image).
pub const IMAGE_BYTES_MAX: usize = 64 << 20;
/// Offsets in an encoded inode record (version 1): kind, nlink, blocks.
const KIND_AT: usize = 1 + 8 + 8;
const NLINK_AT: usize = KIND_AT + 1 + 2 + 4 + 4;
const BLOCKS_AT: usize = NLINK_AT + 4 + 8;

/// Hasher for integer keys the store makes itself (inode numbers, stamps):
/// one folded 64x64->128-bit multiply per word, so keys that share their
/// low bits (the inodes of one shard are `s + 64k`) still spread over the
/// table, at a fraction of SipHash's cost. Not for keys an outsider picks
/// (names keep the standard hasher).
#[derive(Clone, Copy, Default)]
pub struct IntHasher(u64);

impl IntHasher {
    fn mix(&mut self, x: u64) {
        let m = ((self.0 ^ x) as u128).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = (m as u64) ^ ((m >> 64) as u64);
    }
}

impl Hasher for IntHasher {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.mix(u64::from_le_bytes(w));
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.mix(x);
    }
    fn write_usize(&mut self, x: usize) {
        self.mix(x as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A map keyed by store-made integers (see [`IntHasher`]).
pub type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

/// One directory entry as kept in an entry block: name and the 17-byte
/// value of [`DirEntryRecord::encode_value`](lanefs_store::DirEntryRecord::encode_value).
pub type Entry = (Vec<u8>, [u8; 17]);

/// Bytes an entry takes in an entry block.
pub fn entry_bytes(name: &[u8]) -> usize {
    1 + name.len() + 17
}

/// One entry block of a directory.
#[derive(Clone, Debug, Default)]
pub struct DirBlk {
    pub entries: Vec<Entry>,
    pub bytes: usize,
    /// Device block of the durable copy (0: none).
    pub home: u64,
    pub dirty: bool,
}

/// A directory's entries: blocks in a stable order (a block's position
/// never changes while the directory lives) and a name index.
#[derive(Clone, Debug, Default)]
pub struct DirState {
    pub blocks: Vec<DirBlk>,
    index: HashMap<Vec<u8>, u32>,
    room_hint: usize,
    /// Bytes of every name held (for the cache's estimate).
    name_bytes: usize,
    /// Blocks holding at least one entry: the blocks the next checkpoint
    /// lists in the directory's image (an emptied block is dirty, and a
    /// dirty empty block is dropped, its home freed).
    nonempty: usize,
}

impl DirState {
    pub fn insert(&mut self, name: &[u8], v: [u8; 17]) {
        if let Some(&bi) = self.index.get(name) {
            let b = &mut self.blocks[bi as usize];
            let e = b
                .entries
                .iter_mut()
                .find(|(n, _)| n == name)
                .expect("index matches blocks");
            e.1 = v;
            b.dirty = true;
            return;
        }
        let need = entry_bytes(name);
        debug_assert!(need <= DIRENT_CAPACITY);
        let fits = |b: &DirBlk| b.bytes + need <= DIRENT_CAPACITY;
        let bi = if self.blocks.get(self.room_hint).is_some_and(fits) {
            self.room_hint
        } else if let Some(i) = self.blocks.iter().position(fits) {
            i
        } else {
            self.blocks.push(DirBlk::default());
            self.blocks.len() - 1
        };
        self.room_hint = bi;
        let b = &mut self.blocks[bi];
        if b.entries.is_empty() {
            self.nonempty += 1;
        }
        b.entries.push((name.to_vec(), v));
        b.bytes += need;
        b.dirty = true;
        self.index.insert(name.to_vec(), bi as u32);
        self.name_bytes += name.len();
    }

    pub fn remove(&mut self, name: &[u8]) {
        if let Some(bi) = self.index.remove(name) {
            let b = &mut self.blocks[bi as usize];
            let at = b
                .entries
                .iter()
                .position(|(n, _)| n == name)
                .expect("index matches blocks");
            b.entries.swap_remove(at);
            if b.entries.is_empty() {
                self.nonempty -= 1;
            }
            b.bytes -= entry_bytes(name);
            b.dirty = true;
            self.room_hint = bi as usize;
            self.name_bytes -= name.len();
        }
    }

    #[cfg(test)]
    pub fn get(&self, name: &[u8]) -> Option<[u8; 17]> {
        let bi = *self.index.get(name)?;
        self.blocks[bi as usize]
            .entries
            .iter()
            .find(|(n, _)| n == name)
            .map(|e| e.1)
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.blocks.iter().flat_map(|b| b.entries.iter())
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Entry blocks the next checkpoint lists in the directory's image.
    pub fn nonempty_blocks(&self) -> usize {
        self.nonempty
    }

    /// Estimated bytes: each entry is in a block (name, value, vector) and
    /// in the index (name again, position, table overhead).
    pub fn mem_bytes(&self) -> u64 {
        let per_entry = std::mem::size_of::<Entry>() + std::mem::size_of::<Vec<u8>>() + 16;
        (std::mem::size_of::<DirState>()
            + self.blocks.capacity() * std::mem::size_of::<DirBlk>()
            + self.index.len() * per_entry
            + 2 * self.name_bytes) as u64
    }

    /// Add a block read from disk (clean, at `home`). Duplicate names in a
    /// corrupted image keep the first. A block left with no entry (no
    /// checkpoint writes one) is dirty, as an emptied block is: the next
    /// checkpoint of the directory drops it and frees its home.
    pub fn push_loaded(&mut self, entries: Vec<Entry>, home: u64) {
        let bi = self.blocks.len() as u32;
        let mut b = DirBlk {
            home,
            ..DirBlk::default()
        };
        for (n, v) in entries {
            if self.index.contains_key(&n) {
                b.dirty = true;
                continue;
            }
            b.bytes += entry_bytes(&n);
            self.name_bytes += n.len();
            self.index.insert(n.clone(), bi);
            b.entries.push((n, v));
        }
        if b.entries.is_empty() {
            b.dirty = true;
        } else {
            self.nonempty += 1;
        }
        self.blocks.push(b);
    }
}

/// Everything the store keeps under one inode number.
#[derive(Clone, Debug, Default)]
pub struct InodeObj {
    /// Stamp of the last record applied (0: never changed).
    pub stamp: u64,
    /// Encoded inode record; `None`: the number is free.
    pub rec: Option<Vec<u8>>,
    pub pages: BTreeMap<u64, u64>,
    /// Unwritten extents (`fallocate`): pages `start..end` allocated and
    /// reading as zeros where no data page is; sorted, disjoint, at most
    /// `journal::UNWRITTEN_MAX`.
    pub unwritten: Vec<(u64, u64)>,
    /// Boxed: most objects are not directories, and an unbounded store
    /// holds every object of the image at once.
    pub dir: Option<Box<DirState>>,
    /// Changed since the last checkpoint snapshot.
    pub dirty: bool,
    /// A checksum or structure failure at load: every call answers EIO.
    pub bad: bool,
    /// Slot (0 = A, 1 = B) holding the newest durable image.
    pub home_slot: usize,
    /// Chain and entry blocks of the durable image.
    pub home_blocks: Vec<u64>,
    /// Orphan-file slot while the record has link count 0.
    pub orphan_slot: Option<u32>,
    /// Stamp of the durable home (`home_slot`, `home_blocks`); equal to
    /// `stamp` when the home holds this state (`cache.rs`). `u64::MAX`: the
    /// home must be rewritten (a torn slot beside it).
    pub home_stamp: u64,
    /// Used since the CLOCK hand last passed (`cache.rs`).
    pub referenced: bool,
    /// Blocks of `home_blocks` the next checkpoint frees without writing
    /// others in their place (`home_blocks` less
    /// [`next_home_blocks_max`](Self::next_home_blocks_max)), which the
    /// store already reports free (`overhead.rs`). 0 for a clean object.
    pub gone: u32,
}

impl InodeObj {
    /// Apply one operation of this object; data blocks it drops go to `freed`.
    pub fn apply(&mut self, op: &Op, freed: &mut Vec<u64>) {
        match op {
            Op::PutInode(_, b) => self.rec = Some(b.clone()),
            Op::FreeInode(_) => {
                self.rec = None;
                freed.extend(self.pages.values().copied());
                self.pages.clear();
                self.unwritten.clear();
                self.dir = None;
            }
            Op::PutEntry(_, n, v) => self.dir.get_or_insert_with(Box::default).insert(n, *v),
            Op::RemoveEntry(_, n) => {
                if let Some(d) = &mut self.dir {
                    d.remove(n);
                }
            }
            Op::Punch(_, s, e) => {
                if s < e {
                    let doomed: Vec<u64> = self.pages.range(*s..*e).map(|(k, _)| *k).collect();
                    for k in doomed {
                        freed.extend(self.pages.remove(&k));
                    }
                    // A punched range is a hole: no extent covers it either
                    // (the engine writes its own clipped list at writeback;
                    // a crash before that must not bring the range back).
                    self.unwritten = clip(&self.unwritten, *s, *e);
                }
            }
            Op::MapPage(_, x, b, _) => freed.extend(self.pages.insert(*x, *b)),
            Op::SetUnwritten(_, list) => self.unwritten = list.clone(),
            Op::Usage(..) | Op::WriteSb(_) => unreachable!("not an inode operation"),
        }
        self.dirty = true;
    }

    /// Link count of the record, if live.
    pub fn nlink(&self) -> Option<u32> {
        let r = self.rec.as_ref()?;
        (r.len() >= NLINK_AT + 4).then(|| get_u32(r, NLINK_AT))
    }

    /// Kind of the record, if live and well-formed there.
    pub fn kind(&self) -> Option<FileKind> {
        FileKind::from_u8(*self.rec.as_ref()?.get(KIND_AT)?)
    }

    /// Block count of the record, if live.
    pub fn blocks(&self) -> Option<u64> {
        let r = self.rec.as_ref()?;
        (r.len() >= BLOCKS_AT + 8).then(|| get_u64(r, BLOCKS_AT))
    }

    /// Pages allocated: data pages, and unwritten-extent pages that have
    /// none (what the record's block count is derived from).
    pub fn allocated(&self) -> u64 {
        let mut n = self.pages.len() as u64;
        for &(s, e) in &self.unwritten {
            n += e - s - self.pages.range(s..e).count() as u64;
        }
        n
    }

    /// At least as many chain and entry blocks as the next checkpoint
    /// gives this object (exact without pages): its listed entry blocks
    /// and the chain of an image with one extent per page (the extent
    /// count itself would take a walk of the page map). 0 for a free
    /// number, whose slot is written free.
    pub fn next_home_blocks_max(&self) -> usize {
        let listed = self.dir.as_ref().map_or(0, |d| d.nonempty_blocks());
        if self.rec.is_none() && self.pages.is_empty() && listed == 0 && self.unwritten.is_empty() {
            return 0;
        }
        let len = image_len(
            self.rec.as_ref().map_or(0, Vec::len),
            self.pages.len(),
            listed,
            self.unwritten.len(),
        );
        listed + chain_blocks(len)
    }

    /// Extents of the page map: (first page, first block, pages).
    pub fn extents(&self) -> Vec<(u64, u64, u32)> {
        let mut out: Vec<(u64, u64, u32)> = Vec::new();
        for (&p, &b) in &self.pages {
            if let Some(last) = out.last_mut() {
                if last.0 + last.2 as u64 == p && last.1 + last.2 as u64 == b && last.2 < u32::MAX {
                    last.2 += 1;
                    continue;
                }
            }
            out.push((p, b, 1));
        }
        out
    }
}

/// `list` without pages `s..e`.
fn clip(list: &[(u64, u64)], s: u64, e: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::with_capacity(list.len() + 1);
    for &(a, b) in list {
        if b <= s || a >= e {
            out.push((a, b));
            continue;
        }
        if a < s {
            out.push((a, s));
        }
        if b > e {
            out.push((e, b));
        }
    }
    out
}

/// The serialized image of an object (everything but its entry blocks'
/// contents): record, extents, entry-block list, and (format 4, only when
/// there are any) the unwritten extents.
pub fn encode_image(
    rec: &[u8],
    extents: &[(u64, u64, u32)],
    dir_blocks: &[u64],
    unwritten: &[(u64, u64)],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        16 + rec.len() + 20 * extents.len() + 8 * dir_blocks.len() + 16 * unwritten.len(),
    );
    out.extend_from_slice(&(rec.len() as u32).to_le_bytes());
    out.extend_from_slice(rec);
    out.extend_from_slice(&(extents.len() as u32).to_le_bytes());
    for (p, b, n) in extents {
        out.extend_from_slice(&p.to_le_bytes());
        out.extend_from_slice(&b.to_le_bytes());
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.extend_from_slice(&(dir_blocks.len() as u32).to_le_bytes());
    for b in dir_blocks {
        out.extend_from_slice(&b.to_le_bytes());
    }
    if !unwritten.is_empty() {
        out.extend_from_slice(&(unwritten.len() as u32).to_le_bytes());
        for (s, e) in unwritten {
            out.extend_from_slice(&s.to_le_bytes());
            out.extend_from_slice(&e.to_le_bytes());
        }
    }
    out
}

/// Length of [`encode_image`]'s output, from the counts alone.
pub fn image_len(rec: usize, extents: usize, dir_blocks: usize, unwritten: usize) -> usize {
    let unwritten = if unwritten == 0 {
        0
    } else {
        4 + 16 * unwritten
    };
    4 + rec + 4 + 20 * extents + 4 + 8 * dir_blocks + unwritten
}

/// Chain blocks of an image of `len` bytes (what the slot does not hold).
pub fn chain_blocks(len: usize) -> usize {
    len.saturating_sub(SLOT_INLINE_MAX).div_ceil(CHAIN_PAYLOAD)
}

/// A decoded image.
pub struct Image {
    pub rec: Vec<u8>,
    pub extents: Vec<(u64, u64, u32)>,
    pub dir_blocks: Vec<u64>,
    pub unwritten: Vec<(u64, u64)>,
}

pub fn decode_image(b: &[u8]) -> Result<Image> {
    let pos = std::cell::Cell::new(0usize);
    let take = |n: usize| -> Result<&[u8]> {
        let end = pos.get().checked_add(n).ok_or(Errno::EUCLEAN)?;
        let s = b.get(pos.get()..end).ok_or(Errno::EUCLEAN)?;
        pos.set(end);
        Ok(s)
    };
    let rl = get_u32(take(4)?, 0) as usize;
    let rec = take(rl)?.to_vec();
    let ne = get_u32(take(4)?, 0) as usize;
    let mut extents = Vec::with_capacity(ne.min(4096));
    for _ in 0..ne {
        let e = take(20)?;
        extents.push((get_u64(e, 0), get_u64(e, 8), get_u32(e, 16)));
    }
    let nd = get_u32(take(4)?, 0) as usize;
    let mut dir_blocks = Vec::with_capacity(nd.min(4096));
    for _ in 0..nd {
        dir_blocks.push(get_u64(take(8)?, 0));
    }
    let mut unwritten = Vec::new();
    if pos.get() != b.len() {
        let nu = get_u32(take(4)?, 0) as usize;
        if nu == 0 || nu > crate::journal::UNWRITTEN_MAX {
            return Err(Errno::EUCLEAN);
        }
        for _ in 0..nu {
            let u = take(16)?;
            unwritten.push((get_u64(u, 0), get_u64(u, 8)));
        }
        if !crate::journal::unwritten_ok(&unwritten) {
            return Err(Errno::EUCLEAN);
        }
    }
    if pos.get() != b.len() {
        return Err(Errno::EUCLEAN);
    }
    Ok(Image {
        rec,
        extents,
        dir_blocks,
        unwritten,
    })
}

/// A decoded slot header, borrowing the inline image from the slot bytes.
pub struct Slot<'a> {
    pub state: u8,
    pub stamp: u64,
    pub image_len: usize,
    pub chain_head: u64,
    pub inline: &'a [u8],
}

pub fn encode_slot(ino: u64, state: u8, stamp: u64, image: &[u8], chain_head: u64) -> Vec<u8> {
    let mut s = vec![0u8; SLOT];
    s[0..4].copy_from_slice(&SLOT_MAGIC.to_le_bytes());
    s[4] = state;
    s[8..16].copy_from_slice(&ino.to_le_bytes());
    s[16..24].copy_from_slice(&stamp.to_le_bytes());
    s[24..28].copy_from_slice(&(image.len() as u32).to_le_bytes());
    s[32..40].copy_from_slice(&chain_head.to_le_bytes());
    let inline = image.len().min(SLOT_INLINE_MAX);
    s[SLOT_HEADER..SLOT_HEADER + inline].copy_from_slice(&image[..inline]);
    let c = crate::crc::crc32c(&[&s[..SLOT_CRC_AT]]);
    s[SLOT_CRC_AT..].copy_from_slice(&c.to_le_bytes());
    s
}

/// Decode a slot of `ino`; `None` for a never-written (all zero) slot,
/// `Err` for a torn or corrupted one.
pub fn decode_slot(s: &[u8], ino: u64) -> Result<Option<Slot<'_>>> {
    // A word at a time: most slots of a fresh table are zero.
    if s.chunks(8).all(|w| w.iter().fold(0, |a, b| a | b) == 0) {
        return Ok(None);
    }
    let ok = s.len() == SLOT
        && get_u32(s, 0) == SLOT_MAGIC
        && get_u32(s, SLOT_CRC_AT) == crate::crc::crc32c(&[&s[..SLOT_CRC_AT]])
        && get_u64(s, 8) == ino
        && get_u64(s, 16) < crate::layout::STAMP_LIMIT
        && (s[4] == SLOT_LIVE || s[4] == SLOT_FREE);
    if !ok {
        return Err(Errno::EUCLEAN);
    }
    let image_len = get_u32(s, 24) as usize;
    if image_len > IMAGE_BYTES_MAX || (s[4] == SLOT_FREE && image_len != 0) {
        return Err(Errno::EUCLEAN);
    }
    let inline = image_len.min(SLOT_INLINE_MAX);
    Ok(Some(Slot {
        state: s[4],
        stamp: get_u64(s, 16),
        image_len,
        chain_head: get_u64(s, 32),
        inline: &s[SLOT_HEADER..SLOT_HEADER + inline],
    }))
}

/// Chain block `i` carrying `payload` for `ino` at `stamp`, linking `next`.
pub fn encode_chain(ino: u64, stamp: u64, next: u64, payload: &[u8]) -> Vec<u8> {
    debug_assert!(payload.len() <= CHAIN_PAYLOAD);
    let mut b = vec![0u8; BLOCK];
    b[0..4].copy_from_slice(&CHAIN_MAGIC.to_le_bytes());
    b[8..16].copy_from_slice(&ino.to_le_bytes());
    b[16..24].copy_from_slice(&stamp.to_le_bytes());
    b[24..32].copy_from_slice(&next.to_le_bytes());
    b[32..36].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    b[CHAIN_HEADER..CHAIN_HEADER + payload.len()].copy_from_slice(payload);
    seal_block(&mut b);
    b
}

/// `(next, payload)` of a chain block that belongs to `ino` at `stamp`.
pub fn decode_chain(b: &[u8], ino: u64, stamp: u64) -> Result<(u64, &[u8])> {
    if !block_sealed(b)
        || get_u32(b, 0) != CHAIN_MAGIC
        || get_u64(b, 8) != ino
        || get_u64(b, 16) != stamp
    {
        return Err(Errno::EUCLEAN);
    }
    let len = get_u32(b, 32) as usize;
    if len > CHAIN_PAYLOAD {
        return Err(Errno::EUCLEAN);
    }
    Ok((get_u64(b, 24), &b[CHAIN_HEADER..CHAIN_HEADER + len]))
}

pub fn encode_dirent(dir: u64, stamp: u64, entries: &[Entry]) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK];
    b[0..4].copy_from_slice(&DIRENT_MAGIC.to_le_bytes());
    b[8..16].copy_from_slice(&dir.to_le_bytes());
    b[16..24].copy_from_slice(&stamp.to_le_bytes());
    b[24..28].copy_from_slice(&(entries.len() as u32).to_le_bytes());
    let mut pos = DIRENT_HEADER;
    for (n, v) in entries {
        b[pos] = n.len() as u8;
        b[pos + 1..pos + 1 + n.len()].copy_from_slice(n);
        b[pos + 1 + n.len()..pos + 1 + n.len() + 17].copy_from_slice(v);
        pos += entry_bytes(n);
    }
    debug_assert!(pos <= BLOCK_CRC_AT);
    seal_block(&mut b);
    b
}

pub fn decode_dirent(b: &[u8], dir: u64) -> Result<Vec<Entry>> {
    if !block_sealed(b) || get_u32(b, 0) != DIRENT_MAGIC || get_u64(b, 8) != dir {
        return Err(Errno::EUCLEAN);
    }
    let n = get_u32(b, 24) as usize;
    let mut pos = DIRENT_HEADER;
    let mut out = Vec::with_capacity(n.min(256));
    for _ in 0..n {
        let len = *b.get(pos).ok_or(Errno::EUCLEAN)? as usize;
        let end = pos + entry_bytes(&vec![0; len]);
        if len == 0 || end > BLOCK_CRC_AT {
            return Err(Errno::EUCLEAN);
        }
        let name = b[pos + 1..pos + 1 + len].to_vec();
        let v: [u8; 17] = b[pos + 1 + len..end]
            .try_into()
            .map_err(|_| Errno::EUCLEAN)?;
        out.push((name, v));
        pos = end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_offsets_read_what_the_record_says() {
        use lanefs_store::InodeRecord;
        let rec = InodeRecord {
            ino: 12,
            generation: 3,
            kind: FileKind::Directory,
            perm: 0o755,
            uid: 1,
            gid: 2,
            nlink: 7,
            size: 99,
            blocks: 0x0102_0304_0506,
            parent: 1,
            next_cookie: 3,
            xattrs: vec![(b"user.x".to_vec(), vec![9; 10])],
            ..InodeRecord::default()
        };
        let o = InodeObj {
            rec: Some(rec.encode()),
            ..InodeObj::default()
        };
        assert_eq!(o.kind(), Some(FileKind::Directory));
        assert_eq!(o.nlink(), Some(7));
        assert_eq!(o.blocks(), Some(0x0102_0304_0506));
        let free = InodeObj::default();
        assert_eq!(
            (free.kind(), free.nlink(), free.blocks()),
            (None, None, None)
        );
    }

    #[test]
    fn dir_blocks_fill_reuse_and_index() {
        let mut d = DirState::default();
        for i in 0..500u32 {
            d.insert(format!("name-{i:04}").as_bytes(), [i as u8; 17]);
        }
        assert!(d.blocks.len() > 1);
        assert!(d
            .blocks
            .iter()
            .all(|b| b.bytes <= DIRENT_CAPACITY && b.dirty));
        d.insert(b"name-0007", [99; 17]);
        assert_eq!(d.get(b"name-0007"), Some([99; 17]));
        assert_eq!(d.len(), 500);
        for b in &mut d.blocks {
            b.dirty = false;
        }
        d.remove(b"name-0003");
        assert_eq!(
            d.blocks.iter().filter(|b| b.dirty).count(),
            1,
            "one change, one block"
        );
        d.insert(b"new", [1; 17]);
        assert_eq!(
            d.blocks.iter().filter(|b| b.dirty).count(),
            1,
            "the freed room is reused"
        );
        let blk = &d.blocks[0];
        let enc = encode_dirent(9, 3, &blk.entries);
        assert_eq!(decode_dirent(&enc, 9).unwrap(), blk.entries);
        assert!(decode_dirent(&enc, 8).is_err(), "wrong owner");
    }

    #[test]
    fn slots_chains_and_images_roundtrip() {
        let img = encode_image(&[5; 300], &[(0, 100, 3), (10, 7, 1)], &[44, 45], &[]);
        let back = decode_image(&img).unwrap();
        assert_eq!(back.rec, vec![5; 300]);
        assert_eq!(back.extents, vec![(0, 100, 3), (10, 7, 1)]);
        assert_eq!(back.dir_blocks, vec![44, 45]);
        assert!(back.unwritten.is_empty());
        // Unwritten extents (format 4) follow, only when there are any.
        let un = [(0, 2), (20, 1 << 40)];
        let img4 = encode_image(&[5; 300], &[(0, 100, 3)], &[], &un);
        assert_eq!(img4.len(), img.len() - 20 - 16 + 4 + 32);
        assert_eq!(decode_image(&img4).unwrap().unwritten, un);
        for bad in [&[(3u64, 3u64)][..], &[(5, 9), (8, 10)], &[(9, 10), (0, 1)]] {
            let img = encode_image(&[5; 300], &[], &[], bad);
            assert!(decode_image(&img).is_err(), "{bad:?} accepted");
        }
        assert!(decode_image(&img4[..img4.len() - 1]).is_err());
        let big = vec![3u8; 1000];
        let s = encode_slot(17, SLOT_LIVE, 9, &big, 77);
        let d = decode_slot(&s, 17).unwrap().unwrap();
        assert_eq!(
            (d.state, d.stamp, d.image_len, d.chain_head),
            (SLOT_LIVE, 9, 1000, 77)
        );
        assert_eq!(d.inline, &big[..SLOT_INLINE_MAX]);
        assert!(decode_slot(&s, 18).is_err(), "slot of another inode");
        assert!(decode_slot(&vec![0; SLOT], 17).unwrap().is_none());
        let c = encode_chain(17, 9, 5, &big[SLOT_INLINE_MAX..]);
        assert_eq!(
            decode_chain(&c, 17, 9).unwrap(),
            (5, &big[SLOT_INLINE_MAX..])
        );
        assert!(decode_chain(&c, 17, 8).is_err(), "stale chain block");
    }

    #[test]
    fn unwritten_extents_count_once_and_punch_clips_them() {
        let mut o = InodeObj::default();
        o.pages.insert(1, 10);
        o.pages.insert(9, 11);
        let mut freed = Vec::new();
        o.apply(&Op::SetUnwritten(4, vec![(0, 4), (6, 8)]), &mut freed);
        assert_eq!(o.allocated(), 2 + 4 + 2 - 1, "page 1 counted once");
        o.apply(&Op::Punch(4, 1, 7), &mut freed);
        assert_eq!(o.unwritten, vec![(0, 1), (7, 8)]);
        assert_eq!(freed, vec![10]);
        assert_eq!(o.allocated(), 1 + 2);
        o.apply(&Op::FreeInode(4), &mut freed);
        assert!(o.unwritten.is_empty() && o.allocated() == 0);
    }

    #[test]
    fn extents_coalesce_runs() {
        let mut o = InodeObj::default();
        for (p, b) in [(0, 10), (1, 11), (2, 12), (5, 13), (6, 20)] {
            o.pages.insert(p, b);
        }
        assert_eq!(o.extents(), vec![(0, 10, 3), (5, 13, 1), (6, 20, 1)]);
    }

    #[test]
    fn int_hasher_spreads_one_shards_keys() {
        use std::hash::BuildHasher;
        let b = BuildHasherDefault::<IntHasher>::default();
        // Keys of one shard share their low 6 bits; hashes must not.
        let low: std::collections::HashSet<u64> = (0..4096u64)
            .map(|k| b.hash_one(5 + 64 * k) & 1023)
            .collect();
        assert!(low.len() > 900, "{} of 1024 buckets used", low.len());
        let top: std::collections::HashSet<u64> =
            (0..4096u64).map(|k| b.hash_one(5 + 64 * k) >> 57).collect();
        assert!(top.len() > 100, "{} of 128 tag values used", top.len());
        assert_ne!(b.hash_one((1u64, 2u64)), b.hash_one((2u64, 1u64)));
    }

    #[test]
    fn image_len_and_chain_blocks_match_the_encoding() {
        for (rec, ext, dirs, un) in [
            (0, 0, 0, 0),
            (120, 0, 0, 0),
            (120, 3, 0, 2),
            (90, 0, 60, 0),
            (4000, 0, 0, 0),
            (100, 500, 0, 7),
        ] {
            let extents: Vec<_> = (0..ext as u64).map(|k| (2 * k, 10 + 2 * k, 1)).collect();
            let blocks: Vec<u64> = (0..dirs as u64).collect();
            let unwritten: Vec<_> = (0..un as u64).map(|k| (10 * k, 10 * k + 1)).collect();
            let img = encode_image(&vec![1; rec], &extents, &blocks, &unwritten);
            assert_eq!(image_len(rec, ext, dirs, un), img.len());
            let rest = &img[img.len().min(SLOT_INLINE_MAX)..];
            assert_eq!(
                chain_blocks(img.len()),
                rest.chunks(CHAIN_PAYLOAD).count(),
                "{rec} {ext} {dirs} {un}"
            );
        }
    }

    #[test]
    fn next_home_blocks_follow_nonempty_entry_blocks_and_frees() {
        let mut o = InodeObj {
            rec: Some(vec![0; 100]),
            ..InodeObj::default()
        };
        assert_eq!(o.next_home_blocks_max(), 0, "fits the slot");
        let mut freed = Vec::new();
        for i in 0..6000u32 {
            let op = Op::PutEntry(1, format!("entry-name-{i:06}").into_bytes(), [0; 17]);
            o.apply(&op, &mut freed);
        }
        let d = o.dir.as_ref().unwrap();
        let blocks = d.blocks.len();
        assert_eq!(d.nonempty_blocks(), blocks);
        // More entry blocks than the slot lists inline: a chain block too.
        assert!(image_len(100, 0, blocks, 0) > SLOT_INLINE_MAX);
        assert_eq!(o.next_home_blocks_max(), blocks + 1);
        // Empty every block but the first: they go, and so does the chain.
        let first: Vec<Vec<u8>> = d.blocks[0].entries.iter().map(|e| e.0.clone()).collect();
        for i in 0..6000u32 {
            let n = format!("entry-name-{i:06}").into_bytes();
            if !first.contains(&n) {
                o.apply(&Op::RemoveEntry(1, n), &mut freed);
            }
        }
        assert_eq!(o.dir.as_ref().unwrap().nonempty_blocks(), 1);
        assert_eq!(o.next_home_blocks_max(), 1);
        // Refilled: blocks count again as they get entries.
        o.apply(&Op::PutEntry(1, b"again".to_vec(), [0; 17]), &mut freed);
        let n = o.dir.as_ref().unwrap().nonempty_blocks();
        assert!(n == 1 || n == 2, "{n}");
        assert_eq!(o.next_home_blocks_max(), n);
        // A page: an upper bound (one extent a page).
        o.apply(&Op::MapPage(1, 0, 77, None), &mut freed);
        assert_eq!(o.next_home_blocks_max(), n);
        o.apply(&Op::FreeInode(1), &mut freed);
        assert_eq!(o.next_home_blocks_max(), 0, "a free slot has no blocks");
        // A block read from disk with no entry goes at the next checkpoint.
        let mut d = DirState::default();
        d.push_loaded(vec![(b"x".to_vec(), [0; 17])], 40);
        d.push_loaded(Vec::new(), 41);
        assert_eq!(d.nonempty_blocks(), 1);
        assert!(!d.blocks[0].dirty && d.blocks[1].dirty);
    }
}
