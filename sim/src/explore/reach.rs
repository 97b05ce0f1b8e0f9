//! Reach conditions ("sometimes" assertions): situations a scenario claims to explore,
//! evaluated over a run's trace. A pass proves little if the situation it is about never
//! happened; a sweep counts, per condition, the seeds that reached it and fails (exit 6)
//! when one a scenario declares under `reach:` was never reached.
//!
//! | condition | reached when |
//! |---|---|
//! | `queue_overflowed` | a reporter's queue was full for an event (faithful dropped it, hardened parked it for resync) |
//! | `queue_overflowed_during_scale` | that happened within 60 s after a scale of the reporters began |
//! | `lease_expired_while_sending` | a replica's membership view left out another replica that was running (its lease expired while it worked) |
//! | `watch_410_then_relist` | a watch stream ended with an in-stream 410 (compacted) and the probe listed again afterwards |
//! | `watch_expired` | a watch stream ended with an in-stream 410 |
//! | `reporter_restarted` | a reporter host was stopped and started again |
//! | `cache_down_during_send` | the platform projected an event while a cache host was down |
//! | `duplicate_delivered` | the platform's read model received a state it already had |
//! | `stale_event_ignored` | the read model received an event older than what it held |
//! | `resync_repaired` | hardened's anti-entropy pass re-queued an app or reported a lost deletion |
//! | `tunnel_dropped_mid_write` | a tunnel went down while a client's write through it was in flight |
//! | `runtime_crashed_mid_write` | a runtime host crashed while a client's write to it was in flight |
//! | `write_retried` | a client retried a write |
//! | `tunnel_reregistered` | a runtime registered again after its tunnel had been up |
//! | `destination_unreachable` | Argo CD found a registered destination cluster unreachable |
//! | `destination_recovered` | a destination cluster Argo CD had found unreachable answered again |
//! | `child_app_reported` | the platform took the state of a child app an app-of-apps parent's sync created |
//! | `other_namespace_reported` | the platform took the state of an app outside Argo CD's own namespace |
//! | `argocd_token_reloaded` | a running reporter put a rotated Argo CD token from its Secret into use |
//! | `analysis_failed` | an AnalysisRun of a Rollout ended Failed or Error (the Rollout aborts) |
//! | `event_bus_restarted` | an event bus host was stopped and started again |
//! | `resource_reporter_restarted` | a resource reporter host was stopped and started again |
//! | `publish_dropped` | faithful: the EventSource gave an event up after its publish attempts |
//! | `trigger_gave_up` | faithful: the Sensor's attempts for an event all failed and it was acked anyway |
//! | `accepted_as_final` | faithful: the Sensor took a 400/401/404 as the end of an event |
//! | `resources_resynced` | hardened: the resource reporter's resync re-sent or deleted something |
//! | `workflow_held_by_finalizer` | hardened: a Workflow deleted while the resource reporter was away was kept by its finalizer until its last state was delivered |
//! | `acr_restarted` | an ACR controller host was stopped and started again |
//! | `acr_event_dropped` | faithful: the ACR controller's channel was full and an app's event was dropped |
//! | `acr_operation_missed` | faithful: an event's sync operation had finished by its turn, so that sync's change revision was never computed |
//! | `acr_call_failed` | computing a change revision failed (Argo CD or Git did not answer) |
//! | `operator_failover` | a second GitOps operator replica became the leader |
//! | `promotion_retried` | an operator step failed transiently and was tried again |
//! | `promotion_deduplicated` | hardened: an operator found a promotion already committed and made none |
//! | `release_failed` | a release ended Failed (a failed workflow, a Degraded app, retries spent) |
//! | `restricted_app_refused` | Argo CD refused an app for its project (repository, destination, namespace, missing project) |
//! | `restricted_child_refused` | Argo CD did not create a Git Source's child Application in a namespace its project does not permit |
//! | `restricted_app_revoked` | an app Argo CD had deployed was refused later (its source narrowed or deleted) |
//! | `restricted_source_deleted` | a RestrictedGitSource was deleted and its AppProject went with it |
//! | `restricted_deny_entry` | the scenario wrote a RestrictedGitSource with a deny entry (`!…`, argo-cd#21264) |
//! | `runtime_shown_unable` | the platform showed a runtime it had shown healthy as `Unable to communicate` |
//! | `runtime_shown_recovered` | the platform showed a runtime healthy again after showing it unreachable |
//! | `platform_crashed_with_backlog` | the platform crashed with events in its bus (lost, or on disk and still owed to the read model) |
//! | `event_redelivered` | a restarted platform delivered again an event its handler had taken before the crash |
//! | `ingress_write_reached` | a user's own write reached their account's runtime in ingress mode, through its router's ingress (no tunnel) |
//! | `store_unavailable_answered` | the gateway answered 503 because its store could not keep the request's changes |
//! | `anti_entropy_repaired` | hardened: the platform's anti-entropy job sent an app again that its read model held stale or lacked |
//! | `anti_entropy_tombstoned` | hardened: the platform's anti-entropy job showed deleted an app its read model still showed although the runtime no longer had it |
//! | `anti_entropy_failed_then_repaired` | hardened: a pass of the anti-entropy job could not list a runtime (no tunnel, its app-proxy or API server unreachable) and a later pass repaired that runtime's apps |
//! | `vcluster_conflict` | a hosted runtime's vcluster syncer found another object's copy at an object's host name (faithful deleted it, hardened refused to touch it) |
//! | `vcluster_failed_then_synced` | a vcluster syncer's reconcile of an object failed (its host cluster unreachable, a conflict on write) and a later one synced that object |
//! | `hosted_runtime_restarted_then_reported` | a hosted runtime's vcluster host was stopped and started again, and its reporter then sent app events to the platform |
//! | `runner_task_redelivered` | the platform handed a Runner task out a second time (no status had come for it) |
//! | `runner_ack_lost` | a Runner agent's status report got no answer it could use (lost, refused, timed out) |
//! | `runner_build_pending` | a Runner build waited for admission: its pipeline was at its concurrency limit |
//! | `runner_policy_terminated` | a Runner build was terminated by its pipeline's policy (a newer build of its branch) |
//! | `runner_cron_replica_down` | a cronus replica fired a cron tick while another cronus replica was down |
//! | `runner_disk_pressure` | the local volumes cleaner marked a Runner build's dind volume for deletion (the node's volumes filled its threshold) |
//! | `runner_log_backlog` | a Runner engine held at least 16 KiB of log lines it had not sent yet (lines queued behind the requests in flight: its link to the platform was slower than its steps wrote) |
//! | `runner_proxy_refused` | a Runner agent's `proxy` task met a target that refused it (a 4xx answer other than 408 and 429) |
//! | `token_rotated_after_restart` | a registration rotated a token answered before the gateway host crashed (the restarted control plane loaded it from its database) |

use std::collections::{BTreeMap, BTreeSet};

use orrery_system::env::Point;
use orrery_system::observe::{
    AcrEvent, FaultPointEvent, LossReason, Observation, OperatorEvent, PlatformEvent, Projection,
    PromotionEvent, ReporterEvent, ResourceReporterEvent, RunnerEvent, SourcesEvent, TunnelEvent,
    WatchEnd, WorldEvent,
};

use crate::faults::Fault;
pub use crate::scenario::condition::{Condition, UnknownCondition};
use crate::scenario::model::{Role, Scenario};
use crate::trace::{Entry, HarnessEvent, TraceEvent};

/// What the platform shows for a runtime it cannot reach.
const UNABLE: &str = "Unable to communicate";

/// Whether the platform showed some runtime the `sequence` of health states, in order.
fn health_shown(events: &[TraceEvent], sequence: &[&str]) -> bool {
    let mut progress: BTreeMap<&str, usize> = BTreeMap::new();
    events.iter().any(|e| match e.platform() {
        Some(PlatformEvent::RuntimeHealth {
            runtime, health, ..
        }) => {
            let step = progress.entry(runtime.as_str()).or_default();
            if sequence.get(*step) == Some(&health.as_str()) {
                *step += 1;
            }
            *step == sequence.len()
        }
        _ => false,
    })
}

/// How long after a scale began an overflow still counts as "during" it.
const SCALE_WINDOW_MS: u64 = 60_000;

