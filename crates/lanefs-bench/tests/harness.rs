//! Harness tests: every workload's post-condition on every target a test can
//! run (inproc, a tmpfs directory, the peers), the seed experiments under
//! every engine variant, the JSON schema, the PNG, and the interleaving
//! order.

use lanefs_bench::backend::inproc::Inproc;
use lanefs_bench::backend::sys::SysFs;
use lanefs_bench::backend::Backend;
use lanefs_bench::cli::{self, BenchArgs};
use lanefs_bench::results::{Machine, Options, Results, SCHEMA};
use lanefs_bench::workload::{self, Params, Workload};
use std::cell::RefCell;
use std::path::PathBuf;
use std::time::Duration;

fn params() -> Params {
    Params {
        duration: Duration::from_millis(30),
        files: 300,
        fsmark_bytes: 1000,
        seed: 7,
    }
}

/// Run every workload at 1 and 2 threads; each must succeed (its
/// post-condition is checked inside `workload::run`) or be declared n/a by
/// the backend.
fn all_workloads<B: Backend>(make: impl Fn() -> B) -> Vec<(Workload, String)> {
    let mut na = Vec::new();
    for &w in Workload::MATRIX {
        for threads in [1, 2] {
            let b = make();
            if let Some(why) = b.unsupported(w) {
                na.push((w, why.to_string()));
                continue;
            }
            let m = workload::run(&b, w, threads, &params())
                .unwrap_or_else(|e| panic!("{} {} {threads}t: {e}", b.kind(), w.name()));
            assert_eq!(m.ops.len(), threads);
            assert!(
                m.total_ops() > 0,
                "{} {} {threads}t did no operation",
                b.kind(),
                w.name()
            );
        }
    }
    na
}

#[test]
fn workloads_on_inproc() {
    let na = all_workloads(|| Inproc::new("default").unwrap());
    assert!(na.is_empty(), "inproc must express every workload: {na:?}");
}

/// A tmpfs directory if the machine has one at /dev/shm, else the temp dir.
fn scratch(tag: &str) -> PathBuf {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let base = if mounts
        .lines()
        .any(|l| l.split(' ').nth(1) == Some("/dev/shm") && l.split(' ').nth(2) == Some("tmpfs"))
    {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    base.join(format!("lanefs-bench-test.{}.{tag}", std::process::id()))
}

#[test]
fn workloads_on_syscalls() {
    let root = scratch("sys");
    let n = RefCell::new(0);
    let na = all_workloads(|| {
        *n.borrow_mut() += 1;
        let dir = root.join(format!("r{}", n.borrow()));
        std::fs::create_dir_all(&dir).unwrap();
        SysFs::open(&dir).unwrap()
    });
    std::fs::remove_dir_all(&root).unwrap();
    assert!(
        na.is_empty(),
        "syscalls must express every workload: {na:?}"
    );
}

#[cfg(feature = "peers")]
#[test]
fn workloads_on_peers() {
    use lanefs_bench::backend::peers::{RsfsPeer, VfsPeer};
    let na = all_workloads(RsfsPeer::new);
    assert!(na.is_empty(), "rsfs: {na:?}");
    let na: Vec<Workload> = all_workloads(VfsPeer::new)
        .into_iter()
        .map(|(w, _)| w)
        .collect();
    assert_eq!(
        na,
        vec![
            Workload::Dwol,
            Workload::Dwol,
            Workload::Dwom,
            Workload::Dwom,
            Workload::Dwtl,
            Workload::Dwtl,
            Workload::FsmarkSync,
            Workload::FsmarkSync
        ]
    );
}

#[test]
fn create_makes_exactly_the_files_counted() {
    let b = Inproc::new("default").unwrap();
    let m = workload::run(&b, Workload::Mwcl, 2, &params()).unwrap();
    for (t, &ops) in m.ops.iter().enumerate() {
        assert_eq!(b.readdir(&format!("t{t}")).unwrap() as u64, ops);
    }
    // The budget bounds the window.
    assert!(m.ops.iter().all(|&o| o <= params().files as u64));
}

fn small_args(targets: &[&str], workloads: &[&str]) -> BenchArgs {
    BenchArgs {
        targets: targets.iter().map(|s| s.to_string()).collect(),
        workloads: workloads.iter().map(|s| s.to_string()).collect(),
        threads: vec![1, 2],
        duration: Some("20ms".into()),
        runs: Some(2),
        files: Some(200),
        fsmark_bytes: 4096,
        seed: 1,
        ..BenchArgs::default()
    }
}

fn peer_targets() -> Vec<&'static str> {
    if cfg!(feature = "peers") {
        vec!["inproc", "vfs", "rsfs"]
    } else {
        vec!["inproc"]
    }
}

