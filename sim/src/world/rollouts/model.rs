//! Typed views of the objects the Rollouts controller reads and writes — `Rollout`,
//! its `ReplicaSet`s and `AnalysisRun`s — with the JSON names of argo-rollouts v1.8
//! (`pkg/apis/rollouts/v1alpha1/types.go`), the pod-template hash, and the merge patch
//! between two statuses (the controller's two-way merge patch to `/status`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Label carrying a ReplicaSet's (and an AnalysisRun's) pod-template hash.
pub const HASH_LABEL: &str = "rollouts-pod-template-hash";
/// Annotation with a ReplicaSet's revision (max of the older ones + 1).
pub const REVISION_ANNOTATION: &str = "rollout.argoproj.io/revision";
/// Annotation with the Rollout's replica count when the ReplicaSet was scaled.
pub const DESIRED_ANNOTATION: &str = "rollout.argoproj.io/desired-replicas";
/// Annotation (no prefix, as upstream) with the time an old blue-green ReplicaSet is
/// scaled down.
pub const SCALE_DOWN_ANNOTATION: &str = "scale-down-deadline";

/// A Rollout as the controller reads it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rollout {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.uid` (owner references point at it).
    pub uid: String,
    /// `metadata.generation` (`observedGeneration` echoes it, as a string).
    pub generation: i64,
    /// `spec`.
    pub spec: RolloutSpec,
    /// `status` (defaults when absent).
    pub status: RolloutStatus,
}

/// `spec` of a Rollout (the fields the stand-in acts on).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// Pods wanted (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// `matchLabels` of the pods.
    #[serde(default)]
    pub selector: Selector,
    /// The pod template; its hash names the ReplicaSet.
    #[serde(default)]
    pub template: Value,
    /// Canary or blue-green.
    #[serde(default)]
    pub strategy: Strategy,
    /// `kubectl argo rollouts pause` (manual pause).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Seconds without progress before the rollout is Degraded (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline_seconds: Option<i64>,
}

impl RolloutSpec {
    /// `spec.replicas`, default 1 (kept within 0..=1,000,000 so the replica arithmetic
    /// cannot overflow on absurd input).
    pub fn replicas(&self) -> i32 {
        self.replicas.unwrap_or(1).clamp(0, 1_000_000)
    }
}

/// A label selector (only `matchLabels` is used).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Selector {
    /// Labels the pods carry.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

impl Selector {
    /// `k=v,k2=v2` as `metav1.FormatLabelSelector` prints matchLabels (sorted).
    pub fn format(&self) -> String {
        self.match_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// `spec.strategy`: exactly one of the two.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Strategy {
    /// Canary with steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<Canary>,
    /// Blue-green with an active and a preview service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blue_green: Option<BlueGreen>,
}

/// `spec.strategy.canary` without traffic routing (a basic canary: weights are replica
/// counts).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Canary {
    /// The steps, in order.
    #[serde(default)]
    pub steps: Vec<Step>,
    /// Extra pods allowed during the update: a count or a percentage (default `25%`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<Value>,
    /// Pods that may be unavailable: a count or a percentage (default `25%`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<Value>,
}

/// One canary step: exactly one field is set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// Percentage of pods on the new version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_weight: Option<i32>,
    /// Wait for a duration, or for `promote` when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<Pause>,
    /// Run an AnalysisRun and go on only if it succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<Value>,
}

/// `pause: {duration}`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Pause {
    /// Seconds as a number, or a string such as `30s`, `5m`, `1h` (no unit: seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<Value>,
}

