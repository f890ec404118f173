//! The name table of a directory index: a hash trie from entry names to
//! [`Slot`]s, with lock-free lookups and one writer at a time per *stripe*.
//!
//! Shape: a root of [`FANOUT`] slots, each on a cache line of its own, and
//! beside each, on another line, its owner's per-stripe state
//! (`RootSlot::aux`: the stripe's lock and counters): the root slot a name
//! hashes to is its stripe ([`NameTable::stripe_of`]), and everything below
//! a root slot is written only by that stripe's writer, so writers of
//! different stripes never touch one word, and (a line each) never one
//! line: a lookup in one stripe shares nothing with a change in another.
//! Within a stripe, a lookup reads the slot's line and not the state's, so
//! it shares a line with a change of another name only where that change
//! writes the slot itself (a chain starting there). Cost: two lines per
//! stripe, 2 KiB per loaded directory index.
//! Each slot holds either a chain of
//! nodes (immutable but for `next`) or, tagged by the pointer's low bit, a
//! sub-level of [`FANOUT`] slots indexed by the next [`FANOUT_BITS`] bits of
//! the name's hash. An insert that would make a chain longer than
//! [`SPLIT_AT`] replaces it by a sub-level holding copies of its nodes
//! (splitting again, before publishing, any slot the copies would
//! overfill). So
//! no insert ever copies more than [`SPLIT_AT`] nodes, and a lookup costs
//! one slot per level (about log16 of entries ÷ 8) plus a short chain. The
//! flat table this replaces doubled by copying *every* entry, and did so
//! while holding the directory's entry lock: with a few hundred thousand
//! entries, half the time of a create in a shared directory went there.
//!
//! Atomics:
//! * Slots and `Node::next` are `AtomicPtr`s: the writer (the caller of the
//!   `unsafe` methods, who holds the name's stripe lock or owns the
//!   table) stores with Release; readers load with Acquire inside an epoch
//!   guard. A node is fully built before the Release store that links it;
//!   a sub-level and the copies in it are built before the Release store of
//!   its tagged pointer.
//! * Reclamation: unlinked nodes, and the chain a split replaced, are freed
//!   through the epoch's `defer`, after every guard that could have reached
//!   them. A reader standing on such a node follows its frozen `next`
//!   through the old chain: it sees the directory as it was when it loaded
//!   the pointer (its lookup linearizes before the change it missed).
//!   Sub-levels are never unlinked; they are freed with the table, which
//!   needs `&mut` (nobody can reach it).
//!
//! No locks here; the owner's stripe locks serialise the writers of each
//! stripe.

use std::hash::BuildHasher;
use std::ptr;

use crossbeam_epoch::Guard;
use lanefs_store::CacheLine;

use crate::dir::Slot;
use crate::sync::{AtomicPtr, Ordering};

/// Hash bits consumed per level (model builds: 1, so that a handful of
/// inserts already splits, and the model checks explore it).
#[cfg(not(lanefs_shuttle))]
pub(crate) const FANOUT_BITS: u32 = 4;
#[cfg(lanefs_shuttle)]
pub(crate) const FANOUT_BITS: u32 = 1;
/// Slots per level.
pub(crate) const FANOUT: usize = 1 << FANOUT_BITS;
/// A chain that would grow past this many nodes becomes a sub-level.
#[cfg(not(lanefs_shuttle))]
pub(crate) const SPLIT_AT: usize = 4;
#[cfg(lanefs_shuttle)]
pub(crate) const SPLIT_AT: usize = 4;
/// The deepest level (it uses the hash's top bits); its chains just grow.
const MAX_DEPTH: u32 = 64 / FANOUT_BITS - 1;
/// Low pointer bit marking a slot that holds a sub-level.
const SUB_TAG: usize = 1;

/// One entry; only `next` changes after it is linked, and only by the
/// writer.
struct Node {
    hash: u64,
    name: Box<[u8]>,
    slot: Slot,
    next: AtomicPtr<Node>,
}

struct Level {
    slots: [AtomicPtr<Node>; FANOUT],
}

