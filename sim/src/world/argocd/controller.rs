//! The simulated application controller.
//!
//! Every `tick` (1 s) it refreshes the apps that need it, within the controller's
//! Kubernetes client rate limit (`ARGOCD_K8S_CLIENT_QPS`, default 50, and
//! `ARGOCD_K8S_CLIENT_BURST`, default 2 × QPS: a token bucket, as client-go's), in this order:
//!
//! 1. **urgent**: apps never reconciled, apps whose health changed (Argo CD's cluster cache
//!    triggers an immediate refresh on a resource change), apps with the
//!    `argocd.argoproj.io/refresh` annotation, and apps changed by someone else;
//! 2. **due**: apps whose `reconciledAt` is at least `reconcile_every` old (Argo CD's
//!    `timeout.reconciliation`; the Codefresh chart sets 20 s), oldest first.
//!
//! A refresh compares the app with the **repository head** (so every app on a repository
//! moves `sync.revision` to each new head it sees, even when its own path did not change —
//! the monorepo churn the ACR controller exists for), computes `health` from the simulated
//! workload, auto-syncs apps with `syncPolicy.automated` (an `operationState` and a
//! `history` entry), fills `resources`, clears the refresh annotation, and **always writes
//! `status.reconciledAt`** (not the deprecated `observedAt`, which the controller no longer
//! updates) — so every app reaches every watcher as a
//! Modified event once per refresh, as in production, before any reporter's dedup runs. A
//! Git commit is seen at the app's next periodic refresh (no webhooks). With 10,000 apps the
//! rate limit, not `reconcile_every`, sets the refresh cycle (10,000 / 50 = 200 s), as in a
//! real installation with default limits.
//!
//! **Sync operations.** With `sync_duration` zero (the default, and every scenario written
//! before the ACR controller existed) an auto-sync is folded into the refresh's one write:
//! `history`, `operationState` and `sync` together, the operation never visible. With
//! `sync_duration` > 0 it goes as in Argo CD: the refresh writes the requested `operation`
//! (`{sync: {revision}, initiatedBy: {automated: true}}`) with `sync.status: OutOfSync`; the
//! operation runs for `sync_duration`; then one merge patch — as `setOperationState` sends
//! it — writes `status.operationState` (the operation as it reads then, `Succeeded`,
//! `syncResult`), appends `history`, sets `Synced` and clears `operation` (`null`). Being a
//! merge patch, fields of the previous `operationState.operation` the new one lacks
//! survive it (a `changeRevision` among them) [inferred from `setOperationState`; not yet
//! compared with a real Argo CD]. An app with an operation in progress is not refreshed.
//!
//! Speed: a due app whose inputs (resourceVersion, repository head, health) did not change
//! since its last refresh gets only `reconciledAt` patched, without recomputing its
//! status; per-app work beyond that one small write is proportional to what changed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use serde_json::{json, Value};

use orrery_system::core::json::Pointer as _;
use orrery_system::env::kube::Shared;
use orrery_system::env::SharedEnv;
use orrery_system::observe::WorldEvent;

pub use super::clusters::destination_of;
use super::clusters::destination_server;
use super::clusters::{Clusters, Reach};
use super::projects::{check, project_name, project_of, Projects, DEFAULT};
pub use super::touched::Touched;
use super::{app_key, children_of, resources_of, source_of, HealthOverrides, NAMESPACE};
use crate::world::apiserver::store::rfc3339;
use crate::world::git::SharedGit;
use orrery_system::core::time::parse_rfc3339;

/// Controller settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Reconcile period (`timeout.reconciliation`).
    pub reconcile_every: Duration,
    /// Writes per second to the API server (`ARGOCD_K8S_CLIENT_QPS`, default 50).
    pub k8s_client_qps: u32,
    /// Burst of writes (`ARGOCD_K8S_CLIENT_BURST`, default 2 × QPS).
    pub k8s_client_burst: u32,
    /// Entries kept in `status.history`.
    pub history_limit: usize,
    /// Namespace of the Applications (Argo CD's own namespace).
    pub namespace: String,
    /// More namespaces Argo CD manages Applications in (`application.namespaces`, "apps in
    /// any namespace"); empty: its own namespace only. Apps elsewhere are ignored.
    pub application_namespaces: Vec<String>,
    /// Address the server listens on.
    pub listen: String,
    /// How long a sync operation runs (zero: folded into the refresh's write, see the
    /// module docs).
    pub sync_duration: Duration,
    /// The AppProjects, when enforced ([`Projects::enforced`], see [`super::projects`]):
    /// apps are checked against their project and the built-in `default` admits only Argo
    /// CD's own namespace. Not enforced (the default, and the worlds written before
    /// projects): every app is in an unrestricted `default` project and AppProjects are
    /// not read.
    pub projects: Projects,
    /// Set by the harness for the calm phase: periodic refreshes that would only stamp the
    /// time are skipped, so the world can quiesce and end-of-run checks compare a settled
    /// state (refreshes that change something still happen).
    pub calm: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Where the server counts the requests it answers, by route (the reports' cost
    /// figures); none: not counted.
    pub cost: Option<std::sync::Arc<crate::world::cost::Cost>>,
}

impl Config {
    /// Whether Argo CD manages Applications in `namespace`.
    pub fn manages(&self, namespace: &str) -> bool {
        namespace == self.namespace || self.application_namespaces.iter().any(|n| n == namespace)
    }
}

impl Default for Config {
    /// Reconcile every 10 s, 50 writes/s (burst 100), keep 10 history entries, `argocd`
    /// namespace, port 8080.
    fn default() -> Self {
        Config {
            reconcile_every: Duration::from_secs(10),
            k8s_client_qps: 50,
            k8s_client_burst: 100,
            history_limit: 10,
            namespace: NAMESPACE.into(),
            application_namespaces: Vec::new(),
            listen: "0.0.0.0:8080".into(),
            sync_duration: Duration::ZERO,
            projects: Projects::default(),
            calm: None,
            cost: None,
        }
    }
}

