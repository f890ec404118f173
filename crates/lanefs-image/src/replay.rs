//! Journal replay at open, one batch at a time (docs/FORMAT.md, "Recovery
//! (open)"): [`JournalReader`] reads and decodes the journal batch by batch
//! from the tail; [`Replay`] applies records in per-object stamp order.
//!
//! Runs inside `recover::load`, before the store is shared: it takes the
//! locks of the object maps and allocator groups it fills only because
//! their types require it (nothing else can hold them), one at a time. No
//! atomics.
//!
//! What it holds: the batch being applied and one batch of look-ahead (the
//! caller's, so that it knows which batch is the last: only that one may
//! be dropped because its pages did not land), and the *pending* records:
//! those that wait for a predecessor (an `(object, stamp)` pair not yet
//! applied), indexed by each of their pairs. Besides, per object the
//! journal names, the stamps applied from the journal (two `u64`s).
//!
//! Memory bound: decoded records held are at most the pending ones plus two
//! batches (`RecoveryReport::records_held_max`). A batch is a consistent cut
//! (`ImageStore::commit_locked`), so in a journal the store wrote a record
//! waits only for records of its own batch, and pending records outlive
//! their batch only when they follow a lost record (or one of a bad object):
//! those wait to the end and are dropped. A batch is at most a journal
//! (64 MiB); the store's group commits make them far smaller.

use std::collections::{HashSet, VecDeque};

use lanefs_store::{Ino, Result, Superblock};

use crate::alloc::Groups;
use crate::cache::ObjMap;
use crate::device::Device;
use crate::journal::{self, Op, Record, BATCH_HEADER, BATCH_WRAP, SB_OBJ, USAGE_OBJ_BASE};
use crate::layout::{DiskSuper, Geometry, UsageRec, BLOCK, USAGE_LANES};
use crate::object::IntMap;
use crate::store::{shard, RecoveryReport};

/// Reads the journal from the tail, one batch at a time, up to the first
/// block that is not the next batch (wrong sequence, bad checksum, records
/// that do not decode, or past the region read so far).
pub(crate) struct JournalReader<'a> {
    dev: &'a dyn Device,
    sup: &'a DiskSuper,
    /// Next batch's offset within the journal and sequence number.
    pos: u64,
    seq: u64,
    /// Journal blocks read so far (never more than the journal).
    scanned: u64,
    /// Batches of records read.
    batches: u64,
    ended: bool,
}

impl<'a> JournalReader<'a> {
    pub fn new(dev: &'a dyn Device, sup: &'a DiskSuper) -> Self {
        JournalReader {
            dev,
            sup,
            pos: sup.journal_tail,
            seq: sup.journal_tail_seq,
            scanned: 0,
            batches: 0,
            ended: false,
        }
    }

    /// The next batch's records; `None` at the end of the journal (and
    /// from then on).
    pub fn next_batch(&mut self) -> Result<Option<Vec<Record>>> {
        let geo = &self.sup.geo;
        let j = geo.journal_blocks;
        let base = geo.journal_start * BLOCK as u64;
        let mut hdr = vec![0u8; BLOCK];
        while !self.ended && self.scanned < j {
            self.dev.read_at(&mut hdr, base + self.pos * BLOCK as u64)?;
            let Some((kind, len)) = journal::decode_batch_header(&hdr, self.seq) else {
                break;
            };
            if kind == BATCH_WRAP {
                self.scanned += j - self.pos;
                self.pos = 0;
                self.seq += 1;
                continue;
            }
            // `len` is bounded by decode_batch_header (at most a journal).
            let nb = (BATCH_HEADER + len).div_ceil(BLOCK) as u64;
            if self.pos + nb > j || self.scanned + nb > j {
                break;
            }
            let mut b = vec![0u8; nb as usize * BLOCK];
            self.dev.read_at(&mut b, base + self.pos * BLOCK as u64)?;
            let payload = &b[BATCH_HEADER..BATCH_HEADER + len];
            if !journal::batch_payload_ok(&b, payload) {
                break;
            }
            let Ok(recs) = journal::decode_records(payload, self.sup.version) else {
                break;
            };
            self.batches += 1;
            self.scanned += nb;
            self.pos = (self.pos + nb) % j;
            self.seq += 1;
            return Ok(Some(recs));
        }
        self.ended = true;
        Ok(None)
    }

