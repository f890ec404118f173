//! Journal records and batches (byte layout in docs/FORMAT.md).
//!
//! One [`Record`] per store call or [`Txn`](lanefs_store::Txn): the list of
//! objects it changes, each with its new per-object stamp, and the
//! operations. A *batch* is what one group commit writes: a header at a
//! block boundary (magic, kind, sequence, length, CRC32C over header and
//! payload) followed by records. Replay orders records by stamps, not by
//! where they sit in the journal. Pure encoding; no locks, no atomics.

use lanefs_store::codec::Reader;
use lanefs_store::{Errno, Ino, InodeRecord, Result, Superblock};

use crate::crc::crc32c;
use crate::layout::{get_u32, get_u64, BLOCK, JOURNAL_BLOCKS_MAX, STAMP_LIMIT};

/// Object id of lane `l`'s usage record.
pub const USAGE_OBJ_BASE: u64 = 1 << 63;
/// Object id of the store superblock record.
pub const SB_OBJ: u64 = 1 << 62;

pub const BATCH_MAGIC: u32 = u32::from_le_bytes(*b"JBAT");
pub const BATCH_RECORDS: u32 = 1;
/// The rest of the journal is unused: the next batch is at offset 0.
pub const BATCH_WRAP: u32 = 2;
pub const BATCH_HEADER: usize = 32;
/// Most objects one record may change.
pub const RECORD_OBJS_MAX: usize = 32;

/// One change, as journaled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    PutInode(Ino, Vec<u8>),
    FreeInode(Ino),
    PutEntry(Ino, Vec<u8>, [u8; 17]),
    RemoveEntry(Ino, Vec<u8>),
    Punch(Ino, u64, u64),
    Usage(u32, i64, i64),
    /// Page `index` of `ino` lives in device block `block` (a block
    /// allocated for it), whose 4 KiB hold the CRC32C given: `Some` in
    /// format 2 (kind 9; recovery checks it for the last batch), `None` in
    /// format 1 journals (kind 7, read only).
    MapPage(Ino, u64, u64, Option<u32>),
    WriteSb(Superblock),
    /// The file's unwritten extents (pages allocated by `fallocate` that
    /// read as zeros, `start..end`, sorted, disjoint, at most
    /// [`UNWRITTEN_MAX`]) replace its list (format 4, kind 10).
    SetUnwritten(Ino, Vec<(u64, u64)>),
}

/// Most unwritten extents one file keeps in the store: one record of them
/// stays under 4 KiB. A file with more has them written as zero pages by
/// the engine (`Store::write_unwritten` answers `EOPNOTSUPP`).
pub const UNWRITTEN_MAX: usize = 250;

/// Whether `list` is a well-formed unwritten-extent list: at most
/// [`UNWRITTEN_MAX`] non-empty, sorted, disjoint ranges of pages.
pub fn unwritten_ok(list: &[(u64, u64)]) -> bool {
    list.len() <= UNWRITTEN_MAX
        && list.iter().all(|&(s, e)| s < e)
        && list.windows(2).all(|w| w[0].1 <= w[1].0)
}

