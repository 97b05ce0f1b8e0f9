//! The scenario page, `reports/<scenario>/README.md`: faithful and hardened side by side —
//! verdicts, headline figures, charts (SVG files next to it), then the details of each.
//!
//! Built from the variants' gated JSON reports, read back from disk: `orrery reports` runs
//! each variant in its own process, and the page is a view of what those runs wrote, so it
//! can never say something the reports do not.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Deserialize;

use super::headline;
use super::svg::{BarChart, Line, TimeChart};
use crate::harness::metrics::SeriesKind;

/// Why a page could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    /// A variant's report could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The report file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A variant's report is not a report.
    #[error("{path}: not a report: {source}")]
    Parse {
        /// The report file.
        path: String,
        /// The cause.
        source: serde_json::Error,
    },
    /// The page or a chart could not be written.
    #[error("{path}: cannot write: {source}")]
    Write {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// The parts of a variant's JSON report a page shows.
#[derive(Debug, Deserialize)]
pub struct VariantReport {
    /// Scenario name.
    pub scenario: String,
    /// What the scenario shows.
    pub description: String,
    /// `faithful` or `hardened`.
    pub variant: String,
    /// The seed run.
    pub seed: u64,
    /// Result class.
    pub result: String,
    /// Expected result class.
    pub expected_result: String,
    /// Whether they agree.
    pub as_expected: bool,
    /// Simulated seconds.
    pub sim_seconds: f64,
    /// Faults applied.
    #[serde(default)]
    pub faults: Vec<FaultView>,
    /// Invariant verdicts.
    pub invariants: Vec<InvariantView>,
    /// Figures.
    pub metrics: MetricsView,
    /// Headline figures.
    #[serde(default)]
    pub headline: BTreeMap<String, serde_json::Value>,
    /// Trace hash.
    pub trace_hash: String,
    /// Command that reproduces the run.
    pub repro: String,
}

/// A fault as the report lists it.
#[derive(Debug, Deserialize)]
pub struct FaultView {
    /// When.
    pub at_ms: u64,
    /// Which.
    pub action: String,
}

/// An invariant's verdict as the report lists it.
#[derive(Debug, Deserialize)]
pub struct InvariantView {
    /// Invariant name.
    pub name: String,
    /// The first violation.
    #[serde(default)]
    pub violation: Option<ViolationView>,
}

/// A violation as the report lists it.
#[derive(Debug, Deserialize)]
pub struct ViolationView {
    /// When first seen.
    pub at_ms: u64,
    /// Host it concerns.
    pub host: String,
    /// What it is about.
    #[serde(default)]
    pub subject: Option<String>,
    /// What was wrong.
    pub details: serde_json::Value,
}

/// The figures as the report lists them.
#[derive(Debug, Default, Deserialize)]
pub struct MetricsView {
    /// Counters.
    #[serde(default)]
    pub counters: BTreeMap<String, u64>,
    /// Histograms.
    #[serde(default)]
    pub histograms: BTreeMap<String, HistogramView>,
    /// Time series.
    #[serde(default)]
    pub series: BTreeMap<String, Vec<(u64, u64)>>,
    /// What each series' values are (absent: levels).
    #[serde(default)]
    pub series_kinds: BTreeMap<String, String>,
    /// Shard ownership.
    #[serde(default)]
    pub ownership: Option<OwnershipView>,
}

impl MetricsView {
    /// The kind of series `name`.
    pub fn kind(&self, name: &str) -> SeriesKind {
        match self.series_kinds.get(name).map(String::as_str) {
            Some("count") => SeriesKind::Count,
            Some("sample") => SeriesKind::Sample,
            _ => SeriesKind::Level,
        }
    }
}

/// A histogram as the report lists it.
#[derive(Debug, Deserialize)]
pub struct HistogramView {
    /// Unit.
    pub unit: String,
    /// Samples.
    pub count: usize,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest.
    pub max: u64,
    /// (range label, samples).
    pub buckets: Vec<(String, usize)>,
}

/// Shard ownership as the report lists it.
#[derive(Debug, Deserialize)]
pub struct OwnershipView {
    /// Every change.
    pub changes: Vec<OwnershipChangeView>,
    /// Longest time an app had no live owner.
    pub longest_orphan_window_ms: u64,
    /// Apps ever without a live owner.
    pub apps_ever_orphaned: usize,
}

/// One ownership change.
#[derive(Debug, Deserialize)]
pub struct OwnershipChangeView {
    /// When.
    pub at_ms: u64,
    /// Apps without a live owner after it.
    pub orphaned: usize,
    /// Apps with more than one live owner after it.
    pub doubly_owned: usize,
}

/// Reads `<dir>/<variant>.json` for each variant present, in the order given.
pub fn read(dir: &Path, variants: &[&str]) -> Result<Vec<VariantReport>, PageError> {
    let mut reports = Vec::new();
    for variant in variants {
        let path = dir.join(format!("{variant}.json"));
        let shown = path.display().to_string();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(PageError::Read {
                    path: shown,
                    source,
                })
            }
        };
        reports.push(
            serde_json::from_str(&text).map_err(|source| PageError::Parse {
                path: shown,
                source,
            })?,
        );
    }
    Ok(reports)
}

