//! Loading the inode tables at open: every slot pair of every group,
//! choosing each object's slot and loading its image, chain and entry
//! blocks (claiming their blocks in the rebuilt allocator).
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

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};

use lanefs_store::{Ino, InodeRecord, Result};

use crate::alloc::Groups;
use crate::device::Device;
use crate::layout::{Geometry, BLOCK, SLOT, SLOTS_PER_BLOCK};
use crate::object::{self, InodeObj, ObjMap, SLOT_FREE, SLOT_INLINE_MAX};
use crate::store::{shard, SHARDS};

/// Bytes of inode table read at once.
const READ_BYTES: usize = 1 << 20;

/// What the inode tables hold.
pub(crate) struct Tables {
    /// Per store shard: every object with a durable slot (or two torn ones).
    pub objs: Vec<ObjMap>,
    /// Numbers whose slots are both torn or corrupt: replay decides.
    pub suspects: HashSet<Ino>,
    /// One line per problem, in inode order.
    pub problems: Vec<String>,
    /// Torn or corrupt slots beside a good one.
    pub torn_slots: u64,
}

/// One group's objects, split by store shard.
struct GroupOut {
    shards: Vec<Vec<(Ino, InodeObj)>>,
    suspects: Vec<Ino>,
    problems: Vec<String>,
    torn_slots: u64,
}

fn workers(n: usize) -> usize {
    std::thread::available_parallelism()
        .map_or(1, |p| p.get())
        .min(n)
        .max(1)
}

/// Read every inode table of `geo` into a fresh allocator, which holds
/// the blocks the objects use.
pub(crate) fn load_tables(dev: &dyn Device, geo: &Geometry) -> Result<(Tables, Groups)> {
    let n = geo.groups as usize;
    let t = workers(n);
    let groups = Groups::new(*geo);
    let tables = load_with(dev, geo, &groups, t)?;
    if t == 1 || tables.problems.is_empty() {
        return Ok((tables, groups));
    }
    let groups = Groups::new(*geo);
    let tables = load_with(dev, geo, &groups, 1)?;
    Ok((tables, groups))
}

/// Load every table with `t` threads.
fn load_with(dev: &dyn Device, geo: &Geometry, groups: &Groups, t: usize) -> Result<Tables> {
    let n = geo.groups as usize;
    let next_group = AtomicU64::new(0);
    let work = || -> Vec<(u64, Result<GroupOut>)> {
        let mut done = Vec::new();
        loop {
            let g = next_group.fetch_add(1, Ordering::Relaxed);
            if g >= geo.groups {
                return done;
            }
            done.push((g, load_group(dev, geo, groups, g)));
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
        suspects: HashSet::new(),
        problems: Vec::new(),
        torn_slots: 0,
    };
    for out in outs {
        let out = out.expect("every group loaded")?;
        for (s, v) in out.shards.into_iter().enumerate() {
            per_shard[s].push(v);
        }
        tables.suspects.extend(out.suspects);
        tables.problems.extend(out.problems);
        tables.torn_slots += out.torn_slots;
    }
    let mut objs: Vec<ObjMap> = (0..SHARDS).map(|_| ObjMap::default()).collect();
    let fill = |maps: &mut [ObjMap], parts: &mut [Vec<Vec<(Ino, InodeObj)>>]| {
        for (m, p) in maps.iter_mut().zip(parts) {
            m.reserve(p.iter().map(Vec::len).sum());
            for v in p.drain(..) {
                m.extend(v);
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

/// Load group `g`'s table.
fn load_group(dev: &dyn Device, geo: &Geometry, groups: &Groups, g: u64) -> Result<GroupOut> {
    let bs = BLOCK as u64;
    let mut out = GroupOut {
        shards: (0..SHARDS).map(|_| Vec::new()).collect(),
        suspects: Vec::new(),
        problems: Vec::new(),
        torn_slots: 0,
    };
    let inodes_per_block = SLOTS_PER_BLOCK / 2;
    let read_blocks = (READ_BYTES / BLOCK) as u64;
    let mut buf = vec![0u8; READ_BYTES.min(geo.itable_blocks as usize * BLOCK)];
    let mut blk = 0;
    while blk < geo.itable_blocks {
        let nb = read_blocks.min(geo.itable_blocks - blk);
        let table = &mut buf[..nb as usize * BLOCK];
        dev.read_at(table, (geo.group_first_block(g) + blk) * bs)?;
        for k in 0..nb * inodes_per_block {
            let ino = geo.ino_of(g, blk * inodes_per_block + k);
            let at = (2 * k) as usize * SLOT;
            if let Some(obj) = load_slot_pair(dev, groups, ino, &table[at..at + 2 * SLOT], &mut out)
            {
                out.shards[shard(ino)].push((ino, obj));
            }
        }
        blk += nb;
    }
    Ok(out)
}

/// The object of one slot pair, if either slot was ever written.
fn load_slot_pair(
    dev: &dyn Device,
    groups: &Groups,
    ino: Ino,
    pair: &[u8],
    out: &mut GroupOut,
) -> Option<InodeObj> {
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
            return None;
        }
        // Never durably written, or corrupted: replay decides.
        out.suspects.push(ino);
        return Some(InodeObj {
            bad: true,
            home_slot: 1,
            ..InodeObj::default()
        });
    };
    out.torn_slots += torn;
    let mut obj = InodeObj {
        stamp: s.stamp,
        home_slot: slot,
        ..InodeObj::default()
    };
    if s.state != SLOT_FREE {
        if let Err(why) = load_live(dev, groups, ino, &s, &mut obj) {
            out.problems.push(format!("inode {ino}: {why}"));
            obj.bad = true;
        }
    }
    Some(obj)
}

/// Read the image of a live slot into `obj`, claiming its blocks.
fn load_live(
    dev: &dyn Device,
    groups: &Groups,
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
            if next == 0 || !groups.claim(next) {
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
    for (p, b, n) in img.extents {
        if n == 0 || p.checked_add(n as u64).is_none() {
            return Err("extent malformed".into());
        }
        for k in 0..n as u64 {
            if !groups.claim(b + k) {
                return Err(format!("data block {} out of range or shared", b + k));
            }
            obj.pages.insert(p + k, b + k);
        }
    }
    if !img.dir_blocks.is_empty() {
        buf.resize(BLOCK, 0);
        let mut d = object::DirState::default();
        for b in img.dir_blocks {
            if !groups.claim(b) {
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
