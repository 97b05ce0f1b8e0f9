//! Normalisation: what may legitimately differ between two API servers becomes a stable
//! placeholder, so the rest can be compared byte for byte.
//!
//! - uids → `uid1`, `uid2`, … in order of first appearance;
//! - an object's `metadata.resourceVersion` → `rv1`, `rv2`, … by numeric order among all
//!   object RVs of the transcript (RVs are opaque to clients but ordered in both servers);
//! - any other `resourceVersion` (a list's, a bookmark's) → `after rvK`, the newest object
//!   RV it is not older than — a real server also counts writes the script did not make;
//! - timestamps → `<time>`; `metadata.continue` tokens → `<continue>`;
//! - the script's namespace name → `<ns>`;
//! - `metadata.managedFields` dropped unless the script asks to keep them;
//! - object keys sorted (JSON key order is not meaningful).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::script::{Script, Transcript};

/// One step's normalised text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NormalisedStep {
    /// The step's request line.
    pub request: String,
    /// Status and body, rendered as YAML.
    pub text: String,
}

struct Maps {
    uids: BTreeMap<String, usize>,
    object_rvs: Vec<u64>,
}

fn is_object(value: &Value) -> bool {
    value.pointer("/metadata/uid").is_some_and(Value::is_string)
}

fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for key in keys {
                out.insert(key.clone(), sorted(&map[key]));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

fn collect(value: &Value, maps: &mut Maps) {
    match value {
        Value::Object(map) => {
            if is_object(value) {
                if let Some(uid) = value.pointer("/metadata/uid").and_then(Value::as_str) {
                    let next = maps.uids.len() + 1;
                    maps.uids.entry(uid.to_string()).or_insert(next);
                }
                if let Some(rv) = value
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .and_then(|rv| rv.parse().ok())
                {
                    maps.object_rvs.push(rv);
                }
            }
            for child in map.values() {
                collect(child, maps);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| collect(i, maps)),
        _ => {}
    }
}

fn rewrite(value: &mut Value, maps: &Maps, namespace: &str, keep_managed_fields: bool) {
    let object = is_object(value);
    match value {
        Value::Object(map) => {
            if let Some(Value::Object(meta)) = map.get_mut("metadata") {
                if !keep_managed_fields {
                    meta.shift_remove("managedFields");
                }
                if let Some(Value::String(rv)) = meta.get_mut("resourceVersion") {
                    if let Ok(number) = rv.parse::<u64>() {
                        let rank = maps.object_rvs.partition_point(|known| *known <= number);
                        *rv = if object && rank > 0 && maps.object_rvs[rank - 1] == number {
                            format!("rv{rank}")
                        } else if rank == 0 {
                            "before rv1".to_string()
                        } else {
                            format!("after rv{rank}")
                        };
                    }
                }
                if let Some(Value::String(token)) = meta.get_mut("continue") {
                    if !token.is_empty() {
                        *token = "<continue>".into();
                    }
                }
            }
            for (key, child) in map.iter_mut() {
                match (key.as_str(), &*child) {
                    (
                        "creationTimestamp" | "deletionTimestamp" | "time" | "lastTransitionTime",
                        Value::String(_),
                    ) => *child = Value::String("<time>".into()),
                    _ => rewrite(child, maps, namespace, keep_managed_fields),
                }
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|i| rewrite(i, maps, namespace, keep_managed_fields)),
        Value::String(text) => {
            if let Some(n) = maps.uids.get(text.as_str()) {
                *text = format!("uid{n}");
            } else if !namespace.is_empty() && text.contains(namespace) {
                *text = text.replace(namespace, "<ns>");
            }
        }
        _ => {}
    }
}

/// Removes watch events that are bookmarks at an RV strictly newer than every object of
/// the transcript (`newest`, raw); a bookmark at an object's RV (a repeat) stays.
fn drop_newer_bookmarks(body: &mut Value, newest: Option<u64>) {
    let Some(newest) = newest else { return };
    if let Value::Array(events) = body {
        events.retain(|event| {
            let newer = event["object"]["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|rv| rv.parse::<u64>().ok())
                .is_some_and(|rv| rv > newest);
            !(event["type"] == "BOOKMARK" && newer)
        });
    }
}

/// Normalises a transcript step by step.
pub fn normalise(transcript: &Transcript, script: &Script) -> Vec<NormalisedStep> {
    let mut maps = Maps {
        uids: BTreeMap::new(),
        object_rvs: Vec::new(),
    };
    let bodies: Vec<Value> = transcript
        .exchanges
        .iter()
        .map(|e| sorted(&e.body))
        .collect();
    for body in &bodies {
        collect(body, &mut maps);
    }
    maps.object_rvs.sort_unstable();
    maps.object_rvs.dedup();
    transcript
        .exchanges
        .iter()
        .zip(bodies)
        .map(|(exchange, mut body)| {
            if script.ignore_newer_bookmarks {
                drop_newer_bookmarks(&mut body, maps.object_rvs.last().copied());
            }
            rewrite(
                &mut body,
                &maps,
                &transcript.namespace,
                script.keep_managed_fields,
            );
            let text = if exchange.status == 0 {
                String::new()
            } else {
                let rendered = serde_saphyr::to_string(&body)
                    .unwrap_or_else(|e| format!("<unrenderable: {e}>\n"));
                format!("status: {}\n{}", exchange.status, indent_body(&rendered))
            };
            NormalisedStep {
                request: exchange.request.clone(),
                text,
            }
        })
        .collect()
}

fn indent_body(yaml: &str) -> String {
    let mut out = String::from("body:\n");
    for line in yaml.lines() {
        out.push_str("  ");
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Renders a normalised transcript as one text (the snapshot format).
pub fn render(steps: &[NormalisedStep]) -> String {
    let mut out = String::new();
    for (index, step) in steps.iter().enumerate() {
        out.push_str(&format!("### {index}: {}\n{}", step.request, step.text));
    }
    out
}

/// Splits a rendered transcript back into steps (to compare against a recorded snapshot).
pub fn parse(rendered: &str) -> Vec<NormalisedStep> {
    let mut steps: Vec<NormalisedStep> = Vec::new();
    for line in rendered.lines() {
        if let Some(header) = line.strip_prefix("### ") {
            let request = header
                .split_once(": ")
                .map(|(_, r)| r)
                .unwrap_or(header)
                .to_string();
            steps.push(NormalisedStep {
                request,
                text: String::new(),
            });
        } else if let Some(step) = steps.last_mut() {
            step.text.push_str(line);
            step.text.push('\n');
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::Exchange;
    use serde_json::json;

    fn transcript(bodies: Vec<Value>) -> Transcript {
        Transcript {
            script: "t",
            namespace: "ns-123".into(),
            exchanges: bodies
                .into_iter()
                .map(|body| Exchange {
                    request: "GET /x".into(),
                    status: 200,
                    body,
                })
                .collect(),
        }
    }

    #[test]
    fn bookmarks_newer_than_every_object_can_be_left_out_but_one_at_an_object_rv_stays() {
        let watch = json!([
            {"type": "ADDED", "object": {"metadata": {"name": "a", "uid": "u1", "resourceVersion": "10"}}},
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "10"}}},
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "17"}}},
        ]);
        let t = transcript(vec![watch]);
        let kept = normalise(&t, &Script::new("t", "t"));
        assert_eq!(kept[0].text.matches("BOOKMARK").count(), 2);
        let dropped = normalise(&t, &Script::new("t", "t").ignoring_newer_bookmarks());
        assert_eq!(
            dropped[0].text.matches("BOOKMARK").count(),
            1,
            "{}",
            dropped[0].text
        );
        assert!(dropped[0].text.contains("resourceVersion: rv1"));
    }

    #[test]
    fn uids_rvs_times_and_namespaces_become_placeholders() {
        let t = transcript(vec![
            json!({"metadata": {"name": "a", "namespace": "ns-123", "uid": "u-9", "resourceVersion": "900", "creationTimestamp": "2026-01-01T00:00:00Z"}}),
            json!({"metadata": {"resourceVersion": "950", "continue": "abc"}, "items": [{"metadata": {"uid": "u-9", "resourceVersion": "905"}}]}),
        ]);
        let steps = normalise(&t, &Script::new("t", "t"));
        assert!(steps[0].text.contains("uid: uid1"), "{}", steps[0].text);
        assert!(steps[0].text.contains("resourceVersion: rv1"));
        assert!(steps[0].text.contains("namespace: <ns>"));
        assert!(steps[0].text.contains("creationTimestamp: <time>"));
        assert!(
            steps[1].text.contains("resourceVersion: after rv2"),
            "{}",
            steps[1].text
        );
        assert!(steps[1].text.contains("continue: <continue>"));
    }

    #[test]
    fn rendering_round_trips_through_parse() {
        let t = transcript(vec![json!({"a": 1}), json!({"b": [1, 2]})]);
        let steps = normalise(&t, &Script::new("t", "t"));
        assert_eq!(parse(&render(&steps)), steps);
    }
}
