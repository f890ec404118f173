//! Timing one cell: N worker threads, a start barrier, a stop flag.
//!
//! Synchronisation, all of it:
//!
//! * `start` — a [`Barrier`] of `threads + 1` parties. Each worker does its
//!   untimed preparation (pre-creating files, opening them), then waits; the
//!   coordinator waits too, so the timed window starts for everyone at once
//!   and preparation never overlaps timing.
//! * `stop` — an [`AtomicBool`], written `true` once (by the coordinator when
//!   the duration is up, or by a worker that ran out of pre-created objects or
//!   hit an error) and read by every worker after each operation (so each
//!   worker does at least one, even one scheduled late). `Relaxed`
//!   is enough: it orders nothing else; a worker that sees it late does a few
//!   more operations, which it also counts and times.
//! * Counters are per worker (a local `u64` and its own clock), returned
//!   through the thread's join handle: nothing is shared while timing.
//!
//! A worker's time excludes "maintenance" steps it takes to keep its state
//! bounded (DWAL truncating its file back to zero every few MiB); its rate
//! is `ops / timed seconds`, and the cell's rate is the sum of the workers'.
//! Each worker also reads its own thread CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`) at the start and end of its timed loop
//! (maintenance included), for CPU per operation.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// What one operation asks of the harness next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// One operation done; go on.
    Op,
    /// One operation done; run the untimed maintenance step before the next.
    OpThenMaintain,
    /// Nothing left to do (the pre-created objects are used up): stop every
    /// worker now. No operation was done.
    Exhausted,
}

/// Set by the SIGINT / SIGTERM handler; read by the coordinator between
/// polls and by the CLI between cells, so that an interrupted run still
/// unmounts what it mounted. `Relaxed`: a flag, ordering nothing else.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// Catch SIGINT and SIGTERM: the run stops at the next poll and tears down
/// its targets instead of dying with mounts left behind.
pub fn catch_interrupts() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: `on_signal` is an `extern "C"` function that only stores to an
    // atomic, which is async-signal-safe; installing it replaces the default
    // action of two signals and touches no other state.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

/// Whether SIGINT or SIGTERM arrived since [`catch_interrupts`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// How often the coordinator looks at the stop flag while it waits.
const STOP_POLL: Duration = Duration::from_millis(2);

/// Per-worker counts of one timed cell.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Measurement {
    /// Operations done by each worker.
    pub ops: Vec<u64>,
    /// Timed seconds of each worker (maintenance excluded).
    pub secs: Vec<f64>,
    /// Thread CPU seconds of each worker over its timed loop.
    pub cpu_secs: Vec<f64>,
    /// Latencies (nanoseconds) of the operations a workload times one by
    /// one (seed001: dropping an instance), all workers together; empty
    /// for the others.
    pub latency_ns: Vec<u64>,
    /// Work per second of a workload's background thread over the timed
    /// window (seed001: reclaim scans of the registry), `None` for
    /// workloads without one. Throughput beside a background thread on
    /// few cores depends on how much CPU that thread gets, so it is shown.
    pub aux_per_sec: Option<f64>,
    /// CPU seconds of that background thread per second of the window
    /// (1.0: it ran all the time), `None` for workloads without one.
    pub aux_cpu_share: Option<f64>,
}

/// CPU time consumed by the calling thread, in seconds.
pub fn thread_cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the
    // call, and CLOCK_THREAD_CPUTIME_ID is supported by every Linux kernel
    // this tool runs on (since 2.6.12); on failure `ts` stays zero.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// The `q` quantile (0..=1) of `xs` by nearest rank; `None` when empty.
pub fn quantile(xs: &mut [u64], q: f64) -> Option<u64> {
    debug_assert!((0.0..=1.0).contains(&q), "quantile {q} out of range");
    if xs.is_empty() {
        return None;
    }
    xs.sort_unstable();
    let rank = ((q * xs.len() as f64).ceil() as usize).clamp(1, xs.len());
    Some(xs[rank - 1])
}

