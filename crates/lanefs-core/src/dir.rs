//! Directory index: the in-memory map of one directory's entries, with
//! lock-free lookups and listing, and changes locked per *stripe*.
//!
//! A directory inode's `Body::Dir` holds a [`DirState`]: its load lock and
//! an epoch-protected pointer to the loaded [`DirIndex`] (null until
//! loaded; set back to null by a shrink or when the directory is freed).
//! Entries are written through to a store that persists, so dropping an
//! index loses nothing; a volatile store (the memory store) gives its
//! entries up when the index is loaded and gets them back, every stripe
//! held, before it is dropped (`DirLoad::take`'s `save`,
//! `FsInner::take_index`), so they live in one place at a time; a
//! directory being evicted gets no index loaded (`namei::load_index`:
//! `ESTALE`, or, when it is open, a wait until its evictor gives it back).
//!
//! Stripes (sv6's per-bucket directory): a name belongs to one of
//! [`STRIPES`] stripes, the root slot of the index's hash trie it hashes to
//! (`dir_hash`). Each stripe has, on a cache line of its own beside the
//! root slot's (a lookup reads the slot, not the lock), a lock, its entry count and its share of the directory's size, change
//! times and subdirectory links (`dir_attr`: a change of names writes no
//! directory-wide line, not even the directory's `meta`; a new
//! subdirectory takes `meta` only when its stripe's room of links runs
//! out, once per up to `fs::LINK_GRANT` of them). A change of names takes
//! the stripes of the names it changes, so creates, unlinks and renames of
//! different names in one directory take different locks and write
//! different lines (two names share a stripe with probability 1/16).
//!
//! Locks and atomics:
//! * `Stripe::lock` (mutex): the *directory entry lock* of the mount's lock
//!   order, per stripe: held by every change of the stripe's entries. A
//!   holder is the stripe's only writer of the trie below its root slot,
//!   of its `len` and of its `attr` (with its room of subdirectory
//!   links). Several stripes of one directory are taken
//!   in ascending index; "all stripes" (an rmdir victim, taking the index
//!   out, a directory's own mode or owner changing, a new subdirectory
//!   whose stripe found no room and the directory's `meta` no link left
//!   to grant, `fs::reserve_subdir_link`) is every one of them.
//!   Lookups and listings take none.
//! * `DirState::load` (mutex): held to install an index and to take one
//!   out (which first folds the stripes' attribute changes into the
//!   directory's record, `dir_attr`); taken before any stripe lock. A new
//!   index gets its stripes' first rooms of subdirectory links before it
//!   is installed (under `load`, then the directory's `meta`:
//!   `namei::load_index`). A writer that finds no index takes
//!   it to load one, then takes its stripes and re-checks that the index it
//!   locked is still installed (a take-out needs every stripe, so once the
//!   check passes the index stays until the writer unlocks).
//! * `DirState::index` (`AtomicPtr`): swapped only under `load` (and, to
//!   null, every stripe); stored Release, loaded Acquire by readers inside
//!   an epoch guard. An index taken out is freed through `defer` (after
//!   every guard that could have loaded it is gone; weighed by its entries
//!   towards the thread's next collection, `pcache::collect_now_and_then`,
//!   so a big one does not wait in the thread's bag); at the directory's own
//!   drop it is freed at once (nobody can reach a dropped inode).
//! * Entry validation (no directory-wide sequence): a lock-free reader
//!   that found an entry and then the inode it names checks that the same
//!   node still holds the name in the same installed index
//!   ([`DirState::still_holds`]); nodes are never relinked once unlinked
//!   and not reused under the reader's guard, and a node is a name's
//!   entry for one interval of time (renames included, `dir_hash`), so
//!   the entry held in between and the inode's number was not freed and
//!   reused. This is Linux's per-dentry `d_seq` rather than a
//!   per-directory count.
//! * A rename's switch ([`RenameSwitch`], a `dir_hash::Ticket`: one
//!   `AtomicBool`, stored once, Release): see "Renames" below. Read only
//!   by a lookup that matched a node of one of the rename's names; written
//!   only by the renamer, holding those names' stripes.
//! * Inside a [`DirIndex`]: a [`NameTable`] (`dir_hash`), a hash trie of
//!   immutable nodes with lock-free lookups and one writer per stripe. A
//!   chain that grows past a few nodes splits into a sub-level (copying
//!   only that chain), so no change ever copies the whole directory.
//! * The listing order, in [`STRIPES`] *partitions* (partition `p` holds
//!   the cookies `≡ p (mod STRIPES)`): each a lock-free skip list
//!   (crossbeam-skiplist, same epoch collector, safe for concurrent
//!   writers) from cookie to name (with the name's hash in the name
//!   table, written once with it). Partition `p`'s pointer
//!   (`Stripe::listed`, on stripe `p`'s line) is null until first used,
//!   set once by compare-and-swap, freed with the index. `Stripe::len` is
//!   written by the stripe's holder only (Relaxed); other stripes' values
//!   are snapshots. (It is a `u32`, so that the stripe's line also holds
//!   its subdirectory count and room, `dir_attr`: at most 2^32 - 1
//!   entries per stripe.)
//! * `Stripe::next_cookie` (atomic, on the stripe's line): the stripe's
//!   next cookie, read and advanced (a load and a store, Relaxed) only by
//!   the stripe's holder, by every insert of a new entry in the stripe;
//!   read exactly by a holder of every stripe (see below).
//!
//! Lock order: a directory's stripes are its "directory entry lock" in the
//! mount's order (`fs`): ancestors before descendants; two unrelated
//! directories only under the rename lock, by inode number; `load` before
//! the stripes; all of them before any `meta`.
//!
//! Renames: every rename — plain, `RENAME_NOREPLACE`, over an existing
//! name, `RENAME_EXCHANGE`, `RENAME_WHITEOUT`, within one directory or
//! across two — is atomic for lock-free lookups (`get`, `get_entry`, the
//! RCU-walk, `FsInner::lookup_child`, opens by name): there is one instant
//! (its switch's commit) before which every lookup of its names answers
//! the old entries and after which every lookup answers the new ones. So a
//! thread that found the moved inode under the new name then finds
//! nothing under the old one; one that found the old name gone then finds
//! the inode under the new one; an existing target name answers the old
//! inode or the new one and is never missing; an exchange is never seen
//! half done; and a moved directory's `..` (under its `meta`, which the
//! renamer holds across the commit, `rename`) switches with the entries.
//! How: the renamer holds the names' stripes (as before), commits the
//! store transaction, stages each name against one [`RenameSwitch`]
//! ([`DirWrite::stage_put`], [`DirWrite::stage_remove`]: new nodes
//! invisible, old ones tagged), commits it (one store), and finishes
//! each name ([`DirWrite::finish`]) before it lets the stripes go
//! (`dir_hash`, "Renames", has the table's side and the argument). Nothing
//! is shared with lookups of other names: no directory-wide or global
//! sequence, and the switch is its own allocation, reached only through
//! the tagged nodes of the rename's names. Cost: a lookup reads one more
//! word, the matched node's tag (beside its name and slot), and the
//! switch's word only while the node is tagged; a rename allocates the
//! switch (freed through the epoch), stores its word once, and stores
//! each name's node once more (the old name's tag, then its unlink; the
//! new node's tag cleared) — and its listing cookies change as before (a
//! new cookie is listed at staging, a replaced one unlisted at the finish;
//! a listing checks every cookie against the name's entry as lookups see
//! it).
//!
//! A listing is weaker, as Linux's across `getdents` calls: it checks its
//! names one at a time, so a name renamed while it runs may be listed
//! under both names or neither (each entry it lists was the name's entry
//! when it was checked; names present throughout are listed once).
//!
//! Readdir cookies: every entry gets a cookie from its stripe's range when
//! it is inserted — stripe `s` hands out cookies `≡ s (mod STRIPES)`,
//! increasing, from a counter of its own, so two creates of names in
//! different stripes share no counter — and keeps it until removed (an
//! exchange keeps both cookies); cookies are persisted with the entry. At
//! load every stripe's counter starts at the least cookie of its range
//! that is at or above the directory's `next_cookie` and above every
//! loaded cookie (`first_cookie_of_stripe`); the `next_cookie` folded back
//! into the record (`fold_with_next_cookie`) is one more than the largest
//! cookie any stripe handed out since, or the load's bound if larger
//! (`DirIndex::next_cookie`), so it bounds every stripe's cookies and a
//! new cookie never repeats one handed out before, even one of an entry
//! removed since (the shuttle model `model_dir_stripes_writers_vs_take`
//! fails if a reload ignores it), while an index reloaded without changes
//! folds back the bound it was loaded with.
//!
//! Per-stripe cookies were tried once with the striped table and given
//! up: with the kernel's listing cache on, the stress test of concurrent
//! processes saw stale listings more often. Those came from a hole in the
//! kernel's own check, a cache filled across a change, which the FUSE
//! daemon now closes whatever the cookie order (`lanefs-fuse`'s
//! `dircache`, whose argument uses only the order of replies and changes;
//! test `listing_never_shows_a_name_removed_before_it_began`). With
//! per-stripe cookies the engine's tests, the differential tests and the
//! mount tests pass, also with `LANEFS_TEST_WRITEBACK=1`, and the
//! concurrent stress test and the listing-cache tests passed 100 runs in
//! a row (40 with the writeback cache).
//!
//! Listing order: partition by partition, each in cookie order — cookie
//! `c` comes after `d` if `c mod STRIPES` is larger, or equal and `c > d`.
//! A listing from an offset resumes in the offset's partition after it,
//! then walks the partitions above, and returns an entry only if the name
//! still maps to that cookie. An entry present for the whole listing is in
//! both maps throughout, so it is returned exactly once, whatever is
//! inserted or removed meanwhile and across evictions of the index; an
//! entry added or removed during the listing is returned at most once per
//! cookie it had. Cookies 0, 1 and 2 are the start, `.` and `..`, before
//! every partition. The offsets a listing returns are not the cookies,
//! which do not increase from one partition to the next, but positions
//! made of the partition and the cookie's index in its stripe
//! (`position_of`), which increase in listing order, so that an offset
//! between two returned ones resumes at the later entry (`resume_after`;
//! until 2026-11 the offsets were the cookies, and a seek to an offset
//! no entry returned could list nothing below the last: xfstests
//! generic/676).
//!
//! A listing ends where it began: a listing takes each stripe's next
//! cookie as its bound (`DirIndex::list_bound`) when a call of it stops
//! early, before the caller can change anything, or when a call after its
//! first lists anything (a listing that one call completes takes none);
//! the open directory keeps it until it lists from the start again, as a
//! `rewinddir` does, and its later calls list in partition `p` only
//! cookies below stripe `p`'s bound (the caller skips the others,
//! `below_bound`).
//! Every entry linked before the bound is taken has a cookie below its
//! stripe's bound (a reloaded index's counters start at or above the
//! bound: see "Readdir cookies"); every entry linked after has one at or
//! above it. So a name renamed away and back while the directory is
//! listed — a new cookie at the end of its partition, ahead of the
//! listing — is not listed again once the bound is taken: without the bound, stress-ng's `dir` stressor, which
//! renames each entry it reads away and back, read one directory forever
//! (Linux bounds its `libfs` offset directories and btrfs the same way:
//! "btrfs: fix infinite directory reads", 9b378f6ad48c). POSIX leaves it
//! unspecified whether a name added during a listing is listed.
//!
//! Why partitions: one list for the whole directory was the one structure
//! every change of names in a directory wrote — its length and height
//! seed on every insert and remove, and its last nodes, where every new
//! cookie went. A rename back and forth of two names per thread (MWRM)
//! spent 13% of its time in the list on one thread and 45% on two
//! (perf), and ran slower on two threads than on one. A stripe's new
//! cookies go to its own partition, at its end (the stripe's counter only
//! grows), so changes in different stripes share nothing there. (An index
//! loaded from the store may hold entries whose cookie is in another
//! stripe's partition: the table's hash is seeded per load. Removing
//! such an entry writes that partition; the lists take concurrent
//! writers.) The partitions cost nothing until used: a directory with a
//! few names makes a few lists, each about 512 bytes.
//!
//! Listing cost: a listing walks each partition once, with its `Range`
//! iterator, and checks each name in the name table with the hash stored
//! beside it. The striped table (8254faf) made MRDL/MRDM 41% slower
//! although the listing code had not changed: the walk was then
//! `lower_bound` and `Entry::next` in a loop, each step's entry (three
//! words) returned through memory, and the new code generation of
//! `list_after` copied it with one 16-byte load of two of those 8-byte
//! stores. Such a load cannot be forwarded from the store buffer, so each
//! step waited for its stores to reach the cache before it could read the
//! node: in profiles (perf, cpu-clock) 43% of `list_after`'s samples were
//! that copy and 22% the node load after it; f348014's code generation had
//! no such copy. Only the walk moved: with `Range` (which keeps its position
//! inside itself) CPU time per MRDL operation went from 2.14 µs to
//! 1.27 µs, a little under f348014's 1.29 µs; the stored hash and an
//! inline compare of short names (`dir_hash::same_name`) took it to
//! 1.16-1.18 µs (`lanefs bench -t inproc`, 1 thread, medians of
//! interleaved invocations of the builds on a 2-core EPYC VM).

