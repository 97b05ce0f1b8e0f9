//! The platform's API for clients in front of the runtimes. Every path is normalised first
//! ([`path`]: `..`, `.`, doubled slashes, escapes; a hidden separator or a climb above the
//! root is refused with 400), and every mutating request and every denial is written to the
//! [`Audit`] log.
//!
//! - `POST /2.0/api/graphql` with a user's bearer token: the GitOps API
//!   ([`crate::platform::graphql`]); 401 without a user's token, 403 for a user in no
//!   account;
//! - `GET /api/permissions` with a user's bearer token → `{"user": …, "account": …,
//!   "allow": [...], "role"?, "rules"?}` (401 for an unknown token): what the app-proxy
//!   authorises operations with ([`crate::platform::permissions::answer_allows`]);
//! - `POST /api/runtimes` `{"account": …, "runtime": …, "kind"?, "accessMode"?,
//!   "runtimeVersion"?, "cluster"?, "ingressHost"?}` with the admin token → `201 {"name":
//!   "<account>-<runtime>", "token": …, "rotated": bool}`: registers a runtime and issues its
//!   token. Registering it again rotates the token: the old one stops working at once and the
//!   runtime's open tunnel is closed. A name another account's runtime holds is refused
//!   (409);
//! - `GET /api/runtimes` with the admin token → `{"connected": [<name>, …], "health":
//!   {<name>: {"status", "since", "reason"}}}`: the runtimes whose tunnel is up now (sorted)
//!   and what the runtime monitor shows for each (`Healthy`, `Unable to communicate`);
//! - `GET /api/audit?after=<seq>&limit=<n>` → `{"entries": [...]}`: the admin sees every
//!   entry; an account's admin, or a member with an `audit:read` rule, their account's;
//! - `<any method> /api/runtimes/<name>/<path>` with the bearer token of a user of the
//!   runtime's account whose rules cover that runtime → forwarded to that runtime's request
//!   routing service as `/<path>`, through its tunnel (503 when it has none, 502/504 when it
//!   breaks or stays silent) or to its ingress host in ingress mode (502 when unreachable).
//!   No token or an unknown one → 401; a user in no account → 403; a runtime that is not
//!   the user's account's (another tenant's, or none) or that no rule of theirs covers →
//!   404, never forwarded. The one exception is a `POST` to `webhooks/…`, a Git provider's
//!   signed delivery, forwarded without a user token to the runtime, whose webhook source
//!   checks the signature. A user's `Idempotency-Key` becomes the request id
//!   (`<user>/<key>`; one a client sends as the request id itself is dropped), so a retried
//!   state-changing request runs at most once on the runtime.

pub mod path;

pub use crate::platform::sources::Sources;

use std::sync::Arc;

use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{json, Value};

use crate::core::secret::TokenDigest;
use crate::env::http::{json, Body};
use crate::env::SharedEnv;
use crate::platform::audit::{Actor, Outcome, Record};
use crate::platform::permissions::User;
use crate::tunnel::REQUEST_ID_HEADER;

/// Audit entries one `GET /api/audit` returns unless it asks for fewer.
const AUDIT_PAGE: usize = 100;

/// What the gateway needs.
pub struct Gateway {
    /// The digest of the token allowed to register runtimes (the token is not kept).
    admin: TokenDigest,
    /// The control plane's state and the tunnels it reaches runtimes through.
    pub sources: Arc<Sources>,
    /// The GitOps API's schema, built with the first request's limits (depth, complexity).
    schema: std::sync::OnceLock<crate::platform::graphql::ApiSchema>,
    /// Requests in flight by token digest (`gateway.requests-per-token`): every route counts.
    in_flight: std::sync::OnceLock<crate::env::limits::Slots>,
}

impl Gateway {
    /// A gateway over `sources`, registering runtimes for `admin_token`.
    pub fn new(admin_token: String, sources: Sources) -> Self {
        Gateway {
            admin: TokenDigest::of(&admin_token),
            sources: Arc::new(sources),
            schema: std::sync::OnceLock::new(),
            in_flight: std::sync::OnceLock::new(),
        }
    }
}