/// `runner_log_backlog`: unsent log lines an engine must have held at once (four lines of
/// 4 KiB: lines queued behind the requests in flight, not only the one being sent).
pub const LOG_BACKLOG_BYTES: u64 = 16 * 1024;

/// Hosts with `role`.
fn hosts(scenario: &Scenario, role: Role) -> BTreeSet<&str> {
    scenario
        .topology
        .hosts
        .iter()
        .filter(|h| h.has(role))
        .map(|h| h.name.as_str())
        .collect()
}

/// Time intervals `[stop, start)` during which each host was down (open-ended: `u64::MAX`).
fn downtimes(events: &[TraceEvent]) -> BTreeMap<&str, Vec<(u64, u64)>> {
    let mut down: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
    for event in events {
        match event.harness() {
            Some(HarnessEvent::HostStop { host, .. }) => down
                .entry(host.as_str())
                .or_default()
                .push((event.at_ms, u64::MAX)),
            Some(HarnessEvent::HostStart { host, .. }) => {
                if let Some(last) = down.get_mut(host.as_str()).and_then(|d| d.last_mut()) {
                    if last.1 == u64::MAX {
                        last.1 = event.at_ms;
                    }
                }
            }
            _ => {}
        }
    }
    down
}

/// Client writes in flight: `(start, end)` of each write attempt.
fn writes(events: &[TraceEvent]) -> Vec<(u64, u64)> {
    events
        .iter()
        .filter_map(|e| match e.world() {
            Some(WorldEvent::Request {
                write: true,
                latency_ms,
                ..
            }) => Some((e.at_ms.saturating_sub(*latency_ms), e.at_ms)),
            _ => None,
        })
        .collect()
}

/// The app whose state the platform's read model took from this event, if any.
fn updated_app(e: &TraceEvent) -> Option<&str> {
    match &e.entry {
        Entry::Observed(Observation::Platform(PlatformEvent::Event {
            app,
            applied: Projection::Updated,
            ..
        })) => Some(app),
        _ => None,
    }
}

fn during(spans: &[(u64, u64)], at: u64) -> bool {
    spans.iter().any(|(start, end)| *start < at && at < *end)
}