impl Op {
    /// The object this operation changes.
    pub fn obj(&self) -> u64 {
        match self {
            Op::PutInode(i, _)
            | Op::FreeInode(i)
            | Op::PutEntry(i, ..)
            | Op::RemoveEntry(i, _)
            | Op::Punch(i, ..)
            | Op::MapPage(i, ..)
            | Op::SetUnwritten(i, _) => *i,
            Op::Usage(lane, ..) => {
                USAGE_OBJ_BASE | (*lane as u64 % crate::layout::USAGE_LANES as u64)
            }
            Op::WriteSb(_) => SB_OBJ,
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let u64s = |out: &mut Vec<u8>, vs: &[u64]| {
            vs.iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes()))
        };
        match self {
            Op::PutInode(i, b) => {
                out.push(1);
                u64s(out, &[*i]);
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }
            Op::FreeInode(i) => {
                out.push(2);
                u64s(out, &[*i]);
            }
            Op::PutEntry(d, n, v) => {
                out.push(3);
                u64s(out, &[*d]);
                out.push(n.len() as u8);
                out.extend_from_slice(n);
                out.extend_from_slice(v);
            }
            Op::RemoveEntry(d, n) => {
                out.push(4);
                u64s(out, &[*d]);
                out.push(n.len() as u8);
                out.extend_from_slice(n);
            }
            Op::Punch(i, s, e) => {
                out.push(5);
                u64s(out, &[*i, *s, *e]);
            }
            Op::Usage(l, b, n) => {
                out.push(6);
                out.extend_from_slice(&l.to_le_bytes());
                u64s(out, &[*b as u64, *n as u64]);
            }
            Op::MapPage(i, x, b, None) => {
                out.push(7);
                u64s(out, &[*i, *x, *b]);
            }
            Op::MapPage(i, x, b, Some(c)) => {
                out.push(9);
                u64s(out, &[*i, *x, *b]);
                out.extend_from_slice(&c.to_le_bytes());
            }
            Op::WriteSb(s) => {
                out.push(8);
                u64s(
                    out,
                    &[s.total_blocks, s.total_inodes, s.used_blocks, s.used_inodes],
                );
            }
            Op::SetUnwritten(i, list) => {
                out.push(10);
                u64s(out, &[*i]);
                out.extend_from_slice(&(list.len() as u16).to_le_bytes());
                for (a, b) in list {
                    u64s(out, &[*a, *b]);
                }
            }
        }
    }
}

/// One journal record: `(object, stamp)` pairs and the operations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub objs: Vec<(u64, u64)>,
    pub ops: Vec<Op>,
}

impl Record {
    /// Append the encoding: u32 total length, u16 objects, u16 ops,
    /// objects (u64 id, u64 stamp), ops.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        debug_assert!(self.objs.len() <= RECORD_OBJS_MAX);
        let start = out.len();
        out.extend_from_slice(&[0u8; 4]);
        out.extend_from_slice(&(self.objs.len() as u16).to_le_bytes());
        out.extend_from_slice(&(self.ops.len() as u16).to_le_bytes());
        for (o, s) in &self.objs {
            out.extend_from_slice(&o.to_le_bytes());
            out.extend_from_slice(&s.to_le_bytes());
        }
        for op in &self.ops {
            op.encode(out);
        }
        let len = (out.len() - start) as u32;
        out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    }

    /// Decode one record of a format-`version` journal from the front of
    /// `b`; returns it and its length. A page mapping must be of the
    /// version's kind (7 in format 1, 9 from format 2).
    pub fn decode(b: &[u8], version: u32) -> Result<(Record, usize)> {
        let mut r = Reader::new(b);
        let len = r.u32()? as usize;
        if len < 8 || len > b.len() {
            return Err(Errno::EUCLEAN);
        }
        let mut r = Reader::at(&b[..len], 4);
        let nobj = r.u16()? as usize;
        let nops = r.u16()? as usize;
        if nobj > RECORD_OBJS_MAX {
            return Err(Errno::EUCLEAN);
        }
        let mut objs = Vec::with_capacity(nobj);
        for _ in 0..nobj {
            let (o, stamp) = (r.u64()?, r.u64()?);
            if stamp >= STAMP_LIMIT {
                return Err(Errno::EUCLEAN);
            }
            objs.push((o, stamp));
        }
        let mut ops = Vec::with_capacity(nops.min(64));
        for _ in 0..nops {
            let op = match r.u8()? {
                1 => {
                    let i = r.u64()?;
                    let n = r.u32()? as usize;
                    let rec = r.take(n)?;
                    // The record must be one the store could have written
                    // (replay would otherwise install garbage as live).
                    match InodeRecord::decode(rec) {
                        Ok(x) if x.ino == i => {}
                        _ => return Err(Errno::EUCLEAN),
                    }
                    Op::PutInode(i, rec.to_vec())
                }
                2 => Op::FreeInode(r.u64()?),
                3 => {
                    let d = r.u64()?;
                    let n = r.u8()? as usize;
                    let name = r.take(n)?.to_vec();
                    let v: [u8; 17] = r.take(17)?.try_into().map_err(|_| Errno::EUCLEAN)?;
                    Op::PutEntry(d, name, v)
                }
                4 => {
                    let d = r.u64()?;
                    let n = r.u8()? as usize;
                    Op::RemoveEntry(d, r.take(n)?.to_vec())
                }
                5 => Op::Punch(r.u64()?, r.u64()?, r.u64()?),
                6 => Op::Usage(r.u32()?, r.u64()? as i64, r.u64()? as i64),
                7 if version < 2 => Op::MapPage(r.u64()?, r.u64()?, r.u64()?, None),
                9 if version >= 2 => Op::MapPage(r.u64()?, r.u64()?, r.u64()?, Some(r.u32()?)),
                8 => Op::WriteSb(Superblock {
                    total_blocks: r.u64()?,
                    total_inodes: r.u64()?,
                    used_blocks: r.u64()?,
                    used_inodes: r.u64()?,
                }),
                10 if version >= 4 => {
                    let i = r.u64()?;
                    let n = r.u16()? as usize;
                    let mut list = Vec::with_capacity(n.min(UNWRITTEN_MAX));
                    for _ in 0..n {
                        list.push((r.u64()?, r.u64()?));
                    }
                    if !unwritten_ok(&list) {
                        return Err(Errno::EUCLEAN);
                    }
                    Op::SetUnwritten(i, list)
                }
                _ => return Err(Errno::EUCLEAN),
            };
            // Every op must belong to one of the record's objects.
            if !objs.iter().any(|(o, _)| *o == op.obj()) {
                return Err(Errno::EUCLEAN);
            }
            ops.push(op);
        }
        if r.pos() != len {
            return Err(Errno::EUCLEAN);
        }
        Ok((Record { objs, ops }, len))
    }
}