/// The status Argo CD would report for `app` now and, when an auto-sync must start as a
/// visible operation, the revision to sync; `None` if its source is unusable.
fn desired_status(
    app: &DynamicObject,
    git: &SharedGit,
    health: &HealthOverrides,
    clusters: &Clusters,
    config: &Config,
    unix_ms: u64,
) -> Option<(Value, Option<String>)> {
    let name = app.metadata.name.clone()?;
    let (repo, path) = source_of(app)?;
    // The project first: an app it refuses is neither compared nor synced.
    let project = config.projects.resolve(&project_name(app)).map(|(_, p)| p);
    if let Err((kind, message)) = check(app, project.as_ref(), &config.namespace) {
        return Some((uncomparable(app, kind, &message, unix_ms), None));
    }
    let (server, dest_namespace) = destination_of(app);
    if let Some((kind, message)) = clusters.reach(&server).condition(&server, &dest_namespace) {
        return Some((uncomparable(app, kind, &message, unix_ms), None));
    }
    let git = git.lock();
    let no_status = json!({});
    // Read in place; `next` below is the one copy.
    let status = app.data.get("status").unwrap_or(&no_status);
    // Compared with the repository head, as Argo CD does: in sync when the app's files at
    // the head are the ones deployed (the newest commit touching its path is the same).
    let head = resolved_head(&git, repo, status)?.clone();
    let head_sha = head.sha.clone();
    let path_head = git.last_change(repo, &head_sha, path)?.sha.clone();
    // What is deployed is the last history entry; `sync.revision` is only what was compared.
    let synced_revision = status
        .get("history")
        .and_then(Value::as_array)
        .and_then(|h| h.last())
        .and_then(|h| h["revision"].as_str())
        .unwrap_or("")
        .to_string();
    let head_files = git.files_at(repo, &head_sha, path)?;
    let desired = resources_of(&head_files, &name);
    // Kinds the project refuses (`IsGroupKindPermitted`; every resource here is namespaced):
    // the comparison marks them Unknown and an automated sync fails before applying anything.
    let refused: Vec<&super::Resource> = match &project {
        Some(p) => desired
            .iter()
            .filter(|r| !p.permits_kind(r.group, r.kind, true))
            .collect(),
        None => Vec::new(),
    };
    let in_sync = !synced_revision.is_empty()
        && git
            .last_change(repo, &synced_revision, path)
            .is_some_and(|c| c.sha == path_head);
    let automated = app.data.at("/spec/syncPolicy/automated").is_some();
    let mut next = status.clone();
    if let Some(map) = next.as_object_mut() {
        map.remove("reconciledAt");
    }
    let now = rfc3339(unix_ms);
    let mut start = None;
    let mut sync_error = None;
    let attempt = Attempt::of(status, &head_sha);
    if in_sync {
        next["sync"] =
            json!({"status": "Synced", "revision": head_sha, "comparedTo": compared_to(app)});
    } else if automated && attempt.spent {
        // alreadyAttemptedSync: a revision whose automated sync failed (retries spent) is not
        // tried again — not even after the project permits the kind — and says why.
        let message = status
            .at("/operationState/message")
            .and_then(Value::as_str)
            .unwrap_or(FAILED_VALIDATION);
        sync_error = Some(format!(
            "Failed last sync attempt to [{head_sha}]: {message}"
        ));
        next["sync"] =
            json!({"status": "OutOfSync", "revision": head_sha, "comparedTo": compared_to(app)});
    } else if automated && attempt.waiting(unix_ms) {
        // A retry is scheduled: the operation waits as it is.
        next["sync"] =
            json!({"status": "OutOfSync", "revision": head_sha, "comparedTo": compared_to(app)});
    } else if automated && !refused.is_empty() {
        // gitops-engine validates every task before applying any: a kind the project refuses
        // fails the whole attempt ("one or more synchronization tasks are not valid"). An
        // automated sync is retried 5 times, 5 s × 2ⁿ apart (at most 3 min; argo-cd
        // `autoSync`'s `RetryStrategy{Limit: 5}`, `NextRetryAt`), then fails.
        let project_name = project.as_ref().map(|p| p.name.as_str()).unwrap_or(DEFAULT);
        let results: Vec<Value> = refused
            .iter()
            .map(|r| {
                json!({
                    "group": r.group, "version": r.version, "kind": r.kind,
                    "namespace": r.namespace, "name": r.name, "status": "SyncFailed",
                    "message": format!("resource {}:{} is not permitted in project {project_name}", r.group, r.kind),
                })
            })
            .collect();
        let retries = attempt.retries;
        let (phase, message) = if retries < SYNC_RETRY_LIMIT {
            let at = unix_ms + retry_wait_ms(retries);
            (
                "Running",
                format!(
                    "{FAILED_VALIDATION}. Retrying attempt #{} at {}.",
                    retries + 1,
                    kitchen(at)
                ),
            )
        } else {
            (
                "Failed",
                format!("{FAILED_VALIDATION} (retried {retries} times)."),
            )
        };
        next["operationState"] = json!({
            "operation": {"sync": {"revision": head.sha}, "initiatedBy": {"automated": true}, "retry": {"limit": SYNC_RETRY_LIMIT}},
            "phase": phase,
            "message": message,
            "retryCount": if phase == "Running" { retries + 1 } else { retries },
            "startedAt": status.at("/operationState/startedAt").filter(|_| retries > 0).cloned().unwrap_or(json!(now)),
            "finishedAt": now,
            "syncResult": {"revision": head.sha, "source": {"repoURL": repo, "path": path}, "resources": results},
        });
        if phase == "Failed" {
            // [simplified] Argo CD says so at the next refresh; here at once.
            sync_error = Some(format!(
                "Failed last sync attempt to [{head_sha}]: {message}"
            ));
        }
        next["sync"] =
            json!({"status": "OutOfSync", "revision": head_sha, "comparedTo": compared_to(app)});
    } else if automated && !config.sync_duration.is_zero() {
        next["sync"] =
            json!({"status": "OutOfSync", "revision": head_sha, "comparedTo": compared_to(app)});
        start = Some(head_sha.clone());
    } else if automated {
        let history = next
            .get("history")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let id = history.last().and_then(|h| h["id"].as_i64()).unwrap_or(-1) + 1;
        let mut history = history;
        history.push(json!({"id": id, "revision": head.sha, "deployedAt": now, "source": {"repoURL": repo, "path": path}}));
        let excess = history.len().saturating_sub(config.history_limit);
        history.drain(..excess);
        next["history"] = Value::Array(history);
        next["operationState"] = json!({
            "operation": {"sync": {"revision": head.sha}, "initiatedBy": {"automated": true}},
            "phase": "Succeeded",
            "message": "successfully synced (all tasks run)",
            "startedAt": now,
            "finishedAt": now,
            "syncResult": {"revision": head.sha, "source": {"repoURL": repo, "path": path}},
        });
        next["sync"] =
            json!({"status": "Synced", "revision": head.sha, "comparedTo": compared_to(app)});
    } else {
        next["sync"] =
            json!({"status": "OutOfSync", "revision": head.sha, "comparedTo": compared_to(app)});
    }
    // Nothing deployed because every sync so far failed validation: the resources are
    // missing. ([limitation] Other apps before their first sync keep the workload's health:
    // see docs/fidelity-gaps.md.)
    let failing = !refused.is_empty() || attempt.spent || attempt.retry_at.is_some();
    let deployed = !failing
        || next
            .get("history")
            .and_then(Value::as_array)
            .is_some_and(|h| !h.is_empty());
    // A retry that succeeded: its failed attempts' fields go (the status is written as a merge
    // patch, which keeps what it does not name).
    if next.at("/operationState/phase").and_then(Value::as_str) == Some("Succeeded")
        && status.at("/operationState/retryCount").is_some()
    {
        next["operationState"]["retryCount"] = Value::Null;
        next["operationState"]["operation"]["retry"] = Value::Null;
        next["operationState"]["syncResult"]["resources"] = Value::Null;
    }
    let health_status = if deployed {
        health.get(&name)
    } else {
        "Missing".to_string()
    };
    let sync_status = next["sync"]["status"].clone();
    next["health"] = json!({"status": health_status});
    next["resources"] = Value::Array(
        desired
            .iter()
            .map(|r| {
                // The workload's health is its Deployment's; a Service is Healthy on its own
                // (Argo CD's per-resource health, compared by the Argo CD conformance suite).
                let health = if r.kind == "Service" { "Healthy" } else { health_status.as_str() };
                let status = if refused.iter().any(|x| std::ptr::eq(*x, r)) {
                    json!("Unknown")
                } else {
                    sync_status.clone()
                };
                let mut resource = json!({"group": r.group, "version": r.version, "kind": r.kind, "namespace": r.namespace, "name": r.name, "status": status, "health": {"status": health}});
                if !deployed {
                    // A resource that is not there has no health.
                    resource.as_object_mut().map(|o| o.remove("health"));
                }
                resource
            })
            .collect(),
    );
    next["summary"] = json!({"images": [format!("registry.example/{name}:{}", &head.sha[..7])]});
    // The destination answers again: the comparison conditions go; auto-sync's SyncError is
    // the one this refresh found, if any (Argo CD replaces it at every refresh).
    let mut conditions = conditions_but(
        &next,
        &[
            "ComparisonError",
            "InvalidSpecError",
            "UnknownError",
            "SyncError",
        ],
    );
    if let Some(message) = sync_error {
        let since = status
            .get("conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "SyncError" && c["message"] == message.as_str())
            .map(|c| c["lastTransitionTime"].clone())
            .unwrap_or_else(|| json!(now));
        conditions
            .push(json!({"type": "SyncError", "message": message, "lastTransitionTime": since}));
    }
    if conditions.is_empty() {
        // The status is written as a merge patch: null removes the field.
        if next.get("conditions").is_some() {
            next["conditions"] = Value::Null;
        }
    } else {
        next["conditions"] = Value::Array(conditions);
    }
    Some((next, start))
}

/// `status.sync.comparedTo`: the app's source and destination as compared, copied from its
/// spec as Argo CD copies them. Argo CD's own CRD requires `destination` there (the real
/// kube-apiserver refuses a status without it: found by the Argo CD conformance suite).
fn compared_to(app: &DynamicObject) -> Value {
    let spec = app.data.get("spec");
    let field = |f: &str| spec.and_then(|s| s.get(f)).cloned().unwrap_or(json!({}));
    json!({"source": field("source"), "destination": field("destination")})
}

/// The status of an app Argo CD cannot compare (its destination is unreachable or not
/// registered): sync and health `Unknown`, the condition set, every resource `Unknown`, no
/// auto-sync; history and the last operation stay as they were.
fn uncomparable(app: &DynamicObject, kind: &str, message: &str, unix_ms: u64) -> Value {
    let mut next = app.data.get("status").cloned().unwrap_or(json!({}));
    if let Some(map) = next.as_object_mut() {
        map.remove("reconciledAt");
    }
    let revision = next.at("/sync/revision").cloned().unwrap_or(json!(""));
    let compared = next
        .at("/sync/comparedTo")
        .filter(|c| c.get("destination").is_some())
        .cloned()
        .unwrap_or_else(|| compared_to(app));
    next["sync"] = json!({"status": "Unknown", "revision": revision, "comparedTo": compared});
    next["health"] = json!({"status": "Unknown"});
    if let Some(resources) = next.get_mut("resources").and_then(Value::as_array_mut) {
        for resource in resources {
            resource["status"] = json!("Unknown");
            resource["health"] = json!({"status": "Unknown"});
        }
    }
    let mut conditions = conditions_but(
        &next,
        &["ComparisonError", "InvalidSpecError", "UnknownError"],
    );
    conditions
        .push(json!({"type": kind, "message": message, "lastTransitionTime": rfc3339(unix_ms)}));
    next["conditions"] = Value::Array(conditions);
    next
}

/// The last automated sync of the head revision, where it failed validation: how many
/// times it was retried, whether a retry waits, and whether the retries are spent.
struct Attempt {
    /// Retries made so far (`operationState.retryCount`).
    retries: u64,
    /// The next retry is due at this Unix time (ms), if one is scheduled.
    retry_at: Option<u64>,
    /// The sync failed for good: auto-sync does not try this revision again
    /// (`alreadyAttemptedSync`).
    spent: bool,
}

impl Attempt {
    fn of(status: &Value, revision: &str) -> Attempt {
        let state = |pointer: &str| status.at(pointer).and_then(Value::as_str);
        let same = state("/operationState/syncResult/revision") == Some(revision);
        let retries = status
            .at("/operationState/retryCount")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let retry_at = (same && state("/operationState/phase") == Some("Running") && retries > 0)
            .then(|| state("/operationState/finishedAt").and_then(parse_rfc3339))
            .flatten()
            .map(|finished| finished + retry_wait_ms(retries - 1));
        Attempt {
            retries: if retry_at.is_some() { retries } else { 0 },
            retry_at,
            spent: same && state("/operationState/phase") == Some("Failed"),
        }
    }

    /// Whether a retry is scheduled and not due yet at `unix_ms`.
    fn waiting(&self, unix_ms: u64) -> bool {
        self.retry_at.is_some_and(|at| unix_ms < at)
    }
}

/// Remembers when the retry a refresh's `patch` scheduled for `key` is due, if it scheduled one.
fn schedule_retry(memory: &mut Memory, key: &str, patch: &Value) {
    let status = &patch["status"];
    let Some(revision) = status
        .at("/operationState/syncResult/revision")
        .and_then(Value::as_str)
    else {
        return;
    };
    if let Some(at) = Attempt::of(status, revision).retry_at {
        memory.retries.insert(key.to_string(), at);
    }
}

/// Retries of a failed automated sync (argo-cd `autoSync`: `RetryStrategy{Limit: 5}`).
const SYNC_RETRY_LIMIT: u64 = 5;

/// How long after a failed attempt the next retry runs, when `retries` were made before it:
/// 5 s × 2^retries, at most 3 min (argo-cd `DefaultSyncRetry*`, `NextRetryAt`).
fn retry_wait_ms(retries: u64) -> u64 {
    (5_000u64 << retries.min(10)).min(180_000)
}

/// A time as Go's `time.Kitchen` prints it ("3:04PM"), in UTC.
fn kitchen(unix_ms: u64) -> String {
    let minutes = (unix_ms / 60_000) % (24 * 60);
    let (hour, minute) = (minutes / 60, minutes % 60);
    let h12 = match hour % 12 {
        0 => 12,
        h => h,
    };
    format!("{h12}:{minute:02}{}", if hour < 12 { "AM" } else { "PM" })
}

/// gitops-engine's message for an operation whose tasks failed validation.
const FAILED_VALIDATION: &str = "one or more synchronization tasks are not valid";

/// A status's conditions without those of the `types` a refresh decides anew.
fn conditions_but(status: &Value, types: &[&str]) -> Vec<Value> {
    let mut conditions: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    conditions.retain(|c| !c["type"].as_str().is_some_and(|t| types.contains(&t)));
    conditions
}

/// Status writes in flight at once (Argo CD's status processors default to 20).
const STATUS_PARALLELISM: usize = 16;

/// How often the controller looks for apps to refresh.
const TICK: Duration = Duration::from_secs(1);

/// Everything [`desired_status`] depends on that can change while an app's
/// resourceVersion stays put: the repository head, its health, its cluster and its project's
/// version (`None`: the project does not exist). (The app's own writes
/// move its resourceVersion; the version after such a write is recorded.)
#[derive(Clone, Debug, PartialEq, Eq)]
struct Inputs {
    resource_version: String,
    head: String,
    health: String,
    cluster: Reach,
    project: Option<String>,
}

impl Inputs {
    fn of(
        app: &DynamicObject,
        git: &SharedGit,
        health: &HealthOverrides,
        clusters: &Clusters,
        projects: &Projects,
    ) -> Option<Inputs> {
        let (repo, _) = source_of(app)?;
        let status = app.data.get("status").unwrap_or(&Value::Null);
        let head = resolved_head(&git.lock(), repo, status)?.sha.clone();
        // Only whether the cluster answers matters, not the text of its last error.
        let cluster = match clusters.reach(destination_server(app)) {
            Reach::Unreachable(_) => Reach::Unreachable(String::new()),
            reach => reach,
        };
        Some(Inputs {
            resource_version: app.metadata.resource_version.clone()?,
            head,
            health: health.get(app.metadata.name.as_deref()?),
            cluster,
            project: projects.version(project_of(app)),
        })
    }
}

/// Reads apps from the controller's store by `namespace/name` with one reused key (a
/// fresh `ObjectRef` would copy the Application type's five names for every lookup, and a
/// tick looks up every app it considers).
struct Lookup<'s> {
    store: &'s Store<Shared<DynamicObject>>,
    key: kube::runtime::reflector::ObjectRef<Shared<DynamicObject>>,
}

