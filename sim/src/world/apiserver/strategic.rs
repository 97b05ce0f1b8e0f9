//! Strategic merge patch (`application/strategic-merge-patch+json`) for built-in types, as
//! `k8s.io/apimachinery/pkg/util/strategicpatch` applies it: maps merge like a JSON merge
//! patch, lists replace unless the schema marks them `merge` — lists of objects then merge
//! by their merge key, lists of scalars by value — and the directives `$patch`
//! (`replace`, `delete`, `merge`), `$deleteFromPrimitiveList/<field>`,
//! `$setElementOrder/<field>` and `$retainKeys` are honoured. The patch metadata comes
//! from the served OpenAPI schemas ([`super::openapi`]), the source kubectl computes its
//! patches from. Custom resources do not take it (415, as upstream).
//!
//! Known simplification: `$setElementOrder` puts the listed elements first in the given
//! order and keeps the rest after them in their old order (upstream interleaves them).

use serde_json::{Map, Value};

use super::error::ApiError;
use super::openapi::{PatchMeta, Schema};

const DELETE_FROM: &str = "$deleteFromPrimitiveList/";
const ORDER: &str = "$setElementOrder/";

fn invalid(message: &str) -> ApiError {
    ApiError::bad_request(&format!("invalid strategic merge patch: {message}"))
}

/// Applies `patch` to `target` under `schema` (the type's schema; `None` merges every list
/// by replacement, as for unknown fields).
pub fn apply(target: &mut Value, patch: &Value, schema: Option<Schema<'_>>) -> Result<(), ApiError> {
    let Some(patch) = patch.as_object() else {
        return Err(invalid("the patch must be a JSON object"));
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let map = target.as_object_mut().expect("made an object above");
    if merge_map(map, patch, schema)? == Outcome::Deleted {
        map.clear();
    }
    Ok(())
}

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Kept,
    Deleted,
}

fn merge_map(
    target: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    schema: Option<Schema<'_>>,
) -> Result<Outcome, ApiError> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("delete") => return Ok(Outcome::Deleted),
        Some("replace") => {
            target.clear();
            for (key, value) in patch.iter().filter(|(k, _)| *k != "$patch") {
                target.insert(key.clone(), strip(value));
            }
            return Ok(Outcome::Kept);
        }
        Some("merge") | None => {}
        Some(other) => return Err(invalid(&format!("unknown $patch directive {other:?}"))),
    }
    let mut orders: Vec<(&str, &Vec<Value>)> = Vec::new();
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix(DELETE_FROM) {
            let doomed = value
                .as_array()
                .ok_or_else(|| invalid(&format!("{key} must be a list")))?;
            if let Some(list) = target.get_mut(field).and_then(Value::as_array_mut) {
                list.retain(|v| !doomed.contains(v));
            }
            continue;
        }
        if let Some(field) = key.strip_prefix(ORDER) {
            let order = value
                .as_array()
                .ok_or_else(|| invalid(&format!("{key} must be a list")))?;
            orders.push((field, order));
            continue;
        }
        if key.starts_with('$') {
            continue; // $retainKeys is applied below; $patch was read above
        }
        let field = schema.and_then(|s| s.field(key));
        if value.is_null() {
            target.remove(key);
            continue;
        }
        match (target.get_mut(key), value) {
            (Some(Value::Object(existing)), Value::Object(patch_map)) => {
                if merge_map(existing, patch_map, field.map(|(s, _)| s))? == Outcome::Deleted {
                    target.remove(key);
                }
            }
            (Some(Value::Array(existing)), Value::Array(patch_list))
                if field.as_ref().is_some_and(|(_, meta)| meta.merges()) =>
            {
                let (schema, meta) = field.expect("checked above");
                merge_list(existing, patch_list, schema.items(), &meta)?;
            }
            _ => {
                target.insert(key.clone(), strip(value));
            }
        }
    }
    for (field, order) in orders {
        let key = schema
            .and_then(|s| s.field(field))
            .and_then(|(_, meta)| meta.merge_key);
        if let Some(list) = target.get_mut(field).and_then(Value::as_array_mut) {
            reorder(list, order, key.as_deref());
        }
    }
    if let Some(retain) = patch.get("$retainKeys").and_then(Value::as_array) {
        target.retain(|key, _| retain.iter().any(|r| r == key));
    }
    Ok(Outcome::Kept)
}

fn merge_list(
    target: &mut Vec<Value>,
    patch: &[Value],
    items: Schema<'_>,
    meta: &PatchMeta,
) -> Result<(), ApiError> {
    let Some(merge_key) = meta.merge_key.as_deref() else {
        // A merged list of scalars: a union, in order.
        for value in patch {
            if !target.contains(value) {
                target.push(value.clone());
            }
        }
        return Ok(());
    };
    for element in patch {
        let Some(element_map) = element.as_object() else {
            return Err(invalid(&format!("list merged by {merge_key:?} has a non-object element")));
        };
        let Some(id) = element_map.get(merge_key) else {
            return Err(invalid(&format!("map: {element} does not contain declared merge key: {merge_key}")));
        };
        let position = target.iter().position(|t| t.get(merge_key) == Some(id));
        match (position, element_map.get("$patch").and_then(Value::as_str)) {
            (Some(at), Some("delete")) => {
                target.remove(at);
            }
            (None, Some("delete")) => {}
            (Some(at), _) => {
                let existing = target[at]
                    .as_object_mut()
                    .ok_or_else(|| invalid("a merged list holds a non-object element"))?;
                if merge_map(existing, element_map, Some(items))? == Outcome::Deleted {
                    target.remove(at);
                }
            }
            (None, _) => target.push(strip(element)),
        }
    }
    Ok(())
}

fn reorder(list: &mut Vec<Value>, order: &[Value], merge_key: Option<&str>) {
    let identity = |v: &Value| match merge_key {
        Some(key) => v.get(key).cloned().unwrap_or(Value::Null),
        None => v.clone(),
    };
    let rank = |v: &Value| {
        let id = identity(v);
        order
            .iter()
            .position(|o| identity(o) == id || *o == id)
            .unwrap_or(usize::MAX)
    };
    list.sort_by_key(rank); // stable: unlisted elements keep their order after the listed
}

/// A patch value without directives, as stored when it replaces or adds.
fn strip(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip).collect()),
        other => other.clone(),
    }
}
