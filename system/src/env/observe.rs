//! Typed observations: what components report to checkers and to the trace.

use serde::Serialize;

/// One thing a component saw or did, in a form checkers can read without touching internals.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Observation {
    /// What happened, e.g. `probe.view` or `apiserver.watch_expired`.
    pub kind: String,
    /// Details; keys are emitted in insertion order so traces are stable.
    pub detail: serde_json::Value,
}

impl Observation {
    /// Builds an observation of `kind` with JSON details.
    pub fn new(kind: impl Into<String>, detail: serde_json::Value) -> Self {
        Observation {
            kind: kind.into(),
            detail,
        }
    }
}
