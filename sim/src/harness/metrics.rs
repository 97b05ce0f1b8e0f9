//! Figures derived from the trace: counters and latency histograms (p50/p99/max).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::faults::Fault;
use crate::trace::{Entry, HarnessEvent, TraceEvent};
use orrery_system::observe::{
    Observation, PlatformEvent, ReporterEvent, RequestOutcome, ResourceReporterEvent, TunnelEvent,
    WorldEvent,
};

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
    /// (range label, samples) buckets: disjoint, each holding the samples above the previous
    /// bucket's upper bound up to and including its own.
    pub buckets: Vec<(String, usize)>,
}

/// A bound in a bucket label: milliseconds below a second, whole or decimal seconds above.
fn bound_label(ms: u64) -> String {
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms.is_multiple_of(1_000) {
        format!("{} s", ms / 1_000)
    } else {
        format!("{:.1} s", ms as f64 / 1_000.0)
    }
}

/// The label of bucket `i` of [`BUCKETS_MS`]: the range it holds, not a cumulative bound.
fn bucket_label(i: usize) -> String {
    match (i.checked_sub(1).map(|j| BUCKETS_MS[j]), BUCKETS_MS[i]) {
        (None, upper) => format!("0–{}", bound_label(upper)),
        (Some(lower), u64::MAX) => format!("> {}", bound_label(lower)),
        (Some(lower), upper) => {
            let (lower, upper) = (bound_label(lower), bound_label(upper));
            // "100–500 ms", "1–5 s", "500 ms–1 s": one unit when both bounds share it.
            match (lower.strip_suffix(" ms"), upper.strip_suffix(" ms")) {
                (Some(l), Some(_)) => format!("{l}–{upper}"),
                _ => match (lower.strip_suffix(" s"), upper.strip_suffix(" s")) {
                    (Some(l), Some(_)) => format!("{l}–{upper}"),
                    _ => format!("{lower}–{upper}"),
                },
            }
        }
    }
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
                (
                    bucket_label(i),
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

/// The counter of application changes: every write the API server stored to an
/// Application (create, update, patch, delete), what the per-change cost figures divide by.
pub const APPLICATION_CHANGES: &str = "apiserver.application_writes";

/// All figures of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Metrics {
    /// Named counts.
    pub counters: BTreeMap<String, u64>,
    /// Named distributions.
    pub histograms: BTreeMap<String, Histogram>,
    /// Named time series: (simulated second, value) at each change.
    pub series: BTreeMap<String, Vec<(u64, u64)>>,
    /// What each series' values are (a level holds until the next point; a count or a
    /// sample belongs to its own second or window only). Series not listed are levels.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub series_kinds: BTreeMap<String, SeriesKind>,
    /// Shard ownership over the run (when reporters ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ownership: Option<crate::checkers::ownership::Analysis>,
}

/// What a series' values mean, so windows and charts aggregate them rightly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SeriesKind {
    /// A state that holds until its next point (queue depth, stale apps): a window shows the
    /// highest level it saw, carried in from before it.
    Level,
    /// Events counted in the second of their point (registrations per second): a window
    /// shows their sum, and a second without a point had none.
    Count,
    /// A measurement of its own window only (availability per 10 s): a window shows the
    /// lowest sample inside it, and none when nothing was measured.
    Sample,
}

/// Which events count as "seen" for a write-to-seen delay.
#[derive(Clone, Copy)]
enum Seen {
    /// The probe's watcher saw the object (apply, initial list, delete).
    Probe,
    /// The platform projected an event for the app.
    Platform,
}

/// The (name, rv) a `seen` event is about, if it is one.
fn seen_at(event: &TraceEvent, seen: Seen) -> Option<(&str, u64)> {
    let (name, rv) = match (seen, &event.entry) {
        (Seen::Probe, _) => match event.world()? {
            WorldEvent::ProbeApply { name, rv }
            | WorldEvent::ProbeInitApply { name, rv }
            | WorldEvent::ProbeDelete { name, rv } => (name, rv),
            _ => return None,
        },
        (
            Seen::Platform,
            Entry::Observed(Observation::Platform(PlatformEvent::Event { app, rv, .. })),
        ) => (app, rv),
        _ => return None,
    };
    Some((name.as_str(), rv.parse().ok()?))
}

