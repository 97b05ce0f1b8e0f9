//! AppProjects: what an Application may use, as Argo CD enforces it before comparing or
//! syncing an app (argo-cd `util/argo` `ValidatePermissions`, `GetAppProject`).
//!
//! An app names its project in `spec.project` (empty means `default`). Argo CD refuses it —
//! a condition on the app, sync and health `Unknown`, no sync — when
//! - the project does not exist: `InvalidSpecError`, "Application referencing project P
//!   which does not exist";
//! - the app lives outside Argo CD's own namespace and the project's `sourceNamespaces` do
//!   not match that namespace: `UnknownError`, "application 'A' in namespace 'N' is not
//!   permitted to use project 'P'";
//! - its `spec.source.repoURL` matches none of `sourceRepos`: `InvalidSpecError`,
//!   "application repo R is not permitted in project 'P'";
//! - its destination matches none of `destinations`: `InvalidSpecError`, "application
//!   destination server 'S' and namespace 'N' do not match any of the allowed destinations
//!   in project 'P'".
//!
//! Matching follows argo-cd v3.2's `AppProject` (`IsSourcePermitted`,
//! `isDestinationMatched`, `globMatch`, `IsAppNamespacePermitted`): repositories are compared
//! normalised (lower case, without `.git`) as globs whose `*` stops at `/` (`**` crosses it);
//! destination servers and namespaces are globs whose `*` matches anything; a pattern
//! starting with `!` matches what it does not name — so a deny entry alone permits every
//! other value, and a value it names is refused whatever else permits it; `sourceNamespaces`
//! are globs without negation. An app-of-apps parent deploys a child Application only into
//! a namespace its own project permits (the child is a namespaced resource of the parent's
//! sync), and none while its project refuses the parent.
//!
//! The `default` project is Argo CD's built-in one: every repository and destination, and
//! (with projects enforced) no `sourceNamespaces` — an app outside Argo CD's namespace cannot
//! use it. An AppProject object named `default` replaces it. Without enforcement
//! ([`super::controller::Config::projects`] off, the worlds written before projects) every
//! app is in an unrestricted `default` project, namespaces included.
//!
//! Resource kinds are checked as v3.2's `IsGroupKindPermitted` does: a namespaced kind is
//! permitted when `namespaceResourceWhitelist` is absent or names it and
//! `namespaceResourceBlacklist` does not; a cluster-scoped kind only when
//! `clusterResourceWhitelist` names it and `clusterResourceBlacklist` does not (the built-in
//! `default` project whitelists `*`/`*`). Entries match group and kind as Go's
//! `filepath.Match` globs. A kind the project refuses makes the comparison mark that
//! resource `Unknown` and an automated sync fail before it applies anything (see
//! [`super::controller`]).
//!
//! [limitation] destinations by cluster `name` match by name only; `[…]` character classes
//! in resource list entries are not modelled; `sourceNamespaces` regular
//! expressions (`/…/`) and SSH repository URLs' normalisation are not modelled; a child
//! Application manifest without `metadata.namespace` is created in Argo CD's namespace
//! (Argo CD: the parent's destination namespace).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use kube::api::{Api, DynamicObject};
use serde_json::Value;

use orrery_system::core::json::Pointer as _;
use orrery_system::env::SharedEnv;

/// The built-in project's name.
pub const DEFAULT: &str = "default";

/// One `destinations[]` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    /// Cluster URL pattern (empty: matched by `name`).
    pub server: String,
    /// Cluster name pattern (empty: matched by `server`).
    pub name: String,
    /// Namespace pattern.
    pub namespace: String,
}

/// The parts of an AppProject the controller enforces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Project {
    /// `metadata.name`.
    pub name: String,
    /// `spec.sourceRepos`.
    pub source_repos: Vec<String>,
    /// `spec.destinations`.
    pub destinations: Vec<Destination>,
    /// `spec.sourceNamespaces`.
    pub source_namespaces: Vec<String>,
    /// `spec.namespaceResourceWhitelist` (`None`: absent, every namespaced kind).
    pub namespace_whitelist: Option<Vec<GroupKind>>,
    /// `spec.namespaceResourceBlacklist`.
    pub namespace_blacklist: Vec<GroupKind>,
    /// `spec.clusterResourceWhitelist` (empty: no cluster-scoped kind).
    pub cluster_whitelist: Vec<GroupKind>,
    /// `spec.clusterResourceBlacklist`.
    pub cluster_blacklist: Vec<GroupKind>,
}

