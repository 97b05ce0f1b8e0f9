//! hardened: the platform's anti-entropy job (a cron-executor job, issue 16 item 7).
//!
//! A runtime's reporter that drops an event (a full queue, research §1.9: "no periodic
//! resync … healing depends on later informer updates") leaves the platform's read model
//! stale until the app changes again — the release notes' "remains as Out of Sync in GitOps
//! Apps" (research §7). The platform runs runtimes of many versions, so it cannot count on
//! every reporter healing itself: every `every`, this job lists each reachable runtime's
//! Applications through its app-proxy (`GET /app-proxy/api/applications`, through the
//! tunnel or the ingress, as the gateway forwards) and turns what the read model lacks into
//! events on the platform's own bus:
//! - an app the runtime holds at a newer `resourceVersion` than the read model's (or one the
//!   read model lacks) → the app as listed, reporter-shaped;
//! - an app of the listed namespace that the read model shows but the listing lacks, held
//!   at a `resourceVersion` older than the listing's → deleted, at the listing's
//!   `resourceVersion` (apps of other namespaces, which a reporter may also report, are
//!   not judged).
//!
//! Both go through the same projection as a reporter's events, ordered by
//! `resourceVersion`, so a late reporter event can neither undo a repair nor be undone by
//! one, and in real mode they are journaled like any event. The job calls the app-proxy with
//! a token it mints for one runtime and one pass (`applications:read` on that runtime only,
//! for [`Config::token_ttl`]): the gateway knows it only at `GET /api/permissions`, so a
//! runtime that kept it could not use it for anything else.
//!
//! The real platform's cron-executor has no public job list (research §6); this job, its
//! period and its route are **inferred** (orrery's design). faithful runs no such job.

use std::collections::BTreeMap;
use std::time::Duration;

use http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;

use super::audit::{Actor, Outcome, Record};
pub use super::events::Listing;
use super::sources::Sources;
pub use super::sources::{JobTokens, USER};
use crate::core::json::Pointer as _;
use crate::env::SharedEnv;
use crate::observe::PlatformEvent;

/// The job's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// How often every runtime is listed. Default 120 s.
    pub every: Duration,
    /// Applications per page of a listing. Default 500.
    pub page: u32,
    /// How long a pass's token is honoured. Default 60 s.
    pub token_ttl: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            every: Duration::from_secs(120),
            page: crate::runtime::app_proxy::LIST_PAGE.0,
            token_ttl: Duration::from_secs(60),
        }
    }
}

/// A pass's error for a runtime in tunnel mode whose tunnel is not open.
pub const NO_TUNNEL: &str = "the runtime's tunnel is not open";

/// What one pass did for one runtime.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pass {
    /// Applications listed.
    pub listed: u64,
    /// Apps sent to the read model because it held an older state (or none).
    pub updated: u64,
    /// Apps sent as deleted because the listing no longer has them.
    pub tombstoned: u64,
    /// Why the runtime could not be listed or repaired (empty: it was).
    pub error: String,
}

/// Runs a pass every `config.every`, for ever.
pub async fn run(env: SharedEnv, config: Config, sources: std::sync::Arc<Sources>) {
    loop {
        env.sleep(config.every).await;
        pass(&env, &config, &sources).await;
    }
}

/// One pass over every registered runtime, in name order; what it did per runtime (tunnel
/// name). A runtime in tunnel mode without an open tunnel is left for the next pass
/// (observed with [`NO_TUNNEL`], not audited).
pub async fn pass(env: &SharedEnv, config: &Config, sources: &Sources) -> BTreeMap<String, Pass> {
    let mut done = BTreeMap::new();
    let Some(events) = sources.events.clone() else {
        return done;
    };
    let connected = sources.tunnels.connected();
    for name in sources.registry.names() {
        let Some(runtime) = sources.registry.find(&name) else {
            continue;
        };
        let tunnel_mode =
            sources.registry.info(&name).access_mode == super::registry::AccessMode::Tunnel;
        if tunnel_mode && !connected.contains(&name) {
            // Left for the next pass; observed, not audited (a runtime down for days would
            // fill the audit log).
            observe(
                env,
                &name,
                &Pass {
                    error: NO_TUNNEL.into(),
                    ..Pass::default()
                },
            );
            continue;
        }
        let token =
            sources
                .job_tokens
                .mint(env, &runtime.account, &runtime.runtime, config.token_ttl);
        let listed = list(env, sources, &name, &token, config.page).await;
        sources.job_tokens.revoke(&token);
        let result = match listed {
            Ok(listing) => {
                let repaired = events.reconcile(env, &name, &listing);
                Pass {
                    listed: listing.items.len() as u64,
                    updated: repaired.updated,
                    tombstoned: repaired.tombstoned,
                    error: repaired.error,
                }
            }
            Err(error) => Pass {
                error,
                ..Pass::default()
            },
        };
        observe(env, &name, &result);
        if result.updated + result.tombstoned > 0 || !result.error.is_empty() {
            let reason = if result.error.is_empty() {
                format!(
                    "listed {} apps: {} sent again, {} shown deleted",
                    result.listed, result.updated, result.tombstoned
                )
            } else {
                format!(
                    "listed {} apps: {} sent again, {} shown deleted; {}",
                    result.listed, result.updated, result.tombstoned, result.error
                )
            };
            sources.audit.record(
                env,
                Record {
                    actor: Actor::Platform,
                    account: runtime.account.clone(),
                    action: "cron anti-entropy".into(),
                    runtime: runtime.runtime.clone(),
                    outcome: Outcome::Allowed,
                    status: if result.error.is_empty() { 200 } else { 503 },
                    reason,
                },
            );
        }
        done.insert(name, result);
    }
    done
}

