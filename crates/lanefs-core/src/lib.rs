//! lanefs VFS core: one file-system instance ([`Fs`], the "mount") over a
//! [`Store`].
//!
//! All calls are inode-number based, with Linux semantics and errnos, as a
//! FUSE daemon sees the world: entry-returning calls (`lookup_counted`,
//! `create`, `mknod`, `mkdir`, `symlink`, `link`) add one to the inode's
//! lookup count, which [`Fs::forget`] gives back; an inode whose link count
//! is zero lives on while it is looked up or open, and is freed at the last
//! `forget` or close. The Rust API crate (`lanefs`) builds paths and `File`
//! types on top.
//!
//! **Contract:** an inode number passed to a call must be *held* by the
//! caller — by a lookup reference it has not forgotten yet, or by an open
//! [`OpenFile`] — as the kernel holds a FUSE node id. An unheld number may
//! be freed and reused at any moment; calls on it fail with `ENOENT` or act
//! on whatever now has that number, never corrupting anything (the race
//! tests use unheld numbers on purpose).
//!
//! See `docs/ARCHITECTURE.md` for the layers and the whole lock order.

mod types;

pub use lanefs_store::{
    Errno, FileKind, Ino, MemoryStore, MemoryStoreConfig, Result, Store, Timespec, PAGE_SIZE,
    ROOT_INO,
};
pub use types::*;

mod acl;
mod attr_seq;
mod check;
mod counters;
mod dir;
mod dir_attr;
mod dir_hash;
mod file;
mod flusher;
mod fs;
mod handles;
mod icache;
pub mod iflags;
mod inode;
mod lane;
mod namei;
mod opens;
mod orphan;
mod pcache;
mod perm;
mod reclaim;
mod rename;
mod stats_xattr;
pub(crate) mod sync;
/// Settle process-wide per-lane counters before a recorded audit pair.
#[cfg(all(feature = "audit", not(lanefs_shuttle)))]
pub use reclaim::pressure::settle_for_audit;
/// The conflict audit's recorder (see `sync/audit.rs`).
#[cfg(all(feature = "audit", not(lanefs_shuttle)))]
pub use sync::audit;
mod variants;
mod walk_rcu;
mod xattr;

pub use acl::posix_acl_xattr;
pub use counters::{AtomicCounter, Counter, PercpuCounter, COUNTER_SHARDS};
pub use file::OpenFile;
pub use fs::Fs;
pub use handles::{HandleOwner, HandleRef, HandleUsers, Handles};
pub use lane::lane;
pub use orphan::{
    LockedOrphanTable, OrphanSlot, OrphanTable, SlotOrphanTable, ORPHAN_BLOCKS, ORPHAN_BLOCK_BYTES,
    ORPHAN_BLOCK_SLOTS,
};
pub use pcache::collect_deferred;
pub use reclaim::{
    new_registry, process_cache_limit, process_cached_objects, registry, set_process_cache_limit,
    DeferredRegistry, ReclaimRegistry, RwLockRegistry, Shrinker, ShrinkerId, SyncGraceRegistry,
    DEFAULT_PROCESS_CACHE_OBJECTS,
};
pub use stats_xattr::{read_mount_stats, sync_mount, STATS_XATTR, SYNC_XATTR};
pub use variants::{
    CounterVariant, IcacheVariant, OrphanVariant, ReadVariant, ReclaimVariant, Variants,
};
pub use walk_rcu::{Found, MAX_RCU_COMPONENTS, RCU_WALK_RETRIES};

/// Counts from a cache shrink, for tests and stats.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShrinkStats {
    pub inodes_evicted: usize,
    pub pages_dropped: usize,
    pub dirs_dropped: usize,
}
