//! `ImageStore`: the [`Store`] of one image file or block device.
//!
//! Every store call (and every [`Txn`]) becomes one journal [`Record`]:
//! its effects are applied to the in-memory objects and the record is
//! appended to the calling lane's log buffer in one critical section. A
//! group commit writes every lane's buffer as one batch and flushes once
//! (data written since the last flush and the batch together: recovery
//! checks the last batch's new pages against their CRC32C); a checkpoint
//! writes dirty objects to their homes copy-on-write and moves the journal
//! tail. Layout and crash reasoning: docs/FORMAT.md ("One flush per
//! commit").
//!
//! Free space: blocks a record frees are reused only after the next
//! checkpoint (data blocks wait in the allocator's deferred frees, the
//! old homes' entry and chain blocks until the new homes are durable), but
//! they are free space for `statfs` from the record on: the engine counts
//! freed data pages itself, and `submit` takes the homes' blocks the next
//! checkpoint frees (`InodeObj::gone`) off the overhead it reports
//! (`overhead.rs`). A page write that finds no block allocatable while any
//! of either kind wait checkpoints and tries again
//! (`alloc_data_block`), so a page `statfs` offered always finds a block;
//! while home blocks wait it stops at each group's share of the whole
//! reserve, so that checkpoint has the room for its copy-on-write.
//!
//! Locking rules (and the lock order, outermost first):
//! * `ckpt` (mutex): one checkpoint at a time; protects [`CkptState`]: the
//!   superblock generation, the durable superblock and the inode-table
//!   high-water marks. Taken by `checkpoint`, and by `list_inodes` under a
//!   memory budget for its scan of the tables (no home or mark moves
//!   meanwhile).
//! * `gates[l]` (rwlock, own cache line, one per lane class): every call
//!   holds its lane's gate for reading while it changes objects and appends
//!   its record; a checkpoint takes every gate for writing (in index order)
//!   to see a state in which every change in memory is also in a log
//!   buffer. A per-lane array rather than one rwlock so calls on different
//!   lanes share no cache line (Linux's percpu rw-semaphore).
//! * `commit` (mutex): the group-commit point — journal head, tail and
//!   sequence. The only lock all lanes can meet on. Taken with no gate
//!   held, or under all gates by a checkpoint; a checkpoint that leaves
//!   the journal empty holds it (under `ckpt`, no gate) through its
//!   superblock's write and flush, to move tail and head to block 0.
//! * `shards[s]` (mutex on its own cache line, `lanefs_store::ino_shard`:
//!   a hash, since allocation groups hand out runs of numbers): the inode objects of shard `s`
//!   (`cache.rs`: the objects, their byte estimate and CLOCK hand). A
//!   call takes the shards of its objects in ascending index order. Under
//!   a budget (`ImageConfig::cache_bytes`) an object not held is read back
//!   from its home while its shard is locked, and a call that leaves its
//!   shard over its share evicts clean objects there, a bounded number of
//!   steps at a time (`store_cache.rs`). A call that leaves the store with
//!   more unsaved bytes than the dirty limit checkpoints after releasing
//!   every lock it holds (as a full lane buffer commits); the per-shard
//!   unsaved figures it sums (`limits.published`) and the never-written
//!   bits (`limits.never_written`) are atomics described in
//!   `store_cache.rs`.
//! * `usage[l]`, then `sb` (mutexes): the per-lane usage records and the
//!   store superblock record, taken after shards.
//! * `lanes[l]` (mutex): lane `l`'s log buffer; taken last by a call (its
//!   own lane only), and all of them, in index order, by a commit (under
//!   `commit`) for the moment of swapping the buffers out.
//! * group locks (`alloc.rs`) are leaves.
//! * `overhead.hook` (`overhead.rs`, a leaf): taken by `submit` after it
//!   has released every other lock, and at the end of a checkpoint, to
//!   report the changes of the objects' `gone` (set under their shard
//!   locks) and of the homes' blocks.
//! * `journaled.shards[b % 64]` (mutexes, leaves): the data blocks mapped
//!   by records still in the journal, which `write_page` must not
//!   overwrite in place (`journaled.rs`). `submit` adds a record's blocks
//!   under its gate; a checkpoint rotates them under every gate and
//!   forgets them once its superblock is durable.
//!
//! Atomics: `commits_started`/`commits_done` (SeqCst) implement the
//! group-commit ticket: `sync` needs a commit that *started* after it was
//! called and waits on `commit` for it. `data_written` (SeqCst, swapped by
//! the committer) says data blocks were written since the last flush, so
//! a commit with no records still flushes them (an fsync of overwritten
//! pages). `failed`
//! (SeqCst): an I/O error happened while writing; every later call answers
//! EIO (the image on disk stays recoverable). `failed_errno` (SeqCst, set
//! once, before `failed`): that error, for [`ImageStore::failure`] (the
//! host's `ENOSPC` under a sparse image, say, which the calls after it
//! cannot tell).

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use lanefs_store::{
    lane, DirEntryRecord, Errno, Ino, InodeRecord, Page, Result, Store, Superblock, Ticker, Txn,
    TxnOp, ROOT_INO,
};
use parking_lot::{Mutex, RwLock};

use crate::alloc::Groups;
use crate::cache::ObjMap;
use crate::crc::crc32c;
use crate::device::Device;
use crate::journal::{
    self, Op, Record, BATCH_RECORDS, BATCH_WRAP, RECORD_OBJS_MAX, SB_OBJ, USAGE_OBJ_BASE,
};
use crate::journaled::Journaled;
use crate::layout::{DiskSuper, Geometry, UsageRec, BLOCK, FORMAT_VERSION, USAGE_LANES};
use crate::object::{self, Entry, InodeObj, SLOT_FREE, SLOT_INLINE_MAX, SLOT_LIVE};
use crate::orphan::OrphanFile;
use crate::overhead::Overhead;
use crate::store_cache::{CacheLimits, CacheStats, Pressure};