/// Delays from each Application write to the first `seen` event whose RV covers it.
/// Writes superseded before anyone saw them resolve with the later write.
fn lags(events: &[TraceEvent], seen: Seen) -> (Vec<u64>, u64) {
    let mut pending: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    let mut lags = Vec::new();
    for event in events {
        if let Some(WorldEvent::ApiWrite {
            resource, name, rv, ..
        }) = event.world()
        {
            if let (true, Ok(rv)) = (resource == "applications", rv.parse::<u64>()) {
                pending
                    .entry(name.clone())
                    .or_default()
                    .push((rv, event.at_ms));
            }
        } else if let Some((name, rv)) = seen_at(event, seen) {
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
    (lags, pending.values().map(|v| v.len() as u64).sum())
}

/// The counter name of an event counted by kind (`fault.<action>` for faults).
fn counted_kind(event: &TraceEvent) -> Option<String> {
    if let Some(HarnessEvent::Fault(fault)) = event.harness() {
        return Some(format!("fault.{}", fault.name()));
    }
    let kind = event.kind();
    [
        "workload.",
        "argocd.",
        "host.",
        "reporter.",
        "acr.",
        "sources.",
        "operator.",
        "promotion.",
        "restricted.",
    ]
    .iter()
    .any(|prefix| kind.starts_with(prefix))
    .then(|| kind.to_string())
}

/// Computes the figures of a run from its trace and final state.
pub fn compute(events: &[TraceEvent], state: &crate::checkers::FinalState) -> Metrics {
    let mut counters: BTreeMap<String, u64> = BTreeMap::new();
    let mut series: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    let mut reporters = false;
    // Per replica: the running totals of its current process and what earlier processes
    // (before a restart reset the counters) had sent, rate-limited and dropped.
    let mut totals: BTreeMap<String, ([u64; 4], [u64; 4])> = BTreeMap::new();
    // Per replica: its latest queue depth (the fleet's is their sum).
    let mut depths: BTreeMap<String, u64> = BTreeMap::new();
    for event in events {
        let second = event.at_ms / 1000;
        let mut count = |name: String| *counters.entry(name).or_default() += 1;
        match &event.entry {
            Entry::Observed(Observation::World(WorldEvent::ApiWrite {
                verb, resource, ..
            })) => {
                if resource == "applications" {
                    count(APPLICATION_CHANGES.into());
                }
                count(format!("apiserver.writes.{verb}"))
            }
            Entry::Observed(Observation::World(WorldEvent::WatchEnded { end, .. })) => {
                let end = serde_json::to_value(end).unwrap_or_default();
                count(format!(
                    "apiserver.watch_ends.{}",
                    end.as_str().unwrap_or("?")
                ))
            }
            Entry::Observed(Observation::World(WorldEvent::ProbeInit)) => {
                count("probe.relists".into())
            }
            Entry::Observed(Observation::World(WorldEvent::ProbeError { .. })) => {
                count("probe.watch_errors".into())
            }
            Entry::Observed(Observation::Platform(PlatformEvent::Event { applied, .. })) => {
                let applied = serde_json::to_value(applied).unwrap_or_default();
                count(format!(
                    "platform.events.{}",
                    applied.as_str().unwrap_or("?")
                ))
            }
            Entry::Harness(HarnessEvent::StaleApps { stale, .. }) => series
                .entry("stale_apps".into())
                .or_default()
                .push((second, *stale)),
            Entry::Harness(HarnessEvent::StaleRollouts { stale, .. }) => series
                .entry("stale_rollouts".into())
                .or_default()
                .push((second, *stale)),
            Entry::Harness(HarnessEvent::StaleWorkflows { stale, .. }) => series
                .entry("stale_workflows".into())
                .or_default()
                .push((second, *stale)),
            Entry::Observed(Observation::Resources(ResourceReporterEvent::Delivered {
                kind,
                attempts,
                ..
            })) => {
                let kind = kind.dependency();
                count(format!("resources.delivered.{kind}"));
                *counters
                    .entry(format!("resources.retried.{kind}"))
                    .or_default() += u64::from(attempts.saturating_sub(1));
            }
            Entry::Observed(Observation::Resources(ResourceReporterEvent::Lost {
                kind,
                why,
                ..
            })) => {
                let why = serde_json::to_value(why).unwrap_or_default();
                count(format!(
                    "resources.lost.{}.{}",
                    kind.dependency(),
                    why.as_str().unwrap_or("?")
                ))
            }
            _ => {}
        }
        if let Some(ReporterEvent::Queue {
            replica,
            depth,
            resync,
            dropped,
            sent_app,
            sent_resource,
            rate_limited,
            ..
        }) = event.reporter()
        {
            reporters = true;
            let (current, earlier) = totals.entry(replica.clone()).or_default();
            let now = [*sent_app, *sent_resource, *rate_limited, *dropped];
            if now.iter().zip(current.iter()).any(|(n, c)| n < c) {
                // The replica restarted (a start not seen): its counters began from zero.
                for (e, c) in earlier.iter_mut().zip(current.iter()) {
                    *e += c;
                }
            }
            *current = now;
            let replica_dropped = current[3] + earlier[3];
            depths.insert(replica.clone(), *depth);
            series
                .entry("queue_depth".into())
                .or_default()
                .push((second, depths.values().sum()));
            series
                .entry("dropped_events".into())
                .or_default()
                .push((second, totals.values().map(|(c, e)| c[3] + e[3]).sum()));
            series
                .entry(format!("queue_depth.{replica}"))
                .or_default()
                .push((second, *depth));
            series
                .entry(format!("resync_pending.{replica}"))
                .or_default()
                .push((second, *resync));
            counters.insert(
                format!("reporter.dropped_events.{replica}"),
                replica_dropped,
            );
        }
        if let Some(ReporterEvent::Start { replica, .. }) = event.reporter() {
            // A new process: what the last one counted is kept, the new one counts from zero.
            if let Some((current, earlier)) = totals.get_mut(replica) {
                for (e, c) in earlier.iter_mut().zip(current.iter_mut()) {
                    *e += std::mem::take(c);
                }
            }
        }
        if let Some(HarnessEvent::HostStop { host, .. }) = event.harness() {
            // A stopped replica's queue is gone with its process: it no longer counts.
            if depths.remove(host).is_some() {
                series
                    .entry("queue_depth".into())
                    .or_default()
                    .push((second, depths.values().sum()));
                series
                    .entry(format!("queue_depth.{host}"))
                    .or_default()
                    .push((second, 0));
            }
        }
        if let Some(name) = counted_kind(event) {
            *counters.entry(name).or_default() += 1;
        }
    }
    if reporters {
        for (i, name) in [
            "reporter.events_sent.app",
            "reporter.events_sent.resource",
            "reporter.rate_limited",
        ]
        .iter()
        .enumerate()
        {
            let sum = totals.values().map(|(c, e)| c[i] + e[i]).sum();
            counters.insert(name.to_string(), sum);
        }
    }
    for points in series.values_mut() {
        points.dedup_by(|b, a| a.1 == b.1);
    }
    let mut histograms = BTreeMap::new();
    let (probe_lags, probe_unseen) = lags(events, Seen::Probe);
    if !probe_lags.is_empty() {
        counters.insert("probe.writes_never_seen".into(), probe_unseen);
        histograms.insert(
            "probe_lag_after_write".into(),
            Histogram::from_ms(probe_lags),
        );
    }
    // Hosted runtimes' Applications live in their own API servers (their own resourceVersions,
    // the same names) and the platform's events do not say whose they are: a write and the
    // event that covers it cannot be paired, so the latency is left out.
    let hosted_runtimes = state.hosted.iter().any(|t| t.runtime.is_some());
    let (platform_lags, platform_unseen) = lags(events, Seen::Platform);
    if !platform_lags.is_empty() && !hosted_runtimes {
        counters.insert("platform.writes_never_reported".into(), platform_unseen);
        histograms.insert(
            "end_to_end_latency_write_to_platform".into(),
            Histogram::from_ms(platform_lags),
        );
    }
    // What the components asked of the world (counted beside the trace).
    counters.extend(state.cost.iter().map(|(name, n)| (name.clone(), *n)));
    let mut series_kinds = BTreeMap::new();
    tunnel_figures(
        events,
        &mut counters,
        &mut histograms,
        &mut series,
        &mut series_kinds,
    );
    change_revision_figures(events, state, &mut counters, &mut histograms);
    promotion_figures(events, state, &mut counters, &mut histograms);
    runner_figures(events, state, &mut counters, &mut histograms);
    runner_series(events, state, &mut series);
    restricted_figures(events, &mut counters, &mut histograms);
    health_figures(events, &mut counters, &mut histograms);
    bus_figures(events, &mut counters);
    anti_entropy_figures(events, &mut counters);
    vcluster_figures(events, state, &mut counters);
    tenant_figures(events, state, &mut counters);
    store_figures(events, state, &mut counters);
    git_detail_figures(events, state, &mut counters);
    let ownership = reporters.then(|| {
        let apps: Vec<String> = state.apps.iter().map(|a| a.name.clone()).collect();
        crate::checkers::ownership::analyse(events, &apps, state.end_ms)
    });
    Metrics {
        counters,
        histograms,
        series,
        series_kinds,
        ownership,
    }
}

/// A level over time from intervals `[from, to)` (ms; `to` [`OPEN`] when it lasts past the
/// run): how many cover each moment, a point (second, level) at each second the level
/// changed in (its last value there).
fn levels(intervals: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut changes: Vec<(u64, i64)> = Vec::new();
    for &(from, to) in intervals.iter().filter(|(from, to)| from < to) {
        changes.push((from, 1));
        if to != OPEN {
            changes.push((to, -1));
        }
    }
    changes.sort_unstable();
    let mut points: Vec<(u64, u64)> = vec![(0, 0)];
    let mut level = 0i64;
    for (at_ms, change) in changes {
        level += change;
        let second = at_ms / 1000;
        match points.last_mut() {
            Some(last) if last.0 == second => last.1 = level as u64,
            _ => points.push((second, level as u64)),
        }
    }
    points.dedup_by(|b, a| a.1 == b.1);
    points
}

/// The Runner over time: builds admitted and running, builds waiting for admission, builds
/// beyond the first that one trigger event started (so far), and pods and claims of ended
/// builds still in the cluster.
/// The end of an interval still open when the run ended.
const OPEN: u64 = u64::MAX;

fn runner_series(
    events: &[TraceEvent],
    state: &crate::checkers::FinalState,
    series: &mut BTreeMap<String, Vec<(u64, u64)>>,
) {
    let Some(truth) = &state.runner else {
        return;
    };
    let end = OPEN;
    let at = |unix_ms: u64| unix_ms.saturating_sub(truth.started_ms);
    let running: Vec<(u64, u64)> = truth
        .builds
        .iter()
        .filter_map(|b| Some((at(b.admitted_ms?), b.finished_ms.map_or(end, at))))
        .collect();
    let pending: Vec<(u64, u64)> = truth
        .builds
        .iter()
        .map(|b| {
            let left = b.admitted_ms.or(b.finished_ms).map_or(end, at);
            (at(b.created_ms), left)
        })
        .collect();
    // The second and later builds of one delivery id or cron tick, in creation order.
    let mut seen = std::collections::BTreeSet::new();
    let duplicates: Vec<(u64, u64)> = truth
        .builds
        .iter()
        .filter_map(|b| {
            let key = b
                .delivery
                .clone()
                .or_else(|| b.tick.as_ref().map(|t| t.key()))?;
            (!seen.insert(key)).then_some((at(b.created_ms), OPEN))
        })
        .collect();
    // Each build object's life, then the part of it after its build ended.
    let finished: BTreeMap<&str, u64> = truth
        .builds
        .iter()
        .filter_map(|b| Some((b.id.as_str(), at(b.finished_ms?))))
        .collect();
    let mut alive: BTreeMap<&str, u64> = BTreeMap::new();
    let mut orphaned = Vec::new();
    let mut orphan = |name: &str, from: u64, to: u64| {
        if let Some(ended) = build_of(name).and_then(|b| finished.get(b)) {
            orphaned.push((from.max(*ended), to));
        }
    };
    for event in events {
        let Some(WorldEvent::ApiWrite {
            verb,
            resource,
            name,
            ..
        }) = event.world()
        else {
            continue;
        };
        if resource != "pods" && resource != "persistentvolumeclaims" {
            continue;
        }
        match verb.as_str() {
            "create" => {
                alive.entry(name).or_insert(event.at_ms);
            }
            "delete" => {
                if let Some(from) = alive.remove(name.as_str()) {
                    orphan(name, from, event.at_ms);
                }
            }
            _ => {}
        }
    }
    for (name, from) in alive {
        orphan(name, from, end);
    }
    for (name, intervals) in [
        ("runner_builds_running", running),
        ("runner_builds_pending", pending),
        ("runner_duplicate_builds_so_far", duplicates),
        ("runner_orphans", orphaned),
    ] {
        series.insert(name.into(), levels(&intervals));
    }
}

/// The build a Runner object (`pvc-dind-<id>`, `dind-<id>`, `engine-<id>`) belongs to.
fn build_of(name: &str) -> Option<&str> {
    ["pvc-dind-", "dind-", "engine-"]
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix))
}

