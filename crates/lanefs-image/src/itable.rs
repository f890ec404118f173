//! Loading the inode tables at open: every slot pair of every group below
//! the group's high-water mark (the whole table when there is none to
//! trust: a format 1 or 2 image, a superblock copy that fails its checks,
//! fsck --repair), choosing each object's slot and loading its image,
//! chain and entry blocks (claiming their blocks in the rebuilt
//! allocator). The pairs above the mark are all zero (never written) and
//! are not read: open costs what the image uses, not its capacity.
//!
//! Groups are independent (an inode's slots lie in its group's table), so
//! they are loaded by up to `available_parallelism()` threads under
//! `std::thread::scope`, each taking the next group from an atomic counter
//! (`next_group`, Relaxed: it only hands out work; the results travel back
//! through the scope's joins). A table is read `READ_BYTES` at a time. Each
//! group's objects come back split by store shard, and the shard maps are
//! then filled in parallel, one thread per set of shards, in group order
//! (so problems and maps do not depend on thread timing). The only shared
//! state a worker touches is the allocator's group mutexes (`claim`),
//! leaves taken one at a time.
//!
//! Which of two objects claiming one block wins (the other is bad) must not
//! depend on timing either: the sequential order (lowest inode first)
//! decides. Without a failed image load no claim was refused, so the
//! claims are the same in any order; with one (a corrupted image only), the
//! tables are loaded again on one thread with a fresh allocator.
//!
//! Under a memory budget the load streams: a worker keeps an object only if
//! recovery needs it (bad, suspect, a torn slot to rewrite, link count 0 or
//! a reservation to free, a record whose derived fields disagree) or while
//! the objects kept so far fit the budget (`kept_bytes`, an atomic
//! fetch-add, Relaxed: it only rations; which clean objects stay does not
//! change any result). The others are dropped after their blocks are
//! claimed, leaving a bit in [`Dropped`] (and their counts), so that replay
//! reads back the ones its records touch and the free-number and counter
//! rebuild knows the rest.
//!
//! [`read_home`] reads one object back from its home after open, for the
//! store's cache (`store_cache.rs`), with the same decoding.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};

use lanefs_store::{Ino, InodeRecord, Result};

use crate::alloc::{set_bit_range, Groups};
use crate::cache::{ObjMap, PER_OBJECT_BYTES};
use crate::device::Device;
use crate::layout::{Geometry, BLOCK, SLOT, SLOTS_PER_BLOCK};
use crate::object::{self, InodeObj, SLOT_FREE, SLOT_INLINE_MAX};
use crate::recover::derived_record;
use crate::store::{shard, SHARDS};

/// Bytes of inode table read at once.
const READ_BYTES: usize = 1 << 20;

/// Objects dropped while loading under a budget: one bit per inode number
/// of each group, and what they count.
#[derive(Default)]
pub(crate) struct Dropped {
    /// Per group: dropped (clean, readable from its home).
    pub bits: Vec<Vec<u64>>,
    /// Per group: dropped and live (its number is not free).
    pub live: Vec<Vec<u64>>,
    pub live_count: u64,
    pub pages: u64,
    /// Their homes' entry and chain blocks.
    pub meta: u64,
    /// Per group: both slots all zero (never written; kept whatever the
    /// budget, for the store: `store_cache.rs`).
    pub never_written: Vec<Vec<u64>>,
}

impl Dropped {
    fn at(geo: &Geometry, ino: Ino) -> Option<(usize, usize, u64)> {
        let (g, i) = geo.ino_place(ino)?;
        Some((g as usize, (i / 64) as usize, 1 << (i % 64)))
    }

    fn test(v: &[Vec<u64>], geo: &Geometry, ino: Ino) -> bool {
        Dropped::at(geo, ino).is_some_and(|(g, w, m)| v.get(g).is_some_and(|x| x[w] & m != 0))
    }

    pub fn is_dropped(&self, geo: &Geometry, ino: Ino) -> bool {
        Dropped::test(&self.bits, geo, ino)
    }

