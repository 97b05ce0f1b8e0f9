//! The restricted-sources world: the platform team's RestrictedGitSources (applied at the
//! start and changed over time), the tenants' repositories (Application manifests their
//! Git Sources deploy, and the workloads those apps point at, with new versions committed
//! every `commit_every`), and a monitor that reports what Argo CD deployed and refused and
//! which AppProjects it was given — the typed events the `restricted_*` checkers judge.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::{json, Value};

use orrery_system::env::kube::SeededBackoff;
use orrery_system::env::SharedEnv;
use orrery_system::observe::WorldEvent;
use orrery_system::runtime::gitops_operator::restricted::{
    app_project_resource, restricted_git_source_resource,
};

use super::argocd::{self, projects::project_name};
use super::git::SharedGit;
use crate::scenario::model::RestrictedSources;

/// The platform team's commits and the tenants' author.
const AUTHOR: &str = "Tenant <dev@tenant.example>";
/// The file name whose content gets a new version every `commit_every`.
pub const VERSIONED_FILE: &str = "deployment.yaml";

/// The sources and repositories of a resources file; an error names what is wrong.
#[allow(clippy::type_complexity)]
pub fn read_resources(
    text: &str,
) -> Result<(Vec<Value>, BTreeMap<String, BTreeMap<String, String>>), String> {
    let document: Value = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
    let Some(map) = document.as_object() else {
        return Err("want a mapping with `sources` and `repositories`".into());
    };
    if let Some(unknown) = map
        .keys()
        .find(|k| !matches!(k.as_str(), "sources" | "repositories"))
    {
        return Err(format!(
            "unknown field {unknown:?}; known fields are sources, repositories"
        ));
    }
    let mut sources = Vec::new();
    for (i, source) in map
        .get("sources")
        .and_then(Value::as_array)
        .ok_or("`sources` must be a list of RestrictedGitSource objects")?
        .iter()
        .enumerate()
    {
        if source["kind"] != "RestrictedGitSource" {
            return Err(format!("sources[{i}]: kind must be RestrictedGitSource"));
        }
        let name = source["metadata"]["name"].as_str().unwrap_or("");
        if name.is_empty() {
            return Err(format!("sources[{i}]: metadata.name is required"));
        }
        let object: DynamicObject = serde_json::from_value(source.clone())
            .map_err(|e| format!("sources[{i}] ({name}): {e}"))?;
        orrery_system::runtime::gitops_operator::restricted::generate(&object, argocd::NAMESPACE)
            .map_err(|e| format!("sources[{i}]: {e}"))?;
        sources.push(source.clone());
    }
    let mut repositories = BTreeMap::new();
    for (url, files) in map
        .get("repositories")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let mut contents = BTreeMap::new();
        for (file, content) in files.as_object().into_iter().flatten() {
            let Some(content) = content.as_str() else {
                return Err(format!("repositories.{url}.{file}: want the file's text"));
            };
            contents.insert(file.clone(), content.to_string());
        }
        if contents.is_empty() {
            return Err(format!("repositories.{url}: want at least one file"));
        }
        repositories.insert(url.clone(), contents);
    }
    Ok((sources, repositories))
}

/// Checks that every change names a source of the file and does exactly one thing.
pub fn check_changes(restricted: &RestrictedSources) -> Result<(), String> {
    for (i, change) in restricted.changes.iter().enumerate() {
        if !restricted
            .sources
            .iter()
            .any(|s| s["metadata"]["name"] == change.source.as_str())
        {
            return Err(format!(
                "changes[{i}]: source {:?} is not in the file",
                change.source
            ));
        }
        let actions = usize::from(change.set.is_some())
            + usize::from(change.delete)
            + usize::from(change.restore);
        if actions != 1 {
            return Err(format!(
                "changes[{i}]: want exactly one of set, delete, restore"
            ));
        }
    }
    Ok(())
}

/// Puts the tenants' repositories in Git (once: a restarted workload finds them there).
pub fn seed_git(git: &SharedGit, restricted: &RestrictedSources, unix_ms: u64) {
    let mut git = git.lock();
    for (url, files) in &restricted.repositories {
        if git.head(url).is_none() {
            git.commit(url, AUTHOR, "initial", unix_ms, files.clone());
        }
    }
}

