//! Swarm scenarios: a `swarm:` section from which each seed draws, deterministically, a
//! concrete fault schedule and knob values — so a sweep explores schedules nobody wrote
//! down. Swarm testing in the Groce et al. sense: each seed also switches whole fault kinds
//! off, so rare combinations (only partitions, only knob changes) get runs of their own.
//!
//! [`super::draw::concretize`] turns a swarm scenario and a seed into the plain scenario that seed runs
//! (no `swarm:`, `seeds: [seed]`); the harness runs exactly that, so
//! `orrery run --print-scenario` writes a file that reproduces the run's trace hash.
//!
//! ```yaml
//! swarm:
//!   count: [2, 6]          # faults drawn per seed (inclusive)
//!   window: [10s, 120s]    # when they start
//!   keep: 0.7              # each fault kind stays on for a seed with this probability
//!   faults:                # kinds, each with a weight and how long a fault lasts
//!     - {partition: [[probe, apiserver], [argocd, apiserver]], weight: 2, lasts: [2s, 60s]}
//!     - {crash: [argocd, "role:reporter"], lasts: [1s, 30s]}   # a name, or every host of a role
//!     - {latency: [[probe, apiserver]], max: [20ms, 500ms], lasts: [5s, 60s]}
//!     - {apiserver: {cut_stream_rate: [0.0, 0.05], throttle_rate: [0.0, 0.3]}, lasts: [5s, 40s]}
//!   knobs:                 # drawn once per seed
//!     apiserver: {compaction_window: [5s, 300s], bookmark_interval: [5s, 60s]}
//!   buggify:               # fault points in the system code (orrery buggify-points)
//!     keep: 0.5            # each point is switched on for a seed with this probability
//!     probability: [0.01, 0.1]   # and then fires at each evaluation with a drawn chance
//!     points: [reporter.queue_full, cache.write_dropped]   # optional; default every point
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::duration::Span;
use orrery_system::env::Point;

/// What a seed may draw.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Swarm {
    /// How many faults each seed draws, inclusive range.
    pub count: [u32; 2],
    /// When drawn faults start, from the start of the run (inside the fault phase).
    pub window: [Span; 2],
    /// Probability that a fault kind stays switched on for a seed. Default 0.7; at least
    /// one kind always stays on.
    #[serde(default = "default_keep")]
    pub keep: f64,
    /// The fault kinds to draw from.
    pub faults: Vec<SwarmFault>,
    /// Knob values drawn once per seed.
    #[serde(default, skip_serializing_if = "SwarmKnobs::is_empty")]
    pub knobs: SwarmKnobs,
    /// Fault points in the system code each seed switches on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buggify: Option<SwarmBuggify>,
}

/// Which fault points a seed may switch on, and how often they fire.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwarmBuggify {
    /// Probability that a point is switched on for a seed (at least one always is).
    #[serde(default = "half")]
    pub keep: f64,
    /// Range of the per-evaluation firing probability, drawn once per seed.
    pub probability: [f64; 2],
    /// The points to choose from; default every point.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub points: Vec<Point>,
}

fn half() -> f64 {
    0.5
}

fn default_keep() -> f64 {
    0.7
}

fn one() -> u32 {
    1
}

/// One fault kind: exactly one of `partition`, `crash`, `latency`, `apiserver`, with the
/// targets it may hit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwarmFault {
    /// Relative weight when drawing a kind. Default 1.
    #[serde(default = "one")]
    pub weight: u32,
    /// How long a drawn fault lasts before it is healed (repair, restart, latency and knobs
    /// back).
    pub lasts: [Span; 2],
    /// Cut one of these links.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<Vec<[String; 2]>>,
    /// Crash one of these hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crash: Option<Vec<String>>,
    /// Slow one of these links down, to a bound drawn from `max`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<Vec<[String; 2]>>,
    /// The range of the latency bound (with `latency`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<[Span; 2]>,
    /// Set these API server rate knobs to values drawn from their ranges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apiserver: Option<BTreeMap<String, [f64; 2]>>,
    /// Roll the reporters to a replica count drawn from this range (and back to the
    /// starting count when the fault ends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<[u32; 2]>,
    /// Time between two pod changes of a drawn scale (with `scale`). Default [5s, 15s].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<[Span; 2]>,
    /// Slow the platform's events API down to a latency drawn from this range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<PlatformRanges>,
}

