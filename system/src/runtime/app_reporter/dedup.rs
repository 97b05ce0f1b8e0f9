//! What is not re-sent (research §1.5, `event_reporter/reporter/application_event_reporter.go`):
//! the app-level "last sent" entry and the resource-level entries, both in the shared cache
//! (Argo CD's Redis in the real runtime), both with a 20-minute TTL, both written only after
//! a successful send.
//!
//! The real app entry holds the whole Application last sent; here it holds digests of the
//! parts the rules compare (health, spec+status+operation, metadata), which gives the same
//! decisions with a small value.

use crate::core::json::Pointer as _;
use kube::api::DynamicObject;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The app-level entry's key: `app|<ns>/<name>|last-sent-event`.
pub fn app_key(namespace: &str, name: &str) -> String {
    format!("app|{namespace}/{name}|last-sent-event")
}

/// The resource-level entry's key:
/// `app|<ns>/<name>|<latestRevision>|res|<group>/<version>/<kind>/<name>/<namespace>|last-sent-event`.
/// The app's latest history revision is part of it, so a new revision re-sends every resource.
pub fn resource_key(app_namespace: &str, app: &str, latest_revision: &str, res: &Value) -> String {
    let field = |f: &str| res.get(f).and_then(Value::as_str).unwrap_or("");
    format!(
        "app|{app_namespace}/{app}|{latest_revision}|res|{}/{}/{}/{}/{}|last-sent-event",
        field("group"),
        field("version"),
        field("kind"),
        field("name"),
        field("namespace")
    )
}

fn digest(value: &impl Serialize) -> String {
    let mut hash = crate::env::Fnv1a64::new();
    // Writing into a hash cannot fail; a value that cannot be serialised hashes what came out.
    let _ = serde_json::to_writer(&mut hash, value);
    format!("{:016x}", hash.finish())
}

/// An object as it serialises after serde_json's `Map::remove(skip)`, without copying it:
/// with `preserve_order` that removal is a `swap_remove` (the last entry takes the removed
/// one's place), so the entries come out in that order. `conditions` also drops
/// `lastTransitionTime` from every object in a `conditions` array (the status rule).
struct Without<'a> {
    map: &'a serde_json::Map<String, Value>,
    skip: &'a str,
    conditions: bool,
}

impl Serialize for Without<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let entries: Vec<(&String, &Value)> = self.map.iter().collect();
        let mut order: Vec<usize> = (0..entries.len()).collect();
        if let Some(gone) = entries.iter().position(|(k, _)| k.as_str() == self.skip) {
            order.swap_remove(gone);
        }
        let mut out = serializer.serialize_map(Some(order.len()))?;
        for i in order {
            let (key, value) = entries[i];
            match value {
                Value::Array(items) if self.conditions && key == "conditions" => {
                    out.serialize_entry(key, &Conditions(items))?
                }
                _ => out.serialize_entry(key, value)?,
            }
        }
        out.end()
    }
}

/// `status.conditions` without each condition's `lastTransitionTime`.
struct Conditions<'a>(&'a [Value]);

impl Serialize for Conditions<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|c| match c {
            Value::Object(map) => Filtered::Map(Without {
                map,
                skip: "lastTransitionTime",
                conditions: false,
            }),
            other => Filtered::Value(other),
        }))
    }
}

/// A value, or an object without some of its keys.
enum Filtered<'a> {
    Value(&'a Value),
    Map(Without<'a>),
}

impl Serialize for Filtered<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Filtered::Value(v) => v.serialize(serializer),
            Filtered::Map(m) => m.serialize(serializer),
        }
    }
}

/// `value` without `skip` (when it is an object).
fn without<'a>(value: Option<&'a Value>, skip: &'a str, conditions: bool) -> Filtered<'a> {
    match value {
        Some(Value::Object(map)) => Filtered::Map(Without {
            map,
            skip,
            conditions,
        }),
        Some(other) => Filtered::Value(other),
        None => Filtered::Value(&Value::Null),
    }
}

/// A `status.resources[]` entry as compared by the resource-level rule (deep equality).
pub fn resource_digest(res: &Value) -> String {
    digest(res)
}

