//! Typed observations: what components report to checkers, metrics and the trace.
//!
//! One enum per component, composed into [`Observation`]. Emitters, checkers and metrics
//! share these types, so a renamed or retyped field is a compile error in every reader,
//! never a checker that silently passes. Each serialises as `{"kind": "<component>.<what>",
//! "detail": {...}}` — the trace's JSON-lines format (docs/reference/trace-format.md).
//!
//! The simulated world's pieces (API server, Argo CD, workload, probe, the tunnel world's
//! clients and app-proxy stand-in) report through the same environment seam, so their
//! events live here too, in [`WorldEvent`].

use serde::Serialize;

use crate::core::Variant;

/// Declares an event enum whose variants serialise adjacently tagged under their kind name,
/// and its `kind()` accessor (the same name, without serialising).
macro_rules! events {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $(
                $(#[$vmeta:meta])*
                $kind:literal => $variant:ident $({ $($field:ident : $ty:ty),* $(,)? })?
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        // Fields are named for what they hold; each variant's doc says what happened.
        #[allow(missing_docs)]
        #[derive(Clone, Debug, PartialEq, Serialize)]
        #[serde(tag = "kind", content = "detail")]
        pub enum $name {
            $(
                $(#[$vmeta])*
                #[serde(rename = $kind)]
                $variant $({ $($field: $ty),* })?
            ),*
        }

        impl $name {
            /// The kind name, as the trace writes it.
            pub fn kind(&self) -> &'static str {
                match self {
                    $( $name::$variant { .. } => $kind ),*
                }
            }
        }
    };
}

events! {
    /// The application event reporter (`runtime::app_reporter`).
    pub enum ReporterEvent {
        /// A replica started, with the configuration it read.
        "reporter.start" => Start { replica: String, variant: Variant, shard: Option<u32>, replicas: u32 },
        /// The Applications watch failed (it retries with backoff).
        "reporter.watch_error" => WatchError { replica: String, error: String },
        /// The metrics/health endpoint could not be served.
        "reporter.serve_error" => ServeError { replica: String, error: String },
        /// Queue depth, resync set size, drops so far (faithful: queue full or rate-limited),
        /// pushes parked for resync so far (hardened), and events delivered so far (app and
        /// child-app events; resource events) and rate-limited, sampled every 5 s when they
        /// changed.
        "reporter.queue" => Queue { replica: String, depth: u64, resync: u64, dropped: u64, parked: u64, sent_app: u64, sent_resource: u64, rate_limited: u64 },
        /// hardened: the anti-entropy pass could not read the platform's read model.
        "reporter.resync_error" => ResyncError { replica: String },
        /// The replica put an Argo CD token from its Secret into use (at start, and in
        /// hardened on every change, re-queuing the apps it owns).
        "reporter.argocd_token" => TokenLoaded { replica: String, requeued: u64 },
        /// The replica could not read its Argo CD token Secret (missing, no key, API error).
        "reporter.argocd_token_error" => TokenError { replica: String, error: String },
        /// hardened: an anti-entropy pass re-queued lagging apps and lost deletions.
        "reporter.resync" => Resync { replica: String, requeued: u64, deletions: u64 },
        /// hardened: the replica's lease could not be renewed.
        "reporter.lease_error" => LeaseError { replica: String },
        /// hardened: the live members changed; the replica queued the apps it gained.
        "reporter.membership" => Membership { replica: String, members: Vec<String>, gained: u64 },
        /// hardened: the replica deleted its lease while shutting down, so the others take
        /// its apps at once instead of after the lease expires.
        "reporter.lease_released" => LeaseReleased { replica: String, deleted: bool },
        /// An app was reported without its Git details (app versions, or a sync or change
        /// revision's metadata): the source server or Argo CD could not answer. hardened
        /// reports it again later.
        "reporter.details_missing" => DetailsMissing { replica: String, app: String },
    }
}

events! {
    /// The tunnel: its client in the runtime and its server in the platform.
    pub enum TunnelEvent {
        /// The runtime's tunnel is up (registration accepted, HTTP/2 running).
        "tunnel.client_up" => ClientUp { runtime: String },
        /// The server refused the registration (401/403; 409: the name is held by another session), with its reason.
        "tunnel.client_refused" => ClientRefused { runtime: String, reason: String },
        /// A connection attempt failed before the tunnel was up.
        "tunnel.client_failed" => ClientFailed { runtime: String, why: String },
        /// The client waits before its next attempt (`server_slot`: a busy server's slot).
        "tunnel.client_wait" => ClientWait { runtime: String, ms: u64, server_slot: bool },
        /// A tunnel that was up for `up_ms` went down.
        "tunnel.client_down" => ClientDown { runtime: String, up_ms: u64, why: String },
        /// The client gave up for good (faithful: the first login was refused).
        "tunnel.client_exit" => ClientExit { runtime: String, why: String },
        /// The client's kubelet restarts it after `after_ms` (CrashLoopBackOff; `restarts`
        /// counts them).
        "tunnel.client_restart" => ClientRestart { runtime: String, after_ms: u64, restarts: u32 },
        /// The server accepted a runtime's tunnel (`generation` counts its registrations).
        "tunnel.server_up" => ServerUp { runtime: String, generation: u64 },
        /// The server dropped a runtime's tunnel.
        "tunnel.server_down" => ServerDown { runtime: String, generation: u64, why: String },
        /// A TLS handshake failed.
        "tunnel.tls_failed" => TlsFailed { peer: String, error: String },
        /// Too many registrations in progress: refused with a retry slot.
        "tunnel.server_busy" => ServerBusy { peer: String, retry_after_ms: u64 },
        /// A registration was refused (unknown token, foreign name, wrong path).
        "tunnel.rejected" => Rejected { peer: String, reason: String },
        /// The WebSocket handshake failed.
        "tunnel.handshake_failed" => HandshakeFailed { peer: String, error: String },
    }
}

/// What the platform's read model did with an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Projection {
    /// The app's state moved to the event's.
    Updated,
    /// The same state at the same resourceVersion was already there.
    Duplicate,
    /// The event was older than what the read model holds; ignored.
    Stale,
}