/// Inode shards.
pub const SHARDS: usize = 64;
const _: () = assert!(SHARDS.is_power_of_two());
/// Lane classes with their own gate and log buffer.
pub const LOG_LANES: usize = 64;
/// A lane buffer this large is committed by the call that filled it (less
/// on a small journal: see `lane_commit_bytes`).
pub const LANE_COMMIT_BYTES: usize = 64 * 1024;
/// Data blocks each group keeps for checkpoints (entry and chain blocks):
/// page writes get ENOSPC first, so a checkpoint on a full image can still
/// write its homes.
pub const GROUP_META_RESERVE_BLOCKS: u64 = 16;
/// Most bytes of inode table a checkpoint writes at once (`write_slots`).
pub const SLOT_RUN_BYTES: u64 = 1 << 20;
/// Default interval of the background commit.
pub const COMMIT_INTERVAL_DEFAULT: Duration = Duration::from_secs(5);

/// How an image store runs.
#[derive(Clone, Debug)]
pub struct ImageConfig {
    /// Commit (and, when the journal is half full, checkpoint) this often
    /// in the background; `None`: only on `sync`, on a full lane buffer and
    /// at drop.
    pub commit_interval: Option<Duration>,
    /// Memory budget of the inode objects (records, page maps, directory
    /// entries), in estimated bytes: clean objects beyond it are evicted
    /// and read back from their homes, and unsaved ones beyond half of it
    /// are checkpointed (docs/ARCHITECTURE.md, "Image store: memory
    /// budget").
    /// `None`: every object stays in memory from open to drop (what
    /// `fsck` wants: it checks every entry against every inode at once);
    /// the default is [`CACHE_BYTES_DEFAULT`], so that a store opened
    /// without a budget still has one.
    pub cache_bytes: Option<u64>,
}

/// The inode objects' budget of an [`ImageConfig::default`] store (and of
/// `lanefs mount IMAGE` without `--cache-size`): 512 MiB, about 2.5
/// million small files' objects; the engine's own default caches (a
/// million inodes, 1 GiB of pages) sit in front of it.
pub const CACHE_BYTES_DEFAULT: u64 = 512 << 20;

impl Default for ImageConfig {
    fn default() -> Self {
        ImageConfig {
            commit_interval: Some(COMMIT_INTERVAL_DEFAULT),
            cache_bytes: Some(CACHE_BYTES_DEFAULT),
        }
    }
}

/// What recovery did at open.
#[derive(Clone, Debug, Default)]
pub struct RecoveryReport {
    /// Whole recovery: `load` + `checkpoint`.
    pub duration: Duration,
    /// Reading the superblock, inode tables, images and journal, replaying.
    pub load: Duration,
    /// The checkpoint that makes the recovered state durable.
    pub checkpoint: Duration,
    pub batches: u64,
    pub records_replayed: u64,
    /// Records not applied: they follow a record that was lost.
    pub records_dropped: u64,
    /// Records of the journal's last batch not applied because a data page
    /// one of them maps did not reach the media (its CRC32C differs): the
    /// whole batch is dropped, as if the power had failed before it was
    /// written (docs/FORMAT.md, "One flush per commit").
    pub records_unlanded: u64,
    /// The most decoded journal records held at once while replaying: the
    /// records waiting for a predecessor, the batch being applied and the
    /// one read ahead (replay streams the journal; `replay.rs`).
    pub records_held_max: u64,
    pub orphans_freed: u64,
    /// Records whose derived fields (a directory's size, link count, next
    /// cookie; a block count) disagreed with the entries or pages and were
    /// recomputed from them (a record older or newer than its data).
    pub records_derived: u64,
    /// Inodes listed by the orphan file on disk.
    pub orphans_listed: u64,
    /// Objects unusable because of checksum or structure errors (EIO).
    pub bad_objects: Vec<Ino>,
    /// One line per problem found while loading.
    pub problems: Vec<String>,
}

#[repr(align(64))]
pub(crate) struct Gate(pub RwLock<()>);

pub(crate) struct CommitState {
    /// Next free block of the journal (offset within it).
    pub head: u64,
    /// Sequence number of the next batch.
    pub seq: u64,
    /// Durable tail (offset, sequence): where replay would start.
    pub tail: u64,
    pub tail_seq: u64,
    /// Records swapped out of lane buffers but not yet written.
    pub carry: Vec<u8>,
}

/// What the checkpoints keep between them (under `ckpt`).
pub(crate) struct CkptState {
    /// Generation of the newest superblock written.
    pub generation: u64,
    /// The newest durable superblock: a checkpoint that must raise a
    /// high-water mark before writing its slots rewrites it with the
    /// raised marks (and the next generation) first.
    pub durable: DiskSuper,
    /// Per group: the high-water mark the next superblock carries. Every
    /// slot pair on disk at or above it is all zero.
    pub marks: Vec<u64>,
    /// The marks the next open would trust, if no other superblock were
    /// written (`None`: it reads every table whole, as for a format 1 or 2
    /// superblock or a superblock copy that fails its checks). A slot at or
    /// above one of them may be written only once a durable superblock has
    /// raised it (docs/FORMAT.md, "High-water marks").
    pub durable_marks: Option<Vec<u64>>,
}

pub(crate) struct SbState {
    pub stamp: u64,
    pub sb: Superblock,
}

pub(crate) struct Inner {
    pub dev: Arc<dyn Device>,
    pub geo: Geometry,
    pub ckpt: Mutex<CkptState>,
    pub gates: Box<[Gate]>,
    pub commit: Mutex<CommitState>,
    pub shards: Box<[lanefs_store::CacheLine<Mutex<ObjMap>>]>,
    /// Per-shard limits of the object cache (`store_cache.rs`).
    pub limits: CacheLimits,
    pub usage: Box<[Mutex<UsageRec>]>,
    pub sb: Mutex<SbState>,
    pub lanes: Box<[Mutex<Vec<u8>>]>,
    pub groups: Groups,
    pub orphans: OrphanFile,
    /// Data blocks mapped by records still in the journal (`journaled.rs`).
    pub journaled: Journaled,
    /// Blocks file data cannot have, and who hears of them (`overhead.rs`).
    pub overhead: Overhead,
    pub commits_started: AtomicU64,
    pub commits_done: AtomicU64,
    pub data_written: AtomicBool,
    pub failed: AtomicBool,
    /// The errno of the error that set `failed` (0 until then).
    pub failed_errno: AtomicI32,
}

/// The image store. Dropping it stops the background commit and writes a
/// final checkpoint.
pub struct ImageStore {
    pub(crate) inner: Arc<Inner>,
    report: RecoveryReport,
    committer: Option<Ticker>,
}