impl Measurement {
    /// Sum over workers of their operations per second.
    pub fn ops_per_sec(&self) -> f64 {
        self.ops
            .iter()
            .zip(&self.secs)
            .map(|(&o, &s)| if s > 0.0 { o as f64 / s } else { 0.0 })
            .sum()
    }

    /// Total operations.
    pub fn total_ops(&self) -> u64 {
        self.ops.iter().sum()
    }

    /// The longest worker time, seconds.
    pub fn secs_max(&self) -> f64 {
        self.secs.iter().cloned().fold(0.0, f64::max)
    }

    /// Thread CPU nanoseconds per operation, all workers together; `None`
    /// when no operation was done.
    pub fn cpu_ns_per_op(&self) -> Option<f64> {
        let ops = self.total_ops();
        (ops > 0).then(|| self.cpu_secs.iter().sum::<f64>() * 1e9 / ops as f64)
    }

    /// Median and 99th percentile of the recorded latencies, nanoseconds.
    pub fn latency_p50_p99(&self) -> Option<(u64, u64)> {
        let mut v = self.latency_ns.clone();
        Some((quantile(&mut v, 0.5)?, quantile(&mut v, 0.99)?))
    }
}

/// Run `threads` workers for `duration`. Worker `t` calls `prepare(t)`
/// (untimed), waits for the others, then calls `op(t, &mut state)` until
/// told to stop; `maintain(&mut state)` runs untimed after an operation that
/// asks for it. The first error of any worker stops all and is returned.
pub fn measure<S, P, O, M>(
    threads: usize,
    duration: Duration,
    prepare: P,
    op: O,
    maintain: M,
) -> Result<(Measurement, Vec<S>), String>
where
    S: Send,
    P: Fn(usize) -> Result<S, String> + Sync,
    O: Fn(usize, &mut S) -> Result<Step, String> + Sync,
    M: Fn(usize, &mut S) -> Result<(), String> + Sync,
{
    assert!(threads > 0, "threads must be at least 1");
    let start = Barrier::new(threads + 1);
    let stop = AtomicBool::new(false);
    let results: Vec<Result<(u64, f64, f64, S), String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (start, stop, prepare, op, maintain) =
                    (&start, &stop, &prepare, &op, &maintain);
                scope.spawn(move || {
                    let prepared = prepare(t);
                    if prepared.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    start.wait();
                    let mut state = prepared?;
                    let cpu0 = thread_cpu_secs();
                    let t0 = Instant::now();
                    let mut excluded = Duration::ZERO;
                    let mut ops = 0u64;
                    // At least one operation, then check the flag before
                    // each next one: a worker the scheduler wakes only after
                    // the deadline still measures something.
                    loop {
                        match op(t, &mut state) {
                            Ok(Step::Op) => ops += 1,
                            Ok(Step::OpThenMaintain) => {
                                ops += 1;
                                let m0 = Instant::now();
                                let r = maintain(t, &mut state);
                                excluded += m0.elapsed();
                                if let Err(e) = r {
                                    stop.store(true, Ordering::Relaxed);
                                    return Err(e);
                                }
                            }
                            Ok(Step::Exhausted) => {
                                stop.store(true, Ordering::Relaxed);
                                break;
                            }
                            Err(e) => {
                                stop.store(true, Ordering::Relaxed);
                                return Err(e);
                            }
                        }
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                    let elapsed = t0.elapsed();
                    let cpu = thread_cpu_secs() - cpu0;
                    debug_assert!(excluded <= elapsed, "maintenance outside the window");
                    let secs = (elapsed - excluded).as_secs_f64();
                    Ok((ops, secs, cpu.max(0.0), state))
                })
            })
            .collect();
        start.wait();
        let deadline = Instant::now() + duration;
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= deadline || interrupted() {
                break;
            }
            std::thread::sleep(STOP_POLL.min(deadline - now));
        }
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a worker thread panicked".to_string()))
            })
            .collect()
    });
    let mut m = Measurement::default();
    let mut states = Vec::with_capacity(threads);
    for r in results {
        let (ops, secs, cpu, s) = r?;
        m.ops.push(ops);
        m.secs.push(secs);
        m.cpu_secs.push(cpu);
        states.push(s);
    }
    Ok((m, states))
}

