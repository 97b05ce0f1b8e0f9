//! The Kubernetes Events the workflow controller records about a Workflow, as argo-workflows
//! v3.6.19 records them (read from its source; no real controller runs here to compare
//! with): `WorkflowRunning`, `WorkflowSucceeded` and `WorkflowFailed` when the workflow's
//! phase changes (`markWorkflowPhase`, `workflow/controller/operator.go`, recorded while the
//! controller operates, before its write), and `WorkflowNode<Phase>` for each node whose phase
//! changed (`recordNodePhaseChangeEvents`, after the write succeeded), with the node's type,
//! name, id and start time as annotations. Both `workflowEvents` and `nodeEvents` are on
//! unless the controller's ConfigMap turns them off (`config/workflow_events.go`,
//! `config/node_events.go`), so they are on here.
//!
//! Each is a core/v1 Event made as client-go's recorder makes one (`tools/record`,
//! `makeEvent`): named `<workflow>.<hex nanoseconds>`, `count: 1`, source and reporting
//! controller `workflow-controller`. *Not modelled*: client-go's correlator, which patches
//! the count of a repeated event instead of creating one, folds more than ten similar events
//! of one workflow within ten minutes into one `(combined from similar events): …`, and drops
//! bursts beyond 10,000 a namespace (Argo's burst size); `WorkflowTimedOut` (an operation
//! that exceeded its 30 s pass, which the stand-in's passes never do). Node events come in
//! node-id order here, in Go's map order (random) there.

use serde_json::{json, Value};

use orrery_system::core::time::parse_rfc3339;

/// `source.component` and `reportingComponent` of the controller's events.
pub const COMPONENT: &str = "workflow-controller";

/// One event to record: reason, type, message, and a node's annotations.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    /// `WorkflowRunning`, `WorkflowNodeSucceeded`, ….
    pub reason: String,
    /// `Normal` or `Warning`.
    pub kind: &'static str,
    /// As the controller words it.
    pub message: String,
    /// A node event's `workflows.argoproj.io/node-*` annotations.
    pub annotations: Option<Value>,
}

/// What a change of the workflow's phase from `old` to `new` (with the status `message` it
/// is marked with) records; nothing for `Pending` or an unchanged phase.
pub fn workflow_phase(old: &str, new: &str, message: &str) -> Option<Recorded> {
    if old == new {
        return None;
    }
    let (reason, kind, message) = match new {
        "Running" => ("WorkflowRunning", "Normal", "Workflow Running"),
        "Succeeded" => ("WorkflowSucceeded", "Normal", "Workflow completed"),
        "Failed" | "Error" => ("WorkflowFailed", "Warning", message),
        _ => return None,
    };
    Some(Recorded {
        reason: reason.into(),
        kind,
        message: message.into(),
        annotations: None,
    })
}

/// `time.Time{}.UnixNano()` in Go: 0001-01-01T00:00:00Z in nanoseconds, wrapped to int64.
const GO_ZERO_TIME_UNIX_NANO: i128 = -6_795_364_578_871_345_152;

/// Whether a node phase is final (`NodePhase.Completed`).
fn completed(phase: &str) -> bool {
    matches!(phase, "Succeeded" | "Failed" | "Error")
}

/// The event of `node` in `phase` (`recordNodePhaseEvent`).
fn node_event(node: &Value, phase: &str) -> Recorded {
    let text = |field: &str| node[field].as_str().unwrap_or("");
    let mut message = format!("{phase} node {}", text("name"));
    if !text("message").is_empty() {
        message = format!("{message}: {}", text("message"));
    }
    let kind = match phase {
        "Succeeded" | "Running" => "Normal",
        _ => "Warning",
    };
    // A node without a start time has Go's zero time, whose UnixNano wraps around int64.
    let started = parse_rfc3339(text("startedAt"))
        .map_or(GO_ZERO_TIME_UNIX_NANO, |ms| ms as i128 * 1_000_000)
        .to_string();
    Recorded {
        reason: format!("WorkflowNode{phase}"),
        kind,
        message,
        annotations: Some(json!({
            "workflows.argoproj.io/node-id": text("id"),
            "workflows.argoproj.io/node-name": text("name"),
            "workflows.argoproj.io/node-start-time": started,
            "workflows.argoproj.io/node-type": text("type"),
        })),
    }
}

/// What the nodes' phase changes from status `old` to status `new` record: a new node that
/// runs, or one already finished (a synthetic `Running` first); a known node whose phase
/// changed (a synthetic `Running` first when it went from `Pending` to finished).
pub fn node_phases(old: &Value, new: &Value) -> Vec<Recorded> {
    let mut events = Vec::new();
    let Some(nodes) = new["nodes"].as_object() else {
        return events;
    };
    let mut ids: Vec<&String> = nodes.keys().collect();
    ids.sort_unstable();
    for id in ids {
        let node = &nodes[id];
        let phase = node["phase"].as_str().unwrap_or("");
        match old["nodes"].get(id.as_str()) {
            Some(before) => {
                let was = before["phase"].as_str().unwrap_or("");
                if was == phase {
                    continue;
                }
                if was == "Pending" && completed(phase) {
                    events.push(node_event(node, "Running"));
                }
                events.push(node_event(node, phase));
            }
            None if phase == "Running" => events.push(node_event(node, phase)),
            None if completed(phase) => {
                events.push(node_event(node, "Running"));
                events.push(node_event(node, phase));
            }
            None => {}
        }
    }
    events
}

