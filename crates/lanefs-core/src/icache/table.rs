//! The chained hash table shared by all four designs, parameterised by a
//! [`LockPolicy`]: which lock a lookup takes, which lock an insert or a
//! removal takes, and whether a cold lookup inserts in the same critical
//! section as its search.
//!
//! Buckets live in segments of [`SEGMENT_BUCKETS`], allocated on first use
//! and published by a compare-and-swap on `Table::segments[i]` (Release,
//! paired with the Acquire load of every later user; the loser of a race
//! frees its own copy), and freed only when the table is dropped. So a mount
//! costs one small array of segment pointers, not the whole bucket array
//! (seed 001: creating and dropping an instance must be cheap).
//!
//! Chains: `Bucket::head` and `Node::next` are `AtomicPtr`s. Changes
//! (insert at the head, unlink) happen only under the policy's insert lock
//! and publish with Release stores; searches load with Acquire, lock-free
//! under a crossbeam-epoch guard or under the policy's lookup lock. An
//! unlinked node is freed through `Guard::defer_destroy`, so a searcher
//! that still sees it reads valid memory until it unpins.
//!
//! `Node::inode` is null while the node is a LOADING placeholder; the loader
//! stores the `Arc::into_raw` of the loaded inode with Release (pairing with
//! the searchers' Acquire load), exactly once. The node owns that `Arc` and
//! drops it when it is destroyed (after a grace period). A number has at
//! most one node in its chain: inserts re-check under the insert lock, and a
//! node leaves the chain only by unlink under the same lock.

use crate::sync::Arc;
use std::marker::PhantomData;
use std::ptr;

use crossbeam_epoch::{self as epoch, Guard, Shared};
use lanefs_store::{Ino, Result};

use super::{Backoff, InodeCache, Loaded};
use crate::inode::Inode;
use crate::sync::{AtomicPtr, Mutex, MutexGuard, Ordering};

/// Fewest and most buckets; the count is fixed at creation from the cache
/// budget (like Linux's boot-sized inode hash), a power of two in between.
pub(crate) const MIN_BUCKETS: usize = 64;
pub(crate) const MAX_BUCKETS: usize = 1 << 20;
/// Buckets allocated together, the first time one of them is used.
pub(crate) const SEGMENT_BUCKETS: usize = 1024;

/// Which lock guards an operation.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Scope {
    /// None: an epoch guard only.
    LockFree,
    /// The table's one global mutex.
    Global,
    /// The bucket's own mutex.
    Bucket,
}

/// The locking of one design.
pub(crate) trait LockPolicy: Send + Sync + 'static {
    /// Lock held while searching a chain.
    const LOOKUP: Scope;
    /// Lock held while inserting into or unlinking from a chain.
    const INSERT: Scope;
    /// A cold lookup inserts its placeholder without releasing the lookup
    /// lock (only meaningful when `LOOKUP == INSERT`).
    const ONE_SECTION: bool;
}

/// Default: lock-free lookups, one bucket lock per insert (seed 000 + hash-bl).
pub(crate) struct RcuPolicy;
impl LockPolicy for RcuPolicy {
    const LOOKUP: Scope = Scope::LockFree;
    const INSERT: Scope = Scope::Bucket;
    const ONE_SECTION: bool = false;
}

/// Linux before the seed: one global lock, taken twice on a cold lookup.
pub(crate) struct GlobalPolicy;
impl LockPolicy for GlobalPolicy {
    const LOOKUP: Scope = Scope::Global;
    const INSERT: Scope = Scope::Global;
    const ONE_SECTION: bool = false;
}

/// The seed's patch: lock-free first lookup, inserts under the global lock.
pub(crate) struct RcuGlobalInsertPolicy;
impl LockPolicy for RcuGlobalInsertPolicy {
    const LOOKUP: Scope = Scope::LockFree;
    const INSERT: Scope = Scope::Global;
    const ONE_SECTION: bool = false;
}

