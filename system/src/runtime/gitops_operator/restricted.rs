//! Restricted Git Sources: the operator turns each `RestrictedGitSource` into the Argo CD
//! objects it describes (research §5: the CRD "looks like an AppProject generator"; its
//! fields are `source`, `sourceNamespace`, `destinations`, `sourceRepos`, resource allow- and
//! deny-lists and `syncPolicy`).
//!
//! For a source `S` (in the operator's namespace) the operator applies, in Argo CD's
//! namespace, both named `S` and marked as generated from it:
//! - an **AppProject**: `sourceRepos` = the source's own repository plus `sourceRepos`;
//!   `destinations` = `destinations` plus the in-cluster `sourceNamespace` (where the Git
//!   Source deploys its Applications); `sourceNamespaces` = [`sourceNamespace`]; the
//!   resource lists copied;
//! - the **Git Source Application**: `source` synced into `sourceNamespace` in project `S`,
//!   with the source's `syncPolicy` (automated when it has none).
//!
//! The Applications the Git Source deploys live in `sourceNamespace` and name project `S`;
//! Argo CD refuses every one outside it. Objects generated from a source that no longer
//! exists are deleted (the Application first, so nothing new is deployed from it; then the
//! project, after which Argo CD refuses the apps left in it). So are those of a source the
//! operator cannot turn into a project (a required field missing: reported `invalid`):
//! its apps are refused until it is fixed — fail closed, never the old permissions. Only
//! objects marked as generated from a source in the operator's own namespace are deleted.
//!
//! **Deny entries** (`!pattern` in `sourceRepos` or in a destination's `server`, `name` or
//! `namespace`). Argo CD's documentation says a repository is permitted when an allow entry
//! matches it and no deny entry does; its code (`IsSourcePermitted`, `isDestinationMatched`,
//! v3.2) counts a deny entry that does not match as a match, so **one deny entry permits
//! every repository (destination) it does not name**, whatever the allow entries say
//! (argoproj/argo-cd#21264, open, labelled bug and security; the Argo CD conformance suite
//! shows it on a real Argo CD 3.2). An admin who writes `team-a/*` and `!team-a/legacy`
//! opens team-a's project to every other tenant's repositories. Argo CD's patterns cannot say
//! "allowed and not denied" once a deny entry is present, so: faithful copies the entries
//! into the project as they are (**inferred**: the operator is described as an AppProject
//! generator and nothing says it rewrites them); hardened refuses such a source as
//! `invalid` — fail closed, its project and Git Source removed, the reason in the event —
//! until its deny entries are gone.
//!
//! **Inferred** (the operator's source is not public): the names, the mapping above and
//! when it runs. faithful reconciles the sources on the task loop's `TASK_POLLING_INTERVAL`
//! (10 s): a changed source reaches Argo CD up to one poll later. hardened watches the
//! sources and reconciles on every change (and every `resync` as a backstop).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::{json, Value};

use super::Config;
use crate::core::json::Pointer as _;
use crate::core::Variant;
use crate::env::kube::SeededBackoff;
use crate::env::SharedEnv;
use crate::observe::OperatorEvent;

/// The annotation naming the source an object was generated from (`namespace/name`).
pub const GENERATED_FROM: &str = "codefresh.io/restricted-git-source";
/// The label every generated object carries (the operator lists by it).
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "codefresh-gitops-operator");
/// The in-cluster destination server.
pub const IN_CLUSTER: &str = "https://kubernetes.default.svc";
/// hardened: a full pass this often even without a change.
pub const RESYNC: Duration = Duration::from_secs(60);

/// The `RestrictedGitSource` type.
pub fn restricted_git_source_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "codefresh.io",
        "v1beta1",
        "RestrictedGitSource",
    ))
}

/// Argo CD's `AppProject` type.
pub fn app_project_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "argoproj.io",
        "v1alpha1",
        "AppProject",
    ))
}

/// Argo CD's `Application` type (the one the reporter watches).
pub use crate::runtime::app_reporter::application_resource;