/// The Event object for `what` about the Workflow `namespace/name` (its `uid` and
/// `resource_version` as the controller holds it), made at `nanos` (Unix nanoseconds, made
/// distinct per event by the caller) and `timestamp` (RFC 3339, seconds).
pub fn event(
    (namespace, name): (&str, &str),
    (uid, resource_version): (&str, &str),
    what: &Recorded,
    nanos: u64,
    timestamp: &str,
) -> Value {
    let mut metadata = json!({"name": format!("{name}.{nanos:x}"), "namespace": namespace});
    if let Some(annotations) = &what.annotations {
        metadata["annotations"] = annotations.clone();
    }
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": metadata,
        "involvedObject": {
            "kind": "Workflow",
            "namespace": namespace,
            "name": name,
            "uid": uid,
            "apiVersion": "argoproj.io/v1alpha1",
            "resourceVersion": resource_version,
        },
        "reason": what.reason,
        "message": what.message,
        "source": {"component": COMPONENT},
        "firstTimestamp": timestamp,
        "lastTimestamp": timestamp,
        "count": 1,
        "type": what.kind,
        "eventTime": null,
        "reportingComponent": COMPONENT,
        "reportingInstance": "",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, name: &str, phase: &str, message: &str) -> Value {
        json!({"id": id, "name": name, "type": "Pod", "phase": phase, "message": message,
               "startedAt": "2026-01-01T00:00:05Z"})
    }

    #[test]
    fn a_workflow_records_running_completed_and_failed_with_its_message_as_v3_6_does() {
        let running = workflow_phase("", "Running", "").expect("an event");
        assert_eq!(
            (
                running.reason.as_str(),
                running.kind,
                running.message.as_str()
            ),
            ("WorkflowRunning", "Normal", "Workflow Running")
        );
        let done = workflow_phase("Running", "Succeeded", "").expect("an event");
        assert_eq!(done.message, "Workflow completed");
        let failed = workflow_phase("Running", "Error", "child 'wf-1' failed").expect("an event");
        assert_eq!(
            (failed.reason.as_str(), failed.kind, failed.message.as_str()),
            ("WorkflowFailed", "Warning", "child 'wf-1' failed")
        );
        assert_eq!(workflow_phase("Running", "Running", ""), None);
        assert_eq!(workflow_phase("", "Pending", ""), None);
    }

    #[test]
    fn nodes_record_each_phase_change_with_a_synthetic_running_before_a_skipped_one() {
        let old = json!({"nodes": {
            "wf-1": node("wf-1", "wf[0].a", "Pending", ""),
            "wf-2": node("wf-2", "wf[0].b", "Running", ""),
            "wf-3": node("wf-3", "wf[0].c", "Running", ""),
        }});
        let new = json!({"nodes": {
            "wf": node("wf", "wf", "Running", ""),
            "wf-1": node("wf-1", "wf[0].a", "Succeeded", ""),
            "wf-2": node("wf-2", "wf[0].b", "Failed", "Error (exit code 1)"),
            "wf-3": node("wf-3", "wf[0].c", "Running", ""),
            "wf-4": node("wf-4", "wf[1].d", "Error", "pod deleted"),
            "wf-5": node("wf-5", "wf[1].e", "Pending", ""),
        }});
        let said: Vec<(String, &str, String)> = node_phases(&old, &new)
            .into_iter()
            .map(|r| (r.reason, r.kind, r.message))
            .collect();
        let want = [
            ("WorkflowNodeRunning", "Normal", "Running node wf"),
            ("WorkflowNodeRunning", "Normal", "Running node wf[0].a"),
            ("WorkflowNodeSucceeded", "Normal", "Succeeded node wf[0].a"),
            (
                "WorkflowNodeFailed",
                "Warning",
                "Failed node wf[0].b: Error (exit code 1)",
            ),
            (
                "WorkflowNodeRunning",
                "Normal",
                "Running node wf[1].d: pod deleted",
            ),
            (
                "WorkflowNodeError",
                "Warning",
                "Error node wf[1].d: pod deleted",
            ),
        ];
        let want: Vec<(String, &str, String)> = want
            .iter()
            .map(|(r, k, m)| (r.to_string(), *k, m.to_string()))
            .collect();
        assert_eq!(said, want);
    }

    #[test]
    fn an_event_names_the_workflow_and_carries_the_nodes_annotations() {
        let what = node_event(&node("wf-1", "wf[0].a", "Running", ""), "Running");
        let event = event(
            ("ci", "wf"),
            ("u-1", "42"),
            &what,
            0x1f,
            "2026-01-01T00:00:06Z",
        );
        assert_eq!(event["metadata"]["name"], "wf.1f");
        assert_eq!(event["metadata"]["namespace"], "ci");
        let annotations = &event["metadata"]["annotations"];
        assert_eq!(annotations["workflows.argoproj.io/node-id"], "wf-1");
        assert_eq!(
            annotations["workflows.argoproj.io/node-start-time"],
            "1767225605000000000"
        );
        assert_eq!(event["involvedObject"]["resourceVersion"], "42");
        assert_eq!(event["involvedObject"]["kind"], "Workflow");
        assert_eq!(event["source"]["component"], "workflow-controller");
        assert_eq!(event["reportingComponent"], "workflow-controller");
    }
}
