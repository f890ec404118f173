//! The `lanefs bench` subcommand: argument parsing and entry point.
//!
//! `lanefs bench [OPTIONS]` measures; `lanefs bench report RESULTS.json…`
//! renders a Markdown report of earlier runs.

use crate::backend::inproc::{all_variants, canonical_variant};
use crate::harness::schedule;
use crate::results::{
    git_commit, loadavg, Machine, Options, Results, Row, RunSample, Status, SCHEMA,
};
use crate::table;
use crate::target::{CellOutcome, Target, TargetSpec};
use crate::workload::{Params, Workload};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

/// Workloads of `--quick`.
pub const QUICK_WORKLOADS: &[Workload] = &[
    Workload::Mrpl,
    Workload::Mrph,
    Workload::Mrdl,
    Workload::Mwcl,
    Workload::Mwul,
    Workload::Mwrl,
    Workload::Drbl,
    Workload::Dwol,
    Workload::Dwal,
];
/// Targets of `--quick` and the default when none is named.
pub const DEFAULT_TARGETS: &[&str] = if cfg!(feature = "peers") {
    &["inproc", "tmpfs", "vfs", "rsfs"]
} else {
    &["inproc", "tmpfs"]
};
/// Runs per cell by default, and with `--quick`.
pub const DEFAULT_RUNS: usize = 5;
pub const QUICK_RUNS: usize = 3;
/// Fewest runs the seed experiments take by default (even with `--quick`).
pub const SEED_RUNS_MIN: usize = 5;
/// Objects per thread and per second of duration for create/unlink budgets.
pub const FILES_PER_SEC: f64 = 200_000.0;
/// Smallest default budget.
pub const FILES_MIN: usize = 5_000;

/// Arguments of `lanefs bench`.
#[derive(clap::Args, Debug, Clone, Default)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: Option<BenchCommand>,
    /// Target: inproc, inproc-image, tmpfs, ext4, lanefs, lanefs-image,
    /// vfs, rsfs, a directory PATH, or
    /// LABEL=PATH. Repeat or give a comma list; several are measured
    /// interleaved. Default: inproc,tmpfs (+ vfs,rsfs with the peers
    /// feature); inproc alone when only seed experiments are selected.
    #[arg(long = "target", short = 't', value_delimiter = ',')]
    pub targets: Vec<String>,
    /// Engine variant(s) for the inproc target: `default`, a set of
    /// `mechanism=design` joined by `,` (e.g. `icache=global,counter=atomic`),
    /// `all` (default + every baseline) or `seeds` (for each seed workload
    /// the default and that mechanism's baselines; other workloads run the
    /// default only). Separate several with `;` or repeat. Default: default.
    #[arg(long = "variant", value_delimiter = ';')]
    pub variants: Vec<String>,
    /// Workload(s) by name (see --list), or a group: `seeds`, `seed000` …
    /// `seed004` (each seed's parts), `matrix`. Repeat or give a comma list.
    /// Default: the matrix (--quick: a subset).
    #[arg(long = "workload", short = 'w', value_delimiter = ',')]
    pub workloads: Vec<String>,
    /// Thread counts to sweep, e.g. 1,2,4. Default: 1 and the CPU count.
    #[arg(long, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Timed window of each run: 1s, 500ms, or seconds. Default 1s (--quick 0.2s).
    #[arg(long)]
    pub duration: Option<String>,
    /// Runs of each cell; the median is reported. Default 5 (--quick 3).
    #[arg(long)]
    pub runs: Option<usize>,
    /// Seed of the workloads' random choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Budget of files per thread for create/unlink/fs_mark (the window ends
    /// early if a thread uses it up). Default: 200000 per second of duration.
    #[arg(long)]
    pub files: Option<usize>,
    /// Bytes written to each fs_mark file.
    #[arg(long, default_value_t = 4096)]
    pub fsmark_bytes: usize,
    /// Write results as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write results as CSV.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Draw scaling curves and ratio bars into a PNG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Short profile: inproc, tmpfs and the peers, a subset of workloads,
    /// 1 and 2 threads, 0.2 s windows, 3 runs (under 2 minutes on 2 cores).
    #[arg(long)]
    pub quick: bool,
    /// `--threads` passed to `lanefs mount` for the lanefs target.
    #[arg(long)]
    pub lanefs_threads: Option<usize>,
    /// List workloads and targets, then exit.
    #[arg(long)]
    pub list: bool,
}

