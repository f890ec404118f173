//! The name table of a directory index: a hash trie from entry names to
//! [`Slot`]s, with lock-free lookups and one writer at a time.
//!
//! Shape: a root of [`ROOT_SLOTS`] slots (small, for the many small
//! directories). Each slot holds nothing, a *bucket*, or — tagged by the
//! pointer's low bit — a sub-level of [`SUB_SLOTS`] slots indexed by the
//! next [`SUB_BITS`] bits of the name's hash. A bucket is an immutable
//! array of up to [`BUCKET_MAX`] `(hash, node)` pairs, the hashes
//! contiguous, so a lookup of an absent name reads one line of hashes and
//! no node, and a present one reads one node (its name). A change of a
//! bucket publishes a new copy (copy-on-write, at most [`BUCKET_MAX`]
//! pairs); an insert that would overfill a bucket replaces it by a
//! sub-level whose buckets point at the same nodes (splitting again, before
//! publishing, any slot they would overfill). So no insert copies more than
//! [`BUCKET_MAX`] pairs, and a lookup costs one slot per level (about
//! log32 of entries ÷ 5 after the root) plus one bucket: in a directory of
//! 100k names, two fewer cache misses than the chains of 16-slot levels
//! this replaces (each chain node was a miss, and an absent name walked
//! the whole chain). Sub-levels are wider than the root because they only
//! exist where a directory is big.
//!
//! Atomics and memory:
//! * Slots are `AtomicPtr`s: the writer (the caller of the `unsafe`
//!   methods, who holds the directory's change lock or owns the table)
//!   stores with Release; readers load with Acquire inside an epoch guard.
//!   Buckets, nodes and sub-levels are fully built before the Release
//!   store that publishes them, and never written afterwards (plain
//!   memory: immutable once reachable).
//! * Reclamation: a replaced bucket, and a removed or replaced node, are
//!   freed through the epoch's `defer`, after every guard that could have
//!   reached them. A reader holding an old bucket sees the directory as it
//!   was when it loaded the slot (its lookup linearizes before the change
//!   it missed). A split moves nodes, not copies: a node stays linked from
//!   its insert until its removal or replacement, and is never linked
//!   again after (what [`NameTable::holds`] relies on). Sub-levels are
//!   never unlinked; they are freed with the table, which needs `&mut`.
//!
//! No locks here; the owner's change lock serialises writers.

use std::alloc::Layout;
use std::hash::BuildHasher;
use std::ptr;

use crossbeam_epoch::Guard;

use crate::dir::Slot;
use crate::sync::{AtomicPtr, Ordering};

/// Hash bits of the root level, and of each sub-level (model builds: 1
/// and 1 with buckets of 2, so that a handful of inserts already splits,
/// and the model checks explore it).
#[cfg(not(lanefs_shuttle))]
const ROOT_BITS: u32 = 4;
#[cfg(not(lanefs_shuttle))]
const SUB_BITS: u32 = 5;
#[cfg(lanefs_shuttle)]
const ROOT_BITS: u32 = 1;
#[cfg(lanefs_shuttle)]
const SUB_BITS: u32 = 1;
/// Slots of the root level.
pub(crate) const ROOT_SLOTS: usize = 1 << ROOT_BITS;
/// Slots of a sub-level.
pub(crate) const SUB_SLOTS: usize = 1 << SUB_BITS;
/// A bucket that would grow past this many pairs becomes a sub-level
/// (8 hashes: one cache line).
#[cfg(not(lanefs_shuttle))]
pub(crate) const BUCKET_MAX: usize = 8;
#[cfg(lanefs_shuttle)]
pub(crate) const BUCKET_MAX: usize = 2;
/// The deepest level (the last whose bits fit in the hash); its buckets
/// just grow.
const MAX_DEPTH: u32 = (64 - ROOT_BITS) / SUB_BITS;
/// Low pointer bit marking a slot that holds a sub-level.
const SUB_TAG: usize = 1;

