//! The schema's types and resolvers.

use std::collections::BTreeMap;

use async_graphql::{Context, Enum, ErrorExtensions, InputObject, Object, Result, SimpleObject};
use base64::Engine as _;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::BodyExt;

use super::Scope;
use crate::platform::audit::Outcome;
use crate::platform::events::read_model::AppState;
use crate::platform::monitor::Health;
use crate::platform::permissions::{Decision, Denial, Role, Target};
use crate::platform::registry::{self, AccessMode as RegistryAccess, Kind as RegistryKind};

/// Most applications one page holds.
pub const MAX_PAGE: i32 = 500;

/// An API error with its code and HTTP status in `extensions`.
fn error(
    code: &'static str,
    status: StatusCode,
    message: impl Into<String>,
) -> async_graphql::Error {
    async_graphql::Error::new(message.into()).extend_with(|_, e| {
        e.set("code", code);
        e.set("status", status.as_u16());
    })
}

fn scope<'a>(ctx: &Context<'a>) -> &'a Scope {
    ctx.data_unchecked::<Scope>()
}

/// Where a runtime runs.
#[derive(Enum, Copy, Clone, Eq, PartialEq, Debug)]
pub enum RuntimeKind {
    /// In the customer's cluster.
    Hybrid,
    /// On the platform's shared infrastructure.
    Hosted,
}

/// How the platform reaches a runtime.
#[derive(Enum, Copy, Clone, Eq, PartialEq, Debug)]
pub enum AccessMode {
    /// Through the tunnel the runtime opens.
    Tunnel,
    /// Through the runtime's ingress.
    Ingress,
}

/// A runtime of the caller's account.
#[derive(SimpleObject, Clone, Debug)]
#[graphql(complex)]
pub struct Runtime {
    /// Its name within the account.
    pub name: String,
    /// Hybrid or hosted.
    pub kind: RuntimeKind,
    /// Tunnel or ingress.
    pub access_mode: AccessMode,
    /// The version it registered with.
    pub runtime_version: String,
    /// The cluster it runs in.
    pub cluster: String,
    /// Its ingress host, in ingress mode.
    pub ingress_host: Option<String>,
    #[graphql(skip)]
    tunnel_name: String,
}

#[async_graphql::ComplexObject]
impl Runtime {
    /// What the runtime monitor shows: `Healthy`, `Unable to communicate`, or `Unknown`
    /// (not probed yet, or no monitor runs).
    async fn health_status(&self, ctx: &Context<'_>) -> String {
        scope(ctx)
            .sources
            .health
            .shown()
            .get(&self.tunnel_name)
            .map_or(Health::Unknown, |h| h.health)
            .as_str()
            .to_string()
    }

    /// `Synced` when every app it reported is, `OutOfSync` when one is not, `Unknown`
    /// when it reported none (inferred: the research names the field, not its rule).
    async fn sync_status(&self, ctx: &Context<'_>) -> String {
        let Some(events) = &scope(ctx).sources.events else {
            return "Unknown".into();
        };
        events.with_apps_of(&self.tunnel_name, |apps| {
            let mut live = apps.values().filter(|a| !a.deleted).peekable();
            if live.peek().is_none() {
                "Unknown".to_string()
            } else if live.all(|a| a.sync_status == "Synced") {
                "Synced".to_string()
            } else {
                "OutOfSync".to_string()
            }
        })
    }

    /// Whether the platform can reach the runtime now: its tunnel is up (tunnel mode), or
    /// the monitor's last probe reached it (ingress mode).
    async fn is_remote_cluster_connected(&self, ctx: &Context<'_>) -> bool {
        let sources = &scope(ctx).sources;
        match self.access_mode {
            AccessMode::Tunnel => sources.tunnels.connected().contains(&self.tunnel_name),
            AccessMode::Ingress => sources
                .health
                .shown()
                .get(&self.tunnel_name)
                .is_some_and(|h| h.health == Health::Healthy),
        }
    }
}

/// One label.
#[derive(SimpleObject, Clone, Debug)]
pub struct Label {
    /// Key.
    pub key: String,
    /// Value.
    pub value: String,
}

/// An Argo CD application as the platform shows it.
#[derive(SimpleObject, Clone, Debug)]
#[graphql(complex)]
pub struct Application {
    /// The runtime that reported it.
    pub runtime: String,
    /// The Application object's namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// `status.sync.status`.
    pub sync_status: String,
    /// `status.health.status`.
    pub health_status: String,
    /// The revision compared.
    pub revision: String,
    /// The app version the newest report carried.
    pub app_version: Option<String>,
    /// The sync's change revision.
    pub change_revision: Option<String>,
    /// Destination cluster (server URL or name).
    pub destination_cluster: String,
    /// Destination namespace.
    pub destination_namespace: String,
    /// Its labels, sorted by key.
    pub labels: Vec<Label>,
    #[graphql(skip)]
    tunnel_name: String,
}

/// One resource of an application.
#[derive(SimpleObject, Clone, Debug)]
pub struct Resource {
    /// API group (empty for the core group).
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Sync status within its app.
    pub sync_status: String,
    /// Health.
    pub health_status: String,
}

/// An Argo Rollout of an application.
#[derive(SimpleObject, Clone, Debug)]
pub struct Rollout {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `status.phase`.
    pub phase: String,
    /// `status.currentStepIndex`.
    pub step: Option<i64>,
    /// `status.stableRS`.
    pub stable: String,
    /// `status.currentPodHash`.
    pub current_hash: String,
    /// Aborted.
    pub aborted: bool,
}

/// An Argo Workflow of an application.
#[derive(SimpleObject, Clone, Debug)]
pub struct Workflow {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `status.phase`.
    pub phase: String,
    /// `status.progress`.
    pub progress: String,
    /// `status.message`.
    pub message: String,
}

