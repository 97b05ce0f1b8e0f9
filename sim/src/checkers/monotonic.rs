//! `probe_rv_monotonic`: the probe never sees an object's resourceVersion go backwards.
//! (RVs are one global increasing counter, so even a re-created object has a larger RV.)

use std::collections::BTreeMap;

use serde_json::json;

use super::{Checker, Class, FinalState, Violation};
use crate::harness::trace::TraceEvent;

/// Highest RV seen per object name.
#[derive(Default)]
pub struct RvMonotonic {
    highest: BTreeMap<String, u64>,
}

impl Checker for RvMonotonic {
    fn name(&self) -> &'static str {
        "probe_rv_monotonic"
    }

    fn on_event(&mut self, event: &TraceEvent) -> Option<Violation> {
        let kind = event.observation.kind.as_str();
        if !matches!(kind, "probe.apply" | "probe.init_apply" | "probe.delete") {
            return None;
        }
        let detail = &event.observation.detail;
        let name = detail["name"].as_str()?.to_string();
        let rv: u64 = detail["rv"].as_str()?.parse().ok()?;
        let previous = self.highest.get(&name).copied().unwrap_or(0);
        if rv < previous {
            return Some(Violation {
                invariant: self.name().into(),
                class: Class::Safety,
                at_ms: event.at_ms,
                host: event.host.clone(),
                details: json!({"object": name, "seen_rv": rv, "previously_seen_rv": previous, "event": kind}),
            });
        }
        self.highest.insert(name, rv);
        None
    }

    fn at_end(&mut self, _state: &FinalState) -> Option<Violation> {
        None
    }
}
