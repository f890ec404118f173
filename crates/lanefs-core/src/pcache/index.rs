//! The lock-free page index of one file: a radix tree (64 slots a node)
//! from page index to [`PageBuf`], read without locks under an epoch guard
//! (crossbeam-epoch), changed only by the holder of the file's data lock.
//!
//! * `root` and every slot: `AtomicPtr`, stored with `Release` after the
//!   node or page it points to is complete, loaded with `Acquire`, so a
//!   reader that reaches a page sees its initial contents.
//! * A removed page or subtree is freed through `Guard::defer_unchecked`:
//!   a reader pinned before the removal may still hold a reference into it
//!   until it unpins. Interior nodes are freed only with the whole tree
//!   ([`PageIndex::clear`], or drop).
//! * Lookups and inserts defer nothing, so a thread that no removal can
//!   overlap — the holder of the data lock held exclusively, or of the
//!   page's stripe (either excludes every remover) — passes an
//!   unprotected guard instead of pinning (`PagesMut::lookup_guard`,
//!   `FileData::try_overwrite`). Removals always take a pinned guard, and
//!   every few hundred frees a thread defers make the collector run
//!   (`collect_now_and_then`; a whole tree counts as the pages it holds):
//!   it would otherwise wait for 128 pins, which such writers no longer
//!   make.
//! * The tree grows at the top: a new root whose slot 0 is the old root, so
//!   a reader holding the old root still finds every page below the old
//!   capacity. A reader may miss a page inserted or removed concurrently;
//!   the file's sequence count (parent module) decides whether that matters.

use crossbeam_epoch::Guard;

use super::page::PageBuf;
use crate::sync::{AtomicPtr, Ordering};

const FANOUT_BITS: u32 = 6;
const FANOUT: usize = 1 << FANOUT_BITS;
const SLOT_MASK: u64 = FANOUT as u64 - 1;

enum Slots {
    /// Level > 0: children covering `FANOUT^level` pages each.
    Interior([AtomicPtr<Node>; FANOUT]),
    /// Level 0: pages.
    Leaf([AtomicPtr<PageBuf>; FANOUT]),
}

struct Node {
    level: u32,
    slots: Slots,
}

impl Node {
    fn new(level: u32) -> *mut Node {
        let slots = if level == 0 {
            Slots::Leaf(std::array::from_fn(
                |_| AtomicPtr::new(std::ptr::null_mut()),
            ))
        } else {
            Slots::Interior(std::array::from_fn(
                |_| AtomicPtr::new(std::ptr::null_mut()),
            ))
        };
        Box::into_raw(Box::new(Node { level, slots }))
    }

    /// Does a tree rooted at this level hold index `idx`?
    fn covers(level: u32, idx: u64) -> bool {
        let bits = FANOUT_BITS * (level + 1);
        bits >= u64::BITS || idx >> bits == 0
    }

    fn slot(level: u32, idx: u64) -> usize {
        ((idx >> (FANOUT_BITS * level)) & SLOT_MASK) as usize
    }
}

/// Free a detached subtree and every page in it.
///
/// # Safety
/// `node` came from [`Node::new`], is reachable from no index, and no reader
/// can still hold a reference into it (exclusive access, or called from a
/// deferred function after every guard that could see it is gone).
unsafe fn free_tree(node: *mut Node) {
    // SAFETY: by the contract, `node` is a live, detached `Box<Node>`.
    let node = unsafe { Box::from_raw(node) };
    match &node.slots {
        Slots::Interior(children) => {
            for c in children {
                let p = c.load(Ordering::Relaxed);
                if !p.is_null() {
                    // SAFETY: a child of a detached tree is detached too.
                    unsafe { free_tree(p) };
                }
            }
        }
        Slots::Leaf(pages) => {
            for p in pages {
                let p = p.load(Ordering::Relaxed);
                if !p.is_null() {
                    // SAFETY: pages are `Box<PageBuf>`s owned by the tree.
                    drop(unsafe { Box::from_raw(p) });
                }
            }
        }
    }
}

pub(crate) struct PageIndex {
    root: AtomicPtr<Node>,
}

// SAFETY: the raw pointers are owned boxes; `PageBuf` and `Node` hold only
// atomics, and all sharing follows the publication/deferred-free protocol in
// the module header.
unsafe impl Send for PageIndex {}
// SAFETY: as above.
unsafe impl Sync for PageIndex {}

