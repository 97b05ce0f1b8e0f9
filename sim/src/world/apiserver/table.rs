//! Server-side tables (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`): what
//! `kubectl get` asks for and prints. Column definitions and cells follow kube-apiserver
//! v1.36: the built-in printers of `pkg/printers/internalversion/printers.go` for the
//! built-in types, and for custom resources `Name` plus the CRD's
//! `additionalPrinterColumns` (an `Age` date column when it declares none). Rows carry
//! the object as `PartialObjectMetadata` by default (`includeObject=Metadata`), the whole
//! object with `includeObject=Object`, nothing with `None`.

use serde_json::{json, Map, Value};

use orrery_system::core::json::Pointer as _;
use orrery_system::core::time::parse_rfc3339;

use super::error::ApiError;
use super::resources::{PrinterColumn, ResourceKind};

const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// What a row carries besides its cells (`includeObject`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Include {
    /// No object.
    None,
    /// `PartialObjectMetadata` (the default).
    Metadata,
    /// The whole object.
    Object,
}

impl Include {
    /// Reads the `includeObject` query parameter (absent → `Metadata`).
    pub fn parse(param: Option<&str>) -> Result<Include, ApiError> {
        match param {
            None | Some("") | Some("Metadata") => Ok(Include::Metadata),
            Some("None") => Ok(Include::None),
            Some("Object") => Ok(Include::Object),
            Some(other) => Err(ApiError::bad_request(&format!(
                "includeObject: Unsupported value: {other:?}: supported values: \"Metadata\", \"None\", \"Object\""
            ))),
        }
    }
}

/// Whether an `Accept` header asks for a `meta.k8s.io/v1` table.
pub fn wanted(accept: &str) -> bool {
    accept.split(',').any(|media| {
        let params: Vec<&str> = media.split(';').map(str::trim).collect();
        params.contains(&"as=Table")
            && params.contains(&"g=meta.k8s.io")
            && params.contains(&"v=v1")
    })
}

fn column(name: &str, column_type: &str, format: &str, description: &str, priority: i64) -> Value {
    json!({"name": name, "type": column_type, "format": format, "description": description, "priority": priority})
}

fn name_column() -> Value {
    column("Name", "string", "name", NAME_DESCRIPTION, 0)
}

fn age_column() -> Value {
    column("Age", "string", "", AGE_DESCRIPTION, 0)
}

/// A CRD's columns, defaulted as the CRD API does: `Age` (a date) when it declares none.
fn crd_columns(kind: &ResourceKind) -> Vec<PrinterColumn> {
    if kind.details.printer_columns.is_empty() {
        return vec![PrinterColumn {
            name: "Age".into(),
            column_type: "date".into(),
            json_path: ".metadata.creationTimestamp".into(),
            priority: 0,
            description: Some(AGE_DESCRIPTION.into()),
            format: None,
        }];
    }
    kind.details.printer_columns.clone()
}

