//! Simulated Argo CD: the application controller and the server's REST subset, both on
//! one host, sharing a kube-rs reflector of `Application`s and the Git provider.
//!
//! - [`controller`]: reconciles every app every N simulated seconds (sync status, health,
//!   operationState, history, resources), auto-syncing apps with an automated policy.
//! - [`server`]: the REST calls the reporters use (resource tree, manifests, revision
//!   metadata, live resource), behind a bearer token.

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
/// failing pods. Absent means Healthy.
#[derive(Clone, Debug, Default)]
pub struct HealthOverrides(Arc<Mutex<BTreeMap<String, String>>>);

impl HealthOverrides {
    /// Sets the health `app`'s resources report (`Healthy` clears the override).
    pub fn set(&self, app: &str, health: &str) {
        let mut map = self.0.lock().expect("health lock poisoned");
        if health == "Healthy" {
            map.remove(app);
        } else {
            map.insert(app.to_string(), health.to_string());
        }
    }

    /// The health `app`'s resources report now.
    pub fn get(&self, app: &str) -> String {
        self.0
            .lock()
            .expect("health lock poisoned")
            .get(app)
            .cloned()
            .unwrap_or_else(|| "Healthy".into())
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

/// The Kubernetes resources an app's manifests describe: (kind, name) per file.
pub fn resources_of(files: &BTreeMap<String, String>, app: &str) -> Vec<(String, String)> {
    let mut resources: Vec<(String, String)> = files
        .keys()
        .map(|file| {
            let kind = if file.ends_with("service.yaml") {
                "Service"
            } else {
                "Deployment"
            };
            (kind.to_string(), app.to_string())
        })
        .collect();
    resources.sort();
    resources.dedup();
    resources
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
    tokio::spawn(
        watcher(api, watcher::Config::default())
            .backoff(backoff)
            .reflect(writer)
            .for_each(|_| async {}),
    );
    let server = server::Server {
        apps: store.clone(),
        git: git.clone(),
        token,
        namespace: config.namespace.clone(),
    };
    let listen = config.listen.clone();
    tokio::spawn(controller::run(
        env.clone(),
        client,
        store,
        git,
        health,
        config,
    ));
    let listener = env.listen(&listen).await?;
    orrery_system::env::http::serve(listener, move |req, _peer| {
        let server = server.clone();
        async move { server.handle(req).await }
    })
    .await
}