/// A source the operator cannot turn into a project.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSource {
    /// A required field is missing or empty.
    #[error("RestrictedGitSource {source_name}: spec.{field} is required")]
    Missing {
        /// `namespace/name`.
        source_name: String,
        /// The field.
        field: &'static str,
    },
    /// hardened: a deny entry, which Argo CD would turn into a permit for everything else.
    #[error(
        "RestrictedGitSource {source_name}: spec.{field} has the deny entry {entry:?}; Argo CD permits every value a deny entry does not name (argoproj/argo-cd#21264), so the source is refused until its deny entries are removed"
    )]
    Deny {
        /// `namespace/name`.
        source_name: String,
        /// Where: `sourceRepos` or `destinations[i].server|name|namespace`.
        field: String,
        /// The entry.
        entry: String,
    },
}

/// The Argo CD objects a source describes.
#[derive(Clone, Debug, PartialEq)]
pub struct Generated {
    /// The AppProject.
    pub project: Value,
    /// The Git Source Application.
    pub application: Value,
}

/// The AppProject and Git Source Application `source` describes, in `argocd_namespace`
/// (hardened refuses deny entries: see the module's doc).
pub fn generate(
    source: &DynamicObject,
    argocd_namespace: &str,
    variant: Variant,
) -> Result<Generated, InvalidSource> {
    let name = source.metadata.name.clone().unwrap_or_default();
    let namespace = source.metadata.namespace.clone().unwrap_or_default();
    let source_name = format!("{namespace}/{name}");
    let spec = source.data.get("spec").cloned().unwrap_or(json!({}));
    let missing = |field: &'static str| InvalidSource::Missing {
        source_name: source_name.clone(),
        field,
    };
    let text = |pointer: &str| spec.at(pointer).and_then(Value::as_str).unwrap_or("");
    let repo = text("/source/repoURL");
    if repo.is_empty() {
        return Err(missing("source.repoURL"));
    }
    let source_namespace = text("/sourceNamespace");
    if source_namespace.is_empty() {
        return Err(missing("sourceNamespace"));
    }
    let listed = spec["destinations"].as_array().cloned().unwrap_or_default();
    if listed.is_empty() {
        return Err(missing("destinations"));
    }
    if variant == Variant::Hardened {
        if let Some((field, entry)) = deny_entry(&spec) {
            return Err(InvalidSource::Deny {
                source_name,
                field,
                entry,
            });
        }
    }
    let mut repos = vec![repo.to_string()];
    for extra in spec["sourceRepos"].as_array().into_iter().flatten() {
        if let Some(extra) = extra.as_str().filter(|r| !repos.iter().any(|k| k == r)) {
            repos.push(extra.to_string());
        }
    }
    let home = json!({"server": IN_CLUSTER, "namespace": source_namespace});
    let mut destinations = listed;
    if !destinations.contains(&home) {
        destinations.push(home);
    }
    let metadata = json!({
        "name": name,
        "namespace": argocd_namespace,
        "labels": {MANAGED_BY.0: MANAGED_BY.1},
        "annotations": {GENERATED_FROM: source_name},
    });
    let mut project_spec = json!({
        "description": format!("Generated from RestrictedGitSource {source_name}"),
        "sourceRepos": repos,
        "destinations": destinations,
        "sourceNamespaces": [source_namespace],
    });
    for list in [
        "clusterResourceWhitelist",
        "clusterResourceBlacklist",
        "namespaceResourceWhitelist",
        "namespaceResourceBlacklist",
    ] {
        if let Some(kinds) = spec.get(list).filter(|v| v.is_array()) {
            project_spec[list] = kinds.clone();
        }
    }
    let mut app_source = json!({"repoURL": repo, "path": text("/source/path")});
    if let Some(revision) = spec.at("/source/targetRevision").filter(|v| v.is_string()) {
        app_source["targetRevision"] = revision.clone();
    }
    let sync_policy = spec
        .get("syncPolicy")
        .filter(|p| p.is_object())
        .cloned()
        .unwrap_or_else(|| json!({"automated": {}}));
    Ok(Generated {
        project: json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "AppProject",
            "metadata": metadata,
            "spec": project_spec,
        }),
        application: json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Application",
            "metadata": metadata,
            "spec": {
                "project": name,
                "source": app_source,
                "destination": {"server": IN_CLUSTER, "namespace": source_namespace},
                "syncPolicy": sync_policy,
            },
        }),
    })
}