use std::borrow::Cow;
use std::ops::Bound;
use std::ptr;

use crossbeam_epoch::Guard;
use crossbeam_skiplist::base::SkipList;
use lanefs_store::{DirEntryRecord, FileKind, Ino, Timespec};
use smallvec::SmallVec;

use crate::dir_attr::{Collect, DirChanges, StripeAttr, StripeAttrs};
use crate::dir_hash::{EntryRef, Finished, NameTable, Ticket, FANOUT, ROLES};
use crate::sync::{AtomicPtr, AtomicU32, AtomicU64, Mutex, MutexGuard, Ordering};

/// First cookie handed to a real entry.
pub(crate) const FIRST_COOKIE: u64 = 3;
/// Stripes per directory: the hash trie's root slots.
pub(crate) const STRIPES: usize = FANOUT;

/// Stripe `s`'s first cookie in an index whose cookies must be `>= top`:
/// the least cookie `>= top` that is `≡ s (mod STRIPES)`.
fn first_cookie_of_stripe(top: u64, s: usize) -> u64 {
    let n = STRIPES as u64;
    top + (s as u64 + n - top % n) % n
}

/// One entry's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    pub ino: Ino,
    pub kind: FileKind,
    pub cookie: u64,
}

/// Where a listing ends: per stripe, the first cookie it will not list
/// (`DirIndex::list_bound`).
pub(crate) type ListBound = [u64; STRIPES];

/// Whether a listing bounded by `bound` lists `cookie`: below the bound of
/// the stripe whose partition holds it.
#[inline]
pub(crate) fn below_bound(bound: &ListBound, cookie: u64) -> bool {
    cookie < bound[partition_of(cookie)]
}

/// Entries of a listing: their names in one buffer (a listing of 64
/// entries makes two allocations, not 65), reused batch after batch.
#[derive(Default)]
pub(crate) struct ListBatch {
    names: Vec<u8>,
    entries: Vec<(usize, Slot)>,
}

impl ListBatch {
    pub fn clear(&mut self) {
        self.names.clear();
        self.entries.clear();
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn push(&mut self, name: &[u8], slot: Slot) {
        self.names.extend_from_slice(name);
        self.entries.push((self.names.len(), slot));
    }

    /// The entries in order, each name with its slot.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Slot)> {
        let mut start = 0;
        self.entries.iter().map(move |(end, slot)| {
            let name = &self.names[start..*end];
            start = *end;
            (name, slot)
        })
    }
}

impl Slot {
    /// The store's entry for `name → self`.
    pub fn record(&self, name: &[u8]) -> DirEntryRecord {
        DirEntryRecord {
            name: name.to_vec(),
            ino: self.ino,
            kind: self.kind,
            cookie: self.cookie,
        }
    }
}

/// One stripe's lock and counters (on a line of their own, beside the
/// stripe's root slot).
#[derive(Default)]
pub(crate) struct Stripe {
    /// The listing order's partition of cookies `≡ stripe (mod STRIPES)`
    /// (module doc, "Listing"): null until the first such cookie is
    /// listed, then set once (compare-and-swap: a writer of another
    /// stripe may insert or remove an entry reloaded with a cookie of this
    /// partition) and freed with the index.
    listed: AtomicPtr<CookieList>,
    lock: Mutex<()>,
    /// Entries in the stripe.
    len: AtomicU32,
    /// The stripe's next cookie, `≡ stripe (mod STRIPES)`: written by the
    /// stripe's holder only (Relaxed), read exactly by a holder of every
    /// stripe (module doc, "Readdir cookies").
    next_cookie: AtomicU64,
    /// The stripe's share of the directory's size, times and subdirectory
    /// links, and its room of links (`dir_attr`).
    attr: StripeAttr,
}