/// What the app-level rules compare, as stored in the cache.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppFingerprint {
    /// `status.health.status`.
    pub health: String,
    /// `spec` (without `project`), `status` (without `reconciledAt`, conditions without
    /// `lastTransitionTime`) and `operation`.
    pub core: String,
    /// `metadata` without `resourceVersion`, `generation`, `generateName`, `managedFields`
    /// and the `kubectl.kubernetes.io/last-applied-configuration` annotation.
    pub meta: String,
}

impl AppFingerprint {
    /// The fingerprint of `app` after the real reporter's normalisation (rule 3).
    pub fn of(app: &DynamicObject) -> Self {
        // spec without `project` ("take spec.project from the new app": never a difference),
        // status without `reconciledAt` and its conditions without `lastTransitionTime`,
        // hashed as they serialise, without copies of them.
        let spec = without(app.data.get("spec"), "project", false);
        let status = without(app.data.get("status"), "reconciledAt", true);
        let operation = app.data.get("operation").unwrap_or(&Value::Null);
        let health = app
            .data
            .at("/status/health/status")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let mut meta = app.metadata.clone();
        meta.resource_version = None;
        meta.generation = None;
        meta.generate_name = None;
        meta.managed_fields = None;
        if let Some(annotations) = meta.annotations.as_mut() {
            annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
        AppFingerprint {
            health,
            core: digest(&(spec, status, operation)),
            meta: digest(&meta),
        }
    }

    /// The cache value.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a cache value; anything unreadable counts as "no entry" (the event is sent).
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice(bytes).ok()
    }
}

/// The kind of watch event, as the real informer hands it over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchType {
    /// `OnAdd` (the initial list, or a new app).
    Added,
    /// `OnUpdate`.
    Modified,
    /// `OnDelete`.
    Deleted,
}

/// The app-level decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppDecision {
    /// Send; with `ignore_resource_cache` every resource event is re-sent.
    Send {
        /// The app became Healthy: the resource cache is bypassed (rule 4).
        ignore_resource_cache: bool,
    },
    /// Nothing the rules look at changed (`cached_ignored_events`).
    Skip,
}

