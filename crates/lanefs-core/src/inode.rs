//! The in-memory inode: a cached copy of an [`InodeRecord`] plus the
//! per-kind body (page map or directory index) and the reference counts that
//! decide its life.
//!
//! Inode locking rules:
//! * `meta` (mutex) protects the record (attributes, link count, size,
//!   xattrs, symlink target), `dirty`, `lookups`, `opens` and `freed`. It is
//!   a leaf lock except that the icache may take it with `try_lock` while
//!   holding a shard lock (eviction never blocks on it).
//! * `body` is the data of a regular file (`FileData`, whose data lock is
//!   an `RwLock<PageMap>`; reads may copy cached pages without it, see
//!   `pcache`) or the entry lock of a directory (`RwLock<DirState>`); the
//!   lock is taken before `meta` whenever both are held.
//! * `atime_stale` (Relaxed): set whenever mtime or ctime changes, cleared
//!   when atime is brought past them — lets reads skip `meta` in the common
//!   relatime case. A stale `false` only delays an atime update.
//!
//! * `life` (the icache's state word, see `icache::life`): cache state
//!   LIVE/FREEING/DEAD, counted references and LRU membership; lock-free.
//!
//! Life: an inode is freed (record, data, number) when `nlink == 0`,
//! `lookups == 0` and `opens == 0`, all checked and `freed` set under `meta`
//! — so exactly one thread frees it; it is then `DEAD` and unhashed before
//! the store may reuse its number. It may be evicted from the cache when its
//! `life` is LIVE with no counted references (claimed FREEING by CAS), and
//! then, under `meta`, `lookups == opens == 0`; it is written back before it
//! leaves the hash.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use lanefs_store::{FileKind, Ino, InodeRecord};
use parking_lot::{Mutex, RwLock};

use crate::dir::DirState;
use crate::icache::Life;
use crate::orphan::OrphanSlot;
use crate::pcache::FileData;

/// Mutable state of an inode, under `Inode::meta`.
pub(crate) struct Meta {
    pub rec: InodeRecord,
    /// `rec` differs from the store's copy.
    pub dirty: bool,
    /// Lookup references (FUSE lookup counts).
    pub lookups: u64,
    /// Open file handles.
    pub opens: u64,
    /// Storage released; the inode is dead.
    pub freed: bool,
    /// Where the orphan table records this inode while it is unlinked but
    /// alive. A `Cell` so that `note_unlinked` can fill it through the
    /// `&Meta` its callers pass; only ever touched under `meta`.
    pub orphan_slot: Cell<Option<OrphanSlot>>,
}

// Shuttle's model atomics make `FileData` large in model builds only.
#[cfg_attr(lanefs_shuttle, allow(clippy::large_enum_variant))]
pub(crate) enum Body {
    File(FileData),
    Dir(RwLock<DirState>),
    Other,
}

pub(crate) struct Inode {
    pub ino: Ino,
    pub kind: FileKind,
    pub meta: Mutex<Meta>,
    pub body: Body,
    pub atime_stale: AtomicBool,
    /// Cache life cycle: state, counted references, LRU membership.
    pub life: Life,
    /// Lock-free mirror of `(perm << 32) | uid` for the lookup permission
    /// check (Linux's RCU walk reads `i_mode`/`i_uid` the same way).
    /// Written under `meta` whenever perm or uid change; Relaxed.
    access_perm_uid: AtomicU64,
    /// Mirror of the gid, as above.
    access_gid: AtomicU32,
}

impl Inode {
    /// An inode for `rec`; `dirty` when the store does not have `rec` yet.
    pub fn new(rec: InodeRecord, dirty: bool) -> Inode {
        let body = match rec.kind {
            FileKind::Regular => Body::File(FileData::new(rec.size, rec.blocks == 0)),
            FileKind::Directory => Body::Dir(RwLock::new(DirState::default())),
            _ => Body::Other,
        };
        let atime_stale = rec.atime <= rec.mtime || rec.atime <= rec.ctime;
        Inode {
            ino: rec.ino,
            kind: rec.kind,
            meta: Mutex::new(Meta {
                rec,
                dirty,
                lookups: 0,
                opens: 0,
                freed: false,
                orphan_slot: Cell::new(None),
            }),
            body,
            atime_stale: AtomicBool::new(atime_stale),
            // The loader's or creator's reference.
            life: Life::new_live(1),
            access_perm_uid: AtomicU64::new(0),
            access_gid: AtomicU32::new(0),
        }
        .with_access_mirror()
    }

    fn with_access_mirror(self) -> Inode {
        {
            let m = self.meta.lock();
            self.mirror_access(&m.rec);
        }
        self
    }

    /// Refresh the lock-free permission mirror; call under `meta` after
    /// changing perm, uid or gid.
    pub fn mirror_access(&self, rec: &InodeRecord) {
        self.access_perm_uid.store(
            ((rec.perm as u64) << 32) | rec.uid as u64,
            Ordering::Relaxed,
        );
        self.access_gid.store(rec.gid, Ordering::Relaxed);
    }

    /// Permission check from the mirror, without `meta` (lookup hot path).
    /// Racing a chmod/chown, it sees the old or the new owner and mode.
    pub fn permission_unlocked(&self, cred: &crate::Cred, mask: u32) -> lanefs_store::Result<()> {
        if cred.is_root() && (mask & crate::MAY_EXEC == 0 || self.kind == FileKind::Directory) {
            return Ok(());
        }
        let pu = self.access_perm_uid.load(Ordering::Relaxed);
        let gid = self.access_gid.load(Ordering::Relaxed);
        crate::perm::permission_of(cred, self.kind, (pu >> 32) as u16, pu as u32, gid, mask)
    }
}