/// One entry of an AppProject's resource lists: group and kind patterns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupKind {
    /// Group pattern (`""`: the core group).
    pub group: String,
    /// Kind pattern.
    pub kind: String,
}

impl GroupKind {
    /// Every group and kind (`*`/`*`).
    fn any() -> GroupKind {
        GroupKind {
            group: "*".into(),
            kind: "*".into(),
        }
    }
}

/// argo-cd's `isResourceInList`: whether an entry's kind and group patterns match
/// (`filepath.Match`: `*` any run without `/`, which group and kind names never hold).
fn in_list(list: &[GroupKind], group: &str, kind: &str) -> bool {
    list.iter()
        .any(|e| glob(&e.kind, kind, Some('/')) && glob(&e.group, group, Some('/')))
}

impl Project {
    /// Argo CD's built-in `default` project: everything allowed, apps in Argo CD's own
    /// namespace only (`enforced`), or anywhere (not enforced).
    pub fn builtin(enforced: bool) -> Project {
        Project {
            name: DEFAULT.into(),
            source_repos: vec!["*".into()],
            destinations: vec![Destination {
                server: "*".into(),
                name: "*".into(),
                namespace: "*".into(),
            }],
            source_namespaces: if enforced {
                Vec::new()
            } else {
                vec!["*".into()]
            },
            namespace_whitelist: None,
            namespace_blacklist: Vec::new(),
            // Argo CD creates its `default` project with every cluster-scoped kind.
            cluster_whitelist: vec![GroupKind::any()],
            cluster_blacklist: Vec::new(),
        }
    }

