//! hardened: anti-entropy with the platform.
//!
//! Every `resync_every` the replica reads the platform's read model and re-queues each app
//! it owns whose reported state lags the API server's; apps the platform still shows but
//! the replica's store lacks are confirmed gone with a direct GET (404) and reported
//! deleted. This repairs what the event stream alone cannot: deletes missed while a replica
//! was restarting or partitioned (a relist shows no DELETED events) and sends lost to
//! faults. The faithful reporter has no such pass — that is the real system's flaw.

use std::sync::Arc;

use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::ObjectRef;
use serde_json::Value;

use super::process::Processor;
use super::{application_resource, Replica};
use crate::observe::ReporterEvent;

/// Runs the pass periodically until the host stops.
pub async fn run(replica: Arc<Replica>, processor: Arc<Processor>, client: kube::Client) {
    loop {
        replica.env.sleep(replica.config.resync_every).await;
        let read = if replica
            .env
            .buggify(crate::env::Point::ReporterResyncReadFails)
        {
            Err("GET /2.0/api/apps: connection reset (fault point)".to_string())
        } else {
            processor.platform_apps().await
        };
        let Ok(reported) = read else {
            replica.env.observe(
                ReporterEvent::ResyncError {
                    replica: replica.me.clone(),
                }
                .into(),
            );
            continue;
        };
        let mut apps = replica.store.state();
        apps.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let mut requeued = 0;
        for app in &apps {
            let Some(name) = app.metadata.name.as_deref() else {
                continue;
            };
            let namespace = app.metadata.namespace.as_deref().unwrap_or_default();
            if !replica.config.reports(namespace) || !replica.owns(name) {
                continue;
            }
            let key = super::app_key(namespace, name);
            let status = app.data.get("status").unwrap_or(&Value::Null);
            let text = |p: &str| status.pointer(p).and_then(Value::as_str).unwrap_or("");
            let lagging = match reported.get(&key) {
                None => true,
                Some(r) => {
                    r.deleted
                        || r.sync_status != text("/sync/status")
                        || r.revision != text("/sync/revision")
                        || r.health_status != text("/health/status")
                }
            };
            if lagging {
                let mut state = replica.state();
                state.forced.insert(key.clone());
                state.hardened.push(&key);
                requeued += 1;
            }
        }
        let mut deletions = 0;
        for (key, r) in &reported {
            let Some((namespace, name)) = key.split_once('/') else {
                continue;
            };
            let in_store = || {
                let at = ObjectRef::new_with(name, application_resource()).within(namespace);
                replica.store.get(&at).is_some()
            };
            if r.deleted || !replica.config.reports(namespace) || !replica.owns(name) || in_store()
            {
                continue;
            }
            // Our store lacks it: confirm with the API server before reporting a deletion.
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &application_resource());
            if let Ok(None) = api.get_opt(name).await {
                // A deletion the watch delivered is already waiting (its app's earlier state
                // may still be in flight): it carries the deletion's own resourceVersion.
                let waiting = replica.state().tombstones.contains_key(key);
                let gone = if waiting {
                    None
                } else {
                    let rv = tombstone_rv(&api, r.resource_version).await;
                    let mut gone =
                        DynamicObject::new(name, &application_resource()).within(namespace);
                    gone.metadata.resource_version = Some(rv.to_string());
                    Some(Arc::new(gone))
                };
                let mut state = replica.state();
                if let Some(gone) = gone {
                    state.tombstones.entry(key.clone()).or_insert(gone);
                }
                state.hardened.push(key);
                deletions += 1;
            }
        }
        replica.env.observe(
            ReporterEvent::Resync {
                replica: replica.me.clone(),
                requeued: requeued as u64,
                deletions: deletions as u64,
            }
            .into(),
        );
        replica.wake.notify_waiters();
    }
}

/// The resourceVersion a deletion found by the pass is reported at: the API server's
/// current one (a list of at most one app), which is newer than any state of the app the
/// replica could still be sending — not just newer than what the platform showed when the
/// pass read it. Without an answer, one past what the platform shows.
async fn tombstone_rv(api: &Api<DynamicObject>, shown: u64) -> u64 {
    let params = kube::api::ListParams::default().limit(1);
    let current = match api.list(&params).await {
        Ok(list) => list
            .metadata
            .resource_version
            .and_then(|rv| rv.parse::<u64>().ok()),
        Err(_) => None,
    };
    current.unwrap_or(0).max(shown + 1)
}
