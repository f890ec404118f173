//! Overwrites of one file from many lanes without its data lock: the
//! *stripes* of a [`FileData`](super::FileData) (docs/ARCHITECTURE.md,
//! "Overwrites of one file from many lanes").
//!
//! A file that two lanes have overwritten (a pure overwrite each, through
//! the locked path), or that a writable open found holding more than one
//! page (`FileData::stripe_for_overwrites`), gets [`Stripes`]: [`STRIPES`]
//! cache lines, page `idx` belonging to stripe `idx % STRIPES`, and a
//! gate. From then on a pure overwrite that stays inside one cached page
//! takes only its page's stripe
//! ([`FileData::try_overwrite`](super::FileData::try_overwrite)): it writes
//! the page, the stripe's time and the stripe's list of written pages, all
//! on lines no overwrite of a page of another stripe touches, and reads
//! the gate, which no overwrite writes. Everything else — every holder of
//! the data lock held exclusively (`PagesMut`) — closes the gate after the
//! lock and waits until no stripe is held ([`Stripes::close`]), so it sees
//! no overwrite in flight and none starts until it opens the gate again.
//!
//! * `gate` (on a line of its own; SeqCst store, SeqCst loads): [`CLOSED`]
//!   by a holder of the data lock held exclusively, from after the lock
//!   until before it is released; then [`OPEN`] (Release: what the holder
//!   changed is visible to an overwrite that then finds it open), or
//!   [`RETIRED`] when the holder leaves the file with one page or none
//!   (nothing left to spread: an `O_RDWR` open and `ftruncate(0)` before
//!   appends). Retired stripes are as none (`FileData::stripes`): holders
//!   skip them, an overwrite that finds the gate retired gives its stripe
//!   back untouched and takes the data lock; a writable open of the file
//!   grown again, or a second lane's overwrite, closes the gate again
//!   (under the data lock, in a change section), as a making does. Stripes
//!   are made with the gate closed, by such a holder. An overwrite takes
//!   its stripe, *then* loads the gate; a holder closes the gate, *then*
//!   loads every stripe's count and waits while it is odd — a Dekker pair
//!   in the SeqCst order (the stripe's compare-and-swap is SeqCst): either
//!   the overwrite finds the gate closed, and gives its stripe back having
//!   written nothing, or the holder finds the stripe held and waits for
//!   its release (Acquire), after which everything the overwrite wrote is
//!   visible to it. So a holder never meets an overwrite in flight, at the
//!   cost of one store and [`STRIPES`] loads, not a compare-and-swap and a
//!   store per stripe (what holding every stripe cost: an append to a file
//!   with stripes took 0.35 µs more).
//!
//! Per stripe (one line each):
//! * `seq`: even when free, odd while one overwrite of a page of the
//!   stripe holds it. Taken by compare-and-swap even → odd (SeqCst: part
//!   of the gate's Dekker pair) followed by `fence(Release)`, released by
//!   a Release store of the next even value: the sequence count of the
//!   parent module, per stripe. A lock-free reader validates each page it
//!   copies by its stripe's count (load Acquire, copy, `fence(Acquire)`,
//!   load again), as it validates the whole copy by the file's, which
//!   every change a holder of the data lock makes to bytes a reader sees
//!   advances.
//! * `time` (Relaxed): the packed time of the latest overwrite under the
//!   stripe ([`pack`]), 0 when none since the data-side times were last
//!   stored. A nonzero time is later than the stored data-side times (it
//!   was read after they were stored, under the stripe), so the file's
//!   mtime is the latest stripe time when there is one. Cleared, with the
//!   gate closed, whenever the data-side times are stored.
//! * `written`, `pages` (Relaxed, under the stripe, or with the gate
//!   closed): which pages of the stripe overwrites made dirty since the
//!   data lock last folded them into its page map
//!   ([`Stripes::take_written`]); `OVERFLOW` when more than fit, and then
//!   every cached page of the stripe counts as dirty.
//!
//! Lock order: the data lock, then the gate, or a stripe. An overwrite
//! holds one stripe and waits for nothing while it does; one that finds
//! its stripe taken for long, or the gate closed, waits on the data lock
//! held shared (no exclusive holder, who closes the gate, can then come
//! in) and tries again. `meta` is never taken under a stripe.

use lanefs_store::{CacheLine, Timespec};

use crate::sync::{fence, spin_hint, yield_now, AtomicU32, AtomicU64, Ordering};

/// `Stripes::gate`: overwrites under stripes may run.
pub(crate) const OPEN: u32 = 0;
/// `Stripes::gate`: the data lock's exclusive holder is changing the file.
pub(crate) const CLOSED: u32 = 1;
/// `Stripes::gate`: not in use (the file has one page or none).
pub(crate) const RETIRED: u32 = 2;