    /// Batches of records read so far.
    pub fn batches(&self) -> u64 {
        self.batches
    }

    /// Where the next batch goes (offset within the journal, sequence
    /// number): past the last batch read.
    pub fn end(&self) -> (u64, u64) {
        (self.pos, self.seq)
    }
}

/// What replay changes: the loaded objects, the allocator, the usage and
/// superblock records.
pub(crate) struct Targets<'a> {
    pub geo: &'a Geometry,
    pub groups: &'a Groups,
    pub objs: &'a mut [ObjMap],
    /// Numbers whose slots are both torn or corrupt: replay decides.
    pub suspects: &'a HashSet<Ino>,
    pub usage: &'a mut [UsageRec],
    pub sb_stamp: &'a mut u64,
    pub sb: &'a mut Superblock,
}

/// The usage record that object `o` (at or above `USAGE_OBJ_BASE`) names.
fn usage_lane(o: u64) -> usize {
    ((o - USAGE_OBJ_BASE) as usize) % USAGE_LANES
}

impl Targets<'_> {
    /// Object `o`'s current stamp (0: not loaded, never written).
    fn cur(&self, o: u64) -> u64 {
        if o >= USAGE_OBJ_BASE {
            self.usage[usage_lane(o)].stamp
        } else if o == SB_OBJ {
            *self.sb_stamp
        } else {
            self.objs[shard(o)].get(&o).map_or(0, |x| x.stamp)
        }
    }

    /// Whether, for each of its objects, `r`'s stamp is the object's next
    /// (or already covered by the object's home).
    fn ready(&self, r: &Record) -> bool {
        r.objs.iter().all(|&(o, s)| s <= self.cur(o) + 1)
    }

    /// Apply a ready record: the operations of the objects whose stamp it
    /// moves (its *fresh* objects), then their stamps.
    fn apply(&mut self, r: &Record, report: &mut RecoveryReport) {
        let fresh: Vec<(u64, u64)> = r
            .objs
            .iter()
            .copied()
            .filter(|&(o, s)| s == self.cur(o) + 1)
            .collect();
        for op in &r.ops {
            let o = op.obj();
            if fresh.iter().any(|(x, _)| *x == o) {
                self.apply_op(o, op, report);
            }
        }
        for &(o, s) in &fresh {
            if o >= USAGE_OBJ_BASE {
                self.usage[usage_lane(o)].stamp = s;
            } else if o == SB_OBJ {
                *self.sb_stamp = s;
            } else {
                let mut obj = self.objs[shard(o)].get_or_default(o);
                if !obj.bad || self.suspects.contains(&o) {
                    obj.stamp = s;
                    obj.dirty = true;
                }
            }
        }
    }

    /// One operation on fresh object `o`: a bad object (not a suspect) is
    /// left alone; a page is mapped only if its block can be claimed.
    fn apply_op(&mut self, o: u64, op: &Op, report: &mut RecoveryReport) {
        match op {
            Op::Usage(_, b, n) => {
                let u = &mut self.usage[usage_lane(o)];
                u.blocks += b;
                u.inodes += n;
            }
            Op::WriteSb(x) => *self.sb = *x,
            _ => {
                let mut obj = self.objs[shard(o)].get_or_default(o);
                if obj.bad && !self.suspects.contains(&o) {
                    return;
                }
                if let Op::MapPage(_, _, b, _) = op {
                    if !self.groups.claim(*b) {
                        report.problems.push(format!(
                            "inode {o}: journal maps block {b}, out of range or in use"
                        ));
                        return;
                    }
                }
                let mut freed = Vec::new();
                obj.apply(op, &mut freed);
                freed.into_iter().for_each(|b| self.groups.defer_free(b));
            }
        }
    }
}

