//! [`Fs`]: one mounted file system (the superblock) and its inode life cycle.
//!
//! Mount-level locks and atomics:
//! * `rename_lock` (mutex): held by cross-directory renames only, for the
//!   whole rename. It keeps the tree's shape (directories' parents) stable
//!   while a rename checks ancestry and locks two directories.
//! * `free_blocks`, `free_inodes`, `cached_pages`, `cached_inodes`: counters
//!   of the configured design (see `counters`); reservations happen before
//!   any change, so a failed reservation (`ENOSPC`) leaves nothing half-done.
//!   The two cache counters also charge the process-wide cache budget
//!   (`reclaim::pressure`), checked by the budget functions below.
//! * `store_overhead` (atomic, Relaxed, on a line of its own): the blocks
//!   the store's own structures take, written only by the store's hook (`watch_overhead`:
//!   at creation and when a checkpoint ends), which charges each change to
//!   `free_blocks` in the same call; read by `statfs`, `sync_all`, `check`.
//! * `flusher` (mutex, a leaf): the writeback thread of a persistent store
//!   (`flusher.rs`), set at creation, taken and joined when the last user
//!   goes (`users_gone`); a round takes what `writeback` takes, inode by
//!   inode, holding nothing else.
//! * `orphans`: the configured orphan table; an orphan's slot lives in its
//!   `Meta::orphan_slot` from `note_unlinked` to `maybe_free`.
//! * `reclaim_cursor` (atomic, Relaxed, on a line of its own): the part of
//!   the inode cache page reclaim walks next; each reclaimer takes a part by
//!   `fetch_add`, so reclaimers running together walk different parts.
//! * `shrinker` (mutex): this mount's id in the process-wide registry of its
//!   reclaim design, taken once at drop to unregister.
//! * `cached_inodes`: hashed inodes, added when `iget` publishes a loaded
//!   inode or `alloc_inode` inserts a new one, subtracted when one is
//!   unhashed (eviction, free) — so it equals the table's count when quiet
//!   (`check` verifies it).
//! * `lru_dead` (a counter of the configured design): LRU entries of freed
//!   inodes, added by the free whose `Life::kill` found the entry queued,
//!   subtracted by whoever takes such an entry out (the batch of noted
//!   entries a free completes, `InodeLru::note_freed`; an eviction pop that
//!   finds it `Gone`; or `purge_dead_lru`). The free notes where its entry
//!   sits, and every `FREED_BATCH`th note on a shard takes the noted
//!   entries out in place, so a few hundred freed inodes wait at most
//!   (`icache::lru`'s header). The entries a note misses (a race with an
//!   evictor's re-push) stay counted; once the count is above the cached
//!   inodes (and `LRU_DEAD_MIN`), the free that sees it takes every dead
//!   entry out (`InodeLru::remove_dead`). Without either a freed inode's
//!   memory stayed on the LRU until a pop, and pops only happen over the
//!   inode budget, which freed inodes no longer count against: a mount
//!   creating and removing files grew by about 1 KiB per file, for good.
//!   With the purge alone, a mass removal under a large budget kept up to
//!   as many freed inodes as cached ones (`rm -rf` of a million cached
//!   files: about 0.5 GiB held at its peak).
//!
//! Inode life cycle (see `icache` for the state word):
//! * A counted reference ([`IRef`]) holds one count on `Inode::life`; its
//!   drop gives it back and, when that was the last, puts the inode on the
//!   LRU of unreferenced inodes. Lookup counts (`meta`) and open counts
//!   (per lane: `Inode::opens` and `FsInner::opens`, see `opens`) pin an
//!   inode too; the last forget (`maybe_free`) re-offers it to the LRU, or,
//!   if it is still open, leaves the count's review bit, and the close
//!   that finds no handle left does (`review_closed`).
//! * Eviction (`evict_inodes`) pops LRU entries, claims an inode by CAS
//!   (LIVE, 0 references) → FREEING, checks the pins under `meta`, writes it
//!   back holding no cache lock (lookups of that number wait), then unhashes
//!   it. The inode budget (`cache_inodes_max`) is enforced after each load
//!   and after each creation, once the creator's reference is dropped.
//! * Freeing (`maybe_free`) marks the inode DEAD, frees it in the store,
//!   then unhashes it (by identity) and only then credits the counters (and
//!   only if the store freed it). While it is DEAD and hashed, a racing
//!   `iget` waits instead of reloading a stale record, and a new inode that
//!   already got the number back from the store waits to be inserted
//!   instead of replacing the entry (which made `cached_inodes` drift).
//! * A new inode is hashed before its create links it (`alloc_inode`, no
//!   lock held) and may still be discarded (`discard_new`) until then: it
//!   is *unborn* (`Inode::born`), and `iget`/`iget_rcu` miss it, so a
//!   number kept while it was freed and reused (the engine is handed
//!   unheld numbers) never links, creates in, opens or changes it. Its
//!   creator marks it born under its `meta` once it is linked, holding
//!   the directory's stripe.
//! * `iget` and `IRef` drops must not happen with any `meta` held: they may
//!   wait on a FREEING inode whose evictor takes that inode's `meta`.
//! * The directory of a create, link, unlink or rename is not counted
//!   ([`FsInner::with_dir`]): it is used under an epoch guard and kept
//!   cached by its entry locks — an evictor gives a directory back when its
//!   load lock or any stripe is busy after its claim, and every change
//!   checks the claim once it holds its stripe (`dir_write`: `ESTALE`,
//!   then the operation reruns on a counted reference).
//!
//! The whole lock order (outermost first), repeated in docs/ARCHITECTURE.md:
//! 1. `rename_lock`
//! 2. directory entry locks: a directory's load lock, then the stripes of
//!    the names an operation changes, ascending (`dir`; lookups take none):
//!    ancestors before descendants; two unrelated directories (only under
//!    `rename_lock`) by inode number
//! 3. a file's data lock (`Body::File`); writeback and eviction take it,
//!    then `meta`, to fold a regular file's data-side times into its
//!    record (`fold_file_times`, `pcache`)
//! 4. `Inode::meta` — a directory's before that of an inode linked (or
//!    being linked) in it; a non-directory's meta is always innermost.
//!    Eviction takes a FREEING inode's `meta` holding no cache lock.
//! 5. leaf locks: icache bucket locks and global lock, icache LRU shards,
//!    orphan-table shards, the handles' lane slots (`handles`), the open
//!    counts' slot locks (`opens`: one at a time),
//!    store-internal locks, counters' slow path, the
//!    reclaim registry. (A create allocates and inserts its new inode
//!    holding no lock at all, then links it under the directory's locks.)

use crossbeam_epoch::Guard;

use lanefs_store::{
    CacheLine, Errno, FileKind, Ino, InodeRecord, Result, Store, Superblock, Timespec, Txn, TxnOp,
    ROOT_INO,
};

use crate::attr_seq::MetaGuard;
use crate::counters::{new_counter, Counter};
use crate::dir::{DirIndex, DirLoad, DirWrite, FIRST_COOKIE};
use crate::dir_attr::Collect;
use crate::handles::{HandleOwner, HandleUsers, Handles};
use crate::icache::{self, Claim, InodeCache, InodeLru};
use crate::inode::{Body, Inode, Meta};
use crate::namei::NewNode;
use crate::opens::Opens;
use crate::orphan::{new_orphan_table, OrphanTable};
use crate::pcache::{page_cache, PageCache, PagesMut};
use crate::perm::{self, S_ISGID, S_IXGRP};
use crate::reclaim::pressure::{self, Charged};
use crate::reclaim::{self, Shrinker, ShrinkerId};
use crate::sync::{Arc, AtomicI64, AtomicUsize, Mutex, Ordering, Weak};
use crate::TimeSet;
use crate::{Attr, Cred, DirAt, FsConfig, ShrinkStats, StatFs, DIRENT_SIZE, NAME_MAX};

/// The attributes of a directory that a create depends on: permission
/// (mode and owner) and setgid inheritance. A create reads them, allocates,
/// and links only if they are unchanged under the directory's locks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ParentAttrs {
    pub ino: Ino,
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    /// The directory's default ACL (`acl`), which a new inode inherits
    /// instead of having the umask applied.
    pub default_acl: Option<Vec<u8>>,
    /// The directory's inode flags (`iflags`): a new inode inherits
    /// `FS_NODUMP_FL` and `FS_NOATIME_FL`.
    pub flags: u32,
}

impl ParentAttrs {
    /// From `dir`'s mirror snapshot `a`; its default ACL, if the mirror
    /// says it has one, is read under its `meta` (call holding no `meta`).
    pub fn of(dir: &Inode, a: &crate::attr_seq::AttrSnapshot) -> ParentAttrs {
        let default_acl = if a.perm_snapshot().has_default_acl() {
            let m = dir.meta.lock();
            crate::acl::stored(&m.rec, crate::acl::Kind::Default).map(<[u8]>::to_vec)
        } else {
            None
        };
        ParentAttrs {
            ino: dir.ino,
            perm: a.perm(),
            uid: a.uid(),
            gid: a.gid(),
            default_acl,
            flags: a.perm_snapshot().iflags(),
        }
    }
}

/// Fold threshold of the engine's per-lane counters.
const COUNTER_BATCH: i64 = 64;

/// One file-system instance over a store. Cheap to clone (shared inside);
/// the instance is unmounted (everything written back) when the last clone
/// and the last [`OpenFile`](crate::OpenFile) are dropped.
#[derive(Clone)]
pub struct Fs {
    pub(crate) inner: Arc<FsInner>,
    /// Shared by the clones: dropped with the last, it starts the
    /// engine's release (`handles`: open handles keep it until they close).
    _user: Arc<HandleUsers<FsInner>>,
}

impl HandleOwner for FsInner {
    fn handles(&self) -> &Handles<FsInner> {
        &self.handles
    }

    /// Stop the flusher and wait for its round in flight: a round holds a
    /// reference to the mount, and without the wait the release (the final
    /// writeback and the store's close) ran on the flusher's thread after
    /// the last user's drop had returned — an fsck right after the drop
    /// read an image mid-checkpoint. Handles still open keep the mount;
    /// their writes reach the store at their last close.
    fn users_gone(&self) {
        let flusher = self
            .flusher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(t) = flusher {
            t.join();
        }
    }
}

