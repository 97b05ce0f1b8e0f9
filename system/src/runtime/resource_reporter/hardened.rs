//! The hardened resource reporter: no bus, one process from watch to platform — the shape
//! Codefresh itself moved to with `cluster-event-reporter` (`REPORTER_MODE: resource`,
//! research §1.11) — with each of the faithful path's losses designed out:
//!
//! | faithful loss | hardened |
//! |---|---|
//! | publish fails while the bus is down → dropped | no bus; the watch feeds the queue directly |
//! | 3 back-to-back attempts, then acked and lost | retried with capped exponential backoff until delivered |
//! | 400/401/404 taken as final | only 400, 413 and 422 (the platform refuses the body itself) are final; the rest is retried |
//! | older state can be re-sent after a newer one (redelivery) | one POST in flight per object; a newer state replaces a waiting one |
//! | a deletion looks like an update (no `type`) | the watch event `type` is sent, so a deletion ends the object |
//! | backlog grows with the event rate | one pending entry per object (latest state wins) |
//! | a gap (restart, 410) leaves stale state | relist diff; a periodic resync re-sends what the platform lacks and deletes what the cluster lost |
//! | a Workflow finished and TTL-deleted while the reporter is away is never seen | the runtime's Argo Workflows writes [`WORKFLOW_FINALIZER`](super::WORKFLOW_FINALIZER) on every Workflow; the reporter removes it once the Workflow's last state is delivered ([`release`]) |

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};

use super::source::{self, Change, EventType, Informer, Kind, ObjectKey};
use super::trigger::{Answer, Poster};
use super::{Config, WORKFLOW_FINALIZER};
use crate::core::json::Pointer as _;
use crate::env::SharedEnv;
use crate::observe::{LossReason, ResourceReporterEvent};

/// The latest-state queue: at most one waiting change per object, and one in flight.
#[derive(Debug, Default)]
pub struct Pending {
    latest: BTreeMap<ObjectKey, Change>,
    order: VecDeque<ObjectKey>,
    queued: BTreeSet<ObjectKey>,
    in_flight: BTreeSet<ObjectKey>,
    /// The resourceVersion the platform acknowledged per live object.
    delivered: BTreeMap<ObjectKey, u64>,
}

impl Pending {
    /// Adds `change`, replacing a waiting older state of the same object.
    pub fn push(&mut self, change: Change) {
        let key = change.key.clone();
        if let Some(waiting) = self.latest.get(&key) {
            // Never replace a newer waiting state by an older one (a resync racing a watch).
            if waiting.rv > change.rv && change.event_type != EventType::Delete {
                return;
            }
        }
        self.latest.insert(key.clone(), change);
        if !self.in_flight.contains(&key) && self.queued.insert(key.clone()) {
            self.order.push_back(key);
        }
    }

    /// Takes the next object's latest change to deliver.
    pub fn take(&mut self) -> Option<Change> {
        while let Some(key) = self.order.pop_front() {
            self.queued.remove(&key);
            if let Some(change) = self.latest.remove(&key) {
                self.in_flight.insert(key);
                return Some(change);
            }
        }
        None
    }

    /// A newer state of `key` that arrived while it was in flight (taken over by the sender).
    pub fn newer(&mut self, key: &ObjectKey) -> Option<Change> {
        self.latest.remove(key)
    }

    /// The POST of `change` ended (delivered or refused for good).
    pub fn done(&mut self, change: &Change, delivered: bool) {
        let key = &change.key;
        self.in_flight.remove(key);
        if delivered {
            if change.event_type == EventType::Delete {
                self.delivered.remove(key);
            } else {
                // Never lowered (a resync's older state the platform ignored as stale).
                let held = self.delivered.entry(key.clone()).or_default();
                *held = (*held).max(change.rv);
            }
        }
        if self.latest.contains_key(key) && self.queued.insert(key.clone()) {
            self.order.push_back(key.clone());
        }
    }

