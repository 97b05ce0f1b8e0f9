//! The application event reporter, run as N replicas.
//!
//! Each replica watches every `Application` (kube-rs watcher + reflector, seeded backoff),
//! keeps the ones its shard owns, passes them through the optional per-app rate limiter,
//! queues them, and for each one applies the app-level dedup rules, reads the Argo CD server
//! in the real reporter's order and delivers the app's events to the platform — one
//! application (or child-app) event plus one event per changed resource (gzip JSON, runtime
//! token, retries with seeded jitter); see `process`. It serves `/healthz`, `/metrics` and
//! `/app-distribution`.
//!
//! The two variants differ only where the real system is flawed:
//!
//! | | faithful | hardened |
//! |---|---|---|
//! | shard | `fnv1a_32(name) % replicas`, ordinal from config/hostname | rendezvous hashing over live `Lease` holders |
//! | queue | 1,000-event FIFO, newest dropped when full | per-app coalescing, 1,000 entries + resync set |
//! | workers | one | `workers` (default 8), per-app ordering |
//! | failed delivery | lost until the app changes | re-queued |
//! | resource events | one at a time | `resource_concurrency` at a time |
//! | rate-limited event | dropped (counted; enqueued in learning mode) | deferred to the app's next window |
//! | duplicates | none marked | idempotency key per event |
//! | lost updates and deletes | stay lost | anti-entropy pass against the platform |
//!
//! Modules: [`shard`], [`queue`], `process` (payload and delivery), `membership`
//! (leases), `resync` (anti-entropy), `serve` (health, metrics, distribution).

pub mod argocd;
pub mod dedup;
mod membership;
pub mod memo;
pub use membership::release_lease;
pub mod process;
pub mod queue;
pub mod rate_limit;
mod resync;
mod serve;
pub mod shard;
pub mod token;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use tokio::sync::Notify;

use crate::core::Variant;
use crate::env::kube::{KubeTarget, SeededBackoff, Shared};
use crate::env::{Point, SharedEnv};
use crate::observe::ReporterEvent;
use dedup::WatchType;
use queue::{CoalescingQueue, FaithfulQueue, Push, QUEUE_CAPACITY};
use rate_limit::{RateLimit, RateLimiter, Verdict};

/// Reporter settings (defaults from the real reporter where it has them).
#[derive(Clone, Debug)]
pub struct Config {
    /// Which design runs.
    pub variant: Variant,
    /// The Kubernetes API.
    pub apiserver: KubeTarget,
    /// Namespace of the Applications (Argo CD's), and of the replicas' leases.
    pub namespace: String,
    /// More namespaces whose Applications are reported (`--application-namespaces` /
    /// `ARGOCD_APPLICATION_NAMESPACES`; research §1.1: non-empty makes the informer watch all
    /// namespaces; apps outside the listed ones are ignored).
    pub application_namespaces: Vec<String>,
    /// Argo CD server `host:port` and its bearer token.
    pub argocd_addr: String,
    /// Bearer token for the Argo CD server (a bundled Argo CD).
    pub argocd_token: String,
    /// An existing Argo CD: the Secret (in `namespace`, key `token`) holding the token it
    /// issued; read at start (faithful) or followed (hardened). See [`token`].
    pub argocd_token_secret: Option<String>,
    /// Platform `host:port` (events API).
    pub platform_addr: String,
    /// Runtime token sent in `Authorization`.
    pub runtime_token: String,
    /// Dedup cache `host:port`.
    pub cache_addr: String,
    /// faithful: `EVENT_REPORTER_REPLICAS`, read once at start.
    pub replicas: u32,
    /// faithful: `EVENT_REPORTER_SHARD`; `None` derives it from the hostname ordinal.
    pub shard: Option<u32>,
    /// Queue capacity: 1,000, as the real reporter.
    pub queue_capacity: usize,
    /// hardened: worker count. Default 8.
    pub workers: usize,
    /// hardened: lease duration (ownership handover bound). Default 15 s.
    pub lease_duration: Duration,
    /// hardened: lease renewal and membership refresh period. Default 5 s.
    pub lease_renew: Duration,
    /// hardened: anti-entropy pass against the platform's read model. Default 60 s.
    pub resync_every: Duration,
    /// Dedup entry lifetime: 20 minutes, as the real reporter's Redis TTL.
    pub dedup_ttl: Duration,
    /// Per-request timeout (Argo CD server reads use 30 s in the real reporter).
    pub request_timeout: Duration,
    /// Delivery attempts per event: 5, 1–2 s apart.
    pub delivery_attempts: u32,
    /// The per-app rate limiter; `None` (the real default, `RATE_LIMITER_ENABLED=false`).
    pub rate_limit: Option<RateLimit>,
    /// hardened: resource events of one app in flight at once. Default 10 (the newer
    /// reporter's `RESOURCE_THREADINESS` for the runtime reporter).
    pub resource_concurrency: usize,
    /// Address of the health/metrics server (`/healthz` on 8088 and metrics on 8087 in the
    /// real reporter; one port here).
    pub serve_addr: String,
    /// The source server (`host:port`; `SOURCES_SERVER` / `ARGO_GATEWAY_URL` of the newer
    /// reporter): app versions and revision metadata are read there instead of from the
    /// Codefresh fork of Argo CD. `None`: from Argo CD, as the v2 reporter does.
    pub sources_addr: Option<String>,
}

