//! Processing one app event the way the real reporter does (research §1.5–1.7,
//! `StreamApplicationEvents`): the app-level dedup rules, then the Argo CD calls in the real
//! order, then **one application event** (root app) or **one child-app event** (an app whose
//! instance label names a parent), then **one event per changed resource**, each checked
//! against the resource-level cache keyed by the app's latest history revision.
//!
//! Partial-failure rules (faithful and hardened alike): a failed resource tree is tolerated
//! unless it timed out; failed manifest generation means an empty desired set (actual state
//! only, no prune semantics); a root or child event that fails every delivery attempt aborts
//! the app and leaves its app-level entry unwritten; a resource event that fails is skipped
//! (the app goes on) unless the failure is a deadline. The difference between the variants
//! here: hardened sends resource events `resource_concurrency` at a time with idempotency
//! keys, and reports skipped resources as a failure so the app is processed again.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use kube::api::DynamicObject;
use serde_json::{json, Value};

use crate::core::event::{EventError, EventPayload, Source};
use crate::core::json::Pointer as _;
use crate::core::time::{rfc3339, rfc3339_millis};
use crate::core::Variant;
use crate::env::{Point, SharedEnv};
use crate::runtime::cache;
use base64::prelude::{Engine as _, BASE64_STANDARD};

use super::argocd::{AppRef, ArgoCd, ReadError};
use super::dedup::{self, AppDecision, AppFingerprint, WatchType};
use super::memo::{self, Memo};
use super::Config;

/// Argo CD's default instance label (`application.instanceLabelKey`).
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// The annotation tracking method's annotation.
pub const TRACKING_ANNOTATION: &str = "argocd.argoproj.io/tracking-id";

/// What processing one app did, for the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Application events delivered (root apps).
    pub app_sent: u64,
    /// Child-app events delivered.
    pub child_sent: u64,
    /// Resource events delivered.
    pub resources_sent: u64,
    /// Resource events skipped by the resource-level cache.
    pub resources_cached: u64,
    /// Resource events that failed every attempt (skipped, or the reason for an abort).
    pub resources_failed: u64,
    /// Events that went out carrying payload errors (Argo CD reads that failed).
    pub payload_errors: u64,
    /// Apps reported without their Git details (app versions, or a sync or change
    /// revision's metadata) because reading them failed.
    pub details_missing: u64,
}

/// How processing one app ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The app-level rules found nothing new (`cached_ignored_events`).
    CachedIgnored,
    /// Processed; the app-level entry was written.
    Done(Tally),
    /// Aborted (the app event failed, or a deadline): the app-level entry was not written,
    /// so the next change re-sends it.
    Aborted(Tally),
}

impl Outcome {
    /// The tally, if anything was attempted.
    pub fn tally(&self) -> Tally {
        match self {
            Outcome::CachedIgnored => Tally::default(),
            Outcome::Done(t) | Outcome::Aborted(t) => *t,
        }
    }

    /// hardened: whether the app must be processed again (nothing may stay unsent).
    pub fn needs_retry(&self) -> bool {
        match self {
            Outcome::CachedIgnored => false,
            Outcome::Done(t) => t.resources_failed > 0 || t.details_missing > 0,
            Outcome::Aborted(_) => true,
        }
    }
}

/// Shared clients and settings of a replica's workers.
pub struct Processor {
    env: SharedEnv,
    http: crate::env::http::Client<Full<Bytes>>,
    argocd: ArgoCd,
    /// The source server, when configured: app versions and revision metadata come from it.
    sources: Option<ArgoCd>,
    cache: cache::Client,
    config: Config,
    /// hardened: manifests per (app, source, revision), asked for once ([`memo`]).
    manifests: Memo,
    /// hardened: commit metadata per (repository, revision), asked for once.
    metadata: Memo,
}

/// hardened: manifests answers kept per replica (oldest evicted): two a change at most, and
/// a replica owns a fifth of queue-overflow's 10,000 apps.
const MANIFESTS_KEPT: usize = 4_096;
/// hardened: commits' metadata kept per replica (small answers).
const METADATA_KEPT: usize = 16_384;

/// What the hardened resync reads of one app in the platform's read model (the fields of
/// `platform::events::read_model::AppState` it compares; the rest is skipped unparsed).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
pub struct ReportedApp {
    /// The platform shows the app deleted.
    pub deleted: bool,
    /// `sync.status` shown.
    pub sync_status: String,
    /// Revision shown.
    pub revision: String,
    /// `health.status` shown.
    pub health_status: String,
    /// The app's resourceVersion the state reflects.
    pub resource_version: u64,
}

/// The envelope `{"data": payload}`, serialised straight from the payload (the same bytes as
/// `json!({"data": payload})` without building a `Value` tree of every event first).
#[derive(serde::Serialize)]
struct Envelope<'a> {
    data: &'a EventPayload,
}

/// The gzip JSON envelope `{"data": payload}` the events API accepts.
pub fn encode_event(payload: &EventPayload) -> std::io::Result<Bytes> {
    let json = serde_json::to_vec(&Envelope { data: payload }).map_err(std::io::Error::other)?;
    gzip(&json).map(Bytes::from)
}

