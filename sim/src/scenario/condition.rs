//! The vocabulary of reach conditions ("sometimes" assertions): their names, as a scenario's
//! `reach:` list and the reports write them. Part of the scenario model; what each means and
//! how a trace reaches it is `reach` (its module documentation has the table).

use std::fmt;
use std::str::FromStr;

/// Declares the conditions with their names.
macro_rules! conditions {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal ),* $(,)?) => {
        /// A situation a run may or may not reach.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Condition {
            $( $(#[$doc])* $variant ),*
        }

        impl Condition {
            /// Every condition, in declaration order.
            pub const ALL: &'static [Condition] = &[$(Condition::$variant),*];

            /// The name scenarios and result lines use.
            pub fn name(self) -> &'static str {
                match self { $(Condition::$variant => $name),* }
            }
        }
    };
}

conditions! {
    /// A reporter queue was full for an event.
    QueueOverflowed = "queue_overflowed",
    /// A queue overflowed within 60 s after a scale began.
    QueueOverflowedDuringScale = "queue_overflowed_during_scale",
    /// A running replica's lease expired in another replica's view.
    LeaseExpiredWhileSending = "lease_expired_while_sending",
    /// A watch got an in-stream 410 and the probe relisted afterwards.
    Watch410ThenRelist = "watch_410_then_relist",
    /// A watch got an in-stream 410.
    WatchExpired = "watch_expired",
    /// A reporter host was stopped and started again.
    ReporterRestarted = "reporter_restarted",
    /// An event reached the platform while a cache host was down.
    CacheDownDuringSend = "cache_down_during_send",
    /// The read model received a state it already had.
    DuplicateDelivered = "duplicate_delivered",
    /// The read model received an older event than it held.
    StaleEventIgnored = "stale_event_ignored",
    /// The anti-entropy pass repaired something.
    ResyncRepaired = "resync_repaired",
    /// A tunnel went down during a write through it.
    TunnelDroppedMidWrite = "tunnel_dropped_mid_write",
    /// A runtime host crashed during a write to it.
    RuntimeCrashedMidWrite = "runtime_crashed_mid_write",
    /// A client retried a write.
    WriteRetried = "write_retried",
    /// A runtime registered again after its tunnel had been up.
    TunnelReregistered = "tunnel_reregistered",
    /// Argo CD found a registered destination cluster unreachable.
    DestinationUnreachable = "destination_unreachable",
    /// A destination cluster Argo CD had found unreachable answered again.
    DestinationRecovered = "destination_recovered",
    /// The platform took the state of a child app Argo CD created for an app-of-apps parent.
    ChildAppReported = "child_app_reported",
    /// The platform took the state of an app outside Argo CD's own namespace.
    OtherNamespaceReported = "other_namespace_reported",
    /// A running reporter replica put a rotated Argo CD token into use.
    ArgocdTokenReloaded = "argocd_token_reloaded",
    /// An AnalysisRun ended Failed or Error.
    AnalysisFailed = "analysis_failed",
    /// An event bus host was stopped and started again.
    EventBusRestarted = "event_bus_restarted",
    /// A resource reporter host was stopped and started again.
    ResourceReporterRestarted = "resource_reporter_restarted",
    /// The EventSource gave an event up after its publish attempts.
    PublishDropped = "publish_dropped",
    /// The Sensor's attempts for an event all failed.
    TriggerGaveUp = "trigger_gave_up",
    /// The Sensor took a non-2xx status its policy allows as the end of an event.
    AcceptedAsFinal = "accepted_as_final",
    /// The hardened resource reporter's resync re-sent or deleted something.
    ResourcesResynced = "resources_resynced",
    /// hardened: the resource reporter's finalizer held a Workflow deleted while the
    /// reporter was away until its last state was delivered.
    WorkflowHeldByFinalizer = "workflow_held_by_finalizer",
    /// An ACR controller host was stopped and started again.
    AcrRestarted = "acr_restarted",
    /// The faithful ACR controller's channel was full for an app's event.
    AcrEventDropped = "acr_event_dropped",
    /// The faithful ACR controller reached an event whose sync had already finished.
    AcrOperationMissed = "acr_operation_missed",
    /// Computing a change revision failed.
    AcrCallFailed = "acr_call_failed",
    /// A source server host was stopped and started again.
    SourcesRestarted = "sources_restarted",
    /// The source server answered from its cache.
    SourcesServedFromCache = "sources_served_from_cache",
    /// The source server could not answer (Argo CD or Git unavailable, nothing cached).
    SourcesUnavailable = "sources_unavailable",
    /// A reporter sent an app without its Git details (app versions or revisions metadata).
    DetailsMissing = "details_missing",
    /// A second GitOps operator replica became the leader.
    OperatorFailover = "operator_failover",
    /// An operator step failed transiently and was tried again.
    PromotionRetried = "promotion_retried",
    /// An operator found a promotion already committed and made none.
    PromotionDeduplicated = "promotion_deduplicated",
    /// A release ended Failed.
    ReleaseFailed = "release_failed",
    /// Argo CD refused an app for its project.
    RestrictedAppRefused = "restricted_app_refused",
    /// Argo CD did not create a child Application its parent's project does not permit.
    RestrictedChildRefused = "restricted_child_refused",
    /// An app Argo CD had deployed was refused later.
    RestrictedAppRevoked = "restricted_app_revoked",
    /// A RestrictedGitSource was deleted and its AppProject went with it.
    RestrictedSourceDeleted = "restricted_source_deleted",
    /// The scenario wrote a RestrictedGitSource with a deny entry (`!…`).
    RestrictedDenyEntry = "restricted_deny_entry",
    /// The platform showed a runtime it had shown healthy as `Unable to communicate`.
    RuntimeShownUnable = "runtime_shown_unable",
    /// The platform showed a runtime healthy again after showing it unreachable.
    RuntimeShownRecovered = "runtime_shown_recovered",
    /// The platform restarted and found events in its bus.
    PlatformCrashedWithBacklog = "platform_crashed_with_backlog",
    /// A restarted platform delivered again an event its handler had taken before the crash.
    EventRedelivered = "event_redelivered",
    /// A user's request for another account's runtime or data (by name, a `..` or encoded
    /// path, a GraphQL query or mutation) was refused.
    ForeignRequestRefused = "foreign_request_refused",
    /// A user's own write reached their account's runtime.
    OwnWriteReached = "own_write_reached",
    /// An event whose payload claimed another account was accepted (and attributed to its
    /// token's runtime).
    ForgedPayloadAccepted = "forged_payload_accepted",
    /// A user token that had expired was refused (401).
    ExpiredTokenRefused = "expired_token_refused",
    /// A user's own write reached their account's runtime in ingress mode (no tunnel).
    IngressWriteReached = "ingress_write_reached",
    /// The gateway answered 503 because its store could not keep the request's changes.
    StoreUnavailableAnswered = "store_unavailable_answered",
    /// A registration rotated a token answered before the gateway host crashed: the
    /// restarted control plane knew it from its database.
    TokenRotatedAfterRestart = "token_rotated_after_restart",
    /// The platform's anti-entropy job sent an app again that its read model held stale.
    AntiEntropyRepaired = "anti_entropy_repaired",
    /// The platform's anti-entropy job showed deleted an app the runtime no longer had.
    AntiEntropyTombstoned = "anti_entropy_tombstoned",
    /// A pass of the anti-entropy job could not list a runtime, and a later one repaired it.
    AntiEntropyFailedThenRepaired = "anti_entropy_failed_then_repaired",
    /// A vcluster syncer found another object's copy at an object's host name.
    VclusterConflict = "vcluster_conflict",
    /// A vcluster syncer's reconcile of an object failed, and a later one synced it.
    VclusterFailedThenSynced = "vcluster_failed_then_synced",
    /// A hosted runtime's vcluster host was stopped and started again, and its reporter then
    /// sent app events to the platform.
    HostedRuntimeRestartedThenReported = "hosted_runtime_restarted_then_reported",
    /// The platform handed a Runner task out again (its status had not come).
    RunnerTaskRedelivered = "runner_task_redelivered",
    /// A Runner agent's status report got no answer it could use.
    RunnerAckLost = "runner_ack_lost",
    /// A Runner build waited for admission (its pipeline was at its concurrency limit).
    RunnerBuildPending = "runner_build_pending",
    /// A Runner build was terminated by its pipeline's policy (a newer build of its branch).
    RunnerPolicyTerminated = "runner_policy_terminated",
    /// A cronus replica fired a cron tick while another cronus replica was down.
    RunnerCronReplicaDown = "runner_cron_replica_down",
    /// The local volumes cleaner marked a Runner build volume for deletion (the node's
    /// volumes filled its threshold).
    RunnerDiskPressure = "runner_disk_pressure",
    /// A Runner engine held at least [`crate::explore::reach::LOG_BACKLOG_BYTES`] of log
    /// lines it had not sent yet (its link to the platform was slower than its steps wrote).
    RunnerLogBacklog = "runner_log_backlog",
    /// A Runner agent's `proxy` task met a target that refused it (a 4xx answer other than
    /// 408 or 429: the request will not take effect if sent again).
    RunnerProxyRefused = "runner_proxy_refused",
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a reach condition.
#[derive(Debug, thiserror::Error)]
#[error("unknown reach condition {0:?} (known: {known})", known = known())]
pub struct UnknownCondition(pub String);

fn known() -> String {
    Condition::ALL
        .iter()
        .map(|c| c.name())
        .collect::<Vec<_>>()
        .join(", ")
}

impl FromStr for Condition {
    type Err = UnknownCondition;

    fn from_str(name: &str) -> Result<Condition, UnknownCondition> {
        Condition::ALL
            .iter()
            .copied()
            .find(|c| c.name() == name)
            .ok_or_else(|| UnknownCondition(name.to_string()))
    }
}

impl serde::Serialize for Condition {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Condition {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Condition, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}
