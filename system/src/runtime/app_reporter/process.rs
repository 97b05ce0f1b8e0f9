//! Per-app work: dedup check, payload from the Argo CD server, delivery to the platform.

use std::io::Write;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use kube::api::DynamicObject;
use serde_json::{json, Value};

use crate::core::event::{EventError, EventPayload, Source};
use crate::core::time::rfc3339;
use crate::core::Variant;
use crate::env::{fnv1a_64, Point, SharedEnv};
use crate::runtime::cache;
use base64::prelude::{Engine as _, BASE64_STANDARD};

use super::Config;

/// What processing one app did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Delivered (possibly with payload errors attached).
    Sent {
        /// Reading the Argo CD server failed; the event carries the error.
        payload_error: bool,
    },
    /// The dedup cache already holds this state.
    CachedIgnored,
    /// Every delivery attempt failed.
    DeliveryFailed,
}

/// Shared clients and settings of a replica's workers.
pub struct Processor {
    env: SharedEnv,
    http: crate::env::http::Client<Full<Bytes>>,
    cache: cache::Client,
    config: Config,
}

/// The gzip JSON envelope `{"data": payload}` the events API accepts.
pub fn encode_event(payload: &EventPayload) -> std::io::Result<Bytes> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(
        &serde_json::to_vec(&json!({"data": payload})).map_err(std::io::Error::other)?,
    )?;
    Ok(Bytes::from(encoder.finish()?))
}

/// The app without the fields the real reporter ignores when deduplicating
/// (`reconciledAt`, resourceVersion, generation, managedFields, transition times).
pub fn dedup_digest(app: &DynamicObject) -> String {
    let mut value = serde_json::to_value(app).unwrap_or(Value::Null);
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in ["resourceVersion", "generation", "managedFields"] {
            meta.remove(field);
        }
    }
    if let Some(status) = value.get_mut("status").and_then(Value::as_object_mut) {
        status.remove("reconciledAt");
        if let Some(conditions) = status.get_mut("conditions").and_then(Value::as_array_mut) {
            for c in conditions.iter_mut().filter_map(Value::as_object_mut) {
                c.remove("lastTransitionTime");
            }
        }
    }
    format!("{:016x}", fnv1a_64(value.to_string().as_bytes()))
}