events! {
    /// The platform's events path (`platform::events`).
    pub enum PlatformEvent {
        /// An application event was projected into the read model.
        /// (`seq`: the bus's sequence number of the event, as acknowledged.)
        "platform.event" => Event { app: String, rv: String, deleted: bool, applied: Projection, seq: u64 },
        /// A resource event (an object an application manages) was projected (`history_id`:
        /// the id of the app's latest history entry — its deployment — the event was built
        /// from, whose revision the platform now shows for the resource).
        "platform.resource_event" => ResourceEvent { resource: String, seq: u64, history_id: i64 },
        /// A resource event was not projected: an event with the same idempotency key
        /// (`key`) already was (a retried copy, which could carry an older state).
        "platform.duplicate_key" => DuplicateKey { resource: String, key: String, seq: u64 },
        /// The events API answered 2xx for the event the bus numbered `seq` (`object`:
        /// `namespace/name`): the platform now owes it to the read model.
        "platform.acknowledged" => Acknowledged { seq: u64, object: String },
        /// The platform restarted after a crash and found its bus as the disk kept it:
        /// `lost` messages never reached the disk (`lost_acknowledged` of them had been
        /// answered 2xx), `redelivered` ones the handler had taken are delivered again, and
        /// `kept` ones still wait.
        "platform.bus_recovered" => BusRecovered { lost: u64, lost_acknowledged: u64, redelivered: u64, kept: u64 },
        /// A request to the events API was refused (401, 400, 413, 503…).
        "platform.rejected" => Rejected { status: u16, reason: String },
        /// The handler projected a cluster-stream object (`kind` Rollout, ReplicaSet,
        /// AnalysisRun or Workflow; `object` is `namespace/name`).
        "platform.cluster_event" => ClusterEvent { kind: String, object: String, rv: String, deleted: bool, applied: Projection, seq: u64 },
        /// A runtime's heartbeat reached the events API (`runtime`: the name its token maps to).
        "platform.heartbeat" => Heartbeat { runtime: String },
        /// The runtime monitor changed what the platform shows for a runtime (`health`:
        /// `Healthy` or `Unable to communicate`; `reason`: the failed check's answer).
        "platform.runtime_health" => RuntimeHealth { runtime: String, health: String, reason: String },
        /// hardened: the anti-entropy job listed `runtime`'s Applications through its
        /// app-proxy (`listed`) and sent again what the read model missed: `updated` apps
        /// as listed, `tombstoned` as deleted; `error`: why it could not list or stopped
        /// short (empty: it did not).
        "platform.anti_entropy" => AntiEntropy { runtime: String, listed: u64, updated: u64, tombstoned: u64, error: String },
        /// A hosted runtime's virtual cluster synced `object` (`kind/namespace/name` in the
        /// virtual cluster) to `host_object` on the host (`action`: created, updated, deleted).
        "platform.vcluster_synced" => VclusterSynced { vcluster: String, object: String, host_object: String, action: String },
        /// The host name of `object` held another object's copy (`owner`): faithful deleted
        /// it (`action` `deleted: <reason>`), hardened left it (`refused`).
        "platform.vcluster_conflict" => VclusterConflict { vcluster: String, object: String, host_object: String, owner: String, action: String },
        /// A virtual cluster's reconcile or watch failed (retried).
        "platform.vcluster_failed" => VclusterFailed { vcluster: String, object: String, error: String },
    }
}