/// One entry: immutable once linked.
struct Node {
    hash: u64,
    slot: Slot,
    name: Box<[u8]>,
}

/// A bucket's header; `len` hashes (`u64`) and then `len` node pointers
/// follow it in the same allocation (see [`bucket_layout`]). Immutable once
/// published; never empty (an empty slot is null).
#[repr(C)]
struct Bucket {
    len: usize,
}

/// The allocation of a bucket of `len` pairs: the header, `len` hashes,
/// `len` node pointers, every part 8-byte words (so the node pointers start
/// at word `1 + len`).
fn bucket_layout(len: usize) -> Layout {
    Layout::from_size_align((1 + 2 * len) * 8, 8).expect("bucket size")
}

/// A new bucket of `len` pairs (at least one), its header written: the
/// caller fills the hashes and node pointers (see [`bucket_parts`]) before
/// it publishes the bucket.
fn bucket_alloc(len: usize) -> *mut Bucket {
    debug_assert!(len > 0, "empty buckets are null slots");
    let layout = bucket_layout(len);
    // SAFETY: the layout has a non-zero size; the header write is inside it.
    unsafe {
        let b = std::alloc::alloc(layout).cast::<Bucket>();
        if b.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        b.write(Bucket { len });
        b
    }
}

/// Where bucket `b`'s hashes and node pointers live.
///
/// # Safety
/// `b` came from [`bucket_alloc`] and is live.
unsafe fn bucket_parts(b: *mut Bucket) -> (*mut u64, *mut *mut Node) {
    // SAFETY: the caller's contract; the offsets are `bucket_layout`'s.
    unsafe {
        let len = (*b).len;
        let words = b.cast::<u64>();
        (words.add(1), words.add(1 + len).cast::<*mut Node>())
    }
}

/// A new bucket holding `pairs` (at least one), not yet published.
fn bucket_new(pairs: &[(u64, *mut Node)]) -> *mut Bucket {
    let b = bucket_alloc(pairs.len());
    // SAFETY: `b` is ours and has room for exactly `pairs.len()` pairs.
    unsafe {
        let (hashes, nodes) = bucket_parts(b);
        for (i, &(h, n)) in pairs.iter().enumerate() {
            hashes.add(i).write(h);
            nodes.add(i).write(n);
        }
    }
    b
}

/// A copy of `old` (or of nothing, when null) with `(hash, node)` added at
/// the end, not yet published.
///
/// # Safety
/// `old` is null or a live bucket.
unsafe fn bucket_with(old: *const Bucket, hash: u64, node: *mut Node) -> *mut Bucket {
    // SAFETY: the caller's contract for `old`; the new bucket is ours and
    // has room for `len + 1` pairs.
    unsafe {
        let (oh, on) = if old.is_null() {
            (&[][..], &[][..])
        } else {
            bucket_pairs(old)
        };
        let len = oh.len();
        let b = bucket_alloc(len + 1);
        let (hashes, nodes) = bucket_parts(b);
        ptr::copy_nonoverlapping(oh.as_ptr(), hashes, len);
        ptr::copy_nonoverlapping(on.as_ptr(), nodes, len);
        hashes.add(len).write(hash);
        nodes.add(len).write(node);
        b
    }
}

/// A copy of `old` with pair `i` replaced by `node` (same name, same
/// hash), or removed (`None`; null if that empties it); not yet published.
///
/// # Safety
/// `old` is a live bucket and `i` one of its pairs.
unsafe fn bucket_changed(old: *const Bucket, i: usize, node: Option<*mut Node>) -> *mut Bucket {
    // SAFETY: the caller's contract; the new bucket is ours, sized for the
    // pairs copied into it.
    unsafe {
        let (oh, on) = bucket_pairs(old);
        let len = oh.len();
        if let Some(n) = node {
            let b = bucket_alloc(len);
            let (hashes, nodes) = bucket_parts(b);
            ptr::copy_nonoverlapping(oh.as_ptr(), hashes, len);
            ptr::copy_nonoverlapping(on.as_ptr(), nodes, len);
            nodes.add(i).write(n);
            return b;
        }
        if len == 1 {
            return ptr::null_mut();
        }
        let b = bucket_alloc(len - 1);
        let (hashes, nodes) = bucket_parts(b);
        ptr::copy_nonoverlapping(oh.as_ptr(), hashes, i);
        ptr::copy_nonoverlapping(on.as_ptr(), nodes, i);
        ptr::copy_nonoverlapping(oh.as_ptr().add(i + 1), hashes.add(i), len - i - 1);
        ptr::copy_nonoverlapping(on.as_ptr().add(i + 1), nodes.add(i), len - i - 1);
        b
    }
}