impl Config {
    /// Whether Applications in `namespace` are reported.
    pub fn reports(&self, namespace: &str) -> bool {
        namespace == self.namespace || self.application_namespaces.iter().any(|n| n == namespace)
    }

    /// Defaults for `variant` with the given addresses.
    pub fn new(variant: Variant, apiserver: KubeTarget, namespace: &str) -> Self {
        Config {
            variant,
            apiserver,
            namespace: namespace.into(),
            application_namespaces: Vec::new(),
            argocd_addr: "argocd:8080".into(),
            argocd_token: String::new(),
            argocd_token_secret: None,
            platform_addr: "platform:8080".into(),
            runtime_token: String::new(),
            cache_addr: "cache:6379".into(),
            replicas: 1,
            shard: None,
            queue_capacity: QUEUE_CAPACITY,
            workers: 8,
            lease_duration: Duration::from_secs(15),
            lease_renew: Duration::from_secs(5),
            resync_every: Duration::from_secs(60),
            dedup_ttl: Duration::from_secs(20 * 60),
            request_timeout: Duration::from_secs(30),
            delivery_attempts: 5,
            rate_limit: None,
            resource_concurrency: 10,
            serve_addr: "0.0.0.0:8087".into(),
            sources_addr: None,
        }
    }
}

/// The `Application` type for kube-rs dynamic APIs.
pub fn application_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "argoproj.io",
        "v1alpha1",
        "Application",
    ))
}

/// One queued faithful event: the app as it was when the event arrived.
struct Item {
    app: Arc<DynamicObject>,
    kind: WatchType,
}

/// Counters exported on `/metrics` (label `reporter_shard`).
#[derive(Clone, Debug, Default)]
struct Counters {
    enqueued: u64,
    /// Dropped because the queue was full.
    dropped: u64,
    /// Refused by the rate limiter (dropped in faithful unless learning mode; deferred in hardened).
    rate_limited: u64,
    errored_delivery: u64,
    errored_payload: u64,
    cached_ignored: u64,
    cached_ignored_resource: u64,
    sent_app: u64,
    sent_child: u64,
    sent_resource: u64,
    /// Processing-duration histogram: counts per bucket of [`serve::DURATION_BUCKETS`] and +Inf.
    duration_buckets: [u64; 8],
    duration_sum_ms: u64,
}

/// Mutable state of a replica (never locked across an await).
struct State {
    faithful: FaithfulQueue<Item>,
    hardened: CoalescingQueue,
    members: Vec<String>,
    tombstones: BTreeMap<String, Arc<DynamicObject>>,
    /// hardened: apps the anti-entropy pass found lagging; sent without the dedup check,
    /// since the platform's read model proves the cache wrong for them (a slow replica can
    /// write an older state's digest after a newer one was sent).
    forced: std::collections::BTreeSet<String>,
    /// The per-app rate limiter, when configured.
    limiter: Option<RateLimiter>,
    /// hardened: apps the limiter deferred, waiting for their next window.
    deferred: std::collections::BTreeSet<String>,
    counters: Counters,
    /// Per-app metric series (`application` label).
    series: BTreeMap<String, serve::AppSeries>,
}

