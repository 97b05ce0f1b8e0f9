//! The platform's events path: `POST /2.0/api/events` (runtime token → 401, gzip JSON,
//! 5 MB body cap → 413, malformed → 400 with the reason, bus full → 503) → a bounded event
//! bus → the event handler → the [`read_model::ReadModel`]; `GET /2.0/api/apps` queries it.
//! Events whose `data.object` is a Kubernetes object (not base64) of the cluster stream —
//! Rollouts, ReplicaSets, AnalysisRuns, Workflows — go to the [`cluster::ClusterModel`],
//! queried by `GET /2.0/api/rollouts` and `GET /2.0/api/workflows`. Every event is
//! attributed to the runtime of its token, never to what its payload claims, and the
//! queries answer a runtime's token with that runtime's objects only (401 without one).
//!
//! A 2xx answer means *queued*, as in the real platform: the handler projects later. What a
//! crash of the platform keeps of the queue is the [`bus`]'s durability: faithful answers
//! before the broker has the event on disk, hardened waits for its confirm.

pub mod bus;
pub mod cluster;
pub mod object;
pub mod read_model;

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::json;

use crate::core::event::{Envelope, EventPayload};
use crate::core::json::Pointer as _;
use crate::core::secret::TokenDigest;
use crate::env::http::{json, Body};
use crate::env::{Point, SharedEnv};
use crate::observe::PlatformEvent;
use crate::platform::store::StoredEvent;
use crate::platform::store::{Change, Effect, Journal};
use base64::prelude::{Engine as _, BASE64_STANDARD};
use read_model::{AppState, ReadModel};

/// One runtime's listing (the anti-entropy job's, [`crate::platform::anti_entropy`]): the Applications of `namespace` as of `resource_version`.
#[derive(Debug, Default)]
pub struct Listing {
    /// The namespace listed: only an app of it that the listing lacks is gone (the
    /// runtime's reporter may report apps of other namespaces, which this listing does not
    /// cover). Empty: none known, so nothing is taken for gone.
    pub namespace: String,
    /// The listing's `resourceVersion` (every page's snapshot).
    pub resource_version: u64,
    /// Apps the app-proxy left out (the caller's permissions did not cover them): with
    /// any, an app missing from the listing may still exist, so none is taken for gone.
    pub omitted: u64,
    /// Every Application listed, as the app-proxy answered it.
    pub items: Vec<serde_json::Value>,
}

/// Largest accepted (compressed) body by default: 5 MB, as the real gateway (`events.body`).
pub const BODY_LIMIT_BYTES: usize = crate::env::limits::Limits::DEFAULT.events_body;
/// Largest accepted decompressed body by default (a gzip bomb guard,
/// `events.body-decompressed`).
pub const DECOMPRESSED_LIMIT_BYTES: u64 = crate::env::limits::Limits::DEFAULT.events_decompressed;

/// Events-path settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Runtime token → runtime name (preregistered runtimes; the tokens a registry issues
    /// are accepted too once [`Platform::accept_registry_tokens`] names it). The platform
    /// keeps only their digests.
    pub tokens: BTreeMap<String, String>,
    /// Events the bus holds before the API answers 503. Default 10,000.
    pub bus_capacity: usize,
    /// What the bus keeps through a crash, and whether the API waits for it.
    pub durability: bus::Durability,
    /// Whether a resource event whose idempotency key was projected before is ignored
    /// (hardened). A resource event carries no resourceVersion the read model could order
    /// by, so a retried copy that arrives after a newer event would otherwise overwrite it.
    /// faithful projects every copy: the real platform is not known to read the key
    /// (inferred; the key is orrery's extension of the event, sent by hardened reporters).
    pub idempotency_keys: bool,
}

/// Idempotency keys the platform remembers (the oldest forgotten first).
pub const KEY_WINDOW: usize = 100_000;

/// The idempotency keys of projected resource events, per runtime, newest [`KEY_WINDOW`].
#[derive(Default)]
struct Keys {
    order: std::collections::VecDeque<(String, String)>,
    seen: std::collections::BTreeSet<(String, String)>,
}

impl Keys {
    /// Remembers `runtime`'s `key`; false when it was remembered already.
    fn remember(&mut self, runtime: &str, key: &str) -> bool {
        let entry = (runtime.to_string(), key.to_string());
        if self.seen.contains(&entry) {
            return false;
        }
        if self.order.len() >= KEY_WINDOW {
            if let Some(oldest) = self.order.pop_front() {
                self.seen.remove(&oldest);
            }
        }
        self.seen.insert(entry.clone());
        self.order.push_back(entry);
        true
    }
}

/// Knobs a scenario may change while running (a slow platform).
#[derive(Clone, Debug, Default)]
pub struct Knobs {
    /// Added before the events API answers.
    pub api_latency: Duration,
    /// Time the handler spends on each event.
    pub handler_delay: Duration,
    /// An outage of the events API: this share (percent) of `POST /2.0/api/events` is
    /// answered with this status, unread and unstored (a 5xx, a 429 from a rate limiter in
    /// front, a 404 from a misrouted ingress). `None`: every POST is handled.
    pub reject: Option<(StatusCode, u32)>,
}

/// The shared state of the events path.
pub struct Platform {
    /// The settings, without the preregistered tokens (moved into `preregistered`).
    config: Config,
    /// Preregistered runtime tokens' digests → runtime name ([`Config::tokens`], hashed).
    preregistered: BTreeMap<TokenDigest, String>,
    /// The runtime registry whose tokens the events API also accepts (issue 16: one
    /// registry for the events API, the tunnel server and the gateway).
    registry: Mutex<Option<Arc<crate::platform::registry::Registry>>>,
    knobs: Mutex<Knobs>,
    read_model: Mutex<ReadModel>,
    cluster: Mutex<cluster::ClusterModel>,
    /// Idempotency keys of projected resource events.
    keys: Mutex<Keys>,
    /// Each runtime's last heartbeat (milliseconds since the epoch, the environment's
    /// clock), for the runtime monitor.
    heartbeats: Mutex<BTreeMap<String, u64>>,
    /// The queue between the API and the handler; its store outlives the process.
    bus: bus::Bus<Accepted>,
    /// Where accepted events are kept for good (real mode with a database): the read
    /// models are rebuilt from them when a process starts ([`Platform::restore`]).
    journal: std::sync::OnceLock<Arc<Journal>>,
    /// What runtimes sent it and read from it (a metric, like a server's byte counters).
    traffic: Traffic,
}

/// The events API's traffic: what the reporters cost the platform.
#[derive(Debug, Default)]
pub struct Traffic {
    event_posts: std::sync::atomic::AtomicU64,
    event_bytes: std::sync::atomic::AtomicU64,
    reads: std::sync::atomic::AtomicU64,
    read_bytes: std::sync::atomic::AtomicU64,
}