fn text(value: &Value, pointer: &str) -> String {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

impl Processor {
    /// Clients for the Argo CD server, the platform and the cache.
    pub fn new(env: SharedEnv, config: &Config) -> Self {
        Processor {
            http: crate::env::http::client(env.clone(), config.request_timeout * 2),
            cache: cache::Client::new(env.clone(), &config.cache_addr, config.request_timeout),
            env,
            config: config.clone(),
        }
    }

    async fn argocd(&self, path: &str) -> Result<Value, String> {
        if self.env.buggify(Point::ReporterArgocdReadFails) {
            return Err(format!("GET {path}: connection reset (fault point)"));
        }
        let request = Request::get(format!("http://{}{path}", self.config.argocd_addr))
            .header(
                "authorization",
                format!("Bearer {}", self.config.argocd_token),
            )
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        let response =
            tokio::time::timeout(self.config.request_timeout, self.http.request(request))
                .await
                .map_err(|_| format!("GET {path}: timed out"))?
                .map_err(|e| format!("GET {path}: {e}"))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("GET {path}: {e}"))?
            .to_bytes();
        if !status.is_success() {
            return Err(format!(
                "GET {path}: {status}: {}",
                String::from_utf8_lossy(&body)
            ));
        }
        serde_json::from_slice(&body).map_err(|e| format!("GET {path}: invalid JSON: {e}"))
    }

    /// Builds the event; returns it and whether reading the Argo CD server failed.
    async fn payload(
        &self,
        app: &DynamicObject,
        deleted: bool,
        variant: Variant,
    ) -> (EventPayload, bool) {
        let name = app.metadata.name.clone().unwrap_or_default();
        let status = app.data.get("status").cloned().unwrap_or(Value::Null);
        let mut source = Source {
            repo_url: text(&app.data, "/spec/source/repoURL"),
            path: text(&app.data, "/spec/source/path"),
            revision: text(&status, "/sync/revision"),
            operation_sync_revision: text(&status, "/operationState/syncResult/revision"),
            history_id: status
                .pointer("/history")
                .and_then(Value::as_array)
                .and_then(|h| h.last())
                .and_then(|h| h["id"].as_i64())
                .unwrap_or(0),
            app_name: name.clone(),
            app_namespace: app.metadata.namespace.clone().unwrap_or_default(),
            app_uid: app.metadata.uid.clone().unwrap_or_default(),
            app_labels: app.metadata.labels.clone().unwrap_or_default(),
            sync_status: text(&status, "/sync/status"),
            sync_started_at: text(&status, "/operationState/startedAt"),
            sync_finished_at: text(&status, "/operationState/finishedAt"),
            health_status: text(&status, "/health/status"),
            health_message: text(&status, "/health/message"),
            cluster: text(&app.data, "/spec/destination/server"),
            ..Source::default()
        };
        let mut errors = Vec::new();
        if !deleted {
            if let Err(message) = self.fill_manifests(&name, &mut source).await {
                errors.push(EventError {
                    kind: "transient".into(),
                    level: "error".into(),
                    message,
                    last_seen: rfc3339(self.env.unix_millis()),
                    source_reference: json!({"kind": "Application", "name": name}),
                });
            }
        }
        let object = serde_json::to_vec(app).unwrap_or_default();
        let rv = app.metadata.resource_version.clone().unwrap_or_default();
        let payload = EventPayload {
            timestamp: rfc3339(self.env.unix_millis()),
            object: BASE64_STANDARD.encode(&object),
            source,
            app_versions: json!({}),
            idempotency_key: (variant == Variant::Hardened).then(|| {
                format!(
                    "{}/{name}@{rv}:{deleted}",
                    app.metadata.namespace.clone().unwrap_or_default()
                )
            }),
            errors,
        };
        let failed = !payload.errors.is_empty();
        (payload, failed)
    }

    async fn fill_manifests(&self, name: &str, source: &mut Source) -> Result<(), String> {
        let base = format!("/api/v1/applications/{name}");
        let tree = self.argocd(&format!("{base}/resource-tree")).await?;
        let revision = source.revision.clone();
        let manifests = self
            .argocd(&format!("{base}/manifests?revision={revision}"))
            .await?;
        let joined: Vec<&str> = manifests["manifests"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        source.desired_manifest = joined.join("---\n");
        source.git_manifest = source.desired_manifest.clone();
        if !revision.is_empty() {
            let meta = self
                .argocd(&format!("{base}/revisions/{revision}/metadata"))
                .await?;
            source.commit_message = text(&meta, "/message");
            source.commit_author = text(&meta, "/author");
            source.commit_date = text(&meta, "/date");
        }
        let mut live = Vec::new();
        for node in tree["nodes"].as_array().into_iter().flatten() {
            let path = format!(
                "{base}/resource?kind={}&resourceName={}",
                text(node, "/kind"),
                text(node, "/name")
            );
            // A resource not yet live is normal for an OutOfSync app: report what exists.
            if let Ok(resource) = self.argocd(&path).await {
                live.push(text(&resource, "/manifest"));
            }
        }
        source.actual_manifest = live.join("---\n");
        if source.desired_manifest.is_empty() && source.actual_manifest.is_empty() {
            // Empty both ways would read as "deleted"; say what we know instead.
            return Err(format!("no manifests for {name} at revision {revision:?}"));
        }
        Ok(())
    }

    async fn deliver(&self, payload: &EventPayload) -> bool {
        let Ok(gzipped) = encode_event(payload) else {
            return false;
        };
        for attempt in 0..self.config.delivery_attempts {
            if attempt > 0 {
                let pause = self
                    .env
                    .random_between(Duration::from_secs(1), Duration::from_secs(2));
                self.env.sleep(pause).await;
            }
            let Ok(request) = Request::post(format!(
                "http://{}/2.0/api/events",
                self.config.platform_addr
            ))
            .header("authorization", self.config.runtime_token.clone())
            .header("content-encoding", "gzip")
            .header("content-type", "application/json")
            .body(Full::new(gzipped.clone())) else {
                return false;
            };
            if let Ok(Ok(response)) =
                tokio::time::timeout(self.config.request_timeout, self.http.request(request)).await
            {
                let ok = response.status().is_success();
                let _ = response.into_body().collect().await;
                if ok {
                    return true;
                }
            }
        }
        false
    }

    /// The platform's read model (`GET /2.0/api/apps`): `namespace/name` → reported state.
    pub async fn platform_apps(&self) -> Result<std::collections::BTreeMap<String, Value>, String> {
        let request = Request::get(format!("http://{}/2.0/api/apps", self.config.platform_addr))
            .header("authorization", self.config.runtime_token.clone())
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        let response =
            tokio::time::timeout(self.config.request_timeout, self.http.request(request))
                .await
                .map_err(|_| "GET /2.0/api/apps timed out".to_string())?
                .map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("GET /2.0/api/apps: {}", response.status()));
        }
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        serde_json::from_slice(&body).map_err(|e| e.to_string())
    }

    /// Processes one app event end to end; `force` skips the dedup check.
    pub async fn process(
        &self,
        app: &DynamicObject,
        deleted: bool,
        force: bool,
        variant: Variant,
    ) -> Outcome {
        let key = format!(
            "app:{}/{}",
            app.metadata.namespace.clone().unwrap_or_default(),
            app.metadata.name.clone().unwrap_or_default()
        );
        let digest = dedup_digest(app);
        // Fault point: the lookup fails, as a Redis timeout would; the event goes out anyway.
        if !deleted && !force && !self.env.buggify(Point::ReporterCacheReadFails) {
            if let Ok(Some(cached)) = self.cache.get(&key).await {
                if cached == digest.as_bytes() {
                    return Outcome::CachedIgnored;
                }
            }
        }
        let (payload, payload_error) = self.payload(app, deleted, variant).await;
        if !self.deliver(&payload).await {
            return Outcome::DeliveryFailed;
        }
        // Written only after a successful send; deletes are always sent. Fault point: the
        // process stops between the acknowledgement and this write.
        if !deleted && !payload_error && !self.env.buggify(Point::ReporterAfterSendBeforeCache) {
            let _ = self
                .cache
                .put(&key, Bytes::from(digest), self.config.dedup_ttl)
                .await;
        }
        Outcome::Sent { payload_error }
    }
}