    /// Whether `rv` of `key` was delivered, or is waiting or in flight.
    fn covered(&self, key: &ObjectKey, rv: u64) -> bool {
        self.delivered.get(key) == Some(&rv) || self.busy(key)
    }

    /// Whether a change of `key` waits or is in flight.
    fn busy(&self, key: &ObjectKey) -> bool {
        self.in_flight.contains(key) || self.latest.contains_key(key)
    }

    /// Objects waiting (for figures and the memory bound).
    pub fn len(&self) -> usize {
        self.latest.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }
}

struct Shared {
    env: SharedEnv,
    config: Config,
    informer: Mutex<Informer>,
    pending: Mutex<Pending>,
    wake: Notify,
    poster: Poster,
    /// Removes the finalizer from Workflows being deleted.
    kube: kube::Client,
    /// Reads the platform's read model (one client, its connections reused).
    http: crate::env::http::Client<Full<bytes::Bytes>>,
}

/// Runs the reporter until the process stops.
pub async fn run(env: SharedEnv, config: Config) {
    let client = crate::env::kube::client(env.clone(), &config.apiserver);
    let poster = Poster::new(
        env.clone(),
        &config.platform_addr,
        &config.runtime_token,
        config.trigger_timeout,
    );
    let shared = Arc::new(Shared {
        env: env.clone(),
        config: config.clone(),
        informer: Mutex::new(Informer::default()),
        pending: Mutex::new(Pending::default()),
        wake: Notify::new(),
        poster,
        kube: client.clone(),
        http: crate::env::http::client(env.clone(), config.trigger_timeout),
    });
    let mut tasks = tokio::task::JoinSet::new();
    // The watch runs its own informer; this side mirrors it for the resync.
    let (changes, mut incoming) = mpsc::unbounded_channel::<Vec<Change>>();
    tasks.spawn(source::run(env.clone(), client, config.scope(), changes));
    let feed = shared.clone();
    tasks.spawn(async move {
        while let Some(batch) = incoming.recv().await {
            {
                let mut informer = feed.informer.lock().expect("informer lock poisoned");
                informer.mirror(&batch);
            }
            let mut pending = feed.pending.lock().expect("pending lock poisoned");
            for change in batch {
                pending.push(change);
            }
            drop(pending);
            feed.wake.notify_waiters();
        }
    });
    for _ in 0..config.workers.max(1) {
        tasks.spawn(worker(shared.clone()));
    }
    tasks.spawn(resync(shared.clone()));
    while tasks.join_next().await.is_some() {}
}

async fn worker(shared: Arc<Shared>) {
    loop {
        let notified = shared.wake.notified();
        let next = shared.pending.lock().expect("pending lock poisoned").take();
        match next {
            Some(change) => deliver(&shared, change).await,
            None => notified.await,
        }
    }
}

/// Delivers the latest state of one object: retried with capped backoff; a newer state
/// that arrives meanwhile is sent instead.
async fn deliver(shared: &Arc<Shared>, mut change: Change) {
    let env = &shared.env;
    let mut backoff = shared.config.retry_initial;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let body = Poster::typed_body(&change.object, change.event_type);
        let key = Poster::idempotency_key(&change.key, change.rv, change.event_type);
        let answer = shared.poster.post(body, Some(&key)).await;
        let outcome = match answer {
            Answer::Status(code) if (200..300).contains(&code) => Some(true),
            // The platform refuses the body itself (malformed, too large, unprocessable):
            // sending it again cannot help.
            Answer::Status(400 | 413 | 422) => Some(false),
            _ => None,
        };
        if let Some(delivered) = outcome {
            env.observe(
                if delivered {
                    ResourceReporterEvent::Delivered {
                        kind: change.key.kind,
                        object: change.key.object(),
                        rv: change.rv,
                        attempts,
                    }
                } else {
                    ResourceReporterEvent::Lost {
                        kind: change.key.kind,
                        object: change.key.object(),
                        rv: change.rv,
                        status: answer.code(),
                        why: LossReason::Refused,
                    }
                }
                .into(),
            );
            shared
                .pending
                .lock()
                .expect("pending lock poisoned")
                .done(&change, delivered);
            shared.wake.notify_waiters();
            // In a task of its own: a worker never waits on the API server (a partition from
            // it would otherwise stall every delivery behind the finalizers to remove).
            if being_deleted_and_held(&change) {
                tokio::spawn(release(shared.clone(), change));
            }
            return;
        }
        let pause = env.random_between(backoff / 2, backoff);
        env.sleep(pause).await;
        backoff = (backoff * 2).min(shared.config.retry_max);
        if let Some(newer) = shared
            .pending
            .lock()
            .expect("pending lock poisoned")
            .newer(&change.key)
        {
            change = newer;
            attempts = 0;
        }
    }
}

