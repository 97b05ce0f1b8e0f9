//! The Codefresh Runner's agent (venona ≥ 2.0, `runner-research.md` §1): it polls the
//! platform for its tasks every 3 s, runs each build's tasks in order against its cluster —
//! the build's dind volume claim, its dind and engine pods, and their deletion — and reports
//! each task's status; it sends a heartbeat every 10 s and answers `/health`.
//!
//! - [`agent`]: the poll loop, the workflow queue and its handlers, the status reports.
//! - [`exec`]: one task against the Kubernetes API, and how its error is classified.
//! - [`engine`]: a stand-in for the engine pods (and the kubelet that runs them): it runs a
//!   build's steps and reports to the platform.
//! - [`volumes`]: the dind volume provisioner (binds each build's claim, reusing a volume a
//!   finished build left) and the local volumes cleaner (`dind-lv-monitor`).
//!
//! | | faithful (venona 2.0.10) | hardened |
//! |---|---|---|
//! | calls to the platform | Go's zero `http.Client`: no timeout (§1.8); a poll that never ends stalls the agent | a deadline per call ([`Config::request_timeout`]) |
//! | a failed poll | logged; the next tick tries again (no backoff, §1.4) | jittered exponential backoff, 1 s to 30 s |
//! | a task handed out again (its status lost) | executed again: no dedup by task id (§1.7) | not executed again: its recorded status is reported |
//! | `AlreadyExists` on a create, `NotFound` on a delete | `Error`, not retriable (`NewK8sError`, §1.6) | `Success`: the task's effect is there |
//! | a status report that fails | logged only (queue.go L202-205) | retried with backoff until the platform has it (a 409 means it has a newer one) |
//! | `/health` | always 200 (`server.go` L66-69) | 503 once no poll succeeded for [`Config::unhealthy_after`] |
//! | one workflow's tasks | serialised in this process only (`activeWorkflows`, §1.5) | the same, and a task in flight is not queued twice |
//! | a pod or claim of an ended build left behind (a policy termination, §4 row 5; a creation handed out again after its build's deletion, row 1) | stays: the chart's RBAC gives the agent no list (§4 row 5) | the sweeper lists labelled pods and claims every [`SWEEP_EVERY`] and deletes those of builds the platform says ended |
//!
//! What is inferred: that the platform hands out an unreported task again (§6.1, a parameter
//! of `platform::runner`); agent tasks (`proxy`) are not modelled yet (dropped, as unknown
//! types are).

pub mod agent;
pub mod engine;
pub mod exec;
pub mod proxy;
pub mod volumes;

use std::time::Duration;

use crate::core::Variant;
use crate::env::kube::KubeTarget;
use crate::env::SharedEnv;

/// `defaultTaskPullingInterval` (start.go L66-75).
pub const TASK_PULLING_INTERVAL: Duration = Duration::from_secs(3);
/// `defaultStatusReportingInterval`: the heartbeat.
pub const STATUS_REPORTING_INTERVAL: Duration = Duration::from_secs(10);
/// `defaultWorkflowConcurrency`: handlers.
pub const WORKFLOW_CONCURRENCY: usize = 50;
/// `defaultWorkflowBufferSize`: the workflow queue's capacity.
pub const WORKFLOW_BUFFER_SIZE: usize = 1000;
/// How long a handler waits before putting back a batch whose workflow is busy (queue.go
/// L122-140).
pub const BUSY_WORKFLOW_PAUSE: Duration = Duration::from_millis(100);
/// hardened: how often the sweeper looks for objects of ended builds.
pub const SWEEP_EVERY: Duration = Duration::from_secs(30);
/// Go's zero `http.Client` has no timeout; a year stands for it (no run is that long).
pub const NO_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// One agent's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Which design runs.
    pub variant: Variant,
    /// `AGENT_ID`.
    pub agent_id: String,
    /// `CODEFRESH_TOKEN`, sent raw in `Authorization`.
    pub token: String,
    /// `CODEFRESH_HOST` as `host:port`.
    pub platform_api: String,
    /// The cluster its builds run in; objects go to the namespace their task names.
    pub apiserver: KubeTarget,
    /// `PORT`: `/health` (and `/metrics` in the real agent).
    pub listen: Option<String>,
    /// `TASK_PULLING_INTERVAL`.
    pub poll_every: Duration,
    /// `STATUS_REPORTING_INTERVAL`.
    pub heartbeat_every: Duration,
    /// `WORKFLOW_CONCURRENCY`.
    pub concurrency: usize,
    /// `WORKFLOW_BUFFER_SIZE`.
    pub buffer: usize,
    /// hardened: each call to the platform's deadline (faithful: [`NO_TIMEOUT`]).
    pub request_timeout: Duration,
    /// hardened: `/health` fails once no poll succeeded for this long.
    pub unhealthy_after: Duration,
    /// hardened: how many task ids it remembers having done.
    pub remembered_tasks: usize,
    /// How long after its process starts the agent begins (a pod whose container starts
    /// after its siblings': replicas then poll out of phase, as real pods do). Default 0.
    pub start_after: Duration,
}

impl Config {
    /// An agent with venona's defaults.
    pub fn new(
        variant: Variant,
        agent_id: &str,
        token: &str,
        platform_api: &str,
        apiserver: KubeTarget,
    ) -> Self {
        Config {
            variant,
            agent_id: agent_id.into(),
            token: token.into(),
            platform_api: platform_api.into(),
            apiserver,
            listen: None,
            poll_every: TASK_PULLING_INTERVAL,
            heartbeat_every: STATUS_REPORTING_INTERVAL,
            concurrency: WORKFLOW_CONCURRENCY,
            buffer: WORKFLOW_BUFFER_SIZE,
            request_timeout: Duration::from_secs(10),
            unhealthy_after: Duration::from_secs(30),
            remembered_tasks: 10_000,
            start_after: Duration::ZERO,
        }
    }
}

/// Runs the agent until the process stops.
pub async fn run(env: SharedEnv, config: Config) {
    if !config.start_after.is_zero() {
        env.sleep(config.start_after).await;
    }
    env.observe(
        crate::observe::RunnerEvent::Start {
            host: env.identity().host.clone(),
            variant: config.variant,
        }
        .into(),
    );
    agent::Agent::new(env, config).run().await;
}
