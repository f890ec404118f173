//! `reclaim=deferred` (default): lock-free scans, unregister never waits.
//!
//! The registry is [`REGISTRY_SHARDS`] shards; a shrinker joins the shard of
//! the registering thread's lane, so mounts created on different lanes
//! never touch the same lock or cache line. Each shard is a chain of
//! blocks of [`SLOTS_PER_BLOCK`] epoch-protected slots, each holding one
//! registered entry or null.
//!
//! Locks and atomics (deferred registry):
//! * `SlotShard::writer` (mutex, a leaf): serialises the register/unregister
//!   calls of one shard (find a free slot / the entry's slot; append a
//!   block) and guards the shard's id sequence. Scans never take it. Each
//!   shard is aligned to a line of its own.
//! * a slot (crossbeam-epoch `Atomic<SlotEntry>`; Release store by
//!   register/unregister, Acquire load by scans under a guard): the entry.
//!   Unregister stores null, then `defer_destroy`s the entry, freed once
//!   every guard that could have loaded it is gone. Register allocates only
//!   the entry; unregister allocates nothing and never waits.
//! * `Block::next` (Release store by the writer that appends, Acquire load
//!   by every walker): blocks are only appended, never freed before the
//!   registry is dropped.
//! * A scan calls each entry's shrinker through a reference borrowed under
//!   one pin held for the whole scan (no reference count is taken): the
//!   entry, and so the shrinker, lives until the guard is dropped; a scan
//!   that loaded the entry before unregister may still make that one call
//!   (module `reclaim`). Unregister never waits for the guard.
//!
//! The slots, `Block::next` and `EpochList::list` are crossbeam-epoch
//! `Atomic`s, which cannot be the seam's recording types (the epoch needs
//! its own); each access reports its line to the conflict audit with
//! `sync::note_opaque` (a load as a read, a store as a write). What the
//! audit still cannot see here: the epoch's own state (`pin`,
//! `defer_destroy`: the thread's participant and the global epoch, which
//! register and unregister never wait on) and the `Arc` counts of entries
//! (`EpochList` updates clone every other entry's `Arc` into the new list;
//! always under the list's `writer` mutex, which the audit sees).
//!
//! `EpochList` (used by `sync-grace`): an immutable list of
//! reference-counted entries published through an epoch pointer; its
//! `writer` mutex (a leaf) serialises copy-change-publish updates, the old
//! list is `defer_destroy`ed, and `Entry::dead` (Release store by unlink,
//! Acquire load by scans) makes scans skip entries of an old list.

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned};

use super::{ReclaimRegistry, Shrinker, ShrinkerId};
use crate::lane::lane;
use crate::sync::{note_opaque, Arc, AtomicBool, Mutex, Ordering};

/// Shards of the deferred registry (lanes map onto them modulo this).
pub const REGISTRY_SHARDS: usize = 32;

pub(super) struct Entry {
    pub id: u64,
    pub shrinker: Arc<dyn Shrinker>,
    pub dead: AtomicBool,
}

pub(super) type List = Vec<Arc<Entry>>;

/// One published list and the lock its writers share (also used by
/// `sync-grace`, which differs only in what unregister waits for).
pub(super) struct EpochList {
    writer: Mutex<()>,
    list: Atomic<List>,
}

impl EpochList {
    pub fn new() -> EpochList {
        EpochList {
            writer: Mutex::new(()),
            list: Atomic::new(Vec::new()),
        }
    }

    /// Replace the list with `change(current)`; the old one is freed after
    /// the epoch.
    pub fn update(&self, change: impl FnOnce(&List) -> List) {
        let _w = self.writer.lock();
        let guard = epoch::pin();
        note_opaque(&self.list, false);
        let old = self.list.load(Ordering::Acquire, &guard);
        // SAFETY: lists are only ever replaced under `writer`, which we
        // hold, and freed through `defer_destroy` after being unlinked; a
        // non-null `old` loaded under `guard` stays valid while it lives.
        let next = change(unsafe { old.as_ref() }.expect("the list is never null"));
        note_opaque(&self.list, true);
        self.list.store(Owned::new(next), Ordering::Release);
        // SAFETY: `old` is unlinked (no new reader can load it); readers
        // that loaded it hold guards, and the epoch defers the free past
        // them. Only this writer (under `writer`) could unlink it.
        unsafe { guard.defer_destroy(old) };
    }

