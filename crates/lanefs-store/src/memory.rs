//! `MemoryStore`: the embedded default store, all in process memory.
//!
//! Locking rules:
//! * `inodes[s]`, `pages[s]`: one mutex per shard (each on its own cache
//!   line), chosen by `ino_shard(ino)` (a hash: numbers come in per-lane
//!   chunks, so `ino % SHARDS` put every lane's first file in one shard);
//!   each protects the records of the inodes in its shard.
//!   No call holds two of these at once (except `unwritten[s]` below).
//! * `dirs[s]`: one mutex per shard (each on its own cache line) of
//!   directory entries, chosen by `ino_shard` of the *directory*: each
//!   directory's entries are in one shard, as its record is. They are
//!   those of the directories whose index the engine has not loaded (it
//!   takes them out at load and gives them back when it drops the index,
//!   `Store::volatile`), so a directory's entries move whole: a put-back
//!   keeps the engine's list as it is (`DirEntries::Parked`) and a take
//!   returns it, one map operation each way, with no per-entry hashing,
//!   copying or freeing (a profile of seed000's cold walks at 16 threads
//!   spent about a sixth of its time spreading entries over shards by
//!   name and gathering them back). Only callers that change single
//!   entries (`dir_insert`, `dir_remove`: a store used without the
//!   engine's index, in tests) turn a parked list into a map by name
//!   (`DirEntries::Named`); an emptied map stays until the directory is
//!   freed (`free_ino`), so a name renamed back and forth does not free
//!   and allocate a map each time. One call holds one of these locks.
//! * `ino_lanes[l]` (mutex, one cache line each): lane `l`'s inode-number
//!   allocator — numbers it freed (reused first, newest first) and a chunk of
//!   never-used numbers. A thread allocates and frees on its own lane only,
//!   so creates on different lanes share no lock and no counter; a number
//!   freed on one lane is reused by that lane.
//! * `spare_inos` (mutex, a leaf; taken alone, or under a lane's lock by an
//!   allocation): batches of [`INO_CHUNK`] freed numbers that lanes gave
//!   up. A lane that holds [`INO_FREED_MAX`] freed numbers hands its oldest
//!   `INO_CHUNK` over (after letting its own lock go); a lane with no freed
//!   and no fresh number left takes a batch before it takes a fresh chunk.
//!   Without it, a lane that only frees (the consumer of files another
//!   lane makes) kept every number it freed while the maker's lane took
//!   fresh chunks forever: 8 bytes a file, and numbers never reused.
//!   Touched once per chunk, as `next_chunk`.
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
/// Freed numbers a lane keeps before it hands its oldest [`INO_CHUNK`]
/// to the others (`MemoryStore::spare_inos`).
const INO_FREED_MAX: usize = 2 * INO_CHUNK as usize;

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

/// One directory's entries in the store (module header).
enum DirEntries {
    /// As the engine gave them back (`dir_put_all`), taken back whole.
    Parked(Vec<DirEntryRecord>),
    /// By name, for single-entry changes.
    Named(DirMap),
}

impl DirEntries {
    /// The entries by name (a parked list turned into a map first).
    fn named(&mut self) -> &mut DirMap {
        if let DirEntries::Parked(list) = self {
            let map = std::mem::take(list)
                .into_iter()
                .map(|e| {
                    let v = e.encode_value();
                    (e.name, v)
                })
                .collect();
            *self = DirEntries::Named(map);
        }
        match self {
            DirEntries::Named(m) => m,
            DirEntries::Parked(_) => unreachable!("turned into a map above"),
        }
    }

    /// Every entry, consumed.
    fn into_records(self) -> Result<Vec<DirEntryRecord>> {
        match self {
            DirEntries::Parked(list) => Ok(list),
            DirEntries::Named(m) => m
                .into_iter()
                .map(|(name, v)| DirEntryRecord::decode_value(&name, &v))
                .collect(),
        }
    }

    /// Every entry, copied.
    fn records(&self) -> Result<Vec<DirEntryRecord>> {
        match self {
            DirEntries::Parked(list) => Ok(list.clone()),
            DirEntries::Named(m) => m
                .iter()
                .map(|(name, v)| DirEntryRecord::decode_value(name, v))
                .collect(),
        }
    }
}

type PageMap = BTreeMap<u64, Box<Page>>;

/// An in-memory [`Store`]. Nothing survives the process.
pub struct MemoryStore {
    inodes: Shards<Box<[u8]>>,
    dirs: Shards<DirEntries>,
    pages: Shards<PageMap>,
    ino_lanes: Box<[Mutex<InoLane>]>,
    spare_inos: Mutex<Vec<Vec<Ino>>>,
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
            dirs: shards(),
            pages: shards(),
            ino_lanes: (0..INO_LANES).map(|_| Mutex::default()).collect(),
            spare_inos: Mutex::new(Vec::new()),
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

