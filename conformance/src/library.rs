//! The fidelity scripts: each exercises one behaviour clients rely on, and runs unchanged
//! against the real and the simulated API server.
//!
//! Types used: `ConfigMap` (built-in, no generation), `Application` (custom resource
//! without a status subresource, as Argo CD's) and `Rollout` (custom resource with a
//! status subresource), all served by both servers from the same fixture CRDs.

use serde_json::{json, Value};

use crate::script::Script;

const CM: &str = "/api/v1/namespaces/{ns}/configmaps";
const NAMESPACES: &str = "/api/v1/namespaces";
const EVENTS: &str = "/api/v1/namespaces/{ns}/events";
const EVENTS_V1: &str = "/apis/events.k8s.io/v1/namespaces/{ns}/events";
const APPS: &str = "/apis/argoproj.io/v1alpha1/namespaces/{ns}/applications";
const ROLLOUTS: &str = "/apis/argoproj.io/v1alpha1/namespaces/{ns}/rollouts";
const ANALYSIS_RUNS: &str = "/apis/argoproj.io/v1alpha1/namespaces/{ns}/analysisruns";

/// A ConfigMap; empty `labels`/`data` are left out (sending `{}` would make an applier own the empty map).
fn cm(name: &str, labels: Value, data: Value) -> Value {
    let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    if labels.as_object().is_some_and(|l| !l.is_empty()) {
        object["metadata"]["labels"] = labels;
    }
    if data.as_object().is_some_and(|d| !d.is_empty()) {
        object["data"] = data;
    }
    object
}

fn app(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": name}, "spec": spec})
}

fn rollout(name: &str, replicas: u32) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": name}, "spec": {"replicas": replicas}})
}

fn at(base: &str, name: &str) -> String {
    format!("{base}/{name}")
}