/// One chart of a page: its file name, its heading and its SVG.
pub struct Chart {
    /// File name next to the page (`stale_apps.svg`).
    pub file: String,
    /// What it shows.
    pub title: String,
    /// The SVG text.
    pub svg: String,
}

/// The series charted, in page order: (series name, title); a series with points in either
/// variant gets its chart.
pub const CHARTED_SERIES: [(&str, &str); 11] = [
    ("stale_apps", "Apps the platform shows stale or missing"),
    ("stale_rollouts", "Rollouts the platform shows stale"),
    (
        "stale_workflows",
        "Workflows the platform shows in another phase",
    ),
    (
        "queue_depth",
        "Events queued in the reporters (all replicas)",
    ),
    (
        "dropped_events",
        "Events the reporters dropped (all replicas, cumulative)",
    ),
    (
        "availability_pct_per_10s",
        "Requests through the tunnel answered, % per 10 s",
    ),
    (
        "registrations_per_s",
        "Tunnel registrations at the server per second",
    ),
    (
        "runner_builds_running",
        "Runner builds admitted and not ended",
    ),
    (
        "runner_builds_pending",
        "Runner builds waiting for admission",
    ),
    (
        "runner_duplicate_builds_so_far",
        "Runner builds beyond the first of one webhook delivery or cron tick, so far",
    ),
    (
        "runner_orphans",
        "Pods and volume claims of ended Runner builds in the cluster",
    ),
];