impl Traffic {
    fn add(counter: &std::sync::atomic::AtomicU64, n: usize) {
        counter.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// The counts as named counters: `platform.event_posts`, `platform.event_bytes` (bodies
    /// as they arrived, gzip), `platform.reads` and `platform.read_bytes` (the runtimes'
    /// queries of their own state, answers' bodies); zero counts are left out.
    pub fn counters(&self) -> BTreeMap<String, u64> {
        [
            ("platform.event_posts", &self.event_posts),
            ("platform.event_bytes", &self.event_bytes),
            ("platform.reads", &self.reads),
            ("platform.read_bytes", &self.read_bytes),
        ]
        .into_iter()
        .map(|(name, n)| {
            (
                name.to_string(),
                n.load(std::sync::atomic::Ordering::Relaxed),
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect()
    }
}

impl Platform {
    /// What runtimes sent and read, since the platform was made.
    pub fn traffic(&self) -> &Traffic {
        &self.traffic
    }

    /// A platform with an empty read model.
    pub fn new(mut config: Config) -> Arc<Self> {
        // The preregistered tokens are kept as their digests only (`core::secret`).
        let preregistered = std::mem::take(&mut config.tokens)
            .into_iter()
            .map(|(token, runtime)| (TokenDigest::of(&token), runtime))
            .collect();
        Arc::new(Platform {
            bus: bus::Bus::new(config.bus_capacity, config.durability.clone()),
            config,
            preregistered,
            registry: Mutex::new(None),
            knobs: Mutex::new(Knobs::default()),
            read_model: Mutex::new(ReadModel::default()),
            cluster: Mutex::new(cluster::ClusterModel::default()),
            keys: Mutex::new(Keys::default()),
            traffic: Traffic::default(),
            heartbeats: Mutex::new(BTreeMap::new()),
            journal: std::sync::OnceLock::new(),
        })
    }

    /// Keeps every accepted event from now on in `journal` (once; a second call is
    /// ignored). With a journal, the hardened events API answers 2xx only once the event is
    /// committed; faithful answers once it is on the bus, as without one.
    pub fn keep_in(&self, journal: Arc<Journal>) {
        let _ = self.journal.set(journal);
    }

    /// Rebuilds the read models from the events the store held, oldest first, before the
    /// events path serves (a projection ignores what it already holds, so an event projected
    /// before the process stopped changes nothing). Returns how many were projected; an
    /// event this build cannot decode any more is logged and left in the store.
    pub fn restore(&self, env: &SharedEnv, events: &[StoredEvent]) -> usize {
        let mut projected = 0;
        for stored in events {
            match decode(&stored.runtime, stored.gzip, &stored.body, Inflate::STORED) {
                Ok(mut accepted) => {
                    accepted.stored = Some(stored.id);
                    let (object, effect) = project(env, self, stored.id, &accepted);
                    if !stored.projected {
                        self.projected(stored.id, &stored.runtime, object, effect);
                    }
                    projected += 1;
                }
                Err(rejection) => tracing::warn!(
                    "stored event {} of {} is not readable any more, left in the store: {}",
                    stored.id,
                    stored.runtime,
                    rejection.reason
                ),
            }
        }
        projected
    }

    /// Tells the store an event was projected (so older events of its object can go).
    fn projected(&self, id: u64, runtime: &str, object: String, effect: Effect) {
        if let Some(journal) = self.journal.get() {
            journal.append(Change::Projected {
                id,
                runtime: runtime.to_string(),
                object,
                effect,
            });
        }
    }

    /// Also accepts the tokens `registry` issues: a runtime registered through the gateway
    /// (`POST /api/runtimes`) reports as `<account>-<runtime>`, its tunnel name. The
    /// configured tokens come first.
    pub fn accept_registry_tokens(&self, registry: Arc<crate::platform::registry::Registry>) {
        *self.registry.lock().expect("registry lock poisoned") = Some(registry);
    }

    /// The runtime a token belongs to: a configured token's runtime, else the registry's;
    /// none for a token a registration replaced (a rotated preregistered token included).
    fn runtime_of(&self, token: &str) -> Option<String> {
        let registry = self
            .registry
            .lock()
            .expect("registry lock poisoned")
            .clone();
        if registry.as_ref().is_some_and(|r| r.is_revoked(token)) {
            return None;
        }
        if let Some(runtime) = self.preregistered.get(&TokenDigest::of(token)) {
            return Some(runtime.clone());
        }
        registry?.lookup(token).map(|r| r.tunnel_name())
    }

    /// When each runtime last sent a heartbeat (ms since the epoch), by runtime name; a
    /// runtime that never sent one is absent.
    pub fn heartbeats(&self) -> BTreeMap<String, u64> {
        self.heartbeats
            .lock()
            .expect("heartbeats lock poisoned")
            .clone()
    }

    /// Changes the knobs (fault schedule).
    pub fn set_knobs(&self, knobs: Knobs) {
        *self.knobs.lock().expect("knobs lock poisoned") = knobs;
    }

    /// A copy of the knobs.
    pub fn knobs(&self) -> Knobs {
        self.knobs.lock().expect("knobs lock poisoned").clone()
    }

    /// `runtime`'s apps' reported states (what the query endpoint serves that runtime),
    /// keyed `namespace/name`; `runtime` is `<account>-<runtime>`, its tunnel name (or the
    /// name a preregistered token maps to).
    pub fn apps_of(&self, runtime: &str) -> BTreeMap<String, AppState> {
        self.with_apps_of(runtime, BTreeMap::clone)
    }

    /// Calls `f` with `runtime`'s apps' reported states, without copying the read model
    /// (the harness samples staleness of 10,000 apps every 10 simulated seconds).
    pub fn with_apps_of<T>(
        &self,
        runtime: &str,
        f: impl FnOnce(&BTreeMap<String, AppState>) -> T,
    ) -> T {
        static NONE: BTreeMap<String, AppState> = BTreeMap::new();
        f(self
            .read_model
            .lock()
            .expect("read model lock poisoned")
            .apps_of(runtime)
            .unwrap_or(&NONE))
    }

    /// `runtime`'s resources' reported states (`<app ns>/<app>/<group>/<kind>/<ns>/<name>`).
    pub fn resources_of(&self, runtime: &str) -> BTreeMap<String, read_model::ResourceState> {
        self.read_model
            .lock()
            .expect("read model lock poisoned")
            .resources_of(runtime)
            .cloned()
            .unwrap_or_default()
    }

    /// Puts `state` straight into `runtime`'s read model as app `key` (`namespace/name`),
    /// as a projected event would (fixtures and tests of what reads the model).
    pub fn put_app(&self, runtime: &str, key: &str, state: AppState) -> read_model::Applied {
        self.read_model
            .lock()
            .expect("read model lock poisoned")
            .apply(runtime, key, state)
    }

    /// Puts a resource's state straight into `runtime`'s read model (fixtures and tests;
    /// `key` is `<app ns>/<app>/<group>/<kind>/<ns>/<name>`).
    pub fn put_resource(&self, runtime: &str, key: &str, state: read_model::ResourceState) {
        self.read_model
            .lock()
            .expect("read model lock poisoned")
            .apply_resource(runtime, key, state);
    }

    /// Puts a cluster-stream object (a Rollout, ReplicaSet, AnalysisRun or Workflow) of
    /// `runtime` straight into its read model, as a projected event would (fixtures and
    /// tests).
    pub fn put_cluster(
        &self,
        runtime: &str,
        object: &serde_json::Value,
    ) -> Result<read_model::Applied, cluster::Invalid> {
        let event = cluster::ClusterEvent::read(object, None)?;
        Ok(self
            .cluster
            .lock()
            .expect("cluster lock poisoned")
            .apply(runtime, event))
    }

    /// Events the read model received: application events (updates, duplicates and stale
    /// ones) and resource events.
    pub fn events_received(&self) -> u64 {
        let model = self.read_model.lock().expect("read model lock poisoned");
        model.updated + model.duplicates + model.stale + model.resource_events
    }

    /// Every reported Rollout (`runtime/namespace/name`) with its ReplicaSets and runs.
    pub fn rollouts(&self) -> BTreeMap<String, cluster::RolloutView> {
        self.cluster
            .lock()
            .expect("cluster lock poisoned")
            .rollouts()
    }

    /// Every reported Workflow (`runtime/namespace/name`).
    pub fn workflows(&self) -> BTreeMap<String, cluster::WorkflowView> {
        self.cluster
            .lock()
            .expect("cluster lock poisoned")
            .workflows()
    }

    /// The anti-entropy job's repairs for `runtime` from a listing of its Applications
    /// ([`crate::platform::anti_entropy`]): each app the read model holds at an older
    /// `resourceVersion` than listed (or not at all) is sent as listed, and each app of the
    /// listed namespace it shows but the listing lacks, held at an older `resourceVersion`
    /// than the listing's, is sent as deleted at the listing's — as events on the bus, reporter-shaped,
    /// projected and journaled like any. Stops at a full bus (the next pass goes on).
    pub fn reconcile(&self, env: &SharedEnv, runtime: &str, listing: &Listing) -> Reconciled {
        let timestamp = crate::core::time::rfc3339(env.unix_millis());
        let mut events: Vec<(Vec<u8>, bool)> = Vec::new();
        self.with_apps_of(runtime, |shown| {
            let mut listed = std::collections::BTreeSet::new();
            for item in &listing.items {
                let text = |p: &str| item.at(p).and_then(|v| v.as_str()).unwrap_or("");
                let (namespace, name) = (text("/metadata/namespace"), text("/metadata/name"));
                let key = format!("{namespace}/{name}");
                let rv: u64 = text("/metadata/resourceVersion").parse().unwrap_or(0);
                listed.insert(key.clone());
                // Shown deleted at a version older than the listing, yet listed: the
                // deletion was wrong (a listing that could not see the app); the app is
                // sent again as of the listing's version, which orders after it.
                let wrongly_deleted = shown.get(&key).is_some_and(|s| {
                    s.deleted
                        && s.resource_version < listing.resource_version
                        && s.resource_version >= rv
                });
                let current = !wrongly_deleted
                    && shown.get(&key).is_some_and(|s| {
                        s.resource_version >= rv
                            || (!s.deleted
                                && s.sync_status == text("/status/sync/status")
                                && s.revision == text("/status/sync/revision")
                                && s.health_status == text("/status/health/status")
                                && s.destination_namespace == text("/spec/destination/namespace"))
                    });
                if name.is_empty() || current {
                    continue;
                }
                // What it is, whatever the listing said (a resource event otherwise).
                let mut app = item.clone();
                app["apiVersion"] = json!("argoproj.io/v1alpha1");
                app["kind"] = json!("Application");
                if wrongly_deleted {
                    app["metadata"]["resourceVersion"] =
                        json!(listing.resource_version.to_string());
                }
                events.push((anti_entropy_event(&app, &timestamp, runtime, false), false));
            }
            for (key, state) in shown {
                if listing.omitted > 0
                    || state.deleted
                    || listed.contains(key)
                    || state.resource_version >= listing.resource_version
                {
                    continue;
                }
                let Some((namespace, name)) = key.split_once('/') else {
                    continue;
                };
                // Only the listed namespace's apps are known gone.
                if namespace != listing.namespace {
                    continue;
                }
                let gone = json!({
                    "apiVersion": "argoproj.io/v1alpha1",
                    "kind": "Application",
                    "metadata": {
                        "name": name,
                        "namespace": namespace,
                        "resourceVersion": listing.resource_version.to_string(),
                    },
                });
                events.push((anti_entropy_event(&gone, &timestamp, runtime, true), true));
            }
        });
        let mut done = Reconciled::default();
        for (body, deletion) in events {
            let accepted = match decode(runtime, false, &body, Inflate::STORED) {
                Ok(accepted) => accepted,
                Err(rejection) => {
                    done.error = format!("a listed app is not an event: {}", rejection.reason);
                    continue;
                }
            };
            if self.enqueue(accepted, Bytes::from(body), false).is_err() {
                done.error = "the event bus is full; the next pass goes on".into();
                break;
            }
            if deletion {
                done.tombstoned += 1;
            } else {
                done.updated += 1;
            }
        }
        done
    }

    /// Puts an accepted event (its body as it arrived) on the bus and, with a store, in
    /// its journal (no await between the two: on the single-threaded runtime `orrery serve`
    /// runs, the journal gets the events in the bus's order).
    fn enqueue(&self, mut event: Accepted, body: Bytes, gzip: bool) -> Result<u64, bus::Full> {
        let journal = self.journal.get();
        let stored = journal.map(|journal| {
            let id = journal.next_event_id();
            event.stored = Some(id);
            Change::Event {
                id,
                runtime: event.runtime.clone(),
                gzip,
                body,
            }
        });
        let seq = self.bus.publish(event)?;
        if let (Some(journal), Some(change)) = (journal, stored) {
            journal.append(change);
        }
        Ok(seq)
    }

    /// The platform's host crashed: its bus keeps what it flushed (see [`bus`]). The
    /// simulator calls it when it crashes the host; a real process starts with a new bus.
    pub fn crash(&self) {
        self.bus.crash();
    }

    /// (updated, duplicates, stale) counts of the projection.
    pub fn projection_counts(&self) -> (u64, u64, u64) {
        let model = self.read_model.lock().expect("read model lock poisoned");
        (model.updated, model.duplicates, model.stale)
    }
}

/// What [`Platform::reconcile`] sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reconciled {
    /// Apps sent as listed.
    pub updated: u64,
    /// Apps sent as deleted.
    pub tombstoned: u64,
    /// Why it stopped short (empty: it did not).
    pub error: String,
}

/// The anti-entropy job's event for `object` (an Application as listed, or a deleted one's
/// name and the listing's `resourceVersion`): the shape a reporter's application event has
/// (the app itself as its manifests; none for a deletion), with an idempotency key naming
/// the job.
fn anti_entropy_event(
    object: &serde_json::Value,
    timestamp: &str,
    runtime: &str,
    deleted: bool,
) -> Vec<u8> {
    let text = |p: &str| {
        object
            .at(p)
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_string()
    };
    let manifest = if deleted {
        String::new()
    } else {
        object.to_string()
    };
    let labels = object
        .at("/metadata/labels")
        .and_then(|l| serde_json::from_value(l.clone()).ok())
        .unwrap_or_default();
    let payload = EventPayload {
        timestamp: timestamp.to_string(),
        object: BASE64_STANDARD.encode(object.to_string().as_bytes()),
        source: crate::core::event::Source {
            desired_manifest: manifest.clone(),
            actual_manifest: manifest.clone(),
            git_manifest: manifest,
            repo_url: text("/spec/source/repoURL"),
            path: text("/spec/source/path"),
            revision: text("/status/sync/revision"),
            app_name: text("/metadata/name"),
            app_namespace: text("/metadata/namespace"),
            app_uid: text("/metadata/uid"),
            app_labels: labels,
            sync_status: text("/status/sync/status"),
            health_status: text("/status/health/status"),
            cluster: text("/spec/destination/server"),
            ..Default::default()
        },
        errors: Vec::new(),
        app_versions: serde_json::Value::Null,
        idempotency_key: Some(format!(
            "anti-entropy/{runtime}/{}/{}/{}",
            text("/metadata/namespace"),
            text("/metadata/name"),
            text("/metadata/resourceVersion")
        )),
    };
    serde_json::to_vec(&Envelope { data: payload }).unwrap_or_default()
}

/// A rejected request: status and reason.
#[derive(Debug, thiserror::Error)]
#[error("{status}: {reason}")]
pub struct Rejection {
    /// HTTP status.
    pub status: StatusCode,
    /// Why, for the caller.
    pub reason: String,
}

fn reject(status: StatusCode, reason: impl Into<String>) -> Rejection {
    Rejection {
        status,
        reason: reason.into(),
    }
}

/// An event accepted onto the bus.
struct Accepted {
    runtime: String,
    event: Kind,
    /// Its id in the store, when there is one.
    stored: Option<u64>,
}

impl Accepted {
    /// `namespace/name` of the event's object (what an acknowledgement names).
    fn object_name(&self) -> String {
        match &self.event {
            Kind::App { object, .. } => format!(
                "{}/{}",
                object.metadata.0.namespace.as_str(),
                object.metadata.0.name.as_str()
            ),
            Kind::Cluster(event) => format!("{}/{}", event.namespace, event.name),
        }
    }
}

/// What an accepted event carries. (Application events are the common case: boxing them
/// would add an allocation per event for the rarer, smaller variant's sake.)
#[allow(clippy::large_enum_variant)]
enum Kind {
    /// An application reporter's event (`EventPayload`, object in base64).
    App {
        payload: EventPayload,
        object: object::ObjectView,
    },
    /// A cluster-stream object (the Sensor's `data.object`).
    Cluster(cluster::ClusterEvent),
}

/// The cluster stream's envelope: the Kubernetes object at `data.object` — as JSON text,
/// which is what the Argo Events Sensor's HTTP trigger sends (`payload: [{src: {dataKey:
/// body}, dest: data.object}]` without `useRawData` sets a string), or inline — with the
/// watch event `type` beside it when the sender adds one (the Sensor does not).
#[derive(serde::Deserialize)]
struct ClusterEnvelope {
    data: ClusterData,
}

#[derive(serde::Deserialize)]
struct ClusterData {
    object: ClusterObject,
    #[serde(default, rename = "type")]
    event_type: Option<String>,
    /// Present only in application events: a body with it is an application event that
    /// failed to parse, and gets that reason.
    #[serde(default)]
    timestamp: Option<serde_json::Value>,
    #[serde(default)]
    source: Option<serde_json::Value>,
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum ClusterObject {
    Inline(serde_json::Map<String, serde_json::Value>),
    Text(String),
}

/// A gzip decoder reading from a buffer it owns (reused from body to body).
type Gunzip = flate2::bufread::GzDecoder<std::io::Cursor<Vec<u8>>>;

thread_local! {
    /// One gzip decoder per thread, reset for each body (with the buffer it reads from): a
    /// fresh decoder allocates zlib's inflate state and 32 KiB window for every event, and
    /// that allocation (fresh pages each time) cost more than inflating the event.
    static GUNZIP: std::cell::RefCell<Option<Gunzip>> = const { std::cell::RefCell::new(None) };
}

/// Inflates the gzip `body` into `text`, at most `most + 1` bytes of it (as
/// `GzDecoder::new(body)` would: same checks, same errors).
fn gunzip(body: &[u8], most: u64, text: &mut Vec<u8>) -> std::io::Result<usize> {
    use std::io::Cursor;
    GUNZIP.with_borrow_mut(|slot| {
        let decoder = match slot {
            Some(decoder) => {
                let mut input = std::mem::take(decoder.get_mut().get_mut());
                input.clear();
                input.extend_from_slice(body);
                decoder.reset(Cursor::new(input));
                decoder
            }
            None => slot.insert(flate2::bufread::GzDecoder::new(Cursor::new(body.to_vec()))),
        };
        decoder
            .by_ref()
            .take(most.saturating_add(1))
            .read_to_end(text)
    })
}

/// How far a gzip body may inflate: what [`decode`] holds a client's body to.
#[derive(Clone, Copy, Debug)]
struct Inflate {
    /// Largest text (`events.body-decompressed`).
    most: u64,
    /// Most times its compressed size, past [`GZIP_RATIO_FLOOR`] (`events.gzip-ratio`).
    ratio: u64,
}

use crate::env::limits::GZIP_RATIO_FLOOR;

impl Inflate {
    /// A body that was accepted once (the journal's): no bound.
    const STORED: Inflate = Inflate {
        most: u64::MAX,
        ratio: u64::MAX,
    };

    fn of(limits: &crate::env::limits::Limits) -> Self {
        Inflate {
            most: limits.events_decompressed,
            ratio: limits.gzip_ratio,
        }
    }

    /// The most `compressed` bytes may inflate to, and the limit that says so.
    fn bound(self, compressed: usize) -> (u64, &'static str) {
        let by_ratio = self
            .ratio
            .saturating_mul(compressed as u64)
            .max(GZIP_RATIO_FLOOR);
        if by_ratio < self.most {
            (by_ratio, "events.gzip-ratio")
        } else {
            (self.most, "events.body-decompressed")
        }
    }
}

/// Decodes and validates one `POST /2.0/api/events` body.
fn decode(runtime: &str, gzip: bool, body: &[u8], inflate: Inflate) -> Result<Accepted, Rejection> {
    let json = if gzip {
        let (most, limit) = inflate.bound(body.len());
        // Sized by the gzip trailer's ISIZE (the length mod 2^32: a hint only, bounded by
        // deflate's best ratio and 4 MiB so a lying trailer cannot reserve much), so the
        // text is not copied as it grows.
        let hint = body
            .len()
            .checked_sub(4)
            .and_then(|at| body.get(at..))
            .and_then(|tail| <[u8; 4]>::try_from(tail).ok())
            .map_or(0, |tail| u64::from(u32::from_le_bytes(tail)));
        let hint = hint.min(body.len() as u64 * 1032).min(4 << 20);
        let mut text = Vec::with_capacity(hint as usize + 1);
        gunzip(body, most, &mut text).map_err(|e| {
            reject(
                StatusCode::BAD_REQUEST,
                format!("body is not valid gzip: {e}"),
            )
        })?;
        if text.len() as u64 > most {
            let why = match limit {
                "events.gzip-ratio" => format!(
                    "decompressed body exceeds {most} bytes, {} times its {} compressed bytes ({limit})",
                    inflate.ratio,
                    body.len()
                ),
                _ => format!("decompressed body exceeds {most} bytes ({limit})"),
            };
            return Err(reject(StatusCode::PAYLOAD_TOO_LARGE, why));
        }
        text
    } else {
        body.to_vec()
    };
    let envelope: Envelope = match serde_json::from_slice(&json) {
        Ok(envelope) => envelope,
        Err(e) => {
            // Not an application event: a cluster-stream object, or malformed (the
            // application envelope's reason is the one reported).
            let cluster = serde_json::from_slice::<ClusterEnvelope>(&json)
                .ok()
                .filter(|c| c.data.timestamp.is_none() && c.data.source.is_none());
            let Some(cluster) = cluster else {
                return Err(reject(
                    StatusCode::BAD_REQUEST,
                    format!("invalid event envelope: {e}"),
                ));
            };
            let object = match cluster.data.object {
                ClusterObject::Inline(map) => serde_json::Value::Object(map),
                ClusterObject::Text(text) => match serde_json::from_str(&text) {
                    Ok(object @ serde_json::Value::Object(_)) => object,
                    // Base64 or other text: the application envelope's reason stands.
                    _ => {
                        return Err(reject(
                            StatusCode::BAD_REQUEST,
                            format!("invalid event envelope: {e}"),
                        ))
                    }
                },
            };
            let event = cluster::ClusterEvent::read(&object, cluster.data.event_type.as_deref())
                .map_err(|e| reject(StatusCode::BAD_REQUEST, e.to_string()))?;
            return Ok(Accepted {
                runtime: runtime.to_string(),
                event: Kind::Cluster(event),
                stored: None,
            });
        }
    };
    let object_json = BASE64_STANDARD
        .decode(&envelope.data.object)
        .map_err(|e| reject(StatusCode::BAD_REQUEST, format!("data.object: {e}")))?;
    let object::Lenient(object): object::Lenient<object::ObjectView> =
        serde_json::from_slice(&object_json).map_err(|e| {
            reject(
                StatusCode::BAD_REQUEST,
                format!("data.object is not JSON: {e}"),
            )
        })?;
    if object.metadata.0.name.0.is_none() {
        return Err(reject(
            StatusCode::BAD_REQUEST,
            "data.object has no metadata.name",
        ));
    }
    Ok(Accepted {
        runtime: runtime.to_string(),
        event: Kind::App {
            payload: envelope.data,
            object,
        },
        stored: None,
    })
}

/// An application event, unpacked.
struct AppEvent<'a> {
    runtime: &'a str,
    payload: &'a EventPayload,
    object: &'a object::ObjectView,
}

/// Projects one accepted event into the read model: an event whose object is an
/// Application updates that app (its state read from the object: a child-app event's
/// `source` describes the parent); any other object is one resource of `source.appName`.
/// Returns what the event is about (`app:<ns>/<name>`, `resource:<key>`,
/// `<Kind>:<ns>/<name>`) and what projecting it did, for the store.
fn project(
    env: &SharedEnv,
    platform: &Platform,
    seq: u64,
    accepted: &Accepted,
) -> (String, Effect) {
    let (payload, object) = match &accepted.event {
        Kind::App { payload, object } => (payload, object),
        Kind::Cluster(event) => {
            let (kind, name, rv, deleted) = (
                format!("{:?}", event.kind),
                format!("{}/{}", event.namespace, event.name),
                event.resource_version.to_string(),
                event.deleted,
            );
            let applied = platform
                .cluster
                .lock()
                .expect("cluster lock poisoned")
                .apply(&accepted.runtime, event.clone());
            let object = format!("{kind}:{name}");
            env.observe(
                PlatformEvent::ClusterEvent {
                    kind,
                    object: name,
                    rv,
                    deleted,
                    applied,
                    seq,
                }
                .into(),
            );
            // A deletion keeps the held version and fields (see `ClusterModel::apply`): the
            // events before it are still needed.
            let effect = match applied {
                read_model::Applied::Updated if !deleted => Effect::Supersedes,
                read_model::Applied::Updated | read_model::Applied::Duplicate => Effect::InPlace,
                read_model::Applied::Stale => Effect::NoOp,
            };
            return (object, effect);
        }
    };
    let event = AppEvent {
        runtime: &accepted.runtime,
        payload,
        object,
    };
    let source = &event.payload.source;
    let object = event.object;
    let metadata = &object.metadata.0;
    let kind = object.kind.as_str();
    let is_app = kind == "Application" || (kind.is_empty() && source.app_name.is_empty());
    if !is_app {
        let group = object
            .api_version
            .as_str()
            .rsplit_once('/')
            .map(|(g, _)| g)
            .unwrap_or("");
        let key = format!(
            "{}/{}/{group}/{kind}/{}/{}",
            source.app_namespace,
            source.app_name,
            metadata.namespace.as_str(),
            metadata.name.as_str()
        );
        if let Some(idempotency) = event
            .payload
            .idempotency_key
            .as_deref()
            .filter(|_| platform.config.idempotency_keys)
        {
            let fresh = platform
                .keys
                .lock()
                .expect("keys lock poisoned")
                .remember(event.runtime, idempotency);
            if !fresh {
                let object = format!("resource:{key}");
                env.observe(
                    PlatformEvent::DuplicateKey {
                        resource: key,
                        key: idempotency.to_string(),
                        seq,
                    }
                    .into(),
                );
                return (object, Effect::NoOp);
            }
        }
        platform
            .read_model
            .lock()
            .expect("read model lock poisoned")
            .apply_resource(
                event.runtime,
                &key,
                read_model::ResourceState {
                    sync_status: source.sync_status.clone(),
                    health_status: source.health_status.clone(),
                    deleted: event.payload.is_deletion(),
                    revision: source.revision.clone(),
                },
            );
        let object = format!("resource:{key}");
        env.observe(
            PlatformEvent::ResourceEvent {
                resource: key,
                seq,
                history_id: source.history_id,
            }
            .into(),
        );
        return (object, Effect::Supersedes);
    }
    let name = metadata.name.as_str();
    let namespace = metadata.namespace.as_str();
    let rv = metadata.resource_version.as_str().parse().unwrap_or(0);
    let status = &object.status.0;
    let state = AppState {
        resource_version: rv,
        deleted: event.payload.is_deletion(),
        sync_status: status.sync.0.status.as_str().to_string(),
        revision: status.sync.0.revision.as_str().to_string(),
        health_status: status.health.0.status.as_str().to_string(),
        runtime: event.runtime.to_string(),
        read_errors: event
            .payload
            .errors
            .iter()
            .filter(|e| e.kind == "transient")
            .count() as u32,
        app_version: event
            .payload
            .app_versions
            .get("appVersion")
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_string(),
        change_revision: status
            .operation_state
            .0
            .operation
            .0
            .sync
            .0
            .change_revision
            .as_str()
            .to_string(),
        change_commits: read_model::CommitShown::change_revisions(
            metadata.annotations.0.revisions_metadata.as_str(),
        ),
        labels: metadata.labels.0 .0.clone(),
        destination_cluster: {
            let destination = &object.spec.0.destination.0;
            match destination.server.as_str() {
                "" => destination.name.as_str(),
                server => server,
            }
            .to_string()
        },
        destination_namespace: object.spec.0.destination.0.namespace.as_str().to_string(),
    };
    let key = format!("{namespace}/{name}");
    let applied = platform
        .read_model
        .lock()
        .expect("read model lock poisoned")
        .apply(event.runtime, &key, state);
    env.observe(
        PlatformEvent::Event {
            app: name.to_string(),
            rv: rv.to_string(),
            deleted: event.payload.is_deletion(),
            applied,
            seq,
        }
        .into(),
    );
    // A repeat of the held state refreshes its errors and Git details in place.
    let effect = match applied {
        read_model::Applied::Updated => Effect::Supersedes,
        read_model::Applied::Duplicate => Effect::InPlace,
        read_model::Applied::Stale => Effect::NoOp,
    };
    (format!("app:{key}"), effect)
}

async fn handle(env: SharedEnv, platform: Arc<Platform>, req: Request<Incoming>) -> Response<Body> {
    let knobs = platform.knobs();
    if !knobs.api_latency.is_zero() {
        env.sleep(knobs.api_latency).await;
    }
    if env.buggify(Point::PlatformEventsSlow) {
        let pause = env.random_between(Duration::from_secs(1), Duration::from_secs(5));
        env.sleep(pause).await;
    }
    if req.method() == http::Method::POST && req.uri().path() == "/2.0/api/events" {
        Traffic::add(&platform.traffic.event_posts, 1);
    }
    match (req.method().as_str(), req.uri().path()) {
        ("GET", "/healthz") => json(StatusCode::OK, &json!({"status": "ok"})),
        // The queries answer the runtime whose token they carry with its own objects (what
        // its reporter resyncs against), and nobody else with anything.
        ("GET", "/2.0/api/apps" | "/2.0/api/rollouts" | "/2.0/api/workflows") => {
            let Some(runtime) = caller(&platform, &req) else {
                return refused(&env, unauthorised());
            };
            Traffic::add(&platform.traffic.reads, 1);
            match req.uri().path() {
                // Serialised in place under the lock: no copy of 10,000 states per read.
                "/2.0/api/apps" => {
                    let shard = Shard::of(&req);
                    let body = platform.with_apps_of(&runtime, |apps| match &shard {
                        None => serde_json::to_vec(apps).unwrap_or_default(),
                        Some(shard) => serde_json::to_vec(
                            &apps
                                .iter()
                                .filter(|(key, _)| shard.owns(key))
                                .collect::<BTreeMap<_, _>>(),
                        )
                        .unwrap_or_default(),
                    });
                    Traffic::add(&platform.traffic.read_bytes, body.len());
                    Response::builder()
                        .status(StatusCode::OK)
                        .header("content-type", "application/json")
                        .body(crate::env::http::full(body))
                        .expect("static response parts are valid")
                }
                "/2.0/api/rollouts" => json(
                    StatusCode::OK,
                    &serde_json::to_value(own(&runtime, platform.rollouts())).unwrap_or_default(),
                ),
                _ => json(
                    StatusCode::OK,
                    &serde_json::to_value(own(&runtime, platform.workflows())).unwrap_or_default(),
                ),
            }
        }
        ("POST", crate::runtime::heartbeat::PATH) => {
            let Some(runtime) = caller(&platform, &req) else {
                return refused(&env, unauthorised());
            };
            platform
                .heartbeats
                .lock()
                .expect("heartbeats lock poisoned")
                .insert(runtime.clone(), env.unix_millis());
            env.observe(PlatformEvent::Heartbeat { runtime }.into());
            json(StatusCode::OK, &json!({"status": "ok"}))
        }
        ("POST", "/2.0/api/events")
            if knobs
                .reject
                .is_some_and(|(_, percent)| env.random_u64() % 100 < u64::from(percent)) =>
        {
            let status = knobs
                .reject
                .map_or(StatusCode::SERVICE_UNAVAILABLE, |(s, _)| s);
            json(status, &json!({"error": "the events API is unavailable"}))
        }
        ("POST", "/2.0/api/events") => match accept(env.limits(), &platform, req).await {
            Ok((event, (body, gzip))) => {
                let object = event.object_name();
                match platform.enqueue(event, body, gzip) {
                    // Fault point: queued, then the handler fails before it answers.
                    Ok(_) if env.buggify(Point::PlatformEventsCrashAfterStore) => json(
                        StatusCode::SERVICE_UNAVAILABLE,
                        &json!({"error": "handler failed after queueing the event"}),
                    ),
                    Ok(seq) => {
                        if platform.bus.durability().confirms {
                            platform.bus.confirm(seq).await;
                            if let Some(Err(unavailable)) = match platform.journal.get() {
                                Some(journal) => Some(journal.sync().await),
                                None => None,
                            } {
                                return json(
                                    StatusCode::SERVICE_UNAVAILABLE,
                                    &json!({"error": unavailable.to_string()}),
                                );
                            }
                        }
                        platform.bus.acknowledged(seq);
                        env.observe(PlatformEvent::Acknowledged { seq, object }.into());
                        json(StatusCode::OK, &json!({"status": "queued"}))
                    }
                    Err(_) => json(
                        StatusCode::SERVICE_UNAVAILABLE,
                        &json!({"error": "event bus is full, retry later"}),
                    ),
                }
            }
            Err(rejection) => refused(&env, rejection),
        },
        (method, path) => json(
            StatusCode::NOT_FOUND,
            &json!({"error": format!("no route for {method} {path}")}),
        ),
    }
}

/// `GET /2.0/api/apps?member=M&members=A,B,…`: a hardened reporter replica asks for the apps
/// it owns (rendezvous hashing of the app's name over the members, as it shards), not the
/// whole runtime's — a fifth of the bytes with five replicas.
struct Shard {
    member: String,
    members: Vec<String>,
}

impl Shard {
    /// The shard a query names (none without both parameters: the whole runtime).
    fn of(req: &Request<Incoming>) -> Option<Shard> {
        let query = crate::env::http::query(req.uri());
        let member = query.get("member")?.clone();
        let members = query
            .get("members")?
            .split(',')
            .filter(|m| !m.is_empty())
            .map(str::to_string)
            .collect();
        Some(Shard { member, members })
    }

    /// Whether the app keyed `namespace/name` is the member's.
    fn owns(&self, key: &str) -> bool {
        let name = key.split_once('/').map_or(key, |(_, name)| name);
        crate::runtime::app_reporter::shard::rendezvous_owner(name, &self.members)
            == Some(self.member.as_str())
    }
}

/// The 401 for a request without a runtime token the platform accepts.
fn unauthorised() -> Rejection {
    reject(StatusCode::UNAUTHORIZED, "missing or unknown runtime token")
}

/// Answers a refused request with its reason, observed as `platform.rejected`.
fn refused(env: &SharedEnv, rejection: Rejection) -> Response<Body> {
    env.observe(
        PlatformEvent::Rejected {
            status: rejection.status.as_u16(),
            reason: rejection.reason.clone(),
        }
        .into(),
    );
    json(rejection.status, &json!({"error": rejection.reason}))
}

/// The runtime whose token `req` carries (none without one, or for one the platform does
/// not know or a registration replaced).
fn caller(platform: &Platform, req: &Request<Incoming>) -> Option<String> {
    let token = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())?;
    platform.runtime_of(token)
}

/// The entries of `views` (keyed `runtime/namespace/name`) of `runtime`.
fn own<V>(runtime: &str, views: BTreeMap<String, V>) -> BTreeMap<String, V> {
    let prefix = format!("{runtime}/");
    views
        .into_iter()
        .filter(|(key, _)| key.starts_with(&prefix))
        .collect()
}

/// The event a request carries, with its body as it arrived and whether that is gzip.
async fn accept(
    limits: &crate::env::limits::Limits,
    platform: &Platform,
    req: Request<Incoming>,
) -> Result<(Accepted, (Bytes, bool)), Rejection> {
    let Some(runtime) = caller(platform, &req) else {
        return Err(unauthorised());
    };
    let gzip = req
        .headers()
        .get("content-encoding")
        .and_then(|v| v.to_str().ok())
        == Some("gzip");
    let body: Bytes = crate::env::http::read_body(req.into_body(), limits.events_body)
        .await
        .map_err(|e| reject(e.status(), e.to_string()))?;
    Traffic::add(&platform.traffic.event_bytes, body.len());
    Ok((
        decode(&runtime, gzip, &body, Inflate::of(limits))?,
        (body, gzip),
    ))
}

/// Ends a service's tasks with it (the events path's, the Runner API's ticker).
pub(crate) struct AbortOnDrop<const N: usize>(pub(crate) [tokio::task::JoinHandle<()>; N]);

impl<const N: usize> Drop for AbortOnDrop<N> {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Runs the events path on `addr` until its listener fails: the API, the bus's flusher and
/// the event handler.
pub async fn run(env: SharedEnv, platform: Arc<Platform>, addr: &str) -> std::io::Result<()> {
    let listener = env.listen(addr).await?;
    serve(env, platform, listener).await
}

/// Runs the events path on an already bound listener (real mode binds port 0 first).
pub async fn serve(
    env: SharedEnv,
    platform: Arc<Platform>,
    listener: Box<dyn crate::env::Listener>,
) -> std::io::Result<()> {
    // A restart after a crash finds the bus as its disk left it.
    if let Some(recovery) = platform.bus.take_recovery() {
        env.observe(
            PlatformEvent::BusRecovered {
                lost: recovery.lost,
                lost_acknowledged: recovery.lost_acknowledged,
                redelivered: recovery.redelivered,
                kept: recovery.kept,
            }
            .into(),
        );
    }
    let (flusher_env, flusher_platform) = (env.clone(), platform.clone());
    let flusher = tokio::spawn(async move {
        let bus = &flusher_platform.bus;
        loop {
            bus.wait_unflushed().await;
            flusher_env.sleep(bus.durability().flush_after).await;
            bus.flush();
        }
    });
    let (handler_env, handler_platform) = (env.clone(), platform.clone());
    let handler = tokio::spawn(async move {
        loop {
            let (seq, event) = handler_platform.bus.take().await;
            let delay = handler_platform.knobs().handler_delay;
            if !delay.is_zero() {
                handler_env.sleep(delay).await;
            }
            let (object, effect) = project(&handler_env, &handler_platform, seq, &event);
            if let Some(id) = event.stored {
                handler_platform.projected(id, &event.runtime, object, effect);
            }
            handler_platform.bus.ack(seq);
        }
    });
    // The handler and the flusher serve as long as the API does (a second `serve` of the
    // same platform gets one handler).
    let _tasks = AbortOnDrop([flusher, handler]);
    let limits = env.limits().clone();
    crate::env::http::serve_limited(listener, &limits, move |req, _peer| {
        handle(env.clone(), platform.clone(), req)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::event::Source;
    use serde_json::Value;
    use std::io::Write;

    fn payload(object: &Value) -> Vec<u8> {
        let payload = EventPayload {
            timestamp: "t".into(),
            object: BASE64_STANDARD.encode(object.to_string().as_bytes()),
            source: Source {
                sync_status: "Synced".into(),
                desired_manifest: "m".into(),
                ..Source::default()
            },
            errors: vec![],
            app_versions: Value::Null,
            idempotency_key: None,
        };
        serde_json::to_vec(&json!({"data": payload})).unwrap()
    }

    const DEFAULT_INFLATE: Inflate = Inflate {
        most: DECOMPRESSED_LIMIT_BYTES,
        ratio: crate::env::limits::Limits::DEFAULT.gzip_ratio,
    };

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    /// The thread's reused decoder gives what a fresh `GzDecoder` gives for every body, a
    /// failed one before it included.
    #[test]
    fn the_reused_gzip_decoder_inflates_as_a_fresh_one_after_any_body() {
        let text = payload(&json!({"metadata": {"name": "a", "namespace": "argocd"}}));
        let good = gzip(&text);
        let mut bad_crc = good.clone();
        let crc_at = bad_crc.len() - 8;
        bad_crc[crc_at] ^= 1;
        let bodies: Vec<Vec<u8>> = vec![
            good.clone(),
            b"plain".to_vec(),
            good[..good.len() / 2].to_vec(),
            bad_crc,
            vec![],
            good.clone(),
            gzip(b""),
            good,
        ];
        for body in bodies {
            let mut fresh = Vec::new();
            let expected = flate2::bufread::GzDecoder::new(&body[..])
                .take(DECOMPRESSED_LIMIT_BYTES + 1)
                .read_to_end(&mut fresh)
                .map_err(|e| e.to_string());
            let mut reused = Vec::new();
            let got =
                gunzip(&body, DECOMPRESSED_LIMIT_BYTES, &mut reused).map_err(|e| e.to_string());
            assert_eq!(got, expected, "{body:?}");
            assert_eq!(reused, fresh);
        }
    }

    /// The anti-entropy job sends what the read model lacks or holds older, and shows
    /// deleted what the listing no longer has — never what is newer than the listing — and a
    /// late reporter event can undo neither.
    #[tokio::test(flavor = "current_thread")]
    async fn the_anti_entropy_job_sends_only_what_the_read_model_misses() {
        let env: SharedEnv = Arc::new(crate::env::RealEnv::new("reconcile-test"));
        let platform = Platform::new(Config {
            tokens: Default::default(),
            bus_capacity: 10,
            durability: Default::default(),
            idempotency_keys: false,
        });
        let state = |rv: u64, sync: &str, deleted: bool| AppState {
            resource_version: rv,
            deleted,
            sync_status: sync.into(),
            revision: "r1".into(),
            health_status: "Healthy".into(),
            runtime: "rt".into(),
            destination_namespace: "shop".into(),
            ..AppState::default()
        };
        let app = |name: &str, rv: u64, sync: &str| {
            json!({"metadata": {"name": name, "namespace": "argocd", "resourceVersion": rv.to_string()},
                   "spec": {"destination": {"namespace": "shop"}},
                   "status": {"sync": {"status": sync, "revision": "r1"}, "health": {"status": "Healthy"}}})
        };
        platform.put_app("rt", "argocd/same", state(5, "Synced", false));
        platform.put_app("rt", "argocd/stale", state(5, "Synced", false));
        platform.put_app("rt", "argocd/gone", state(5, "Synced", false));
        platform.put_app("rt", "argocd/newer", state(30, "Synced", false));
        platform.put_app("rt", "argocd/was-deleted", state(6, "Synced", true));
        platform.put_app("other", "argocd/missing", state(1, "Synced", false));
        // An app of another namespace the runtime's reporter reported: not listed, not gone.
        platform.put_app("rt", "team-a/elsewhere", state(4, "Synced", false));
        let listing = Listing {
            namespace: "argocd".into(),
            omitted: 0,
            resource_version: 20,
            items: vec![
                // Moved on, but shows the same: nothing to send.
                app("same", 8, "Synced"),
                app("stale", 9, "OutOfSync"),
                app("missing", 12, "Synced"),
            ],
        };
        let done = platform.reconcile(&env, "rt", &listing);
        assert_eq!(
            (done.updated, done.tombstoned, done.error.as_str()),
            (2, 1, "")
        );
        for _ in 0..3 {
            let (seq, event) = platform.bus.take().await;
            project(&env, &platform, seq, &event);
        }
        let apps = platform.apps_of("rt");
        assert_eq!(apps["argocd/same"], state(5, "Synced", false));
        assert_eq!(apps["argocd/stale"].sync_status, "OutOfSync");
        assert_eq!(apps["argocd/stale"].resource_version, 9);
        assert_eq!(apps["argocd/missing"].resource_version, 12);
        assert!(apps["argocd/gone"].deleted);
        assert_eq!(apps["argocd/gone"].resource_version, 20);
        // Created after the listing's snapshot: left alone.
        assert_eq!(apps["argocd/newer"], state(30, "Synced", false));
        assert!(apps["argocd/was-deleted"].deleted);
        assert_eq!(apps["team-a/elsewhere"], state(4, "Synced", false));
        // Another runtime's app of the same name is not this runtime's.
        assert_eq!(
            platform.apps_of("other")["argocd/missing"].resource_version,
            1
        );
        // A reporter's late event older than a repair is stale.
        assert_eq!(
            platform.put_app("rt", "argocd/stale", state(7, "Synced", false)),
            read_model::Applied::Stale
        );
        assert_eq!(
            platform.put_app("rt", "argocd/gone", state(15, "Synced", false)),
            read_model::Applied::Stale
        );
        // A second pass over the same listing sends nothing.
        let again = platform.reconcile(&env, "rt", &listing);
        assert_eq!((again.updated, again.tombstoned), (0, 0));
        // A listing that left apps out judges no deletion.
        platform.put_app("rt", "argocd/hidden", state(10, "Synced", false));
        let partial = Listing {
            namespace: "argocd".into(),
            resource_version: 40,
            items: vec![],
            omitted: 1,
        };
        assert_eq!(platform.reconcile(&env, "rt", &partial).tombstoned, 0);
        // An app shown deleted at 20 that a later listing (at 50) still has at 12: the
        // deletion was wrong, and the app comes back, as of the listing's version.
        let later = Listing {
            namespace: "argocd".into(),
            resource_version: 50,
            items: vec![app("gone", 12, "Synced")],
            omitted: 0,
        };
        let back = platform.reconcile(&env, "rt", &later);
        assert_eq!(back.updated, 1);
        let (seq, event) = platform.bus.take().await;
        project(&env, &platform, seq, &event);
        let gone = &platform.apps_of("rt")["argocd/gone"];
        assert!(!gone.deleted);
        assert_eq!(gone.resource_version, 50);
        // But a deletion newer than the listing stands.
        platform.put_app("rt", "argocd/newer", state(60, "Synced", true));
        let older = Listing {
            namespace: "argocd".into(),
            resource_version: 55,
            items: vec![app("newer", 30, "Synced")],
            omitted: 0,
        };
        assert_eq!(platform.reconcile(&env, "rt", &older).updated, 0);
    }

    #[test]
    fn a_gzip_envelope_decodes_and_bad_bodies_are_refused_with_a_reason() {
        let object =
            json!({"metadata": {"name": "a", "namespace": "argocd", "resourceVersion": "7"}});
        let ok = decode("rt", true, &gzip(&payload(&object)), DEFAULT_INFLATE).unwrap();
        let Kind::App { object: ok, .. } = ok.event else {
            panic!("an application event")
        };
        assert_eq!(ok.metadata.0.name.as_str(), "a");
        let not_gzip = decode("rt", true, b"plain", DEFAULT_INFLATE).err().unwrap();
        assert_eq!(not_gzip.status, StatusCode::BAD_REQUEST);
        assert!(not_gzip.reason.contains("gzip"), "{}", not_gzip.reason);
        let bad_json = decode("rt", false, b"{\"data\": 3}", DEFAULT_INFLATE)
            .err()
            .unwrap();
        assert!(
            bad_json.reason.contains("invalid event envelope"),
            "{}",
            bad_json.reason
        );
        let nameless = decode(
            "rt",
            false,
            &payload(&json!({"metadata": {}})),
            DEFAULT_INFLATE,
        )
        .err()
        .unwrap();
        assert!(
            nameless.reason.contains("metadata.name"),
            "{}",
            nameless.reason
        );
    }

    #[test]
    fn cluster_stream_objects_decode_and_bad_ones_are_refused_with_a_reason() {
        // As the Sensor sends it: the object as JSON text, no event type.
        let body = |object: serde_json::Value| {
            serde_json::to_vec(&json!({"data": {"object": object.to_string()}})).unwrap()
        };
        let workflow = json!({"kind": "Workflow", "metadata": {"name": "build", "namespace": "ci", "resourceVersion": "4"}, "status": {"phase": "Running"}});
        let ok = decode("rt", false, &body(workflow), DEFAULT_INFLATE).unwrap();
        let Kind::Cluster(event) = ok.event else {
            panic!("a cluster event")
        };
        assert_eq!(
            (
                event.kind,
                event.name.as_str(),
                event.resource_version,
                event.deleted
            ),
            (cluster::Kind::Workflow, "build", 4, false)
        );
        // Inline, with the type (what orrery's hardened reporter may send).
        let inline = json!({"data": {"object": {"kind": "Rollout", "metadata": {"name": "web", "resourceVersion": "9"}}, "type": "DELETE"}});
        let Kind::Cluster(event) = decode(
            "rt",
            false,
            &serde_json::to_vec(&inline).unwrap(),
            DEFAULT_INFLATE,
        )
        .unwrap()
        .event
        else {
            panic!("a cluster event")
        };
        assert!(event.deleted);
        let pod = decode(
            "rt",
            false,
            &body(json!({"kind": "Pod", "metadata": {"name": "p"}})),
            DEFAULT_INFLATE,
        )
        .err()
        .unwrap();
        assert_eq!(pod.status, StatusCode::BAD_REQUEST);
        assert!(pod.reason.contains("\"Pod\""), "{}", pod.reason);
        // An application event with an inline object keeps the application envelope's
        // reason, as before the cluster stream existed.
        let app_shaped = json!({"data": {"timestamp": "t", "source": {}, "object": {"kind": "Rollout", "metadata": {"name": "a"}}}});
        let refused = decode(
            "rt",
            false,
            &serde_json::to_vec(&app_shaped).unwrap(),
            DEFAULT_INFLATE,
        )
        .err()
        .unwrap();
        assert!(
            refused.reason.contains("invalid event envelope"),
            "{}",
            refused.reason
        );
        // Neither envelope: the application envelope's reason is reported.
        let neither = decode("rt", false, b"{\"data\": {\"object\": 3}}", DEFAULT_INFLATE)
            .err()
            .unwrap();
        assert!(
            neither.reason.contains("invalid event envelope"),
            "{}",
            neither.reason
        );
    }
}
