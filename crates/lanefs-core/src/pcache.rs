//! Page cache of one regular file: 4 KiB pages over the store.
//!
//! A regular file's `Body::File` holds `RwLock<PageMap>` (the file's data
//! lock):
//! * read: the read fast path, when every page it needs is cached;
//! * write: writes, truncate, fallocate, populating pages on a read miss,
//!   writeback and dropping pages.
//!
//! `PageMap::size` mirrors the inode record's size; both change together
//! under the data lock *and* the inode's meta lock, so I/O under the data
//! lock sees a size that cannot change under it. A page is *allocated* when
//! it is cached or in the store; holes (neither) read as zeros. `in_store`
//! says whether the store holds a copy, so freeing counts every allocated
//! page exactly once. Milestone 2 adds the seqcount-validated lockless read
//! path of seed 003 in front of the read lock.

use std::collections::BTreeMap;

use lanefs_store::{Ino, Page, Result, Store, PAGE_SIZE};

const PAGE: u64 = PAGE_SIZE as u64;

struct CachedPage {
    data: Box<Page>,
    dirty: bool,
    in_store: bool,
}

/// What a page cache must do (swap point for milestone 2).
pub(crate) trait PageCache {
    fn cached_pages(&self) -> usize;
}

/// The cached pages of one file.
pub(crate) struct PageMap {
    pub size: u64,
    pages: BTreeMap<u64, CachedPage>,
}

impl PageCache for PageMap {
    fn cached_pages(&self) -> usize {
        self.pages.len()
    }
}

/// The pieces of `[offset, offset + len)` page by page: `(page index,
/// offset in the page, offset in the range, length)`.
fn chunks(offset: u64, len: usize) -> impl Iterator<Item = (u64, usize, usize, usize)> {
    let mut done = 0;
    std::iter::from_fn(move || {
        if done >= len {
            return None;
        }
        let pos = offset + done as u64;
        let (idx, in_page) = (pos / PAGE, (pos % PAGE) as usize);
        let chunk = (PAGE_SIZE - in_page).min(len - done);
        let piece = (idx, in_page, done, chunk);
        done += chunk;
        Some(piece)
    })
}

/// Page indexes covering `[offset, offset + len)`; empty when `len == 0`.
fn page_range(offset: u64, len: u64) -> std::ops::Range<u64> {
    if len == 0 {
        return 0..0;
    }
    offset / PAGE..(offset + len - 1) / PAGE + 1
}

impl PageMap {
    pub fn new(size: u64) -> PageMap {
        PageMap {
            size,
            pages: BTreeMap::new(),
        }
    }

    /// Copy from cached pages only. `None` if any needed non-hole page is not
    /// cached (the caller retries with [`read_fill`](Self::read_fill)).
    /// Uncached pages count as misses even if they are holes.
    pub fn read_cached(&self, offset: u64, buf: &mut [u8]) -> Option<usize> {
        let n = self.readable(offset, buf.len());
        for (idx, in_page, done, chunk) in chunks(offset, n) {
            let page = self.pages.get(&idx)?;
            buf[done..done + chunk].copy_from_slice(&page.data[in_page..in_page + chunk]);
        }
        Some(n)
    }