/// The Runner's builds by how they ended, the tasks executed again or deduplicated, the
/// objects left behind, and a task's round trip (handed out → its status accepted).
fn runner_figures(
    events: &[TraceEvent],
    state: &crate::checkers::FinalState,
    counters: &mut BTreeMap<String, u64>,
    histograms: &mut BTreeMap<String, Histogram>,
) {
    use orrery_system::observe::RunnerEvent;
    let Some(truth) = &state.runner else {
        return;
    };
    counters.insert("runner.builds".into(), truth.builds.len() as u64);
    for build in &truth.builds {
        let status = if build.status.is_final() {
            build.status.as_str()
        } else {
            "unfinished"
        };
        *counters
            .entry(format!("runner.builds.{status}"))
            .or_default() += 1;
    }
    counters.insert(
        "runner.orphans".into(),
        truth
            .objects
            .iter()
            .filter(|(_, _, b)| {
                truth
                    .builds
                    .iter()
                    .any(|build| &build.id == b && build.status.is_final())
            })
            .count() as u64,
    );
    // Admissions and ends in time order (an end frees its place first), as
    // `runner_concurrency_limit` judges them.
    let (mut now, mut peak) = (0i64, 0i64);
    for (_, change, _) in crate::checkers::runner::admissions(&truth.builds) {
        now += i64::from(change);
        peak = peak.max(now);
    }
    counters.insert("runner.peak_admitted".into(), peak as u64);
    // Builds beyond the first that one webhook delivery started.
    let mut per_delivery: BTreeMap<&str, u64> = BTreeMap::new();
    for build in &truth.builds {
        if let Some(delivery) = &build.delivery {
            *per_delivery.entry(delivery.as_str()).or_default() += 1;
        }
    }
    counters.insert(
        "runner.duplicate_builds".into(),
        per_delivery.values().map(|n| n - 1).sum(),
    );
    if !truth.crons.is_empty() {
        let accounts = crate::checkers::runner::cron_accounts(truth);
        let count = |f: &dyn Fn(&crate::checkers::runner::TickAccount<'_>) -> u64| {
            accounts.iter().map(f).sum::<u64>()
        };
        counters.insert("runner.cron.due".into(), count(&|a| u64::from(a.owed)));
        counters.insert(
            "runner.cron.duplicate_builds".into(),
            count(&|a| (a.builds.len() as u64).saturating_sub(1)),
        );
        counters.insert(
            "runner.cron.lost".into(),
            count(&|a| u64::from(a.owed && a.builds.is_empty() && !a.missed)),
        );
        counters.insert("runner.cron.missed".into(), count(&|a| u64::from(a.missed)));
    }
    let mut executed: BTreeMap<&str, u64> = BTreeMap::new();
    // Each task with the pods that executed it.
    let mut pods: BTreeMap<&str, std::collections::BTreeSet<&str>> = BTreeMap::new();
    let mut deduplicated = 0;
    let mut handed: BTreeMap<&str, u64> = BTreeMap::new();
    let mut round_trips = Vec::new();
    let mut volumes: BTreeMap<String, u64> = BTreeMap::new();
    let mut logs: BTreeMap<String, u64> = BTreeMap::new();
    let mut proxy_tries = 0u64;
    // Builds that ended, and creations of a build's objects after that (a creation handed
    // out again after its build's cleanup: the object comes back).
    let mut ended: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    let mut creates_after_end = 0u64;
    for event in events {
        if let Some(orrery_system::observe::WorldEvent::ApiWrite { verb, name, .. }) = event.world()
        {
            if verb == "create" && build_of(name).is_some_and(|b| ended.contains(b)) {
                creates_after_end += 1;
            }
        }
        match event.runner() {
            Some(RunnerEvent::Build { build, status, .. })
                if !matches!(status.as_str(), "pending" | "elected" | "running") =>
            {
                ended.insert(build.as_str());
            }
            Some(RunnerEvent::Logs {
                written,
                requests,
                peak_bytes,
                ..
            }) => {
                *logs.entry("runner.logs.written".into()).or_default() += written;
                *logs.entry("runner.logs.requests".into()).or_default() += requests;
                let peak = logs.entry("runner.logs.peak_bytes".into()).or_default();
                *peak = (*peak).max(*peak_bytes);
            }
            Some(RunnerEvent::EngineOom {
                held_bytes,
                written,
                sent,
                requests,
                ..
            }) => {
                *logs.entry("runner.logs.written".into()).or_default() += written;
                *logs.entry("runner.logs.requests".into()).or_default() += requests;
                *logs.entry("runner.logs.lost".into()).or_default() += written - sent;
                *logs.entry("runner.logs.oom_kills".into()).or_default() += 1;
                let peak = logs.entry("runner.logs.peak_bytes".into()).or_default();
                *peak = (*peak).max(*held_bytes);
            }
            Some(RunnerEvent::Volume { claim, action, .. }) => {
                let key = match action.as_str() {
                    "removed" if !claim.is_empty() => "removed_in_use",
                    other => other,
                };
                *volumes.entry(format!("runner.volumes.{key}")).or_default() += 1;
            }
            Some(RunnerEvent::VolumeLost { .. }) => {
                *volumes.entry("runner.volumes.lost".into()).or_default() += 1;
            }
            Some(RunnerEvent::Exec {
                task,
                host,
                deduplicated: false,
                ..
            }) => {
                *executed.entry(task).or_default() += 1;
                pods.entry(task).or_default().insert(host);
            }
            Some(RunnerEvent::Exec {
                deduplicated: true, ..
            }) => deduplicated += 1,
            Some(RunnerEvent::Handout { task, .. }) => {
                handed.entry(task).or_insert(event.at_ms);
            }
            Some(RunnerEvent::Proxy { attempts, .. }) => {
                proxy_tries += u64::from(*attempts);
            }
            Some(RunnerEvent::Report {
                task,
                accepted: true,
                ..
            }) => {
                if let Some(at) = handed.remove(task.as_str()) {
                    round_trips.push(event.at_ms.saturating_sub(at));
                }
            }
            _ => {}
        }
    }
    counters.insert(
        "runner.tasks_executed_again".into(),
        executed.values().map(|n| n.saturating_sub(1)).sum(),
    );
    counters.insert("runner.tasks_deduplicated".into(), deduplicated);
    counters.insert("runner.creates_after_end".into(), creates_after_end);
    // With replicas: tasks two pods of one agent both executed (venona serializes a
    // workflow per process only, §4 row 2).
    if truth.replicas > 1 {
        counters.insert(
            "runner.tasks_on_two_pods".into(),
            pods.values().filter(|p| p.len() > 1).count() as u64,
        );
    }
    // With the volume provisioner: every figure, zero included.
    if !volumes.is_empty() {
        for key in [
            "created",
            "reused",
            "marked",
            "removed_in_use",
            "lost",
            "expired",
        ] {
            let key = format!("runner.volumes.{key}");
            let n = volumes.get(&key).copied().unwrap_or(0);
            counters.insert(key, n);
        }
    }
    // With proxy tasks: every figure, zero included.
    if !truth.proxies.is_empty() {
        use orrery_system::core::runner::Outcome;
        use orrery_system::platform::runner::queue::TaskState;
        let done = |wanted: Outcome| {
            truth
                .proxies
                .iter()
                .filter(
                    |p| matches!(&p.state, TaskState::Done { outcome, .. } if *outcome == wanted),
                )
                .count() as u64
        };
        counters.insert("runner.proxy.tasks".into(), truth.proxies.len() as u64);
        counters.insert("runner.proxy.success".into(), done(Outcome::Success));
        counters.insert("runner.proxy.error".into(), done(Outcome::Error));
        counters.insert(
            "runner.proxy.false_success".into(),
            truth.false_successes().len() as u64,
        );
        counters.insert("runner.proxy.tries".into(), proxy_tries);
        // A POST retried after its answer was lost commits again: no idempotency key in
        // either variant (venona's go-retryablehttp, runner-research.md §1.8).
        counters.insert(
            "runner.proxy.duplicate_commits".into(),
            truth
                .proxies
                .iter()
                .filter_map(|p| truth.committed.get(&p.message))
                .map(|n| u64::from(n.saturating_sub(1)))
                .sum(),
        );
    }
    // With steps that log: every figure, zero included.
    if !logs.is_empty() {
        for key in ["written", "requests", "peak_bytes", "lost", "oom_kills"] {
            let key = format!("runner.logs.{key}");
            let n = logs.get(&key).copied().unwrap_or(0);
            counters.insert(key, n);
        }
    }
    histograms.insert(
        "runner.task_round_trip".into(),
        Histogram::from_ms(round_trips),
    );
    // Made → admitted (elected), for the builds that were.
    histograms.insert(
        "runner.admission_latency".into(),
        Histogram::from_ms(
            truth
                .builds
                .iter()
                .filter_map(|b| Some(b.admitted_ms?.saturating_sub(b.created_ms)))
                .collect(),
        ),
    );
}

