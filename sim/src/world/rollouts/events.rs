//! The Kubernetes Events the Rollouts controller records about a Rollout, as argo-rollouts
//! v1.8.3 records them (read from its source, `rollout/sync.go`, `rollout/canary.go`,
//! `utils/conditions/conditions.go`, and the order its end-to-end tests expect,
//! `test/e2e/functional_test.go`; no real Rollouts controller runs in the conformance tier to
//! compare with). From one reconcile's plan:
//!
//! - `RolloutUpdated` (`Rollout updated to revision N`) and `NewReplicaSetCreated` (`Created
//!   ReplicaSet <name> (revision N)`) when a new template's ReplicaSet is made;
//! - `ScalingReplicaSet` (`Scaled up|down ReplicaSet <name> (revision N) from A to B`) per
//!   ReplicaSet whose `spec.replicas` changes, a new one counting from 0;
//! - `RolloutStepCompleted` (`Rollout step i/n completed (<step>)`) when a canary step ends;
//! - `RolloutAborted` (Warning, the Progressing condition's message) when the rollout aborts;
//! - `RolloutCompleted` (`Rollout completed update to revision N (<hash>): <why>`) when the
//!   current ReplicaSet becomes the stable;
//!
//! all recorded before the status write, and after it `RolloutPaused` (`Rollout is paused
//! (<reason>)`) or `RolloutResumed` (`Rollout is resumed`) when the pause conditions appear or
//! go (not by an abort), as `sendStateChangeEvents` does. Each is a core/v1 Event made as
//! client-go's recorder makes one: `<rollout>.<hex nanoseconds>`, `count: 1`, source and
//! reporting controller `rollouts-controller`.
//!
//! *Not modelled*: `RolloutAddedToInformer` (one per Rollout whenever the controller starts),
//! `RolloutNotCompleted` (the `Completed` condition is not kept), the AnalysisRun events (on
//! the Rollout and on the AnalysisRun), `SwitchService`, the rollback reasons of
//! `RolloutCompleted` (`Rollback within window`, `Rollback to '<rs>' within scaleDownDelay`),
//! and client-go's correlator (repeats patched with a higher `count`, similar events folded,
//! bursts dropped).

use serde_json::{json, Value};

use super::model::{ReplicaSet, Rollout, Step};
use super::reconcile::Plan;

/// `source.component` and `reportingComponent` of the controller's events.
pub const COMPONENT: &str = "rollouts-controller";

/// One event to record: (reason, type, message).
pub type Recorded = (&'static str, &'static str, String);

/// `CanaryStepString`: how a step is named in `RolloutStepCompleted`.
pub fn step_text(step: &Step) -> String {
    if let Some(weight) = step.set_weight {
        return format!("setWeight: {weight}");
    }
    if let Some(pause) = &step.pause {
        // An IntOrString prints as its number or its text.
        return match &pause.duration {
            Some(Value::String(text)) => format!("pause: {text}"),
            Some(Value::Number(n)) => format!("pause: {n}"),
            _ => "pause".to_string(),
        };
    }
    if step.analysis.is_some() {
        return "analysis".to_string();
    }
    "invalid".to_string()
}

