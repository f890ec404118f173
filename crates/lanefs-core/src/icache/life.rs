//! The inode's life-cycle word ([`Life`]): one `AtomicU64` holding the
//! cache state, the transient reference count and the LRU membership flag.
//!
//! Layout: bits 0..32 `refs` (counted references: `IRef`s, plus the one a
//! loader or creator holds while it finishes), bit 40 `ON_LRU` (exactly one
//! entry for this inode sits in the unreferenced-inode LRU), bits 56..58 the
//! state:
//! * `LIVE` — hashed and usable; lookups take a reference with
//!   [`Life::try_get`] (increment-if-live, Linux's `atomic_inc_not_zero`).
//! * `FREEING` — claimed by the evictor ([`Life::claim_for_evict`], a CAS
//!   from `LIVE`, 0 refs, `ON_LRU`); nobody else writes the word until the
//!   evictor unhashes the inode or gives it back ([`Life::unclaim`]).
//!   Lookups that meet it wait and retry (Linux's `__wait_on_freeing_inode`).
//! * `DEAD` — freed by `maybe_free` (record, pages and number released);
//!   lookups wait for it to leave the hash and then miss.
//!
//! Beside the word, `lru_at` (Relaxed): where the inode's LRU entry was
//! last pushed, a hint for a free that finds the entry queued (see `lru`).
//!
//! The state LOADING is not in this word: a loading inode does not exist
//! yet, so it is a hash node whose inode pointer is still null (see
//! `table`).
//!
//! Ordering: a successful `try_get` is Acquire and pairs with the Release of
//! the publisher (the node's pointer store) and of `unclaim`; `put` is
//! Release and pairs with the Acquire CAS of `claim_for_evict`, so an
//! evictor sees every change made under a reference it outlived.

use crate::sync::{AtomicU64, Ordering};

const REFS_MASK: u64 = (1 << 32) - 1;
const ON_LRU: u64 = 1 << 40;
const STATE_SHIFT: u32 = 56;
const STATE_MASK: u64 = 0b11 << STATE_SHIFT;

/// The cache state of an inode that exists (see the module header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    Live,
    Freeing,
    Dead,
}

const LIVE: u64 = 1 << STATE_SHIFT;
const FREEING: u64 = 2 << STATE_SHIFT;
const DEAD: u64 = 3 << STATE_SHIFT;

fn state_of(w: u64) -> State {
    match w & STATE_MASK {
        LIVE => State::Live,
        FREEING => State::Freeing,
        DEAD => State::Dead,
        _ => unreachable!("life word {w:#x} has no state"),
    }
}

fn refs_of(w: u64) -> u64 {
    w & REFS_MASK
}

/// What [`Life::claim_for_evict`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// Now `FREEING`: the caller owns the inode until it unhashes it or
    /// calls [`Life::unclaim`].
    Claimed,
    /// Referenced: taken off the LRU (`ON_LRU` cleared); its last `put`
    /// puts it back.
    Pinned,
    /// Freed (`DEAD`): taken off the LRU. Its entry was counted by the
    /// [`kill`](Life::kill) that found it queued (`FsInner::lru_dead`).
    /// (A `FREEING` inode has no entry: its claim cleared `ON_LRU`.)
    Gone,
}

pub(crate) struct Life {
    word: AtomicU64,
    /// Where the inode's LRU entry was last pushed (`lru`: its shard and
    /// sequence number, packed), or [`NOT_QUEUED`] before any push.
    /// Stored (Relaxed) by the pusher under that shard's lock, after it
    /// set `ON_LRU`; read by a free whose [`kill`](Self::kill) found the
    /// entry queued, to take it out where it is (`InodeLru::note_freed`).
    /// A hint: the taker checks the entry under the shard's lock. Beside
    /// the word, so on the line every push already writes.
    lru_at: AtomicU64,
}

/// [`Life::lru_at`] of an inode never pushed (a position no push reaches).
pub(crate) const NOT_QUEUED: u64 = u64::MAX;

impl Life {
    /// `LIVE` with `refs` references, not on the LRU.
    pub fn new_live(refs: u32) -> Life {
        Life {
            word: AtomicU64::new(LIVE | refs as u64),
            lru_at: AtomicU64::new(NOT_QUEUED),
        }
    }

    /// Where the entry was last pushed (see `lru_at`).
    pub fn lru_at(&self) -> u64 {
        self.lru_at.load(Ordering::Relaxed)
    }

    /// Record where the entry is being pushed (by the pusher, under the
    /// shard's lock).
    pub fn set_lru_at(&self, at: u64) {
        self.lru_at.store(at, Ordering::Relaxed);
    }