    /// `ino` (dropped) was read back as `obj`: it no longer counts here.
    pub fn take_back(&mut self, geo: &Geometry, ino: Ino, obj: &InodeObj) {
        if let Some((g, w, m)) = Dropped::at(geo, ino) {
            if let Some(x) = self.bits.get_mut(g) {
                x[w] &= !m;
            }
            if let Some(x) = self.live.get_mut(g) {
                x[w] &= !m;
            }
        }
        self.live_count -= obj.rec.is_some() as u64;
        self.pages -= obj.allocated();
        self.meta -= obj.home_blocks.len() as u64;
    }
}

/// What the inode tables hold.
pub(crate) struct Tables {
    /// Per store shard: every object with a durable slot (or two torn
    /// ones), but those dropped under a budget.
    pub objs: Vec<ObjMap>,
    pub dropped: Dropped,
    /// Numbers whose slots are both torn or corrupt: replay decides.
    pub suspects: HashSet<Ino>,
    /// One line per problem, in inode order.
    pub problems: Vec<String>,
    /// Torn or corrupt slots beside a good one.
    pub torn_slots: u64,
    /// Per group: one above the highest inode index whose slot pair is not
    /// all zero (0: none) among the pairs read.
    pub seen: Vec<u64>,
}

/// One group's objects, split by store shard.
struct GroupOut {
    shards: Vec<Vec<(Ino, InodeObj)>>,
    dropped: Vec<u64>,
    dropped_live: Vec<u64>,
    dropped_live_count: u64,
    dropped_pages: u64,
    dropped_meta: u64,
    never_written: Vec<u64>,
    suspects: Vec<Ino>,
    problems: Vec<String>,
    torn_slots: u64,
    seen: u64,
}

fn workers(n: usize) -> usize {
    std::thread::available_parallelism()
        .map_or(1, |p| p.get())
        .min(n)
        .max(1)
}

/// Read the inode tables of `geo` into a fresh allocator, which holds the
/// blocks the objects use: each group's pairs below its mark in `marks`
/// (`None`: every pair). Keep at most about `budget` bytes of objects
/// recovery does not need (`None`: keep all).
pub(crate) fn load_tables(
    dev: &dyn Device,
    geo: &Geometry,
    budget: Option<u64>,
    marks: Option<&[u64]>,
) -> Result<(Tables, Groups)> {
    let n = geo.groups as usize;
    let limits: Vec<u64> = match marks {
        Some(m) => m.iter().map(|&x| x.min(geo.inodes_per_group)).collect(),
        None => vec![geo.inodes_per_group; n],
    };
    let used = limits.iter().filter(|&&l| l > 0).count();
    let t = workers(used);
    let groups = Groups::new(*geo);
    let tables = load_with(dev, geo, &groups, t, budget, &limits)?;
    if t == 1 || tables.problems.is_empty() {
        return Ok((tables, groups));
    }
    drop(tables);
    let groups = Groups::new(*geo);
    let tables = load_with(dev, geo, &groups, 1, budget, &limits)?;
    Ok((tables, groups))
}