impl Application {
    /// Its resources, from the runtime's resource events, in key order.
    fn resources_in(&self, scope: &Scope) -> Vec<Resource> {
        let Some(events) = &scope.sources.events else {
            return Vec::new();
        };
        let prefix = format!("{}/{}/", self.namespace, self.name);
        events
            .resources_of(&self.tunnel_name)
            .into_iter()
            .filter(|(key, state)| key.starts_with(&prefix) && !state.deleted)
            .filter_map(|(key, state)| {
                let mut parts = key[prefix.len()..].splitn(4, '/');
                Some(Resource {
                    group: parts.next()?.to_string(),
                    kind: parts.next()?.to_string(),
                    namespace: parts.next()?.to_string(),
                    name: parts.next()?.to_string(),
                    sync_status: state.sync_status,
                    health_status: state.health_status,
                })
            })
            .collect()
    }
}

#[async_graphql::ComplexObject]
impl Application {
    /// The resources it manages (from the runtime's resource events), in key order.
    async fn resources(&self, ctx: &Context<'_>) -> Vec<Resource> {
        self.resources_in(scope(ctx))
    }

    /// Its Rollouts: the reported Rollouts among its resources.
    async fn rollouts(&self, ctx: &Context<'_>) -> Vec<Rollout> {
        let scope = scope(ctx);
        let Some(events) = &scope.sources.events else {
            return Vec::new();
        };
        let views = events.rollouts();
        self.reported(scope, "Rollout", |key| {
            views.get(key).filter(|v| !v.deleted)
        })
        .map(|(r, view)| Rollout {
            namespace: r.namespace,
            name: r.name,
            phase: view.fields.phase.clone(),
            step: view.fields.step,
            stable: view.fields.stable.clone(),
            current_hash: view.fields.hash.clone(),
            aborted: view.fields.aborted,
        })
        .collect()
    }

    /// Its Workflows: the reported Workflows among its resources.
    async fn workflows(&self, ctx: &Context<'_>) -> Vec<Workflow> {
        let scope = scope(ctx);
        let Some(events) = &scope.sources.events else {
            return Vec::new();
        };
        let views = events.workflows();
        self.reported(scope, "Workflow", |key| {
            views.get(key).filter(|v| !v.deleted)
        })
        .map(|(r, view)| Workflow {
            namespace: r.namespace,
            name: r.name,
            phase: view.fields.phase.clone(),
            progress: view.fields.progress.clone(),
            message: view.fields.message.clone(),
        })
        .collect()
    }
}

impl Application {
    /// Its resources of `kind` with the view `find` gives for their `runtime/namespace/name`
    /// (those it gives none for are left out).
    fn reported<'v, V: 'v>(
        &self,
        scope: &Scope,
        kind: &str,
        find: impl Fn(&str) -> Option<&'v V>,
    ) -> impl Iterator<Item = (Resource, &'v V)> {
        let runtime = self.tunnel_name.clone();
        let kind = kind.to_string();
        self.resources_in(scope)
            .into_iter()
            .filter(move |r| r.kind == kind)
            .filter_map(move |r| {
                let view = find(&format!("{runtime}/{}/{}", r.namespace, r.name))?;
                Some((r, view))
            })
    }
}

/// Which applications to list; every given field must match.
#[derive(InputObject, Default, Debug)]
pub struct ApplicationFilter {
    /// Runtime name.
    pub runtime: Option<String>,
    /// The Application object's namespace.
    pub namespace: Option<String>,
    /// Sync status.
    pub sync_status: Option<String>,
    /// Health status.
    pub health_status: Option<String>,
    /// Labels, each `key=value`, all carried.
    pub labels: Option<Vec<String>>,
}

/// One page of applications.
#[derive(SimpleObject, Debug)]
pub struct ApplicationPage {
    /// The page, ordered by runtime, namespace and name.
    pub items: Vec<Application>,
    /// How many the filter matched in all (that the caller may read).
    pub total_count: i32,
    /// Pass as `after` for the next page.
    pub end_cursor: Option<String>,
    /// Whether another page follows.
    pub has_next_page: bool,
}

/// One audit log entry.
#[derive(SimpleObject, Debug)]
pub struct AuditEntry {
    /// Position in the log.
    pub seq: i64,
    /// When (RFC 3339).
    pub at: String,
    /// Who: `anonymous`, `admin`, `user:<name>`, or `platform` (a periodic job).
    pub actor: String,
    /// Action: method and path, or `graphql <field>`.
    pub action: String,
    /// The runtime it named.
    pub runtime: String,
    /// `allowed` or `denied`.
    pub outcome: String,
    /// HTTP status answered.
    pub status: i32,
    /// Why, for a denial.
    pub reason: String,
}

/// The caller.
#[derive(SimpleObject, Debug)]
pub struct Me {
    /// Name.
    pub name: String,
    /// Account.
    pub account: String,
    /// `admin` or `member`.
    pub role: String,
    /// Teams.
    pub teams: Vec<String>,
}

/// A runtime just created (or whose token was just rotated).
#[derive(SimpleObject, Debug)]
pub struct NewRuntime {
    /// Its name within the account.
    pub name: String,
    /// The token it authenticates with; the old one, if any, no longer works.
    pub new_access_token: String,
    /// Whether this replaced an earlier token (and closed the tunnel opened with it).
    pub rotated: bool,
}

/// What a runtime answered a mutation sent to it (2xx: anything else is an error).
#[derive(SimpleObject, Debug)]
pub struct RuntimeAnswer {
    /// The HTTP status.
    pub status: i32,
    /// Its answer's body (JSON text as sent).
    pub body: String,
}

