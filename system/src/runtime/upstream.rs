//! A JSON-over-HTTP client of one in-cluster server (Argo CD, the Git provider's API, the
//! source server), with one timeout per call and typed failures; shared by the runtime
//! components that call them (most only read; the GitOps operator also writes).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::Value;

use crate::env::SharedEnv;

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No answer within the timeout.
    #[error("{method} {path}: context deadline exceeded")]
    Deadline {
        /// The request method.
        method: http::Method,
        /// The request path.
        path: String,
    },
    /// A transport error or a body that is not the expected JSON.
    #[error("{method} {path}: {message}")]
    Failed {
        /// The request method.
        method: http::Method,
        /// The request path.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// A non-2xx answer.
    #[error("{method} {path}: {status}: {body}")]
    Status {
        /// The request method.
        method: http::Method,
        /// The request path.
        path: String,
        /// The status.
        status: http::StatusCode,
        /// The answer's body, as text.
        body: String,
        /// How long the server asked to be left alone: its `retry-after`, or the time to its
        /// `x-ratelimit-reset` when `x-ratelimit-remaining` is 0 (GitHub's rate limits).
        retry_after: Option<Duration>,
    },
}

impl CallError {
    /// How long the server asked the caller to wait before trying again, if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            CallError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// The longest wait a server can ask for: GitHub's primary limit resets within the hour.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// The wait a refusal's headers ask for at `now_ms` (Unix milliseconds): `retry-after` in
/// seconds, else the time to `x-ratelimit-reset` (Unix seconds) when
/// `x-ratelimit-remaining` is 0; at most [`MAX_RETRY_AFTER`]. An HTTP-date `retry-after`
/// is not read.
pub fn retry_after(headers: &http::HeaderMap, now_ms: u64) -> Option<Duration> {
    asked_wait(headers, now_ms).map(|wait| wait.min(MAX_RETRY_AFTER))
}

fn asked_wait(headers: &http::HeaderMap, now_ms: u64) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(seconds) = header("retry-after").and_then(|v| v.trim().parse::<u64>().ok()) {
        return Some(Duration::from_secs(seconds));
    }
    if header("x-ratelimit-remaining").map(str::trim) != Some("0") {
        return None;
    }
    let reset_s = header("x-ratelimit-reset")?.trim().parse::<u64>().ok()?;
    Some(Duration::from_millis(
        reset_s.saturating_mul(1000).saturating_sub(now_ms),
    ))
}

/// A JSON-over-HTTP client of one server.
pub struct Client {
    env: SharedEnv,
    http: crate::env::http::Client<Full<Bytes>>,
    addr: String,
    timeout: Duration,
}

impl Client {
    /// A client of `addr` (`host:port`); each call gets `timeout`.
    pub fn new(env: SharedEnv, addr: &str, timeout: Duration) -> Self {
        Client {
            http: crate::env::http::client(env.clone(), timeout * 2),
            env,
            addr: addr.into(),
            timeout,
        }
    }

    /// `GET path` with an optional bearer token: the JSON answer of a 2xx.
    pub async fn get(&self, path: String, token: Option<&str>) -> Result<Value, CallError> {
        self.send(http::Method::GET, path, token, None).await
    }

    /// `method path` with an optional bearer token and JSON body: the JSON answer of a 2xx.
    pub async fn send(
        &self,
        method: http::Method,
        path: String,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Value, CallError> {
        self.send_with(method, path, token, &[], body).await
    }

    /// As [`Client::send`], with more request headers (a webhook's delivery id).
    pub async fn send_with(
        &self,
        method: http::Method,
        path: String,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<Value, CallError> {
        let failed = |message: String| CallError::Failed {
            method: method.clone(),
            path: path.clone(),
            message,
        };
        let mut request = http::Request::builder()
            .method(method.clone())
            .uri(format!("http://{}{path}", self.addr));
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let payload = match body {
            Some(body) => {
                request = request.header("content-type", "application/json");
                Bytes::from(body.to_string())
            }
            None => Bytes::new(),
        };
        let request = request
            .body(Full::new(payload))
            .map_err(|e| failed(e.to_string()))?;
        let deadline = || CallError::Deadline {
            method: method.clone(),
            path: path.clone(),
        };
        let response = tokio::time::timeout(self.timeout, self.http.request(request))
            .await
            .map_err(|_| deadline())?
            .map_err(|e| failed(e.to_string()))?;
        let status = response.status();
        let wait = retry_after(response.headers(), self.env.unix_millis());
        let body = tokio::time::timeout(self.timeout, response.into_body().collect())
            .await
            .map_err(|_| deadline())?
            .map_err(|e| failed(e.to_string()))?
            .to_bytes();
        if !status.is_success() {
            return Err(CallError::Status {
                method: method.clone(),
                path: path.clone(),
                status,
                body: String::from_utf8_lossy(&body).into_owned(),
                retry_after: wait,
            });
        }
        serde_json::from_slice(&body).map_err(|e| failed(format!("invalid JSON: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> http::HeaderMap {
        let mut map = http::HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn a_refusal_names_its_wait_by_retry_after_or_an_exhausted_limits_reset() {
        let now_ms = 1_000_000_000_500;
        // A secondary limit's retry-after wins.
        let h = headers(&[("retry-after", "42"), ("x-ratelimit-reset", "1000000060")]);
        assert_eq!(retry_after(&h, now_ms), Some(Duration::from_secs(42)));
        // A primary limit: the time to the reset.
        let h = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1000000060"),
        ]);
        assert_eq!(retry_after(&h, now_ms), Some(Duration::from_millis(59_500)));
        // A reset already past: no wait.
        assert_eq!(retry_after(&h, 2_000_000_000_000), Some(Duration::ZERO));
        // Calls left, or no headers, or an unreadable one: nothing asked.
        let h = headers(&[
            ("x-ratelimit-remaining", "12"),
            ("x-ratelimit-reset", "1000000060"),
        ]);
        assert_eq!(retry_after(&h, now_ms), None);
        assert_eq!(retry_after(&http::HeaderMap::new(), now_ms), None);
        let h = headers(&[("retry-after", "Wed, 21 Oct 2026 07:28:00 GMT")]);
        assert_eq!(retry_after(&h, now_ms), None);
        // Absurd waits are capped at the hour.
        let h = headers(&[("retry-after", "18446744073709551615")]);
        assert_eq!(retry_after(&h, now_ms), Some(MAX_RETRY_AFTER));
        let h = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "18446744073709551615"),
        ]);
        assert_eq!(retry_after(&h, now_ms), Some(MAX_RETRY_AFTER));
    }
}
