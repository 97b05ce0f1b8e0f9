//! `tenant_isolation` (safety), in a multi-tenant world (`world::tenants`): three things
//! must hold for every account.
//!
//! - **No leak.** No answer to a user of one account (or to a request without a user)
//!   carries another account's data: every app's destination namespace carries its account's
//!   marker, and each adversary probe records the first foreign marker its answer held.
//! - **No foreign reach.** No request reaches a runtime of another account than its
//!   caller's: each tenant runtime's app-proxy stand-in records the token that reached it;
//!   and no probe that must be refused (another account's objects, a member beyond their
//!   rule, a replayed registration, no or a forged token) succeeds.
//! - **Every denial audited.** Every probe answered 400, 401, 403 or 404 has an audit entry
//!   with the same actor and status (matched one to one; the events API's refusals are not
//!   the gateway's and are not counted).

use std::collections::BTreeMap;

use orrery_system::observe::WorldEvent;
use orrery_system::platform::audit::{Actor, Outcome};
use serde_json::json;

use super::{Checker, Class, FinalState, Violation};
use crate::trace::TraceEvent;

/// Statuses the gateway refuses with, and audits.
const DENIALS: [u16; 4] = [400, 401, 403, 404];

/// Probes that must be refused: a success is a breach whatever the answer carried (a
/// member beyond their rule, a write into another account, a registration replayed).
const MUST_REFUSE: [&str; 10] = [
    "no_token",
    "forged_token",
    "expired_token",
    "foreign_path",
    "dotdot_path",
    "encoded_path",
    "foreign_query",
    "foreign_mutation",
    "member_write",
    "replayed_registration",
];

/// The checker.
#[derive(Default)]
pub struct TenantIsolation {
    /// Denials the probes got, by (actor, status): how many, and the first one's time.
    denied: BTreeMap<(String, u16), (u64, u64)>,
}

/// The audit log's name of an actor, as probes record it.
fn actor_name(actor: &Actor) -> String {
    match actor {
        Actor::Anonymous => "anonymous".into(),
        Actor::Admin => "admin".into(),
        Actor::User { name } => format!("user:{name}"),
        Actor::Platform => "platform".into(),
    }
}

impl Checker for TenantIsolation {
    fn name(&self) -> &'static str {
        "tenant_isolation"
    }

    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation> {
        match event.world()? {
            WorldEvent::TenantProbe {
                kind,
                account,
                actor,
                victim,
                status,
                leak,
            } => {
                if !leak.is_empty() {
                    return Some(Violation {
                        invariant: self.name().into(),
                        class: Class::Safety,
                        at_ms: event.at_ms,
                        host: event.host.clone(),
                        details: json!({
                            "what": "an answer carried another account's data",
                            "probe": kind, "as_account": account, "victim": victim,
                            "status": status, "data_of": leak,
                        }),
                    });
                }
                if MUST_REFUSE.contains(&kind.as_str()) && (200..300).contains(status) {
                    return Some(Violation {
                        invariant: self.name().into(),
                        class: Class::Safety,
                        at_ms: event.at_ms,
                        host: event.host.clone(),
                        details: json!({
                            "what": "a request that must be refused succeeded",
                            "probe": kind, "as_account": account, "victim": victim,
                            "status": status,
                        }),
                    });
                }
                if !actor.is_empty() && DENIALS.contains(status) {
                    let entry = self
                        .denied
                        .entry((actor.clone(), *status))
                        .or_insert((0, event.at_ms));
                    entry.0 += 1;
                }
                None
            }
            WorldEvent::TenantReached { account, caller } => {
                (caller != account).then(|| Violation {
                    invariant: self.name().into(),
                    class: Class::Safety,
                    at_ms: event.at_ms,
                    host: event.host.clone(),
                    details: json!({
                        "what": "a request reached a runtime of another account than its caller's",
                        "runtime_account": account,
                        "caller_account": if caller.is_empty() { "(no user)" } else { caller },
                    }),
                })
            }
            _ => None,
        }
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let mut audited: BTreeMap<(String, u16), u64> = BTreeMap::new();
        for entry in state.audit.iter().filter(|e| e.outcome == Outcome::Denied) {
            *audited
                .entry((actor_name(&entry.actor), entry.status))
                .or_default() += 1;
        }
        self.denied
            .iter()
            .find(|(key, (count, _))| audited.get(*key).copied().unwrap_or(0) < *count)
            .map(|((actor, status), (count, first_ms))| Violation {
                invariant: "tenant_isolation".into(),
                class: Class::Safety,
                at_ms: *first_ms,
                host: String::new(),
                details: json!({
                    "what": "a refused request is missing from the audit log",
                    "actor": actor, "status": status, "refused": count,
                    "audited": audited.get(&(actor.clone(), *status)).copied().unwrap_or(0),
                }),
            })
    }
}
