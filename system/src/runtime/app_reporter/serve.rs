//! `/healthz`, Prometheus `/metrics` (label `reporter_shard`) and `/app-distribution`.

use std::fmt::Write as _;
use std::sync::Arc;

use http::{Response, StatusCode};
use serde_json::json;

use super::Replica;
use crate::env::http::{full, Body};

/// Processing-duration histogram buckets, seconds (as the real reporter's).
pub const DURATION_BUCKETS: [f64; 7] = [0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0];

fn metrics(replica: &Replica) -> String {
    let (depth, resync) = replica.queue_depth();
    let counters = replica.state().counters.clone();
    let shard = replica.shard_label();
    let p = "cf_argocd_application_event_reporter";
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# TYPE {p}_queue_size gauge\n{p}_queue_size{{reporter_shard=\"{shard}\"}} {depth}"
    );
    let _ = writeln!(out, "# TYPE {p}_resync_pending gauge\n{p}_resync_pending{{reporter_shard=\"{shard}\"}} {resync}");
    for (name, value) in [
        ("enqueued_events_total", counters.enqueued),
        ("dropped_events_total", counters.dropped),
        ("cached_ignored_total", counters.cached_ignored),
        ("sent_events_total", counters.sent),
    ] {
        let _ = writeln!(
            out,
            "# TYPE {p}_{name} counter\n{p}_{name}{{reporter_shard=\"{shard}\"}} {value}"
        );
    }
    let _ = writeln!(out, "# TYPE {p}_errored_events_total counter");
    let _ = writeln!(
        out,
        "{p}_errored_events_total{{reporter_shard=\"{shard}\",error_type=\"delivery\"}} {}",
        counters.errored_delivery
    );
    let _ = writeln!(
        out,
        "{p}_errored_events_total{{reporter_shard=\"{shard}\",error_type=\"get_payload\"}} {}",
        counters.errored_payload
    );
    let _ = writeln!(out, "# TYPE {p}_processing_duration_seconds histogram");
    let mut cumulative = 0;
    for (i, bound) in DURATION_BUCKETS.iter().enumerate() {
        cumulative += counters.duration_buckets[i];
        let _ = writeln!(out, "{p}_processing_duration_seconds_bucket{{reporter_shard=\"{shard}\",le=\"{bound}\"}} {cumulative}");
    }
    cumulative += counters.duration_buckets[DURATION_BUCKETS.len()];
    let _ = writeln!(out, "{p}_processing_duration_seconds_bucket{{reporter_shard=\"{shard}\",le=\"+Inf\"}} {cumulative}");
    let _ = writeln!(
        out,
        "{p}_processing_duration_seconds_sum{{reporter_shard=\"{shard}\"}} {}",
        counters.duration_sum_ms as f64 / 1000.0
    );
    let _ = writeln!(
        out,
        "{p}_processing_duration_seconds_count{{reporter_shard=\"{shard}\"}} {cumulative}"
    );
    out
}

fn distribution(replica: &Replica) -> serde_json::Value {
    let mut apps = replica.store.state();
    apps.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let shard = replica.shard_label();
    let owned: serde_json::Map<String, serde_json::Value> = apps
        .iter()
        .filter_map(|a| a.metadata.name.clone())
        .filter(|n| replica.owns(n))
        .map(|n| (n, json!(shard)))
        .collect();
    serde_json::Value::Object(owned)
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
                "/app-distribution" => (
                    StatusCode::OK,
                    "application/json",
                    distribution(&replica).to_string(),
                ),
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
