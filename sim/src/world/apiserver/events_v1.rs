//! `events.k8s.io/v1`: the core/v1 Events seen in another version. kube-apiserver keeps one
//! store of Events and serves it in both (`pkg/registry/events/rest` reuses core's event
//! storage); a request in events.k8s.io/v1 is converted to the stored shape on the way in
//! and back on the way out (`pkg/apis/events/v1/conversion.go`): `regarding` is
//! `involvedObject`, `note` is `message`, `reportingController` is `reportingComponent`, and
//! the old recorder's fields carry a `deprecated` prefix. Creates and updates in this version
//! are validated more strictly (`ValidateEventCreate`/`ValidateEventUpdate` with a request
//! version past core/v1): `eventTime` required, the deprecated fields unset, a full metadata
//! check, most fields immutable. Every answer here was read off kube-apiserver v1.36.3
//! (differential script `events-k8s-io-v1`).

use serde_json::{json, Map, Value};

use super::error::ApiError;
use super::resources::ResourceKind;

/// The group.
pub const GROUP: &str = "events.k8s.io";

/// `events.k8s.io/v1`, as in `apiVersion`.
pub const API_VERSION: &str = "events.k8s.io/v1";

/// Whether `kind` is events.k8s.io's Event (served from core/v1's store).
pub fn is_events_v1(kind: &ResourceKind) -> bool {
    !kind.custom && kind.group == GROUP && kind.kind == "Event"
}

/// The stored (core/v1) name of each events.k8s.io/v1 field that is named otherwise.
const RENAMED: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// events.k8s.io/v1's fields in the typed object's order.
const FIELDS: [&str; 15] = [
    "metadata",
    "eventTime",
    "series",
    "reportingController",
    "reportingInstance",
    "action",
    "reason",
    "regarding",
    "related",
    "note",
    "type",
    "deprecatedSource",
    "deprecatedFirstTimestamp",
    "deprecatedLastTimestamp",
    "deprecatedCount",
];

/// The core/v1 name of events.k8s.io/v1 field `field`.
fn stored_name(field: &str) -> &str {
    RENAMED
        .iter()
        .find(|(v1, _)| *v1 == field)
        .map_or(field, |(_, core)| core)
}

fn empty(value: Option<&Value>) -> bool {
    value.is_none_or(|v| v.is_null() || v == "" || v == 0)
}

/// A stored Event as events.k8s.io/v1 serialises it: renamed fields in the typed object's
/// order, `eventTime`, `regarding`, `deprecatedSource` and the two deprecated timestamps
/// always there (null or empty), the strings and `deprecatedCount` left out when empty.
/// `typed_item`: an item of a list, which carries no `apiVersion`/`kind`.
pub fn to_v1(stored: &Value, typed_item: bool) -> Value {
    let mut out = Map::new();
    if !typed_item {
        out.insert("kind".into(), json!("Event"));
        out.insert("apiVersion".into(), json!(API_VERSION));
    }
    for field in FIELDS {
        let value = stored.get(stored_name(field));
        let shown = match field {
            "metadata" => Some(value.cloned().unwrap_or_else(|| json!({}))),
            "eventTime" | "deprecatedFirstTimestamp" | "deprecatedLastTimestamp" => {
                Some(value.cloned().unwrap_or(Value::Null))
            }
            "regarding" | "deprecatedSource" => Some(
                value
                    .filter(|v| v.is_object())
                    .cloned()
                    .unwrap_or_else(|| json!({})),
            ),
            // events.k8s.io/v1's EventSeries has no omitempty: a zero count is shown.
            "series" => value.filter(|v| v.is_object()).map(|series| {
                json!({
                    "count": series.get("count").cloned().unwrap_or(json!(0)),
                    "lastObservedTime": series.get("lastObservedTime").cloned().unwrap_or(Value::Null),
                })
            }),
            "related" => value.filter(|v| !v.is_null()).cloned(),
            _ => (!empty(value)).then(|| value.cloned().unwrap_or_default()),
        };
        if let Some(shown) = shown {
            out.insert(field.into(), shown);
        }
    }
    Value::Object(out)
}