/// One environment's promotion in a release.
#[derive(SimpleObject, Clone, Debug)]
pub struct Promotion {
    /// The environment.
    pub environment: String,
    /// The runtime its app runs in (the account's own name for it).
    pub runtime: String,
    /// Its Argo CD application.
    pub application: String,
    /// `Waiting`, `Promoting`, `Succeeded`, `Failed`, `Skipped` or `Terminated`.
    pub phase: String,
    /// The PromotionTask it runs as, once started.
    pub task: Option<String>,
    /// When its task was created (RFC 3339), once started.
    pub started_at: Option<String>,
    /// When it ended (RFC 3339).
    pub ended_at: Option<String>,
}

/// A release: one commit of a Product's trigger environment on its way through a flow.
#[derive(SimpleObject, Clone, Debug)]
pub struct Release {
    /// `<product>-<n>`.
    pub id: String,
    /// The Product.
    pub product: String,
    /// The flow it follows.
    pub flow: String,
    /// The trigger environment's commit.
    pub commit: String,
    /// `Queued`, `Running`, `Succeeded`, `Failed` or `Terminated`.
    pub phase: String,
    /// Why it ended (empty while it runs or when it succeeded).
    pub reason: String,
    /// The version read in the trigger environment (JSON text), once read.
    pub version: Option<String>,
    /// When the platform saw the commit (RFC 3339).
    pub created_at: String,
    /// When it started running (RFC 3339), once it did.
    pub started_at: Option<String>,
    /// When it ended (RFC 3339).
    pub ended_at: Option<String>,
    /// Its environments the caller may read, by name.
    pub promotions: Vec<Promotion>,
    /// Its place in the orchestrator's log, from 1 (cursors count by it).
    #[graphql(skip)]
    seq: usize,
}

/// One page of releases.
#[derive(SimpleObject, Debug)]
pub struct ReleasePage {
    /// The page, newest first.
    pub items: Vec<Release>,
    /// How many the filter matched in all (that the caller may read).
    pub total_count: i32,
    /// Pass as `after` for the next page.
    pub end_cursor: Option<String>,
    /// Whether another page follows.
    pub has_next_page: bool,
}

/// An RFC 3339 time, or none for 0 (not yet).
fn time_of(unix_ms: u64) -> Option<String> {
    (unix_ms != 0).then(|| crate::core::time::rfc3339(unix_ms))
}

/// The releases the caller may read, newest first: those with an environment on a
/// runtime of the caller's account that a `promotions:read` rule of theirs covers, each
/// with only such environments. Another account's releases are never seen.
fn releases_of(scope: &Scope) -> Vec<Release> {
    let Some(placement) = scope.sources.releases.placement() else {
        return Vec::new();
    };
    let account = &scope.viewer.account;
    // The caller's account's runtimes, by their gateway name.
    let runtimes: BTreeMap<String, (String, String)> = scope
        .sources
        .registry
        .runtimes_of(account)
        .into_iter()
        .map(|r| {
            let tunnel_name = r.tunnel_name();
            let cluster = scope.sources.registry.info(&tunnel_name).cluster;
            (tunnel_name, (r.runtime, cluster))
        })
        .collect();
    // Environment → (runtime name within the account, app), for those the caller may read.
    let readable: BTreeMap<&str, (&str, &str)> = placement
        .targets
        .iter()
        .filter_map(|(environment, target)| {
            let (runtime, cluster) = runtimes.get(&target.runtime)?;
            scope
                .sources
                .permissions
                .decide(
                    &scope.viewer.user,
                    "promotions:read",
                    &Target {
                        account,
                        runtime,
                        cluster,
                        namespace: None,
                        labels: None,
                    },
                )
                .allowed()
                .then_some((
                    environment.as_str(),
                    (runtime.as_str(), target.app.as_str()),
                ))
        })
        .collect();
    if readable.is_empty() {
        return Vec::new();
    }
    let releases = scope.sources.releases.lock();
    releases
        .iter()
        .enumerate()
        .rev()
        .filter_map(|(index, release)| {
            let promotions: Vec<Promotion> = release
                .environments
                .iter()
                .filter_map(|(environment, status)| {
                    let (runtime, app) = readable.get(environment.as_str())?;
                    Some(Promotion {
                        environment: environment.clone(),
                        runtime: runtime.to_string(),
                        application: app.to_string(),
                        phase: status.phase.as_str().to_string(),
                        task: (!status.task.is_empty()).then(|| status.task.clone()),
                        started_at: time_of(status.started_ms),
                        ended_at: time_of(status.ended_ms),
                    })
                })
                .collect();
            // Why it ended and the version (read in the trigger environment) may speak of
            // any environment: shown to a caller who reads them all.
            let whole = promotions.len() == release.environments.len();
            (!promotions.is_empty()).then(|| Release {
                id: release.id.clone(),
                product: placement.product.clone(),
                flow: release.flow.clone(),
                commit: release.commit.clone(),
                phase: release.phase.as_str().to_string(),
                reason: if whole {
                    release.why.clone()
                } else {
                    String::new()
                },
                version: release
                    .version
                    .as_ref()
                    .filter(|_| whole)
                    .map(|v| v.to_string()),
                created_at: crate::core::time::rfc3339(release.created_ms),
                started_at: time_of(release.started_ms),
                ended_at: time_of(release.ended_ms),
                promotions,
                seq: index + 1,
            })
        })
        .collect()
}