/// Load every table, group `g` below `limits[g]`, with `t` threads.
fn load_with(
    dev: &dyn Device,
    geo: &Geometry,
    groups: &Groups,
    t: usize,
    budget: Option<u64>,
    limits: &[u64],
) -> Result<Tables> {
    let n = geo.groups as usize;
    let next_group = AtomicU64::new(0);
    let kept_bytes = AtomicU64::new(0);
    let work = || -> Vec<(u64, Result<GroupOut>)> {
        let mut done = Vec::new();
        loop {
            let g = next_group.fetch_add(1, Ordering::Relaxed);
            if g >= geo.groups {
                return done;
            }
            let keep = |o: &InodeObj| match budget {
                None => true,
                Some(b) => {
                    let size = o.mem_bytes() + PER_OBJECT_BYTES;
                    let prev = kept_bytes.fetch_add(size, Ordering::Relaxed);
                    if needed_by_recovery(o) || prev + size <= b {
                        return true;
                    }
                    kept_bytes.fetch_sub(size, Ordering::Relaxed);
                    false
                }
            };
            done.push((
                g,
                load_group(dev, geo, groups, g, limits[g as usize], &keep),
            ));
        }
    };
    let mut outs: Vec<Option<Result<GroupOut>>> = (0..n).map(|_| None).collect();
    let finished: Vec<(u64, Result<GroupOut>)> = if t == 1 {
        work()
    } else {
        std::thread::scope(|sc| {
            let hs: Vec<_> = (0..t).map(|_| sc.spawn(work)).collect();
            hs.into_iter()
                .flat_map(|h| h.join().expect("table loader panicked"))
                .collect()
        })
    };
    for (g, r) in finished {
        outs[g as usize] = Some(r);
    }
    let mut per_shard: Vec<Vec<Vec<(Ino, InodeObj)>>> =
        (0..SHARDS).map(|_| Vec::with_capacity(n)).collect();
    let mut tables = Tables {
        objs: Vec::new(),
        dropped: Dropped::default(),
        suspects: HashSet::new(),
        problems: Vec::new(),
        torn_slots: 0,
        seen: Vec::with_capacity(n),
    };
    for out in outs {
        let out = out.expect("every group loaded")?;
        for (s, v) in out.shards.into_iter().enumerate() {
            per_shard[s].push(v);
        }
        tables.dropped.bits.push(out.dropped);
        tables.dropped.live.push(out.dropped_live);
        tables.dropped.live_count += out.dropped_live_count;
        tables.dropped.pages += out.dropped_pages;
        tables.dropped.meta += out.dropped_meta;
        tables.dropped.never_written.push(out.never_written);
        tables.suspects.extend(out.suspects);
        tables.problems.extend(out.problems);
        tables.torn_slots += out.torn_slots;
        tables.seen.push(out.seen);
    }
    let mut objs: Vec<ObjMap> = (0..SHARDS).map(|_| ObjMap::default()).collect();
    let fill = |maps: &mut [ObjMap], parts: &mut [Vec<Vec<(Ino, InodeObj)>>]| {
        for (m, p) in maps.iter_mut().zip(parts) {
            m.reserve(p.iter().map(Vec::len).sum());
            for v in p.drain(..) {
                for (ino, o) in v {
                    m.insert(ino, o);
                }
            }
        }
    };
    let chunk = SHARDS.div_ceil(t.min(SHARDS));
    std::thread::scope(|sc| {
        for (maps, parts) in objs.chunks_mut(chunk).zip(per_shard.chunks_mut(chunk)) {
            sc.spawn(move || fill(maps, parts));
        }
    });
    tables.objs = objs;
    Ok(tables)
}

/// Objects recovery itself changes or reports, kept whatever the budget:
/// bad or suspect, a home to rewrite, link count 0 or a reservation (orphan
/// processing), derived fields that disagree (`derive_records`).
fn needed_by_recovery(o: &InodeObj) -> bool {
    let reservation =
        o.rec.is_none() && (!o.pages.is_empty() || o.dir.as_ref().is_some_and(|d| !d.is_empty()));
    !o.evictable() || o.nlink() == Some(0) || reservation || derived_record(o).is_some()
}

