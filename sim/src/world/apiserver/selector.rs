//! Label and field selectors as kube-apiserver parses them (the subset kube clients send).

use std::collections::BTreeMap;

use orrery_system::core::json::Pointer as _;
use serde_json::Value;

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector: all requirements must hold (comma = AND).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A parsed field selector: (JSON pointer of the field, `=` or `!=`, value) per term.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// The fields a type can be selected by beyond `metadata.name` and `metadata.namespace`,
/// with where each is read (kube-apiserver's `ToSelectableFields`): a core/v1 Event's.
fn selectable(kind: &str) -> &'static [(&'static str, &'static str)] {
    match kind {
        "Event" => &[
            ("involvedObject.kind", "/involvedObject/kind"),
            ("involvedObject.namespace", "/involvedObject/namespace"),
            ("involvedObject.name", "/involvedObject/name"),
            ("involvedObject.uid", "/involvedObject/uid"),
            ("involvedObject.apiVersion", "/involvedObject/apiVersion"),
            (
                "involvedObject.resourceVersion",
                "/involvedObject/resourceVersion",
            ),
            ("involvedObject.fieldPath", "/involvedObject/fieldPath"),
            ("reason", "/reason"),
            ("reportingComponent", "/reportingComponent"),
            ("source", "/source/component"),
            ("type", "/type"),
        ],
        _ => &[],
    }
}

impl FieldSelector {
    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(text: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    parts.push(current);
    parts
        .into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

fn parse_set(rest: &str, whole: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            format!("unable to parse requirement: {whole:?}: expected a (value, …) set")
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (x,y),f notin (z),g,!h`; errors say which requirement is bad.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for part in split_top_level(text) {
            let requirement = if let Some(key) = part.strip_prefix('!') {
                Requirement::NotExists(key.trim().to_string())
            } else if let Some((key, value)) = part.split_once("!=") {
                Requirement::NotEquals(key.trim().into(), value.trim().into())
            } else if let Some((key, value)) = part.split_once("==") {
                Requirement::Equals(key.trim().into(), value.trim().into())
            } else if let Some((key, value)) = part.split_once('=') {
                Requirement::Equals(key.trim().into(), value.trim().into())
            } else if let Some((key, rest)) = part.split_once(" notin ") {
                Requirement::NotIn(key.trim().into(), parse_set(rest, &part)?)
            } else if let Some((key, rest)) = part.split_once(" in ") {
                Requirement::In(key.trim().into(), parse_set(rest, &part)?)
            } else {
                Requirement::Exists(part.trim().to_string())
            };
            let key = match &requirement {
                Requirement::Equals(k, _)
                | Requirement::NotEquals(k, _)
                | Requirement::In(k, _)
                | Requirement::NotIn(k, _)
                | Requirement::Exists(k)
                | Requirement::NotExists(k) => k,
            };
            if !valid_key(key) {
                return Err(format!(
                    "unable to parse requirement: invalid label key {key:?} in {part:?}"
                ));
            }
            requirements.push(requirement);
        }
        Ok(LabelSelector(requirements))
    }

    /// Whether an object's labels satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels: BTreeMap<String, String> = object
            .at("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
        })
    }
}

impl FieldSelector {
    /// Parses `metadata.name=x,metadata.namespace!=y`; other fields are refused like the real
    /// server refuses them for custom resources.
    pub fn parse(text: &str) -> Result<Self, String> {
        Self::parse_for("", text)
    }

    /// Parses a selector over the fields a `kind` is selectable by: `metadata.name`,
    /// `metadata.namespace` and the type's own ([`selectable`]); any other field is 400
    /// `field label not supported: <field>`, as there.
    pub fn parse_for(kind: &str, text: &str) -> Result<Self, String> {
        Self::parse_labelled(kind, text, |label| Ok(label.to_string()))
    }

    /// [`FieldSelector::parse_for`] with each label first renamed by `label` (a version
    /// whose fields are named otherwise than the stored object's, or an error for a label
    /// that version does not select by).
    pub fn parse_labelled(
        kind: &str,
        text: &str,
        label: impl Fn(&str) -> Result<String, String>,
    ) -> Result<Self, String> {
        let mut terms = Vec::new();
        for part in split_top_level(text) {
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(format!("invalid selector: {part:?}; can't understand it"));
            };
            let field = label(field.trim())?;
            let field = field.as_str();
            let pointer = match field {
                "metadata.name" => "/metadata/name",
                "metadata.namespace" => "/metadata/namespace",
                other => selectable(kind)
                    .iter()
                    .find(|(name, _)| *name == other)
                    .map(|(_, pointer)| *pointer)
                    .ok_or_else(|| format!("field label not supported: {field}"))?,
            };
            terms.push((pointer.to_string(), equal, value.trim().to_string()));
        }
        Ok(FieldSelector(terms))
    }

    /// Whether an object's fields satisfy every term (a missing field reads as empty).
    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(pointer, equal, value)| {
            let actual = object.at(pointer).and_then(Value::as_str).unwrap_or("");
            (actual == value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn every_label_operator_matches_like_kubernetes() {
        let o = obj(json!({"env": "prod", "tier": "web"}));
        for (sel, want) in [
            ("env=prod", true),
            ("env==prod", true),
            ("env!=prod", false),
            ("env in (prod, dev)", true),
            ("env notin (prod)", false),
            ("missing notin (x)", true),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("env=prod,tier=db", false),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&o),
                want,
                "selector {sel}"
            );
        }
    }

    #[test]
    fn bad_selectors_are_rejected_with_the_requirement_named() {
        let err = LabelSelector::parse("env in prod").unwrap_err();
        assert!(err.contains("env in prod"), "{err}");
        let err = FieldSelector::parse("spec.foo=bar").unwrap_err();
        assert!(err.contains("spec.foo"), "{err}");
    }

    #[test]
    fn field_selectors_match_name_and_namespace() {
        let o = obj(json!({}));
        assert!(FieldSelector::parse("metadata.name=a").unwrap().matches(&o));
        assert!(!FieldSelector::parse("metadata.namespace!=ns")
            .unwrap()
            .matches(&o));
    }

    #[test]
    fn events_are_selectable_by_their_involved_object_and_source() {
        let event = json!({"metadata": {"name": "a.1"}, "involvedObject": {"kind": "ConfigMap", "name": "a"},
                           "source": {"component": "tester"}, "reason": "Tested"});
        let select = |text: &str| {
            FieldSelector::parse_for("Event", text)
                .unwrap()
                .matches(&event)
        };
        assert!(select(
            "involvedObject.kind=ConfigMap,involvedObject.name=a"
        ));
        assert!(select("source=tester,reason=Tested,involvedObject.uid="));
        assert!(!select("involvedObject.name=b"));
        assert_eq!(
            FieldSelector::parse_for("Event", "involvedObject.bogus=a").unwrap_err(),
            "field label not supported: involvedObject.bogus"
        );
        assert!(
            FieldSelector::parse_for("ConfigMap", "reason=x").is_err(),
            "only an Event has them"
        );
    }
}