/// The first deny entry (`!…`) of `spec`'s `sourceRepos` and `destinations`: (field, entry).
pub fn deny_entry(spec: &Value) -> Option<(String, String)> {
    let denies = |v: &Value| {
        v.as_str()
            .filter(|s| s.starts_with('!'))
            .map(str::to_string)
    };
    let repos = spec["sourceRepos"].as_array().into_iter().flatten();
    if let Some(entry) = repos.filter_map(denies).next() {
        return Some(("sourceRepos".into(), entry));
    }
    let destinations = spec["destinations"].as_array().into_iter().flatten();
    for (i, destination) in destinations.enumerate() {
        for key in ["server", "name", "namespace"] {
            if let Some(entry) = denies(&destination[key]) {
                return Some((format!("destinations[{i}].{key}"), entry));
            }
        }
    }
    None
}

/// The sources' reconciler while this replica leads.
pub struct Generator {
    env: SharedEnv,
    config: Config,
    sources: Api<DynamicObject>,
    projects: Api<DynamicObject>,
    applications: Api<DynamicObject>,
}

/// Why a pass stopped early (retried at the next one).
#[derive(Debug, thiserror::Error)]
enum PassError {
    #[error("{what}: {error}")]
    Api {
        what: String,
        #[source]
        error: kube::Error,
    },
}

impl Generator {
    /// Clients for `config`.
    pub fn new(env: SharedEnv, config: Config) -> Self {
        let client = crate::env::kube::client(env.clone(), &config.apiserver);
        let argocd = config.argocd_namespace.clone();
        Generator {
            sources: Api::namespaced_with(
                client.clone(),
                &config.apiserver.namespace,
                &restricted_git_source_resource(),
            ),
            projects: Api::namespaced_with(client.clone(), &argocd, &app_project_resource()),
            applications: Api::namespaced_with(client, &argocd, &application_resource()),
            env,
            config,
        }
    }

    fn host(&self) -> String {
        self.env.identity().host.clone()
    }

    fn observe(&self, source: &str, action: &str, detail: String) {
        self.env.observe(
            OperatorEvent::Source {
                host: self.host(),
                source: source.to_string(),
                action: action.to_string(),
                detail,
            }
            .into(),
        );
    }

    /// One pass: every source's objects applied when they differ, orphans deleted.
    pub async fn pass(&self) {
        if let Err(error) = self.try_pass().await {
            self.env.observe(
                OperatorEvent::WatchError {
                    host: self.host(),
                    error: error.to_string(),
                }
                .into(),
            );
        }
    }

