//! The platform's read model of the cluster stream (issue 13): Rollouts with their
//! ReplicaSets and AnalysisRuns, and Workflows, as a runtime's resource reporter sends
//! them — the Kubernetes object itself at `data.object` (the Argo Events Sensor's payload
//! shape, research §1.12), optionally with the watch event `type` beside it.
//!
//! The Sensor sends no watch event type (its payload maps only the event's `body`), so a
//! deletion reaches the platform as a repeat of the object's last state — a deleted Rollout
//! stays listed (research §1.12 plus argo-events' `ConstructPayload`; the consequence is
//! inferred). A sender that adds `type: DELETE`, or an object with a `deletionTimestamp`,
//! ends the object.
//!
//! Keyed by runtime (the token's, never the payload's), kind, namespace and name.
//! Ordering: per object, only a higher `metadata.resourceVersion` moves the state (an
//! older event is stale, the same one a duplicate); a deletion is kept as a tombstone at
//! its resourceVersion, so a late older update cannot bring the object back.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::read_model::Applied;
use crate::core::json::Pointer as _;

/// The kinds of the cluster stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Kind {
    /// `argoproj.io Rollout`.
    Rollout,
    /// `apps ReplicaSet` (owned by a Rollout).
    ReplicaSet,
    /// `argoproj.io AnalysisRun` (owned by a Rollout).
    AnalysisRun,
    /// `argoproj.io Workflow`.
    Workflow,
}

impl Kind {
    /// The kind an object's `kind` names, if it is one of the stream's.
    pub fn of(kind: &str) -> Option<Kind> {
        match kind {
            "Rollout" => Some(Kind::Rollout),
            "ReplicaSet" => Some(Kind::ReplicaSet),
            "AnalysisRun" => Some(Kind::AnalysisRun),
            "Workflow" => Some(Kind::Workflow),
            _ => None,
        }
    }
}

