//! Differential testing of lanefs against the Linux kernel.
//!
//! The same generated sequence of file-system operations ([`Case`]) runs on
//! two [`Target`]s: the engine through the `lanefs` Rust API
//! ([`EngineTarget`]) and any directory through real system calls
//! ([`KernelTarget`]: a fresh tmpfs from [`TmpfsMount`], or a lanefs FUSE
//! mount). After each step the outcomes (success and its value, or the
//! errno) must be equal; at the end the whole trees (names, types, modes,
//! owners, sizes, link counts, content hashes, symlink targets, extended
//! attributes) must be equal. [`run_case`] does both.
//!
//! ```no_run
//! use lanefs_difftest::{run_case, EngineTarget, KernelTarget, TmpfsMount, strategy};
//! use proptest::test_runner::{Config, TestRunner};
//!
//! let mount = TmpfsMount::new()?; // needs root
//! let mut runner = TestRunner::new(Config::with_cases(100));
//! runner
//!     .run(&strategy::case(32), |case| {
//!         let mut engine = EngineTarget::new(case.umask, false).unwrap();
//!         let dir = mount.fresh_dir().unwrap();
//!         let mut kernel = KernelTarget::new(&dir, case.umask, "tmpfs").unwrap();
//!         let r = run_case(&case, &mut engine, &mut kernel);
//!         drop(kernel);
//!         std::fs::remove_dir_all(&dir).unwrap();
//!         r.map_err(proptest::test_runner::TestCaseError::fail)
//!     })
//!     .unwrap();
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! Locks and atomics: none shared between targets. [`KernelTarget`] owns a
//! worker thread reached through two channels; [`TmpfsMount`] numbers its
//! directories with a relaxed atomic counter (uniqueness only).

mod engine;
mod kernel;
mod op;
pub mod strategy;
pub mod tree;

pub use engine::{clear_engine_flags, dtype, sized, EngineTarget};
pub use kernel::{clear_inode_flags, KernelTarget, TmpfsMount};
pub use op::{
    show, write_data, Case, Op, Outcome, ShowBytes, StatLite, Step, TimeArg, Value, Who, OP_NAMES,
    SLOTS,
};
pub use tree::Tree;

/// Something a [`Case`] can run on.
pub trait Target {
    /// A short label for reports ("lanefs", "tmpfs", "fuse").
    fn name(&self) -> &str;
    /// Run one step and report its outcome.
    fn apply(&mut self, step: &Step) -> Outcome;
    /// Close every open file of the case.
    fn close_all(&mut self);
    /// Everything below the root, seen by root.
    fn snapshot(&mut self) -> Result<Tree, String>;
    /// Whether `step` is a case of an accepted divergence
    /// (docs/SEMANTICS.md) in this target's present state, which the
    /// harness then runs on no target. The targets agree on everything
    /// before it, so one target's state decides for both.
    fn known_divergence(&mut self, _step: &Step) -> bool {
        false
    }
}

/// `/proc/sys/fs/protected_hardlinks` of the host (the engine is configured
/// the same way so that the two agree); `true` if unreadable (the default).
pub fn host_protected_hardlinks() -> bool {
    std::fs::read_to_string("/proc/sys/fs/protected_hardlinks")
        .map(|s| s.trim() != "0")
        .unwrap_or(true)
}