impl Condition {
    /// Whether the run whose trace is `events` reached this condition.
    pub fn reached(self, scenario: &Scenario, events: &[TraceEvent]) -> bool {
        match self {
            Condition::QueueOverflowed => overflows(events).next().is_some(),
            Condition::QueueOverflowedDuringScale => {
                let scales: Vec<u64> = events
                    .iter()
                    .filter(|e| matches!(e.harness(), Some(HarnessEvent::Fault(Fault::Scale { .. }))))
                    .map(|e| e.at_ms)
                    .collect();
                overflows(events)
                    .any(|at| scales.iter().any(|s| *s <= at && at <= s + SCALE_WINDOW_MS))
            }
            Condition::LeaseExpiredWhileSending => {
                // A replica drops another from its membership while that one still runs.
                let down = downtimes(events);
                let mut views: BTreeMap<&str, &[String]> = BTreeMap::new();
                events.iter().any(|e| match e.reporter() {
                    Some(ReporterEvent::Membership { replica, members, .. }) => {
                        let before = views.insert(replica.as_str(), members).unwrap_or(&[]);
                        before.iter().any(|other| {
                            other != replica
                                && !members.contains(other)
                                && !down
                                    .get(other.as_str())
                                    .is_some_and(|d| is_down(d, e.at_ms))
                        })
                    }
                    _ => false,
                })
            }
            Condition::Watch410ThenRelist => {
                let expired = events.iter().position(|e| {
                    matches!(e.world(), Some(WorldEvent::WatchEnded { end: WatchEnd::Expired, .. }))
                });
                expired.is_some_and(|i| {
                    events[i..]
                        .iter()
                        .any(|e| matches!(e.world(), Some(WorldEvent::ProbeInit)))
                })
            }
            Condition::DestinationUnreachable => events.iter().any(|e| {
                matches!(e.world(), Some(WorldEvent::ClusterReach { reachable: false, .. }))
            }),
            Condition::ChildAppReported => {
                let mut children = BTreeSet::new();
                events.iter().any(|e| {
                    if let Some(WorldEvent::ChildCreated { child, .. }) = e.world() {
                        let name = child.rsplit('/').next().unwrap_or(child);
                        children.insert(name.to_string());
                    }
                    updated_app(e).is_some_and(|app| children.contains(app))
                })
            }
            Condition::ArgocdTokenReloaded => events.iter().any(|e| {
                matches!(e.reporter(), Some(ReporterEvent::TokenLoaded { requeued, .. }) if *requeued > 0)
            }),
            Condition::OtherNamespaceReported => {
                let extra = &scenario.argocd.application_namespaces;
                events.iter().filter_map(updated_app).any(|app| {
                    crate::world::workload::index_of(app).is_some_and(|i| {
                        crate::world::workload::namespace_of(i, extra)
                            != crate::world::argocd::NAMESPACE
                    })
                })
            }
            Condition::DestinationRecovered => {
                let mut down = std::collections::BTreeSet::new();
                events.iter().any(|e| match e.world() {
                    Some(WorldEvent::ClusterReach { server, reachable: false }) => {
                        down.insert(server.clone());
                        false
                    }
                    Some(WorldEvent::ClusterReach { server, reachable: true }) => {
                        down.contains(server)
                    }
                    _ => false,
                })
            }
            Condition::WatchExpired => events.iter().any(|e| {
                matches!(e.world(), Some(WorldEvent::WatchEnded { end: WatchEnd::Expired, .. }))
            }),
            Condition::ReporterRestarted => {
                let reporters = hosts(scenario, Role::Reporter);
                let down = downtimes(events);
                reporters.iter().any(|r| {
                    down.get(r)
                        .is_some_and(|d| d.iter().any(|(_, end)| *end != u64::MAX))
                })
            }
            Condition::CacheDownDuringSend => {
                let caches = hosts(scenario, Role::Cache);
                let down = downtimes(events);
                let spans: Vec<(u64, u64)> = caches
                    .iter()
                    .filter_map(|c| down.get(c))
                    .flatten()
                    .copied()
                    .collect();
                events.iter().any(|e| {
                    matches!(&e.entry, Entry::Observed(Observation::Platform(PlatformEvent::Event { .. })))
                        && during(&spans, e.at_ms)
                })
            }
            Condition::AnalysisFailed => events.iter().any(|e| {
                matches!(e.world(), Some(WorldEvent::AnalysisDone { phase, .. }) if phase == "Failed" || phase == "Error")
            }),
            Condition::EventBusRestarted => restarted(scenario, events, Role::Eventbus),
            Condition::ResourceReporterRestarted => restarted(scenario, events, Role::Resources),
            Condition::PublishDropped => lost(events, LossReason::PublishFailed),
            Condition::TriggerGaveUp => lost(events, LossReason::RetriesSpent),
            Condition::AcceptedAsFinal => lost(events, LossReason::AcceptedAsFinal),
            Condition::ResourcesResynced => events.iter().any(|e| {
                matches!(e.resources(), Some(ResourceReporterEvent::Resync { queued, deleted }) if queued + deleted > 0)
            }),
            Condition::WorkflowHeldByFinalizer => events.iter().any(|e| {
                matches!(
                    e.resources(),
                    Some(ResourceReporterEvent::Released { held: true, .. })
                )
            }),
            Condition::AcrRestarted => restarted(scenario, events, Role::Acr),
            Condition::AcrEventDropped => events
                .iter()
                .any(|e| matches!(e.acr(), Some(AcrEvent::Dropped { .. }))),
            Condition::AcrOperationMissed => events
                .iter()
                .any(|e| matches!(e.acr(), Some(AcrEvent::Late { .. }))),
            Condition::AcrCallFailed => events
                .iter()
                .any(|e| matches!(e.acr(), Some(AcrEvent::Failed { .. }))),
            Condition::SourcesRestarted => restarted(scenario, events, Role::Sources),
            Condition::SourcesServedFromCache => events.iter().any(|e| {
                matches!(e.sources(), Some(SourcesEvent::Served { cached: true, .. }))
            }),
            Condition::SourcesUnavailable => events
                .iter()
                .any(|e| matches!(e.sources(), Some(SourcesEvent::Unavailable { .. }))),
            Condition::DetailsMissing => events
                .iter()
                .any(|e| matches!(e.reporter(), Some(ReporterEvent::DetailsMissing { .. }))),
            Condition::OperatorFailover => {
                let leaders: BTreeSet<&String> = events
                    .iter()
                    .filter_map(|e| match e.operator() {
                        Some(OperatorEvent::Leader { host }) => Some(host),
                        _ => None,
                    })
                    .collect();
                leaders.len() > 1
            }
            Condition::PromotionRetried => events.iter().any(|e| {
                matches!(e.operator(), Some(OperatorEvent::Step { outcome, .. }) if outcome == "retry")
            }),
            Condition::PromotionDeduplicated => events.iter().any(|e| {
                matches!(e.operator(), Some(OperatorEvent::Commit { deduplicated: true, .. }))
            }),
            Condition::ReleaseFailed => events.iter().any(|e| {
                matches!(e.promotion(), Some(PromotionEvent::ReleaseEnd { phase, .. }) if phase == "Failed")
            }),
            Condition::RestrictedAppRefused => events
                .iter()
                .any(|e| matches!(e.world(), Some(WorldEvent::AppRefused { .. }))),
            Condition::RestrictedChildRefused => events.iter().any(|e| {
                matches!(e.world(), Some(WorldEvent::ReconcileError { error, .. }) if error.contains("is not permitted in project"))
            }),
            Condition::RestrictedAppRevoked => {
                let mut deployed = BTreeSet::new();
                events.iter().any(|e| match e.world() {
                    Some(WorldEvent::AppDeployed { app, .. }) => {
                        deployed.insert(app.as_str());
                        false
                    }
                    Some(WorldEvent::AppRefused { app, .. }) => deployed.contains(app.as_str()),
                    _ => false,
                })
            }
            Condition::RestrictedSourceDeleted => {
                let mut deleted = BTreeSet::new();
                events.iter().any(|e| match e.world() {
                    Some(WorldEvent::SourceChanged { source, spec }) if spec.is_null() => {
                        deleted.insert(source.as_str());
                        false
                    }
                    Some(WorldEvent::ProjectSeen { project, spec }) if spec.is_null() => {
                        deleted.contains(project.as_str())
                    }
                    _ => false,
                })
            }
            Condition::RestrictedDenyEntry => events.iter().any(|e| {
                matches!(e.world(), Some(WorldEvent::SourceChanged { spec, .. })
                    if !spec.is_null() && crate::checkers::restricted::Permits::of_source(spec).deny)
            }),
            Condition::RuntimeShownUnable => health_shown(events, &["Healthy", UNABLE]),
            Condition::RuntimeShownRecovered => {
                health_shown(events, &["Healthy", UNABLE, "Healthy"])
            }
            Condition::PlatformCrashedWithBacklog => events.iter().any(|e| {
                matches!(e.platform(), Some(PlatformEvent::BusRecovered { lost, redelivered, kept, .. }) if lost + redelivered + kept > 0)
            }),
            Condition::EventRedelivered => events.iter().any(|e| {
                matches!(e.platform(), Some(PlatformEvent::BusRecovered { redelivered, .. }) if *redelivered > 0)
            }),
            Condition::ForeignRequestRefused => events.iter().any(|e| {
                matches!(e.world(), Some(WorldEvent::TenantProbe { kind, status, .. })
                    if matches!(kind.as_str(), "foreign_path" | "dotdot_path" | "encoded_path" | "foreign_query" | "foreign_mutation")
                        && (400..500).contains(status))
            }),
            Condition::OwnWriteReached => events.iter().any(|e| {
                matches!(e.world(), Some(WorldEvent::TenantProbe { kind, status, .. })
                    if kind == "own_write" && (200..300).contains(status))
            }),
            Condition::ForgedPayloadAccepted => events.iter().any(|e| {
                matches!(e.world(), Some(WorldEvent::TenantProbe { kind, status, .. })
                    if kind == "forged_payload" && (200..300).contains(status))
            }),
            Condition::ExpiredTokenRefused => events.iter().any(|e| {
                matches!(e.world(), Some(WorldEvent::TenantProbe { kind, status, .. })
                    if kind == "expired_token" && *status == 401)
            }),
            Condition::IngressWriteReached => events.iter().any(|e| {
                matches!(e.world(), Some(WorldEvent::TenantProbe { kind, status, .. })
                    if kind == "own_ingress_write" && (200..300).contains(status))
            }),
            Condition::StoreUnavailableAnswered => events.iter().any(|e| {
                matches!(
                    e.world(),
                    Some(WorldEvent::TenantProbe { status: 503, .. }
                        | WorldEvent::TenantRegistered { status: 503, .. })
                )
            }),
            Condition::TokenRotatedAfterRestart => {
                let gateway = crate::world::placement::host_of(scenario, Role::Gateway);
                let crashes: Vec<u64> = events
                    .iter()
                    .filter(|e| matches!(e.harness(), Some(HarnessEvent::Fault(Fault::Crash(host))) if host == gateway))
                    .map(|e| e.at_ms)
                    .collect();
                let mut answered: BTreeMap<(&str, &str), u64> = BTreeMap::new();
                events.iter().any(|e| match e.world() {
                    Some(WorldEvent::TenantRegistered {
                        account,
                        runtime,
                        token_sha256,
                        rotated,
                        ..
                    }) if !token_sha256.is_empty() => {
                        let before = answered.insert((account, runtime), e.at_ms);
                        *rotated
                            && before.is_some_and(|before| {
                                crashes.iter().any(|c| before < *c && *c < e.at_ms)
                            })
                    }
                    _ => false,
                })
            }
            Condition::AntiEntropyRepaired => events.iter().any(|e| {
                matches!(e.platform(), Some(PlatformEvent::AntiEntropy { updated, .. }) if *updated > 0)
            }),
            Condition::AntiEntropyTombstoned => events.iter().any(|e| {
                matches!(e.platform(), Some(PlatformEvent::AntiEntropy { tombstoned, .. }) if *tombstoned > 0)
            }),
            Condition::AntiEntropyFailedThenRepaired => {
                let mut failed: BTreeSet<&str> = BTreeSet::new();
                events.iter().any(|e| match e.platform() {
                    Some(PlatformEvent::AntiEntropy {
                        runtime,
                        updated,
                        tombstoned,
                        error,
                        ..
                    }) => {
                        if !error.is_empty() {
                            failed.insert(runtime);
                            false
                        } else {
                            updated + tombstoned > 0 && failed.contains(runtime.as_str())
                        }
                    }
                    _ => false,
                })
            }
            Condition::VclusterConflict => events
                .iter()
                .any(|e| matches!(e.platform(), Some(PlatformEvent::VclusterConflict { .. }))),
            Condition::VclusterFailedThenSynced => {
                let mut failed: BTreeSet<(&str, &str)> = BTreeSet::new();
                events.iter().any(|e| match e.platform() {
                    Some(PlatformEvent::VclusterFailed {
                        vcluster, object, ..
                    }) => {
                        failed.insert((vcluster, object));
                        false
                    }
                    Some(PlatformEvent::VclusterSynced {
                        vcluster, object, ..
                    }) => failed.contains(&(vcluster.as_str(), object.as_str())),
                    _ => false,
                })
            }
            Condition::HostedRuntimeRestartedThenReported => {
                let hosted = hosts(scenario, Role::Vcluster);
                let down = downtimes(events);
                events.iter().any(|e| match e.reporter() {
                    Some(ReporterEvent::Queue {
                        replica, sent_app, ..
                    }) if *sent_app > 0 && hosted.contains(replica.as_str()) => down
                        .get(replica.as_str())
                        .is_some_and(|d| d.iter().any(|(_, end)| *end <= e.at_ms)),
                    _ => false,
                })
            }
            Condition::RunnerTaskRedelivered => events.iter().any(|e| {
                matches!(e.runner(), Some(RunnerEvent::Handout { delivery, .. }) if *delivery > 1)
            }),
            Condition::RunnerAckLost => events.iter().any(|e| {
                matches!(e.runner(), Some(RunnerEvent::Ack { delivered: false, .. }))
            }),
            Condition::RunnerBuildPending => events.iter().any(|e| {
                matches!(e.runner(), Some(RunnerEvent::Build { status, .. }) if status == "pending")
            }),
            Condition::RunnerPolicyTerminated => events.iter().any(|e| {
                matches!(e.runner(), Some(RunnerEvent::Build { status, reason, .. })
                    if status == "terminated" && reason.starts_with("terminated by the pipeline's policy"))
            }),
            Condition::RunnerCronReplicaDown => {
                let replicas = hosts(scenario, Role::Cron);
                let down = downtimes(events);
                events.iter().any(|e| match e.runner() {
                    Some(RunnerEvent::Tick { host, outcome, .. })
                        if outcome.starts_with("build ") || outcome.starts_with("duplicate of") =>
                    {
                        replicas.iter().any(|r| {
                            *r != host.as_str() && down.get(r).is_some_and(|d| is_down(d, e.at_ms))
                        })
                    }
                    _ => false,
                })
            }
            Condition::RunnerDiskPressure => events.iter().any(|e| {
                matches!(e.runner(), Some(RunnerEvent::Volume { action, .. }) if action == "marked")
            }),
            Condition::RunnerLogBacklog => events.iter().any(|e| match e.runner() {
                Some(RunnerEvent::Logs { peak_bytes, .. }) => *peak_bytes >= LOG_BACKLOG_BYTES,
                Some(RunnerEvent::EngineOom { held_bytes, .. }) => {
                    *held_bytes >= LOG_BACKLOG_BYTES
                }
                _ => false,
            }),
            Condition::RunnerProxyRefused => events.iter().any(|e| {
                matches!(e.runner(), Some(RunnerEvent::Proxy { answer, .. })
                    if (400..500).contains(answer) && *answer != 408 && *answer != 429)
            }),
            Condition::DuplicateDelivered => projected(events, Projection::Duplicate),
            Condition::StaleEventIgnored => projected(events, Projection::Stale),
            Condition::ResyncRepaired => events.iter().any(|e| {
                matches!(e.reporter(), Some(ReporterEvent::Resync { requeued, deletions, .. }) if requeued + deletions > 0)
            }),
            Condition::TunnelDroppedMidWrite => {
                let spans = writes(events);
                events.iter().any(|e| {
                    matches!(e.tunnel(), Some(TunnelEvent::ServerDown { .. } | TunnelEvent::ClientDown { .. }))
                        && during(&spans, e.at_ms)
                })
            }
            Condition::RuntimeCrashedMidWrite => {
                let runtimes = hosts(scenario, Role::Runtime);
                let spans = writes(events);
                events.iter().any(|e| {
                    matches!(e.harness(), Some(HarnessEvent::HostStop { host, .. }) if runtimes.contains(host.as_str()))
                        && during(&spans, e.at_ms)
                })
            }
            Condition::WriteRetried => events.iter().any(|e| {
                matches!(e.world(), Some(WorldEvent::Request { write: true, attempt, .. }) if *attempt > 1)
            }),
            Condition::TunnelReregistered => {
                let mut up: BTreeSet<&str> = BTreeSet::new();
                events.iter().any(|e| match e.tunnel() {
                    Some(TunnelEvent::ClientUp { runtime }) => !up.insert(runtime.as_str()),
                    _ => false,
                })
            }
        }
    }
}

