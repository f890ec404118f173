//! mkfs, and loading an image: superblock choice (and whether its
//! inode-table high-water marks are trusted), inode tables below the marks
//! (read by `itable.rs`, on several threads), journal replay in stamp
//! order, records' derived fields (directory size, link count, next
//! cookie; block counts) recomputed from the entries and pages, orphan
//! processing, allocator and counter rebuild.
//!
//! The journal is read and applied one batch at a time with one batch of
//! look-ahead (`replay.rs`): recovery holds the decoded records of two
//! batches and those waiting for a predecessor, never the whole journal
//! (`RecoveryReport::records_held_max`); the last batch is known before it
//! applies, so it alone is dropped if its pages did not land.
//!
//! Runs before the store is shared, so it takes the locks of the
//! structures it fills only because their types require it (and, while the
//! tables load, because several threads claim blocks in the allocator). No
//! atomics of its own (it builds the store's).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64};
use std::sync::Arc;

use lanefs_store::{
    DirDerived, DirEntryRecord, Errno, FileKind, Ino, InodeRecord, Result, Superblock, ROOT_INO,
};
use parking_lot::{Mutex, RwLock};

use crate::alloc::{set_bit_range, Groups};
use crate::cache::ObjMap;
use crate::crc::crc32c;
use crate::device::{Device, FileDevice};
use crate::itable::{load_tables, read_home, Dropped};
use crate::journal::{Op, Record, SB_OBJ};
use crate::journaled::Journaled;
use crate::layout::{
    DiskSuper, Geometry, UsageRec, BLOCK, FORMAT_VERSION, JOURNAL_SEQ_LIMIT, USAGE_LANES,
};
use crate::object::InodeObj;
use crate::orphan::{decode_orphan_block, OrphanFile};
use crate::overhead::Overhead;
use crate::replay::{JournalReader, Replay, Targets};
use crate::store::{
    shard, timed, CkptState, CommitState, Gate, ImageConfig, ImageStore, Inner, RecoveryReport,
    SbState, LOG_LANES,
};
use crate::store_cache::CacheLimits;

/// Format `path` (created if missing) as an empty image of `size` bytes.
/// A regular file is truncated to `size` first, so it reads as zeros: its
/// inode tables are not written and stay holes (a sparse image).
pub fn mkfs(path: &Path, size: u64) -> Result<()> {
    let dev = FileDevice::create(path, size)?;
    mkfs_zeroed(&dev, dev.zeroed())
}

/// Format a device as an empty image.
pub fn mkfs_device(dev: &dyn Device) -> Result<()> {
    mkfs_zeroed(dev, false)
}

/// Format `dev`; `zeroed`: it reads as zeros already, so the inode tables
/// need not be written (they must read as zeros: a full scan reads them).
fn mkfs_zeroed(dev: &dyn Device, zeroed: bool) -> Result<()> {
    let geo = Geometry::for_size(dev.len() / BLOCK as u64)?;
    let bs = BLOCK as u64;
    let zero = vec![0u8; 64 * BLOCK];
    let zero_range = |first: u64, blocks: u64| -> Result<()> {
        let mut b = 0;
        while b < blocks {
            let n = (blocks - b).min(64);
            dev.write_at(&zero[..(n as usize) * BLOCK], (first + b) * bs)?;
            b += n;
        }
        Ok(())
    };
    zero_range(0, 2)?;
    zero_range(geo.orphan_start, geo.orphan_blocks)?;
    for g in (0..geo.groups).filter(|_| !zeroed) {
        zero_range(geo.group_first_block(g), geo.itable_blocks)?;
    }
    // A sequence no earlier image on this device used, so none of its
    // journal batches can be mistaken for ours.
    let seq = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64 | 1);
    let sup = DiskSuper {
        version: FORMAT_VERSION,
        generation: 1,
        geo,
        journal_tail: 0,
        journal_tail_seq: seq,
        sb_stamp: 0,
        sb: Superblock {
            total_blocks: geo.data_blocks(),
            total_inodes: geo.max_ino(),
            used_blocks: 0,
            used_inodes: 0,
        },
        usage: [UsageRec::default(); USAGE_LANES],
        // Nothing written yet: open reads no inode table.
        marks: Some(vec![0; geo.groups as usize]),
    };
    dev.write_at(&sup.encode(), bs)?;
    dev.flush()
}