pub(crate) struct FsInner {
    pub store: Arc<dyn Store>,
    /// `store.volatile()`: records changed by an operation stay in the
    /// write-back cache instead of going into its transaction
    /// ([`txn_record`](Self::txn_record)).
    pub volatile_store: bool,
    pub config: FsConfig,
    pub root: Arc<Inode>,
    pub icache: Box<dyn InodeCache>,
    /// Unreferenced inodes, oldest first (eviction candidates).
    pub lru: InodeLru,
    pub orphans: Box<dyn OrphanTable>,
    pub free_blocks: std::sync::Arc<dyn Counter>,
    /// Blocks of `totals.total_blocks` the store's own structures take
    /// (`Store::watch_overhead`): charged to `free_blocks` as the store
    /// reports them; read by `statfs`, `sync` and `check`.
    pub store_overhead: std::sync::Arc<CacheLine<AtomicI64>>,
    pub free_inodes: Box<dyn Counter>,
    pub cached_pages: Box<dyn Counter>,
    pub cached_inodes: Box<dyn Counter>,
    /// LRU entries of freed inodes (module header).
    pub(crate) lru_dead: Box<dyn Counter>,
    /// The inode-cache part page reclaim walks next (`reclaim_pages`).
    reclaim_cursor: CacheLine<AtomicUsize>,
    /// The read path design (seed 003), from `config.variants.read`.
    pub page_cache: Box<dyn PageCache>,
    pub rename_lock: Mutex<()>,
    /// Open handles' references to the engine, per lane, and the engine's
    /// reference to itself while any is open (`handles`).
    pub handles: Handles<FsInner>,
    /// The lanes' parts of every inode's open count (`opens`).
    pub opens: Opens,
    pub totals: Superblock,
    shrinker: Mutex<Option<ShrinkerId>>,
    /// This mount's flusher (`flusher.rs`), if its store persists and a
    /// writeback interval is set; stopped at drop.
    flusher: std::sync::Mutex<Option<lanefs_store::Ticker>>,
}

/// A reference to an inode: the root (pinned by the mount, borrowed, so the
/// hottest inode's counts are never touched) or a counted reference to a
/// cached inode, which keeps it from being evicted until dropped.
pub(crate) enum IRef<'a> {
    Root(&'a Arc<Inode>),
    Cached(Counted<'a>),
}

/// One count on a cached inode's `life`, given back on drop.
pub(crate) struct Counted<'a> {
    inode: Arc<Inode>,
    fs: &'a FsInner,
    /// Enforce the inode budget on drop (set by `alloc_inode`, which runs
    /// with a directory's `meta` held and so cannot evict itself).
    enforce_budget: bool,
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.fs.iput(&self.inode);
        if self.enforce_budget {
            self.fs.enforce_inode_budget();
        }
    }
}

impl std::ops::Deref for IRef<'_> {
    type Target = Inode;
    fn deref(&self) -> &Inode {
        match self {
            IRef::Root(r) => r,
            IRef::Cached(c) => &c.inode,
        }
    }
}

impl IRef<'_> {
    /// An *uncounted* `Arc` of the inode: it keeps the memory, not the cache
    /// entry (tests that stand for a cache walk's snapshot; handles hold
    /// inodes by their open count, `file::HeldInode`).
    #[cfg(all(test, not(lanefs_shuttle)))]
    pub fn arc(&self) -> Arc<Inode> {
        match self {
            IRef::Root(r) => Arc::clone(r),
            IRef::Cached(c) => c.inode.clone(),
        }
    }
}

