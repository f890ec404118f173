//! Running one pair: the commutativity check and the conflict check.
//!
//! Two long-lived worker threads play the two sides, pinned to lanes 1 and
//! 2 (`lanefs_store::set_lane`); preparation runs on the calling thread,
//! pinned to lane 0 by [`Runner::new`]. Long-lived, so that a thread's
//! first-use set-up (its epoch participant, its lane's shards) is not
//! charged to the pair it happens to run first.
//!
//! * Commutes: from a fresh state run A (side 0) then B (side 1); from
//!   another fresh state B then A; the pair commutes iff each op's result
//!   and the final observable state (see `world`) agree.
//! * Conflict-free: from a fresh state, A runs on side 0 recording, then B
//!   on side 1 recording; conflict-free iff neither wrote a cache line or
//!   store key the other read or wrote.
//!
//! Locks: none of its own; each job's result comes back over a channel.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use lanefs_core::Variants;

use crate::ops::{Op, Raw};
use crate::world::World;

type Job = Box<dyn FnOnce() + Send>;

/// One side's thread.
struct Worker {
    tx: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    fn new(lane: usize) -> Worker {
        let (tx, rx) = channel::<Job>();
        let thread = std::thread::spawn(move || {
            lanefs_store::set_lane(lane);
            for job in rx {
                job();
            }
        });
        Worker {
            tx: Some(tx),
            thread: Some(thread),
        }
    }

    /// Run `f` on this worker and wait for it; a panic comes back as `Err`.
    fn run<R: Send + 'static>(&self, f: impl FnOnce() -> R + Send + 'static) -> Result<R, String> {
        let (rtx, rrx) = channel();
        let job: Job = Box::new(move || {
            let r = catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panic".into())
            });
            let _ = rtx.send(r);
        });
        let tx = self.tx.as_ref().ok_or("worker stopped")?;
        tx.send(job).map_err(|_| "worker gone".to_string())?;
        rrx.recv().map_err(|_| "worker gone".to_string())?
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A shared location both ops touched, one of them writing it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Conflict {
    /// `line 0x…` (a cache line) or `key …` (a store key).
    pub location: String,
    /// `atomic`, `mutex`, `rwlock` or `key`.
    pub what: String,
    /// Where each side touched it: `file:line (r|w)`.
    pub a_sites: Vec<String>,
    pub b_sites: Vec<String>,
    /// Whether one side wrote a word the other touched (`true`), or the
    /// two touched only different words of one cache line (`false`:
    /// false sharing, which padding or layout would fix). Keys: `true`.
    pub same_word: bool,
    /// The sites (no `(w)`) that wrote a word the other side touched; a
    /// write site of the conflict not listed here is false sharing.
    pub word_writers: Vec<String>,
}

/// What became of one pair.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PairResult {
    pub a: String,
    pub b: String,
    pub a_kind: &'static str,
    pub b_kind: &'static str,
    pub config: String,
    pub commutes: bool,
    /// Why not, when it does not commute (the first difference).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub differs: Option<String>,
    /// Only for commuting pairs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conflict_free: Option<bool>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<Conflict>,
    /// A failure of the harness (preparation, a panic).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The two sides' threads and the variant being audited.
pub struct Runner {
    workers: [Worker; 2],
    variants: Variants,
}

/// One recorded access, reduced: (target, exact address, write, what, site).
type Touch = (Target, usize, bool, &'static str, String);

/// What was touched: a cache line or a store key (a key ending in `*` is
/// a prefix that covers every key it begins).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    Line(usize),
    Key(String),
}

impl Runner {
    pub fn new(variants: Variants) -> Runner {
        lanefs_store::set_lane(0);
        Runner {
            workers: [Worker::new(1), Worker::new(2)],
            variants,
        }
    }

    fn world(&self) -> Result<Arc<World>, String> {
        World::prepare(&self.variants)
            .map(Arc::new)
            .map_err(|e| format!("prepare: {e}"))
    }

    /// Run `op` as side `side` on `world`, recording if `record`.
    fn run_op(
        &self,
        world: &Arc<World>,
        side: usize,
        op: &Op,
        record: bool,
    ) -> Result<(Raw, Vec<Touch>), String> {
        let (w, o) = (world.clone(), op.clone());
        self.workers[side].run(move || {
            if record {
                start();
            }
            let r = o.run(&w, side);
            let log = if record { stop() } else { Vec::new() };
            (r, log)
        })
    }

