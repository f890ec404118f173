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
//! writes a link it reads: an insert links its node at the head of its
//! chain (the slot), a removal writes only its own node (below), and the
//! next writer of the chain unlinks what was removed. Cost: two lines per
//! stripe, 2 KiB per loaded directory index.
//! Each slot holds either a chain of
//! nodes (immutable but for `next` and `pending`; two lines each, `head`
//! what a lookup passing over the node reads and `body` what only a lookup
//! of its own name reads) or, tagged by the pointer's low bit, a
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
//! * `Node::pending` (`AtomicPtr<Ticket>`, tagged with a role index, on
//!   the node's body line): null but for the names of a rename in progress
//!   (below), and [`dead`] for a removed name. Written by the writer only
//!   — before a new node is linked, or with a Release store on a linked
//!   node the rename or a removal removes, and cleared (Release) by the
//!   rename's cleanup; a reader loads it (Acquire) only on a node whose
//!   name it matched. `Aux::dead` (per stripe, beside the owner's state):
//!   the stripe's dead nodes still linked, written by its writer only.
//!
//! Removals: removing a name marks its node dead (one Release store to
//! `pending`, on the node's body line) and leaves it linked; a reader that
//! matches a dead node finds no entry. The next writer of the node's chain
//! (an insert, removal or rename stage of any name hashing there) first
//! unlinks the chain's dead nodes ([`NameTable::find_sweeping`]) and frees them
//! through `defer`, so a writer never meets a dead node and each name has
//! at most one linked node. Unlinking at once would write the link the
//! node hangs from — the slot or the previous node's `next`, which a
//! lookup of another name of the chain reads — so two operations on two
//! names that share a chain (1 in 16 pairs of names in a small
//! directory) would share a line: a removal marked instead writes only its
//! node's body, which a lookup passing over the node does not read. A
//! stripe keeps at most [`DEAD_MAX`] dead nodes (beyond, a removal unlinks
//! at once): whatever is removed, a directory holds at most 64 of them
//! until its chains are written again or its index is dropped. Cost: a
//! node is two lines, 128 bytes (it was one line plus an allocation for
//! its name; names of up to 46 bytes now live in the head line). A reader
//! standing on a dead node that is then unlinked follows its frozen `next`
//! as for any unlinked node. `Ticket::committed` (`AtomicBool`): stored once,
//!   Release, by the renamer; loaded Acquire by readers that found a
//!   tagged node. `Role`'s fields: written before the node they describe
//!   is published or tagged, read-only after.
//!
//! Renames: a rename's changes of names switch at one instant for
//! readers. The renamer, holding the stripes of every name it changes,
//! *stages* each against one [`Ticket`] (pending): a name it (re)points
//! gets a new node tagged "new" in place of the node linked as the name
//! ([`NameTable::stage_put`]: the old node is unlinked but not freed, and
//! the ticket's role records it), a name it removes has its node tagged
//! "old" in place ([`NameTable::stage_remove`]). A reader that matched a
//! node resolves it ([`resolve`]) with one load of the ticket's word: an
//! untagged node is the entry; a "new" node is the entry once committed,
//! before that the node it replaced (or no entry); an "old" node is the
//! entry until committed, then there is none. The commit
//! ([`Ticket::commit`], one Release store) switches every staged name at
//! once. Then the renamer *finishes* each name under the same stripes
//! ([`NameTable::finish`]): it clears a new node's tag (the entry it
//! already was) and frees the node it replaced through `defer`, and
//! removes an old node as a removal does (marks it dead in place of its
//! tag); then it frees the ticket through `defer`. So at
//! any instant each name has at most one linked node, a chain looks the
//! same to a writer as before (only the renamer, under its stripes, sees
//! tags), and a split copies a tagged node with its tag.
//!
//! Why it is linearizable: a reader's answer for a name is the entry at
//! the instant it loaded the link to the node it matched, or at the
//! instant it loaded the node's tag or the ticket's word; each node's time
//! as the entry is one interval (a plain node: from its link until a
//! change unlinks it, or until the commit of a rename that replaced or
//! tagged it; a new node: from its rename's commit on), so a
//! validation that finds the same resolved node again ([`NameTable::holds`])
//! proves the entry held throughout. And a reader that saw a rename's
//! commit (the word, or a tag cleared after it, or an old node unlinked
//! after it: all Release stores after the commit, loaded Acquire) sees,
//! in every later lookup, every node the rename staged before it.
//! Reclamation: a replaced node and the ticket are reachable only through
//! tags (and the ticket's roles), which the cleanup clears or unlinks
//! before it defers their free, so only guards pinned before can reach
//! them.
//!
//! No locks here; the owner's stripe locks serialise the writers of each
//! stripe.