/// An events.k8s.io/v1 body in the stored (core/v1) shape; fields this version does not have
/// are dropped, as its typed decoding drops them. 400 when the body names another version.
pub fn to_stored(body: &Value) -> Result<Value, ApiError> {
    if let Some(version) = body
        .get("apiVersion")
        .and_then(Value::as_str)
        .filter(|v| !v.is_empty() && *v != API_VERSION)
    {
        return Err(ApiError::bad_request(&format!(
            "the API version in the data ({version}) does not match the expected API version ({API_VERSION})"
        )));
    }
    let mut out = Map::new();
    out.insert("kind".into(), json!("Event"));
    out.insert("apiVersion".into(), json!("v1"));
    for field in FIELDS {
        if let Some(value) = body.get(field) {
            out.insert(stored_name(field).into(), value.clone());
        }
    }
    Ok(Value::Object(out))
}

/// A field selector's label in this version, as the stored object's label (`regarding.name`
/// → `involvedObject.name`), or the 400 for a label events.k8s.io/v1 does not select by.
pub fn field_label(label: &str) -> Result<String, String> {
    let stored = match label {
        "metadata.name" | "metadata.namespace" | "reason" | "type" => label.to_string(),
        "reportingController" => "reportingComponent".to_string(),
        _ => match label.strip_prefix("regarding.") {
            Some(
                rest @ ("kind" | "namespace" | "name" | "uid" | "apiVersion" | "resourceVersion"
                | "fieldPath"),
            ) => format!("involvedObject.{rest}"),
            _ => return Err(format!("field label not supported: {label}")),
        },
    };
    Ok(stored)
}

/// `validateV1EventSeries`: a series counts at least 2 and has its last observed time.
fn series_causes(stored: &Value) -> Vec<(String, String)> {
    let Some(series) = stored.get("series").filter(|s| !s.is_null()) else {
        return Vec::new();
    };
    let mut causes = Vec::new();
    if series.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
        causes.push((
            "series.count".into(),
            "Invalid value: \"\": should be at least 2".into(),
        ));
    }
    if series.get("lastObservedTime").is_none_or(Value::is_null) {
        causes.push(("series.lastObservedTime".into(), "Required value".into()));
    }
    causes
}

/// The stricter rules of a create in this version (`ValidateEventCreate`), after the ones
/// every Event meets; `stored` is the body in core/v1's shape, `kind` core/v1's Event (the
/// real server names the internal kind, without a group).
pub fn check_create(
    kind: &ResourceKind,
    name: &str,
    namespace: &str,
    stored: &Value,
) -> Result<(), ApiError> {
    let mut causes = super::validation::event_causes(namespace, stored, "reportingController");
    causes.extend(super::validation::metadata_causes(kind, name, stored, true));
    causes.extend(series_causes(stored));
    if stored.get("eventTime").is_none_or(Value::is_null) {
        causes.push(("eventTime".into(), "Required value".into()));
    }
    let kind_of = stored.get("type").and_then(Value::as_str).unwrap_or("");
    if kind_of != "Normal" && kind_of != "Warning" {
        causes.push((
            "type".into(),
            format!("Invalid value: \"\": has invalid value: {kind_of}"),
        ));
    }
    for field in ["firstTimestamp", "lastTimestamp"] {
        if stored
            .get(field)
            .is_some_and(|v| !v.is_null() && !super::events::is_zero_time(v))
        {
            causes.push((
                field.into(),
                "Invalid value: \"\": needs to be unset".into(),
            ));
        }
    }
    if !empty(stored.get("count")) {
        causes.push((
            "count".into(),
            "Invalid value: \"\": needs to be unset".into(),
        ));
    }
    if ["component", "host"]
        .iter()
        .any(|f| !empty(stored.get("source").and_then(|s| s.get(*f))))
    {
        causes.push((
            "source".into(),
            "Invalid value: \"\": needs to be unset".into(),
        ));
    }
    super::validation::refuse(kind, name, &causes)
}

