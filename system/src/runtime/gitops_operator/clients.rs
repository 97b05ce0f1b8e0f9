//! The operator's HTTP clients: the Git provider's API (contents, commits, pull requests,
//! compare; the simulated provider's and `orrery serve git`'s routes, shaped after
//! GitHub's) and Argo CD's application API (bearer token).

use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::core::json::Pointer as _;
use crate::env::http::query_escape as q;
use crate::env::SharedEnv;
pub use crate::runtime::upstream::CallError;
use crate::runtime::upstream::Client;

/// A file as the provider answers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct File {
    /// Its content.
    pub content: String,
    /// Its blob SHA (the precondition of a write that replaces it).
    pub blob: String,
}

/// A pull request's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pull {
    /// Its number.
    pub number: u64,
    /// `open` or `closed`.
    pub open: bool,
    /// The merge commit, once merged.
    pub merge_commit: Option<String>,
}

/// A client of the Git provider's API.
pub struct Git {
    client: Client,
}

/// Whether a failed call is worth trying again (no answer, 5xx, 429, 409 after a
/// concurrent write) rather than a refusal that will not change.
pub fn transient(error: &CallError) -> bool {
    match error {
        CallError::Status { status, .. } => {
            status.is_server_error()
                || *status == StatusCode::TOO_MANY_REQUESTS
                || *status == StatusCode::CONFLICT
                || *status == StatusCode::FORBIDDEN && error.retry_after().is_some()
        }
        _ => true,
    }
}

fn status_of(error: &CallError) -> Option<StatusCode> {
    match error {
        CallError::Status { status, .. } => Some(*status),
        _ => None,
    }
}

impl Git {
    /// A client of the provider at `addr` (`host:port`).
    pub fn new(env: SharedEnv, addr: &str, timeout: Duration) -> Self {
        Git {
            client: Client::new(env, addr, timeout),
        }
    }

    /// `path` at `rev` (a branch or SHA); `None` when it does not exist there.
    pub async fn contents(
        &self,
        repo: &str,
        path: &str,
        rev: &str,
    ) -> Result<Option<File>, CallError> {
        let url = format!(
            "/api/contents?repo={}&path={}&ref={}",
            q(repo),
            q(path),
            q(rev)
        );
        match self.client.get(url, None).await {
            Ok(answer) => Ok(Some(File {
                content: answer["content"].as_str().unwrap_or_default().to_string(),
                blob: answer["sha"].as_str().unwrap_or_default().to_string(),
            })),
            Err(e) if status_of(&e) == Some(StatusCode::NOT_FOUND) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Commits `content` to `path` on `branch`; with `expected`, only if the file's blob is
    /// still that one (`""`: absent), else 409. Returns the commit's SHA.
    pub async fn commit(
        &self,
        repo: &str,
        branch: &str,
        path: &str,
        content: &str,
        message: &str,
        expected: Option<&str>,
    ) -> Result<String, CallError> {
        let mut body = json!({"repo": repo, "branch": branch, "path": path, "content": content,
            "message": message, "author": "gitops-operator"});
        if let Some(expected) = expected {
            body["sha"] = json!(expected);
        }
        let answer = self
            .client
            .send(Method::POST, "/api/commits".into(), None, Some(&body))
            .await?;
        Ok(answer["sha"].as_str().unwrap_or_default().to_string())
    }

    /// The newest commit on `main` that touched `path` (`None`: none did).
    pub async fn last_change(&self, repo: &str, path: &str) -> Result<Option<String>, CallError> {
        let url = format!(
            "/api/commits?repo={}&sha=main&paths={}",
            q(repo),
            q(&format!("/{path}"))
        );
        let answer = self.client.get(url, None).await?;
        Ok(answer[0]["sha"].as_str().map(str::to_string))
    }

    /// Opens a pull request from `head` into `main`: its number, or the 422 answer's error.
    pub async fn open_pull(&self, repo: &str, head: &str, title: &str) -> Result<u64, CallError> {
        let body = json!({"repo": repo, "head": head, "base": "main", "title": title,
            "author": "gitops-operator"});
        let answer = self
            .client
            .send(Method::POST, "/api/pulls".into(), None, Some(&body))
            .await?;
        Ok(answer["number"].as_u64().unwrap_or_default())
    }

    /// The pull requests of `repo` whose head is `head` (every state), oldest first.
    pub async fn pulls_from(&self, repo: &str, head: &str) -> Result<Vec<Pull>, CallError> {
        let answer = self
            .client
            .get(format!("/api/pulls?repo={}&state=all", q(repo)), None)
            .await?;
        Ok(answer
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["head"] == head)
            .map(|p| Pull {
                number: p["number"].as_u64().unwrap_or_default(),
                open: p["state"] == "open",
                merge_commit: p["merge_commit_sha"].as_str().map(str::to_string),
            })
            .collect())
    }

    /// Whether `head` contains `base` (`identical` or `ahead`).
    pub async fn contains(&self, repo: &str, head: &str, base: &str) -> Result<bool, CallError> {
        let answer = self
            .client
            .get(
                format!(
                    "/api/compare?repo={}&base={}&head={}",
                    q(repo),
                    q(base),
                    q(head)
                ),
                None,
            )
            .await?;
        Ok(matches!(
            answer["status"].as_str(),
            Some("identical" | "ahead")
        ))
    }
}

/// An Application as the operator needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct App {
    /// `spec.source.repoURL`.
    pub repo: String,
    /// `spec.source.path`.
    pub path: String,
    /// `status.sync.status`.
    pub sync: String,
    /// `status.health.status`.
    pub health: String,
    /// `status.sync.revision`.
    pub revision: String,
}

impl App {
    /// `file` (relative to the app's path) as a repository path.
    pub fn file(&self, file: &str) -> String {
        let dir = self.path.trim_matches('/');
        if dir.is_empty() {
            file.to_string()
        } else {
            format!("{dir}/{file}")
        }
    }
}

/// A client of Argo CD's server.
pub struct ArgoCd {
    client: Client,
    token: String,
}

impl ArgoCd {
    /// A client of the server at `addr` with `token`.
    pub fn new(env: SharedEnv, addr: &str, token: &str, timeout: Duration) -> Self {
        ArgoCd {
            client: Client::new(env, addr, timeout),
            token: token.into(),
        }
    }

    /// `GET /api/v1/applications/{name}`; `None` when Argo CD has no such app.
    pub async fn app(&self, name: &str) -> Result<Option<App>, CallError> {
        let answer = match self
            .client
            .get(
                format!("/api/v1/applications/{}", q(name)),
                Some(&self.token),
            )
            .await
        {
            Ok(answer) => answer,
            Err(e) if status_of(&e) == Some(StatusCode::NOT_FOUND) => return Ok(None),
            Err(e) => return Err(e),
        };
        let text = |pointer: &str| {
            answer
                .at(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        Ok(Some(App {
            repo: text("/spec/source/repoURL"),
            path: text("/spec/source/path"),
            sync: text("/status/sync/status"),
            health: text("/status/health/status"),
            revision: text("/status/sync/revision"),
        }))
    }
}
