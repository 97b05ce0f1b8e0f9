//! API scripts as data, and the runner that records what a server answered.
//!
//! A step's path and body may refer to earlier answers: `{ns}` is the script's namespace,
//! `{rv:N}` the `metadata.resourceVersion` of step N's answer (0-based), `{continue:N}`
//! its `metadata.continue`. Watches always carry `timeoutSeconds`, so every step ends.

use serde_json::Value;

use crate::cluster::{Cluster, ClusterError};

/// What one step sends.
#[derive(Clone, Debug)]
pub enum Step {
    /// One request/response exchange.
    Call {
        /// HTTP method.
        method: &'static str,
        /// Path and query, with placeholders.
        path: String,
        /// `content-type`, when there is a body.
        content_type: Option<&'static str>,
        /// Body text, with placeholders.
        body: Option<String>,
        /// Sent as `Impersonate-User` (a user with no RBAC grants), or `None` for the admin.
        user: Option<&'static str>,
    },
    /// A watch read until the server closes it at `timeoutSeconds`.
    Watch {
        /// Path and query (without `watch`/`timeoutSeconds`), with placeholders.
        path: String,
    },
    /// Wait before the next step (lets a real server's watch cache catch up).
    Pause {
        /// Milliseconds.
        millis: u64,
    },
}

/// Server-side timeout of a watch step whose path does not set `timeoutSeconds` itself.
pub const WATCH_SECONDS: u32 = 2;

/// A named sequence of steps exercising one API behaviour.
#[derive(Clone, Debug)]
pub struct Script {
    /// Unique name (also the snapshot file name).
    pub name: &'static str,
    /// What the script shows, one line.
    pub about: &'static str,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Keep `metadata.managedFields` in the transcript (server-side apply scripts).
    pub keep_managed_fields: bool,
    /// Leave out watch bookmarks whose RV is newer than every object of the script: on a
    /// real cluster other writes (kube-apiserver's own leases) move the RV at any moment, so
    /// whether such a bookmark comes is timing, not behaviour.
    pub ignore_newer_bookmarks: bool,
}

impl Script {
    /// An empty script.
    pub fn new(name: &'static str, about: &'static str) -> Self {
        Script {
            name,
            about,
            steps: Vec::new(),
            keep_managed_fields: false,
            ignore_newer_bookmarks: false,
        }
    }

    /// Leave out bookmarks newer than every object of the script (see the field).
    pub fn ignoring_newer_bookmarks(mut self) -> Self {
        self.ignore_newer_bookmarks = true;
        self
    }

    /// Compare `metadata.managedFields` too.
    pub fn with_managed_fields(mut self) -> Self {
        self.keep_managed_fields = true;
        self
    }

    fn call(
        mut self,
        method: &'static str,
        path: &str,
        content_type: Option<&'static str>,
        body: Option<String>,
    ) -> Self {
        self.steps.push(Step::Call {
            method,
            path: path.to_string(),
            content_type,
            body,
            user: None,
        });
        self
    }

    /// Makes the previous step a call by `user` (impersonated by the admin; the user has no
    /// RBAC grants, so authorization refuses it). Scripts are code: calling this after a
    /// step that is not a call is a bug in the script library, reported at once.
    pub fn as_user(mut self, user: &'static str) -> Self {
        match self.steps.last_mut() {
            Some(Step::Call { user: slot, .. }) => *slot = Some(user),
            _ => panic!("script {}: as_user must follow a call step", self.name),
        }
        self
    }

    /// `GET path`.
    pub fn get(self, path: &str) -> Self {
        self.call("GET", path, None, None)
    }

    /// `POST path` with a JSON body.
    pub fn post(self, path: &str, body: Value) -> Self {
        self.call(
            "POST",
            path,
            Some("application/json"),
            Some(body.to_string()),
        )
    }