/// Everything read from an image, journal replayed.
pub(crate) struct Loaded {
    pub sup: DiskSuper,
    pub objs: Vec<ObjMap>,
    pub groups: Groups,
    pub usage: Vec<UsageRec>,
    pub sb_stamp: u64,
    pub sb: Superblock,
    pub head: u64,
    pub seq: u64,
    pub report: RecoveryReport,
    pub orphans_listed: Vec<Ino>,
    /// Live inodes with link count 0 (freed when `process_orphans`).
    pub orphans_pending: Vec<Ino>,
    pub torn_slots: u64,
    /// Entry and chain blocks the homes take (`overhead.rs`).
    pub meta_blocks: u64,
    /// Per group, one bit per inode: both slots zero (`itable::Dropped`).
    pub never_written: Vec<Vec<u64>>,
    /// Per group: a high-water mark above every slot pair on disk that is
    /// not all zero (the store's `CkptState::marks`).
    pub marks: Vec<u64>,
    /// The marks the next open would trust if no superblock were written
    /// (`None`: it reads every table; `CkptState::durable_marks`).
    pub durable_marks: Option<Vec<u64>>,
    /// The marks below which this load read the tables (`None`: it read
    /// them whole); fsck checks that the pairs above are all zero.
    pub scan_marks: Option<Vec<u64>>,
}

impl Loaded {
    pub fn obj(&self, ino: Ino) -> Option<&InodeObj> {
        self.objs[shard(ino)].get(&ino)
    }
}

#[cfg(test)]
fn read_super(dev: &dyn Device) -> Result<DiskSuper> {
    read_supers(dev).map(|(s, _)| s)
}

/// The superblock copy in use (the valid one with the higher generation),
/// and whether the other copy is sound too (valid, or all zero: never
/// written). Only then are the high-water marks trusted: a copy that
/// fails its checks may be a newer superblock whose marks covered slots
/// that the older copy's do not (docs/FORMAT.md, "High-water marks").
fn read_supers(dev: &dyn Device) -> Result<(DiskSuper, bool)> {
    if dev.len() < 2 * BLOCK as u64 {
        return Err(Errno::EUCLEAN);
    }
    let mut best: Option<DiskSuper> = None;
    let mut sound = true;
    for copy in 0..2u64 {
        let mut b = vec![0u8; BLOCK];
        dev.read_at(&mut b, copy * BLOCK as u64)?;
        if DiskSuper::newer_version(&b).is_some() {
            // Never fall back to the other copy: it may be older state.
            return Err(Errno::EUCLEAN);
        }
        match DiskSuper::decode(&b) {
            Ok(s) => {
                if best.as_ref().is_none_or(|x| s.generation > x.generation) {
                    best = Some(s);
                }
            }
            Err(_) => sound &= b.iter().all(|&x| x == 0),
        }
    }
    let sup = best.ok_or(Errno::EUCLEAN)?;
    // Checked: a corrupt total must not wrap past the device's length.
    if sup
        .geo
        .total_blocks
        .checked_mul(BLOCK as u64)
        .is_none_or(|bytes| bytes > dev.len())
    {
        return Err(Errno::EUCLEAN);
    }
    Ok((sup, sound))
}

