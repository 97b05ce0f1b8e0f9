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
                let label = if *upper == u64::MAX {
                    format!(">{}ms", BUCKETS_MS[i - 1])
                } else {
                    format!("≤{upper}ms")
                };
                (
                    label,
                    samples
                        .iter()
                        .filter(|s| **s >= lower && **s <= *upper)
                        .count(),
                )
            })
            .collect();
        Histogram {
            unit: "ms",
            count: samples.len(),
            p50: rank(0.50),
            p99: rank(0.99),
            max: samples.last().copied().unwrap_or(0),
            buckets,
        }
    }
}

/// All figures of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Metrics {
    /// Named counts.
    pub counters: BTreeMap<String, u64>,
    /// Named distributions.
    pub histograms: BTreeMap<String, Histogram>,
    /// Named time series: (simulated second, value) at each change.
    pub series: BTreeMap<String, Vec<(u64, u64)>>,
    /// Shard ownership over the run (when reporters ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ownership: Option<crate::checkers::ownership::Analysis>,
}

/// Delays from each Application write to the first `seen` event whose RV covers it.
/// Writes superseded before anyone saw them resolve with the later write.
fn lags(events: &[TraceEvent], seen: &[&str], name_field: &str) -> (Vec<u64>, u64) {
    let mut pending: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    let mut lags = Vec::new();
    for event in events {
        let detail = &event.observation.detail;
        let kind = event.observation.kind.as_str();
        if kind == "apiserver.write" && detail["resource"] == "applications" {
            if let (Some(name), Some(rv)) = (
                detail["name"].as_str(),
                detail["rv"].as_str().and_then(|r| r.parse().ok()),
            ) {
                pending
                    .entry(name.to_string())
                    .or_default()
                    .push((rv, event.at_ms));
            }
        } else if seen.contains(&kind) {
            if let (Some(name), Some(rv)) = (
                detail[name_field].as_str(),
                detail["rv"].as_str().and_then(|r| r.parse::<u64>().ok()),
            ) {
                if let Some(writes) = pending.get_mut(name) {
                    writes.retain(|(write_rv, at)| {
                        let covered = *write_rv <= rv;
                        if covered {
                            lags.push(event.at_ms.saturating_sub(*at));
                        }
                        !covered
                    });
                }
            }
        }
    }
    (lags, pending.values().map(|v| v.len() as u64).sum())
}

/// Computes the figures of a run from its trace and final state.
pub fn compute(events: &[TraceEvent], state: &crate::checkers::FinalState) -> Metrics {
    let mut counters: BTreeMap<String, u64> = BTreeMap::new();
    let mut series: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    let mut reporters = false;
    for event in events {
        let detail = &event.observation.detail;
        let kind = event.observation.kind.as_str();
        let second = event.at_ms / 1000;
        match kind {
            "apiserver.write" => {
                *counters
                    .entry(format!(
                        "apiserver.writes.{}",
                        detail["verb"].as_str().unwrap_or("?")
                    ))
                    .or_default() += 1
            }
            "apiserver.watch_end" => {
                *counters
                    .entry(format!(
                        "apiserver.watch_ends.{}",
                        detail["end"].as_str().unwrap_or("?")
                    ))
                    .or_default() += 1
            }
            "probe.init" => *counters.entry("probe.relists".into()).or_default() += 1,
            "probe.error" => *counters.entry("probe.watch_errors".into()).or_default() += 1,
            "platform.event" => {
                *counters
                    .entry(format!(
                        "platform.events.{}",
                        detail["applied"].as_str().unwrap_or("?")
                    ))
                    .or_default() += 1
            }
            "reporter.queue" => {
                reporters = true;
                let replica = detail["replica"].as_str().unwrap_or("?");
                series
                    .entry(format!("queue_depth.{replica}"))
                    .or_default()
                    .push((second, detail["depth"].as_u64().unwrap_or(0)));
                series
                    .entry(format!("resync_pending.{replica}"))
                    .or_default()
                    .push((second, detail["resync"].as_u64().unwrap_or(0)));
                let dropped = detail["dropped"].as_u64().unwrap_or(0);
                let max = counters
                    .entry(format!("reporter.dropped_events.{replica}"))
                    .or_default();
                *max = (*max).max(dropped);
            }
            "harness.stale_apps" => series
                .entry("stale_apps".into())
                .or_default()
                .push((second, detail["stale"].as_u64().unwrap_or(0))),
            other
                if other.starts_with("workload.")
                    || other.starts_with("fault.")
                    || other.starts_with("argocd.")
                    || other.starts_with("host.") =>
            {
                *counters.entry(other.to_string()).or_default() += 1;
            }
            other if other.starts_with("reporter.") => {
                *counters.entry(other.to_string()).or_default() += 1
            }
            _ => {}
        }
    }
    for points in series.values_mut() {
        points.dedup_by(|b, a| a.1 == b.1);
    }
    let mut histograms = BTreeMap::new();
    let (probe_lags, probe_unseen) = lags(
        events,
        &["probe.apply", "probe.init_apply", "probe.delete"],
        "name",
    );
    if !probe_lags.is_empty() {
        counters.insert("probe.writes_never_seen".into(), probe_unseen);
        histograms.insert(
            "probe_lag_after_write".into(),
            Histogram::from_ms(probe_lags),
        );
    }
    let (platform_lags, platform_unseen) = lags(events, &["platform.event"], "app");
    if !platform_lags.is_empty() {
        counters.insert("platform.writes_never_reported".into(), platform_unseen);
        histograms.insert(
            "end_to_end_latency_write_to_platform".into(),
            Histogram::from_ms(platform_lags),
        );
    }
    tunnel_figures(events, &mut counters, &mut histograms, &mut series);
    let ownership = reporters.then(|| {
        let apps: Vec<String> = state.apps.iter().map(|a| a.name.clone()).collect();
        crate::checkers::ownership::analyse(events, &apps, state.end_ms)
    });
    Metrics {
        counters,
        histograms,
        series,
        ownership,
    }
}

