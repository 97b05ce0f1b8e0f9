//! The hardened controller's Git provider client: the newest commit touching an app's paths
//! from a revision (`GET /api/commits?repo=&sha=&paths=`, GitHub's list-commits call with a
//! path filter and `per_page=1`), for the first syncs the repo-server's API cannot answer.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::Value;

use super::CallError;
use crate::env::SharedEnv;

/// A client of the Git provider's API.
pub struct GitApi {
    http: crate::env::http::Client<Full<Bytes>>,
    addr: String,
    timeout: Duration,
}

fn q(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

impl GitApi {
    /// A client of the provider at `addr` (`host:port`).
    pub fn new(env: SharedEnv, addr: &str, timeout: Duration) -> Self {
        GitApi {
            http: crate::env::http::client(env, timeout * 2),
            addr: addr.into(),
            timeout,
        }
    }

    /// The newest commit from `sha` along its first parents that touched one of `paths`;
    /// `None` when none did. A 429 or 503 is an error (retried by the caller).
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
        let failed = |message: String| CallError::Failed {
            path: path.clone(),
            message,
        };
        let request = http::Request::get(format!("http://{}{path}", self.addr))
            .body(Full::new(Bytes::new()))
            .map_err(|e| failed(e.to_string()))?;
        let response = tokio::time::timeout(self.timeout, self.http.request(request))
            .await
            .map_err(|_| CallError::Deadline { path: path.clone() })?
            .map_err(|e| failed(e.to_string()))?;
        let status = response.status();
        let body = tokio::time::timeout(self.timeout, response.into_body().collect())
            .await
            .map_err(|_| CallError::Deadline { path: path.clone() })?
            .map_err(|e| failed(e.to_string()))?
            .to_bytes();
        if !status.is_success() {
            return Err(failed(format!(
                "{status}: {}",
                String::from_utf8_lossy(&body)
            )));
        }
        let answer: Value =
            serde_json::from_slice(&body).map_err(|e| failed(format!("invalid JSON: {e}")))?;
        Ok(answer
            .get(0)
            .and_then(|c| c.get("sha"))
            .and_then(Value::as_str)
            .map(str::to_string))
    }
}
