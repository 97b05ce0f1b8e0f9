//! Hosted runtimes' world (`hosted:`): each `role: vcluster` host is one tenant's virtual
//! cluster — its own API server, which is all the tenant sees, and the tenant writing its
//! ConfigMaps and Secrets there as its Argo CD would apply them. The control plane's
//! vcluster syncer (`platform::vcluster`, placed by `world::placement`) keeps them in
//! namespace `vc-<host>` of the shared host cluster (the `role: apiserver` host), where the
//! tenants' workloads read them. At the end the harness reads both sides ([`truth`]) for
//! `vcluster_isolation`.
//!
//! With `hosted.applications`, each tenant also has its hosted runtime on its vcluster host,
//! all of it talking to its virtual cluster only — its Argo CD, and its runtime's
//! application event reporter and cache, reporting to the platform with the token of
//! runtime [`RUNTIME`] of account `<vcluster>` — registered as a hosted runtime on cluster
//! `<vcluster>`. The tenant's developers work from a host of their own ([`developers`],
//! which no fault names): Applications and commits to the tenant's own Git, health flaps
//! and churn, the workload generator's. Every tenant's apps have the same names
//! (`argocd/app-00000`, …); the platform must keep them apart (`hosted_runtimes_converge`).
//! The Applications are custom resources and stay in the virtual cluster (vcluster syncs
//! pods and what they mount).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use base64::Engine as _;
use kube::api::{Api, DeleteParams, DynamicObject, ObjectMeta, PostParams};
use serde_json::{json, Value};

use orrery_system::core::Variant;
use orrery_system::env::kube::KubeTarget;
use orrery_system::env::SharedEnv;
use orrery_system::platform::vcluster::naming::{self, Identity};
use orrery_system::platform::vcluster::reconcile::content;
use orrery_system::platform::vcluster::Kind;

use orrery_system::platform::registry::{self, Registry};

use super::apiserver::ApiServer;
use super::argocd::HealthOverrides;
use super::git::SharedGit;
use crate::checkers::hosted::{Copy, Mounted, VclusterTruth, VirtualObject};
use crate::scenario::model::{Hosted, Workload};

/// The name of each tenant's hosted runtime in its account (the account is named after the
/// vcluster).
pub const RUNTIME: &str = "hosted";

/// The token vcluster `vcluster`'s hosted runtime reports with.
pub fn runtime_token(vcluster: &str) -> String {
    format!("rt-token-{vcluster}-{RUNTIME}")
}

/// The platform's name for vcluster `vcluster`'s hosted runtime (`<account>-<runtime>`,
/// its read model's key).
pub fn runtime_name(vcluster: &str) -> String {
    format!("{vcluster}-{RUNTIME}")
}

/// One tenant's world: its virtual cluster's API server (its store outlives the host's
/// crashes), and for its hosted runtime its own Git and its workloads' health.
#[derive(Clone)]
pub struct Tenant {
    /// The virtual cluster's API server.
    pub api: Arc<ApiServer>,
    /// The tenant's Git provider (its repositories alone).
    pub git: SharedGit,
    /// The health its apps' workloads report.
    pub health: HealthOverrides,
}

/// The workload of a tenant's developers: `hosted.applications` apps in one repository,
/// changing at the workload's default rates, and where its apps are (`argocd`, in-cluster).
pub fn workload(settings: &Hosted) -> (Workload, super::workload::Layout) {
    let config = Workload {
        applications: settings.applications,
        repositories: 1,
        ..Workload::default()
    };
    let layout = super::workload::Layout::of(&config, &[], &[]);
    (config, layout)
}

/// Registers each tenant's hosted runtime (platform state from before the run): runtime
/// [`RUNTIME`] of account `<vcluster>`, hosted, on cluster `<vcluster>`.
pub fn register(registry: &Registry, vclusters: &[String]) {
    for vcluster in vclusters {
        let info = registry::Info {
            kind: registry::Kind::Hosted,
            cluster: vcluster.clone(),
            ..Default::default()
        };
        registry.insert_with(&runtime_token(vcluster), vcluster, RUNTIME, info);
    }
}

/// The namespaces each tenant writes in.
pub const NAMESPACES: [&str; 3] = ["prod", "team", "staging"];

/// The two Secrets `hosted.colliding` keeps: (namespace, name). vcluster names both
/// `db-x-team-x-prod-x-<vcluster>`.
pub const COLLIDING: [(&str, &str); 2] = [("prod", "db-x-team"), ("team-x-prod", "db")];

/// Where vcluster `name`'s copies live on the host cluster.
pub fn host_namespace(vcluster: &str) -> String {
    format!("vc-{vcluster}")
}

/// The names a tenant draws from in each namespace.
pub fn names(count: u32) -> Vec<String> {
    (0..count)
        .map(|i| match i {
            0 => "db".to_string(),
            1 => "web".to_string(),
            2 => "api".to_string(),
            n => format!("cm-{n}"),
        })
        .collect()
}

/// The host the tenant of vcluster `vcluster`'s developers work from (outside the
/// platform: no fault names it).
pub fn developers(vcluster: &str) -> String {
    format!("{vcluster}-developers")
}

/// Vcluster `vcluster`'s own API server: all its tenant (and its hosted runtime) sees.
pub fn virtual_target(vcluster: &str) -> KubeTarget {
    KubeTarget::new(format!("{vcluster}:{}", super::addresses::APISERVER_PORT))
}

/// What the tenant's hosted runtime and developers work on: its virtual cluster's
/// Applications namespace, with the world's watch idle timeout (`read_idle`).
pub fn runtime_target(vcluster: &str, read_idle: std::time::Duration) -> KubeTarget {
    KubeTarget {
        namespace: super::argocd::NAMESPACE.into(),
        read_idle,
        ..virtual_target(vcluster)
    }
}

