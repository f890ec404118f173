//! The audit's outputs: per variant a summary (overall and per op-kind
//! pair), the ranked causes of the remaining conflicts, a JSON file of
//! every pair, a heatmap PNG and a text table.
//!
//! No locks or atomics.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde::Serialize;

use crate::ops::{COMMUTER_KINDS, INSTANCE_KINDS, KINDS};
use crate::runner::PairResult;

/// Counts for a set of pairs.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Counts {
    pub pairs: usize,
    pub commuting: usize,
    pub conflict_free: usize,
    pub errors: usize,
}

impl Counts {
    /// Fraction of commuting pairs that are conflict-free (1 when none).
    pub fn fraction(&self) -> f64 {
        if self.commuting == 0 {
            1.0
        } else {
            self.conflict_free as f64 / self.commuting as f64
        }
    }

    fn add(&mut self, r: &PairResult) {
        self.pairs += 1;
        if r.error.is_some() {
            self.errors += 1;
        }
        if r.commutes && r.error.is_none() {
            self.commuting += 1;
            if r.conflict_free == Some(true) {
                self.conflict_free += 1;
            }
        }
    }
}

/// One cause of conflicts: a site that writes a location the other op of
/// a pair touches, and how many conflicting pairs it is found in (a pair
/// with several causes counts for each).
#[derive(Clone, Debug, Serialize)]
pub struct Cause {
    /// The kind of location written: `atomic`, `mutex`, `rwlock`, `key`.
    pub what: String,
    /// `file:line` (or `store::call`) of the write.
    pub writer: String,
    /// The other op touched the very word written (true sharing), or only
    /// another word of its cache line (`false`: false sharing).
    pub same_word: bool,
    pub pairs: usize,
    /// A pair it explains, as an example.
    pub example: String,
}

/// The audit of one variant.
#[derive(Clone, Debug, Serialize)]
pub struct VariantReport {
    pub variant: String,
    pub spec: String,
    pub overall: Counts,
    /// "a_kind × b_kind" -> counts.
    pub per_kind: BTreeMap<String, Counts>,
    pub causes: Vec<Cause>,
    pub results: Vec<PairResult>,
}

fn kind_key(a: &str, b: &str) -> String {
    format!("{a} × {b}")
}

impl VariantReport {
    pub fn new(variant: &str, spec: &str, results: Vec<PairResult>) -> VariantReport {
        let mut overall = Counts::default();
        let mut per_kind: BTreeMap<String, Counts> = BTreeMap::new();
        let mut causes: BTreeMap<(String, String, bool), (usize, String)> = BTreeMap::new();
        for r in &results {
            overall.add(r);
            per_kind
                .entry(kind_key(r.a_kind, r.b_kind))
                .or_default()
                .add(r);
            // Each write site of a conflicting location explains the pair
            // once, however many locations it wrote.
            let mut seen = std::collections::BTreeSet::new();
            for c in &r.conflicts {
                for site in c.a_sites.iter().chain(&c.b_sites) {
                    let Some(site) = site.strip_suffix(" (w)") else {
                        continue;
                    };
                    let same_word = c.word_writers.iter().any(|w| w == site);
                    let key = (c.what.clone(), site.to_string(), same_word);
                    if seen.insert(key.clone()) {
                        let e = causes
                            .entry(key)
                            .or_insert((0, format!("{} ‖ {}", r.a, r.b)));
                        e.0 += 1;
                    }
                }
            }
        }
        let mut causes: Vec<Cause> = causes
            .into_iter()
            .map(|((what, writer, same_word), (pairs, example))| Cause {
                what,
                writer,
                same_word,
                pairs,
                example,
            })
            .collect();
        causes.sort_by(|a, b| b.pairs.cmp(&a.pairs).then(a.writer.cmp(&b.writer)));
        VariantReport {
            variant: variant.to_string(),
            spec: spec.to_string(),
            overall,
            per_kind,
            causes,
            results,
        }
    }

    /// Counts of the kind pair (either order).
    pub fn kind_counts(&self, a: &str, b: &str) -> Counts {
        let mut c = self
            .per_kind
            .get(&kind_key(a, b))
            .copied()
            .unwrap_or_default();
        if a != b {
            if let Some(d) = self.per_kind.get(&kind_key(b, a)) {
                c.pairs += d.pairs;
                c.commuting += d.commuting;
                c.conflict_free += d.conflict_free;
                c.errors += d.errors;
            }
        }
        c
    }

    /// Counts over the pairs whose both kinds are in `kinds` (each
    /// unordered kind pair once).
    pub fn counts_over(&self, kinds: &[&str]) -> Counts {
        let mut c = Counts::default();
        for (i, a) in kinds.iter().enumerate() {
            for b in &kinds[i..] {
                let d = self.kind_counts(a, b);
                c.pairs += d.pairs;
                c.commuting += d.commuting;
                c.conflict_free += d.conflict_free;
                c.errors += d.errors;
            }
        }
        c
    }

    /// Counts over the pairs of file-system operations only: without the
    /// instance ops (`mount`, `umount`), the set COMMUTER's and sv6's
    /// figures are over (their cross pairs with file operations touch
    /// different instances and would raise every variant alike).
    pub fn file_op_counts(&self) -> Counts {
        let file_ops: Vec<&str> = KINDS
            .iter()
            .copied()
            .filter(|k| !INSTANCE_KINDS.contains(k))
            .collect();
        self.counts_over(&file_ops)
    }

