//! Results: rows, summary statistics, the machine and options they came
//! from, and their JSON and CSV forms.

use serde::{Deserialize, Serialize};

/// The schema name written into every results file.
pub const SCHEMA: &str = "lanefs-bench/1";

/// The machine a run was measured on.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Machine {
    pub cpu_model: String,
    /// Logical CPUs available to this process.
    pub cores: usize,
    pub memory_bytes: u64,
    pub kernel: String,
    pub hostname: String,
}

impl Machine {
    /// Read the machine description from /proc and uname.
    pub fn detect() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_bytes = meminfo
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or(0);
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into())
        };
        Machine {
            cpu_model,
            cores: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            memory_bytes,
            kernel: format!(
                "{} {}",
                read("/proc/sys/kernel/ostype"),
                read("/proc/sys/kernel/osrelease")
            ),
            hostname: read("/proc/sys/kernel/hostname"),
        }
    }

    /// One line for tables and reports.
    pub fn summary(&self) -> String {
        format!(
            "{}, {} cores, {:.1} GiB, {}",
            self.cpu_model,
            self.cores,
            self.memory_bytes as f64 / (1u64 << 30) as f64,
            self.kernel
        )
    }
}

/// The first three fields of `/proc/loadavg`.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The commit the tool was built from (recorded at build time by
/// `build.rs`, `-dirty` when tracked files differed), so a result names
/// the code that made it whatever the working directory.
pub fn git_commit() -> String {
    env!("LANEFS_BUILD_COMMIT").to_string()
}

/// The options a run was made with.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Options {
    pub targets: Vec<String>,
    pub workloads: Vec<String>,
    pub threads: Vec<usize>,
    pub duration_secs: f64,
    pub runs: usize,
    pub seed: u64,
    pub files_per_thread: usize,
    pub fsmark_bytes: usize,
    pub quick: bool,
    /// Engine variants of the inproc target, as given to `--variant`
    /// after expansion (`all`, `seeds`) and canonicalisation.
    #[serde(default)]
    pub variants: Vec<String>,
    /// The command line, as given.
    pub command_line: String,
}

/// Status of a result row.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    #[serde(rename = "n/a")]
    NotApplicable,
    Error,
}

/// One (workload, target, variant, threads) result over all its runs.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Row {
    pub workload: String,
    pub target: String,
    pub variant: String,
    pub threads: usize,
    /// Median over runs of operations per second (all threads together);
    /// `null` unless `status` is `ok`.
    pub ops_per_sec: Option<f64>,
    /// Runs measured.
    pub runs: usize,
    /// (max − min) ÷ median of the runs' rates.
    pub spread: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    /// Each run's rate, in the order measured.
    pub samples: Vec<f64>,
    /// Median over runs of the timed window, seconds.
    pub timed_secs: Option<f64>,
    /// Median over runs of the threads' CPU time per operation, ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ns_per_op: Option<f64>,
    /// Median over runs of each run's median latency, ns (workloads that
    /// time single operations: seed001's instance drop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_p50_ns: Option<f64>,
    /// Median over runs of each run's 99th-percentile latency, ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_p99_ns: Option<f64>,
    /// Median over runs of the background thread's work per second
    /// (seed001: registry scans/s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aux_per_sec: Option<f64>,
    /// Median over runs of the background thread's CPU share of the
    /// window (seed001: the reclaim thread; 1.0 = a whole core).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aux_cpu_share: Option<f64>,
    pub status: Status,
    /// Why n/a, or the error.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// Median of a non-empty slice (mean of the middle two for even lengths).
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// What one run of a cell gives a row.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RunSample {
    pub ops_per_sec: f64,
    pub secs: f64,
    pub cpu_ns_per_op: Option<f64>,
    pub latency_p50_ns: Option<f64>,
    pub latency_p99_ns: Option<f64>,
    pub aux_per_sec: Option<f64>,
    pub aux_cpu_share: Option<f64>,
}

impl RunSample {
    /// The numbers of one measured run.
    pub fn of(m: &crate::harness::Measurement) -> RunSample {
        let lat = m.latency_p50_p99();
        RunSample {
            ops_per_sec: m.ops_per_sec(),
            secs: m.secs_max(),
            cpu_ns_per_op: m.cpu_ns_per_op(),
            latency_p50_ns: lat.map(|l| l.0 as f64),
            latency_p99_ns: lat.map(|l| l.1 as f64),
            aux_per_sec: m.aux_per_sec,
            aux_cpu_share: m.aux_cpu_share,
        }
    }
}

/// Median of the values present, `None` if none is.
fn median_of(xs: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let v: Vec<f64> = xs.flatten().collect();
    (!v.is_empty()).then(|| median(&v))
}