/// One-line explanation of why an image could not be opened.
pub fn describe_open_error(dev: &dyn Device) -> String {
    if dev.len() < 2 * BLOCK as u64 {
        return format!("image too small ({} bytes)", dev.len());
    }
    let mut b = vec![0u8; BLOCK];
    for copy in 0..2u64 {
        if dev.read_at(&mut b, copy * BLOCK as u64).is_ok() {
            if let Some(v) = DiskSuper::newer_version(&b) {
                return format!(
                    "image format version {v} is newer than this lanefs reads \
                     (versions {}..={FORMAT_VERSION})",
                    crate::layout::FORMAT_VERSION_MIN
                );
            }
        }
    }
    match read_supers(dev) {
        Err(_) => {
            let sizes = (0..2u64)
                .filter_map(|c| {
                    dev.read_at(&mut b, c * BLOCK as u64).ok()?;
                    DiskSuper::decode(&b).ok().map(|s| s.geo.total_blocks)
                })
                .collect::<Vec<_>>();
            match sizes.first() {
                Some(n) => format!(
                    "image truncated: {} bytes, superblock says {} blocks",
                    dev.len(),
                    n
                ),
                None => "not a lanefs image, or both superblocks are corrupt".into(),
            }
        }
        Ok(_) => "image structures are corrupt".into(),
    }
}

/// Read an image and replay its journal in memory, keeping about `budget`
/// bytes of objects recovery does not need (`None`: every object; see
/// `itable.rs`). The inode tables are read below the superblock's
/// high-water marks when they are trusted (format 3, both copies sound)
/// and `full_scan` is not asked for; else whole.
pub(crate) fn load(
    dev: &dyn Device,
    process_orphans: bool,
    budget: Option<u64>,
    full_scan: bool,
) -> Result<Loaded> {
    let (sup, sound) = read_supers(dev)?;
    let geo = sup.geo;
    let mut report = RecoveryReport::default();
    let durable_marks = sup.marks.clone().filter(|_| sound);
    let scan_marks = durable_marks.clone().filter(|_| !full_scan);
    let (tables, groups) = load_tables(dev, &geo, budget, scan_marks.as_deref())?;
    // Above every pair seen and every mark on disk.
    let marks: Vec<u64> = tables
        .seen
        .iter()
        .enumerate()
        .map(|(g, &seen)| {
            let on_disk = sup.marks.as_ref().map_or(0, |m| m[g]);
            let seen = seen.checked_sub(1).map_or(0, |i| geo.mark_for(i));
            on_disk.max(seen)
        })
        .collect();
    let mut objs = tables.objs;
    let mut dropped = tables.dropped;
    let suspects = tables.suspects;
    let torn_slots = tables.torn_slots;
    report.problems = tables.problems;
    let bs = BLOCK as u64;
    let mut orphans_listed = Vec::new();
    for bi in 0..geo.orphan_blocks {
        let mut b = vec![0u8; BLOCK];
        dev.read_at(&mut b, (geo.orphan_start + bi) * bs)?;
        orphans_listed.extend(decode_orphan_block(&b, bi).unwrap_or_default());
    }
    report.orphans_listed = orphans_listed.len() as u64;
    let mut usage = sup.usage.to_vec();
    let mut sb_stamp = sup.sb_stamp;
    let mut sb = sup.sb;
    let (head, mut seq, batches) = replay_journal(
        dev,
        &sup,
        &mut dropped,
        &mut Targets {
            geo: &geo,
            groups: &groups,
            objs: &mut objs,
            suspects: &suspects,
            usage: &mut usage,
            sb_stamp: &mut sb_stamp,
            sb: &mut sb,
        },
        &mut report,
    )?;
    // Batches past the end of the replayed journal (from before a
    // superblock fallback, or an earlier lap) must never be taken for the
    // ones this mount writes next: continue above every sequence number the
    // journal region can hold, a bound read from the superblock rather
    // than from the whole region (docs/FORMAT.md, "Sequence numbers").
    seq = seq.max(seq_bound(&sup));
    report.batches = batches;
    for ino in suspects {
        let mut o = objs[shard(ino)].get_mut(&ino).expect("inserted");
        if o.stamp == 0 {
            report
                .problems
                .push(format!("inode {ino}: both slots corrupt"));
        } else {
            o.bad = false;
        }
    }
    report.records_derived = derive_records(&mut objs);
    let mut orphans_pending = Vec::new();
    for m in &mut objs {
        for (&ino, o) in m.iter_mut() {
            // Link count 0, or a reserved number that got pages or entries
            // but never its record (the Txn creating it was lost).
            let reservation = o.rec.is_none()
                && (!o.pages.is_empty() || o.dir.as_ref().is_some_and(|d| !d.is_empty()));
            if !o.bad && (o.nlink() == Some(0) || reservation) {
                orphans_pending.push(ino);
                if process_orphans {
                    o.stamp += 1;
                    let mut freed = Vec::new();
                    o.apply(&Op::FreeInode(ino), &mut freed);
                    freed.into_iter().for_each(|b| groups.defer_free(b));
                }
            }
        }
    }
    if process_orphans {
        report.orphans_freed = orphans_pending.len() as u64;
    }
    // Free: every number but the root, those dropped live, and those held
    // live or bad (replay's creates past the marks among them).
    let words = geo.inodes_per_group.div_ceil(64) as usize;
    let mut free: Vec<Vec<u64>> = (0..geo.groups as usize)
        .map(|g| {
            let mut bits = vec![0u64; words];
            set_bit_range(&mut bits, 0, geo.inodes_per_group);
            if let Some(live) = dropped.live.get(g) {
                bits.iter_mut().zip(live).for_each(|(b, l)| *b &= !l);
            }
            bits
        })
        .collect();
    let mut not_free = |ino: Ino| {
        if let Some((g, i)) = geo.ino_place(ino) {
            free[g as usize][(i / 64) as usize] &= !(1 << (i % 64));
        }
    };
    not_free(ROOT_INO);
    for (&ino, o) in objs.iter().flat_map(|m| m.iter()) {
        if o.rec.is_some() || o.bad {
            not_free(ino);
        }
    }
    groups.set_free_inos(free);
    let live = objs
        .iter()
        .flat_map(|m| m.values())
        .filter(|o| o.rec.is_some());
    let (mut inodes, mut pages) = (dropped.live_count, dropped.pages);
    for o in live {
        inodes += 1;
        pages += o.allocated();
    }
    // Counters rebuilt from what is really there.
    sb.used_inodes = inodes;
    sb.used_blocks = pages;
    sb.total_blocks = geo.data_blocks();
    sb.total_inodes = geo.max_ino();
    report.bad_objects = objs
        .iter()
        .flat_map(|m| m.iter())
        .filter(|(_, o)| o.bad)
        .map(|(i, _)| *i)
        .collect();
    report.bad_objects.sort_unstable();
    for m in &mut objs {
        m.recount();
    }
    let meta_blocks = dropped.meta
        + objs
            .iter()
            .flat_map(|m| m.values())
            .map(|o| o.home_blocks.len() as u64)
            .sum::<u64>();
    Ok(Loaded {
        meta_blocks,
        sup,
        objs,
        groups,
        usage,
        sb_stamp,
        sb,
        head,
        seq,
        report,
        orphans_listed,
        orphans_pending,
        torn_slots,
        never_written: std::mem::take(&mut dropped.never_written),
        marks,
        durable_marks,
        scan_marks,
    })
}

