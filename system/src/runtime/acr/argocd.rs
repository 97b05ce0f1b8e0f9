//! The controller's Argo CD client: `GetChangeRevision` through the server's REST gateway
//! (`acr_controller/application/client.go`), bearer token, one timeout per call.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::Value;

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

/// A client of one Argo CD server.
pub struct ArgoCd {
    http: crate::env::http::Client<Full<Bytes>>,
    addr: String,
    token: String,
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

impl ArgoCd {
    /// A client of the server at `addr` (`host:port`) with `token`.
    pub fn new(env: SharedEnv, addr: &str, token: &str, timeout: Duration) -> Self {
        ArgoCd {
            http: crate::env::http::client(env, timeout * 2),
            addr: addr.into(),
            token: token.into(),
            timeout,
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
        let failed = |message: String| CallError::Failed {
            path: path.clone(),
            message,
        };
        let request = http::Request::get(format!("http://{}{path}", self.addr))
            .header("authorization", format!("Bearer {}", self.token))
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
            .get("revision")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
            .map(str::to_string))
    }
}