/// The column definitions of `kind`'s table.
pub fn columns(kind: &ResourceKind) -> Vec<Value> {
    if !kind.custom && kind.kind == "Event" {
        return event_columns();
    }
    let mut columns = vec![name_column()];
    if kind.custom {
        for c in crd_columns(kind) {
            let description = c.description.clone().unwrap_or_else(|| {
                format!(
                    "Custom resource definition column (in JSONPath format): {}",
                    c.json_path
                )
            });
            columns.push(column(
                &c.name,
                &c.column_type,
                c.format.as_deref().unwrap_or(""),
                &description,
                c.priority,
            ));
        }
        return columns;
    }
    match kind.kind.as_str() {
        "ConfigMap" => columns.push(column("Data", "string", "", "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field. The keys stored in Data must not overlap with the keys in the BinaryData field, this is enforced during validation process.", 0)),
        "Secret" => {
            columns.push(column("Type", "string", "", "Used to facilitate programmatic handling of secret data. More info: https://kubernetes.io/docs/concepts/configuration/secret/#secret-types", 0));
            columns.push(column("Data", "string", "", "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'. The serialized form of the secret data is a base64 encoded string, representing the arbitrary (possibly non-string) data value here. Described in https://tools.ietf.org/html/rfc4648#section-4", 0));
        }
        "Namespace" => columns.push(column("Status", "string", "", "The status of the namespace", 0)),
        "Lease" => columns.push(column("Holder", "string", "", "holderIdentity contains the identity of the holder of a current lease. If Coordinated Leader Election is used, the holder identity must be equal to the elected LeaseCandidate.metadata.name field.", 0)),
        "ReplicaSet" => {
            columns.push(column("Desired", "integer", "", "Replicas is the number of desired pods. This is a pointer to distinguish between explicit zero and unspecified. Defaults to 1. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicaset", 0));
            columns.push(column("Current", "integer", "", "Replicas is the most recently observed number of non-terminating pods. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicaset", 0));
            columns.push(column("Ready", "integer", "", "The number of non-terminating pods targeted by this ReplicaSet with a Ready Condition.", 0));
        }
        _ => {}
    }
    columns.push(age_column());
    if kind.kind == "ReplicaSet" {
        columns.push(column(
            "Containers",
            "string",
            "",
            "Names of each container in the template.",
            1,
        ));
        columns.push(column(
            "Images",
            "string",
            "",
            "Images referenced by each container in the template.",
            1,
        ));
        columns.push(column("Selector", "string", "", "Selector is a label query over pods that should match the replica count. Label keys and values that must match in order to be controlled by this replica set. It must match the pod template's labels. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors", 1));
    }
    columns
}

/// `duration.HumanDuration` of k8s.io/apimachinery: how kubectl's AGE reads.
pub fn human_duration(millis: i64) -> String {
    let seconds = millis / 1000; // Go's int(d.Seconds()) truncates toward zero
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        let years = hours / 24 / 365;
        return if days == 0 {
            format!("{years}y")
        } else {
            format!("{years}y{days}d")
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// The age of a timestamp at `now_millis`, or `<unknown>` without one.
fn age(timestamp: Option<&Value>, now_millis: u64) -> Value {
    match timestamp.and_then(Value::as_str).and_then(parse_rfc3339) {
        Some(at) => json!(human_duration(now_millis as i64 - at as i64)),
        None => json!("<unknown>"),
    }
}

/// A simple JSONPath (`.a.b.c`, or `{.a.b}`) into `object`.
fn at_path<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    path.trim_start_matches('.')
        .split('.')
        .filter(|s| !s.is_empty())
        .try_fold(object, |v, segment| v.get(segment))
}

fn count(object: &Value, fields: &[&str]) -> usize {
    fields
        .iter()
        .filter_map(|f| object.get(*f).and_then(Value::as_object))
        .map(Map::len)
        .sum()
}

/// `metav1.FormatLabelSelector`: every term (`k=v` and set-based) sorted by key, set values
/// sorted, joined by commas; `<none>` when empty, `<error>` for an unknown operator.
fn selector(selector: Option<&Value>) -> String {
    let Some(selector) = selector else {
        return "<none>".into();
    };
    let mut terms: Vec<(String, String)> = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in labels {
            terms.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or_default())));
        }
    }
    for expression in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = expression["key"].as_str().unwrap_or_default();
        let mut values: Vec<&str> = expression["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        values.sort_unstable();
        let term = match expression["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => return "<error>".into(),
        };
        terms.push((key.to_string(), term));
    }
    if terms.is_empty() {
        return "<none>".into();
    }
    terms.sort_by(|a, b| a.0.cmp(&b.0));
    terms
        .into_iter()
        .map(|(_, term)| term)
        .collect::<Vec<_>>()
        .join(",")
}

