//! fsck: check an image without changing it, or repair it.
//!
//! The check loads the image and replays its journal in memory (nothing is
//! written), then checks: both superblocks' choice, every slot, chain and
//! entry block checksum and owner, that no block is claimed twice, that
//! every directory entry names a live inode of the kind it says, and that
//! only directories have entries, and (`links.rs`, e2fsck's pass 4) that
//! every live inode is named by as many entries as its link count says
//! (a directory: by one), and (e2fsck's pass 3) that every live directory
//! is reached by a walk of entries from the root and has the directory
//! naming it as its record's parent. Link count 0 with no entry (orphans) is reported
//! as a note: recovery frees them. The load derives records'
//! derived fields as recovery does (a directory's size, link count and next
//! cookie from its entries, block counts from pages: docs/FORMAT.md,
//! "Derived fields"), noting how many disagreed.
//!
//! Repair opens the image with recovery (replay, orphans freed,
//! checkpoint), drops unreadable inodes and the entries that point to
//! nothing, repairs link counts (`repair_links`: leaked inodes freed, there
//! being no `lost+found`; a detached cycle of directories broken by
//! removing the entries naming its directories, which are then leaked and
//! freed the same way; extra names of a directory removed; other counts
//! set to the entries'; a directory's parent set to its one namer),
//! checkpoints, and checks again.
//!
//! Locks: repair takes one store shard lock at a time (to count links, and
//! as the store's own calls do); `check` works on loaded maps it owns.

use std::path::Path;
use std::sync::Arc;

use std::collections::{HashMap, HashSet};

use lanefs_store::{DirEntryRecord, Errno, FileKind, Ino, InodeRecord, Result, Store, ROOT_INO};

use crate::device::{Device, FileDevice};
use crate::itable::pairs_above;
use crate::links::{finding, LinkCounter, LinkFinding, LinkRec};
use crate::object::{Entry, InodeObj};
use crate::recover::{load, open_scanning};
use crate::store::{shard, ImageConfig, ImageStore};

/// What fsck found (and, with repair, did).
#[derive(Clone, Debug, Default)]
pub struct FsckReport {
    /// No problem found, in `problems` or `links` (notes are not problems).
    pub clean: bool,
    /// Problems with the store's own structures (objects, entries, tables).
    pub problems: Vec<String>,
    /// Link counts that disagree with the entries naming the inode
    /// (e2fsck's pass 4; `links.rs`): leaked inodes, wrong counts,
    /// directories with several names; and (pass 3) directories the root
    /// does not reach, or whose record's parent is not their namer.
    pub links: Vec<String>,
    pub notes: Vec<String>,
    pub inodes: u64,
    pub directories: u64,
    pub entries: u64,
    pub data_pages: u64,
    pub records_replayed: u64,
    pub records_dropped: u64,
    /// Records of the journal's last batch a data page of which did not
    /// reach the media: the batch is not replayed (a note, not a problem).
    pub records_unlanded: u64,
    /// The most decoded journal records the replay held at once
    /// (`RecoveryReport::records_held_max`).
    pub records_held_max: u64,
    pub orphans_pending: u64,
    /// What repair changed, one line each.
    pub repaired: Vec<String>,
}