/// Validate a name for creation or lookup: `ENOENT` when empty,
/// `ENAMETOOLONG` past [`NAME_MAX`], `EINVAL` with `/` or NUL.
pub(crate) fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() {
        return Err(Errno::ENOENT);
    }
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    if name.iter().any(|b| *b == b'/' || *b == 0) {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

pub(crate) fn is_dot_or_dotdot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// Note that mtime or ctime moved past atime (a store only on a change:
/// reads load this flag, and a store would take their cache line away).
fn mark_atime_stale(inode: &Inode) {
    if !inode.atime_stale.load(Ordering::Relaxed) {
        inode.atime_stale.store(true, Ordering::Relaxed);
    }
}

/// Set mtime and ctime to `now` and mark the record dirty.
pub(crate) fn touch_mc(inode: &Inode, m: &mut Meta, now: Timespec) {
    m.rec.mtime = now;
    m.rec.ctime = now;
    m.dirty = true;
    mark_atime_stale(inode);
}

/// The time of a regular file's data change that read the clock (`now`)
/// under its data lock (`pm`) and set the data side's times from it,
/// checked once `meta` (`m`) is held too: `now`, or — when a change under
/// `meta` alone (chmod, link, rename) set a later ctime since — the clock
/// read again, with the data side's times set again from it (mtime as
/// `mtime` says, `None`: the new time), so that stat's ctime does not go
/// back (Linux reads the clock under the inode lock, which both hold).
/// The caller sets the record's times from the result. Rare: no second
/// change section in the common case.
pub(crate) fn data_change_time(
    pm: &PagesMut<'_>,
    m: &Meta,
    now: Timespec,
    mtime: Option<TimeSet>,
) -> Timespec {
    if m.rec.ctime <= now {
        return now;
    }
    let later = Timespec::now();
    pm.set_times(mtime.map_or(later, |t| t.at(later)), later);
    later
}

/// Fold a regular file's data-side times (`pcache`) into its record: mtime,
/// and ctime the later of both; the record is marked dirty and the times
/// no longer are. Under the data lock (`pm`) then `meta` (`m`).
pub(crate) fn fold_file_times(pm: &mut PagesMut<'_>, m: &mut Meta) {
    (m.rec.mtime, m.rec.ctime) = crate::pcache::fold_times(m.rec.ctime, pm.times());
    m.dirty = true;
    pm.clear_times_dirty();
}

/// Move a directory's stripe changes (`dir_attr`) and its index's next
/// cookie into its record: under `meta`, opening the fold (`collect`) only
/// once it is held; the caller holds every stripe. `index_stays`: the
/// stripes keep their rooms of subdirectory links, still granted (less the
/// subdirectories folded into the link count); else the index is being
/// taken out and its rooms go with it (nothing stays granted).
pub(crate) fn fold_dir_changes(
    dir: &Inode,
    collect: Collect<'_>,
    next_cookie: u64,
    index_stays: bool,
) {
    let mut m = dir.meta.lock();
    if m.freed {
        return;
    }
    let c = collect();
    // Kept: Σ subdirs + rooms less the subdirs folded, the rooms.
    let granted = if index_stays {
        debug_assert!(
            m.links_granted >= c.subdirs,
            "subdirectories beyond the grants"
        );
        m.links_granted - c.subdirs
    } else {
        0
    };
    if granted != m.links_granted {
        *m.links_granted_mut() = granted;
    }
    if c.is_empty() && next_cookie <= m.rec.next_cookie {
        return;
    }
    c.apply(&mut m.rec);
    m.rec.next_cookie = m.rec.next_cookie.max(next_cookie);
    m.dirty = true;
}

/// The ctime a change of the inode under `meta` (`m`) sets, from a clock
/// read `now` made before the lock: no older than the record's, so that a
/// change that read a later clock and finished first is never undone
/// (stat's ctime never goes back). Linux reads the clock under the inode
/// lock for the same order; one read per operation serves all its inodes.
pub(crate) fn ctime_at(m: &Meta, now: Timespec) -> Timespec {
    now.max(m.rec.ctime)
}

/// Set ctime to `now` and mark the record dirty.
pub(crate) fn touch_c(inode: &Inode, m: &mut Meta, now: Timespec) {
    m.rec.ctime = now;
    m.dirty = true;
    mark_atime_stale(inode);
}

/// LRU entries one eviction pass may look at per inode it is asked to
/// evict (skipped entries are pinned or dead), and at least.
const EVICT_POPS_PER_INODE: usize = 4;
const EVICT_POPS_MIN: usize = 64;
/// Fewest inodes evicted once the budget is exceeded (amortises the sum).
const EVICT_BATCH_MIN: usize = 16;
/// LRU entries of freed inodes that the notes missed (`purge_dead_lru`)
/// kept at most before a purge, when fewer inodes are cached: about 1 MiB
/// of inode memory.
const LRU_DEAD_MIN: i64 = 1024;

/// `LANEFS_TEST_VARIANTS` (a `mechanism=design` list) replaces the default
/// variant set, so whole test suites run under a baseline design; a config
/// that names variants explicitly is left alone.
fn test_variant_override(mut config: FsConfig) -> FsConfig {
    if config.variants != crate::Variants::default() {
        return config;
    }
    if let Ok(list) = std::env::var("LANEFS_TEST_VARIANTS") {
        match crate::Variants::parse(&list) {
            Ok(v) => config.variants = v,
            Err(e) => tracing::warn!("LANEFS_TEST_VARIANTS ignored: {e}"),
        }
    }
    config
}

/// A generation number unique per lane without shared writes: this
/// thread's count tagged with its lane, put through a bijection of `u64`
/// that spreads every bit over all 64 (splitmix64's finaliser), so the
/// values stay unique and their low 32 bits look random. Those are what
/// FUSE keeps (the kernel's `i_generation` and a file handle's are 32
/// bits): unmixed they were the count alone, the same on every lane, so
/// a number freed by one worker and reused by another at the same count
/// got the same generation, and `open_by_handle_at` of the removed file
/// opened the new one (`tests/handles.rs`, about 1 run in 15 on
/// `/dev/fuse`).
fn new_generation() -> u64 {
    use std::cell::Cell;
    thread_local!(static NEXT: Cell<u64> = const { Cell::new(0) });
    let n = NEXT.with(|c| {
        let v = c.get() + 1;
        c.set(v);
        v
    });
    mix64(((crate::lane::lane() as u64 + 1) << 40) | (n & ((1 << 40) - 1)))
}

/// splitmix64's finaliser: a bijection of `u64` (each step is
/// invertible) whose every output bit depends on every input bit.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The mount's entry in the reclaim registry. It holds only a `Weak`: a
/// scan that runs after the mount is gone (possible with `reclaim=deferred`,
/// see `reclaim`) finds nothing and frees nothing.
struct FsShrinker(Weak<FsInner>);

impl Shrinker for FsShrinker {
    fn count(&self) -> usize {
        self.0.upgrade().map_or(0, |fs| {
            // Registries never call `count` inside a scan, so dropping
            // the last reference here (an unmount) is safe.
            fs.engine_cached() + fs.store.reclaimable()
        })
    }
    /// `nr` shared between the engine's caches and the store's own (an
    /// image store's clean inode objects) in proportion to what each
    /// holds, as Linux asks each shrinker for a share of its count; the
    /// store also gets what the engine could not free of its share.
    fn scan(&self, nr: usize) -> usize {
        let Some(fs) = self.0.upgrade() else { return 0 };
        let (engine, store) = (fs.engine_cached(), fs.store.reclaimable());
        let store_share = if store == 0 {
            0
        } else {
            (nr as u128 * store as u128 / (engine + store) as u128) as usize
        };
        let engine_share = nr - store_share;
        let mut freed = fs.reclaim_pages(engine_share) + fs.evict_inodes(engine_share);
        let store_nr = store_share.max(nr.saturating_sub(freed));
        if store_nr > 0 {
            freed += fs.store.shrink(store_nr);
        }
        // Ours may be the last reference: unmount after the scan, outside
        // the registry's read side.
        reclaim::drop_after_scan(fs);
        freed
    }
}

/// The hook through which the store reports its overhead: each change is
/// charged to the free-space counter (it may go below zero: later
/// reservations then fail with `ENOSPC` until space is freed) and kept for
/// `statfs`, `sync` and `check`. It holds the two counters, not the mount,
/// so a store that outlives the mount calls into nothing freed.
fn overhead_hook(fs: &FsInner) -> lanefs_store::OverheadHook {
    let free = std::sync::Arc::clone(&fs.free_blocks);
    let overhead = std::sync::Arc::clone(&fs.store_overhead);
    Box::new(move |delta| {
        overhead.fetch_add(delta, Ordering::Relaxed);
        free.add(-delta);
    })
}

impl FsInner {
    /// Blocks file data can have: the store's capacity less its overhead.
    pub(crate) fn data_capacity(&self) -> u64 {
        let overhead = self.store_overhead.load(Ordering::Relaxed).max(0) as u64;
        self.totals.total_blocks.saturating_sub(overhead)
    }

    /// Inodes and pages in the engine's caches (estimates).
    fn engine_cached(&self) -> usize {
        (self.cached_inodes.estimate().max(0) + self.cached_pages.estimate().max(0)) as usize
    }
}

impl Fs {
    /// Open the file system kept in `store`, creating an empty one (just the
    /// root directory) if the store holds none.
    pub fn new(store: Arc<dyn Store>, config: FsConfig) -> Result<Fs> {
        let mut sb = store.superblock()?;
        let root_rec = if sb.used_inodes == 0 {
            if sb.total_inodes == 0 {
                return Err(Errno::ENOSPC);
            }
            let now = Timespec::now();
            let rec = InodeRecord {
                ino: ROOT_INO,
                generation: 1,
                kind: FileKind::Directory,
                perm: config.root_perm & 0o7777,
                uid: config.root_uid,
                gid: config.root_gid,
                nlink: 2,
                size: 2 * DIRENT_SIZE,
                blocks: 0,
                atime: now,
                mtime: now,
                ctime: now,
                btime: now,
                rdev: 0,
                parent: ROOT_INO,
                next_cookie: FIRST_COOKIE,
                symlink: Vec::new(),
                xattrs: Vec::new(),
                flags: 0,
            };
            store.write_inode(&rec)?;
            sb.used_inodes = 1;
            store.write_superblock(&sb)?;
            rec
        } else {
            store.read_inode(ROOT_INO)?.ok_or(Errno::EUCLEAN)?
        };
        let config = test_variant_override(config);
        let free_blocks = sb.total_blocks.saturating_sub(sb.used_blocks) as i64;
        let free_inodes = sb.total_inodes.saturating_sub(sb.used_inodes) as i64;
        let v = config.variants;
        let counter = |value| new_counter(v.counter, value, COUNTER_BATCH);
        let inner = Arc::new(FsInner {
            volatile_store: store.volatile(),
            store,
            root: Arc::new(Inode::new(root_rec, false)),
            icache: icache::new_cache(v.icache, config.cache_inodes_max),
            lru: InodeLru::new(),
            orphans: new_orphan_table(v.orphan),
            free_blocks: std::sync::Arc::from(counter(free_blocks)),
            store_overhead: std::sync::Arc::new(CacheLine(AtomicI64::new(0))),
            free_inodes: counter(free_inodes),
            cached_pages: Box::new(Charged::new(counter(0))),
            cached_inodes: Box::new(Charged::new(counter(0))),
            lru_dead: counter(0),
            reclaim_cursor: CacheLine(AtomicUsize::new(0)),
            page_cache: page_cache(v.read),
            rename_lock: Mutex::new(()),
            handles: Handles::new(),
            opens: Opens::new(),
            totals: sb,
            config,
            shrinker: Mutex::new(None),
            flusher: std::sync::Mutex::new(None),
        });
        inner.store.watch_overhead(overhead_hook(&inner));
        // Model builds run no thread of their own outside the checker.
        #[cfg(not(lanefs_shuttle))]
        if let (Some(every), false) = (inner.config.writeback_interval, inner.volatile_store) {
            if let Some(t) = crate::flusher::start(Arc::downgrade(&inner), every) {
                *inner.flusher.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
            }
        }
        let id =
            reclaim::registry(v.reclaim).register(Arc::new(FsShrinker(Arc::downgrade(&inner))));
        *inner.shrinker.lock() = Some(id);
        Ok(Fs {
            _user: Arc::new(HandleUsers::new(&inner)),
            inner,
        })
    }

    /// A fresh file system on a [`MemoryStore`](lanefs_store::MemoryStore)
    /// with default limits.
    ///
    /// ```
    /// let fs = lanefs_core::Fs::new_in_memory();
    /// assert_eq!(fs.getattr(lanefs_core::ROOT_INO).unwrap().nlink, 2);
    /// ```
    pub fn new_in_memory() -> Fs {
        let store = Arc::new(lanefs_store::MemoryStore::default());
        match Fs::new(store, FsConfig::default()) {
            Ok(fs) => fs,
            // A new memory store always has room for the root directory.
            Err(e) => unreachable!("a fresh memory store failed to format: {e}"),
        }
    }

    /// The store this file system lives in.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// Attributes of `ino`. A cached inode answers from its attribute
    /// mirror without a lock (see `attr_seq`).
    pub fn getattr(&self, ino: Ino) -> Result<Attr> {
        {
            let guard = crossbeam_epoch::pin();
            if let Some(inode) = self.inner.iget_rcu(ino, &guard) {
                let a = inode.attr_snapshot();
                if a.freed() {
                    return Err(Errno::ENOENT);
                }
                return Ok(a.attr(inode.ino, inode.kind));
            }
        }
        let inode = self.inner.iget(ino)?;
        let m = inode.meta.lock();
        if m.freed {
            return Err(Errno::ENOENT);
        }
        Ok(inode.attr_locked(&m))
    }

    /// `access(2)`: `mask` of [`MAY_READ`](crate::MAY_READ),
    /// [`MAY_WRITE`](crate::MAY_WRITE), [`MAY_EXEC`](crate::MAY_EXEC)
    /// (0 = exists).
    /// Other bits in `mask` are `EINVAL`, as `faccessat(2)`'s.
    pub fn access(&self, cred: &Cred, ino: Ino, mask: u32) -> Result<()> {
        if mask & !(crate::MAY_READ | crate::MAY_WRITE | crate::MAY_EXEC) != 0 {
            return Err(Errno::EINVAL);
        }
        {
            let guard = crossbeam_epoch::pin();
            if let Some(inode) = self.inner.iget_rcu(ino, &guard) {
                let a = inode.meta.perm_attr();
                if !a.freed() {
                    return perm::permission_snap(cred, inode, &a, mask);
                }
            }
        }
        let inode = self.inner.iget(ino)?;
        let m = inode.meta.lock();
        perm::permission(cred, &m.rec, mask)
    }

    /// Give back `n` lookup references of `ino` (FUSE's FORGET). Unknown
    /// inodes and excess counts are ignored.
    pub fn forget(&self, ino: Ino, n: u64) {
        if ino == ROOT_INO {
            return;
        }
        let Some(inode) = self.inner.icache.get(ino) else {
            return;
        };
        let inode = IRef::Cached(self.inner.counted(inode, false));
        if !inode.is_born() {
            // Not the inode the caller looked up (its number was reused).
            return;
        }
        {
            let mut m = inode.meta.lock();
            // Excess counts are ignored by contract (an unheld number may
            // have been reused): clamp explicitly, never wrap.
            let n = n.min(m.lookups);
            *m.lookups_mut() -= n;
        }
        self.inner.maybe_free(&inode);
    }

    /// File-system totals and free space.
    pub fn statfs(&self) -> Result<StatFs> {
        let fs = &self.inner;
        let blocks = fs.data_capacity();
        let free_blocks = fs.free_blocks.sum().clamp(0, blocks as i64) as u64;
        let free_inodes = fs.free_inodes.sum().clamp(0, fs.totals.total_inodes as i64) as u64;
        Ok(StatFs {
            block_size: lanefs_store::PAGE_SIZE as u32,
            blocks,
            blocks_free: free_blocks,
            blocks_avail: free_blocks,
            files: fs.totals.total_inodes,
            files_free: free_inodes,
            name_max: NAME_MAX as u32,
        })
    }

    /// Write everything dirty back to the store and sync it (`syncfs`).
    pub fn sync(&self) -> Result<()> {
        self.inner.sync_all()
    }

    /// Write back and evict every unreferenced cached object: inodes,
    /// directory indexes, data pages. Everything is read back on demand.
    pub fn shrink(&self) -> ShrinkStats {
        let fs = &self.inner;
        let mut stats = ShrinkStats::default();
        let mut visit = |inode: &Arc<Inode>| {
            let (pages, dir) = fs.drop_caches_of(inode);
            stats.pages_dropped += pages;
            stats.dirs_dropped += dir as usize;
        };
        visit(&fs.root);
        fs.icache.for_each(&mut visit);
        // As many as are cached: a bound, so the pass ends (up to
        // `EVICT_POPS_PER_INODE` LRU pops each) even when an inode whose
        // lock a descheduled thread holds keeps going back to the LRU;
        // `usize::MAX` made that a spin until the holder ran.
        let cached = fs.icache.len().saturating_add(fs.lru.len());
        stats.inodes_evicted = fs.evict_inodes(cached);
        stats
    }

    /// Inodes and data pages currently cached (for tests and stats).
    pub fn cache_counts(&self) -> (usize, usize) {
        let fs = &self.inner;
        (fs.icache.len(), fs.cached_pages.sum().max(0) as usize)
    }
}

impl FsInner {
    /// Add the record `rec()` an operation changed to its transaction —
    /// unless the store is volatile ([`Store::volatile`]), whose records the
    /// write-back cache writes later (the caller leaves the inode dirty).
    /// Whether it was added.
    pub fn txn_record(&self, txn: &mut Txn, rec: impl FnOnce() -> InodeRecord) -> Result<bool> {
        if self.volatile_store {
            return Ok(false);
        }
        txn.push(TxnOp::PutInode(rec()))?;
        Ok(true)
    }

    /// Add an entry change `op()` to its transaction — unless the store is
    /// volatile, whose entries live in the loaded index
    /// ([`Store::volatile`]).
    pub fn txn_entry(&self, txn: &mut Txn, op: impl FnOnce() -> TxnOp) -> Result<()> {
        if self.volatile_store {
            return Ok(());
        }
        txn.push(op())
    }

    /// Commit `txn`, if it holds anything.
    pub fn commit(&self, txn: &Txn) -> Result<()> {
        if txn.ops().is_empty() {
            return Ok(());
        }
        self.store.commit(txn)
    }

    /// Take directory `inode`'s index out (its load lock held in `load`),
    /// waiting for its stripes if `wait`, else only if none is held. A
    /// volatile store first gets the entries back (it gave them up at
    /// load, `namei::load_index`; if it fails, logged, the index stays);
    /// the stripes' changes fold into the record. Whether it was taken.
    pub(crate) fn take_index(&self, inode: &Inode, load: &mut DirLoad<'_>, wait: bool) -> bool {
        let save = |idx: &DirIndex| {
            if !self.volatile_store {
                return true;
            }
            match self.store.dir_put_all(inode.ino, idx.records()) {
                Ok(()) => true,
                Err(e) => {
                    tracing::error!(ino = inode.ino, "directory entries not handed back: {e}");
                    false
                }
            }
        };
        let fold = |c: Collect<'_>, next| fold_dir_changes(inode, c, next, false);
        if wait {
            load.take(save, fold)
        } else {
            load.try_take(save, fold)
        }
    }

    /// `f` on the root, then on every inode in the cache.
    fn for_each_cached(&self, mut f: impl FnMut(&Arc<Inode>)) {
        f(&self.root);
        self.icache.for_each(&mut f);
    }

    /// The inode `ino`, from the cache or the store. `ENOENT` for one its
    /// creator has not named yet (`Inode::born`).
    pub fn iget(&self, ino: Ino) -> Result<IRef<'_>> {
        self.iget_or_unborn(ino)?.ok_or(Errno::ENOENT)
    }

    /// [`iget`](Self::iget), but `Ok(None)` for an inode its creator has
    /// not named yet (`Inode::born`), where `iget` answers `ENOENT`: a
    /// caller that found the number in an entry that stayed linked waits
    /// for the creator instead (`lookup_child`).
    pub(crate) fn iget_or_unborn(&self, ino: Ino) -> Result<Option<IRef<'_>>> {
        if ino == ROOT_INO {
            return Ok(Some(IRef::Root(&self.root)));
        }
        if ino == 0 {
            return Err(Errno::ENOENT);
        }
        debug_assert_eq!(
            crate::attr_seq::metas_held(),
            0,
            "icache load under meta (lock order: shard locks before meta)"
        );
        let found = self
            .icache
            .get_or_load(ino, &mut || match self.store.read_inode(ino)? {
                // An unlinked inode is never evicted (it is freed or pinned),
                // so a record with no links is one being freed right now.
                Some(rec) if rec.nlink == 0 => Ok(None),
                Some(rec) if rec.ino == ino => Ok(Some(Inode::new(rec, false))),
                Some(_) => Err(Errno::EUCLEAN),
                None => Ok(None),
            })?;
        let loaded = found.ok_or(Errno::ENOENT)?;
        if loaded.new {
            self.cached_inodes.add(1);
            self.enforce_inode_budget();
        }
        let inode = IRef::Cached(self.counted(loaded.inode, false));
        // Not named yet by its creator (a number kept while it was freed
        // and reused): not a file yet, whatever its creator does next.
        Ok(inode.is_born().then_some(inode))
    }

    /// Wrap a counted reference from the icache.
    fn counted(&self, inode: Arc<Inode>, enforce_budget: bool) -> Counted<'_> {
        debug_assert!(
            inode.life.refs() > 0,
            "an uncounted inode wrapped as counted"
        );
        Counted {
            inode,
            fs: self,
            enforce_budget,
        }
    }

    /// For the lock-free walk: the root, or the LIVE cached inode `ino`,
    /// taking no reference; valid while `guard` is pinned. `None` on a miss,
    /// a LOADING/FREEING/DEAD entry or an unborn inode (the caller falls
    /// back to `iget`).
    // Used by the lock-free path walk.
    #[allow(dead_code)]
    pub(crate) fn iget_rcu<'g>(&'g self, ino: Ino, guard: &'g Guard) -> Option<&'g Inode> {
        if ino == ROOT_INO {
            return Some(&self.root);
        }
        // An unborn inode is a miss (see `Inode::born`).
        self.icache.get_rcu(ino, guard).filter(|i| i.is_born())
    }

    /// Give back one counted reference; the last one of a LIVE inode puts it
    /// on the LRU.
    fn iput(&self, inode: &Arc<Inode>) {
        if inode.life.put() && inode.life.mark_on_lru() {
            self.lru.push(Arc::clone(inode));
        }
    }

    /// Run `op` on directory `at` — the parent of a create, link, unlink
    /// or rename — without counting a reference on it, so that changes
    /// of different names in one directory write no line of its own
    /// (neither its `life` word nor its `meta`).
    ///
    /// The directory is found lock-free (`get_rcu`) and `op` runs under
    /// the epoch guard that keeps its memory. Nothing keeps it cached: an
    /// evictor may claim it (FREEING) meanwhile. So every change of a
    /// directory happens under a stripe of its entry lock (taken after
    /// its load lock when the index must be loaded), and
    /// [`dir_write`](Self::dir_write) answers `ESTALE` when, with the
    /// stripe held, the directory is FREEING; the evictor claims first,
    /// then needs the load lock and every stripe free (`evict_claimed`),
    /// and gives the inode back if any is busy. The locks order the two:
    /// an evictor that got them released them before the op took its
    /// stripe, so the op sees the claim; an op that holds one when the
    /// evictor tries makes the eviction fail, so the LIVE it saw stays
    /// true until it ends. One that sees FREEING has changed nothing and
    /// runs again here on a counted reference (which waits for the
    /// eviction and reloads). Operations are written to change nothing
    /// before their first `dir_write` of a directory and to undo all on
    /// an error, so the first try's `ESTALE` is clean.
    ///
    /// `ENOENT` when `at`'s generation no longer matches (the directory a
    /// caller found was freed and its number reused), `ENOTDIR` for a
    /// non-directory.
    pub fn with_dir<T>(&self, at: DirAt, mut op: impl FnMut(&Inode) -> Result<T>) -> Result<T> {
        {
            let guard = crossbeam_epoch::pin();
            if let Some(dir) = self.iget_rcu(at.ino, &guard) {
                // A hint (read only): FREEING or DEAD ones take the
                // counted path, which waits for them.
                if dir.life.state() == icache::State::Live {
                    if !at.matches(dir.generation) {
                        return Err(Errno::ENOENT);
                    }
                    if dir.kind != FileKind::Directory {
                        return Err(Errno::ENOTDIR);
                    }
                    // `ESTALE`: the claim was seen (the evictor may have
                    // given the inode back since; either way nothing was
                    // changed, and the counted try decides). A store's own
                    // `ESTALE`, if any, comes back from that try too.
                    match op(dir) {
                        Err(Errno::ESTALE) => {}
                        r => return r,
                    }
                }
            }
        }
        let dir = self.dir_checked(at)?;
        op(&dir)
    }

    /// The directory `at`, counted: `ENOENT` if its generation no longer
    /// matches (checked before the kind: a number reused by a file is a
    /// directory gone, not `ENOTDIR`).
    pub fn dir_checked(&self, at: DirAt) -> Result<IRef<'_>> {
        let d = self.iget(at.ino)?;
        if !at.matches(d.generation) {
            return Err(Errno::ENOENT);
        }
        if d.kind != FileKind::Directory {
            return Err(Errno::ENOTDIR);
        }
        Ok(d)
    }

    /// Make a new inode owned by `cred` in a directory whose attributes
    /// are `parent_rec`, applying setgid-directory inheritance. Reserves an
    /// inode (`ENOSPC`); the caller links it into the directory, then marks
    /// it born (`Inode::mark_born`: until then it is found by no number),
    /// or discards it (`discard_new`). Call with no lock held (the icache
    /// insert may wait for a dying inode).
    pub fn alloc_inode(
        &self,
        cred: &Cred,
        parent_rec: &ParentAttrs,
        n: &NewNode<'_>,
    ) -> Result<IRef<'_>> {
        if !self.free_inodes.try_sub(1) {
            return Err(Errno::ENOSPC);
        }
        let ino = match self.store.alloc_ino() {
            Ok(i) => i,
            Err(e) => {
                self.free_inodes.add(1);
                return Err(e);
            }
        };
        let now = Timespec::now();
        let (kind, rdev, symlink) = (n.kind, n.rdev, n.target);
        let is_dir = kind == FileKind::Directory;
        // `posix_acl_create`: with a default ACL in the directory, the
        // mode as requested (no umask) masked by it, and the ACLs it
        // gives; a symlink gets none.
        let inherited = match &parent_rec.default_acl {
            Some(d) if kind != FileKind::Symlink => crate::acl::inherit(d, n.requested, is_dir),
            _ => None,
        };
        let (mut perm, xattrs) = match inherited {
            Some((perm, xattrs)) => (perm & 0o7777, xattrs),
            None => (n.perm & 0o7777, Vec::new()),
        };
        let mut gid = cred.gid;
        if parent_rec.perm & S_ISGID != 0 {
            gid = parent_rec.gid;
            if kind == FileKind::Directory {
                perm |= S_ISGID;
            } else if n.requested & (S_ISGID | S_IXGRP) == (S_ISGID | S_IXGRP)
                && !cred.is_root()
                && !cred.in_group(parent_rec.gid)
            {
                perm &= !S_ISGID;
            }
        }
        let rec = InodeRecord {
            ino,
            generation: new_generation(),
            kind,
            perm,
            uid: cred.uid,
            gid,
            nlink: if is_dir { 2 } else { 1 },
            size: if is_dir {
                2 * DIRENT_SIZE
            } else {
                symlink.len() as u64
            },
            blocks: 0,
            atime: now,
            mtime: now,
            ctime: now,
            btime: now,
            rdev,
            parent: if is_dir { parent_rec.ino } else { 0 },
            next_cookie: FIRST_COOKIE,
            symlink: symlink.to_vec(),
            xattrs,
            flags: crate::iflags::inherited(parent_rec.flags),
        };
        let inode = Arc::new(Inode::new(rec, true));
        // Unborn until the caller names it (`Inode::born`); published by
        // the insert below.
        inode.born.store(false, Ordering::Relaxed);
        {
            let mut m = inode.meta.lock();
            m.lookups = n.lookups;
            inode.opens.set_born(n.opens);
        }
        debug_assert_eq!(
            crate::attr_seq::metas_held(),
            0,
            "icache insert under meta (lock order: shard locks before meta)"
        );
        // Holds the creator's reference (`Inode::new`); the budget is
        // enforced when it is dropped, outside the caller's `meta`.
        self.icache.insert_new(inode.clone());
        self.cached_inodes.add(1);
        Ok(IRef::Cached(self.counted(inode, true)))
    }

    /// Undo `alloc_inode` for an inode that was never linked.
    pub fn discard_new(&self, inode: &Inode) {
        inode.mark_freed(&mut inode.meta.lock());
        // No handle was made (a new inode's creator gets its handle only
        // after the link); none may be made from the cache now.
        inode.opens.seal_unused();
        if inode.life.kill() {
            self.lru_dead.add(1);
        }
        let freed = self.store.free_ino(inode.ino);
        // The store never had its record: once unhashed, lookups miss.
        let removed = self.icache.remove(inode);
        debug_assert!(removed, "a new inode left the cache while referenced");
        if removed {
            self.cached_inodes.add(-1);
        }
        match freed {
            Ok(()) => self.free_inodes.add(1),
            // The store still holds the number: credit nothing.
            Err(e) => tracing::error!(ino = inode.ino, "store refused to free a new inode: {e}"),
        }
    }

    /// Free `inode` if nothing keeps it: no links, lookups or opens. Must be
    /// called with none of the inode's locks held.
    pub fn maybe_free(&self, inode: &Inode) {
        // Whether it is open is asked after the rest (a look at its slot in
        // every used lane), and decided by the seal below (exact, under
        // `meta`).
        let freeable =
            |m: &Meta| !m.freed && m.rec.nlink == 0 && m.lookups == 0 && inode.ino != ROOT_INO;
        {
            let m = inode.meta.lock();
            if !freeable(&m) {
                // Whether it is still open is asked last, by the offer.
                let unlooked = !m.freed && m.lookups == 0;
                drop(m);
                if unlooked {
                    self.reoffer_to_lru(inode);
                }
                return;
            }
            // Open (looked at before the data lock is taken, which a write
            // through the handle holds): its closes review, and the one
            // that finds no handle left decides again. Unlinked and open:
            // an orphan until then.
            if !self.opens.review(inode) {
                self.note_unlinked(inode, &m);
                return;
            }
        }
        // The data lock first (lock order), so that `rec.blocks` is read
        // after any truncate or punch in flight has accounted its pages.
        let mut data = match &inode.body {
            Body::File(d) => Some(d.write()),
            _ => None,
        };
        let (blocks, orphan_slot) = {
            let mut m = inode.meta.lock();
            if !freeable(&m) {
                return;
            }
            if !self.opens.seal(inode) {
                // Open: its closes review (`review_closed`), and the one
                // that finds no handle left decides again. Unlinked and
                // open: an orphan until then.
                self.note_unlinked(inode, &m);
                return;
            }
            inode.mark_freed(&mut m);
            m.dirty = false;
            (m.rec.blocks, m.orphan_slot.take())
        };
        if let Some(pm) = data.as_mut() {
            let n = pm.discard();
            self.cached_pages.add(-(n as i64));
        }
        drop(data);
        if let Body::Dir(d) = &inode.body {
            // Freed: nothing of its attributes is kept.
            d.lock_load().take(|_| true, |_, _| {});
        }
        // DEAD (lookups wait), freed in the store, then unhashed: a racing
        // `iget` never reloads the store's possibly stale record, and a new
        // inode reusing the number waits for this entry to leave.
        let queued = inode.life.kill();
        if let Some(slot) = orphan_slot {
            self.orphans.remove(slot);
        }
        // One transaction. The store already holds the record with no
        // links (the unlink's transaction put it): if this fails, or a crash
        // comes first, recovery frees it as an orphan.
        let mut txn = Txn::new();
        let freed = txn
            .push(TxnOp::FreeInode(inode.ino))
            .and_then(|()| self.store.commit(&txn));
        if let Err(e) = &freed {
            tracing::error!(ino = inode.ino, "store refused to free an inode: {e}");
        }
        if self.icache.remove(inode) {
            self.cached_inodes.add(-1);
        }
        if freed.is_ok() {
            self.free_blocks.add(blocks as i64);
            self.free_inodes.add(1);
        }
        // Otherwise the store still holds the number and its pages: credit
        // nothing.
        if queued {
            // Its LRU entry now keeps only its memory (module header):
            // noted, to be taken out where it sits with the batch this
            // note completes (`InodeLru::note_freed`, no shared line
            // written), or, if the note misses, by the purge.
            self.lru_dead.add(1);
            let taken = self.lru.note_freed(inode);
            if !taken.is_empty() {
                self.lru_dead.add(-(taken.len() as i64));
            }
            drop(taken);
            self.purge_dead_lru();
        }
    }

    /// If the LRU holds more entries of freed inodes than there are cached
    /// inodes (and at least `LRU_DEAD_MIN`; both by the counters'
    /// estimates), take them all out. The notes of frees take nearly all
    /// out before (`InodeLru::note_freed`): this catches those a note
    /// missed, and takes the holes too. A pass
    /// walks at most the cached inodes' entries and the dead ones and takes
    /// out more than half of what it walks, so it costs O(1) per freed
    /// inode. Called with no lock held (it takes the LRU's leaf locks and
    /// drops the entries after them).
    fn purge_dead_lru(&self) {
        // The estimates only (each one word that folds write): a free
        // reads no lane's shard that another lane's free writes (the
        // conflict audit's `rmdir ‖ rmdir` of two directories), so up to
        // the lanes' unfolded shares more dead entries wait.
        let limit = self.cached_inodes.estimate().max(LRU_DEAD_MIN);
        if self.lru_dead.estimate() <= limit {
            return;
        }
        let dead = self.lru.remove_dead();
        self.lru_dead.add(-(dead.len() as i64));
    }

    /// The last lookup count of a linked inode went, or eviction took it
    /// off the LRU while it was pinned: if nothing references it, put it
    /// back on the LRU. Called with no lock held. Whether it is open is
    /// asked last, under `meta` ([`Opens::review`], which sums the used
    /// lanes): if it is, the review bit stays set and the close that finds
    /// no handle left offers it (`review_closed`).
    pub(crate) fn reoffer_to_lru(&self, inode: &Inode) {
        if inode.ino == ROOT_INO || inode.life.on_lru() || inode.life.refs() != 0 {
            return;
        }
        {
            let m = inode.meta.lock();
            if m.freed || m.lookups != 0 || !self.opens.review(inode) {
                return;
            }
        }
        self.offer_to_lru(inode);
    }

    /// Put an unpinned inode back on the LRU unless it is there or
    /// referenced. A counted reference's drop does the offer (`iput`). The
    /// number may have been reused meanwhile; offering that inode is
    /// harmless.
    fn offer_to_lru(&self, inode: &Inode) {
        if inode.ino == ROOT_INO || inode.life.on_lru() || inode.life.refs() != 0 {
            return;
        }
        if let Some(i) = self.icache.get(inode.ino) {
            drop(self.counted(i, false));
        }
    }

    /// A close lowered the count of an inode a decision waits on (its
    /// review bit: `Opens::lower`), holding an epoch guard from before
    /// that (the inode may be sealed and unhashed by another thread from
    /// then on; its memory stays until the guard goes). Under `meta`, sum
    /// the lanes: with no handle left, free the inode if nothing else keeps
    /// it and it is unlinked (`maybe_free`, which seals), or offer it back
    /// to the LRU if linked and unpinned.
    pub(crate) fn review_closed(&self, inode: &Inode) {
        let (orphan, unpinned) = {
            let m = inode.meta.lock();
            if m.freed || !self.opens.review(inode) {
                return;
            }
            (m.rec.nlink == 0, m.lookups == 0)
        };
        if !unpinned {
            // Its last forget decides (`maybe_free`, `reoffer_to_lru`).
        } else if orphan {
            self.maybe_free(inode);
        } else {
            self.offer_to_lru(inode);
        }
    }

    /// After a link count reached zero: record the orphan if the inode lives
    /// on (looked up or open), keeping its slot in `meta` for `maybe_free`;
    /// otherwise seal its open count, so that it cannot be opened before
    /// `maybe_free` (which the caller runs next) frees it. Called under
    /// `meta`; once per inode (a recorded orphan is skipped).
    pub fn note_unlinked(&self, inode: &Inode, m: &Meta) {
        if m.rec.nlink == 0
            && m.orphan_slot.get().is_none()
            && (m.lookups > 0 || !self.opens.seal(inode))
        {
            m.orphan_slot.set(Some(self.orphans.add(inode.ino)));
        }
    }

    /// Bring a regular file's record up to its data side (under the data
    /// lock, then `meta` if there is anything to do): fold the data-side
    /// times a pure overwrite left, and take off its blocks the stale store
    /// pages the data side removed (`PagesMut::take_stale_freed`). Nothing
    /// for a freed file (its free gave back what the record counted).
    pub(crate) fn settle_file_record(&self, pm: &mut PagesMut<'_>, inode: &Inode) {
        let stale = pm.take_stale_freed();
        if !pm.times_dirty() && stale == 0 {
            return;
        }
        let mut m = inode.meta.lock();
        if m.freed {
            return;
        }
        if pm.times_dirty() {
            fold_file_times(pm, &mut m);
        }
        self.give_back_stale(stale, &mut m);
    }

    /// Take `stale` pages (removed from the store as stale, still counted
    /// by the record) off the record's blocks and back to the free count.
    pub(crate) fn give_back_stale(&self, stale: u64, m: &mut Meta) {
        if stale == 0 {
            return;
        }
        debug_assert!(
            m.rec.blocks >= stale,
            "stale pages the record did not count"
        );
        m.rec.blocks = m.rec.blocks.saturating_sub(stale);
        m.dirty = true;
        self.free_blocks.add(stale as i64);
    }

    /// Write back one inode's dirty pages and record (a directory's with
    /// its stripes' changes folded in, under every stripe).
    pub fn writeback(&self, inode: &Inode) -> Result<()> {
        match &inode.body {
            Body::File(d) => {
                let mut pm = d.write();
                pm.flush(&*self.store, inode.ino)?;
                self.settle_file_record(&mut pm, inode);
            }
            Body::Dir(d) => d
                .freeze()
                .fold(|c, next| fold_dir_changes(inode, c, next, true)),
            Body::Other => {}
        }
        let mut m = inode.meta.lock();
        if m.dirty && !m.freed {
            self.store.write_inode(&m.rec)?;
            m.dirty = false;
        }
        Ok(())
    }

    /// A volatile store's directories all given back: every loaded index
    /// dropped, its entries handed to the store (unmount, whose store may
    /// be mounted again; `check`, which reads the store). Nothing for a
    /// store that persists (it has every entry already).
    pub(crate) fn unload_dirs(&self) {
        if !self.volatile_store {
            return;
        }
        self.for_each_cached(|inode| {
            if let Body::Dir(d) = &inode.body {
                self.take_index(inode, &mut d.lock_load(), true);
            }
        });
    }

    /// At unmount: the lookup references the mount's users held are gone
    /// with them (the kernel forgets every inode at unmount), so an
    /// unlinked inode that only they kept is freed now, as Linux's umount
    /// evicts and deletes it — not left to the next mount's orphan
    /// processing (an image), nor leaked (a memory store mounted again,
    /// which `check` then reports). Open handles keep the engine alive, so
    /// none is open here.
    fn free_forgotten_orphans(&self) {
        let mut unlinked = Vec::new();
        self.icache.for_each(&mut |inode| {
            let mut m = inode.meta.lock();
            if !m.freed && m.rec.nlink == 0 && m.lookups > 0 {
                *m.lookups_mut() = 0;
                unlinked.push(Arc::clone(inode));
            }
        });
        for inode in unlinked {
            self.maybe_free(&inode);
        }
    }

    /// Write back every dirty inode to the store (the flusher's round):
    /// [`sync_all`](Self::sync_all) without the superblock and the
    /// store's own sync, which its commit interval does. Errors are
    /// logged; the inode stays dirty for the next round.
    pub(crate) fn write_back_dirty(&self) {
        self.for_each_cached(|inode| {
            if let Err(e) = self.writeback(inode) {
                tracing::warn!(ino = inode.ino, "background writeback failed: {e}");
            }
        });
    }

    pub fn sync_all(&self) -> Result<()> {
        let mut first_err = Ok(());
        self.for_each_cached(|inode| {
            if let Err(e) = self.writeback(inode) {
                if first_err.is_ok() {
                    first_err = Err(e);
                }
            }
        });
        first_err?;
        let sb = Superblock {
            used_blocks: self
                .data_capacity()
                .saturating_sub(self.free_blocks.sum().max(0) as u64),
            used_inodes: self
                .totals
                .total_inodes
                .saturating_sub(self.free_inodes.sum().max(0) as u64),
            ..self.totals
        };
        self.store.write_superblock(&sb)?;
        self.store.sync()
    }

    /// Write back and drop the clean pages and the directory index of one
    /// inode if its locks are free. Returns (pages dropped, index dropped).
    fn drop_caches_of(&self, inode: &Inode) -> (usize, bool) {
        match &inode.body {
            Body::File(d) => {
                let Some(mut pm) = d.try_write() else {
                    return (0, false);
                };
                if pm.flush(&*self.store, inode.ino).is_err() {
                    return (0, false);
                }
                let n = pm.drop_clean();
                self.cached_pages.add(-(n as i64));
                (n, false)
            }
            Body::Dir(d) => {
                let Some(mut load) = d.try_lock_load() else {
                    return (0, false);
                };
                (0, self.take_index(inode, &mut load, false))
            }
            Body::Other => (0, false),
        }
    }

    /// Finish evicting an inode this thread claimed (FREEING): check the
    /// pins under `meta`, write everything back (no cache lock held; lookups
    /// of this number wait), unhash. On any failure give it back LIVE.
    /// A pinned inode leaves the LRU (its unpinning re-offers it); one that
    /// could not be written back now (its data lock busy, a store error)
    /// goes back on the LRU, or nobody would ever offer it again.
    fn evict_claimed(&self, inode: &Arc<Inode>) -> bool {
        {
            let m = inode.meta.lock();
            // Pinned (it returns to the LRU when unpinned), or unlinked
            // (being freed by `maybe_free`, which must find it hashed).
            // Open, or opened from now on: an open without a counted
            // reference (`open_rcu`) can start at any time, so the count
            // is sealed at 0 (its raise then fails and it takes the
            // counted path, which waits for the claim); unsealed if the
            // eviction is given up.
            if m.lookups != 0 || m.freed || m.rec.nlink == 0 || !self.opens.seal(inode) {
                inode.life.unclaim();
                return false;
            }
        }
        if let Body::Dir(d) = &inode.body {
            // Its load lock and, with an index loaded, every stripe must be
            // free now: a change of the directory holds one of them from
            // before it checks the claim (`dir_write`, for a directory
            // nobody counted: `with_dir`) to its end, so a busy lock means
            // a change may be running on the strength of a LIVE it saw;
            // a free one means any later change takes the lock after us
            // and so sees the claim. Either way no fence is needed. An
            // index left (a take-out that failed, or one a reader installed
            // since) holds changes of size and times (`dir_attr`) not
            // folded into the record: give the inode back.
            let taken = match d.try_lock_load() {
                Some(mut load) => {
                    load.index().is_none() || self.take_index(inode, &mut load, false)
                }
                None => false,
            };
            if !taken || d.is_loaded() {
                self.unclaim_to_lru(inode);
                return false;
            }
        } else {
            self.drop_caches_of(inode);
        }
        if let Body::File(d) = &inode.body {
            // Dirty pages left: their writeback failed. Data-side times
            // not in the record yet (a pure overwrite's) go into it now.
            match d.try_write() {
                Some(mut pm) if pm.cached_pages() == 0 => self.settle_file_record(&mut pm, inode),
                _ => {
                    self.unclaim_to_lru(inode);
                    return false;
                }
            }
        }
        {
            let mut m = inode.meta.lock();
            if m.dirty {
                if let Err(e) = self.store.write_inode(&m.rec) {
                    tracing::warn!(ino = inode.ino, "writeback before eviction failed: {e}");
                    drop(m);
                    self.unclaim_to_lru(inode);
                    return false;
                }
                m.dirty = false;
            }
        }
        let removed = self.icache.remove(inode);
        debug_assert!(removed, "a FREEING inode left the hash under its evictor");
        if removed {
            self.cached_inodes.add(-1);
        }
        removed
    }

    /// Give back a claimed, unpinned inode that could not be evicted now:
    /// LIVE again and back on the LRU for a later pass.
    fn unclaim_to_lru(&self, inode: &Arc<Inode>) {
        self.opens.unseal(inode);
        inode.life.unclaim();
        if inode.life.mark_on_lru() {
            self.lru.push(Arc::clone(inode));
        }
    }

    /// Evict up to `nr` unreferenced inodes from the LRU; returns how many
    /// left the cache. Pinned inodes met on the way leave the LRU (they come
    /// back when released), so each is looked at once per release.
    pub fn evict_inodes(&self, nr: usize) -> usize {
        let mut evicted = 0;
        let mut pops_left = nr.saturating_mul(EVICT_POPS_PER_INODE).max(EVICT_POPS_MIN);
        while evicted < nr && pops_left > 0 {
            pops_left -= 1;
            let Some(inode) = self.lru.pop() else { break };
            // Second chance for an unpinned inode lock-free walks used
            // since the last pass (they take no reference, so its LRU place
            // is as old as its last counted use): back to the tail, hint
            // cleared. The entry keeps its `ON_LRU` bit, which this pop
            // owns. A pinned one leaves the LRU below as before (its last
            // release puts it back at the tail anyway).
            if inode.life.refs() == 0 && inode.take_referenced() {
                self.lru.push(inode);
                continue;
            }
            match inode.life.claim_for_evict() {
                Claim::Claimed => {
                    if self.evict_claimed(&inode) {
                        evicted += 1;
                    }
                }
                Claim::Pinned => {}
                // Freed while queued: counted by its free.
                Claim::Gone => self.lru_dead.add(-1),
            }
        }
        evicted
    }

    fn enforce_inode_budget(&self) {
        let over = self
            .cached_inodes
            .excess_over(self.config.cache_inodes_max as i64);
        if over > 0 {
            self.evict_inodes((over as usize).max(EVICT_BATCH_MIN));
        }
        pressure::relieve(reclaim::registry(self.config.variants.reclaim));
    }

    /// Drop clean pages (after writeback) until about `nr` are gone.
    pub fn reclaim_pages(&self, nr: usize) -> usize {
        self.reclaim_pages_until(nr, || false)
    }

    /// [`reclaim_pages`](Self::reclaim_pages), stopping early once
    /// `enough()`. Walks the inode cache one part at a time from the
    /// reclaim cursor, so reclaimers running together (every writer over
    /// the page budget reclaims) take different parts, and each stops when
    /// it has dropped its share: no reclaimer walks the whole cache to drop
    /// a few pages, and none walks the inodes another just emptied. (Each
    /// walked from the first inode before, to its end: at 16 threads over
    /// the budget, fs_mark fell to a quarter of its 8-thread rate.)
    fn reclaim_pages_until(&self, nr: usize, enough: impl Fn() -> bool) -> usize {
        let mut dropped = 0;
        for _ in 0..self.icache.parts() {
            if dropped >= nr || enough() {
                break;
            }
            let part = self.reclaim_cursor.fetch_add(1, Ordering::Relaxed);
            self.icache.for_each_in(part, &mut |inode| {
                if dropped < nr {
                    dropped += self.drop_caches_of(inode).0;
                }
            });
        }
        dropped
    }

    /// Called after pages were added to the cache, with no locks held:
    /// over the budget, reclaim down to seven eighths of it.
    pub fn enforce_page_budget(&self) {
        let max = self.config.cache_pages_max as i64;
        let over = self.cached_pages.excess_over(max);
        if over > 0 {
            let low = max - max / 8;
            self.reclaim_pages_until(over as usize + (max / 8) as usize, || {
                self.cached_pages.excess_over(low) == 0
            });
        }
        pressure::relieve(reclaim::registry(self.config.variants.reclaim));
    }
}

