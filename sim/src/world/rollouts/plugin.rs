//! `kubectl argo rollouts promote | abort | retry`, as the plugin writes them (argo-rollouts
//! v1.8 `pkg/kubectl-argo-rollouts/cmd/{promote,abort,retry}`): JSON merge patches to the
//! Rollout's `/status` (and `spec.paused` on the object for a manual pause). Used by the
//! workload and by tests, so operators' actions reach the controller the real way.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{json, Value};

use super::controller::rollout_of;
use super::model::Rollout;

/// Why a plugin command failed.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The API server refused or could not be reached.
    #[error("rollout {name}: {source}")]
    Kube {
        /// The Rollout.
        name: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
}

async fn patch_status(
    api: &Api<DynamicObject>,
    name: &str,
    status: Value,
) -> Result<(), PluginError> {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .map(|_| ())
    .map_err(|source| PluginError::Kube {
        name: name.to_string(),
        source,
    })
}

/// `abort`: `{"status":{"abort":true}}`.
pub async fn abort(api: &Api<DynamicObject>, name: &str) -> Result<(), PluginError> {
    patch_status(api, name, json!({"abort": true})).await
}

/// `retry rollout`: `{"status":{"abort":false}}`.
pub async fn retry(api: &Api<DynamicObject>, name: &str) -> Result<(), PluginError> {
    patch_status(api, name, json!({"abort": false})).await
}

/// `promote` (`full`: `promote --full`), with the patches upstream's `getPatches` picks
/// from the Rollout as read now.
pub async fn promote(api: &Api<DynamicObject>, name: &str, full: bool) -> Result<(), PluginError> {
    let object = api.get(name).await.map_err(|source| PluginError::Kube {
        name: name.to_string(),
        source,
    })?;
    let rollout = rollout_of(&object);
    if rollout.spec.paused {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"paused": false}})),
        )
        .await
        .map_err(|source| PluginError::Kube {
            name: name.to_string(),
            source,
        })?;
    }
    let status = status_patch(&rollout, full);
    match status {
        Some(status) => patch_status(api, name, status).await,
        None => Ok(()),
    }
}

/// The `/status` merge patch `promote` (`full`: `promote --full`) sends for `rollout` as it
/// is now (upstream's `getPatches`), or `None` when it sends none.
pub fn status_patch(rollout: &Rollout, full: bool) -> Option<Value> {
    let st = &rollout.status;
    match &rollout.spec.strategy.canary {
        // `--full`: only while an update is under way.
        _ if full => (st.current_pod_hash != st.stable_rs).then(|| json!({"promoteFull": true})),
        // A canary without steps has nothing to step past.
        Some(canary) if canary.steps.is_empty() => None,
        Some(canary) => {
            let next = st
                .current_step_index
                .unwrap_or(0)
                .saturating_add(1)
                .min(canary.steps.len() as i32);
            let inconclusive = st
                .canary
                .current_step_analysis_run_status
                .as_ref()
                .is_some_and(|r| r.status == "Inconclusive");
            if inconclusive && st.controller_pause && !st.pause_conditions.is_empty() {
                Some(
                    json!({"pauseConditions": null, "controllerPause": false, "currentStepIndex": next}),
                )
            } else if !st.pause_conditions.is_empty() {
                Some(json!({"pauseConditions": null}))
            } else {
                Some(json!({"pauseConditions": null, "currentStepIndex": next}))
            }
        }
        None => (!st.pause_conditions.is_empty()).then(|| json!({"pauseConditions": null})),
    }
}
