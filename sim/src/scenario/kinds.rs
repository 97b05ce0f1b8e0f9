//! The resource types the simulated API server serves: a few built-in kinds and the
//! custom resources read from the fixture CRDs in `fixtures/crds/` (the same files are
//! applied to real clusters, so both worlds serve the same types). Part of the world's
//! configuration that scenarios name (`forbidden: [applications]`), so it lives with the
//! scenario model; the API server reads it (`world::apiserver::resources` re-exports it).

use std::sync::Arc;

use serde::Deserialize;

/// One servable resource type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceKind {
    /// API group; empty for the core group.
    pub group: String,
    /// Served version, e.g. `v1` or `v1alpha1`.
    pub version: String,
    /// `kind` as it appears in objects.
    pub kind: String,
    /// URL plural, e.g. `applications`.
    pub plural: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// With a status subresource, the main endpoint ignores `status` and `/status` writes
    /// it without bumping `metadata.generation`.
    pub status_subresource: bool,
    /// A CRD's `scale` subresource (`/scale` reads and writes an `autoscaling/v1 Scale`);
    /// `None`: not served (the built-in ReplicaSet's is not modelled).
    pub scale: Option<Arc<ScalePaths>>,
    /// Custom resources answer 422 to a PUT without `metadata.resourceVersion`.
    pub custom: bool,
    /// Whether objects carry `metadata.generation` (custom resources and workload types do;
    /// ConfigMaps, Secrets and Leases do not).
    pub has_generation: bool,
    /// What discovery and `kubectl get` show of the type (shared: kinds are cloned per request).
    pub details: Arc<Details>,
}

/// Where a custom resource keeps what its `scale` subresource shows (the CRD's
/// `subresources.scale`), as field paths: `.spec.replicas` → `["spec", "replicas"]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePaths {
    /// `specReplicasPath`: what `spec.replicas` of the Scale reads and writes.
    pub spec_replicas: Vec<String>,
    /// `statusReplicasPath`: what `status.replicas` reads (0 when absent).
    pub status_replicas: Vec<String>,
    /// `labelSelectorPath`: what `status.selector` reads, if set.
    pub label_selector: Option<Vec<String>>,
}

impl ScalePaths {
    /// Reads a CRD's `subresources.scale`; `None` when a path is missing or not `.a.b`.
    fn of(scale: &serde_json::Value) -> Option<ScalePaths> {
        let path = |key: &str| -> Option<Vec<String>> {
            let text = scale.get(key)?.as_str()?.strip_prefix('.')?;
            Some(text.split('.').map(str::to_string).collect())
        };
        Some(ScalePaths {
            spec_replicas: path("specReplicasPath")?,
            status_replicas: path("statusReplicasPath")?,
            label_selector: path("labelSelectorPath"),
        })
    }
}

/// The parts of a type only clients' discovery and table printing read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Details {
    /// `singularResource`, e.g. `configmap`.
    pub singular: String,
    /// Short names kubectl resolves (`cm`, `app`).
    pub short_names: Vec<String>,
    /// Categories (`all`).
    pub categories: Vec<String>,
    /// A CRD's `additionalPrinterColumns`; empty for built-in types, whose columns are fixed.
    pub printer_columns: Vec<PrinterColumn>,
}

/// One `additionalPrinterColumns` entry of a CRD version.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    #[serde(rename = "type")]
    pub column_type: String,
    /// A simple JSONPath (`.status.sync.status`).
    #[serde(rename = "jsonPath")]
    pub json_path: String,
    /// Shown only with `-o wide` when above 0.
    #[serde(default)]
    pub priority: i64,
    /// Column description; the server words a default when absent.
    #[serde(default)]
    pub description: Option<String>,
    /// OpenAPI format hint.
    #[serde(default)]
    pub format: Option<String>,
}

impl ResourceKind {
    /// `group/version`, or `version` for the core group, as in `apiVersion`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// A stable key naming the type in the store (`group/plural`).
    pub fn key(&self) -> String {
        format!("{}/{}", self.group, self.plural)
    }

    fn builtin(
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
        status: bool,
        has_generation: bool,
    ) -> Self {
        ResourceKind {
            details: Arc::new(Details {
                singular: kind.to_lowercase(),
                ..Details::default()
            }),
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced: true,
            status_subresource: status,
            scale: None,
            custom: false,
            has_generation,
        }
    }