impl Drop for Stripe {
    fn drop(&mut self) {
        let p = *self.listed.get_mut();
        if !p.is_null() {
            // SAFETY: set only from `Box::into_raw` (`DirIndex::list_of`);
            // the index is being dropped, so nobody can reach it.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

/// A name in cookie order, with its hash in the name table (so that a
/// listing checks it without hashing it again).
struct Listed {
    hash: u64,
    name: Box<[u8]>,
}

/// One partition of the listing order: cookie to name.
type CookieList = SkipList<u64, Listed>;
/// An entry of a partition, borrowed under a guard.
type ListEntry<'g> = crossbeam_skiplist::base::Entry<'g, 'g, u64, Listed>;

/// The partition of the listing order that holds `cookie`.
#[inline]
pub(crate) fn partition_of(cookie: u64) -> usize {
    (cookie % STRIPES as u64) as usize
}

/// Listing positions (below): a cookie's index in its stripe (`cookie /
/// STRIPES`) takes the low bits, its partition the bits above. Small
/// positions (index below `SMALL_INDEX_LIMIT`) stay below 2^31, so that a
/// 32-bit reader's `d_off`/`telldir` holds them (glibc's non-LFS `readdir`
/// fails `EOVERFLOW` otherwise), as cookies did; large ones start at
/// `LARGE_BASE`.
const SMALL_INDEX_BITS: u32 = 27;
/// Room for `FIRST_COOKIE` below 2^31 at the top of partition 15.
const SMALL_INDEX_LIMIT: u64 = (1 << SMALL_INDEX_BITS) - FIRST_COOKIE;
const LARGE_BASE: u64 = 1 << 31;
const LARGE_INDEX_BITS: u32 = 56;
const LARGE_INDEX_MASK: u64 = (1 << LARGE_INDEX_BITS) - 1;

/// The listing position of `cookie`: what a listing returns as the offset
/// to resume after the entry (`d_off`). Positions increase in listing
/// order (module doc, "Listing order": partition first, then the cookie's
/// index in its stripe) while every stripe has handed out fewer than
/// 2^27 cookies, and stay below 2^31 (beyond, a partition's later entries
/// take positions from 2^31 up, still distinct and resumable). The start,
/// `.` and `..` (0, 1, 2) keep their numbers, below every entry's. So an
/// offset between two that entries returned resumes at the later entry,
/// and any offset below the last entry's lists an entry, as on a
/// directory whose offsets grow (tmpfs; ext4's hash order): xfstests
/// generic/676 seeks to random offsets below the largest and takes an
/// empty answer for an error. Cookies themselves do not increase from one
/// partition to the next.
#[inline]
pub(crate) fn position_of(cookie: u64) -> u64 {
    if cookie < FIRST_COOKIE {
        return cookie;
    }
    let p = partition_of(cookie) as u64;
    let index = cookie / STRIPES as u64;
    if index < SMALL_INDEX_LIMIT {
        FIRST_COOKIE + (p << SMALL_INDEX_BITS | index)
    } else {
        debug_assert!(
            index <= LARGE_INDEX_MASK,
            "cookie {cookie} past the positions"
        );
        LARGE_BASE + (p << LARGE_INDEX_BITS | index & LARGE_INDEX_MASK)
    }
}

/// Where a listing from position `pos` resumes: the cookie to list after
/// (cookie space, as [`DirIndex::list_into`] takes it) and the first
/// partition it may list from (it matters only for an offset no entry
/// returned, before every entry of a partition); `None` past every
/// position. Any `u64` is accepted (an `lseek` may set any offset).
#[inline]
pub(crate) fn resume_after(pos: u64) -> Option<(u64, usize)> {
    if pos < FIRST_COOKIE {
        return Some((pos, 0));
    }
    let (p, index) = if pos < LARGE_BASE {
        let y = pos - FIRST_COOKIE;
        let index = y & ((1 << SMALL_INDEX_BITS) - 1);
        // An offset in the gap above the small indexes: after the last.
        (
            (y >> SMALL_INDEX_BITS) as usize,
            index.min(SMALL_INDEX_LIMIT - 1),
        )
    } else {
        let y = pos - LARGE_BASE;
        let p = (y >> LARGE_INDEX_BITS) as usize;
        if p >= STRIPES {
            return None;
        }
        (p, y & LARGE_INDEX_MASK)
    };
    let cookie = index * STRIPES as u64 + p as u64;
    if cookie < FIRST_COOKIE {
        // Before every entry of partition `p` (1 or 2): the cookies that
        // mean the start, `.` and `..` there. List from the start, past
        // the partitions below `p`.
        return Some((FIRST_COOKIE - 1, p));
    }
    Some((cookie, p))
}

/// A loaded directory index.
pub(crate) struct DirIndex {
    names: NameTable<Stripe>,
    /// The bound every cookie was below at load (immutable): every
    /// stripe's counter started at or above it.
    loaded_top: u64,
}

impl DirIndex {
    /// An index holding `records` (built before anyone can see it), whose
    /// new cookies start at or above `next_cookie`.
    pub fn from_records(records: Vec<DirEntryRecord>, next_cookie: u64) -> DirIndex {
        let top = records
            .iter()
            .map(|r| r.cookie + 1)
            .fold(next_cookie.max(FIRST_COOKIE), u64::max);
        let d = DirIndex {
            names: NameTable::new(),
            loaded_top: top,
        };
        for (s, st) in d.names.stripes().enumerate() {
            st.next_cookie
                .store(first_cookie_of_stripe(top, s), Ordering::Relaxed);
        }
        let guard = crossbeam_epoch::pin();
        for r in records {
            let slot = Slot {
                ino: r.ino,
                kind: r.kind,
                cookie: r.cookie,
            };
            // SAFETY: `d` is not shared yet: this thread is its only writer.
            unsafe { d.insert_owned(r.name, slot, &guard) };
        }
        d
    }

    /// The entry `name`, lock-free.
    #[inline]
    pub fn get(&self, name: &[u8], guard: &Guard) -> Option<Slot> {
        self.names.get(name, guard)
    }

    /// The entry `name` with its node's identity (see [`NameTable::holds`]).
    #[inline]
    pub fn get_entry<'g>(&'g self, name: &[u8], guard: &'g Guard) -> Option<EntryRef<'g>> {
        self.names.get_entry(name, guard)
    }

    /// Entries. Exact for a holder of every stripe; a snapshot for others.
    pub fn len(&self) -> usize {
        self.names
            .stripes()
            .map(|s| s.len.load(Ordering::Relaxed) as usize)
            .sum()
    }

    /// A bound above every cookie in use or handed out since the load:
    /// the load's bound, or one more than the largest cookie a stripe has
    /// handed out since (exact for a holder of every stripe: cookies are
    /// handed out under a stripe). An index loaded with it starts every
    /// stripe at or above it. A stripe that handed out nothing adds
    /// nothing, so taking out and reloading an unchanged index leaves its
    /// directory's `next_cookie` as it was (no record to write back).
    pub fn next_cookie(&self) -> u64 {
        let top = self.loaded_top;
        self.names
            .stripes()
            .enumerate()
            .map(|(s, st)| {
                let next = st.next_cookie.load(Ordering::Relaxed);
                if next == first_cookie_of_stripe(top, s) {
                    top
                } else {
                    // One more than the last cookie the stripe handed out.
                    next - (STRIPES as u64 - 1)
                }
            })
            .fold(top, u64::max)
    }

    /// Give each stripe of an index not installed yet the room of
    /// subdirectory links `room(stripe)` returns (its first grant,
    /// `dir_attr`).
    pub fn grant_rooms(&mut self, mut room: impl FnMut(usize) -> u32) {
        for (s, st) in self.names.stripes().enumerate() {
            st.attr.add_room(room(s));
        }
    }

    /// Fold the stripes' attribute changes (`StripeAttrs::fold`), giving
    /// `apply` the next cookie too. The caller holds every stripe.
    pub fn fold_with_next_cookie(&self, apply: impl FnOnce(Collect<'_>, u64)) {
        self.fold(|collect| apply(collect, self.next_cookie()));
    }

    /// The partition `p` of the listing order, if it was ever used.
    #[inline]
    fn list_if(&self, p: usize) -> Option<&CookieList> {
        let at = self.names.aux(p).listed.load(Ordering::Acquire);
        // SAFETY: set once from `Box::into_raw` and freed only with the
        // index (`Stripe::drop`), which outlives `&self`.
        unsafe { at.as_ref() }
    }

    /// The partition holding `cookie`, made on first use.
    fn list_of(&self, cookie: u64) -> &CookieList {
        let p = partition_of(cookie);
        if let Some(l) = self.list_if(p) {
            return l;
        }
        let at = &self.names.aux(p).listed;
        let new = Box::into_raw(Box::new(SkipList::new(
            crossbeam_epoch::default_collector().clone(),
        )));
        match at.compare_exchange(ptr::null_mut(), new, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: just published; freed only with the index.
            Ok(_) => unsafe { &*new },
            Err(won) => {
                // SAFETY: `new` was never published: ours alone. `won` was
                // set once from `Box::into_raw`, freed only with the index.
                drop(unsafe { Box::from_raw(new) });
                unsafe { &*won }
            }
        }
    }

    /// Every entry as the store keeps it, in listing order (for a
    /// volatile store, when the index is dropped: its caller holds every
    /// stripe).
    /// A walk of its own rather than `list_into`: a second caller of the
    /// listing walk changed how it was compiled into readdir (MRDL/MRDM
    /// 4–11 % slower, "Listing cost").
    #[inline(never)]
    pub fn records(&self) -> Vec<DirEntryRecord> {
        let guard = &crossbeam_epoch::pin();
        let mut out = Vec::with_capacity(self.len());
        for list in (0..STRIPES).filter_map(|p| self.list_if(p)) {
            for entry in list.iter(guard) {
                let name = entry.value();
                match self.names.get_hashed(name.hash, &name.name, guard) {
                    Some(slot) if slot.cookie == *entry.key() => out.push(slot.record(&name.name)),
                    _ => {}
                }
            }
        }
        out
    }

    /// Up to `max` entries after the one with cookie `after` in listing
    /// order, lock-free, as `(name, slot)` pairs (tests).
    #[cfg(test)]
    pub fn list_after(&self, after: u64, max: usize, guard: &Guard) -> Vec<(Vec<u8>, Slot)> {
        let mut batch = ListBatch::default();
        self.list_into(after, max, &mut batch, guard);
        batch.iter().map(|(n, s)| (n.to_vec(), *s)).collect()
    }

    /// Where a listing that starts now ends (module doc, "Listing"): each
    /// stripe's next cookie. An entry linked later — a new name, or an old
    /// one renamed away and back, which gets a new cookie at the end of its
    /// partition — has a cookie at or past its stripe's bound.
    pub fn list_bound(&self) -> ListBound {
        std::array::from_fn(|s| self.names.aux(s).next_cookie.load(Ordering::Relaxed))
    }

    /// Append to `out` up to `max` entries after the one with cookie
    /// `after` in listing order, lock-free (see the module doc for the
    /// order and the guarantee). A listing's bound is applied by its
    /// caller ([`below_bound`]): a bound here, in the walk, made every
    /// listing 5–7 % slower (its loop is sensitive to code generation; see
    /// "Listing cost").
    pub fn list_into(&self, after: u64, max: usize, out: &mut ListBatch, guard: &Guard) {
        if max == 0 {
            return;
        }
        // The start, `.` and `..` come before every partition.
        let (first, mut from) = if after < FIRST_COOKIE {
            (0, Bound::Unbounded)
        } else {
            (partition_of(after), Bound::Excluded(after))
        };
        for p in first..STRIPES {
            let Some(list) = self.list_if(p) else {
                from = Bound::Unbounded;
                continue;
            };
            crate::sync::note_opaque(list, false);
            // One walk of each partition through an iterator that keeps
            // its position in itself. Not `lower_bound` then `Entry::next`
            // in a loop: that returns each entry through memory, and the
            // copy the loop made of it (one 16-byte load of two 8-byte
            // stores) could not be forwarded from the stores, stalling
            // every step of the walk — MRDL/MRDM lost 41% to it (module
            // doc). A partition walked from its start takes `iter`, which
            // begins at the head's first link, where `range` would search
            // down every level of the list for an unbounded start.
            let filled = if matches!(from, Bound::Unbounded) {
                self.list_entries(list.iter(guard), max, out, guard)
            } else {
                let range = list.range((from, Bound::Unbounded), guard);
                self.list_entries(range, max, out, guard)
            };
            if filled {
                return;
            }
            from = Bound::Unbounded;
        }
    }

    /// Append to `out` the entries of `walk` whose name still maps to that
    /// cookie, up to `max` in all; whether `out` is full. (Generic, not
    /// `dyn`: one call per entry would otherwise be an indirect one.)
    #[inline]
    fn list_entries<'g>(
        &'g self,
        walk: impl Iterator<Item = ListEntry<'g>>,
        max: usize,
        out: &mut ListBatch,
        guard: &'g Guard,
    ) -> bool {
        for entry in walk {
            let cookie = *entry.key();
            let name = entry.value();
            if let Some(slot) = self.names.get_hashed(name.hash, &name.name, guard) {
                if slot.cookie == cookie {
                    out.push(&name.name, slot);
                    if out.len() >= max {
                        return true;
                    }
                }
            }
        }
        false
    }

    /// Take `cookie` out of the listing order.
    fn unlist(&self, cookie: u64, guard: &Guard) {
        if let Some(list) = self.list_if(partition_of(cookie)) {
            crate::sync::note_opaque(list, true);
            if let Some(e) = list.remove(&cookie, guard) {
                e.release(guard);
            }
        }
    }

    /// Insert or replace `name`.
    ///
    /// # Safety
    /// The caller is the only writer of `name`'s stripe (holds its lock,
    /// or owns the index).
    unsafe fn insert(&self, name: &[u8], slot: Slot, guard: &Guard) -> Option<Slot> {
        // SAFETY: this function's contract.
        unsafe { self.insert_named(Cow::Borrowed(name), slot, guard) }
    }

    /// [`insert`](Self::insert) of a name the caller owns: the listing
    /// order keeps its allocation (a load of an index builds one entry per
    /// record, whose name goes unused after).
    ///
    /// # Safety
    /// As [`insert`](Self::insert).
    unsafe fn insert_owned(&self, name: Vec<u8>, slot: Slot, guard: &Guard) -> Option<Slot> {
        // SAFETY: this function's contract.
        unsafe { self.insert_named(Cow::Owned(name), slot, guard) }
    }

    /// The body of [`insert`](Self::insert) and
    /// [`insert_owned`](Self::insert_owned).
    ///
    /// # Safety
    /// As [`insert`](Self::insert).
    unsafe fn insert_named(&self, owned: Cow<'_, [u8]>, slot: Slot, guard: &Guard) -> Option<Slot> {
        let name: &[u8] = &owned;
        // SAFETY: the caller is the stripe's only writer (this contract).
        let old = unsafe { self.names.insert(name, slot, guard) };
        match old {
            Some(old_slot) if old_slot.cookie != slot.cookie => self.unlist(old_slot.cookie, guard),
            Some(_) => {}
            None => self.count_in(name, 1),
        }
        let cookie_moved = match old {
            Some(o) => o.cookie != slot.cookie,
            None => true,
        };
        if cookie_moved {
            self.list(owned, slot.cookie, guard);
        }
        old
    }

    /// Put `name` at `cookie` in the listing order.
    fn list(&self, name: Cow<'_, [u8]>, cookie: u64, guard: &Guard) {
        let listed = Listed {
            hash: self.names.hash_of(&name),
            // A borrowed name is copied, an owned one kept.
            name: name.into_owned().into_boxed_slice(),
        };
        let list = self.list_of(cookie);
        crate::sync::note_opaque(list, true);
        list.insert(cookie, listed, guard).release(guard);
    }

    /// One more entry in `name`'s stripe.
    fn count_in(&self, name: &[u8], delta: i32) {
        let len = &self.names.aux(self.names.stripe_of(name)).len;
        let n = len.load(Ordering::Relaxed);
        debug_assert!(delta > 0 || n > 0, "removing from an empty stripe");
        len.store(n.wrapping_add_signed(delta), Ordering::Relaxed);
    }

    /// A rename's first step for a name it (re)points (module doc,
    /// "Renames"): the new node, invisible until the ticket commits. The
    /// count and a new cookie's listing change now (a listing checks each
    /// cookie against the name's entry as readers see it); the replaced
    /// entry's cookie leaves the listing at [`finish`](Self::finish).
    ///
    /// # Safety
    /// As [`insert`](Self::insert), and [`NameTable::stage_put`]'s.
    unsafe fn stage_put(
        &self,
        name: &[u8],
        slot: Slot,
        ticket: *mut Ticket,
        role: usize,
        guard: &Guard,
    ) {
        // SAFETY: this function's contract.
        let (old, new) = unsafe { self.names.stage_put(name, slot, ticket, role, guard) };
        if new {
            self.count_in(name, 1);
        }
        if old.is_none_or(|o| o.cookie != slot.cookie) {
            self.list(Cow::Borrowed(name), slot.cookie, guard);
        }
    }

    /// A rename's last step for `name`, its ticket committed.
    ///
    /// # Safety
    /// As [`NameTable::finish`].
    unsafe fn finish(&self, name: &[u8], guard: &Guard) {
        // SAFETY: this function's contract.
        match unsafe { self.names.finish(name, guard) } {
            Some(Finished::Put {
                new,
                replaced: Some(old),
            }) if old.cookie != new.cookie => self.unlist(old.cookie, guard),
            Some(Finished::Removed(slot)) => {
                self.count_in(name, -1);
                self.unlist(slot.cookie, guard);
            }
            _ => {}
        }
    }

    /// Remove `name`.
    ///
    /// # Safety
    /// As [`insert`](Self::insert).
    unsafe fn remove(&self, name: &[u8], guard: &Guard) -> Option<Slot> {
        // SAFETY: the caller is the stripe's only writer (this contract).
        let slot = unsafe { self.names.remove(name, guard) }?;
        self.count_in(name, -1);
        self.unlist(slot.cookie, guard);
        Some(slot)
    }
}

impl StripeAttrs for DirIndex {
    fn attrs(&self) -> impl Iterator<Item = &StripeAttr> {
        self.names.stripes().map(|s| &s.attr)
    }
}

/// A directory's entry state: load lock and loaded index.
pub(crate) struct DirState {
    load: Mutex<()>,
    index: AtomicPtr<DirIndex>,
}

impl Default for DirState {
    fn default() -> Self {
        DirState {
            load: Mutex::new(()),
            index: AtomicPtr::new(ptr::null_mut()),
        }
    }
}

impl Drop for DirState {
    fn drop(&mut self) {
        let p = *self.index.get_mut();
        if !p.is_null() {
            // SAFETY: the directory inode is being dropped, so no guard can
            // still reach its index (inodes themselves are reclaimed after
            // every reader's guard, see `FsInner::iget_rcu`).
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

/// Which stripes a writer takes.
#[derive(Clone, Copy)]
pub(crate) enum Stripes<'n> {
    /// The stripes of these names.
    Of(&'n [&'n [u8]]),
    /// Every stripe: the whole directory.
    All,
}

impl DirState {
    /// The loaded index, lock-free, or `None` when not loaded.
    #[inline]
    pub fn index<'g>(&self, _guard: &'g Guard) -> Option<&'g DirIndex> {
        let p = self.index.load(Ordering::Acquire);
        // SAFETY: an index taken out of `self.index` is freed through
        // `defer` (see `DirLoad::take`), after `_guard`.
        unsafe { p.as_ref() }
    }

    /// Is `e`, found in `index` under `guard`, still linked in this
    /// directory: `index` is still the installed one (an index taken out
    /// and reloaded has new nodes) and `e`'s node is still in it? Then the
    /// entry stayed linked from the lookup until now, so the inode it names
    /// was not freed and its number not reused in between.
    #[inline]
    pub fn still_holds(&self, index: &DirIndex, e: &EntryRef<'_>, guard: &Guard) -> bool {
        ptr::eq(self.index.load(Ordering::Acquire), index) && index.names.holds(e, guard)
    }

    /// Whether an index is loaded now (a snapshot).
    pub fn is_loaded(&self) -> bool {
        !self.index.load(Ordering::Acquire).is_null()
    }

    /// Take the load lock.
    pub fn lock_load(&self) -> DirLoad<'_> {
        DirLoad {
            _lock: self.load.lock(),
            state: self,
        }
    }

    /// Take the load lock if it is free.
    pub fn try_lock_load(&self) -> Option<DirLoad<'_>> {
        Some(DirLoad {
            _lock: self.load.try_lock()?,
            state: self,
        })
    }

