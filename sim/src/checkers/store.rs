//! `no_acknowledged_write_lost` (safety), in a world with the platform's database
//! (`world::database`): what the platform answered as done is in the database at the end,
//! however many times the control plane and the database crashed in between.
//!
//! Judged per runtime name (account and runtime), over the registrations one registrar
//! sent for it, in order (`tenants.registered`):
//! - **The last token answered is current.** The token of the last registration answered
//!   with one is the one the database holds for the runtime, unless a later registration got
//!   no answer or a 5xx (it may have replaced the token without the registrar learning it).
//! - **A replaced token stays refused.** Every token an earlier answer gave, replaced by a
//!   later answered registration, is among the database's revoked tokens: a restart must
//!   not bring it back.
//! - **Every answered registration is audited.** Each has its `graphql createRuntime`
//!   entry (allowed, in the account, for the runtime) in the database's audit log: counted
//!   per runtime, the log has at least as many.
//!
//! The denials' entries are `tenant_isolation`'s to judge; in a world with a database it
//! reads the database's log, so it judges their durability too.

use std::collections::{BTreeMap, BTreeSet};

use orrery_system::observe::WorldEvent;
use orrery_system::platform::audit::Outcome;
use serde_json::json;

use super::{Checker, Class, FinalState, Violation};
use crate::trace::TraceEvent;

/// One registration as its registrar saw it end.
struct Attempt {
    at_ms: u64,
    host: String,
    status: u16,
    /// The answered token's SHA-256 (empty: no token came back).
    token_sha256: String,
}

impl Attempt {
    /// Whether the registration may have happened without the registrar learning its
    /// token: no answer, or the platform's 5xx (a store that could not confirm it yet).
    fn unknown(&self) -> bool {
        self.token_sha256.is_empty() && (self.status == 0 || self.status >= 500)
    }
}

/// The checker: each runtime name's registrations, in the order they ended.
#[derive(Default)]
pub struct NoAcknowledgedWriteLost {
    attempts: BTreeMap<(String, String), Vec<Attempt>>,
}

fn violation(at_ms: u64, host: &str, details: serde_json::Value) -> Violation {
    Violation {
        invariant: "no_acknowledged_write_lost".into(),
        class: Class::Safety,
        at_ms,
        host: host.to_string(),
        details,
    }
}

impl Checker for NoAcknowledgedWriteLost {
    fn name(&self) -> &'static str {
        "no_acknowledged_write_lost"
    }

    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation> {
        if let Some(WorldEvent::TenantRegistered {
            account,
            runtime,
            status,
            token_sha256,
            ..
        }) = event.world()
        {
            self.attempts
                .entry((account.clone(), runtime.clone()))
                .or_default()
                .push(Attempt {
                    at_ms: event.at_ms,
                    host: event.host.clone(),
                    status: *status,
                    token_sha256: token_sha256.clone(),
                });
        }
        None
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let Some(database) = &state.database else {
            return (!self.attempts.is_empty()).then(|| {
                violation(
                    0,
                    "",
                    json!({"what": "registrations were answered but the world has no database to check them in"}),
                )
            });
        };
        let snapshot = &database.snapshot;
        let current: BTreeMap<&str, &str> = snapshot
            .runtimes
            .iter()
            .map(|r| (r.name.as_str(), r.token_sha256.as_str()))
            .collect();
        let revoked: BTreeSet<&str> = snapshot.revoked.iter().map(String::as_str).collect();
        let mut audited: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        for entry in &snapshot.audit {
            if entry.outcome == Outcome::Allowed && entry.action == "graphql createRuntime" {
                *audited
                    .entry((entry.account.as_str(), entry.runtime.as_str()))
                    .or_default() += 1;
            }
        }
        for ((account, runtime), attempts) in &self.attempts {
            let name = format!("{account}-{runtime}");
            let answered: Vec<&Attempt> = attempts
                .iter()
                .filter(|a| !a.token_sha256.is_empty())
                .collect();
            let Some(last) = answered.last() else {
                continue;
            };
            let last_at = attempts
                .iter()
                .rposition(|a| a.token_sha256 == last.token_sha256)
                .unwrap_or(0);
            let unseen_after = attempts[last_at + 1..].iter().any(Attempt::unknown);
            let held = current.get(name.as_str()).copied().unwrap_or("");
            if !unseen_after && held != last.token_sha256 {
                return Some(violation(
                    last.at_ms,
                    &last.host,
                    json!({
                        "what": "a registration the platform answered is not what its database holds",
                        "runtime": name,
                        "answered_token_sha256": last.token_sha256,
                        "held_token_sha256": held,
                    }),
                ));
            }
            if let Some(replaced) = answered[..answered.len() - 1]
                .iter()
                .find(|a| !revoked.contains(a.token_sha256.as_str()))
            {
                return Some(violation(
                    replaced.at_ms,
                    &replaced.host,
                    json!({
                        "what": "a token a later answered registration replaced is not revoked in the database",
                        "runtime": name,
                        "token_sha256": replaced.token_sha256,
                    }),
                ));
            }
            let logged = audited
                .get(&(account.as_str(), runtime.as_str()))
                .copied()
                .unwrap_or(0);
            if logged < answered.len() {
                return Some(violation(
                    last.at_ms,
                    &last.host,
                    json!({
                        "what": "an answered registration is missing from the database's audit log",
                        "runtime": name,
                        "answered": answered.len(),
                        "audited": logged,
                    }),
                ));
            }
        }
        None
    }
}