    /// Results and observed state after running `first` then `second`.
    fn ordered(&self, ops: [(&Op, usize); 2]) -> Result<(Vec<String>, Vec<String>), String> {
        let world = self.world()?;
        let mut raws = Vec::new();
        for (op, side) in ops {
            raws.push(self.run_op(&world, side, op, false)?.0);
        }
        let obs = world.observe();
        let results = raws.iter().map(|r| obs.result(r)).collect();
        Ok((results, obs.lines))
    }

    /// Check and audit one pair.
    pub fn pair(&self, a: &Op, b: &Op) -> PairResult {
        let mut res = PairResult {
            a: a.to_string(),
            b: b.to_string(),
            a_kind: a.kind(),
            b_kind: b.kind(),
            config: crate::pairs::config(a, b),
            commutes: false,
            differs: None,
            conflict_free: None,
            conflicts: Vec::new(),
            error: None,
        };
        if let Err(e) = self.try_pair(a, b, &mut res) {
            res.error = Some(e);
        }
        res
    }

    fn try_pair(&self, a: &Op, b: &Op, res: &mut PairResult) -> Result<(), String> {
        let (ab_results, ab_state) = self.ordered([(a, 0), (b, 1)])?;
        let (mut ba_results, ba_state) = self.ordered([(b, 1), (a, 0)])?;
        ba_results.reverse();
        if ab_results != ba_results {
            res.differs = Some(format!(
                "results: A;B gives {ab_results:?}, B;A gives {ba_results:?}"
            ));
            return Ok(());
        }
        if ab_state != ba_state {
            let diff = ab_state
                .iter()
                .zip(&ba_state)
                .find(|(x, y)| x != y)
                .map(|(x, y)| format!("state: A;B has {x:?}, B;A has {y:?}"))
                .unwrap_or_else(|| "state: different number of paths".into());
            res.differs = Some(diff);
            return Ok(());
        }
        res.commutes = true;
        if !recording_available() {
            return Err(NOT_BUILT.into());
        }
        let world = self.world()?;
        // Whether a change of a process-wide per-lane counter folds
        // depends on what its lane's shard holds; settle them so that it
        // depends on the pair alone (the audit tests run beside each other
        // on the same lanes).
        #[cfg(feature = "audit")]
        lanefs_core::settle_for_audit();
        let (_, ta) = self.run_op(&world, 0, a, true)?;
        let (_, tb) = self.run_op(&world, 1, b, true)?;
        drop(world);
        res.conflicts = conflicts(&ta, &tb);
        res.conflict_free = Some(res.conflicts.is_empty());
        Ok(())
    }
}

/// The message for a build without the recorder.
pub const NOT_BUILT: &str = "lanefs-audit was built without the `audit` feature: \
     cargo run --release -p lanefs-cli --features audit -- audit";

/// Whether this build records accesses.
pub fn recording_available() -> bool {
    cfg!(feature = "audit")
}

#[cfg(feature = "audit")]
fn start() {
    lanefs_core::audit::start();
}

#[cfg(feature = "audit")]
fn stop() -> Vec<Touch> {
    use lanefs_core::audit::{Site, Target as T};
    lanefs_core::audit::stop()
        .into_iter()
        .map(|a| {
            let target = match a.target {
                T::Line(l) => Target::Line(l),
                T::Key(k) => Target::Key(k),
            };
            let site = match a.site {
                Site::Code(l) => format!("{}:{}", short(l.file()), l.line()),
                Site::Store(call) => format!("store::{call}"),
            };
            (target, a.addr, a.write, a.what, site)
        })
        .collect()
}

#[cfg(not(feature = "audit"))]
fn start() {}

#[cfg(not(feature = "audit"))]
fn stop() -> Vec<Touch> {
    Vec::new()
}

/// A source path from `crates/…` on (cargo may give it absolute).
#[cfg_attr(not(feature = "audit"), allow(dead_code))]
fn short(file: &str) -> &str {
    file.find("crates/").map_or(file, |i| &file[i..])
}

/// Of one target: whether written, what it is, the sites (with r/w), and
/// the exact accesses (address, written, site).
type Touched = (
    bool,
    &'static str,
    BTreeSet<String>,
    BTreeSet<(usize, bool, String)>,
);
/// Per target, what [`Touched`] it.
type Summary = BTreeMap<Target, Touched>;

