//! Page cache of one regular file: 4 KiB pages over the store, read without
//! locks (seed 003), allocation tracked by range.
//!
//! A regular file's body is a [`FileData`]:
//! * `map` (`RwLock<PageMap>`, the file's *data lock*): taken exclusively by
//!   writes, truncate, fallocate/punch, writeback, page drops and by a read
//!   that loads pages from the store; shared by locked reads (the
//!   [`LockedRead`] design, and the fallback of [`LocklessRead`]) and, as
//!   a waiting room, by an overwrite that found its stripe taken for long
//!   ([`FileData::try_overwrite`]). It
//!   protects the page metadata (dirty, in store), the unwritten extents and
//!   the count of store pages that are not cached. Taken before the inode's
//!   `meta`. Held exclusively it is a [`PagesMut`], which also closes the
//!   stripes' gate of a file that has them (no overwrite under a stripe
//!   runs meanwhile).
//! * `stripes` (a pointer, null until two lanes overwrote the file, or a
//!   writable open found it holding more than one page): the
//!   file's [`Stripes`] ([`lanes`]): once it has them, a pure overwrite
//!   inside one cached page ([`FileData::try_overwrite`]) takes its page's
//!   stripe instead of the data lock; it writes that page's bytes, the
//!   stripe's time and list of written pages, nothing of the file's own
//!   words but the gate it reads. A [`PagesMut`] closes the gate after the
//!   lock and waits out the overwrites in flight (so whatever the data
//!   lock protects is stable under it, as before) and folds the
//!   stripes' written pages into the page map's dirty flags. A lock-free
//!   reader validates each page it copies by its stripe's count as well as
//!   the whole copy by `seq`; a locked read of a file with stripes takes
//!   the lock exclusively (a shared holder does not stop overwrites under
//!   a stripe). Made in a change section, freed with the file.
//! * `seq` (sequence count): even when stable, odd while a change that a
//!   reader could observe is in progress. Advanced (by 2, in a [`Change`]
//!   section, only under the data lock held exclusively) by writes,
//!   truncate, punch, zero-range, fallocate's size change, page drops
//!   (`drop_clean`, `discard`) and changes of the data-side times
//!   (`set_times`). Writer: store odd (Relaxed),
//!   `fence(Release)`, the changes (Relaxed or Release), store even
//!   (Release). Reader: load (Acquire), its Relaxed loads, `fence(Acquire)`,
//!   load again (Relaxed); equal and even means no change overlapped the
//!   loads (the seqlock of Boehm, "Can seqlocks get along with programming
//!   language memory models?", 2012). Loading a page from the store does not
//!   advance it: that changes no byte a reader can see.
//! * `size` (Relaxed): the file size, changed only inside a change section.
//! * `all_cached`: every data page the store holds for this file is cached,
//!   so a page missing from the index reads as zeros (a hole or an
//!   unwritten extent). Set `true` with Release after the pages that made it
//!   true were published; read with Acquire before index lookups; set
//!   `false` only inside a change section (a page drop).
//! * `index`: the lock-free page index ([`index`]), changed only under the
//!   data lock held exclusively; page words ([`page`]) are atomics.
//! * `mtime_sec`, `dctime_sec`, `times_nsec` (Relaxed): the file's *data-side
//!   times* — its mtime, authoritative for a regular file (the record's
//!   `mtime` is a copy that may lag behind), and `dctime`, the ctime of its
//!   latest data change (the ctime shown is `max(rec.ctime, dctime)`);
//!   with the latest stripe time, if a stripe has one, as both (`lanes`:
//!   it is later than these, which storing clears it).
//!   Written like `size`: only inside a change section, under the data lock
//!   held exclusively; read lock-free validated by `seq` ([`FileData::times`])
//!   or under the data lock. Every path that sets a regular file's mtime
//!   sets them (writes, truncate, fallocate, punch, zero-range, utimens).
//!   A change reads the clock under the locks it holds when it sets the
//!   times (the data lock; `meta` as well for the record's ctime), as Linux
//!   reads it under the inode lock, so that stat's mtime and ctime never go
//!   back: a data change that takes `meta` after setting the data side
//!   reads it again if a change under `meta` alone set a later ctime
//!   meanwhile (`fs::data_change_time`).
//! * `PageMap::times_dirty` (under the data lock): a *pure overwrite* (see
//!   `file::write_data`) changed the data-side times without `meta`, so the
//!   record does not hold them yet (as does a stripe's time). Cleared,
//!   under the data lock then `meta`, once they are folded into the record
//!   and it is marked dirty (writeback, eviction, and every locked change
//!   of the times); a stripe's time is then stored as the data-side times.
//!   `PageMap::last_overwriter`: the lane of the last pure overwrite under
//!   the lock; the next one from another lane (in the lock-free read
//!   design) makes the stripes.
//! * `atime_stale` (Release store, Acquire swap): the data-side half of
//!   `Inode::atime_stale`: set (only when clear) by a pure overwrite under
//!   the data lock after its change section, cleared by a read's relatime
//!   check under `meta` before it reads the times. An overwrite under a
//!   stripe leaves it alone (two lanes' first overwrites would both write
//!   its line): its stripe's time says it, which a read's check compares
//!   with atime ([`FileData::atime_stale_since`]).
//! * `privs` (Relaxed): whether the file holds privileges a write must
//!   remove (setuid/setgid, a non-empty `security.capability`:
//!   `perm::has_privs` of its record). Stored under `meta` by a change of
//!   the mode, the owner or the xattrs that gives or takes them (one that
//!   does neither does not touch it); read by a write under the data
//!   lock without `meta`, which then goes down the locked path if set.
//!
//! Lock order: the data lock, then the stripes (ascending), then the
//! inode's `meta`. No `meta` is taken inside a change section (a reader
//! under `meta` may wait for one to end), and an overwrite under a stripe
//! takes nothing else.
//!
//! Allocation: a page is *allocated* (one block, counted in `rec.blocks`)
//! when it is a data page — cached or in the store — or inside an unwritten
//! extent ([`extents`]), or both. `fallocate` adds extents, punch and
//! truncate remove them with the pages, a write into an extent creates a
//! data page without allocating again, and zero-range turns whole data
//! pages into extent. Counting the allocated pages of a range costs
//! O(extents + cached pages in the range + a store range count per gap),
//! never O(range length), and no zero page is ever materialised for an
//! allocation. Extents reach the store at writeback
//! (`Store::write_unwritten`) and are loaded on first use.

mod extents;
mod index;
pub use index::collect_deferred;
pub(crate) use index::collect_now_and_then;
mod lanes;
mod page;
mod read;