thread_local! {
    /// One deflate state per thread, reset per event: setting one up allocates and zeroes
    /// its window and hash tables, which cost more than compressing a typical event.
    static DEFLATE: std::cell::RefCell<flate2::Compress> =
        std::cell::RefCell::new(flate2::Compress::new(flate2::Compression::fast(), false));
}

/// `data` gzipped at the fast level: the same bytes as `flate2::write::GzEncoder` with its
/// default header (no name, mtime 0, XFL 4 for the fast level, OS 255), from a reused
/// deflate state.
fn gzip(data: &[u8]) -> std::io::Result<Vec<u8>> {
    const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 255];
    // Room for what JSON usually compresses to (well under half), so it rarely grows.
    let mut out = Vec::with_capacity(HEADER.len() + data.len() / 2 + 64);
    out.extend_from_slice(&HEADER);
    DEFLATE.with(|deflate| -> std::io::Result<()> {
        let mut deflate = deflate.borrow_mut();
        deflate.reset();
        // As GzEncoder does: the input without flushing, then an empty `Finish` (finishing
        // with the input in hand gives a different, equally valid, stream).
        let mut flush = flate2::FlushCompress::None;
        loop {
            if out.len() == out.capacity() {
                out.reserve(data.len() / 4 + 64);
            }
            let consumed = usize::try_from(deflate.total_in()).unwrap_or(data.len());
            let input = data.get(consumed..).unwrap_or_default();
            let status = deflate
                .compress_vec(input, &mut out, flush)
                .map_err(std::io::Error::other)?;
            if status == flate2::Status::StreamEnd {
                return Ok(());
            }
            if deflate.total_in() == data.len() as u64 {
                flush = flate2::FlushCompress::Finish;
            }
        }
    })?;
    let mut crc = flate2::Crc::new();
    crc.update(data);
    out.extend_from_slice(&crc.sum().to_le_bytes());
    // ISIZE: the input's length modulo 2^32 (RFC 1952).
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    Ok(out)
}

fn text(value: &Value, pointer: &str) -> String {
    value
        .at(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// The app's parent (app-of-apps), from the instance label or the tracking annotation
/// (`<app>:<group>/<kind>:<ns>/<name>`), when it names another app.
pub fn parent_of(app: &DynamicObject) -> Option<String> {
    let me = app.metadata.name.as_deref()?;
    let from_label = app
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(INSTANCE_LABEL))
        .cloned();
    let from_annotation = app
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TRACKING_ANNOTATION))
        .and_then(|t| t.split(':').next())
        .map(str::to_string);
    from_label
        .or(from_annotation)
        .filter(|p| !p.is_empty() && p != me)
}

/// The annotation the reporter puts the sync and change revisions' metadata in
/// (`event_reporter/utils`: `annotationRevisionKey`).
pub const REVISIONS_METADATA: &str = "app.meta.revisions-metadata";

/// The app's latest history revision (`status.history[-1].revision`).
fn latest_revision(status: &Value) -> String {
    status
        .at("/history")
        .and_then(Value::as_array)
        .and_then(|h| h.last())
        .map(|h| text(h, "/revision"))
        .unwrap_or_default()
}

/// Errors built from the app's conditions, sync result and unhealthy resources
/// (research §1.7, `application_errors_parser.go`).
fn app_errors(status: &Value, now: &str) -> Vec<EventError> {
    let mut errors = Vec::new();
    for c in status["conditions"].as_array().into_iter().flatten() {
        let kind = text(c, "/type");
        let level = if kind.ends_with("Warning") {
            "warning"
        } else if kind.ends_with("Error") {
            "error"
        } else {
            continue;
        };
        errors.push(EventError {
            kind: "sync".into(),
            level: level.into(),
            message: text(c, "/message"),
            last_seen: now.into(),
            source_reference: Value::Null,
        });
    }
    if text(status, "/operationState/phase") == "Failed"
        || text(status, "/operationState/phase") == "Error"
    {
        errors.push(EventError {
            kind: "sync".into(),
            level: "error".into(),
            message: text(status, "/operationState/message"),
            last_seen: now.into(),
            source_reference: Value::Null,
        });
    }
    for r in status["resources"].as_array().into_iter().flatten() {
        let health = text(r, "/health/status");
        if health == "Degraded" || health == "Missing" {
            errors.push(EventError {
                kind: "health".into(),
                level: "error".into(),
                message: {
                    let m = text(r, "/health/message");
                    if m.is_empty() { format!("resource is {health}") } else { m }
                },
                last_seen: now.into(),
                source_reference: json!({"group": r["group"], "version": r["version"], "kind": r["kind"], "name": r["name"], "namespace": r["namespace"]}),
            });
        }
    }
    errors
}