/// The membership a replica's ownership was read at, so a pass over every app asks it
/// thousands of times without locking the state for each. In the simulator (one thread)
/// it is exact until the task holding it next awaits, since membership changes only while
/// other tasks run; in real mode it gives the pass one consistent membership.
struct Ownership<'r> {
    replica: &'r Replica,
    members: Vec<String>,
}

impl Ownership<'_> {
    /// Whether the replica reports `app` at this membership.
    fn owns(&self, app: &str) -> bool {
        let replica = self.replica;
        match replica.config.variant {
            Variant::Faithful => shard::faithful_owns(app, replica.shard, replica.config.replicas),
            Variant::Hardened => {
                shard::rendezvous_owner(app, &self.members) == Some(replica.me.as_str())
            }
        }
    }
}

/// A running replica's shared pieces.
struct Replica {
    env: SharedEnv,
    config: Config,
    me: String,
    shard: Option<u32>,
    store: Store<Shared<DynamicObject>>,
    state: Mutex<State>,
    wake: Notify,
}

impl Replica {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("reporter state lock poisoned")
    }

    /// Whether this replica reports `app` now.
    fn owns(&self, app: &str) -> bool {
        self.ownership().owns(app)
    }

    /// Who owns what now, read once for a pass over many apps.
    fn ownership(&self) -> Ownership<'_> {
        Ownership {
            replica: self,
            members: match self.config.variant {
                Variant::Faithful => Vec::new(),
                Variant::Hardened => self.state().members.clone(),
            },
        }
    }

    /// hardened: queues every app this replica owns, bypassing the dedup cache (a new
    /// Argo CD token: the last events may carry the old one's read errors). Returns how many.
    fn requeue_owned(&self) -> u64 {
        let mut apps = self.store.state();
        apps.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        let ownership = self.ownership();
        let keys: Vec<String> = apps
            .iter()
            .filter_map(|app| {
                let namespace = app.metadata.namespace.as_deref()?;
                let name = app.metadata.name.as_deref()?;
                (self.config.reports(namespace) && ownership.owns(name))
                    .then(|| app_key(namespace, name))
            })
            .collect();
        let mut state = self.state();
        for key in &keys {
            state.forced.insert(key.clone());
            state.hardened.push(key);
        }
        drop(state);
        self.wake.notify_waiters();
        keys.len() as u64
    }

    /// Label used for `reporter_shard` and in `/app-distribution`.
    fn shard_label(&self) -> String {
        match (self.config.variant, self.shard) {
            (Variant::Faithful, Some(s)) => s.to_string(),
            (Variant::Faithful, None) => "-1".into(),
            (Variant::Hardened, _) => self.me.clone(),
        }
    }

    /// A watch event for `app`: queue it if ours (and if the rate limiter lets it through).
    fn on_change(self: &Arc<Self>, app: Arc<DynamicObject>, kind: WatchType) {
        let Some(name) = app.metadata.name.clone() else {
            return;
        };
        let namespace = app.metadata.namespace.as_deref().unwrap_or("");
        if !self.config.reports(namespace) || !self.owns(&name) {
            return;
        }
        // The hardened queue, tombstones and limiter know an app by `namespace/name` (two
        // namespaces may hold apps of the same name); the faithful limiter by name alone.
        let key = app_key(namespace, &name);
        let deleted = kind == WatchType::Deleted;
        let now = self.env.elapsed();
        let limited = {
            let mut state = self.state();
            match state.limiter.as_mut().map(|l| {
                let by = match self.config.variant {
                    Variant::Faithful => &name, // keyed by app name, as the real limiter
                    Variant::Hardened => &key,
                };
                (l.take(by, now), l.limit().learning_mode)
            }) {
                Some((Verdict::Limited { retry_in }, learning)) => {
                    state.counters.rate_limited += 1;
                    Some((retry_in, learning))
                }
                _ => None,
            }
        };
        let learning = usize::from(limited.is_some_and(|(_, learning)| learning));
        match (limited, self.config.variant) {
            (None, _) | (Some((_, true)), Variant::Faithful) => {}
            (Some(_), Variant::Faithful) => {
                let mut state = self.state();
                state.counters.dropped += 1; // dropped, as the real limiter does
                state.series.entry(name).or_default().dropped[0] += 1;
                return;
            }
            (Some((retry_in, _)), Variant::Hardened) => {
                // Deferred, never dropped: the app is queued when its window refills (the
                // latest state is read then, so nothing is lost by waiting).
                let mut state = self.state();
                if deleted {
                    state.tombstones.insert(key.clone(), app.clone());
                }
                if state.deferred.insert(key.clone()) {
                    let again = self.clone();
                    tokio::spawn(async move {
                        again.env.sleep(retry_in).await;
                        let mut state = again.state();
                        state.deferred.remove(&key);
                        state.hardened.push(&key);
                        drop(state);
                        again.wake.notify_one();
                    });
                }
                return;
            }
        }
        // Fault point: this event meets a full queue.
        let room = if self.env.buggify(Point::ReporterQueueFull) {
            0
        } else {
            self.config.queue_capacity
        };
        let mut state = self.state();
        state.counters.enqueued += 1;
        state.series.entry(name.clone()).or_default().enqueued[learning] += 1;
        let pushed = match self.config.variant {
            Variant::Faithful => state.faithful.push_within(
                Item {
                    app: app.clone(),
                    kind,
                },
                room,
            ),
            Variant::Hardened => {
                if deleted {
                    state.tombstones.insert(key.clone(), app.clone());
                } else {
                    state.tombstones.remove(&key);
                }
                state.hardened.push_within(&key, room)
            }
        };
        if pushed == Push::Overflowed && self.config.variant == Variant::Faithful {
            state.counters.dropped += 1;
            state.series.entry(name).or_default().dropped[learning] += 1;
        }
        drop(state);
        self.wake.notify_one();
    }

    fn queue_depth(&self) -> (usize, usize) {
        let state = self.state();
        match self.config.variant {
            Variant::Faithful => (state.faithful.len(), 0),
            Variant::Hardened => (state.hardened.len(), state.hardened.resync_len()),
        }
    }
}

