//! Model checks (shuttle): lookup vs evict vs insert/load of one number, in
//! every design. No lookup returns a FREEING or freed inode, no number is
//! inserted twice, no reference or update is lost, and a lock-free reader
//! only ever reads a live node's memory. And the LRU entry of an inode
//! freed while queued: the free's note, an evictor's pop and a purge race
//! for it, and exactly one takes it.

use crate::sync::Arc;

use shuttle::thread;

use super::tests::record;
use super::{new_cache, Claim, InodeCache, InodeLru, State};
use crate::inode::Inode;
use crate::sync::{AtomicUsize, Mutex, Ordering};
use crate::variants::IcacheVariant;

const ALL: [IcacheVariant; 4] = [
    IcacheVariant::Rcu,
    IcacheVariant::Global,
    IcacheVariant::RcuGlobalInsert,
    IcacheVariant::BucketLock,
];

const INO: u64 = 5;

/// Give back a reference; the last one offers the inode to the LRU.
fn iput(lru: &InodeLru, inode: &Arc<Inode>) {
    if inode.life.put() && inode.life.mark_on_lru() {
        lru.push(inode.clone());
    }
}

/// Two users each load-or-find the inode, add 1 to its size (dirtying it)
/// and drop their reference; an evictor pops the LRU and evicts what it can
/// claim, writing the size back first; a lock-free reader looks it up. At
/// the end the size (cached or stored) is exactly 2.
fn lookup_evict_load(variant: IcacheVariant) {
    let cache: Arc<dyn InodeCache> = Arc::from(new_cache(variant, 64));
    let lru = Arc::new(InodeLru::new());
    let store = Arc::new(Mutex::new(0u64));
    let user = |cache: Arc<dyn InodeCache>, lru: Arc<InodeLru>, store: Arc<Mutex<u64>>| {
        move || {
            let got = cache
                .get_or_load(INO, &mut || {
                    let size = *store.lock();
                    Ok(Some(Inode::new(record(INO, size), false)))
                })
                .unwrap()
                .unwrap();
            let inode = got.inode;
            assert_eq!(
                inode.life.state(),
                State::Live,
                "a lookup returned a dying inode"
            );
            assert!(inode.life.refs() >= 1);
            {
                let mut m = inode.meta.lock();
                m.rec.size += 1;
                m.dirty = true;
            }
            iput(&lru, &inode);
        }
    };
    let a = thread::spawn(user(cache.clone(), lru.clone(), store.clone()));
    let b = thread::spawn(user(cache.clone(), lru.clone(), store.clone()));
    let evictor = {
        let (cache, lru, store) = (cache.clone(), lru.clone(), store.clone());
        thread::spawn(move || {
            for _ in 0..3 {
                let Some(inode) = lru.pop() else {
                    thread::yield_now();
                    continue;
                };
                if inode.life.claim_for_evict() != Claim::Claimed {
                    continue;
                }
                {
                    let mut m = inode.meta.lock();
                    if m.dirty {
                        *store.lock() = m.rec.size;
                        m.dirty = false;
                    }
                }
                assert!(
                    cache.remove(&inode),
                    "a claimed inode vanished from the hash"
                );
            }
        })
    };
    let reader = {
        let cache = cache.clone();
        thread::spawn(move || {
            for _ in 0..2 {
                let guard = crossbeam_epoch::pin();
                if let Some(i) = cache.get_rcu(INO, &guard) {
                    assert_eq!(i.ino, INO);
                }
            }
        })
    };
    for t in [a, b, evictor, reader] {
        t.join().unwrap();
    }
    let size = match cache.get(INO) {
        Some(i) => {
            let s = i.meta.lock().rec.size;
            iput(&lru, &i);
            s
        }
        None => *store.lock(),
    };
    assert_eq!(size, 2, "an update was lost (two copies, or a stale load)");
    assert!(cache.len() <= 1, "inode {INO} hashed twice");
}

