//! Our ACR controller: nothing dropped, nothing missed, no race with a new sync.
//!
//! - The Application informer marks apps pending (a set: one entry per app, whatever the
//!   burst); `workers` compute at once, one computation per app at a time.
//! - An app is judged from its state, not from the event that woke it: a running sync
//!   (`operation` set) gets its change revision in `operation.sync.changeRevision`, which
//!   Argo CD copies into the finished operation state; a finished sync (the last history
//!   entry is the `syncResult`) has its `status.operationState` value checked against the
//!   last two history entries and corrected — written, or removed when no commit in the
//!   range touches the app (a value the merge patch carried over from the previous sync).
//! - A first sync (no earlier history entry): the repo-server's answer for an empty
//!   previous revision is the current revision whether it touched the app or not, so the
//!   Git provider is asked for the newest commit from it that touched the app's paths
//!   ([`super::GitApi`], `git log -1 --first-parent <current> -- <paths>`). Without a
//!   provider configured, the repo-server is asked only whether the sync's own commit
//!   touched the app (`previousRevision` = `currentRevision`); a first sync at a commit
//!   that did not, or at the root commit (`git diff-tree` lists nothing for it), then gets
//!   no change revision.
//! - Every write carries the resourceVersion it was computed from (a new sync in between
//!   → 409 → the app is judged again, with backoff, from the cached answer), and records
//!   `previous..current@<paths digest>=revision` in the [`COMPUTED`] annotation, so a
//!   restarted controller skips apps already right (and recomputes an app whose paths
//!   changed).
//! - Argo CD or Git failures are retried with 1–30 s jittered backoff; a resync re-checks
//!   every app every `resync_every`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::{json, Value};

use super::{
    annotated, application_resource, apps, history, key_of, paths, text, watched_apps, ArgoCd,
    CallError, Config, Field, GitApi,
};
use crate::core::json::Pointer as _;
use crate::env::kube::SeededBackoff;
use crate::env::SharedEnv;
use crate::observe::AcrEvent;

/// Annotation recording what the controller last computed:
/// `previous..current@<paths digest>=revision`.
pub const COMPUTED: &str = "acr.orrery.io/computed";

/// How long an idle worker waits before looking for work again.
const IDLE: Duration = Duration::from_millis(100);

/// Apps waiting, apps being computed, and retry attempts per app.
#[derive(Default)]
struct Queue {
    pending: BTreeSet<String>,
    in_flight: BTreeSet<String>,
    attempts: BTreeMap<String, u32>,
}

type Shared = Arc<Mutex<Queue>>;

fn lock(queue: &Shared) -> std::sync::MutexGuard<'_, Queue> {
    queue.lock().expect("acr queue lock poisoned")
}

/// What an app's state asks for: the sync range to compute and the field to write.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    current: String,
    previous: String,
    field: Field,
}

/// The sync `app` is in or has just finished, if any (see the module docs).
fn target(app: &Value) -> Option<Target> {
    let history = history(app);
    let running = app.at("/operation/sync").is_some_and(|s| !s.is_null());
    if running {
        let current = text(app, "/operation/sync/revision");
        if current.is_empty() {
            return None; // Argo CD resolves it when it runs; judged when it finished
        }
        return Some(Target {
            current,
            previous: history.last().cloned().unwrap_or_default(),
            field: Field::Operation,
        });
    }
    let last = history.last()?;
    if text(app, "/status/operationState/syncResult/revision") != *last {
        return None;
    }
    let previous = match history.len() {
        1 => String::new(),
        n => history[n - 2].clone(),
    };
    Some(Target {
        current: last.clone(),
        previous,
        field: Field::OperationState,
    })
}

/// A computation's scope: the sync range and the app's refresh paths.
struct Scope<'a> {
    target: &'a Target,
    refresh: &'a [String],
}

impl Scope<'_> {
    /// `previous..current@<FNV-1a of the paths>=revision`, as [`COMPUTED`] records it
    /// (`None`: the scope alone, the cache's key).
    fn record(&self, revision: Option<&str>) -> String {
        let paths = crate::env::fnv1a_64(self.refresh.join(";").as_bytes());
        let scope = format!(
            "{}..{}@{paths:016x}",
            self.target.previous, self.target.current
        );
        match revision {
            Some(revision) => format!("{scope}={revision}"),
            None => scope,
        }
    }
}

enum Outcome {
    Done,
    /// The app moved since it was read: judge it again soon.
    Moved,
}

/// Why a judgement failed, and how long the server asked to be left alone.
struct Failure {
    error: String,
    /// A rate limit's wait (`retry-after`, `x-ratelimit-reset`): the retry comes after it.
    wait: Option<Duration>,
}

impl Failure {
    fn plain(error: String) -> Self {
        Failure { error, wait: None }
    }
}

impl From<CallError> for Failure {
    fn from(error: CallError) -> Self {
        Failure {
            wait: error.retry_after(),
            error: error.to_string(),
        }
    }
}

