//! Namespaces as kube-apiserver v1.36 serves them: Namespace objects with their lifecycle
//! (`Active`, then `Terminating` after a DELETE until the `kubernetes` finalizer is removed
//! through the `finalize` subresource), the NamespaceLifecycle admission plugin (no create
//! into a missing or terminating namespace; `default`, `kube-system` and `kube-public` may
//! not be deleted), and a stand-in for kube-controller-manager's namespace controller, which
//! deletes a terminating namespace's content and then its finalizer ([`finish`]).
//!
//! Two modes ([`Mode`]): `orrery apiserver`, the conformance suites' simulated server and
//! every scenario's world require namespaces, as a real cluster does (the world creates the
//! ones its components use); servers made with `ApiServer::new` for unit tests take every
//! valid name as an existing, active namespace.
//! Every answer here was read off a real kube-apiserver v1.36.3 (the kubectl suite compares
//! them).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use orrery_system::env::SharedEnv;

use super::ApiServer;

/// The finalizer the namespace controller owns (`spec.finalizers`).
pub const FINALIZER: &str = "kubernetes";

/// The label the server sets on every Namespace to its name.
pub const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The namespaces a fresh kube-apiserver creates.
pub const SYSTEM: [&str; 4] = ["default", "kube-node-lease", "kube-public", "kube-system"];

/// The namespaces NamespaceLifecycle refuses to delete.
pub const IMMORTAL: [&str; 3] = ["default", "kube-public", "kube-system"];

/// How often the namespace stand-in looks again at content that is still there (objects
/// whose finalizers hold them); the real controller requeues with a backoff.
pub const RECHECK: Duration = Duration::from_secs(1);

/// Whether objects may only be created in namespaces that exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Every valid name is an existing, active namespace unless a Namespace object says
    /// otherwise (servers made for unit tests, which need no bootstrap).
    Implicit,
    /// As kube-apiserver: a create into a namespace with no Namespace object is 404.
    Required,
}

/// Where a namespace is in its life, as admission sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// No Namespace object.
    Missing,
    /// Objects may be created in it.
    Active,
    /// Deleted; its content is being removed.
    Terminating,
}

/// The phase of a stored Namespace object (or of none), read from `status.phase` as
/// NamespaceLifecycle reads it (a DELETE sets it with the deletion timestamp).
pub fn phase_of(object: Option<&Value>) -> Phase {
    match object {
        None => Phase::Missing,
        Some(ns) if ns["status"]["phase"] == "Terminating" => Phase::Terminating,
        Some(_) => Phase::Active,
    }
}

/// Whether `spec.finalizers` of a Namespace lists anything.
pub fn has_spec_finalizers(object: &Value) -> bool {
    object["spec"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
}

/// What a create stores beyond the body (`namespaceStrategy.PrepareForCreate` and the
/// name label): `kubernetes` added to `spec.finalizers`, `status.phase` Active.
pub fn prepare_create(object: &mut Value) {
    let Some(map) = object.as_object_mut() else {
        return;
    };
    if !map.get("spec").is_some_and(Value::is_object) {
        map.insert("spec".into(), json!({}));
    }
    let spec = map.get_mut("spec").expect("inserted above");
    if !spec.get("finalizers").is_some_and(Value::is_array) {
        spec["finalizers"] = json!([]);
    }
    let finalizers = spec["finalizers"].as_array_mut().expect("an array");
    if !finalizers.iter().any(|f| f == FINALIZER) {
        finalizers.push(json!(FINALIZER));
    }
    map.insert("status".into(), json!({"phase": "Active"}));
    label(object);
}

/// What an update through the main endpoint keeps (`PrepareForUpdate`): `spec.finalizers`
/// change only through `finalize`; the name label is set again.
pub fn prepare_update(current: &Value, next: &mut Value) {
    match current["spec"].get("finalizers") {
        Some(finalizers) => {
            if !next.get("spec").is_some_and(Value::is_object) {
                next["spec"] = json!({});
            }
            next["spec"]["finalizers"] = finalizers.clone();
        }
        None => {
            if let Some(spec) = next.get_mut("spec").and_then(Value::as_object_mut) {
                spec.shift_remove("finalizers");
            }
        }
    }
    label(next);
}

/// The name label, always equal to the name.
fn label(object: &mut Value) {
    let name = object["metadata"]["name"].clone();
    if !object["metadata"]
        .get("labels")
        .is_some_and(Value::is_object)
    {
        object["metadata"]["labels"] = json!({});
    }
    object["metadata"]["labels"][NAME_LABEL] = name;
}

/// The stand-in for the namespace controller: deletes everything in `namespace` (objects
/// with finalizers are marked and waited for), then removes the `kubernetes` finalizer,
/// which deletes the Namespace unless other finalizers hold it. Spawned when a namespace
/// starts terminating; ends when it is gone or no longer waits for this finalizer.
pub async fn finish(env: SharedEnv, server: Arc<ApiServer>, namespace: String) {
    loop {
        let window = server.knobs().compaction_window;
        let (done, rv) = {
            let mut store = server.store();
            let done = store.remove_namespace_content(
                server.kinds(),
                &namespace,
                env.elapsed(),
                env.unix_millis(),
            );
            store.compact(env.elapsed(), window);
            (done, store.rv())
        };
        server.notify(rv);
        if done {
            return;
        }
        env.sleep(RECHECK).await;
    }
}
