//! JSON patch (RFC 6902, `application/json-patch+json`): what `kubectl patch --type=json`
//! sends. Operations apply in order to a copy; the first that fails fails the whole patch
//! with kube-apiserver's generic 422 (which names no reason; the reasons here are for
//! readers). As on the real server, `replace` of a missing member of an existing object adds
//! it; `remove` of one fails.

use serde_json::Value;

use super::error::ApiError;
use orrery_system::core::json::Pointer as _;

/// The real server's answer to a patch that does not apply; `_why` documents the case.
fn unprocessable(_why: String) -> ApiError {
    ApiError::patch_does_not_apply()
}

/// Splits a JSON pointer into unescaped tokens (`~1` is `/`, `~0` is `~`).
fn tokens(pointer: &str) -> Result<Vec<String>, ApiError> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(unprocessable(format!("invalid JSON pointer {pointer:?}")));
    };
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

/// The container a pointer's last token lives in, and that token.
fn parent<'a>(
    doc: &'a mut Value,
    pointer: &str,
    op: &str,
) -> Result<(&'a mut Value, String), ApiError> {
    let mut path = tokens(pointer)?;
    let Some(last) = path.pop() else {
        return Err(unprocessable(format!(
            "{op} operation does not apply: the whole document cannot be the target"
        )));
    };
    let mut at = doc;
    for token in &path {
        at = match at {
            Value::Object(map) => map.get_mut(token),
            Value::Array(items) => token.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| {
            unprocessable(format!(
                "{op} operation does not apply: doc is missing path: \"{pointer}\": missing value"
            ))
        })?;
    }
    Ok((at, last))
}

fn index(
    token: &str,
    len: usize,
    allow_end: bool,
    pointer: &str,
    op: &str,
) -> Result<usize, ApiError> {
    if allow_end && token == "-" {
        return Ok(len);
    }
    match token.parse::<usize>() {
        Ok(i) if i < len || (allow_end && i == len) => Ok(i),
        _ => Err(unprocessable(format!(
            "{op} operation does not apply: doc is missing path: \"{pointer}\": missing value"
        ))),
    }
}

fn get(doc: &Value, pointer: &str, op: &str) -> Result<Value, ApiError> {
    doc.at(pointer).cloned().ok_or_else(|| {
        unprocessable(format!(
            "{op} operation does not apply: doc is missing path: \"{pointer}\": missing value"
        ))
    })
}

fn remove(doc: &mut Value, pointer: &str, op: &str) -> Result<Value, ApiError> {
    let (container, last) = parent(doc, pointer, op)?;
    let missing = || {
        unprocessable(format!(
            "{op} operation does not apply: doc is missing path: \"{pointer}\": missing value"
        ))
    };
    match container {
        Value::Object(map) => map.shift_remove(&last).ok_or_else(missing),
        Value::Array(items) => {
            let i = index(&last, items.len(), false, pointer, op)?;
            Ok(items.remove(i))
        }
        _ => Err(missing()),
    }
}

fn add(doc: &mut Value, pointer: &str, value: Value, op: &str) -> Result<(), ApiError> {
    if pointer.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (container, last) = parent(doc, pointer, op)?;
    match container {
        Value::Object(map) => {
            map.insert(last, value);
            Ok(())
        }
        Value::Array(items) => {
            let i = index(&last, items.len(), true, pointer, op)?;
            items.insert(i, value);
            Ok(())
        }
        _ => Err(unprocessable(format!(
            "{op} operation does not apply: doc is missing path: \"{pointer}\": missing value"
        ))),
    }
}