/// One reported object, reduced to what the platform shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterEvent {
    /// Which kind.
    pub kind: Kind,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.resourceVersion` as a number (0 when unreadable).
    pub resource_version: u64,
    /// A deletion (`type: DELETE`, or a `deletionTimestamp`).
    pub deleted: bool,
    /// The owning Rollout's name (ReplicaSets and AnalysisRuns).
    pub owner: Option<String>,
    /// What the platform keeps of the object.
    pub fields: Fields,
}

/// The fields kept per kind (absent ones are empty).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fields {
    /// `status.phase`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// `status.message`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Rollout `status.currentStepIndex`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<i64>,
    /// Rollout `status.stableRS`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub stable: String,
    /// Rollout `status.currentPodHash`; a ReplicaSet's pod-template hash.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub hash: String,
    /// Rollout `status.abort`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub aborted: bool,
    /// ReplicaSet `spec.replicas`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    /// ReplicaSet `status.availableReplicas`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available: Option<i64>,
    /// Workflow `status.progress`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub progress: String,
}

/// Why an object could not be read as a cluster event.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Invalid {
    /// `kind` is not one the stream carries.
    #[error("data.object.kind {0:?} is not Rollout, ReplicaSet, AnalysisRun or Workflow")]
    Kind(String),
    /// No `metadata.name`.
    #[error("data.object has no metadata.name")]
    Name,
}

impl ClusterEvent {
    /// Reads `object` (and the optional watch event `type`) as a cluster event.
    pub fn read(object: &Value, event_type: Option<&str>) -> Result<ClusterEvent, Invalid> {
        let text = |pointer: &str| {
            object
                .at(pointer)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let kind_name = text("/kind");
        let kind = Kind::of(&kind_name).ok_or(Invalid::Kind(kind_name))?;
        let name = text("/metadata/name");
        if name.is_empty() {
            return Err(Invalid::Name);
        }
        let owner = object
            .at("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|o| o["kind"] == "Rollout")
            .and_then(|o| o["name"].as_str())
            .map(str::to_string);
        let number = |pointer: &str| object.at(pointer).and_then(Value::as_i64);
        let fields = match kind {
            Kind::Rollout => Fields {
                phase: text("/status/phase"),
                message: text("/status/message"),
                step: number("/status/currentStepIndex"),
                stable: text("/status/stableRS"),
                hash: text("/status/currentPodHash"),
                aborted: object.at("/status/abort") == Some(&Value::Bool(true)),
                ..Fields::default()
            },
            Kind::ReplicaSet => Fields {
                hash: text("/metadata/labels/rollouts-pod-template-hash"),
                replicas: Some(number("/spec/replicas").unwrap_or(0)),
                available: Some(number("/status/availableReplicas").unwrap_or(0)),
                ..Fields::default()
            },
            Kind::AnalysisRun => Fields {
                phase: text("/status/phase"),
                message: text("/status/message"),
                ..Fields::default()
            },
            Kind::Workflow => Fields {
                phase: text("/status/phase"),
                message: text("/status/message"),
                progress: text("/status/progress"),
                ..Fields::default()
            },
        };
        Ok(ClusterEvent {
            kind,
            namespace: text("/metadata/namespace"),
            name,
            resource_version: text("/metadata/resourceVersion").parse().unwrap_or(0),
            deleted: event_type.is_some_and(|t| t.eq_ignore_ascii_case("DELETE"))
                || object.at("/metadata/deletionTimestamp").is_some(),
            owner,
            fields,
        })
    }
}

/// What is stored per object.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    resource_version: u64,
    deleted: bool,
    owner: Option<String>,
    fields: Fields,
}

/// A ReplicaSet as the platform shows it under its Rollout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReplicaSetView {
    /// Pods wanted.
    pub replicas: i64,
    /// Pods available.
    pub available: i64,
}

/// A Rollout as the platform shows it: its state, its ReplicaSets by pod-template hash
/// and its AnalysisRuns' phases by name (deleted ones left out).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutView {
    /// The Rollout's resourceVersion this reflects.
    pub resource_version: u64,
    /// Reported deleted.
    pub deleted: bool,
    /// Its fields.
    #[serde(flatten)]
    pub fields: Fields,
    /// ReplicaSets by pod-template hash.
    pub replica_sets: BTreeMap<String, ReplicaSetView>,
    /// AnalysisRun phases by name.
    pub analysis_runs: BTreeMap<String, String>,
}

/// A Workflow as the platform shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowView {
    /// The resourceVersion this reflects.
    pub resource_version: u64,
    /// Reported deleted.
    pub deleted: bool,
    /// Its fields.
    #[serde(flatten)]
    pub fields: Fields,
}

/// Every reported object of every runtime's cluster stream.
#[derive(Debug, Default)]
pub struct ClusterModel {
    /// By (runtime, kind, namespace, name).
    objects: BTreeMap<(String, Kind, String, String), Entry>,
    /// Events that moved state forward, were stale, or repeated.
    pub updated: u64,
    /// Older than what is stored.
    pub stale: u64,
    /// The same resourceVersion again.
    pub duplicates: u64,
}

impl ClusterModel {
    /// Applies `event` reported by `runtime`.
    pub fn apply(&mut self, runtime: &str, event: ClusterEvent) -> Applied {
        let key = (runtime.to_string(), event.kind, event.namespace, event.name);
        let entry = Entry {
            resource_version: event.resource_version,
            deleted: event.deleted,
            owner: event.owner,
            fields: event.fields,
        };
        match self.objects.get(&key) {
            // A typed deletion older than what is held still ends the object (a reporter's
            // resync deletes what it only knows from this read model, whose ReplicaSet and
            // AnalysisRun versions are not shown); the held version stays, so a later update
            // of a recreated object still applies.
            Some(old) if old.resource_version > entry.resource_version && entry.deleted => {
                if old.deleted {
                    self.duplicates += 1;
                    return Applied::Duplicate;
                }
                self.updated += 1;
                let held = old.resource_version;
                let old_fields = old.fields.clone();
                self.objects.insert(
                    key,
                    Entry {
                        resource_version: held,
                        fields: old_fields,
                        ..entry
                    },
                );
                Applied::Updated
            }
            Some(old) if old.resource_version > entry.resource_version => {
                self.stale += 1;
                Applied::Stale
            }
            Some(old) if old.resource_version == entry.resource_version => {
                self.duplicates += 1;
                // A deletion at the same version (the watch's DELETE repeats the last
                // state) still ends the object.
                if entry.deleted && !old.deleted {
                    let ended = Entry {
                        deleted: true,
                        ..old.clone()
                    };
                    self.objects.insert(key, ended);
                } else if !entry.deleted && old.deleted {
                    // The object at this version is live after all (a resync's deletion
                    // raced its creation): the live state wins.
                    self.objects.insert(key, entry);
                    self.updated += 1;
                    return Applied::Updated;
                }
                Applied::Duplicate
            }
            _ => {
                self.updated += 1;
                self.objects.insert(key, entry);
                Applied::Updated
            }
        }
    }

    /// Rollouts by `runtime/namespace/name`, with their ReplicaSets and AnalysisRuns.
    pub fn rollouts(&self) -> BTreeMap<String, RolloutView> {
        let mut views: BTreeMap<String, RolloutView> = BTreeMap::new();
        for ((runtime, kind, namespace, name), entry) in &self.objects {
            if *kind == Kind::Rollout {
                views.insert(
                    format!("{runtime}/{namespace}/{name}"),
                    RolloutView {
                        resource_version: entry.resource_version,
                        deleted: entry.deleted,
                        fields: entry.fields.clone(),
                        replica_sets: BTreeMap::new(),
                        analysis_runs: BTreeMap::new(),
                    },
                );
            }
        }
        for ((runtime, kind, namespace, name), entry) in &self.objects {
            let Some(owner) = entry.owner.as_ref().filter(|_| !entry.deleted) else {
                continue;
            };
            let Some(view) = views.get_mut(&format!("{runtime}/{namespace}/{owner}")) else {
                continue;
            };
            match kind {
                Kind::ReplicaSet => {
                    view.replica_sets.insert(
                        entry.fields.hash.clone(),
                        ReplicaSetView {
                            replicas: entry.fields.replicas.unwrap_or(0),
                            available: entry.fields.available.unwrap_or(0),
                        },
                    );
                }
                Kind::AnalysisRun => {
                    view.analysis_runs
                        .insert(name.clone(), entry.fields.phase.clone());
                }
                _ => {}
            }
        }
        views
    }

    /// Workflows by `runtime/namespace/name`.
    pub fn workflows(&self) -> BTreeMap<String, WorkflowView> {
        self.objects
            .iter()
            .filter(|((_, kind, _, _), _)| *kind == Kind::Workflow)
            .map(|((runtime, _, namespace, name), entry)| {
                (
                    format!("{runtime}/{namespace}/{name}"),
                    WorkflowView {
                        resource_version: entry.resource_version,
                        deleted: entry.deleted,
                        fields: entry.fields.clone(),
                    },
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rollout(rv: u64, phase: &str, step: i64) -> Value {
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": "web", "namespace": "shop", "resourceVersion": rv.to_string()}, "status": {"phase": phase, "currentStepIndex": step, "stableRS": "aaa", "currentPodHash": "bbb"}})
    }

    fn replica_set(rv: u64, hash: &str, replicas: i64) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": format!("web-{hash}"), "namespace": "shop", "resourceVersion": rv.to_string(), "labels": {"rollouts-pod-template-hash": hash}, "ownerReferences": [{"kind": "Rollout", "name": "web", "uid": "u"}]}, "spec": {"replicas": replicas}, "status": {"availableReplicas": replicas}})
    }

    fn apply(
        model: &mut ClusterModel,
        runtime: &str,
        object: Value,
        kind: Option<&str>,
    ) -> Applied {
        model.apply(
            runtime,
            ClusterEvent::read(&object, kind).expect("a valid object"),
        )
    }

    #[test]
    fn a_rollout_shows_its_newest_state_with_its_replica_sets_and_runs() {
        let mut model = ClusterModel::default();
        assert_eq!(
            apply(&mut model, "rt", rollout(5, "Paused", 1), None),
            Applied::Updated
        );
        assert_eq!(
            apply(&mut model, "rt", rollout(3, "Progressing", 0), None),
            Applied::Stale
        );
        assert_eq!(
            apply(&mut model, "rt", rollout(5, "Paused", 1), None),
            Applied::Duplicate
        );
        apply(&mut model, "rt", replica_set(6, "aaa", 3), None);
        apply(&mut model, "rt", replica_set(7, "bbb", 1), None);
        apply(
            &mut model,
            "rt",
            json!({"kind": "AnalysisRun", "metadata": {"name": "web-bbb-2-2", "namespace": "shop", "resourceVersion": "8", "ownerReferences": [{"kind": "Rollout", "name": "web"}]}, "status": {"phase": "Running"}}),
            None,
        );
        let views = model.rollouts();
        let web = &views["rt/shop/web"];
        assert_eq!(
            (web.fields.phase.as_str(), web.fields.step),
            ("Paused", Some(1))
        );
        assert_eq!(
            web.replica_sets["aaa"],
            ReplicaSetView {
                replicas: 3,
                available: 3
            }
        );
        assert_eq!(web.replica_sets["bbb"].replicas, 1);
        assert_eq!(web.analysis_runs["web-bbb-2-2"], "Running");
        // A deleted ReplicaSet leaves the view; a late older update cannot revive it.
        apply(&mut model, "rt", replica_set(9, "aaa", 0), Some("DELETE"));
        assert_eq!(
            apply(&mut model, "rt", replica_set(6, "aaa", 3), None),
            Applied::Stale
        );
        assert!(!model.rollouts()["rt/shop/web"]
            .replica_sets
            .contains_key("aaa"));
    }

    #[test]
    fn runtimes_are_kept_apart_and_a_delete_at_the_same_version_ends_the_object() {
        let mut model = ClusterModel::default();
        let wf = |rv: u64, phase: &str| json!({"kind": "Workflow", "metadata": {"name": "build", "namespace": "ci", "resourceVersion": rv.to_string()}, "status": {"phase": phase, "progress": "1/2"}});
        apply(&mut model, "rt-a", wf(4, "Running"), None);
        apply(&mut model, "rt-b", wf(2, "Succeeded"), None);
        let views = model.workflows();
        assert_eq!(views["rt-a/ci/build"].fields.phase, "Running");
        assert_eq!(views["rt-b/ci/build"].fields.phase, "Succeeded");
        assert_eq!(
            apply(&mut model, "rt-a", wf(4, "Running"), Some("DELETE")),
            Applied::Duplicate
        );
        assert!(model.workflows()["rt-a/ci/build"].deleted);
    }

    #[test]
    fn objects_outside_the_stream_or_without_a_name_are_refused_with_the_reason() {
        assert_eq!(
            ClusterEvent::read(&json!({"kind": "Pod", "metadata": {"name": "p"}}), None),
            Err(Invalid::Kind("Pod".into()))
        );
        assert_eq!(
            ClusterEvent::read(&json!({"kind": "Workflow", "metadata": {}}), None),
            Err(Invalid::Name)
        );
    }
}