/// Load group `g`'s table below inode index `limit` (a multiple of 4:
/// whole table blocks), keeping the objects `keep` says. The numbers at
/// and above `limit` are never written.
fn load_group(
    dev: &dyn Device,
    geo: &Geometry,
    groups: &Groups,
    g: u64,
    limit: u64,
    keep: &dyn Fn(&InodeObj) -> bool,
) -> Result<GroupOut> {
    let bs = BLOCK as u64;
    let words = geo.inodes_per_group.div_ceil(64) as usize;
    let mut out = GroupOut {
        shards: (0..SHARDS).map(|_| Vec::new()).collect(),
        dropped: vec![0; words],
        dropped_live: vec![0; words],
        dropped_live_count: 0,
        dropped_pages: 0,
        dropped_meta: 0,
        never_written: vec![0; words],
        suspects: Vec::new(),
        problems: Vec::new(),
        torn_slots: 0,
        seen: 0,
    };
    let inodes_per_block = SLOTS_PER_BLOCK / 2;
    let table_blocks = limit.div_ceil(inodes_per_block).min(geo.itable_blocks);
    set_bit_range(
        &mut out.never_written,
        table_blocks * inodes_per_block,
        geo.inodes_per_group,
    );
    let read_blocks = (READ_BYTES / BLOCK) as u64;
    let mut buf = vec![0u8; READ_BYTES.min(table_blocks as usize * BLOCK)];
    let mut blk = 0;
    let claim = |b: u64| groups.claim(b);
    while blk < table_blocks {
        let nb = read_blocks.min(table_blocks - blk);
        let table = &mut buf[..nb as usize * BLOCK];
        dev.read_at(table, (geo.group_first_block(g) + blk) * bs)?;
        for k in 0..nb * inodes_per_block {
            let index = blk * inodes_per_block + k;
            let ino = geo.ino_of(g, index);
            let at = (2 * k) as usize * SLOT;
            let pair = decode_pair(dev, ino, &table[at..at + 2 * SLOT], &claim);
            if pair.suspect {
                out.suspects.push(ino);
            }
            out.torn_slots += pair.torn;
            out.problems.extend(pair.problem);
            let (w, m) = ((index / 64) as usize, 1u64 << (index % 64));
            let Some(mut obj) = pair.obj else {
                out.never_written[w] |= m;
                continue;
            };
            out.seen = index + 1;
            if pair.torn > 0 && !obj.bad && !pair.suspect {
                // Rewritten by the open's checkpoint, so that a torn slot
                // seen later (`read_home`) is always corruption.
                obj.home_stamp = u64::MAX;
                obj.dirty = true;
            }
            if keep(&obj) {
                out.shards[shard(ino)].push((ino, obj));
            } else {
                out.dropped[w] |= m;
                if obj.rec.is_some() {
                    out.dropped_live[w] |= m;
                    out.dropped_live_count += 1;
                }
                out.dropped_pages += obj.allocated();
                out.dropped_meta += obj.home_blocks.len() as u64;
            }
        }
        blk += nb;
    }
    Ok(out)
}

/// The inode numbers whose slot pair is not all zero at or above their
/// group's mark in `marks` (fsck: open does not read them).
pub(crate) fn pairs_above(dev: &dyn Device, geo: &Geometry, marks: &[u64]) -> Result<Vec<Ino>> {
    let inodes_per_block = SLOTS_PER_BLOCK / 2;
    let read_blocks = (READ_BYTES / BLOCK) as u64;
    let mut buf = vec![0u8; READ_BYTES.min(geo.itable_blocks as usize * BLOCK)];
    let mut found = Vec::new();
    for g in 0..geo.groups {
        let mut blk = marks[g as usize].div_ceil(inodes_per_block);
        while blk < geo.itable_blocks {
            let nb = read_blocks.min(geo.itable_blocks - blk);
            let table = &mut buf[..nb as usize * BLOCK];
            dev.read_at(table, (geo.group_first_block(g) + blk) * BLOCK as u64)?;
            for (k, pair) in table.chunks(2 * SLOT).enumerate() {
                if pair.iter().any(|&b| b != 0) {
                    found.push(geo.ino_of(g, blk * inodes_per_block + k as u64));
                }
            }
            blk += nb;
        }
    }
    Ok(found)
}

/// One slot pair, decoded.
struct Pair {
    /// `None`: neither slot was ever written.
    obj: Option<InodeObj>,
    /// Torn or corrupt slots.
    torn: u64,
    /// Both slots torn or corrupt: replay decides.
    suspect: bool,
    problem: Option<String>,
}

/// The object of one slot pair: the newer valid slot, its image read and
/// its blocks passed to `claim` (refused: the object is bad).
fn decode_pair(dev: &dyn Device, ino: Ino, pair: &[u8], claim: &dyn Fn(u64) -> bool) -> Pair {
    let a = object::decode_slot(&pair[..SLOT], ino);
    let b = object::decode_slot(&pair[SLOT..], ino);
    let torn = a.is_err() as u64 + b.is_err() as u64;
    let chosen = match (a, b) {
        (Ok(Some(x)), Ok(Some(y))) => Some(if y.stamp > x.stamp { (1, y) } else { (0, x) }),
        (Ok(Some(x)), _) => Some((0, x)),
        (_, Ok(Some(y))) => Some((1, y)),
        _ => None,
    };
    let Some((slot, s)) = chosen else {
        if torn == 0 {
            return Pair {
                obj: None,
                torn: 0,
                suspect: false,
                problem: None,
            };
        }
        // Never durably written, or corrupted: replay decides.
        return Pair {
            obj: Some(InodeObj {
                bad: true,
                home_slot: 1,
                home_stamp: u64::MAX,
                ..InodeObj::default()
            }),
            torn: 0,
            suspect: true,
            problem: None,
        };
    };
    let mut obj = InodeObj {
        stamp: s.stamp,
        home_stamp: s.stamp,
        home_slot: slot,
        ..InodeObj::default()
    };
    let mut problem = None;
    if s.state != SLOT_FREE {
        if let Err(why) = load_live(dev, claim, ino, &s, &mut obj) {
            problem = Some(format!("inode {ino}: {why}"));
            obj.bad = true;
        }
    }
    Pair {
        obj: Some(obj),
        torn,
        suspect: false,
        problem,
    }
}

