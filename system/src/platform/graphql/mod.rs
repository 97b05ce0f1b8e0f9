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
//! `BAD_USER_INPUT`, `RUNTIME_ERROR`) and `extensions.status`; when no top-level field
//! could be answered, that status is the HTTP status too (400 for a query that does not
//! parse or validate).

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

/// Deepest query accepted (an adversarial query cannot nest without end).
pub const MAX_DEPTH: usize = 10;

/// Most complex query accepted. Each field costs 1; a page (`applications`, `releases`)
/// costs its selection times `first` (at most 500), so 500 applications with five fields
/// pass and 500 with their resources, rollouts and workflows do not (ask for fewer).
pub const MAX_COMPLEXITY: usize = 5_000;

/// Largest request body, in bytes.
pub const BODY_LIMIT: usize = 64 * 1024;

/// The schema, with its limits.
pub fn schema() -> ApiSchema {
    Schema::build(QueryRoot, MutationRoot, EmptySubscription)
        .limit_depth(MAX_DEPTH)
        .limit_complexity(MAX_COMPLEXITY)
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

/// Answers one `POST /2.0/api/graphql` of an authenticated `viewer`.
pub async fn answer(
    env: &SharedEnv,
    schema: &ApiSchema,
    sources: Arc<Sources>,
    viewer: Viewer,
    body: &[u8],
) -> Response<Body> {
    let request: async_graphql::Request = match serde_json::from_slice(body) {
        Ok(request) => request,
        Err(e) => {
            let reason = format!(
                "the body is not a GraphQL request ({{\"query\": …, \"variables\"?: …}}): {e}"
            );
            refused_request(env, &sources, &viewer, reason.clone());
            return graphql_error(StatusCode::BAD_REQUEST, "BAD_REQUEST", &reason);
        }
    };
    let scope = Scope {
        env: env.clone(),
        sources: sources.clone(),
        viewer: viewer.clone(),
    };
    let response = schema.execute(request.data(scope)).await;
    let answer = serde_json::to_value(&response).unwrap_or_else(
        |e| json!({"errors": [{"message": format!("the answer could not be written: {e}")}]}),
    );
    let status = status_of(&answer);
    if status == StatusCode::BAD_REQUEST && answer["errors"][0]["extensions"]["code"].is_null() {
        // A query that does not parse or validate (too deep, too complex, unknown field)
        // reached no resolver, so none audited it: it is refused here. (A resolver's own
        // refusals carry a code and are audited where they happen.)
        let reason = answer["errors"][0]["message"]
            .as_str()
            .unwrap_or("invalid query")
            .to_string();
        refused_request(env, &sources, &viewer, reason);
    }
    crate::env::http::json(status, &answer)
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

/// The HTTP status of a GraphQL answer: 200 when any top-level field was answered;
/// otherwise the first error's `extensions.status` (400 when it has none: the query did
/// not parse or validate).
fn status_of(answer: &Value) -> StatusCode {
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
