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
    /// `Status.details` (`name`, `group`, `kind` as the plural, `causes`), or `null` for none.
    pub details: Value,
}

fn details(kind: &ResourceKind, name: &str) -> Value {
    let mut out = json!({"name": name, "kind": kind.plural});
    if !kind.group.is_empty() {
        out["group"] = json!(kind.group);
    }
    out
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
        ApiError {
            code: 404,
            reason: "NotFound",
            message: format!("{} {name:?} not found", resource_name(kind)),
            details: details(kind, name),
        }
    }

    /// 404 for a namespace that does not exist (here: one whose name no namespace can have).
    pub fn namespace_not_found(name: &str) -> Self {
        ApiError {
            code: 404,
            reason: "NotFound",
            message: format!("namespaces \"{name}\" not found"),
            details: json!({"name": name, "kind": "namespaces"}),
        }
    }

    /// 409 AlreadyExists (POST of an existing name).
    pub fn already_exists(kind: &ResourceKind, name: &str) -> Self {
        ApiError {
            code: 409,
            reason: "AlreadyExists",
            message: format!("{} {name:?} already exists", resource_name(kind)),
            details: details(kind, name),
        }
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
            details: details(kind, name),
        }
    }

    /// 409 Conflict from server-side apply, naming the conflicting fields and managers
    /// (`(manager, field path)` pairs, worded as kube-apiserver words them).
    pub fn apply_conflict(conflicts: &[(String, String)]) -> Self {
        let causes: Vec<Value> = conflicts
            .iter()
            .map(|(m, f)| json!({"reason": "FieldManagerConflict", "message": format!("conflict with {m:?}"), "field": format!(".{f}")}))
            .collect();
        let message = match conflicts {
            [(m, f)] => format!("Apply failed with 1 conflict: conflict with {m:?}: .{f}"),
            _ => {
                let mut managers: Vec<&String> = conflicts.iter().map(|(m, _)| m).collect();
                managers.dedup();
                let mut text = format!("Apply failed with {} conflicts:", conflicts.len());
                for manager in managers {
                    let fields: Vec<String> = conflicts
                        .iter()
                        .filter(|(m, _)| m == manager)
                        .map(|(_, f)| format!("- .{f}"))
                        .collect();
                    text.push_str(&format!(
                        " conflicts with {manager:?}:\n{}",
                        fields.join("\n")
                    ));
                }
                text
            }
        };
        ApiError {
            code: 409,
            reason: "Conflict",
            message,
            details: json!({"causes": causes}),
        }
    }

    /// 422 Invalid: `field` failed validation with `detail` (e.g. `Invalid value: 0: must be …`).
    pub fn invalid(
        kind: &ResourceKind,
        name: &str,
        field: &str,
        reason: &str,
        detail: &str,
    ) -> Self {
        let mut details = details(kind, name);
        details["causes"] = json!([{"reason": reason, "message": detail, "field": field}]);
        ApiError {
            code: 422,
            reason: "Invalid",
            message: format!(
                "{} {name:?} is invalid: {field}: {detail}",
                resource_name(kind)
            ),
            details,
        }
    }

    /// 422 Invalid with several `(field, detail)` causes: one is worded as
    /// [`ApiError::invalid`], more as `[field: detail, field: detail]` (each distinct one
    /// once), as kube-apiserver's `ErrorList` prints them.
    /// Object validation names the *kind* (`ConfigMap`, `Application.argoproj.io`), where
    /// other errors name the resource (`errors.NewInvalid` takes a `GroupKind`).
    pub fn invalid_causes(kind: &ResourceKind, name: &str, causes: &[(String, String)]) -> Self {
        let mut details = json!({"name": name, "kind": kind.kind});
        if !kind.group.is_empty() {
            details["group"] = json!(kind.group);
        }
        let group_kind = if kind.group.is_empty() {
            kind.kind.clone()
        } else {
            format!("{}.{}", kind.kind, kind.group)
        };
        details["causes"] = causes
            .iter()
            .map(|(field, detail)| json!({"reason": field_reason(detail), "message": detail, "field": field}))
            .collect();
        // The message is the errors' aggregate, which drops repeats (`ToAggregate`); the
        // causes keep every one.
        let mut listed: Vec<String> = Vec::new();
        for (field, detail) in causes {
            let line = format!("{field}: {detail}");
            if !listed.contains(&line) {
                listed.push(line);
            }
        }
        let what = match listed.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        ApiError {
            code: 422,
            reason: "Invalid",
            message: format!("{group_kind} {name:?} is invalid: {what}"),
            details,
        }
    }

    /// 422 for an apply request without `fieldManager`, worded as kube-apiserver does.
    pub fn field_manager_required() -> Self {
        let cause = json!({"reason": "FieldValueRequired", "message": "Required value: is required for apply patch", "field": "fieldManager"});
        ApiError {
            code: 422,
            reason: "Invalid",
            message: "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch".into(),
            details: json!({"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [cause]}),
        }
    }

    /// 422 for a `dryRun` value other than `All`, worded as kube-apiserver's options
    /// validation (`options` is `CreateOptions`, `UpdateOptions`, `PatchOptions` or
    /// `DeleteOptions`).
    pub fn dry_run_unsupported(options: &str, value: &str) -> Self {
        // The parameter is a list (`[]string`), so the value is printed as one.
        let message = format!("Unsupported value: [{value:?}]: supported values: \"All\"");
        let cause =
            json!({"reason": "FieldValueNotSupported", "message": message, "field": "dryRun"});
        ApiError {
            code: 422,
            reason: "Invalid",
            message: format!("{options}.meta.k8s.io \"\" is invalid: dryRun: {message}"),
            details: json!({"group": "meta.k8s.io", "kind": options, "causes": [cause]}),
        }
    }

    /// 403 Forbidden: `user` may not `verb` the resource (`subresource` such as `status`, if
    /// any) in `namespace` (`None`: cluster scope). Worded as kube-apiserver's RBAC
    /// authorizer words a request no rule allows.
    pub fn forbidden(
        kind: &ResourceKind,
        subresource: Option<&str>,
        name: Option<&str>,
        namespace: Option<&str>,
        user: &str,
        verb: &str,
    ) -> Self {
        let resource = match subresource {
            Some(sub) => format!("{}/{sub}", kind.plural),
            None => kind.plural.clone(),
        };
        let scope = match namespace {
            Some(ns) => format!("in the namespace {ns:?}"),
            None => "at the cluster scope".to_string(),
        };
        let reason = format!(
            "User {user:?} cannot {verb} resource {resource:?} in API group {:?} {scope}",
            kind.group
        );
        let message = match name {
            Some(name) => format!("{} {name:?} is forbidden: {reason}", resource_name(kind)),
            None => format!("{} is forbidden: {reason}", resource_name(kind)),
        };
        let mut details = json!({});
        if let Some(name) = name {
            details["name"] = json!(name);
        }
        if !kind.group.is_empty() {
            details["group"] = json!(kind.group);
        }
        details["kind"] = json!(kind.plural);
        ApiError {
            code: 403,
            reason: "Forbidden",
            message,
            details,
        }
    }

    /// 403 from the NamespaceLifecycle admission plugin: a create into a namespace that is
    /// being deleted (worded as kube-apiserver v1.36 words it, with its cause).
    pub fn namespace_terminating(kind: &ResourceKind, name: &str, namespace: &str) -> Self {
        let mut details = json!({"name": name});
        if !kind.group.is_empty() {
            details["group"] = json!(kind.group);
        }
        details["kind"] = json!(kind.plural);
        details["causes"] = json!([{
            "reason": "NamespaceTerminating",
            "message": format!("namespace {namespace} is being terminated"),
            "field": "metadata.namespace",
        }]);
        ApiError {
            code: 403,
            reason: "Forbidden",
            message: format!(
                "{} {name:?} is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                resource_name(kind)
            ),
            details,
        }
    }

    /// 403 for deleting `default`, `kube-system` or `kube-public` (NamespaceLifecycle).
    pub fn namespace_immortal(name: &str) -> Self {
        ApiError {
            code: 403,
            reason: "Forbidden",
            message: format!("namespaces {name:?} is forbidden: this namespace may not be deleted"),
            details: json!({"name": name, "kind": "namespaces"}),
        }
    }

    /// 405 for a verb a subresource does not take (GET or PATCH of a Namespace's
    /// `finalize`), worded as kube-apiserver words it there.
    pub fn verb_not_served() -> Self {
        ApiError {
            code: 405,
            reason: "MethodNotAllowed",
            message: "the server does not allow this method on the requested resource".into(),
            details: json!({}),
        }
    }

    /// 404 for a path that names no resource (`details` empty, as upstream).
    pub fn no_such_path(what: &str) -> Self {
        ApiError {
            code: 404,
            reason: "NotFound",
            message: format!("the server could not find the requested resource ({what})"),
            details: Value::Null,
        }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: &str) -> Self {
        ApiError {
            code: 400,
            reason: "BadRequest",
            message: message.to_string(),
            details: Value::Null,
        }
    }

    /// 410 Expired (old continue token or resource version).
    pub fn expired(message: &str) -> Self {
        ApiError {
            code: 410,
            reason: "Expired",
            message: message.to_string(),
            details: Value::Null,
        }
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(method: &str) -> Self {
        ApiError {
            code: 405,
            reason: "MethodNotAllowed",
            message: format!(
                "the server does not allow this method on the requested resource: {method}"
            ),
            details: Value::Null,
        }
    }

    /// 415 for a PATCH whose patch type the resource does not take (custom resources take
    /// no strategic merge patch), worded as kube-apiserver's patch handler words it.
    pub fn unsupported_patch_type(custom: bool) -> Self {
        let strategic = if custom {
            ""
        } else {
            ", application/strategic-merge-patch+json"
        };
        ApiError {
            code: 415,
            reason: "UnsupportedMediaType",
            message: format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml{strategic}"),
            details: json!({}),
        }
    }

    /// 422 for a JSON patch that does not apply: kube-apiserver's generic wording, no causes.
    pub fn patch_does_not_apply() -> Self {
        ApiError {
            code: 422,
            reason: "Invalid",
            message: "the server rejected our request due to an error in our request".into(),
            details: json!({}),
        }
    }

    /// 406 NotAcceptable: the client accepts no media type this server answers with.
    /// Worded as kube-apiserver's negotiation words it (it lists the types it serves).
    pub fn not_acceptable() -> Self {
        ApiError {
            code: 406,
            reason: "NotAcceptable",
            message: "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf".into(),
            details: json!({}),
        }
    }

    /// 415 UnsupportedMediaType, worded as kube-apiserver words it (the media type is not named).
    pub fn unsupported_media_type(_content_type: &str) -> Self {
        ApiError {
            code: 415,
            reason: "UnsupportedMediaType",
            message: "415: Unsupported Media Type".into(),
            details: json!({}),
        }
    }

    /// 429 TooManyRequests (a fault knob: the real server says this while not ready or overloaded).
    pub fn too_many_requests() -> Self {
        ApiError {
            code: 429,
            reason: "TooManyRequests",
            message: "Too many requests, please try again later.".into(),
            details: Value::Null,
        }
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large(limit: usize) -> Self {
        ApiError {
            code: 413,
            reason: "RequestEntityTooLarge",
            message: format!("the request body is larger than {limit} bytes"),
            details: Value::Null,
        }
    }

    /// The `Status` object kube clients parse.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if !self.details.is_null() {
            status["details"] = self.details.clone();
        }
        status
    }

    /// The `Status` a successful DELETE answers with.
    pub fn deleted_status(kind: &ResourceKind, name: &str, uid: &Value) -> Value {
        let mut details = details(kind, name);
        details["uid"] = uid.clone();
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
    }
}

/// A field error's reason from its message, which starts with its type's text as in
/// apimachinery's `field.Error` (`Invalid value:` → `FieldValueInvalid`, `Too long:` →
/// `FieldValueTooLong`, `Required value:` → `FieldValueRequired`).
fn field_reason(message: &str) -> &'static str {
    if message.starts_with("Too long:") {
        "FieldValueTooLong"
    } else if message.starts_with("Required value") {
        "FieldValueRequired"
    } else if message.starts_with("Forbidden:") {
        "FieldValueForbidden"
    } else {
        "FieldValueInvalid"
    }
}
