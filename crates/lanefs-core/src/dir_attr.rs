//! A directory's size, change times and subdirectory count kept per
//! stripe: every create, link, unlink and rename in a directory moves
//! them, so they live beside each stripe's lock (`dir`) instead of in the
//! directory's `meta`, and changes of names in different stripes write
//! different lines.
//!
//! The directory's record under `meta` is the *base*; its attributes are
//! the base with every stripe folded in: size + `entries` × `DIRENT_SIZE`,
//! link count + `subdirs` (0 stays 0: a directory removed, whose base
//! went to 0, has no links whatever its stripes say), mtime the latest
//! stripe change if there is one (a change sets it to
//! "now", as Linux's `inode_set_mtime_to_ts`, even below a future time set
//! by `utimensat`: only a setattr writes a directory's base mtime, and it
//! folds the stripes first, so any change in them came after it), and
//! ctime the later of the base's and the latest change (the base's ctime
//! is also set without a fold: setxattr, a rename moving the directory).
//!
//! Subdirectory links and `LINK_MAX` (a sloppy counter with exact
//! grants): a stripe also holds `room`, links its holder may add without
//! asking anyone. A new subdirectory in the stripe uses one (`room -= 1`
//! when reserved, then `subdirs += 1` with its entry); a subdirectory
//! removed gives one back (`subdirs -= 1`, `room += 1`, [`StripeAttr::note`]).
//! A stripe with no room asks the directory's `meta` for a grant out of
//! what is left, `LINK_MAX - (rec.nlink + granted)`, where `granted` (in
//! `Meta`, not in the mirror) is Σ over stripes of `subdirs + room` (plus
//! reservations in flight, held under their stripe; negative when
//! subdirectories the base counts were removed since the last fold, their
//! links then in rooms); when nothing is
//! left but other stripes may hold room, the holder of every stripe
//! reclaims the rooms and decides exactly (`fs::reserve_subdir_link`).
//! So `rec.nlink + Σ subdirs ≤ rec.nlink + granted ≤ LINK_MAX` at every
//! moment (rooms are never negative), and a reservation is refused only
//! by a holder of every stripe that found `rec.nlink + Σ subdirs` (then
//! the exact count) at `LINK_MAX`.
//!
//! Locks and atomics:
//! * [`StripeAttr`] is written only by its stripe's lock holder:
//!   `entries` (entries added minus removed since the last fold),
//!   `subdirs` (subdirectories added minus removed since the last fold),
//!   `changed_ns` (the latest change, ns since the epoch; 0 = none since
//!   the last fold) and `seq`, a seqcount as in `attr_seq`: odd while the
//!   holder writes. Writer: `seq = s+1` (Relaxed), `fence(Release)`,
//!   values (Relaxed), `seq = s+2` (Release). `room` is outside the
//!   seqcount: only holders read it (Relaxed).
//! * Folding (moving the stripes into the base and zeroing them) holds
//!   every stripe, then takes `meta` (the mount's order: stripes before
//!   `meta`): taking the index out, a setattr of the directory (which may
//!   set its times backwards), and writing the record back. Holding
//!   `meta`, it turns every stripe's `seq` odd *before* the base changes,
//!   and even again only after `meta`'s guard has republished the mirror
//!   and been released. Never odd by a fold that waits for `meta`: a
//!   reader holding `meta` may wait for an odd `seq` (it ends without any
//!   lock). Rooms stay with the index across a fold (`granted` loses the
//!   folded `subdirs`, `fs::fold_dir_changes`); an index taken out takes
//!   them along (`granted` goes to 0; a new index gets fresh grants).
//! * Readers ([`StripeAttrs::snapshot`]) take a double collect: every
//!   stripe's `seq` (all even) and values, then the base (`read_base`: the
//!   mirror lock-free, or the record under `meta`), `fence(Acquire)`, then
//!   every `seq` again. Equal sequences mean that no stripe changed and no
//!   fold overlapped the read, so base plus stripes is a state the
//!   directory had (a sum of stripes read one by one while they change
//!   could be a size the directory never had).
//!
//! Lock order: none of its own (the stripe locks and `meta` keep theirs).

use lanefs_store::{InodeRecord, Timespec};

use crate::sync::{fence, AtomicI32, AtomicI64, AtomicU32, AtomicU64, Ordering};
use crate::DIRENT_SIZE;

const NS: u64 = 1_000_000_000;