struct Worker {
    env: SharedEnv,
    client: kube::Client,
    argocd: ArgoCd,
    git: Option<GitApi>,
    /// Before this time (Unix ms) the provider is not asked: it named a wait (a rate limit),
    /// which holds for every app, not only the one whose call was refused.
    git_not_before_ms: Mutex<u64>,
    store: Store<DynamicObject>,
    /// The last answer per app, by scope: a write that met a newer version retries without
    /// asking Argo CD or the provider again.
    computed: Mutex<BTreeMap<String, (String, Option<String>)>>,
}

impl Worker {
    async fn judge(&self, key: &str) -> Result<Outcome, Failure> {
        let Some((namespace, name)) = key.split_once('/') else {
            return Ok(Outcome::Done);
        };
        let reference = ObjectRef::new_with(name, application_resource()).within(namespace);
        let Some(object) = self.store.get(&reference) else {
            self.computed
                .lock()
                .expect("acr cache lock poisoned")
                .remove(key);
            return Ok(Outcome::Done); // deleted
        };
        let app = serde_json::to_value(&*object).unwrap_or(Value::Null);
        let Some(target) = target(&app) else {
            return Ok(Outcome::Done);
        };
        let existing = target.field.read(&app);
        let annotation = |key: &str| {
            object
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(key))
                .cloned()
                .unwrap_or_default()
        };
        let refresh = paths::refresh_paths(
            &annotation(paths::MANIFEST_GENERATE_PATHS),
            &text(&app, "/spec/source/path"),
        );
        let scope = Scope {
            target: &target,
            refresh: &refresh,
        };
        if annotation(COMPUTED) == scope.record(Some(&existing)) {
            return Ok(Outcome::Done); // computed for this range and these paths, still in place
        }
        // Computed before (a write that met a newer version): not asked again.
        let cached = self
            .computed
            .lock()
            .expect("acr cache lock poisoned")
            .get(key)
            .filter(|(record, _)| *record == scope.record(None))
            .map(|(_, revision)| revision.clone());
        let revision = match (cached, &self.git, target.previous.is_empty()) {
            (Some(revision), _, _) => Ok(revision),
            // A first sync: the newest commit that touched the app, from the provider.
            (None, Some(git), true) => {
                let now_ms = self.env.unix_millis();
                let not_before = *self
                    .git_not_before_ms
                    .lock()
                    .expect("acr gate lock poisoned");
                if now_ms < not_before {
                    return Err(Failure {
                        error: "the Git provider asked to wait (rate limit)".to_string(),
                        wait: Some(Duration::from_millis(not_before - now_ms)),
                    });
                }
                let repo = text(&app, "/spec/source/repoURL");
                let answer = git.newest_touching(&repo, &target.current, &refresh).await;
                if let Some(wait) = answer.as_ref().err().and_then(CallError::retry_after) {
                    let until = self
                        .env
                        .unix_millis()
                        .saturating_add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
                    let mut gate = self
                        .git_not_before_ms
                        .lock()
                        .expect("acr gate lock poisoned");
                    *gate = (*gate).max(until);
                }
                answer
            }
            // Without a provider: only whether its own commit touched the app.
            (None, None, true) => {
                self.argocd
                    .change_revision(name, namespace, &target.current, &target.current)
                    .await
            }
            (None, _, false) => {
                self.argocd
                    .change_revision(name, namespace, &target.current, &target.previous)
                    .await
            }
        }
        .map_err(Failure::from)?;
        self.computed
            .lock()
            .expect("acr cache lock poisoned")
            .insert(key.to_string(), (scope.record(None), revision.clone()));
        let mut patch = target.field.patch(revision.as_deref());
        patch["metadata"] = json!({
            "resourceVersion": object.metadata.resource_version,
            "annotations": {COMPUTED: scope.record(revision.as_deref())},
        });
        match apps(&self.client, namespace)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => return Ok(Outcome::Moved),
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(Outcome::Done),
            Err(e) => return Err(Failure::plain(e.to_string())),
        }
        if revision.as_deref().unwrap_or("") != existing {
            self.env.observe(
                AcrEvent::Patched {
                    app: key.to_string(),
                    field: target.field,
                    current: target.current,
                    previous: target.previous,
                    revision: revision.unwrap_or_default(),
                }
                .into(),
            );
        }
        Ok(Outcome::Done)
    }
}

/// The pause before retry `attempt` (1-based): `initial` doubled per attempt up to `max`,
/// jittered down to half.
fn backoff(env: &SharedEnv, config: &Config, attempt: u32) -> Duration {
    let base = config
        .retry_initial
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
        .min(config.retry_max);
    let half = base / 2;
    half + Duration::from_millis(env.random_u64() % (half.as_millis() as u64 + 1))
}

