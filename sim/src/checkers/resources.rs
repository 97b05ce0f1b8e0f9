//! The resource stream's invariants (issue 13):
//!
//! - `platform_shows_rollouts` (safety): after the calm phase the platform shows every
//!   Rollout with the API server's phase and step, and each of its ReplicaSets with the
//!   API server's `spec.replicas` (the canary weights); a ReplicaSet that is gone shows no
//!   pods; a Rollout that is gone is not shown as live. The calm phase drains any backlog,
//!   so a difference left then is a lost state.
//! - `platform_never_older` (safety): the platform never moves an object to an older
//!   resourceVersion than one it showed (the read model's ordering rule, checked in place).
//! - `workflow_phases_reported` (safety): every Workflow that finished (Succeeded, Failed,
//!   Error) is shown by the platform with that phase at the end — deleted by its TTL or not.

use std::collections::BTreeMap;

use serde_json::json;

use orrery_system::observe::{PlatformEvent, Projection, WorldEvent};
use orrery_system::platform::events::cluster::{RolloutView, WorkflowView};

use super::{Checker, Class, FinalState, Violation};
use crate::trace::TraceEvent;

/// One Rollout as the API server holds it at the end.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RolloutTruth {
    /// `namespace/name`.
    pub key: String,
    /// `status.phase`.
    pub phase: String,
    /// `status.currentStepIndex`.
    pub step: Option<i64>,
    /// Its ReplicaSets' `spec.replicas` by pod-template hash.
    pub replica_sets: BTreeMap<String, i64>,
}

/// `runtime/namespace/name` → `namespace/name` (the world has one runtime).
fn without_runtime<V: Clone>(views: &BTreeMap<String, V>) -> BTreeMap<String, V> {
    views
        .iter()
        .filter_map(|(k, v)| Some((k.split_once('/')?.1.to_string(), v.clone())))
        .collect()
}

/// Rollouts the platform shows differently from the API server, each with what differs.
pub fn stale_rollouts(
    truth: &[RolloutTruth],
    reported: &BTreeMap<String, RolloutView>,
) -> Vec<(String, String)> {
    let reported = without_runtime(reported);
    let mut stale = Vec::new();
    for rollout in truth {
        let Some(view) = reported.get(&rollout.key).filter(|v| !v.deleted) else {
            stale.push((rollout.key.clone(), "not shown".to_string()));
            continue;
        };
        if view.fields.phase != rollout.phase || view.fields.step != rollout.step {
            stale.push((
                rollout.key.clone(),
                format!(
                    "phase/step {:?}/{:?}, platform shows {:?}/{:?}",
                    rollout.phase, rollout.step, view.fields.phase, view.fields.step
                ),
            ));
            continue;
        }
        let shown = |hash: &str| view.replica_sets.get(hash).map(|rs| rs.replicas);
        let wrong_rs = rollout
            .replica_sets
            .iter()
            .find(|(hash, replicas)| shown(hash) != Some(**replicas))
            .map(|(hash, replicas)| {
                let shown = shown(hash).map_or("none".to_string(), |r| r.to_string());
                format!("ReplicaSet {hash} has {replicas} replicas, platform shows {shown}")
            })
            .or_else(|| {
                view.replica_sets
                    .iter()
                    .find(|(hash, rs)| {
                        !rollout.replica_sets.contains_key(*hash) && rs.replicas != 0
                    })
                    .map(|(hash, rs)| {
                        format!(
                            "ReplicaSet {hash} is gone, platform shows {} replicas",
                            rs.replicas
                        )
                    })
            });
        if let Some(why) = wrong_rs {
            stale.push((rollout.key.clone(), why));
        }
    }
    let live: std::collections::BTreeSet<&str> = truth.iter().map(|r| r.key.as_str()).collect();
    stale.extend(
        reported
            .iter()
            .filter(|(k, v)| !v.deleted && !live.contains(k.as_str()))
            .map(|(k, _)| (k.clone(), "gone, platform shows it live".to_string())),
    );
    stale.sort();
    stale
}

/// `platform_shows_rollouts`.
pub struct PlatformShowsRollouts;

impl Checker for PlatformShowsRollouts {
    fn name(&self) -> &'static str {
        "platform_shows_rollouts"
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let stale = stale_rollouts(&state.rollouts, &state.reported_rollouts);
        let (key, why) = stale.first()?.clone();
        Some(Violation {
            invariant: self.name().into(),
            class: Class::Safety,
            at_ms: state.end_ms,
            host: "platform".into(),
            details: json!({
                "rollout": key,
                "why": why,
                "stale_rollouts": stale.len(),
                "rollouts": state.rollouts.len(),
            }),
        })
    }
}

/// `platform_never_older`: the last version the platform applied per object.
#[derive(Default)]
pub struct PlatformNeverOlder {
    applied: BTreeMap<(String, String), u64>,
}

impl Checker for PlatformNeverOlder {
    fn name(&self) -> &'static str {
        "platform_never_older"
    }

    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation> {
        let Some(PlatformEvent::ClusterEvent {
            kind,
            object,
            rv,
            deleted: false,
            applied: Projection::Updated,
            ..
        }) = event.platform()
        else {
            return None;
        };
        let rv: u64 = rv.parse().unwrap_or(0);
        let last = self
            .applied
            .entry((kind.clone(), object.clone()))
            .or_default();
        if rv < *last {
            return Some(Violation {
                invariant: "platform_never_older".into(),
                class: Class::Safety,
                at_ms: event.at_ms,
                host: event.host.clone(),
                details: json!({"kind": kind, "object": object, "shown_rv": *last, "then_rv": rv}),
            });
        }
        *last = rv;
        None
    }

    fn at_end(&mut self, _state: &FinalState) -> Option<Violation> {
        None
    }
}

/// `workflow_phases_reported`: the final phase of each finished Workflow.
#[derive(Default)]
pub struct WorkflowPhasesReported {
    finished: BTreeMap<String, String>,
}

impl Checker for WorkflowPhasesReported {
    fn name(&self) -> &'static str {
        "workflow_phases_reported"
    }

    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation> {
        if let Some(WorldEvent::WorkflowPhase {
            workflow, phase, ..
        }) = event.world()
        {
            if matches!(phase.as_str(), "Succeeded" | "Failed" | "Error") {
                self.finished.insert(workflow.clone(), phase.clone());
            }
        }
        None
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let reported: BTreeMap<String, WorkflowView> = without_runtime(&state.reported_workflows);
        let missing: Vec<(&String, &String, String)> = self
            .finished
            .iter()
            .filter_map(|(workflow, phase)| {
                let shown = reported.get(workflow).map(|v| v.fields.phase.clone());
                (shown.as_deref() != Some(phase.as_str()))
                    .then(|| (workflow, phase, shown.unwrap_or_else(|| "nothing".into())))
            })
            .collect();
        let (workflow, phase, shown) = missing.first()?;
        Some(Violation {
            invariant: self.name().into(),
            class: Class::Safety,
            at_ms: state.end_ms,
            host: "platform".into(),
            details: json!({
                "workflow": workflow,
                "phase": phase,
                "platform_shows": shown,
                "unreported": missing.len(),
                "finished": self.finished.len(),
            }),
        })
    }
}