    async fn try_pass(&self) -> Result<(), PassError> {
        let api = |what: &str| {
            let what = what.to_string();
            move |error| PassError::Api { what, error }
        };
        let sources = self
            .sources
            .list(&ListParams::default())
            .await
            .map_err(api("list RestrictedGitSources"))?;
        let selector = format!("{}={}", MANAGED_BY.0, MANAGED_BY.1);
        let managed = ListParams::default().labels(&selector);
        let projects = self
            .projects
            .list(&managed)
            .await
            .map_err(api("list AppProjects"))?;
        let applications = self
            .applications
            .list(&managed)
            .await
            .map_err(api("list Applications"))?;
        let by_name = |list: Vec<DynamicObject>| -> BTreeMap<String, DynamicObject> {
            list.into_iter()
                .filter_map(|o| Some((o.metadata.name.clone()?, o)))
                .collect()
        };
        let (projects, applications) = (by_name(projects.items), by_name(applications.items));
        let mut wanted = BTreeMap::new();
        for source in sources.items {
            let key = format!(
                "{}/{}",
                source.metadata.namespace.as_deref().unwrap_or(""),
                source.metadata.name.as_deref().unwrap_or("")
            );
            match generate(&source, &self.config.argocd_namespace, self.config.variant) {
                Ok(generated) => {
                    wanted.insert(
                        source.metadata.name.clone().unwrap_or_default(),
                        (key, generated),
                    );
                }
                Err(invalid) => self.observe(&key, "invalid", invalid.to_string()),
            }
        }
        for (name, (key, generated)) in &wanted {
            // The project before the Application that uses it.
            if differs(projects.get(name), &generated.project) {
                self.apply(&self.projects, name, &generated.project)
                    .await
                    .map_err(api(&format!("apply AppProject {name}")))?;
                self.observe(key, "project_applied", name.clone());
            }
            if differs(applications.get(name), &generated.application) {
                self.apply(&self.applications, name, &generated.application)
                    .await
                    .map_err(api(&format!("apply Application {name}")))?;
                self.observe(key, "application_applied", name.clone());
            }
        }
        // Orphans: the Application first (nothing new deployed from it), then the project.
        for (list, api_of, kind) in [
            (&applications, &self.applications, "Application"),
            (&projects, &self.projects, "AppProject"),
        ] {
            for (name, object) in list {
                if wanted.contains_key(name) {
                    continue;
                }
                let from = object
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(GENERATED_FROM))
                    .cloned()
                    .unwrap_or_default();
                // Only what this operator generated: from a source in its own namespace.
                let ours = from
                    .split_once('/')
                    .is_some_and(|(namespace, _)| namespace == self.config.apiserver.namespace);
                if !ours {
                    continue;
                }
                match api_of.delete(name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(error) => {
                        return Err(PassError::Api {
                            what: format!("delete {kind} {name}"),
                            error,
                        })
                    }
                }
                let action = if kind == "AppProject" {
                    "project_deleted"
                } else {
                    "application_deleted"
                };
                self.observe(&from, action, name.clone());
            }
        }
        Ok(())
    }

    async fn apply(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        object: &Value,
    ) -> Result<(), kube::Error> {
        let params = PatchParams::apply("codefresh-gitops-operator").force();
        api.patch(name, &params, &Patch::Apply(object))
            .await
            .map(|_| ())
    }

    /// Reconciles until the caller drops it: faithful every `task_polling`, hardened on
    /// every change of a source and every [`RESYNC`].
    pub async fn run(&self) {
        match self.config.variant {
            Variant::Faithful => loop {
                self.pass().await;
                self.env.sleep(self.config.task_polling).await;
            },
            Variant::Hardened => {
                let mut events = watcher(self.sources.clone(), watcher::Config::default())
                    .backoff(SeededBackoff::new(self.env.clone()))
                    .boxed();
                loop {
                    tokio::select! {
                        event = events.next() => match event {
                            Some(Ok(
                                watcher::Event::Apply(_)
                                | watcher::Event::Delete(_)
                                | watcher::Event::InitDone,
                            )) => self.pass().await,
                            Some(Ok(_)) => {}
                            Some(Err(error)) => self.env.observe(
                                OperatorEvent::WatchError {
                                    host: self.host(),
                                    error: error.to_string(),
                                }
                                .into(),
                            ),
                            None => return,
                        },
                        () = self.env.sleep(RESYNC) => self.pass().await,
                    }
                }
            }
        }
    }
}

