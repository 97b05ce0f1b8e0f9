//! The run's trace: every observation in the order it happened, with simulated time and
//! host. Its hash is the determinism check: same seed → byte-identical trace → same hash.
//!
//! Each event is one JSON line, `{"at_ms", "host", "kind", "detail"}` (trace format
//! [`TRACE_FORMAT`], announced by the first line, `run.start`). Components' observations are
//! typed in `orrery_system::observe`; what the harness itself does is a [`HarnessEvent`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use orrery_system::core::Variant;
use orrery_system::env::fnv1a_64;
use orrery_system::observe::{
    Observation, PlatformEvent, ReporterEvent, ResourceReporterEvent, TunnelEvent, WorldEvent,
};
use serde::Serialize;

use crate::faults::Fault;

/// The trace's format version: 2 since observations are typed (1 had free-form details
/// and HTTP status 0/1 for a hung/unreachable request).
pub const TRACE_FORMAT: u32 = 2;

/// Why the harness stopped or started a host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostChange {
    /// A `crash` fault.
    Crash,
    /// A `restart` fault.
    Restart,
    /// The calm phase restarts every crashed host.
    Calm,
    /// A scale-down stopped a reporter pod.
    ScaleDown,
    /// A scale-up started a reporter pod.
    ScaleUp,
    /// A rolling update restarted a reporter pod.
    RollingRestart,
    /// A reporter host beyond the initial replica count waits for a scale-up.
    NotYetScaled,
}

/// What the harness does to the world, and its own samples.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", content = "detail")]
pub enum HarnessEvent {
    /// The run begins.
    #[serde(rename = "run.start")]
    RunStart {
        /// Scenario name.
        scenario: String,
        /// Seed.
        seed: u64,
        /// Variant.
        variant: Variant,
        /// [`TRACE_FORMAT`].
        trace_format: u32,
    },
    /// A host was stopped.
    #[serde(rename = "host.stop")]
    HostStop {
        /// Host name.
        host: String,
        /// Why.
        why: HostChange,
    },
    /// A host was started again.
    #[serde(rename = "host.start")]
    HostStart {
        /// Host name.
        host: String,
        /// Why.
        why: HostChange,
    },
    /// A scheduled fault was applied.
    #[serde(rename = "fault")]
    Fault(Fault),
    /// The calm phase began: links repaired, these crashed hosts restarted, knobs reset,
    /// the workload stopped.
    #[serde(rename = "calm.start")]
    CalmStart {
        /// Hosts restarted.
        restarted: Vec<String>,
    },
    /// How many apps the platform showed differently from the API server (sampled).
    #[serde(rename = "harness.stale_apps")]
    StaleApps {
        /// Applications in the API server.
        apps: u64,
        /// Of which the platform shows a different state.
        stale: u64,
    },
    /// How many Rollouts the platform showed differently from the API server (sampled
    /// when a resource reporter runs).
    #[serde(rename = "harness.stale_rollouts")]
    StaleRollouts {
        /// Rollouts in the API server.
        rollouts: u64,
        /// Of which the platform shows a different phase, step or ReplicaSet weights.
        stale: u64,
    },
    /// How many Workflows the platform showed in another phase than the API server's
    /// (sampled when a resource reporter runs).
    #[serde(rename = "harness.stale_workflows")]
    StaleWorkflows {
        /// Workflows in the API server.
        workflows: u64,
        /// Of which the platform shows another phase (or none).
        stale: u64,
    },
    /// Test hook of `orrery run` (never in a normal run): makes two processes' traces differ.
    #[serde(rename = "test.nondeterminism")]
    TestNondeterminism {
        /// The process id.
        pid: u32,
    },
}

/// One trace entry's content: a component's observation or the harness's own event.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Entry {
    /// Seen or done by a component (through its environment).
    Observed(Observation),
    /// Done by the harness.
    Harness(HarnessEvent),
}

/// One recorded event.
#[derive(Clone, Debug, Serialize)]
pub struct TraceEvent {
    /// Simulated milliseconds since the start.
    pub at_ms: u64,
    /// Host that observed it (`harness` for the harness's own events).
    pub host: String,
    /// What happened.
    #[serde(flatten)]
    pub entry: Entry,
}

impl TraceEvent {
    /// A component's observation at `at_ms` on `host` (hand-written traces in tests).
    pub fn observed(at_ms: u64, host: &str, observation: impl Into<Observation>) -> TraceEvent {
        TraceEvent {
            at_ms,
            host: host.into(),
            entry: Entry::Observed(observation.into()),
        }
    }

    /// One of the harness's own events at `at_ms`.
    pub fn of_harness(at_ms: u64, event: HarnessEvent) -> TraceEvent {
        TraceEvent {
            at_ms,
            host: "harness".into(),
            entry: Entry::Harness(event),
        }
    }

    /// The canonical one-line rendering the hash is computed over.
    pub fn line(&self) -> String {
        serde_json::to_string(self).expect("trace events serialise")
    }

