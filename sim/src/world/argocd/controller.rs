//! The simulated application controller.
//!
//! Every `reconcile_every` it walks all Applications (sorted by name: the reflector's map
//! order is random) and computes what Argo CD would report: `sync` against the Git head,
//! `health` from the simulated workload, auto-sync for apps with `syncPolicy.automated`
//! (an `operationState` and a `history` entry), `resources`, and clears the refresh
//! annotation. It writes with a JSON merge patch, and only when something changed
//! (Argo CD also rewrites `reconciledAt` every time; we skip those writes to keep traces
//! readable — a documented fidelity gap). The revision an app is compared with is the
//! newest commit that changed its path, not the repository head (real Argo CD moves
//! `sync.revision` of every app on a repository to each new head; with thousands of apps
//! per repository that fan-out would dominate simulation time without changing what the
//! scenarios test — a second documented gap).

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
    // The revision compared is the newest commit that changed the app's path (what the
    // change-revision controller reports), not the repository head: unrelated commits to a
    // shared repository then leave the app's status alone. Simplification, documented in
    // the module doc.
    let head_sha = git.head(&repo)?.sha.clone();
    let head = git.last_change(&repo, &head_sha, &path)?;
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
    let in_sync = synced_revision == head.sha;
    let automated = app.data.pointer("/spec/syncPolicy/automated").is_some();
    let mut next = status.clone();
    if let Some(map) = next.as_object_mut() {
        map.remove("reconciledAt");
    }
    let now = rfc3339(unix_ms);
    if in_sync {
        next["sync"] = json!({"status": "Synced", "revision": synced_revision, "comparedTo": {"source": {"repoURL": repo, "path": path}}});
    } else if automated {
        let head = head.clone();
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
            .map(|(kind, res)| json!({"kind": kind, "name": res, "namespace": name, "status": sync_status, "health": {"status": health_status}}))
            .collect(),
    );
    next["summary"] = json!({"images": [format!("registry.example/{name}:{}", &head.sha[..7])]});
    Some(next)
}

/// Status writes in flight at once (Argo CD's status processors default to 20).
const STATUS_PARALLELISM: usize = 16;

/// Everything [`desired_status`] depends on that can change while an app's
/// resourceVersion stays put: the newest commit to its path and its health.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Inputs {
    resource_version: String,
    path_head: String,
    health: String,
}

impl Inputs {
    fn of(app: &DynamicObject, git: &SharedGit, health: &HealthOverrides) -> Option<Inputs> {
        let (repo, path) = source_of(app)?;
        let path_head = {
            let git = git.lock();
            let head_sha = git.head(&repo)?.sha.clone();
            git.last_change(&repo, &head_sha, &path)?.sha.clone()
        };
        Some(Inputs {
            resource_version: app.metadata.resource_version.clone()?,
            path_head,
            health: health.get(app.metadata.name.as_deref()?),
        })
    }
}

/// Apps whose last reconcile needed no write, with the inputs it saw: while those inputs
/// are unchanged the outcome is the same, so the status is not recomputed (a speed-up
/// for 10,000-app worlds; it changes no write and no trace).
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
    let mut still_quiet = Quiet::new();
    let patches: Vec<(String, Value)> = apps
        .iter()
        .filter_map(|app| {
            let name = app.metadata.name.clone()?;
            let inputs = Inputs::of(app, git, health);
            if let Some(inputs) = &inputs {
                if quiet.get(&name) == Some(inputs) {
                    still_quiet.insert(name, inputs.clone());
                    return None;
                }
            }
            let refresh = app
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("argocd.argoproj.io/refresh"));
            let mut status = desired_status(app, git, health, config, env.unix_millis())?;
            let current = app.data.get("status").cloned().unwrap_or(json!({}));
            let mut unchanged = current.clone();
            if let Some(map) = unchanged.as_object_mut() {
                map.remove("reconciledAt");
            }
            if status == unchanged && !refresh {
                if let Some(inputs) = inputs {
                    still_quiet.insert(name, inputs);
                }
                return None;
            }
            status["reconciledAt"] = json!(rfc3339(env.unix_millis()));
            let mut patch = json!({"status": status});
            if refresh {
                patch["metadata"] = json!({"annotations": {"argocd.argoproj.io/refresh": null}});
            }
            Some((name, patch))
        })
        .collect();
    *quiet = still_quiet;
    futures::stream::iter(patches)
        .for_each_concurrent(STATUS_PARALLELISM, |(name, patch)| async move {
            if let Err(e) = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                env.observe(
                    WorldEvent::ReconcileError {
                        app: name.to_string(),
                        error: e.to_string(),
                    }
                    .into(),
                );
            }
        })
        .await;
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