/// A lookup of a number the store does not have (it misses) races the
/// creation of a new inode with that number: the new inode is inserted
/// exactly once and is what later lookups find.
fn miss_vs_insert_new(variant: IcacheVariant) {
    let cache: Arc<dyn InodeCache> = Arc::from(new_cache(variant, 64));
    let fresh = Arc::new(Inode::new(record(INO, 42), true));
    let looker = {
        let cache = cache.clone();
        thread::spawn(move || {
            if let Some(l) = cache.get_or_load(INO, &mut || Ok(None)).unwrap() {
                assert_eq!(l.inode.meta.lock().rec.size, 42);
                l.inode.life.put();
            }
        })
    };
    let creator = {
        let (cache, fresh) = (cache.clone(), fresh.clone());
        thread::spawn(move || cache.insert_new(fresh))
    };
    looker.join().unwrap();
    creator.join().unwrap();
    let found = cache.get(INO).expect("the new inode is hashed");
    assert!(Arc::ptr_eq(&found, &fresh));
    assert_eq!(cache.len(), 1);
}

/// An inode on the LRU (with a second-chance hint and a live neighbour)
/// is freed — `kill`, then the free's note, taken out at once — while an
/// evictor pops entries (second chance, claim and give back as an
/// eviction of an unlinked inode does, or `Gone`) and a purge runs. If
/// the kill found the entry queued, exactly one of them takes it out (the
/// counter `lru_dead` would go back to 0); afterwards no entry of the
/// freed inode is left and the live one's entry is still there.
fn free_vs_evict_on_lru() {
    let lru = Arc::new(InodeLru::new());
    let x = Arc::new(Inode::new(record(INO, 0), false));
    let y = Arc::new(Inode::new(record(INO + 1, 0), false));
    iput(&lru, &x);
    iput(&lru, &y);
    x.mark_referenced();
    let counted = Arc::new(AtomicUsize::new(0));
    let taken = Arc::new(AtomicUsize::new(0));
    let freer = {
        let (lru, x, counted, taken) = (lru.clone(), x.clone(), counted.clone(), taken.clone());
        thread::spawn(move || {
            if x.life.kill() {
                counted.fetch_add(1, Ordering::Relaxed);
                let n = lru.note_freed(&x).len() + lru.take_noted_now().len();
                taken.fetch_add(n, Ordering::Relaxed);
            }
        })
    };
    let evictor = {
        let (lru, taken) = (lru.clone(), taken.clone());
        thread::spawn(move || {
            for _ in 0..3 {
                let Some(inode) = lru.pop() else { return };
                if inode.life.refs() == 0 && inode.take_referenced() {
                    lru.push(inode);
                    continue;
                }
                match inode.life.claim_for_evict() {
                    // Unlinked or live: given back (`unclaim_to_lru`).
                    Claim::Claimed => {
                        inode.life.unclaim();
                        if inode.life.mark_on_lru() {
                            lru.push(inode);
                        }
                    }
                    Claim::Pinned => {}
                    Claim::Gone => {
                        taken.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        })
    };
    let purger = {
        let (lru, taken) = (lru.clone(), taken.clone());
        thread::spawn(move || {
            let n = lru.remove_dead().len();
            taken.fetch_add(n, Ordering::Relaxed);
        })
    };
    for t in [freer, evictor, purger] {
        t.join().unwrap();
    }
    let left = lru.remove_dead().len();
    let taken = taken.load(Ordering::Relaxed) + left;
    assert_eq!(
        taken,
        counted.load(Ordering::Relaxed),
        "a freed inode's entry was taken out {taken} times"
    );
    assert!(!x.life.on_lru(), "a freed inode kept its entry");
    assert_eq!(x.life.state(), State::Dead);
    assert_eq!(
        lru.len(),
        y.life.on_lru() as usize,
        "entries of the live inode"
    );
}

#[test]
fn model_free_vs_evict_on_lru() {
    crate::sync::check_random(free_vs_evict_on_lru, crate::sync::model_iterations());
}

#[test]
fn model_lookup_evict_load() {
    for v in ALL {
        crate::sync::check_random(
            move || lookup_evict_load(v),
            crate::sync::model_iterations(),
        );
    }
}

#[test]
fn model_miss_vs_insert_new() {
    for v in ALL {
        crate::sync::check_random(
            move || miss_vs_insert_new(v),
            crate::sync::model_iterations(),
        );
    }
}
