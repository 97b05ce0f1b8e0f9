//! App versions from Git: a `versionSource {file, jsonPath}` read at a revision, as the fork's
//! repo-server does (`pkg/version_config_manager`, research §4.3). The default is
//! `Chart.yaml` / `$.appVersion`; a Product's PromotionTemplate may name another file and
//! path (looked up once promotions exist, issue 15).

use std::collections::BTreeMap;

use serde_json::{json, Value};

/// Where an app's version is read from: a file under the app's path and a JSONPath in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionSource {
    /// File relative to the app's source path (`Chart.yaml`).
    pub file: String,
    /// JSONPath into the parsed file (`$.appVersion`): `$`, then `.key` or `[index]` steps.
    pub json_path: String,
}

impl Default for VersionSource {
    fn default() -> Self {
        VersionSource {
            file: "Chart.yaml".into(),
            json_path: "$.appVersion".into(),
        }
    }
}

/// Why a version could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    /// The JSONPath is not one this reader understands.
    #[error("versionSource.jsonPath {path:?}: {reason}")]
    BadPath {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The file is not YAML.
    #[error("versionSource.file {file}: not YAML: {reason}")]
    BadFile {
        /// The file.
        file: String,
        /// The parser's message.
        reason: String,
    },
}

/// One step of a JSONPath.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

fn steps(path: &str) -> Result<Vec<Step>, VersionError> {
    let bad = |reason: &str| VersionError::BadPath {
        path: path.into(),
        reason: reason.into(),
    };
    let mut rest = path
        .trim()
        .strip_prefix('$')
        .ok_or_else(|| bad("must start with $"))?;
    let mut out = Vec::new();
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            if end == 0 {
                return Err(bad("empty key after ."));
            }
            out.push(Step::Key(after[..end].to_string()));
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']').ok_or_else(|| bad("unclosed ["))?;
            let inner = after[..end].trim();
            let step = if let Ok(index) = inner.parse::<usize>() {
                Step::Index(index)
            } else if let Some(key) = inner
                .strip_prefix('\'')
                .and_then(|k| k.strip_suffix('\''))
                .or_else(|| inner.strip_prefix('"').and_then(|k| k.strip_suffix('"')))
            {
                Step::Key(key.to_string())
            } else {
                return Err(bad("[…] takes an index or a quoted key"));
            };
            out.push(step);
            rest = &after[end + 1..];
        } else {
            return Err(bad("expected . or ["));
        }
    }
    Ok(out)
}

/// The value at `json_path` in a YAML document, as text (`None` when absent or not a scalar).
pub fn lookup(yaml: &str, file: &str, json_path: &str) -> Result<Option<String>, VersionError> {
    let steps = steps(json_path)?;
    let document: Value = serde_saphyr::from_str(yaml).map_err(|e| VersionError::BadFile {
        file: file.into(),
        reason: e.to_string(),
    })?;
    let mut at = &document;
    for step in &steps {
        at = match step {
            Step::Key(key) => match at.get(key) {
                Some(v) => v,
                None => return Ok(None),
            },
            Step::Index(index) => match at.get(index) {
                Some(v) => v,
                None => return Ok(None),
            },
        };
    }
    Ok(match at {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    })
}

/// The fork's `applicationVersions` for an app whose files at a revision are `files`
/// (path → content) under `app_path`: `{appVersion, dependencies}` when the version file
/// exists and holds the value, `null` otherwise ([inferred] the fork omits the field then).
pub fn application_versions(
    files: &BTreeMap<String, String>,
    app_path: &str,
    source: &VersionSource,
) -> Result<Value, VersionError> {
    let dir = app_path.trim_end_matches('/');
    let file = if dir.is_empty() {
        source.file.clone()
    } else {
        format!("{dir}/{}", source.file)
    };
    let Some(text) = files.get(&file) else {
        return Ok(Value::Null);
    };
    Ok(match lookup(text, &file, &source.json_path)? {
        Some(version) => json!({"appVersion": version, "dependencies": {}}),
        None => Value::Null,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_reads_app_version_from_chart_yaml() {
        let files = BTreeMap::from([
            (
                "apps/a/Chart.yaml".to_string(),
                "apiVersion: v2\nname: a\nappVersion: \"1.4.2\"\n".to_string(),
            ),
            (
                "apps/a/deployment.yaml".to_string(),
                "kind: Deployment\n".to_string(),
            ),
        ]);
        let versions = application_versions(&files, "apps/a", &VersionSource::default()).unwrap();
        assert_eq!(versions, json!({"appVersion": "1.4.2", "dependencies": {}}));
        // No version file, or no value at the path: no versions.
        assert_eq!(
            application_versions(&files, "apps/b", &VersionSource::default()).unwrap(),
            Value::Null
        );
        let other = VersionSource {
            file: "Chart.yaml".into(),
            json_path: "$.version".into(),
        };
        assert_eq!(
            application_versions(&files, "apps/a", &other).unwrap(),
            Value::Null
        );
    }

    #[test]
    fn paths_take_keys_indexes_and_quoted_keys() {
        let yaml = "image:\n  tags: [\"1.0\", 2]\n  \"my.key\": x\nflag: true\n";
        assert_eq!(
            lookup(yaml, "f", "$.image.tags[0]").unwrap(),
            Some("1.0".into())
        );
        assert_eq!(
            lookup(yaml, "f", "$.image.tags[1]").unwrap(),
            Some("2".into())
        );
        assert_eq!(
            lookup(yaml, "f", "$.image['my.key']").unwrap(),
            Some("x".into())
        );
        assert_eq!(lookup(yaml, "f", "$.flag").unwrap(), Some("true".into()));
        assert_eq!(lookup(yaml, "f", "$.image").unwrap(), None, "not a scalar");
        assert_eq!(lookup(yaml, "f", "$.missing.deeper").unwrap(), None);
    }

    #[test]
    fn bad_paths_and_files_are_named_errors() {
        for (path, reason) in [
            ("appVersion", "must start with $"),
            ("$..x", "empty key"),
            ("$.a[", "unclosed"),
            ("$.a[x]", "index or a quoted key"),
            ("$a", "expected . or ["),
        ] {
            let err = lookup("a: 1", "Chart.yaml", path).unwrap_err().to_string();
            assert!(err.contains(reason) && err.contains(path), "{path}: {err}");
        }
        let err = lookup("a: [1", "Chart.yaml", "$.a")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("versionSource.file Chart.yaml: not YAML"),
            "{err}"
        );
    }
}