    pub fn state(&self) -> State {
        state_of(self.word.load(Ordering::Acquire))
    }

    pub fn refs(&self) -> u64 {
        refs_of(self.word.load(Ordering::Relaxed))
    }

    pub fn on_lru(&self) -> bool {
        self.word.load(Ordering::Relaxed) & ON_LRU != 0
    }

    /// Take a reference if the inode is `LIVE`; otherwise return its state.
    pub fn try_get(&self) -> Result<(), State> {
        let mut w = self.word.load(Ordering::Relaxed);
        loop {
            if state_of(w) != State::Live {
                return Err(state_of(w));
            }
            debug_assert!(refs_of(w) < REFS_MASK, "inode reference count overflow");
            match self
                .word
                .compare_exchange_weak(w, w + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(now) => w = now,
            }
        }
    }

    /// Give back a reference. Returns `true` when that was the last one of a
    /// `LIVE` inode that is not on the LRU: the caller should offer it to
    /// the LRU ([`mark_on_lru`](Self::mark_on_lru) then push).
    pub fn put(&self) -> bool {
        let old = self.word.fetch_sub(1, Ordering::Release);
        debug_assert!(refs_of(old) > 0, "inode reference count underflow");
        refs_of(old) == 1 && state_of(old) == State::Live && old & ON_LRU == 0
    }

    /// Set `ON_LRU` if the inode is `LIVE`, unreferenced and not on the LRU;
    /// `true` means the caller now owes the LRU exactly one entry.
    pub fn mark_on_lru(&self) -> bool {
        let mut w = self.word.load(Ordering::Relaxed);
        loop {
            if state_of(w) != State::Live || refs_of(w) != 0 || w & ON_LRU != 0 {
                return false;
            }
            match self.word.compare_exchange_weak(
                w,
                w | ON_LRU,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => w = now,
            }
        }
    }

    /// Called by whoever popped this inode's LRU entry (and so owns its
    /// `ON_LRU` bit): claim it for eviction if `LIVE` and unreferenced;
    /// otherwise clear `ON_LRU`.
    pub fn claim_for_evict(&self) -> Claim {
        let mut w = self.word.load(Ordering::Relaxed);
        loop {
            debug_assert!(w & ON_LRU != 0, "LRU entry without ON_LRU");
            let (new, claim) = match state_of(w) {
                State::Live if refs_of(w) == 0 => (FREEING, Claim::Claimed),
                State::Live => (w & !ON_LRU, Claim::Pinned),
                _ => (w & !ON_LRU, Claim::Gone),
            };
            match self
                .word
                .compare_exchange_weak(w, new, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return claim,
                Err(now) => w = now,
            }
        }
    }

    /// Give a claimed inode back: `LIVE`, unreferenced, off the LRU.
    pub fn unclaim(&self) {
        debug_assert_eq!(self.word.load(Ordering::Relaxed), FREEING);
        self.word.store(LIVE, Ordering::Release);
    }

    /// Mark a freed inode `DEAD` (keeping its references), waiting out an
    /// evictor's claim. Lookups stop taking references. Returns whether its
    /// LRU entry was still queued (`ON_LRU`): that entry now holds only a
    /// dead inode's memory until a pop ([`claim_for_evict`](Self::claim_for_evict):
    /// `Gone`) or a purge ([`leave_lru_if_dead`](Self::leave_lru_if_dead))
    /// takes it. Exactly one of the two sees the bit that this returns.
    #[must_use]
    pub fn kill(&self) -> bool {
        let mut backoff = super::Backoff::new();
        let mut w = self.word.load(Ordering::Relaxed);
        loop {
            if state_of(w) == State::Freeing {
                backoff.wait();
                w = self.word.load(Ordering::Relaxed);
                continue;
            }
            debug_assert_eq!(state_of(w), State::Live, "inode freed twice");
            let new = (w & !STATE_MASK) | DEAD;
            match self
                .word
                .compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return w & ON_LRU != 0,
                Err(now) => w = now,
            }
        }
    }

    /// Called by whoever holds this inode's LRU entry (a purge, a
    /// compaction or the take-out of a free's note, under the entry's shard
    /// lock, in place of a pop): if the inode is `DEAD`, clear
    /// `ON_LRU` and return `true` (the caller drops the entry); otherwise
    /// change nothing.
    pub fn leave_lru_if_dead(&self) -> bool {
        let mut w = self.word.load(Ordering::Relaxed);
        loop {
            debug_assert!(w & ON_LRU != 0, "LRU entry without ON_LRU");
            if state_of(w) != State::Dead {
                return false;
            }
            match self.word.compare_exchange_weak(
                w,
                w & !ON_LRU,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => w = now,
            }
        }
    }
}