fn container_field(object: &Value, field: &str) -> String {
    object
        .at("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| c[field].as_str().unwrap_or_default())
        .collect::<Vec<_>>()
        .join(",")
}

/// A core/v1 Event's columns (kube-apiserver's `eventColumnDefinitions`): no leading name
/// and no age; the name last, shown with `-o wide`.
fn event_columns() -> Vec<Value> {
    vec![
        column("Last Seen", "string", "", "The time at which the most recent occurrence of this event was recorded.", 0),
        column("Type", "string", "", "Type of this event (Normal, Warning), new types could be added in the future", 0),
        column("Reason", "string", "", "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.", 0),
        column("Object", "string", "", "The object that this event is about.", 0),
        column("Subobject", "string", "", "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]. For example, if the object reference is to a container within a pod, this would take on a value like: \"spec.containers{name}\" (where \"name\" refers to the name of the container that triggered the event) or if no container name is specified \"spec.containers[2]\" (container with index 2 in this pod). This syntax is chosen only to have some well-defined way of referencing a part of an object.", 1),
        column("Source", "string", "", "The component reporting this event. Should be a short machine understandable string.", 1),
        column("Message", "string", "", "A human-readable description of the status of this operation.", 0),
        column("First Seen", "string", "", "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)", 1),
        column("Count", "string", "", "The number of times this event has occurred.", 1),
        column("Name", "string", "name", "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names", 1),
    ]
}

/// A core/v1 Event's cells (kube-apiserver's `printEvent`): first and last seen (the event
/// time when there is no first timestamp; a series' last observation and count when there
/// is one; `<unknown>` without any), `kind/name` in lower case, the source as
/// `component, host` (the reporting controller and instance when the source is empty), the
/// message trimmed, the count (at least 1).
fn event_cells(object: &Value, now_millis: u64) -> Vec<Value> {
    let text = |pointer: &str| object.at(pointer).and_then(Value::as_str).unwrap_or("");
    fn set(v: Option<&Value>) -> Option<&Value> {
        v.filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
    }
    let first = set(object.get("firstTimestamp"))
        .or_else(|| set(object.get("eventTime")))
        .cloned();
    let first = age(first.as_ref(), now_millis);
    let mut last = match set(object.get("lastTimestamp")) {
        Some(at) => age(Some(at), now_millis),
        None => first.clone(),
    };
    let mut count = object.get("count").and_then(Value::as_i64).unwrap_or(0);
    if let Some(series) = object.get("series").filter(|s| s.is_object()) {
        last = age(series.get("lastObservedTime"), now_millis);
        count = series.get("count").and_then(Value::as_i64).unwrap_or(0);
    } else if count == 0 {
        count = 1;
    }
    let kind = text("/involvedObject/kind").to_lowercase();
    let target = match text("/involvedObject/name") {
        "" => kind,
        name => format!("{kind}/{name}"),
    };
    let or = |a: &str, b: &str| {
        if a.is_empty() {
            b.to_string()
        } else {
            a.to_string()
        }
    };
    let component = or(text("/source/component"), text("/reportingComponent"));
    let instance = or(text("/source/host"), text("/reportingInstance"));
    let source = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };
    vec![
        last,
        json!(text("/type")),
        json!(text("/reason")),
        json!(target),
        json!(text("/involvedObject/fieldPath")),
        json!(source),
        json!(text("/message").trim()),
        first,
        json!(count),
        object["metadata"]["name"].clone(),
    ]
}