/// Who is asking, from the `Authorization` header.
enum Caller {
    /// No `Authorization: Bearer …` header.
    Nobody,
    /// A bearer token the platform does not know, or one that expired: why it is refused,
    /// and for an expired one its user's account (whose audit log shows the attempt).
    Unknown {
        /// The reason the caller gets.
        why: String,
        /// The expired token's account, or empty.
        account: String,
    },
    /// The admin token.
    Admin,
    /// A user's token.
    User(User),
}

impl Caller {
    fn actor(&self) -> Actor {
        match self {
            Caller::Nobody | Caller::Unknown { .. } => Actor::Anonymous,
            Caller::Admin => Actor::Admin,
            Caller::User(user) => Actor::User {
                name: user.name.clone(),
            },
        }
    }

    fn account(&self) -> String {
        match self {
            Caller::User(user) => user.account.clone().unwrap_or_default(),
            Caller::Unknown { account, .. } => account.clone(),
            _ => String::new(),
        }
    }
}

/// One request's facts the audit log needs.
struct Seen {
    caller: Caller,
    action: String,
}

impl Gateway {
    /// Answers one client request.
    pub async fn handle(&self, env: &SharedEnv, request: Request<Incoming>) -> Response<Body> {
        // Counted by the token's digest: the token itself is not kept.
        let _slot = match bearer(&request) {
            Some(token) => {
                let limit = env.limits().requests_per_token;
                let in_flight = self
                    .in_flight
                    .get_or_init(|| crate::env::limits::Slots::new(limit));
                match in_flight.take(&TokenDigest::of(token).hex()) {
                    Some(slot) => Some(slot),
                    None => {
                        return json(
                            StatusCode::TOO_MANY_REQUESTS,
                            &json!({"error": format!(
                                "this token already has {} requests in flight (gateway.requests-per-token)",
                                in_flight.max
                            )}),
                        )
                    }
                }
            }
            None => None,
        };
        let caller = self.caller(env, &request);
        let method = request.method().clone();
        let path = match path::normalise(request.uri().path()) {
            Ok(path) => path,
            Err(error) => {
                let seen = Seen {
                    caller,
                    action: format!("{method} {}", request.uri().path()),
                };
                return self.deny(env, &seen, "", StatusCode::BAD_REQUEST, error.to_string());
            }
        };
        let seen = Seen {
            caller,
            action: format!("{method} {path}"),
        };
        match (&method, path.as_str()) {
            // Liveness and readiness: the gateway is serving.
            (_, "/healthz") => json(StatusCode::OK, &json!({"status": "ok"})),
            (&Method::POST, "/api/runtimes") => self.register(env, &seen, request).await,
            (&Method::POST, "/2.0/api/graphql") => self.graphql(env, &seen, request).await,
            (&Method::GET, "/api/runtimes") => match seen.caller {
                Caller::Admin => json(
                    StatusCode::OK,
                    &json!({"connected": self.sources.tunnels.connected(), "health": self.health_shown()}),
                ),
                _ => self.deny(
                    env,
                    &seen,
                    "",
                    StatusCode::UNAUTHORIZED,
                    "listing runtimes needs the admin token",
                ),
            },
            (_, "/api/permissions") => {
                // The anti-entropy job's token (a runtime's app-proxy asking what it may do).
                if let Some(answer) = bearer(&request)
                    .and_then(|token| self.sources.job_tokens.answer(token, env.unix_millis()))
                {
                    return json(StatusCode::OK, &answer);
                }
                if let Caller::Unknown { why, .. } = &seen.caller {
                    // An expired token is refused to the app-proxy too.
                    let why = why.clone();
                    return self.deny(env, &seen, "", StatusCode::UNAUTHORIZED, why);
                }
                let token = bearer(&request).unwrap_or_default();
                match self.sources.permissions.lookup(token) {
                    Some(answer) => json(StatusCode::OK, &answer),
                    None => self.deny(
                        env,
                        &seen,
                        "",
                        StatusCode::UNAUTHORIZED,
                        "unknown user token",
                    ),
                }
            }
            (&Method::GET, "/api/audit") => self.audit_log(env, &seen, request.uri()),
            (_, forwarded) => match forwarded.strip_prefix("/api/runtimes/") {
                Some(rest) => {
                    let (name, inner) = rest.split_once('/').unwrap_or((rest, ""));
                    let (name, inner) = (name.to_string(), inner.to_string());
                    self.forward(env, &seen, request, &name, &inner).await
                }
                None => self.deny(
                    env,
                    &seen,
                    "",
                    StatusCode::NOT_FOUND,
                    format!("no route for {method} {path}"),
                ),
            },
        }
    }