#[test]
fn targets_are_interleaved() {
    let targets = peer_targets();
    let plan = cli::plan(&small_args(&targets, &["MRPL", "DWTL"])).unwrap();
    let seen = RefCell::new(Vec::new());
    let rows = cli::measure(&plan, None, &|msg| {
        seen.borrow_mut()
            .push(msg.rsplit(' ').next().unwrap().to_string())
    });
    let seen = seen.into_inner();
    assert_eq!(seen.len(), 2 * 2 * 2 * targets.len());
    for chunk in seen.chunks(targets.len()) {
        assert_eq!(chunk, targets.as_slice(), "order: {seen:?}");
    }
    assert_eq!(rows.len(), 2 * 2 * targets.len());
}

fn sample_results() -> Results {
    let plan = cli::plan(&small_args(&peer_targets(), &["MRPH", "DWOL"])).unwrap();
    let rows = cli::measure(&plan, None, &|_| {});
    Results {
        schema: SCHEMA.into(),
        tool_version: "test".into(),
        commit: "0123456789abcdef".into(),
        started_unix: 0,
        machine: Machine::detect(),
        options: Options {
            ..plan.options.clone()
        },
        loadavg_start: String::new(),
        loadavg_end: String::new(),
        plot: None,
        served: Vec::new(),
        results: rows,
    }
}