/// Subcommands of `lanefs bench`.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum BenchCommand {
    /// Render a Markdown report of results files.
    Report(ReportArgs),
}

/// Arguments of `lanefs bench report`.
#[derive(clap::Args, Debug, Clone)]
pub struct ReportArgs {
    /// Results files written by `lanefs bench --json`.
    #[arg(required = true)]
    pub results: Vec<PathBuf>,
    /// Write the report here instead of standard output.
    #[arg(long, short = 'o')]
    pub out: Option<PathBuf>,
}

/// Parse `1s`, `250ms`, `0.5`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad duration {s:?} (try 1s, 500ms)"))?;
    if !(v > 0.0 && v * scale <= 3600.0) {
        return Err(format!("duration {s:?} out of range"));
    }
    Ok(Duration::from_secs_f64(v * scale))
}

/// Everything a measuring run needs, defaults applied.
#[derive(Clone, Debug)]
pub struct Plan {
    pub targets: Vec<TargetSpec>,
    pub workloads: Vec<Workload>,
    pub threads: Vec<usize>,
    pub runs: usize,
    pub params: Params,
    pub options: Options,
    /// `--variant seeds`: each workload runs only the variants in its
    /// seed's scope (see [`crate::seeds::in_seed_scope`]).
    pub seed_scope: bool,
}

impl Plan {
    /// Whether target `target` runs workload `w` in this plan.
    pub fn runs_cell(&self, w: Workload, target: usize) -> bool {
        match &self.targets[target] {
            TargetSpec::Inproc { variant } if self.seed_scope => {
                crate::seeds::in_seed_scope(w, variant)
            }
            _ => true,
        }
    }
}

/// Expand `--variant` values: `all` and `seeds` to the default and every
/// baseline, anything else to its canonical string; duplicates dropped.
/// Returns the list and whether `seeds` was named.
pub fn expand_variants(given: &[String]) -> Result<(Vec<String>, bool), String> {
    let mut out: Vec<String> = Vec::new();
    let mut seeds = false;
    let given: Vec<&str> = given
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .collect();
    for spec in if given.is_empty() {
        vec!["default"]
    } else {
        given
    } {
        let names = match spec {
            "all" => all_variants(),
            "seeds" => {
                seeds = true;
                all_variants()
            }
            _ => vec![canonical_variant(spec)?],
        };
        for n in names {
            if !out.contains(&n) {
                out.push(n);
            }
        }
    }
    Ok((out, seeds))
}