/// Promotion figures (with a `promotions:` section):
/// - `promotion.releases.<phase>`: releases by how they ended (`unfinished` at the end);
/// - `promotion.duplicate_commits`: promotion commits beyond the first of their
///   (task, step, file) — what `promotion_commit_once` counts;
/// - `promotion.duplicates_prevented`: hardened found a promotion it had recorded an intent
///   for already committed, and made no second commit;
/// - `promotion.step_retries`: operator steps tried again after a transient error;
/// - `promotion_lead_time_to_<environment>`: from the commit in the trigger environment to
///   the environment verified, per release that got there;
/// - `promotion.lead_time_to_last_max_ms`: the slowest of those to an environment no other
///   depends on (production).
fn promotion_figures(
    events: &[TraceEvent],
    state: &crate::checkers::FinalState,
    counters: &mut BTreeMap<String, u64>,
    histograms: &mut BTreeMap<String, Histogram>,
) {
    use orrery_system::observe::OperatorEvent;
    let Some(truth) = &state.promotions else {
        return;
    };
    for release in &truth.releases {
        let phase = if release.phase.is_final() {
            format!("{:?}", release.phase)
        } else {
            "unfinished".to_string()
        };
        *counters
            .entry(format!("promotion.releases.{phase}"))
            .or_default() += 1;
    }
    let extra: usize = crate::checkers::promotions::duplicates(truth)
        .values()
        .map(|shas| shas.len() - 1)
        .sum();
    counters.insert("promotion.duplicate_commits".into(), extra as u64);
    let mut prevented = 0;
    let mut retries = 0;
    for event in events {
        match event.operator() {
            Some(OperatorEvent::Commit {
                deduplicated: true, ..
            }) => prevented += 1,
            Some(OperatorEvent::Step { outcome, .. }) if outcome == "retry" => retries += 1,
            _ => {}
        }
    }
    counters.insert("promotion.duplicates_prevented".into(), prevented);
    counters.insert("promotion.step_retries".into(), retries);
    let mut lead: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for release in &truth.releases {
        for (environment, status) in &release.environments {
            if status.phase == orrery_system::platform::promotions::EnvPhase::Succeeded {
                lead.entry(environment.clone())
                    .or_default()
                    .push(status.ended_ms.saturating_sub(release.created_ms));
            }
        }
    }
    // The last environments: those no other environment depends on.
    let needed: std::collections::BTreeSet<&String> = truth
        .depends_on
        .values()
        .flat_map(|deps| deps.values().flatten())
        .collect();
    let last = lead
        .iter()
        .filter(|(environment, _)| !needed.contains(environment))
        .flat_map(|(_, samples)| samples.iter().copied())
        .max();
    if let Some(last) = last {
        counters.insert("promotion.lead_time_to_last_max_ms".into(), last);
    }
    for (environment, samples) in lead {
        histograms.insert(
            format!("promotion_lead_time_to_{environment}"),
            Histogram::from_ms(samples),
        );
    }
}