/// Whether `object` carries this reporter's finalizer.
fn holds(object: &Value) -> bool {
    object
        .at("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|f| f == WORKFLOW_FINALIZER))
}

/// Whether `change` is the state of a Workflow being deleted that this reporter holds.
fn being_deleted_and_held(change: &Change) -> bool {
    change.key.kind == Kind::Workflow
        && change.event_type != EventType::Delete
        && change.object.at("/metadata/deletionTimestamp").is_some()
        && holds(&change.object)
}

/// After the state of a Workflow being deleted reached the platform (or was refused for
/// good: holding it longer cannot help), removes this reporter's finalizer so the deletion
/// completes — a merge patch with the resourceVersion as precondition, so a finalizer
/// another controller added meanwhile is never dropped. Retried with capped backoff until
/// the finalizer is gone or the object is; anything else needs nothing.
async fn release(shared: Arc<Shared>, change: Change) {
    let object = &change.object;
    let env = &shared.env;
    let api: Api<DynamicObject> = Api::namespaced_with(
        shared.kube.clone(),
        &change.key.namespace,
        &Kind::Workflow.resource(),
    );
    let name = &change.key.name;
    // The first attempt patches the state just delivered; later ones read the object again.
    let mut current: Option<Value> = Some((**object).clone());
    let mut backoff = shared.config.retry_initial;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let seen = match current.take() {
            Some(seen) => Ok(seen),
            None => api
                .get(name)
                .await
                .map(|o| serde_json::to_value(o).unwrap_or_default()),
        };
        let done = match seen {
            Err(kube::Error::Api(status)) if status.code == 404 => return,
            Err(_) => false,
            Ok(seen) if !holds(&seen) => return,
            Ok(seen) => {
                let rest: Vec<&Value> = seen
                    .at("/metadata/finalizers")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|f| *f != WORKFLOW_FINALIZER)
                    .collect();
                let patch = json!({"metadata": {
                    "resourceVersion": seen.at("/metadata/resourceVersion"),
                    "finalizers": rest,
                }});
                match api
                    .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                {
                    Ok(_) => true,
                    Err(kube::Error::Api(status)) if status.code == 404 => true,
                    Err(_) => false,
                }
            }
        };
        if done {
            env.observe(
                ResourceReporterEvent::Released {
                    object: change.key.object(),
                    held: change.event_type == EventType::Add,
                    attempts,
                }
                .into(),
            );
            return;
        }
        env.sleep(env.random_between(backoff / 2, backoff)).await;
        backoff = (backoff * 2).min(shared.config.retry_max);
    }
}

