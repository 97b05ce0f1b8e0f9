//! Checkers: invariants evaluated from the trace (what components observed) and, at the
//! end of the calm phase, from the world's final state. They never read component internals.
//!
//! | invariant | class | holds when |
//! |---|---|---|
//! | `probe_matches_apiserver` | liveness | at the end of the calm phase the probe's reflector view (name → RV of every Application) equals the API server's |
//! | `probe_rv_monotonic` | safety | the probe never sees an object's resourceVersion go backwards |

mod convergence;
mod monotonic;

use serde::Serialize;
use serde_json::Value;

use crate::harness::trace::TraceEvent;
use crate::scenario::model::Invariant;

/// Whether breaking an invariant is a safety or a liveness failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Must never happen.
    Safety,
    /// Must eventually happen (by the end of the calm phase).
    Liveness,
}

/// A broken invariant, with where and when it was first seen.
#[derive(Clone, Debug, Serialize)]
pub struct Violation {
    /// Invariant name.
    pub invariant: String,
    /// Safety or liveness.
    pub class: Class,
    /// Simulated milliseconds of the first sighting.
    pub at_ms: u64,
    /// Host it concerns.
    pub host: String,
    /// What exactly was wrong.
    pub details: Value,
}

/// The world's final state, for end-of-run checks.
#[derive(Clone, Debug, Default)]
pub struct FinalState {
    /// (name, resourceVersion) of every Application in the API server, sorted.
    pub applications: Vec<(String, String)>,
    /// Simulated milliseconds at the end of the run.
    pub end_ms: u64,
}

/// One invariant's checker.
pub trait Checker {
    /// Invariant name as written in scenarios.
    fn name(&self) -> &'static str;
    /// Feeds one trace event; returns a violation the first time one is seen.
    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation>;
    /// Checks the end state; returns a violation if the invariant does not hold.
    fn at_end(&mut self, state: &FinalState) -> Option<Violation>;
}

/// Known invariant names.
pub const KNOWN: [&str; 2] = ["probe_matches_apiserver", "probe_rv_monotonic"];

/// Builds the checker an invariant names.
pub fn build(invariant: &Invariant) -> Result<Box<dyn Checker>, String> {
    validate(invariant)?;
    Ok(match invariant.name.as_str() {
        "probe_matches_apiserver" => Box::new(convergence::ProbeMatches::default()),
        "probe_rv_monotonic" => Box::new(monotonic::RvMonotonic::default()),
        other => unreachable!("validate accepted unknown invariant {other}"),
    })
}

/// Checks an invariant's name and parameters.
pub fn validate(invariant: &Invariant) -> Result<(), String> {
    if !KNOWN.contains(&invariant.name.as_str()) {
        return Err(format!("unknown invariant {:?}; known invariants are {KNOWN:?}", invariant.name));
    }
    if let Some(param) = invariant.params.keys().next() {
        return Err(format!("invariant {:?} takes no parameter {param:?}", invariant.name));
    }
    Ok(())
}

/// Runs every checker over the trace, then over the final state; violations in time order.
pub fn check(checkers: &mut [Box<dyn Checker>], events: &[TraceEvent], state: &FinalState) -> Vec<Violation> {
    let mut violations = Vec::new();
    let mut seen: Vec<bool> = vec![false; checkers.len()];
    for event in events {
        for (i, checker) in checkers.iter_mut().enumerate() {
            if seen[i] {
                continue;
            }
            if let Some(v) = checker.on_event(event) {
                seen[i] = true;
                violations.push(v);
            }
        }
    }
    for (i, checker) in checkers.iter_mut().enumerate() {
        if !seen[i] {
            violations.extend(checker.at_end(state));
        }
    }
    violations.sort_by_key(|v| v.at_ms);
    violations
}
