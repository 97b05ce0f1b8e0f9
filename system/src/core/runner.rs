//! The Codefresh Runner's wire format, shared by the platform's agent task queue
//! (`platform::runner`) and the agent (`runtime::runner`): the tasks `GET
//! /api/agent/{id}/tasks` answers and the status `POST …/tasks/{taskId}/statuses` reports
//! (venona ≥ 2.0, `pkg/task/task.go` L26-87; `runner-research.md` §1.3).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a task asks the agent to do (`task.go` L26-32).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TaskType {
    /// Create the build's dind volume claim.
    CreatePvc,
    /// Create one of the build's pods (dind or engine).
    CreatePod,
    /// Delete one of the build's pods.
    DeletePod,
    /// Delete the build's volume claim.
    DeletePvc,
    /// An agent task (`proxy`): not a workflow's.
    AgentTask,
}

impl TaskType {
    /// The order the agent runs one workflow's tasks in (`SortByType`, `task.go` L120-130):
    /// creations before deletions, the volume claim before the pods that mount it.
    pub fn rank(self) -> u8 {
        match self {
            TaskType::CreatePvc => 0,
            TaskType::CreatePod => 1,
            TaskType::DeletePod => 2,
            TaskType::DeletePvc => 3,
            TaskType::AgentTask => 4,
        }
    }

    /// True for the types that create an object (their duplicate meets `AlreadyExists`).
    pub fn creates(self) -> bool {
        matches!(self, TaskType::CreatePvc | TaskType::CreatePod)
    }
}

/// A task's metadata (`task.go` L61-67).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    /// When the platform made it (RFC 3339); batches run oldest first.
    pub created_at: String,
    /// The runtime environment's name: the agent looks its runtime up by it.
    pub re_name: String,
    /// The build the task belongs to (its tasks are one batch per poll).
    pub workflow_id: String,
    /// The platform's revision of the task's status; the ack sends this plus one.
    pub current_status_revision: u64,
    /// Whether the platform waits for the agent's status (`waitForStatusReport`).
    pub should_report_status: bool,
}

/// One task (`task.go` L50-58). `spec` is the object to create (a Pod or a
/// PersistentVolumeClaim, as JSON) or `{name, namespace}` of the object to delete.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// The task's id.
    #[serde(rename = "_id")]
    pub id: String,
    /// What to do.
    #[serde(rename = "type")]
    pub kind: TaskType,
    /// Whose it is.
    pub metadata: Metadata,
    /// The object, or which object.
    pub spec: Value,
}

impl Task {
    /// The name of the object the task creates or deletes.
    pub fn object_name(&self) -> &str {
        self.spec
            .pointer("/metadata/name")
            .or_else(|| self.spec.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

/// The result a status reports (`task.go` L34-37).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// The task took effect.
    Success,
    /// It did not (`isRetriable` says whether asking again can help).
    Error,
}

/// The body of `POST /api/agent/{id}/tasks/{taskId}/statuses` (`task.go` L81-87).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// What happened.
    pub status: Outcome,
    /// When (RFC 3339).
    pub occurred_at: String,
    /// The task's `currentStatusRevision` plus one (queue.go L190-193).
    pub status_revision: u64,
    /// Whether the platform may hand the task out again.
    pub is_retriable: bool,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The names of a build's objects (venona's metrics regex and venona#77: `engine-<id>`,
/// `dind-<id>`, `pvc-dind-<id>`).
pub fn engine_pod(build: &str) -> String {
    format!("engine-{build}")
}

/// The build's Docker daemon pod.
pub fn dind_pod(build: &str) -> String {
    format!("dind-{build}")
}

/// The build's volume claim.
pub fn dind_pvc(build: &str) -> String {
    format!("pvc-dind-{build}")
}

/// The account the builds run for (one per platform here): the reuse selector's
/// `io.codefresh.accountName`.
pub const ACCOUNT: &str = "orrery";

/// The runtime's dind storage class, whose claims the dind volume provisioner
/// (`codefresh.io/dind-volume-provisioner-runner-<ns>`, `runner-research.md` §2.1) binds;
/// the class's name, `dind-local-volumes-runner-<ns>`, is **inferred** (the research names
/// only the provisioner).
pub fn dind_storage_class(namespace: &str) -> String {
    format!("dind-local-volumes-runner-{namespace}")
}

/// `value` as a label value: at most 63 of `[A-Za-z0-9._-]`, starting and ending
/// alphanumeric; any other character becomes `.` (`demo/build` → `demo.build`). The real
/// platform labels with the pipeline's id, a hex string; here pipelines have names.
pub fn label_value(value: &str) -> String {
    let mapped: String = value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '.'
            }
        })
        .take(63)
        .collect();
    mapped
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

