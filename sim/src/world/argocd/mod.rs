//! Simulated Argo CD: the application controller and the server's REST subset, both on
//! one host, sharing a kube-rs reflector of `Application`s and the Git provider.
//!
//! - [`controller`]: reconciles every app every N simulated seconds (sync status, health,
//!   operationState, history, resources), auto-syncing apps with an automated policy.
//! - [`server`]: the REST calls the reporters use (resource tree, manifests, revision
//!   metadata, live resource), behind a bearer token.

pub mod clusters;
pub mod controller;
pub mod server;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};

/// Namespace Argo CD's Applications live in.
pub const NAMESPACE: &str = "argocd";

/// The `Application` type for kube-rs dynamic APIs.
pub fn application_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "argoproj.io",
        "v1alpha1",
        "Application",
    ))
}

/// Health each app's workload reports; the workload generator flips entries to simulate
/// failing pods. Absent means Healthy. Changes are remembered until the controller takes
/// them (Argo CD's cluster cache refreshes an app as soon as one of its resources changes).
#[derive(Clone, Debug, Default)]
pub struct HealthOverrides(Arc<Mutex<Health>>);

#[derive(Debug, Default)]
struct Health {
    unhealthy: BTreeMap<String, String>,
    changed: std::collections::BTreeSet<String>,
}

impl HealthOverrides {
    /// Sets the health `app`'s resources report (`Healthy` clears the override).
    pub fn set(&self, app: &str, health: &str) {
        let mut inner = self.0.lock().expect("health lock poisoned");
        let before = inner.unhealthy.get(app).cloned();
        if health == "Healthy" {
            inner.unhealthy.remove(app);
        } else {
            inner.unhealthy.insert(app.to_string(), health.to_string());
        }
        if inner.unhealthy.get(app) != before.as_ref() {
            inner.changed.insert(app.to_string());
        }
    }

    /// The health `app`'s resources report now.
    pub fn get(&self, app: &str) -> String {
        self.0
            .lock()
            .expect("health lock poisoned")
            .unhealthy
            .get(app)
            .cloned()
            .unwrap_or_else(|| "Healthy".into())
    }

    /// The apps whose health changed since the last call.
    pub fn take_changed(&self) -> std::collections::BTreeSet<String> {
        std::mem::take(&mut self.0.lock().expect("health lock poisoned").changed)
    }
}

/// Reads an app's `spec.source` as (repoURL, path).
pub fn source_of(app: &DynamicObject) -> Option<(String, String)> {
    let source = app.data.get("spec")?.get("source")?;
    Some((
        source.get("repoURL")?.as_str()?.to_string(),
        source.get("path")?.as_str()?.to_string(),
    ))
}

/// One Kubernetes resource an app's manifests describe (a `status.resources[]` entry's
/// identity).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Resource {
    /// API group (`apps`, or empty for the core group).
    pub group: &'static str,
    /// API version.
    pub version: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Name (the app's name, in the namespace of the same name).
    pub name: String,
    /// The Git file it comes from.
    pub file: String,
}

impl Resource {
    /// `group/version` or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// The Kubernetes resources an app's manifests describe, one per file, sorted.
pub fn resources_of(files: &BTreeMap<String, String>, app: &str) -> Vec<Resource> {
    let mut resources: Vec<Resource> = files
        .keys()
        .map(|file| {
            let (group, kind) = if file.ends_with("service.yaml") {
                ("", "Service")
            } else {
                ("apps", "Deployment")
            };
            Resource {
                group,
                version: "v1",
                kind,
                name: app.to_string(),
                file: file.clone(),
            }
        })
        .collect();
    resources.sort();
    resources.dedup_by(|a, b| (a.group, a.kind) == (b.group, b.kind));
    resources
}

/// The compiled (rendered) manifest of `resource` from its Git file's `content`: the YAML
/// as JSON with `apiVersion`, the destination namespace and Argo CD's instance label.
pub fn compiled(resource: &Resource, content: &str, app: &str) -> serde_json::Value {
    let mut object: serde_json::Value =
        serde_saphyr::from_str(content).unwrap_or_else(|_| serde_json::json!({}));
    if !object.is_object() {
        object = serde_json::json!({});
    }
    object["apiVersion"] = serde_json::json!(resource.api_version());
    object["kind"] = serde_json::json!(resource.kind);
    object["metadata"] = serde_json::json!({
        "name": resource.name,
        "namespace": app,
        "labels": {"app.kubernetes.io/instance": app},
    });
    object
}

/// Runs Argo CD on its host: a reflector of Applications, the server on port 8080 and the
/// controller loop. Returns only if the server's listener fails.
pub async fn run(
    env: orrery_system::env::SharedEnv,
    target: orrery_system::env::kube::KubeTarget,
    git: crate::world::git::SharedGit,
    health: HealthOverrides,
    config: controller::Config,
    token: String,
) -> std::io::Result<()> {
    use futures::StreamExt;
    use kube::runtime::{reflector, watcher, WatchStreamExt};

    let client = orrery_system::env::kube::client(env.clone(), &target);
    let api: kube::Api<DynamicObject> =
        kube::Api::namespaced_with(client.clone(), &config.namespace, &application_resource());
    let writer = reflector::store::Writer::new(application_resource());
    let store = writer.as_reader();
    let backoff = orrery_system::env::kube::SeededBackoff::new(env.clone());
    // Every app the watch delivers is a candidate for the controller's next tick.
    let touched = controller::Touched::default();
    let seen = touched.clone();
    tokio::spawn(
        watcher(api, watcher::Config::default())
            .backoff(backoff)
            .reflect(writer)
            .for_each(move |event| {
                if let Ok(
                    watcher::Event::Apply(app)
                    | watcher::Event::InitApply(app)
                    | watcher::Event::Delete(app),
                ) = &event
                {
                    seen.touch(app.metadata.name.as_deref().unwrap_or(""));
                }
                async {}
            }),
    );
    let server = server::Server {
        apps: store.clone(),
        git: git.clone(),
        token,
        namespace: config.namespace.clone(),
        compiled: Default::default(),
    };
    let listen = config.listen.clone();
    // Destination clusters: registered by Secrets, checked by the cluster cache.
    let clusters = clusters::Clusters::default();
    tokio::spawn(clusters::watch(
        env.clone(),
        client.clone(),
        config.namespace.clone(),
        clusters.clone(),
    ));
    tokio::spawn(clusters::check(env.clone(), clusters.clone()));
    tokio::spawn(controller::run(
        env.clone(),
        client,
        store,
        touched,
        git,
        health,
        clusters,
        config,
    ));
    let listener = env.listen(&listen).await?;
    orrery_system::env::http::serve(listener, move |req, _peer| {
        let server = server.clone();
        async move { server.handle(req).await }
    })
    .await
}