/// Bring what every live record says about the object's other keys in
/// line with them: a directory's size, link count and next cookie with its
/// entries ([`InodeRecord::derive_dir`]), any inode's block count with its
/// data pages. The engine commits a directory's entries with each
/// operation but the directory's record only at writeback, and a file's
/// pages before the record that counts them (or, a link or rename carrying
/// the record, after), so after a crash a record may disagree with them.
/// Changed records get a new stamp and are written by the next checkpoint.
/// Only directories and records whose block count is off are decoded.
/// Returns how many records changed.
fn derive_records(objs: &mut [ObjMap]) -> u64 {
    let mut changed = 0;
    for m in objs.iter_mut() {
        for (_, o) in m.iter_mut() {
            if let Some(rec) = derived_record(o) {
                o.rec = Some(rec);
                o.stamp += 1;
                o.dirty = true;
                changed += 1;
            }
        }
    }
    changed
}

/// The record `derive_records` would give `o`, if it differs from its own.
pub(crate) fn derived_record(o: &InodeObj) -> Option<Vec<u8>> {
    let (Some(kind), Some(blocks)) = (o.kind(), o.blocks()) else {
        return None;
    };
    let pages = o.allocated();
    let is_dir = kind == FileKind::Directory;
    if o.bad || (!is_dir && blocks == pages) {
        return None;
    }
    let Some(Ok(mut rec)) = o.rec.as_deref().map(InodeRecord::decode) else {
        return None;
    };
    let mut d = DirDerived::default();
    if let Some(dir) = &o.dir {
        // A malformed entry is fsck's to report; it is not counted.
        dir.entries()
            .filter_map(|(n, v)| DirEntryRecord::decode_value(n, v).ok())
            .for_each(|e| d.add(&e));
    }
    let dir_changed = rec.derive_dir(&d);
    if dir_changed || rec.blocks != pages {
        rec.blocks = pages;
        return Some(rec.encode());
    }
    None
}