events! {
    /// The shared Kubernetes client glue (`env::kube`).
    pub enum KubeEvent {
        /// A client could not be built (bad kubeconfig, TLS setup).
        "kube.client_error" => ClientError { error: String },
    }
}

events! {
    /// A fault point compiled into the system code fired (`env::buggify`).
    pub enum FaultPointEvent {
        /// The point fired here and now: the component takes its failure path.
        "buggify.fired" => Fired { point: crate::core::buggify::Point },
    }
}

/// How a watch stream of the simulated API server ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchEnd {
    /// `timeoutSeconds` elapsed: a clean close.
    Timeout,
    /// The watched RV was compacted away: an in-stream 410.
    Expired,
    /// The client went away.
    ClientGone,
    /// A fault cut the stream in the middle of a line.
    #[serde(rename = "cut_mid_line")]
    Cut,
    /// The watcher was too slow and its buffer filled.
    DroppedSlow,
}

/// How a client's request through the platform ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestOutcome {
    /// An HTTP answer with this status.
    Status(u16),
    /// No answer within the client's timeout.
    Hung,
    /// The platform's gateway itself could not be reached.
    Unreachable,
}

impl RequestOutcome {
    /// True when the client cannot know whether a write ran (it may retry it).
    pub fn unknown(self) -> bool {
        match self {
            RequestOutcome::Status(status) => (502..=504).contains(&status),
            RequestOutcome::Hung | RequestOutcome::Unreachable => true,
        }
    }

    /// True for a 2xx answer.
    pub fn succeeded(self) -> bool {
        matches!(self, RequestOutcome::Status(status) if (200..300).contains(&status))
    }
}

/// A workload write that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadAction {
    /// Creating an Application.
    Create,
    /// Deleting an Application.
    Delete,
}