impl Row {
    /// Summarise a row from its runs.
    pub fn from_runs(
        workload: &str,
        target: &str,
        variant: &str,
        threads: usize,
        runs: &[RunSample],
    ) -> Row {
        let mut row = Row::from_samples(
            workload,
            target,
            variant,
            threads,
            runs.iter().map(|r| r.ops_per_sec).collect(),
            runs.iter().map(|r| r.secs).collect(),
        );
        row.cpu_ns_per_op = median_of(runs.iter().map(|r| r.cpu_ns_per_op));
        row.latency_p50_ns = median_of(runs.iter().map(|r| r.latency_p50_ns));
        row.latency_p99_ns = median_of(runs.iter().map(|r| r.latency_p99_ns));
        row.aux_per_sec = median_of(runs.iter().map(|r| r.aux_per_sec));
        row.aux_cpu_share = median_of(runs.iter().map(|r| r.aux_cpu_share));
        row
    }

    /// Summarise a row from its runs' rates and timed windows.
    pub fn from_samples(
        workload: &str,
        target: &str,
        variant: &str,
        threads: usize,
        samples: Vec<f64>,
        secs: Vec<f64>,
    ) -> Row {
        let med = median(&samples);
        let min = samples.iter().cloned().fold(f64::INFINITY, f64::min);
        let max = samples.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        Row {
            workload: workload.into(),
            target: target.into(),
            variant: variant.into(),
            threads,
            ops_per_sec: Some(med),
            runs: samples.len(),
            spread: Some(if med > 0.0 { (max - min) / med } else { 0.0 }),
            min: Some(min),
            max: Some(max),
            samples,
            timed_secs: Some(median(&secs)),
            cpu_ns_per_op: None,
            latency_p50_ns: None,
            latency_p99_ns: None,
            aux_per_sec: None,
            aux_cpu_share: None,
            status: Status::Ok,
            note: String::new(),
        }
    }

    /// A row with no numbers.
    pub fn without_numbers(
        workload: &str,
        target: &str,
        variant: &str,
        threads: usize,
        status: Status,
        note: String,
    ) -> Row {
        Row {
            workload: workload.into(),
            target: target.into(),
            variant: variant.into(),
            threads,
            ops_per_sec: None,
            runs: 0,
            spread: None,
            min: None,
            max: None,
            samples: Vec::new(),
            timed_secs: None,
            cpu_ns_per_op: None,
            latency_p50_ns: None,
            latency_p99_ns: None,
            aux_per_sec: None,
            aux_cpu_share: None,
            status,
            note,
        }
    }

    /// `target` or `target/variant` when the variant matters.
    pub fn target_label(&self) -> String {
        if self.variant == "-" || self.variant == "default" {
            self.target.clone()
        } else {
            format!("{}/{}", self.target, self.variant)
        }
    }
}

/// A results file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Results {
    pub schema: String,
    pub tool_version: String,
    pub commit: String,
    /// Seconds since the Unix epoch when the run started.
    pub started_unix: u64,
    pub machine: Machine,
    pub options: Options,
    /// `/proc/loadavg` when the run started and when it ended: other load
    /// on the machine makes every number, scaling above all, less certain.
    #[serde(default)]
    pub loadavg_start: String,
    #[serde(default)]
    pub loadavg_end: String,
    /// The plot drawn for this run, if any (path as given).
    #[serde(default)]
    pub plot: Option<String>,
    /// How each lanefs mount among the targets was served (`target:
    /// transport=… threads=…`, from `lanefs stats`), in target order.
    #[serde(default)]
    pub served: Vec<String>,
    pub results: Vec<Row>,
}

impl Results {
    /// Write as pretty JSON.
    pub fn write_json(&self, path: &std::path::Path) -> Result<(), String> {
        let s = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        std::fs::write(path, s + "\n").map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Read a results file.
    pub fn read_json(path: &std::path::Path) -> Result<Results, String> {
        let s = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&s).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// CSV: one line per row, with the commit and machine on every line.
    pub fn to_csv(&self) -> String {
        let mut out = String::from(
            "workload,target,variant,threads,ops_per_sec,runs,spread,min,max,timed_secs,cpu_ns_per_op,latency_p50_ns,latency_p99_ns,status,note,commit,cpu_model,cores\n",
        );
        let num = |x: Option<f64>| x.map(|v| format!("{v:.1}")).unwrap_or_default();
        let q = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
        for r in &self.results {
            out.push_str(&format!(
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                r.workload,
                q(&r.target),
                q(&r.variant),
                r.threads,
                num(r.ops_per_sec),
                r.runs,
                r.spread.map(|v| format!("{v:.4}")).unwrap_or_default(),
                num(r.min),
                num(r.max),
                r.timed_secs.map(|v| format!("{v:.4}")).unwrap_or_default(),
                num(r.cpu_ns_per_op),
                num(r.latency_p50_ns),
                num(r.latency_p99_ns),
                match r.status {
                    Status::Ok => "ok",
                    Status::NotApplicable => "n/a",
                    Status::Error => "error",
                },
                q(&r.note),
                self.commit,
                q(&self.machine.cpu_model),
                self.machine.cores
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_spread() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        let r = Row::from_samples(
            "MRPL",
            "inproc",
            "default",
            1,
            vec![90.0, 110.0, 100.0],
            vec![1.0; 3],
        );
        assert_eq!(r.ops_per_sec, Some(100.0));
        assert!((r.spread.unwrap() - 0.2).abs() < 1e-9);
    }
}
