//! `MemoryStore`: the embedded default store, all in process memory.
//!
//! Locking rules:
//! * `inodes[s]`, `pages[s]`: one mutex per shard (each on its own cache
//!   line), chosen by `ino_shard(ino)` (a hash: numbers come in per-lane
//!   chunks, so `ino % SHARDS` put every lane's first file in one shard);
//!   each protects the records of the inodes in its shard.
//!   No call holds two of these at once (except `unwritten[s]` below).
//! * `dirs[s]`: one mutex per shard of directory entries (of the
//!   directories whose index the engine has not loaded: it takes them out
//!   at load and gives them back when it drops the index,
//!   `Store::volatile`), chosen by a hash of (directory, name), so that
//!   changes of different names in one directory take different locks
//!   (the engine changes them side by side under different stripes of the
//!   directory). Reading a whole directory
//!   visits every shard. A directory's map in a shard that loses its last
//!   entry stays (a name renamed back and forth would otherwise free and
//!   allocate a map each time) until the shard holds [`EMPTY_MAPS_MAX`]
//!   such maps, when one sweep drops them all: the engine frees only empty
//!   directories and `free_ino` does not visit these shards, so this
//!   bounds what removed directories leave behind.
//!   Each directory has a *home* shard (`ino_shard` of its number) that
//!   keeps, under its mutex, a mask of the entry shards that may hold the
//!   directory's entries (`EntryShard::homed`: a bit is set before an
//!   entry goes into that shard and cleared only when the directory's
//!   entries are taken, rewritten or freed), so a load, a take or a put
//!   back of one directory locks its home and the shards in its mask, not
//!   all 64 (a profile of seed000's cold walks at 16 threads had them
//!   waiting on these shards' locks at every load and put-back of an
//!   index). No call holds two entry-shard locks at once: the home's is
//!   released before any other is taken.
//! * `ino_lanes[l]` (mutex, one cache line each): lane `l`'s inode-number
//!   allocator — numbers it freed (reused first, newest first) and a chunk of
//!   never-used numbers. A thread allocates and frees on its own lane only,
//!   so creates on different lanes share no lock and no counter; a number
//!   freed on one lane is reused by that lane.
//! * `next_chunk` (atomic, Relaxed): start of the next never-used chunk of
//!   [`INO_CHUNK`] numbers; touched once per chunk, numbers are unique
//!   because `fetch_add` is atomic, no ordering with data needed.
//! * `unwritten[s]`: the unwritten extents (fallocate) of the shard's inodes.
//!   Taken alone, or after `pages[s]` (`allocated_pages`), never before it.
//! * `superblock`: protects the superblock copy.
//!
//! Records are stored serialized (`InodeRecord::encode`), never as live
//! objects, so the core's caches really are caches over this store.

use std::collections::BTreeMap;

// foldhash (randomly seeded per map) rather than SipHash: names and numbers
// hash several times faster, and a chosen-collision attack still needs the seed.
use foldhash::{HashMap, HashMapExt};
use std::hash::BuildHasher;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::{
    ino_shard, CacheLine, DirEntryRecord, Errno, Ino, InodeRecord, Page, Result, Store, Superblock,
    PAGE_SIZE, ROOT_INO,
};

const SHARD_BITS: u32 = 6;
const SHARDS: usize = 1 << SHARD_BITS;
/// Lanes with their own inode-number allocator (more lanes share them).
const INO_LANES: usize = 64;
/// Never-used inode numbers a lane takes at once from `next_chunk`.
const INO_CHUNK: u64 = 1024;

/// One lane's inode numbers, alone on its cache line.
#[derive(Default)]
#[repr(align(64))]
struct InoLane {
    /// Numbers freed on this lane, reused before fresh ones.
    freed: Vec<Ino>,
    /// Fresh numbers `next..end` not yet handed out.
    next: Ino,
    end: Ino,
}

/// Capacity limits of a [`MemoryStore`].
#[derive(Clone, Copy, Debug)]
pub struct MemoryStoreConfig {
    /// Data capacity in bytes (rounded down to whole pages).
    pub capacity_bytes: u64,
    /// Maximum number of inodes, the root included.
    pub max_inodes: u64,
}

