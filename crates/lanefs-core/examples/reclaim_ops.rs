//! The reclaim registries' own costs, apart from the engine: one thread
//! registers and unregisters a shrinker in a loop while another scans the
//! registry without pause (the seed001 shape, without `Fs::new`). Prints,
//! per design, nanoseconds per register+unregister pair and scans per
//! second. A measurement tool, not a test: `cargo run --release -p
//! lanefs-core --example reclaim_ops [pairs]`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use lanefs_core::{new_registry, ReclaimRegistry, ReclaimVariant, Shrinker};

/// Register+unregister pairs per design unless given on the command line.
const DEFAULT_PAIRS: u64 = 200_000;
/// Shrinkers that stay registered throughout (other mounts of the process).
const RESIDENT_SHRINKERS: usize = 8;

struct Idle;
impl Shrinker for Idle {
    fn count(&self) -> usize {
        0
    }
    fn scan(&self, _: usize) -> usize {
        0
    }
}

fn main() {
    let pairs: u64 = std::env::args()
        .nth(1)
        .map_or(DEFAULT_PAIRS, |a| a.parse().expect("pairs: a number"));
    for v in [
        ReclaimVariant::Deferred,
        ReclaimVariant::RwLock,
        ReclaimVariant::SyncGrace,
    ] {
        let r: Arc<dyn ReclaimRegistry> = Arc::from(new_registry(v));
        let resident: Vec<_> = (0..RESIDENT_SHRINKERS)
            .map(|_| r.register(Arc::new(Idle)))
            .collect();
        let stop = AtomicBool::new(false);
        let scans = AtomicU64::new(0);
        let (elapsed, scan_count) = std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    r.shrink_all(128);
                    scans.fetch_add(1, Ordering::Relaxed);
                }
            });
            while scans.load(Ordering::Relaxed) == 0 {
                std::thread::yield_now();
            }
            let before = scans.load(Ordering::Relaxed);
            let t0 = Instant::now();
            for _ in 0..pairs {
                let id = r.register(Arc::new(Idle));
                r.unregister(id);
            }
            let elapsed = t0.elapsed();
            let scan_count = scans.load(Ordering::Relaxed) - before;
            stop.store(true, Ordering::Relaxed);
            (elapsed, scan_count)
        });
        for id in resident {
            r.unregister(id);
        }
        assert!(r.is_empty());
        println!(
            "{v:?}: {:.0} ns per register+unregister, {:.0} scans/s",
            elapsed.as_nanos() as f64 / pairs as f64,
            scan_count as f64 / elapsed.as_secs_f64()
        );
    }
}