/// Whether a host with `role` was stopped and started again.
fn restarted(scenario: &Scenario, events: &[TraceEvent], role: Role) -> bool {
    let down = downtimes(events);
    hosts(scenario, role).iter().any(|h| {
        down.get(h)
            .is_some_and(|d| d.iter().any(|(_, end)| *end != u64::MAX))
    })
}

/// Whether the resource reporter gave a state up for `why`.
fn lost(events: &[TraceEvent], why: LossReason) -> bool {
    events.iter().any(
        |e| matches!(e.resources(), Some(ResourceReporterEvent::Lost { why: w, .. }) if *w == why),
    )
}

/// True when `at` falls inside one of the down intervals (the host is down at `at`).
fn is_down(down: &[(u64, u64)], at: u64) -> bool {
    down.iter().any(|(start, end)| *start <= at && at < *end)
}

/// Times at which a reporter's queue was seen overflowing (drops or parked apps grew).
fn overflows(events: &[TraceEvent]) -> impl Iterator<Item = u64> + '_ {
    let mut last: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    events.iter().filter_map(move |e| match e.reporter() {
        Some(ReporterEvent::Queue {
            replica,
            resync,
            dropped,
            ..
        }) => {
            let before = last
                .insert(replica.as_str(), (*dropped, *resync))
                .unwrap_or((0, 0));
            (*dropped > before.0 || (*resync > 0 && before.1 == 0)).then_some(e.at_ms)
        }
        _ => None,
    })
}

fn projected(events: &[TraceEvent], kind: Projection) -> bool {
    events.iter().any(|e| {
        matches!(&e.entry, Entry::Observed(Observation::Platform(PlatformEvent::Event { applied, .. })) if *applied == kind)
    })
}

/// Every condition the run reached, in declaration order.
pub fn reached(scenario: &Scenario, events: &[TraceEvent]) -> Vec<Condition> {
    Condition::ALL
        .iter()
        .copied()
        .filter(|c| c.reached(scenario, events))
        .collect()
}

/// How many times each fault point fired in the run (points that never fired are absent).
pub fn fault_points(events: &[TraceEvent]) -> BTreeMap<Point, u64> {
    let mut fired = BTreeMap::new();
    for event in events {
        if let Entry::Observed(Observation::FaultPoint(FaultPointEvent::Fired { point })) =
            &event.entry
        {
            *fired.entry(*point).or_default() += 1;
        }
    }
    fired
}

#[cfg(test)]
mod tests {
    //! Each condition over hand-written traces: one near miss where it is not reached and
    //! one where it is.

    use orrery_system::observe::RequestOutcome;

    use super::*;
    use crate::trace::HostChange;

    fn world() -> Scenario {
        crate::scenario::parse::parse(
            "reach.yaml",
            "name: t
description: d
topology:
  hosts:
    - {name: apiserver, role: apiserver}
    - {name: argocd, role: argocd}
    - {name: workload, role: workload}
    - {name: platform, role: platform}
    - {name: cache, role: cache}
    - {name: reporter-0, role: reporter}
    - {name: reporter-1, role: reporter}
    - {name: gateway, role: gateway}
    - {name: prod, role: runtime}
    - {name: client-0, role: client}
    - {name: eventbus, role: eventbus}
    - {name: resources, role: resources}
    - {name: acr, role: acr}
    - {name: sources, role: sources}
    - {name: acme, role: vcluster}
    - {name: runner, role: runner}
    - {name: cronus-0, role: cron}
    - {name: cronus-1, role: cron}
hosted: {applications: 1}
runner: {cron: {}}
argocd: {application_namespaces: [team-a]}
duration: 10s
calm: 60s
invariants: [{name: platform_converges}]
expect: {hardened: pass}
",
        )
        .expect("the test world parses")
    }

    fn at(at_ms: u64, host: &str, observation: impl Into<Observation>) -> TraceEvent {
        TraceEvent::observed(at_ms, host, observation)
    }

    fn harness(at_ms: u64, event: HarnessEvent) -> TraceEvent {
        TraceEvent::of_harness(at_ms, event)
    }

    fn stop(at_ms: u64, host: &str) -> TraceEvent {
        harness(
            at_ms,
            HarnessEvent::HostStop {
                host: host.into(),
                why: HostChange::Crash,
            },
        )
    }

    fn start(at_ms: u64, host: &str) -> TraceEvent {
        harness(
            at_ms,
            HarnessEvent::HostStart {
                host: host.into(),
                why: HostChange::Restart,
            },
        )
    }

    fn queue(at_ms: u64, replica: &str, dropped: u64, parked: u64) -> TraceEvent {
        at(
            at_ms,
            replica,
            ReporterEvent::Queue {
                replica: replica.into(),
                depth: 10,
                resync: parked.min(1),
                dropped,
                parked,
                sent_app: 0,
                sent_resource: 0,
                rate_limited: 0,
            },
        )
    }

    fn members(at_ms: u64, replica: &str, members: &[&str]) -> TraceEvent {
        at(
            at_ms,
            replica,
            ReporterEvent::Membership {
                replica: replica.into(),
                members: members.iter().map(|m| m.to_string()).collect(),
                gained: 0,
            },
        )
    }

