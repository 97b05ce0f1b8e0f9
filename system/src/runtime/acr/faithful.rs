//! The ACR controller as Codefresh ships it (`acr_controller/controller/*`,
//! `acr_controller/service/acr_service.go`): a broadcaster that forwards annotated apps'
//! informer events into a 1,000-slot channel without blocking (full → dropped), and one
//! consumer that re-GETs the app and computes while the sync's `operation` is set.

use futures::{StreamExt, TryStreamExt};
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::Value;
use tokio::sync::mpsc;

use super::{
    annotated, apps, history, key_of, text, watched_apps, ArgoCd, CallError, Config, Field,
};
use crate::core::json::Pointer as _;
use crate::env::kube::SeededBackoff;
use crate::env::SharedEnv;
use crate::observe::AcrEvent;

/// Why one event's computation failed (logged; the event is gone).
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    #[error("argo cd: {0}")]
    ArgoCd(#[from] CallError),
    #[error("context deadline exceeded")]
    Deadline,
}

/// An informer event as the broadcaster forwards it.
struct Event {
    deleted: bool,
    app: DynamicObject,
}

/// `(current, previous)` as `getRevisions` chooses them (research §4.1).
fn revisions(app: &Value) -> (String, String) {
    let history = history(app);
    let operation_revision = text(app, "/operation/sync/revision");
    if history.is_empty() {
        return (operation_revision, String::new());
    }
    let finished = text(app, "/status/sync/status") == "Synced"
        && app.at("/status/operationState/syncResult").is_some();
    if finished {
        let previous = match history.len() {
            1 => String::new(),
            n => history[n - 2].clone(),
        };
        return (
            text(app, "/status/operationState/syncResult/revision"),
            previous,
        );
    }
    (operation_revision, history[history.len() - 1].clone())
}

/// `getChangeRevision`: the first of the *plural* `changeRevisions` of the operation or of
/// the operation state (the singular field the controller writes is not looked at).
fn already_computed(app: &Value) -> bool {
    [
        "/operation/sync/changeRevisions/0",
        "/status/operationState/operation/sync/changeRevisions/0",
    ]
    .iter()
    .any(|p| {
        app.at(p)
            .and_then(Value::as_str)
            .is_some_and(|r| !r.is_empty())
    })
}

fn has_operation(app: &Value) -> bool {
    app.at("/operation/sync").is_some_and(|s| !s.is_null())
}

struct Service {
    env: SharedEnv,
    client: kube::Client,
    argocd: ArgoCd,
}

impl Service {
    /// `ChangeRevision` for one event.
    async fn change_revision(&self, event: &DynamicObject) -> Result<(), Error> {
        let key = key_of(event);
        let (namespace, name) = (
            event.metadata.namespace.clone().unwrap_or_default(),
            event.metadata.name.clone().unwrap_or_default(),
        );
        let api = apps(&self.client, &namespace);
        let app = serde_json::to_value(api.get(&name).await?).unwrap_or(Value::Null);
        if !has_operation(&app) {
            if event.data.get("operation").is_some_and(|o| !o.is_null()) {
                self.env.observe(AcrEvent::Late { app: key }.into());
            }
            return Ok(());
        }
        if already_computed(&app) {
            return Ok(());
        }
        let (current, previous) = revisions(&app);
        let Some(revision) = self
            .argocd
            .change_revision(&name, &namespace, &current, &previous)
            .await?
        else {
            return Ok(()); // "Revision for application is empty"
        };
        let app = serde_json::to_value(api.get(&name).await?).unwrap_or(Value::Null);
        let field = if app
            .at("/status/operationState/operation/sync")
            .is_some_and(|s| !s.is_null())
        {
            Field::OperationState
        } else {
            Field::Operation
        };
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(field.patch(Some(&revision))),
        )
        .await?;
        self.env.observe(
            AcrEvent::Patched {
                app: key,
                field,
                current,
                previous,
                revision,
            }
            .into(),
        );
        Ok(())
    }
}

/// Runs the broadcaster and the single consumer until the host stops.
pub async fn run(env: SharedEnv, config: Config) {
    let client = crate::env::kube::client(env.clone(), &config.apiserver);
    let (tx, mut rx) = mpsc::channel::<Event>(config.channel_capacity.max(1));
    let watch_env = env.clone();
    let watch_api = watched_apps(&client, &config.apiserver.namespace);
    tokio::spawn(async move {
        let mut events = watcher(watch_api, watcher::Config::default())
            .backoff(SeededBackoff::new(watch_env.clone()))
            .map_ok(crate::env::kube::unwire)
            .boxed();
        while let Some(event) = events.next().await {
            let (deleted, app) = match event {
                Ok(watcher::Event::Apply(app) | watcher::Event::InitApply(app)) => (false, app),
                Ok(watcher::Event::Delete(app)) => (true, app),
                Ok(_) => continue,
                Err(error) => {
                    watch_env.observe(
                        AcrEvent::WatchError {
                            error: error.to_string(),
                        }
                        .into(),
                    );
                    continue;
                }
            };
            if !annotated(&app) {
                continue;
            }
            let key = key_of(&app);
            // `select { case ch <- event: default: drop }`.
            match tx.try_send(Event { deleted, app }) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    watch_env.observe(AcrEvent::Dropped { app: key }.into())
                }
                Err(mpsc::error::TrySendError::Closed(_)) => return,
            }
        }
    });
    let service = Service {
        argocd: ArgoCd::new(
            env.clone(),
            &config.argocd_addr,
            &config.argocd_token,
            config.call_timeout,
        ),
        env: env.clone(),
        client,
    };
    while let Some(event) = rx.recv().await {
        if event.deleted {
            continue; // Deleted (and Bookmark) events are ignored
        }
        let outcome =
            match tokio::time::timeout(config.event_timeout, service.change_revision(&event.app))
                .await
            {
                Ok(outcome) => outcome,
                Err(_) => Err(Error::Deadline),
            };
        if let Err(error) = outcome {
            env.observe(
                AcrEvent::Failed {
                    app: key_of(&event.app),
                    error: error.to_string(),
                }
                .into(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn revisions_follow_get_revisions() {
        let op = |history: &[&str], sync: &str, result: Option<&str>| {
            let mut app = json!({
                "operation": {"sync": {"revision": "op"}},
                "status": {
                    "history": history.iter().map(|r| json!({"revision": r})).collect::<Vec<_>>(),
                    "sync": {"status": sync},
                },
            });
            if let Some(r) = result {
                app["status"]["operationState"] = json!({"syncResult": {"revision": r}});
            }
            revisions(&app)
        };
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(op(&[], "OutOfSync", None), pair("op", ""));
        assert_eq!(op(&["h1", "h2"], "OutOfSync", Some("h2")), pair("op", "h2"));
        assert_eq!(op(&["h1", "h2"], "Synced", Some("h2")), pair("h2", "h1"));
        assert_eq!(op(&["h1"], "Synced", Some("h1")), pair("h1", ""));
    }

    #[test]
    fn only_the_plural_field_counts_as_computed() {
        assert!(!already_computed(&json!({
            "operation": {"sync": {"changeRevision": "abc"}},
            "status": {"operationState": {"operation": {"sync": {"changeRevision": "abc"}}}},
        })));
        assert!(already_computed(&json!({
            "status": {"operationState": {"operation": {"sync": {"changeRevisions": ["abc"]}}}},
        })));
    }
}