pub(crate) fn shard(ino: Ino) -> usize {
    lanefs_store::ino_shard(ino, SHARDS.trailing_zeros())
}

/// An entry block at a checkpoint: unchanged at its home, or to write.
enum DirBlkSnap {
    Clean(u64),
    Dirty(Vec<Entry>),
}

/// One object's state to write at a checkpoint.
struct Snap {
    ino: Ino,
    stamp: u64,
    rec: Option<Vec<u8>>,
    extents: Vec<(u64, u64, u32)>,
    unwritten: Vec<(u64, u64)>,
    /// Per entry block position: its home (clean) or its entries (dirty).
    dir: Vec<(usize, DirBlkSnap)>,
    target: usize,
    old_blocks: Vec<u64>,
}

impl Inner {
    fn check_ok(&self) -> Result<()> {
        if self.failed.load(Ordering::SeqCst) {
            Err(Errno::EIO)
        } else {
            Ok(())
        }
    }

    fn io<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            // The first error only: the calls after it fail on `failed`.
            let _ = self
                .failed_errno
                .compare_exchange(0, e.0, Ordering::SeqCst, Ordering::SeqCst);
            self.failed.store(true, Ordering::SeqCst);
        }
        r
    }

    /// Lane-buffer size that triggers a commit: at most a quarter of the
    /// journal over all lanes, so what is buffered fits in the half of the
    /// journal a checkpoint keeps free (bound: `LOG_LANES` × (this + the
    /// largest record)).
    fn lane_commit_bytes(&self) -> usize {
        let journal = self.geo.journal_blocks as usize * BLOCK;
        LANE_COMMIT_BYTES.min(journal / (4 * LOG_LANES))
    }

    /// A data block was written: the next commit flushes before its batch.
    /// Read first so that writers on many lanes do not all write the one
    /// shared cache line: if it is already set, the commit that clears it
    /// starts after this write returned, so its flush covers it.
    fn note_data_written(&self) {
        if !self.data_written.load(Ordering::SeqCst) {
            self.data_written.store(true, Ordering::SeqCst);
        }
    }

    fn check_ino(&self, ino: Ino) -> Result<()> {
        self.geo.ino_place(ino).map(|_| ()).ok_or(Errno::EINVAL)
    }

    /// Apply `ops` and journal them as one record (see the module docs).
    pub fn submit(&self, ops: Vec<Op>) -> Result<()> {
        self.check_ok()?;
        if ops.is_empty() {
            return Ok(());
        }
        let mut ids: Vec<u64> = ops.iter().map(Op::obj).collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() > RECORD_OBJS_MAX {
            return Err(Errno::E2BIG);
        }
        let inos: Vec<u64> = ids.iter().copied().filter(|&o| o < SB_OBJ).collect();
        for &i in &inos {
            self.check_ino(i)?;
        }
        if record_bytes(&ops) > self.geo.journal_blocks as usize * BLOCK / 4 {
            // A record over a quarter of the journal may not fit the room
            // left (up to half of it used, and a wrapped batch wastes the
            // blocks before the journal's end); once applied it could
            // then never be committed, nor could a checkpoint (which
            // commits first) make room. Checkpoint first: an idle one
            // leaves the journal empty from block 0, where any batch
            // under the whole journal fits.
            self.checkpoint()?;
        }
        let l = lane();
        let _gate = self.gates[l % LOG_LANES].0.read();
        let mut shard_ids: Vec<usize> = inos.iter().map(|&i| shard(i)).collect();
        shard_ids.sort_unstable();
        shard_ids.dedup();
        let mut guards: Vec<_> = shard_ids
            .iter()
            .map(|&s| (s, self.shards[s].lock()))
            .collect();
        for &i in &inos {
            let g = &mut guards
                .iter_mut()
                .find(|(s, _)| *s == shard(i))
                .expect("locked")
                .1;
            self.ensure(g, i)?;
            if g.get(&i).is_some_and(|o| o.bad) {
                return Err(Errno::EIO);
            }
        }
        let mut usage_guards: Vec<_> = ids
            .iter()
            .filter(|&&o| o >= USAGE_OBJ_BASE)
            .map(|&o| (o, self.usage[(o - USAGE_OBJ_BASE) as usize].lock()))
            .collect();
        let mut sb_guard = ids.contains(&SB_OBJ).then(|| self.sb.lock());
        // New stamps: one per object per record.
        let mut objs = Vec::with_capacity(ids.len());
        for &o in &ids {
            let stamp = if o >= USAGE_OBJ_BASE {
                let u = &mut usage_guards
                    .iter_mut()
                    .find(|(id, _)| *id == o)
                    .expect("locked")
                    .1;
                u.stamp += 1;
                u.stamp
            } else if o == SB_OBJ {
                let s = sb_guard.as_mut().expect("locked");
                s.stamp += 1;
                s.stamp
            } else {
                let g = &mut guards
                    .iter_mut()
                    .find(|(s, _)| *s == shard(o))
                    .expect("locked")
                    .1;
                let mut obj = g.get_or_default(o);
                obj.stamp += 1;
                obj.stamp
            };
            objs.push((o, stamp));
        }
        let mut freed = Vec::new();
        for op in &ops {
            match op {
                Op::Usage(_, b, n) => {
                    let u = &mut usage_guards
                        .iter_mut()
                        .find(|(id, _)| *id == op.obj())
                        .expect("locked")
                        .1;
                    u.blocks += b;
                    u.inodes += n;
                }
                Op::WriteSb(s) => sb_guard.as_mut().expect("locked").sb = *s,
                _ => {
                    let i = op.obj();
                    let g = &mut guards
                        .iter_mut()
                        .find(|(s, _)| *s == shard(i))
                        .expect("locked")
                        .1;
                    g.get_mut(&i).expect("stamped above").apply(op, &mut freed);
                }
            }
        }
        let mut gone = 0i64;
        for &i in &inos {
            let g = &mut guards
                .iter_mut()
                .find(|(s, _)| *s == shard(i))
                .expect("locked")
                .1;
            let mut obj = g.get_mut(&i).expect("stamped above");
            self.track_orphan(i, &mut obj);
            gone += note_gone(&mut obj);
        }
        let rec = Record { objs, ops };
        let buffered = {
            let mut buf = self.lanes[l % LOG_LANES].lock();
            rec.encode_into(&mut buf);
            buf.len()
        };
        // Under the gate: a checkpoint's rotate sees the blocks of exactly
        // the records its commit writes.
        for op in &rec.ops {
            if let Op::MapPage(_, _, b, _) = op {
                self.journaled.insert(*b);
            }
        }
        for b in freed {
            self.groups.defer_free(b);
        }
        for op in &rec.ops {
            if let Op::FreeInode(i) = op {
                self.groups.free_ino(*i);
            }
        }
        let mut pressure = Pressure::None;
        for (s, g) in &mut guards {
            self.trim(g);
            pressure = pressure.max(self.pressure(*s, g));
        }
        drop(sb_guard);
        drop(usage_guards);
        drop(guards);
        drop(_gate);
        // Home blocks this record leaves to the next checkpoint to free are
        // free space from now on (`overhead.rs`).
        self.overhead.changed(0, gone);
        if buffered >= self.lane_commit_bytes() {
            self.group_commit()?;
        }
        if pressure != Pressure::None {
            self.relieve(pressure, &shard_ids)?;
        }
        Ok(())
    }

    pub fn track_orphan(&self, ino: Ino, obj: &mut InodeObj) {
        match (obj.nlink(), obj.orphan_slot) {
            (Some(0), None) => obj.orphan_slot = self.orphans.add(ino),
            (Some(0), Some(_)) => {}
            (_, Some(s)) => {
                self.orphans.remove(s);
                obj.orphan_slot = None;
            }
            (_, None) => {}
        }
    }

    /// Commit every buffered record (group commit) and checkpoint when the
    /// journal is half full.
    pub fn group_commit(&self) -> Result<()> {
        self.check_ok()?;
        let target = self.commits_started.load(Ordering::SeqCst) + 1;
        let mut cs = self.commit.lock();
        if self.commits_done.load(Ordering::SeqCst) >= target {
            return Ok(());
        }
        let r = self.commit_locked(&mut cs);
        let half_full = self.journal_used(&cs) * 2 > self.geo.journal_blocks;
        drop(cs);
        match r {
            Ok(()) if !half_full => Ok(()),
            Ok(()) | Err(Errno::ENOSPC) => self.checkpoint(),
            Err(e) => Err(e),
        }
    }

    fn journal_used(&self, cs: &CommitState) -> u64 {
        let j = self.geo.journal_blocks;
        (cs.head + j - cs.tail) % j
    }

    /// Swap out every lane buffer and write it as one batch (caller holds
    /// `commit`). `ENOSPC` (records kept in `carry`) when the journal is full.
    pub fn commit_locked(&self, cs: &mut CommitState) -> Result<()> {
        let n = self.commits_started.fetch_add(1, Ordering::SeqCst) + 1;
        let mut payload = std::mem::take(&mut cs.carry);
        {
            // All lane buffers at once: the batch is a consistent cut. A
            // record whose append finished before another's began is in the
            // same batch or an earlier one, whatever their lanes, so a
            // durable batch never holds a call without the calls before it.
            let mut lanes: Vec<_> = self.lanes.iter().map(|l| l.lock()).collect();
            for l in lanes.iter_mut() {
                payload.append(l);
            }
        }
        let data = self.data_written.swap(false, Ordering::SeqCst);
        if !payload.is_empty() {
            if let Err(e) = self.write_batch(cs, &payload) {
                cs.carry = payload;
                if data {
                    self.data_written.store(true, Ordering::SeqCst);
                }
                return Err(e);
            }
        }
        if data || !payload.is_empty() {
            // One flush for the data written since the last one and the
            // batch: no order between them is needed, as recovery checks
            // the last batch's new pages (docs/FORMAT.md).
            let r = self.dev.flush();
            self.io(r)?;
        }
        self.commits_done.store(n, Ordering::SeqCst);
        Ok(())
    }

    fn write_batch(&self, cs: &mut CommitState, payload: &[u8]) -> Result<()> {
        let j = self.geo.journal_blocks;
        let nb = (journal::BATCH_HEADER + payload.len()).div_ceil(BLOCK) as u64;
        let wrap = cs.head + nb > j;
        let need = if wrap { (j - cs.head) + nb } else { nb };
        if self.journal_used(cs) + need >= j {
            return Err(Errno::ENOSPC);
        }
        let start = self.geo.journal_start * BLOCK as u64;
        if wrap {
            let w = journal::encode_batch(BATCH_WRAP, cs.seq, &[]);
            let r = self.dev.write_at(&w, start + cs.head * BLOCK as u64);
            self.io(r)?;
            cs.seq += 1;
            cs.head = 0;
        }
        let b = journal::encode_batch(BATCH_RECORDS, cs.seq, payload);
        let r = self.dev.write_at(&b, start + cs.head * BLOCK as u64);
        self.io(r)?;
        cs.seq += 1;
        cs.head = (cs.head + nb) % j;
        Ok(())
    }

    /// Write every dirty object home (copy-on-write: new chain and entry
    /// blocks, the older of the two slots), then the superblock with the
    /// new journal tail. See docs/FORMAT.md, "Checkpoint".
    pub fn checkpoint(&self) -> Result<()> {
        self.check_ok()?;
        let mut st = self.ckpt.lock();
        let gates: Vec<_> = self.gates.iter().map(|g| g.0.write()).collect();
        let mut cs = self.commit.lock();
        self.commit_locked(&mut cs)?;
        let new_tail = (cs.head, cs.seq);
        // Every record appended so far is before `new_tail` (all gates).
        self.journaled.rotate();
        let mut snaps = Vec::new();
        for s in self.shards.iter() {
            for (&ino, obj) in s.lock().iter_mut() {
                if obj.dirty && !obj.bad {
                    snaps.push(snapshot(ino, obj));
                }
            }
        }
        let usage: Vec<UsageRec> = self.usage.iter().map(|u| *u.lock()).collect();
        let (sb_stamp, sb) = {
            let s = self.sb.lock();
            (s.stamp, s.sb)
        };
        let orphan_blocks = self.orphans.take_dirty();
        let pending = self.groups.take_pending();
        drop(cs);
        drop(gates);
        let r = self.write_homes(&mut st, snaps, usage, sb_stamp, sb, orphan_blocks, new_tail);
        // The tail written: `new_tail`, or block 0 of an empty journal.
        let (written, new_tail) = self.io(r)?;
        // The new tail is durable: no replay reaches those records.
        self.journaled.forget_old();
        {
            let mut cs = self.commit.lock();
            cs.tail = new_tail.0;
            cs.tail_seq = new_tail.1;
        }
        let mut meta_delta = 0i64;
        let mut gone_delta = 0i64;
        for (ino, stamp, target, new_blocks, dir_homes, old_blocks) in written {
            meta_delta += new_blocks.len() as i64 - old_blocks.len() as i64;
            let mut m = self.shards[shard(ino)].lock();
            if let Some(mut obj) = m.get_mut(&ino) {
                obj.home_stamp = stamp;
                obj.home_slot = target;
                if let Some(d) = &mut obj.dir {
                    for (pos, home) in &dir_homes {
                        if let Some(b) = d.blocks.get_mut(*pos) {
                            b.home = *home;
                        }
                    }
                }
                obj.home_blocks = new_blocks.clone();
                // Against the new home: 0 unless changed since the
                // snapshot (an object that is not there was clean, at 0).
                gone_delta += note_gone(&mut obj);
            }
            self.mark_written(ino);
            // Now clean (unless changed since the snapshot): evictable.
            self.trim(&mut m);
            self.pressure(shard(ino), &m);
            drop(m);
            for b in old_blocks.iter().filter(|b| !new_blocks.contains(b)) {
                self.groups.free_block(*b);
            }
        }
        for b in pending {
            self.groups.free_block(b);
        }
        self.overhead.changed(meta_delta, gone_delta);
        self.trim_all();
        Ok(())
    }

    #[allow(clippy::type_complexity, clippy::too_many_arguments)]
    fn write_homes(
        &self,
        st: &mut CkptState,
        snaps: Vec<Snap>,
        usage: Vec<UsageRec>,
        sb_stamp: u64,
        sb: Superblock,
        orphan_blocks: Vec<(usize, Vec<u8>)>,
        new_tail: (u64, u64),
    ) -> Result<(
        Vec<(Ino, u64, usize, Vec<u64>, Vec<(usize, u64)>, Vec<u64>)>,
        (u64, u64),
    )> {
        let bs = BLOCK as u64;
        let mut slots = Vec::with_capacity(snaps.len());
        let mut out = Vec::with_capacity(snaps.len());
        // Phase 1: new entry and chain blocks (never over a durable block).
        for s in snaps {
            let mut new_blocks = Vec::new();
            let mut dir_homes = Vec::new();
            let mut list = Vec::new();
            for (pos, blk) in &s.dir {
                match blk {
                    DirBlkSnap::Clean(home) => {
                        list.push(*home);
                        new_blocks.push(*home);
                    }
                    DirBlkSnap::Dirty(entries) if entries.is_empty() => dir_homes.push((*pos, 0)),
                    DirBlkSnap::Dirty(entries) => {
                        let b = self.alloc_meta_block()?;
                        self.dev
                            .write_at(&object::encode_dirent(s.ino, s.stamp, entries), b * bs)?;
                        list.push(b);
                        new_blocks.push(b);
                        dir_homes.push((*pos, b));
                    }
                }
            }
            // A number with pages but no record yet (pages are written
            // before the Txn that creates the inode) keeps its pages: the
            // image has an empty record. Recovery frees such reservations.
            let (state, image) = match &s.rec {
                None if s.extents.is_empty() && list.is_empty() && s.unwritten.is_empty() => {
                    (SLOT_FREE, Vec::new())
                }
                rec => (
                    SLOT_LIVE,
                    object::encode_image(
                        rec.as_deref().unwrap_or_default(),
                        &s.extents,
                        &list,
                        &s.unwritten,
                    ),
                ),
            };
            let rest = &image[image.len().min(SLOT_INLINE_MAX)..];
            let chunks: Vec<&[u8]> = rest.chunks(object::CHAIN_PAYLOAD).collect();
            let mut chain = Vec::with_capacity(chunks.len());
            for _ in &chunks {
                chain.push(self.alloc_meta_block()?);
            }
            for (k, c) in chunks.iter().enumerate() {
                let next = chain.get(k + 1).copied().unwrap_or(0);
                self.dev.write_at(
                    &object::encode_chain(s.ino, s.stamp, next, c),
                    chain[k] * bs,
                )?;
            }
            let head = chain.first().copied().unwrap_or(0);
            new_blocks.extend(&chain);
            slots.push((
                s.ino,
                s.target,
                object::encode_slot(s.ino, state, s.stamp, &image, head),
            ));
            out.push((
                s.ino,
                s.stamp,
                s.target,
                new_blocks,
                dir_homes,
                s.old_blocks,
            ));
        }
        for (bi, b) in &orphan_blocks {
            self.dev
                .write_at(b, (self.geo.orphan_start + *bi as u64) * bs)?;
        }
        // The marks over every slot this checkpoint writes. If one rises
        // above what the next open would trust, the durable superblock is
        // rewritten with them (old tail, next generation) before any slot:
        // made durable by this phase's flush.
        let mut marks = st.marks.clone();
        for (ino, _, _) in &slots {
            let (g, i) = self.geo.ino_place(*ino).expect("checked at submit");
            marks[g as usize] = marks[g as usize].max(self.geo.mark_for(i));
        }
        let raise = st
            .durable_marks
            .as_ref()
            .is_some_and(|d| d.iter().zip(&marks).any(|(d, m)| m > d));
        let raised = raise.then(|| DiskSuper {
            generation: st.generation + 1,
            marks: Some(marks.clone()),
            ..st.durable.clone()
        });
        if let Some(sup) = &raised {
            self.dev
                .write_at(&sup.encode(), (sup.generation % 2) * bs)?;
        }
        self.dev.flush()?;
        if let Some(sup) = raised {
            st.generation = sup.generation;
            st.durable = sup;
            st.durable_marks = Some(marks.clone());
        }
        st.marks = marks.clone();
        // Phase 2: the slots (each names blocks made durable above).
        self.write_slots(&slots)?;
        self.dev.flush()?;
        // Phase 3: the superblock, older copy first overwritten.
        let mut u = [UsageRec::default(); USAGE_LANES];
        u.copy_from_slice(&usage);
        // If no batch was written since the snapshot, the journal this
        // superblock leaves is empty: its tail goes to block 0 (same
        // sequence), so that the next batch has the whole journal in one
        // run. Left at the head, a batch over the room between the head
        // and the journal's end (wrapped: between 0 and the tail) would
        // never fit, and no checkpoint could ever move the tail of an
        // empty journal: every commit would answer ENOSPC. The commit
        // lock is held until this superblock is durable, so no batch is
        // written at 0 while the previous one (old tail) may still be the
        // one recovery reads.
        let rewind = {
            let cs = self.commit.lock();
            (new_tail.0 != 0 && (cs.head, cs.seq) == new_tail).then_some(cs)
        };
        let new_tail = match rewind {
            Some(_) => (0, new_tail.1),
            None => new_tail,
        };
        let sup = DiskSuper {
            version: FORMAT_VERSION,
            generation: st.generation + 1,
            geo: self.geo,
            journal_tail: new_tail.0,
            journal_tail_seq: new_tail.1,
            sb_stamp,
            sb,
            usage: u,
            marks: Some(marks.clone()),
        };
        self.dev
            .write_at(&sup.encode(), (sup.generation % 2) * bs)?;
        self.dev.flush()?;
        if let Some(mut cs) = rewind {
            (cs.head, cs.tail, cs.tail_seq) = (0, 0, new_tail.1);
        }
        st.generation = sup.generation;
        st.durable = sup;
        st.durable_marks = Some(marks);
        Ok((out, new_tail))
    }

    /// Write checkpoint slots: a run of consecutive inode-table blocks that
    /// hold slots to write (up to `SLOT_RUN_BYTES`) is read, patched and
    /// written back with one write instead of one 512-byte write per slot.
    /// The slots not being written are rewritten with the bytes they hold:
    /// only checkpoints write slots, one at a time (`ckpt`), and each
    /// checkpoint flushes its slots, so those bytes are durable already, and
    /// a torn write, which keeps or loses whole 512-byte sectors, leaves
    /// them as they were. A slot alone in its block is written alone.
    fn write_slots(&self, slots: &[(Ino, usize, Vec<u8>)]) -> Result<()> {
        let bs = BLOCK as u64;
        let mut at: Vec<(u64, &[u8])> = slots
            .iter()
            .map(|(ino, target, bytes)| (self.geo.slot_offset(*ino, *target), &bytes[..]))
            .collect();
        at.sort_unstable_by_key(|&(off, _)| off);
        let mut buf = Vec::new();
        let mut i = 0;
        while i < at.len() {
            let first = at[i].0 / bs;
            let mut last = first;
            let mut j = i + 1;
            while let Some(&(off, _)) = at.get(j) {
                let b = off / bs;
                if b > last + 1 || (b - first + 1) * bs > SLOT_RUN_BYTES {
                    break;
                }
                last = b;
                j += 1;
            }
            if j == i + 1 {
                self.dev.write_at(at[i].1, at[i].0)?;
            } else {
                buf.resize(((last - first + 1) * bs) as usize, 0);
                self.dev.read_at(&mut buf, first * bs)?;
                for &(off, bytes) in &at[i..j] {
                    let o = (off - first * bs) as usize;
                    buf[o..o + bytes.len()].copy_from_slice(bytes);
                }
                self.dev.write_at(&buf, first * bs)?;
            }
            i = j;
        }
        Ok(())
    }

    /// A block for a chain or entry block; runs out only on a full image.
    fn alloc_meta_block(&self) -> Result<u64> {
        self.groups.alloc_block(None, 0).ok_or(Errno::ENOSPC)
    }

    fn alloc_data_block(&self, prefer: Option<u64>) -> Result<u64> {
        let reserve = GROUP_META_RESERVE_BLOCKS;
        // While home blocks wait for the next checkpoint, the engine may
        // have accepted pages for them (`overhead.rs`): data then stops at
        // each group's share of the whole reserve, so that the checkpoint
        // that frees them has the room for its copy-on-write that the
        // overhead keeps (past the groups' own reserve, it found too few
        // blocks for the new homes and failed the store).
        let waiting = self.overhead.gone() > 0;
        let first = if waiting {
            self.overhead.group_share(self.geo.groups).max(reserve)
        } else {
            reserve
        };
        if let Some(b) = self.groups.alloc_block(prefer, first) {
            return Ok(b);
        }
        // Blocks freed for `statfs` but not yet reusable: the checkpoint
        // that frees them makes room for what `statfs` promised.
        if self.groups.has_pending() || waiting {
            self.checkpoint()?;
            if let Some(b) = self.groups.alloc_block(prefer, reserve) {
                return Ok(b);
            }
        }
        Err(Errno::ENOSPC)
    }

    /// Read-only access to one object (read back from its home if it was
    /// evicted); EIO if it is bad.
    fn with_obj<T>(&self, ino: Ino, f: impl FnOnce(Option<&InodeObj>) -> Result<T>) -> Result<T> {
        self.check_ino(ino)?;
        let mut m = self.shards[shard(ino)].lock();
        self.ensure(&mut m, ino)?;
        let o = m.hit(ino);
        if o.is_some_and(|o| o.bad) {
            return Err(Errno::EIO);
        }
        let r = f(o);
        self.trim(&mut m);
        r
    }
}