    /// Reads an AppProject object.
    pub fn of(object: &DynamicObject) -> Project {
        let spec = object.data.get("spec");
        let strings = |field: &str| -> Vec<String> {
            spec.and_then(|s| s.get(field))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        };
        let destinations = spec
            .and_then(|s| s.get("destinations"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|d| {
                let field = |f: &str| d.get(f).and_then(Value::as_str).unwrap_or("").to_string();
                Destination {
                    server: field("server"),
                    name: field("name"),
                    namespace: field("namespace"),
                }
            })
            .collect();
        // A list field: `None` when absent (or not a list), its group/kind entries else.
        let kinds = |field: &str| -> Option<Vec<GroupKind>> {
            let list = spec.and_then(|s| s.get(field)).and_then(Value::as_array)?;
            Some(
                list.iter()
                    .map(|e| {
                        let text = |f: &str| e.get(f).and_then(Value::as_str).unwrap_or("");
                        GroupKind {
                            group: text("group").into(),
                            kind: text("kind").into(),
                        }
                    })
                    .collect(),
            )
        };
        Project {
            name: object.metadata.name.clone().unwrap_or_default(),
            source_repos: strings("sourceRepos"),
            destinations,
            source_namespaces: strings("sourceNamespaces"),
            namespace_whitelist: kinds("namespaceResourceWhitelist"),
            namespace_blacklist: kinds("namespaceResourceBlacklist").unwrap_or_default(),
            cluster_whitelist: kinds("clusterResourceWhitelist").unwrap_or_default(),
            cluster_blacklist: kinds("clusterResourceBlacklist").unwrap_or_default(),
        }
    }

    /// argo-cd v3.2's `IsGroupKindPermitted`: whether the project lets an app deploy a
    /// resource of `group`/`kind` (`namespaced` or cluster-scoped).
    pub fn permits_kind(&self, group: &str, kind: &str, namespaced: bool) -> bool {
        if namespaced {
            let white = match &self.namespace_whitelist {
                None => true,
                Some(list) => in_list(list, group, kind),
            };
            return white && !in_list(&self.namespace_blacklist, group, kind);
        }
        in_list(&self.cluster_whitelist, group, kind)
            && !in_list(&self.cluster_blacklist, group, kind)
    }

    /// Whether Applications in `namespace` may use the project (`home` is Argo CD's own
    /// namespace, where any project may be used).
    pub fn admits_namespace(&self, namespace: &str, home: &str) -> bool {
        namespace.is_empty()
            || namespace == home
            || self
                .source_namespaces
                .iter()
                .any(|p| glob(p, namespace, None))
    }

    /// Whether the project permits `repo`.
    pub fn permits_repo(&self, repo: &str) -> bool {
        source_permitted(&self.source_repos, repo)
    }

    /// Whether the project permits deploying to `namespace` on the cluster at `server`
    /// (`cluster_name` when the destination names the cluster).
    pub fn permits_destination(&self, server: &str, cluster_name: &str, namespace: &str) -> bool {
        destination_permitted(&self.destinations, server, cluster_name, namespace)
    }
}

/// argo-cd's `IsSourcePermitted`: whether `repo` is permitted by the `sourceRepos`
/// `patterns`.
pub fn source_permitted(patterns: &[String], repo: &str) -> bool {
    let repo = normalise_git_url(repo);
    let mut any = false;
    for pattern in patterns {
        let normalised = match pattern.strip_prefix('!') {
            Some(denied) => format!("!{}", normalise_git_url(denied)),
            None => normalise_git_url(pattern),
        };
        if glob_match(&normalised, &repo, true, Some('/')) {
            any = true;
        } else if normalised.starts_with('!') {
            return false;
        }
    }
    any
}

/// argo-cd's `isDestinationMatched`: whether `destinations` permit `namespace` on the
/// cluster at `server` (named `cluster_name`).
pub fn destination_permitted(
    destinations: &[Destination],
    server: &str,
    cluster_name: &str,
    namespace: &str,
) -> bool {
    let deny = |p: &str| p.starts_with('!');
    let mut any = false;
    for item in destinations {
        let name_matched =
            !cluster_name.is_empty() && glob_match(&item.name, cluster_name, true, None);
        let server_matched = !server.is_empty() && glob_match(&item.server, server, true, None);
        let namespace_matched = glob_match(&item.namespace, namespace, true, None);
        if (server_matched || name_matched) && namespace_matched {
            any = true;
        } else if (!name_matched && deny(&item.name))
            || (!server_matched && deny(&item.server) && namespace_matched)
            || (!namespace_matched && deny(&item.namespace) && server_matched)
        {
            return false;
        }
    }
    any
}

/// argo-cd's `NormalizeGitURL` for HTTP(S) URLs: trimmed, lower case, without `.git`.
pub fn normalise_git_url(url: &str) -> String {
    let url = url.trim().to_lowercase();
    url.strip_suffix(".git").map(str::to_string).unwrap_or(url)
}

/// argo-cd's `globMatch`: `!pattern` (when negation is allowed) matches what `pattern`
/// does not; `*` matches everything.
fn glob_match(pattern: &str, value: &str, negation: bool, separator: Option<char>) -> bool {
    if negation {
        if let Some(denied) = pattern.strip_prefix('!') {
            return !glob(denied, value, separator);
        }
    }
    pattern == "*" || glob(pattern, value, separator)
}

/// What a project name resolves to ([`Projects::find`]).
enum Found<'a> {
    /// The built-in `default` (restricted to Argo CD's namespace when `enforced`).
    Builtin { enforced: bool },
    /// A listed AppProject: (resourceVersion, project).
    Known(&'a (String, Project)),
}

/// The AppProjects Argo CD knows (its project informer), shared by the watch and the
/// controller; with enforcement off, every name resolves to an unrestricted `default`.
#[derive(Clone, Debug, Default)]
pub struct Projects {
    enforced: bool,
    known: Arc<Mutex<BTreeMap<String, (String, Project)>>>,
    /// The first listing is in (Argo CD waits for its project informer to sync).
    synced: Arc<std::sync::atomic::AtomicBool>,
}

impl Projects {
    /// Projects enforced: apps are checked against the AppProjects [`watch`] keeps.
    pub fn enforced() -> Projects {
        Projects {
            enforced: true,
            ..Projects::default()
        }
    }

    /// Whether projects are enforced.
    pub fn is_enforced(&self) -> bool {
        self.enforced
    }