fn to_ns(t: Timespec) -> u64 {
    // Change times are "now": never before the epoch. Clamp anyway.
    (t.sec.max(0) as u64)
        .saturating_mul(NS)
        .saturating_add(t.nsec as u64)
}

fn from_ns(ns: u64) -> Timespec {
    Timespec {
        sec: (ns / NS) as i64,
        nsec: (ns % NS) as u32,
    }
}

/// One stripe's share of its directory's attributes (see the module doc).
#[derive(Default)]
pub(crate) struct StripeAttr {
    seq: AtomicU64,
    entries: AtomicI64,
    changed_ns: AtomicU64,
    /// Subdirectories added minus removed since the last fold.
    subdirs: AtomicI32,
    /// Links the holder may add without asking (module doc); not under
    /// `seq`: read and written by the stripe's holder only.
    room: AtomicU32,
}

impl StripeAttr {
    /// Record a change of `entries` entries and `subdirs` subdirectories
    /// at `now`. The caller holds the stripe's lock. A subdirectory added
    /// used a link reserved before ([`take_room`](Self::take_room)); one
    /// removed gives its link back to the stripe's room.
    pub fn note(&self, entries: i64, subdirs: i32, now: Timespec) {
        let s = self.seq.load(Ordering::Relaxed);
        debug_assert!(s & 1 == 0, "two writers of one stripe");
        self.seq.store(s + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        let e = self.entries.load(Ordering::Relaxed);
        self.entries.store(e + entries, Ordering::Relaxed);
        if subdirs != 0 {
            let d = self.subdirs.load(Ordering::Relaxed);
            self.subdirs.store(d + subdirs, Ordering::Relaxed);
        }
        let t = to_ns(now).max(self.changed_ns.load(Ordering::Relaxed));
        self.changed_ns.store(t, Ordering::Relaxed);
        self.seq.store(s + 2, Ordering::Release);
        if subdirs < 0 {
            self.add_room(subdirs.unsigned_abs());
        }
    }

    /// Use one link of the stripe's room; false when it has none. The
    /// caller holds the stripe's lock.
    pub fn take_room(&self) -> bool {
        let r = self.room.load(Ordering::Relaxed);
        if r == 0 {
            return false;
        }
        self.room.store(r - 1, Ordering::Relaxed);
        true
    }

    /// Add `n` links to the stripe's room (a grant, or a reserved link
    /// not used). The caller holds the stripe's lock, or owns the index.
    pub fn add_room(&self, n: u32) {
        let r = self.room.load(Ordering::Relaxed);
        self.room.store(r + n, Ordering::Relaxed);
    }

    /// Empty the stripe's room; what it held. The caller holds the
    /// stripe's lock.
    pub fn take_all_room(&self) -> u32 {
        let r = self.room.load(Ordering::Relaxed);
        self.room.store(0, Ordering::Relaxed);
        r
    }

    /// Open a fold: the sequence goes odd (held until [`end_fold`]).
    fn begin_fold(&self) -> (i64, i64, u64) {
        let s = self.seq.load(Ordering::Relaxed);
        debug_assert!(s & 1 == 0, "two writers of one stripe");
        self.seq.store(s + 1, Ordering::Relaxed);
        (
            self.entries.load(Ordering::Relaxed),
            self.subdirs.load(Ordering::Relaxed) as i64,
            self.changed_ns.load(Ordering::Relaxed),
        )
    }

    /// Close a fold: the stripe is empty again (its room stays).
    fn end_fold(&self) {
        self.entries.store(0, Ordering::Relaxed);
        self.subdirs.store(0, Ordering::Relaxed);
        self.changed_ns.store(0, Ordering::Relaxed);
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s + 1, Ordering::Release);
    }
}

/// What the stripes add to the base.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DirChanges {
    /// Entries added minus removed.
    pub entries: i64,
    /// Subdirectories added minus removed.
    pub subdirs: i64,
    /// The latest change, if any.
    pub changed: Option<Timespec>,
}

/// A directory's attributes that the stripes move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DirAttrs {
    pub nlink: u32,
    pub size: u64,
    pub mtime: Timespec,
    pub ctime: Timespec,
}

impl DirChanges {
    /// The sums and the latest change as `changed_ns` holds it (0: none).
    fn from_parts(entries: i64, subdirs: i64, latest_ns: u64) -> DirChanges {
        DirChanges {
            entries,
            subdirs,
            changed: (latest_ns != 0).then(|| from_ns(latest_ns)),
        }
    }

