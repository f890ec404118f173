//! Tables of results: one per workload, a column per target, rows per
//! thread count, then the ratios of the first target to each other one, and
//! each target's scaling (N threads ÷ the fewest threads). Rendered for the
//! terminal (aligned text) and for Markdown reports.

use crate::results::{Row, Status};
use std::collections::BTreeSet;

/// A rendered-independent table.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    pub title: String,
    pub header: Vec<String>,
    pub body: Vec<Vec<String>>,
    /// Notes: why a cell is n/a or failed.
    pub notes: Vec<String>,
}

/// `12.35M`, `951.2k`, `87.0`.
pub fn human(x: f64) -> String {
    if x >= 1e9 {
        format!("{:.2}G", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.1}")
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

fn find<'a>(rows: &'a [Row], w: &str, target: &str, threads: usize) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.workload == w && r.target_label() == target && r.threads == threads)
}

fn rate(r: Option<&Row>) -> Option<f64> {
    r.filter(|r| r.status == Status::Ok)
        .and_then(|r| r.ops_per_sec)
}

/// One table per workload, in the order the rows came.
pub fn tables(rows: &[Row], describe: &dyn Fn(&str) -> String) -> Vec<Table> {
    let workloads = order(rows.iter().map(|r| r.workload.clone()));
    let targets = order(rows.iter().map(|r| r.target_label()));
    let threads: Vec<usize> = rows
        .iter()
        .map(|r| r.threads)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut out = Vec::new();
    for w in &workloads {
        let mut header = vec!["threads".to_string()];
        header.extend(targets.iter().map(|t| format!("{t} ops/s")));
        for t in targets.iter().skip(1) {
            header.push(format!("{} ÷ {t}", targets[0]));
        }
        let mut body = Vec::new();
        let mut notes = BTreeSet::new();
        for &n in &threads {
            let mut line = vec![n.to_string()];
            for t in &targets {
                let r = find(rows, w, t, n);
                line.push(match r {
                    Some(r) if r.status == Status::Ok => format!(
                        "{} ±{:.0}%",
                        human(r.ops_per_sec.unwrap_or(0.0)),
                        r.spread.unwrap_or(0.0) * 100.0
                    ),
                    Some(r) => {
                        notes.insert(format!("{t}: {}", r.note));
                        if r.status == Status::NotApplicable {
                            "n/a".into()
                        } else {
                            "error".into()
                        }
                    }
                    None => "-".into(),
                });
            }
            let base = rate(find(rows, w, &targets[0], n));
            for t in targets.iter().skip(1) {
                line.push(match (base, rate(find(rows, w, t, n))) {
                    (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
                    _ => "-".into(),
                });
            }
            body.push(line);
        }
        if let Some(&lo) = threads.first() {
            for &n in threads.iter().skip(1) {
                let mut line = vec![format!("scaling {n}÷{lo}")];
                for t in &targets {
                    line.push(
                        match (rate(find(rows, w, t, lo)), rate(find(rows, w, t, n))) {
                            (Some(a), Some(b)) if a > 0.0 => format!("{:.2}", b / a),
                            _ => "-".into(),
                        },
                    );
                }
                line.extend(targets.iter().skip(1).map(|_| String::new()));
                body.push(line);
            }
        }
        out.push(Table {
            title: format!("{w} — {}", describe(w)),
            header,
            body,
            notes: notes.into_iter().collect(),
        });
    }
    out
}

/// Aligned text for the terminal.
pub fn render_text(t: &Table) -> String {
    let cols = t.header.len();
    let mut width = vec![0usize; cols];
    for line in std::iter::once(&t.header).chain(&t.body) {
        for (i, c) in line.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let fmt_line = |line: &Vec<String>| {
        let mut s = String::new();
        for (i, c) in line.iter().enumerate() {
            let pad = width[i] - c.chars().count();
            if i == 0 {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str("  ");
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            }
        }
        s.trim_end().to_string()
    };
    let mut out = format!("{}\n", t.title);
    out.push_str(&fmt_line(&t.header));
    out.push('\n');
    for line in &t.body {
        out.push_str(&fmt_line(line));
        out.push('\n');
    }
    for n in &t.notes {
        out.push_str(&format!("  note: {n}\n"));
    }
    out
}

/// A Markdown table.
pub fn render_markdown(t: &Table) -> String {
    let esc = |s: &str| s.replace('|', "\\|");
    let mut out = format!("### {}\n\n", esc(&t.title));
    out.push_str(&format!(
        "| {} |\n",
        t.header
            .iter()
            .map(|h| esc(h))
            .collect::<Vec<_>>()
            .join(" | ")
    ));
    out.push_str(&format!(
        "|{}\n",
        t.header
            .iter()
            .enumerate()
            .map(|(i, _)| if i == 0 { "---|" } else { "---:|" })
            .collect::<String>()
    ));
    for line in &t.body {
        out.push_str(&format!(
            "| {} |\n",
            line.iter().map(|c| esc(c)).collect::<Vec<_>>().join(" | ")
        ));
    }
    if !t.notes.is_empty() {
        out.push('\n');
        for n in &t.notes {
            out.push_str(&format!("- {}\n", esc(n)));
        }
    }
    out.push('\n');
    out
}
