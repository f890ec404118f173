//! Idle upkeep: once the mount has gone quiet after serving requests, run
//! a hook on every worker thread — the daemon's gives the memory its
//! allocator holds back to the system.
//!
//! Why on every worker: a thread-caching allocator (mimalloc, the
//! daemon's) takes back memory freed from pages another thread allocated
//! only when that owner thread next allocates or collects. A file written
//! by every worker and then removed leaves its pages freed but kept by
//! their owners' heaps; a worker blocked in `read(2)` on `/dev/fuse` or in
//! `io_uring_enter` never gets there, so the daemon kept the memory of
//! every removed file (1 GiB of resident memory after writing and
//! removing a 1 GiB file, until new writes reused it) where tmpfs gives
//! it back at once.
//!
//! How: each worker registers ([`Upkeep::register`]: its thread, a count
//! of the requests it has started and finished, and the round it last
//! ran the hook for). The daemon calls [`Upkeep::tick`] every 100 ms; when
//! every count has stood still and even (no request in flight) for
//! [`IDLE`] after one moved, it starts a round: it runs the daemon's
//! first step on its own thread (the engine's epoch-deferred frees:
//! `lanefs_core::collect_deferred`, which put the blocks back in their
//! owners' heaps), bumps `round` and sends [`signal`] to every registered
//! worker. The signal's handler does
//! nothing and is installed without `SA_RESTART`, so the worker's wait
//! returns `EINTR`; the transport then calls [`Worker::woken`], which runs
//! the hook once per round. One round per quiet period: a busy mount gets
//! no signal, an idle one one per worker.
//!
//! Locks and atomics:
//! * `workers` (mutex): the registry. A worker leaves it (its [`Worker`]
//!   drops) before its thread ends, and signals are sent under the same
//!   lock, so no signal goes to a thread that has ended. Leaf lock.
//! * `Worker::counts` (atomic, one cache line per worker, written only by
//!   its worker): +1 when a request starts, +1 when it is answered (odd:
//!   one in flight); read by `tick` only. Relaxed: a stale read only
//!   delays a round.
//! * `round` (atomic): bumped by `tick` (Release) before the signals; a
//!   worker reads it (Acquire) when woken and compares with the round it
//!   ran last (its own).
//! * `ticker` (mutex): `tick`'s own state; taken by `tick` only.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, OnceLock};
use std::time::{Duration, Instant};

/// How long every worker must have been quiet before a round starts.
pub const IDLE: Duration = Duration::from_secs(1);

/// The signal that wakes a worker for a round: the fourth real-time
/// signal above the C library's own (an embedding program that uses it
/// must not turn upkeep on).
pub fn signal() -> libc::c_int {
    libc::SIGRTMIN() + 4
}

/// A worker's slot in the registry (module doc).
struct Slot {
    thread: libc::pthread_t,
    counts: lanefs_store::CacheLine<AtomicU64>,
}

/// Idle upkeep of one session (module doc).
pub struct Upkeep {
    hook: OnceLock<fn()>,
    round: AtomicU64,
    workers: Mutex<Vec<Arc<Slot>>>,
    ticker: Mutex<Ticker>,
}

#[derive(Default)]
struct Ticker {
    /// The sum of the counts at the last tick.
    last_sum: u64,
    /// When the sum last changed.
    since: Option<Instant>,
    /// Whether requests were served since the last round.
    active: bool,
}

/// A registered worker; leaves the registry when dropped.
pub struct Worker<'a> {
    upkeep: &'a Upkeep,
    slot: Arc<Slot>,
    ran: u64,
}

impl Default for Upkeep {
    fn default() -> Self {
        Upkeep {
            hook: OnceLock::new(),
            round: AtomicU64::new(0),
            workers: Mutex::new(Vec::new()),
            ticker: Mutex::new(Ticker::default()),
        }
    }
}

extern "C" fn on_signal(_: libc::c_int) {}