use std::hash::BuildHasher;
use std::ptr;

use crossbeam_epoch::Guard;
use lanefs_store::CacheLine;

use crate::dir::Slot;
use crate::sync::{AtomicBool, AtomicPtr, AtomicU32, Ordering};

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

/// One entry; only `next` and `pending` change after it is linked, and
/// only by the writer. Two lines: `head`, what a lookup that passes over
/// the node reads (its hash, and its name on a hash match, and the link
/// on), and `body`, what only a lookup that matched it reads and what a
/// removal of its name writes (module doc, "Removals"): so removing one
/// name writes nothing that a lookup of another name of its chain reads.
struct Node {
    head: CacheLine<NodeHead>,
    body: CacheLine<NodeBody>,
}

struct NodeHead {
    hash: u64,
    next: AtomicPtr<Node>,
    name: NodeName,
}

/// Bytes of a name kept in the node's head line itself.
const INLINE_NAME: usize = 46;

/// A node's name: in the head line up to [`INLINE_NAME`] bytes (most
/// names: no allocation of its own, and no second line to read on a hash
/// match), else boxed.
#[derive(Clone)]
enum NodeName {
    Inline { len: u8, bytes: [u8; INLINE_NAME] },
    Boxed(Box<[u8]>),
}

impl NodeName {
    fn new(name: &[u8]) -> NodeName {
        if name.len() <= INLINE_NAME {
            let mut bytes = [0u8; INLINE_NAME];
            bytes[..name.len()].copy_from_slice(name);
            NodeName::Inline {
                len: name.len() as u8,
                bytes,
            }
        } else {
            NodeName::Boxed(name.into())
        }
    }

    #[inline]
    fn get(&self) -> &[u8] {
        match self {
            NodeName::Inline { len, bytes } => &bytes[..*len as usize],
            NodeName::Boxed(b) => b,
        }
    }
}

struct NodeBody {
    slot: Slot,
    /// Null; or [`DEAD`], the name removed (the node waits, linked, for
    /// its chain's next writer to unlink it); or the [`Ticket`] of the
    /// rename in progress this node takes part in, tagged with the node's
    /// role in it (the index into `Ticket::roles`): set before the node is
    /// linked (a new node) or in place (an old one, the name the rename
    /// removes), cleared or set to `DEAD` by the rename's cleanup (module
    /// doc, "Renames").
    pending: AtomicPtr<Ticket>,
}

// A node is one 128-byte allocation: two lines.
#[cfg(all(
    target_pointer_width = "64",
    not(lanefs_shuttle),
    not(feature = "audit")
))]
const _: () = assert!(std::mem::size_of::<Node>() == 128);

/// `NodeBody::pending` of a removed name's node: no ticket's address (those
/// are aligned to 8, tagged with a role of 0 or 1).
fn dead() -> *mut Ticket {
    ptr::without_provenance_mut(2)
}

impl Node {
    fn new(hash: u64, name: NodeName, slot: Slot, pending: *mut Ticket) -> *mut Node {
        Box::into_raw(Box::new(Node {
            head: CacheLine(NodeHead {
                hash,
                name,
                next: AtomicPtr::new(ptr::null_mut()),
            }),
            body: CacheLine(NodeBody {
                slot,
                pending: AtomicPtr::new(pending),
            }),
        }))
    }

    /// The node copied, for a split (its rename's part too).
    fn copy(&self) -> *mut Node {
        Node::new(
            self.head.hash,
            self.head.name.clone(),
            self.body.slot,
            self.body.pending.load(Ordering::Relaxed),
        )
    }

    /// Removed, waiting to be unlinked (writer's view).
    fn is_dead(&self) -> bool {
        self.body.pending.load(Ordering::Relaxed) == dead()
    }

    /// Whether this node is linked as `name` (of hash `hash`). Its head's
    /// fields are plain (fixed once it is linked): tell the conflict audit
    /// what a walk reads of its lines — the hash, and on a match the name
    /// and the slot (other builds: nothing).
    #[inline]
    fn is_named(&self, hash: u64, name: &[u8]) -> bool {
        crate::sync::note_opaque(&self.head.hash, false);
        if self.head.hash == hash && same_name(self.head.name.get(), name) {
            crate::sync::note_opaque(&self.head.name, false);
            crate::sync::note_opaque(&self.body.slot, false);
            return true;
        }
        false
    }
}