/// The label every object of a build carries (the hardened agent's sweeper selects by it;
/// the name is orrery's, **inferred**).
pub const BUILD_LABEL: &str = "codefresh.io/build";

/// The label a build's engine pod carries with the agent whose runtime runs it: the engine
/// reports with that agent's token, and the platform takes an engine's reports and log
/// lines only from the token of the build's own agent (the name is orrery's, **inferred**).
pub const AGENT_LABEL: &str = "codefresh.io/agent";

/// The one agent task type the agent executes (`agentTaskExecutors`, agent.go L98-100): an
/// HTTP request the platform asks the agent to send inside the customer's network (to the
/// app-proxy or a Git provider behind the firewall, `runner-research.md` §1.3, §2).
pub const PROXY: &str = "proxy";

/// What a `proxy` agent task asks for (`proxyRequest`, agent.go L389-438): the URL and
/// method from `params.runtimeContext.context.variables.{proxyUrl,method}` (method POST when
/// left out), the token from `params.runtimeContext.context.eventReporting.token`, and the
/// whole `params` as the JSON body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyRequest {
    /// Where to send it.
    pub url: String,
    /// How.
    pub method: String,
    /// Sent as `x-access-token`.
    pub token: String,
    /// `params`, serialised.
    pub body: Vec<u8>,
}

/// Why a task of type `AgentTask` cannot be run (venona's error texts, agent.go L84-94).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    /// The spec is not `{type, params}`.
    #[error("Failed to parse agent task spec")]
    Spec,
    /// A type other than `proxy`.
    #[error("Agent task has unknown type {0:?}")]
    UnknownType(String),
    /// No `proxyUrl`.
    #[error(r#"url not provided for task of type "proxy""#)]
    NoUrl,
    /// No `eventReporting.token`.
    #[error(r#"token not provided for task of type "proxy""#)]
    NoToken,
}

impl ProxyError {
    /// venona returns these two before it reports a status (agent.go L367-373): the task is
    /// never acknowledged.
    pub fn unreported(&self) -> bool {
        matches!(self, ProxyError::Spec | ProxyError::UnknownType(_))
    }
}

/// The spec of a `proxy` agent task sending `params` (an object; anything else is sent as
/// `{"payload": params}`) to `url` with `method` and `token`.
pub fn proxy_spec(url: &str, method: &str, token: &str, params: Value) -> Value {
    let mut params = match params {
        Value::Object(map) => map,
        other => [("payload".to_string(), other)].into_iter().collect(),
    };
    params.insert(
        "runtimeContext".into(),
        serde_json::json!({"context": {
            "variables": {"proxyUrl": url, "method": method},
            "eventReporting": {"token": token},
        }}),
    );
    serde_json::json!({"type": PROXY, "params": params})
}

