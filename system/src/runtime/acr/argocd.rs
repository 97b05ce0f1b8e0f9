//! The controller's HTTP clients: Argo CD's `GetChangeRevision` through the server's REST
//! gateway (`acr_controller/application/client.go`, bearer token) and, for hardened, the
//! Git provider's list-commits call. One timeout per call.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::Value;

use crate::env::http::query_escape as q;
use crate::env::SharedEnv;

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No answer within the timeout.
    #[error("GET {path}: context deadline exceeded")]
    Deadline {
        /// The request path.
        path: String,
    },
    /// A transport error, a non-2xx answer or a body that is not the expected JSON.
    #[error("GET {path}: {message}")]
    Failed {
        /// The request path.
        path: String,
        /// What went wrong.
        message: String,
    },
}

/// A JSON-over-HTTP client of one server.
struct Client {
    http: crate::env::http::Client<Full<Bytes>>,
    addr: String,
    timeout: Duration,
}

impl Client {
    fn new(env: SharedEnv, addr: &str, timeout: Duration) -> Self {
        Client {
            http: crate::env::http::client(env, timeout * 2),
            addr: addr.into(),
            timeout,
        }
    }

    /// `GET path` with an optional bearer token: the JSON answer of a 2xx.
    async fn get(&self, path: String, token: Option<&str>) -> Result<Value, CallError> {
        let failed = |message: String| CallError::Failed {
            path: path.clone(),
            message,
        };
        let mut request = http::Request::get(format!("http://{}{path}", self.addr));
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let request = request
            .body(Full::new(Bytes::new()))
            .map_err(|e| failed(e.to_string()))?;
        let deadline = || CallError::Deadline { path: path.clone() };
        let response = tokio::time::timeout(self.timeout, self.http.request(request))
            .await
            .map_err(|_| deadline())?
            .map_err(|e| failed(e.to_string()))?;
        let status = response.status();
        let body = tokio::time::timeout(self.timeout, response.into_body().collect())
            .await
            .map_err(|_| deadline())?
            .map_err(|e| failed(e.to_string()))?
            .to_bytes();
        if !status.is_success() {
            return Err(failed(format!(
                "{status}: {}",
                String::from_utf8_lossy(&body)
            )));
        }
        serde_json::from_slice(&body).map_err(|e| failed(format!("invalid JSON: {e}")))
    }
}

/// A client of one Argo CD server.
pub struct ArgoCd {
    client: Client,
    token: String,
}

impl ArgoCd {
    /// A client of the server at `addr` (`host:port`) with `token`.
    pub fn new(env: SharedEnv, addr: &str, token: &str, timeout: Duration) -> Self {
        ArgoCd {
            client: Client::new(env, addr, timeout),
            token: token.into(),
        }
    }

    /// `GET /api/v1/application/changeRevision?appName=&namespace=&currentRevision=&previousRevision=`:
    /// the change revision, or `None` when Argo CD found none (`{}`).
    pub async fn change_revision(
        &self,
        name: &str,
        namespace: &str,
        current: &str,
        previous: &str,
    ) -> Result<Option<String>, CallError> {
        let path = format!(
            "/api/v1/application/changeRevision?appName={}&namespace={}&currentRevision={}&previousRevision={}",
            q(name),
            q(namespace),
            q(current),
            q(previous)
        );
        let answer = self.client.get(path, Some(&self.token)).await?;
        Ok(answer
            .get("revision")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
            .map(str::to_string))
    }
}

/// hardened: a client of the Git provider's API, for the first syncs the repo-server's API
/// cannot answer (GitHub's `GET /repos/{o}/{r}/commits?sha=&path=&per_page=1`).
pub struct GitApi {
    client: Client,
}

impl GitApi {
    /// A client of the provider at `addr` (`host:port`).
    pub fn new(env: SharedEnv, addr: &str, timeout: Duration) -> Self {
        GitApi {
            client: Client::new(env, addr, timeout),
        }
    }

    /// `GET /api/commits?repo=&sha=&paths=`: the newest commit from `sha` along its first
    /// parents that touched one of `paths`; `None` when none did. A 429 or 503 is an error
    /// (retried by the caller).
    pub async fn newest_touching(
        &self,
        repo: &str,
        sha: &str,
        paths: &[String],
    ) -> Result<Option<String>, CallError> {
        let path = format!(
            "/api/commits?repo={}&sha={}&paths={}",
            q(repo),
            q(sha),
            q(&paths.join(";"))
        );
        let answer = self.client.get(path, None).await?;
        Ok(answer
            .get(0)
            .and_then(|c| c.get("sha"))
            .and_then(Value::as_str)
            .map(str::to_string))
    }
}