/// Build a batch: header + payload, padded to whole blocks.
pub fn encode_batch(kind: u32, seq: u64, payload: &[u8]) -> Vec<u8> {
    let total = (BATCH_HEADER + payload.len()).div_ceil(BLOCK) * BLOCK;
    let mut b = vec![0u8; total];
    b[0..4].copy_from_slice(&BATCH_MAGIC.to_le_bytes());
    b[4..8].copy_from_slice(&kind.to_le_bytes());
    b[8..16].copy_from_slice(&seq.to_le_bytes());
    b[16..24].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    b[BATCH_HEADER..BATCH_HEADER + payload.len()].copy_from_slice(payload);
    let c = crc32c(&[&b[..24], payload]);
    b[24..28].copy_from_slice(&c.to_le_bytes());
    b
}

/// A batch header read back: `(kind, payload length)` if it is the batch
/// with sequence `seq`; the payload's CRC is checked by [`batch_payload_ok`].
pub fn decode_batch_header(h: &[u8], seq: u64) -> Option<(u32, usize)> {
    if h.len() < BATCH_HEADER || get_u32(h, 0) != BATCH_MAGIC || get_u64(h, 8) != seq {
        return None;
    }
    let kind = get_u32(h, 4);
    if kind != BATCH_RECORDS && kind != BATCH_WRAP {
        return None;
    }
    // No batch is longer than the largest journal: a corrupt length must
    // not become an allocation or an overflowing offset.
    let len = get_u64(h, 16);
    if len > JOURNAL_BLOCKS_MAX * BLOCK as u64 {
        return None;
    }
    Some((kind, len as usize))
}

pub fn batch_payload_ok(h: &[u8], payload: &[u8]) -> bool {
    get_u32(h, 24) == crc32c(&[&h[..24], payload])
}