    /// References to the live entries (the scan's snapshot).
    pub fn live(&self) -> Vec<Arc<Entry>> {
        let mut snapshot = Vec::new();
        self.live_into(&epoch::pin(), &mut snapshot);
        snapshot
    }

    /// Append references to the live entries to `snapshot`, under the
    /// caller's `guard` (one pin may cover every shard of a scan).
    pub fn live_into(&self, guard: &Guard, snapshot: &mut Vec<Arc<Entry>>) {
        note_opaque(&self.list, false);
        let list = self.list.load(Ordering::Acquire, guard);
        // SAFETY: loaded under `guard`; freed only via `defer_destroy`.
        let list = unsafe { list.as_ref() }.expect("the list is never null");
        snapshot.extend(
            list.iter()
                .filter(|e| !e.dead.load(Ordering::Acquire))
                .cloned(),
        );
    }

    pub fn len(&self) -> usize {
        let guard = epoch::pin();
        note_opaque(&self.list, false);
        // SAFETY: as in `live`.
        unsafe { self.list.load(Ordering::Acquire, &guard).as_ref() }.map_or(0, Vec::len)
    }
}

impl Drop for EpochList {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no reader or writer can hold the list.
        unsafe {
            let list = self.list.load(Ordering::Relaxed, epoch::unprotected());
            if !list.is_null() {
                drop(list.into_owned());
            }
        }
    }
}

/// Mark `id` dead and unlink it from `list`.
pub(super) fn unlink(list: &EpochList, id: u64) {
    list.update(|cur| {
        let mut next = Vec::with_capacity(cur.len());
        for e in cur {
            if e.id == id {
                e.dead.store(true, Ordering::Release);
            } else {
                next.push(e.clone());
            }
        }
        debug_assert_eq!(next.len() + 1, cur.len(), "shrinker {id} not registered");
        next
    });
}

/// Call every entry of `snapshot` still alive.
pub(super) fn scan_all(snapshot: &[Arc<Entry>], nr: usize) -> usize {
    snapshot
        .iter()
        .filter(|e| !e.dead.load(Ordering::Acquire))
        .map(|e| e.shrinker.scan(nr))
        .sum()
}

/// Slots per block of a shard's slot chain.
pub const SLOTS_PER_BLOCK: usize = 8;

/// A registered shrinker, owned by its slot and freed through the epoch.
struct SlotEntry {
    id: u64,
    shrinker: Arc<dyn Shrinker>,
}

/// Fixed slots and the next block (appended when every slot is taken,
/// never removed before the registry is dropped).
struct Block {
    slots: [Atomic<SlotEntry>; SLOTS_PER_BLOCK],
    next: Atomic<Block>,
}

impl Block {
    fn new() -> Block {
        Block {
            slots: std::array::from_fn(|_| Atomic::null()),
            next: Atomic::null(),
        }
    }
}

/// One shard: its writers' lock (guarding the shard's last id sequence
/// number) and its slot chain, on lines of its own: two lanes registering
/// or unregistering in different shards share no line (the conflict
/// audit's mount and umount pairs found neighbouring shards sharing one).
#[repr(align(64))]
struct SlotShard {
    writer: Mutex<u64>,
    first: Block,
}

impl SlotShard {
    /// Every block of the chain, under `guard` (blocks are never freed
    /// while the registry lives, so any guard will do).
    fn blocks<'g>(&'g self, guard: &'g Guard) -> impl Iterator<Item = &'g Block> + 'g {
        std::iter::successors(Some(&self.first), move |b| {
            note_opaque(&b.next, false);
            // SAFETY: a block, once linked, lives until the registry is
            // dropped (`Drop for DeferredRegistry`, `&mut self`).
            unsafe { b.next.load(Ordering::Acquire, guard).as_ref() }
        })
    }
}