/// The syncer's view of vcluster `vcluster` (its own API server) and of the host cluster.
pub fn targets(vcluster: &str, host_apiserver: &str) -> (KubeTarget, KubeTarget) {
    let virtual_cluster = virtual_target(vcluster);
    let mut host = KubeTarget::new(format!(
        "{host_apiserver}:{}",
        super::addresses::APISERVER_PORT
    ));
    host.namespace = host_namespace(vcluster);
    (virtual_cluster, host)
}

/// The tenant of vcluster `vcluster`: every `write_every` until the calm phase, a write to
/// one of its objects (4 in 5 a create or update, 1 in 5 a delete), drawn from the host's
/// randomness; with `colliding`, the two colliding Secrets first (in order) and updated
/// every tenth write. A write that fails is not retried (the next one is drawn).
pub async fn run_tenant(env: SharedEnv, vcluster: String, settings: Hosted, calm: Arc<AtomicBool>) {
    let client = orrery_system::env::kube::client(env.clone(), &virtual_target(&vcluster));
    let names = names(settings.names);
    let mut step: u64 = 0;
    loop {
        env.sleep(settings.write_every).await;
        if calm.load(Ordering::SeqCst) {
            return;
        }
        step += 1;
        let colliding = |at: usize| {
            let (namespace, name) = COLLIDING[at];
            (Kind::Secret, namespace.to_string(), name.to_string(), false)
        };
        let writes = match step {
            1 if settings.colliding => vec![colliding(0)],
            2 if settings.colliding => vec![colliding(1)],
            n if settings.colliding && n % 10 == 0 => vec![colliding(0), colliding(1)],
            _ => {
                let kind = Kind::ALL[(env.random_u64() % 2) as usize];
                let namespace = NAMESPACES[(env.random_u64() % NAMESPACES.len() as u64) as usize];
                let name = &names[(env.random_u64() % names.len() as u64) as usize];
                let delete = env.random_u64().is_multiple_of(5);
                vec![(kind, namespace.to_string(), name.clone(), delete)]
            }
        };
        for (kind, namespace, name, delete) in writes {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &namespace, &kind.resource());
            let value = format!("{vcluster}/{namespace}/{name}/{step}");
            let _ = write(&api, kind, &namespace, &name, &value, delete).await;
        }
    }
}

async fn write(
    api: &Api<DynamicObject>,
    kind: Kind,
    namespace: &str,
    name: &str,
    value: &str,
    delete: bool,
) -> Result<(), kube::Error> {
    if delete {
        api.delete(name, &DeleteParams::default()).await?;
        return Ok(());
    }
    let data = match kind {
        Kind::ConfigMap => json!({"data": {"value": value}}),
        Kind::Secret => json!({
            "type": "Opaque",
            "data": {"value": base64::engine::general_purpose::STANDARD.encode(value)},
        }),
    };
    let mut object = DynamicObject {
        types: Some(kind.types()),
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        data,
    };
    match api.get_opt(name).await? {
        Some(found) => {
            object.metadata.resource_version = found.metadata.resource_version;
            api.replace(name, &PostParams::default(), &object).await?;
        }
        None => {
            api.create(&PostParams::default(), &object).await?;
        }
    }
    Ok(())
}

/// What vcluster `vcluster`'s API server and its host namespace hold at the end, and what
/// a pod of each virtual object's namespace mounts under its name (the object at the
/// variant's host name).
pub fn truth(
    variant: Variant,
    vcluster: &str,
    virtual_api: &ApiServer,
    host_api: &ApiServer,
) -> VclusterTruth {
    let host_ns = host_namespace(vcluster);
    let mut truth = VclusterTruth {
        vcluster: vcluster.to_string(),
        host_namespace: host_ns.clone(),
        ..VclusterTruth::default()
    };
    for kind in Kind::ALL {
        let (Some(virtual_kind), Some(host_kind)) = (
            virtual_api.kind(kind.plural()).cloned(),
            host_api.kind(kind.plural()).cloned(),
        ) else {
            continue;
        };
        let host_objects: Vec<DynamicObject> = host_api
            .store()
            .objects_of(&host_kind)
            .into_iter()
            .filter(|o| o["metadata"]["namespace"] == host_ns.as_str())
            .filter_map(|o| serde_json::from_value(o).ok())
            .collect();
        for object in virtual_api.store().objects_of(&virtual_kind) {
            let Ok(object) = serde_json::from_value::<DynamicObject>(object) else {
                continue;
            };
            let namespace = object.metadata.namespace.clone().unwrap_or_default();
            let name = object.metadata.name.clone().unwrap_or_default();
            let host_name = naming::host_name(variant, &name, &namespace, vcluster);
            let mounted = host_objects
                .iter()
                .find(|h| h.metadata.name.as_deref() == Some(host_name.as_str()))
                .map(|h| Mounted {
                    owner: Identity::of(h),
                    content: Value::Object(content(h)),
                });
            truth.objects.push(VirtualObject {
                kind: kind.plural(),
                namespace,
                name,
                uid: object.metadata.uid.clone().unwrap_or_default(),
                content: Value::Object(content(&object)),
                host_name,
                mounted,
            });
        }
        for host in &host_objects {
            truth.copies.push(Copy {
                kind: kind.plural(),
                host_name: host.metadata.name.clone().unwrap_or_default(),
                owner: Identity::of(host),
                content: Value::Object(content(host)),
            });
        }
    }
    truth
}
