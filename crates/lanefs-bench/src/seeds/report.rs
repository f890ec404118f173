//! The seed tables: for each seed workload and thread count, one line per
//! engine variant with its ops/s (median ±spread), its ratio to the seed's
//! before-design measured in the same run, the extra figures the seed
//! reports (seed001: drop latency p50/p99; seed004: CPU per operation),
//! and what the seed itself published for that design.
//!
//! No shared state.

use super::published;
use crate::results::{Row, Status};
use crate::table::{human, Table};
use crate::workload::Workload;

fn ns(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2} ms", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} µs", x / 1e3)
    } else {
        format!("{x:.0} ns")
    }
}

fn order<T: Clone + PartialEq>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut v: Vec<T> = Vec::new();
    for i in items {
        if !v.contains(&i) {
            v.push(i);
        }
    }
    v
}

/// Whether `row` belongs in a seed table.
pub fn is_seed_row(row: &Row) -> bool {
    Workload::parse(&row.workload).is_some_and(|w| w.is_seed())
}

/// One table per seed workload present in `rows`, in their order.
pub fn tables(rows: &[Row]) -> Vec<Table> {
    let workloads = order(
        rows.iter()
            .filter(|r| is_seed_row(r))
            .map(|r| r.workload.clone()),
    );
    workloads
        .iter()
        .filter_map(|name| Workload::parse(name).map(|w| table(rows, w)))
        .collect()
}

fn table(rows: &[Row], w: Workload) -> Table {
    let before = super::before_design(w).unwrap_or("default");
    let mine: Vec<&Row> = rows
        .iter()
        .filter(|r| r.workload == w.name() && r.target == "inproc")
        .collect();
    let variants = order(mine.iter().map(|r| r.variant.clone()));
    let mut threads = order(mine.iter().map(|r| r.threads));
    threads.sort_unstable();
    let latency = w == Workload::Seed001;
    let cpu = w == Workload::Seed004;
    let mut header = vec![
        "threads".to_string(),
        "variant".to_string(),
        "ops/s".to_string(),
        format!("÷ {before}"),
    ];
    if latency {
        header.push("drop p50".into());
        header.push("drop p99".into());
        header.push("scans/s".into());
        header.push("scanner CPU".into());
    }
    if cpu || latency {
        header.push("CPU/op".into());
    }
    header.push("seed published".into());
    header.push("source".into());
    let mut body = Vec::new();
    let mut notes = Vec::new();
    for &n in &threads {
        let find = |v: &str| {
            mine.iter()
                .find(|r| r.variant == v && r.threads == n)
                .copied()
        };
        let base = find(before)
            .filter(|r| r.status == Status::Ok)
            .and_then(|r| r.ops_per_sec);
        for v in &variants {
            let Some(r) = find(v) else { continue };
            let ok = r.status == Status::Ok;
            let mut line = vec![n.to_string(), v.clone()];
            line.push(match (ok, r.ops_per_sec) {
                (true, Some(x)) => format!("{} ±{:.0}%", human(x), r.spread.unwrap_or(0.0) * 100.0),
                _ => {
                    notes.push(format!("{v} at {n} threads: {}", r.note));
                    if r.status == Status::NotApplicable {
                        "n/a"
                    } else {
                        "error"
                    }
                    .to_string()
                }
            });
            line.push(match (base, r.ops_per_sec.filter(|_| ok)) {
                (Some(b), Some(x)) if b > 0.0 => format!("{:.2}x", x / b),
                _ => "-".into(),
            });
            let opt = |x: Option<f64>| x.filter(|_| ok).map(ns).unwrap_or_else(|| "-".into());
            if latency {
                line.push(opt(r.latency_p50_ns));
                line.push(opt(r.latency_p99_ns));
                line.push(
                    r.aux_per_sec
                        .filter(|_| ok)
                        .map(human)
                        .unwrap_or_else(|| "-".into()),
                );
                line.push(
                    r.aux_cpu_share
                        .filter(|_| ok)
                        .map(|x| format!("{:.0}%", x * 100.0))
                        .unwrap_or_else(|| "-".into()),
                );
            }
            if cpu || latency {
                line.push(opt(r.cpu_ns_per_op));
            }
            let (figure, source) = published::lookup(w.name(), v);
            line.push(figure);
            line.push(source);
            body.push(line);
        }
    }
    if base_missing(&mine, before) {
        notes.push(format!(
            "{before} (the seed's before-design) was not measured; run with --variant all or seeds for ratios"
        ));
    }
    for r in rows
        .iter()
        .filter(|r| r.workload == w.name() && r.target != "inproc")
    {
        let note = format!("{}: {}", r.target_label(), r.note);
        if !notes.contains(&note) {
            notes.push(note);
        }
    }
    Table {
        title: format!("{} — {}", w.name(), w.description()),
        header,
        body,
        notes,
    }
}

fn base_missing(rows: &[&Row], before: &str) -> bool {
    !rows.iter().any(|r| r.variant == before)
}
