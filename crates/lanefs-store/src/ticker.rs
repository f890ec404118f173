//! [`Ticker`]: a named thread that runs a task every interval until it is
//! stopped — the image store's background commit and the engine's flusher.
//!
//! Locking: `stop` (a mutex and condvar of the ticker's own, a leaf) holds
//! the flag that ends the thread; the thread waits on it between ticks and
//! holds it only to read the flag, never while the task runs.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// See the module doc. Dropping it stops the thread at its next wake-up
/// without waiting for it (so a task may drop its own owner); [`join`]
/// waits.
///
/// [`join`]: Ticker::join
pub struct Ticker {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    /// Run `tick` every `every` on a thread called `name`, until stopped
    /// or until `tick` answers `false`.
    pub fn spawn(
        name: &str,
        every: Duration,
        mut tick: impl FnMut() -> bool + Send + 'static,
    ) -> std::io::Result<Ticker> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || loop {
                {
                    let mut stopped = flag.0.lock();
                    if !*stopped {
                        flag.1.wait_for(&mut stopped, every);
                    }
                    if *stopped {
                        return;
                    }
                }
                if !tick() {
                    return;
                }
            })?;
        Ok(Ticker {
            stop,
            thread: Some(thread),
        })
    }

    /// End the thread at its next wake-up (a tick running finishes).
    pub fn stop(&self) {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
    }

    /// Stop and wait for the thread (never from the task itself).
    pub fn join(mut self) {
        self.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A ticker every millisecond that counts its ticks and answers
    /// `again` each time.
    fn counting(again: bool) -> (Arc<AtomicU32>, Ticker) {
        let n = Arc::new(AtomicU32::new(0));
        let seen = Arc::clone(&n);
        let t = Ticker::spawn("t", Duration::from_millis(1), move || {
            seen.fetch_add(1, Ordering::Relaxed);
            again
        })
        .unwrap();
        (n, t)
    }

    #[test]
    fn ticks_until_joined_and_stops_when_the_task_says_so() {
        let (n, t) = counting(true);
        while n.load(Ordering::Relaxed) < 3 {
            std::thread::yield_now();
        }
        t.join();
        let after = n.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(n.load(Ordering::Relaxed), after, "ticked after join");

        let (once, t) = counting(false);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            once.load(Ordering::Relaxed),
            1,
            "ticked after answering false"
        );
        t.join();
    }
}
