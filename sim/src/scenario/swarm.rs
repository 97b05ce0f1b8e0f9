//! Swarm scenarios: a `swarm:` section from which each seed draws, deterministically, a
//! concrete fault schedule and knob values — so a sweep explores schedules nobody wrote
//! down. Swarm testing in the Groce et al. sense: each seed also switches whole fault kinds
//! off, so rare combinations (only partitions, only knob changes) get runs of their own.
//!
//! [`concretize`] turns a swarm scenario and a seed into the plain scenario that seed runs
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
//!     - {crash: [argocd], lasts: [1s, 30s]}
//!     - {latency: [[probe, apiserver]], max: [20ms, 500ms], lasts: [5s, 60s]}
//!     - {apiserver: {cut_stream_rate: [0.0, 0.05], throttle_rate: [0.0, 0.3]}, lasts: [5s, 40s]}
//!   knobs:                 # drawn once per seed
//!     apiserver: {compaction_window: [5s, 300s], bookmark_interval: [5s, 60s]}
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use orrery_system::env::Rng;
use serde::{Deserialize, Serialize};

use super::duration::Span;
use super::knobs::ApiServerPatch;
use super::model::{FaultStep, LatencyChange, Scenario};

/// The latency bound a latency fault returns a link to (the harness's default link bound).
pub const DEFAULT_LINK_LATENCY: Duration = Duration::from_millis(5);

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
}

impl SwarmFault {
    /// The kind's name, or an error when not exactly one kind is given.
    pub fn kind(&self) -> Result<&'static str, String> {
        let kinds: Vec<&'static str> = [
            ("partition", self.partition.is_some()),
            ("crash", self.crash.is_some()),
            ("latency", self.latency.is_some()),
            ("apiserver", self.apiserver.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect();
        match kinds.as_slice() {
            [one] => Ok(one),
            _ => Err(format!(
                "each swarm fault needs exactly one of partition, crash, latency, apiserver (found {})",
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
}

impl SwarmKnobs {
    fn is_empty(&self) -> bool {
        self.apiserver.is_none()
    }
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

fn between(rng: &mut Rng, [low, high]: [Span; 2]) -> Duration {
    let (low, high) = (low.0.as_millis() as u64, high.0.as_millis() as u64);
    Duration::from_millis(low + rng.below(high.saturating_sub(low) + 1))
}

fn between_f64(rng: &mut Rng, [low, high]: [f64; 2]) -> f64 {
    // Rounded to 1e-4 so the concrete scenario file says exactly what ran.
    let unit = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    ((low + (high - low) * unit) * 1e4).round() / 1e4
}

fn pick<'a, T>(rng: &mut Rng, items: &'a [T]) -> &'a T {
    &items[rng.below(items.len() as u64) as usize]
}

/// The plain scenario `seed` runs: scripted faults plus the drawn ones, drawn knob values,
/// no `swarm:`, `seeds: [seed]`. A scenario without `swarm:` comes back unchanged.
pub fn concretize(scenario: &Scenario, seed: u64) -> Scenario {
    let Some(swarm) = &scenario.swarm else {
        return scenario.clone();
    };
    let mut rng = Rng::derive(seed, "swarm");
    let mut concrete = scenario.clone();
    concrete.swarm = None;
    concrete.seeds = vec![seed];
    if let Some(ranges) = &swarm.knobs.apiserver {
        if let Some(range) = ranges.compaction_window {
            concrete.apiserver.compaction_window = between(&mut rng, range);
        }
        if let Some(range) = ranges.bookmark_interval {
            concrete.apiserver.bookmark_interval = between(&mut rng, range);
        }
    }
    // Swarm testing: switch some kinds off for this seed (never all of them).
    let mut kept: Vec<&SwarmFault> = swarm
        .faults
        .iter()
        .filter(|_| rng.chance(swarm.keep))
        .collect();
    if kept.is_empty() && !swarm.faults.is_empty() {
        kept.push(pick(&mut rng, &swarm.faults));
    }
    let total_weight: u64 = kept.iter().map(|f| u64::from(f.weight.max(1))).sum();
    let [low, high] = swarm.count;
    let count = low + rng.below(u64::from(high.saturating_sub(low)) + 1) as u32;
    // Each target (link, host, the API server's knobs) holds one fault at a time.
    let mut busy: BTreeMap<String, Vec<(Duration, Duration)>> = BTreeMap::new();
    let mut drawn: Vec<FaultStep> = Vec::new();
    for _ in 0..count {
        if total_weight == 0 {
            break;
        }
        let mut ticket = rng.below(total_weight);
        let kind = kept
            .iter()
            .find(|f| {
                let weight = u64::from(f.weight.max(1));
                if ticket < weight {
                    true
                } else {
                    ticket -= weight;
                    false
                }
            })
            .expect("a ticket below the total weight picks a kind");
        let start = between(&mut rng, swarm.window);
        let end = (start + between(&mut rng, kind.lasts)).min(scenario.duration);
        let (target, steps) = steps(&mut rng, kind, scenario, start, end);
        let windows = busy.entry(target).or_default();
        if windows.iter().any(|(s, e)| start <= *e && *s <= end) {
            continue; // overlaps a fault already drawn on this target: skip it
        }
        windows.push((start, end));
        drawn.extend(steps);
    }
    drawn.sort_by_key(|s| s.at);
    concrete.faults.extend(drawn);
    concrete
}

fn step(at: Duration) -> FaultStep {
    FaultStep {
        at,
        partition: None,
        repair: None,
        crash: None,
        restart: None,
        latency: None,
        apiserver: None,
        scale: None,
        platform: None,
    }
}

/// The fault and its healing, and the target they occupy.
fn steps(
    rng: &mut Rng,
    kind: &SwarmFault,
    scenario: &Scenario,
    start: Duration,
    end: Duration,
) -> (String, Vec<FaultStep>) {
    let (mut on, mut off) = (step(start), step(end));
    let target = if let Some(links) = &kind.partition {
        let link = pick(rng, links).clone();
        on.partition = Some(link.clone());
        off.repair = Some(link.clone());
        format!("link {} {}", link[0], link[1])
    } else if let Some(hosts) = &kind.crash {
        let host = pick(rng, hosts).clone();
        on.crash = Some(host.clone());
        off.restart = Some(host.clone());
        format!("host {host}")
    } else if let Some(links) = &kind.latency {
        let link = pick(rng, links).clone();
        let max = kind
            .max
            .map_or(DEFAULT_LINK_LATENCY, |range| between(rng, range));
        on.latency = Some(LatencyChange {
            between: link.clone(),
            max,
        });
        off.latency = Some(LatencyChange {
            between: link.clone(),
            max: DEFAULT_LINK_LATENCY,
        });
        format!("link {} {}", link[0], link[1])
    } else {
        let mut set = ApiServerPatch::default();
        let mut back = ApiServerPatch::default();
        for (knob, range) in kind.apiserver.iter().flatten() {
            let value = between_f64(rng, *range);
            match knob.as_str() {
                "cut_stream_rate" => {
                    set.cut_stream_rate = Some(value);
                    back.cut_stream_rate = Some(scenario.apiserver.cut_stream_rate);
                }
                "throttle_rate" => {
                    set.throttle_rate = Some(value);
                    back.throttle_rate = Some(scenario.apiserver.throttle_rate);
                }
                _ => {} // the parser refuses other knobs
            }
        }
        on.apiserver = Some(set);
        off.apiserver = Some(back);
        "apiserver knobs".to_string()
    };
    (target, vec![on, off])
}
