//! A PromotionTask as the operator reads it: its steps, typed, and the JSON paths a
//! promotion copies (research §5, `promotiontasks.yaml`). Bad input is refused with the
//! step's index and what is wrong, never a panic.

use std::collections::BTreeMap;

use crate::core::json::{self, Pointer as _};
use serde_json::Value;

/// A task's phase (`status.phase`), as the CRD enumerates it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Phase {
    /// Created, not yet picked up.
    Pending,
    /// Its steps are running.
    Executing,
    /// Every step succeeded.
    Succeeded,
    /// A step failed, or retries ran out.
    Failed,
    /// Stopped by the platform (a `terminate` release).
    Terminated,
}

impl Phase {
    /// The phase a task's status names (absent or unknown: `Pending`).
    pub fn of(task: &Value) -> Phase {
        match task.at("/status/phase").and_then(Value::as_str) {
            Some("Executing") => Phase::Executing,
            Some("Succeeded") => Phase::Succeeded,
            Some("Failed") => Phase::Failed,
            Some("Terminated") => Phase::Terminated,
            _ => Phase::Pending,
        }
    }

    /// Whether nothing more happens to the task.
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed | Phase::Terminated)
    }

    /// The name the CRD uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Executing => "Executing",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
            Phase::Terminated => "Terminated",
        }
    }
}

/// Values to write: file (relative to the app's path) → JSON path → value.
pub type Values = BTreeMap<String, BTreeMap<String, Value>>;

/// One step of a task: exactly one of the CRD's five kinds.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// `runWorkflow`: submit the workflow template (in the operator's wrapper workflow) and
    /// wait for it to end.
    RunWorkflow {
        /// `workflowTemplateName`.
        template: String,
        /// `parameters` (name → value).
        parameters: BTreeMap<String, String>,
        /// `stage` (`pre-action`, `post-action`, …), a label on the workflow.
        stage: String,
    },
    /// `promoteAppWithCommit`: write the values into the target app's files on `main`.
    PromoteWithCommit {
        /// `targetApplication` (an Argo CD Application name).
        target: String,
        /// `promotionValues`.
        values: Values,
        /// `commitMessage`.
        message: String,
    },
    /// `promoteAppWithPR`: write them on a branch, open a pull request and wait for its merge.
    PromoteWithPr {
        /// `targetApplication`.
        target: String,
        /// `promotionValues`.
        values: Values,
        /// `commitMessage`.
        message: String,
        /// `prTitle`.
        title: String,
        /// `prBranchName` (default `promotion/<task>`).
        branch: Option<String>,
    },
    /// `verifyApp`: wait until the app is synced and healthy at a revision that contains
    /// `commitSha`.
    VerifyApp {
        /// `targetApplication`.
        target: String,
        /// `commitSha`; empty: the commit an earlier promotion step of the same task made
        /// (orrery's convention, so one task can promote and verify).
        commit_sha: String,
    },
    /// `getPromotionValues`: read the values (and the version) from the source app's
    /// files at `commitSha`.
    GetPromotionValues {
        /// `targetApplication`.
        target: String,
        /// `commitSha`.
        commit_sha: String,
        /// `promotionProperties`: file → `{jsonPaths: [...]}`.
        properties: BTreeMap<String, Vec<String>>,
        /// `versionProperty`: `{file, jsonPath}`.
        version: Option<(String, String)>,
    },
}

impl Step {
    /// The CRD's name of the step's kind.
    pub fn kind(&self) -> &'static str {
        match self {
            Step::RunWorkflow { .. } => "runWorkflow",
            Step::PromoteWithCommit { .. } => "promoteAppWithCommit",
            Step::PromoteWithPr { .. } => "promoteAppWithPR",
            Step::VerifyApp { .. } => "verifyApp",
            Step::GetPromotionValues { .. } => "getPromotionValues",
        }
    }

    /// Whether running the step twice does something twice (a commit, a workflow).
    pub fn has_side_effect(&self) -> bool {
        matches!(
            self,
            Step::RunWorkflow { .. } | Step::PromoteWithCommit { .. } | Step::PromoteWithPr { .. }
        )
    }
}

/// Why a task's spec cannot be executed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// `spec.steps` is missing or not a list.
    #[error("spec.steps: want a list of steps")]
    NoSteps,
    /// One step is malformed.
    #[error("spec.steps[{index}]: {reason}")]
    Step {
        /// The step's index.
        index: usize,
        /// What is wrong.
        reason: String,
    },
}

const KINDS: [&str; 5] = [
    "runWorkflow",
    "promoteAppWithCommit",
    "promoteAppWithPR",
    "verifyApp",
    "getPromotionValues",
];