events! {
    /// The simulated world: API server, Argo CD, workload, probe, and the tunnel world's
    /// clients and app-proxy stand-in.
    pub enum WorldEvent {
        /// The API server stored a write.
        "apiserver.write" => ApiWrite { verb: String, resource: String, name: String, rv: String },
        /// A watch stream ended.
        "apiserver.watch_end" => WatchEnded { resource: String, from_rv: Option<u64>, end: WatchEnd },
        /// Argo CD failed to reconcile an app.
        "argocd.reconcile_error" => ReconcileError { app: String, error: String },
        /// Argo CD finished a sync operation of `app` (`namespace/name`) at `revision`;
        /// `previous` is the history entry before it (empty for a first sync) and
        /// `expected` the change revision the harness computes from Git for it: the newest
        /// commit on the first-parent chain `previous..revision` that touches the app's
        /// refresh paths (empty: none does, or the app has no refresh paths). Only with a
        /// visible operation (`argocd.sync_duration` > 0).
        "argocd.synced" => Synced { app: String, revision: String, previous: String, expected: String },
        /// Argo CD's sync of an app-of-apps parent created a child Application
        /// (`child` is `namespace/name`).
        "argocd.child_created" => ChildCreated { parent: String, child: String },
        /// Argo CD's check of a destination cluster changed its verdict.
        "argocd.cluster" => ClusterReach { server: String, reachable: bool },
        /// The workload failed to create or delete an app.
        "workload.error" => WorkloadError { action: WorkloadAction, app: String, error: String },
        /// The workload committed to an app's repository.
        "workload.commit" => Commit { app: String, sha: String },
        /// The workload flipped an app's health.
        "workload.health" => Health { app: String, health: String },
        /// The workload asked Argo CD to hard-refresh every app.
        "workload.refresh" => Refresh { apps: u64, failed: u64 },
        /// The workload created its initial apps.
        "workload.created" => Created { apps: u64 },
        /// The workload stopped for the calm phase.
        "workload.stopped" => Stopped { apps: u64 },
        /// The probe's watcher restarted its initial list.
        "probe.init" => ProbeInit,
        /// An object of the probe's initial list.
        "probe.init_apply" => ProbeInitApply { name: String, rv: String },
        /// The probe's initial list is complete.
        "probe.init_done" => ProbeInitDone,
        /// The probe saw an object added or changed.
        "probe.apply" => ProbeApply { name: String, rv: String },
        /// The probe saw an object deleted.
        "probe.delete" => ProbeDelete { name: String, rv: String },
        /// The probe's watcher reported an error (it retries).
        "probe.error" => ProbeError { error: String },
        /// The probe's reflector view changed: how many objects, and a digest of name@rv.
        "probe.view" => ProbeView { count: u64, digest: String },
        /// A tunnel-world client's request attempt ended.
        "client.request" => Request { key: String, write: bool, attempt: u32, outcome: RequestOutcome, latency_ms: u64 },
        /// The runtime's app-proxy stand-in executed a state-changing request.
        "runtime.execute" => Execute { key: String },
        /// The Rollouts controller wrote a Rollout whose phase or step moved
        /// (`rollout` is `namespace/name`; `step` is -1 for blue-green).
        "rollouts.phase" => RolloutPhase { rollout: String, revision: u64, step: i64, phase: String, message: String },
        /// An AnalysisRun ended (`run` is `namespace/name`).
        "rollouts.analysis" => AnalysisDone { run: String, phase: String },
        /// A write of the Rollouts controller failed (it is retried at the next tick).
        "rollouts.error" => RolloutsError { object: String, error: String },
        /// The Workflows controller moved a Workflow's phase (`workflow` is `namespace/name`).
        "workflows.phase" => WorkflowPhase { workflow: String, phase: String, message: String },
        /// A write of the Workflows controller failed (it is retried at the next tick).
        "workflows.error" => WorkflowsError { object: String, error: String },
        /// The Git provider delivered a push webhook (`status` 0: no answer; not redelivered).
        "git.webhook" => GitWebhook { delivery: String, url: String, after: String, status: u16 },
        /// The platform team applied a RestrictedGitSource (`source` is its name; `spec` is
        /// null when it was deleted).
        "restricted.source" => SourceChanged { source: String, spec: serde_json::Value },
        /// The world's monitor saw an AppProject change (`spec` null: deleted).
        "restricted.project" => ProjectSeen { project: String, spec: serde_json::Value },
        /// The monitor saw Argo CD deploy an app (a new `status.history` entry, recorded at
        /// `deployed_at_ms` of the run); `app` is `namespace/name`, `parent` its app-of-apps
        /// parent (instance label, may be empty), `repo` the entry's source.
        "restricted.deployed" => AppDeployed { app: String, project: String, parent: String, repo: String, server: String, namespace: String, revision: String, deployed_at_ms: u64 },
        /// The monitor saw Argo CD refuse an app (a project condition appeared on it).
        "restricted.refused" => AppRefused { app: String, project: String, condition: String, message: String },
        /// An adversary's probe of a multi-tenant platform ended: the `kind` of probe, sent
        /// as a user of `account` (empty: as nobody) against `victim`'s data; `actor` is who
        /// the audit log should name (`anonymous`, `user:<name>`; empty: not audited);
        /// `status` 0 is no answer; `leak` the first other account whose data the answer
        /// carried (empty: none).
        "tenants.probe" => TenantProbe { kind: String, account: String, actor: String, victim: String, status: u16, leak: String },
        /// A tenant runtime's app-proxy stand-in received a request: `account` is the
        /// runtime's, `caller` the account of the caller's bearer token (empty: none; the
        /// token itself never goes into a trace).
        "tenants.reached" => TenantReached { account: String, caller: String },
        /// An account admin's registration of runtime `runtime` ended (`createRuntime`):
        /// `status` 0 is no answer; `token_sha256` is the SHA-256 of the token the answer
        /// gave (empty: none), `rotated` whether the answer said it replaced one.
        "tenants.registered" => TenantRegistered { account: String, runtime: String, status: u16, token_sha256: String, rotated: bool },
    }
}

