//! Simulated Argo CD: the application controller and the server's REST subset, both on
//! one host, sharing a kube-rs reflector of `Application`s and the Git provider.
//!
//! - [`controller`]: reconciles every app every N simulated seconds (sync status, health,
//!   operationState, history, resources), auto-syncing apps with an automated policy.
//! - [`server`]: the REST calls the reporters and the ACR controller use (resource tree,
//!   manifests, revision metadata, live resource, change revision), behind a bearer token.
//! - [`repo_server`]: the repo-server's `GetChangeRevision` over the simulated Git.

pub mod clusters;
pub mod controller;
pub mod events;
pub mod projects;
pub mod repo_server;
pub mod server;
pub mod touched;

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

/// The API tokens Argo CD accepts. A bundled installation has one fixed token; an existing
/// Argo CD issues its own, and the `rotate_token` fault revokes it (an expired or
/// regenerated `argocd account generate-token`) and issues the next. Shared so the world can
/// rotate it while the server runs.
#[derive(Clone, Debug, Default)]
pub struct Tokens(Arc<Mutex<TokenState>>);

#[derive(Debug, Default)]
struct TokenState {
    accepted: Option<String>,
    issued: u64,
}

impl From<String> for Tokens {
    fn from(token: String) -> Tokens {
        Tokens(Arc::new(Mutex::new(TokenState {
            accepted: Some(token),
            issued: 1,
        })))
    }
}

impl From<&str> for Tokens {
    fn from(token: &str) -> Tokens {
        Tokens::from(token.to_string())
    }
}

impl Tokens {
    /// Whether `token` is the one Argo CD accepts now.
    pub fn accepts(&self, token: &str) -> bool {
        self.0
            .lock()
            .expect("tokens lock poisoned")
            .accepted
            .as_deref()
            == Some(token)
    }

    /// The token Argo CD accepts now (empty if none).
    pub fn current(&self) -> String {
        self.0
            .lock()
            .expect("tokens lock poisoned")
            .accepted
            .clone()
            .unwrap_or_default()
    }

    /// Revokes the current token and issues the next (`argocd-token-<n>`); returns it.
    pub fn rotate(&self) -> String {
        let mut state = self.0.lock().expect("tokens lock poisoned");
        state.issued += 1;
        let next = format!("argocd-token-{}", state.issued);
        state.accepted = Some(next.clone());
        next
    }
}

/// Reads an app's `spec.source` as (repoURL, path), borrowed (the controller reads it for
/// every app it looks at).
pub fn source_of(app: &DynamicObject) -> Option<(&str, &str)> {
    let source = app.data.get("spec")?.get("source")?;
    Some((
        source.get("repoURL")?.as_str()?,
        source.get("path")?.as_str()?,
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
    /// Name (the app's name for its Deployment and Service; the child's name for an
    /// Application of an app-of-apps).
    pub name: String,
    /// Namespace (the app's destination namespace, named like the app; the child's own
    /// namespace for an Application).
    pub namespace: String,
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

/// The Kubernetes resources an app's manifests describe, one per file, sorted: a
/// Deployment and a Service per app, or (app-of-apps) one `Application` per child manifest.
pub fn resources_of(files: &BTreeMap<String, String>, app: &str) -> Vec<Resource> {
    let mut resources: Vec<Resource> = files
        .iter()
        // A chart's `Chart.yaml` describes the chart (its name and versions), not a resource.
        .filter(|(file, _)| file.rsplit('/').next() != Some("Chart.yaml"))
        .map(|(file, content)| {
            if let Some((name, namespace)) = child_of(content) {
                return Resource {
                    group: "argoproj.io",
                    version: "v1alpha1",
                    kind: "Application",
                    name,
                    namespace,
                    file: file.clone(),
                };
            }
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
                namespace: app.to_string(),
                file: file.clone(),
            }
        })
        .collect();
    resources.sort();
    resources.dedup_by(|a, b| (a.group, a.kind, &a.name) == (b.group, b.kind, &b.name));
    resources
}

/// An app-of-apps child manifest's (name, namespace), if `content` is an Application.
pub fn child_of(content: &str) -> Option<(String, String)> {
    if !content.contains("kind: Application") {
        return None;
    }
    let object: serde_json::Value = serde_saphyr::from_str(content).ok()?;
    let metadata = object.get("metadata")?;
    Some((
        metadata.get("name")?.as_str()?.to_string(),
        metadata
            .get("namespace")
            .and_then(serde_json::Value::as_str)
            .unwrap_or(NAMESPACE)
            .to_string(),
    ))
}

/// The Applications an app-of-apps parent deploys: each child manifest in its files, as
/// Argo CD applies it (with the parent's instance label, the default tracking method).
pub fn children_of(files: &BTreeMap<String, String>, parent: &str) -> Vec<serde_json::Value> {
    files
        .values()
        .filter(|content| child_of(content).is_some())
        .filter_map(|content| serde_saphyr::from_str::<serde_json::Value>(content).ok())
        .map(|mut child| {
            child["metadata"]["labels"] = serde_json::json!({"app.kubernetes.io/instance": parent});
            child
        })
        .collect()
}

/// `namespace/name`: how Argo CD names an app outside its own namespace, and the key
/// every map of apps here uses.
pub fn app_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
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
        "namespace": resource.namespace,
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
    tokens: impl Into<Tokens>,
) -> std::io::Result<()> {
    use futures::StreamExt;
    use kube::runtime::{reflector, watcher, WatchStreamExt};

    let client = orrery_system::env::kube::client(env.clone(), &target);
    // What a restarted Argo CD knows of projects is what it lists again.
    let mut config = config;
    config.projects = config.projects.fresh();
    // Argo CD watches its own namespace, or every namespace when
    // `application.namespaces` names more (and ignores apps outside them).
    let api: kube::Api<orrery_system::env::kube::Shared<kube::api::DynamicObject>> =
        if config.application_namespaces.is_empty() {
            kube::Api::namespaced_with(client.clone(), &config.namespace, &application_resource())
        } else {
            kube::Api::all_with(client.clone(), &application_resource())
        };
    let allowed = config.clone();
    let writer = reflector::store::Writer::new(application_resource());
    let store = writer.as_reader();
    let backoff = orrery_system::env::kube::SeededBackoff::new(env.clone());
    // Every app the watch delivers is a candidate for the controller's next tick.
    let touched = touched::Touched::default();
    let seen = touched.clone();
    let events = watcher(api, watcher::Config::default()).backoff(backoff);
    tokio::spawn(reflector::reflector(writer, events).for_each(move |event| {
        if let Ok(
            watcher::Event::Apply(app)
            | watcher::Event::InitApply(app)
            | watcher::Event::Delete(app),
        ) = &event
        {
            let namespace = app.metadata.namespace.as_deref().unwrap_or("");
            if allowed.manages(namespace) {
                seen.touch(&app_key(
                    namespace,
                    app.metadata.name.as_deref().unwrap_or(""),
                ));
            }
        }
        async {}
    }));
    let server = server::Server {
        apps: store.clone(),
        git: git.clone(),
        tokens: tokens.into(),
        config: config.clone(),
        compiled: Default::default(),
        env: env.clone(),
        clones: Default::default(),
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
    if config.projects.is_enforced() {
        tokio::spawn(projects::watch(
            env.clone(),
            client.clone(),
            config.namespace.clone(),
            config.projects.clone(),
        ));
    }
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
