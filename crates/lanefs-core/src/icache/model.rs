//! Model checks (shuttle): lookup vs evict vs insert/load of one number, in
//! every design. No lookup returns a FREEING or freed inode, no number is
//! inserted twice, no reference or update is lost, and a lock-free reader
//! only ever reads a live node's memory.

use crate::sync::Arc;

use shuttle::thread;

use super::tests::record;
use super::{new_cache, Claim, InodeCache, InodeLru, State};
use crate::inode::Inode;
use crate::sync::Mutex;
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
