//! The `scale` subresource of a custom resource whose CRD declares one (the Rollout's):
//! `GET`, `PUT` and `PATCH` of `…/<name>/scale` read and write an `autoscaling/v1 Scale`
//! made from the object's fields, as apiextensions-apiserver's `scaleFromCustomResource`
//! and `scaleUpdatedObjectInfo` do — what `kubectl scale` and a HorizontalPodAutoscaler use.
//!
//! - read: `spec.replicas` from `specReplicasPath` (0, and so omitted, when absent),
//!   `status.replicas` from `statusReplicasPath` (0 when absent), `status.selector` from
//!   `labelSelectorPath` (omitted when empty); metadata is the object's name, namespace, uid,
//!   resourceVersion and creationTimestamp;
//! - write: `spec.replicas` must be ≥ 0 (422 on the object, naming `specReplicasPath`, as
//!   the CRD's validation words it); it is written to
//!   `specReplicasPath` as an update of the object, with the Scale's resourceVersion, when it
//!   has one, as the precondition (409 when stale). A patch applies to the Scale first.

use std::sync::Arc;

use orrery_system::core::json::{get_keys, set_keys};
use serde_json::{json, Map, Value};

use super::error::ApiError;
use super::resources::{Details, ResourceKind, ScalePaths};

/// `autoscaling/v1 Scale`, for decoding and error wording.
pub fn kind() -> ResourceKind {
    ResourceKind {
        group: "autoscaling".into(),
        version: "v1".into(),
        kind: "Scale".into(),
        plural: "scales".into(),
        namespaced: true,
        status_subresource: false,
        scale: None,
        custom: false,
        has_generation: false,
        details: Arc::new(Details::default()),
    }
}

/// The Scale of `object`.
pub fn of(object: &Value, paths: &ScalePaths) -> Value {
    let number = |path: &[String]| get_keys(object, path).and_then(Value::as_i64).unwrap_or(0);
    let mut metadata = Map::new();
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(value) = object["metadata"].get(field) {
            metadata.insert(field.into(), value.clone());
        }
    }
    let mut spec = Map::new();
    let replicas = number(&paths.spec_replicas);
    if replicas != 0 {
        spec.insert("replicas".into(), json!(replicas));
    }
    let mut status = Map::new();
    status.insert("replicas".into(), json!(number(&paths.status_replicas)));
    if let Some(selector) = paths
        .label_selector
        .as_deref()
        .and_then(|path| get_keys(object, path))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        status.insert("selector".into(), json!(selector));
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    })
}

/// What a written Scale asks of the object of type `object_kind`: a merge patch that sets
/// `specReplicasPath` (and carries the Scale's resourceVersion as a precondition), or 422
/// for negative replicas.
pub fn update(
    object_kind: &ResourceKind,
    name: &str,
    scale: &Value,
    paths: &ScalePaths,
) -> Result<Value, ApiError> {
    let replicas = match &scale["spec"]["replicas"] {
        Value::Null => 0,
        value => value.as_i64().ok_or_else(|| {
            ApiError::bad_request(&format!(
                "Scale in version \"v1\" cannot be handled as a Scale: spec.replicas: {value} is not an integer"
            ))
        })?,
    };
    if replicas < 0 {
        return Err(ApiError::invalid_causes(
            object_kind,
            name,
            &[(
                format!(".{}", paths.spec_replicas.join(".")),
                format!("Invalid value: {replicas}: should be a non-negative integer"),
            )],
        ));
    }
    let mut patch = json!({});
    set_keys(&mut patch, &paths.spec_replicas, &json!(replicas))
        .expect("an empty object takes any path of keys");
    if let Some(rv) = scale["metadata"]["resourceVersion"]
        .as_str()
        .filter(|rv| !rv.is_empty())
    {
        patch["metadata"] = json!({"resourceVersion": rv});
    }
    Ok(patch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rollout() -> ResourceKind {
        crate::scenario::kinds::registry()
            .into_iter()
            .find(|k| k.plural == "rollouts")
            .expect("the Rollout CRD")
    }

    fn paths() -> ScalePaths {
        let path = |p: &str| p.split('.').map(str::to_string).collect::<Vec<_>>();
        ScalePaths {
            spec_replicas: path("spec.replicas"),
            status_replicas: path("status.HPAReplicas"),
            label_selector: Some(path("status.selector")),
        }
    }

    #[test]
    fn a_scale_reads_the_crds_paths_and_omits_what_go_omits() {
        let rollout = json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
            "metadata": {"name": "web", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
                         "generation": 2, "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"a": "b"}},
            "spec": {"replicas": 4},
            "status": {"HPAReplicas": 3, "selector": "app=web"},
        });
        assert_eq!(
            of(&rollout, &paths()),
            json!({"kind": "Scale", "apiVersion": "autoscaling/v1",
                   "metadata": {"name": "web", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
                                "creationTimestamp": "2026-01-01T00:00:00Z"},
                   "spec": {"replicas": 4}, "status": {"replicas": 3, "selector": "app=web"}})
        );
        let bare = json!({"metadata": {"name": "web"}, "spec": {}});
        assert_eq!(
            of(&bare, &paths())["spec"],
            json!({}),
            "replicas 0 is omitted"
        );
        assert_eq!(of(&bare, &paths())["status"], json!({"replicas": 0}));
    }

    #[test]
    fn a_written_scale_sets_the_spec_path_with_its_resource_version_as_precondition() {
        let scale =
            json!({"metadata": {"name": "web", "resourceVersion": "9"}, "spec": {"replicas": 5}});
        assert_eq!(
            update(&rollout(), "web", &scale, &paths()).unwrap(),
            json!({"spec": {"replicas": 5}, "metadata": {"resourceVersion": "9"}})
        );
        let unconditional = json!({"spec": {"replicas": 2}});
        assert_eq!(
            update(&rollout(), "web", &unconditional, &paths()).unwrap(),
            json!({"spec": {"replicas": 2}})
        );
        let negative = update(
            &rollout(),
            "web",
            &json!({"spec": {"replicas": -1}}),
            &paths(),
        )
        .unwrap_err();
        assert_eq!(negative.code, 422);
        assert_eq!(
            negative.message,
            "Rollout.argoproj.io \"web\" is invalid: .spec.replicas: Invalid value: -1: should be a non-negative integer"
        );
        assert_eq!(
            update(
                &rollout(),
                "web",
                &json!({"spec": {"replicas": "x"}}),
                &paths()
            )
            .unwrap_err()
            .code,
            400
        );
    }
}