/// The fields every event of one app shares.
fn app_source(app: &DynamicObject, status: &Value, instance_label_key: &str) -> Source {
    Source {
        repo_url: text(&app.data, "/spec/source/repoURL"),
        path: text(&app.data, "/spec/source/path"),
        revision: latest_revision(status),
        operation_sync_revision: text(status, "/operationState/syncResult/revision"),
        history_id: status
            .at("/history")
            .and_then(Value::as_array)
            .and_then(|h| h.last())
            .and_then(|h| h["id"].as_i64())
            .unwrap_or(0),
        app_name: app.metadata.name.clone().unwrap_or_default(),
        app_namespace: app.metadata.namespace.clone().unwrap_or_default(),
        app_uid: app.metadata.uid.clone().unwrap_or_default(),
        app_labels: app.metadata.labels.clone().unwrap_or_default(),
        sync_status: text(status, "/sync/status"),
        sync_started_at: text(status, "/operationState/startedAt"),
        sync_finished_at: text(status, "/operationState/finishedAt"),
        health_status: text(status, "/health/status"),
        health_message: text(status, "/health/message"),
        cluster: text(&app.data, "/spec/destination/server"),
        app_instance_label_key: instance_label_key.into(),
        tracking_method: if app
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(TRACKING_ANNOTATION))
        {
            "annotation".into()
        } else {
            "label".into()
        },
        ..Source::default()
    }
}

/// The compiled manifest for one resource from a `manifests` answer, matched by group,
/// kind, name and namespace.
fn desired_for(manifests: &[Value], res: &Value) -> Option<(String, Value)> {
    manifests.iter().find_map(|m| {
        let compiled = m["compiledManifest"].as_str()?;
        let object: Value = serde_json::from_str(compiled).ok()?;
        let api_version = text(&object, "/apiVersion");
        let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
        let same = group == text(res, "/group")
            && text(&object, "/kind") == text(res, "/kind")
            && text(&object, "/metadata/name") == text(res, "/name")
            && text(&object, "/metadata/namespace") == text(res, "/namespace");
        same.then(|| {
            let raw = m["rawManifest"].as_str().unwrap_or(compiled).to_string();
            (raw, object)
        })
    })
}

/// Whether every resource in the app's status is Healthy or has no health (a ConfigMap):
/// then the resource tree holds no unhealthy node for the real reporter's health errors to
/// find. Argo CD's app health is the worst of these resources' (gitops-engine
/// `health.IsWorse` over `status.resources`), and a resource's health is computed from its
/// children (a Deployment's from its ReplicaSets' and Pods' counts) [inferred: a child can
/// be unhealthy under a Healthy parent only while the parent's own checks still pass].
fn all_healthy(status: &Value) -> bool {
    status["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|r| {
            r.at("/health/status")
                .is_none_or(|h| h.as_str() == Some("Healthy"))
        })
}

/// What the app's manifests are made from: `spec.source` and `spec.sources`.
fn source_spec(app: &Value) -> Value {
    json!([app.at("/spec/source"), app.at("/spec/sources")])
}

/// One app's facts gathered from Argo CD before any event is built.
struct Gathered {
    manifests: Vec<Value>,
    manifests_failed: bool,
    app_versions: Value,
    commit: Option<Value>,
    /// `app.meta.revisions-metadata`: `{syncRevisions, changeRevisions}` (each `null` when
    /// there were none or one could not be read), or `None` before the app has a revision.
    revisions_metadata: Option<Value>,
    /// A Git detail could not be read (app versions, or a revision's metadata).
    details_missing: bool,
    errors: Vec<EventError>,
    /// hardened: why the desired manifests could not be read, carried by the resource
    /// events (they are read after the app event went out).
    desired_errors: Vec<EventError>,
}

/// `Revisions` when set, else `[Revision]` (`getRevisions`; the single one may be empty).
fn revisions_of(sync: &Value, one: &str, many: &str) -> Vec<String> {
    match sync.get(many).and_then(Value::as_array) {
        Some(list) => list
            .iter()
            .map(|r| r.as_str().unwrap_or("").to_string())
            .collect(),
        None => vec![sync
            .get(one)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()],
    }
}

/// The revisions the app's sync operation synced (`utils.GetOperationSyncRevisions`): the
/// operation state's, else the pending operation's, else `status.sync`'s.
pub fn sync_revisions(app: &Value) -> Vec<String> {
    let sync = app
        .at("/status/operationState/operation/sync")
        .or_else(|| app.at("/operation/sync"))
        .filter(|s| s.is_object());
    match sync {
        Some(sync) => revisions_of(sync, "revision", "revisions"),
        None => revisions_of(
            app.at("/status/sync").unwrap_or(&Value::Null),
            "revision",
            "revisions",
        ),
    }
}

/// The revisions of the app's sync operation whose changes are its own (ACR's
/// `changeRevision(s)`): the operation state's, else the pending operation's
/// (`utils.GetOperationChangeRevisions`).
pub fn change_revisions(app: &Value) -> Vec<String> {
    let from = |sync: &Value| -> Option<Vec<String>> {
        if let Some(list) = sync.get("changeRevisions").and_then(Value::as_array) {
            return Some(
                list.iter()
                    .map(|r| r.as_str().unwrap_or("").to_string())
                    .collect(),
            );
        }
        sync.get("changeRevision")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
            .map(|r| vec![r.to_string()])
    };
    match app.at("/status/operationState/operation/sync") {
        Some(sync) => from(sync),
        None => app.at("/operation/sync").and_then(from),
    }
    .unwrap_or_default()
}