    /// The stripes `which` locked, with the index loaded (by `load` if
    /// needed, under the load lock).
    pub fn write<E>(
        &self,
        which: Stripes<'_>,
        mut load: impl FnMut() -> Result<DirIndex, E>,
    ) -> Result<DirWrite<'_>, E> {
        loop {
            let guard = crossbeam_epoch::pin();
            let p = self.index.load(Ordering::Acquire);
            if p.is_null() {
                let mut l = self.lock_load();
                if l.index().is_none() {
                    l.install(load()?);
                }
                continue;
            }
            // SAFETY: loaded under `guard`: an index taken out is freed
            // only after it. Once the re-check below passes, the index
            // stays installed (and alive) while we hold any of its stripes,
            // which `DirWrite` does for as long as it lends it.
            let idx: &DirIndex = unsafe { &*p };
            let mut held: SmallVec<[(usize, MutexGuard<'_, ()>); 2]> = SmallVec::new();
            match which {
                Stripes::All => {
                    for (s, st) in idx.names.stripes().enumerate() {
                        held.push((s, st.lock.lock()));
                    }
                }
                Stripes::Of(names) => {
                    let mut ids: SmallVec<[usize; 2]> =
                        names.iter().map(|n| idx.names.stripe_of(n)).collect();
                    ids.sort_unstable();
                    ids.dedup();
                    for s in ids {
                        held.push((s, idx.names.aux(s).lock.lock()));
                    }
                }
            }
            if self.index.load(Ordering::Acquire) == p {
                drop(guard);
                return Ok(DirWrite { index: idx, held });
            }
        }
    }
}

/// A directory's load lock and, if an index is loaded, all its stripes,
/// held: no entry changes and no index is loaded meanwhile.
pub(crate) struct DirFrozen<'a> {
    /// Dropped before `_load` (field order): the stripes are in the index,
    /// which stays installed while the load lock is held.
    _stripes: Vec<MutexGuard<'a, ()>>,
    index: Option<&'a DirIndex>,
    _load: DirLoad<'a>,
}

impl DirFrozen<'_> {
    /// Move the stripes' attribute changes into the directory's record:
    /// `apply` gets them (as `StripeAttrs::fold`) and the next cookie. Nothing to
    /// fold when no index is loaded.
    pub fn fold(&self, apply: impl FnOnce(Collect<'_>, u64)) {
        if let Some(idx) = self.index {
            idx.fold_with_next_cookie(apply);
        }
    }
}

impl DirState {
    /// Hold the load lock and every stripe of the loaded index, if any.
    pub fn freeze(&self) -> DirFrozen<'_> {
        let load = self.lock_load();
        let p = self.index.load(Ordering::Relaxed);
        // SAFETY: only a holder of the load lock (us, until `_load` drops,
        // after `_stripes` and with `index`) takes the index out, so it
        // stays installed and alive for as long as `DirFrozen` lends it.
        let index: Option<&DirIndex> = unsafe { p.as_ref() };
        let stripes = match index {
            Some(idx) => idx.names.stripes().map(|s| s.lock.lock()).collect(),
            None => Vec::new(),
        };
        DirFrozen {
            _stripes: stripes,
            index,
            _load: load,
        }
    }
}

/// The load lock of one directory, held.
pub(crate) struct DirLoad<'a> {
    _lock: MutexGuard<'a, ()>,
    state: &'a DirState,
}

