//! A JSON-over-HTTP `GET` client of one in-cluster server (Argo CD, the Git provider's
//! API, the source server), with one timeout per call and typed failures; shared by the
//! runtime components that only read.

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
    /// A transport error or a body that is not the expected JSON.
    #[error("GET {path}: {message}")]
    Failed {
        /// The request path.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// A non-2xx answer.
    #[error("GET {path}: {status}: {body}")]
    Status {
        /// The request path.
        path: String,
        /// The status.
        status: http::StatusCode,
        /// The answer's body, as text.
        body: String,
    },
}

/// A JSON-over-HTTP client of one server.
pub struct Client {
    http: crate::env::http::Client<Full<Bytes>>,
    addr: String,
    timeout: Duration,
}

impl Client {
    /// A client of `addr` (`host:port`); each call gets `timeout`.
    pub fn new(env: SharedEnv, addr: &str, timeout: Duration) -> Self {
        Client {
            http: crate::env::http::client(env, timeout * 2),
            addr: addr.into(),
            timeout,
        }
    }

    /// `GET path` with an optional bearer token: the JSON answer of a 2xx.
    pub async fn get(&self, path: String, token: Option<&str>) -> Result<Value, CallError> {
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
            return Err(CallError::Status {
                path: path.clone(),
                status,
                body: String::from_utf8_lossy(&body).into_owned(),
            });
        }
        serde_json::from_slice(&body).map_err(|e| failed(format!("invalid JSON: {e}")))
    }
}