/// The hashes and node pointers of bucket `b`.
///
/// # Safety
/// `b` is a live bucket made by [`bucket_alloc`] and filled, and stays
/// live for `'a`.
unsafe fn bucket_pairs<'a>(b: *const Bucket) -> (&'a [u64], &'a [*mut Node]) {
    // SAFETY: the caller's contract; the parts were written before the
    // bucket was published and are never written again.
    unsafe {
        let len = (*b).len;
        let words = b.cast::<u64>();
        (
            std::slice::from_raw_parts(words.add(1), len),
            std::slice::from_raw_parts(words.add(1 + len).cast::<*mut Node>(), len),
        )
    }
}

/// The pairs of `b` as a vector (writer only), empty for a null slot.
///
/// # Safety
/// As [`bucket_pairs`], or `b` null.
unsafe fn bucket_vec(b: *const Bucket) -> Vec<(u64, *mut Node)> {
    if b.is_null() {
        return Vec::new();
    }
    // SAFETY: the caller's contract.
    let (hashes, nodes) = unsafe { bucket_pairs(b) };
    hashes.iter().copied().zip(nodes.iter().copied()).collect()
}

/// Free bucket `b` (not its nodes).
///
/// # Safety
/// `b` came from [`bucket_new`], nobody can reach it any more, and it is
/// freed once.
unsafe fn bucket_free(b: *mut Bucket) {
    // SAFETY: the caller's contract; the layout is the allocation's.
    unsafe { std::alloc::dealloc(b.cast::<u8>(), bucket_layout((*b).len)) }
}

/// The publication of `pairs` in a slot: a new bucket, or null.
fn bucket_or_null(pairs: &[(u64, *mut Node)]) -> *mut Bucket {
    if pairs.is_empty() {
        ptr::null_mut()
    } else {
        bucket_new(pairs)
    }
}

struct Level<const N: usize> {
    slots: [AtomicPtr<Bucket>; N],
}

impl<const N: usize> Level<N> {
    fn new() -> Level<N> {
        Level {
            slots: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
        }
    }
}

type SubLevel = Level<SUB_SLOTS>;

/// The sub-level a slot's value points at, if it is tagged as one.
fn sub_level(p: *mut Bucket) -> Option<*mut SubLevel> {
    if p as usize & SUB_TAG != 0 {
        Some((p as usize & !SUB_TAG) as *mut SubLevel)
    } else {
        None
    }
}

fn tagged(level: *mut SubLevel) -> *mut Bucket {
    debug_assert!(level as usize & SUB_TAG == 0, "levels are aligned");
    (level as usize | SUB_TAG) as *mut Bucket
}

/// The slot of `hash` at `depth` (the root is depth 0).
fn slot_index(hash: u64, depth: u32) -> usize {
    if depth == 0 {
        hash as usize & (ROOT_SLOTS - 1)
    } else {
        (hash >> (ROOT_BITS + (depth - 1) * SUB_BITS)) as usize & (SUB_SLOTS - 1)
    }
}