/// Every `resync_every`, against the platform's read model (`GET /2.0/api/rollouts`,
/// `/workflows` with the runtime's token): re-queues every object the platform shows
/// differently from the cluster or not at all (a state lost after the platform acknowledged
/// it — its handler's queue dies with it), and deletes on the platform the objects the
/// cluster no longer has (a deletion missed while the reporter was down). When the read
/// model cannot be read, re-queues what the platform never acknowledged.
async fn resync(shared: Arc<Shared>) {
    let env = shared.env.clone();
    loop {
        env.sleep(shared.config.resync_every).await;
        let reported = platform_objects(&shared).await;
        // The cluster as the informer has it *after* the read: an object created (and
        // delivered) while the read was under way is live, never taken for a deletion.
        let (mut queued, mut deleted) = (0u64, 0u64);
        {
            let informer = shared.informer.lock().expect("informer lock poisoned");
            let live: BTreeMap<&ObjectKey, &(u64, Arc<Value>)> = informer.objects().collect();
            let mut pending = shared.pending.lock().expect("pending lock poisoned");
            for (key, (rv, object)) in &live {
                let stale = match &reported {
                    Some(reported) => {
                        shown_of(key, object, *rv)
                            .is_some_and(|mine| reported.get(*key) != Some(&mine))
                            && !pending.busy(key)
                    }
                    None => !pending.covered(key, *rv),
                };
                if stale {
                    pending.push(Change {
                        key: (*key).clone(),
                        event_type: EventType::Update,
                        rv: *rv,
                        object: object.clone(),
                    });
                    queued += 1;
                }
            }
            for (key, shown) in reported.iter().flatten() {
                if !live.contains_key(key) && !pending.busy(key) {
                    let rv = match shown {
                        Shown::Version(rv) => *rv,
                        _ => 0,
                    };
                    pending.push(tombstone(key.clone(), rv));
                    deleted += 1;
                }
            }
        }
        if queued + deleted > 0 {
            shared.wake.notify_waiters();
        }
        env.observe(ResourceReporterEvent::Resync { queued, deleted }.into());
    }
}

/// What the platform's views show of an object: a Rollout's or Workflow's
/// resourceVersion, a ReplicaSet's replicas and available replicas, an AnalysisRun's phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shown {
    /// The resourceVersion the view reflects.
    Version(u64),
    /// `spec.replicas`, `status.availableReplicas`.
    Replicas(i64, i64),
    /// `status.phase`.
    Phase(String),
}

/// What the platform should show of a live object; `None` for a ReplicaSet or
/// AnalysisRun no Rollout owns (the views show only a Rollout's).
pub fn shown_of(key: &ObjectKey, object: &Value, rv: u64) -> Option<Shown> {
    let owned = || {
        object
            .at("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .is_some_and(|refs| refs.iter().any(|r| r["kind"] == "Rollout"))
    };
    let number = |pointer: &str| object.at(pointer).and_then(Value::as_i64).unwrap_or(0);
    match key.kind {
        Kind::Rollout | Kind::Workflow => Some(Shown::Version(rv)),
        Kind::ReplicaSet => (owned()
            && object
                .at("/metadata/labels/rollouts-pod-template-hash")
                .and_then(Value::as_str)
                .is_some_and(|h| !h.is_empty()))
        .then(|| {
            Shown::Replicas(
                number("/spec/replicas"),
                number("/status/availableReplicas"),
            )
        }),
        Kind::AnalysisRun => owned().then(|| {
            Shown::Phase(
                object
                    .at("/status/phase")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            )
        }),
    }
}

/// A deletion of an object known only from the platform's read model.
fn tombstone(key: ObjectKey, rv: u64) -> Change {
    let resource = key.kind.resource();
    let object = json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {"name": key.name, "namespace": key.namespace, "resourceVersion": rv.to_string()},
    });
    Change {
        key,
        event_type: EventType::Delete,
        rv,
        object: Arc::new(object),
    }
}