/// The default registry.
pub struct DeferredRegistry {
    shards: Box<[SlotShard]>,
}

impl DeferredRegistry {
    pub fn new() -> DeferredRegistry {
        DeferredRegistry {
            shards: (0..REGISTRY_SHARDS)
                .map(|_| SlotShard {
                    writer: Mutex::new(0),
                    first: Block::new(),
                })
                .collect(),
        }
    }

    /// `register` into shard `shard` (the lane's, or a model thread's).
    pub(crate) fn register_on(&self, shard: usize, s: Arc<dyn Shrinker>) -> ShrinkerId {
        let shard = shard % self.shards.len();
        let sh = &self.shards[shard];
        let mut w = sh.writer.lock();
        // Ids are unique per shard (its own sequence, under its lock) and
        // across shards (the shard in the low digits).
        *w += 1;
        let id = *w * REGISTRY_SHARDS as u64 + shard as u64;
        let mut entry = Some(Owned::new(SlotEntry { id, shrinker: s }));
        let guard = epoch::pin();
        let mut last = &sh.first;
        for block in sh.blocks(&guard) {
            last = block;
            if let Some(slot) = block.slots.iter().find(|x| {
                note_opaque(*x, false);
                x.load(Ordering::Relaxed, &guard).is_null()
            }) {
                // Release: a scan that loads the pointer sees the entry.
                note_opaque(slot, true);
                slot.store(entry.take().expect("stored once"), Ordering::Release);
                return ShrinkerId(id);
            }
        }
        let block = Block::new();
        block.slots[0].store(entry.take().expect("stored once"), Ordering::Relaxed);
        // Release: publishes the block and the entry in it.
        note_opaque(&last.next, true);
        last.next.store(Owned::new(block), Ordering::Release);
        ShrinkerId(id)
    }
}

impl Default for DeferredRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for DeferredRegistry {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no scan or writer can hold a slot or block;
        // each entry and each appended block is owned by exactly one
        // pointer of the chain.
        unsafe {
            let guard = epoch::unprotected();
            for shard in self.shards.iter() {
                for block in shard.blocks(guard) {
                    for slot in &block.slots {
                        let e = slot.load(Ordering::Relaxed, guard);
                        if !e.is_null() {
                            drop(e.into_owned());
                        }
                    }
                }
                let mut next = shard.first.next.load(Ordering::Relaxed, guard);
                while !next.is_null() {
                    let owned = next.into_owned();
                    next = owned.next.load(Ordering::Relaxed, guard);
                    drop(owned);
                }
            }
        }
    }
}

impl ReclaimRegistry for DeferredRegistry {
    fn register(&self, s: Arc<dyn Shrinker>) -> ShrinkerId {
        self.register_on(lane(), s)
    }

    fn unregister(&self, id: ShrinkerId) {
        let sh = &self.shards[(id.0 % REGISTRY_SHARDS as u64) as usize];
        let _w = sh.writer.lock();
        let guard = epoch::pin();
        for block in sh.blocks(&guard) {
            for slot in &block.slots {
                note_opaque(slot, false);
                let e = slot.load(Ordering::Relaxed, &guard);
                // SAFETY: entries are freed only by unregister under
                // `writer`, which we hold, so a non-null `e` is alive.
                if unsafe { e.as_ref() }.is_some_and(|e| e.id == id.0) {
                    note_opaque(slot, true);
                    slot.store(epoch::Shared::null(), Ordering::Release);
                    // SAFETY: unlinked (no new scan can load it) by the
                    // only writer; scans that loaded it hold guards, and
                    // the epoch defers the free past them.
                    unsafe { guard.defer_destroy(e) };
                    return;
                }
            }
        }
        debug_assert!(false, "shrinker {id:?} not registered");
    }