    /// Counts over the pairs of the calls COMMUTER's POSIX model has
    /// ([`COMMUTER_KINDS`]): the same op set as its Linux (68 %) and sv6
    /// (99 %) figures, which had no `chmod`, `truncate`, `mkdir`, `rmdir`
    /// or `readdir`.
    pub fn commuter_op_counts(&self) -> Counts {
        self.counts_over(&COMMUTER_KINDS)
    }

    /// One line: variant, conflict-free / commuting, percent, and the same
    /// over file-system operations only and over COMMUTER's calls only.
    pub fn summary_line(&self) -> String {
        let o = &self.overall;
        let f = self.file_op_counts();
        let m = self.commuter_op_counts();
        format!(
            "{:<28} {:>5} of {:>5} commuting pairs conflict-free ({:.1}%; file ops only {} of {}, {:.1}%; COMMUTER's calls only {} of {}, {:.1}%); {} pairs, {} not commuting, {} errors",
            self.variant,
            o.conflict_free,
            o.commuting,
            100.0 * o.fraction(),
            f.conflict_free,
            f.commuting,
            100.0 * f.fraction(),
            m.conflict_free,
            m.commuting,
            100.0 * m.fraction(),
            o.pairs,
            o.pairs - o.commuting - o.errors,
            o.errors
        )
    }

    /// The text table: the summary, the op × op matrix (percent
    /// conflict-free of commuting pairs; `-` where none commute) and the
    /// causes ranked.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{}", self.summary_line());
        let _ = write!(s, "{:>9}", "");
        for k in KINDS {
            let _ = write!(s, " {:>8}", k);
        }
        s.push('\n');
        for a in KINDS {
            let _ = write!(s, "{a:>9}");
            for b in KINDS {
                let c = self.kind_counts(a, b);
                if c.commuting == 0 {
                    let _ = write!(s, " {:>8}", "-");
                } else {
                    let _ = write!(s, " {:>7.0}%", 100.0 * c.fraction());
                }
            }
            s.push('\n');
        }
        if !self.causes.is_empty() {
            let _ = writeln!(
                s,
                "causes of conflicts (pairs, what, word = true sharing / line = false sharing, write site, example pair):"
            );
            for c in &self.causes {
                let _ = writeln!(
                    s,
                    "  {:>5}  {:<6} {:<4} {}   e.g. {}",
                    c.pairs,
                    c.what,
                    if c.same_word { "word" } else { "line" },
                    c.writer,
                    c.example
                );
            }
        }
        s
    }

    /// A file name for this variant's outputs.
    pub fn file_stem(&self) -> String {
        self.variant
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    }

    /// Write `audit-<variant>.json`, `.txt` and `.png` into `dir`.
    pub fn write(&self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        std::fs::create_dir_all(dir)?;
        let stem = self.file_stem();
        let json = dir.join(format!("audit-{stem}.json"));
        let text = dir.join(format!("audit-{stem}.txt"));
        let png = dir.join(format!("audit-{stem}.png"));
        std::fs::write(
            &json,
            serde_json::to_string_pretty(self).map_err(std::io::Error::other)?,
        )?;
        std::fs::write(&text, self.text())?;
        self.heatmap(&png).map_err(std::io::Error::other)?;
        Ok(vec![json, text, png])
    }

    /// The op × op heatmap: each cell is the fraction of the kind pair's
    /// commuting pairs that are conflict-free (green 1, red 0, grey where
    /// none commute), annotated with `free/commuting`.
    pub fn heatmap(&self, path: &Path) -> Result<(), String> {
        let n = KINDS.len() as i32;
        let (cell, left, top) = (56i32, 90i32, 70i32);
        let size = ((left + n * cell + 20) as u32, (top + n * cell + 20) as u32);
        let text = lanefs_bench::plot::font_available();
        let root = BitMapBackend::new(path, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let font = |px: i32| ("sans-serif", px).into_font().color(&BLACK);
        if text {
            let title = format!(
                "lanefs conflict audit, {}: {:.1}% of {} commuting pairs conflict-free",
                self.variant,
                100.0 * self.overall.fraction(),
                self.overall.commuting
            );
            root.draw(&Text::new(title, (10, 10), font(16)))
                .map_err(|e| e.to_string())?;
        }
        for (i, a) in KINDS.iter().enumerate() {
            let y = top + i as i32 * cell;
            if text {
                root.draw(&Text::new(a.to_string(), (8, y + cell / 2 - 6), font(12)))
                    .map_err(|e| e.to_string())?;
                let x = left + i as i32 * cell;
                root.draw(&Text::new(a.to_string(), (x + 2, top - 18), font(11)))
                    .map_err(|e| e.to_string())?;
            }
            for (j, b) in KINDS.iter().enumerate() {
                let x = left + j as i32 * cell;
                let c = self.kind_counts(a, b);
                let color = if c.commuting == 0 {
                    RGBColor(220, 220, 220)
                } else {
                    let f = c.fraction();
                    RGBColor((230.0 * (1.0 - f)) as u8 + 20, (200.0 * f) as u8 + 40, 60)
                };
                root.draw(&Rectangle::new(
                    [(x, y), (x + cell - 2, y + cell - 2)],
                    color.filled(),
                ))
                .map_err(|e| e.to_string())?;
                if text && c.commuting > 0 {
                    let label = format!("{}/{}", c.conflict_free, c.commuting);
                    root.draw(&Text::new(label, (x + 4, y + cell / 2 - 6), font(11)))
                        .map_err(|e| e.to_string())?;
                }
            }
        }
        root.present().map_err(|e| e.to_string())
    }
}