impl Default for MemoryStoreConfig {
    fn default() -> Self {
        MemoryStoreConfig {
            capacity_bytes: 1 << 30,
            max_inodes: 1 << 20,
        }
    }
}

type DirMap = HashMap<Vec<u8>, [u8; 17]>;

/// Empty directory maps a shard keeps before it sweeps them.
const EMPTY_MAPS_MAX: usize = 256;

/// One shard of directory entries.
#[derive(Default)]
struct EntryShard {
    maps: HashMap<Ino, DirMap>,
    /// Maps in `maps` that became empty (some may have refilled since).
    emptied: usize,
    /// For the directories whose *home* is this shard
    /// ([`MemoryStore::home_shard`]): the entry shards that may hold their
    /// entries, one bit each (module header).
    homed: HashMap<Ino, u64>,
}
type PageMap = BTreeMap<u64, Box<Page>>;

/// An in-memory [`Store`]. Nothing survives the process.
pub struct MemoryStore {
    inodes: Shards<Box<[u8]>>,
    dirs: Box<[CacheLine<Mutex<EntryShard>>]>,
    entry_hasher: foldhash::fast::RandomState,
    pages: Shards<PageMap>,
    ino_lanes: Box<[Mutex<InoLane>]>,
    next_chunk: AtomicU64,
    unwritten: Shards<Vec<Range<u64>>>,
    superblock: Mutex<Superblock>,
}

type Shards<V> = Box<[CacheLine<Mutex<HashMap<Ino, V>>>]>;

fn shards<V>() -> Shards<V> {
    (0..SHARDS)
        .map(|_| CacheLine(Mutex::new(HashMap::new())))
        .collect()
}

fn shard(ino: Ino) -> usize {
    ino_shard(ino, SHARD_BITS)
}

impl MemoryStore {
    /// An empty store with the given limits.
    pub fn new(cfg: MemoryStoreConfig) -> MemoryStore {
        MemoryStore {
            inodes: shards(),
            dirs: (0..SHARDS).map(|_| CacheLine::default()).collect(),
            entry_hasher: foldhash::fast::RandomState::default(),
            pages: shards(),
            ino_lanes: (0..INO_LANES).map(|_| Mutex::default()).collect(),
            next_chunk: AtomicU64::new(ROOT_INO + 1),
            unwritten: shards(),
            superblock: Mutex::new(Superblock {
                total_blocks: cfg.capacity_bytes / PAGE_SIZE as u64,
                total_inodes: cfg.max_inodes.max(1),
                used_blocks: 0,
                used_inodes: 0,
            }),
        }
    }

    /// The entry shard of `name` in `dir`, by index.
    fn entry_shard_of(&self, dir: Ino, name: &[u8]) -> usize {
        (self.entry_hasher.hash_one((dir, name)) as usize) % SHARDS
    }

    fn entry_shard(&self, dir: Ino, name: &[u8]) -> &Mutex<EntryShard> {
        &self.dirs[self.entry_shard_of(dir, name)]
    }

    /// The shard that keeps `dir`'s mask of entry shards.
    fn home_shard(dir: Ino) -> usize {
        ino_shard(dir, SHARD_BITS)
    }

    /// `dir`'s mask of entry shards (a copy).
    fn shard_mask(&self, dir: Ino) -> u64 {
        let home = self.dirs[Self::home_shard(dir)].lock();
        home.homed.get(&dir).copied().unwrap_or(0)
    }

    /// The entry shards set in `mask`.
    fn shards_in(&self, mask: u64) -> impl Iterator<Item = &Mutex<EntryShard>> {
        (0..SHARDS)
            .filter(move |s| mask & (1 << s) != 0)
            .map(|s| &*self.dirs[s])
    }

    fn ino_lane(&self) -> &Mutex<InoLane> {
        &self.ino_lanes[crate::lane() % INO_LANES]
    }