/// The runtime `name` of the caller's account, when the caller reaches it.
fn runtime_of(scope: &Scope, name: &str) -> Option<Runtime> {
    let account = &scope.viewer.account;
    let found = scope
        .sources
        .registry
        .runtimes_of(account)
        .into_iter()
        .find(|r| r.runtime == name)?;
    let tunnel_name = found.tunnel_name();
    let info = scope.sources.registry.info(&tunnel_name);
    if !scope
        .sources
        .permissions
        .reaches(&scope.viewer.user, account, name, &info.cluster)
    {
        return None;
    }
    Some(Runtime {
        name: name.to_string(),
        kind: match info.kind {
            RegistryKind::Hybrid => RuntimeKind::Hybrid,
            RegistryKind::Hosted => RuntimeKind::Hosted,
        },
        access_mode: match info.access_mode {
            RegistryAccess::Tunnel => AccessMode::Tunnel,
            RegistryAccess::Ingress => AccessMode::Ingress,
        },
        runtime_version: info.version.clone(),
        cluster: info.cluster.clone(),
        ingress_host: (!info.ingress_host.is_empty()).then(|| info.ingress_host.clone()),
        tunnel_name,
    })
}

/// The runtimes the caller reaches, by name.
fn runtimes_of(scope: &Scope) -> Vec<Runtime> {
    scope
        .sources
        .registry
        .runtimes_of(&scope.viewer.account)
        .into_iter()
        .filter_map(|r| runtime_of(scope, &r.runtime))
        .collect()
}

fn application(runtime: &Runtime, key: &str, state: &AppState) -> Application {
    let (namespace, name) = key.split_once('/').unwrap_or(("", key));
    let cluster = if state.destination_cluster.is_empty() {
        runtime.cluster.clone()
    } else {
        state.destination_cluster.clone()
    };
    Application {
        runtime: runtime.name.clone(),
        namespace: namespace.to_string(),
        name: name.to_string(),
        sync_status: state.sync_status.clone(),
        health_status: state.health_status.clone(),
        revision: state.revision.clone(),
        app_version: (!state.app_version.is_empty()).then(|| state.app_version.clone()),
        change_revision: (!state.change_revision.is_empty()).then(|| state.change_revision.clone()),
        destination_cluster: cluster,
        destination_namespace: state.destination_namespace.clone(),
        labels: state
            .labels
            .iter()
            .map(|(key, value)| Label {
                key: key.clone(),
                value: value.clone(),
            })
            .collect(),
        tunnel_name: runtime.tunnel_name.clone(),
    }
}

/// May the caller do `action` on `app`?
fn decide_app(scope: &Scope, action: &str, app: &Application) -> Decision {
    let labels: BTreeMap<String, String> = app
        .labels
        .iter()
        .map(|l| (l.key.clone(), l.value.clone()))
        .collect();
    scope.sources.permissions.decide(
        &scope.viewer.user,
        action,
        &Target {
            account: &scope.viewer.account,
            runtime: &app.runtime,
            cluster: &app.destination_cluster,
            namespace: Some(&app.destination_namespace),
            labels: Some(&labels),
        },
    )
}

/// The app `namespace/name` of runtime `runtime` the caller may see, or the audited error.
fn find_app(
    scope: &Scope,
    field: &str,
    runtime: &str,
    namespace: &str,
    name: &str,
    action: &str,
) -> Result<Application> {
    let missing = || {
        let reason = format!("no application {namespace}/{name} in runtime {runtime}");
        scope.audit(field, runtime, Outcome::Denied, 404, reason.clone());
        error("NOT_FOUND", StatusCode::NOT_FOUND, reason)
    };
    let Some(found) = runtime_of(scope, runtime) else {
        return Err(missing());
    };
    let Some(events) = &scope.sources.events else {
        return Err(missing());
    };
    let key = format!("{namespace}/{name}");
    let app = events.with_apps_of(&found.tunnel_name, |apps| {
        apps.get(&key)
            .filter(|s| !s.deleted)
            .map(|s| application(&found, &key, s))
    });
    let Some(app) = app else {
        return Err(missing());
    };
    // An app the caller may not even read is answered as a missing one.
    if !decide_app(scope, "applications:read", &app).allowed() {
        return Err(missing());
    }
    if action != "applications:read" && !decide_app(scope, action, &app).allowed() {
        let reason = format!(
            "user {} may not {action} application {namespace}/{name} in runtime {runtime}",
            scope.viewer.user.name
        );
        scope.audit(field, runtime, Outcome::Denied, 403, reason.clone());
        return Err(error("FORBIDDEN", StatusCode::FORBIDDEN, reason));
    }
    Ok(app)
}

/// What a page costs: its selection once per item it may hold (`first`; a `first` outside
/// 1..=500 is priced as one item, so the resolver refuses it with its own clear message),
/// so a big page of a deep selection is refused as too complex before anything runs.
fn page_cost(first: i32, child_complexity: usize) -> usize {
    let items = if (1..=MAX_PAGE).contains(&first) {
        first
    } else {
        1
    };
    usize::try_from(items).unwrap_or(1) * child_complexity
}

/// The queries.
pub struct QueryRoot;

/// An application's `metadata` as a runtime sends it (`name`, `namespace`, `labels`, …): the
/// fork's repo-server and go-sdk pass the Kubernetes object's metadata whole.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ApplicationMetadata(pub serde_json::Map<String, serde_json::Value>);

async_graphql::scalar!(
    ApplicationMetadata,
    "Object",
    "A JSON object: an application's Kubernetes metadata."
);

/// The part of a PromotionTemplate a runtime reads (go-sdk `PromotionTemplateShort`).
#[derive(SimpleObject, Clone, Debug)]
pub struct PromotionTemplateShort {
    /// Where the application's version is read from; null when the template names none.
    pub version_source: Option<VersionSource>,
}

/// A file under the application's path and a JSONPath in it.
#[derive(SimpleObject, Clone, Debug)]
pub struct VersionSource {
    /// The file (`Chart.yaml`).
    pub file: String,
    /// The JSONPath (`$.appVersion`).
    pub json_path: String,
}