/// Whether every page the records of the journal's last batch map holds
/// the content whose CRC32C the mapping carries. Each of those blocks was
/// allocated for its record and is not written again while the record can
/// be replayed (`journaled.rs`), so a mismatch means the data write did
/// not reach the media before the power failed, and the batch's flush
/// never returned: nothing in the batch was promised.
fn last_batch_landed(dev: &dyn Device, geo: &Geometry, last: &[Record]) -> Result<bool> {
    let mut page = vec![0u8; BLOCK];
    for op in last.iter().flat_map(|r| &r.ops) {
        let Op::MapPage(_, _, b, Some(crc)) = op else {
            continue;
        };
        if geo.data_block_group(*b).is_none() {
            return Ok(false);
        }
        dev.read_at(&mut page, b * BLOCK as u64)?;
        if crc32c(&[&page]) != *crc {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Replay the journal from the tail batch by batch, holding one batch of
/// look-ahead so that the last batch is known: only that one is dropped
/// whole if a page it maps did not land (format 2 and later). Before a
/// batch applies, the dropped objects its records name come back from
/// their homes (which the table load found sound). Returns the next head
/// and sequence (past the last batch read, landed or not) and the batches.
fn replay_journal(
    dev: &dyn Device,
    sup: &DiskSuper,
    dropped: &mut Dropped,
    t: &mut Targets,
    report: &mut RecoveryReport,
) -> Result<(u64, u64, u64)> {
    let mut journal = JournalReader::new(dev, sup);
    let mut replay = Replay::default();
    let mut ahead = journal.next_batch()?;
    while let Some(batch) = ahead.take() {
        ahead = journal.next_batch()?;
        let held = replay.pending() + batch.len() + ahead.as_ref().map_or(0, Vec::len);
        report.records_held_max = report.records_held_max.max(held as u64);
        if ahead.is_none() && sup.version >= 2 && !last_batch_landed(dev, &sup.geo, &batch)? {
            // The only batch whose data pages may lack a flush: dropped
            // whole, as if the power had failed before it was written.
            report.records_unlanded = batch.len() as u64;
            break;
        }
        for &(o, _) in batch.iter().flat_map(|r| &r.objs) {
            if o < SB_OBJ && !t.objs[shard(o)].contains(o) && dropped.is_dropped(&sup.geo, o) {
                let obj = read_home(dev, &sup.geo, o)?;
                dropped.take_back(&sup.geo, o, &obj);
                t.objs[shard(o)].insert(o, obj);
            }
        }
        replay.batch(batch, t, report);
    }
    replay.finish(report);
    let (head, seq) = journal.end();
    Ok((head, seq, journal.batches()))
}

/// Above the sequence number of every batch the journal region can hold
/// when `sup` is the superblock copy in use. The writer never passes the
/// durable tail (its tail moves only once a checkpoint's superblock is
/// flushed), so at most `journal_blocks` batches (one block or more each)
/// follow a copy's tail before the next copy is written, and at most as
/// many after it; the copy in use is the newest or the one before it. So
/// every batch of this lap has a sequence number below `journal_tail_seq +
/// 2 × journal_blocks`, and every batch of an earlier lap one below
/// `journal_tail_seq`.
/// (Kept below [`JOURNAL_SEQ_LIMIT`], which only a crafted superblock
/// could bring within reach.)
fn seq_bound(sup: &DiskSuper) -> u64 {
    let bound = sup
        .journal_tail_seq
        .saturating_add(2 * sup.geo.journal_blocks + 1);
    bound.min(JOURNAL_SEQ_LIMIT - 1)
}

/// Open an image with recovery: replay, free orphans, rebuild counters,
/// checkpoint. Errors are `EUCLEAN` (not an image, corrupt superblocks,
/// truncated) or the device's error.
pub fn open_device(dev: Arc<dyn Device>, cfg: &ImageConfig) -> Result<ImageStore> {
    open_scanning(dev, cfg, false)
}

/// [`open_device`], reading every inode table whole if `full_scan` (fsck
/// --repair: pairs written above a mark are loaded, and the mark raised
/// over them).
pub(crate) fn open_scanning(
    dev: Arc<dyn Device>,
    cfg: &ImageConfig,
    full_scan: bool,
) -> Result<ImageStore> {
    let (loaded, took) = timed(|| load(&*dev, true, cfg.cache_bytes, full_scan));
    let l = loaded?;
    let geo = l.sup.geo;
    let orphans = OrphanFile::new(geo.orphan_blocks as usize);
    let inner = Inner {
        dev,
        geo,
        ckpt: Mutex::new(CkptState {
            generation: l.sup.generation,
            durable: l.sup.clone(),
            marks: l.marks,
            durable_marks: l.durable_marks,
        }),
        gates: (0..LOG_LANES).map(|_| Gate(RwLock::new(()))).collect(),
        commit: Mutex::new(CommitState {
            head: l.head,
            seq: l.seq,
            tail: l.sup.journal_tail,
            tail_seq: l.sup.journal_tail_seq,
            carry: Vec::new(),
        }),
        shards: l
            .objs
            .into_iter()
            .map(|m| lanefs_store::CacheLine(Mutex::new(m)))
            .collect(),
        limits: CacheLimits::new(cfg.cache_bytes, l.never_written),
        usage: l.usage.into_iter().map(Mutex::new).collect(),
        sb: Mutex::new(SbState {
            stamp: l.sb_stamp,
            sb: l.sb,
        }),
        lanes: (0..LOG_LANES).map(|_| Mutex::new(Vec::new())).collect(),
        groups: l.groups,
        orphans,
        journaled: Journaled::default(),
        overhead: Overhead::new(&geo, l.meta_blocks),
        commits_started: AtomicU64::new(0),
        commits_done: AtomicU64::new(0),
        data_written: AtomicBool::new(false),
        failed: AtomicBool::new(false),
        failed_errno: AtomicI32::new(0),
    };
    let mut report = l.report;
    let inner = Arc::new(inner);
    // Make the recovered state the durable one and empty the journal.
    let (r, ck) = timed(|| inner.checkpoint());
    r?;
    report.load = took;
    report.checkpoint = ck;
    report.duration = took + ck;
    Ok(ImageStore::from_inner(inner, report, cfg))
}

impl ImageStore {
    /// Open the image at `path` (a file or block device) with recovery.
    pub fn open(path: &Path) -> Result<ImageStore> {
        ImageStore::open_with(path, &ImageConfig::default())
    }

    pub fn open_with(path: &Path, cfg: &ImageConfig) -> Result<ImageStore> {
        open_device(Arc::new(FileDevice::open(path)?), cfg)
    }

    pub fn open_device(dev: Arc<dyn Device>, cfg: &ImageConfig) -> Result<ImageStore> {
        open_device(dev, cfg)
    }
}

#[cfg(test)]
#[path = "recover_tests.rs"]
mod tests;