/// Every fidelity script, in report order.
pub fn scripts() -> Vec<Script> {
    vec![
        // --- create / get / already exists / not found
        Script::new("create-get-configmap", "POST creates (201) with uid, RV and no generation on a ConfigMap; GET returns it")
            .post(CM, cm("a", json!({"app": "web"}), json!({"k": "v"})))
            .get(&at(CM, "a")),
        Script::new("create-existing-409", "POST of an existing name is 409 AlreadyExists")
            .post(CM, cm("a", json!({}), json!({})))
            .post(CM, cm("a", json!({}), json!({}))),
        Script::new("get-missing-404", "GET of a missing object is 404 NotFound with details")
            .get(&at(CM, "missing"))
            .get(&at(APPS, "missing")),
        Script::new("create-custom-resource", "POST of a custom resource sets generation 1; GET returns it")
            .post(APPS, app("guestbook", json!({"project": "default"})))
            .get(&at(APPS, "guestbook")),
        Script::new("create-namespace-mismatch-400", "a body namespace different from the path's is 400 BadRequest")
            .post(CM, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "elsewhere"}})),
        Script::new("malformed-json-400", "a body that is not JSON is 400 BadRequest")
            .raw("POST", CM, "application/json", "{not json"),
        Script::new("create-invalid-names-422", "names that are not DNS-1123 subdomains, or longer than 253 characters, and bad label keys and values are 422 Invalid")
            .post(CM, cm("Bad_Name!", json!({}), json!({})))
            .post(CM, cm(&"a".repeat(254), json!({}), json!({})))
            .post(CM, cm("ok-name", json!({"bad key": "v"}), json!({})))
            .post(CM, cm("ok-name", json!({"k": "bad value!"}), json!({})))
            .post(CM, cm("ok-name", json!({}), json!({}))),
        Script::new("create-invalid-annotations-422", "an annotation key that is not a qualified name (case aside), or annotations over 256 KiB in total, are 422 Invalid")
            .post(CM, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "annotations": {"bad key": "v"}}}))
            .post(CM, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "annotations": {"big": "x".repeat(262_145)}}}))
            .post(CM, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "annotations": {"Example.COM/Upper": "v"}}})),
        // --- updates and optimistic concurrency
        Script::new("put-stale-rv-409", "PUT with a stale resourceVersion is 409 Conflict")
            .post(CM, cm("a", json!({}), json!({"k": "1"})))
            .put(&at(CM, "a"), json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "resourceVersion": "{rv:0}"}, "data": {"k": "2"}}))
            .put(&at(CM, "a"), json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "resourceVersion": "{rv:0}"}, "data": {"k": "3"}}))
            .get(&at(CM, "a")),
        Script::new("put-configmap-without-rv", "PUT of a built-in without resourceVersion is an unconditional update")
            .post(CM, cm("a", json!({}), json!({"k": "1"})))
            .put(&at(CM, "a"), json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "2"}})),
        Script::new("put-custom-resource-without-rv-422", "PUT of a custom resource without resourceVersion is 422 Invalid")
            .post(APPS, app("a", json!({"project": "default"})))
            .put(&at(APPS, "a"), app("a", json!({"project": "other"}))),
        Script::new("put-missing-404", "PUT of a missing custom resource with a resourceVersion is 404")
            .put(&at(APPS, "ghost"), json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "ghost", "resourceVersion": "1"}, "spec": {}})),
        Script::new("merge-patch", "a merge patch changes, adds and (with null) removes fields")
            .post(CM, cm("a", json!({"keep": "1", "drop": "1"}), json!({"k": "1", "gone": "x"})))
            .merge_patch(&at(CM, "a"), json!({"metadata": {"labels": {"drop": null, "new": "2"}}, "data": {"k": "2", "gone": null}})),
        Script::new("merge-patch-missing-404", "a merge patch of a missing object is 404")
            .merge_patch(&at(CM, "ghost"), json!({"data": {"k": "v"}})),
        Script::new("patch-unsupported-media-415", "a PATCH with an unknown content type is 415")
            .post(CM, cm("a", json!({}), json!({})))
            .raw("PATCH", &at(CM, "a"), "text/plain", "k=v"),
        // --- server-side apply
        Script::new("apply-creates", "server-side apply creates a missing object and records its manager")
            .with_managed_fields()
            .apply(&format!("{}?fieldManager=alice", at(CM, "a")), cm("a", json!({"team": "x"}), json!({"k": "v"}))),
        Script::new("apply-same-manager-updates", "a second apply by the same manager updates and drops fields it no longer sets")
            .with_managed_fields()
            .apply(&format!("{}?fieldManager=alice", at(CM, "a")), cm("a", json!({}), json!({"k": "1", "old": "x"})))
            .apply(&format!("{}?fieldManager=alice", at(CM, "a")), cm("a", json!({}), json!({"k": "2"}))),
        Script::new("apply-conflict-409", "apply of a field owned by another manager is 409 Conflict naming the owner")
            .apply(&format!("{}?fieldManager=alice", at(CM, "a")), cm("a", json!({}), json!({"k": "1"})))
            .apply(&format!("{}?fieldManager=bob", at(CM, "a")), cm("a", json!({}), json!({"k": "2"})))
            .get(&at(CM, "a")),
        Script::new("apply-force-takes-ownership", "apply with force=true overrides the conflict and moves ownership")
            .with_managed_fields()
            .apply(&format!("{}?fieldManager=alice", at(CM, "a")), cm("a", json!({}), json!({"k": "1"})))
            .apply(&format!("{}?fieldManager=bob&force=true", at(CM, "a")), cm("a", json!({}), json!({"k": "2"}))),
        Script::new("apply-shared-field-same-value", "two managers applying the same value share the field without conflict")
            .with_managed_fields()
            .apply(&format!("{}?fieldManager=alice", at(CM, "a")), cm("a", json!({}), json!({"k": "1"})))
            .apply(&format!("{}?fieldManager=bob", at(CM, "a")), cm("a", json!({}), json!({"k": "1"}))),
        Script::new("apply-without-field-manager-422", "apply without fieldManager is 422 Invalid on PatchOptions")
            .apply(&at(CM, "a"), cm("a", json!({}), json!({"k": "1"}))),
        // --- delete
        Script::new("delete-with-finalizers", "DELETE of an object with finalizers marks it (200 with deletionTimestamp, grace period 0), a second DELETE changes nothing, and removing the last finalizer deletes it")
            .post(CM, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "finalizers": ["example.com/hold", "example.com/other"]}}))
            .delete(&at(CM, "a"))
            .get(&at(CM, "a"))
            .delete(&at(CM, "a"))
            .merge_patch(&at(CM, "a"), json!({"metadata": {"finalizers": ["example.com/hold"]}}))
            .merge_patch(&at(CM, "a"), json!({"metadata": {"finalizers": null}}))
            .get(&at(CM, "a")),
        Script::new("finalizers-custom-resource", "marking a custom resource for deletion bumps its generation; no finalizer may be added while it is being deleted (422), and an update cannot clear deletionTimestamp")
            .post(APPS, json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "a", "finalizers": ["example.com/hold"]}, "spec": {"project": "default"}}))
            .delete(&at(APPS, "a"))
            .merge_patch(&at(APPS, "a"), json!({"metadata": {"finalizers": ["example.com/hold", "example.com/late"]}}))
            .merge_patch(&at(APPS, "a"), json!({"metadata": {"deletionTimestamp": null}, "spec": {"project": "other"}}))
            .merge_patch(&at(APPS, "a"), json!({"metadata": {"finalizers": []}}))
            .get(&at(APPS, "a")),
        Script::new("watch-finalized-deletion", "a deletion held by a finalizer is MODIFIED (deletionTimestamp) and then DELETED when the finalizer goes")
            .post(CM, cm("seed", json!({}), json!({})))
            .post(CM, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "finalizers": ["example.com/hold"]}}))
            .delete(&at(CM, "a"))
            .merge_patch(&at(CM, "a"), json!({"metadata": {"finalizers": null}}))
            .watch(&format!("{CM}?resourceVersion={{rv:0}}")),
        // --- dry run
        Script::new("dry-run-writes-nothing", "every write verb with dryRun=All is validated and answered as the write would be, and stores nothing: no new resourceVersion, no watch event")
            .post(CM, cm("seed", json!({}), json!({})))
            .post(&format!("{CM}?dryRun=All"), cm("a", json!({}), json!({"k": "1"})))
            .get(&at(CM, "a"))
            .post(CM, cm("b", json!({}), json!({"k": "1"})))
            .put(&format!("{}?dryRun=All", at(CM, "b")), json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}, "data": {"k": "2"}}))
            .merge_patch(&format!("{}?dryRun=All", at(CM, "b")), json!({"data": {"k": "3"}}))
            .apply(&format!("{}?dryRun=All&fieldManager=alice&force=true", at(CM, "b")), cm("b", json!({}), json!({"k": "4"})))
            .delete(&format!("{}?dryRun=All", at(CM, "b")))
            .get(&at(CM, "b"))
            .watch(&format!("{CM}?resourceVersion={{rv:0}}")),
        Script::new("dry-run-invalid", "dryRun=All still validates (409, 422, 404 as a real write), and a dryRun value other than All is 422 Invalid")
            .post(CM, cm("a", json!({}), json!({})))
            .post(&format!("{CM}?dryRun=All"), cm("a", json!({}), json!({})))
            .post(&format!("{CM}?dryRun=All"), cm("Bad_Name!", json!({}), json!({})))
            .delete(&format!("{}?dryRun=All", at(CM, "missing")))
            .post(&format!("{CM}?dryRun=Yes"), cm("c", json!({}), json!({})))
            .merge_patch(&format!("{}?dryRun=maybe", at(CM, "a")), json!({"data": {"k": "v"}})),
        Script::new("delete-then-get-404", "DELETE answers with a Success Status naming the object; a later GET and a second DELETE are 404")
            .post(CM, cm("a", json!({}), json!({})))
            .delete(&at(CM, "a"))
            .get(&at(CM, "a"))
            .delete(&at(CM, "a")),
        Script::new("delete-custom-resource", "DELETE of a custom resource answers with a Success Status (group, plural, uid)")
            .post(APPS, app("a", json!({})))
            .delete(&at(APPS, "a")),
        // --- lists
        // Paged lists use a custom resource: clusters with controllers (kind) inject a
        // `kube-root-ca.crt` ConfigMap into every namespace, which an unfiltered list would see.
        Script::new("list-paged-continue", "a paged list with limit and continue returns every item once, in name order, with remainingItemCount")
            .post(APPS, app("c", json!({})))
            .post(APPS, app("a", json!({})))
            .post(APPS, app("b", json!({})))
            .get(&format!("{APPS}?limit=2"))
            .get(&format!("{APPS}?limit=2&continue={{continue:3}}")),
        Script::new("list-paged-snapshot", "later pages are served from the first page's snapshot, not the current state")
            .post(APPS, app("a", json!({})))
            .post(APPS, app("b", json!({})))
            .get(&format!("{APPS}?limit=1"))
            .post(APPS, app("c", json!({})))
            .merge_patch(&at(APPS, "b"), json!({"spec": {"changed": "yes"}}))
            .get(&format!("{APPS}?limit=5&continue={{continue:2}}")),
        Script::new("list-custom-resources", "an unpaged list of custom resources (unstructured) in name order")
            .post(APPS, app("b", json!({"project": "x"})))
            .post(APPS, app("a", json!({})))
            .get(APPS),
        Script::new("list-label-selector", "lists filter by equality and set-based label selectors")
            .post(CM, cm("a", json!({"tier": "web", "env": "prod"}), json!({})))
            .post(CM, cm("b", json!({"tier": "db", "env": "prod"}), json!({})))
            .post(CM, cm("c", json!({"tier": "web"}), json!({})))
            .get(&format!("{CM}?labelSelector=tier%3Dweb"))
            .get(&format!("{CM}?labelSelector=env%20in%20(prod),tier!%3Dweb"))
            .get(&format!("{CM}?labelSelector=tier,!env")),
        Script::new("list-field-selector", "lists filter by metadata.name field selector")
            .post(CM, cm("a", json!({}), json!({})))
            .post(CM, cm("b", json!({}), json!({})))
            .get(&format!("{CM}?fieldSelector=metadata.name%3Db")),
        // --- watches
        Script::new("watch-from-rv", "a watch from an RV replays later ADDED/MODIFIED/DELETED events in order")
            .post(CM, cm("seed", json!({}), json!({})))
            .post(CM, cm("a", json!({}), json!({"k": "1"})))
            .merge_patch(&at(CM, "a"), json!({"data": {"k": "2"}}))
            .delete(&at(CM, "a"))
            .watch(&format!("{CM}?resourceVersion={{rv:0}}")),
        Script::new("watch-label-selector-transitions", "with a label selector, objects entering the selection are ADDED and leaving it DELETED")
            .post(CM, cm("seed", json!({}), json!({})))
            .post(CM, cm("a", json!({"sel": "no"}), json!({})))
            .merge_patch(&at(CM, "a"), json!({"metadata": {"labels": {"sel": "yes"}}}))
            .merge_patch(&at(CM, "a"), json!({"data": {"k": "v"}}))
            .merge_patch(&at(CM, "a"), json!({"metadata": {"labels": {"sel": "no"}}}))
            .watch(&format!("{CM}?resourceVersion={{rv:0}}&labelSelector=sel%3Dyes")),
        Script::new("patch-noop-keeps-rv", "a merge patch that changes nothing writes nothing: same resourceVersion, no watch event")
            .post(CM, cm("seed", json!({}), json!({})))
            .post(CM, cm("a", json!({"app": "web"}), json!({"k": "v"})))
            .merge_patch(&at(CM, "a"), json!({"data": {"k": "v"}}))
            .merge_patch(&at(APPS, "b-missing"), json!({}))
            .post(APPS, app("b", json!({"project": "default"})))
            .merge_patch(&at(APPS, "b"), json!({"spec": {"project": "default"}}))
            .merge_patch(&at(CM, "a"), json!({"data": {"k": "w"}}))
            .watch(&format!("{CM}?resourceVersion={{rv:0}}")),
        Script::new("watch-deletion-rv", "the DELETED event carries a resourceVersion newer than the object's last write")
            .post(CM, cm("a", json!({}), json!({})))
            .delete(&at(CM, "a"))
            .watch(&format!("{CM}?resourceVersion={{rv:0}}")),
        Script::new("watch-initial-events-bookmark", "sendInitialEvents streams the current state then a bookmark marking its end")
            .post(CM, cm("a", json!({"set": "x"}), json!({})))
            .post(CM, cm("b", json!({"set": "x"}), json!({})))
            .watch(&format!("{CM}?sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&labelSelector=set%3Dx")),
        // Watching from the newest RV keeps the real side deterministic: the cache waits until
        // it holds that RV, so nothing arrives later. Watching from an older RV is timing on a
        // real server: an event the watch cache had at the start raises the watcher's floor
        // (no bookmark at its RV), one it heard from etcd after the start does not (a bookmark
        // repeats its RV) — CI saw both on a loaded machine.
        Script::new("watch-quiet-no-bookmark", "a bookmark is never at or below the RV a watch started from: a watch from the newest RV gets no bookmark, before or at its timeout (bookmarks at RVs moved by writes outside the script are timing on a real cluster, and left out)")
            .post(CM, cm("seed", json!({"set": "y"}), json!({})))
            .post(CM, cm("a", json!({"set": "y"}), json!({})))
            .watch(&format!("{CM}?resourceVersion={{rv:1}}&allowWatchBookmarks=true&labelSelector=set%3Dy&timeoutSeconds=5"))
            .ignoring_newer_bookmarks(),
        Script::new("watch-field-selector", "a watch with a metadata.name field selector sees only that object")
            .post(CM, cm("seed", json!({}), json!({})))
            .post(CM, cm("a", json!({}), json!({})))
            .post(CM, cm("b", json!({}), json!({})))
            .merge_patch(&at(CM, "b"), json!({"data": {"k": "v"}}))
            .watch(&format!("{CM}?resourceVersion={{rv:0}}&fieldSelector=metadata.name%3Db")),
        // --- generation and status
        Script::new("generation-without-status-subresource", "without a status subresource, status changes bump generation like spec changes")
            .post(APPS, app("a", json!({"project": "default"})))
            .merge_patch(&at(APPS, "a"), json!({"status": {"sync": {"status": "Synced"}}}))
            .merge_patch(&at(APPS, "a"), json!({"spec": {"project": "other"}}))
            .merge_patch(&at(APPS, "a"), json!({"metadata": {"labels": {"x": "y"}}})),
        Script::new("generation-with-status-subresource", "with a status subresource, /status writes keep generation and the main endpoint ignores status")
            .post(ROLLOUTS, json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": "r"}, "spec": {"replicas": 1}, "status": {"phase": "ignored"}}))
            .merge_patch(&format!("{}/status", at(ROLLOUTS, "r")), json!({"status": {"phase": "Healthy"}}))
            .merge_patch(&at(ROLLOUTS, "r"), json!({"spec": {"replicas": 3}, "status": {"phase": "ignored-again"}}))
            .merge_patch(&at(ROLLOUTS, "r"), json!({"metadata": {"annotations": {"a": "b"}}})),
        Script::new("status-subresource-put", "PUT to /status changes only status; PUT to the main endpoint keeps it")
            .post(ROLLOUTS, rollout("r", 1))
            .put(&format!("{}/status", at(ROLLOUTS, "r")), json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": "r", "resourceVersion": "{rv:0}"}, "spec": {"replicas": 9}, "status": {"phase": "Progressing"}}))
            .put(&at(ROLLOUTS, "r"), json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "metadata": {"name": "r", "resourceVersion": "{rv:1}"}, "spec": {"replicas": 2}, "status": {"phase": "dropped"}})),
        Script::new("rollout-scale", "a Rollout's scale subresource (its CRD declares it): GET is an autoscaling/v1 Scale of spec.replicas, status.HPAReplicas and status.selector (replicas 0 omitted); PUT and merge PATCH write spec.replicas (generation + 1); a stale resourceVersion is 409, negative replicas 422 worded on the Rollout (its CRD's validation of specReplicasPath); a type without it is 404 as a missing object, as is a missing object's")
            .post(ROLLOUTS, rollout("r", 2))
            .merge_patch(&format!("{}/status", at(ROLLOUTS, "r")), json!({"status": {"HPAReplicas": 2, "selector": "app=r"}}))
            .get(&format!("{}/scale", at(ROLLOUTS, "r")))
            .put(&format!("{}/scale", at(ROLLOUTS, "r")), json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "r", "resourceVersion": "{rv:1}"}, "spec": {"replicas": 4}}))
            .merge_patch(&format!("{}/scale", at(ROLLOUTS, "r")), json!({"spec": {"replicas": 0}}))
            .get(&format!("{}/scale", at(ROLLOUTS, "r")))
            .put(&format!("{}/scale", at(ROLLOUTS, "r")), json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "r", "resourceVersion": "{rv:1}"}, "spec": {"replicas": 5}}))
            .put(&format!("{}/scale", at(ROLLOUTS, "r")), json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "r"}, "spec": {"replicas": -1}}))
            .get(&at(ROLLOUTS, "r"))
            .post(APPS, app("a", json!({"project": "default"})))
            .get(&format!("{}/scale", at(APPS, "a")))
            .get(&format!("{}/scale", at(ROLLOUTS, "missing"))),
        Script::new("namespace-lifecycle", "a Namespace is made with the name label, the kubernetes finalizer and phase Active; a create into a missing namespace is 404; a DELETE answers the namespace marked and Terminating, and a create into it is then 403 NamespaceTerminating; finalize takes only PUT (405 otherwise) and validates the finalizer names (422); default may not be deleted (403)")
            .post(NAMESPACES, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "{ns}-t"}}))
            .get(&at(NAMESPACES, "{ns}-t"))
            .post("/api/v1/namespaces/{ns}-missing/configmaps", cm("x", json!({}), json!({})))
            .post("/api/v1/namespaces/{ns}-t/configmaps", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "held", "finalizers": ["example.com/hold"]}}))
            .delete(&at(NAMESPACES, "{ns}-t"))
            .post("/api/v1/namespaces/{ns}-t/configmaps", cm("late", json!({}), json!({})))
            .get(&at(NAMESPACES, "{ns}-t/finalize"))
            .put(&at(NAMESPACES, "{ns}-t/finalize"), json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "{ns}-t"}, "spec": {"finalizers": ["bad name"]}}))
            .delete(&at(NAMESPACES, "default")),
        Script::new("events-core-v1", "core/v1 Events: a created Event carries the typed object's defaults (source {}, null timestamps, empty reporting fields; zero count and empty strings left out); listed by involvedObject, source, type and reason field selectors (any other field 400); its involved object's namespace must be its own, and one without a namespace lives in default (422 otherwise)")
            .post(EVENTS, json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "a.1"}, "involvedObject": {"kind": "ConfigMap", "name": "a", "namespace": "{ns}", "apiVersion": "v1"}, "reason": "Tested", "message": "  hello  ", "type": "Normal", "source": {"component": "tester", "host": "h1"}, "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z", "count": 3}))
            .post(EVENTS, json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "b.1"}, "involvedObject": {"kind": "Secret", "name": "s", "namespace": "{ns}"}, "count": 0, "message": ""}))
            .get(&format!("{EVENTS}?fieldSelector=involvedObject.kind%3DConfigMap,involvedObject.name%3Da"))
            .get(&format!("{EVENTS}?fieldSelector=source%3Dtester,type%3DNormal,reason%3DTested"))
            .get(&format!("{EVENTS}?fieldSelector=reason!%3DTested"))
            .get(&format!("{EVENTS}?fieldSelector=involvedObject.bogus%3Da"))
            .post(EVENTS, json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "c.1"}, "involvedObject": {"kind": "ConfigMap", "name": "a", "namespace": "other"}}))
            .post(EVENTS, json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "d.1"}, "involvedObject": {"kind": "ConfigMap", "name": "a"}}))
            .merge_patch(&at(EVENTS, "a.1"), json!({"count": 4, "lastTimestamp": "2026-01-01T00:02:00Z"})),
        Script::new("events-with-event-time", "core/v1 Events with eventTime (client-go's new recorder's shape): created with reportingComponent, reportingInstance, action and reason; each missing one is 422 Required, reportingComponent must be a qualified name, reason, action and reportingInstance at most 128 bytes and message 1,024; an involved object without a namespace is refused outside default and kube-system; series is not validated on core/v1; an Event's own rules answer before (and without) the metadata's, its name need not be a DNS subdomain; Go's zero time sent as eventTime still counts as set (validated as the new shape) and is written back as null")
            .post(EVENTS, json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "a.1"}, "involvedObject": {"kind": "ConfigMap", "name": "a", "namespace": "{ns}", "apiVersion": "v1"}, "eventTime": "2026-01-01T00:00:00.000000Z", "reportingComponent": "example.com/tester", "reportingInstance": "tester-1", "action": "Testing", "reason": "Tested", "message": "hello", "type": "Normal"}))
            .post(EVENTS, json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "b.1"}, "involvedObject": {"kind": "ConfigMap", "name": "a", "namespace": "{ns}"}, "eventTime": "2026-01-01T00:00:00.000000Z"}))
            .post(EVENTS, json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "c.1"}, "involvedObject": {"kind": "ConfigMap", "name": "a", "namespace": "{ns}"}, "eventTime": "2026-01-01T00:00:00.000000Z", "reportingComponent": "Bad Name!", "reportingInstance": "i".repeat(129), "action": "a".repeat(129), "reason": "r".repeat(129), "message": "m".repeat(1025)}))
            .post(EVENTS, json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "d.1"}, "involvedObject": {"kind": "Node", "name": "n1"}, "eventTime": "2026-01-01T00:00:00.000000Z", "reportingComponent": "example.com/tester", "reportingInstance": "tester-1", "action": "Testing", "reason": "Tested"}))
            .merge_patch(&at(EVENTS, "a.1"), json!({"series": {"count": 1}}))
            .post(EVENTS, json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "Upper_Case.1"}, "involvedObject": {"kind": "ConfigMap", "name": "a", "namespace": "{ns}"}, "reason": "Tested"}))
            .post(EVENTS, json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e.1", "labels": {"bad key": "v"}}, "involvedObject": {"kind": "ConfigMap", "name": "a", "namespace": "{ns}"}, "eventTime": "2026-01-01T00:00:00.000000Z"}))
            .post(EVENTS, json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "f.1", "labels": {"bad key": "v"}}, "involvedObject": {"kind": "ConfigMap", "name": "a", "namespace": "{ns}"}, "reason": "Tested"}))
            .post(EVENTS, json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "g.1"}, "involvedObject": {"kind": "ConfigMap", "name": "a", "namespace": "{ns}"}, "eventTime": "0001-01-01T00:00:00.000000Z", "firstTimestamp": "0001-01-01T00:00:00Z", "reportingComponent": "example.com/tester", "reportingInstance": "tester-1", "action": "Testing", "reason": "Tested"}))
            .post(EVENTS, json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "h.1"}, "involvedObject": {"kind": "ConfigMap", "name": "a", "namespace": "{ns}"}, "eventTime": "0001-01-01T00:00:00.000000Z", "reason": "Tested"})),
        Script::new("events-k8s-io-v1", "events.k8s.io/v1 serves core/v1's stored Events in another version: regarding for involvedObject, note for message, reportingController for reportingComponent, deprecated* for the old recorder's fields; a create there is strict (eventTime, a type of Normal or Warning, the deprecated fields unset, a DNS-subdomain name, a series of at least 2 with its time; the causes name the stored fields); an update there finds most fields immutable (reason reported twice, as upstream does); selectable by regarding.*, reason, type and reportingController only; a body of another version is 400; NotFound names the group, a validation error the internal kind")
            .post(EVENTS_V1, json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "a.1"}, "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "example.com/tester", "reportingInstance": "i1", "action": "Testing", "reason": "Tested", "regarding": {"kind": "ConfigMap", "name": "a", "namespace": "{ns}"}, "note": "hello", "type": "Normal", "series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:01.000000Z"}}))
            .get(&at(EVENTS, "a.1"))
            .post(EVENTS, json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "b.1"}, "involvedObject": {"kind": "ConfigMap", "name": "a", "namespace": "{ns}"}, "reason": "Old", "message": "m", "count": 3, "source": {"component": "c"}, "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z"}))
            .get(EVENTS_V1)
            .get(&at(EVENTS_V1, "b.1"))
            .post(EVENTS_V1, json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "Bad_c"}, "deprecatedCount": 2, "deprecatedSource": {"component": "x"}, "deprecatedFirstTimestamp": "2026-01-01T00:00:00Z", "deprecatedLastTimestamp": "2026-01-01T00:00:00Z", "series": {"count": 1}, "type": "Odd", "note": "x"}))
            .post(EVENTS_V1, json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "c.1"}, "reportingController": "Bad Name!", "reportingInstance": "i1", "action": "Testing", "reason": "Tested", "regarding": {"kind": "ConfigMap", "name": "a", "namespace": "{ns}"}, "type": "Normal"}))
            .post(EVENTS_V1, json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "d.1"}}))
            .get(&format!("{EVENTS_V1}?fieldSelector=reason%3DTested,type%3DNormal,reportingController%3Dexample.com%2Ftester"))
            .get(&format!("{EVENTS_V1}?fieldSelector=regarding.kind%3DConfigMap,regarding.name%3Da"))
            .get(&format!("{EVENTS_V1}?fieldSelector=involvedObject.name%3Da"))
            .get(&format!("{EVENTS_V1}?fieldSelector=note%3Dhello"))
            .put(&at(EVENTS_V1, "a.1"), json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "a.1", "namespace": "{ns}"}, "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "example.com/other", "reportingInstance": "i1", "action": "Testing", "reason": "Tested2", "regarding": {"kind": "ConfigMap", "name": "b", "namespace": "{ns}"}, "note": "changed", "type": "Warning", "series": {"count": 1}}))
            .merge_patch(&at(EVENTS_V1, "a.1"), json!({"series": {"count": 3, "lastObservedTime": "2026-01-01T00:00:09.000000Z"}, "metadata": {"labels": {"seen": "twice"}}}))
            .merge_patch(&at(EVENTS_V1, "a.1"), json!({"note": "other"}))
            .merge_patch(&at(EVENTS, "a.1"), json!({"message": "changed through core/v1"}))
            .get(&at(EVENTS_V1, "a.1"))
            .get(&at(EVENTS_V1, "missing"))
            .watch(&format!("{EVENTS_V1}?fieldSelector=regarding.name%3Da"))
            .delete(&at(EVENTS_V1, "b.1"))
            .get(&at(EVENTS, "b.1")),
        Script::new("analysisrun-status-with-the-object", "an AnalysisRun has no subresources: its status is written with the object, and /status is 404")
            .post(ANALYSIS_RUNS, json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AnalysisRun", "metadata": {"name": "canary-1"}, "spec": {"metrics": [{"name": "success-rate"}]}}))
            .put(&at(ANALYSIS_RUNS, "canary-1"), json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AnalysisRun", "metadata": {"name": "canary-1", "resourceVersion": "{rv:0}"}, "spec": {"metrics": [{"name": "success-rate"}]}, "status": {"phase": "Running"}}))
            .merge_patch(&at(ANALYSIS_RUNS, "canary-1"), json!({"status": {"phase": "Failed", "message": "metric success-rate assessed Failed"}}))
            .merge_patch(&format!("{}/status", at(ANALYSIS_RUNS, "canary-1")), json!({"status": {"phase": "Successful"}}))
            .get(&at(ANALYSIS_RUNS, "canary-1")),
        Script::new("status-subresource-missing-404", "the /status subresource of a kind without one is 404")
            .post(APPS, app("a", json!({})))
            .merge_patch(&format!("{}/status", at(APPS, "a")), json!({"status": {"x": 1}})),
        // --- authorization (a user with no RBAC grants, impersonated by the admin)
        Script::new("forbidden-list-and-get-403", "a user without RBAC grants gets 403 Forbidden naming user, verb, resource and namespace")
            .post(CM, cm("a", json!({}), json!({"k": "v"})))
            .get(CM)
            .as_user(NOBODY)
            .get(&at(CM, "a"))
            .as_user(NOBODY)
            .get(&at(CM, "missing"))
            .as_user(NOBODY),
        Script::new("forbidden-watch-403", "a forbidden watch is refused with 403 before any event is streamed")
            .post(CM, cm("a", json!({}), json!({})))
            .get(&format!("{CM}?watch=true&timeoutSeconds=2"))
            .as_user(NOBODY),
        Script::new("forbidden-writes-403", "forbidden writes are 403 before their body is read, for built-ins and custom resources alike")
            .post(APPS, app("a", json!({"project": "default"})))
            .post(APPS, app("b", json!({"project": "default"})))
            .as_user(NOBODY)
            .merge_patch(&at(APPS, "a"), json!({"spec": {"project": "other"}}))
            .as_user(NOBODY)
            .merge_patch(&format!("{}/status", at(ROLLOUTS, "r")), json!({"status": {"x": 1}}))
            .as_user(NOBODY)
            .delete(&at(APPS, "a"))
            .as_user(NOBODY)
            .raw("POST", CM, "application/json", "{not json")
            .as_user(NOBODY)
            .get(&at(APPS, "a")),
    ]
}

/// The user the authorization scripts act as: it has no RBAC grants on either server.
const NOBODY: &str = "orrery-nobody";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::Step;

    #[test]
    fn script_names_are_unique_and_there_are_at_least_25() {
        let scripts = scripts();
        let mut names: Vec<&str> = scripts.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), scripts.len(), "duplicate script names");
        assert!(
            scripts.len() >= 25,
            "the fidelity suite needs at least 25 scripts, has {}",
            scripts.len()
        );
    }

    #[test]
    fn every_watch_step_comes_after_a_write_it_can_observe() {
        for script in scripts() {
            if let Some(position) = script
                .steps
                .iter()
                .position(|s| matches!(s, Step::Watch { .. }))
            {
                assert!(
                    position > 0,
                    "{}: a watch needs earlier writes to replay",
                    script.name
                );
            }
        }
    }
}