/// Free the slots of a level: their buckets, nodes and sub-levels.
///
/// # Safety
/// Nothing reachable from `slots` can be reached by anyone else, and each
/// node and bucket belongs to this table only.
unsafe fn free_slots(slots: &[AtomicPtr<Bucket>]) {
    for s in slots {
        let p = s.load(Ordering::Relaxed);
        if let Some(sub) = sub_level(p) {
            // SAFETY: a tagged slot holds a `Box::into_raw` level that only
            // this slot points at.
            unsafe {
                free_slots(&(*sub).slots);
                drop(Box::from_raw(sub));
            }
        } else if !p.is_null() {
            // SAFETY: the caller's contract; every node is in exactly one
            // bucket of the table.
            unsafe {
                for &n in bucket_pairs(p).1 {
                    drop(Box::from_raw(n));
                }
                bucket_free(p);
            }
        }
    }
}

/// An entry as a lookup found it: its slot, and (for [`NameTable::holds`])
/// the node that held it. Valid while the guard of the lookup is pinned.
#[derive(Clone, Copy)]
pub(crate) struct EntryRef<'g> {
    node: &'g Node,
}

impl EntryRef<'_> {
    pub fn slot(&self) -> Slot {
        self.node.slot
    }
}

/// Names → slots; see the module doc.
pub(crate) struct NameTable {
    root: Level<ROOT_SLOTS>,
    hasher: foldhash::fast::RandomState,
}

// SAFETY: shared state is atomics and immutable buckets and nodes; raw
// pointers are owned by the table.
unsafe impl Send for NameTable {}
// SAFETY: as above; writers are serialised by the `unsafe` methods' callers.
unsafe impl Sync for NameTable {}