    /// Number of inode records held (for leak checks in tests).
    pub fn inode_records(&self) -> usize {
        self.inodes.iter().map(|s| s.lock().len()).sum()
    }

    /// Number of data pages held (for leak checks in tests).
    pub fn page_records(&self) -> usize {
        self.pages
            .iter()
            .map(|s| s.lock().values().map(|m| m.len()).sum::<usize>())
            .sum()
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new(MemoryStoreConfig::default())
    }
}

impl Store for MemoryStore {
    fn superblock(&self) -> Result<Superblock> {
        Ok(*self.superblock.lock())
    }

    fn write_superblock(&self, sb: &Superblock) -> Result<()> {
        *self.superblock.lock() = *sb;
        Ok(())
    }

    fn alloc_ino(&self) -> Result<Ino> {
        let mut lane = self.ino_lane().lock();
        if let Some(ino) = lane.freed.pop() {
            return Ok(ino);
        }
        if lane.next == lane.end {
            let start = self.next_chunk.fetch_add(INO_CHUNK, Ordering::Relaxed);
            // 2^64 numbers are never used up in practice; refuse rather than wrap.
            let end = start.checked_add(INO_CHUNK).ok_or(Errno::ENOSPC)?;
            lane.next = start;
            lane.end = end;
        }
        let ino = lane.next;
        lane.next += 1;
        debug_assert!(ino > ROOT_INO, "fresh numbers start past the root");
        Ok(ino)
    }

    fn free_ino(&self, ino: Ino) -> Result<()> {
        if ino == ROOT_INO || ino == 0 {
            return Err(Errno::EINVAL);
        }
        let s = shard(ino);
        self.inodes[s].lock().remove(&ino);
        self.pages[s].lock().remove(&ino);
        // A freed directory is empty: its entry shards' mask goes too.
        self.dirs[Self::home_shard(ino)].lock().homed.remove(&ino);
        self.ino_lane().lock().freed.push(ino);
        self.unwritten[s].lock().remove(&ino);
        Ok(())
    }

    fn read_inode(&self, ino: Ino) -> Result<Option<InodeRecord>> {
        let bytes = self.inodes[shard(ino)].lock().get(&ino).cloned();
        bytes.map(|b| InodeRecord::decode(&b)).transpose()
    }

    fn volatile(&self) -> bool {
        true
    }

    fn write_inode(&self, rec: &InodeRecord) -> Result<()> {
        let bytes = rec.encode().into_boxed_slice();
        self.inodes[shard(rec.ino)].lock().insert(rec.ino, bytes);
        Ok(())
    }

    fn dir_read(&self, dir: Ino) -> Result<Vec<DirEntryRecord>> {
        let mut out = Vec::new();
        for shard in self.shards_in(self.shard_mask(dir)) {
            if let Some(m) = shard.lock().maps.get(&dir) {
                for (name, v) in m {
                    out.push(DirEntryRecord::decode_value(name, v)?);
                }
            }
        }
        Ok(out)
    }

    /// Gives the entries up: the engine holds them while the index is
    /// loaded (`Store::volatile`).
    fn dir_take(&self, dir: Ino) -> Result<Vec<DirEntryRecord>> {
        let mask = self.dirs[Self::home_shard(dir)]
            .lock()
            .homed
            .remove(&dir)
            .unwrap_or(0);
        let mut out = Vec::new();
        for shard in self.shards_in(mask) {
            if let Some(m) = shard.lock().maps.remove(&dir) {
                for (name, v) in &m {
                    out.push(DirEntryRecord::decode_value(name, v)?);
                }
            }
        }
        Ok(out)
    }

    fn dir_insert(&self, dir: Ino, entry: &DirEntryRecord) -> Result<()> {
        let s = self.entry_shard_of(dir, &entry.name);
        // The mask first: a reader that sees the entry sees its shard.
        *self.dirs[Self::home_shard(dir)]
            .lock()
            .homed
            .entry(dir)
            .or_default() |= 1 << s;
        self.dirs[s]
            .lock()
            .maps
            .entry(dir)
            .or_default()
            .insert(entry.name.clone(), entry.encode_value());
        Ok(())
    }