/// Restricted-source figures (when the world reported a RestrictedGitSource):
/// - `restricted.apps_deployed` / `restricted.apps_refused`: distinct apps Argo CD deployed
///   at least once / refused for their project at least once;
/// - `restricted.children_refused`: child Applications a Git Source's project kept out
///   (distinct parent and message);
/// - `restricted.deployments_outside`: deployments outside their source (what
///   `restricted_sources` fires on);
/// - `restricted_source_propagation`: per source change, the time until its AppProject
///   reflected it; `restricted.propagation_max_ms` the slowest (a change never reflected
///   counts to the end of the run).
fn restricted_figures(
    events: &[TraceEvent],
    counters: &mut BTreeMap<String, u64>,
    histograms: &mut BTreeMap<String, Histogram>,
) {
    use orrery_system::observe::WorldEvent;
    let changed = events
        .iter()
        .any(|e| matches!(e.world(), Some(WorldEvent::SourceChanged { .. })));
    if !changed {
        return;
    }
    let mut deployed = std::collections::BTreeSet::new();
    let mut refused = std::collections::BTreeSet::new();
    let mut children = std::collections::BTreeSet::new();
    for event in events {
        match event.world() {
            Some(WorldEvent::AppDeployed { app, .. }) => {
                deployed.insert(app.clone());
            }
            Some(WorldEvent::AppRefused { app, .. }) => {
                refused.insert(app.clone());
            }
            Some(WorldEvent::ReconcileError { app, error })
                if error.contains("is not permitted in project") =>
            {
                children.insert((app.clone(), error.clone()));
            }
            _ => {}
        }
    }
    counters.insert("restricted.apps_deployed".into(), deployed.len() as u64);
    counters.insert("restricted.apps_refused".into(), refused.len() as u64);
    counters.insert("restricted.children_refused".into(), children.len() as u64);
    counters.insert(
        "restricted.deployments_outside".into(),
        crate::checkers::restricted::outside(events).len() as u64,
    );
    let end = events.last().map_or(0, |e| e.at_ms);
    let delays: Vec<u64> = crate::checkers::restricted::propagation(events)
        .into_iter()
        .map(|(_, at, reflected)| reflected.unwrap_or(end).saturating_sub(at))
        .collect();
    if let Some(max) = delays.iter().max() {
        counters.insert("restricted.propagation_max_ms".into(), *max);
    }
    histograms.insert(
        "restricted_source_propagation".into(),
        Histogram::from_ms(delays),
    );
}

/// Runtime monitor figures (only when the platform showed runtimes' health), from the
/// obligations `runtime_health_shown` judges:
/// - `monitor.drops_shown` / `monitor.recoveries_shown`: drops shown as `Unable to
///   communicate` / recoveries shown as `Healthy` (obligations met);
/// - `monitor.drop_to_unable_max_ms` / `monitor.up_to_healthy_max_ms`: the slowest of each
///   (one never met counts to the end of the run; cancelled ones do not count);
/// - `monitor_drop_to_unable` / `monitor_up_to_healthy`: their distributions.
fn health_figures(
    events: &[TraceEvent],
    counters: &mut BTreeMap<String, u64>,
    histograms: &mut BTreeMap<String, Histogram>,
) {
    use crate::checkers::health::{obligations, Due};
    let obligations = obligations(events);
    let shown = events.iter().any(|e| {
        matches!(
            e.platform(),
            Some(orrery_system::observe::PlatformEvent::RuntimeHealth { .. })
        )
    });
    if !shown {
        return;
    }
    let end = events.last().map_or(0, |e| e.at_ms);
    for (due, name, series) in [
        (Due::Unable, "drop_to_unable", "drops_shown"),
        (Due::Healthy, "up_to_healthy", "recoveries_shown"),
    ] {
        let judged: Vec<_> = obligations
            .iter()
            .filter(|o| o.due == due && !o.cancelled)
            .collect();
        let delays: Vec<u64> = judged
            .iter()
            .map(|o| o.met_ms.unwrap_or(end).saturating_sub(o.since_ms))
            .collect();
        counters.insert(
            format!("monitor.{series}"),
            judged.iter().filter(|o| o.met_ms.is_some()).count() as u64,
        );
        counters.insert(
            format!("monitor.{name}_max_ms"),
            delays.iter().copied().max().unwrap_or(0),
        );
        histograms.insert(format!("monitor_{name}"), Histogram::from_ms(delays));
    }
}

/// Multi-tenant figures (only when adversaries probed):
/// - `tenants.probes`, `tenants.refused` (answered 4xx), `tenants.answered` (2xx): the
///   adversaries' probes; `tenants.probes.<kind>` per kind;
/// - `tenants.leaks`: answers that carried another account's data;
/// - `tenants.reached_own` / `tenants.reached_foreign`: requests the tenant runtimes
///   received from their own account's users / from anyone else;
/// - `tenants.denials_audited`: denials in the platform's audit log.
fn tenant_figures(
    events: &[TraceEvent],
    state: &crate::checkers::FinalState,
    counters: &mut BTreeMap<String, u64>,
) {
    use orrery_system::observe::WorldEvent;
    let mut probed = false;
    for event in events {
        match event.world() {
            Some(WorldEvent::TenantProbe {
                kind, status, leak, ..
            }) => {
                probed = true;
                *counters.entry("tenants.probes".into()).or_default() += 1;
                *counters
                    .entry(format!("tenants.probes.{kind}"))
                    .or_default() += 1;
                let class = match status {
                    200..=299 => "tenants.answered",
                    400..=499 => "tenants.refused",
                    _ => "tenants.failed",
                };
                *counters.entry(class.into()).or_default() += 1;
                *counters.entry("tenants.leaks".into()).or_default() += u64::from(!leak.is_empty());
            }
            Some(WorldEvent::TenantReached { account, caller }) => {
                let own = caller == account;
                let name = if own {
                    "tenants.reached_own"
                } else {
                    "tenants.reached_foreign"
                };
                *counters.entry(name.into()).or_default() += 1;
            }
            _ => {}
        }
    }
    if probed {
        for name in [
            "tenants.reached_own",
            "tenants.reached_foreign",
            "tenants.refused",
        ] {
            counters.entry(name.into()).or_default();
        }
        counters.insert(
            "tenants.denials_audited".into(),
            state
                .audit
                .iter()
                .filter(|e| e.outcome == orrery_system::platform::audit::Outcome::Denied)
                .count() as u64,
        );
    }
}

