//! Full consistency check (an online fsck): syncs, then walks the store
//! from the root and compares what it finds with every record, counter and
//! the orphan table. Takes no lock beyond what `sync` and the store take;
//! run it when the file system is quiet for exact results.

use std::collections::{HashMap, HashSet, VecDeque};

use lanefs_store::{FileKind, Ino, InodeRecord, ROOT_INO};

use crate::fs::FsInner;
use crate::icache::State;
use crate::sync::Ordering;
use crate::{Fs, DIRENT_SIZE};

/// The inode cache's counters and life words, on a quiet file system:
/// `cached_inodes` equals the hashed inodes; no counted reference is left;
/// every hashed inode that nothing pins is on the LRU (else the budget
/// could never reclaim it); the LRU holds no more entries than inodes.
fn check_inode_cache(fs: &FsInner, bad: &mut Vec<String>) {
    let hashed = fs.icache.len() as i64;
    let counted = fs.cached_inodes.sum();
    if counted != hashed {
        bad.push(format!(
            "cached_inodes {counted}, but {hashed} inodes hashed"
        ));
    }
    let mut on_lru = 0i64;
    fs.icache.for_each(&mut |inode| {
        let life = &inode.life;
        if life.state() != State::Live {
            bad.push(format!(
                "inode {}: hashed but {:?}",
                inode.ino,
                life.state()
            ));
        }
        if life.refs() != 0 {
            bad.push(format!(
                "inode {}: {} references leaked",
                inode.ino,
                life.refs()
            ));
        }
        let m = inode.meta.lock();
        let parent = inode.parent.load(crate::sync::Ordering::Acquire);
        if parent != m.rec.parent {
            bad.push(format!(
                "inode {}: parent copy {parent}, record's {}",
                inode.ino, m.rec.parent
            ));
        }
        let opens = fs.opens.open_count(inode);
        if opens < 0 {
            bad.push(format!("inode {}: open count {opens}", inode.ino));
        }
        if !m.freed && m.rec.nlink == 0 && m.lookups == 0 && opens == 0 {
            bad.push(format!(
                "inode {}: unlinked, neither looked up nor open, but not freed (leaked)",
                inode.ino
            ));
        }
        let pinned = m.lookups != 0 || opens != 0 || m.rec.nlink == 0;
        if life.on_lru() {
            on_lru += 1;
        } else if !pinned {
            bad.push(format!(
                "inode {}: unreferenced but not on the LRU",
                inode.ino
            ));
        }
    });
    // Every other entry is a freed inode's, counted by its free.
    let lru = fs.lru.len() as i64;
    let dead = fs.lru_dead.sum();
    if lru != on_lru + dead {
        bad.push(format!(
            "LRU holds {lru} entries, {on_lru} hashed inodes marked ON_LRU and {dead} freed ones counted"
        ));
    }
}