    /// What the runtime monitor shows, by runtime: `{"status", "since", "reason"}`.
    fn health_shown(&self) -> Value {
        self.sources
            .health
            .shown()
            .into_iter()
            .map(|(name, shown)| {
                let since = jiff::Timestamp::from_millisecond(shown.since_ms as i64)
                    .map(|t| t.to_string())
                    .unwrap_or_default();
                let mut entry = json!({"status": shown.health.as_str(), "since": since});
                if !shown.reason.is_empty() {
                    entry["reason"] = json!(shown.reason);
                }
                (name, entry)
            })
            .collect::<serde_json::Map<String, Value>>()
            .into()
    }

    fn caller(&self, env: &SharedEnv, request: &Request<Incoming>) -> Caller {
        match bearer(request) {
            None => Caller::Nobody,
            Some(token) if self.admin.matches(token) => Caller::Admin,
            Some(token) => match self.sources.permissions.user_at(token, env.unix_millis()) {
                Ok(Some(user)) => Caller::User(user),
                Ok(None) => Caller::Unknown {
                    why: "unknown user token".into(),
                    account: String::new(),
                },
                Err(expired_ms) => Caller::Unknown {
                    why: format!(
                        "user token expired at {}",
                        crate::core::time::rfc3339(expired_ms)
                    ),
                    account: self
                        .sources
                        .permissions
                        .user(token)
                        .and_then(|u| u.account)
                        .unwrap_or_default(),
                },
            },
        }
    }

    /// Answers `status` with `reason` and audits the denial (in the caller's account).
    fn deny(
        &self,
        env: &SharedEnv,
        seen: &Seen,
        runtime: &str,
        status: StatusCode,
        reason: impl Into<String>,
    ) -> Response<Body> {
        self.deny_in(env, seen, &seen.caller.account(), runtime, status, reason)
    }

    /// As [`Gateway::deny`], audited in `account`.
    fn deny_in(
        &self,
        env: &SharedEnv,
        seen: &Seen,
        account: &str,
        runtime: &str,
        status: StatusCode,
        reason: impl Into<String>,
    ) -> Response<Body> {
        let reason = reason.into();
        self.record_denial(env, seen, account, runtime, status, &reason);
        json(status, &json!({"error": reason}))
    }

    /// Writes a denial to the audit log.
    fn record_denial(
        &self,
        env: &SharedEnv,
        seen: &Seen,
        account: &str,
        runtime: &str,
        status: StatusCode,
        reason: &str,
    ) {
        self.sources.audit.record(
            env,
            Record {
                actor: seen.caller.actor(),
                account: account.to_string(),
                action: seen.action.clone(),
                runtime: runtime.to_string(),
                outcome: Outcome::Denied,
                status: status.as_u16(),
                reason: reason.to_string(),
            },
        );
    }