/// Decode every record of a format-`version` payload; `EUCLEAN` if any is
/// malformed.
pub fn decode_records(mut payload: &[u8], version: u32) -> Result<Vec<Record>> {
    let mut out = Vec::new();
    while !payload.is_empty() {
        let (r, n) = Record::decode(payload, version)?;
        out.push(r);
        payload = &payload[n..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::FORMAT_VERSION;

    fn record_of(ino: Ino) -> Vec<u8> {
        let t = lanefs_store::Timespec::default();
        InodeRecord {
            ino,
            generation: 1,
            kind: lanefs_store::FileKind::Regular,
            perm: 0o644,
            nlink: 1,
            atime: t,
            mtime: t,
            ctime: t,
            btime: t,
            ..InodeRecord::default()
        }
        .encode()
    }

    #[test]
    fn put_inode_with_a_bad_record_does_not_decode() {
        for bytes in [vec![1, 2, 3], record_of(6)] {
            let rec = Record {
                objs: vec![(5, 1)],
                ops: vec![Op::PutInode(5, bytes)],
            };
            let mut b = Vec::new();
            rec.encode_into(&mut b);
            assert!(decode_records(&b, FORMAT_VERSION).is_err());
        }
    }

    #[test]
    fn batch_header_rejects_lengths_past_any_journal() {
        let mut h = encode_batch(BATCH_RECORDS, 3, b"x");
        h[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(decode_batch_header(&h, 3), None);
    }

    #[test]
    fn every_op_kind_roundtrips_and_truncations_fail() {
        let ops = vec![
            Op::PutInode(5, record_of(5)),
            Op::FreeInode(5),
            Op::PutEntry(5, b"name".to_vec(), [7; 17]),
            Op::RemoveEntry(5, b"gone".to_vec()),
            Op::Punch(5, 1, u64::MAX),
            Op::MapPage(5, 9, 1234, Some(0xdead_beef)),
            Op::SetUnwritten(5, vec![(0, 3), (8, u64::MAX)]),
            Op::SetUnwritten(5, Vec::new()),
            Op::Usage(3, -2, 1),
            Op::WriteSb(Superblock {
                total_blocks: 1,
                total_inodes: 2,
                used_blocks: 3,
                used_inodes: 4,
            }),
        ];
        let rec = Record {
            objs: vec![(5, 10), (USAGE_OBJ_BASE | 3, 2), (SB_OBJ, 7)],
            ops,
        };
        let mut b = Vec::new();
        rec.encode_into(&mut b);
        rec.encode_into(&mut b);
        let back = decode_records(&b, FORMAT_VERSION).unwrap();
        assert_eq!(back, vec![rec.clone(), rec.clone()]);
        assert!(
            decode_records(&b, 1).is_err(),
            "format 1 has no checksummed mappings"
        );
        assert!(
            decode_records(&b, 3).is_err(),
            "format 3 has no unwritten extents"
        );
        let one = b.len() / 2;
        for n in 1..one {
            assert!(decode_records(&b[..n], FORMAT_VERSION).is_err(), "len {n}");
        }
        let batch = encode_batch(BATCH_RECORDS, 42, &b);
        assert_eq!(batch.len() % BLOCK, 0);
        let (kind, len) = decode_batch_header(&batch, 42).unwrap();
        assert_eq!((kind, len), (BATCH_RECORDS, b.len()));
        assert!(batch_payload_ok(
            &batch,
            &batch[BATCH_HEADER..BATCH_HEADER + len]
        ));
        assert!(decode_batch_header(&batch, 43).is_none(), "wrong sequence");
        let mut torn = batch.clone();
        torn[BATCH_HEADER + 5] ^= 0x40;
        assert!(!batch_payload_ok(
            &torn,
            &torn[BATCH_HEADER..BATCH_HEADER + len]
        ));
    }

    #[test]
    fn an_op_outside_the_records_objects_is_rejected() {
        let rec = Record {
            objs: vec![(5, 1)],
            ops: vec![Op::FreeInode(6)],
        };
        let mut b = Vec::new();
        rec.encode_into(&mut b);
        assert_eq!(Record::decode(&b, FORMAT_VERSION), Err(Errno::EUCLEAN));
    }

    #[test]
    fn format_1_mappings_decode_only_in_format_1() {
        let rec = Record {
            objs: vec![(5, 1)],
            ops: vec![Op::MapPage(5, 0, 77, None)],
        };
        let mut b = Vec::new();
        rec.encode_into(&mut b);
        assert_eq!(decode_records(&b, 1).unwrap(), vec![rec]);
        assert!(decode_records(&b, FORMAT_VERSION).is_err());
    }
}
