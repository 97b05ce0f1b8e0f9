//! What a set of seeds of one scenario and variant did: result counts, violations by
//! invariant (every run, and the unexpected ones), reach conditions and fault points by seed
//! count, and the CPU it cost. `orrery sweep` prints it; `orrery reports` writes it for each
//! swarm family as `reports/<family>/seeds.{json,md}`.

use std::collections::BTreeMap;

use serde::Serialize;

use orrery_sim::exit::Exit;
use orrery_sim::explore::reach::Condition;
use orrery_sim::scenario::{Scenario, Variant};
use orrery_system::env::Point;

use crate::jobs::JobResult;

/// The summary of one variant's runs.
#[derive(Debug, Serialize)]
pub struct Summary {
    /// Scenario name.
    pub scenario: String,
    /// Variant.
    pub variant: &'static str,
    /// The expectation.
    pub expected: &'static str,
    /// Runs summarised.
    pub runs: u64,
    /// Runs per result class.
    pub results: BTreeMap<String, u64>,
    /// Runs that broke each invariant (expected or not): the failure rate by invariant.
    pub violations: BTreeMap<String, u64>,
    /// Unexpected runs that broke each invariant, with the first such seed.
    pub unexpected: BTreeMap<String, (u64, u64)>,
    /// The first unexpected run: seed and result.
    pub first_unexpected: Option<(u64, String)>,
    /// Declared reach conditions for this variant: seeds that reached each.
    pub declared: Vec<(Condition, u64)>,
    /// Other conditions reached: seeds that reached each.
    pub other_reached: BTreeMap<String, u64>,
    /// Fault points the scenario can switch on: seeds in which each fired.
    pub fault_points: Vec<(Point, u64)>,
    /// Sum of the runs' times (each run is one single-threaded process, so this is CPU). Not
    /// in the gated JSON: it moves with the machine.
    #[serde(skip)]
    pub cpu_seconds: f64,
    /// The worst exit class among unexpected runs (6 when a declared condition was never
    /// reached).
    #[serde(skip)]
    pub worst: Exit,
}