#[Object]
impl QueryRoot {
    /// The caller.
    async fn me(&self, ctx: &Context<'_>) -> Me {
        let viewer = &scope(ctx).viewer;
        Me {
            name: viewer.user.name.clone(),
            account: viewer.account.clone(),
            role: viewer.user.role.as_str().to_string(),
            teams: viewer.user.teams.iter().cloned().collect(),
        }
    }

    /// One runtime of the caller's account (`NOT_FOUND` when there is none they reach).
    async fn runtime(&self, ctx: &Context<'_>, name: String) -> Result<Runtime> {
        let scope = scope(ctx);
        runtime_of(scope, &name).ok_or_else(|| {
            let reason = format!("no runtime {name} in account {}", scope.viewer.account);
            scope.audit("runtime", &name, Outcome::Denied, 404, reason.clone());
            error("NOT_FOUND", StatusCode::NOT_FOUND, reason)
        })
    }

    /// The runtimes of the caller's account they reach, by name.
    async fn runtimes(&self, ctx: &Context<'_>) -> Vec<Runtime> {
        runtimes_of(scope(ctx))
    }

    /// Applications the caller may read, filtered, a page at a time (`first` at most 500;
    /// `after`: a page's `endCursor`).
    #[graphql(complexity = "page_cost(first, child_complexity)")]
    async fn applications(
        &self,
        ctx: &Context<'_>,
        filter: Option<ApplicationFilter>,
        #[graphql(default = 50)] first: i32,
        after: Option<String>,
    ) -> Result<ApplicationPage> {
        let scope = scope(ctx);
        let bad = |reason: String| {
            scope.audit("applications", "", Outcome::Denied, 400, reason.clone());
            error("BAD_USER_INPUT", StatusCode::BAD_REQUEST, reason)
        };
        if !(1..=MAX_PAGE).contains(&first) {
            return Err(bad(format!("first must be 1..={MAX_PAGE}, not {first}")));
        }
        let after =
            match after {
                None => None,
                Some(cursor) => Some(decode_cursor(&cursor).ok_or_else(|| {
                    bad(format!("after: {cursor:?} is not a cursor this API gave"))
                })?),
            };
        let filter = filter.unwrap_or_default();
        let mut wanted_labels = Vec::new();
        for label in filter.labels.iter().flatten() {
            let Some((k, v)) = label.split_once('=') else {
                return Err(bad(format!("labels: {label:?} is not key=value")));
            };
            wanted_labels.push((k.to_string(), v.to_string()));
        }
        let mut matched = Vec::new();
        if let Some(events) = &scope.sources.events {
            for runtime in runtimes_of(scope) {
                if filter.runtime.as_ref().is_some_and(|r| *r != runtime.name) {
                    continue;
                }
                let apps: Vec<Application> = events.with_apps_of(&runtime.tunnel_name, |apps| {
                    apps.iter()
                        .filter(|(_, s)| !s.deleted)
                        .map(|(key, s)| application(&runtime, key, s))
                        .collect()
                });
                matched.extend(apps.into_iter().filter(|app| {
                    filter
                        .namespace
                        .as_ref()
                        .is_none_or(|n| *n == app.namespace)
                        && filter
                            .sync_status
                            .as_ref()
                            .is_none_or(|s| *s == app.sync_status)
                        && filter
                            .health_status
                            .as_ref()
                            .is_none_or(|s| *s == app.health_status)
                        && wanted_labels
                            .iter()
                            .all(|(k, v)| app.labels.iter().any(|l| l.key == *k && l.value == *v))
                        && decide_app(scope, "applications:read", app).allowed()
                }));
            }
        }
        let total_count = i32::try_from(matched.len()).unwrap_or(i32::MAX);
        // `matched` is in (runtime, "namespace/name") order: compare cursors the same way
        // (as one string, `prod-eu/…` would sort before `prod/…`).
        let start = match &after {
            None => 0,
            Some(cursor) => matched.partition_point(|app| order_of(app) <= cursor_order(cursor)),
        };
        let items: Vec<Application> = matched
            .into_iter()
            .skip(start)
            .take(first as usize + 1)
            .collect();
        let has_next_page = items.len() > first as usize;
        let items: Vec<Application> = items.into_iter().take(first as usize).collect();
        Ok(ApplicationPage {
            end_cursor: items.last().map(|app| encode_cursor(&cursor_of(app))),
            items,
            total_count,
            has_next_page,
        })
    }

    /// One application (`NOT_FOUND` when it is not there or the caller may not read it).
    async fn application(
        &self,
        ctx: &Context<'_>,
        runtime: String,
        namespace: String,
        name: String,
    ) -> Result<Application> {
        find_app(
            scope(ctx),
            "application",
            &runtime,
            &namespace,
            &name,
            "applications:read",
        )
    }