use std::collections::BTreeMap;
use std::ops::Range;

use crossbeam_epoch::{self as epoch, Guard};
use lanefs_store::{Errno, Ino, Result, Store, Timespec, PAGE_SIZE};

use crate::sync::{
    fence, spin_hint, AtomicBool, AtomicPtr, AtomicU64, Ordering, RwLock, RwLockWriteGuard,
};
use extents::Extents;
use index::PageIndex;
use lanes::{stripe_of, Stripes};
use page::PageBuf;
pub(crate) use read::{page_cache, PageCache};

const PAGE: u64 = PAGE_SIZE as u64;

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
pub(crate) fn page_range(offset: u64, len: u64) -> Range<u64> {
    if len == 0 {
        return 0..0;
    }
    offset / PAGE..(offset + len - 1) / PAGE + 1
}

/// The one rule of the data-side times (module header): a regular file's
/// `(mtime, ctime)` from its record's ctime and its data side's `(mtime,
/// dctime)` — mtime from the data side, ctime the later of both. stat's
/// mirror, attributes under `meta` and writeback all fold by it.
pub(crate) fn fold_times(
    record_ctime: Timespec,
    data: (Timespec, Timespec),
) -> (Timespec, Timespec) {
    let (mtime, dctime) = data;
    (mtime, record_ctime.max(dctime))
}

/// Zero the bytes of page `idx` (`data`) at and past file offset `size`;
/// whether any of them was not zero.
fn zero_past_size(data: &mut [u8; PAGE_SIZE], idx: u64, size: u64) -> bool {
    let start = idx.saturating_mul(PAGE);
    let from = size.saturating_sub(start).min(PAGE) as usize;
    let tail = &mut data[from..];
    if tail.iter().all(|&b| b == 0) {
        return false;
    }
    tail.fill(0);
    true
}

/// Bytes readable at `offset` in a file of `size`, up to `want`.
fn readable(size: u64, offset: u64, want: usize) -> usize {
    if offset >= size {
        return 0;
    }
    (size - offset).min(want as u64) as usize
}

struct PageState {
    dirty: bool,
    /// The store holds a copy (possibly older, when dirty).
    in_store: bool,
}

/// What the data lock protects.
pub(crate) struct PageMap {
    /// Cached pages (each also in `FileData::index`).
    pages: BTreeMap<u64, PageState>,
    /// Unwritten extents; `None` until loaded from the store.
    unwritten: Option<Extents>,
    /// `unwritten` differs from the store's copy.
    unwritten_dirty: bool,
    /// Store data pages not cached; `None` until counted.
    uncached: Option<u64>,
    /// The data-side times are newer than the record's (module header).
    times_dirty: bool,
    /// The lane of the last pure overwrite that took the data lock, while
    /// the file has no stripes.
    last_overwriter: Option<usize>,
    /// Store pages past the size that `learn` removed (stale: see there)
    /// and the record still counts in its blocks.
    stale_freed: u64,
}

/// The data of one regular file (see the module header for the rules).
pub(crate) struct FileData {
    seq: AtomicU64,
    size: AtomicU64,
    all_cached: AtomicBool,
    mtime_sec: AtomicU64,
    dctime_sec: AtomicU64,
    /// mtime.nsec | dctime.nsec << 32.
    times_nsec: AtomicU64,
    atime_stale: AtomicBool,
    privs: AtomicBool,
    /// The file's [`Stripes`], null until two lanes overwrote it (module
    /// header); made in a change section, freed with the file.
    stripes: AtomicPtr<Stripes>,
    index: PageIndex,
    map: RwLock<PageMap>,
}

impl Drop for FileData {
    fn drop(&mut self) {
        let p = *self.stripes.get_mut();
        if !p.is_null() {
            // SAFETY: made by `Box::into_raw` in `make_stripes` and freed
            // only here; `&mut self`: nobody else can reach it.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

/// `(mtime, dctime)` of the stored data-side times `base` with the latest
/// stripe overwrite's time `latest` (`lanes` module header: a stripe time
/// is later than the stored times, and sets both).
fn with_latest(base: (Timespec, Timespec), latest: Option<Timespec>) -> (Timespec, Timespec) {
    match latest {
        Some(t) => (t, base.1.max(t)),
        None => base,
    }
}

/// An open change section: `seq` is odd until it drops.
struct Change<'a> {
    seq: &'a AtomicU64,
    start: u64,
}

impl Drop for Change<'_> {
    fn drop(&mut self) {
        debug_assert_eq!(self.seq.load(Ordering::Relaxed), self.start + 1);
        self.seq.store(self.start + 2, Ordering::Release);
    }
}

impl FileData {
    /// The data of a file of `size` bytes. `empty`: it has no allocated
    /// page (a new file, or a record with no blocks), so nothing needs to be
    /// learnt from the store.
    pub fn new(size: u64, empty: bool) -> FileData {
        FileData {
            seq: AtomicU64::new(0),
            size: AtomicU64::new(size),
            all_cached: AtomicBool::new(empty),
            mtime_sec: AtomicU64::new(0),
            dctime_sec: AtomicU64::new(0),
            times_nsec: AtomicU64::new(0),
            atime_stale: AtomicBool::new(false),
            privs: AtomicBool::new(false),
            stripes: AtomicPtr::new(std::ptr::null_mut()),
            index: PageIndex::new(),
            map: RwLock::new(PageMap {
                pages: BTreeMap::new(),
                unwritten: empty.then(Extents::default),
                unwritten_dirty: false,
                uncached: empty.then_some(0),
                times_dirty: false,
                last_overwriter: None,
                stale_freed: 0,
            }),
        }
    }

    /// As [`new`](Self::new), with the data-side times of a record (mtime,
    /// and its ctime as the latest data change's), whether its atime is
    /// stale, and whether it may hold privileges.
    pub fn with_attrs(
        size: u64,
        empty: bool,
        mtime: Timespec,
        ctime: Timespec,
        atime_stale: bool,
        privs: bool,
    ) -> FileData {
        let f = FileData::new(size, empty);
        f.store_times(mtime, ctime);
        f.atime_stale.store(atime_stale, Ordering::Relaxed);
        f.privs.store(privs, Ordering::Relaxed);
        f
    }

    /// Store the data-side times (in a change section, or before the
    /// file is shared).
    fn store_times(&self, mtime: Timespec, dctime: Timespec) {
        self.mtime_sec.store(mtime.sec as u64, Ordering::Relaxed);
        self.dctime_sec.store(dctime.sec as u64, Ordering::Relaxed);
        self.times_nsec.store(
            mtime.nsec as u64 | (dctime.nsec as u64) << 32,
            Ordering::Relaxed,
        );
    }