    /// The kind name (`tunnel.client_up`, `fault`, …).
    pub fn kind(&self) -> &'static str {
        match &self.entry {
            Entry::Observed(o) => o.kind(),
            Entry::Harness(h) => h.kind(),
        }
    }

    /// The simulated world's event, if this is one.
    pub fn world(&self) -> Option<&WorldEvent> {
        match &self.entry {
            Entry::Observed(Observation::World(e)) => Some(e),
            _ => None,
        }
    }

    /// The tunnel's event, if this is one.
    pub fn tunnel(&self) -> Option<&TunnelEvent> {
        match &self.entry {
            Entry::Observed(Observation::Tunnel(e)) => Some(e),
            _ => None,
        }
    }

    /// The reporter's event, if this is one.
    pub fn reporter(&self) -> Option<&ReporterEvent> {
        match &self.entry {
            Entry::Observed(Observation::Reporter(e)) => Some(e),
            _ => None,
        }
    }

    /// The platform's event, if this is one.
    pub fn platform(&self) -> Option<&PlatformEvent> {
        match &self.entry {
            Entry::Observed(Observation::Platform(e)) => Some(e),
            _ => None,
        }
    }

    /// The ACR controller's event, if this is one.
    pub fn acr(&self) -> Option<&orrery_system::observe::AcrEvent> {
        match &self.entry {
            Entry::Observed(Observation::Acr(e)) => Some(e),
            _ => None,
        }
    }

    /// The promotion orchestrator's event, if this is one.
    pub fn promotion(&self) -> Option<&orrery_system::observe::PromotionEvent> {
        match &self.entry {
            Entry::Observed(Observation::Promotion(e)) => Some(e),
            _ => None,
        }
    }

    /// The GitOps operator's event, if this is one.
    pub fn operator(&self) -> Option<&orrery_system::observe::OperatorEvent> {
        match &self.entry {
            Entry::Observed(Observation::Operator(e)) => Some(e),
            _ => None,
        }
    }

    /// The Codefresh Runner's event (platform side, agent, engine stand-in), if this is one.
    pub fn runner(&self) -> Option<&orrery_system::observe::RunnerEvent> {
        match &self.entry {
            Entry::Observed(Observation::Runner(e)) => Some(e),
            _ => None,
        }
    }

    /// The source server's event, if this is one.
    pub fn sources(&self) -> Option<&orrery_system::observe::SourcesEvent> {
        match &self.entry {
            Entry::Observed(Observation::Sources(e)) => Some(e),
            _ => None,
        }
    }

    /// The resource reporter's event, if this is one.
    pub fn resources(&self) -> Option<&ResourceReporterEvent> {
        match &self.entry {
            Entry::Observed(Observation::Resources(e)) => Some(e),
            _ => None,
        }
    }

    /// The harness's event, if this is one.
    pub fn harness(&self) -> Option<&HarnessEvent> {
        match &self.entry {
            Entry::Harness(e) => Some(e),
            _ => None,
        }
    }
}

impl HarnessEvent {
    /// The kind name.
    pub fn kind(&self) -> &'static str {
        match self {
            HarnessEvent::RunStart { .. } => "run.start",
            HarnessEvent::HostStop { .. } => "host.stop",
            HarnessEvent::HostStart { .. } => "host.start",
            HarnessEvent::Fault(_) => "fault",
            HarnessEvent::CalmStart { .. } => "calm.start",
            HarnessEvent::StaleApps { .. } => "harness.stale_apps",
            HarnessEvent::StaleRollouts { .. } => "harness.stale_rollouts",
            HarnessEvent::StaleWorkflows { .. } => "harness.stale_workflows",
            HarnessEvent::TestNondeterminism { .. } => "test.nondeterminism",
        }
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
    /// Appends a component's observation and folds it into the running hash.
    pub fn record(&self, at: Duration, host: &str, observation: Observation) {
        self.push(at, host, Entry::Observed(observation));
    }

    /// Appends one of the harness's own events.
    pub fn record_harness(&self, at: Duration, event: HarnessEvent) {
        self.push(at, "harness", Entry::Harness(event));
    }

    fn push(&self, at: Duration, host: &str, entry: Entry) {
        let event = TraceEvent {
            at_ms: at.as_millis() as u64,
            host: host.to_string(),
            entry,
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

    /// The last `n` events at or before `at_ms` that `keep` accepts, oldest first (the context
    /// of a violation, narrowed to what it is about).
    pub fn tail_matching(
        &self,
        at_ms: u64,
        n: usize,
        keep: impl Fn(&TraceEvent) -> bool,
    ) -> Vec<TraceEvent> {
        let inner = self.0.lock().expect("trace lock poisoned");
        let end = inner.events.partition_point(|e| e.at_ms <= at_ms);
        let mut tail: Vec<TraceEvent> = inner.events[..end]
            .iter()
            .rev()
            .filter(|e| keep(e))
            .take(n)
            .cloned()
            .collect();
        tail.reverse();
        tail
    }
}
