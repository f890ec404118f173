//! One shard of the store's inode objects ([`ObjMap`]) and its bounded
//! cache: a byte estimate of what the shard holds and a CLOCK
//! (second-chance) hand that evicts *clean* objects when the shard is over
//! its share of the store's budget.
//!
//! An object is clean ([`InodeObj::evictable`]) when its durable home
//! (slot `home_slot` of its number, chain and entry blocks `home_blocks`)
//! holds exactly its in-memory state: its stamp equals the stamp of that
//! home (`home_stamp`; every change bumps the stamp, and a checkpoint sets
//! `home_stamp` only once the home is durable), it is not dirty, not bad,
//! and has no orphan-file slot (memory-only state). Such an object can be
//! dropped and read back from its home (`store_cache.rs`).
//!
//! An `ObjMap` is plain data: the store's shard mutex protects it (see
//! `store.rs`), and recovery owns it outright while it loads. The objects
//! live in a slab (`slots`) with an index by number, so the CLOCK hand is a
//! slab position that survives removals (a removal moves the last object
//! into the hole, which the hand looks at next).
//!
//! Accounting: `bytes` is the estimate ([`InodeObj::mem_bytes`]) of the
//! heap every object held owns, `unsaved` that of the objects whose changes
//! are not at their home yet; the slab's and index's capacity is added on
//! top ([`ObjMap::footprint`]), and both shrink when eviction leaves them
//! three quarters empty (`stamp != home_stamp`: only a checkpoint makes them
//! evictable). Every change made through [`ObjMap::get_mut`] /
//! [`ObjMap::get_or_default`] (an [`ObjMut`] guard) or `insert`/`remove`
//! keeps both exact; [`ObjMap::iter_mut`] does not (recovery uses it on a
//! map nobody shares and calls [`ObjMap::recount`] after; a checkpoint uses
//! it only to clear `dirty` flags, which change neither figure).

use lanefs_store::Ino;

use crate::object::{InodeObj, IntMap};

/// Bytes a slab entry takes (the slab's spare capacity counts too).
const SLOT_BYTES: u64 = std::mem::size_of::<(Ino, InodeObj)>() as u64;
/// Bytes an index entry takes: key, position, control byte, rounded up for
/// the table's load factor.
const INDEX_BYTES: u64 = 20;
/// What holding one more object costs the map itself.
pub const PER_OBJECT_BYTES: u64 = SLOT_BYTES + INDEX_BYTES;
/// Heap-block overhead of one allocation (the allocator's header and
/// rounding).
const ALLOC_OVERHEAD: u64 = 16;

/// One shard's objects.
#[derive(Default)]
pub struct ObjMap {
    slots: Vec<(Ino, InodeObj)>,
    index: IntMap<Ino, u32>,
    /// CLOCK hand: the slab position looked at next.
    hand: usize,
    /// The object the latest use touched (0: none): never evicted, so that
    /// an object larger than the shard's share (a big file's page map) is
    /// not dropped and read back between two uses in a row.
    last: Ino,
    /// Estimated bytes of every object held.
    bytes: u64,
    /// Estimated bytes of the objects with changes not at their home.
    unsaved: u64,
    /// Objects read back from their homes (`store_cache.rs`) and evicted.
    pub reads: u64,
    pub evictions: u64,
}

/// Mutable access to one object that keeps its map's figures exact.
pub struct ObjMut<'a> {
    obj: &'a mut InodeObj,
    bytes: &'a mut u64,
    unsaved: &'a mut u64,
    before: (u64, bool),
}

impl std::ops::Deref for ObjMut<'_> {
    type Target = InodeObj;
    fn deref(&self) -> &InodeObj {
        self.obj
    }
}

impl std::ops::DerefMut for ObjMut<'_> {
    fn deref_mut(&mut self) -> &mut InodeObj {
        self.obj
    }
}

impl Drop for ObjMut<'_> {
    fn drop(&mut self) {
        let (b, u) = self.before;
        let (nb, nu) = (self.obj.mem_bytes(), self.obj.unsaved());
        *self.bytes = (*self.bytes + nb).saturating_sub(b);
        *self.unsaved =
            (*self.unsaved + if nu { nb } else { 0 }).saturating_sub(if u { b } else { 0 });
    }
}