/// The platform's database figures (only in a world with one):
/// - `store.commits`, `store.opens`, `store.fenced`: transactions committed, control-plane
///   starts that loaded it, commits refused from a process that no longer held it;
/// - `store.registrations`, `store.registrations_answered` (a token came back),
///   `store.registrations_rotated` (the answer said it replaced one);
/// - `store.unavailable`: requests the gateway answered 503 (probes and registrations).
fn store_figures(
    events: &[TraceEvent],
    state: &crate::checkers::FinalState,
    counters: &mut BTreeMap<String, u64>,
) {
    use orrery_system::observe::WorldEvent;
    let Some(database) = &state.database else {
        return;
    };
    counters.insert("store.commits".into(), database.figures.commits);
    counters.insert("store.opens".into(), database.figures.opens);
    counters.insert("store.fenced".into(), database.figures.fenced);
    for name in [
        "store.registrations",
        "store.registrations_answered",
        "store.registrations_rotated",
        "store.unavailable",
    ] {
        counters.entry(name.into()).or_default();
    }
    for event in events {
        match event.world() {
            Some(WorldEvent::TenantRegistered {
                status,
                token_sha256,
                rotated,
                ..
            }) => {
                *counters.entry("store.registrations".into()).or_default() += 1;
                if !token_sha256.is_empty() {
                    *counters
                        .entry("store.registrations_answered".into())
                        .or_default() += 1;
                }
                if *rotated {
                    *counters
                        .entry("store.registrations_rotated".into())
                        .or_default() += 1;
                }
                if *status == 503 {
                    *counters.entry("store.unavailable".into()).or_default() += 1;
                }
            }
            Some(WorldEvent::TenantProbe { status: 503, .. }) => {
                *counters.entry("store.unavailable".into()).or_default() += 1;
            }
            _ => {}
        }
    }
}

/// The platform's anti-entropy job (only when it ran): `anti_entropy.passes` (runtimes
/// listed or tried), `anti_entropy.failed` (of them, not listed or stopped short),
/// `anti_entropy.updated` and `anti_entropy.tombstoned` (apps sent again as listed, and as
/// deleted).
fn anti_entropy_figures(events: &[TraceEvent], counters: &mut BTreeMap<String, u64>) {
    use orrery_system::observe::PlatformEvent;
    let mut sums: Option<[u64; 4]> = None;
    for event in events {
        if let Some(PlatformEvent::AntiEntropy {
            updated,
            tombstoned,
            error,
            ..
        }) = event.platform()
        {
            let sums = sums.get_or_insert([0; 4]);
            sums[0] += 1;
            sums[1] += u64::from(!error.is_empty());
            sums[2] += updated;
            sums[3] += tombstoned;
        }
    }
    for (name, value) in [
        "anti_entropy.passes",
        "anti_entropy.failed",
        "anti_entropy.updated",
        "anti_entropy.tombstoned",
    ]
    .into_iter()
    .zip(sums.into_iter().flatten())
    {
        counters.insert(name.into(), value);
    }
}

/// Hosted runtimes' virtual clusters (only with `role: vcluster` hosts):
/// `vcluster.synced` (copies created, updated or deleted), `vcluster.conflicts` (another
/// object's copy found at an object's host name: deleted by faithful, refused by
/// hardened), `vcluster.failed` (reconciles or watches that failed and were retried), and
/// from the end state `vcluster.objects` (virtual objects) and `vcluster.foreign_mounts`
/// (of them, those whose host name holds another object's copy); with hosted runtimes,
/// `hosted.apps` (their virtual clusters' Applications at the end) and `hosted.stale` (of
/// them, those the platform shows otherwise, plus apps it shows that are gone).
fn vcluster_figures(
    events: &[TraceEvent],
    state: &crate::checkers::FinalState,
    counters: &mut BTreeMap<String, u64>,
) {
    use orrery_system::observe::PlatformEvent;
    if state.hosted.is_empty() {
        return;
    }
    let mut sums = [0u64; 3];
    for event in events {
        match event.platform() {
            Some(PlatformEvent::VclusterSynced { .. }) => sums[0] += 1,
            Some(PlatformEvent::VclusterConflict { .. }) => sums[1] += 1,
            Some(PlatformEvent::VclusterFailed { .. }) => sums[2] += 1,
            _ => {}
        }
    }
    let objects = state
        .hosted
        .iter()
        .flat_map(|t| t.objects.iter().map(move |o| (t, o)));
    let foreign = objects
        .clone()
        .filter(|(truth, object)| {
            object.mounted.as_ref().is_some_and(|m| {
                m.owner.vcluster != truth.vcluster
                    || m.owner.namespace != object.namespace
                    || m.owner.name != object.name
            })
        })
        .count();
    for (name, value) in [
        ("vcluster.synced", sums[0]),
        ("vcluster.conflicts", sums[1]),
        ("vcluster.failed", sums[2]),
        ("vcluster.objects", objects.count() as u64),
        ("vcluster.foreign_mounts", foreign as u64),
    ] {
        counters.insert(name.into(), value);
    }
    let runtimes: Vec<_> = state
        .hosted
        .iter()
        .filter_map(|t| t.runtime.as_ref())
        .collect();
    if !runtimes.is_empty() {
        let apps = runtimes.iter().map(|r| r.apps.len() as u64).sum();
        let stale = runtimes
            .iter()
            .map(|r| crate::checkers::stale_apps(&r.apps, &r.reported).len() as u64)
            .sum();
        counters.insert("hosted.apps".into(), apps);
        counters.insert("hosted.stale".into(), stale);
    }
}