impl<'s> Lookup<'s> {
    fn new(store: &'s Store<Shared<DynamicObject>>) -> Lookup<'s> {
        Lookup {
            store,
            key: kube::runtime::reflector::ObjectRef::new_with("", super::application_resource())
                .within(""),
        }
    }

    /// The app `key` (`namespace/name`), if the store has it.
    fn get(&mut self, key: &str) -> Option<std::sync::Arc<Shared<DynamicObject>>> {
        let (namespace, name) = key.split_once('/')?;
        self.key.name.clear();
        self.key.name.push_str(name);
        let ns = self.key.namespace.get_or_insert_with(String::new);
        ns.clear();
        ns.push_str(namespace);
        self.store.get(&self.key)
    }
}

/// The controller's memory between ticks: per app the time of its last refresh and the
/// inputs it saw (with the resourceVersion its own write produced), the refresh order,
/// and the Kubernetes client's token bucket.
#[derive(Debug, Default)]
struct Memory {
    /// Looked up (thousands of times a tick while the first refreshes wait for tokens),
    /// never iterated: hashed, not ordered.
    apps: std::collections::HashMap<String, (Duration, Inputs), orrery_system::env::FnvBuild>,
    /// (last refresh, name): the due order, oldest first.
    order: BTreeSet<(Duration, String)>,
    /// Apps to look at again next tick (no token was left for them, or a write failed).
    pending: BTreeSet<String>,
    /// Sync operations in progress: app → when it started.
    operations: BTreeMap<String, Duration>,
    /// Automated syncs that failed validation and wait for a retry: app → when it is due
    /// (Unix ms).
    retries: BTreeMap<String, u64>,
    /// Token bucket (thousandths of a token).
    tokens_milli: u64,
    last_fill: Duration,
    /// Events recorded so far: what keeps two events of one millisecond apart in their
    /// names (Argo CD's are Unix nanoseconds).
    events_recorded: u64,
}

/// One planned write: the app's status, after the child Applications its sync creates.
struct Plan {
    /// `namespace/name`.
    key: String,
    inputs: Option<Inputs>,
    patch: Value,
    children: Vec<Value>,
    /// Children left for a later tick (no client token).
    incomplete: bool,
    /// This write starts a sync operation.
    starts: bool,
    /// This write completes a sync operation (what the harness records of it).
    completes: Option<Completion>,
    /// Children the parent's project does not permit (not created).
    refused: Vec<String>,
    /// The Kubernetes Events to record before the write ([`super::events`]).
    events: Vec<Value>,
}

/// The Event objects writing `patch` to `app` records, named apart by `memory`'s count.
fn events_for(
    app: &DynamicObject,
    patch: &Value,
    memory: &mut Memory,
    unix_ms: u64,
    stamp: &str,
) -> Vec<Value> {
    super::events::recorded(app, patch)
        .iter()
        .map(|what| {
            memory.events_recorded += 1;
            let nanos = unix_ms * 1_000_000 + memory.events_recorded % 1_000_000;
            super::events::event(app, what, nanos, stamp)
        })
        .collect()
}

/// A finished sync operation, as `argocd.synced` records it.
#[derive(Clone, Debug)]
struct Completion {
    revision: String,
    previous: String,
    expected: String,
}

/// The merge patch that completes `app`'s sync operation, started `running` ago (see the
/// module docs), and what to record of it; `None` when the app has no operation. An
/// operation without a revision (one a client wrote as `{sync: {…}}` only) syncs the head.
fn completion(
    app: &DynamicObject,
    git: &SharedGit,
    config: &Config,
    running: Duration,
    unix_ms: u64,
) -> Option<(Value, Completion)> {
    let operation = app.data.get("operation").filter(|o| !o.is_null())?.clone();
    let (repo, path) = source_of(app)?;
    // An operation without a revision syncs the target revision (here: main's head).
    let revision = match operation.at("/sync/revision").and_then(Value::as_str) {
        Some(revision) if !revision.is_empty() => revision.to_string(),
        _ => git.lock().head(repo)?.sha.clone(),
    };
    let mut history = app
        .data
        .at("/status/history")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let previous = history
        .last()
        .and_then(|h| h["revision"].as_str())
        .unwrap_or("")
        .to_string();
    let id = history.last().and_then(|h| h["id"].as_i64()).unwrap_or(-1) + 1;
    let now = rfc3339(unix_ms);
    let source = json!({"repoURL": repo, "path": path});
    history.push(json!({"id": id, "revision": revision, "deployedAt": now, "source": source}));
    let excess = history.len().saturating_sub(config.history_limit);
    history.drain(..excess);
    let started = rfc3339(unix_ms.saturating_sub(running.as_millis() as u64));
    let patch = json!({
        "operation": null,
        "status": {
            "operationState": {
                "operation": operation,
                "phase": "Succeeded",
                "message": "successfully synced (all tasks run)",
                "startedAt": started,
                "finishedAt": now,
                "syncResult": {"revision": revision, "source": source},
            },
            "history": history,
            "sync": {"status": "Synced", "revision": revision, "comparedTo": compared_to(app)},
        },
    });
    let refresh = app
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(orrery_system::runtime::acr::paths::MANIFEST_GENERATE_PATHS))
        .map(|annotation| orrery_system::runtime::acr::paths::refresh_paths(annotation, path))
        .unwrap_or_default();
    let expected = if refresh.is_empty() {
        String::new()
    } else {
        super::repo_server::expected_change(&git.lock(), repo, &previous, &revision, &refresh)
            .unwrap_or_default()
    };
    Some((
        patch,
        Completion {
            revision,
            previous,
            expected,
        },
    ))
}

