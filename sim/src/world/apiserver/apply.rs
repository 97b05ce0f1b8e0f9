//! Server-side apply, simplified.
//!
//! Fidelity gap, on purpose: ownership is tracked per *field path two levels deep*
//! (`spec.replicas`, `data.key`, `metadata.labels.app`), not per leaf as kube-apiserver's
//! structured-merge-diff does, and only `Apply` operations record ownership (PUT/PATCH
//! managers are not tracked). What is reproduced: create-if-missing, 409 listing the
//! conflicting fields and their manager unless `force=true`, ownership moving on force,
//! fields dropped from a manager's apply being removed when nobody else owns them, and
//! `metadata.managedFields` in the real `FieldsV1` shape, with each manager's `time` set
//! only when its apply changed the object and entries sorted as upstream sorts them.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use super::error::ApiError;
use super::mergepatch::merge_patch;
use super::resources::ResourceKind;
use orrery_system::core::json::Pointer as _;

/// Field paths (two levels) an applied body sets.
fn paths(applied: &Value, kind: &ResourceKind) -> BTreeSet<Vec<String>> {
    let mut out = BTreeSet::new();
    let Some(map) = applied.as_object() else {
        return out;
    };
    for (top, value) in map {
        match top.as_str() {
            "apiVersion" | "kind" => {}
            "status" if kind.status_subresource => {}
            "metadata" => {
                for section in ["labels", "annotations"] {
                    if let Some(entries) = value.get(section).and_then(Value::as_object) {
                        for key in entries.keys() {
                            out.insert(vec!["metadata".into(), section.into(), key.clone()]);
                        }
                    }
                }
            }
            _ => match value.as_object() {
                Some(inner) if !inner.is_empty() => {
                    for key in inner.keys() {
                        out.insert(vec![top.clone(), key.clone()]);
                    }
                }
                _ => {
                    out.insert(vec![top.clone()]);
                }
            },
        }
    }
    out
}

fn get_path<'a>(object: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(object, |v, segment| v.get(segment))
}

fn remove_path(object: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cursor = object;
    for segment in parents {
        match cursor.get_mut(segment) {
            Some(next) => cursor = next,
            None => return,
        }
    }
    if let Some(map) = cursor.as_object_mut() {
        map.remove(last);
    }
}

/// A manager's owned field paths and the time of its last apply that changed the object.
/// One manager's owned field paths and the time of its last change.
type Ownership = (BTreeSet<Vec<String>>, Option<String>);
type Owners = BTreeMap<String, Ownership>;

/// Reads `metadata.managedFields` into manager → (owned paths, time).
fn owners(object: &Value) -> Owners {
    fn walk(value: &Value, prefix: &mut Vec<String>, out: &mut BTreeSet<Vec<String>>) {
        let Some(map) = value.as_object() else { return };
        if map.is_empty() && !prefix.is_empty() {
            out.insert(prefix.clone());
        }
        for (key, child) in map {
            if let Some(name) = key.strip_prefix("f:") {
                prefix.push(name.to_string());
                walk(child, prefix, out);
                prefix.pop();
            }
        }
    }
    let mut result = BTreeMap::new();
    for entry in object
        .at("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if entry.get("operation").and_then(Value::as_str) != Some("Apply") {
            continue;
        }
        let Some(manager) = entry.get("manager").and_then(Value::as_str) else {
            continue;
        };
        let mut owned = BTreeSet::new();
        if let Some(fields) = entry.get("fieldsV1") {
            walk(fields, &mut Vec::new(), &mut owned);
        }
        let time = entry
            .get("time")
            .and_then(Value::as_str)
            .map(str::to_string);
        result.insert(manager.to_string(), (owned, time));
    }
    result
}

fn render_owners(owners: &Owners, api_version: &str) -> Value {
    // Upstream sorts entries by operation, then time (an entry without one first), then manager.
    let mut sorted: Vec<(&String, &Ownership)> = owners
        .iter()
        .filter(|(_, (paths, _))| !paths.is_empty())
        .collect();
    sorted.sort_by(|(m1, (_, t1)), (m2, (_, t2))| t1.cmp(t2).then(m1.cmp(m2)));
    let entries: Vec<Value> = sorted
        .into_iter()
        .map(|(manager, (paths, time))| {
            let mut fields = Value::Object(Map::new());
            for path in paths {
                let mut cursor = &mut fields;
                for segment in path {
                    cursor = cursor
                        .as_object_mut()
                        .expect("fieldsV1 nodes are objects")
                        .entry(format!("f:{segment}"))
                        .or_insert_with(|| json!({}));
                }
            }
            let mut entry = json!({"manager": manager, "operation": "Apply", "apiVersion": api_version, "fieldsType": "FieldsV1", "fieldsV1": fields});
            if let Some(time) = time {
                entry["time"] = json!(time);
            }
            entry
        })
        .collect();
    Value::Array(entries)
}