impl Pause {
    /// The duration in seconds, if one is set and readable.
    pub fn seconds(&self) -> Option<i64> {
        match self.duration.as_ref()? {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => {
                let (number, unit) = s
                    .find(|c: char| !c.is_ascii_digit())
                    .map_or((s.as_str(), ""), |at| s.split_at(at));
                let n: i64 = number.parse().ok()?;
                match unit {
                    "" | "s" => Some(n),
                    "m" => n.checked_mul(60),
                    "h" => n.checked_mul(3600),
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

/// `spec.strategy.blueGreen`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlueGreen {
    /// Service that receives production traffic.
    #[serde(default)]
    pub active_service: String,
    /// Service that shows the new version before promotion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_service: Option<String>,
    /// Promote without a pause when the preview is ready (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_promotion_enabled: Option<bool>,
    /// Pause this long before promoting (0: no pause).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_promotion_seconds: Option<i64>,
    /// Seconds before the old ReplicaSet is scaled down (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_delay_seconds: Option<i64>,
    /// Analysis that must succeed before the active service switches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_promotion_analysis: Option<Value>,
    /// Analysis that must succeed after it switched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_promotion_analysis: Option<Value>,
}

/// `status.pauseConditions[]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseCondition {
    /// `CanaryPauseStep`, `BlueGreenPause` or `InconclusiveAnalysisRun`.
    pub reason: String,
    /// When the pause began (RFC 3339).
    pub start_time: String,
}

/// `{name, status, message}` of the AnalysisRun a step or promotion waits for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunStatus {
    /// The AnalysisRun's name.
    pub name: String,
    /// Its phase.
    pub status: String,
    /// Its message, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `status.canary`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CanaryStatus {
    /// The current step's AnalysisRun.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step_analysis_run_status: Option<RunStatus>,
}

/// `status.blueGreen`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlueGreenStatus {
    /// Pod-template hash the active service selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_selector: Option<String>,
    /// Pod-template hash the preview service selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_selector: Option<String>,
    /// The pre-promotion AnalysisRun.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_promotion_analysis_run_status: Option<RunStatus>,
    /// The post-promotion AnalysisRun.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_promotion_analysis_run_status: Option<RunStatus>,
}

/// `status.conditions[]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Progressing`, `Available`, `Healthy`, `Completed`, `Paused`, …
    #[serde(rename = "type")]
    pub kind: String,
    /// `True` or `False`.
    pub status: String,
    /// Machine-readable reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// Last time the condition was written with a change of reason or message.
    pub last_update_time: String,
    /// Last time `status` flipped.
    pub last_transition_time: String,
}

/// `status` of a Rollout.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// `Healthy`, `Progressing`, `Paused` or `Degraded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Why the phase (e.g. `CanaryPauseStep`, `RolloutAborted: …`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `metadata.generation` this status reflects — a string upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<String>,
    /// Hash of the current pod template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_pod_hash: Option<String>,
    /// Hash of the stable ReplicaSet.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "stableRS")]
    pub stable_rs: Option<String>,
    /// Index of the current canary step (len(steps) when all are done).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step_index: Option<i32>,
    /// Hash of the steps (a change restarts them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step_hash: Option<String>,
    /// Why the rollout is paused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pause_conditions: Vec<PauseCondition>,
    /// The controller paused it (a step or promotion pause).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub controller_pause: bool,
    /// Aborted (by `abort` or a failed analysis).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub abort: bool,
    /// When it was aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted_at: Option<String>,
    /// `promote --full`: skip the remaining steps.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub promote_full: bool,
    /// Pods of every ReplicaSet.
    #[serde(default)]
    pub replicas: i32,
    /// Pods of the current ReplicaSet.
    #[serde(default)]
    pub updated_replicas: i32,
    /// Ready pods.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Available pods.
    #[serde(default)]
    pub available_replicas: i32,
    /// What the scale subresource reports (uppercase key upstream).
    #[serde(default, rename = "HPAReplicas")]
    pub hpa_replicas: i32,
    /// The pods' selector as a string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Canary details.
    #[serde(default)]
    pub canary: CanaryStatus,
    /// Blue-green details.
    #[serde(default)]
    pub blue_green: BlueGreenStatus,
    /// Conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl RolloutStatus {
    /// The condition of `kind`, if present.
    pub fn condition(&self, kind: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.kind == kind)
    }
}

/// A ReplicaSet the controller owns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicaSet {
    /// `metadata.name` (`<rollout>-<hash>`).
    pub name: String,
    /// Its pod-template hash label.
    pub hash: String,
    /// Its revision annotation.
    pub revision: u64,
    /// `spec.replicas`.
    pub replicas: i32,
    /// `status.replicas`.
    pub status_replicas: i32,
    /// `status.readyReplicas`.
    pub ready: i32,
    /// `status.availableReplicas`.
    pub available: i32,
    /// The `scale-down-deadline` annotation, if set.
    pub scale_down_deadline: Option<String>,
}