/// The child Applications an auto-synced app-of-apps parent deploys that do not exist yet
/// (Argo CD's sync applies them; a child deleted by hand comes back at the next sync).
/// `resources` is the parent's `status.resources` as this refresh writes it: only when one of
/// its `Application` entries is missing from the store are the manifests read from Git, so
/// the refreshes of the other apps do no Git work here. A child in a namespace the parent's
/// project does not permit is not created: its refusal is the second list (Argo CD's sync
/// result message for it).
fn missing_children(
    app: &DynamicObject,
    resources: &Value,
    git: &SharedGit,
    store: &Store<Shared<DynamicObject>>,
    config: &Config,
) -> (Vec<Value>, Vec<String>) {
    if app.data.at("/spec/syncPolicy/automated").is_none() {
        return (Vec::new(), Vec::new());
    }
    let absent = |name: &str, namespace: &str| {
        store
            .get(
                &kube::runtime::reflector::ObjectRef::new_with(name, super::application_resource())
                    .within(namespace),
            )
            .is_none()
    };
    let field = |r: &Value, f: &str| r[f].as_str().unwrap_or("").to_string();
    let missing: BTreeSet<(String, String)> = resources
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["kind"] == "Application")
        .map(|r| (field(r, "name"), field(r, "namespace")))
        .filter(|(name, namespace)| absent(name, namespace))
        .collect();
    if missing.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let Some((repo, path)) = source_of(app) else {
        return (Vec::new(), Vec::new());
    };
    let git = git.lock();
    let Some(files) = git
        .head(repo)
        .and_then(|head| git.files_at(repo, &head.sha, path))
    else {
        return (Vec::new(), Vec::new());
    };
    let parent = app.metadata.name.clone().unwrap_or_default();
    let project_name = project_name(app);
    let project = config.projects.resolve(&project_name).map(|(_, p)| p);
    if check(app, project.as_ref(), &config.namespace).is_err() {
        return (Vec::new(), Vec::new()); // a refused parent syncs nothing
    }
    let (server, _) = destination_of(app);
    let cluster_name = app
        .data
        .at("/spec/destination/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut refused = Vec::new();
    let children = children_of(&files, &parent)
        .into_iter()
        .filter(|child| {
            let name = child["metadata"]["name"].as_str().unwrap_or("");
            let namespace = child["metadata"]["namespace"].as_str().unwrap_or(NAMESPACE);
            missing.contains(&(name.to_string(), namespace.to_string()))
        })
        .filter(|child| {
            let namespace = child["metadata"]["namespace"].as_str().unwrap_or(NAMESPACE);
            let permitted = project
                .as_ref()
                .is_some_and(|p| p.permits_destination(&server, cluster_name, namespace));
            if !permitted {
                refused.push(format!(
                    "namespace {namespace} is not permitted in project '{project_name}'"
                ));
            }
            permitted
        })
        .collect();
    (children, refused)
}

