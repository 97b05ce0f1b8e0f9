//! The application event the reporter sends to `POST /2.0/api/events`, inside a gzip JSON
//! envelope `{"data": EventPayload}`. Field names follow the real reporter's payload.

use serde::{Deserialize, Serialize};

/// One event: an application, a child application or one resource of an application
/// (the `object` says which).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventPayload {
    /// When the reporter built it (RFC 3339).
    pub timestamp: String,
    /// The object reported (the Application, or the resource), base64 of its JSON.
    pub object: String,
    /// Where it comes from and what it looks like.
    pub source: Source,
    /// Problems met while building it.
    #[serde(default)]
    pub errors: Vec<EventError>,
    /// Versions of the app's sources (free-form).
    #[serde(default)]
    pub app_versions: serde_json::Value,
    /// orrery extension: idempotency key (hardened reporter), so duplicates are harmless.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// The `source` block: manifests, revision metadata and the app's state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Source {
    /// Desired (compiled) manifest; empty with an empty actual manifest means "deleted".
    pub desired_manifest: String,
    /// Live manifest.
    pub actual_manifest: String,
    /// Manifest as stored in Git.
    pub git_manifest: String,
    /// Repository URL.
    pub repo_url: String,
    /// Path in the repository.
    pub path: String,
    /// Revision compared.
    pub revision: String,
    /// Revision of the last sync operation.
    pub operation_sync_revision: String,
    /// Last history id.
    pub history_id: i64,
    /// Commit message of `revision`.
    pub commit_message: String,
    /// Commit author.
    pub commit_author: String,
    /// Commit date.
    pub commit_date: String,
    /// App name.
    pub app_name: String,
    /// App namespace.
    pub app_namespace: String,
    /// App UID.
    pub app_uid: String,
    /// App labels.
    pub app_labels: std::collections::BTreeMap<String, String>,
    /// `Synced`, `OutOfSync`, `Unknown`.
    pub sync_status: String,
    /// Start of the last sync.
    pub sync_started_at: String,
    /// End of the last sync.
    pub sync_finished_at: String,
    /// `Healthy`, `Degraded`, …
    pub health_status: String,
    /// Health message.
    pub health_message: String,
    /// Destination cluster.
    pub cluster: String,
    /// Argo CD's `application.instanceLabelKey` (default `app.kubernetes.io/instance`).
    pub app_instance_label_key: String,
    /// Argo CD's resource tracking method: `label` or `annotation`.
    pub tracking_method: String,
}

/// A problem attached to an event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventError {
    /// Kind of problem, e.g. `transient`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `error` or `warning`.
    pub level: String,
    /// What went wrong.
    pub message: String,
    /// When (RFC 3339).
    pub last_seen: String,
    /// What it concerns, if anything.
    #[serde(default)]
    pub source_reference: serde_json::Value,
}

/// The envelope on the wire.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Envelope {
    /// The event.
    pub data: EventPayload,
}

impl EventPayload {
    /// True for a deletion: empty desired and actual manifests and no errors (an event
    /// whose manifests could not be read carries errors and is not a deletion).
    pub fn is_deletion(&self) -> bool {
        self.source.desired_manifest.is_empty()
            && self.source.actual_manifest.is_empty()
            && self.errors.is_empty()
    }
}
