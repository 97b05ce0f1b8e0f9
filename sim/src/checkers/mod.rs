//! Checkers: invariants evaluated from the trace (what components observed) and, at the
//! end of the calm phase, from the world's final state. They never read component internals.
//!
//! | invariant | class | holds when |
//! |---|---|---|
//! | `probe_matches_apiserver` | liveness | at the end of the calm phase the probe's reflector view (name → RV of every Application) equals the API server's |
//! | `probe_rv_monotonic` | safety | the probe never sees an object's resourceVersion go backwards |
//! | `platform_converges` | safety | after the calm phase every app's state in the platform's read model (sync status, revision, health; deleted apps absent or marked deleted) equals the API server's. The calm phase is long enough to drain any backlog, so a mismatch left then is a *lost* final state, not a slow one |
//! | `requests_answered` | safety | every client request through the tunnel is answered (success or a clear error) within 15 s; none hangs |
//! | `executed_at_most_once` | safety | no state-changing request (idempotency key) is executed twice by the runtime |
//! | `all_reconnect` | liveness | after the tunnel server restarts (or the calm phase starts), every runtime that had a tunnel has it back within 60 s |
//! | `tunnel_recovers` | liveness | after a repair, a restart or the calm phase, a request succeeds through the tunnel within 30 s (judged from the clients' side: a dead but unnoticed tunnel is not back); the clock waits while a link is still cut or a host is still down |
//! | `platform_shows_rollouts` | safety | after the calm phase the platform shows every Rollout's phase, step and ReplicaSet replicas as the API server has them (see `resources`) |
//! | `platform_never_older` | safety | the platform never moves a cluster-stream object to an older resourceVersion |
//! | `platform_resources_never_older` | safety | the platform never shows a resource of an app from an older deployment of the app (history id) than it showed it from before (see `platform`) |
//! | `workflow_phases_reported` | safety | every Workflow that finished is shown by the platform with its final phase at the end |
//! | `promotion_commit_once` | safety | one promotion commit per environment per release: no PromotionTask step wrote a file in two commits (any branch; see `promotions`) |
//! | `promotion_ordered` | safety | no environment receives a release's promotion commit before every environment it depends on verified the release |
//! | `promotion_terminates` | liveness | every release ended (Succeeded, Failed, Terminated) within its timeout after it started; none is stuck |
//! | `restricted_sources` | safety | Argo CD never deployed an app outside the RestrictedGitSource governing it (its project's, its Git Source's), allowing a changed source 30 s to propagate (see `restricted`) |
//! | `restricted_source_applied` | liveness | every change to a RestrictedGitSource reached its AppProject within 30 s (unless changed again first) |
//! | `runtime_health_shown` | liveness | the platform shows a runtime `Unable to communicate` within 60 s of a drop (partition or crash of its host) that lasts, and `Healthy` within 45 s of its tunnel coming back (see `health`) |
//! | `change_revision_correct` | safety | at the end every app's change revision (`status.operationState.operation.sync.changeRevision`) is the one its last sync should carry: the newest commit on the first-parent chain of its `previous..current` that touches its refresh paths, or none (see `acr`) |
//! | `no_spurious_change` | safety | every change revision the ACR controller writes into an app is a commit that touched the app's refresh paths |
//! | `app_version_reported` | liveness | after the calm phase every app the platform shows at its current sync (status and revision) shows the app version Git holds at its last sync (`Chart.yaml`'s `appVersion` at `syncResult.revision`; see `sources`) |
//! | `change_revision_reported` | liveness | after the calm phase every app the platform shows at its current sync, whose sync has a change revision, shows that commit's author and message (`app.meta.revisions-metadata`) |
//! | `tenant_isolation` | safety | no answer to a user (or to nobody) carries another account's data, no request reaches a runtime of another account than its caller's, and every request refused with 400/401/403/404 is in the audit log with its actor and status (see `tenants`) |
//! | `no_acknowledged_event_lost` | safety | every event the events API answered 2xx for at least 30 s before the end was projected by the event handler, whatever crashed in between (see `durability`) |
//! | `no_acknowledged_write_lost` | safety | every registration the platform answered is in its database at the end: the last token answered is the one held, a token a later answered registration replaced is revoked, and each answered registration is in the audit log (see `store`) |
//! | `vcluster_isolation` | safety | after the calm phase, in every hosted runtime's virtual cluster, what a pod of each ConfigMap's or Secret's namespace mounts under its name on the shared host cluster is that object's own copy with its content, and the vcluster's host namespace holds no copy of a gone or foreign object (see `hosted`) |
//! | `runner_build_outcome` | safety | no Runner build fails on a creation task whose object had been created for it (a repeated task's `AlreadyExists` reported as an error; see `runner`) |
//! | `runner_builds_finish` | liveness | at the end every Runner build has ended (success, failure, error, terminated) |
//! | `runner_no_orphans` | liveness | at the end no Pod or PersistentVolumeClaim of an ended Runner build is left in the cluster |
//! | `runner_trigger_once` | safety | no webhook delivery id started more than one Runner build (a provider's redelivery is not a new event) |
//! | `runner_cron_once` | safety | every cron tick due before the calm phase started exactly one Runner build or was reported missed (see `runner`) |
//! | `runner_concurrency_limit` | safety | no more builds of a pipeline were admitted at once than its concurrency limit |
//! | `runner_volume_kept` | safety | no dind volume's directory was removed while a Runner build's claim held it (the local volumes cleaner chose a volume in use; see `runner`) |
//! | `runner_engine_memory` | safety | no Runner build's engine was killed for the memory its unsent log lines took (see `runner`) |
//! | `runner_proxy_truthful` | safety | at the end no Runner `proxy` agent task is held as done with `Success` while its request did not take effect (its commit is not in the repository) |
//! | `runner_logs_complete` | liveness | at the end every log line a Runner engine wrote is in the platform's log, and every client that followed a build to its end received each line once, in order |
//! | `runner_stall_detected` | safety | a Runner agent that has not polled the platform successfully for 60 s is not reported ready by its readiness probe |
//! | `single_owner` | safety | at the end every app is owned by exactly one live reporter replica (ownership recomputed from the replicas' observed configuration and membership) |
//!
//! # Typed events
//! Checkers match on the typed events of `orrery_system::observe` and
//! [`crate::trace::HarnessEvent`], the same types the emitters build. A checker that reads a
//! field the emitters do not write does not compile — here the format-1 `status` of a
//! client request, which is now `outcome`:
//!
//! ```compile_fail
//! use orrery_sim::trace::TraceEvent;
//! use orrery_system::observe::WorldEvent;
//!
//! fn hung(event: &TraceEvent) -> bool {
//!     matches!(event.world(), Some(WorldEvent::Request { status: 0, .. }))
//! }
//! ```
//!
//! while the field the emitters write does:
//!
//! ```
//! use orrery_sim::trace::TraceEvent;
//! use orrery_system::observe::{RequestOutcome, WorldEvent};
//!
//! fn hung(event: &TraceEvent) -> bool {
//!     matches!(
//!         event.world(),
//!         Some(WorldEvent::Request { outcome: RequestOutcome::Hung, .. })
//!     )
//! }
//! ```
pub mod acr;
mod convergence;
pub mod durability;
pub mod health;
pub mod hosted;
mod monotonic;
pub mod ownership;
mod platform;
pub mod promotions;
pub mod resources;
pub mod restricted;
pub mod runner;
pub mod sources;
pub mod store;
pub mod tenants;
pub mod tunnel;