/// Applies `patch` (a JSON array of operations) to `doc`; on error `doc` is unchanged.
pub fn apply(doc: &mut Value, patch: &Value) -> Result<(), ApiError> {
    let Some(operations) = patch.as_array() else {
        return Err(ApiError::bad_request(
            "error decoding patch: json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp",
        ));
    };
    let mut next = doc.clone();
    for operation in operations {
        let op = operation["op"].as_str().unwrap_or_default();
        let path = operation["path"]
            .as_str()
            .ok_or_else(|| unprocessable(format!("{op} operation does not apply: missing path")))?;
        let value = || {
            operation.get("value").cloned().ok_or_else(|| {
                unprocessable(format!("{op} operation does not apply: missing value"))
            })
        };
        let from = || {
            operation["from"].as_str().ok_or_else(|| {
                unprocessable(format!("{op} operation does not apply: missing from"))
            })
        };
        match op {
            "add" => add(&mut next, path, value()?, op)?,
            "remove" => {
                remove(&mut next, path, op)?;
            }
            "replace" if path.is_empty() => next = value()?,
            "replace" => {
                let (container, last) = parent(&mut next, path, op)?;
                match container {
                    Value::Object(map) => {
                        map.insert(last, value()?);
                    }
                    Value::Array(items) => {
                        let i = index(&last, items.len(), false, path, op)?;
                        items[i] = value()?;
                    }
                    _ => return Err(unprocessable(format!("replace at {path}: not a container"))),
                }
            }
            "move" => {
                let moved = remove(&mut next, from()?, op)?;
                add(&mut next, path, moved, op)?;
            }
            "copy" => {
                let copied = get(&next, from()?, op)?;
                add(&mut next, path, copied, op)?;
            }
            "test" => {
                if get(&next, path, op)? != value()? {
                    return Err(unprocessable(format!(
                        "testing value {path} failed: test failed"
                    )));
                }
            }
            other => {
                return Err(unprocessable(format!("Unexpected kind: {other}")));
            }
        }
    }
    *doc = next;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn operations_apply_in_order_and_a_failure_changes_nothing() {
        let mut doc = json!({"data": {"a": "1"}, "list": [1, 2]});
        let patch = json!([
            {"op": "add", "path": "/data/b", "value": "2"},
            {"op": "replace", "path": "/data/a", "value": "x"},
            {"op": "add", "path": "/list/-", "value": 3},
            {"op": "remove", "path": "/list/0"},
            {"op": "copy", "from": "/data/b", "path": "/data/c"},
            {"op": "move", "from": "/data/c", "path": "/data/d~1e"},
            {"op": "test", "path": "/data/b", "value": "2"},
        ]);
        apply(&mut doc, &patch).unwrap();
        assert_eq!(
            doc,
            json!({"data": {"a": "x", "b": "2", "d/e": "2"}, "list": [2, 3]})
        );
        let before = doc.clone();
        let failing =
            json!([{"op": "remove", "path": "/data/a"}, {"op": "remove", "path": "/data/zz"}]);
        let error = apply(&mut doc, &failing).unwrap_err();
        assert_eq!(error.code, 422);
        assert_eq!(doc, before, "a failed patch leaves the object as it was");
        assert_eq!(
            apply(
                &mut doc,
                &json!([{"op": "test", "path": "/data/b", "value": "9"}])
            )
            .unwrap_err()
            .code,
            422
        );
        assert_eq!(
            apply(&mut doc, &json!({"op": "add"})).unwrap_err().code,
            400
        );
        assert_eq!(
            apply(&mut doc, &json!([{"op": "jump", "path": "/a"}]))
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            apply(
                &mut doc,
                &json!([{"op": "add", "path": "/list/9", "value": 1}])
            )
            .unwrap_err()
            .code,
            422
        );
        apply(
            &mut doc,
            &json!([{"op": "replace", "path": "/data/new", "value": "n"}]),
        )
        .unwrap();
        assert_eq!(
            doc["data"]["new"], "n",
            "replace of a missing member adds it, as upstream"
        );
        assert_eq!(
            apply(
                &mut doc,
                &json!([{"op": "replace", "path": "/nope/x", "value": 1}])
            )
            .unwrap_err()
            .code,
            422
        );
    }
}
