//! The GitOps API: GraphQL at `POST /2.0/api/graphql` on the gateway (research §6:
//! `api-graphql`, reached by clients and the CLI with `runtime(name)`, `createRuntime`, …;
//! go-sdk names the runtime fields). Its schema is [`schema.graphql`](schema.graphql),
//! committed and checked for drift by a test.
//!
//! Every answer is the caller's account's only, and within it only what the caller's
//! permissions allow ([`crate::platform::permissions`]): lists leave out what the caller
//! may not read; asking for one object the caller may not read is answered as a missing
//! one (`NOT_FOUND`, 404) when it is in no reach of theirs, and `FORBIDDEN` (403) when they
//! see it but may not do the action. Runtime names are the account's own (`prod`, never
//! `acme-prod`), so another account's runtime cannot even be named. Every mutation and
//! every denial goes to the audit log.
//!
//! Mutations that act in a runtime (sync or refresh an app, commit a change, terminate a
//! workflow) are sent to the runtime's app-proxy — through its tunnel, or its ingress for
//! a runtime in ingress mode — with the caller's own token, so the runtime checks them too.
//!
//! Errors carry `extensions.code` (`UNAUTHENTICATED`, `FORBIDDEN`, `NOT_FOUND`,
//! `BAD_USER_INPUT`, `RUNTIME_ERROR`) and `extensions.status`. HTTP follows GraphQL over
//! HTTP, so standard clients (graphql-js, Apollo, GraphiQL) keep the errors: a request that
//! executed is answered 200 with `data` (null where a field failed) and `errors`; only a
//! request error — a body that is not a GraphQL request, or a document that does not parse
//! or validate, the depth and complexity limits included — is 400, without `data`. The
//! answer is `application/graphql-response+json` when the `Accept` header prefers it, else
//! `application/json`. A body over [`BODY_LIMIT`] is 413 (at the gateway).

mod model;

use std::sync::Arc;

use async_graphql::{EmptySubscription, Schema};
use http::{Response, StatusCode};
use serde_json::{json, Value};

use crate::env::http::Body;
use crate::env::SharedEnv;
use crate::platform::audit::{Actor, Outcome, Record};
use crate::platform::permissions::User;
pub use crate::platform::sources::Sources;

pub use model::{MutationRoot, QueryRoot};

/// The API's schema type.
pub type ApiSchema = Schema<QueryRoot, MutationRoot, EmptySubscription>;

/// The committed schema (SDL); a test holds [`schema`]`().sdl()` to it.
pub const SCHEMA_SDL: &str = include_str!("schema.graphql");

/// Deepest query accepted by default (`gateway.graphql-depth`; an adversarial query cannot
/// nest without end). The data schema has no cycles (nothing nests deeper than 5), so what
/// this bounds is the introspection schema's `ofType` chains: 15 lets the standard
/// introspection query of graphql-js 16 (`getIntrospectionQuery()`, nine `ofType` levels)
/// through, which GraphiQL, code generators and schema checkers send, and refuses depth-60
/// abuse before it runs.
pub const MAX_DEPTH: usize = crate::env::limits::Limits::DEFAULT.graphql_depth;

/// Most complex query accepted by default (`gateway.graphql-complexity`). Each field costs
/// 1; a page (`applications`, `releases`) costs its selection times `first` (at most 500), so
/// 500 applications with five fields pass and 500 with their resources, rollouts and
/// workflows do not (ask for fewer).
pub const MAX_COMPLEXITY: usize = crate::env::limits::Limits::DEFAULT.graphql_complexity;

/// Largest request body by default, in bytes (`gateway.graphql-body`).
pub const BODY_LIMIT: usize = crate::env::limits::Limits::DEFAULT.graphql_body;

/// The schema, with the default limits.
pub fn schema() -> ApiSchema {
    schema_with(&crate::env::limits::Limits::DEFAULT)
}

/// The schema, with `limits`' depth and complexity.
pub fn schema_with(limits: &crate::env::limits::Limits) -> ApiSchema {
    Schema::build(QueryRoot, MutationRoot, EmptySubscription)
        .limit_depth(limits.graphql_depth)
        .limit_complexity(limits.graphql_complexity)
        .finish()
}

/// The authenticated caller of one request.
#[derive(Clone)]
pub struct Viewer {
    /// Who.
    pub user: User,
    /// Their account (a viewer always has one).
    pub account: String,
    /// The token they sent (passed on to a runtime's app-proxy).
    pub token: String,
    /// For a runtime's own token: the runtime's gateway name (`<account>-<runtime>`). Such a
    /// caller is a user of no account's rules ([`Viewer::runtime`]): it may ask only what a
    /// runtime asks (`promotionTemplateByRuntime`); every other field finds nothing it may read.
    pub runtime: Option<String>,
}

impl Viewer {
    /// The viewer a runtime's token makes: its account, and a user with no account of its
    /// own, so every permission check refuses it.
    pub fn runtime(runtime: &crate::platform::registry::Runtime, token: &str) -> Viewer {
        Viewer {
            user: User {
                name: format!("runtime {}", runtime.tunnel_name()),
                account: None,
                role: crate::platform::permissions::Role::Member,
                teams: Default::default(),
            },
            account: runtime.account.clone(),
            token: token.to_string(),
            runtime: Some(runtime.tunnel_name()),
        }
    }
}

/// What a resolver needs besides its arguments.
pub(crate) struct Scope {
    pub(crate) env: SharedEnv,
    pub(crate) sources: Arc<Sources>,
    pub(crate) viewer: Viewer,
}