    fn reach_event(at_ms: u64, server: &str, reachable: bool) -> TraceEvent {
        at(
            at_ms,
            "argocd",
            WorldEvent::ClusterReach {
                server: server.into(),
                reachable,
            },
        )
    }

    fn watch_end(at_ms: u64, end: WatchEnd) -> TraceEvent {
        at(
            at_ms,
            "apiserver",
            WorldEvent::WatchEnded {
                resource: "applications".into(),
                from_rv: Some(1),
                end,
            },
        )
    }

    fn projected(at_ms: u64, applied: Projection) -> TraceEvent {
        at(
            at_ms,
            "platform",
            PlatformEvent::Event {
                app: "argocd/a".into(),
                rv: "7".into(),
                deleted: false,
                applied,
                seq: at_ms,
            },
        )
    }

    fn write(at_ms: u64, attempt: u32, latency_ms: u64) -> TraceEvent {
        at(
            at_ms,
            "client-0",
            WorldEvent::Request {
                key: "client-0-2".into(),
                write: true,
                attempt,
                outcome: RequestOutcome::Status(201),
                latency_ms,
            },
        )
    }

    fn client_up(at_ms: u64) -> TraceEvent {
        at(
            at_ms,
            "prod",
            TunnelEvent::ClientUp {
                runtime: "acme-prod".into(),
            },
        )
    }

    fn server_down(at_ms: u64) -> TraceEvent {
        at(
            at_ms,
            "gateway",
            TunnelEvent::ServerDown {
                runtime: "acme-prod".into(),
                generation: 1,
                why: "gone".into(),
            },
        )
    }

    fn scale(at_ms: u64) -> TraceEvent {
        harness(
            at_ms,
            HarnessEvent::Fault(Fault::Scale {
                replicas: 2,
                every: std::time::Duration::from_secs(5),
            }),
        )
    }