/// A root slot and the owner's state of its stripe, each on a line of its
/// own: a lookup reads the slot, a change in the stripe writes the state
/// (its lock first), and a change of *another* name of the stripe leaves
/// the slot alone unless its chain starts there — so a lookup does not
/// share a line with every change of the names it shares a stripe with.
pub(crate) struct RootSlot<A> {
    slot: CacheLine<AtomicPtr<Node>>,
    aux: CacheLine<A>,
}

impl Level {
    fn new() -> Box<Level> {
        Box::new(Level {
            slots: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
        })
    }
}

/// The sub-level a slot's value points at, if it is tagged as one.
#[inline]
fn sub_level(p: *mut Node) -> Option<*mut Level> {
    if p as usize & SUB_TAG != 0 {
        Some((p as usize & !SUB_TAG) as *mut Level)
    } else {
        None
    }
}

fn tagged(level: *mut Level) -> *mut Node {
    debug_assert!(level as usize & SUB_TAG == 0, "levels are aligned");
    (level as usize | SUB_TAG) as *mut Node
}

#[inline]
fn slot_index(hash: u64, depth: u32) -> usize {
    (hash >> (depth * FANOUT_BITS)) as usize & (FANOUT - 1)
}

/// Free a chain nobody can reach any more.
///
/// # Safety
/// Every node of the chain from `p` is unreachable by readers and writers
/// and belongs to this chain only.
unsafe fn free_chain(mut p: *mut Node) {
    while !p.is_null() {
        // SAFETY: the caller's contract; each node is freed once.
        let node = unsafe { Box::from_raw(p) };
        p = node.next.load(Ordering::Relaxed);
    }
}

/// Free what a slot holds: a chain, or a level with its chains and
/// sub-levels.
///
/// # Safety
/// As [`free_chain`], for everything reachable from `slot`.
unsafe fn free_slot(slot: &AtomicPtr<Node>) {
    let p = slot.load(Ordering::Relaxed);
    match sub_level(p) {
        Some(sub) => {
            // SAFETY: a tagged slot holds a `Box::into_raw` level that only
            // this slot points at; the caller's contract covers the rest.
            unsafe {
                for s in &(*sub).slots {
                    free_slot(s);
                }
                drop(Box::from_raw(sub));
            }
        }
        // SAFETY: the caller's contract.
        None => unsafe { free_chain(p) },
    }
}

