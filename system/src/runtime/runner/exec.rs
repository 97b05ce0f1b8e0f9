//! One workflow task against the Kubernetes API (venona `pkg/kubernetes/kubernetes.go`
//! L134-210): a create decodes the spec and creates it as it is, in the namespace it names;
//! a delete deletes by name and namespace. Only Pods and PersistentVolumeClaims.

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use serde_json::Value;

use crate::core::runner::{Task, TaskType};

/// How a task ended against the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Result {
    /// It took effect.
    Done,
    /// The object to create was already there (`AlreadyExists`).
    AlreadyExists,
    /// The object to delete was not there (`NotFound`, `Gone`).
    NotFound,
    /// It failed: `retriable` as venona's `NewK8sError` classifies it (§1.6).
    Failed {
        /// Whether asking again can help.
        retriable: bool,
        /// What the API server or the client said.
        reason: String,
    },
}

pub(crate) fn resource(kind: &str) -> Option<ApiResource> {
    let gvk = |k: &str| GroupVersionKind::gvk("", "v1", k);
    match kind {
        "Pod" => Some(ApiResource::from_gvk_with_plural(&gvk("Pod"), "pods")),
        "PersistentVolumeClaim" => Some(ApiResource::from_gvk_with_plural(
            &gvk("PersistentVolumeClaim"),
            "persistentvolumeclaims",
        )),
        _ => None,
    }
}

/// venona's `NewK8sError` (L93-108): these API errors are not worth another try.
fn non_retriable(code: u16, reason: &str, kind: TaskType) -> bool {
    matches!(code, 400 | 401 | 403 | 405 | 406 | 413 | 415)
        || (kind.creates() && reason == "AlreadyExists")
        || (!kind.creates() && (code == 404 || code == 410 || reason == "Expired"))
}

/// Executes `task` with `client`; `namespace` is used when a delete's spec names none.
pub async fn execute(client: &kube::Client, task: &Task, namespace: &str) -> Result {
    let failed = |retriable: bool, reason: String| Result::Failed { retriable, reason };
    match task.kind {
        TaskType::CreatePod | TaskType::CreatePvc => {
            let object: DynamicObject = match serde_json::from_value(task.spec.clone()) {
                Ok(object) => object,
                // Decoding errors are retriable in venona (they are not API errors).
                Err(e) => return failed(true, format!("cannot decode the spec: {e}")),
            };
            let kind = task
                .spec
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let Some(resource) = resource(kind) else {
                return failed(true, format!("unsupported kind {kind:?}"));
            };
            let ns = object
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| namespace.into());
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
            match api.create(&PostParams::default(), &object).await {
                Ok(_) => Result::Done,
                Err(kube::Error::Api(e)) if e.reason == "AlreadyExists" => Result::AlreadyExists,
                Err(kube::Error::Api(e)) => failed(
                    !non_retriable(e.code, &e.reason, task.kind),
                    format!("{} {}: {}", e.code, e.reason, e.message),
                ),
                Err(e) => failed(true, e.to_string()),
            }
        }
        TaskType::DeletePod | TaskType::DeletePvc => {
            let kind = if task.kind == TaskType::DeletePod {
                "Pod"
            } else {
                "PersistentVolumeClaim"
            };
            let ns = task
                .spec
                .get("namespace")
                .and_then(Value::as_str)
                .unwrap_or(namespace);
            delete(client, kind, task.object_name(), ns).await
        }
        TaskType::AgentTask => failed(false, "agent tasks are not workflow tasks".into()),
    }
}

/// Deletes `kind` (`Pod` or `PersistentVolumeClaim`) `name` in `namespace`: what a delete
/// task does, and what hardened's sweeper does to an ended build's leftovers.
pub async fn delete(client: &kube::Client, kind: &str, name: &str, namespace: &str) -> Result {
    let task = if kind == "Pod" {
        TaskType::DeletePod
    } else {
        TaskType::DeletePvc
    };
    let Some(resource) = resource(kind) else {
        return Result::Failed {
            retriable: false,
            reason: format!("unsupported kind {kind:?}"),
        };
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Result::Done,
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 410 => Result::NotFound,
        Err(kube::Error::Api(e)) => Result::Failed {
            retriable: !non_retriable(e.code, &e.reason, task),
            reason: format!("{} {}: {}", e.code, e.reason, e.message),
        },
        Err(e) => Result::Failed {
            retriable: true,
            reason: e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn venonas_classification_of_api_errors() {
        assert!(non_retriable(409, "AlreadyExists", TaskType::CreatePod));
        assert!(!non_retriable(409, "Conflict", TaskType::CreatePod));
        assert!(non_retriable(404, "NotFound", TaskType::DeletePvc));
        assert!(!non_retriable(404, "NotFound", TaskType::CreatePod));
        assert!(non_retriable(403, "Forbidden", TaskType::CreatePod));
        assert!(!non_retriable(500, "InternalError", TaskType::DeletePod));
        assert!(!non_retriable(429, "TooManyRequests", TaskType::CreatePvc));
    }
}
