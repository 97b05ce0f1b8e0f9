//! The simulated application controller.
//!
//! Every `reconcile_every` (Argo CD's `timeout.reconciliation`; the Codefresh chart sets
//! 20 s) it walks all Applications (sorted by name: the reflector's map order is random) and
//! does what Argo CD's full refresh does: compares each app with the **repository head**
//! (so every app on a repository moves `sync.revision` to each new head, even when its own
//! path did not change — the monorepo churn the ACR controller exists for), computes
//! `health` from the simulated workload, auto-syncs apps with `syncPolicy.automated` (an
//! `operationState` and a `history` entry), fills `resources`, clears the refresh
//! annotation, and **always writes `status.reconciledAt` and `status.observedAt`** — so
//! every app reaches every watcher as a Modified event once per period, as in production,
//! before any reporter's dedup runs. Writes are JSON merge patches.
//!
//! Speed: an app whose inputs (resourceVersion, repository head, health) did not change
//! since its last reconcile gets only the two timestamps patched, without recomputing its
//! status; so per-app work beyond that one small write is proportional to what changed.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::reflector::Store;
use serde_json::{json, Value};

use orrery_system::env::SharedEnv;
use orrery_system::observe::WorldEvent;

use super::{resources_of, source_of, HealthOverrides, NAMESPACE};
use crate::world::apiserver::store::rfc3339;
use crate::world::git::SharedGit;

/// Controller settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Reconcile period.
    pub reconcile_every: Duration,
    /// Entries kept in `status.history`.
    pub history_limit: usize,
    /// Namespace of the Applications (Argo CD's own namespace).
    pub namespace: String,
    /// Address the server listens on.
    pub listen: String,
}

impl Default for Config {
    /// Reconcile every 10 s, keep 10 history entries, `argocd` namespace, port 8080.
    fn default() -> Self {
        Config {
            reconcile_every: Duration::from_secs(10),
            history_limit: 10,
            namespace: NAMESPACE.into(),
            listen: "0.0.0.0:8080".into(),
        }
    }
}

/// The status Argo CD would report for `app` now, or `None` if its source is unusable.
fn desired_status(
    app: &DynamicObject,
    git: &SharedGit,
    health: &HealthOverrides,
    config: &Config,
    unix_ms: u64,
) -> Option<Value> {
    let name = app.metadata.name.clone()?;
    let (repo, path) = source_of(app)?;
    let git = git.lock();
    // Compared with the repository head, as Argo CD does: in sync when the app's files at
    // the head are the ones deployed (the newest commit touching its path is the same).
    let head = git.head(&repo)?.clone();
    let head_sha = head.sha.clone();
    let path_head = git.last_change(&repo, &head_sha, &path)?.sha.clone();
    let status = app.data.get("status").cloned().unwrap_or(json!({}));
    // What is deployed is the last history entry; `sync.revision` is only what was compared.
    let synced_revision = status
        .get("history")
        .and_then(Value::as_array)
        .and_then(|h| h.last())
        .and_then(|h| h["revision"].as_str())
        .unwrap_or("")
        .to_string();
    let head_files = git.files_at(&repo, &head_sha, &path)?;
    let in_sync = !synced_revision.is_empty()
        && git
            .last_change(&repo, &synced_revision, &path)
            .is_some_and(|c| c.sha == path_head);
    let automated = app.data.pointer("/spec/syncPolicy/automated").is_some();
    let mut next = status.clone();
    if let Some(map) = next.as_object_mut() {
        map.remove("reconciledAt");
    }
    let now = rfc3339(unix_ms);
    if in_sync {
        next["sync"] = json!({"status": "Synced", "revision": head_sha, "comparedTo": {"source": {"repoURL": repo, "path": path}}});
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
        next["sync"] = json!({"status": "Synced", "revision": head.sha, "comparedTo": {"source": {"repoURL": repo, "path": path}}});
    } else {
        next["sync"] = json!({"status": "OutOfSync", "revision": head.sha, "comparedTo": {"source": {"repoURL": repo, "path": path}}});
    }
    let health_status = health.get(&name);
    let sync_status = next["sync"]["status"].clone();
    next["health"] = json!({"status": health_status});
    next["resources"] = Value::Array(
        resources_of(&head_files, &name)
            .into_iter()
            .map(|r| json!({"group": r.group, "version": r.version, "kind": r.kind, "namespace": name, "name": r.name, "status": sync_status, "health": {"status": health_status}}))
            .collect(),
    );
    next["summary"] = json!({"images": [format!("registry.example/{name}:{}", &head.sha[..7])]});
    Some(next)
}

