//! The GitOps operator: executes the `PromotionTask`s the platform's promotion
//! orchestrator creates on the runtime — workflows, promotion commits and pull requests,
//! app verification — and turns `RestrictedGitSource`s into Argo CD AppProjects
//! ([`restricted`]), one leader at a time (research §5; issue 15).
//!
//! The real operator's source is not public (`quay.io/codefresh/codefresh-gitops-operator`).
//! What is known is its chart wiring (`gitops-runtime-helm@5bf82295`, `_env.yaml`): the
//! knobs below, the CRDs' fields, and that it talks to the app-proxy, Argo CD, Argo
//! Workflows and the platform. Everything else here is **inferred** and marked so.
//!
//! | | faithful | hardened |
//! |---|---|---|
//! | finding work | lists tasks every `TASK_POLLING_INTERVAL` (10 s); steps that wait are looked at again on the next poll (the workflow monitor and commit-status polls are 10 s too) | watches tasks; a waiting step is looked at again after `poll_waiting` (2 s) |
//! | a step's side effect and its status | the status is written **after** the commit, pull request or workflow (inferred): a leader that dies in between leaves no trace, and the next leader does it again | the step's idempotency key is written to the status **before** the side effect; the next attempt sees it |
//! | a promotion commit | read the file, set the values, commit — every attempt | commit only if the file does not already hold the values (else the existing commit is recorded, `deduplicated`), and only over the blob it read (409 → re-read) |
//! | a workflow step | `generateName`: a second attempt submits a second workflow | a fixed name: a second attempt adopts the first |
//! | a pull request step | a second attempt commits again and opens another (422 while one is open → the task fails) | adopts an open pull request from its branch |
//! | transient errors (Git 5xx, 429, timeouts) | retried on each poll; `MAX_RECONCILE_RETRIES` (10) in a row fail the task (inferred: ~100 s of outage fails a release) | retried with a jittered backoff (1 s doubling to 30 s); the task fails only after `give_up_after` (10 min) of them — the release's own timeout is the platform's |
//! | status writes | merge patch, last writer wins | fenced by the resourceVersion read (an old leader's write is refused) |
//! | leadership | a Lease (`LEADER_ELECT`), client-go's 15 s / 10 s / 2 s; on loss controller-runtime exits (here: the work stops and the replica is a candidate again) | the same |
//!
//! Known simplifications: the operator commits through the Git provider's API directly
//! (the real one has the app-proxy's URL, `AP_URL`); promotion files are JSON, rewritten
//! whole, or YAML (Helm values files), edited in place so comments, key order and quoting
//! survive (`doc`); values are set by dotted JSON paths; `MAX_CONCURRENT_RELEASES` bounds
//! the tasks reconciled per pass.

mod clients;
mod doc;
mod engine;
mod faithful;
mod hardened;
pub mod leader;
pub mod restricted;
pub mod task;

use std::time::Duration;

use kube::api::{Api, ApiResource, GroupVersionKind};

use crate::core::Variant;
use crate::env::kube::KubeTarget;
use crate::env::SharedEnv;
use crate::observe::OperatorEvent;
pub use clients::{App, ArgoCd, CallError, File, Git, Pull};
pub use engine::Next;

/// `TASK_POLLING_INTERVAL` (the chart's default).
pub const TASK_POLLING_INTERVAL: Duration = Duration::from_secs(10);
/// `MAX_RECONCILE_RETRIES`: "before failing a promotion task".
pub const MAX_RECONCILE_RETRIES: u32 = 10;
/// `MAX_CONCURRENT_RELEASES`.
pub const MAX_CONCURRENT_RELEASES: usize = 100;
/// The Lease the replicas elect a leader with (its name is inferred).
pub const LEASE_NAME: &str = "gitops-operator-leader";