/// `a == b`, inline for names of up to 16 bytes (`==` on slices calls
/// `bcmp`, a call per lookup that cost as much as the rest of a check in a
/// listing): two overlapping words cover every byte of a name of 4 to 16
/// bytes, three bytes every byte of a shorter one.
#[inline]
fn same_name(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let w8 = |s: &[u8], i: usize| u64::from_ne_bytes(s[i..i + 8].try_into().unwrap());
    let w4 = |s: &[u8], i: usize| u32::from_ne_bytes(s[i..i + 4].try_into().unwrap());
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=7 => w4(a, 0) == w4(b, 0) && w4(a, n - 4) == w4(b, n - 4),
        8..=16 => w8(a, 0) == w8(b, 0) && w8(a, n - 8) == w8(b, n - 8),
        _ => a == b,
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

/// The hash of names. Normal builds seed it at random per table, so that
/// which names share a stripe cannot be chosen from outside. Conflict
/// audit builds (`--features audit`) fix the seed: a name's stripe is then
/// the same in every run, so a run is reproducible and the variants'
/// results compare pair for pair (with random seeds the audit's fixed
/// names share stripes differently from run to run, which moved the
/// conflict-free count by a few pairs).
#[cfg(not(feature = "audit"))]
type NameHasher = foldhash::fast::RandomState;
#[cfg(feature = "audit")]
type NameHasher = foldhash::fast::FixedState;

fn name_hasher() -> NameHasher {
    #[cfg(not(feature = "audit"))]
    return foldhash::fast::RandomState::default();
    #[cfg(feature = "audit")]
    return foldhash::fast::FixedState::with_seed(0x6c61_6e65_6673_0001);
}

/// Names → slots, with a per-stripe `A` for the owner; see the module doc.
pub(crate) struct NameTable<A> {
    root: [RootSlot<A>; FANOUT],
    hasher: NameHasher,
}

// SAFETY: shared state is atomics and immutable nodes; raw pointers are
// owned by the table; `A` is shared as the owner's own type is.
unsafe impl<A: Send> Send for NameTable<A> {}
// SAFETY: as above; writers are serialised by the `unsafe` methods' callers.
unsafe impl<A: Sync> Sync for NameTable<A> {}

impl<A: Default> NameTable<A> {
    pub fn new() -> NameTable<A> {
        NameTable {
            root: std::array::from_fn(|_| RootSlot {
                slot: CacheLine(AtomicPtr::new(ptr::null_mut())),
                aux: CacheLine(A::default()),
            }),
            hasher: name_hasher(),
        }
    }
}

impl<A> NameTable<A> {
    /// The stripe of `name`: the root slot its entry lives under.
    pub fn stripe_of(&self, name: &[u8]) -> usize {
        slot_index(self.hasher.hash_one(name), 0)
    }

    /// The owner's state of stripe `s` (`s < FANOUT`).
    pub fn aux(&self, s: usize) -> &A {
        &self.root[s].aux.0
    }

    /// Every stripe's owner state, in stripe order.
    pub fn stripes(&self) -> impl Iterator<Item = &A> {
        self.root.iter().map(|r| &r.aux.0)
    }

    /// Find `name` and the link that points at it (a slot or a `next`).
    #[inline]
    fn find<'g>(
        &'g self,
        hash: u64,
        name: &[u8],
        _guard: &'g Guard,
    ) -> Option<(&'g AtomicPtr<Node>, &'g Node)> {
        let mut link = &self.root[slot_index(hash, 0)].slot.0;
        let mut depth = 0;
        loop {
            let p = link.load(Ordering::Acquire);
            if let Some(sub) = sub_level(p) {
                // Only a slot holds a tag: descend.
                depth += 1;
                // SAFETY: sub-levels live as long as the table.
                link = &unsafe { &*sub }.slots[slot_index(hash, depth)];
                continue;
            }
            if p.is_null() {
                return None;
            }
            // SAFETY: nodes reachable from the table are freed only
            // through `defer` after being unlinked, after `_guard`.
            let node = unsafe { &*p };
            // The node's fields are plain (fixed once it is linked): tell
            // the conflict audit what this lookup reads of its line, which
            // a removal's store to `next` writes (other builds: nothing).
            crate::sync::note_opaque(&node.hash, false);
            if node.hash == hash && same_name(&node.name, name) {
                crate::sync::note_opaque(&node.name, false);
                crate::sync::note_opaque(&node.slot, false);
                return Some((link, node));
            }
            link = &node.next;
        }
    }

    /// The entry `name`, lock-free.
    #[inline]
    pub fn get(&self, name: &[u8], guard: &Guard) -> Option<Slot> {
        let hash = self.hasher.hash_one(name);
        self.find(hash, name, guard).map(|(_, n)| n.slot)
    }

    /// The hash [`get_hashed`](Self::get_hashed) takes for `name`.
    #[inline]
    pub fn hash_of(&self, name: &[u8]) -> u64 {
        self.hasher.hash_one(name)
    }

    /// The entry `name`, whose [`hash_of`](Self::hash_of) is `hash`,
    /// lock-free.
    #[inline]
    pub fn get_hashed(&self, hash: u64, name: &[u8], guard: &Guard) -> Option<Slot> {
        debug_assert_eq!(hash, self.hash_of(name), "a hash of another name");
        self.find(hash, name, guard).map(|(_, n)| n.slot)
    }

    /// The entry `name` with the identity of the node that holds it, for
    /// [`holds`](Self::holds) under the same guard.
    #[inline]
    pub fn get_entry<'g>(&'g self, name: &[u8], guard: &'g Guard) -> Option<EntryRef<'g>> {
        let hash = self.hasher.hash_one(name);
        self.find(hash, name, guard)
            .map(|(_, node)| EntryRef { node })
    }

    /// Is `e` (found under `guard`) still the node linked as its name? A
    /// node, once unlinked (removed, replaced, or copied by a split), is
    /// never linked again, and its memory is not reused while `guard` is
    /// pinned: so `true` means the entry stayed linked from the lookup
    /// until now — what Linux validates with a dentry's `d_seq`, per entry
    /// rather than per directory (a removal of another name does not
    /// disturb this reader).
    #[inline]
    pub fn holds(&self, e: &EntryRef<'_>, guard: &Guard) -> bool {
        self.find(e.node.hash, &e.node.name, guard)
            .is_some_and(|(_, n)| ptr::eq(n, e.node))
    }

    /// Insert or replace `name`; the replaced slot, if any.
    ///
    /// # Safety
    /// The caller is the only writer of `name`'s stripe (holds the owning
    /// directory's lock of that stripe, or owns the table).
    pub unsafe fn insert(&self, name: &[u8], slot: Slot, guard: &Guard) -> Option<Slot> {
        let hash = self.hasher.hash_one(name);
        let node = Box::into_raw(Box::new(Node {
            hash,
            name: name.into(),
            slot,
            next: AtomicPtr::new(ptr::null_mut()),
        }));
        // SAFETY (all derefs of `node` below): it is ours until published.
        if let Some((link, old)) = self.find(hash, name, guard) {
            unsafe { &*node }
                .next
                .store(old.next.load(Ordering::Relaxed), Ordering::Relaxed);
            link.store(node, Ordering::Release);
            let old_slot = old.slot;
            let old_ptr = old as *const Node as *mut Node;
            // SAFETY: `old` is unlinked; readers that reached it hold a
            // guard, and the free runs after all of them.
            unsafe { guard.defer_unchecked(move || drop(Box::from_raw(old_ptr))) };
            return Some(old_slot);
        }
        let (leaf, depth) = self.leaf(hash);
        let head = leaf.load(Ordering::Relaxed);
        if depth < MAX_DEPTH && chain_len(head) >= SPLIT_AT {
            let mut nodes = vec![node];
            let mut p = head;
            while !p.is_null() {
                // SAFETY: the writer owns the chain's shape; nodes are live.
                let n = unsafe { &*p };
                nodes.push(Box::into_raw(Box::new(Node {
                    hash: n.hash,
                    name: n.name.clone(),
                    slot: n.slot,
                    next: AtomicPtr::new(ptr::null_mut()),
                })));
                p = n.next.load(Ordering::Relaxed);
            }
            let sub = build_level(nodes, depth + 1);
            leaf.store(tagged(Box::into_raw(sub)), Ordering::Release);
            // SAFETY: the old chain is unreachable from the table now;
            // readers on it hold guards, and the free runs after them.
            unsafe { guard.defer_unchecked(move || free_chain(head)) };
        } else {
            unsafe { &*node }.next.store(head, Ordering::Relaxed);
            leaf.store(node, Ordering::Release);
        }
        None
    }

    /// Remove `name`; its slot, if it was there.
    ///
    /// # Safety
    /// As [`insert`](Self::insert).
    pub unsafe fn remove(&self, name: &[u8], guard: &Guard) -> Option<Slot> {
        let hash = self.hasher.hash_one(name);
        let (link, old) = self.find(hash, name, guard)?;
        link.store(old.next.load(Ordering::Relaxed), Ordering::Release);
        let slot = old.slot;
        let old_ptr = old as *const Node as *mut Node;
        // SAFETY: unlinked above; freed after every guard that saw it.
        unsafe { guard.defer_unchecked(move || drop(Box::from_raw(old_ptr))) };
        Some(slot)
    }

    /// The slot (never tagged when returned: only the writer splits) where
    /// a chain for `hash` lives, and its depth. Writer (of its stripe) only.
    fn leaf(&self, hash: u64) -> (&AtomicPtr<Node>, u32) {
        let mut slot = &self.root[slot_index(hash, 0)].slot.0;
        let mut depth = 0;
        loop {
            match sub_level(slot.load(Ordering::Relaxed)) {
                // SAFETY: sub-levels live as long as the table.
                Some(sub) => slot = &unsafe { &*sub }.slots[slot_index(hash, depth + 1)],
                None => return (slot, depth),
            }
            depth += 1;
        }
    }
}