/// The steps of a task's `spec`.
pub fn parse(spec: &Value) -> Result<Vec<Step>, SpecError> {
    let steps = spec
        .get("steps")
        .and_then(Value::as_array)
        .ok_or(SpecError::NoSteps)?;
    steps
        .iter()
        .enumerate()
        .map(|(index, step)| parse_step(step).map_err(|reason| SpecError::Step { index, reason }))
        .collect()
}

fn parse_step(step: &Value) -> Result<Step, String> {
    let set: Vec<&str> = KINDS
        .iter()
        .copied()
        .filter(|k| step.get(*k).is_some_and(|v| !v.is_null()))
        .collect();
    let [kind] = set.as_slice() else {
        return Err(format!(
            "exactly one of {} must be set (found {})",
            KINDS.join(", "),
            if set.is_empty() {
                "none".to_string()
            } else {
                set.join(", ")
            }
        ));
    };
    let body = &step[*kind];
    let text = |field: &str| -> Result<String, String> {
        match body.get(field) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            Some(Value::String(_)) | None => Err(format!("{kind}.{field}: required")),
            Some(other) => Err(format!("{kind}.{field}: want a string, got {other}")),
        }
    };
    let optional = |field: &str| body.get(field).and_then(Value::as_str).map(str::to_string);
    Ok(match *kind {
        "runWorkflow" => Step::RunWorkflow {
            template: text("workflowTemplateName")?,
            parameters: string_map(body.get("parameters"), "runWorkflow.parameters")?,
            stage: optional("stage").unwrap_or_default(),
        },
        "promoteAppWithCommit" => Step::PromoteWithCommit {
            target: text("targetApplication")?,
            values: values(body.get("promotionValues"), kind)?,
            message: optional("commitMessage").unwrap_or_else(|| "promotion".into()),
        },
        "promoteAppWithPR" => Step::PromoteWithPr {
            target: text("targetApplication")?,
            values: values(body.get("promotionValues"), kind)?,
            message: optional("commitMessage").unwrap_or_else(|| "promotion".into()),
            title: optional("prTitle").unwrap_or_else(|| "Promotion".into()),
            branch: optional("prBranchName").filter(|b| !b.is_empty()),
        },
        "verifyApp" => Step::VerifyApp {
            target: text("targetApplication")?,
            commit_sha: optional("commitSha").unwrap_or_default(),
        },
        _ => Step::GetPromotionValues {
            target: text("targetApplication")?,
            commit_sha: text("commitSha")?,
            properties: properties(body.get("promotionProperties"))?,
            version: match body.get("versionProperty") {
                None | Some(Value::Null) => None,
                Some(v) => {
                    let field = |f: &str| v.get(f).and_then(Value::as_str).map(str::to_string);
                    match (field("file"), field("jsonPath")) {
                        (Some(file), Some(path)) => {
                            json_path(&path).map_err(|e| format!("versionProperty: {e}"))?;
                            Some((file, path))
                        }
                        _ => return Err("versionProperty: want file and jsonPath".into()),
                    }
                }
            },
        },
    })
}

fn string_map(value: Option<&Value>, what: &str) -> Result<BTreeMap<String, String>, String> {
    match value {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| {
                let text = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                Ok((k.clone(), text))
            })
            .collect(),
        Some(other) => Err(format!("{what}: want a map, got {other}")),
    }
}

fn values(value: Option<&Value>, kind: &str) -> Result<Values, String> {
    let Some(Value::Object(files)) = value else {
        return Err(format!(
            "{kind}.promotionValues: want a map of file → {{JSON path: value}}"
        ));
    };
    let mut out = Values::new();
    for (file, paths) in files {
        let Value::Object(paths) = paths else {
            return Err(format!(
                "{kind}.promotionValues.{file}: want a map of JSON path → value"
            ));
        };
        for (path, v) in paths {
            json_path(path).map_err(|e| format!("{kind}.promotionValues.{file}: {e}"))?;
            out.entry(file.clone())
                .or_default()
                .insert(path.clone(), v.clone());
        }
    }
    if out.is_empty() {
        return Err(format!("{kind}.promotionValues: empty"));
    }
    Ok(out)
}

fn properties(value: Option<&Value>) -> Result<BTreeMap<String, Vec<String>>, String> {
    let Some(Value::Object(files)) = value else {
        return Err(
            "getPromotionValues.promotionProperties: want file → {jsonPaths: [...]}".into(),
        );
    };
    let mut out = BTreeMap::new();
    for (file, entry) in files {
        let paths: Vec<String> = entry
            .get("jsonPaths")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("promotionProperties.{file}: want jsonPaths"))?
            .iter()
            .map(|p| {
                p.as_str()
                    .map(str::to_string)
                    .ok_or("a JSON path is not a string")
            })
            .collect::<Result<_, _>>()
            .map_err(|e| format!("promotionProperties.{file}: {e}"))?;
        for path in &paths {
            json_path(path).map_err(|e| format!("promotionProperties.{file}: {e}"))?;
        }
        out.insert(file.clone(), paths);
    }
    Ok(out)
}