/// hash-bl / lock array: a bucket lock for lookups and inserts, one section.
pub(crate) struct BucketLockPolicy;
impl LockPolicy for BucketLockPolicy {
    const LOOKUP: Scope = Scope::Bucket;
    const INSERT: Scope = Scope::Bucket;
    const ONE_SECTION: bool = true;
}

struct Node {
    ino: Ino,
    inode: AtomicPtr<Inode>,
    next: AtomicPtr<Node>,
}

impl Drop for Node {
    fn drop(&mut self) {
        let p = self.inode.load(Ordering::Relaxed);
        if !p.is_null() {
            // SAFETY: a non-null `inode` is the `Arc::into_raw` stored once
            // by `publish`; the node owns that count and is dropped once.
            unsafe { drop(Arc::from_raw(p)) };
        }
    }
}

struct Bucket {
    lock: Mutex<()>,
    head: AtomicPtr<Node>,
}

type Segment = [Bucket; SEGMENT_BUCKETS];

/// A segment built in place on the heap (never as an array on the stack:
/// model-check threads run on small stacks).
fn new_segment() -> Box<Segment> {
    let buckets: Box<[Bucket]> = (0..SEGMENT_BUCKETS)
        .map(|_| Bucket {
            lock: Mutex::new(()),
            head: AtomicPtr::new(ptr::null_mut()),
        })
        .collect();
    match buckets.try_into() {
        Ok(segment) => segment,
        Err(_) => unreachable!("collected exactly SEGMENT_BUCKETS buckets"),
    }
}

/// The hash table of one design.
pub(crate) struct Table<P: LockPolicy> {
    /// `Box::into_raw` of each allocated segment, null until first use.
    segments: Box<[AtomicPtr<Segment>]>,
    shift: u32,
    global: Mutex<()>,
    _policy: PhantomData<P>,
}

/// What a search found for a number.
enum Hit {
    /// A counted reference (its `Life` was incremented).
    Ref(Arc<Inode>),
    /// A LOADING, FREEING or DEAD node: wait and search again.
    Busy,
    Miss,
}

/// Number of buckets for a cache of at most `max_inodes`.
pub(crate) fn bucket_count(max_inodes: usize) -> usize {
    max_inodes
        .max(1)
        .next_power_of_two()
        .clamp(MIN_BUCKETS, MAX_BUCKETS)
}

impl<P: LockPolicy> Table<P> {
    pub fn new(max_inodes: usize) -> Self {
        let n = bucket_count(max_inodes);
        debug_assert!(n.is_power_of_two());
        debug_assert!(n >= SEGMENT_BUCKETS || SEGMENT_BUCKETS.is_multiple_of(n));
        Table {
            segments: (0..n.div_ceil(SEGMENT_BUCKETS))
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect(),
            shift: 64 - n.trailing_zeros(),
            global: Mutex::new(()),
            _policy: PhantomData,
        }
    }