/// Operator settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Which design runs.
    pub variant: Variant,
    /// The Kubernetes API; PromotionTasks, RestrictedGitSources and the Lease live in its
    /// namespace.
    pub apiserver: KubeTarget,
    /// Argo CD's namespace, where generated AppProjects and Git Source Applications go
    /// (the runtime installs Argo CD in its own namespace: the default).
    pub argocd_namespace: String,
    /// Where the wrapper workflows are submitted.
    pub workflow_namespace: String,
    /// This replica's identity in the Lease (the pod name).
    pub identity: String,
    /// The Git provider's API, `host:port`.
    pub git_addr: String,
    /// Argo CD's server, `host:port` (`ARGO_CD_URL`).
    pub argocd_addr: String,
    /// Argo CD API token.
    pub argocd_token: String,
    /// `LEADER_ELECT`: true when there is more than one replica.
    pub leader_elect: bool,
    /// The Lease's timings.
    pub lease: leader::Timings,
    /// faithful: `TASK_POLLING_INTERVAL`.
    pub task_polling: Duration,
    /// hardened: a waiting step is looked at again this often. Default 2 s.
    pub poll_waiting: Duration,
    /// `MAX_RECONCILE_RETRIES`.
    pub max_retries: u32,
    /// `MAX_CONCURRENT_RELEASES`.
    pub max_concurrent: usize,
    /// hardened: first retry pause. Default 1 s.
    pub retry_initial: Duration,
    /// hardened: longest retry pause. Default 30 s.
    pub retry_max: Duration,
    /// hardened: transient errors fail a task only once they have lasted this long (and
    /// `max_retries` attempts). Default 10 minutes.
    pub give_up_after: Duration,
    /// Per-call timeout of Git and Argo CD calls.
    pub call_timeout: Duration,
}

impl Config {
    /// The chart's defaults for `variant`, with tasks in `apiserver`'s namespace.
    pub fn new(
        variant: Variant,
        apiserver: KubeTarget,
        identity: &str,
        git_addr: &str,
        argocd_addr: &str,
        argocd_token: &str,
    ) -> Self {
        Config {
            variant,
            workflow_namespace: apiserver.namespace.clone(),
            argocd_namespace: apiserver.namespace.clone(),
            apiserver,
            identity: identity.into(),
            git_addr: git_addr.into(),
            argocd_addr: argocd_addr.into(),
            argocd_token: argocd_token.into(),
            leader_elect: true,
            lease: leader::Timings::default(),
            task_polling: TASK_POLLING_INTERVAL,
            poll_waiting: Duration::from_secs(2),
            max_retries: MAX_RECONCILE_RETRIES,
            max_concurrent: MAX_CONCURRENT_RELEASES,
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(30),
            give_up_after: Duration::from_secs(600),
            call_timeout: Duration::from_secs(30),
        }
    }
}

/// The `PromotionTask` type for kube-rs dynamic APIs.
pub fn promotion_task_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "codefresh.io",
        "v1beta1",
        "PromotionTask",
    ))
}

/// The Argo Workflows `Workflow` type.
pub fn workflow_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "argoproj.io",
        "v1alpha1",
        "Workflow",
    ))
}

/// Runs the replica until the host stops: a candidate for the Lease, and while it leads,
/// the variant's loop over the tasks.
pub async fn run(env: SharedEnv, config: Config) {
    let host = env.identity().host.clone();
    env.observe(
        OperatorEvent::Start {
            host: host.clone(),
            variant: config.variant,
        }
        .into(),
    );
    let client = crate::env::kube::client(env.clone(), &config.apiserver);
    let leases = Api::namespaced(client, &config.apiserver.namespace);
    let mut elector = leader::Elector::new(
        env.clone(),
        leases,
        LEASE_NAME,
        &config.identity,
        config.lease,
    );
    loop {
        if config.leader_elect {
            elector.acquire().await;
            env.observe(OperatorEvent::Leader { host: host.clone() }.into());
        }
        let operator = engine::Operator::new(env.clone(), config.clone());
        let sources = restricted::Generator::new(env.clone(), config.clone());
        let tasks = async {
            match config.variant {
                Variant::Faithful => faithful::run(&operator).await,
                Variant::Hardened => hardened::run(&operator).await,
            }
        };
        let work = async {
            tokio::join!(tasks, sources.run());
        };
        if !config.leader_elect {
            return work.await;
        }
        tokio::select! {
            () = work => return,
            () = elector.hold() => {}
        }
        env.observe(OperatorEvent::LeaderLost { host: host.clone() }.into());
    }
}