/// Stripes of a file's pages (a power of two).
pub(crate) const STRIPES: usize = 32;
/// Pages a stripe remembers as written before it counts all its pages.
const REMEMBERED: usize = 5;
/// `written` when the stripe forgot which pages it wrote.
const OVERFLOW: u64 = u64::MAX;
/// Bits of a packed time's nanoseconds.
const NSEC_BITS: u32 = 30;

struct Stripe {
    seq: AtomicU64,
    time: AtomicU64,
    written: AtomicU64,
    pages: [AtomicU64; REMEMBERED],
}

/// The stripes of one file (module header).
pub(crate) struct Stripes {
    gate: CacheLine<AtomicU32>,
    stripes: [CacheLine<Stripe>; STRIPES],
}

/// `t` as one word ordered as the time (0 for none), if it fits: a time
/// after the epoch and before 2514.
pub(crate) fn pack(t: Timespec) -> Option<u64> {
    let sec = u64::try_from(t.sec)
        .ok()
        .filter(|s| *s < 1 << (64 - NSEC_BITS))?;
    Some(sec << NSEC_BITS | u64::from(t.nsec))
}

fn unpack(v: u64) -> Timespec {
    Timespec {
        sec: (v >> NSEC_BITS) as i64,
        nsec: (v & ((1 << NSEC_BITS) - 1)) as u32,
    }
}

/// The stripe of page `idx`.
pub(crate) fn stripe_of(idx: u64) -> usize {
    (idx % STRIPES as u64) as usize
}

impl Stripes {
    /// Stripes with the gate closed by the caller (the holder of the data
    /// lock that makes them).
    pub fn new_closed() -> Box<Stripes> {
        Box::new(Stripes {
            gate: CacheLine(AtomicU32::new(CLOSED)),
            stripes: std::array::from_fn(|_| {
                CacheLine(Stripe {
                    seq: AtomicU64::new(0),
                    time: AtomicU64::new(0),
                    written: AtomicU64::new(0),
                    pages: std::array::from_fn(|_| AtomicU64::new(0)),
                })
            }),
        })
    }

    /// Take stripe `s` if it is free; the count it had. The caller then
    /// checks [`gate_open`](Self::gate_open) before it writes anything.
    pub fn try_hold(&self, s: usize) -> Option<u64> {
        let seq = &self.stripes[s].seq;
        let v = seq.load(Ordering::Relaxed);
        if !v.is_multiple_of(2) {
            return None;
        }
        seq.compare_exchange(v, v + 1, Ordering::SeqCst, Ordering::Relaxed)
            .ok()?;
        fence(Ordering::Release);
        Some(v)
    }

    /// The gate (SeqCst, after the stripe was taken: module header). If
    /// not [`OPEN`], the caller releases its stripe untouched, and waits
    /// for the data lock ([`CLOSED`]) or takes it ([`RETIRED`]).
    pub fn gate(&self) -> u32 {
        self.gate.load(Ordering::SeqCst)
    }

    /// Whether the stripes are retired (Acquire: for `FileData::stripes`,
    /// which treats them as none).
    pub fn retired(&self) -> bool {
        self.gate.load(Ordering::Acquire) == RETIRED
    }

    /// Release stripe `s` taken at count `v`.
    pub fn release(&self, s: usize, v: u64) {
        debug_assert_eq!(self.stripes[s].seq.load(Ordering::Relaxed), v + 1);
        self.stripes[s].seq.store(v + 2, Ordering::Release);
    }

    /// Take stripe `s`, waiting for whoever holds it; the count it had.
    /// Overwrites wait for nothing while they hold one, but may be
    /// preempted: after a few spins the wait gives up the CPU.
    pub fn hold(&self, s: usize) -> u64 {
        let mut spins = 0u32;
        loop {
            if let Some(v) = self.try_hold(s) {
                return v;
            }
            spins += 1;
            if spins < 64 {
                spin_hint();
            } else {
                yield_now();
            }
        }
    }

    /// Close the gate and wait out every overwrite in flight: from here
    /// until [`open`](Self::open) no overwrite writes anything, and what
    /// those before wrote is visible. Under the data lock held
    /// exclusively.
    pub fn close(&self) {
        debug_assert_eq!(self.gate.load(Ordering::Relaxed), OPEN);
        self.gate.store(CLOSED, Ordering::SeqCst);
        for st in &self.stripes {
            let mut spins = 0u32;
            while !st.seq.load(Ordering::SeqCst).is_multiple_of(2) {
                spins += 1;
                if spins < 64 {
                    spin_hint();
                } else {
                    yield_now();
                }
            }
        }
        fence(Ordering::Acquire);
    }