impl NameTable {
    pub fn new() -> NameTable {
        NameTable {
            root: Level::new(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    /// The slot that holds `hash`'s bucket (never a sub-level) and the
    /// bucket it held when loaded (Acquire), with its depth.
    fn locate(&self, hash: u64) -> (&AtomicPtr<Bucket>, *mut Bucket, u32) {
        let mut slots: &[AtomicPtr<Bucket>] = &self.root.slots;
        let mut depth = 0;
        loop {
            let link = &slots[slot_index(hash, depth)];
            let p = link.load(Ordering::Acquire);
            match sub_level(p) {
                // SAFETY: sub-levels live as long as the table.
                Some(sub) => slots = unsafe { &(*sub).slots },
                None => return (link, p, depth),
            }
            depth += 1;
        }
    }

    /// Find `name`: the slot, the bucket, the pair's index and the node.
    fn find<'g>(
        &'g self,
        hash: u64,
        name: &[u8],
        _guard: &'g Guard,
    ) -> Option<(&'g AtomicPtr<Bucket>, *mut Bucket, usize, &'g Node)> {
        let (link, bucket, _) = self.locate(hash);
        if bucket.is_null() {
            return None;
        }
        // SAFETY: buckets and nodes reachable from the table are freed only
        // through `defer` after being unlinked, after `_guard`.
        let (hashes, nodes) = unsafe { bucket_pairs(bucket) };
        for (i, &h) in hashes.iter().enumerate() {
            if h == hash {
                // SAFETY: as above.
                let node = unsafe { &*nodes[i] };
                if *node.name == *name {
                    return Some((link, bucket, i, node));
                }
            }
        }
        None
    }

    /// The entry `name`, lock-free.
    pub fn get(&self, name: &[u8], guard: &Guard) -> Option<Slot> {
        let hash = self.hasher.hash_one(name);
        self.find(hash, name, guard).map(|(.., n)| n.slot)
    }

    /// The entry `name` with the identity of the node that holds it, for
    /// [`holds`](Self::holds) under the same guard.
    pub fn get_entry<'g>(&'g self, name: &[u8], guard: &'g Guard) -> Option<EntryRef<'g>> {
        let hash = self.hasher.hash_one(name);
        self.find(hash, name, guard)
            .map(|(.., node)| EntryRef { node })
    }

    /// Is `e` (found under `guard`) still the node linked as its name? A
    /// node, once unlinked (removed or replaced), is never linked again,
    /// and its memory is not reused while `guard` is pinned: so `true`
    /// means the entry stayed linked from the lookup until now — what
    /// Linux validates with a dentry's `d_seq`, per entry rather than per
    /// directory (a removal of another name does not disturb this reader,
    /// nor does a split, which moves nodes).
    pub fn holds(&self, e: &EntryRef<'_>, guard: &Guard) -> bool {
        self.find(e.node.hash, &e.node.name, guard)
            .is_some_and(|(.., n)| ptr::eq(n, e.node))
    }

    /// Insert or replace `name`; the replaced slot, if any.
    ///
    /// # Safety
    /// The caller is the table's only writer (holds the owning directory's
    /// change lock, or owns the table).
    pub unsafe fn insert(&self, name: &[u8], slot: Slot, guard: &Guard) -> Option<Slot> {
        let hash = self.hasher.hash_one(name);
        let node = Box::into_raw(Box::new(Node {
            hash,
            slot,
            name: name.into(),
        }));
        if let Some((link, old_bucket, i, old)) = self.find(hash, name, guard) {
            // SAFETY: the writer owns the bucket's shape; it is live.
            link.store(
                unsafe { bucket_changed(old_bucket, i, Some(node)) },
                Ordering::Release,
            );
            let old_slot = old.slot;
            let old_node = old as *const Node as *mut Node;
            // SAFETY: the old bucket and node are unlinked; readers that
            // reached them hold guards, and the frees run after them.
            unsafe {
                guard.defer_unchecked(move || {
                    bucket_free(old_bucket);
                    drop(Box::from_raw(old_node));
                })
            };
            return Some(old_slot);
        }
        let (link, old_bucket, depth) = self.locate(hash);
        // SAFETY: the writer owns the bucket's shape; it is live (or null).
        let len = if old_bucket.is_null() {
            0
        } else {
            unsafe { (*old_bucket).len }
        };
        if len >= BUCKET_MAX && depth < MAX_DEPTH {
            // SAFETY: as above.
            let mut pairs = unsafe { bucket_vec(old_bucket) };
            pairs.push((hash, node));
            let sub = build_level(&pairs, depth + 1);
            link.store(tagged(Box::into_raw(sub)), Ordering::Release);
        } else {
            // SAFETY: as above.
            link.store(
                unsafe { bucket_with(old_bucket, hash, node) },
                Ordering::Release,
            );
        }
        if !old_bucket.is_null() {
            // SAFETY: unlinked above (its nodes live on in the new bucket
            // or sub-level); freed after every guard that saw it.
            unsafe { guard.defer_unchecked(move || bucket_free(old_bucket)) };
        }
        None
    }

    /// Remove `name`; its slot, if it was there.
    ///
    /// # Safety
    /// As [`insert`](Self::insert).
    pub unsafe fn remove(&self, name: &[u8], guard: &Guard) -> Option<Slot> {
        let hash = self.hasher.hash_one(name);
        let (link, old_bucket, i, old) = self.find(hash, name, guard)?;
        // SAFETY: the writer owns the bucket's shape; it is live.
        link.store(
            unsafe { bucket_changed(old_bucket, i, None) },
            Ordering::Release,
        );
        let slot = old.slot;
        let old_node = old as *const Node as *mut Node;
        // SAFETY: unlinked above; freed after every guard that saw them.
        unsafe {
            guard.defer_unchecked(move || {
                bucket_free(old_bucket);
                drop(Box::from_raw(old_node));
            })
        };
        Some(slot)
    }

    /// The slot where `hash`'s bucket lives and its depth.
    #[cfg(all(test, not(lanefs_shuttle)))]
    fn leaf(&self, hash: u64) -> (&AtomicPtr<Bucket>, u32) {
        let (link, _, depth) = self.locate(hash);
        (link, depth)
    }
}

impl Drop for NameTable {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: nobody else can reach the table.
        unsafe { free_slots(&self.root.slots) };
    }
}

/// A new sub-level at `depth` holding `pairs` (whose nodes nobody can
/// reach through it yet), any slot that would hold more than
/// [`BUCKET_MAX`] of them split into a level of its own in turn (above
/// [`MAX_DEPTH`]), so that no bucket ever outgrows the threshold — however
/// unevenly the split's names hash.
fn build_level(pairs: &[(u64, *mut Node)], depth: u32) -> Box<SubLevel> {
    let level = Box::new(SubLevel::new());
    let mut groups: [Vec<(u64, *mut Node)>; SUB_SLOTS] = std::array::from_fn(|_| Vec::new());
    for &(h, n) in pairs {
        groups[slot_index(h, depth)].push((h, n));
    }
    for (slot, group) in level.slots.iter().zip(groups) {
        let p = if group.len() > BUCKET_MAX && depth < MAX_DEPTH {
            tagged(Box::into_raw(build_level(&group, depth + 1)))
        } else {
            bucket_or_null(&group)
        };
        slot.store(p, Ordering::Relaxed);
    }
    level
}

#[cfg(all(test, not(lanefs_shuttle)))]
mod tests {
    use super::*;
    use lanefs_store::FileKind;

