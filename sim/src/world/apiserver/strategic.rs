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
pub fn apply(
    target: &mut Value,
    patch: &Value,
    schema: Option<Schema<'_>>,
) -> Result<(), ApiError> {
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
    // Special elements first (`mergeSliceWithSpecialElements`): `{"$patch": "replace"}`
    // makes the list the patch's other elements; `merge` is not allowed in a list.
    let directive = |e: &Value| e.get("$patch").and_then(Value::as_str).map(str::to_string);
    if patch
        .iter()
        .any(|e| directive(e).as_deref() == Some("replace"))
    {
        *target = patch
            .iter()
            .filter(|e| directive(e).is_none())
            .map(strip)
            .collect();
        return Ok(());
    }
    if patch
        .iter()
        .any(|e| directive(e).as_deref() == Some("merge"))
    {
        return Err(invalid(
            "merging lists cannot yet be specified in the patch",
        ));
    }
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
            return Err(invalid(&format!(
                "list merged by {merge_key:?} has a non-object element"
            )));
        };
        let Some(id) = element_map.get(merge_key) else {
            return Err(invalid(&format!(
                "map: {element} does not contain declared merge key: {merge_key}"
            )));
        };
        if element_map.get("$patch").and_then(Value::as_str) == Some("delete") {
            target.retain(|t| t.get(merge_key) != Some(id));
            continue;
        }
        let position = target.iter().position(|t| t.get(merge_key) == Some(id));
        match (position, element_map.get("$patch").and_then(Value::as_str)) {
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

fn reorder(list: &mut [Value], order: &[Value], merge_key: Option<&str>) {
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

/// A patch value without directives and without null members (a null deletes what is
/// not there: upstream's `discardNullValuesFromPatch`), as stored when it replaces or adds.
fn strip(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, v)| !k.starts_with('$') && !v.is_null())
                .map(|(k, v)| (k.clone(), strip(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::kinds::registry;
    use crate::world::apiserver::openapi::schema_of;
    use serde_json::json;

    fn schema(plural: &str) -> Option<Schema<'static>> {
        let kind = registry().into_iter().find(|k| k.plural == plural).unwrap();
        schema_of(&kind)
    }

    fn rs() -> Value {
        json!({"metadata": {"name": "rs", "finalizers": ["a"]},
               "spec": {"replicas": 1, "template": {"spec": {"containers": [
                   {"name": "c", "image": "i:1", "env": [{"name": "A", "value": "1"}]},
                   {"name": "d", "image": "j:1"}]}}}})
    }

    #[test]
    fn containers_merge_by_name_and_scalars_merge_as_a_json_merge_patch() {
        let mut object = rs();
        let patch = json!({"spec": {"replicas": 3, "template": {"spec": {"containers": [
            {"name": "c", "image": "i:2", "env": [{"name": "B", "value": "2"}]},
            {"name": "e", "image": "k:1"}]}}}});
        apply(&mut object, &patch, schema("replicasets")).unwrap();
        let containers = &object["spec"]["template"]["spec"]["containers"];
        assert_eq!(object["spec"]["replicas"], 3);
        assert_eq!(containers[0]["image"], "i:2");
        assert_eq!(
            containers[0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
        );
        assert_eq!(
            containers[1]["name"], "d",
            "a container the patch does not name is kept"
        );
        assert_eq!(containers[2]["name"], "e");
        // Without a schema (or for a list the schema does not mark), lists replace.
        let mut plain = rs();
        apply(&mut plain, &patch, None).unwrap();
        assert_eq!(
            plain["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn directives_delete_replace_reorder_and_drop_from_primitive_lists() {
        let mut object = rs();
        let patch = json!({
            "metadata": {"finalizers": ["b"], "$deleteFromPrimitiveList/finalizers": ["a"]},
            "spec": {"template": {"spec": {
                "containers": [{"name": "d", "$patch": "delete"}, {"name": "f", "image": "x"}],
                "$setElementOrder/containers": [{"name": "f"}, {"name": "c"}]}}}});
        apply(&mut object, &patch, schema("replicasets")).unwrap();
        assert_eq!(object["metadata"]["finalizers"], json!(["b"]));
        let names: Vec<&str> = object["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["f", "c"]);
        let mut replaced = rs();
        apply(
            &mut replaced,
            &json!({"spec": {"$patch": "replace", "replicas": 5}}),
            schema("replicasets"),
        )
        .unwrap();
        assert_eq!(replaced["spec"], json!({"replicas": 5}));
        let mut nulls = json!({"metadata": {"name": "c"}});
        apply(
            &mut nulls,
            &json!({"data": {"x": null, "y": "1"}}),
            schema("configmaps"),
        )
        .unwrap();
        assert_eq!(
            nulls["data"],
            json!({"y": "1"}),
            "nulls in a new map are dropped"
        );
        let mut replaced_list = rs();
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"$patch": "replace"}, {"name": "z", "image": "z"}]}}}});
        apply(&mut replaced_list, &patch, schema("replicasets")).unwrap();
        assert_eq!(
            replaced_list["spec"]["template"]["spec"]["containers"],
            json!([{"name": "z", "image": "z"}])
        );
        let mut merged_list = rs();
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"$patch": "merge"}]}}}});
        assert!(apply(&mut merged_list, &patch, schema("replicasets")).is_err());
        let mut retained = json!({"spec": {"a": 1, "b": 2}});
        apply(
            &mut retained,
            &json!({"spec": {"$retainKeys": ["b"], "b": 3}}),
            None,
        )
        .unwrap();
        assert_eq!(retained["spec"], json!({"b": 3}));
    }

    #[test]
    fn malformed_patches_are_refused_with_a_reason() {
        let mut object = rs();
        let no_key = json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}});
        let error = apply(&mut object, &no_key, schema("replicasets")).unwrap_err();
        assert_eq!(error.code, 400);
        assert!(error.message.contains("merge key"), "{}", error.message);
        assert!(apply(&mut object, &json!([1]), None).is_err());
        assert!(apply(&mut object, &json!({"$patch": "explode"}), None).is_err());
        assert!(schema("configmaps").is_some());
    }
}
