//! The read model the events path projects into: per app, the last reported state and the
//! resourceVersion it reflects. Projection is idempotent: an event older than what is
//! stored is ignored, one already applied is counted as a duplicate.
//!
//! Keyed by runtime first — the `<account>-<runtime>` name of the token that sent the
//! event, never a name from the payload — then by `namespace/name`: two tenants' apps with
//! the same name are two entries, and one runtime's events cannot touch another's.

use std::collections::BTreeMap;

use crate::core::json::Pointer as _;
use serde::Serialize;

/// What the platform shows for one app.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AppState {
    /// The app's `metadata.resourceVersion` this state reflects.
    pub resource_version: u64,
    /// The app was reported deleted.
    pub deleted: bool,
    /// `sync.status`.
    pub sync_status: String,
    /// Revision compared.
    pub revision: String,
    /// `health.status`.
    pub health_status: String,
    /// Runtime that reported it.
    pub runtime: String,
    /// Errors of type `transient` in the last event for this state: the reporter's failed
    /// Argo CD reads (a revoked token, an unreachable server), not the app's own problems.
    /// A repeat of the same state refreshes them. (Left out of the JSON when zero.)
    #[serde(skip_serializing_if = "is_zero")]
    pub read_errors: u32,
    /// The app version the newest report for this state carried (`appVersions.appVersion`;
    /// empty: none).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub app_version: String,
    /// The sync's change revision (`operation.sync.changeRevision`; empty: none).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub change_revision: String,
    /// The commits the newest report for this state described for its change revisions
    /// (from `app.meta.revisions-metadata`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub change_commits: Vec<CommitShown>,
    /// The app's labels (what permission rules match on; the GitOps API shows them, the
    /// REST answer leaves them out as it always did).
    #[serde(skip)]
    pub labels: BTreeMap<String, String>,
    /// Its destination cluster: `spec.destination.server`, or `.name` when no server is
    /// given (empty: none).
    #[serde(skip)]
    pub destination_cluster: String,
    /// Its destination namespace.
    #[serde(skip)]
    pub destination_namespace: String,
}

/// One commit as the platform shows it next to an app.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CommitShown {
    /// The SHA.
    pub revision: String,
    /// Author.
    pub author: String,
    /// Message.
    pub message: String,
    /// Commit date.
    pub date: String,
}

impl CommitShown {
    /// The `changeRevisions` of an `app.meta.revisions-metadata` annotation (empty when it is
    /// absent, not JSON, or the list is `null`).
    pub fn change_revisions(annotation: &str) -> Vec<CommitShown> {
        let Ok(parsed) = serde_json::from_str::<serde_json::Value>(annotation) else {
            return Vec::new();
        };
        let text = |v: &serde_json::Value, p: &str| {
            v.at(p).and_then(|s| s.as_str()).unwrap_or("").to_string()
        };
        parsed["changeRevisions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| CommitShown {
                revision: text(r, "/revision"),
                author: text(r, "/metadata/author"),
                message: text(r, "/metadata/message"),
                date: text(r, "/metadata/date"),
            })
            .collect()
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What the platform shows for one resource of an app (from resource events).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ResourceState {
    /// The resource's sync status within its app.
    pub sync_status: String,
    /// Its health.
    pub health_status: String,
    /// Reported deleted (empty desired and live manifests).
    pub deleted: bool,
    /// The app's latest history revision when it was reported.
    pub revision: String,
}

/// What applying one event did (the same type the `platform.event` observation carries).
pub use crate::observe::Projection as Applied;

/// Every runtime's apps, keyed by runtime, then `namespace/name`.
#[derive(Debug, Default)]
pub struct ReadModel {
    apps: BTreeMap<String, BTreeMap<String, AppState>>,
    /// Resources, keyed by runtime, then `<app ns>/<app>/<group>/<kind>/<ns>/<name>`.
    resources: BTreeMap<String, BTreeMap<String, ResourceState>>,
    /// Resource events projected.
    pub resource_events: u64,
    /// Events that moved state forward.
    pub updated: u64,
    /// Duplicates seen.
    pub duplicates: u64,
    /// Stale events ignored.
    pub stale: u64,
}

impl ReadModel {
    /// Applies one event of `runtime` for its app `key` (idempotent).
    pub fn apply(&mut self, runtime: &str, key: &str, state: AppState) -> Applied {
        if !self.apps.contains_key(runtime) {
            self.apps.insert(runtime.to_string(), BTreeMap::new());
        }
        let apps = self.apps.get_mut(runtime).expect("inserted above");
        let outcome = match apps.get(key) {
            Some(current) if current.resource_version > state.resource_version => Applied::Stale,
            Some(current)
                if current.resource_version == state.resource_version
                    && current.deleted == state.deleted =>
            {
                Applied::Duplicate
            }
            _ => Applied::Updated,
        };
        match outcome {
            Applied::Updated => {
                self.updated += 1;
                apps.insert(key.to_string(), state);
            }
            Applied::Duplicate => {
                self.duplicates += 1;
                // What the platform shows of the app's errors is the newest report's; a
                // report without Git details keeps the ones an earlier report of this
                // state gave.
                if let Some(current) = apps.get_mut(key) {
                    current.read_errors = state.read_errors;
                    if !state.app_version.is_empty() {
                        current.app_version = state.app_version;
                    }
                    if !state.change_commits.is_empty() {
                        current.change_commits = state.change_commits;
                    }
                }
            }
            Applied::Stale => self.stale += 1,
        }
        outcome
    }