/// The resource reporter's watched kinds, defined here so that `observe` depends on no
/// component (the reporter adds its methods in `runtime::resource_reporter`).
/// A watched kind: one dependency of the Sensor, one resource of the EventSource.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ResourceKind {
    /// `argoproj.io/v1alpha1 Rollout` (rollout-reporter, all namespaces).
    Rollout,
    /// `apps/v1 ReplicaSet` (rollout-reporter, all namespaces).
    ReplicaSet,
    /// `argoproj.io/v1alpha1 AnalysisRun` (rollout-reporter, all namespaces).
    AnalysisRun,
    /// `argoproj.io/v1alpha1 Workflow` (workflow-reporter, the runtime's namespace).
    Workflow,
}

events! {
    /// The resource event reporter (`runtime::resource_reporter`). Objects are
    /// `namespace/name`; `status` is the platform's last answer (0: none).
    pub enum ResourceReporterEvent {
        /// The reporter started.
        "resources.start" => Start { host: String, variant: Variant },
        /// A watch failed (it retries with kube's backoff).
        "resources.watch_error" => WatchError { kind: ResourceKind, error: String },
        /// The platform accepted an object's state with a 2xx, after `attempts` POSTs.
        "resources.delivered" => Delivered { kind: ResourceKind, object: String, rv: u64, attempts: u32 },
        /// An object's state will not reach the platform (see `why`).
        "resources.lost" => Lost { kind: ResourceKind, object: String, rv: u64, status: u16, why: LossReason },
        /// hardened: a resync pass re-queued `queued` objects and `deleted` deletions the
        /// platform had missed.
        "resources.resync" => Resync { queued: u64, deleted: u64 },
        /// hardened: the reporter removed its finalizer from a Workflow being deleted, once
        /// the Workflow's last state reached the platform (or was refused for good); `held`:
        /// the reporter first saw it already being deleted, so the finalizer kept a state
        /// that would otherwise have been lost.
        "resources.released" => Released { object: String, held: bool, attempts: u32 },
    }
}

/// The ACR controller's observation vocabulary, defined here so that `observe` depends on no
/// component (the controller adds its methods in `runtime::acr`).
/// Where a change revision is written: the finished (or previous) operation's state, or
/// the requested operation before any operation state exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AcrField {
    /// `status.operationState.operation.sync.changeRevision`.
    OperationState,
    /// `operation.sync.changeRevision`.
    Operation,
}

events! {
    /// The change-revision (ACR) controller (`runtime::acr`). Apps are `namespace/name`.
    pub enum AcrEvent {
        /// The controller started.
        "acr.start" => Start { host: String, variant: Variant },
        /// The Application watch failed (it retries with kube's backoff).
        "acr.watch_error" => WatchError { error: String },
        /// faithful: the 1,000-slot channel was full; the app's event is gone.
        "acr.dropped" => Dropped { app: String },
        /// faithful: the event showed a sync operation that had finished by the event's
        /// turn (the re-GET has none): that sync's change revision is never computed.
        "acr.late" => Late { app: String },
        /// A change revision was written into the app for the sync `previous..current`
        /// (`revision` empty: a stale value was removed).
        "acr.patched" => Patched { app: String, field: AcrField, current: String, previous: String, revision: String },
        /// Computing or writing failed (faithful: the event is gone; hardened: retried).
        "acr.failed" => Failed { app: String, error: String },
        /// hardened: a resync pass queued `apps`.
        "acr.resync" => Resync { apps: u64 },
    }
}

events! {
    /// The platform's promotion orchestrator (`platform::promotions`). Releases are
    /// `<product>-<n>`.
    pub enum PromotionEvent {
        /// A commit in the trigger environment started a release of `version`.
        "promotion.release" => Release { release: String, product: String, flow: String, commit: String },
        /// An environment of a release reached `phase` (`Promoting`, `Succeeded`, `Failed`,
        /// `Skipped`, `Terminated`); `task` is the PromotionTask it runs as.
        "promotion.environment" => Environment { release: String, environment: String, phase: String, task: String },
        /// A release ended (`Succeeded`, `Failed`, `Terminated`), `lead_ms` after its commit.
        "promotion.release_end" => ReleaseEnd { release: String, phase: String, lead_ms: u64, why: String },
        /// A call to a runtime (through the gateway and tunnel) failed; retried.
        "promotion.runtime_error" => RuntimeError { release: String, runtime: String, error: String },
        /// A promotion hook (`hook`: `release.onStart`, `<environment>.onFail`, …) was handed
        /// to `runtime` as PromotionTask `task` running workflow template `template`.
        "promotion.hook" => Hook { release: String, hook: String, template: String, runtime: String, task: String },
    }
}