    /// Whether there is anything to fold.
    pub fn is_empty(&self) -> bool {
        self.entries == 0 && self.subdirs == 0 && self.changed.is_none()
    }

    /// Link count, size, mtime and ctime of the directory from the base's
    /// (see the module doc): the one rule every reader and the fold apply.
    pub fn applied(&self, base: DirAttrs) -> DirAttrs {
        let size = (base.size as i64 + self.entries * DIRENT_SIZE as i64).max(0) as u64;
        // A removed directory (base 0) has no links, whatever its stripes
        // held when it died.
        let nlink = if base.nlink == 0 {
            0
        } else {
            (base.nlink as i64 + self.subdirs).clamp(0, u32::MAX as i64) as u32
        };
        let (mtime, ctime) = match self.changed {
            Some(t) => (t, base.ctime.max(t)),
            None => (base.mtime, base.ctime),
        };
        DirAttrs {
            nlink,
            size,
            mtime,
            ctime,
        }
    }

    /// Apply to attributes made from the base record.
    pub fn apply_attr(&self, a: &mut crate::Attr) {
        let d = self.applied(DirAttrs {
            nlink: a.nlink,
            size: a.size,
            mtime: a.mtime,
            ctime: a.ctime,
        });
        (a.nlink, a.size, a.mtime, a.ctime) = (d.nlink, d.size, d.mtime, d.ctime);
    }

    /// Apply to a record.
    pub fn apply(&self, rec: &mut InodeRecord) {
        debug_assert!(
            rec.size as i64 + self.entries * DIRENT_SIZE as i64 >= 2 * DIRENT_SIZE as i64,
            "directory size underflow"
        );
        debug_assert!(
            rec.nlink == 0 || rec.nlink as i64 + self.subdirs >= 2,
            "directory link count underflow"
        );
        let d = self.applied(DirAttrs {
            nlink: rec.nlink,
            size: rec.size,
            mtime: rec.mtime,
            ctime: rec.ctime,
        });
        (rec.nlink, rec.size, rec.mtime, rec.ctime) = (d.nlink, d.size, d.mtime, d.ctime);
    }
}

/// Given to a fold's `apply`: calling it opens the fold and returns the
/// stripes' changes (see [`StripeAttrs::fold`]).
pub(crate) type Collect<'a> = &'a mut dyn FnMut() -> DirChanges;

/// Every stripe of one directory.
pub(crate) trait StripeAttrs {
    fn attrs(&self) -> impl Iterator<Item = &StripeAttr>;