impl Fs {
    /// Full consistency check of the store after a sync: link counts,
    /// dangling entries, parents, directory sizes, block and inode
    /// counters, orphans, leaks. Returns every problem found.
    pub fn check(&self) -> std::result::Result<(), Vec<String>> {
        let fs = &self.inner;
        let mut bad = Vec::new();
        // The store's entries are read below: a volatile store's are in
        // the loaded indexes until they are dropped.
        fs.unload_dirs();
        if let Err(e) = fs.sync_all() {
            return Err(vec![format!("sync failed: {e}")]);
        }
        let store = &*fs.store;
        let mut recs: HashMap<Ino, InodeRecord> = HashMap::new();
        match store.list_inodes() {
            Ok(list) => {
                for ino in list {
                    match store.read_inode(ino) {
                        Ok(Some(r)) => {
                            recs.insert(ino, r);
                        }
                        Ok(None) => bad.push(format!("inode {ino} listed but unreadable")),
                        Err(e) => bad.push(format!("inode {ino}: {e}")),
                    }
                }
            }
            Err(e) => return Err(vec![format!("cannot list inodes: {e}")]),
        }
        let mut links: HashMap<Ino, u32> = HashMap::new();
        let mut subdirs: HashMap<Ino, u32> = HashMap::new();
        let mut seen_dirs = HashSet::new();
        let mut queue = VecDeque::from([ROOT_INO]);
        while let Some(dir) = queue.pop_front() {
            if !seen_dirs.insert(dir) {
                bad.push(format!("directory {dir} reachable twice"));
                continue;
            }
            let entries = match store.dir_read(dir) {
                Ok(e) => e,
                Err(e) => {
                    bad.push(format!("directory {dir}: {e}"));
                    continue;
                }
            };
            let mut cookies = HashSet::new();
            for e in &entries {
                let name = String::from_utf8_lossy(&e.name);
                if !cookies.insert(e.cookie) {
                    bad.push(format!(
                        "dir {dir}: duplicate cookie {} at {name:?}",
                        e.cookie
                    ));
                }
                let Some(r) = recs.get(&e.ino) else {
                    bad.push(format!(
                        "dir {dir}: entry {name:?} -> missing inode {}",
                        e.ino
                    ));
                    continue;
                };
                if r.kind != e.kind {
                    bad.push(format!(
                        "dir {dir}: entry {name:?} kind {:?} != inode {:?}",
                        e.kind, r.kind
                    ));
                }
                *links.entry(e.ino).or_default() += 1;
                if r.kind == FileKind::Directory {
                    *subdirs.entry(dir).or_default() += 1;
                    if r.parent != dir {
                        bad.push(format!(
                            "dir {}: parent {} but found in {dir}",
                            e.ino, r.parent
                        ));
                    }
                    queue.push_back(e.ino);
                }
            }
            if let Some(r) = recs.get(&dir) {
                if r.size != DIRENT_SIZE * (2 + entries.len() as u64) {
                    bad.push(format!(
                        "dir {dir}: size {} with {} entries",
                        r.size,
                        entries.len()
                    ));
                }
                if let Some(cookie) = entries.iter().map(|e| e.cookie).max() {
                    if cookie >= r.next_cookie {
                        bad.push(format!(
                            "dir {dir}: cookie {cookie} >= next_cookie {}",
                            r.next_cookie
                        ));
                    }
                }
            }
        }
        let orphans: HashSet<Ino> = fs.orphans.list().into_iter().collect();
        let mut used_blocks = 0u64;
        for (ino, r) in &recs {
            // Saturating: corrupt records must give a report, not a panic.
            used_blocks = used_blocks.saturating_add(r.blocks);
            let expect = if r.kind == FileKind::Directory {
                if seen_dirs.contains(ino) {
                    2 + subdirs.get(ino).copied().unwrap_or(0)
                } else {
                    0
                }
            } else {
                links.get(ino).copied().unwrap_or(0)
            };
            if r.nlink != expect {
                bad.push(format!(
                    "inode {ino} ({:?}): nlink {} but {expect} links",
                    r.kind, r.nlink
                ));
            }
            if r.nlink == 0 && !orphans.contains(ino) {
                bad.push(format!("inode {ino}: unlinked but not an orphan (leaked)"));
            }
            match store.allocated_pages(*ino) {
                Ok(n) if n != r.blocks => bad.push(format!(
                    "inode {ino}: blocks {} but {n} allocated in the store",
                    r.blocks
                )),
                Ok(_) => {}
                Err(e) => bad.push(format!("inode {ino}: {e}")),
            }
        }
        for o in &orphans {
            if recs.get(o).is_none_or(|r| r.nlink != 0) {
                bad.push(format!("orphan {o} is not an unlinked inode"));
            }
        }
        let free_inodes = fs.free_inodes.sum();
        let want_inodes = fs.totals.total_inodes as i64 - recs.len() as i64;
        if free_inodes != want_inodes {
            bad.push(format!("free inodes {free_inodes}, expected {want_inodes}"));
        }
        let free_blocks = fs.free_blocks.sum();
        let overhead = fs.store_overhead.load(Ordering::Relaxed);
        let want_blocks = fs.totals.total_blocks as i64 - overhead - used_blocks as i64;
        if free_blocks != want_blocks {
            bad.push(format!("free blocks {free_blocks}, expected {want_blocks}"));
        }
        check_inode_cache(fs, &mut bad);
        if bad.is_empty() {
            Ok(())
        } else {
            Err(bad)
        }
    }
}
