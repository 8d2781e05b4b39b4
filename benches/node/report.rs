//! Results: statistics, one markdown table per scenario (stdout) and the machine-readable
//! summary (JSON) that hack/bench.sh turns into BENCHMARKS.md.

use serde::Serialize;

#[derive(Serialize, Default)]
pub struct Summary {
    pub runtime: String,
    pub runtime_version: String,
    pub cri_api: String,
    /// How the baseline and crilet's starts were observed.
    pub observed_by: String,
    pub scenarios: Vec<Scenario>,
}

#[derive(Serialize, Default)]
pub struct Scenario {
    pub id: String,
    pub title: String,
    /// What exactly is measured, and how (one paragraph).
    pub how: String,
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
    /// The baseline column's heading ("" = "baseline (raw CRI)").
    pub baseline_label: String,
}

#[derive(Serialize, Default, Clone)]
pub struct Row {
    pub metric: String,
    /// Display values ("" when there is none).
    pub baseline: String,
    pub crilet: String,
    pub ratio: Option<f64>,
    pub target: String,
    pub met: Option<bool>,
    /// The samples behind the row (ms unless the metric says otherwise).
    pub baseline_samples: Vec<f64>,
    pub crilet_samples: Vec<f64>,
}

pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 { f64::NAN } else { (s[(n - 1) / 2] + s[n / 2]) / 2.0 }
}

/// Nearest-rank percentile `q` (0–1].
fn percentile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() { f64::NAN } else { s[((s.len() as f64 * q).ceil() as usize).max(1) - 1] }
}

pub fn p95(v: &[f64]) -> f64 {
    percentile(v, 0.95)
}

pub fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NAN, f64::max)
}

pub fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NAN, f64::min)
}

/// "median / p95 ms" of a series.
pub fn med_p95(v: &[f64], unit: &str) -> String {
    format!("{:.1} / {:.1} {unit}", median(v), p95(v))
}

/// A baseline-vs-crilet row compared by the ratio of medians against `limit` (e.g. 1.10).
pub fn ratio_row(metric: &str, raw: &[f64], crilet: &[f64], unit: &str, limit: Option<f64>) -> Row {
    stat_row(metric, raw, crilet, unit, limit, median)
}

/// The same compared by the ratio of p95s.
pub fn p95_row(metric: &str, raw: &[f64], crilet: &[f64], unit: &str, limit: Option<f64>) -> Row {
    stat_row(metric, raw, crilet, unit, limit, p95)
}

fn stat_row(
    metric: &str,
    raw: &[f64],
    crilet: &[f64],
    unit: &str,
    limit: Option<f64>,
    stat: fn(&[f64]) -> f64,
) -> Row {
    let ratio = stat(crilet) / stat(raw);
    Row {
        metric: metric.into(),
        baseline: med_p95(raw, unit),
        crilet: med_p95(crilet, unit),
        ratio: Some(ratio),
        target: limit.map_or(String::new(), |l| format!("≤ {l:.2}×")),
        met: limit.map(|l| ratio <= l),
        baseline_samples: raw.to_vec(),
        crilet_samples: crilet.to_vec(),
    }
}

fn cell(s: &str) -> String {
    if s.is_empty() { "—".into() } else { s.replace('|', "\\|") }
}

impl Scenario {
    pub fn markdown(&self) -> String {
        let mut out = format!("\n### {}\n\n{}\n\n", self.title, self.how);
        let baseline =
            if self.baseline_label.is_empty() { "baseline (raw CRI)" } else { &self.baseline_label };
        out.push_str(&format!("| metric | {baseline} | crilet | ratio | target | met |\n"));
        out.push_str("| --- | --- | --- | --- | --- | --- |\n");
        for r in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                cell(&r.metric),
                cell(&r.baseline),
                cell(&r.crilet),
                r.ratio.map_or("—".into(), |x| format!("{x:.2}×")),
                cell(&r.target),
                match r.met {
                    Some(true) => "met",
                    Some(false) => "**not met**",
                    None => "—",
                }
            ));
        }
        for n in &self.notes {
            out.push_str(&format!("\n{n}\n"));
        }
        out
    }
}
