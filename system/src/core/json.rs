//! JSON Pointer lookups that do not allocate, and paths of object keys read and written.
//!
//! `serde_json::Value::pointer` builds two `String`s for every token of the path (to undo
//! `~1` and `~0`), and the reporters, the simulated API server's selectors and the harness
//! read a few fields of every app they touch that way: 2.7 % of a queue-overflow seed went
//! to those lookups. [`Pointer::at`] answers exactly what `pointer` answers and borrows the
//! tokens unless they hold an escape.

use std::borrow::Cow;

use serde_json::Value;

/// JSON Pointer lookups (RFC 6901) on a [`Value`], as `serde_json` reads them, without
/// allocating.
pub trait Pointer {
    /// What `serde_json::Value::pointer(pointer)` returns.
    fn at(&self, pointer: &str) -> Option<&Value>;
}

impl Pointer for Value {
    fn at(&self, pointer: &str) -> Option<&Value> {
        if pointer.is_empty() {
            return Some(self);
        }
        if !pointer.starts_with('/') {
            return None;
        }
        pointer
            .split('/')
            .skip(1)
            .map(unescape)
            .try_fold(self, |target, token| match target {
                Value::Object(map) => map.get(token.as_ref()),
                Value::Array(list) => index(&token).and_then(|i| list.get(i)),
                _ => None,
            })
    }
}

/// The value at a path of object keys (`["image", "tag"]`), if any.
pub fn get_keys<'a>(doc: &'a Value, keys: &[String]) -> Option<&'a Value> {
    keys.iter().try_fold(doc, |at, key| at.get(key))
}

/// Sets a path of object keys to `value`, creating objects where the path finds null or
/// nothing; whether it changed. `Err(i)`: the value at `keys[..i]` is not an object. Shared
/// by the promotion files' JSON paths and the in-place YAML editor's expected result.
pub fn set_keys(doc: &mut Value, keys: &[String], value: &Value) -> Result<bool, usize> {
    let mut at = doc;
    for (i, key) in keys.iter().enumerate() {
        if at.is_null() {
            *at = Value::Object(serde_json::Map::new());
        }
        let Value::Object(map) = at else {
            return Err(i);
        };
        if i + 1 == keys.len() {
            let changed = map.get(key) != Some(value);
            map.insert(key.clone(), value.clone());
            return Ok(changed);
        }
        at = map.entry(key.clone()).or_insert(Value::Null);
    }
    Ok(false)
}

/// A token with `~1` and `~0` undone, in serde_json's order; borrowed when it has no `~`.
fn unescape(token: &str) -> Cow<'_, str> {
    if token.contains('~') {
        Cow::Owned(token.replace("~1", "/").replace("~0", "~"))
    } else {
        Cow::Borrowed(token)
    }
}

/// An array index as serde_json accepts one: digits, no sign, no leading zero.
fn index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::Pointer;
    use serde_json::json;

    #[test]
    fn answers_what_serde_json_answers() {
        let doc = json!({
            "spec": {"source": {"repoURL": "https://git/x", "path": "apps/a"}},
            "status": {"sync": {"status": "Synced"}, "resources": [{"kind": "Service"}, 7]},
            "a/b": 1, "m~n": 2, "~1": 3, "": {"": 4}, "0": "zero", "01": "one",
            "list": [10, 11, 12, [13]],
        });
        let pointers = [
            "",
            "/",
            "//",
            "/spec",
            "/spec/source/repoURL",
            "/spec/source/missing",
            "/status/sync/status",
            "/status/resources/0/kind",
            "/status/resources/1",
            "/status/resources/2",
            "/status/resources/-1",
            "/status/resources/+1",
            "/status/resources/01",
            "/status/resources/00",
            "/status/resources/1/x",
            "/a~1b",
            "/m~0n",
            "/~01",
            "/~1",
            "/~",
            "/~2",
            "/0",
            "/01",
            "/list/3/0",
            "/list/3/00",
            "/list/18446744073709551616",
            "spec",
            "#/spec",
            "/spec/",
            "/status/sync/status/deeper",
        ];
        for pointer in pointers {
            assert_eq!(doc.at(pointer), doc.pointer(pointer), "pointer {pointer:?}");
        }
        for scalar in [json!(null), json!(1), json!("s"), json!([]), json!({})] {
            for pointer in ["", "/", "/0", "/x"] {
                assert_eq!(
                    scalar.at(pointer),
                    scalar.pointer(pointer),
                    "{scalar} {pointer:?}"
                );
            }
        }
    }
}