impl DirLoad<'_> {
    /// The loaded index. Valid while the lock is held: only a holder of the
    /// load lock takes it out.
    pub fn index(&self) -> Option<&DirIndex> {
        let p = self.state.index.load(Ordering::Relaxed);
        // SAFETY: only load-lock holders swap the pointer; we hold it.
        unsafe { p.as_ref() }
    }

    /// Install a freshly loaded index (none must be loaded).
    pub fn install(&mut self, idx: DirIndex) {
        debug_assert!(self.index().is_none(), "index loaded twice");
        let p = Box::into_raw(Box::new(idx));
        self.state.index.store(p, Ordering::Release);
    }

    /// Take the loaded index out, waiting for every stripe; whether there
    /// was one. `save` gets it first, every stripe held (a volatile store
    /// gets the entries back: `FsInner::take_index`), and may refuse
    /// (`false`: the index stays). `fold` gets the stripes' attribute
    /// changes and the next cookie, to move into the directory's record
    /// (`dir_attr`).
    pub fn take(
        &mut self,
        save: impl FnOnce(&DirIndex) -> bool,
        fold: impl FnOnce(Collect<'_>, u64),
    ) -> bool {
        self.take_if(|st| Some(st.lock.lock()), save, fold)
    }

    /// Take the loaded index out only if no stripe is held now.
    pub fn try_take(
        &mut self,
        save: impl FnOnce(&DirIndex) -> bool,
        fold: impl FnOnce(Collect<'_>, u64),
    ) -> bool {
        self.take_if(|st| st.lock.try_lock(), save, fold)
    }

    fn take_if<'s>(
        &'s mut self,
        lock: impl Fn(&'s Stripe) -> Option<MutexGuard<'s, ()>>,
        save: impl FnOnce(&DirIndex) -> bool,
        fold: impl FnOnce(Collect<'_>, u64),
    ) -> bool {
        let p = self.state.index.load(Ordering::Relaxed);
        if p.is_null() {
            return false;
        }
        // SAFETY: installed, and only we (the load lock's holder) take it
        // out; it lives at least until the `defer` below runs.
        let idx: &'s DirIndex = unsafe { &*p };
        let mut held = Vec::with_capacity(STRIPES);
        for st in idx.names.stripes() {
            match lock(st) {
                Some(g) => held.push(g),
                None => return false,
            }
        }
        if !save(idx) {
            return false;
        }
        idx.fold_with_next_cookie(fold);
        let entries = idx.len();
        self.state.index.store(ptr::null_mut(), Ordering::Release);
        drop(held);
        let guard = crossbeam_epoch::pin();
        // SAFETY: unpublished above with every stripe held, so no writer
        // kept it after its re-check; readers that loaded it hold guards and
        // the free runs after them.
        unsafe { guard.defer_unchecked(move || drop(Box::from_raw(p))) };
        // Weighed by its entries, as a file's pages: a big index must not
        // wait in this thread's bag for 255 more frees.
        crate::pcache::collect_now_and_then(&guard, entries.max(1));
        true
    }
}

/// Stripes of a directory held with its index loaded: their only writer.
pub(crate) struct DirWrite<'a> {
    index: &'a DirIndex,
    /// (stripe, its lock), ascending; held while this lives.
    held: SmallVec<[(usize, MutexGuard<'a, ()>); 2]>,
}

impl DirWrite<'_> {
    /// Debug builds: this writer holds `name`'s stripe (release builds do
    /// not hash the name again for it).
    fn debug_check_held(&self, name: &[u8]) {
        if cfg!(debug_assertions) {
            let s = self.index.names.stripe_of(name);
            assert!(
                self.held.iter().any(|(h, _)| *h == s),
                "stripe {s} not held"
            );
        }
    }

    pub fn get(&self, name: &[u8]) -> Option<Slot> {
        self.index.get(name, &crossbeam_epoch::pin())
    }

    /// Entries (exact when every stripe is held).
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// A new cookie for `name`, from its stripe's range.
    pub fn new_cookie(&mut self, name: &[u8]) -> u64 {
        self.debug_check_held(name);
        // One stripe held: it is `name`'s (checked above in debug builds;
        // a cookie is unique whatever held stripe's range it comes from).
        let s = match self.held.as_slice() {
            [(s, _)] => *s,
            _ => self.index.names.stripe_of(name),
        };
        // The stripe's counter only grows, so a new cookie lands at the
        // end of its partition of the listing order.
        let next = &self.index.names.aux(s).next_cookie;
        let c = next.load(Ordering::Relaxed);
        next.store(c + STRIPES as u64, Ordering::Relaxed);
        c
    }

    /// Insert `name`, or replace it (a new node: readers validating the
    /// old one see it gone).
    pub fn insert(&mut self, name: &[u8], slot: Slot) {
        self.debug_check_held(name);
        let guard = crossbeam_epoch::pin();
        // SAFETY: we hold `name`'s stripe: its only writer.
        unsafe { self.index.insert(name, slot, &guard) };
    }

    /// Record in `name`'s stripe that the directory's entries changed by
    /// `entries` and its subdirectories by `subdirs` at `now` (its size,
    /// times and link count, `dir_attr`). A subdirectory added used a link
    /// reserved before ([`take_link_room`](Self::take_link_room)); one
    /// removed gives its link to the stripe's room.
    pub fn note(&mut self, name: &[u8], entries: i64, subdirs: i32, now: Timespec) {
        self.stripe_attr(name).note(entries, subdirs, now);
    }

    fn stripe_attr(&self, name: &[u8]) -> &StripeAttr {
        self.debug_check_held(name);
        &self.index.names.aux(self.index.names.stripe_of(name)).attr
    }

    /// Use one subdirectory link of `name`'s stripe's room; false when it
    /// has none (`dir_attr`).
    pub fn take_link_room(&mut self, name: &[u8]) -> bool {
        self.stripe_attr(name).take_room()
    }

    /// Add `n` subdirectory links to `name`'s stripe's room: a grant, or a
    /// reserved link given back unused.
    pub fn add_link_room(&mut self, name: &[u8], n: u32) {
        self.stripe_attr(name).add_room(n);
    }

    /// Whether this writer holds every stripe.
    pub fn holds_all(&self) -> bool {
        self.held.len() == STRIPES
    }

    /// Empty every stripe's room of subdirectory links, returning what
    /// they held. Only a holder of every stripe may.
    pub fn reclaim_link_rooms(&mut self) -> u64 {
        assert!(self.holds_all(), "reclaiming rooms without every stripe");
        self.index
            .names
            .stripes()
            .map(|st| st.attr.take_all_room() as u64)
            .sum()
    }

    /// Remove `name`.
    pub fn remove(&mut self, name: &[u8]) -> Option<Slot> {
        self.debug_check_held(name);
        let guard = crossbeam_epoch::pin();
        // SAFETY: we hold `name`'s stripe: its only writer.
        unsafe { self.index.remove(name, &guard) }
    }

    /// Stage `name → slot` in `switch` (module doc, "Renames"): readers
    /// see it, and no longer what `name` held, once the switch commits.
    /// Hold `name`'s stripe until [`finish`](Self::finish).
    pub fn stage_put(&mut self, name: &[u8], slot: Slot, switch: &RenameSwitch) {
        self.debug_check_held(name);
        let guard = crossbeam_epoch::pin();
        let role = switch.take_role();
        // SAFETY: we hold `name`'s stripe (its only writer) and keep it
        // until `finish`; the role is this name's alone; the ticket lives
        // until `switch.retire`, after the `finish`es.
        unsafe {
            self.index
                .stage_put(name, slot, switch.ticket, role, &guard)
        };
    }

    /// Stage the removal of `name` (there) in `switch`: readers no longer
    /// find it once the switch commits. As [`stage_put`](Self::stage_put).
    pub fn stage_remove(&mut self, name: &[u8], switch: &RenameSwitch) {
        self.debug_check_held(name);
        let guard = crossbeam_epoch::pin();
        let role = switch.take_role();
        // SAFETY: as `stage_put`.
        let staged = unsafe {
            self.index
                .names
                .stage_remove(name, switch.ticket, role, &guard)
        };
        debug_assert!(staged.is_some(), "staged the removal of a missing name");
    }

    /// After `switch` committed: clean `name` up (a new node loses its
    /// tag and the node it replaced goes; a removed one is unlinked).
    pub fn finish(&mut self, name: &[u8], switch: &RenameSwitch) {
        self.debug_check_held(name);
        assert!(switch.is_committed(), "finishing a pending rename");
        let guard = crossbeam_epoch::pin();
        // SAFETY: we hold `name`'s stripe since we staged it; its ticket
        // committed (checked above).
        unsafe { self.index.finish(name, &guard) };
    }
}

/// A rename's switch (module doc, "Renames"): the names it changes are
/// staged against it, it commits with one store, then each name is
/// finished, then it is retired. Held by the renamer only.
pub(crate) struct RenameSwitch {
    ticket: *mut Ticket,
    roles: std::cell::Cell<usize>,
    committed: bool,
}

impl RenameSwitch {
    pub fn new() -> RenameSwitch {
        RenameSwitch {
            ticket: Ticket::alloc(),
            roles: std::cell::Cell::new(0),
            committed: false,
        }
    }

    fn take_role(&self) -> usize {
        let r = self.roles.get();
        assert!(r < ROLES, "a rename changes at most {ROLES} names");
        self.roles.set(r + 1);
        r
    }

    fn is_committed(&self) -> bool {
        self.committed
    }

    /// Make every staged change visible at once.
    pub fn commit(&mut self) {
        // SAFETY: the ticket lives until `retire`.
        unsafe { &*self.ticket }.commit();
        self.committed = true;
    }

    /// Free the ticket (through `defer`) once every staged name is
    /// finished.
    pub fn retire(self) {
        assert!(self.committed, "retiring a pending rename");
        let guard = crossbeam_epoch::pin();
        // SAFETY: every name staged was finished by the caller (the
        // contract of this type: `finish` for each, under its stripe),
        // so no node is tagged with the ticket any more.
        unsafe { Ticket::retire(self.ticket, &guard) };
        std::mem::forget(self);
    }
}

impl Drop for RenameSwitch {
    /// A switch given up before anything was staged (the rename failed
    /// first) frees its ticket; one dropped with names staged and not
    /// retired (a panic in between) leaks it, as nodes may still point at
    /// it.
    fn drop(&mut self) {
        if self.roles.get() == 0 {
            // SAFETY: never published: ours alone.
            drop(unsafe { Box::from_raw(self.ticket) });
        } else {
            debug_assert!(std::thread::panicking(), "a rename's switch dropped staged");
        }
    }
}

/// A loaded index pinned by an epoch guard, for lock-free reads.
pub(crate) struct DirRead<'a> {
    guard: Guard,
    index: &'a DirIndex,
}

impl DirState {
    /// The base read by `read_base` with the stripes' attribute changes,
    /// consistent, lock-free (`dir_attr`).
    pub fn attr_snapshot<T>(&self, mut read_base: impl FnMut() -> T) -> (T, DirChanges) {
        let guard = crossbeam_epoch::pin();
        match self.index(&guard) {
            Some(idx) => idx.snapshot(read_base),
            // No index: everything is in the base (a take-out folds first).
            None => (read_base(), DirChanges::default()),
        }
    }

    /// The loaded index for reading, or `None` when not loaded.
    pub fn reader(&self) -> Option<DirRead<'_>> {
        let guard = crossbeam_epoch::pin();
        let p = self.index.load(Ordering::Acquire);
        // SAFETY: an index taken out is freed through `defer` after every
        // guard pinned before, including `guard`, which `DirRead` keeps for
        // as long as it lends the reference (the field order drops
        // `index` with it; the reference never leaves `&self` methods).
        let index = unsafe { p.as_ref()? };
        Some(DirRead { guard, index })
    }
}

impl DirRead<'_> {
    pub fn get(&self, name: &[u8]) -> Option<Slot> {
        self.index.get(name, &self.guard)
    }

    /// The entry `name` with its node's identity, for [`still_linked`](Self::still_linked).
    pub fn get_entry(&self, name: &[u8]) -> Option<EntryRef<'_>> {
        self.index.get_entry(name, &self.guard)
    }

    /// Is `e` (from [`get_entry`](Self::get_entry) on this reader) still
    /// linked in `state`, the directory this reader reads?
    pub fn still_linked(&self, state: &DirState, e: &EntryRef<'_>) -> bool {
        state.still_holds(self.index, e, &self.guard)
    }

    /// Append to `out` up to `max` entries after cookie `after`.
    pub fn list_into(&self, after: u64, max: usize, out: &mut ListBatch) {
        self.index.list_into(after, max, out, &self.guard)
    }

    /// Where a listing that starts now ends ([`DirIndex::list_bound`]).
    pub fn list_bound(&self) -> ListBound {
        self.index.list_bound()
    }
}