impl Memory {
    /// Adds the tokens earned since the last fill (at most `burst`).
    fn fill(&mut self, now: Duration, config: &Config) {
        let earned = now.saturating_sub(self.last_fill).as_millis() as u64
            * u64::from(config.k8s_client_qps);
        let cap = u64::from(config.k8s_client_burst.max(1)) * 1000;
        self.tokens_milli = (self.tokens_milli + earned).min(cap);
        self.last_fill = now;
    }

    /// Whether a token is left (without taking it).
    fn has_token(&self) -> bool {
        self.tokens_milli >= 1000
    }

    /// Takes one token if there is one.
    fn take(&mut self) -> bool {
        if self.has_token() {
            self.tokens_milli -= 1000;
            true
        } else {
            false
        }
    }

    fn forget(&mut self, key: &str) {
        if let Some((at, _)) = self.apps.remove(key) {
            self.order.remove(&(at, key.to_string()));
        }
    }

    fn remember(&mut self, name: String, at: Duration, inputs: Inputs) {
        self.forget(&name);
        self.order.insert((at, name.clone()));
        self.apps.insert(name, (at, inputs));
    }
}

/// The full refresh of `app`: its status recomputed and stamped.
fn full_refresh(
    app: &DynamicObject,
    git: &SharedGit,
    health: &HealthOverrides,
    clusters: &Clusters,
    config: &Config,
    stamps: &Value,
    unix_ms: u64,
) -> Option<Value> {
    let refresh = app
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("argocd.argoproj.io/refresh"));
    let (mut status, start) = desired_status(app, git, health, clusters, config, unix_ms)?;
    status["reconciledAt"] = stamps["reconciledAt"].clone();
    let mut patch = json!({"status": status});
    if let Some(revision) = start {
        patch["operation"] =
            json!({"sync": {"revision": revision}, "initiatedBy": {"automated": true}});
    }
    if refresh {
        patch["metadata"] = json!({"annotations": {"argocd.argoproj.io/refresh": null}});
    }
    Some(patch)
}

