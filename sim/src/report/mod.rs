//! Reports: the gated JSON and Markdown per scenario and variant, the ungated perf file,
//! and the one-line JSON summary `orrery run` prints.
//!
//! Gated reports contain only what a seed determines (no wall-clock figures, no git
//! commit), so regenerating them on any machine gives byte-identical files.

pub mod headline;
pub mod html;
pub mod markdown;
pub mod page;
pub mod svg;

use std::path::Path;

use serde::Serialize;
use serde_json::json;

use orrery_system::core::json::Pointer as _;
use orrery_system::env::fnv1a_64;

use crate::checkers::Violation;
use crate::harness::metrics::{self, Metrics};
use crate::harness::runner::{AppliedFault, RunOutcome};
use crate::scenario::{Outcome, Scenario, Variant};
use crate::trace::TraceEvent;

/// How many trace events are shown before a violation.
pub const TRACE_TAIL: usize = 20;

/// Identity of what produced a report (deterministic: no commit hash, no host name).
#[derive(Clone, Debug, Serialize)]
pub struct Build {
    /// orrery's version.
    pub orrery_version: &'static str,
    /// FNV-1a 64 of the scenario file's bytes.
    pub scenario_fnv: String,
}

/// One invariant's verdict.
#[derive(Clone, Debug, Serialize)]
pub struct InvariantVerdict {
    /// Invariant name.
    pub name: String,
    /// `held` or `violated`.
    pub verdict: &'static str,
    /// The first violation, with the trace events just before it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub violation: Option<ViolationReport>,
}

/// A violation with its context.
#[derive(Clone, Debug, Serialize)]
pub struct ViolationReport {
    /// The violation.
    #[serde(flatten)]
    pub violation: Violation,
    /// What it is about (an app, a rollout, a workflow, an idempotency key), when its details
    /// name one: then the tail holds only the events that mention it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The last trace events at or before it: those that mention its subject, or, without
    /// one, every event but the harness's periodic samples.
    pub trace_tail: Vec<TraceEvent>,
}

/// The detail fields that name a violation's subject, most specific first.
const SUBJECT_FIELDS: [&str; 5] = ["idempotency_key", "key", "app", "rollout", "workflow"];

/// What a violation is about: the first subject field of its details, or the app of its
/// first example (`platform_converges` and the like list examples).
pub fn subject(violation: &Violation) -> Option<String> {
    let details = &violation.details;
    SUBJECT_FIELDS
        .iter()
        .find_map(|field| details.get(field).and_then(|v| v.as_str()))
        .or_else(|| details.at("/examples/0/app").and_then(|v| v.as_str()))
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// Whether `event` mentions `subject`: one of its string values is the subject, or the name
/// part of a `namespace/name` subject (most events name an object by name).
pub fn mentions(event: &TraceEvent, subject: &str) -> bool {
    let name = subject.rsplit('/').next().unwrap_or(subject);
    if !event.line().contains(name) {
        return false; // cheap test first: most events do not
    }
    fn any_string(value: &serde_json::Value, hit: &dyn Fn(&str) -> bool) -> bool {
        match value {
            serde_json::Value::String(s) => hit(s),
            serde_json::Value::Array(items) => items.iter().any(|v| any_string(v, hit)),
            serde_json::Value::Object(map) => map.values().any(|v| any_string(v, hit)),
            _ => false,
        }
    }
    let value = serde_json::to_value(&event.entry).unwrap_or_default();
    any_string(&value, &|s| s == subject || s == name)
}

/// The harness's periodic samples (stale counts), which say nothing about one violation.
fn is_sample(event: &TraceEvent) -> bool {
    matches!(
        event.harness(),
        Some(
            crate::trace::HarnessEvent::StaleApps { .. }
                | crate::trace::HarnessEvent::StaleRollouts { .. }
                | crate::trace::HarnessEvent::StaleWorkflows { .. }
        )
    )
}

/// The gated report of one run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// What it shows.
    pub description: String,
    /// Variant run.
    pub variant: &'static str,
    /// Seed run.
    pub seed: u64,
    /// What produced it.
    pub build: Build,
    /// Result class.
    pub result: &'static str,
    /// Result the scenario expects for this variant.
    pub expected_result: &'static str,
    /// Whether they agree.
    pub as_expected: bool,
    /// Harness failure, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub harness_error: Option<String>,
    /// The fully resolved scenario.
    pub config: Scenario,
    /// Faults applied, with times.
    pub faults: Vec<AppliedFault>,
    /// Each invariant's verdict.
    pub invariants: Vec<InvariantVerdict>,
    /// Figures.
    pub metrics: Metrics,
    /// The headline figures (see [`headline`]), as the run's final line carries them.
    pub headline: std::collections::BTreeMap<String, serde_json::Value>,
    /// Hash of the full trace.
    pub trace_hash: String,
    /// Number of trace events.
    pub events: usize,
    /// Simulated seconds.
    pub sim_seconds: f64,
    /// Command that reproduces this run.
    pub repro: String,
    /// Exploration: what a swarm seed drew, the reach conditions reached, the fault points
    /// that fired.
    pub exploration: Exploration,
}

/// What a run explored.
#[derive(Clone, Debug, Serialize)]
pub struct Exploration {
    /// For a swarm family: the knobs and fault points this seed drew (its faults are in
    /// `faults`). Absent for a scripted scenario.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drawn: Option<Drawn>,
    /// The reach conditions the scenario declares for this variant, and whether reached.
    pub declared: Vec<(crate::explore::reach::Condition, bool)>,
    /// Every reach condition the run reached.
    pub reached: Vec<crate::explore::reach::Condition>,
    /// How often each fault point fired.
    pub fault_points: std::collections::BTreeMap<orrery_system::env::Point, u64>,
}