    /// `PUT path` with a JSON body.
    pub fn put(self, path: &str, body: Value) -> Self {
        self.call(
            "PUT",
            path,
            Some("application/json"),
            Some(body.to_string()),
        )
    }

    /// `PATCH path` as a JSON merge patch.
    pub fn merge_patch(self, path: &str, body: Value) -> Self {
        self.call(
            "PATCH",
            path,
            Some("application/merge-patch+json"),
            Some(body.to_string()),
        )
    }

    /// `PATCH path` as a server-side apply (YAML body; JSON is valid YAML).
    pub fn apply(self, path: &str, body: Value) -> Self {
        self.call(
            "PATCH",
            path,
            Some("application/apply-patch+yaml"),
            Some(body.to_string()),
        )
    }

    /// A request with a raw body and content type (malformed-input scripts).
    pub fn raw(
        self,
        method: &'static str,
        path: &str,
        content_type: &'static str,
        body: &str,
    ) -> Self {
        self.call(method, path, Some(content_type), Some(body.to_string()))
    }

    /// `DELETE path`.
    pub fn delete(self, path: &str) -> Self {
        self.call("DELETE", path, None, None)
    }

    /// A watch on `path` (which may carry a query) until its server-side timeout.
    pub fn watch(mut self, path: &str) -> Self {
        self.steps.push(Step::Watch {
            path: path.to_string(),
        });
        self
    }

    /// Wait `millis` before the next step.
    pub fn pause(mut self, millis: u64) -> Self {
        self.steps.push(Step::Pause { millis });
        self
    }
}

/// What one step received.
#[derive(Clone, Debug)]
pub struct Exchange {
    /// `METHOD path` as written in the script (placeholders unresolved, so it compares across servers).
    pub request: String,
    /// HTTP status (0 for a pause).
    pub status: u16,
    /// The body (JSON), or for a watch an array of its events in order.
    pub body: Value,
}

/// A script's raw record on one server.
#[derive(Clone, Debug)]
pub struct Transcript {
    /// The script's name.
    pub script: &'static str,
    /// Namespace the script ran in.
    pub namespace: String,
    /// One exchange per step.
    pub exchanges: Vec<Exchange>,
}

/// Why a placeholder could not be resolved: a bug in a script, reported with its position.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// A placeholder refers to a step that has not run or has no such field.
    #[error("script {script}, step {step}: placeholder {{{placeholder}}} cannot be resolved")]
    Placeholder {
        /// Script name.
        script: &'static str,
        /// Step index.
        step: usize,
        /// The placeholder text.
        placeholder: String,
    },
    /// The cluster failed at the transport level.
    #[error("script {script}, step {step}: {source}")]
    Cluster {
        /// Script name.
        script: &'static str,
        /// Step index.
        step: usize,
        /// What failed.
        #[source]
        source: ClusterError,
    },
}

