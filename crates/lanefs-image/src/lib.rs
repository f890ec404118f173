//! lanefs on disk: [`ImageStore`], a [`Store`](lanefs_store::Store) kept in
//! one image file or block device, with [`mkfs`] and [`fsck`].
//!
//! * `layout`: geometry and the double-buffered superblock (with the
//!   inode-table high-water marks that bound what open reads);
//! * `object`: inode objects (record, page map, entry blocks) and their
//!   slot, chain and entry-block encodings;
//! * `cache`: one shard's objects, their byte estimate and CLOCK eviction;
//!   `store_cache`: the store's budget (reading evicted objects back,
//!   eviction, checkpoints under dirty pressure, listing);
//! * `journal`: records (one per store call or `Txn`) and batches;
//!   `journaled`: the data blocks their page mappings protect;
//! * `alloc`: allocation groups (inode numbers, data blocks) by lane;
//! * `orphan`: the orphan file (seed 002's slot blocks);
//! * `store`: the store — calls, group commit, checkpoint (lock order in
//!   its header);
//! * `recover`: mkfs, load, derived record fields, open; `replay`: the
//!   journal read and applied batch by batch at open;
//! * `fsck`: check and repair;
//! * `device`, `crash`: where bytes live, and the power-cutting test device.
//!
//! The byte layout and what is assumed of the media: docs/FORMAT.md.
//!
//! ```
//! use std::sync::Arc;
//! use lanefs_image::{mkfs_device, ImageConfig, ImageStore, MemDevice};
//! use lanefs_store::{FileKind, InodeRecord, Store, Timespec};
//! let dev = Arc::new(MemDevice::new(4 << 20));
//! mkfs_device(&*dev).unwrap();
//! let s = ImageStore::open_device(dev.clone(), &ImageConfig { commit_interval: None, cache_bytes: None }).unwrap();
//! let ino = s.alloc_ino().unwrap();
//! let t = Timespec::default();
//! s.write_inode(&InodeRecord {
//!     ino, generation: 1, kind: FileKind::Regular, perm: 0o644, uid: 0, gid: 0,
//!     nlink: 1, size: 4096, blocks: 1, atime: t, mtime: t, ctime: t, btime: t,
//!     rdev: 0, parent: 0, next_cookie: 0, symlink: vec![], xattrs: vec![], flags: 0,
//! }).unwrap();
//! s.write_page(ino, 0, &[7; 4096]).unwrap();
//! s.sync().unwrap();
//! drop(s);
//! let s = ImageStore::open_device(dev, &ImageConfig { commit_interval: None, cache_bytes: None }).unwrap();
//! let mut page = [0; 4096];
//! assert!(s.read_page(ino, 0, &mut page).unwrap());
//! assert_eq!(page[4095], 7);
//! ```

mod alloc;
mod cache;
pub mod crash;
mod crc;
mod device;
mod fsck;
pub mod fuzz;
mod holder;
mod itable;
mod journal;
mod journaled;
mod layout;
mod links;
mod object;
mod orphan;
mod overhead;
mod recover;
mod replay;
mod store;
mod store_cache;

pub use device::{Device, FileDevice, MemDevice};
pub use fsck::{fsck, fsck_device, FsckReport};
pub use holder::{is_finishing, wait_for_release, FinishingMark, FINISH_WAIT, LOCK_WAIT};
pub use layout::{Geometry, BLOCK, SECTOR};
pub use recover::{describe_open_error, mkfs, mkfs_device};
pub use store::{
    ImageConfig, ImageStore, RecoveryReport, CACHE_BYTES_DEFAULT, COMMIT_INTERVAL_DEFAULT,
};
pub use store_cache::CacheStats;