/// Ranges of the platform's knobs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlatformRanges {
    /// Range of the events API latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_latency: Option<[Span; 2]>,
    /// Range of the per-event handler delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler_delay: Option<[Span; 2]>,
}

impl SwarmFault {
    /// The kind's name, or an error when not exactly one kind is given.
    pub fn kind(&self) -> Result<&'static str, String> {
        let kinds: Vec<&'static str> = [
            ("partition", self.partition.is_some()),
            ("crash", self.crash.is_some()),
            ("latency", self.latency.is_some()),
            ("apiserver", self.apiserver.is_some()),
            ("scale", self.scale.is_some()),
            ("platform", self.platform.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect();
        match kinds.as_slice() {
            [one] => Ok(one),
            _ => Err(format!(
                "each swarm fault needs exactly one of partition, crash, latency, apiserver, scale, platform (found {})",
                kinds.len()
            )),
        }
    }
}

/// The API server rate knobs a swarm may draw (probabilities).
pub const RATE_KNOBS: [&str; 2] = ["cut_stream_rate", "throttle_rate"];

/// Knob ranges drawn once per seed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwarmKnobs {
    /// API server knobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apiserver: Option<ApiServerRanges>,
    /// Reporter knobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reporter: Option<ReporterRanges>,
    /// Workload rates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<WorkloadRanges>,
    /// Platform knobs at the start (and for the calm phase).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<PlatformRanges>,
    /// Tunnel traffic and timing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<TunnelRanges>,
    /// The Runner's pipeline and the link in front of its agent API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<RunnerRanges>,
}

/// Ranges of the Runner's knobs (`runner:`), drawn once per seed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunnerRanges {
    /// Range of the pipeline's concurrency limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<[u32; 2]>,
    /// Range of the builds made at once per slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<[u32; 2]>,
    /// Range of each build's one step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<[Span; 2]>,
    /// Range of the percent of agent requests lost before the platform (fault phase).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_requests: Option<[u32; 2]>,
    /// Range of the percent of agent answers lost (fault phase).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_answers: Option<[u32; 2]>,
    /// Range of the log lines each step writes a second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines_per_second: Option<[u32; 2]>,
    /// Range of each pipeline's branch concurrency limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch_concurrency: Option<[u32; 2]>,
    /// Range of the account's concurrency limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_concurrency: Option<[u32; 2]>,
    /// Range of each pipeline's trigger concurrency limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_concurrency: Option<[u32; 2]>,
}

impl SwarmKnobs {
    /// Whether no knob range is given.
    pub fn is_empty(&self) -> bool {
        self == &SwarmKnobs::default()
    }
}

/// Reporter knob ranges.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReporterRanges {
    /// Replicas at the start (at most the reporter hosts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<[u32; 2]>,
    /// Queue capacity per replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_capacity: Option<[u32; 2]>,
    /// hardened: workers per replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<[u32; 2]>,
}

/// Workload rate ranges.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadRanges {
    /// Range of the commit period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_every: Option<[Span; 2]>,
    /// Range of the churn period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub churn_every: Option<[Span; 2]>,
    /// Range of the health flap period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_flap_every: Option<[Span; 2]>,
}

/// Tunnel timing ranges.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TunnelRanges {
    /// Range of the clients' request period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_every: Option<[Span; 2]>,
    /// Range of the runtime's write execution time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execute_delay: Option<[Span; 2]>,
    /// Range of the clients' retry pause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<[Span; 2]>,
}

/// API server knob ranges.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiServerRanges {
    /// Range of the compaction window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction_window: Option<[Span; 2]>,
    /// Range of the bookmark interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bookmark_interval: Option<[Span; 2]>,
}
