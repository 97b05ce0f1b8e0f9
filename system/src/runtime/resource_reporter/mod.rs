//! The resource event reporter: Rollouts, their ReplicaSets and AnalysisRuns, and Workflows,
//! reported to the platform's events API as they change (issue 13; research §1.11–1.12).
//!
//! | | faithful | hardened |
//! |---|---|---|
//! | shape | EventSource → EventBus → Sensor (Argo Events, as the chart wires it) | one process, watch → latest-state queue → POST |
//! | watch | informer: add/update/delete, same resourceVersion dropped, no resync | the same informer, plus a periodic resync |
//! | bus down | publish retried 5 times 1–2 s apart, then the event is dropped | no bus |
//! | delivery | 3 back-to-back attempts; `[200,201,204,400,401,404]` end them; acked either way | retried with capped backoff until 2xx; only 400, 413 and 422 are final |
//! | ordering | per dependency, in bus order; a restarted Sensor re-sends what it had taken | one POST in flight per object; newer state replaces waiting older state |
//! | deletion | sent as the object's last state (no type) | `type: DELETE`; deletions missed during a gap found from the platform's read model |
//! | Workflow deleted while the reporter is away (TTL) | its final phase is never seen | held by the reporter's finalizer (Argo Workflows' `workflowDefaults`) until its state is delivered |
//! | memory | unbounded informer backlog while publishing blocks | one pending entry per object |
//!
//! Modules: [`source`] (informer semantics over kube-rs watches), [`bus`] (the EventBus
//! and its client), `faithful` (EventSource publishers and Sensor triggers), [`hardened`]
//! (the queue, workers and resync), [`trigger`] (the POST both send).

pub mod bus;
mod faithful;
pub mod hardened;
pub mod source;
pub mod trigger;

use std::time::Duration;

use crate::core::Variant;
use crate::env::kube::KubeTarget;
use crate::env::SharedEnv;
use crate::observe::ResourceReporterEvent;
pub use source::Kind;

/// The finalizer hardened holds on Workflows until their last state reached the platform:
/// a Workflow TTL-deleted while the reporter is down stays (Terminating) until it is back.
pub const WORKFLOW_FINALIZER: &str = "codefresh.io/resource-reporter";

/// What the runtime's chart puts in Argo Workflows' `workflowDefaults.metadata.finalizers`
/// for this reporter: hardened's finalizer; faithful (Argo Events) holds nothing. Why a
/// finalizer: the Kubernetes contract that a deletion waits until each finalizer is removed
/// (kubernetes.io, "Finalizers"); that the reporter should hold one is our design
/// (**inferred**, issue 51), not Codefresh's.
pub fn workflow_finalizers(variant: Variant) -> Vec<String> {
    match variant {
        Variant::Faithful => Vec::new(),
        Variant::Hardened => vec![WORKFLOW_FINALIZER.to_string()],
    }
}

/// The port the EventBus listens on (NATS's client port).
pub const BUS_PORT: u16 = 4222;