/// The live (not deleted) objects the platform shows for this runtime's token, with what it
/// shows of each: Rollouts with their ReplicaSets (named `<rollout>-<hash>`, as Argo
/// Rollouts names them) and AnalysisRuns, and Workflows. `None` when it cannot be read.
async fn platform_objects(shared: &Shared) -> Option<BTreeMap<ObjectKey, Shown>> {
    let kinds = &shared.config.kinds;
    let mut objects = BTreeMap::new();
    if kinds.contains(&Kind::Rollout) {
        let views = read(shared, "/2.0/api/rollouts").await?;
        for (id, view) in views.as_object()?.iter() {
            let Some((namespace, name)) = split(id) else {
                continue;
            };
            if view["deleted"] == true {
                continue;
            }
            let rv = view["resourceVersion"].as_u64().unwrap_or(0);
            objects.insert(key(Kind::Rollout, namespace, name), Shown::Version(rv));
            if kinds.contains(&Kind::ReplicaSet) {
                for (hash, rs) in view["replicaSets"].as_object().into_iter().flatten() {
                    if hash.is_empty() {
                        continue;
                    }
                    let shown = Shown::Replicas(
                        rs["replicas"].as_i64().unwrap_or(0),
                        rs["available"].as_i64().unwrap_or(0),
                    );
                    objects.insert(
                        key(Kind::ReplicaSet, namespace, &format!("{name}-{hash}")),
                        shown,
                    );
                }
            }
            if kinds.contains(&Kind::AnalysisRun) {
                for (run, phase) in view["analysisRuns"].as_object().into_iter().flatten() {
                    let shown = Shown::Phase(phase.as_str().unwrap_or("").to_string());
                    objects.insert(key(Kind::AnalysisRun, namespace, run), shown);
                }
            }
        }
    }
    if kinds.contains(&Kind::Workflow) {
        let views = read(shared, "/2.0/api/workflows").await?;
        for (id, view) in views.as_object()?.iter() {
            if let (Some((namespace, name)), false) = (split(id), view["deleted"] == true) {
                let rv = view["resourceVersion"].as_u64().unwrap_or(0);
                objects.insert(key(Kind::Workflow, namespace, name), Shown::Version(rv));
            }
        }
    }
    Some(objects)
}

fn key(kind: Kind, namespace: &str, name: &str) -> ObjectKey {
    ObjectKey {
        kind,
        namespace: namespace.to_string(),
        name: name.to_string(),
    }
}

/// `runtime/namespace/name` → (namespace, name).
fn split(id: &str) -> Option<(&str, &str)> {
    let (_, rest) = id.split_once('/')?;
    rest.split_once('/')
}

async fn read(shared: &Shared, path: &str) -> Option<Value> {
    let request = http::Request::get(format!("http://{}{path}", shared.config.platform_addr))
        .header("authorization", shared.config.runtime_token.clone())
        .body(Full::new(bytes::Bytes::new()))
        .ok()?;
    let response =
        tokio::time::timeout(shared.config.trigger_timeout, shared.http.request(request))
            .await
            .ok()?
            .ok()?;
    if !response.status().is_success() {
        return None;
    }
    let body = response.into_body().collect().await.ok()?.to_bytes();
    serde_json::from_slice(&body).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(name: &str, rv: u64, event_type: EventType) -> Change {
        Change {
            key: key(Kind::Rollout, "shop", name),
            event_type,
            rv,
            object: Arc::new(json!({"metadata": {"name": name}})),
        }
    }

    #[test]
    fn the_queue_keeps_the_latest_state_per_object_and_one_in_flight() {
        let mut pending = Pending::default();
        pending.push(change("a", 1, EventType::Add));
        pending.push(change("b", 2, EventType::Add));
        pending.push(change("a", 3, EventType::Update));
        assert_eq!(pending.len(), 2);
        let first = pending.take().unwrap();
        assert_eq!((first.key.name.as_str(), first.rv), ("a", 3));
        // While a is in flight, a newer a waits and is not handed to another worker.
        pending.push(change("a", 4, EventType::Update));
        let second = pending.take().unwrap();
        assert_eq!(second.key.name, "b");
        assert!(pending.take().is_none());
        pending.done(&first, true);
        let third = pending.take().unwrap();
        assert_eq!((third.key.name.as_str(), third.rv), ("a", 4));
        // An older state (a resync racing the watch) never replaces a newer waiting one.
        pending.push(change("b", 9, EventType::Update));
        pending.push(change("b", 7, EventType::Update));
        pending.done(&second, true);
        assert_eq!(pending.take().unwrap().rv, 9);
        assert!(pending.covered(&key(Kind::Rollout, "shop", "b"), 2));
    }
}