    /// Read, loading missing pages from the store into the cache. Returns the
    /// bytes read.
    pub fn read_fill(
        &mut self,
        store: &dyn Store,
        ino: Ino,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize> {
        let n = self.readable(offset, buf.len());
        for (idx, in_page, done, chunk) in chunks(offset, n) {
            let out = &mut buf[done..done + chunk];
            if !self.pages.contains_key(&idx) {
                self.load(store, ino, idx)?;
            }
            match self.pages.get(&idx) {
                Some(p) => out.copy_from_slice(&p.data[in_page..in_page + chunk]),
                None => out.fill(0),
            }
        }
        Ok(n)
    }

    fn readable(&self, offset: u64, want: usize) -> usize {
        if offset >= self.size {
            return 0;
        }
        (self.size - offset).min(want as u64) as usize
    }

    /// Bring page `idx` into the cache if the store has it; `false` for a hole.
    fn load(&mut self, store: &dyn Store, ino: Ino, idx: u64) -> Result<bool> {
        let mut data = Box::new([0u8; PAGE_SIZE]);
        if !store.read_page(ino, idx, &mut data)? {
            return Ok(false);
        }
        self.pages.insert(
            idx,
            CachedPage {
                data,
                dirty: false,
                in_store: true,
            },
        );
        Ok(true)
    }

    /// Cache every allocated page of `range` and count the holes in it: the
    /// pages an allocation of the range must reserve. Changes no data.
    pub fn prepare(
        &mut self,
        store: &dyn Store,
        ino: Ino,
        range: std::ops::Range<u64>,
    ) -> Result<u64> {
        let mut holes = 0;
        for idx in range {
            if !self.pages.contains_key(&idx) && !self.load(store, ino, idx)? {
                holes += 1;
            }
        }
        Ok(holes)
    }

    /// Pages needed by a write of `len` bytes at `offset`.
    pub fn write_range(offset: u64, len: u64) -> std::ops::Range<u64> {
        page_range(offset, len)
    }

    /// Write `data` at `offset`. Every page in range must have been
    /// [`prepare`](Self::prepare)d (and its holes reserved): holes become
    /// new zero-filled dirty pages. Does not change `size`.
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        for (idx, in_page, done, chunk) in chunks(offset, data.len()) {
            let page = self.page_mut(idx);
            page.data[in_page..in_page + chunk].copy_from_slice(&data[done..done + chunk]);
            page.dirty = true;
        }
    }

    /// Allocate (zero-filled) every hole in `range`; pages must be prepared.
    pub fn allocate(&mut self, range: std::ops::Range<u64>) {
        for idx in range {
            self.page_mut(idx);
        }
    }

    fn page_mut(&mut self, idx: u64) -> &mut CachedPage {
        self.pages.entry(idx).or_insert_with(|| CachedPage {
            data: Box::new([0u8; PAGE_SIZE]),
            dirty: true,
            in_store: false,
        })
    }

    /// Zero bytes `[offset, offset + len)` of allocated pages (holes stay
    /// holes). Pages must be prepared.
    pub fn zero(&mut self, offset: u64, len: u64) {
        let end = offset.saturating_add(len);
        for idx in page_range(offset, len) {
            if let Some(p) = self.pages.get_mut(&idx) {
                let start = offset.max(idx * PAGE) - idx * PAGE;
                let stop = end.min((idx + 1) * PAGE) - idx * PAGE;
                p.data[start as usize..stop as usize].fill(0);
                p.dirty = true;
            }
        }
    }

    /// Free whole pages in `range` from cache and store. Returns the
    /// allocated pages freed.
    pub fn free_pages(
        &mut self,
        store: &dyn Store,
        ino: Ino,
        range: std::ops::Range<u64>,
    ) -> Result<u64> {
        if range.is_empty() {
            return Ok(0);
        }
        let doomed: Vec<u64> = self.pages.range(range.clone()).map(|(k, _)| *k).collect();
        let mut cache_only = 0;
        for k in &doomed {
            if let Some(p) = self.pages.remove(k) {
                if !p.in_store {
                    cache_only += 1;
                }
            }
        }
        let in_store = store.punch_pages(ino, range.start, range.end)?;
        Ok(cache_only + in_store)
    }

    /// Shrink or grow to `new_size`: pages wholly past the end are freed and
    /// the tail of the last page is zeroed. Returns the pages freed. Sets
    /// `size`.
    pub fn truncate(&mut self, store: &dyn Store, ino: Ino, new_size: u64) -> Result<u64> {
        let mut freed = 0;
        if new_size < self.size {
            freed = self.free_pages(store, ino, new_size.div_ceil(PAGE)..u64::MAX)?;
            if !new_size.is_multiple_of(PAGE) {
                let idx = new_size / PAGE;
                self.prepare(store, ino, idx..idx + 1)?;
                self.zero(new_size, PAGE - new_size % PAGE);
            }
        }
        self.size = new_size;
        Ok(freed)
    }

    /// Punch `[offset, offset + len)`: zero partial pages at the edges and
    /// free the whole pages between. Returns the pages freed.
    pub fn punch(&mut self, store: &dyn Store, ino: Ino, offset: u64, len: u64) -> Result<u64> {
        let end = offset.saturating_add(len);
        let whole = offset.div_ceil(PAGE)..end / PAGE;
        for edge in [offset / PAGE, end / PAGE] {
            if !whole.contains(&edge) && edge * PAGE < end {
                self.prepare(store, ino, edge..edge + 1)?;
            }
        }
        self.zero(offset, len);
        self.free_pages(store, ino, whole)
    }