    /// (condition, a near miss, a trace that reaches it).
    fn cases() -> Vec<(Condition, Vec<TraceEvent>, Vec<TraceEvent>)> {
        use Condition::*;
        vec![
            (
                QueueOverflowed,
                vec![queue(1_000, "reporter-0", 0, 0)],
                vec![
                    queue(1_000, "reporter-0", 0, 0),
                    queue(2_000, "reporter-0", 3, 0),
                ],
            ),
            (
                QueueOverflowedDuringScale,
                vec![scale(1_000), queue(70_000, "reporter-0", 1, 0)],
                vec![scale(1_000), queue(30_000, "reporter-0", 0, 4)],
            ),
            (
                LeaseExpiredWhileSending,
                // reporter-1 leaves reporter-0's view because it crashed: not this condition.
                vec![
                    members(1_000, "reporter-0", &["reporter-0", "reporter-1"]),
                    stop(5_000, "reporter-1"),
                    members(20_000, "reporter-0", &["reporter-0"]),
                ],
                vec![
                    members(1_000, "reporter-0", &["reporter-0", "reporter-1"]),
                    members(20_000, "reporter-0", &["reporter-0"]),
                ],
            ),
            (
                Watch410ThenRelist,
                vec![
                    at(1_000, "probe", WorldEvent::ProbeInit),
                    watch_end(2_000, WatchEnd::Expired),
                ],
                vec![
                    watch_end(2_000, WatchEnd::Expired),
                    at(3_000, "probe", WorldEvent::ProbeInit),
                ],
            ),
            (
                WatchExpired,
                vec![watch_end(2_000, WatchEnd::Timeout)],
                vec![watch_end(2_000, WatchEnd::Expired)],
            ),
            (
                ReporterRestarted,
                vec![
                    stop(1_000, "reporter-0"),
                    stop(2_000, "cache"),
                    start(3_000, "cache"),
                ],
                vec![stop(1_000, "reporter-0"), start(3_000, "reporter-0")],
            ),
            (
                CacheDownDuringSend,
                vec![
                    projected(500, Projection::Updated),
                    stop(1_000, "cache"),
                    start(3_000, "cache"),
                    projected(4_000, Projection::Updated),
                ],
                vec![
                    stop(1_000, "cache"),
                    projected(2_000, Projection::Updated),
                    start(3_000, "cache"),
                ],
            ),
            (
                DuplicateDelivered,
                vec![projected(1_000, Projection::Updated)],
                vec![projected(1_000, Projection::Duplicate)],
            ),
            (
                StaleEventIgnored,
                vec![projected(1_000, Projection::Duplicate)],
                vec![projected(1_000, Projection::Stale)],
            ),
            (
                ResyncRepaired,
                vec![at(
                    1_000,
                    "reporter-0",
                    ReporterEvent::Resync {
                        replica: "reporter-0".into(),
                        requeued: 0,
                        deletions: 0,
                    },
                )],
                vec![at(
                    1_000,
                    "reporter-0",
                    ReporterEvent::Resync {
                        replica: "reporter-0".into(),
                        requeued: 0,
                        deletions: 2,
                    },
                )],
            ),
            (
                TunnelDroppedMidWrite,
                vec![server_down(1_000), write(5_000, 1, 300)],
                vec![server_down(4_900), write(5_000, 1, 300)],
            ),
            (
                RuntimeCrashedMidWrite,
                vec![stop(4_900, "gateway"), write(5_000, 1, 300)],
                vec![stop(4_900, "prod"), write(5_000, 1, 300)],
            ),
            (
                WriteRetried,
                vec![write(5_000, 1, 300)],
                vec![write(5_000, 1, 300), write(9_000, 2, 300)],
            ),
            (
                TunnelReregistered,
                vec![client_up(1_000)],
                vec![client_up(1_000), client_up(9_000)],
            ),
            (
                DestinationUnreachable,
                vec![reach_event(1_000, "https://c:6443", true)],
                vec![reach_event(1_000, "https://c:6443", false)],
            ),
            (
                DestinationRecovered,
                vec![
                    reach_event(1_000, "https://c:6443", true),
                    reach_event(2_000, "https://d:6443", false),
                ],
                vec![
                    reach_event(1_000, "https://c:6443", false),
                    reach_event(2_000, "https://c:6443", true),
                ],
            ),
            (
                ChildAppReported,
                // The child's state reached the platform before Argo CD created it (no
                // such order happens; a near miss of the condition's shape), and a
                // duplicate after.
                vec![
                    update(1_000, "app-00003", Projection::Updated),
                    child_created(2_000, "app-00003"),
                    update(3_000, "app-00003", Projection::Duplicate),
                ],
                vec![
                    child_created(2_000, "app-00003"),
                    update(3_000, "app-00003", Projection::Updated),
                ],
            ),
            (
                OtherNamespaceReported,
                // With `application_namespaces: [team-a]`, even apps live in argocd and
                // odd ones in team-a.
                vec![
                    update(1_000, "app-00002", Projection::Updated),
                    update(2_000, "app-00001", Projection::Stale),
                ],
                vec![update(1_000, "app-00001", Projection::Updated)],
            ),
            (
                ArgocdTokenReloaded,
                // The token read at start is not a reload.
                vec![token_loaded(1_000, 0)],
                vec![token_loaded(1_000, 0), token_loaded(9_000, 40)],
            ),
            (
                AnalysisFailed,
                vec![
                    analysis(1_000, "Successful"),
                    analysis(2_000, "Inconclusive"),
                ],
                vec![analysis(1_000, "Successful"), analysis(2_000, "Failed")],
            ),
            (
                EventBusRestarted,
                // Stopped for good is not a restart; another host's restart is not this one.
                vec![
                    stop(1_000, "eventbus"),
                    stop(2_000, "resources"),
                    start(3_000, "resources"),
                ],
                vec![stop(1_000, "eventbus"), start(3_000, "eventbus")],
            ),
            (
                ResourceReporterRestarted,
                vec![
                    stop(1_000, "resources"),
                    stop(2_000, "eventbus"),
                    start(3_000, "eventbus"),
                ],
                vec![stop(1_000, "resources"), start(3_000, "resources")],
            ),
            (
                PublishDropped,
                vec![lost(1_000, LossReason::RetriesSpent)],
                vec![lost(1_000, LossReason::PublishFailed)],
            ),
            (
                TriggerGaveUp,
                vec![lost(1_000, LossReason::AcceptedAsFinal)],
                vec![lost(1_000, LossReason::RetriesSpent)],
            ),
            (
                AcceptedAsFinal,
                vec![lost(1_000, LossReason::Refused)],
                vec![lost(1_000, LossReason::AcceptedAsFinal)],
            ),
            (
                ResourcesResynced,
                vec![resync(1_000, 0, 0)],
                vec![resync(1_000, 0, 0), resync(2_000, 0, 1)],
            ),
            (
                WorkflowHeldByFinalizer,
                vec![released(1_000, false)],
                vec![released(1_000, false), released(2_000, true)],
            ),
            (
                AcrRestarted,
                vec![
                    stop(1_000, "acr"),
                    stop(2_000, "resources"),
                    start(3_000, "resources"),
                ],
                vec![stop(1_000, "acr"), start(3_000, "acr")],
            ),
            (
                AcrEventDropped,
                vec![acr(
                    1_000,
                    AcrEvent::Late {
                        app: "argocd/a".into(),
                    },
                )],
                vec![acr(
                    1_000,
                    AcrEvent::Dropped {
                        app: "argocd/a".into(),
                    },
                )],
            ),
            (
                AcrOperationMissed,
                vec![acr(
                    1_000,
                    AcrEvent::Dropped {
                        app: "argocd/a".into(),
                    },
                )],
                vec![acr(
                    1_000,
                    AcrEvent::Late {
                        app: "argocd/a".into(),
                    },
                )],
            ),
            (
                AcrCallFailed,
                vec![acr(1_000, AcrEvent::Resync { apps: 3 })],
                vec![acr(
                    1_000,
                    AcrEvent::Failed {
                        app: "argocd/a".into(),
                        error: "503".into(),
                    },
                )],
            ),
            (
                SourcesRestarted,
                vec![stop(1_000, "sources")],
                vec![stop(1_000, "sources"), start(3_000, "sources")],
            ),
            (
                SourcesServedFromCache,
                vec![served(1_000, false)],
                vec![served(1_000, false), served(2_000, true)],
            ),
            (
                SourcesUnavailable,
                vec![served(1_000, false)],
                vec![at(
                    1_000,
                    "sources",
                    SourcesEvent::Unavailable {
                        what: "metadata".into(),
                        app: "argocd/a".into(),
                        revision: "abc".into(),
                        error: "503".into(),
                    },
                )],
            ),
            (
                DetailsMissing,
                vec![at(
                    1_000,
                    "reporter-0",
                    ReporterEvent::ResyncError {
                        replica: "reporter-0".into(),
                    },
                )],
                vec![at(
                    1_000,
                    "reporter-0",
                    ReporterEvent::DetailsMissing {
                        replica: "reporter-0".into(),
                        app: "a".into(),
                    },
                )],
            ),
            (
                OperatorFailover,
                vec![leader(1_000, "operator-0"), leader(9_000, "operator-0")],
                vec![leader(1_000, "operator-0"), leader(9_000, "operator-1")],
            ),
            (
                PromotionRetried,
                vec![step(1_000, "waiting")],
                vec![step(1_000, "waiting"), step(2_000, "retry")],
            ),
            (
                PromotionDeduplicated,
                vec![commit(1_000, false)],
                vec![commit(1_000, false), commit(2_000, true)],
            ),
            (
                ReleaseFailed,
                vec![
                    release_end(1_000, "Succeeded"),
                    release_end(2_000, "Terminated"),
                ],
                vec![release_end(1_000, "Failed")],
            ),
            (
                RestrictedAppRefused,
                vec![deployed(1_000, "team-a/web")],
                vec![refused(1_000, "team-a/web")],
            ),
            (
                RestrictedChildRefused,
                vec![reconcile_error(1_000, "rpc error: repository not found")],
                vec![reconcile_error(
                    1_000,
                    "namespace argocd is not permitted in project 'team-a'",
                )],
            ),
            (
                RestrictedAppRevoked,
                // Refused first, deployed later (a source widened) is no revocation.
                vec![refused(1_000, "team-a/web"), deployed(2_000, "team-a/web")],
                vec![deployed(1_000, "team-a/web"), refused(2_000, "team-a/web")],
            ),
            (
                RestrictedSourceDeleted,
                // The project of a deleted source that stays is not reached.
                vec![
                    source(1_000, serde_json::Value::Null),
                    project(2_000, serde_json::json!({})),
                ],
                vec![
                    source(1_000, serde_json::Value::Null),
                    project(2_000, serde_json::Value::Null),
                ],
            ),
            (
                RestrictedDenyEntry,
                // A deleted source, and one without a deny entry, are not reached.
                vec![
                    source(1_000, serde_json::Value::Null),
                    source(
                        2_000,
                        serde_json::json!({"sourceRepos": ["https://git.example/a/*"]}),
                    ),
                ],
                vec![source(
                    1_000,
                    serde_json::json!({"sourceRepos": ["https://git.example/a/*", "!https://git.example/a/old*"]}),
                )],
            ),
            (
                RuntimeShownUnable,
                // Unreachable before it was ever healthy (not connected yet) is no drop.
                vec![health(1_000, UNABLE), health(2_000, "Healthy")],
                vec![health(1_000, "Healthy"), health(2_000, UNABLE)],
            ),
            (
                RuntimeShownRecovered,
                vec![health(1_000, "Healthy"), health(2_000, UNABLE)],
                vec![
                    health(1_000, "Healthy"),
                    health(2_000, UNABLE),
                    health(3_000, "Healthy"),
                ],
            ),
            (
                PlatformCrashedWithBacklog,
                // A crash that found the bus empty.
                vec![
                    projected(1_000, Projection::Updated),
                    recovered(2_000, 0, 0),
                ],
                vec![recovered(1_000, 3, 0)],
            ),
            (
                EventRedelivered,
                // Lost, none taken: nothing comes again.
                vec![recovered(1_000, 3, 0)],
                vec![recovered(1_000, 0, 2)],
            ),
            (
                ForeignRequestRefused,
                // Refused, but one's own request.
                vec![probe(1_000, "member_write", 404)],
                vec![probe(1_000, "dotdot_path", 404)],
            ),
            (
                OwnWriteReached,
                // Tried, but the runtime was not there.
                vec![probe(1_000, "own_write", 503)],
                vec![probe(1_000, "own_write", 201)],
            ),
            (
                ForgedPayloadAccepted,
                vec![probe(1_000, "forged_payload", 401)],
                vec![probe(1_000, "forged_payload", 200)],
            ),
            (
                ExpiredTokenRefused,
                // Another probe's 401, or the expired token answered.
                vec![
                    probe(1_000, "forged_token", 401),
                    probe(2_000, "expired_token", 200),
                ],
                vec![probe(1_000, "expired_token", 401)],
            ),
            (
                IngressWriteReached,
                // A write through a tunnel, or an ingress write refused.
                vec![
                    probe(1_000, "own_write", 201),
                    probe(2_000, "own_ingress_write", 502),
                ],
                vec![probe(1_000, "own_ingress_write", 201)],
            ),
            (
                StoreUnavailableAnswered,
                // Another 5xx, or a 503 from no store (none).
                vec![
                    probe(1_000, "own_write", 502),
                    registered(2_000, "reg-0", 500, "", false),
                ],
                vec![registered(1_000, "reg-0", 503, "", false)],
            ),
            (
                TokenRotatedAfterRestart,
                // A rotation with no crash between; a crash between two different names;
                // a crash between that was another host's.
                vec![
                    registered(1_000, "reg-0", 200, "a", false),
                    registered(2_000, "reg-0", 200, "b", true),
                    fault(3_000, Fault::Crash("gateway".into())),
                    registered(4_000, "reg-1", 200, "c", false),
                    fault(5_000, Fault::Crash("prod".into())),
                    registered(6_000, "reg-1", 200, "d", true),
                ],
                vec![
                    registered(1_000, "reg-0", 200, "a", false),
                    fault(3_000, Fault::Crash("gateway".into())),
                    registered(4_000, "reg-0", 503, "", false),
                    registered(5_000, "reg-0", 200, "b", true),
                ],
            ),
            (
                AntiEntropyRepaired,
                // A pass that listed apps and found nothing stale, or only deletions.
                vec![
                    anti_entropy(1_000, 300, 0, 0),
                    anti_entropy(2_000, 300, 0, 4),
                ],
                vec![anti_entropy(1_000, 300, 2, 0)],
            ),
            (
                AntiEntropyTombstoned,
                vec![
                    anti_entropy(1_000, 300, 0, 0),
                    anti_entropy(2_000, 300, 5, 0),
                ],
                vec![anti_entropy(1_000, 300, 0, 1)],
            ),
            (
                AntiEntropyFailedThenRepaired,
                // A repair before the failure; a repair of another runtime after it; a
                // clean pass after it.
                vec![
                    anti_entropy_of(1_000, "acme-a", 10, 2, 0, ""),
                    anti_entropy_of(2_000, "acme-a", 0, 0, 0, "no tunnel"),
                    anti_entropy_of(3_000, "acme-b", 10, 3, 0, ""),
                    anti_entropy_of(4_000, "acme-a", 10, 0, 0, ""),
                ],
                vec![
                    anti_entropy_of(1_000, "acme-a", 0, 0, 0, "no tunnel"),
                    anti_entropy_of(2_000, "acme-a", 10, 0, 1, ""),
                ],
            ),
            (
                VclusterConflict,
                vec![synced(1_000, "secrets/prod/db")],
                vec![at(
                    1_000,
                    "acme",
                    PlatformEvent::VclusterConflict {
                        vcluster: "acme".into(),
                        object: "secrets/team-x-prod/db".into(),
                        host_object: "db-x-team-x-prod-x-acme".into(),
                        owner: "prod/db-x-team".into(),
                        action: "refused".into(),
                    },
                )],
            ),
            (
                VclusterFailedThenSynced,
                // Synced before the failure; another object synced after it.
                vec![
                    synced(1_000, "secrets/prod/db"),
                    vcluster_failed(2_000, "secrets/prod/db"),
                    synced(3_000, "secrets/prod/web"),
                ],
                vec![
                    vcluster_failed(1_000, "secrets/prod/db"),
                    synced(2_000, "secrets/prod/db"),
                ],
            ),
            (
                HostedRuntimeRestartedThenReported,
                // Sent before its crash; or after a restart of a reporter that is not hosted.
                vec![
                    sent(1_000, "acme"),
                    stop(2_000, "acme"),
                    stop(2_000, "reporter-0"),
                    start(3_000, "reporter-0"),
                    sent(4_000, "reporter-0"),
                ],
                vec![
                    stop(2_000, "acme"),
                    start(3_000, "acme"),
                    sent(4_000, "acme"),
                ],
            ),
            (
                RunnerTaskRedelivered,
                vec![handout(1_000, "t000001", 1), handout(2_000, "t000002", 1)],
                vec![handout(1_000, "t000001", 1), handout(61_000, "t000001", 2)],
            ),
            (
                RunnerAckLost,
                vec![ack(1_000, "t000001", true)],
                vec![ack(1_000, "t000001", false), ack(3_000, "t000001", true)],
            ),
            (
                RunnerBuildPending,
                vec![build(1_000, "elected", "")],
                vec![build(1_000, "elected", ""), build(1_000, "pending", "")],
            ),
            (
                RunnerPolicyTerminated,
                vec![build(
                    1_000,
                    "terminated",
                    "engine inactive longer than TIME_ENGINE_INACTIVE_UNTIL_TERMINATION",
                )],
                vec![build(
                    1_000,
                    "terminated",
                    "terminated by the pipeline's policy: build b00002 of branch main started",
                )],
            ),
            (
                RunnerCronReplicaDown,
                // Fired while the other replica was up, and an error while it was down.
                vec![
                    tick(60_000, "cronus-0", "build b00001"),
                    stop(100_000, "cronus-1"),
                    tick(
                        120_000,
                        "cronus-0",
                        "error: POST /api/cron/cron-0/ticks: 502",
                    ),
                    start(150_000, "cronus-1"),
                    tick(180_000, "cronus-0", "build b00002"),
                ],
                vec![
                    stop(100_000, "cronus-1"),
                    tick(120_000, "cronus-0", "build b00002"),
                ],
            ),
            (
                RunnerDiskPressure,
                // Volumes made, reused and deleted, none marked.
                vec![
                    volume(1_000, "created"),
                    volume(2_000, "reused"),
                    volume(3_000, "deleted"),
                ],
                vec![volume(1_000, "created"), volume(60_000, "marked")],
            ),
            (
                RunnerLogBacklog,
                // Lines sent about as fast as they were written.
                vec![logs(200_000, 8 * 1024)],
                vec![logs(200_000, 64 * 1024), logs(260_000, LOG_BACKLOG_BYTES)],
            ),
            (
                RunnerProxyRefused,
                // Taken, or refused only for now (a timeout, a rate limit, an outage).
                vec![
                    proxied(10_000, 201),
                    proxied(11_000, 408),
                    proxied(12_000, 429),
                    proxied(13_000, 503),
                ],
                vec![proxied(10_000, 409)],
            ),
        ]
    }