#[cfg(test)]
mod tests;

pub use platform::{stale_apps, stale_count};

use serde::Serialize;
use serde_json::Value;

use crate::scenario::model::{validate_invariant, Invariant};
use crate::trace::TraceEvent;

/// Whether breaking an invariant is a safety or a liveness failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Must never happen.
    Safety,
    /// Must eventually happen (by the end of the calm phase).
    Liveness,
}

/// A broken invariant, with where and when it was first seen.
#[derive(Clone, Debug, Serialize)]
pub struct Violation {
    /// Invariant name.
    pub invariant: String,
    /// Safety or liveness.
    pub class: Class,
    /// Simulated milliseconds of the first sighting.
    pub at_ms: u64,
    /// Host it concerns.
    pub host: String,
    /// What exactly was wrong.
    pub details: Value,
}

/// One Application as the API server holds it at the end.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppTruth {
    /// `namespace/name`.
    pub key: String,
    /// Name.
    pub name: String,
    /// resourceVersion.
    pub rv: String,
    /// `status.sync.status`.
    pub sync_status: String,
    /// `status.sync.revision`.
    pub revision: String,
    /// `status.health.status`.
    pub health_status: String,
    /// `spec.destination.server` (empty when not set).
    pub destination: String,
    /// `status.operationState.operation.sync.changeRevision` (empty when not set).
    pub change_revision: String,
    /// The app version Git holds at the last sync's revision (`Chart.yaml`'s `appVersion`
    /// under the app's path at `syncResult.revision`; empty when there is none).
    pub app_version: String,
    /// The change revision's commit in Git: (author, message).
    pub change_commit: Option<(String, String)>,
}