fn resolve(
    text: &str,
    script: &Script,
    step: usize,
    namespace: &str,
    done: &[Exchange],
) -> Result<String, ScriptError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let inner = &after[..end];
        let unresolved = || ScriptError::Placeholder {
            script: script.name,
            step,
            placeholder: inner.to_string(),
        };
        let value = match inner.split_once(':') {
            None if inner == "ns" => Some(namespace.to_string()),
            Some(("rv", n)) => n
                .parse::<usize>()
                .ok()
                .and_then(|n| done.get(n))
                .and_then(|e| e.body.pointer("/metadata/resourceVersion"))
                .and_then(Value::as_str)
                .map(str::to_string),
            Some(("continue", n)) => n
                .parse::<usize>()
                .ok()
                .and_then(|n| done.get(n))
                .and_then(|e| e.body.pointer("/metadata/continue"))
                .and_then(Value::as_str)
                .map(str::to_string),
            _ => {
                // Not a placeholder (e.g. a JSON brace): keep it.
                out.push('{');
                rest = after;
                continue;
            }
        };
        out.push_str(&value.ok_or_else(unresolved)?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Runs `script` on `cluster` in `namespace` (which must already exist on a real cluster).
pub async fn run(
    cluster: &Cluster,
    script: &Script,
    namespace: &str,
) -> Result<Transcript, ScriptError> {
    let mut exchanges: Vec<Exchange> = Vec::with_capacity(script.steps.len());
    for (index, step) in script.steps.iter().enumerate() {
        let cluster_error = |source| ScriptError::Cluster {
            script: script.name,
            step: index,
            source,
        };
        let exchange = match step {
            Step::Call {
                method,
                path: template,
                content_type,
                body,
                user,
            } => {
                let path = resolve(template, script, index, namespace, &exchanges)?;
                let body = body
                    .as_deref()
                    .map(|b| resolve(b, script, index, namespace, &exchanges))
                    .transpose()?;
                let answer = cluster
                    .send_as(
                        *user,
                        method,
                        &path,
                        *content_type,
                        body.map(String::into_bytes),
                    )
                    .await
                    .map_err(cluster_error)?;
                let parsed = answer.json();
                let body = if parsed.is_null() && !answer.body.is_empty() {
                    Value::String(String::from_utf8_lossy(&answer.body).into_owned())
                } else {
                    parsed
                };
                let request = match user {
                    Some(user) => format!("{method} {template} (as {user})"),
                    None => format!("{method} {template}"),
                };
                Exchange {
                    request,
                    status: answer.status,
                    body,
                }
            }
            Step::Watch { path: template } => {
                let path = resolve(template, script, index, namespace, &exchanges)?;
                let separator = if path.contains('?') { '&' } else { '?' };
                // A script may set its own timeoutSeconds (bookmark timing); otherwise WATCH_SECONDS.
                let full = if path.contains("timeoutSeconds=") {
                    format!("{path}{separator}watch=true")
                } else {
                    format!("{path}{separator}watch=true&timeoutSeconds={WATCH_SECONDS}")
                };
                let answer = cluster
                    .send("GET", &full, None, None)
                    .await
                    .map_err(cluster_error)?;
                let events: Vec<Value> = String::from_utf8_lossy(&answer.body)
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(|l| {
                        serde_json::from_str(l)
                            .unwrap_or_else(|_| Value::String(format!("<not JSON: {l}>")))
                    })
                    .collect();
                let body = if answer.status == 200 {
                    Value::Array(events)
                } else {
                    answer.json()
                };
                Exchange {
                    request: format!("WATCH {template}"),
                    status: answer.status,
                    body,
                }
            }
            Step::Pause { millis } => {
                tokio::time::sleep(std::time::Duration::from_millis(*millis)).await;
                Exchange {
                    request: format!("PAUSE {millis}ms"),
                    status: 0,
                    body: Value::Null,
                }
            }
        };
        exchanges.push(exchange);
    }
    Ok(Transcript {
        script: script.name,
        namespace: namespace.to_string(),
        exchanges,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(body: Value) -> Exchange {
        Exchange {
            request: String::new(),
            status: 200,
            body,
        }
    }

    #[test]
    fn placeholders_resolve_from_earlier_answers_and_json_braces_survive() {
        let script = Script::new("s", "t");
        let done = vec![exchange(
            serde_json::json!({"metadata": {"resourceVersion": "42", "continue": "tok"}}),
        )];
        let text = r#"{"metadata":{"resourceVersion":"{rv:0}"}} /api/{ns}?continue={continue:0}"#;
        assert_eq!(
            resolve(text, &script, 1, "n1", &done).unwrap(),
            r#"{"metadata":{"resourceVersion":"42"}} /api/n1?continue=tok"#
        );
    }

    #[test]
    fn an_unresolvable_placeholder_names_the_script_and_step() {
        let script = Script::new("s", "t");
        let error = resolve("{rv:3}", &script, 1, "n", &[])
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "script s, step 1: placeholder {rv:3} cannot be resolved"
        );
    }
}
