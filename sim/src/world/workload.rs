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
use crate::scenario::trace::{Change, Kind, Trace};
use crate::world::argocd::{application_resource, HealthOverrides, NAMESPACE};
use crate::world::git::SharedGit;

/// Initial Applications created concurrently.
const CREATE_PARALLELISM: usize = 25;

/// Repository URL of the `i`-th simulated repository.
pub fn repo_url(i: usize) -> String {
    format!("https://git.example/org/repo-{i}.git")
}

/// The index of an application named by [`app_name`].
pub fn index_of(name: &str) -> Option<usize> {
    name.strip_prefix("app-")?.parse().ok()
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

/// The namespace of app `index`: round-robin over `argocd` and the extra application
/// namespaces.
pub fn namespace_of(index: usize, extra: &[String]) -> String {
    match index % (extra.len() + 1) {
        0 => NAMESPACE.to_string(),
        i => extra[i - 1].clone(),
    }
}

/// Where the world's apps are: namespaces, destination clusters, repositories, app-of-apps.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    /// Repositories the apps are spread over.
    pub repositories: usize,
    /// Destination cluster hosts (in-cluster when empty).
    pub clusters: Vec<String>,
    /// Application namespaces besides `argocd`.
    pub namespaces: Vec<String>,
    /// Parents and children, if any.
    pub tree: Option<crate::scenario::model::AppOfApps>,
    /// The monorepo's team directories, if the apps share one.
    pub monorepo: Option<crate::scenario::model::Monorepo>,
}

/// The shared directory every `shared_every`-th monorepo app also depends on.
pub const SHARED_DIR: &str = "platform/base";

/// A team's `Chart.yaml`: its app version moves with each release (`1.<version>`), so the
/// source server and the fork's repo-server read app versions from it (`$.appVersion`).
fn chart(team: &str, version: u64) -> String {
    format!("apiVersion: v2\nname: {team}\nversion: 0.1.0\nappVersion: \"1.{version}\"\n")
}

/// A team directory's last segment (`teams/team-007` → `team-007`).
fn team_name(dir: &str) -> String {
    dir.rsplit('/').next().unwrap_or(dir).to_string()
}

/// The monorepo directory of team `group`.
pub fn team_dir(group: usize) -> String {
    format!("teams/team-{group:03}")
}

impl Layout {
    /// The layout a scenario's workload and Argo CD settings describe.
    pub fn of(config: &Config, namespaces: &[String], clusters: &[String]) -> Layout {
        Layout {
            repositories: config.repositories.max(1),
            clusters: clusters.to_vec(),
            namespaces: namespaces.to_vec(),
            tree: config.app_of_apps.clone(),
            monorepo: config.monorepo.clone(),
        }
    }

    /// A monorepo app's directory, and whether it also depends on [`SHARED_DIR`].
    fn team_of(&self, index: usize) -> Option<(String, bool)> {
        let monorepo = self.monorepo.as_ref()?;
        let shared = monorepo.shared_every > 0 && index.is_multiple_of(monorepo.shared_every);
        Some((team_dir(index % monorepo.paths.max(1)), shared))
    }

    fn is_parent(&self, index: usize) -> bool {
        self.tree.as_ref().is_some_and(|t| index < t.parents)
    }

    fn is_child(&self, index: usize) -> bool {
        self.tree
            .as_ref()
            .is_some_and(|t| t.parent_of(index).is_some())
    }

    /// The Git files of app `index`: a Deployment and a Service, or a parent's child
    /// Application manifests.
    fn files(&self, index: usize, version: u64) -> BTreeMap<String, String> {
        let name = app_name(index);
        if let Some((dir, _)) = self.team_of(index) {
            // The app's Deployment, its team's values and chart, and the shared base.
            return BTreeMap::from([
                (format!("{dir}/{name}.yaml"), format!("kind: Deployment\nmetadata: {{name: {name}}}\nspec: {{replicas: 2, image: registry.example/{name}:v{version}}}\n")),
                (format!("{dir}/values.yaml"), format!("version: {version}\n")),
                (format!("{dir}/Chart.yaml"), chart(&team_name(&dir), version)),
                (format!("{SHARED_DIR}/config.yaml"), format!("version: {version}\n")),
            ]);
        }
        match &self.tree {
            Some(tree) if index < tree.parents => tree
                .children_of(index)
                .map(|child| {
                    let app = application(child, self);
                    let text = format!(
                        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {{name: {}, namespace: {}}}\nspec: {}\n",
                        app_name(child),
                        namespace_of(child, &self.namespaces),
                        app.data["spec"]
                    );
                    (format!("roots/{name}/{}.yaml", app_name(child)), text)
                })
                .collect(),
            _ => manifest(&name, version),
        }
    }
}