/// What one pass did for runtime `name`, as the `platform.anti_entropy` observation.
fn observe(env: &SharedEnv, name: &str, pass: &Pass) {
    env.observe(
        PlatformEvent::AntiEntropy {
            runtime: name.to_string(),
            listed: pass.listed,
            updated: pass.updated,
            tombstoned: pass.tombstoned,
            error: pass.error.clone(),
        }
        .into(),
    );
}

/// Lists runtime `name`'s Applications page by page through its app-proxy; the reason it
/// could not.
async fn list(
    env: &SharedEnv,
    sources: &Sources,
    name: &str,
    token: &str,
    page: u32,
) -> Result<Listing, String> {
    let mut listing = Listing::default();
    let mut next = String::new();
    loop {
        let mut path = format!("/app-proxy/api/applications?limit={page}");
        if !next.is_empty() {
            path.push_str("&continue=");
            path.push_str(&crate::env::http::query_escape(&next));
        }
        let request = Request::get(&path)
            .header("authorization", format!("Bearer {token}"))
            .body(crate::env::http::full(bytes::Bytes::new()))
            .map_err(|e| format!("GET {path}: {e}"))?;
        let answer = super::sources::deliver(env, sources, name, request).await;
        let status = answer.status();
        let body = answer
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("GET {path}: reading the answer: {e}"))?
            .to_bytes();
        let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if status != StatusCode::OK {
            let why = parsed["error"].as_str().unwrap_or("no reason given");
            return Err(format!("GET {path} answered {}: {why}", status.as_u16()));
        }
        let (Some(rv), Some(items)) = (
            parsed["resourceVersion"]
                .as_str()
                .and_then(|rv| rv.parse::<u64>().ok()),
            parsed["items"].as_array(),
        ) else {
            return Err(format!(
                "GET {path}: the answer has no numeric resourceVersion or items"
            ));
        };
        if listing.resource_version == 0 {
            listing.resource_version = rv;
            listing.namespace = parsed["namespace"].as_str().unwrap_or("").to_string();
        }
        // An app left out would look deleted: the pass judges no deletion then.
        listing.omitted += parsed["omitted"].as_u64().unwrap_or(0);
        for (n, item) in items.iter().enumerate() {
            let text = |p: &str| item.at(p).and_then(Value::as_str).unwrap_or("");
            if text("/metadata/name").is_empty()
                || text("/metadata/namespace").is_empty()
                || text("/metadata/resourceVersion").parse::<u64>().is_err()
            {
                return Err(format!(
                    "GET {path}: item {n} has no metadata.name, metadata.namespace or numeric metadata.resourceVersion"
                ));
            }
        }
        listing.items.extend(items.iter().cloned());
        next = parsed["continue"].as_str().unwrap_or("").to_string();
        if next.is_empty() {
            return Ok(listing);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_job_token_grants_one_runtimes_reads_until_it_expires_or_is_revoked() {
        let env: SharedEnv = Arc::new(crate::env::RealEnv::new("anti-entropy-test"));
        let tokens = JobTokens::default();
        let token = tokens.mint(&env, "acme", "prod", Duration::from_secs(60));
        let now = env.unix_millis();
        let answer = tokens.answer(&token, now).expect("a live token");
        assert_eq!(answer["account"], "acme");
        assert!(crate::platform::permissions::answer_allows(
            &answer,
            "applications:read",
            "prod",
            Some("shop")
        ));
        // Not another runtime of the account, and nothing but reads.
        assert!(!crate::platform::permissions::answer_allows(
            &answer,
            "applications:read",
            "staging",
            None
        ));
        assert!(!crate::platform::permissions::answer_allows(
            &answer,
            "applications:sync",
            "prod",
            Some("shop")
        ));
        assert!(tokens.answer(&token, now + 60_001).is_none(), "expired");
        assert!(tokens.answer("platform-job-guess", now).is_none());
        tokens.revoke(&token);
        assert!(tokens.answer(&token, now).is_none(), "revoked");
    }
}