/// Apply defaults and check the arguments.
pub fn plan(args: &BenchArgs) -> Result<Plan, String> {
    let (variants, seed_scope) = expand_variants(&args.variants)?;
    let workloads: Vec<Workload> = if args.workloads.is_empty() {
        if args.quick {
            QUICK_WORKLOADS.to_vec()
        } else {
            Workload::MATRIX.to_vec()
        }
    } else {
        let mut ws: Vec<Workload> = Vec::new();
        for w in &args.workloads {
            let group = Workload::parse_group(w).ok_or_else(|| {
                format!(
                    "unknown workload {w:?}; known: {}, and the groups seeds, seed000 … seed004, matrix",
                    Workload::ALL
                        .iter()
                        .map(|w| w.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?;
            for w in group {
                if !ws.contains(&w) {
                    ws.push(w);
                }
            }
        }
        ws
    };
    let has_seed = workloads.iter().any(|w| w.is_seed());
    // Only seed experiments (engine only): the engine is the default target.
    let target_names: Vec<String> = if !args.targets.is_empty() {
        args.targets.clone()
    } else if workloads.iter().all(|w| w.is_seed()) {
        vec!["inproc".to_string()]
    } else {
        DEFAULT_TARGETS.iter().map(|s| s.to_string()).collect()
    };
    let mut targets = Vec::new();
    for t in &target_names {
        targets.extend(TargetSpec::parse(t, &variants)?);
    }
    let mut threads = if !args.threads.is_empty() {
        args.threads.clone()
    } else if args.quick {
        vec![1, 2]
    } else {
        vec![
            1,
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
        ]
    };
    threads.sort_unstable();
    threads.dedup();
    if threads.first() == Some(&0) {
        return Err("--threads: counts must be at least 1".into());
    }
    let duration = match &args.duration {
        Some(d) => parse_duration(d)?,
        None if args.quick => Duration::from_millis(200),
        None => Duration::from_secs(1),
    };
    // The seed experiments report medians of at least SEED_RUNS_MIN runs
    // unless --runs says otherwise.
    let runs = args.runs.unwrap_or(if args.quick && !has_seed {
        QUICK_RUNS
    } else {
        SEED_RUNS_MIN.max(DEFAULT_RUNS)
    });
    if runs == 0 {
        return Err("--runs must be at least 1".into());
    }
    let files = args
        .files
        .unwrap_or(((duration.as_secs_f64() * FILES_PER_SEC) as usize).max(FILES_MIN));
    let params = Params {
        duration,
        files,
        fsmark_bytes: args.fsmark_bytes,
        seed: args.seed,
    };
    let options = Options {
        targets: targets.iter().map(|t| t.name()).collect(),
        workloads: workloads.iter().map(|w| w.name().to_string()).collect(),
        threads: threads.clone(),
        duration_secs: duration.as_secs_f64(),
        runs,
        seed: args.seed,
        files_per_thread: files,
        fsmark_bytes: args.fsmark_bytes,
        quick: args.quick,
        variants: variants.clone(),
        command_line: std::env::args().collect::<Vec<_>>().join(" "),
    };
    Ok(Plan {
        targets,
        workloads,
        threads,
        runs,
        params,
        options,
        seed_scope,
    })
}

/// Run every cell of `plan`, interleaving targets, and summarise.
/// `progress` is told about each cell before it runs.
pub fn measure(plan: &Plan, lanefs_threads: Option<usize>, progress: &dyn Fn(&str)) -> Vec<Row> {
    measure_served(plan, lanefs_threads, progress).0
}

/// [`measure`], and how each lanefs mount among the targets was served
/// ([`Target::served`], as `name: …`).
pub fn measure_served(
    plan: &Plan,
    lanefs_threads: Option<usize>,
    progress: &dyn Fn(&str),
) -> (Vec<Row>, Vec<String>) {
    let mut targets: Vec<Result<Target, String>> = plan
        .targets
        .iter()
        .map(|s| Target::open(s.clone(), lanefs_threads))
        .collect();
    let served: Vec<String> = targets
        .iter()
        .zip(&plan.targets)
        .filter_map(|(t, spec)| Some(format!("{}: {}", spec.name(), t.as_ref().ok()?.served()?)))
        .collect();
    type Key = (usize, usize, usize); // workload index, threads, target index
    let mut samples: HashMap<Key, Vec<RunSample>> = HashMap::new();
    let mut failed: HashMap<Key, (Status, String)> = HashMap::new();
    let cells = schedule(
        plan.workloads.len(),
        &plan.threads,
        plan.runs,
        plan.targets.len(),
    );
    for c in &cells {
        let w = plan.workloads[c.workload];
        let key = (c.workload, c.threads, c.target);
        if !plan.runs_cell(w, c.target) {
            continue;
        }
        if crate::harness::interrupted() {
            failed.insert(key, (Status::Error, "interrupted".into()));
            continue;
        }
        progress(&format!(
            "{} {}t run {}/{} {}",
            w.name(),
            c.threads,
            c.run + 1,
            plan.runs,
            plan.targets[c.target].name()
        ));
        if failed.contains_key(&key) {
            continue;
        }
        let outcome = match &mut targets[c.target] {
            Ok(t) => t.run_cell(w, c.threads, &plan.params),
            Err(e) => CellOutcome::Failed(format!("target set-up failed: {e}")),
        };
        match outcome {
            CellOutcome::Ok(_) if crate::harness::interrupted() => {
                failed.insert(key, (Status::Error, "interrupted".into()));
            }
            CellOutcome::Ok(m) => samples.entry(key).or_default().push(RunSample::of(&m)),
            CellOutcome::NotApplicable(why) => {
                failed.insert(key, (Status::NotApplicable, why));
            }
            CellOutcome::Failed(e) => {
                failed.insert(key, (Status::Error, e));
            }
        }
    }
    // Unmount managed targets before anything else happens.
    targets.clear();
    let mut rows = Vec::new();
    for (wi, w) in plan.workloads.iter().enumerate() {
        for &n in &plan.threads {
            for (ti, t) in plan.targets.iter().enumerate() {
                let key = (wi, n, ti);
                if !plan.runs_cell(*w, ti) {
                    continue;
                }
                rows.push(match failed.remove(&key) {
                    Some((status, note)) => {
                        Row::without_numbers(w.name(), &t.name(), &t.variant(), n, status, note)
                    }
                    None => {
                        let s = samples.remove(&key).unwrap_or_default();
                        Row::from_runs(w.name(), &t.name(), &t.variant(), n, &s)
                    }
                });
            }
        }
    }
    (rows, served)
}

fn describe(name: &str) -> String {
    Workload::parse(name)
        .map(|w| w.description().to_string())
        .unwrap_or_default()
}

/// The terminal form of a results set.
pub fn render_text(r: &Results) -> String {
    let mut out = format!(
        "lanefs bench {} at {}\nmachine: {}\nload average: {} at start, {} at end\noptions: {} s windows, {} runs (median ±spread = (max-min)/median), seed {}, {} files/thread\n\n",
        r.tool_version,
        r.commit,
        r.machine.summary(),
        r.loadavg_start,
        r.loadavg_end,
        r.options.duration_secs,
        r.options.runs,
        r.options.seed,
        r.options.files_per_thread
    );
    if !r.served.is_empty() {
        out.insert_str(out.len() - 1, &format!("served: {}\n", r.served.join("; ")));
    }
    for t in all_tables(&r.results) {
        out.push_str(&table::render_text(&t));
        out.push('\n');
    }
    out
}

/// The matrix tables (a column per target and variant), then the seed
/// tables (a line per variant, ratios to the seed's before-design).
fn all_tables(rows: &[Row]) -> Vec<table::Table> {
    let (seed, matrix): (Vec<Row>, Vec<Row>) = rows
        .iter()
        .cloned()
        .partition(crate::seeds::report::is_seed_row);
    let mut t = table::tables(&matrix, &describe);
    t.extend(crate::seeds::report::tables(&seed));
    t
}

/// `plot` as a link from a report written into directory `base`: relative
/// when the plot lies below `base`, else as recorded.
fn plot_link(plot: &str, base: Option<&std::path::Path>) -> String {
    let abs = |p: &std::path::Path| {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            std::env::current_dir().unwrap_or_default().join(p)
        }
    };
    match base {
        Some(b) => abs(std::path::Path::new(plot))
            .strip_prefix(abs(b))
            .map(|r| r.display().to_string())
            .unwrap_or_else(|_| plot.to_string()),
        None => plot.to_string(),
    }
}

/// The Markdown report of several results files.
pub fn render_report(files: &[(PathBuf, Results)]) -> String {
    render_report_in(files, None)
}

/// As [`render_report`], with plot links relative to directory `base`
/// (where the report is written).
pub fn render_report_in(files: &[(PathBuf, Results)], base: Option<&std::path::Path>) -> String {
    let mut out = String::from("# lanefs bench report\n\n");
    for (path, r) in files {
        out.push_str(&format!("## {}\n\n", path.display()));
        out.push_str(&format!("- machine: {}\n", r.machine.summary()));
        out.push_str(&format!("- commit: `{}`\n", r.commit));
        out.push_str(&format!(
            "- load average: {} at start, {} at end\n",
            r.loadavg_start, r.loadavg_end
        ));
        out.push_str(&format!("- command: `{}`\n", r.options.command_line));
        for line in &r.served {
            out.push_str(&format!("- served: {line}\n"));
        }
        out.push_str(&format!(
            "- targets: {}; threads: {:?}; {} s windows; {} runs (median, ±spread = (max−min)/median); seed {}; {} files/thread\n\n",
            r.options.targets.join(", "),
            r.options.threads,
            r.options.duration_secs,
            r.options.runs,
            r.options.seed,
            r.options.files_per_thread
        ));
        if let Some(p) = &r.plot {
            out.push_str(&format!(
                "![scaling curves and ratio bars]({})\n\n",
                plot_link(p, base)
            ));
        }
        for t in all_tables(&r.results) {
            out.push_str(&table::render_markdown(&t));
        }
    }
    out
}

fn list() -> String {
    let mut s = String::from("workloads (default: the matrix):\n");
    for w in Workload::MATRIX {
        s.push_str(&format!("  {:<12} {}\n", w.name(), w.description()));
    }
    s.push_str(
        "seed experiments (inproc; -w seeds, or seed000 … seed004 for each seed's parts):\n",
    );
    for w in Workload::SEEDS {
        s.push_str(&format!("  {:<22} {}\n", w.name(), w.description()));
    }
    s.push_str("variants (--variant; default, all, seeds, or mechanism=design,…):\n");
    for v in all_variants() {
        s.push_str(&format!("  {v}\n"));
    }
    s.push_str(
        "targets:\n  inproc       the engine in process (one per --variant)\n  tmpfs        a fresh tmpfs (mounted and unmounted by the tool; root)\n  ext4         a fresh ext4 on a loop image (root)\n  lanefs       `lanefs mount --memory` via FUSE ($LANEFS_BIN or run as `lanefs bench`)\n  lanefs-image `lanefs mount` of a fresh image on a loop device like ext4's (root)\n  inproc-image the engine in process on a fresh image file per run (one per --variant)\n  vfs, rsfs    peer libraries in process (feature `peers`)\n  PATH, L=PATH any directory, through syscalls\n",
    );
    s
}

/// Run `lanefs bench` with parsed arguments.
pub fn run(args: BenchArgs) -> Result<(), String> {
    if let Some(BenchCommand::Report(r)) = &args.command {
        let mut files = Vec::new();
        for p in &r.results {
            files.push((p.clone(), Results::read_json(p)?));
        }
        let base = r.out.as_ref().map(|o| {
            o.parent()
                .map(|p| p.to_path_buf())
                .unwrap_or_else(|| PathBuf::from("."))
        });
        let md = render_report_in(&files, base.as_deref());
        return match &r.out {
            Some(o) => std::fs::write(o, md).map_err(|e| format!("{}: {e}", o.display())),
            None => crate::out::stdout(&md),
        };
    }
    if args.list {
        return crate::out::stdout(&list());
    }
    let plan = plan(&args)?;
    crate::harness::catch_interrupts();
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let loadavg_start = loadavg();
    // The commit of the code being measured: taken before, not after.
    let commit = git_commit();
    let cells = plan.workloads.len() * plan.threads.len() * plan.runs * plan.targets.len();
    let bar = if std::io::stderr().is_terminal() {
        let b = indicatif::ProgressBar::new(cells as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:30} {pos}/{len} {elapsed_precise} eta {eta} {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    let (rows, served) = measure_served(&plan, args.lanefs_threads, &|msg| {
        bar.inc(if bar.position() == 0 && bar.message().is_empty() {
            0
        } else {
            1
        });
        bar.set_message(msg.to_string());
    });
    bar.finish_and_clear();
    let mut results = Results {
        schema: SCHEMA.into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        commit,
        started_unix,
        machine: Machine::detect(),
        options: plan.options.clone(),
        loadavg_start,
        loadavg_end: loadavg(),
        plot: None,
        served,
        results: rows,
    };
    if let Some(p) = &args.plot {
        let title = format!(
            "lanefs bench — {} — {}",
            results.machine.summary(),
            &results.commit[..results.commit.len().min(12)]
        );
        crate::plot::draw(&results.results, &title, p)?;
        results.plot = Some(p.display().to_string());
    }
    // The files are written even when stdout fails (a reader gone,
    // `| head -1`, or a full disk): the measurements are not lost.
    let printed = crate::out::stdout(&render_text(&results));
    if let Some(p) = &args.json {
        results.write_json(p)?;
    }
    if let Some(p) = &args.csv {
        std::fs::write(p, results.to_csv()).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    let errors = results
        .results
        .iter()
        .filter(|r| r.status == Status::Error)
        .count();
    if errors > 0 {
        say!("lanefs bench: {errors} result(s) failed; see the notes above");
    }
    if crate::harness::interrupted() {
        return Err("interrupted".into());
    }
    printed
}