impl Processor {
    /// The Argo CD client (its token is replaced when its Secret changes).
    pub fn argocd(&self) -> &ArgoCd {
        &self.argocd
    }

    /// Clients for the Argo CD server, the platform and the cache.
    pub fn new(env: SharedEnv, config: &Config) -> Self {
        Processor {
            http: crate::env::http::client(env.clone(), config.request_timeout * 2),
            argocd: ArgoCd::new(
                env.clone(),
                &config.argocd_addr,
                &config.argocd_token,
                config.request_timeout,
            ),
            sources: config.sources_addr.as_deref().map(|addr| {
                ArgoCd::new(
                    env.clone(),
                    addr,
                    &config.argocd_token,
                    config.request_timeout,
                )
            }),
            cache: cache::Client::new(env.clone(), &config.cache_addr, config.request_timeout),
            env,
            config: config.clone(),
            manifests: Memo::new(MANIFESTS_KEPT),
            metadata: Memo::new(METADATA_KEPT),
        }
    }

    /// A new Argo CD token: calls carry it from now on, and the answers kept from the old
    /// one are forgotten (the token may belong to another Argo CD).
    pub fn token_rotated(&self, token: &str) {
        self.argocd.set_token(token);
        self.manifests.clear();
        self.metadata.clear();
    }

    /// hardened: the desired manifests of a resource event, at the revision the app's status
    /// was compared with (`status.sync.revision`; the latest target before it has one).
    async fn desired(
        &self,
        app: &AppRef,
        app_object: &Value,
        status: &Value,
    ) -> Result<Vec<Value>, ReadError> {
        let revision = text(status, "/sync/revision");
        let answer = if revision.is_empty() {
            Arc::new(self.argocd.manifests(app, None).await?)
        } else {
            self.manifests_at(
                ("argocd", &self.argocd),
                app,
                &source_spec(app_object),
                &revision,
            )
            .await?
        };
        Ok(answer["manifests"].as_array().cloned().unwrap_or_default())
    }

    /// hardened: the app's manifests at `revision` from `side` (`"argocd"` or `"sources"`),
    /// asked for once per (app, source, revision).
    async fn manifests_at(
        &self,
        side: (&str, &ArgoCd),
        app: &AppRef,
        source: &Value,
        revision: &str,
    ) -> Result<Arc<Value>, ReadError> {
        let app_key = dedup::app_key(&app.namespace, &app.name);
        let key = format!(
            "{}|{}",
            memo::manifests_key(&app_key, source, revision),
            side.0
        );
        if let Some(kept) = self.manifests.get(&key) {
            return Ok(kept);
        }
        let answer = Arc::new(side.1.manifests(app, Some(revision)).await?);
        self.manifests.put(key, answer.clone());
        Ok(answer)
    }

    /// The metadata of `revision` of the app's repository: asked for once per (repository,
    /// revision) by hardened, every time by faithful.
    async fn revision_metadata(
        &self,
        side: &ArgoCd,
        app: &AppRef,
        repo_url: &str,
        revision: &str,
        variant: Variant,
    ) -> Result<Value, ReadError> {
        if variant == Variant::Faithful || repo_url.is_empty() {
            return side.revision_metadata(app, revision, 0).await;
        }
        let key = memo::metadata_key(repo_url, revision);
        if let Some(kept) = self.metadata.get(&key) {
            return Ok((*kept).clone());
        }
        let answer = side.revision_metadata(app, revision, 0).await?;
        self.metadata.put(key, Arc::new(answer.clone()));
        Ok(answer)
    }

    fn read_error(&self, e: &ReadError, reference: Value) -> EventError {
        EventError {
            kind: "transient".into(),
            level: "error".into(),
            message: e.to_string(),
            last_seen: rfc3339(self.env.unix_millis()),
            source_reference: reference,
        }
    }

