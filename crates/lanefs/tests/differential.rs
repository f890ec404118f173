//! Differential test against the Linux kernel: generated operation
//! sequences (bad inputs and unprivileged callers included) run on the
//! engine and, through real system calls, on a fresh directory of a tmpfs
//! mounted for this run; every step's outcome and the final trees must be
//! equal. The harness is `lanefs-difftest`; accepted divergences are listed
//! in `docs/SEMANTICS.md`.
//!
//! Knobs (environment):
//! * `LANEFS_DIFF_CASES` — cases per test (default 2000; CI's soak run
//!   uses 100000);
//! * `LANEFS_DIFF_STEPS` — most steps per case (default 48);
//! * `LANEFS_VARIANTS` — engine variants of the two main tests (default:
//!   the production designs);
//! * `LANEFS_DIFF_VARIANT_CASES` — cases per baseline in
//!   `differential_every_baseline` (default 300), which runs each seed
//!   "before" design (`Variants::baselines()`) against tmpfs.
//!
//! Needs root (mount, chroot, setfsuid). After each case the engine must
//! also pass `Fs::check()`, and once everything is removed its memory store
//! must hold only the root inode and no pages.

use std::os::unix::ffi::OsStrExt;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use lanefs::{FileKind, Filesystem, Variants};
use lanefs_difftest::{
    cases_from_env, run_case_stats, run_proptest, strategy, Case, EngineTarget, KernelTarget,
    Stats, TmpfsMount,
};

const CASES_DEFAULT: u32 = 2000;
/// Cases per baseline variant in `differential_every_baseline`.
const VARIANT_CASES_DEFAULT: u32 = 300;

/// Remove everything below the root, then check that the store holds only
/// the root inode and no data pages.
fn drain_and_check_leaks(fs: &Filesystem) -> Result<(), String> {
    lanefs_difftest::clear_engine_flags(fs).map_err(|e| format!("clearing flags: {e}"))?;
    for e in fs.read_dir("/").map_err(|e| e.to_string())? {
        let e = e.map_err(|e| e.to_string())?;
        let mut p = b"/".to_vec();
        p.extend_from_slice(e.name_bytes());
        let p = std::path::Path::new(std::ffi::OsStr::from_bytes(&p));
        let r = if e.kind() == FileKind::Directory {
            fs.remove_dir_all(p)
        } else {
            fs.remove_file(p)
        };
        r.map_err(|err| format!("cleanup of {:?} failed: {}", p, err))?;
    }
    fs.sync().map_err(|e| e.to_string())?;
    fs.core().shrink();
    fs.core()
        .check()
        .map_err(|p| format!("check after cleanup: {:?}", p))?;
    if let Some(store) = fs.memory_store() {
        let (inodes, pages) = (store.inode_records(), store.page_records());
        if inodes != 1 || pages != 0 {
            return Err(format!(
                "leak after removing everything: {} inode records (want 1), {} pages (want 0)",
                inodes, pages
            ));
        }
    }
    Ok(())
}

fn one_case(
    mount: &TmpfsMount,
    case: &Case,
    shrink: bool,
    variants: Variants,
) -> Result<Stats, String> {
    let mut stats = Stats::default();
    let mut engine =
        EngineTarget::with_variants(case.umask, shrink, variants).map_err(|e| e.to_string())?;
    let dir = mount.fresh_dir().map_err(|e| e.to_string())?;
    let mut kernel = KernelTarget::new(&dir, case.umask, "tmpfs").map_err(|e| e.to_string())?;
    let mut result = run_case_stats(case, &mut engine, &mut kernel, &mut stats);
    drop(kernel);
    lanefs_difftest::clear_inode_flags(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    if result.is_ok() {
        result = engine
            .fs()
            .core()
            .check()
            .map_err(|p| format!("Fs::check after the case: {:?}\n{:?}", p, case));
    }
    if result.is_ok() {
        result = drain_and_check_leaks(engine.fs()).map_err(|e| format!("{}\n{:?}", e, case));
    }
    result.map(|()| stats)
}

/// A case that runs longer than this is reported as a hang (deadlock):
/// the process prints the case and exits, since a blocked thread cannot be
/// cancelled.
const CASE_DEADLINE: Duration = Duration::from_secs(120);

fn one_case_with_deadline(
    mount: &Arc<TmpfsMount>,
    case: &Case,
    shrink: bool,
    variants: Variants,
) -> Result<Stats, String> {
    let (tx, rx) = mpsc::channel();
    let (m, c) = (mount.clone(), case.clone());
    std::thread::spawn(move || {
        let _ = tx.send(one_case(&m, &c, shrink, variants));
    });
    match rx.recv_timeout(CASE_DEADLINE) {
        Ok(r) => r,
        Err(_) => {
            eprintln!(
                "differential case ({}) did not finish in {:?} (deadlock?); exiting\n{:?}",
                variants, CASE_DEADLINE, case
            );
            mount.unmount();
            std::process::exit(101);
        }
    }
}

fn differential(shrink: bool, variants: Variants, cases: u32) {
    let mount = match TmpfsMount::new() {
        Ok(m) => Arc::new(m),
        Err(e) => panic!(
            "the differential test needs root to mount a tmpfs (mount failed: {}); \
             run the tests as root",
            e
        ),
    };
    let steps = cases_from_env("LANEFS_DIFF_STEPS", strategy::STEPS_MAX as u32) as usize;
    let result = run_proptest(cases, steps, |case| {
        one_case_with_deadline(&mount, case, shrink, variants)
    });
    drop(mount);
    let total = match result {
        Ok(total) => total,
        Err(e) => panic!("variants {}: {}", variants, e),
    };
    eprintln!(
        "differential (variants {}, shrink every step: {}): {}",
        variants, shrink, total
    );
    // The generator must reach both sides of every operation, or the run
    // proves little.
    if total.cases >= MIN_CASES_FOR_COVERAGE {
        let gaps = total.one_sided();
        assert!(gaps.is_empty(), "weak coverage: {:?}\n{}", gaps, total);
    }
}

/// Below this many cases a run is too small to demand full coverage.
const MIN_CASES_FOR_COVERAGE: u64 = 2000;

fn variants() -> Variants {
    lanefs_difftest::variants_from_env().unwrap_or_else(|e| panic!("{}", e))
}

#[test]
fn differential_vs_tmpfs() {
    let cases = cases_from_env("LANEFS_DIFF_CASES", CASES_DEFAULT);
    differential(false, variants(), cases);
}

/// The same, with every unreferenced cached object evicted after each step
/// (`Fs::shrink`), so that everything is read back from the store.
#[test]
fn differential_vs_tmpfs_shrink_every_step() {
    let cases = cases_from_env("LANEFS_DIFF_CASES", CASES_DEFAULT);
    differential(true, variants(), cases);
}

/// Every seed "before" design must give exactly the default's results:
/// fewer cases each, half of them with the caches shrunk after every step
/// (so that loads, evictions and reclaim run through the variant too).
#[test]
fn differential_every_baseline() {
    let cases = cases_from_env("LANEFS_DIFF_VARIANT_CASES", VARIANT_CASES_DEFAULT);
    for (name, v) in Variants::baselines() {
        eprintln!("differential: baseline {}", name);
        differential(false, v, cases.div_ceil(2));
        differential(true, v, cases / 2);
    }
}