/// `ShouldSendApplicationEvent`, rules 1–7 in order; `cached` is `None` when there is no
/// entry or the cache failed (rule 2).
pub fn decide(
    cached: Option<&AppFingerprint>,
    now: &AppFingerprint,
    kind: WatchType,
) -> AppDecision {
    let send = AppDecision::Send {
        ignore_resource_cache: false,
    };
    if kind == WatchType::Deleted {
        return send; // rule 1
    }
    let Some(cached) = cached else {
        return send; // rule 2
    };
    if now.health == "Healthy" && cached.health != "Healthy" {
        return AppDecision::Send {
            ignore_resource_cache: true, // rule 4
        };
    }
    if now.core != cached.core {
        return send; // rule 5
    }
    if kind == WatchType::Modified && now.meta != cached.meta {
        return send; // rule 6
    }
    AppDecision::Skip // rule 7
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::fnv1a_64;
    use serde_json::json;

    /// The digests as first written: copies with serde_json's `remove`, then the text hashed.
    fn fingerprint_by_copies(app: &DynamicObject) -> (String, String) {
        let hash = |v: &Value| format!("{:016x}", fnv1a_64(v.to_string().as_bytes()));
        let mut spec = app.data.get("spec").cloned().unwrap_or(Value::Null);
        if let Some(map) = spec.as_object_mut() {
            map.remove("project");
        }
        let mut status = app.data.get("status").cloned().unwrap_or(Value::Null);
        if let Some(map) = status.as_object_mut() {
            map.remove("reconciledAt");
            if let Some(conditions) = map.get_mut("conditions").and_then(Value::as_array_mut) {
                for c in conditions.iter_mut().filter_map(Value::as_object_mut) {
                    c.remove("lastTransitionTime");
                }
            }
        }
        let operation = app.data.get("operation").cloned().unwrap_or(Value::Null);
        let mut meta = app.metadata.clone();
        meta.resource_version = None;
        meta.generation = None;
        meta.generate_name = None;
        meta.managed_fields = None;
        (
            hash(&json!([spec, status, operation])),
            hash(&serde_json::to_value(&meta).unwrap()),
        )
    }

    #[test]
    fn fingerprints_hash_the_same_text_as_copies_with_keys_removed() {
        let apps = [
            json!({"metadata": {"name": "a", "resourceVersion": "7"},
                   "spec": {"project": "p", "source": {"repoURL": "r"}, "destination": {}},
                   "status": {"reconciledAt": "t", "sync": {"status": "Synced"},
                              "conditions": [{"type": "X", "lastTransitionTime": "t", "message": "m"}, 5],
                              "health": {"status": "Healthy"}}}),
            // The removed keys last, first, absent; status not an object; no spec.
            json!({"metadata": {"name": "b"}, "spec": {"source": {}, "project": "p"},
                   "status": {"conditions": [{"message": "m", "lastTransitionTime": "t"}], "reconciledAt": "t"}}),
            json!({"metadata": {"name": "c"}, "spec": {"a": 1}, "status": "odd", "operation": {"sync": {}}}),
            json!({"metadata": {"name": "d", "labels": {"x": "y"}}}),
        ];
        for a in apps {
            let mut object = a.clone();
            object["apiVersion"] = json!("argoproj.io/v1alpha1");
            object["kind"] = json!("Application");
            let app: DynamicObject = serde_json::from_value(object).unwrap();
            let got = AppFingerprint::of(&app);
            assert_eq!((got.core, got.meta), fingerprint_by_copies(&app), "{a}");
        }
    }

    fn app(status: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "a", "namespace": "argocd", "resourceVersion": "1"},
            "spec": {"project": "default", "source": {"repoURL": "r", "path": "p"}},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn the_rules_skip_reconcile_noise_and_send_real_changes() {
        let base = app(
            json!({"health": {"status": "Healthy"}, "reconciledAt": "t1",
            "conditions": [{"type": "x", "lastTransitionTime": "t1"}]}),
        );
        let cached = AppFingerprint::of(&base);
        let mut noise = app(
            json!({"health": {"status": "Healthy"}, "reconciledAt": "t2",
            "conditions": [{"type": "x", "lastTransitionTime": "t2"}]}),
        );
        noise.metadata.resource_version = Some("2".into());
        noise.data["spec"]["project"] = json!("other");
        let fp = AppFingerprint::of(&noise);
        assert_eq!(
            decide(Some(&cached), &fp, WatchType::Modified),
            AppDecision::Skip
        );
        assert_eq!(
            decide(Some(&cached), &fp, WatchType::Deleted),
            AppDecision::Send {
                ignore_resource_cache: false
            }
        );
        assert_eq!(
            decide(None, &fp, WatchType::Modified),
            AppDecision::Send {
                ignore_resource_cache: false
            }
        );
        let degraded = AppFingerprint::of(&app(json!({"health": {"status": "Degraded"}})));
        assert_eq!(
            decide(Some(&cached), &degraded, WatchType::Modified),
            AppDecision::Send {
                ignore_resource_cache: false
            }
        );
        assert_eq!(
            decide(Some(&degraded), &cached, WatchType::Modified),
            AppDecision::Send {
                ignore_resource_cache: true
            },
            "became Healthy: every resource is re-sent"
        );
        let mut labelled = base.clone();
        labelled.metadata.labels = Some([("team".to_string(), "x".to_string())].into());
        let labelled = AppFingerprint::of(&labelled);
        assert_eq!(
            decide(Some(&cached), &labelled, WatchType::Modified),
            AppDecision::Send {
                ignore_resource_cache: false
            }
        );
        assert_eq!(
            decide(Some(&cached), &labelled, WatchType::Added),
            AppDecision::Skip,
            "metadata is compared for Modified events only"
        );
        assert_eq!(AppFingerprint::decode(&cached.encode()), Some(cached));
        assert_eq!(AppFingerprint::decode(b"garbage"), None);
    }

    #[test]
    fn the_resource_key_carries_the_latest_revision() {
        let res = json!({"group": "apps", "version": "v1", "kind": "Deployment", "name": "a", "namespace": "a"});
        assert_eq!(
            resource_key("argocd", "a", "abc", &res),
            "app|argocd/a|abc|res|apps/v1/Deployment/a/a|last-sent-event"
        );
        assert_ne!(
            resource_key("argocd", "a", "abc", &res),
            resource_key("argocd", "a", "def", &res)
        );
    }
}