impl Scope {
    /// Audits `what` with `outcome`.
    pub(crate) fn audit(
        &self,
        field: &str,
        runtime: &str,
        outcome: Outcome,
        status: u16,
        reason: impl Into<String>,
    ) {
        self.sources.audit.record(
            &self.env,
            Record {
                actor: Actor::User {
                    name: self.viewer.user.name.clone(),
                },
                account: self.viewer.account.clone(),
                action: format!("graphql {field}"),
                runtime: runtime.to_string(),
                outcome,
                status,
                reason: reason.into(),
            },
        );
    }
}

/// The media type of an answer, from the request's `Accept` header (GraphQL over HTTP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Media {
    /// `application/json`: what a client gets unless it asks for the newer type.
    Json,
    /// `application/graphql-response+json`, when `Accept` prefers it over `application/json`.
    GraphqlResponse,
}

impl Media {
    /// The media type the `Accept` header prefers (by `q`, then by order; `*/*` and no
    /// header mean `application/json`).
    pub fn from_accept(accept: Option<&str>) -> Media {
        // (media, q) of the two types in the header's order; the first of the highest q wins.
        let mut best: Option<(Media, f32)> = None;
        for range in accept.unwrap_or("").split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = match parts.next().unwrap_or("").to_ascii_lowercase().as_str() {
                "application/graphql-response+json" => Media::GraphqlResponse,
                "application/json" => Media::Json,
                _ => continue,
            };
            let q = parts
                .find_map(|p| p.strip_prefix("q="))
                .and_then(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            if q > 0.0 && best.is_none_or(|(_, best_q)| q > best_q) {
                best = Some((media, q));
            }
        }
        best.map_or(Media::Json, |(media, _)| media)
    }

    fn content_type(self) -> &'static str {
        match self {
            Media::Json => "application/json",
            Media::GraphqlResponse => "application/graphql-response+json",
        }
    }
}

/// Answers one `POST /2.0/api/graphql` of an authenticated `viewer`, as `media`.
pub async fn answer(
    env: &SharedEnv,
    schema: &ApiSchema,
    sources: Arc<Sources>,
    viewer: Viewer,
    body: &[u8],
    media: Media,
) -> Response<Body> {
    let request: async_graphql::Request = match serde_json::from_slice(body) {
        Ok(request) => request,
        Err(e) => {
            let reason = format!(
                "the body is not a GraphQL request ({{\"query\": …, \"variables\"?: …}}): {e}"
            );
            refused_request(env, &sources, &viewer, reason.clone());
            return with_media(
                graphql_error(StatusCode::BAD_REQUEST, "BAD_REQUEST", &reason),
                media,
            );
        }
    };
    let scope = Scope {
        env: env.clone(),
        sources: sources.clone(),
        viewer: viewer.clone(),
    };
    let response = schema.execute(request.data(scope)).await;
    let mut answer = serde_json::to_value(&response).unwrap_or_else(
        |e| json!({"errors": [{"message": format!("the answer could not be written: {e}")}]}),
    );
    let status = if request_error(&answer) {
        // A query that does not parse or validate (too deep, too complex, unknown field)
        // reached no resolver, so none audited it: it is refused here. (A resolver's own
        // refusals carry a code and are audited where they happen.)
        let reason = answer["errors"][0]["message"]
            .as_str()
            .unwrap_or("invalid query")
            .to_string();
        refused_request(env, &sources, &viewer, reason);
        if let Some(fields) = answer.as_object_mut() {
            // A request error has no `data` entry (GraphQL over HTTP).
            fields.remove("data");
        }
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    with_media(crate::env::http::json(status, &answer), media)
}

/// Whether an executed answer is a request error: errors, no field answered, and none of
/// them a resolver's (those carry `extensions.code`).
fn request_error(answer: &Value) -> bool {
    let errors = answer["errors"].as_array().filter(|e| !e.is_empty());
    errors.is_some_and(|errors| {
        answer["data"].is_null()
            && errors
                .iter()
                .all(|e| e["extensions"]["code"].is_null() && e["path"].is_null())
    })
}

fn with_media(mut response: Response<Body>, media: Media) -> Response<Body> {
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(media.content_type()),
    );
    response
}

/// Audits a request refused with 400 before any resolver ran.
fn refused_request(env: &SharedEnv, sources: &Sources, viewer: &Viewer, reason: String) {
    sources.audit.record(
        env,
        Record {
            actor: Actor::User {
                name: viewer.user.name.clone(),
            },
            account: viewer.account.clone(),
            action: "graphql".into(),
            runtime: String::new(),
            outcome: Outcome::Denied,
            status: 400,
            reason,
        },
    );
}

/// The status a GraphQL answer's errors carry, as a REST-minded caller reads it: 200 when
/// any top-level field was answered (or nothing failed); otherwise the first error's
/// `extensions.status` (400 when it has none: the query did not parse or validate). The
/// HTTP status is 200 for every executed request; the simulated world's probes and the
/// tests read this one to tell a refusal from an answer.
pub fn error_status(answer: &Value) -> StatusCode {
    let errors = answer["errors"].as_array().filter(|e| !e.is_empty());
    let Some(errors) = errors else {
        return StatusCode::OK;
    };
    let answered = answer["data"]
        .as_object()
        .is_some_and(|fields| fields.values().any(|v| !v.is_null()));
    if answered {
        return StatusCode::OK;
    }
    errors[0]["extensions"]["status"]
        .as_u64()
        .and_then(|s| u16::try_from(s).ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::BAD_REQUEST)
}

/// A GraphQL-shaped error answer outside execution.
pub fn graphql_error(status: StatusCode, code: &str, message: &str) -> Response<Body> {
    crate::env::http::json(
        status,
        &json!({"errors": [{"message": message, "extensions": {"code": code, "status": status.as_u16()}}]}),
    )
}

#[cfg(test)]
mod tests;