/// The cells of `object`'s row.
pub fn cells(kind: &ResourceKind, object: &Value, now_millis: u64) -> Vec<Value> {
    if !kind.custom && kind.kind == "Event" {
        return event_cells(object, now_millis);
    }
    let metadata = &object["metadata"];
    let mut cells = vec![metadata["name"].clone()];
    let created = metadata.get("creationTimestamp");
    if kind.custom {
        for c in crd_columns(kind) {
            let value = at_path(object, &c.json_path);
            // `cellForJSONValue`: a value of another type than its column's is empty.
            cells.push(match (c.column_type.as_str(), value) {
                ("date", Some(Value::String(s))) => match parse_rfc3339(s) {
                    Some(at) => json!(human_duration(now_millis as i64 - at as i64)),
                    None => json!("<invalid>"),
                },
                ("string", Some(v @ Value::String(_))) | ("boolean", Some(v @ Value::Bool(_))) => {
                    v.clone()
                }
                ("integer", Some(Value::Number(n))) => n
                    .as_i64()
                    .or_else(|| n.as_f64().map(|f| f as i64))
                    .map_or(Value::Null, |i| json!(i)),
                ("number", Some(Value::Number(n))) => n.as_f64().map_or(Value::Null, |f| json!(f)),
                _ => Value::Null,
            });
        }
        return cells;
    }
    let int = |pointer: &str, default: i64| {
        json!(object
            .at(pointer)
            .and_then(Value::as_i64)
            .unwrap_or(default))
    };
    match kind.kind.as_str() {
        "ConfigMap" => cells.push(json!(count(object, &["data", "binaryData"]))),
        "Namespace" => cells.push(json!(object
            .at("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or_default())),
        "Secret" => {
            cells.push(json!(object["type"].as_str().unwrap_or_default()));
            cells.push(json!(count(object, &["data"])));
        }
        "Lease" => cells.push(json!(object
            .at("/spec/holderIdentity")
            .and_then(Value::as_str)
            .unwrap_or_default())),
        "ReplicaSet" => {
            cells.push(int("/spec/replicas", 1));
            cells.push(int("/status/replicas", 0));
            cells.push(int("/status/readyReplicas", 0));
        }
        _ => {}
    }
    cells.push(age(created, now_millis));
    if kind.kind == "ReplicaSet" {
        cells.push(json!(container_field(object, "name")));
        cells.push(json!(container_field(object, "image")));
        cells.push(json!(selector(object.at("/spec/selector"))));
    }
    cells
}

/// One row: cells and the object as `include` asks.
pub fn row(kind: &ResourceKind, object: &Value, now_millis: u64, include: Include) -> Value {
    let carried = match include {
        Include::None => Value::Null,
        Include::Metadata => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": object["metadata"],
        }),
        Include::Object => {
            let mut whole = object.clone();
            if let Some(fields) = whole.as_object_mut() {
                fields.insert("apiVersion".into(), json!(kind.api_version()));
                fields.insert("kind".into(), json!(kind.kind));
            }
            whole
        }
    };
    json!({"cells": cells(kind, object, now_millis), "object": carried})
}

/// A `Table` of `rows`: with column definitions, or `null` in their place (every watch
/// event after the first).
pub fn table(
    kind: &ResourceKind,
    list_metadata: Value,
    rows: Vec<Value>,
    with_columns: bool,
) -> Value {
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata,
        "columnDefinitions": if with_columns { json!(columns(kind)) } else { Value::Null },
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::kinds::registry;

    fn kind(plural: &str) -> ResourceKind {
        registry().into_iter().find(|k| k.plural == plural).unwrap()
    }

    #[test]
    fn an_events_row_reads_as_kube_apiservers_print_event() {
        let events = kind("events");
        assert_eq!(columns(&events).len(), 10, "no leading name and no age");
        let now = parse_rfc3339("2026-01-01T00:11:00Z").unwrap();
        let event = json!({
            "metadata": {"name": "a.1"},
            "involvedObject": {"kind": "ConfigMap", "name": "a"},
            "reason": "Tested", "message": "  hello there  ", "type": "Normal",
            "source": {"component": "tester", "host": "h1"},
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z",
            "count": 3,
        });
        assert_eq!(
            cells(&events, &event, now),
            vec![
                json!("10m"),
                json!("Normal"),
                json!("Tested"),
                json!("configmap/a"),
                json!(""),
                json!("tester, h1"),
                json!("hello there"),
                json!("11m"),
                json!(3),
                json!("a.1")
            ]
        );
        // Nothing but its involved object: unknown times, a count of one; the reporting
        // controller stands in for an empty source.
        let bare = json!({"metadata": {"name": "a.2"}, "involvedObject": {"kind": "ConfigMap", "name": "a"},
                          "source": {}, "firstTimestamp": null, "lastTimestamp": null,
                          "reportingComponent": "ctrl", "reportingInstance": ""});
        let row = cells(&events, &bare, now);
        assert_eq!(row[0], "<unknown>");
        assert_eq!(row[5], "ctrl");
        assert_eq!(row[7], "<unknown>");
        assert_eq!(row[8], 1);
    }

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        let s = 1000;
        assert_eq!(human_duration(0), "0s");
        assert_eq!(human_duration(-1500), "0s");
        assert_eq!(human_duration(-5000), "<invalid>");
        assert_eq!(human_duration(119 * s), "119s");
        assert_eq!(human_duration(125 * s), "2m5s");
        assert_eq!(human_duration(600 * s), "10m");
        assert_eq!(human_duration(3 * 3600 * s + 60 * s), "3h1m");
        assert_eq!(human_duration(30 * 3600 * s), "30h");
        assert_eq!(human_duration(50 * 3600 * s), "2d2h");
        assert_eq!(human_duration(400 * 86400 * s), "400d");
        assert_eq!(human_duration(800 * 86400 * s), "2y70d");
    }

    #[test]
    fn built_in_and_custom_rows_follow_the_real_printers() {
        let now = parse_rfc3339("2026-01-01T00:01:00Z").unwrap();
        let created = json!("2026-01-01T00:00:00Z");
        let rs = json!({"metadata": {"name": "rs", "creationTimestamp": created},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"b": "2", "a": "1"},
                "matchExpressions": [{"key": "t", "operator": "In", "values": ["x", "y"]}]},
                "template": {"spec": {"containers": [{"name": "c", "image": "i:1"}, {"name": "d", "image": "i:2"}]}}}});
        assert_eq!(
            cells(&kind("replicasets"), &rs, now),
            [
                json!("rs"),
                json!(2),
                json!(0),
                json!(0),
                json!("60s"),
                json!("c,d"),
                json!("i:1,i:2"),
                json!("a=1,b=2,t in (x,y)")
            ]
        );
        let mixed = json!({"matchLabels": {"b": "2"},
            "matchExpressions": [{"key": "a", "operator": "In", "values": ["y", "x"]}]});
        assert_eq!(
            selector(Some(&mixed)),
            "a in (x,y),b=2",
            "terms sort by key"
        );
        let unknown = json!({"matchExpressions": [{"key": "a", "operator": "Near"}]});
        assert_eq!(selector(Some(&unknown)), "<error>");
        let odd = json!({"metadata": {"name": "a"}, "status": {"sync": {"status": 7}}, "spec": {"project": true}});
        let odd_cells = cells(&kind("applications"), &odd, now);
        assert_eq!(
            odd_cells[1],
            Value::Null,
            "a number in a string column is empty"
        );
        assert_eq!(odd_cells[4], Value::Null);
        let bad_date = json!({"metadata": {"name": "w", "creationTimestamp": "yesterday"}});
        assert_eq!(cells(&kind("workflows"), &bad_date, now)[1], "<invalid>");
        assert_eq!(columns(&kind("replicasets")).len(), 8);
        let app = json!({"metadata": {"name": "a", "creationTimestamp": created},
            "spec": {"project": "default"}, "status": {"sync": {"status": "Synced"}}});
        let apps = kind("applications");
        assert_eq!(
            cells(&apps, &app, now),
            [
                json!("a"),
                json!("Synced"),
                Value::Null,
                Value::Null,
                json!("default")
            ]
        );
        assert_eq!(
            columns(&apps)[1]["description"],
            "Custom resource definition column (in JSONPath format): .status.sync.status"
        );
        let workflows = kind("workflows");
        assert_eq!(columns(&workflows)[1]["type"], "date");
        assert_eq!(cells(&workflows, &app, now)[1], "60s");
        let cm = json!({"metadata": {"name": "c"}, "data": {"a": "1"}, "binaryData": {"b": ""}});
        assert_eq!(
            cells(&kind("configmaps"), &cm, now),
            [json!("c"), json!(2), json!("<unknown>")]
        );
        let row = row(&kind("configmaps"), &cm, now, Include::Metadata);
        assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
        assert!(Include::parse(Some("Everything")).is_err());
        assert!(wanted(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        ));
        assert!(!wanted("application/json"));
    }
}