impl<A> Drop for NameTable<A> {
    fn drop(&mut self) {
        for r in &self.root {
            // SAFETY: `&mut self`: nobody else can reach the table.
            unsafe { free_slot(&r.slot.0) };
        }
    }
}

/// Nodes in the chain from `p` (writer only).
fn chain_len(mut p: *mut Node) -> usize {
    let mut n = 0;
    while !p.is_null() {
        n += 1;
        // SAFETY: the writer owns the chain's shape; nodes are live.
        p = unsafe { &*p }.next.load(Ordering::Relaxed);
    }
    n
}

/// A new level at `depth` holding `nodes` (which nobody else can see yet),
/// any slot that would hold more than [`SPLIT_AT`] of them split into a
/// level of its own in turn (above [`MAX_DEPTH`]), so that no chain ever
/// outgrows the threshold — however unevenly the split's names hash.
fn build_level(nodes: Vec<*mut Node>, depth: u32) -> Box<Level> {
    let level = Level::new();
    let mut groups: [Vec<*mut Node>; FANOUT] = std::array::from_fn(|_| Vec::new());
    for n in nodes {
        // SAFETY: unpublished nodes, owned by this thread.
        let hash = unsafe { &*n }.hash;
        groups[slot_index(hash, depth)].push(n);
    }
    for (slot, group) in level.slots.iter().zip(groups) {
        if group.len() > SPLIT_AT && depth < MAX_DEPTH {
            let sub = build_level(group, depth + 1);
            slot.store(tagged(Box::into_raw(sub)), Ordering::Relaxed);
        } else {
            for n in group {
                push_unpublished(&level, depth, n);
            }
        }
    }
    level
}