impl InodeObj {
    /// Estimated heap bytes this object owns (its slab entry and index
    /// entry are counted by the map, with their spare capacity).
    pub fn mem_bytes(&self) -> u64 {
        let heap = |bytes: usize| match bytes {
            0 => 0,
            b => b as u64 + ALLOC_OVERHEAD,
        };
        let rec = self.rec.as_ref().map_or(0, |r| heap(r.capacity()));
        // A B-tree entry (16 bytes) with its share of node overhead.
        let pages = self.pages.len() as u64 * 40 + heap(self.unwritten.capacity() * 16);
        let dir = self
            .dir
            .as_ref()
            .map_or(0, |d| d.mem_bytes() + ALLOC_OVERHEAD);
        rec + pages + dir + heap(self.home_blocks.capacity() * 8)
    }

    /// Changes not at the home yet (a checkpoint must write them).
    pub fn unsaved(&self) -> bool {
        self.stamp != self.home_stamp
    }

    /// Clean: the home holds exactly this state (see the module docs).
    pub fn evictable(&self) -> bool {
        !self.dirty && !self.bad && !self.unsaved() && self.orphan_slot.is_none()
    }
}

impl ObjMap {
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Estimated bytes the objects own, and the part not at home yet.
    pub fn bytes(&self) -> (u64, u64) {
        (self.bytes, self.unsaved)
    }

    /// Estimated bytes of the whole shard: the objects' heap, the slab and
    /// the index at their capacity.
    pub fn footprint(&self) -> u64 {
        self.bytes
            + self.slots.capacity() as u64 * SLOT_BYTES
            + self.index.capacity() as u64 * INDEX_BYTES
    }

    pub fn contains(&self, ino: Ino) -> bool {
        self.index.contains_key(&ino)
    }

    pub fn get(&self, ino: &Ino) -> Option<&InodeObj> {
        let &at = self.index.get(ino)?;
        Some(&self.slots[at as usize].1)
    }

    /// Read access that also marks the object recently used.
    pub fn hit(&mut self, ino: Ino) -> Option<&InodeObj> {
        let &at = self.index.get(&ino)?;
        self.last = ino;
        let o = &mut self.slots[at as usize].1;
        o.referenced = true;
        Some(o)
    }

    /// Mutable access (not a use: the CLOCK mark is left as it is).
    pub fn get_mut(&mut self, ino: &Ino) -> Option<ObjMut<'_>> {
        let &at = self.index.get(ino)?;
        let obj = &mut self.slots[at as usize].1;
        let before = (obj.mem_bytes(), obj.unsaved());
        Some(ObjMut {
            obj,
            bytes: &mut self.bytes,
            unsaved: &mut self.unsaved,
            before,
        })
    }

    /// The object of `ino`, a fresh (free, never written) one if absent,
    /// marked used.
    pub fn get_or_default(&mut self, ino: Ino) -> ObjMut<'_> {
        if !self.index.contains_key(&ino) {
            self.insert(ino, InodeObj::default());
        }
        self.last = ino;
        let mut o = self.get_mut(&ino).expect("inserted");
        o.referenced = true;
        o
    }

    /// Add (or replace) the object of `ino`.
    pub fn insert(&mut self, ino: Ino, obj: InodeObj) {
        if self.index.contains_key(&ino) {
            self.remove(ino);
        }
        self.account(&obj, true);
        self.index.insert(ino, self.slots.len() as u32);
        self.slots.push((ino, obj));
    }

    pub fn remove(&mut self, ino: Ino) -> Option<InodeObj> {
        let at = self.index.remove(&ino)? as usize;
        let (_, obj) = self.slots.swap_remove(at);
        if let Some(&(moved, _)) = self.slots.get(at) {
            self.index.insert(moved, at as u32);
        }
        self.account(&obj, false);
        Some(obj)
    }

    fn account(&mut self, obj: &InodeObj, add: bool) {
        let b = obj.mem_bytes();
        let u = if obj.unsaved() { b } else { 0 };
        if add {
            self.bytes += b;
            self.unsaved += u;
        } else {
            self.bytes = self.bytes.saturating_sub(b);
            self.unsaved = self.unsaved.saturating_sub(u);
        }
    }

    /// Recompute the figures (after changes through `iter_mut`).
    pub fn recount(&mut self) {
        self.bytes = 0;
        self.unsaved = 0;
        for (_, o) in &self.slots {
            let b = o.mem_bytes();
            self.bytes += b;
            if o.unsaved() {
                self.unsaved += b;
            }
        }
    }

    pub fn reserve(&mut self, n: usize) {
        self.slots.reserve(n);
        self.index.reserve(n);
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Ino, &InodeObj)> {
        self.slots.iter().map(|(i, o)| (i, o))
    }

    /// Mutable iteration that does not keep the figures (module docs).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&Ino, &mut InodeObj)> {
        self.slots.iter_mut().map(|(i, o)| (&*i, o))
    }

    pub fn keys(&self) -> impl Iterator<Item = &Ino> {
        self.slots.iter().map(|(i, _)| i)
    }

    pub fn values(&self) -> impl Iterator<Item = &InodeObj> {
        self.slots.iter().map(|(_, o)| o)
    }

    /// CLOCK: while the shard holds more than `limit` bytes, move the hand
    /// over at most `steps` objects: a recently used one loses its mark, a
    /// clean one without it is dropped, the one the latest use touched
    /// stays. Returns how many were dropped.
    /// Bounded so that a shard full of unsaved objects costs each call
    /// `steps` looks, not a scan of the shard.
    pub fn evict(&mut self, limit: u64, steps: usize) -> usize {
        let mut dropped = 0;
        for _ in 0..steps {
            if self.footprint() <= limit || self.slots.is_empty() {
                break;
            }
            if self.hand >= self.slots.len() {
                self.hand = 0;
            }
            let (ino, o) = &mut self.slots[self.hand];
            if *ino == self.last {
                self.hand += 1;
            } else if o.referenced {
                o.referenced = false;
                self.hand += 1;
            } else if o.evictable() {
                let ino = *ino;
                self.remove(ino);
                dropped += 1;
            } else {
                self.hand += 1;
            }
        }
        self.evictions += dropped as u64;
        // Give back spare room once three quarters is unused (amortised:
        // the shard lost at least half its objects since the last time).
        let len = self.slots.len();
        if len * 4 < self.slots.capacity() {
            self.slots.shrink_to(len * 2);
            self.index.shrink_to(len * 2);
        }
        dropped
    }
}

