//! `platform_converges`: after the calm phase the platform shows every app as the API
//! server has it.

use std::collections::BTreeMap;

use serde_json::json;

use orrery_system::platform::events::read_model::AppState;

use super::{AppTruth, Checker, Class, FinalState, Violation};
use crate::trace::TraceEvent;

/// Keys of apps the platform shows differently from the API server: missing, stale, or
/// still shown (not deleted) although gone.
pub fn stale_apps(apps: &[AppTruth], reported: &BTreeMap<String, AppState>) -> Vec<String> {
    let mut stale: Vec<String> = apps
        .iter()
        .filter(|a| match reported.get(&a.key) {
            Some(r) => {
                r.deleted
                    || r.sync_status != a.sync_status
                    || r.revision != a.revision
                    || r.health_status != a.health_status
            }
            None => true,
        })
        .map(|a| a.key.clone())
        .collect();
    let live: std::collections::BTreeSet<&str> = apps.iter().map(|a| a.key.as_str()).collect();
    stale.extend(
        reported
            .iter()
            .filter(|(k, r)| !r.deleted && !live.contains(k.as_str()))
            .map(|(k, _)| k.clone()),
    );
    stale.sort();
    stale
}

/// The checker (stateless: it reads the final state).
pub struct PlatformConverges;

impl Checker for PlatformConverges {
    fn name(&self) -> &'static str {
        "platform_converges"
    }

    fn on_event(&mut self, _event: &TraceEvent) -> Option<Violation> {
        None
    }

    fn at_end(&mut self, state: &FinalState) -> Option<Violation> {
        let stale = stale_apps(&state.apps, &state.reported);
        if stale.is_empty() {
            return None;
        }
        let example = |key: &String| {
            let truth = state.apps.iter().find(|a| &a.key == key);
            json!({
                "app": key,
                "apiserver": truth.map(|t| json!({"sync": t.sync_status, "revision": t.revision, "health": t.health_status})),
                "platform": state.reported.get(key).map(|r| json!({"sync": r.sync_status, "revision": r.revision, "health": r.health_status, "deleted": r.deleted, "rv": r.resource_version})),
            })
        };
        Some(Violation {
            invariant: self.name().into(),
            class: Class::Safety,
            at_ms: state.end_ms,
            host: "platform".into(),
            details: json!({
                "apps": state.apps.len(),
                "stale_or_missing": stale.len(),
                "examples": stale.iter().take(5).map(example).collect::<Vec<_>>(),
            }),
        })
    }
}