    fn bucket(&self, ino: Ino) -> &Bucket {
        let h = ino.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        // `shift` is 64 - log2(buckets) ≥ 48, so the index is in range.
        let i = (h >> self.shift) as usize;
        // With fewer buckets than a segment, the one segment is partly used.
        let seg = &self.segments[i / SEGMENT_BUCKETS];
        let mut p = seg.load(Ordering::Acquire);
        if p.is_null() {
            let fresh = Box::into_raw(new_segment());
            match seg.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => p = fresh,
                Err(winner) => {
                    // SAFETY: `fresh` came from `Box::into_raw` just above
                    // and was never published.
                    unsafe { drop(Box::from_raw(fresh)) };
                    p = winner;
                }
            }
        }
        // SAFETY: a non-null segment pointer was published once by the CAS
        // above from `Box::into_raw` and is freed only in `Drop` (`&mut self`).
        let segment = unsafe { &*p };
        &segment[i % SEGMENT_BUCKETS]
    }

    /// The allocated buckets, for walks over the whole table.
    fn buckets(&self) -> impl Iterator<Item = &Bucket> {
        (0..self.segments.len()).flat_map(|i| self.segment_buckets(i))
    }

    /// The buckets of segment `i`, if it is allocated.
    fn segment_buckets(&self, i: usize) -> impl Iterator<Item = &Bucket> {
        let p = self.segments[i].load(Ordering::Acquire);
        // SAFETY: as in `bucket`: published once, freed only in `Drop`.
        let segment: Option<&Segment> = unsafe { p.as_ref() };
        segment.into_iter().flat_map(|s| s.iter())
    }

    fn lock<'a>(&'a self, scope: Scope, b: &'a Bucket) -> Option<MutexGuard<'a, ()>> {
        match scope {
            Scope::LockFree => None,
            Scope::Global => Some(self.global.lock()),
            Scope::Bucket => Some(b.lock.lock()),
        }
    }

    /// The node of `ino` in `b`'s chain, or null.
    fn find<'g>(b: &Bucket, ino: Ino, _guard: &'g Guard) -> Option<&'g Node> {
        let mut p = b.head.load(Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: nodes reachable from a chain are freed only through
            // `defer_destroy` after being unlinked, and `_guard` is pinned
            // (or the insert lock is held, which excludes unlinking).
            let n = unsafe { &*p };
            if n.ino == ino {
                return Some(n);
            }
            p = n.next.load(Ordering::Acquire);
        }
        None
    }

    /// Take a counted reference on `node`'s inode, if it is LIVE.
    fn hit(node: &Node) -> Hit {
        let p = node.inode.load(Ordering::Acquire);
        if p.is_null() {
            return Hit::Busy;
        }
        // SAFETY: the node (pinned by the caller's guard) owns an `Arc` of
        // this inode until it is destroyed, after every guard unpins.
        let inode = unsafe { &*p };
        match inode.life.try_get() {
            Ok(()) => {
                // SAFETY: as above; the new `Arc` count is ours.
                unsafe { Arc::increment_strong_count(p) };
                Hit::Ref(unsafe { Arc::from_raw(p) })
            }
            Err(_) => Hit::Busy,
        }
    }

    fn search(&self, b: &Bucket, ino: Ino) -> Hit {
        let _l = self.lock(P::LOOKUP, b);
        let guard = epoch::pin();
        match Self::find(b, ino, &guard) {
            Some(n) => Self::hit(n),
            None => Hit::Miss,
        }
    }

    /// Insert a node at the head of `b`'s chain. Caller holds the insert lock
    /// and has checked that `ino` has no node.
    fn push(b: &Bucket, node: Box<Node>) -> *mut Node {
        node.next
            .store(b.head.load(Ordering::Relaxed), Ordering::Relaxed);
        let p = Box::into_raw(node);
        b.head.store(p, Ordering::Release);
        p
    }

    /// Unlink the first node matching `is_it` from `b`'s chain and free it
    /// after a grace period. Caller holds the insert lock.
    fn unlink(b: &Bucket, is_it: &dyn Fn(&Node) -> bool) -> bool {
        let guard = epoch::pin();
        let mut link = &b.head;
        loop {
            let p = link.load(Ordering::Acquire);
            if p.is_null() {
                return false;
            }
            // SAFETY: reachable node, insert lock held (no concurrent unlink).
            let n = unsafe { &*p };
            if is_it(n) {
                link.store(n.next.load(Ordering::Acquire), Ordering::Release);
                // SAFETY: `p` came from `Box::into_raw` in `push` and is now
                // unreachable from the chain; searchers that still hold it
                // are pinned, so the destructor waits for them.
                unsafe { guard.defer_destroy(Shared::from(p as *const Node)) };
                return true;
            }
            link = &n.next;
        }
    }

    fn remove_placeholder(&self, b: &Bucket, node: *const Node) {
        let _l = self.lock(P::INSERT, b);
        let removed = Self::unlink(b, &|n| ptr::eq(n, node));
        debug_assert!(removed, "LOADING placeholder vanished");
    }

    fn each_node(&self, f: &mut dyn FnMut(&Node)) {
        for i in 0..self.segments.len() {
            self.each_node_in(i, f);
        }
    }

    /// `f` on each node of segment `i`'s chains.
    fn each_node_in(&self, i: usize, f: &mut dyn FnMut(&Node)) {
        let guard = epoch::pin();
        for b in self.segment_buckets(i) {
            // An empty bucket is skipped without its lock (a snapshot: an
            // insert racing this walk may or may not be seen either way).
            if b.head.load(Ordering::Acquire).is_null() {
                continue;
            }
            let _l = self.lock(P::LOOKUP, b);
            let mut p = b.head.load(Ordering::Acquire);
            while !p.is_null() {
                // SAFETY: as in `find`.
                let n = unsafe { &*p };
                f(n);
                p = n.next.load(Ordering::Acquire);
            }
        }
        drop(guard);
    }
}