/// The values a swarm seed drew.
#[derive(Clone, Debug, Serialize)]
pub struct Drawn {
    /// API server knobs.
    pub apiserver: crate::scenario::knobs::ApiServerKnobs,
    /// Reporter settings.
    pub reporter: crate::scenario::model::Reporter,
    /// Workload rates.
    pub workload: crate::scenario::model::Workload,
    /// Platform knobs.
    pub platform: crate::scenario::model::Platform,
    /// Tunnel timings.
    pub tunnel: crate::scenario::model::Tunnel,
    /// Fault points switched on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buggify: Option<crate::scenario::model::Buggify>,
}

/// Escapes text for SVG and HTML (element text and quoted attributes).
pub fn escape_markup(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// FNV-1a 64 of a scenario file's text, as reports and sweep results files name it.
pub fn scenario_fnv(text: &str) -> String {
    format!("{:016x}", fnv1a_64(text.as_bytes()))
}

/// The expected result of `variant` (a scenario that declares none expects a pass).
pub fn expected(scenario: &Scenario, variant: Variant) -> Outcome {
    scenario
        .expect
        .get(&variant)
        .copied()
        .unwrap_or(Outcome::Pass)
}

/// The command that reproduces a run.
pub fn repro(path: &str, seed: u64, variant: Variant) -> String {
    format!(
        "cargo run -q --bin orrery -- run {path} --seed {seed} --variant {}",
        variant.as_str()
    )
}

/// Builds the gated report of a run.
pub fn build(
    scenario: &Scenario,
    scenario_text: &str,
    path: &str,
    seed: u64,
    variant: Variant,
    outcome: &RunOutcome,
) -> Report {
    let expected = expected(scenario, variant);
    let metrics = metrics::compute(&outcome.trace.events(), &outcome.state);
    let invariants = scenario
        .invariants
        .iter()
        .map(|i| {
            let violation = outcome
                .violations
                .iter()
                .find(|v| v.invariant == i.name)
                .map(|v| {
                    let subject = subject(v);
                    let trace_tail = match &subject {
                        Some(s) => outcome
                            .trace
                            .tail_matching(v.at_ms, TRACE_TAIL, |e| mentions(e, s)),
                        None => outcome
                            .trace
                            .tail_matching(v.at_ms, TRACE_TAIL, |e| !is_sample(e)),
                    };
                    ViolationReport {
                        violation: v.clone(),
                        subject,
                        trace_tail,
                    }
                });
            InvariantVerdict {
                name: i.name.clone(),
                verdict: if violation.is_some() {
                    "violated"
                } else {
                    "held"
                },
                violation,
            }
        })
        .collect();
    Report {
        scenario: scenario.name.clone(),
        description: scenario.description.trim().to_string(),
        variant: variant.as_str(),
        seed,
        build: Build {
            orrery_version: env!("CARGO_PKG_VERSION"),
            scenario_fnv: scenario_fnv(scenario_text),
        },
        result: outcome.result.as_str(),
        expected_result: expected.as_str(),
        as_expected: outcome.result.meets(expected),
        harness_error: outcome.harness_error.clone(),
        config: scenario.clone(),
        faults: outcome.faults.clone(),
        invariants,
        headline: headline::of(&metrics),
        metrics,
        trace_hash: outcome.trace.hash(),
        events: outcome.trace.len(),
        sim_seconds: outcome.sim_seconds,
        repro: repro(path, seed, variant),
        exploration: Exploration {
            drawn: scenario.swarm.is_some().then(|| {
                let c = crate::scenario::draw::concretize(scenario, seed);
                Drawn {
                    apiserver: c.apiserver,
                    reporter: c.reporter,
                    workload: c.workload,
                    platform: c.platform,
                    tunnel: c.tunnel,
                    buggify: c.buggify,
                }
            }),
            declared: scenario
                .reach
                .iter()
                .filter(|r| r.applies_to(variant))
                .map(|r| (r.condition, outcome.reached.contains(&r.condition)))
                .collect(),
            reached: outcome.reached.clone(),
            fault_points: outcome.fault_points.clone(),
        },
    }
}

/// The one-line JSON `orrery run` prints (keys in the documented order), with the run's
/// headline figures.
pub fn summary_line(
    scenario: &Scenario,
    seed: u64,
    variant: Variant,
    outcome: &RunOutcome,
    wall_seconds: f64,
    figures: &std::collections::BTreeMap<String, serde_json::Value>,
) -> String {
    let violations: Vec<&str> = outcome
        .violations
        .iter()
        .map(|v| v.invariant.as_str())
        .collect();
    let value = json!({
        "scenario": scenario.name,
        "variant": variant.as_str(),
        "seed": seed,
        "result": outcome.result.as_str(),
        "expected": outcome.result.meets(expected(scenario, variant)),
        "violations": violations,
        "failure": outcome.failure(),
        "trace_hash": outcome.trace.hash(),
        "sim_seconds": outcome.sim_seconds,
        "wall_seconds": (wall_seconds * 1000.0).round() / 1000.0,
        "events": outcome.trace.len(),
        "reached": outcome.reached,
        "fault_points": outcome.fault_points,
        "figures": figures,
    });
    serde_json::to_string(&value).expect("JSON values serialise")
}

/// Writes `<dir>/<variant>.json` and `.md`.
pub fn write(dir: &Path, report: &Report) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut json = serde_json::to_string_pretty(report).expect("reports serialise");
    json.push('\n');
    std::fs::write(dir.join(format!("{}.json", report.variant)), json)?;
    std::fs::write(
        dir.join(format!("{}.md", report.variant)),
        markdown::render(report),
    )
}
