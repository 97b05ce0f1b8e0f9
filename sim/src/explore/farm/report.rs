//! The farm report: `reports/farm/README.md`, `farm.json` and a coverage chart, from the
//! database. Generated, never edited; the database itself is not committed, the report is.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::harness::metrics::SeriesKind;
use crate::report::svg::{Line, TimeChart};

use super::db::{Db, Origin, Run};

/// One arm's figures in the farm run reported.
#[derive(Clone, Debug, Serialize)]
pub struct ArmFigures {
    /// The scenario.
    pub scenario: String,
    /// The variant.
    pub variant: String,
    /// The declared verdict.
    pub expect: String,
    /// Seeds of the file run in this farm run (mutants not counted).
    pub seeds: u64,
    /// Seeds in the database for this file's content, every farm run.
    pub seeds_all_runs: u64,
    /// The lowest and highest seed run in this farm run.
    pub seed_range: Option<(u64, u64)>,
    /// Results, by class.
    pub results: BTreeMap<String, u64>,
    /// Runs not as declared.
    pub unexpected: u64,
    /// Runs of mutants of this arm.
    pub mutants: u64,
    /// Coverage features reached by at least one run (every farm run).
    pub features: u64,
    /// Mean CPU seconds per seed.
    pub cpu_per_seed: f64,
}

/// Rare conditions reached per CPU-hour, by where the runs came from.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Mutation {
    /// Uniform seeds: runs, CPU hours, rare-feature hits.
    pub seed_runs: u64,
    /// CPU hours of those.
    pub seed_cpu_hours: f64,
    /// Rare features reached (summed over runs).
    pub seed_rare_hits: u64,
    /// Mutants: runs.
    pub mutant_runs: u64,
    /// Their CPU hours.
    pub mutant_cpu_hours: f64,
    /// Rare features they reached.
    pub mutant_rare_hits: u64,
}

impl Mutation {
    /// Rare hits per CPU-hour: (seeds, mutants).
    pub fn rates(&self) -> (f64, f64) {
        let rate = |hits: u64, hours: f64| {
            if hours > 0.0 {
                hits as f64 / hours
            } else {
                0.0
            }
        };
        (
            rate(self.seed_rare_hits, self.seed_cpu_hours),
            rate(self.mutant_rare_hits, self.mutant_cpu_hours),
        )
    }
}

/// A failure in the report.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    /// The scenario.
    pub scenario: String,
    /// The variant.
    pub variant: String,
    /// The seed.
    pub seed: u64,
    /// `seed` or `mutant k of seed S`.
    pub origin: String,
    /// The result class.
    pub result: String,
    /// The invariant it stands for (none for an unexpected pass).
    pub invariant: Option<String>,
    /// New, known (same scenario, invariant and shape as an earlier one), or not shrunk.
    pub status: String,
    /// The regression scenario written.
    pub regression: Option<String>,
    /// The command that replays it.
    pub replay: String,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct FarmReport {
    /// The farm run reported (its id; shards of one run share it).
    pub run: String,
    /// Its budget, shards and whether a SIGINT stopped it.
    pub budget: String,
    /// Shards merged (`I/N` each), empty when unsharded.
    pub shards: Vec<String>,
    /// Whether any shard was interrupted.
    pub interrupted: bool,
    /// Wall seconds (the longest shard's).
    pub wall_seconds: f64,
    /// Runs (seeds and mutants).
    pub runs: u64,
    /// Of those, seeds of the files.
    pub seed_runs: u64,
    /// CPU seconds of every run.
    pub cpu_seconds: f64,
    /// Runs not as declared.
    pub unexpected: u64,
    /// FNV-1a over every run's (scenario, variant, seed, origin, result, trace hash), sorted:
    /// equal for a sharded run and the unsharded one.
    pub runs_fnv: String,
    /// Per arm.
    pub arms: Vec<ArmFigures>,
    /// Failures found.
    pub failures: Vec<Failure>,
    /// Mutation against uniform seeds.
    pub mutation: Mutation,
    /// The regression scenarios filed (`scenarios/regressions/`): each a failure kept
    /// visible — a known limit until fixed — with what it declares per variant.
    pub known_limits: Vec<(String, String)>,
}

/// The regression scenarios in `dir` and what each declares, e.g.
/// `("scenarios/regressions/swarm-resources-4.yaml", "faithful: safety_violation, hardened: pass")`.
pub fn known_limits(dir: &Path) -> Vec<(String, String)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<std::path::PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .filter_map(|p| {
            let s = crate::scenario::load(&p).ok()?;
            let declared: Vec<String> = s
                .expect
                .iter()
                .map(|(v, e)| format!("{}: {}", v.as_str(), e.as_str()))
                .collect();
            Some((p.display().to_string(), declared.join(", ")))
        })
        .collect()
}