/// One timed action.
enum Action {
    Change(usize),
    Commit(u32),
}

/// The workload: applies the sources, then the timed changes, and commits new versions.
pub async fn run(
    env: SharedEnv,
    client: kube::Client,
    git: SharedGit,
    restricted: RestrictedSources,
) {
    let booted = env.elapsed();
    let sources: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        argocd::NAMESPACE,
        &restricted_git_source_resource(),
    );
    tokio::spawn(monitor(env.clone(), client));
    if booted.is_zero() {
        for source in &restricted.sources {
            create(&env, &sources, source).await;
        }
    }
    let end = Duration::from_secs(24 * 3600);
    let mut actions: Vec<(Duration, Action)> = restricted
        .changes
        .iter()
        .enumerate()
        .map(|(i, c)| (c.at, Action::Change(i)))
        .collect();
    if !restricted.commit_every.is_zero() {
        let mut at = restricted.commit_every;
        let mut n = 2;
        while at < end && n < 10_000 {
            actions.push((at, Action::Commit(n)));
            at += restricted.commit_every;
            n += 1;
        }
    }
    actions.sort_by_key(|a| a.0);
    actions.retain(|(at, _)| *at >= booted);
    for (at, action) in actions {
        let now = env.elapsed();
        if at > now {
            env.sleep(at - now).await;
        }
        match action {
            Action::Commit(n) => commit_versions(&env, &git, &restricted, n),
            Action::Change(i) => {
                let change = &restricted.changes[i];
                let Some(original) = restricted
                    .sources
                    .iter()
                    .find(|s| s["metadata"]["name"] == change.source.as_str())
                else {
                    continue;
                };
                if change.delete {
                    delete(&env, &sources, &change.source).await;
                } else if change.restore {
                    create(&env, &sources, original).await;
                } else if let Some(set) = &change.set {
                    update(&env, &sources, &change.source, set).await;
                }
            }
        }
    }
}

/// A new version of every `deployment.yaml`, one commit per repository.
fn commit_versions(env: &SharedEnv, git: &SharedGit, restricted: &RestrictedSources, n: u32) {
    let mut git = git.lock();
    for (url, files) in &restricted.repositories {
        let changes: BTreeMap<String, String> = files
            .iter()
            .filter(|(file, _)| file.rsplit('/').next() == Some(VERSIONED_FILE))
            .map(|(file, content)| (file.clone(), format!("{content}# version {n}\n")))
            .collect();
        if !changes.is_empty() {
            git.commit(
                url,
                AUTHOR,
                &format!("version {n}"),
                env.unix_millis(),
                changes,
            );
        }
    }
}

/// Creates `source` (retrying until the API server answers); records what was applied.
async fn create(env: &SharedEnv, api: &Api<DynamicObject>, source: &Value) {
    let Ok(mut object) = serde_json::from_value::<DynamicObject>(source.clone()) else {
        return;
    };
    object.metadata.namespace = Some(argocd::NAMESPACE.into());
    let name = object.metadata.name.clone().unwrap_or_default();
    loop {
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 409 => break,
            Err(_) => env.sleep(Duration::from_secs(1)).await,
        }
    }
    record(env, &name, source["spec"].clone());
}

/// Replaces fields of `name`'s spec (retrying until the API server answers).
async fn update(
    env: &SharedEnv,
    api: &Api<DynamicObject>,
    name: &str,
    set: &serde_json::Map<String, Value>,
) {
    let patch = json!({"spec": Value::Object(set.clone())});
    loop {
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(updated) => {
                record(env, name, updated.data["spec"].clone());
                return;
            }
            Err(kube::Error::Api(status)) if status.code == 404 => return,
            Err(_) => env.sleep(Duration::from_secs(1)).await,
        }
    }
}

/// Deletes `name` (retrying until the API server answers).
async fn delete(env: &SharedEnv, api: &Api<DynamicObject>, name: &str) {
    loop {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 404 => break,
            Err(_) => env.sleep(Duration::from_secs(1)).await,
        }
    }
    record(env, name, Value::Null);
}

fn record(env: &SharedEnv, source: &str, spec: Value) {
    env.observe(
        WorldEvent::SourceChanged {
            source: source.to_string(),
            spec,
        }
        .into(),
    );
}