    /// The data-side times as stored (Relaxed loads: validate, or hold
    /// the data lock).
    fn load_times(&self) -> (Timespec, Timespec) {
        let m = self.mtime_sec.load(Ordering::Relaxed);
        let d = self.dctime_sec.load(Ordering::Relaxed);
        let n = self.times_nsec.load(Ordering::Relaxed);
        (
            Timespec {
                sec: m as i64,
                nsec: n as u32,
            },
            Timespec {
                sec: d as i64,
                nsec: (n >> 32) as u32,
            },
        )
    }

    /// The file's stripes, if it has them in use (not retired: `lanes`).
    fn stripes(&self) -> Option<&Stripes> {
        self.stripes_made().filter(|s| !s.retired())
    }

    /// The file's stripes, if it was ever given them, retired or not
    /// (Acquire: made complete before they were published).
    fn stripes_made(&self) -> Option<&Stripes> {
        // SAFETY: a non-null pointer came from `Box::into_raw` and is freed
        // only when `self` drops.
        unsafe { self.stripes.load(Ordering::Acquire).as_ref() }
    }

    /// `(mtime, dctime)` read lock-free, validated by `seq` (retried while a
    /// change section overlaps), with the latest stripe overwrite's time.
    /// Safe under `meta`: no change section takes it.
    pub fn times(&self) -> (Timespec, Timespec) {
        loop {
            let s = self.seq.load(Ordering::Acquire);
            if s.is_multiple_of(2) {
                let latest = self.stripes().and_then(Stripes::latest);
                let t = with_latest(self.load_times(), latest);
                fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == s {
                    return t;
                }
            }
            spin_hint();
        }
    }

    /// Whether a pure overwrite moved the times past atime since the last
    /// [`take_atime_stale`](Self::take_atime_stale).
    pub fn atime_stale(&self) -> bool {
        self.atime_stale.load(Ordering::Relaxed)
    }

    /// Whether a pure overwrite may have moved the times past `atime`
    /// (relatime's test, `mtime >= atime`): the flag a locked one sets, or
    /// the latest time an overwrite under a stripe left, which sets no
    /// flag. Reads the stripes (one line each) only of a file that has
    /// them. Lock-free; a stale answer only delays an atime update, as a
    /// stale flag does.
    pub fn atime_stale_since(&self, atime: impl FnOnce() -> Timespec) -> bool {
        self.atime_stale()
            || self
                .stripes()
                .and_then(Stripes::latest)
                .is_some_and(|t| t >= atime())
    }

    /// A pure overwrite moved the times past atime: set the hint, storing
    /// only when it is clear (Release, after the overwrite's change; see
    /// [`take_atime_stale`](Self::take_atime_stale)).
    fn mark_atime_stale(&self) {
        if !self.atime_stale.load(Ordering::Relaxed) {
            self.atime_stale.store(true, Ordering::Release);
        }
    }

    /// Clear the data-side atime-stale flag (under `meta`, before reading
    /// the times: an overwrite whose times the caller may miss sets it
    /// again after, and one whose flag this clears is seen, by the Acquire
    /// pairing with its Release store).
    pub fn take_atime_stale(&self) {
        if self.atime_stale.load(Ordering::Relaxed) {
            self.atime_stale.swap(false, Ordering::Acquire);
        }
    }

    /// The privilege hint (module header).
    pub fn may_have_privs(&self) -> bool {
        self.privs.load(Ordering::Relaxed)
    }

    /// Record whether the file holds privileges now (under `meta`, when a
    /// change of its mode, owner or xattrs gave or took them).
    pub fn set_privs(&self, privs: bool) {
        self.privs.store(privs, Ordering::Relaxed);
    }

    /// The data lock, exclusively (and the stripes' gate closed).
    pub fn write(&self) -> PagesMut<'_> {
        PagesMut::new(self, self.map.write())
    }

    /// Give the file its stripes now, before any overwrite, if it has none
    /// and holds more than one page: a writable open of a file that
    /// already has data (`file::open_inode`; not `O_APPEND`, not
    /// `O_TRUNC`) expects overwrites in place, and with stripes made up
    /// front the first overwrites from two lanes take only their pages'
    /// stripes instead of meeting on the data lock (docs/AUDIT.md,
    /// "first overwrites"). A file of one page has one stripe's worth of
    /// pages: nothing to spread. Takes the data lock exclusively once per
    /// file (while cached); costs [`STRIPES`](lanes::STRIPES) cache lines.
    pub fn stripe_for_overwrites(&self) {
        if self.stripes().is_some() || self.size.load(Ordering::Relaxed) <= PAGE {
            return;
        }
        let mut pm = self.write();
        if pm.held.is_none() && pm.size() > PAGE {
            pm.make_stripes();
        }
    }

    /// Whether the file has stripes (tests).
    #[cfg(test)]
    pub fn has_stripes(&self) -> bool {
        self.stripes().is_some()
    }