    /// Forwards into runtime `name`'s tunnel for a user of its account.
    async fn forward(
        &self,
        env: &SharedEnv,
        seen: &Seen,
        request: Request<Incoming>,
        name: &str,
        inner: &str,
    ) -> Response<Body> {
        // A Git provider's webhook delivery carries no user token: it is signed, and the
        // runtime's webhook source checks the signature (`X-Hub-Signature-256`), as the
        // real runtime's event source behind its public URL does.
        let webhook = request.method() == Method::POST && inner.starts_with("webhooks/");
        let account = match &seen.caller {
            Caller::Nobody if webhook => match self.sources.registry.find(name) {
                Some(runtime) => runtime.account,
                None => {
                    return self.deny(
                        env,
                        seen,
                        name,
                        StatusCode::NOT_FOUND,
                        format!("no runtime {name}"),
                    )
                }
            },
            Caller::Nobody => return self.deny(
                env,
                seen,
                name,
                StatusCode::UNAUTHORIZED,
                "forwarding into a runtime needs a user's token (Authorization: Bearer <token>)",
            ),
            Caller::Unknown { why, .. } => {
                return self.deny(env, seen, name, StatusCode::UNAUTHORIZED, why.clone())
            }
            Caller::Admin => {
                return self.deny(
                    env,
                    seen,
                    name,
                    StatusCode::UNAUTHORIZED,
                    "the admin token registers runtimes; forwarding into one needs a user's token",
                )
            }
            Caller::User(user) => match &user.account {
                Some(account) => account.clone(),
                None => {
                    return self.deny(
                        env,
                        seen,
                        name,
                        StatusCode::FORBIDDEN,
                        format!(
                            "user {} belongs to no account, so reaches no runtime",
                            user.name
                        ),
                    )
                }
            },
        };
        // Another account's runtime is answered as a missing one: its existence is not
        // the caller's to learn.
        if self
            .sources
            .registry
            .find(name)
            .is_none_or(|runtime| runtime.account != account)
        {
            return self.deny(
                env,
                seen,
                name,
                StatusCode::NOT_FOUND,
                format!("no runtime {name} in account {account}"),
            );
        }
        // A member reaches only the runtimes some rule of theirs covers; the rest are
        // answered as missing too.
        if let Caller::User(user) = &seen.caller {
            let runtime = self
                .sources
                .registry
                .find(name)
                .map(|r| r.runtime)
                .unwrap_or_default();
            let cluster = self.sources.registry.info(name).cluster;
            if !self
                .sources
                .permissions
                .reaches(user, &account, &runtime, &cluster)
            {
                return self.deny(
                    env,
                    seen,
                    name,
                    StatusCode::NOT_FOUND,
                    format!(
                        "no runtime {name} in account {account} that user {} may reach",
                        user.name
                    ),
                );
            }
        }
        let query = request
            .uri()
            .query()
            .map(|q| format!("?{q}"))
            .unwrap_or_default();
        let Ok(uri) = format!("/{inner}{query}").parse::<Uri>() else {
            return self.deny(env, seen, name, StatusCode::BAD_REQUEST, "malformed path");
        };
        let mutating = !matches!(
            *request.method(),
            Method::GET | Method::HEAD | Method::OPTIONS
        );
        let (mut parts, body) = request.into_parts();
        parts.uri = uri;
        // The request id is the platform's to set: one a client sends could replay another
        // caller's recorded answer. A user's `Idempotency-Key` becomes `<user>/<key>`, so
        // keys of different users never meet; an anonymous webhook's is ignored (the tunnel
        // server numbers it).
        parts.headers.remove(REQUEST_ID_HEADER);
        if let (Caller::User(user), Some(key)) =
            (&seen.caller, parts.headers.get("idempotency-key"))
        {
            let scoped = key
                .to_str()
                .ok()
                .and_then(|key| http::HeaderValue::from_str(&format!("{}/{key}", user.name)).ok());
            let Some(scoped) = scoped else {
                return self.deny(
                    env,
                    seen,
                    name,
                    StatusCode::BAD_REQUEST,
                    "Idempotency-Key must be visible ASCII",
                );
            };
            parts.headers.insert(REQUEST_ID_HEADER, scoped);
        }
        let forwarded = Request::from_parts(parts, body.map_err(std::io::Error::other).boxed());
        if env.buggify(crate::env::Point::GatewaySlowForward) {
            let pause = env.random_between(
                std::time::Duration::from_millis(500),
                std::time::Duration::from_secs(3),
            );
            env.sleep(pause).await;
        }
        let answer = crate::platform::sources::deliver(env, &self.sources, name, forwarded).await;
        let status = answer.status();
        // The runtime's own refusal (its app-proxy's permission check) is a denial too.
        let refused = matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN);
        if mutating || refused {
            self.sources.audit.record(
                env,
                Record {
                    actor: seen.caller.actor(),
                    account,
                    action: seen.action.clone(),
                    runtime: name.to_string(),
                    outcome: if refused {
                        Outcome::Denied
                    } else {
                        Outcome::Allowed
                    },
                    status: status.as_u16(),
                    reason: if refused {
                        format!("refused by runtime {name}")
                    } else {
                        String::new()
                    },
                },
            );
        }
        answer
    }

    /// `POST /2.0/api/graphql`: the GitOps API, for a user of an account.
    async fn graphql(
        &self,
        env: &SharedEnv,
        seen: &Seen,
        request: Request<Incoming>,
    ) -> Response<Body> {
        use crate::platform::graphql;
        let refuse = |status: StatusCode, code: &str, reason: String| {
            self.record_denial(env, seen, &seen.caller.account(), "", status, &reason);
            graphql::graphql_error(status, code, &reason)
        };
        let user = match &seen.caller {
            Caller::Nobody => {
                return refuse(
                    StatusCode::UNAUTHORIZED,
                    "UNAUTHENTICATED",
                    "the GitOps API needs a user's token (Authorization: Bearer <token>)".into(),
                )
            }
            Caller::Unknown { why, .. } => {
                // A runtime's own token (its source server asks for promotion templates).
                let token = bearer(&request).unwrap_or_default();
                match self.sources.registry.lookup(token) {
                    Some(runtime) if !self.sources.registry.is_revoked(token) => {
                        let viewer = graphql::Viewer::runtime(&runtime, token);
                        return self.graphql_for(env, seen, viewer, request).await;
                    }
                    _ => return refuse(StatusCode::UNAUTHORIZED, "UNAUTHENTICATED", why.clone()),
                }
            }
            Caller::Admin => {
                return refuse(
                    StatusCode::UNAUTHORIZED,
                    "UNAUTHENTICATED",
                    "the admin token registers runtimes; the GitOps API answers an account's users"
                        .into(),
                )
            }
            Caller::User(user) => user.clone(),
        };
        let Some(account) = user.account.clone() else {
            return refuse(
                StatusCode::FORBIDDEN,
                "FORBIDDEN",
                format!("user {} belongs to no account", user.name),
            );
        };
        let token = bearer(&request).unwrap_or_default().to_string();
        let viewer = graphql::Viewer {
            user,
            account,
            token,
            runtime: None,
        };
        self.graphql_for(env, seen, viewer, request).await
    }

    /// The GitOps API's answer to `viewer`'s request: its body read within the limit, then
    /// executed.
    async fn graphql_for(
        &self,
        env: &SharedEnv,
        seen: &Seen,
        viewer: crate::platform::graphql::Viewer,
        request: Request<Incoming>,
    ) -> Response<Body> {
        use crate::platform::graphql;
        let refuse = |status: StatusCode, code: &str, reason: String| {
            self.record_denial(env, seen, &viewer.account, "", status, &reason);
            graphql::graphql_error(status, code, &reason)
        };
        let media = graphql::Media::from_accept(
            request
                .headers()
                .get(http::header::ACCEPT)
                .and_then(|v| v.to_str().ok()),
        );
        let limit = env.limits().graphql_body;
        let body = match crate::env::http::read_body(request.into_body(), limit).await {
            Ok(body) => body,
            Err(crate::env::http::BodyError::TooLarge(limit)) => {
                return refuse(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "PAYLOAD_TOO_LARGE",
                    format!("the body is over the GitOps API's limit of {limit} bytes"),
                )
            }
            Err(e) => {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    "BAD_REQUEST",
                    format!("{e} (at most {limit} bytes)"),
                )
            }
        };
        graphql::answer(
            env,
            self.schema
                .get_or_init(|| graphql::schema_with(env.limits())),
            self.sources.clone(),
            viewer,
            &body,
            media,
        )
        .await
    }

    /// `GET /api/audit`: every entry for the admin, a user's account's for a user.
    fn audit_log(&self, env: &SharedEnv, seen: &Seen, uri: &Uri) -> Response<Body> {
        let account = match &seen.caller {
            Caller::Admin => None,
            Caller::User(
                user @ User {
                    account: Some(account),
                    ..
                },
            ) => {
                if !self.sources.permissions.may_read_audit(user) {
                    return self.deny(
                        env,
                        seen,
                        "",
                        StatusCode::FORBIDDEN,
                        format!(
                            "user {} may not read the audit log of account {account} (it needs the account's admin or an audit:read rule)",
                            user.name
                        ),
                    );
                }
                Some(account.clone())
            }
            Caller::User(user) => {
                return self.deny(
                    env,
                    seen,
                    "",
                    StatusCode::FORBIDDEN,
                    format!(
                        "user {} belongs to no account, so has no audit log",
                        user.name
                    ),
                )
            }
            Caller::Nobody | Caller::Unknown { .. } => {
                return self.deny(
                    env,
                    seen,
                    "",
                    StatusCode::UNAUTHORIZED,
                    "the audit log needs the admin token or a user's token",
                )
            }
        };
        let query = crate::env::http::query(uri);
        let number = |name: &str, default: u64| match query.get(name) {
            None => Ok(default),
            Some(text) => text.parse::<u64>().map_err(|_| {
                format!("query parameter {name}={text:?} is not a non-negative integer")
            }),
        };
        let (after, limit) = match (number("after", 0), number("limit", AUDIT_PAGE as u64)) {
            (Ok(after), Ok(limit)) => (after, limit),
            (Err(e), _) | (_, Err(e)) => {
                return self.deny(env, seen, "", StatusCode::BAD_REQUEST, e);
            }
        };
        let entries = self.sources.audit.query(
            account.as_deref(),
            after,
            usize::try_from(limit).unwrap_or(usize::MAX),
        );
        json(StatusCode::OK, &json!({"entries": entries}))
    }

    async fn register(
        &self,
        env: &SharedEnv,
        seen: &Seen,
        request: Request<Incoming>,
    ) -> Response<Body> {
        if !matches!(seen.caller, Caller::Admin) {
            return self.deny(
                env,
                seen,
                "",
                StatusCode::UNAUTHORIZED,
                "registering a runtime needs the admin token",
            );
        }
        let limit = env.limits().registration_body;
        let body = match crate::env::http::read_body(request.into_body(), limit).await {
            Ok(body) => body,
            Err(e) => return self.deny(env, seen, "", e.status(), e.to_string()),
        };
        let parsed: Value = match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                return self.deny(
                    env,
                    seen,
                    "",
                    StatusCode::BAD_REQUEST,
                    format!("the body is not JSON: {e}"),
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
            return self.deny(
                env,
                seen,
                "",
                StatusCode::BAD_REQUEST,
                "want {\"account\": <name>, \"runtime\": <name>} with [A-Za-z0-9-] names",
            );
        };
        let name = format!("{account}-{runtime}");
        let info = match registration_info(&parsed) {
            Ok(info) => info,
            Err(reason) => {
                return self.deny_in(env, seen, &account, &name, StatusCode::BAD_REQUEST, reason)
            }
        };
        let registration = match self
            .sources
            .registry
            .register_with(env, &account, &runtime, info)
        {
            Ok(registration) => registration,
            Err(taken) => {
                return self.deny_in(
                    env,
                    seen,
                    &account,
                    &name,
                    StatusCode::CONFLICT,
                    taken.to_string(),
                );
            }
        };
        // The old token no longer works; a tunnel opened with it must not outlive it.
        let closed = registration.rotated && self.sources.tunnels.close(&name);
        self.sources.audit.record(
            env,
            Record {
                actor: Actor::Admin,
                account,
                action: seen.action.clone(),
                runtime: name.clone(),
                outcome: Outcome::Allowed,
                status: StatusCode::CREATED.as_u16(),
                reason: match (registration.rotated, closed) {
                    (false, _) => String::new(),
                    (true, false) => "token rotated".to_string(),
                    (true, true) => "token rotated; its open tunnel closed".to_string(),
                },
            },
        );
        json(
            StatusCode::CREATED,
            &json!({"name": name, "token": registration.token, "rotated": registration.rotated}),
        )
    }
}