/// A rename's switch: the one word whose store makes all of a rename's
/// changes of names visible at once (module doc, "Renames"). Up to
/// [`ROLES`] names take part, each node tagged with its role.
pub(crate) struct Ticket {
    committed: AtomicBool,
    roles: [Role; ROLES],
}

/// Names one rename changes: the new name and the old one, or the two
/// names of an exchange.
pub(crate) const ROLES: usize = 2;
/// Low bits of a tagged ticket pointer: the role's index.
const ROLE_MASK: usize = 1;
const _: () = assert!(ROLES <= ROLE_MASK + 1 && std::mem::align_of::<Ticket>() > ROLE_MASK);

/// One name's part in a rename. Written by the renamer before the node
/// it describes is linked or tagged (a Release store, which a reader's
/// Acquire load of the link or tag orders after), read-only after.
/// Plain `std` atomics: the audit sees the node's tag, which is read
/// first and written with it.
#[derive(Default)]
struct Role {
    /// An old node: its entry holds until the ticket commits, then the
    /// name is gone.
    old: std::sync::atomic::AtomicBool,
    /// A new node: what held the name until the ticket commits — the
    /// node it replaced (unlinked, freed by the cleanup), or null for a
    /// name that did not exist.
    replaces: std::sync::atomic::AtomicPtr<Node>,
}

impl Ticket {
    /// A pending ticket, ours until its first node is published.
    pub fn alloc() -> *mut Ticket {
        Box::into_raw(Box::new(Ticket {
            committed: AtomicBool::new(false),
            roles: Default::default(),
        }))
    }

    /// Commit: every new node holds its name from now on, every old one
    /// none. One Release store (what readers Acquire-load).
    pub fn commit(&self) {
        self.committed.store(true, Ordering::Release);
    }

    /// Free `ticket` after every guard that could still reach it.
    ///
    /// # Safety
    /// Every node tagged with it was untagged or unlinked (its names'
    /// [`NameTable::finish`]); freed once.
    pub unsafe fn retire(ticket: *mut Ticket, guard: &Guard) {
        // SAFETY: the contract: only guards pinned now can reach it.
        unsafe { guard.defer_unchecked(move || drop(Box::from_raw(ticket))) };
    }
}

/// `t` tagged with role `i`.
fn tag_role(t: *mut Ticket, i: usize) -> *mut Ticket {
    debug_assert!(i < ROLES);
    (t as usize | i) as *mut Ticket
}

/// A tagged ticket pointer's ticket and role.
fn untag_role(p: *mut Ticket) -> (*mut Ticket, usize) {
    (
        (p as usize & !ROLE_MASK) as *mut Ticket,
        p as usize & ROLE_MASK,
    )
}

/// The node whose entry `name` is now, given `n`, the node linked as the
/// name (a reader's view): nothing if `n` is [`dead`] (removed); `n`
/// itself unless a rename in progress tags it — then `n` (a new node of a
/// committed ticket, or an old node of a pending one), the node `n`
/// replaced (a new node of a pending ticket: never a dead one, since a
/// stage sweeps its chain first), or nothing (an old node of a committed
/// ticket; a new node of a pending one that replaced nothing). One load
/// of the ticket's word decides it.
///
/// # Safety
/// `n` was reached under `_guard`, which keeps what its tag leads to.
#[inline]
unsafe fn resolve<'g>(n: &'g Node, _guard: &'g Guard) -> Option<&'g Node> {
    let p = n.body.pending.load(Ordering::Acquire);
    if p.is_null() {
        return Some(n);
    }
    if p == dead() {
        return None;
    }
    resolve_pending(n, p)
}

#[cold]
#[inline(never)]
fn resolve_pending(n: &Node, p: *mut Ticket) -> Option<&Node> {
    let (t, i) = untag_role(p);
    // SAFETY: a ticket is freed through `defer` after every node that
    // points at it was untagged or unlinked, so after the guard that
    // reached `n` tagged.
    let ticket = unsafe { &*t };
    let role = &ticket.roles[i];
    let committed = ticket.committed.load(Ordering::Acquire);
    if role.old.load(Ordering::Relaxed) {
        return (!committed).then_some(n);
    }
    if committed {
        return Some(n);
    }
    // SAFETY: the replaced node is freed through `defer` only after `n`
    // is untagged (the cleanup), so after the guard that reached `n`.
    unsafe { role.replaces.load(Ordering::Relaxed).as_ref() }
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
    aux: CacheLine<Aux<A>>,
}

/// A stripe's state: the owner's, and the table's count of removed nodes
/// still linked in the stripe (written by the stripe's writer only, so
/// Relaxed; at most [`DEAD_MAX`]).
struct Aux<A> {
    owner: A,
    dead: AtomicU32,
}

