//! The Kubernetes Events the application controller records about an app, as Argo CD's
//! audit logger does (`util/argo/audit_logger.go`, `controller/appcontroller.go`): an
//! automated sync initiated, a sync operation's end, and a change of the app's sync or health
//! status — each a core/v1 Event in the app's namespace, created before the status write
//! that carries the change. Reasons, messages, names, source, annotations and
//! `involvedObject` as a real Argo CD v3.2.0 records them (measured against kube-apiserver
//! v1.36.3; docs/components/argocd.md, "Events"; the Argo CD conformance suite compares
//! them). argocd-server's own events (a sync asked through the API) are not modelled.

use kube::api::{ApiResource, DynamicObject};
use serde_json::{json, Value};

use orrery_system::core::json::Pointer as _;

/// `source.component` of the controller's events.
pub const COMPONENT: &str = "argocd-application-controller";

/// One event to record: (reason, type, message).
pub type Recorded = (&'static str, &'static str, String);

/// core/v1 Events.
pub fn event_resource() -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Event".into(),
        plural: "events".into(),
    }
}

/// Whether an operation phase is final.
fn completed(phase: &str) -> bool {
    matches!(phase, "Succeeded" | "Failed" | "Error")
}

/// What writing `patch` (a merge patch of the app's `status`, and `operation`) to `app`
/// records, in Argo CD's order: an automated sync initiated (by this write's `operation`,
/// or run and finished within it), a sync operation finished, then the sync status's and
/// the health status's change (`Updated sync status:  -> OutOfSync` from none: two spaces).
pub fn recorded(app: &DynamicObject, patch: &Value) -> Vec<Recorded> {
    let old = |pointer: &str| {
        app.data
            .at(&format!("/status{pointer}"))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let new = |pointer: &str| {
        patch
            .at(&format!("/status{pointer}"))
            .and_then(Value::as_str)
    };
    let mut events = Vec::new();
    let operation_state = patch.at("/status/operationState").filter(|s| s.is_object());
    let started_at = new("/operationState/startedAt");
    let same_operation = started_at == Some(old("/operationState/startedAt"));
    // Started by this write (the operation it requests), or begun and ended within it (a
    // sync folded into one write, a first attempt that failed validation).
    let requested = patch
        .get("operation")
        .filter(|o| o.is_object())
        .filter(|o| o.at("/initiatedBy/automated") == Some(&json!(true)))
        .and_then(|o| o.at("/sync/revision"))
        .and_then(Value::as_str);
    let folded = operation_state
        .filter(|_| patch.get("operation").is_none() && started_at.is_some() && !same_operation)
        .filter(|s| s.at("/operation/initiatedBy/automated") == Some(&json!(true)))
        .and_then(|s| s.at("/operation/sync/revision"))
        .and_then(Value::as_str);
    if let Some(revision) = requested.or(folded) {
        events.push((
            "OperationStarted",
            "Normal",
            format!("Initiated automated sync to [{revision}]"),
        ));
    }
    if let Some(phase) = new("/operationState/phase").filter(|p| completed(p)) {
        if !(same_operation && old("/operationState/phase") == phase) {
            let revision = new("/operationState/syncResult/revision").unwrap_or("");
            let target = if revision.is_empty() {
                String::new()
            } else {
                format!(" to {revision}")
            };
            events.push(if phase == "Succeeded" {
                (
                    "OperationCompleted",
                    "Normal",
                    format!("Sync operation{target} succeeded"),
                )
            } else {
                let message = new("/operationState/message").unwrap_or("");
                (
                    "OperationCompleted",
                    "Warning",
                    format!("Sync operation{target} failed: {message}"),
                )
            });
        }
    }
    for (pointer, what) in [("/sync/status", "sync"), ("/health/status", "health")] {
        if let Some(status) = new(pointer).filter(|s| *s != old(pointer)) {
            events.push((
                "ResourceUpdated",
                "Normal",
                format!("Updated {what} status: {} -> {status}", old(pointer)),
            ));
        }
    }
    events
}

/// The Event object for `what` about `app`, named `<app>.<hex nanoseconds>` as Argo CD
/// names it (`nanos`: the Unix time in nanoseconds, made distinct per event by the caller).
pub fn event(app: &DynamicObject, what: &Recorded, nanos: u64, timestamp: &str) -> Value {
    let name = app.metadata.name.clone().unwrap_or_default();
    let namespace = app.metadata.namespace.clone().unwrap_or_default();
    let destination = |field: &str| {
        app.data
            .at(&format!("/spec/destination/{field}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (reason, kind, message) = what;
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": format!("{name}.{nanos:x}"),
            "namespace": namespace,
            "annotations": {"dest-namespace": destination("namespace"), "dest-server": destination("server")},
        },
        "involvedObject": {
            "kind": "Application",
            "namespace": namespace,
            "name": name,
            "uid": app.metadata.uid.clone().unwrap_or_default(),
            "apiVersion": "argoproj.io/v1alpha1",
            "resourceVersion": app.metadata.resource_version.clone().unwrap_or_default(),
        },
        "reason": reason,
        "message": message,
        "source": {"component": COMPONENT},
        "firstTimestamp": timestamp,
        "lastTimestamp": timestamp,
        "count": 1,
        "type": kind,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(status: Value) -> DynamicObject {
        let mut app =
            DynamicObject::new("web", &super::super::application_resource()).within("argocd");
        app.data = json!({"spec": {"destination": {"server": "https://kubernetes.default.svc", "namespace": "web"}}, "status": status});
        app
    }

    #[test]
    fn a_first_refresh_records_the_sync_it_starts_then_both_statuses_as_argo_cd_3_2_does() {
        let patch = json!({"status": {"sync": {"status": "OutOfSync"}, "health": {"status": "Healthy"}},
                           "operation": {"sync": {"revision": "abc"}, "initiatedBy": {"automated": true}}});
        assert_eq!(
            recorded(&app(json!({})), &patch),
            vec![
                (
                    "OperationStarted",
                    "Normal",
                    "Initiated automated sync to [abc]".to_string()
                ),
                (
                    "ResourceUpdated",
                    "Normal",
                    "Updated sync status:  -> OutOfSync".to_string()
                ),
                (
                    "ResourceUpdated",
                    "Normal",
                    "Updated health status:  -> Healthy".to_string()
                ),
            ]
        );
    }

    #[test]
    fn an_operations_end_is_recorded_once_and_a_failure_as_a_warning() {
        let before = app(json!({"sync": {"status": "OutOfSync"}, "health": {"status": "Healthy"}}));
        let done = json!({"operation": null, "status": {"sync": {"status": "Synced"},
            "operationState": {"phase": "Succeeded", "startedAt": "t0", "syncResult": {"revision": "abc"},
                               "operation": {"sync": {"revision": "abc"}, "initiatedBy": {"automated": true}}}}});
        assert_eq!(
            recorded(&before, &done),
            vec![
                (
                    "OperationCompleted",
                    "Normal",
                    "Sync operation to abc succeeded".to_string()
                ),
                (
                    "ResourceUpdated",
                    "Normal",
                    "Updated sync status: OutOfSync -> Synced".to_string()
                ),
            ]
        );
        // A retried validation failure: started once (its first attempt), failed once.
        let attempt = |phase: &str| {
            json!({"status": {"operationState": {"phase": phase, "startedAt": "t1", "message": "not valid",
                "syncResult": {"revision": "def"}, "operation": {"sync": {"revision": "def"}, "initiatedBy": {"automated": true}}}}})
        };
        assert_eq!(
            recorded(&before, &attempt("Running")),
            vec![(
                "OperationStarted",
                "Normal",
                "Initiated automated sync to [def]".to_string()
            )]
        );
        let retrying = app(attempt("Running")["status"].clone());
        assert!(recorded(&retrying, &attempt("Running")).is_empty());
        assert_eq!(
            recorded(&retrying, &attempt("Failed")),
            vec![(
                "OperationCompleted",
                "Warning",
                "Sync operation to def failed: not valid".to_string()
            )]
        );
        let failed = app(attempt("Failed")["status"].clone());
        assert!(
            recorded(&failed, &attempt("Failed")).is_empty(),
            "recorded once"
        );
    }

    #[test]
    fn an_event_is_named_and_addressed_as_argo_cd_names_it() {
        let what = (
            "ResourceUpdated",
            "Normal",
            "Updated health status: Healthy -> Degraded".to_string(),
        );
        let event = event(
            &app(json!({})),
            &what,
            0x18ed0f59e1614844,
            "2026-12-01T07:03:20Z",
        );
        assert_eq!(event["metadata"]["name"], "web.18ed0f59e1614844");
        assert_eq!(event["metadata"]["annotations"]["dest-namespace"], "web");
        assert_eq!(event["involvedObject"]["kind"], "Application");
        assert_eq!(event["source"]["component"], COMPONENT);
        assert_eq!(event["count"], 1);
    }
}