    /// Releases of the account's Products the caller may read (a `promotions:read` rule
    /// covering a runtime one of its environments runs in), newest first, a page at a time
    /// (`first` at most 500; `after`: a page's `endCursor`); `product` and `phase` filter.
    #[graphql(complexity = "page_cost(first, child_complexity)")]
    async fn releases(
        &self,
        ctx: &Context<'_>,
        product: Option<String>,
        phase: Option<String>,
        #[graphql(default = 50)] first: i32,
        after: Option<String>,
    ) -> Result<ReleasePage> {
        let scope = scope(ctx);
        let bad = |reason: String| {
            scope.audit("releases", "", Outcome::Denied, 400, reason.clone());
            error("BAD_USER_INPUT", StatusCode::BAD_REQUEST, reason)
        };
        if !(1..=MAX_PAGE).contains(&first) {
            return Err(bad(format!("first must be 1..={MAX_PAGE}, not {first}")));
        }
        let matched: Vec<Release> = releases_of(scope)
            .into_iter()
            .filter(|r| product.as_ref().is_none_or(|p| *p == r.product))
            .filter(|r| phase.as_ref().is_none_or(|p| *p == r.phase))
            .collect();
        // Newest first: the page after a cursor holds the releases older than the one it
        // names, whether or not that one still matches the filter.
        let start = match after {
            None => 0,
            Some(cursor) => {
                let seq = base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(&cursor)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .and_then(|text| text.strip_prefix("release:")?.parse::<usize>().ok())
                    .ok_or_else(|| {
                        bad(format!("after: {cursor:?} is not a cursor this API gave"))
                    })?;
                matched.partition_point(|r| r.seq >= seq)
            }
        };
        let total_count = i32::try_from(matched.len()).unwrap_or(i32::MAX);
        let rest = matched.len().saturating_sub(start);
        let items: Vec<Release> = matched
            .into_iter()
            .skip(start)
            .take(first as usize)
            .collect();
        Ok(ReleasePage {
            end_cursor: items.last().map(|r| {
                base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .encode(format!("release:{}", r.seq))
            }),
            has_next_page: rest > items.len(),
            items,
            total_count,
        })
    }

    /// One release (`NOT_FOUND` when there is none the caller may read).
    async fn release(&self, ctx: &Context<'_>, id: String) -> Result<Release> {
        let scope = scope(ctx);
        releases_of(scope)
            .into_iter()
            .find(|r| r.id == id)
            .ok_or_else(|| {
                let reason = format!("no release {id} in account {}", scope.viewer.account);
                scope.audit("release", "", Outcome::Denied, 404, reason.clone());
                error("NOT_FOUND", StatusCode::NOT_FOUND, reason)
            })
    }

    /// The promotion template that applies to one of the calling runtime's applications
    /// (go-sdk `GetVersionSourceByRuntime`; the fork's repo-server asks the same): the
    /// Product's own for one of its environments' apps, else the composite of the
    /// PromotionTemplates whose selector matches its labels; null when none applies. Only a
    /// runtime's own token may ask (`FORBIDDEN` otherwise).
    async fn promotion_template_by_runtime(
        &self,
        ctx: &Context<'_>,
        application_metadata: ApplicationMetadata,
    ) -> Result<Option<PromotionTemplateShort>> {
        let scope = scope(ctx);
        let field = "promotionTemplateByRuntime";
        let Some(runtime) = &scope.viewer.runtime else {
            let reason = format!("{field} answers a runtime's token, not a user's");
            scope.audit(field, "", Outcome::Denied, 403, reason.clone());
            return Err(error("FORBIDDEN", StatusCode::FORBIDDEN, reason));
        };
        let bad = |reason: String| {
            scope.audit(field, runtime, Outcome::Denied, 400, reason.clone());
            error("BAD_USER_INPUT", StatusCode::BAD_REQUEST, reason)
        };
        let metadata = &application_metadata.0;
        let name = metadata
            .get("name")
            .and_then(serde_json::Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| bad("applicationMetadata.name: required, a string".into()))?;
        let mut labels = BTreeMap::new();
        match metadata.get("labels") {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::Object(given)) => {
                for (key, value) in given {
                    let value = value.as_str().ok_or_else(|| {
                        bad(format!("applicationMetadata.labels.{key}: not a string"))
                    })?;
                    labels.insert(key.clone(), value.to_string());
                }
            }
            Some(_) => return Err(bad("applicationMetadata.labels: not an object".into())),
        }
        let text = |source: &serde_json::Value, key: &str| {
            source
                .get(key)
                .and_then(serde_json::Value::as_str)
                .map(str::to_string)
        };
        Ok(scope
            .sources
            .releases
            .version_source_for(runtime, name, &labels)
            .map(|source| PromotionTemplateShort {
                version_source: text(&source, "file")
                    .zip(text(&source, "jsonPath"))
                    .map(|(file, json_path)| VersionSource { file, json_path }),
            }))
    }

    /// The account's audit log after `after` (a `seq`), oldest first, at most `first`
    /// (1000). Needs the account's admin or a rule granting `audit:read`.
    async fn audit_log(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 0)] after: i64,
        #[graphql(default = 100)] first: i32,
    ) -> Result<Vec<AuditEntry>> {
        let scope = scope(ctx);
        if !may_read_audit(scope) {
            let reason = format!(
                "user {} may not read the audit log of account {}",
                scope.viewer.user.name, scope.viewer.account
            );
            scope.audit("auditLog", "", Outcome::Denied, 403, reason.clone());
            return Err(error("FORBIDDEN", StatusCode::FORBIDDEN, reason));
        }
        let entries = scope.sources.audit.query(
            Some(&scope.viewer.account),
            u64::try_from(after).unwrap_or(0),
            usize::try_from(first).unwrap_or(0),
        );
        Ok(entries
            .into_iter()
            .map(|e| AuditEntry {
                seq: i64::try_from(e.seq).unwrap_or(i64::MAX),
                at: e.at,
                actor: match e.actor {
                    crate::platform::audit::Actor::Anonymous => "anonymous".into(),
                    crate::platform::audit::Actor::Admin => "admin".into(),
                    crate::platform::audit::Actor::User { name } => format!("user:{name}"),
                    crate::platform::audit::Actor::Platform => "platform".into(),
                },
                action: e.action,
                runtime: e.runtime,
                outcome: match e.outcome {
                    Outcome::Allowed => "allowed".into(),
                    Outcome::Denied => "denied".into(),
                },
                status: i32::from(e.status),
                reason: e.reason,
            })
            .collect())
    }
}