    /// The base read by `read_base` and the stripes' changes, consistent
    /// (see the module doc), lock-free.
    fn snapshot<T>(&self, mut read_base: impl FnMut() -> T) -> (T, DirChanges) {
        let mut seqs = [0u64; crate::dir::STRIPES];
        'retry: loop {
            let mut entries = 0i64;
            let mut subdirs = 0i64;
            let mut latest = 0u64;
            for (i, a) in self.attrs().enumerate() {
                let s = a.seq.load(Ordering::Acquire);
                if s & 1 != 0 {
                    crate::sync::spin_hint();
                    continue 'retry;
                }
                seqs[i] = s;
                entries += a.entries.load(Ordering::Relaxed);
                subdirs += a.subdirs.load(Ordering::Relaxed) as i64;
                latest = latest.max(a.changed_ns.load(Ordering::Relaxed));
            }
            let base = read_base();
            fence(Ordering::Acquire);
            if self
                .attrs()
                .enumerate()
                .all(|(i, a)| a.seq.load(Ordering::Relaxed) == seqs[i])
            {
                return (base, DirChanges::from_parts(entries, subdirs, latest));
            }
            crate::sync::spin_hint();
        }
    }

    /// Move the stripes' changes into the base. The caller holds every
    /// stripe; `apply` takes `meta`, *then* calls its argument (which opens
    /// the fold: every `seq` goes odd, and it returns the changes), changes
    /// the record, and releases `meta` (republishing the mirror) before it
    /// returns; then the stripes are zeroed and their `seq`s even again.
    /// Opening the fold only under `meta` keeps readers that hold `meta`
    /// (`Inode::attr_locked`) from waiting on a fold that waits for `meta`.
    /// An `apply` that never calls its argument leaves the stripes alone.
    fn fold(&self, apply: impl FnOnce(Collect<'_>)) {
        let mut opened = false;
        let mut collect = || {
            debug_assert!(!opened, "a fold opened twice");
            opened = true;
            let (mut entries, mut subdirs, mut latest) = (0i64, 0i64, 0u64);
            for a in self.attrs() {
                let (e, d, t) = a.begin_fold();
                entries += e;
                subdirs += d;
                latest = latest.max(t);
            }
            fence(Ordering::Release);
            DirChanges::from_parts(entries, subdirs, latest)
        };
        apply(&mut collect);
        if opened {
            for a in self.attrs() {
                a.end_fold();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Four([StripeAttr; 4]);
    impl StripeAttrs for Four {
        fn attrs(&self) -> impl Iterator<Item = &StripeAttr> {
            self.0.iter()
        }
    }

    fn t(sec: i64) -> Timespec {
        Timespec { sec, nsec: 5 }
    }

    #[test]
    fn snapshot_sums_entries_and_takes_the_latest_change() {
        let s = Four(Default::default());
        assert_eq!(s.snapshot(|| ()).1, DirChanges::default());
        s.0[0].note(1, 0, t(10));
        s.0[3].note(1, 0, t(30));
        s.0[3].note(-1, 0, t(20));
        let (_, c) = s.snapshot(|| ());
        assert_eq!(c.entries, 1);
        assert_eq!(c.changed, Some(t(30)));
    }

    #[test]
    fn fold_moves_changes_into_the_base_and_empties_the_stripes() {
        let s = Four(Default::default());
        s.0[1].note(1, 0, t(40));
        s.0[2].note(1, 0, t(41));
        let mut rec = InodeRecord {
            size: 2 * DIRENT_SIZE,
            mtime: t(50),
            ..Default::default()
        };
        s.fold(|collect| collect().apply(&mut rec));
        assert_eq!(rec.size, 4 * DIRENT_SIZE);
        // A change sets mtime even below a (future) base time, as Linux;
        // ctime never goes back (it is also set without a fold).
        assert_eq!(rec.mtime, t(41));
        assert_eq!(rec.ctime, t(41));
        let mut rec = InodeRecord {
            ctime: t(60),
            ..rec
        };
        s.0[0].note(1, 0, t(55));
        s.fold(|collect| collect().apply(&mut rec));
        assert_eq!((rec.mtime, rec.ctime), (t(55), t(60)));
        let (_, c) = s.snapshot(|| ());
        assert!(c.is_empty());
    }

    #[test]
    fn subdirectories_fold_into_the_link_count_and_rooms_stay() {
        let s = Four(Default::default());
        // Stripe 0 was granted 2 links: one mkdir uses one.
        s.0[0].add_room(2);
        assert!(s.0[0].take_room());
        s.0[0].note(1, 1, t(10));
        // Stripe 1 has none to use; an rmdir there (of a subdirectory the
        // base counts) gives its link to the stripe.
        assert!(!s.0[1].take_room());
        s.0[1].note(-1, -1, t(11));
        s.0[2].note(1, 1, t(12));
        s.0[2].note(1, 1, t(13));
        let (_, c) = s.snapshot(|| ());
        assert_eq!((c.entries, c.subdirs), (2, 2));
        let base = DirAttrs {
            nlink: 3,
            size: 3 * DIRENT_SIZE,
            mtime: t(1),
            ctime: t(1),
        };
        assert_eq!(c.applied(base).nlink, 5);
        // A removed directory has no links, whatever its stripes hold.
        assert_eq!(c.applied(DirAttrs { nlink: 0, ..base }).nlink, 0);
        let mut rec = InodeRecord {
            nlink: 3,
            size: 3 * DIRENT_SIZE,
            ..Default::default()
        };
        s.fold(|collect| collect().apply(&mut rec));
        assert_eq!((rec.nlink, rec.size), (5, 5 * DIRENT_SIZE));
        let (_, c) = s.snapshot(|| ());
        assert!(c.is_empty(), "{c:?}");
        // The rooms are the holders' and outlive the fold.
        assert_eq!(s.0[0].take_all_room(), 1);
        assert_eq!(s.0[1].take_all_room(), 1);
        assert_eq!(s.0[2].take_all_room(), 0);
    }

    /// A reader racing writers and folds never sees a size the directory
    /// did not have: each writer adds then removes one entry (a
    /// subdirectory), so every consistent state has base + entries in
    /// {2, 3, 4} entries × size, and as many subdirectories as entries.
    #[test]
    fn snapshots_racing_writers_and_folds_are_consistent() {
        use std::sync::Mutex;
        let s = std::sync::Arc::new(Four(Default::default()));
        let base = std::sync::Arc::new(Mutex::new(0i64));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let locks: std::sync::Arc<[Mutex<()>; 4]> = std::sync::Arc::new(Default::default());
        let mut hs = Vec::new();
        for k in [0usize, 2] {
            let (s, locks, stop) = (s.clone(), locks.clone(), stop.clone());
            hs.push(std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _g = locks[k].lock().unwrap();
                    // Each entry a subdirectory: entries and subdirs move
                    // together in every state the directory has.
                    s.0[k].note(1, 1, t(1));
                    s.0[k].note(-1, -1, t(1));
                }
            }));
        }
        {
            let (s, locks, stop, base) = (s.clone(), locks.clone(), stop.clone(), base.clone());
            hs.push(std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _g: Vec<_> = locks.iter().map(|l| l.lock().unwrap()).collect();
                    s.fold(|collect| {
                        let mut b = base.lock().unwrap();
                        let c = collect();
                        assert_eq!(c.entries, c.subdirs);
                        *b += c.entries;
                    });
                }
            }));
        }
        for i in 0..20_000 {
            let (b, c) = if i % 2 == 0 {
                s.snapshot(|| *base.lock().unwrap())
            } else {
                // As `attr_locked`: the base's lock held around the whole
                // snapshot (a fold opened before taking it would deadlock).
                let held = base.lock().unwrap();
                s.snapshot(|| *held)
            };
            assert!((0..=2).contains(&(b + c.entries)), "{b} + {}", c.entries);
            assert_eq!(c.entries, c.subdirs, "a stripe's change seen in part");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for h in hs {
            h.join().unwrap();
        }
    }
}

