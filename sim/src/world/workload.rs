//! The workload generator: what developers and clusters do to Argo CD, drawn from the seed.
//!
//! Creates the initial Applications, then until the calm phase: commits to a random app's
//! path, deletes an app and creates another, flips an app's health, and annotates every app
//! for a hard refresh — each on its own period. API errors (partitions, 429s) are recorded
//! and the action is retried on its next turn; the generator never stops on them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use orrery_system::env::SharedEnv;
use orrery_system::observe::{WorkloadAction, WorldEvent};

use crate::scenario::model::Workload as Config;
use crate::world::argocd::{application_resource, HealthOverrides, NAMESPACE};
use crate::world::git::SharedGit;

/// Initial Applications created concurrently.
const CREATE_PARALLELISM: usize = 25;

/// Repository URL of the `i`-th simulated repository.
pub fn repo_url(i: usize) -> String {
    format!("https://git.example/org/repo-{i}.git")
}

/// Name of the `i`-th application.
pub fn app_name(i: usize) -> String {
    format!("app-{i:05}")
}

fn manifest(app: &str, version: u64) -> BTreeMap<String, String> {
    BTreeMap::from([
        (format!("apps/{app}/deployment.yaml"), format!("kind: Deployment\nmetadata: {{name: {app}}}\nspec: {{replicas: 2, image: registry.example/{app}:v{version}}}\n")),
        (format!("apps/{app}/service.yaml"), format!("kind: Service\nmetadata: {{name: {app}}}\nspec: {{port: 80}}\n")),
    ])
}

/// Writes the initial commit of every repository: manifests for apps `0..count`.
pub fn seed_git(git: &SharedGit, config: &Config, unix_ms: u64) {
    let mut git = git.lock();
    for repo in 0..config.repositories {
        let mut files = BTreeMap::new();
        for app in (0..config.applications).filter(|a| a % config.repositories == repo) {
            files.extend(manifest(&app_name(app), 1));
        }
        git.commit(
            &repo_url(repo),
            "Bootstrap <ops@example.com>",
            "initial import",
            unix_ms,
            files,
        );
    }
}

/// The server URL of a destination cluster host (its simulated API server on port 6443).
pub fn cluster_server(host: &str) -> String {
    format!("https://{host}:6443")
}

fn application(index: usize, repositories: usize, clusters: &[String]) -> DynamicObject {
    let name = app_name(index);
    // Round-robin over the destination clusters, in-cluster when there are none.
    let server = match clusters.len() {
        0 => crate::world::argocd::clusters::IN_CLUSTER.to_string(),
        n => cluster_server(&clusters[index % n]),
    };
    let mut app = DynamicObject::new(&name, &application_resource()).within(NAMESPACE);
    let automated = index % 5 != 4; // four in five apps auto-sync, as in most fleets
    let mut spec = json!({
        "project": "default",
        "source": {"repoURL": repo_url(index % repositories), "path": format!("apps/{name}"), "targetRevision": "HEAD"},
        "destination": {"server": server, "namespace": name},
    });
    if automated {
        spec["syncPolicy"] = json!({"automated": {"prune": true, "selfHeal": true}});
    }
    app.data = json!({"spec": spec});
    app
}

/// Shared handles the workload needs.
pub struct Handles {
    /// The Git provider it commits to.
    pub git: SharedGit,
    /// Health the simulated workloads report.
    pub health: HealthOverrides,
    /// Set by the harness when the calm phase starts: the workload stops.
    pub calm: Arc<AtomicBool>,
    /// Destination cluster hosts, registered with Argo CD at start.
    pub clusters: Vec<String>,
    /// Cluster hosts whose registration the harness asked to remove (`unregister` fault).
    pub unregister: Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
}

/// The Secret that registers cluster `host` with Argo CD.
pub fn cluster_secret(host: &str) -> k8s_openapi::api::core::v1::Secret {
    use k8s_openapi::ByteString;
    let mut secret = k8s_openapi::api::core::v1::Secret::default();
    secret.metadata.name = Some(format!("cluster-{host}"));
    secret.metadata.namespace = Some(NAMESPACE.to_string());
    secret.metadata.labels = Some(BTreeMap::from([(
        crate::world::argocd::clusters::SECRET_TYPE_LABEL.to_string(),
        "cluster".to_string(),
    )]));
    secret.data = Some(BTreeMap::from([
        ("name".to_string(), ByteString(host.as_bytes().to_vec())),
        (
            "server".to_string(),
            ByteString(cluster_server(host).into_bytes()),
        ),
        (
            "config".to_string(),
            ByteString(
                br#"{"bearerToken":"cluster-token","tlsClientConfig":{"insecure":false}}"#.to_vec(),
            ),
        ),
    ]));
    secret
}