/// The stricter rules of an update in this version (`ValidateEventUpdate`): a changed series
/// is checked again, and every field but the series, the metadata and the deprecated
/// timestamps' … is immutable (`reason` is checked twice upstream, so it is reported twice).
pub fn check_update(
    kind: &ResourceKind,
    name: &str,
    namespace: &str,
    stored: &Value,
    old: &Value,
) -> Result<(), ApiError> {
    let mut causes = super::validation::event_causes(namespace, stored, "reportingController");
    if stored.get("series") != old.get("series") {
        causes.extend(series_causes(stored));
    }
    for field in [
        "involvedObject",
        "reason",
        "message",
        "source",
        "firstTimestamp",
        "lastTimestamp",
        "count",
        "reason",
        "type",
        "eventTime",
        "action",
        "related",
        "reportingComponent",
        "reportingInstance",
    ] {
        let (new, before) = (
            go_value(field, stored.get(field)),
            go_value(field, old.get(field)),
        );
        if new != before {
            let shown = if field == "reportingComponent" {
                "reportingController"
            } else {
                field
            };
            causes.push((
                shown.into(),
                format!("Invalid value: {new}: field is immutable"),
            ));
        }
    }
    super::validation::refuse(kind, name, &causes)
}

/// A field's value as the real server prints it in a "field is immutable" cause: strings
/// quoted, numbers bare, times as Go's `Time.String`, and the internal structs (which carry
/// no JSON tags) as JSON with Go's field names, every field present.
fn go_value(field: &str, value: Option<&Value>) -> String {
    let text = |v: Option<&Value>, key: &str| {
        v.and_then(|v| v.get(key))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    match field {
        "involvedObject" | "related" => {
            if field == "related" && value.is_none_or(Value::is_null) {
                return "null".into();
            }
            let mut out = Map::new();
            for (go, key) in [
                ("Kind", "kind"),
                ("Namespace", "namespace"),
                ("Name", "name"),
                ("UID", "uid"),
                ("APIVersion", "apiVersion"),
                ("ResourceVersion", "resourceVersion"),
                ("FieldPath", "fieldPath"),
            ] {
                out.insert(go.into(), json!(text(value, key)));
            }
            Value::Object(out).to_string()
        }
        "source" => {
            json!({"Component": text(value, "component"), "Host": text(value, "host")}).to_string()
        }
        "firstTimestamp" | "lastTimestamp" | "eventTime" => {
            go_time(value.and_then(Value::as_str).unwrap_or(""))
        }
        "count" => value.and_then(Value::as_i64).unwrap_or(0).to_string(),
        _ => serde_json::to_string(value.and_then(Value::as_str).unwrap_or("")).unwrap_or_default(),
    }
}

/// An RFC 3339 UTC time as Go's `Time.String` prints it (`2026-01-01 00:00:00 +0000 UTC`,
/// trailing zeros of the fraction dropped); an empty or zero time is Go's zero time.
fn go_time(text: &str) -> String {
    let zero = "0001-01-01 00:00:00 +0000 UTC".to_string();
    let Some(body) = text.strip_suffix('Z') else {
        return zero;
    };
    let Some((date, clock)) = body.split_once('T') else {
        return zero;
    };
    let (seconds, fraction) = clock.split_once('.').unwrap_or((clock, ""));
    let fraction = fraction.trim_end_matches('0');
    if fraction.is_empty() {
        format!("{date} {seconds} +0000 UTC")
    } else {
        format!("{date} {seconds}.{fraction} +0000 UTC")
    }
}

/// An error of a store operation on the stored Events, as the real server words it for a
/// request in this version: NotFound, AlreadyExists and Conflict name the resource with its
/// group; validation errors name the internal kind and stay as they are.
pub fn regroup(mut error: ApiError) -> ApiError {
    let plain = error.details.get("kind").is_some_and(|k| k == "events")
        && error.details.get("group").is_none();
    if plain && error.code != 422 {
        error.message = error
            .message
            .replacen("events \"", "events.events.k8s.io \"", 1);
        if let Some(details) = error.details.as_object_mut() {
            details.insert("group".into(), json!(GROUP));
        }
    }
    error
}

/// An answer's JSON in this version: an Event, an EventList's items, a table's embedded
/// objects; a `Status` of a delete names the group. Anything else is left as it is.
pub fn answer(mut value: Value) -> Value {
    match value.get("kind").and_then(Value::as_str) {
        Some("Event") => to_v1(&value, false),
        Some("EventList") => {
            value["apiVersion"] = json!(API_VERSION);
            if let Some(items) = value.get_mut("items").and_then(Value::as_array_mut) {
                for item in items {
                    *item = to_v1(item, true);
                }
            }
            value
        }
        Some("Table") => {
            if let Some(rows) = value.get_mut("rows").and_then(Value::as_array_mut) {
                for row in rows {
                    if row["object"]["kind"] == "Event" {
                        row["object"] = to_v1(&row["object"], false);
                    }
                }
            }
            value
        }
        Some("Status") if value["status"] == "Success" => {
            if value["details"]["kind"] == "events" {
                value["details"]["group"] = json!(GROUP);
            }
            value
        }
        _ => value,
    }
}

/// A watch line in this version: the event's object converted (a bookmark only relabelled,
/// an error left as it is).
pub fn watch_line(line: &[u8]) -> Option<Vec<u8>> {
    let mut event: Value = serde_json::from_slice(line).ok()?;
    let bookmark = event["type"] == "BOOKMARK";
    let object = event.get_mut("object")?;
    if bookmark {
        object["apiVersion"] = json!(API_VERSION);
    } else if object["kind"] == "Event" {
        *object = to_v1(object, false);
    } else {
        return None;
    }
    let mut out = serde_json::to_vec(&event).ok()?;
    out.push(b'\n');
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_event_converts_both_ways_with_the_real_servers_field_names() {
        let stored = json!({"kind": "Event", "apiVersion": "v1", "metadata": {"name": "b.1"},
            "involvedObject": {"kind": "ConfigMap", "name": "a", "namespace": "t1"},
            "reason": "Old", "message": "m", "source": {"component": "c"},
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z",
            "count": 3, "eventTime": null, "reportingComponent": "", "reportingInstance": ""});
        // As kube-apiserver v1.36.3 answered a list of events.k8s.io/v1 for this object.
        let v1 = to_v1(&stored, true);
        assert_eq!(
            v1,
            json!({"metadata": {"name": "b.1"}, "eventTime": null, "reason": "Old",
                "regarding": {"kind": "ConfigMap", "name": "a", "namespace": "t1"}, "note": "m",
                "deprecatedSource": {"component": "c"},
                "deprecatedFirstTimestamp": "2026-01-01T00:00:00Z",
                "deprecatedLastTimestamp": "2026-01-01T00:00:00Z", "deprecatedCount": 3})
        );
        let keys: Vec<&String> = v1.as_object().unwrap().keys().collect();
        assert_eq!(keys[..3], ["metadata", "eventTime", "reason"]);
        let back = to_stored(&to_v1(&stored, false)).unwrap();
        assert_eq!(back["involvedObject"], stored["involvedObject"]);
        assert_eq!(back["message"], "m");
        assert_eq!(back["count"], 3);
        let wrong = to_stored(&json!({"apiVersion": "v1", "kind": "Event"})).unwrap_err();
        assert_eq!(wrong.code, 400);
        assert!(wrong
            .message
            .contains("(v1) does not match the expected API version (events.k8s.io/v1)"));
    }

    #[test]
    fn field_selectors_translate_regarding_and_refuse_what_v1_does_not_select_by() {
        assert_eq!(
            field_label("regarding.name").unwrap(),
            "involvedObject.name"
        );
        assert_eq!(
            field_label("reportingController").unwrap(),
            "reportingComponent"
        );
        assert_eq!(field_label("reason").unwrap(), "reason");
        for refused in [
            "involvedObject.name",
            "source",
            "note",
            "message",
            "action",
            "reportingComponent",
        ] {
            assert_eq!(
                field_label(refused).unwrap_err(),
                format!("field label not supported: {refused}")
            );
        }
    }

    #[test]
    fn immutable_fields_print_as_go_prints_them() {
        let reference = json!({"kind": "ConfigMap", "namespace": "t1", "name": "b"});
        assert_eq!(
            go_value("involvedObject", Some(&reference)),
            r#"{"Kind":"ConfigMap","Namespace":"t1","Name":"b","UID":"","APIVersion":"","ResourceVersion":"","FieldPath":""}"#
        );
        assert_eq!(go_value("reason", Some(&json!("Tested2"))), "\"Tested2\"");
        assert_eq!(
            go_time("2026-01-01T00:00:01.500000Z"),
            "2026-01-01 00:00:01.5 +0000 UTC"
        );
        assert_eq!(go_time(""), "0001-01-01 00:00:00 +0000 UTC");
    }
}
