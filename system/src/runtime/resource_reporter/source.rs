//! The watch half both variants share: informer semantics over the watched kinds.
//!
//! Argo Events' resource EventSource registers `AddFunc`/`UpdateFunc`/`DeleteFunc` on a
//! dynamic informer without a resync period and drops an update whose resourceVersion did
//! not change (research §1.12). A kube-rs watcher gives list-then-watch; this module adds the
//! informer's bookkeeping: an object first seen is `ADD`, a changed one `UPDATE`, a removed
//! one `DELETE`, and after a relist (a 410, a broken watch) the objects missing from the new
//! list are deleted, as the informer's `Replace` does. A fresh start knows nothing, so the
//! first list is an `ADD` for every object — the burst after every restart.
//!
//! No filter: the chart's EventSources list `eventTypes: [ADD, UPDATE, DELETE]` with
//! `filter: {createdBy: null}` and its Sensors' dependencies none (gitops-runtime-helm,
//! `event-reporters/*/_event-source.yaml`, `_sensor.yaml`; docs/components/resource-reporter.md).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::{watcher, WatchStreamExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::env::kube::SeededBackoff;
use crate::env::SharedEnv;
pub use crate::observe::ResourceKind as Kind;
use crate::observe::ResourceReporterEvent;

impl Kind {
    /// Every kind, in the order the reporter starts their watches.
    pub const ALL: [Kind; 4] = [
        Kind::Rollout,
        Kind::ReplicaSet,
        Kind::AnalysisRun,
        Kind::Workflow,
    ];

    /// The dependency (and bus subject) name: the resource's plural.
    pub fn dependency(self) -> &'static str {
        match self {
            Kind::Rollout => "rollouts",
            Kind::ReplicaSet => "replicasets",
            Kind::AnalysisRun => "analysisruns",
            Kind::Workflow => "workflows",
        }
    }

    /// The kind a dependency names.
    pub fn of_dependency(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.dependency() == name)
    }

    /// The API resource watched.
    pub fn resource(self) -> ApiResource {
        let (group, version, kind) = match self {
            Kind::Rollout => ("argoproj.io", "v1alpha1", "Rollout"),
            Kind::ReplicaSet => ("apps", "v1", "ReplicaSet"),
            Kind::AnalysisRun => ("argoproj.io", "v1alpha1", "AnalysisRun"),
            Kind::Workflow => ("argoproj.io", "v1alpha1", "Workflow"),
        };
        ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
    }
}

/// What happened to an object, as the EventSource names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum EventType {
    /// First seen (every object of the first list).
    Add,
    /// Changed (a new resourceVersion).
    Update,
    /// Gone.
    Delete,
}

impl EventType {
    /// The name on the wire (`ADD`, `UPDATE`, `DELETE`).
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Add => "ADD",
            EventType::Update => "UPDATE",
            EventType::Delete => "DELETE",
        }
    }
}

/// An object's identity across events.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectKey {
    /// Which kind.
    pub kind: Kind,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
}