/// A change revision the ACR controller wrote into an app, judged against Git.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attribution {
    /// Simulated milliseconds of the write.
    pub at_ms: u64,
    /// `namespace/name`.
    pub app: String,
    /// The commit written.
    pub revision: String,
    /// Whether that commit changed a file under the app's refresh paths.
    pub touches: bool,
}

/// The platform's database at the end of a run (`world::database`).
#[derive(Clone, Debug)]
pub struct DatabaseTruth {
    /// Everything it committed.
    pub snapshot: orrery_system::platform::store::Snapshot,
    /// Its commits, opens and fenced commits.
    pub figures: crate::world::database::Figures,
}

/// The world's final state, for end-of-run checks.
#[derive(Clone, Debug, Default)]
pub struct FinalState {
    /// Every Application in the API server, sorted by key.
    pub apps: Vec<AppTruth>,
    /// The platform's read model (empty without a platform).
    pub reported:
        std::collections::BTreeMap<String, orrery_system::platform::events::read_model::AppState>,
    /// Simulated milliseconds at the end of the run.
    pub end_ms: u64,
    /// What the components asked of the world, counted beside the trace: Argo CD's
    /// requests by route, watch lines and bytes, the platform's event posts and reads.
    pub cost: std::collections::BTreeMap<String, u64>,
    /// Destination servers whose registration an `unregister` fault removed.
    pub unregistered: std::collections::BTreeSet<String>,
    /// Every Rollout in the API server, sorted by key.
    pub rollouts: Vec<resources::RolloutTruth>,
    /// The platform's Rollouts (`runtime/namespace/name`).
    pub reported_rollouts:
        std::collections::BTreeMap<String, orrery_system::platform::events::cluster::RolloutView>,
    /// The platform's Workflows (`runtime/namespace/name`).
    pub reported_workflows:
        std::collections::BTreeMap<String, orrery_system::platform::events::cluster::WorkflowView>,
    /// Every change revision the ACR controller wrote, in trace order, judged against Git.
    pub attributions: Vec<Attribution>,
    /// Releases and promotion commits (with a `promotions:` section).
    pub promotions: Option<promotions::PromotionTruth>,
    /// The platform's audit log, every entry.
    pub audit: Vec<orrery_system::platform::audit::Entry>,
    /// The platform's database, when the world has one: what it committed, and its figures.
    pub database: Option<DatabaseTruth>,
    /// Each hosted runtime's virtual cluster and its host namespace (`role: vcluster`).
    pub hosted: Vec<hosted::VclusterTruth>,
    /// The Runner's builds and what they left in the cluster (with a `runner:` section).
    pub runner: Option<runner::RunnerTruth>,
}

impl FinalState {
    /// (name, resourceVersion) of every Application, sorted.
    pub fn name_rvs(&self) -> Vec<(String, String)> {
        let mut pairs: Vec<_> = self
            .apps
            .iter()
            .map(|a| (a.name.clone(), a.rv.clone()))
            .collect();
        pairs.sort();
        pairs
    }
}

/// One invariant's checker.
pub trait Checker {
    /// Invariant name as written in scenarios.
    fn name(&self) -> &'static str;
    /// Feeds one trace event; returns a violation the first time one is seen. (Checkers of
    /// the end state alone keep this default.)
    fn on_event(&mut self, _event: &TraceEvent) -> Option<Violation> {
        None
    }
    /// Checks the end state; returns a violation if the invariant does not hold.
    fn at_end(&mut self, state: &FinalState) -> Option<Violation>;
}