impl Drop for FsInner {
    fn drop(&mut self) {
        // Dropped here only if the users' drop did not take it (a mount
        // dropped on the flusher's own thread stops it, never joins it).
        if let Some(f) = self
            .flusher
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            f.stop();
        }
        if let Some(id) = self.shrinker.lock().take() {
            reclaim::registry(self.config.variants.reclaim).unregister(id);
        }
        self.free_forgotten_orphans();
        // Entries for a volatile store only if someone else can still read
        // it (a memory store mounted again); else they would be built up
        // just to be dropped with it.
        if Arc::strong_count(&self.store) > 1 {
            self.unload_dirs();
        }
        if let Err(e) = self.sync_all() {
            tracing::error!("writeback at unmount failed: {e}");
        }
    }
}

/// Set permissions for a new inode of `kind` from a caller's `mode` and
/// `umask`, as `vfs_prepare_mode`.
pub(crate) fn creation_perm(kind: FileKind, mode: u32, umask: u32) -> u16 {
    let allowed = match kind {
        FileKind::Directory => 0o1777,
        FileKind::Symlink => return 0o777,
        _ => 0o7777,
    };
    (mode & allowed & !umask) as u16
}

/// Subdirectory links a stripe gets from its directory's `meta` at once
/// (`dir_attr`): a stripe takes `meta` once per this many new
/// subdirectories at most, and the stripes hold at most 16 × this many
/// links that no subdirectory uses (reclaimed near `LINK_MAX`).
pub(crate) const LINK_GRANT: u32 = 64;