/// The farm run to report: the one whose session record comes last, or `run`.
pub fn build(
    db: &Db,
    run: Option<&str>,
    expects: &BTreeMap<(String, String), String>,
) -> Option<FarmReport> {
    let id = match run {
        Some(id) => id.to_string(),
        None => db.sessions().last()?.session.clone(),
    };
    let sessions: Vec<_> = db.sessions().filter(|s| s.session == id).collect();
    let ends: Vec<_> = sessions.iter().filter(|s| s.phase == "end").collect();
    let runs: Vec<&Run> = db.runs().filter(|r| r.session == id).collect();
    let mut arms: BTreeMap<(String, String), ArmFigures> = BTreeMap::new();
    // Every run of a file's content, for coverage over all farm runs and rarity.
    let mut all: BTreeMap<(String, String), Vec<&Run>> = BTreeMap::new();
    for r in db.runs().filter(|r| r.origin == Origin::Seed) {
        all.entry((r.scenario.clone(), r.variant.clone()))
            .or_default()
            .push(r);
    }
    for r in &runs {
        let key = (r.scenario.clone(), r.variant.clone());
        let arm = arms.entry(key.clone()).or_insert_with(|| ArmFigures {
            scenario: r.scenario.clone(),
            variant: r.variant.clone(),
            expect: expects.get(&key).cloned().unwrap_or_default(),
            seeds: 0,
            seeds_all_runs: 0,
            seed_range: None,
            results: BTreeMap::new(),
            unexpected: 0,
            mutants: 0,
            features: 0,
            cpu_per_seed: 0.0,
        });
        match r.origin {
            Origin::Seed => {
                arm.seeds += 1;
                arm.seed_range = Some(match arm.seed_range {
                    None => (r.seed, r.seed),
                    Some((a, b)) => (a.min(r.seed), b.max(r.seed)),
                });
                arm.cpu_per_seed += r.cpu_seconds;
            }
            Origin::Mutant { .. } => arm.mutants += 1,
        }
        *arm.results.entry(r.result.clone()).or_default() += 1;
        arm.unexpected += u64::from(!r.expected);
    }
    for (key, arm) in arms.iter_mut() {
        if arm.seeds > 0 {
            arm.cpu_per_seed = (arm.cpu_per_seed / arm.seeds as f64 * 1000.0).round() / 1000.0;
        }
        let every = all.get(key).map(Vec::as_slice).unwrap_or_default();
        arm.seeds_all_runs = every.len() as u64;
        arm.features = every
            .iter()
            .flat_map(|r| r.features())
            .collect::<BTreeSet<_>>()
            .len() as u64;
    }
    // Rare features per arm: reached by under 1 % of its seeds (every farm run), once it has
    // 100 of them.
    let mut rare: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for (key, every) in &all {
        if every.len() < 100 {
            continue;
        }
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        for r in every {
            for f in r.features() {
                *counts.entry(f).or_default() += 1;
            }
        }
        rare.insert(
            key.clone(),
            counts
                .into_iter()
                .filter(|(_, n)| (*n as f64) < 0.01 * every.len() as f64)
                .map(|(f, _)| f)
                .collect(),
        );
    }
    let mut mutation = Mutation::default();
    for r in &runs {
        let key = (r.scenario.clone(), r.variant.clone());
        let hits = rare.get(&key).map_or(0, |set| {
            r.features().iter().filter(|f| set.contains(*f)).count() as u64
        });
        match r.origin {
            Origin::Seed => {
                mutation.seed_runs += 1;
                mutation.seed_cpu_hours += r.cpu_seconds / 3600.0;
                mutation.seed_rare_hits += hits;
            }
            Origin::Mutant { .. } => {
                mutation.mutant_runs += 1;
                mutation.mutant_cpu_hours += r.cpu_seconds / 3600.0;
                mutation.mutant_rare_hits += hits;
            }
        }
    }
    let mut failures = Vec::new();
    for r in runs.iter().filter(|r| !r.expected) {
        let shrunk = db.shrunk().find(|s| {
            s.session == id
                && s.scenario_fnv == r.scenario_fnv
                && s.variant == r.variant
                && s.seed == r.seed
                && s.origin == r.origin
        });
        let replay = format!(
            "orrery run {} --seed {} --variant {}",
            r.repro_file(),
            r.seed,
            r.variant
        );
        failures.push(Failure {
            scenario: r.scenario.clone(),
            variant: r.variant.clone(),
            seed: r.seed,
            origin: origin_text(&r.origin),
            result: r.result.clone(),
            invariant: r.failure.clone(),
            status: match shrunk {
                Some(s) if s.known => "known (same shape as an earlier failure)".into(),
                Some(s) if s.regression.is_some() => "new: shrunk".into(),
                Some(s) => format!("not shrunk: {}", s.note),
                None if r.violations.is_empty() => {
                    "not shrunk: an unexpected pass (the declared failure did not happen at this seed)".into()
                }
                None => "not shrunk (the farm stopped first)".into(),
            },
            regression: shrunk.and_then(|s| s.regression.clone()),
            replay: shrunk.map_or(replay, |s| s.replay.clone()),
        });
    }
    let mut lines: Vec<String> = runs
        .iter()
        .map(|r| {
            format!(
                "{} {} {} {} {} {}",
                r.scenario,
                r.variant,
                r.seed,
                origin_text(&r.origin),
                r.result,
                r.trace_hash
            )
        })
        .collect();
    lines.sort();
    Some(FarmReport {
        run: id.clone(),
        budget: sessions
            .first()
            .map(|s| s.budget.clone())
            .unwrap_or_default(),
        shards: {
            let mut shards: Vec<String> = sessions.iter().filter_map(|s| s.shard.clone()).collect();
            shards.sort();
            shards.dedup();
            shards
        },
        interrupted: ends.iter().any(|s| s.interrupted),
        wall_seconds: ends.iter().map(|s| s.wall_seconds).fold(0.0, f64::max),
        runs: runs.len() as u64,
        seed_runs: runs.iter().filter(|r| r.origin == Origin::Seed).count() as u64,
        cpu_seconds: (runs.iter().map(|r| r.cpu_seconds).sum::<f64>() * 10.0).round() / 10.0,
        unexpected: runs.iter().filter(|r| !r.expected).count() as u64,
        runs_fnv: crate::report::scenario_fnv(&lines.join("\n")),
        arms: arms.into_values().collect(),
        failures,
        mutation,
        known_limits: Vec::new(),
    })
}