    pub fn try_write(&self) -> Option<PagesMut<'_>> {
        Some(PagesMut::new(self, self.map.try_write()?))
    }

    /// A pure overwrite (`file::write_data`'s conditions, checked by the
    /// caller: not `O_APPEND`, no privilege to remove) of `data` at
    /// `offset`, without the data lock: only if the file has stripes and
    /// the write stays inside one page that is cached and inside the size.
    /// Whether it was done; if not, nothing changed. Its time goes to the
    /// stripe, the page to the stripe's list of written pages (`lanes`
    /// module header).
    ///
    /// A closed gate means the data lock's exclusive holder (a locked
    /// write, writeback, a page drop) is changing the file: the overwrite
    /// gives its stripe back and waits for it on the data lock, *shared*,
    /// then tries again — never by going down the locked path itself. A
    /// locked pure overwrite excludes every stripe's overwrites, and with
    /// many lanes such holders, one after another, kept every other lane
    /// out, so each of those went down the locked path too: a convoy that
    /// never broke up (DWOM fell from 29M ops/s at 4 threads to 10M at 8
    /// on 16 cores, when holders took every stripe). Shared, the lock lets
    /// no new exclusive holder in, and a stripe is then held only by an
    /// overwrite, which waits for nothing.
    pub fn try_overwrite(&self, offset: u64, data: &[u8]) -> bool {
        /// Tries for a stripe another overwrite holds before waiting on
        /// the data lock.
        const TRIES: usize = 64;
        let Some(stripes) = self.stripes() else {
            return false;
        };
        let (idx, in_page) = (offset / PAGE, (offset % PAGE) as usize);
        if data.is_empty() || in_page + data.len() > PAGE_SIZE {
            return false;
        }
        let s = stripe_of(idx);
        let v = loop {
            let spun = (0..TRIES).find_map(|_| {
                let v = stripes.try_hold(s);
                if v.is_none() {
                    spin_hint();
                }
                v
            });
            let v = spun.unwrap_or_else(|| {
                let _shared = self.map.read();
                stripes.hold(s)
            });
            let gate = stripes.gate();
            if gate == lanes::OPEN {
                break v;
            }
            // A holder of the data lock is changing the file: give the
            // stripe back untouched and wait for it to finish; or the
            // stripes were retired: take the lock.
            stripes.release(s, v);
            if gate == lanes::RETIRED {
                return false;
            }
            drop(self.map.read());
        };
        // SAFETY: pages and index nodes are detached only by a holder of
        // the data lock with the gate closed (`PagesMut`), and this thread
        // holds stripe `s` with the gate open: none is detached while it
        // looks the page up and writes it (the holder waits for the
        // stripe), and what was detached before is no longer reachable
        // from the index it loads now. So no pin is needed (a pin's fence
        // was a sixth of an overwrite), and nothing here defers a free.
        let guard = unsafe { epoch::unprotected() };
        // Size and index change only with the gate closed: stable now.
        let size = self.size.load(Ordering::Relaxed);
        let inside = offset
            .checked_add(data.len() as u64)
            .is_some_and(|end| end <= size);
        let page = self.index.get(idx, guard).filter(|_| inside);
        let (Some(page), Some(now)) = (page, lanes::pack(Timespec::now())) else {
            stripes.release(s, v);
            return false;
        };
        page.write(in_page, data);
        stripes.note_write(s, idx, now);
        stripes.release(s, v);
        // No `mark_atime_stale`: the stripe's time says it (`atime_stale_
        // since`), and the file's flag is a line every other stripe's
        // first overwrite would write too.
        true
    }

    /// Copy `buf[from..n]` (file bytes `offset + from ..`) from cached
    /// pages; a missing page reads as zeros when `all_cached`. Returns how
    /// far it got (`n` when complete), or `None` when a page's stripe
    /// (`stripes`) shows an overwrite overlapped its copy. Lock-free; the
    /// caller validates the whole copy by `seq`.
    #[allow(clippy::too_many_arguments)]
    fn copy_cached(
        &self,
        offset: u64,
        buf: &mut [u8],
        from: usize,
        n: usize,
        all_cached: bool,
        stripes: Option<&Stripes>,
        guard: &Guard,
    ) -> Option<usize> {
        for (idx, in_page, done, chunk) in chunks(offset + from as u64, n - from) {
            let out = &mut buf[from + done..from + done + chunk];
            let held = match stripes {
                Some(st) => {
                    let s = stripe_of(idx);
                    Some((st, s, st.read_begin(s)?))
                }
                None => None,
            };
            match self.index.get(idx, guard) {
                Some(p) => p.read(in_page, out),
                None if all_cached => out.fill(0),
                None => return Some(from + done),
            }
            if let Some((st, s, v)) = held {
                if !st.read_valid(s, v) {
                    return None;
                }
            }
        }
        Some(n)
    }
}

/// The data lock held exclusively, and the stripes' gate closed if the
/// file has them: every change to a file's data.
pub(crate) struct PagesMut<'a> {
    f: &'a FileData,
    /// The file's stripes, their gate closed by this holder.
    held: Option<&'a Stripes>,
    map: RwLockWriteGuard<'a, PageMap>,
}

impl Drop for PagesMut<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.held {
            // One page or none left, and nothing of the stripes' to fold:
            // retire them (`lanes`), so that appends after an `O_RDWR`
            // open and `ftruncate(0)` do not wait out the gate.
            let retire = self.size() <= PAGE && s.latest().is_none();
            s.open(retire);
        }
    }
}