fn names(value: &serde_json::Value) -> Vec<String> {
    match value {
        serde_json::Value::Array(items) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        serde_json::Value::Object(map) => map.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// The fault points `scenario` can switch on: its own, or those its swarm draws from.
fn switchable(scenario: &Scenario) -> Vec<Point> {
    let mut points: Vec<Point> = Vec::new();
    if let Some(buggify) = &scenario.buggify {
        points.extend(&buggify.points);
    }
    if let Some(draw) = scenario.swarm.as_ref().and_then(|s| s.buggify.as_ref()) {
        if draw.points.is_empty() {
            points.extend(Point::ALL);
        } else {
            points.extend(&draw.points);
        }
    }
    points.sort();
    points.dedup();
    points
}

impl Summary {
    /// Summarises `runs` (seed, result) of `scenario` for `variant`.
    pub fn of(scenario: &Scenario, variant: Variant, runs: &[(u64, &JobResult)]) -> Summary {
        let expected = orrery_sim::report::expected(scenario, variant);
        let mut summary = Summary {
            scenario: scenario.name.clone(),
            variant: variant.as_str(),
            expected: expected.as_str(),
            runs: runs.len() as u64,
            results: BTreeMap::new(),
            violations: BTreeMap::new(),
            unexpected: BTreeMap::new(),
            first_unexpected: None,
            declared: Vec::new(),
            other_reached: BTreeMap::new(),
            fault_points: Vec::new(),
            cpu_seconds: 0.0,
            worst: Exit::Expected,
        };
        let mut reached: BTreeMap<String, u64> = BTreeMap::new();
        let mut fired: BTreeMap<String, u64> = BTreeMap::new();
        for (seed, result) in runs {
            let line = &result.line;
            let outcome = line["result"].as_str().unwrap_or("?").to_string();
            *summary.results.entry(outcome.clone()).or_default() += 1;
            summary.cpu_seconds += line["wall_seconds"].as_f64().unwrap_or(0.0);
            let broken = names(&line["violations"]);
            for invariant in &broken {
                *summary.violations.entry(invariant.clone()).or_default() += 1;
            }
            if result.exit != Exit::Expected {
                summary.worst = summary.worst.max(result.exit);
                summary.first_unexpected.get_or_insert((*seed, outcome));
                for invariant in broken {
                    summary.unexpected.entry(invariant).or_insert((0, *seed)).0 += 1;
                }
            }
            for name in names(&line["reached"]) {
                *reached.entry(name).or_default() += 1;
            }
            for name in names(&line["fault_points"]) {
                *fired.entry(name).or_default() += 1;
            }
        }
        summary.declared = scenario
            .reach
            .iter()
            .filter(|r| r.applies_to(variant))
            .map(|r| (r.condition, reached.remove(r.condition.name()).unwrap_or(0)))
            .collect();
        summary.other_reached = reached;
        summary.fault_points = switchable(scenario)
            .into_iter()
            .map(|p| (p, fired.get(p.name()).copied().unwrap_or(0)))
            .collect();
        if summary.declared.iter().any(|(_, n)| *n == 0) {
            summary.worst = summary.worst.max(Exit::Unreached);
        }
        summary
    }

    /// Seeds per CPU-minute.
    pub fn seeds_per_cpu_minute(&self) -> f64 {
        if self.cpu_seconds > 0.0 {
            60.0 * self.runs as f64 / self.cpu_seconds
        } else {
            0.0
        }
    }

    /// The text `orrery sweep` prints after the runs' lines.
    pub fn text(&self, repro: impl Fn(u64) -> String) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let total = self.runs;
        let _ = writeln!(
            out,
            "{} / {}: expected {} — results {:?}",
            self.scenario, self.variant, self.expected, self.results
        );
        if !self.violations.is_empty() {
            let rates: Vec<String> = self
                .violations
                .iter()
                .map(|(name, n)| format!("{name} {n}/{total}"))
                .collect();
            let _ = writeln!(
                out,
                "  violations by invariant (every run): {}",
                rates.join(", ")
            );
        }
        for (invariant, (count, seed)) in &self.unexpected {
            let _ = writeln!(
                out,
                "  unexpected violations of {invariant}: {count} seeds (first: seed {seed})"
            );
        }
        if let Some((seed, outcome)) = &self.first_unexpected {
            let _ = writeln!(
                out,
                "  first unexpected: seed {seed} ({outcome}); reproduce with:\n    {}",
                repro(*seed)
            );
        }
        if !self.declared.is_empty() {
            let _ = writeln!(
                out,
                "  reach conditions declared (seeds that reached each):"
            );
            for (condition, n) in &self.declared {
                let flag = if *n == 0 { "   NEVER REACHED" } else { "" };
                let _ = writeln!(out, "    {:<32} {n}/{total}{flag}", condition.name());
            }
        }
        if !self.other_reached.is_empty() {
            let _ = writeln!(out, "  other conditions reached:");
            for (name, n) in &self.other_reached {
                let _ = writeln!(out, "    {name:<32} {n}/{total}");
            }
        }
        if !self.fault_points.is_empty() {
            let _ = writeln!(out, "  fault points (seeds in which each fired):");
            for (point, n) in &self.fault_points {
                let _ = writeln!(out, "    {:<36} {n}/{total}", point.name());
            }
        }
        let _ = write!(
            out,
            "  cost: {total} runs, {:.1} CPU-s, {:.2} CPU-s per seed, {:.1} seeds per CPU-minute",
            self.cpu_seconds,
            self.cpu_seconds / total.max(1) as f64,
            self.seeds_per_cpu_minute()
        );
        out
    }

    /// The Markdown `orrery reports` writes for a swarm family (no timings: reports are
    /// gated and must not move with the machine).
    pub fn markdown(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let total = self.runs;
        let _ = writeln!(out, "## {} (expected `{}`)\n", self.variant, self.expected);
        let results: Vec<String> = self
            .results
            .iter()
            .map(|(r, n)| format!("`{r}` {n}/{total}"))
            .collect();
        let _ = writeln!(out, "Results: {}.\n", results.join(", "));
        if !self.violations.is_empty() {
            let _ = writeln!(
                out,
                "| invariant | seeds that broke it | rate |\n|---|---|---|"
            );
            for (name, n) in &self.violations {
                let _ = writeln!(
                    out,
                    "| `{name}` | {n}/{total} | {:.0} % |",
                    100.0 * *n as f64 / total.max(1) as f64
                );
            }
            let _ = writeln!(out);
        }
        if !self.declared.is_empty() || !self.other_reached.is_empty() {
            let _ = writeln!(
                out,
                "| reach condition | declared | seeds that reached it |\n|---|---|---|"
            );
            for (condition, n) in &self.declared {
                let _ = writeln!(out, "| `{condition}` | yes | {n}/{total} |");
            }
            for (name, n) in &self.other_reached {
                let _ = writeln!(out, "| `{name}` | | {n}/{total} |");
            }
            let _ = writeln!(out);
        }
        if !self.fault_points.is_empty() {
            let _ = writeln!(out, "| fault point | seeds in which it fired |\n|---|---|");
            for (point, n) in &self.fault_points {
                let _ = writeln!(out, "| `{point}` | {n}/{total} |");
            }
            let _ = writeln!(out);
        }
        out
    }
}