/// Set `obj.gone` (`overhead.rs`) for its state now: the home blocks the
/// next checkpoint frees, 0 for a clean object (its home is its state).
/// Returns the change, for `Overhead::changed`.
fn note_gone(obj: &mut InodeObj) -> i64 {
    let gone = if obj.dirty {
        obj.home_blocks
            .len()
            .saturating_sub(obj.next_home_blocks_max())
    } else {
        0
    };
    let gone = u32::try_from(gone).unwrap_or(u32::MAX);
    let delta = i64::from(gone) - i64::from(obj.gone);
    obj.gone = gone;
    delta
}

fn snapshot(ino: Ino, obj: &mut InodeObj) -> Snap {
    obj.dirty = false;
    let dir = match &mut obj.dir {
        None => Vec::new(),
        Some(d) => d
            .blocks
            .iter_mut()
            .enumerate()
            .filter(|(_, b)| b.dirty || b.home != 0)
            .map(|(pos, b)| {
                let v = if b.dirty || b.home == 0 {
                    b.dirty = false;
                    DirBlkSnap::Dirty(b.entries.clone())
                } else {
                    DirBlkSnap::Clean(b.home)
                };
                (pos, v)
            })
            .collect(),
    };
    Snap {
        ino,
        stamp: obj.stamp,
        rec: obj.rec.clone(),
        extents: obj.extents(),
        unwritten: obj.unwritten.clone(),
        dir,
        target: 1 - obj.home_slot,
        old_blocks: obj.home_blocks.clone(),
    }
}

