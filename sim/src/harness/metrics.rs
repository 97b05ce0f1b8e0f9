//! Figures derived from the trace: counters and latency histograms (p50/p99/max).

use std::collections::BTreeMap;

use serde::Serialize;

use super::trace::TraceEvent;

/// A latency distribution.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Histogram {
    /// Unit of the values.
    pub unit: &'static str,
    /// Number of samples.
    pub count: usize,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest sample.
    pub max: u64,
    /// (upper bound label, samples) buckets.
    pub buckets: Vec<(String, usize)>,
}

/// Bucket upper bounds in milliseconds.
const BUCKETS_MS: [u64; 8] = [100, 500, 1_000, 5_000, 10_000, 30_000, 60_000, u64::MAX];

impl Histogram {
    /// Builds a histogram of millisecond samples (nearest-rank percentiles).
    pub fn from_ms(mut samples: Vec<u64>) -> Self {
        samples.sort_unstable();
        let rank = |p: f64| -> u64 {
            if samples.is_empty() {
                return 0;
            }
            let index = ((p * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1;
            samples[index]
        };
        let buckets = BUCKETS_MS
            .iter()
            .enumerate()
            .map(|(i, upper)| {
                let lower = if i == 0 { 0 } else { BUCKETS_MS[i - 1] + 1 };
                let label = if *upper == u64::MAX { format!(">{}ms", BUCKETS_MS[i - 1]) } else { format!("≤{upper}ms") };
                (label, samples.iter().filter(|s| **s >= lower && **s <= *upper).count())
            })
            .collect();
        Histogram { unit: "ms", count: samples.len(), p50: rank(0.50), p99: rank(0.99), max: samples.last().copied().unwrap_or(0), buckets }
    }
}

/// All figures of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Metrics {
    /// Named counts.
    pub counters: BTreeMap<String, u64>,
    /// Named distributions.
    pub histograms: BTreeMap<String, Histogram>,
}

/// Computes the figures of a run from its trace.
pub fn compute(events: &[TraceEvent]) -> Metrics {
    let mut counters: BTreeMap<String, u64> = BTreeMap::new();
    // name → writes not yet seen by the probe: (rv, at_ms)
    let mut pending: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    let mut lags = Vec::new();
    for event in events {
        let detail = &event.observation.detail;
        let kind = event.observation.kind.as_str();
        match kind {
            "apiserver.write" => {
                *counters.entry(format!("apiserver.writes.{}", detail["verb"].as_str().unwrap_or("?"))).or_default() += 1;
                if detail["resource"] == "applications" {
                    if let (Some(name), Some(rv)) = (detail["name"].as_str(), detail["rv"].as_str().and_then(|r| r.parse().ok())) {
                        pending.entry(name.to_string()).or_default().push((rv, event.at_ms));
                    }
                }
            }
            "apiserver.watch_end" => *counters.entry(format!("apiserver.watch_ends.{}", detail["end"].as_str().unwrap_or("?"))).or_default() += 1,
            "probe.init" => *counters.entry("probe.relists".into()).or_default() += 1,
            "probe.error" => *counters.entry("probe.watch_errors".into()).or_default() += 1,
            "probe.apply" | "probe.init_apply" | "probe.delete" => {
                if let (Some(name), Some(rv)) = (detail["name"].as_str(), detail["rv"].as_str().and_then(|r| r.parse::<u64>().ok())) {
                    if let Some(writes) = pending.get_mut(name) {
                        writes.retain(|(write_rv, at)| {
                            let seen = *write_rv <= rv;
                            if seen {
                                lags.push(event.at_ms.saturating_sub(*at));
                            }
                            !seen
                        });
                    }
                }
            }
            other if other.starts_with("workload.") || other.starts_with("fault.") || other.starts_with("argocd.") => {
                *counters.entry(other.to_string()).or_default() += 1;
            }
            _ => {}
        }
    }
    counters.insert("probe.writes_never_seen".into(), pending.values().map(|v| v.len() as u64).sum());
    let mut histograms = BTreeMap::new();
    histograms.insert("probe_lag_after_write".into(), Histogram::from_ms(lags));
    Metrics { counters, histograms }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let h = Histogram::from_ms((1..=100).collect());
        assert_eq!((h.p50, h.p99, h.max, h.count), (50, 99, 100, 100));
        assert_eq!(h.buckets[0], ("≤100ms".to_string(), 100));
        assert_eq!(Histogram::from_ms(vec![]).p99, 0);
    }
}