#[cfg(all(test, not(lanefs_shuttle)))]
mod tests {
    use super::*;

    fn wr(d: &DirState) -> DirWrite<'_> {
        d.write(Stripes::All, || Err::<DirIndex, ()>(()))
            .expect("loaded by the test")
    }

    fn slot(ino: Ino, cookie: u64) -> Slot {
        Slot {
            ino,
            kind: FileKind::Regular,
            cookie,
        }
    }

    fn loaded() -> DirState {
        let d = DirState::default();
        d.lock_load().install(DirIndex::from_records(Vec::new(), 0));
        d
    }

    /// Partition by partition, each in cookie order.
    fn in_listing_order(listed: &[(Vec<u8>, Slot)]) -> bool {
        let key = |s: &Slot| (partition_of(s.cookie), s.cookie);
        listed.windows(2).all(|w| key(&w[0].1) < key(&w[1].1))
    }

    /// Positions (`position_of`) increase in listing order (partition,
    /// then cookie) while indexes are small, stay below 2^31 there, and
    /// `resume_after` maps each back to its cookie; large indexes get
    /// distinct positions from 2^31 up; any offset decodes without panic.
    #[test]
    fn positions_follow_listing_order_and_resume() {
        let n = STRIPES as u64;
        let mut cookies: Vec<u64> = (FIRST_COOKIE..2000).collect();
        for idx in [
            SMALL_INDEX_LIMIT - 1,
            SMALL_INDEX_LIMIT,
            1 << 40,
            LARGE_INDEX_MASK,
        ] {
            for p in 0..n {
                cookies.push(idx * n + p);
            }
        }
        cookies.sort_by_key(|&c| (partition_of(c), c));
        let small = |c: u64| c / n < SMALL_INDEX_LIMIT;
        let mut last = FIRST_COOKIE - 1;
        for &c in cookies.iter().filter(|&&c| small(c)) {
            let pos = position_of(c);
            assert!(pos > last, "cookie {c}: position {pos} after {last}");
            assert!(pos < 1 << 31, "cookie {c}: position {pos}");
            last = pos;
        }
        let mut seen = std::collections::HashSet::new();
        for &c in &cookies {
            let pos = position_of(c);
            assert!(seen.insert(pos), "cookie {c}: position {pos} twice");
            assert!(pos < 1 << 62);
            assert_eq!(resume_after(pos), Some((c, partition_of(c))), "cookie {c}");
        }
        for pos in 0..FIRST_COOKIE {
            assert_eq!(position_of(pos), pos);
            assert_eq!(resume_after(pos), Some((pos, 0)));
        }
        // Offsets no entry returned: before partition 1's entries, in the
        // gap above the small indexes, past the end.
        assert_eq!(
            resume_after(FIRST_COOKIE + (1 << SMALL_INDEX_BITS)),
            Some((FIRST_COOKIE - 1, 1))
        );
        let gap = FIRST_COOKIE + (1 << SMALL_INDEX_BITS) - 2;
        assert_eq!(resume_after(gap), Some(((SMALL_INDEX_LIMIT - 1) * n, 0)));
        assert_eq!(resume_after(LARGE_BASE + (n << LARGE_INDEX_BITS)), None);
        assert_eq!(resume_after(u64::MAX), None);
        for pos in [LARGE_BASE - 1, LARGE_BASE, 1 << 62, i64::MAX as u64] {
            let _ = resume_after(pos);
        }
    }

    #[test]
    fn listing_is_in_partition_order_and_resumable() {
        let d = loaded();
        let mut w = wr(&d);
        w.insert(b"b", slot(10, 5));
        w.insert(b"a", slot(11, 3));
        w.insert(b"c", slot(12, 4));
        let g = crossbeam_epoch::pin();
        let idx = w.index;
        let all: Vec<_> = idx
            .list_after(0, 10, &g)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(all, vec![b"a".to_vec(), b"c".to_vec(), b"b".to_vec()]);
        let rest: Vec<_> = idx
            .list_after(4, 10, &g)
            .into_iter()
            .map(|(n, s)| (n, s.ino))
            .collect();
        assert_eq!(rest, vec![(b"b".to_vec(), 10)]);
        drop(g);
        assert_eq!(w.remove(b"c"), Some(slot(12, 4)));
        let g = crossbeam_epoch::pin();
        let idx = w.index;
        assert_eq!(idx.list_after(3, 1, &g).len(), 1);
        drop(g);
        w.insert(b"b", slot(13, 6));
        let g = crossbeam_epoch::pin();
        let idx = w.index;
        assert_eq!(idx.len(), 2);
        assert_eq!(
            idx.list_after(5, 10, &g)[0].1.ino,
            13,
            "replacing moves the cookie"
        );
        assert!(idx.list_after(4, 10, &g).iter().all(|(n, _)| n != b"c"));
        drop(g);
        // Cookie 19 is in 3's partition: it lists after 3 and before 6,
        // and a listing resumes after it.
        w.insert(b"d", slot(14, 3 + STRIPES as u64));
        let g = crossbeam_epoch::pin();
        let idx = w.index;
        let names = |after| -> Vec<Vec<u8>> {
            idx.list_after(after, 10, &g)
                .into_iter()
                .map(|(n, _)| n)
                .collect()
        };
        assert_eq!(names(0), vec![b"a".to_vec(), b"d".to_vec(), b"b".to_vec()]);
        assert_eq!(names(3), vec![b"d".to_vec(), b"b".to_vec()]);
        assert_eq!(names(3 + STRIPES as u64), vec![b"b".to_vec()]);
        assert_eq!(names(6), Vec::<Vec<u8>>::new());
    }

    #[test]
    fn a_stripes_first_cookie_is_the_least_of_its_range_at_or_above_the_top() {
        for top in FIRST_COOKIE..FIRST_COOKIE + 3 * STRIPES as u64 {
            for s in 0..STRIPES {
                let c = first_cookie_of_stripe(top, s);
                assert!(
                    c >= top && c < top + STRIPES as u64,
                    "top {top}, stripe {s}"
                );
                assert_eq!(c % STRIPES as u64, s as u64, "top {top}, stripe {s}");
            }
        }
    }

    #[test]
    fn the_next_cookie_moves_only_with_cookies_handed_out() {
        let rec = |name: &str, cookie: u64| DirEntryRecord {
            name: name.into(),
            ino: 10,
            kind: FileKind::Regular,
            cookie,
        };
        // Unchanged since the load: the record's bound, or one more than
        // the largest loaded cookie — never a stripe's unused start.
        assert_eq!(
            DirIndex::from_records(vec![rec("a", 7)], 40).next_cookie(),
            40
        );
        assert_eq!(
            DirIndex::from_records(vec![rec("a", 50)], 40).next_cookie(),
            51
        );
        assert_eq!(
            DirIndex::from_records(Vec::new(), 0).next_cookie(),
            FIRST_COOKIE
        );
        let d = DirState::default();
        d.lock_load()
            .install(DirIndex::from_records(vec![rec("a", 7)], 40));
        let mut top = 0;
        for i in 0..40 {
            let name = format!("n{i}");
            let mut w = d
                .write(Stripes::Of(&[name.as_bytes()]), || Err::<DirIndex, ()>(()))
                .expect("loaded");
            let c = w.new_cookie(name.as_bytes());
            w.insert(name.as_bytes(), slot(100 + i, c));
            // Every cookie is at or above the load's bound, and the next
            // cookie is one more than the largest handed out.
            assert!(c >= 40, "{name}: {c}");
            top = top.max(c);
            assert_eq!(w.index.next_cookie(), top + 1, "after {name}");
        }
    }

    #[test]
    fn cookies_come_from_stripe_ranges_and_never_repeat_across_reloads() {
        let d = loaded();
        let create = |name: &[u8], ino: Ino| {
            let mut w = d
                .write(Stripes::Of(&[name]), || Err::<DirIndex, ()>(()))
                .expect("loaded");
            let c = w.new_cookie(name);
            assert_eq!(c % STRIPES as u64, w.index.names.stripe_of(name) as u64);
            assert!(c >= FIRST_COOKIE);
            w.insert(name, slot(ino, c));
            c
        };
        let mut handed: Vec<u64> = (0..200u64)
            .map(|i| create(format!("n{i}").as_bytes(), 100 + i))
            .collect();
        // Remove the names with the largest cookies, then take the index
        // out and reload it from what is left and the folded next cookie,
        // as a shrink and the next lookup do.
        let mut by_cookie: Vec<(u64, u64)> = handed.iter().copied().zip(0..).collect();
        by_cookie.sort_unstable();
        for &(_, i) in by_cookie.iter().rev().take(50) {
            assert!(wr(&d).remove(format!("n{i}").as_bytes()).is_some());
        }
        let g = crossbeam_epoch::pin();
        let records: Vec<DirEntryRecord> = d
            .index(&g)
            .unwrap()
            .list_after(0, usize::MAX, &g)
            .iter()
            .map(|(name, s)| s.record(name))
            .collect();
        drop(g);
        let mut next = 0;
        let mut l = d.lock_load();
        assert!(l.take(|_| true, |_, n| next = n));
        assert!(handed.iter().all(|&c| c < next), "next bounds every stripe");
        l.install(DirIndex::from_records(records, next));
        drop(l);
        for i in 0..200u64 {
            let c = create(format!("m{i}").as_bytes(), 1000 + i);
            assert!(c >= next, "a cookie below the folded next cookie");
            handed.push(c);
        }
        let n = handed.len();
        handed.sort_unstable();
        handed.dedup();
        assert_eq!(handed.len(), n, "a cookie handed out twice");
        let g = crossbeam_epoch::pin();
        let listed = d.index(&g).unwrap().list_after(0, usize::MAX, &g);
        assert_eq!(listed.len(), 350);
        assert!(in_listing_order(&listed));
    }

    /// A stripe's room of subdirectory links: granted to a new index, used
    /// and given back by its holder, kept across a fold (writeback), and
    /// taken back whole only by a holder of every stripe. A snapshot and
    /// the fold see the subdirectories the stripes noted.
    #[test]
    fn stripes_rooms_of_links_and_subdirectories() {
        let d = DirState::default();
        let mut idx = DirIndex::from_records(Vec::new(), 0);
        idx.grant_rooms(|s| s as u32);
        d.lock_load().install(idx);
        let name = (0..4096)
            .map(|i| format!("n{i}").into_bytes())
            .find(|n| {
                let g = crossbeam_epoch::pin();
                d.index(&g).unwrap().names.stripe_of(n) == 3
            })
            .expect("a name in stripe 3");
        {
            let mut w = d
                .write(Stripes::Of(&[&name]), || Err::<DirIndex, ()>(()))
                .expect("loaded");
            assert!(!w.holds_all());
            for _ in 0..3 {
                assert!(w.take_link_room(&name));
                w.note(&name, 1, 1, Timespec { sec: 1, nsec: 0 });
            }
            assert!(!w.take_link_room(&name), "stripe 3 had 3 links");
            w.note(&name, -1, -1, Timespec { sec: 2, nsec: 0 });
            w.add_link_room(&name, 4);
        }
        let (_, c) = d.attr_snapshot(|| ());
        assert_eq!((c.entries, c.subdirs), (2, 2));
        let mut folded = None;
        d.freeze().fold(|collect, _| folded = Some(collect()));
        assert_eq!(folded.map(|c| c.subdirs), Some(2));
        assert!(d.attr_snapshot(|| ()).1.is_empty());
        let mut w = wr(&d);
        assert!(w.holds_all());
        // Stripes 0..16 were granted 0 + 1 + … + 15; stripe 3 used 3, got 1
        // back from a removal and 4 more.
        let granted: u64 = (0..STRIPES as u64).sum();
        assert_eq!(w.reclaim_link_rooms(), granted - 3 + 1 + 4);
        assert_eq!(w.reclaim_link_rooms(), 0);
        assert!(!w.take_link_room(&name));
    }

    #[test]
    fn splitting_keeps_every_entry_and_entries_validate_by_identity() {
        let d = loaded();
        let n = 1000u64;
        {
            let mut w = wr(&d);
            for i in 0..n {
                w.insert(format!("f{i}").as_bytes(), slot(100 + i, FIRST_COOKIE + i));
            }
        }
        let g = crossbeam_epoch::pin();
        let idx = d.index(&g).unwrap();
        assert_eq!(idx.len(), n as usize);
        for i in 0..n {
            assert_eq!(
                idx.get(format!("f{i}").as_bytes(), &g).unwrap().ino,
                100 + i
            );
        }
        assert_eq!(idx.get(b"nope", &g), None);
        let listed = idx.list_after(0, usize::MAX, &g);
        assert_eq!(listed.len(), n as usize);
        assert!(in_listing_order(&listed));
        // Entry identity: other names' changes leave an entry valid; its
        // own removal, replacement or a reload of the index do not.
        let (f0, f1, f2) = (
            idx.get_entry(b"f0", &g).unwrap(),
            idx.get_entry(b"f1", &g).unwrap(),
            idx.get_entry(b"f2", &g).unwrap(),
        );
        wr(&d).insert(b"new", slot(5000, 5000));
        assert!(d.still_holds(idx, &f0, &g), "another name's insert");
        assert!(wr(&d).remove(b"f1").is_some());
        assert!(!d.still_holds(idx, &f1, &g), "its own removal");
        assert!(d.still_holds(idx, &f0, &g), "another name's removal");
        wr(&d).insert(b"f2", slot(6000, 6000));
        assert!(!d.still_holds(idx, &f2, &g), "its own replacement");
        assert!(d.lock_load().take(|_| true, |_, _| {}));
        assert!(!d.still_holds(idx, &f0, &g), "the index was taken out");
        drop(g);
        let g = crossbeam_epoch::pin();
        assert!(d.index(&g).is_none());
    }
}