/// Writes the initial commit of every repository: manifests for apps `0..count`.
pub fn seed_git(git: &SharedGit, config: &Config, layout: &Layout, unix_ms: u64) {
    let mut git = git.lock();
    if layout.monorepo.is_some() {
        // A monorepo made on a hosting provider begins with its README; the import is then
        // an ordinary commit (`git diff-tree` lists nothing for a root commit).
        git.commit(
            &repo_url(0),
            "Bootstrap <ops@example.com>",
            "Initial commit",
            unix_ms,
            BTreeMap::from([("README.md".to_string(), "# monorepo\n".to_string())]),
        );
    }
    for repo in 0..config.repositories {
        let mut files = BTreeMap::new();
        for app in (0..config.applications).filter(|a| a % config.repositories == repo) {
            files.extend(layout.files(app, 1));
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

fn application(index: usize, layout: &Layout) -> DynamicObject {
    let name = app_name(index);
    // Round-robin over the destination clusters, in-cluster when there are none.
    let server = match layout.clusters.len() {
        0 => crate::world::argocd::clusters::IN_CLUSTER.to_string(),
        n => cluster_server(&layout.clusters[index % n]),
    };
    let mut app = DynamicObject::new(&name, &application_resource())
        .within(&namespace_of(index, &layout.namespaces));
    // Four in five apps auto-sync, as in most fleets; parents always do (their sync
    // creates the children).
    let automated = index % 5 != 4 || layout.is_parent(index);
    let team = layout.team_of(index);
    let path = if layout.is_parent(index) {
        format!("roots/{name}")
    } else if let Some((dir, _)) = &team {
        dir.clone()
    } else {
        format!("apps/{name}")
    };
    let mut spec = json!({
        "project": "default",
        "source": {"repoURL": repo_url(index % layout.repositories), "path": path, "targetRevision": "HEAD"},
        "destination": {"server": server, "namespace": name},
    });
    if automated {
        spec["syncPolicy"] = json!({"automated": {"prune": true, "selfHeal": true}});
    }
    app.data = json!({"spec": spec});
    if let Some((_, shared)) = team {
        let paths = if shared {
            format!(".;/{SHARED_DIR}")
        } else {
            ".".to_string()
        };
        app.metadata.annotations = Some(BTreeMap::from([(
            orrery_system::runtime::acr::paths::MANIFEST_GENERATE_PATHS.to_string(),
            paths,
        )]));
    }
    app
}

/// Shared handles the workload needs.
#[derive(Clone)]
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
    /// Namespaces, clusters, repositories and app-of-apps of the apps.
    pub layout: Layout,
    /// An existing Argo CD: the token Secret the operator keeps.
    pub token_secret: Option<TokenSecret>,
}

/// The token an operator keeps in Secret `argocd-token` for a runtime next to an existing
/// Argo CD, and the simulated time from which it is there (a rotation reaches the Secret
/// some time after Argo CD revoked the old token).
#[derive(Clone, Debug)]
pub struct TokenSecret(Arc<std::sync::Mutex<(String, Duration)>>);

impl TokenSecret {
    /// The Secret holds `token` from the start.
    pub fn new(token: String) -> TokenSecret {
        TokenSecret(Arc::new(std::sync::Mutex::new((token, Duration::ZERO))))
    }

    /// From `at` (simulated elapsed time) on, the Secret is to hold `token`.
    pub fn set(&self, token: String, at: Duration) {
        *self.0.lock().expect("token secret lock poisoned") = (token, at);
    }

    fn wanted(&self, now: Duration) -> Option<String> {
        let (token, at) = self.0.lock().expect("token secret lock poisoned").clone();
        (now >= at).then_some(token)
    }
}

/// Keeps Secret `argocd-token` (key `token`) holding the token the operator was given,
/// retrying through API errors, as an operator running `kubectl create secret` /
/// `kubectl apply` after each `argocd account generate-token`.
async fn manage_token_secret(env: SharedEnv, client: kube::Client, secret: TokenSecret) {
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::ByteString;
    let secrets: Api<Secret> = Api::namespaced(client, NAMESPACE);
    let name = crate::world::addresses::ARGOCD_TOKEN_SECRET;
    let mut written: Option<String> = None;
    loop {
        if let Some(token) = secret
            .wanted(env.elapsed())
            .filter(|t| Some(t) != written.as_ref())
        {
            let mut object = Secret::default();
            object.metadata.name = Some(name.to_string());
            object.metadata.namespace = Some(NAMESPACE.to_string());
            object.data = Some(BTreeMap::from([(
                orrery_system::runtime::app_reporter::token::TOKEN_KEY.to_string(),
                ByteString(token.clone().into_bytes()),
            )]));
            let result = match written {
                None => secrets
                    .create(&PostParams::default(), &object)
                    .await
                    .map(|_| ()),
                Some(_) => secrets
                    .patch(name, &PatchParams::default(), &Patch::Merge(&object))
                    .await
                    .map(|_| ()),
            };
            match result {
                Ok(()) => written = Some(token),
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    written = Some(String::new())
                }
                Err(_) => {} // retried next second
            }
        }
        env.sleep(Duration::from_secs(1)).await;
    }
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
    client: kube::Client,
    layout: Layout,
    config: Config,
    handles: Handles,
    live: Vec<usize>,
    next_index: usize,
    versions: BTreeMap<usize, u64>,
    /// Monorepo storm commits so far.
    storm_commits: u64,
}

impl Generator {
    fn pick(&self) -> Option<usize> {
        (!self.live.is_empty())
            .then(|| self.live[(self.env.random_u64() % self.live.len() as u64) as usize])
    }

    /// The Applications API of app `index`'s namespace (answers decoded in one pass).
    fn api(&self, index: usize) -> Api<orrery_system::env::kube::Wire> {
        Api::namespaced_with(
            self.client.clone(),
            &namespace_of(index, &self.layout.namespaces),
            &application_resource(),
        )
    }

    fn record(&self, event: WorldEvent) {
        self.env.observe(event.into());
    }

    async fn create(&mut self, index: usize) -> bool {
        match self
            .api(index)
            .create(
                &PostParams::default(),
                &orrery_system::env::kube::Wire(application(index, &self.layout)),
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
        self.commit_to(index);
    }

    /// A commit of app `index`'s next version to its path.
    fn commit_to(&mut self, index: usize) {
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
        // Children belong to their parent (its next sync would bring them back).
        let Some(victim) = self.pick().filter(|i| !self.layout.is_child(*i)) else {
            return;
        };
        if self.delete(victim).await {
            self.add().await;
        }
    }

    /// Deletes app `victim`; false when the API server could not be reached.
    async fn delete(&mut self, victim: usize) -> bool {
        match self
            .api(victim)
            .delete(&app_name(victim), &DeleteParams::default())
            .await
        {
            Ok(_) | Err(kube::Error::Api(_)) => {
                self.live.retain(|i| *i != victim);
                true
            }
            Err(e) => {
                self.record(WorldEvent::WorkloadError {
                    action: WorkloadAction::Delete,
                    app: app_name(victim),
                    error: e.to_string(),
                });
                false
            }
        }
    }

    /// Adds a new app, its manifests committed first: its index, once created.
    async fn add(&mut self) -> Option<usize> {
        let index = self.next_index;
        // The new app needs manifests before Argo CD can sync it (in a monorepo: its
        // Deployment in its team's directory).
        let repo = repo_url(index % self.config.repositories);
        let files = match self.layout.team_of(index) {
            Some((dir, _)) => {
                let name = app_name(index);
                let mut files = self.layout.files(index, 1);
                files.retain(|file, _| *file == format!("{dir}/{name}.yaml"));
                files
            }
            None => manifest(&app_name(index), 1),
        };
        self.handles.git.lock().commit(
            &repo,
            "Dev <dev@example.com>",
            &format!("add {}", app_name(index)),
            self.env.unix_millis(),
            files,
        );
        if !self.create(index).await {
            return None;
        }
        self.live.push(index);
        self.next_index += 1;
        Some(index)
    }

    /// A monorepo storm commit: 1 to `touch` team directories (and now and then the shared
    /// base) get a new version in one commit.
    fn storm(&mut self) {
        let Some(monorepo) = self.layout.monorepo.clone() else {
            return;
        };
        let count = 1 + (self.env.random_u64() % monorepo.touch as u64) as usize;
        let mut dirs = std::collections::BTreeSet::new();
        while dirs.len() < count {
            dirs.insert(team_dir(
                (self.env.random_u64() % monorepo.paths as u64) as usize,
            ));
        }
        if monorepo.shared_touch > 0
            && self
                .env
                .random_u64()
                .is_multiple_of(monorepo.shared_touch as u64)
        {
            dirs.insert(SHARED_DIR.to_string());
        }
        self.storm_commits += 1;
        let version = self.storm_commits + 1;
        let mut changes = BTreeMap::new();
        for dir in &dirs {
            if dir == SHARED_DIR {
                changes.insert(
                    format!("{dir}/config.yaml"),
                    format!("version: {version}\n"),
                );
            } else {
                // A team's release bumps its values and its chart's appVersion together.
                changes.insert(
                    format!("{dir}/values.yaml"),
                    format!("version: {version}\n"),
                );
                changes.insert(format!("{dir}/Chart.yaml"), chart(&team_name(dir), version));
            }
        }
        let touched: Vec<String> = dirs.into_iter().collect();
        let sha = self.handles.git.lock().commit(
            &repo_url(0),
            "Dev <dev@example.com>",
            &format!("bump {}", touched.join(" ")),
            self.env.unix_millis(),
            changes,
        );
        self.record(WorldEvent::Commit {
            app: touched.join(","),
            sha,
        });
    }

    fn flap(&mut self) {
        let Some(index) = self.pick() else { return };
        let next = if self.handles.health.get(&app_name(index)) == "Healthy" {
            "Degraded"
        } else {
            "Healthy"
        };
        self.set_health(index, next);
    }

    /// App `index`'s workload turns `health`.
    fn set_health(&mut self, index: usize, health: &str) {
        let name = app_name(index);
        self.handles.health.set(&name, health);
        self.record(WorldEvent::Health {
            app: name,
            health: health.to_string(),
        });
    }

    async fn refresh(&mut self) {
        self.refresh_apps(self.live.clone()).await;
    }

    /// Annotates `apps` for a hard refresh.
    async fn refresh_apps(&mut self, apps: Vec<usize>) {
        let patch = Patch::Merge(
            json!({"metadata": {"annotations": {"argocd.argoproj.io/refresh": "hard"}}}),
        );
        let mut failed = 0;
        for index in &apps {
            if self
                .api(*index)
                .patch(&app_name(*index), &PatchParams::default(), &patch)
                .await
                .is_err()
            {
                failed += 1;
            }
        }
        self.record(WorldEvent::Refresh {
            apps: apps.len() as u64,
            failed: failed as u64,
        });
    }

    /// Replays `trace`'s changes after its initial apps (created by now as apps
    /// `0..n`), at their recorded times divided by `speed`. An add or a delete the world
    /// could not make (the API server unreachable, Git down) is retried before each later
    /// change, so none is lost.
    async fn replay(&mut self, trace: &Trace, speed: f64) {
        let initial = trace.initial_apps();
        let mut index_of: BTreeMap<&str, usize> = initial
            .iter()
            .enumerate()
            .map(|(i, app)| (*app, i))
            .collect();
        let mut pending: Vec<&crate::scenario::trace::Record> = Vec::new();
        let start = self.env.elapsed();
        // Rollouts and Workflows are their workloads' to replay.
        for record in trace.changes_of(Kind::Application) {
            let offset = Duration::try_from_secs_f64(record.at_ms as f64 / 1000.0 / speed)
                .unwrap_or(Duration::MAX);
            let at = start.saturating_add(offset);
            self.env.sleep(at.saturating_sub(self.env.elapsed())).await;
            if self.handles.calm.load(Ordering::SeqCst) {
                return;
            }
            let mut retry = std::mem::take(&mut pending);
            retry.push(record);
            for record in retry {
                if !self.apply(record, &mut index_of).await {
                    pending.push(record);
                }
            }
        }
    }

    /// Makes one recorded change; false when it could not be made now (to retry later).
    async fn apply<'t>(
        &mut self,
        record: &'t crate::scenario::trace::Record,
        index_of: &mut BTreeMap<&'t str, usize>,
    ) -> bool {
        // Pushes fail while the Git provider is down: no commits, no new apps.
        let provider_down = self.handles.git.lock().serving.outage;
        let app = record.app.as_str();
        match (&record.change, index_of.get(app).copied()) {
            (Change::Added, _) if provider_down => false,
            (Change::Added, _) => match self.add().await {
                Some(index) => {
                    index_of.insert(app, index);
                    true
                }
                None => false,
            },
            (_, None) => true, // an app whose add is still pending: nothing to change yet
            (Change::Deleted, Some(index)) => {
                let deleted = self.delete(index).await;
                if deleted {
                    index_of.remove(app);
                }
                deleted
            }
            (Change::Revision { .. }, Some(_)) if provider_down => true, // as a failed push
            (Change::Revision { .. }, Some(index)) => {
                self.commit_to(index);
                true
            }
            (Change::Health { health }, Some(index)) => {
                self.set_health(index, health);
                true
            }
            (Change::Refresh, Some(index)) => {
                self.refresh_apps(vec![index]).await;
                true
            }
            // Not an Application's (the trace was checked when read).
            (Change::Phase { .. }, Some(_)) => true,
        }
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
    if let Some(secret) = handles.token_secret.clone() {
        tokio::spawn(manage_token_secret(env.clone(), client.clone(), secret));
    }
    let mut generator = Generator {
        env: env.clone(),
        client,
        layout: handles.layout.clone(),
        next_index: config.applications,
        config,
        handles,
        live: Vec::new(),
        versions: BTreeMap::new(),
        storm_commits: 0,
    };
    // Create the initial apps CREATE_PARALLELISM at a time (10,000 one by one would take
    // most of a scenario); failed creates are retried after a pause.
    // Children are Argo CD's to create (their parent's sync); they change like any app.
    let mut pending: Vec<usize> = (0..generator.config.applications)
        .filter(|i| !generator.layout.is_child(*i))
        .collect();
    generator
        .live
        .extend((0..generator.config.applications).filter(|i| generator.layout.is_child(*i)));
    while !pending.is_empty() && !generator.handles.calm.load(Ordering::SeqCst) {
        let batch: Vec<usize> = pending.iter().copied().take(CREATE_PARALLELISM).collect();
        let results = futures::future::join_all(batch.iter().map(|index| {
            let (api, app) = (
                generator.api(*index),
                orrery_system::env::kube::Wire(application(*index, &generator.layout)),
            );
            async move { (*index, api.create(&PostParams::default(), &app).await) }
        }))
        .await;
        let mut failed = false;
        for (index, result) in results {
            match result {
                Ok(_) | Err(kube::Error::Api(_)) => {
                    // Parents' Git paths hold only child manifests: no commits, no flaps.
                    if !generator.layout.is_parent(index) {
                        generator.live.push(index);
                    }
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
    if let Some(trace) = generator.config.trace.clone() {
        let speed = generator.config.speed;
        generator.replay(&trace, speed).await;
        // A trace that ends early leaves the world as it is until the calm phase.
        while !generator.handles.calm.load(Ordering::SeqCst) {
            env.sleep(Duration::from_secs(1)).await;
        }
        generator.record(WorldEvent::Stopped {
            apps: generator.live.len() as u64,
        });
        return;
    }
    let period = |d: Duration| (!d.is_zero()).then_some(d);
    let periods = [
        period(generator.config.commit_every),
        period(generator.config.churn_every),
        period(generator.config.health_flap_every),
        period(generator.config.refresh_every),
        generator
            .config
            .monorepo
            .as_ref()
            .and_then(|m| period(m.commit_every)),
    ];
    let start = env.elapsed();
    let mut due: Vec<Option<Duration>> = periods.iter().map(|p| p.map(|p| start + p)).collect();
    // The storm starts `start_after` the apps were created.
    if let (Some(storm), Some(monorepo)) = (&mut due[4], &generator.config.monorepo) {
        *storm += monorepo.start_after;
    }
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
        // Pushes fail while the Git provider is down: no commits, no new apps.
        let provider_down = generator.handles.git.lock().serving.outage;
        match action {
            0 | 1 | 4 if provider_down => {}
            0 => generator.commit().await,
            1 => generator.churn().await,
            2 => generator.flap(),
            3 => generator.refresh().await,
            _ => generator.storm(),
        }
        due[action] = periods[action].map(|p| at + p);
    }
    generator.record(WorldEvent::Stopped {
        apps: generator.live.len() as u64,
    });
}