    fn slot(i: u64) -> Slot {
        Slot {
            ino: i + 100,
            kind: FileKind::Regular,
            cookie: i + 3,
        }
    }

    fn depth_of(t: &NameTable, name: &[u8]) -> u32 {
        t.leaf(t.hasher.hash_one(name)).1
    }

    #[test]
    fn splits_keep_every_entry_and_removals_and_replacements_work() {
        let t = NameTable::new();
        let guard = crossbeam_epoch::pin();
        let n = 5000u64;
        for i in 0..n {
            // SAFETY: this test is the only writer.
            assert_eq!(
                unsafe { t.insert(format!("f{i}").as_bytes(), slot(i), &guard) },
                None
            );
        }
        // Deep enough that some levels split more than once.
        assert!((0..n).any(|i| depth_of(&t, format!("f{i}").as_bytes()) >= 2));
        for i in 0..n {
            assert_eq!(t.get(format!("f{i}").as_bytes(), &guard), Some(slot(i)));
        }
        assert_eq!(t.get(b"absent", &guard), None);
        for i in (0..n).step_by(2) {
            // SAFETY: as above.
            unsafe {
                assert_eq!(t.remove(format!("f{i}").as_bytes(), &guard), Some(slot(i)));
                assert_eq!(t.remove(format!("f{i}").as_bytes(), &guard), None);
            }
        }
        for i in (1..n).step_by(2) {
            // SAFETY: as above.
            let old = unsafe { t.insert(format!("f{i}").as_bytes(), slot(i + n), &guard) };
            assert_eq!(old, Some(slot(i)));
        }
        for i in 0..n {
            let want = (i % 2 == 1).then(|| slot(i + n));
            assert_eq!(t.get(format!("f{i}").as_bytes(), &guard), want);
        }
    }

    #[test]
    fn no_bucket_outgrows_the_split_threshold_above_the_deepest_level() {
        let t = NameTable::new();
        let guard = crossbeam_epoch::pin();
        // Enough splits that some put most of their nodes in one slot:
        // those must split again at once.
        for i in 0..200_000u64 {
            // SAFETY: this test is the only writer.
            unsafe { t.insert(format!("name-{i}").as_bytes(), slot(i), &guard) };
        }
        fn check(slots: &[AtomicPtr<Bucket>]) -> usize {
            let mut n = 0;
            for s in slots {
                let p = s.load(Ordering::Relaxed);
                match sub_level(p) {
                    // SAFETY: sub-levels live as long as the table.
                    Some(sub) => n += check(unsafe { &(*sub).slots }),
                    None if p.is_null() => {}
                    None => {
                        // SAFETY: a live bucket of the table.
                        let len = unsafe { bucket_pairs(p) }.0.len();
                        assert!((1..=BUCKET_MAX).contains(&len), "bucket of {len}");
                        n += len;
                    }
                }
            }
            n
        }
        assert_eq!(
            check(&t.root.slots),
            200_000,
            "every name in exactly one bucket"
        );
    }
}