#[cfg(all(test, lanefs_shuttle))]
mod model {
    use super::*;
    use crate::sync::Arc;
    use crate::sync::AtomicU64;
    use crate::sync::Mutex;
    use shuttle::thread;

    fn wr(d: &DirState) -> DirWrite<'_> {
        d.write(Stripes::All, || Err::<DirIndex, ()>(()))
            .expect("loaded by the test")
    }

    fn slot(ino: Ino, cookie: u64) -> Slot {
        Slot {
            ino,
            kind: FileKind::Regular,
            cookie,
        }
    }

    /// A thread that takes the index out and installs a reload of it, as
    /// a shrink then a lookup miss do: entries are written through, so the
    /// reload holds exactly what the taken index held — read after the take,
    /// which held every stripe, so no writer is still in it.
    fn spawn_take_and_reload(d: Arc<DirState>) -> thread::JoinHandle<()> {
        thread::spawn(move || {
            let mut w = d.lock_load();
            let g = crossbeam_epoch::pin();
            let old = d.index(&g).expect("installed");
            // The record's next cookie, as the fold writes it back.
            let mut next_cookie = 0;
            assert!(w.take(|_| true, |_, next| next_cookie = next));
            let records = old
                .list_after(0, usize::MAX, &g)
                .iter()
                .map(|(name, s)| s.record(name))
                .collect();
            w.install(DirIndex::from_records(records, next_cookie));
        })
    }

    /// Lookups racing inserts (with growth), removes and a drop/reload of
    /// the index: a lookup of a name that is present throughout always
    /// finds it with its value; a removed name is never found after the
    /// remove returned; a changed name is found with an old or new value.
    /// Two writers of different stripes insert entries whose cookies are
    /// in one partition of the listing order (as after a reload, whose
    /// re-seeded hash moves names to other stripes), so both may make
    /// the partition at once, while a reader lists: one partition wins,
    /// and every entry is listed once.
    #[test]
    fn model_listing_partition_made_by_two_writers() {
        crate::sync::check_random(
            || {
                let d = Arc::new(DirState::default());
                d.lock_load().install(DirIndex::from_records(Vec::new(), 0));
                // Two names in different stripes.
                let names: Vec<Vec<u8>> = {
                    let g = crossbeam_epoch::pin();
                    let idx = d.index(&g).unwrap();
                    let first = b"a0".to_vec();
                    let s0 = idx.names.stripe_of(&first);
                    let other = (1..64)
                        .map(|i| format!("a{i}").into_bytes())
                        .find(|n| idx.names.stripe_of(n) != s0)
                        .expect("a name in another stripe");
                    vec![first, other]
                };
                let writers: Vec<_> = names
                    .iter()
                    .enumerate()
                    .map(|(i, name)| {
                        let d = d.clone();
                        let name = name.clone();
                        thread::spawn(move || {
                            let mut w = d
                                .write(Stripes::Of(&[&name]), || Err::<DirIndex, ()>(()))
                                .expect("loaded");
                            // Cookies 5 and 5 + STRIPES: one partition.
                            w.insert(&name, slot(10 + i as u64, 5 + (i * STRIPES) as u64));
                        })
                    })
                    .collect();
                {
                    let g = crossbeam_epoch::pin();
                    let listed = d.index(&g).unwrap().list_after(0, usize::MAX, &g);
                    assert!(listed.len() <= 2);
                }
                for w in writers {
                    w.join().unwrap();
                }
                let g = crossbeam_epoch::pin();
                let listed = d.index(&g).unwrap().list_after(0, usize::MAX, &g);
                let mut got: Vec<Vec<u8>> = listed.into_iter().map(|(n, _)| n).collect();
                got.sort();
                let mut want = names.clone();
                want.sort();
                assert_eq!(got, want, "each entry listed once");
            },
            crate::sync::model_iterations(),
        );
    }

    #[test]
    fn model_dir_lookup_vs_insert_remove_drop() {
        crate::sync::check_random(
            || {
                let d = Arc::new(DirState::default());
                {
                    let mut w = d.lock_load();
                    w.install(DirIndex::from_records(
                        vec![
                            DirEntryRecord {
                                name: b"stay".to_vec(),
                                ino: 10,
                                kind: FileKind::Regular,
                                cookie: 3,
                            },
                            DirEntryRecord {
                                name: b"gone".to_vec(),
                                ino: 11,
                                kind: FileKind::Regular,
                                cookie: 4,
                            },
                        ],
                        0,
                    ));
                }
                let removed = Arc::new(AtomicU64::new(0));
                let writer = {
                    let d = d.clone();
                    let removed = removed.clone();
                    thread::spawn(move || {
                        // Enough inserts to split chains (model builds
                        // use a 2-slot fanout and split at 2 nodes).
                        for i in 0..9u64 {
                            let mut w = wr(&d);
                            w.insert(format!("n{i}").as_bytes(), slot(20 + i, 5 + i));
                        }
                        assert!(wr(&d).remove(b"gone").is_some());
                        removed.store(1, Ordering::Release);
                        wr(&d).insert(b"stay", slot(10, 3));
                    })
                };
                let dropper = spawn_take_and_reload(d.clone());
                for _ in 0..4 {
                    let was_removed = removed.load(Ordering::Acquire) == 1;
                    let g = crossbeam_epoch::pin();
                    if let Some(idx) = d.index(&g) {
                        // Entry identity: once the removal is seen to have
                        // happened, an entry found before never validates.
                        if let Some(e) = idx.get_entry(b"gone", &g) {
                            thread::yield_now();
                            if removed.load(Ordering::Acquire) == 1 {
                                assert!(!d.still_holds(idx, &e, &g), "a removed entry validated");
                            }
                        }
                        assert_eq!(idx.get(b"stay", &g), Some(slot(10, 3)));
                        if was_removed {
                            assert_eq!(idx.get(b"gone", &g), None);
                        }
                        let listed = idx.list_after(0, usize::MAX, &g);
                        assert_eq!(
                            listed.iter().filter(|(n, _)| n == b"stay").count(),
                            1,
                            "an entry present throughout is listed exactly once"
                        );
                    }
                }
                writer.join().unwrap();
                dropper.join().unwrap();
            },
            crate::sync::model_iterations(),
        );
    }

    /// Removals leave their nodes linked, dead, and the chain's next writer
    /// unlinks them (`dir_hash`, "Removals"): lookups racing removals,
    /// re-inserts that sweep dead nodes out of chains other lookups stand
    /// on, and a split copying a swept chain (model builds: 2 slots per
    /// level, splitting past 4 nodes) — a name present throughout is always
    /// found, a removed one is gone once the removal is seen, an entry
    /// found before a removal never validates after it, and a re-inserted
    /// name is found with its new slot.
    #[test]
    fn model_lookups_vs_lazy_removals_and_sweeps() {
        crate::sync::check_random(
            || {
                let d = Arc::new(DirState::default());
                {
                    let mut w = d.lock_load();
                    w.install(DirIndex::from_records(Vec::new(), 0));
                }
                for i in 0..6u64 {
                    wr(&d).insert(format!("x{i}").as_bytes(), slot(20 + i, 3 + i));
                }
                wr(&d).insert(b"stay", slot(10, 30));
                // 0: nothing yet; 1: x1 removed; 2: x0 back with a new slot.
                let phase = Arc::new(AtomicU64::new(0));
                let writer = {
                    let d = d.clone();
                    let phase = phase.clone();
                    thread::spawn(move || {
                        assert!(wr(&d).remove(b"x0").is_some());
                        assert!(wr(&d).remove(b"x1").is_some());
                        phase.store(1, Ordering::Release);
                        // Sweeps x0's chain (and x1's, if the same).
                        wr(&d).insert(b"x0", slot(40, 50));
                        phase.store(2, Ordering::Release);
                        for i in 2..6u64 {
                            assert!(wr(&d).remove(format!("x{i}").as_bytes()).is_some());
                        }
                        // Enough inserts to split chains holding dead nodes.
                        for i in 6..12u64 {
                            wr(&d).insert(format!("x{i}").as_bytes(), slot(20 + i, 3 + i));
                        }
                    })
                };
                for _ in 0..4 {
                    let seen = phase.load(Ordering::Acquire);
                    let g = crossbeam_epoch::pin();
                    let idx = d.index(&g).expect("never taken in this model");
                    let x1 = idx.get_entry(b"x1", &g);
                    assert_eq!(idx.get(b"stay", &g), Some(slot(10, 30)));
                    if seen >= 1 {
                        assert_eq!(idx.get(b"x1", &g), None);
                    }
                    if seen >= 2 {
                        assert_eq!(idx.get(b"x0", &g), Some(slot(40, 50)));
                    }
                    thread::yield_now();
                    if let Some(e) = x1 {
                        if phase.load(Ordering::Acquire) >= 1 {
                            assert!(!d.still_holds(idx, &e, &g), "a removed entry validated");
                        }
                    }
                }
                writer.join().unwrap();
                let g = crossbeam_epoch::pin();
                let idx = d.index(&g).unwrap();
                assert_eq!(idx.get(b"x0", &g), Some(slot(40, 50)));
                for i in 1..6u64 {
                    assert_eq!(idx.get(format!("x{i}").as_bytes(), &g), None);
                }
                for i in 6..12u64 {
                    let got = idx.get(format!("x{i}").as_bytes(), &g);
                    assert_eq!(got, Some(slot(20 + i, 3 + i)));
                }
            },
            crate::sync::model_iterations(),
        );
    }

    /// Writers of different names under their own stripes (model builds:
    /// 2 stripes, so pairs share a stripe or not, and chains split), with a
    /// take-out and reload of the index between them, and a reader: every
    /// insert and removal lands exactly once (none lost to a writer that
    /// locked a taken index), a name present throughout is always found and
    /// listed once, and no cookie is handed out twice — not even one of a
    /// removed entry after a reload (each stripe's range restarts above the
    /// folded next cookie) — each from its name's stripe's range.
    #[test]
    fn model_dir_stripes_writers_vs_take() {
        crate::sync::check_random(
            || {
                let d = Arc::new(DirState::default());
                d.lock_load().install(DirIndex::from_records(
                    vec![DirEntryRecord {
                        name: b"stay".to_vec(),
                        ino: 10,
                        kind: FileKind::Regular,
                        cookie: 3,
                    }],
                    4,
                ));
                let handed = Arc::new(Mutex::new(Vec::new()));
                let writers: Vec<_> = [b'a', b'b']
                    .into_iter()
                    .map(|tag| {
                        let d = d.clone();
                        let handed = handed.clone();
                        thread::spawn(move || {
                            for i in 0..3u64 {
                                let name = [tag, b'0' + i as u8];
                                let mut w = d
                                    .write(Stripes::Of(&[&name]), || Err::<DirIndex, ()>(()))
                                    .expect("loaded");
                                let cookie = w.new_cookie(&name);
                                assert_eq!(
                                    cookie % STRIPES as u64,
                                    w.index.names.stripe_of(&name) as u64,
                                    "a cookie from its stripe's range"
                                );
                                handed.lock().push(cookie);
                                w.insert(&name, slot(100 + u64::from(tag) * 10 + i, cookie));
                                drop(w);
                                if i == 0 {
                                    // Removed at once: its cookie may be
                                    // the newest when the index is reloaded.
                                    let mut w = d
                                        .write(Stripes::Of(&[&name]), || Err::<DirIndex, ()>(()))
                                        .expect("loaded");
                                    assert!(w.remove(&name).is_some());
                                }
                            }
                        })
                    })
                    .collect();
                let dropper = spawn_take_and_reload(d.clone());
                for _ in 0..3 {
                    let g = crossbeam_epoch::pin();
                    if let Some(idx) = d.index(&g) {
                        assert_eq!(idx.get(b"stay", &g), Some(slot(10, 3)));
                    }
                }
                for w in writers {
                    w.join().unwrap();
                }
                dropper.join().unwrap();
                let g = crossbeam_epoch::pin();
                let idx = d.index(&g).expect("installed");
                let listed = idx.list_after(0, usize::MAX, &g);
                let mut names: Vec<_> = listed.iter().map(|(n, _)| n.clone()).collect();
                names.sort();
                let want: Vec<Vec<u8>> = [&b"a1"[..], b"a2", b"b1", b"b2", b"stay"]
                    .iter()
                    .map(|n| n.to_vec())
                    .collect();
                assert_eq!(names, want, "every change landed exactly once");
                assert_eq!(idx.len(), want.len());
                let mut cookies: Vec<_> = listed.iter().map(|(_, s)| s.cookie).collect();
                cookies.dedup();
                assert_eq!(cookies.len(), want.len(), "cookies are unique");
                let mut handed = handed.lock().clone();
                handed.push(3);
                handed.sort_unstable();
                let n = handed.len();
                handed.dedup();
                assert_eq!(handed.len(), n, "a cookie handed out twice");
                assert!(
                    handed.iter().all(|&c| c < idx.next_cookie()),
                    "the next cookie bounds every stripe's"
                );
            },
            crate::sync::model_iterations(),
        );
    }
}