#[test]
fn json_schema() {
    let r = sample_results();
    let dir = scratch("json");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("r.json");
    r.write_json(&path).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(v["schema"], SCHEMA);
    for key in ["cpu_model", "cores", "memory_bytes", "kernel"] {
        assert!(!v["machine"][key].is_null(), "machine.{key}");
    }
    assert!(v["machine"]["cores"].as_u64().unwrap() >= 1);
    assert!(v["commit"].is_string());
    for key in [
        "targets",
        "workloads",
        "threads",
        "duration_secs",
        "runs",
        "seed",
    ] {
        assert!(!v["options"][key].is_null(), "options.{key}");
    }
    let rows = v["results"].as_array().unwrap();
    assert!(!rows.is_empty());
    for row in rows {
        for key in ["workload", "target", "variant", "status"] {
            assert!(row[key].is_string(), "{key} in {row}");
        }
        assert!(row["threads"].as_u64().unwrap() >= 1);
        assert!(row["runs"].is_u64());
        match row["status"].as_str().unwrap() {
            "ok" => {
                assert!(row["ops_per_sec"].as_f64().unwrap() > 0.0, "{row}");
                assert_eq!(row["runs"], 2);
                assert!(row["spread"].as_f64().unwrap() >= 0.0);
            }
            "n/a" | "error" => {
                assert!(row["ops_per_sec"].is_null());
                assert!(row["note"].is_string());
            }
            s => panic!("status {s}"),
        }
    }
    // It reads back, and the report renders its tables.
    let back = Results::read_json(&path).unwrap();
    // (floats may differ in the last bit through JSON)
    assert_eq!(back.results.len(), r.results.len());
    assert_eq!(back.machine, r.machine);
    assert_eq!(back.options, r.options);
    let md = cli::render_report(&[(path.clone(), back)]);
    assert!(md.contains("### MRPH"), "{md}");
    assert!(md.contains("| threads |"), "{md}");
    let csv = r.to_csv();
    assert!(csv.starts_with("workload,target,variant,threads,ops_per_sec,runs,spread"));
    assert_eq!(csv.lines().count(), r.results.len() + 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn plot_is_a_png() {
    let r = sample_results();
    let dir = scratch("png");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("p.png");
    lanefs_bench::plot::draw(&r.results, "test", &path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert!(bytes.len() > 10_000, "only {} bytes", bytes.len());
    std::fs::remove_dir_all(&dir).unwrap();
}

fn seed_args(workloads: &[&str], variants: &[&str]) -> BenchArgs {
    BenchArgs {
        targets: vec!["inproc".into()],
        workloads: workloads.iter().map(|s| s.to_string()).collect(),
        variants: variants.iter().map(|s| s.to_string()).collect(),
        threads: vec![1, 2],
        duration: Some("15ms".into()),
        runs: Some(1),
        files: Some(200),
        fsmark_bytes: 4096,
        seed: 1,
        ..BenchArgs::default()
    }
}

fn results_of(plan: &cli::Plan, rows: Vec<lanefs_bench::results::Row>) -> Results {
    Results {
        schema: SCHEMA.into(),
        tool_version: "test".into(),
        commit: "0123456789abcdef".into(),
        started_unix: 0,
        machine: Machine::detect(),
        options: plan.options.clone(),
        loadavg_start: String::new(),
        loadavg_end: String::new(),
        plot: None,
        served: Vec::new(),
        results: rows,
    }
}

#[test]
fn variant_specs_expand_and_canonicalise() {
    let (v, seeds) = cli::expand_variants(&[]).unwrap();
    assert_eq!((v, seeds), (vec!["default".to_string()], false));
    let (v, _) =
        cli::expand_variants(&["counter=atomic, icache=global".into(), "default".into()]).unwrap();
    assert_eq!(v, vec!["icache=global,counter=atomic", "default"]);
    let (all, seeds) = cli::expand_variants(&["all".into()]).unwrap();
    assert!(!seeds);
    assert_eq!(all.len(), 1 + lanefs::Variants::baselines().len());
    assert_eq!(all[0], "default");
    let (v, seeds) = cli::expand_variants(&["seeds".into(), "icache=global".into()]).unwrap();
    assert!(seeds);
    assert_eq!(v, all, "duplicates dropped");
    assert!(cli::expand_variants(&["icache=nope".into()]).is_err());
    assert!(cli::plan(&seed_args(&["seed009"], &[])).is_err());
    // Groups: seed002 has two parts; seeds all seven.
    let plan = cli::plan(&seed_args(&["seed002"], &[])).unwrap();
    assert_eq!(
        plan.workloads,
        vec![Workload::Seed002Orphan, Workload::Seed002CreatClo]
    );
    let mut args = seed_args(&["seeds"], &[]);
    args.targets.clear();
    let plan = cli::plan(&args).unwrap();
    assert_eq!(plan.workloads, Workload::SEEDS.to_vec());
    // Only seed experiments: the engine alone is the default target.
    assert_eq!(plan.options.targets, vec!["inproc"]);
    // The seeds take at least 5 runs by default, even with --quick.
    let mut args = seed_args(&["seed000"], &[]);
    args.runs = None;
    args.quick = true;
    assert!(cli::plan(&args).unwrap().runs >= 5);
}

/// Every seed experiment, briefly, under `--variant all` (and DRBH beside
/// them): every variant measured, ops > 0, ratios to the seed's
/// before-design, drop latencies for seed001, CPU per op for seed004, the
/// seeds' published figures, and all of it through JSON and back.
#[test]
fn seed_workloads_under_every_variant() {
    let plan = cli::plan(&seed_args(&["seeds", "DRBH"], &["all"])).unwrap();
    let variants = plan.options.variants.clone();
    assert_eq!(variants.len(), 1 + lanefs::Variants::baselines().len());
    let rows = cli::measure(&plan, None, &|_| {});
    let expected = plan.workloads.len() * 2 * variants.len();
    assert_eq!(rows.len(), expected);
    for r in &rows {
        assert_eq!(
            r.status,
            lanefs_bench::results::Status::Ok,
            "{} {} {}t: {}",
            r.workload,
            r.variant,
            r.threads,
            r.note
        );
        assert!(r.ops_per_sec.unwrap() > 0.0, "{r:?}");
        assert!(variants.contains(&r.variant));
        assert!(r.cpu_ns_per_op.unwrap() > 0.0, "{r:?}");
        if r.workload == "seed001" {
            let (p50, p99) = (r.latency_p50_ns.unwrap(), r.latency_p99_ns.unwrap());
            assert!(p50 > 0.0 && p99 >= p50, "{r:?}");
        } else {
            assert!(r.latency_p50_ns.is_none(), "{r:?}");
        }
    }
    // DRBH: one row per variant and thread count.
    let drbh: Vec<_> = rows.iter().filter(|r| r.workload == "DRBH").collect();
    assert_eq!(drbh.len(), 2 * variants.len());

    let results = results_of(&plan, rows);
    let text = cli::render_text(&results);
    for (w, before, figure) in [
        ("seed000", "÷ icache=global", "46.118"),
        ("seed001", "÷ reclaim=sync-grace", "2811.08"),
        ("seed002:stress-orphan", "÷ orphan=locked", "14.938"),
        ("seed002:creat_clo", "÷ orphan=locked", "14705.88"),
        ("seed003:read", "÷ read=locked", "1389k"),
        ("seed003:read+writer", "÷ read=locked", "not published"),
        ("seed004", "÷ counter=exact-compare", "5.78%"),
    ] {
        let block = text
            .split("\n\n")
            .find(|b| b.starts_with(&format!("{w} — ")))
            .unwrap_or_else(|| panic!("no table for {w}:\n{text}"));
        assert!(block.contains(before), "{block}");
        assert!(block.contains(figure), "{block}");
        // The before-design's own ratio is exactly 1.
        let base_line = block
            .lines()
            .find(|l| l.split_whitespace().nth(1) == before.strip_prefix("÷ "))
            .unwrap_or_else(|| panic!("no line for the before-design:\n{block}"));
        assert!(base_line.contains("1.00x"), "{base_line}");
        // Every variant has a line with a ratio, at both thread counts.
        let ratios = block.lines().filter(|l| l.contains('x')).count();
        assert!(ratios >= 2 * variants.len(), "{block}");
    }
    assert!(text.contains("drop p99"), "{text}");
    assert!(text.contains("CPU/op"), "{text}");
    assert!(text.contains("DRBH — "), "{text}");

    let dir = scratch("seeds");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s.json");
    results.write_json(&path).unwrap();
    let back = Results::read_json(&path).unwrap();
    assert_eq!(back.options.variants, variants);
    let r = back
        .results
        .iter()
        .find(|r| r.workload == "seed001" && r.variant == "reclaim=sync-grace")
        .unwrap();
    assert!(r.latency_p99_ns.is_some());
    let csv = back.to_csv();
    assert!(csv.lines().next().unwrap().contains("latency_p99_ns"));
    assert!(csv.contains("\"icache=global\""));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--variant seeds`: each seed workload runs the default and its own
/// mechanism's baselines; other workloads the default only. Seed
/// workloads are n/a on targets other than the engine.
#[test]
fn seeds_scope_and_engine_only() {
    let mut args = seed_args(&["seed000", "seed003:read", "MRPH"], &["seeds"]);
    args.threads = vec![1];
    args.targets = vec![
        "inproc".into(),
        if cfg!(feature = "peers") {
            "vfs"
        } else {
            "inproc"
        }
        .into(),
    ];
    let plan = cli::plan(&args).unwrap();
    let rows = cli::measure(&plan, None, &|_| {});
    let of = |w: &str| -> Vec<String> {
        rows.iter()
            .filter(|r| r.workload == w && r.target == "inproc")
            .map(|r| r.variant.clone())
            .collect()
    };
    assert_eq!(
        of("seed000"),
        vec![
            "default",
            "icache=global",
            "icache=rcu-global-insert",
            "icache=bucket-lock"
        ]
    );
    assert_eq!(of("seed003:read"), vec!["default", "read=locked"]);
    assert_eq!(of("MRPH"), vec!["default"]);
    if cfg!(feature = "peers") {
        let vfs = rows
            .iter()
            .find(|r| r.workload == "seed000" && r.target == "vfs")
            .unwrap();
        assert_eq!(vfs.status, lanefs_bench::results::Status::NotApplicable);
        assert!(vfs.note.contains("inproc only"), "{}", vfs.note);
    }
}