/// One cell of the schedule: which workload, thread count, run and target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cell {
    pub workload: usize,
    pub threads: usize,
    pub run: usize,
    pub target: usize,
}

/// The order cells run in: for each workload, for each thread count, for
/// each run, every target in turn (A B C A B C …), so that the targets of a
/// ratio are measured side by side in time and drift hits all alike.
pub fn schedule(workloads: usize, threads: &[usize], runs: usize, targets: usize) -> Vec<Cell> {
    let mut cells = Vec::with_capacity(workloads * threads.len() * runs * targets);
    for w in 0..workloads {
        for &t in threads {
            for run in 0..runs {
                for target in 0..targets {
                    cells.push(Cell {
                        workload: w,
                        threads: t,
                        run,
                        target,
                    });
                }
            }
        }
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_interleaves_targets() {
        let cells = schedule(2, &[1, 2], 3, 3);
        assert_eq!(cells.len(), 2 * 2 * 3 * 3);
        let targets: Vec<usize> = cells.iter().map(|c| c.target).collect();
        for chunk in targets.chunks(3) {
            assert_eq!(chunk, &[0, 1, 2]);
        }
        // Runs of one (workload, threads) are consecutive rounds.
        assert_eq!(
            cells[..9].iter().map(|c| c.run).collect::<Vec<_>>(),
            vec![0, 0, 0, 1, 1, 1, 2, 2, 2]
        );
        assert!(cells[..18].iter().all(|c| c.workload == 0));
    }

    #[test]
    fn measure_counts_and_stops() {
        let (m, states) = measure(
            2,
            Duration::from_millis(50),
            |t| Ok(t as u64 * 1000),
            |_, s: &mut u64| {
                *s += 1;
                Ok(Step::Op)
            },
            |_, _| Ok(()),
        )
        .unwrap();
        assert_eq!(m.ops.len(), 2);
        assert!(m.total_ops() > 0);
        assert_eq!(states[0], m.ops[0]);
        assert_eq!(states[1], 1000 + m.ops[1]);
        assert!(m.secs_max() >= 0.04);
        // A busy loop burns CPU: most of its window, never more than it.
        assert_eq!(m.cpu_secs.len(), 2);
        assert!(m
            .cpu_secs
            .iter()
            .all(|&c| c > 0.0 && c <= m.secs_max() + 0.05));
        assert!(m.cpu_ns_per_op().unwrap() > 0.0);
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let mut v: Vec<u64> = (1..=100).rev().collect();
        assert_eq!(quantile(&mut v, 0.5), Some(50));
        assert_eq!(quantile(&mut v, 0.99), Some(99));
        assert_eq!(quantile(&mut v, 1.0), Some(100));
        assert_eq!(quantile(&mut [7], 0.99), Some(7));
        assert_eq!(quantile(&mut [], 0.5), None);
    }

    #[test]
    fn exhaustion_stops_everyone() {
        let (m, _) = measure(
            2,
            Duration::from_secs(30),
            |_| Ok(0u64),
            |t, s: &mut u64| {
                if t == 0 && *s == 10 {
                    return Ok(Step::Exhausted);
                }
                *s += 1;
                Ok(Step::Op)
            },
            |_, _| Ok(()),
        )
        .unwrap();
        assert_eq!(m.ops[0], 10);
        assert!(m.secs_max() < 10.0);
    }

    #[test]
    fn prepare_error_is_reported() {
        let r = measure(
            2,
            Duration::from_secs(30),
            |t| {
                if t == 1 {
                    Err("boom".to_string())
                } else {
                    Ok(())
                }
            },
            |_, _| Ok(Step::Op),
            |_, _| Ok(()),
        );
        assert_eq!(r.unwrap_err(), "boom");
    }
}