/// Link `node` at the head of its chain in `level` (at `depth`), which
/// nobody else can see yet.
fn push_unpublished(level: &Level, depth: u32, node: *mut Node) {
    // SAFETY: `node` and `level` are unpublished: this thread owns both.
    let n = unsafe { &*node };
    let slot = &level.slots[slot_index(n.hash, depth)];
    n.next
        .store(slot.load(Ordering::Relaxed), Ordering::Relaxed);
    slot.store(node, Ordering::Relaxed);
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

    fn depth_of(t: &NameTable<()>, name: &[u8]) -> u32 {
        t.leaf(t.hasher.hash_one(name)).1
    }

    #[test]
    fn splits_keep_every_entry_and_removals_and_replacements_work() {
        let t = NameTable::<()>::new();
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
    fn same_name_agrees_with_slice_equality() {
        // Every length around the word boundaries, equal names and names
        // differing in exactly one byte at each position, or in length.
        for n in 0..40usize {
            let a: Vec<u8> = (0..n as u8).map(|i| b'a' + i % 26).collect();
            assert!(same_name(&a, &a.clone()), "len {n}");
            for i in 0..n {
                let mut b = a.clone();
                b[i] ^= 0x20;
                assert!(!same_name(&a, &b), "len {n}, byte {i}");
                assert!(!same_name(&b, &a), "len {n}, byte {i}");
            }
            let mut longer = a.clone();
            longer.push(b'a');
            assert!(!same_name(&a, &longer), "len {n} vs {}", n + 1);
        }
    }

    #[test]
    fn no_chain_outgrows_the_split_threshold_above_the_deepest_level() {
        let t = NameTable::<()>::new();
        let guard = crossbeam_epoch::pin();
        // Enough splits that some put all their nodes in one slot (each
        // does with probability 16^-4): those must split again at once.
        for i in 0..200_000u64 {
            // SAFETY: this test is the only writer.
            unsafe { t.insert(format!("name-{i}").as_bytes(), slot(i), &guard) };
        }
        fn check(s: &AtomicPtr<Node>) {
            let p = s.load(Ordering::Relaxed);
            match sub_level(p) {
                // SAFETY: sub-levels live as long as the table.
                Some(sub) => unsafe { &*sub }.slots.iter().for_each(check),
                None => assert!(chain_len(p) <= SPLIT_AT),
            }
        }
        t.root.iter().for_each(|r| check(&r.slot.0));
    }
}