    fn proxied(at_ms: u64, answer: u16) -> TraceEvent {
        at(
            at_ms,
            "runner",
            RunnerEvent::Proxy {
                host: "runner".into(),
                task: "t000001".into(),
                url: "http://git:80/api/commits".into(),
                answer,
                attempts: 1,
                outcome: "Success".into(),
                detail: String::new(),
            },
        )
    }

    fn logs(at_ms: u64, peak_bytes: u64) -> TraceEvent {
        at(
            at_ms,
            "apiserver",
            RunnerEvent::Logs {
                build: "b00001".into(),
                written: 3_000,
                requests: 600,
                peak_bytes,
            },
        )
    }

    fn volume(at_ms: u64, action: &str) -> TraceEvent {
        at(
            at_ms,
            "apiserver",
            RunnerEvent::Volume {
                volume: "vol-1".into(),
                claim: "pvc-dind-b00001".into(),
                action: action.into(),
            },
        )
    }

    fn tick(at_ms: u64, host: &str, outcome: &str) -> TraceEvent {
        at(
            at_ms,
            host,
            RunnerEvent::Tick {
                host: host.into(),
                trigger: "cron-0".into(),
                scheduled_ms: at_ms,
                outcome: outcome.into(),
            },
        )
    }

    fn handout(at_ms: u64, task: &str, delivery: u32) -> TraceEvent {
        at(
            at_ms,
            "platform",
            RunnerEvent::Handout {
                agent: "runner".into(),
                task: task.into(),
                kind: "CreatePod".into(),
                object: "engine-b00001".into(),
                delivery,
            },
        )
    }

    fn build(at_ms: u64, status: &str, reason: &str) -> TraceEvent {
        at(
            at_ms,
            "platform",
            RunnerEvent::Build {
                build: "b00001".into(),
                status: status.into(),
                reason: reason.into(),
            },
        )
    }

    fn ack(at_ms: u64, task: &str, delivered: bool) -> TraceEvent {
        at(
            at_ms,
            "runner",
            RunnerEvent::Ack {
                host: "runner".into(),
                task: task.into(),
                delivered,
                attempt: 1,
                detail: if delivered {
                    String::new()
                } else {
                    "502 Bad Gateway".into()
                },
            },
        )
    }

    fn sent(at_ms: u64, replica: &str) -> TraceEvent {
        at(
            at_ms,
            replica,
            ReporterEvent::Queue {
                replica: replica.into(),
                depth: 0,
                resync: 0,
                dropped: 0,
                parked: 0,
                sent_app: 3,
                sent_resource: 0,
                rate_limited: 0,
            },
        )
    }

    fn synced(at_ms: u64, object: &str) -> TraceEvent {
        at(
            at_ms,
            "acme",
            PlatformEvent::VclusterSynced {
                vcluster: "acme".into(),
                object: object.into(),
                host_object: "copy".into(),
                action: "created".into(),
            },
        )
    }

    fn vcluster_failed(at_ms: u64, object: &str) -> TraceEvent {
        at(
            at_ms,
            "acme",
            PlatformEvent::VclusterFailed {
                vcluster: "acme".into(),
                object: object.into(),
                error: "connection refused".into(),
            },
        )
    }

    fn anti_entropy(at_ms: u64, listed: u64, updated: u64, tombstoned: u64) -> TraceEvent {
        anti_entropy_of(at_ms, "acme-runtime", listed, updated, tombstoned, "")
    }