    /// Steps 1–3 and 5 of the real sequence: resource tree, manifests at the latest target
    /// and at the sync revision, revision metadata. `Err` only for a deadline.
    async fn gather(
        &self,
        app: &AppRef,
        app_object: &Value,
        status: &Value,
        deleted: bool,
        variant: Variant,
    ) -> Result<Gathered, ReadError> {
        let mut gathered = Gathered {
            manifests: Vec::new(),
            manifests_failed: deleted,
            app_versions: json!({}),
            commit: None,
            revisions_metadata: None,
            details_missing: false,
            errors: Vec::new(),
            desired_errors: Vec::new(),
        };
        if deleted {
            return Ok(gathered); // Argo CD no longer knows the app: nothing to read
        }
        let reference = json!({"kind": "Application", "name": app.name});
        let hardened = variant == Variant::Hardened;
        // The tree is where the real reporter finds unhealthy nodes' errors: hardened asks
        // only when something in the app is not Healthy.
        if !hardened || !all_healthy(status) {
            match self.argocd.resource_tree(app).await {
                Err(e) if e.is_deadline() => return Err(e),
                Err(e) => gathered.errors.push(self.read_error(&e, reference.clone())),
                Ok(_) => {}
            }
        }
        // The desired manifests: hardened reads them when a resource event needs them
        // ([`Self::desired`]), at the revision the status was compared with.
        if !hardened {
            match self.argocd.manifests(app, None).await {
                Ok(answer) => {
                    gathered.manifests = answer["manifests"].as_array().cloned().unwrap_or_default()
                }
                Err(e) if e.is_deadline() => return Err(e),
                Err(e) => {
                    gathered.manifests_failed = true;
                    gathered.errors.push(self.read_error(&e, reference.clone()));
                }
            }
        }
        // App versions and revision metadata: from the source server when there is one. A
        // failure that asking again can mend (not a 404, 400 or 422) marks the app as
        // reported without its details.
        let git_side = self.sources.as_ref().unwrap_or(&self.argocd);
        let sync_revision = text(status, "/operationState/syncResult/revision");
        if !sync_revision.is_empty() {
            let answer = if hardened {
                let side = (
                    if self.sources.is_some() {
                        "sources"
                    } else {
                        "argocd"
                    },
                    git_side,
                );
                self.manifests_at(side, app, &source_spec(app_object), &sync_revision)
                    .await
            } else {
                git_side
                    .manifests(app, Some(&sync_revision))
                    .await
                    .map(Arc::new)
            };
            match answer {
                Ok(answer) => gathered.app_versions = answer["applicationVersions"].clone(),
                Err(e) if e.is_deadline() => return Err(e),
                Err(e) => {
                    gathered.details_missing |= !e.is_permanent();
                    // hardened reads little else for an app event: a refused token must
                    // still show on the platform.
                    if hardened && e.is_refused() {
                        gathered.errors.push(self.read_error(&e, reference.clone()));
                    }
                }
            }
        }
        // `getApplicationRevisionsMetadata`: every sync revision's and every change
        // revision's metadata; one failure drops that whole list ("resuming"). Helm chart
        // sources report the revision alone.
        let has_revision = !text(status, "/sync/revision").is_empty()
            || status.at("/sync/revisions").is_some_and(|r| !r.is_null())
            || status["history"].as_array().is_some_and(|h| !h.is_empty());
        if has_revision {
            let helm = !text(app_object, "/spec/source/chart").is_empty();
            let repo_url = text(app_object, "/spec/source/repoURL");
            let mut lists = Vec::new();
            for mut revisions in [sync_revisions(app_object), change_revisions(app_object)] {
                if variant == Variant::Hardened {
                    revisions.retain(|r| !r.is_empty()); // nothing to ask about
                }
                let mut list = Vec::new();
                let mut failed = false;
                for revision in &revisions {
                    if helm {
                        list.push(json!({"revision": revision}));
                        continue;
                    }
                    match self
                        .revision_metadata(git_side, app, &repo_url, revision, variant)
                        .await
                    {
                        Ok(meta) => list.push(json!({"revision": revision, "metadata": meta})),
                        Err(e) if e.is_deadline() => return Err(e),
                        Err(e) => {
                            failed = true;
                            gathered.details_missing |= !e.is_permanent();
                            if variant == Variant::Hardened && e.is_refused() {
                                gathered.errors.push(self.read_error(&e, reference.clone()));
                            }
                            break;
                        }
                    }
                }
                lists.push(if failed || list.is_empty() {
                    Value::Null
                } else {
                    Value::Array(list)
                });
            }
            // The legacy commit fields: the first sync revision's metadata.
            gathered.commit = lists[0].get(0).and_then(|r| r.get("metadata")).cloned();
            gathered.revisions_metadata = Some(json!({
                "syncRevisions": lists[0],
                "changeRevisions": lists[1],
            }));
        }
        Ok(gathered)
    }

    /// Builds an event with the shared fields and `object`.
    fn event(
        &self,
        source: Source,
        object: &Value,
        errors: Vec<EventError>,
        timestamp: &str,
        app_versions: &Value,
        key: Option<String>,
    ) -> EventPayload {
        EventPayload {
            timestamp: timestamp.into(),
            object: BASE64_STANDARD.encode(serde_json::to_vec(object).unwrap_or_default()),
            source,
            errors,
            app_versions: app_versions.clone(),
            idempotency_key: key,
        }
    }