/// The most removed nodes a stripe leaves linked: past it, a removal
/// unlinks its node at once. So a directory holds at most `FANOUT *
/// DEAD_MAX` of them, whatever was removed from it.
const DEAD_MAX: u32 = 4;

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

/// Free `node`, unlinked, after every guard that could have reached it;
/// its slot.
///
/// # Safety
/// `node` is unlinked and reachable only by guards pinned now; freed once.
unsafe fn defer_free(node: *mut Node, guard: &Guard) -> Slot {
    // SAFETY: the caller's contract.
    unsafe {
        let slot = (*node).body.0.slot;
        guard.defer_unchecked(move || drop(Box::from_raw(node)));
        slot
    }
}

/// What [`NameTable::finish`] did for a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Finished {
    /// A new node holding `new`, in place of `replaced` or of nothing.
    Put { new: Slot, replaced: Option<Slot> },
    /// An old node, removed: its slot.
    Removed(Slot),
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
        p = node.head.next.load(Ordering::Relaxed);
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
        self.node.body.slot
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
                aux: CacheLine(Aux {
                    owner: A::default(),
                    dead: AtomicU32::new(0),
                }),
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
        &self.root[s].aux.owner
    }

    /// Every stripe's owner state, in stripe order.
    pub fn stripes(&self) -> impl Iterator<Item = &A> {
        self.root.iter().map(|r| &r.aux.owner)
    }

    /// Find the node linked as `name` and the link that points at it (a
    /// slot or a `next`): the writer's view, whatever rename tags it.
    #[inline]
    fn find_linked<'g>(
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
            if node.is_named(hash, name) {
                return Some((link, node));
            }
            link = &node.head.next;
        }
    }

    /// The node whose entry `name` is now (a reader's view: [`resolve`]).
    #[inline]
    fn find<'g>(&'g self, hash: u64, name: &[u8], guard: &'g Guard) -> Option<&'g Node> {
        let (_, n) = self.find_linked(hash, name, guard)?;
        // SAFETY: `n` was reached under `guard`.
        unsafe { resolve(n, guard) }
    }

    /// The entry `name`, lock-free.
    #[inline]
    pub fn get(&self, name: &[u8], guard: &Guard) -> Option<Slot> {
        let hash = self.hasher.hash_one(name);
        self.find(hash, name, guard).map(|n| n.body.slot)
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
        self.find(hash, name, guard).map(|n| n.body.slot)
    }

    /// The entry `name` with the identity of the node that holds it, for
    /// [`holds`](Self::holds) under the same guard.
    #[inline]
    pub fn get_entry<'g>(&'g self, name: &[u8], guard: &'g Guard) -> Option<EntryRef<'g>> {
        let hash = self.hasher.hash_one(name);
        self.find(hash, name, guard).map(|node| EntryRef { node })
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
        self.find(e.node.head.hash, e.node.head.name.get(), guard)
            .is_some_and(|n| ptr::eq(n, e.node))
    }

    /// Insert or replace `name`; the replaced slot, if any.
    ///
    /// # Safety
    /// The caller is the only writer of `name`'s stripe (holds the owning
    /// directory's lock of that stripe, or owns the table), and no rename
    /// of it is in progress (a rename holds the stripe until its cleanup).
    pub unsafe fn insert(&self, name: &[u8], slot: Slot, guard: &Guard) -> Option<Slot> {
        // SAFETY: this function's contract.
        let (old, _) = unsafe { self.link_new(name, slot, ptr::null_mut(), guard) };
        // SAFETY: `old` is unlinked; readers that reached it hold a
        // guard, and the free runs after all of them.
        old.map(|old| unsafe { defer_free(old, guard) })
    }

    /// Link a new node for `name` with `pending`, in place of the node
    /// linked as it (unlinked, not freed: returned) or as a new entry.
    /// Also whether it was a new entry.
    ///
    /// # Safety
    /// As [`insert`](Self::insert).
    unsafe fn link_new(
        &self,
        name: &[u8],
        slot: Slot,
        pending: *mut Ticket,
        guard: &Guard,
    ) -> (Option<*mut Node>, bool) {
        let hash = self.hasher.hash_one(name);
        let node = Node::new(hash, NodeName::new(name), slot, pending);
        // SAFETY: this function's contract (and, for all derefs of `node`
        // below: it is ours until published).
        if let Some((link, old)) = unsafe { self.find_sweeping(hash, name, guard) } {
            debug_assert!(
                old.body.pending.load(Ordering::Relaxed).is_null(),
                "a name of a rename in progress replaced"
            );
            unsafe { &*node }
                .head
                .next
                .store(old.head.next.load(Ordering::Relaxed), Ordering::Relaxed);
            link.store(node, Ordering::Release);
            return (Some(old as *const Node as *mut Node), false);
        }
        let (leaf, depth) = self.leaf(hash);
        let head = leaf.load(Ordering::Relaxed);
        if depth < MAX_DEPTH && chain_len(head) >= SPLIT_AT {
            let mut nodes = vec![node];
            let mut p = head;
            while !p.is_null() {
                // SAFETY: the writer owns the chain's shape; nodes are live.
                let n = unsafe { &*p };
                nodes.push(n.copy());
                p = n.head.next.load(Ordering::Relaxed);
            }
            let sub = build_level(nodes, depth + 1);
            leaf.store(tagged(Box::into_raw(sub)), Ordering::Release);
            // SAFETY: the old chain is unreachable from the table now;
            // readers on it hold guards, and the free runs after them.
            // (Its nodes' tickets, and the nodes those replaced, are
            // referenced by the copies: freed by the rename's cleanup.)
            unsafe { guard.defer_unchecked(move || free_chain(head)) };
        } else {
            unsafe { &*node }.head.next.store(head, Ordering::Relaxed);
            leaf.store(node, Ordering::Release);
        }
        (None, true)
    }

    /// Remove `name`; its slot, if it was there.
    ///
    /// # Safety
    /// As [`insert`](Self::insert).
    pub unsafe fn remove(&self, name: &[u8], guard: &Guard) -> Option<Slot> {
        let hash = self.hasher.hash_one(name);
        // SAFETY: this function's contract.
        let (link, old) = unsafe { self.find_sweeping(hash, name, guard) }?;
        debug_assert!(
            old.body.pending.load(Ordering::Relaxed).is_null(),
            "a name of a rename in progress removed"
        );
        // SAFETY: this function's contract.
        Some(unsafe { self.take_out(hash, link, old, guard) })
    }

    /// Remove `old`, linked at `link` and live: mark it [`dead`] (one
    /// Release store to its body; it stays linked for its chain's next
    /// writer to unlink) while its stripe holds fewer than [`DEAD_MAX`]
    /// such nodes, else unlink it now. Its slot.
    ///
    /// # Safety
    /// As [`insert`](Self::insert); `link` points at `old`, which `hash`
    /// is the hash of.
    unsafe fn take_out(
        &self,
        hash: u64,
        link: &AtomicPtr<Node>,
        old: &Node,
        guard: &Guard,
    ) -> Slot {
        let dead_here = &self.root[slot_index(hash, 0)].aux.dead;
        let n = dead_here.load(Ordering::Relaxed);
        if n < DEAD_MAX {
            dead_here.store(n + 1, Ordering::Relaxed);
            old.body.pending.store(dead(), Ordering::Release);
            return old.body.slot;
        }
        // SAFETY: the contract.
        unsafe { self.unlink(link, old, guard) }
    }

    /// The writer's find: the node linked as `name` (live) and the link
    /// that points at it, unlinking on the way the dead nodes of its chain
    /// (so that a writer never meets one: each name has one linked node,
    /// live). One descent, as [`find_linked`](Self::find_linked) when the
    /// stripe holds no dead node.
    ///
    /// # Safety
    /// As [`insert`](Self::insert), for `hash`'s stripe.
    unsafe fn find_sweeping<'g>(
        &'g self,
        hash: u64,
        name: &[u8],
        guard: &'g Guard,
    ) -> Option<(&'g AtomicPtr<Node>, &'g Node)> {
        let dead_here = &self.root[slot_index(hash, 0)].aux.dead;
        let mut left = dead_here.load(Ordering::Relaxed);
        if left == 0 {
            return self.find_linked(hash, name, guard);
        }
        let (mut link, _) = self.leaf(hash);
        let mut found = None;
        loop {
            let p = link.load(Ordering::Relaxed);
            if p.is_null() {
                break;
            }
            // SAFETY: the writer owns the chain's shape; nodes are live.
            let n = unsafe { &*p };
            if n.is_dead() {
                left -= 1;
                // SAFETY: the contract; `link` points at `n`.
                unsafe { self.unlink(link, n, guard) };
                continue;
            }
            if found.is_none() && n.is_named(hash, name) {
                found = Some((link, n));
            }
            link = &n.head.next;
        }
        dead_here.store(left, Ordering::Relaxed);
        found
    }

    /// Unlink `old` from `link` and free it after every guard that saw it.
    ///
    /// # Safety
    /// As [`insert`](Self::insert); `link` points at `old`.
    unsafe fn unlink(&self, link: &AtomicPtr<Node>, old: &Node, guard: &Guard) -> Slot {
        link.store(old.head.next.load(Ordering::Relaxed), Ordering::Release);
        // SAFETY: unlinked above; freed after every guard that saw it.
        unsafe { defer_free(old as *const Node as *mut Node, guard) }
    }

    /// Rename, first step, for a name that the rename (re)points: link a
    /// new node for `name` holding `slot`, tagged with role `role` of
    /// `ticket`, in place of the node linked as it, if any (which stays
    /// the name's entry, unlinked, until the ticket commits). Nothing
    /// changes for readers until the commit. Returns the replaced slot and
    /// whether the name is new to the table.
    ///
    /// # Safety
    /// As [`insert`](Self::insert); `ticket` is pending, from
    /// [`Ticket::alloc`], not freed before [`finish`](Self::finish), and its
    /// role `role` is used for this name only.
    pub unsafe fn stage_put(
        &self,
        name: &[u8],
        slot: Slot,
        ticket: *mut Ticket,
        role: usize,
        guard: &Guard,
    ) -> (Option<Slot>, bool) {
        // SAFETY: the contract. The role is written before the node is
        // published (the Release store of its link).
        unsafe {
            let r = &(*ticket).roles[role];
            let old = match self.find_sweeping(self.hasher.hash_one(name), name, guard) {
                Some((_, old)) => old as *const Node as *mut Node,
                None => ptr::null_mut(),
            };
            r.replaces.store(old, Ordering::Relaxed);
            let (replaced, new) = self.link_new(name, slot, tag_role(ticket, role), guard);
            debug_assert_eq!(replaced.unwrap_or(ptr::null_mut()), old);
            (replaced.map(|o| (*o).body.0.slot), new)
        }
    }

    /// Rename, first step, for the name that the rename removes: tag the
    /// node linked as `name` with role `role` of `ticket` (it stays the
    /// name's entry until the ticket commits). Its slot; `None` (nothing
    /// tagged) when `name` is not there.
    ///
    /// # Safety
    /// As [`stage_put`](Self::stage_put).
    pub unsafe fn stage_remove(
        &self,
        name: &[u8],
        ticket: *mut Ticket,
        role: usize,
        guard: &Guard,
    ) -> Option<Slot> {
        let hash = self.hasher.hash_one(name);
        // SAFETY: the contract.
        let (_, node) = unsafe { self.find_sweeping(hash, name, guard) }?;
        debug_assert!(node.body.pending.load(Ordering::Relaxed).is_null());
        // SAFETY: the contract; the role is written before the tag's
        // Release store.
        unsafe { (*ticket).roles[role].old.store(true, Ordering::Relaxed) };
        node.body
            .pending
            .store(tag_role(ticket, role), Ordering::Release);
        Some(node.body.slot)
    }

    /// Rename, last step, once its ticket committed: a new node loses its
    /// tag (the node it replaced is freed after every guard that could
    /// reach it), an old one is removed (marked dead, or unlinked: as
    /// [`remove`](Self::remove)). What changed: `Put(replaced)` or
    /// `Removed(slot)`; `None` if `name` took no part.
    ///
    /// # Safety
    /// As [`insert`](Self::insert); the ticket that tags `name` is
    /// committed. The caller frees the ticket through `defer` after the
    /// last `finish` of its names.
    pub unsafe fn finish(&self, name: &[u8], guard: &Guard) -> Option<Finished> {
        let hash = self.hasher.hash_one(name);
        let (link, node) = self.find_linked(hash, name, guard)?;
        let p = node.body.pending.load(Ordering::Relaxed);
        if p.is_null() || p == dead() {
            return None;
        }
        let (t, i) = untag_role(p);
        // SAFETY: tickets live until their renamer's last `finish`.
        let role = unsafe { &(*t).roles[i] };
        debug_assert!(unsafe { &*t }.committed.load(Ordering::Relaxed));
        if role.old.load(Ordering::Relaxed) {
            // SAFETY: the contract.
            return Some(Finished::Removed(unsafe {
                self.take_out(hash, link, node, guard)
            }));
        }
        node.body.pending.store(ptr::null_mut(), Ordering::Release);
        let replaced = role.replaces.load(Ordering::Relaxed);
        // SAFETY: unlinked by `stage_put`; reachable only through the
        // tag cleared above (and tags of split nodes unlinked before), so
        // only by guards pinned before this.
        let replaced = (!replaced.is_null()).then(|| unsafe { defer_free(replaced, guard) });
        Some(Finished::Put {
            new: node.body.slot,
            replaced,
        })
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
        p = unsafe { &*p }.head.next.load(Ordering::Relaxed);
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
        let hash = unsafe { &*n }.head.hash;
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
    let slot = &level.slots[slot_index(n.head.hash, depth)];
    n.head
        .next
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

    /// A rename's protocol at the table: staged changes are invisible
    /// until the ticket commits, then all visible at once; a split that
    /// copies a tagged node keeps its part in the rename; the cleanup
    /// leaves plain nodes.
    #[test]
    fn staged_names_switch_at_the_commit_and_splits_keep_their_part() {
        let t = NameTable::<()>::new();
        let g = crossbeam_epoch::pin();
        // SAFETY (every `unsafe` below): this test is the only writer; the
        // ticket lives until `retire`, after the `finish`es.
        unsafe {
            assert_eq!(t.insert(b"a", slot(1), &g), None);
            assert_eq!(t.insert(b"c", slot(3), &g), None);
            let ticket = Ticket::alloc();
            // Exchange-like: `c` re-pointed, `a` removed, `b` new.
            assert_eq!(t.stage_remove(b"a", ticket, 0, &g), Some(slot(1)));
            assert_eq!(
                t.stage_put(b"c", slot(30), ticket, 1, &g),
                (Some(slot(3)), false)
            );
            // Enough other names that every chain splits, copying the
            // tagged nodes (with `SPLIT_AT` 4 and 16 slots).
            for i in 100..400 {
                t.insert(format!("f{i}").as_bytes(), slot(i), &g);
            }
            assert!(depth_of(&t, b"a") >= 1 && depth_of(&t, b"c") >= 1);
            let before = |t: &NameTable<()>| {
                assert_eq!(t.get(b"a", &g), Some(slot(1)));
                assert_eq!(t.get(b"c", &g), Some(slot(3)));
            };
            before(&t);
            let e = t.get_entry(b"c", &g).unwrap();
            assert!(t.holds(&e, &g));
            (*ticket).commit();
            assert_eq!(t.get(b"a", &g), None);
            assert_eq!(t.get(b"c", &g), Some(slot(30)));
            // The entry seen before the commit is no longer the name's.
            assert!(!t.holds(&e, &g));
            assert_eq!(t.finish(b"a", &g), Some(Finished::Removed(slot(1))));
            let put = Finished::Put {
                new: slot(30),
                replaced: Some(slot(3)),
            };
            assert_eq!(t.finish(b"c", &g), Some(put));
            // Nothing tagged any more.
            assert_eq!(t.finish(b"c", &g), None);
            assert_eq!(t.finish(b"a", &g), None);
            Ticket::retire(ticket, &g);
            assert_eq!(t.get(b"a", &g), None);
            assert_eq!(t.get(b"c", &g), Some(slot(30)));
            let e = t.get_entry(b"c", &g).unwrap();
            assert!(t.holds(&e, &g));
            for i in 100..400 {
                assert_eq!(t.get(format!("f{i}").as_bytes(), &g), Some(slot(i)));
            }
            // A staged new name is absent until the commit.
            let ticket = Ticket::alloc();
            assert_eq!(t.stage_put(b"n", slot(7), ticket, 0, &g), (None, true));
            assert_eq!(t.get(b"n", &g), None);
            (*ticket).commit();
            assert_eq!(t.get(b"n", &g), Some(slot(7)));
            let put = Finished::Put {
                new: slot(7),
                replaced: None,
            };
            assert_eq!(t.finish(b"n", &g), Some(put));
            Ticket::retire(ticket, &g);
        }
    }

    /// Nodes linked under `slot` (every level), and how many are dead.
    fn linked(slot: &AtomicPtr<Node>) -> (usize, usize) {
        match sub_level(slot.load(Ordering::Relaxed)) {
            // SAFETY: sub-levels live as long as the table.
            Some(sub) => unsafe { &*sub }
                .slots
                .iter()
                .map(linked)
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1)),
            None => {
                let (mut all, mut dead) = (0, 0);
                let mut p = slot.load(Ordering::Relaxed);
                while !p.is_null() {
                    // SAFETY: the test owns the table; nodes are live.
                    let n = unsafe { &*p };
                    all += 1;
                    dead += usize::from(n.is_dead());
                    p = n.head.next.load(Ordering::Relaxed);
                }
                (all, dead)
            }
        }
    }

    /// A removal leaves its node linked, dead, for the chain's next writer
    /// (so that it writes nothing a lookup of another name reads): the
    /// name is gone for lookups and `holds` at once, comes back with a
    /// new insert, and no stripe keeps more than `DEAD_MAX` dead nodes,
    /// whatever is removed; the stripe's count is exact.
    #[test]
    fn removals_leave_at_most_dead_max_nodes_per_stripe() {
        let t = NameTable::<()>::new();
        let g = crossbeam_epoch::pin();
        let n = 3000u64;
        let name = |i: u64| format!("f{i}").into_bytes();
        // SAFETY (every `unsafe` below): this test is the only writer.
        unsafe {
            for i in 0..n {
                t.insert(&name(i), slot(i), &g);
            }
            let e = t.get_entry(&name(7), &g).unwrap();
            assert_eq!(t.remove(&name(7), &g), Some(slot(7)));
            assert_eq!(t.get(&name(7), &g), None);
            assert!(!t.holds(&e, &g));
            assert_eq!(t.remove(&name(7), &g), None);
            assert_eq!(t.insert(&name(7), slot(77), &g), None);
            assert_eq!(t.get(&name(7), &g), Some(slot(77)));
            for i in (0..n).filter(|i| i % 3 != 0) {
                let want = if i != 7 { slot(i) } else { slot(77) };
                assert_eq!(t.remove(&name(i), &g), Some(want), "f{i}");
            }
            for s in 0..FANOUT {
                let (all, dead) = linked(&t.root[s].slot.0);
                assert!(dead <= DEAD_MAX as usize, "stripe {s}: {dead} dead");
                assert_eq!(dead, t.root[s].aux.dead.load(Ordering::Relaxed) as usize);
                assert!(all >= dead);
            }
            for i in 0..n {
                let want = (i % 3 == 0).then(|| slot(i));
                assert_eq!(t.get(&name(i), &g), want, "f{i}");
            }
            // Inserts sweep the chains they write: every name back.
            for i in (0..n).filter(|i| i % 3 != 0) {
                assert_eq!(t.insert(&name(i), slot(i + n), &g), None, "f{i}");
            }
            let (all, dead) = t
                .root
                .iter()
                .map(|r| linked(&r.slot.0))
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
            assert_eq!(all - dead, n as usize);
            // Renames: a removed old name is marked dead too.
            let ticket = Ticket::alloc();
            assert_eq!(t.stage_remove(&name(3), ticket, 0, &g), Some(slot(3)));
            (*ticket).commit();
            assert_eq!(t.get(&name(3), &g), None);
            assert_eq!(t.finish(&name(3), &g), Some(Finished::Removed(slot(3))));
            assert_eq!(t.finish(&name(3), &g), None);
            Ticket::retire(ticket, &g);
            assert_eq!(t.get(&name(3), &g), None);
            assert_eq!(t.insert(&name(3), slot(33), &g), None);
            assert_eq!(t.get(&name(3), &g), Some(slot(33)));
        }
    }

    /// Names kept in the node's head and boxed ones, around the boundary:
    /// each found by itself only, removed and found again.
    #[test]
    fn inline_and_boxed_names() {
        let t = NameTable::<()>::new();
        let g = crossbeam_epoch::pin();
        let names: Vec<Vec<u8>> = (0..=255usize)
            .filter(|n| *n <= 50 || *n % 37 == 0 || *n == 255)
            .flat_map(|n| {
                [
                    vec![b'a'; n],
                    (0..n).map(|i| b'a' + (i % 26) as u8).collect(),
                ]
            })
            .collect();
        // SAFETY (every `unsafe` below): this test is the only writer.
        for (i, n) in names.iter().enumerate() {
            let old = unsafe { t.insert(n, slot(i as u64), &g) };
            // Names of length 0 and 1 are the same in both forms.
            assert!(old.is_none() || n.len() <= 1, "len {}", n.len());
        }
        for (i, n) in names.iter().enumerate() {
            let want = names.iter().rposition(|m| m == n).unwrap();
            assert_eq!(
                t.get(n, &g),
                Some(slot(want as u64)),
                "len {} #{i}",
                n.len()
            );
        }
        let mut longer = vec![b'a'; INLINE_NAME];
        longer.push(b'b');
        assert_eq!(t.get(&longer, &g), None);
        for n in &names {
            unsafe { t.remove(n, &g) };
            assert_eq!(t.get(n, &g), None, "len {}", n.len());
        }
        for (i, n) in names.iter().enumerate() {
            unsafe { t.insert(n, slot(i as u64 + 1000), &g) };
        }
        for n in &names {
            let want = names.iter().rposition(|m| m == n).unwrap();
            assert_eq!(t.get(n, &g), Some(slot(want as u64 + 1000)));
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