/// How a replica's informer lists. faithful: as client-go's reflector, whose first list asks
/// for `resourceVersion=0`, unpaginated, which the API server may answer from a watch cache
/// behind the store — after a restart against an HA control plane the reporter can see,
/// and report, apps older than it reported before its crash (kubernetes#59848). (kube-rs
/// also relists at `0` after an expired watch, where client-go asks for its last seen
/// version: see docs/fidelity-gaps.md.) hardened: kube-rs's default, a paginated quorum
/// read, which is never behind a write the reporter saw.
fn list_semantic(variant: Variant) -> watcher::Config {
    match variant {
        // kube-core drops resourceVersion=0 from a paginated list: list unpaginated.
        Variant::Faithful => watcher::Config {
            page_size: None,
            ..watcher::Config::default().any_semantic()
        },
        Variant::Hardened => watcher::Config::default(),
    }
}

/// Runs one reporter replica until its host stops or this future is dropped (which stops
/// every task of the replica).
pub async fn run(env: SharedEnv, config: Config) {
    let me = env.identity().host.clone();
    let shard = config.shard.or(env.identity().ordinal);
    let client = crate::env::kube::client(env.clone(), &config.apiserver);
    // Decoded in one pass, and once for every watcher on the thread (`Shared`'s decoding).
    let api: Api<Shared<DynamicObject>> = if config.application_namespaces.is_empty() {
        Api::namespaced_with(client.clone(), &config.namespace, &application_resource())
    } else {
        Api::all_with(client.clone(), &application_resource())
    };
    let writer = reflector::store::Writer::new(application_resource());
    let store = writer.as_reader();
    let replica = Arc::new(Replica {
        env: env.clone(),
        me: me.clone(),
        shard,
        store,
        state: Mutex::new(State {
            faithful: FaithfulQueue::new(config.queue_capacity),
            hardened: CoalescingQueue::new(config.queue_capacity),
            members: Vec::new(),
            tombstones: BTreeMap::new(),
            forced: Default::default(),
            limiter: config.rate_limit.clone().map(RateLimiter::new),
            deferred: Default::default(),
            counters: Counters::default(),
            series: BTreeMap::new(),
        }),
        wake: Notify::new(),
        config,
    });
    env.observe(
        ReporterEvent::Start {
            replica: me.clone(),
            variant: replica.config.variant,
            shard,
            replicas: replica.config.replicas,
        }
        .into(),
    );

    // The replica's tasks live as long as this future: dropping it (a shutdown) stops them.
    let mut tasks = tokio::task::JoinSet::new();
    let watched = replica.clone();
    let backoff = SeededBackoff::new(env.clone());
    let events = watcher(api, list_semantic(replica.config.variant)).backoff(backoff);
    tasks.spawn(reflector::reflector(writer, events).for_each(move |event| {
        match event {
            // The initial list reaches the real informer as OnAdd; later changes as OnUpdate.
            Ok(watcher::Event::InitApply(app)) => watched.on_change(app.0, WatchType::Added),
            Ok(watcher::Event::Apply(app)) => watched.on_change(app.0, WatchType::Modified),
            Ok(watcher::Event::Delete(app)) => watched.on_change(app.0, WatchType::Deleted),
            Ok(_) => {}
            Err(e) => watched.env.observe(
                ReporterEvent::WatchError {
                    replica: watched.me.clone(),
                    error: e.to_string(),
                }
                .into(),
            ),
        }
        async {}
    }));

    let workers = match replica.config.variant {
        Variant::Faithful => 1, // one consumer, as the real reporter
        Variant::Hardened => replica.config.workers.max(1),
    };
    let processor = Arc::new(process::Processor::new(env.clone(), &replica.config));
    match replica.config.argocd_token_secret.clone() {
        None => {
            for _ in 0..workers {
                tasks.spawn(worker(replica.clone(), processor.clone()));
            }
        }
        // An existing Argo CD: no work before its token is read from the Secret.
        Some(secret) => {
            let (replica, processor, client) = (replica.clone(), processor.clone(), client.clone());
            tasks.spawn(async move {
                let token = token::load(&replica, client.clone(), &secret).await;
                processor.token_rotated(&token);
                replica.env.observe(
                    ReporterEvent::TokenLoaded {
                        replica: replica.me.clone(),
                        requeued: 0,
                    }
                    .into(),
                );
                // Dropped with this task (a shutdown stops them all).
                let mut inner = tokio::task::JoinSet::new();
                if replica.config.variant == Variant::Hardened {
                    inner.spawn(token::follow(
                        replica.clone(),
                        processor.clone(),
                        client,
                        secret,
                    ));
                }
                for _ in 0..workers {
                    inner.spawn(worker(replica.clone(), processor.clone()));
                }
                while inner.join_next().await.is_some() {}
            });
        }
    }
    if replica.config.variant == Variant::Hardened {
        tasks.spawn(membership::run(replica.clone(), client.clone()));
        tasks.spawn(resync::run(replica.clone(), processor.clone(), client));
    }
    tasks.spawn(report_queue(replica.clone()));
    if let Err(e) = serve::run(replica.clone()).await {
        env.observe(
            ReporterEvent::ServeError {
                replica: me.clone(),
                error: e.to_string(),
            }
            .into(),
        );
    }
    std::future::pending::<()>().await;
}