/// One tick: plans the urgent refreshes, then the due ones, as far as the token bucket
/// allows, and writes them up to [`STATUS_PARALLELISM`] at once. Work per tick is
/// proportional to the apps that changed or are due, not to all apps.
#[allow(clippy::too_many_arguments)]
async fn tick(
    env: &SharedEnv,
    client: &kube::Client,
    store: &Store<Shared<DynamicObject>>,
    touched: &Touched,
    git: &SharedGit,
    health: &HealthOverrides,
    clusters: &Clusters,
    config: &Config,
    memory: &mut Memory,
) {
    use futures::StreamExt;
    let now = env.elapsed();
    memory.fill(now, config);
    if !config.projects.ready() {
        return; // nothing is judged before the projects are listed
    }
    let unix_ms = env.unix_millis();
    let stamp = rfc3339(unix_ms);
    let stamps = json!({"reconciledAt": stamp});
    let mut apps = Lookup::new(store);
    let mut candidates = std::mem::take(&mut memory.pending);
    candidates.extend(touched.take());
    // Retries that are due are looked at now, whatever else changed.
    let due: BTreeSet<String> = memory
        .retries
        .iter()
        .filter(|(_, at)| **at <= unix_ms)
        .map(|(key, _)| key.clone())
        .collect();
    for key in &due {
        memory.retries.remove(key);
    }
    candidates.extend(due.iter().cloned());
    // Health is the workload's, by app name: the app of that name in each managed namespace.
    for name in health.take_changed() {
        for namespace in std::iter::once(&config.namespace).chain(&config.application_namespaces) {
            let key = app_key(namespace, &name);
            if apps.get(&key).is_some() {
                candidates.insert(key);
            }
        }
    }
    // A destination that went away or came back: every app on it is looked at now.
    let moved = clusters.take_changed();
    if !moved.is_empty() {
        for app in store.state() {
            let namespace = app.metadata.namespace.clone().unwrap_or_default();
            if moved.contains(&destination_of(&app).0) && config.manages(&namespace) {
                candidates.insert(app_key(
                    &namespace,
                    app.metadata.name.as_deref().unwrap_or(""),
                ));
            }
        }
    }
    let mut plans: Vec<Plan> = Vec::new();
    // Asked once per candidate (10,000 of them at start-up), never iterated: hashed.
    let mut planned: std::collections::HashSet<String, orrery_system::env::FnvBuild> =
        std::collections::HashSet::default();
    // Candidates left for a later tick, in key order (the set is built from them in one
    // pass, not searched for each of the thousands that wait at start-up).
    let mut waiting: Vec<String> = Vec::new();
    // Sync operations that have run their course complete first.
    let finished: Vec<(String, Duration)> = memory
        .operations
        .iter()
        .filter(|(_, started)| now.saturating_sub(**started) >= config.sync_duration)
        .map(|(key, started)| (key.clone(), *started))
        .collect();
    for (key, started) in finished {
        let Some(app) = apps.get(&key) else {
            memory.operations.remove(&key);
            continue;
        };
        let Some((patch, done)) = completion(&app, git, config, now - started, unix_ms) else {
            memory.operations.remove(&key); // cleared by someone else
            continue;
        };
        if !memory.take() {
            break;
        }
        planned.insert(key.clone());
        let events = events_for(&app, &patch, memory, unix_ms, &stamp);
        plans.push(Plan {
            key,
            inputs: None,
            patch,
            children: Vec::new(),
            incomplete: false,
            starts: false,
            completes: Some(done),
            refused: Vec::new(),
            events,
        });
    }
    for key in candidates {
        if planned.contains(&key) {
            continue;
        }
        // An app never refreshed is urgent whatever its inputs; with no token left it waits
        // for a later tick, unread (one deleted meanwhile is dropped then), so the thousands
        // waiting at start-up cost nothing per tick.
        if !memory.has_token() && !memory.apps.contains_key(&key) {
            waiting.push(key);
            continue;
        }
        let Some(app) = apps.get(&key) else {
            memory.forget(&key); // deleted
            memory.operations.remove(&key);
            continue;
        };
        if running_operation(&app, config) {
            // Requested by us, by someone else, or before a restart: it runs to its end.
            memory.operations.entry(key).or_insert(now);
            continue;
        }
        let inputs = Inputs::of(&app, git, health, clusters, &config.projects);
        let urgent = match (memory.apps.get(&key), &inputs) {
            (None, _) | (_, None) => true,
            (Some((_, k)), Some(i)) => {
                // Written by someone else after our last write (a view older than our own
                // write is the reflector lagging, not a change).
                let newer = match (
                    i.resource_version.parse::<u64>(),
                    k.resource_version.parse::<u64>(),
                ) {
                    (Ok(seen), Ok(ours)) => seen > ours,
                    _ => i.resource_version != k.resource_version,
                };
                newer || k.health != i.health || k.cluster != i.cluster || k.project != i.project
            }
        } || due.contains(&key);
        if !urgent {
            continue;
        }
        if !memory.take() {
            waiting.push(key);
            continue;
        }
        if let Some(patch) = full_refresh(&app, git, health, clusters, config, &stamps, unix_ms) {
            planned.insert(key.clone());
            schedule_retry(memory, &key, &patch);
            let (children, incomplete, refused) =
                plan_children(&app, &patch, git, store, config, memory);
            let events = events_for(&app, &patch, memory, unix_ms, &stamp);
            plans.push(Plan {
                key,
                inputs,
                starts: patch.get("operation").is_some(),
                patch,
                children,
                incomplete,
                completes: None,
                refused,
                events,
            });
        }
    }
    // `waiting` is sorted and distinct (candidates are a set, walked in order).
    memory
        .pending
        .append(&mut waiting.into_iter().collect::<BTreeSet<String>>());
    let calm = config
        .calm
        .as_ref()
        .is_some_and(|c| c.load(std::sync::atomic::Ordering::SeqCst));
    // The due apps, oldest refresh first, walked one at a time rather than copied out: while
    // the token bucket is short (10,000 apps, 50 writes/s) most apps are due at every tick
    // and the walk ends after a few dozen. An app looked at here moves to `now`, past the
    // due ones, so the walk sees each due app once.
    let mut after: Option<(Duration, String)> = None;
    loop {
        let next = match &after {
            None => memory.order.iter().next(),
            Some(last) => memory
                .order
                .range((std::ops::Bound::Excluded(last), std::ops::Bound::Unbounded))
                .next(),
        };
        let Some((at, key)) = next
            .filter(|(at, _)| *at < now && now.saturating_sub(*at) >= config.reconcile_every)
            .cloned()
        else {
            break;
        };
        after = Some((at, key.clone()));
        if planned.contains(&key) {
            continue;
        }
        let Some(app) = apps.get(&key) else {
            memory.forget(&key);
            continue;
        };
        if memory.operations.contains_key(&key) || running_operation(&app, config) {
            continue;
        }
        let inputs = Inputs::of(&app, git, health, clusters, &config.projects);
        let unchanged = memory
            .apps
            .get(&key)
            .zip(inputs.as_ref())
            .is_some_and(|((_, k), i)| {
                k.head == i.head
                    && k.health == i.health
                    && k.cluster == i.cluster
                    && k.project == i.project
            });
        if unchanged && calm {
            // Looked at, nothing to write: due again one period from now.
            if let Some((_, known)) = memory.apps.get(&key).cloned() {
                memory.remember(key, now, known);
            }
            continue;
        }
        if !memory.take() {
            break;
        }
        let patch = if unchanged {
            Some(json!({"status": stamps})) // nothing it depends on changed: stamp the time
        } else {
            full_refresh(&app, git, health, clusters, config, &stamps, unix_ms)
        };
        if let Some(patch) = patch {
            schedule_retry(memory, &key, &patch);
            let (children, incomplete, refused) =
                plan_children(&app, &patch, git, store, config, memory);
            let events = events_for(&app, &patch, memory, unix_ms, &stamp);
            plans.push(Plan {
                key,
                inputs,
                starts: patch.get("operation").is_some(),
                patch,
                children,
                incomplete,
                completes: None,
                refused,
                events,
            });
        }
    }
    let written: Vec<(String, Option<Inputs>, Option<bool>)> = futures::stream::iter(plans)
        .map(
            |Plan {
                 key,
                 inputs,
                 patch,
                 children,
                 incomplete,
                 starts,
                 completes,
                 refused,
                 events,
             }| async move {
                let (namespace, name) = key.split_once('/').unwrap_or(("", &key));
                // Recorded before the write, as Argo CD does; a failure to record is only
                // logged there (`Unable to create audit event`), so it changes nothing here.
                if !events.is_empty() {
                    let recorder: Api<DynamicObject> = Api::namespaced_with(
                        client.clone(),
                        namespace,
                        &super::events::event_resource(),
                    );
                    for event in events {
                        if let Ok(object) = serde_json::from_value::<DynamicObject>(event) {
                            let _ = recorder.create(&PostParams::default(), &object).await;
                        }
                    }
                }
                for error in refused {
                    env.observe(
                        WorldEvent::ReconcileError {
                            app: name.to_string(),
                            error,
                        }
                        .into(),
                    );
                }
                // The written app is decoded in one pass (`Wire`).
                let api: Api<orrery_system::env::kube::Wire> =
                    Api::namespaced_with(client.clone(), namespace, &super::application_resource());
                let mut failed = incomplete;
                for child in children {
                    let child_ns = child["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or(NAMESPACE)
                        .to_string();
                    let children: Api<DynamicObject> = Api::namespaced_with(
                        client.clone(),
                        &child_ns,
                        &super::application_resource(),
                    );
                    let object: DynamicObject = match serde_json::from_value(child) {
                        Ok(object) => object,
                        Err(_) => continue, // not an object Argo CD could apply
                    };
                    match children.create(&PostParams::default(), &object).await {
                        Ok(_) => env.observe(
                            WorldEvent::ChildCreated {
                                parent: name.to_string(),
                                child: app_key(
                                    &child_ns,
                                    object.metadata.name.as_deref().unwrap_or(""),
                                ),
                            }
                            .into(),
                        ),
                        Err(kube::Error::Api(status)) if status.code == 409 => {}
                        Err(e) => {
                            failed = true;
                            env.observe(
                                WorldEvent::ReconcileError {
                                    app: name.to_string(),
                                    error: e.to_string(),
                                }
                                .into(),
                            );
                        }
                    }
                }
                // Some(true): an operation started; Some(false): one completed.
                let operation = match (&completes, starts) {
                    (Some(_), _) => Some(false),
                    (None, true) => Some(true),
                    (None, false) => None,
                };
                let written = api
                    .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                    .await;
                match (written, completes) {
                    (Ok(_), Some(done)) => {
                        env.observe(
                            WorldEvent::Synced {
                                app: key.clone(),
                                revision: done.revision,
                                previous: done.previous,
                                expected: done.expected,
                            }
                            .into(),
                        );
                        (key, None, operation)
                    }
                    // The status is now current: remember the inputs at the version just
                    // written (unless a child is still to be created: looked at again).
                    (Ok(app), None) if !failed => (
                        key,
                        inputs
                            .zip(app.0.metadata.resource_version)
                            .map(|(i, rv)| Inputs {
                                resource_version: rv,
                                ..i
                            }),
                        operation,
                    ),
                    (Ok(_), None) => (key, None, operation),
                    (Err(e), _) => {
                        env.observe(
                            WorldEvent::ReconcileError {
                                app: name.to_string(),
                                error: e.to_string(),
                            }
                            .into(),
                        );
                        (key, None, None)
                    }
                }
            },
        )
        .buffer_unordered(STATUS_PARALLELISM)
        .collect()
        .await;
    for (key, inputs, operation) in written {
        match operation {
            Some(true) => {
                memory.operations.insert(key.clone(), now);
            }
            Some(false) => {
                // Done: refreshed as urgent next tick, like any app written by a sync.
                memory.operations.remove(&key);
                memory.forget(&key);
                memory.pending.insert(key);
                continue;
            }
            None => {}
        }
        match inputs {
            Some(inputs) => memory.remember(key, now, inputs),
            None => {
                memory.forget(&key);
                memory.pending.insert(key); // retried as urgent next tick
            }
        }
    }
}

/// Whether `app` has a sync operation in progress that this controller runs as a visible
/// operation (never with a zero `sync_duration`).
fn running_operation(app: &DynamicObject, config: &Config) -> bool {
    !config.sync_duration.is_zero() && app.data.get("operation").is_some_and(|o| !o.is_null())
}

/// The children `app`'s sync creates now, one client token each, and whether some must
/// wait for tokens (the parent is then looked at again next tick).
fn plan_children(
    app: &DynamicObject,
    patch: &Value,
    git: &SharedGit,
    store: &Store<Shared<DynamicObject>>,
    config: &Config,
    memory: &mut Memory,
) -> (Vec<Value>, bool, Vec<String>) {
    // The resources this refresh writes, or (a refresh that only stamps the time) the app's.
    let resources = patch
        .at("/status/resources")
        .or_else(|| app.data.at("/status/resources"))
        .unwrap_or(&Value::Null);
    // A sync that failed validation (retrying or spent) applied nothing: no child is created.
    let status = patch
        .at("/status/operationState")
        .and(patch.get("status"))
        .or_else(|| app.data.get("status"))
        .unwrap_or(&Value::Null);
    let revision = status
        .at("/operationState/syncResult/revision")
        .and_then(Value::as_str)
        .unwrap_or("");
    let attempt = Attempt::of(status, revision);
    if attempt.spent || attempt.retry_at.is_some() {
        return (Vec::new(), false, Vec::new());
    }
    let (mut children, refused) = missing_children(app, resources, git, store, config);
    let mut granted = 0;
    while granted < children.len() && memory.take() {
        granted += 1;
    }
    let incomplete = granted < children.len();
    children.truncate(granted);
    (children, incomplete, refused)
}

/// Runs the controller until the host stops: a reflector plus a periodic reconcile loop.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    env: SharedEnv,
    client: kube::Client,
    store: Store<Shared<DynamicObject>>,
    touched: Touched,
    git: SharedGit,
    health: HealthOverrides,
    clusters: Clusters,
    config: Config,
) {
    let mut memory = Memory {
        last_fill: env.elapsed(),
        ..Memory::default()
    };
    loop {
        env.sleep(TICK).await;
        tick(
            &env,
            &client,
            &store,
            &touched,
            &git,
            &health,
            &clusters,
            &config,
            &mut memory,
        )
        .await;
    }
}