events! {
    /// The GitOps operator (`runtime::gitops_operator`). Tasks are `namespace/name`.
    pub enum OperatorEvent {
        /// A replica started.
        "operator.start" => Start { host: String, variant: Variant },
        /// The replica became the leader (it holds the Lease; it alone executes tasks).
        "operator.leader" => Leader { host: String },
        /// The replica lost the Lease and stopped executing (controller-runtime exits).
        "operator.leader_lost" => LeaderLost { host: String },
        /// A task's step finished one attempt: `outcome` is `succeeded`, `waiting`, `failed`
        /// or `retry` (a transient error; `retries` so far).
        "operator.step" => Step { host: String, task: String, step: u32, kind: String, outcome: String, retries: u32, detail: String },
        /// The operator committed a promotion (`sha`), or hardened found it already made
        /// and made none (`deduplicated`, `sha` the existing commit).
        "operator.commit" => Commit { host: String, task: String, step: u32, repo: String, path: String, branch: String, sha: String, deduplicated: bool },
        /// A task reached a phase.
        "operator.task" => Task { host: String, task: String, phase: String },
        /// Listing or watching tasks failed (retried).
        "operator.watch_error" => WatchError { host: String, error: String },
        /// The operator acted on a RestrictedGitSource (`source` is `namespace/name`):
        /// `action` is `project_applied`, `application_applied`, `project_deleted`,
        /// `application_deleted` (`detail` the object's name) or `invalid` (`detail` why).
        "operator.source" => Source { host: String, source: String, action: String, detail: String },
    }
}

events! {
    /// The source server (`runtime::source_server`). Apps are `namespace/name`.
    pub enum SourcesEvent {
        /// The server started.
        "sources.start" => Start { host: String },
        /// A request was answered (`cached`: from the server's cache, without upstream calls).
        "sources.served" => Served { what: String, app: String, revision: String, cached: bool },
        /// A request could not be answered (Argo CD or Git unavailable, and nothing cached).
        "sources.unavailable" => Unavailable { what: String, app: String, revision: String, error: String },
        /// The platform said where an app's version is read (`file`/`json_path` empty: no
        /// template applies, so the default).
        "sources.template" => Template { app: String, file: String, json_path: String },
    }
}