impl PageIndex {
    pub fn new() -> PageIndex {
        PageIndex {
            root: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The page at `idx`, if cached. Lock-free; the reference lives as long
    /// as the guard.
    pub fn get<'g>(&self, idx: u64, _guard: &'g Guard) -> Option<&'g PageBuf> {
        let mut p = self.root.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: nodes reachable from `root` are freed only by deferred
        // functions scheduled after they were detached, which run after the
        // caller's guard (pinned before this load) is dropped.
        let mut node = unsafe { &*p };
        if !Node::covers(node.level, idx) {
            return None;
        }
        loop {
            let slot = Node::slot(node.level, idx);
            match &node.slots {
                Slots::Interior(children) => {
                    p = children[slot].load(Ordering::Acquire);
                    if p.is_null() {
                        return None;
                    }
                    // SAFETY: as for the root.
                    node = unsafe { &*p };
                }
                Slots::Leaf(pages) => {
                    let page = pages[slot].load(Ordering::Acquire);
                    // SAFETY: pages are freed only through deferred functions
                    // scheduled after removal, as nodes.
                    return unsafe { page.as_ref() };
                }
            }
        }
    }

    /// Publish `page` at `idx` (which must be empty). Caller holds the data
    /// lock exclusively. Returns a reference valid while that lock is held.
    pub fn insert<'g>(&self, idx: u64, page: Box<PageBuf>, _guard: &'g Guard) -> &'g PageBuf {
        let mut root = self.root.load(Ordering::Relaxed);
        if root.is_null() {
            root = Node::new(0);
            self.root.store(root, Ordering::Release);
        }
        loop {
            // SAFETY: only lock holders change `root`, and we are one.
            let level = unsafe { (*root).level };
            if Node::covers(level, idx) {
                break;
            }
            let top = Node::new(level + 1);
            // SAFETY: `top` is fresh and not yet shared.
            if let Slots::Interior(children) = unsafe { &(*top).slots } {
                children[0].store(root, Ordering::Relaxed);
            }
            self.root.store(top, Ordering::Release);
            root = top;
        }
        // SAFETY: lock holders are the only writers; nodes live until clear.
        let mut node = unsafe { &*root };
        loop {
            let slot = Node::slot(node.level, idx);
            match &node.slots {
                Slots::Interior(children) => {
                    let mut child = children[slot].load(Ordering::Relaxed);
                    if child.is_null() {
                        child = Node::new(node.level - 1);
                        children[slot].store(child, Ordering::Release);
                    }
                    // SAFETY: as above.
                    node = unsafe { &*child };
                }
                Slots::Leaf(pages) => {
                    let p = Box::into_raw(page);
                    // A plain load and store, not a swap: we are the only
                    // writer (the lock), and on x86 a swap is a full fence
                    // that waits for the page's 4 KiB of stores to drain.
                    debug_assert!(
                        pages[slot].load(Ordering::Relaxed).is_null(),
                        "page {idx} inserted twice"
                    );
                    pages[slot].store(p, Ordering::Release);
                    // SAFETY: just published; freed only by a later removal
                    // by a lock holder (deferred), after this lock is gone.
                    return unsafe { &*p };
                }
            }
        }
    }

    /// Unpublish the page at `idx` and free it once no reader can see it.
    /// Caller holds the data lock exclusively. Returns whether it was there.
    pub fn remove(&self, idx: u64, guard: &Guard) -> bool {
        let root = self.root.load(Ordering::Relaxed);
        if root.is_null() {
            return false;
        }
        // SAFETY: lock holder; nodes live until `clear`.
        let mut node = unsafe { &*root };
        if !Node::covers(node.level, idx) {
            return false;
        }
        loop {
            let slot = Node::slot(node.level, idx);
            match &node.slots {
                Slots::Interior(children) => {
                    let child = children[slot].load(Ordering::Relaxed);
                    if child.is_null() {
                        return false;
                    }
                    // SAFETY: as above.
                    node = unsafe { &*child };
                }
                Slots::Leaf(pages) => {
                    // Load and store, not a swap: we are the only writer.
                    let p = pages[slot].load(Ordering::Relaxed);
                    if p.is_null() {
                        return false;
                    }
                    pages[slot].store(std::ptr::null_mut(), Ordering::Release);
                    // SAFETY: `p` is detached; readers that found it were
                    // pinned before the store, so the deferred free runs
                    // after they unpin.
                    unsafe { guard.defer_unchecked(move || drop(Box::from_raw(p))) };
                    collect_now_and_then(guard, 1);
                    return true;
                }
            }
        }
    }

    /// Detach the whole tree and free it once no reader can see it.
    /// `pages`: how many pages it still holds — one deferred free of a
    /// whole file counts as that many frees towards the next collection
    /// (as one it waited in the thread's bag for 255 more: a removed file
    /// of 256 MiB stayed allocated while its thread went on writing).
    pub fn clear(&self, guard: &Guard, pages: usize) {
        let root = self.root.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !root.is_null() {
            // SAFETY: detached above; deferred past every current reader.
            unsafe { guard.defer_unchecked(move || free_tree(root)) };
            collect_now_and_then(guard, pages.max(1));
        }
    }
}