/// Every chart of a page: the charted series any variant has, ownership during rebalancing,
/// and each histogram's buckets.
pub fn charts(reports: &[VariantReport]) -> Vec<Chart> {
    let end_s = reports
        .iter()
        .map(|r| r.sim_seconds.ceil() as u64)
        .max()
        .unwrap_or(0);
    let faults: Vec<(u64, String)> = reports
        .first()
        .map(|r| {
            r.faults
                .iter()
                .map(|f| (f.at_ms / 1000, f.action.clone()))
                .collect()
        })
        .unwrap_or_default();
    let mut charts = Vec::new();
    for (series, title) in CHARTED_SERIES {
        if !reports
            .iter()
            .any(|r| r.metrics.series.contains_key(series))
        {
            continue;
        }
        let kind = reports
            .iter()
            .find(|r| r.metrics.series.contains_key(series))
            .map_or(SeriesKind::Level, |r| r.metrics.kind(series));
        let lines: Vec<Line> = reports
            .iter()
            .filter_map(|r| {
                Some(Line {
                    variant: &r.variant,
                    points: r.metrics.series.get(series).filter(|p| !p.is_empty())?,
                })
            })
            .collect();
        if lines.is_empty() {
            continue;
        }
        let svg = TimeChart {
            title,
            series,
            kind,
            end_s,
            faults: &faults,
            lines,
        }
        .render();
        charts.push(Chart {
            file: format!("{series}.svg"),
            title: title.to_string(),
            svg,
        });
    }
    // Ownership: apps without a live owner, and with two, after each change.
    let owned: Vec<(&str, &OwnershipView)> = reports
        .iter()
        .filter_map(|r| Some((r.variant.as_str(), r.metrics.ownership.as_ref()?)))
        .collect();
    let orphaned: fn(&OwnershipChangeView) -> usize = |c| c.orphaned;
    let doubly: fn(&OwnershipChangeView) -> usize = |c| c.doubly_owned;
    for (series, title, count) in [
        (
            "ownership.orphaned",
            "Apps without a live owner (after each membership change)",
            orphaned,
        ),
        (
            "ownership.doubly_owned",
            "Apps with two live owners (after each membership change)",
            doubly,
        ),
    ] {
        if owned.is_empty() {
            break;
        }
        let points: Vec<Vec<(u64, u64)>> = owned
            .iter()
            .map(|(_, o)| {
                o.changes
                    .iter()
                    .map(|c| (c.at_ms / 1000, count(c) as u64))
                    .collect()
            })
            .collect();
        let lines = owned
            .iter()
            .zip(&points)
            .map(|((variant, _), points)| Line { variant, points })
            .collect();
        charts.push(Chart {
            file: format!("{series}.svg"),
            title: title.to_string(),
            svg: TimeChart {
                title,
                series,
                kind: SeriesKind::Level,
                end_s,
                faults: &faults,
                lines,
            }
            .render(),
        });
    }
    if let Some(chart) = cost_chart(reports) {
        charts.push(chart);
    }
    let histograms = names(reports, |m| m.histograms.keys());
    for name in histograms {
        let Some(first) = reports.iter().find_map(|r| r.metrics.histograms.get(name)) else {
            continue;
        };
        let title = format!("{name} ({}): samples per range", first.unit);
        let bars = reports
            .iter()
            .filter_map(|r| {
                let h = r.metrics.histograms.get(name)?;
                Some((
                    r.variant.as_str(),
                    h.buckets.iter().map(|(_, n)| *n).collect(),
                ))
            })
            .collect();
        let svg = BarChart {
            title: &title,
            histogram: name,
            buckets: first.buckets.iter().map(|(l, _)| l.as_str()).collect(),
            bars,
            joins: "samples in",
        }
        .render();
        charts.push(Chart {
            file: format!("histogram.{name}.svg"),
            title,
            svg,
        });
    }
    charts
}

/// The per-change cost figures charted, with their bucket labels.
pub const COST_FIGURES: [(&str, &str); 4] = [
    ("argocd_requests_per_change", "Argo CD requests"),
    ("platform_bytes_per_change", "bytes posted"),
    ("platform_read_bytes_per_change", "bytes read"),
    ("watch_lines_per_change", "watch lines"),
];

/// What the runtime asks of its neighbours per application change, each variant as a share
/// of faithful's (faithful = 100): the figures differ by orders of magnitude, and the
/// efficiency targets are ratios. Only where faithful has the figure and reporters ran.
fn cost_chart(reports: &[VariantReport]) -> Option<Chart> {
    let faithful = reports.iter().find(|r| r.variant == "faithful")?;
    let base = |name: &str| {
        faithful
            .headline
            .get(name)
            .and_then(serde_json::Value::as_f64)
            .filter(|v| *v > 0.0)
    };
    if base("argocd_requests_per_change").is_none() && base("platform_bytes_per_change").is_none() {
        return None;
    }
    let figures: Vec<(&str, &str)> = COST_FIGURES
        .into_iter()
        .filter(|(name, _)| base(name).is_some())
        .collect();
    let bars = reports
        .iter()
        .map(|r| {
            let shares = figures
                .iter()
                .map(|(name, _)| {
                    let value = r
                        .headline
                        .get(*name)
                        .and_then(serde_json::Value::as_f64)
                        .unwrap_or(0.0);
                    (value * 100.0 / base(name).unwrap_or(1.0)).round() as usize
                })
                .collect();
            (r.variant.as_str(), shares)
        })
        .collect();
    let title = "Cost per application change (faithful = 100)";
    let svg = BarChart {
        title,
        histogram: "cost_per_change",
        buckets: figures.iter().map(|(_, label)| *label).collect(),
        bars,
        joins: "(faithful = 100):",
    }
    .render();
    Some(Chart {
        file: "cost_per_change.svg".into(),
        title: title.into(),
        svg,
    })
}