    fn shrink_all(&self, nr: usize) -> usize {
        // One pin for the whole scan; each shrinker is called through a
        // reference borrowed from its slot entry, which unregister frees
        // only after this guard is gone (`defer_destroy`), so the scan
        // writes nothing shared of the registry: no reference count per
        // entry per scan (the seed's lockless list under RCU does the same).
        // Unregister never waits for the guard; a long scan only delays
        // the epoch's reclamation.
        let mut freed = 0;
        {
            let guard = epoch::pin();
            for shard in self.shards.iter() {
                for block in shard.blocks(&guard) {
                    for slot in &block.slots {
                        note_opaque(slot, false);
                        // SAFETY: loaded under `guard`; entries are freed
                        // only through `defer_destroy` after unlinking, so
                        // the entry outlives every use below (all under
                        // `guard`).
                        if let Some(e) = unsafe { slot.load(Ordering::Acquire, &guard).as_ref() } {
                            freed += e.shrinker.scan(nr);
                        }
                    }
                }
            }
        }
        // The last drops of mounts the shrinkers upgraded run here, outside
        // the guard (they unregister, which is allowed under it, but a
        // whole mount's teardown would hold the epoch back meanwhile).
        super::drain_after_scan();
        freed
    }

    fn len(&self) -> usize {
        let guard = epoch::pin();
        self.shards
            .iter()
            .flat_map(|sh| sh.blocks(&guard))
            .flat_map(|b| b.slots.iter())
            .filter(|x| {
                note_opaque(*x, false);
                !x.load(Ordering::Acquire, &guard).is_null()
            })
            .count()
    }
}

#[cfg(all(test, not(lanefs_shuttle)))]
mod tests {
    use super::*;

    struct One;
    impl Shrinker for One {
        fn count(&self) -> usize {
            1
        }
        fn scan(&self, _: usize) -> usize {
            1
        }
    }

    /// Past one block: appended blocks are found by scans, by unregister
    /// (freed slots are reused) and by the registry's drop, which frees
    /// every entry still registered.
    #[test]
    fn slot_chain_grows_reuses_and_frees() {
        let r = DeferredRegistry::new();
        let shrinker: Arc<dyn Shrinker> = Arc::new(One);
        let n = 3 * SLOTS_PER_BLOCK + 1;
        let ids: Vec<_> = (0..n).map(|_| r.register_on(5, shrinker.clone())).collect();
        assert_eq!(r.len(), n);
        assert_eq!(r.shrink_all(1), n);
        for id in ids.iter().step_by(2) {
            r.unregister(*id);
        }
        let left = n / 2;
        assert_eq!(r.len(), left);
        assert_eq!(r.shrink_all(1), left);
        let again: Vec<_> = (0..SLOTS_PER_BLOCK)
            .map(|_| r.register_on(5, shrinker.clone()))
            .collect();
        assert_eq!(r.len(), left + again.len());
        let blocks = epoch::pin();
        assert_eq!(
            r.shards[5].blocks(&blocks).count(),
            4,
            "freed slots were reused"
        );
        drop(blocks);
        drop(r);
        // Deferred frees of unregistered entries may still be pending in
        // the epoch; the registry's own drop freed the rest at once.
        let guard = epoch::pin();
        guard.flush();
        drop(guard);
        assert!(Arc::strong_count(&shrinker) <= 1 + n - left);
    }
}

#[cfg(all(test, lanefs_shuttle))]
mod model {
    use super::*;
    use crate::sync::model_iterations;
    // The probe's own flags are std atomics, not shuttle's: an entry is
    // freed by the epoch, which may run the free from a thread-local
    // destructor after the model execution ended, where touching a shuttle
    // primitive panics. Every access still happens on shuttle's one OS
    // thread (or after it), and the model's scheduling points are the
    // registry's own atomics and `yield_now`.
    use std::sync::atomic::{AtomicBool, AtomicU64};

