//! Object metadata validation on writes, worded as kube-apiserver v1.36 words it
//! (`apimachinery/pkg/util/validation`, `api/validation/objectmeta.go`): names must be
//! DNS-1123 subdomains of at most 253 characters, label keys qualified names and label
//! values at most 63 characters of the label alphabet. Differential script
//! `create-invalid-names-422` proves the answers against a real server.

use serde_json::Value;

use super::error::ApiError;
use super::resources::ResourceKind;
use orrery_system::core::json::Pointer as _;

const DNS1123_SUBDOMAIN_ERROR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const QUALIFIED_NAME_ERROR: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_ERROR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

fn alnum_lower(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?` for one dot-separated label of a subdomain.
fn dns_label(part: &str) -> bool {
    let (first, last) = (part.chars().next(), part.chars().last());
    first.is_some_and(alnum_lower)
        && last.is_some_and(alnum_lower)
        && part.chars().all(|c| alnum_lower(c) || c == '-')
}

/// Whether `name` can name a namespace (a DNS-1123 label: at most 63 characters).
pub fn namespace_name(name: &str) -> bool {
    name.len() <= 63 && dns_label(name)
}

const DNS1123_LABEL_ERROR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/// The errors of `IsDNS1123Label` (a Namespace's name).
fn label(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push("must be no more than 63 characters".to_string());
    }
    if !dns_label(value) {
        errors.push(DNS1123_LABEL_ERROR.to_string());
    }
    errors
}

/// The errors of `IsDNS1123Subdomain`.
fn subdomain(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 253 {
        errors.push("must be no more than 253 characters".to_string());
    }
    if !value.split('.').all(dns_label) {
        errors.push(DNS1123_SUBDOMAIN_ERROR.to_string());
    }
    errors
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn label_alphabet(value: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    value.chars().next().is_some_and(alnum)
        && value.chars().last().is_some_and(alnum)
        && value
            .chars()
            .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
}

/// The errors of `IsQualifiedName` (`[prefix/]name`).
fn qualified_name(key: &str) -> Vec<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let mut errors = Vec::new();
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            errors.push("prefix part must be non-empty".to_string());
        } else {
            errors.extend(
                subdomain(prefix)
                    .into_iter()
                    .map(|e| format!("prefix part {e}")),
            );
        }
    }
    // An empty name part fails both checks, as `IsQualifiedName` words it.
    if name.is_empty() {
        errors.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errors.push("name part must be no more than 63 characters".to_string());
    }
    if !label_alphabet(name) {
        errors.push(QUALIFIED_NAME_ERROR.to_string());
    }
    errors
}

/// The errors of `IsValidLabelValue`.
fn label_value(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push("must be no more than 63 characters".to_string());
    }
    if !value.is_empty() && !label_alphabet(value) {
        errors.push(LABEL_VALUE_ERROR.to_string());
    }
    errors
}

/// `TotalAnnotationSizeLimitB`: 256 KiB.
const ANNOTATIONS_LIMIT_BYTES: usize = 256 * 1024;

/// Validates `object`'s name (on create), labels and annotations, as kube-apiserver does before it
/// stores a write: 422 Invalid with one cause per error.
pub fn metadata(
    kind: &ResourceKind,
    name: &str,
    object: &Value,
    check_name: bool,
) -> Result<(), ApiError> {
    let causes = metadata_causes(kind, name, object, check_name);
    refuse(kind, name, &causes)
}

/// [`metadata`]'s errors as `(field, detail)` causes, for a type whose own rules add more.
pub fn metadata_causes(
    kind: &ResourceKind,
    name: &str,
    object: &Value,
    check_name: bool,
) -> Vec<(String, String)> {
    let mut causes: Vec<(String, String)> = Vec::new();
    let quote = |v: &str| serde_json::to_string(v).unwrap_or_default();
    if check_name {
        let namespace = !kind.custom && kind.kind == "Namespace";
        let errors = if namespace {
            label(name)
        } else {
            subdomain(name)
        };
        for error in errors {
            causes.push((
                "metadata.name".into(),
                format!("Invalid value: {}: {error}", quote(name)),
            ));
        }
    }
    if let Some(labels) = object.at("/metadata/labels").and_then(Value::as_object) {
        for (key, value) in labels {
            for error in qualified_name(key) {
                causes.push((
                    "metadata.labels".into(),
                    format!("Invalid value: {}: {error}", quote(key)),
                ));
            }
            let value = value.as_str().unwrap_or("");
            for error in label_value(value) {
                causes.push((
                    "metadata.labels".into(),
                    format!("Invalid value: {}: {error}", quote(value)),
                ));
            }
        }
    }
    if let Some(annotations) = object
        .at("/metadata/annotations")
        .and_then(Value::as_object)
    {
        // `ValidateAnnotations`: a qualified name once lowercased; at most 256 KiB of keys
        // and values together.
        let mut size = 0usize;
        for (key, value) in annotations {
            for error in qualified_name(&key.to_lowercase()) {
                causes.push((
                    "metadata.annotations".into(),
                    format!("Invalid value: {}: {error}", quote(key)),
                ));
            }
            size += key.len() + value.as_str().map_or(0, str::len);
        }
        if size > ANNOTATIONS_LIMIT_BYTES {
            causes.push((
                "metadata.annotations".into(),
                format!("Too long: may not be more than {ANNOTATIONS_LIMIT_BYTES} bytes"),
            ));
        }
    }
    causes
}

/// Everything a write is validated for before it is stored: the metadata, and a type's own
/// rules (an Event's, a Namespace's finalizers).
pub fn write(
    kind: &ResourceKind,
    name: &str,
    namespace: &str,
    object: &Value,
    check_name: bool,
) -> Result<(), ApiError> {
    if super::events::is_event(kind) {
        // core/v1's Event strategy skips ValidateObjectMeta: its own rules answer alone, then
        // the common metadata checks run (`rest.BeforeCreate`), the name only as a path
        // segment.
        event(kind, name, namespace, object)?;
        return metadata(kind, name, object, false);
    }
    metadata(kind, name, object, check_name)?;
    namespace_finalizers(kind, name, object)
}

/// A Namespace's `spec.finalizers` (`ValidateNamespace`'s `validateFinalizerName`): each the
/// standard `kubernetes` or a fully qualified name (`example.com/name`).
fn namespace_finalizers(kind: &ResourceKind, name: &str, object: &Value) -> Result<(), ApiError> {
    if kind.custom || kind.kind != "Namespace" {
        return Ok(());
    }
    let Some(finalizers) = object.at("/spec/finalizers").and_then(Value::as_array) else {
        return Ok(());
    };
    let mut causes = Vec::new();
    for (index, finalizer) in finalizers.iter().enumerate() {
        let finalizer = finalizer.as_str().unwrap_or("");
        let field = format!("spec.finalizers[{index}]");
        let quoted = serde_json::to_string(finalizer).unwrap_or_default();
        for error in qualified_name(finalizer) {
            causes.push((field.clone(), format!("Invalid value: {quoted}: {error}")));
        }
        if finalizer != super::namespaces::FINALIZER && !finalizer.contains('/') {
            causes.push((
                field,
                format!("Invalid value: {quoted}: name is neither a standard finalizer name nor is it fully qualified"),
            ));
        }
    }
    refuse(kind, name, &causes)
}

/// 422 Invalid with `causes`, or `Ok` when there are none.
pub fn refuse(
    kind: &ResourceKind,
    name: &str,
    causes: &[(String, String)],
) -> Result<(), ApiError> {
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_causes(kind, name, causes))
    }
}

/// The length limits of an Event's fields with `eventTime` (`ReasonLengthLimit` and its kin).
const EVENT_FIELD_LIMIT: usize = 128;
/// The longest `message` of an Event with `eventTime` (`NoteLengthLimit`).
const EVENT_NOTE_LIMIT: usize = 1024;

/// A core/v1 Event's own rules (`legacyValidateEvent`, as a core/v1 request sees them).
/// Without `eventTime` (the old shape): its involved object's namespace is its own — or, when
/// the involved object has none, the Event lives in `default` (or no namespace). With
/// `eventTime` (the shape client-go's new recorder writes): an involved object without a
/// namespace only in `default` or `kube-system`; `reportingComponent` a qualified name,
/// `reportingInstance`, `action` and `reason` required and at most 128 bytes, `message` at
/// most 1,024.
fn event(kind: &ResourceKind, name: &str, namespace: &str, object: &Value) -> Result<(), ApiError> {
    let causes = event_causes(namespace, object, "reportingComponent");
    refuse(kind, name, &causes)
}

/// [`event`]'s errors as causes, with the reporting controller's field named as the request's
/// version names it (`reportingComponent` in core/v1, `reportingController` in
/// events.k8s.io/v1); `object` is in core/v1's shape.
pub fn event_causes(
    namespace: &str,
    object: &Value,
    component_field: &str,
) -> Vec<(String, String)> {
    let text = |pointer: &str| object.at(pointer).and_then(Value::as_str).unwrap_or("");
    let involved = text("/involvedObject/namespace");
    let quoted_involved = serde_json::to_string(involved).unwrap_or_default();
    let mismatch = (
        "involvedObject.namespace".to_string(),
        format!("Invalid value: {quoted_involved}: does not match event.namespace"),
    );
    let mut causes = Vec::new();
    // Go's zero time sent by a client still counts as set here (it is parsed into local
    // time, which `==` does not equal to the zero time); it is written back as null.
    if object["eventTime"].is_null() {
        let matches = if involved.is_empty() {
            namespace.is_empty() || namespace == "default"
        } else {
            involved == namespace
        };
        if !matches {
            causes.push(mismatch);
        }
    } else {
        if involved.is_empty() && namespace != "default" && namespace != "kube-system" {
            causes.push(mismatch);
        }
        let component = text("/reportingComponent");
        if component.is_empty() {
            causes.push((component_field.into(), "Required value".into()));
        }
        let quoted = serde_json::to_string(component).unwrap_or_default();
        for error in qualified_name(component) {
            causes.push((
                component_field.into(),
                format!("Invalid value: {quoted}: {error}"),
            ));
        }
        for (field, limit) in [
            ("reportingInstance", EVENT_FIELD_LIMIT),
            ("action", EVENT_FIELD_LIMIT),
            ("reason", EVENT_FIELD_LIMIT),
        ] {
            let value = text(&format!("/{field}"));
            if value.is_empty() {
                causes.push((field.into(), "Required value".into()));
            }
            if value.len() > limit {
                causes.push((
                    field.into(),
                    format!("Invalid value: \"\": can have at most {limit} characters"),
                ));
            }
        }
        if text("/message").len() > EVENT_NOTE_LIMIT {
            causes.push((
                "message".into(),
                format!("Invalid value: \"\": can have at most {EVENT_NOTE_LIMIT} characters"),
            ));
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_labels_follow_kubernetes_rules() {
        assert!(subdomain("example.com").is_empty());
        assert!(subdomain("a-1.b").is_empty());
        assert_eq!(subdomain("Bad_Name!").len(), 1);
        assert_eq!(
            subdomain(&"a".repeat(254)),
            ["must be no more than 253 characters"]
        );
        assert_eq!(subdomain(&"A".repeat(254)).len(), 2);
        assert!(qualified_name("app.kubernetes.io/instance").is_empty());
        assert_eq!(qualified_name("bad key").len(), 1);
        assert_eq!(
            qualified_name("Bad.Prefix/x"),
            [format!("prefix part {DNS1123_SUBDOMAIN_ERROR}")]
        );
        assert!(label_value("").is_empty());
        assert!(label_value("v1.2_x-y").is_empty());
        assert_eq!(label_value("bad value!").len(), 1);
    }

    #[test]
    fn annotation_keys_are_qualified_names_in_any_case_and_their_total_size_is_capped() {
        let kind = crate::scenario::kinds::registry()
            .into_iter()
            .find(|k| k.plural == "configmaps")
            .expect("configmaps are served");
        let cm = |annotations: Value| serde_json::json!({"metadata": {"name": "a", "annotations": annotations}});
        let check = |object: &Value| metadata(&kind, "a", object, true);
        assert!(check(&cm(serde_json::json!({"Example.COM/Upper": "v"}))).is_ok());
        let bad = check(&cm(serde_json::json!({"bad key": "v"}))).unwrap_err();
        assert_eq!(bad.details["causes"][0]["field"], "metadata.annotations");
        let big = "x".repeat(ANNOTATIONS_LIMIT_BYTES);
        let long = check(&cm(serde_json::json!({ "big": big }))).unwrap_err();
        assert_eq!(long.details["causes"][0]["reason"], "FieldValueTooLong");
        assert!(check(&cm(
            serde_json::json!({ "b": "x".repeat(ANNOTATIONS_LIMIT_BYTES - 1) })
        ))
        .is_ok());
    }
}