    /// Processes one app event end to end; `force` bypasses the app-level rules.
    pub async fn process(
        &self,
        app: &DynamicObject,
        kind: WatchType,
        force: bool,
        variant: Variant,
    ) -> Outcome {
        let deleted = kind == WatchType::Deleted;
        let namespace = app.metadata.namespace.clone().unwrap_or_default();
        let name = app.metadata.name.clone().unwrap_or_default();
        let key = dedup::app_key(&namespace, &name);
        let fingerprint = AppFingerprint::of(app);
        if variant == Variant::Hardened && memo::hard_refresh(app) {
            // Argo CD regenerates the app's manifests: so does the reporter.
            self.manifests.forget(&format!("{key}|"));
        }
        // Fault point: the lookup fails, as a Redis timeout would; the event goes out anyway.
        let cached = if force || deleted || self.env.buggify(Point::ReporterCacheReadFails) {
            None
        } else {
            self.cache
                .get(&key)
                .await
                .ok()
                .flatten()
                .and_then(|b| AppFingerprint::decode(&b))
        };
        let ignore_resource_cache = match dedup::decide(cached.as_ref(), &fingerprint, kind) {
            AppDecision::Skip if !force => return Outcome::CachedIgnored,
            AppDecision::Skip => false,
            AppDecision::Send {
                ignore_resource_cache,
            } => ignore_resource_cache,
        };
        let timestamp = rfc3339_millis(self.env.unix_millis());
        let status = app.data.get("status").unwrap_or(&Value::Null);
        let reference = AppRef {
            name: name.clone(),
            namespace: namespace.clone(),
            project: text(&app.data, "/spec/project"),
        };
        let mut tally = Tally::default();
        let mut app_json = serde_json::to_value(app).unwrap_or(Value::Null);
        let gathered = match self
            .gather(&reference, &app_json, status, deleted, variant)
            .await
        {
            Ok(g) => g,
            Err(_) => return Outcome::Aborted(tally),
        };
        let rv = app.metadata.resource_version.clone().unwrap_or_default();
        let idempotency = |what: &str| {
            (variant == Variant::Hardened)
                .then(|| format!("{namespace}/{name}@{rv}:{deleted}:{what}"))
        };
        let mut source = app_source(app, status, INSTANCE_LABEL);
        if let Some(meta) = &gathered.commit {
            source.commit_message = text(meta, "/message");
            source.commit_author = text(meta, "/author");
            source.commit_date = text(meta, "/date");
        }
        // `AddCommitsDetailsToAnnotations`: the revisions' metadata rides on the app object.
        if let (Some(meta), Some(metadata)) =
            (&gathered.revisions_metadata, app_json.get_mut("metadata"))
        {
            if !metadata.get("annotations").is_some_and(Value::is_object) {
                metadata["annotations"] = json!({});
            }
            metadata["annotations"][REVISIONS_METADATA] = Value::String(meta.to_string());
        }
        if gathered.details_missing {
            tally.details_missing += 1;
        }
        let being_deleted = deleted || app.metadata.deletion_timestamp.is_some();

        // Step 4: a child app is one "resource" event of its parent; a root app, one app event.
        // A deletion carries no errors (empty manifests and no errors read as "deleted").
        let mut errors = if being_deleted {
            Vec::new()
        } else {
            app_errors(status, &rfc3339(self.env.unix_millis()))
        };
        errors.extend(gathered.errors.iter().cloned());
        let head = if let Some(parent) = parent_of(app) {
            let parent_source = match self.argocd.application(&parent, &namespace).await {
                Ok(p) => {
                    let parent_app: Option<DynamicObject> = serde_json::from_value(p).ok();
                    let parent_ref = AppRef {
                        name: parent.clone(),
                        namespace: namespace.clone(),
                        project: String::new(),
                    };
                    match self.argocd.manifests(&parent_ref, None).await {
                        Err(e) if e.is_deadline() => return Outcome::Aborted(tally),
                        _ => {}
                    }
                    parent_app.map(|p| {
                        let s = p.data.get("status").cloned().unwrap_or(Value::Null);
                        app_source(&p, &s, INSTANCE_LABEL)
                    })
                }
                Err(e) if e.is_deadline() => return Outcome::Aborted(tally),
                Err(_) => None,
            };
            let mut child = parent_source.unwrap_or_else(|| source.clone());
            child.actual_manifest = if being_deleted {
                String::new()
            } else {
                app_json.to_string()
            };
            child.desired_manifest = child.actual_manifest.clone();
            child.git_manifest = child.actual_manifest.clone();
            (
                self.event(
                    child,
                    &app_json,
                    errors,
                    &timestamp,
                    &gathered.app_versions,
                    idempotency("child"),
                ),
                true,
            )
        } else {
            let mut root = source.clone();
            root.actual_manifest = if being_deleted {
                String::new()
            } else {
                app_json.to_string()
            };
            // [inferred] the app event's desired manifest is the app itself as well.
            root.desired_manifest = root.actual_manifest.clone();
            root.git_manifest = root.actual_manifest.clone();
            (
                self.event(
                    root,
                    &app_json,
                    errors,
                    &timestamp,
                    &gathered.app_versions,
                    idempotency("app"),
                ),
                false,
            )
        };
        let (head_event, is_child) = head;
        if !self.deliver(&head_event).await {
            return Outcome::Aborted(tally);
        }
        if is_child {
            tally.child_sent += 1;
        } else {
            tally.app_sent += 1;
        }
        if !head_event.errors.is_empty() {
            tally.payload_errors += 1;
        }

        // Step 6: one event per resource that changed since the last send at this revision.
        let latest = latest_revision(status);
        let resources: Vec<Value> = status["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|r| text(r, "/kind") != "Application")
            .cloned()
            .collect();
        let mut pending = Vec::new();
        for res in resources {
            let res_key = dedup::resource_key(&namespace, &name, &latest, &res);
            let digest = dedup::resource_digest(&res);
            if !ignore_resource_cache && !being_deleted {
                if let Ok(Some(cached)) = self.cache.get(&res_key).await {
                    if cached == digest.as_bytes() {
                        tally.resources_cached += 1;
                        continue;
                    }
                }
            }
            pending.push((res, res_key, digest));
        }
        let mut gathered = gathered;
        if variant == Variant::Hardened && !pending.is_empty() && !being_deleted {
            match self.desired(&reference, &app_json, status).await {
                Ok(manifests) => gathered.manifests = manifests,
                Err(e) if e.is_deadline() => return Outcome::Aborted(tally),
                Err(e) => {
                    gathered.manifests_failed = true;
                    let what = json!({"kind": "Application", "name": name});
                    gathered.desired_errors.push(self.read_error(&e, what));
                }
            }
        }
        let concurrency = match variant {
            Variant::Faithful => 1,
            Variant::Hardened => self.config.resource_concurrency.max(1),
        };
        let results: Vec<Result<bool, ReadError>> = {
            use futures::StreamExt;
            let source = &source;
            let gathered = &gathered;
            let reference = &reference;
            let timestamp = &timestamp;
            futures::stream::iter(pending)
                .map(|(res, res_key, digest)| {
                    let what = format!(
                        "res:{}/{}/{}/{}",
                        text(&res, "/group"),
                        text(&res, "/kind"),
                        text(&res, "/namespace"),
                        text(&res, "/name")
                    );
                    let key = idempotency(&what);
                    async move {
                        let event = self
                            .resource_event(
                                reference,
                                source,
                                gathered,
                                &res,
                                being_deleted,
                                timestamp,
                                key,
                            )
                            .await?;
                        let ok = self.deliver(&event).await;
                        if ok {
                            let _ = self
                                .cache
                                .put(&res_key, Bytes::from(digest), self.config.dedup_ttl)
                                .await;
                        }
                        Ok(ok)
                    }
                })
                .buffered(concurrency)
                .collect()
                .await
        };
        let mut aborted = false;
        for result in results {
            match result {
                Ok(true) => tally.resources_sent += 1,
                Ok(false) => tally.resources_failed += 1,
                Err(_) => {
                    tally.resources_failed += 1;
                    aborted = true;
                }
            }
        }
        if aborted {
            return Outcome::Aborted(tally);
        }
        // Written only after the whole app returned without error. Fault point: the process
        // stops between the acknowledgements and this write.
        // hardened: an app reported without its Git details is not recorded as sent, so its
        // retry is not skipped as unchanged.
        let incomplete = variant == Variant::Hardened && tally.details_missing > 0;
        if !deleted && !incomplete && !self.env.buggify(Point::ReporterAfterSendBeforeCache) {
            let _ = self
                .cache
                .put(
                    &key,
                    Bytes::from(fingerprint.encode()),
                    self.config.dedup_ttl,
                )
                .await;
        }
        Outcome::Done(tally)
    }

    /// One resource's event: desired from the manifests, live from Argo CD (not found →
    /// empty, i.e. deleted), a stub object when both are missing. `Err` only for a deadline.
    #[allow(clippy::too_many_arguments)]
    async fn resource_event(
        &self,
        app: &AppRef,
        source: &Source,
        gathered: &Gathered,
        res: &Value,
        being_deleted: bool,
        timestamp: &str,
        key: Option<String>,
    ) -> Result<EventPayload, ReadError> {
        let mut source = source.clone();
        source.sync_status = text(res, "/status");
        source.health_status = text(res, "/health/status");
        source.health_message = text(res, "/health/message");
        let mut errors = gathered.desired_errors.clone();
        let desired = if being_deleted {
            None
        } else {
            desired_for(&gathered.manifests, res)
        };
        let live = if being_deleted {
            None
        } else {
            match self.argocd.resource(app, res).await {
                Ok(answer) => answer["manifest"]
                    .as_str()
                    .and_then(|m| serde_json::from_str::<Value>(m).ok()),
                Err(ReadError::NotFound { .. }) => None,
                Err(e) if e.is_deadline() => return Err(e),
                Err(e) => {
                    errors.push(self.read_error(&e, res.clone()));
                    None
                }
            }
        };
        if let Some((raw, compiled)) = &desired {
            source.desired_manifest = compiled.to_string();
            source.git_manifest = raw.clone();
        }
        if let Some(live) = &live {
            source.actual_manifest = live.to_string();
        }
        // Pruning: gone from Git and no manifest error → report it deleted (both empty).
        let requires_pruning = res["requiresPruning"].as_bool().unwrap_or(false);
        if requires_pruning && !gathered.manifests_failed {
            source.desired_manifest.clear();
            source.actual_manifest.clear();
        }
        let object = live.or_else(|| desired.map(|(_, d)| d)).unwrap_or_else(|| {
            let group = text(res, "/group");
            let version = text(res, "/version");
            json!({
                "apiVersion": if group.is_empty() { version } else { format!("{group}/{version}") },
                "kind": res["kind"],
                "metadata": {"name": res["name"], "namespace": res["namespace"]},
            })
        });
        Ok(self.event(
            source,
            &object,
            errors,
            timestamp,
            &gathered.app_versions,
            key,
        ))
    }

    /// Delivers one event: up to `delivery_attempts` POSTs, 1–2 s apart (`wait.Backoff`
    /// Steps 5, Duration 1 s, Factor 1, Jitter 1); any non-2xx or transport error is retried.
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
    pub async fn platform_apps(
        &self,
        shard: Option<(&str, &[String])>,
    ) -> Result<std::collections::BTreeMap<String, ReportedApp>, String> {
        // hardened: only the apps `member` owns among `members` (the platform applies the
        // same rendezvous hashing), not the whole runtime's.
        let query = shard
            .map(|(member, members)| {
                format!(
                    "?member={}&members={}",
                    crate::env::http::query_escape(member),
                    crate::env::http::query_escape(&members.join(","))
                )
            })
            .unwrap_or_default();
        let request = Request::get(format!(
            "http://{}/2.0/api/apps{query}",
            self.config.platform_addr
        ))
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_is_the_same_json_as_a_value_tree_of_it() {
        let payload = EventPayload {
            timestamp: "2026-01-01T00:00:00Z".into(),
            object: "e30=".into(),
            source: crate::core::event::Source {
                repo_url: "https://git/x".into(),
                history_id: -3,
                ..Default::default()
            },
            errors: vec![],
            app_versions: json!({"appVersion": "1.2", "dependencies": {"z": 1, "a": [0.5]}}),
            idempotency_key: Some("k".into()),
        };
        let encoded = encode_event(&payload).unwrap();
        let mut json = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&encoded[..]), &mut json)
            .unwrap();
        assert_eq!(
            String::from_utf8(json).unwrap(),
            serde_json::to_string(&json!({"data": payload})).unwrap()
        );
    }

