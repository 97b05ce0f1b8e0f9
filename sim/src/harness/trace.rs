//! The run's trace: every observation in the order it happened, with simulated time and
//! host. Its hash is the determinism check: same seed → byte-identical trace → same hash.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use orrery_system::env::{fnv1a_64, Observation};
use serde::Serialize;

/// One recorded observation.
#[derive(Clone, Debug, Serialize)]
pub struct TraceEvent {
    /// Simulated milliseconds since the start.
    pub at_ms: u64,
    /// Host that observed it.
    pub host: String,
    /// What was observed.
    #[serde(flatten)]
    pub observation: Observation,
}

impl TraceEvent {
    /// The canonical one-line rendering the hash is computed over.
    pub fn line(&self) -> String {
        serde_json::to_string(self).expect("trace events serialise")
    }
}

#[derive(Debug, Default)]
struct Inner {
    events: Vec<TraceEvent>,
    hash: u64,
}

/// A shared, append-only trace (cheap to clone).
#[derive(Clone, Debug, Default)]
pub struct Trace(Arc<Mutex<Inner>>);

impl Trace {
    /// Appends an observation and folds it into the running hash.
    pub fn record(&self, at: Duration, host: &str, observation: Observation) {
        let event = TraceEvent {
            at_ms: at.as_millis() as u64,
            host: host.to_string(),
            observation,
        };
        let mut inner = self.0.lock().expect("trace lock poisoned");
        let line_hash = fnv1a_64(event.line().as_bytes());
        inner.hash = fnv1a_64(&[inner.hash.to_le_bytes(), line_hash.to_le_bytes()].concat());
        inner.events.push(event);
    }

    /// Hex hash of every event so far, in order.
    pub fn hash(&self) -> String {
        format!("{:016x}", self.0.lock().expect("trace lock poisoned").hash)
    }

    /// Number of events recorded.
    pub fn len(&self) -> usize {
        self.0.lock().expect("trace lock poisoned").events.len()
    }

    /// True before anything was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of all events (for checkers and reports).
    pub fn events(&self) -> Vec<TraceEvent> {
        self.0.lock().expect("trace lock poisoned").events.clone()
    }

    /// The last `n` events at or before `at_ms` (the context shown with a violation).
    pub fn tail_before(&self, at_ms: u64, n: usize) -> Vec<TraceEvent> {
        let inner = self.0.lock().expect("trace lock poisoned");
        let end = inner.events.partition_point(|e| e.at_ms <= at_ms);
        inner.events[end.saturating_sub(n)..end].to_vec()
    }
}