fn origin_text(origin: &Origin) -> String {
    match origin {
        Origin::Seed => "seed".into(),
        Origin::Mutant {
            parent_seed, child, ..
        } => format!("mutant {child} of seed {parent_seed}"),
    }
}

/// Coverage over this farm run's seeds, per variant: distinct features reached after each
/// run of that variant (every scenario file together).
fn coverage_chart(db: &Db, id: &str) -> String {
    let mut series: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut count: BTreeMap<String, u64> = BTreeMap::new();
    for r in db
        .runs()
        .filter(|r| r.session == id && r.origin == Origin::Seed)
    {
        let set = seen.entry(r.variant.clone()).or_default();
        for f in r.features() {
            set.insert(format!("{}/{f}", r.scenario));
        }
        let n = count.entry(r.variant.clone()).or_default();
        *n += 1;
        series
            .entry(r.variant.clone())
            .or_default()
            .push((*n, set.len() as u64));
    }
    let end = count.values().copied().max().unwrap_or(1);
    let lines: Vec<Line> = series
        .iter()
        .map(|(variant, points)| Line { variant, points })
        .collect();
    TimeChart {
        title: "Coverage: distinct (scenario, reach condition or fault point) reached",
        series: "farm_coverage",
        kind: SeriesKind::Level,
        end_s: end,
        faults: &[],
        lines,
    }
    .render_over("runs", "seeds run in this farm run, per variant")
}

