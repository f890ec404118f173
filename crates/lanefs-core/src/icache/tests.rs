//! The same behavioural test for each of the four designs, at the cache
//! level (the Fs-level tests are in `tests/icache.rs`).

use crate::sync::{Arc, AtomicUsize, Ordering};

use lanefs_store::{FileKind, Ino, InodeRecord, Timespec};

use super::{new_cache, Claim, InodeCache, InodeLru, State};
use crate::inode::Inode;
use crate::variants::IcacheVariant;

pub(crate) fn record(ino: Ino, size: u64) -> InodeRecord {
    let t = Timespec { sec: 0, nsec: 0 };
    InodeRecord {
        ino,
        generation: 1,
        kind: FileKind::Symlink,
        perm: 0o777,
        nlink: 1,
        size,
        atime: t,
        mtime: t,
        ctime: t,
        btime: t,
        ..InodeRecord::default()
    }
}

const ALL: [IcacheVariant; 4] = [
    IcacheVariant::Rcu,
    IcacheVariant::Global,
    IcacheVariant::RcuGlobalInsert,
    IcacheVariant::BucketLock,
];

fn behaves(cache: &dyn InodeCache) {
    let loads = AtomicUsize::new(0);
    let load = |ino: Ino| {
        loads.fetch_add(1, Ordering::Relaxed);
        Ok(Some(Inode::new(record(ino, ino * 10), false)))
    };
    // Miss: loads once, with the caller's reference.
    let a = cache.get_or_load(7, &mut || load(7)).unwrap().unwrap();
    assert!(a.new);
    assert_eq!(a.inode.life.refs(), 1);
    // Hit: no load, a second reference on the same object.
    let b = cache.get_or_load(7, &mut || load(7)).unwrap().unwrap();
    assert!(!b.new && Arc::ptr_eq(&a.inode, &b.inode));
    assert_eq!(a.inode.life.refs(), 2);
    assert_eq!(loads.load(Ordering::Relaxed), 1);
    let guard = crossbeam_epoch::pin();
    assert!(std::ptr::eq(cache.get_rcu(7, &guard).unwrap(), &*a.inode));
    assert!(cache.get_rcu(8, &guard).is_none());
    drop(guard);
    // Not found: nothing stays hashed.
    assert!(cache.get_or_load(9, &mut || Ok(None)).unwrap().is_none());
    assert!(cache.get(9).is_none());
    // A failing load leaves nothing either.
    let e = cache.get_or_load(9, &mut || Err(lanefs_store::Errno::EIO));
    assert!(matches!(e, Err(lanefs_store::Errno::EIO)));
    assert_eq!(cache.len(), 1);
    // Eviction: pinned while referenced, claimed once unreferenced.
    let lru = InodeLru::new();
    assert!(!a.inode.life.put());
    assert!(a.inode.life.put());
    assert!(a.inode.life.mark_on_lru());
    lru.push(a.inode.clone());
    assert!(cache.get(7).is_some_and(|i| {
        let last = i.life.put();
        !last // still on the LRU: no second entry owed
    }));
    let popped = lru.pop().unwrap();
    assert_eq!(popped.life.claim_for_evict(), Claim::Claimed);
    // FREEING: still seen by the lock-free walk (whole, unchanging; see
    // `get_rcu`); references wait for it to leave.
    assert!(cache.get_rcu(7, &crossbeam_epoch::pin()).is_some());
    assert!(cache.remove(&popped));
    assert!(cache.get(7).is_none());
    // Loaded again from the "store".
    let c = cache.get_or_load(7, &mut || load(7)).unwrap().unwrap();
    assert!(c.new && !Arc::ptr_eq(&c.inode, &a.inode));
    assert_eq!(loads.load(Ordering::Relaxed), 2);
    // A new inode; freeing it (DEAD) hides it from lookups.
    let n = Arc::new(Inode::new(record(11, 0), true));
    cache.insert_new(n.clone());
    assert!(Arc::ptr_eq(&cache.get(11).unwrap(), &n));
    assert!(!n.life.kill(), "never on the LRU");
    assert_eq!(n.life.state(), State::Dead);
    assert!(cache.remove(&n));
    assert!(!cache.remove(&n));
    assert!(cache.get(11).is_none());
    let mut seen = Vec::new();
    cache.for_each(&mut |i| seen.push(i.ino));
    assert_eq!(seen, vec![7]);
}

#[test]
fn every_design_behaves_the_same() {
    for v in ALL {
        behaves(&*new_cache(v, 64));
    }
}

#[test]
fn bucket_count_is_bounded_power_of_two() {
    use super::table::{bucket_count, MAX_BUCKETS, MIN_BUCKETS};
    assert_eq!(bucket_count(0), MIN_BUCKETS);
    assert_eq!(bucket_count(64), MIN_BUCKETS.max(64));
    assert_eq!(bucket_count(1000), 1024);
    assert_eq!(bucket_count(usize::MAX / 4), MAX_BUCKETS);
}

/// Threads racing loads of the same few numbers through every design: each
/// number is loaded at most once while cached, and all see one object.
#[test]
fn racing_misses_load_once() {
    for v in ALL {
        let cache: Arc<dyn InodeCache> = Arc::from(new_cache(v, 64));
        let loads = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (cache, loads) = (cache.clone(), loads.clone());
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    for ino in 1..200u64 {
                        let l = cache
                            .get_or_load(ino, &mut || {
                                loads.fetch_add(1, Ordering::Relaxed);
                                Ok(Some(Inode::new(record(ino, 0), false)))
                            })
                            .unwrap()
                            .unwrap();
                        got.push(Arc::as_ptr(&l.inode) as usize);
                        l.inode.life.put();
                    }
                    got
                })
            })
            .collect();
        let all: Vec<Vec<usize>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(loads.load(Ordering::Relaxed), 199, "{v:?}");
        assert!(
            all.windows(2).all(|w| w[0] == w[1]),
            "{v:?}: two objects for one number"
        );
        assert_eq!(cache.len(), 199);
    }
}