async fn work(env: SharedEnv, config: Config, queue: Shared, worker: Arc<Worker>) {
    loop {
        let next = {
            let mut q = lock(&queue);
            let key = q
                .pending
                .iter()
                .find(|k| !q.in_flight.contains(*k))
                .cloned();
            if let Some(key) = &key {
                q.pending.remove(key);
                q.in_flight.insert(key.clone());
            }
            key
        };
        let Some(key) = next else {
            env.sleep(IDLE).await;
            continue;
        };
        let outcome = worker.judge(&key).await;
        let retry = {
            let mut q = lock(&queue);
            q.in_flight.remove(&key);
            match &outcome {
                Ok(Outcome::Done) => {
                    q.attempts.remove(&key);
                    None
                }
                // Moved (the store lags a newer version) backs off like a failure; a rate
                // limit's wait comes first, the backoff spreading the retries after it.
                Ok(Outcome::Moved) | Err(_) => {
                    let attempt = q.attempts.entry(key.clone()).or_default();
                    *attempt += 1;
                    let wait = outcome.as_ref().err().and_then(|f| f.wait);
                    Some(
                        wait.unwrap_or_default()
                            .saturating_add(backoff(&env, &config, *attempt)),
                    )
                }
            }
        };
        if let Err(failure) = outcome {
            env.observe(
                AcrEvent::Failed {
                    app: key.clone(),
                    error: failure.error,
                }
                .into(),
            );
        }
        if let Some(pause) = retry {
            let (env, queue) = (env.clone(), queue.clone());
            tokio::spawn(async move {
                env.sleep(pause).await;
                lock(&queue).pending.insert(key);
            });
        }
    }
}

/// Runs the informer, the workers and the resync until the host stops.
pub async fn run(env: SharedEnv, config: Config) {
    let client = crate::env::kube::client(env.clone(), &config.apiserver);
    let writer = reflector::store::Writer::new(application_resource());
    let store = writer.as_reader();
    let queue = Shared::default();
    let watch_env = env.clone();
    let watched = queue.clone();
    let events = watcher(
        watched_apps(&client, &config.apiserver.namespace),
        watcher::Config::default(),
    )
    .backoff(SeededBackoff::new(env.clone()))
    .map_ok(crate::env::kube::unwire);
    tokio::spawn(reflector::reflector(writer, events).for_each(move |event| {
        match &event {
            Ok(watcher::Event::Apply(app) | watcher::Event::InitApply(app)) if annotated(app) => {
                lock(&watched).pending.insert(key_of(app));
            }
            Err(error) => watch_env.observe(
                AcrEvent::WatchError {
                    error: error.to_string(),
                }
                .into(),
            ),
            _ => {}
        }
        async {}
    }));
    let worker = Arc::new(Worker {
        argocd: ArgoCd::new(
            env.clone(),
            &config.argocd_addr,
            &config.argocd_token,
            config.call_timeout,
        ),
        git: config
            .git_api
            .as_deref()
            .map(|addr| GitApi::new(env.clone(), addr, config.call_timeout)),
        git_not_before_ms: Mutex::new(0),
        env: env.clone(),
        client,
        store: store.clone(),
        computed: Mutex::default(),
    });
    for _ in 0..config.workers.max(1) {
        tokio::spawn(work(
            env.clone(),
            config.clone(),
            queue.clone(),
            worker.clone(),
        ));
    }
    loop {
        env.sleep(config.resync_every).await;
        let keys: Vec<String> = store
            .state()
            .iter()
            .filter(|app| annotated(app))
            .map(|app| key_of(app))
            .collect();
        let count = keys.len() as u64;
        lock(&queue).pending.extend(keys);
        env.observe(AcrEvent::Resync { apps: count }.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(history: &[&str], operation: Option<&str>, result: Option<&str>) -> Value {
        let mut app = json!({"status": {
            "history": history.iter().map(|r| json!({"revision": r})).collect::<Vec<_>>(),
        }});
        if let Some(r) = operation {
            app["operation"] = json!({"sync": {"revision": r}});
        }
        if let Some(r) = result {
            app["status"]["operationState"] = json!({"syncResult": {"revision": r}});
        }
        app
    }

    #[test]
    fn a_running_sync_is_judged_against_the_last_deployment_and_a_finished_one_against_history() {
        let t = |current: &str, previous: &str, field| Target {
            current: current.into(),
            previous: previous.into(),
            field,
        };
        assert_eq!(
            target(&app(&["a"], Some("b"), Some("a"))),
            Some(t("b", "a", Field::Operation))
        );
        assert_eq!(
            target(&app(&["a", "b"], None, Some("b"))),
            Some(t("b", "a", Field::OperationState))
        );
        assert_eq!(
            target(&app(&["a"], None, Some("a"))),
            Some(t("a", "", Field::OperationState))
        );
        // History and result disagree (a sync that failed, or a status being written).
        assert_eq!(target(&app(&["a", "b"], None, Some("c"))), None);
        assert_eq!(target(&app(&[], None, None)), None);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter_down_to_half() {
        let env: SharedEnv = Arc::new(crate::env::RealEnv::new("test"));
        let config = Config::new(
            crate::core::Variant::Hardened,
            crate::env::kube::KubeTarget::new("127.0.0.1:1"),
            "127.0.0.1:2",
            "t",
        );
        for (attempt, full) in [(1, 1_000), (2, 2_000), (6, 30_000), (40, 30_000)] {
            let pause = backoff(&env, &config, attempt).as_millis() as u64;
            assert!(
                pause >= full / 2 && pause <= full,
                "attempt {attempt}: {pause}"
            );
        }
    }
}