/// An AnalysisRun the controller owns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnalysisRun {
    /// `metadata.name`.
    pub name: String,
    /// `status.phase` (`Pending` when absent).
    pub phase: String,
    /// `status.message`.
    pub message: Option<String>,
    /// `spec.terminate`.
    pub terminate: bool,
}

impl AnalysisRun {
    /// Whether the run ended (Successful, Failed, Error, Inconclusive).
    pub fn completed(&self) -> bool {
        matches!(
            self.phase.as_str(),
            "Successful" | "Failed" | "Error" | "Inconclusive"
        )
    }
}

/// The pod-template hash as upstream computes it (`utils/hash/hash.go`): FNV-32a over
/// the template's JSON, plus the collision count as 8 bytes (little-endian u32, then
/// zeros), printed in decimal and made safe with `rand.SafeEncodeString`. The JSON here is
/// the template as stored (upstream marshals the Go struct, so key order can differ: the
/// hash is the same function, not always the same value a real controller would print).
pub fn pod_template_hash(template: &Value, collision_count: Option<i32>) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    let mut write = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u32::from(*b);
            hash = hash.wrapping_mul(0x0100_0193);
        }
    };
    write(template.to_string().as_bytes());
    if let Some(count) = collision_count {
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&(count as u32).to_le_bytes());
        write(&bytes);
    }
    safe_encode(&hash.to_string())
}

/// `k8s.io/apimachinery/pkg/util/rand.SafeEncodeString`: every byte mapped onto
/// consonants and digits that cannot spell words.
pub fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes()
        .map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char)
        .collect()
}

/// The JSON merge patch (RFC 7386) that turns `old` into `new`: changed fields, `null`
/// for removed ones, nested objects diffed; `None` when they are equal.
pub fn merge_diff(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(old), Value::Object(new)) => {
            let mut patch = Map::new();
            for (key, value) in new {
                match old.get(key) {
                    Some(before) => {
                        if let Some(change) = merge_diff(before, value) {
                            patch.insert(key.clone(), change);
                        }
                    }
                    None => {
                        patch.insert(key.clone(), value.clone());
                    }
                }
            }
            for key in old.keys() {
                if !new.contains_key(key) {
                    patch.insert(key.clone(), Value::Null);
                }
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ if old == new => None,
        _ => Some(new.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn safe_encode_maps_digits_as_kubernetes_does() {
        // '0' is byte 48: 48 % 27 = 21 → '4'; '1' → 49 % 27 = 22 → '5'; '9' → 57 % 27 = 3 → 'f'.
        assert_eq!(safe_encode("019"), "45f");
    }

    #[test]
    fn the_hash_changes_with_the_template_and_the_collision_count() {
        let a = json!({"spec": {"containers": [{"image": "app:v1"}]}});
        let b = json!({"spec": {"containers": [{"image": "app:v2"}]}});
        assert_eq!(pod_template_hash(&a, None), pod_template_hash(&a, None));
        assert_ne!(pod_template_hash(&a, None), pod_template_hash(&b, None));
        assert_ne!(pod_template_hash(&a, None), pod_template_hash(&a, Some(1)));
        assert!(pod_template_hash(&a, None)
            .chars()
            .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
    }

    #[test]
    fn a_merge_diff_nulls_removed_fields_and_recurses() {
        let old = json!({"phase": "Paused", "pauseConditions": [{"reason": "CanaryPauseStep"}], "canary": {"a": 1, "b": 2}, "same": 3});
        let new = json!({"phase": "Progressing", "canary": {"a": 1}, "same": 3});
        assert_eq!(
            merge_diff(&old, &new),
            Some(json!({"phase": "Progressing", "pauseConditions": null, "canary": {"b": null}}))
        );
        assert_eq!(merge_diff(&new, &new), None);
    }

    #[test]
    fn pause_durations_read_numbers_and_units() {
        let pause = |d: Value| Pause { duration: Some(d) }.seconds();
        assert_eq!(pause(json!(30)), Some(30));
        assert_eq!(pause(json!("45")), Some(45));
        assert_eq!(pause(json!("2m")), Some(120));
        assert_eq!(pause(json!("1h")), Some(3600));
        assert_eq!(pause(json!("soon")), None);
        assert_eq!(Pause { duration: None }.seconds(), None);
    }
}