impl FarmReport {
    /// The report as Markdown.
    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(
            md,
            "# Seed farm: the last run\n\nGenerated by `make farm` (`orrery farm`) from its results database; never edit by hand. The database is not committed; this summary is.\n"
        );
        let (seed_rate, mutant_rate) = self.mutation.rates();
        let _ = writeln!(
            md,
            "| figure | value |\n|---|---|\n| farm run | `{}` |\n| budget | {} |\n| shards | {} |\n| interrupted | {} |\n| wall | {:.0} s |\n| runs (seeds + mutants) | {} ({} + {}) |\n| CPU | {:.0} s ({:.1} seeds per CPU-minute) |\n| not as declared | {} |\n| runs fingerprint | `{}` |\n",
            self.run,
            self.budget,
            if self.shards.is_empty() { "none".to_string() } else { self.shards.join(", ") },
            if self.interrupted { "yes (SIGINT): the runs that finished are kept" } else { "no" },
            self.wall_seconds,
            self.runs,
            self.seed_runs,
            self.runs - self.seed_runs,
            self.cpu_seconds,
            if self.cpu_seconds > 0.0 { self.runs as f64 * 60.0 / self.cpu_seconds } else { 0.0 },
            self.unexpected,
            self.runs_fnv,
        );
        let _ = writeln!(md, "![coverage](coverage.svg)\n");
        let _ = writeln!(
            md,
            "## Per scenario and variant\n\nSeeds beyond each file's `seeds:` list. *features*: distinct reach conditions, fault points and fault points' hit-count buckets (AFL's 1, 2, 3, 4-7, 8-15, 16-31, 32-127, 128+ firings) reached by the file's seeds over every farm run in the database.\n\n| scenario | variant | declared | seeds | seed range | all farm runs | results | not as declared | mutants | features | CPU s / seed |\n|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for a in &self.arms {
            let results: Vec<String> = a.results.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let _ = writeln!(
                md,
                "| [{s}](../{s}/README.md) | {} | `{}` | {} | {} | {} | {} | {} | {} | {} | {:.2} |",
                a.variant,
                a.expect,
                a.seeds,
                a.seed_range.map_or("—".to_string(), |(x, y)| format!("{x}–{y}")),
                a.seeds_all_runs,
                results.join(", "),
                if a.unexpected > 0 { format!("**{}**", a.unexpected) } else { "0".into() },
                a.mutants,
                a.features,
                a.cpu_per_seed,
                s = a.scenario,
            );
        }
        let _ = writeln!(md, "\n## Failures\n");
        if self.failures.is_empty() {
            let _ = writeln!(md, "Every run was as its scenario declares.\n");
        } else {
            let _ = writeln!(
                md,
                "| scenario | variant | seed | origin | result | invariant | status | regression | replay |\n|---|---|---|---|---|---|---|---|---|"
            );
            for f in &self.failures {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | `{}` | {} | {} | {} | `{}` |",
                    f.scenario,
                    f.variant,
                    f.seed,
                    f.origin,
                    f.result,
                    f.invariant.as_deref().unwrap_or("—"),
                    f.status,
                    f.regression
                        .as_deref()
                        .map_or("—".to_string(), |p| format!("`{p}`")),
                    f.replay
                );
            }
            md.push('\n');
        }
        let _ = writeln!(
            md,
            "## Coverage-guided mutation\n\nA run that reaches a feature (a reach condition, a fault point, or how often a fault point fired, in AFL's hit-count buckets) rarer than 1 % of its file's seeds (once the file has 100) becomes a parent: its concrete scenario is mutated (a fault step shifted, removed or added, knobs redrawn) and the children run at its seed, in the variants the file declares to pass. Rare features reached per CPU-hour (a run reaching two counts two):\n\n| runs | count | CPU-hours | rare features reached | per CPU-hour |\n|---|---|---|---|---|\n| uniform seeds | {} | {:.3} | {} | {:.1} |\n| mutants | {} | {:.3} | {} | {:.1} |\n",
            self.mutation.seed_runs,
            self.mutation.seed_cpu_hours,
            self.mutation.seed_rare_hits,
            seed_rate,
            self.mutation.mutant_runs,
            self.mutation.mutant_cpu_hours,
            self.mutation.mutant_rare_hits,
            mutant_rate,
        );
        let _ = writeln!(
            md,
            "## Known limits filed\n\nRegression scenarios in `scenarios/regressions/` (shrunk failures, replayed by `make test` at their seeds as they declare): {}.\n",
            self.known_limits.len()
        );
        for (file, declared) in &self.known_limits {
            let _ = writeln!(md, "- `{file}` — {declared}");
        }
        md
    }

    /// Writes `DIR/README.md`, `DIR/farm.json`, `DIR/coverage.svg` and the HTML view.
    pub fn write(&self, db: &Db, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("README.md"), self.markdown())?;
        let json = serde_json::to_string_pretty(self).expect("reports serialise") + "\n";
        std::fs::write(dir.join("farm.json"), json)?;
        std::fs::write(dir.join("coverage.svg"), coverage_chart(db, &self.run))?;
        crate::report::html::write_view(
            &dir.join("README.md"),
            &dir.join("index.html"),
            Some("../index.html"),
        )
        .map_err(|e| std::io::Error::other(e.to_string()))
    }
}