/// What a registration body says of the runtime besides its name: `kind` (`hybrid`,
/// `hosted`), `accessMode` (`tunnel`, `ingress`), `runtimeVersion`, `cluster`,
/// `ingressHost` (`host:port`, needed in ingress mode); all optional.
fn registration_info(body: &Value) -> Result<crate::platform::registry::Info, String> {
    use crate::platform::registry::{AccessMode, Info, Kind, DEFAULT_CLUSTER};
    let text = |field: &str| -> Result<Option<String>, String> {
        match &body[field] {
            Value::Null => Ok(None),
            Value::String(s) if s.len() <= 253 && s.chars().all(|c| c.is_ascii_graphic()) => {
                Ok(Some(s.clone()))
            }
            other => Err(format!(
                "{field}: want a string of at most 253 visible ASCII characters, not {other}"
            )),
        }
    };
    let kind = match text("kind")?.as_deref() {
        None | Some("hybrid") => Kind::Hybrid,
        Some("hosted") => Kind::Hosted,
        Some(other) => return Err(format!("kind: {other:?} is not hybrid or hosted")),
    };
    let access_mode = match text("accessMode")?.as_deref() {
        None | Some("tunnel") => AccessMode::Tunnel,
        Some("ingress") => AccessMode::Ingress,
        Some(other) => return Err(format!("accessMode: {other:?} is not tunnel or ingress")),
    };
    let ingress_host = text("ingressHost")?.unwrap_or_default();
    if access_mode == AccessMode::Ingress && ingress_host.is_empty() {
        return Err("accessMode ingress needs ingressHost (host:port)".into());
    }
    if !ingress_host.is_empty() && !crate::platform::registry::valid_ingress_host(&ingress_host) {
        return Err(format!(
            "ingressHost: {ingress_host:?} is not host:port (letters, digits, . and - ; a port 1-65535)"
        ));
    }
    Ok(Info {
        kind,
        access_mode,
        version: text("runtimeVersion")?.unwrap_or_default(),
        cluster: text("cluster")?.unwrap_or_else(|| DEFAULT_CLUSTER.into()),
        ingress_host,
    })
}

/// The bearer token of `request`, if it sends one.
fn bearer(request: &Request<Incoming>) -> Option<&str> {
    crate::platform::tunnel::bearer_token(
        request
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok()),
    )
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
    let limits = env.limits().clone();
    crate::env::http::serve_limited(listener, &limits, move |request, _peer| {
        let (env, gateway) = (env.clone(), gateway.clone());
        async move {
            let response = gateway.handle(&env, request).await;
            // What the request changed (a registration, its audit entries) is kept before
            // the client hears of it: a 503 when the store cannot keep it.
            match gateway.sources.audit.durable().await {
                Ok(()) => response,
                Err(unavailable) => json(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &json!({"error": unavailable.to_string()}),
                ),
            }
        }
    })
    .await
}
