//! The restricted-sources world: the platform team's RestrictedGitSources (applied at the
//! start and changed over time), the tenants' repositories (Application manifests their
//! Git Sources deploy, and the workloads those apps point at, with new versions committed
//! every `commit_every`), and a monitor that reports what Argo CD deployed and refused and
//! which AppProjects it was given — the typed events the `restricted_*` checkers judge.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::{json, Value};

use orrery_system::core::json::Pointer as _;
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
        let mut object: DynamicObject = serde_json::from_value(source.clone())
            .map_err(|e| format!("sources[{i}] ({name}): {e}"))?;
        object.metadata.namespace = Some(argocd::NAMESPACE.into());
        orrery_system::runtime::gitops_operator::restricted::generate(
            &object,
            argocd::NAMESPACE,
            orrery_system::core::Variant::Faithful,
        )
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

/// Checks the changes in time order: each names a source of the file and does exactly one
/// thing that makes sense then (`set` and `delete` on a source that exists, `restore` on one
/// that was deleted), and a `set` leaves a source the operator can turn into a project.
pub fn check_changes(restricted: &RestrictedSources) -> Result<(), String> {
    let mut state: BTreeMap<String, Option<Value>> = BTreeMap::new();
    for source in &restricted.sources {
        let name = source["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if state.insert(name.clone(), Some(source.clone())).is_some() {
            return Err(format!("sources: {name:?} is named twice"));
        }
    }
    let mut order: Vec<(usize, &crate::scenario::model::SourceChange)> =
        restricted.changes.iter().enumerate().collect();
    order.sort_by_key(|(i, c)| (c.at, *i));
    for (i, change) in order {
        let at = format!("changes[{i}] (source {:?})", change.source);
        let Some(current) = state.get_mut(&change.source) else {
            return Err(format!("{at}: the file has no such source"));
        };
        let actions = usize::from(change.set.is_some())
            + usize::from(change.delete)
            + usize::from(change.restore);
        if actions != 1 {
            return Err(format!("{at}: want exactly one of set, delete, restore"));
        }
        match (current.as_mut(), change.set.as_ref()) {
            (Some(source), Some(set)) => {
                for (field, value) in set {
                    source["spec"][field] = value.clone();
                }
                let mut object: DynamicObject =
                    serde_json::from_value(source.clone()).map_err(|e| format!("{at}: {e}"))?;
                object.metadata.namespace = Some(argocd::NAMESPACE.into());
                orrery_system::runtime::gitops_operator::restricted::generate(
                    &object,
                    argocd::NAMESPACE,
                    orrery_system::core::Variant::Faithful,
                )
                .map_err(|e| format!("{at}: after set: {e}"))?;
            }
            (None, Some(_)) => return Err(format!("{at}: set on a deleted source")),
            (Some(_), None) if change.delete => *current = None,
            (None, None) if change.restore => {
                *current = restricted
                    .sources
                    .iter()
                    .find(|s| s["metadata"]["name"] == change.source.as_str())
                    .cloned();
            }
            (Some(_), None) => return Err(format!("{at}: restore of a source that exists")),
            (None, None) => return Err(format!("{at}: delete of a deleted source")),
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
            // Created (409: by an attempt whose answer was lost).
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 409 => break,
            Err(kube::Error::Api(e)) if (400..500).contains(&e.code) && e.code != 429 => return,
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
            // Refused (the scenario's parse checks what it can): nothing changed.
            Err(kube::Error::Api(status))
                if (400..500).contains(&status.code) && status.code != 429 =>
            {
                return
            }
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
    let mut seen_apps = SeenApps::default();
    // Project → the spec last reported; the names a relist delivered so far.
    let mut given: BTreeMap<String, Value> = BTreeMap::new();
    let mut listing: Option<BTreeSet<String>> = None;
    let gone = |env: &SharedEnv, name: String| {
        env.observe(
            WorldEvent::ProjectSeen {
                project: name,
                spec: Value::Null,
            }
            .into(),
        )
    };
    while let Some(seen) = events.next().await {
        match seen {
            Seen::App(Ok(watcher::Event::Apply(app) | watcher::Event::InitApply(app))) => {
                seen_apps.look_at(&env, &app);
            }
            Seen::App(Ok(watcher::Event::Delete(app))) => seen_apps.forget(&app),
            Seen::Project(Ok(watcher::Event::Init)) => listing = Some(BTreeSet::new()),
            Seen::Project(Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p))) => {
                let name = p.metadata.name.clone().unwrap_or_default();
                if let Some(listing) = listing.as_mut() {
                    listing.insert(name.clone());
                }
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
            // Projects deleted while the watch was down are missing from its relist.
            Seen::Project(Ok(watcher::Event::InitDone)) => {
                let listed = listing.take().unwrap_or_default();
                let missing: Vec<String> = given
                    .keys()
                    .filter(|name| !listed.contains(*name))
                    .cloned()
                    .collect();
                for name in missing {
                    given.remove(&name);
                    gone(&env, name);
                }
            }
            Seen::Project(Ok(watcher::Event::Delete(p))) => {
                let name = p.metadata.name.clone().unwrap_or_default();
                if given.remove(&name).is_some() {
                    gone(&env, name);
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

/// What the monitor reported of each app: per `namespace/name`, its uid and the last
/// history id reported (a re-created app starts its history again), and the refusal last
/// reported.
#[derive(Default)]
struct SeenApps {
    deployed: BTreeMap<String, (String, i64)>,
    refused: BTreeMap<String, String>,
}

impl SeenApps {
    fn forget(&mut self, app: &DynamicObject) {
        let key = key_of(app);
        self.deployed.remove(&key);
        self.refused.remove(&key);
    }

    /// Reports `app`'s history entries not reported yet, each at the time Argo CD recorded
    /// it, and a project refusal that is new.
    fn look_at(&mut self, env: &SharedEnv, app: &DynamicObject) {
        let key = key_of(app);
        let uid = app.metadata.uid.clone().unwrap_or_default();
        let project = project_name(app);
        let text = |value: &Value, pointer: &str| {
            value
                .at(pointer)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let seen = match self.deployed.get(&key) {
            Some((known, id)) if *known == uid => *id,
            _ => -1,
        };
        // Run time = Unix time − the run's epoch.
        let now_ms = env.elapsed().as_millis() as u64;
        let epoch = env.unix_millis().saturating_sub(now_ms);
        let (server, namespace) = argocd::clusters::destination_of(app);
        let parent = app
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app.kubernetes.io/instance"))
            .cloned()
            .unwrap_or_default();
        let mut last = seen;
        for entry in app
            .data
            .at("/status/history")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let id = entry["id"].as_i64().unwrap_or(0);
            if id <= seen {
                continue;
            }
            last = last.max(id);
            let deployed_at_ms = entry["deployedAt"]
                .as_str()
                .and_then(orrery_system::core::time::parse_rfc3339)
                .map_or(now_ms, |unix| unix.saturating_sub(epoch));
            let mut repo = text(entry, "/source/repoURL");
            if repo.is_empty() {
                repo = text(&app.data, "/spec/source/repoURL");
            }
            env.observe(
                WorldEvent::AppDeployed {
                    app: key.clone(),
                    project: project.clone(),
                    parent: parent.clone(),
                    repo,
                    server: server.clone(),
                    namespace: namespace.clone(),
                    revision: text(entry, "/revision"),
                    deployed_at_ms,
                }
                .into(),
            );
        }
        if last > seen {
            self.deployed.insert(key.clone(), (uid, last));
        }
        // A project refusal (cluster conditions are not this monitor's business).
        let refusal = app
            .data
            .at("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| {
                matches!(
                    c["type"].as_str(),
                    Some("InvalidSpecError" | "UnknownError")
                ) && c["message"].as_str().is_some_and(|m| m.contains("project"))
            });
        match refusal {
            Some(condition) => {
                let message = text(condition, "/message");
                if self.refused.get(&key) != Some(&message) {
                    self.refused.insert(key.clone(), message.clone());
                    env.observe(
                        WorldEvent::AppRefused {
                            app: key,
                            project,
                            condition: text(condition, "/type"),
                            message,
                        }
                        .into(),
                    );
                }
            }
            None => {
                self.refused.remove(&key);
            }
        }
    }
}

fn key_of(app: &DynamicObject) -> String {
    argocd::app_key(
        app.metadata.namespace.as_deref().unwrap_or(""),
        app.metadata.name.as_deref().unwrap_or(""),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::model::SourceChange;

    const FILE: &str = "sources:
  - apiVersion: codefresh.io/v1beta1
    kind: RestrictedGitSource
    metadata: {name: team-a}
    spec:
      source: {repoURL: https://git.example/team-a/gitops.git, path: apps}
      sourceNamespace: team-a
      destinations: [{server: https://kubernetes.default.svc, namespace: team-a}]
repositories:
  https://git.example/team-a/gitops.git:
    apps/web.yaml: 'kind: Application'
";

    fn with(changes: Vec<SourceChange>) -> Result<(), String> {
        let (sources, repositories) = read_resources(FILE)?;
        check_changes(&RestrictedSources {
            resources: "f.yaml".into(),
            commit_every: Duration::from_secs(15),
            changes,
            sources,
            repositories,
        })
    }

    fn change(at: u64, kind: &str) -> SourceChange {
        SourceChange {
            at: Duration::from_secs(at),
            source: "team-a".into(),
            set: (kind == "set")
                .then(|| serde_json::from_value(json!({"destinations": []})).unwrap()),
            delete: kind == "delete",
            restore: kind == "restore",
        }
    }

    #[test]
    fn changes_that_cannot_apply_are_named_at_parse_time() {
        assert_eq!(
            with(vec![change(1, "delete"), change(2, "restore")]),
            Ok(())
        );
        let error = |changes| with(changes).unwrap_err();
        assert_eq!(
            error(vec![change(1, "set")]),
            "changes[0] (source \"team-a\"): after set: RestrictedGitSource argocd/team-a: spec.destinations is required"
        );
        assert_eq!(
            error(vec![change(1, "restore")]),
            "changes[0] (source \"team-a\"): restore of a source that exists"
        );
        // In time order, whatever the list order.
        assert_eq!(
            error(vec![change(5, "delete"), change(2, "delete")]),
            "changes[0] (source \"team-a\"): delete of a deleted source"
        );
        let mut other = change(1, "delete");
        other.source = "team-c".into();
        assert_eq!(
            error(vec![other]),
            "changes[0] (source \"team-c\"): the file has no such source"
        );
        let mut both = change(1, "delete");
        both.restore = true;
        assert!(error(vec![both]).ends_with("want exactly one of set, delete, restore"));
    }

    #[test]
    fn a_malformed_resources_file_is_named() {
        assert!(read_resources("- a list")
            .unwrap_err()
            .contains("want a mapping"));
        assert!(read_resources("sources: []\nrepos: {}")
            .unwrap_err()
            .contains("unknown field \"repos\""));
        let twice = FILE.replace(
                "repositories:",
                "  - {apiVersion: codefresh.io/v1beta1, kind: RestrictedGitSource, metadata: {name: team-a}, spec: {source: {repoURL: x}, sourceNamespace: a, destinations: [{namespace: a}]}}\nrepositories:"
            );
        let (sources, repositories) = read_resources(&twice).unwrap();
        let error = check_changes(&RestrictedSources {
            resources: "f.yaml".into(),
            commit_every: Duration::ZERO,
            changes: Vec::new(),
            sources,
            repositories,
        })
        .unwrap_err();
        assert_eq!(error, "sources: \"team-a\" is named twice");
    }
}
