//! The platform's API for clients in front of the runtimes:
//!
//! - `GET /api/permissions` with a user's bearer token → `{"user": …, "allow": [...]}` (401
//!   for an unknown token): what the app-proxy authorises operations with;
//! - `POST /api/runtimes` `{"account": …, "runtime": …}` with the admin token → `201
//!   {"name": "<account>-<runtime>", "token": …}`: registers a runtime and issues its token;
//! - `GET /api/runtimes` with the admin token → `{"connected": [<name>, …]}`: the runtimes
//!   whose tunnel is up now (sorted);
//! - `<any method> /api/runtimes/<name>/<path>` → forwarded to that runtime's request routing
//!   service through its tunnel as `/<path>` (503 when the runtime has no tunnel, 502/504
//!   when it breaks or stays silent). A client's `Idempotency-Key` becomes the request id,
//!   so a retried state-changing request runs at most once on the runtime.

use std::sync::Arc;

use http::{Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{json, Value};

use crate::env::http::{json, Body};
use crate::env::SharedEnv;
use crate::platform::registry::Registry;
use crate::platform::tunnel::TunnelServer;
use crate::tunnel::REQUEST_ID_HEADER;

/// Largest registration body.
const REGISTRATION_LIMIT: usize = 16 * 1024;

/// What the gateway needs.
pub struct Gateway {
    /// Token allowed to register runtimes.
    pub admin_token: String,
    /// Runtime registry (issues tokens).
    pub registry: Arc<Registry>,
    /// Live tunnels.
    pub tunnels: Arc<TunnelServer>,
    /// Users and their permissions.
    pub permissions: Arc<crate::platform::permissions::Permissions>,
}

impl Gateway {
    /// Answers one client request.
    pub async fn handle(&self, env: &SharedEnv, request: Request<Incoming>) -> Response<Body> {
        let path = request.uri().path().to_string();
        if path == "/healthz" {
            // Liveness and readiness: the gateway is serving.
            return json(StatusCode::OK, &json!({"status": "ok"}));
        }
        if path == "/api/runtimes" && request.method() == http::Method::POST {
            return self.register(env, request).await;
        }
        if path == "/api/runtimes" && request.method() == http::Method::GET {
            if !self.is_admin(&request) {
                return json(
                    StatusCode::UNAUTHORIZED,
                    &json!({"error": "listing runtimes needs the admin token"}),
                );
            }
            return json(
                StatusCode::OK,
                &json!({"connected": self.tunnels.connected()}),
            );
        }
        if path == "/api/permissions" {
            let token = request
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or("");
            return match self.permissions.lookup(token) {
                Some(answer) => json(StatusCode::OK, &answer),
                None => json(
                    StatusCode::UNAUTHORIZED,
                    &json!({"error": "unknown user token"}),
                ),
            };
        }
        let Some(rest) = path.strip_prefix("/api/runtimes/") else {
            return json(
                StatusCode::NOT_FOUND,
                &json!({"error": format!("no route for {path}")}),
            );
        };
        let (name, inner) = rest.split_once('/').unwrap_or((rest, ""));
        let query = request
            .uri()
            .query()
            .map(|q| format!("?{q}"))
            .unwrap_or_default();
        let Ok(uri) = format!("/{inner}{query}").parse::<Uri>() else {
            return json(StatusCode::BAD_REQUEST, &json!({"error": "malformed path"}));
        };
        let name = name.to_string();
        let (mut parts, body) = request.into_parts();
        parts.uri = uri;
        if let Some(key) = parts.headers.get("idempotency-key").cloned() {
            parts.headers.insert(REQUEST_ID_HEADER, key);
        }
        let forwarded = Request::from_parts(parts, body.map_err(std::io::Error::other).boxed());
        if env.buggify(crate::env::Point::GatewaySlowForward) {
            let pause = env.random_between(
                std::time::Duration::from_millis(500),
                std::time::Duration::from_secs(3),
            );
            env.sleep(pause).await;
        }
        self.tunnels.forward(env, &name, forwarded).await
    }

    fn is_admin(&self, request: &Request<Incoming>) -> bool {
        request
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            == Some(&format!("Bearer {}", self.admin_token))
    }

    async fn register(&self, env: &SharedEnv, request: Request<Incoming>) -> Response<Body> {
        if !self.is_admin(&request) {
            return json(
                StatusCode::UNAUTHORIZED,
                &json!({"error": "registering a runtime needs the admin token"}),
            );
        }
        let body = match http_body_util::Limited::new(request.into_body(), REGISTRATION_LIMIT)
            .collect()
            .await
        {
            Ok(collected) => collected.to_bytes(),
            Err(e) => {
                return json(
                    StatusCode::BAD_REQUEST,
                    &json!({"error": format!("reading the body: {e}")}),
                )
            }
        };
        let parsed: Value = match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                return json(
                    StatusCode::BAD_REQUEST,
                    &json!({"error": format!("the body is not JSON: {e}")}),
                )
            }
        };
        let valid = |field: &str| {
            parsed[field]
                .as_str()
                .filter(|s| {
                    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                })
                .map(str::to_string)
        };
        let (Some(account), Some(runtime)) = (valid("account"), valid("runtime")) else {
            return json(
                StatusCode::BAD_REQUEST,
                &json!({"error": "want {\"account\": <name>, \"runtime\": <name>} with [A-Za-z0-9-] names"}),
            );
        };
        let token = self.registry.register(env, &account, &runtime);
        json(
            StatusCode::CREATED,
            &json!({"name": format!("{account}-{runtime}"), "token": token}),
        )
    }
}

/// Serves the gateway on `addr`.
pub async fn run(env: SharedEnv, gateway: Arc<Gateway>, addr: &str) -> std::io::Result<()> {
    let listener = env.listen(addr).await?;
    serve(env, gateway, listener).await
}

/// Serves the gateway on an already bound listener.
pub async fn serve(
    env: SharedEnv,
    gateway: Arc<Gateway>,
    listener: Box<dyn crate::env::Listener>,
) -> std::io::Result<()> {
    crate::env::http::serve(listener, move |request, _peer| {
        let (env, gateway) = (env.clone(), gateway.clone());
        async move { gateway.handle(&env, request).await }
    })
    .await
}