events! {
    /// The Codefresh Runner: the platform's builds and agent task queue
    /// (`platform::runner`), the agent (`runtime::runner`) and the engine stand-in. Builds are
    /// `b<n>`, tasks `t<n>`.
    pub enum RunnerEvent {
        /// An agent started.
        "runner.start" => Start { host: String, variant: Variant },
        /// The platform moved a build to `status` (`reason`: why, when not its steps).
        "runner.build" => Build { build: String, status: String, reason: String },
        /// The platform handed a task out (`delivery`: 1 the first time, 2 the second…).
        "runner.handout" => Handout { agent: String, task: String, kind: String, object: String, delivery: u32 },
        /// The platform took a task's status (`accepted`: false when refused, `detail` why).
        "runner.report" => Report { agent: String, task: String, outcome: String, retriable: bool, accepted: bool, detail: String },
        /// A task was not done before its `expireAt`.
        "runner.expired" => Expired { task: String },
        /// An agent's poll ended: `tasks` handed to it, or `error`.
        "runner.poll" => Poll { host: String, tasks: u64, error: String },
        /// An agent executed a task against the Kubernetes API: `outcome` is `Success` or
        /// `Error`; hardened's `deduplicated` is a task it had already done (not executed again).
        "runner.exec" => Exec { host: String, task: String, kind: String, object: String, outcome: String, retriable: bool, detail: String, deduplicated: bool },
        /// An agent ran a `proxy` agent task: the target's last `answer` (0: none) after
        /// `attempts` tries, the `outcome` it reports (`Success`, `Error` or `unreported`), and
        /// the error the HTTP library gave up with, if it did.
        "runner.proxy" => Proxy { host: String, task: String, url: String, answer: u16, attempts: u32, outcome: String, detail: String },
        /// An agent's status report ended: `delivered` false when it got no 2xx (`detail`).
        "runner.ack" => Ack { host: String, task: String, delivered: bool, attempt: u32, detail: String },
        /// The engine stand-in of a build started, or ended with `exit_code`.
        "runner.engine" => Engine { build: String, started: bool, exit_code: i32 },
        /// The kubelet's readiness probe of an agent's `/health` (`ok`: a 2xx within 1 s).
        "runner.probe" => Probe { agent: String, ok: bool },
        /// hardened: an agent's sweeper deleted `object` (`Kind/name`), left in the cluster by
        /// `build`, which the platform says ended (`outcome`: `Success` or why not).
        "runner.swept" => Swept { host: String, object: String, build: String, outcome: String },
        /// A cronus replica fired a cron trigger's tick scheduled at `scheduled_ms` (Unix ms):
        /// `outcome` is `build <id>`, `duplicate of <id>`, `missed` (hardened: past its
        /// catch-up window, reported) or the error (faithful only logs it).
        "runner.tick" => Tick { host: String, trigger: String, scheduled_ms: u64, outcome: String },
        /// The dind volume provisioner or cleaner acted on `volume` (`action`: `created`,
        /// `reused` for `claim`; `marked` for deletion, its directory `removed`, `kept`
        /// (hardened: unmarked, a claim holds it), `deleted`); `claim`: the live claim
        /// holding it, if any.
        "runner.volume" => Volume { volume: String, claim: String, action: String },
        /// A running build's dind volume directory was gone: its steps lost their data.
        "runner.volume_lost" => VolumeLost { build: String, volume: String },
        /// hardened: a cronus replica took (`leader`) or lost the lease that lets it fire.
        "runner.cron_leader" => CronLeader { host: String, leader: bool },
        /// An engine sent its build's last log line: `written` lines in `requests` requests,
        /// holding at most `peak_bytes` of unsent lines at once.
        "runner.logs" => Logs { build: String, written: u64, requests: u64, peak_bytes: u64 },
        /// An engine's unsent log lines (`held_bytes`) took its pod past its memory limit and
        /// it was killed: `written` lines written, `sent` taken by the platform in `requests`.
        "runner.engine_oom" => EngineOom { build: String, held_bytes: u64, written: u64, sent: u64, requests: u64 },
        /// A client following a build's log over the broadcaster's WebSocket saw its end:
        /// `received` lines (`in_order`: each the next number, none twice), the log's `lines`
        /// at the end, and the build's `status`.
        "runner.followed" => Followed { build: String, received: u64, in_order: bool, lines: u64, status: String },
    }
}

events! {
    /// A Git webhook EventSource (`runtime::webhook_source`).
    pub enum WebhookEvent {
        /// A delivery of a configured event type was accepted (`after` is a push's new head).
        "webhooks.received" => Received { source: String, event: String, delivery: String, after: String },
        /// A delivery was refused (bad signature, not JSON).
        "webhooks.refused" => Refused { source: String, why: String },
        /// A delivery was published to the bus, or dropped after the publish attempts.
        "webhooks.published" => Published { source: String, delivery: String, published: bool },
    }
}

/// Why a resource reporter gave an object's state up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LossReason {
    /// faithful: the EventSource could not publish it to the bus (5 attempts).
    PublishFailed,
    /// faithful: the trigger's attempts all failed; the message was acked anyway.
    RetriesSpent,
    /// faithful: the platform answered a non-2xx status the trigger's policy accepts
    /// (400, 401, 404).
    AcceptedAsFinal,
    /// hardened: the platform refused the body (400); resending cannot help.
    Refused,
}

/// One thing a component saw or did.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Observation {
    /// From the application event reporter.
    Reporter(ReporterEvent),
    /// From the resource event reporter.
    Resources(ResourceReporterEvent),
    /// From a Git webhook EventSource.
    Webhooks(WebhookEvent),
    /// From the change-revision (ACR) controller.
    Acr(AcrEvent),
    /// From the source server.
    Sources(SourcesEvent),
    /// From the GitOps operator.
    Operator(OperatorEvent),
    /// From the platform's promotion orchestrator.
    Promotion(PromotionEvent),
    /// From the Codefresh Runner (platform side, agent, engine stand-in).
    Runner(RunnerEvent),
    /// From the tunnel client or server.
    Tunnel(TunnelEvent),
    /// From the platform's events path.
    Platform(PlatformEvent),
    /// From the Kubernetes client glue.
    Kube(KubeEvent),
    /// From the simulated world.
    World(WorldEvent),
    /// A fault point fired.
    FaultPoint(FaultPointEvent),
}