/// Watches Applications (every namespace) and AppProjects (in `argocd`) and reports what
/// Argo CD deployed, refused and was given.
async fn monitor(env: SharedEnv, client: kube::Client) {
    let apps: Api<DynamicObject> = Api::all_with(client.clone(), &argocd::application_resource());
    let projects: Api<DynamicObject> =
        Api::namespaced_with(client, argocd::NAMESPACE, &app_project_resource());
    let apps = watcher(apps, watcher::Config::default())
        .backoff(SeededBackoff::new(env.clone()))
        .map(Seen::App);
    let projects = watcher(projects, watcher::Config::default())
        .backoff(SeededBackoff::new(env.clone()))
        .map(Seen::Project);
    let mut events = futures::stream::select(apps, projects).boxed();
    // App → the last history id reported, and the refusal last reported.
    let mut deployed: BTreeMap<String, i64> = BTreeMap::new();
    let mut refused: BTreeMap<String, String> = BTreeMap::new();
    // Project → the spec last reported.
    let mut given: BTreeMap<String, Value> = BTreeMap::new();
    while let Some(seen) = events.next().await {
        match seen {
            Seen::App(Ok(watcher::Event::Apply(app) | watcher::Event::InitApply(app))) => {
                look_at_app(&env, &app, &mut deployed, &mut refused);
            }
            Seen::Project(Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p))) => {
                let name = p.metadata.name.clone().unwrap_or_default();
                let spec = p.data.get("spec").cloned().unwrap_or(Value::Null);
                if given.get(&name) != Some(&spec) {
                    given.insert(name.clone(), spec.clone());
                    env.observe(
                        WorldEvent::ProjectSeen {
                            project: name,
                            spec,
                        }
                        .into(),
                    );
                }
            }
            Seen::Project(Ok(watcher::Event::Delete(p))) => {
                let name = p.metadata.name.clone().unwrap_or_default();
                if given.remove(&name).is_some() {
                    env.observe(
                        WorldEvent::ProjectSeen {
                            project: name,
                            spec: Value::Null,
                        }
                        .into(),
                    );
                }
            }
            _ => {}
        }
    }
}

/// What the monitor's watches deliver.
enum Seen {
    App(Result<watcher::Event<DynamicObject>, watcher::Error>),
    Project(Result<watcher::Event<DynamicObject>, watcher::Error>),
}

fn look_at_app(
    env: &SharedEnv,
    app: &DynamicObject,
    deployed: &mut BTreeMap<String, i64>,
    refused: &mut BTreeMap<String, String>,
) {
    let key = argocd::app_key(
        app.metadata.namespace.as_deref().unwrap_or(""),
        app.metadata.name.as_deref().unwrap_or(""),
    );
    let project = project_name(app);
    let text = |pointer: &str| {
        app.data
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    if let Some(last) = app
        .data
        .pointer("/status/history")
        .and_then(Value::as_array)
        .and_then(|h| h.last())
    {
        let id = last["id"].as_i64().unwrap_or(0);
        if deployed.get(&key).is_none_or(|seen| id > *seen) {
            deployed.insert(key.clone(), id);
            let (server, namespace) = argocd::controller::destination_of(app);
            env.observe(
                WorldEvent::AppDeployed {
                    app: key.clone(),
                    project: project.clone(),
                    parent: app
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("app.kubernetes.io/instance"))
                        .cloned()
                        .unwrap_or_default(),
                    repo: text("/spec/source/repoURL"),
                    server,
                    namespace,
                    revision: last["revision"].as_str().unwrap_or("").to_string(),
                }
                .into(),
            );
        }
    }
    let refusal = app
        .data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| {
            matches!(
                c["type"].as_str(),
                Some("InvalidSpecError" | "UnknownError")
            )
        });
    match refusal {
        Some(condition) => {
            let message = condition["message"].as_str().unwrap_or("").to_string();
            if refused.get(&key) != Some(&message) {
                refused.insert(key.clone(), message.clone());
                env.observe(
                    WorldEvent::AppRefused {
                        app: key,
                        project,
                        condition: condition["type"].as_str().unwrap_or("").to_string(),
                        message,
                    }
                    .into(),
                );
            }
        }
        None => {
            refused.remove(&key);
        }
    }
}