/// Read the object of `ino` back from its home after open (its blocks are
/// already in use in the allocator; they are only range-checked). Any torn
/// or corrupt slot, chain or entry block makes it bad: open rewrites torn
/// slots, so while the store runs one is corruption. `Err`: the slots
/// could not be read (nothing learnt; a later call tries again); a failed
/// read of a chain or entry block makes the object bad, as at open.
pub(crate) fn read_home(dev: &dyn Device, geo: &Geometry, ino: Ino) -> Result<InodeObj> {
    let mut pair = vec![0u8; 2 * SLOT];
    dev.read_at(&mut pair, geo.slot_offset(ino, 0))?;
    let in_range = |b: u64| geo.data_block_group(b).is_some();
    let p = decode_pair(dev, ino, &pair, &in_range);
    let mut obj = p.obj.unwrap_or_default();
    if p.torn > 0 || p.suspect || p.problem.is_some() {
        obj.bad = true;
    }
    Ok(obj)
}

/// Read the image of a live slot into `obj`, claiming its blocks.
fn load_live(
    dev: &dyn Device,
    claim: &dyn Fn(u64) -> bool,
    ino: Ino,
    s: &object::Slot<'_>,
    obj: &mut InodeObj,
) -> std::result::Result<(), String> {
    let bs = BLOCK as u64;
    let mut buf = Vec::new();
    let chained;
    let image: &[u8] = if s.image_len <= s.inline.len() {
        s.inline
    } else {
        let mut image = s.inline.to_vec();
        let mut next = s.chain_head;
        buf.resize(BLOCK, 0);
        while image.len() < s.image_len {
            if next == 0 || !claim(next) {
                return Err(format!(
                    "chain block {next} missing, out of range or shared"
                ));
            }
            obj.home_blocks.push(next);
            dev.read_at(&mut buf, next * bs)
                .map_err(|e| format!("read chain block: {e}"))?;
            let (n, payload) = object::decode_chain(&buf, ino, s.stamp)
                .map_err(|_| format!("chain block {next} corrupt"))?;
            image.extend_from_slice(payload);
            next = n;
        }
        chained = image;
        &chained
    };
    if image.len() != s.image_len || (s.image_len <= SLOT_INLINE_MAX && s.chain_head != 0) {
        return Err("image length mismatch".into());
    }
    let img = object::decode_image(image).map_err(|_| "image malformed".to_string())?;
    if !img.rec.is_empty() {
        match InodeRecord::decode(&img.rec) {
            Ok(r) if r.ino == ino => {}
            _ => return Err("inode record malformed".into()),
        }
        obj.rec = Some(img.rec);
    }
    obj.unwritten = img.unwritten;
    for (p, b, n) in img.extents {
        if n == 0 || p.checked_add(n as u64).is_none() {
            return Err("extent malformed".into());
        }
        for k in 0..n as u64 {
            if !claim(b + k) {
                return Err(format!("data block {} out of range or shared", b + k));
            }
            obj.pages.insert(p + k, b + k);
        }
    }
    if !img.dir_blocks.is_empty() {
        buf.resize(BLOCK, 0);
        let mut d = object::DirState::default();
        for b in img.dir_blocks {
            if !claim(b) {
                return Err(format!("entry block {b} out of range or shared"));
            }
            obj.home_blocks.push(b);
            dev.read_at(&mut buf, b * bs)
                .map_err(|e| format!("read entry block: {e}"))?;
            let entries =
                object::decode_dirent(&buf, ino).map_err(|_| format!("entry block {b} corrupt"))?;
            d.push_loaded(entries, b);
        }
        obj.dir = Some(Box::new(d));
    }
    Ok(())
}