/// Event-bus figures (only when the platform crashed and restarted):
/// - `bus.acknowledged`: events the events API answered 2xx for;
/// - `bus.recoveries`: restarts after a crash;
/// - `bus.lost`, `bus.lost_acknowledged`, `bus.redelivered`, `bus.kept`: what the crashes
///   did to the bus (its own count);
/// - `bus.acknowledged_never_handled`: acknowledged events the handler never projected, as
///   `no_acknowledged_event_lost` judges them from outside (with its grace period).
fn bus_figures(events: &[TraceEvent], counters: &mut BTreeMap<String, u64>) {
    use orrery_system::observe::PlatformEvent;
    let mut recovered = false;
    let mut checker = crate::checkers::durability::NoAcknowledgedEventLost::default();
    let mut sums = [0u64; 6];
    for event in events {
        use crate::checkers::Checker;
        checker.on_event(event);
        match event.platform() {
            Some(PlatformEvent::Acknowledged { .. }) => sums[0] += 1,
            Some(PlatformEvent::BusRecovered {
                lost,
                lost_acknowledged,
                redelivered,
                kept,
            }) => {
                recovered = true;
                sums[1] += 1;
                sums[2] += lost;
                sums[3] += lost_acknowledged;
                sums[4] += redelivered;
                sums[5] += kept;
            }
            _ => {}
        }
    }
    if !recovered {
        return;
    }
    for (name, value) in [
        "bus.acknowledged",
        "bus.recoveries",
        "bus.lost",
        "bus.lost_acknowledged",
        "bus.redelivered",
        "bus.kept",
    ]
    .into_iter()
    .zip(sums)
    {
        counters.insert(name.into(), value);
    }
    let end = events.last().map_or(0, |e| e.at_ms);
    counters.insert(
        "bus.acknowledged_never_handled".into(),
        checker.owed_by(end) as u64,
    );
}

/// Change-revision figures (only when syncs ran as visible operations):
/// - `acr.real_changes`: syncs that brought an app a new change (their expected change
///   revision differs from the app's previous sync's); `argocd.synced` counts every sync, what
///   a notification per sync would send;
/// - `acr.notifications`: times an app's change revision moved to a new commit — what
///   `oncePer: changeRevision` notifications send;
/// - `acr.superseded_before_correct`: syncs whose change revision was still wrong when the
///   app synced again (the next sync's value is what counts from then on);
/// - `acr.never_correct`: apps whose last sync's change revision is wrong at the end, as
///   `change_revision_correct` counts them (apps deleted meanwhile are not judged);
/// - `time_to_correct_change_revision`: from a sync's end to its app carrying the expected
///   change revision (0 when it already did).
///
/// For the time to correct, the app's value is followed from the trace: an ACR write of
/// `status.operationState…changeRevision` sets it; a write of `operation…changeRevision` is
/// taken as copied into it when that operation finishes (Argo CD copies the operation as its
/// cache holds it, so a write just before the end may miss: then the figure is early);
/// otherwise a finishing sync keeps the value its predecessor left (the merge patch carries
/// it over).
fn change_revision_figures(
    events: &[TraceEvent],
    state: &crate::checkers::FinalState,
    counters: &mut BTreeMap<String, u64>,
    histograms: &mut BTreeMap<String, Histogram>,
) {
    use orrery_system::observe::AcrEvent;
    use orrery_system::runtime::acr::Field;
    #[derive(Default)]
    struct App {
        value: String,
        /// (operation revision, value written for it) before the operation finished.
        pending: Option<(String, String)>,
        /// The last sync's expected value and when it finished, until it is carried.
        waiting: Option<(String, u64)>,
        last_expected: Option<String>,
    }
    let mut apps: BTreeMap<&str, App> = BTreeMap::new();
    let (mut real, mut notifications, mut superseded, mut syncs) = (0u64, 0u64, 0u64, 0u64);
    let mut delays = Vec::new();
    let settle = |app: &mut App, at_ms: u64, delays: &mut Vec<u64>| {
        if let Some((expected, since)) = &app.waiting {
            if *expected == app.value {
                delays.push(at_ms - since);
                app.waiting = None;
            }
        }
    };
    for event in events {
        match &event.entry {
            Entry::Observed(Observation::World(WorldEvent::Synced {
                app,
                revision,
                expected,
                ..
            })) => {
                syncs += 1;
                let state = apps.entry(app.as_str()).or_default();
                if state.waiting.take().is_some() {
                    superseded += 1;
                }
                let before = state.value.clone();
                if let Some((op, value)) = state.pending.take() {
                    if op == *revision {
                        state.value = value;
                    }
                }
                if state.value != before && !state.value.is_empty() {
                    notifications += 1;
                }
                if !expected.is_empty() && state.last_expected.as_ref() != Some(expected) {
                    real += 1;
                }
                state.last_expected = Some(expected.clone());
                state.waiting = Some((expected.clone(), event.at_ms));
                settle(state, event.at_ms, &mut delays);
            }
            Entry::Observed(Observation::Acr(AcrEvent::Patched {
                app,
                field,
                current,
                revision,
                ..
            })) => {
                let state = apps.entry(app.as_str()).or_default();
                match field {
                    Field::Operation => state.pending = Some((current.clone(), revision.clone())),
                    Field::OperationState => {
                        if *revision != state.value && !revision.is_empty() {
                            notifications += 1;
                        }
                        state.value = revision.clone();
                        settle(state, event.at_ms, &mut delays);
                    }
                }
            }
            _ => {}
        }
    }
    if syncs == 0 {
        return;
    }
    let expected: BTreeMap<String, String> = apps
        .iter()
        .filter_map(|(app, a)| Some((app.to_string(), a.last_expected.clone()?)))
        .collect();
    let never = crate::checkers::acr::wrong_change_revisions(&expected, state).len() as u64;
    counters.insert("acr.real_changes".into(), real);
    counters.insert("acr.notifications".into(), notifications);
    counters.insert("acr.superseded_before_correct".into(), superseded);
    counters.insert("acr.never_correct".into(), never);
    histograms.insert(
        "time_to_correct_change_revision".into(),
        Histogram::from_ms(delays),
    );
}

/// What the platform shows of the apps' Git side, when a source server served them:
/// - `sources.served_from_cache`: answers the source server gave from its cache;
/// - `platform.apps_without_version` / `platform.apps_without_change_commit`: apps the
///   platform shows at their current sync without the app version Git has, or without their
///   change revision's commit, at the end (what `app_version_reported` and
///   `change_revision_reported` judge).
fn git_detail_figures(
    events: &[TraceEvent],
    state: &crate::checkers::FinalState,
    counters: &mut BTreeMap<String, u64>,
) {
    use orrery_system::observe::SourcesEvent;
    if !events.iter().any(|e| e.sources().is_some()) {
        return;
    }
    let cached = events
        .iter()
        .filter(|e| matches!(e.sources(), Some(SourcesEvent::Served { cached: true, .. })))
        .count();
    counters.insert("sources.served_from_cache".into(), cached as u64);
    let (without_version, without_commit) = crate::checkers::sources::missing(state);
    counters.insert(
        "platform.apps_without_version".into(),
        without_version as u64,
    );
    counters.insert(
        "platform.apps_without_change_commit".into(),
        without_commit as u64,
    );
}