/// Why a subdirectory link could not be reserved.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NoLinkRoom {
    /// The directory has `LINK_MAX` links (exact: decided holding every
    /// stripe): `EMLINK`.
    Full,
    /// Nothing left to grant, but other stripes may hold room: change
    /// nothing, and run again holding every stripe of the directory.
    NeedAllStripes,
}

/// The first grants of a directory whose index is being loaded (under its
/// load lock, no index installed, so no stripe holds a link): `room(s)`
/// for each stripe of the new index, and the directory's `links_granted`
/// set to their sum (any previous index's rooms went with it). A dead
/// directory gets none.
pub(crate) fn first_link_grants(m: &mut MetaGuard<'_>) -> impl FnMut(usize) -> u32 {
    let mut left = if m.rec.nlink == 0 || m.freed {
        0
    } else {
        crate::LINK_MAX.saturating_sub(m.rec.nlink)
    };
    let mut granted = 0;
    let rooms: [u32; crate::dir::STRIPES] = std::array::from_fn(|_| {
        let g = left.min(LINK_GRANT);
        left -= g;
        granted += g;
        g
    });
    *m.links_granted_mut() = granted as i64;
    move |s| rooms[s]
}

/// Reserve one subdirectory link of `dir` in `name`'s stripe, held in
/// `idx` (a mkdir, a rename moving a directory in): from the stripe's room
/// without any directory-wide write; else a grant of up to [`LINK_GRANT`]
/// from `dir`'s `meta` out of what is left, `LINK_MAX - (rec.nlink +
/// links_granted)`; else, holding every stripe, the rooms of all stripes
/// taken back and the count decided exactly (`rec.nlink + links_granted`
/// is then `rec.nlink + Σ subdirs`, the link count: every link granted is
/// used or back in a room, and no reservation is in flight but this one);
/// else [`NoLinkRoom::NeedAllStripes`]. See `dir_attr` for why no
/// interleaving passes `LINK_MAX`. The caller holds no `meta`; once the
/// subdirectory is linked it records it (`DirWrite::note` with `subdirs
/// = 1`), or gives the link back (`DirWrite::add_link_room(name, 1)`).
pub(crate) fn reserve_subdir_link(
    dir: &Inode,
    idx: &mut DirWrite<'_>,
    name: &[u8],
) -> std::result::Result<(), NoLinkRoom> {
    if idx.take_link_room(name) {
        return Ok(());
    }
    let mut m = dir.meta.lock();
    // Never above `LINK_GRANT`, so the cast is exact.
    let left = |m: &MetaGuard<'_>| {
        (crate::LINK_MAX as i64 - (m.rec.nlink as i64 + m.links_granted))
            .clamp(0, LINK_GRANT as i64) as u32
    };
    if left(&m) == 0 {
        if !idx.holds_all() {
            return Err(NoLinkRoom::NeedAllStripes);
        }
        // Every link granted is now used (`subdirs`) or back in a room:
        // with the rooms taken back, `rec.nlink + links_granted` is the
        // link count.
        let rooms = idx.reclaim_link_rooms();
        *m.links_granted_mut() -= rooms as i64;
        if left(&m) == 0 {
            return Err(NoLinkRoom::Full);
        }
    }
    let g = left(&m);
    *m.links_granted_mut() += g as i64;
    drop(m);
    idx.add_link_room(name, g - 1);
    Ok(())
}

