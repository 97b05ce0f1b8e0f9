//! API errors rendered as Kubernetes `Status` objects.

use serde_json::{json, Value};

use super::resources::ResourceKind;

/// A failed API call: HTTP code, `Status.reason` and message, as kube-apiserver words them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `Status.reason`, e.g. `Conflict`.
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
}

fn resource_name(kind: &ResourceKind) -> String {
    if kind.group.is_empty() {
        kind.plural.clone()
    } else {
        format!("{}.{}", kind.plural, kind.group)
    }
}

impl ApiError {
    /// 404 NotFound.
    pub fn not_found(kind: &ResourceKind, name: &str) -> Self {
        ApiError { code: 404, reason: "NotFound", message: format!("{} {name:?} not found", resource_name(kind)) }
    }

    /// 409 AlreadyExists (POST of an existing name).
    pub fn already_exists(kind: &ResourceKind, name: &str) -> Self {
        ApiError { code: 409, reason: "AlreadyExists", message: format!("{} {name:?} already exists", resource_name(kind)) }
    }

    /// 409 Conflict (stale resourceVersion).
    pub fn conflict(kind: &ResourceKind, name: &str) -> Self {
        ApiError {
            code: 409,
            reason: "Conflict",
            message: format!(
                "Operation cannot be fulfilled on {} {name:?}: the object has been modified; please apply your changes to the latest version and try again",
                resource_name(kind)
            ),
        }
    }

    /// 409 Conflict from server-side apply, naming the conflicting fields and managers.
    pub fn apply_conflict(details: &[(String, String)]) -> Self {
        let list: Vec<String> = details.iter().map(|(m, f)| format!("conflict with {m:?}: .{f}")).collect();
        ApiError {
            code: 409,
            reason: "Conflict",
            message: format!("Apply failed with {} conflict{}: {}", list.len(), if list.len() == 1 { "" } else { "s" }, list.join(", ")),
        }
    }

    /// 422 Invalid.
    pub fn invalid(kind: &ResourceKind, name: &str, detail: &str) -> Self {
        ApiError { code: 422, reason: "Invalid", message: format!("{} {name:?} is invalid: {detail}", kind.kind) }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: &str) -> Self {
        ApiError { code: 400, reason: "BadRequest", message: message.to_string() }
    }

    /// 410 Expired (old continue token or resource version).
    pub fn expired(message: &str) -> Self {
        ApiError { code: 410, reason: "Expired", message: message.to_string() }
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(method: &str) -> Self {
        ApiError { code: 405, reason: "MethodNotAllowed", message: format!("the server does not allow this method on the requested resource: {method}") }
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        ApiError { code: 415, reason: "UnsupportedMediaType", message: format!("the body of the request was in an unknown format: {content_type}") }
    }

    /// 429 TooManyRequests (a fault knob: the real server says this while not ready or overloaded).
    pub fn too_many_requests() -> Self {
        ApiError { code: 429, reason: "TooManyRequests", message: "Too many requests, please try again later.".into() }
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large(limit: usize) -> Self {
        ApiError { code: 413, reason: "RequestEntityTooLarge", message: format!("the request body is larger than {limit} bytes") }
    }

    /// The `Status` object kube clients parse.
    pub fn to_status(&self) -> Value {
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        })
    }
}