/// Registers every destination cluster (retrying until each Secret exists), then removes
/// the registrations the harness asks to remove, as an operator running `argocd cluster rm`.
async fn manage_clusters(
    env: SharedEnv,
    client: kube::Client,
    handles: (
        Vec<String>,
        Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
    ),
) {
    let (hosts, unregister) = handles;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client, NAMESPACE);
    let mut pending: Vec<String> = hosts;
    while !pending.is_empty() {
        let mut left = Vec::new();
        for host in pending {
            match secrets
                .create(&PostParams::default(), &cluster_secret(&host))
                .await
            {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(_) => left.push(host),
            }
        }
        pending = left;
        if !pending.is_empty() {
            env.sleep(Duration::from_secs(1)).await;
        }
    }
    let mut removed = std::collections::BTreeSet::new();
    loop {
        let wanted: Vec<String> = unregister
            .lock()
            .expect("unregister lock poisoned")
            .iter()
            .filter(|h| !removed.contains(*h))
            .cloned()
            .collect();
        for host in wanted {
            match secrets
                .delete(&format!("cluster-{host}"), &DeleteParams::default())
                .await
            {
                Ok(_) | Err(kube::Error::Api(_)) => {
                    removed.insert(host);
                }
                Err(_) => {} // retried next second
            }
        }
        env.sleep(Duration::from_secs(1)).await;
    }
}

struct Generator {
    env: SharedEnv,
    api: Api<DynamicObject>,
    config: Config,
    handles: Handles,
    live: Vec<usize>,
    next_index: usize,
    versions: BTreeMap<usize, u64>,
}

impl Generator {
    fn pick(&self) -> Option<usize> {
        (!self.live.is_empty())
            .then(|| self.live[(self.env.random_u64() % self.live.len() as u64) as usize])
    }

    fn record(&self, event: WorldEvent) {
        self.env.observe(event.into());
    }

    async fn create(&mut self, index: usize) -> bool {
        match self
            .api
            .create(
                &PostParams::default(),
                &application(index, self.config.repositories, &self.handles.clusters),
            )
            .await
        {
            Ok(_) => true,
            Err(kube::Error::Api(status)) if status.code == 409 => true,
            Err(e) => {
                self.record(WorldEvent::WorkloadError {
                    action: WorkloadAction::Create,
                    app: app_name(index),
                    error: e.to_string(),
                });
                false
            }
        }
    }

    async fn commit(&mut self) {
        let Some(index) = self.pick() else { return };
        let version = self.versions.entry(index).or_insert(1);
        *version += 1;
        let name = app_name(index);
        let repo = repo_url(index % self.config.repositories);
        let sha = self.handles.git.lock().commit(
            &repo,
            "Dev <dev@example.com>",
            &format!("bump {name} to v{version}"),
            self.env.unix_millis(),
            manifest(&name, *version),
        );
        self.record(WorldEvent::Commit {
            app: name.to_string(),
            sha: sha.to_string(),
        });
    }

    async fn churn(&mut self) {
        let Some(victim) = self.pick() else { return };
        match self
            .api
            .delete(&app_name(victim), &DeleteParams::default())
            .await
        {
            Ok(_) | Err(kube::Error::Api(_)) => self.live.retain(|i| *i != victim),
            Err(e) => {
                return self.record(WorldEvent::WorkloadError {
                    action: WorkloadAction::Delete,
                    app: app_name(victim),
                    error: e.to_string(),
                })
            }
        }
        let index = self.next_index;
        // The new app needs manifests before Argo CD can sync it.
        let repo = repo_url(index % self.config.repositories);
        self.handles.git.lock().commit(
            &repo,
            "Dev <dev@example.com>",
            &format!("add {}", app_name(index)),
            self.env.unix_millis(),
            manifest(&app_name(index), 1),
        );
        if self.create(index).await {
            self.live.push(index);
            self.next_index += 1;
        }
    }