    /// The type not in a namespace (`PersistentVolume`).
    fn cluster_scoped(mut self) -> Self {
        self.namespaced = false;
        self
    }

    /// The type with kubectl's short names and categories for it.
    fn named(mut self, short_names: &[&str], categories: &[&str]) -> Self {
        let details = Arc::make_mut(&mut self.details);
        details.short_names = short_names.iter().map(|s| s.to_string()).collect();
        details.categories = categories.iter().map(|s| s.to_string()).collect();
        self
    }
}

const FIXTURE_CRDS: [(&str, &str); 11] = [
    (
        "fixtures/crds/analysisrun.yaml",
        include_str!("../../../fixtures/crds/analysisrun.yaml"),
    ),
    (
        "fixtures/crds/application.yaml",
        include_str!("../../../fixtures/crds/application.yaml"),
    ),
    (
        "fixtures/crds/appproject.yaml",
        include_str!("../../../fixtures/crds/appproject.yaml"),
    ),
    (
        "fixtures/crds/product.yaml",
        include_str!("../../../fixtures/crds/product.yaml"),
    ),
    (
        "fixtures/crds/promotionflow.yaml",
        include_str!("../../../fixtures/crds/promotionflow.yaml"),
    ),
    (
        "fixtures/crds/promotionpolicy.yaml",
        include_str!("../../../fixtures/crds/promotionpolicy.yaml"),
    ),
    (
        "fixtures/crds/promotiontask.yaml",
        include_str!("../../../fixtures/crds/promotiontask.yaml"),
    ),
    (
        "fixtures/crds/promotiontemplate.yaml",
        include_str!("../../../fixtures/crds/promotiontemplate.yaml"),
    ),
    (
        "fixtures/crds/restrictedgitsource.yaml",
        include_str!("../../../fixtures/crds/restrictedgitsource.yaml"),
    ),
    (
        "fixtures/crds/rollout.yaml",
        include_str!("../../../fixtures/crds/rollout.yaml"),
    ),
    (
        "fixtures/crds/workflow.yaml",
        include_str!("../../../fixtures/crds/workflow.yaml"),
    ),
];

#[derive(Deserialize)]
struct Crd {
    spec: CrdSpec,
}

#[derive(Deserialize)]
struct CrdSpec {
    group: String,
    names: CrdNames,
    scope: String,
    versions: Vec<CrdVersion>,
}

#[derive(Deserialize)]
struct CrdNames {
    kind: String,
    plural: String,
    #[serde(default)]
    singular: Option<String>,
    #[serde(default, rename = "shortNames")]
    short_names: Vec<String>,
    #[serde(default)]
    categories: Vec<String>,
}

/// A CRD version is served unless it says otherwise.
fn served_default() -> bool {
    true
}

#[derive(Deserialize)]
struct CrdVersion {
    name: String,
    #[serde(default = "served_default")]
    served: bool,
    #[serde(default)]
    subresources: Option<serde_json::Value>,
    #[serde(default, rename = "additionalPrinterColumns")]
    printer_columns: Vec<PrinterColumn>,
}