/// See [`crate::platform::permissions::Permissions::may_read_audit`].
pub(crate) fn may_read_audit(scope: &Scope) -> bool {
    scope.sources.permissions.may_read_audit(&scope.viewer.user)
}

/// Where `app` is in a page's order: (runtime, `namespace/name`).
fn order_of(app: &Application) -> (&str, String) {
    (&app.runtime, format!("{}/{}", app.namespace, app.name))
}

/// A cursor's place in that order (runtime names hold no `/`).
fn cursor_order(cursor: &str) -> (&str, String) {
    let (runtime, key) = cursor.split_once('/').unwrap_or((cursor, ""));
    (runtime, key.to_string())
}

fn cursor_of(app: &Application) -> String {
    format!("{}/{}/{}", app.runtime, app.namespace, app.name)
}

fn encode_cursor(key: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key)
}

fn decode_cursor(cursor: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()?;
    let key = String::from_utf8(bytes).ok()?;
    (key.split('/').count() == 3).then_some(key)
}

/// The mutations.
pub struct MutationRoot;

#[Object]
impl MutationRoot {
    /// Creates runtime `name` in the caller's account and mints its token (account admins
    /// only). Creating an existing runtime again rotates its token: the old one stops
    /// working at once and its open tunnel is closed.
    #[allow(clippy::too_many_arguments)]
    async fn create_runtime(
        &self,
        ctx: &Context<'_>,
        name: String,
        #[graphql(default_with = "RuntimeKind::Hybrid")] kind: RuntimeKind,
        #[graphql(default_with = "AccessMode::Tunnel")] access_mode: AccessMode,
        #[graphql(default)] runtime_version: String,
        cluster: Option<String>,
        ingress_host: Option<String>,
    ) -> Result<NewRuntime> {
        let scope = scope(ctx);
        let account = scope.viewer.account.clone();
        let refuse = |status: StatusCode, code: &'static str, reason: String| {
            scope.audit(
                "createRuntime",
                &name,
                Outcome::Denied,
                status.as_u16(),
                reason.clone(),
            );
            error(code, status, reason)
        };
        if scope.viewer.user.role != Role::Admin {
            return Err(refuse(
                StatusCode::FORBIDDEN,
                "FORBIDDEN",
                format!(
                    "user {} is not an admin of account {account}, so may not create runtimes",
                    scope.viewer.user.name
                ),
            ));
        }
        let named =
            |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        if !named(&name) {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                "BAD_USER_INPUT",
                format!("{name:?} is not a runtime name ([A-Za-z0-9-])"),
            ));
        }
        let ingress_host = ingress_host.unwrap_or_default();
        if access_mode == AccessMode::Ingress && ingress_host.is_empty() {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                "BAD_USER_INPUT",
                "a runtime in ingress mode needs ingressHost".into(),
            ));
        }
        if !ingress_host.is_empty() && !registry::valid_ingress_host(&ingress_host) {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                "BAD_USER_INPUT",
                format!("ingressHost {ingress_host:?} is not host:port (letters, digits, . and -; a port 1-65535)"),
            ));
        }
        let text_ok = |s: &str| s.len() <= 253 && s.chars().all(|c| c.is_ascii_graphic());
        if !text_ok(&runtime_version) || cluster.as_deref().is_some_and(|c| !text_ok(c)) {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                "BAD_USER_INPUT",
                "runtimeVersion and cluster are at most 253 visible ASCII characters".into(),
            ));
        }
        let info = registry::Info {
            kind: match kind {
                RuntimeKind::Hybrid => RegistryKind::Hybrid,
                RuntimeKind::Hosted => RegistryKind::Hosted,
            },
            access_mode: match access_mode {
                AccessMode::Tunnel => RegistryAccess::Tunnel,
                AccessMode::Ingress => RegistryAccess::Ingress,
            },
            version: runtime_version,
            cluster: cluster.unwrap_or_else(|| registry::DEFAULT_CLUSTER.into()),
            ingress_host,
        };
        let registration = scope
            .sources
            .registry
            .register_with(&scope.env, &account, &name, info)
            // Whose name it is is not the caller's to learn.
            .map_err(|taken| {
                refuse(
                    StatusCode::CONFLICT,
                    "CONFLICT",
                    format!("the runtime name {} is taken", taken.name),
                )
            })?;
        let closed =
            registration.rotated && scope.sources.tunnels.close(&format!("{account}-{name}"));
        scope.audit(
            "createRuntime",
            &name,
            Outcome::Allowed,
            201,
            match (registration.rotated, closed) {
                (false, _) => String::new(),
                (true, false) => "token rotated".to_string(),
                (true, true) => "token rotated; its open tunnel closed".to_string(),
            },
        );
        Ok(NewRuntime {
            name,
            new_access_token: registration.token,
            rotated: registration.rotated,
        })
    }

    /// Syncs an application (to `revision`, or its target).
    async fn sync_application(
        &self,
        ctx: &Context<'_>,
        runtime: String,
        namespace: String,
        name: String,
        revision: Option<String>,
        idempotency_key: Option<String>,
    ) -> Result<RuntimeAnswer> {
        let scope = scope(ctx);
        find_app(
            scope,
            "syncApplication",
            &runtime,
            &namespace,
            &name,
            "applications:sync",
        )?;
        let body = serde_json::json!({"revision": revision}).to_string();
        let path = format!("/app-proxy/api/applications/{namespace}/{name}/sync");
        send(
            scope,
            "syncApplication",
            &runtime,
            &path,
            body,
            idempotency_key,
        )
        .await
    }

    /// Asks Argo CD to refresh an application.
    async fn refresh_application(
        &self,
        ctx: &Context<'_>,
        runtime: String,
        namespace: String,
        name: String,
    ) -> Result<RuntimeAnswer> {
        let scope = scope(ctx);
        find_app(
            scope,
            "refreshApplication",
            &runtime,
            &namespace,
            &name,
            "applications:refresh",
        )?;
        let path = format!("/app-proxy/api/applications/{namespace}/{name}/refresh");
        send(
            scope,
            "refreshApplication",
            &runtime,
            &path,
            "{}".into(),
            None,
        )
        .await
    }

    /// Terminates a workflow.
    async fn terminate_workflow(
        &self,
        ctx: &Context<'_>,
        runtime: String,
        namespace: String,
        name: String,
    ) -> Result<RuntimeAnswer> {
        let scope = scope(ctx);
        let found = acting_in(
            scope,
            "terminateWorkflow",
            &runtime,
            "workflows:terminate",
            Some(&namespace),
        )?;
        let path = format!("/app-proxy/api/workflows/{namespace}/{name}/terminate");
        send(
            scope,
            "terminateWorkflow",
            &found.name,
            &path,
            "{}".into(),
            None,
        )
        .await
    }

    /// Commits `content` to `path` of repository `repo` (a GitOps-controlled file).
    #[allow(clippy::too_many_arguments)]
    async fn commit_change(
        &self,
        ctx: &Context<'_>,
        runtime: String,
        repo: String,
        path: String,
        content: String,
        message: String,
        idempotency_key: Option<String>,
    ) -> Result<RuntimeAnswer> {
        let scope = scope(ctx);
        let found = acting_in(scope, "commitChange", &runtime, "applications:commit", None)?;
        let body =
            serde_json::json!({"repo": repo, "path": path, "content": content, "message": message})
                .to_string();
        send(
            scope,
            "commitChange",
            &found.name,
            "/app-proxy/api/applications/commit",
            body,
            idempotency_key,
        )
        .await
    }
}