/// Frees a thread defers before it makes the collector run (a page each:
/// at most 1 MiB a thread waiting; about the cadence of the collector's
/// own every-128-pins when each truncate frees a page and pins once).
const DEFERRED_PER_COLLECT: usize = 256;

thread_local! {
    /// Frees this thread deferred since it last made the collector run.
    static DEFERRED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Count `n` deferred frees (a whole tree or directory index counts what it
/// holds: pages, entries) and, every [`DEFERRED_PER_COLLECT`], flush
/// them to the collector and let it run (`Guard::flush`). The collector
/// otherwise runs only every 128 pins of a thread, and writers under the
/// data lock or a stripe do not pin (module header): a thread that appends
/// a thousand pages between truncates pinned once per truncate, and its
/// freed pages piled up for 128 truncates (appends fell to a tenth, all of
/// it in page faults on fresh memory).
pub(crate) fn collect_now_and_then(guard: &Guard, n: usize) {
    let due = DEFERRED.with(|d| {
        let v = d.get() + n;
        d.set(if v >= DEFERRED_PER_COLLECT { 0 } else { v });
        v >= DEFERRED_PER_COLLECT
    });
    if due {
        guard.flush();
    }
}

/// Pin-and-flush cycles of [`collect_deferred`]: the first three let
/// the epoch advance past every deferred free; each later one runs up to
/// the collector's step (8 bags of up to 64 frees).
const COLLECT_DEFERRED_CYCLES: usize = 256;

/// Run the epoch-deferred frees that are due (all of them, up to about
/// 130,000, when no other thread is pinned): what an idle process calls to
/// give freed memory back. Deferred frees otherwise wait for later pins,
/// which an idle mount never makes: the pages of a file removed just before
/// a mount went quiet stayed allocated (1 GiB of them after a 1 GiB file).
pub fn collect_deferred() {
    for _ in 0..COLLECT_DEFERRED_CYCLES {
        crossbeam_epoch::pin().flush();
    }
}

impl Drop for PageIndex {
    fn drop(&mut self) {
        let root = self.root.load(Ordering::Relaxed);
        if !root.is_null() {
            // SAFETY: `&mut self`: no reader holds this index any more.
            unsafe { free_tree(root) };
        }
    }
}

#[cfg(all(test, not(lanefs_shuttle)))]
mod tests {
    use super::*;

    #[test]
    fn insert_get_remove_across_growth() {
        let ix = PageIndex::new();
        let g = crossbeam_epoch::pin();
        let far = (1u64 << 51) - 1;
        for idx in [0, 63, 64, 4097, far] {
            let p = ix.insert(idx, PageBuf::zeroed(), &g);
            p.write(0, &idx.to_ne_bytes());
        }
        for idx in [0, 63, 64, 4097, far] {
            let mut b = [0u8; 8];
            ix.get(idx, &g).expect("inserted").read(0, &mut b);
            assert_eq!(u64::from_ne_bytes(b), idx);
        }
        assert!(ix.get(1, &g).is_none());
        assert!(ix.get(far - 1, &g).is_none());
        assert!(ix.remove(64, &g));
        assert!(!ix.remove(64, &g));
        assert!(ix.get(64, &g).is_none());
        ix.clear(&g, 4);
        assert!(ix.get(0, &g).is_none());
    }
}