    /// A shrinker that records its calls and its own destruction.
    struct Probe {
        freed: Arc<AtomicBool>,
        calls: Arc<AtomicU64>,
        /// Set once unregister returned; the scan spins on it while
        /// `wait_for_unregister`, so an unregister that waited for scans
        /// would deadlock (shuttle reports it).
        unregistered: Arc<AtomicBool>,
        wait_for_unregister: bool,
    }
    impl Shrinker for Probe {
        fn count(&self) -> usize {
            1
        }
        fn scan(&self, _: usize) -> usize {
            assert!(!self.freed.load(Ordering::SeqCst), "use after free");
            self.calls.fetch_add(1, Ordering::SeqCst);
            while self.wait_for_unregister && !self.unregistered.load(Ordering::SeqCst) {
                shuttle::thread::yield_now();
            }
            1
        }
    }
    impl Drop for Probe {
        fn drop(&mut self) {
            self.freed.store(true, Ordering::SeqCst);
        }
    }

    fn probe(
        wait: bool,
    ) -> (
        Arc<dyn Shrinker>,
        Arc<AtomicBool>,
        Arc<AtomicU64>,
        Arc<AtomicBool>,
    ) {
        let (freed, calls, unreg) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let p = Probe {
            freed: freed.clone(),
            calls: calls.clone(),
            unregistered: unreg.clone(),
            wait_for_unregister: wait,
        };
        (Arc::new(p), freed, calls, unreg)
    }

    /// Scans race an unregister (and a register on the same shard): no
    /// shrinker is called after its object is freed, unregister never
    /// waits for a scan (a scan that waits for unregister to return does
    /// not deadlock), and once unregister returned and the scans finished,
    /// no later scan calls it.
    #[test]
    fn model_scan_vs_unregister() {
        crate::sync::check_random(
            || {
                let r = Arc::new(DeferredRegistry::new());
                let (p, _freed, calls, unreg) = probe(true);
                let id = r.register_on(0, p);
                let scanners: Vec<_> = (0..2)
                    .map(|_| {
                        let r = r.clone();
                        shuttle::thread::spawn(move || r.shrink_all(1))
                    })
                    .collect();
                let r2 = r.clone();
                let other = shuttle::thread::spawn(move || {
                    let (q, _, _, _) = probe(false);
                    r2.register_on(0, q)
                });
                r.unregister(id);
                unreg.store(true, Ordering::SeqCst);
                let other_id = other.join().unwrap();
                for s in scanners {
                    s.join().unwrap();
                }
                let before = calls.load(Ordering::SeqCst);
                assert!(before <= 2);
                r.shrink_all(1);
                assert_eq!(
                    calls.load(Ordering::SeqCst),
                    before,
                    "called after unregister"
                );
                assert_eq!(r.len(), 1);
                r.unregister(other_id);
                assert!(r.is_empty());
            },
            model_iterations(),
        );
    }

    /// A scan races the append of a second block and an unregister in the
    /// first: it sees only whole entries, never a freed one, and
    /// afterwards every registered shrinker is found exactly once.
    #[test]
    fn model_scan_vs_block_append() {
        crate::sync::check_random(
            || {
                let r = Arc::new(DeferredRegistry::new());
                let (p, _freed, _calls, _unreg) = probe(false);
                let ids: Vec<_> = (0..SLOTS_PER_BLOCK)
                    .map(|_| r.register_on(0, p.clone()))
                    .collect();
                let scanner = {
                    let r = r.clone();
                    shuttle::thread::spawn(move || r.shrink_all(1))
                };
                let r2 = r.clone();
                let appender = shuttle::thread::spawn(move || {
                    let (q, _, _, _) = probe(false);
                    r2.register_on(0, q)
                });
                r.unregister(ids[0]);
                let extra = appender.join().unwrap();
                let seen = scanner.join().unwrap();
                assert!(seen <= SLOTS_PER_BLOCK + 1);
                assert_eq!(r.len(), SLOTS_PER_BLOCK);
                assert_eq!(r.shrink_all(1), SLOTS_PER_BLOCK);
                r.unregister(extra);
                for id in &ids[1..] {
                    r.unregister(*id);
                }
                assert!(r.is_empty());
            },
            model_iterations(),
        );
    }
}