/// Replay's state between batches: the pending records and, per object
/// the journal names, the stamps applied from it (see the module docs).
///
/// A record is *invalid*, never applied and counted as dropped, if it
/// names an object out of range or carries a pair `(object, stamp)` that a
/// record before it in the journal carries: one pending, or one applied
/// (a stamp above the object's home that replay has reached), or the same
/// record twice. (A pair at or below the home's stamp that two records
/// carry is not seen: it changes nothing for that object, each record's
/// other objects follow their own stamps, and no pair is applied twice.)
#[derive(Default)]
pub(crate) struct Replay {
    /// Records admitted but not applied, by their number in the journal.
    pending: IntMap<u64, Record>,
    /// Every pair of every pending record, to its record: unique.
    held: IntMap<(u64, u64), u64>,
    /// Per object the journal names: its stamp when first named (its
    /// home's) and the highest stamp above it that an applied record
    /// carried. The pairs between them were applied, each once.
    applied: IntMap<u64, (u64, u64)>,
    /// Records read so far (the next one's number).
    next: u64,
}

impl Replay {
    /// Records held waiting for a predecessor.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Apply a batch's records in per-object stamp order, with the pending
    /// ones: first each record of the batch that is ready, in journal
    /// order; then, as long as records apply, the pending records that
    /// carry a successor of one of their pairs. Records not ready stay
    /// pending. The objects the batch names must be loaded (the dropped
    /// ones read back).
    pub fn batch(&mut self, records: Vec<Record>, t: &mut Targets, report: &mut RecoveryReport) {
        let mut queue = VecDeque::with_capacity(records.len());
        for r in records {
            let id = self.next;
            self.next += 1;
            if self.admit(id, r, t) {
                queue.push_back(id);
            } else {
                report.records_dropped += 1;
            }
        }
        while let Some(id) = queue.pop_front() {
            if !self.pending.get(&id).is_some_and(|r| t.ready(r)) {
                continue;
            }
            let r = self.pending.remove(&id).expect("pending");
            for k in &r.objs {
                self.held.remove(k);
            }
            for &(o, s) in &r.objs {
                let (base, top) = self.applied.get_mut(&o).expect("admitted");
                if s > *base {
                    *top = (*top).max(s);
                }
            }
            t.apply(&r, report);
            report.records_replayed += 1;
            for &(o, s) in &r.objs {
                if let Some(&n) = self.held.get(&(o, s + 1)) {
                    queue.push_back(n);
                }
            }
        }
    }

    /// Records still pending follow a record that was lost: dropped.
    pub fn finish(self, report: &mut RecoveryReport) {
        report.records_dropped += self.pending.len() as u64;
    }

    /// Make `r` pending under number `id` if it is valid (see [`Replay`]).
    fn admit(&mut self, id: u64, r: Record, t: &Targets) -> bool {
        let in_range = |o: u64| o >= SB_OBJ || t.geo.ino_place(o).is_some();
        if !r.objs.iter().all(|&(o, _)| in_range(o)) {
            return false;
        }
        for (i, &(o, s)) in r.objs.iter().enumerate() {
            // First named: nothing of the journal applied to it yet.
            let &mut (base, top) = self.applied.entry(o).or_insert_with(|| {
                let home = t.cur(o);
                (home, home)
            });
            let applied = base < s && s <= top;
            if applied || self.held.contains_key(&(o, s)) || r.objs[..i].contains(&(o, s)) {
                return false;
            }
        }
        for &k in &r.objs {
            self.held.insert(k, id);
        }
        self.pending.insert(id, r);
        true
    }
}