impl FsckReport {
    /// Whether the store's own structures are sound, link counts aside:
    /// what a user of the image as a plain [`Store`] (records no entry
    /// names, as the store's own tests write) can require.
    pub fn store_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Check (and with `repair`, fix) the image at `path`.
pub fn fsck(path: &Path, repair: bool) -> Result<FsckReport> {
    fsck_device(Arc::new(FileDevice::open(path)?), repair)
}

pub fn fsck_device(dev: Arc<dyn Device>, repair: bool) -> Result<FsckReport> {
    let repaired = if repair {
        repair_image(dev.clone())?
    } else {
        Vec::new()
    };
    let mut r = check(&*dev)?;
    r.repaired = repaired;
    Ok(r)
}

fn record_kind(o: &InodeObj) -> Option<FileKind> {
    InodeRecord::decode(o.rec.as_ref()?).ok().map(|r| r.kind)
}

/// Problems with one directory entry, if any.
fn entry_problem(
    lookup: &dyn Fn(Ino) -> Option<(bool, Option<FileKind>)>,
    dir: Ino,
    name: &[u8],
    v: &[u8; 17],
) -> Option<String> {
    let e = match DirEntryRecord::decode_value(name, v) {
        Ok(e) => e,
        Err(_) => {
            return Some(format!(
                "dir {dir}: entry {:?} malformed",
                String::from_utf8_lossy(name)
            ))
        }
    };
    match lookup(e.ino) {
        Some((false, Some(k))) if k == e.kind => None,
        Some((true, _)) => Some(format!(
            "dir {dir}: entry {:?} -> unreadable inode {}",
            String::from_utf8_lossy(name),
            e.ino
        )),
        Some((false, Some(k))) => Some(format!(
            "dir {dir}: entry {:?} says {:?}, inode {} is {k:?}",
            String::from_utf8_lossy(name),
            e.kind,
            e.ino
        )),
        _ => Some(format!(
            "dir {dir}: entry {:?} -> free inode {}",
            String::from_utf8_lossy(name),
            e.ino
        )),
    }
}

fn check(dev: &dyn Device) -> Result<FsckReport> {
    let l = load(dev, false, None, false)?;
    let mut r = FsckReport {
        problems: l.report.problems.clone(),
        records_replayed: l.report.records_replayed,
        records_dropped: l.report.records_dropped,
        records_unlanded: l.report.records_unlanded,
        records_held_max: l.report.records_held_max,
        orphans_pending: l.orphans_pending.len() as u64,
        ..FsckReport::default()
    };
    if let Some(marks) = &l.scan_marks {
        // What open does not read must be all zero.
        let above = pairs_above(dev, &l.sup.geo, marks)?;
        const SHOWN: usize = 16;
        for &ino in above.iter().take(SHOWN) {
            r.problems.push(format!(
                "inode {ino}: slot written above its group's high-water mark (open does not read it)"
            ));
        }
        if above.len() > SHOWN {
            r.problems.push(format!(
                "{} more slots written above their group's high-water mark",
                above.len() - SHOWN
            ));
        }
    }
    if l.torn_slots > 0 {
        r.notes.push(format!(
            "{} torn inode slots (an interrupted checkpoint; the other copy is used)",
            l.torn_slots
        ));
    }
    if l.report.records_derived > 0 {
        r.notes.push(format!(
            "{} records disagree with their entries or pages (directory size, link count, next cookie, block count: derived from them)",
            l.report.records_derived
        ));
    }
    if l.report.records_unlanded > 0 {
        r.notes.push(format!(
            "{} journal records of the last batch are not replayed: a data page they map did not reach the media before the power failed (the batch's flush never returned)",
            l.report.records_unlanded
        ));
    }
    if l.report.records_dropped > 0 {
        r.notes.push(format!(
            "{} journal records follow a lost record and are dropped",
            l.report.records_dropped
        ));
    }
    for &ino in l
        .orphans_listed
        .iter()
        .filter(|i| !l.orphans_pending.contains(i))
    {
        r.notes.push(format!(
            "orphan file lists inode {ino}, which has links or is free (stale slot)"
        ));
    }
    for &ino in &l.orphans_pending {
        r.notes.push(format!(
            "inode {ino}: link count 0, freed at the next mount"
        ));
    }
    let lookup = |ino: Ino| -> Option<(bool, Option<FileKind>)> {
        l.sup.geo.ino_place(ino)?;
        let o = l.obj(ino)?;
        if o.bad {
            return Some((true, None));
        }
        o.rec.as_ref()?;
        Some((false, record_kind(o)))
    };
    let mut links = LinkCounter::default();
    for m in &l.objs {
        for (&ino, o) in m {
            links.add(ino, o);
            if o.bad || o.rec.is_none() {
                continue;
            }
            r.inodes += 1;
            r.data_pages += o.pages.len() as u64;
            let kind = record_kind(o);
            if kind == Some(FileKind::Directory) {
                r.directories += 1;
            }
            let Some(d) = &o.dir else { continue };
            if !d.is_empty() && kind != Some(FileKind::Directory) {
                r.problems
                    .push(format!("inode {ino}: has entries but is {kind:?}"));
            }
            for (name, v) in d.entries() {
                r.entries += 1;
                if let Some(p) = entry_problem(&lookup, ino, name, v) {
                    r.problems.push(p);
                }
            }
        }
    }
    r.links = links
        .finish()
        .findings()
        .iter()
        .map(LinkFinding::describe)
        .collect();
    debug_assert!(l
        .objs
        .iter()
        .enumerate()
        .all(|(s, m)| m.keys().all(|&i| shard(i) == s)));
    r.clean = r.problems.is_empty() && r.links.is_empty();
    Ok(r)
}

fn repair_image(dev: Arc<dyn Device>) -> Result<Vec<String>> {
    // Every table read whole: pairs above a high-water mark (a corrupted
    // image) are loaded, and the open's checkpoint raises the mark.
    let store = open_scanning(
        dev,
        &ImageConfig {
            commit_interval: None,
            cache_bytes: None,
        },
        true,
    )?;
    let inner = &store.inner;
    let mut done = Vec::new();
    for &ino in &store.recovery_report().bad_objects {
        let mut m = inner.shards[shard(ino)].lock();
        let replaced = m.get_mut(&ino).map(|mut o| {
            // Its blocks stay marked in use until the next open finds them
            // unreferenced: a leak for one session, never a cross-link.
            *o = InodeObj {
                stamp: o.stamp + 1,
                dirty: true,
                home_slot: o.home_slot,
                home_stamp: u64::MAX,
                ..InodeObj::default()
            };
        });
        drop(m);
        if replaced.is_some() {
            inner.groups.free_ino(ino);
            done.push(format!("inode {ino}: unreadable, dropped"));
        }
    }
    let mut doomed = Vec::new();
    {
        let live = |ino: Ino| -> Option<(bool, Option<FileKind>)> {
            let m = inner.shards[shard(ino)].lock();
            let o = m.get(&ino)?;
            o.rec.as_ref()?;
            Some((o.bad, record_kind(o)))
        };
        type Listed = (Ino, Option<FileKind>, Vec<Entry>);
        let dirs: Vec<Listed> = inner
            .shards
            .iter()
            .flat_map(|s| {
                s.lock()
                    .iter()
                    .filter_map(|(&i, o)| {
                        o.dir
                            .as_ref()
                            .map(|d| (i, record_kind(o), d.entries().cloned().collect()))
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        for (dir, kind, entries) in dirs {
            for (name, v) in entries {
                // Entries of an inode that is not a directory (its record
                // says another kind) name nothing anyone can reach: dropped,
                // as `check` reports them.
                let problem = if kind != Some(FileKind::Directory) {
                    Some(format!("inode {dir}: has entries but is {kind:?}"))
                } else {
                    entry_problem(&live, dir, &name, &v)
                };
                if let Some(p) = problem {
                    doomed.push((dir, name, p));
                }
            }
        }
    }
    for (dir, name, why) in doomed {
        store.dir_remove(dir, &name)?;
        done.push(format!("{why}: entry removed"));
    }
    done.extend(repair_links(&store)?);
    store.checkpoint()?;
    Ok(done)
}

/// Link counts, once the dangling entries are gone (docs/FORMAT.md,
/// "fsck"). The format has no `lost+found`, so a leaked inode is freed, as
/// recovery frees an orphan; freeing a directory drops its entries, and
/// what only they named is leaked in turn (a work list, so each inode is
/// handled once). A directory named more than once keeps the entry in the
/// directory its record names as parent (else the first found) and loses
/// the others; the root loses every entry naming it. Any other wrong count
/// is set to the number of entries naming the inode. First, a directory the
/// root does not reach (a detached cycle, pass 3) loses the entries naming
/// it, all in unreachable directories, so that the leaked-inode repair
/// frees the cycle; last, a directory named once gets its namer as parent.
fn repair_links(store: &ImageStore) -> Result<Vec<String>> {
    let mut counter = LinkCounter::default();
    for s in &store.inner.shards {
        let m = s.lock();
        for (&ino, o) in m.iter() {
            counter.add(ino, o);
        }
    }
    let mut c = counter.finish();
    let recs: HashMap<Ino, LinkRec> = c.records.iter().map(|r| (r.ino, *r)).collect();
    let mut done = Vec::new();
    let mut leaked: Vec<Ino> = c
        .findings()
        .iter()
        .filter(|f| matches!(f, LinkFinding::Leaked { .. }))
        .map(LinkFinding::ino)
        .collect();
    // Pass 3: a directory no path from the root reaches is in, or hangs
    // off, a detached cycle; every directory naming it is unreachable too
    // (a reachable one would reach it). Its entries naming unreachable
    // directories are removed, which leaves each of them named by none:
    // leaked, freed below with whatever only they name.
    let mut unreached: Vec<LinkFinding> = c
        .reach_findings()
        .into_iter()
        .filter(|f| matches!(f, LinkFinding::Unreachable { .. }))
        .collect();
    unreached.sort_by_key(LinkFinding::ino);
    for f in &unreached {
        let ino = f.ino();
        let names = c.dir_names.remove(&ino).unwrap_or_default();
        for (p, name) in &names {
            store.dir_remove(*p, name)?;
        }
        let n = c.refs.entry(ino).or_default();
        *n = n.saturating_sub(names.len() as u32);
        if *n == 0 {
            leaked.push(ino);
        }
        done.push(format!("{}: its names removed", f.describe()));
    }
    let mut freed = HashSet::new();
    while let Some(ino) = leaked.pop() {
        if !freed.insert(ino) {
            continue;
        }
        let r = recs[&ino];
        if r.kind == FileKind::Directory {
            for e in store.dir_read(ino)? {
                let n = c.refs.entry(e.ino).or_default();
                *n = n.saturating_sub(1);
                if let Some(names) = c.dir_names.get_mut(&e.ino) {
                    names.retain(|(p, _)| *p != ino);
                }
                if *n == 0 && e.ino != ROOT_INO && recs.get(&e.ino).is_some_and(|r| r.nlink > 0) {
                    leaked.push(e.ino);
                }
            }
        }
        store.free_ino(ino)?;
        let f = LinkFinding::Leaked {
            ino,
            kind: r.kind,
            nlink: r.nlink,
        };
        done.push(format!("{}: freed", f.describe()));
    }
    for r in c.records.iter().filter(|r| !freed.contains(&r.ino)) {
        let refs = c.refs(r.ino);
        match finding(r, refs) {
            None | Some(LinkFinding::Leaked { .. }) => {}
            Some(f @ LinkFinding::Count { .. }) => {
                let mut rec = store.read_inode(r.ino)?.ok_or(Errno::EIO)?;
                rec.nlink = refs;
                store.write_inode(&rec)?;
                done.push(format!("{}: set to {refs}", f.describe()));
            }
            Some(f @ LinkFinding::DirNames { .. }) => {
                let mut rec = store.read_inode(r.ino)?.ok_or(Errno::EIO)?;
                let names = c.dir_names.get(&r.ino).map_or(&[][..], |v| &v[..]);
                let keep = (r.ino != ROOT_INO).then(|| {
                    names
                        .iter()
                        .position(|(p, _)| *p == rec.parent)
                        .unwrap_or(0)
                });
                for (i, (p, name)) in names.iter().enumerate() {
                    if Some(i) != keep {
                        store.dir_remove(*p, name)?;
                    }
                }
                if let Some(&(p, _)) = keep.and_then(|k| names.get(k)) {
                    if rec.parent != p {
                        rec.parent = p;
                        store.write_inode(&rec)?;
                    }
                }
                done.push(format!("{}: extra entries removed", f.describe()));
            }
            Some(LinkFinding::Unreachable { .. } | LinkFinding::Parent { .. }) => {}
        }
        // A directory left with one name (pass 3): its record's parent
        // is the directory naming it. (Named more often: set above.)
        if r.kind != FileKind::Directory || r.nlink == 0 || r.ino == ROOT_INO || refs != 1 {
            continue;
        }
        if let Some([(by, _)]) = c.dir_names.get(&r.ino).map(|v| &v[..]) {
            let mut rec = store.read_inode(r.ino)?.ok_or(Errno::EIO)?;
            if rec.parent != *by {
                let f = LinkFinding::Parent {
                    ino: r.ino,
                    parent: rec.parent,
                    by: *by,
                };
                rec.parent = *by;
                store.write_inode(&rec)?;
                done.push(format!("{}: parent set to {by}", f.describe()));
            }
        }
    }
    Ok(done)
}