impl Upkeep {
    /// Turn upkeep on with `hook` (first call wins) and install the
    /// signal's handler (no `SA_RESTART`: a worker's wait returns `EINTR`).
    pub fn enable(&self, hook: fn()) {
        static INSTALL: Once = Once::new();
        INSTALL.call_once(|| {
            // SAFETY: a zeroed sigaction is valid; we set a handler that
            // does nothing (async-signal-safe) and an empty mask.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as *const () as usize;
                sa.sa_flags = 0;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(signal(), &sa, std::ptr::null_mut());
            }
        });
        let _ = self.hook.set(hook);
    }

    /// Register the calling thread as a worker.
    pub fn register(&self) -> Worker<'_> {
        let slot = Arc::new(Slot {
            // SAFETY: pthread_self has no preconditions.
            thread: unsafe { libc::pthread_self() },
            counts: lanefs_store::CacheLine(AtomicU64::new(0)),
        });
        self.workers.lock().unwrap().push(slot.clone());
        Worker {
            upkeep: self,
            ran: self.round.load(Ordering::Acquire),
            slot,
        }
    }

    /// Called every 100 ms or so by the daemon: start a round once every
    /// worker has been quiet for [`IDLE`] after serving requests — run
    /// `first` on the calling thread (what must happen before the workers'
    /// hooks: the deferred frees that put memory back in their heaps),
    /// then wake the workers. Returns whether it started one.
    pub fn tick(&self, first: impl FnOnce()) -> bool {
        if self.hook.get().is_none() {
            return false;
        }
        let now = Instant::now();
        let mut t = self.ticker.lock().unwrap();
        let workers = self.workers.lock().unwrap();
        let (sum, in_flight) = workers.iter().fold((0u64, false), |(s, f), w| {
            let c = w.counts.load(Ordering::Relaxed);
            (s.wrapping_add(c), f || c % 2 == 1)
        });
        if sum != t.last_sum || in_flight {
            t.last_sum = sum;
            t.since = Some(now);
            t.active = true;
            return false;
        }
        if !t.active || t.since.is_some_and(|s| now.duration_since(s) < IDLE) {
            return false;
        }
        t.active = false;
        first();
        self.round.fetch_add(1, Ordering::Release);
        for w in workers.iter() {
            // SAFETY: the thread is registered, so it has not ended (it
            // leaves the registry first, under this lock); the signal's
            // handler is installed (`enable`, before any hook is set).
            unsafe { libc::pthread_kill(w.thread, signal()) };
        }
        true
    }
}

impl Worker<'_> {
    /// A request was read: in flight until [`Worker::finished`].
    pub fn started(&self) {
        let c = &self.slot.counts;
        c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// The request was answered.
    pub fn finished(&self) {
        self.started();
    }

    /// The worker's wait was interrupted: run the hook if a round started
    /// since it last ran.
    pub fn woken(&mut self) {
        let round = self.upkeep.round.load(Ordering::Acquire);
        if round != self.ran {
            self.ran = round;
            if let Some(hook) = self.upkeep.hook.get() {
                hook();
            }
        }
    }
}

impl Drop for Worker<'_> {
    fn drop(&mut self) {
        let mut w = self.upkeep.workers.lock().unwrap();
        w.retain(|s| !Arc::ptr_eq(s, &self.slot));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    static HOOK_RUNS: AtomicUsize = AtomicUsize::new(0);
    fn hook() {
        HOOK_RUNS.fetch_add(1, Ordering::SeqCst);
    }

    /// A worker blocked in a read is woken once per quiet period after
    /// activity and runs the hook; a busy or never-used mount gets no
    /// round.
    #[test]
    fn a_blocked_worker_runs_the_hook_once_per_quiet_period() {
        let up = Arc::new(Upkeep::default());
        up.enable(hook);
        let (rd, wr) = nix::unistd::pipe().unwrap();
        let ready = Arc::new(std::sync::Barrier::new(2));
        let t = {
            let up = up.clone();
            let ready = ready.clone();
            std::thread::spawn(move || {
                let mut w = up.register();
                w.started();
                w.finished();
                ready.wait();
                let mut buf = [0u8; 1];
                loop {
                    match nix::unistd::read(&rd, &mut buf) {
                        Ok(0) => return,
                        Ok(_) => {
                            w.started();
                            w.finished();
                        }
                        Err(nix::errno::Errno::EINTR) => w.woken(),
                        Err(e) => panic!("{e}"),
                    }
                }
            })
        };
        ready.wait();
        let before = HOOK_RUNS.load(Ordering::SeqCst);
        assert!(!up.tick(|| {}), "the first tick sees the activity");
        std::thread::sleep(IDLE + Duration::from_millis(50));
        assert!(up.tick(|| {}), "quiet for IDLE after activity: a round");
        assert!(!up.tick(|| {}), "one round per quiet period");
        let ran = (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            HOOK_RUNS.load(Ordering::SeqCst) == before + 1
        });
        assert!(ran, "the blocked worker did not run the hook");
        // More requests, then quiet again: another round.
        nix::unistd::write(&wr, b"x").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(!up.tick(|| {}));
        std::thread::sleep(IDLE + Duration::from_millis(50));
        assert!(up.tick(|| {}));
        drop(wr);
        t.join().unwrap();
        assert!(up.workers.lock().unwrap().is_empty(), "left the registry");
    }
}