    fn flap(&mut self) {
        let Some(index) = self.pick() else { return };
        let name = app_name(index);
        let next = if self.handles.health.get(&name) == "Healthy" {
            "Degraded"
        } else {
            "Healthy"
        };
        self.handles.health.set(&name, next);
        self.record(WorldEvent::Health {
            app: name,
            health: next.to_string(),
        });
    }

    async fn refresh(&mut self) {
        let patch = Patch::Merge(
            json!({"metadata": {"annotations": {"argocd.argoproj.io/refresh": "hard"}}}),
        );
        let mut failed = 0;
        for index in self.live.clone() {
            if self
                .api
                .patch(&app_name(index), &PatchParams::default(), &patch)
                .await
                .is_err()
            {
                failed += 1;
            }
        }
        self.record(WorldEvent::Refresh {
            apps: self.live.len() as u64,
            failed: failed as u64,
        });
    }
}

/// Runs the workload until the calm phase begins, then idles.
pub async fn run(env: SharedEnv, client: kube::Client, config: Config, handles: Handles) {
    if !handles.clusters.is_empty() {
        tokio::spawn(manage_clusters(
            env.clone(),
            client.clone(),
            (handles.clusters.clone(), handles.unregister.clone()),
        ));
    }
    let api = Api::namespaced_with(client, NAMESPACE, &application_resource());
    let mut generator = Generator {
        env: env.clone(),
        api,
        next_index: config.applications,
        config,
        handles,
        live: Vec::new(),
        versions: BTreeMap::new(),
    };
    // Create the initial apps CREATE_PARALLELISM at a time (10,000 one by one would take
    // most of a scenario); failed creates are retried after a pause.
    let mut pending: Vec<usize> = (0..generator.config.applications).collect();
    while !pending.is_empty() && !generator.handles.calm.load(Ordering::SeqCst) {
        let batch: Vec<usize> = pending.iter().copied().take(CREATE_PARALLELISM).collect();
        let api = generator.api.clone();
        let repositories = generator.config.repositories;
        let clusters = generator.handles.clusters.clone();
        let results = futures::future::join_all(batch.iter().map(|index| {
            let (api, clusters) = (api.clone(), clusters.clone());
            async move {
                (
                    *index,
                    api.create(
                        &PostParams::default(),
                        &application(*index, repositories, &clusters),
                    )
                    .await,
                )
            }
        }))
        .await;
        let mut failed = false;
        for (index, result) in results {
            match result {
                Ok(_) | Err(kube::Error::Api(_)) => {
                    generator.live.push(index);
                    pending.retain(|p| *p != index);
                }
                Err(e) => {
                    failed = true;
                    generator.record(WorldEvent::WorkloadError {
                        action: WorkloadAction::Create,
                        app: app_name(index),
                        error: e.to_string(),
                    });
                }
            }
        }
        if failed {
            env.sleep(Duration::from_secs(1)).await;
        }
    }
    generator.record(WorldEvent::Created {
        apps: generator.live.len() as u64,
    });
    let period = |d: Duration| (!d.is_zero()).then_some(d);
    let periods = [
        period(generator.config.commit_every),
        period(generator.config.churn_every),
        period(generator.config.health_flap_every),
        period(generator.config.refresh_every),
    ];
    let start = env.elapsed();
    let mut due: Vec<Option<Duration>> = periods.iter().map(|p| p.map(|p| start + p)).collect();
    while !generator.handles.calm.load(Ordering::SeqCst) {
        let Some((action, at)) = due
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.map(|d| (i, d)))
            .min_by_key(|(i, d)| (*d, *i))
        else {
            return;
        };
        env.sleep(at.saturating_sub(env.elapsed())).await;
        if generator.handles.calm.load(Ordering::SeqCst) {
            break;
        }
        match action {
            0 => generator.commit().await,
            1 => generator.churn().await,
            2 => generator.flap(),
            _ => generator.refresh().await,
        }
        due[action] = periods[action].map(|p| at + p);
    }
    generator.record(WorldEvent::Stopped {
        apps: generator.live.len() as u64,
    });
}