    /// The shard of `dir`'s entries.
    fn dir_shard(&self, dir: Ino) -> &Mutex<HashMap<Ino, DirEntries>> {
        &self.dirs[shard(dir)]
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
        if lane.freed.is_empty() && lane.next == lane.end {
            // Numbers another lane freed and gave up, before fresh ones.
            if let Some(batch) = self.spare_inos.lock().pop() {
                lane.freed = batch;
            }
        }
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
        // A freed directory is empty: its (emptied) map goes too.
        self.dirs[s].lock().remove(&ino);
        let given_up = {
            let mut lane = self.ino_lane().lock();
            lane.freed.push(ino);
            (lane.freed.len() >= INO_FREED_MAX).then(|| {
                // The oldest: the lane goes on reusing its newest.
                let newest = lane.freed.split_off(INO_CHUNK as usize);
                std::mem::replace(&mut lane.freed, newest)
            })
        };
        if let Some(batch) = given_up {
            self.spare_inos.lock().push(batch);
        }
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
        match self.dir_shard(dir).lock().get(&dir) {
            Some(d) => d.records(),
            None => Ok(Vec::new()),
        }
    }

    /// Gives the entries up: the engine holds them while the index is
    /// loaded (`Store::volatile`).
    fn dir_take(&self, dir: Ino) -> Result<Vec<DirEntryRecord>> {
        let taken = self.dir_shard(dir).lock().remove(&dir);
        taken.map_or(Ok(Vec::new()), DirEntries::into_records)
    }

    fn dir_insert(&self, dir: Ino, entry: &DirEntryRecord) -> Result<()> {
        self.dir_shard(dir)
            .lock()
            .entry(dir)
            .or_insert_with(|| DirEntries::Named(DirMap::new()))
            .named()
            .insert(entry.name.clone(), entry.encode_value());
        Ok(())
    }

    /// Keeps the list as given, to hand it back whole at the next take.
    fn dir_put_all(&self, dir: Ino, entries: Vec<DirEntryRecord>) -> Result<()> {
        let mut shard = self.dir_shard(dir).lock();
        if entries.is_empty() {
            shard.remove(&dir);
        } else {
            shard.insert(dir, DirEntries::Parked(entries));
        }
        Ok(())
    }

    fn dir_remove(&self, dir: Ino, name: &[u8]) -> Result<()> {
        if let Some(d) = self.dir_shard(dir).lock().get_mut(&dir) {
            d.named().remove(name);
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

    /// A directory's entries through single-entry changes, put-backs
    /// that drop names and add others (kept whole, then changed by name
    /// again), takes and frees; another directory's stay apart.
    #[test]
    fn a_directorys_entries_move_whole_and_by_name() {
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
        s.dir_put_all(d, back.clone()).unwrap();
        assert_eq!(sorted(s.dir_read(d).unwrap()), sorted(back.clone()));
        assert_eq!(s.dir_take(d).unwrap(), back, "handed back whole, as given");
        assert!(s.dir_read(d).unwrap().is_empty(), "taken");
        // A parked list changed by name: turned into a map.
        s.dir_put_all(d, back[..3].to_vec()).unwrap();
        s.dir_remove(d, &back[1].name).unwrap();
        s.dir_insert(d, &entry("y", 9, 4)).unwrap();
        let want = vec![back[0].clone(), back[2].clone(), entry("y", 9, 4)];
        assert_eq!(sorted(s.dir_take(d).unwrap()), sorted(want));
        s.dir_put_all(d, Vec::new()).unwrap();
        assert!(s.dir_take(d).unwrap().is_empty());
        assert_eq!(s.dir_read(other).unwrap(), vec![entry("x", 7, 3)]);
        s.dir_remove(other, b"x").unwrap();
        s.free_ino(other).unwrap();
        assert!(s.dirs.iter().all(|sh| !sh.lock().contains_key(&other)));
        assert!(s.dirs.iter().all(|sh| !sh.lock().contains_key(&d)));
    }

    /// One lane makes, another frees (a consumer of the files a producer
    /// writes): the numbers the freeing lane gives up go back to the
    /// making lane, so the numbers in use and the freed lists stay bounded.
    /// Before, every number freed stayed on the freeing lane's list and the
    /// making lane took fresh chunks forever.
    #[test]
    fn numbers_freed_on_another_lane_come_back() {
        let s = std::sync::Arc::new(MemoryStore::default());
        const FILES: usize = 50_000;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Ino>(16);
        let freer = {
            let s = s.clone();
            std::thread::spawn(move || {
                for ino in rx {
                    s.free_ino(ino).unwrap();
                }
            })
        };
        let mut highest = 0;
        for _ in 0..FILES {
            let ino = s.alloc_ino().unwrap();
            highest = highest.max(ino);
            tx.send(ino).unwrap();
        }
        drop(tx);
        freer.join().unwrap();
        // The maker's fresh chunks while the freer's list fills up to
        // `INO_FREED_MAX` (three at most), then only numbers given back.
        let bound = 4 * INO_CHUNK;
        assert!(
            highest < ROOT_INO + bound,
            "{FILES} files, a few alive at once, used numbers up to {highest}"
        );
        let kept: usize = s.ino_lanes.iter().map(|l| l.lock().freed.len()).sum();
        assert!(
            kept <= 2 * INO_CHUNK as usize,
            "{kept} freed numbers kept by lanes"
        );
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