/// Unhashes a LOADING placeholder if its loader returns early or unwinds.
struct PlaceholderGuard<'a, P: LockPolicy> {
    table: &'a Table<P>,
    bucket: &'a Bucket,
    node: *const Node,
    armed: bool,
}

impl<P: LockPolicy> Drop for PlaceholderGuard<'_, P> {
    fn drop(&mut self) {
        if self.armed {
            self.table.remove_placeholder(self.bucket, self.node);
        }
    }
}

impl<P: LockPolicy> InodeCache for Table<P> {
    fn get(&self, ino: Ino) -> Option<Arc<Inode>> {
        let b = self.bucket(ino);
        let mut backoff = Backoff::new();
        loop {
            match self.search(b, ino) {
                Hit::Ref(i) => return Some(i),
                Hit::Miss => return None,
                Hit::Busy => backoff.wait(),
            }
        }
    }

    fn get_or_load(
        &self,
        ino: Ino,
        load: &mut dyn FnMut() -> Result<Option<Inode>>,
    ) -> Result<Option<Loaded>> {
        let b = self.bucket(ino);
        let mut backoff = Backoff::new();
        let node = loop {
            // 1. Search under the lookup lock (or lock-free).
            let lookup_lock = self.lock(P::LOOKUP, b);
            let guard = epoch::pin();
            match Self::find(b, ino, &guard).map(Self::hit) {
                Some(Hit::Ref(i)) => {
                    return Ok(Some(Loaded {
                        inode: i,
                        new: false,
                    }))
                }
                Some(Hit::Busy) => {
                    drop((lookup_lock, guard));
                    backoff.wait();
                    continue;
                }
                Some(Hit::Miss) | None => {}
            }
            let placeholder = || {
                Box::new(Node {
                    ino,
                    inode: AtomicPtr::new(ptr::null_mut()),
                    next: AtomicPtr::new(ptr::null_mut()),
                })
            };
            if P::ONE_SECTION && P::LOOKUP == P::INSERT && lookup_lock.is_some() {
                // Same lock, still held: the miss is current.
                break Self::push(b, placeholder());
            }
            drop(lookup_lock);
            // Allocated between the two sections, as Linux's `iget_locked`.
            let placeholder = placeholder();
            // 2. Insert under the insert lock, re-checking for a racing insert.
            let _insert_lock = self.lock(P::INSERT, b);
            if Self::find(b, ino, &guard).is_some() {
                drop(_insert_lock);
                drop(guard);
                continue;
            }
            break Self::push(b, placeholder);
        };
        let mut cleanup = PlaceholderGuard {
            table: self,
            bucket: b,
            node,
            armed: true,
        };
        // 3. Load outside any lock; waiters spin/yield on the placeholder.
        let Some(inode) = load()? else {
            return Ok(None);
        };
        debug_assert_eq!(inode.ino, ino);
        debug_assert_eq!(
            inode.life.refs(),
            1,
            "a loaded inode carries the loader's reference"
        );
        let inode = Arc::new(inode);
        let raw = Arc::into_raw(Arc::clone(&inode)) as *mut Inode;
        // SAFETY: `node` is our placeholder; it stays linked (only we unlink
        // it, through `cleanup`, which we now disarm).
        unsafe { &*node }.inode.store(raw, Ordering::Release);
        cleanup.armed = false;
        Ok(Some(Loaded { inode, new: true }))
    }