#[cfg(all(test, lanefs_shuttle))]
mod model_links {
    use super::*;
    use crate::fs::{first_link_grants, fold_dir_changes, reserve_subdir_link, NoLinkRoom};
    use crate::inode::{Body, Inode};
    use crate::sync::Arc;
    use lanefs_store::InodeRecord;
    use shuttle::thread;

    const NOW: Timespec = Timespec { sec: 1, nsec: 0 };

    fn state(dir: &Inode) -> &DirState {
        match &dir.body {
            Body::Dir(d) => d,
            _ => unreachable!("a directory"),
        }
    }

    /// An index as `namei::load_index` makes one: the stripes' first
    /// rooms granted under `meta`.
    fn load(dir: &Inode) -> DirIndex {
        let rooms = first_link_grants(&mut dir.meta.lock());
        let mut idx = DirIndex::from_records(Vec::new(), 0);
        idx.grant_rooms(rooms);
        idx
    }

    /// A mkdir's link, as `create_in` takes it: in `name`'s stripe, or
    /// holding every stripe when that is needed. Whether it was made.
    fn mkdir_like(dir: &Inode, name: &[u8]) -> bool {
        let names = [name];
        let mut all = false;
        loop {
            let which = if all {
                Stripes::All
            } else {
                Stripes::Of(&names)
            };
            let mut w = state(dir)
                .write(which, || Ok::<_, ()>(load(dir)))
                .expect("loads");
            match reserve_subdir_link(dir, &mut w, name) {
                Ok(()) => {
                    w.note(name, 1, 1, NOW);
                    return true;
                }
                Err(NoLinkRoom::Full) => return false,
                Err(NoLinkRoom::NeedAllStripes) => all = true,
            }
        }
    }

    /// Two writers make two subdirectories each, in different stripes
    /// (model builds: 2), in a directory three links short of `LINK_MAX`
    /// whose first grant went to stripe 0 alone, while a thread folds the
    /// stripes (writeback: rooms kept) and then takes the index out (rooms
    /// gone; the next writer reloads it with fresh grants), and readers
    /// stat it lock-free and under `meta`: the link count never passes
    /// `LINK_MAX`, exactly three are made (no spurious `EMLINK` while
    /// stripe 1 has no room and stripe 0 has), and the record ends with
    /// exactly `LINK_MAX`.
    #[test]
    fn model_subdir_links_two_stripes_near_the_limit_vs_fold() {
        crate::sync::check_random(
            || {
                let base = crate::LINK_MAX - 3;
                let dir = Arc::new(Inode::new(
                    InodeRecord {
                        ino: 9,
                        generation: 1,
                        kind: FileKind::Directory,
                        nlink: base,
                        size: 2 * crate::DIRENT_SIZE,
                        next_cookie: FIRST_COOKIE,
                        ..InodeRecord::default()
                    },
                    false,
                ));
                {
                    let mut l = state(&dir).lock_load();
                    l.install(load(&dir));
                }
                // A name in each stripe of the index loaded first.
                let names: Vec<Vec<u8>> = {
                    let g = crossbeam_epoch::pin();
                    let idx = state(&dir).index(&g).unwrap();
                    (0..STRIPES)
                        .map(|s| {
                            (0..64)
                                .map(|i| format!("d{i}").into_bytes())
                                .find(|n| idx.names.stripe_of(n) == s)
                                .expect("a name in each stripe")
                        })
                        .collect()
                };
                let writers: Vec<_> = names
                    .iter()
                    .map(|name| {
                        let (dir, name) = (dir.clone(), name.clone());
                        thread::spawn(move || (0..2).filter(|_| mkdir_like(&dir, &name)).count())
                    })
                    .collect();
                let folder = {
                    let dir = dir.clone();
                    thread::spawn(move || {
                        state(&dir)
                            .freeze()
                            .fold(|c, next| fold_dir_changes(&dir, c, next, true));
                        state(&dir)
                            .lock_load()
                            .take(|_| true, |c, next| fold_dir_changes(&dir, c, next, false));
                    })
                };
                let reader = {
                    let dir = dir.clone();
                    thread::spawn(move || {
                        for _ in 0..2 {
                            let n = dir.attr_snapshot().nlink();
                            assert!((base..=crate::LINK_MAX).contains(&n), "nlink {n}");
                        }
                    })
                };
                for _ in 0..2 {
                    let m = dir.meta.lock();
                    let n = dir.attr_locked(&m).nlink;
                    assert!((base..=crate::LINK_MAX).contains(&n), "nlink {n}");
                }
                let made: usize = writers.into_iter().map(|w| w.join().unwrap()).sum();
                folder.join().unwrap();
                reader.join().unwrap();
                assert_eq!(made, 3, "links made out of 3 left");
                assert_eq!(dir.attr_snapshot().nlink(), crate::LINK_MAX);
                state(&dir)
                    .lock_load()
                    .take(|_| true, |c, next| fold_dir_changes(&dir, c, next, false));
                let m = dir.meta.lock();
                assert_eq!((m.rec.nlink, m.links_granted), (crate::LINK_MAX, 0));
            },
            crate::sync::model_iterations(),
        );
    }
}

// A stripe's state fits one line, beside its root slot's (normal builds;
// the model and audit builds' atomics are larger).
#[cfg(not(any(lanefs_shuttle, feature = "audit")))]
const _: () = assert!(std::mem::size_of::<crate::dir_hash::RootSlot<Stripe>>() == 128);
