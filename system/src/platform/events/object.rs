//! What the projection reads of an event's object (`data.object`): kind, apiVersion, name,
//! namespace, resourceVersion, the app's sync and health, its sync's change revision and
//! the reporter's revisions-metadata annotation. The rest of the object is
//! checked to be JSON and skipped, not built into a tree (an Application carries its whole
//! status; the platform reads five strings of it).
//!
//! Reading is as lenient as `Value::pointer(..).and_then(Value::as_str)`: a field of
//! another type than expected reads as absent, never as an error.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

/// The fields of an event's object the projection uses.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ObjectView {
    /// `kind`.
    pub kind: Text,
    /// `apiVersion`.
    #[serde(rename = "apiVersion")]
    pub api_version: Text,
    /// `metadata`.
    pub metadata: Lenient<Metadata>,
    /// `spec` (an Application's).
    pub spec: Lenient<Spec>,
    /// `status` (an Application's).
    pub status: Lenient<Status>,
}

/// `spec.destination` (what the platform's permissions judge an app by).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Spec {
    /// `spec.destination`.
    pub destination: Lenient<Destination>,
}

/// `spec.destination.{server, name, namespace}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Destination {
    /// `server`: the cluster's API URL.
    pub server: Text,
    /// `name`: the cluster's name in Argo CD.
    pub name: Text,
    /// `namespace`.
    pub namespace: Text,
}

/// `metadata.{name, namespace, resourceVersion}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Metadata {
    /// `metadata.name`.
    pub name: Text,
    /// `metadata.namespace`.
    pub namespace: Text,
    /// `metadata.resourceVersion`.
    #[serde(rename = "resourceVersion")]
    pub resource_version: Text,
    /// `metadata.annotations` (the reporter's).
    pub annotations: Lenient<Annotations>,
    /// `metadata.labels` (a label that is not a string reads as absent).
    pub labels: Lenient<Labels>,
}

/// `metadata.labels`, string values only.
#[derive(Debug, Default)]
pub struct Labels(pub std::collections::BTreeMap<String, String>);

impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let read: std::collections::BTreeMap<String, Text> =
            Deserialize::deserialize(deserializer)?;
        Ok(Labels(
            read.into_iter()
                .filter_map(|(k, v)| v.0.map(|v| (k, v)))
                .collect(),
        ))
    }
}

/// The annotations the projection reads.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Annotations {
    /// `app.meta.revisions-metadata`: JSON text of `{syncRevisions, changeRevisions}`.
    #[serde(rename = "app.meta.revisions-metadata")]
    pub revisions_metadata: Text,
}

/// `status.sync` and `status.health`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Status {
    /// `status.sync`.
    pub sync: Lenient<Sync>,
    /// `status.health`.
    pub health: Lenient<Health>,
    /// `status.operationState`.
    #[serde(rename = "operationState")]
    pub operation_state: Lenient<OperationState>,
}

/// `status.operationState.operation`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct OperationState {
    /// `operation`.
    pub operation: Lenient<Operation>,
}

/// `operation.sync`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Operation {
    /// `sync`.
    pub sync: Lenient<OperationSync>,
}

/// `operation.sync.changeRevision` (written by the ACR controller).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct OperationSync {
    /// `changeRevision`.
    #[serde(rename = "changeRevision")]
    pub change_revision: Text,
}

/// `status.sync.{status, revision}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Sync {
    /// `status.sync.status`.
    pub status: Text,
    /// `status.sync.revision`.
    pub revision: Text,
}

/// `status.health.status`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Health {
    /// `status.health.status`.
    pub status: Text,
}

/// A string, or nothing when the field is absent or not a string.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Text(pub Option<String>);

impl Text {
    /// The string, or "" (as `as_str().unwrap_or("")`).
    pub fn as_str(&self) -> &str {
        self.0.as_deref().unwrap_or("")
    }
}

/// An object read as `T`, or `T::default()` when the field holds anything but an object.
#[derive(Debug, Default)]
pub struct Lenient<T>(pub T);

/// Skips every element of a sequence (an array where an object was expected).
fn skip_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Anything but a string is the rare, malformed case: read it whole and drop it.
        Ok(Text(match serde_json::Value::deserialize(deserializer)? {
            serde_json::Value::String(s) => Some(s),
            _ => None,
        }))
    }
}