/// The keys of a JSON path of the supported form: `$.a.b.c` (dotted object keys; `$.` may
/// be left out). Array indexes, wildcards and filters are refused, naming the path.
pub fn json_path(path: &str) -> Result<Vec<String>, String> {
    let rest = path
        .strip_prefix("$.")
        .or_else(|| path.strip_prefix('.'))
        .unwrap_or(path);
    let keys: Vec<String> = rest.split('.').map(str::to_string).collect();
    if rest.is_empty()
        || keys
            .iter()
            .any(|k| k.is_empty() || k.contains(['[', ']', '*', '?', '@', '$']))
    {
        return Err(format!(
            "JSON path {path:?}: only dotted object keys ($.a.b) are supported"
        ));
    }
    Ok(keys)
}

/// The value at `path` in `doc`, if any.
pub fn get(doc: &Value, path: &str) -> Option<Value> {
    json::get_keys(doc, &json_path(path).ok()?).cloned()
}

/// Sets `path` in `doc` to `value`, creating objects on the way; whether it changed.
pub fn set(doc: &mut Value, path: &str, value: &Value) -> Result<bool, String> {
    let keys = json_path(path)?;
    json::set_keys(doc, &keys, value).map_err(|i| {
        format!(
            "JSON path {path:?}: {} is not an object",
            keys[..i].join(".")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn steps_parse_and_bad_ones_name_their_index_and_field() {
        let spec = json!({"steps": [
            {"runWorkflow": {"workflowTemplateName": "smoke", "stage": "pre-action"}},
            {"promoteAppWithCommit": {"targetApplication": "shop-staging",
                "promotionValues": {"values.json": {"$.image.tag": "v2"}}}},
            {"verifyApp": {"targetApplication": "shop-staging", "commitSha": "abc"}},
        ]});
        let steps = parse(&spec).unwrap();
        assert_eq!(steps.len(), 3);
        assert_eq!(steps[1].kind(), "promoteAppWithCommit");
        assert!(steps[1].has_side_effect() && !steps[2].has_side_effect());
        let two = json!({"steps": [{"verifyApp": {"targetApplication": "a", "commitSha": "b"},
            "runWorkflow": {"workflowTemplateName": "t"}}]});
        assert_eq!(
            parse(&two).unwrap_err().to_string(),
            "spec.steps[0]: exactly one of runWorkflow, promoteAppWithCommit, promoteAppWithPR, verifyApp, getPromotionValues must be set (found runWorkflow, verifyApp)"
        );
        let none = json!({"steps": [{}]});
        assert!(parse(&none)
            .unwrap_err()
            .to_string()
            .contains("(found none)"));
        let missing = json!({"steps": [{"verifyApp": {"commitSha": "a"}}]});
        assert_eq!(
            parse(&missing).unwrap_err().to_string(),
            "spec.steps[0]: verifyApp.targetApplication: required"
        );
        let index = json!({"steps": [{"promoteAppWithCommit": {"targetApplication": "a",
            "promotionValues": {"v.json": {"$.images[0].tag": "x"}}}}]});
        assert!(parse(&index)
            .unwrap_err()
            .to_string()
            .contains("only dotted object keys"));
        assert_eq!(parse(&json!({})).unwrap_err(), SpecError::NoSteps);
    }

    #[test]
    fn json_paths_read_and_write_nested_keys() {
        let mut doc = json!({"image": {"tag": "v1"}, "replicas": 2});
        assert_eq!(get(&doc, "$.image.tag"), Some(json!("v1")));
        assert_eq!(set(&mut doc, "$.image.tag", &json!("v2")), Ok(true));
        assert_eq!(set(&mut doc, "image.tag", &json!("v2")), Ok(false));
        assert_eq!(set(&mut doc, "$.new.deep.key", &json!(3)), Ok(true));
        assert_eq!(get(&doc, ".new.deep.key"), Some(json!(3)));
        assert!(set(&mut doc, "$.replicas.x", &json!(1))
            .unwrap_err()
            .contains("replicas is not an object"));
        assert_eq!(
            Phase::of(&json!({"status": {"phase": "Failed"}})),
            Phase::Failed
        );
        assert!(Phase::Failed.is_terminal() && !Phase::Executing.is_terminal());
    }
}