/// Drive a property test: generate up to `cases` cases of at most
/// `steps` steps (sticky bits stripped on hosts that need it, see
/// [`strip_sticky`]), give each to `run_one` (which builds the targets,
/// calls [`run_case_stats`] and tears down), shrink a failure to a minimal
/// case, and sum the statistics. Reusable for any pair of targets — the
/// engine against tmpfs, or a FUSE mount against tmpfs:
///
/// ```no_run
/// use lanefs_difftest::{run_case_stats, run_proptest, KernelTarget, Stats, TmpfsMount};
/// let tmpfs = TmpfsMount::new()?;
/// let fuse_root = std::path::Path::new("/mnt/lanefs"); // a mounted lanefs
/// let mut n = 0;
/// let stats = run_proptest(1000, 32, |case| {
///     n += 1;
///     let fuse_dir = fuse_root.join(format!("case-{}", n));
///     std::fs::create_dir(&fuse_dir).map_err(|e| e.to_string())?;
///     let mut fuse = KernelTarget::new(&fuse_dir, case.umask, "fuse").map_err(|e| e.to_string())?;
///     let kdir = tmpfs.fresh_dir().map_err(|e| e.to_string())?;
///     let mut kernel = KernelTarget::new(&kdir, case.umask, "tmpfs").map_err(|e| e.to_string())?;
///     let mut stats = Stats::default();
///     run_case_stats(case, &mut fuse, &mut kernel, &mut stats).map(|()| stats)
/// })
/// .map_err(std::io::Error::other)?;
/// println!("{}", stats);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn run_proptest<F>(cases: u32, steps: usize, run_one: F) -> Result<Stats, String>
where
    F: FnMut(&Case) -> Result<Stats, String>,
{
    use proptest::test_runner::{Config, TestCaseError, TestRunner};
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 4096,
        ..Config::default()
    };
    let strip = host_protects_sticky_dirs();
    let run_one = std::cell::RefCell::new(run_one);
    let total = std::cell::RefCell::new(Stats::default());
    let mut runner = TestRunner::new(config);
    let result = runner.run(&strategy::case(steps), |mut case| {
        if strip {
            strip_sticky(&mut case);
        }
        let stats = (run_one.borrow_mut())(&case).map_err(TestCaseError::fail)?;
        total.borrow_mut().merge(&stats);
        Ok(())
    });
    match result {
        Ok(()) => Ok(total.into_inner()),
        Err(e) => Err(e.to_string()),
    }
}

/// Whether the host applies `fs.protected_symlinks`, `protected_regular`
/// or `protected_fifos` (restrictions in sticky world-writable
/// directories that lanefs does not implement). When it does, cases must
/// not create sticky directories: see [`strip_sticky`].
pub fn host_protects_sticky_dirs() -> bool {
    ["protected_symlinks", "protected_regular", "protected_fifos"]
        .iter()
        .any(|f| {
            std::fs::read_to_string(format!("/proc/sys/fs/{}", f))
                .map(|s| s.trim() != "0")
                .unwrap_or(false)
        })
}

/// Remove the sticky bit from every mode a case sets, so that the host's
/// sticky-directory protections never apply (both targets run the same
/// stripped case).
pub fn strip_sticky(case: &mut Case) {
    for step in &mut case.steps {
        match &mut step.op {
            Op::Create { mode, .. }
            | Op::Mknod { mode, .. }
            | Op::Mkdir { mode, .. }
            | Op::Open { mode, .. }
            | Op::Fchmod { mode, .. }
            | Op::Chmod { mode, .. } => *mode &= !0o1000,
            _ => {}
        }
    }
}

/// Name of the environment variable that selects the engine's variants
/// for [`EngineTarget::new`] (`mechanism=design,…` as
/// [`lanefs::Variants::parse`] reads it; unset or empty: the default).
pub const VARIANTS_ENV: &str = "LANEFS_VARIANTS";

/// The engine variants `$LANEFS_VARIANTS` names; the default when unset.
pub fn variants_from_env() -> Result<lanefs::Variants, String> {
    match std::env::var(VARIANTS_ENV) {
        Ok(s) => lanefs::Variants::parse(&s).map_err(|e| format!("{VARIANTS_ENV}={s:?}: {e}")),
        Err(_) => Ok(lanefs::Variants::default()),
    }
}

/// Cases to run: `env_var` if set to a number, else `default`.
pub fn cases_from_env(env_var: &str, default: u32) -> u32 {
    std::env::var(env_var)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// Whether two outcomes of `op` agree. Exact, except where a divergence is
/// accepted (each one is listed in `docs/SEMANTICS.md`).
pub fn outcomes_agree(_op: &Op, a: &Outcome, b: &Outcome) -> bool {
    a == b
}

/// How often each operation succeeded and failed (by errno), summed over
/// cases: shows what a run really exercised.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// operation name → (successes, failures by errno).
    pub ops: std::collections::BTreeMap<&'static str, (u64, std::collections::BTreeMap<i32, u64>)>,
    pub cases: u64,
}

