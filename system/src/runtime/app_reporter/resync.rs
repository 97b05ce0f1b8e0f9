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
use crate::core::json::Pointer as _;
use crate::observe::ReporterEvent;

/// Runs the pass periodically until the host stops.
pub async fn run(replica: Arc<Replica>, processor: Arc<Processor>, client: kube::Client) {
    loop {
        replica.env.sleep(replica.config.resync_every).await;
        // The platform answers with this replica's share at the membership it has now.
        let members = replica.ownership().members;
        let read = if replica
            .env
            .buggify(crate::env::Point::ReporterResyncReadFails)
        {
            Err("GET /2.0/api/apps: connection reset (fault point)".to_string())
        } else {
            processor
                .platform_apps(Some((replica.me.as_str(), &members)))
                .await
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
        // This replica's apps, by name (filtered before sorting: a replica owns a fifth of
        // 10,000 apps in queue-overflow; the sort is stable, so the order is the same).
        // Membership read once for the loops below, and again after each await.
        let mut ownership = replica.ownership();
        let mut apps = replica.store.state();
        apps.retain(|app| {
            app.metadata.name.as_deref().is_some_and(|name| {
                replica
                    .config
                    .reports(app.metadata.namespace.as_deref().unwrap_or_default())
                    && ownership.owns(name)
            })
        });
        apps.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let mut requeued = 0;
        for app in &apps {
            let Some(name) = app.metadata.name.as_deref() else {
                continue;
            };
            let namespace = app.metadata.namespace.as_deref().unwrap_or_default();
            let key = super::app_key(namespace, name);
            let status = app.data.get("status").unwrap_or(&Value::Null);
            let text = |p: &str| status.at(p).and_then(Value::as_str).unwrap_or("");
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
            if r.deleted
                || !replica.config.reports(namespace)
                || !ownership.owns(name)
                || in_store()
            {
                continue;
            }
            // Our store lacks it: ask the API server. One list of that name says whether it
            // is gone and, from the same snapshot, gives a resourceVersion newer than any
            // state of it the replica could still be sending. No answer: the next pass asks.
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &application_resource());
            let listed = gone_at(&api, name).await;
            ownership = replica.ownership(); // other tasks ran meanwhile
            let Ok(Some(listed)) = listed else {
                continue;
            };
            let mut state = replica.state();
            if in_store() {
                continue; // created again while the list was answered: the watch has it
            }
            let waiting = state.tombstones.contains_key(key);
            if let Some(rv) = deletion(waiting, listed, r.resource_version) {
                let mut gone = DynamicObject::new(name, &application_resource()).within(namespace);
                gone.metadata.resource_version = Some(rv.to_string());
                state.tombstones.insert(key.clone(), Arc::new(gone));
            }
            state.hardened.push(key);
            deletions += 1;
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

/// The resourceVersion a pass reports an app deleted at, for an app the platform shows at
/// `shown`, the replica's store lacks and the API server listed as gone at `listed`: none
/// when the watch's own deletion already waits (it carries the deletion's resourceVersion,
/// and the app's earlier state may still be in flight ahead of it — the pass's would only
/// replace it); else `listed`, newer than any state of the app, and never at or below what
/// the platform shows.
fn deletion(waiting: bool, listed: u64, shown: u64) -> Option<u64> {
    (!waiting).then_some(listed.max(shown + 1))
}

/// Whether app `name` is gone, from one list of that name: `Some` with the list's
/// resourceVersion when it is, `None` when it is there (or the list has no version).
async fn gone_at(api: &Api<DynamicObject>, name: &str) -> Result<Option<u64>, kube::Error> {
    let params = kube::api::ListParams::default().fields(&format!("metadata.name={name}"));
    let list = api.list(&params).await?;
    let listed = list
        .metadata
        .resource_version
        .and_then(|rv| rv.parse().ok());
    Ok(listed.filter(|_| list.items.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::deletion;

    /// swarm-hosted found it: a pass replaced the watch's deletion (at 283), waiting behind
    /// an older state in flight (256), with its own at one past what the platform showed
    /// (226) — older than the state in flight, so the platform ignored it as stale.
    #[test]
    fn a_waiting_deletion_is_left_alone() {
        assert_eq!(deletion(true, 300, 225), None);
    }

    #[test]
    fn a_deletion_the_pass_finds_is_at_the_listed_version_not_one_past_the_platforms() {
        assert_eq!(deletion(false, 300, 225), Some(300));
        // The platform never sees it at or below what it shows.
        assert_eq!(deletion(false, 200, 225), Some(226));
    }
}