/// Observes queue depth every 5 s (per-shard queue depth over time in reports).
async fn report_queue(replica: Arc<Replica>) {
    let mut last = None;
    loop {
        replica.env.sleep(Duration::from_secs(5)).await;
        let (depth, resync) = replica.queue_depth();
        let (dropped, parked, c) = {
            let state = replica.state();
            (
                state.counters.dropped,
                state.hardened.overflowed,
                state.counters.clone(),
            )
        };
        let sent_app = c.sent_app + c.sent_child;
        let now = (
            depth,
            resync,
            dropped,
            parked,
            sent_app,
            c.sent_resource,
            c.rate_limited,
        );
        if last != Some(now) {
            replica.env.observe(
                ReporterEvent::Queue {
                    replica: replica.me.clone(),
                    depth: depth as u64,
                    resync: resync as u64,
                    dropped,
                    parked,
                    sent_app,
                    sent_resource: c.sent_resource,
                    rate_limited: c.rate_limited,
                }
                .into(),
            );
            last = Some(now);
        }
    }
}

/// `namespace/name`: the hardened reporter's key of an app.
pub fn app_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// A unit of work: the app, whether it was deleted, the hardened queue entry to release,
/// and whether to bypass the dedup cache.
struct Work {
    app: Arc<DynamicObject>,
    kind: WatchType,
    hardened_name: Option<String>,
    force: bool,
}