/// Whether `current` (as the API server holds it) lacks what `wanted` sets: its labels,
/// annotations and spec.
fn differs(current: Option<&DynamicObject>, wanted: &Value) -> bool {
    let Some(current) = current else {
        return true;
    };
    let labels = serde_json::to_value(&current.metadata.labels).unwrap_or(Value::Null);
    let annotations = serde_json::to_value(&current.metadata.annotations).unwrap_or(Value::Null);
    let holds = |have: &Value, want: &Value| {
        want.as_object()
            .into_iter()
            .flatten()
            .all(|(k, v)| have.get(k) == Some(v))
    };
    !(holds(&labels, &wanted["metadata"]["labels"])
        && holds(&annotations, &wanted["metadata"]["annotations"])
        && current.data.get("spec") == wanted.get("spec"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(spec: Value) -> DynamicObject {
        let mut s =
            DynamicObject::new("team-a", &restricted_git_source_resource()).within("runtime");
        s.data = json!({ "spec": spec });
        s
    }

    #[test]
    fn a_source_becomes_its_project_and_git_source_application() {
        let generated = generate(
            &source(json!({
                "source": {"repoURL": "https://git.example/team-a/apps.git", "path": "apps"},
                "sourceNamespace": "team-a",
                "sourceRepos": ["https://git.example/team-a/*", "https://git.example/team-a/apps.git"],
                "destinations": [{"server": IN_CLUSTER, "namespace": "team-a-*"}],
                "namespaceResourceBlacklist": [{"group": "", "kind": "Secret"}],
            })),
            "argocd",
            Variant::Faithful,
        )
        .expect("valid");
        assert_eq!(
            generated.project["spec"],
            json!({
                "description": "Generated from RestrictedGitSource runtime/team-a",
                "sourceRepos": ["https://git.example/team-a/apps.git", "https://git.example/team-a/*"],
                "destinations": [
                    {"server": IN_CLUSTER, "namespace": "team-a-*"},
                    {"server": IN_CLUSTER, "namespace": "team-a"},
                ],
                "sourceNamespaces": ["team-a"],
                "namespaceResourceBlacklist": [{"group": "", "kind": "Secret"}],
            })
        );
        assert_eq!(generated.project["metadata"]["namespace"], "argocd");
        assert_eq!(
            generated.project["metadata"]["annotations"][GENERATED_FROM],
            "runtime/team-a"
        );
        assert_eq!(
            generated.application["spec"],
            json!({
                "project": "team-a",
                "source": {"repoURL": "https://git.example/team-a/apps.git", "path": "apps"},
                "destination": {"server": IN_CLUSTER, "namespace": "team-a"},
                "syncPolicy": {"automated": {}},
            })
        );
    }

    #[test]
    fn a_source_missing_a_required_field_is_named() {
        let error = generate(
            &source(json!({"source": {"repoURL": "https://x"}, "sourceNamespace": "a"})),
            "argocd",
            Variant::Faithful,
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "RestrictedGitSource runtime/team-a: spec.destinations is required"
        );
        let error = generate(
            &source(json!({"destinations": [{}]})),
            "argocd",
            Variant::Faithful,
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "RestrictedGitSource runtime/team-a: spec.source.repoURL is required"
        );
    }

    #[test]
    fn hardened_refuses_a_deny_entry_and_faithful_copies_it() {
        let spec = |repos: Value, namespace: &str| {
            source(json!({
                "source": {"repoURL": "https://git.example/team-a/gitops.git"},
                "sourceNamespace": "team-a",
                "sourceRepos": repos,
                "destinations": [{"server": IN_CLUSTER, "namespace": namespace}],
            }))
        };
        let denying = spec(
            json!([
                "https://git.example/team-a/*",
                "!https://git.example/team-a/legacy*"
            ]),
            "team-a-*",
        );
        let copied = generate(&denying, "argocd", Variant::Faithful).expect("faithful copies it");
        assert_eq!(
            copied.project["spec"]["sourceRepos"],
            json!([
                "https://git.example/team-a/gitops.git",
                "https://git.example/team-a/*",
                "!https://git.example/team-a/legacy*"
            ])
        );
        let error = generate(&denying, "argocd", Variant::Hardened).unwrap_err();
        assert_eq!(
            error.to_string(),
            "RestrictedGitSource runtime/team-a: spec.sourceRepos has the deny entry \"!https://git.example/team-a/legacy*\"; Argo CD permits every value a deny entry does not name (argoproj/argo-cd#21264), so the source is refused until its deny entries are removed"
        );
        let error = generate(
            &spec(json!(["https://git.example/team-a/*"]), "!kube-*"),
            "argocd",
            Variant::Hardened,
        )
        .unwrap_err();
        assert!(
            matches!(&error, InvalidSource::Deny { field, entry, .. }
                if field == "destinations[0].namespace" && entry == "!kube-*"),
            "{error}"
        );
        // Without deny entries both variants generate the same objects.
        let plain = spec(json!(["https://git.example/team-a/*"]), "team-a-*");
        assert_eq!(
            generate(&plain, "argocd", Variant::Hardened).unwrap(),
            generate(&plain, "argocd", Variant::Faithful).unwrap()
        );
    }

    #[test]
    fn an_applied_object_that_holds_the_spec_is_left_alone() {
        let generated = generate(
            &source(json!({
                "source": {"repoURL": "https://x"},
                "sourceNamespace": "a",
                "destinations": [{"server": IN_CLUSTER, "namespace": "a"}],
            })),
            "argocd",
            Variant::Faithful,
        )
        .unwrap();
        let held: DynamicObject = serde_json::from_value(generated.project.clone()).unwrap();
        assert!(!differs(Some(&held), &generated.project));
        let mut changed = held.clone();
        changed.data["spec"]["sourceRepos"] = json!(["*"]);
        assert!(differs(Some(&changed), &generated.project));
        assert!(differs(None, &generated.project));
    }
}
