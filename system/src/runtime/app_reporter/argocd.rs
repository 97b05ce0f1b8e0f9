//! The reporter's Argo CD API client (research §1.6, `event_reporter/application/client.go`):
//! every call a `GET` with `Authorization: Bearer <ARGOCD_TOKEN>` and a 30 s timeout, on the
//! paths and query parameters the real reporter uses.

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use serde_json::Value;

use crate::env::http::query_escape as q;
use crate::env::{Point, SharedEnv};

/// Why a read failed; the processing rules treat each kind differently.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The call ran out of time ("context deadline exceeded"): aborts the app.
    #[error("GET {path}: context deadline exceeded")]
    Deadline {
        /// The request path.
        path: String,
    },
    /// Argo CD answered 404.
    #[error("GET {path}: not found: {message}")]
    NotFound {
        /// The request path.
        path: String,
        /// Argo CD's message.
        message: String,
    },
    /// Anything else: transport error, other status, invalid JSON.
    #[error("GET {path}: {message}")]
    Failed {
        /// The request path.
        path: String,
        /// What went wrong.
        message: String,
    },
}

impl ReadError {
    /// True for the deadline kind (aborts the app in the real reporter).
    pub fn is_deadline(&self) -> bool {
        matches!(self, ReadError::Deadline { .. })
    }

    /// True when Argo CD refused the reporter's token (401 or 403).
    pub fn is_refused(&self) -> bool {
        matches!(self, ReadError::Failed { message, .. }
            if message.starts_with("401 ") || message.starts_with("403 "))
    }

    /// True when asking again cannot help: the thing does not exist (404) or the request
    /// was refused as malformed or unprocessable (400, 422).
    pub fn is_permanent(&self) -> bool {
        match self {
            ReadError::NotFound { .. } => true,
            ReadError::Failed { message, .. } => {
                message.starts_with("400 ") || message.starts_with("422 ")
            }
            ReadError::Deadline { .. } => false,
        }
    }
}

/// A client of one Argo CD server.
pub struct ArgoCd {
    env: SharedEnv,
    http: crate::env::http::Client<Full<Bytes>>,
    addr: String,
    /// The bearer token; replaced when the hardened reporter sees its Secret change.
    token: std::sync::Mutex<String>,
    timeout: Duration,
}

/// Which app a call is about: name, `appNamespace`, `project`.
#[derive(Clone, Debug)]
pub struct AppRef {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace` (sent as `appNamespace`).
    pub namespace: String,
    /// `spec.project`.
    pub project: String,
}

impl AppRef {
    fn query(&self) -> String {
        format!(
            "appNamespace={}&project={}",
            q(&self.namespace),
            q(&self.project)
        )
    }
}

impl ArgoCd {
    /// A client of the Argo CD server at `addr` (`host:port`) with `token`.
    pub fn new(env: SharedEnv, addr: &str, token: &str, timeout: Duration) -> Self {
        ArgoCd {
            http: crate::env::http::client(env.clone(), timeout * 2),
            env,
            addr: addr.into(),
            token: std::sync::Mutex::new(token.into()),
            timeout,
        }
    }

    /// The bearer token calls use now.
    pub fn token(&self) -> String {
        self.token.lock().expect("token lock poisoned").clone()
    }

    /// Replaces the bearer token (a rotated `argocd-token` Secret).
    pub fn set_token(&self, token: &str) {
        *self.token.lock().expect("token lock poisoned") = token.to_string();
    }

    async fn get(&self, path: String) -> Result<Value, ReadError> {
        let failed = |message: String| ReadError::Failed {
            path: path.clone(),
            message,
        };
        if self.env.buggify(Point::ReporterArgocdReadFails) {
            return Err(failed("connection reset (fault point)".into()));
        }
        let request = Request::get(format!("http://{}{path}", self.addr))
            .header("authorization", format!("Bearer {}", self.token()))
            .body(Full::new(Bytes::new()))
            .map_err(|e| failed(e.to_string()))?;
        let response = tokio::time::timeout(self.timeout, self.http.request(request))
            .await
            .map_err(|_| ReadError::Deadline { path: path.clone() })?
            .map_err(|e| failed(e.to_string()))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| failed(e.to_string()))?
            .to_bytes();
        if status == http::StatusCode::NOT_FOUND {
            return Err(ReadError::NotFound {
                path: path.clone(),
                message: String::from_utf8_lossy(&body).into_owned(),
            });
        }
        if !status.is_success() {
            return Err(failed(format!(
                "{status}: {}",
                String::from_utf8_lossy(&body)
            )));
        }
        serde_json::from_slice(&body).map_err(|e| failed(format!("invalid JSON: {e}")))
    }

    /// `GET /api/v1/applications/{name}?appNamespace=` (a parent app).
    pub async fn application(&self, name: &str, namespace: &str) -> Result<Value, ReadError> {
        self.get(format!(
            "/api/v1/applications/{}?appNamespace={}",
            q(name),
            q(namespace)
        ))
        .await
    }

    /// `GET …/resource-tree?appNamespace=&project=`.
    pub async fn resource_tree(&self, app: &AppRef) -> Result<Value, ReadError> {
        self.get(format!(
            "/api/v1/applications/{}/resource-tree?{}",
            q(&app.name),
            app.query()
        ))
        .await
    }

    /// `GET …/manifests?appNamespace=&project=[&revision=]` (latest target when `None`).
    pub async fn manifests(
        &self,
        app: &AppRef,
        revision: Option<&str>,
    ) -> Result<Value, ReadError> {
        let revision = revision
            .map(|r| format!("&revision={}", q(r)))
            .unwrap_or_default();
        self.get(format!(
            "/api/v1/applications/{}/manifests?{}{revision}",
            q(&app.name),
            app.query()
        ))
        .await
    }

    /// `GET …/revisions/{rev}/metadata?appNamespace=&project=&sourceIndex=`.
    pub async fn revision_metadata(
        &self,
        app: &AppRef,
        revision: &str,
        source_index: usize,
    ) -> Result<Value, ReadError> {
        self.get(format!(
            "/api/v1/applications/{}/revisions/{}/metadata?{}&sourceIndex={source_index}",
            q(&app.name),
            q(revision),
            app.query()
        ))
        .await
    }

    /// `GET …/resource?appNamespace=&namespace=&resourceName=&version=&group=&kind=&project=`
    /// for one `status.resources[]` entry.
    pub async fn resource(&self, app: &AppRef, res: &Value) -> Result<Value, ReadError> {
        let field = |f: &str| q(res.get(f).and_then(Value::as_str).unwrap_or(""));
        self.get(format!(
            "/api/v1/applications/{}/resource?appNamespace={}&namespace={}&resourceName={}&version={}&group={}&kind={}&project={}",
            q(&app.name),
            q(&app.namespace),
            field("namespace"),
            field("name"),
            field("version"),
            field("group"),
            field("kind"),
            q(&app.project)
        ))
        .await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(super::q("a b/c&d"), "a%20b%2Fc%26d");
        assert_eq!(super::q("plain-name_1.x"), "plain-name_1.x");
    }
}
