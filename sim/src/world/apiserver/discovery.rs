//! Discovery: the documents clients read to learn which types a server serves, in both
//! forms kube-apiserver v1.36 answers — aggregated (`apidiscovery.k8s.io/v2`, one request
//! for `/api` and one for `/apis`, what kubectl asks for first) and legacy (`/api`,
//! `/apis`, `/apis/<group>`, and one `APIResourceList` per group version). Shapes and
//! field order follow the real server's answers; `storageVersionHash` is left out (no
//! client here reads it) and only served subresources are listed, so a ReplicaSet or
//! Rollout has no `scale` here.

use serde_json::{json, Value};

use super::resources::ResourceKind;

/// The media type of an aggregated discovery answer.
pub const AGGREGATED_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether an `Accept` header asks for aggregated discovery (v2; kubectl lists v2beta1
/// after it and plain JSON last).
pub fn wants_aggregated(accept: &str) -> bool {
    accept.split(',').any(|media| {
        let params: Vec<&str> = media.split(';').map(str::trim).collect();
        params.contains(&"g=apidiscovery.k8s.io")
            && params.contains(&"v=v2")
            && params.contains(&"as=APIGroupDiscoveryList")
    })
}

/// The verbs of a type, in the order the real server lists them (built-in types come from
/// the registry's sorted set; custom resources from the CRD handler's fixed list).
fn verbs(kind: &ResourceKind) -> Value {
    if kind.custom {
        json!([
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "create",
            "update",
            "watch"
        ])
    } else {
        json!([
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch"
        ])
    }
}

/// Groups in serving order: the core group (`""`) first, then named groups as registered.
fn groups(kinds: &[ResourceKind]) -> Vec<(String, String)> {
    let mut groups: Vec<(String, String)> = Vec::new();
    for kind in kinds {
        let entry = (kind.group.clone(), kind.version.clone());
        if !groups.contains(&entry) {
            groups.push(entry);
        }
    }
    groups
}

fn kinds_of<'a>(
    kinds: &'a [ResourceKind],
    group: &'a str,
    version: &'a str,
) -> impl Iterator<Item = &'a ResourceKind> {
    let mut of: Vec<&ResourceKind> = kinds
        .iter()
        .filter(|k| k.group == group && k.version == version)
        .collect();
    of.sort_by(|a, b| a.plural.cmp(&b.plural));
    of.into_iter()
}

fn scope(kind: &ResourceKind) -> &'static str {
    if kind.namespaced {
        "Namespaced"
    } else {
        "Cluster"
    }
}

/// One resource of an aggregated discovery version.
fn aggregated_resource(kind: &ResourceKind) -> Value {
    // Built-in types leave the response kind's group and version empty (the version's own).
    let (group, version) = if kind.custom {
        (kind.group.as_str(), kind.version.as_str())
    } else {
        ("", "")
    };
    let response_kind = json!({"group": group, "version": version, "kind": kind.kind});
    let mut resource = json!({
        "resource": kind.plural,
        "responseKind": response_kind,
        "scope": scope(kind),
        "singularResource": kind.details.singular,
        "verbs": verbs(kind),
    });
    if !kind.details.short_names.is_empty() {
        resource["shortNames"] = json!(kind.details.short_names);
    }
    if !kind.details.categories.is_empty() {
        resource["categories"] = json!(kind.details.categories);
    }
    if kind.status_subresource {
        resource["subresources"] = json!([{
            "subresource": "status",
            "responseKind": response_kind,
            "verbs": ["get", "patch", "update"],
        }]);
    }
    resource
}

/// `GET /api` or `GET /apis` in aggregated form: `core` picks the core group or the others.
pub fn aggregated(kinds: &[ResourceKind], core: bool) -> Value {
    let items: Vec<Value> = groups(kinds)
        .into_iter()
        .filter(|(group, _)| group.is_empty() == core)
        .map(|(group, version)| {
            let metadata = if group.is_empty() {
                json!({})
            } else {
                json!({"name": group})
            };
            let resources: Vec<Value> = kinds_of(kinds, &group, &version)
                .map(aggregated_resource)
                .collect();
            json!({
                "metadata": metadata,
                "versions": [{"version": version, "resources": resources, "freshness": "Current"}],
            })
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

/// `GET /api` (legacy): the core group's versions and the address clients reach it at.
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_entry(group: &str, version: &str) -> Value {
    let group_version = json!({"groupVersion": format!("{group}/{version}"), "version": version});
    json!({"name": group, "versions": [group_version], "preferredVersion": group_version})
}

/// `GET /apis` (legacy): every named group.
pub fn group_list(kinds: &[ResourceKind]) -> Value {
    let groups: Vec<Value> = groups(kinds)
        .into_iter()
        .filter(|(group, _)| !group.is_empty())
        .map(|(group, version)| group_entry(&group, &version))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/<group>` (legacy), if the group is served.
pub fn group(kinds: &[ResourceKind], name: &str) -> Option<Value> {
    let (group, version) = groups(kinds).into_iter().find(|(g, _)| g == name)?;
    let mut entry = group_entry(&group, &version);
    let fields = entry.as_object_mut()?;
    let mut out = serde_json::Map::new();
    out.insert("kind".into(), json!("APIGroup"));
    out.insert("apiVersion".into(), json!("v1"));
    out.append(fields);
    Some(Value::Object(out))
}

/// `GET /api/v1` or `GET /apis/<group>/<version>` (legacy), if served.
pub fn resource_list(kinds: &[ResourceKind], group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for kind in kinds_of(kinds, group, version) {
        let mut resource = json!({
            "name": kind.plural,
            "singularName": kind.details.singular,
            "namespaced": kind.namespaced,
            "kind": kind.kind,
            "verbs": verbs(kind),
        });
        if !kind.details.short_names.is_empty() {
            resource["shortNames"] = json!(kind.details.short_names);
        }
        if !kind.details.categories.is_empty() {
            resource["categories"] = json!(kind.details.categories);
        }
        resources.push(resource);
        if kind.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", kind.plural),
                "singularName": "",
                "namespaced": kind.namespaced,
                "kind": kind.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::kinds::registry;

    #[test]
    fn aggregated_discovery_lists_every_served_type_once_in_its_group() {
        let kinds = registry();
        let core = aggregated(&kinds, true);
        let core_resources = &core["items"][0]["versions"][0]["resources"];
        let names: Vec<&str> = core_resources
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["resource"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["configmaps", "secrets"]);
        assert_eq!(core_resources[0]["shortNames"], json!(["cm"]));
        assert_eq!(core["items"][0]["metadata"], json!({}));
        let apis = aggregated(&kinds, false);
        let argo = apis["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == "argoproj.io")
            .expect("the CRD group is discovered");
        let rollouts = argo["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "rollouts")
            .unwrap();
        assert_eq!(rollouts["responseKind"]["group"], "argoproj.io");
        assert_eq!(rollouts["subresources"][0]["subresource"], "status");
        assert!(wants_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
        ));
        assert!(!wants_aggregated("application/json"));
    }

    #[test]
    fn legacy_discovery_answers_groups_and_resource_lists() {
        let kinds = registry();
        let list = resource_list(&kinds, "apps", "v1").expect("apps/v1 is served");
        let names: Vec<&str> = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["replicasets", "replicasets/status"]);
        assert!(resource_list(&kinds, "batch", "v1").is_none());
        assert_eq!(group(&kinds, "argoproj.io").unwrap()["kind"], "APIGroup");
        assert!(group(&kinds, "batch").is_none());
        assert!(group_list(&kinds)["groups"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["name"] != ""));
    }
}