/// Builds the checker an invariant names.
pub fn build(invariant: &Invariant) -> Result<Box<dyn Checker>, String> {
    validate_invariant(invariant)?;
    Ok(match invariant.name.as_str() {
        "probe_matches_apiserver" => Box::new(convergence::ProbeMatches::default()),
        "probe_rv_monotonic" => Box::new(monotonic::RvMonotonic::default()),
        "platform_converges" => Box::new(platform::PlatformConverges),
        "single_owner" => Box::new(ownership::SingleOwner::default()),
        "requests_answered" => Box::new(tunnel::RequestsAnswered),
        "executed_at_most_once" => Box::new(tunnel::ExecutedAtMostOnce::default()),
        "tunnel_recovers" => Box::new(tunnel::TunnelRecovers::default()),
        "all_reconnect" => Box::new(tunnel::AllReconnect::default()),
        "no_app_stuck_unknown" => Box::new(platform::NoAppStuckUnknown),
        "no_stale_read_errors" => Box::new(platform::NoStaleReadErrors),
        "platform_shows_rollouts" => Box::new(resources::PlatformShowsRollouts),
        "platform_never_older" => Box::new(resources::PlatformNeverOlder::default()),
        "platform_resources_never_older" => Box::new(platform::ResourcesNeverOlder::default()),
        "workflow_phases_reported" => Box::new(resources::WorkflowPhasesReported::default()),
        "change_revision_correct" => Box::new(acr::ChangeRevisionCorrect::default()),
        "promotion_commit_once" => Box::new(promotions::PromotionCommitOnce),
        "promotion_ordered" => Box::new(promotions::PromotionOrdered),
        "promotion_terminates" => Box::new(promotions::PromotionTerminates),
        "restricted_sources" => Box::new(restricted::RestrictedSourcesChecker::default()),
        "restricted_source_applied" => Box::new(restricted::SourceApplied::default()),
        "runtime_health_shown" => Box::new(health::RuntimeHealthShown::default()),
        "tenant_isolation" => Box::new(tenants::TenantIsolation::default()),
        "vcluster_isolation" => Box::new(hosted::VclusterIsolation),
        "hosted_runtimes_converge" => Box::new(hosted::HostedRuntimesConverge),
        "no_acknowledged_event_lost" => Box::new(durability::NoAcknowledgedEventLost::default()),
        "no_acknowledged_write_lost" => Box::new(store::NoAcknowledgedWriteLost::default()),
        "no_spurious_change" => Box::new(acr::NoSpuriousChange),
        "app_version_reported" => Box::new(sources::AppVersionReported),
        "change_revision_reported" => Box::new(sources::ChangeRevisionReported),
        "runner_build_outcome" => Box::new(runner::BuildOutcome::default()),
        "runner_builds_finish" => Box::new(runner::BuildsFinish),
        "runner_no_orphans" => Box::new(runner::NoOrphans),
        "runner_stall_detected" => Box::new(runner::StallDetected::default()),
        "runner_concurrency_limit" => Box::new(runner::ConcurrencyLimit),
        "runner_trigger_once" => Box::new(runner::TriggerOnce),
        "runner_cron_once" => Box::new(runner::CronOnce),
        "runner_volume_kept" => Box::new(runner::VolumeKept),
        "runner_engine_memory" => Box::new(runner::EngineMemory),
        "runner_logs_complete" => Box::new(runner::LogsComplete::default()),
        "runner_proxy_truthful" => Box::new(runner::ProxyTruthful),
        other => unreachable!("validate accepted unknown invariant {other}"),
    })
}

/// Runs every checker over the trace, then over the final state; violations in time order.
pub fn check(
    checkers: &mut [Box<dyn Checker>],
    events: &[TraceEvent],
    state: &FinalState,
) -> Vec<Violation> {
    let mut violations = Vec::new();
    let mut seen: Vec<bool> = vec![false; checkers.len()];
    for event in events {
        for (i, checker) in checkers.iter_mut().enumerate() {
            if seen[i] {
                continue;
            }
            if let Some(v) = checker.on_event(event) {
                seen[i] = true;
                violations.push(v);
            }
        }
    }
    for (i, checker) in checkers.iter_mut().enumerate() {
        if !seen[i] {
            violations.extend(checker.at_end(state));
        }
    }
    violations.sort_by_key(|v| v.at_ms);
    violations
}