pub(crate) fn check_link_room(nlink: u32) -> Result<()> {
    if nlink >= crate::LINK_MAX {
        Err(Errno::EMLINK)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    /// Generations made on two lanes differ in their low 32 bits, which
    /// is all FUSE keeps of them. Before they were `lane << 40 | count`,
    /// so the two lanes' first thousand shared every low half.
    #[test]
    fn generations_of_two_lanes_differ_in_their_low_32_bits() {
        let on_lane = |lane: usize| {
            std::thread::spawn(move || {
                lanefs_store::set_lane(lane);
                (0..1000)
                    .map(|_| super::new_generation() as u32)
                    .collect::<Vec<_>>()
            })
            .join()
            .unwrap()
        };
        let mut all = on_lane(1000);
        all.extend(on_lane(1001));
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "two generations share their low 32 bits");
    }

    use super::*;

    /// Regression (eviction cliff): with pinned inodes filling the budget,
    /// each cold `iget` used to write-lock every shard and scan the whole
    /// cache. Now eviction work is bounded by what it evicts: each pinned
    /// inode is looked at once (then leaves the LRU until released).
    #[test]
    fn eviction_work_does_not_grow_with_pinned_inodes() {
        const BUDGET: usize = 64;
        const PINNED: usize = 2_000;
        const COLD: usize = 2_000;
        let fs = fs_with_inode_budget(BUDGET);
        let r = Cred::root();
        for i in 0..PINNED {
            // Counted: keeps a lookup reference (pinned).
            fs.mknod(&r, ROOT_INO, format!("p{i}").as_bytes(), 0o644, 0, 0)
                .unwrap();
        }
        let mut cold = Vec::new();
        for i in 0..COLD {
            let a = fs
                .mknod(&r, ROOT_INO, format!("c{i}").as_bytes(), 0o644, 0, 0)
                .unwrap();
            fs.forget(a.ino, 1);
            cold.push(a.ino);
        }
        fs.shrink();
        let before = fs.inner.lru.popped.load(Ordering::Relaxed);
        for &ino in &cold {
            fs.getattr(ino).unwrap();
        }
        let pops = fs.inner.lru.popped.load(Ordering::Relaxed) - before;
        assert!(
            pops <= 2 * COLD + EVICT_POPS_MIN,
            "{pops} LRU entries examined for {COLD} cold lookups with {PINNED} pinned"
        );
        assert!(fs.cache_counts().0 <= PINNED + BUDGET + EVICT_BATCH_MIN);
    }

    /// A shrink whose only candidate keeps going back to the LRU (its
    /// data lock is held: here by the shrinking thread itself, as by a
    /// thread that is not running) ends, leaving it cached; with no bound
    /// on the pass it popped and pushed it forever.
    #[test]
    fn shrink_ends_when_an_inode_keeps_going_back_to_the_lru() {
        let fs = Fs::new_in_memory();
        let r = Cred::root();
        let (a, f, _) = fs
            .open_at(
                &r,
                ROOT_INO,
                b"f",
                libc::O_CREAT | libc::O_RDWR,
                0o644,
                0,
                false,
            )
            .unwrap();
        fs.write(&f, 0, &[7u8; 9000]).unwrap();
        drop(f);
        fs.forget(a.ino, 1);
        // The cache's own object, not a counted reference (which would
        // pin it: a pinned inode leaves the LRU instead).
        let cached = |ino: Ino| {
            let mut found = None;
            fs.inner.icache.for_each(&mut |i| {
                if i.ino == ino {
                    found = Some(Arc::clone(i));
                }
            });
            found
        };
        {
            let inode = cached(a.ino).expect("cached");
            let Body::File(data) = &inode.body else {
                panic!("a regular file")
            };
            let held = data.write();
            fs.shrink();
            drop(held);
        }
        assert!(cached(a.ino).is_some(), "busy: not evicted");
        fs.shrink();
        assert!(cached(a.ino).is_none(), "evicted once free");
    }

    /// An engine on a memory store caching at most `budget` inodes.
    fn fs_with_inode_budget(budget: usize) -> Fs {
        let config = FsConfig {
            cache_inodes_max: budget,
            ..FsConfig::default()
        };
        Fs::new(Arc::new(lanefs_store::MemoryStore::default()), config).unwrap()
    }

    /// Second chance: a directory and file reached only by lock-free walks
    /// (which take no reference) stay cached while cold inodes stream
    /// through a budget many times smaller than the stream; without the
    /// hint they age out after a budget's worth of loads and the walk
    /// misses from then on.
    #[test]
    fn lock_free_walks_keep_their_inodes_cached() {
        const BUDGET: usize = 64;
        let fs = fs_with_inode_budget(BUDGET);
        let r = Cred::root();
        let hot = fs.mkdir(&r, ROOT_INO, b"hot", 0o755, 0).unwrap();
        let x = fs.mknod(&r, hot.ino, b"x", 0o644, 0, 0).unwrap();
        fs.forget(x.ino, 1);
        fs.forget(hot.ino, 1);
        let cold: Vec<Ino> = (0..20 * BUDGET)
            .map(|i| {
                let a = fs
                    .mknod(&r, ROOT_INO, format!("c{i}").as_bytes(), 0o644, 0, 0)
                    .unwrap();
                fs.forget(a.ino, 1);
                a.ino
            })
            .collect();
        fs.shrink();
        // Load the path once (the reference walk), then walk it lock-free
        // between cold loads.
        fs.lookup(&r, ROOT_INO, b"hot").unwrap();
        fs.lookup(&r, hot.ino, b"x").unwrap();
        let mut missed = 0;
        for &ino in &cold {
            match fs.resolve_rcu(&r, ROOT_INO, &[b"hot", b"x"]) {
                Some(Ok(a)) => assert_eq!(a.ino, x.ino),
                Some(Err(e)) => panic!("walk failed: {e}"),
                None => missed += 1,
            }
            fs.getattr(ino).unwrap();
        }
        assert_eq!(missed, 0, "the lock-free walk missed after evictions");
        assert!(fs.cache_counts().0 <= BUDGET + EVICT_BATCH_MIN + 4);
    }

    /// mkdir, rmdir and renames moving directories in and out of a loaded
    /// directory count its subdirectories in the names' stripes
    /// (`dir_attr`): its `meta` mirror, which every link-count change
    /// under `meta` republished, is not written, and its link count stays
    /// exact, folded into the record at writeback and kept across a
    /// reload.
    #[test]
    fn subdirectory_changes_leave_the_directory_mirror_alone() {
        let fs = Fs::new_in_memory();
        let r = Cred::root();
        let d = fs.mkdir(&r, ROOT_INO, b"d", 0o755, 0).unwrap();
        let e = fs.mkdir(&r, ROOT_INO, b"e", 0o755, 0).unwrap();
        // Loads both indexes (with their stripes' first rooms of links).
        fs.mknod(&r, d.ino, b"f", 0o644, 0, 0).unwrap();
        fs.mknod(&r, e.ino, b"f", 0o644, 0, 0).unwrap();
        let (dir, other) = (fs.inner.iget(d.ino).unwrap(), fs.inner.iget(e.ino).unwrap());
        let before = (dir.meta.rest_writes(), other.meta.rest_writes());
        for i in 0..40 {
            fs.mkdir(&r, d.ino, format!("s{i}").as_bytes(), 0o755, 0)
                .unwrap();
        }
        for i in 0..10 {
            fs.rmdir(&r, d.ino, format!("s{i}").as_bytes()).unwrap();
        }
        for i in 10..15 {
            let name = format!("s{i}");
            fs.rename(&r, d.ino, name.as_bytes(), e.ino, name.as_bytes(), 0)
                .unwrap();
        }
        fs.rename(&r, d.ino, b"s15", e.ino, b"f", crate::RENAME_EXCHANGE)
            .unwrap();
        assert_eq!(
            (dir.meta.rest_writes(), other.meta.rest_writes()),
            before,
            "a directory-wide line written"
        );
        assert_eq!(fs.getattr(d.ino).unwrap().nlink, 2 + 40 - 10 - 5 - 1);
        assert_eq!(fs.getattr(e.ino).unwrap().nlink, 2 + 5 + 1);
        fs.sync().unwrap();
        assert_eq!(dir.meta.lock().rec.nlink, 2 + 24, "folded at writeback");
        drop((dir, other));
        fs.shrink();
        assert_eq!(fs.getattr(d.ino).unwrap().nlink, 2 + 24);
        assert_eq!(fs.getattr(e.ino).unwrap().nlink, 2 + 6);
        fs.check().unwrap();
    }

    /// `iget_rcu` finds the root and live cached inodes, without a reference.
    #[test]
    fn iget_rcu_takes_no_reference() {
        let fs = Fs::new_in_memory();
        let r = Cred::root();
        let a = fs.mknod(&r, ROOT_INO, b"f", 0o644, 0, 0).unwrap();
        let guard = crossbeam_epoch::pin();
        assert_eq!(fs.inner.iget_rcu(ROOT_INO, &guard).unwrap().ino, ROOT_INO);
        let i = fs.inner.iget_rcu(a.ino, &guard).unwrap();
        assert_eq!((i.ino, i.life.refs()), (a.ino, 0));
        assert!(fs.inner.iget_rcu(a.ino + 1000, &guard).is_none());
    }
}