    /// Records one resource event of `runtime` (the newest report wins: a resource event
    /// carries no resourceVersion the platform could order by).
    pub fn apply_resource(&mut self, runtime: &str, key: &str, state: ResourceState) {
        self.resource_events += 1;
        self.resources
            .entry(runtime.to_string())
            .or_default()
            .insert(key.to_string(), state);
    }

    /// `runtime`'s resources' reported states, in key order (none for a runtime that has
    /// reported none).
    pub fn resources_of(&self, runtime: &str) -> Option<&BTreeMap<String, ResourceState>> {
        self.resources.get(runtime)
    }

    /// `runtime`'s apps' states, borrowed (none for a runtime that has reported none).
    pub fn apps_of(&self, runtime: &str) -> Option<&BTreeMap<String, AppState>> {
        self.apps.get(runtime)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(rv: u64, sync: &str) -> AppState {
        AppState {
            resource_version: rv,
            deleted: false,
            sync_status: sync.into(),
            revision: "r".into(),
            health_status: "Healthy".into(),
            runtime: "rt".into(),
            read_errors: 0,
            ..Default::default()
        }
    }

    #[test]
    fn a_repeat_of_the_same_state_refreshes_the_read_errors_shown() {
        let mut model = ReadModel::default();
        let with_errors = AppState {
            read_errors: 2,
            ..state(5, "Synced")
        };
        assert_eq!(model.apply("rt", "ns/a", with_errors), Applied::Updated);
        assert_eq!(
            model.apply("rt", "ns/a", state(5, "Synced")),
            Applied::Duplicate
        );
        assert_eq!(
            model.apps_of("rt").unwrap()["ns/a"].read_errors,
            0,
            "the clean re-send clears them"
        );
        let stale = AppState {
            read_errors: 3,
            ..state(4, "Synced")
        };
        assert_eq!(model.apply("rt", "ns/a", stale), Applied::Stale);
        assert_eq!(
            model.apps_of("rt").unwrap()["ns/a"].read_errors,
            0,
            "an older event changes nothing"
        );
    }

    #[test]
    fn two_runtimes_apps_with_the_same_name_are_two_entries() {
        let mut model = ReadModel::default();
        assert_eq!(
            model.apply("acme-prod", "argocd/web", state(9, "Synced")),
            Applied::Updated
        );
        // globex's older version of its own "argocd/web" is not stale: it is another app.
        assert_eq!(
            model.apply("globex-prod", "argocd/web", state(3, "OutOfSync")),
            Applied::Updated
        );
        assert_eq!(
            model.apps_of("acme-prod").unwrap()["argocd/web"].sync_status,
            "Synced"
        );
        assert_eq!(
            model.apps_of("globex-prod").unwrap()["argocd/web"].sync_status,
            "OutOfSync"
        );
        assert!(model.apps_of("initech-prod").is_none());
    }

    #[test]
    fn projection_is_idempotent_and_ignores_older_events() {
        let mut model = ReadModel::default();
        assert_eq!(
            model.apply("rt", "ns/a", state(5, "Synced")),
            Applied::Updated
        );
        assert_eq!(
            model.apply("rt", "ns/a", state(5, "Synced")),
            Applied::Duplicate
        );
        assert_eq!(
            model.apply("rt", "ns/a", state(3, "OutOfSync")),
            Applied::Stale
        );
        assert_eq!(model.apps_of("rt").unwrap()["ns/a"].sync_status, "Synced");
        assert_eq!((model.updated, model.duplicates, model.stale), (1, 1, 1));
    }
}