fn without_managed_fields(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(meta) = copy.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.shift_remove("managedFields");
    }
    copy
}

/// Records `manager` as owner of everything `applied` sets (used when apply creates, at `time`).
pub fn record_owner(
    object: &mut Value,
    applied: &Value,
    manager: &str,
    kind: &ResourceKind,
    time: &str,
) {
    let mut map = BTreeMap::new();
    map.insert(
        manager.to_string(),
        (paths(applied, kind), Some(time.to_string())),
    );
    let rendered = render_owners(&map, &kind.api_version());
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("managedFields".into(), rendered);
    }
}

/// Applies `applied` as `manager` onto `current` at `time`; returns the new body or a 409 conflict.
pub fn apply(
    current: &Value,
    applied: &Value,
    manager: &str,
    force: bool,
    kind: &ResourceKind,
    time: &str,
) -> Result<Value, ApiError> {
    let mut owners = owners(current);
    let wanted = paths(applied, kind);
    let mut conflicts = Vec::new();
    for (other, (owned, _)) in &owners {
        if other == manager {
            continue;
        }
        for path in owned.intersection(&wanted) {
            if get_path(current, path) != get_path(applied, path) {
                conflicts.push((other.clone(), path.join(".")));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(ApiError::apply_conflict(&conflicts));
    }
    let mut next = current.clone();
    // Fields this manager applied before but no longer applies are removed, unless shared.
    let (previously, previous_time) = owners.remove(manager).unwrap_or_default();
    for path in previously.difference(&wanted) {
        if !owners.values().any(|(o, _)| o.contains(path)) {
            remove_path(&mut next, path);
        }
    }
    let mut patch = applied.clone();
    if let Some(meta) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.retain(|k, _| k == "labels" || k == "annotations");
    }
    merge_patch(&mut next, &patch);
    if force {
        for (owned, _) in owners.values_mut() {
            owned.retain(|p| !wanted.contains(p));
        }
    }
    let changed = without_managed_fields(&next) != without_managed_fields(current);
    owners.insert(
        manager.to_string(),
        (
            wanted,
            if changed {
                Some(time.to_string())
            } else {
                previous_time
            },
        ),
    );
    next["metadata"]["managedFields"] = render_owners(&owners, &kind.api_version());
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::apiserver::resources::registry;

    const T: &str = "2026-01-01T00:00:01Z";

    fn cm() -> ResourceKind {
        registry()
            .into_iter()
            .find(|k| k.plural == "configmaps")
            .unwrap()
    }

    #[test]
    fn a_second_manager_conflicts_unless_forced() {
        let kind = cm();
        let mut object = json!({"metadata": {"name": "c"}, "data": {"a": "1"}});
        let applied = object.clone();
        record_owner(
            &mut object,
            &applied,
            "alice",
            &kind,
            "2026-01-01T00:00:00Z",
        );
        let err = apply(
            &object,
            &json!({"data": {"a": "2"}}),
            "bob",
            false,
            &kind,
            T,
        )
        .unwrap_err();
        assert_eq!(err.code, 409);
        assert!(
            err.message.contains("\"alice\": .data.a"),
            "{}",
            err.message
        );
        let forced = apply(&object, &json!({"data": {"a": "2"}}), "bob", true, &kind, T).unwrap();
        assert_eq!(forced["data"]["a"], "2");
        assert_eq!(owners(&forced)["bob"].0.len(), 1);
        assert!(
            !owners(&forced).contains_key("alice"),
            "alice lost her only field"
        );
    }

    #[test]
    fn same_value_is_shared_not_a_conflict_and_dropped_fields_are_removed() {
        let kind = cm();
        let mut object = json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}});
        let applied = object.clone();
        record_owner(
            &mut object,
            &applied,
            "alice",
            &kind,
            "2026-01-01T00:00:00Z",
        );
        let shared = apply(
            &object,
            &json!({"data": {"a": "1"}}),
            "bob",
            false,
            &kind,
            T,
        )
        .unwrap();
        let dropped = apply(
            &shared,
            &json!({"data": {"a": "1"}}),
            "alice",
            false,
            &kind,
            T,
        )
        .unwrap();
        assert_eq!(
            dropped["data"],
            json!({"a": "1"}),
            "alice stopped applying b"
        );
    }
}