/// Status writes in flight at once (Argo CD's status processors default to 20).
const STATUS_PARALLELISM: usize = 16;

/// Everything [`desired_status`] depends on that can change while an app's
/// resourceVersion stays put: the repository head and its health. (The app's own
/// timestamp writes move its resourceVersion; the version after such a write is recorded.)
#[derive(Clone, Debug, PartialEq, Eq)]
struct Inputs {
    resource_version: String,
    head: String,
    health: String,
}

impl Inputs {
    fn of(app: &DynamicObject, git: &SharedGit, health: &HealthOverrides) -> Option<Inputs> {
        let (repo, _) = source_of(app)?;
        let head = git.lock().head(&repo)?.sha.clone();
        Some(Inputs {
            resource_version: app.metadata.resource_version.clone()?,
            head,
            health: health.get(app.metadata.name.as_deref()?),
        })
    }
}

/// Apps whose status was current at their last reconcile, with the inputs it saw (the
/// resourceVersion the controller's own write produced): while those inputs are unchanged
/// the status is the same, so only the timestamps are written.
type Quiet = BTreeMap<String, Inputs>;

/// Reconciles once: every app, in name order, writing up to [`STATUS_PARALLELISM`] at once.
async fn reconcile_all(
    env: &SharedEnv,
    api: &Api<DynamicObject>,
    store: &Store<DynamicObject>,
    git: &SharedGit,
    health: &HealthOverrides,
    config: &Config,
    quiet: &mut Quiet,
) {
    use futures::StreamExt;
    let mut apps = store.state();
    apps.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let now = rfc3339(env.unix_millis());
    let stamps = json!({"reconciledAt": now, "observedAt": now});
    let patches: Vec<(String, Option<Inputs>, Value)> = apps
        .iter()
        .filter_map(|app| {
            let name = app.metadata.name.clone()?;
            let inputs = Inputs::of(app, git, health);
            if inputs.is_some() && quiet.get(&name) == inputs.as_ref() {
                // Nothing it depends on changed: the refresh only stamps the time.
                return Some((name, inputs, json!({"status": stamps})));
            }
            let refresh = app
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("argocd.argoproj.io/refresh"));
            let mut status = desired_status(app, git, health, config, env.unix_millis())?;
            if let Some(map) = status.as_object_mut() {
                map.remove("observedAt");
            }
            status["reconciledAt"] = stamps["reconciledAt"].clone();
            status["observedAt"] = stamps["observedAt"].clone();
            let mut patch = json!({"status": status});
            if refresh {
                patch["metadata"] = json!({"annotations": {"argocd.argoproj.io/refresh": null}});
            }
            Some((name, inputs, patch))
        })
        .collect();
    let written: Vec<(String, Option<Inputs>)> = futures::stream::iter(patches)
        .map(|(name, inputs, patch)| async move {
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                // The status is now current: remember the inputs at the version just written.
                Ok(app) => (
                    name,
                    inputs.zip(app.metadata.resource_version).map(|(i, rv)| Inputs {
                        resource_version: rv,
                        ..i
                    }),
                ),
                Err(e) => {
                    env.observe(
                        WorldEvent::ReconcileError {
                            app: name.to_string(),
                            error: e.to_string(),
                        }
                        .into(),
                    );
                    (name, None)
                }
            }
        })
        .buffer_unordered(STATUS_PARALLELISM)
        .collect()
        .await;
    quiet.clear();
    for (name, inputs) in written {
        if let Some(inputs) = inputs {
            quiet.insert(name, inputs);
        }
    }
}

/// Runs the controller until the host stops: a reflector plus a periodic reconcile loop.
pub async fn run(
    env: SharedEnv,
    client: kube::Client,
    store: Store<DynamicObject>,
    git: SharedGit,
    health: HealthOverrides,
    config: Config,
) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client, &config.namespace, &super::application_resource());
    let mut quiet = Quiet::new();
    loop {
        env.sleep(config.reconcile_every).await;
        reconcile_all(&env, &api, &store, &git, &health, &config, &mut quiet).await;
    }
}