impl<'a> IntoIterator for &'a ObjMap {
    type Item = (&'a Ino, &'a InodeObj);
    type IntoIter = Box<dyn Iterator<Item = (&'a Ino, &'a InodeObj)> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean(stamp: u64) -> InodeObj {
        InodeObj {
            stamp,
            home_stamp: stamp,
            rec: Some(vec![1; 100]),
            ..InodeObj::default()
        }
    }

    #[test]
    fn figures_follow_changes_and_clock_drops_only_clean_objects() {
        let mut m = ObjMap::default();
        for i in 1..=10 {
            m.insert(i, clean(3));
        }
        let one = m.get(&1).unwrap().mem_bytes();
        assert_eq!(m.bytes(), (10 * one, 0));
        assert!(m.footprint() >= 10 * (one + SLOT_BYTES + INDEX_BYTES));
        {
            let mut o = m.get_mut(&4).unwrap();
            o.stamp += 1;
            o.dirty = true;
            o.pages.insert(0, 99);
        }
        let four = m.get(&4).unwrap().mem_bytes();
        assert_eq!(m.bytes(), (9 * one + four, four));
        m.hit(7);
        m.hit(9);
        let dropped = m.evict(0, 100);
        assert_eq!(dropped, 8, "the clean ones go, a used one on a second pass");
        assert!(m.contains(4) && m.contains(9), "unsaved, and the last used");
        m.hit(4);
        assert_eq!(m.evict(0, 100), 1, "no longer the last used");
        assert!(m.contains(4) && m.len() == 1);
        assert_eq!(m.bytes(), (four, four));
        assert_eq!(m.evict(0, 100), 0, "an unsaved object stays");
        m.remove(4);
        assert_eq!(m.bytes(), (0, 0));
    }

    #[test]
    fn eviction_is_bounded_per_call() {
        let mut m = ObjMap::default();
        for i in 1..=100 {
            m.insert(i, clean(1));
        }
        assert_eq!(m.evict(0, 10), 10);
        assert_eq!(m.len(), 90);
        for i in 1..=100 {
            if let Some(o) = m.get(&i) {
                assert_eq!(o.stamp, 1);
            }
        }
        m.recount();
        assert_eq!(m.bytes().0, 90 * clean(1).mem_bytes());
    }
}