    #[test]
    fn the_reused_deflate_state_gzips_the_same_bytes_as_a_fresh_gz_encoder() {
        use std::io::Write;
        let big: String = (0..20_000)
            .map(|i| format!("{{\"k{i}\":{}}}", i * 7919 % 10007))
            .collect();
        // Twice over, and large inputs between small ones: each call starts from a reset state.
        for data in ["", "x", big.as_str(), "{\"a\":1}", big.as_str(), ""] {
            let mut fresh = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            fresh.write_all(data.as_bytes()).unwrap();
            assert_eq!(
                gzip(data.as_bytes()).unwrap(),
                fresh.finish().unwrap(),
                "{} bytes",
                data.len()
            );
        }
    }

    fn app(labels: Value, annotations: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "child", "namespace": "argocd", "labels": labels, "annotations": annotations},
        }))
        .unwrap()
    }

    #[test]
    fn sync_and_change_revisions_follow_the_operation_as_the_real_utils_do() {
        let op = json!({"status": {
            "sync": {"revision": "s0"},
            "operationState": {"operation": {"sync": {"revision": "s1", "changeRevision": "c1"}}},
        }});
        assert_eq!(sync_revisions(&op), ["s1"]);
        assert_eq!(change_revisions(&op), ["c1"]);
        let pending = json!({"operation": {"sync": {"revisions": ["a", "b"], "changeRevisions": ["c", "d"]}}, "status": {"sync": {"revision": "s0"}}});
        assert_eq!(sync_revisions(&pending), ["a", "b"]);
        assert_eq!(change_revisions(&pending), ["c", "d"]);
        let idle = json!({"status": {"sync": {"revision": "s0"}}});
        assert_eq!(sync_revisions(&idle), ["s0"]);
        assert!(
            change_revisions(&idle).is_empty(),
            "no change revision: none"
        );
        // An operation without a revision: one empty revision, as `getRevisions` gives.
        let head = json!({"status": {"operationState": {"operation": {"sync": {}}}}});
        assert_eq!(sync_revisions(&head), [""]);
        assert!(change_revisions(&head).is_empty());
    }

    #[test]
    fn a_parent_is_named_by_the_instance_label_or_the_tracking_annotation() {
        assert_eq!(
            parent_of(&app(json!({INSTANCE_LABEL: "root"}), json!({}))).as_deref(),
            Some("root")
        );
        assert_eq!(
            parent_of(&app(
                json!({}),
                json!({TRACKING_ANNOTATION: "root:argoproj.io/Application:argocd/child"})
            ))
            .as_deref(),
            Some("root")
        );
        assert_eq!(
            parent_of(&app(json!({INSTANCE_LABEL: "child"}), json!({}))),
            None,
            "itself is no parent"
        );
        assert_eq!(parent_of(&app(json!({}), json!({}))), None);
    }

    #[test]
    fn errors_come_from_conditions_failed_syncs_and_unhealthy_resources() {
        let status = json!({
            "conditions": [{"type": "ComparisonError", "message": "cluster unreachable"},
                           {"type": "SharedResourceWarning", "message": "shared"},
                           {"type": "Info", "message": "ignored"}],
            "operationState": {"phase": "Failed", "message": "sync failed"},
            "resources": [{"kind": "Deployment", "name": "a", "health": {"status": "Degraded"}},
                          {"kind": "Service", "name": "a", "health": {"status": "Healthy"}}],
        });
        let errors = app_errors(&status, "t");
        let summary: Vec<(&str, &str)> = errors
            .iter()
            .map(|e| (e.level.as_str(), e.message.as_str()))
            .collect();
        assert_eq!(
            summary,
            [
                ("error", "cluster unreachable"),
                ("warning", "shared"),
                ("error", "sync failed"),
                ("error", "resource is Degraded")
            ]
        );
    }
}