    fn anti_entropy_of(
        at_ms: u64,
        runtime: &str,
        listed: u64,
        updated: u64,
        tombstoned: u64,
        error: &str,
    ) -> TraceEvent {
        at(
            at_ms,
            "gateway",
            PlatformEvent::AntiEntropy {
                runtime: runtime.into(),
                listed,
                updated,
                tombstoned,
                error: error.into(),
            },
        )
    }

    fn fault(at_ms: u64, fault: Fault) -> TraceEvent {
        harness(at_ms, HarnessEvent::Fault(fault))
    }

    fn registered(
        at_ms: u64,
        runtime: &str,
        status: u16,
        token_sha256: &str,
        rotated: bool,
    ) -> TraceEvent {
        at(
            at_ms,
            "mallory",
            WorldEvent::TenantRegistered {
                account: "t01".into(),
                runtime: runtime.into(),
                status,
                token_sha256: token_sha256.into(),
                rotated,
            },
        )
    }

    fn probe(at_ms: u64, kind: &str, status: u16) -> TraceEvent {
        at(
            at_ms,
            "mallory",
            WorldEvent::TenantProbe {
                kind: kind.into(),
                account: "t01".into(),
                actor: "user:admin-t01".into(),
                victim: "t02".into(),
                status,
                leak: String::new(),
            },
        )
    }

    fn recovered(at_ms: u64, lost: u64, redelivered: u64) -> TraceEvent {
        at(
            at_ms,
            "platform",
            PlatformEvent::BusRecovered {
                lost,
                lost_acknowledged: lost,
                redelivered,
                kept: 0,
            },
        )
    }

    fn health(at_ms: u64, health: &str) -> TraceEvent {
        at(
            at_ms,
            "gateway",
            PlatformEvent::RuntimeHealth {
                runtime: "acme-prod".into(),
                health: health.into(),
                reason: String::new(),
            },
        )
    }

    fn deployed(at_ms: u64, app: &str) -> TraceEvent {
        at(
            at_ms,
            "workload",
            WorldEvent::AppDeployed {
                app: app.into(),
                project: "team-a".into(),
                parent: "team-a".into(),
                repo: "r".into(),
                server: "s".into(),
                namespace: "n".into(),
                revision: "abc".into(),
                deployed_at_ms: at_ms,
            },
        )
    }

    fn refused(at_ms: u64, app: &str) -> TraceEvent {
        at(
            at_ms,
            "workload",
            WorldEvent::AppRefused {
                app: app.into(),
                project: "team-a".into(),
                condition: "InvalidSpecError".into(),
                message: "m".into(),
            },
        )
    }

    fn reconcile_error(at_ms: u64, error: &str) -> TraceEvent {
        at(
            at_ms,
            "argocd",
            WorldEvent::ReconcileError {
                app: "team-a".into(),
                error: error.into(),
            },
        )
    }

    fn source(at_ms: u64, spec: serde_json::Value) -> TraceEvent {
        at(
            at_ms,
            "workload",
            WorldEvent::SourceChanged {
                source: "team-a".into(),
                spec,
            },
        )
    }

    fn project(at_ms: u64, spec: serde_json::Value) -> TraceEvent {
        at(
            at_ms,
            "workload",
            WorldEvent::ProjectSeen {
                project: "team-a".into(),
                spec,
            },
        )
    }

    fn leader(at_ms: u64, host: &str) -> TraceEvent {
        at(at_ms, host, OperatorEvent::Leader { host: host.into() })
    }

    fn step(at_ms: u64, outcome: &str) -> TraceEvent {
        at(
            at_ms,
            "operator-0",
            OperatorEvent::Step {
                host: "operator-0".into(),
                task: "argocd/shop-1-staging".into(),
                step: 1,
                kind: "promoteAppWithCommit".into(),
                outcome: outcome.into(),
                retries: 1,
                detail: String::new(),
            },
        )
    }

    fn commit(at_ms: u64, deduplicated: bool) -> TraceEvent {
        at(
            at_ms,
            "operator-0",
            OperatorEvent::Commit {
                host: "operator-0".into(),
                task: "argocd/shop-1-staging".into(),
                step: 1,
                repo: "r".into(),
                path: "envs/staging/values.json".into(),
                branch: "main".into(),
                sha: "abc".into(),
                deduplicated,
            },
        )
    }

    fn release_end(at_ms: u64, phase: &str) -> TraceEvent {
        at(
            at_ms,
            "platform",
            PromotionEvent::ReleaseEnd {
                release: "shop-1".into(),
                phase: phase.into(),
                lead_ms: 1,
                why: String::new(),
            },
        )
    }

    fn served(at_ms: u64, cached: bool) -> TraceEvent {
        at(
            at_ms,
            "sources",
            SourcesEvent::Served {
                what: "manifests".into(),
                app: "argocd/a".into(),
                revision: "abc".into(),
                cached,
            },
        )
    }

    fn acr(at_ms: u64, event: AcrEvent) -> TraceEvent {
        at(at_ms, "acr", event)
    }

    fn analysis(at_ms: u64, phase: &str) -> TraceEvent {
        at(
            at_ms,
            "rollouts",
            WorldEvent::AnalysisDone {
                run: "shop/web-abc-2-1".into(),
                phase: phase.into(),
            },
        )
    }

    fn lost(at_ms: u64, why: LossReason) -> TraceEvent {
        at(
            at_ms,
            "resources",
            ResourceReporterEvent::Lost {
                kind: orrery_system::runtime::resource_reporter::Kind::Rollout,
                object: "shop/web".into(),
                rv: 7,
                status: 503,
                why,
            },
        )
    }

    fn resync(at_ms: u64, queued: u64, deleted: u64) -> TraceEvent {
        at(
            at_ms,
            "resources",
            ResourceReporterEvent::Resync { queued, deleted },
        )
    }

    fn released(at_ms: u64, held: bool) -> TraceEvent {
        at(
            at_ms,
            "resources",
            ResourceReporterEvent::Released {
                object: "workflows/wf-00001".into(),
                held,
                attempts: 1,
            },
        )
    }

    fn token_loaded(at_ms: u64, requeued: u64) -> TraceEvent {
        at(
            at_ms,
            "reporter-0",
            ReporterEvent::TokenLoaded {
                replica: "reporter-0".into(),
                requeued,
            },
        )
    }

    fn update(at_ms: u64, app: &str, applied: Projection) -> TraceEvent {
        at(
            at_ms,
            "platform",
            PlatformEvent::Event {
                app: app.into(),
                rv: "7".into(),
                deleted: false,
                applied,
                seq: at_ms,
            },
        )
    }

    fn child_created(at_ms: u64, child: &str) -> TraceEvent {
        at(
            at_ms,
            "argocd",
            WorldEvent::ChildCreated {
                parent: "app-00000".into(),
                child: format!("argocd/{child}"),
            },
        )
    }

    #[test]
    fn every_condition_is_false_on_a_near_miss_and_true_where_reached() {
        let world = world();
        let cases = cases();
        assert_eq!(
            cases.iter().map(|(c, _, _)| *c).collect::<Vec<_>>(),
            Condition::ALL,
            "one case per condition"
        );
        for (condition, miss, hit) in cases {
            assert!(
                !condition.reached(&world, &miss),
                "{condition} on its near miss"
            );
            assert!(condition.reached(&world, &hit), "{condition} where reached");
        }
    }

    #[test]
    fn names_parse_back_and_unknown_names_list_the_known_ones() {
        for condition in Condition::ALL {
            assert_eq!(condition.name().parse::<Condition>().unwrap(), *condition);
        }
        let error = "queue_overflow"
            .parse::<Condition>()
            .unwrap_err()
            .to_string();
        assert!(error.contains("\"queue_overflow\"") && error.contains("queue_overflowed"));
    }

    #[test]
    fn fault_points_are_counted_per_point() {
        let fired = |ms, point| at(ms, "prod", FaultPointEvent::Fired { point });
        let counts = fault_points(&[
            fired(1, Point::TunnelFrameSplit),
            fired(2, Point::TunnelFrameSplit),
            fired(3, Point::CacheWriteDropped),
        ]);
        assert_eq!(counts[&Point::TunnelFrameSplit], 2);
        assert_eq!(counts[&Point::CacheWriteDropped], 1);
        assert_eq!(counts.len(), 2);
    }
}