/// Runtime `runtime` when the caller may do `action` in it (in `namespace`), or the audited
/// error (404 when they do not reach it, 403 when they reach it but may not).
fn acting_in(
    scope: &Scope,
    field: &str,
    runtime: &str,
    action: &str,
    namespace: Option<&str>,
) -> Result<Runtime> {
    let Some(found) = runtime_of(scope, runtime) else {
        let reason = format!("no runtime {runtime} in account {}", scope.viewer.account);
        scope.audit(field, runtime, Outcome::Denied, 404, reason.clone());
        return Err(error("NOT_FOUND", StatusCode::NOT_FOUND, reason));
    };
    let decision = scope.sources.permissions.decide(
        &scope.viewer.user,
        action,
        &Target {
            account: &scope.viewer.account,
            runtime,
            cluster: &found.cluster,
            namespace,
            labels: None,
        },
    );
    match decision {
        Decision::Allowed(_) => Ok(found),
        Decision::Denied(Denial::OtherAccount | Denial::NoAccount | Denial::NoRule) => {
            let reason = format!(
                "user {} may not {action} in runtime {runtime}{}",
                scope.viewer.user.name,
                namespace
                    .map(|n| format!(" namespace {n}"))
                    .unwrap_or_default()
            );
            scope.audit(field, runtime, Outcome::Denied, 403, reason.clone());
            Err(error("FORBIDDEN", StatusCode::FORBIDDEN, reason))
        }
    }
}

/// Sends `POST path` with `body` to runtime `runtime`'s app-proxy as the caller, audits the
/// answer, and returns it.
async fn send(
    scope: &Scope,
    field: &str,
    runtime: &str,
    path: &str,
    body: String,
    idempotency_key: Option<String>,
) -> Result<RuntimeAnswer> {
    let tunnel_name = format!("{}-{runtime}", scope.viewer.account);
    let mut request = Request::post(path)
        .header("authorization", format!("Bearer {}", scope.viewer.token))
        .header("content-type", "application/json");
    if let Some(key) = &idempotency_key {
        // As the gateway does: a user's key is theirs alone.
        let scoped = format!("{}/{key}", scope.viewer.user.name);
        if http::HeaderValue::from_str(&scoped).is_err() {
            let reason = "idempotencyKey must be visible ASCII".to_string();
            scope.audit(field, runtime, Outcome::Denied, 400, reason.clone());
            return Err(error("BAD_USER_INPUT", StatusCode::BAD_REQUEST, reason));
        }
        request = request.header(crate::tunnel::REQUEST_ID_HEADER, scoped);
    }
    let request = request
        .body(
            http_body_util::Full::new(Bytes::from(body))
                .map_err(|never| match never {})
                .boxed(),
        )
        .map_err(|e| error("BAD_USER_INPUT", StatusCode::BAD_REQUEST, e.to_string()))?;
    let response =
        crate::platform::sources::deliver(&scope.env, &scope.sources, &tunnel_name, request).await;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let answer = (status, bytes);
    let (status, bytes) = answer;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let refused = matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN);
    scope.audit(
        field,
        runtime,
        if refused {
            Outcome::Denied
        } else {
            Outcome::Allowed
        },
        status.as_u16(),
        if refused {
            format!("refused by runtime {runtime}")
        } else if !status.is_success() {
            text.clone()
        } else {
            String::new()
        },
    );
    if refused {
        // The platform accepted the caller's token; the runtime's own rules refused it.
        return Err(error(
            "FORBIDDEN",
            StatusCode::FORBIDDEN,
            format!("runtime {runtime} refused: {text}"),
        ));
    }
    if !status.is_success() {
        return Err(error(
            "RUNTIME_ERROR",
            status,
            format!("runtime {runtime} answered {}: {text}", status.as_u16()),
        ));
    }
    Ok(RuntimeAnswer {
        status: i32::from(status.as_u16()),
        body: text,
    })
}