fn summarise(log: &[Touch]) -> Summary {
    let mut m: Summary = BTreeMap::new();
    for (t, addr, w, what, site) in log {
        let e = m
            .entry(t.clone())
            .or_insert((false, what, BTreeSet::new(), BTreeSet::new()));
        e.0 |= *w;
        e.2.insert(format!("{site} ({})", if *w { "w" } else { "r" }));
        e.3.insert((*addr, *w, site.clone()));
    }
    m
}

fn covers(a: &str, b: &str) -> bool {
    a == b
        || a.strip_suffix('*').is_some_and(|p| b.starts_with(p))
        || b.strip_suffix('*').is_some_and(|p| a.starts_with(p))
}

/// The locations both logs touched with at least one write.
fn conflicts(a: &[Touch], b: &[Touch]) -> Vec<Conflict> {
    let (sa, sb) = (summarise(a), summarise(b));
    let keys_b: Vec<(&String, &Touched)> = sb
        .iter()
        .filter_map(|(t, v)| match t {
            Target::Key(k) => Some((k, v)),
            Target::Line(_) => None,
        })
        .collect();
    let mut out = Vec::new();
    for (t, (wa, what, sites_a, addrs_a)) in &sa {
        let mut hit = |location: String, b: &Touched, word_writers: Vec<String>| {
            if *wa || b.0 {
                out.push(Conflict {
                    location,
                    what: what.to_string(),
                    a_sites: sites_a.iter().cloned().collect(),
                    b_sites: b.2.iter().cloned().collect(),
                    same_word: !word_writers.is_empty(),
                    word_writers,
                });
            }
        };
        match t {
            Target::Line(l) => {
                if let Some(b) = sb.get(t) {
                    let writers = word_writers(addrs_a, &b.3);
                    hit(format!("line {:#x}", l * 64), b, writers);
                }
            }
            Target::Key(k) => {
                for (kb, b) in &keys_b {
                    if covers(k, kb) {
                        let loc = if k == *kb {
                            format!("key {k}")
                        } else {
                            format!("key {k} ~ {kb}")
                        };
                        let writers = addrs_a
                            .iter()
                            .chain(&b.3)
                            .filter(|x| x.1)
                            .map(|x| x.2.clone())
                            .collect();
                        hit(loc, b, writers);
                    }
                }
            }
        }
    }
    out
}

/// The write sites (either side) of an address the other side touched.
fn word_writers(
    a: &BTreeSet<(usize, bool, String)>,
    b: &BTreeSet<(usize, bool, String)>,
) -> Vec<String> {
    let mut out = BTreeSet::new();
    for (x, wx, sx) in a {
        for (y, wy, sy) in b {
            if x == y {
                if *wx {
                    out.insert(sx.clone());
                }
                if *wy {
                    out.insert(sy.clone());
                }
            }
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_cover_the_keys_they_begin() {
        assert!(covers("d/5/*", "d/5/x"));
        assert!(covers("d/5/x", "d/5/*"));
        assert!(!covers("d/5/*", "d/50/x"));
        assert!(!covers("d/5/x", "d/5/y"));
        let touch = |t: Target, addr: usize, w: bool, what: &'static str, site: &str| {
            vec![(t, addr, w, what, site.to_string())]
        };
        let a = touch(
            Target::Key("d/5/*".into()),
            0,
            false,
            "key",
            "store::dir_read",
        );
        let b = touch(
            Target::Key("d/5/new".into()),
            0,
            true,
            "key",
            "store::commit",
        );
        let c = conflicts(&a, &b);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].a_sites, vec!["store::dir_read (r)".to_string()]);
        assert_eq!(c[0].word_writers, vec!["store::commit".to_string()]);
        let reads = touch(Target::Line(7), 7 * 64, false, "atomic", "x.rs:1");
        assert!(
            conflicts(&reads, &reads).is_empty(),
            "two reads never conflict"
        );
        let same = touch(Target::Line(7), 7 * 64, true, "atomic", "x.rs:2");
        let c = conflicts(&same, &reads);
        assert!(c[0].same_word);
        assert_eq!(c[0].word_writers, vec!["x.rs:2".to_string()]);
        let other_word = touch(Target::Line(7), 7 * 64 + 8, true, "atomic", "x.rs:3");
        let c = conflicts(&other_word, &reads);
        assert_eq!(c.len(), 1, "one line: a conflict");
        assert!(!c[0].same_word, "different words: false sharing");
    }
}
