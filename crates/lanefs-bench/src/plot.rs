//! PNG plots: one panel per workload with each target's ops/s against
//! threads (scaling curves), and a last panel of ratio bars (the first
//! target ÷ each other one, at the most threads measured).
//!
//! Text needs a TrueType font: `$LANEFS_BENCH_FONT`, else DejaVu Sans from
//! Debian's `fonts-dejavu-core` (scripts/setup-bench.sh installs it). With
//! no font (or `LANEFS_BENCH_FONT=none`) the plot is drawn without text.
//!
//! Shared state: plotters' font registry, filled once under a `Once`.

use crate::results::{Row, Status};
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;

/// Where to look for a font when `$LANEFS_BENCH_FONT` is unset.
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];
const PANEL_W: u32 = 420;
const PANEL_H: u32 = 300;
const PANELS_PER_ROW: u32 = 4;
/// Height of the full-width ratio panel at the bottom.
const RATIO_H: u32 = 380;

static FONT_ONCE: Once = Once::new();
static FONT_OK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Register a font with plotters, once; whether one is available (also used
/// by the conflict audit's heatmap).
pub fn font_available() -> bool {
    FONT_ONCE.call_once(|| {
        let env = std::env::var("LANEFS_BENCH_FONT").ok();
        if env.as_deref() == Some("none") {
            return;
        }
        let candidates = env
            .iter()
            .map(String::as_str)
            .chain(FONT_PATHS.iter().copied());
        for p in candidates {
            if let Ok(bytes) = std::fs::read(p) {
                // plotters keeps the font for the life of the process.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    FONT_OK.store(true, std::sync::atomic::Ordering::Relaxed);
                    return;
                }
            }
        }
    });
    FONT_OK.load(std::sync::atomic::Ordering::Relaxed)
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

fn rate(rows: &[Row], w: &str, t: &str, n: usize) -> Option<f64> {
    rows.iter()
        .find(|r| {
            r.workload == w && r.target_label() == t && r.threads == n && r.status == Status::Ok
        })
        .and_then(|r| r.ops_per_sec)
}

fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("plot: {e:?}")
}