/// Tunnel figures: request latency and availability over time, how long a drop took to be
/// noticed (by the platform and by the runtime), and how long the tunnel took to come back.
fn tunnel_figures(
    events: &[TraceEvent],
    counters: &mut BTreeMap<String, u64>,
    histograms: &mut BTreeMap<String, Histogram>,
    series: &mut BTreeMap<String, Vec<(u64, u64)>>,
) {
    const WINDOW_MS: u64 = 10_000;
    let mut latencies = Vec::new();
    let mut windows: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let (mut detected_platform, mut detected_runtime, mut reconnected) =
        (Vec::new(), Vec::new(), Vec::new());
    let (mut fault_at, mut fault_seen_platform, mut fault_seen_runtime): (Option<u64>, bool, bool) =
        (None, false, false);
    let mut repair_at: Option<u64> = None;
    let mut up: BTreeMap<String, bool> = BTreeMap::new();
    let mut executed: BTreeMap<String, u64> = BTreeMap::new();
    // Fleet figures: registrations per second at the server, and per runtime the time from
    // the (last) tunnel-server restart to its tunnel being back.
    let mut per_second: BTreeMap<u64, u64> = BTreeMap::new();
    let mut restarted_at: Option<u64> = None;
    let mut back: BTreeMap<String, u64> = BTreeMap::new();
    for event in events {
        let detail = &event.observation.detail;
        let kind = event.observation.kind.as_str();
        if kind.starts_with("tunnel.") {
            *counters.entry(kind.to_string()).or_default() += 1;
        }
        if kind == "fault.restart" {
            restarted_at = Some(event.at_ms);
            back.clear();
        }
        match kind {
            "client.request" => {
                let status = detail["status"].as_u64().unwrap_or(0);
                latencies.push(detail["latency_ms"].as_u64().unwrap_or(0));
                let class = match status {
                    0 => "hung".to_string(),
                    1 => "gateway_unreachable".to_string(),
                    s => format!("{}xx", s / 100),
                };
                *counters
                    .entry(format!("client.requests.{class}"))
                    .or_default() += 1;
                let window = windows.entry(event.at_ms / WINDOW_MS).or_default();
                window.0 += 1;
                window.1 += u64::from((200..300).contains(&status));
            }
            "runtime.execute" => {
                *executed
                    .entry(detail["key"].as_str().unwrap_or("").to_string())
                    .or_default() += 1
            }
            "fault.partition" | "fault.crash" => {
                fault_at = Some(event.at_ms);
                (fault_seen_platform, fault_seen_runtime) = (false, false);
            }
            "fault.repair" | "fault.restart" | "calm.start" if up.values().any(|u| !*u) => {
                repair_at = repair_at.or(Some(event.at_ms))
            }
            "tunnel.server_down" => {
                up.insert(detail["runtime"].as_str().unwrap_or("").to_string(), false);
                if let (Some(at), false) = (fault_at, fault_seen_platform) {
                    detected_platform.push(event.at_ms - at);
                    fault_seen_platform = true;
                }
            }
            "tunnel.client_down" => {
                if let (Some(at), false) = (fault_at, fault_seen_runtime) {
                    detected_runtime.push(event.at_ms - at);
                    fault_seen_runtime = true;
                }
            }
            "host.stop" => up.values_mut().for_each(|u| *u = false),
            "tunnel.server_up" => {
                let runtime = detail["runtime"].as_str().unwrap_or("").to_string();
                *per_second.entry(event.at_ms / 1000).or_default() += 1;
                if let Some(at) = restarted_at {
                    back.entry(runtime.clone()).or_insert(event.at_ms - at);
                }
                up.insert(runtime, true);
                if let Some(at) = repair_at.take() {
                    reconnected.push(event.at_ms - at);
                }
            }
            _ => {}
        }
    }
    if latencies.is_empty() && per_second.is_empty() {
        return;
    }
    counters.insert(
        "tunnel.peak_registrations_per_s".into(),
        per_second.values().copied().max().unwrap_or(0),
    );
    if restarted_at.is_some() {
        histograms.insert(
            "fleet_reconnect_after_restart".into(),
            Histogram::from_ms(back.into_values().collect()),
        );
        series.insert(
            "registrations_per_s".into(),
            per_second.into_iter().collect(),
        );
    }
    if latencies.is_empty() {
        return;
    }
    for kind in [
        "tunnel.server_up",
        "tunnel.server_down",
        "tunnel.client_down",
    ] {
        counters.entry(kind.to_string()).or_default();
    }
    counters.insert("runtime.executions".into(), executed.values().sum());
    counters.insert(
        "runtime.duplicate_executions".into(),
        executed.values().map(|n| n.saturating_sub(1)).sum(),
    );
    histograms.insert("request_latency".into(), Histogram::from_ms(latencies));
    histograms.insert(
        "tunnel_drop_noticed_by_platform".into(),
        Histogram::from_ms(detected_platform),
    );
    histograms.insert(
        "tunnel_drop_noticed_by_runtime".into(),
        Histogram::from_ms(detected_runtime),
    );
    histograms.insert(
        "tunnel_back_after_repair".into(),
        Histogram::from_ms(reconnected),
    );
    series.insert(
        "availability_pct_per_10s".into(),
        windows
            .iter()
            .map(|(window, (all, ok))| (window * WINDOW_MS / 1000, ok * 100 / (*all).max(1)))
            .collect(),
    );
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
