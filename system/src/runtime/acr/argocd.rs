//! The controller's HTTP clients: Argo CD's `GetChangeRevision` through the server's REST
//! gateway (`acr_controller/application/client.go`, bearer token) and, for hardened, the
//! Git provider's list-commits call. One timeout per call.

use std::time::Duration;

use serde_json::Value;

use crate::env::http::query_escape as q;
use crate::env::SharedEnv;
pub use crate::runtime::upstream::CallError;
use crate::runtime::upstream::Client;

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