    /// Open the gate closed by [`close`](Self::close) or made closed
    /// (Release: an overwrite that finds it open sees the holder's
    /// changes), or retire the stripes (`retire`: module header).
    pub fn open(&self, retire: bool) {
        debug_assert_eq!(self.gate.load(Ordering::Relaxed), CLOSED);
        let to = if retire { RETIRED } else { OPEN };
        self.gate.store(to, Ordering::Release);
    }

    /// Take retired stripes back into use, the gate closed by the caller
    /// (the data lock's exclusive holder, in a change section): no
    /// overwrite wrote under them since they were retired.
    pub fn unretire(&self) {
        debug_assert_eq!(self.gate.load(Ordering::Relaxed), RETIRED);
        self.gate.store(CLOSED, Ordering::SeqCst);
    }

    /// Stripe `s`'s count for a reader: `None` while it is held.
    pub fn read_begin(&self, s: usize) -> Option<u64> {
        let v = self.stripes[s].seq.load(Ordering::Acquire);
        v.is_multiple_of(2).then_some(v)
    }

    /// Whether stripe `s` is still at count `v` after the reader's loads.
    pub fn read_valid(&self, s: usize, v: u64) -> bool {
        fence(Ordering::Acquire);
        self.stripes[s].seq.load(Ordering::Relaxed) == v
    }

    /// Note an overwrite at `now` of page `idx` (stripe `s`, held).
    pub fn note_write(&self, s: usize, idx: u64, now: u64) {
        let st = &self.stripes[s];
        if st.time.load(Ordering::Relaxed) < now {
            st.time.store(now, Ordering::Relaxed);
        }
        let n = st.written.load(Ordering::Relaxed);
        if n == OVERFLOW {
            return;
        }
        let n = n as usize;
        if st.pages[..n]
            .iter()
            .any(|p| p.load(Ordering::Relaxed) == idx)
        {
            return;
        }
        if n == REMEMBERED {
            st.written.store(OVERFLOW, Ordering::Relaxed);
            return;
        }
        st.pages[n].store(idx, Ordering::Relaxed);
        st.written.store(n as u64 + 1, Ordering::Relaxed);
    }

    /// The pages overwrites made dirty, per stripe (`Err(stripe)`: every
    /// page of that stripe), forgotten here. The gate closed.
    pub fn take_written(&self, mut dirty: impl FnMut(Result<u64, usize>)) {
        for (s, st) in self.stripes.iter().enumerate() {
            match st.written.load(Ordering::Relaxed) {
                0 => continue,
                OVERFLOW => dirty(Err(s)),
                n => {
                    for p in &st.pages[..n as usize] {
                        dirty(Ok(p.load(Ordering::Relaxed)));
                    }
                }
            }
            st.written.store(0, Ordering::Relaxed);
        }
    }

    /// The latest overwrite's time, if any since the times were stored.
    /// Lock-free: each stripe's time only grows until the data lock's
    /// holder clears it (inside a change section of the file).
    pub fn latest(&self) -> Option<Timespec> {
        let t = self
            .stripes
            .iter()
            .map(|st| st.time.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0);
        (t != 0).then(|| unpack(t))
    }

    /// Forget the overwrites' times (the gate closed: the data-side times
    /// are being stored).
    pub fn clear_times(&self) {
        for st in &self.stripes {
            if st.time.load(Ordering::Relaxed) != 0 {
                st.time.store(0, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(all(test, not(lanefs_shuttle)))]
mod tests {
    use super::*;

    #[test]
    fn packed_times_order_as_times() {
        let a = Timespec {
            sec: 5,
            nsec: 999_999_999,
        };
        let b = Timespec { sec: 6, nsec: 0 };
        assert!(pack(a).unwrap() < pack(b).unwrap());
        assert_eq!(unpack(pack(a).unwrap()), a);
        assert!(pack(Timespec { sec: -1, nsec: 0 }).is_none());
    }

    #[test]
    fn written_pages_are_remembered_then_counted_by_stripe() {
        let s = Stripes::new_closed();
        assert_eq!(s.gate(), CLOSED, "made closed");
        s.open(false);
        let v = s.try_hold(3).unwrap();
        assert_eq!(s.gate(), OPEN);
        assert!(s.try_hold(3).is_none(), "a held stripe is not taken twice");
        for idx in [3, 35, 3, 67] {
            s.note_write(3, idx, 10);
        }
        s.release(3, v);
        s.close();
        assert_eq!(s.gate(), CLOSED);
        let mut got = Vec::new();
        s.take_written(|d| got.push(d));
        assert_eq!(got, vec![Ok(3), Ok(35), Ok(67)]);
        for idx in 0..=REMEMBERED as u64 {
            s.note_write(1, 1 + idx * STRIPES as u64, 11);
        }
        got.clear();
        s.take_written(|d| got.push(d));
        assert_eq!(got, vec![Err(1)]);
        assert_eq!(s.latest().map(pack), Some(Some(11)));
        s.clear_times();
        assert!(s.latest().is_none());
    }
}