/// Resource reporter settings (defaults from the chart and argo-events where they exist).
#[derive(Clone, Debug)]
pub struct Config {
    /// Which design runs.
    pub variant: Variant,
    /// The Kubernetes API.
    pub apiserver: KubeTarget,
    /// The kinds reported (the chart's rollout-reporter: Rollouts, ReplicaSets,
    /// AnalysisRuns; workflow-reporter: Workflows). Default all four.
    pub kinds: Vec<Kind>,
    /// Workflows are watched in this namespace (the chart: the runtime's); `None`: all.
    pub workflow_namespace: Option<String>,
    /// Platform `host:port` (events API).
    pub platform_addr: String,
    /// Runtime token, sent raw in `Authorization` (the Sensor reads it from Secret
    /// `codefresh-token`).
    pub runtime_token: String,
    /// faithful: the EventBus `host:port`.
    pub bus_addr: String,
    /// faithful: how long a bus call waits for an answer. Default 5 s.
    pub bus_timeout: Duration,
    /// faithful: publish attempts per event (`DefaultBackoff.Steps`). Default 5.
    pub publish_attempts: u32,
    /// faithful: pause before a publish retry, doubled by jitter (`DefaultBackoff`: 1 s,
    /// jitter 1). Default 1 s.
    pub publish_backoff: Duration,
    /// faithful: the trigger's `retryStrategy.steps`. Default 3.
    pub trigger_attempts: u32,
    /// faithful: `policy.status.allow`. Default `[200, 201, 204, 400, 401, 404]`.
    pub allowed_statuses: Vec<u16>,
    /// Per-POST timeout (the HTTP trigger's default is 60 s).
    pub trigger_timeout: Duration,
    /// hardened: objects delivered at once. Default 8.
    pub workers: usize,
    /// hardened: first retry pause (jittered down to half). Default 1 s.
    pub retry_initial: Duration,
    /// hardened: longest retry pause. Default 30 s.
    pub retry_max: Duration,
    /// hardened: resync period. Default 60 s.
    pub resync_every: Duration,
    /// Where to answer `GET /healthz` (a pod's probes, in real mode); `None`: nowhere, as
    /// in the simulator, where nothing probes it.
    pub health_addr: Option<String>,
}

impl Config {
    /// Defaults for `variant` against `apiserver`, reporting to `platform_addr`.
    pub fn new(variant: Variant, apiserver: KubeTarget, platform_addr: &str, token: &str) -> Self {
        Config {
            variant,
            apiserver,
            kinds: Kind::ALL.to_vec(),
            workflow_namespace: None,
            platform_addr: platform_addr.to_string(),
            runtime_token: token.to_string(),
            bus_addr: format!("eventbus:{BUS_PORT}"),
            bus_timeout: Duration::from_secs(5),
            publish_attempts: 5,
            publish_backoff: Duration::from_secs(1),
            trigger_attempts: 3,
            allowed_statuses: vec![200, 201, 204, 400, 401, 404],
            trigger_timeout: Duration::from_secs(60),
            workers: 8,
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(30),
            resync_every: Duration::from_secs(60),
            health_addr: None,
        }
    }

    fn scope(&self) -> source::Scope {
        source::Scope {
            kinds: self.kinds.clone(),
            workflow_namespace: self.workflow_namespace.clone(),
        }
    }
}

/// Runs the reporter (the variant's shape) until the process stops.
pub async fn run(env: SharedEnv, config: Config) {
    env.observe(
        ResourceReporterEvent::Start {
            host: env.identity().host.clone(),
            variant: config.variant,
        }
        .into(),
    );
    let reporter = async {
        match config.variant {
            Variant::Faithful => faithful::run(env.clone(), config.clone()).await,
            Variant::Hardened => hardened::run(env.clone(), config.clone()).await,
        }
    };
    match &config.health_addr {
        None => reporter.await,
        Some(addr) => {
            let health = health(env.clone(), addr.clone());
            tokio::select! {
                () = reporter => {}
                () = health => {}
            }
        }
    }
}

/// Answers `GET /healthz` with 200 while the reporter runs (anything else: 404). A listener
/// that cannot be opened is logged as a watch error would be, and the reporter goes on.
async fn health(env: SharedEnv, addr: String) {
    use http::{Response, StatusCode};
    let listener = match env.listen(&addr).await {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(%addr, %error, "resource reporter: cannot serve /healthz");
            return std::future::pending().await;
        }
    };
    let served = crate::env::http::serve(listener, |req, _peer| async move {
        let (status, body) = match req.uri().path() {
            "/healthz" => (StatusCode::OK, "ok"),
            _ => (StatusCode::NOT_FOUND, "not found"),
        };
        Response::builder()
            .status(status)
            .header("content-type", "text/plain")
            .body(crate::env::http::full(body))
            .expect("static response parts are valid")
    })
    .await;
    if let Err(error) = served {
        tracing::error!(%addr, %error, "resource reporter: /healthz stopped");
    }
    std::future::pending().await
}
