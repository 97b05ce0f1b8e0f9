//! The sweep report: what every seed of a sweep did, per variant — results per seed, failures
//! grouped by invariant with the first failing seed's repro and shrink commands, reach
//! coverage, fault points, and the distribution of the headline figures across seeds.
//!
//! Built only from the runs' final JSON lines, so a sweep run here, a sharded sweep merged
//! from several machines (`orrery merge`) and `orrery reports` give the same report for the
//! same runs. It holds nothing that moves with the machine (no wall-clock figure), so the
//! reports `make reports` writes for the swarm families are gated.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use orrery_sim::report::headline;
use orrery_sim::report::svg::BarChart;
use orrery_sim::scenario::{Scenario, Variant};

use crate::common::Fail;
use crate::jobs::JobResult;
use crate::summary::Summary;

/// Per-seed charts are drawn for sweeps of at most this many seeds (beyond, bars blur).
const MAX_CHARTED_SEEDS: usize = 100;

/// The sweep report of one scenario.
#[derive(Debug, Serialize)]
pub struct SweepReport {
    /// Scenario name.
    pub scenario: String,
    /// The scenario file, as given.
    pub file: String,
    /// Seeds swept (`A..B`, half-open).
    pub seeds: String,
    /// One section per variant.
    pub variants: Vec<VariantSweep>,
}

/// What one variant's seeds did.
#[derive(Debug, Serialize)]
pub struct VariantSweep {
    /// Results, failure rates, reach conditions and fault points.
    #[serde(flatten)]
    pub summary: Summary,
    /// Every invariant some seed broke, with its first seed and how to reproduce and shrink it.
    pub failures: Vec<Failure>,
    /// Each headline figure's distribution across the seeds that have it.
    pub figures: BTreeMap<String, Distribution>,
    /// Every seed: result, broken invariants, trace hash, headline figures.
    pub per_seed: Vec<SeedRow>,
}

/// An invariant some seeds broke.
#[derive(Debug, Serialize)]
pub struct Failure {
    /// Invariant name.
    pub invariant: String,
    /// Seeds that broke it.
    pub seeds: u64,
    /// Whether the variant's expectation allows it (`any`, or the violation class declared).
    pub expected: bool,
    /// The first seed that broke it against the expectation, or the first that broke it
    /// when the expectation allows it.
    pub first_seed: u64,
    /// Reproduces that seed.
    pub repro: String,
    /// Shrinks that seed to a minimal scenario that still breaks it.
    pub shrink: String,
}

/// A figure across seeds (nearest-rank percentiles).
#[derive(Debug, Serialize, PartialEq)]
pub struct Distribution {
    /// Seeds that have the figure.
    pub seeds: u64,
    /// Smallest.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// Largest.
    pub max: f64,
}

/// One seed of a sweep.
#[derive(Debug, Serialize)]
pub struct SeedRow {
    /// The seed.
    pub seed: u64,
    /// Result class.
    pub result: String,
    /// Invariants it broke.
    pub violations: Vec<String>,
    /// Its trace hash.
    pub trace_hash: String,
    /// Its headline figures.
    pub figures: BTreeMap<String, Value>,
}