/// All resource types: core `ConfigMap`, `Secret`, the cluster-scoped `Namespace`, `Event` (also
/// served as `events.k8s.io/v1`), `Pod`,
/// `PersistentVolumeClaim` (the Runner's builds; no kubelet runs them) and the cluster-scoped
/// `PersistentVolume` (bound by the dind volume provisioner, not by a controller manager),
/// `apps/v1 ReplicaSet`, `Lease`, and the fixture CRDs.
pub fn registry() -> Vec<ResourceKind> {
    let mut kinds = vec![
        ResourceKind::builtin("", "v1", "ConfigMap", "configmaps", false, false)
            .named(&["cm"], &[]),
        ResourceKind::builtin("", "v1", "Secret", "secrets", false, false),
        // Namespaces: their lifecycle (`Terminating`, the `finalize` subresource, the
        // lifecycle stand-in) is `world::apiserver::namespaces`.
        ResourceKind::builtin("", "v1", "Namespace", "namespaces", true, false)
            .named(&["ns"], &[])
            .cluster_scoped(),
        ResourceKind::builtin("", "v1", "Event", "events", false, false).named(&["ev"], &[]),
        // Pods carry metadata.generation since Kubernetes 1.33 (pod generation tracking).
        ResourceKind::builtin("", "v1", "Pod", "pods", true, true).named(&["po"], &["all"]),
        ResourceKind::builtin(
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            true,
            false,
        )
        .named(&["pvc"], &[]),
        // The dind volume provisioner's volumes (`runtime::runner::volumes`).
        ResourceKind::builtin(
            "",
            "v1",
            "PersistentVolume",
            "persistentvolumes",
            true,
            false,
        )
        .named(&["pv"], &[])
        .cluster_scoped(),
        ResourceKind::builtin("apps", "v1", "ReplicaSet", "replicasets", true, true)
            .named(&["rs"], &["all"]),
        // core/v1's Events in another version, from the same store
        // (`world::apiserver::events_v1`); registered where kube-apiserver lists the group.
        ResourceKind::builtin("events.k8s.io", "v1", "Event", "events", false, false)
            .named(&["ev"], &[]),
        ResourceKind::builtin("coordination.k8s.io", "v1", "Lease", "leases", false, false),
    ];
    for (path, text) in FIXTURE_CRDS {
        let crd: Crd = serde_saphyr::from_str(text)
            .unwrap_or_else(|e| panic!("{path}: invalid fixture CRD: {e}"));
        for version in crd.spec.versions.into_iter().filter(|v| v.served) {
            let status = version
                .subresources
                .as_ref()
                .and_then(|s| s.get("status"))
                .is_some();
            let scale = version
                .subresources
                .as_ref()
                .and_then(|s| s.get("scale"))
                .map(|s| {
                    ScalePaths::of(s).unwrap_or_else(|| {
                        panic!("{path}: subresources.scale needs specReplicasPath and statusReplicasPath as .a.b paths")
                    })
                })
                .map(Arc::new);
            kinds.push(ResourceKind {
                details: Arc::new(Details {
                    singular: crd
                        .spec
                        .names
                        .singular
                        .clone()
                        .unwrap_or_else(|| crd.spec.names.kind.to_lowercase()),
                    short_names: crd.spec.names.short_names.clone(),
                    categories: crd.spec.names.categories.clone(),
                    printer_columns: version.printer_columns,
                }),
                group: crd.spec.group.clone(),
                version: version.name,
                kind: crd.spec.names.kind.clone(),
                plural: crd.spec.names.plural.clone(),
                namespaced: crd.spec.scope == "Namespaced",
                status_subresource: status,
                scale,
                custom: true,
                has_generation: true,
            });
        }
    }
    kinds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_reads_subresources_from_the_fixture_crds() {
        let kinds = registry();
        let find = |plural: &str| {
            kinds
                .iter()
                .find(|k| k.plural == plural)
                .expect(plural)
                .clone()
        };
        assert!(
            !find("applications").status_subresource,
            "Argo CD Application has no status subresource"
        );
        assert!(
            !find("workflows").status_subresource,
            "Workflow has no status subresource"
        );
        assert!(
            find("rollouts").status_subresource,
            "Rollout has a status subresource"
        );
        assert!(
            !find("analysisruns").status_subresource,
            "AnalysisRun has no subresources"
        );
        let scale = find("rollouts").scale.expect("Rollout serves /scale");
        assert_eq!(scale.spec_replicas, ["spec", "replicas"]);
        assert_eq!(scale.status_replicas, ["status", "HPAReplicas"]);
        assert_eq!(
            scale.label_selector.as_deref(),
            Some(&["status".to_string(), "selector".to_string()][..])
        );
        assert!(find("applications").scale.is_none());
        assert_eq!(find("analysisruns").api_version(), "argoproj.io/v1alpha1");
        assert_eq!(find("applications").api_version(), "argoproj.io/v1alpha1");
        assert_eq!(find("configmaps").api_version(), "v1");
        assert!(
            find("promotiontasks").status_subresource,
            "the operator writes a PromotionTask's status through /status"
        );
        assert_eq!(find("promotiontasks").api_version(), "codefresh.io/v1beta1");
        let products: Vec<_> = kinds.iter().filter(|k| k.plural == "products").collect();
        assert_eq!(
            products.iter().map(|k| k.api_version()).collect::<Vec<_>>(),
            ["codefresh.io/v1beta2"],
            "Product is served at v1beta2 only (v1beta1 is listed, not served)"
        );
        for plural in [
            "promotionflows",
            "promotionpolicies",
            "promotiontemplates",
            "restrictedgitsources",
            "appprojects",
        ] {
            assert!(find(plural).namespaced, "{plural} is namespaced");
        }
    }
}