#[cfg(all(test, lanefs_shuttle))]
mod model {
    use super::*;
    use crate::sync::{Arc, Mutex};
    use shuttle::thread;

    struct Two([StripeAttr; 2]);
    impl StripeAttrs for Two {
        fn attrs(&self) -> impl Iterator<Item = &StripeAttr> {
            self.0.iter()
        }
    }

    /// Two creates in different stripes, a fold under a `meta`-like lock,
    /// a lock-free reader and a reader holding that lock (as
    /// `attr_locked`): nobody deadlocks, and every snapshot is a state the
    /// directory had — entries only grow, so base + stripes never exceeds
    /// two and never goes back (a fold seen half would count an entry
    /// twice or not at all).
    #[test]
    fn model_stripe_attrs_snapshot_vs_note_and_fold() {
        crate::sync::check_random(
            || {
                let s = Arc::new(Two(Default::default()));
                let stripes = Arc::new([Mutex::new(()), Mutex::new(())]);
                let base = Arc::new(Mutex::new(0i64));
                let mut hs = Vec::new();
                for k in 0..2 {
                    let (s, stripes) = (s.clone(), stripes.clone());
                    hs.push(thread::spawn(move || {
                        let _g = stripes[k].lock();
                        s.0[k].note(1, 0, Timespec { sec: 1, nsec: 0 });
                    }));
                }
                {
                    let (s, stripes, base) = (s.clone(), stripes.clone(), base.clone());
                    hs.push(thread::spawn(move || {
                        let _g: Vec<_> = stripes.iter().map(|l| l.lock()).collect();
                        s.fold(|collect| {
                            let mut b = base.lock();
                            *b += collect().entries;
                        });
                    }));
                }
                {
                    let (s, base) = (s.clone(), base.clone());
                    hs.push(thread::spawn(move || {
                        let mut last = 0;
                        for _ in 0..3 {
                            let (b, c) = s.snapshot(|| *base.lock());
                            assert!(b + c.entries >= last && b + c.entries <= 2);
                            last = b + c.entries;
                        }
                    }));
                }
                let mut last = 0;
                for _ in 0..2 {
                    let held = base.lock();
                    let (b, c) = s.snapshot(|| *held);
                    drop(held);
                    assert!(b + c.entries >= last && b + c.entries <= 2);
                    last = b + c.entries;
                }
                for h in hs {
                    h.join().unwrap();
                }
                let (b, c) = s.snapshot(|| *base.lock());
                assert_eq!(b + c.entries, 2);
            },
            crate::sync::model_iterations(),
        );
    }
}
