//! `/healthz`, Prometheus `/metrics` (label `reporter_shard`) and `/app-distribution`.

use std::fmt::Write as _;
use std::sync::Arc;

use http::{Response, StatusCode};
use serde_json::json;

use super::Replica;
use crate::env::http::{full, Body};

/// Processing-duration histogram buckets, seconds (as the real reporter's).
pub const DURATION_BUCKETS: [f64; 7] = [0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0];

/// Per-app series of the real reporter's metrics (label `application`).
#[derive(Clone, Debug, Default)]
pub struct AppSeries {
    /// `enqueued_events_total` by `error_in_learning_mode` (false, true).
    pub enqueued: [u64; 2],
    /// `dropped_events_total` by `error_in_learning_mode` (false, true).
    pub dropped: [u64; 2],
    /// `cached_ignored_events` by `metric_event_type` ([`EVENT_TYPES`]).
    pub cached_ignored: [u64; 3],
    /// `errored_events_total` by `metric_event_type` × `error_type` ([`ERROR_TYPES`]).
    pub errored: [[u64; 3]; 3],
}

/// `metric_event_type` values.
pub const EVENT_TYPES: [&str; 3] = ["app", "child_app", "resource"];
/// `error_type` values.
pub const ERROR_TYPES: [&str; 3] = ["delivery", "get_payload", "unknown"];

/// The real reporter's metrics (`event_reporter/metrics/metrics.go`, research §1.8): every
/// series carries `reporter_shard`. The processing-duration histogram is kept per event
/// type only (the real one also has `application`).
fn metrics(replica: &Replica) -> String {
    let (depth, resync) = replica.queue_depth();
    let state = replica.state();
    let counters = state.counters.clone();
    let shard = replica.shard_label();
    let p = "codefresh_event_reporter";
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# TYPE {p}_queue_size gauge\n{p}_queue_size{{reporter_shard=\"{shard}\"}} {depth}"
    );
    let _ = writeln!(out, "# TYPE {p}_resync_pending gauge\n{p}_resync_pending{{reporter_shard=\"{shard}\"}} {resync}");
    let learning = ["false", "true"];
    let _ = writeln!(out, "# TYPE {p}_enqueued_events_total counter");
    for (app, series) in &state.series {
        for (i, v) in series.enqueued.iter().enumerate().filter(|(_, v)| **v > 0) {
            let _ = writeln!(out, "{p}_enqueued_events_total{{application=\"{app}\",error_in_learning_mode=\"{}\",reporter_shard=\"{shard}\"}} {v}", learning[i]);
        }
    }
    let _ = writeln!(out, "# TYPE {p}_dropped_events_total counter");
    for (app, series) in &state.series {
        for (i, v) in series.dropped.iter().enumerate().filter(|(_, v)| **v > 0) {
            let _ = writeln!(out, "{p}_dropped_events_total{{application=\"{app}\",error_in_learning_mode=\"{}\",reporter_shard=\"{shard}\"}} {v}", learning[i]);
        }
    }
    let _ = writeln!(out, "# TYPE {p}_cached_ignored_events counter");
    for (app, series) in &state.series {
        for (i, v) in series
            .cached_ignored
            .iter()
            .enumerate()
            .filter(|(_, v)| **v > 0)
        {
            let _ = writeln!(out, "{p}_cached_ignored_events{{application=\"{app}\",metric_event_type=\"{}\",reporter_shard=\"{shard}\"}} {v}", EVENT_TYPES[i]);
        }
    }
    let _ = writeln!(out, "# TYPE {p}_errored_events_total counter");
    for (app, series) in &state.series {
        for (t, row) in series.errored.iter().enumerate() {
            for (e, v) in row.iter().enumerate().filter(|(_, v)| **v > 0) {
                let _ = writeln!(out, "{p}_errored_events_total{{application=\"{app}\",error_type=\"{}\",metric_event_type=\"{}\",reporter_shard=\"{shard}\"}} {v}", ERROR_TYPES[e], EVENT_TYPES[t]);
            }
        }
    }
    // orrery's own totals (not in the real reporter): what was delivered.
    let _ = writeln!(out, "# TYPE {p}_sent_events_total counter");
    for (i, v) in [
        counters.sent_app,
        counters.sent_child,
        counters.sent_resource,
    ]
    .iter()
    .enumerate()
    {
        let _ = writeln!(
            out,
            "{p}_sent_events_total{{metric_event_type=\"{}\",reporter_shard=\"{shard}\"}} {v}",
            EVENT_TYPES[i]
        );
    }
    let _ = writeln!(out, "# TYPE {p}_event_processing_duration histogram");
    let mut cumulative = 0;
    for (i, bound) in DURATION_BUCKETS.iter().enumerate() {
        cumulative += counters.duration_buckets[i];
        let _ = writeln!(out, "{p}_event_processing_duration_bucket{{metric_event_type=\"app\",reporter_shard=\"{shard}\",le=\"{bound}\"}} {cumulative}");
    }
    cumulative += counters.duration_buckets[DURATION_BUCKETS.len()];
    let _ = writeln!(out, "{p}_event_processing_duration_bucket{{metric_event_type=\"app\",reporter_shard=\"{shard}\",le=\"+Inf\"}} {cumulative}");
    let _ = writeln!(
        out,
        "{p}_event_processing_duration_sum{{metric_event_type=\"app\",reporter_shard=\"{shard}\"}} {}",
        counters.duration_sum_ms as f64 / 1000.0
    );
    let _ = writeln!(
        out,
        "{p}_event_processing_duration_count{{metric_event_type=\"app\",reporter_shard=\"{shard}\"}} {cumulative}"
    );
    out
}