impl Observation {
    /// The kind name (`tunnel.client_up`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            Observation::Reporter(e) => e.kind(),
            Observation::Resources(e) => e.kind(),
            Observation::Webhooks(e) => e.kind(),
            Observation::Acr(e) => e.kind(),
            Observation::Sources(e) => e.kind(),
            Observation::Operator(e) => e.kind(),
            Observation::Promotion(e) => e.kind(),
            Observation::Runner(e) => e.kind(),
            Observation::Tunnel(e) => e.kind(),
            Observation::Platform(e) => e.kind(),
            Observation::Kube(e) => e.kind(),
            Observation::World(e) => e.kind(),
            Observation::FaultPoint(e) => e.kind(),
        }
    }

    /// The JSON line body `{"kind", "detail"}` (for logs).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("observations serialise")
    }
}

impl From<ReporterEvent> for Observation {
    fn from(event: ReporterEvent) -> Self {
        Observation::Reporter(event)
    }
}

impl From<ResourceReporterEvent> for Observation {
    fn from(event: ResourceReporterEvent) -> Self {
        Observation::Resources(event)
    }
}

impl From<WebhookEvent> for Observation {
    fn from(event: WebhookEvent) -> Self {
        Observation::Webhooks(event)
    }
}

impl From<AcrEvent> for Observation {
    fn from(event: AcrEvent) -> Self {
        Observation::Acr(event)
    }
}

impl From<PromotionEvent> for Observation {
    fn from(event: PromotionEvent) -> Self {
        Observation::Promotion(event)
    }
}

impl From<RunnerEvent> for Observation {
    fn from(event: RunnerEvent) -> Self {
        Observation::Runner(event)
    }
}

impl From<OperatorEvent> for Observation {
    fn from(event: OperatorEvent) -> Self {
        Observation::Operator(event)
    }
}

impl From<SourcesEvent> for Observation {
    fn from(event: SourcesEvent) -> Self {
        Observation::Sources(event)
    }
}

impl From<TunnelEvent> for Observation {
    fn from(event: TunnelEvent) -> Self {
        Observation::Tunnel(event)
    }
}

impl From<PlatformEvent> for Observation {
    fn from(event: PlatformEvent) -> Self {
        Observation::Platform(event)
    }
}

impl From<KubeEvent> for Observation {
    fn from(event: KubeEvent) -> Self {
        Observation::Kube(event)
    }
}

impl From<FaultPointEvent> for Observation {
    fn from(event: FaultPointEvent) -> Self {
        Observation::FaultPoint(event)
    }
}

impl From<WorldEvent> for Observation {
    fn from(event: WorldEvent) -> Self {
        Observation::World(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_serialise_as_kind_and_detail() {
        let up: Observation = TunnelEvent::ClientUp {
            runtime: "acme-prod".into(),
        }
        .into();
        assert_eq!(up.kind(), "tunnel.client_up");
        assert_eq!(
            up.to_json(),
            r#"{"kind":"tunnel.client_up","detail":{"runtime":"acme-prod"}}"#
        );
        let hung: Observation = WorldEvent::Request {
            key: "c-1".into(),
            write: true,
            attempt: 2,
            outcome: RequestOutcome::Hung,
            latency_ms: 30_000,
        }
        .into();
        assert_eq!(
            hung.to_json(),
            r#"{"kind":"client.request","detail":{"key":"c-1","write":true,"attempt":2,"outcome":"hung","latency_ms":30000}}"#
        );
        let answered = serde_json::to_string(&RequestOutcome::Status(503)).unwrap();
        assert_eq!(answered, r#"{"status":503}"#);
        assert_eq!(
            Observation::from(WorldEvent::ProbeInit).to_json(),
            r#"{"kind":"probe.init"}"#
        );
    }

    #[test]
    fn request_outcomes_know_when_a_write_may_have_run() {
        assert!(RequestOutcome::Hung.unknown());
        assert!(RequestOutcome::Unreachable.unknown());
        assert!(RequestOutcome::Status(504).unknown());
        assert!(!RequestOutcome::Status(201).unknown());
        assert!(RequestOutcome::Status(201).succeeded());
        assert!(!RequestOutcome::Status(404).succeeded());
    }
}