fn distribution(mut values: Vec<f64>) -> Distribution {
    values.sort_by(f64::total_cmp);
    let rank = |p: f64| {
        let i = ((p * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1;
        values[i]
    };
    Distribution {
        seeds: values.len() as u64,
        min: values[0],
        p50: rank(0.5),
        p90: rank(0.9),
        max: values[values.len() - 1],
    }
}

/// The shrink command for one failing seed.
pub fn shrink_command(path: &str, seed: u64, variant: Variant, invariant: &str) -> String {
    format!(
        "cargo run -q --bin orrery -- shrink {path} --seed {seed} --variant {} --invariant {invariant}",
        variant.as_str()
    )
}

impl SweepReport {
    /// The report of `runs` (seed and result, per variant, in any order) of the scenario at
    /// `path` over `seeds`.
    pub fn of(
        scenario: &Scenario,
        path: &str,
        seeds: &std::ops::Range<u64>,
        runs: &[(Variant, u64, &JobResult)],
    ) -> SweepReport {
        let mut variants = Vec::new();
        // The variants that ran (a sweep may run one the scenario does not declare).
        let mut ran: Vec<Variant> = runs.iter().map(|(v, _, _)| *v).collect();
        ran.sort();
        ran.dedup();
        for variant in ran {
            let mut mine: Vec<(u64, &JobResult)> = runs
                .iter()
                .filter(|(v, _, _)| *v == variant)
                .map(|(_, seed, r)| (*seed, *r))
                .collect();
            if mine.is_empty() {
                continue;
            }
            mine.sort_by_key(|(seed, _)| *seed);
            let summary = Summary::of(scenario, variant, &mine);
            let mut failures: BTreeMap<String, Failure> = BTreeMap::new();
            let mut values: BTreeMap<String, Vec<f64>> = BTreeMap::new();
            let mut per_seed = Vec::new();
            for (seed, result) in &mine {
                let line = &result.line;
                let violations: Vec<String> = line["violations"]
                    .as_array()
                    .map(|v| {
                        v.iter()
                            .filter_map(|s| s.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                for invariant in &violations {
                    // An invariant broken against the expectation is shown at its first
                    // unexpected seed; an allowed one at its first seed.
                    let first = summary
                        .unexpected
                        .get(invariant)
                        .map_or(*seed, |(_, first)| *first);
                    failures
                        .entry(invariant.clone())
                        .or_insert_with(|| Failure {
                            invariant: invariant.clone(),
                            seeds: 0,
                            expected: !summary.unexpected.contains_key(invariant),
                            first_seed: first,
                            repro: orrery_sim::report::repro(path, first, variant),
                            shrink: shrink_command(path, first, variant, invariant),
                        })
                        .seeds += 1;
                }
                let figures: BTreeMap<String, Value> = line["figures"]
                    .as_object()
                    .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                    .unwrap_or_default();
                for (name, value) in &figures {
                    if let Some(v) = value.as_f64() {
                        values.entry(name.clone()).or_default().push(v);
                    }
                }
                per_seed.push(SeedRow {
                    seed: *seed,
                    result: line["result"].as_str().unwrap_or("?").to_string(),
                    violations,
                    trace_hash: line["trace_hash"].as_str().unwrap_or("?").to_string(),
                    figures,
                });
            }
            variants.push(VariantSweep {
                summary,
                failures: failures.into_values().collect(),
                figures: values
                    .into_iter()
                    .map(|(k, v)| (k, distribution(v)))
                    .collect(),
                per_seed,
            });
        }
        SweepReport {
            scenario: scenario.name.clone(),
            file: path.to_string(),
            seeds: format!("{}..{}", seeds.start, seeds.end),
            variants,
        }
    }

    /// The report as Markdown.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let seeds = self.seeds.clone();
        let _ = writeln!(
            out,
            "# {} — sweep of seeds {seeds}\n\nEvery seed of `{}` in {}, per variant: results, failures grouped by invariant (with the commands that reproduce and shrink the first failing seed), reach conditions, fault points, the headline figures' distribution across seeds, and each seed's result.\n",
            self.scenario,
            self.file,
            self.seeds
        );
        for v in &self.variants {
            out.push_str(&v.summary.markdown());
            if !v.failures.is_empty() {
                let _ = writeln!(
                    out,
                    "| invariant broken | seeds | allowed by the expectation | first seed |\n|---|---|---|---|"
                );
                for f in &v.failures {
                    let _ = writeln!(
                        out,
                        "| `{}` | {} | {} | {} |",
                        f.invariant,
                        f.seeds,
                        if f.expected { "yes" } else { "**no**" },
                        f.first_seed
                    );
                }
                let _ = writeln!(out);
                for f in &v.failures {
                    let _ = writeln!(
                        out,
                        "`{}`, first at seed {}:\n\n```sh\n{}\n{}\n```\n",
                        f.invariant, f.first_seed, f.repro, f.shrink
                    );
                }
            }
            if !v.figures.is_empty() {
                let _ = writeln!(
                    out,
                    "| headline figure | seeds | min | p50 | p90 | max |\n|---|---|---|---|---|---|"
                );
                for (name, label) in headline::FIGURES {
                    if let Some(d) = v.figures.get(name) {
                        let f = |x: f64| headline::format(name, &serde_json::json!(x));
                        let _ = writeln!(
                            out,
                            "| {label} | {} | {} | {} | {} | {} |",
                            d.seeds,
                            f(d.min),
                            f(d.p50),
                            f(d.p90),
                            f(d.max)
                        );
                    }
                }
                let _ = writeln!(out);
            }
            let _ = writeln!(
                out,
                "| seed | result | invariants broken | trace hash |\n|---|---|---|---|"
            );
            for row in &v.per_seed {
                let broken: Vec<String> = row.violations.iter().map(|i| format!("`{i}`")).collect();
                let _ = writeln!(
                    out,
                    "| {} | `{}` | {} | `{}` |",
                    row.seed,
                    row.result,
                    broken.join(", "),
                    row.trace_hash
                );
            }
            let _ = writeln!(out);
        }
        out
    }

    /// Per-seed charts, one per headline figure some seed has: (file name, title, SVG).
    pub fn charts(&self) -> Vec<(String, String, String)> {
        let seeds: Vec<u64> = {
            let mut s: Vec<u64> = self
                .variants
                .iter()
                .flat_map(|v| v.per_seed.iter().map(|r| r.seed))
                .collect();
            s.sort_unstable();
            s.dedup();
            s
        };
        if seeds.is_empty() || seeds.len() > MAX_CHARTED_SEEDS {
            return Vec::new();
        }
        let labels: Vec<String> = seeds.iter().map(u64::to_string).collect();
        let mut charts = Vec::new();
        for (name, label) in headline::FIGURES {
            if !self.variants.iter().any(|v| v.figures.contains_key(name)) {
                continue;
            }
            let bars: Vec<(&str, Vec<usize>)> = self
                .variants
                .iter()
                .map(|v| {
                    let values = seeds
                        .iter()
                        .map(|seed| {
                            v.per_seed
                                .iter()
                                .find(|r| r.seed == *seed)
                                .and_then(|r| r.figures.get(name))
                                .and_then(Value::as_f64)
                                .map_or(0, |x| x.round() as usize)
                        })
                        .collect();
                    (v.summary.variant, values)
                })
                .collect();
            let title = format!("{label} ({name}), per seed");
            let svg = BarChart {
                title: &title,
                histogram: name,
                buckets: labels.iter().map(String::as_str).collect(),
                bars,
                joins: "at seed",
            }
            .render();
            charts.push((format!("{name}.svg"), title, svg));
        }
        charts
    }

    /// Writes `DIR/sweep.json`, `DIR/sweep.md` and the per-seed charts, replacing the charts
    /// an earlier sweep report left there (and no other file).
    pub fn write(&self, dir: &Path) -> Result<(), Fail> {
        let fail = |path: &Path, e: std::io::Error| {
            Fail::usage(format!("{}: cannot write: {e}", path.display()))
        };
        std::fs::create_dir_all(dir).map_err(|e| fail(dir, e))?;
        // Only the charts a sweep report writes, whatever else shares the directory.
        for (name, _) in headline::FIGURES {
            let path = dir.join(format!("{name}.svg"));
            if path.exists() {
                std::fs::remove_file(&path).map_err(|e| fail(&path, e))?;
            }
        }
        let mut md = self.markdown();
        let charts = self.charts();
        if !charts.is_empty() {
            md.push_str("## Headline figures per seed\n\n");
            for (file, title, svg) in &charts {
                let path = dir.join(file);
                std::fs::write(&path, svg).map_err(|e| fail(&path, e))?;
                let _ = writeln!(md, "![{title}]({file})\n");
            }
        }
        let json = serde_json::to_string_pretty(self).expect("sweep reports serialise") + "\n";
        let path = dir.join("sweep.json");
        std::fs::write(&path, json).map_err(|e| fail(&path, e))?;
        let path = dir.join("sweep.md");
        std::fs::write(&path, md).map_err(|e| fail(&path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distributions_use_nearest_rank() {
        let d = distribution((1..=10).map(f64::from).rev().collect());
        assert_eq!(
            d,
            Distribution {
                seeds: 10,
                min: 1.0,
                p50: 5.0,
                p90: 9.0,
                max: 10.0
            }
        );
    }
}