/// About the bytes `ops` take in a journal record (the inode records and
/// names exactly, a bound for the fixed-size fields).
fn record_bytes(ops: &[Op]) -> usize {
    ops.iter()
        .map(|op| {
            64 + match op {
                Op::PutInode(_, b) => b.len(),
                Op::PutEntry(_, n, _) | Op::RemoveEntry(_, n) => n.len(),
                Op::SetUnwritten(_, list) => 16 * list.len(),
                _ => 0,
            }
        })
        .sum()
}

fn txn_op(op: &TxnOp) -> Op {
    match op {
        TxnOp::PutInode(r) => Op::PutInode(r.ino, r.encode()),
        TxnOp::FreeInode(i) => Op::FreeInode(*i),
        TxnOp::PutEntry(d, e) => Op::PutEntry(*d, e.name.clone(), e.encode_value()),
        TxnOp::RemoveEntry(d, n) => Op::RemoveEntry(*d, n.clone()),
        TxnOp::PunchPages(i, s, e) => Op::Punch(*i, *s, *e),
        TxnOp::Usage(l, b, n) => Op::Usage(*l, *b, *n),
    }
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > 255 {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

impl ImageStore {
    pub(crate) fn from_inner(
        inner: Arc<Inner>,
        report: RecoveryReport,
        cfg: &ImageConfig,
    ) -> ImageStore {
        let committer = cfg.commit_interval.map(|every| {
            let weak: Weak<Inner> = Arc::downgrade(&inner);
            Ticker::spawn("lanefs-commit", every, move || {
                let Some(inner) = weak.upgrade() else {
                    return false;
                };
                // An error marks the store failed; calls report it.
                let _ = inner.group_commit();
                true
            })
            .expect("spawn the commit thread")
        });
        ImageStore {
            inner,
            report,
            committer,
        }
    }

    /// What recovery did when this store was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }

    /// Why the store failed, if it has: the error of the device write or
    /// flush that failed (the host's `ENOSPC`, say), where every call
    /// since answers `EIO`. `None` while it serves.
    pub fn failure(&self) -> Option<Errno> {
        if !self.inner.failed.load(Ordering::SeqCst) {
            return None;
        }
        match self.inner.failed_errno.load(Ordering::SeqCst) {
            0 => Some(Errno::EIO),
            e => Some(Errno(e)),
        }
    }

    /// Write every dirty object home and move the journal tail.
    pub fn checkpoint(&self) -> Result<()> {
        self.inner.checkpoint()
    }

    /// What the inode-object cache holds (see `ImageConfig::cache_bytes`).
    pub fn cache_stats(&self) -> CacheStats {
        self.inner.cache_stats()
    }

    /// Free data blocks: those allocatable now (for tests and
    /// statfs-like reports). `statfs` counts
    /// [`freed_at_next_checkpoint`](Self::freed_at_next_checkpoint) free
    /// too.
    pub fn free_data_blocks(&self) -> u64 {
        self.inner.groups.free_blocks()
    }

    /// Blocks free for `statfs` but allocatable only once the next
    /// checkpoint is durable: data blocks dropped by journal records
    /// (`alloc.rs`, "Deferred frees") and home blocks of images that
    /// checkpoint replaces or frees (`overhead.rs`). A page write that finds
    /// no block allocatable while some wait checkpoints first.
    pub fn freed_at_next_checkpoint(&self) -> u64 {
        self.inner.groups.pending_blocks() + self.inner.overhead.gone()
    }

    pub fn geometry(&self) -> Geometry {
        self.inner.geo
    }
}

impl Drop for ImageStore {
    fn drop(&mut self) {
        if let Some(t) = self.committer.take() {
            t.join();
        }
        // Best effort: a failed device keeps its recoverable image.
        let _ = self.inner.checkpoint();
    }
}

impl Store for ImageStore {
    fn watch_overhead(&self, hook: lanefs_store::OverheadHook) {
        self.inner.overhead.watch(hook);
    }

    fn reclaimable(&self) -> usize {
        self.inner.reclaimable()
    }

    fn shrink(&self, nr: usize) -> usize {
        self.inner.shrink(nr)
    }

    fn superblock(&self) -> Result<Superblock> {
        self.inner.check_ok()?;
        Ok(self.inner.sb.lock().sb)
    }

    fn write_superblock(&self, sb: &Superblock) -> Result<()> {
        self.inner.submit(vec![Op::WriteSb(*sb)])
    }

    fn alloc_ino(&self) -> Result<Ino> {
        self.inner.check_ok()?;
        let ino = self.inner.groups.alloc_ino().ok_or(Errno::ENOSPC)?;
        debug_assert_ne!(ino, ROOT_INO);
        Ok(ino)
    }

    fn free_ino(&self, ino: Ino) -> Result<()> {
        if ino == ROOT_INO || ino == 0 {
            return Err(Errno::EINVAL);
        }
        self.inner.submit(vec![Op::FreeInode(ino)])
    }

    fn read_inode(&self, ino: Ino) -> Result<Option<InodeRecord>> {
        self.inner.check_ok()?;
        let bytes = self
            .inner
            .with_obj(ino, |o| Ok(o.and_then(|o| o.rec.clone())))?;
        bytes.map(|b| InodeRecord::decode(&b)).transpose()
    }

    fn write_inode(&self, rec: &InodeRecord) -> Result<()> {
        self.inner.submit(vec![Op::PutInode(rec.ino, rec.encode())])
    }

    fn dir_read(&self, dir: Ino) -> Result<Vec<DirEntryRecord>> {
        self.inner.check_ok()?;
        self.inner.with_obj(dir, |o| {
            o.and_then(|o| o.dir.as_ref()).map_or(Ok(Vec::new()), |d| {
                d.entries()
                    .map(|(n, v)| DirEntryRecord::decode_value(n, v))
                    .collect()
            })
        })
    }

    fn dir_insert(&self, dir: Ino, entry: &DirEntryRecord) -> Result<()> {
        check_name(&entry.name)?;
        self.inner.submit(vec![Op::PutEntry(
            dir,
            entry.name.clone(),
            entry.encode_value(),
        )])
    }

    fn dir_remove(&self, dir: Ino, name: &[u8]) -> Result<()> {
        check_name(name)?;
        self.inner.submit(vec![Op::RemoveEntry(dir, name.to_vec())])
    }

    fn read_page(&self, ino: Ino, index: u64, buf: &mut Page) -> Result<bool> {
        self.inner.check_ok()?;
        let Some(b) = self
            .inner
            .with_obj(ino, |o| Ok(o.and_then(|o| o.pages.get(&index).copied())))?
        else {
            return Ok(false);
        };
        self.inner.dev.read_at(&mut buf[..], b * BLOCK as u64)?;
        Ok(true)
    }

    fn write_page(&self, ino: Ino, index: u64, data: &Page) -> Result<()> {
        let inner = &self.inner;
        inner.check_ok()?;
        // The core orders calls for one inode, so the mapping read here
        // cannot change before this call's record is appended.
        let (existing, prefer) = inner.with_obj(ino, |o| {
            let pages = o.map(|o| &o.pages);
            let existing = pages.and_then(|p| p.get(&index).copied());
            let prefer = index
                .checked_sub(1)
                .and_then(|prev| pages.and_then(|p| p.get(&prev).copied()))
                .map(|b| b + 1);
            Ok((existing, prefer))
        })?;
        let off = |b: u64| b * BLOCK as u64;
        match existing {
            // A block no journal record maps any more: its mapping is in
            // the page's home, and nothing checks its content.
            Some(b) if !inner.journaled.contains(b) => {
                let r = inner.dev.write_at(&data[..], off(b));
                inner.io(r)?;
                inner.note_data_written();
                return Ok(());
            }
            // A record recovery may replay checks the block's CRC32C
            // (docs/FORMAT.md): copy-on-write; the old block is freed at
            // the next checkpoint.
            Some(_) | None => {}
        }
        let b = inner.alloc_data_block(prefer.or(existing.map(|b| b + 1)))?;
        let crc = crc32c(&[&data[..]]);
        let r = inner.dev.write_at(&data[..], off(b));
        if let Err(e) = inner.io(r) {
            inner.groups.free_block(b);
            return Err(e);
        }
        inner.note_data_written();
        if let Err(e) = inner.submit(vec![Op::MapPage(ino, index, b, Some(crc))]) {
            inner.groups.free_block(b);
            return Err(e);
        }
        Ok(())
    }

    fn punch_pages(&self, ino: Ino, start: u64, end: u64) -> Result<u64> {
        if start >= end {
            return Ok(0);
        }
        let n = self.inner.with_obj(ino, |o| {
            Ok(o.map_or(0, |o| o.pages.range(start..end).count() as u64))
        })?;
        if n > 0 {
            self.inner.submit(vec![Op::Punch(ino, start, end)])?;
        }
        Ok(n)
    }

    /// From the page map: the default reads every index of the range
    /// (a device read per mapped page), which a truncate or punch of a
    /// large `fallocate`d file pays per page.
    fn count_pages(&self, ino: Ino, start: u64, end: u64) -> Result<u64> {
        self.inner.check_ok()?;
        if start >= end {
            return Ok(0);
        }
        self.inner.with_obj(ino, |o| {
            Ok(o.map_or(0, |o| o.pages.range(start..end).count() as u64))
        })
    }

    /// From the page map too: one range lookup.
    fn has_pages_from(&self, ino: Ino, start: u64) -> Result<bool> {
        self.inner.check_ok()?;
        self.inner.with_obj(ino, |o| {
            Ok(o.is_some_and(|o| o.pages.range(start..).next().is_some()))
        })
    }

    fn list_inodes(&self) -> Result<Vec<Ino>> {
        self.inner.check_ok()?;
        if self.inner.limits.bounded() {
            return self.inner.list_live();
        }
        Ok(self
            .inner
            .shards
            .iter()
            .flat_map(|s| {
                s.lock()
                    .iter()
                    .filter(|(_, o)| o.rec.is_some())
                    .map(|(i, _)| *i)
                    .collect::<Vec<_>>()
            })
            .collect())
    }

    fn page_count(&self, ino: Ino) -> Result<u64> {
        self.inner
            .with_obj(ino, |o| Ok(o.map_or(0, |o| o.pages.len() as u64)))
    }

    fn read_unwritten(&self, ino: Ino) -> Result<Vec<std::ops::Range<u64>>> {
        self.inner.check_ok()?;
        self.inner.with_obj(ino, |o| {
            Ok(o.map_or_else(Vec::new, |o| {
                o.unwritten.iter().map(|&(s, e)| s..e).collect()
            }))
        })
    }

    /// One journaled operation replacing the list (format 4): `fallocate`
    /// of any size costs O(extents) here too. More than
    /// [`UNWRITTEN_MAX`](crate::journal::UNWRITTEN_MAX) extents: `EOPNOTSUPP`,
    /// and the engine writes zero pages instead.
    fn write_unwritten(&self, ino: Ino, extents: &[std::ops::Range<u64>]) -> Result<()> {
        self.inner.check_ok()?;
        let mut list: Vec<(u64, u64)> = extents.iter().map(|r| (r.start, r.end)).collect();
        list.sort_unstable();
        if list.len() > crate::journal::UNWRITTEN_MAX {
            return Err(Errno::EOPNOTSUPP);
        }
        if !crate::journal::unwritten_ok(&list) {
            return Err(Errno::EINVAL);
        }
        let same = self.inner.with_obj(ino, |o| {
            Ok(o.map_or(list.is_empty(), |o| o.unwritten == list))
        })?;
        if same {
            return Ok(());
        }
        self.inner.submit(vec![Op::SetUnwritten(ino, list)])
    }

    fn allocated_pages(&self, ino: Ino) -> Result<u64> {
        self.inner
            .with_obj(ino, |o| Ok(o.map_or(0, InodeObj::allocated)))
    }

    fn sync(&self) -> Result<()> {
        self.inner.group_commit()
    }

    fn commit(&self, txn: &Txn) -> Result<()> {
        txn.check()?;
        self.inner.submit(txn.ops().iter().map(txn_op).collect())
    }
}

/// Time a closure (recovery reports its duration).
pub(crate) fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let v = f();
    (v, t.elapsed())
}