/// The names any variant's metrics have under `keys` (counters, histograms), sorted, once each.
fn names<'a, K: Iterator<Item = &'a String>>(
    reports: &'a [VariantReport],
    keys: impl Fn(&'a MetricsView) -> K,
) -> Vec<&'a str> {
    let mut names: Vec<&str> = reports
        .iter()
        .flat_map(|r| keys(&r.metrics).map(String::as_str))
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Text made safe for one Markdown table cell: no column break, no line break.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

fn counter(r: &VariantReport, name: &str) -> Option<String> {
    r.metrics.counters.get(name).map(u64::to_string)
}

fn seconds(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

/// The page's Markdown.
pub fn render(reports: &[VariantReport], charts: &[Chart], swarm: bool) -> String {
    let mut out = String::new();
    let Some(first) = reports.first() else {
        return out;
    };
    let _ = writeln!(out, "# {}\n\n{}\n", first.scenario, first.description);
    let links: Vec<String> = reports
        .iter()
        .map(|r| format!("[{v}]({v}.md)", v = r.variant))
        .collect();
    let _ = writeln!(
        out,
        "Generated by `make reports`; never edit by hand. Seed {}; each variant's full report: {}.{}\n",
        first.seed,
        links.join(", "),
        if swarm {
            " Every listed seed of this family: [seeds.md](seeds.md)."
        } else {
            ""
        }
    );
    let header = |out: &mut String, first_column: &str| {
        let _ = writeln!(
            out,
            "| {first_column} | {} |\n|---|{}",
            reports
                .iter()
                .map(|r| r.variant.as_str())
                .collect::<Vec<_>>()
                .join(" | "),
            "---|".repeat(reports.len())
        );
    };
    let _ = writeln!(out, "## Verdicts\n");
    header(&mut out, "");
    let row = |out: &mut String, name: &str, cells: Vec<String>| {
        let _ = writeln!(out, "| {name} | {} |", cells.join(" | "));
    };
    row(
        &mut out,
        "result",
        reports
            .iter()
            .map(|r| {
                let mark = if r.as_expected {
                    "as expected"
                } else {
                    "**NOT as expected**"
                };
                format!("`{}` ({mark})", r.result)
            })
            .collect(),
    );
    let mut invariants: Vec<&str> = Vec::new();
    for r in reports {
        for i in &r.invariants {
            if !invariants.contains(&i.name.as_str()) {
                invariants.push(&i.name);
            }
        }
    }
    for name in &invariants {
        row(
            &mut out,
            &format!("`{name}`"),
            reports
                .iter()
                .map(|r| match r.invariants.iter().find(|i| i.name == *name) {
                    Some(InvariantView {
                        violation: Some(v), ..
                    }) => format!("**violated** at {}", seconds(v.at_ms)),
                    Some(_) => "held".to_string(),
                    None => "not checked".to_string(),
                })
                .collect(),
        );
    }
    let figures: Vec<(&str, Vec<Option<String>>)> = headline::FIGURES
        .iter()
        .map(|(name, label)| {
            let cells = reports
                .iter()
                .map(|r| r.headline.get(*name).map(|v| headline::format(name, v)))
                .collect::<Vec<_>>();
            (*label, cells)
        })
        .filter(|(_, cells)| cells.iter().any(Option::is_some))
        .collect();
    if !figures.is_empty() {
        let _ = writeln!(out, "\n## Headline figures\n");
        header(&mut out, "figure");
        for (name, cells) in figures {
            row(
                &mut out,
                name,
                cells
                    .into_iter()
                    .map(|c| c.unwrap_or_else(|| "–".into()))
                    .collect(),
            );
        }
    }
    if !charts.is_empty() {
        let _ = writeln!(
            out,
            "\n## Charts\n\nThe variants on one axis ({}); dashed verticals mark injected faults.\n",
            reports
                .iter()
                .map(|r| format!("{} in {}", r.variant, colour_name(&r.variant)))
                .collect::<Vec<_>>()
                .join(", ")
        );
        for chart in charts {
            let _ = writeln!(
                out,
                "### {}\n\n![{}]({})\n",
                chart.title, chart.title, chart.file
            );
        }
    }
    let violated: Vec<(&VariantReport, &InvariantView, &ViolationView)> = reports
        .iter()
        .flat_map(|r| {
            r.invariants
                .iter()
                .filter_map(move |i| Some((r, i, i.violation.as_ref()?)))
        })
        .collect();
    if !violated.is_empty() {
        let _ = writeln!(
            out,
            "\n## Violations\n\n| variant | invariant | first seen | host | about | what |\n|---|---|---|---|---|---|"
        );
        for (r, i, v) in violated {
            let what = v
                .details
                .get("why")
                .or_else(|| v.details.get("reason"))
                .and_then(|w| w.as_str())
                .map(cell)
                .unwrap_or_else(|| "see the variant's report".into());
            let _ = writeln!(
                out,
                "| [{v_}]({v_}.md) | `{}` | {} | {} | {} | {what} |",
                i.name,
                seconds(v.at_ms),
                cell(&v.host),
                v.subject
                    .as_deref()
                    .map(|s| format!("`{}`", cell(s)))
                    .unwrap_or_default(),
                v_ = r.variant
            );
        }
    }
    // The details side by side: every counter and histogram either variant has.
    let counters = names(reports, |m| m.counters.keys());
    if !counters.is_empty() {
        let _ = writeln!(out, "\n## Counters\n");
        header(&mut out, "counter");
        for name in counters {
            row(
                &mut out,
                name,
                reports
                    .iter()
                    .map(|r| counter(r, name).unwrap_or_else(|| "–".into()))
                    .collect(),
            );
        }
    }
    let histograms = names(reports, |m| m.histograms.keys());
    if !histograms.is_empty() {
        let _ = writeln!(out, "\n## Distributions (count · p50 · p99 · max)\n");
        header(&mut out, "histogram");
        for name in histograms {
            row(
                &mut out,
                name,
                reports
                    .iter()
                    .map(|r| match r.metrics.histograms.get(name) {
                        Some(h) => {
                            format!("{} · {} · {} · {} {}", h.count, h.p50, h.p99, h.max, h.unit)
                        }
                        None => "–".into(),
                    })
                    .collect(),
            );
        }
    }
    let _ = writeln!(out, "\n## Reproduce\n");
    for r in reports {
        let _ = writeln!(
            out,
            "- {}: `{}` (trace hash `{}`)",
            r.variant, r.repro, r.trace_hash
        );
    }
    out
}

/// How the page names a variant's colour.
fn colour_name(variant: &str) -> &'static str {
    match variant {
        "faithful" => "red",
        "hardened" => "blue",
        _ => "grey",
    }
}

/// Writes `<dir>/README.md` and its charts from the variants' reports in `dir`, replacing
/// the charts an earlier run left there.
pub fn write(dir: &Path, variants: &[&str], swarm: bool) -> Result<(), PageError> {
    let reports = read(dir, variants)?;
    if reports.is_empty() {
        return Ok(());
    }
    let write = |path: &Path, text: &str| {
        std::fs::write(path, text).map_err(|source| PageError::Write {
            path: path.display().to_string(),
            source,
        })
    };
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|x| x == "svg") {
                std::fs::remove_file(&path).map_err(|source| PageError::Write {
                    path: path.display().to_string(),
                    source,
                })?;
            }
        }
    }
    let charts = charts(&reports);
    for chart in &charts {
        write(&dir.join(&chart.file), &chart.svg)?;
    }
    write(&dir.join("README.md"), &render(&reports, &charts, swarm))
}
