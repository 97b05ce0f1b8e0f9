//! Discovery: the documents clients read to learn which types a server serves, in both
//! forms kube-apiserver v1.36 answers — aggregated (`apidiscovery.k8s.io/v2`, one request
//! for `/api` and one for `/apis`, what kubectl asks for first) and legacy (`/api`,
//! `/apis`, `/apis/<group>`, and one `APIResourceList` per group version). Shapes and
//! field order follow the real server's answers; `storageVersionHash` is left out (no
//! client here reads it) and only served subresources are listed: a Rollout's `scale` (its
//! CRD declares it) is, a ReplicaSet's is not.

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
    } else if super::store::is_namespace(kind) {
        // Namespaces take no deletecollection.
        json!(["create", "delete", "get", "list", "patch", "update", "watch"])
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

/// Kubernetes' version priority (`version.CompareKubeAwareVersionStrings`): GA before beta
/// before alpha, higher numbers first; other strings last, alphabetically.
fn version_priority(version: &str) -> (u8, std::cmp::Reverse<u64>, std::cmp::Reverse<u64>, String) {
    let parsed = version.strip_prefix('v').and_then(|rest| {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let major = digits.parse::<u64>().ok()?;
        match &rest[digits.len()..] {
            "" => Some((0, major, 0)),
            tail => {
                let (class, number) = if let Some(n) = tail.strip_prefix("beta") {
                    (1, n)
                } else {
                    (2, tail.strip_prefix("alpha")?)
                };
                Some((class, major, number.parse::<u64>().ok()?))
            }
        }
    });
    match parsed {
        Some((class, major, minor)) => (
            class,
            std::cmp::Reverse(major),
            std::cmp::Reverse(minor),
            String::new(),
        ),
        None => (
            3,
            std::cmp::Reverse(0),
            std::cmp::Reverse(0),
            version.to_string(),
        ),
    }
}

/// Groups in serving order — the core group (`""`) first, then named groups as registered —
/// each with its served versions, preferred (highest priority) first.
fn groups(kinds: &[ResourceKind]) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for kind in kinds {
        match groups.iter_mut().find(|(g, _)| *g == kind.group) {
            Some((_, versions)) if versions.contains(&kind.version) => {}
            Some((_, versions)) => versions.push(kind.version.clone()),
            None => groups.push((kind.group.clone(), vec![kind.version.clone()])),
        }
    }
    for (_, versions) in &mut groups {
        versions.sort_by_key(|v| version_priority(v));
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
    // apiextensions-apiserver's discovery controller: status, then scale.
    let mut subresources = Vec::new();
    if super::store::is_namespace(kind) {
        subresources.push(json!({
            "subresource": "finalize",
            "responseKind": response_kind,
            "verbs": ["update"],
        }));
    }
    if kind.status_subresource {
        subresources.push(json!({
            "subresource": "status",
            "responseKind": response_kind,
            "verbs": ["get", "patch", "update"],
        }));
    }
    if kind.scale.is_some() {
        subresources.push(json!({
            "subresource": "scale",
            "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "verbs": ["get", "patch", "update"],
        }));
    }
    if !subresources.is_empty() {
        resource["subresources"] = json!(subresources);
    }
    resource
}

/// `GET /api` or `GET /apis` in aggregated form: `core` picks the core group or the others.
pub fn aggregated(kinds: &[ResourceKind], core: bool) -> Value {
    let items: Vec<Value> = groups(kinds)
        .into_iter()
        .filter(|(group, _)| group.is_empty() == core)
        .map(|(group, versions)| {
            let metadata = if group.is_empty() {
                json!({})
            } else {
                json!({"name": group})
            };
            let versions: Vec<Value> = versions
                .iter()
                .map(|version| {
                    let resources: Vec<Value> = kinds_of(kinds, &group, version)
                        .map(aggregated_resource)
                        .collect();
                    json!({"version": version, "resources": resources, "freshness": "Current"})
                })
                .collect();
            json!({"metadata": metadata, "versions": versions})
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

/// A group as legacy discovery lists it: its versions, preferred first.
fn group_entry(group: &str, versions: &[String]) -> Value {
    let listed: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    let preferred = listed.first().cloned().unwrap_or(Value::Null);
    json!({"name": group, "versions": listed, "preferredVersion": preferred})
}

/// `GET /apis` (legacy): every named group.
pub fn group_list(kinds: &[ResourceKind]) -> Value {
    let groups: Vec<Value> = groups(kinds)
        .into_iter()
        .filter(|(group, _)| !group.is_empty())
        .map(|(group, versions)| group_entry(&group, &versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/<group>` (legacy), if the group is served.
pub fn group(kinds: &[ResourceKind], name: &str) -> Option<Value> {
    let (group, versions) = groups(kinds).into_iter().find(|(g, _)| g == name)?;
    let mut entry = group_entry(&group, &versions);
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
        // Sorted by name, as the discovery controller sorts them: `x/scale` before `x/status`.
        if kind.scale.is_some() {
            resources.push(json!({
                "name": format!("{}/scale", kind.plural),
                "singularName": "",
                "namespaced": kind.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
        if super::store::is_namespace(kind) {
            resources.push(json!({
                "name": "namespaces/finalize",
                "singularName": "",
                "namespaced": false,
                "kind": "Namespace",
                "verbs": ["update"],
            }));
        }
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
        assert_eq!(
            names,
            [
                "configmaps",
                "events",
                "namespaces",
                "persistentvolumeclaims",
                "persistentvolumes",
                "pods",
                "secrets"
            ]
        );
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
        assert_eq!(rollouts["subresources"][1]["subresource"], "scale");
        assert_eq!(
            rollouts["subresources"][1]["responseKind"],
            json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
        );
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

    #[test]
    fn a_group_with_two_versions_is_listed_once_with_the_higher_preferred() {
        let kinds = registry();
        let legacy = group(&kinds, "codefresh.io").expect("codefresh.io is served");
        let versions: Vec<&str> = legacy["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["version"].as_str().unwrap())
            .collect();
        assert_eq!(versions, ["v1beta2", "v1beta1"]);
        assert_eq!(
            legacy["preferredVersion"]["groupVersion"],
            "codefresh.io/v1beta2"
        );
        let apis = aggregated(&kinds, false);
        let codefresh: Vec<&Value> = apis["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|g| g["metadata"]["name"] == "codefresh.io")
            .collect();
        assert_eq!(codefresh.len(), 1, "one entry per group");
        assert_eq!(
            codefresh[0]["versions"][0]["resources"][0]["resource"],
            "products"
        );
        assert!(
            resource_list(&kinds, "codefresh.io", "v1beta1").unwrap()["resources"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r["name"] != "products")
        );
        let mut ordered = ["v1alpha1", "v2", "v1beta1", "v1", "v1beta2", "foo"].map(String::from);
        ordered.sort_by_key(|v| version_priority(v));
        assert_eq!(
            ordered,
            ["v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]
        );
    }
}