/// `/app-distribution`: without parameters, the apps this replica reports now (app →
/// shard label). With `?shardings=a,b` (the real reporter's form, `handlers.go`), per
/// algorithm the count of apps per shard and an `app → shard` map keyed by the qualified
/// name `<ns>/<name>`; algorithms: `legacy` (FNV-1a of the name modulo the replicas) and
/// `rendezvous` (hardened: over the live lease holders). [inferred: the exact JSON shape.]
fn distribution(replica: &Replica, shardings: Option<&str>) -> serde_json::Value {
    let mut apps = replica.store.state();
    apps.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let Some(shardings) = shardings else {
        let shard = replica.shard_label();
        let ownership = replica.ownership();
        let owned: serde_json::Map<String, serde_json::Value> = apps
            .iter()
            .filter_map(|a| a.metadata.name.clone())
            .filter(|n| ownership.owns(n))
            .map(|n| (n, json!(shard)))
            .collect();
        return serde_json::Value::Object(owned);
    };
    let members = replica.state().members.clone();
    let mut out = serde_json::Map::new();
    for algorithm in shardings
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
    {
        let shard_of = |name: &str| -> Option<String> {
            match algorithm {
                "legacy" if replica.config.replicas == 0 => Some("-1".into()),
                "legacy" => {
                    Some(super::shard::faithful_shard(name, replica.config.replicas).to_string())
                }
                "rendezvous" => super::shard::rendezvous_owner(name, &members).map(str::to_string),
                _ => None,
            }
        };
        if !["legacy", "rendezvous"].contains(&algorithm) {
            out.insert(algorithm.into(), json!({"error": format!("unknown sharding algorithm {algorithm:?}; known: legacy, rendezvous")}));
            continue;
        }
        let mut counts: std::collections::BTreeMap<String, u64> = Default::default();
        let mut map = serde_json::Map::new();
        for app in &apps {
            let (Some(name), namespace) = (
                app.metadata.name.as_deref(),
                app.metadata.namespace.as_deref().unwrap_or(""),
            ) else {
                continue;
            };
            let shard = shard_of(name).unwrap_or_else(|| "-1".into());
            *counts.entry(shard.clone()).or_default() += 1;
            map.insert(format!("{namespace}/{name}"), json!(shard));
        }
        out.insert(
            algorithm.into(),
            json!({"distribution": counts, "apps": map}),
        );
    }
    serde_json::Value::Object(out)
}

/// Serves the replica's endpoints until the listener fails.
pub async fn run(replica: Arc<Replica>) -> std::io::Result<()> {
    let listener = replica.env.listen(&replica.config.serve_addr).await?;
    crate::env::http::serve(listener, move |req, _peer| {
        let replica = replica.clone();
        async move {
            let (status, content_type, body) = match req.uri().path() {
                "/healthz" => (StatusCode::OK, "text/plain", "ok".to_string()),
                "/metrics" => (
                    StatusCode::OK,
                    "text/plain; version=0.0.4",
                    metrics(&replica),
                ),
                "/app-distribution" => {
                    let query = crate::env::http::query(req.uri());
                    (
                        StatusCode::OK,
                        "application/json",
                        distribution(&replica, query.get("shardings").map(String::as_str))
                            .to_string(),
                    )
                }
                _ => (StatusCode::NOT_FOUND, "text/plain", "not found".to_string()),
            };
            Response::builder()
                .status(status)
                .header("content-type", content_type)
                .body(full(body))
                .expect("static response parts are valid") as Response<Body>
        }
    })
    .await
}
