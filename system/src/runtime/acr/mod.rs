//! The change-revision (ACR) controller: in a monorepo, finds the commit that really changed
//! an app's paths and writes it into the app as its sync's `changeRevision`, so
//! notifications and reporters fire once per real change (issue 14; research §4.1,
//! `codefresh-io/argo-cd:acr_controller/`).
//!
//! | | faithful | hardened |
//! |---|---|---|
//! | input | Application informer → broadcaster (apps with the `manifest-generate-paths` annotation) → 1,000-slot channel, **dropped when full** | the same informer → a set of pending apps (one entry per app, nothing dropped) |
//! | consumer | one, 2-minute budget per event | `workers` at once, one computation per app at a time |
//! | when | only while the sync's `operation` is set (re-GET; gone → nothing, for good) | while it runs, **and** after it completed: the finished sync's value is checked against `history` |
//! | revisions | `(current, previous)` from `operation`, `syncResult` and `history` (below) | in progress: (`operation.sync.revision`, last history entry); done: the last two history entries; a first sync asks the Git provider for the newest commit touching the app's paths (without one: only whether its own commit did) |
//! | write | merge patch of `status.operationState.operation.sync.changeRevision` (or `operation.sync.changeRevision` before any operationState) | the same fields, with the resourceVersion read as a precondition (a new sync in between → re-read); a stale value is cleared |
//! | failures | logged; the event is gone | retried with 1–30 s jittered backoff |
//! | restart | whatever was queued is gone; the initial list re-sends every app, into the same 1,000 slots | the initial list and a resync every `resync_every` re-check every app |
//!
//! faithful's `(current, previous)` (research §4.1, at `8e77c5712`): no history →
//! (`operation.sync.revision`, ""); sync finished (`Synced` and a `syncResult`) →
//! (`syncResult.revision`, second-to-last history entry or ""); otherwise
//! (`operation.sync.revision`, last history entry). Its "already computed" check reads the
//! plural `changeRevisions`, which the controller never writes, so it recomputes on every
//! event while the operation is set. Argo CD answers with the repo-server's
//! `GetChangeRevision` (`/api/v1/application/changeRevision`).

mod argocd;
mod faithful;
mod hardened;
pub mod paths;

use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

use crate::core::json::Pointer as _;
use crate::core::Variant;
use crate::env::kube::KubeTarget;
use crate::env::SharedEnv;
use crate::observe::AcrEvent;
pub use crate::observe::AcrField as Field;
pub use argocd::{ArgoCd, CallError, GitApi};

/// The port the real controller listens on (`common.DefaultPortACRServer`; health only).
pub const PORT: u16 = 8090;

/// ACR controller settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Which design runs.
    pub variant: Variant,
    /// The Kubernetes API; Applications are watched in its namespace.
    pub apiserver: KubeTarget,
    /// Argo CD's server, `host:port` (`ARGOCD_SERVER`).
    pub argocd_addr: String,
    /// Argo CD API token (`ARGOCD_TOKEN`).
    pub argocd_token: String,
    /// faithful: the channel's slots (`watchAPIBufferSize`, 1,000).
    pub channel_capacity: usize,
    /// faithful: the budget of one event (2 minutes).
    pub event_timeout: Duration,
    /// Per-call timeout of Argo CD calls.
    pub call_timeout: Duration,
    /// hardened: apps computed at once. Default 4.
    pub workers: usize,
    /// hardened: first retry pause (jittered down to half). Default 1 s.
    pub retry_initial: Duration,
    /// hardened: longest retry pause. Default 30 s.
    pub retry_max: Duration,
    /// hardened: every app is re-checked this often. Default 60 s.
    pub resync_every: Duration,
    /// hardened: the Git provider's API (`host:port`), asked for a first sync's change
    /// revision (the newest commit touching the app's paths); `None`: the repo-server's
    /// answer for the sync's own commit only.
    pub git_api: Option<String>,
}

impl Config {
    /// Defaults for `variant`, watching through `apiserver`, asking Argo CD at `argocd_addr`.
    pub fn new(variant: Variant, apiserver: KubeTarget, argocd_addr: &str, token: &str) -> Self {
        Config {
            variant,
            apiserver,
            argocd_addr: argocd_addr.into(),
            argocd_token: token.into(),
            channel_capacity: 1000,
            event_timeout: Duration::from_secs(120),
            call_timeout: Duration::from_secs(30),
            workers: 4,
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(30),
            resync_every: Duration::from_secs(60),
            git_api: None,
        }
    }
}

/// The `Application` type for kube-rs dynamic APIs.
pub fn application_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "argoproj.io",
        "v1alpha1",
        "Application",
    ))
}

impl Field {
    /// The merge patch that sets the field to `revision` (`None`: removes it).
    fn patch(self, revision: Option<&str>) -> Value {
        let sync = serde_json::json!({"sync": {"changeRevision": revision}});
        match self {
            Field::OperationState => {
                serde_json::json!({"status": {"operationState": {"operation": sync}}})
            }
            Field::Operation => serde_json::json!({"operation": sync}),
        }
    }

    /// The field's value in `app` (empty when absent).
    pub fn read(self, app: &Value) -> String {
        let pointer = match self {
            Field::OperationState => "/status/operationState/operation/sync/changeRevision",
            Field::Operation => "/operation/sync/changeRevision",
        };
        text(app, pointer)
    }
}

/// A string at `pointer` (empty when absent).
fn text(value: &Value, pointer: &str) -> String {
    value
        .at(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// The revisions of `status.history`, oldest first.
fn history(app: &Value) -> Vec<String> {
    app.at("/status/history")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|h| text(h, "/revision"))
        .collect()
}

/// Whether `app` carries a non-empty `manifest-generate-paths` annotation (the
/// broadcaster's filter).
pub fn annotated(app: &DynamicObject) -> bool {
    app.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(paths::MANIFEST_GENERATE_PATHS))
        .is_some_and(|v| !v.is_empty())
}

/// `namespace/name` of an app.
fn key_of(app: &DynamicObject) -> String {
    format!(
        "{}/{}",
        app.metadata.namespace.as_deref().unwrap_or(""),
        app.metadata.name.as_deref().unwrap_or("")
    )
}

/// The Applications API of one namespace.
fn apps(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &application_resource())
}

/// The Applications of `namespace` for a watch, decoded in one pass ([`crate::env::kube::Wire`]).
fn watched_apps(client: &kube::Client, namespace: &str) -> Api<crate::env::kube::Wire> {
    Api::namespaced_with(client.clone(), namespace, &application_resource())
}

/// Runs the controller until the host stops.
pub async fn run(env: SharedEnv, config: Config) {
    env.observe(
        AcrEvent::Start {
            host: env.identity().host.clone(),
            variant: config.variant,
        }
        .into(),
    );
    match config.variant {
        Variant::Faithful => faithful::run(env, config).await,
        Variant::Hardened => hardened::run(env, config).await,
    }
}