/// The request a `proxy` agent task's spec asks for, or why there is none.
pub fn proxy_request(spec: &Value) -> Result<ProxyRequest, ProxyError> {
    let kind = spec
        .get("type")
        .and_then(Value::as_str)
        .ok_or(ProxyError::Spec)?;
    let params = spec.get("params").filter(|p| p.is_object() || p.is_null());
    let params = params.ok_or(ProxyError::Spec)?;
    if kind != PROXY {
        return Err(ProxyError::UnknownType(kind.into()));
    }
    let text = |pointer: &str| {
        params
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let token = text("/runtimeContext/context/eventReporting/token");
    if token.is_empty() {
        return Err(ProxyError::NoToken);
    }
    let url = text("/runtimeContext/context/variables/proxyUrl");
    if url.is_empty() {
        return Err(ProxyError::NoUrl);
    }
    let method = match text("/runtimeContext/context/variables/method") {
        m if m.is_empty() => "POST".to_string(),
        m => m,
    };
    Ok(ProxyRequest {
        url,
        method,
        token,
        body: serde_json::to_vec(params).expect("JSON serialises"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_what_the_api_server_accepts() {
        assert_eq!(label_value("demo/build"), "demo.build");
        assert_eq!(label_value("/a b/"), "a.b");
        assert_eq!(label_value(&"x".repeat(80)).len(), 63);
    }

    #[test]
    fn a_task_reads_and_writes_venonas_field_names() {
        let text = r#"{"_id":"t1","type":"CreatePod","metadata":{"createdAt":"2026-01-01T00:00:00Z","reName":"re","workflowId":"b1","currentStatusRevision":2,"shouldReportStatus":true},"spec":{"metadata":{"name":"engine-b1"}}}"#;
        let task: Task = serde_json::from_str(text).unwrap();
        assert_eq!(task.kind, TaskType::CreatePod);
        assert_eq!(task.metadata.current_status_revision, 2);
        assert_eq!(task.object_name(), "engine-b1");
        assert_eq!(serde_json::to_string(&task).unwrap(), text);
        let status = TaskStatus {
            status: Outcome::Error,
            occurred_at: "t".into(),
            status_revision: 3,
            is_retriable: false,
            reason: Some("exists".into()),
        };
        assert_eq!(
            serde_json::to_value(&status).unwrap(),
            serde_json::json!({"status":"Error","occurredAt":"t","statusRevision":3,"isRetriable":false,"reason":"exists"})
        );
    }

    #[test]
    fn creations_run_before_deletions_and_the_claim_before_its_pods() {
        let mut kinds = [
            TaskType::DeletePvc,
            TaskType::CreatePod,
            TaskType::DeletePod,
            TaskType::CreatePvc,
        ];
        kinds.sort_by_key(|k| k.rank());
        assert_eq!(
            kinds,
            [
                TaskType::CreatePvc,
                TaskType::CreatePod,
                TaskType::DeletePod,
                TaskType::DeletePvc
            ]
        );
    }

    #[test]
    fn a_proxy_spec_round_trips_and_a_bad_one_is_named() {
        let spec = proxy_spec(
            "http://git/api/commits",
            "POST",
            "tok",
            serde_json::json!({"repo": "r"}),
        );
        let request = proxy_request(&spec).unwrap();
        assert_eq!(request.url, "http://git/api/commits");
        assert_eq!(request.method, "POST");
        assert_eq!(request.token, "tok");
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(body["repo"], "r");
        assert_eq!(
            body["runtimeContext"]["context"]["eventReporting"]["token"],
            "tok"
        );
        let mut no_method = spec.clone();
        no_method["params"]["runtimeContext"]["context"]["variables"]
            .as_object_mut()
            .unwrap()
            .remove("method");
        assert_eq!(proxy_request(&no_method).unwrap().method, "POST");
        let mut no_url = spec.clone();
        no_url["params"]["runtimeContext"]["context"]["variables"]["proxyUrl"] = "".into();
        assert_eq!(proxy_request(&no_url), Err(ProxyError::NoUrl));
        let no_token = proxy_spec("http://x", "GET", "", Value::Null);
        assert_eq!(proxy_request(&no_token), Err(ProxyError::NoToken));
        let other = serde_json::json!({"type": "exec", "params": {}});
        let error = proxy_request(&other).unwrap_err();
        assert_eq!(error, ProxyError::UnknownType("exec".into()));
        assert!(error.unreported());
        assert_eq!(
            proxy_request(&serde_json::json!("nonsense")),
            Err(ProxyError::Spec)
        );
        assert!(!ProxyError::NoUrl.unreported());
    }
}
