//! Kubernetes label selectors in their object form (`matchLabels`, `matchExpressions`), as
//! apimachinery's `LabelSelectorAsSelector` reads them: every entry must hold; an empty
//! selector matches everything. PromotionTemplates choose their applications with one.

use std::collections::BTreeMap;

use serde_json::Value;

/// A parsed selector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// Why a selector was refused, naming the entry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {message}")]
pub struct SelectorError {
    /// Where in the selector (`matchExpressions[1].operator`).
    pub at: String,
    /// What is wrong.
    pub message: String,
}

impl LabelSelector {
    /// Reads a selector object; `at` prefixes the place named in an error.
    pub fn from_json(value: &Value, at: &str) -> Result<LabelSelector, SelectorError> {
        let error = |path: String, message: &str| SelectorError {
            at: format!("{at}.{path}"),
            message: message.into(),
        };
        let Some(object) = value.as_object() else {
            return Err(SelectorError {
                at: at.into(),
                message: "want a label selector object (matchLabels, matchExpressions)".into(),
            });
        };
        if let Some(unknown) = object
            .keys()
            .find(|k| !matches!(k.as_str(), "matchLabels" | "matchExpressions"))
        {
            return Err(error(
                unknown.clone(),
                "unknown field; a label selector has matchLabels and matchExpressions",
            ));
        }
        let mut requirements = Vec::new();
        match object.get("matchLabels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(labels)) => {
                for (key, value) in labels {
                    let Some(value) = value.as_str() else {
                        return Err(error(format!("matchLabels.{key}"), "want a string"));
                    };
                    requirements.push(Requirement::In(key.clone(), vec![value.to_string()]));
                }
            }
            Some(_) => return Err(error("matchLabels".into(), "want a map of strings")),
        }
        let expressions = match object.get("matchExpressions") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(list)) => list.as_slice(),
            Some(_) => return Err(error("matchExpressions".into(), "want a list")),
        };
        for (i, expression) in expressions.iter().enumerate() {
            let here = |field: &str| format!("matchExpressions[{i}]{field}");
            let key = expression["key"]
                .as_str()
                .filter(|k| !k.is_empty())
                .ok_or_else(|| error(here(".key"), "required"))?
                .to_string();
            let values: Vec<String> = match &expression["values"] {
                Value::Null => Vec::new(),
                Value::Array(values) => values
                    .iter()
                    .map(|v| v.as_str().map(str::to_string))
                    .collect::<Option<_>>()
                    .ok_or_else(|| error(here(".values"), "want a list of strings"))?,
                _ => return Err(error(here(".values"), "want a list of strings")),
            };
            let requirement = match expression["operator"].as_str() {
                Some("In" | "NotIn") if values.is_empty() => {
                    return Err(error(here(".values"), "must be non-empty for In and NotIn"))
                }
                Some("Exists" | "DoesNotExist") if !values.is_empty() => {
                    return Err(error(
                        here(".values"),
                        "must be empty for Exists and DoesNotExist",
                    ))
                }
                Some("In") => Requirement::In(key, values),
                Some("NotIn") => Requirement::NotIn(key, values),
                Some("Exists") => Requirement::Exists(key),
                Some("DoesNotExist") => Requirement::DoesNotExist(key),
                Some(other) => {
                    return Err(error(
                        here(".operator"),
                        &format!("{other:?} is not In, NotIn, Exists or DoesNotExist"),
                    ))
                }
                None => return Err(error(here(".operator"), "required")),
            };
            requirements.push(requirement);
        }
        Ok(LabelSelector { requirements })
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::In(key, values) => labels.get(key).is_some_and(|v| values.contains(v)),
            Requirement::NotIn(key, values) => labels.get(key).is_none_or(|v| !values.contains(v)),
            Requirement::Exists(key) => labels.contains_key(key),
            Requirement::DoesNotExist(key) => !labels.contains_key(key),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_requirement_must_hold_and_an_empty_selector_matches_everything() {
        let selector = LabelSelector::from_json(
            &json!({
                "matchLabels": {"team": "shop"},
                "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["api", "web"]},
                    {"key": "env", "operator": "NotIn", "values": ["prod"]},
                    {"key": "codefresh.io/product", "operator": "Exists"},
                    {"key": "legacy", "operator": "DoesNotExist"},
                ],
            }),
            "spec.applicationSourceSelector",
        )
        .unwrap();
        let app = labels(&[
            ("team", "shop"),
            ("tier", "api"),
            ("codefresh.io/product", "shop"),
        ]);
        assert!(selector.matches(&app));
        // NotIn holds for a missing key, as in Kubernetes.
        let mut other = app.clone();
        other.insert("env".into(), "prod".into());
        assert!(!selector.matches(&other));
        let mut other = app.clone();
        other.insert("legacy".into(), "true".into());
        assert!(!selector.matches(&other));
        let mut other = app.clone();
        other.remove("codefresh.io/product");
        assert!(!selector.matches(&other));
        let mut other = app;
        other.insert("tier".into(), "db".into());
        assert!(!selector.matches(&other));
        assert!(LabelSelector::from_json(&json!({}), "s")
            .unwrap()
            .matches(&labels(&[])));
    }

    #[test]
    fn a_bad_selector_is_refused_naming_the_entry() {
        let error = |value: Value| {
            LabelSelector::from_json(&value, "spec.applicationSourceSelector")
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            error(json!({"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["b"]}]})),
            "spec.applicationSourceSelector.matchExpressions[0].operator: \"Equals\" is not In, NotIn, Exists or DoesNotExist"
        );
        assert_eq!(
            error(json!({"matchExpressions": [{"key": "a", "operator": "In"}]})),
            "spec.applicationSourceSelector.matchExpressions[0].values: must be non-empty for In and NotIn"
        );
        assert_eq!(
            error(json!({"matchLabels": {"a": 1}})),
            "spec.applicationSourceSelector.matchLabels.a: want a string"
        );
        assert_eq!(
            error(json!({"matchLabel": {}})),
            "spec.applicationSourceSelector.matchLabel: unknown field; a label selector has matchLabels and matchExpressions"
        );
        assert_eq!(
            error(json!("team=shop")),
            "spec.applicationSourceSelector: want a label selector object (matchLabels, matchExpressions)"
        );
    }
}