/// The head a refresh compares with: the branch's head, resolved by the repo-server
/// (`ls-remote`); while the Git provider is down it cannot be resolved, so the app stays at
/// the revision it last compared (`status.sync.revision`), as Argo CD keeps the last
/// comparison when the repo-server fails, or is not compared at all if it never was.
/// [limitation] The controller reads the provider's history directly, not through the
/// repo-server's clone.
fn resolved_head<'g>(
    git: &'g crate::world::git::Git,
    repo: &str,
    status: &Value,
) -> Option<&'g crate::world::git::Commit> {
    if git.serving.outage {
        // Nothing resolved before: nothing to compare with until Git answers.
        let last = status.at("/sync/revision").and_then(Value::as_str)?;
        return git.commit_by_sha(repo, last);
    }
    git.head(repo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_automated_sync_is_retried_five_times_with_argo_cds_backoff() {
        // 5 s × 2ⁿ, at most 3 min: 5, 10, 20, 40, 80 s.
        let waits: Vec<u64> = (0..SYNC_RETRY_LIMIT).map(retry_wait_ms).collect();
        assert_eq!(waits, vec![5_000, 10_000, 20_000, 40_000, 80_000]);
        assert_eq!(retry_wait_ms(7), 180_000);
        // Go's time.Kitchen.
        assert_eq!(kitchen(0), "12:00AM");
        assert_eq!(kitchen((19 * 60 + 2) * 60_000 + 59_000), "7:02PM");
        assert_eq!(kitchen(12 * 3_600_000), "12:00PM");
        // A retry scheduled after the second failed attempt is due 10 s after it.
        let finished = 1_700_000_000_000u64;
        let status = json!({"operationState": {
            "phase": "Running", "retryCount": 2, "finishedAt": rfc3339(finished),
            "syncResult": {"revision": "abc"},
        }});
        let attempt = Attempt::of(&status, "abc");
        assert_eq!(attempt.retries, 2);
        assert_eq!(attempt.retry_at, Some(finished + 10_000));
        assert!(attempt.waiting(finished + 9_999) && !attempt.waiting(finished + 10_000));
        assert!(!attempt.spent);
        // Another revision is a new sync; a Failed one has spent its retries.
        assert_eq!(Attempt::of(&status, "def").retry_at, None);
        let failed =
            json!({"operationState": {"phase": "Failed", "syncResult": {"revision": "abc"}}});
        assert!(Attempt::of(&failed, "abc").spent);
        assert!(!Attempt::of(&failed, "def").spent);
    }
}
