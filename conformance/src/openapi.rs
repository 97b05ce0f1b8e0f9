//! The OpenAPI documents the simulated API server serves are the real kube-apiserver's,
//! cut down to the types the simulator serves: this module does the cutting, and the
//! kubectl suite records the result into `fixtures/openapi/` (`ORRERY_RECORD=1`) or checks
//! the committed files against the real server.

use std::collections::{BTreeSet, VecDeque};

use serde_json::{Map, Value};

/// `(group, version, kind)` of a served type.
pub type Gvk = (String, String, String);

/// The served types' `(group, version, kind)`, list kinds included.
pub fn served(kinds: &[orrery_sim::world::apiserver::resources::ResourceKind]) -> Vec<Gvk> {
    kinds
        .iter()
        .flat_map(|k| {
            [k.kind.clone(), format!("{}List", k.kind)]
                .map(|kind| (k.group.clone(), k.version.clone(), kind))
        })
        .collect()
}

fn gvk_of(extension: &Value) -> Option<Gvk> {
    Some((
        extension.get("group")?.as_str()?.to_string(),
        extension.get("version")?.as_str()?.to_string(),
        extension.get("kind")?.as_str()?.to_string(),
    ))
}

/// Whether a path item has an operation for one of `served` (its GVK extension).
fn serves(item: &Value, extension: &str, served: &[Gvk]) -> bool {
    item.as_object().is_some_and(|ops| {
        ops.values()
            .filter_map(|op| op.get(extension))
            .filter_map(gvk_of)
            .any(|gvk| served.contains(&gvk))
    })
}

/// Every `$ref` under `value`, as the name after `prefix`.
fn refs(value: &Value, prefix: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v.as_str()) {
                    ("$ref", Some(target)) => {
                        if let Some(name) = target.strip_prefix(prefix) {
                            out.push(name.to_string());
                        }
                    }
                    _ => refs(v, prefix, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, prefix, out)),
        _ => {}
    }
}

/// The named schemas reachable from `roots` through `$ref`s, in name order.
fn closure(schemas: &Map<String, Value>, roots: Vec<String>, prefix: &str) -> Map<String, Value> {
    let mut seen = BTreeSet::new();
    let mut queue: VecDeque<String> = roots.into();
    while let Some(name) = queue.pop_front() {
        if !seen.insert(name.clone()) {
            continue;
        }
        if let Some(schema) = schemas.get(&name) {
            let mut found = Vec::new();
            refs(schema, prefix, &mut found);
            queue.extend(found);
        }
    }
    seen.into_iter()
        .filter_map(|name| schemas.get(&name).map(|s| (name, s.clone())))
        .collect()
}

/// `document` with only the paths of `served` types and the named schemas they reach:
/// those under `schemas` (a JSON pointer), which `$ref`s name after `prefix`.
fn cut(document: &Value, served: &[Gvk], schemas: &str, prefix: &str) -> Value {
    let paths: Map<String, Value> = document["paths"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, item)| serves(item, "x-kubernetes-group-version-kind", served))
        .map(|(path, item)| (path.clone(), item.clone()))
        .collect();
    let mut roots = Vec::new();
    refs(&Value::Object(paths.clone()), prefix, &mut roots);
    let empty = Map::new();
    let named = document
        .pointer(schemas)
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let kept = closure(named, roots, prefix);
    let mut out = document.clone();
    out["paths"] = Value::Object(paths);
    if let Some(slot) = out.pointer_mut(schemas) {
        *slot = Value::Object(kept);
    }
    out
}

/// A group version's OpenAPI v3 document cut to the served types.
pub fn cut_v3(document: &Value, served: &[Gvk]) -> Value {
    cut(
        document,
        served,
        "/components/schemas",
        "#/components/schemas/",
    )
}

/// The OpenAPI v2 document cut to the served types.
pub fn cut_v2(document: &Value, served: &[Gvk]) -> Value {
    cut(document, served, "/definitions", "#/definitions/")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_served_paths_and_the_schemas_they_reach_are_kept() {
        let gvk = json!({"group": "", "version": "v1", "kind": "ConfigMap"});
        let document = json!({
            "paths": {
                "/api/v1/configmaps": {"get": {"x-kubernetes-group-version-kind": gvk,
                    "responses": {"200": {"$ref": "#/components/schemas/CM"}}}},
                "/api/v1/pods": {"get": {"x-kubernetes-group-version-kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "responses": {"200": {"$ref": "#/components/schemas/Pod"}}}},
            },
            "components": {"schemas": {
                "CM": {"properties": {"metadata": {"$ref": "#/components/schemas/Meta"}}},
                "Meta": {"type": "object"},
                "Pod": {"type": "object"},
            }},
        });
        let served = vec![("".to_string(), "v1".to_string(), "ConfigMap".to_string())];
        let cut = cut_v3(&document, &served);
        assert_eq!(cut["paths"].as_object().unwrap().len(), 1);
        let names: Vec<&String> = cut["components"]["schemas"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(names, ["CM", "Meta"]);
    }
}