impl<'a> PagesMut<'a> {
    /// A guard for index lookups and inserts by this holder. No pin is
    /// needed under the data lock held exclusively: only its holder
    /// detaches pages or nodes, and a lookup or an insert defers no free.
    /// Never for a removal: an unprotected guard runs deferred frees at
    /// once, under a lock-free reader's feet. References it yields must
    /// not outlive `self`.
    fn lookup_guard(&self) -> &'static Guard {
        // SAFETY: as above: while `self` holds the data lock exclusively
        // (and the stripes' gate) nothing reachable from the index is freed by
        // anyone else, and callers only look up and insert.
        unsafe { epoch::unprotected() }
    }

    /// Close the stripes' gate after the data lock (waiting out the
    /// overwrites in flight), and fold into the page map the pages that
    /// overwrites under them made dirty.
    fn new(f: &'a FileData, map: RwLockWriteGuard<'a, PageMap>) -> PagesMut<'a> {
        let mut pm = PagesMut { f, held: None, map };
        if let Some(s) = f.stripes() {
            s.close();
            pm.held = Some(s);
            let pages = &mut pm.map.pages;
            s.take_written(|written| match written {
                Ok(idx) => match pages.get_mut(&idx) {
                    Some(p) => p.dirty = true,
                    None => debug_assert!(false, "overwritten page {idx} left the cache"),
                },
                Err(stripe) => {
                    for (_, p) in pages.iter_mut().filter(|(i, _)| stripe_of(**i) == stripe) {
                        p.dirty = true;
                    }
                }
            });
        }
        pm
    }

    /// Give the file stripes (their gate closed until this guard drops), inside a
    /// change section: a lock-free reader that began before them sees the
    /// sequence count move, one that begins after finds them.
    fn make_stripes(&mut self) {
        if let Some(retired) = self.f.stripes_made() {
            let _section = self.change();
            retired.unretire();
            self.held = Some(retired);
            return;
        }
        let stripes = Box::into_raw(Stripes::new_closed());
        let _section = self.change();
        self.f.stripes.store(stripes, Ordering::Release);
        // SAFETY: just made; freed only when the file data drops, which
        // outlives this borrow of it.
        self.held = Some(unsafe { &*stripes });
    }

    pub fn size(&self) -> u64 {
        self.f.size.load(Ordering::Relaxed)
    }

    pub fn cached_pages(&self) -> usize {
        self.map.pages.len()
    }

    fn change(&self) -> Change<'a> {
        let f: &'a FileData = self.f;
        let seq = &f.seq;
        let start = seq.load(Ordering::Relaxed);
        debug_assert!(start.is_multiple_of(2), "change sections nest");
        seq.store(start + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        Change { seq, start }
    }

    fn set_size(&self, _section: &Change<'_>, size: u64) {
        self.f.size.store(size, Ordering::Relaxed);
    }

    /// The data-side times `(mtime, dctime)`, the stripes' overwrites
    /// included.
    pub fn times(&self) -> (Timespec, Timespec) {
        with_latest(self.f.load_times(), self.held.and_then(Stripes::latest))
    }

    /// Store the data-side times (in a change section): they replace the
    /// stripes' overwrite times.
    fn store_times(&self, _section: &Change<'_>, mtime: Timespec, dctime: Timespec) {
        self.f.store_times(mtime, dctime);
        if let Some(s) = self.held {
            s.clear_times();
        }
    }

    /// Set the data-side times (in a change section of their own). The
    /// caller sets the record's to match under `meta`, or marks them
    /// dirty.
    pub fn set_times(&self, mtime: Timespec, dctime: Timespec) {
        let section = self.change();
        self.store_times(&section, mtime, dctime);
    }

    /// Whether the record lags behind the data-side times (a pure
    /// overwrite's, locked or under a stripe).
    pub fn times_dirty(&self) -> bool {
        self.map.times_dirty || self.held.and_then(Stripes::latest).is_some()
    }

    /// A pure overwrite changed the times without `meta`: the record lags
    /// behind, and atime may be stale. Stores only what changes.
    /// `lane`: the overwriter's lane, when the file may take overwrites
    /// under stripes (the lock-free read design): the second lane to
    /// overwrite it gives it stripes.
    pub fn note_pure_overwrite(&mut self, lane: Option<usize>) {
        if !self.map.times_dirty {
            self.map.times_dirty = true;
        }
        self.f.mark_atime_stale();
        if let Some(lane) = lane.filter(|_| self.held.is_none()) {
            match self.map.last_overwriter {
                Some(last) if last != lane => self.make_stripes(),
                Some(_) => {}
                None => self.map.last_overwriter = Some(lane),
            }
        }
    }

    /// The record holds the data-side times now (folded, or set by the
    /// caller under `meta`, and marked dirty). The stripes' overwrite
    /// times, folded into the record with the rest, are stored as the
    /// data-side times.
    pub fn clear_times_dirty(&mut self) {
        if self.map.times_dirty {
            self.map.times_dirty = false;
        }
        if self.held.and_then(Stripes::latest).is_some() {
            let (mtime, dctime) = self.times();
            self.set_times(mtime, dctime);
        }
    }

    fn publish_all_cached(&self) {
        let all = self.map.uncached == Some(0);
        if all != self.f.all_cached.load(Ordering::Relaxed) {
            debug_assert!(all, "all_cached cleared outside a change section");
            self.f.all_cached.store(true, Ordering::Release);
        }
    }

    /// Load the unwritten extents and count uncached store pages, once.
    /// First, on a store that outlives the process, remove the data pages
    /// it holds wholly past the size: only a crash leaves such pages (the
    /// batch that mapped them durable, the one with the size lost), and a
    /// file grown over them (truncate, fallocate, a write beyond them)
    /// would show their bytes where it must read zeros. The record counts
    /// them in its blocks until [`take_stale_freed`](Self::take_stale_freed).
    fn learn(&mut self, store: &dyn Store, ino: Ino) -> Result<()> {
        if self.map.unwritten.is_none() {
            let ranges = store.read_unwritten(ino)?;
            self.map.unwritten = Some(Extents::from_ranges(&ranges));
        }
        if self.map.uncached.is_none() {
            let mut stored = store.page_count(ino)?;
            let past = self.size().div_ceil(PAGE);
            if !store.volatile() && stored > 0 && store.has_pages_from(ino, past)? {
                debug_assert!(self.map.pages.range(past..).next().is_none());
                // A punch also takes its range out of the store's unwritten
                // extents, but those past the size are no crash's leftover:
                // `fallocate(KEEP_SIZE)` allocates there, and the record
                // counts them. Put them back, and take off the record only
                // what the store lost (the stale pages outside them).
                // Until 2026-11 the punch's count alone was taken off: the
                // record kept counting the extents' pages the store no
                // longer had, and the preallocation was gone.
                let kept = store.read_unwritten(ino)?;
                let before = store.allocated_pages(ino)?;
                let stale = store.punch_pages(ino, past, u64::MAX)?;
                if kept.iter().any(|r| r.end > past) {
                    store.write_unwritten(ino, &kept)?;
                }
                let after = store.allocated_pages(ino)?;
                self.map.stale_freed += before.saturating_sub(after);
                stored -= stale;
            }
            let cached = self.map.pages.values().filter(|p| p.in_store).count() as u64;
            debug_assert!(stored >= cached, "cached store pages missing in store");
            self.map.uncached = Some(stored - cached);
            self.publish_all_cached();
        }
        Ok(())
    }

    /// Stale store pages [`learn`](Self::learn) removed since the last
    /// call: the caller takes them off the record's blocks (under `meta`)
    /// and gives them back to the free count. Left untaken, the record
    /// keeps counting them until the file is freed (which gives back what
    /// the record counts) — never given back twice.
    pub fn take_stale_freed(&mut self) -> u64 {
        std::mem::take(&mut self.map.stale_freed)
    }

    fn unwritten(&mut self) -> &mut Extents {
        self.map
            .unwritten
            .as_mut()
            .expect("extents used before learn()")
    }

    /// Bring page `idx` into the cache if the store has it.
    fn load<'g>(
        &mut self,
        store: &dyn Store,
        ino: Ino,
        idx: u64,
        guard: &'g Guard,
    ) -> Result<Option<&'g PageBuf>> {
        debug_assert!(!self.map.pages.contains_key(&idx));
        if self.map.uncached == Some(0) {
            // Every store page is cached: an uncached page is a hole (an
            // append, a write past the end) and the store has nothing.
            return Ok(None);
        }
        let mut data = Box::new([0u8; PAGE_SIZE]);
        if !store.read_page(ino, idx, &mut data)? {
            return Ok(None);
        }
        // Bytes at and past the size are not the file's: they read as
        // zeros once it grows. A store page may hold others there after a
        // power cut (a truncate's size reached the media, its zeroed tail
        // page did not): zeroed here, and the page made dirty so that the
        // store's copy is fixed too (a clean page is evicted and read
        // again, possibly after the file grew).
        let stale = zero_past_size(&mut data, idx, self.size());
        let page = self.f.index.insert(idx, PageBuf::from_bytes(&data), guard);
        self.map.pages.insert(
            idx,
            PageState {
                dirty: stale,
                in_store: true,
            },
        );
        if let Some(u) = self.map.uncached.as_mut() {
            debug_assert!(*u > 0, "loaded a store page counted as cached");
            *u -= 1;
        }
        self.publish_all_cached();
        Ok(Some(page))
    }

    /// Cache the page holding the end of the file (if the size is not a
    /// page multiple and the store has it) before the size grows past it:
    /// loading zeroes what lies past the size ([`load`](Self::load)),
    /// which a load after the growth would read as file data.
    pub fn load_eof_page(&mut self, store: &dyn Store, ino: Ino) -> Result<()> {
        let size = self.size();
        let idx = size / PAGE;
        if size.is_multiple_of(PAGE) || self.map.pages.contains_key(&idx) {
            return Ok(());
        }
        let guard = epoch::pin();
        self.load(store, ino, idx, &guard)?;
        Ok(())
    }

    /// The cached page `idx`, loading it from the store.
    fn get_or_load<'g>(
        &mut self,
        store: &dyn Store,
        ino: Ino,
        idx: u64,
        guard: &'g Guard,
    ) -> Result<Option<&'g PageBuf>> {
        match self.f.index.get(idx, guard) {
            Some(p) => Ok(Some(p)),
            None => self.load(store, ino, idx, guard),
        }
    }

    /// Read under the data lock (held exclusively), loading missing pages:
    /// fill `buf[from..n]`. Returns `(result, pages loaded)`.
    fn read_fill(
        &mut self,
        store: &dyn Store,
        ino: Ino,
        offset: u64,
        buf: &mut [u8],
        from: usize,
        n: usize,
    ) -> (Result<usize>, usize) {
        let guard = epoch::pin();
        let before = self.map.pages.len();
        let mut fill = || -> Result<usize> {
            for (idx, in_page, done, chunk) in chunks(offset + from as u64, n - from) {
                let out = &mut buf[from + done..from + done + chunk];
                match self.get_or_load(store, ino, idx, &guard)? {
                    Some(p) => p.read(in_page, out),
                    None => out.fill(0),
                }
            }
            self.learn(store, ino)?;
            Ok(n)
        };
        let r = fill();
        (r, self.map.pages.len() - before)
    }

    /// Allocated pages in `range` (see the module header for the cost).
    fn allocated(&mut self, store: &dyn Store, ino: Ino, range: &Range<u64>) -> Result<u64> {
        self.learn(store, ino)?;
        let map = &*self.map;
        let ext = map.unwritten.as_ref().expect("learnt");
        let mut n = ext.covered(range);
        let all_cached = map.uncached == Some(0);
        for gap in ext.gaps(range) {
            let cached = map.pages.range(gap.clone());
            if all_cached {
                n += cached.count() as u64;
            } else {
                n += cached.filter(|(_, p)| !p.in_store).count() as u64;
                n += store.count_pages(ino, gap.start, gap.end)?;
            }
        }
        Ok(n)
    }

    /// Unallocated pages in `range`: what allocating it must reserve.
    /// `ENOSPC` without counting exactly when even the fewest holes the
    /// range can have exceed `free`: then no store is asked to count more
    /// than about `free` + its pages, whatever the range's length.
    pub fn holes(
        &mut self,
        store: &dyn Store,
        ino: Ino,
        range: Range<u64>,
        free: u64,
    ) -> Result<u64> {
        self.learn(store, ino)?;
        let len = range.end - range.start;
        let map = &*self.map;
        let ext = map.unwritten.as_ref().expect("learnt");
        let gaps = ext.gaps(&range);
        let gaps_len: u64 = gaps.iter().map(|g| g.end - g.start).sum();
        let cached: u64 = gaps
            .iter()
            .map(|g| map.pages.range(g.clone()).count() as u64)
            .sum();
        let stored = store.page_count(ino)?;
        let most_allocated = (len - gaps_len) + (cached + stored).min(gaps_len);
        if len - most_allocated > free {
            return Err(Errno::ENOSPC);
        }
        let allocated = self.allocated(store, ino, &range)?;
        debug_assert!(allocated <= len);
        Ok(len - allocated)
    }

    /// Cache every data page of `range` (a write's pages) and count its
    /// holes: the pages the write must reserve. Changes no data. Costs
    /// O(pages in the range).
    pub fn prepare(&mut self, store: &dyn Store, ino: Ino, range: Range<u64>) -> Result<u64> {
        self.learn(store, ino)?;
        if range.start > self.size() / PAGE {
            // A write past the end leaves a gap: the old last page's tail
            // becomes file data (zeros).
            self.load_eof_page(store, ino)?;
        }
        let guard = self.lookup_guard();
        let mut holes = 0;
        for idx in range {
            if self.map.pages.contains_key(&idx) || self.load(store, ino, idx, guard)?.is_some() {
                continue;
            }
            if !self.unwritten().contains(idx) {
                holes += 1;
            }
        }
        Ok(holes)
    }

    /// Write `data` at `offset`, grow the size to cover it, and set the
    /// data-side mtime and dctime to `now` in the same change section.
    /// Every page in range must have been [`prepare`](Self::prepare)d and
    /// its holes reserved.
    pub fn write(&mut self, offset: u64, data: &[u8], now: Timespec) {
        let guard = self.lookup_guard();
        let section = self.change();
        self.store_times(&section, now, now);
        for (idx, in_page, done, chunk) in chunks(offset, data.len()) {
            let bytes = &data[done..done + chunk];
            if let Some(page) = self.f.index.get(idx, guard) {
                page.write(in_page, bytes);
                // Stored only when it changes: the map's node is shared by
                // the pages of neighbouring writers (overwrites of one
                // file's blocks by many threads).
                if let Some(p) = self.map.pages.get_mut(&idx).filter(|p| !p.dirty) {
                    p.dirty = true;
                }
                continue;
            }
            // A new page (allocated or reserved by the caller) is filled
            // before it is published: dirty, not in the store.
            self.map.pages.insert(
                idx,
                PageState {
                    dirty: true,
                    in_store: false,
                },
            );
            self.f
                .index
                .insert(idx, PageBuf::with(in_page, bytes), guard);
        }
        let end = offset + data.len() as u64;
        if end > self.size() {
            self.set_size(&section, end);
        }
    }

    /// Allocate `range` (pages) as unwritten extent — its holes must have
    /// been reserved — and grow the size to `new_size` if given.
    pub fn allocate(&mut self, range: Range<u64>, new_size: Option<u64>) {
        self.unwritten().insert(range);
        self.map.unwritten_dirty = true;
        if let Some(size) = new_size.filter(|s| *s > self.size()) {
            let section = self.change();
            self.set_size(&section, size);
        }
    }

    /// Take pages `range` out of the cache: `(removed, of which in store)`.
    fn uncache(&mut self, range: Range<u64>, guard: &Guard) -> (u64, u64) {
        let doomed: Vec<(u64, bool)> = self
            .map
            .pages
            .range(range)
            .map(|(k, p)| (*k, p.in_store))
            .collect();
        let mut in_store = 0;
        for (idx, stored) in &doomed {
            self.map.pages.remove(idx);
            let was = self.f.index.remove(*idx, guard);
            debug_assert!(was, "page {idx} in the map but not the index");
            in_store += u64::from(*stored);
        }
        if self.map.pages.is_empty() {
            self.f.index.clear(guard, 0);
        }
        (doomed.len() as u64, in_store)
    }

    /// Remove every data page of `range` from cache and store (inside a
    /// change section). Returns the store pages removed.
    fn remove_data(
        &mut self,
        store: &dyn Store,
        ino: Ino,
        range: Range<u64>,
        guard: &Guard,
    ) -> Result<u64> {
        if range.is_empty() {
            return Ok(0);
        }
        let (_, cached_in_store) = self.uncache(range.clone(), guard);
        self.punch_store(store, ino, &range, cached_in_store)
    }

    /// Punch `range` in the store after its cached pages (`cached_in_store`
    /// of them in the store) left the cache; returns the store pages gone.
    fn punch_store(
        &mut self,
        store: &dyn Store,
        ino: Ino,
        range: &Range<u64>,
        cached_in_store: u64,
    ) -> Result<u64> {
        let stored = store.punch_pages(ino, range.start, range.end)?;
        debug_assert!(stored >= cached_in_store, "cached store page not in store");
        if let Some(u) = self.map.uncached.as_mut() {
            debug_assert!(*u >= stored - cached_in_store);
            *u -= stored - cached_in_store;
        }
        self.publish_all_cached();
        Ok(stored)
    }

    /// Free every allocated page of `range` (data and extent); returns how
    /// many. Inside a change section.
    fn free_range(
        &mut self,
        store: &dyn Store,
        ino: Ino,
        range: Range<u64>,
        guard: &Guard,
    ) -> Result<u64> {
        if range.is_empty() {
            return Ok(0);
        }
        // Freed = data pages removed (counted by the removal itself, so no
        // count over the whole range: a truncate's range ends at u64::MAX)
        // + extent pages that held no data page.
        let all_cached = self.map.uncached == Some(0);
        let ext = self.map.unwritten.as_ref().expect("learnt");
        let mut in_extents = 0;
        let mut data_in_extents = 0;
        for piece in ext.overlaps(&range) {
            in_extents += piece.end - piece.start;
            let cached = self.map.pages.range(piece.clone());
            if all_cached {
                data_in_extents += cached.count() as u64;
            } else {
                data_in_extents += cached.filter(|(_, p)| !p.in_store).count() as u64;
                data_in_extents += store.count_pages(ino, piece.start, piece.end)?;
            }
        }
        debug_assert!(data_in_extents <= in_extents);
        let (removed, removed_in_store) = self.uncache(range.clone(), guard);
        let stored = self.punch_store(store, ino, &range, removed_in_store)?;
        if in_extents > 0 {
            self.unwritten().remove(range);
            self.map.unwritten_dirty = true;
        }
        Ok(removed - removed_in_store + stored + in_extents - data_in_extents)
    }

    /// Zero bytes `[offset, end)` of the data page holding them (all in one
    /// page), loading it; a hole or extent page already reads as zeros.
    fn zero_in_page(
        &mut self,
        store: &dyn Store,
        ino: Ino,
        offset: u64,
        end: u64,
        guard: &Guard,
    ) -> Result<()> {
        let idx = offset / PAGE;
        debug_assert!(end > offset && end <= (idx + 1) * PAGE);
        if let Some(p) = self.get_or_load(store, ino, idx, guard)? {
            p.zero((offset % PAGE) as usize, (end - offset) as usize);
            if let Some(s) = self.map.pages.get_mut(&idx) {
                s.dirty = true;
            }
        }
        Ok(())
    }

    /// Zero the partial pages at the edges of `[offset, end)`; returns the
    /// whole pages between.
    fn zero_edges(
        &mut self,
        store: &dyn Store,
        ino: Ino,
        offset: u64,
        end: u64,
        guard: &Guard,
    ) -> Result<Range<u64>> {
        let whole = offset.div_ceil(PAGE)..end / PAGE;
        if whole.is_empty() {
            // Within one page, or across one page boundary.
            let mut at = offset;
            while at < end {
                let stop = end.min((at / PAGE + 1) * PAGE);
                self.zero_in_page(store, ino, at, stop, guard)?;
                at = stop;
            }
            return Ok(whole.start..whole.start);
        }
        if !offset.is_multiple_of(PAGE) {
            self.zero_in_page(store, ino, offset, whole.start * PAGE, guard)?;
        }
        if !end.is_multiple_of(PAGE) {
            self.zero_in_page(store, ino, whole.end * PAGE, end, guard)?;
        }
        Ok(whole)
    }

    /// Punch `[offset, offset + len)`: zero partial pages at the edges and
    /// free the whole pages between. Returns the pages freed.
    pub fn punch(&mut self, store: &dyn Store, ino: Ino, offset: u64, len: u64) -> Result<u64> {
        self.learn(store, ino)?;
        let guard = epoch::pin();
        let end = offset
            .checked_add(len)
            .expect("range checked by the caller");
        let _section = self.change();
        let whole = self.zero_edges(store, ino, offset, end, &guard)?;
        self.free_range(store, ino, whole, &guard)
    }

    /// Zero `[offset, offset + len)` and leave all of it allocated: partial
    /// edge pages are zeroed, whole data pages become unwritten extent, and
    /// the page range's holes (reserved by the caller, see
    /// [`holes`](Self::holes)) are allocated. Grows the size to `new_size`
    /// if given.
    pub fn zero_range(
        &mut self,
        store: &dyn Store,
        ino: Ino,
        offset: u64,
        len: u64,
        new_size: Option<u64>,
    ) -> Result<()> {
        self.learn(store, ino)?;
        let guard = epoch::pin();
        let end = offset
            .checked_add(len)
            .expect("range checked by the caller");
        let section = self.change();
        let whole = self.zero_edges(store, ino, offset, end, &guard)?;
        self.remove_data(store, ino, whole, &guard)?;
        self.unwritten().insert(page_range(offset, len));
        self.map.unwritten_dirty = true;
        if let Some(size) = new_size.filter(|s| *s > self.size()) {
            self.set_size(&section, size);
        }
        Ok(())
    }

    /// Set the size to `new_size` and the data-side times to `times`
    /// (`(mtime, dctime)`, in the same change section). Shrinking frees
    /// every allocated page past the new end (extents beyond the old size
    /// too) and zeroes the tail of the last page; a truncate to the current
    /// size frees the extents past the end (what `fallocate(KEEP_SIZE)`
    /// reserved there), as Linux's tmpfs (`shmem_setattr` truncates from
    /// the new size whenever it does not grow) and ext4 do — the usual way
    /// to give such a reservation back. Growing keeps them. `times: None`
    /// leaves the data-side times alone (a `truncate(2)` that changes
    /// nothing, `Fs::truncate`). Returns the pages freed; on an error the
    /// times are unchanged.
    pub fn truncate(
        &mut self,
        store: &dyn Store,
        ino: Ino,
        new_size: u64,
        times: Option<(Timespec, Timespec)>,
    ) -> Result<u64> {
        let guard = epoch::pin();
        let store_times = |pm: &Self, section: &Change<'_>| {
            if let Some((mtime, dctime)) = times {
                pm.store_times(section, mtime, dctime);
            }
        };
        if new_size > self.size() {
            self.learn(store, ino)?;
            self.load_eof_page(store, ino)?;
            let section = self.change();
            self.set_size(&section, new_size);
            store_times(self, &section);
            return Ok(0);
        }
        if new_size == self.size() {
            // No data page lies past the end (`learn` drops a stale one),
            // so only extents can; the tail of the last page reads zeros.
            self.learn(store, ino)?;
            let past = new_size.div_ceil(PAGE)..u64::MAX;
            let reserved = self
                .map
                .unwritten
                .as_ref()
                .is_some_and(|e| e.overlaps(&past).next().is_some());
            let section = self.change();
            let freed = if reserved {
                self.free_range(store, ino, past, &guard)?
            } else {
                0
            };
            store_times(self, &section);
            return Ok(freed);
        }
        self.learn(store, ino)?;
        let section = self.change();
        let freed = self.free_range(store, ino, new_size.div_ceil(PAGE)..u64::MAX, &guard)?;
        if !new_size.is_multiple_of(PAGE) {
            let page_end = (new_size / PAGE + 1) * PAGE;
            self.zero_in_page(store, ino, new_size, page_end, &guard)?;
        }
        self.set_size(&section, new_size);
        store_times(self, &section);
        Ok(freed)
    }

    /// Write dirty pages and changed extents to the store.
    pub fn flush(&mut self, store: &dyn Store, ino: Ino) -> Result<()> {
        let guard = epoch::pin();
        let mut bytes = Box::new([0u8; PAGE_SIZE]);
        let dirty: Vec<u64> = self
            .map
            .pages
            .iter()
            .filter(|(_, p)| p.dirty)
            .map(|(k, _)| *k)
            .collect();
        for idx in dirty {
            let page = self.f.index.get(idx, &guard).expect("mapped page indexed");
            page.to_bytes(&mut bytes);
            store.write_page(ino, idx, &bytes)?;
            if let Some(p) = self.map.pages.get_mut(&idx) {
                p.dirty = false;
                p.in_store = true;
            }
        }
        if self.map.unwritten_dirty {
            let ranges = self.map.unwritten.as_ref().map(Extents::to_ranges);
            match store.write_unwritten(ino, &ranges.unwrap_or_default()) {
                Err(Errno::EOPNOTSUPP) => self.materialise_unwritten(store, ino)?,
                other => other?,
            }
            self.map.unwritten_dirty = false;
        }
        Ok(())
    }

    /// For a store without extent records: write a zero page for every
    /// extent page that has no data page, then forget the extents. Costs
    /// O(extent pages) — what every `fallocate` cost before extents — and
    /// keeps the allocation exact on such a store.
    fn materialise_unwritten(&mut self, store: &dyn Store, ino: Ino) -> Result<()> {
        let ranges = self.map.unwritten.as_ref().map(Extents::to_ranges);
        let zeros = Box::new([0u8; PAGE_SIZE]);
        let mut scratch = Box::new([0u8; PAGE_SIZE]);
        for idx in ranges.unwrap_or_default().into_iter().flatten() {
            if self.map.pages.contains_key(&idx) || store.read_page(ino, idx, &mut scratch)? {
                continue;
            }
            store.write_page(ino, idx, &zeros)?;
            if let Some(u) = self.map.uncached.as_mut() {
                *u += 1;
            }
        }
        if self.map.uncached != Some(0) && self.f.all_cached.load(Ordering::Relaxed) {
            // New store pages that are not cached: readers must not take a
            // missing page for a hole any more (they read zeros either way,
            // but the flag must stay truthful).
            let _section = self.change();
            self.f.all_cached.store(false, Ordering::Relaxed);
        }
        self.map.unwritten = Some(Extents::default());
        Ok(())
    }

    /// Drop every clean page; returns how many. Call `flush` first to drop
    /// all.
    pub fn drop_clean(&mut self) -> usize {
        let clean: Vec<u64> = self
            .map
            .pages
            .iter()
            .filter(|(_, p)| !p.dirty)
            .map(|(k, _)| *k)
            .collect();
        if clean.is_empty() {
            return 0;
        }
        let guard = epoch::pin();
        let _section = self.change();
        for idx in &clean {
            let p = self.map.pages.remove(idx);
            debug_assert!(p.is_some_and(|p| p.in_store), "clean page not in store");
            self.f.index.remove(*idx, &guard);
        }
        if self.map.pages.is_empty() {
            self.f.index.clear(&guard, 0);
        }
        if let Some(u) = self.map.uncached.as_mut() {
            *u += clean.len() as u64;
        }
        self.f.all_cached.store(false, Ordering::Relaxed);
        self.publish_all_cached();
        clean.len()
    }

    /// Drop everything without writing back (the file is being freed).
    pub fn discard(&mut self) -> usize {
        let n = self.map.pages.len();
        let guard = epoch::pin();
        let _section = self.change();
        self.map.pages.clear();
        self.f.index.clear(&guard, n);
        self.map.unwritten = Some(Extents::default());
        self.map.unwritten_dirty = false;
        self.map.uncached = Some(0);
        self.publish_all_cached();
        n
    }

    /// Allocated pages that exist only in the cache.
    #[cfg(all(test, not(lanefs_shuttle)))]
    fn cache_only(&self) -> usize {
        self.map.pages.values().filter(|p| !p.in_store).count()
    }
}

#[cfg(all(test, not(lanefs_shuttle)))]
mod tests;

#[cfg(all(test, lanefs_shuttle))]
mod model;