#[cfg(all(test, not(lanefs_shuttle)))]
mod freed_dir_index {
    use crate::{Cred, Fs};
    use lanefs_store::ROOT_INO;

    /// A directory removed while a caller (a lookup in it) holds a counted
    /// reference taken before, and a cache walk (shrink, check, unmount)
    /// holding it from a snapshot taken before: the lookup must not load
    /// an index into the freed directory, or the walk hands that empty
    /// index to the store for the directory's number — which a new
    /// directory has reused by then, so its entries are wiped (before
    /// `load_index` refused a freed directory, `z` was gone here).
    #[test]
    fn a_freed_directory_gets_no_index_to_hand_back() {
        let fs = Fs::new_in_memory();
        let r = Cred::root();
        let d = fs.mkdir(&r, ROOT_INO, b"d", 0o755, 0).unwrap();
        fs.forget(d.ino, 1);
        // The lookup's counted reference, and the walk's snapshot.
        let held = fs.inner.iget(d.ino).unwrap();
        let snapshot = held.arc();
        fs.rmdir(&r, ROOT_INO, b"d").unwrap();
        // The lookup goes on in the freed directory.
        assert!(fs.inner.lookup_child(&held, b"x").is_err());
        drop(held);
        // The number comes back (this thread's lane freed it last).
        let e = fs.mkdir(&r, ROOT_INO, b"e", 0o755, 0).unwrap();
        assert_eq!(
            e.ino, d.ino,
            "the number was not reused: the test proves nothing"
        );
        let z = fs.mknod(&r, e.ino, b"z", 0o644, 0, 0).unwrap();
        fs.forget(z.ino, 1);
        fs.forget(e.ino, 1);
        // The new directory's entries go back to the store.
        fs.shrink();
        // The walk reaches the stale directory.
        fs.inner.drop_caches_of(&snapshot);
        drop(snapshot);
        fs.lookup(&r, e.ino, b"z")
            .expect("the new directory's entry");
        if let Err(bad) = fs.check() {
            panic!("{bad:?}");
        }
    }