/// What one reconcile of `rollout` (owning `owned`) records when its `plan` is carried out
/// for the template at `revision`: the events before the status write, and those after it.
pub fn recorded(
    rollout: &Rollout,
    owned: &[ReplicaSet],
    plan: &Plan,
    revision: u64,
) -> (Vec<Recorded>, Vec<Recorded>) {
    let (old, new) = (&rollout.status, &plan.status);
    let mut before = Vec::new();
    if let Some(created) = &plan.create {
        let rev = created.revision;
        before.push((
            "RolloutUpdated",
            "Normal",
            format!("Rollout updated to revision {rev}"),
        ));
        before.push((
            "NewReplicaSetCreated",
            "Normal",
            format!("Created ReplicaSet {} (revision {rev})", created.name),
        ));
        if created.replicas > 0 {
            before.push(scaled(&created.name, rev, 0, created.replicas));
        }
    }
    for (name, replicas) in &plan.scale {
        if let Some(rs) = owned.iter().find(|rs| &rs.name == name) {
            if rs.replicas != *replicas {
                before.push(scaled(name, rs.revision, rs.replicas, *replicas));
            }
        }
    }
    let steps = rollout
        .spec
        .strategy
        .canary
        .as_ref()
        .map(|c| c.steps.as_slice())
        .unwrap_or_default();
    let promoted = new.stable_rs != old.stable_rs;
    if let (Some(was), Some(now)) = (old.current_step_index, new.current_step_index) {
        let same_template = old.current_pod_hash == new.current_pod_hash;
        if now == was + 1 && same_template && !promoted {
            if let Some(step) = usize::try_from(was).ok().and_then(|i| steps.get(i)) {
                before.push((
                    "RolloutStepCompleted",
                    "Normal",
                    format!(
                        "Rollout step {now}/{} completed ({})",
                        steps.len(),
                        step_text(step)
                    ),
                ));
            }
        }
    }
    // `SetRolloutCondition` reports a change of status, reason or message.
    if let Some(aborted) = new
        .condition("Progressing")
        .filter(|c| c.reason == "RolloutAborted")
    {
        let same = old.condition("Progressing").is_some_and(|c| {
            (&c.status, &c.reason, &c.message)
                == (&aborted.status, &aborted.reason, &aborted.message)
        });
        if !same {
            before.push(("RolloutAborted", "Warning", aborted.message.clone()));
        }
    }
    let hash = new.current_pod_hash.clone().unwrap_or_default();
    if promoted && new.stable_rs.as_deref() == Some(hash.as_str()) {
        let stable_gone = old
            .stable_rs
            .as_ref()
            .is_some_and(|stable| !owned.iter().any(|rs| &rs.hash == stable));
        let why = if old.stable_rs.is_none() || stable_gone {
            "Initial deploy".to_string()
        } else if old.promote_full {
            "Full promotion requested".to_string()
        } else if rollout.spec.strategy.blue_green.is_some() {
            "Completed blue-green update".to_string()
        } else {
            format!("Completed all {} canary steps", steps.len())
        };
        before.push((
            "RolloutCompleted",
            "Normal",
            format!("Rollout completed update to revision {revision} ({hash}): {why}"),
        ));
    }
    let mut after = Vec::new();
    match (old.pause_conditions.first(), new.pause_conditions.first()) {
        (None, Some(pause)) => after.push((
            "RolloutPaused",
            "Normal",
            format!("Rollout is paused ({})", pause.reason),
        )),
        (Some(_), None) if new.aborted_at.is_none() => {
            after.push(("RolloutResumed", "Normal", "Rollout is resumed".to_string()))
        }
        _ => {}
    }
    (before, after)
}

/// `ScalingReplicaSet` of `name` from `from` to `to` replicas.
fn scaled(name: &str, revision: u64, from: i32, to: i32) -> Recorded {
    let way = if to > from { "up" } else { "down" };
    (
        "ScalingReplicaSet",
        "Normal",
        format!("Scaled {way} ReplicaSet {name} (revision {revision}) from {from} to {to}"),
    )
}

/// The Event object for `what` about `rollout` (at `resource_version`), made at `nanos`
/// (Unix nanoseconds, distinct per event) and `timestamp` (RFC 3339, seconds).
pub fn event(
    rollout: &Rollout,
    resource_version: &str,
    what: &Recorded,
    nanos: u64,
    timestamp: &str,
) -> Value {
    let (reason, kind, message) = what;
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": format!("{}.{nanos:x}", rollout.name), "namespace": rollout.namespace},
        "involvedObject": {
            "kind": "Rollout",
            "namespace": rollout.namespace,
            "name": rollout.name,
            "uid": rollout.uid,
            "apiVersion": "argoproj.io/v1alpha1",
            "resourceVersion": resource_version,
        },
        "reason": reason,
        "message": message,
        "source": {"component": COMPONENT},
        "firstTimestamp": timestamp,
        "lastTimestamp": timestamp,
        "count": 1,
        "type": kind,
        "eventTime": null,
        "reportingComponent": COMPONENT,
        "reportingInstance": "",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::rollouts::model::Pause;

    #[test]
    fn steps_are_named_as_canary_step_string_names_them() {
        let pause = |duration: Option<Value>| Step {
            pause: Some(Pause { duration }),
            ..Step::default()
        };
        assert_eq!(step_text(&pause(None)), "pause");
        assert_eq!(step_text(&pause(Some(json!("3s")))), "pause: 3s");
        assert_eq!(step_text(&pause(Some(json!(30)))), "pause: 30");
        let weight = Step {
            set_weight: Some(25),
            ..Step::default()
        };
        assert_eq!(step_text(&weight), "setWeight: 25");
        let analysis = Step {
            analysis: Some(json!({"templates": []})),
            ..Step::default()
        };
        assert_eq!(step_text(&analysis), "analysis");
    }
}