/// Takes the next unit of work, waiting when there is none.
async fn next(replica: &Replica) -> Work {
    loop {
        {
            let mut state = replica.state();
            match replica.config.variant {
                Variant::Faithful => {
                    if let Some(item) = state.faithful.pop() {
                        return Work {
                            app: item.app,
                            kind: item.kind,
                            hardened_name: None,
                            force: false,
                        };
                    }
                }
                Variant::Hardened => {
                    while let Some(name) = state.hardened.pop() {
                        // Level-based: process the latest state, or the tombstone of a deleted app.
                        let (namespace, app_name) = name.split_once('/').unwrap_or(("", &name));
                        let key = reflector::ObjectRef::new_with(app_name, application_resource())
                            .within(namespace);
                        let force = state.forced.remove(&name);
                        if let Some(app) = replica.store.get(&key) {
                            return Work {
                                app: app.0.clone(),
                                kind: WatchType::Modified,
                                hardened_name: Some(name),
                                force,
                            };
                        }
                        if let Some(app) = state.tombstones.get(&name).cloned() {
                            return Work {
                                app,
                                kind: WatchType::Deleted,
                                hardened_name: Some(name),
                                force,
                            };
                        }
                        state.hardened.done(&name); // neither live nor deleted-and-known: nothing to say
                    }
                }
            }
        }
        replica.wake.notified().await;
    }
}

async fn worker(replica: Arc<Replica>, processor: Arc<process::Processor>) {
    loop {
        let Work {
            app,
            kind,
            hardened_name,
            force,
        } = next(&replica).await;
        let deleted = kind == WatchType::Deleted;
        if replica.env.buggify(Point::ReporterWorkerStall) {
            let pause = replica
                .env
                .random_between(Duration::from_secs(1), Duration::from_secs(10));
            replica.env.sleep(pause).await;
        }
        let started = replica.env.elapsed();
        let budget = Duration::from_secs(120); // one app at a time with a 2-minute budget
        let outcome = tokio::time::timeout(
            budget,
            processor.process(&app, kind, force, replica.config.variant),
        )
        .await
        .unwrap_or(process::Outcome::Aborted(process::Tally::default()));
        let elapsed_ms = replica.env.elapsed().saturating_sub(started).as_millis() as u64;
        if outcome.tally().details_missing > 0 {
            replica.env.observe(
                ReporterEvent::DetailsMissing {
                    replica: replica.me.clone(),
                    app: app.metadata.name.clone().unwrap_or_default(),
                }
                .into(),
            );
        }
        let mut state = replica.state();
        if let Some(name) = app.metadata.name.as_deref() {
            let tally = outcome.tally();
            let series = state.series.entry(name.to_string()).or_default();
            let head = usize::from(process::parent_of(&app).is_some());
            series.cached_ignored[head] += u64::from(outcome == process::Outcome::CachedIgnored);
            series.cached_ignored[2] += tally.resources_cached;
            series.errored[2][0] += tally.resources_failed;
            series.errored[head][1] += tally.payload_errors;
            if matches!(outcome, process::Outcome::Aborted(t) if t.resources_failed == 0) {
                series.errored[head][0] += 1;
            }
        }
        let counters = &mut state.counters;
        counters.duration_sum_ms += elapsed_ms;
        let bucket = serve::DURATION_BUCKETS
            .iter()
            .position(|b| elapsed_ms as f64 <= b * 1000.0)
            .unwrap_or(serve::DURATION_BUCKETS.len());
        counters.duration_buckets[bucket] += 1;
        let tally = outcome.tally();
        counters.sent_app += tally.app_sent;
        counters.sent_child += tally.child_sent;
        counters.sent_resource += tally.resources_sent;
        counters.cached_ignored_resource += tally.resources_cached;
        counters.errored_payload += tally.payload_errors;
        counters.errored_delivery += tally.resources_failed;
        match outcome {
            process::Outcome::CachedIgnored => counters.cached_ignored += 1,
            process::Outcome::Aborted(t) if t.resources_failed == 0 => {
                counters.errored_delivery += 1
            }
            _ => {}
        }
        if let Some(name) = hardened_name {
            let retry = outcome.needs_retry();
            if deleted && !retry {
                state.tombstones.remove(&name);
            }
            state.hardened.done(&name);
            if retry {
                // No final state is lost: try again later.
                let again = replica.clone();
                tokio::spawn(async move {
                    again.env.sleep(Duration::from_secs(5)).await;
                    again.state().hardened.push(&name);
                    again.wake.notify_one();
                });
            }
            drop(state);
            replica.wake.notify_one();
        }
    }
}