/// Tunnel figures: request latency and availability over time, how long a drop took to be
/// noticed (by the platform and by the runtime), and how long the tunnel took to come back.
fn tunnel_figures(
    events: &[TraceEvent],
    counters: &mut BTreeMap<String, u64>,
    histograms: &mut BTreeMap<String, Histogram>,
    series: &mut BTreeMap<String, Vec<(u64, u64)>>,
    series_kinds: &mut BTreeMap<String, SeriesKind>,
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
        if event.tunnel().is_some() {
            *counters.entry(event.kind().to_string()).or_default() += 1;
        }
        let fault = match event.harness() {
            Some(HarnessEvent::Fault(fault)) => Some(fault),
            _ => None,
        };
        if let Some(Fault::Restart(_)) = fault {
            restarted_at = Some(event.at_ms);
            back.clear();
        }
        if let Some(WorldEvent::Request {
            outcome,
            latency_ms,
            ..
        }) = event.world()
        {
            latencies.push(*latency_ms);
            let class = match outcome {
                RequestOutcome::Hung => "hung".to_string(),
                RequestOutcome::Unreachable => "gateway_unreachable".to_string(),
                RequestOutcome::Status(s) => format!("{}xx", s / 100),
            };
            *counters
                .entry(format!("client.requests.{class}"))
                .or_default() += 1;
            let window = windows.entry(event.at_ms / WINDOW_MS).or_default();
            window.0 += 1;
            window.1 += u64::from(outcome.succeeded());
        }
        if let Some(WorldEvent::Execute { key }) = event.world() {
            *executed.entry(key.clone()).or_default() += 1;
        }
        match fault {
            Some(Fault::Partition(_) | Fault::Crash(_)) => {
                fault_at = Some(event.at_ms);
                (fault_seen_platform, fault_seen_runtime) = (false, false);
            }
            Some(Fault::Repair(_) | Fault::Restart(_)) if up.values().any(|u| !*u) => {
                repair_at = repair_at.or(Some(event.at_ms))
            }
            _ => {}
        }
        match event.harness() {
            Some(HarnessEvent::CalmStart { .. }) if up.values().any(|u| !*u) => {
                repair_at = repair_at.or(Some(event.at_ms))
            }
            Some(HarnessEvent::HostStop { .. }) => up.values_mut().for_each(|u| *u = false),
            _ => {}
        }
        match event.tunnel() {
            Some(TunnelEvent::ServerDown { runtime, .. }) => {
                up.insert(runtime.clone(), false);
                if let (Some(at), false) = (fault_at, fault_seen_platform) {
                    detected_platform.push(event.at_ms - at);
                    fault_seen_platform = true;
                }
            }
            Some(TunnelEvent::ClientDown { .. }) => {
                if let (Some(at), false) = (fault_at, fault_seen_runtime) {
                    detected_runtime.push(event.at_ms - at);
                    fault_seen_runtime = true;
                }
            }
            Some(TunnelEvent::ServerUp { runtime, .. }) => {
                *per_second.entry(event.at_ms / 1000).or_default() += 1;
                if let Some(at) = restarted_at {
                    back.entry(runtime.clone()).or_insert(event.at_ms - at);
                }
                up.insert(runtime.clone(), true);
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
        series_kinds.insert("registrations_per_s".into(), SeriesKind::Count);
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
    series_kinds.insert("availability_pct_per_10s".into(), SeriesKind::Sample);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_level_counts_the_intervals_covering_each_second_and_an_open_one_never_closes() {
        // Two overlapping builds, one still open at the end, and an empty interval.
        let points = levels(&[(1_500, 4_000), (2_200, OPEN), (5_000, 5_000)]);
        assert_eq!(points, vec![(0, 0), (1, 1), (2, 2), (4, 1)]);
        // Changes within one second keep its last level.
        assert_eq!(levels(&[(1_100, 1_900)]), vec![(0, 0)]);
        assert_eq!(levels(&[]), vec![(0, 0)]);
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let h = Histogram::from_ms((1..=100).collect());
        assert_eq!((h.p50, h.p99, h.max, h.count), (50, 99, 100, 100));
        assert_eq!(h.buckets[0], ("0–100 ms".to_string(), 100));
        assert_eq!(Histogram::from_ms(vec![]).p99, 0);
    }

    #[test]
    fn buckets_are_labelled_with_the_disjoint_ranges_they_hold() {
        let h = Histogram::from_ms(vec![100, 101, 500, 1_000, 1_001, 30_000, 60_001]);
        let labels: Vec<&str> = h.buckets.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(
            labels,
            [
                "0–100 ms",
                "100–500 ms",
                "500 ms–1 s",
                "1–5 s",
                "5–10 s",
                "10–30 s",
                "30–60 s",
                "> 60 s"
            ]
        );
        let counts: Vec<usize> = h.buckets.iter().map(|(_, n)| *n).collect();
        assert_eq!(
            counts,
            [1, 2, 1, 1, 0, 1, 0, 1],
            "each sample in one bucket"
        );
    }

    #[test]
    fn change_revision_figures_follow_the_value_an_app_carries() {
        use orrery_system::observe::AcrEvent;
        use orrery_system::runtime::acr::Field;
        let synced = |ms: u64, revision: &str, expected: &str| {
            TraceEvent::observed(
                ms,
                "argocd",
                WorldEvent::Synced {
                    app: "argocd/a".into(),
                    revision: revision.into(),
                    previous: String::new(),
                    expected: expected.into(),
                },
            )
        };
        let patched = |ms: u64, field: Field, current: &str, revision: &str| {
            TraceEvent::observed(
                ms,
                "acr",
                AcrEvent::Patched {
                    app: "argocd/a".into(),
                    field,
                    current: current.into(),
                    previous: String::new(),
                    revision: revision.into(),
                },
            )
        };
        let events = [
            // Written into the running operation: right the moment the sync ends.
            patched(500, Field::Operation, "h1", "c1"),
            synced(1_000, "h1", "c1"),
            // Missed while running, corrected 4 s after the sync ended.
            synced(2_000, "h2", "c2"),
            patched(6_000, Field::OperationState, "h2", "c2"),
            // A sync that keeps the same change (no real change), then one never corrected.
            synced(7_000, "h3", "c2"),
            synced(8_000, "h4", "c4"),
        ];
        let mut right = crate::checkers::AppTruth {
            key: "argocd/a".into(),
            change_revision: "c2".into(),
            ..Default::default()
        };
        let state = crate::checkers::FinalState {
            apps: vec![right.clone()],
            ..Default::default()
        };
        let metrics = compute(&events, &state);
        let counter = |name: &str| metrics.counters.get(name).copied();
        assert_eq!(counter("argocd.synced"), Some(4));
        assert_eq!(counter("acr.real_changes"), Some(3));
        assert_eq!(counter("acr.notifications"), Some(2));
        assert_eq!(counter("acr.never_correct"), Some(1));
        assert_eq!(counter("acr.superseded_before_correct"), Some(0));
        let delays = &metrics.histograms["time_to_correct_change_revision"];
        assert_eq!((delays.count, delays.max), (3, 4_000));
        // Judged at the end like the checker: right once the app carries c4.
        right.change_revision = "c4".into();
        let state = crate::checkers::FinalState {
            apps: vec![right],
            ..Default::default()
        };
        assert_eq!(compute(&events, &state).counters["acr.never_correct"], 0);
    }
}
