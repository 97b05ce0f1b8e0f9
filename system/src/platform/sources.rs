//! The control plane's shared state, as the gateway, the GitOps API and the anti-entropy
//! job read and act through it, and the one way they reach a runtime ([`deliver`]).
//!
//! A room of its own, below all three, so that none of them depends on another to share it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use serde_json::{json, Value};

use crate::core::secret::TokenDigest;
use crate::env::http::{json, Body};
use crate::env::SharedEnv;
use crate::platform::audit::Audit;
use crate::platform::registry::Registry;
use crate::platform::tunnel::TunnelServer;

/// What the gateway and the GitOps API read and act through.
pub struct Sources {
    /// Runtime registry (issues tokens; knows each runtime's access mode and cluster).
    pub registry: Arc<Registry>,
    /// Live tunnels.
    pub tunnels: Arc<TunnelServer>,
    /// Users and their permissions.
    pub permissions: Arc<crate::platform::permissions::Permissions>,
    /// Where mutating requests and denials are recorded.
    pub audit: Arc<Audit>,
    /// What the runtime monitor shows about each runtime.
    pub health: Arc<crate::platform::monitor::Monitor>,
    /// The events path's read models, for the GitOps API (`None`: this process runs no
    /// events path; the API then knows no applications).
    pub events: Option<Arc<crate::platform::events::Platform>>,
    /// Reaches runtimes in ingress mode.
    pub ingress: crate::env::http::Client<Body>,
    /// The promotion orchestrator's releases, for the GitOps API (empty when no
    /// orchestrator runs in this process).
    pub releases: crate::platform::promotions::Releases,
    /// The anti-entropy job's short-lived tokens (known only at `GET /api/permissions`).
    pub job_tokens: Arc<JobTokens>,
}

/// Sends `request` (its path the runtime's own) to runtime `name`: through its tunnel, or
/// to its ingress host for a runtime in ingress mode. A clear 502/503/504 when it cannot.
pub(crate) async fn deliver(
    env: &SharedEnv,
    sources: &Sources,
    name: &str,
    request: Request<Body>,
) -> Response<Body> {
    let info = sources.registry.info(name);
    if info.access_mode != crate::platform::registry::AccessMode::Ingress {
        return sources.tunnels.forward(env, name, request).await;
    }
    let (mut parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let Ok(uri) = format!("http://{}{path}", info.ingress_host).parse::<Uri>() else {
        return json(
            StatusCode::BAD_GATEWAY,
            &json!({"error": format!("runtime {name}'s ingress host {:?} is not a host:port", info.ingress_host)}),
        );
    };
    parts.uri = uri;
    match sources
        .ingress
        .request(Request::from_parts(parts, body))
        .await
    {
        Ok(response) => response.map(|body| body.map_err(std::io::Error::other).boxed()),
        Err(e) => json(
            StatusCode::BAD_GATEWAY,
            &json!({"error": format!("runtime {name}'s ingress {}: {e}", info.ingress_host)}),
        ),
    }
}

/// The name the job's calls carry as their user.
pub const USER: &str = "platform:anti-entropy";

/// The tokens the job's passes hold, each good for one runtime's listing.
#[derive(Debug, Default)]
pub struct JobTokens {
    /// By the token's digest: the token itself is handed out once and never kept.
    tokens: Mutex<BTreeMap<TokenDigest, JobGrant>>,
}

#[derive(Clone, Debug)]
struct JobGrant {
    account: String,
    runtime: String,
    expires_ms: u64,
}

impl JobTokens {
    /// A fresh token letting its holder read `account`'s runtime `runtime`'s applications
    /// until `ttl` from now.
    pub fn mint(&self, env: &SharedEnv, account: &str, runtime: &str, ttl: Duration) -> String {
        let token = format!(
            "platform-job-{:016x}{:016x}",
            env.random_u64(),
            env.random_u64()
        );
        let expires_ms = env
            .unix_millis()
            .saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        let mut tokens = self.tokens.lock().expect("job tokens lock");
        // Tokens of passes that ended without revoking (a stopped task) go here.
        let now = env.unix_millis();
        tokens.retain(|_, grant| grant.expires_ms > now);
        tokens.insert(
            TokenDigest::of(&token),
            JobGrant {
                account: account.into(),
                runtime: runtime.into(),
                expires_ms,
            },
        );
        token
    }

    /// Ends `token` before its time.
    pub fn revoke(&self, token: &str) {
        self.tokens
            .lock()
            .expect("job tokens lock")
            .remove(&TokenDigest::of(token));
    }

    /// The `GET /api/permissions` answer for `token` at `now_ms`, if it is a live job token.
    pub fn answer(&self, token: &str, now_ms: u64) -> Option<Value> {
        let grant = self
            .tokens
            .lock()
            .expect("job tokens lock")
            .get(&TokenDigest::of(token))
            .filter(|g| now_ms < g.expires_ms)
            .cloned()?;
        Some(json!({
            "user": USER,
            "account": grant.account,
            "allow": ["applications:read"],
            "rules": [{"actions": ["applications:read"], "runtimes": [grant.runtime]}],
            "expiresAt": grant.expires_ms,
        }))
    }
}