    /// Write dirty pages to the store.
    pub fn flush(&mut self, store: &dyn Store, ino: Ino) -> Result<()> {
        for (idx, p) in self.pages.iter_mut() {
            if p.dirty {
                store.write_page(ino, *idx, &p.data)?;
                p.dirty = false;
                p.in_store = true;
            }
        }
        Ok(())
    }

    /// Drop every clean page; returns how many. Call `flush` first to drop all.
    pub fn drop_clean(&mut self) -> usize {
        let before = self.pages.len();
        self.pages.retain(|_, p| p.dirty);
        before - self.pages.len()
    }

    /// Drop everything without writing back (the file is being freed).
    pub fn discard(&mut self) -> usize {
        let n = self.pages.len();
        self.pages.clear();
        n
    }

    /// Allocated pages that exist only in the cache.
    #[cfg(test)]
    fn cache_only(&self) -> usize {
        self.pages.values().filter(|p| !p.in_store).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanefs_store::MemoryStore;

    fn write(pm: &mut PageMap, s: &MemoryStore, off: u64, data: &[u8]) -> u64 {
        let holes = pm
            .prepare(s, 9, PageMap::write_range(off, data.len() as u64))
            .unwrap();
        pm.write(off, data);
        pm.size = pm.size.max(off + data.len() as u64);
        holes
    }

    #[test]
    fn write_read_holes_and_store_roundtrip() {
        let s = MemoryStore::default();
        let mut pm = PageMap::new(0);
        assert_eq!(write(&mut pm, &s, 5000, b"hello"), 1);
        assert_eq!(
            write(&mut pm, &s, 5002, b"XY"),
            0,
            "same page: no new block"
        );
        assert_eq!(pm.cache_only(), 1);
        let mut buf = vec![1u8; 6000];
        assert_eq!(
            pm.read_cached(0, &mut buf),
            None,
            "page 0 is an uncached hole"
        );
        let n = pm.read_fill(&s, 9, 0, &mut buf).unwrap();
        assert_eq!(n, 5005);
        assert!(buf[..5000].iter().all(|b| *b == 0));
        assert_eq!(&buf[5000..5005], b"heXYo");
        pm.flush(&s, 9).unwrap();
        assert_eq!(pm.drop_clean(), 1);
        let mut small = [0u8; 5];
        assert_eq!(pm.read_cached(5000, &mut small), None);
        pm.read_fill(&s, 9, 5000, &mut small).unwrap();
        assert_eq!(&small, b"heXYo");
    }

    #[test]
    fn truncate_and_punch_count_freed_pages_once() {
        let s = MemoryStore::default();
        let mut pm = PageMap::new(0);
        write(&mut pm, &s, 0, &[7u8; 3 * PAGE_SIZE]);
        pm.flush(&s, 9).unwrap();
        write(&mut pm, &s, 3 * PAGE, &[8u8; 10]);
        assert_eq!(
            pm.truncate(&s, 9, PAGE + 1).unwrap(),
            2,
            "pages 2 (store) and 3 (cache)"
        );
        let mut buf = [9u8; 10];
        pm.read_fill(&s, 9, PAGE - 5, &mut buf).unwrap();
        assert_eq!(&buf[..6], &[7, 7, 7, 7, 7, 7]);
        assert_eq!(buf.len(), 10);
        pm.size = 3 * PAGE;
        let mut tail = [9u8; 4];
        pm.read_fill(&s, 9, PAGE + 1, &mut tail).unwrap();
        assert_eq!(tail, [0; 4], "truncate zeroed the tail of the last page");
        let freed = pm.punch(&s, 9, 10, 2 * PAGE).unwrap();
        assert_eq!(freed, 1, "page 1 wholly inside the punched range");
        let mut head = [9u8; 12];
        pm.read_fill(&s, 9, 0, &mut head).unwrap();
        assert_eq!(head[..10], [7; 10]);
        assert_eq!(head[10..], [0; 2]);
    }
}