    fn get_rcu<'g>(&'g self, ino: Ino, guard: &'g Guard) -> Option<&'g Inode> {
        let b = self.bucket(ino);
        let _l = self.lock(P::LOOKUP, b);
        let n = Self::find(b, ino, guard)?;
        let p = n.inode.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: the node owns an `Arc` of the inode until its deferred
        // destruction, which waits for `guard` to unpin; `'g` is bound to
        // `guard`.
        Some(unsafe { &*p })
    }

    fn insert_new(&self, inode: Arc<Inode>) {
        let ino = inode.ino;
        let b = self.bucket(ino);
        let mut backoff = Backoff::new();
        let raw = Arc::into_raw(inode) as *mut Inode;
        loop {
            let l = self.lock(P::INSERT, b);
            let guard = epoch::pin();
            if let Some(n) = Self::find(b, ino, &guard) {
                // Only a LOADING placeholder of an iget racing the creation
                // of this number (it will miss), or the DEAD inode that
                // last had the number (its freer unhashes it right after
                // the store freed it) can be here.
                debug_assert!(
                    {
                        let p = n.inode.load(Ordering::Acquire);
                        // SAFETY: as in `hit`.
                        p.is_null() || unsafe { &*p }.life.state() == super::State::Dead
                    },
                    "inode {ino} inserted twice"
                );
                drop((l, guard));
                backoff.wait();
                continue;
            }
            let node = Box::new(Node {
                ino,
                inode: AtomicPtr::new(raw),
                next: AtomicPtr::new(ptr::null_mut()),
            });
            Self::push(b, node);
            return;
        }
    }

    fn remove(&self, inode: &Inode) -> bool {
        let b = self.bucket(inode.ino);
        let _l = self.lock(P::INSERT, b);
        Self::unlink(b, &|n| ptr::eq(n.inode.load(Ordering::Acquire), inode))
    }

    fn parts(&self) -> usize {
        self.segments.len()
    }

    fn for_each_in(&self, part: usize, f: &mut dyn FnMut(&Arc<Inode>)) {
        let mut all = Vec::new();
        self.each_node_in(part % self.segments.len(), &mut |n| {
            let p = n.inode.load(Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: as in `hit`: the node owns a count until destroyed.
                unsafe { Arc::increment_strong_count(p) };
                all.push(unsafe { Arc::from_raw(p) });
            }
        });
        for i in &all {
            f(i);
        }
    }

    fn len(&self) -> usize {
        let mut n = 0;
        self.each_node(&mut |node| {
            n += !node.inode.load(Ordering::Acquire).is_null() as usize;
        });
        n
    }
}

impl<P: LockPolicy> Drop for Table<P> {
    fn drop(&mut self) {
        for b in self.buckets() {
            let mut p = b.head.load(Ordering::Relaxed);
            while !p.is_null() {
                // SAFETY: the table is being dropped (`&mut self`): no
                // searcher can reach the chains any more, and each node was
                // made by `Box::into_raw` in `push`.
                let n = unsafe { Box::from_raw(p) };
                p = n.next.load(Ordering::Relaxed);
            }
        }
        for seg in self.segments.iter() {
            let p = seg.load(Ordering::Relaxed);
            if !p.is_null() {
                // SAFETY: published once from `Box::into_raw` in `bucket`;
                // `&mut self` means no one can reach it any more, and its
                // chains were freed above.
                unsafe { drop(Box::from_raw(p)) };
            }
        }
    }
}