impl Stats {
    /// Count one agreed outcome.
    pub fn record(&mut self, op: &Op, outcome: &Outcome) {
        let e = self.ops.entry(op.kind_name()).or_default();
        match outcome {
            Ok(Value::Skipped) => {}
            Ok(_) => e.0 += 1,
            Err(n) => *e.1.entry(*n).or_default() += 1,
        }
    }

    /// Add another run's counts.
    pub fn merge(&mut self, other: &Stats) {
        self.cases += other.cases;
        for (k, (ok, errs)) in &other.ops {
            let e = self.ops.entry(k).or_default();
            e.0 += ok;
            for (n, c) in errs {
                *e.1.entry(*n).or_default() += c;
            }
        }
    }

    /// Operations that never succeeded or never failed.
    pub fn one_sided(&self) -> Vec<String> {
        OP_NAMES
            .iter()
            .filter_map(|name| match self.ops.get(name) {
                None => Some(format!("{}: never run", name)),
                Some((0, _)) => Some(format!("{}: never succeeded", name)),
                Some((_, errs)) if errs.is_empty() && !matches!(*name, "fsync" | "close") => {
                    Some(format!("{}: never failed", name))
                }
                _ => None,
            })
            .collect()
    }
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{} cases", self.cases)?;
        for (name, (ok, errs)) in &self.ops {
            write!(f, "  {:<12} ok {:>7}", name, ok)?;
            for (n, c) in errs {
                write!(f, "  {} {}", lanefs::Errno(*n).name().unwrap_or("?"), c)?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// Run `case` on `a` and `b`, comparing every step and then the trees.
/// The error describes the first difference and the whole case.
pub fn run_case(case: &Case, a: &mut dyn Target, b: &mut dyn Target) -> Result<(), String> {
    run_case_stats(case, a, b, &mut Stats::default())
}

/// As [`run_case`], counting outcomes into `stats`.
pub fn run_case_stats(
    case: &Case,
    a: &mut dyn Target,
    b: &mut dyn Target,
    stats: &mut Stats,
) -> Result<(), String> {
    stats.cases += 1;
    // Operations on an open file run as whoever opened it: the core's
    // handle-based calls (write, ftruncate, fchmod) act with the opener's
    // credential, while the kernel would use the caller's.
    let mut opener = [Who::Root; SLOTS];
    for (i, step) in case.steps.iter().enumerate() {
        let mut step = step.clone();
        match &step.op {
            Op::Open { slot, .. } => {
                if let Some(o) = opener.get_mut(*slot) {
                    *o = step.who;
                }
            }
            Op::Write { slot, .. }
            | Op::Read { slot, .. }
            | Op::Seek { slot, .. }
            | Op::Ftruncate { slot, .. }
            | Op::Fallocate { slot, .. }
            | Op::Fsync { slot, .. }
            | Op::Fchmod { slot, .. }
            | Op::Fstat { slot }
            | Op::Close { slot } => {
                if let Some(o) = opener.get(*slot) {
                    step.who = *o;
                }
            }
            _ => {}
        }
        let step = &step;
        if a.known_divergence(step) || b.known_divergence(step) {
            stats.record(&step.op, &Ok(Value::Skipped));
            continue;
        }
        let oa = a.apply(step);
        let ob = b.apply(step);
        if !outcomes_agree(&step.op, &oa, &ob) {
            return Err(format!(
                "step {} {:?}:\n    {}: {}\n    {}: {}\n{:?}",
                i,
                step,
                a.name(),
                show(&oa),
                b.name(),
                show(&ob),
                case
            ));
        }
        stats.record(&step.op, &oa);
    }
    a.close_all();
    b.close_all();
    let ta = a.snapshot()?;
    let tb = b.snapshot()?;
    let diff = ta.diff(a.name(), &tb, b.name());
    if !diff.is_empty() {
        return Err(format!(
            "trees differ after all steps:\n  {}\n{:?}",
            diff.join("\n  "),
            case
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::Node;

    fn node(mode: u32) -> Node {
        Node {
            mode,
            uid: 0,
            gid: 0,
            size: 0,
            nlink: 1,
            rdev: 0,
            content: Some(tree::fnv(b"")),
            target: None,
            xattrs: Vec::new(),
            flags: 0,
        }
    }

    #[test]
    fn tree_diff_reports_missing_extra_and_changed() {
        let mut a = Tree::default();
        let mut b = Tree::default();
        a.0.insert(b"/x".to_vec(), node(0o100644));
        b.0.insert(b"/x".to_vec(), node(0o100600));
        a.0.insert(b"/only-a".to_vec(), node(0o100644));
        b.0.insert(b"/only-b".to_vec(), node(0o100644));
        let d = a.diff("A", &b, "B");
        assert_eq!(d.len(), 3, "{:#?}", d);
        assert!(d
            .iter()
            .any(|l| l.contains("only-a") && l.contains("only on A")));
        assert!(d
            .iter()
            .any(|l| l.contains("only-b") && l.contains("only on B")));
        assert!(d.iter().any(|l| l.contains("\"/x\" differs")));
        assert!(a.diff("A", &a, "A").is_empty());
    }

    #[test]
    fn xattr_size_rules() {
        assert_eq!(sized(5, 0).ok(), Some(Some(5)));
        assert_eq!(sized(5, 5).ok(), Some(None));
        let e = sized(5, 4).expect_err("too small");
        assert_eq!(e.raw_os_error(), Some(libc::ERANGE));
    }

    #[test]
    fn strip_sticky_clears_only_the_sticky_bit() {
        let mut case = Case {
            umask: 0,
            steps: vec![
                Step {
                    who: Who::Root,
                    op: Op::Chmod {
                        path: b"a".to_vec(),
                        mode: 0o7777,
                    },
                },
                Step {
                    who: Who::Root,
                    op: Op::Mkdir {
                        path: b"b".to_vec(),
                        mode: 0o1777,
                    },
                },
            ],
        };
        strip_sticky(&mut case);
        assert!(matches!(case.steps[0].op, Op::Chmod { mode: 0o6777, .. }));
        assert!(matches!(case.steps[1].op, Op::Mkdir { mode: 0o777, .. }));
    }

    #[test]
    fn content_hash_of_huge_sparse_files_reads_head_and_tail_only() {
        let mut reads = Vec::new();
        let size = 1u64 << 40;
        let h = tree::hash_content::<()>(size, |buf, off| {
            reads.push((off, buf.len()));
            buf.fill(0);
            Ok(buf.len())
        })
        .expect("hash");
        let total: usize = reads.iter().map(|r| r.1).sum();
        assert_eq!(total as u64, tree::HASH_HEAD_BYTES + 4096);
        assert_eq!(reads.last().map(|r| r.0), Some(size - 4096));
        assert_eq!(h, tree::fnv(&vec![0u8; total]));
    }

    #[test]
    fn engine_targets_agree_with_each_other() {
        // Two engines (one shrinking after every step) must agree on any
        // case: a harness self-check that needs no root.
        use proptest::strategy::{Strategy, ValueTree};
        use proptest::test_runner::TestRunner;
        let mut runner = TestRunner::deterministic();
        for _ in 0..50 {
            let case = strategy::case(24)
                .new_tree(&mut runner)
                .expect("generate")
                .current();
            let mut a = EngineTarget::new(case.umask, false).expect("engine");
            let mut b = EngineTarget::new(case.umask, true).expect("engine");
            let r = run_case(&case, &mut a, &mut b);
            assert!(r.is_ok(), "{}", r.err().unwrap_or_default());
        }
    }
}