    /// Make `entries` the entries of `dir`: each entry shard touched once
    /// (the trait's default reads the directory back and locks a shard per
    /// entry), only the shards of the old and the new mask visited.
    fn dir_put_all(&self, dir: Ino, entries: &[DirEntryRecord]) -> Result<()> {
        let mut groups: Vec<Vec<&DirEntryRecord>> = vec![Vec::new(); SHARDS];
        for e in entries {
            groups[self.entry_shard_of(dir, &e.name)].push(e);
        }
        let new = groups
            .iter()
            .enumerate()
            .filter(|(_, g)| !g.is_empty())
            .fold(0u64, |m, (s, _)| m | 1 << s);
        let old = {
            let mut home = self.dirs[Self::home_shard(dir)].lock();
            let m = home.homed.entry(dir).or_default();
            let old = *m;
            // Both until the shards are rewritten: a reader meanwhile
            // visits every shard that may hold an entry.
            *m |= new;
            old
        };
        for (s, group) in groups.iter().enumerate() {
            if (old | new) & (1 << s) == 0 {
                continue;
            }
            let mut shard = self.dirs[s].lock();
            let map = shard.maps.entry(dir).or_default();
            map.clear();
            for e in group {
                map.insert(e.name.clone(), e.encode_value());
            }
            if map.is_empty() {
                shard.maps.remove(&dir);
            }
        }
        let mut home = self.dirs[Self::home_shard(dir)].lock();
        if new == 0 {
            home.homed.remove(&dir);
        } else {
            home.homed.insert(dir, new);
        }
        Ok(())
    }

    fn dir_remove(&self, dir: Ino, name: &[u8]) -> Result<()> {
        let mut shard = self.entry_shard(dir, name).lock();
        let emptied = match shard.maps.get_mut(&dir) {
            Some(m) => m.remove(name).is_some() && m.is_empty(),
            None => false,
        };
        if emptied {
            shard.emptied += 1;
            if shard.emptied >= EMPTY_MAPS_MAX {
                shard.maps.retain(|_, m| !m.is_empty());
                shard.emptied = 0;
            }
        }
        Ok(())
    }