impl ObjectKey {
    /// `namespace/name`, as traces name objects.
    pub fn object(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// One informer event: the whole object, as the EventSource publishes it.
#[derive(Clone, Debug)]
pub struct Change {
    /// Which object.
    pub key: ObjectKey,
    /// Add, update or delete.
    pub event_type: EventType,
    /// `metadata.resourceVersion` as a number (0 when unreadable).
    pub rv: u64,
    /// The object, with `apiVersion` and `kind` set (a dynamic client's list items get
    /// them from the list, as client-go's `UnstructuredList` does).
    pub object: Arc<Value>,
}

/// The informer's memory: the last object seen per key.
#[derive(Debug, Default)]
pub struct Informer {
    known: BTreeMap<ObjectKey, (u64, Arc<Value>)>,
    /// Per kind, the keys listed since its current relist began (absent outside one): the
    /// kinds' watches list independently and interleave.
    relisting: BTreeMap<Kind, Vec<ObjectKey>>,
}

impl Informer {
    /// Feeds one watcher event of `kind`; returns the informer events it makes.
    pub fn on_event(&mut self, kind: Kind, event: watcher::Event<DynamicObject>) -> Vec<Change> {
        match event {
            watcher::Event::Init => {
                self.relisting.insert(kind, Vec::new());
                Vec::new()
            }
            watcher::Event::InitApply(object) => {
                let change = self.apply(kind, &object);
                if let (Some(listed), Some(key)) =
                    (self.relisting.get_mut(&kind), key_of(kind, &object))
                {
                    listed.push(key);
                }
                change.into_iter().collect()
            }
            watcher::Event::InitDone => {
                let listed: std::collections::BTreeSet<ObjectKey> = self
                    .relisting
                    .remove(&kind)
                    .unwrap_or_default()
                    .into_iter()
                    .collect();
                let gone: Vec<ObjectKey> = self
                    .known
                    .keys()
                    .filter(|k| k.kind == kind && !listed.contains(k))
                    .cloned()
                    .collect();
                gone.into_iter()
                    .filter_map(|key| {
                        let (rv, object) = self.known.remove(&key)?;
                        Some(Change {
                            key,
                            event_type: EventType::Delete,
                            rv,
                            object,
                        })
                    })
                    .collect()
            }
            watcher::Event::Apply(object) => self.apply(kind, &object).into_iter().collect(),
            watcher::Event::Delete(object) => {
                let Some(key) = key_of(kind, &object) else {
                    return Vec::new();
                };
                self.known.remove(&key);
                let (rv, object) = value_of(kind, &object);
                vec![Change {
                    key,
                    event_type: EventType::Delete,
                    rv,
                    object,
                }]
            }
        }
    }

    fn apply(&mut self, kind: Kind, object: &DynamicObject) -> Option<Change> {
        let key = key_of(kind, object)?;
        let (rv, value) = value_of(kind, object);
        let event_type = match self.known.get(&key) {
            // The informer's UpdateFunc: an unchanged resourceVersion is dropped.
            Some((old, _)) if *old == rv => return None,
            Some(_) => EventType::Update,
            None => EventType::Add,
        };
        self.known.insert(key.clone(), (rv, value.clone()));
        Some(Change {
            key,
            event_type,
            rv,
            object: value,
        })
    }

    /// Applies informer events made elsewhere (a second copy of the informer's memory).
    pub fn mirror(&mut self, changes: &[Change]) {
        for change in changes {
            match change.event_type {
                EventType::Delete => {
                    self.known.remove(&change.key);
                }
                _ => {
                    self.known
                        .insert(change.key.clone(), (change.rv, change.object.clone()));
                }
            }
        }
    }

    /// Every object currently known, with its resourceVersion (for a resync).
    pub fn objects(&self) -> impl Iterator<Item = (&ObjectKey, &(u64, Arc<Value>))> {
        self.known.iter()
    }
}

fn key_of(kind: Kind, object: &DynamicObject) -> Option<ObjectKey> {
    Some(ObjectKey {
        kind,
        namespace: object.metadata.namespace.clone().unwrap_or_default(),
        name: object.metadata.name.clone()?,
    })
}

fn value_of(kind: Kind, object: &DynamicObject) -> (u64, Arc<Value>) {
    let rv = object
        .metadata
        .resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0);
    let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut value {
        let resource = kind.resource();
        map.insert("apiVersion".into(), Value::String(resource.api_version));
        map.insert("kind".into(), Value::String(resource.kind));
    }
    (rv, Arc::new(value))
}

/// Where each kind is watched.
#[derive(Clone, Debug)]
pub struct Scope {
    /// The kinds watched.
    pub kinds: Vec<Kind>,
    /// Workflows are watched in this namespace only (the chart's workflow-reporter watches
    /// the runtime's namespace); `None`: every namespace.
    pub workflow_namespace: Option<String>,
}

/// Runs one watch per kind in `scope` and sends their informer events, in order per kind,
/// to `out` — until `out` closes. A watch error is observed and retried with kube's backoff.
pub async fn run(
    env: SharedEnv,
    client: kube::Client,
    scope: Scope,
    out: mpsc::UnboundedSender<Vec<Change>>,
) {
    let mut watches = futures::stream::SelectAll::new();
    for kind in scope.kinds.iter().copied() {
        let resource = kind.resource();
        let api: Api<crate::env::kube::Wire> = match (&scope.workflow_namespace, kind) {
            (Some(ns), Kind::Workflow) => Api::namespaced_with(client.clone(), ns, &resource),
            _ => Api::all_with(client.clone(), &resource),
        };
        let events = watcher(api, watcher::Config::default())
            .backoff(SeededBackoff::new(env.clone()))
            .map_ok(move |event| (kind, crate::env::kube::unwire(event)))
            .map_err(move |error| (kind, error));
        watches.push(events.boxed());
    }
    let mut informer = Informer::default();
    while let Some(event) = watches.next().await {
        match event {
            Ok((kind, event)) => {
                let changes = informer.on_event(kind, event);
                if !changes.is_empty() && out.send(changes).is_err() {
                    return;
                }
            }
            Err((kind, error)) => env.observe(
                ResourceReporterEvent::WatchError {
                    kind,
                    error: error.to_string(),
                }
                .into(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(name: &str, rv: u64) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
            "metadata": {"name": name, "namespace": "shop", "resourceVersion": rv.to_string()},
        }))
        .unwrap()
    }

    fn types(changes: &[Change]) -> Vec<(String, EventType, u64)> {
        changes
            .iter()
            .map(|c| (c.key.name.clone(), c.event_type, c.rv))
            .collect()
    }

    #[test]
    fn the_first_list_adds_everything_then_changes_update_and_same_versions_are_dropped() {
        let mut informer = Informer::default();
        let k = Kind::Rollout;
        assert!(informer.on_event(k, watcher::Event::Init).is_empty());
        let added = informer.on_event(k, watcher::Event::InitApply(object("a", 3)));
        assert_eq!(types(&added), vec![("a".into(), EventType::Add, 3)]);
        assert_eq!(added[0].object["kind"], "Rollout");
        assert!(informer.on_event(k, watcher::Event::InitDone).is_empty());
        assert!(informer
            .on_event(k, watcher::Event::Apply(object("a", 3)))
            .is_empty());
        assert_eq!(
            types(&informer.on_event(k, watcher::Event::Apply(object("a", 5)))),
            vec![("a".into(), EventType::Update, 5)]
        );
        assert_eq!(
            types(&informer.on_event(k, watcher::Event::Delete(object("a", 6)))),
            vec![("a".into(), EventType::Delete, 6)]
        );
    }

    #[test]
    fn a_relist_deletes_what_is_gone_and_updates_only_what_changed() {
        let mut informer = Informer::default();
        let k = Kind::Rollout;
        for name in ["a", "b", "c"] {
            informer.on_event(k, watcher::Event::Apply(object(name, 2)));
        }
        informer.on_event(k, watcher::Event::Init);
        assert!(informer
            .on_event(k, watcher::Event::InitApply(object("a", 2)))
            .is_empty());
        assert_eq!(
            types(&informer.on_event(k, watcher::Event::InitApply(object("b", 9)))),
            vec![("b".into(), EventType::Update, 9)]
        );
        assert_eq!(
            types(&informer.on_event(k, watcher::Event::InitDone)),
            vec![("c".into(), EventType::Delete, 2)]
        );
        // Another kind's relist leaves these alone.
        informer.on_event(Kind::Workflow, watcher::Event::Init);
        assert!(informer
            .on_event(Kind::Workflow, watcher::Event::InitDone)
            .is_empty());
        assert_eq!(informer.objects().count(), 2);
    }

    #[test]
    fn interleaved_first_lists_of_two_kinds_delete_nothing() {
        // After a restart every kind lists at once; one kind's Init must not discard what
        // another listed, or its InitDone would delete every object of the other.
        let mut informer = Informer::default();
        let rs = |name: &str| -> DynamicObject {
            serde_json::from_value(
                json!({"metadata": {"name": name, "namespace": "shop", "resourceVersion": "4"}}),
            )
            .unwrap()
        };
        informer.on_event(Kind::Rollout, watcher::Event::Init);
        informer.on_event(Kind::Rollout, watcher::Event::InitApply(object("a", 3)));
        informer.on_event(Kind::ReplicaSet, watcher::Event::Init);
        informer.on_event(Kind::ReplicaSet, watcher::Event::InitApply(rs("a-1")));
        assert!(informer
            .on_event(Kind::Rollout, watcher::Event::InitDone)
            .is_empty());
        assert!(informer
            .on_event(Kind::ReplicaSet, watcher::Event::InitDone)
            .is_empty());
        assert_eq!(informer.objects().count(), 2);
    }
}
