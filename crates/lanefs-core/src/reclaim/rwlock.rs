//! `reclaim=rwlock`: one global reader-writer lock around the registry
//! (Linux's `shrinker_rwsem` before 6.4).
//!
//! Locks: `entries` (reader-writer lock) protects the list. A scan holds it
//! shared for the whole scan, including every shrinker call; register and
//! unregister hold it exclusively, so unregister waits for every scan in
//! flight and, once it returns, the shrinker is never called again. A
//! shrinker must not register or unregister (it would deadlock).

use super::{ReclaimRegistry, Shrinker, ShrinkerId};
use crate::sync::{Arc, RwLock};

#[derive(Default)]
struct Entries {
    last_id: u64,
    list: Vec<(u64, Arc<dyn Shrinker>)>,
}

/// The global-lock registry.
#[derive(Default)]
pub struct RwLockRegistry {
    entries: RwLock<Entries>,
}

impl RwLockRegistry {
    pub fn new() -> RwLockRegistry {
        RwLockRegistry::default()
    }
}

impl ReclaimRegistry for RwLockRegistry {
    fn register(&self, s: Arc<dyn Shrinker>) -> ShrinkerId {
        let mut e = self.entries.write();
        e.last_id += 1;
        let id = e.last_id;
        e.list.push((id, s));
        ShrinkerId(id)
    }

    fn unregister(&self, id: ShrinkerId) {
        let mut e = self.entries.write();
        let before = e.list.len();
        e.list.retain(|(i, _)| *i != id.0);
        debug_assert_eq!(e.list.len() + 1, before, "shrinker {id:?} not registered");
    }

    fn shrink_all(&self, nr: usize) -> usize {
        let freed = {
            let e = self.entries.read();
            e.list.iter().map(|(_, s)| s.scan(nr)).sum()
        };
        super::drain_after_scan();
        freed
    }

    fn len(&self) -> usize {
        self.entries.read().list.len()
    }
}