    /// Inodes freed while their LRU entry was queued — every inode a FUSE
    /// client creates, holds by its lookup count and removes, then forgets
    /// — leave the LRU: before, each dead inode's memory (about 1 KiB)
    /// stayed queued for good, since pops happen only over the inode
    /// budget, which freed inodes no longer count against (a memory mount
    /// running stress-ng `dentry` grew by ~50 MB every 5 s with an empty
    /// tree). Removing the file, directory or tmpfile before or after the
    /// last forget, and over a rename, all count.
    #[test]
    fn freed_inodes_do_not_pile_up_on_the_lru() {
        const ROUNDS: u32 = 20_000;
        let fs = Fs::new_in_memory();
        let r = Cred::root();
        for i in 0..ROUNDS {
            match i % 4 {
                0 => {
                    let a = fs.mkdir(&r, ROOT_INO, b"d", 0o755, 0).unwrap();
                    fs.rmdir(&r, ROOT_INO, b"d").unwrap();
                    fs.forget(a.ino, 1);
                }
                1 => {
                    let a = fs.mknod(&r, ROOT_INO, b"f", 0o644, 0, 0).unwrap();
                    fs.forget(a.ino, 1);
                    fs.unlink(&r, ROOT_INO, b"f").unwrap();
                }
                2 => {
                    let (a, h, _) = fs
                        .open_at(
                            &r,
                            ROOT_INO,
                            b"o",
                            libc::O_CREAT | libc::O_RDWR,
                            0o644,
                            0,
                            true,
                        )
                        .unwrap();
                    fs.unlink(&r, ROOT_INO, b"o").unwrap();
                    fs.forget(a.ino, 1);
                    drop(h);
                }
                _ => {
                    let a = fs.mknod(&r, ROOT_INO, b"v", 0o644, 0, 0).unwrap();
                    let b = fs.mknod(&r, ROOT_INO, b"w", 0o644, 0, 0).unwrap();
                    fs.rename(&r, ROOT_INO, b"v", ROOT_INO, b"w", 0).unwrap();
                    fs.forget(b.ino, 1);
                    fs.unlink(&r, ROOT_INO, b"w").unwrap();
                    fs.forget(a.ino, 1);
                }
            }
        }
        let queued = fs.inner.lru.len();
        // The purge goes by the counter's estimate: one lane's share,
        // below a batch, may wait unfolded.
        assert!(
            queued as i64 <= super::LRU_DEAD_MIN + super::COUNTER_BATCH + 2,
            "{queued} LRU entries after {ROUNDS} creates and removes of an empty tree"
        );
        assert_eq!(fs.cache_counts().0, 0, "nothing but the root is cached");
        if let Err(bad) = fs.check() {
            panic!("{bad:?}");
        }
        // Evicting everything takes every entry left, dead ones included.
        fs.shrink();
        assert_eq!(fs.inner.lru.len(), 0);
        assert_eq!(fs.inner.lru_dead.sum(), 0, "every dead entry counted once");
    }

    /// A mass removal of cached, unreferenced files under a large inode
    /// budget (an `rm -rf` of a tree the cache holds) keeps only a few
    /// freed inodes on the LRU: each free's note takes its entry out
    /// where it sits (`InodeLru::note_freed`), in batches. Before, the
    /// entries waited for a purge that ran only once they outnumbered the
    /// cached inodes: removing just under half of the files kept every one
    /// of them queued (about 1 KiB each: half a GiB for a million cached
    /// files).
    #[test]
    fn removing_many_cached_files_keeps_few_freed_inodes_queued() {
        use crate::icache::{FREED_BATCH, HOLES_MIN};
        const FILES: usize = 20_000;
        let fs = Fs::new_in_memory();
        assert!(fs.inner.config.cache_inodes_max >= FILES);
        let r = Cred::root();
        let name = |i: usize| format!("f{i}").into_bytes();
        for i in 0..FILES {
            let a = fs.mknod(&r, ROOT_INO, &name(i), 0o644, 0, 0).unwrap();
            fs.forget(a.ino, 1);
        }
        assert_eq!(fs.cache_counts().0, FILES, "all cached, on the LRU");
        // In an order that scatters the removed entries over the queue
        // (7919 is prime to FILES): holes in the middle, not only ends.
        let order: Vec<usize> = (0..FILES).map(|i| i * 7919 % FILES).collect();
        // One lane, so one shard's notes: fewer than a batch wait.
        let bound = FREED_BATCH;
        let queued_dead = |fs: &Fs| fs.inner.lru.len() - fs.cache_counts().0;
        // Just under half: the purge by count has not run yet.
        let (first, rest) = order.split_at(FILES / 2 - 100);
        for &i in first {
            fs.unlink(&r, ROOT_INO, &name(i)).unwrap();
        }
        assert_eq!(fs.cache_counts().0, FILES - first.len());
        let dead = queued_dead(&fs);
        assert!(
            dead < bound,
            "{dead} freed inodes still queued on the LRU after {} removals",
            first.len()
        );
        if let Err(bad) = fs.check() {
            panic!("{bad:?}");
        }
        for &i in rest {
            fs.unlink(&r, ROOT_INO, &name(i)).unwrap();
        }
        assert_eq!(fs.cache_counts().0, 0);
        let dead = queued_dead(&fs);
        assert!(dead < bound, "{dead} freed inodes queued after all");
        // The holes left in their place went with compactions.
        let slots = fs.inner.lru.slots();
        assert!(
            slots <= dead + 2 * HOLES_MIN,
            "{slots} slots kept for {dead} entries"
        );
        if let Err(bad) = fs.check() {
            panic!("{bad:?}");
        }
        fs.shrink();
        assert_eq!(fs.inner.lru.len(), 0);
        assert_eq!(fs.inner.lru_dead.sum(), 0, "every dead entry counted once");
    }
}