impl<'de, T: Deserialize<'de> + Default> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct LenientVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de> + Default> Visitor<'de> for LenientVisitor<T> {
            type Value = Lenient<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Lenient<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Lenient)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Lenient<T>, E> {
                Ok(Lenient(T::default()))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Lenient<T>, E> {
                Ok(Lenient(T::default()))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Lenient<T>, E> {
                Ok(Lenient(T::default()))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Lenient<T>, E> {
                Ok(Lenient(T::default()))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Lenient<T>, E> {
                Ok(Lenient(T::default()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Lenient<T>, E> {
                Ok(Lenient(T::default()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Lenient<T>, A::Error> {
                skip_seq(seq).map(|()| Lenient(T::default()))
            }
        }
        deserializer.deserialize_any(LenientVisitor(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// What `Value::pointer(p).and_then(Value::as_str).unwrap_or("")` reads.
    fn by_pointer(object: &Value, p: &str) -> String {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    }

    #[test]
    fn the_view_reads_what_json_pointers_read_even_from_odd_shapes() {
        let objects = [
            json!({"kind": "Application", "apiVersion": "argoproj.io/v1alpha1",
                   "metadata": {"name": "a", "namespace": "argocd", "resourceVersion": "7",
                                "labels": {"x": "y"}, "managedFields": [{"f": {}}]},
                   "spec": {"source": {"repoURL": "r"},
                            "destination": {"server": "https://kubernetes.default.svc", "namespace": "web"}},
                   "status": {"sync": {"status": "Synced", "revision": "abc", "comparedTo": {}},
                              "health": {"status": "Healthy", "message": null},
                              "resources": [{"kind": "Deployment"}], "history": []}}),
            json!({"kind": 5, "metadata": {"name": ["a"], "namespace": null, "resourceVersion": 7},
                   "status": {"sync": "Synced", "health": [1, 2]}}),
            json!({"metadata": "a", "status": null}),
            json!({"metadata": {"name": "b"}, "status": {"sync": {"status": {"deep": [1]}}}}),
            json!({"metadata": {"labels": {"a": "b", "n": 5, "o": {"x": 1}}}, "spec": {"destination": "x"}}),
            json!({"metadata": {"labels": [1]}, "spec": {"destination": {"namespace": 3}}}),
            json!([1, 2]),
            json!("text"),
        ];
        for object in objects {
            let Lenient(view): Lenient<ObjectView> =
                serde_json::from_slice(object.to_string().as_bytes()).unwrap();
            let got = [
                view.kind.as_str(),
                view.api_version.as_str(),
                view.metadata.0.name.as_str(),
                view.metadata.0.namespace.as_str(),
                view.metadata.0.resource_version.as_str(),
                view.status.0.sync.0.status.as_str(),
                view.status.0.sync.0.revision.as_str(),
                view.status.0.health.0.status.as_str(),
            ];
            let want = [
                "/kind",
                "/apiVersion",
                "/metadata/name",
                "/metadata/namespace",
                "/metadata/resourceVersion",
                "/status/sync/status",
                "/status/sync/revision",
                "/status/health/status",
            ]
            .map(|p| by_pointer(&object, p));
            assert_eq!(got.map(str::to_string), want, "{object}");
            let destination = &view.spec.0.destination.0;
            assert_eq!(
                [destination.server.as_str(), destination.namespace.as_str()].map(str::to_string),
                ["/spec/destination/server", "/spec/destination/namespace"]
                    .map(|p| by_pointer(&object, p)),
            );
            let labels: Vec<(String, String)> =
                view.metadata.0.labels.0 .0.clone().into_iter().collect();
            let want_labels: Vec<(String, String)> = object
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect();
            assert_eq!(labels, want_labels, "{object}");
            assert_eq!(
                view.metadata.0.name.0.is_some(),
                object
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .is_some()
            );
        }
    }

    #[test]
    fn invalid_json_is_still_refused() {
        for bad in [
            &b"{\"metadata\": {\"name\": \"a\""[..],
            b"{\"spec\": [1,}",
            b"",
            b"nul",
        ] {
            assert!(serde_json::from_slice::<Lenient<ObjectView>>(bad).is_err());
        }
    }
}