/// Draw `rows` into a PNG at `path`.
pub fn draw(rows: &[Row], title: &str, path: &Path) -> Result<(), String> {
    let text = font_available();
    let workloads = order(rows.iter().map(|r| r.workload.clone()));
    let targets = order(rows.iter().map(|r| r.target_label()));
    let mut threads: Vec<usize> = order(rows.iter().map(|r| r.threads));
    threads.sort_unstable();
    if workloads.is_empty() {
        return Err("plot: no results".into());
    }
    let panels = workloads.len() as u32;
    let rows_n = panels.div_ceil(PANELS_PER_ROW);
    let top = if text { 40 } else { 0 };
    let w = PANEL_W * PANELS_PER_ROW;
    let h = PANEL_H * rows_n + RATIO_H + top;
    let root = BitMapBackend::new(path, (w, h)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let body = if text {
        let (head, body) = root.split_vertically(top);
        head.titled(title, ("sans-serif", 22)).map_err(err)?;
        body
    } else {
        root.clone()
    };
    let (grid, ratio_area) = body.split_vertically(PANEL_H * rows_n);
    let areas = grid.split_evenly((rows_n as usize, PANELS_PER_ROW as usize));
    let color = |i: usize| Palette99::pick(i).to_rgba();
    let xmax = *threads.last().unwrap_or(&1) as f64;
    let xmin = *threads.first().unwrap_or(&1) as f64;
    for (wi, wl) in workloads.iter().enumerate() {
        let area = &areas[wi];
        let ymax = targets
            .iter()
            .flat_map(|t| threads.iter().filter_map(|&n| rate(rows, wl, t, n)))
            .fold(0.0f64, f64::max)
            .max(1.0)
            * 1.15;
        let mut b = ChartBuilder::on(area);
        b.margin(8);
        if text {
            b.caption(wl, ("sans-serif", 16))
                .x_label_area_size(28)
                .y_label_area_size(56);
        }
        let xr = if xmax > xmin {
            xmin..xmax
        } else {
            (xmin - 0.5)..(xmax + 0.5)
        };
        let mut chart = b.build_cartesian_2d(xr, 0.0..ymax).map_err(err)?;
        let mut mesh = chart.configure_mesh();
        if text {
            mesh.x_desc("threads")
                .x_labels(threads.len().max(2))
                .x_label_formatter(&|x| format!("{x:.0}"))
                .y_label_formatter(&|y| crate::table::human(*y))
                .label_style(("sans-serif", 11));
        } else {
            mesh.x_labels(0).y_labels(0);
        }
        mesh.draw().map_err(err)?;
        for (ti, t) in targets.iter().enumerate() {
            let pts: Vec<(f64, f64)> = threads
                .iter()
                .filter_map(|&n| rate(rows, wl, t, n).map(|r| (n as f64, r)))
                .collect();
            if pts.is_empty() {
                continue;
            }
            let c = color(ti);
            let s = chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                .map_err(err)?;
            if text {
                s.label(t.as_str()).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                });
            }
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
                .map_err(err)?;
        }
        if text {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .label_font(("sans-serif", 11))
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK.mix(0.3))
                .draw()
                .map_err(err)?;
        }
    }
    // Ratio bars: first target ÷ each other target, at the most threads,
    // on a log scale around 1 (bars go up where the first target is faster).
    let nmax = *threads.last().unwrap_or(&1);
    let others: Vec<&String> = targets.iter().skip(1).collect();
    let mut ratios: Vec<(usize, usize, f64)> = Vec::new();
    for (wi, wl) in workloads.iter().enumerate() {
        for (oi, t) in others.iter().enumerate() {
            if let (Some(a), Some(b)) = (rate(rows, wl, &targets[0], nmax), rate(rows, wl, t, nmax))
            {
                if b > 0.0 {
                    ratios.push((wi, oi, a / b));
                }
            }
        }
    }
    let hi = ratios.iter().map(|r| r.2).fold(2.0f64, f64::max) * 1.5;
    let lo = ratios.iter().map(|r| r.2).fold(0.5f64, f64::min) / 2.0;
    let groups = workloads.len() as f64;
    let mut b = ChartBuilder::on(&ratio_area);
    b.margin(10);
    if text {
        b.caption(
            format!(
                "{} ÷ each other target at {nmax} threads (log scale; above 1: {} is faster)",
                targets[0], targets[0]
            ),
            ("sans-serif", 16),
        )
        .x_label_area_size(10)
        .y_label_area_size(50);
    }
    let mut chart = b
        .build_cartesian_2d(0.0..groups, (lo..hi).log_scale())
        .map_err(err)?;
    let mut mesh = chart.configure_mesh();
    mesh.disable_x_mesh().x_labels(0);
    if text {
        mesh.y_label_formatter(&|y| format!("{y:.2}x"))
            .label_style(("sans-serif", 11));
    } else {
        mesh.y_labels(0);
    }
    mesh.draw().map_err(err)?;
    let k = others.len().max(1) as f64;
    for &(wi, oi, r) in &ratios {
        let x0 = wi as f64 + 0.1 + 0.8 * oi as f64 / k;
        let x1 = x0 + 0.8 / k;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(x0, 1.0), (x1, r)],
                color(oi + 1).filled(),
            )))
            .map_err(err)?;
    }
    chart
        .draw_series(LineSeries::new(
            vec![(0.0, 1.0), (groups, 1.0)],
            BLACK.stroke_width(1),
        ))
        .map_err(err)?;
    if text {
        let style = ("sans-serif", 11).into_font().color(&BLACK);
        chart
            .draw_series(
                workloads.iter().enumerate().map(|(wi, wl)| {
                    Text::new(wl.clone(), (wi as f64 + 0.1, lo * 1.08), style.clone())
                }),
            )
            .map_err(err)?;
        for (oi, t) in others.iter().enumerate() {
            let c = color(oi + 1);
            chart
                .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
                .map_err(err)?
                .label(format!("{} ÷ {t}", targets[0]))
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font(("sans-serif", 12))
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK.mix(0.3))
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}