    fn read_page(&self, ino: Ino, index: u64, buf: &mut Page) -> Result<bool> {
        let pages = self.pages[shard(ino)].lock();
        match pages.get(&ino).and_then(|m| m.get(&index)) {
            Some(p) => {
                buf.copy_from_slice(&p[..]);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn write_page(&self, ino: Ino, index: u64, data: &Page) -> Result<()> {
        let mut pages = self.pages[shard(ino)].lock();
        let m = pages.entry(ino).or_default();
        match m.get_mut(&index) {
            Some(p) => p.copy_from_slice(data),
            None => {
                m.insert(index, Box::new(*data));
            }
        }
        Ok(())
    }

    fn punch_pages(&self, ino: Ino, start: u64, end: u64) -> Result<u64> {
        if start >= end {
            return Ok(0);
        }
        let mut pages = self.pages[shard(ino)].lock();
        let Some(m) = pages.get_mut(&ino) else {
            return Ok(0);
        };
        let doomed: Vec<u64> = m.range(start..end).map(|(k, _)| *k).collect();
        for k in &doomed {
            m.remove(k);
        }
        if m.is_empty() {
            pages.remove(&ino);
        }
        Ok(doomed.len() as u64)
    }

    fn count_pages(&self, ino: Ino, start: u64, end: u64) -> Result<u64> {
        if start >= end {
            return Ok(0);
        }
        let pages = self.pages[shard(ino)].lock();
        Ok(pages
            .get(&ino)
            .map_or(0, |m| m.range(start..end).count() as u64))
    }

    fn has_pages_from(&self, ino: Ino, start: u64) -> Result<bool> {
        let pages = self.pages[shard(ino)].lock();
        Ok(pages
            .get(&ino)
            .is_some_and(|m| m.range(start..).next().is_some()))
    }

    fn read_unwritten(&self, ino: Ino) -> Result<Vec<Range<u64>>> {
        Ok(self.unwritten[shard(ino)]
            .lock()
            .get(&ino)
            .cloned()
            .unwrap_or_default())
    }

    fn write_unwritten(&self, ino: Ino, extents: &[Range<u64>]) -> Result<()> {
        let mut sorted = extents.to_vec();
        sorted.sort_by_key(|r| r.start);
        if sorted.iter().any(|r| r.is_empty()) || sorted.windows(2).any(|w| w[0].end > w[1].start) {
            return Err(Errno::EINVAL);
        }
        let mut m = self.unwritten[shard(ino)].lock();
        if sorted.is_empty() {
            m.remove(&ino);
        } else {
            m.insert(ino, sorted);
        }
        Ok(())
    }

    fn allocated_pages(&self, ino: Ino) -> Result<u64> {
        let s = shard(ino);
        let pages = self.pages[s].lock();
        let unwritten = self.unwritten[s].lock();
        let data = pages.get(&ino);
        let extents = unwritten.get(&ino).map_or(&[][..], |v| &v[..]);
        let mut n = data.map_or(0, |m| m.len() as u64);
        for r in extents {
            let inside = data.map_or(0, |m| m.range(r.clone()).count() as u64);
            n += r.end - r.start - inside;
        }
        Ok(n)
    }

    fn list_inodes(&self) -> Result<Vec<Ino>> {
        Ok(self
            .inodes
            .iter()
            .flat_map(|s| s.lock().keys().copied().collect::<Vec<_>>())
            .collect())
    }

    fn page_count(&self, ino: Ino) -> Result<u64> {
        Ok(self.pages[shard(ino)]
            .lock()
            .get(&ino)
            .map_or(0, |m| m.len() as u64))
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FileKind;

    #[test]
    fn pages_holes_and_punch() {
        let s = MemoryStore::default();
        let mut buf = [7u8; PAGE_SIZE];
        assert!(!s.read_page(5, 0, &mut buf).unwrap());
        assert_eq!(buf[0], 7, "a hole leaves the buffer alone");
        s.write_page(5, 3, &[1; PAGE_SIZE]).unwrap();
        s.write_page(5, 9, &[2; PAGE_SIZE]).unwrap();
        assert!(s.read_page(5, 3, &mut buf).unwrap());
        assert_eq!(buf[100], 1);
        assert_eq!(s.punch_pages(5, 0, 4).unwrap(), 1);
        assert_eq!(s.page_records(), 1);
        assert_eq!(s.punch_pages(5, 4, u64::MAX).unwrap(), 1);
        assert_eq!(s.page_records(), 0);
    }

    #[test]
    fn ranges_count_and_extents_union_with_pages() {
        let s = MemoryStore::default();
        for idx in [2, 5, 9, 1 << 40] {
            s.write_page(4, idx, &[1; PAGE_SIZE]).unwrap();
        }
        assert_eq!(s.count_pages(4, 3, 10).unwrap(), 2);
        assert_eq!(s.count_pages(4, 0, u64::MAX).unwrap(), 4);
        assert_eq!(s.count_pages(4, 10, 3).unwrap(), 0);
        s.write_unwritten(4, &[8..12, 0..3]).unwrap();
        assert_eq!(s.read_unwritten(4).unwrap(), vec![0..3, 8..12]);
        // pages 2 and 9 are inside extents: counted once.
        assert_eq!(s.allocated_pages(4).unwrap(), 4 + 3 + 4 - 2);
        assert_eq!(s.write_unwritten(4, &[0..5, 4..6]), Err(Errno::EINVAL));
        s.free_ino(4).unwrap();
        assert!(s.read_unwritten(4).unwrap().is_empty());
        assert_eq!(s.allocated_pages(4).unwrap(), 0);
    }

    #[test]
    fn dirs_and_inode_numbers() {
        let s = MemoryStore::default();
        let a = s.alloc_ino().unwrap();
        let b = s.alloc_ino().unwrap();
        assert_ne!(a, b);
        assert_ne!(a, ROOT_INO);
        let e = DirEntryRecord {
            name: b"n".to_vec(),
            ino: b,
            kind: FileKind::Regular,
            cookie: 3,
        };
        s.dir_insert(a, &e).unwrap();
        assert_eq!(s.dir_read(a).unwrap(), vec![e]);
        s.dir_remove(a, b"n").unwrap();
        assert!(s.dir_read(a).unwrap().is_empty());
        s.free_ino(b).unwrap();
        assert_eq!(s.alloc_ino().unwrap(), b, "freed numbers are reused");
        assert_eq!(s.free_ino(ROOT_INO), Err(Errno::EINVAL));
    }

    fn entry(name: &str, ino: Ino, cookie: u64) -> DirEntryRecord {
        DirEntryRecord {
            name: name.as_bytes().to_vec(),
            ino,
            kind: FileKind::Regular,
            cookie,
        }
    }

    fn sorted(mut v: Vec<DirEntryRecord>) -> Vec<DirEntryRecord> {
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Entries live in shards by (directory, name); a directory's mask of
    /// shards finds them all through inserts, removals, put-backs that
    /// drop names and add others, takes and frees.
    #[test]
    fn a_directorys_entries_are_found_through_its_shard_mask() {
        let s = MemoryStore::default();
        let (d, other) = (s.alloc_ino().unwrap(), s.alloc_ino().unwrap());
        let many: Vec<_> = (0..200)
            .map(|i| entry(&format!("n{i}"), 100 + i, 3 + i))
            .collect();
        for e in &many {
            s.dir_insert(d, e).unwrap();
        }
        s.dir_insert(other, &entry("x", 7, 3)).unwrap();
        assert_eq!(sorted(s.dir_read(d).unwrap()), sorted(many.clone()));
        s.dir_remove(d, b"n5").unwrap();
        assert_eq!(s.dir_read(d).unwrap().len(), 199);
        // Put back a set that drops most names and adds new ones.
        let back: Vec<_> = (150..260)
            .map(|i| entry(&format!("n{i}"), 100 + i, 3 + i))
            .collect();
        s.dir_put_all(d, &back).unwrap();
        assert_eq!(sorted(s.dir_read(d).unwrap()), sorted(back.clone()));
        assert_eq!(sorted(s.dir_take(d).unwrap()), sorted(back.clone()));
        assert!(s.dir_read(d).unwrap().is_empty(), "taken");
        s.dir_put_all(d, &back[..3]).unwrap();
        assert_eq!(sorted(s.dir_take(d).unwrap()), sorted(back[..3].to_vec()));
        s.dir_put_all(d, &[]).unwrap();
        assert!(s.dir_take(d).unwrap().is_empty());
        assert_eq!(s.dir_read(other).unwrap(), vec![entry("x", 7, 3)]);
        s.dir_remove(other, b"x").unwrap();
        s.free_ino(other).unwrap();
        assert!(s
            .dirs
            .iter()
            .all(|sh| !sh.lock().homed.contains_key(&other)));
        assert!(s.dirs.iter().all(|sh| !sh.lock().homed.contains_key(&d)));
    }

    #[test]
    fn lanes_allocate_unique_numbers_from_their_own_chunks() {
        let s = std::sync::Arc::new(MemoryStore::default());
        let per_thread = 3 * INO_CHUNK as usize;
        let lists: Vec<Vec<Ino>> = (0..4)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    let v: Vec<Ino> = (0..per_thread).map(|_| s.alloc_ino().unwrap()).collect();
                    // Freed on this lane, reused by this lane.
                    s.free_ino(v[7]).unwrap();
                    assert_eq!(s.alloc_ino().unwrap(), v[7]);
                    v
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        let mut all: Vec<Ino> = lists.iter().flatten().copied().collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 4 * per_thread, "no number handed out twice");
        assert!(all.iter().all(|&i| i > ROOT_INO));
        for v in &lists {
            // A lane's fresh numbers come in whole chunks: runs of INO_CHUNK.
            assert!(v.windows(2).filter(|w| w[1] != w[0] + 1).count() <= 3);
        }
    }
}