    /// A fresh, empty handle of the same kind: what a (re)started Argo CD knows before its
    /// first listing.
    pub fn fresh(&self) -> Projects {
        Projects {
            enforced: self.enforced,
            ..Projects::default()
        }
    }

    /// Whether apps can be judged: projects are not enforced, or the first listing is in.
    pub fn ready(&self) -> bool {
        !self.enforced || self.synced.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The project `name` as (resourceVersion, project); `None` if it does not exist. The
    /// built-in `default` has an empty resourceVersion.
    pub fn resolve(&self, name: &str) -> Option<(String, Project)> {
        self.find(name, |found| match found {
            Found::Builtin { enforced } => (String::new(), Project::builtin(enforced)),
            Found::Known((rv, project)) => (rv.clone(), project.clone()),
        })
    }

    /// The resourceVersion [`Self::resolve`] would give, without copying the project: the
    /// controller compares it for every app it looks at.
    pub fn version(&self, name: &str) -> Option<String> {
        self.find(name, |found| match found {
            Found::Builtin { .. } => String::new(),
            Found::Known((rv, _)) => rv.clone(),
        })
    }

    /// `read` of what project `name` is, under the lock; `None` if it does not exist.
    fn find<T>(&self, name: &str, read: impl FnOnce(Found<'_>) -> T) -> Option<T> {
        if !self.enforced {
            return Some(read(Found::Builtin { enforced: false }));
        }
        let known = self.known.lock().expect("projects lock poisoned");
        match known.get(name) {
            Some(found) => Some(read(Found::Known(found))),
            None if name == DEFAULT => Some(read(Found::Builtin { enforced: true })),
            None => None,
        }
    }

    /// Replaces what is known.
    fn replace(&self, next: BTreeMap<String, (String, Project)>) {
        *self.known.lock().expect("projects lock poisoned") = next;
    }

    fn snapshot(&self) -> BTreeMap<String, (String, Project)> {
        self.known.lock().expect("projects lock poisoned").clone()
    }
}

/// Keeps `projects` current from a watch of AppProjects in Argo CD's `namespace`. An app
/// sees its project's change at its next refresh (periodic, or urgent for its own reasons):
/// argo-cd v3.2's project informer only invalidates the controller's project cache and
/// requeues no app (`controller/appcontroller.go`, `projInformer`'s handlers; the Argo CD
/// conformance suite found it — a narrowed project refused nothing for 60 s until a refresh).
pub async fn watch(env: SharedEnv, client: kube::Client, namespace: String, projects: Projects) {
    use futures::StreamExt;
    use kube::runtime::{watcher, WatchStreamExt};
    let api: Api<DynamicObject> = Api::namespaced_with(client, &namespace, &app_project_resource());
    let mut events = watcher(api, watcher::Config::default())
        .backoff(orrery_system::env::kube::SeededBackoff::new(env))
        .boxed();
    let mut listing: Option<BTreeMap<String, (String, Project)>> = None;
    while let Some(event) = events.next().await {
        let entry = |p: &DynamicObject| {
            (
                p.metadata.name.clone().unwrap_or_default(),
                (
                    p.metadata.resource_version.clone().unwrap_or_default(),
                    Project::of(p),
                ),
            )
        };
        let next = match event {
            Ok(watcher::Event::Init) => {
                listing = Some(BTreeMap::new());
                continue;
            }
            Ok(watcher::Event::InitApply(p)) => {
                if let Some(listing) = listing.as_mut() {
                    let (name, value) = entry(&p);
                    listing.insert(name, value);
                }
                continue;
            }
            Ok(watcher::Event::InitDone) => {
                projects
                    .synced
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                listing.take().unwrap_or_default()
            }
            Ok(watcher::Event::Apply(p)) => {
                let mut next = projects.snapshot();
                let (name, value) = entry(&p);
                next.insert(name, value);
                next
            }
            Ok(watcher::Event::Delete(p)) => {
                let mut next = projects.snapshot();
                next.remove(p.metadata.name.as_deref().unwrap_or(""));
                next
            }
            Err(_) => continue, // retried with backoff
        };
        projects.replace(next);
    }
}

/// The AppProject type (the operator's definition: the type it generates).
pub use orrery_system::runtime::gitops_operator::restricted::app_project_resource;

/// Why Argo CD refuses an app: (condition type, message).
pub type Refusal = (&'static str, String);

/// Checks `app` against its project (`None`: the project it names does not exist).
pub fn check(app: &DynamicObject, project: Option<&Project>, home: &str) -> Result<(), Refusal> {
    let name = app.metadata.name.as_deref().unwrap_or("");
    let namespace = app.metadata.namespace.as_deref().unwrap_or(home);
    let wanted = project_name(app);
    let Some(project) = project else {
        return Err((
            "InvalidSpecError",
            format!("Application referencing project {wanted} which does not exist"),
        ));
    };
    if !project.admits_namespace(namespace, home) {
        return Err((
            "UnknownError",
            format!(
                "application '{name}' in namespace '{namespace}' is not permitted to use project '{wanted}'"
            ),
        ));
    }
    let spec = app.data.get("spec");
    let field = |pointer: &str| {
        spec.and_then(|s| s.at(pointer))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let repo = field("/source/repoURL");
    if !project.permits_repo(&repo) {
        return Err((
            "InvalidSpecError",
            format!("application repo {repo} is not permitted in project '{wanted}'"),
        ));
    }
    let (server, dest_namespace) = super::clusters::destination_of(app);
    if !project.permits_destination(&server, &field("/destination/name"), &dest_namespace) {
        return Err((
            "InvalidSpecError",
            format!(
                "application destination server '{server}' and namespace '{dest_namespace}' do not match any of the allowed destinations in project '{wanted}'"
            ),
        ));
    }
    Ok(())
}

/// The project an app names (`default` when it names none).
pub fn project_name(app: &DynamicObject) -> String {
    project_of(app).to_string()
}

/// [`project_name`], borrowed from the app.
pub fn project_of(app: &DynamicObject) -> &str {
    match app
        .data
        .get("spec")
        .and_then(|s| s.get("project"))
        .and_then(Value::as_str)
    {
        Some(name) if !name.is_empty() => name,
        _ => DEFAULT,
    }
}

/// Glob match as gobwas/glob (what Argo CD uses): `*` any run of characters except the
/// `separator`, `**` any run at all, `?` one character except the separator, anything else
/// itself. Without a separator `*` and `**` are the same.
pub fn glob(pattern: &str, value: &str, separator: Option<char>) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let v: Vec<char> = value.chars().collect();
    let crosses = |c: char| Some(c) != separator;
    // matches[i][j]: p[i..] matches v[j..]; filled from the ends.
    let mut matches = vec![vec![false; v.len() + 1]; p.len() + 1];
    matches[p.len()][v.len()] = true;
    for i in (0..p.len()).rev() {
        for j in (0..=v.len()).rev() {
            matches[i][j] = match p[i] {
                // `**`: any run (the second star is consumed with the first).
                '*' if p.get(i + 1) == Some(&'*') => {
                    matches[i + 2][j] || (j < v.len() && matches[i][j + 1])
                }
                '*' => matches[i + 1][j] || (j < v.len() && crosses(v[j]) && matches[i][j + 1]),
                '?' => j < v.len() && crosses(v[j]) && matches[i + 1][j + 1],
                c => j < v.len() && v[j] == c && matches[i + 1][j + 1],
            };
        }
    }
    matches[0][0]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(namespace: &str, spec: Value) -> DynamicObject {
        let mut app =
            DynamicObject::new("web", &super::super::application_resource()).within(namespace);
        app.data = json!({ "spec": spec });
        app
    }

    fn team_a() -> Project {
        Project::of(&{
            let mut p = DynamicObject::new("team-a", &app_project_resource());
            p.data = json!({"spec": {
                "sourceRepos": ["https://git.example/team-a/*"],
                "sourceNamespaces": ["team-a"],
                "destinations": [
                    {"server": "https://kubernetes.default.svc", "namespace": "team-a-*"},
                ],
            }});
            p
        })
    }

    fn lists(spec: Value) -> Project {
        Project::of(&{
            let mut p = DynamicObject::new("p", &app_project_resource());
            p.data = json!({ "spec": spec });
            p
        })
    }

    #[test]
    fn resource_kinds_are_permitted_as_argo_cds_is_group_kind_permitted() {
        // No lists: every namespaced kind, no cluster-scoped one (an AppProject's default).
        let open = lists(json!({}));
        assert!(open.permits_kind("apps", "Deployment", true));
        assert!(!open.permits_kind("", "Namespace", false));
        // The built-in default project: cluster-scoped kinds too.
        assert!(Project::builtin(true).permits_kind("", "Namespace", false));
        // A namespaced deny list; group and kind are globs, the core group is "".
        let no_services =
            lists(json!({"namespaceResourceBlacklist": [{"group": "", "kind": "Service"}]}));
        assert!(!no_services.permits_kind("", "Service", true));
        assert!(no_services.permits_kind("apps", "Deployment", true));
        assert!(no_services.permits_kind("example.com", "Service", true));
        // An allow list names what may be deployed, and an empty one nothing.
        let only_apps =
            lists(json!({"namespaceResourceWhitelist": [{"group": "apps", "kind": "*"}]}));
        assert!(only_apps.permits_kind("apps", "Deployment", true));
        assert!(!only_apps.permits_kind("", "Service", true));
        let nothing = lists(json!({"namespaceResourceWhitelist": []}));
        assert!(!nothing.permits_kind("apps", "Deployment", true));
        // The deny list wins over the allow list; cluster lists judge cluster-scoped kinds only.
        let both = lists(json!({
            "namespaceResourceWhitelist": [{"group": "*", "kind": "*"}],
            "namespaceResourceBlacklist": [{"group": "argoproj.io", "kind": "App*"}],
            "clusterResourceWhitelist": [{"group": "", "kind": "Namespace"}],
        }));
        assert!(!both.permits_kind("argoproj.io", "Application", true));
        assert!(both.permits_kind("argoproj.io", "Rollout", true));
        assert!(both.permits_kind("", "Namespace", false));
        assert!(!both.permits_kind("rbac.authorization.k8s.io", "ClusterRole", false));
    }

    fn spec(repo: &str, namespace: &str) -> Value {
        json!({"project": "team-a",
            "source": {"repoURL": repo, "path": "web"},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": namespace}})
    }

    #[test]
    fn version_is_the_resource_version_resolve_gives() {
        let open = Projects::default();
        let enforced = Projects::enforced();
        enforced.replace(BTreeMap::from([(
            "team-a".to_string(),
            ("41".to_string(), team_a()),
        )]));
        for projects in [&open, &enforced] {
            for name in ["team-a", DEFAULT, "team-b"] {
                let resolved = projects.resolve(name).map(|(rv, _)| rv);
                assert_eq!(projects.version(name), resolved, "{name}");
            }
        }
        assert_eq!(enforced.version("team-a").as_deref(), Some("41"));
        assert_eq!(enforced.version(DEFAULT).as_deref(), Some(""));
        assert_eq!(enforced.version("team-b"), None);
        assert_eq!(open.version("team-b").as_deref(), Some(""));
    }

    #[test]
    fn an_app_without_a_project_is_in_the_default_one() {
        for (spec, want) in [
            (json!({"project": "team-a"}), "team-a"),
            (json!({"project": ""}), DEFAULT),
            (json!({"project": 7}), DEFAULT),
            (json!({}), DEFAULT),
        ] {
            let app = app("argocd", spec);
            assert_eq!(project_of(&app), want);
            assert_eq!(project_name(&app), want);
        }
    }

    #[test]
    fn globs_match_as_argo_cd_does() {
        assert!(glob("*", "", None));
        assert!(glob("team-a-*", "team-a-web", None));
        assert!(!glob("team-a-*", "team-b-web", None));
        assert!(glob("te?m", "team", None));
        assert!(!glob("team", "teams", None));
        // Repositories: `*` stops at `/`, `**` does not.
        let sep = Some('/');
        assert!(glob(
            "https://git.example/team-a/*",
            "https://git.example/team-a/web",
            sep
        ));
        assert!(!glob(
            "https://git.example/*",
            "https://git.example/a/b",
            sep
        ));
        assert!(glob(
            "https://git.example/**",
            "https://git.example/a/b",
            sep
        ));
        assert!(glob(
            "https://git.example/*",
            "https://git.example/a/b",
            None
        ));
        // Normalised before matching: case and `.git`.
        let repos = ["https://Git.Example/team-a/*".to_string()];
        assert!(source_permitted(
            &repos,
            "https://git.example/TEAM-A/web.git"
        ));
        // A deny entry alone permits everything else; what it names is refused.
        let deny = ["!https://git.example/team-b/*".to_string()];
        assert!(source_permitted(
            &deny,
            "https://git.example/team-a/web.git"
        ));
        assert!(!source_permitted(
            &deny,
            "https://git.example/team-b/web.git"
        ));
        let mixed = [
            "https://git.example/**".to_string(),
            "!https://git.example/team-b/*".to_string(),
        ];
        assert!(source_permitted(&mixed, "https://git.example/team-a/web"));
        assert!(!source_permitted(&mixed, "https://git.example/team-b/web"));
        assert!(!source_permitted(&[], "https://git.example/team-a/web"));
        // Destinations: the same, per entry.
        let server = "https://kubernetes.default.svc";
        let destination = |namespace: &str| Destination {
            server: server.into(),
            name: String::new(),
            namespace: namespace.into(),
        };
        let deny = [destination("team-a-*"), destination("!team-a-secrets")];
        assert!(destination_permitted(&deny, server, "", "team-a-web"));
        assert!(
            destination_permitted(&deny, server, "", "kube-system"),
            "a deny entry permits every namespace it does not name"
        );
        assert!(!destination_permitted(&deny, server, "", "team-a-secrets"));
        assert!(!destination_permitted(
            &[destination("team-a-*")],
            server,
            "",
            "kube-system"
        ));
        assert!(!destination_permitted(
            &[destination("team-a-*")],
            "https://other",
            "",
            "team-a-web"
        ));
    }

    #[test]
    fn an_app_inside_its_project_is_permitted() {
        let project = team_a();
        let ok = app(
            "team-a",
            spec("https://git.example/team-a/apps.git", "team-a-web"),
        );
        assert_eq!(check(&ok, Some(&project), "argocd"), Ok(()));
    }

    #[test]
    fn each_rule_refuses_with_argo_cds_condition() {
        let project = team_a();
        let home = "argocd";
        let cases = [
            (
                app("team-a", spec("https://git.example/team-b/apps.git", "team-a-web")),
                "InvalidSpecError",
                "application repo https://git.example/team-b/apps.git is not permitted in project 'team-a'",
            ),
            (
                app("team-a", spec("https://git.example/team-a/apps.git", "kube-system")),
                "InvalidSpecError",
                "application destination server 'https://kubernetes.default.svc' and namespace 'kube-system' do not match any of the allowed destinations in project 'team-a'",
            ),
            (
                app("team-b", spec("https://git.example/team-a/apps.git", "team-a-web")),
                "UnknownError",
                "application 'web' in namespace 'team-b' is not permitted to use project 'team-a'",
            ),
        ];
        for (app, kind, message) in cases {
            assert_eq!(
                check(&app, Some(&project), home),
                Err((kind, message.to_string()))
            );
        }
        let missing = app(
            "team-a",
            spec("https://git.example/team-a/apps.git", "team-a-web"),
        );
        assert_eq!(
            check(&missing, None, home),
            Err((
                "InvalidSpecError",
                "Application referencing project team-a which does not exist".to_string()
            ))
        );
        // Argo CD's own namespace may use any project.
        let home_app = app(
            "argocd",
            spec("https://git.example/team-a/apps.git", "team-a-web"),
        );
        assert_eq!(check(&home_app, Some(&project), home), Ok(()));
    }

    #[test]
    fn the_builtin_default_project_admits_only_argo_cds_namespace_when_enforced() {
        let mut outside = app("team-a", spec("https://any.example/x.git", "anything"));
        outside.data["spec"]["project"] = json!("");
        assert!(check(&outside, Some(&Project::builtin(false)), "argocd").is_ok());
        assert_eq!(
            check(&outside, Some(&Project::builtin(true)), "argocd")
                .unwrap_err()
                .0,
            "UnknownError"
        );
        let inside = app("argocd", spec("https://any.example/x.git", "anything"));
        assert!(check(&inside, Some(&Project::builtin(true)), "argocd").is_ok());
    }
}
